package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// handle takes one message from delivery to its settlement. pullCtx ends
// when the worker stops taking work (no new run starts after that); runCtx
// ends when the shutdown grace is over (running jobs are cancelled).
func (w *Worker) handle(pullCtx, runCtx context.Context, msg jetstream.Msg) {
	it, decodeErr := queue.DecodeItem(msg)
	delivered := uint64(1)
	if meta, err := msg.Metadata(); err == nil {
		delivered = meta.NumDelivered
	}
	// WithLazy: the fields are encoded only if the item logs something.
	log := w.log.WithLazy(zap.String("item", it.ID), zap.String("batch", it.Batch), zap.String("kind", it.Kind))
	if delivered > 1 {
		w.metrics.Redeliveries.Inc()
		log = log.WithLazy(zap.Uint64("delivery", delivered))
	}
	itemCtx, cancelItem := context.WithCancelCause(runCtx)
	defer cancelItem(nil)
	stopKeepAlive := w.keepMessageAlive(msg, cancelItem)
	defer stopKeepAlive()

	if decodeErr != nil {
		w.deadLetter(msg, it, log, queue.ReasonUndecodable, decodeErr.Error(), w.runs.forItem(it.Batch, it.ID, delivered))
		return
	}
	h, ok := w.handlers[it.Kind]
	if !ok {
		w.deadLetter(msg, it, log, queue.ReasonUnknownKind,
			fmt.Sprintf("worker %s has no jobs.%s configured (it runs %v)", w.id, it.Kind, w.kinds()), w.runs.forItem(it.Batch, it.ID, delivered))
		return
	}
	runs := w.runs.forItem(it.Batch, it.ID, delivered)
	for {
		lease, err := w.acquire(pullCtx, itemCtx, it, log)
		if err != nil {
			log.Debug("item handed back before it ran (again)", zap.NamedError("why", err))
			sctx, cancel := w.settleCtx()
			if herr := runs.handBack(sctx); herr != nil {
				log.Debug("recording the hand-back", zap.Error(herr))
			}
			cancel()
			w.nakNow(msg, err.Error())
			return
		}
		sctx, cancel := w.settleCtx()
		st, err := runs.start(sctx)
		cancel()
		if err != nil {
			// Redis failed right after granting the lease: run nothing.
			w.redisOK.Store(false)
			log.Warn("cannot count the run in Redis: handing the item back", zap.Error(err))
			w.releaseLease(lease, log)
			w.nak(msg, log, time.Second)
			return
		}
		if st.Lost > 0 {
			log.Warn("earlier runs of this item never reported (their workers died): counted as failed attempts",
				zap.Int("lost_runs", st.Lost), zap.Int("failures", st.Failures), zap.Int("max_attempts", w.cfg.Worker.MaxAttempts))
			if st.Failures >= w.cfg.Worker.MaxAttempts {
				w.releaseLease(lease, log)
				w.deadLetter(msg, it, log, queue.ReasonOutOfAttempts,
					fmt.Sprintf("%d runs failed or never reported (their workers died)", st.Failures), runs)
				return
			}
		}
		if !w.runOnce(pullCtx, itemCtx, msg, it, h, lease, runs, delivered, log) {
			return
		}
	}
}

