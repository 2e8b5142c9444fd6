package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
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
	for {
		lease, err := w.acquire(pullCtx, itemCtx, d)
		if err != nil {
			d.log.Debug("item handed back before it ran (again)", zap.NamedError("why", err))
			sctx, cancel := w.settleCtx()
			if herr := d.runs.handBack(sctx); herr != nil {
				d.log.Debug("recording the hand-back", zap.Error(herr))
			}
			cancel()
			w.nak(d, 0)
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

// runOnce runs the job once on the leased credential and settles the
// outcome. It reports whether the item should run again at once on another
// credential (it was rate limited or its key rejected).
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
		jobs.Item{ID: it.ID, Batch: it.Batch, Kind: it.Kind, Attempt: attempt, Payload: it.Payload},
		jobs.Credential{ID: lease.CredentialID, Secret: w.secrets[lease.CredentialID]})
	dur := time.Since(start)
	inFlight.Dec()
	renewal.Stop()
	w.metrics.JobDuration.WithLabelValues(it.Kind).Observe(dur.Seconds())
	interrupted := context.Cause(jobCtx)
	outcome := jobs.Classify(jobErr)
	errText := ""
	if jobErr != nil {
		errText = w.scrub.String(jobErr.Error())
	}
	ctx, cancel := w.settleCtx()
	defer cancel()
	res := runResult{dur: dur, credID: lease.CredentialID, leasedAt: lease.Acquired, out: out, errText: errText}

	switch {
	case jobErr == nil:
		w.releaseLease(ctx, lease, log)
		w.succeed(ctx, d, res)
		return false

	case interrupted != nil && outcome == jobs.OutcomeTransient:
		// Shutdown, lost lease or lost message: not the item's fault.
		w.releaseLease(ctx, lease, log)
		w.settleRun(ctx, d)
		w.metrics.Items.WithLabelValues(it.Kind, "interrupted").Inc()
		log.Info("job interrupted: handed back for immediate redelivery", zap.NamedError("why", interrupted))
		w.nak(d, 0)
		return false

	case outcome == jobs.OutcomeRateLimited:
		var rl *jobs.RateLimitedError
		errors.As(jobErr, &rl)
		cd, source, label := rl.RetryAfter, rl.Source, "retry_after"
		switch {
		case source == "":
			cd, source, label = w.cfg.Pool.Cooldown, "pool.cooldown (no Retry-After given)", "default"
		case cd <= 0:
			cd = minCooldown // "retry now": a pause, not a hot loop
		}
		reason := w.scrub.String(fmt.Sprintf("cooling %s (from %s) after: %s", cd, source, rl.Detail))
		if err := w.pool.ReleaseCooldown(ctx, lease, cd, reason); err != nil {
			if _, merr := w.pool.MarkCooling(ctx, lease.CredentialID, cd, reason); merr != nil {
				log.Warn("could not record the cooldown", zap.Error(merr))
			}
			if !errors.Is(err, creds.ErrLeaseLost) {
				log.Warn("releasing the lease", zap.Error(err))
			}
		}
		w.metrics.Cooldowns.WithLabelValues(lease.CredentialID, label).Inc()
		w.metrics.Items.WithLabelValues(it.Kind, "rate_limited").Inc()
		w.settleRun(ctx, d)
		log.Info("credential rate limited: cooling down; the item runs again on another credential",
			zap.Duration("cooldown", cd), zap.String("retry_after_from", source), zap.String("reason", reason))
		return w.againUnlessDraining(pullCtx, d)

	case outcome == jobs.OutcomeRejected:
		var rej *jobs.RejectedError
		errors.As(jobErr, &rej)
		reason := w.scrub.String(rej.Reason)
		if err := w.pool.ReleaseDisable(ctx, lease, reason); err != nil {
			if derr := w.pool.Disable(ctx, lease.CredentialID, reason); derr != nil {
				log.Warn("could not disable the credential", zap.Error(derr))
			}
		}
		w.metrics.Rejections.WithLabelValues(lease.CredentialID, rejectCause(it.Kind, reason)).Inc()
		w.metrics.Items.WithLabelValues(it.Kind, "rejected").Inc()
		w.settleRun(ctx, d)
		log.Error("credential rejected by the API: disabled until `producer creds enable`; the item runs again on another credential",
			zap.String("reason", reason))
		return w.againUnlessDraining(pullCtx, d)

	case outcome == jobs.OutcomePermanent:
		w.releaseLease(ctx, lease, log)
		if _, err := d.runs.fail(ctx); err != nil {
			log.Warn("cannot count the failure in Redis", zap.Error(err))
		}
		w.deadLetterRun(ctx, d, queue.ReasonPermanent, res)
		return false

	default: // transient
		w.releaseLease(ctx, lease, log)
		st, err := d.runs.fail(ctx)
		if err != nil {
			log.Warn("cannot count the failure in Redis", zap.Error(err))
		}
		maxDeliver := w.q.Config().MaxDeliver
		switch {
		case st.Failures >= w.cfg.Worker.MaxAttempts:
			w.deadLetterRun(ctx, d, queue.ReasonOutOfAttempts, res)
		case maxDeliver > 0 && d.delivered >= uint64(maxDeliver):
			w.deadLetterRun(ctx, d, queue.ReasonMaxDeliveries, res)
		default:
			delay := w.cfg.Worker.RetryDelay(st.Failures)
			w.metrics.Items.WithLabelValues(it.Kind, "retried").Inc()
			log.Warn("job failed: it runs again after the backoff", zap.String("error", errText),
				zap.Int("failures", st.Failures), zap.Int("max_attempts", w.cfg.Worker.MaxAttempts), zap.Duration("in", delay))
			w.nak(d, delay)
		}
		return false
	}
}

// runResult is what one run produced, for the result record.
type runResult struct {
	dur      time.Duration
	credID   string
	leasedAt time.Time
	out      jobs.Output
	errText  string
}

// minCooldown is the cooldown after a rate limit whose Retry-After is 0.
const minCooldown = 100 * time.Millisecond

func (w *Worker) againUnlessDraining(pullCtx context.Context, d *delivery) bool {
	if pullCtx.Err() != nil {
		w.nak(d, 0)
		return false
	}
	return true
}

// acquire waits for a credential lease. It fails closed: while Redis cannot
// be reached it keeps waiting (the message is kept alive meanwhile) and
// runs nothing. When Redis has lost the pool it registers it again.
func (w *Worker) acquire(pullCtx, itemCtx context.Context, d *delivery) (*creds.Lease, error) {
	ctx, cancel := context.WithCancelCause(itemCtx)
	defer cancel(nil)
	stop := context.AfterFunc(pullCtx, func() { cancel(errDraining) })
	defer stop()
	owner := w.id + "/" + shorten(d.it.ID, 64)
	b := newBackoff(100*time.Millisecond, 5*time.Second)
	start := time.Now()
	for {
		l, err := w.pool.Acquire(ctx, owner)
		if err == nil {
			w.redisOK.Store(true)
			w.metrics.CredentialWait.Observe(time.Since(start).Seconds())
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
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
