package ops_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Class classes the errors both front ends get: this package's (the
// outermost class wins), enqueue's, and those of the queue, the views and
// the pool; an error of none has no class.
func TestClass(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("doing it: %w", err) }
	for _, c := range []struct {
		name  string
		err   error
		class error
	}{
		{"nil", nil, nil},
		{"a plain error", errors.New("boom"), nil},
		{"ops not found", ops.Errorf(ops.ErrNotFound, "no %s", "x"), ops.ErrNotFound},
		{"ops wrapped", wrap(ops.Errorf(ops.ErrInvalid, "x")), ops.ErrInvalid},
		{"outermost wins", ops.Errorf(ops.ErrUnavailable, "then: %w", ops.Errorf(ops.ErrConflict, "x")), ops.ErrUnavailable},
		{"a state error", &ops.StateError{Batch: "b", Action: "pause", State: "paused"}, ops.ErrConflict},
		{"enqueue cancelled", &enqueue.CancelledError{}, ops.ErrConflict},
		{"enqueue bad lines", &enqueue.InputError{Source: "body"}, ops.ErrInvalid},
		{"enqueue request", &enqueue.RequestError{Field: "kind", Err: errors.New("unknown")}, ops.ErrInvalid},
		{"enqueue publish", &enqueue.PublishError{Err: errors.New("timeout")}, ops.ErrUnavailable},
		{"enqueue interrupted", &enqueue.PublishError{Interrupted: true, Err: errors.New("ctx")}, ops.ErrInterrupted},
		{"enqueue input changed", &enqueue.PublishError{Err: wrap(enqueue.ErrInput)}, ops.ErrInvalid},
		{"no batch", wrap(queue.ErrNoBatch), ops.ErrNotFound},
		{"no item", wrap(itemview.ErrNoItem), ops.ErrNotFound},
		{"no key", wrap(creds.ErrNoSuchCredential), ops.ErrNotFound},
		{"a cancelled batch", wrap(queue.ErrBatchCancelled), ops.ErrConflict},
		{"a payload cut", wrap(queue.ErrPayloadCut), ops.ErrConflict},
		{"an invalid limit", wrap(creds.ErrInvalid), ops.ErrInvalid},
	} {
		if got := ops.Class(c.err); got != c.class {
			t.Errorf("%s: want class %v, got %v", c.name, c.class, got)
		}
	}
}