// runOnce runs the job once on the leased credential and settles the
// outcome. It reports whether the item should run again at once on another
// credential (it was rate limited or its key rejected).
func (w *Worker) runOnce(pullCtx, itemCtx context.Context, msg jetstream.Msg, it queue.Item, h jobs.Handler,
	lease *creds.Lease, runs *itemRuns, delivered uint64, log *zap.Logger) (again bool) {
	attempt := runs.cur.Runs
	log = log.WithLazy(zap.Int("attempt", attempt), zap.String("credential", lease.CredentialID))
	jobCtx, cancelJob := context.WithCancelCause(itemCtx)
	defer cancelJob(nil)
	stopRenew := w.renewLease(lease, log, cancelJob)
	inFlight := w.metrics.InFlight.WithLabelValues(lease.CredentialID)
	inFlight.Inc()
	log.Debug("job started")
	start := time.Now()
	out, jobErr := jobs.SafeRun(jobCtx, h,
		jobs.Item{ID: it.ID, Batch: it.Batch, Kind: it.Kind, Attempt: attempt, Payload: it.Payload},
		jobs.Credential{ID: lease.CredentialID, Secret: w.secrets[lease.CredentialID]})
	dur := time.Since(start)
	inFlight.Dec()
	stopRenew()
	w.metrics.JobDuration.WithLabelValues(it.Kind).Observe(dur.Seconds())
	interrupted := context.Cause(jobCtx)
	outcome := jobs.Classify(jobErr)
	errText := ""
	if jobErr != nil {
		errText = w.scrub.String(jobErr.Error())
	}
	ctx, cancel := w.settleCtx()
	defer cancel()

	switch {
	case jobErr == nil:
		w.releaseLease(lease, log)
		w.succeed(ctx, msg, it, runs, dur, lease, out, log)
		return false

	case interrupted != nil && outcome == jobs.OutcomeTransient:
		// Shutdown, lost lease or lost message: not the item's fault.
		w.releaseLease(lease, log)
		w.settleRun(ctx, runs, log)
		w.metrics.Items.WithLabelValues(it.Kind, "interrupted").Inc()
		log.Info("job interrupted: handed back for immediate redelivery", zap.NamedError("why", interrupted))
		w.nak(msg, log, 0)
		return false

	case outcome == jobs.OutcomeRateLimited:
		var rl *jobs.RateLimitedError
		errors.As(jobErr, &rl)
		d, source, label := rl.RetryAfter, rl.Source, "retry_after"
		switch {
		case source == "":
			d, source, label = w.cfg.Pool.Cooldown, "pool.cooldown (no Retry-After given)", "default"
		case d <= 0:
			d = minCooldown // "retry now": a pause, not a hot loop
		}
		reason := w.scrub.String(fmt.Sprintf("cooling %s (from %s) after: %s", d, source, rl.Detail))
		if err := w.pool.ReleaseCooldown(ctx, lease, d, reason); err != nil {
			if _, merr := w.pool.MarkCooling(ctx, lease.CredentialID, d, reason); merr != nil {
				log.Warn("could not record the cooldown", zap.Error(merr))
			}
			if !errors.Is(err, creds.ErrLeaseLost) {
				log.Warn("releasing the lease", zap.Error(err))
			}
		}
		w.metrics.Cooldowns.WithLabelValues(lease.CredentialID, label).Inc()
		w.metrics.Items.WithLabelValues(it.Kind, "rate_limited").Inc()
		w.settleRun(ctx, runs, log)
		log.Info("credential rate limited: cooling down; the item runs again on another credential",
			zap.Duration("cooldown", d), zap.String("retry_after_from", source), zap.String("reason", reason))
		return w.againUnlessDraining(pullCtx, msg, log)

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
		w.settleRun(ctx, runs, log)
		log.Error("credential rejected by the API: disabled until `producer creds enable`; the item runs again on another credential",
			zap.String("reason", reason))
		return w.againUnlessDraining(pullCtx, msg, log)

	case outcome == jobs.OutcomePermanent:
		w.releaseLease(lease, log)
		if _, err := runs.fail(ctx); err != nil {
			log.Warn("cannot count the failure in Redis", zap.Error(err))
		}
		w.deadLetterRun(ctx, msg, it, log, queue.ReasonPermanent, errText, runs, dur, lease.CredentialID, out)
		return false

	default: // transient
		w.releaseLease(lease, log)
		st2, err := runs.fail(ctx)
		if err != nil {
			log.Warn("cannot count the failure in Redis", zap.Error(err))
		}
		maxDeliver := w.q.Config().MaxDeliver
		switch {
		case st2.Failures >= w.cfg.Worker.MaxAttempts:
			w.deadLetterRun(ctx, msg, it, log, queue.ReasonOutOfAttempts, errText, runs, dur, lease.CredentialID, out)
		case maxDeliver > 0 && delivered >= uint64(maxDeliver):
			w.deadLetterRun(ctx, msg, it, log, queue.ReasonMaxDeliveries, errText, runs, dur, lease.CredentialID, out)
		default:
			delay := w.cfg.Worker.RetryDelay(st2.Failures)
			w.metrics.Items.WithLabelValues(it.Kind, "retried").Inc()
			log.Warn("job failed: it runs again after the backoff", zap.String("error", errText),
				zap.Int("failures", st2.Failures), zap.Int("max_attempts", w.cfg.Worker.MaxAttempts), zap.Duration("in", delay))
			w.nak(msg, log, delay)
		}
		return false
	}
}

