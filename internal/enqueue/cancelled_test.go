package enqueue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// results counts batch's results by outcome.
func results(t *testing.T, q *queue.Queue, batch string) map[string]int {
	t.Helper()
	out := map[string]int{}
	if err := q.ReadResults(ctx(t), batch, func(r kftype.Result) error {
		out[r.Outcome]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A cancelled batch takes no new items: the enqueue is refused before
// anything is published, and its record is unchanged.
func TestEnqueueIntoCancelledBatch(t *testing.T) {
	q, _ := open(t)
	first := writeFile(t, "first.jsonl", lines(5, `{"id":"a-%d","ms":0}`))
	if _, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: first}, Kind: "sleep", Batch: "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetBatchState(ctx(t), "gone", kftype.ActionCancel, "tester@host"); err != nil {
		t.Fatal(err)
	}
	before := messages(t, q)
	more := writeFile(t, "more.jsonl", lines(7, `{"id":"b-%d","ms":0}`))
	rep, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: more}, Kind: "sleep", Batch: "gone"})
	var ce *enqueue.CancelledError
	if !errors.As(err, &ce) || ce.Raced || !errors.Is(err, enqueue.ErrCancelled) || !errors.Is(err, queue.ErrBatchCancelled) {
		t.Fatalf("want a CancelledError (not raced), got %v", err)
	}
	if errors.Is(err, enqueue.ErrUnreachable) || errors.Is(err, enqueue.ErrInvalid) {
		t.Fatalf("a cancelled batch is its own kind of error: %v", err)
	}
	if !strings.Contains(err.Error(), "batch gone is cancelled") || !strings.Contains(err.Error(), "nothing was enqueued") {
		t.Fatalf("the error does not say it: %v", err)
	}
	if rep.New != 0 || messages(t, q) != before {
		t.Fatalf("published into a cancelled batch: %+v, %d messages (had %d)", rep, messages(t, q), before)
	}
	if rec, err := q.Batch(ctx(t), "gone"); err != nil || rec.Total != 5 || rec.State != kftype.BatchCancelled {
		t.Fatalf("record: %+v %v", rec, err)
	}
}

// An enqueue that races a cancel: the batch is cancelled while the input
// is published. Publishing stops at the next look at the record, what was
// published is recorded cancelled (nothing of the batch is left in the
// stream), the record's total counts it, and the error says exactly what
// was and was not published.
func TestEnqueueRacingCancel(t *testing.T) {
	q, _ := open(t)
	first := writeFile(t, "first.jsonl", lines(10, `{"id":"a-%d","ms":0}`))
	if _, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: first}, Kind: "sleep", Batch: "racy"}); err != nil {
		t.Fatal(err)
	}
	const n = 6000
	big := writeFile(t, "big.jsonl", lines(n, `{"id":"b-%d","ms":0}`))
	// The publisher looks at the record every 256 items (not once a
	// second): the cancel, made once 1,024 are published, is seen long
	// before the input ends, however fast the machine publishes.
	defer enqueue.SetCancelCheckEvery(0)()
	cancelled := false
	req := enqueue.Request{Source: enqueue.Source{Path: big}, Kind: "sleep", Batch: "racy", By: "tester@host", Window: 64,
		ProgressEvery: time.Nanosecond,
		Progress: func(p enqueue.Progress) {
			if p.Phase != enqueue.Publishing || cancelled || p.Confirmed < 1024 {
				return
			}
			cancelled = true
			if _, err := q.SetBatchState(ctx(t), "racy", kftype.ActionCancel, "other@host"); err != nil {
				t.Error(err)
			}
		}}
	rep, err := enqueue.Run(ctx(t), q, req)
	var ce *enqueue.CancelledError
	if !cancelled || !errors.As(err, &ce) || !ce.Raced || !errors.Is(err, enqueue.ErrCancelled) {
		t.Fatalf("want a raced CancelledError (cancelled: %v), got %v", cancelled, err)
	}
	if rep.New+rep.NotSent != n || rep.Unconfirmed != 0 || rep.NotSent == 0 || rep.New < 1024 {
		t.Fatalf("want part of the input published and the rest not sent: %+v", rep)
	}
	if ce.Drained != rep.New+10 || ce.DrainErr != nil {
		t.Fatalf("drained %d (%v), want the %d published and the 10 of the first enqueue", ce.Drained, ce.DrainErr, rep.New)
	}
	for _, w := range []string{"was cancelled while this enqueue published", "are cancelled with the rest of the batch", "were not published"} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("the error lacks %q: %v", w, err)
		}
	}
	if m := messages(t, q); m != 0 {
		t.Fatalf("%d messages left in the stream", m)
	}
	if got := results(t, q, "racy"); got[kftype.OutcomeCancelled] != rep.New+10 || len(got) != 1 {
		t.Fatalf("results %v, want %d cancelled", got, rep.New+10)
	}
	if rec, err := q.Batch(ctx(t), "racy"); err != nil || rec.Total != int64(rep.New+10) || rec.State != kftype.BatchCancelled {
		t.Fatalf("record: %+v %v (want total %d, cancelled)", rec, err, rep.New+10)
	}
}
