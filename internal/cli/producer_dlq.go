package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
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
removes their records.

  list [--batch ID] [--json]              the records, of one batch or all
  replay [--batch ID] [--yes] [--json] [ITEM...]
                                          put them back on the queue

replay without --batch and without items replays every dead letter of every
batch: on a terminal it asks first (--yes skips the question).

` + exitCodes(exitOK, exitDoc{exitcode.Failed, "replay of every batch: not confirmed on a terminal; nothing replayed"},
			exitDoc{exitcode.Usage, "usage error, or an item without a record"}, exitNATS),
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
one JSON array instead, of one object per record with every field of it:
item, batch, kind, scope, reason, attempts, failures, error, worker,
failed_at, payload.

` + exitCodes(exitOK, exitUsage, exitNATS),
		Example: `  producer dlq list
  producer dlq list --batch items-3f2a9c1b --json | jq -r '.[].item'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkBatchFlag(batch); err != nil {
				return err
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				if asJSON {
					a := newJSONArray(p.stdout)
					if err := q.ListDeadLetters(ctx, batch, func(d kftype.DeadLetter) error { return a.add(d) }); err != nil {
						return unreachable("reading the dead letters", err)
					}
					return a.end()
				}
				tw := tabwriter.NewWriter(p.stdout, 0, 4, 2, ' ', 0)
				n := 0
				err := q.ListDeadLetters(ctx, batch, func(d kftype.DeadLetter) error {
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
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array of the records")
	return cmd
}

// batchNote says which batches a list or replay covers (ops.BatchNote),
// escaped.
func batchNote(batch string) string { return termsafe.String(ops.BatchNote(batch)) }

func (p *producer) dlqReplayCmd() *cobra.Command {
	var batch string
	var asJSON, yes bool
	cmd := &cobra.Command{
		Use:   "replay [--batch ID] [ITEM...]",
		Short: "Put dead-lettered items back on the queue with fresh attempts",
		Long: `replay enqueues dead-lettered items again, each with its payload, kind and
batch, and fresh attempts, then removes its record. With item IDs it
replays those (of --batch, or of any batch); an ID with no record is an
error and then nothing is replayed. Without IDs it replays every record
of --batch, or, without --batch either, every record of every batch: that
one asks first on a terminal (--yes skips the question; without a
terminal it replays at once). It prints how many it replayed.

--json prints one JSON object instead: {"replayed": N, "batch": ID or
null, "items": [{"batch", "item"}, ...]}.

` + exitCodes(exitOK, exitDoc{exitcode.Failed, "replay of every batch: not confirmed on a terminal; nothing replayed"},
			exitDoc{exitcode.Usage, "usage error, an item without a record, a record that cannot be replayed"}, exitNATS),
		Example: `  producer dlq replay --batch items-3f2a9c1b item-17
  producer dlq replay --batch items-3f2a9c1b
  producer dlq replay                 # every batch's: asks first on a terminal
  producer dlq replay --yes --json | jq .replayed`,
		RunE: func(cmd *cobra.Command, ids []string) error {
			if err := checkBatchFlag(batch); err != nil {
				return err
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				return p.replay(ctx, q, batch, ids, yes, asJSON)
			})
		},
	}
	cmd.Flags().StringVar(&batch, "batch", "", "only this batch's records")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: what was replayed")
	yesFlag(cmd, &yes)
	return cmd
}

// replayed is `dlq replay --json`'s object.
type replayed struct {
	Replayed int          `json:"replayed"`
	Batch    *string      `json:"batch"`
	Items    []replayItem `json:"items"`
}

type replayItem struct {
	Batch string `json:"batch"`
	Item  string `json:"item"`
}

// replay replays dead letters (ops.PickReplay, then Run), asking first on
// a terminal when it takes every record of every batch.
func (p *producer) replay(ctx context.Context, q *queue.Queue, batch string, ids []string, yes, asJSON bool) error {
	r, err := ops.PickReplay(ctx, q, batch, ids)
	if err != nil {
		return err
	}
	if batch == "" && len(ids) == 0 && len(r.Letters) > 0 {
		// Every dead letter of every batch: the one replay that changes
		// the whole fleet at once.
		question := func() string {
			batches := map[string]bool{}
			for _, d := range r.Letters {
				batches[d.Batch] = true
			}
			return fmt.Sprintf("Replay all %d dead %s of %d %s, with fresh attempts?", len(r.Letters), plural(len(r.Letters), "letter", "letters"),
				len(batches), plural(len(batches), "batch", "batches"))
		}
		if err := p.confirm(yes, question, "nothing replayed"); err != nil {
			return err
		}
	}
	n, err := r.Run(ctx)
	if err != nil {
		w := p.stdout
		if asJSON {
			w = p.stderr
		}
		fmt.Fprintf(w, "Replayed %d of %d dead letters%s before an error.\n", n, len(r.Letters), batchNote(batch))
		return err
	}
	if asJSON {
		out := replayed{Replayed: n, Items: make([]replayItem, 0, n)}
		if batch != "" {
			out.Batch = &batch
		}
		for _, d := range r.Letters {
			out.Items = append(out.Items, replayItem{Batch: d.Batch, Item: d.Item})
		}
		return writeJSON(p.stdout, out)
	}
	fmt.Fprintf(p.stdout, "Replayed %d dead %s%s: back on the queue with fresh attempts.\n",
		n, plural(n, "letter", "letters"), batchNote(batch))
	return nil
}
