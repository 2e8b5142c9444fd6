package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// Steered is what Steer did.
type Steered struct {
	// Batch is the batch's record after the change.
	Batch kftype.BatchInfo
	// Drain is what a cancel's drain did (zero for pause and resume).
	Drain Drain
}

// StateError is a pause, resume or cancel that does not apply to the
// batch as it is (ErrConflict); nothing changed.
type StateError struct {
	Batch  string
	Action string
	// State is what the batch is: paused (pausing it again), running
	// (resuming it), cancelled (any change) or done (pausing or cancelling
	// it: see Done).
	State string
	// Cancelled is the change that cancelled it, when State is cancelled
	// and its record kept it.
	Cancelled *kftype.BatchEvent
	// View is the batch's counts when State is done.
	View batchview.Batch
}

func (e *StateError) Error() string {
	switch e.State {
	case batchview.StateCancelled:
		by := ""
		if c := e.Cancelled; c != nil {
			by = fmt.Sprintf(" (by %s at %s)", c.By, c.At.Local().Format(time.DateTime))
		}
		return fmt.Sprintf("batch %s is cancelled%s: it cannot be %s", e.Batch, by, map[string]string{
			kftype.ActionPause: "paused", kftype.ActionResume: "resumed", kftype.ActionCancel: "cancelled again"}[e.Action])
	case batchview.StateDone:
		v := e.View
		return fmt.Sprintf("batch %s is done (%d of %d items have an outcome: %d succeeded, %d failed, %d cancelled): nothing is left to %s",
			e.Batch, v.Done, v.Total, v.Succeeded, v.Failed, v.Cancelled, e.Action)
	case batchview.StatePaused:
		return fmt.Sprintf("batch %s is paused already", e.Batch)
	}
	return fmt.Sprintf("batch %s is not paused: it is %s", e.Batch, e.State)
}

func (e *StateError) Is(target error) bool { return target == ErrConflict }
func (e *StateError) class() error         { return ErrConflict }

// Steer applies action (kftype.ActionPause, ActionResume, ActionCancel) to
// batch, recorded in its record as done by by (user@host,
// dashboard@address) at the time of the change: the workers see it within
// a second. It refuses (CheckSteer) a change that does not apply; a
// change made meanwhile by someone else is refused as it then is. A
// cancel then drains the batch's items not started (Drain): the batch is
// cancelled whatever the drain did.
//
// Its errors: ErrInvalid (the batch ID, the action), ErrNotFound (no
// record), a *StateError (ErrConflict), ErrUnavailable.
func Steer(ctx context.Context, q *queue.Queue, batch, action, by string) (Steered, error) {
	rec, err := CheckSteer(ctx, q, batch, action)
	if err != nil {
		return Steered{Batch: rec}, err
	}
	rec, err = q.SetBatchState(ctx, batch, action, by)
	switch {
	case errors.Is(err, queue.ErrBatchCancelled), errors.Is(err, queue.ErrBatchState):
		// Changed meanwhile by someone else: say it as it is now (rec is
		// the record as the change found it).
		if serr := stateError(rec, action); serr != nil {
			return Steered{Batch: rec}, serr
		}
		return Steered{Batch: rec}, Errorf(ErrConflict, "%w", err)
	case errors.Is(err, queue.ErrNoBatch):
		return Steered{}, noRecord(batch)
	case err != nil:
		return Steered{}, unavailable(err, "changing batch %s", batch)
	}
	out := Steered{Batch: rec}
	if action == kftype.ActionCancel {
		out.Drain = drain(ctx, q, batch, by)
	}
	return out, nil
}

// CheckSteer is Steer's checks without the change: the record of batch
// as it is, or why action does not apply to it: a cancelled batch takes
// no change; a paused one is not paused again, a running one not resumed;
// a done one (Done) is neither paused nor cancelled. A front end that asks
// before a change calls it first (Steer checks again).
func CheckSteer(ctx context.Context, q *queue.Queue, batch, action string) (kftype.BatchInfo, error) {
	switch action {
	case kftype.ActionPause, kftype.ActionResume, kftype.ActionCancel:
	default:
		return kftype.BatchInfo{}, Errorf(ErrInvalid, "unknown batch action %q (want pause, resume or cancel)", action)
	}
	if err := queue.CheckID("batch", batch); err != nil {
		return kftype.BatchInfo{}, &Error{Class: ErrInvalid, Err: err}
	}
	rec, err := q.Batch(ctx, batch)
	switch {
	case errors.Is(err, queue.ErrNoBatch):
		return rec, noRecord(batch)
	case err != nil:
		return rec, unavailable(err, "reading batch %s", batch)
	}
	if err := stateError(rec, action); err != nil {
		return rec, err
	}
	if action == kftype.ActionResume {
		return rec, nil
	}
	view, done, err := Done(ctx, q, rec)
	if err != nil {
		return rec, err
	}
	if done {
		return rec, &StateError{Batch: batch, Action: action, State: batchview.StateDone, View: view}
	}
	return rec, nil
}

// stateError is why action does not apply to rec's state (nil: it
// applies, done or not).
func stateError(rec kftype.BatchInfo, action string) error {
	e := &StateError{Batch: rec.ID, Action: action, State: string(rec.State)}
	switch {
	case e.State == batchview.StateCancelled:
		if n := len(rec.History); n > 0 {
			e.Cancelled = &rec.History[n-1]
		}
		return e
	case action == kftype.ActionPause && e.State == batchview.StatePaused,
		action == kftype.ActionResume && e.State != batchview.StatePaused:
		return e
	}
	return nil
}

// noRecord is the error of a change of a batch without a record.
func noRecord(batch string) error {
	return Errorf(ErrNotFound, "no batch %s (never enqueued, or its record is gone)", batch)
}
