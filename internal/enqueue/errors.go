package enqueue

import (
	"errors"
	"fmt"
	"strings"

	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// The kinds of failure; every error Run returns is one of them (test with
// errors.Is), so that a front end maps it: the CLI to an exit code, the
// HTTP API to a status.
var (
	// ErrInvalid: the request itself is wrong (kind, batch ID, ID field,
	// priority, weight). Nothing was read or enqueued. CLI exit 2, HTTP 400.
	ErrInvalid = errors.New("enqueue: invalid request")
	// ErrInput: the input is wrong (an *InputError naming its bad lines),
	// cannot be read, or changed between two readings. Nothing was
	// enqueued, unless a *PublishError says otherwise. CLI exit 2, HTTP
	// 400 (413 when the reader's error is an *http.MaxBytesError).
	ErrInput = errors.New("enqueue: bad input")
	// ErrUnreachable: NATS could not be reached or did not confirm every
	// publish (a *PublishError says what was). CLI exit 3, HTTP 503.
	ErrUnreachable = errors.New("enqueue: server unreachable")
	// ErrInterrupted: the context ended; a *PublishError says what was
	// published before. CLI exit 130.
	ErrInterrupted = errors.New("enqueue: interrupted")
	// ErrCancelled: the batch is cancelled and takes no new items (a
	// *CancelledError). Nothing was enqueued, unless the batch was
	// cancelled while the enqueue published: the error then says what
	// was published (those items are cancelled with the rest of the
	// batch). CLI exit 2, HTTP 409.
	ErrCancelled = errors.New("enqueue: the batch is cancelled")
)

// ErrNoMaxTokens is a line's problem (a jsonl.LineError's Err) under a
// budget: its request names no max_tokens (or max_completion_tokens),
// so the most its start can cost is unknown.
var ErrNoMaxTokens = errors.New("no max_tokens (the batch has a budget)")

// CancelledError is an enqueue into a cancelled batch (ErrCancelled; it
// is also a queue.ErrBatchCancelled).
type CancelledError struct {
	// Report says what was published before the cancel was seen: nothing
	// when Raced is false.
	Report Report
	// Raced: the batch was cancelled while the enqueue published. What
	// was published is cancelled with the rest of the batch: Drained of
	// its items were recorded cancelled by this enqueue; the others by
	// the cancel or the workers, or they had run already.
	Raced   bool
	Drained int
	// DrainErr: recording the published items as cancelled failed here
	// (the workers' sweeper does it within seconds).
	DrainErr error
}

func (e *CancelledError) Error() string {
	r := e.Report
	if !e.Raced {
		return fmt.Sprintf("batch %s is cancelled: it takes no new items; nothing was enqueued (enqueue into another batch ID)", r.Batch)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "batch %s was cancelled while this enqueue published: %d of its %d items were published (%d new, %d duplicates) "+
		"and are cancelled with the rest of the batch, %d of them recorded cancelled by this enqueue",
		r.Batch, r.New+r.Duplicates, r.Items, r.New, r.Duplicates, e.Drained)
	if e.DrainErr != nil {
		fmt.Fprintf(&b, " (recording the rest failed here: %v; the workers record them within seconds)", e.DrainErr)
	}
	if r.Unconfirmed > 0 {
		fmt.Fprintf(&b, "; %d were sent without a confirmation (cancelled too if the server stored them)", r.Unconfirmed)
	}
	if r.NotSent > 0 {
		fmt.Fprintf(&b, "; %d were not published", r.NotSent)
	}
	return b.String()
}

func (e *CancelledError) Unwrap() []error { return []error{ErrCancelled, queue.ErrBatchCancelled} }

// RequestError is an ErrInvalid: Field of the Request ("kind", "batch",
// "id_field", "priority", "weight") is wrong.
type RequestError struct {
	Field string
	Err   error
}

func (e *RequestError) Error() string   { return e.Field + ": " + e.Err.Error() }
func (e *RequestError) Unwrap() []error { return []error{ErrInvalid, e.Err} }
func invalid(field, format string, args ...any) error {
	return &RequestError{Field: field, Err: fmt.Errorf(format, args...)}
}

// classified is an error of one of the kinds above whose text is its
// own (the kind's text is not repeated in it).
type classified struct{ kind, err error }

func (e *classified) Error() string   { return e.err.Error() }
func (e *classified) Unwrap() []error { return []error{e.kind, e.err} }

// classify returns fmt.Errorf(format, args...) as an error of kind.
func classify(kind error, format string, args ...any) error {
	return &classified{kind: kind, err: fmt.Errorf(format, args...)}
}

// InputError lists the bad lines of an input: nothing of it was
// enqueued.
type InputError struct {
	// Source names the input ("items.jsonl", "stdin", "request body").
	Source string
	// Lines is the number of lines read; Count the number of bad lines.
	Lines, Count int
	// Problems are the first bad lines (at most Request.MaxProblems), in
	// line order. A duplicate names the line its ID was first on.
	Problems []*jsonl.LineError
	// DryRun: the request was a dry run (the message says "would be").
	DryRun bool
}

func (e *InputError) Error() string {
	what := "nothing was enqueued"
	if e.DryRun {
		what = "nothing would be enqueued"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d bad %s in %d lines: %s", e.Source, e.Count, plural(e.Count, "line", "lines"), e.Lines, what)
	if len(e.Problems) > 0 {
		fmt.Fprintf(&b, " (%s", e.Problems[0].Error())
		if e.Count > 1 {
			fmt.Fprintf(&b, "; and %d more", e.Count-1)
		}
		b.WriteString(")")
	}
	return b.String()
}

func (e *InputError) Is(target error) bool { return target == ErrInput }

// PublishError is a publishing that did not finish: it says exactly what
// the server confirmed. Publishing the same input into the same batch
// again is safe: what was stored is dropped as a duplicate.
type PublishError struct {
	// Report counts what was confirmed (New, Duplicates), sent without a
	// confirmation (Unconfirmed) and not sent (NotSent).
	Report Report
	// Interrupted: the context ended (else the server failed).
	Interrupted bool
	Err         error
}

func (e *PublishError) Error() string {
	r := e.Report
	what := "publishing to NATS failed"
	if e.Interrupted {
		what = "interrupted while publishing"
	}
	return fmt.Sprintf("%s: %s: %v", what, r.Incomplete(), e.Err)
}

func (e *PublishError) Unwrap() []error {
	kind := ErrUnreachable
	switch {
	case e.Interrupted:
		kind = ErrInterrupted
	case errors.Is(e.Err, ErrInput):
		kind = nil // the input changed under us: e.Err says so
	}
	if kind == nil {
		return []error{e.Err}
	}
	return []error{kind, e.Err}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
