package executor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// fakeMoves counts the moves to fallback kinds.
type fakeMoves struct {
	mu    sync.Mutex
	moves []string
}

func (m *fakeMoves) Moved(from, to, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.moves = append(m.moves, from+">"+to+":"+why)
}

func (m *fakeMoves) get() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.moves)
}

const testAfter = 30 * time.Second

// withFallback makes the harness run two kinds: chat (keys a, b) falling
// back to azure (keys f1, f2) after testAfter; the item is chat's.
func withFallback(t *testing.T, h *harness) *fakeMoves {
	t.Helper()
	own, err := creds.NewKeySet("a", "b")
	if err != nil {
		t.Fatal(err)
	}
	fb, err := creds.NewKeySet("f1", "f2")
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeMoves{}
	h.kinds = map[string]Kind{
		"chat": {Handler: h.h, Keys: own, KeyCount: 2, Provider: true, Endpoint: "/v1/embeddings",
			Fallback: &Fallback{Kinds: []string{"azure"}, After: testAfter}},
		"azure": {Handler: h.h, Keys: fb, KeyCount: 2, Provider: true, Endpoint: "/v1/chat/completions"},
	}
	h.moves = m
	h.d.it.Kind = "chat"
	h.d.it.Payload = []byte(`{"model":"m","input":"hi"}`)
	return m
}

// waitOut is a grant that waits for the acquire's context, after moving
// the clock past the fallback's after: no key came within it.
func waitOut(h *harness) grant {
	return grant{block: true, before: func() { h.advance(testAfter) }}
}

// runFallbackCase runs one delivery of the harness's item.
func runFallbackCase(t *testing.T, h *harness, runs []runFunc) Outcome {
	t.Helper()
	pullCtx, cancelPull := context.WithCancelCause(context.Background())
	runCtx, cancelRun := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancelPull(nil); cancelRun(nil) })
	h.cancelPull, h.cancelRun = cancelPull, cancelRun
	h.pool.exhausted = func() { cancelRun(errScriptOver) }
	h.h.runs = runs
	if h.e == nil {
		h.start()
	}
	return h.e.Execute(pullCtx, runCtx, h.d)
}

// failing5xx is a transient failure with the API's 503.
var failing5xx = func(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) {
	return jobs.Output{Status: 503}, fmt.Errorf("503 Service Unavailable")
}

