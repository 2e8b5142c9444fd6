package ops_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
)

// Pause and resume change the record, recorded with who; each change
// that does not apply is a conflict that says why and changes nothing.
func TestSteerPauseResume(t *testing.T) {
	f := newFleet(t)
	f.enqueue("steer", 3)
	s, err := ops.Steer(f.ctx, f.q, "steer", kftype.ActionPause, "alice@host")
	if err != nil || s.Batch.State != kftype.BatchPaused || s.Drain != (ops.Drain{}) {
		t.Fatalf("pause: want paused, no drain; got %+v %v", s, err)
	}
	if rec := f.record("steer"); rec.State != kftype.BatchPaused || len(rec.History) != 1 || rec.History[0].By != "alice@host" ||
		rec.History[0].Action != kftype.ActionPause {
		t.Fatalf("the record after pause: %+v", rec)
	}
	conflict(t, "pause a paused batch", "batch steer is paused already", kftype.BatchPaused)(ops.Steer(f.ctx, f.q, "steer", kftype.ActionPause, "bob@host"))
	if s, err := ops.Steer(f.ctx, f.q, "steer", kftype.ActionResume, "bob@host"); err != nil || s.Batch.State != kftype.BatchRunning {
		t.Fatalf("resume: want running, got %+v %v", s, err)
	}
	conflict(t, "resume a running batch", "batch steer is not paused: it is running", kftype.BatchRunning)(ops.Steer(f.ctx, f.q, "steer", kftype.ActionResume, "bob@host"))
	if rec := f.record("steer"); len(rec.History) != 2 || f.messages("steer") != 3 {
		t.Errorf("want 2 changes recorded and the 3 items waiting, got %+v, %d messages", rec.History, f.messages("steer"))
	}
}

// A cancel drains the items not started: each recorded cancelled, its
// message gone; a cancelled batch takes no change, naming who cancelled.
func TestSteerCancelDrains(t *testing.T) {
	f := newFleet(t)
	f.enqueue("doomed", 5)
	s, err := ops.Steer(f.ctx, f.q, "doomed", kftype.ActionCancel, "alice@host")
	if err != nil || s.Batch.State != kftype.BatchCancelled || s.Drain.Drained != 5 || s.Drain.Out != 0 || s.Drain.Err != nil {
		t.Fatalf("cancel: want cancelled, 5 drained; got %+v %v", s, err)
	}
	if n := f.messages("doomed"); n != 0 {
		t.Errorf("after the cancel %d messages are left, want 0", n)
	}
	var results bytes.Buffer
	if _, err := f.q.WriteResults(f.ctx, "doomed", &results); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(results.String(), `"outcome":"cancelled"`); n != 5 {
		t.Errorf("want 5 cancelled results, got %d:\n%s", n, results.String())
	}
	for _, action := range []string{kftype.ActionPause, kftype.ActionResume, kftype.ActionCancel} {
		conflict(t, action+" a cancelled batch", "batch doomed is cancelled (by alice@host at ", kftype.BatchCancelled)(
			ops.Steer(f.ctx, f.q, "doomed", action, "bob@host"))
	}
	if rec := f.record("doomed"); len(rec.History) != 1 {
		t.Errorf("a refused change was recorded: %+v", rec.History)
	}
}

// What Steer refuses before it reads anything, and what it cannot find or
// reach: each error of its class.
func TestSteerErrors(t *testing.T) {
	f := newFleet(t)
	for _, c := range []struct {
		name, batch, action string
		class               error
		says                string
	}{
		{"unknown batch", "nope", kftype.ActionPause, ops.ErrNotFound, "no batch nope (never enqueued"},
		{"unknown batch, cancel", "nope", kftype.ActionCancel, ops.ErrNotFound, "no batch nope"},
		{"empty ID", "", kftype.ActionPause, ops.ErrInvalid, "batch ID is empty"},
		{"a line break", "a\nb", kftype.ActionPause, ops.ErrInvalid, "line break"},
		{"unknown action", "nope", "stop", ops.ErrInvalid, `unknown batch action "stop"`},
	} {
		_, err := ops.Steer(f.ctx, f.q, c.batch, c.action, "alice@host")
		if !errors.Is(err, c.class) || ops.Class(err) != c.class || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: want %v saying %q, got %v (class %v)", c.name, c.class, c.says, err, ops.Class(err))
		}
	}
	f.enqueue("far", 1)
	_, err := ops.Steer(f.ctx, f.closed(), "far", kftype.ActionPause, "alice@host")
	if !errors.Is(err, ops.ErrUnavailable) || !strings.Contains(err.Error(), "reading batch far") {
		t.Errorf("NATS closed: want ErrUnavailable, got %v", err)
	}
}

// conflict checks that a Steer was refused as a *StateError of the batch
// in state, saying says.
func conflict(t *testing.T, what, says string, state kftype.BatchState) func(ops.Steered, error) {
	t.Helper()
	return func(_ ops.Steered, err error) {
		t.Helper()
		var se *ops.StateError
		if !errors.Is(err, ops.ErrConflict) || !errors.As(err, &se) || se.State != string(state) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: want a conflict (state %s) saying %q, got %v", what, state, says, err)
		}
	}
}
