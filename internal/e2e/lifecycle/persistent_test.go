package lifecycle

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// docs/handlers.md: persistent handlers (exec persistent: true),
// through the binaries, with a handler in Python.

// persistentHandlerPy is a persistent handler. Each process appends
// "<worker pid> <its pid>" to starts when it starts, and its PID to eof
// when its stdin ends. On an item's first attempt, "fail" makes it break
// in one of the ways that fail an item and restart the handler ("garbage"
// prints a debug line, which is skipped, then a broken answer with its
// id, which fails the item); "spawn"
// starts a child sleep (in the handler's process group) and records it in
// pids; "sleep" takes that long; "say" prints a line with the secret on
// stderr.
const persistentHandlerPy = `import json, os, subprocess, sys, time

d = os.environ["PH_DIR"]
with open(os.path.join(d, "starts"), "a") as f:
    f.write("%d %d\n" % (os.getppid(), os.getpid()))

def answer(a):
    a["id"] = req["id"]
    sys.stdout.write(json.dumps(a) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    req = json.loads(line)
    item = req["item"]
    fail = item.get("fail") if req["attempt"] == 1 else None
    if fail == "exit":
        print("fatal: crashed on %s" % req["id"], file=sys.stderr, flush=True)
        sys.exit(1)
    if fail == "garbage":
        print("debug: looking at %s" % req["id"], flush=True)
        answer({"status": "done"})
        continue
    if fail == "hang":
        time.sleep(300)
    if fail == "oversize":
        answer({"status": "ok", "output": "x" * 10000})
        continue
    if item.get("spawn"):
        child = subprocess.Popen(["sleep", "300"])
        with open(os.path.join(d, "pids"), "a") as f:
            f.write("%d %d %d\n" % (os.getppid(), os.getpid(), child.pid))
    if item.get("say"):
        print("working on %s with key %s" % (req["id"], req["secret"]), file=sys.stderr, flush=True)
    time.sleep(item.get("sleep", 0))
    answer({"status": "ok", "output": {"id": req["id"], "pid": os.getpid(), "key": req["credential_id"]}, "cost": 1})
with open(os.path.join(d, "eof"), "a") as f:
    f.write("%d\n" % os.getpid())
`

// persistentFleet is a fleet whose exec kind is persistentHandlerPy, with
// concurrency slots a worker and the two test keys.
func persistentFleet(t *testing.T, concurrency int, extraJobs string) *e2etest.Fleet {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("the persistent handler tests need python3: %v", err)
	}
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: fmt.Sprintf(`- {id: key-a, secret_env: KEY_A, max_concurrent: %d}
- {id: key-b, secret_env: KEY_B, max_concurrent: %d}`, concurrency, concurrency),
		Worker: fmt.Sprintf("concurrency: %d\nshutdown_grace: 1m\nretry_backoff: [100ms]", concurrency),
		Jobs: fmt.Sprintf(`max_output: 4KiB
exec:
  command: [%q, "{{dir}}/handler.py"]
  persistent: true
  env: {PH_DIR: "{{dir}}"}
%s`, python, extraJobs),
		Env: []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"]},
	})
	f.WriteFile("handler.py", persistentHandlerPy)
	return f
}

