package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The holes issue 31's audit found and a run confirmed, each through the
// binaries (the pool's head-of-line blocking: pkg/creds hol_test.go).
// Each records a row of the reliability table: lost counts items without
// the outcome they should have, duplicates items run more often than
// they should.

// auditRow records one hole's row and fails the test when it is not
// clean.
func auditRow(f *e2etest.Fleet, scenario string, items, lost, dups int, took time.Duration, note string) {
	f.T.Helper()
	row := e2etest.ReliabilityRow{Scenario: "audit: " + scenario, Items: items, Lost: lost, Duplicates: dups, Took: took, Note: note,
		LeakedSecrets: e2etest.CountSecrets(f.Logs())}
	row.Passed = lost == 0 && dups == 0 && row.LeakedSecrets == 0
	e2etest.RecordRow(row)
	if !row.Passed {
		f.T.Errorf("%s: %+v", scenario, row)
	}
}

// runsOf counts the lines of the fleet's file "runs" whose first field is
// item.
func runsOf(f *e2etest.Fleet, item string) int {
	n := 0
	for _, l := range strings.Split(f.File("runs"), "\n") {
		if fs := strings.Fields(l); len(fs) > 0 && fs[0] == item {
			n++
		}
	}
	return n
}

// 1. Persistent handler answers are matched to their items: a handler
// that answers each item twice, and writes an answer for an item never
// sent before each answer, still gives every item its own output, and
// lands no refusal on a key (the stray answers say "rejected").
func TestAuditAnswersMatchTheirItems(t *testing.T) {
	python := e2etest.Python3(t)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 1}\n- {id: key-b, secret_env: KEY_B, max_concurrent: 1}",
		Worker:      "concurrency: 2\nretry_backoff: [100ms]",
		Jobs:        fmt.Sprintf("exec:\n  command: [%q, %q]\n  persistent: true\n  timeout: 10s", python, "{{dir}}/twice.py"),
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"]},
	})
	f.WriteScript("twice.py", `import json, sys
for line in sys.stdin:
    req = json.loads(line)
    def say(a):
        sys.stdout.write(json.dumps(a) + "\n")
    say({"id": "not-" + req["id"], "status": "rejected", "error": "stray verdict"})
    say({"id": req["id"], "status": "ok", "output": "answer-for-" + req["id"]})
    say({"id": req["id"], "status": "rejected", "output": "second answer for " + req["id"]})
    sys.stdout.flush()
`)
	start := time.Now()
	f.StartWorker("w1")
	idsA := f.Publish("A", "exec", 12, func(id string) string { return fmt.Sprintf(`{"id":%q}`, id) })
	resA := f.WaitResults("A", len(idsA), time.Minute)
	idsB := f.Publish("B", "exec", 12, func(id string) string { return fmt.Sprintf(`{"id":%q}`, id) })
	resB := f.WaitResults("B", len(idsB), time.Minute)
	lost := 0
	for _, res := range []map[string]kftype.Result{resA, resB} {
		for id, r := range res {
			if r.Outcome != kftype.OutcomeSucceeded || r.Output != `"answer-for-`+id+`"` {
				t.Errorf("item %s of %s: %s %q: not its own answer", id, r.Batch, r.Outcome, r.Output)
				lost++
			}
		}
	}
	st, err := f.Pool().Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Credentials {
		if c.State == creds.StateDisabled || len(c.Refusals) > 0 {
			t.Errorf("key %s took a stray answer's refusal: %+v", c.ID, c)
		}
	}
	auditRow(f, "a handler's stray and second answers", len(idsA)+len(idsB), lost, 0, time.Since(start), "each item got its own answer; no key refused")
}

