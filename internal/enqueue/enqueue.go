// Package enqueue puts a JSON Lines input on the work queue: the one
// implementation behind `producer enqueue` and the dashboard's
// POST /api/batches.
//
// Run validates the whole input before anything is published (all or
// nothing), then publishes it with a bounded window of unconfirmed
// publishes and records the new items in the batch's record. Every
// message's ID is "<batch>/<item ID>", so enqueueing the same input into
// the same batch again adds nothing: the server drops the repeats as
// duplicates, and Run counts them. Run prints nothing: it returns a Report,
// or an error of one of the kinds in errors.go.
//
// The input is read twice: once to validate it, once to publish it; a
// third time, for the few IDs whose 64-bit hashes collide, when there are
// any (a repeated ID always is one). A file is opened again for each
// reading; a stream (standard input, an HTTP body) is copied to a
// temporary file on the first reading, so memory stays at a line plus 8
// bytes per item (jsonl.IDs), whatever the size of the input.
package enqueue

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Defaults of a Request.
const (
	DefaultIDField = "id"
	// DryRunMaxPayload is what a dry run assumes of the server: NATS's
	// default max_payload.
	DryRunMaxPayload = 1 << 20
	// DefaultMaxProblems bounds the bad lines an InputError lists.
	DefaultMaxProblems = 20
	// DefaultProgressEvery spaces the calls of Request.Progress.
	DefaultProgressEvery = 2 * time.Second
	// recordTimeout bounds the reading and the writing of the batch
	// record.
	recordTimeout = 15 * time.Second
	// drainTimeout bounds recording as cancelled what an enqueue that
	// raced a cancel published (the workers' sweeper does the rest).
	drainTimeout = 30 * time.Second
	// MaxScopes bounds the scopes of one enqueue's items: each is a lane
	// of the batch, with its own JetStream consumer while it holds items.
	// A scope is what items share a limit by (a model), not one item's.
	MaxScopes = 256
)

// cancelCheckEvery spaces the readings of the batch's record while a long
// input is published: a cancel seen stops the publishing, and what was
// published so far is recorded. A variable for the tests.
var cancelCheckEvery = time.Second

// Source is the input.
type Source struct {
	// Name names the input in messages ("items.jsonl", "stdin"). With
	// Reader it is also the first part of the default batch ID.
	Name string
	// Path is a file, opened again for each reading.
	Path string
	// Reader, when Path is "", is read once and copied to a temporary
	// file (in Request.TempDir) for the next readings.
	Reader io.Reader
}

