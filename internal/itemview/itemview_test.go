package itemview_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// State is the latest of what an item left: a message newer than its
// outcomes waits or runs (a replay); a result stored while its message is
// still there (it leaves right after) is the outcome; a dead letter and
// the failed result of its run are dead-lettered, a later success is not.
func TestState(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	msg := func(s int, delivered bool) *itemview.Message {
		return &itemview.Message{EnqueuedAt: at(s), Delivered: delivered}
	}
	res := func(s int, outcome string) *kftype.Result { return &kftype.Result{Outcome: outcome, FinishedAt: at(s)} }
	dl := func(s int) *kftype.DeadLetterSummary { return &kftype.DeadLetterSummary{FailedAt: at(s)} }
	for _, c := range []struct {
		name string
		msg  *itemview.Message
		res  *kftype.Result
		dl   *kftype.DeadLetterSummary
		want string
	}{
		{"nothing", nil, nil, nil, ""},
		{"enqueued", msg(0, false), nil, nil, itemview.StateWaiting},
		{"with a worker", msg(0, true), nil, nil, itemview.StateRunning},
		{"succeeded", nil, res(5, kftype.OutcomeSucceeded), nil, itemview.StateSucceeded},
		{"result stored, message not acked yet", msg(0, true), res(5, kftype.OutcomeSucceeded), nil, itemview.StateSucceeded},
		{"failed (its dead letter aged out)", nil, res(5, kftype.OutcomeFailed), nil, itemview.StateFailed},
		{"cancelled", nil, res(5, kftype.OutcomeCancelled), nil, itemview.StateCancelled},
		{"dead-lettered", nil, res(6, kftype.OutcomeFailed), dl(5), itemview.StateDeadLettered},
		{"dead-lettered, message not termed yet", msg(0, true), res(6, kftype.OutcomeFailed), dl(5), itemview.StateDeadLettered},
		{"replayed: waits again", msg(9, false), res(6, kftype.OutcomeFailed), nil, itemview.StateWaiting},
		{"replayed, record kept: runs again", msg(9, true), res(6, kftype.OutcomeFailed), dl(5), itemview.StateRunning},
		{"replayed and succeeded, record kept", nil, res(12, kftype.OutcomeSucceeded), dl(5), itemview.StateSucceeded},
	} {
		if got := itemview.State(c.msg, c.res, c.dl); got != c.want {
			t.Errorf("%s: want %q, got %q", c.name, c.want, got)
		}
	}
}

func setup(t *testing.T) (context.Context, *queue.Queue) {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	q, err := queue.Open(ctx, nc, queue.Config{Stream: "ITEMS"})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, q
}