// 2. A record larger than the server's max payload once escaped is cut to
// fit and stored: the item runs once (before, it ran again and again, each
// run a paid call, its record refused as "maximum payload exceeded").
func TestAuditOversizedRecordsRunOnce(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 2}",
		Worker:      "concurrency: 2\nmax_attempts: 2\nretry_backoff: [100ms]",
		Jobs:        "max_output: 4MiB\nexec:\n  command: [\"sh\", \"{{dir}}/big.sh\"]\n  timeout: 30s",
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"]},
	})
	// Both items print 900 KB of '<' (5.4 MB escaped as \u003c); "fail"
	// fails for good, "ok" succeeds.
	f.WriteScript("big.sh", strings.ReplaceAll(`echo "$KEYFLEET_ITEM_ID" >> "{{dir}}/runs"
head -c 900000 /dev/zero | tr '\0' '<'
case "$KEYFLEET_ITEM_ID" in fail) exit 65 ;; esac
`, "{{dir}}", f.Dir))
	start := time.Now()
	lt := strings.Repeat("<", 300_000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"ok", "fail"} {
		if _, err := f.Queue.Publish(ctx, kftype.Item{ID: id, Batch: "big", Kind: "exec", Payload: []byte(`{"id":"` + id + `","text":"` + lt + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	f.StartWorker("w1")
	res := f.WaitResults("big", 2, time.Minute)
	testutil.WaitFor(t, "the stream to empty", 30*time.Second, func() bool { return f.QueueStats().Stream.Messages == 0 })
	dups := 0
	for _, id := range []string{"ok", "fail"} {
		if n := runsOf(f, id); n != 1 {
			t.Errorf("item %s ran %d times, want once", id, n)
			dups++
		}
	}
	lost := 0
	if r := res["ok"]; r.Outcome != kftype.OutcomeSucceeded || !r.OutputTruncated || !strings.HasPrefix(r.Output, "<<<<") {
		t.Errorf("ok: %s, truncated %v, %d bytes of output", r.Outcome, r.OutputTruncated, len(r.Output))
		lost++
	}
	r := f.Producer(nil, "dlq", "list", "--json")
	var dls []map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &dls); err != nil || len(dls) != 1 || dls[0]["item"] != "fail" {
		t.Errorf("dead letters: %v\n%s", err, r)
		lost++
	}
	if logs := f.Logs(); strings.Contains(logs, "maximum payload exceeded") {
		t.Error("a record was refused by the server")
	}
	auditRow(f, "records larger than the max payload once escaped", 2, lost, dups, time.Since(start), "cut to fit; each item ran once")
}

// 3. An item whose cost fits only a disabled key is dead-lettered, naming
// why, and holds back none of its class (before: 0 of 20 cost-1 items
// done in 60 s while the small key was idle).
func TestAuditCostThatFitsOnlyADisabledKey(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Pool:        "cost: {field: cost, default: 1}",
		Credentials: "- {id: small, secret_env: KEY_A, limits: [{cost: 1000/m}]}\n- {id: big, secret_env: KEY_B, limits: [{cost: 100000/m}]}",
		Worker:      "concurrency: 4",
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"]},
	})
	f.StartWorker("w1")
	testutil.WaitFor(t, "the keys registered", 30*time.Second, func() bool {
		st, err := f.Pool().Stats(context.Background())
		return err == nil && st.Total == 2
	})
	if r := f.Producer(nil, "creds", "disable", "big", "--reason", "billing"); r.Code != 0 {
		t.Fatalf("creds disable:\n%s", r)
	}
	start := time.Now()
	f.Publish("heavy", "sleep", 1, func(id string) string { return fmt.Sprintf(`{"id":%q,"ms":1,"cost":5000}`, id) })
	ids := f.Publish("light", "sleep", 20, func(id string) string { return fmt.Sprintf(`{"id":%q,"ms":1,"cost":1}`, id) })
	light := f.WaitResults("light", len(ids), 30*time.Second)
	heavy := f.WaitResults("heavy", 1, 30*time.Second)
	lost := 0
	for _, id := range ids {
		if light[id].Outcome != kftype.OutcomeSucceeded {
			lost++
		}
	}
	if h := heavy["item-0000"]; h.Outcome != kftype.OutcomeFailed || !strings.Contains(h.Error, "disabled") {
		t.Errorf("the cost-5000 item: %s %q, want failed naming the disabled key", h.Outcome, h.Error)
		lost++
	}
	auditRow(f, "a cost that fits only a disabled key", 21, lost, 0, time.Since(start), "dead-lettered naming the disabled key; its class ran on")
}

// 4. An item refused by every key its kind may use is dead-lettered when
// the pool holds more keys than the kind (before: a kind of 1 key in a
// pool of 3 redelivered it every second, forever).
func TestAuditRefusedByEveryKeyOfItsKind(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: k1, secret_env: KEY_A}\n- {id: k2, secret_env: KEY_A}\n- {id: k3, secret_env: KEY_A}",
		Worker:      "concurrency: 2",
		Jobs:        "kinds:\n  one:\n    exec: {command: [\"sh\", \"-c\", \"echo $KEYFLEET_ITEM_ID >> {{dir}}/runs; echo refused >&2; exit 77\"]}\n    credentials: [k1]",
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"]},
	})
	start := time.Now()
	f.StartWorker("w1")
	f.Publish("refused", "one", 1, func(id string) string { return fmt.Sprintf(`{"id":%q}`, id) })
	res := f.WaitResults("refused", 1, 30*time.Second)
	lost, dups := 0, 0
	if r := res["item-0000"]; r.Outcome != kftype.OutcomeFailed || !strings.Contains(r.Error, "refused by 1 keys") {
		t.Errorf("result %s %q: want failed, refused by its kind's one key", r.Outcome, r.Error)
		lost++
	}
	if n := runsOf(f, "item-0000"); n != 1 {
		t.Errorf("the item ran %d times, want once (its kind has one key)", n)
		dups++
	}
	auditRow(f, "refused by every key its kind may use", 1, lost, dups, time.Since(start), "dead-lettered after its kind's only key refused it")
}

