package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// delivery is one delivery of a message, from its receipt to its
// settlement.
type delivery struct {
	msg       jetstream.Msg
	it        queue.Item
	delivered uint64 // JetStream's delivery count
	runs      *itemRuns
	keep      keepHandle // the message's keep-alive
	scope     string     // its scope (pool.scope): it.Scope, else read from its payload
	log       *zap.Logger
}

// handle takes one message from delivery to its settlement. pullCtx ends
// when the worker stops taking work (no new run starts after that); runCtx
// ends when the shutdown grace is over (running jobs are cancelled).
func (w *Worker) handle(pullCtx, runCtx context.Context, msg jetstream.Msg) {
	it, decodeErr := queue.DecodeItem(msg)
	d := &delivery{msg: msg, it: it, delivered: 1}
	if meta, err := msg.Metadata(); err == nil {
		d.delivered = meta.NumDelivered
	}
	// WithLazy: the fields are encoded only if the item logs something.
	d.log = w.log.WithLazy(zap.String("item", it.ID), zap.String("batch", it.Batch), zap.String("kind", it.Kind))
	if d.delivered > 1 {
		w.metrics.Redeliveries.Inc()
		d.log = d.log.WithLazy(zap.Uint64("delivery", d.delivered))
	}
	d.runs = w.runs.forItem(it.Batch, it.ID, d.delivered)
	itemCtx, cancelItem := context.WithCancelCause(runCtx)
	defer cancelItem(nil)
	d.keep = w.keepMessageAlive(msg, cancelItem)
	defer d.keep.Stop()

	if decodeErr != nil {
		w.deadLetter(d, queue.ReasonUndecodable, decodeErr.Error())
		return
	}
	h, ok := w.handlers[it.Kind]
	if !ok {
		w.deadLetter(d, queue.ReasonUnknownKind, fmt.Sprintf("worker %s has no jobs.%s configured (it runs %v)", w.id, it.Kind, w.kinds()))
		return
	}
	// A provider kind's item is a request: its scope is its model, its
	// cost the provider's estimate (what enqueue set, unless it was
	// published by hand).
	isProvider := w.cfg.Jobs.KindProvider(it.Kind) != ""
	cost := it.Cost
	if cost == 0 && isProvider {
		cost = provider.Estimate(it.Payload, it.Endpoint)
	} else if cost == 0 {
		c, err := jsonl.Cost(it.Payload, w.cfg.Pool.Cost.Field, w.cfg.Pool.Cost.Default)
		if err != nil {
			w.deadLetter(d, queue.ReasonPermanent, err.Error())
			return
		}
		cost = c
	}
	scopeField := w.cfg.Pool.Scope.Field
	if isProvider {
		scopeField = provider.ScopeField
	}
	if d.it.Scope == "" && scopeField != "" {
		// Published without its scope (by hand, or by an older producer):
		// read it here, so that its scope's limits bind it all the same.
		scope, _, err := jsonl.Scope(it.Payload, scopeField)
		if err == nil && scope != "" {
			err = creds.ValidScope(scope)
		}
		if err != nil {
			w.deadLetter(d, queue.ReasonPermanent, fmt.Sprintf("item %s: scope: %v", it.ID, err))
			return
		}
		d.scope = scope
	} else {
		d.scope = d.it.Scope
	}
	if w.heldBack(d) {
		return
	}
	if d.delivered > 1 {
		// What earlier deliveries recorded: which keys refused the item.
		if err := d.runs.peek(itemCtx); err != nil {
			d.log.Debug("reading the run counters", zap.Error(err))
		}
	}
	for {
		lease, err := w.acquire(pullCtx, itemCtx, d, cost)
		if errors.Is(err, creds.ErrNeverFits) {
			w.deadLetter(d, queue.ReasonPermanent, fmt.Sprintf("item %s: %v", it.ID, err))
			return
		}
		if err != nil {
			if errors.Is(err, errClassWaiting) {
				d.log.Debug("item handed back: items of its keys and scope have their share of slots waiting for a key, and no key has room for it now")
			} else {
				d.log.Debug("item handed back before it ran (again)", zap.NamedError("why", err))
			}
			sctx, cancel := w.settleCtx()
			if herr := d.runs.handBack(sctx); herr != nil {
				d.log.Debug("recording the hand-back", zap.Error(herr))
			}
			cancel()
			w.nak(d, 0)
			return
		}
		if w.heldBack(d) {
			// Paused or cancelled while it waited for the key.
			w.releaseAbandoned(lease, d.log)
			return
		}
		if refusedAlready(d.runs.cur, lease.CredentialID) {
			// This key refused the item before: it runs on another one,
			// and no request goes to this one. The message waits a little
			// (a key that refuses everything is disabled meanwhile, or
			// another key frees up).
			d.log.Debug("the granted key refused this item before: waiting for another", zap.String("credential", lease.CredentialID))
			w.releaseAbandoned(lease, d.log)
			sctx, cancel := w.settleCtx()
			if _, err := d.runs.do(sctx, "norun"); err != nil {
				d.log.Debug("recording the hand-back", zap.Error(err))
			}
			cancel()
			w.nak(d, refusedKeyWait)
			return
		}
		st, err := d.runs.start(itemCtx)
		if err != nil {
			// Redis failed right after granting the lease: run nothing.
			w.redisOK.Store(false)
			d.log.Warn("cannot count the run in Redis: handing the item back", zap.Error(err))
			w.releaseAbandoned(lease, d.log)
			w.nak(d, time.Second)
			return
		}
		if st.Lost > 0 {
			d.log.Warn("earlier runs of this item never reported (their workers died): counted as failed attempts",
				zap.Int("lost_runs", st.Lost), zap.Int("failures", st.Failures), zap.Int("max_attempts", w.cfg.Worker.MaxAttempts))
			if st.Failures >= w.cfg.Worker.MaxAttempts {
				w.releaseAbandoned(lease, d.log)
				w.deadLetter(d, queue.ReasonOutOfAttempts,
					fmt.Sprintf("%d runs failed or never reported (their workers died)", st.Failures))
				return
			}
		}
		if !w.runOnce(pullCtx, itemCtx, d, h, lease) {
			return
		}
	}
}