// lines returns the non-empty lines of a file of the fleet's dir.
func lines(f *e2etest.Fleet, name string) []string {
	var out []string
	for _, l := range strings.Split(f.File(name), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// 200 items on 2 workers × 3 slots take at most 6 handler processes.
// Four more items break the handler on their first attempt (it exits,
// answers with an unknown status, hangs past the timeout, writes a line
// over max_output):
// each fails as transient, its handler is replaced, and the item succeeds
// on its second attempt. Each cause is logged; stderr is logged scrubbed;
// a graceful stop ends every handler (the idle ones by the end of their
// stdin).
func TestPersistentHandlerFleet(t *testing.T) {
	f := persistentFleet(t, 3, "  timeout: 3s")
	const n = 200
	fails := map[string]string{"item-0200": "exit", "item-0201": "garbage", "item-0202": "hang", "item-0203": "oversize"}
	f.Publish("py", "exec", n+len(fails), func(id string) string {
		if fail, ok := fails[id]; ok {
			return fmt.Sprintf(`{"id":%q,"fail":%q}`, id, fail)
		}
		if id == "item-0010" {
			return fmt.Sprintf(`{"id":%q,"say":true}`, id)
		}
		return e2etest.ItemJSON(id)
	})
	start := time.Now()
	w1, w2 := f.StartWorker("w1"), f.StartWorker("w2")
	results := f.WaitResults("py", n+len(fails), 3*time.Minute)
	took := time.Since(start)

	pids := map[int]bool{}
	for id, r := range results {
		wantAttempts := 1
		if fails[id] != "" {
			wantAttempts = 2
		}
		var out struct {
			ID  string `json:"id"`
			PID int    `json:"pid"`
		}
		if r.Outcome != kftype.OutcomeSucceeded || r.Attempts != wantAttempts || json.Unmarshal([]byte(r.Output), &out) != nil || out.ID != id {
			t.Errorf("%s: %s after %d attempts (want succeeded after %d), output %q, error %q", id, r.Outcome, r.Attempts, wantAttempts, r.Output, r.Error)
		}
		pids[out.PID] = true
	}
	starts := lines(f, "starts")
	if most := 2*3 + len(fails); len(starts) > most {
		t.Errorf("%d handler processes started for 2 workers × 3 slots and %d failures, want at most %d:\n%s", len(starts), len(fails), most, strings.Join(starts, "\n"))
	}
	e2etest.StopWorkers(t, 30*time.Second, w1, w2)

	logs := f.Logs()
	for cause, want := range map[string]string{
		"exit": `exited (exit status 1); stderr: fatal: crashed on item-0200`, "answer": `unknown status \"done\"`,
		"timeout": "did not answer within the timeout (3s)", "oversize": "over jobs.max_output (4096 bytes)",
	} {
		re := regexp.MustCompile(`"persistent handler failed[^\n]*"cause":"` + cause + `"[^\n]*`)
		got := re.FindAllString(logs, -1)
		if len(got) != 1 || !strings.Contains(got[0], want) {
			t.Errorf("cause %s logged %d times, want once, with %q: %q", cause, len(got), want, got)
		}
	}
	if !regexp.MustCompile(`"cause":"skipped"[^\n]*debug: looking at item-0201`).MatchString(logs) {
		t.Errorf("the skipped debug line is not in the logs:\n%s", e2etest.Tail(logs, 40))
	}
	if !regexp.MustCompile(`"handler stderr"[^\n]*"line":"working on item-0010 with key \[REDACTED\]"`).MatchString(logs) {
		t.Errorf("the stderr line is not in the logs:\n%s", e2etest.Tail(logs, 40))
	}
	if c := e2etest.CountSecrets(logs); c != 0 {
		t.Errorf("the logs hold a secret %d times", c)
	}

	// Every handler is gone; those that were idle saw their stdin end.
	var all []int
	for _, l := range starts {
		p, _ := strconv.Atoi(strings.Fields(l)[1])
		all = append(all, p)
	}
	if _, living := untilGone(all, time.Now(), 5*time.Second); living != nil {
		killAll(living)
		t.Errorf("handlers %v outlive their workers' graceful stop", living)
	}
	if eof := lines(f, "eof"); len(eof) != len(starts)-len(fails) {
		t.Errorf("%d handlers saw their stdin end at the stop, want %d (all but the %d killed for failing)", len(eof), len(starts)-len(fails), len(fails))
	}
	t.Logf("%d items (4 breaking the handler once) on 2 workers × 3 slots in %s: %d handler processes started, %d served the results",
		n+len(fails), took.Round(time.Millisecond), len(starts), len(pids))
}

// A persistent handler that prints a banner on stdout when it starts, as
// many libraries do, costs no item: the banner is skipped and logged, and
// every item of the batch succeeds on its first attempt, from the
// processes started for the slots (before, each item failed, and each
// restart printed the banner again). A debug line with the secret printed
// on stdout before an answer is skipped too, and the secret is in no log.
func TestPersistentHandlerBanner(t *testing.T) {
	python := e2etest.Python3(t)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 2}",
		Worker:      "concurrency: 2\nmax_attempts: 3\nretry_backoff: [100ms]",
		Jobs:        fmt.Sprintf("exec:\n  command: [%q, %q]\n  persistent: true\n  timeout: 30s", python, "{{dir}}/banner.py"),
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"]},
	})
	f.WriteFile("banner.py", `import json, os, sys
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "starts"), "a") as f:
    f.write("%d\n" % os.getpid())
print("Loading the tokenizer... done (v1.2.3)", flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req["item"].get("debug"):
        print("debug: calling the API with key %s" % req["secret"], flush=True)
    print(json.dumps({"id": req["id"], "status": "ok", "output": "answer-for-" + req["id"]}), flush=True)
`)
	const n = 12
	f.Publish("banner", "exec", n, func(id string) string {
		return fmt.Sprintf(`{"id":%q,"debug":%t}`, id, id == "item-0003")
	})
	w := f.StartWorker("w1")
	results := f.WaitResults("banner", n, 2*time.Minute)
	for id, r := range results {
		if r.Outcome != kftype.OutcomeSucceeded || r.Attempts != 1 || r.Output != `"answer-for-`+id+`"` {
			t.Errorf("%s: %s after %d attempts, output %q, error %q; want its own answer at the first attempt", id, r.Outcome, r.Attempts, r.Output, r.Error)
		}
	}
	e2etest.StopWorkers(t, 30*time.Second, w)
	if starts := lines(f, "starts"); len(starts) > 2 {
		t.Errorf("%d handler processes started for 2 slots: %v", len(starts), starts)
	}
	logs := f.Logs()
	if strings.Contains(logs, "persistent handler failed") {
		t.Errorf("a handler failed:\n%s", e2etest.Tail(logs, 40))
	}
	if !regexp.MustCompile(`"cause":"skipped"[^\n]*Loading the tokenizer`).MatchString(logs) {
		t.Errorf("the skipped banner is not in the logs:\n%s", e2etest.Tail(logs, 40))
	}
	if c := e2etest.CountSecrets(logs); c != 0 {
		t.Errorf("the logs hold a secret %d times", c)
	}
}

