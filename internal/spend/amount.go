// Package spend is what keyfleet's runs cost in money (docs/operations.md,
// "Spend, budgets and tenants"): prices per model, a run's spend from its
// reply's usage, the most a request can cost (what a budget reserves),
// tenants' budget periods, and the fleet-wide ledger in Redis that keeps
// budgets from being overspent (ledger.go). It does not log.
package spend

import "github.com/keyfleet/keyfleet/internal/kftype"

// Amount is an amount of money: kftype.Amount, which batch records and
// results hold too.
type Amount = kftype.Amount

// Unit is one currency unit.
const Unit = kftype.Unit

// ParseAmount is kftype.ParseAmount.
func ParseAmount(s string) (Amount, error) { return kftype.ParseAmount(s) }
