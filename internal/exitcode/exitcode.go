// Package exitcode maps errors to the documented process exit codes.
//
//	0  ok
//	1  items failed (enqueue --wait, results)
//	2  usage, configuration or input error
//	3  a server (NATS or Redis) is unreachable or refused us
//	4  interrupted (a second signal) or an internal error
//	130  interrupted by Ctrl-C (SIGINT) while the producer waited; the
//	     work itself goes on
package exitcode

import "errors"

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

// Of returns the exit code for err: 0 for nil, the wrapped code, else
// Internal.
func Of(err error) int {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}
