package creds_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// A bare 429 rests the key briefly (not the whole cooldown) and sets a
// pace; more bare 429s widen it, and successes narrow it again.
func TestBare429PacesTheKey(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	ctx := context.Background()
	cooldown := time.Minute

	l := mustAcquire(t, p, "w")
	// The first pace is the run's spacing (here ~150 ms, x1.25) and the
	// first rest one pace: long enough that the stats below are read
	// while it lasts, even on a busy machine (with a 5 ms run the rest
	// was 14 ms and a slow read in CI found the key available again).
	// The run lasts until Redis's clock, the one the pool measures it
	// on, says 150 ms passed since the grant.
	waitFor(t, "Redis's clock to pass the run's 150 ms", 10*time.Second, func() bool {
		now, err := e.rdb.Time(ctx).Result()
		return err == nil && now.Sub(l.Acquired) >= 150*time.Millisecond
	})
	if err := p.Settle(ctx, l, creds.Outcome{RateLimited: true, MaxRest: cooldown, RestReason: "429 Too Many Requests"}); err != nil {
		t.Fatal(err)
	}
	c := credStats(t, p, "k")
	if c.Pace <= 0 || c.State != creds.StateCooling || !strings.Contains(c.RestCause, "bare 429") {
		t.Fatalf("after a bare 429: %+v", c)
	}
	if rest := c.CoolingUntil.Sub(c.LastUsed); rest > time.Second {
		t.Fatalf("the first bare 429 rests the key %s (cooldown %s)", rest, cooldown)
	}
	first := c.Pace

	// The next start comes after the rest; a second bare 429 on it widens.
	l = mustAcquire(t, p, "w")
	if err := p.Settle(ctx, l, creds.Outcome{RateLimited: true, MaxRest: cooldown}); err != nil {
		t.Fatal(err)
	}
	if c = credStats(t, p, "k"); c.Pace <= first {
		t.Fatalf("a second bare 429 kept the pace at %s (was %s)", c.Pace, first)
	}
	wide := c.Pace
	// Starts are spaced by the pace.
	var at []time.Time
	for range 5 {
		l := mustAcquire(t, p, "w")
		at = append(at, l.Acquired)
		if err := p.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < wide*9/10 {
			t.Fatalf("starts %s apart with a pace of %s", gap, wide)
		}
	}
	if c = credStats(t, p, "k"); c.Pace >= wide {
		t.Fatalf("successes did not narrow the pace (%s, was %s)", c.Pace, wide)
	}
	// Enable clears a learnt pace.
	if err := p.Enable(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if c = credStats(t, p, "k"); c.Pace != 0 {
		t.Fatalf("pace %s after enable", c.Pace)
	}
}

// The API's figures rest the key until their reset when the runs in
// flight plus the next would not fit, before any 429.
func TestSignalsRestTheKeyUntilTheReset(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 3})
	ctx := context.Background()
	a := mustAcquire(t, p, "a")
	b, err := p.AcquireCost(ctx, "b", 400)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 tokens left: enough for b's next (400) plus a's in flight
	// (2 x 400 = 800): no rest.
	tok := func(left int64) []creds.Signal {
		return []creds.Signal{{Name: "x-ratelimit-remaining-tokens", Tokens: true, Remaining: left, Reset: 2 * time.Second}}
	}
	if err := p.Settle(ctx, b, creds.Outcome{Signals: tok(1000)}); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); c.State == creds.StateCooling {
		t.Fatalf("rested with room left: %+v", c)
	}
	b, _ = p.AcquireCost(ctx, "b", 400)
	if err := p.Settle(ctx, b, creds.Outcome{Signals: tok(700)}); err != nil {
		t.Fatal(err)
	}
	c := credStats(t, p, "k")
	if c.State != creds.StateCooling || c.RestCause != "x-ratelimit-remaining-tokens" ||
		!strings.Contains(c.CoolingReason, "700 tokens left, 800 needed (1 in flight)") {
		t.Fatalf("700 tokens left for 2 x 400: %+v", c)
	}
	if d := c.CoolingUntil.Sub(c.LastUsed); d < 1900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("rests %s, the reset is 2s", d)
	}
	// Requests: none left rests the key too.
	if err := p.Enable(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(ctx, a, creds.Outcome{Signals: []creds.Signal{{Name: "anthropic-ratelimit-requests-remaining", Remaining: 0, Reset: time.Second}}}); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); c.RestCause != "anthropic-ratelimit-requests-remaining" {
		t.Fatalf("no requests left: %+v", c)
	}
}

