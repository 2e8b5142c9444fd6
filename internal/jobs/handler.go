package jobs

import (
	"context"
	"fmt"

	"github.com/keyfleet/keyfleet/internal/check"
)

// Handler runs items of one kind.
//
// Run runs item with cred and reports the outcome by its error (see the
// package documentation and Classify). It must return promptly once ctx is
// done; the error then wraps context.Cause(ctx). Handlers are called
// concurrently and must be safe for concurrent use. Neither the returned
// Output nor the error may contain the credential's secret by the
// handler's own doing.
type Handler interface {
	// Kind returns the kind name the handler is registered under.
	Kind() string
	// Run runs one item with one credential.
	Run(ctx context.Context, item Item, cred Credential) (Output, error)
}

// canceledError is the error a handler returns when ctx ended its run. It
// wraps ctx.Err() and, when it differs, context.Cause(ctx), so both
// errors.Is(err, context.Canceled) and a custom cause can be tested.
func canceledError(prefix string, ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause != nil && cause != err {
		return fmt.Errorf("%s: %w: %w", prefix, err, cause)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// checkSettings is what a handler's constructor reports of its settings
// (after their defaults): the first of problems (its Check), or a
// negative max output; nil when they are fine.
func checkSettings(kind string, problems check.List, maxOutput int) error {
	if err := problems.AsError(kind); err != nil {
		return err
	}
	if maxOutput < 0 {
		return fmt.Errorf("%s: max output must not be negative, got %d", kind, maxOutput)
	}
	return nil
}
