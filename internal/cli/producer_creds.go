package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/termsafe"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

func (p *producer) credsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "creds",
		Short: "List and change the credentials of the pool, for the running fleet",
		Long: `creds shows and changes the credential pool in Redis. Changes apply to
every running worker at once (their next acquire), without restarts, and
survive worker restarts as long as the credential's definition in the
configuration file does not change.

Secrets are never shown: Redis holds only credential IDs.

  list [--json]                       the pool, one row per credential and
                                      one per account
  set ID [--max-concurrent N] [--rate R] [--limit SPEC]... [--json]
                                      (ID may name an account: its limits)
  enable ID [--json]                  back into use
  disable ID [--reason TEXT] [--json] out of use until enabled
  remove ID [--yes] [--json]          delete it and its state (asks first on
                                      a terminal)

--json prints one JSON object: the pool (list), or the credential after the
change with "action" (set, enable, disable, remove).

` + exitCodes(exitOK, exitDoc{exitcode.Failed, "remove: not confirmed on a terminal; nothing changed"},
			exitDoc{exitcode.Usage, "usage error, an ID not in the pool, an invalid limit"}, exitRedis),
		Example: `  producer creds list
  producer creds set key-a --max-concurrent 4 --rate 120/m
  producer creds set key-a --rate none
  producer creds disable key-b --reason "quota exhausted until Monday"
  producer creds enable key-b`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(p.credsListCmd(), p.credsSetCmd(), p.credsEnableCmd(), p.credsDisableCmd(), p.credsRemoveCmd())
	return cmd
}

// withPool runs fn with a handle on the configured pool, within
// callTimeout.
func (p *producer) withPool(cmd *cobra.Command, fn func(ctx context.Context, pool *creds.Pool) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), callTimeout)
	defer cancel()
	open := func(ctx context.Context, cfg *config.Config, _ *zap.Logger) (*creds.Pool, func(), error) {
		return openPool(ctx, cfg)
	}
	return withOpened(p, ctx, open, fn)
}

// changeCredential makes a change to credential id through withPool (an
// action of internal/ops), then shows the credential as done ("enabled"),
// or with asJSON prints it as one object with the action.
func (p *producer) changeCredential(cmd *cobra.Command, id, action, done string, asJSON bool,
	change func(ctx context.Context, pool *creds.Pool) error) error {
	return p.withPool(cmd, func(ctx context.Context, pool *creds.Pool) error {
		if err := change(ctx, pool); err != nil {
			return err
		}
		if asJSON {
			return p.credentialJSON(ctx, pool, id, action)
		}
		return p.showCredential(ctx, pool, id, done)
	})
}

// credentialChange is the --json object of set, enable, disable and
// remove: the credential after the change (status's row; only its ID
// after a remove) and the action.
type credentialChange struct {
	status.Credential
	Action string `json:"action"`
	Pool   string `json:"pool"`
}

// accountChange is credentialChange for an account (set): the account's
// row of status, with "kind": "account".
type accountChange struct {
	status.Account
	Kind   string `json:"kind"`
	Action string `json:"action"`
	Pool   string `json:"pool"`
}

// credentialJSON prints credential (or account) id after action as one
// object.
func (p *producer) credentialJSON(ctx context.Context, pool *creds.Pool, id, action string) error {
	out := credentialChange{Credential: status.Credential{ID: id}, Action: action, Pool: pool.Name()}
	if action != "remove" {
		st, err := pool.Stats(ctx)
		if err != nil {
			return unreachable("reading the credential pool", err)
		}
		rep := status.PoolReport(st)
		for _, c := range rep.Credentials {
			if c.ID == id {
				out.Credential = c
			}
		}
		if out.State == "" {
			for _, a := range rep.Accounts {
				if a.ID == id {
					return writeJSON(p.stdout, accountChange{Account: a, Kind: "account", Action: action, Pool: pool.Name()})
				}
			}
		}
	} else {
		out.State = "removed"
	}
	return writeJSON(p.stdout, out)
}

