package batchapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// Options configure a Runner.
type Options struct {
	// Queue is the worker's queue handle; Redis its Redis client (claims,
	// and the pool's spend ledger).
	Queue *queue.Queue
	Redis redis.UniversalClient
	// Config is the worker's configuration: the kinds (their provider,
	// base URL and keys), the keys' own base URLs, jobs.batch_api and
	// jobs.max_output.
	Config *config.Config
	// Secrets are the keys' secrets, by credential ID.
	Secrets map[string]secret.Secret
	// Owner names the worker in claims and results.
	Owner string
	// Logger (default: none).
	Logger *zap.Logger
	// Scrubber removes the keys' secrets from what is recorded (default:
	// the Secrets').
	Scrubber *secret.Scrubber
	// Metrics, when set, are the worker's: requests via the Batch API
	// (keyfleet_requests_total{via="batch_api"}), provider batches'
	// events and spend (keyfleet_spend_total{tenant,model}).
	Metrics *metrics.Metrics
	// Now is the clock of the deadline rule (default time.Now).
	Now func() time.Time
	// HTTPClient carries the SDKs' requests (default: theirs).
	HTTPClient *http.Client

	// Tick is how often the runner looks at the batches and records
	// (default min(jobs.batch_api.poll, 1s)).
	Tick time.Duration
	// Settle: staged items wait this long after their batch's last enqueue
	// before a provider batch short of the bounds is made of them
	// (default DefaultSettle).
	Settle time.Duration
	// ResolveGrace: a creation whose outcome is unknown and whose provider
	// batch is not found is tried again only this long after it began
	// (default DefaultResolveGrace).
	ResolveGrace time.Duration
	// WorkTTL is the claim of one step, renewed every third of it while
	// the step works: a worker that dies leaves its work to another within
	// it (default DefaultWorkTTL).
	WorkTTL time.Duration
	// Bounds per provider (default DefaultBounds).
	Bounds map[string]Bounds
}

// Defaults of Options.
const (
	DefaultSettle       = 2 * time.Second
	DefaultResolveGrace = 5 * time.Minute
	DefaultWorkTTL      = 20 * time.Second
	// createSkew: a provider batch found again may have been created this
	// long before the record says its creation began (the provider's
	// clock against the worker's).
	createSkew = 2 * time.Minute
	// callTimeout bounds a provider call; transferTimeout an upload or a
	// results download.
	callTimeout     = time.Minute
	transferTimeout = 10 * time.Minute
)

// Runner runs the deadline batches through the providers' Batch APIs
// (docs/batch-api.md). Every worker runs one; claims in Redis make one
// worker do each piece at a time, and the records make every piece safe
// to do again after a crash.
type Runner struct {
	o      Options
	q      *queue.Queue
	cfg    *config.Config
	cl     *claims
	log    *zap.Logger
	now    func() time.Time
	poll   time.Duration
	margin time.Duration
	scrub  *secret.Scrubber
	ledger *spend.Ledger

	storeMu sync.Mutex
	store   *queue.ProviderBatchStore

	mu      sync.Mutex
	batches map[string]kftype.BatchInfo
	records map[string]queue.ProviderBatch
	notTill map[string]time.Time // a piece of work not to try before then (backoff, settling)
	// empty: the batches this worker found nothing staged in, at the
	// record's revision and when (stage).
	empty map[string]emptyAt
	apis  map[string]api // by kind and credential
	noted map[string]bool
	wake  chan struct{}
	// ceilings: records' most spend, read from their inputs, by input
	// (spend.go).
	ceilings map[string]ceilingOf

	// crash, a test's, stops the runner dead at a named point (as a crash
	// there would) when it returns true: the test then starts another.
	crash func(point string) bool
}

// emptyAt is a batch found with nothing staged: at which revision of its
// record, and when.
type emptyAt struct {
	rev    uint64
	change time.Time // the record's LastChange (Refresh reads no revision)
	at     time.Time
}

