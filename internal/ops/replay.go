package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// Replay is a replay of dead letters, picked (PickReplay) before it runs
// (Run), so that a front end may ask first.
type Replay struct {
	// Batch is the batch whose records it replays ("": every batch's).
	Batch string
	// Letters are the records it replays, in the order Run replays them.
	Letters []kftype.DeadLetter

	q *queue.Queue
}

// PickReplay picks the dead letters a replay of items takes: those of
// batch ("": of any batch), of the items given, or every record (of
// batch, or of every batch) when items is empty. An item without a record
// is an ErrNotFound naming every such item, and then nothing is to be
// replayed. Its other errors: ErrInvalid (the batch ID), ErrUnavailable.
func PickReplay(ctx context.Context, q *queue.Queue, batch string, items []string) (*Replay, error) {
	if batch != "" {
		if err := queue.CheckID("batch", batch); err != nil {
			return nil, &Error{Class: ErrInvalid, Err: err}
		}
	}
	todo, missing, err := q.DeadLettersToReplay(ctx, batch, items)
	if err != nil {
		return nil, unavailable(err, "reading the dead letters")
	}
	if len(missing) > 0 {
		quoted := make([]string, len(missing))
		for i, id := range missing {
			quoted[i] = fmt.Sprintf("%q", id)
		}
		return nil, Errorf(ErrNotFound, "no dead letter for %s%s: nothing replayed", strings.Join(quoted, ", "), BatchNote(batch))
	}
	return &Replay{Batch: batch, Letters: todo, q: q}, nil
}

// Run puts each picked item back on the queue with its payload, kind,
// scope and batch and fresh attempts, then removes its record, in order;
// it stops at the first error: n of the Letters were replayed. Its
// errors: ErrConflict (a record whose payload was cut to fit, a cancelled
// batch), ErrUnavailable; each says how many were replayed before.
func (r *Replay) Run(ctx context.Context) (n int, err error) {
	for i, d := range r.Letters {
		if err := r.q.Replay(ctx, d); err != nil {
			class := ErrUnavailable
			if errors.Is(err, queue.ErrPayloadCut) || errors.Is(err, queue.ErrBatchCancelled) {
				class = ErrConflict
			}
			return i, Errorf(class, "replayed %d of %d dead letters%s, then: %w", i, len(r.Letters), BatchNote(r.Batch), err)
		}
	}
	return len(r.Letters), nil
}

// ReplayDeadLetters is PickReplay, then Run: it replays the dead letters
// of items (of batch, or of any batch; all of them when items is empty)
// and reports how many.
func ReplayDeadLetters(ctx context.Context, q *queue.Queue, batch string, items []string) (int, error) {
	r, err := PickReplay(ctx, q, batch, items)
	if err != nil {
		return 0, err
	}
	return r.Run(ctx)
}

// BatchNote says which batches a replay covers: " in batch ID", or
// " (all batches)".
func BatchNote(batch string) string {
	if batch == "" {
		return " (all batches)"
	}
	return " in batch " + batch
}
