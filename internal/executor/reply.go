package executor

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// nak hands the message back for redelivery after delay and says what
// the server was told — nothing if the message may already be another
// worker's: once no in-progress ack was confirmed for an ack wait, the
// server may have redelivered it, and a nak would put it back in the
// queue while the other worker runs it (a third run). Then the ack wait
// brings it back by itself.
func (e *Executor) nak(x *item, delay time.Duration) Reply {
	if !x.keep.Alive() {
		x.log.Info("not handing the item back: its ack wait ran out, so another worker may hold it; it comes back by itself if not")
		return ReplyNone
	}
	ctx, cancel := e.settleCtx()
	defer cancel()
	if err := e.retry(ctx, "nak", x.log, func(c context.Context) error { return x.d.Nak(c, delay) }); err != nil {
		x.log.Warn("nak failed: the message comes back after its ack wait", zap.Error(err))
		return ReplyNone
	}
	return ReplyNak
}

// settleCtx bounds the I/O that settles an item; it is not cancelled by
// shutdown (settling is what shutdown waits for).
func (e *Executor) settleCtx() (context.Context, context.CancelFunc) {
	return e.clock.WithTimeout(context.Background(), e.policy.settleTimeout())
}

// retry calls f until it succeeds or ctx ends (the settle context bounds
// the whole; one timer per item, not one per call).
func (e *Executor) retry(ctx context.Context, what string, log *zap.Logger, f func(context.Context) error) error {
	b := newBackoff(e.clock, 50*time.Millisecond, 2*time.Second)
	for {
		err := f(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		log.Warn(what+" failed; retrying", zap.Error(err))
		b.wait(ctx)
	}
}
