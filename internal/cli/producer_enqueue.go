package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// enqueueOptions are the flags and argument of `producer enqueue`.
type enqueueOptions struct {
	kind    string
	batch   string
	idField string
	dryRun  bool
	wait    bool
	window  int
	file    string // "-" for stdin
	// cost says where an item's estimated cost comes from (pool.cost).
	costField   string
	costDefault int64
}

// Limits of the enqueue report.
const (
	maxProblemsShown = 20
	// dryRunMaxPayload is what a dry run assumes of the server: NATS's
	// default max_payload.
	dryRunMaxPayload = 1 << 20
	// progressEvery spaces the plain progress lines.
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

--kind defaults to the only job kind configured (jobs.exec or jobs.http) if
exactly one is, else exec.

--dry-run validates and lists the items that would be enqueued, publishing
nothing and needing no server; it assumes NATS's default max payload of
1 MiB.

--wait then follows the batch until every item of the input has an outcome:
a progress bar on a terminal (done/failed/total, rate, ETA), a plain line
every 2 s otherwise (on standard error), then a summary on standard output:
Total, Succeeded, Failed, Duration, Items/s. It exits 1 if any item failed.
Ctrl-C stops the waiting, not the batch (exit 130).

` + exitCodesHelp,
		Example: `  # enqueue items.jsonl (batch items-<hash>) and wait for the outcomes
  producer enqueue --config kf.yaml --wait items.jsonl

  # check a file without a server: list what would be enqueued
  producer enqueue --dry-run items.jsonl

  # from standard input, items named by their "url" field, sleep jobs
  generate-items | producer enqueue --kind sleep --id-field url --batch crawl-7 -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.file = args[0]
			return p.enqueue(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kind, "kind", "", kindFlagUsage())
	f.StringVar(&o.batch, "batch", "", "batch ID (default: <file name>-<content hash>, stdin-<content hash> for -)")
	f.StringVar(&o.idField, "id-field", "id", "top-level field holding each item's ID")
	f.BoolVar(&o.dryRun, "dry-run", false, "validate and list the items; publish nothing (needs no server)")
	f.BoolVar(&o.wait, "wait", false, "wait until every item has an outcome, then print a summary; exit 1 if any failed")
	f.IntVar(&o.window, "window", queue.DefaultWindow, "publishes awaiting confirmation at once")
	_ = f.MarkHidden("window")
	return cmd
}

// defaultKind is the only configured kind of those that take settings
// (exec, http), else jobs.DefaultKind.
func defaultKind(cfg *config.Config) string {
	var configured []string
	for _, k := range jobs.Kinds() {
		if _, ok := cfg.Jobs.Section(k.Name); ok && k.Section != nil {
			configured = append(configured, k.Name)
		}
	}
	if len(configured) == 1 {
		return configured[0]
	}
	return jobs.DefaultKind
}

// kindFlagUsage is --kind's help: "job kind: exec, http or sleep (default:
// the only configured kind of jobs.exec/jobs.http, else exec)".
func kindFlagUsage() string {
	var sections []string
	for _, k := range jobs.Kinds() {
		if k.Section != nil {
			sections = append(sections, "jobs."+k.Name)
		}
	}
	names := jobs.Names()
	return fmt.Sprintf("job kind: %s or %s (default: the only configured kind of %s, else %s)",
		strings.Join(names[:len(names)-1], ", "), names[len(names)-1], strings.Join(sections, "/"), jobs.DefaultKind)
}

// input is the items file opened for one pass.
type input struct {
	name   string // for messages: the path (terminal-safe), or "stdin"
	stdin  io.Reader
	path   string
	spool  string // stdin's copy, after the first pass
	closer io.Closer
}

// open returns the reader of the next pass. The first pass over stdin
// copies it into a temporary file for the second.
func (in *input) open(first bool) (io.Reader, *bufio.Writer, error) {
	if in.closer != nil {
		_ = in.closer.Close()
		in.closer = nil
	}
	if in.path == "" && first {
		f, err := os.CreateTemp("", "keyfleet-stdin-*.jsonl")
		if err != nil {
			return nil, nil, fmt.Errorf("spooling standard input: %w", err)
		}
		in.spool, in.closer = f.Name(), f
		w := bufio.NewWriterSize(f, 1<<20)
		return io.TeeReader(in.stdin, w), w, nil
	}
	path := in.path
	if path == "" {
		path = in.spool
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%s is a directory", path)
	}
	in.closer = f
	return f, nil, nil
}

