package ops

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/status"
)

// NoTenantBudget is what an operator gives for a tenant's budget to drop
// its live one (`producer tenant set NAME --budget none`, {"budget":
// "none"}): the configured budget applies again.
const NoTenantBudget = "none"

// TenantBudgetSet is what SetTenantBudget did; as JSON, what `producer
// tenant set --json` and POST /api/tenants/{name}/budget answer.
type TenantBudgetSet struct {
	// Tenant is the tenant after the change: its budget in force, where
	// it comes from, its spend in the current period.
	status.Tenant
	// Resumed are the tenant's batches that were paused for its budget
	// and run again: the budget in force covers their next start.
	Resumed []string `json:"resumed"`
}

// ParseTenantBudget reads a tenant's budget as an operator gives it:
// AMOUNT/PERIOD (period d, w or mo), above 0, or NoTenantBudget (nil:
// drop the live budget). Its error is ErrInvalid.
func ParseTenantBudget(s string) (*spend.Budget, error) {
	if strings.EqualFold(strings.TrimSpace(s), NoTenantBudget) {
		return nil, nil
	}
	b, err := spend.ParseBudget(s)
	if err != nil {
		return nil, Errorf(ErrInvalid, "%v; or %s, to drop the live budget", err, NoTenantBudget)
	}
	if b.Amount <= 0 {
		return nil, Errorf(ErrInvalid, "%q: the amount must be more than 0 (to stop a tenant's batches, pause them)", s)
	}
	return &b, nil
}

// CheckTenantBudget checks a change of tenant name's live budget against
// the configuration's tenants, before any server is asked, and returns
// the tenant's spec. A tenant the configuration does not name is not
// found: its batches could not be enqueued. One without a configured
// budget is a conflict: its batches were enqueued without the checks a
// budget needs (every request's max_tokens) and its starts reserve
// nothing, so a budget can be given it only in the configuration.
func CheckTenantBudget(tenants []status.TenantSpec, name string) (status.TenantSpec, error) {
	if err := queue.CheckTenant(name); err != nil {
		return status.TenantSpec{}, &Error{Class: ErrInvalid, Err: err}
	}
	i := slices.IndexFunc(tenants, func(t status.TenantSpec) bool { return t.Name == name })
	if i < 0 {
		names := make([]string, 0, len(tenants))
		for _, t := range tenants {
			names = append(names, t.Name)
		}
		if len(names) == 0 {
			return status.TenantSpec{}, Errorf(ErrNotFound, "tenant %q is not in the configuration (it names no tenants)", name)
		}
		return status.TenantSpec{}, Errorf(ErrNotFound, "tenant %q is not in the configuration (tenants: %s)", name, strings.Join(names, ", "))
	}
	sp := tenants[i]
	if sp.Budget == nil {
		return sp, Errorf(ErrConflict, "tenant %q has no budget in the configuration: a live budget changes a configured one "+
			"(its batches were enqueued without the checks a budget needs); give tenants.%s a budget: AMOUNT/PERIOD", name, name)
	}
	return sp, nil
}

// SetTenantBudget sets tenant name's live budget to budget (nil: drops
// it, and the configured one applies again) in the spend ledger, which
// every worker's next reservation reads, by by. Then, when the budget in
// force covers the tenant's next start (what the last refused one
// needed), it resumes the tenant's batches paused for its budget; a
// batch paused by an operator, or resumed or cancelled meanwhile, is
// left as it is. tenants are the configuration's (CheckTenantBudget).
// Its errors: ErrInvalid, ErrNotFound, ErrConflict (CheckTenantBudget),
// ErrUnavailable (the error says whether the budget was set).
func SetTenantBudget(ctx context.Context, q *queue.Queue, l *spend.Ledger, tenants []status.TenantSpec, name string,
	budget *spend.Budget, by string) (TenantBudgetSet, error) {
	sp, err := CheckTenantBudget(tenants, name)
	if err != nil {
		return TenantBudgetSet{}, err
	}
	if budget != nil && budget.Amount <= 0 {
		return TenantBudgetSet{}, Errorf(ErrInvalid, "budget %s: the amount must be more than 0", budget)
	}
	now := time.Now()
	v, err := l.SetTenantBudget(ctx, name, budget, sp.Budget, by, now)
	if err != nil {
		return TenantBudgetSet{}, unavailable(err, "setting tenant %s's budget", name)
	}
	out := TenantBudgetSet{Tenant: status.TenantOf(sp, v, now), Resumed: []string{}}
	if !v.Account.Covers() {
		return out, nil
	}
	batches, err := q.Batches(ctx)
	if err != nil {
		return out, unavailable(err, "tenant %s's budget is set; listing its batches to resume those paused for it", name)
	}
	for _, b := range batches {
		if b.Tenant != name || b.State != kftype.BatchPaused || b.PausedReason != spend.ReasonTenantBudget {
			continue
		}
		_, err := q.ResumeFrom(ctx, b.ID, spend.ReasonTenantBudget, by)
		switch {
		case err == nil:
			out.Resumed = append(out.Resumed, b.ID)
		case errors.Is(err, queue.ErrBatchState), errors.Is(err, queue.ErrBatchCancelled):
		default:
			return out, unavailable(err, "tenant %s's budget is set; resuming its batch %s", name, b.ID)
		}
	}
	return out, nil
}
