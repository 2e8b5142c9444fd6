package executor

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// runResult is what one run produced, for the result record.
type runResult struct {
	dur      time.Duration
	credID   string
	leasedAt time.Time
	out      jobs.Output
	errText  string
	spent    spend.Amount // what it cost at its model's price (0: unknown, or nothing)
}

// runOnce runs the job once on the leased credential, its lease renewed
// meanwhile, and settles the outcome (see judge). It reports whether the
// item should run again at once on another credential (it was rate
// limited or its key refused it).
func (e *Executor) runOnce(pullCtx, itemCtx context.Context, x *item, lease *creds.Lease) (Outcome, bool) {
	it := x.it
	attempt := x.runs.Cur.Runs
	log := x.log.WithLazy(zap.Int("attempt", attempt), zap.String("credential", lease.CredentialID))
	jobCtx, cancelJob := context.WithCancelCause(itemCtx)
	defer cancelJob(nil)
	renewal := e.renewLease(lease, log, cancelJob)
	inFlight := e.metrics.InFlight.WithLabelValues(lease.CredentialID)
	inFlight.Inc()
	log.Debug("job started")
	start := e.clock.Now()
	kind := x.route.ran
	out, jobErr := jobs.SafeRun(jobCtx, x.kind.Handler,
		jobs.Item{ID: it.ID, Batch: it.Batch, Kind: kind, Attempt: attempt, Payload: it.Payload, Endpoint: x.endpoint()},
		jobs.Credential{ID: lease.CredentialID, Secret: e.secrets[lease.CredentialID], URL: e.urls[lease.CredentialID]})
	dur := e.clock.Now().Sub(start)
	inFlight.Dec()
	renewal.Stop()
	e.metrics.JobDuration.WithLabelValues(kind).Observe(dur.Seconds())
	e.metrics.Requests.WithLabelValues(kind, metrics.ViaRealTime).Inc()
	errText := ""
	if jobErr != nil {
		errText = e.scrub.String(jobErr.Error())
	}
	if out.CostNote != "" {
		e.noteOnce("cost:"+kind, func() {
			log.Warn("a job did not report its cost: the estimate stands (said once per kind)", zap.String("why", e.scrub.String(out.CostNote)))
		})
	}
	v := judge(runEnd{err: jobErr, interrupted: context.Cause(jobCtx), out: out, item: queue.MsgID(it.Batch, it.ID)}, e.judging)
	for _, c := range v.cut {
		log.Warn("a reply asked for a rest longer than pool.max_rest: cut to it",
			zap.String("asked", e.scrub.String(c)), zap.Duration("max_rest", e.policy.MaxRest))
	}
	res := runResult{dur: dur, credID: lease.CredentialID, leasedAt: lease.Acquired, out: out, errText: errText,
		spent: e.settleSpend(x, out, jobErr)}
	o, again := e.settle(pullCtx, x, lease, v, res, log, context.Cause(jobCtx))
	o.Took = dur
	return o, again
}