func (in *input) close() {
	if in.closer != nil {
		_ = in.closer.Close()
	}
	if in.spool != "" {
		_ = os.Remove(in.spool)
	}
}

// defaultBatch is <name>-<8 hex digits of the content's SHA-256>.
func defaultBatch(in *input, sum []byte) string {
	name := "stdin"
	if in.path != "" {
		base := filepath.Base(in.path)
		name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	return batchName(name) + "-" + hex.EncodeToString(sum)[:8]
}

// batchName keeps a file name readable as a batch ID: letters, digits,
// '.', '_' and '-'; anything else becomes '-'.
func batchName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-.")
	if len(s) > 64 {
		s = s[:64]
	}
	if s == "" {
		s = "items"
	}
	return s
}

func (p *producer) enqueue(cmd *cobra.Command, o enqueueOptions) error {
	start := time.Now()
	cfg, log, err := p.setup(nil)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if !cmd.Flags().Changed("kind") {
		o.kind = defaultKind(cfg)
	}
	o.costField, o.costDefault = cfg.Pool.Cost.Field, cfg.Pool.Cost.Default
	if err := queue.CheckKind(o.kind); err != nil {
		return usageErr("--kind: %v", err)
	}
	if o.batch != "" {
		if err := queue.CheckID("batch", o.batch); err != nil {
			return usageErr("--batch: %v", err)
		}
	}
	if o.idField == "" {
		return usageErr("--id-field must not be empty")
	}
	if _, ok := cfg.Jobs.Section(o.kind); !ok && cfg.Source != config.DefaultsSource {
		fmt.Fprintf(p.stderr, "note: jobs.%s is not configured in %s: workers with this configuration dead-letter %s items\n",
			o.kind, cfg.Source, o.kind)
	}

	in := &input{name: termsafe.String(o.file), path: o.file}
	if o.file == "-" {
		in = &input{name: "stdin", stdin: p.stdin}
	} else if st, err := os.Stat(o.file); err != nil {
		return usageErr("cannot read the items: %v", err)
	} else if st.IsDir() {
		return usageErr("cannot read the items: %s is a directory", o.file)
	}
	defer in.close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The server decides how large an item may be; a dry run assumes the
	// default.
	var q *queue.Queue
	maxPayload := int64(dryRunMaxPayload)
	if !o.dryRun {
		var closeQ func()
		q, closeQ, err = openQueue(ctx, cfg, log)
		if err != nil {
			return err
		}
		defer closeQ()
		maxPayload = q.Conn().MaxPayload()
	}

	// Pass 1: validate everything and hash the content.
	batchLen := len(o.batch)
	if o.batch == "" {
		batchLen = len(defaultBatch(in, make([]byte, 32)))
	}
	fits := func(it queue.Item) (int, int64, bool) {
		if q != nil {
			return q.Fits(it)
		}
		size, ok := queue.Fits(it, maxPayload)
		return size, maxPayload, ok
	}
	check, err := p.validate(ctx, in, o, int(maxPayload), func(it jsonl.Item) *jsonl.LineError {
		size, limit, ok := fits(queue.Item{ID: it.ID, Batch: strings.Repeat("b", batchLen), Kind: o.kind, Payload: it.Raw, Cost: it.Cost})
		if ok {
			return nil
		}
		return &jsonl.LineError{Line: it.Line, ID: it.ID, Err: jsonl.ErrTooLong,
			Detail: fmt.Sprintf("%d bytes with its message headers, more than the server's max payload of %d", size, limit)}
	})
	if err != nil {
		return err
	}
	if o.batch == "" {
		o.batch = defaultBatch(in, check.sum)
	}
	if check.items == 0 {
		fmt.Fprintf(p.stdout, "%s: 0 items (%d lines): nothing to enqueue.\n", in.name, check.lines)
		return nil
	}
	if o.dryRun {
		return p.dryRun(in, o, check)
	}

	// Pass 2: publish.
	rep, err := p.publish(ctx, q, in, o, check, log)
	p.recordBatch(ctx, q, o, rep, log)
	if err != nil {
		return err
	}
	if rep.Duplicates == 0 {
		fmt.Fprintf(p.stdout, "Enqueued batch %s: %d items of kind %s from %s (%d new, 0 duplicates).\n",
			termsafe.String(o.batch), check.items, o.kind, in.name, rep.Published)
	} else {
		fmt.Fprintf(p.stdout, "Enqueued batch %s: %d items of kind %s from %s (%d new, %d duplicates: already enqueued, not added again).\n",
			termsafe.String(o.batch), check.items, o.kind, in.name, rep.Published, rep.Duplicates)
	}
	if !o.wait {
		fmt.Fprintf(p.stdout, "Follow it with: producer status; results with: producer results --batch %s\n", termsafe.String(o.batch))
		return nil
	}
	return p.follow(ctx, q, o.batch, check.ids, check.items, start)
}

