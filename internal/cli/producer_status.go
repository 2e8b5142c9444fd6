package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/termsafe"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

func (p *producer) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the queue, the consumers, the workers and the credential pool",
		Long: `status shows the work stream (messages, bytes), the workers' consumers
(one per batch lane, summed: pending, ack pending, redelivered, waiting
pulls, last activity), the dead letters, the workers heard from recently,
and the credential pool: totals and one row per credential (in flight,
cooling until and why, disabled and why, starts in the rate window).

--json prints one JSON object with a stable schema instead of the tables:
  at, stream{name,messages,bytes},
  consumer{name,pending,ack_pending,redelivered,waiting_pulls,last_active},
  dead_letters, results, workers[{id,host,pid,version,state,concurrency,busy,
  done,failed,kinds,fallbacks,started_at,last_seen}],
  fallbacks[{kind,to,why,items}]   items of a kind that ran on one of its
    fallback kinds, and why (waited, failing), summed over the workers,
  pool{name,at,total,available,leased,cooling,disabled,in_flight,
  credentials[{id,state,max_concurrent,rate,in_flight,holders[{owner,expires}],
  cooling_until,cooling_reason,disabled_reason,disabled_at,starts_in_window,
  last_used,starts,rate_limited}]}
Times are RFC 3339 or null; every key is always present.

It needs NATS and Redis.

` + exitCodes(exitOK, exitUsage, exitDoc{exitcode.Unreachable, "NATS or Redis unreachable (the message names which)"}),
		Example: `  producer status --config kf.yaml
  producer status --json | jq '.consumer.pending + .consumer.ack_pending'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := p.setup(nil)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), callTimeout+setupTimeout)
			defer cancel()
			q, pool, closeBoth, err := openQueueAndPool(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer closeBoth()
			rep, err := status.Read(ctx, q, pool)
			if err != nil {
				return exitcode.With(exitcode.Unreachable, err)
			}
			if specs := tenantSpecs(cfg); len(specs) > 0 {
				ledger, closeL, err := openLedger(ctx, cfg)
				if err != nil {
					return err
				}
				defer closeL()
				if rep.Tenants, err = status.Tenants(ctx, ledger, specs, time.Now()); err != nil {
					return exitcode.With(exitcode.Unreachable, err)
				}
			}
			if asJSON {
				return writeJSON(p.stdout, rep)
			}
			printStatus(p.stdout, rep, q.Config().HeartbeatTTL)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (schema in --help)")
	return cmd
}

// tenantSpecs are the configuration's tenants, by name.
func tenantSpecs(cfg *config.Config) []status.TenantSpec {
	var out []status.TenantSpec
	for _, name := range slices.Sorted(maps.Keys(cfg.Tenants)) {
		sp := status.TenantSpec{Name: name, Weight: cfg.Tenants[name].Weight}
		if b, ok := cfg.TenantBudget(name); ok {
			sp.Budget = &b
		}
		out = append(out, sp)
	}
	return out
}

func printStatus(w io.Writer, r status.Report, heartbeatTTL time.Duration) {
	fmt.Fprintf(w, "Stream %s: %d messages, %s\n", termsafe.String(r.Stream.Name), r.Stream.Messages, bytesText(r.Stream.Bytes))
	last := "never"
	if r.Consumer.LastActive != nil {
		last = ago(r.At, *r.Consumer.LastActive)
	}
	fmt.Fprintf(w, "Consumer %s: %d pending, %d ack pending, %d redelivered, %d waiting pulls, last activity %s\n",
		termsafe.String(r.Consumer.Name), r.Consumer.Pending, r.Consumer.AckPending, r.Consumer.Redelivered, r.Consumer.WaitingPulls, last)
	fmt.Fprintf(w, "Dead letters: %d    Results kept: %d\n", r.DeadLetters, r.Results)

	fmt.Fprintf(w, "\nWorkers (%d seen in the last %s):\n", len(r.Workers), heartbeatTTL)
	if len(r.Workers) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tHOST\tSTATE\tBUSY/SLOTS\tDONE\tFAILED\tKINDS\tVERSION\tLAST SEEN")
		for _, x := range r.Workers {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d/%d\t%d\t%d\t%s\t%s\t%s\n", termsafe.String(x.ID), termsafe.String(x.Host),
				termsafe.String(x.State), x.Busy, x.Concurrency, x.Done, x.Failed, termsafe.String(strings.Join(x.Kinds, ",")),
				termsafe.String(x.Version), ago(r.At, x.LastSeen))
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	printPool(w, r.Pool)
	if len(r.Tenants) > 0 {
		fmt.Fprintf(w, "\nTenants (spend of the current period):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TENANT\tWEIGHT\tBUDGET\tSPENT\tRESERVED\tPERIOD\t")
		for _, t := range r.Tenants {
			budget := budgetText(t)
			if t.BudgetSource == spend.SourceLive {
				budget += " (live)"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t\n", termsafe.String(t.Name), t.Weight, budget, t.Spent, t.Reserved, t.PeriodID)
		}
		_ = tw.Flush()
	}
	printFallbacks(w, "\nFallbacks (items that ran on a fallback kind, counted by the workers running now):\n", r.Fallbacks)
}

// printPool prints the pool's totals and a table of its credentials.
func printPool(w io.Writer, p status.Pool) {
	fmt.Fprintf(w, "Pool %s: %d %s: %d available, %d leased, %d cooling, %d disabled (%d %s in flight)\n",
		termsafe.String(p.Name), p.Total, plural(p.Total, "credential", "credentials"), p.Available, p.Leased, p.Cooling, p.Disabled,
		p.InFlight, plural(p.InFlight, "lease", "leases"))
	if len(p.Credentials) == 0 {
		fmt.Fprintln(w, "  (no credentials: workers register the ones in their configuration when they start)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSTATE\tIN FLIGHT\tMAX\tGROUPS\tLIMITS (USED/OF)\tLAST USED\tRESTING UNTIL / DISABLED")
	for _, c := range p.Credentials {
		used := "never"
		if c.LastUsed != nil {
			used = ago(p.At, *c.LastUsed)
		}
		note := ""
		switch {
		case c.State == creds.StateDisabled:
			note = "disabled: " + oneLine(c.DisabledReason, 100) + " (" + disabledBy(c.DisabledBy)
			if c.DisabledAt != nil {
				note += ", " + ago(p.At, *c.DisabledAt)
			}
			note += ")"
		case c.CoolingUntil != nil:
			note = fmt.Sprintf("resting until %s (in %s)", c.CoolingUntil.Local().Format("15:04:05"), c.CoolingUntil.Sub(p.At).Round(time.Millisecond))
			if c.RestCause != "" {
				note += " [" + oneLine(c.RestCause, 60) + "]"
			}
			note += ": " + oneLine(c.CoolingReason, 100)
		}
		for _, r := range c.ScopeRests {
			note = joinNotes(note, fmt.Sprintf("scope %s resting until %s (in %s): %s", r.Scope, r.Until.Local().Format("15:04:05"),
				r.Until.Sub(p.At).Round(time.Millisecond), oneLine(r.Reason, 80)))
		}
		note = joinNotes(note, keyHistory(c, p.At))
		groups := "-"
		if len(c.Groups) > 0 {
			groups = strings.Join(c.Groups, ",")
		}
		if c.Account != "" {
			groups += " (account " + c.Account + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", termsafe.String(c.ID), termsafe.String(c.State), c.InFlight, c.MaxConcurrent,
			termsafe.String(groups), termsafe.String(limitsText(c.Limits, c.PaceMS)), used, note)
	}
	_ = tw.Flush()
	printAccounts(w, p)
}

// printAccounts prints the pool's accounts, if any: what their keys share.
func printAccounts(w io.Writer, p status.Pool) {
	if len(p.Accounts) == 0 {
		return
	}
	fmt.Fprintf(w, "Accounts: %d (their keys share their limits and what the API says of them)\n", len(p.Accounts))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ACCOUNT\tSTATE\tIN FLIGHT\tKEYS\tLIMITS (USED/OF)\tLAST USED\tRESTING UNTIL")
	for _, a := range p.Accounts {
		used := "never"
		if a.LastUsed != nil {
			used = ago(p.At, *a.LastUsed)
		}
		id := a.ID
		if a.Account != "" {
			id += " (in " + a.Account + ")"
		}
		note := ""
		if a.CoolingUntil != nil {
			note = fmt.Sprintf("resting until %s (in %s)", a.CoolingUntil.Local().Format("15:04:05"), a.CoolingUntil.Sub(p.At).Round(time.Millisecond))
			if a.RestCause != "" {
				note += " [" + oneLine(a.RestCause, 60) + "]"
			}
			note += ": " + oneLine(a.CoolingReason, 100)
		}
		for _, r := range a.ScopeRests {
			note = joinNotes(note, fmt.Sprintf("scope %s resting until %s (in %s): %s", r.Scope, r.Until.Local().Format("15:04:05"),
				r.Until.Sub(p.At).Round(time.Millisecond), oneLine(r.Reason, 80)))
		}
		keys := "-"
		if len(a.Keys) > 0 {
			keys = strings.Join(a.Keys, ",")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%s\n", termsafe.String(id), termsafe.String(a.State), a.InFlight,
			termsafe.String(keys), termsafe.String(limitsText(a.Limits, a.PaceMS)), used, note)
	}
	_ = tw.Flush()
}

// disabledBy says who disabled a key, for the status table.
func disabledBy(by string) string {
	if by == creds.DisabledByAPI {
		return "by the API"
	}
	return "by an operator"
}

// keyHistory is what else a row says about a key that is not disabled: a
// probe that enabled it again, the API's refusals in a row.
func keyHistory(c status.Credential, at time.Time) string {
	if c.State == creds.StateDisabled {
		return ""
	}
	var notes []string
	if c.EnabledBy == creds.EnabledByProbe {
		n := "enabled by probe: " + oneLine(c.EnabledReason, 100)
		if c.EnabledAt != nil {
			n += " (" + ago(at, *c.EnabledAt) + ")"
		}
		notes = append(notes, n)
	}
	if k := len(c.Refusals); k > 0 {
		notes = append(notes, fmt.Sprintf("refused %d %s in a row, last %s", k, plural(k, "item", "items"), oneLine(c.Refusals[k-1], 100)))
	}
	return strings.Join(notes, "; ")
}

func joinNotes(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// limitsText is one credential's limits with their use: "rate=10/s,burst=1
// 1/1; cost=6000/10s 2300/6000; pace 52.3ms".
func limitsText(limits []status.Limit, paceMS float64) string {
	var parts []string
	for _, l := range limits {
		parts = append(parts, fmt.Sprintf("%s %d/%d", l.Limit, l.Used, l.Of))
	}
	if paceMS > 0 {
		parts = append(parts, fmt.Sprintf("pace %.1fms", paceMS))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