// Request is one enqueue.
type Request struct {
	Source Source
	// Kind of the items (required: the front end picks the default): a
	// built-in kind (jobs.Lookup) or one of NamedKinds, the configuration's
	// named kinds (jobs.kinds).
	Kind       string
	NamedKinds []string
	// Batch ID; "" for the default: the file's name without its extension
	// (Source.Name for a Reader) and the first 8 hex digits of the
	// SHA-256 of the content ("items-3f2a9c1b"), so that the same content
	// gives the same batch.
	Batch string
	// IDField is the top-level field holding each item's ID (default
	// DefaultIDField; the batch formats' is custom_id).
	IDField string
	// Format of the input's lines: provider.FormatJSONL (the default),
	// FormatOpenAIBatch or FormatAnthropicBatch (which need a kind of
	// that provider).
	Format string
	// Provider is the provider the kind speaks ("" for none): each line is
	// then a request to it (provider.Spec.Parse), checked before anything
	// is published; an item's payload is the request's body, its scope the
	// request's model and its cost the provider's estimate.
	Provider string
	// Endpoint is where the kind's requests go (its http.endpoint), when
	// it is not the provider's default: a line of JSON Lines is a request
	// to it (/v1/embeddings needs an input, not messages). "" for the
	// provider's.
	Endpoint string
	// Budget, when set, bounds what the batch spends, fleet-wide (in its
	// record and the spend ledger, Ledger): it needs a provider kind, and
	// every request must name its max tokens (max_tokens,
	// max_completion_tokens), which a start reserves. Nil: keep the
	// batch's (none for a new one).
	Budget *spend.Amount
	// Ledger is where the budget is set (the pool's spend ledger); it
	// must be set with Budget.
	Ledger BudgetSetter
	// Tenant, when set, is the team the batch belongs to (queue.CheckTenant;
	// one of Tenants when Tenants is not nil). A batch keeps its tenant:
	// another one for an existing batch is refused.
	Tenant  string
	Tenants []string
	// BudgetedTenants are the tenants with a budget of their own
	// (tenants.<t>.budget): a batch of one of them is under a budget as
	// if it had its own, so each request must name its max tokens.
	BudgetedTenants []string
	// Deadline, when set, is when the batch's items must be done by: they
	// may run through the provider's Batch API (half price) instead of one
	// request each. It needs a kind of provider openai or anthropic, and a
	// moment in the future.
	Deadline time.Time
	// Priority (kftype.PriorityFirst..PriorityLast) and Weight
	// (kftype.WeightMin..WeightMax) of the batch; 0: not given (a new batch
	// gets kftype.PriorityDefault and WeightDefault, an existing one keeps
	// its own). Given, they replace the batch's.
	Priority, Weight int
	// CostField and CostDefault: where an item's estimated cost comes
	// from (pool.cost); CostField "" reads none.
	CostField   string
	CostDefault int64
	// ScopeField is the top-level field holding an item's scope
	// (pool.scope.field: its model, say); "" reads none. A scope is a
	// string creds.ValidScope takes; an item without the field (or null)
	// has none. Items of one scope travel in their own lane of the batch.
	ScopeField string
	// DryRun validates and publishes nothing; the queue may be nil. List,
	// if set, is then called with each item's ID in input order.
	DryRun bool
	List   func(id string) error
	// Checked, if set, is called once the whole input is valid and not
	// empty, before it is listed or published.
	Checked func(Report)
	// MaxPayload is the largest message a dry run assumes the server takes
	// (default DryRunMaxPayload); a real run asks the server.
	MaxPayload int64
	// Window bounds the publishes awaiting confirmation (default
	// queue.DefaultWindow).
	Window int
	// MaxProblems bounds the bad lines an InputError lists (default
	// DefaultMaxProblems); every bad line is counted.
	MaxProblems int
	// Progress, if set, is called every ProgressEvery (default
	// DefaultProgressEvery) while the input is checked and published.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// TempDir is where a Reader is copied ("": os.TempDir()).
	TempDir string
	// By names who enqueues (user@host), for the results of items it
	// records as cancelled when the batch is cancelled while it publishes
	// (default "enqueue").
	By string
}

// Phases of a Progress.
const (
	Checking   = "checking"
	Publishing = "publishing"
)

// Progress is how far a Run is.
type Progress struct {
	Phase string
	// Lines read (Checking).
	Lines int
	// Confirmed of Items (Publishing).
	Confirmed, Items int
}

// Report is what a Run did.
type Report struct {
	// Batch, Kind and Source (its name) of the enqueue.
	Batch, Kind, Source string
	// Lines read and valid Items in them.
	Lines, Items int
	// New: stored by the server as new messages; Duplicates: dropped as
	// already enqueued. After a failure, Unconfirmed were sent without a
	// confirmation and NotSent were never sent.
	New, Duplicates, Unconfirmed, NotSent int
	// Priority and Weight of the batch after the enqueue (what the dry run
	// would give a new batch).
	Priority, Weight int
	DryRun           bool
	// RecordErr: the items are enqueued, but the batch's record (its
	// total, as the dashboard shows it) could not be updated.
	RecordErr error
	// Scopes are the scopes the items have (Request.ScopeField), sorted.
	Scopes []string
	// IDs is the set of the input's item IDs (for following the batch).
	IDs *jsonl.IDs `json:"-"`
	// recorded: of New, those already added to the batch's record while
	// publishing (each second of a long input).
	recorded int
}

// Incomplete says what a publishing that stopped part-way got confirmed.
func (r Report) Incomplete() string {
	return fmt.Sprintf("%d of %d items of batch %s confirmed (%d new, %d duplicates), %d sent without confirmation, %d not sent",
		r.New+r.Duplicates, r.Items, r.Batch, r.New, r.Duplicates, r.Unconfirmed, r.NotSent)
}

