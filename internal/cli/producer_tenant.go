package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

func (p *producer) tenantCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "List the tenants with their budgets and spend, or change a tenant's budget for the running fleet",
		Long: `tenant shows the configuration's tenants (tenants:) with the budget in force
and what their batches spent in its current period, and changes a tenant's
budget for the running fleet:

  list [--json]                        every tenant: weight, budget (and where it
                                       comes from: config or live), spent, reserved
  set NAME --budget AMOUNT/PERIOD [--json]
                                       a live budget, in force at every worker's next
                                       start; the tenant's batches paused for its
                                       budget resume if it covers their next start
  set NAME --budget none [--json]      drop the live budget: the configured one
                                       applies again

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, a tenant not in the configuration or without a budget there, a bad budget"},
			exitServers),
		Example: `  producer tenant list
  producer tenant set research --budget 250/d
  producer tenant set research --budget none`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(p.tenantListCmd(), p.tenantSetCmd())
	return cmd
}

func (p *producer) tenantListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the tenants: weight, budget in force and where it comes from, spend of the current period",
		Long: `list shows each tenant of the configuration: its weight, its budget in force
(AMOUNT/PERIOD) and where that comes from (config, or live: set with
tenant set for the running fleet), what its batches spent and hold reserved
in the budget's current period (a tenant without a budget: the UTC day),
and the period. --json prints one JSON array of objects with name, weight,
budget, period, period_id, period_end, budget_source (config, live or
none), config_budget, config_period, set_at, set_by, spent and reserved:
status --json's "tenants".

` + exitCodes(exitOK, exitUsage, exitRedis),
		Example: `  producer tenant list
  producer tenant list --json | jq '.[] | {name, budget, budget_source, spent}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := p.g.load(nil)
			if err != nil {
				return err
			}
			specs := tenantSpecs(cfg)
			ts := []status.Tenant{}
			if len(specs) > 0 {
				ctx, cancel := context.WithTimeout(cmd.Context(), callTimeout)
				defer cancel()
				ledger, closeL, err := openLedger(ctx, cfg)
				if err != nil {
					return err
				}
				defer closeL()
				if ts, err = status.Tenants(ctx, ledger, specs, time.Now()); err != nil {
					return unreachable("reading the tenants' budgets and spend", err)
				}
			}
			return show(p.stdout, asJSON, ts, printTenants)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array")
	return cmd
}

func (p *producer) tenantSetCmd() *cobra.Command {
	var asJSON bool
	var budget string
	cmd := &cobra.Command{
		Use:   "set NAME --budget AMOUNT/PERIOD|none",
		Short: "Change a tenant's budget for the running fleet (its batches paused for it resume once it covers their next start)",
		Long: `set gives tenant NAME a live budget, AMOUNT/PERIOD with period d, w or mo
(UTC calendar days, ISO weeks, months): kept in Redis beside the spend
ledger, it overrides the configuration's budget at every worker's next
start, without a restart. The tenant's batches paused for its budget
(paused_reason tenant-budget) resume at once when it covers their next
start; a lower budget pauses them at their next start that it cannot
cover. A budget of another period counts the spend of that period.

--budget none drops the live budget: the configured one applies again.
A live budget holds until dropped, or until workers start with another
configured budget for the tenant (an edited configuration wins).

The tenant must be in the configuration with a budget: a tenant without
one there started its batches without the checks a budget needs.
--json prints the tenant after the change (as tenant list --json shows
it) with "resumed", the batches that run again.

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, a tenant not in the configuration or without a budget there, a bad budget"},
			exitServers),
		Example: `  producer tenant set research --budget 250/d
  producer tenant set research --budget 1000/w --json | jq .resumed
  producer tenant set research --budget none`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !cmd.Flags().Changed("budget") {
				return usageErr("tenant set %s: give --budget AMOUNT/PERIOD (or --budget none)", termsafe.String(name))
			}
			b, err := ops.ParseTenantBudget(budget)
			if err != nil {
				return reword(err, "tenant set %s: --budget %v", termsafe.String(name), err)
			}
			cfg, err := p.g.load(nil)
			if err != nil {
				return err
			}
			specs := tenantSpecs(cfg)
			if _, err := ops.CheckTenantBudget(specs, name); err != nil {
				return reword(err, "tenant set: %v", err)
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				ctx, cancel := context.WithTimeout(ctx, callTimeout)
				defer cancel()
				ledger, closeL, err := openLedger(ctx, cfg)
				if err != nil {
					return err
				}
				defer closeL()
				set, err := ops.SetTenantBudget(ctx, q, ledger, specs, name, b, operator())
				if err != nil {
					return reword(err, "tenant set %s: %v", termsafe.String(name), err)
				}
				if asJSON {
					return writeJSON(p.stdout, set)
				}
				printTenantSet(p.stdout, set)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&budget, "budget", "", "AMOUNT/PERIOD (period d, w or mo), or none to drop the live budget")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: the tenant after the change, with \"resumed\"")
	return cmd
}

// budgetText is a tenant's budget in force, with where it comes from.
func budgetText(t status.Tenant) string {
	if t.Budget == nil {
		return "none"
	}
	return t.Budget.String() + "/" + t.Period
}

func printTenants(w io.Writer, ts []status.Tenant, _ time.Time) {
	if len(ts) == 0 {
		fmt.Fprintln(w, "No tenants in the configuration (tenants:).")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tWEIGHT\tBUDGET\tFROM\tSPENT\tRESERVED\tPERIOD\t")
	for _, t := range ts {
		from := t.BudgetSource
		if t.BudgetSource == spend.SourceLive {
			from = "live (config: " + configText(t) + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", termsafe.String(t.Name), t.Weight, budgetText(t), from, t.Spent, t.Reserved, t.PeriodID)
	}
	_ = tw.Flush()
}

// configText is a tenant's configured budget.
func configText(t status.Tenant) string {
	if t.ConfigBudget == nil {
		return "none"
	}
	return t.ConfigBudget.String() + "/" + t.ConfigPeriod
}

func printTenantSet(w io.Writer, set ops.TenantBudgetSet) {
	t := set.Tenant
	if t.BudgetSource == spend.SourceLive {
		fmt.Fprintf(w, "Tenant %s's budget is %s, live (the configuration's: %s).\n", termsafe.String(t.Name), budgetText(t), configText(t))
	} else {
		fmt.Fprintf(w, "Tenant %s's live budget is dropped: the configuration's, %s, applies.\n", termsafe.String(t.Name), budgetText(t))
	}
	fmt.Fprintf(w, "Spent %s in %s, %s reserved by items running.\n", t.Spent, t.PeriodID, t.Reserved)
	if len(set.Resumed) > 0 {
		ids := make([]string, len(set.Resumed))
		for i, id := range set.Resumed {
			ids[i] = termsafe.String(id)
		}
		fmt.Fprintf(w, "Its batches paused for its budget run again: %s.\n", strings.Join(ids, ", "))
	}
}
