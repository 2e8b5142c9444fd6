package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// harness is one Executor with a fake for every collaborator and a stub
// clock, and what the test does while an item runs.
type harness struct {
	t       *testing.T
	tr      *trace
	clk     *stubClock
	d       *fakeDelivery
	pool    *fakePool
	rec     *fakeRecorder
	runs    *fakeRunLog
	batches *fakeBatches
	host    *fakeHost
	h       *fakeHandler
	kind    Kind
	policy  Policy
	waits   *ClassWaits
	// ledger and budgets: the spend collaborators (nil: none).
	ledger  Ledger
	budgets Budgets
	// kinds, when set, are the kinds the executor runs instead of
	// {"sleep": kind}; moves counts the moves to fallback kinds.
	kinds map[string]Kind
	moves Mover
	e     *Executor

	cancelPull, cancelRun context.CancelCauseFunc
}

const testSecret = "sk-test-7f3a9c2e1b"

func newHarness(t *testing.T) *harness {
	tr := &trace{}
	clk := newStubClock()
	h := &harness{
		t: t, tr: tr, clk: clk,
		d:       &fakeDelivery{tr: tr, delivered: 1, it: kftype.Item{ID: "i1", Batch: "b1", Kind: "sleep", Payload: []byte(`{"id":"i1","ms":1}`)}},
		pool:    &fakePool{tr: tr, clock: clk},
		rec:     &fakeRecorder{tr: tr},
		runs:    &fakeRunLog{tr: tr, fail: map[string]error{}, m: map[string]*runsHash{}},
		batches: &fakeBatches{state: map[string]kftype.BatchState{}},
		host:    &fakeHost{tr: tr},
		h:       &fakeHandler{tr: tr},
		waits:   NewClassWaits(4),
		policy: Policy{
			MaxAttempts: 3, MaxRateLimited: 20,
			RetryDelay: func(n int) time.Duration {
				return []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}[min(n, 3)-1]
			},
			Cooldown: time.Minute, MaxRest: time.Hour, AckWait: 30 * time.Second, MaxDeliver: -1, LeaseTTL: 30 * time.Second,
			CostField: "cost", CostDefault: 1,
		},
	}
	h.kind = Kind{Handler: h.h, KeyCount: 3}
	clk.onSleep = h.advance
	return h
}