// heldBack settles an item whose batch an operator paused or cancelled,
// before it starts: a paused batch's item goes back to its lane (nobody
// pulls the lane until it is resumed), a cancelled batch's item is
// recorded as cancelled and deleted. It reports whether it did.
func (w *Worker) heldBack(d *delivery) bool {
	state, _ := w.batches.state(d.it.Batch)
	switch state {
	case queue.BatchPaused:
		ctx, cancel := w.settleCtx()
		defer cancel()
		if err := d.runs.handBack(ctx); err != nil {
			d.log.Debug("recording the hand-back", zap.Error(err))
		}
		d.log.Debug("the batch is paused: the item goes back to its lane")
		w.nak(d, 0)
		return true
	case queue.BatchCancelled:
		ctx, cancel := w.settleCtx()
		defer cancel()
		if err := w.retry(ctx, "recording a cancelled item", d.log, func(c context.Context) error {
			_, err := w.q.CancelItem(c, d.msg, d.it, w.id)
			return err
		}); err != nil {
			d.log.Warn("could not record the cancelled item: it comes back after its ack wait", zap.Error(err))
			return true
		}
		if err := d.runs.done(ctx); err != nil {
			d.log.Debug("forgetting run counters", zap.Error(err))
		}
		d.log.Info("the batch is cancelled: the item is recorded as cancelled and not run")
		return true
	}
	return false
}

// refusedKeyWait is how long an item waits when the only key it was given
// is one that refused it before.
const refusedKeyWait = time.Second

