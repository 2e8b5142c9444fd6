package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// An operator steers a batch (DESIGN "Batches"):
//
//	POST /api/batches/{id}/pause    no new item of the batch starts
//	POST /api/batches/{id}/resume   it goes on
//	POST /api/batches/{id}/cancel   no new item starts; those not started are
//	                                recorded as cancelled and leave the stream
//
// Each needs the admin token (403 read-only, 401 without it) and takes no
// body, or an empty JSON object; it answers 200 with the batch object after
// the change, 404 for an unknown batch, 409 for a change that does not
// apply (pausing a paused batch, resuming a running one, any change of a
// cancelled batch, pausing or cancelling a batch whose items all have an
// outcome).

// drainTimeout bounds the drain a cancel does before it answers; the
// workers sweep what is left (every second, fleet-wide).
const drainTimeout = 10 * time.Second

// batchActionReply is the batch object after a change, with what a cancel
// drained.
type batchActionReply struct {
	Batch
	// Drained: items not started that the cancel recorded as cancelled
	// and deleted (cancel only).
	Drained *int `json:"drained,omitempty"`
	// Warning: the change is made, but part of it is left to the workers.
	Warning string `json:"warning,omitempty"`
}

// steerBatch serves POST /api/batches/{id}/{action}.
func (s *Server) steerBatch(action string) http.HandlerFunc {
	what := map[string]string{
		queue.ActionPause: "pausing a batch", queue.ActionResume: "resuming a batch", queue.ActionCancel: "cancelling a batch",
	}[action]
	return func(rw http.ResponseWriter, r *http.Request) {
		if !s.guard(rw, r, what) {
			return
		}
		if code, err := emptyBody(rw, r); err != nil {
			writeError(rw, code, err.Error())
			return
		}
		id := r.PathValue("id")
		if err := queue.CheckID("batch", id); err != nil {
			writeError(rw, http.StatusBadRequest, err.Error())
			return
		}
		out, code, err := s.applyBatchAction(r, id, action)
		if err != nil {
			s.log.Info("batch action refused", zap.String("batch", id), zap.String("action", action),
				zap.Int("code", code), zap.String("remote", r.RemoteAddr), zap.Error(err))
			writeError(rw, code, s.scrub(err.Error()))
			return
		}
		s.log.Info("batch action", zap.String("batch", id), zap.String("action", action), zap.String("state", out.State),
			zap.String("remote", r.RemoteAddr), zap.Any("drained", out.Drained), zap.String("warning", out.Warning))
		select {
		case s.poke <- struct{}{}: // show it at once
		default:
		}
		writeJSON(rw, http.StatusOK, out)
	}
}

// applyBatchAction changes the batch's record through the queue and, for a
// cancel, drains the items not started.
func (s *Server) applyBatchAction(r *http.Request, id, action string) (batchActionReply, int, error) {
	ctx := r.Context()
	rec, err := s.q.Batch(ctx, id)
	if err != nil {
		return batchActionReply{}, batchErrorCode(err), err
	}
	if action != queue.ActionResume && rec.Status() != queue.BatchCancelled {
		if b, ok := s.tally.batch(id, rec, true, time.Now().UTC()); ok && b.Complete {
			return batchActionReply{}, http.StatusConflict, fmt.Errorf(
				"batch %q is done (%d of %d items have an outcome): nothing is left to %s", id, b.Done, b.Total, action)
		}
	}
	by := "dashboard@" + remoteHost(r.RemoteAddr)
	rec, err = s.q.SetBatchState(ctx, id, action, by)
	if err != nil {
		return batchActionReply{}, batchErrorCode(err), err
	}
	s.tally.recordIfNewer(rec)
	var out batchActionReply
	if action == queue.ActionCancel {
		// The record says cancelled: no worker starts an item of it any
		// more. The drain records those not started; bounded, and not tied
		// to the client staying (the workers sweep what is left anyway).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
		drained, _, derr := s.q.DrainCancelled(dctx, id, by)
		cancel()
		out.Drained = &drained
		if derr != nil {
			out.Warning = fmt.Sprintf("the batch is cancelled; %d items not started were recorded as cancelled, "+
				"the workers record the rest within seconds (draining here stopped: %v)", drained, derr)
		}
	}
	out.Batch, _ = s.tally.batch(id, rec, true, time.Now().UTC())
	return out, 0, nil
}

// batchErrorCode maps an error of the queue's batch commands to its
// status code.
func batchErrorCode(err error) int {
	switch {
	case errors.Is(err, queue.ErrNoBatch):
		return http.StatusNotFound
	case errors.Is(err, queue.ErrBatchCancelled), errors.Is(err, queue.ErrBatchState):
		return http.StatusConflict
	}
	return http.StatusServiceUnavailable
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

// recordIfNewer keeps a record just written unless the watch delivered a
// later revision already (the page then shows the change at once).
func (t *tally) recordIfNewer(b queue.BatchInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.records[b.ID]; !ok || old.Rev < b.Rev {
		t.records[b.ID] = b
	}
}
