package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Pool is what the gateway needs of the credential pool (*creds.Pool):
// the batches' own acquire path, with an interactive request.
type Pool interface {
	AcquireWith(ctx context.Context, r creds.Request) (*creds.Lease, error)
	TryAcquireWith(ctx context.Context, r creds.Request) (*creds.Lease, error)
	Renew(ctx context.Context, l *creds.Lease) (time.Time, error)
	SettleAsync(l *creds.Lease, o creds.Outcome, done func(error)) error
}

// Config builds a Gateway. Kinds, Tokens, Pool, Secrets and Scrub are
// required.
type Config struct {
	// ID names the worker: the leases' owners ("<id>/gateway").
	ID string
	// Kinds are the kinds served (KindsFrom); Tokens who may call.
	Kinds  []Kind
	Tokens []Token
	// MaxWait bounds a request's wait for a key (gateway.max_wait).
	MaxWait time.Duration
	// Pool is the worker's pool handle; LeaseTTL its lease TTL (a lease
	// is renewed well within it while its reply streams).
	Pool     Pool
	LeaseTTL time.Duration
	// Secrets and URLs are the keys' secrets and own base URLs, by ID;
	// Scrub removes every secret from texts.
	Secrets map[string]secret.Secret
	URLs    map[string]string
	Scrub   *secret.Scrubber
	// Judging is what judging a reply needs (pool.cooldown, pool.max_rest).
	Judging executor.ReplyJudging
	// Ledger (nil: no spend is recorded), Prices (pool.prices) and
	// Budgets (the tenants' budgets, by tenant).
	Ledger  Ledger
	Prices  spend.Prices
	Budgets map[string]spend.Budget
	// Metrics are the worker's (the gateway registers its own in their
	// registry and adds its spend to theirs). Default: a registry of its
	// own.
	Metrics *metrics.Metrics
	// Transport sends the requests. Default: a clone of
	// http.DefaultTransport that keeps up to 256 idle connections per
	// host and asks for no compression.
	Transport http.RoundTripper
	// Answered, when set, is called after each answer (the worker's
	// heartbeat announces the figures).
	Answered func()
	// Fallbacks says where a request of a kind goes when the kind's own
	// keys cannot take it (jobs.kinds.<name>.fallback; nil: nowhere):
	// fallback.Router.
	Fallbacks Fallbacks
	Logger    *zap.Logger
}

// settleTimeout bounds the I/O that ends a request (its spend).
const settleTimeout = 5 * time.Second

// MaxRequestBody is the largest request body the gateway takes; a
// larger one gets 413.
const MaxRequestBody = 32 << 20

// Gateway is an http.Handler serving the providers' APIs on the pool's
// keys. Safe for concurrent use.
type Gateway struct {
	id          string
	routes      map[string]*route
	tokens      tokens
	maxWait     time.Duration
	pool        Pool
	leaseTTL    time.Duration
	secrets     map[string]secret.Secret
	urls        map[string]string
	scrub       *secret.Scrubber
	judging     executor.ReplyJudging
	ledger      Ledger
	prices      spend.Prices
	budgets     map[string]spend.Budget
	metrics     *metrics.Gateway
	spendMetric *prometheus.CounterVec
	proxy       *httputil.ReverseProxy
	answered    func()
	fallbacks   Fallbacks
	kinds       map[string]*Kind  // every kind served, by name
	clocks      jobs.ServerClocks // reads the times replies name on their hosts' clocks
	log         *zap.Logger

	seq      atomic.Uint64 // reservation and owner names
	requests atomic.Int64
	errors   atomic.Int64
	inFlight atomic.Int64
	running  sync.WaitGroup
}

