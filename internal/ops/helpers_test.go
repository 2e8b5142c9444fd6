package ops_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// fleet is one test's queue on its own embedded NATS server.
type fleet struct {
	t   *testing.T
	ctx context.Context
	q   *queue.Queue
	nc  *nats.Conn
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL())
	q, err := queue.Open(ctx, nc, queue.Config{AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{t: t, ctx: ctx, q: q, nc: nc}
}

// enqueue publishes n sleep items of batch (batch-0 ... batch-n-1), with
// the batch's record.
func (f *fleet) enqueue(batch string, n int) {
	f.t.Helper()
	items := make([]kftype.Item, n)
	for i := range items {
		id := fmt.Sprintf("%s-%d", batch, i)
		items[i] = kftype.Item{ID: id, Batch: batch, Kind: "sleep", Payload: fmt.Appendf(nil, `{"id":%q,"ms":1}`, id)}
	}
	if _, err := f.q.Publish(f.ctx, items...); err != nil {
		f.t.Fatal(err)
	}
}

// finish takes up to n of batch's messages off its lane as a worker does:
// with result (an outcome, "" for none: a message handed on without one)
// stored, then acknowledged, confirmed by the server.
func (f *fleet) finish(batch string, n int, outcome string) {
	f.t.Helper()
	c, err := f.q.LaneConsumer(f.ctx, batch)
	if err != nil {
		f.t.Fatal(err)
	}
	msgs, err := c.FetchNoWait(n)
	if err != nil {
		f.t.Fatal(err)
	}
	for msg := range msgs.Messages() {
		it, err := queue.DecodeItem(msg)
		if err != nil {
			f.t.Fatal(err)
		}
		if outcome != "" {
			f.result(batch, it.ID, outcome)
		}
		if err := msg.DoubleAck(f.ctx); err != nil {
			f.t.Fatal(err)
		}
	}
}

// result stores an outcome of item of batch.
func (f *fleet) result(batch, item, outcome string) {
	f.t.Helper()
	if err := f.q.PutResult(f.ctx, kftype.Result{Item: item, Batch: batch, Kind: "sleep", Outcome: outcome,
		FinishedAt: time.Now().UTC()}); err != nil {
		f.t.Fatal(err)
	}
}

// record reads batch's record.
func (f *fleet) record(batch string) kftype.BatchInfo {
	f.t.Helper()
	b, err := f.q.Batch(f.ctx, batch)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// messages counts batch's messages in the stream.
func (f *fleet) messages(batch string) uint64 {
	f.t.Helper()
	n, err := f.q.LaneMessages(f.ctx, batch)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// closed is f's queue with its connection closed: every call to NATS fails.
func (f *fleet) closed() *queue.Queue {
	f.nc.Close()
	return f.q
}
