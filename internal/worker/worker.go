package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/batchlanes"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/connect"
	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/fallback"
	"github.com/keyfleet/keyfleet/internal/gateway"
	"github.com/keyfleet/keyfleet/internal/jobguard"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/version"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Options configure a Worker.
type Options struct {
	// Config, validated; flags already applied.
	Config *config.Config
	// ID names the worker in logs, leases and status (default
	// <hostname>-<pid>).
	ID string
	// Logger (default: no logging).
	Logger *zap.Logger
	// Getenv resolves secret_env (default os.Getenv).
	Getenv func(string) string
	// JobGuard kills the job processes if the worker dies (see jobguard);
	// the caller starts and closes it. Nil: none.
	JobGuard *jobguard.Guard
}

// Worker is one worker process.
type Worker struct {
	cfg       *config.Config
	id        string
	log       *zap.Logger
	metrics   *metrics.Metrics
	nc        *nats.Conn
	q         *queue.Queue
	commits   *queue.Committer
	rdb       redis.UniversalClient
	pipeliner *redis.AutoPipeliner // nil where the client has none
	pool      *creds.Pool
	// ledger is the spend ledger (nil: no kind has a provider).
	ledger   *spend.Ledger
	defs     []creds.Credential
	secrets  map[string]secret.Secret
	credURLs map[string]string // a key's own base URL (provider kinds), by ID
	scrub    *secret.Scrubber
	handlers map[string]jobs.Handler
	// fallbacks are the kinds' fallbacks; it counts the moves (fallback.go).
	fallbacks *fallback.Router
	// kindKeys are the key sets of the kinds that name their keys
	// (jobs.kinds.<name>.credentials); other kinds may use every key. One
	// pool handle serves them all, batching their acquires together.
	kindKeys map[string]*creds.KeySet
	waits    *executor.ClassWaits
	probers  []kindProber    // with pool.probe_interval (probe.go)
	sched    *lanes.Schedule // which batch to pull from (pull.go)
	// lanes registers batch records' lanes: the queue handle's lane
	// writer, and the workers' recovery (lanerepair.go).
	lanes   *batchlanes.Writer
	batches *batchView
	// exec runs each delivery of an item (slot.go).
	exec *executor.Executor
	// gwTokens are the gateway's callers, gateway the gateway it serves
	// (gateway.go; nil without gateway.listen).
	gwTokens []gateway.Token
	gateway  *gatewayServer
	started  time.Time

	registerMu sync.Mutex
	busy       activityCounter
	done       activityCounter
	failed     activityCounter
	activity   chan struct{} // busy, done and failed signal their changes here (heartbeat.go)
	draining   atomic.Bool
	redisOK    atomic.Bool
	synced     atomic.Bool
	// up is set once Start has finished; until then starting says what it
	// is doing (or waiting for), and the connections are not to be read.
	up       atomic.Bool
	starting atomic.Pointer[string]
}