// checked is what the first pass learnt.
type checked struct {
	items, lines int
	maxLine      int
	sum          []byte
	ids          *jsonl.IDs
}

// validate reads the whole input, reporting every problem on stderr (the
// first maxProblemsShown of them); any problem is an input error.
func (p *producer) validate(ctx context.Context, in *input, o enqueueOptions, maxLine int,
	fits func(jsonl.Item) *jsonl.LineError) (checked, error) {
	src, spool, err := in.open(true)
	if err != nil {
		return checked{}, exitcode.With(exitcode.Usage, fmt.Errorf("cannot read the items: %w", err))
	}
	h := sha256.New()
	rd, err := jsonl.NewReader(io.TeeReader(src, h), jsonl.Options{
		IDField: o.idField, MaxLine: maxLine,
		CheckID:   func(id string) error { return queue.CheckID("item", id) },
		CostField: o.costField, CostDefault: o.costDefault,
	})
	if err != nil {
		return checked{}, usageErr("%v", err)
	}
	problems := 0
	report := func(le *jsonl.LineError) {
		problems++
		if problems <= maxProblemsShown {
			msg := le.Error()
			if errors.Is(le, jsonl.ErrTooLong) {
				msg += " (the limit is the NATS server's max_payload)"
			}
			fmt.Fprintf(p.stderr, "%s: %s\n", in.name, termsafe.String(msg))
		}
	}
	lastNote := time.Now()
	for {
		it, err := rd.Next()
		if err == io.EOF {
			break
		}
		var le *jsonl.LineError
		if errors.As(err, &le) {
			report(le)
			continue
		}
		if err != nil {
			return checked{}, exitcode.With(exitcode.Usage, fmt.Errorf("%s: %w", in.name, err))
		}
		if le := fits(it); le != nil {
			report(le)
		}
		if rd.Line()&0xfff == 0 {
			if ctx.Err() != nil {
				return checked{}, exitcode.With(exitcode.Interrupted, fmt.Errorf("interrupted while reading %s: nothing was enqueued", in.name))
			}
			if time.Since(lastNote) >= progressEvery {
				lastNote = time.Now()
				fmt.Fprintf(p.stderr, "checking %s: %d lines read...\n", in.name, rd.Line())
			}
		}
	}
	if spool != nil {
		if err := spool.Flush(); err != nil {
			return checked{}, exitcode.With(exitcode.Usage, fmt.Errorf("spooling standard input: %w", err))
		}
	}
	if problems > 0 {
		if problems > maxProblemsShown {
			fmt.Fprintf(p.stderr, "%s: ... and %d more problems\n", in.name, problems-maxProblemsShown)
		}
		what := "nothing was enqueued"
		if o.dryRun {
			what = "nothing would be enqueued"
		}
		return checked{}, exitcode.With(exitcode.Usage, fmt.Errorf("%s: %d bad %s in %d lines: %s",
			in.name, problems, plural(problems, "line", "lines"), rd.Line(), what))
	}
	return checked{items: rd.Items(), lines: rd.Line(), maxLine: maxLine, sum: h.Sum(nil), ids: rd.IDs()}, nil
}

// dryRun lists what would be enqueued, as the seeds' coordinator does.
func (p *producer) dryRun(in *input, o enqueueOptions, c checked) error {
	w := bufio.NewWriter(p.stdout)
	fmt.Fprintf(w, "Dry run: would enqueue %d items of kind %s from %s as batch %s (nothing published;\n",
		c.items, o.kind, in.name, termsafe.String(o.batch))
	fmt.Fprintf(w, "sizes checked against NATS's default max payload of 1 MiB, not against a server):\n")
	err := p.eachItem(in, o, c, func(it jsonl.Item) error {
		_, err := fmt.Fprintf(w, "  - %s\n", termsafe.String(it.ID))
		return err
	})
	if err != nil {
		return err
	}
	return w.Flush()
}