// withDefaults fills the zero fields and checks the rest.
func (req Request) withDefaults() (Request, error) {
	req.Format = cmp.Or(req.Format, provider.FormatJSONL)
	if err := provider.CheckFormat(req.Format, req.Provider); err != nil {
		return req, invalid("format", "%v", err)
	}
	if req.Provider != "" {
		if err := provider.Check(req.Provider); err != nil {
			return req, invalid("provider", "%v", err)
		}
	}
	if !req.Deadline.IsZero() {
		if err := CheckDeadline(req.Deadline, req.Provider, time.Now()); err != nil {
			return req, err
		}
	}
	if req.Budget != nil {
		switch {
		case req.Provider == "":
			return req, invalid("budget", "a budget counts what a provider's replies say they used: it needs a kind with a provider")
		case *req.Budget <= 0:
			return req, invalid("budget", "must be more than 0")
		}
	}
	if req.Tenant != "" {
		if err := queue.CheckTenant(req.Tenant); err != nil {
			return req, invalid("tenant", "%v", err)
		}
		if req.Tenants != nil && !slices.Contains(req.Tenants, req.Tenant) {
			return req, invalid("tenant", "%q is not a tenant of the configuration (tenants: %s)", req.Tenant, strings.Join(req.Tenants, ", "))
		}
	}
	req.IDField = provider.IDField(req.Format, cmp.Or(req.IDField, DefaultIDField))
	req.MaxPayload = max(req.MaxPayload, 0)
	if req.MaxPayload == 0 {
		req.MaxPayload = DryRunMaxPayload
	}
	if req.MaxProblems <= 0 {
		req.MaxProblems = DefaultMaxProblems
	}
	if req.ProgressEvery <= 0 {
		req.ProgressEvery = DefaultProgressEvery
	}
	if err := queue.CheckKind(req.Kind, req.NamedKinds...); err != nil {
		return req, invalid("kind", "%v", err)
	}
	if req.Batch != "" {
		if err := queue.CheckID("batch", req.Batch); err != nil {
			return req, invalid("batch", "%v", err)
		}
	}
	if req.Priority != 0 {
		if err := CheckPriority(req.Priority); err != nil {
			return req, err
		}
	}
	if req.Weight != 0 {
		if err := CheckWeight(req.Weight); err != nil {
			return req, err
		}
	}
	if req.Source.Path == "" && req.Source.Reader == nil {
		return req, invalid("source", "no input")
	}
	if req.Source.Name == "" {
		req.Source.Name = req.Source.Path
	}
	return req, nil
}

// BudgetSetter keeps a batch's budget: the spend ledger.
type BudgetSetter interface {
	SetBatchBudget(ctx context.Context, batch string, budget spend.Amount) (spend.Account, error)
}

// spec is the provider of the request's kind, its endpoint the kind's.
func (req Request) spec() (provider.Spec, bool) {
	spec, ok := provider.Lookup(req.Provider)
	if ok && req.Endpoint != "" {
		spec.Endpoint = req.Endpoint
	}
	return spec, ok
}

// CheckDeadline reports whether a batch of a kind of provider prov may
// have deadline d, at now: a Batch API's provider (openai, anthropic) and
// a moment after now (a RequestError when not).
func CheckDeadline(d time.Time, prov string, now time.Time) error {
	spec, ok := provider.Lookup(prov)
	switch {
	case !ok || !spec.HasBatchAPI:
		return invalid("deadline", "runs a batch through a provider's Batch API: it needs a kind of provider %s or %s (this kind's: %s)",
			provider.OpenAI, provider.Anthropic, cmp.Or(prov, "none"))
	case !d.After(now):
		return invalid("deadline", "%s is not in the future", d.UTC().Format(time.RFC3339))
	}
	return nil
}

// ParseDeadline reads a deadline as the front ends take it: a duration
// from now ("24h", "90m") or an RFC 3339 time.
func ParseDeadline(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, invalid("deadline", "%q: a duration from now must be positive", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, invalid("deadline", "%q: want a duration from now (24h) or an RFC 3339 time (2026-12-01T06:00:00Z)", s)
	}
	return t, nil
}

