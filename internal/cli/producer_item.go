package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

func (p *producer) itemCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "item",
		Short: "Find one item: where it is and why it failed",
		Long: `item shows one item of a batch.

  show BATCH ITEM [--json]    where the item is, its attempts, last error,
                              key and result

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, or an item without a trace"}, exitNATS),
		Example: `  producer item show items-3f2a9c1b item-17`,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(p.itemShowCmd())
	return cmd
}

func (p *producer) itemShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show BATCH ITEM",
		Short: "Show where one item is, its attempts, last error, key and result",
		Long: `show finds one item of a batch and says where it is:

  waiting        its message waits in the queue (behind other items, or its
                 batch is paused)
  running        a worker has it: running, waiting there for a key, or for
                 its next try
  succeeded      done
  failed         failed for good (its dead letter is gone)
  dead-lettered  failed for good; ` + "`producer dlq replay --batch BATCH ITEM`" + ` puts
                 it back
  cancelled      its batch was cancelled before it ran

with its latest outcome: attempts (runs), the last error, why it was
dead-lettered, the key (credential ID) it last ran on, and its output. A
replayed item waits or runs again and shows its previous outcome.

--json prints one object: batch, item, kind, scope, state, batch_state,
attempts, error, reason, credential_id, output, output_encoding,
output_truncated, message {sequence, subject, enqueued_at, delivered,
replay} (null unless it waits or runs), result (as ` + "`producer results`" + `
writes it, or null), dead_letter (the record without its payload, or null).

Finding a waiting item reads the batch's waiting messages in order: on a
batch of millions it takes seconds.

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, or an item with no message, result or dead letter (never enqueued, or its records aged out)"},
			exitNATS),
		Example: `  producer item show items-3f2a9c1b item-17
  producer item show items-3f2a9c1b item-17 --json | jq -r .error`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			batch, item := args[0], args[1]
			for _, c := range []struct{ what, id string }{{"batch", batch}, {"item", item}} {
				if err := queue.CheckID(c.what, c.id); err != nil {
					return usageErr("%v", err)
				}
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				it, err := itemview.Read(ctx, q, batch, item)
				switch {
				case errors.Is(err, itemview.ErrNoItem):
					return usageErr("no item %s in batch %s: no message waits for it, and it has no result and no dead letter "+
						"(never enqueued, or its records are older than queue.results_max_age)", termsafe.String(item), termsafe.String(batch))
				case err != nil:
					return unreachable("reading the item", err)
				}
				return show(p.stdout, asJSON, it, printItem)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// printItem prints one item.
func printItem(w io.Writer, it itemview.Item, now time.Time) {
	fmt.Fprintf(w, "Item %s of batch %s: %s\n", termsafe.String(it.Item), termsafe.String(it.Batch), stateText(it))
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "  Kind:\t%s\n", termsafe.String(it.Kind))
	if r := it.Result; r != nil && r.FallbackFrom != "" {
		fmt.Fprintf(tw, "  Ran on:\t%s (its kind's fallback: %s)\n", termsafe.String(r.Kind), termsafe.String(r.FallbackReason))
	}
	if it.Scope != "" {
		fmt.Fprintf(tw, "  Scope:\t%s\n", termsafe.String(it.Scope))
	}
	if it.BatchState != "" {
		fmt.Fprintf(tw, "  Batch:\t%s\n", it.BatchState)
	}
	pending := it.State == itemview.StateWaiting || it.State == itemview.StateRunning
	if m := it.Message; m != nil && pending {
		fmt.Fprintf(tw, "  Enqueued:\t%s (%s)%s\n", m.EnqueuedAt.Local().Format(time.DateTime), ago(now, m.EnqueuedAt),
			map[bool]string{true: ", replayed from the dead letters"}[m.Replay])
	}
	if it.Result != nil || it.DeadLetter != nil {
		what := "Last outcome"
		if pending {
			what = "Previous outcome"
		}
		outcome := ""
		switch {
		case it.DeadLetter != nil && it.Reason != "":
			outcome = "dead-lettered: " + termsafe.String(it.Reason)
		case it.Result != nil:
			outcome = termsafe.String(it.Result.Outcome)
		}
		if r := it.Result; r != nil && !r.FinishedAt.IsZero() {
			outcome += fmt.Sprintf(" at %s (%s)", r.FinishedAt.Local().Format(time.DateTime), ago(now, r.FinishedAt))
		}
		fmt.Fprintf(tw, "  %s:\t%s\n", what, outcome)
		fmt.Fprintf(tw, "  Attempts:\t%d\n", it.Attempts)
		key := it.CredentialID
		if key == "" {
			key = "-"
		}
		fmt.Fprintf(tw, "  Key:\t%s\n", termsafe.String(key))
		if it.Error != "" {
			fmt.Fprintf(tw, "  Last error:\t%s\n", oneLine(it.Error, 400))
		}
		if it.Result != nil {
			switch {
			case it.Output == "":
				fmt.Fprintf(tw, "  Output:\t(none)\n")
			case it.OutputEncoding != "":
				fmt.Fprintf(tw, "  Output:\t%d bytes of %s (`producer item show --json` has it)\n", len(it.Output), it.OutputEncoding)
			default:
				cut := ""
				if it.OutputTruncated {
					cut = " (cut by jobs.max_output)"
				}
				fmt.Fprintf(tw, "  Output:\t%s%s\n", oneLine(it.Output, 400), cut)
			}
		}
	}
	_ = tw.Flush()
}

// stateText is the item's state with what it means now.
func stateText(it itemview.Item) string {
	switch it.State {
	case itemview.StateWaiting:
		if it.BatchState == batchview.StatePaused {
			return "waiting (its batch is paused)"
		}
		return "waiting for a worker"
	case itemview.StateRunning:
		return "running (a worker has it: running, or waiting there for a key or its next try)"
	case itemview.StateBatchAPI:
		if pb := it.ProviderBatch; pb != nil {
			id := pb.ID
			if id == "" {
				id = "record " + pb.Record
			}
			return fmt.Sprintf("in a provider batch (%s, %s on key %s: %s)", termsafe.String(id), termsafe.String(pb.Provider),
				termsafe.String(pb.Credential), termsafe.String(pb.Status))
		}
		return "in a provider batch"
	case itemview.StateDeadLettered:
		return fmt.Sprintf("dead-lettered (`producer dlq replay --batch %s %s` puts it back)", termsafe.String(it.Batch), termsafe.String(it.Item))
	}
	return it.State
}
