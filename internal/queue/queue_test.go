package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

func open(t *testing.T) (*queue.Queue, *nats.Conn) {
	t.Helper()
	s := natstest.Start(t)
	nc := natstest.Connect(t, s.URL())
	q, err := queue.Open(ctx(t), nc, queue.Config{AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return q, nc
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func items(batch string, n int) []kftype.Item {
	out := make([]kftype.Item, n)
	for i := range out {
		id := fmt.Sprintf("item.%d/x", i)
		out[i] = kftype.Item{ID: id, Batch: batch, Kind: "sleep", Payload: fmt.Appendf(nil, `{"id":%q,"ms":0}`, id)}
	}
	return out
}

func TestOpenIsIdempotent(t *testing.T) {
	q, nc := open(t)
	for range 3 {
		if _, err := queue.Open(ctx(t), nc, q.Config()); err != nil {
			t.Fatalf("second open: %v", err)
		}
	}
}

func TestPublishDeduplicatesBatch(t *testing.T) {
	q, _ := open(t)
	rep, err := q.Publish(ctx(t), items("b1", 50)...)
	if err != nil || rep.Published != 50 || rep.Duplicates != 0 {
		t.Fatalf("first publish: %+v %v", rep, err)
	}
	rep, err = q.Publish(ctx(t), items("b1", 60)...)
	if err != nil || rep.Published != 10 || rep.Duplicates != 50 {
		t.Fatalf("second publish: want 10 new and 50 duplicates, got %+v %v", rep, err)
	}
	st, err := q.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Stream.Messages != 60 || st.Consumer.Pending != 60 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestDeliveredItemDecodes(t *testing.T) {
	q, nc := open(t)
	in := items("batch 1", 1)[0]
	if _, err := q.Publish(ctx(t), in); err != nil {
		t.Fatal(err)
	}
	cons, err := q.LaneConsumer(ctx(t), in.Batch)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msg := <-batch.Messages()
	got, err := queue.DecodeItem(msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != in.ID || got.Batch != in.Batch || got.Kind != "sleep" || string(got.Payload) != string(in.Payload) {
		t.Fatalf("decoded %+v, want %+v", got, in)
	}
	if err := queue.InProgress(ctx(t), nc, msg); err != nil {
		t.Fatal(err)
	}
	if err := queue.Term(ctx(t), nc, msg, "test"); err != nil {
		t.Fatal(err)
	}
	st, _ := q.Stats(ctx(t))
	if st.Stream.Messages != 0 {
		t.Fatalf("a term on a work-queue stream must delete the message: %+v", st)
	}
}

func TestResultsKeepLatestPerItem(t *testing.T) {
	q, _ := open(t)
	if err := q.ReadResults(ctx(t), "none", func(kftype.Result) error { t.Fatal("no results expected"); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		for _, outcome := range []string{kftype.OutcomeFailed, kftype.OutcomeSucceeded} {
			r := kftype.Result{Item: fmt.Sprintf("i.%d", i), Batch: "b.1", Outcome: outcome, Attempts: 1}
			if err := q.PutResult(ctx(t), r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.PutResult(ctx(t), kftype.Result{Item: "other", Batch: "b2", Outcome: kftype.OutcomeFailed}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	err := q.ReadResults(ctx(t), "b.1", func(r kftype.Result) error {
		if _, dup := seen[r.Item]; dup {
			t.Errorf("item %s twice", r.Item)
		}
		seen[r.Item] = r.Outcome
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 5 {
		t.Fatalf("want 5 items, got %v", seen)
	}
	for id, o := range seen {
		if o != kftype.OutcomeSucceeded {
			t.Fatalf("%s: want the latest outcome, got %s", id, o)
		}
	}
	// Watch sees the existing ones and then new ones.
	done := make(chan int)
	go func() {
		n := 0
		_ = q.WatchResults(ctx(t), "b.1", func(kftype.Result) (bool, error) {
			n++
			return n < 6, nil
		})
		done <- n
	}()
	if err := q.PutResult(ctx(t), kftype.Result{Item: "late", Batch: "b.1", Outcome: kftype.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 6 {
		t.Fatalf("watch saw %d", n)
	}
}

func TestDeadLetterListAndReplay(t *testing.T) {
	q, _ := open(t)
	for i := range 3 {
		d := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: fmt.Sprintf("d%d", i), Batch: "b", Kind: "sleep",
			Reason: kftype.ReasonPermanent, Attempts: 1, Error: "boom"}, Payload: json.RawMessage(`{"ms":1}`)}
		if err := q.PutDeadLetter(ctx(t), d); err != nil {
			t.Fatal(err)
		}
	}
	var got []kftype.DeadLetter
	if err := q.ListDeadLetters(ctx(t), "", func(d kftype.DeadLetter) error { got = append(got, d); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Error != "boom" || string(got[0].Payload) != `{"ms":1}` {
		t.Fatalf("list: %+v", got)
	}
	// The item was enqueued before under its batch ID; a replay must not be
	// dropped as a duplicate.
	if _, err := q.Publish(ctx(t), kftype.Item{ID: "d0", Batch: "b", Kind: "sleep", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	before, _ := q.Stats(ctx(t))
	if err := q.Replay(ctx(t), got[0]); err != nil {
		t.Fatal(err)
	}
	after, _ := q.Stats(ctx(t))
	if after.Stream.Messages != before.Stream.Messages+1 || after.DeadLetters != 2 {
		t.Fatalf("replay: before %+v after %+v", before, after)
	}
}

func TestWorkersRegistry(t *testing.T) {
	q, _ := open(t)
	for _, id := range []string{"w 1", "w~2"} {
		if err := q.Announce(ctx(t), queue.WorkerInfo{ID: id, Concurrency: 3, LastSeen: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := q.Workers(ctx(t))
	if err != nil || len(ws) != 2 || ws[0].ID != "w 1" {
		t.Fatalf("workers: %+v %v", ws, err)
	}
	if err := q.Withdraw(ctx(t), "w 1"); err != nil {
		t.Fatal(err)
	}
	ws, _ = q.Workers(ctx(t))
	if len(ws) != 1 || ws[0].ID != "w~2" {
		t.Fatalf("after withdraw: %+v", ws)
	}
}

func TestFits(t *testing.T) {
	q, nc := open(t)
	big := make([]byte, nc.MaxPayload())
	if _, _, ok := q.Fits(kftype.Item{ID: "x", Batch: "b", Kind: "exec", Payload: big}); ok {
		t.Fatal("an item of max payload plus headers must not fit")
	}
	if size, _, ok := q.Fits(kftype.Item{ID: "x", Batch: "b", Kind: "exec", Payload: []byte("{}")}); !ok || size < 2 {
		t.Fatal("a small item must fit")
	}
}

func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "a.b", "~", "x y/z", "ü", "A-z_09"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := queue.Token(s)
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if c == '.' || c == '*' || c == '>' || c == ' ' || c < 0x21 || c > 0x7e {
				t.Fatalf("token %q of %q holds %q", tok, s, c)
			}
		}
		back, err := queue.Untoken(tok)
		if err != nil || back != s {
			t.Fatalf("round trip %q -> %q -> %q (%v)", s, tok, back, err)
		}
	})
}

// TestTokenKeepsPlainIDs: an ID with nothing to escape is its own token,
// and making it allocates nothing (a worker makes one per result).
func TestTokenKeepsPlainIDs(t *testing.T) {
	id := "Item-0001_x"
	if tok := queue.Token(id); tok != id {
		t.Fatalf("Token(%q) = %q", id, tok)
	}
	if n := testing.AllocsPerRun(100, func() { _ = queue.Token(id) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// Attach creates what is missing but never changes an existing lane's
// consumer; a worker's handle (Open) brings it in line.
func TestAttachDoesNotRewriteTheFleet(t *testing.T) {
	q, nc := open(t) // ack wait 2s
	if _, err := q.LaneConsumer(ctx(t), "b"); err != nil {
		t.Fatal(err)
	}
	ackWait := func() time.Duration {
		t.Helper()
		c, err := q.JetStream().Consumer(ctx(t), q.Config().Stream, q.LaneConsumerName("b"))
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().Config.AckWait
	}
	producer, err := queue.Attach(ctx(t), nc, queue.Config{AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.LaneConsumer(ctx(t), "b"); err != nil {
		t.Fatal(err)
	}
	if got := ackWait(); got != 2*time.Second {
		t.Fatalf("Attach changed the consumer's ack wait to %s", got)
	}
	worker, err := queue.Open(ctx(t), nc, queue.Config{AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.LaneConsumer(ctx(t), "b"); err != nil {
		t.Fatal(err)
	}
	if got := ackWait(); got != time.Minute {
		t.Fatalf("Open must update the consumer: ack wait %s", got)
	}
	// On an empty server Attach creates everything.
	s2 := natstest.Start(t)
	nc2 := natstest.Connect(t, s2.URL())
	if _, err := queue.Attach(ctx(t), nc2, queue.Config{}); err != nil {
		t.Fatal(err)
	}
}

// Replay removes the record it replayed, not a newer one written since.
func TestReplayKeepsANewerRecord(t *testing.T) {
	q, _ := open(t)
	d := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: "x", Batch: "b", Kind: "sleep", Reason: kftype.ReasonPermanent,
		Error: "first"}, Payload: json.RawMessage(`{}`)}
	if err := q.PutDeadLetter(ctx(t), d); err != nil {
		t.Fatal(err)
	}
	var listed kftype.DeadLetter
	if err := q.ListDeadLetters(ctx(t), "b", func(r kftype.DeadLetter) error { listed = r; return nil }); err != nil {
		t.Fatal(err)
	}
	// The item fails again before the replay's purge.
	d.Error = "second"
	if err := q.PutDeadLetter(ctx(t), d); err != nil {
		t.Fatal(err)
	}
	if err := q.Replay(ctx(t), listed); err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := q.ListDeadLetters(ctx(t), "b", func(r kftype.DeadLetter) error { left = append(left, r.Error); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != "second" {
		t.Fatalf("records left: %v, want the newer one", left)
	}
}

// A lane's consumer holds the pull requests of a fleet of 1,000 workers.
// JetStream cannot change max_waiting: a lane consumer made with another
// keeps it, and the worker's handle still brings the rest in line.
func TestConsumerSizedForLargeFleets(t *testing.T) {
	q, nc := open(t)
	c, err := q.LaneConsumer(ctx(t), "b")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.MaxWaiting; got != queue.ConsumerMaxWaiting {
		t.Fatalf("max_waiting %d, want %d", got, queue.ConsumerMaxWaiting)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := q.Config()
	name := q.LaneConsumerName("b")
	if err := js.DeleteConsumer(ctx(t), cfg.Stream, name); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx(t), cfg.Stream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: cfg.SubjectPrefix + ".b.b.*",
	}); err != nil {
		t.Fatal(err)
	}
	if c, err = q.LaneConsumer(ctx(t), "b"); err != nil {
		t.Fatalf("a lane consumer with the default max_waiting: %v", err)
	}
	if ci := c.CachedInfo().Config; ci.MaxWaiting != 512 || ci.AckWait != cfg.AckWait {
		t.Fatalf("the consumer after: max_waiting %d, ack wait %s", ci.MaxWaiting, ci.AckWait)
	}
}
