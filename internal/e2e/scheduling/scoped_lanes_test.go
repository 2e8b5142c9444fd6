package scheduling

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

// scopedItems is n exec items whose model (pool.scope.field) cycles
// through models, "" standing for an item without one.
func scopedItems(prefix string, n int, models ...string) string {
	var b strings.Builder
	for i := range n {
		if m := models[i%len(models)]; m == "" {
			fmt.Fprintf(&b, "{\"id\":\"%s-%d\"}\n", prefix, i)
		} else {
			fmt.Fprintf(&b, "{\"id\":\"%s-%d\",\"model\":%q}\n", prefix, i, m)
		}
	}
	return b.String()
}

// A batch whose items have two scopes and none travels in three lanes:
// the record lists the scopes, a worker runs every item once, and each
// lane is found drained and its consumer deleted. A cancel drains every
// lane of a batch: each item not started is recorded cancelled.
func TestBatchScopedLanes(t *testing.T) {
	// The worker and the producer both read pool.scope.
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Pool:        "lease_ttl: 2s\nscope: {field: model}",
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 2}",
		Worker:      "concurrency: 2\nshutdown_grace: 5s",
		Jobs:        "exec:\n  command: [\"{{dir}}/step.sh\"]\n  timeout: 1m",
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"], "STEP=0.01"},
	})
	f.WriteScript("step.sh", strings.ReplaceAll(stepScript, "{{dir}}", f.Dir))
	const n = 30
	path := f.WriteInput("mixed.jsonl", scopedItems("m", n, "gpt-4o", "", "models/gemini-1.5-pro"))
	if r := f.Producer(nil, "enqueue", "--kind", "exec", "--batch", "mixed", path); r.Code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}
	rec, err := f.Queue.Batch(t.Context(), "mixed")
	if err != nil || strings.Join(rec.Scopes, ",") != "gpt-4o,models/gemini-1.5-pro" {
		t.Fatalf("record %+v %v: want the scopes gpt-4o and models/gemini-1.5-pro", rec, err)
	}
	w := f.StartWorker("w1")
	for id, res := range f.WaitResults("mixed", n, time.Minute) {
		if res.Outcome != kftype.OutcomeSucceeded {
			t.Errorf("mixed/%s: %+v", id, res)
		}
	}
	runs := map[string]int{}
	for _, s := range starts(f) {
		runs[s.Item]++
	}
	for i := range n {
		if id := fmt.Sprintf("m-%d", i); runs[id] != 1 {
			t.Errorf("item %s ran %d times", id, runs[id])
		}
	}
	testutil.WaitFor(t, "every lane's consumer to be deleted as drained", 20*time.Second, func() bool {
		return f.QueueStats().Consumer.Lanes == 0
	})
	w.Signal(syscall.SIGTERM)
	w.WaitExit(t, 20*time.Second)

	// No worker: every item of the cancelled batch is waiting, in its
	// lane; the command takes them all.
	path = f.WriteInput("doomed.jsonl", scopedItems("d", 12, "o3", "gpt-4o", ""))
	if r := f.Producer(nil, "enqueue", "--kind", "exec", "--batch", "doomed", path); r.Code != 0 {
		t.Fatalf("enqueue doomed:\n%s", r)
	}
	if r, _ := steer(f, "cancel", "doomed"); !strings.Contains(r.Stdout, "Cancelled batch doomed: 12 items not started were recorded cancelled") {
		t.Fatalf("cancel said:\n%s", r)
	}
	if st := f.QueueStats(); st.Stream.Messages != 0 {
		t.Fatalf("the stream holds %d messages after the cancel", st.Stream.Messages)
	}
	if res := f.WaitResults("doomed", 12, 10*time.Second); len(res) != 12 {
		t.Fatalf("results of the cancelled batch: %d", len(res))
	}
}
