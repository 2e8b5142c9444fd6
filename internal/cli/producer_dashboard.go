package cli

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/api"
	"github.com/keyfleet/keyfleet/internal/dashboard"
	"github.com/keyfleet/keyfleet/internal/exitcode"
)

// dashboardOptions are the flags of `producer dashboard`.
type dashboardOptions struct {
	listen   string
	tokenEnv string
	interval time.Duration
	maxBody  int64
}

// defaultDashboardListen is loopback: the dashboard is for the operator at
// this machine unless they choose otherwise.
const defaultDashboardListen = "127.0.0.1:8080"

func (p *producer) dashboardCmd() *cobra.Command {
	var o dashboardOptions
	cmd := &cobra.Command{
		Use:   "dashboard [--listen ADDR] [--admin-token-env NAME]",
		Short: "Serve a live web page of the batches, the pool, the workers and the queue",
		Long: `dashboard serves a web page for operators at / (default
http://127.0.0.1:8080/), updated live (server-sent events): each batch's
progress (done, failed, items/s, ETA), the credential pool (one card per key:
state, in flight, limits and their use, resting until when and why, disabled
reason, and a chart of the last 10 minutes: starts/s, rate-limited replies/s,
in flight), the workers (slots busy, done, failed, last seen), the consumer's
backlog and redeliveries, and the dead letters with their reasons.

Its data is at /api/status: what ` + "`producer status --json`" + ` prints, plus
"batches" (id, kind, priority, weight, state, total, done, succeeded, failed,
cancelled, rate, eta_seconds, eta), "dead_letter_list" and "dashboard".
/healthz answers "ok".

It is also the fleet's API for programs in any language:
  POST /api/batches?kind=K&batch=ID&priority=N&weight=W  (admin token;
       body: JSON Lines, Content-Type: application/x-ndjson, at most
       --max-body bytes) enqueues exactly as ` + "`producer enqueue`" + ` does and
       answers {"batch", "items", "new", "duplicates"}; a bad line: 400
       naming it, nothing enqueued; over --max-body: 413
  GET  /api/batches/{id}           the batch: id, kind, priority, weight,
       state, total, done, succeeded, failed, cancelled (404: unknown)
  GET  /api/batches/{id}/results   its results as JSON Lines, as
       ` + "`producer results`" + ` writes them (admin token)
  GET  /api/batches/{id}/items/{item}  where one item is, as
       ` + "`producer item show --json`" + ` prints it (404: unknown); its error
       and output (text a job wrote) only with the admin token
  POST /api/batches/{id}/pause, /resume, /cancel  (admin token) steer a
       batch as ` + "`producer batch pause|resume|cancel`" + ` does; answer the batch
       object after the change (409: a change that does not apply)

It is read-only unless --admin-token-env names an environment variable
holding a token (at least 16 characters); then the page offers write
actions, and each needs "Authorization: Bearer <token>" (the page asks for
the token and keeps it in memory only):
  - batches: pause, resume, cancel (it asks first)
  - credentials: enable, disable (with a reason)
  - dead letters: replay one, or all (it asks first)
The page also finds one item by its batch and ID (the search box). Writes without the right token are refused (401), writes
on a read-only dashboard too (403), and so are cross-site requests and
bodies that are not JSON. The dashboard never reads a credential's secret.

It listens on loopback by default and then answers only to loopback host
names. Listening elsewhere (--listen 0.0.0.0:8080) shows the fleet's state
to whoever can reach the port: put it behind your own authentication.
SIGINT/SIGTERM stop it (exit 0).

` + exitCodes(exitDoc{exitcode.OK, "stopped by SIGINT or SIGTERM"},
			exitDoc{exitcode.Usage, "usage or configuration error, a bad --admin-token-env, --listen address in use"}, exitServers),
		Example: `  producer dashboard --config kf.yaml
  KEYFLEET_ADMIN_TOKEN=$(openssl rand -hex 24) producer dashboard --admin-token-env KEYFLEET_ADMIN_TOKEN
  curl -s localhost:8080/api/status | jq '.batches[] | {id, done, total, eta_seconds}'
  curl -s -X POST -H "Authorization: Bearer $KEYFLEET_ADMIN_TOKEN" localhost:8080/api/batches/items-3f2a9c1b/pause`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return p.dashboard(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", defaultDashboardListen, "address to serve the dashboard on")
	f.StringVar(&o.tokenEnv, "admin-token-env", "", "environment variable holding the admin token that write actions need (default: read-only)")
	f.Int64Var(&o.maxBody, "max-body", api.DefaultMaxEnqueueBody, "largest body POST /api/batches takes, in bytes (larger: 413, nothing enqueued)")
	f.DurationVar(&o.interval, "interval", dashboard.DefaultInterval, "how often the fleet is read")
	_ = f.MarkHidden("interval")
	return cmd
}

func (p *producer) dashboard(cmd *cobra.Command, o dashboardOptions) error {
	cfg, log, err := p.setup(nil)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	token := ""
	if o.tokenEnv != "" {
		token = os.Getenv(o.tokenEnv)
		switch {
		case token == "":
			return usageErr("--admin-token-env %s: the variable is unset or empty", o.tokenEnv)
		case len(token) < api.MinTokenLen:
			return usageErr("--admin-token-env %s: the token is %d characters long, want at least %d", o.tokenEnv, len(token), api.MinTokenLen)
		}
	}
	if o.maxBody < 1 {
		return usageErr("--max-body %d: want at least 1 byte", o.maxBody)
	}
	if o.interval < 100*time.Millisecond {
		return usageErr("--interval %s: want at least 100ms", o.interval)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// POST /api/batches without kind= takes the only kind the
	// configuration defines, as enqueue does; with several, or none, it
	// is a 400 naming them.
	kind, _ := defaultKind(cfg)
	providers, endpoints := map[string]string{}, map[string]string{}
	for _, k := range configuredKinds(cfg) {
		if prov := cfg.Jobs.KindProvider(k); prov != "" {
			providers[k], endpoints[k] = prov, cfg.Jobs.KindEndpoint(k)
		}
	}
	q, pool, closeBoth, err := openQueueAndPool(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeBoth()
	ledger, closeLedger, err := openLedger(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeLedger()
	var tenants []string
	if len(cfg.Tenants) > 0 {
		tenants = slices.Sorted(maps.Keys(cfg.Tenants))
	}
	srv, err := dashboard.New(dashboard.Options{
		Queue: q, Pool: pool, AdminToken: token, Interval: o.interval,
		Sensitive: append(urlSecrets(cfg.NATS.URL), urlSecrets(cfg.Redis.URL)...),
		Logger:    log.Named("dashboard"),
		Enqueue: api.EnqueueDefaults{
			DefaultKind: kind, Kinds: configuredKinds(cfg), NamedKinds: cfg.Jobs.KindNames(), Providers: providers, Endpoints: endpoints,
			Tenants: tenants, Ledger: ledger, BudgetedTenants: cfg.BudgetedTenants(),
			CostField: cfg.Pool.Cost.Field, CostDefault: cfg.Pool.Cost.Default, ScopeField: cfg.Pool.Scope.Field,
		},
		TenantSpecs:    tenantSpecs(cfg),
		MaxEnqueueBody: o.maxBody,
	})
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return usageErr("--listen %s: %v", o.listen, err)
	}
	mode := "read-only (--admin-token-env enables write actions)"
	if token != "" {
		mode = "write actions need the admin token from $" + o.tokenEnv
	}
	fmt.Fprintf(p.stdout, "Dashboard of pool %s (stream %s) on http://%s/ — %s. Ctrl-C stops it.\n",
		cfg.Pool.Name, q.Config().Stream, l.Addr(), mode)
	if ta, ok := l.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		fmt.Fprintf(p.stderr, "warning: listening on %s, not loopback: whoever reaches it sees the fleet's state (no secrets)\n", l.Addr())
	}
	log.Info("dashboard serving", zap.Stringer("addr", l.Addr()), zap.Bool("read_only", token == ""))
	return srv.Serve(ctx, l)
}

// urlSecrets returns the passwords (and bare tokens) in server URLs, which
// the dashboard scrubs from the error texts it shows.
func urlSecrets(raw string) []string {
	var out []string
	for _, part := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.User == nil {
			continue
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw)
		} else if name := u.User.Username(); name != "" {
			out = append(out, name) // nats://TOKEN@host
		}
	}
	return out
}