// New checks c and builds the Gateway.
func New(c Config) (*Gateway, error) {
	switch {
	case len(c.Kinds) == 0:
		return nil, errors.New("gateway: no kind to serve")
	case len(c.Tokens) == 0:
		return nil, errors.New("gateway: no token")
	case c.Pool == nil || c.Scrub == nil || c.Secrets == nil:
		return nil, errors.New("gateway: Config.Pool, Secrets and Scrub are required")
	case c.MaxWait <= 0:
		return nil, fmt.Errorf("gateway: MaxWait must be positive, got %s", c.MaxWait)
	}
	rt, err := routes(c.Kinds)
	if err != nil {
		return nil, err
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 1024, 256
		// The reply's usage is read as it passes, and a stream's events
		// go on as they come: no compression between the API and us.
		t.DisableCompression = true
		c.Transport = t
	}
	g := &Gateway{
		id: c.ID, routes: rt, tokens: newTokens(c.Tokens), maxWait: c.MaxWait, pool: c.Pool,
		leaseTTL: c.LeaseTTL, secrets: c.Secrets, urls: c.URLs, scrub: c.Scrub, judging: c.Judging,
		ledger: c.Ledger, prices: c.Prices, budgets: c.Budgets,
		metrics: c.Metrics.NewGateway(), spendMetric: c.Metrics.Spend, answered: c.Answered, log: c.Logger,
		fallbacks: c.Fallbacks, kinds: map[string]*Kind{},
	}
	for i := range c.Kinds {
		g.kinds[c.Kinds[i].Name] = &c.Kinds[i] // the routes' own *Kind
	}
	if g.judging.Scrub == nil {
		g.judging.Scrub = c.Scrub.String
	}
	g.proxy = g.newProxy(c.Transport)
	return g, nil
}

// Stats are the gateway's figures since it started, for the worker's
// heartbeat.
type Stats struct {
	// Requests answered, Errors among them (4xx and 5xx, the API's or
	// the gateway's own), InFlight being answered now.
	Requests, Errors, InFlight int64
}

// Stats reads the figures.
func (g *Gateway) Stats() Stats {
	return Stats{Requests: g.requests.Load(), Errors: g.errors.Load(), InFlight: g.inFlight.Load()}
}

// Wait returns once every request being answered has ended and settled
// its lease (the worker calls it before it closes its pool).
func (g *Gateway) Wait() { g.running.Wait() }

// ServeHTTP answers one request: see the package's doc.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	g.running.Add(1)
	g.inFlight.Add(1)
	g.metrics.InFlight.Inc()
	rq := &request{g: g, w: w, r: r, start: start}
	defer rq.end()
	rt, ok := g.routes[r.URL.Path]
	if !ok {
		rq.fail(notFound(fmt.Sprintf("Invalid URL (%s %s): the gateway serves POST /<kind>/v1/... of its kinds (docs/gateway.md)",
			r.Method, r.URL.Path)), anthropicPath(r.URL.Path))
		return
	}
	rq.route = rt
	if rt.kind == nil {
		rq.fail(notFound(fmt.Sprintf("Invalid URL (%s %s): several kinds serve it (%v); call /<kind>%s",
			r.Method, r.URL.Path, rt.ambiguous, r.URL.Path)), rt.anthropic)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		e := notFound(fmt.Sprintf("Invalid method for URL (%s %s): POST it", r.Method, r.URL.Path))
		e.status = http.StatusMethodNotAllowed
		rq.fail(e, rt.anthropic)
		return
	}
	tenant, ok, given := g.tokens.tenantOf(r)
	if !ok {
		msg := "Incorrect API key provided: the gateway takes one of its tokens (gateway.tokens) as the API key."
		if !given {
			msg = "You didn't provide an API key: the gateway takes one of its tokens (gateway.tokens) as the API key, in an Authorization header using Bearer auth or in x-api-key."
		}
		rq.fail(unauthorized(msg), rt.anthropic)
		return
	}
	rq.tenant = tenant
	rq.serve()
}

// Fallbacks says where a request goes when its kind's keys cannot take it
// (fallback.Router): After(kind) is how long it waits on the kind's own
// keys (ok: the kind has a fallback), Next the kind to try for why
// (kftype.FallbackWaited, FallbackFailing) among those not tried, Moved
// counts a start there.
type Fallbacks interface {
	After(kind string) (time.Duration, bool)
	Next(kind, why string, tried ...string) (string, bool)
	Moved(from, to, why string)
}
