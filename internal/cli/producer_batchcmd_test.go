package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// produce runs the producer in process and returns its exit code and
// output.
func produce(t *testing.T, cfg string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := ProducerMain(append(args, "--config", cfg), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// finishItems takes the n items of batch off the stream as a worker would
// (acked) and stores their outcomes.
func finishItems(t *testing.T, ctx context.Context, q *queue.Queue, batch string, outcome func(item string) string) {
	t.Helper()
	c, err := q.LaneConsumer(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := c.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	for msg := range msgs.Messages() {
		it, err := queue.DecodeItem(msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.PutResult(ctx, kftype.Result{Item: it.ID, Batch: batch, Kind: it.Kind, Outcome: outcome(it.ID),
			FinishedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		if err := msg.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}

// The batch commands in process against a real NATS server (no worker):
// list and show (JSON and text), pause / resume / cancel with one line
// each, every refusal with exit 2 and one line, enqueue into a cancelled
// batch refused, and results listing every item of a cancelled batch once.
func TestBatchCommands(t *testing.T) {
	srv := natstest.Start(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, srv.URL(), "BATCHCMD")
	input := func(name string, ids ...string) string {
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(`{"id":"` + id + `","ms":1}` + "\n")
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mustRun := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errb := produce(t, cfg, args...)
		if code != want {
			t.Fatalf("producer %v: want exit %d, got %d\nstdout:\n%s\nstderr:\n%s", args, want, code, out, errb)
		}
		return out, errb
	}
	mustRun(0, "enqueue", "--kind", "sleep", "--batch", "steer", "--priority", "2", "--weight", "5", input("steer.jsonl", "a", "b", "c", "d", "e"))
	mustRun(0, "enqueue", "--kind", "sleep", "--batch", "finished", input("finished.jsonl", "x", "y", "z"))
	ctx, q := testQueue(t, srv.URL(), "BATCHCMD", queue.Attach)
	finishItems(t, ctx, q, "finished", func(id string) string {
		if id == "z" {
			return kftype.OutcomeFailed
		}
		return kftype.OutcomeSucceeded
	})
	// Two results of one item: the latest counts, once.
	for _, o := range []string{kftype.OutcomeFailed, kftype.OutcomeSucceeded} {
		if err := q.PutResult(ctx, kftype.Result{Item: "a", Batch: "steer", Kind: "sleep", Outcome: o, FinishedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}

	show := func(id string) batchview.Batch {
		t.Helper()
		out, _ := mustRun(0, "batch", "show", id, "--json")
		var b batchview.Batch
		if err := json.Unmarshal([]byte(out), &b); err != nil {
			t.Fatalf("show --json: %v\n%s", err, out)
		}
		return b
	}
	out, _ := mustRun(0, "batch", "list", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Fatalf("list --json: want an array of 2: %v\n%s", err, out)
	}
	for _, k := range []string{"id", "kind", "priority", "weight", "state", "total", "done", "succeeded", "failed", "cancelled", "history", "enqueued_at"} {
		if _, ok := list[0][k]; !ok {
			t.Fatalf("list --json lacks %q: %v", k, list[0])
		}
	}
	if b := show("steer"); b.State != "running" || b.Kind != "sleep" || b.Priority != 2 || b.Weight != 5 || b.Total != 5 || b.Done != 1 || b.Succeeded != 1 {
		t.Fatalf("steer: %+v", b)
	}
	if b := show("finished"); b.State != "done" || b.Total != 3 || b.Done != 3 || b.Succeeded != 2 || b.Failed != 1 || !b.Complete {
		t.Fatalf("finished: %+v", b)
	}

	// Refusals: one line, exit 2.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"batch", "pause", "nope"}, "no batch nope"},
		{[]string{"batch", "show", "nope"}, "no batch nope"},
		{[]string{"batch", "resume", "steer"}, "batch steer is not paused: it is running"},
		{[]string{"batch", "pause", "finished"}, "batch finished is done (3 of 3 items have an outcome: 2 succeeded, 1 failed, 0 cancelled): nothing is left to pause"},
		{[]string{"batch", "cancel", "finished"}, "nothing is left to cancel"},
		{[]string{"batch", "pause"}, "accepts 1 arg"},
		{[]string{"enqueue", "--kind", "sleep", "--priority", "6", input("p.jsonl", "p")}, "--priority: 6: want 1 (first) to 5 (last); default 3"},
		{[]string{"enqueue", "--kind", "sleep", "--weight", "1001", input("w.jsonl", "w")}, "--weight: 1001: want an integer from 1 to 1000; default 1"},
	} {
		_, errb := mustRun(2, c.args...)
		if !strings.Contains(errb, c.want) || strings.Count(strings.TrimSpace(errb), "\n") > 1 {
			t.Fatalf("producer %v: want one line saying %q, got:\n%s", c.args, c.want, errb)
		}
	}

	out, _ = mustRun(0, "batch", "pause", "steer")
	if !strings.HasPrefix(out, "Paused batch steer: no new item of it starts") || strings.Count(out, "\n") != 1 {
		t.Fatalf("pause said:\n%s", out)
	}
	b := show("steer")
	if b.State != "paused" || len(b.History) != 1 || b.History[0].Action != "pause" || !strings.Contains(b.History[0].By, "@") ||
		b.LastChange == nil || b.LastChange.Action != "pause" {
		t.Fatalf("after pause: %+v", b)
	}
	if _, errb := mustRun(2, "batch", "pause", "steer"); !strings.Contains(errb, "batch steer is paused already") {
		t.Fatalf("pause twice: %s", errb)
	}
	if out, _ := mustRun(0, "batch", "resume", "steer"); !strings.HasPrefix(out, "Resumed batch steer") {
		t.Fatalf("resume said:\n%s", out)
	}
	out, _ = mustRun(0, "batch", "cancel", "steer")
	t.Logf("cancel: %s", out)
	// Every message of the batch was waiting (no worker): all 5 are taken
	// and removed; the item that has a result keeps it, so 4 are recorded
	// cancelled.
	if !strings.HasPrefix(out, "Cancelled batch steer: 4 items not started were recorded cancelled and removed from the stream; 0 were out with workers") {
		t.Fatalf("cancel said:\n%s", out)
	}
	if b := show("steer"); b.State != "cancelled" || b.Done != 5 || b.Succeeded != 1 || b.Cancelled != 4 || len(b.History) != 3 {
		t.Fatalf("after cancel: %+v", b)
	}
	for _, action := range []string{"pause", "resume", "cancel"} {
		if _, errb := mustRun(2, "batch", action, "steer"); !strings.Contains(errb, "batch steer is cancelled (by ") {
			t.Fatalf("%s of a cancelled batch: %s", action, errb)
		}
	}

	// Enqueue into the cancelled batch: refused, nothing published.
	_, errb := mustRun(2, "enqueue", "--kind", "sleep", "--batch", "steer", input("more.jsonl", "f", "g"))
	if !strings.Contains(errb, "batch steer is cancelled: it takes no new items; nothing was enqueued") {
		t.Fatalf("enqueue into a cancelled batch: %s", errb)
	}
	if rec, err := q.Batch(ctx, "steer"); err != nil || rec.Total != 5 {
		t.Fatalf("record after a refused enqueue: %+v %v", rec, err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Stream.Messages != 0 {
		t.Fatalf("stream after a refused enqueue: %+v %v", st.Stream, err)
	}

	// results: every item once, the cancelled ones as cancelled.
	code, out, errb := produce(t, cfg, "results", "--batch", "steer")
	if code != 1 || !strings.Contains(errb, "5 results of batch steer (1 succeeded, 0 failed, 4 cancelled)") {
		t.Fatalf("results: exit %d\n%s%s", code, out, errb)
	}
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r kftype.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if _, dup := seen[r.Item]; dup {
			t.Fatalf("item %s listed twice", r.Item)
		}
		seen[r.Item] = r.Outcome
	}
	want := map[string]string{"a": "succeeded", "b": "cancelled", "c": "cancelled", "d": "cancelled", "e": "cancelled"}
	for id, o := range want {
		if seen[id] != o {
			t.Fatalf("results: %v, want %v", seen, want)
		}
	}

	// The text views.
	out, _ = mustRun(0, "batch", "list")
	for _, w := range []string{"BATCH", "STATE", "CANCELLED", "LAST CHANGE", "cancel by ", "5/5", "3/3", "done"} {
		if !strings.Contains(out, w) {
			t.Fatalf("batch list lacks %q:\n%s", w, out)
		}
	}
	t.Logf("batch list:\n%s", out)
	out, _ = mustRun(0, "batch", "show", "steer")
	t.Logf("batch show:\n%s", out)
	for _, w := range []string{"Batch steer", "Priority:", "2 (1 first .. 5 last)", "State:", "cancelled", "5/5: 1 succeeded, 0 failed, 4 cancelled", "History:", "pause", "resume"} {
		if !strings.Contains(out, w) {
			t.Fatalf("batch show lacks %q:\n%s", w, out)
		}
	}
}

// A batch ID that holds terminal controls is escaped in the table and in
// the one-line messages.
func TestBatchCommandsTerminalSafe(t *testing.T) {
	srv := natstest.Start(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, srv.URL(), "BATCHESC")
	p := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(p, []byte("{\"id\":\"a\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := "evil\x1b]0;owned\x07\u202e"
	if code, out, errb := produce(t, cfg, "enqueue", "--kind", "sleep", "--batch", id, p); code != 0 {
		t.Fatalf("enqueue: %d\n%s%s", code, out, errb)
	}
	for _, args := range [][]string{{"batch", "list"}, {"batch", "show", id}, {"batch", "pause", id}, {"batch", "pause", id}} {
		_, out, errb := produce(t, cfg, args...)
		if strings.ContainsAny(out+errb, "\x1b\x07\u202e") || !strings.Contains(out+errb, `evil\x1b]0;owned\x07\u{202e}`) {
			t.Fatalf("producer %q printed the ID unescaped or not at all:\n%q\n%q", args, out, errb)
		}
	}
}
