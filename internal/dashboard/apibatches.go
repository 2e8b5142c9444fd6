package dashboard

import (
	"context"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
)

// apiBatches is the API's api.Batches: the batch objects come from the
// tally (the results followed as they come: a program polling a batch
// costs a lookup), and a change the API makes is shown at once (the
// record it wrote kept unless the watch has a later one, a reading now).
type apiBatches struct{ s *Server }

// Batch is batch id's row at this moment, rec its record read now (nil:
// none), or a not found error when it has neither a record nor results.
func (b apiBatches) Batch(_ context.Context, id string, rec *kftype.BatchInfo) (batchview.Batch, error) {
	var r kftype.BatchInfo
	if rec != nil {
		r = *rec
	}
	row, ok := b.s.tally.batch(id, r, rec != nil, time.Now().UTC())
	if !ok {
		return row, ops.Errorf(ops.ErrNotFound, "no batch %s (never enqueued, or its record and results are gone)", id)
	}
	return row, nil
}

// Changed keeps the record just written and asks the collector for a
// reading now.
func (b apiBatches) Changed(rec *kftype.BatchInfo) {
	if rec != nil {
		b.s.tally.recordIfNewer(*rec)
	}
	select {
	case b.s.poke <- struct{}{}:
	default:
	}
}

// recordIfNewer keeps a record just written unless the watch delivered a
// later revision already (the page then shows the change at once).
func (t *tally) recordIfNewer(b kftype.BatchInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.records[b.ID]; !ok || old.Rev < b.Rev {
		t.records[b.ID] = b
	}
}
