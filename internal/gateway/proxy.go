package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Why an attempt sent nothing back to the caller and the request goes
// to another key (the metrics' cause label).
const (
	retryRateLimited = "rate_limited"
	retryRefused     = "refused_connection"
	// retryServerError: a 5xx, kept from the caller only while the
	// request has a fallback kind left to move to.
	retryServerError = "server_error"
)

var (
	// errRetry: ModifyResponse keeps a retried reply from the caller.
	errRetry = errors.New("gateway: sent again on another key")
	// errHeaderTimeout: the API did not answer within the kind's timeout.
	errHeaderTimeout = errors.New("gateway: no reply within the kind's http.timeout")
)

// attempt is one sending of a request on one key.
type attempt struct {
	rq    *request
	lease *creds.Lease
	kind  *Kind
	// stopTimer stops the wait for the reply's headers.
	stopTimer func() bool

	sentMu sync.Mutex
	sent   time.Time // when the request was written (the transport's goroutine sets it)
	// started is when the attempt began, before its request left: a bound
	// that holds even when the reply comes before the write is reported.
	started time.Time

	status int         // the API's reply's status (0: none came)
	header http.Header // its headers
	host   string      // the host that replied, whose clock its headers' times are on
	tap    *tap        // its body as it passed
	// retry says why the request goes to another key ("" it does not),
	// err what the key's reply (or connection) said then.
	retry string
	err   error
	// transportErr ended the attempt without a reply.
	transportErr error
	// aborted is the panic that ended a reply cut short
	// (http.ErrAbortHandler), raised again once the lease is settled.
	aborted any
}

type attemptKey struct{}

func attemptOf(ctx context.Context) *attempt { return ctx.Value(attemptKey{}).(*attempt) }

func (at *attempt) sentAt() time.Time {
	at.sentMu.Lock()
	defer at.sentMu.Unlock()
	return at.sent
}

// paid reports whether the API may have billed the attempt: the request
// left and no refusal came back.
func (at *attempt) paid() bool {
	return at.retry == "" && !at.sentAt().IsZero() && (at.status == 0 || at.status >= 200 && at.status <= 299)
}

// cause says why the attempt's key sent nothing back.
func (at *attempt) cause() string {
	return fmt.Sprintf("%s: %s", at.lease.CredentialID, oneLine(at.rq.g.scrub.String(at.err.Error())))
}

// newProxy is the reverse proxy every attempt goes through.
func (g *Gateway) newProxy(t http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      t,
		FlushInterval:  -1, // a stream's events go on as they come
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		ErrorLog:       zap.NewStdLog(g.log.Named("proxy")),
		BufferPool:     bufferPool{},
	}
}

// send sends rq on lease's key of kind k through the proxy, and settles
// the lease with what came back.
func (rq *request) send(lease *creds.Lease, k *Kind) *attempt {
	g := rq.g
	at := &attempt{rq: rq, lease: lease, kind: k}
	stopRenew := g.keepLease(lease)
	ctx, cancel := context.WithCancelCause(rq.r.Context())
	timer := time.AfterFunc(k.Timeout, func() { cancel(errHeaderTimeout) })
	at.stopTimer = timer.Stop
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		at.sentMu.Lock()
		at.sent = time.Now()
		at.sentMu.Unlock()
	}})
	in := rq.r.WithContext(context.WithValue(ctx, attemptKey{}, at))
	in.Body = io.NopCloser(bytes.NewReader(rq.body))
	in.ContentLength = int64(len(rq.body))
	in.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(rq.body)), nil }
	at.started = time.Now()
	at.aborted = g.proxyOnce(rq.w, in)
	rq.upstream += time.Since(at.started)
	timer.Stop()
	cancel(nil)
	stopRenew()
	if at.retry == "" && at.status != 0 && at.transportErr == nil {
		rq.status = at.status
	}
	g.settleLease(rq, at)
	return at
}