// errCrash is what a step returns at a test's crash point.
var errCrash = errors.New("batchapi: crashed here (test)")

// crashed reports whether the test stops the runner at point.
func (r *Runner) crashed(point string) bool { return r.crash != nil && r.crash(point) }

// New returns a Runner; it does no I/O.
func New(o Options) (*Runner, error) {
	if o.Queue == nil || o.Redis == nil || o.Config == nil {
		return nil, errors.New("batchapi: Queue, Redis and Config are required")
	}
	bc := o.Config.Jobs.BatchAPI
	r := &Runner{
		o: o, q: o.Queue, cfg: o.Config, log: o.Logger, now: o.Now,
		poll: cmp.Or(bc.Poll, config.BatchAPIPollDefault), margin: cmp.Or(bc.Margin, config.BatchAPIMarginDefault),
		batches: map[string]kftype.BatchInfo{}, records: map[string]queue.ProviderBatch{},
		notTill: map[string]time.Time{}, empty: map[string]emptyAt{}, apis: map[string]api{}, noted: map[string]bool{}, wake: make(chan struct{}, 1),
		scrub: o.Scrubber, ledger: spend.NewLedger(o.Redis, o.Config.Pool.Name), ceilings: map[string]ceilingOf{},
	}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	r.log = r.log.Named("batchapi")
	if r.now == nil {
		r.now = time.Now
	}
	if r.scrub == nil {
		all := make([]secret.Secret, 0, len(o.Secrets))
		for _, s := range o.Secrets {
			all = append(all, s)
		}
		r.scrub = secret.NewScrubber(all...)
	}
	r.o.Tick = cmp.Or(o.Tick, min(r.poll, time.Second))
	r.o.Settle = cmp.Or(o.Settle, DefaultSettle)
	r.o.ResolveGrace = cmp.Or(o.ResolveGrace, DefaultResolveGrace)
	r.o.WorkTTL = cmp.Or(o.WorkTTL, DefaultWorkTTL)
	if r.o.Bounds == nil {
		r.o.Bounds = DefaultBounds
	}
	r.cl = newClaims(o.Redis, o.Queue.Config().Stream, o.Owner)
	return r, nil
}

// Enabled reports whether a configuration has a kind whose deadline
// batches a runner would run: one of provider openai or anthropic.
func Enabled(cfg *config.Config) bool {
	for _, k := range cfg.Jobs.KindNames() {
		if spec, ok := provider.Lookup(cfg.Jobs.KindProvider(k)); ok && spec.HasBatchAPI {
			return true
		}
	}
	spec, ok := provider.Lookup(cfg.Jobs.KindProvider("http"))
	return ok && spec.HasBatchAPI
}

