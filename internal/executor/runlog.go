package executor

import (
	"context"
	"strings"
)

// RunLog keeps each item's run counters, shared by the fleet, so that
// every worker agrees on KEYFLEET_ATTEMPT and max_attempts. The worker's
// is a Redis script (worker/runs.lua), which documents each op.
type RunLog interface {
	// Do applies op to the counters of item id of batch, on its
	// delivery-th delivery; held is the run number the caller holds (a
	// first run it did not record at its start), text a refusal
	// ("<credential>\t<reason>", op refuse) or the credential of a failure
	// that counts toward a fallback (op fail; "" none). It returns the
	// counters after the op.
	Do(ctx context.Context, batch, id, op string, delivery uint64, held int, text string) (RunCount, error)
}

// Ops of a RunLog.
const (
	OpStart   = "start"   // a run begins; earlier runs that never reported count as failed
	OpFail    = "fail"    // the run failed (transient, permanent)
	OpSettle  = "settle"  // the run ended without failing (interrupted)
	OpLimited = "limited" // the run was rate limited
	OpRefuse  = "refuse"  // a key refused the run
	OpNoRun   = "norun"   // this delivery ends without running the item again
	OpDone    = "done"    // the item's final outcome: forget it
	OpPeek    = "peek"    // read only
)

// RunCount is an item's counters.
type RunCount struct {
	Runs, Failures int
	// Lost: earlier runs that never reported (their workers died), counted
	// as failures now.
	Lost int
	// Limited: the rate-limited runs in a row (a failed or refused run
	// ends the row).
	Limited int
	// Refusals: the runs a key refused (401, 402, 403, quota, exit 77);
	// Refused their texts, one a line ("<credential>\t<reason>").
	Refusals int
	Refused  string
	// Streak: the credentials of the last failed runs in a row that count
	// toward a fallback (FailOn), one a line, at most 4; a failure that
	// does not count, a rate-limited or a refused run ends the row.
	Streak string
}

// ItemRuns tracks one delivery of an item in a RunLog. The first run of an
// item's first delivery is not recorded when it starts (most items succeed
// at once, and then nothing is written at all); every later event is. If
// the log loses its state, the deliveries JetStream counted stand in for
// the lost runs.
type ItemRuns struct {
	log       RunLog
	batch, id string
	delivery  uint64
	// wrote: the log may hold counters for the item (an earlier delivery
	// or this one wrote them), so the final outcome must delete them.
	wrote bool
	// reported: this delivery's last op closed it in the log (a run that
	// reported its end, or a norun): the next delivery counts nothing
	// lost for it.
	reported bool
	// Cur is what the delivery knows of the item's counters.
	Cur RunCount
}

// NewItemRuns tracks the delivery-th delivery of item id of batch.
func NewItemRuns(log RunLog, batch, id string, delivery uint64) *ItemRuns {
	r := &ItemRuns{}
	r.init(log, batch, id, delivery)
	return r
}

func (r *ItemRuns) init(log RunLog, batch, id string, delivery uint64) {
	*r = ItemRuns{log: log, batch: batch, id: id, delivery: delivery, wrote: delivery > 1}
}

func (r *ItemRuns) do(ctx context.Context, op, text string) (RunCount, error) {
	st, err := r.log.Do(ctx, r.batch, r.id, op, r.delivery, r.Cur.Runs, text)
	if err != nil {
		return RunCount{}, err
	}
	r.wrote = true
	switch op {
	case OpPeek:
	case OpStart:
		r.reported = false
	default:
		r.reported = true
	}
	return st, nil
}

// Start begins a run and returns its number (and what was lost before).
func (r *ItemRuns) Start(ctx context.Context) (RunCount, error) {
	if !r.wrote && r.Cur.Runs == 0 {
		// The first run of the first delivery: nothing to write yet.
		r.Cur = RunCount{Runs: 1}
		return r.Cur, nil
	}
	st, err := r.do(ctx, OpStart, "")
	if err == nil {
		r.Cur = st
	}
	return st, err
}

// Fail records that the current run failed.
func (r *ItemRuns) Fail(ctx context.Context) (RunCount, error) { return r.FailOn(ctx, "") }

// FailOn records that the current run failed on credential, a failure
// that counts toward a fallback ("" one that does not).
func (r *ItemRuns) FailOn(ctx context.Context, credential string) (RunCount, error) {
	st, err := r.do(ctx, OpFail, credential)
	if err != nil {
		st = RunCount{Runs: r.Cur.Runs, Failures: r.Cur.Failures + 1}
		if credential != "" {
			st.Streak = strings.TrimPrefix(r.Cur.Streak+"\n"+credential, "\n")
		}
	}
	r.Cur = st
	return st, err
}

// Settle records that the current run ended without a failure
// (interrupted).
func (r *ItemRuns) Settle(ctx context.Context) error {
	st, err := r.do(ctx, OpSettle, "")
	if err == nil {
		r.Cur = st
	}
	return err
}

// Peek reads what earlier deliveries recorded (the keys that refused the
// item, above all), writing nothing.
func (r *ItemRuns) Peek(ctx context.Context) error {
	st, err := r.do(ctx, OpPeek, "")
	if err == nil {
		r.Cur = st
	}
	return err
}

// Limited records that the current run was rate limited; the count says
// how many in a row.
func (r *ItemRuns) Limited(ctx context.Context) (RunCount, error) {
	st, err := r.do(ctx, OpLimited, "")
	if err != nil {
		st = RunCount{Runs: r.Cur.Runs, Failures: r.Cur.Failures, Limited: r.Cur.Limited + 1}
	}
	r.Cur = st
	return st, err
}

// Refuse records that a key refused the current run; text is
// "<credential>\t<reason>".
func (r *ItemRuns) Refuse(ctx context.Context, text string) (RunCount, error) {
	st, err := r.do(ctx, OpRefuse, text)
	if err != nil {
		st = r.Cur
		st.Refusals++
		st.Refused = strings.TrimPrefix(st.Refused+"\n"+text, "\n")
	}
	r.Cur = st
	return st, err
}

// NoRun records that this delivery ends without running the item again.
func (r *ItemRuns) NoRun(ctx context.Context) error {
	_, err := r.do(ctx, OpNoRun, "")
	return err
}

// HandBack records that this delivery ends before running the item again
// (shutdown, a paused batch, its class waiting), so the next delivery
// counts no lost run for it.
//
// A delivery after the first holds the counts of earlier ones (its peek):
// unless this delivery itself reported, it must say so, or the next
// delivery counts it as a run that died.
func (r *ItemRuns) HandBack(ctx context.Context) error {
	if r.reported {
		return nil // this delivery's last run already reported (settle or fail)
	}
	return r.NoRun(ctx)
}

// Done forgets the item at its final outcome.
func (r *ItemRuns) Done(ctx context.Context) error {
	if !r.wrote {
		return nil // nothing was ever written
	}
	_, err := r.do(ctx, OpDone, "")
	return err
}
