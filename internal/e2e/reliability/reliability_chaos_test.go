package e2e

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// Chaos: several worker processes work through a batch while a random one
// is SIGKILLed every few seconds and a new one started in its place; at the
// end all get SIGTERM. Nothing is lost; the only items that run twice are
// those a killed worker had in flight (at most its concurrency per kill);
// no credential is ever used by two jobs at once.
//
// Short leases and ack wait (2s) bring a killed worker's keys and items
// back fast. A run that never reported counts as a failed attempt (see
// handle in internal/worker/slot.go), so max_attempts is set well above
// the number of kills one item could be caught in.
func TestReliabilityChaosKills(t *testing.T) {
	longWaitingScenario(t)
	n := size(400, 3000)
	workers := size(3, 4)
	every := size(1500*time.Millisecond, 3*time.Second)
	maxKills := size(4, 1<<30) // full: kills for the whole run
	const conc = 2
	f := holdGuardedFleet(t, "lease_ttl: 2s", fmt.Sprintf("concurrency: %d\nshutdown_grace: 5s\nmax_attempts: 20", conc),
		"ack_wait: 2s", "SLEEP=0.02")
	ids := f.publish("chaos", "exec", n, itemJSON)
	results := f.watchResults("chaos", n)
	start := time.Now()
	live := make([]*proc, workers)
	for i := range live {
		live[i] = f.startWorker(fmt.Sprintf("w%d", i+1))
	}
	kills, next := 0, workers+1
	for kills < maxKills && !results.complete() {
		time.Sleep(every) // the chaos's rhythm: the duration is the scenario
		if results.complete() {
			break
		}
		i := rand.IntN(len(live))
		live[i].signal(syscall.SIGKILL)
		live[i].wait(t, 10*time.Second)
		kills++
		t.Logf("killed %s at %d/%d results", live[i].name, results.count(), n)
		live[i] = f.startWorker(fmt.Sprintf("w%d", next))
		next++
	}
	res := results.wait(t, size(3*time.Minute, 10*time.Minute))
	took := time.Since(start)
	stopFleet(t, 30*time.Second, live...)
	f.waitQueueEmpty()
	if kills == 0 {
		t.Errorf("the batch finished before the first kill: the scenario tested nothing")
	}
	f.account(fmt.Sprintf("chaos: SIGKILL a worker every %s, then SIGTERM all", every), ids, res, took,
		bounds{MaxDuplicates: kills * conc},
		fmt.Sprintf("%d workers x %d slots, %d kills; duplicates <= kills x slots = %d", workers, conc, kills, kills*conc))
}
