package batchapi

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// TestMain builds the binaries (shared by the e2e packages).
func TestMain(m *testing.M) { e2etest.Main(m) }

var secrets = map[string]string{"key-a": "sk-bapi-e2e-AAAA-0001", "key-b": "sk-bapi-e2e-BBBB-0002"}

// fleet is e2etest's fleet with the strict stand-in of one provider.
type fleet struct {
	*e2etest.Fleet
	prov string
	api  *fakeapi.Server
}

// newFleet starts NATS, Redis and a strict stand-in of prov (two keys,
// provider batches taking batchDelay), and writes a config: a kind llm of
// prov over both keys, provider batches polled every 200 ms, a margin of
// 1 h.
func newFleet(t *testing.T, prov string, batchDelay time.Duration) *fleet {
	return newFleetWith(t, prov, fleetOptions{batchDelay: batchDelay})
}

// fleetOptions shape a fleet beyond its provider.
type fleetOptions struct {
	// batchDelay and cancelDelay are the stand-in's (fakeapi.Config).
	batchDelay, cancelDelay time.Duration
	// margin is jobs.batch_api.margin (default 1h); listen the workers'
	// worker.listen (default none); pool extra lines under pool: (prices).
	margin, listen, pool string
	// slots is a worker's concurrency, and both keys' max_concurrent
	// together (default 8).
	slots int
}

// newFleetWith is newFleet shaped by o.
func newFleetWith(t *testing.T, prov string, o fleetOptions) *fleet {
	t.Helper()
	api, err := fakeapi.New(fakeapi.Config{Provider: prov, BatchDelay: o.batchDelay, CancelDelay: o.cancelDelay,
		Keys: []fakeapi.Key{{Secret: secrets["key-a"]}, {Secret: secrets["key-b"]}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	slots := cmp.Or(o.slots, 8)
	worker := fmt.Sprintf(`concurrency: %d
shutdown_grace: 5s
retry_backoff: [100ms]`, slots)
	if o.listen != "" {
		worker += "\nlisten: " + o.listen
	}
	ef := e2etest.NewFleet(t, e2etest.FleetOptions{
		Pool: o.pool,
		Credentials: fmt.Sprintf(`- {id: key-a, secret_env: KEY_A, max_concurrent: %d}
- {id: key-b, secret_env: KEY_B, max_concurrent: %d}`, slots/2, slots-slots/2),
		Worker: worker,
		Jobs: fmt.Sprintf(`kinds:
  llm: {http: {provider: %s, url: %q}}
batch_api: {poll: 200ms, margin: %s}`, prov, srv.URL, cmp.Or(o.margin, "1h")),
		Env: []string{"KEY_A=" + secrets["key-a"], "KEY_B=" + secrets["key-b"], "GORACE=atexit_sleep_ms=0"},
	})
	return &fleet{Fleet: ef, prov: prov, api: api}
}

// kill kills a worker with SIGKILL and waits for it to die.
func kill(t *testing.T, p *e2etest.Process) {
	t.Helper()
	_ = p.Signal(syscall.SIGKILL)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die", p.Name())
	}
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
	p := filepath.Join(f.Dir, fmt.Sprintf("input-%d.jsonl", time.Now().UnixNano()))
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		f.T.Fatal(err)
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
	f.T.Helper()
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--format", f.format(), "--batch", batch, "--deadline", deadline, path); r.Code != 0 {
		f.T.Fatalf("enqueue:\n%s", r)
	}
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
	SpentTwice int    `json:"spent_twice"`
}

type show struct {
	ID              string              `json:"id"`
	State           string              `json:"state"`
	PausedReason    string              `json:"paused_reason"`
	Budget          *spend.Amount       `json:"budget"`
	Spent           spend.Amount        `json:"spent"`
	Total           int64               `json:"total"`
	Done            int64               `json:"done"`
	Succeeded       int64               `json:"succeeded"`
	Cancelled       int64               `json:"cancelled"`
	Deadline        *time.Time          `json:"deadline"`
	ProviderBatches []showProviderBatch `json:"provider_batches"`
}

func (f *fleet) show(batch string) show {
	f.T.Helper()
	r := f.Producer(nil, "batch", "show", batch, "--json")
	if r.Code != 0 {
		f.T.Fatalf("batch show:\n%s", r)
	}
	var s show
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
		f.T.Fatalf("batch show --json: %v\n%s", err, r.Stdout)
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
	f.T.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			f.T.Fatalf("timed out waiting for %s; provider batch records: %s\n%s", what, f.allRecords(), e2etest.Tail(f.Logs(), 60))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killOutsideCreating kills workers (SIGKILL) at a moment when no record
// of batch is creating. A worker killed after it marked a record creating
// but before its create reached the provider leaves the record so for 5
// minutes by design (docs/batch-api.md, "A crash at each point"; that
// crash point is internal/batchapi's TestCrashAtEachStep): a kill landing
// there, more likely the busier the machine, made the test wait past its
// bound. So it stops the workers (SIGSTOP) until the kernel says they are
// stopped, reads the records while nothing can change them, and kills the
// workers if none is creating; else it lets them go on until none is,
// and tries again.
func (f *fleet) killOutsideCreating(batch string, workers []*e2etest.Process) {
	f.T.Helper()
	creating := func() bool {
		for _, r := range f.records(batch) {
			if r.State == queue.PBCreating {
				return true
			}
		}
		return false
	}
	for {
		for _, p := range workers {
			_ = p.Signal(syscall.SIGSTOP)
		}
		for _, p := range workers {
			f.waitFor(p.Name()+" stopped", 10*time.Second, func() bool { return stopped(p.Pid()) })
		}
		if !creating() {
			for _, p := range workers {
				kill(f.T, p)
			}
			return
		}
		for _, p := range workers {
			_ = p.Signal(syscall.SIGCONT)
		}
		f.waitFor("no record of "+batch+" creating", time.Minute, func() bool { return !creating() })
	}
}

// stopped reports whether process pid is stopped (state T in
// /proc/<pid>/stat).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(rest, "T")
}

// allRecords describes every provider batch record of the fleet's
// batches, for a failure's message.
func (f *fleet) allRecords() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := f.Queue.JetStream().KeyValue(ctx, "KF_PBATCHES")
	if err != nil {
		return err.Error()
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, k := range keys {
		if e, err := kv.Get(ctx, k); err == nil {
			fmt.Fprintf(&b, "\n  %s: %s", k, e.Value())
		}
	}
	return b.String()
}

// records reads batch's provider batch records.
func (f *fleet) records(batch string) []queue.ProviderBatch {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := f.Queue.ProviderBatches(ctx, batch)
	if err != nil {
		f.T.Fatal(err)
	}
	return ps
}

// resultsStored is how many results the results stream ever stored (its
// last sequence: a result written twice counts twice).
func (f *fleet) resultsStored() uint64 {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := f.Queue.JetStream().Stream(ctx, "KF_RESULTS")
	if err != nil {
		f.T.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}
