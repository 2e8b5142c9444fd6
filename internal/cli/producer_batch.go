package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// actionTimeout bounds a pause, resume or cancel: reading and checking
// the record, and writing it (a cancel's drain has its own bound,
// ops.DrainTimeout; the workers' sweeper drains what is left).
const actionTimeout = 30 * time.Second

func (p *producer) batchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "List batches, show one, pause, resume, cancel one, or change its budget",
		Long: `batch shows the batches and steers them (see "Batches" in docs/operations.md).

  list [--json]         every batch: priority, weight, state, progress
  show ID [--json]      one batch, with the history of its changes
  pause ID [--json]     no new item of the batch starts; items running finish
  resume ID [--json]    a paused batch goes on
  cancel ID [--yes] [--json]
                        no new item starts; items not started never run and
                        are recorded as cancelled; the batch takes no new
                        items (on a terminal, it asks first)
  set ID --budget AMOUNT [--json]
                        change the batch's budget; a batch paused for its
                        budget runs again once the new one covers its next
                        start

A batch's state is "running", "paused", "cancelled", or "done" once every
item has an outcome (and it was not cancelled). The counts come from the
results: each item once, by its latest outcome; done = succeeded + failed +
cancelled.

pause, resume and cancel change the batch's record in NATS (the state's
home: it outlives every process and a Redis restart), recording who
(user@host) and when; every worker sees the change within a second of the
command's return. A change that does not apply is refused with exit 2: an
unknown batch, pausing a paused or done batch, resuming a running one,
cancelling a done one, any change of a cancelled batch.

` + exitCodes(exitOK, exitDoc{exitcode.Failed, "cancel: not confirmed on a terminal; nothing changed"},
			exitDoc{exitcode.Usage, "usage error, an unknown batch, a change that does not apply"}, exitNATS),
		Example: `  producer batch list
  producer batch show items-3f2a9c1b --json | jq .state
  producer batch pause items-3f2a9c1b
  producer batch cancel items-3f2a9c1b`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(p.batchListCmd(), p.batchShowCmd(),
		p.batchActionCmd(kftype.ActionPause, "No new item of the batch starts (items running finish)"),
		p.batchActionCmd(kftype.ActionResume, "A paused batch goes on"),
		p.batchActionCmd(kftype.ActionCancel, "No new item starts; those not started are recorded cancelled and leave the stream"),
		p.batchSetCmd())
	return cmd
}

