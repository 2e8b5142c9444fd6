package lifecycle

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// docs/handlers.md: a job never outlives its worker. A job left
// running keeps its credential's secret, and goes on using the key while
// its item runs again elsewhere.

// jobsDieBound is the promise: a worker's job processes are gone within a
// second of its end.
const jobsDieBound = time.Second

// lingeringScript is an exec job that runs long (the seconds in the file
// "sleep", else 60) and records its processes in "pids" as "<worker pid>
// <pid>..." lines. Item IDs ending in 0 are a shell that waits for a child
// `sleep` (the child outlives a SIGKILL of the shell unless its group is
// killed); the others exec `sleep` (the job's process is sleep itself).
const lingeringScript = `D="{{dir}}"
cat > /dev/null
echo "$KEYFLEET_ITEM_ID $KEYFLEET_ATTEMPT $PPID" >> "$D/runs"
s=$(cat "$D/sleep" 2>/dev/null || echo 60)
case "$KEYFLEET_ITEM_ID" in
*0) sleep "$s" & echo "$PPID $$ $!" >> "$D/pids"; wait ;;
*)  echo "$PPID $$" >> "$D/pids"; exec sleep "$s" ;;
esac
`

// lingeringFleet is a fleet of the two test keys whose exec job is
// lingeringScript.
func lingeringFleet(t *testing.T) *e2etest.Fleet {
	t.Helper()
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Pool: "lease_ttl: 2s",
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 1}
- {id: key-b, secret_env: KEY_B, max_concurrent: 1}`,
		Worker: "concurrency: 2\nshutdown_grace: 1m",
		Queue:  "ack_wait: 2s",
		Jobs: `exec:
  command: ["{{dir}}/job.sh"]
  timeout: 5m`,
		Env: []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"]},
	})
	f.WriteScript("job.sh", strings.ReplaceAll(lingeringScript, "{{dir}}", f.Dir))
	return f
}

// jobPIDs waits until worker runs n jobs and returns their processes' PIDs
// (the shell jobs' children included).
func jobPIDs(f *e2etest.Fleet, worker *e2etest.Process, n int) []int {
	f.T.Helper()
	var pids []int
	testutil.WaitFor(f.T, fmt.Sprintf("%s to run %d jobs", worker.Name(), n), time.Minute, func() bool {
		pids = pids[:0]
		jobs := 0
		for _, line := range strings.Split(strings.TrimSpace(f.File("pids")), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 2 || fs[0] != strconv.Itoa(worker.Pid()) {
				continue
			}
			jobs++
			for _, s := range fs[1:] {
				p, err := strconv.Atoi(s)
				if err != nil {
					f.T.Fatalf("pids: %q", line)
				}
				pids = append(pids, p)
			}
		}
		return jobs == n
	})
	for _, p := range pids {
		if !processRuns(p) {
			f.T.Fatalf("job process %d is not running", p)
		}
	}
	f.T.Cleanup(func() { killAll(pids) })
	return pids
}

// processRuns reports whether pid exists and is no zombie (a job whose
// parent died is a zombie until init reaps it).
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// untilGone polls until none of pids runs and returns how long after
// start that was, or the survivors once bound after start has passed.
func untilGone(pids []int, start time.Time, bound time.Duration) (time.Duration, []int) {
	for {
		var living []int
		for _, p := range pids {
			if processRuns(p) {
				living = append(living, p)
			}
		}
		if len(living) == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > bound {
			return time.Since(start), living
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func killAll(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// jobGuardOf returns the PID of worker's job guard process (its child
// named keyfleet-job-guard).
func jobGuardOf(t *testing.T, worker *e2etest.Process) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.HasPrefix(string(cmdline), "keyfleet-job-guard\x00") {
			continue
		}
		if fs := strings.Fields(s[i+1:]); len(fs) > 1 && fs[1] == strconv.Itoa(worker.Pid()) {
			return pid
		}
	}
	t.Fatalf("%s runs no job guard process", worker.Name())
	return 0
}

// SIGKILL of a worker running two exec jobs (one a shell with a child
// sleep, one sleep itself): every job process is gone within a second,
// and the items then run elsewhere on the same keys.
func TestSigkillKillsExecJobsOfTheWorker(t *testing.T) {
	f := lingeringFleet(t)
	ids := f.Publish("b", "exec", 2, e2etest.ItemJSON)
	w1 := f.StartWorker("w1")
	pids := jobPIDs(f, w1, 2)
	guard := jobGuardOf(t, w1)
	if len(pids) != 3 {
		t.Fatalf("job processes %v, want 3 (the shell, its child, the exec'd sleep)", pids)
	}
	killAt := time.Now()
	w1.Signal(syscall.SIGKILL)
	took, living := untilGone(pids, killAt, jobsDieBound)
	if living != nil {
		killAll(living)
		t.Fatalf("job processes %v of %v still running %s after the worker's SIGKILL", living, pids, jobsDieBound)
	}
	w1.WaitExit(t, 10*time.Second)
	if _, left := untilGone([]int{guard}, time.Now(), 10*time.Second); left != nil {
		t.Fatalf("the job guard %d outlives its worker", guard)
	}

	// The items come back after the ack wait and run on another worker.
	f.WriteFile("sleep", "0.05")
	w2 := f.StartWorker("w2")
	results := f.WaitResults("b", len(ids), 2*time.Minute)
	row := e2etest.ReliabilityRow{Scenario: "SIGKILL: exec jobs die with their worker", Items: len(ids), Took: took,
		Note: fmt.Sprintf("%d job processes (a shell's child sleep among them) gone %s after SIGKILL (bound %s); items redone on w2",
			len(pids), took.Round(time.Millisecond), jobsDieBound)}
	for _, id := range ids {
		if r, ok := results[id]; !ok || r.Outcome != kftype.OutcomeSucceeded || r.Worker != "w2" {
			row.Lost++
			t.Errorf("%s: %+v", id, r)
		}
	}
	row.Duplicates = f.Duplicates()
	row.LeakedSecrets = e2etest.CountSecrets(f.Logs())
	row.Passed = row.Lost == 0 && row.LeakedSecrets == 0 && row.Duplicates <= len(ids)
	e2etest.RecordRow(row)
	if !row.Passed {
		t.Errorf("%+v breaks its bounds (lost and leaked 0, duplicates at most the %d killed)", row, len(ids))
	}
	e2etest.StopWorkers(t, 30*time.Second, w2)
	t.Logf("SIGKILL: job processes %v gone %s after the worker's", pids, took.Round(time.Millisecond))
}

// The second SIGTERM (exit at once, code 4) kills the running jobs too,
// though the shutdown grace has a minute to run.
func TestSecondSignalKillsExecJobsOfTheWorker(t *testing.T) {
	f := lingeringFleet(t)
	f.Publish("b", "exec", 2, e2etest.ItemJSON)
	w1 := f.StartWorker("w1")
	pids := jobPIDs(f, w1, 2)
	w1.Signal(syscall.SIGTERM)
	testutil.WaitFor(t, "w1 to begin its graceful shutdown", 10*time.Second, func() bool {
		return strings.Contains(w1.Log.String(), "signal received")
	})
	if _, living := untilGone(pids, time.Now(), 0); len(living) != len(pids) {
		t.Fatalf("jobs %v ended in the grace (running: %v)", pids, living)
	}
	secondAt := time.Now()
	w1.Signal(syscall.SIGTERM)
	took, living := untilGone(pids, secondAt, jobsDieBound)
	if living != nil {
		killAll(living)
		t.Fatalf("job processes %v of %v still running %s after the second signal", living, pids, jobsDieBound)
	}
	if code := w1.WaitExit(t, 10*time.Second); code != 4 {
		t.Fatalf("w1 exited %d after a second signal, want 4", code)
	}
	t.Logf("second signal: job processes %v gone %s after it", pids, took.Round(time.Millisecond))
}
