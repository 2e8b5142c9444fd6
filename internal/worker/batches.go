package worker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// batchView is what a worker knows of the batches (docs/waiting-model.md):
// their records, as the bucket's watch delivers them (the operation that
// wrote a record registered its lanes in the schedule: batchlanes); the
// lanes' consumers it pulls from (a batch has a lane per scope of its
// items, kftype.Lane); and which cancelled batches it found swept.
type batchView struct {
	mu      sync.Mutex
	records map[string]kftype.BatchInfo   // by batch ID
	cons    map[string]jetstream.Consumer // by lane
	swept   map[string]bool               // cancelled batches with nothing left
	// wake tells the puller something changed (a batch enqueued, resumed).
	wake chan struct{}
	// awaiting are the running batches whose record changed, by the
	// revision their lanes are awaited at (lanewait.go); awaited tells
	// awaitLanes of a new one.
	awaiting map[string]uint64
	awaited  chan struct{}
	// ready closes once the records that existed at start are known.
	ready     chan struct{}
	readyOnce sync.Once
}

func newBatchView() *batchView {
	return &batchView{
		records: map[string]kftype.BatchInfo{}, cons: map[string]jetstream.Consumer{}, swept: map[string]bool{},
		wake: make(chan struct{}, 1), ready: make(chan struct{}),
		awaiting: map[string]uint64{}, awaited: make(chan struct{}, 1),
	}
}

// State is batch's state as last seen (running when unknown: an item of a
// batch the worker has not heard of yet, or published without a record).
// A lane may be given for its batch.
func (v *batchView) State(batch string) (state kftype.BatchState, prio int) {
	batch, _ = kftype.LaneParts(batch)
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.records[batch]
	if !ok {
		return kftype.BatchRunning, kftype.PriorityDefault
	}
	return b.State, b.Priority
}

// gen is the revision of the record of lane's batch: every lane of a
// batch is registered at it.
func (v *batchView) gen(lane string) uint64 {
	batch, _ := kftype.LaneParts(lane)
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.records[batch].Rev
}

// isReady reports whether the records that existed at start are known.
func (v *batchView) isReady() bool {
	select {
	case <-v.ready:
		return true
	default:
		return false
	}
}

// Poke tells the puller something changed.
func (v *batchView) Poke() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// watchBatches keeps the view: every record and every change of the
// batches bucket. It returns when ctx ends; a watch that fails is started
// again.
func (w *Worker) watchBatches(ctx context.Context) {
	b := newBackoff(100*time.Millisecond, 5*time.Second)
	for ctx.Err() == nil {
		err := w.q.WatchBatchesCaughtUp(ctx, w.batchChanged, func() {
			w.batches.readyOnce.Do(func() { close(w.batches.ready) })
		})
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("watching the batches failed; watching again", zap.Error(err), zap.Duration("in", b.peek()))
		b.wait(ctx)
	}
}

// batchChanged takes a record the watch delivered and tells the puller
// (and, for a running batch, awaitLanes: its writer registers its lanes a
// moment after the record); a deleted one is forgotten (the batch holds
// nothing any more).
func (w *Worker) batchChanged(b kftype.BatchInfo) {
	v := w.batches
	v.mu.Lock()
	if old, ok := v.records[b.ID]; ok && old.Rev > b.Rev {
		v.mu.Unlock()
		return
	}
	if b.Deleted {
		old := v.records[b.ID]
		delete(v.records, b.ID)
		delete(v.swept, b.ID)
		delete(v.awaiting, b.ID)
		for _, lane := range old.Lanes() {
			delete(v.cons, lane)
		}
		v.mu.Unlock()
		return
	}
	v.records[b.ID] = b
	await := b.State == kftype.BatchRunning && v.isReady()
	if await {
		v.awaiting[b.ID] = b.Rev
	}
	v.mu.Unlock()
	if await {
		select {
		case v.awaited <- struct{}{}:
		default:
		}
	}
	v.Poke()
}

// laneConsumer returns the consumer of lane, opened once.
func (w *Worker) laneConsumer(ctx context.Context, lane string) (jetstream.Consumer, error) {
	v := w.batches
	v.mu.Lock()
	c, ok := v.cons[lane]
	v.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := w.q.LaneConsumer(ctx, lane)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.cons[lane] = c
	v.mu.Unlock()
	return c, nil
}

// forgetConsumer drops a lane's consumer handle (deleted, or lost).
func (w *Worker) forgetConsumer(lane string) {
	w.batches.mu.Lock()
	delete(w.batches.cons, lane)
	w.batches.mu.Unlock()
}

