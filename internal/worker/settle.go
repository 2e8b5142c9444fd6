package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// settle carries out a run's verdict: the lease ends with the run's
// outcome, then the item is acknowledged, handed back, retried later or
// dead-lettered. It reports whether the item runs again at once on another
// credential.
func (w *Worker) settle(pullCtx context.Context, d *delivery, lease *creds.Lease, v verdict, res runResult, log *zap.Logger, why error) (again bool) {
	it := d.it
	ctx, cancel := w.settleCtx()
	defer cancel()
	w.endLease(lease, v.lease, log)
	switch v.label {
	case labelSucceeded:
		w.succeed(ctx, d, res)
		return false

	case labelInterrupted:
		w.settleRun(ctx, d)
		w.metrics.Items.WithLabelValues(it.Kind, "interrupted").Inc()
		log.Info("job interrupted: handed back for immediate redelivery", zap.NamedError("why", why))
		w.nak(d, 0)
		return false

	case labelRateLimited:
		w.metrics.Cooldowns.WithLabelValues(lease.CredentialID, v.restSource).Inc()
		w.metrics.Items.WithLabelValues(it.Kind, "rate_limited").Inc()
		st, err := d.runs.limited(ctx)
		if err != nil {
			log.Debug("counting the rate-limited run", zap.Error(err))
		}
		if text := afterRateLimit(st, w.cfg.Worker.MaxRateLimited, v.reason); text != "" {
			res.errText = text
			w.deadLetterRun(ctx, d, queue.ReasonRateLimited, res)
			return false
		}
		log.Info("credential rate limited: it rests; the item runs again on another credential",
			zap.String("rest_from", v.restSource), zap.Duration("rest", v.lease.Rest), zap.String("reason", v.reason))
		return w.againUnlessDraining(pullCtx, d)

	case labelRejected:
		w.metrics.Rejections.WithLabelValues(lease.CredentialID, rejectCause(it.Kind, v.reason)).Inc()
		w.metrics.Items.WithLabelValues(it.Kind, "rejected").Inc()
		st, err := d.runs.refuse(ctx, lease.CredentialID+"\t"+v.reason)
		if err != nil {
			log.Debug("counting the refusal", zap.Error(err))
		}
		if text := afterRefusal(st, w.kindKeyCount(it.Kind)); text != "" {
			// Several keys refused it: the item's fault, not the keys'.
			res.errText = text
			w.deadLetterRun(ctx, d, queue.ReasonRefused, res)
			return false
		}
		log.Warn("the API refused the run on this credential: the item runs again on another one; "+
			"a credential that refuses several different items in a row is disabled",
			zap.String("reason", v.reason), zap.Int("refusals", st.Refusals))
		return w.againUnlessDraining(pullCtx, d)

	case labelPermanent:
		if _, err := d.runs.fail(ctx); err != nil {
			log.Warn("cannot count the failure in Redis", zap.Error(err))
		}
		w.deadLetterRun(ctx, d, v.dead, res)
		return false

	default: // transient
		st, err := d.runs.fail(ctx)
		if err != nil {
			log.Warn("cannot count the failure in Redis", zap.Error(err))
		}
		dead, delay := afterFailure(st.Failures, d.delivered, failurePolicy{
			maxAttempts: w.cfg.Worker.MaxAttempts, maxDeliver: w.q.Config().MaxDeliver, delay: w.cfg.Worker.RetryDelay,
		})
		if dead != "" {
			w.deadLetterRun(ctx, d, dead, res)
			return false
		}
		w.metrics.Items.WithLabelValues(it.Kind, "retried").Inc()
		log.Warn("job failed: it runs again after the backoff", zap.String("error", res.errText),
			zap.Int("failures", st.Failures), zap.Int("max_attempts", w.cfg.Worker.MaxAttempts), zap.Duration("in", delay))
		w.nak(d, delay)
		return false
	}
}

