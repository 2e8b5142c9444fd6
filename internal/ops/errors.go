package ops

import (
	"errors"
	"fmt"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The classes of an action's error: every error an action of this
// package returns is one of them (test with errors.Is, or take it with
// Class). A front end maps a class, not an error: the CLI to an exit code,
// the HTTP API to a status.
var (
	// ErrNotFound: the batch, dead letter, item or key named is not there.
	// Nothing changed.
	ErrNotFound = errors.New("ops: not found")
	// ErrConflict: the change does not apply to what it names as it is
	// (pausing a paused or done batch, any change of a cancelled one,
	// replaying a record that cannot be replayed). Nothing changed.
	ErrConflict = errors.New("ops: conflict")
	// ErrInvalid: the request itself is wrong (an ID, an action, a limit,
	// an amount). Nothing changed.
	ErrInvalid = errors.New("ops: invalid")
	// ErrUnavailable: a server (NATS, Redis) failed or did not answer; the
	// error says what was done before.
	ErrUnavailable = errors.New("ops: server unavailable")
	// ErrInterrupted: the caller's context ended (an enqueue interrupted);
	// the error says what was done before.
	ErrInterrupted = errors.New("ops: interrupted")
)

// Error is an error of a class: its text is Err's (the class's is not
// repeated in it), errors.Is(err, its class) holds, and it unwraps to Err
// (a server's error, when there is one, is in Err's chain).
type Error struct {
	Class error
	Err   error
}

func (e *Error) Error() string        { return e.Err.Error() }
func (e *Error) Unwrap() error        { return e.Err }
func (e *Error) Is(target error) bool { return target == e.Class }
func (e *Error) class() error         { return e.Class }

// Errorf is fmt.Errorf(format, args...) as an Error of class (%w wraps as
// fmt.Errorf does).
func Errorf(class error, format string, args ...any) error {
	return &Error{Class: class, Err: fmt.Errorf(format, args...)}
}

// unavailable is err, a server's, while doing what (ErrUnavailable).
func unavailable(err error, format string, args ...any) error {
	return &Error{Class: ErrUnavailable, Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)}
}

// Class returns the class of err: one of ErrNotFound, ErrConflict,
// ErrInvalid, ErrUnavailable and ErrInterrupted, or nil for nil and for an
// error that has none (a bug, or a front end's own). It classes this
// package's errors (the outermost class in err's chain wins), those of
// internal/enqueue (a cancelled batch is a conflict, a bad line invalid),
// and those of the queue, the views and the pool that the front ends get
// without an action: an unknown batch (queue.ErrNoBatch, as
// batchview.Read returns it), item (itemview.ErrNoItem) or key is not
// found; a cancelled batch, a change that does not apply or a dead letter
// cut to fit is a conflict; a definition the pool refuses is invalid.
func Class(err error) error {
	var c interface{ class() error }
	switch {
	case err == nil:
		return nil
	case errors.As(err, &c):
		return c.class()
	case errors.Is(err, enqueue.ErrCancelled):
		return ErrConflict
	case errors.Is(err, enqueue.ErrInterrupted):
		return ErrInterrupted
	case errors.Is(err, enqueue.ErrUnreachable):
		return ErrUnavailable
	case errors.Is(err, enqueue.ErrInput), errors.Is(err, enqueue.ErrInvalid):
		return ErrInvalid
	case errors.Is(err, queue.ErrNoBatch), errors.Is(err, itemview.ErrNoItem), errors.Is(err, creds.ErrNoSuchCredential):
		return ErrNotFound
	case errors.Is(err, queue.ErrBatchCancelled), errors.Is(err, queue.ErrBatchState), errors.Is(err, queue.ErrPayloadCut):
		return ErrConflict
	case errors.Is(err, creds.ErrInvalid):
		return ErrInvalid
	}
	return nil
}