// checkDrained looks at a lane whose fetch came back empty: when the
// stream holds none of its messages (a message stays until it is
// acknowledged or terminated) as of the record it knows, the lane leaves
// the schedule and its consumer is deleted. A lane with messages left
// (running, waiting for a redelivery, or behind a consumer still being
// made) stays: the schedule lets it rest and looks again.
func (w *Worker) checkDrained(ctx context.Context, lane string) {
	gen := w.batches.gen(lane)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := w.q.LaneMessages(ctx, lane)
	if err != nil || n > 0 {
		return
	}
	ok, err := w.sched.Drained(ctx, lane, gen)
	if err != nil || !ok {
		return
	}
	w.forgetConsumer(lane)
	if err := w.q.DeleteLaneConsumer(ctx, lane); err != nil {
		w.log.Debug("deleting a drained lane's consumer", zap.Error(err))
	}
}

// sweepCancelled drains cancelled batches once a second: their items not
// started are recorded as cancelled and their messages deleted, including
// those that come back after a worker held them (a nak's back-off, a dead
// worker's ack wait). One worker at a time sweeps a batch. Once every
// recordSweepEvery, one worker of the fleet also deletes the records of
// batches that hold nothing any more (queue.SweepBatchRecords); every
// tenantResumeEvery it resumes the batches paused for a tenant's budget
// that covers a start again (resumeTenants); every laneRepairEvery, one
// worker of the fleet registers the lanes a writer left undone
// (repairLanesClaimed).
func (w *Worker) sweepCancelled(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	lastRecords, lastTenants, lastRepair := time.Now(), time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.ledger != nil && len(w.cfg.Tenants) > 0 && time.Since(lastTenants) >= tenantResumeEvery {
			lastTenants = time.Now()
			w.resumeTenants(ctx, w.ledger)
		}
		if time.Since(lastRepair) >= laneRepairEvery {
			lastRepair = time.Now()
			w.repairLanesClaimed(ctx)
		}
		if time.Since(lastRecords) >= recordSweepEvery {
			lastRecords = time.Now()
			w.sweepRecords(ctx)
		}
		w.batches.mu.Lock()
		var todo []string
		for id, b := range w.batches.records {
			if b.State == kftype.BatchCancelled && !w.batches.swept[id] {
				todo = append(todo, id)
			}
		}
		w.batches.mu.Unlock()
		for _, id := range todo {
			w.sweep(ctx, id)
		}
	}
}

// recordSweepEvery spaces the sweeps of batch records.
const recordSweepEvery = 10 * time.Minute

// sweepRecords deletes the records of batches that hold nothing any more,
// one worker of the fleet at a time.
func (w *Worker) sweepRecords(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if ok, err := w.sched.Claim(ctx, "sweep-records", w.id, recordSweepEvery/2); err != nil || !ok {
		return
	}
	gone, err := w.q.SweepBatchRecords(ctx, time.Now())
	if err != nil {
		w.log.Warn("sweeping batch records", zap.Error(err))
	}
	if len(gone) > 0 {
		w.log.Info("records of batches that hold nothing any more deleted", zap.Int("batches", len(gone)))
	}
}

func (w *Worker) sweep(ctx context.Context, batch string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if ok, err := w.sched.Claim(ctx, "sweep:"+batch, w.id, 5*time.Second); err != nil || !ok {
		return
	}
	drained, unacked, err := w.q.DrainCancelled(ctx, batch, w.id)
	if err != nil {
		w.log.Warn("sweeping a cancelled batch", zap.String("batch", batch), zap.Error(err))
		return
	}
	if drained > 0 {
		w.log.Info("items of a cancelled batch recorded as cancelled", zap.String("batch", batch), zap.Int("items", drained))
	}
	if unacked == 0 {
		w.batches.mu.Lock()
		w.batches.swept[batch] = true
		rec := w.batches.records[batch]
		w.batches.mu.Unlock()
		all, err := w.q.BatchLanes(ctx, batch)
		if err != nil { // those it cannot name lapse on their own
			all = kftype.BatchInfo{ID: batch, Scopes: rec.Scopes}.Lanes()
		}
		for _, lane := range all {
			w.forgetConsumer(lane)
			if err := w.q.DeleteLaneConsumer(ctx, lane); err != nil {
				w.log.Debug("deleting a cancelled batch's consumer", zap.Error(err))
			}
		}
	}
}
