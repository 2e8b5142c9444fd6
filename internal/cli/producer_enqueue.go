package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// enqueueOptions are the flags and argument of `producer enqueue`.
type enqueueOptions struct {
	kind     string
	batch    string
	idField  string
	format   string
	deadline string
	budget   string
	tenant   string
	dryRun   bool
	wait     bool
	json     bool
	window   int
	file     string // "-" for stdin
	// priority and weight of the batch; 0: not given.
	priority, weight int
}

// Limits of the enqueue report.
const (
	maxProblemsShown = 20
	// dryRunMaxPayload is what a dry run assumes of the server: NATS's
	// default max_payload.
	dryRunMaxPayload = enqueue.DryRunMaxPayload
	// progressEvery spaces the plain progress lines (of --wait).
	progressEvery = 2 * time.Second
)

func (p *producer) enqueueCmd() *cobra.Command {
	var o enqueueOptions
	cmd := &cobra.Command{
		Use:   "enqueue [flags] FILE|-",
		Short: "Validate a JSON Lines file of items and put it on the work queue",
		Long: `enqueue reads JSON Lines (a file, or standard input for "-"): one JSON
object per line, the item's payload. The item ID is the value of --id-field
(default "id"): a non-empty string or an integer. Blank lines are skipped.

The whole input is validated before anything is published. A malformed line,
a line that is not an object, a missing, empty or repeated ID, an item larger
than the NATS server's max payload, or bytes that are not UTF-8: each is
reported with its line number (and ID), and nothing of the input is
enqueued (exit 2). The input is streamed: a file larger than memory works
(standard input is spooled to a temporary file for the second pass).

Items are published asynchronously with a bounded window; every publish is
confirmed by the server before it is counted. Each message's ID is
"<batch>/<item id>", so enqueueing the same batch again within
queue.duplicate_window (default 2h) adds nothing: the duplicates are
counted and reported. If publishing fails part-way (the server went away),
enqueue says how many items were confirmed; rerunning the same command is
safe.

The batch ID defaults to the file's name without its extension and the
first 8 hex digits of the SHA-256 of its content: items.jsonl gives
"items-3f2a9c1b", standard input "stdin-<hash>". The same content gives the
same batch, so a repeat is recognised.

--priority (1 first .. 5 last, default 3) and --weight (1 .. 1000, default
1) set the batch's place among the batches waiting for keys (see "Batches"
in docs/operations.md). They are kept in the batch's record: enqueueing into an
existing batch without them leaves its priority and weight as they are;
with them, they replace the batch's. Out of range: exit 2.

--kind defaults to the only kind the configuration defines: a named kind
(jobs.kinds.<name>) or a configured built-in one (jobs.exec, jobs.http).
When it defines several, or none, --kind is required (exit 2, naming them);
sleep needs no configuration. This flag's help below lists the kinds the
configuration found defines.

--dry-run validates and lists the items that would be enqueued, publishing
nothing and needing no server; it assumes NATS's default max payload of
1 MiB.

--wait then follows the batch until every item of the input has an outcome:
a progress bar on a terminal (done/failed/total, rate, ETA), a plain line
every 2 s otherwise (on standard error), then a summary on standard output:
Total, Succeeded, Failed, Cancelled, Duration, Items/s. It exits 1 if any
item failed or was cancelled (a batch cancelled while it waits: every item
that never ran is counted cancelled, and the waiting ends). Ctrl-C stops the
waiting, not the batch (exit 130).

A cancelled batch takes no new items: enqueueing into it is refused and
nothing is published (exit 2). If the batch is cancelled while enqueue
publishes, enqueue stops, says exactly how many items were published and
records them as cancelled with the rest of the batch (exit 2).

--json prints one JSON object on standard output instead of the text, the
one POST /api/batches answers: {"batch", "items", "new", "duplicates",
"kind", "priority", "weight"}; a dry run adds "dry_run": true (nothing
published: new and duplicates are 0), --wait adds "wait": {"total",
"succeeded", "failed", "cancelled", "duration_seconds", "items_per_second",
"failures": [{"item", "error"}] (at most 10)}. Progress and errors stay on
standard error.

` + exitCodes(exitOK,
			exitDoc{exitcode.Failed, "--wait: items failed or were cancelled"},
			exitDoc{exitcode.Usage, "usage, configuration or input error, a kind to give, a cancelled batch (nothing was enqueued, or exactly what was is said)"},
			exitDoc{exitcode.Unreachable, "NATS unreachable, or a publish not confirmed"},
			exitDoc{exitcode.Interrupted, "--wait: interrupted (Ctrl-C) while waiting; the batch goes on"}),
		Example: `  # enqueue items.jsonl (batch items-<hash>) and wait for the outcomes
  producer enqueue --config kf.yaml --wait items.jsonl

  # check a file without a server: list what would be enqueued
  producer enqueue --dry-run --kind chat items.jsonl

  # for a script: the batch ID from the JSON answer
  producer enqueue --json items.jsonl | jq -r .batch

  # an OpenAI Batch API input file, on a kind of provider openai
  producer enqueue --kind chat --format openai-batch batchinput.jsonl

  # a batch that never spends more than 25.00 (at pool.prices), for the research team
  producer enqueue --kind chat --budget 25 --tenant research prompts.jsonl

  # work that can wait: through the provider's Batch API, done within a day
  producer enqueue --kind chat --format openai-batch --deadline 24h batchinput.jsonl

  # from standard input, items named by their "url" field, sleep jobs
  generate-items | producer enqueue --kind sleep --id-field url --batch crawl-7 -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.file = args[0]
			return p.enqueue(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kind, "kind", "", kindFlagUsage(nil))
	f.StringVar(&o.batch, "batch", "", "batch ID (default: <file name>-<content hash>, stdin-<content hash> for -)")
	f.StringVar(&o.idField, "id-field", "id", "top-level field holding each item's ID (the batch formats' is custom_id)")
	f.StringVar(&o.format, "format", provider.FormatJSONL, "the lines' format: jsonl, openai-batch (OpenAI Batch API input lines) or anthropic-batch "+
		"({custom_id, params}); the batch formats need a kind of that provider")
	f.StringVar(&o.budget, "budget", "", "the most the batch may spend, fleet-wide, at pool.prices (e.g. 25.50): a start reserves what its request "+
		"can cost at most; once what is left cannot cover the next start the batch pauses (reason budget). Needs a provider kind "+
		"and max_tokens in every request")
	f.StringVar(&o.tenant, "tenant", "", "the team the batch belongs to (tenants: in the configuration): tenants share the keys by weight, "+
		"and a tenant's budget bounds all its batches")
	f.StringVar(&o.deadline, "deadline", "", "the batch may finish any time before this (a duration from now, 24h, or an RFC 3339 time): "+
		"its items run through the provider's Batch API at half price (a kind of provider openai or anthropic)")
	f.IntVar(&o.priority, "priority", kftype.PriorityDefault, fmt.Sprintf("the batch's priority: %d (first) to %d (last); a batch enqueued again keeps its own unless given",
		kftype.PriorityFirst, kftype.PriorityLast))
	f.IntVar(&o.weight, "weight", kftype.WeightDefault, fmt.Sprintf("the batch's share of the keys among batches of its priority: %d to %d; kept like --priority",
		kftype.WeightMin, kftype.WeightMax))
	f.BoolVar(&o.dryRun, "dry-run", false, "validate and list the items; publish nothing (needs no server)")
	f.BoolVar(&o.wait, "wait", false, "wait until every item has an outcome, then print a summary; exit 1 if any failed or was cancelled")
	f.BoolVar(&o.json, "json", false, `print one JSON object: {"batch", "items", "new", "duplicates", ...}`)
	f.IntVar(&o.window, "window", queue.DefaultWindow, "publishes awaiting confirmation at once")
	_ = f.MarkHidden("window")
	// The help lists the kinds of the configuration the flags name.
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		if cfg, err := p.g.load(nil); err == nil {
			c.Flags().Lookup("kind").Usage = kindFlagUsage(cfg)
		}
		help(c, args)
	})
	return cmd
}

// kindNotServed reports whether workers of cfg (a file's: the built-in
// defaults say nothing of a fleet) would dead-letter items of kind: a
// built-in kind whose jobs section the file lacks. A named kind
// (jobs.kinds) is served by every worker of the file.
func kindNotServed(cfg *config.Config, kind string) bool {
	if cfg.Source == config.DefaultsSource {
		return false
	}
	if _, named := cfg.Jobs.Kinds[kind]; named {
		return false
	}
	_, ok := cfg.Jobs.Section(kind)
	return !ok
}

// configuredKinds are the kinds cfg defines, sorted: its named kinds
// (jobs.kinds) and the built-in kinds whose section it configures
// (jobs.exec, jobs.http). Sleep, which needs no configuration, is not
// among them.
func configuredKinds(cfg *config.Config) []string {
	kinds := cfg.Jobs.KindNames()
	for _, k := range jobs.Kinds() {
		if _, ok := cfg.Jobs.Section(k.Name); ok && k.Section != nil {
			kinds = append(kinds, k.Name)
		}
	}
	slices.Sort(kinds)
	return kinds
}

// defaultKind is the kind of items enqueued without --kind: the only kind
// cfg defines. With several, or none, --kind is required: a usage error
// naming them.
func defaultKind(cfg *config.Config) (string, error) {
	switch kinds := configuredKinds(cfg); len(kinds) {
	case 1:
		return kinds[0], nil
	case 0:
		return "", usageErr("--kind is required: the configuration (%s) defines no job kind (jobs.kinds, jobs.exec or jobs.http); "+
			"give --kind (sleep needs no configuration)", cfg.Source)
	default:
		return "", usageErr("--kind is required: the configuration (%s) defines several job kinds: %s; give one of them with --kind",
			cfg.Source, strings.Join(kinds, ", "))
	}
}

// kindFlagUsage is --kind's help for cfg, or for the configuration not
// known yet (nil).
func kindFlagUsage(cfg *config.Config) string {
	if cfg == nil {
		return "job kind: one the configuration defines (jobs.kinds.<name>, jobs.exec, jobs.http), or sleep " +
			"(default: the only kind it defines)"
	}
	switch kinds := configuredKinds(cfg); len(kinds) {
	case 0:
		return fmt.Sprintf("job kind: the configuration (%s) defines none, so give one: sleep needs no configuration", cfg.Source)
	case 1:
		return fmt.Sprintf("job kind: %s, or sleep (default %s: the only kind the configuration (%s) defines)", kinds[0], kinds[0], cfg.Source)
	default:
		return fmt.Sprintf("job kind: %s (defined by the configuration, %s), or sleep; required: it defines several",
			strings.Join(kinds, ", "), cfg.Source)
	}
}

// enqueue is `producer enqueue`: internal/enqueue does the work; this
// prints what it reports and maps its errors to exit codes.
func (p *producer) enqueue(cmd *cobra.Command, o enqueueOptions) error {
	start := time.Now()
	cfg, log, err := p.setup(nil)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	flags := cmd.Flags()
	if !flags.Changed("kind") {
		if o.kind, err = defaultKind(cfg); err != nil {
			return err
		}
	}
	if o.idField == "" {
		return usageErr("--id-field must not be empty")
	}
	// enqueue.Request takes 0 for "not given" (an existing batch keeps
	// its own); a value given is checked as it is.
	for _, f := range []struct {
		name  string
		v     *int
		check func(int) error
	}{{"priority", &o.priority, enqueue.CheckPriority}, {"weight", &o.weight, enqueue.CheckWeight}} {
		if !flags.Changed(f.name) {
			*f.v = 0
		} else if err := f.check(*f.v); err != nil {
			return enqueueErr(err)
		}
	}
	req := enqueue.Request{
		Kind: o.kind, NamedKinds: cfg.Jobs.KindNames(), Batch: o.batch, IDField: o.idField, Priority: o.priority, Weight: o.weight,
		Format: o.format, Provider: cfg.Jobs.KindProvider(o.kind), Endpoint: cfg.Jobs.KindEndpoint(o.kind),
		CostField: cfg.Pool.Cost.Field, CostDefault: cfg.Pool.Cost.Default, ScopeField: cfg.Pool.Scope.Field,
		DryRun: o.dryRun, MaxPayload: dryRunMaxPayload, Window: o.window, MaxProblems: maxProblemsShown,
		By: operator(),
	}
	if o.deadline != "" {
		if req.Deadline, err = enqueue.ParseDeadline(o.deadline, time.Now()); err != nil {
			return enqueueErr(err)
		}
	}
	if o.budget != "" {
		b, err := spend.ParseAmount(o.budget)
		if err != nil {
			return usageErr("--budget: %v", err)
		}
		req.Budget = &b
	}
	req.Tenant = o.tenant
	if len(cfg.Tenants) > 0 {
		req.Tenants = slices.Sorted(maps.Keys(cfg.Tenants))
		req.BudgetedTenants = cfg.BudgetedTenants()
	}
	req.Source = enqueue.Source{Name: termsafe.String(o.file), Path: o.file}
	if o.file == "-" {
		req.Source = enqueue.Source{Name: "stdin", Reader: p.stdin}
	}
	// The request's own checks first: a wrong flag is told before any
	// server is asked.
	if err := enqueue.Check(req); err != nil {
		return enqueueErr(err)
	}
	if kindNotServed(cfg, o.kind) {
		fmt.Fprintf(p.stderr, "note: jobs.%s is not configured in %s: workers with this configuration dead-letter %s items\n",
			o.kind, cfg.Source, o.kind)
	}
	if o.file != "-" {
		if st, err := os.Stat(o.file); err != nil {
			return usageErr("cannot read the items: %v", err)
		} else if st.IsDir() {
			return usageErr("cannot read the items: %s is a directory", o.file)
		}
	}

	// What enqueue keeps is the input's IDs set, 8 bytes an item in
	// arrays without pointers (marking them costs nothing), while each
	// line leaves a little garbage: a lower GC target than the default
	// 100% keeps the peak near what is kept (10M items: 12 B an item of
	// peak RSS instead of 19) for a few more, cheap collections.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var q *queue.Queue
	if !o.dryRun {
		var closeQ func()
		q, closeQ, err = openQueue(ctx, cfg, log)
		if err != nil {
			return err
		}
		defer closeQ()
		if req.Budget != nil {
			ledger, closeL, err := openLedger(ctx, cfg)
			if err != nil {
				return err
			}
			defer closeL()
			req.Ledger = ledger
		}
	}

	name := req.Source.Name
	req.Progress = func(pr enqueue.Progress) {
		if pr.Phase == enqueue.Checking {
			fmt.Fprintf(p.stderr, "checking %s: %d lines read...\n", name, pr.Lines)
		} else {
			fmt.Fprintf(p.stderr, "publishing batch %s: %d of %d items confirmed...\n", termsafe.String(o.batch), pr.Confirmed, pr.Items)
		}
	}
	var w *bufio.Writer
	if o.dryRun && !o.json {
		w = bufio.NewWriter(p.stdout)
		req.Checked = func(rep enqueue.Report) {
			fmt.Fprintf(w, "Dry run: would enqueue %d items of kind %s from %s as batch %s (nothing published;\n",
				rep.Items, rep.Kind, name, termsafe.String(rep.Batch))
			fmt.Fprintf(w, "sizes checked against NATS's default max payload of 1 MiB, not against a server):\n")
		}
		req.List = func(id string) error {
			_, err := fmt.Fprintf(w, "  - %s\n", termsafe.String(id))
			return err
		}
	} else {
		req.Checked = func(rep enqueue.Report) { o.batch = rep.Batch }
	}
	rep, err := enqueue.Run(ctx, q, req)
	if w != nil {
		if ferr := w.Flush(); err == nil && ferr != nil {
			err = exitcode.With(exitcode.Usage, fmt.Errorf("writing the list: %w", ferr))
		}
	}
	if err != nil {
		return p.enqueueFailed(rep, err, log, o.json)
	}
	switch {
	case o.json && (rep.Items == 0 || o.dryRun):
		return writeJSON(p.stdout, enqueueJSON(rep))
	case rep.Items == 0:
		fmt.Fprintf(p.stdout, "%s: 0 items (%d lines): nothing to enqueue.\n", name, rep.Lines)
		return nil
	case o.dryRun:
		return nil
	}
	batch := termsafe.String(rep.Batch)
	if rep.RecordErr != nil {
		log.Debug("batch record", zap.Error(rep.RecordErr))
		fmt.Fprintf(p.stderr, "warning: batch %s: %d new items enqueued, but its record (the dashboard's total) was not updated: %s\n",
			batch, rep.New, termsafe.String(rep.RecordErr.Error()))
	}
	if o.json {
		out := enqueueJSON(rep)
		if !o.wait {
			return writeJSON(p.stdout, out)
		}
		sum, err := p.follow(ctx, q, rep.Batch, rep.IDs, rep.Items, start)
		if sum != nil {
			out.Wait = sum
			if werr := writeJSON(p.stdout, out); werr != nil && err == nil {
				err = werr
			}
		}
		return err
	}
	if rep.Duplicates == 0 {
		fmt.Fprintf(p.stdout, "Enqueued batch %s: %d items of kind %s from %s (%d new, 0 duplicates).\n",
			batch, rep.Items, rep.Kind, name, rep.New)
	} else {
		fmt.Fprintf(p.stdout, "Enqueued batch %s: %d items of kind %s from %s (%d new, %d duplicates: already enqueued, not added again).\n",
			batch, rep.Items, rep.Kind, name, rep.New, rep.Duplicates)
	}
	if rep.Priority != kftype.PriorityDefault || rep.Weight != kftype.WeightDefault {
		fmt.Fprintf(p.stdout, "Batch %s: priority %d, weight %d.\n", batch, rep.Priority, rep.Weight)
	}
	if !o.wait {
		fmt.Fprintf(p.stdout, "Follow it with: producer status; results with: producer results --batch %s\n", batch)
		return nil
	}
	sum, err := p.follow(ctx, q, rep.Batch, rep.IDs, rep.Items, start)
	if sum != nil {
		printSummary(p.stdout, rep.Batch, sum)
	}
	return err
}

// enqueueFailed reports a failed enqueue: the bad lines of the input on
// stderr, what a partial publishing confirmed on stdout; the error it
// returns carries the exit code.
func (p *producer) enqueueFailed(rep enqueue.Report, err error, log *zap.Logger, asJSON bool) error {
	var ie *enqueue.InputError
	var pe *enqueue.PublishError
	switch {
	case errors.As(err, &ie):
		for _, le := range ie.Problems {
			fmt.Fprintf(p.stderr, "%s: %s\n", ie.Source, termsafe.String(le.Error()))
		}
		if ie.Count > len(ie.Problems) {
			fmt.Fprintf(p.stderr, "%s: ... and %d more problems\n", ie.Source, ie.Count-len(ie.Problems))
		}
		what := "nothing was enqueued"
		if ie.DryRun {
			what = "nothing would be enqueued"
		}
		return reword(err, "%s: %d bad %s in %d lines: %s", ie.Source, ie.Count, plural(ie.Count, "line", "lines"), ie.Lines, what)
	case errors.As(err, &pe):
		out := p.stdout
		if asJSON {
			out = p.stderr // standard output is for the one JSON value
		}
		fmt.Fprintf(out, "Enqueue incomplete: %s.\n"+
			"Rerunning the same command with the same input is safe: items already enqueued are dropped as duplicates.\n",
			termsafe.String(pe.Report.Incomplete()))
		log.Debug("publish failed", zap.Error(pe.Err))
	}
	return enqueueErr(err)
}

// enqueueErr says an internal/enqueue error for the command line: a wrong
// field of the request names its flag. Its exit code is its class's
// (exitcode.Lookup), as the HTTP API's status is.
func enqueueErr(err error) error {
	var re *enqueue.RequestError
	if errors.As(err, &re) {
		field := re.Field
		if field == "id_field" {
			field = "id-field"
		}
		return reword(err, "--%s: %v", field, re.Err)
	}
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
