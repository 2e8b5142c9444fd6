package batchview

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// The rate of a running batch, read once here or sampled by the
// dashboard: the items finished within RateWindow, over that window (or
// over a shorter span, if at least MinRateSpan).
const (
	RateWindow  = time.Minute
	MinRateSpan = 2 * time.Second
)

// ErrNoBatch: the batch has neither a record nor results.
var ErrNoBatch = queue.ErrNoBatch

// Read returns batch id's row, read now: its results, then its record
// (so that an item enqueued meanwhile is in the total rather than done
// beyond it). It fails with ErrNoBatch when the batch has neither a
// record nor results.
func Read(ctx context.Context, q *queue.Queue, id string) (Batch, error) {
	now := time.Now()
	c := newCounter(now)
	if err := q.ReadResults(ctx, id, c.add); err != nil {
		return Batch{}, fmt.Errorf("reading the results of batch %q: %w", id, err)
	}
	rec, err := q.Batch(ctx, id)
	known := err == nil
	if err != nil && !errors.Is(err, queue.ErrNoBatch) {
		return Batch{}, err
	}
	bc := c.batches[id]
	if !known && bc == nil {
		return Batch{}, fmt.Errorf("%w: %q (never enqueued, or its record and results are gone)", ErrNoBatch, id)
	}
	row := c.row(id, rec, known, now)
	if !rec.Deadline.IsZero() {
		pbs, err := q.ProviderBatches(ctx, id)
		if err != nil {
			return Batch{}, fmt.Errorf("reading the provider batches of batch %q: %w", id, err)
		}
		row.ProviderBatches = ProviderBatches(pbs)
	}
	return row, nil
}

// List returns the row of every batch, read now: those with a record,
// newest first, then those with results only, the most recently finished
// first.
func List(ctx context.Context, q *queue.Queue) ([]Batch, error) {
	now := time.Now()
	c := newCounter(now)
	if err := q.ReadResults(ctx, "", c.add); err != nil {
		return nil, fmt.Errorf("reading the results: %w", err)
	}
	recs, err := q.Batches(ctx)
	if err != nil {
		return nil, err
	}
	var pbs map[string][]queue.ProviderBatch
	if slices.ContainsFunc(recs, func(b kftype.BatchInfo) bool { return !b.Deadline.IsZero() }) {
		all, err := q.ProviderBatches(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("reading the provider batches: %w", err)
		}
		pbs = map[string][]queue.ProviderBatch{}
		for _, p := range all {
			pbs[p.Batch] = append(pbs[p.Batch], p)
		}
	}
	out := make([]Batch, 0, max(len(recs), len(c.batches)))
	seen := make(map[string]bool, len(recs))
	for _, rec := range recs {
		seen[rec.ID] = true
		row := c.row(rec.ID, rec, true, now)
		row.ProviderBatches = ProviderBatches(pbs[rec.ID])
		out = append(out, row)
	}
	var rest []Batch
	for id := range c.batches {
		if !seen[id] {
			rest = append(rest, c.row(id, kftype.BatchInfo{}, false, now))
		}
	}
	sort.Slice(rest, func(i, j int) bool {
		a, b := rest[i].LastResultAt, rest[j].LastResultAt
		if a != nil && b != nil && !a.Equal(*b) {
			return a.After(*b)
		}
		return rest[i].ID < rest[j].ID
	})
	return append(out, rest...), nil
}

// counter counts the results of one reading of the results stream. The
// reading gives the latest result of every item, but a result stored
// while it reads (an item's new outcome) comes too: each item is counted
// once, by the last result read. An item is kept as one 64-bit word (a
// 61-bit hash of its ID and 3 bits of outcome), 8 bytes a result.
type counter struct {
	seed    maphash.Seed
	now     time.Time
	batches map[string]*batchCount
}

type batchCount struct {
	words       []uint64
	kind        string
	first, last time.Time
	spent       spend.Amount
	fallbacks   Fallbacks
}

