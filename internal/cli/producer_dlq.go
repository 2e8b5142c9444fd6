package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

func (p *producer) dlqCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List and replay dead letters: items that failed for good",
		Long: `An item that failed permanently, or ran out of attempts (worker.max_attempts),
gets a dead-letter record holding its payload and why it failed. dlq list
shows them; dlq replay puts them back on the queue with fresh attempts and
removes their records.`,
		Example: `  producer dlq list --batch items-3f2a9c1b
  producer dlq replay --batch items-3f2a9c1b item-17 item-99
  producer dlq replay`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(p.dlqListCmd(), p.dlqReplayCmd())
	return cmd
}

// withQueue runs fn with the queue open.
func (p *producer) withQueue(cmd *cobra.Command, fn func(ctx context.Context, q *queue.Queue) error) error {
	return withOpened(p, cmd.Context(), openQueue, fn)
}

func checkBatchFlag(batch string) error {
	if batch == "" {
		return nil
	}
	if err := queue.CheckID("batch", batch); err != nil {
		return usageErr("--batch: %v", err)
	}
	return nil
}

func (p *producer) dlqListCmd() *cobra.Command {
	var batch string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--batch ID] [--json]",
		Short: "List dead-letter records",
		Long: `list shows the dead-letter records (of one batch with --batch, else of all):
item, batch, kind, attempts (runs), reason, last error, time. --json prints
one JSON object per line instead, with every field of the record:
item, batch, kind, reason, attempts, failures, error, worker, failed_at,
payload.`,
		Example: `  producer dlq list
  producer dlq list --batch items-3f2a9c1b --json | jq -r .item`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkBatchFlag(batch); err != nil {
				return err
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				if asJSON {
					w := bufio.NewWriter(p.stdout)
					enc := json.NewEncoder(w)
					enc.SetEscapeHTML(false)
					if err := q.ListDeadLetters(ctx, batch, func(d queue.DeadLetter) error { return enc.Encode(d) }); err != nil {
						return unreachable("reading the dead letters", err)
					}
					return w.Flush()
				}
				tw := tabwriter.NewWriter(p.stdout, 0, 4, 2, ' ', 0)
				n := 0
				err := q.ListDeadLetters(ctx, batch, func(d queue.DeadLetter) error {
					if n == 0 {
						fmt.Fprintln(tw, "ITEM\tBATCH\tKIND\tATTEMPTS\tREASON\tLAST ERROR\tFAILED AT")
					}
					n++
					_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", termsafe.String(d.Item), termsafe.String(d.Batch),
						termsafe.String(d.Kind), d.Attempts, termsafe.String(d.Reason), oneLine(d.Error, 80), d.FailedAt.Local().Format("2006-01-02 15:04:05"))
					return err
				})
				if err != nil {
					return unreachable("reading the dead letters", err)
				}
				_ = tw.Flush()
				fmt.Fprintf(p.stdout, "%d dead %s%s\n", n, plural(n, "letter", "letters"), batchNote(batch))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&batch, "batch", "", "only this batch's records")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	return cmd
}

func batchNote(batch string) string {
	if batch == "" {
		return " (all batches)"
	}
	return " in batch " + termsafe.String(batch)
}

func (p *producer) dlqReplayCmd() *cobra.Command {
	var batch string
	cmd := &cobra.Command{
		Use:   "replay [--batch ID] [ITEM...]",
		Short: "Put dead-lettered items back on the queue with fresh attempts",
		Long: `replay enqueues dead-lettered items again, each with its payload, kind and
batch, and fresh attempts, then removes its record. With item IDs it
replays those (of --batch, or of any batch); an ID with no record is an
error and then nothing is replayed. Without IDs it replays every record
of --batch, or every record of every batch. It prints how many it replayed.`,
		Example: `  producer dlq replay --batch items-3f2a9c1b item-17
  producer dlq replay --batch items-3f2a9c1b
  producer dlq replay`,
		RunE: func(cmd *cobra.Command, ids []string) error {
			if err := checkBatchFlag(batch); err != nil {
				return err
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				return p.replay(ctx, q, batch, ids)
			})
		},
	}
	cmd.Flags().StringVar(&batch, "batch", "", "only this batch's records")
	return cmd
}

func (p *producer) replay(ctx context.Context, q *queue.Queue, batch string, ids []string) error {
	todo, missing, err := q.DeadLettersToReplay(ctx, batch, ids)
	if err != nil {
		return unreachable("reading the dead letters", err)
	}
	if len(missing) > 0 {
		return exitcode.With(exitcode.Usage, fmt.Errorf("no dead letter for %s%s: nothing replayed",
			strings.Join(quoteAll(missing), ", "), batchNote(batch)))
	}
	for i, d := range todo {
		if err := q.Replay(ctx, d); err != nil {
			fmt.Fprintf(p.stdout, "Replayed %d of %d dead letters%s before an error.\n", i, len(todo), batchNote(batch))
			return unreachable("replaying", err)
		}
	}
	fmt.Fprintf(p.stdout, "Replayed %d dead %s%s: back on the queue with fresh attempts.\n",
		len(todo), plural(len(todo), "letter", "letters"), batchNote(batch))
	return nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
