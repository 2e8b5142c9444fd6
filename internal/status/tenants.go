package status

import (
	"context"
	"time"

	"github.com/keyfleet/keyfleet/internal/spend"
)

// Tenant is one tenant of the report: its weight, its budget and what its
// batches spent in the current period (`status --json`'s "tenants").
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

// Tenants reads each tenant's spend of its current period at now (a
// tenant without a budget: of the current day).
func Tenants(ctx context.Context, l *spend.Ledger, specs []TenantSpec, now time.Time) ([]Tenant, error) {
	out := make([]Tenant, 0, len(specs))
	for _, sp := range specs {
		t := Tenant{Name: sp.Name, Weight: sp.Weight, Period: spend.Day}
		if sp.Budget != nil {
			amount := sp.Budget.Amount
			t.Budget, t.Period = &amount, sp.Budget.Period
		}
		t.PeriodID = spend.PeriodOf(t.Period, now)
		end := spend.PeriodEnd(t.Period, now)
		t.PeriodEnd = &end
		_, acct, err := l.Read(ctx, "", sp.Name, t.PeriodID)
		if err != nil {
			return out, err
		}
		t.Spent, t.Reserved = acct.Spent, acct.Reserved
		out = append(out, t)
	}
	return out, nil
}
