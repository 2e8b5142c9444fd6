package producer

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// IDs are kept exactly as given: items whose IDs differ only in leading or
// trailing white space are three items, a batch ID with a trailing space is
// followed to its end by --wait and found by results, and a dead-lettered
// item with a trailing space in its ID is replayed by that exact ID.
func TestIDsKeptExactly(t *testing.T) {
	f := fixableFleet(t)
	f.WriteInput("broken", "bad \n")
	f.StartWorker("w1")

	ids := []string{"ws-1 ", "ws-1", " ws-1"}
	path := f.WriteInput("ws.jsonl", `{"id":"ws-1 "}`+"\n"+`{"id":"ws-1"}`+"\n"+`{"id":" ws-1"}`+"\n")
	r := f.Producer(nil, "enqueue", "--wait", "--batch", "b2 ", path)
	if r.Code != 0 {
		t.Fatalf("enqueue --wait --batch 'b2 ': want exit 0:\n%s", r)
	}
	if s := e2etest.WaitSummary(t, r.Stdout); s["Total"] != "3" || s["Succeeded"] != "3" {
		t.Fatalf("want 3 items, 3 succeeded:\n%s", r)
	}
	r = f.Producer(nil, "results", "--batch", "b2 ")
	lines := e2etest.ParseJSONLines(t, r.Stdout)
	if r.Code != 0 || len(lines) != 3 {
		t.Fatalf("results --batch 'b2 ': want 3 lines:\n%s", r)
	}
	var got []string
	for _, l := range lines {
		id, _ := l["item"].(string)
		got = append(got, id)
		if l["batch"] != "b2 " || l["outcome"] != kftype.OutcomeSucceeded || l["output"] != "fixed:"+id+":1" {
			t.Errorf("result line: %q", l)
		}
	}
	sort.Strings(got)
	want := append([]string(nil), ids...)
	sort.Strings(want)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("results hold items %q, want exactly %q", got, want)
	}
	if r := f.Producer(nil, "results", "--batch", "b2"); r.Code != 0 || r.Stdout != "" {
		t.Fatalf("batch b2 (no space) was never enqueued, yet has results:\n%s", r)
	}

	// A failing item whose ID ends with a space, beside one without.
	path = f.WriteInput("bad.jsonl", `{"id":"bad "}`+"\n"+`{"id":"bad"}`+"\n")
	r = f.Producer(nil, "enqueue", "--wait", "--batch", "b3 ", path)
	if s := e2etest.WaitSummary(t, r.Stdout); r.Code != 1 || s["Total"] != "2" || s["Failed"] != "1" {
		t.Fatalf("want 1 of 2 failed and exit 1:\n%s", r)
	}
	r = f.Producer(nil, "dlq", "list", "--json", "--batch", "b3 ")
	recs := e2etest.ParseJSONArray(t, r.Stdout)
	if r.Code != 0 || len(recs) != 1 || recs[0]["item"] != "bad " || recs[0]["batch"] != "b3 " {
		t.Fatalf("dlq list --batch 'b3 ': want the one record of %q:\n%s", "bad ", r)
	}
	if r := f.Producer(nil, "dlq", "replay", "--batch", "b3 ", "bad"); r.Code != 2 || !strings.Contains(r.Stderr, `"bad"`) {
		t.Fatalf("replay of %q, which never failed: want exit 2 naming it:\n%s", "bad", r)
	}
	if err := os.Remove(filepath.Join(f.Dir, "broken")); err != nil {
		t.Fatal(err)
	}
	if r := f.Producer(nil, "dlq", "replay", "--batch", "b3 ", "bad "); r.Code != 0 || !strings.Contains(r.Stdout, "Replayed 1 dead letter") {
		t.Fatalf("replay of %q:\n%s", "bad ", r)
	}
	testutil.WaitFor(t, "the replayed item to succeed", time.Minute, func() bool {
		return f.WaitResults("b3 ", 2, time.Minute)["bad "].Outcome == kftype.OutcomeSucceeded
	})
	res := f.WaitResults("b3 ", 2, time.Minute)
	if r := res["bad "]; r.Attempts != 1 || r.Output != "fixed:bad :1" {
		t.Fatalf("%q after replay: %+v", "bad ", r)
	}
	if r := res["bad"]; r.Outcome != kftype.OutcomeSucceeded || r.Output != "fixed:bad:1" {
		t.Fatalf("%q: %+v", "bad", r)
	}
	if st := f.QueueStats(); st.DeadLetters != 0 {
		t.Fatalf("dead letters left after the replay: %d", st.DeadLetters)
	}
}
