package batchapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// What becomes of an item at the end of its provider batch.
const (
	endSucceeded = iota + 1 // its request succeeded: its result
	endFailed               // it failed as a real-time request would for good (a 4xx): dead letter and failed result
	endCancelled            // its batch was cancelled: a cancelled result
	endRealTime             // anything else: it runs in real time
)

// fate is what becomes of an item whose request's result line is l (nil:
// it has none) in a provider batch whose batch was cancelled (or not).
func fate(l *line, cancelled bool) int {
	switch {
	case l != nil && l.Type == lineSucceeded:
		return endSucceeded
	case l != nil && l.Type == lineErrored && permanent(l.Status):
		return endFailed
	case cancelled:
		return endCancelled
	}
	return endRealTime
}

// permanent: a request that failed with this status fails the same when
// sent again (a 4xx but a timeout, a conflict or a rate limit).
func permanent(status int) bool {
	return status >= 400 && status < 500 && status != http.StatusRequestTimeout &&
		status != http.StatusConflict && status != http.StatusTooManyRequests
}

// finish ends a record: every item gets what its fate says (rem, when
// set, is the provider batch as last read: its results are read when it
// has any), what its requests cost is settled into the spend ledger, then
// the record is done and its objects deleted. Each result is stored
// unless the item has one, and the cost is settled once (spend.go), so
// doing it again after a crash records nothing twice; an item sent to
// real time is published on its batch's lane with a message ID of its own
// (<batch>/<item>/rt-<record>) unless it has a result, and the batch's
// record is touched so that the workers pull the lane. A record given up
// on (its items in real time already) is ended by finishLate instead.
func (r *Runner) finish(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, rem *remote) error {
	if !p.GaveUpAt.IsZero() {
		return r.finishLate(ctx, store, p, rem)
	}
	b, _ := r.batch(p.Batch)
	cancelled := b.State == kftype.BatchCancelled || p.Cancel == queue.CancelBatch
	items, err := r.manifest(ctx, store, *p)
	if err != nil {
		return err
	}
	lines, ran, err := r.resultLines(ctx, *p, rem, len(items))
	if err != nil {
		return err
	}
	fates := make([]int, len(items))
	need := map[int]bool{} // items whose request is needed (dead letters, real time)
	for i := range items {
		fates[i] = fate(lines[i], cancelled)
		if fates[i] == endFailed || fates[i] == endRealTime {
			need[i] = true
		}
	}
	requests, err := r.requests(ctx, store, *p, need)
	if err != nil {
		return err
	}
	costs, spent := r.lineCosts(*p, lines)
	now := r.now().UTC()
	via := p.ProviderID
	var results []kftype.Result
	var back []kftype.Item
	counts := map[int]int{}
	for i, it := range items {
		counts[fates[i]]++
		switch fates[i] {
		case endSucceeded:
			res := r.result(*p, it, kftype.OutcomeSucceeded, lines[i], "", via, now)
			res.Spend = costs[i]
			results = append(results, res)
		case endFailed:
			l := lines[i]
			errText := fmt.Sprintf("http: %d %s%s (in provider batch %s)", l.Status, http.StatusText(l.Status), snippetOf(l), via)
			dl := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{
				Item: it.ID, Batch: p.Batch, Kind: p.Kind, Scope: p.Scope, Endpoint: r.itemEndpoint(*p), Reason: kftype.ReasonPermanent,
				Attempts: 1, Failures: 1, Error: r.scrub.String(errText), Worker: r.o.Owner, FailedAt: now,
			}, Payload: requests[i]}
			if err := r.q.PutDeadLetter(ctx, dl); err != nil {
				return err
			}
			res := r.result(*p, it, kftype.OutcomeFailed, l, kftype.ReasonPermanent+": "+errText, via, now)
			res.Spend = costs[i]
			results = append(results, res)
		case endCancelled:
			results = append(results, cancelledResult(it.ID, p.Batch, p.Kind, r.o.Owner, now))
		case endRealTime:
			back = append(back, r.backItem(*p, it, requests[i]))
		}
	}
	if len(results) > 0 {
		if _, err := r.q.PutResultsIfAbsent(ctx, results); err != nil {
			return err
		}
	}
	if r.crashed("results-recorded") {
		return errCrash
	}
	if _, err := r.settle(ctx, *p, b, spent); err != nil {
		return err
	}
	if r.crashed("spend-settled") {
		return errCrash
	}
	if err := r.realTime(ctx, p, back); err != nil {
		return err
	}
	if r.crashed("real-time-sent") {
		return errCrash
	}
	p.Succeeded, p.FailedN, p.Cancelled, p.RealTime = counts[endSucceeded], counts[endFailed], counts[endCancelled], counts[endRealTime]
	return r.markDone(ctx, store, p, ran, spent, now)
}

