package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/spend"
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

// SetBatchState applies an operator's action (ActionPause, ActionResume,
// ActionCancel) to batch's record, recording who did it and when. The
// record is the state's home: it is in NATS (on disk, replicated like the
// stream), so the state outlives every process and a Redis restart; the
// handle's lane writer registers the change in the lane schedule, and the
// workers, which watch the bucket, act on it within milliseconds. It
// fails with ErrNoBatch, ErrBatchCancelled (any change of a cancelled
// batch) or ErrBatchState (pausing a paused batch, resuming a running
// one).
func (q *Queue) SetBatchState(ctx context.Context, batch, action, by string) (kftype.BatchInfo, error) {
	return q.setBatchState(ctx, batch, action, by, "")
}

// PauseFor pauses batch for reason (spend.ReasonBudget,
// spend.ReasonTenantBudget), recorded as PausedReason, by by, and reports
// whether this call paused it. A batch paused already, or cancelled, is
// left as it is (no error: several workers find the same budget spent).
func (q *Queue) PauseFor(ctx context.Context, batch, reason, by string) (kftype.BatchInfo, bool, error) {
	b, err := q.setBatchState(ctx, batch, kftype.ActionPause, by, reason)
	if errors.Is(err, ErrBatchState) || errors.Is(err, ErrBatchCancelled) {
		return b, false, nil
	}
	return b, err == nil, err
}

// ResumeFrom resumes batch if it is paused for reason (spend.ReasonBudget,
// spend.ReasonTenantBudget), by by, in one compare-and-set: a batch an
// operator paused, or resumed or cancelled meanwhile, is left as it is
// (ErrBatchState, ErrBatchCancelled).
func (q *Queue) ResumeFrom(ctx context.Context, batch, reason, by string) (kftype.BatchInfo, error) {
	return q.updateBatch(ctx, batch, func(b *kftype.BatchInfo) error {
		if b.State == kftype.BatchCancelled {
			return fmt.Errorf("batch %q: %w", batch, ErrBatchCancelled)
		}
		if b.State != kftype.BatchPaused || b.PausedReason != reason {
			return fmt.Errorf("batch %q is not paused for its %s: %w", batch, reason, ErrBatchState)
		}
		b.State, b.PausedReason = kftype.BatchRunning, ""
		b.History = append(b.History, kftype.BatchEvent{At: time.Now().UTC(), Action: kftype.ActionResume, By: by, Reason: reason})
		if len(b.History) > MaxBatchHistory {
			b.History = slices.Delete(b.History, 0, len(b.History)-MaxBatchHistory)
		}
		return nil
	})
}

// SetBudget changes batch's budget in its record (nil: none).
func (q *Queue) SetBudget(ctx context.Context, batch string, budget *spend.Amount) (kftype.BatchInfo, error) {
	return q.updateBatch(ctx, batch, func(b *kftype.BatchInfo) error {
		if b.State == kftype.BatchCancelled {
			return fmt.Errorf("batch %q: %w", batch, ErrBatchCancelled)
		}
		b.Budget = budget
		return nil
	})
}

// updateBatch applies change to batch's record with a compare-and-set,
// again while another writer (an enqueue, another command) got there
// first. An error of change ends it, with the record as read.
func (q *Queue) updateBatch(ctx context.Context, batch string, change func(*kftype.BatchInfo) error) (kftype.BatchInfo, error) {
	return q.writeBatch(ctx, batch, nil, change)
}

