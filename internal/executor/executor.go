package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Kind is what the executor knows of a job kind the worker runs.
type Kind struct {
	Handler jobs.Handler
	// Keys is the kind's key set (jobs.kinds.<name>.credentials); nil:
	// every key of the worker's.
	Keys *creds.KeySet
	// KeyCount is how many keys the kind may use: the item is
	// dead-lettered once that many (at most 3) refused it.
	KeyCount int
	// Provider: the kind names a provider; its items are requests, their
	// scope the model, their cost the provider's estimate.
	Provider bool
	// Timeout is how long one run may take (jobs.<kind>.timeout; 0 none).
	Timeout time.Duration
	// Endpoint is a provider kind's endpoint (its http.endpoint, else its
	// provider's): where its items' requests go when they run on a
	// fallback kind. "" for other kinds.
	Endpoint string
	// Fallback is where its items run when its keys cannot serve them
	// (fallback.go); nil: nowhere else.
	Fallback *Fallback
}

// Config builds an Executor. Every collaborator is required but Clock
// (default Real), Metrics (default: a registry of its own) and Logger
// (default: none).
type Config struct {
	// ID names the worker: leases' owners, records' worker.
	ID string
	// Kinds are the kinds the worker runs, by name; KindNames lists them
	// for the dead letter of an item of another kind.
	Kinds     map[string]Kind
	KindNames []string
	// Secrets and URLs are the credentials' secrets and own base URLs
	// (provider kinds), by ID; Scrub removes every secret from texts.
	Secrets map[string]secret.Secret
	URLs    map[string]string
	Scrub   *secret.Scrubber
	Policy  Policy

	Pool     Pool
	Recorder Recorder
	Runs     RunLog
	Batches  Batches
	Waits    *ClassWaits
	Host     Host
	// Ledger and Budgets: the spend ledger and what binds a batch's
	// spend; both nil, or both set (then provider runs record their spend
	// and starts under a budget reserve theirs).
	Ledger  Ledger
	Budgets Budgets
	// Moves counts the items that start on a fallback kind (nil: not
	// counted but in Metrics).
	Moves   Mover
	Clock   Clock
	Metrics *metrics.Metrics
	Logger  *zap.Logger
}

// Executor runs deliveries of items (Execute), any number at once. Close
// ends it.
type Executor struct {
	id        string
	kinds     map[string]Kind
	kindNames []string
	secrets   map[string]secret.Secret
	urls      map[string]string
	scrub     *secret.Scrubber
	policy    Policy
	judging   judging

	pool    Pool
	rec     Recorder
	runs    RunLog
	batches Batches
	waits   *ClassWaits
	host    Host
	ledger  Ledger
	budgets Budgets
	moves   Mover
	stuck   stuckRoutes // kinds whose keys could not serve a fallback's After (fallback.go)
	clock   Clock
	metrics *metrics.Metrics
	log     *zap.Logger
	keeper  *keeper
	noted   sync.Map // what noteOnce has said
}

