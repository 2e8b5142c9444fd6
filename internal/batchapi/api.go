package batchapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// api is one key's Batch API at one provider (openai.go, anthropic.go:
// each on the provider's official Go SDK).
type api interface {
	// upload stores the input as a file when the provider takes one
	// (OpenAI: purpose batch) and returns its ID; "" when it takes the
	// requests with the batch (Anthropic).
	upload(ctx context.Context, name string, input io.Reader) (string, error)
	// create creates the provider batch of p (its input file, or the
	// requests read from input), with no retry: a failure with no answer
	// may have created it all the same (docs/batch-api.md).
	create(ctx context.Context, p queue.ProviderBatch, input io.Reader) (remote, error)
	get(ctx context.Context, id string) (remote, error)
	cancel(ctx context.Context, id string) (remote, error)
	// list calls fn with the key's provider batches, the newest first,
	// until fn returns false.
	list(ctx context.Context, fn func(remote) bool) error
	// results calls fn with each line of an ended batch's results (OpenAI:
	// its output file, then its error file).
	results(ctx context.Context, r remote, fn func(line) error) error
}

// remote is a provider batch as its provider reports it.
type remote struct {
	ID string
	// Status is the provider's: OpenAI's status, Anthropic's
	// processing_status.
	Status string
	// Ended: it will change no more; its results can be read.
	Ended bool
	// Total, Completed and Failed count its requests (Failed: those that
	// got an error; Anthropic: errored, expired and canceled once ended).
	Total, Completed, Failed int64
	// OutputFileID and ErrorFileID: OpenAI's result files.
	OutputFileID, ErrorFileID string
	CreatedAt                 time.Time
	// Record is the keyfleet_record metadata (OpenAI).
	Record string
}

// Kinds of result line.
const (
	lineSucceeded = "succeeded"
	lineErrored   = "errored"
	lineExpired   = "expired"
	lineCanceled  = "canceled"
)

// line is one request's result in a provider batch.
type line struct {
	CustomID string
	Type     string // lineSucceeded, lineErrored, lineExpired, lineCanceled
	// Status is the HTTP status of the request's reply (0: it got none);
	// RequestID the API's ID of it; Body the reply (a message, a chat
	// completion, an error body).
	Status    int
	RequestID string
	Body      []byte
	// Message says what went wrong when there is no reply (an expired
	// request).
	Message string
}

// metadataKey is the metadata key naming a provider batch's record.
const metadataKey = "keyfleet_record"

// pager is an SDK's auto-paging list iterator.
type pager[T any] interface {
	Next() bool
	Current() T
	Err() error
}

// listAll calls fn with each batch it lists (as remote makes it) until fn
// returns false; what names the list in its error.
func listAll[T any](it pager[T], remote func(*T) remote, what string, fn func(remote) bool) error {
	for it.Next() {
		b := it.Current()
		if !fn(remote(&b)) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list %s: %w", what, err)
	}
	return nil
}

// readLines calls fn with each line of r (JSON Lines, as the providers
// write results); a line may be as long as the largest reply.
func readLines(r io.Reader, fn func([]byte) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	for {
		b, err := br.ReadBytes('\n')
		if b = bytes.TrimSpace(b); len(b) > 0 {
			if ferr := fn(b); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// openAIOutputLine reads a line of an OpenAI output or error file:
// {"id", "custom_id", "response": {"status_code", "request_id", "body"},
// "error": {"code", "message"}}.
func openAIOutputLine(b []byte) (line, error) {
	var v struct {
		CustomID string `json:"custom_id"`
		Response *struct {
			StatusCode int             `json:"status_code"`
			RequestID  string          `json:"request_id"`
			Body       json.RawMessage `json:"body"`
		} `json:"response"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return line{}, fmt.Errorf("an output line that is not JSON: %w", err)
	}
	l := line{CustomID: v.CustomID}
	switch {
	case v.Response != nil:
		l.Status, l.RequestID, l.Body = v.Response.StatusCode, v.Response.RequestID, v.Response.Body
		l.Type = lineErrored
		if l.Status >= 200 && l.Status <= 299 {
			l.Type = lineSucceeded
		}
	case v.Error != nil && v.Error.Code == "batch_expired":
		l.Type, l.Message = lineExpired, v.Error.Message
	case v.Error != nil && v.Error.Code == "batch_cancelled":
		l.Type, l.Message = lineCanceled, v.Error.Message
	case v.Error != nil:
		l.Type, l.Message = lineErrored, v.Error.Code+": "+v.Error.Message
	default:
		return line{}, fmt.Errorf("an output line with neither response nor error: %.200s", b)
	}
	return l, nil
}

// anthropicStatus is the HTTP status of an Anthropic error type
// (docs.anthropic.com/en/api/errors), as a real-time request of that
// error would have had.
var anthropicStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      529,
}

// anthropicResultLine reads a line of a Message Batch's results:
// {"custom_id", "result": {"type": "succeeded", "message"} | {"type":
// "errored", "error": <an error response>} | {"type": "canceled"} |
// {"type": "expired"}}.
func anthropicResultLine(b []byte) (line, error) {
	var v struct {
		CustomID string `json:"custom_id"`
		Result   struct {
			Type    string          `json:"type"`
			Message json.RawMessage `json:"message"`
			Error   json.RawMessage `json:"error"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return line{}, fmt.Errorf("a result line that is not JSON: %w", err)
	}
	l := line{CustomID: v.CustomID}
	switch v.Result.Type {
	case "succeeded":
		l.Type, l.Status, l.Body = lineSucceeded, http.StatusOK, v.Result.Message
	case "errored":
		l.Type, l.Body = lineErrored, v.Result.Error
		var e struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(l.Body, &e)
		l.RequestID, l.Message = e.RequestID, e.Error.Message
		if s, ok := anthropicStatus[e.Error.Type]; ok {
			l.Status = s
		} else {
			l.Status = http.StatusInternalServerError
		}
	case "expired":
		l.Type, l.Message = lineExpired, "the request did not run before the message batch expired"
	case "canceled":
		l.Type, l.Message = lineCanceled, "the message batch was canceled before the request ran"
	default:
		return line{}, fmt.Errorf("a result of unknown type %q", v.Result.Type)
	}
	return l, nil
}
