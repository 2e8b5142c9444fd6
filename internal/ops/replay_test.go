package ops_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// deadLetter stores the dead letter of item of batch, as a worker does
// once the item's message is gone.
func (f *fleet) deadLetter(batch, item string, cut bool) {
	f.t.Helper()
	d := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: item, Batch: batch, Kind: "sleep",
		Reason: kftype.ReasonPermanent, Attempts: 1, Error: "refused", FailedAt: time.Now().UTC()},
		Payload: fmt.Appendf(nil, `{"id":%q,"ms":1}`, item), PayloadTruncated: cut}
	if err := f.q.PutDeadLetter(f.ctx, d); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) deadLetters(batch string) []string {
	f.t.Helper()
	var out []string
	if err := f.q.ListDeadLetters(f.ctx, batch, func(d kftype.DeadLetter) error { out = append(out, d.Item); return nil }); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// A replay takes the items named (of a batch, or of any), every record of
// a batch, or every record: each back in its lane with fresh attempts, its
// record gone. An item without a record replays nothing and is named.
func TestReplay(t *testing.T) {
	f := newFleet(t)
	for _, b := range []string{"b1", "b2"} {
		f.enqueue(b, 3)
		f.finish(b, 3, kftype.OutcomeFailed)
		for i := range 3 {
			f.deadLetter(b, fmt.Sprintf("%s-%d", b, i), false)
		}
	}

	_, err := ops.ReplayDeadLetters(f.ctx, f.q, "b1", []string{"b1-0", "nope", "b2-0"})
	if !errors.Is(err, ops.ErrNotFound) || !strings.Contains(err.Error(), `no dead letter for "b2-0", "nope" in batch b1: nothing replayed`) {
		t.Fatalf("an item without a record: want ErrNotFound naming it, got %v", err)
	}
	if n := len(f.deadLetters("")); n != 6 {
		t.Fatalf("a refused replay changed the dead letters: %d, want 6", n)
	}

	r, err := ops.PickReplay(f.ctx, f.q, "b1", []string{"b1-1"})
	if err != nil || len(r.Letters) != 1 || r.Letters[0].Item != "b1-1" {
		t.Fatalf("pick b1-1: %+v %v", r, err)
	}
	if n, err := r.Run(f.ctx); n != 1 || err != nil {
		t.Fatalf("replay b1-1: %d %v", n, err)
	}
	if got := f.deadLetters("b1"); len(got) != 2 || f.messages("b1") != 1 {
		t.Errorf("after replaying b1-1: want 2 records left and 1 message, got %v and %d", got, f.messages("b1"))
	}
	if n, err := ops.ReplayDeadLetters(f.ctx, f.q, "b1", nil); n != 2 || err != nil {
		t.Errorf("replay batch b1: want 2, got %d %v", n, err)
	}
	if n, err := ops.ReplayDeadLetters(f.ctx, f.q, "", []string{"b2-2"}); n != 1 || err != nil {
		t.Errorf("replay b2-2 of any batch: want 1, got %d %v", n, err)
	}
	if n, err := ops.ReplayDeadLetters(f.ctx, f.q, "", nil); n != 2 || err != nil {
		t.Errorf("replay every batch: want 2, got %d %v", n, err)
	}
	if got := f.deadLetters(""); len(got) != 0 || f.messages("b1") != 3 || f.messages("b2") != 3 {
		t.Errorf("after replaying all: want no record and 3 messages a batch, got %v, %d, %d", got, f.messages("b1"), f.messages("b2"))
	}
	if n, err := ops.ReplayDeadLetters(f.ctx, f.q, "", nil); n != 0 || err != nil {
		t.Errorf("replay with nothing to replay: want 0, got %d %v", n, err)
	}
}

// A record that cannot be replayed (its payload cut to fit, its batch
// cancelled) is a conflict saying how many were replayed before; a bad
// batch ID is invalid; NATS closed is unavailable.
func TestReplayErrors(t *testing.T) {
	f := newFleet(t)
	f.enqueue("cut", 1)
	f.finish("cut", 1, kftype.OutcomeFailed)
	f.deadLetter("cut", "cut-0", true)
	n, err := ops.ReplayDeadLetters(f.ctx, f.q, "cut", nil)
	if n != 0 || !errors.Is(err, ops.ErrConflict) || !errors.Is(err, queue.ErrPayloadCut) ||
		!strings.Contains(err.Error(), "replayed 0 of 1 dead letters in batch cut, then: ") {
		t.Errorf("a payload cut: want a conflict after 0, got %d %v", n, err)
	}

	f.enqueue("gone", 2)
	f.finish("gone", 1, kftype.OutcomeFailed)
	f.deadLetter("gone", "gone-0", false)
	if _, err := ops.Steer(f.ctx, f.q, "gone", kftype.ActionCancel, "alice@host"); err != nil {
		t.Fatal(err)
	}
	if n, err := ops.ReplayDeadLetters(f.ctx, f.q, "gone", nil); n != 0 || !errors.Is(err, ops.ErrConflict) || !errors.Is(err, queue.ErrBatchCancelled) {
		t.Errorf("a cancelled batch: want a conflict, got %d %v", n, err)
	}
	if got := f.deadLetters(""); len(got) != 2 {
		t.Errorf("the records that cannot be replayed must stay: %v", got)
	}

	if _, err := ops.PickReplay(f.ctx, f.q, "a\nb", nil); !errors.Is(err, ops.ErrInvalid) {
		t.Errorf("a batch ID with a line break: want ErrInvalid, got %v", err)
	}
	if _, err := ops.PickReplay(f.ctx, f.closed(), "", nil); !errors.Is(err, ops.ErrUnavailable) {
		t.Errorf("NATS closed: want ErrUnavailable, got %v", err)
	}
}
