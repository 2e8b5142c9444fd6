package api_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/keyfleet/keyfleet/internal/api"
	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Every error's status comes from its class; a body over its bound is a
// 413 whatever its class says.
func TestStatus(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		code int
	}{
		{"invalid", ops.Errorf(ops.ErrInvalid, "batch ID is empty"), http.StatusBadRequest},
		{"not found", ops.Errorf(ops.ErrNotFound, "no batch x"), http.StatusNotFound},
		{"a state error", &ops.StateError{Batch: "b", Action: "pause", State: "paused"}, http.StatusConflict},
		{"unavailable", ops.Errorf(ops.ErrUnavailable, "reading batch b: %w", errors.New("timeout")), http.StatusServiceUnavailable},
		{"interrupted", &enqueue.PublishError{Interrupted: true, Err: errors.New("ctx")}, http.StatusServiceUnavailable},
		{"a bad body", &enqueue.InputError{Source: "body"}, http.StatusBadRequest},
		{"a body over the bound", fmt.Errorf("%w: %w", enqueue.ErrInput, &http.MaxBytesError{Limit: 10}), http.StatusRequestEntityTooLarge},
		{"an enqueue into a cancelled batch", &enqueue.CancelledError{}, http.StatusConflict},
		{"an unknown item", fmt.Errorf("x: %w", itemview.ErrNoItem), http.StatusNotFound},
		{"an unknown key", fmt.Errorf("x: %w", creds.ErrNoSuchCredential), http.StatusNotFound},
		{"a payload cut", fmt.Errorf("x: %w", queue.ErrPayloadCut), http.StatusConflict},
		{"no class", errors.New("boom"), http.StatusInternalServerError},
	} {
		if got := api.Status(c.err); got != c.code {
			t.Errorf("%s: want %d, got %d", c.name, c.code, got)
		}
	}
}