// Every way an item of a kind with a fallback starts, in process: on its
// own keys, or moved (waited, failing) to its fallback kind's, with what
// each collaborator was asked and what its result says.
func TestFallback(t *testing.T) {
	for _, c := range []struct {
		name   string
		setup  func(h *harness)
		runs   []runFunc
		want   Outcome
		trace  []string
		moves  []string
		result *kftype.Result // the fields checked: Kind, CredentialID, FallbackFrom, FallbackReason
		streak string         // the failures in a row counted, when the item is not done
	}{
		{
			name:   "healthy: its own keys serve it; nothing moves",
			setup:  func(h *harness) { h.pool.grants = []grant{{key: "a"}} },
			runs:   []runFunc{ok},
			want:   Outcome{Fate: Succeeded, Kind: "chat", Reply: ReplyAck, Attempt: 1},
			trace:  []string{"acquire a,b: a", "run a attempt 1", "settle a ok", "commit succeeded, ack"},
			result: &kftype.Result{Kind: "chat", CredentialID: "a"},
		},
		{
			name:  "waited: no key of its own within after, it runs on the fallback kind",
			setup: func(h *harness) { h.pool.grants = []grant{waitOut(h), {key: "f1"}} },
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Kind: "azure", From: "chat", Why: kftype.FallbackWaited, Reply: ReplyAck, Attempt: 1},
			trace: []string{"acquire a,b: context canceled", "acquire f1,f2: f1", "run f1 attempt 1", "settle f1 ok", "commit succeeded, ack"},
			moves: []string{"chat>azure:waited"},
			result: &kftype.Result{Kind: "azure", CredentialID: "f1", FallbackFrom: "chat",
				FallbackReason: kftype.FallbackWaited},
		},
		{
			name: "waited: no key of either kind within after, it comes round to its own kind",
			setup: func(h *harness) {
				h.pool.grants = []grant{waitOut(h), waitOut(h), {key: "b"}}
			},
			runs: []runFunc{ok},
			want: Outcome{Fate: Succeeded, Kind: "chat", Reply: ReplyAck, Attempt: 1},
			trace: []string{"acquire a,b: context canceled", "acquire f1,f2: context canceled",
				"acquire a,b: b", "run b attempt 1", "settle b ok", "commit succeeded, ack"},
			result: &kftype.Result{Kind: "chat", CredentialID: "b"},
		},
		{
			name: "never fits its own keys: it runs on the fallback kind at once",
			setup: func(h *harness) {
				h.pool.grants = []grant{{err: fmt.Errorf("%w: fits only disabled keys", creds.ErrNeverFits)}, {key: "f2"}}
			},
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Kind: "azure", From: "chat", Why: kftype.FallbackWaited, Reply: ReplyAck, Attempt: 1},
			trace: []string{"acquire a,b: " + creds.ErrNeverFits.Error() + ": fits only disabled keys", "acquire f1,f2: f2", "run f2 attempt 1", "settle f2 ok", "commit succeeded, ack"},
			moves: []string{"chat>azure:waited"},
		},
		{
			name: "never fits any kind's keys: dead letter",
			setup: func(h *harness) {
				h.pool.grants = []grant{{err: fmt.Errorf("%w: a", creds.ErrNeverFits)}, {err: fmt.Errorf("%w: f", creds.ErrNeverFits)}}
			},
			want: Outcome{Fate: DeadLettered, Kind: "chat", Reason: kftype.ReasonPermanent, Reply: ReplyTerm},
			trace: []string{"acquire a,b: " + creds.ErrNeverFits.Error() + ": a", "acquire f1,f2: " + creds.ErrNeverFits.Error() + ": f",
				"dead-letter permanent failure", "result failed", "term permanent failure"},
		},
		{
			name: "its own keys busy with its class's share of slots waiting: back to its lane, as without a fallback",
			setup: func(h *harness) {
				h.waits = NewClassWaits(1)
				h.waits.enter(WaitClass(h.kinds["chat"].Keys, "m"))
			},
			want:  Outcome{Fate: HandedBack, Kind: "chat", Cause: ErrClassWaiting, Reply: ReplyNak},
			trace: []string{"try-acquire a,b: none", "runs norun", "nak 0s"},
		},
		{
			name:   "one transient failure on its own kind: retried after the backoff, counted against the key",
			setup:  func(h *harness) { h.pool.grants = []grant{{key: "a"}} },
			runs:   []runFunc{failing5xx},
			want:   Outcome{Fate: Retried, Kind: "chat", Reply: ReplyNak, Delay: time.Second, Attempt: 1, Failures: 1},
			trace:  []string{"acquire a,b: a", "run a attempt 1", "settle a ok", "runs fail", "nak 1s"},
			streak: "a",
		},
		{
			name: "failing: a second transient failure in a row, on another key: it runs on the fallback kind at once",
			setup: func(h *harness) {
				h.d.delivered = 2
				h.runs.m["b1/i1"] = &runsHash{runs: 1, fails: 1, acc: 1, streak: "a"}
				h.pool.grants = []grant{{key: "b"}, {key: "f1"}}
			},
			runs: []runFunc{failing5xx, ok},
			want: Outcome{Fate: Succeeded, Kind: "azure", From: "chat", Why: kftype.FallbackFailing, Reply: ReplyAck, Attempt: 3, Failures: 2, Again: 1},
			trace: []string{"acquire a,b: b", "runs start", "run b attempt 2", "settle b ok", "runs fail",
				"acquire f1,f2: f1", "runs start", "run f1 attempt 3", "settle f1 ok", "commit succeeded, ack", "runs done"},
			moves: []string{"chat>azure:failing"},
			result: &kftype.Result{Kind: "azure", CredentialID: "f1", FallbackFrom: "chat",
				FallbackReason: kftype.FallbackFailing},
		},
		{
			name: "failing beyond max_attempts: it moves all the same",
			setup: func(h *harness) {
				h.policy.MaxAttempts = 2
				h.d.delivered = 2
				h.runs.m["b1/i1"] = &runsHash{runs: 1, fails: 1, acc: 1, streak: "a"}
				h.pool.grants = []grant{{key: "b"}, {key: "f1"}}
			},
			runs:  []runFunc{failing5xx, ok},
			want:  Outcome{Fate: Succeeded, Kind: "azure", From: "chat", Why: kftype.FallbackFailing, Reply: ReplyAck, Attempt: 3, Failures: 2, Again: 1},
			trace: []string{"acquire a,b: b", "runs start", "run b attempt 2", "settle b ok", "runs fail", "acquire f1,f2: f1", "runs start", "run f1 attempt 3", "settle f1 ok", "commit succeeded, ack", "runs done"},
			moves: []string{"chat>azure:failing"},
		},
		{
			name: "failing: the pool gives it the key that failed it again, which fails again: it moves",
			setup: func(h *harness) {
				h.d.delivered = 2
				h.runs.m["b1/i1"] = &runsHash{runs: 1, fails: 1, acc: 1, streak: "a"}
				h.pool.grants = []grant{{key: "a"}, {key: "f2"}}
			},
			runs: []runFunc{failing5xx, ok},
			want: Outcome{Fate: Succeeded, Kind: "azure", From: "chat", Why: kftype.FallbackFailing, Reply: ReplyAck, Attempt: 3, Failures: 2, Again: 1},
			trace: []string{"acquire a,b: a", "runs start", "run a attempt 2", "settle a ok", "runs fail",
				"acquire f1,f2: f2", "runs start", "run f2 attempt 3", "settle f2 ok", "commit succeeded, ack", "runs done"},
			moves: []string{"chat>azure:failing"},
		},
		{
			name: "a failure with a reply that is not a 5xx does not count: no fallback",
			setup: func(h *harness) {
				h.d.delivered = 2
				h.runs.m["b1/i1"] = &runsHash{runs: 1, fails: 1, acc: 1, streak: "a"}
				h.pool.grants = []grant{{key: "b"}}
			},
			runs: []runFunc{func(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) {
				return jobs.Output{Status: 200}, fmt.Errorf("reading the reply: unexpected EOF")
			}},
			want:  Outcome{Fate: Retried, Kind: "chat", Reply: ReplyNak, Delay: 5 * time.Second, Attempt: 2, Failures: 2},
			trace: []string{"acquire a,b: b", "runs start", "run b attempt 2", "settle b ok", "runs fail", "nak 5s"},
		},
		{
			name: "failing at the start of a delivery (a worker died mid-move): it starts on the fallback kind",
			setup: func(h *harness) {
				h.d.delivered = 3
				h.runs.m["b1/i1"] = &runsHash{runs: 2, fails: 2, acc: 2, streak: "a\nb"}
				h.pool.grants = []grant{{key: "f2"}}
			},
			runs:  []runFunc{ok},
			want:  Outcome{Fate: Succeeded, Kind: "azure", From: "chat", Why: kftype.FallbackFailing, Reply: ReplyAck, Attempt: 3, Failures: 2},
			trace: []string{"acquire f1,f2: f2", "runs start", "run f2 attempt 3", "settle f2 ok", "commit succeeded, ack", "runs done"},
			moves: []string{"chat>azure:failing"},
		},
		{
			name: "a transient failure on the fallback kind: retried after the backoff, and it starts there again",
			setup: func(h *harness) {
				h.policy.MaxAttempts = 5
				h.d.delivered = 3
				h.runs.m["b1/i1"] = &runsHash{runs: 2, fails: 2, acc: 2, streak: "a\nb"}
				h.pool.grants = []grant{{key: "f1"}}
			},
			runs:   []runFunc{failing5xx},
			want:   Outcome{Fate: Retried, Kind: "azure", From: "chat", Why: kftype.FallbackFailing, Reply: ReplyNak, Delay: 30 * time.Second, Attempt: 3, Failures: 3},
			trace:  []string{"acquire f1,f2: f1", "runs start", "run f1 attempt 3", "settle f1 ok", "runs fail", "nak 30s"},
			moves:  []string{"chat>azure:failing"},
			streak: "a\nb\nf1",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			m := withFallback(t, h)
			if c.setup != nil {
				c.setup(h)
			}
			got := runFallbackCase(t, h, c.runs)
			checkOutcome(t, got, c.want)
			if tr := h.tr.compact(); !slices.Equal(tr, c.trace) {
				t.Errorf("trace:\n got  %q\n want %q", tr, c.trace)
			}
			if got := m.get(); !slices.Equal(got, c.moves) {
				t.Errorf("moves: got %q, want %q", got, c.moves)
			}
			if c.streak != "" {
				if h := h.runs.m["b1/i1"]; h == nil || h.streak != c.streak {
					t.Errorf("runs: got %+v, want the streak %q", h, c.streak)
				}
			}
			if c.result != nil {
				if len(h.rec.results) != 1 {
					t.Fatalf("results: %+v", h.rec.results)
				}
				r := h.rec.results[0]
				got := kftype.Result{Kind: r.Kind, CredentialID: r.CredentialID, FallbackFrom: r.FallbackFrom, FallbackReason: r.FallbackReason}
				if got != *c.result {
					t.Errorf("result: got %+v, want %+v", got, *c.result)
				}
			}
			// The handler of the kind it ran on got the same request, as
			// that kind, at the endpoint of its own kind.
			for _, it := range h.h.seen {
				if string(it.Payload) != string(h.d.it.Payload) {
					t.Errorf("the request changed: %s", it.Payload)
				}
				want := map[string]string{"chat": "", "azure": "/v1/embeddings"}[it.Kind]
				if it.Endpoint != want {
					t.Errorf("a request run as %s goes to %q, want %q", it.Kind, it.Endpoint, want)
				}
			}
		})
	}
}

