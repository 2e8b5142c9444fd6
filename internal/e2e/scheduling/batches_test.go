package scheduling

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// stepScript is the exec job of the batch tests: it logs each start with
// the wall clock, "<unix time> start <batch> <item> <worker pid>", to
// "starts", then takes $STEP seconds (default 0.1).
const stepScript = `echo "$(date +%s.%N) start $KEYFLEET_BATCH $KEYFLEET_ITEM_ID $PPID" >> "{{dir}}/starts"
cat > /dev/null
sleep "${STEP:-0.1}"
`

// stepFleet is a fleet of one key of max_concurrent 2 and an exec job
// running stepScript: a worker of 2 slots takes about 50 ms an item.
func stepFleet(t *testing.T, queueYAML string) *e2etest.Fleet {
	t.Helper()
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		// A killed worker's leases lapse soon.
		Pool:        "lease_ttl: 2s",
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 2}",
		Worker:      "concurrency: 2\nshutdown_grace: 5s",
		Queue:       queueYAML,
		Jobs:        "exec:\n  command: [\"{{dir}}/step.sh\"]\n  timeout: 1m",
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"]},
	})
	f.WriteScript("step.sh", strings.ReplaceAll(stepScript, "{{dir}}", f.Dir))
	return f
}

// jobStart is one line of stepScript's log.
type jobStart struct {
	At          time.Time
	Batch, Item string
	WorkerPID   int
}

// starts parses stepScript's log, in time order.
func starts(f *e2etest.Fleet) []jobStart {
	var out []jobStart
	for _, line := range strings.Split(strings.TrimSpace(f.File("starts")), "\n") {
		fs := strings.Fields(line)
		if len(fs) != 5 {
			continue
		}
		sec, err := strconv.ParseFloat(fs[0], 64)
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(fs[4])
		out = append(out, jobStart{At: time.Unix(0, int64(sec*1e9)), Batch: fs[2], Item: fs[3], WorkerPID: pid})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// startsOf counts the starts of batch after from.
func startsOf(f *e2etest.Fleet, batch string, from time.Time) int {
	n := 0
	for _, s := range starts(f) {
		if s.Batch == batch && s.At.After(from) {
			n++
		}
	}
	return n
}

// enqueueExec enqueues n exec items as batch through the producer binary.
func enqueueExec(f *e2etest.Fleet, batch string, n int) {
	f.T.Helper()
	path := f.WriteInput(batch+".jsonl", e2etest.JSONLItems(n, `{"id":%q}`))
	if r := f.Producer(nil, "enqueue", "--kind", "exec", "--batch", batch, path); r.Code != 0 {
		f.T.Fatalf("enqueue %s:\n%s", batch, r)
	}
}

// showBatch runs `batch show ID --json` and decodes it.
func showBatch(f *e2etest.Fleet, id string) map[string]any {
	f.T.Helper()
	r := f.Producer(nil, "batch", "show", id, "--json")
	var b map[string]any
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &b) != nil {
		f.T.Fatalf("batch show %s --json:\n%s", id, r)
	}
	return b
}

// steer runs `batch <action> ID`, wants exit 0 and one line, and returns
// when the command returned.
func steer(f *e2etest.Fleet, action, id string) (e2etest.Ran, time.Time) {
	f.T.Helper()
	r := f.Producer(nil, "batch", action, id)
	returned := time.Now()
	if r.Code != 0 || strings.Count(r.Stdout, "\n") != 1 {
		f.T.Fatalf("batch %s %s: want exit 0 and one line:\n%s", action, id, r)
	}
	return r, returned
}

// Pause stops new starts of the batch fleet-wide within a second of the
// command's return (items running finish; an item pulled goes back), while
// other batches go on; resume goes on, and every item runs. Then the
// batch is done: list and show --json say so, and pausing it, resuming it
// and steering an unknown batch are refused with exit 2.
func TestBatchPauseResume(t *testing.T) {
	f := stepFleet(t, "")
	const n = 40
	enqueueExec(f, "held", n)
	w := f.StartWorker("w1")
	testutil.WaitFor(t, "4 items of the batch to start", time.Minute, func() bool { return startsOf(f, "held", time.Time{}) >= 4 })
	r, paused := steer(f, "pause", "held")
	if !strings.Contains(r.Stdout, "Paused batch held") {
		t.Fatalf("pause said:\n%s", r)
	}
	if b := showBatch(f, "held"); b["state"] != "paused" {
		t.Fatalf("state after pause: %v", b["state"])
	}
	// Another batch runs meanwhile: the worker has free slots and pulls,
	// and still starts nothing of the paused batch after the second.
	enqueueExec(f, "other", 10)
	f.WaitResults("other", 10, time.Minute)
	testutil.WaitFor(t, "the second after the pause to pass", 10*time.Second, func() bool { return time.Since(paused) > 1500*time.Millisecond })
	late := startsOf(f, "held", paused.Add(time.Second))
	within := startsOf(f, "held", paused) - late
	before := startsOf(f, "held", time.Time{}) - within - late
	if late > 0 {
		t.Fatalf("%d items of the paused batch started more than a second after `batch pause` returned", late)
	}
	if before >= n {
		t.Fatal("the batch was done before the pause: the test did not exercise it")
	}
	if b := showBatch(f, "held"); b["state"] != "paused" || b["done"].(float64) >= n {
		t.Fatalf("paused batch: %v", b)
	}

	if r, _ := steer(f, "resume", "held"); !strings.Contains(r.Stdout, "Resumed batch held") {
		t.Fatalf("resume said:\n%s", r)
	}
	for id, res := range f.WaitResults("held", n, time.Minute) {
		if res.Outcome != kftype.OutcomeSucceeded {
			t.Errorf("held/%s: %+v", id, res)
		}
	}
	// The view: done, with its history.
	testutil.WaitFor(t, "the batch to show done", 10*time.Second, func() bool { return showBatch(f, "held")["state"] == "done" })
	b := showBatch(f, "held")
	hist, _ := b["history"].([]any)
	if b["total"] != float64(n) || b["done"] != float64(n) || b["succeeded"] != float64(n) || b["failed"] != 0.0 ||
		b["cancelled"] != 0.0 || b["kind"] != "exec" || b["priority"] != 3.0 || b["weight"] != 1.0 || len(hist) != 2 {
		t.Fatalf("batch show --json: %v", b)
	}
	lr := f.Producer(nil, "batch", "list", "--json")
	var list []map[string]any
	if lr.Code != 0 || json.Unmarshal([]byte(lr.Stdout), &list) != nil || len(list) != 2 {
		t.Fatalf("batch list --json: want an array of 2:\n%s", lr)
	}
	for _, row := range list {
		for _, k := range []string{"id", "kind", "priority", "weight", "state", "total", "done", "succeeded", "failed", "cancelled"} {
			if _, ok := row[k]; !ok {
				t.Fatalf("batch list --json: %q missing in %v", k, row)
			}
		}
	}

	// Refused: one line, exit 2.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"batch", "pause", "held"}, "batch held is done (40 of 40 items have an outcome"},
		{[]string{"batch", "resume", "held"}, "batch held is not paused"},
		{[]string{"batch", "pause", "no-such-batch"}, "no batch no-such-batch"},
		{[]string{"batch", "cancel", "no-such-batch"}, "no batch no-such-batch"},
		{[]string{"batch", "show", "no-such-batch", "--json"}, "no batch no-such-batch"},
	} {
		r := f.Producer(nil, c.args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, c.want) || strings.Count(strings.TrimSpace(r.Stderr), "\n") > 0 {
			t.Fatalf("want exit 2 and one line saying %q:\n%s", c.want, r)
		}
	}
	w.Signal(syscall.SIGTERM)
	w.WaitExit(t, 20*time.Second)
	t.Logf("starts of the paused batch: %d before the pause, %d within the second after `batch pause` returned, %d later", before, within, late)
}

