package executor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil"
)

func TestKeeperRunsDueTasksAndReportsLoss(t *testing.T) {
	k := newKeeper(Real)
	defer k.close()

	var calls atomic.Int64
	kept := make(chan struct{})
	removeOK := k.add(&keepTask{
		every: 10 * time.Millisecond, limit: time.Second,
		job: fn{do: func(context.Context) error {
			if calls.Add(1) == 3 {
				close(kept)
			}
			return nil
		},
			onLost: func() { t.Error("a task that keeps succeeding must not be lost") }},
	})
	testutil.Receive(t, kept, 10*time.Second, "the task was not attempted three times")
	removeOK.Stop()

	lost := make(chan struct{})
	k.add(&keepTask{
		every: 5 * time.Millisecond, limit: 30 * time.Millisecond,
		job: fn{do: func(context.Context) error { return errors.New("down") },
			onLost: func() { close(lost) }},
	})
	testutil.Receive(t, lost, 10*time.Second, "a task failing past its limit was not reported lost")

	fatal := make(chan struct{})
	errGone := errors.New("gone")
	k.add(&keepTask{
		every: 5 * time.Millisecond, limit: time.Hour,
		job: fn{do: func(context.Context) error { return errGone },
			isFatal: func(err error) bool { return errors.Is(err, errGone) },
			onLost:  func() { close(fatal) }},
	})
	testutil.Receive(t, fatal, 10*time.Second, "a fatal error did not end the task at once")
}

func TestKeeperRemovedTaskIsNeverAttempted(t *testing.T) {
	k := newKeeper(Real)
	defer k.close()
	var never atomic.Int64
	rm := k.add(&keepTask{every: 5 * time.Millisecond, limit: time.Second,
		job: fn{do: func(context.Context) error { never.Add(1); return nil }, onLost: func() { t.Error("lost after removal") }}})
	rm.Stop()
	// A task that is attempted proves the keeper ran past the removed
	// one's due time.
	seen := make(chan struct{})
	var once atomic.Bool
	k.add(&keepTask{every: 20 * time.Millisecond, limit: time.Second,
		job: fn{do: func(context.Context) error {
			if once.CompareAndSwap(false, true) {
				close(seen)
			}
			return nil
		}, onLost: func() {}}})
	<-seen
	if n := never.Load(); n != 0 {
		t.Fatalf("a removed task was attempted %d times", n)
	}
}

// An attempt that hangs past its context does not delay the loss: it is
// declared at the last success plus the limit.
func TestKeeperDeclaresLossOnTimeWhileAnAttemptHangs(t *testing.T) {
	k := newKeeper(Real)
	defer k.close()
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int64
	lost := make(chan time.Time, 1)
	start := time.Now()
	k.add(&keepTask{
		every: 20 * time.Millisecond, limit: 200 * time.Millisecond,
		job: fn{do: func(context.Context) error {
			if calls.Add(1) == 1 {
				return nil // one success, then a hang that ignores its context
			}
			<-release
			return errors.New("too late")
		},
			onLost: func() { lost <- time.Now() }},
	})
	at := testutil.Receive(t, lost, 10*time.Second, "loss never declared while an attempt hung")
	// Last success ~20ms after start; the loss is due ~220ms after.
	if took := at.Sub(start); took > 2*time.Second {
		t.Fatalf("loss declared %s after start, long after its deadline", took)
	}
}

// Attempts that fail in time (not hanging) still end in a loss at the
// deadline, not at the next attempt after it.
func TestKeeperLossAtDeadlineWhenAttemptsFail(t *testing.T) {
	k := newKeeper(Real)
	defer k.close()
	var calls atomic.Int64
	lost := make(chan time.Time, 1)
	var lastOK atomic.Int64
	k.add(&keepTask{
		// every 400ms, limit 500ms: after the first success at ~400ms the
		// next attempt (~800ms) fails; the one after would be ~1200ms,
		// 300ms past the deadline of ~900ms.
		every: 400 * time.Millisecond, limit: 500 * time.Millisecond,
		job: fn{do: func(context.Context) error {
			if calls.Add(1) == 1 {
				lastOK.Store(time.Now().UnixNano())
				return nil
			}
			return errors.New("down")
		},
			onLost: func() { lost <- time.Now() }},
	})
	at := testutil.Receive(t, lost, 10*time.Second, "loss never declared")
	late := at.Sub(time.Unix(0, lastOK.Load())) - 500*time.Millisecond
	if late > 150*time.Millisecond {
		t.Fatalf("loss declared %s after its deadline", late)
	}
}

// fn is a keepJob of functions.
type fn struct {
	do      func(context.Context) error
	isFatal func(error) bool
	onLost  func()
}

func (f fn) keep(ctx context.Context) error { return f.do(ctx) }
func (f fn) fatal(err error) bool           { return f.isFatal != nil && f.isFatal(err) }
func (f fn) lost()                          { f.onLost() }
