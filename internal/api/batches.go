package api

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// serveBatch: GET /api/batches/{id}: the batch's object from Batches, with
// its record read now (so an enqueue that just answered is counted).
func (a *API) serveBatch(rw http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := queue.CheckID("batch", id); err != nil {
		a.fail(rw, r, "batch refused", opsInvalid(err))
		return
	}
	var known *kftype.BatchInfo
	rec, err := a.q.Batch(r.Context(), id)
	switch {
	case err == nil:
		known = &rec
	case !errors.Is(err, queue.ErrNoBatch):
		a.fail(rw, r, "reading a batch failed", unavailable(err))
		return
	}
	b, err := a.batches.Batch(r.Context(), id, known)
	if err != nil {
		if errors.Is(err, queue.ErrNoBatch) && !errors.Is(err, ops.ErrNotFound) {
			err = ops.Errorf(ops.ErrNotFound, "no batch %s (never enqueued, or its record and results are gone)", id)
		}
		a.fail(rw, r, "batch refused", err)
		return
	}
	WriteJSON(rw, http.StatusOK, b)
}

// serveResults: GET /api/batches/{id}/results: the batch's results as
// JSON Lines, streamed as `producer results --batch ID` writes them. They
// hold the jobs' outputs, so they need the admin token.
func (a *API) serveResults(rw http.ResponseWriter, r *http.Request) {
	if !a.guard(rw, r, "reading results") {
		return
	}
	id := r.PathValue("id")
	if err := queue.CheckID("batch", id); err != nil {
		a.fail(rw, r, "results refused", opsInvalid(err))
		return
	}
	format := cmp.Or(r.URL.Query().Get("format"), provider.FormatJSONL)
	if format != provider.FormatJSONL {
		if _, err := provider.ResultLine(format, provider.ResultView{}); err != nil {
			a.fail(rw, r, "results refused", invalidf("query parameter format: %v", err))
			return
		}
	}
	rw.Header().Set("Content-Type", ndjson)
	w := &countingWriter{w: rw, timeout: a.writeTimeout}
	n, err := a.q.WriteResultsIn(r.Context(), id, format, w)
	var werr *queue.WriteError
	switch {
	case err == nil:
		a.log.Info("results read over HTTP", zap.String("batch", id), zap.Int("results", n.Results), zap.String("remote", r.RemoteAddr))
	case errors.As(err, &werr) || r.Context().Err() != nil:
		// The client went away.
	case w.n == 0:
		rw.Header().Set("Content-Type", "application/json")
		a.fail(rw, r, "reading results failed", unavailable(fmt.Errorf("reading the results of batch %s: %w", id, err)))
	default:
		// Part of the results went out with a 200: the client sees a cut
		// stream (the connection is closed without the end of the chunks).
		a.log.Warn("reading results failed part-way", zap.String("batch", id), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
}

// countingWriter counts the bytes written through it, and gives each
// write timeout to go out: a stream of any length goes on while the
// client reads it, and ends when the client stops reading.
type countingWriter struct {
	w       http.ResponseWriter
	timeout time.Duration
	n       int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	_ = http.NewResponseController(c.w).SetWriteDeadline(time.Now().Add(c.timeout))
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
