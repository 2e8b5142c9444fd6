package api

import (
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
	"github.com/keyfleet/keyfleet/internal/spend"
)

// ndjson is the media type of an enqueue's body and of the results.
const ndjson = "application/x-ndjson"

// enqueueParams are the query parameters POST /api/batches takes.
var enqueueParams = map[string]bool{"kind": true, "batch": true, "priority": true, "weight": true, "id_field": true, "format": true,
	"deadline": true, "budget": true, "tenant": true}

// enqueueBatch: POST /api/batches. The body is enqueued exactly as
// `producer enqueue` enqueues a file (internal/enqueue): validated whole
// before anything is published, idempotent by batch and item ID.
func (a *API) enqueueBatch(rw http.ResponseWriter, r *http.Request) {
	if !a.guard(rw, r, "enqueueing") {
		return
	}
	// Only programs send this type: an HTML form cannot, and a script of
	// another site cannot without a CORS preflight, which fails.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != ndjson {
		WriteError(rw, http.StatusUnsupportedMediaType, "POST /api/batches takes a JSON Lines body (Content-Type: "+ndjson+")")
		return
	}
	body := enqueue.Source{Name: "body", Reader: http.MaxBytesReader(rw, r.Body, a.maxBody)}
	req, err := a.enqueueRequest(r.URL.Query(), body)
	if err != nil {
		a.fail(rw, r, "enqueue over HTTP refused", err)
		return
	}
	if r.ContentLength > a.maxBody {
		a.tooLarge(rw)
		return
	}
	start := time.Now()
	rep, err := enqueue.Run(r.Context(), a.q, req)
	if err != nil {
		a.enqueueFailed(rw, r, err)
		return
	}
	out := map[string]any{
		"batch": rep.Batch, "items": rep.Items, "new": rep.New, "duplicates": rep.Duplicates,
		"kind": rep.Kind, "priority": rep.Priority, "weight": rep.Weight,
	}
	if rep.RecordErr != nil {
		out["warning"] = a.scrub(fmt.Sprintf("the items are enqueued, but the batch's record (its total) was not updated: %v", rep.RecordErr))
	}
	a.log.Info("batch enqueued over HTTP", zap.String("batch", rep.Batch), zap.String("kind", rep.Kind),
		zap.Int("items", rep.Items), zap.Int("new", rep.New), zap.Int("duplicates", rep.Duplicates),
		zap.Duration("took", time.Since(start)), zap.String("remote", r.RemoteAddr))
	a.batches.Changed(nil)
	WriteJSON(rw, http.StatusOK, out)
}

// enqueueRequest reads the query parameters; their errors name them (and
// are invalid: 400).
func (a *API) enqueueRequest(v url.Values, body enqueue.Source) (enqueue.Request, error) {
	for name := range v {
		if !enqueueParams[name] {
			return enqueue.Request{}, invalidf("unknown query parameter %q (want kind, batch, priority, weight, id_field, format, deadline, budget, tenant)", name)
		}
	}
	req := enqueue.Request{
		Source: body, Kind: a.enq.DefaultKind, NamedKinds: a.enq.NamedKinds, Batch: v.Get("batch"), IDField: v.Get("id_field"),
		CostField: a.enq.CostField, CostDefault: a.enq.CostDefault, ScopeField: a.enq.ScopeField, TempDir: a.enq.TempDir,
	}
	if k := v.Get("kind"); k != "" {
		req.Kind = k
	}
	if req.Kind == "" {
		if len(a.enq.Kinds) == 0 {
			return req, invalidf("query parameter kind: required: the configuration defines no job kind (sleep needs none)")
		}
		return req, invalidf("query parameter kind: required: the configuration defines several job kinds: %s", strings.Join(a.enq.Kinds, ", "))
	}
	req.Format, req.Provider, req.Endpoint = v.Get("format"), a.enq.Providers[req.Kind], a.enq.Endpoints[req.Kind]
	req.Tenant, req.Tenants, req.BudgetedTenants = v.Get("tenant"), a.enq.Tenants, a.enq.BudgetedTenants
	if b := v.Get("budget"); b != "" {
		amount, err := spend.ParseAmount(b)
		if err != nil {
			return req, invalidf("query parameter budget: %v", err)
		}
		req.Budget = &amount
		if a.enq.Ledger != nil {
			req.Ledger = a.enq.Ledger
		}
	}
	if d := v.Get("deadline"); d != "" {
		t, err := enqueue.ParseDeadline(d, time.Now())
		if err != nil {
			return req, invalidf("query parameter deadline: %v", strings.TrimPrefix(err.Error(), "deadline: "))
		}
		req.Deadline = t
	}
	if v.Has("batch") && req.Batch == "" {
		return req, invalidf("query parameter batch: empty (leave it out for the default, body-<hash>)")
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
			return req, invalidf("query parameter %s: %v", p.name, strings.TrimPrefix(err.Error(), p.name+": "))
		}
		*p.dst = n
	}
	if err := enqueue.Check(req); err != nil {
		var re *enqueue.RequestError
		if errors.As(err, &re) {
			return req, invalidf("query parameter %s: %v", re.Field, re.Err)
		}
		return req, err
	}
	return req, nil
}

