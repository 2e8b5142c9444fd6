package e2e

import (
	"context"
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
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

var bins struct {
	worker, producer string
	// buildErr holds the build failure of a binary, reported by the tests
	// that need it.
	buildErr map[string]error
}

// longWaitingScenario marks a long fault scenario that spends its time
// waiting (partitions, pauses, restarts, kills, a producer against
// unreachable servers) to run in parallel with the others like it.
//
// Most tests run one at a time, because several measure pace, latency or
// a handoff that a busy CPU would blur. The long waiting scenarios run
// after those, two at a time (go test's -parallel defaults to the number
// of CPUs), which keeps make test under its time budget. Their assertions
// are about what was lost, duplicated or refused, with margins of
// seconds, not about milliseconds.
func longWaitingScenario(t *testing.T) { t.Parallel() }

// TestMain builds the binaries once for every test.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "keyfleet-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bins.buildErr = map[string]error{}
	for _, name := range []string{"worker", "producer"} {
		build := exec.Command("go", "build", "-race", "-o", filepath.Join(dir, name), "./cmd/"+name)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			bins.buildErr[name] = fmt.Errorf("building %s: %v\n%s", name, err, out)
		}
	}
	bins.worker = filepath.Join(dir, "worker")
	bins.producer = filepath.Join(dir, "producer")
	code := m.Run()
	printReliabilityTable(os.Stdout)
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary returns the path of a built binary, failing the test if it did
// not build.
func binary(t *testing.T, name string) string {
	t.Helper()
	if err := bins.buildErr[name]; err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(bins.worker), name)
}

// fleet is one test's servers, config and processes.
type fleet struct {
	t     *testing.T
	nats  *natstest.Server
	redis *redistest.Server
	dir   string
	cfg   string // config file path
	env   []string
	nc    *nats.Conn
	q     *queue.Queue

	mu    sync.Mutex
	procs []*proc
}

// fleetOptions shape the config file.
type fleetOptions struct {
	Credentials string // YAML list items under pool.credentials
	Worker      string // extra YAML lines under worker:
	Queue       string // extra YAML lines under queue:
	Jobs        string // YAML under jobs:
	Pool        string // extra YAML lines under pool:
	Env         []string
}

func newFleet(t *testing.T, o fleetOptions) *fleet {
	t.Helper()
	ns := natstest.Start(t)
	f := newFleetConfig(t, ns.URL(), o)
	f.nats = ns
	f.nc = natstest.Connect(t, ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if f.q, err = queue.Attach(ctx, f.nc, queue.Config{Stream: "KF"}); err != nil {
		t.Fatal(err)
	}
	f.attachLanes()
	return f
}

// attachLanes gives f.q the lane writer a producer's queue handle has
// (batchlanes), for the Redis of the fleet's config as it is now: the
// batches f.q enqueues register their lanes, which the workers pull.
func (f *fleet) attachLanes() {
	f.t.Helper()
	cfg, err := config.Load(f.cfg, func(k string) string {
		for _, kv := range slices.Backward(f.env) {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	})
	if err != nil {
		f.t.Fatal(err)
	}
	rdb, err := connect.RedisClient(cfg.Redis, 2, 5*time.Second)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = rdb.Close() })
	w, err := batchlanes.New(lanes.New(rdb, f.q.Config().Stream), cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.q.SetLaneWriter(w)
}

// newFleetConfig is a fleet of the NATS server(s) at natsURL, with its own
// Redis and a config file, without the test's own connection and queue
// handle.
func newFleetConfig(t *testing.T, natsURL string, o fleetOptions) *fleet {
	t.Helper()
	f := &fleet{t: t, redis: redistest.Start(t), dir: t.TempDir()}
	f.env = append(os.Environ(), o.Env...)
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
`, natsURL, f.redis.URL(), redistest.UniqueName(t), indent(o.Pool, 2), indent(o.Credentials, 4),
		indent(o.Worker, 2), "KF", indent(o.Queue, 2), indent(o.Jobs, 2))
	cfg = strings.ReplaceAll(cfg, "{{dir}}", f.dir)
	f.cfg = filepath.Join(f.dir, "keyfleet.yaml")
	if err := os.WriteFile(f.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stopAll)
	return f
}

func indent(s string, n int) string {
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

// proc is a running binary, its output kept in log.
type proc struct {
	*launch.Proc
	name string
	log  *launch.Buffer
}

// startWorker starts a worker process with the fleet's config.
func (f *fleet) startWorker(name string, args ...string) *proc {
	f.t.Helper()
	return f.start(name, binary(f.t, "worker"), append([]string{"--config", f.cfg, "--id", name}, args...)...)
}

func (f *fleet) start(name, bin string, args ...string) *proc {
	f.t.Helper()
	log := &launch.Buffer{}
	lp, err := launch.Start(name, bin, args, launch.Options{Env: f.env, Stdout: log, Stderr: log})
	if err != nil {
		f.t.Fatal(err)
	}
	p := &proc{Proc: lp, name: name, log: log}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

func (p *proc) signal(s syscall.Signal) { _ = p.Signal(s) }

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s; log:\n%s", p.name, timeout, tail(p.log.String(), 40))
	}
	return p.ExitCode()
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	procs := f.procs
	f.mu.Unlock()
	for _, p := range procs {
		p.Kill()
		if f.t.Failed() {
			f.t.Logf("--- log of %s (tail) ---\n%s", p.name, tail(p.log.String(), 30))
		}
	}
}

// logs returns everything every process of the fleet printed.
func (f *fleet) logs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, p := range f.procs {
		b.WriteString(p.log.String())
	}
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// publish enqueues n items of kind with the shared publisher; payload
// builds each item's JSON from its ID.
func (f *fleet) publish(batch, kind string, n int, payload func(id string) string) []string {
	f.t.Helper()
	items := make([]queue.Item, n)
	ids := make([]string, n)
	for i := range items {
		id := fmt.Sprintf("item-%04d", i)
		ids[i] = id
		items[i] = queue.Item{ID: id, Batch: batch, Kind: kind, Payload: []byte(payload(id))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := f.q.Publish(ctx, items...)
	if err != nil || rep.Published != n {
		f.t.Fatalf("publish: %+v %v", rep, err)
	}
	return ids
}

// waitResults waits until n items of batch have a result and returns them
// by item.
func (f *fleet) waitResults(batch string, n int, timeout time.Duration) map[string]queue.Result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got := map[string]queue.Result{}
	err := f.q.WatchResults(ctx, batch, func(r queue.Result) (bool, error) {
		got[r.Item] = r
		return len(got) < n, nil
	})
	if err != nil {
		f.t.Fatalf("waiting for %d results of %s: have %d: %v", n, batch, len(got), err)
	}
	return got
}

// queueStats reads the queue's counters.
func (f *fleet) queueStats() queue.Stats {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := f.q.Stats(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// writeScript writes an executable shell script into the fleet's dir.
func (f *fleet) writeScript(name, body string) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// pool is a handle on the fleet's credential pool, for assertions.
func (f *fleet) pool() *creds.Pool {
	f.t.Helper()
	cfg, err := config.Load(f.cfg, func(string) string { return "" })
	if err != nil {
		f.t.Fatal(err)
	}
	p, err := creds.New(f.redis.Client(f.t), cfg.Pool.Name)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = p.Close() })
	return p
}
