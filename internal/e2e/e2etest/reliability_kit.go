package e2etest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/faultproxy"
)

// Helpers for the fault scenarios (reliability_*_test.go).

// HoldGuardScript is guardScript for scenarios where jobs get killed (a
// cancelled job, a partitioned or paused worker): the credential's hold is
// a symlink to the job's PID, so a hold left behind by a job that was
// killed is seen as stale, not as a second holder. A job finding the hold
// of a LIVE job reports an overlap, with the holder's PID, name, state,
// parent and group as /proc shows them (and takes the hold over); a job
// whose hold was taken while it ran reports one too. A killed job is a
// zombie until init reaps it, seconds later on some machines: its stat is
// read once, so that a reaping between two reads is not taken for life.
//
// It also logs, with the wall clock, every start and end (and with TICKS=n
// every use of the key, n uses TICK seconds apart) to "events" as
// "<unix time> start|tick|end <item> <attempt> <credential> <job pid>
// <worker pid>", and sleeps the seconds in "sleep-<worker pid>" if the test
// wrote that file, else $SLEEP.
const HoldGuardScript = `D="{{dir}}"
ID="$KEYFLEET_ITEM_ID"; A="$KEYFLEET_ATTEMPT"; CID="$KEYFLEET_CREDENTIAL_ID"
H="$D/held-$CID"
# alive reads the process's stat once (a zombie reaped between two reads
# would look alive) into $st: alive unless gone, a zombie or dead.
alive() {
  st=$(cat "/proc/$1/stat" 2>/dev/null) && [ -n "$st" ] || return 1
  case "${st##*) }" in Z*|X*) return 1 ;; esac
}
if ! ln -s "$$" "$H" 2>/dev/null; then
  holder=$(readlink "$H")
  if [ -n "$holder" ] && alive "$holder"; then
    echo "overlap on $CID by $ID attempt $A (held by live job $holder: $(echo "$st" | cut -d' ' -f1-5))" >> "$D/violations"
  fi
  ln -sfn "$$" "$H"
fi
echo "$ID $A $PPID" >> "$D/runs"
echo "$(date +%s.%N) start $ID $A $CID $$ $PPID" >> "$D/events"
want=$(cat "$D/secret-$CID")
[ "$want" = "$KEYFLEET_CREDENTIAL_SECRET" ] || echo "wrong secret for $CID" >> "$D/violations"
[ -z "$KEY_A$KEY_B" ] || echo "a secret_env variable reached the job" >> "$D/violations"
cat > /dev/null
if [ -n "$TICKS" ]; then
  i=0
  while [ "$i" -lt "$TICKS" ]; do
    echo "$(date +%s.%N) tick $ID $A $CID $$ $PPID" >> "$D/events"
    sleep "${TICK:-0.05}"
    i=$((i+1))
  done
else
  sleep "$(cat "$D/sleep-$PPID" 2>/dev/null || echo "${SLEEP:-0.005}")"
fi
if [ "$(readlink "$H")" = "$$" ]; then
  rm -f "$H"
else
  echo "overlap on $CID by $ID attempt $A (its hold was taken while it ran)" >> "$D/violations"
fi
echo "$(date +%s.%N) end $ID $A $CID $$ $PPID" >> "$D/events"
printf 'out:%s:%s' "$ID" "$A"
`

// HoldGuardedFleet is guardedFleetPool with holdGuardScript as the job.
func HoldGuardedFleet(t *testing.T, poolYAML, workerYAML, queueYAML string, extraEnv ...string) *Fleet {
	t.Helper()
	f := GuardedFleetPool(t, poolYAML, workerYAML, queueYAML, extraEnv...)
	f.WriteScript("guard.sh", strings.ReplaceAll(HoldGuardScript, "{{dir}}", f.Dir))
	return f
}

// StartWorkerEnv starts a worker like startWorker, with extra environment
// variables (they reach its jobs too).
func (f *Fleet) StartWorkerEnv(name string, env []string, args ...string) *Process {
	f.T.Helper()
	saved := f.Env
	f.Env = append(append([]string(nil), saved...), env...)
	defer func() { f.Env = saved }()
	return f.StartWorker(name, args...)
}

