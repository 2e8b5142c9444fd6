package creds_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// With the limit told, a key short of room rests only until enough has
// refilled for its next start at the rate the figures imply (a bucket of
// 30 whole again in 10 s refills at about 3/s), not until the bucket is
// whole; its next starts are spaced at that rate; a reply with room ends
// the spacing.
func TestSignalsRestUntilEnoughHasRefilled(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10})
	ctx := context.Background()
	l := mustAcquire(t, p, "w")
	if err := p.Settle(ctx, l, creds.Outcome{Signals: []creds.Signal{{Name: "x-ratelimit-remaining-requests",
		Remaining: 0, Reset: 10 * time.Second, Limit: 30}}}); err != nil {
		t.Fatal(err)
	}
	c := credStats(t, p, "k")
	rest := c.CoolingUntil.Sub(c.LastUsed)
	// (30-0-1)/10 s = 2.9/s: one start refills in 345 ms.
	if c.State != creds.StateCooling || rest < 300*time.Millisecond || rest > 2*time.Second ||
		!strings.Contains(c.CoolingReason, "refill 2.9/s") {
		t.Fatalf("after 0 of 30 left, whole in 10 s: rests %s (%+v)", rest, c)
	}
	var at []time.Time
	for range 3 {
		l := mustAcquire(t, p, "w")
		at = append(at, l.Acquired)
		if err := p.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 300*time.Millisecond {
			t.Fatalf("starts %s apart while spaced at the refill rate (345 ms)", gap)
		}
	}
	// A reply with room ends the spacing: starts go back to back.
	l = mustAcquire(t, p, "w")
	if err := p.Settle(ctx, l, creds.Outcome{Signals: []creds.Signal{{Name: "x-ratelimit-remaining-requests",
		Remaining: 20, Reset: 3 * time.Second, Limit: 30}}}); err != nil {
		t.Fatal(err)
	}
	got := tryN(t, p, creds.Request{Owner: "w"}, 5)
	if len(got) != 5 {
		t.Fatalf("%d starts at once after a reply with room, want 5", len(got))
	}
	releaseAll(t, p, got)
}

// A reset of 0 with too little left (an API that rounds a short reset down
// to 0ms) is not room: the key rests as a minute's bucket of its limit
// refills, instead of sending on.
func TestAZeroResetWithTooLittleLeftIsNotRoom(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10})
	ctx := context.Background()
	held := tryN(t, p, creds.Request{Owner: "w"}, 3)
	l := held[0]
	if err := p.Settle(ctx, l, creds.Outcome{Signals: []creds.Signal{{Name: "x-ratelimit-remaining-requests",
		Remaining: 1, Reset: 0, Limit: 60}}}); err != nil {
		t.Fatal(err)
	}
	// 2 in flight, 1 left: 2 short at 1/s.
	c := credStats(t, p, "k")
	if rest := c.CoolingUntil.Sub(c.LastUsed); c.State != creds.StateCooling || rest < 1500*time.Millisecond || rest > 3*time.Second {
		t.Fatalf("1 left of 60, reset 0ms, 2 in flight: rests %s (%+v)", rest, c)
	}
	releaseAll(t, p, held[1:])
}

