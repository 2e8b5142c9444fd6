package lifecycle

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// SIGTERM mid-run with items that finish within the grace: the worker
// exits 0, nothing is lost and no item runs twice.
func TestSigtermFinishesInFlightWithinGrace(t *testing.T) {
	f := e2etest.GuardedFleet(t, "concurrency: 2\nshutdown_grace: 10s", "", "SLEEP=0.3")
	const n = 30
	ids := f.Publish("b", "exec", n, e2etest.ItemJSON)
	start := time.Now()
	w1 := f.StartWorker("w1")
	testutil.WaitFor(t, "w1 to run a few items", time.Minute, func() bool { return len(f.RunsPerItem()) >= 3 })
	w2 := f.StartWorker("w2")
	stopAt := time.Now()
	w1.Signal(syscall.SIGTERM)
	if code := w1.WaitExit(t, 15*time.Second); code != 0 {
		t.Fatalf("w1 exited %d after SIGTERM", code)
	}
	exitTook := time.Since(stopAt)
	results := f.WaitResults("b", n, 2*time.Minute)
	for id, r := range results {
		if r.Outcome != kftype.OutcomeSucceeded {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	f.AssertRanOnceSafely()
	w2.Signal(syscall.SIGTERM)
	w2.WaitExit(t, 15*time.Second)
	f.Account("SIGTERM mid-run (items within the grace)", ids, results, time.Since(start), e2etest.Bounds{},
		fmt.Sprintf("w1 exited 0 in %s", exitTook.Round(100*time.Millisecond)))
}

// An item longer than the grace is cancelled at the end of the grace and
// handed back at once: another worker starts it long before the ack wait.
func TestSigtermHandsLongItemToAnotherWorkerAtOnce(t *testing.T) {
	f := e2etest.GuardedFleet(t, "concurrency: 1\nshutdown_grace: 1s", "ack_wait: 30s", "SLEEP=4")
	f.Publish("b", "exec", 1, e2etest.ItemJSON)
	w1 := f.StartWorker("w1")
	testutil.WaitFor(t, "w1 to start the item", time.Minute, func() bool { return len(f.RunsPerItem()) == 1 })
	w2 := f.StartWorker("w2")
	testutil.WaitFor(t, "w2 to be registered", time.Minute, func() bool { return strings.Contains(w2.Log.String(), "worker started") })
	stopAt := time.Now()
	w1.Signal(syscall.SIGTERM)
	if code := w1.WaitExit(t, 20*time.Second); code != 0 {
		t.Fatalf("w1 exited %d", code)
	}
	testutil.WaitFor(t, "the item to start again", 20*time.Second, func() bool { return f.RunsPerItem()["item-0000"] == 2 })
	handover := time.Since(stopAt)
	if handover > 15*time.Second {
		t.Fatalf("the item started again %s after SIGTERM: it waited for the ack wait instead of a nak", handover)
	}
	r := f.WaitResults("b", 1, time.Minute)["item-0000"]
	if r.Outcome != kftype.OutcomeSucceeded || r.Worker != "w2" || r.Attempts != 2 {
		t.Fatalf("result %+v", r)
	}
	if !strings.Contains(w1.Log.String(), "handed back for immediate redelivery") {
		t.Fatalf("w1 did not report the hand-back:\n%s", e2etest.Tail(w1.Log.String(), 10))
	}
	w2.Signal(syscall.SIGTERM)
	w2.WaitExit(t, 20*time.Second)
	t.Logf("item longer than the grace (1s): running on w2 %s after SIGTERM to w1 (ack wait 30s)", handover.Round(time.Millisecond))
}

// SIGKILL mid-run: the killed worker's items come back after the ack wait,
// its leases expire, nothing is lost.
func TestSigkillLosesNothing(t *testing.T) {
	// Short leases so that the killed worker's keys come back quickly. Its
	// jobs die with it and leave their holds behind: holdGuardScript tells
	// a stale hold from a live one (an over-use).
	f := e2etest.HoldGuardedFleet(t, "lease_ttl: 2s", "concurrency: 2", "ack_wait: 2s", "SLEEP=0.2")
	const n = 40
	ids := f.Publish("b", "exec", n, e2etest.ItemJSON)
	start := time.Now()
	w1, w2 := f.StartWorker("w1"), f.StartWorker("w2")
	testutil.WaitFor(t, "a few items to run", time.Minute, func() bool { return len(f.RunsPerItem()) >= 6 })
	killAt := time.Now()
	w1.Signal(syscall.SIGKILL)
	w1.WaitExit(t, 10*time.Second)
	results := f.WaitResults("b", n, 3*time.Minute)
	took := time.Since(killAt)
	reran := 0
	for id, r := range results {
		if r.Outcome != kftype.OutcomeSucceeded {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	for _, c := range f.RunsPerItem() {
		if c > 1 {
			reran++
		}
	}
	// The killed worker held at most its concurrency.
	if reran > 2 {
		t.Fatalf("%d items ran twice; only the 2 in flight at the kill may", reran)
	}
	w2.Signal(syscall.SIGTERM)
	w2.WaitExit(t, 20*time.Second)
	f.Account("SIGKILL mid-run", ids, results, time.Since(start), e2etest.Bounds{MaxDuplicates: 2},
		fmt.Sprintf("killed worker's items back after the 2s ack wait; done %s after the kill", took.Round(100*time.Millisecond)))
}
