package queue_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// apiWrites records the JetStream API requests that create or change a
// stream or a consumer, as they are sent: a subscription to the API's
// subjects sees every request, and those of one connection in the order
// it sent them. (The server's audit advisories, which this used before,
// may come out of order: a consumer create's advisory after a later
// request's.)
type apiWrites struct {
	mu       sync.Mutex
	subjects []string
	all      int
	infos    int // $JS.API.INFO requests seen: settle's markers
}

func watchAPIWrites(t *testing.T, nc *nats.Conn) *apiWrites {
	t.Helper()
	w := &apiWrites{}
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.all++
		if m.Subject == "$JS.API.INFO" {
			w.infos++
		}
		for _, op := range []string{".STREAM.CREATE.", ".STREAM.UPDATE.", ".CONSUMER.CREATE.", ".CONSUMER.DURABLE.CREATE."} {
			if strings.Contains(m.Subject, op) {
				w.subjects = append(w.subjects, m.Subject)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// counts returns the writes seen and the number of all API requests seen.
func (w *apiWrites) counts() ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.subjects...), w.all
}

// reset forgets the writes seen so far.
func (w *apiWrites) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subjects = nil
}

// settle waits until the requests sent so far on q's connection are
// seen: one more request on it, which the subscription sees after them.
func (w *apiWrites) settle(t *testing.T, q *queue.Queue) {
	t.Helper()
	w.mu.Lock()
	before := w.infos
	w.mu.Unlock()
	if _, err := q.JetStream().AccountInfo(ctx(t)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the marker request", 10*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.infos > before
	})
}

// A worker start against a queue that is already as configured only
// reads; a worker's lane consumer with a changed setting is written once,
// with that setting, and the setting holds.
func TestOpenWritesOnlyWhatDiffers(t *testing.T) {
	q, nc := open(t)
	if _, err := q.LaneConsumer(ctx(t), "b"); err != nil {
		t.Fatal(err)
	}
	w := watchAPIWrites(t, nc)
	// The advisories of the first open's own writes may come after the
	// watch began: they are not the opens' below.
	w.settle(t, q)
	w.reset()
	for range 3 {
		q2, err := queue.Open(ctx(t), nc, q.Config())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q2.LaneConsumer(ctx(t), "b"); err != nil {
			t.Fatal(err)
		}
	}
	w.settle(t, q)
	if writes, all := w.counts(); len(writes) != 0 {
		t.Fatalf("3 opens of an unchanged queue wrote %d times (of %d API requests): %v", len(writes), all, writes)
	}

	cfg := q.Config()
	cfg.AckWait = 45 * time.Second
	q2, err := queue.Open(ctx(t), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := q2.LaneConsumer(ctx(t), "b")
	if err != nil {
		t.Fatal(err)
	}
	w.settle(t, q)
	writes, _ := w.counts()
	if len(writes) != 1 || !strings.Contains(writes[0], ".CONSUMER.") {
		t.Fatalf("a worker with a new ack wait wrote %v, want one consumer update", writes)
	}
	if got := c.CachedInfo().Config.AckWait; got != 45*time.Second {
		t.Fatalf("ack wait after the update: %s", got)
	}

	// With a redelivery back-off the server takes its first step as the
	// ack wait: one write to set it, none after.
	cfg.RedeliveryBackoff = []time.Duration{2 * time.Second, 10 * time.Second}
	for range 2 {
		q3, err := queue.Open(ctx(t), nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q3.LaneConsumer(ctx(t), "b"); err != nil {
			t.Fatal(err)
		}
	}
	w.settle(t, q)
	if writes, _ = w.counts(); len(writes) != 2 {
		t.Fatalf("two workers with a new back-off wrote %v, want one consumer update more", writes)
	}
}

// The same on a 3-node cluster with every stream and bucket on all three
// nodes: there each write would be a proposal to the meta group.
func TestOpenWritesNothingOnAnUnchangedClusterQueue(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc := connectCluster(t, c)
	cfg := r3
	cfg.RequestTimeout = 10 * time.Second
	q, err := queue.Open(ctx(t), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := watchAPIWrites(t, nc)
	if _, err := queue.Open(ctx(t), nc, cfg); err != nil {
		t.Fatal(err)
	}
	w.settle(t, q)
	if writes, all := w.counts(); len(writes) != 0 {
		t.Fatalf("an open of an unchanged R3 queue wrote %d times (of %d API requests): %v", len(writes), all, writes)
	}
}
