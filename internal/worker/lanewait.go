package worker

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// The watch delivers a batch's record as soon as it is written, a moment
// before its writer registers its lanes in the schedule (batchlanes): a
// puller woken by the record alone could find nothing new to pick and
// idle for up to a second. awaitLanes looks at the schedule (a read)
// until it holds the changed running batches' lanes at their records'
// revisions, and wakes the puller then.

// Looks of awaitLanes: the first after laneWaitFirst, doubling up to
// laneWaitMost; after laneWaitGiveUp the writer is taken to have failed
// and the lane repair (lanerepair.go) registers the lanes.
const (
	laneWaitFirst  = 2 * time.Millisecond
	laneWaitMost   = 100 * time.Millisecond
	laneWaitGiveUp = 2 * time.Second
)

// awaitLanes runs until ctx ends.
func (w *Worker) awaitLanes(ctx context.Context) {
	v := w.batches
	since := map[string]awaitedSince{}
	step := laneWaitFirst
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var tick <-chan time.Time
		if v.hasAwaiting() {
			t.Reset(step)
			tick = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-v.awaited:
			t.Stop()
			step = laneWaitFirst
			continue
		case <-tick:
		}
		step = min(2*step, laneWaitMost)
		w.lookForLanes(ctx, since)
	}
}

// awaitedSince is when a batch's lanes began to be awaited at rev.
type awaitedSince struct {
	rev uint64
	at  time.Time
}

// lookForLanes reads the awaited batches' lanes' revisions once: the
// batches whose lanes are all registered leave the wait and wake the
// puller, and so do those awaited past laneWaitGiveUp, after a repair.
func (w *Worker) lookForLanes(ctx context.Context, since map[string]awaitedSince) {
	v := w.batches
	type awaited struct {
		batch string
		rev   uint64
		lanes []string
	}
	var todo []awaited
	var ids []string
	v.mu.Lock()
	for batch, rev := range v.awaiting {
		lanes := v.records[batch].Lanes()
		todo = append(todo, awaited{batch, rev, lanes})
		ids = append(ids, lanes...)
	}
	v.mu.Unlock()
	now := time.Now()
	current := make(map[string]bool, len(todo))
	for _, a := range todo {
		current[a.batch] = true
		if s, ok := since[a.batch]; !ok || s.rev != a.rev {
			since[a.batch] = awaitedSince{a.rev, now}
		}
	}
	for batch := range since {
		if !current[batch] {
			delete(since, batch)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	gens, err := w.sched.Gens(lctx, ids)
	cancel()
	if err != nil {
		w.log.Debug("reading the lanes' revisions", zap.Error(err))
	}
	done, late := false, false
	i := 0
	for _, a := range todo {
		caught := err == nil
		for range a.lanes {
			if err == nil && gens[i] < a.rev {
				caught = false
			}
			i++
		}
		if !caught && now.Sub(since[a.batch].at) < laneWaitGiveUp {
			continue
		}
		late = late || !caught
		v.mu.Lock()
		if v.awaiting[a.batch] == a.rev {
			delete(v.awaiting, a.batch)
		}
		v.mu.Unlock()
		delete(since, a.batch)
		done = true
	}
	if late {
		w.repairLanesClaimed(ctx)
	}
	if done {
		v.Poke()
	}
}

// hasAwaiting reports whether any batch's lanes are awaited.
func (v *batchView) hasAwaiting() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.awaiting) > 0
}
