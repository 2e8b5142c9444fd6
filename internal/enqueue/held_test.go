package enqueue_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// Enqueueing into a batch what it already holds adds nothing even past
// JetStream's duplicate window: neither the items that have a result nor
// those still waiting in the stream are published again, and the batch's
// total stays right. Before, the same file enqueued again after the window
// ran every item a second time, and the total counted them twice (the
// batch never completed).
func TestEnqueueAgainPastTheDuplicateWindow(t *testing.T) {
	srv := natstest.Start(t)
	const window = 2 * time.Second
	q, err := queue.Open(ctx(t), natstest.Connect(t, srv.URL()), queue.Config{Stream: "HELD", DuplicateWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "six.jsonl", lines(6, `{"id":"i-%d","ms":0}`))
	req := enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "sleep", Batch: "again"}
	rep, err := enqueue.Run(ctx(t), q, req)
	if err != nil || rep.New != 6 {
		t.Fatalf("first enqueue: %+v %v", rep, err)
	}
	// Three items run: each has a result, then its message is acked.
	cons, err := q.LaneConsumer(ctx(t), kftype.Lane("again", ""))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for m := range batch.Messages() {
		it, err := queue.DecodeItem(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.PutResult(ctx(t), kftype.Result{Item: it.ID, Batch: it.Batch, Kind: it.Kind, Outcome: kftype.OutcomeSucceeded, FinishedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		if err := m.DoubleAck(ctx(t)); err != nil {
			t.Fatal(err)
		}
		ran++
	}
	if ran != 3 {
		t.Fatalf("ran %d items, want 3", ran)
	}
	// Past the window the server no longer knows the messages' IDs.
	time.Sleep(window + 500*time.Millisecond)

	rep, err = enqueue.Run(ctx(t), q, req)
	if err != nil || rep.New != 0 || rep.Duplicates != 6 {
		t.Fatalf("the same file past the window: %+v %v; want 0 new, 6 duplicates", rep, err)
	}
	if n := messages(t, q); n != 3 {
		t.Errorf("%d messages in the stream, want the 3 still waiting", n)
	}
	// A file of two held items and a new one adds the new one alone.
	more := writeFile(t, "more.jsonl", `{"id":"i-0","ms":0}`+"\n"+`{"id":"i-5","ms":0}`+"\n"+`{"id":"i-6","ms":0}`+"\n")
	rep, err = enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: more}, Kind: "sleep", Batch: "again"})
	if err != nil || rep.New != 1 || rep.Duplicates != 2 {
		t.Fatalf("two held items and a new one: %+v %v", rep, err)
	}
	if b, err := q.Batch(ctx(t), "again"); err != nil || b.Total != 7 {
		t.Fatalf("batch record %+v %v: want a total of 7", b, err)
	}
}