// CheckPriority reports whether p is a batch priority (a RequestError
// when not). A front end checks a priority it was given with it: 0 in a
// Request means "not given".
func CheckPriority(p int) error {
	if p < kftype.PriorityFirst || p > kftype.PriorityLast {
		return invalid("priority", "%d: want %d (first) to %d (last); default %d",
			p, kftype.PriorityFirst, kftype.PriorityLast, kftype.PriorityDefault)
	}
	return nil
}

// CheckWeight reports whether w is a batch weight, as CheckPriority.
func CheckWeight(w int) error {
	if w < kftype.WeightMin || w > kftype.WeightMax {
		return invalid("weight", "%d: want an integer from %d to %d; default %d",
			w, kftype.WeightMin, kftype.WeightMax, kftype.WeightDefault)
	}
	return nil
}

// Check reports what is wrong with req itself (an ErrInvalid), without
// reading its input: front ends check their flags or parameters with it
// before they connect to any server.
func Check(req Request) error {
	_, err := req.withDefaults()
	return err
}

// Run enqueues req's input on q (nil for a dry run); see the package
// documentation.
func Run(ctx context.Context, q *queue.Queue, req Request) (Report, error) {
	req, err := req.withDefaults()
	if err != nil {
		return Report{}, err
	}
	if q == nil && !req.DryRun {
		return Report{}, invalid("queue", "none to publish on")
	}
	if req.Budget != nil && req.Ledger == nil && !req.DryRun {
		return Report{}, invalid("budget", "no spend ledger to keep it in")
	}
	in := &input{src: req.Source, tempDir: req.TempDir}
	defer in.close()
	rep := Report{Batch: req.Batch, Kind: req.Kind, Source: req.Source.Name, DryRun: req.DryRun}

	// The server decides how large an item may be; a dry run assumes.
	fits := func(it kftype.Item) (int, int64, bool) {
		size, ok := queue.Fits(it, req.MaxPayload)
		return size, req.MaxPayload, ok
	}
	if q != nil && !req.DryRun {
		fits = q.Fits
		req.MaxPayload = q.Conn().MaxPayload()
	}

	c, err := check(ctx, in, req, fits)
	if err != nil {
		return rep, err
	}
	rep.Lines, rep.Items, rep.IDs, rep.Scopes = c.lines, c.items, c.ids, c.scopes
	if rep.Batch == "" {
		rep.Batch = defaultBatch(req.Source, c.sum)
	}
	rep.Priority, rep.Weight = cmp.Or(req.Priority, kftype.PriorityDefault), cmp.Or(req.Weight, kftype.WeightDefault)
	if c.items == 0 {
		return rep, nil
	}
	if req.Checked != nil {
		req.Checked(rep)
	}
	if req.DryRun {
		if req.List == nil {
			return rep, nil
		}
		return rep, eachItem(in, req, c, func(it jsonl.Item) error { return req.List(it.ID) })
	}

	rec, err := admit(ctx, q, rep)
	if err != nil {
		return rep, err
	}
	if rec.ID != "" {
		rep.Priority, rep.Weight = cmp.Or(req.Priority, rec.Priority), cmp.Or(req.Weight, rec.Weight)
		if req.Tenant != "" && rec.Tenant != "" && rec.Tenant != req.Tenant {
			return rep, invalid("tenant", "batch %s belongs to tenant %q, not %q", rep.Batch, rec.Tenant, req.Tenant)
		}
		if req.Budget != nil && rec.Budget == nil && rec.Total > 0 {
			return rep, invalid("budget", "batch %s has run without a budget: set one with producer batch set %s --budget", rep.Batch, rep.Batch)
		}
	}
	if req.Budget != nil {
		bctx, cancel := context.WithTimeout(ctx, recordTimeout)
		_, err := req.Ledger.SetBatchBudget(bctx, rep.Batch, *req.Budget)
		cancel()
		if err != nil {
			return rep, classify(ErrUnreachable, "setting batch %s's budget (nothing was enqueued): %w", rep.Batch, err)
		}
	}
	var held heldSet
	if needsHeld(rec, q.Config().DuplicateWindow, time.Now()) {
		if held, err = readHeld(ctx, q, rep.Batch); err != nil {
			if ctx.Err() != nil {
				return rep, classify(ErrInterrupted, "reading what batch %s holds: nothing was enqueued", rep.Batch)
			}
			return rep, classify(ErrUnreachable, "reading what batch %s holds (nothing was enqueued): %w", rep.Batch, err)
		}
	}
	err = publish(ctx, q, in, req, c, &rep, held)
	if err != nil && !errors.Is(err, errCancelled) {
		return rep, err
	}
	raced := err != nil
	var now kftype.BatchInfo
	recorded := false
	if rep.New > rep.recorded || rep.Priority != rec.Priority || rep.Weight != rec.Weight || rec.ID == "" {
		// The record's total counts the new items even when the batch was
		// cancelled meanwhile: they are cancelled with the rest. The record
		// as written says whether it is cancelled now.
		now, rep.RecordErr = record(ctx, q, req, rep, rep.New-rep.recorded)
		recorded = rep.RecordErr == nil
	}
	if !raced && !recorded {
		now = reread(ctx, q, rep.Batch)
	}
	if raced || now.State == kftype.BatchCancelled {
		return rep, cancelledMeanwhile(ctx, q, req, rep)
	}
	return rep, nil
}

