package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Three worker processes over two credentials of concurrency 1: every item
// succeeds once, no credential is ever used by two jobs at once, secrets
// reach the jobs and no log.
func TestThreeWorkersShareTwoKeys(t *testing.T) {
	f := e2etest.GuardedFleet(t, "concurrency: 3", "")
	const n = 300
	start := time.Now()
	ids := f.Publish("b1", "exec", n, e2etest.ItemJSON)
	workers := []*e2etest.Process{f.StartWorker("w1"), f.StartWorker("w2"), f.StartWorker("w3")}
	results := f.WaitResults("b1", n, 2*time.Minute)
	took := time.Since(start)

	for _, id := range ids {
		r, ok := results[id]
		if !ok {
			t.Fatalf("no result for %s", id)
		}
		if r.Outcome != kftype.OutcomeSucceeded || r.Output != fmt.Sprintf("out:%s:1", id) || r.Attempts != 1 {
			t.Fatalf("result of %s: %+v", id, r)
		}
		if r.CredentialID != "key-a" && r.CredentialID != "key-b" {
			t.Fatalf("credential %q", r.CredentialID)
		}
	}
	if v := f.File("violations"); v != "" {
		t.Fatalf("violations seen by the jobs:\n%s", v)
	}
	runs := f.RunsPerItem()
	dups := 0
	for _, c := range runs {
		if c > 1 {
			dups++
		}
	}
	if len(runs) != n || dups != 0 {
		t.Fatalf("runs: %d items ran, %d more than once", len(runs), dups)
	}
	stopAt := time.Now()
	e2etest.StopWorkers(t, 30*time.Second, workers...)
	t.Logf("clean shutdown of 3 workers took %s", time.Since(stopAt).Round(time.Millisecond))
	st := f.QueueStats()
	if st.Stream.Messages != 0 || st.Consumer.AckPending != 0 {
		t.Fatalf("queue not empty after the batch: %+v", st)
	}
	f.AssertNoSecretsInLogs()
	f.Account("3 workers share 2 keys (concurrency 1)", ids, results, took, e2etest.Bounds{}, "")
}