// New resolves secrets and builds the job handlers and metrics; it does no
// I/O, so that the health server (Serve) can answer while Start connects.
// Errors carry exit code 2 (configuration).
func New(o Options) (*Worker, error) {
	cfg := o.Config
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.ID == "" {
		host, _ := os.Hostname()
		o.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if len(cfg.Pool.Credentials) == 0 {
		return nil, exitcode.With(exitcode.Usage, fmt.Errorf("%s: pool.credentials is empty: a worker needs at least one credential", cfg.Source))
	}
	secrets, err := cfg.ResolveSecrets(o.Getenv)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	tokens, err := cfg.ResolveGatewayTokens(o.Getenv)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	w := &Worker{
		cfg:     cfg,
		id:      o.ID,
		log:     o.Logger.Named("worker").With(zap.String("worker", o.ID)),
		metrics: metrics.New(),
		secrets: secrets,
		started: time.Now(),
		batches: newBatchView(),
		waits:   executor.NewClassWaits(cfg.Worker.Concurrency),
	}
	w.activity = make(chan struct{}, 1)
	w.busy.changed, w.done.changed, w.failed.changed = w.activity, w.activity, w.activity
	w.setStarting("starting")
	all := make([]secret.Secret, 0, len(secrets))
	w.credURLs = map[string]string{}
	for _, c := range cfg.Pool.Credentials {
		all = append(all, secrets[c.ID])
		if c.URL != "" {
			w.credURLs[c.ID] = c.URL
		}
		w.defs = append(w.defs, creds.Credential{ID: c.ID, MaxConcurrent: c.MaxConcurrent, Limits: c.PoolLimits(), Groups: c.Groups,
			Account: c.Account})
	}
	for _, t := range tokens {
		w.gwTokens = append(w.gwTokens, gateway.Token{Token: t.Token, Tenant: t.Tenant})
		all = append(all, t.Token) // a gateway token is a secret too
	}
	w.scrub = secret.NewScrubber(all...)
	if w.handlers, err = buildHandlers(cfg, w.scrub, o.JobGuard, w.handlerNote); err != nil {
		return nil, exitcode.With(exitcode.Usage, fmt.Errorf("%s: %w", cfg.Source, err))
	}
	probeCommon := jobs.Common{MaxOutput: cfg.Jobs.MaxOutput, Scrubber: w.scrub, ScrubEnv: cfg.SecretEnvNames(), Guard: o.JobGuard}
	if w.probers, err = buildProbers(cfg, probeCommon); err != nil {
		return nil, exitcode.With(exitcode.Usage, fmt.Errorf("%s: %w", cfg.Source, err))
	}
	w.metrics.Slots.Set(float64(cfg.Worker.Concurrency))
	w.fallbacks = fallback.NewRouter(cfg, w.metrics)
	return w, nil
}

// setupAttemptTimeout bounds one attempt at setting up the queue.
const setupAttemptTimeout = 30 * time.Second

// Start connects to NATS and Redis, sets up the queue and registers the
// configured credentials; Run may follow. While JetStream is not ready
// (see queue.Transient) it retries for nats.startup_timeout, logging why,
// and Ready says "waiting for JetStream: <why>". Errors carry exit codes: 2
// for configuration, 3 for unreachable servers (or a JetStream not ready
// within the bound). If ctx ends first, the error wraps its cause.
func (w *Worker) Start(ctx context.Context) error {
	cfg := w.cfg
	ids := make([]string, 0, len(w.defs))
	for _, d := range w.defs {
		ids = append(ids, d.ID)
	}
	w.setStarting("connecting to NATS")
	var err error
	w.nc, err = connect.NATS(cfg.NATS, "keyfleet-worker "+w.id, w.log, connect.NATSHooks{})
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			w.closeConns()
		}
	}()
	w.setStarting("setting up the queue")
	qcfg := queue.ConfigFrom(cfg)
	startup := queue.Startup{
		Timeout: cfg.NATS.StartupTimeout,
		Attempt: setupAttemptTimeout,
		Waiting: func(err error, next time.Duration) {
			w.setStarting("waiting for JetStream: " + err.Error())
			w.log.Warn("JetStream not ready yet: setting up the queue again",
				zap.Error(err), zap.Duration("next_in", next), zap.Duration("startup_timeout", cfg.NATS.StartupTimeout))
		},
	}
	if err := startup.Do(ctx, func(ctx context.Context) error {
		q, err := queue.Open(ctx, w.nc, qcfg)
		if err != nil {
			return err
		}
		w.q = q
		return nil
	}); err != nil {
		return exitcode.With(exitcode.Unreachable, err)
	}
	w.commits = w.q.NewCommitter(queue.CommitterOptions{
		Observe: func(n int) { w.metrics.CommitBatch.Observe(float64(n)) },
	})
	w.setStarting("connecting to Redis")
	w.rdb, err = connect.Redis(ctx, cfg.Redis, cfg.Worker.Concurrency+16, 5*time.Second)
	if err != nil {
		return err
	}
	// Scripts of concurrent slots share round trips and system calls
	// through go-redis' auto-pipeliner (where the client has one). Several
	// batches may be in flight (unordered): each caller waits for its own
	// reply, so no caller's commands are reordered.
	var scripts redis.Scripter = w.rdb
	if ap, err := w.rdb.AutoPipelineWithOptions(&redis.AutoPipelineOptions{MaxConcurrentBatches: 4, Unordered: true}); err == nil {
		scripts, w.pipeliner = ap, ap
	}
	w.pool, err = creds.New(w.rdb, cfg.Pool.Name, creds.WithLeaseTTL(cfg.Pool.LeaseTTL), creds.WithOnly(ids...),
		creds.WithScripter(scripts))
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if cfg.Jobs.HasProvider() {
		w.ledger = spend.NewLedger(scripts, cfg.Pool.Name)
	}
	w.kindKeys = map[string]*creds.KeySet{}
	for _, kind := range cfg.Jobs.KindNames() {
		keys := cfg.KindKeys(kind)
		if keys == nil {
			continue // every key
		}
		if w.kindKeys[kind], err = creds.NewKeySet(keys...); err != nil {
			return exitcode.With(exitcode.Usage, fmt.Errorf("jobs.kinds.%s: %w", kind, err))
		}
	}
	w.sched = lanes.New(w.rdb, qcfg.WithDefaults().Stream)
	if w.lanes, err = batchlanes.New(w.sched, cfg, batchlanes.OnError(func(batch string, err error) {
		w.log.Warn("a batch's record is written but not its lanes in the schedule (Redis): the lane repair registers them",
			zap.String("batch", batch), zap.Error(err))
	})); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	w.q.SetLaneWriter(w.lanes)
	w.setStarting("registering the credentials")
	rctx, cancel := context.WithTimeout(ctx, setupAttemptTimeout)
	defer cancel()
	if err := w.register(rctx); err != nil {
		if errors.Is(err, creds.ErrInvalid) {
			return exitcode.With(exitcode.Usage, err)
		}
		return exitcode.With(exitcode.Unreachable, err)
	}
	if err := w.registerTenants(rctx); err != nil {
		return exitcode.With(exitcode.Unreachable, err)
	}
	w.redisOK.Store(true)
	if w.exec, err = w.newExecutor(); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if err := w.startGateway(); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	ok = true
	w.up.Store(true)
	return nil
}

