package ops_test

import (
	"errors"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
)

// The done rule: a batch whose lanes hold a message is not done whatever
// its results count (an item replayed after its failure keeps its old
// result); with empty lanes, it is done once its results count every
// item. Pause and cancel refuse a done batch, saying its counts; resume
// says it is not paused.
func TestDone(t *testing.T) {
	f := newFleet(t)

	f.enqueue("finished", 3)
	f.finish("finished", 2, kftype.OutcomeSucceeded)
	f.finish("finished", 1, kftype.OutcomeFailed)

	// Every item has a result, but one is back in its lane (replayed).
	f.enqueue("replayed", 3)
	for _, id := range []string{"replayed-0", "replayed-1", "replayed-2"} {
		f.result("replayed", id, kftype.OutcomeFailed)
	}
	f.finish("replayed", 2, "")

	// Its lane is empty but an item has no outcome yet (it left the lane
	// without one: staged for a provider's Batch API).
	f.enqueue("staged", 2)
	f.finish("staged", 1, kftype.OutcomeSucceeded)
	f.finish("staged", 1, "")

	for _, c := range []struct {
		batch string
		done  bool
	}{{"finished", true}, {"replayed", false}, {"staged", false}} {
		view, done, err := ops.Done(f.ctx, f.q, f.record(c.batch))
		if err != nil || done != c.done {
			t.Errorf("%s: want done %v, got %v (%+v) %v", c.batch, c.done, done, view, err)
		}
	}

	for _, action := range []string{kftype.ActionPause, kftype.ActionCancel} {
		conflict(t, action+" a done batch",
			"batch finished is done (3 of 3 items have an outcome: 2 succeeded, 1 failed, 0 cancelled): nothing is left to "+action, "done")(
			ops.Steer(f.ctx, f.q, "finished", action, "alice@host"))
	}
	conflict(t, "resume a done batch", "batch finished is not paused: it is running", kftype.BatchRunning)(
		ops.Steer(f.ctx, f.q, "finished", kftype.ActionResume, "alice@host"))
	if rec := f.record("finished"); rec.State != kftype.BatchRunning || len(rec.History) != 0 {
		t.Errorf("a refused change of a done batch changed its record: %+v", rec)
	}
	for _, b := range []string{"replayed", "staged"} {
		if s, err := ops.Steer(f.ctx, f.q, b, kftype.ActionPause, "alice@host"); err != nil || s.Batch.State != kftype.BatchPaused {
			t.Errorf("pause %s (not done): want paused, got %+v %v", b, s, err)
		}
	}

	rec := f.record("finished")
	if _, _, err := ops.Done(f.ctx, f.closed(), rec); !errors.Is(err, ops.ErrUnavailable) {
		t.Errorf("NATS closed: want ErrUnavailable, got %v", err)
	}
}
