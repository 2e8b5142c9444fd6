package e2etest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/batchlanes"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/connect"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

var bins struct {
	dir string // where the binaries are
	// buildErr holds the build failure of a binary, reported by the tests
	// that need it.
	buildErr map[string]error
}

// LongWaitingScenario marks a long fault scenario that spends its time
// waiting (partitions, pauses, restarts, kills, a producer against
// unreachable servers) to run in parallel with the others like it in its
// package.
//
// Most tests of a package run one at a time, because several measure
// pace, latency or a handoff that a busy CPU would blur (the packages
// themselves run side by side, go test's -p). The long waiting scenarios
// run after those, two at a time (go test's -parallel defaults to the
// number of CPUs). Their assertions are about what was lost, duplicated or
// refused, with margins of seconds, not about milliseconds.
func LongWaitingScenario(t *testing.T) { t.Parallel() }

// Main is the TestMain of every e2e package: it builds the binaries
// (buildBinaries), runs the package's tests, prints the reliability table
// of the rows they recorded, and exits with their status. Each package
// under internal/e2e has
//
//	func TestMain(m *testing.M) { e2etest.Main(m) }
func Main(m *testing.M) {
	bins.buildErr = buildBinaries()
	code := m.Run()
	printReliabilityTable(os.Stdout)
	os.Exit(code)
}