// proxyOnce runs the proxy; a reply cut short (the caller gone, the API's
// stream broken) ends with http.ErrAbortHandler, returned to be raised
// again once the lease is settled.
func (g *Gateway) proxyOnce(w http.ResponseWriter, in *http.Request) (aborted any) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler { //nolint:errorlint // the value net/http panics with
				panic(v)
			}
			aborted = v
		}
	}()
	g.proxy.ServeHTTP(w, in)
	return nil
}

// rewrite makes the request the API gets: the caller's, byte for byte,
// at the kind's base URL (or the key's own), with the key's secret in
// the provider's auth header in place of the caller's token.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	at := attemptOf(pr.In.Context())
	k := at.kind
	base := k.BaseURL
	if u := g.urls[at.lease.CredentialID]; u != "" {
		base = u
	}
	target, err := url.Parse(provider.URL(base, at.rq.route.endpoint))
	if err != nil {
		target = &url.URL{} // the transport refuses it: a 502 naming no URL
	}
	target.RawQuery = pr.In.URL.RawQuery
	pr.Out.URL, pr.Out.Host = target, ""
	h := pr.Out.Header
	for _, name := range callerHeaders {
		h.Del(name)
	}
	// No compression: the usage is read as the reply passes.
	h.Del("Accept-Encoding")
	for name, v := range k.ProviderHeaders {
		if h.Get(name) == "" {
			h.Set(name, v)
		}
	}
	for name, v := range k.Headers {
		h.Set(name, v)
	}
	h.Set(k.AuthHeader, strings.ReplaceAll(k.AuthFormat, "{secret}", g.secrets[at.lease.CredentialID].Reveal()))
}

// modifyResponse reads what the API answered. A 429 that rate-limits
// the key (not a spent quota, not a request too large) is kept from the
// caller: the request goes to another key; so is a 5xx while the request
// has a fallback kind left to move to. Any other reply is the caller's,
// its body passing through a tap.
func (g *Gateway) modifyResponse(res *http.Response) error {
	at := attemptOf(res.Request.Context())
	at.stopTimer()
	received := time.Now()
	at.status, at.header, at.host = res.StatusCode, res.Header, res.Request.URL.Host
	g.clocks.Observe(at.host, res.Header, at.started, received)
	if res.StatusCode == http.StatusTooManyRequests {
		raw, _ := io.ReadAll(io.LimitReader(res.Body, jobs.ReplyBodyMax))
		err := jobs.ReplyError(res.StatusCode, res.Header, raw, jobs.ParseRateHeaders(res.Header, g.clocks.Now(at.host, received)), g.scrub)
		if jobs.Classify(err) == jobs.OutcomeRateLimited {
			at.retry, at.err = retryRateLimited, err
			return errRetry
		}
		res.Body = readCloser{io.MultiReader(bytes.NewReader(raw), res.Body), res.Body}
	}
	if res.StatusCode >= 500 && at.rq.canMove() {
		// A transient failure, and a fallback kind to go to: sent again
		// (another key, then the fallback kind after two in a row).
		raw, _ := io.ReadAll(io.LimitReader(res.Body, jobs.ReplyBodyMax))
		at.retry = retryServerError
		at.err = jobs.ReplyError(res.StatusCode, res.Header, raw, jobs.ParseRateHeaders(res.Header, g.clocks.Now(at.host, received)), g.scrub)
		return errRetry
	}
	at.tap = newTap(res)
	res.Body = at.tap
	return nil
}