// start builds the Executor (after the case's changes to the harness).
func (h *harness) start() {
	kinds := h.kinds
	if kinds == nil {
		kinds = map[string]Kind{"sleep": h.kind}
	}
	e, err := New(Config{
		ID: "w1", Kinds: kinds, KindNames: slices.Sorted(maps.Keys(kinds)), Moves: h.moves,
		Secrets: map[string]secret.Secret{"a": secret.New(testSecret)},
		Scrub:   secret.NewScrubber(secret.New(testSecret)), Policy: h.policy,
		Pool: h.pool, Recorder: h.rec, Runs: h.runs, Batches: h.batches, Waits: h.waits, Host: h.host, Clock: h.clk,
		Ledger: h.ledger, Budgets: h.budgets,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.e = e
	h.t.Cleanup(e.Close)
}

// advance moves the stub clock d ahead, stopping at every keep-alive due
// on the way until the keeper has done what was due: the in-progress acks
// and renewals happen as they would in d of real time.
func (h *harness) advance(d time.Duration) {
	target := h.clk.Now().Add(d)
	for {
		step := target
		k := h.e.keeper
		k.mu.Lock()
		if len(k.tasks) > 0 && k.tasks[0].due.Before(step) {
			step = k.tasks[0].due
		}
		k.mu.Unlock()
		h.clk.set(step)
		if !h.quiesce() || !step.Before(target) {
			return
		}
	}
}

// quiesce waits until the keeper has no attempt due or in flight, and
// reports whether it came to that. A task due but not running means the
// keeper armed its timer after the clock moved past the due time (its
// timer then counts from the new time): it is woken to look again, as a
// real clock's timer would have fired a moment late.
func (h *harness) quiesce() bool {
	k := h.e.keeper
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Microsecond) {
		now := h.clk.Now()
		busy, idleDue := false, false
		k.mu.Lock()
		for _, t := range k.tasks {
			due := !t.due.After(now)
			busy = busy || t.running || due
			idleDue = idleDue || (due && !t.running)
		}
		k.mu.Unlock()
		if !busy {
			return true
		}
		if idleDue {
			k.poke()
		}
	}
	h.t.Error("the keeper did not settle within 5s")
	return false
}

// Handler runs of the cases.
func ok(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) {
	return jobs.Output{Body: []byte(`{"ok":1}`)}, nil
}

func fails(err error) runFunc {
	return func(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) { return jobs.Output{}, err }
}

// waitCancelled is a run that does first, then runs until its context is
// cancelled.
func waitCancelled(first func()) runFunc {
	return func(ctx context.Context, _ jobs.Item, _ jobs.Credential) (jobs.Output, error) {
		first()
		select {
		case <-ctx.Done():
			return jobs.Output{}, fmt.Errorf("sleep: %w", ctx.Err())
		case <-time.After(5 * time.Second):
			return jobs.Output{}, errors.New("the run's context was never cancelled")
		}
	}
}

var (
	rateLimited = fails(jobs.RateLimited(5*time.Second, "Retry-After header", "429 Too Many Requests"))
	bare429     = fails(&jobs.RateLimitedError{Detail: "429 Too Many Requests"})
	refused     = fails(jobs.Rejected("401 Unauthorized"))
	permanent   = fails(jobs.Permanent(errors.New("400 Bad Request")))
	transient   = fails(errors.New("exit status 1"))
	notStored   = fmt.Errorf("%w: no confirmation within 5s", queue.ErrResultNotStored)
	notAcked    = fmt.Errorf("%w: flush: timeout", queue.ErrAckNotConfirmed)
	// errScriptOver ends a case that asked the pool for more keys than
	// its script holds.
	errScriptOver = errors.New("the case's pool script is over")
)

// Every way a delivery of an item can end, in process: the outcome, and
// what each collaborator was asked, in order.
func TestExecute(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(h *harness)
		runs  []runFunc
		want  Outcome
		trace []string
		check func(t *testing.T, h *harness)
	}{
		{
			name:  "succeeded: one group commit stores the result and acks",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}} },
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "commit succeeded, ack"},
			check: func(t *testing.T, h *harness) {
				if len(h.rec.results) != 1 || h.rec.results[0].Output != `{"ok":1}` || h.rec.results[0].CredentialID != "a" {
					t.Errorf("results: %+v", h.rec.results)
				}
			},
		},
		{
			name: "succeeded: the result half of a failed group commit is stored alone, then acked",
			setup: func(h *harness) {
				h.pool.grants = []grant{{key: "a"}}
				h.rec.commitErr, h.rec.resultFails.n = notStored, 1
			},
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "commit: " + notStored.Error(), "result: connection refused", "result succeeded", "ack"},
		},
		{
			name: "succeeded: the ack half of a failed group commit is retried alone",
			setup: func(h *harness) {
				h.pool.grants = []grant{{key: "a"}}
				h.rec.commitErr, h.d.ackFails.n = notAcked, 2
			},
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "commit: " + notAcked.Error(), "ack: connection refused (x2)", "ack"},
		},
		{
			name: "a result never stored within the settle deadline: handed back to run again",
			setup: func(h *harness) {
				h.pool.grants = []grant{{key: "a"}}
				h.rec.commitErr, h.rec.resultFails.n = notStored, -1
			},
			runs:  []runFunc{ok},
			want:  Outcome{Fate: HandedBack, Cause: ErrResultNotStored, Reply: ReplyNak, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "commit: " + notStored.Error(), "result: connection refused (x21)", "runs settle", "nak 0s"},
		},
		{
			name: "an ack never confirmed: left to its ack wait",
			setup: func(h *harness) {
				h.pool.grants = []grant{{key: "a"}}
				h.rec.commitErr, h.d.ackFails.n = notAcked, -1
			},
			runs:  []runFunc{ok},
			want:  Outcome{Fate: HandedBack, Cause: ErrAckNotConfirmed, Reply: ReplyNone, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "commit: " + notAcked.Error(), "ack: connection refused (x21)", "runs settle"},
		},
		{
			name:  "transient: retried after the backoff",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}} },
			runs:  []runFunc{transient},
			want:  Outcome{Fate: Retried, Reply: ReplyNak, Delay: time.Second, Attempt: 1, Failures: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "runs fail", "nak 1s"},
		},
		{
			name: "transient and out of attempts: dead letter",
			setup: func(h *harness) {
				h.d.delivered = 3
				h.runs.m["b1/i1"] = &runsHash{runs: 2, fails: 2, acc: 2}
				h.pool.grants = []grant{{key: "a"}}
			},
			runs: []runFunc{transient},
			want: Outcome{Fate: DeadLettered, Reason: kftype.ReasonOutOfAttempts, Reply: ReplyTerm, Attempt: 3, Failures: 3},
			trace: []string{"acquire: a", "runs start", "run a attempt 3", "settle a ok", "runs fail",
				"dead-letter out of attempts", "result failed", "term out of attempts", "runs done"},
			check: func(t *testing.T, h *harness) {
				if r := h.rec.results[0]; r.Error != "out of attempts: exit status 1" || r.Attempts != 3 {
					t.Errorf("result: %+v", r)
				}
			},
		},
		{
			name: "transient on the last delivery max_deliver allows: dead letter",
			setup: func(h *harness) {
				h.policy.MaxDeliver = 2
				h.d.delivered = 2
				h.runs.m["b1/i1"] = &runsHash{runs: 1, fails: 1, acc: 1}
				h.pool.grants = []grant{{key: "a"}}
			},
			runs: []runFunc{transient},
			want: Outcome{Fate: DeadLettered, Reason: kftype.ReasonMaxDeliveries, Reply: ReplyTerm, Attempt: 2, Failures: 2},
			trace: []string{"acquire: a", "runs start", "run a attempt 2", "settle a ok", "runs fail",
				"dead-letter out of deliveries", "result failed", "term out of deliveries", "runs done"},
		},
		{
			name:  "permanent: dead letter at once",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}} },
			runs:  []runFunc{permanent},
			want:  Outcome{Fate: DeadLettered, Reason: kftype.ReasonPermanent, Reply: ReplyTerm, Attempt: 1, Failures: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "runs fail", "dead-letter permanent failure", "result failed", "term permanent failure", "runs done"},
			check: func(t *testing.T, h *harness) {
				if r, dl := h.rec.results[0], h.rec.dead[0]; r.Error != "permanent failure: 400 Bad Request" || dl.Attempts != 1 || dl.Failures != 1 {
					t.Errorf("result %+v, dead letter %+v", r, dl)
				}
			},
		},
		{
			name:  "rate limited with Retry-After: the key rests that long, the item runs again on another key",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}, {key: "b"}} },
			runs:  []runFunc{rateLimited, ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 2, Again: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a rate-limited rest 5s", "runs limited",
				"acquire: b", "runs start", "run b attempt 2", "settle b ok", "commit succeeded, ack", "runs done"},
		},
		{
			name:  "a bare 429: a short rest bounded by pool.cooldown, then another key",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}, {key: "b"}} },
			runs:  []runFunc{bare429, ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 2, Again: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a rate-limited bare, rest at most 1m0s", "runs limited",
				"acquire: b", "runs start", "run b attempt 2", "settle b ok", "commit succeeded, ack", "runs done"},
		},
		{
			name: "rate limited worker.max_rate_limited times in a row: dead letter",
			setup: func(h *harness) {
				h.policy.MaxRateLimited = 2
				h.pool.grants = []grant{{key: "a"}, {key: "b"}}
			},
			runs: []runFunc{rateLimited, rateLimited},
			want: Outcome{Fate: DeadLettered, Reason: kftype.ReasonRateLimited, Reply: ReplyTerm, Attempt: 2, Again: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a rate-limited rest 5s", "runs limited",
				"acquire: b", "runs start", "run b attempt 2", "settle b rate-limited rest 5s", "runs limited",
				"dead-letter rate limited too often", "result failed", "term rate limited too often", "runs done"},
			check: func(t *testing.T, h *harness) {
				if e := h.rec.dead[0].Error; !strings.HasPrefix(e, "rate limited 2 times in a row") || !strings.Contains(e, "429 Too Many Requests") {
					t.Errorf("dead letter error %q", e)
				}
			},
		},
		{
			name:  "refused by a key: evidence against it, the item runs again on another key",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}, {key: "b"}} },
			runs:  []runFunc{refused, ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 2, Again: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a refused(401 Unauthorized)", "runs refuse",
				"acquire: b", "runs start", "run b attempt 2", "settle b ok", "commit succeeded, ack", "runs done"},
		},
		{
			name: "refused by every key its kind may use (two): dead letter naming the refusals",
			setup: func(h *harness) {
				h.kind.KeyCount = 2
				h.pool.grants = []grant{{key: "a"}, {key: "b"}}
			},
			runs: []runFunc{refused, refused},
			want: Outcome{Fate: DeadLettered, Reason: kftype.ReasonRefused, Reply: ReplyTerm, Attempt: 2, Again: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a refused(401 Unauthorized)", "runs refuse",
				"acquire: b", "runs start", "run b attempt 2", "settle b refused(401 Unauthorized)", "runs refuse",
				"dead-letter refused by the keys", "result failed", "term refused by the keys", "runs done"},
			check: func(t *testing.T, h *harness) {
				if e := h.rec.dead[0].Error; e != "refused by 2 keys: a: 401 Unauthorized; b: 401 Unauthorized" {
					t.Errorf("dead letter error %q", e)
				}
			},
		},
		{
			name: "granted a key that refused it before: released unused, back after a second",
			setup: func(h *harness) {
				h.d.delivered = 2
				h.runs.m["b1/i1"] = &runsHash{runs: 1, refusals: 1, refused: "a\t403 Forbidden", acc: 1}
				h.pool.grants = []grant{{key: "a"}}
			},
			want:  Outcome{Fate: HandedBack, Cause: ErrRefusedBefore, Reply: ReplyNak, Delay: time.Second, Attempt: 1},
			trace: []string{"acquire: a", "release-unused a", "runs norun", "nak 1s"},
		},
		{
			name:  "paused before it starts: back to its lane",
			setup: func(h *harness) { h.batches.set("b1", kftype.BatchPaused) },
			want:  Outcome{Fate: HandedBack, Cause: ErrPaused, Reply: ReplyNak},
			trace: []string{"runs norun", "nak 0s"},
		},
		{
			name:  "cancelled before it starts: recorded cancelled, never run",
			setup: func(h *harness) { h.batches.set("b1", kftype.BatchCancelled) },
			want:  Outcome{Fate: Cancelled, Reply: ReplyTerm},
			trace: []string{"cancel-item", "term batch cancelled"},
		},
		{
			name: "a cancelled item that cannot be recorded: left to its ack wait",
			setup: func(h *harness) {
				h.batches.set("b1", kftype.BatchCancelled)
				h.rec.cancelFails.n = -1
			},
			want:  Outcome{Fate: HandedBack, Cause: ErrCancelNotRecorded},
			trace: []string{"cancel-item: connection refused (x21)"},
		},
		{
			name: "paused while it waited for a key: the lease goes back unused",
			setup: func(h *harness) {
				h.pool.grants = []grant{{key: "a", before: func() { h.batches.set("b1", kftype.BatchPaused) }}}
			},
			want:  Outcome{Fate: HandedBack, Cause: ErrPaused, Reply: ReplyNak},
			trace: []string{"acquire: a", "runs norun", "nak 0s", "release-unused a"},
		},
		{
			name: "cancelled while it waited for a key: recorded cancelled, the lease goes back unused",
			setup: func(h *harness) {
				h.pool.grants = []grant{{key: "a", before: func() { h.batches.set("b1", kftype.BatchCancelled) }}}
			},
			want:  Outcome{Fate: Cancelled, Reply: ReplyTerm},
			trace: []string{"acquire: a", "cancel-item", "term batch cancelled", "release-unused a"},
		},
		{
			name: "its class has its share of slots waiting: tries once, handed back",
			setup: func(h *harness) {
				h.waits = NewClassWaits(1)
				h.waits.enter(WaitClass(nil, ""))
			},
			want:  Outcome{Fate: HandedBack, Cause: ErrClassWaiting, Reply: ReplyNak},
			trace: []string{"try-acquire: none", "runs norun", "nak 0s"},
		},
		{
			name: "lease lost mid-run: the job is cancelled, handed back at once",
			setup: func(h *harness) {
				h.pool.grants, h.pool.renewErr = []grant{{key: "a"}}, fmt.Errorf("%w: lease 7", creds.ErrLeaseLost)
			},
			runs:  []runFunc{nil}, // set below: it needs the harness
			want:  Outcome{Fate: Interrupted, Cause: ErrLeaseLost, Reply: ReplyNak, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "runs settle", "nak 0s"},
		},
		{
			name: "message lost mid-run: the job is cancelled; no nak (another worker may hold it)",
			setup: func(h *harness) {
				h.policy.AckWait = 6 * time.Second
				h.pool.grants, h.d.inProgressErr = []grant{{key: "a"}}, errDown
			},
			runs:  []runFunc{nil},
			want:  Outcome{Fate: Interrupted, Cause: ErrMessageLost, Reply: ReplyNone, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "runs settle"},
		},
		{
			name: "shutdown while it waits for a key: handed back for immediate redelivery",
			setup: func(h *harness) {
				h.pool.grants = []grant{{block: true, before: func() { h.cancelPull(ErrDraining) }}}
			},
			want:  Outcome{Fate: HandedBack, Cause: ErrDraining, Reply: ReplyNak},
			trace: []string{"acquire: worker is shutting down", "runs norun", "nak 0s"},
		},
		{
			name:  "shutdown grace over mid-run: the job is cancelled, handed back at once",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}} },
			runs:  []runFunc{nil},
			want:  Outcome{Fate: Interrupted, Cause: ErrGraceOver, Reply: ReplyNak, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "runs settle", "nak 0s"},
		},
		{
			name:  "rate limited while shutting down: handed back instead of running again",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}, {key: "b"}} },
			runs:  []runFunc{nil},
			want:  Outcome{Fate: HandedBack, Cause: ErrDraining, Reply: ReplyNak, Attempt: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a rate-limited rest 5s", "runs limited", "nak 0s"},
		},
		{
			name: "Redis failing while it waits for a key: nothing runs until Redis answers (fail closed)",
			setup: func(h *harness) {
				h.pool.grants = []grant{{err: errDown}, {err: errDown}, {err: errDown}, {key: "a"}}
			},
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			trace: []string{"acquire: connection refused (x3)", "acquire: a", "run a attempt 1", "settle a ok", "commit succeeded, ack"},
			check: func(t *testing.T, h *harness) {
				if !slices.Equal(h.host.up, []bool{false, true}) {
					t.Errorf("Redis health reported %v, want down then up", h.host.up)
				}
			},
		},
		{
			name: "Redis failing right after the grant: nothing runs, the lease goes back unused",
			setup: func(h *harness) {
				h.d.delivered = 2
				h.runs.fail[OpStart] = errDown
				h.pool.grants = []grant{{key: "a"}}
			},
			want:  Outcome{Fate: HandedBack, Cause: ErrRunLog, Reply: ReplyNak, Delay: time.Second},
			trace: []string{"acquire: a", "runs start: connection refused", "release-unused a", "nak 1s"},
			check: func(t *testing.T, h *harness) {
				if !slices.Equal(h.host.up, []bool{true, false}) {
					t.Errorf("Redis health reported %v, want up then down", h.host.up)
				}
			},
		},
		{
			name:  "the pool lost with Redis's state: registered again, then acquired",
			setup: func(h *harness) { h.pool.grants = []grant{{err: creds.ErrPoolEmpty}, {key: "a"}} },
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			trace: []string{"acquire: " + creds.ErrPoolEmpty.Error(), "register", "acquire: a", "run a attempt 1", "settle a ok", "commit succeeded, ack"},
		},
		{
			name: "a cost that never fits: dead letter naming the limit",
			setup: func(h *harness) {
				h.pool.grants = []grant{{err: fmt.Errorf("%w: cost 500 exceeds cost=100/m on every key", creds.ErrNeverFits)}}
			},
			want: Outcome{Fate: DeadLettered, Reason: kftype.ReasonPermanent, Reply: ReplyTerm},
			trace: []string{"acquire: " + creds.ErrNeverFits.Error() + ": cost 500 exceeds cost=100/m on every key",
				"dead-letter permanent failure", "result failed", "term permanent failure"},
			check: func(t *testing.T, h *harness) {
				if e := h.rec.dead[0].Error; !strings.Contains(e, "cost=100/m") {
					t.Errorf("dead letter error %q", e)
				}
			},
		},
		{
			name: "earlier runs that never reported reach max_attempts: dead letter without running",
			setup: func(h *harness) {
				h.d.delivered = 4 // three deliveries ran and died, recording nothing
				h.pool.grants = []grant{{key: "a"}}
			},
			want: Outcome{Fate: DeadLettered, Reason: kftype.ReasonOutOfAttempts, Reply: ReplyTerm, Attempt: 4, Failures: 3},
			trace: []string{"acquire: a", "runs start", "release-unused a",
				"dead-letter out of attempts", "result failed", "term out of attempts", "runs done"},
			check: func(t *testing.T, h *harness) {
				if e := h.rec.dead[0].Error; e != "3 runs failed or never reported (their workers died)" {
					t.Errorf("dead letter error %q", e)
				}
			},
		},
		{
			name: "an earlier run that never reported, below max_attempts: counted, the item runs",
			setup: func(h *harness) {
				h.d.delivered = 2
				h.pool.grants = []grant{{key: "a"}}
			},
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 2, Failures: 1},
			trace: []string{"acquire: a", "runs start", "run a attempt 2", "settle a ok", "commit succeeded, ack", "runs done"},
		},
		{
			name: "an undecodable message: dead letter under the message's name",
			setup: func(h *harness) {
				h.d.it, h.d.decodeErr = kftype.Item{Batch: "b1", Kind: "sleep"}, errors.New("bad id encoding")
			},
			want:  Outcome{Fate: DeadLettered, Reason: kftype.ReasonUndecodable, Reply: ReplyTerm},
			trace: []string{"dead-letter undecodable message", "result failed", "term undecodable message"},
			check: func(t *testing.T, h *harness) {
				if dl := h.rec.dead[0]; dl.Item != "message-kf.b.batch1.sleep" || dl.Error != "bad id encoding" {
					t.Errorf("dead letter %+v", dl)
				}
			},
		},
		{
			name:  "a kind this worker does not run: dead letter naming the kinds it runs",
			setup: func(h *harness) { h.d.it.Kind = "resize" },
			want:  Outcome{Fate: DeadLettered, Kind: "resize", Reason: kftype.ReasonUnknownKind, Reply: ReplyTerm},
			trace: []string{"dead-letter kind not configured", "result failed", "term kind not configured"},
			check: func(t *testing.T, h *harness) {
				if e := h.rec.dead[0].Error; e != "worker w1 has no jobs.resize configured (it runs [sleep])" {
					t.Errorf("dead letter error %q", e)
				}
			},
		},
		{
			name:  "a cost field that is not a number: dead letter",
			setup: func(h *harness) { h.d.it.Payload = []byte(`{"id":"i1","cost":"many"}`) },
			want:  Outcome{Fate: DeadLettered, Reason: kftype.ReasonPermanent, Reply: ReplyTerm},
			trace: []string{"dead-letter permanent failure", "result failed", "term permanent failure"},
		},
		{
			name: "a dead letter that cannot be stored: handed back, never termed",
			setup: func(h *harness) {
				h.pool.grants = []grant{{key: "a"}}
				h.rec.deadFails.n = -1
			},
			runs:  []runFunc{permanent},
			want:  Outcome{Fate: HandedBack, Cause: ErrResultNotStored, Reply: ReplyNak, Delay: time.Second, Attempt: 1, Failures: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "runs fail", "dead-letter: connection refused (x21)", "nak 1s"},
		},
		{
			name:  "records that must be cut: a long error is bounded, secrets scrubbed",
			setup: func(h *harness) { h.pool.grants = []grant{{key: "a"}} },
			runs:  []runFunc{fails(jobs.Permanent(errors.New("key " + testSecret + " said: " + strings.Repeat("x", 10_000))))},
			want:  Outcome{Fate: DeadLettered, Reason: kftype.ReasonPermanent, Reply: ReplyTerm, Attempt: 1, Failures: 1},
			trace: []string{"acquire: a", "run a attempt 1", "settle a ok", "runs fail", "dead-letter permanent failure", "result failed", "term permanent failure", "runs done"},
			check: func(t *testing.T, h *harness) {
				r := h.rec.results[0]
				if len(r.Error) > maxErrorText+len("…") || !strings.HasSuffix(r.Error, "…") || strings.Contains(r.Error, testSecret) {
					t.Errorf("result error of %d bytes (max %d), ends %q, secret kept: %v",
						len(r.Error), maxErrorText, r.Error[len(r.Error)-5:], strings.Contains(r.Error, testSecret))
				}
				if strings.Contains(h.rec.dead[0].Error, testSecret) {
					t.Error("the dead letter keeps the secret")
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			pullCtx, cancelPull := context.WithCancelCause(context.Background())
			runCtx, cancelRun := context.WithCancelCause(context.Background())
			defer cancelPull(nil)
			defer cancelRun(nil)
			h.cancelPull, h.cancelRun = cancelPull, cancelRun
			h.pool.exhausted = func() { cancelRun(errScriptOver) }
			if c.setup != nil {
				c.setup(h)
			}
			h.h.runs = c.runs
			switch c.want.Cause {
			case ErrLeaseLost:
				h.h.runs = []runFunc{waitCancelled(func() { h.advance(h.policy.LeaseTTL / 3) })}
			case ErrMessageLost:
				h.h.runs = []runFunc{waitCancelled(func() { h.advance(h.policy.AckWait) })}
			case ErrGraceOver:
				h.h.runs = []runFunc{waitCancelled(func() { cancelRun(ErrGraceOver) })}
			}
			if c.runs != nil && c.runs[0] == nil && c.want.Cause == ErrDraining {
				h.h.runs = []runFunc{func(ctx context.Context, it jobs.Item, cred jobs.Credential) (jobs.Output, error) {
					cancelPull(ErrDraining)
					return rateLimited(ctx, it, cred)
				}}
			}
			h.start()
			got := h.e.Execute(pullCtx, runCtx, h.d)
			if c.want.Kind == "" {
				c.want.Kind = "sleep"
			}
			checkOutcome(t, got, c.want)
			if tr := h.tr.compact(); !slices.Equal(tr, c.trace) {
				t.Errorf("trace:\n got  %q\n want %q", tr, c.trace)
			}
			if c.check != nil {
				c.check(t, h)
			}
		})
	}
}