// eachItem is the second pass: it reads the input again and calls fn with
// each item. The input must be the one the first pass checked.
func (p *producer) eachItem(in *input, o enqueueOptions, c checked, fn func(jsonl.Item) error) error {
	src, _, err := in.open(false)
	if err != nil {
		return exitcode.With(exitcode.Usage, fmt.Errorf("cannot read the items again: %w", err))
	}
	h := sha256.New()
	rd, err := jsonl.NewReader(io.TeeReader(src, h), jsonl.Options{
		IDField: o.idField, MaxLine: c.maxLine, AllowDuplicates: true, CostField: o.costField, CostDefault: o.costDefault,
	})
	if err != nil {
		return usageErr("%v", err)
	}
	for {
		it, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return changed(in, err)
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	if rd.Items() != c.items || !equalSum(h, c.sum) {
		return changed(in, fmt.Errorf("its content differs from the first reading"))
	}
	return nil
}

func equalSum(h hash.Hash, sum []byte) bool { return string(h.Sum(nil)) == string(sum) }

func changed(in *input, err error) error {
	return exitcode.With(exitcode.Usage, fmt.Errorf("%s changed while it was being enqueued (%v)", in.name, err))
}

// publish is the second pass of a real run.
func (p *producer) publish(ctx context.Context, q *queue.Queue, in *input, o enqueueOptions, c checked, log *zap.Logger) (queue.PublishReport, error) {
	pub, err := q.NewPublisher(o.window)
	if err != nil {
		return queue.PublishReport{}, unreachable("publishing", err)
	}
	// Add and Flush get a context that Ctrl-C does not cancel: a publish
	// already sent is waited for (bounded by the publish timeout) so that
	// the count of confirmed items is exact.
	pctx := context.WithoutCancel(ctx)
	sent := 0
	lastNote := time.Now()
	errInterrupted := errors.New("interrupted")
	passErr := p.eachItem(in, o, c, func(it jsonl.Item) error {
		if ctx.Err() != nil {
			return errInterrupted
		}
		err := pub.Add(pctx, queue.Item{ID: it.ID, Batch: o.batch, Kind: o.kind, Payload: append([]byte(nil), it.Raw...), Cost: it.Cost})
		if err != nil {
			return err
		}
		sent++
		if sent&0x3ff == 0 && time.Since(lastNote) >= progressEvery {
			lastNote = time.Now()
			r := pub.Report()
			fmt.Fprintf(p.stderr, "publishing batch %s: %d of %d items confirmed...\n", termsafe.String(o.batch), r.Published+r.Duplicates, c.items)
		}
		return nil
	})
	rep, flushErr := pub.Flush(pctx)
	confirmed := rep.Published + rep.Duplicates
	if passErr == nil && flushErr == nil && confirmed == c.items {
		return rep, nil
	}
	// Part-way: say exactly what the server confirmed.
	notSent := c.items - sent
	detail := fmt.Sprintf("%d of %d items of batch %s confirmed (%d new, %d duplicates), %d sent without confirmation, %d not sent",
		confirmed, c.items, termsafe.String(o.batch), rep.Published, rep.Duplicates, rep.Unconfirmed, notSent)
	fmt.Fprintf(p.stdout, "Enqueue incomplete: %s.\n"+
		"Rerunning the same command with the same input is safe: items already enqueued are dropped as duplicates.\n", detail)
	switch {
	case errors.Is(passErr, errInterrupted):
		return rep, exitcode.With(exitcode.Interrupted, fmt.Errorf("interrupted while publishing: %s", detail))
	case exitcode.Of(passErr) == exitcode.Usage:
		return rep, passErr // the input changed or cannot be read again
	}
	err = flushErr
	if err == nil {
		err = passErr
	}
	if err == nil {
		err = fmt.Errorf("the server confirmed %d of %d publishes", confirmed, c.items)
	}
	log.Debug("publish failed", zap.Error(err))
	return rep, exitcode.With(exitcode.Unreachable, fmt.Errorf("publishing to NATS failed: %w", err))
}

// recordBatch adds the items the server stored as new to the batch's
// record, which the dashboard shows progress against; duplicates add
// nothing. A failure is a warning: the items are enqueued all the same.
func (p *producer) recordBatch(ctx context.Context, q *queue.Queue, o enqueueOptions, rep queue.PublishReport, log *zap.Logger) {
	if rep.Published == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	if _, err := q.AddToBatch(rctx, o.batch, o.kind, rep.Published); err != nil {
		log.Debug("batch record", zap.Error(err))
		fmt.Fprintf(p.stderr, "warning: batch %s: %d new items enqueued, but its record (the dashboard's total) was not updated: %s\n",
			termsafe.String(o.batch), rep.Published, termsafe.String(err.Error()))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