// The low 3 bits of a word.
const (
	wordOK        = 1
	wordFailed    = 2
	wordCancelled = 3
	wordOutcome   = 3
	wordRecent    = 4 // finished within RateWindow before the reading
	wordBits      = 3
)

func newCounter(now time.Time) *counter {
	return &counter{seed: maphash.MakeSeed(), now: now, batches: map[string]*batchCount{}}
}

func (c *counter) add(r kftype.Result) error {
	b := c.batches[r.Batch]
	if b == nil {
		b = &batchCount{kind: OwnKind(r)}
		c.batches[r.Batch] = b
	}
	h := maphash.String(c.seed, r.Item)
	b.fallbacks.Add(h, r)
	w := h << wordBits
	switch r.Outcome {
	case kftype.OutcomeSucceeded:
		w |= wordOK
	case kftype.OutcomeCancelled:
		w |= wordCancelled
	default:
		w |= wordFailed
	}
	if f := r.FinishedAt; !f.IsZero() {
		if !f.Before(c.now.Add(-RateWindow)) {
			w |= wordRecent
		}
		if b.first.IsZero() || f.Before(b.first) {
			b.first = f
		}
		if f.After(b.last) {
			b.last = f
		}
	}
	b.words = append(b.words, w)
	b.spent += r.Spend // the results stream holds each item's latest result once
	return nil
}

// tally counts batch id's items by their last result read, and those
// finished lately.
func (c *counter) tally(id string) (t Tally, recent int64) {
	b := c.batches[id]
	if b == nil {
		return Tally{}, 0
	}
	// A stable sort by hash keeps the reading's order among one item's
	// results: the last of a run of equal hashes is the latest.
	slices.SortStableFunc(b.words, func(x, y uint64) int {
		switch x, y = x>>wordBits, y>>wordBits; {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	for i, w := range b.words {
		if i+1 < len(b.words) && b.words[i+1]>>wordBits == w>>wordBits {
			continue
		}
		switch w & wordOutcome {
		case wordOK:
			t.Succeeded++
		case wordCancelled:
			t.Cancelled++
		default:
			t.Failed++
		}
		if w&wordRecent != 0 {
			recent++
		}
	}
	t.Kind, t.First, t.Last, t.Spent = b.kind, b.first, b.last, b.spent
	t.Fallbacks = b.fallbacks.Counts()
	return t, recent
}

// row is batch id's row with its rate at now: over its whole run once it
// is complete, else the items finished lately.
func (c *counter) row(id string, rec kftype.BatchInfo, known bool, now time.Time) Batch {
	t, recent := c.tally(id)
	row := Row(id, rec, known, t)
	row.SetRate(rateOnce(row, rec, known, t, recent, now), now)
	return row
}

// WholeRunRate is a complete batch's rate: its items/s over its whole run,
// from its enqueue (when its record is known) or its first result,
// whichever came first, to its last result (0 when that is no span).
func WholeRunRate(row Batch, rec kftype.BatchInfo, known bool, first, last time.Time) float64 {
	from := first
	if known && !rec.EnqueuedAt.IsZero() && (from.IsZero() || rec.EnqueuedAt.Before(from)) {
		from = rec.EnqueuedAt
	}
	if span := last.Sub(from).Seconds(); span > 0 {
		return float64(row.Done) / span
	}
	return 0
}

// rateOnce is a rate read once: items/s over the whole run once the batch
// is complete (from its enqueue or first result to its last result), else
// the items finished within RateWindow before now over that window (or
// since the first result, when that is shorter but at least MinRateSpan).
func rateOnce(row Batch, rec kftype.BatchInfo, known bool, t Tally, recent int64, now time.Time) float64 {
	if row.Complete {
		return WholeRunRate(row, rec, known, t.First, t.Last)
	}
	if t.First.IsZero() || recent == 0 {
		return 0
	}
	span := min(RateWindow, now.Sub(t.First))
	if span < MinRateSpan {
		return 0
	}
	return float64(recent) / span.Seconds()
}