// buildBinaries builds the worker and the producer with -race into a
// directory under os.TempDir() kept across test runs, one per checkout and
// user, under a file lock: the e2e packages that go test runs side by side
// share one build. go build relinks a binary only when it is out of date
// (its build ID is checked), so the first package of a run links and the
// others find the binaries up to date in a fraction of a second; a
// relinked binary is renamed into place, so a process already running
// keeps its file.
func buildBinaries() map[string]error {
	errs := map[string]error{}
	fail := func(err error) map[string]error {
		for _, name := range []string{"worker", "producer"} {
			errs[name] = err
		}
		return errs
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("keyfleet-e2e-bin-%d-%x", os.Getuid(), sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fail(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fail(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	for _, name := range []string{"worker", "producer"} {
		build := exec.Command("go", "build", "-race", "-o", filepath.Join(dir, name), "./cmd/"+name)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			errs[name] = fmt.Errorf("building %s: %v\n%s", name, err, out)
		}
	}
	bins.dir = dir
	return errs
}

// Binary returns the path of a built binary, failing the test if it did
// not build.
func Binary(t *testing.T, name string) string {
	t.Helper()
	if err := bins.buildErr[name]; err != nil {
		t.Fatal(err)
	}
	return filepath.Join(bins.dir, name)
}

// Fleet is one test's servers, config and processes.
type Fleet struct {
	T          *testing.T
	NATS       *natstest.Server
	Redis      *redistest.Server
	Dir        string
	ConfigPath string // config file path
	Env        []string
	Conn       *nats.Conn
	Queue      *queue.Queue

	mu    sync.Mutex
	procs []*Process
}

// FleetOptions shape the config file.
type FleetOptions struct {
	Credentials string // YAML list items under pool.credentials
	Worker      string // extra YAML lines under worker:
	Queue       string // extra YAML lines under queue:
	Jobs        string // YAML under jobs:
	Pool        string // extra YAML lines under pool:
	Env         []string
}

func NewFleet(t *testing.T, o FleetOptions) *Fleet {
	t.Helper()
	ns := natstest.Start(t)
	f := NewFleetConfig(t, ns.URL(), o)
	f.NATS = ns
	f.Conn = natstest.Connect(t, ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if f.Queue, err = queue.Attach(ctx, f.Conn, queue.Config{Stream: "KF"}); err != nil {
		t.Fatal(err)
	}
	f.AttachLanes()
	return f
}

// AttachLanes gives f.q the lane writer a producer's queue handle has
// (batchlanes), for the Redis of the fleet's config as it is now: the
// batches f.q enqueues register their lanes, which the workers pull.
func (f *Fleet) AttachLanes() {
	f.T.Helper()
	cfg, err := config.Load(f.ConfigPath, func(k string) string {
		for _, kv := range slices.Backward(f.Env) {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	})
	if err != nil {
		f.T.Fatal(err)
	}
	rdb, err := connect.RedisClient(cfg.Redis, 2, 5*time.Second)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() { _ = rdb.Close() })
	w, err := batchlanes.New(lanes.New(rdb, f.Queue.Config().Stream), cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	f.Queue.SetLaneWriter(w)
}

// NewFleetConfig is a fleet of the NATS server(s) at natsURL, with its own
// Redis and a config file, without the test's own connection and queue
// handle.
func NewFleetConfig(t *testing.T, natsURL string, o FleetOptions) *Fleet {
	t.Helper()
	f := &Fleet{T: t, Redis: redistest.Start(t), Dir: t.TempDir()}
	f.Env = append(os.Environ(), o.Env...)
	cfg := fmt.Sprintf(`nats:
  url: %s
redis:
  url: %s
pool:
  name: %s
%s  credentials:
%s
worker:
%s
queue:
  stream: %s
%s
jobs:
%s
`, natsURL, f.Redis.URL(), redistest.UniqueName(t), Indent(o.Pool, 2), Indent(o.Credentials, 4),
		Indent(o.Worker, 2), "KF", Indent(o.Queue, 2), Indent(o.Jobs, 2))
	cfg = strings.ReplaceAll(cfg, "{{dir}}", f.Dir)
	f.ConfigPath = filepath.Join(f.Dir, "keyfleet.yaml")
	if err := os.WriteFile(f.ConfigPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stopAll)
	return f
}

func Indent(s string, n int) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, line := range strings.Split(strings.Trim(s, "\n"), "\n") {
		b.WriteString(pad + line + "\n")
	}
	return b.String()
}

// Process is a running binary, its output kept in log.
type Process struct {
	*launch.Proc
	Log *launch.Buffer
}

// StartWorker starts a worker process with the fleet's config.
func (f *Fleet) StartWorker(name string, args ...string) *Process {
	f.T.Helper()
	return f.Start(name, Binary(f.T, "worker"), append([]string{"--config", f.ConfigPath, "--id", name}, args...)...)
}

func (f *Fleet) Start(name, bin string, args ...string) *Process {
	f.T.Helper()
	log := &launch.Buffer{}
	lp, err := launch.Start(name, bin, args, launch.Options{Env: f.Env, Stdout: log, Stderr: log})
	if err != nil {
		f.T.Fatal(err)
	}
	p := &Process{Proc: lp, Log: log}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

// WaitExit waits for the process to exit and returns its exit code. One
// that does not exit in time gets SIGQUIT first, so that the failure shows
// where its goroutines were (a Go binary prints them all and exits).
func (p *Process) WaitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(timeout):
		_ = p.Signal(syscall.SIGQUIT)
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("%s did not exit within %s; log, with its goroutines at SIGQUIT:\n%s", p.Name(), timeout, Tail(p.Log.String(), 400))
	}
	return p.ExitCode()
}

func (f *Fleet) stopAll() {
	f.mu.Lock()
	procs := f.procs
	f.mu.Unlock()
	for _, p := range procs {
		p.Kill()
		if f.T.Failed() {
			f.T.Logf("--- log of %s (tail) ---\n%s", p.Name(), Tail(p.Log.String(), 30))
		}
	}
}

// Logs returns everything every process of the fleet printed.
func (f *Fleet) Logs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, p := range f.procs {
		b.WriteString(p.Log.String())
	}
	return b.String()
}

func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Publish enqueues n items of kind with the shared publisher; payload
// builds each item's JSON from its ID.
func (f *Fleet) Publish(batch, kind string, n int, payload func(id string) string) []string {
	f.T.Helper()
	items := make([]kftype.Item, n)
	ids := make([]string, n)
	for i := range items {
		id := fmt.Sprintf("item-%04d", i)
		ids[i] = id
		items[i] = kftype.Item{ID: id, Batch: batch, Kind: kind, Payload: []byte(payload(id))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := f.Queue.Publish(ctx, items...)
	if err != nil || rep.Published != n {
		f.T.Fatalf("publish: %+v %v", rep, err)
	}
	return ids
}

// WaitResults waits until n items of batch have a result and returns them
// by item.
func (f *Fleet) WaitResults(batch string, n int, timeout time.Duration) map[string]kftype.Result {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got := map[string]kftype.Result{}
	err := f.Queue.WatchResults(ctx, batch, func(r kftype.Result) (bool, error) {
		got[r.Item] = r
		return len(got) < n, nil
	})
	if err != nil {
		f.T.Fatalf("waiting for %d results of %s: have %d: %v", n, batch, len(got), err)
	}
	return got
}

// QueueStats reads the queue's counters.
func (f *Fleet) QueueStats() queue.Stats {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := f.Queue.Stats(ctx)
	if err != nil {
		f.T.Fatal(err)
	}
	return st
}

// WriteScript writes an executable shell script into the fleet's dir.
func (f *Fleet) WriteScript(name, body string) string {
	f.T.Helper()
	p := filepath.Join(f.Dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		f.T.Fatal(err)
	}
	return p
}

// Pool is a handle on the fleet's credential pool, for assertions.
func (f *Fleet) Pool() *creds.Pool {
	f.T.Helper()
	cfg, err := config.Load(f.ConfigPath, func(string) string { return "" })
	if err != nil {
		f.T.Fatal(err)
	}
	p, err := creds.New(f.Redis.Client(f.T), cfg.Pool.Name)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() { _ = p.Close() })
	return p
}