// Cancel: items not started never run; `results --batch` lists every item
// exactly once (succeeded for those that ran, cancelled for the rest); the
// stream holds none of its messages; an `enqueue --wait` of the batch
// ends with the summary, the cancelled counted, and exit 1; an enqueue
// into the cancelled batch is refused with exit 2 and publishes nothing.
func TestBatchCancel(t *testing.T) {
	f := stepFleet(t, "")
	const n = 40
	path := f.WriteInput("doomed.jsonl", e2etest.JSONLItems(n, `{"id":%q}`))
	waiter := f.Start("waiter", e2etest.Binary(t, "producer"), "enqueue", "--wait", "--kind", "exec", "--batch", "doomed", "--config", f.ConfigPath, path)
	testutil.WaitFor(t, "the items to be enqueued", time.Minute, func() bool { return strings.Contains(waiter.Log.String(), "Enqueued batch") })
	w := f.StartWorker("w1")
	testutil.WaitFor(t, "4 items to start", time.Minute, func() bool { return startsOf(f, "doomed", time.Time{}) >= 4 })
	r, cancelled := steer(f, "cancel", "doomed")
	m := regexp.MustCompile(`Cancelled batch doomed: (\d+) items? not started (?:was|were) recorded cancelled and removed from the stream; (\d+) (?:was|were) out with workers`).
		FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("cancel said:\n%s", r)
	}
	drained, _ := strconv.Atoi(m[1])

	code := waiter.WaitExit(t, time.Minute)
	out := waiter.Log.String()
	if code != 1 {
		t.Fatalf("enqueue --wait of a cancelled batch: want exit 1, got %d:\n%s", code, out)
	}
	sum := e2etest.WaitSummary(t, out)
	succ, _ := strconv.Atoi(sum["Succeeded"])
	canc, _ := strconv.Atoi(sum["Cancelled"])
	if sum["Total"] != fmt.Sprint(n) || sum["Failed"] != "0" || canc < drained || succ+canc != n || !strings.Contains(out, "The batch was cancelled") {
		t.Fatalf("summary %v (drained %d):\n%s", sum, drained, out)
	}

	// Every item once; the cancelled ones never started, none started
	// later than a second after the cancel returned.
	rr := f.Producer(nil, "results", "--batch", "doomed")
	if rr.Code != 1 || !strings.Contains(rr.Stderr, fmt.Sprintf("%d results of batch doomed (%d succeeded, 0 failed, %d cancelled)", n, succ, canc)) {
		t.Fatalf("results:\n%s", rr)
	}
	started := map[string]bool{}
	for _, s := range starts(f) {
		if s.Batch == "doomed" {
			started[s.Item] = true
		}
	}
	seen := map[string]bool{}
	for _, l := range e2etest.ParseJSONLines(t, rr.Stdout) {
		id, _ := l["item"].(string)
		if seen[id] {
			t.Fatalf("item %s listed twice", id)
		}
		seen[id] = true
		switch l["outcome"] {
		case kftype.OutcomeCancelled:
			if started[id] {
				t.Fatalf("item %s was cancelled, yet it ran", id)
			}
		case kftype.OutcomeSucceeded:
			if !started[id] {
				t.Fatalf("item %s succeeded without a start", id)
			}
		default:
			t.Fatalf("item %s: outcome %v", id, l["outcome"])
		}
	}
	if len(seen) != n {
		t.Fatalf("results list %d items, want %d", len(seen), n)
	}
	if late := startsOf(f, "doomed", cancelled.Add(time.Second)); late > 0 {
		t.Fatalf("%d items started more than a second after `batch cancel` returned", late)
	}
	testutil.WaitFor(t, "the stream to hold none of the batch's messages", 10*time.Second, func() bool { return f.QueueStats().Stream.Messages == 0 })
	b := showBatch(f, "doomed")
	if b["state"] != "cancelled" || b["done"] != float64(n) || b["cancelled"] != float64(canc) || b["succeeded"] != float64(succ) {
		t.Fatalf("batch show --json after the cancel: %v", b)
	}

	// The batch takes nothing more.
	more := f.WriteInput("more.jsonl", e2etest.JSONLItems(3, `{"id":"more-%s"}`))
	if r := f.Producer(nil, "enqueue", "--kind", "exec", "--batch", "doomed", more); r.Code != 2 ||
		!strings.Contains(r.Stderr, "batch doomed is cancelled: it takes no new items; nothing was enqueued") {
		t.Fatalf("enqueue into a cancelled batch: want exit 2:\n%s", r)
	}
	if r := f.Producer(nil, "batch", "resume", "doomed"); r.Code != 2 || !strings.Contains(r.Stderr, "batch doomed is cancelled (by ") {
		t.Fatalf("resume of a cancelled batch: want exit 2:\n%s", r)
	}
	if st := f.QueueStats(); st.Stream.Messages != 0 {
		t.Fatalf("the refused enqueue published: %+v", st.Stream)
	}
	w.Signal(syscall.SIGTERM)
	w.WaitExit(t, 20*time.Second)
	t.Logf("cancel: %d items ran, %d cancelled (%d drained by the command, the rest by the workers)", succ, canc, drained)
}