// showCredential prints one credential's row after a change.
func (p *producer) showCredential(ctx context.Context, pool *creds.Pool, id, done string) error {
	st, err := pool.Stats(ctx)
	if err != nil {
		return unreachable("reading the credential pool", err)
	}
	for _, c := range st.Credentials {
		if c.ID == id {
			rate := c.Rate
			if rate == "" {
				rate = "none"
			}
			fmt.Fprintf(p.stdout, "%s %s: state %s, max_concurrent %d, rate %s, %d in flight.\n",
				termsafe.String(id), done, termsafe.String(c.State), c.MaxConcurrent, termsafe.String(rate), c.InFlight)
			return nil
		}
	}
	for _, a := range status.PoolReport(st).Accounts {
		if a.ID == id {
			fmt.Fprintf(p.stdout, "account %s %s: state %s, limits %s, %d keys, %d in flight.\n",
				termsafe.String(id), done, termsafe.String(a.State), termsafe.String(limitsText(a.Limits, a.PaceMS)), len(a.Keys), a.InFlight)
			return nil
		}
	}
	fmt.Fprintf(p.stdout, "%s %s.\n", termsafe.String(id), done)
	return nil
}

func (p *producer) credsListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the credentials with their state and limits",
		Long: `list shows the pool's totals and one row per credential: state
(available, busy at its limits or its account's, cooling, disabled), its
account, in flight, limits, starts
in the current rate window, why it is cooling or disabled and who disabled
it (the API or an operator), the API's refusals in a row, and the probe that
enabled it again; then one row per account (pool.accounts): its limits
and their use, its keys, its runs in flight and any rest with its cause.
--json prints the pool object of ` + "`producer status --json`" + `: its
totals, its "credentials" array and its "accounts" array.

` + exitCodes(exitOK, exitUsage, exitRedis),
		Example: `  producer creds list
  producer creds list --json | jq -r '.credentials[] | select(.state=="disabled") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return p.withPool(cmd, func(ctx context.Context, pool *creds.Pool) error {
				st, err := pool.Stats(ctx)
				if err != nil {
					return unreachable("reading the credential pool", err)
				}
				if asJSON {
					return writeJSON(p.stdout, status.PoolReport(st))
				}
				printPool(p.stdout, status.PoolReport(st))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the pool as one JSON object")
	return cmd
}

func (p *producer) credsSetCmd() *cobra.Command {
	var asJSON bool
	var maxConc int
	var rate string
	var limits []string
	cmd := &cobra.Command{
		Use:   "set ID [--max-concurrent N] [--rate R] [--limit SPEC]...",
		Short: "Change a credential's or an account's limits for the running fleet",
		Long: `set changes a credential's limits in Redis; every worker applies them at its
next decision. ID may also name an account of pool.accounts: its limits,
which every key of it (and of the accounts inside it) shares, change the
same way (an account has no --max-concurrent: its keys do).
--max-concurrent is how many jobs may hold the credential at
once (at least 1). Each --limit is one limit:

  rate=N/PERIOD          at most N starts in any sliding window of PERIOD (exact)
  rate=N/PERIOD,burst=B  smooth: at most B starts back to back, then one every PERIOD/N
  cost=N/PERIOD          at most N cost units (tokens, credits) in any window of PERIOD

PERIOD is s, m, h, d or a duration (60/m, 10/s, 5/30s). --rate R is short for
--limit rate=R. The limits given replace all of the credential's limits
(a limit that stays keeps its window's history); --limit none (or --rate
none) removes them all. Flags not given stay as they are.

