package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// A large fleet on one consumer: every worker keeps its pulls waiting and
// none is refused ("Exceeded MaxWaiting" past JetStream's default of 512
// waiting pulls), and every item is done once. 200 worker processes in the
// full profile (up to 800 pulls waiting: the test checks that more than 512
// did at once), 40 in the short one.
func TestLargeFleetOnOneConsumer(t *testing.T) {
	workers, items := 40, 400
	if fullProfile() {
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
	f := newFleet(t, fleetOptions{Credentials: credsYAML.String(), Worker: "concurrency: 4", Env: env})
	launched := time.Now()
	var procs []*proc
	for i := range workers {
		procs = append(procs, f.startWorker(fmt.Sprintf("w%03d", i)))
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
		ws, err := f.q.Workers(t.Context())
		if listErr = err; err == nil {
			for _, w := range ws {
				heard[w.ID] = true
			}
		}
		time.Sleep(250 * time.Millisecond) // a listing reads every worker's record
	}
	announced := len(heard)
	t.Logf("%d workers announced %s after their launch", announced, time.Since(launched).Round(time.Second))
	c, err := f.q.Consumer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The most pull requests the consumer held at once.
	peak := make(chan int, 1)
	stop := make(chan struct{})
	go func() {
		most := 0
		for {
			if info, err := c.Info(t.Context()); err == nil {
				most = max(most, info.NumWaiting)
			}
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	n := 0
	ids := f.publish("big", "sleep", items, func(id string) string {
		n++
		return fmt.Sprintf(`{"id":%q,"ms":%d}`, id, 100+(n*397)%2500)
	})
	results := f.waitResults("big", items, 3*time.Minute)
	took := time.Since(start)
	time.Sleep(2500 * time.Millisecond) // the pulls of the slots freed last are waiting now (a pull waits 3s)
	close(stop)
	mostWaiting := <-peak
	for _, id := range ids {
		r, ok := results[id]
		if !ok || r.Outcome != queue.OutcomeSucceeded || r.Attempts != 1 {
			t.Fatalf("result of %s: %+v (found %v)", id, r, ok)
		}
	}
	stopFleet(t, time.Minute, procs...)
	logs := f.logs()
	if n := strings.Count(logs, "MaxWaiting"); n > 0 {
		t.Fatalf("%d pulls refused for MaxWaiting", n)
	}
	if n := strings.Count(logs, "pulling messages failed"); n > 0 {
		t.Fatalf("%d failed pulls", n)
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 || info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("consumer after the run: %d redelivered, %d ack pending, %d pending", info.NumRedelivered, info.NumAckPending, info.NumPending)
	}
	t.Logf("%d workers x 4 slots on one consumer: %d items done once each in %s; at most %d pulls waiting at once (JetStream's default limit is 512), none refused",
		workers, items, took.Round(time.Millisecond), mostWaiting)
	if fullProfile() && mostWaiting <= 512 {
		t.Fatalf("at most %d pulls waited at once: the run did not reach the limit it is meant to test", mostWaiting)
	}
}

// missingWorkers describes up to n of procs not in heard: whether each is
// still running or how it exited, and its last log lines.
func missingWorkers(procs []*proc, heard map[string]bool, n int) string {
	var b strings.Builder
	shown := 0
	for _, p := range procs {
		if heard[p.name] {
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
		fmt.Fprintf(&b, "\n%s (%s):\n%s", p.name, state, tail(p.log.String(), 8))
	}
	return b.String()
}
