package dashboard

import (
	"context"
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// Batch is one batch's progress: a row of /api/status's "batches" and
// the object GET /api/batches/{id} answers (`batch show --json`'s keys).
// It is internal/batchview's, which the CLI shows too.
type Batch = batchview.Batch

// Listing bounds and outcomes (the rate's window and least span are
// batchview's).
const (
	maxBatches       = 50 // batches shown, the most recently active first
	outcomeOK        = uint8(1)
	outcomeNotOK     = uint8(2)
	outcomeCancelled = uint8(3)
)

// tally counts each batch's items by their latest outcome, from the
// results stream (which keeps the latest result of every item). Items are
// kept as 64-bit hashes of their IDs: about 20 bytes an item.
type tally struct {
	mu      sync.Mutex
	batches map[string]*batchTally
	records map[string]kftype.BatchInfo
	// ready: the results stream has been read up to its end once. Until
	// then counts climb as old results are read, which is no rate.
	ready bool
	// pbatches are the deadline batches' provider batches, read every
	// collection (readProviderBatches).
	pbatches map[string][]batchview.ProviderBatch
}

type batchTally struct {
	items                        map[uint64]uint8
	succeeded, failed, cancelled int64
	kind                         string
	first, last                  time.Time // finish times of the results seen
	samples                      []doneSample
	fallbacks                    batchview.Fallbacks
}

type doneSample struct {
	at   time.Time
	done int64
}

func newTally() *tally {
	return &tally{batches: map[string]*batchTally{}, records: map[string]kftype.BatchInfo{}}
}

func itemHash(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// result counts one result; a result seen again (the stream read anew
// after a reconnect) changes nothing, a newer outcome of the same item
// replaces its older one.
func (t *tally) result(r kftype.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.batches[r.Batch]
	if b == nil {
		b = &batchTally{items: map[uint64]uint8{}, kind: batchview.OwnKind(r)}
		t.batches[r.Batch] = b
	}
	now := outcomeNotOK
	switch r.Outcome {
	case kftype.OutcomeSucceeded:
		now = outcomeOK
	case kftype.OutcomeCancelled:
		now = outcomeCancelled
	}
	k := itemHash(r.Item)
	b.fallbacks.Add(k, r)
	if was := b.items[k]; was != now {
		*b.count(was)--
		*b.count(now)++
		b.items[k] = now
	}
	if f := r.FinishedAt; !f.IsZero() {
		if b.first.IsZero() || f.Before(b.first) {
			b.first = f
		}
		if f.After(b.last) {
			b.last = f
		}
	}
}

// count is the counter of an outcome (a scratch one for none).
func (b *batchTally) count(outcome uint8) *int64 {
	switch outcome {
	case outcomeOK:
		return &b.succeeded
	case outcomeNotOK:
		return &b.failed
	case outcomeCancelled:
		return &b.cancelled
	}
	var none int64
	return &none
}

// caughtUp marks the first reading of the results stream as complete.
func (t *tally) caughtUp() {
	t.mu.Lock()
	t.ready = true
	t.mu.Unlock()
}

// record keeps a batch's record (its total).
func (t *tally) record(b kftype.BatchInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b.Deleted {
		// The batch holds nothing any more (its results are gone too): its
		// counts go with it, so memory follows the batches alive.
		delete(t.records, b.ID)
		delete(t.batches, b.ID)
		return
	}
	t.records[b.ID] = b
}

// rows returns the batches to show at now, the running ones first, then the
// most recently active; it also takes the sample their rates come from.
func (t *tally) rows(now time.Time) []Batch {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := map[string]bool{}
	for id := range t.batches {
		ids[id] = true
	}
	for id := range t.records {
		ids[id] = true
	}
	out := make([]Batch, 0, len(ids))
	active := map[string]time.Time{}
	running := map[string]bool{}
	for id := range ids {
		b := t.batches[id]
		if b == nil {
			b = &batchTally{items: map[uint64]uint8{}}
			t.batches[id] = b
		}
		rec, known := t.records[id]
		if t.ready {
			b.samples = append(b.samples, doneSample{at: now, done: b.succeeded + b.failed + b.cancelled})
			for len(b.samples) > 2 && now.Sub(b.samples[1].at) >= batchview.RateWindow {
				b.samples = b.samples[1:]
			}
		}
		row := t.withProviderBatches(b.row(id, rec, known, now))
		last := rec.UpdatedAt
		if b.last.After(last) {
			last = b.last
		}
		active[id] = last
		// Running: short of its total; without a record, results lately.
		running[id] = known && !row.Complete || !known && now.Sub(b.last) < batchview.RateWindow
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := running[out[i].ID], running[out[j].ID]; ri != rj {
			return ri
		}
		if a, b := active[out[i].ID], active[out[j].ID]; !a.Equal(b) {
			return a.After(b)
		}
		return out[i].ID < out[j].ID
	})
	if len(out) > maxBatches {
		out = out[:maxBatches]
	}
	return out
}

// batch returns one batch's row at now, with rec its record when known
// (fresher than the one the watch delivered, by its revision); ok is
// false when the batch has neither a record nor results.
func (t *tally) batch(id string, rec kftype.BatchInfo, known bool, now time.Time) (Batch, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.records[id]; ok && (!known || old.Rev > rec.Rev) {
		rec, known = old, true
	}
	b := t.batches[id]
	if b == nil && !known {
		return Batch{}, false
	}
	if b == nil {
		b = &batchTally{}
	}
	return t.withProviderBatches(b.row(id, rec, known, now)), true
}

// row is the batch's Batch at now; rec is its record when known. The row
// and its state are batchview's; the rate is taken from this tally's
// samples.
func (b *batchTally) row(id string, rec kftype.BatchInfo, known bool, now time.Time) Batch {
	row := batchview.Row(id, rec, known, batchview.Tally{Succeeded: b.succeeded, Failed: b.failed, Cancelled: b.cancelled,
		Kind: b.kind, First: b.first, Last: b.last, Fallbacks: b.fallbacks.Counts()})
	row.SetRate(b.rate(row, rec, known), now)
	return row
}

// withProviderBatches adds batch id's provider batches to its row (the
// caller holds t.mu).
func (t *tally) withProviderBatches(row Batch) Batch {
	if pbs := t.pbatches[row.ID]; len(pbs) > 0 {
		row.ProviderBatches = pbs
	}
	return row
}

// readProviderBatches reads the provider batches of the batches that
// have a deadline (nothing when none has).
func (s *Server) readProviderBatches(ctx context.Context) {
	s.tally.mu.Lock()
	deadlines := false
	for _, b := range s.tally.records {
		if !b.Deadline.IsZero() {
			deadlines = true
			break
		}
	}
	s.tally.mu.Unlock()
	if !deadlines {
		return
	}
	all, err := s.q.ProviderBatches(ctx, "")
	if err != nil {
		s.log.Warn("reading the provider batches", zap.Error(err))
		return
	}
	by := map[string][]queue.ProviderBatch{}
	for _, p := range all {
		by[p.Batch] = append(by[p.Batch], p)
	}
	rows := make(map[string][]batchview.ProviderBatch, len(by))
	for id, ps := range by {
		rows[id] = batchview.ProviderBatches(ps)
	}
	s.tally.mu.Lock()
	s.tally.pbatches = rows
	s.tally.mu.Unlock()
}

// rate is items/s: over the samples of the last minute while the batch
// runs (0 when nothing was done in it), over the whole run once complete.
func (b *batchTally) rate(row Batch, rec kftype.BatchInfo, known bool) float64 {
	if row.Complete {
		return batchview.WholeRunRate(row, rec, known, b.first, b.last)
	}
	if len(b.samples) < 2 {
		return 0
	}
	first, last := b.samples[0], b.samples[len(b.samples)-1]
	span := last.at.Sub(first.at)
	if span < batchview.MinRateSpan {
		return 0
	}
	return float64(last.done-first.done) / span.Seconds()
}
