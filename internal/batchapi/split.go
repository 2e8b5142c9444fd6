package batchapi

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// A staged record whose budget cannot cover its most spend is cut to
// what the budget covers (docs/batch-api.md, "Spend and budgets"): its
// first k requests, the most whose reservation fits what is left of the
// batch's budget and of its tenant's, stay in it (and are reserved for
// and created next); the rest becomes a record of its own, staged, that
// waits its turn (reserved for when there is room again, cut again, or
// sent to real time at the deadline). Only when not even the first
// request fits is the batch paused.
//
// The cut never leaves an item in two records, nor in none:
//
//  1. the two parts' inputs and manifests are written as new objects;
//  2. the record is changed (compare and set) to its first part, naming
//     the rest in Split: from then on the rest's items are held by the
//     Split objects, and the record can be created with its first part;
//  3. the rest's record is created (its ID is derived from the subject
//     and its first staged message's sequence, as any record's: a second
//     creation after a crash collides and is no matter);
//  4. Split is cleared.
//
// A worker that finds Split set does 3 and 4 before anything else.

// fit is the number of p's first requests whose most spend fits what is
// left of the budgets that bind batch b (0: not even one; p.Items: all of
// them, the room having grown meanwhile).
func (r *Runner) fit(ctx context.Context, store *queue.ProviderBatchStore, p queue.ProviderBatch, b kftype.BatchInfo, bd binding, price spend.Price) (int, error) {
	ba, ta, err := r.ledger.Read(ctx, b.ID, bd.tenant, bd.period)
	if err != nil {
		return 0, err
	}
	room := spend.Amount(math.MaxInt64)
	if ba.Budget != spend.NoLimit {
		room = min(room, ba.Budget-ba.Spent-ba.Reserved)
	}
	if bd.tenant != "" && bd.tenantLimit != spend.NoLimit {
		room = min(room, bd.tenantLimit-ta.Spent-ta.Reserved)
	}
	if room <= 0 {
		return 0, nil
	}
	in, err := store.Object(ctx, p.Input)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	var sum spend.Amount
	k := 0
	errFull := errors.New("full")
	err = readLines(in, func(l []byte) error {
		req, err := requestOf(p.Provider, l)
		if err != nil {
			return fmt.Errorf("input of %s, line %d: %w", p.ID, k+1, err)
		}
		i, o, _ := provider.Ceiling(req, p.Endpoint)
		sum += price.Ceiling(i, o)
		if spend.Amount(math.Ceil(float64(sum)*r.discount())) > room {
			return errFull
		}
		k++
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return 0, err
	}
	return k, nil
}

// split cuts staged record p after its first k requests (0 < k <
// p.Items): steps 1 and 2 above, then the rest's record.
func (r *Runner) split(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, k int) error {
	items, err := r.manifest(ctx, store, *p)
	if err != nil {
		return err
	}
	if k <= 0 || k >= len(items) {
		return fmt.Errorf("record %s: a cut after %d of its %d requests", p.ID, k, len(items))
	}
	id := recordID(r.q.Config().Stream, p.Subject, items[k].Seq)
	n := nonce()
	first := newChunk(ctx, store, p.ID+"."+n+".input", p.Provider, p.Endpoint, r.o.Bounds[p.Provider])
	rest := newChunk(ctx, store, id+"."+n+".input", p.Provider, p.Endpoint, r.o.Bounds[p.Provider])
	in, err := store.Object(ctx, p.Input)
	if err != nil {
		first.abort(ctx)
		rest.abort(ctx)
		return err
	}
	i := 0
	err = readLines(in, func(l []byte) error {
		if i >= len(items) {
			return fmt.Errorf("input of %s: more lines than its manifest's %d", p.ID, len(items))
		}
		req, err := requestOf(p.Provider, l)
		if err != nil {
			return fmt.Errorf("input of %s, line %d: %w", p.ID, i+1, err)
		}
		c := first
		if i >= k {
			c = rest
		}
		it := items[i]
		m := &queue.StagedMsg{Seq: it.Seq, Subject: p.Subject, Item: kftype.Item{ID: it.ID, Cost: it.Cost}}
		i++
		return c.add(m, inputLine(p.Provider, c.n, p.Endpoint, req))
	})
	in.Close()
	if err == nil && i != len(items) {
		err = fmt.Errorf("input of %s: %d lines, its manifest %d", p.ID, i, len(items))
	}
	if err != nil {
		first.abort(ctx)
		rest.abort(ctx)
		return err
	}
	cut := *p
	cut.Input, cut.Manifest = first.name, p.ID+"."+n+".manifest"
	cut.Items, cut.Bytes, cut.LastSeq, cut.InputFileID = first.n, first.size, first.last, ""
	cut.Split = &queue.ProviderBatchSplit{ID: id, FirstSeq: rest.first, LastSeq: rest.last, Items: rest.n, Bytes: rest.size,
		Input: rest.name, Manifest: id + "." + n + ".manifest"}
	err = first.finish(ctx, cut.Manifest)
	if err != nil {
		rest.abort(ctx)
	} else if err = rest.finish(ctx, cut.Split.Manifest); err == nil {
		err = r.update(ctx, store, &cut)
	}
	if err != nil {
		store.DeleteObjects(ctx, cut)
		store.DeleteObjects(ctx, queue.ProviderBatch{Input: cut.Split.Input, Manifest: cut.Split.Manifest})
		return err
	}
	store.DeleteObjects(ctx, *p) // the whole's objects (a crash leaves them: see "Left to do")
	r.log.Info("the budget covers part of a provider batch: it is cut, the rest made a record of its own", zap.String("batch", p.Batch),
		zap.String("record", p.ID), zap.Int("items", cut.Items), zap.String("rest", id), zap.Int("rest_items", cut.Split.Items))
	*p = cut
	if r.crashed("split") {
		return errCrash
	}
	return r.splitRest(ctx, store, p)
}

// splitRest creates the record of p's Split (steps 3 and 4): staged, its
// messages purged already, on the least loaded key.
func (r *Runner) splitRest(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch) error {
	s := p.Split
	rest := queue.ProviderBatch{ID: s.ID, Batch: p.Batch, Kind: p.Kind, Provider: p.Provider, Scope: p.Scope, Endpoint: p.Endpoint,
		Credential: p.Credential, State: queue.PBStaged, Subject: p.Subject, FirstSeq: s.FirstSeq, LastSeq: s.LastSeq, Purged: true,
		Items: s.Items, Bytes: s.Bytes, Input: s.Input, Manifest: s.Manifest, Deadline: p.Deadline, CreatedAt: r.now().UTC()}
	if keys := r.keys(p.Kind); len(keys) > 0 {
		rest.Credential = r.pickKey(keys)
	}
	switch err := store.Create(ctx, &rest); {
	case err == nil:
		r.seen(rest)
	case !errors.Is(err, jetstream.ErrKeyExists): // made by an attempt that died before clearing Split
		return err
	}
	if r.crashed("split-rest") {
		return errCrash
	}
	p.Split = nil
	return r.update(ctx, store, p)
}
