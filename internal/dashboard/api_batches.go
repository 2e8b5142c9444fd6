package dashboard

import (
	"cmp"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// The fleet's API for programs (DESIGN "Any language"):
//
//	POST /api/batches?kind=K&batch=ID&priority=N&weight=W&id_field=F&format=F&deadline=D&budget=B&tenant=T
//	     body: JSON Lines (Content-Type: application/x-ndjson), admin token
//	     → 200 {"batch", "items", "new", "duplicates", "kind", "priority", "weight"}
//	GET  /api/batches/{id}          → the batch object (Batch)
//	GET  /api/batches/{id}/results?format=F  → its results as JSON Lines
//	     (jsonl, or a provider's batch output format), admin token

// DefaultMaxEnqueueBody is the default Options.MaxEnqueueBody: 256 MiB.
const DefaultMaxEnqueueBody = 256 << 20

// ndjson is the media type of an enqueue's body.
const ndjson = "application/x-ndjson"

// enqueueParams are the query parameters POST /api/batches takes.
var enqueueParams = map[string]bool{"kind": true, "batch": true, "priority": true, "weight": true, "id_field": true, "format": true,
	"deadline": true, "budget": true, "tenant": true}

// guard refuses, as every write action is refused, a request on a
// read-only dashboard (403) or without the admin token (401). It reports
// whether the request may go on.
func (s *Server) guard(rw http.ResponseWriter, r *http.Request, what string) bool {
	if s.token == "" {
		writeError(rw, http.StatusForbidden, "this dashboard is read-only: start it with --admin-token-env NAME to allow "+what)
		return false
	}
	if !s.authorized(r.Header.Get("Authorization")) {
		rw.Header().Set("WWW-Authenticate", `Bearer realm="keyfleet dashboard"`)
		writeError(rw, http.StatusUnauthorized, what+" needs the admin token: Authorization: Bearer <token>")
		return false
	}
	return true
}

// enqueueBatch: POST /api/batches. The body is enqueued exactly as
// `producer enqueue` enqueues a file (internal/enqueue): validated whole
// before anything is published, idempotent by batch and item ID.
func (s *Server) enqueueBatch(rw http.ResponseWriter, r *http.Request) {
	if !s.guard(rw, r, "enqueueing") {
		return
	}
	// Only programs send this type: an HTML form cannot, and a script of
	// another site cannot without a CORS preflight, which fails.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != ndjson {
		writeError(rw, http.StatusUnsupportedMediaType, "POST /api/batches takes a JSON Lines body (Content-Type: "+ndjson+")")
		return
	}
	body := enqueue.Source{Name: "body", Reader: http.MaxBytesReader(rw, r.Body, s.maxBody)}
	req, err := s.enqueueRequest(r.URL.Query(), body)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	if r.ContentLength > s.maxBody {
		s.tooLarge(rw)
		return
	}
	start := time.Now()
	rep, err := enqueue.Run(r.Context(), s.q, req)
	if err != nil {
		s.enqueueFailed(rw, r, rep, err)
		return
	}
	out := map[string]any{
		"batch": rep.Batch, "items": rep.Items, "new": rep.New, "duplicates": rep.Duplicates,
		"kind": rep.Kind, "priority": rep.Priority, "weight": rep.Weight,
	}
	if rep.RecordErr != nil {
		out["warning"] = s.scrub(fmt.Sprintf("the items are enqueued, but the batch's record (its total) was not updated: %v", rep.RecordErr))
	}
	s.log.Info("batch enqueued over HTTP", zap.String("batch", rep.Batch), zap.String("kind", rep.Kind),
		zap.Int("items", rep.Items), zap.Int("new", rep.New), zap.Int("duplicates", rep.Duplicates),
		zap.Duration("took", time.Since(start)), zap.String("remote", r.RemoteAddr))
	select {
	case s.poke <- struct{}{}:
	default:
	}
	writeJSON(rw, http.StatusOK, out)
}