// Items after the first to wait out their kind's after do not wait it
// again: while no key of their kind grants, they try once and move at
// once; the first start their keys grant ends that, and new items run on
// their own kind again (coming back: never sticky).
func TestFallbackStuckThenBack(t *testing.T) {
	h := newHarness(t)
	m := withFallback(t, h)
	h.pool.grants = []grant{
		waitOut(h), {key: "f1"}, // item 1 waits after, then moves
		{none: true}, {key: "f2"}, // item 2 tries once, moves at once
		{key: "a"}, // item 3: its own kind grants again
		{key: "b"}, // item 4 waits on its own kind as before
	}
	for i, want := range []struct {
		kind  string
		trace []string
	}{
		{"azure", []string{"acquire a,b: context canceled", "acquire f1,f2: f1"}},
		{"azure", []string{"try-acquire a,b: none", "acquire f1,f2: f2"}},
		{"chat", []string{"try-acquire a,b: a"}},
		{"chat", []string{"acquire a,b: b"}},
	} {
		h.tr.events = nil
		h.d.it.ID = fmt.Sprintf("i%d", i+1)
		o := runFallbackCase(t, h, []runFunc{ok})
		if o.Fate != Succeeded || o.Kind != want.kind {
			t.Fatalf("item %d: %+v, want succeeded on %s", i+1, o, want.kind)
		}
		tr := h.tr.get()
		if len(tr) < len(want.trace) || !slices.Equal(tr[:len(want.trace)], want.trace) {
			t.Errorf("item %d: trace %q, want it to start with %q", i+1, tr, want.trace)
		}
		h.h.n = 0
	}
	if got, want := m.get(), []string{"chat>azure:waited", "chat>azure:waited"}; !slices.Equal(got, want) {
		t.Errorf("moves: got %q, want %q", got, want)
	}
}