func (a *API) tooLarge(rw http.ResponseWriter) {
	WriteError(rw, http.StatusRequestEntityTooLarge, fmt.Sprintf(
		"the body is larger than %d bytes, this dashboard's bound (--max-body): nothing was enqueued; split the items into several batches", a.maxBody))
}

// problem is one bad line of a refused body.
type problem struct {
	Line      int    `json:"line"`
	ID        string `json:"id,omitempty"`
	FirstLine int    `json:"first_line,omitempty"`
	Error     string `json:"error"`
}

// enqueueFailed answers a failed enqueue with its status (Status: 400 for
// a bad body or query, 409 for a cancelled batch, 413 for a body over the
// bound, 503 when NATS failed) and, beside the error, what the failure
// says: a bad body's lines, what a partial publishing confirmed.
func (a *API) enqueueFailed(rw http.ResponseWriter, r *http.Request, err error) {
	var ie *enqueue.InputError
	var pe *enqueue.PublishError
	var ce *enqueue.CancelledError
	code := Status(err)
	if code == http.StatusRequestEntityTooLarge {
		a.tooLarge(rw)
		return
	}
	body := map[string]any{"error": a.scrub(err.Error())}
	switch {
	case errors.As(err, &ie):
		list := make([]problem, 0, len(ie.Problems))
		for _, le := range ie.Problems {
			list = append(list, problem{Line: le.Line, ID: le.ID, FirstLine: le.FirstLine, Error: le.Error()})
		}
		body["bad_lines"], body["lines"], body["problems"] = ie.Count, ie.Lines, list
	case errors.As(err, &ce):
		// The batch is cancelled: it takes no new items (and what an
		// enqueue racing the cancel published is cancelled with it).
		body["batch"], body["items"], body["new"], body["duplicates"] = ce.Report.Batch, ce.Report.Items, ce.Report.New, ce.Report.Duplicates
		body["raced"], body["cancelled_here"] = ce.Raced, ce.Drained
	case errors.As(err, &pe):
		body["batch"], body["items"], body["new"], body["duplicates"] = pe.Report.Batch, pe.Report.Items, pe.Report.New, pe.Report.Duplicates
		body["unconfirmed"], body["not_sent"] = pe.Report.Unconfirmed, pe.Report.NotSent
		body["error"] = a.scrub(err.Error() + "; sending the same body again is safe: what was stored is dropped as a duplicate")
	}
	a.log.Info("enqueue over HTTP refused", zap.Int("code", code), zap.String("remote", r.RemoteAddr), zap.Error(err))
	WriteJSON(rw, code, body)
}