func (p *producer) batchSetCmd() *cobra.Command {
	var asJSON bool
	var budget string
	cmd := &cobra.Command{
		Use:   "set ID --budget AMOUNT",
		Short: "Change a batch's budget (a batch paused for its budget resumes once the new one covers its next start)",
		Long: `set changes what a batch may spend, fleet-wide, at pool.prices: in its
record and in the spend ledger every worker's start reserves from, at once.
A batch paused for its budget (paused_reason budget) resumes when the new
budget covers its next start beside the reservations of the items running.
--json prints the batch after the change, with "spent", "reserved" and
"resumed".

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, an unknown or cancelled batch"}, exitNATS),
		Example: `  producer batch set nightly-7 --budget 40
  producer batch set nightly-7 --budget 40 --json | jq .resumed`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := queue.CheckID("batch", id); err != nil {
				return usageErr("%v", err)
			}
			if !cmd.Flags().Changed("budget") {
				return usageErr("set: give --budget AMOUNT")
			}
			amount, err := spend.ParseAmount(budget)
			if err != nil || amount <= 0 {
				if err == nil {
					err = fmt.Errorf("must be more than 0")
				}
				return usageErr("--budget: %v", err)
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				cfg, err := p.g.load(nil)
				if err != nil {
					return err
				}
				ledger, closeL, err := openLedger(ctx, cfg)
				if err != nil {
					return err
				}
				defer closeL()
				set, err := ops.SetBudget(ctx, q, ledger, id, amount, operator())
				if err != nil {
					return listHint(err)
				}
				if asJSON {
					b, err := readBatch(ctx, q, id)
					if err != nil {
						return err
					}
					b.Spent = max(b.Spent, set.Account.Spent)
					return writeJSON(p.stdout, struct {
						batchview.Batch
						Reserved spend.Amount `json:"reserved"`
						Resumed  bool         `json:"resumed"`
					}{b, set.Account.Reserved, set.Resumed})
				}
				fmt.Fprintf(p.stdout, "Batch %s's budget is %s (spent %s, %s reserved by items running).\n",
					termsafe.String(id), amount, set.Account.Spent, set.Account.Reserved)
				if set.Resumed {
					fmt.Fprintf(p.stdout, "It was paused for its budget: it runs again.\n")
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&budget, "budget", "", "the most the batch may spend, fleet-wide, at pool.prices (e.g. 40 or 12.50)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: the batch after the change")
	return cmd
}

func (p *producer) batchListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every batch: priority, weight, state and progress",
		Long: `list shows every batch with a record (newest first), then those with results
but no record (an enqueue that could not write it warned so).

--json prints a JSON array of the objects "batch show --json" prints.

` + exitCodes(exitOK, exitUsage, exitNATS),
		Example: `  producer batch list
  producer batch list --json | jq -r '.[] | select(.state=="running") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				bs, err := batchview.List(ctx, q)
				if err != nil {
					return unreachable("reading the batches", err)
				}
				return show(p.stdout, asJSON, bs, printBatches)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func (p *producer) batchShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one batch: priority, weight, state, progress and its history",
		Long: `show prints one batch. --json prints one object with at least:
  id, kind, scopes (the items' scopes, pool.scope), priority, weight,
  state (running | paused | cancelled | done),
  last_change {at, action, by} (null: none), total, total_known, done,
  succeeded, failed, cancelled, rate (items/s), eta_seconds, eta, complete,
  enqueued_at, last_result_at, history [{at, action, by}]
Times are RFC 3339 or null.

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, or an unknown batch"}, exitNATS),
		Example: `  producer batch show items-3f2a9c1b
  producer batch show items-3f2a9c1b --json | jq '{state, done, total}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := queue.CheckID("batch", id); err != nil {
				return usageErr("%v", err)
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				b, err := readBatch(ctx, q, id)
				if err != nil {
					return err
				}
				return show(p.stdout, asJSON, b, printBatch)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// readBatch is batchview.Read, its errors said for the CLI: an unknown
// batch (not found) names the command that lists them; any other is the
// server's (unavailable).
func readBatch(ctx context.Context, q *queue.Queue, id string) (batchview.Batch, error) {
	b, err := batchview.Read(ctx, q, id)
	switch {
	case errors.Is(err, batchview.ErrNoBatch):
		return b, listHint(ops.Errorf(ops.ErrNotFound, "no batch %s (never enqueued, or its record and results are gone)", id))
	case err != nil:
		return b, unreachable(fmt.Sprintf("reading batch %s", termsafe.String(id)), err)
	}
	return b, nil
}

// listHint adds to an unknown batch's error (ops.ErrNotFound) the command
// that lists the batches; a *ops.StateError of a paused batch gets the
// command that resumes it. Other errors are returned as they are.
func listHint(err error) error {
	var se *ops.StateError
	switch {
	case errors.Is(err, ops.ErrNotFound):
		return reword(err, "%s; `producer batch list` lists them", err)
	case errors.As(err, &se) && se.State == batchview.StatePaused && se.Action == kftype.ActionPause:
		return reword(err, "%s (resume it with: producer batch resume %s)", err, se.Batch)
	}
	return err
}

func (p *producer) batchActionCmd(action, short string) *cobra.Command {
	var asJSON, yes bool
	long := map[string]string{
		kftype.ActionPause: `pause holds a batch back: no new item of it starts, fleet-wide within a
second; items already running finish. Its items wait (nothing is lost)
until ` + "`producer batch resume`" + `. Pausing a paused, done or cancelled batch
is refused.`,
		kftype.ActionResume: `resume lets a paused batch's items start again.`,
		kftype.ActionCancel: `cancel stops a batch for good: no new item starts, fleet-wide within a
second; the items not started are recorded as cancelled and leave the
stream (running ones finish and record their own outcome), and the batch
takes no new items. It cannot be undone. ` + confirmHelp,
	}[action]
	done := map[string]string{kftype.ActionPause: "paused", kftype.ActionResume: "resumed", kftype.ActionCancel: "cancelled"}[action]
	codes := []exitDoc{exitOK, exitDoc{exitcode.Usage, "usage error, an unknown batch, or a batch that cannot be " + done + " (it is already, or done, or cancelled)"},
		exitNATS}
	if action == kftype.ActionCancel {
		codes = append(codes[:1], append([]exitDoc{exitDeclined}, codes[1:]...)...)
	}
	cmd := &cobra.Command{
		Use:   action + " ID",
		Short: short,
		Long: long + `

--json prints one JSON object: the batch as "batch show --json" prints it
after the change, with "action" (` + action + `)` + map[string]string{kftype.ActionCancel: `, "drained" (the items
not started recorded as cancelled here) and "out" (the items out with
workers, which finish or are recorded by the workers)`}[action] + `.

` + exitCodes(codes...),
		Example: fmt.Sprintf("  producer batch %s items-3f2a9c1b\n  producer batch %s items-3f2a9c1b --json | jq .state", action, action),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := queue.CheckID("batch", id); err != nil {
				return usageErr("%v", err)
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				if action == kftype.ActionCancel && !yes && isTerminal(p.stdin) {
					if err := p.confirmCancel(ctx, q, id); err != nil {
						return err
					}
				}
				ctx, cancel := context.WithTimeout(ctx, actionTimeout)
				defer cancel()
				return p.steerBatch(ctx, q, id, action, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: the batch after the change")
	if action == kftype.ActionCancel {
		cmd.Example = "  producer batch cancel items-3f2a9c1b\n  producer batch cancel --yes items-3f2a9c1b    # in a script on a terminal: no question"
		yesFlag(cmd, &yes)
	}
	return cmd
}

// batchChange is the --json object of pause, resume and cancel: the batch
// after the change, and what the change did.
type batchChange struct {
	batchview.Batch
	Action string `json:"action"`
	// Drained and Out (cancel): items not started recorded as cancelled
	// here, and items out with workers.
	Drained *int `json:"drained,omitempty"`
	Out     *int `json:"out,omitempty"`
}

// steerBatch applies action to batch id (ops.Steer) and says what
// happened in one line, or with asJSON prints the batch after it. A change
// that does not apply is refused by its error (exit 2, saying why); a
// cancel whose drain stopped early is cancelled all the same, and exits 3
// saying so.
func (p *producer) steerBatch(ctx context.Context, q *queue.Queue, id, action string, asJSON bool) error {
	name := termsafe.String(id)
	s, err := ops.Steer(ctx, q, id, action, operator())
	if err != nil {
		return listHint(err)
	}
	change := batchChange{Action: action}
	switch action {
	case kftype.ActionPause:
		if asJSON {
			break
		}
		fmt.Fprintf(p.stdout, "Paused batch %s: no new item of it starts; items already running finish. Resume it with: producer batch resume %s\n",
			name, name)
	case kftype.ActionResume:
		if asJSON {
			break
		}
		fmt.Fprintf(p.stdout, "Resumed batch %s: its items start again.\n", name)
	case kftype.ActionCancel:
		// The record says cancelled: no worker starts an item of it any
		// more. What was not out with a worker was recorded cancelled.
		drained, out := s.Drain.Drained, s.Drain.Out
		if err := s.Drain.Err; err != nil {
			return reword(err, "batch %s is cancelled (no item of it starts), and %d items not started were recorded cancelled; "+
				"recording the others stopped (the workers record them within seconds): %v", id, drained, err)
		}
		change.Drained, change.Out = &drained, &out
		if asJSON {
			break
		}
		fmt.Fprintf(p.stdout, "Cancelled batch %s: %d %s not started %s recorded cancelled and removed from the stream; "+
			"%d %s out with workers (running ones finish and record their own outcome, the others are recorded cancelled).\n",
			name, drained, plural(drained, "item", "items"), plural(drained, "was", "were"), out, plural(out, "was", "were"))
	}
	if !asJSON {
		return nil
	}
	b, err := readBatch(ctx, q, id)
	if err != nil {
		return fmt.Errorf("batch %s: %s, but reading it back failed: %w", name, action, err)
	}
	change.Batch = b
	return writeJSON(p.stdout, change)
}

// confirmCancel asks, on a terminal, whether batch id is to be cancelled,
// once the cancel is known to apply (ops.CheckSteer; Steer checks again
// after the answer, which may come much later).
func (p *producer) confirmCancel(ctx context.Context, q *queue.Queue, id string) error {
	ctx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	if _, err := ops.CheckSteer(ctx, q, id, kftype.ActionCancel); err != nil {
		return listHint(err)
	}
	question := func() string {
		left := ""
		if b, err := readBatch(ctx, q, id); err == nil && b.TotalKnown {
			left = fmt.Sprintf(" (%d of its %d items not done yet)", max(0, b.Total-b.Done), b.Total)
		}
		return fmt.Sprintf("Cancel batch %s%s? Its items not started will never run (recorded as cancelled), "+
			"and it takes no new items. This cannot be undone.", id, left)
	}
	return p.confirm(false, question, "batch "+termsafe.String(id)+" is not cancelled")
}

// operator names who runs the command: user@host.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return name + "@" + host
}
