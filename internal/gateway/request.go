package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// request is one call to the gateway, from its arrival to its answer.
type request struct {
	g     *Gateway
	w     http.ResponseWriter
	r     *http.Request
	start time.Time
	route *route
	// tenant is its token's; body its request, read whole; scope its
	// model (the limits of that scope bind it); cost the provider's
	// estimate of its tokens.
	tenant string
	body   []byte
	scope  string
	cost   int64
	spend  spending
	// usage is what the API's reply said it used (nil: not said).
	usage *provider.Usage
	// status is what the caller got (0: nothing, it went away).
	status int
	// waited is the time spent waiting for keys; acquired: it got one.
	waited   time.Duration
	acquired bool
	// upstream is the time spent in the API's round trips (the proxy
	// sending the request and copying the reply back).
	upstream time.Duration
	// kind is the kind whose keys it is sent on: its route's, or a
	// fallback kind (moveOn); tried the kinds it moved from; kindSince
	// when it began to wait on kind's keys; failing its transient
	// failures in a row there; moved why it is on a fallback kind, until
	// its first start there is counted.
	kind      *Kind
	tried     []string
	kindSince time.Time
	failing   int
	moved     string
}

// serve reads the request, reserves its spend, and sends it on keys of
// its kind until one's reply is the caller's (a 429 or a refused
// connection is sent again on another key while max_wait lasts).
func (rq *request) serve() {
	g := rq.g
	if e := rq.read(); e != nil {
		rq.fail(e, rq.route.anthropic)
		return
	}
	if e := g.reserve(rq.r.Context(), rq); e != nil {
		rq.fail(e, rq.route.anthropic)
		return
	}
	paid := false
	// Deferred: a stream cut short ends this request with a panic
	// (http.ErrAbortHandler), after its lease is settled.
	defer func() { g.settleSpend(rq, paid) }()
	deadline := rq.start.Add(g.maxWait)
	rq.kind, rq.kindSince = rq.route.kind, rq.start
	var last string // why the last key sent back nothing
	for {
		lease, kind, err := g.acquire(rq, deadline)
		if err != nil {
			if e := g.noKey(rq, err, last); e != nil {
				rq.fail(e, rq.route.anthropic)
			}
			return
		}
		rq.acquired = true
		if rq.moved != "" {
			g.fallbacks.Moved(rq.route.kind.Name, kind.Name, rq.moved)
			rq.moved = ""
		}
		at := rq.send(lease, kind)
		paid = paid || at.paid()
		if at.retry == "" {
			if at.aborted != nil {
				panic(at.aborted)
			}
			return
		}
		g.metrics.Retries.WithLabelValues(kind.Name, at.retry).Inc()
		last = at.cause()
		// Failed transiently on two keys in a row (a refused
		// connection, a 5xx): the request moves to a fallback kind.
		if at.retry == retryRefused || at.retry == retryServerError {
			rq.failing++
			if rq.failing >= 2 && g.moveOn(rq, kftype.FallbackFailing) {
				g.log.Info("a gateway request failed on two keys of its kind in a row: it moves to a fallback kind",
					zap.String("kind", kind.Name), zap.String("to", rq.kind.Name), zap.String("why", last))
			}
		} else {
			rq.failing = 0
		}
		if !time.Now().Before(deadline) {
			rq.fail(g.noKey(rq, at.err, last), rq.route.anthropic)
			return
		}
		g.log.Debug("a key could not take the request: sending it on another", zap.String("kind", kind.Name),
			zap.String("credential", lease.CredentialID), zap.String("why", last))
	}
}

