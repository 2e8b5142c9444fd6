package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

func (p *producer) resultsCmd() *cobra.Command {
	var batch, out, format string
	cmd := &cobra.Command{
		Use:   "results --batch ID [--format jsonl|openai-batch|anthropic-batch] [-o FILE]",
		Short: "Write a batch's results as JSON Lines, one line per item",
		Long: `results writes the latest outcome of every item of a batch that has one,
as JSON Lines (standard output, or FILE with -o), streaming: a batch of
millions of items works. Each line is the result record as the worker
stored it:

  item, batch, kind (the kind that ran it), outcome (succeeded | failed |
  cancelled: the batch was cancelled before the item ran), attempts (runs
  of the item), duration (seconds, of the last run), credential_id (the
  key that ran it), error, output (exec stdout or http body, at most
  jobs.max_output bytes; base64 when output_encoding is "base64"),
  output_truncated, status_code and request_id (of the item's last API
  reply: http and provider kinds), via (the provider batch it ran in),
  fallback_from and fallback_reason (waited | failing: the item ran on a
  fallback kind of its own kind, fallback_from), worker, finished_at

--format writes them as a provider's batch output instead, which code
written for the provider's Batch API reads unchanged:

  openai-batch     a line of OpenAI's batch output file: {"id", "custom_id",
                   "response": {"status_code", "request_id", "body"}, "error"};
                   an item that got no API reply has "response": null and
                   "error": {"code", "message"}
  anthropic-batch  a Message Batch result: {"custom_id", "result": {"type":
                   "succeeded", "message"}} | errored with "error" | canceled

Items still queued or running have no line yet. After a cancel, every item
of the batch has exactly one line. -o writes FILE atomically
(a temporary file renamed at the end).

` + exitCodes(exitOK, exitDoc{exitcode.Failed, "items of the batch failed or were cancelled (the output is complete all the same)"},
			exitDoc{exitcode.Usage, "usage error, or -o FILE cannot be written"}, exitNATS),
		Example: `  producer results --batch items-3f2a9c1b > results.jsonl
  producer results --batch items-3f2a9c1b -o results.jsonl
  producer results --batch items-3f2a9c1b | jq -r 'select(.outcome=="failed") | .item'
  producer results --batch nightly --format openai-batch -o batchoutput.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := queue.CheckID("batch", batch); err != nil {
				return usageErr("--batch: %v", err)
			}
			if format != provider.FormatJSONL {
				if _, err := provider.ResultLine(format, provider.ResultView{}); err != nil {
					return usageErr("--format: %v", err)
				}
			}
			return p.withQueue(cmd, func(ctx context.Context, q *queue.Queue) error {
				return p.writeResults(ctx, q, batch, format, out)
			})
		},
	}
	cmd.Flags().StringVar(&batch, "batch", "", "batch ID (required)")
	cmd.Flags().StringVar(&format, "format", provider.FormatJSONL, "jsonl, openai-batch or anthropic-batch (a provider's batch output)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of standard output")
	_ = cmd.MarkFlagRequired("batch")
	return cmd
}

func (p *producer) writeResults(ctx context.Context, q *queue.Queue, batch, format, out string) error {
	var dst io.Writer = p.stdout
	var tmp *os.File
	if out != "" {
		var err error
		tmp, err = os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.tmp")
		if err != nil {
			return usageErr("-o %s: %v", out, err)
		}
		defer func() {
			if tmp != nil {
				_ = tmp.Close()
				_ = os.Remove(tmp.Name())
			}
		}()
		_ = tmp.Chmod(0o644)
		dst = tmp
	}
	written, err := q.WriteResultsIn(ctx, batch, format, dst)
	n, failed, cancelled := written.Results, written.Failed-written.Cancelled, written.Cancelled
	var werr *queue.WriteError
	switch {
	case errors.As(err, &werr):
		return exitcode.With(exitcode.Usage, werr)
	case err != nil:
		return unreachable(fmt.Sprintf("reading the results of batch %s (after %d)", batch, n), err)
	}
	where := "standard output"
	if tmp != nil {
		if err := tmp.Close(); err != nil {
			return exitcode.With(exitcode.Usage, fmt.Errorf("writing %s: %w", out, err))
		}
		if err := os.Rename(tmp.Name(), out); err != nil {
			return exitcode.With(exitcode.Usage, fmt.Errorf("writing %s: %w", out, err))
		}
		tmp = nil
		where = out
	}
	switch {
	case n == 0:
		fmt.Fprintf(p.stderr, "batch %s has no results (not run yet, unknown, or older than queue.results_max_age)\n", termsafe.String(batch))
	case cancelled > 0:
		fmt.Fprintf(p.stderr, "%d results of batch %s (%d succeeded, %d failed, %d cancelled) written to %s\n", n, termsafe.String(batch),
			n-failed-cancelled, failed, cancelled, termsafe.String(where))
	default:
		fmt.Fprintf(p.stderr, "%d results of batch %s (%d succeeded, %d failed) written to %s\n", n, termsafe.String(batch), n-failed, failed,
			termsafe.String(where))
	}
	switch {
	case cancelled > 0:
		return exitcode.With(exitcode.Failed, fmt.Errorf("%d of %d items of batch %s failed and %d were cancelled", failed, n, batch, cancelled))
	case failed > 0:
		return exitcode.With(exitcode.Failed, fmt.Errorf("%d of %d items of batch %s failed", failed, n, batch))
	}
	return nil
}