// errCancelled stops a publishing when the batch's record says it is
// cancelled.
var errCancelled = errors.New("enqueue: the batch was cancelled while publishing")

// reread reads the batch's record again after publishing (zero when it
// cannot be read: a cancel that this misses drains what was published
// itself, and the workers' sweeper drains what comes back later).
func reread(ctx context.Context, q *queue.Queue, batch string) kftype.BatchInfo {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	rec, _ := q.Batch(rctx, batch)
	return rec
}

// cancelledMeanwhile is the end of an enqueue that raced a cancel: what
// it published is recorded as cancelled (those messages the cancel's own
// drain did not take) and the error says exactly what was published.
func cancelledMeanwhile(ctx context.Context, q *queue.Queue, req Request, rep Report) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
	defer cancel()
	drained, _, err := q.DrainCancelled(dctx, rep.Batch, cmp.Or(req.By, "enqueue"))
	return &CancelledError{Report: rep, Raced: true, Drained: drained, DrainErr: err}
}

// admit is where the batch's state is checked before anything of the
// input is published: a refusal here leaves the queue untouched (a
// cancelled batch takes no new items: a *CancelledError). It returns the
// batch's record (zero when the batch is new).
func admit(ctx context.Context, q *queue.Queue, rep Report) (kftype.BatchInfo, error) {
	batch := rep.Batch
	rctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	rec, err := q.Batch(rctx, batch)
	switch {
	case errors.Is(err, queue.ErrNoBatch):
		return kftype.BatchInfo{}, nil
	case err != nil && ctx.Err() != nil:
		return rec, classify(ErrInterrupted, "reading batch %s's record: nothing was enqueued", batch)
	case err != nil:
		return rec, classify(ErrUnreachable, "reading batch %s's record (nothing was enqueued): %w", batch, err)
	case rec.State == kftype.BatchCancelled:
		return rec, &CancelledError{Report: rep}
	}
	return rec, nil
}

// record adds n items the server stored as new to the batch's record,
// with its priority and weight; duplicates add nothing. It returns the
// record as written. Its failure is a warning: the items are enqueued all
// the same. The queue handle's lane writer registers the record's lanes,
// which the workers pull.
func record(ctx context.Context, q *queue.Queue, req Request, rep Report, n int) (kftype.BatchInfo, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	opts := []queue.BatchOption{queue.WithPriority(req.Priority), queue.WithWeight(req.Weight),
		queue.WithTenant(req.Tenant), queue.WithBudget(req.Budget)}
	if req.Deadline.IsZero() {
		opts = append(opts, queue.WithScopes(rep.Scopes...))
	} else {
		// Staged items have no lane until some of them come back to real
		// time: the worker that sends them adds their scopes.
		opts = append(opts, queue.WithDeadline(req.Deadline, req.Provider))
	}
	return q.AddToBatch(rctx, rep.Batch, rep.Kind, n, opts...)
}

