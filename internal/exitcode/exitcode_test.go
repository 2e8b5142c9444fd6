package exitcode_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// An error's exit code: the one With gave it, else its class's; an error
// without either is not known (the command line parser's, or a bug).
func TestLookup(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		code  int
		known bool
	}{
		{"nil", nil, exitcode.OK, true},
		{"with", exitcode.With(exitcode.Failed, errors.New("2 of 3 items failed")), exitcode.Failed, true},
		{"with wins over a class", exitcode.With(exitcode.Unreachable, ops.Errorf(ops.ErrInvalid, "x")), exitcode.Unreachable, true},
		{"not found", ops.Errorf(ops.ErrNotFound, "no batch x"), exitcode.Usage, true},
		{"conflict", fmt.Errorf("then: %w", &ops.StateError{Batch: "b", Action: "pause", State: "paused"}), exitcode.Usage, true},
		{"invalid", ops.Errorf(ops.ErrInvalid, "x"), exitcode.Usage, true},
		{"unavailable", ops.Errorf(ops.ErrUnavailable, "x"), exitcode.Unreachable, true},
		{"an enqueue into a cancelled batch", &enqueue.CancelledError{}, exitcode.Usage, true},
		{"an enqueue interrupted", &enqueue.PublishError{Interrupted: true, Err: errors.New("ctx")}, exitcode.Interrupted, true},
		{"an enqueue unconfirmed", &enqueue.PublishError{Err: errors.New("timeout")}, exitcode.Unreachable, true},
		{"an unknown batch of a view", fmt.Errorf("reading: %w", queue.ErrNoBatch), exitcode.Usage, true},
		{"a plain error", errors.New(`unknown flag: --nope`), exitcode.Internal, false},
	} {
		code, known := exitcode.Lookup(c.err)
		if code != c.code || known != c.known || exitcode.Of(c.err) != c.code {
			t.Errorf("%s: want %d (known %v), got %d (%v)", c.name, c.code, c.known, code, known)
		}
	}
}