// An API whose limit is a window frees nothing before its reset: a 429 on
// the start that followed a rest cut short at the refill rate stops such
// rests, and a key short of room then rests until the reset, when the
// limit is whole again.
func TestA429AfterARefillRestRestsUntilTheReset(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10})
	ctx := context.Background()
	short := func(reset time.Duration) creds.Outcome {
		return creds.Outcome{Signals: []creds.Signal{{Name: "x-ratelimit-remaining-requests", Remaining: 0, Reset: reset, Limit: 30}}}
	}
	restOf := func() time.Duration {
		c := credStats(t, p, "k")
		if c.State != creds.StateCooling {
			t.Fatalf("not resting after a short figure: %+v", c)
		}
		return c.CoolingUntil.Sub(c.LastUsed)
	}
	// 0 of 30 left, whole in 3 s: (30-0-1)/3 s, one start refills in 103 ms.
	if err := p.Settle(ctx, mustAcquire(t, p, "w"), short(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if rest := restOf(); rest > time.Second {
		t.Fatalf("first short figure: rests %s, want the refill of one start (103 ms)", rest)
	}
	// The start after that rest is refused: the window had not freed it.
	l := mustAcquire(t, p, "w")
	if err := p.Settle(ctx, l, creds.Outcome{RateLimited: true, Rest: 10 * time.Millisecond, RestReason: "429",
		Signals: short(2900 * time.Millisecond).Signals}); err != nil {
		t.Fatal(err)
	}
	if rest := restOf(); rest < 2500*time.Millisecond {
		t.Fatalf("429 after a refill rest: rests %s, want until the reset (2.9 s)", rest)
	}
}

// The API counts a request when it arrives, and runs granted one after
// the other need not arrive in that order. A reply to a run whose request
// left some time after its grant leaves out the runs granted within that
// time before it that are still in flight: with 1 of 30 left and one such
// run, the key has no room for another start. Without that time (the
// request left at its grant), the run granted before it arrived first and
// the 1 left is room.
func TestARunGrantedJustBeforeMayArriveAfter(t *testing.T) {
	for _, c := range []struct {
		name     string
		late     bool // whether the second run's request left well after its grant
		wantRest bool
	}{
		{"sent late", true, true},
		{"sent at the grant", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10})
			first := mustAcquire(t, p, "w")
			second := mustAcquire(t, p, "w")
			granted := time.Now() // no earlier than its grant
			var sent time.Time
			if c.late {
				// Its request left later after its grant than the first
				// run was granted before it.
				gap := second.Acquired.Sub(first.Acquired) + 5*time.Millisecond
				waitFor(t, "the send delay", 5*time.Second, func() bool { return time.Since(granted) > gap })
				sent = time.Now()
			}
			if err := p.Settle(context.Background(), second, creds.Outcome{Sent: sent, Signals: []creds.Signal{{
				Name: "x-ratelimit-remaining-requests", Remaining: 1, Reset: 10 * time.Second, Limit: 30}}}); err != nil {
				t.Fatal(err)
			}
			st := credStats(t, p, "k")
			if rests := st.State == creds.StateCooling; rests != c.wantRest {
				t.Fatalf("1 of 30 left with the first run in flight: resting %v, want %v (%+v)", rests, c.wantRest, st)
			}
			if err := p.Release(context.Background(), first); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A run granted before a refill rest was counted in the figure that set
// the rest: still in flight, it does not keep a 429 right after the rest
// from stopping such rests (only runs granted since the rest ended could
// have taken what had refilled).
func TestARunFromBeforeTheRestDoesNotHideAWindow(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10})
	ctx := context.Background()
	short := func(reset time.Duration) []creds.Signal {
		return []creds.Signal{{Name: "x-ratelimit-remaining-requests", Remaining: 0, Reset: reset, Limit: 30}}
	}
	early := mustAcquire(t, p, "w")
	if err := p.Settle(ctx, mustAcquire(t, p, "w"), creds.Outcome{Signals: short(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); c.State != creds.StateCooling || c.CoolingUntil.Sub(c.LastUsed) > time.Second {
		t.Fatalf("first short figure: want a rest of one start's refill (103 ms): %+v", c)
	}
	l := mustAcquire(t, p, "w")
	if err := p.Settle(ctx, l, creds.Outcome{RateLimited: true, Rest: 10 * time.Millisecond, RestReason: "429",
		Signals: short(2900 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	c := credStats(t, p, "k")
	if rest := c.CoolingUntil.Sub(c.LastUsed); c.State != creds.StateCooling || rest < 2500*time.Millisecond {
		t.Fatalf("429 after a refill rest, the run from before it in flight: rests %s, want until the reset (2.9 s): %+v", rest, c)
	}
	if err := p.Release(ctx, early); err != nil {
		t.Fatal(err)
	}
}