// minCooldown is the cooldown after a rate limit whose Retry-After is 0.
const minCooldown = 100 * time.Millisecond

// failureText is a failed item's error: the reason, then the last error,
// without saying the reason twice (a permanent error already starts with
// it).
func failureText(reason, errText string) string {
	switch {
	case errText == "":
		return reason
	case strings.HasPrefix(errText, reason):
		return errText
	}
	return reason + ": " + errText
}

func (w *Worker) againUnlessDraining(pullCtx context.Context, msg jetstream.Msg, log *zap.Logger) bool {
	if pullCtx.Err() != nil {
		w.nak(msg, log, 0)
		return false
	}
	return true
}

// succeed stores the result, then acks: a crash in between reruns the item
// and overwrites the same result, so nothing is counted twice.
func (w *Worker) succeed(ctx context.Context, msg jetstream.Msg, it queue.Item, runs *itemRuns, dur time.Duration,
	lease *creds.Lease, out jobs.Output, log *zap.Logger) {
	attempt := runs.cur.Runs
	res := w.result(it, queue.OutcomeSucceeded, attempt, dur, lease.CredentialID, "", out)
	res.LeasedAt = lease.Acquired.UTC()
	if err := w.retry(ctx, "storing the result", log, func(c context.Context) error { return w.q.PutResult(c, res) }); err != nil {
		log.Error("could not store the result: the item will run again", zap.Error(err))
		w.settleRun(ctx, runs, log)
		w.nak(msg, log, 0)
		return
	}
	if err := w.retry(ctx, "acknowledging", log, func(c context.Context) error { return queue.Ack(c, msg) }); err != nil {
		log.Error("could not acknowledge: the item will run again after its ack wait", zap.Error(err))
		w.settleRun(ctx, runs, log)
		return
	}
	if err := runs.done(ctx); err != nil {
		log.Debug("forgetting run counters", zap.Error(err))
	}
	w.done.Add(1)
	w.metrics.Items.WithLabelValues(it.Kind, "succeeded").Inc()
	w.metrics.Attempts.WithLabelValues(it.Kind, "succeeded").Observe(float64(attempt))
	log.Debug("item done", zap.Duration("took", dur))
}

// deadLetter gives up on an item that never ran (or whose runs never
// reported).
func (w *Worker) deadLetter(msg jetstream.Msg, it queue.Item, log *zap.Logger, reason, errText string, runs *itemRuns) {
	ctx, cancel := w.settleCtx()
	defer cancel()
	w.deadLetterRun(ctx, msg, it, log, reason, errText, runs, 0, "", jobs.Output{})
}

