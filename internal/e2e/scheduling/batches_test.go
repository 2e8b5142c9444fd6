package e2e

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

	"github.com/keyfleet/keyfleet/internal/queue"
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
func stepFleet(t *testing.T, queueYAML string) *fleet {
	t.Helper()
	f := newFleet(t, fleetOptions{
		// A killed worker's leases lapse soon.
		Pool:        "lease_ttl: 2s",
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 2}",
		Worker:      "concurrency: 2\nshutdown_grace: 5s",
		Queue:       queueYAML,
		Jobs:        "exec:\n  command: [\"{{dir}}/step.sh\"]\n  timeout: 1m",
		Env:         []string{"KEY_A=" + testSecrets["key-a"]},
	})
	f.writeScript("step.sh", strings.ReplaceAll(stepScript, "{{dir}}", f.dir))
	return f
}

// jobStart is one line of stepScript's log.
type jobStart struct {
	At          time.Time
	Batch, Item string
	WorkerPID   int
}

// starts parses stepScript's log, in time order.
func (f *fleet) starts() []jobStart {
	var out []jobStart
	for _, line := range strings.Split(strings.TrimSpace(f.file("starts")), "\n") {
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
func (f *fleet) startsOf(batch string, from time.Time) int {
	n := 0
	for _, s := range f.starts() {
		if s.Batch == batch && s.At.After(from) {
			n++
		}
	}
	return n
}

// enqueueExec enqueues n exec items as batch through the producer binary.
func (f *fleet) enqueueExec(batch string, n int) {
	f.t.Helper()
	path := f.writeInput(batch+".jsonl", jsonlItems(n, `{"id":%q}`))
	if r := f.producer(nil, "enqueue", "--kind", "exec", "--batch", batch, path); r.code != 0 {
		f.t.Fatalf("enqueue %s:\n%s", batch, r)
	}
}

// showBatch runs `batch show ID --json` and decodes it.
func (f *fleet) showBatch(id string) map[string]any {
	f.t.Helper()
	r := f.producer(nil, "batch", "show", id, "--json")
	var b map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &b) != nil {
		f.t.Fatalf("batch show %s --json:\n%s", id, r)
	}
	return b
}

// steer runs `batch <action> ID`, wants exit 0 and one line, and returns
// when the command returned.
func (f *fleet) steer(action, id string) (ran, time.Time) {
	f.t.Helper()
	r := f.producer(nil, "batch", action, id)
	returned := time.Now()
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		f.t.Fatalf("batch %s %s: want exit 0 and one line:\n%s", action, id, r)
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
	f.enqueueExec("held", n)
	w := f.startWorker("w1")
	testutil.WaitFor(t, "4 items of the batch to start", time.Minute, func() bool { return f.startsOf("held", time.Time{}) >= 4 })
	r, paused := f.steer("pause", "held")
	if !strings.Contains(r.stdout, "Paused batch held") {
		t.Fatalf("pause said:\n%s", r)
	}
	if b := f.showBatch("held"); b["state"] != "paused" {
		t.Fatalf("state after pause: %v", b["state"])
	}
	// Another batch runs meanwhile: the worker has free slots and pulls,
	// and still starts nothing of the paused batch after the second.
	f.enqueueExec("other", 10)
	f.waitResults("other", 10, time.Minute)
	testutil.WaitFor(t, "the second after the pause to pass", 10*time.Second, func() bool { return time.Since(paused) > 1500*time.Millisecond })
	late := f.startsOf("held", paused.Add(time.Second))
	within := f.startsOf("held", paused) - late
	before := f.startsOf("held", time.Time{}) - within - late
	if late > 0 {
		t.Fatalf("%d items of the paused batch started more than a second after `batch pause` returned", late)
	}
	if before >= n {
		t.Fatal("the batch was done before the pause: the test did not exercise it")
	}
	if b := f.showBatch("held"); b["state"] != "paused" || b["done"].(float64) >= n {
		t.Fatalf("paused batch: %v", b)
	}

	if r, _ := f.steer("resume", "held"); !strings.Contains(r.stdout, "Resumed batch held") {
		t.Fatalf("resume said:\n%s", r)
	}
	for id, res := range f.waitResults("held", n, time.Minute) {
		if res.Outcome != queue.OutcomeSucceeded {
			t.Errorf("held/%s: %+v", id, res)
		}
	}
	// The view: done, with its history.
	testutil.WaitFor(t, "the batch to show done", 10*time.Second, func() bool { return f.showBatch("held")["state"] == "done" })
	b := f.showBatch("held")
	hist, _ := b["history"].([]any)
	if b["total"] != float64(n) || b["done"] != float64(n) || b["succeeded"] != float64(n) || b["failed"] != 0.0 ||
		b["cancelled"] != 0.0 || b["kind"] != "exec" || b["priority"] != 3.0 || b["weight"] != 1.0 || len(hist) != 2 {
		t.Fatalf("batch show --json: %v", b)
	}
	lr := f.producer(nil, "batch", "list", "--json")
	var list []map[string]any
	if lr.code != 0 || json.Unmarshal([]byte(lr.stdout), &list) != nil || len(list) != 2 {
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
		r := f.producer(nil, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Fatalf("want exit 2 and one line saying %q:\n%s", c.want, r)
		}
	}
	w.signal(syscall.SIGTERM)
	w.wait(t, 20*time.Second)
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
	path := f.writeInput("doomed.jsonl", jsonlItems(n, `{"id":%q}`))
	waiter := f.start("waiter", binary(t, "producer"), "enqueue", "--wait", "--kind", "exec", "--batch", "doomed", "--config", f.cfg, path)
	testutil.WaitFor(t, "the items to be enqueued", time.Minute, func() bool { return strings.Contains(waiter.log.String(), "Enqueued batch") })
	w := f.startWorker("w1")
	testutil.WaitFor(t, "4 items to start", time.Minute, func() bool { return f.startsOf("doomed", time.Time{}) >= 4 })
	r, cancelled := f.steer("cancel", "doomed")
	m := regexp.MustCompile(`Cancelled batch doomed: (\d+) items? not started (?:was|were) recorded cancelled and removed from the stream; (\d+) (?:was|were) out with workers`).
		FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("cancel said:\n%s", r)
	}
	drained, _ := strconv.Atoi(m[1])

	code := waiter.wait(t, time.Minute)
	out := waiter.log.String()
	if code != 1 {
		t.Fatalf("enqueue --wait of a cancelled batch: want exit 1, got %d:\n%s", code, out)
	}
	sum := waitSummary(t, out)
	succ, _ := strconv.Atoi(sum["Succeeded"])
	canc, _ := strconv.Atoi(sum["Cancelled"])
	if sum["Total"] != fmt.Sprint(n) || sum["Failed"] != "0" || canc < drained || succ+canc != n || !strings.Contains(out, "The batch was cancelled") {
		t.Fatalf("summary %v (drained %d):\n%s", sum, drained, out)
	}

	// Every item once; the cancelled ones never started, none started
	// later than a second after the cancel returned.
	rr := f.producer(nil, "results", "--batch", "doomed")
	if rr.code != 1 || !strings.Contains(rr.stderr, fmt.Sprintf("%d results of batch doomed (%d succeeded, 0 failed, %d cancelled)", n, succ, canc)) {
		t.Fatalf("results:\n%s", rr)
	}
	started := map[string]bool{}
	for _, s := range f.starts() {
		if s.Batch == "doomed" {
			started[s.Item] = true
		}
	}
	seen := map[string]bool{}
	for _, l := range parseJSONLines(t, rr.stdout) {
		id, _ := l["item"].(string)
		if seen[id] {
			t.Fatalf("item %s listed twice", id)
		}
		seen[id] = true
		switch l["outcome"] {
		case queue.OutcomeCancelled:
			if started[id] {
				t.Fatalf("item %s was cancelled, yet it ran", id)
			}
		case queue.OutcomeSucceeded:
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
	if late := f.startsOf("doomed", cancelled.Add(time.Second)); late > 0 {
		t.Fatalf("%d items started more than a second after `batch cancel` returned", late)
	}
	testutil.WaitFor(t, "the stream to hold none of the batch's messages", 10*time.Second, func() bool { return f.queueStats().Stream.Messages == 0 })
	b := f.showBatch("doomed")
	if b["state"] != "cancelled" || b["done"] != float64(n) || b["cancelled"] != float64(canc) || b["succeeded"] != float64(succ) {
		t.Fatalf("batch show --json after the cancel: %v", b)
	}

	// The batch takes nothing more.
	more := f.writeInput("more.jsonl", jsonlItems(3, `{"id":"more-%s"}`))
	if r := f.producer(nil, "enqueue", "--kind", "exec", "--batch", "doomed", more); r.code != 2 ||
		!strings.Contains(r.stderr, "batch doomed is cancelled: it takes no new items; nothing was enqueued") {
		t.Fatalf("enqueue into a cancelled batch: want exit 2:\n%s", r)
	}
	if r := f.producer(nil, "batch", "resume", "doomed"); r.code != 2 || !strings.Contains(r.stderr, "batch doomed is cancelled (by ") {
		t.Fatalf("resume of a cancelled batch: want exit 2:\n%s", r)
	}
	if st := f.queueStats(); st.Stream.Messages != 0 {
		t.Fatalf("the refused enqueue published: %+v", st.Stream)
	}
	w.signal(syscall.SIGTERM)
	w.wait(t, 20*time.Second)
	t.Logf("cancel: %d items ran, %d cancelled (%d drained by the command, the rest by the workers)", succ, canc, drained)
}

// A paused batch stays paused when the worker running it is killed
// (SIGKILL) and another starts: the killed worker's items come back after
// the ack wait, and nothing of the batch runs on the new worker until it
// is resumed; then every item succeeds.
func TestBatchPauseSurvivesWorkerKill(t *testing.T) {
	longWaitingScenario(t)
	f := stepFleet(t, "ack_wait: 2s")
	const n = 30
	f.enqueueExec("held", n)
	w1 := f.startWorker("w1")
	testutil.WaitFor(t, "4 items to start", time.Minute, func() bool { return f.startsOf("held", time.Time{}) >= 4 })
	_, paused := f.steer("pause", "held")
	w1.signal(syscall.SIGKILL)
	w1.wait(t, 10*time.Second)
	killed := time.Now()
	w2 := f.startWorker("w2")
	f.enqueueExec("other", 10)
	f.waitResults("other", 10, time.Minute)
	// Past the ack wait (2 s) and a second: the killed worker's items are
	// back, for w2 to run if it ignored the pause.
	testutil.WaitFor(t, "the ack wait to pass", 20*time.Second, func() bool { return time.Since(killed) > 3*time.Second })
	for _, s := range f.starts() {
		if s.Batch == "held" && (s.WorkerPID == w2.Pid() || s.At.After(paused.Add(time.Second))) {
			t.Fatalf("an item of the paused batch ran after the pause (worker pid %d; w2 is %d): %+v", s.WorkerPID, w2.Pid(), s)
		}
	}
	if b := f.showBatch("held"); b["state"] != "paused" {
		t.Fatalf("after the kill: state %v", b["state"])
	}
	f.steer("resume", "held")
	for id, r := range f.waitResults("held", n, time.Minute) {
		if r.Outcome != queue.OutcomeSucceeded {
			t.Errorf("held/%s: %+v", id, r)
		}
	}
	w2.signal(syscall.SIGTERM)
	w2.wait(t, 20*time.Second)
}
