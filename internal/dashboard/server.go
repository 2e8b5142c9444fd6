package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/keyfleet/keyfleet/internal/api"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/version"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultHistory  = 10 * time.Minute
)

//go:embed assets
var assets embed.FS

// Options configure a Server.
type Options struct {
	// Queue and Pool are read every Interval; required.
	Queue *queue.Queue
	Pool  *creds.Pool
	// AdminToken enables the write actions (internal/api), each of which
	// must carry it as "Authorization: Bearer <token>", and shows the text
	// jobs and APIs wrote to whoever carries it. Empty (the default):
	// read-only. At least api.MinTokenLen bytes.
	AdminToken string
	// Interval between readings of the fleet (default DefaultInterval).
	Interval time.Duration
	// History is how far back the charts go (default DefaultHistory).
	History time.Duration
	// Sensitive are strings scrubbed from every error text the page shows
	// (server passwords); the admin token is always scrubbed.
	Sensitive []string
	// Logger (default: none).
	Logger *zap.Logger
	// Enqueue is how POST /api/batches reads items (the configuration's
	// defaults, as `producer enqueue` reads them). Its Ledger also gives
	// the batches' and the tenants' spend the page shows.
	Enqueue api.EnqueueDefaults
	// TenantSpecs are the configuration's tenants, whose budget in force
	// and spend in the current period the snapshot shows (with
	// Enqueue.Ledger), and whose live budget the API changes.
	TenantSpecs []status.TenantSpec
	// MaxEnqueueBody bounds the body of POST /api/batches (default
	// api.DefaultMaxEnqueueBody); a larger one is refused (413).
	MaxEnqueueBody int64
}

// Server is the dashboard: a collector, the page and its data, and the
// HTTP API it mounts (internal/api).
type Server struct {
	q        *queue.Queue
	pool     *creds.Pool
	api      *api.API
	ledger   *spend.Ledger
	tenants  []status.TenantSpec
	interval time.Duration
	span     time.Duration
	log      *zap.Logger
	scrubber *secret.Scrubber
	page     *template.Template
	static   http.Handler

	board *board
	tally *tally
	hist  *history
	mets  *poolMetrics
	poke  chan struct{} // asks the collector for a reading now
	done  chan struct{} // closed when Serve stops: event streams end

	// The collector's own state (one goroutine).
	seq         uint64
	last        status.Report
	haveLast    bool
	deadLetters []DeadLetter
	dlCount     uint64
	dlReadAt    time.Time
	logErr      rate.Sometimes
}