// JobEvent is one line of holdGuardScript's events log.
type JobEvent struct {
	At        time.Time
	Kind      string // start, tick, end
	Item      string
	Attempt   int
	Cred      string
	JobPID    int
	WorkerPID int
}

// JobEvents parses the events log, in time order.
func (f *Fleet) JobEvents() []JobEvent {
	var evs []JobEvent
	for _, line := range strings.Split(strings.TrimSpace(f.File("events")), "\n") {
		fs := strings.Fields(line)
		if len(fs) != 7 {
			continue
		}
		sec, err := strconv.ParseFloat(fs[0], 64)
		if err != nil {
			continue
		}
		a, _ := strconv.Atoi(fs[3])
		jp, _ := strconv.Atoi(fs[5])
		wp, _ := strconv.Atoi(fs[6])
		evs = append(evs, JobEvent{At: time.Unix(0, int64(sec*1e9)), Kind: fs[1], Item: fs[2], Attempt: a, Cred: fs[4], JobPID: jp, WorkerPID: wp})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	return evs
}

// JobsRunning returns the jobs of a worker that started and have not ended
// (nor been killed: their process is gone), by job PID.
func (f *Fleet) JobsRunning(worker *Process) map[int]JobEvent {
	running := map[int]JobEvent{}
	for _, e := range f.JobEvents() {
		if e.WorkerPID != worker.Pid() {
			continue
		}
		switch e.Kind {
		case "start":
			running[e.JobPID] = e
		case "end":
			delete(running, e.JobPID)
		}
	}
	for pid := range running {
		if syscall.Kill(pid, 0) != nil {
			delete(running, pid)
		}
	}
	return running
}

// JobsStarted counts the jobs a worker started after t.
func (f *Fleet) JobsStarted(worker *Process, after time.Time) int {
	n := 0
	for _, e := range f.JobEvents() {
		if e.Kind == "start" && e.WorkerPID == worker.Pid() && e.At.After(after) {
			n++
		}
	}
	return n
}

// ResultsWatch collects a batch's results in the background, watching
// again if the watch fails (a NATS node lost, a connection reset).
type ResultsWatch struct {
	mu     sync.Mutex
	got    map[string]kftype.Result
	full   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	errs   []string
}

func (f *Fleet) WatchResults(batch string, n int) *ResultsWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &ResultsWatch{got: map[string]kftype.Result{}, full: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	f.T.Cleanup(func() { cancel(); <-w.done })
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			err := f.Queue.WatchResults(ctx, batch, func(r kftype.Result) (bool, error) {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.got[r.Item] = r
				if len(w.got) == n {
					close(w.full)
					return false, nil
				}
				return true, nil
			})
			if err == nil {
				return
			}
			if ctx.Err() == nil {
				w.mu.Lock()
				w.errs = append(w.errs, err.Error())
				w.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return w
}

// Count is how many items have a result.
func (w *ResultsWatch) Count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got)
}

// Complete reports whether every item has a result.
func (w *ResultsWatch) Complete() bool { return testutil.Closed(w.full) }

// Wait waits until every item has a result and returns them by item.
func (w *ResultsWatch) Wait(t *testing.T, timeout time.Duration) map[string]kftype.Result {
	t.Helper()
	select {
	case <-w.full:
	case <-time.After(timeout):
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("waited %s for results: have %d; watch errors: %v", timeout, len(w.got), w.errs)
	}
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]kftype.Result, len(w.got))
	for k, v := range w.got {
		out[k] = v
	}
	return out
}

// Duplicates counts the items the job ran more than once.
func (f *Fleet) Duplicates() int {
	n := 0
	for _, c := range f.RunsPerItem() {
		if c > 1 {
			n++
		}
	}
	return n
}

// WorkerProxies are one worker's own links to NATS and Redis.
type WorkerProxies struct {
	NATS, Redis *faultproxy.Proxy
}

