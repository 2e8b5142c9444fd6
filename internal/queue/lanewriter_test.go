package queue_test

import (
	"context"
	"sync"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// laneLog records what a handle's lane writer was told.
type laneLog struct {
	mu  sync.Mutex
	got []kftype.BatchInfo
}

func (l *laneLog) WriteLanes(_ context.Context, b kftype.BatchInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, b)
}

func (l *laneLog) last(t *testing.T) kftype.BatchInfo {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.got) == 0 {
		t.Fatal("the lane writer was told of no record")
	}
	return l.got[len(l.got)-1]
}

// Every write of a batch record goes to the handle's lane writer, as
// written: the enqueue's, an operator's pause, resume and cancel, a
// budget's pause and resume, a budget change. A refused change writes
// nothing and tells nothing.
func TestEveryRecordWriteTellsTheLaneWriter(t *testing.T) {
	q, _ := open(t)
	log := &laneLog{}
	q.SetLaneWriter(log)
	check := func(what string, b kftype.BatchInfo, err error, state kftype.BatchState) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := log.last(t)
		if got.Rev == 0 || got.Rev != b.Rev || got.State != state || got.ID != "b" {
			t.Fatalf("%s: the lane writer got %+v, want the record as written (rev %d, %s)", what, got, b.Rev, state)
		}
	}
	b, err := q.AddToBatch(ctx(t), "b", "sleep", 2, queue.WithScopes("m"))
	check("enqueue", b, err, kftype.BatchRunning)
	if got := log.last(t); got.Priority != kftype.PriorityDefault || got.Weight != kftype.WeightDefault || len(got.Scopes) != 1 {
		t.Fatalf("the first record: %+v", got)
	}
	b, err = q.SetBatchState(ctx(t), "b", kftype.ActionPause, "op")
	check("pause", b, err, kftype.BatchPaused)
	n := len(log.got)
	if _, err := q.SetBatchState(ctx(t), "b", kftype.ActionPause, "op"); err == nil || len(log.got) != n {
		t.Fatalf("pausing a paused batch: %v, %d writes told (want an error and none)", err, len(log.got)-n)
	}
	b, err = q.SetBatchState(ctx(t), "b", kftype.ActionResume, "op")
	check("resume", b, err, kftype.BatchRunning)
	b, _, err = q.PauseFor(ctx(t), "b", spend.ReasonBudget, "worker")
	check("pause for the budget", b, err, kftype.BatchPaused)
	b, err = q.ResumeFrom(ctx(t), "b", spend.ReasonBudget, "worker")
	check("resume from the budget", b, err, kftype.BatchRunning)
	budget := spend.Unit
	b, err = q.SetBudget(ctx(t), "b", &budget)
	check("set the budget", b, err, kftype.BatchRunning)
	b, err = q.SetBatchState(ctx(t), "b", kftype.ActionCancel, "op")
	check("cancel", b, err, kftype.BatchCancelled)
}