--json prints the credential after the change as one object, with
"action": "set".

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, an ID not in the pool, an invalid limit or nothing to change"}, exitRedis),
		Example: `  producer creds set key-a --max-concurrent 2
  producer creds set key-a --limit rate=500/m --limit rate=10/s,burst=1 --limit cost=30000/m
  producer creds set key-a --limit rate=500/m --limit cost=30000/m,scope=gpt-4o --limit cost=200000/m,scope=gpt-4o-mini
  producer creds set key-a --rate 60/m
  producer creds set org-a --limit rate=500/m --limit cost=200000/m,scope=gpt-4o
  producer creds set key-a --limit none`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			var l creds.Limits
			if cmd.Flags().Changed("max-concurrent") {
				l.MaxConcurrent = &maxConc
			}
			var set []creds.Limit
			specs := limits
			if cmd.Flags().Changed("rate") {
				if r := strings.TrimSpace(rate); r != "" && !strings.EqualFold(r, "none") {
					specs = append([]string{"rate=" + r}, specs...)
				}
			}
			for _, spec := range specs {
				if strings.EqualFold(strings.TrimSpace(spec), "none") {
					continue
				}
				lim, err := creds.ParseLimit(spec)
				if err != nil {
					return usageErr("creds set %s: --limit: %v", id, strings.TrimPrefix(err.Error(), "creds: "))
				}
				set = append(set, lim)
			}
			if cmd.Flags().Changed("rate") || cmd.Flags().Changed("limit") {
				l.Limits = &set
			}
			if l.MaxConcurrent == nil && l.Limits == nil {
				return usageErr("creds set %s: nothing to change: give --max-concurrent, --limit and/or --rate", id)
			}
			return p.changeCredential(cmd, id, "set", "updated", asJSON, func(ctx context.Context, pool *creds.Pool) error {
				return ops.SetCredentialLimits(ctx, pool, id, l)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the credential after the change as one JSON object")
	cmd.Flags().IntVar(&maxConc, "max-concurrent", 0, "jobs that may hold the credential at once (at least 1)")
	cmd.Flags().StringVar(&rate, "rate", "", `short for --limit rate=R; "none" removes every limit`)
	cmd.Flags().StringArrayVar(&limits, "limit", nil, "a limit: rate=N/P, rate=N/P,burst=B or cost=N/P, with ,scope=S to bind only items of scope S (pool.scope); repeat for several; none removes every limit")
	return cmd
}

func (p *producer) credsEnableCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "enable ID",
		Short: "Put a disabled or cooling credential back into use",
		Long: `enable clears a credential's disabled state, any cooldown and any streak of
refusals, and wakes workers waiting for a credential. --json prints the
credential after the change as one object, with "action": "enable".

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, or an ID not in the pool"}, exitRedis),
		Example: `  producer creds enable key-b
  producer creds enable key-b --json | jq .state`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			return p.changeCredential(cmd, id, "enable", "enabled", asJSON, func(ctx context.Context, pool *creds.Pool) error {
				return ops.EnableCredential(ctx, pool, id)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the credential after the change as one JSON object")
	return cmd
}

func (p *producer) credsDisableCmd() *cobra.Command {
	var asJSON bool
	var reason string
	cmd := &cobra.Command{
		Use:   "disable ID [--reason TEXT]",
		Short: "Take a credential out of use until it is enabled",
		Long: `disable stops every worker from taking the credential for new jobs; jobs
already holding it run to their end. It stays disabled (across worker
restarts) until ` + "`producer creds enable`" + `: as an operator's decision, it is
never probed (pool.probe_interval probes only the keys the API disabled).
--json prints the credential after the change as one object, with
"action": "disable".

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, or an ID not in the pool"}, exitRedis),
		Example: `  producer creds disable key-b --reason "billing issue"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			return p.changeCredential(cmd, id, "disable", "disabled", asJSON, func(ctx context.Context, pool *creds.Pool) error {
				return ops.DisableCredential(ctx, pool, id, reason)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the credential after the change as one JSON object")
	cmd.Flags().StringVar(&reason, "reason", "disabled by an operator", "why, shown by status and creds list")
	return cmd
}

func (p *producer) credsRemoveCmd() *cobra.Command {
	var asJSON, yes bool
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Delete a credential and its state from the pool",
		Long: `remove deletes a credential and all its state (limits, leases, cooldown,
disabled flag) from the pool, for every worker at once. Live leases on it
fail at their next renewal. A worker whose configuration lists the
credential adds it back when it starts: remove it from the configuration
files too, or use disable. ` + confirmHelp + `

--json prints {"id", "state": "removed", "action": "remove", "pool", ...}.

` + exitCodes(exitOK, exitDeclined, exitDoc{exitcode.Usage, "usage error, or an ID not in the pool"}, exitRedis),
		Example: `  producer creds remove key-old
  producer creds remove --yes key-old`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			open := func(ctx context.Context, cfg *config.Config, _ *zap.Logger) (*creds.Pool, func(), error) {
				return openPool(ctx, cfg)
			}
			// Each call has its own timeout: the answer to the question
			// may take its time.
			return withOpened(p, cmd.Context(), open, func(ctx context.Context, pool *creds.Pool) error {
				if !yes && isTerminal(p.stdin) {
					cctx, cancel := context.WithTimeout(ctx, callTimeout)
					err := ops.CheckCredential(cctx, pool, id)
					cancel()
					if err != nil {
						return err
					}
					question := func() string {
						return fmt.Sprintf("Remove credential %s from pool %s, with its limits and state, for every worker?", id, pool.Name())
					}
					if err := p.confirm(false, question, termsafe.String(id)+" is not removed"); err != nil {
						return err
					}
				}
				ctx, cancel := context.WithTimeout(ctx, callTimeout)
				defer cancel()
				if err := ops.RemoveCredential(ctx, pool, id); err != nil {
					return err
				}
				if asJSON {
					return p.credentialJSON(ctx, pool, id, "remove")
				}
				fmt.Fprintf(p.stdout, "%s removed from pool %s.\n", termsafe.String(id), termsafe.String(pool.Name()))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was removed as one JSON object")
	yesFlag(cmd, &yes)
	return cmd
}