// ProxiedWorker starts a worker whose NATS and Redis connections go
// through proxies of its own (--nats-url, --redis-url).
func (f *Fleet) ProxiedWorker(name string, env []string, args ...string) (*Process, WorkerProxies) {
	f.T.Helper()
	wp := WorkerProxies{NATS: faultproxy.Start(f.T, hostPort(f.T, f.NATS.URL())), Redis: faultproxy.Start(f.T, f.Redis.Addr())}
	args = append([]string{"--nats-url", viaProxy(f.T, f.NATS.URL(), wp.NATS), "--redis-url", viaProxy(f.T, f.Redis.URL(), wp.Redis)}, args...)
	return f.StartWorkerEnv(name, env, args...), wp
}

func (wp WorkerProxies) Each(fn func(*faultproxy.Proxy)) {
	fn(wp.NATS)
	fn(wp.Redis)
}

func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// viaProxy is raw with its host:port replaced by the proxy's.
func viaProxy(t *testing.T, raw string, p *faultproxy.Proxy) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}

// StopWorkers sends SIGTERM to every worker still running and checks they
// exit 0 within timeout.
func StopWorkers(t *testing.T, timeout time.Duration, workers ...*Process) {
	t.Helper()
	for _, w := range workers {
		if !w.Exited() {
			w.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range workers {
		if code := w.WaitExit(t, timeout); code != 0 {
			t.Errorf("%s exited %d after SIGTERM; log:\n%s", w.Name(), code, Tail(w.Log.String(), 20))
		}
	}
}

// WaitQueueEmpty waits until the work queue holds no message, delivered or
// not.
func (f *Fleet) WaitQueueEmpty() {
	f.T.Helper()
	testutil.WaitFor(f.T, "the work queue to be empty", time.Minute, func() bool {
		st := f.QueueStats()
		return st.Stream.Messages == 0 && st.Consumer.AckPending == 0
	})
}

// WriteFile writes a file into the fleet's directory.
func (f *Fleet) WriteFile(name, content string) {
	f.T.Helper()
	if err := os.WriteFile(filepath.Join(f.Dir, name), []byte(content), 0o644); err != nil {
		f.T.Fatal(err)
	}
}

func (f *Fleet) RemoveFile(name string) { _ = os.Remove(filepath.Join(f.Dir, name)) }

// ItemJSON is an item's payload: its ID.
func ItemJSON(id string) string { return fmt.Sprintf(`{"id":%q}`, id) }

// AccountHolds is account for fleets whose jobs record key holds with
// their process IDs (holdGuardScript): a hold left by a killed job is
// stale, not over-use.
func (f *Fleet) AccountHolds(scenario string, ids []string, results map[string]kftype.Result, took time.Duration,
	b Bounds, note string) ReliabilityRow {
	f.T.Helper()
	row := ReliabilityRow{Scenario: scenario, Items: len(ids), Took: took}
	for _, id := range ids {
		if r, ok := results[id]; !ok || r.Outcome != kftype.OutcomeSucceeded {
			row.Lost++
		}
	}
	row.Duplicates = f.Duplicates()
	violations := strings.TrimSpace(f.File("violations"))
	for _, line := range strings.Split(violations, "\n") {
		if strings.HasPrefix(line, "overlap") {
			row.OverUse++
		}
	}
	row.LeakedSecrets = CountSecrets(f.Logs())
	row.Passed = row.Lost == 0 && row.LeakedSecrets == 0 && row.Duplicates <= b.MaxDuplicates && row.OverUse <= b.MaxOverUse
	row.Note = note
	RecordRow(row)
	if !row.Passed {
		f.T.Errorf("%s: %+v breaks its bounds %+v (lost and leaked secrets must be 0)", scenario, row, b)
	}
	if strings.Contains(violations, "wrong secret") || strings.Contains(violations, "secret_env") {
		f.T.Errorf("%s: a job got the wrong secret:\n%s", scenario, violations)
	}
	return row
}
