// Package exitcode maps errors to the documented process exit codes.
//
//	0  ok
//	1  items failed (enqueue --wait, results)
//	2  usage, configuration or input error
//	3  a server (NATS or Redis) is unreachable or refused us
//	4  interrupted (a second signal) or an internal error
//	130  interrupted by Ctrl-C (SIGINT) while the producer waited; the
//	     work itself goes on
//
// An error gets its code here, in one place: the code With gave it, else
// the code of its class (ops.Class: an operator action's, an enqueue's or
// a view's error), see Lookup.
package exitcode

import (
	"errors"

	"github.com/keyfleet/keyfleet/internal/ops"
)

// The exit codes.
const (
	OK          = 0
	Failed      = 1
	Usage       = 2
	Unreachable = 3
	Internal    = 4
	Interrupted = 130
)

// Error carries an exit code with an error.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// With wraps err with an exit code (nil stays nil).
func With(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Of returns the exit code for err: Lookup's, Internal for an error
// without one.
func Of(err error) int {
	code, _ := Lookup(err)
	return code
}

// Lookup returns the exit code for err and whether it has one: 0 for nil;
// the code With gave it (the outermost); else its class's: a request that
// is invalid, names what is not there or does not apply (not found,
// conflict) is Usage, a server that failed Unreachable, an interrupted
// enqueue Interrupted. An error without one (a command line the parser
// refused, a bug) gets Internal and false.
func Lookup(err error) (int, bool) {
	if err == nil {
		return OK, true
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code, true
	}
	switch ops.Class(err) {
	case ops.ErrInvalid, ops.ErrNotFound, ops.ErrConflict:
		return Usage, true
	case ops.ErrUnavailable:
		return Unreachable, true
	case ops.ErrInterrupted:
		return Interrupted, true
	}
	return Internal, false
}