// proxyError handles an attempt that got no reply to pass on: a retried
// 429 (nothing to write), a refused connection (sent again on another
// key), else a 502, or a 504 when the API did not answer within the
// kind's timeout (the request may have reached it: never sent again).
func (g *Gateway) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	at := attemptOf(req.Context())
	at.stopTimer()
	switch {
	case errors.Is(err, errRetry):
		return
	case refusedConnection(err):
		at.retry, at.err = retryRefused, err
		return
	}
	at.transportErr = err
	rq := at.rq
	switch {
	case errors.Is(context.Cause(req.Context()), errHeaderTimeout):
		e := badGateway(fmt.Sprintf("the API did not answer within %s (the kind's http.timeout)", at.kind.Timeout))
		e.status = http.StatusGatewayTimeout
		rq.fail(e, rq.route.anthropic)
	case rq.r.Context().Err() != nil:
		// The caller went away: nobody to answer.
	default:
		g.log.Warn("a gateway request could not reach the API", zap.String("kind", at.kind.Name),
			zap.String("credential", at.lease.CredentialID), zap.String("error", g.scrub.String(err.Error())))
		rq.fail(badGateway("the API could not be reached: "+oneLine(g.scrub.String(err.Error()))), rq.route.anthropic)
	}
}

// settleLease ends the attempt's lease with its reply judged as a batch
// item's run is (jobs.ReplyError, executor.JudgeReply): the usage's
// cost, the rate-limit headers' signals, a 429's rest, a refusal as
// evidence about the key. An attempt that sent nothing leaves the key as
// it was.
func (g *Gateway) settleLease(rq *request, at *attempt) {
	out := jobs.Output{Status: at.status, Sent: at.sentAt()}
	var rates jobs.RateReport
	if at.header != nil {
		rates = jobs.ParseRateHeaders(at.header, g.clocks.Now(at.host, time.Now()))
	}
	var runErr error
	switch {
	case at.retry != "":
		runErr = at.err
	case at.status == 0:
		runErr = fmt.Errorf("gateway: %w", at.transportErr)
	case at.status >= 200 && at.status <= 299:
		out.Signals = rates.Signals
		if rq.usage = at.tap.usage(); rq.usage != nil {
			out.Usage, out.Cost = rq.usage, max(rq.usage.Total, 1)
		}
	default:
		out.Signals = rates.Signals
		runErr = jobs.ReplyError(at.status, at.header, at.tap.buf, rates, g.scrub)
	}
	var o creds.Outcome
	if out.Sent.IsZero() && at.status == 0 {
		o.Unused = true // nothing reached the API: nothing learnt of the key
	} else {
		item := ""
		if jobs.Classify(runErr) == jobs.OutcomeRejected {
			item = rq.itemName()
		}
		v := executor.JudgeReply(runErr, out, item, g.judging)
		o = v.Lease
		for _, c := range v.Cut {
			g.log.Warn("a reply asked for a rest longer than pool.max_rest: cut to it", zap.String("asked", c))
		}
		if v.Label == "rejected" {
			g.log.Warn("the API refused a gateway request on this key: a key that refuses several different requests in a row is disabled",
				zap.String("kind", at.kind.Name), zap.String("credential", at.lease.CredentialID), zap.String("reason", v.Reason))
		}
	}
	if err := g.pool.SettleAsync(at.lease, o, func(err error) {
		if err != nil && !errors.Is(err, creds.ErrLeaseLost) {
			g.log.Warn("releasing a gateway request's lease failed; it expires by itself", zap.Error(err))
		}
	}); err != nil {
		g.log.Error("a gateway request's outcome is not valid for the pool; the lease expires by itself", zap.Error(err))
	}
}

// keepLease renews l every third of the lease TTL until stop: a
// streamed reply may last longer than the TTL. A lease lost meanwhile
// (Redis lost it) is not renewed again; the request goes on, already
// paid for.
func (g *Gateway) keepLease(l *creds.Lease) (stop func()) {
	every := g.leaseTTL / 3
	if every <= 0 {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		_, err := g.pool.Renew(ctx, l)
		cancel()
		if err != nil {
			g.log.Warn("a gateway request's lease could not be renewed", zap.String("credential", l.CredentialID), zap.Error(err))
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(every)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// refusedConnection reports whether err is the API's host refusing the
// connection: nothing was sent.
func refusedConnection(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}

// bufferPool lends the proxy its copy buffers.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