// A key whose told limits of a signal's unit leave no more room than the
// API says is left does not rest on the signal: the told window binds
// first and frees exactly what it needs, where the API's reset is when
// its whole window is clear (bench 13b (a): told limits and OpenAI's
// headers together reached 0.69 of the allowed tokens, the told limits
// alone 0.90). Where the API says less is left than the told limits
// think (the key's room is shared), the signal rests the key as before.
func TestSignalsPassedOverWhenToldLimitsBindFirst(t *testing.T) {
	e := newEnv(t)
	lim := func(s string) creds.Limit {
		t.Helper()
		l, err := creds.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 3, Limits: []creds.Limit{lim("cost=1000/m"), lim("rate=10/m")}})
	ctx := context.Background()
	sig := func(tokensLeft, requestsLeft int64) []creds.Signal {
		return []creds.Signal{
			{Name: "x-ratelimit-remaining-tokens", Tokens: true, Remaining: tokensLeft, Reset: 30 * time.Second},
			{Name: "x-ratelimit-remaining-requests", Remaining: requestsLeft, Reset: 30 * time.Second},
		}
	}
	// Told: 1000 tokens a minute, 400 + 400 taken: 200 left; the API says
	// 300 left (more): the told limit binds first, no rest.
	a, err := p.AcquireCost(ctx, "a", 400)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.AcquireCost(ctx, "b", 400)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(ctx, b, creds.Outcome{Signals: sig(300, 5)}); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); c.State == creds.StateCooling {
		t.Fatalf("rested on a signal the told limits already bind: %+v", c)
	}
	// The API says 100 tokens are left, less than the told 200: the key's
	// room is used elsewhere too; the signal rests it.
	if err := p.Settle(ctx, a, creds.Outcome{Signals: sig(100, 5)}); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); c.State != creds.StateCooling || c.RestCause != "x-ratelimit-remaining-tokens" {
		t.Fatalf("the API says less than the told limits: want a rest, got %+v", c)
	}
}

// gateway admits a key's request only if its last admitted one was at
// least interval ago, as nginx limit_req without burst does; the rest get
// a bare 429.
type gateway struct {
	mu       sync.Mutex
	interval time.Duration
	last     map[string]time.Time
}

func (g *gateway) admit(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if now.Sub(g.last[key]) < g.interval {
		return false
	}
	g.last[key] = now
	return true
}

// Several processes find a key's pace against a gateway that answers
// bare 429s: after the first moments, few requests are refused and the
// key keeps most of its allowed rate.
func TestPaceConvergesFleetWide(t *testing.T) {
	e := newEnv(t)
	pools := []*creds.Pool{e.pool(), e.pool(), e.pool()}
	e.register(pools[0], creds.Credential{ID: "k", MaxConcurrent: 4})
	gw := &gateway{interval: 20 * time.Millisecond, last: map[string]time.Time{}}
	var ok, refused, lateRefused atomic.Int64
	const total = 250
	inGoroutines(6, pools, func(g int, p *creds.Pool) {
		for ok.Load() < total {
			l, err := p.Acquire(ctxT(t, 30*time.Second), fmt.Sprintf("g%d", g))
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond) // the request's way
			if gw.admit(l.CredentialID) {
				ok.Add(1)
				err = p.Release(context.Background(), l)
			} else {
				refused.Add(1)
				if ok.Load() > 50 {
					lateRefused.Add(1)
				}
				err = p.Settle(context.Background(), l, creds.Outcome{RateLimited: true, MaxRest: time.Minute})
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	c := credStats(t, pools[0], "k")
	t.Logf("%d admitted, %d refused (%d after the first 50 admitted); pace now %s for a gateway interval of 20ms",
		ok.Load(), refused.Load(), lateRefused.Load(), c.Pace)
	// Loose bounds for a loaded machine; the benchmark measures closely.
	if n := lateRefused.Load(); n > 60 {
		t.Fatalf("%d requests refused after the first 50 admitted: the pace does not hold", n)
	}
	if c.Pace < 10*time.Millisecond || c.Pace > 80*time.Millisecond {
		t.Fatalf("pace %s for a 20ms gateway", c.Pace)
	}
}
