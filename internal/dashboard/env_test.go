package dashboard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/batchlanes"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/dashboard"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/internal/worker"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// env is one test's fleet: its own embedded NATS and redis-server (so the
// pool and the stream can keep plain names), the
// configuration with real secrets, and in-process workers and dashboards.
type env struct {
	t       *testing.T
	ctx     context.Context
	cfg     *config.Config
	q       *queue.Queue
	pool    *creds.Pool
	rdb     *redis.Client     // the test's redis-server
	secrets map[string]string // env var → secret
}

// The pool of every test: four keys, each with a secret that must never
// reach a response.
const poolYAML = `    - {id: key-a, secret_env: DASH_KEY_A, max_concurrent: 2, rate: 600/m}
    - {id: key-b, secret_env: DASH_KEY_B, max_concurrent: 1}
    - {id: key-c, secret_env: DASH_KEY_C, max_concurrent: 1, rate: 30/m}
    - {id: key-d, secret_env: DASH_KEY_D, max_concurrent: 1}
`

// execScript runs an item: items whose ID holds "bad" fail for good (and
// print the key's secret, which the worker must scrub), others take the
// item's "ms" and succeed.
const execScript = `case "$KEYFLEET_ITEM_ID" in *bad*) echo "refused: empty text (key $KEYFLEET_CREDENTIAL_SECRET)" >&2; exit 65;; esac
ms=$(sed -n 's/.*"ms":\([0-9]*\).*/\1/p'); sleep "$(awk "BEGIN{print ${ms:-0}/1000}")"; echo '{"ok":true}'`

func newEnv(t *testing.T) *env {
	t.Helper()
	ns, rs := natstest.Start(t), redistest.Start(t)
	e := &env{t: t, secrets: map[string]string{}}
	for _, k := range []string{"DASH_KEY_A", "DASH_KEY_B", "DASH_KEY_C", "DASH_KEY_D"} {
		e.secrets[k] = randomSecret("sk-live-", 12)
	}
	file := filepath.Join(t.TempDir(), "kf.yaml")
	yaml := fmt.Sprintf(`nats: {url: %q}
redis: {url: %q}
pool:
  name: api-keys
  lease_ttl: 10s
  credentials:
%sworker: {concurrency: 3, heartbeat: 1s, shutdown_grace: 2s, max_attempts: 2, retry_backoff: [100ms]}
queue: {stream: KEYFLEET}
jobs:
  exec: {command: ["/bin/sh", "-c", %q], timeout: 30s}
log: {level: warn}
`, ns.URL(), rs.URL(), poolYAML, execScript)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = cfg
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	nc := natstest.Connect(t, ns.URL())
	if e.q, err = queue.Open(ctx, nc, queue.ConfigFrom(cfg)); err != nil {
		t.Fatal(err)
	}
	// Its writes register the batches' lanes, as the producer's do (the
	// dashboard's own handle is this one).
	lw, err := batchlanes.New(lanes.New(rs.Client(t), e.q.Config().Stream), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.q.SetLaneWriter(lw)
	e.rdb = rs.Client(t)
	if e.pool, err = creds.New(e.rdb, cfg.Pool.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.pool.Close() })
	return e
}

// randomSecret is prefix and n random bytes in hex: a key's secret or an
// admin token no other test uses.
func randomSecret(prefix string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// startWorker runs a worker in process until the test ends.
func (e *env) startWorker(id string) {
	e.t.Helper()
	w, err := worker.New(worker.Options{Config: e.cfg, ID: id, Getenv: func(k string) string { return e.secrets[k] }})
	if err == nil {
		err = w.Start(e.ctx)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			e.t.Errorf("worker %s: %v", id, err)
		}
	})
}

// startDashboard serves a dashboard on a free loopback port until the test
// ends and returns its base URL.
func (e *env) startDashboard(token string) string {
	e.t.Helper()
	return e.startDashboardWith(dashboard.Options{AdminToken: token})
}

// enqueue publishes items as `producer enqueue` does, batch record
// included.
func (e *env) enqueue(batch, kind string, payloads map[string]string) {
	e.t.Helper()
	var items []kftype.Item
	for id, p := range payloads {
		items = append(items, kftype.Item{ID: id, Batch: batch, Kind: kind, Payload: []byte(p)})
	}
	// Publish writes the batch record too.
	if _, err := e.q.Publish(e.ctx, items...); err != nil {
		e.t.Fatal(err)
	}
}

// deadLetters counts the dead-letter records in the stream.
func (e *env) deadLetters() int {
	e.t.Helper()
	n := 0
	if err := e.q.ListDeadLetters(e.ctx, "", func(kftype.DeadLetter) error { n++; return nil }); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// sensitive is everything that must never appear in a response.
func (e *env) sensitive(extra ...string) []string {
	out := append([]string(nil), extra...)
	for _, s := range e.secrets {
		out = append(out, s)
	}
	return out
}

// recorder fetches URLs and keeps every response (headers and body) for
// the secret scan.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s -> %d\n", req.Method, req.URL, resp.StatusCode)
	for k, vs := range resp.Header {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(vs, ", "))
	}
	b.Write(body)
	r.mu.Lock()
	r.seen = append(r.seen, b.String())
	r.mu.Unlock()
	return resp.StatusCode, string(body)
}

func (r *recorder) get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.do(t, req)
}

// scan fails the test if any response held a sensitive string.
func (r *recorder) scan(t *testing.T, sensitive []string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, resp := range r.seen {
		for _, s := range sensitive {
			if s != "" && strings.Contains(resp, s) {
				t.Errorf("a response holds a secret (%.12s…):\n%.600s", s, resp)
			}
		}
	}
}