// 6. The read-only dashboard shows no text a job wrote, in /api/status
// and /api/events; with the admin token it does.
func TestAuditReadOnlyDashboardShowsNoJobText(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A}",
		Jobs:        "exec: {command: [\"sh\", \"-c\", \"echo 'CONFIDENTIAL-OUTPUT-42 for patient Jane Roe' >&2; exit 65\"]}",
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"], "KF_ADMIN=" + strings.Repeat("t", 24)},
	})
	start := time.Now()
	f.StartWorker("w1")
	f.Publish("secret-text", "exec", 1, func(id string) string { return fmt.Sprintf(`{"id":%q}`, id) })
	f.WaitResults("secret-text", 1, 30*time.Second)
	for _, token := range []string{"", "KF_ADMIN"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		args := []string{"dashboard", "--listen", addr, "--config", f.ConfigPath}
		if token != "" {
			args = append(args, "--admin-token-env", token)
		}
		d := f.Start("dashboard"+token, e2etest.Binary(t, "producer"), args...)
		var body string
		testutil.WaitFor(t, "the dashboard's dead letter", 30*time.Second, func() bool {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/status", nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+strings.Repeat("t", 24))
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			return strings.Contains(body, `"dead_letter_list":[{`)
		})
		shown := strings.Contains(body, "CONFIDENTIAL-OUTPUT-42")
		if shown != (token != "") {
			t.Errorf("dashboard (token %v): the job's text shown %v:\n%.2000s", token != "", shown, body)
		}
		d.Signal(syscall.SIGINT)
		d.WaitExit(t, 15*time.Second)
	}
	auditRow(f, "the read-only dashboard and job text", 1, 0, 0, time.Since(start), "job text only with the admin token")
}

// 7. Enqueueing the same file after queue.duplicate_window adds nothing
// and runs nothing again, and --wait ends (before: every item ran again,
// the total became 10 of 5 and never completed).
func TestAuditEnqueueAgainAfterTheDuplicateWindow(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 2}",
		Queue:       "duplicate_window: 2s",
		Jobs:        "exec: {command: [\"sh\", \"-c\", \"echo $KEYFLEET_ITEM_ID >> {{dir}}/runs; cat > /dev/null\"]}",
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"]},
	})
	start := time.Now()
	f.StartWorker("w1")
	path := f.WriteInput("five.jsonl", e2etest.JSONLItems(5, `{"id":%q}`))
	if r := f.Producer(nil, "enqueue", "--kind", "exec", "--batch", "five", "--wait", path); r.Code != 0 {
		t.Fatalf("first enqueue:\n%s", r)
	}
	window := time.Now().Add(3 * time.Second)
	testutil.WaitFor(t, "the duplicate window to pass", 10*time.Second, func() bool { return time.Now().After(window) })
	r := f.Producer(nil, "enqueue", "--kind", "exec", "--batch", "five", "--wait", "--json", path)
	if r.Code != 0 {
		t.Fatalf("the same file again:\n%s", r)
	}
	var out struct {
		New, Duplicates int
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.New != 0 || out.Duplicates != 5 {
		t.Errorf("the same file again: %+v (%v), want 0 new and 5 duplicates:\n%s", out, err, r)
	}
	dups := 0
	for i := range 5 {
		if n := runsOf(f, fmt.Sprintf("item-%04d", i)); n != 1 {
			dups++
		}
	}
	rec, err := f.Queue.Batch(context.Background(), "five")
	if err != nil || rec.Total != 5 {
		t.Errorf("batch five's record: total %d (%v), want 5", rec.Total, err)
	}
	auditRow(f, "the same file enqueued after the duplicate window", 5, 0, dups, time.Since(start), "0 new, 5 duplicates, total 5")
}

// 8. producer results writes no raw C1 or bidi control a job printed.
func TestAuditResultsWithoutTerminalControls(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A}",
		Jobs:        "exec: {command: [\"sh\", \"{{dir}}/ctl.sh\"]}",
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"]},
	})
	f.WriteScript("ctl.sh", "cat > /dev/null\nprintf 'a\\302\\23331mred\\342\\200\\256txet b'\n")
	start := time.Now()
	f.StartWorker("w1")
	f.Publish("ctl", "exec", 1, func(id string) string { return fmt.Sprintf(`{"id":%q}`, id) })
	f.WaitResults("ctl", 1, 30*time.Second)
	r := f.Producer(nil, "results", "--batch", "ctl")
	lost := 0
	if r.Code != 0 || strings.ContainsAny(r.Stdout, "\u009b\u202e") || !strings.Contains(r.Stdout, `\u009b`) || !strings.Contains(r.Stdout, `\u202e`) {
		t.Errorf("results hold raw controls, or not their escapes:\n%q", r.Stdout)
		lost++
	}
	var res kftype.Result
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &res); err != nil || res.Output != "a\u009b31mred\u202etxet b" {
		t.Errorf("the output decodes to %q (%v), want the job's", res.Output, err)
		lost++
	}
	auditRow(f, "results and terminal controls", 1, lost, 0, time.Since(start), "C1 and bidi controls written as \\u escapes")
}
