package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// trace is what the collaborators were asked, in order (the keep-alives'
// in-progress acks and renewals, which run on the keeper's goroutines,
// are counted apart).
type trace struct {
	mu     sync.Mutex
	events []string
}

func (t *trace) add(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, fmt.Sprintf(format, args...))
}

func (t *trace) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.events...)
}

var errDown = errors.New("connection refused")

// failN fails its first n calls, then succeeds; n < 0 fails every call.
type failN struct {
	mu sync.Mutex
	n  int
}

func (f *failN) fail() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return false
	}
	if f.n > 0 {
		f.n--
	}
	return true
}

// fakeDelivery records the replies; in-progress acks fail with
// inProgressErr.
type fakeDelivery struct {
	tr            *trace
	it            kftype.Item
	decodeErr     error
	delivered     uint64
	ackFails      failN
	inProgressErr error

	mu         sync.Mutex
	inProgress int
}

func (d *fakeDelivery) Item() (kftype.Item, error) { return d.it, d.decodeErr }
func (d *fakeDelivery) Delivered() uint64          { return d.delivered }
func (d *fakeDelivery) Subject() string            { return "kf.b.batch1.sleep" }
func (d *fakeDelivery) Ack(context.Context) error {
	if d.ackFails.fail() {
		d.tr.add("ack: %v", errDown)
		return errDown
	}
	d.tr.add("ack")
	return nil
}
func (d *fakeDelivery) Nak(_ context.Context, delay time.Duration) error {
	d.tr.add("nak %s", delay)
	return nil
}
func (d *fakeDelivery) Term(_ context.Context, reason string) error {
	d.tr.add("term %s", reason)
	return nil
}
func (d *fakeDelivery) InProgress(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inProgress++
	return d.inProgressErr
}

// grant is one answer of the fake pool to an acquire: a lease on key, or
// err; block waits for the acquire's context instead; before runs first.
type grant struct {
	key    string
	err    error
	block  bool
	before func()
	// none: a try-acquire finds no key with room (an acquire that may
	// wait takes the next grant).
	none bool
}

// fakePool answers acquires from a script; past its end an acquire waits
// for its context, as a pool with no room does.
type fakePool struct {
	tr       *trace
	clock    Clock
	grants   []grant
	renewErr error
	// exhausted is called by an acquire past the end of the script: the
	// case went further than it planned (a broken rule); it ends the case
	// instead of letting it hang.
	exhausted func()

	mu    sync.Mutex
	reqs  []creds.Request
	renew int
}

func (p *fakePool) next(ctx context.Context, r creds.Request, what string) (*creds.Lease, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, r)
	var g grant
	over := len(p.grants) == 0
	if !over {
		g, p.grants = p.grants[0], p.grants[1:]
	}
	p.mu.Unlock()
	if r.Keys != nil {
		what += " " + strings.Join(r.Keys.IDs(), ",")
	}
	if over {
		g.block = true
		if p.exhausted != nil {
			p.exhausted()
		}
	}
	if g.before != nil {
		g.before()
	}
	switch {
	case g.block:
		<-ctx.Done()
		p.tr.add("%s: %v", what, context.Cause(ctx))
		return nil, ctx.Err()
	case g.err != nil:
		p.tr.add("%s: %v", what, g.err)
		return nil, g.err
	}
	p.tr.add("%s: %s", what, g.key)
	now := p.clock.Now()
	return &creds.Lease{CredentialID: g.key, Owner: r.Owner, Cost: r.Cost, Scope: r.Scope, Acquired: now, RequestedAt: now}, nil
}

func (p *fakePool) AcquireWith(ctx context.Context, r creds.Request) (*creds.Lease, error) {
	return p.next(ctx, r, "acquire")
}

func (p *fakePool) TryAcquireWith(ctx context.Context, r creds.Request) (*creds.Lease, error) {
	p.mu.Lock()
	empty := len(p.grants) == 0
	none := !empty && p.grants[0].none
	if none {
		p.grants = p.grants[1:]
	}
	p.mu.Unlock()
	if empty || none {
		what := "try-acquire"
		if r.Keys != nil {
			what += " " + strings.Join(r.Keys.IDs(), ",")
		}
		p.tr.add("%s: none", what)
		return nil, creds.ErrNoneAvailable
	}
	return p.next(ctx, r, "try-acquire")
}

