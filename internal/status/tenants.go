package status

import (
	"context"
	"time"

	"github.com/keyfleet/keyfleet/internal/spend"
)

// Tenant is one tenant of the report: its weight, its budget in force and
// what its batches spent in the current period (`status --json`'s
// "tenants", `tenant list --json`, GET /api/tenants).
type Tenant struct {
	Name   string `json:"name"`
	Weight int    `json:"weight"`
	// Budget is what the tenant may spend a period (null: no budget);
	// Period names the period (d, w, mo) and PeriodID the current one
	// (2026-11-27, 2026-W48, 2026-11), PeriodEnd when it ends.
	Budget    *spend.Amount `json:"budget"`
	Period    string        `json:"period"`
	PeriodID  string        `json:"period_id"`
	PeriodEnd *time.Time    `json:"period_end"`
	// BudgetSource says where Budget comes from: "config", "live" (set
	// for the running fleet with `producer tenant set`, overriding the
	// configuration's) or "none".
	BudgetSource string `json:"budget_source"`
	// ConfigBudget and ConfigPeriod are the configuration's budget (null:
	// none): the one in force once a live budget is dropped.
	ConfigBudget *spend.Amount `json:"config_budget"`
	ConfigPeriod string        `json:"config_period,omitempty"`
	// SetAt and SetBy say when and by whom the live budget was set.
	SetAt *time.Time `json:"set_at,omitempty"`
	SetBy string     `json:"set_by,omitempty"`
	// Spent and Reserved are the tenant's in the current period (the
	// ledger's, fleet-wide).
	Spent    spend.Amount `json:"spent"`
	Reserved spend.Amount `json:"reserved"`
}

// TenantSpec is a tenant as the configuration defines it.
type TenantSpec struct {
	Name   string
	Weight int
	// Budget: nil for none.
	Budget *spend.Budget
}

// Tenants reads each tenant's budget in force and its spend of the
// current period at now (a tenant without a budget: of the current day).
func Tenants(ctx context.Context, l *spend.Ledger, specs []TenantSpec, now time.Time) ([]Tenant, error) {
	out := make([]Tenant, 0, len(specs))
	for _, sp := range specs {
		v, err := l.Tenant(ctx, sp.Name, sp.Budget, now)
		if err != nil {
			return out, err
		}
		out = append(out, TenantOf(sp, v, now))
	}
	return out, nil
}

// TenantOf is the tenant sp with its view v (spend.Ledger.Tenant) at now.
func TenantOf(sp TenantSpec, v spend.TenantView, now time.Time) Tenant {
	t := Tenant{Name: sp.Name, Weight: sp.Weight, Period: spend.Day, PeriodID: v.Period, BudgetSource: v.Source,
		Spent: v.Account.Spent, Reserved: v.Account.Reserved, SetBy: v.SetBy}
	if v.Budget != nil {
		amount := v.Budget.Amount
		t.Budget, t.Period = &amount, v.Budget.Period
	}
	if sp.Budget != nil {
		amount := sp.Budget.Amount
		t.ConfigBudget, t.ConfigPeriod = &amount, sp.Budget.Period
	}
	if !v.SetAt.IsZero() {
		at := v.SetAt
		t.SetAt = &at
	}
	end := spend.PeriodEnd(t.Period, now)
	t.PeriodEnd = &end
	return t
}
