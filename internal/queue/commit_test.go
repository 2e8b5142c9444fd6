package queue_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// fetchAll publishes n items and fetches them all.
func fetchAll(t *testing.T, q *queue.Queue, n int) []jetstream.Msg {
	t.Helper()
	if _, err := q.Publish(ctx(t), items("b", n)...); err != nil {
		t.Fatal(err)
	}
	cons, err := q.LaneConsumer(ctx(t), "b")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for len(msgs) < n {
		batch, err := cons.Fetch(n-len(msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
	}
	return msgs
}

func succeeded(t *testing.T, m jetstream.Msg) kftype.Result {
	it, err := queue.DecodeItem(m)
	if err != nil {
		t.Fatal(err)
	}
	return kftype.Result{Item: it.ID, Batch: it.Batch, Kind: it.Kind, Outcome: kftype.OutcomeSucceeded, Attempts: 1}
}

func ackPending(t *testing.T, q *queue.Queue) int {
	st, err := q.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return st.Consumer.AckPending
}

func TestCommitStoresResultsThenAcks(t *testing.T) {
	q, _ := open(t)
	const n = 300
	msgs := fetchAll(t, q, n)
	var observed atomic.Int64
	c := q.NewCommitter(queue.CommitterOptions{Observe: func(items int) { observed.Add(int64(items)) }})
	defer c.Close()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range msgs {
		wg.Go(func() { errs[i] = c.Commit(ctx(t), succeeded(t, m), m) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	got := 0
	if err := q.ReadResults(ctx(t), "b", func(r kftype.Result) error {
		got++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("%d results stored, want %d", got, n)
	}
	if o := observed.Load(); o != n {
		t.Fatalf("the batches observed hold %d items, want %d", o, n)
	}
	testutil.WaitFor(t, "every message acknowledged", 10*time.Second, func() bool { return ackPending(t, q) == 0 })
	st, err := q.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Stream.Messages != 0 {
		t.Fatalf("the work stream still holds %d messages", st.Stream.Messages)
	}
}

func TestCommitAcksNothingWhoseResultIsNotStored(t *testing.T) {
	q, _ := open(t)
	msgs := fetchAll(t, q, 2)
	name, err := q.JetStream().StreamNameBySubject(ctx(t), q.ResultSubject("b", "x"))
	if err != nil {
		t.Fatal(err)
	}
	// The results stream refuses every result as too large.
	s, err := q.JetStream().Stream(ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = 16
	if _, err := q.JetStream().UpdateStream(ctx(t), cfg); err != nil {
		t.Fatal(err)
	}
	c := q.NewCommitter(queue.CommitterOptions{})
	defer c.Close()
	err = c.Commit(ctx(t), succeeded(t, msgs[0]), msgs[0])
	if !errors.Is(err, queue.ErrResultNotStored) {
		t.Fatalf("want ErrResultNotStored, got %v", err)
	}
	// A confirmed ack of the other message: the server has handled every
	// earlier acknowledgement of this consumer once it answers.
	if err := queue.Ack(ctx(t), msgs[1]); err != nil {
		t.Fatal(err)
	}
	if n := ackPending(t, q); n != 1 {
		t.Fatalf("ack pending %d, want 1: the message whose result failed was acknowledged", n)
	}
}

func TestCommitAfterCloseFails(t *testing.T) {
	q, _ := open(t)
	msgs := fetchAll(t, q, 1)
	c := q.NewCommitter(queue.CommitterOptions{})
	c.Close()
	c.Close() // twice is fine
	if err := c.Commit(ctx(t), succeeded(t, msgs[0]), msgs[0]); !errors.Is(err, queue.ErrResultNotStored) {
		t.Fatalf("want ErrResultNotStored, got %v", err)
	}
}