// enqueueRequest reads the query parameters; their errors name them.
func (s *Server) enqueueRequest(v url.Values, body enqueue.Source) (enqueue.Request, error) {
	for name := range v {
		if !enqueueParams[name] {
			return enqueue.Request{}, fmt.Errorf("unknown query parameter %q (want kind, batch, priority, weight, id_field, format, deadline, budget, tenant)", name)
		}
	}
	req := enqueue.Request{
		Source: body, Kind: s.enq.DefaultKind, NamedKinds: s.enq.NamedKinds, Batch: v.Get("batch"), IDField: v.Get("id_field"),
		CostField: s.enq.CostField, CostDefault: s.enq.CostDefault, ScopeField: s.enq.ScopeField, TempDir: s.enq.TempDir,
	}
	if k := v.Get("kind"); k != "" {
		req.Kind = k
	}
	if req.Kind == "" {
		if len(s.enq.Kinds) == 0 {
			return req, errors.New("query parameter kind: required: the configuration defines no job kind (sleep needs none)")
		}
		return req, fmt.Errorf("query parameter kind: required: the configuration defines several job kinds: %s", strings.Join(s.enq.Kinds, ", "))
	}
	req.Format, req.Provider, req.Endpoint = v.Get("format"), s.enq.Providers[req.Kind], s.enq.Endpoints[req.Kind]
	req.Tenant, req.Tenants = v.Get("tenant"), s.enq.Tenants
	if b := v.Get("budget"); b != "" {
		amount, err := spend.ParseAmount(b)
		if err != nil {
			return req, fmt.Errorf("query parameter budget: %v", err)
		}
		req.Budget = &amount
		if s.enq.Ledger != nil {
			req.Ledger = s.enq.Ledger
		}
	}
	if d := v.Get("deadline"); d != "" {
		t, err := enqueue.ParseDeadline(d, time.Now())
		if err != nil {
			return req, fmt.Errorf("query parameter deadline: %v", strings.TrimPrefix(err.Error(), "deadline: "))
		}
		req.Deadline = t
	}
	if v.Has("batch") && req.Batch == "" {
		return req, errors.New("query parameter batch: empty (leave it out for the default, body-<hash>)")
	}
	for _, p := range []struct {
		name  string
		dst   *int
		check func(int) error
	}{{"priority", &req.Priority, enqueue.CheckPriority}, {"weight", &req.Weight, enqueue.CheckWeight}} {
		if !v.Has(p.name) {
			continue
		}
		n, err := strconv.Atoi(v.Get(p.name))
		if err == nil {
			err = p.check(n)
		}
		if err != nil {
			return req, fmt.Errorf("query parameter %s: %v", p.name, strings.TrimPrefix(err.Error(), p.name+": "))
		}
		*p.dst = n
	}
	if err := enqueue.Check(req); err != nil {
		var re *enqueue.RequestError
		if errors.As(err, &re) {
			return req, fmt.Errorf("query parameter %s: %v", re.Field, re.Err)
		}
		return req, err
	}
	return req, nil
}

func (s *Server) tooLarge(rw http.ResponseWriter) {
	writeError(rw, http.StatusRequestEntityTooLarge, fmt.Sprintf(
		"the body is larger than %d bytes, this dashboard's bound (--max-body): nothing was enqueued; split the items into several batches", s.maxBody))
}

// problem is one bad line of a refused body.
type problem struct {
	Line      int    `json:"line"`
	ID        string `json:"id,omitempty"`
	FirstLine int    `json:"first_line,omitempty"`
	Error     string `json:"error"`
}

