package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
)

// An operator steers a batch (docs/operations.md, "Batches") with
// ops.Steer, as
// `producer batch pause|resume|cancel` does:
//
//	POST /api/batches/{id}/pause    no new item of the batch starts
//	POST /api/batches/{id}/resume   it goes on
//	POST /api/batches/{id}/cancel   no new item starts; those not started are
//	                                recorded as cancelled and leave the stream
//
// Each needs the admin token (403 read-only, 401 without it) and takes no
// body, or an empty JSON object; it is recorded as by
// dashboard@<client address>. It answers 200 with the batch object after
// the change, 404 for an unknown batch, 409 for a change that does not
// apply (pausing a paused batch, resuming a running one, any change of a
// cancelled batch, pausing or cancelling a done one: ops.Done).

// steerReply is the batch object after a change, with what a cancel
// drained.
type steerReply struct {
	batchview.Batch
	// Drained: items not started that the cancel recorded as cancelled
	// and deleted (cancel only).
	Drained *int `json:"drained,omitempty"`
	// Warning: the change is made, but part of it is left to the workers.
	Warning string `json:"warning,omitempty"`
}

// steerBatch serves POST /api/batches/{id}/{action}.
func (a *API) steerBatch(action string) http.HandlerFunc {
	what := map[string]string{
		kftype.ActionPause: "pausing a batch", kftype.ActionResume: "resuming a batch", kftype.ActionCancel: "cancelling a batch",
	}[action]
	return func(rw http.ResponseWriter, r *http.Request) {
		if !a.guard(rw, r, what) {
			return
		}
		if code, err := emptyBody(rw, r); err != nil {
			WriteError(rw, code, err.Error())
			return
		}
		id := r.PathValue("id")
		s, err := ops.Steer(r.Context(), a.q, id, action, "dashboard@"+remoteHost(r.RemoteAddr))
		if err != nil {
			a.fail(rw, r, "batch action refused", err)
			return
		}
		out := steerReply{}
		if action == kftype.ActionCancel {
			out.Drained = &s.Drain.Drained
			if derr := s.Drain.Err; derr != nil {
				out.Warning = a.scrub(fmt.Sprintf("the batch is cancelled; %d items not started were recorded as cancelled, "+
					"the workers record the rest within seconds (draining here stopped: %v)", s.Drain.Drained, derr))
			}
		}
		a.batches.Changed(&s.Batch)
		if out.Batch, err = a.batches.Batch(r.Context(), id, &s.Batch); err != nil {
			out.Batch = batchview.Row(id, s.Batch, true, batchview.Tally{})
		}
		a.log.Info("batch action", zap.String("batch", id), zap.String("action", action), zap.String("state", out.State),
			zap.String("remote", r.RemoteAddr), zap.Any("drained", out.Drained), zap.String("warning", out.Warning))
		WriteJSON(rw, http.StatusOK, out)
	}
}

// emptyBody refuses a body other than nothing or an empty JSON object, and
// any content type but JSON (a cross-site form cannot steer a batch, even
// before the token and the origin check refuse it).
func emptyBody(rw http.ResponseWriter, r *http.Request) (int, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return http.StatusUnsupportedMediaType, errors.New("a batch action takes no body, or an empty JSON object (Content-Type: application/json)")
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxActionBody))
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	}
	if b := bytes.TrimSpace(body); len(b) > 0 && !bytes.Equal(bytes.Join(bytes.Fields(b), nil), []byte("{}")) {
		return http.StatusBadRequest, errors.New("a batch action takes no body, or an empty JSON object")
	}
	return 0, nil
}

// remoteHost is the address of a request's client without its port.
func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
