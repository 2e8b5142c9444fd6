package status_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Read assembles the report from real servers, with every documented key
// present and the figures of what was set up.
func TestReadReport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	nc := natstest.Connect(t, ns.URL())
	q, err := queue.Open(ctx, nc, queue.Config{Stream: "ST"})
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	pool, err := creds.New(rs.Client(t), redistest.UniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	if err := pool.Register(ctx, []creds.Credential{{ID: "key-a", MaxConcurrent: 2, Rate: "10/m"}, {ID: "key-b", MaxConcurrent: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := pool.Disable(ctx, "key-b", "billing issue"); err != nil {
		t.Fatal(err)
	}
	// Two batches, so two lanes; one item of b1 delivered and not yet
	// acknowledged: the backlog sums what every lane holds.
	if _, err := q.Publish(ctx,
		kftype.Item{ID: "i1", Batch: "b1", Kind: "sleep", Payload: []byte(`{"id":"i1"}`)},
		kftype.Item{ID: "i2", Batch: "b1", Kind: "sleep", Payload: []byte(`{"id":"i2"}`)},
		kftype.Item{ID: "i3", Batch: "b2", Kind: "sleep", Payload: []byte(`{"id":"i3"}`)},
	); err != nil {
		t.Fatal(err)
	}
	lane, err := q.LaneConsumer(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.LaneConsumer(ctx, "b2"); err != nil {
		t.Fatal(err)
	}
	batch, err := lane.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(collect(batch.Messages())); n != 1 {
		t.Fatalf("fetched %d messages of b1's lane, want 1", n)
	}
	if err := q.Announce(ctx, queue.WorkerInfo{ID: "w1", State: "running", Concurrency: 4, Busy: 2, Done: 7}); err != nil {
		t.Fatal(err)
	}

	rep, err := status.Read(ctx, q, pool)
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Consumer; rep.Stream.Name != "ST" || rep.Stream.Messages != 3 || c.Pending != 2 || c.AckPending != 1 || c.Backlog != 3 {
		t.Errorf("stream/consumer: want ST with 3 messages, 2 pending, 1 ack pending, backlog 3; got %+v %+v", rep.Stream, rep.Consumer)
	}
	if len(rep.Workers) != 1 || rep.Workers[0].Busy != 2 || rep.Workers[0].Done != 7 || rep.Workers[0].Kinds == nil {
		t.Errorf("workers: want w1 busy 2 done 7 with kinds [], got %+v", rep.Workers)
	}
	p := rep.Pool
	if p.Total != 2 || p.Disabled != 1 || len(p.Credentials) != 2 {
		t.Fatalf("pool: want 2 credentials, 1 disabled; got %+v", p)
	}
	if c := p.Credentials[1]; c.ID != "key-b" || c.State != creds.StateDisabled || c.DisabledReason != "billing issue" || c.DisabledAt == nil {
		t.Errorf("key-b: want disabled for \"billing issue\", got %+v", c)
	}
	if c := p.Credentials[0]; c.Rate != "10/m" || c.MaxConcurrent != 2 || c.CoolingUntil != nil || c.Holders == nil {
		t.Errorf("key-a: want rate 10/m, max 2, not cooling, holders []; got %+v", c)
	}

	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"at", "stream", "consumer", "dead_letters", "results", "workers", "pool"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks %q: %s", k, data)
		}
	}
	cons := m["consumer"].(map[string]any)
	for _, k := range []string{"name", "pending", "ack_pending", "backlog", "redelivered", "waiting_pulls", "last_active"} {
		if _, ok := cons[k]; !ok {
			t.Errorf("consumer lacks %q: %v", k, cons)
		}
	}
	if b, ok := cons["backlog"].(float64); !ok || b != 3 {
		t.Errorf("consumer.backlog = %v, want the number 3 (KEDA's metrics-api scaler reads it)", cons["backlog"])
	}
	row := m["pool"].(map[string]any)["credentials"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "state", "max_concurrent", "rate", "in_flight", "holders", "cooling_until",
		"cooling_reason", "disabled_reason", "disabled_at", "starts_in_window", "last_used", "starts", "rate_limited"} {
		if _, ok := row[k]; !ok {
			t.Errorf("credential row lacks %q: %v", k, row)
		}
	}
}

// collect drains a fetch's messages.
func collect(ch <-chan jetstream.Msg) []jetstream.Msg {
	var out []jetstream.Msg
	for m := range ch {
		out = append(out, m)
	}
	return out
}
