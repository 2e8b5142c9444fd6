package reliability

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
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
	e2etest.LongWaitingScenario(t)
	n := e2etest.ShortOrFull(400, 3000)
	workers := e2etest.ShortOrFull(3, 4)
	every := e2etest.ShortOrFull(1500*time.Millisecond, 3*time.Second)
	maxKills := e2etest.ShortOrFull(4, 1<<30) // full: kills for the whole run
	const conc = 2
	f := e2etest.HoldGuardedFleet(t, "lease_ttl: 2s", fmt.Sprintf("concurrency: %d\nshutdown_grace: 5s\nmax_attempts: 20", conc),
		"ack_wait: 2s", "SLEEP=0.02")
	ids := f.Publish("chaos", "exec", n, e2etest.ItemJSON)
	results := f.WatchResults("chaos", n)
	start := time.Now()
	live := make([]*e2etest.Process, workers)
	for i := range live {
		live[i] = f.StartWorker(fmt.Sprintf("w%d", i+1))
	}
	kills, next := 0, workers+1
	for kills < maxKills && !results.Complete() {
		time.Sleep(every) // the chaos's rhythm: the duration is the scenario
		if results.Complete() {
			break
		}
		i := rand.IntN(len(live))
		live[i].Signal(syscall.SIGKILL)
		live[i].WaitExit(t, 10*time.Second)
		kills++
		t.Logf("killed %s at %d/%d results", live[i].Name(), results.Count(), n)
		live[i] = f.StartWorker(fmt.Sprintf("w%d", next))
		next++
	}
	res := results.Wait(t, e2etest.ShortOrFull(3*time.Minute, 10*time.Minute))
	took := time.Since(start)
	e2etest.StopWorkers(t, 30*time.Second, live...)
	f.WaitQueueEmpty()
	if kills == 0 {
		t.Errorf("the batch finished before the first kill: the scenario tested nothing")
	}
	f.Account(fmt.Sprintf("chaos: SIGKILL a worker every %s, then SIGTERM all", every), ids, res, took,
		e2etest.Bounds{MaxDuplicates: kills * conc},
		fmt.Sprintf("%d workers x %d slots, %d kills; duplicates <= kills x slots = %d", workers, conc, kills, kills*conc))
}