// enqueueFailed answers a failed enqueue: 400 for a bad body (naming its
// lines) or query, 409 for a cancelled batch, 413 for a body over the
// bound, 503 when NATS failed (with what it confirmed).
func (s *Server) enqueueFailed(rw http.ResponseWriter, r *http.Request, rep enqueue.Report, err error) {
	var ie *enqueue.InputError
	var pe *enqueue.PublishError
	var ce *enqueue.CancelledError
	var mbe *http.MaxBytesError
	code := http.StatusServiceUnavailable
	body := map[string]any{"error": s.scrub(err.Error())}
	switch {
	case errors.As(err, &mbe):
		s.tooLarge(rw)
		return
	case errors.As(err, &ie):
		code = http.StatusBadRequest
		list := make([]problem, 0, len(ie.Problems))
		for _, le := range ie.Problems {
			list = append(list, problem{Line: le.Line, ID: le.ID, FirstLine: le.FirstLine, Error: le.Error()})
		}
		body["bad_lines"], body["lines"], body["problems"] = ie.Count, ie.Lines, list
	case errors.As(err, &ce):
		// The batch is cancelled: it takes no new items (and what an
		// enqueue racing the cancel published is cancelled with it).
		code = http.StatusConflict
		body["batch"], body["items"], body["new"], body["duplicates"] = ce.Report.Batch, ce.Report.Items, ce.Report.New, ce.Report.Duplicates
		body["raced"], body["cancelled_here"] = ce.Raced, ce.Drained
	case errors.As(err, &pe):
		body["batch"], body["items"], body["new"], body["duplicates"] = pe.Report.Batch, pe.Report.Items, pe.Report.New, pe.Report.Duplicates
		body["unconfirmed"], body["not_sent"] = pe.Report.Unconfirmed, pe.Report.NotSent
		body["error"] = s.scrub(err.Error() + "; sending the same body again is safe: what was stored is dropped as a duplicate")
		if errors.Is(err, enqueue.ErrInput) {
			code = http.StatusBadRequest
		}
	case errors.Is(err, enqueue.ErrInvalid), errors.Is(err, enqueue.ErrInput):
		code = http.StatusBadRequest
	}
	s.log.Info("enqueue over HTTP refused", zap.Int("code", code), zap.String("remote", r.RemoteAddr), zap.Error(err))
	writeJSON(rw, code, body)
}

// serveBatch: GET /api/batches/{id}: the batch's record (read now, so an
// enqueue that just answered is counted) with the results counted so far.
func (s *Server) serveBatch(rw http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := queue.CheckID("batch", id); err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	rec, err := s.q.Batch(r.Context(), id)
	known := err == nil
	if err != nil && !errors.Is(err, queue.ErrNoBatch) {
		writeError(rw, http.StatusServiceUnavailable, s.scrub(err.Error()))
		return
	}
	b, ok := s.tally.batch(id, rec, known, time.Now().UTC())
	if !ok {
		writeError(rw, http.StatusNotFound, fmt.Sprintf("no batch %q (never enqueued, or its record and results are gone)", id))
		return
	}
	writeJSON(rw, http.StatusOK, b)
}

// serveResults: GET /api/batches/{id}/results: the batch's results as
// JSON Lines, streamed as `producer results --batch ID` writes them. They
// hold the jobs' outputs, so they need the admin token.
func (s *Server) serveResults(rw http.ResponseWriter, r *http.Request) {
	if !s.guard(rw, r, "reading results") {
		return
	}
	id := r.PathValue("id")
	if err := queue.CheckID("batch", id); err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	format := cmp.Or(r.URL.Query().Get("format"), provider.FormatJSONL)
	if format != provider.FormatJSONL {
		if _, err := provider.ResultLine(format, provider.ResultView{}); err != nil {
			writeError(rw, http.StatusBadRequest, "query parameter format: "+err.Error())
			return
		}
	}
	rw.Header().Set("Content-Type", ndjson)
	w := &countingWriter{w: rw}
	n, err := s.q.WriteResultsIn(r.Context(), id, format, w)
	var werr *queue.WriteError
	switch {
	case err == nil:
		s.log.Info("results read over HTTP", zap.String("batch", id), zap.Int("results", n.Results), zap.String("remote", r.RemoteAddr))
	case errors.As(err, &werr) || r.Context().Err() != nil:
		// The client went away.
	case w.n == 0:
		rw.Header().Set("Content-Type", "application/json")
		writeError(rw, http.StatusServiceUnavailable, s.scrub(fmt.Sprintf("reading the results of batch %s: %v", id, err)))
	default:
		// Part of the results went out with a 200: the client sees a cut
		// stream (the connection is closed without the end of the chunks).
		s.log.Warn("reading results failed part-way", zap.String("batch", id), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
}

// countingWriter counts the bytes written through it, and gives each
// write writeTimeout to go out: a stream of any length goes on while the
// client reads it, and ends when the client stops reading.
type countingWriter struct {
	w http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	_ = http.NewResponseController(c.w).SetWriteDeadline(time.Now().Add(writeTimeout))
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