// read reads the request's body (at most MaxRequestBody) and what the
// pool needs of it: its scope (its model) and its estimated cost.
func (rq *request) read() *apiError {
	var buf bytes.Buffer
	if n := rq.r.ContentLength; n > 0 && n <= MaxRequestBody {
		buf.Grow(int(n))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(rq.w, rq.r.Body, MaxRequestBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		e := badRequest(fmt.Sprintf("the request body is larger than the gateway takes (%d bytes)", MaxRequestBody))
		e.status, e.anthropicType = http.StatusRequestEntityTooLarge, "request_too_large"
		return e
	case err != nil:
		return badRequest("the request body could not be read: " + err.Error())
	}
	rq.body = buf.Bytes()
	var m struct {
		Model json.RawMessage `json:"model"`
	}
	if json.Unmarshal(rq.body, &m) == nil {
		var model string
		if json.Unmarshal(m.Model, &model) == nil && creds.ValidScope(model) == nil {
			rq.scope = model
		}
	}
	rq.cost = provider.Estimate(rq.body, rq.route.endpoint)
	return nil
}

// acquire waits for a key for rq until deadline, ahead of every batch
// item (creds.Request.Interactive), first come first served among the
// gateway's requests. It is the one place that decides which kind's keys
// a request runs on: today its route's kind (a fallback kind, when its
// own cannot take it, is chosen here). Past the deadline it looks once
// more without waiting: a key free now, or when the pool expects one
// (*creds.UnavailableError).
func (g *Gateway) acquire(rq *request, deadline time.Time) (*creds.Lease, *Kind, error) {
	for {
		k := rq.kind
		req := creds.Request{Owner: g.id + "/gateway", Cost: rq.cost, Scope: rq.scope, Keys: k.Keys, Interactive: true}
		// With a fallback, it waits on the kind's own keys at most the
		// fallback's after, then moves (moveOn).
		until := deadline
		after, hasFallback := g.fallbackAfter(rq)
		if hasFallback && rq.kindSince.Add(after).Before(until) {
			until = rq.kindSince.Add(after)
		}
		t := time.Now()
		ctx, cancel := context.WithDeadline(rq.r.Context(), until)
		l, err := g.pool.AcquireWith(ctx, req)
		cancel()
		rq.waited += time.Since(t)
		if err != nil && errors.Is(err, context.DeadlineExceeded) && rq.r.Context().Err() == nil {
			if until.Before(deadline) && g.moveOn(rq, kftype.FallbackWaited) {
				continue
			}
			l, err = g.pool.TryAcquireWith(rq.r.Context(), req)
		}
		return l, k, err
	}
}

// fallbackAfter is how long rq may wait on its kind's keys before it
// moves, and whether it has a kind left to move to.
func (g *Gateway) fallbackAfter(rq *request) (time.Duration, bool) {
	if g.fallbacks == nil {
		return 0, false
	}
	after, ok := g.fallbacks.After(rq.route.kind.Name)
	if !ok {
		return 0, false
	}
	_, left := g.nextKind(rq, kftype.FallbackWaited)
	return after, left
}

// nextKind is the fallback kind rq would move to for why (ok false: none
// left that the gateway serves). A request follows its own kind's list,
// as an item does.
func (g *Gateway) nextKind(rq *request, why string) (*Kind, bool) {
	if g.fallbacks == nil {
		return nil, false
	}
	tried := append([]string{rq.route.kind.Name}, rq.tried...)
	for {
		name, ok := g.fallbacks.Next(rq.route.kind.Name, why, tried...)
		if !ok {
			return nil, false
		}
		if k := g.kinds[name]; k != nil {
			return k, true
		}
		tried = append(tried, name) // a kind the gateway does not serve
	}
}

// moveOn moves rq to its next fallback kind for why; false when none is
// left. Its first start there is counted (Fallbacks.Moved).
func (g *Gateway) moveOn(rq *request, why string) bool {
	k, ok := g.nextKind(rq, why)
	if !ok {
		return false
	}
	rq.tried = append(rq.tried, k.Name)
	rq.kind, rq.kindSince, rq.failing, rq.moved = k, time.Now(), 0, why
	return true
}

// canMove reports whether rq has a fallback kind left to fail over to:
// then a 5xx on its kind's keys is not the caller's yet.
func (rq *request) canMove() bool {
	_, ok := rq.g.nextKind(rq, kftype.FallbackFailing)
	return ok
}

// noKey is the answer to a request no key could take (nil: the caller
// went away): a 429 with Retry-After when the pool expects room (or the
// last key's 429 said when), and the cause (what the last key said, when
// one was tried). err is the acquire's error, or the last key's when
// max_wait ran out as it answered.
func (g *Gateway) noKey(rq *request, err error, last string) *apiError {
	k := rq.route.kind
	var later *creds.UnavailableError
	var never *creds.CostError
	var limited *jobs.RateLimitedError // the last key's 429, past the deadline
	switch {
	case rq.r.Context().Err() != nil:
		return nil
	case errors.As(err, &never):
		e := rateLimited(fmt.Sprintf("Request too large for the keys of kind %s: %v", k.Name, never), 0)
		e.openaiType, e.noRetry = "tokens", true
		return e
	case errors.As(err, &later), errors.As(err, &limited), errors.Is(err, creds.ErrCanceled), refusedConnection(err):
		msg := fmt.Sprintf("no key of kind %s could take the request within %s (gateway.max_wait)", k.Name, g.maxWait)
		if last != "" {
			msg += "; the last key tried: " + last
		}
		var retry time.Duration
		switch {
		case limited != nil:
			retry = max(limited.RetryAfter, time.Second)
		case later == nil:
		case later.RetryAfter >= 0:
			retry = max(later.RetryAfter, time.Millisecond)
			msg += fmt.Sprintf("; the pool expects room in %s", later.RetryAfter.Round(time.Millisecond))
		default:
			msg += "; every key is busy until a request ends"
		}
		g.log.Info("a gateway request waited max_wait for a key: 429", zap.String("kind", k.Name), zap.String("why", msg))
		return rateLimited(msg, retry)
	case errors.Is(err, creds.ErrPoolEmpty):
		return unavailable(fmt.Sprintf("kind %s has no key in the pool", k.Name))
	}
	g.log.Warn("cannot reserve a key for a gateway request (Redis)", zap.Error(err))
	return unavailable("the gateway cannot reach its key pool; try again")
}

// fail answers with an error of the gateway's own.
func (rq *request) fail(e *apiError, anthropic bool) {
	e.write(rq.w, anthropic)
	rq.status = e.status
}

// end counts the request once it is answered.
func (rq *request) end() {
	g := rq.g
	kind := ""
	if rq.route != nil && rq.route.kind != nil {
		kind = rq.route.kind.Name
	}
	status := rq.status
	if status == 0 {
		status = statusClientGone
	}
	g.metrics.Requests.WithLabelValues(kind, statusLabel(status)).Inc()
	if rq.acquired {
		g.metrics.KeyWait.Observe(rq.waited.Seconds())
	}
	if rq.upstream > 0 {
		g.metrics.AddedLatency.Observe((time.Since(rq.start) - rq.upstream).Seconds())
	}
	g.requests.Add(1)
	if status >= 400 {
		g.errors.Add(1)
	}
	g.inFlight.Add(-1)
	g.metrics.InFlight.Dec()
	g.running.Done()
	if g.answered != nil {
		g.answered()
	}
}

// statusLabel is a status as the metrics' label.
func statusLabel(code int) string { return strconv.Itoa(code) }

// statusClientGone is the status counted for a request whose caller went
// away before its answer (nginx's 499).
const statusClientGone = 499

// itemName names the request in a key's refusal streak: the same request
// refused again counts once; different ones refused in a row disable the
// key, as different items do.
func (rq *request) itemName() string {
	sum := sha256.Sum256(rq.body)
	return "gateway/" + hex.EncodeToString(sum[:8])
}

// readCloser reads from r and closes c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (rc readCloser) Close() error { return rc.c.Close() }

// oneLine keeps the first line of s.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