// While its items move to a fallback kind, a class is full when the
// class they move to is: the puller passes its lanes over; once an item
// runs to the end on its own kind, it is not.
func TestFallbackDivertsClass(t *testing.T) {
	c := NewClassWaits(2) // one waiting slot a class
	c.divert("own", "fb")
	if got := c.Full(); len(got) != 0 {
		t.Fatalf("nothing waits: got %v full", got)
	}
	if !c.enter("fb") {
		t.Fatal("enter fb")
	}
	c.queued("fb")
	if got := c.Full(); !slices.Equal(got, []string{"fb", "own"}) {
		t.Errorf("fb full: got %v, want [fb own]", got)
	}
	if !c.undivert("own") {
		t.Error("undivert: the class it moved to was full, so the puller must look again")
	}
	if got := c.Full(); !slices.Equal(got, []string{"fb"}) {
		t.Errorf("after undivert: got %v, want [fb]", got)
	}
	if c.undivert("own") {
		t.Error("a second undivert reports nothing")
	}
}

// failingOver: two failures in a row, on two keys or on the one the pool
// gave again.
func TestFailingOver(t *testing.T) {
	for _, c := range []struct {
		streak string
		want   bool
	}{
		{"", false}, {"a", false}, {"a\nb", true}, {"a\na", true}, {"b\na\na", true},
	} {
		if got := failingOver(RunCount{Streak: c.streak}); got != c.want {
			t.Errorf("failingOver(%q) = %v, want %v", strings.ReplaceAll(c.streak, "\n", ","), got, c.want)
		}
	}
}

