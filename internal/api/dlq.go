package api

import (
	"net/http"

	"github.com/keyfleet/keyfleet/internal/ops"
)

// replayRequest is the body of POST /api/dlq/replay.
type replayRequest struct {
	Batch string   `json:"batch"` // "" for every batch
	Items []string `json:"items"` // none: every record (of Batch)
}

// replayDeadLetters: POST /api/dlq/replay {"batch", "items"}: puts the
// matching dead letters back on the queue with fresh attempts
// (ops.ReplayDeadLetters) and answers {"replayed": N}. An item without a
// record is a 404 naming it, and then nothing is replayed.
func (a *API) replayDeadLetters(r *http.Request) (any, error) {
	var req replayRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	n, err := ops.ReplayDeadLetters(r.Context(), a.q, req.Batch, req.Items)
	if err != nil {
		return nil, err
	}
	return map[string]int{"replayed": n}, nil
}
