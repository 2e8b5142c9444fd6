package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// A large fleet on one batch's lane: every worker pulls from the one
// consumer the schedule names (a fetch takes what the lane holds, it never
// waits on it, so no pull is refused for "Exceeded MaxWaiting"), and every
// item is done once. 200 worker processes in the full profile, 40 in the
// short one.
func TestLargeFleetOnOneLane(t *testing.T) {
	workers, items := 40, 400
	if e2etest.FullProfile() {
		workers, items = 200, 1600
	}
	// Keys for every slot, so that slots free one at a time as items of
	// different lengths end, and each worker keeps up to 4 pulls waiting.
	var credsYAML strings.Builder
	var env []string
	for i := range 16 {
		fmt.Fprintf(&credsYAML, "- {id: k%d, secret_env: K%d, max_concurrent: 40}\n", i, i)
		env = append(env, fmt.Sprintf("K%d=sk-%d", i, i))
	}
	f := e2etest.NewFleet(t, e2etest.FleetOptions{Credentials: credsYAML.String(), Worker: "concurrency: 4", Env: env})
	launched := time.Now()
	var procs []*e2etest.Process
	for i := range workers {
		procs = append(procs, f.StartWorker(fmt.Sprintf("w%03d", i)))
	}
	// Every worker is up and pulling before the items come: each has been
	// heard from at least once.
	heard := map[string]bool{}
	var listErr error
	deadline := time.Now().Add(5 * time.Minute)
	for len(heard) < workers {
		if time.Now().After(deadline) {
			t.Fatalf("after 5m, %d of %d workers announced themselves (last listing error: %v); not heard from: %s",
				len(heard), workers, listErr, missingWorkers(procs, heard, 8))
		}
		ws, err := f.Queue.Workers(t.Context())
		if listErr = err; err == nil {
			for _, w := range ws {
				heard[w.ID] = true
			}
		}
		time.Sleep(250 * time.Millisecond) // a listing reads every worker's record
	}
	announced := len(heard)
	t.Logf("%d workers announced %s after their launch", announced, time.Since(launched).Round(time.Second))
	start := time.Now()
	n := 0
	ids := f.Publish("big", "sleep", items, func(id string) string {
		n++
		return fmt.Sprintf(`{"id":%q,"ms":%d}`, id, 100+(n*397)%2500)
	})
	results := f.WaitResults("big", items, 3*time.Minute)
	took := time.Since(start)
	for _, id := range ids {
		r, ok := results[id]
		if !ok || r.Outcome != kftype.OutcomeSucceeded || r.Attempts != 1 {
			t.Fatalf("result of %s: %+v (found %v)", id, r, ok)
		}
	}
	e2etest.StopWorkers(t, time.Minute, procs...)
	logs := f.Logs()
	if n := strings.Count(logs, "MaxWaiting"); n > 0 {
		t.Fatalf("%d pulls refused for MaxWaiting", n)
	}
	if n := strings.Count(logs, "pulling messages failed"); n > 0 {
		t.Fatalf("%d failed pulls", n)
	}
	if qs := f.QueueStats(); qs.Stream.Messages != 0 || qs.Consumer.AckPending != 0 || qs.Consumer.Redelivered != 0 {
		t.Fatalf("queue after the run: %+v", qs)
	}
	t.Logf("%d workers x 4 slots on one batch's lane: %d items done once each in %s, no pull refused",
		workers, items, took.Round(time.Millisecond))
}

// missingWorkers describes up to n of procs not in heard: whether each is
// still running or how it exited, and its last log lines.
func missingWorkers(procs []*e2etest.Process, heard map[string]bool, n int) string {
	var b strings.Builder
	shown := 0
	for _, p := range procs {
		if heard[p.Name()] {
			continue
		}
		if shown++; shown > n {
			fmt.Fprintf(&b, "\n(and more)")
			break
		}
		state := "running"
		if p.Exited() {
			state = fmt.Sprintf("exited %d", p.ExitCode())
		}
		fmt.Fprintf(&b, "\n%s (%s):\n%s", p.Name(), state, e2etest.Tail(p.Log.String(), 8))
	}
	return b.String()
}