// A worker's persistent handlers, busy or idle, and what they started in
// their process group, are gone within a second of its SIGKILL.
func TestPersistentHandlersDieWithWorker(t *testing.T) {
	f := persistentFleet(t, 2, "  timeout: 5m")
	// Both run at once, so two handlers start; the short one's is idle
	// after it.
	f.Publish("die", "exec", 2, func(id string) string {
		if id == "item-0000" {
			return fmt.Sprintf(`{"id":%q,"spawn":true,"sleep":0.5}`, id)
		}
		return fmt.Sprintf(`{"id":%q,"spawn":true,"sleep":300}`, id)
	})
	w := f.StartWorker("w1")
	f.WaitResults("die", 1, time.Minute)
	testutil.WaitFor(t, "both handlers to run", 30*time.Second, func() bool { return len(lines(f, "pids")) == 2 })
	var pids []int
	for _, l := range lines(f, "pids") {
		fs := strings.Fields(l)
		if fs[0] != strconv.Itoa(w.Pid()) {
			t.Fatalf("pids: %q is not a handler of worker %d", l, w.Pid())
		}
		for _, s := range fs[1:] {
			p, _ := strconv.Atoi(s)
			pids = append(pids, p)
		}
	}
	if len(pids) != 4 {
		t.Fatalf("handler processes and children %v, want 4", pids)
	}
	t.Cleanup(func() { killAll(pids) })
	for _, p := range pids {
		if !processRuns(p) {
			t.Fatalf("process %d is not running", p)
		}
	}
	killAt := time.Now()
	w.Signal(syscall.SIGKILL)
	took, living := untilGone(pids, killAt, jobsDieBound)
	if living != nil {
		t.Fatalf("processes %v of %v still running %s after the worker's SIGKILL", living, pids, jobsDieBound)
	}
	t.Logf("2 persistent handlers (one busy, one idle) and their children %v gone %s after the worker's SIGKILL", pids, took.Round(time.Millisecond))
}
