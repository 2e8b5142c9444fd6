package spend

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// A tenant's budget can be changed for the running fleet (`producer
// tenant set`): its live budget, kept in the ledger's Redis beside the
// accounts, overrides the configured one at every reservation from then
// on (Reserve reads it in the same step: no worker restarts, no extra
// round trip). The configuration's budget stays what a fleet starts
// from: a live budget holds until it is dropped (SetTenantBudget with
// nil), or until a worker starts with a configured budget of the tenant
// other than the one the fleet last started from (RegisterTenants), as
// a credential's limits set at run time give way to a changed
// definition.

// Where a tenant's budget in force comes from (TenantView.Source).
const (
	SourceConfig = "config" // the configuration's
	SourceLive   = "live"   // set for the running fleet
	SourceNone   = "none"   // the tenant has no budget
)

// TenantView is a tenant's budget in force and its account in the
// budget's current period.
type TenantView struct {
	// Budget is the budget in force (nil: none); Source says where it
	// comes from.
	Budget *Budget
	Source string
	// Period is the ID of the budget's current period (2026-11-27,
	// 2026-W48, 2026-11); of the day for a tenant without a budget.
	Period string
	// Account is the tenant's spend in Period; its Budget is Budget's
	// amount (NoLimit: none), so Covers tells whether the next start fits.
	Account Account
	// SetAt and SetBy say when and by whom the live budget was set (zero
	// unless Source is SourceLive).
	SetAt time.Time
	SetBy string
}

// SetTenantBudget sets tenant's live budget to budget (nil: drops it,
// and the configured one applies again), by by, and returns the
// tenant's view after the change. configured is the tenant's budget in
// the configuration (nil: none); the fleet's record of it is written
// here only if no worker has written it yet.
func (l *Ledger) SetTenantBudget(ctx context.Context, tenant string, budget, configured *Budget, by string, now time.Time) (TenantView, error) {
	amount, kind := int64(NoLimit), ""
	if budget != nil {
		amount, kind = int64(budget.Amount), budget.Period
	}
	cl, ck := budgetArgs(configured)
	args := append([]any{"tenant-set", tenant, amount, kind, by, cl, ck}, periodNames(now)...)
	reply, err := ledgerScript.Run(ctx, l.rdb, []string{l.key}, args...).StringSlice()
	if err != nil {
		return TenantView{}, fmt.Errorf("spend: set the budget of tenant %q: %w", tenant, err)
	}
	return tenantView(reply)
}

// Tenant returns tenant's view at now: its live budget if it has one,
// else configured (nil: none).
func (l *Ledger) Tenant(ctx context.Context, tenant string, configured *Budget, now time.Time) (TenantView, error) {
	cl, ck := budgetArgs(configured)
	args := append([]any{"tenant-read", tenant, cl, ck}, periodNames(now)...)
	reply, err := ledgerScript.Run(ctx, l.rdb, []string{l.key}, args...).StringSlice()
	if err != nil {
		return TenantView{}, fmt.Errorf("spend: read tenant %q: %w", tenant, err)
	}
	return tenantView(reply)
}

// RegisterTenants records the configured budgets a worker starts from,
// by tenant (nil: none). A tenant whose configured budget differs from
// the one recorded before loses its live budget: the configuration was
// changed since, and the change wins. It returns those tenants.
func (l *Ledger) RegisterTenants(ctx context.Context, configured map[string]*Budget) ([]string, error) {
	if len(configured) == 0 {
		return nil, nil
	}
	args := []any{"tenant-register"}
	for name, b := range configured {
		cl, ck := budgetArgs(b)
		args = append(args, name, cl, ck)
	}
	dropped, err := ledgerScript.Run(ctx, l.rdb, []string{l.key}, args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("spend: register the tenants' budgets: %w", err)
	}
	return dropped, nil
}

// budgetArgs are b's amount and kind as the script takes them.
func budgetArgs(b *Budget) (int64, string) {
	if b == nil {
		return int64(NoLimit), ""
	}
	return int64(b.Amount), b.Period
}

// tenantView decodes the script's view of a tenant.
func tenantView(reply []string) (TenantView, error) {
	if len(reply) != 9 {
		return TenantView{}, fmt.Errorf("spend: tenant: unexpected reply %q", reply)
	}
	v := TenantView{Source: reply[0], Period: reply[3], SetBy: reply[8]}
	v.Account = Account{Spent: parseAmount(reply, 4), Reserved: parseAmount(reply, 5), Need: parseAmount(reply, 6), Budget: NoLimit}
	if v.Source != SourceNone {
		b := Budget{Amount: parseAmount(reply, 1), Period: reply[2]}
		v.Budget, v.Account.Budget = &b, b.Amount
	}
	if us, err := strconv.ParseInt(reply[7], 10, 64); err == nil && us > 0 {
		v.SetAt = time.UnixMicro(us).UTC()
	}
	return v, nil
}