// New checks c and starts an Executor.
func New(c Config) (*Executor, error) {
	for _, req := range []struct {
		name  string
		isNil bool
	}{
		{"Pool", c.Pool == nil}, {"Recorder", c.Recorder == nil}, {"Runs", c.Runs == nil}, {"Batches", c.Batches == nil},
		{"Waits", c.Waits == nil}, {"Host", c.Host == nil}, {"Scrub", c.Scrub == nil}, {"Policy.RetryDelay", c.Policy.RetryDelay == nil},
	} {
		if req.isNil {
			return nil, fmt.Errorf("executor: Config.%s is required", req.name)
		}
	}
	if c.Policy.MaxAttempts < 1 || c.Policy.AckWait <= 0 || c.Policy.LeaseTTL <= 0 {
		return nil, fmt.Errorf("executor: Policy needs MaxAttempts >= 1 and a positive AckWait and LeaseTTL: %+v", c.Policy)
	}
	if (c.Ledger == nil) != (c.Budgets == nil) {
		return nil, fmt.Errorf("executor: Config.Ledger and Config.Budgets go together")
	}
	if err := checkFallbacks(c.Kinds); err != nil {
		return nil, err
	}
	if c.Clock == nil {
		c.Clock = Real
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return &Executor{
		id: c.ID, kinds: c.Kinds, kindNames: c.KindNames, secrets: c.Secrets, urls: c.URLs, scrub: c.Scrub,
		policy:  c.Policy,
		judging: judging{cooldown: c.Policy.Cooldown, maxRest: c.Policy.MaxRest, scrub: c.Scrub.String},
		pool:    c.Pool, rec: c.Recorder, runs: c.Runs, batches: c.Batches, waits: c.Waits, host: c.Host,
		ledger: c.Ledger, budgets: c.Budgets, moves: c.Moves, stuck: stuckRoutes{m: map[string]bool{}, failing: map[string]bool{}, probes: map[string]chan struct{}{}},
		clock: c.Clock, metrics: c.Metrics, log: c.Logger, keeper: newKeeper(c.Clock),
	}, nil
}

// Close stops the keep-alives (after the runs have ended).
func (e *Executor) Close() { e.keeper.close() }

// item is one delivery of an item, from its receipt to its settlement.
type item struct {
	e         *Executor
	d         Delivery
	it        kftype.Item
	delivered uint64 // the server's delivery count
	kind      Kind
	cost      int64  // its estimated cost, for the pool's cost limits
	scope     string // its scope (pool.scope): it.Scope, else read from its payload
	runs      ItemRuns
	log       *zap.Logger
	cancel    context.CancelCauseFunc // the item's context
	msg       keepTask                // the message's keep-alive
	keep      keepHandle
	again     int
	spend     spending // what binds its spend, and the current start's reservation
	route     routing  // the kind it runs on (fallback.go)
}

// Execute takes one delivery to its settlement and says what became of
// it. pullCtx ends when the worker stops taking work (no new run starts
// after that: ErrDraining); runCtx ends when the shutdown grace is over
// (running jobs are cancelled with its cause, ErrGraceOver).
func (e *Executor) Execute(pullCtx, runCtx context.Context, d Delivery) Outcome {
	it, decodeErr := d.Item()
	x := &item{e: e, d: d, it: it, delivered: d.Delivered(), route: routing{ran: it.Kind}}
	// WithLazy: the fields are encoded only if the item logs something.
	x.log = e.log.WithLazy(zap.String("item", it.ID), zap.String("batch", it.Batch), zap.String("kind", it.Kind))
	if x.delivered > 1 {
		e.metrics.Redeliveries.Inc()
		x.log = x.log.WithLazy(zap.Uint64("delivery", x.delivered))
	}
	x.runs.init(e.runs, it.Batch, it.ID, x.delivered)
	itemCtx, cancelItem := context.WithCancelCause(runCtx)
	defer cancelItem(nil)
	x.cancel = cancelItem
	e.keepMessageAlive(x)
	defer x.keep.Stop()

	if decodeErr != nil {
		return e.deadLetter(x, kftype.ReasonUndecodable, decodeErr.Error())
	}
	k, ok := e.kinds[it.Kind]
	if !ok {
		return e.deadLetter(x, kftype.ReasonUnknownKind, fmt.Sprintf("worker %s has no jobs.%s configured (it runs %v)", e.id, it.Kind, e.kindNames))
	}
	x.kind, x.route.own = k, k
	if text := e.prepare(x); text != "" {
		return e.deadLetter(x, kftype.ReasonPermanent, text)
	}
	if o, settled := e.spendOf(itemCtx, x); settled {
		return o
	}
	if o, held := e.heldBack(x); held {
		return o
	}
	if x.delivered > 1 {
		// What earlier deliveries recorded: which keys refused the item.
		if err := x.runs.Peek(itemCtx); err != nil {
			x.log.Debug("reading the run counters", zap.Error(err))
		}
		if k.Fallback != nil && failingOver(x.runs.Cur) {
			// Its runs failed twice in a row on its kind's keys: it starts
			// on its fallback kinds.
			x.route.failing = true
			e.stuck.setFailing(it.Kind, x.scope, true)
		}
	}
	for {
		o, again := e.runAgain(pullCtx, itemCtx, x)
		if !again {
			return o
		}
		x.again++
	}
}

// runAgain acquires a lease and runs the item once on it. It reports
// whether the item runs again at once on another key.
func (e *Executor) runAgain(pullCtx, itemCtx context.Context, x *item) (Outcome, bool) {
	lease, err := e.acquire(pullCtx, itemCtx, x)
	if errors.Is(err, creds.ErrNeverFits) {
		return e.deadLetter(x, kftype.ReasonPermanent, fmt.Sprintf("item %s: %v", x.it.ID, err)), false
	}
	if err != nil {
		if errors.Is(err, ErrClassWaiting) {
			x.log.Debug("item handed back: items of its keys and scope have their share of slots waiting for a key, and no key has room for it now")
		} else {
			x.log.Debug("item handed back before it ran (again)", zap.NamedError("why", err))
		}
		sctx, cancel := e.settleCtx()
		if herr := x.runs.HandBack(sctx); herr != nil {
			x.log.Debug("recording the hand-back", zap.Error(herr))
		}
		cancel()
		return x.handedBack(err, e.nak(x, 0), 0), false
	}
	if o, held := e.heldBack(x); held {
		// Paused or cancelled while it waited for the key.
		e.releaseUnused(lease, x.log)
		return o, false
	}
	if refusedAlready(x.runs.Cur, lease.CredentialID) {
		// This key refused the item before: it runs on another one, and
		// no request goes to this one. The message waits a little (a key
		// that refuses everything is disabled meanwhile, or another key
		// frees up).
		x.log.Debug("the granted key refused this item before: waiting for another", zap.String("credential", lease.CredentialID))
		e.releaseUnused(lease, x.log)
		sctx, cancel := e.settleCtx()
		if err := x.runs.NoRun(sctx); err != nil {
			x.log.Debug("recording the hand-back", zap.Error(err))
		}
		cancel()
		return x.handedBack(ErrRefusedBefore, e.nak(x, refusedKeyWait), refusedKeyWait), false
	}
	if o, ok := e.reserve(itemCtx, x, lease); !ok {
		return o, false
	}
	st, err := x.runs.Start(itemCtx)
	if err != nil {
		// Redis failed right after granting the lease: run nothing.
		e.host.RedisUp(false)
		x.log.Warn("cannot count the run in Redis: handing the item back", zap.Error(err))
		e.unreserve(x)
		e.releaseUnused(lease, x.log)
		return x.handedBack(ErrRunLog, e.nak(x, runLogWait), runLogWait), false
	}
	if st.Lost > 0 {
		x.log.Warn("earlier runs of this item never reported (their workers died): counted as failed attempts",
			zap.Int("lost_runs", st.Lost), zap.Int("failures", st.Failures), zap.Int("max_attempts", e.policy.MaxAttempts))
		if st.Failures >= e.policy.MaxAttempts {
			e.unreserve(x)
			e.releaseUnused(lease, x.log)
			return e.deadLetter(x, kftype.ReasonOutOfAttempts,
				fmt.Sprintf("%d runs failed or never reported (their workers died)", st.Failures)), false
		}
	}
	return e.runOnce(pullCtx, itemCtx, x, lease)
}

const (
	// refusedKeyWait is how long an item waits when the only key it was
	// given is one that refused it before.
	refusedKeyWait = time.Second
	// runLogWait is how long an item waits when its run could not be
	// counted.
	runLogWait = time.Second
)

// outcome is x's outcome with fate f and reply r.
func (x *item) outcome(f Fate, r Reply) Outcome {
	o := Outcome{Fate: f, Kind: x.route.ran, Reply: r, Attempt: x.runs.Cur.Runs, Failures: x.runs.Cur.Failures, Again: x.again}
	if x.route.why != "" {
		o.From, o.Why = x.it.Kind, x.route.why
	}
	return o
}

// handedBack is x handed back for cause, after delay when r is a nak.
func (x *item) handedBack(cause error, r Reply, delay time.Duration) Outcome {
	o := x.outcome(HandedBack, r)
	o.Cause = cause
	if r == ReplyNak {
		o.Delay = delay
	}
	return o
}

// noteOnce runs say the first time it is called with key, and never again:
// for a warning that would repeat for every item.
func (e *Executor) noteOnce(key string, say func()) {
	if _, done := e.noted.LoadOrStore(key, true); !done {
		say()
	}
}
