package producer

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// hasKeys checks that every documented key of the schema is present.
func hasStatusKeys(t *testing.T, raw string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	need := map[string][]string{
		"":         {"at", "stream", "consumer", "dead_letters", "results", "workers", "pool", "fallbacks"},
		"stream":   {"name", "messages", "bytes"},
		"consumer": {"name", "pending", "ack_pending", "redelivered", "waiting_pulls", "last_active"},
		"pool":     {"name", "at", "total", "available", "leased", "cooling", "disabled", "in_flight", "credentials"},
	}
	for obj, keys := range need {
		o := m
		if obj != "" {
			o, _ = m[obj].(map[string]any)
		}
		for _, k := range keys {
			if _, ok := o[k]; !ok {
				t.Fatalf("status --json lacks %s.%s:\n%s", obj, k, raw)
			}
		}
	}
	creds, _ := m["pool"].(map[string]any)["credentials"].([]any)
	for _, c := range creds {
		row := c.(map[string]any)
		for _, k := range []string{"id", "state", "max_concurrent", "rate", "in_flight", "holders", "cooling_until",
			"cooling_reason", "disabled_reason", "disabled_at", "starts_in_window", "last_used"} {
			if _, ok := row[k]; !ok {
				t.Fatalf("a credential row lacks %s:\n%s", k, raw)
			}
		}
	}
}

// status --json: the queue's and the pool's figures, the workers, every
// documented key; and the readable table.
func TestProducerStatus(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 2, rate: 100/m}
- {id: key-b, secret_env: KEY_B}`,
		Worker: "heartbeat: 1s",
		Env:    []string{"KEY_A=sk-a", "KEY_B=sk-b"},
	})
	w1 := f.StartWorker("w1")
	testutil.WaitFor(t, "w1 in the registry and its credentials in the pool", time.Minute, func() bool {
		st, _ := f.StatusJSON()
		return len(st.Workers) == 1 && st.Workers[0].ID == "w1" && st.Pool.Total == 2
	})
	if r := f.Producer(nil, "creds", "disable", "key-b", "--reason", "billing issue"); r.Code != 0 {
		t.Fatalf("disable:\n%s", r)
	}
	w1.Signal(syscall.SIGTERM)
	if code := w1.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("w1 exited %d", code)
	}
	const n = 7
	if r := f.Producer(nil, "enqueue", "--kind", "sleep", f.WriteInput("items.jsonl", e2etest.JSONLItems(n, `{"id":%q}`))); r.Code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}

	st, raw := f.StatusJSON()
	hasStatusKeys(t, raw)
	if st.Stream.Name != "KF" || st.Stream.Messages != n || st.Stream.Bytes == 0 {
		t.Fatalf("stream: %+v", st.Stream)
	}
	if st.Consumer.Pending != n || st.Consumer.AckPending != 0 || st.Consumer.Redelivered != 0 {
		t.Fatalf("consumer: %+v", st.Consumer)
	}
	if len(st.Workers) != 0 {
		t.Fatalf("w1 withdrew on its clean exit, yet workers: %+v", st.Workers)
	}
	p := st.Pool
	if p.Total != 2 || p.Available != 1 || p.Leased != 0 || p.Cooling != 0 || p.Disabled != 1 || len(p.Credentials) != 2 {
		t.Fatalf("pool: %+v", p)
	}
	a, b := p.Credentials[0], p.Credentials[1]
	if a.ID != "key-a" || a.State != "available" || a.MaxConcurrent != 2 || a.Rate != "100/m" || a.DisabledReason != "" {
		t.Fatalf("key-a: %+v", a)
	}
	if b.ID != "key-b" || b.State != "disabled" || b.DisabledReason != "billing issue" || b.Rate != "" {
		t.Fatalf("key-b: %+v", b)
	}

	r := f.Producer(nil, "status")
	if r.Code != 0 {
		t.Fatalf("status:\n%s", r)
	}
	for _, w := range []string{"Stream KF: 7 messages", "7 pending, 0 ack pending", "2 credentials: 1 available, 0 leased, 0 cooling, 1 disabled",
		"disabled: billing issue", "100/m"} {
		if !strings.Contains(r.Stdout, w) {
			t.Fatalf("status table lacks %q:\n%s", w, r.Stdout)
		}
	}
	t.Logf("status table:\n%s", r.Stdout)
}
