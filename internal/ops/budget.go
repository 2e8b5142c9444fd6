package ops

import (
	"context"
	"errors"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// BudgetSet is what SetBudget did.
type BudgetSet struct {
	// Batch is the batch's record after the change.
	Batch kftype.BatchInfo
	// Account is the batch's spend after the change.
	Account spend.Account
	// Resumed: the batch was paused for its budget, and the new one covers
	// its next start: it runs again.
	Resumed bool
}

// ErrNoBudgetWithoutProvider: a budget counts what a provider's replies
// say they used (ErrInvalid).
var ErrNoBudgetWithoutProvider error = &Error{Class: ErrInvalid,
	Err: errors.New("a budget counts what a provider's replies say they used: the batch's kind has no provider")}

// SetBudget changes batch's budget to budget: in its record and in the
// spend ledger (which every worker's reservation reads at once), and,
// when the batch was paused for its budget and the new one covers its
// next start (what the last refused start needed), resumes it, by by.
// Its errors: ErrInvalid (the batch ID, an amount not above 0),
// ErrNotFound (no record), ErrConflict (a cancelled batch),
// ErrUnavailable.
func SetBudget(ctx context.Context, q *queue.Queue, l *spend.Ledger, batch string, budget spend.Amount, by string) (BudgetSet, error) {
	if err := queue.CheckID("batch", batch); err != nil {
		return BudgetSet{}, &Error{Class: ErrInvalid, Err: err}
	}
	if budget <= 0 {
		return BudgetSet{}, Errorf(ErrInvalid, "budget %s: must be more than 0", budget)
	}
	rec, err := q.SetBudget(ctx, batch, &budget)
	switch {
	case errors.Is(err, queue.ErrNoBatch):
		return BudgetSet{Batch: rec}, noRecord(batch)
	case errors.Is(err, queue.ErrBatchCancelled):
		return BudgetSet{Batch: rec}, Errorf(ErrConflict, "batch %s is cancelled: its budget cannot change", batch)
	case err != nil:
		return BudgetSet{Batch: rec}, unavailable(err, "setting batch %s's budget", batch)
	}
	acct, err := l.SetBatchBudget(ctx, batch, budget)
	if err != nil {
		return BudgetSet{Batch: rec}, unavailable(err, "setting batch %s's budget", batch)
	}
	out := BudgetSet{Batch: rec, Account: acct}
	if rec.State == kftype.BatchPaused && rec.PausedReason == spend.ReasonBudget && acct.Covers() {
		// Resumed, paused by an operator or cancelled meanwhile: left as
		// it is.
		rec, err = q.ResumeFrom(ctx, batch, spend.ReasonBudget, by)
		if err != nil && !errors.Is(err, queue.ErrBatchState) && !errors.Is(err, queue.ErrBatchCancelled) {
			return out, unavailable(err, "resuming batch %s", batch)
		}
		out.Batch, out.Resumed = rec, err == nil
	}
	return out, nil
}
