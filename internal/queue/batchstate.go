package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Errors of the batch commands (and ErrNoBatch).
var (
	// ErrBatchCancelled: the batch is cancelled; it takes no new items and
	// cannot be paused or resumed.
	ErrBatchCancelled = errors.New("the batch is cancelled")
	// ErrBatchState: the change does not apply to the batch as it is
	// (pausing a paused batch, resuming a running one).
	ErrBatchState = errors.New("the batch is not in a state this change applies to")
)

// MaxBatchHistory bounds the changes of state a batch's record keeps: the
// latest ones.
const MaxBatchHistory = 32

// Actions on a batch (SetBatchState).
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionCancel = "cancel"
)

// SetBatchState applies an operator's action (ActionPause, ActionResume,
// ActionCancel) to batch's record, recording who did it and when. The
// record is the state's home: it is in NATS (on disk, replicated like the
// stream), so the state outlives every process and a Redis restart; the
// workers watch the bucket and act on a change within milliseconds. It
// fails with ErrNoBatch, ErrBatchCancelled (any change of a cancelled
// batch) or ErrBatchState (pausing a paused batch, resuming a running
// one).
func (q *Queue) SetBatchState(ctx context.Context, batch, action, by string) (BatchInfo, error) {
	var to string
	switch action {
	case ActionPause:
		to = BatchPaused
	case ActionResume:
		to = BatchRunning
	case ActionCancel:
		to = BatchCancelled
	default:
		return BatchInfo{}, fmt.Errorf("queue: unknown batch action %q", action)
	}
	for range maxBatchUpdateTries {
		b, err := q.Batch(ctx, batch)
		if err != nil {
			return BatchInfo{}, err
		}
		from := b.Status()
		switch {
		case from == BatchCancelled:
			return b, fmt.Errorf("batch %q: %w", batch, ErrBatchCancelled)
		case action == ActionPause && from == BatchPaused:
			return b, fmt.Errorf("batch %q is paused already: %w", batch, ErrBatchState)
		case action == ActionResume && from == BatchRunning:
			return b, fmt.Errorf("batch %q is not paused: %w", batch, ErrBatchState)
		}
		b.State = to
		b.History = append(b.History, BatchEvent{At: time.Now().UTC(), Action: action, By: by})
		if len(b.History) > MaxBatchHistory {
			b.History = slices.Delete(b.History, 0, len(b.History)-MaxBatchHistory)
		}
		data, err := json.Marshal(b)
		if err != nil {
			return BatchInfo{}, fmt.Errorf("queue: encode batch record %q: %w", batch, err)
		}
		rev, err := q.batches.Update(ctx, kvKey(batch), data, b.Rev)
		if err == nil {
			b.Rev = rev
			return b, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return BatchInfo{}, fmt.Errorf("queue: write batch record %q: %w", batch, err)
		}
		// An enqueue or another command changed it meanwhile: again.
	}
	return BatchInfo{}, fmt.Errorf("queue: write batch record %q: gave up after %d concurrent updates", batch, maxBatchUpdateTries)
}

// OutcomeCancelled is the outcome of an item of a cancelled batch that
// never ran.
const OutcomeCancelled = "cancelled"

// PutResultIfAbsent stores r unless the item has a result already (a run
// that ended while the batch was cancelled keeps its own outcome). It
// reports whether it stored r.
func (q *Queue) PutResultIfAbsent(ctx context.Context, r Result) (bool, error) {
	data, err := r.AppendJSON(nil)
	if err != nil {
		return false, err
	}
	_, err = q.js.Publish(ctx, q.ResultSubject(r.Batch, r.Item), data, jetstream.WithExpectLastSequencePerSubject(0))
	if isWrongLastSequence(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("queue: store result of %q: %w", r.Item, err)
	}
	return true, nil
}

// CancelItem records a cancelled batch's item that never ran (its result
// says cancelled, unless it has one) and terminates its message, which
// deletes it from the stream. It reports whether it recorded the item as
// cancelled (false: the item had a result already).
func (q *Queue) CancelItem(ctx context.Context, msg jetstream.Msg, it Item, by string) (bool, error) {
	stored, err := q.PutResultIfAbsent(ctx, Result{
		Item: it.ID, Batch: it.Batch, Kind: it.Kind, Outcome: OutcomeCancelled,
		Error: "the batch was cancelled before the item ran", Worker: by, FinishedAt: time.Now().UTC(),
	})
	if err != nil {
		return false, err
	}
	return stored, Term(ctx, q.nc, msg, "batch cancelled")
}

// DrainCancelled takes every message of a cancelled batch that is not out
// with a worker, records each item as cancelled (unless it has a result)
// and deletes it, in each of its lanes (BatchLanes). It returns how many
// it recorded cancelled, and what the batch's consumers still hold
// (messages out with workers, or coming back later).
func (q *Queue) DrainCancelled(ctx context.Context, batch, by string) (drained int, unacked int, err error) {
	lanes, err := q.BatchLanes(ctx, batch)
	if err != nil {
		return 0, 0, err
	}
	for _, lane := range lanes {
		n, out, err := q.drainLane(ctx, batch, lane, by)
		drained += n
		unacked += out
		if err != nil {
			return drained, 0, err
		}
	}
	return drained, unacked, nil
}

// drainLane is DrainCancelled for one lane of batch.
func (q *Queue) drainLane(ctx context.Context, batch, lane, by string) (drained int, unacked int, err error) {
	c, err := q.LaneConsumer(ctx, lane)
	if err != nil {
		return 0, 0, err
	}
	for {
		msgs, err := c.FetchNoWait(256)
		if err != nil {
			return drained, 0, fmt.Errorf("queue: fetch from %s: %w", laneName(lane), err)
		}
		got := 0
		for msg := range msgs.Messages() {
			got++
			it, derr := DecodeItem(msg)
			if derr != nil {
				it = Item{ID: fmt.Sprintf("message-%s", msg.Subject()), Batch: batch}
			}
			stored, err := q.CancelItem(ctx, msg, it, by)
			if err != nil {
				return drained, 0, err
			}
			if stored {
				drained++
			}
		}
		if err := msgs.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return drained, 0, fmt.Errorf("queue: fetch from %s: %w", laneName(lane), err)
		}
		if got == 0 {
			break
		}
	}
	_, unacked, err = LaneHolds(ctx, c)
	return drained, unacked, err
}
