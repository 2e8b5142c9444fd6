// Package ops holds the operators' actions on the fleet, each written
// once for every front end (the producer CLI, the dashboard's HTTP API):
// what an action does, in what order, and its typed errors; a front end
// maps those to its exit codes or statuses, and says it in its own way.
package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// BudgetSet is what SetBudget did.
type BudgetSet struct {
	// Batch is the batch's record after the change.
	Batch queue.BatchInfo
	// Account is the batch's spend after the change.
	Account spend.Account
	// Resumed: the batch was paused for its budget, and the new one covers
	// its next start: it runs again.
	Resumed bool
}

// ErrNoBudgetWithoutProvider: a budget counts what a provider's replies
// say they used.
var ErrNoBudgetWithoutProvider = errors.New("a budget counts what a provider's replies say they used: the batch's kind has no provider")

// SetBudget changes batch's budget to budget: in its record and in the
// spend ledger (which every worker's reservation reads at once), and,
// when the batch was paused for its budget and the new one covers its
// next start (what the last refused start needed), resumes it, by by.
// Its errors: queue.ErrNoBatch, queue.ErrBatchCancelled, or a server's.
func SetBudget(ctx context.Context, q *queue.Queue, l *spend.Ledger, batch string, budget spend.Amount, by string) (BudgetSet, error) {
	if budget <= 0 {
		return BudgetSet{}, fmt.Errorf("budget %s: must be more than 0", budget)
	}
	rec, err := q.SetBudget(ctx, batch, &budget)
	if err != nil {
		return BudgetSet{Batch: rec}, err
	}
	acct, err := l.SetBatchBudget(ctx, batch, budget)
	if err != nil {
		return BudgetSet{Batch: rec}, err
	}
	out := BudgetSet{Batch: rec, Account: acct}
	if rec.Status() == queue.BatchPaused && rec.PausedReason == spend.ReasonBudget && acct.Covers() {
		if rec, err = q.SetBatchState(ctx, batch, queue.ActionResume, by); err != nil && !errors.Is(err, queue.ErrBatchState) {
			return out, err
		}
		out.Batch, out.Resumed = rec, err == nil
	}
	return out, nil
}
