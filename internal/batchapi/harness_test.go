package batchapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchapi"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// clock is a test's clock: real time, moved on when told.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// env is one test's servers: NATS, Redis, a strict stand-in of prov with
// two keys, a queue, and a configuration with a kind llm of prov over
// both keys.
type env struct {
	t     *testing.T
	prov  string
	api   *fakeapi.Server
	q     *queue.Queue
	rdb   *redis.Client
	cfg   *config.Config
	clock *clock
	n     int // runners made
}

var keys = map[string]string{"key-a": "sk-batchapi-test-key-a-0001", "key-b": "sk-batchapi-test-key-b-0002"}

func newEnv(t *testing.T, prov string) *env { return newEnvWith(t, prov, queue.Config{Stream: "BAPI"}) }

// newEnvWith is newEnv with the queue's configuration qc.
func newEnvWith(t *testing.T, prov string, qc queue.Config) *env {
	t.Helper()
	api, err := fakeapi.New(fakeapi.Config{Provider: prov, Record: true,
		Keys: []fakeapi.Key{{Secret: keys["key-a"]}, {Secret: keys["key-b"]}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	ns := natstest.Start(t)
	q, err := queue.Open(ctx(t), natstest.Connect(t, ns.URL()), qc)
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	yaml := fmt.Sprintf(`pool:
  name: p
  credentials:
    - {id: key-a, secret_env: KEY_A}
    - {id: key-b, secret_env: KEY_B}
jobs:
  kinds:
    llm:
      http: {provider: %s, url: %q}
  batch_api: {poll: 50ms, margin: 1h}
`, prov, srv.URL)
	path := filepath.Join(t.TempDir(), "k.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(k string) string { return map[string]string{"KEY_A": "x", "KEY_B": "x"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, prov: prov, api: api, q: q, rdb: rs.Client(t), cfg: cfg,
		clock: &clock{}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// runner is a new worker's runner (each its own owner, as after a
// restart).
func (e *env) runner(mod func(*batchapi.Options)) *batchapi.Runner {
	e.t.Helper()
	e.n++
	o := batchapi.Options{Queue: e.q, Redis: e.rdb, Config: e.cfg, Owner: fmt.Sprintf("w%d", e.n),
		Secrets: map[string]secret.Secret{"key-a": secret.New(keys["key-a"]), "key-b": secret.New(keys["key-b"])},
		Now:     e.clock.now, Settle: time.Millisecond, WorkTTL: 300 * time.Millisecond,
		ResolveGrace: time.Minute}
	if mod != nil {
		mod(&o)
	}
	r, err := batchapi.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// line is an item line of the kind's provider format whose request text
// is text.
func (e *env) line(id, text string) string {
	if e.prov == fakeapi.ProviderAnthropic {
		return fmt.Sprintf(`{"custom_id":%q,"params":{"model":"claude-sonnet-4-6","max_tokens":20,"messages":[{"role":"user","content":%q}]}}`, id, text)
	}
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}]}}`, id, text)
}

// enqueue enqueues lines into batch with a deadline in 24 h.
func (e *env) enqueue(batch string, lines []string) {
	e.t.Helper()
	e.enqueueBy(batch, lines, e.clock.now().Add(24*time.Hour))
}

func (e *env) enqueueBy(batch string, lines []string, deadline time.Time) {
	e.t.Helper()
	e.enqueueWith(batch, lines, deadline, nil)
}

// enqueueWith is enqueueBy with the request changed by mod (a budget, a
// tenant).
func (e *env) enqueueWith(batch string, lines []string, deadline time.Time, mod func(*enqueue.Request)) {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), batch+".jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	format := "openai-batch"
	if e.prov == fakeapi.ProviderAnthropic {
		format = "anthropic-batch"
	}
	req := enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "llm", NamedKinds: []string{"llm"},
		Batch: batch, Format: format, Provider: e.prov, Deadline: deadline}
	if mod != nil {
		mod(&req)
	}
	rep, err := enqueue.Run(ctx(e.t), e.q, req)
	if err != nil || rep.New != len(lines) {
		e.t.Fatalf("enqueue: %+v %v", rep, err)
	}
}

// items are n lines item-0000... whose text is text(i).
func (e *env) items(n int, text func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = e.line(fmt.Sprintf("item-%04d", i), text(i))
	}
	return out
}

// step refreshes the runner's view and steps it once; a crash is no
// failure.
func (e *env) step(r *batchapi.Runner) error {
	e.t.Helper()
	if err := r.Refresh(ctx(e.t)); err != nil {
		e.t.Fatal(err)
	}
	err := r.Step(ctx(e.t))
	if err != nil && !errors.Is(err, batchapi.ErrCrash) {
		e.t.Logf("step: %v", err)
	}
	return err
}

// until steps r until cond holds.
func (e *env) until(r *batchapi.Runner, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		e.step(r)
		time.Sleep(20 * time.Millisecond)
	}
}

// results reads batch's results by item.
func (e *env) results(batch string) map[string]kftype.Result {
	e.t.Helper()
	out := map[string]kftype.Result{}
	if err := e.q.ReadResults(ctx(e.t), batch, func(r kftype.Result) error { out[r.Item] = r; return nil }); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// records reads batch's provider batch records.
func (e *env) records(batch string) []queue.ProviderBatch {
	e.t.Helper()
	ps, err := e.q.ProviderBatches(ctx(e.t), batch)
	if err != nil {
		e.t.Fatal(err)
	}
	return ps
}

// allDone: batch has records and every one is done.
func (e *env) allDone(batch string) bool {
	ps := e.records(batch)
	if len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if p.Active() {
			return false
		}
	}
	return true
}

// created counts the provider batches the stand-in created.
func (e *env) created() (n int64) {
	for _, k := range e.api.Stats().Keys {
		n += k.Batch.Created
	}
	return n
}

// wantOnLane checks that n items wait on batch's lane of the model.
func (e *env) wantOnLane(batch string, n int) {
	e.t.Helper()
	if lane := e.laneItems(batch, e.model()); len(lane) != n {
		e.t.Errorf("%d items on the lane of %s, want %d", len(lane), batch, n)
	}
}

// laneItems reads (without acknowledging) the messages waiting on
// batch's lane of scope.
func (e *env) laneItems(batch, scope string) map[string]kftype.Item {
	e.t.Helper()
	out := map[string]kftype.Item{}
	c, err := e.q.LaneConsumer(ctx(e.t), kftype.Lane(batch, scope))
	if err != nil {
		e.t.Fatal(err)
	}
	msgs, err := c.FetchNoWait(1000)
	if err != nil {
		e.t.Fatal(err)
	}
	for m := range msgs.Messages() {
		it, err := queue.DecodeItem(m)
		if err != nil {
			e.t.Fatal(err)
		}
		out[it.ID] = it
		_ = m.Nak()
	}
	return out
}

func (e *env) model() string {
	if e.prov == fakeapi.ProviderAnthropic {
		return "claude-sonnet-4-6"
	}
	return "gpt-4o-mini"
}

// testLogger logs through t (with -v).
func testLogger(t *testing.T) *zap.Logger { return zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)) }