// A paused batch stays paused when the worker running it is killed
// (SIGKILL) and another starts: the killed worker's items come back after
// the ack wait, and nothing of the batch runs on the new worker until it
// is resumed; then every item succeeds.
func TestBatchPauseSurvivesWorkerKill(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	f := stepFleet(t, "ack_wait: 2s")
	const n = 30
	enqueueExec(f, "held", n)
	w1 := f.StartWorker("w1")
	testutil.WaitFor(t, "4 items to start", time.Minute, func() bool { return startsOf(f, "held", time.Time{}) >= 4 })
	_, paused := steer(f, "pause", "held")
	w1.Signal(syscall.SIGKILL)
	w1.WaitExit(t, 10*time.Second)
	killed := time.Now()
	w2 := f.StartWorker("w2")
	enqueueExec(f, "other", 10)
	f.WaitResults("other", 10, time.Minute)
	// Past the ack wait (2 s) and a second: the killed worker's items are
	// back, for w2 to run if it ignored the pause.
	testutil.WaitFor(t, "the ack wait to pass", 20*time.Second, func() bool { return time.Since(killed) > 3*time.Second })
	for _, s := range starts(f) {
		if s.Batch == "held" && (s.WorkerPID == w2.Pid() || s.At.After(paused.Add(time.Second))) {
			t.Fatalf("an item of the paused batch ran after the pause (worker pid %d; w2 is %d): %+v", s.WorkerPID, w2.Pid(), s)
		}
	}
	if b := showBatch(f, "held"); b["state"] != "paused" {
		t.Fatalf("after the kill: state %v", b["state"])
	}
	steer(f, "resume", "held")
	for id, r := range f.WaitResults("held", n, time.Minute) {
		if r.Outcome != kftype.OutcomeSucceeded {
			t.Errorf("held/%s: %+v", id, r)
		}
	}
	w2.Signal(syscall.SIGTERM)
	w2.WaitExit(t, 20*time.Second)
}