// fitsSlack bounds the message headers of an item with a short ID,
// beyond 8 bytes per byte of its batch ID and kind.
const fitsSlack = 8 << 10

// checked is what the first reading learnt.
type checked struct {
	items, lines int
	maxLine      int
	sum          []byte
	ids          *jsonl.IDs
	scopes       []string // sorted
}

// problems keeps the first max bad lines by line number, and counts all.
type problems struct {
	max   int
	count int
	first []*jsonl.LineError
}

func (p *problems) add(le *jsonl.LineError) {
	p.count++
	i, _ := slices.BinarySearchFunc(p.first, le.Line, func(e *jsonl.LineError, line int) int { return e.Line - line })
	if i >= p.max {
		return
	}
	p.first = slices.Insert(p.first, i, le)
	if len(p.first) > p.max {
		p.first = p.first[:p.max]
	}
}

// check reads the whole input: every line is valid, fits the server's
// max payload, and has an ID no other line has. Any bad line is an
// *InputError.
func check(ctx context.Context, in *input, req Request, fits func(kftype.Item) (int, int64, bool)) (checked, error) {
	underBudget := req.Budget != nil || (req.Tenant != "" && slices.Contains(req.BudgetedTenants, req.Tenant))
	src, err := in.open(true)
	if err != nil {
		return checked{}, err
	}
	h := sha256.New()
	opts := readerOptions(req)
	opts.MaxLine = int(min(req.MaxPayload, 1<<30))
	opts.CheckID = func(id string) error { return queue.CheckID("item", id) }
	rd, err := jsonl.NewReader(io.TeeReader(src, h), opts)
	if err != nil {
		return checked{}, invalid("id_field", "%v", err)
	}
	batchLen := len(req.Batch)
	if req.Batch == "" {
		batchLen = len(defaultBatch(req.Source, make([]byte, sha256.Size)))
	}
	batch := strings.Repeat("b", batchLen)
	// An item whose payload is shorter than roomy, with an ID shorter
	// than fitsSlack/16 bytes, fits: its message headers (IDs at most
	// three times their length once encoded, the batch ID twice, a few
	// fixed ones) take less than fitsSlack.
	roomy := int(req.MaxPayload) - fitsSlack - 8*(batchLen+len(req.Kind))
	bad := &problems{max: req.MaxProblems}
	scopes := map[string]bool{}
	spec, isProvider := req.spec()
	report := func(le *jsonl.LineError) {
		if errors.Is(le, jsonl.ErrTooLong) {
			le.Detail += " (the limit is the NATS server's max_payload)"
		}
		bad.add(le)
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
			return checked{}, in.readErr(err)
		}
		if isProvider {
			pr, perr := spec.Parse(req.Format, req.IDField, it.Raw)
			if perr != nil {
				report(&jsonl.LineError{Line: it.Line, ID: it.ID, Err: provider.ErrNotRequest, Detail: perr.Error()})
				continue
			}
			if err := creds.ValidScope(pr.Model); err != nil {
				report(&jsonl.LineError{Line: it.Line, ID: it.ID, Err: provider.ErrNotRequest, Detail: fmt.Sprintf("model: %v", err)})
				continue
			}
			if underBudget && !pr.MaxOutputGiven {
				report(&jsonl.LineError{Line: it.Line, ID: it.ID, Err: ErrNoMaxTokens,
					Detail: "the batch is under a budget (its own or its tenant's): each request names max_tokens (or max_completion_tokens), which its start reserves"})
				continue
			}
			it.Raw, it.Scope = pr.Body, pr.Model
		}
		if len(it.Raw) < roomy && len(it.ID) < fitsSlack/16 {
			// Far from the limit whatever its headers: the exact size
			// (which builds the headers) is not needed.
		} else if size, limit, ok := fits(kftype.Item{ID: it.ID, Batch: batch, Kind: req.Kind, Payload: it.Raw, Cost: it.Cost, Scope: it.Scope}); !ok {
			report(&jsonl.LineError{Line: it.Line, ID: it.ID, Err: jsonl.ErrTooLong,
				Detail: fmt.Sprintf("%d bytes with its message headers, more than the server's max payload of %d", size, limit)})
		}
		if it.Scope != "" && !scopes[it.Scope] {
			if len(scopes) == MaxScopes {
				return checked{}, classify(ErrInput, "%s: line %d: item %s: more than %d distinct values of the scope field %q "+
					"(pool.scope.field: a scope is what items share limits by, a model, not a value of each item's): nothing was enqueued",
					in.src.Name, it.Line, jsonl.QuoteID(it.ID), MaxScopes, req.ScopeField)
			}
			scopes[it.Scope] = true
		}
		if rd.Line()&0xfff == 0 {
			if ctx.Err() != nil {
				return checked{}, classify(ErrInterrupted, "interrupted while reading %s: nothing was enqueued", in.src.Name)
			}
			if req.Progress != nil && time.Since(lastNote) >= req.ProgressEvery {
				lastNote = time.Now()
				req.Progress(Progress{Phase: Checking, Lines: rd.Line()})
			}
		}
	}
	if err := in.endFirst(); err != nil {
		return checked{}, err
	}
	if rd.IDs().Suspects() > 0 {
		again, err := in.open(false)
		if err != nil {
			return checked{}, err
		}
		if err := rd.Duplicates(again, bad.add); err != nil {
			return checked{}, in.changed(err)
		}
	}
	if bad.count > 0 {
		return checked{}, &InputError{Source: in.src.Name, Lines: rd.Line(), Count: bad.count, Problems: bad.first, DryRun: req.DryRun}
	}
	return checked{items: rd.Items(), lines: rd.Line(), maxLine: opts.MaxLine, sum: h.Sum(nil), ids: rd.IDs(),
		scopes: slices.Sorted(maps.Keys(scopes))}, nil
}

