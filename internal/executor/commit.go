package executor

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// succeed stores the result, then acks: a crash in between reruns the item
// and overwrites the same result, so nothing is counted twice. The
// recorder does both for many items at once; whichever half of that
// failed is then retried alone, item by item, until the settle context
// ends.
func (e *Executor) succeed(ctx context.Context, x *item, r runResult) Outcome {
	attempt := x.runs.Cur.Runs
	res := e.result(x.it, kftype.OutcomeSucceeded, attempt, r.dur, r.credID, "", r.out)
	res.LeasedAt, res.Spend = r.leasedAt.UTC(), r.spent
	x.tag(&res)
	if err := e.rec.Commit(ctx, res, x.d); err != nil {
		if o, ok := e.commitAlone(ctx, x, res, err); !ok {
			return o
		}
	}
	if err := x.runs.Done(ctx); err != nil {
		x.log.Debug("forgetting run counters", zap.Error(err))
	}
	x.log.Debug("item done", zap.Duration("took", r.dur))
	return x.outcome(Succeeded, ReplyAck)
}

// commitAlone finishes, item by item, the half of a group commit that
// failed (err says which): the result and then the ack, or the ack alone.
// It reports whether the item is acknowledged; if not, it has handed the
// item back or left it to its ack wait, and says so.
func (e *Executor) commitAlone(ctx context.Context, x *item, res kftype.Result, err error) (Outcome, bool) {
	if errors.Is(err, queue.ErrResultNotStored) {
		x.log.Warn("storing the result failed; retrying", zap.Error(err))
		if err := e.retry(ctx, "storing the result", x.log, func(c context.Context) error { return e.rec.PutResult(c, res) }); err != nil {
			x.log.Error("could not store the result: the item will run again", zap.Error(err))
			e.settleRun(ctx, x)
			return x.handedBack(ErrResultNotStored, e.nak(x, 0), 0), false
		}
	}
	if err := e.retry(ctx, "acknowledging", x.log, x.d.Ack); err != nil {
		x.log.Error("could not acknowledge: the item will run again after its ack wait", zap.Error(err))
		e.settleRun(ctx, x)
		return x.handedBack(ErrAckNotConfirmed, ReplyNone, 0), false
	}
	return Outcome{}, true
}

// settleRun records that a run ended without failing.
func (e *Executor) settleRun(ctx context.Context, x *item) {
	if err := x.runs.Settle(ctx); err != nil {
		x.log.Debug("settling run counters", zap.Error(err))
	}
}
