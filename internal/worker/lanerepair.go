package worker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// The operation that writes a batch's record registers its lanes
// (batchlanes, through the queue handle's lane writer); a worker only
// reads the schedule. Writing it here is recovery: when Redis lost the
// schedule (a pick says lanes.ErrLost), and every laneRepairEvery, or when
// a changed batch's lanes do not come (lanewait.go), by one worker of the
// fleet at a time, for what a writer left undone (it could not reach
// Redis, or died between the record and its lanes).

// laneRepairEvery spaces the fleet's looks for records whose lanes the
// schedule lacks.
const laneRepairEvery = 10 * time.Second

// repairLanes registers again, from the records the worker knows, the
// lanes the schedule holds at an older revision than their record, or
// not at all, and then says the schedule is complete. Before the records
// that existed at start are known it does nothing: the schedule would not
// be complete.
func (w *Worker) repairLanes(ctx context.Context, why string) {
	if !w.batches.isReady() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w.batches.mu.Lock()
	all := make([]kftype.BatchInfo, 0, len(w.batches.records))
	for _, b := range w.batches.records {
		all = append(all, b)
	}
	w.batches.mu.Unlock()
	n, err := w.lanes.Repair(ctx, all)
	if err != nil {
		w.log.Warn("registering the batches' lanes again", zap.String("why", why), zap.Error(err))
	}
	if n > 0 {
		w.log.Info("batches whose lanes the schedule lacked registered again", zap.String("why", why), zap.Int("batches", n))
		w.batches.Poke()
	}
}

// repairLanesClaimed is repairLanes by one worker of the fleet per
// laneRepairEvery.
func (w *Worker) repairLanesClaimed(ctx context.Context) {
	if ok, err := w.sched.Claim(ctx, "repair-lanes", w.id, laneRepairEvery/2); err != nil || !ok {
		return
	}
	w.repairLanes(ctx, "a writer may have left its lanes undone")
}