// setStarting sets what Ready says until Start has finished.
func (w *Worker) setStarting(why string) { w.starting.Store(&why) }

func buildHandlers(cfg *config.Config, scrub *secret.Scrubber, guard *jobguard.Guard, notes func(jobs.HandlerNote)) (map[string]jobs.Handler, error) {
	common := jobs.Common{MaxOutput: cfg.Jobs.MaxOutput, Scrubber: scrub, ScrubEnv: cfg.SecretEnvNames(), Guard: guard, Notes: notes}
	hs := map[string]jobs.Handler{}
	names := make([]string, 0, len(jobs.Kinds())+len(cfg.Jobs.Kinds))
	for _, k := range jobs.Kinds() {
		names = append(names, k.Name)
	}
	for _, name := range append(names, cfg.Jobs.KindNames()...) {
		base, sec, ok := cfg.Jobs.KindSection(name)
		if !ok {
			continue // a kind with settings runs only where they are configured
		}
		h, err := base.New(sec, common)
		if err != nil {
			if _, named := cfg.Jobs.Kinds[name]; named {
				return nil, fmt.Errorf("jobs.kinds.%s.%s: %w", name, base.Name, err)
			}
			return nil, fmt.Errorf("jobs.%s: %w", name, err)
		}
		hs[name] = h
	}
	return hs, nil
}

// keysFor is the key set the items of kind may use: nil (every key of
// the worker's) unless the kind names its keys.
func (w *Worker) keysFor(kind string) *creds.KeySet { return w.kindKeys[kind] }

// kindKeyCount is how many keys items of kind may use: its own key set's,
// else every key of the worker's.
func (w *Worker) kindKeyCount(kind string) int {
	if ids := w.cfg.KindKeys(kind); ids != nil {
		return len(ids)
	}
	return len(w.defs)
}

// register syncs the configured credentials into the pool (at start, and
// again when Redis has lost its state).
func (w *Worker) register(ctx context.Context) error {
	w.registerMu.Lock()
	defer w.registerMu.Unlock()
	if err := w.pool.Define(ctx, creds.Definitions{Accounts: w.cfg.Pool.PoolAccounts(), Credentials: w.defs,
		Reserve: w.cfg.Gateway.Reserve}); err != nil {
		return err
	}
	w.synced.Store(true)
	return nil
}

// ID is the worker's name.
func (w *Worker) ID() string { return w.id }

// Metrics are the worker's Prometheus metrics.
func (w *Worker) Metrics() *metrics.Metrics { return w.metrics }

// Ready reports whether the worker can take work: started, connected to
// NATS and Redis, pool synced, not shutting down; else why not.
func (w *Worker) Ready() (bool, string) {
	switch {
	case !w.up.Load():
		return false, *w.starting.Load()
	case w.draining.Load():
		return false, "shutting down"
	case !w.nc.IsConnected():
		return false, "NATS not connected"
	case !w.redisOK.Load():
		return false, "Redis unreachable"
	case !w.synced.Load():
		return false, "credential pool not synced"
	}
	return true, "ready"
}

