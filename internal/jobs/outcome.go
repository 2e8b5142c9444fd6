package jobs

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Outcome is what a run of an item came to, as the runner acts on it.
type Outcome int

// The outcomes, from Classify.
const (
	// OutcomeOK: the item is done.
	OutcomeOK Outcome = iota
	// OutcomeRateLimited: the credential hit a rate limit; the run does not
	// count as an attempt.
	OutcomeRateLimited
	// OutcomeRejected: the credential was refused; the run does not count as
	// an attempt.
	OutcomeRejected
	// OutcomePermanent: the item failed and must not be retried.
	OutcomePermanent
	// OutcomeTransient: the run failed; retry after a backoff.
	OutcomeTransient
)

var outcomeNames = [...]string{
	OutcomeOK:          "ok",
	OutcomeRateLimited: "rate_limited",
	OutcomeRejected:    "rejected",
	OutcomePermanent:   "permanent",
	OutcomeTransient:   "transient",
}

// String returns the outcome's name: "ok", "rate_limited", "rejected",
// "permanent" or "transient".
func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// outcomer is implemented by the typed outcome errors.
type outcomer interface {
	error
	outcome() Outcome
}

// Classify maps a handler's error to its outcome: nil is OutcomeOK, a
// *RateLimitedError, *RejectedError or *PermanentError anywhere in the
// chain (errors.As; the outermost wins) gives its outcome, and any other
// error (including a cancellation or a recovered panic) is
// OutcomeTransient.
func Classify(err error) Outcome {
	if err == nil {
		return OutcomeOK
	}
	var oc outcomer
	if errors.As(err, &oc) {
		return oc.outcome()
	}
	return OutcomeTransient
}

// RateLimitedError reports that the credential hit a rate limit. Return it
// with RateLimited; check it with errors.As.
type RateLimitedError struct {
	// RetryAfter is how long the credential should rest; 0 when the job
	// did not say (the pool's cooldown then applies).
	RetryAfter time.Duration
	// Source says where RetryAfter came from ("Retry-After header",
	// "exec stderr Retry-After"); empty when no usable value was given. A
	// Retry-After of 0 or a date in the past gives RetryAfter 0 with Source
	// set.
	Source string
	// Detail describes the rate limit (status, exit code, a message).
	Detail string
	// Signals are the rate-limit figures the reply carried besides.
	Signals []Signal
}

// RateLimited returns a *RateLimitedError. retryAfter 0 means not given;
// a negative one is taken as 0.
func RateLimited(retryAfter time.Duration, source, detail string) error {
	return &RateLimitedError{RetryAfter: max(retryAfter, 0), Source: source, Detail: detail}
}

func (e *RateLimitedError) Error() string {
	var b strings.Builder
	b.WriteString("rate limited")
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s", e.RetryAfter)
		if e.Source != "" {
			fmt.Fprintf(&b, ", from %s", e.Source)
		}
		b.WriteString(")")
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

func (e *RateLimitedError) outcome() Outcome { return OutcomeRateLimited }

// RejectedError reports that the credential was refused (401, 403, 402,
// insufficient quota, exit 77). The runner records the refusal against
// the credential, with Reason, and runs the item again with another one;
// a credential that refuses creds.RefusalsToDisable different items in a
// row is disabled. Return it with Rejected.
type RejectedError struct {
	Reason string
}

// Rejected returns a *RejectedError.
func Rejected(reason string) error { return &RejectedError{Reason: reason} }

func (e *RejectedError) Error() string {
	if e.Reason == "" {
		return "credential rejected"
	}
	return "credential rejected: " + e.Reason
}

func (e *RejectedError) outcome() Outcome { return OutcomeRejected }

// PermanentError reports a failure that no retry can fix (a bad item, any
// 4xx other than the credential ones, exit 65). Return it with Permanent.
type PermanentError struct {
	Err error
}

// Permanent wraps err as a *PermanentError. A nil err gives a generic one.
func Permanent(err error) error { return &PermanentError{Err: err} }

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent failure"
	}
	return "permanent failure: " + e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

func (e *PermanentError) outcome() Outcome { return OutcomePermanent }
