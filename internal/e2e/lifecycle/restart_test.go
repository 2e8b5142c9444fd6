package lifecycle

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// restartMidRun runs 150 guarded items through two workers, calls restart
// once a third of them ran, waits until every item succeeded, runs check
// (if any) and stops the workers (exit 0). It returns what the scenario's
// row needs.
func restartMidRun(t *testing.T, poolYAML, queueYAML, sleep string, restart, check func(f *e2etest.Fleet)) (
	f *e2etest.Fleet, ids []string, res map[string]kftype.Result, start, restarted time.Time) {
	t.Helper()
	f = e2etest.GuardedFleetPool(t, poolYAML, "concurrency: 2\nshutdown_grace: 5s", queueYAML, "SLEEP="+sleep)
	const n = 150
	ids = f.Publish("b", "exec", n, e2etest.ItemJSON)
	start = time.Now()
	w1, w2 := f.StartWorker("w1"), f.StartWorker("w2")
	testutil.WaitFor(t, "a third of the items to run", 2*time.Minute, func() bool { return len(f.RunsPerItem()) >= n/3 })
	restart(f)
	restarted = time.Now()
	res = f.WaitResults("b", n, 3*time.Minute)
	for id, r := range res {
		if r.Outcome != kftype.OutcomeSucceeded {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	if check != nil {
		check(f)
	}
	e2etest.StopWorkers(t, 30*time.Second, w1, w2)
	return f, ids, res, start, restarted
}

// NATS restarted mid-run (file storage): the workers reconnect by
// themselves and every item finishes.
func TestNATSRestartMidRun(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	f, ids, res, start, restarted := restartMidRun(t, "lease_ttl: 3s", "ack_wait: 3s", "0.02",
		func(f *e2etest.Fleet) { f.NATS.Restart() },
		func(f *e2etest.Fleet) {
			if v := f.File("violations"); v != "" {
				t.Fatal(v)
			}
			testutil.WaitFor(t, "the work stream to drain", time.Minute, func() bool { return f.QueueStats().Stream.Messages == 0 })
		})
	f.Account("NATS restart mid-run (file storage)", ids, res, time.Since(start), e2etest.Bounds{MaxDuplicates: 4},
		fmt.Sprintf("done %s after the restart", time.Since(restarted).Round(100*time.Millisecond)))
}

// Redis restarted mid-run with its state lost: the workers register the
// pool again by themselves, leases held across the restart are lost at
// renewal and their jobs handed back, and every item finishes.
func TestRedisRestartMidRun(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	f, ids, res, start, restarted := restartMidRun(t, "lease_ttl: 2s", "ack_wait: 5s", "0.05", func(f *e2etest.Fleet) { f.Redis.Restart() }, nil)
	// Over-use can only happen inside the restart instant: a job that
	// started before it may still run while a new lease is granted, until
	// its renewal finds the lease gone. Bounded by the jobs in flight (4).
	f.Account("Redis restart mid-run (state lost)", ids, res, time.Since(start), e2etest.Bounds{MaxDuplicates: 4, MaxOverUse: 4},
		fmt.Sprintf("pool re-registered; done %s after the restart", time.Since(restarted).Round(100*time.Millisecond)))
}

// Redis down for a while: no job runs without a lease, nothing is lost,
// and the fleet resumes by itself.
func TestRedisDownFailsClosed(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	f := e2etest.GuardedFleetPool(t, "lease_ttl: 2s", "concurrency: 2\nshutdown_grace: 5s", "ack_wait: 3s", "SLEEP=0.05")
	const n = 60
	ids := f.Publish("b", "exec", n, e2etest.ItemJSON)
	start := time.Now()
	w1 := f.StartWorker("w1")
	testutil.WaitFor(t, "some items to run", 2*time.Minute, func() bool { return len(f.RunsPerItem()) >= 10 })
	f.Redis.Stop()
	// Jobs already running may finish; after that nothing may start. They
	// have ended when no job holds a key (guard.sh's held-<key>) and no
	// run began since the previous look, a tenth of a second before.
	lastRuns := -1
	testutil.WaitForEvery(t, "the jobs running when Redis stopped to end", time.Minute, 100*time.Millisecond, func() bool {
		held, _ := filepath.Glob(filepath.Join(f.Dir, "held-*"))
		runs := strings.Count(f.File("runs"), "\n")
		quiet := runs == lastRuns
		lastRuns = runs
		return len(held) == 0 && quiet
	})
	before := len(f.RunsPerItem())
	time.Sleep(3 * time.Second) // the outage: a duration, not a wait for a condition
	if after := len(f.RunsPerItem()); after != before {
		t.Fatalf("%d jobs started while Redis was down", after-before)
	}
	f.Redis.StartAgain()
	res := f.WaitResults("b", n, 3*time.Minute)
	for id, r := range res {
		if r.Outcome != kftype.OutcomeSucceeded {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	w1.Signal(syscall.SIGTERM)
	if code := w1.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	f.Account("Redis down 3s mid-run", ids, res, time.Since(start), e2etest.Bounds{MaxDuplicates: 2},
		"no job started while down; resumed by itself")
}
