package e2e

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

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/faultproxy"
)

// Helpers for the fault scenarios (reliability_*_test.go).

// holdGuardScript is guardScript for scenarios where jobs get killed (a
// cancelled job, a partitioned or paused worker): the credential's hold is
// a symlink to the job's PID, so a hold left behind by a job that was
// killed is seen as stale, not as a second holder. A job finding the hold
// of a LIVE job reports an overlap (and takes the hold over); a job whose
// hold was taken while it ran reports one too.
//
// It also logs, with the wall clock, every start and end (and with TICKS=n
// every use of the key, n uses TICK seconds apart) to "events" as
// "<unix time> start|tick|end <item> <attempt> <credential> <job pid>
// <worker pid>", and sleeps the seconds in "sleep-<worker pid>" if the test
// wrote that file, else $SLEEP.
const holdGuardScript = `D="{{dir}}"
ID="$KEYFLEET_ITEM_ID"; A="$KEYFLEET_ATTEMPT"; CID="$KEYFLEET_CREDENTIAL_ID"
H="$D/held-$CID"
alive() { [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
if ! ln -s "$$" "$H" 2>/dev/null; then
  holder=$(readlink "$H")
  if [ -n "$holder" ] && alive "$holder"; then
    echo "overlap on $CID by $ID attempt $A (held by live job $holder)" >> "$D/violations"
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

// holdGuardedFleet is guardedFleetPool with holdGuardScript as the job.
func holdGuardedFleet(t *testing.T, poolYAML, workerYAML, queueYAML string, extraEnv ...string) *fleet {
	t.Helper()
	f := guardedFleetPool(t, poolYAML, workerYAML, queueYAML, extraEnv...)
	f.writeScript("guard.sh", strings.ReplaceAll(holdGuardScript, "{{dir}}", f.dir))
	return f
}

// startWorkerEnv starts a worker like startWorker, with extra environment
// variables (they reach its jobs too).
func (f *fleet) startWorkerEnv(name string, env []string, args ...string) *proc {
	f.t.Helper()
	saved := f.env
	f.env = append(append([]string(nil), saved...), env...)
	defer func() { f.env = saved }()
	return f.startWorker(name, args...)
}

// jobEvent is one line of holdGuardScript's events log.
type jobEvent struct {
	At        time.Time
	Kind      string // start, tick, end
	Item      string
	Attempt   int
	Cred      string
	JobPID    int
	WorkerPID int
}

// jobEvents parses the events log, in time order.
func (f *fleet) jobEvents() []jobEvent {
	var evs []jobEvent
	for _, line := range strings.Split(strings.TrimSpace(f.file("events")), "\n") {
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
		evs = append(evs, jobEvent{At: time.Unix(0, int64(sec*1e9)), Kind: fs[1], Item: fs[2], Attempt: a, Cred: fs[4], JobPID: jp, WorkerPID: wp})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	return evs
}

// jobsRunning returns the jobs of a worker that started and have not ended
// (nor been killed: their process is gone), by job PID.
func (f *fleet) jobsRunning(worker *proc) map[int]jobEvent {
	running := map[int]jobEvent{}
	for _, e := range f.jobEvents() {
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

// jobsStarted counts the jobs a worker started after t.
func (f *fleet) jobsStarted(worker *proc, after time.Time) int {
	n := 0
	for _, e := range f.jobEvents() {
		if e.Kind == "start" && e.WorkerPID == worker.Pid() && e.At.After(after) {
			n++
		}
	}
	return n
}

// resultsWatch collects a batch's results in the background, watching
// again if the watch fails (a NATS node lost, a connection reset).
type resultsWatch struct {
	mu     sync.Mutex
	got    map[string]queue.Result
	full   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	errs   []string
}

func (f *fleet) watchResults(batch string, n int) *resultsWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &resultsWatch{got: map[string]queue.Result{}, full: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	f.t.Cleanup(func() { cancel(); <-w.done })
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			err := f.q.WatchResults(ctx, batch, func(r queue.Result) (bool, error) {
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

// count is how many items have a result.
func (w *resultsWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got)
}

// complete reports whether every item has a result.
func (w *resultsWatch) complete() bool { return testutil.Closed(w.full) }

// wait waits until every item has a result and returns them by item.
func (w *resultsWatch) wait(t *testing.T, timeout time.Duration) map[string]queue.Result {
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
	out := make(map[string]queue.Result, len(w.got))
	for k, v := range w.got {
		out[k] = v
	}
	return out
}

// duplicates counts the items the job ran more than once.
func (f *fleet) duplicates() int {
	n := 0
	for _, c := range f.runsPerItem() {
		if c > 1 {
			n++
		}
	}
	return n
}

// workerProxies are one worker's own links to NATS and Redis.
type workerProxies struct {
	nats, redis *faultproxy.Proxy
}

// proxiedWorker starts a worker whose NATS and Redis connections go
// through proxies of its own (--nats-url, --redis-url).
func (f *fleet) proxiedWorker(name string, env []string, args ...string) (*proc, workerProxies) {
	f.t.Helper()
	wp := workerProxies{nats: faultproxy.Start(f.t, hostPort(f.t, f.nats.URL())), redis: faultproxy.Start(f.t, f.redis.Addr())}
	args = append([]string{"--nats-url", viaProxy(f.t, f.nats.URL(), wp.nats), "--redis-url", viaProxy(f.t, f.redis.URL(), wp.redis)}, args...)
	return f.startWorkerEnv(name, env, args...), wp
}

func (wp workerProxies) each(fn func(*faultproxy.Proxy)) {
	fn(wp.nats)
	fn(wp.redis)
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

// stopFleet sends SIGTERM to every worker still running and checks they
// exit 0 within timeout.
func stopFleet(t *testing.T, timeout time.Duration, workers ...*proc) {
	t.Helper()
	for _, w := range workers {
		if !w.Exited() {
			w.signal(syscall.SIGTERM)
		}
	}
	for _, w := range workers {
		if code := w.wait(t, timeout); code != 0 {
			t.Errorf("%s exited %d after SIGTERM; log:\n%s", w.name, code, tail(w.log.String(), 20))
		}
	}
}

// waitQueueEmpty waits until the work queue holds no message, delivered or
// not.
func (f *fleet) waitQueueEmpty() {
	f.t.Helper()
	testutil.WaitFor(f.t, "the work queue to be empty", time.Minute, func() bool {
		st := f.queueStats()
		return st.Stream.Messages == 0 && st.Consumer.AckPending == 0
	})
}

// writeFile writes a file into the fleet's directory.
func (f *fleet) writeFile(name, content string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) removeFile(name string) { _ = os.Remove(filepath.Join(f.dir, name)) }

// itemJSON is an item's payload: its ID.
func itemJSON(id string) string { return fmt.Sprintf(`{"id":%q}`, id) }

// accountHolds is account for fleets whose jobs record key holds with
// their process IDs (holdGuardScript): a hold left by a killed job is
// stale, not over-use.
func (f *fleet) accountHolds(scenario string, ids []string, results map[string]queue.Result, took time.Duration,
	b bounds, note string) reliabilityRow {
	f.t.Helper()
	row := reliabilityRow{Scenario: scenario, Items: len(ids), Took: took}
	for _, id := range ids {
		if r, ok := results[id]; !ok || r.Outcome != queue.OutcomeSucceeded {
			row.Lost++
		}
	}
	row.Duplicates = f.duplicates()
	violations := strings.TrimSpace(f.file("violations"))
	for _, line := range strings.Split(violations, "\n") {
		if strings.HasPrefix(line, "overlap") {
			row.OverUse++
		}
	}
	row.LeakedSecrets = countSecrets(f.logs())
	row.Passed = row.Lost == 0 && row.LeakedSecrets == 0 && row.Duplicates <= b.MaxDuplicates && row.OverUse <= b.MaxOverUse
	row.Note = note
	recordRow(row)
	if !row.Passed {
		f.t.Errorf("%s: %+v breaks its bounds %+v (lost and leaked secrets must be 0)", scenario, row, b)
	}
	if strings.Contains(violations, "wrong secret") || strings.Contains(violations, "secret_env") {
		f.t.Errorf("%s: a job got the wrong secret:\n%s", scenario, violations)
	}
	return row
}