// runOnce runs the job once on the leased credential and settles the
// outcome (see judge). It reports whether the item should run again at
// once on another credential (it was rate limited or its key rejected).
func (w *Worker) runOnce(pullCtx, itemCtx context.Context, d *delivery, h jobs.Handler, lease *creds.Lease) (again bool) {
	it := d.it
	attempt := d.runs.cur.Runs
	log := d.log.WithLazy(zap.Int("attempt", attempt), zap.String("credential", lease.CredentialID))
	jobCtx, cancelJob := context.WithCancelCause(itemCtx)
	defer cancelJob(nil)
	renewal := w.renewLease(lease, log, cancelJob)
	inFlight := w.metrics.InFlight.WithLabelValues(lease.CredentialID)
	inFlight.Inc()
	log.Debug("job started")
	start := time.Now()
	out, jobErr := jobs.SafeRun(jobCtx, h,
		jobs.Item{ID: it.ID, Batch: it.Batch, Kind: it.Kind, Attempt: attempt, Payload: it.Payload, Endpoint: it.Endpoint},
		jobs.Credential{ID: lease.CredentialID, Secret: w.secrets[lease.CredentialID], URL: w.credURLs[lease.CredentialID]})
	dur := time.Since(start)
	inFlight.Dec()
	renewal.Stop()
	w.metrics.JobDuration.WithLabelValues(it.Kind).Observe(dur.Seconds())
	w.metrics.Requests.WithLabelValues(it.Kind, metrics.ViaRealTime).Inc()
	errText := ""
	if jobErr != nil {
		errText = w.scrub.String(jobErr.Error())
	}
	if out.CostNote != "" {
		w.noteOnce("cost:"+it.Kind, func() {
			log.Warn("a job did not report its cost: the estimate stands (said once per kind)", zap.String("why", w.scrub.String(out.CostNote)))
		})
	}
	v := judge(runEnd{err: jobErr, interrupted: context.Cause(jobCtx), out: out, item: queue.MsgID(it.Batch, it.ID)},
		policy{cooldown: w.cfg.Pool.Cooldown, maxRest: w.cfg.Pool.MaxRest, scrub: w.scrub.String})
	for _, c := range v.cut {
		log.Warn("a reply asked for a rest longer than pool.max_rest: cut to it",
			zap.String("asked", w.scrub.String(c)), zap.Duration("max_rest", w.cfg.Pool.MaxRest))
	}
	res := runResult{dur: dur, credID: lease.CredentialID, leasedAt: lease.Acquired, out: out, errText: errText}
	return w.settle(pullCtx, d, lease, v, res, log, context.Cause(jobCtx))
}

// acquire waits for a credential lease among the keys the item's kind may
// use, for its cost and scope. While its class (keys and scope) has its
// share of this worker's slots waiting already (classWaits), it does not
// wait: a key with room now, or errClassWaiting. It fails closed: while
// Redis cannot be reached it keeps waiting (the message is kept alive
// meanwhile) and runs nothing. When Redis has lost the pool it registers
// it again.
func (w *Worker) acquire(pullCtx, itemCtx context.Context, d *delivery, cost int64) (*creds.Lease, error) {
	ctx, cancel := context.WithCancelCause(itemCtx)
	defer cancel(nil)
	stop := context.AfterFunc(pullCtx, func() { cancel(errDraining) })
	defer stop()
	owner := w.id + "/" + shorten(d.it.ID, 64)
	b := newBackoff(100*time.Millisecond, 5*time.Second)
	start := time.Now()
	keys := w.keysFor(d.it.Kind)
	class := waitClass(keys, d.scope)
	for {
		_, prio := w.batches.state(d.it.Batch)
		req := creds.Request{Owner: owner, Cost: cost, Priority: prio, Scope: d.scope, Keys: keys}
		var l *creds.Lease
		var err error
		if w.waits.enter(class) {
			var queued atomic.Bool
			req.Queued = func() {
				queued.Store(true)
				w.waits.queued(class)
			}
			l, err = w.pool.AcquireWith(ctx, req)
			if w.waits.leave(class, queued.Load()) {
				w.batches.poke() // the puller may take from the class's lanes again
			}
		} else if l, err = w.pool.TryAcquireWith(ctx, req); errors.Is(err, creds.ErrNoneAvailable) {
			return nil, errClassWaiting
		}
		if err == nil {
			w.redisOK.Store(true)
			w.metrics.CredentialWait.Observe(time.Since(start).Seconds())
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if errors.Is(err, creds.ErrNeverFits) {
			w.redisOK.Store(true)
			return nil, err
		}
		if errors.Is(err, creds.ErrPoolEmpty) {
			d.log.Warn("the credential pool is empty in Redis (did Redis lose its state?): registering the credentials again")
			if err = w.register(ctx); err == nil {
				continue
			}
		}
		w.redisOK.Store(false)
		w.metrics.RedisUnavailable.Inc()
		d.log.Warn("cannot reserve a credential: no job runs until Redis answers", zap.Error(err), zap.Duration("retry_in", b.peek()))
		b.wait(ctx)
	}
}
