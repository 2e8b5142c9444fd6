package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// restartMidRun runs 150 guarded items through two workers, calls restart
// once a third of them ran, waits until every item succeeded, runs check
// (if any) and stops the workers (exit 0). It returns what the scenario's
// row needs.
func restartMidRun(t *testing.T, poolYAML, queueYAML, sleep string, restart, check func(f *fleet)) (
	f *fleet, ids []string, res map[string]queue.Result, start, restarted time.Time) {
	t.Helper()
	f = guardedFleetPool(t, poolYAML, "concurrency: 2\nshutdown_grace: 5s", queueYAML, "SLEEP="+sleep)
	const n = 150
	ids = f.publish("b", "exec", n, itemJSON)
	start = time.Now()
	w1, w2 := f.startWorker("w1"), f.startWorker("w2")
	testutil.WaitFor(t, "a third of the items to run", 2*time.Minute, func() bool { return len(f.runsPerItem()) >= n/3 })
	restart(f)
	restarted = time.Now()
	res = f.waitResults("b", n, 3*time.Minute)
	for id, r := range res {
		if r.Outcome != queue.OutcomeSucceeded {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	if check != nil {
		check(f)
	}
	stopFleet(t, 30*time.Second, w1, w2)
	return f, ids, res, start, restarted
}

// NATS restarted mid-run (file storage): the workers reconnect by
// themselves and every item finishes.
func TestNATSRestartMidRun(t *testing.T) {
	longWaitingScenario(t)
	f, ids, res, start, restarted := restartMidRun(t, "lease_ttl: 3s", "ack_wait: 3s", "0.02",
		func(f *fleet) { f.nats.Restart() },
		func(f *fleet) {
			if v := f.file("violations"); v != "" {
				t.Fatal(v)
			}
			testutil.WaitFor(t, "the work stream to drain", time.Minute, func() bool { return f.queueStats().Stream.Messages == 0 })
		})
	f.account("NATS restart mid-run (file storage)", ids, res, time.Since(start), bounds{MaxDuplicates: 4},
		fmt.Sprintf("done %s after the restart", time.Since(restarted).Round(100*time.Millisecond)))
}

// Redis restarted mid-run with its state lost: the workers register the
// pool again by themselves, leases held across the restart are lost at
// renewal and their jobs handed back, and every item finishes.
func TestRedisRestartMidRun(t *testing.T) {
	longWaitingScenario(t)
	f, ids, res, start, restarted := restartMidRun(t, "lease_ttl: 2s", "ack_wait: 5s", "0.05", func(f *fleet) { f.redis.Restart() }, nil)
	// Over-use can only happen inside the restart instant: a job that
	// started before it may still run while a new lease is granted, until
	// its renewal finds the lease gone. Bounded by the jobs in flight (4).
	f.account("Redis restart mid-run (state lost)", ids, res, time.Since(start), bounds{MaxDuplicates: 4, MaxOverUse: 4},
		fmt.Sprintf("pool re-registered; done %s after the restart", time.Since(restarted).Round(100*time.Millisecond)))
}

// Redis down for a while: no job runs without a lease, nothing is lost,
// and the fleet resumes by itself.
func TestRedisDownFailsClosed(t *testing.T) {
	longWaitingScenario(t)
	f := guardedFleetPool(t, "lease_ttl: 2s", "concurrency: 2\nshutdown_grace: 5s", "ack_wait: 3s", "SLEEP=0.05")
	const n = 60
	ids := f.publish("b", "exec", n, itemJSON)
	start := time.Now()
	w1 := f.startWorker("w1")
	testutil.WaitFor(t, "some items to run", 2*time.Minute, func() bool { return len(f.runsPerItem()) >= 10 })
	f.redis.Stop()
	// Jobs already running may finish; after that nothing may start. They
	// have ended when no job holds a key (guard.sh's held-<key>) and no
	// run began since the previous look, a tenth of a second before.
	lastRuns := -1
	testutil.WaitForEvery(t, "the jobs running when Redis stopped to end", time.Minute, 100*time.Millisecond, func() bool {
		held, _ := filepath.Glob(filepath.Join(f.dir, "held-*"))
		runs := strings.Count(f.file("runs"), "\n")
		quiet := runs == lastRuns
		lastRuns = runs
		return len(held) == 0 && quiet
	})
	before := len(f.runsPerItem())
	time.Sleep(3 * time.Second) // the outage: a duration, not a wait for a condition
	if after := len(f.runsPerItem()); after != before {
		t.Fatalf("%d jobs started while Redis was down", after-before)
	}
	f.redis.StartAgain()
	res := f.waitResults("b", n, 3*time.Minute)
	for id, r := range res {
		if r.Outcome != queue.OutcomeSucceeded {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	w1.signal(syscall.SIGTERM)
	if code := w1.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	f.account("Redis down 3s mid-run", ids, res, time.Since(start), bounds{MaxDuplicates: 2},
		"no job started while down; resumed by itself")
}
