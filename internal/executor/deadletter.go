package executor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// deadLetter gives up on an item that never ran (or whose runs never
// reported).
func (e *Executor) deadLetter(x *item, reason, errText string) Outcome {
	ctx, cancel := e.settleCtx()
	defer cancel()
	return e.deadLetterRun(ctx, x, reason, runResult{errText: errText})
}

// deadLetterRun stores the dead-letter record and the failed result, then
// terminates the message (the term deletes it, so the records come
// first). A record that cannot be stored hands the item back instead.
func (e *Executor) deadLetterRun(ctx context.Context, x *item, reason string, r runResult) Outcome {
	st, it := x.runs.Cur, x.it
	dl := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{
		Item: it.ID, Batch: it.Batch, Kind: it.Kind, Scope: it.Scope, Endpoint: it.Endpoint, Reason: reason, Attempts: st.Runs, Failures: st.Failures,
		Error: r.errText, Worker: e.id, FailedAt: e.clock.Now().UTC(),
	}, Payload: it.Payload}
	if it.ID == "" {
		dl.Item = fmt.Sprintf("message-%s", x.d.Subject())
	}
	if err := e.retry(ctx, "storing the dead letter", x.log, func(c context.Context) error { return e.rec.PutDeadLetter(c, dl) }); err != nil {
		x.log.Error("could not store the dead letter: handing the item back", zap.Error(err))
		return x.handedBack(ErrResultNotStored, e.nak(x, recordWait), recordWait)
	}
	res := e.result(kftype.Item{ID: dl.Item, Batch: it.Batch, Kind: it.Kind}, kftype.OutcomeFailed, st.Runs, r.dur, r.credID,
		failureText(reason, r.errText), r.out)
	res.Spend = r.spent
	x.tag(&res)
	if err := e.retry(ctx, "storing the result", x.log, func(c context.Context) error { return e.rec.PutResult(c, res) }); err != nil {
		x.log.Error("could not store the failed result: handing the item back", zap.Error(err))
		return x.handedBack(ErrResultNotStored, e.nak(x, recordWait), recordWait)
	}
	reply := ReplyTerm
	if err := e.retry(ctx, "terminating", x.log, func(c context.Context) error { return x.d.Term(c, reason) }); err != nil {
		x.log.Error("could not terminate the message: it comes back after its ack wait", zap.Error(err))
		reply = ReplyNone
	}
	if err := x.runs.Done(ctx); err != nil {
		x.log.Debug("forgetting run counters", zap.Error(err))
	}
	x.log.Error("item failed for good: dead-lettered", zap.String("reason", reason), zap.String("error", r.errText),
		zap.Int("attempts", st.Runs), zap.Int("failures", st.Failures))
	o := x.outcome(DeadLettered, reply)
	o.Reason = reason
	return o
}

// recordWait is how long an item whose record could not be stored waits
// before it comes back.
const recordWait = time.Second

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