// Run works until ctx ends: it follows the batch records and the
// provider batch records, and steps through them every Tick (and at
// once when a batch changes).
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		if _, err := r.openStore(ctx); err == nil {
			break
		} else {
			r.log.Warn("opening the provider batch store; trying again", r.errField(err))
		}
		sleep(ctx, 2*time.Second)
	}
	wg.Go(func() { r.follow(ctx, "batches", r.watchBatches) })
	wg.Go(func() { r.follow(ctx, "provider batches", r.watchRecords) })
	t := time.NewTicker(r.o.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
		if err := r.Step(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("a step of the Batch API runner failed; it is done again", r.errField(err))
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *Runner) openStore(ctx context.Context) (*queue.ProviderBatchStore, error) {
	r.storeMu.Lock()
	defer r.storeMu.Unlock()
	if r.store != nil {
		return r.store, nil
	}
	s, err := r.q.OpenProviderBatches(ctx)
	if err != nil {
		return nil, err
	}
	r.store = s
	return s, nil
}

// follow runs a watch until ctx ends, again after a failure.
func (r *Runner) follow(ctx context.Context, what string, watch func(context.Context) error) {
	for ctx.Err() == nil {
		err := watch(ctx)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("watching the "+what+" failed; watching again", r.errField(err))
		sleep(ctx, time.Second)
	}
}

func (r *Runner) watchBatches(ctx context.Context) error {
	return r.q.WatchBatches(ctx, func(b kftype.BatchInfo) {
		r.mu.Lock()
		if old, ok := r.batches[b.ID]; ok && old.Rev > b.Rev {
			r.mu.Unlock()
			return
		}
		switch {
		case b.Deleted:
			delete(r.batches, b.ID)
		case !b.Deadline.IsZero():
			r.batches[b.ID] = b
		}
		r.mu.Unlock()
		r.poke()
	})
}

func (r *Runner) watchRecords(ctx context.Context) error {
	s, err := r.openStore(ctx)
	if err != nil {
		return err
	}
	return s.Watch(ctx, r.seen, nil)
}

// seen takes a record as read (a newer revision than the view's).
func (r *Runner) seen(p queue.ProviderBatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.records[p.ID]
	if ok && old.Rev >= p.Rev {
		return
	}
	if ok && (old.Input != p.Input || !p.Active()) {
		delete(r.ceilings, old.Input)
	}
	if p.State == "" {
		delete(r.records, p.ID)
		return
	}
	r.records[p.ID] = p
}

func (r *Runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Refresh reads every batch record and provider batch record into the
// runner's view (the watches keep it while Run runs).
func (r *Runner) Refresh(ctx context.Context) error {
	s, err := r.openStore(ctx)
	if err != nil {
		return err
	}
	bs, err := r.q.Batches(ctx)
	if err != nil {
		return err
	}
	ps, err := s.List(ctx, "")
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.batches = map[string]kftype.BatchInfo{}
	for _, b := range bs {
		if !b.Deadline.IsZero() {
			r.batches[b.ID] = b
		}
	}
	r.mu.Unlock()
	for _, p := range ps {
		r.seen(p)
	}
	return nil
}

// Step does what is due once: stages the deadline batches' new items into
// provider batch records, and moves each active record on.
func (r *Runner) Step(ctx context.Context) error {
	if _, err := r.openStore(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	batches := make([]kftype.BatchInfo, 0, len(r.batches))
	for _, b := range r.batches {
		batches = append(batches, b)
	}
	records := make([]queue.ProviderBatch, 0, len(r.records))
	for _, p := range r.records {
		if p.Active() {
			records = append(records, p)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(records, func(a, b queue.ProviderBatch) int { return a.CreatedAt.Compare(b.CreatedAt) })
	var errs []error
	for _, b := range batches {
		if err := r.stage(ctx, b); errors.Is(err, errCrash) {
			return err
		} else if err != nil {
			errs = append(errs, fmt.Errorf("batch %q: %w", b.ID, err))
		}
	}
	for _, p := range records {
		if ctx.Err() != nil {
			break
		}
		if err := r.advance(ctx, p); errors.Is(err, errCrash) {
			return err
		} else if err != nil {
			errs = append(errs, fmt.Errorf("provider batch %s of batch %q: %w", p.ID, p.Batch, err))
		}
	}
	return errors.Join(errs...)
}

// batch is the view's record of a batch (ok false: none, or no deadline).
func (r *Runner) batch(id string) (kftype.BatchInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.batches[id]
	return b, ok
}

// due reports whether the piece of work key may be tried now.
func (r *Runner) due(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.notTill[key]
	return !ok || !r.now().Before(t)
}

// later puts the piece of work key off for d.
func (r *Runner) later(key string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notTill[key] = r.now().Add(d)
}

// noteOnce logs a warning once per key.
func (r *Runner) noteOnce(key string, say func()) {
	r.mu.Lock()
	done := r.noted[key]
	r.noted[key] = true
	r.mu.Unlock()
	if !done {
		say()
	}
}

// kindProvider is the Batch API provider of kind ("" when it has none).
func (r *Runner) kindProvider(kind string) string {
	if spec, ok := provider.Lookup(r.cfg.Jobs.KindProvider(kind)); ok && spec.HasBatchAPI {
		return spec.Name
	}
	return ""
}

// keys are the credentials kind's provider batches may use, that this
// worker has the secrets of.
func (r *Runner) keys(kind string) []string {
	ids := r.cfg.KindKeys(kind)
	if ids == nil {
		for _, c := range r.cfg.Pool.Credentials {
			ids = append(ids, c.ID)
		}
	}
	var out []string
	for _, id := range ids {
		if s, ok := r.o.Secrets[id]; ok && !s.Empty() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// api is the Batch API of kind's provider with credential's key.
func (r *Runner) api(kind, credential string) (api, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := kind + "\x00" + credential
	if a, ok := r.apis[k]; ok {
		return a, nil
	}
	_, sec, ok := r.cfg.Jobs.KindSection(kind)
	h, isHTTP := sec.(*config.HTTPJob)
	if !ok || !isHTTP || h == nil {
		return nil, fmt.Errorf("kind %s is not configured here as a provider kind", kind)
	}
	s, ok := r.o.Secrets[credential]
	if !ok || s.Empty() {
		return nil, fmt.Errorf("credential %s: no secret here", credential)
	}
	base := h.WithDefaults().URL
	for _, c := range r.cfg.Pool.Credentials {
		if c.ID == credential && c.URL != "" {
			base = c.URL
		}
	}
	var a api
	switch r.kindProvider(kind) {
	case provider.OpenAI:
		a = newOpenAI(base, s.Reveal(), r.o.HTTPClient)
	case provider.Anthropic:
		a = newAnthropic(base, s.Reveal(), r.o.HTTPClient)
	default:
		return nil, fmt.Errorf("kind %s's provider has no Batch API", kind)
	}
	r.apis[k] = a
	return a, nil
}

// errStatus is the HTTP status of a provider call's error (0: no answer).
func errStatus(prov string, err error) int {
	if prov == provider.Anthropic {
		return anthropicErrStatus(err)
	}
	return openaiStatus(err)
}

// deadlineOf is p's deadline: the record's, or its batch's when earlier.
func deadlineOf(p queue.ProviderBatch, b kftype.BatchInfo) time.Time {
	d := p.Deadline
	if !b.Deadline.IsZero() && (d.IsZero() || b.Deadline.Before(d)) {
		d = b.Deadline
	}
	return d
}

// deadlinePassed reports whether p's items are due back in real time:
// the deadline less the margin has come.
func (r *Runner) deadlinePassed(p queue.ProviderBatch, b kftype.BatchInfo) bool {
	return !r.now().Before(deadlineOf(p, b).Add(-r.margin))
}

// waitedEnough reports whether a provider batch cancelled for the
// deadline has been waited for long enough: half the margin since the
// cancel, or less when the cancel came late (the deadline less half the
// margin has come), so that its items have at least the other half of the
// margin (or what is left) in real time. A record is looked at once per
// poll interval, so the wait ends one poll interval (at most a quarter of
// half the margin) before that moment: the look that gives up comes by
// then, not up to a poll interval after it.
func (r *Runner) waitedEnough(p queue.ProviderBatch, b kftype.BatchInfo) bool {
	half := r.margin / 2
	until := p.CancelAt.Add(half)
	if d := deadlineOf(p, b).Add(-half); d.Before(until) {
		until = d
	}
	return !r.now().Before(until.Add(-min(r.poll, half/4)))
}

// defaultEndpoint is the endpoint of prov's requests when an item names
// none.
func defaultEndpoint(prov string) string {
	spec, _ := provider.Lookup(prov)
	return spec.Endpoint
}

// count counts a provider batch's event in the metrics.
func (r *Runner) count(prov, event string) {
	if r.o.Metrics != nil {
		r.o.Metrics.ProviderBatches.WithLabelValues(prov, event).Inc()
	}
}

// errField logs an error scrubbed of every key's secret (a provider's
// error reply may quote what it was sent).
func (r *Runner) errField(err error) zap.Field {
	return zap.String("error", r.scrub.String(err.Error()))
}
