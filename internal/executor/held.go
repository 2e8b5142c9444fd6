package executor

import (
	"context"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// heldBack settles an item whose batch an operator paused or cancelled,
// before it starts: a paused batch's item goes back to its lane (nobody
// pulls the lane until it is resumed), a cancelled batch's item is
// recorded as cancelled and deleted. It reports whether it did.
func (e *Executor) heldBack(x *item) (Outcome, bool) {
	state, _ := e.batches.State(x.it.Batch)
	switch state {
	case kftype.BatchPaused:
		ctx, cancel := e.settleCtx()
		defer cancel()
		if err := x.runs.HandBack(ctx); err != nil {
			x.log.Debug("recording the hand-back", zap.Error(err))
		}
		x.log.Debug("the batch is paused: the item goes back to its lane")
		return x.handedBack(ErrPaused, e.nak(x, 0), 0), true
	case kftype.BatchCancelled:
		ctx, cancel := e.settleCtx()
		defer cancel()
		if err := e.retry(ctx, "recording a cancelled item", x.log, func(c context.Context) error {
			_, err := e.rec.CancelItem(c, x.d, x.it, e.id)
			return err
		}); err != nil {
			x.log.Warn("could not record the cancelled item: it comes back after its ack wait", zap.Error(err))
			return x.handedBack(ErrCancelNotRecorded, ReplyNone, 0), true
		}
		if err := x.runs.Done(ctx); err != nil {
			x.log.Debug("forgetting run counters", zap.Error(err))
		}
		x.log.Info("the batch is cancelled: the item is recorded as cancelled and not run")
		return x.outcome(Cancelled, ReplyTerm), true
	}
	return Outcome{}, false
}