func (p *fakePool) Renew(context.Context, *creds.Lease) (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.renew++
	return time.Time{}, p.renewErr
}

func (p *fakePool) SettleAsync(l *creds.Lease, o creds.Outcome, done func(error)) error {
	var s []string
	switch {
	case o.Refused != nil:
		s = append(s, "refused("+o.Refused.Reason+")")
	case o.RateLimited && o.Rest > 0:
		s = append(s, "rate-limited rest "+o.Rest.String())
	case o.RateLimited:
		s = append(s, "rate-limited bare, rest at most "+o.MaxRest.String())
	case o.Rest > 0:
		s = append(s, "rest "+o.Rest.String())
	default:
		s = append(s, "ok")
	}
	if o.Cost > 0 {
		s = append(s, fmt.Sprintf("cost %d", o.Cost))
	}
	p.tr.add("settle %s %s", l.CredentialID, strings.Join(s, " "))
	done(nil)
	return nil
}

func (p *fakePool) ReleaseUnused(_ context.Context, l *creds.Lease) error {
	p.tr.add("release-unused %s", l.CredentialID)
	return nil
}

func (p *fakePool) Rest(_ context.Context, id string, d time.Duration, _, _ string) (time.Time, error) {
	p.tr.add("rest %s %s", id, d)
	return time.Time{}, nil
}

// fakeRecorder records what it stores.
type fakeRecorder struct {
	tr          *trace
	commitErr   error
	resultFails failN
	deadFails   failN
	cancelFails failN

	mu      sync.Mutex
	results []kftype.Result
	dead    []kftype.DeadLetter
}

func (r *fakeRecorder) Commit(_ context.Context, res kftype.Result, _ Delivery) error {
	if r.commitErr != nil {
		r.tr.add("commit: %v", r.commitErr)
		if errors.Is(r.commitErr, queue.ErrAckNotConfirmed) {
			r.keep(res)
		}
		return r.commitErr
	}
	r.tr.add("commit %s, ack", res.Outcome)
	r.keep(res)
	return nil
}

func (r *fakeRecorder) keep(res kftype.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results = append(r.results, res)
}

func (r *fakeRecorder) PutResult(_ context.Context, res kftype.Result) error {
	if r.resultFails.fail() {
		r.tr.add("result: %v", errDown)
		return errDown
	}
	r.tr.add("result %s", res.Outcome)
	r.keep(res)
	return nil
}

func (r *fakeRecorder) PutDeadLetter(_ context.Context, dl kftype.DeadLetter) error {
	if r.deadFails.fail() {
		r.tr.add("dead-letter: %v", errDown)
		return errDown
	}
	r.tr.add("dead-letter %s", dl.Reason)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead = append(r.dead, dl)
	return nil
}

func (r *fakeRecorder) CancelItem(ctx context.Context, d Delivery, it kftype.Item, by string) (bool, error) {
	if r.cancelFails.fail() {
		r.tr.add("cancel-item: %v", errDown)
		return false, errDown
	}
	r.tr.add("cancel-item")
	return true, d.Term(ctx, "batch cancelled")
}

// fakeRunLog is runs.lua in memory (worker's runs_test checks the script
// against the same rules on a real Redis).
type fakeRunLog struct {
	tr   *trace
	fail map[string]error // by op

	mu sync.Mutex
	m  map[string]*runsHash
}

type runsHash struct {
	runs, fails, limited, refusals int
	open                           bool
	acc                            uint64
	refused, streak                string
}