// writeBatch is updateBatch that, when fresh is not nil and batch has no
// record, applies change to fresh() (Rev 0) and creates the record.
func (q *Queue) writeBatch(ctx context.Context, batch string, fresh func() kftype.BatchInfo, change func(*kftype.BatchInfo) error) (kftype.BatchInfo, error) {
	for range maxBatchUpdateTries {
		b, err := q.Batch(ctx, batch)
		if fresh != nil && errors.Is(err, ErrNoBatch) {
			b, err = fresh(), nil
		}
		if err != nil {
			return kftype.BatchInfo{}, err
		}
		if err := change(&b); err != nil {
			return b, err
		}
		data, err := json.Marshal(b)
		if err != nil {
			return kftype.BatchInfo{}, fmt.Errorf("queue: encode batch record %q: %w", batch, err)
		}
		var rev uint64
		if b.Rev == 0 {
			rev, err = q.batches.Create(ctx, kvKey(batch), data)
		} else {
			rev, err = q.batches.Update(ctx, kvKey(batch), data, b.Rev)
		}
		if err == nil {
			b.Rev = rev
			q.wroteBatch(ctx, b)
			return b, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return kftype.BatchInfo{}, fmt.Errorf("queue: write batch record %q: %w", batch, err)
		}
		// Another writer got there first: read it again.
	}
	return kftype.BatchInfo{}, fmt.Errorf("queue: write batch record %q: gave up after %d concurrent updates", batch, maxBatchUpdateTries)
}

func (q *Queue) setBatchState(ctx context.Context, batch, action, by, reason string) (kftype.BatchInfo, error) {
	var to kftype.BatchState
	switch action {
	case kftype.ActionPause:
		to = kftype.BatchPaused
	case kftype.ActionResume:
		to = kftype.BatchRunning
	case kftype.ActionCancel:
		to = kftype.BatchCancelled
	default:
		return kftype.BatchInfo{}, fmt.Errorf("queue: unknown batch action %q", action)
	}
	return q.updateBatch(ctx, batch, func(b *kftype.BatchInfo) error {
		switch from := b.State; {
		case from == kftype.BatchCancelled:
			return fmt.Errorf("batch %q: %w", batch, ErrBatchCancelled)
		case action == kftype.ActionPause && from == kftype.BatchPaused:
			return fmt.Errorf("batch %q is paused already: %w", batch, ErrBatchState)
		case action == kftype.ActionResume && from == kftype.BatchRunning:
			return fmt.Errorf("batch %q is not paused: %w", batch, ErrBatchState)
		}
		b.State = to
		b.PausedReason = ""
		if to == kftype.BatchPaused {
			b.PausedReason = reason
		}
		b.History = append(b.History, kftype.BatchEvent{At: time.Now().UTC(), Action: action, By: by, Reason: reason})
		if len(b.History) > MaxBatchHistory {
			b.History = slices.Delete(b.History, 0, len(b.History)-MaxBatchHistory)
		}
		return nil
	})
}

// PutResultIfAbsent stores r unless the item has a result already (a run
// that ended while the batch was cancelled keeps its own outcome). It
// reports whether it stored r.
func (q *Queue) PutResultIfAbsent(ctx context.Context, r kftype.Result) (bool, error) {
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
func (q *Queue) CancelItem(ctx context.Context, msg jetstream.Msg, it kftype.Item, by string) (bool, error) {
	stored, err := q.PutResultIfAbsent(ctx, kftype.Result{
		Item: it.ID, Batch: it.Batch, Kind: it.Kind, Outcome: kftype.OutcomeCancelled,
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
// (messages out with workers, or coming back later). A lane's consumer
// deleted while it drains holds nothing: a worker deletes one only once
// it found the lane drained (its own drain of the batch, or no message of
// the lane left in the stream).
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
				it = kftype.Item{ID: fmt.Sprintf("message-%s", msg.Subject()), Batch: batch}
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
			if errors.Is(err, jetstream.ErrConsumerDeleted) {
				return drained, 0, nil
			}
			return drained, 0, fmt.Errorf("queue: fetch from %s: %w", laneName(lane), err)
		}
		if got == 0 {
			break
		}
	}
	if q.laneFetched != nil {
		q.laneFetched(lane)
	}
	_, unacked, err = LaneHolds(ctx, c)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return drained, 0, nil
	}
	return drained, unacked, err
}
