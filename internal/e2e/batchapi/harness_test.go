package batchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

var bins struct {
	dir string
	err error
}

// TestMain builds the binaries once (with the race detector).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "keyfleet-batchapi-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	for _, name := range []string{"worker", "producer"} {
		build := exec.Command("go", "build", "-race", "-o", filepath.Join(dir, name), "./cmd/"+name)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("building %s: %v\n%s", name, err, out)
		}
	}
	bins.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func binary(t *testing.T, name string) string {
	t.Helper()
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return filepath.Join(bins.dir, name)
}

var secrets = map[string]string{"key-a": "sk-bapi-e2e-AAAA-0001", "key-b": "sk-bapi-e2e-BBBB-0002"}

// fleet is one test's servers, stand-in, config and processes.
type fleet struct {
	t    *testing.T
	prov string
	api  *fakeapi.Server
	cfg  string
	dir  string
	env  []string
	q    *queue.Queue

	mu    sync.Mutex
	procs []*proc
}

type proc struct {
	*launch.Proc
	name string
	log  *launch.Buffer
}

// newFleet starts NATS, Redis and a strict stand-in of prov (two keys,
// provider batches taking batchDelay), and writes a config: a kind llm of
// prov over both keys, provider batches polled every 200 ms.
func newFleet(t *testing.T, prov string, batchDelay time.Duration) *fleet {
	t.Helper()
	api, err := fakeapi.New(fakeapi.Config{Provider: prov, BatchDelay: batchDelay,
		Keys: []fakeapi.Key{{Secret: secrets["key-a"]}, {Secret: secrets["key-b"]}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	ns, rs := natstest.Start(t), redistest.Start(t)
	f := &fleet{t: t, prov: prov, api: api, dir: t.TempDir()}
	cfg := fmt.Sprintf(`nats: {url: %s}
redis: {url: %s}
pool:
  name: %s
  credentials:
    - {id: key-a, secret_env: KEY_A, max_concurrent: 4}
    - {id: key-b, secret_env: KEY_B, max_concurrent: 4}
worker:
  concurrency: 8
  shutdown_grace: 5s
  retry_backoff: [100ms]
queue: {stream: KF}
jobs:
  kinds:
    llm: {http: {provider: %s, url: %q}}
  batch_api: {poll: 200ms, margin: 1h}
log: {level: info}
`, ns.URL(), rs.URL(), redistest.UniqueName(t), prov, srv.URL)
	f.cfg = filepath.Join(f.dir, "keyfleet.yaml")
	if err := os.WriteFile(f.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	f.env = append(os.Environ(), "KEY_A="+secrets["key-a"], "KEY_B="+secrets["key-b"], "GORACE=atexit_sleep_ms=0")
	nc := natstest.Connect(t, ns.URL(), nats.MaxReconnects(-1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if f.q, err = queue.Attach(ctx, nc, queue.Config{Stream: "KF"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stopAll)
	return f
}

// startWorker starts a worker process.
func (f *fleet) startWorker(name string) *proc {
	f.t.Helper()
	log := &launch.Buffer{}
	lp, err := launch.Start(name, binary(f.t, "worker"), []string{"--config", f.cfg, "--id", name},
		launch.Options{Env: f.env, Stdout: log, Stderr: log})
	if err != nil {
		f.t.Fatal(err)
	}
	p := &proc{Proc: lp, name: name, log: log}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	procs := f.procs
	f.mu.Unlock()
	for _, p := range procs {
		p.Kill()
		if f.t.Failed() {
			f.t.Logf("--- log of %s (tail) ---\n%s", p.name, tail(p.log.String(), 40))
		}
	}
}

// kill kills a worker with SIGKILL and waits for it to die.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.Signal(syscall.SIGKILL)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die", p.name)
	}
}

// stop stops a worker with SIGTERM and checks it exits 0.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop", p.name)
	}
	if c := p.ExitCode(); c != 0 {
		t.Errorf("%s exited %d", p.name, c)
	}
}

type ran struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r ran) String() string {
	return fmt.Sprintf("producer %s: exit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(r.args, " "), r.code, tail(r.stdout, 30), tail(r.stderr, 30))
}

// producer runs the producer with the fleet's config.
func (f *fleet) producer(stdin []byte, args ...string) ran {
	f.t.Helper()
	args = append(args, "--config", f.cfg)
	o := launch.Options{Env: f.env}
	if stdin != nil {
		o.Stdin = bytes.NewReader(stdin)
	}
	var out, errb launch.Buffer
	o.Stdout, o.Stderr = &out, &errb
	p, err := launch.Start("producer", binary(f.t, "producer"), args, o)
	if err != nil {
		f.t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(2 * time.Minute):
		p.Kill()
		f.t.Fatalf("producer %v did not exit", args)
	}
	r := ran{args: args, stdout: out.String(), stderr: errb.String(), code: p.ExitCode()}
	if strings.Contains(r.stderr, "DATA RACE") || strings.Contains(r.stderr, "panic:") {
		f.t.Fatalf("the producer raced or panicked:\n%s", r)
	}
	return r
}

// format is the provider's batch format.
func (f *fleet) format() string {
	if f.prov == fakeapi.ProviderAnthropic {
		return "anthropic-batch"
	}
	return "openai-batch"
}

// batchFile is a batch input file in the provider's format: n requests
// custom_id req-0000..., of model (each i-th's text from text).
func (f *fleet) batchFile(n int, model func(i int) string, text func(i int) string) string {
	var b strings.Builder
	for i := range n {
		id := fmt.Sprintf("req-%04d", i)
		if f.prov == fakeapi.ProviderAnthropic {
			fmt.Fprintf(&b, `{"custom_id":%q,"params":{"model":%q,"max_tokens":20,"messages":[{"role":"user","content":%q}]}}`+"\n", id, model(i), text(i))
		} else {
			fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":%q}]}}`+"\n", id, model(i), text(i))
		}
	}
	p := filepath.Join(f.dir, fmt.Sprintf("input-%d.jsonl", time.Now().UnixNano()))
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// model is the stand-in's default model of the provider.
func (f *fleet) model(int) string {
	if f.prov == fakeapi.ProviderAnthropic {
		return "claude-sonnet-4-6"
	}
	return "gpt-4o-mini"
}

// enqueue enqueues a batch file with a deadline.
func (f *fleet) enqueue(batch, path, deadline string) {
	f.t.Helper()
	if r := f.producer(nil, "enqueue", "--kind", "llm", "--format", f.format(), "--batch", batch, "--deadline", deadline, path); r.code != 0 {
		f.t.Fatalf("enqueue:\n%s", r)
	}
}

// waitResults waits until n items of batch have a result, and returns
// them by item.
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
		f.t.Fatalf("waiting for %d results of %s: have %d: %v\n%s", n, batch, len(got), err, f.logs())
	}
	return got
}

// logs is the tail of every process's log.
func (f *fleet) logs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, p := range f.procs {
		fmt.Fprintf(&b, "--- %s\n%s\n", p.name, tail(p.log.String(), 25))
	}
	return b.String()
}

// show is `producer batch show ID --json`.
type showProviderBatch struct {
	ID         string `json:"id"`
	Credential string `json:"credential"`
	Status     string `json:"status"`
	State      string `json:"state"`
	Total      int64  `json:"total"`
	Completed  int64  `json:"completed"`
	Failed     int64  `json:"failed"`
	RealTime   int    `json:"real_time"`
}

type show struct {
	ID              string              `json:"id"`
	State           string              `json:"state"`
	Total           int64               `json:"total"`
	Done            int64               `json:"done"`
	Succeeded       int64               `json:"succeeded"`
	Cancelled       int64               `json:"cancelled"`
	Deadline        *time.Time          `json:"deadline"`
	ProviderBatches []showProviderBatch `json:"provider_batches"`
}

func (f *fleet) show(batch string) show {
	f.t.Helper()
	r := f.producer(nil, "batch", "show", batch, "--json")
	if r.code != 0 {
		f.t.Fatalf("batch show:\n%s", r)
	}
	var s show
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		f.t.Fatalf("batch show --json: %v\n%s", err, r.stdout)
	}
	return s
}

// created counts the provider batches the stand-in created; cancels the
// cancel calls it took; realTime the inference requests it got.
func (f *fleet) created() (n int64) {
	for _, k := range f.api.Stats().Keys {
		n += k.Batch.Created
	}
	return n
}

func (f *fleet) cancels() (n int64) {
	for _, k := range f.api.Stats().Keys {
		n += k.Batch.Cancelled
	}
	return n
}

func (f *fleet) realTime() (n int64) {
	for _, k := range f.api.Stats().Keys {
		n += k.Requests
	}
	return n
}

// waitFor polls cond every 100 ms until it holds.
func (f *fleet) waitFor(what string, timeout time.Duration, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s\n%s", what, f.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// records reads batch's provider batch records.
func (f *fleet) records(batch string) []queue.ProviderBatch {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := f.q.ProviderBatches(ctx, batch)
	if err != nil {
		f.t.Fatal(err)
	}
	return ps
}

// resultsStored is how many results the results stream ever stored (its
// last sequence: a result written twice counts twice).
func (f *fleet) resultsStored() uint64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := f.q.JetStream().Stream(ctx, "KF_RESULTS")
	if err != nil {
		f.t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// jsonLines decodes JSON Lines into maps.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}