func (f *fakeRunLog) Do(_ context.Context, batch, id, op string, d uint64, held int, text string) (RunCount, error) {
	if err := f.fail[op]; err != nil {
		f.tr.add("runs %s: %v", op, err)
		return RunCount{}, err
	}
	if op != OpPeek {
		f.tr.add("runs %s", op)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := batch + "/" + id
	if op == OpDone {
		delete(f.m, k)
		return RunCount{}, nil
	}
	h := f.m[k]
	if h == nil {
		h = &runsHash{}
	}
	if op == OpPeek {
		return RunCount{Runs: h.runs, Failures: h.fails, Limited: h.limited, Refusals: h.refusals, Refused: h.refused, Streak: h.streak}, nil
	}
	lost := 0
	switch op {
	case OpStart:
		if h.open {
			lost++
		}
		if gap := int(d) - 1 - int(h.acc); gap > 0 {
			lost += gap
			h.runs += gap
		}
		h.fails += lost
		h.runs++
		h.open = true
	case OpFail:
		h.runs, h.limited, h.open = max(h.runs, held), 0, false
		h.fails++
		if text == "" {
			h.streak = ""
		} else {
			ids := append(strings.Split(h.streak, "\n"), text)
			if h.streak == "" {
				ids = ids[1:]
			}
			h.streak = strings.Join(ids[max(0, len(ids)-4):], "\n")
		}
	case OpSettle:
		h.runs, h.open = max(h.runs, held), false
	case OpLimited:
		h.runs, h.open = max(h.runs, held), false
		h.limited++
		h.streak = ""
	case OpRefuse:
		h.runs, h.limited, h.open = max(h.runs, held), 0, false
		h.refusals++
		h.refused = strings.TrimPrefix(h.refused+"\n"+text, "\n")
		h.streak = ""
	case OpNoRun:
		h.open = false
	default:
		return RunCount{}, fmt.Errorf("unknown op %s", op)
	}
	h.acc = max(h.acc, d)
	f.m[k] = h
	return RunCount{Runs: h.runs, Failures: h.fails, Lost: lost, Limited: h.limited, Refusals: h.refusals, Refused: h.refused, Streak: h.streak}, nil
}

// fakeBatches is the batch view.
type fakeBatches struct {
	mu    sync.Mutex
	state map[string]kftype.BatchState
	pokes int
}

func (b *fakeBatches) State(batch string) (kftype.BatchState, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.state[batch]; ok {
		return s, 2
	}
	return kftype.BatchRunning, creds.PriorityDefault
}

func (b *fakeBatches) set(batch string, state kftype.BatchState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state[batch] = state
}

func (b *fakeBatches) Poke() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pokes++
}

// fakeHost records Redis's health and re-registrations.
type fakeHost struct {
	tr *trace
	mu sync.Mutex
	up []bool
}

func (h *fakeHost) RedisUp(ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.up); n == 0 || h.up[n-1] != ok {
		h.up = append(h.up, ok)
	}
}

func (h *fakeHost) Register(context.Context) error {
	h.tr.add("register")
	return nil
}

// runFunc is one run of the fake handler.
type runFunc func(ctx context.Context, it jobs.Item, cred jobs.Credential) (jobs.Output, error)

// fakeHandler runs its script, one function a run, and records the runs.
type fakeHandler struct {
	tr   *trace
	runs []runFunc
	mu   sync.Mutex
	n    int
	seen []jobs.Item // the items it was given, in order
}

func (h *fakeHandler) Kind() string { return "sleep" }

func (h *fakeHandler) Run(ctx context.Context, it jobs.Item, cred jobs.Credential) (jobs.Output, error) {
	h.mu.Lock()
	n := h.n
	h.n++
	h.seen = append(h.seen, it)
	h.mu.Unlock()
	h.tr.add("run %s attempt %d", cred.ID, it.Attempt)
	if n >= len(h.runs) {
		return jobs.Output{}, fmt.Errorf("unexpected run %d", n+1)
	}
	return h.runs[n](ctx, it, cred)
}

// compact is the trace with runs of one event written once, "(xN)".
func (t *trace) compact() []string {
	var out []string
	ev := t.get()
	for i := 0; i < len(ev); {
		j := i
		for j < len(ev) && ev[j] == ev[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s (x%d)", ev[i], j-i))
		} else {
			out = append(out, ev[i])
		}
		i = j
	}
	return out
}

// checkOutcome compares an outcome with the one wanted: the causes with
// errors.Is, the rest but Took as they are.
func checkOutcome(t *testing.T, got, want Outcome) {
	t.Helper()
	if !errors.Is(got.Cause, want.Cause) || (got.Cause == nil) != (want.Cause == nil) {
		t.Errorf("cause: got %v, want %v", got.Cause, want.Cause)
	}
	got.Cause, got.Took, want.Cause = nil, 0, nil
	if got != want {
		t.Errorf("outcome:\n got  %+v\n want %+v", got, want)
	}
}