// endLease ends a run's lease with its outcome, without waiting: the
// lease's end goes to Redis with the process's next pool step (with the
// next item's acquire, often). If the lease was lost meanwhile, what the
// run said about the key (a rest, a rejection) is recorded on the
// credential all the same.
func (w *Worker) endLease(l *creds.Lease, o creds.Outcome, log *zap.Logger) {
	err := w.pool.SettleAsync(l, o, func(err error) {
		if err == nil {
			return
		}
		ctx, cancel := w.settleCtx()
		defer cancel()
		switch {
		case o.Refused != nil:
			// A refusal on a lease that was lost meanwhile is not counted:
			// the key's streak goes on with its next runs.
		case o.Rest > 0:
			if _, rerr := w.pool.Rest(ctx, l.CredentialID, o.Rest, o.RestReason, o.RestCause); rerr != nil {
				log.Warn("could not record the rest", zap.Error(rerr))
			}
		}
		if !errors.Is(err, creds.ErrLeaseLost) {
			log.Warn("releasing the lease failed; it expires by itself", zap.Error(err))
		}
	})
	if err != nil {
		log.Error("the run's outcome is not valid for the pool; the lease expires by itself", zap.Error(err))
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

func (w *Worker) againUnlessDraining(pullCtx context.Context, d *delivery) bool {
	if pullCtx.Err() != nil {
		w.nak(d, 0)
		return false
	}
	return true
}

// succeed stores the result, then acks: a crash in between reruns the item
// and overwrites the same result, so nothing is counted twice. The
// committer does both for many items at once; whichever half of that
// failed is then retried alone, item by item, until the settle context
// ends.
func (w *Worker) succeed(ctx context.Context, d *delivery, r runResult) {
	attempt := d.runs.cur.Runs
	res := w.result(d.it, queue.OutcomeSucceeded, attempt, r.dur, r.credID, "", r.out)
	res.LeasedAt = r.leasedAt.UTC()
	if err := w.commits.Commit(ctx, res, d.msg); err != nil && !w.commitAlone(ctx, d, res, err) {
		return
	}
	if err := d.runs.done(ctx); err != nil {
		d.log.Debug("forgetting run counters", zap.Error(err))
	}
	w.done.Add(1)
	w.metrics.Items.WithLabelValues(d.it.Kind, "succeeded").Inc()
	w.metrics.Attempts.WithLabelValues(d.it.Kind, "succeeded").Observe(float64(attempt))
	d.log.Debug("item done", zap.Duration("took", r.dur))
}

// commitAlone finishes, item by item, the half of a group commit that
// failed (err says which): the result and then the ack, or the ack alone.
// It reports whether the item is acknowledged; if not, it has handed the
// item back or left it to its ack wait.
func (w *Worker) commitAlone(ctx context.Context, d *delivery, res queue.Result, err error) bool {
	if errors.Is(err, queue.ErrResultNotStored) {
		d.log.Warn("storing the result failed; retrying", zap.Error(err))
		if err := w.retry(ctx, "storing the result", d.log, func(c context.Context) error { return w.q.PutResult(c, res) }); err != nil {
			d.log.Error("could not store the result: the item will run again", zap.Error(err))
			w.settleRun(ctx, d)
			w.nak(d, 0)
			return false
		}
	}
	if err := w.retry(ctx, "acknowledging", d.log, func(c context.Context) error { return queue.Ack(c, d.msg) }); err != nil {
		d.log.Error("could not acknowledge: the item will run again after its ack wait", zap.Error(err))
		w.settleRun(ctx, d)
		return false
	}
	return true
}

// deadLetter gives up on an item that never ran (or whose runs never
// reported).
func (w *Worker) deadLetter(d *delivery, reason, errText string) {
	ctx, cancel := w.settleCtx()
	defer cancel()
	w.deadLetterRun(ctx, d, reason, runResult{errText: errText})
}

// deadLetterRun stores the dead-letter record and the failed result, then
// terminates the message (the term deletes it, so the record comes first).
func (w *Worker) deadLetterRun(ctx context.Context, d *delivery, reason string, r runResult) {
	st, it := d.runs.cur, d.it
	dl := queue.DeadLetter{DeadLetterSummary: queue.DeadLetterSummary{
		Item: it.ID, Batch: it.Batch, Kind: it.Kind, Scope: it.Scope, Endpoint: it.Endpoint, Reason: reason, Attempts: st.Runs, Failures: st.Failures,
		Error: r.errText, Worker: w.id, FailedAt: time.Now().UTC(),
	}, Payload: it.Payload}
	if it.ID == "" {
		dl.Item = fmt.Sprintf("message-%s", d.msg.Subject())
	}
	if err := w.retry(ctx, "storing the dead letter", d.log, func(c context.Context) error { return w.q.PutDeadLetter(c, dl) }); err != nil {
		d.log.Error("could not store the dead letter: handing the item back", zap.Error(err))
		w.nak(d, time.Second)
		return
	}
	res := w.result(queue.Item{ID: dl.Item, Batch: it.Batch, Kind: it.Kind}, queue.OutcomeFailed, st.Runs, r.dur, r.credID,
		failureText(reason, r.errText), r.out)
	if err := w.retry(ctx, "storing the result", d.log, func(c context.Context) error { return w.q.PutResult(c, res) }); err != nil {
		d.log.Error("could not store the failed result: handing the item back", zap.Error(err))
		w.nak(d, time.Second)
		return
	}
	if err := w.retry(ctx, "terminating", d.log, func(c context.Context) error { return queue.Term(c, w.nc, d.msg, reason) }); err != nil {
		d.log.Error("could not terminate the message: it comes back after its ack wait", zap.Error(err))
	}
	if err := d.runs.done(ctx); err != nil {
		d.log.Debug("forgetting run counters", zap.Error(err))
	}
	w.failed.Add(1)
	w.metrics.DeadLetters.WithLabelValues(it.Kind, reason).Inc()
	w.metrics.Items.WithLabelValues(it.Kind, "failed").Inc()
	w.metrics.Attempts.WithLabelValues(it.Kind, "failed").Observe(float64(st.Runs))
	d.log.Error("item failed for good: dead-lettered", zap.String("reason", reason), zap.String("error", r.errText),
		zap.Int("attempts", st.Runs), zap.Int("failures", st.Failures))
}

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

func (w *Worker) releaseLease(ctx context.Context, l *creds.Lease, log *zap.Logger) {
	if err := w.pool.Release(ctx, l); err != nil && !errors.Is(err, creds.ErrLeaseLost) {
		log.Warn("releasing the lease failed; it expires by itself", zap.Error(err))
	}
}

// releaseAbandoned releases a lease whose run never started: the pool
// learns nothing about the key from it.
func (w *Worker) releaseAbandoned(l *creds.Lease, log *zap.Logger) {
	ctx, cancel := w.settleCtx()
	defer cancel()
	if err := w.pool.ReleaseUnused(ctx, l); err != nil && !errors.Is(err, creds.ErrLeaseLost) {
		log.Warn("releasing the lease failed; it expires by itself", zap.Error(err))
	}
}

// settleRun records that a run ended without failing.
func (w *Worker) settleRun(ctx context.Context, d *delivery) {
	if err := d.runs.settle(ctx); err != nil {
		d.log.Debug("settling run counters", zap.Error(err))
	}
}

// nak hands the message back for redelivery after delay — unless it may
// already be another worker's: once no in-progress ack was confirmed for an
// ack wait, the server may have redelivered it, and a nak would put it back
// in the queue while the other worker runs it (a third run). Then the ack
// wait brings it back by itself.
func (w *Worker) nak(d *delivery, delay time.Duration) {
	if !d.keep.Alive() {
		d.log.Info("not handing the item back: its ack wait ran out, so another worker may hold it; it comes back by itself if not")
		return
	}
	ctx, cancel := w.settleCtx()
	defer cancel()
	if err := w.retry(ctx, "nak", d.log, func(c context.Context) error { return queue.Nak(c, w.nc, d.msg, delay) }); err != nil {
		d.log.Warn("nak failed: the message comes back after its ack wait", zap.Error(err))
	}
}

// settleCtx bounds the I/O that settles an item; it is not cancelled by
// shutdown (settling is what shutdown waits for).
func (w *Worker) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), max(w.q.Config().AckWait, 5*time.Second))
}

// retry calls f until it succeeds or ctx ends (the settle context bounds
// the whole; one timer per item, not one per call).
func (w *Worker) retry(ctx context.Context, what string, log *zap.Logger, f func(context.Context) error) error {
	b := newBackoff(50*time.Millisecond, 2*time.Second)
	for {
		err := f(ctx)
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