// New checks the options and builds a Server; Serve runs it.
func New(o Options) (*Server, error) {
	switch {
	case o.Queue == nil || o.Pool == nil:
		return nil, errors.New("dashboard: Options.Queue and Options.Pool are required")
	case o.Interval < 0 || o.History < 0:
		return nil, errors.New("dashboard: Interval and History cannot be negative")
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.History == 0 {
		o.History = DefaultHistory
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	page, err := template.ParseFS(assets, "assets/index.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: page template: %w", err)
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("dashboard: assets: %w", err)
	}
	sensitive := []secret.Secret{secret.New(o.AdminToken)}
	for _, s := range o.Sensitive {
		sensitive = append(sensitive, secret.New(s))
	}
	s := &Server{
		q: o.Queue, pool: o.Pool, ledger: o.Enqueue.Ledger, tenants: o.TenantSpecs, interval: o.Interval, span: o.History,
		log: o.Logger, scrubber: secret.NewScrubber(sensitive...), page: page,
		static: http.StripPrefix("/static/", http.FileServerFS(static)),
		board:  newBoard(), tally: newTally(),
		hist: newHistory(int(o.History/o.Interval) + 1),
		mets: newPoolMetrics(),
		poke: make(chan struct{}, 1), done: make(chan struct{}),
		logErr: rate.Sometimes{Interval: 30 * time.Second},
	}
	s.api, err = api.New(api.Options{
		Queue: o.Queue, Pool: o.Pool, AdminToken: o.AdminToken, Enqueue: o.Enqueue, MaxEnqueueBody: o.MaxEnqueueBody,
		Batches: apiBatches{s}, Tenants: o.TenantSpecs, Scrubber: s.scrubber, WriteTimeout: writeTimeout, Logger: o.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return s, nil
}

func (s *Server) scrub(text string) string { return s.scrubber.String(text) }

// Serve collects and serves on l until ctx ends, then shuts the server
// down (open event streams are ended) and returns nil. On a loopback
// listener only loopback Host names are answered.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		s.collect(ctx)
	}()
	srv := &http.Server{
		Handler:           s.Handler(isLoopbackAddr(l.Addr())),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       readBodyTimeout,
		IdleTimeout:       time.Minute,
		// No WriteTimeout: every response gets writeTimeout from headers,
		// and the streams (events, results) each write.
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	close(s.done)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	cancel()
	<-collected
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("dashboard: serving on %s: %w", l.Addr(), err)
	}
	return nil
}

// Bounds of a connection: a request (its body included: an enqueue's
// items) must arrive within readBodyTimeout; a response, or each write of
// a stream, must go out within writeTimeout. Variables for the tests.
var (
	readBodyTimeout = 10 * time.Minute
	writeTimeout    = time.Minute
)

// Handler routes the dashboard: the page, its assets, its data
// (/api/status, /api/events, /api/chart, /metrics) and the API for
// programs (internal/api). With loopbackOnly, requests naming another
// host are refused (a page elsewhere cannot reach it by DNS rebinding).
func (s *Server) Handler(loopbackOnly bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.servePage)
	mux.Handle("GET /static/", s.static)
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "ok") })
	mux.HandleFunc("GET /api/status", s.serveStatus)
	mux.HandleFunc("GET /api/events", s.serveEvents)
	mux.HandleFunc("GET /api/chart", s.serveChart)
	mux.Handle("GET /metrics", s.mets.handler())
	// The programs' API: batches, results, items, the write actions.
	s.api.Register(mux)
	// A cross-origin POST (a form on another site) is refused before any
	// handler runs; the bearer token is the second line of defence.
	csrf := http.NewCrossOriginProtection()
	h := csrf.Handler(mux)
	return s.headers(loopbackOnly, h)
}

// headers sets the security headers of every response and refuses
// foreign Host names on a loopback listener.
func (s *Server) headers(loopbackOnly bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h := rw.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if strings.HasPrefix(r.URL.Path, "/api/") {
			h.Set("Cache-Control", "no-store")
		}
		// A response has writeTimeout to go out; the streams extend it at
		// each write (a client that stops reading ends its stream).
		_ = http.NewResponseController(rw).SetWriteDeadline(time.Now().Add(writeTimeout))
		if loopbackOnly && !isLoopbackHost(r.Host) {
			api.WriteError(rw, http.StatusMisdirectedRequest, fmt.Sprintf("this dashboard listens on loopback and answers only to localhost, 127.0.0.1 or [::1], not to %q", r.Host))
			return
		}
		next.ServeHTTP(rw, r)
	})
}

func (s *Server) servePage(rw http.ResponseWriter, _ *http.Request) {
	qc := s.q.Config()
	data := struct {
		Pool, Stream, Version string
		ReadOnly              bool
	}{Pool: s.pool.Name(), Stream: qc.Stream, Version: version.Version, ReadOnly: s.api.ReadOnly()}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.page.Execute(rw, data); err != nil {
		s.log.Warn("rendering the page", zap.Error(err))
	}
}

// serveStatus answers with the latest snapshot (waiting for the first):
// in full with the admin token, else public.
func (s *Server) serveStatus(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout+time.Second)
	defer cancel()
	data, err := s.board.wait(ctx, s.readsJobText(r))
	if err != nil {
		api.WriteError(rw, http.StatusServiceUnavailable, "no reading of the fleet yet")
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	_, _ = rw.Write(data)
}

// serveChart draws one credential's chart: GET /api/chart?key=ID.
func (s *Server) serveChart(rw http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("key")
	series, ok := s.hist.series(id)
	if !ok {
		api.WriteError(rw, http.StatusNotFound, fmt.Sprintf("no credential %q in the samples", id))
		return
	}
	rw.Header().Set("Content-Type", "image/svg+xml")
	_ = writeChart(rw, series, series.span(s.span))
}

// readsJobText reports whether r may read what jobs and APIs wrote: it
// carries the admin token (a read-only dashboard shows it to nobody).
func (s *Server) readsJobText(r *http.Request) bool { return s.api.Authorized(r) }

func isLoopbackAddr(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// isLoopbackHost reports whether a Host header names this machine by a
// loopback name or address.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
