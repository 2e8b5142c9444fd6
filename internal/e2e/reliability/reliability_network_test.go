package reliability

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/faultproxy"
)

// Network faults between the workers and the servers: every worker talks
// to NATS and to Redis through fault proxies of its own
// (internal/testutil/faultproxy, --nats-url and --redis-url).

// proxiedFleet starts the workers of a network scenario, each behind its
// own proxies.
func proxiedFleet(f *e2etest.Fleet, n int, env []string) ([]*e2etest.Process, []e2etest.WorkerProxies) {
	var ws []*e2etest.Process
	var ps []e2etest.WorkerProxies
	for i := range n {
		w, p := f.ProxiedWorker(fmt.Sprintf("w%d", i+1), env)
		ws = append(ws, w)
		ps = append(ps, p)
	}
	return ws, ps
}

// Latency of 20-50 ms on every round trip (10-25 ms each way, per chunk)
// to NATS and Redis: slower, nothing else changes.
func TestReliabilityNetworkLatency(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	n := e2etest.ShortOrFull(120, 600)
	f := e2etest.HoldGuardedFleet(t, "lease_ttl: 3s", "concurrency: 2\nshutdown_grace: 5s", "ack_wait: 3s", "SLEEP=0.02")
	ids := f.Publish("lat", "exec", n, e2etest.ItemJSON)
	results := f.WatchResults("lat", n)
	start := time.Now()
	ws, ps := proxiedFleet(f, 3, nil)
	for _, p := range ps {
		p.Each(func(x *faultproxy.Proxy) { x.SetLatency(10*time.Millisecond, 15*time.Millisecond) })
	}
	res := results.Wait(t, e2etest.ShortOrFull(3*time.Minute, 10*time.Minute))
	took := time.Since(start)
	e2etest.StopWorkers(t, 30*time.Second, ws...)
	f.Account("network: +20-50ms round trip to NATS and Redis", ids, res, took, e2etest.Bounds{},
		fmt.Sprintf("3 workers x 2 slots, each behind its own proxies; %.0f items/s", float64(n)/took.Seconds()))
}

// Every connection of every worker, to NATS and to Redis, reset every few
// seconds: the workers reconnect by themselves and nothing is lost. Items
// whose ack or result was cut off run again: at most the slots in flight at
// each reset.
func TestReliabilityNetworkResets(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	n := e2etest.ShortOrFull(300, 1500)
	every := e2etest.ShortOrFull(1500*time.Millisecond, 2*time.Second)
	maxResets := e2etest.ShortOrFull(5, 1<<30)
	const workers, conc = 3, 2
	f := e2etest.HoldGuardedFleet(t, "lease_ttl: 2s", fmt.Sprintf("concurrency: %d\nshutdown_grace: 5s\nmax_attempts: 20", conc),
		"ack_wait: 2s", "SLEEP=0.02")
	ids := f.Publish("rst", "exec", n, e2etest.ItemJSON)
	results := f.WatchResults("rst", n)
	start := time.Now()
	ws, ps := proxiedFleet(f, workers, nil)
	resets, conns := 0, 0
	for resets < maxResets && !results.Complete() {
		time.Sleep(every) // the fault's rhythm
		if results.Complete() {
			break
		}
		for _, p := range ps {
			p.Each(func(x *faultproxy.Proxy) { conns += x.ResetAll() })
		}
		resets++
	}
	res := results.Wait(t, e2etest.ShortOrFull(3*time.Minute, 10*time.Minute))
	took := time.Since(start)
	e2etest.StopWorkers(t, 30*time.Second, ws...)
	if resets == 0 {
		t.Errorf("the batch finished before the first reset: the scenario tested nothing")
	}
	f.Account(fmt.Sprintf("network: every connection reset every %s", every), ids, res, took,
		e2etest.Bounds{MaxDuplicates: resets * workers * conc},
		fmt.Sprintf("%d rounds, %d connections reset; duplicates <= rounds x slots = %d", resets, conns, resets*workers*conc))
}

// One worker cut off (a blackhole: nothing answers, nothing is refused)
// for longer than the ack wait and the lease TTL, in the middle of jobs
// longer than both, then healed. Promised: its jobs are cancelled when
// their lease renewal (or message keep-alive) fails, before the lease
// expires, so no key is used by two jobs at once; its items go to the
// other workers; it runs items again after the heal without a restart.
//
// Two cuts: from NATS and Redis (the worker's host is cut off), and from
// Redis alone (NATS still answers, so only the lease renewal can notice).
//
// The cut worker's job must die before its lease expires: the lease
// keep-alive declares the lease lost at the last confirmed renewal plus the
// TTL minus a margin, even while a renewal hangs, and renewals bypass the
// auto-pipeliner so that they end by their deadline.
func TestReliabilityNetworkPartition(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	for _, tc := range []struct {
		name  string
		redis bool // cut Redis only
	}{
		{"NATS and Redis", false},
		{"Redis only", true},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) { testPartition(t, tc.name, tc.redis) })
	}
}

