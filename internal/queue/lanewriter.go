package queue

import (
	"context"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// LaneWriter registers a batch record's lanes in the lane schedule
// (internal/batchlanes.Writer). A queue handle given one calls it after
// every batch record the handle writes, so that the operation that
// changes a batch is the one that tells the schedule; the workers only
// read the schedule.
type LaneWriter interface {
	// WriteLanes registers b's lanes; its failures are its own to report
	// (the record is written whatever it does).
	WriteLanes(ctx context.Context, b kftype.BatchInfo)
}

// SetLaneWriter makes q call w after every batch record it writes (nil:
// none). Call it before q is shared.
func (q *Queue) SetLaneWriter(w LaneWriter) { q.laneWriter = w }

// wroteBatch is where every write of a batch record ends (AddToBatch,
// updateBatch): b, as written, with its revision, goes to the lane
// writer.
func (q *Queue) wroteBatch(ctx context.Context, b kftype.BatchInfo) {
	if q.laneWriter != nil {
		q.laneWriter.WriteLanes(ctx, b)
	}
}
