package producer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// fixableScript fails permanently (exit 65) for the items listed in the
// file "broken", and succeeds otherwise, printing the item and attempt.
const fixableScript = `D="{{dir}}"
cat > /dev/null
if [ -f "$D/broken" ] && grep -qx "$KEYFLEET_ITEM_ID" "$D/broken"; then
  echo "item $KEYFLEET_ITEM_ID is broken" >&2
  exit 65
fi
printf 'fixed:%s:%s' "$KEYFLEET_ITEM_ID" "$KEYFLEET_ATTEMPT"
`

func fixableFleet(t *testing.T) *e2etest.Fleet {
	t.Helper()
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 2}`,
		Worker:      "concurrency: 2",
		Jobs: `exec:
  command: ["{{dir}}/fixable.sh"]
  timeout: 1m`,
		Env: []string{"KEY_A=sk-a"},
	})
	f.WriteScript("fixable.sh", strings.ReplaceAll(fixableScript, "{{dir}}", f.Dir))
	return f
}

// dlq list shows the failed items; replay puts them back with fresh
// attempts and removes the records; once the cause is fixed they succeed.
func TestProducerDLQListAndReplay(t *testing.T) {
	f := fixableFleet(t)
	broken := []string{"item-0002", "item-0005", "item-0007"}
	f.WriteInput("broken", strings.Join(broken, "\n")+"\n")
	f.StartWorker("w1")
	const n = 10
	path := f.WriteInput("items.jsonl", e2etest.JSONLItems(n, `{"id":%q}`))
	r := f.Producer(nil, "enqueue", "--wait", "--batch", "b1", path)
	if r.Code != 1 || e2etest.WaitSummary(t, r.Stdout)["Failed"] != "3" {
		t.Fatalf("want 3 failed and exit 1:\n%s", r)
	}

	// list: a table, and JSON lines with every field.
	r = f.Producer(nil, "dlq", "list", "--batch", "b1")
	if r.Code != 0 {
		t.Fatalf("dlq list:\n%s", r)
	}
	for _, w := range append([]string{"ITEM", "permanent failure", "is broken", "3 dead letters in batch b1"}, broken...) {
		if !strings.Contains(r.Stdout, w) {
			t.Fatalf("dlq list lacks %q:\n%s", w, r.Stdout)
		}
	}
	r = f.Producer(nil, "dlq", "list", "--json")
	recs := e2etest.ParseJSONArray(t, r.Stdout)
	if r.Code != 0 || len(recs) != 3 {
		t.Fatalf("dlq list --json: want 3 records:\n%s", r)
	}
	for _, rec := range recs {
		for _, k := range []string{"item", "batch", "kind", "attempts", "reason", "error", "failed_at", "payload"} {
			if _, ok := rec[k]; !ok {
				t.Fatalf("record lacks %s: %v", k, rec)
			}
		}
		if rec["batch"] != "b1" || rec["reason"] != kftype.ReasonPermanent || rec["attempts"] != float64(1) {
			t.Fatalf("record: %v", rec)
		}
	}
	if r := f.Producer(nil, "dlq", "list", "--batch", "other"); r.Code != 0 || !strings.Contains(r.Stdout, "0 dead letters in batch other") {
		t.Fatalf("dlq list of another batch:\n%s", r)
	}

	// An unknown ID replays nothing.
	if r := f.Producer(nil, "dlq", "replay", "--batch", "b1", "item-0002", "item-0003"); r.Code != 2 || !strings.Contains(r.Stderr, `"item-0003"`) {
		t.Fatalf("replay with an ID not dead-lettered:\n%s", r)
	}
	if f.QueueStats().DeadLetters != 3 {
		t.Fatal("a refused replay changed the dead letters")
	}

	// Fix the cause, replay one by ID, then the rest with no filter.
	if err := os.Remove(filepath.Join(f.Dir, "broken")); err != nil {
		t.Fatal(err)
	}
	if r := f.Producer(nil, "dlq", "replay", "--batch", "b1", "item-0002"); r.Code != 0 || !strings.Contains(r.Stdout, "Replayed 1 dead letter in batch b1") {
		t.Fatalf("replay one:\n%s", r)
	}
	if r := f.Producer(nil, "dlq", "replay"); r.Code != 0 || !strings.Contains(r.Stdout, "Replayed 2 dead letters (all batches)") {
		t.Fatalf("replay all:\n%s", r)
	}
	testutil.WaitFor(t, "the replayed items to succeed", time.Minute, func() bool {
		res := f.WaitResults("b1", n, time.Minute)
		for _, id := range broken {
			if res[id].Outcome != kftype.OutcomeSucceeded {
				return false
			}
		}
		return true
	})
	res := f.WaitResults("b1", n, time.Minute)
	for _, id := range broken {
		// Fresh attempts: the replayed run is counted from 1 again.
		if r := res[id]; r.Attempts != 1 || r.Output != fmt.Sprintf("fixed:%s:1", id) {
			t.Fatalf("%s after replay: %+v", id, r)
		}
	}
	if r := f.Producer(nil, "dlq", "list"); r.Code != 0 || !strings.Contains(r.Stdout, "0 dead letters") {
		t.Fatalf("dlq list after replay:\n%s", r)
	}
	if r := f.Producer(nil, "dlq", "replay"); r.Code != 0 || !strings.Contains(r.Stdout, "Replayed 0 dead letters") {
		t.Fatalf("replay with nothing to replay:\n%s", r)
	}
}

// results writes one JSON line per item with the job's output, to stdout
// or to a file; exit 1 when some item failed.
func TestProducerResultsExport(t *testing.T) {
	f := fixableFleet(t)
	f.WriteInput("broken", "item-0003\n")
	f.StartWorker("w1")
	const n = 25
	path := f.WriteInput("items.jsonl", e2etest.JSONLItems(n, `{"id":%q,"text":"<b>&</b>"}`))
	if r := f.Producer(nil, "enqueue", "--wait", "--batch", "exp", path); r.Code != 1 {
		t.Fatalf("enqueue --wait:\n%s", r)
	}
	out := filepath.Join(f.Dir, "results.jsonl")
	r := f.Producer(nil, "results", "--batch", "exp", "-o", out)
	if r.Code != 1 || !strings.Contains(r.Stderr, "25 results of batch exp (24 succeeded, 1 failed)") {
		t.Fatalf("results -o: want exit 1 with 1 failed:\n%s", r)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := e2etest.ParseJSONLines(t, string(data))
	if len(lines) != n {
		t.Fatalf("want %d lines, got %d", n, len(lines))
	}
	seen := map[string]bool{}
	for _, l := range lines {
		id := l["item"].(string)
		seen[id] = true
		for _, k := range []string{"item", "batch", "outcome", "attempts", "duration", "credential_id", "error", "output"} {
			if _, ok := l[k]; !ok {
				t.Fatalf("line of %s lacks %s: %v", id, k, l)
			}
		}
		if id == "item-0003" {
			if l["outcome"] != "failed" || !strings.Contains(l["error"].(string), "item item-0003 is broken") {
				t.Fatalf("failed item: %v", l)
			}
			continue
		}
		if l["outcome"] != "succeeded" || l["output"] != fmt.Sprintf("fixed:%s:1", id) || l["credential_id"] != "key-a" || l["batch"] != "exp" {
			t.Fatalf("line: %v", l)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct items in %d lines", len(seen), n)
	}
	// stdout gives the same lines.
	r2 := f.Producer(nil, "results", "--batch", "exp")
	if r2.Code != 1 || len(e2etest.ParseJSONLines(t, r2.Stdout)) != n {
		t.Fatalf("results to stdout:\n%s", r2)
	}
	// No results: exit 0, said on stderr; a missing --batch is a usage error.
	if r := f.Producer(nil, "results", "--batch", "nothing-here"); r.Code != 0 || r.Stdout != "" || !strings.Contains(r.Stderr, "no results") {
		t.Fatalf("results of an unknown batch:\n%s", r)
	}
	if r := f.Producer(nil, "results"); r.Code != 2 {
		t.Fatalf("results without --batch:\n%s", r)
	}
}