// While a kind's items are moving for failing, a new item's first
// failure on it is retried at once, not after the backoff: its second
// run decides whether it moves. The first item that runs to the end on
// the kind ends that.
func TestFallbackFailingRetriesAtOnce(t *testing.T) {
	h := newHarness(t)
	m := withFallback(t, h)
	h.policy.MaxAttempts = 5
	h.pool.grants = []grant{
		{key: "b"}, {key: "f1"}, // item 1, delivery 2 (failed on a before): fails on b, moves
		{key: "a"}, {key: "b"}, {key: "f2"}, // item 2: fails on a, at once on b, moves
		{key: "a"}, // item 3: the kind answers again
		{key: "b"}, // item 4: fails; back to the backoff
	}
	for i, c := range []struct {
		delivered uint64
		streak    string
		runs      []runFunc
		want      Outcome
	}{
		{2, "a", []runFunc{failing5xx, ok}, Outcome{Fate: Succeeded, Kind: "azure", From: "chat", Why: kftype.FallbackFailing, Reply: ReplyAck, Attempt: 3, Failures: 2, Again: 1}},
		{1, "", []runFunc{failing5xx, failing5xx, ok}, Outcome{Fate: Succeeded, Kind: "azure", From: "chat", Why: kftype.FallbackFailing, Reply: ReplyAck, Attempt: 3, Failures: 2, Again: 2}},
		{1, "", []runFunc{ok}, Outcome{Fate: Succeeded, Kind: "chat", Reply: ReplyAck, Attempt: 1}},
		{1, "", []runFunc{failing5xx}, Outcome{Fate: Retried, Kind: "chat", Reply: ReplyNak, Delay: time.Second, Attempt: 1, Failures: 1}},
	} {
		id := fmt.Sprintf("i%d", i+1)
		h.d.it.ID, h.d.delivered = id, c.delivered
		if c.streak != "" {
			h.runs.m["b1/"+id] = &runsHash{runs: 1, fails: 1, acc: 1, streak: c.streak}
		}
		h.h.n = 0
		checkOutcome(t, runFallbackCase(t, h, c.runs), c.want)
	}
	if got, want := m.get(), []string{"chat>azure:failing", "chat>azure:failing"}; !slices.Equal(got, want) {
		t.Errorf("moves: got %q, want %q", got, want)
	}
}

// When a stuck kind's keys come back, a burst of items that start at
// once waits for them: the start that finds the kind serving ends the
// memory before the next one looks, so that one does not move because
// the first took the room.
func TestFallbackBurstAsTheKindComesBack(t *testing.T) {
	h := newHarness(t)
	m := withFallback(t, h)
	pullCtx, cancelPull := context.WithCancelCause(context.Background())
	runCtx, cancelRun := context.WithCancelCause(context.Background())
	defer cancelPull(nil)
	defer cancelRun(nil)
	h.pool.exhausted = func() { cancelRun(errScriptOver) }
	h.h.runs = []runFunc{ok, ok}
	h.start()
	h.e.stuck.set("chat", "m", true)
	second := &fakeDelivery{tr: h.tr, delivered: 1, it: h.d.it}
	second.it.ID = "i2"
	done := make(chan Outcome, 1)
	h.pool.grants = []grant{
		{key: "a", before: func() {
			go func() { done <- h.e.Execute(pullCtx, runCtx, second) }()
			// Give the second item time to look while the first one's try
			// is in flight (without the probe lock it would try, find no
			// room and move; with it, it waits for this try's answer).
			for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if slices.Contains(h.tr.get(), "try-acquire a,b: none") {
					break
				}
			}
		}},
		// No room for a second try (the first took it); a wait gets b.
		{key: "b", none: true},
	}
	first := h.e.Execute(pullCtx, runCtx, h.d)
	var o Outcome
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the second item did not finish")
	}
	for i, got := range []Outcome{first, o} {
		if got.Fate != Succeeded || got.Kind != "chat" {
			t.Errorf("item %d: %+v, want succeeded on chat", i+1, got)
		}
	}
	tr := h.tr.get()
	if !slices.Contains(tr, "try-acquire a,b: a") || !slices.Contains(tr, "acquire a,b: b") {
		t.Errorf("trace %q: want the first item's try and the second's wait on chat's keys", tr)
	}
	if got := m.get(); len(got) != 0 {
		t.Errorf("moves: %q, want none", got)
	}
}
