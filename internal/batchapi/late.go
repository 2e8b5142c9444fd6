package batchapi

import (
	"context"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// A provider batch cancelled for the deadline is waited for at most half
// the margin (a provider may take minutes to end a cancel: OpenAI up to
// 10); then keyfleet gives up on it (docs/batch-api.md, "The deadline
// rule"):
//
//	cancelling ──(GaveUpAt written)──▶ its items sent to real time ──▶ late
//	late ──(the provider ended it)──▶ collecting ──▶ done
//
// GaveUpAt is written before anything is sent: from then on none of the
// record's results is recorded (real time records its items'), so a
// worker that finds it set after a crash sends the items again (their
// message IDs, <batch>/<item>/rt-<record>, make the server drop what it
// has; items with a result are not sent) and never collects the record as
// if its items were its own. The record keeps its budget reservation
// until the provider ends it (the most its requests can cost: the
// provider may still bill some); then what its requests cost is settled
// like any record's, and those the provider finished count as spent
// twice: their items ran in real time too.

// giveUp sends the items of a record given up on to real time (those
// without a result), then says it is late.
func (r *Runner) giveUp(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch) error {
	items, err := r.manifest(ctx, store, *p)
	if err != nil {
		return err
	}
	need := make(map[int]bool, len(items))
	for i := range items {
		need[i] = true
	}
	requests, err := r.requests(ctx, store, *p, need)
	if err != nil {
		return err
	}
	back := make([]kftype.Item, len(items))
	for i, it := range items {
		back[i] = r.backItem(*p, it, requests[i])
	}
	if err := r.realTime(ctx, p, back); err != nil {
		return err
	}
	if r.crashed("gave-up-sent") {
		return errCrash
	}
	p.State, p.RealTime = queue.PBLate, len(back)
	return r.update(ctx, store, p)
}

// finishLate ends a record given up on, once its provider ended it (rem,
// or nil when it is gone): no result is recorded and nothing is sent to
// real time (its items are there); what its requests cost is settled
// once, and the requests the provider finished are counted as spent
// twice (SpentTwice, keyfleet_batch_api_requests_spent_twice_total).
func (r *Runner) finishLate(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, rem *remote) error {
	b, _ := r.batch(p.Batch)
	lines, ran, err := r.resultLines(ctx, *p, rem, p.Items)
	if err != nil {
		return err
	}
	_, spent := r.lineCosts(*p, lines)
	twice := 0
	for _, l := range lines {
		if l != nil && l.Type == lineSucceeded {
			twice++
		}
	}
	if _, err := r.settle(ctx, *p, b, spent); err != nil {
		return err
	}
	if r.crashed("late-settled") {
		return errCrash
	}
	p.SpentTwice = twice
	if twice > 0 {
		r.log.Warn("the provider finished requests of a provider batch given up on: their items ran in real time too (spent twice, recorded once)",
			zap.String("batch", p.Batch), zap.String("record", p.ID), zap.String("provider_batch", p.ProviderID),
			zap.Int("spent_twice", twice), zap.Stringer("spend", spent))
		if r.o.Metrics != nil {
			r.o.Metrics.SpentTwice.WithLabelValues(p.Provider).Add(float64(twice))
		}
	}
	return r.markDone(ctx, store, p, ran, spent, r.now().UTC())
}