// One item through its life, read by Read at each step against a real
// NATS server: waiting (its batch paused), running, dead-lettered with its
// reason and error, waiting again once replayed (its last outcome still
// shown), succeeded with its key and output; a cancelled item; an
// unknown one.
func TestReadFollowsAnItem(t *testing.T) {
	ctx, q := setup(t)
	const batch = "docs 1"
	var items []kftype.Item
	for i := range 5 {
		id := fmt.Sprintf("it-%d", i)
		items = append(items, kftype.Item{ID: id, Batch: batch, Kind: "exec", Scope: "gpt-4o", Payload: fmt.Appendf(nil, `{"id":%q}`, id)})
	}
	if _, err := q.Publish(ctx, items...); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetBatchState(ctx, batch, kftype.ActionPause, "op@host"); err != nil {
		t.Fatal(err)
	}
	read := func(item string) itemview.Item {
		t.Helper()
		v, err := itemview.Read(ctx, q, batch, item)
		if err != nil {
			t.Fatalf("Read %s: %v", item, err)
		}
		return v
	}
	v := read("it-3")
	if v.State != itemview.StateWaiting || v.BatchState != batchview.StatePaused || v.Kind != "exec" || v.Scope != "gpt-4o" ||
		v.Message == nil || v.Message.Delivered || v.Result != nil || v.DeadLetter != nil || v.Attempts != 0 {
		t.Fatalf("a waiting item of a paused batch: %+v (message %+v)", v, v.Message)
	}

	// A worker takes the first three.
	c, err := q.LaneConsumer(ctx, kftype.Lane(batch, "gpt-4o"))
	if err != nil {
		t.Fatal(err)
	}
	batchMsgs, err := c.FetchNoWait(3)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batchMsgs.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 3 {
		t.Fatalf("fetched %d", len(msgs))
	}
	if v := read("it-0"); v.State != itemview.StateRunning || !v.Message.Delivered {
		t.Fatalf("an item out with a worker: %+v", v)
	}
	if v := read("it-3"); v.State != itemview.StateWaiting {
		t.Fatalf("an item behind it: %+v", v)
	}

	// it-0 is dead-lettered as a worker does it.
	dl := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: "it-0", Batch: batch, Kind: "exec", Scope: "gpt-4o",
		Reason: kftype.ReasonOutOfAttempts, Attempts: 5, Failures: 5, Error: "exit 1: boom", FailedAt: time.Now().UTC()},
		Payload: []byte(`{"id":"it-0"}`)}
	if err := q.PutDeadLetter(ctx, dl); err != nil {
		t.Fatal(err)
	}
	failed := kftype.Result{Item: "it-0", Batch: batch, Kind: "exec", Outcome: kftype.OutcomeFailed, Attempts: 5, CredentialID: "key-b",
		Error: "out of attempts: exit 1: boom", FinishedAt: time.Now().UTC()}
	if err := q.PutResult(ctx, failed); err != nil {
		t.Fatal(err)
	}
	if v := read("it-0"); v.State != itemview.StateDeadLettered {
		t.Fatalf("dead-lettered, its message not termed yet: %+v", v)
	}
	if err := msgs[0].Term(); err != nil {
		t.Fatal(err)
	}
	// The server takes a term as it comes, with no reply to wait for.
	testutil.WaitFor(t, "it-0's message to leave once termed", 10*time.Second, func() bool { return read("it-0").Message == nil })
	v = read("it-0")
	if v.State != itemview.StateDeadLettered || v.Reason != kftype.ReasonOutOfAttempts || v.Attempts != 5 || v.CredentialID != "key-b" ||
		v.Error != "out of attempts: exit 1: boom" || v.DeadLetter == nil || v.Result == nil || v.Message != nil {
		t.Fatalf("dead-lettered: %+v", v)
	}
	pub := v.Public()
	if pub.Error != "" || pub.Result.Error != "" || pub.DeadLetter.Error != "" || !pub.TextHidden || v.Result.Error == "" {
		t.Fatalf("Public keeps job text, or changed the item it was made of: %+v / %+v", pub, v)
	}

	// Replayed: it waits again; its last outcome is still shown.
	todo, _, err := q.DeadLettersToReplay(ctx, batch, []string{"it-0"})
	if err != nil || len(todo) != 1 {
		t.Fatalf("dead letters: %v %v", todo, err)
	}
	if err := q.Replay(ctx, todo[0]); err != nil {
		t.Fatal(err)
	}
	v = read("it-0")
	if v.State != itemview.StateWaiting || v.Message == nil || !v.Message.Replay || v.Attempts != 5 || v.Error == "" || v.DeadLetter != nil {
		t.Fatalf("replayed: %+v", v)
	}

	// it-1 succeeds.
	if err := q.PutResult(ctx, kftype.Result{Item: "it-1", Batch: batch, Kind: "exec", Outcome: kftype.OutcomeSucceeded, Attempts: 2,
		CredentialID: "key-a", Output: "done", FinishedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := msgs[1].Ack(); err != nil {
		t.Fatal(err)
	}
	if v := read("it-1"); v.State != itemview.StateSucceeded || v.Attempts != 2 || v.CredentialID != "key-a" || v.Output != "done" ||
		v.Error != "" || v.Reason != "" {
		t.Fatalf("succeeded: %+v", v)
	}

	// The batch is cancelled: the items not started are cancelled.
	if _, err := q.SetBatchState(ctx, batch, kftype.ActionCancel, "op@host"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.DrainCancelled(ctx, batch, "op@host"); err != nil {
		t.Fatal(err)
	}
	if v := read("it-4"); v.State != itemview.StateCancelled || v.BatchState != batchview.StateCancelled || v.Message != nil {
		t.Fatalf("cancelled: %+v", v)
	}

	for _, c := range []struct{ batch, item string }{{batch, "nope"}, {"no-batch", "it-1"}} {
		if _, err := itemview.Read(ctx, q, c.batch, c.item); !errors.Is(err, itemview.ErrNoItem) {
			t.Errorf("item %q of batch %q: want ErrNoItem, got %v", c.item, c.batch, err)
		}
	}
}

// An item of a batch whose every item has an outcome shows the batch done,
// as the batch list does, not its record's "running".
func TestReadShowsTheBatchDone(t *testing.T) {
	ctx, q := setup(t)
	const batch = "finished"
	if _, err := q.AddToBatch(ctx, batch, "exec", 2); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := q.PutResult(ctx, kftype.Result{Item: id, Batch: batch, Kind: "exec", Outcome: kftype.OutcomeSucceeded,
			Attempts: 1, FinishedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := itemview.Read(ctx, q, batch, "a")
	if err != nil {
		t.Fatal(err)
	}
	if v.State != itemview.StateSucceeded || v.BatchState != batchview.StateDone {
		t.Fatalf("an item of a finished batch: state %q, batch %q; want succeeded, done", v.State, v.BatchState)
	}
}
