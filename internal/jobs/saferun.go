package jobs

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
)

// PanicError is the transient error SafeRun returns for a handler that
// panicked. Error gives the panic value; Stack holds the goroutine's stack
// at the panic.
type PanicError struct {
	// Kind is the kind of the handler that panicked.
	Kind string
	// Value is the value the handler panicked with.
	Value any
	// Stack is the stack trace of the panicking goroutine.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("jobs: %s handler panicked: %v", e.Kind, e.Value)
}

func (e *PanicError) outcome() Outcome { return OutcomeTransient }

// SafeRun calls h.Run and turns a panic into a *PanicError (transient,
// carrying the panic value and the stack); Output is then empty.
func SafeRun(ctx context.Context, h Handler, item Item, cred Credential) (out Output, err error) {
	if h == nil {
		return Output{}, errors.New("jobs: nil handler")
	}
	kind := item.Kind
	defer func() {
		if v := recover(); v != nil {
			if kind == "" {
				kind = safeKind(h)
			}
			out, err = Output{}, &PanicError{Kind: kind, Value: v, Stack: debug.Stack()}
		}
	}()
	return h.Run(ctx, item, cred)
}

// safeKind returns h.Kind(), or "unknown" if that panics too.
func safeKind(h Handler) (kind string) {
	defer func() {
		if recover() != nil {
			kind = "unknown"
		}
	}()
	return h.Kind()
}