func testPartition(t *testing.T, what string, redisOnly bool) {
	n := e2etest.ShortOrFull(300, 1000)
	outage := e2etest.ShortOrFull(5*time.Second, 8*time.Second)
	const ttl, ackWait, conc = 2 * time.Second, 2 * time.Second, 2
	f := e2etest.HoldGuardedFleet(t, fmt.Sprintf("lease_ttl: %s", ttl), fmt.Sprintf("concurrency: %d\nshutdown_grace: 5s\nmax_attempts: 20", conc),
		fmt.Sprintf("ack_wait: %s", ackWait), "SLEEP=0.05")
	ids := f.Publish("part", "exec", n, e2etest.ItemJSON)
	results := f.WatchResults("part", n)
	start := time.Now()
	ws, ps := proxiedFleet(f, 3, nil)
	w1 := ws[0]
	cut := []*faultproxy.Proxy{ps[0].NATS, ps[0].Redis}
	if redisOnly {
		cut = []*faultproxy.Proxy{ps[0].Redis}
	}
	testutil.WaitFor(t, "w1 to run a few items", time.Minute, func() bool { return f.JobsStarted(w1, start) >= 3 })

	// From now on w1's jobs run long (30s): the one running at the cut must
	// be cancelled, it cannot end by itself.
	longFrom := time.Now()
	f.WriteFile(fmt.Sprintf("sleep-%d", w1.Pid()), "30")
	var victim e2etest.JobEvent
	testutil.WaitFor(t, "w1 to start a long job", time.Minute, func() bool {
		for _, e := range f.JobsRunning(w1) {
			if e.At.After(longFrom) {
				victim = e
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // a moment into the job
	cutAt := time.Now()
	for _, p := range cut {
		p.Partition()
	}
	// The partition is a duration, not a condition; meanwhile, note when
	// w1's job dies.
	var jobDied time.Time
	for time.Since(cutAt) < outage {
		if jobDied.IsZero() && syscall.Kill(victim.JobPID, 0) != nil {
			jobDied = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, p := range cut {
		p.Heal()
	}
	healed := time.Now()
	f.RemoveFile(fmt.Sprintf("sleep-%d", w1.Pid()))
	var reused, rerun time.Time // the key taken, the item started, by another worker
	for _, e := range f.JobEvents() {
		if e.Kind != "start" || e.WorkerPID == w1.Pid() || e.At.Before(cutAt) {
			continue
		}
		if reused.IsZero() && e.Cred == victim.Cred {
			reused = e.At
		}
		if rerun.IsZero() && e.Item == victim.Item {
			rerun = e.At
		}
	}
	if !redisOnly && (rerun.IsZero() || rerun.After(healed)) {
		// With Redis alone cut, w1 keeps the message alive while it settles
		// and hands it back after; with both cut it comes back by the ack
		// wait.
		t.Errorf("%s (w1's job at the cut) did not run elsewhere during the partition", victim.Item)
	}
	if left := n - results.Count(); left < 10 {
		t.Errorf("only %d items left at the heal: too few to see w1 recover; make the batch bigger", left)
	} else {
		testutil.WaitFor(t, "w1 to run items again after the heal", time.Minute, func() bool { return f.JobsStarted(w1, healed) >= 1 })
	}
	recovered := time.Since(healed)
	res := results.Wait(t, e2etest.ShortOrFull(3*time.Minute, 10*time.Minute))
	took := time.Since(start)
	e2etest.StopWorkers(t, 30*time.Second, ws...)
	note := fmt.Sprintf("w1 cut %s mid-job (lease %s, ack wait %s): its job killed %s, %s taken by another worker %s; "+
		"w1 ran items again %s after the heal", outage, ttl, ackWait, sinceOrNever(jobDied, cutAt, "not during the cut"), victim.Cred,
		sinceOrNever(reused, cutAt, "never"), recovered.Round(10*time.Millisecond))
	t.Log(note)
	f.AccountHolds(fmt.Sprintf("network: one worker partitioned from %s", what), ids, res, took,
		e2etest.Bounds{MaxDuplicates: conc}, note)
}

func sinceOrNever(t, from time.Time, never string) string {
	if t.IsZero() {
		return never
	}
	return t.Sub(from).Round(10*time.Millisecond).String() + " after the cut"
}