// manifest reads a record's items, in the order of its requests.
func (r *Runner) manifest(ctx context.Context, store *queue.ProviderBatchStore, p queue.ProviderBatch) ([]queue.ProviderBatchItem, error) {
	items := make([]queue.ProviderBatchItem, 0, p.Items)
	err := store.ReadManifest(ctx, p, func(_ int, it queue.ProviderBatchItem) error {
		items = append(items, it)
		return nil
	})
	return items, err
}

// resultLines reads the result line of each of a record's n requests
// (nil: it has none) when rem, the provider batch as last read, has
// results; ran counts the requests that got a reply.
func (r *Runner) resultLines(ctx context.Context, p queue.ProviderBatch, rem *remote, n int) (lines []*line, ran int, err error) {
	lines = make([]*line, n)
	if rem == nil || p.ProviderID == "" || !(rem.Ended || rem.OutputFileID != "" || rem.ErrorFileID != "") {
		return lines, 0, nil
	}
	a, err := r.api(p.Kind, p.Credential)
	if err != nil {
		return nil, 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, transferTimeout)
	defer cancel()
	err = a.results(rctx, *rem, func(l line) error {
		i, ok := customIndex(l.CustomID)
		if !ok || i >= len(lines) {
			r.log.Warn("a result line of a custom_id the record does not have", zap.String("record", p.ID), zap.String("custom_id", l.CustomID))
			return nil
		}
		if l.Status != 0 {
			ran++
		}
		lines[i] = &l
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return lines, ran, nil
}

// lineCosts is what each request cost: its reply's usage at the model's
// price, through the Batch API; every line that says its usage counts
// (the provider bills it whatever becomes of the item). spent is their
// sum.
func (r *Runner) lineCosts(p queue.ProviderBatch, lines []*line) (costs []spend.Amount, spent spend.Amount) {
	costs = make([]spend.Amount, len(lines))
	if price, ok := spend.Prices(r.cfg.Pool.Prices).Lookup(p.Scope); ok {
		for i, l := range lines {
			costs[i] = r.lineCost(l, price)
			spent += costs[i]
		}
	}
	return costs, spent
}

// backItem is item it of p as the real-time lanes carry it, its request
// req.
func (r *Runner) backItem(p queue.ProviderBatch, it queue.ProviderBatchItem, req []byte) kftype.Item {
	return kftype.Item{ID: it.ID, Batch: p.Batch, Kind: p.Kind, Payload: req, Cost: it.Cost,
		Scope: p.Scope, Endpoint: r.itemEndpoint(p), Fallback: p.ID}
}

// markDone says a record is done (ran: its requests that got a reply;
// spent: what they cost) and deletes its objects.
func (r *Runner) markDone(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, ran int, spent spend.Amount, now time.Time) error {
	if ran > 0 && r.o.Metrics != nil {
		r.o.Metrics.Requests.WithLabelValues(p.Kind, metrics.ViaBatchAPI).Add(float64(ran))
	}
	p.State = queue.PBDone
	if p.EndedAt.IsZero() {
		p.EndedAt = now
	}
	if err := r.update(ctx, store, p); err != nil {
		return err
	}
	store.DeleteObjects(ctx, *p)
	r.count(p.Provider, "done")
	r.log.Info("provider batch done", zap.String("batch", p.Batch), zap.String("record", p.ID), zap.String("provider_batch", p.ProviderID),
		zap.Int("succeeded", p.Succeeded), zap.Int("failed", p.FailedN), zap.Int("real_time", p.RealTime), zap.Int("cancelled", p.Cancelled),
		zap.Int("spent_twice", p.SpentTwice), zap.Stringer("spend", spent))
	return nil
}

// itemEndpoint is an item's Endpoint as the real-time lanes carry it: ""
// for the provider's default.
func (r *Runner) itemEndpoint(p queue.ProviderBatch) string {
	if p.Endpoint == defaultEndpoint(p.Provider) {
		return ""
	}
	return p.Endpoint
}

// requests reads the requests of the items need names from a record's
// input.
func (r *Runner) requests(ctx context.Context, store *queue.ProviderBatchStore, p queue.ProviderBatch, need map[int]bool) (map[int][]byte, error) {
	out := make(map[int][]byte, len(need))
	if len(need) == 0 {
		return out, nil
	}
	in, err := store.Object(ctx, p.Input)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	i := 0
	err = readLines(in, func(l []byte) error {
		if need[i] {
			req, err := requestOf(p.Provider, l)
			if err != nil {
				return fmt.Errorf("input of %s, line %d: %w", p.ID, i+1, err)
			}
			out[i] = bytes.Clone(req)
		}
		i++
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) != len(need) {
		return nil, fmt.Errorf("input of %s: %d lines, the manifest has more", p.ID, i)
	}
	return out, nil
}

// realTime publishes items on their batch's lane (those without a result
// yet) and touches the batch's record so that the workers pull the lane.
func (r *Runner) realTime(ctx context.Context, p *queue.ProviderBatch, items []kftype.Item) error {
	if len(items) == 0 {
		return nil
	}
	done := map[string]bool{}
	if err := r.q.ItemsWithResults(ctx, p.Batch, func(id string) { done[id] = true }); err != nil {
		return err
	}
	pub, err := r.q.NewPublisher(0)
	if err != nil {
		return err
	}
	n := 0
	for _, it := range items {
		if done[it.ID] {
			continue
		}
		if err := pub.Add(ctx, it); err != nil {
			break
		}
		n++
	}
	if _, err := pub.Flush(ctx); err != nil {
		return err
	}
	if _, err := r.q.AddToBatch(ctx, p.Batch, p.Kind, 0, queue.WithScopes(p.Scope)); err != nil {
		return err
	}
	r.count(p.Provider, "real_time")
	r.log.Info("items of a provider batch sent to real time", zap.String("batch", p.Batch), zap.String("record", p.ID), zap.Int("items", n))
	return nil
}

// result is an item's result from its request's result line, as a
// real-time run of it would have recorded it: the reply as its output
// (scrubbed, bounded by jobs.max_output), its status and request ID, the
// key, and via: the provider batch.
func (r *Runner) result(p queue.ProviderBatch, it queue.ProviderBatchItem, outcome string, l *line, errText, via string, at time.Time) kftype.Result {
	res := kftype.Result{Item: it.ID, Batch: p.Batch, Kind: p.Kind, Outcome: outcome, Attempts: 1, CredentialID: p.Credential,
		Error: r.scrub.String(errText), StatusCode: l.Status, RequestID: r.scrub.String(l.RequestID), Via: via,
		Worker: r.o.Owner, FinishedAt: at}
	body := r.scrub.Bytes(l.Body)
	if limit := r.cfg.Jobs.MaxOutput; limit > 0 && len(body) > limit {
		body, res.OutputTruncated = body[:limit], true
	}
	if utf8.Valid(body) {
		res.Output = string(body)
	} else {
		res.Output, res.OutputEncoding = base64.StdEncoding.EncodeToString(body), "base64"
	}
	return res
}

// snippetOf quotes a failed request's error for its error text.
func snippetOf(l *line) string {
	s := l.Message
	if s == "" {
		s = string(l.Body)
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		return ""
	}
	return ": " + s
}