// deadLetterRun stores the dead-letter record and the failed result, then
// terminates the message (the term deletes it, so the record comes first).
func (w *Worker) deadLetterRun(ctx context.Context, msg jetstream.Msg, it queue.Item, log *zap.Logger, reason, errText string,
	runs *itemRuns, dur time.Duration, credID string, out jobs.Output) {
	st := runs.cur
	dl := queue.DeadLetter{
		Item: it.ID, Batch: it.Batch, Kind: it.Kind, Reason: reason, Attempts: st.Runs, Failures: st.Failures,
		Error: errText, Worker: w.id, FailedAt: time.Now().UTC(), Payload: it.Payload,
	}
	if it.ID == "" {
		dl.Item = fmt.Sprintf("message-%s", msg.Subject())
	}
	if err := w.retry(ctx, "storing the dead letter", log, func(c context.Context) error { return w.q.PutDeadLetter(c, dl) }); err != nil {
		log.Error("could not store the dead letter: handing the item back", zap.Error(err))
		w.nak(msg, log, time.Second)
		return
	}
	res := w.result(queue.Item{ID: dl.Item, Batch: it.Batch, Kind: it.Kind}, queue.OutcomeFailed, st.Runs, dur, credID,
		failureText(reason, errText), out)
	if err := w.retry(ctx, "storing the result", log, func(c context.Context) error { return w.q.PutResult(c, res) }); err != nil {
		log.Error("could not store the failed result: handing the item back", zap.Error(err))
		w.nak(msg, log, time.Second)
		return
	}
	if err := w.retry(ctx, "terminating", log, func(c context.Context) error { return queue.Term(c, w.nc, msg, reason) }); err != nil {
		log.Error("could not terminate the message: it comes back after its ack wait", zap.Error(err))
	}
	if err := runs.done(ctx); err != nil {
		log.Debug("forgetting run counters", zap.Error(err))
	}
	w.failed.Add(1)
	w.metrics.DeadLetters.WithLabelValues(it.Kind, reason).Inc()
	w.metrics.Items.WithLabelValues(it.Kind, "failed").Inc()
	w.metrics.Attempts.WithLabelValues(it.Kind, "failed").Observe(float64(st.Runs))
	log.Error("item failed for good: dead-lettered", zap.String("reason", reason), zap.String("error", errText),
		zap.Int("attempts", st.Runs), zap.Int("failures", st.Failures))
}

// acquire waits for a credential lease. It fails closed: while Redis cannot
// be reached it keeps waiting (the message is kept alive meanwhile) and
// runs nothing. When Redis has lost the pool it registers it again.
func (w *Worker) acquire(pullCtx, itemCtx context.Context, it queue.Item, log *zap.Logger) (*creds.Lease, error) {
	ctx, cancel := context.WithCancelCause(itemCtx)
	defer cancel(nil)
	stop := context.AfterFunc(pullCtx, func() { cancel(errDraining) })
	defer stop()
	owner := w.id + "/" + shorten(it.ID, 64)
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
			log.Warn("the credential pool is empty in Redis (did Redis lose its state?): registering the credentials again")
			if err = w.register(ctx); err == nil {
				continue
			}
		}
		w.redisOK.Store(false)
		w.metrics.RedisUnavailable.Inc()
		log.Warn("cannot reserve a credential: no job runs until Redis answers", zap.Error(err), zap.Duration("retry_in", b.peek()))
		b.wait(ctx)
	}
}

func (w *Worker) releaseLease(l *creds.Lease, log *zap.Logger) {
	ctx, cancel := w.settleCtx()
	defer cancel()
	if err := w.pool.Release(ctx, l); err != nil && !errors.Is(err, creds.ErrLeaseLost) {
		log.Warn("releasing the lease failed; it expires by itself", zap.Error(err))
	}
}

// settleRun records that a run ended without failing.
func (w *Worker) settleRun(ctx context.Context, runs *itemRuns, log *zap.Logger) {
	if err := runs.settle(ctx); err != nil {
		log.Debug("settling run counters", zap.Error(err))
	}
}

func (w *Worker) nak(msg jetstream.Msg, log *zap.Logger, delay time.Duration) {
	ctx, cancel := w.settleCtx()
	defer cancel()
	if err := w.retry(ctx, "nak", log, func(c context.Context) error { return queue.Nak(c, w.nc, msg, delay) }); err != nil {
		log.Warn("nak failed: the message comes back after its ack wait", zap.Error(err))
	}
}

// settleCtx bounds the I/O that settles an item; it is not cancelled by
// shutdown (settling is what shutdown waits for).
func (w *Worker) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), max(w.q.Config().AckWait, 5*time.Second))
}

// retry calls f until it succeeds or ctx ends.
func (w *Worker) retry(ctx context.Context, what string, log *zap.Logger, f func(context.Context) error) error {
	b := newBackoff(50*time.Millisecond, 2*time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		log.Warn(what+" failed; retrying", zap.Error(err))
		b.wait(ctx)
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// rejectCause turns a rejection reason into a bounded metric label.
func rejectCause(kind, reason string) string {
	for _, c := range []string{"401", "402", "403", "insufficient_quota"} {
		if strings.Contains(reason, c) {
			return c
		}
	}
	if kind == "exec" {
		return "exit_77"
	}
	return "other"
}