func readerOptions(req Request) jsonl.Options {
	opts := jsonl.Options{IDField: req.IDField, CostField: req.CostField, CostDefault: req.CostDefault, ScopeField: req.ScopeField}
	if req.Provider != "" {
		// A request's cost is the provider's estimate and its scope its
		// model (provider.Spec.Parse); it has no fields of ours.
		opts.CostField, opts.ScopeField = "", ""
	}
	if opts.ScopeField != "" {
		opts.CheckScope = creds.ValidScope
	}
	return opts
}

// eachItem reads the input again and calls fn with each item; the input
// must be the one check read.
func eachItem(in *input, req Request, c checked, fn func(jsonl.Item) error) error {
	src, err := in.open(false)
	if err != nil {
		return err
	}
	h := sha256.New()
	opts := readerOptions(req)
	opts.MaxLine, opts.AllowDuplicates = c.maxLine, true
	rd, err := jsonl.NewReader(io.TeeReader(src, h), opts)
	if err != nil {
		return invalid("id_field", "%v", err)
	}
	for {
		it, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return in.changed(err)
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	if rd.Items() != c.items || !equalSum(h, c.sum) {
		return in.changed(errors.New("its content differs from the first reading"))
	}
	return nil
}

func equalSum(h hash.Hash, sum []byte) bool { return string(h.Sum(nil)) == string(sum) }

// errStop ends the publishing pass when the context ends.
var errStop = errors.New("enqueue: stopped")

// publish is the second reading of a real run: every item is published
// and confirmed, or rep says exactly what was. An item held already
// (past JetStream's duplicate window: see needsHeld) is counted a
// duplicate and not sent.
func publish(ctx context.Context, q *queue.Queue, in *input, req Request, c checked, rep *Report, held heldSet) error {
	pub, err := q.NewPublisher(req.Window)
	if err != nil {
		return classify(ErrUnreachable, "publishing (nothing was enqueued): %w", err)
	}
	// Add and Flush get a context that does not end with ctx: a publish
	// already sent is waited for (bounded by the publish timeout) so that
	// the count of confirmed items is exact.
	pctx := context.WithoutCancel(ctx)
	sent, skipped := 0, 0
	lastNote, lastCheck := time.Now(), time.Now()
	passErr := eachItem(in, req, c, func(it jsonl.Item) error {
		if ctx.Err() != nil {
			return errStop
		}
		if held != nil && held.has(it.ID) {
			skipped++
			return nil
		}
		if sent&0xff == 0 && time.Since(lastCheck) >= cancelCheckEvery && q.Conn().IsConnected() {
			// A long input: what the server stored so far goes into the
			// batch's record now (the workers start on it while the rest is
			// published), and the record says whether the batch was
			// cancelled meanwhile. Not while the connection is down: each
			// would wait its timeout (15 s) every 256 items, while the
			// publishes in flight fail and end the publishing.
			lastCheck = time.Now()
			rec, n := kftype.BatchInfo{}, pub.Report().Published-rep.recorded
			if n > 0 {
				if r, err := record(ctx, q, req, *rep, n); err == nil {
					rep.recorded += n
					rec = r
				} else {
					rec = reread(ctx, q, rep.Batch)
				}
			} else {
				rec = reread(ctx, q, rep.Batch)
			}
			if rec.State == kftype.BatchCancelled {
				return errCancelled
			}
		}
		qi, err := item(req, rep.Batch, rep.Kind, it)
		if err != nil {
			return in.changed(err)
		}
		if err := pub.Add(pctx, qi); err != nil {
			return err
		}
		sent++
		if req.Progress != nil && sent&0x3ff == 0 && time.Since(lastNote) >= req.ProgressEvery {
			lastNote = time.Now()
			r := pub.Report()
			req.Progress(Progress{Phase: Publishing, Confirmed: r.Published + r.Duplicates + skipped, Items: c.items})
		}
		return nil
	})
	pr, flushErr := pub.Flush(pctx)
	rep.New, rep.Duplicates, rep.Unconfirmed, rep.NotSent = pr.Published, pr.Duplicates+skipped, pr.Unconfirmed, c.items-sent-skipped
	if passErr == nil && flushErr == nil && pr.Published+pr.Duplicates+skipped == c.items {
		return nil
	}
	if errors.Is(passErr, errCancelled) && flushErr == nil {
		return errCancelled // the report says what was published
	}
	// Part-way: the error says exactly what the server confirmed.
	perr := &PublishError{Report: *rep}
	switch {
	case errors.Is(passErr, errStop):
		perr.Interrupted, perr.Err = true, context.Cause(ctx)
	case errors.Is(passErr, ErrInput):
		perr.Err = passErr // the input changed or cannot be read again
	case flushErr != nil:
		perr.Err = flushErr
	case passErr != nil:
		perr.Err = passErr
	default:
		perr.Err = fmt.Errorf("the server confirmed %d of %d publishes", pr.Published+pr.Duplicates, c.items-skipped)
	}
	return perr
}

// item is the queue item of one line of the input: for a provider kind,
// its request (body, endpoint when not the provider's, model as scope,
// the estimate as cost), else the line.
func item(req Request, batch, kind string, it jsonl.Item) (kftype.Item, error) {
	spec, ok := req.spec()
	if !ok {
		return kftype.Item{ID: it.ID, Batch: batch, Kind: kind, Payload: append([]byte(nil), it.Raw...), Cost: it.Cost, Scope: it.Scope}, nil
	}
	pr, err := spec.Parse(req.Format, req.IDField, it.Raw)
	if err != nil {
		return kftype.Item{}, fmt.Errorf("line %d: %w", it.Line, err) // it passed the first reading
	}
	qi := kftype.Item{ID: it.ID, Batch: batch, Kind: kind, Payload: append([]byte(nil), pr.Body...), Cost: pr.Estimate, Scope: pr.Model,
		Staged: !req.Deadline.IsZero()}
	if pr.Endpoint != spec.Endpoint {
		qi.Endpoint = pr.Endpoint
	}
	return qi, nil
}

// DefaultBatch is the batch ID of an input without --batch:
// <name>-<8 hex digits of the content's SHA-256>, where name is the file's
// name without its extension (Source.Name for a Reader).
func defaultBatch(src Source, sum []byte) string {
	name := src.Name
	if src.Path != "" {
		base := filepath.Base(src.Path)
		name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	return BatchName(name) + "-" + hex.EncodeToString(sum)[:8]
}

// BatchName keeps a name readable as (the start of) a batch ID: letters,
// digits, '.', '_' and '-'; anything else becomes '-'; at most 64 bytes;
// "items" when nothing is left.
func BatchName(name string) string {
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