// Run works until ctx ends (the first SIGINT/SIGTERM), then shuts down
// gracefully: stop pulling; let running items finish within
// worker.shutdown_grace; cancel the rest and nak them for immediate
// redelivery; release every lease; flush acks; close. It returns nil after
// a clean shutdown.
func (w *Worker) Run(ctx context.Context) error {
	pullCtx, stopPull := context.WithCancelCause(context.Background())
	runCtx, stopRun := context.WithCancelCause(context.Background())
	defer stopRun(nil)
	var slots sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	var watchers sync.WaitGroup
	watchers.Go(func() { w.watchBatches(watchCtx) })
	watchers.Go(func() { w.awaitLanes(watchCtx) })
	watchers.Go(func() { w.sweepCancelled(watchCtx) })
	watchers.Go(func() { w.runBatchAPI(watchCtx) })
	pullDone := make(chan struct{})
	go func() {
		defer close(pullDone)
		w.pull(pullCtx, runCtx, &slots)
	}()
	hbCtx, stopHB := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(hbCtx)
	}()
	probeCtx, stopProbes := context.WithCancel(context.Background())
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		w.probeLoop(probeCtx)
	}()
	w.serveGateway()
	w.log.Info("worker started",
		zap.Int("concurrency", w.cfg.Worker.Concurrency), zap.String("pool", w.cfg.Pool.Name),
		zap.Int("credentials", len(w.defs)), zap.Strings("kinds", w.kinds()), zap.String("version", version.Version))

	<-ctx.Done()
	grace := w.cfg.Worker.ShutdownGrace
	w.log.Info("shutting down: no new items; in-flight items may finish",
		zap.Int64("in_flight", w.busy.Load()), zap.Duration("grace", grace))
	w.draining.Store(true)
	w.noteActivity() // announce the draining state
	stopPull(executor.ErrDraining)
	stopProbes()
	gatewayDone := make(chan struct{})
	go func() {
		defer close(gatewayDone)
		w.stopGateway(grace)
	}()

	idle := make(chan struct{})
	go func() {
		<-pullDone
		slots.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-time.After(grace):
		w.log.Warn("shutdown grace over: cancelling running items for immediate redelivery",
			zap.Int64("in_flight", w.busy.Load()))
		stopRun(executor.ErrGraceOver)
		select {
		case <-idle:
		case <-time.After(15 * time.Second):
			w.log.Error("items did not stop within 15s of cancellation; exiting anyway (their messages come back after the ack wait)")
		}
	}
	// The runs have ended: persistent handler processes end too.
	w.closeHandlers()
	<-gatewayDone
	stopWatch()
	watchers.Wait()
	stopHB()
	<-hbDone
	<-probesDone
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := w.q.Withdraw(wctx, w.id); err != nil {
		w.log.Debug("withdraw from registry", zap.Error(err))
	}
	cancel()
	if err := w.nc.FlushTimeout(5 * time.Second); err != nil {
		w.log.Warn("flushing NATS before exit", zap.Error(err))
	}
	w.closeConns()
	w.log.Info("worker stopped", zap.Int64("done", w.done.Load()), zap.Int64("failed", w.failed.Load()))
	return nil
}

func (w *Worker) closeConns() {
	if w.gateway != nil {
		_ = w.gateway.l.Close() // bound but never served when Run did not run
	}
	if w.exec != nil {
		w.exec.Close()
	}
	if w.commits != nil {
		w.commits.Close()
	}
	if w.pool != nil {
		_ = w.pool.Close()
	}
	if w.pipeliner != nil {
		_ = w.pipeliner.Close()
	}
	if w.rdb != nil {
		_ = w.rdb.Close()
	}
	if w.nc != nil {
		if err := w.nc.Drain(); err != nil {
			w.nc.Close()
		}
		deadline := time.Now().Add(5 * time.Second)
		for !w.nc.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		w.nc.Close()
	}
}

func (w *Worker) kinds() []string {
	var ks []string
	for _, k := range queue.Kinds {
		if _, ok := w.handlers[k]; ok {
			ks = append(ks, k)
		}
	}
	return append(ks, w.cfg.Jobs.KindNames()...)
}
