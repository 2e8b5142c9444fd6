package executor

import (
	"context"
	"errors"
	"strings"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// settle carries out a run's verdict: the lease ends with the run's
// outcome, then the item is acknowledged, handed back, retried later or
// dead-lettered. It reports whether the item runs again at once on another
// credential.
func (e *Executor) settle(pullCtx context.Context, x *item, lease *creds.Lease, v verdict, res runResult, log *zap.Logger, why error) (Outcome, bool) {
	ctx, cancel := e.settleCtx()
	defer cancel()
	e.endLease(lease, v.lease, log)
	switch v.label {
	case labelSucceeded:
		e.served(x)
		return e.succeed(ctx, x, res), false

	case labelInterrupted:
		if err := x.runs.Settle(ctx); err != nil {
			x.log.Debug("settling run counters", zap.Error(err))
		}
		log.Info("job interrupted: handed back for immediate redelivery", zap.NamedError("why", why))
		o := x.outcome(Interrupted, e.nak(x, 0))
		o.Cause = why
		return o, false

	case labelRateLimited:
		e.metrics.Cooldowns.WithLabelValues(lease.CredentialID, v.restSource).Inc()
		e.metrics.Items.WithLabelValues(x.route.ran, "rate_limited").Inc()
		st, err := x.runs.Limited(ctx)
		if err != nil {
			log.Debug("counting the rate-limited run", zap.Error(err))
		}
		if text := afterRateLimit(st, e.policy.MaxRateLimited, v.reason); text != "" {
			res.errText = text
			return e.deadLetterRun(ctx, x, kftype.ReasonRateLimited, res), false
		}
		log.Info("credential rate limited: it rests; the item runs again on another credential",
			zap.String("rest_from", v.restSource), zap.Duration("rest", v.lease.Rest), zap.String("reason", v.reason))
		return e.againUnlessDraining(pullCtx, x)

	case labelRejected:
		e.metrics.Rejections.WithLabelValues(lease.CredentialID, rejectCause(x.route.ran, v.reason)).Inc()
		e.metrics.Items.WithLabelValues(x.route.ran, "rejected").Inc()
		st, err := x.runs.Refuse(ctx, lease.CredentialID+"\t"+v.reason)
		if err != nil {
			log.Debug("counting the refusal", zap.Error(err))
		}
		if text := afterRefusal(st, x.kind.KeyCount); text != "" {
			// Several keys refused it: the item's fault, not the keys'.
			res.errText = text
			return e.deadLetterRun(ctx, x, kftype.ReasonRefused, res), false
		}
		log.Warn("the API refused the run on this credential: the item runs again on another one; "+
			"a credential that refuses several different items in a row is disabled",
			zap.String("reason", v.reason), zap.Int("refusals", st.Refusals))
		return e.againUnlessDraining(pullCtx, x)

	case labelPermanent:
		if _, err := x.runs.Fail(ctx); err != nil {
			log.Warn("cannot count the failure in Redis", zap.Error(err))
		}
		return e.deadLetterRun(ctx, x, v.dead, res), false

	default: // transient
		failing := failingKey(x, lease.CredentialID, res.out)
		st, err := x.runs.FailOn(ctx, failing)
		if err != nil {
			log.Warn("cannot count the failure in Redis", zap.Error(err))
		}
		if e.movesOn(x, st, failing) {
			// Before its attempts are looked at: the fallback is what
			// its kind's operator asked for when its keys fail.
			return e.againUnlessDraining(pullCtx, x)
		}
		dead, delay := afterFailure(st.Failures, x.delivered, failurePolicy{
			maxAttempts: e.policy.MaxAttempts, maxDeliver: e.policy.MaxDeliver, delay: e.policy.RetryDelay,
		})
		if dead != "" {
			return e.deadLetterRun(ctx, x, dead, res), false
		}
		if e.retriesAtOnce(x, failing) {
			log.Info("job failed on a kind whose items are moving to its fallback: it runs again at once", zap.String("error", res.errText))
			return e.againUnlessDraining(pullCtx, x)
		}
		log.Warn("job failed: it runs again after the backoff", zap.String("error", res.errText),
			zap.Int("failures", st.Failures), zap.Int("max_attempts", e.policy.MaxAttempts), zap.Duration("in", delay))
		o := x.outcome(Retried, e.nak(x, delay))
		if o.Reply == ReplyNak {
			o.Delay = delay
		}
		return o, false
	}
}

// againUnlessDraining runs the item again at once, unless the worker is
// shutting down: then it goes back for immediate redelivery.
func (e *Executor) againUnlessDraining(pullCtx context.Context, x *item) (Outcome, bool) {
	if pullCtx.Err() != nil {
		return x.handedBack(ErrDraining, e.nak(x, 0), 0), false
	}
	return Outcome{}, true
}

// endLease ends a run's lease with its outcome, without waiting: the
// lease's end goes to Redis with the process's next pool step (with the
// next item's acquire, often). If the lease was lost meanwhile, what the
// run said about the key (a rest) is recorded on the credential all the
// same.
func (e *Executor) endLease(l *creds.Lease, o creds.Outcome, log *zap.Logger) {
	err := e.pool.SettleAsync(l, o, func(err error) {
		if err == nil {
			return
		}
		ctx, cancel := e.settleCtx()
		defer cancel()
		switch {
		case o.Refused != nil:
			// A refusal on a lease that was lost meanwhile is not counted:
			// the key's streak goes on with its next runs.
		case o.Rest > 0:
			if _, rerr := e.pool.Rest(ctx, l.CredentialID, o.Rest, o.RestReason, o.RestCause); rerr != nil {
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

// releaseUnused releases a lease whose run never started: the pool learns
// nothing about the key from it.
func (e *Executor) releaseUnused(l *creds.Lease, log *zap.Logger) {
	ctx, cancel := e.settleCtx()
	defer cancel()
	if err := e.pool.ReleaseUnused(ctx, l); err != nil && !errors.Is(err, creds.ErrLeaseLost) {
		log.Warn("releasing the lease failed; it expires by itself", zap.Error(err))
	}
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
