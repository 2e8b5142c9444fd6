package ops

import (
	"context"
	"errors"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// Done reports whether the batch of record rec is done, the rule pause
// and cancel refuse a batch by: a batch whose lanes (one per scope) still
// hold a message is not done, whatever its results say: an item waits,
// runs, waits for a redelivery, or was replayed from a dead letter while
// its old result still counts it; otherwise it is done once its results
// give every item of its total an outcome (batchview's state done, read
// now). The lanes are counted in the stream, not through their consumers:
// a work-queue stream keeps a message until it is acknowledged or
// terminated, and the workers delete a drained lane's consumer. The view
// (read only when the lanes are empty) says the counts.
func Done(ctx context.Context, q *queue.Queue, rec kftype.BatchInfo) (batchview.Batch, bool, error) {
	lanes, err := q.BatchLanes(ctx, rec.ID)
	if err != nil {
		return batchview.Batch{}, false, unavailable(err, "reading batch %s's lanes", rec.ID)
	}
	for _, lane := range lanes {
		n, err := q.LaneMessages(ctx, lane)
		if err != nil {
			return batchview.Batch{}, false, unavailable(err, "reading batch %s's lanes", rec.ID)
		}
		if n > 0 {
			return batchview.Batch{}, false, nil
		}
	}
	view, err := batchview.Read(ctx, q, rec.ID)
	switch {
	case errors.Is(err, batchview.ErrNoBatch):
		return view, false, noRecord(rec.ID)
	case err != nil:
		return view, false, unavailable(err, "reading batch %s", rec.ID)
	}
	return view, view.State == batchview.StateDone, nil
}
