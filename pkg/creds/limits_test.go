package creds_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

func mustLimit(t testing.TB, spec string) creds.Limit {
	t.Helper()
	l, err := creds.ParseLimit(spec)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		spec, want string
		kind       creds.LimitKind
	}{
		{"rate=500/m", "rate=500/m", creds.LimitWindow},
		{" rate = 10/s , burst = 1 ", "rate=10/s,burst=1", creds.LimitSmooth},
		{"burst=5,rate=100/30s", "rate=100/30s,burst=5", creds.LimitSmooth},
		{"cost=30000/m", "cost=30000/m", creds.LimitCost},
		{"cost=6000/10s", "cost=6000/10s", creds.LimitCost},
	} {
		l, err := creds.ParseLimit(c.spec)
		if err != nil || l.String() != c.want || l.Kind != c.kind {
			t.Errorf("ParseLimit(%q) = %v (%s), %v; want %s (%s)", c.spec, l, l.Kind, err, c.want, c.kind)
		}
	}
	for _, c := range []struct{ spec, want string }{
		{"", "want rate=N/PERIOD"},
		{"500/m", "want rate=N/PERIOD"},
		{"rate=500/m,cost=5/s", "either a rate or a cost"},
		{"cost=5/s,burst=2", "burst applies to rate limits only"},
		{"rate=10/s,burst=0", "burst \"0\" must be a whole number of at least 1"},
		{"rate=10/s,burst=x", "must be a whole number"},
		{"rate=0/s", "count must be at least 1"},
		{"rate=5/w", "neither a unit"},
		{"speed=5/s", `unknown part "speed"`},
		{"rate=5/s,rate=6/s", "rate is given twice"},
	} {
		_, err := creds.ParseLimit(c.spec)
		if !errors.Is(err, creds.ErrBadLimit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseLimit(%q) = %v, want an ErrBadLimit saying %q", c.spec, err, c.want)
		}
	}
}

type start struct {
	at   time.Time
	cost int64
}

// Several handles hammer one credential with three limits at once and
// random costs: every start had room in all three (checked over every
// window of the log of grants, on Redis's clock), and the windows hold
// exactly the starts that happened.
func TestSeveralLimitsAreAllOrNothing(t *testing.T) {
	e := newEnv(t)
	pools := []*creds.Pool{e.pool(), e.pool(), e.pool()}
	const period = 300 * time.Millisecond
	e.register(pools[0], creds.Credential{ID: "k", MaxConcurrent: 8, Limits: []creds.Limit{
		mustLimit(t, "rate=6/300ms"),
		mustLimit(t, "cost=100/300ms"),
		mustLimit(t, "rate=40/s,burst=3"),
	}})
	var mu sync.Mutex
	var starts []start
	stop := time.Now().Add(1500 * time.Millisecond)
	inGoroutines(12, pools, func(g int, p *creds.Pool) {
		for time.Now().Before(stop) {
			cost := 1 + rand.Int64N(40)
			l, err := p.AcquireCost(ctxT(t, 20*time.Second), fmt.Sprintf("g%d", g), cost)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			starts = append(starts, start{l.Acquired, l.Cost})
			mu.Unlock()
			if err := p.Release(context.Background(), l); err != nil {
				t.Error(err)
				return
			}
		}
	})
	sort.Slice(starts, func(i, j int) bool { return starts[i].at.Before(starts[j].at) })
	if len(starts) < 10 {
		t.Fatalf("only %d starts", len(starts))
	}
	for i, s := range starts {
		n, cost := 0, int64(0)
		for _, o := range starts[:i+1] {
			if o.at.After(s.at.Add(-period)) {
				n++
				cost += o.cost
			}
		}
		if n > 6 || cost > 100 {
			t.Fatalf("at start %d: %d starts, cost %d in the 300ms window ending then (limits 6 and 100)", i, n, cost)
		}
		// GCRA 40/s, burst 3: in any span d, at most 3 + d/25ms starts.
		for _, o := range starts[:i] {
			d := s.at.Sub(o.at)
			k := 0
			for _, x := range starts[:i+1] {
				if !x.at.Before(o.at) {
					k++
				}
			}
			if allowed := 3 + int(d/(25*time.Millisecond)); k > allowed {
				t.Fatalf("%d starts within %s, the smooth limit allows %d", k, d, allowed)
			}
		}
	}
	// The windows hold exactly the starts that happened.
	var inWindow, costInWindow int64
	now := stats(t, pools[0]).At
	for _, s := range starts {
		if s.at.After(now.Add(-period)) {
			inWindow++
			costInWindow += s.cost
		}
	}
	for _, l := range credStats(t, pools[0], "k").Limits {
		switch l.Limit {
		case "rate=6/300ms":
			if l.Used > inWindow {
				t.Errorf("window holds %d starts, %d happened in it", l.Used, inWindow)
			}
		case "cost=100/300ms":
			if l.Used > costInWindow {
				t.Errorf("cost window holds %d, %d was started in it", l.Used, costInWindow)
			}
		}
	}
	t.Logf("%d starts in 1.5s (limits allow about %d)", len(starts), int(1.5*20))
}

// A smooth limit spaces starts evenly after its burst.
func TestSmoothLimitSpacesStarts(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10, Limits: []creds.Limit{mustLimit(t, "rate=20/s,burst=2")}})
	var at []time.Time
	for range 8 {
		l := mustAcquire(t, p, "w")
		at = append(at, l.Acquired)
		if err := p.Release(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	if d := at[1].Sub(at[0]); d > 40*time.Millisecond {
		t.Errorf("the burst of 2 was spaced %s", d)
	}
	for i := 2; i < len(at); i++ {
		// After the burst, one every 50ms (measured from the first start:
		// the bucket refills at one cell per 50ms).
		if min := at[0].Add(time.Duration(i-1) * 50 * time.Millisecond); at[i].Before(min.Add(-time.Millisecond)) {
			t.Errorf("start %d at +%s, before +%s", i, at[i].Sub(at[0]), min.Sub(at[0]))
		}
	}
}

// A cost window is exact: a start that does not fit waits for the oldest
// costs to leave it; the waiter at the head holds smaller ones behind it.
func TestCostWindowWaitsForRoom(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10, Limits: []creds.Limit{mustLimit(t, "cost=10/500ms")}})
	ctx := context.Background()
	first, err := p.AcquireCost(ctx, "a", 6)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	big := acquireAsync(t, p, "big", 6, 10*time.Second)
	e.waitQueued(p, 1)
	small := acquireAsync(t, p, "small", 2, 10*time.Second)
	b := <-big
	s := <-small
	if b == nil || s == nil {
		t.Fatal("no lease")
	}
	if room := first.Acquired.Add(500 * time.Millisecond); b.Acquired.Before(room) {
		t.Fatalf("cost 6 started at +%s, before the first 6 left the window (+500ms)", b.Acquired.Sub(first.Acquired))
	}
	if s.Acquired.Before(b.Acquired) {
		t.Fatalf("the small cost overtook the big one queued before it")
	}
	c := credStats(t, p, "k")
	if len(c.Limits) != 1 || c.Limits[0].Used != 8 || c.Limits[0].Of != 10 {
		t.Fatalf("cost window: %+v, want 8 of 10 used", c.Limits)
	}
}

// The real cost replaces the estimate, down and up, even under
// concurrency; the window then holds exactly the real costs.
func TestReconciliation(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 50, Limits: []creds.Limit{mustLimit(t, "cost=100000/m")}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var real int64
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				l, err := p.AcquireCost(ctxT(t, 10*time.Second), fmt.Sprintf("g%d", g), 1+rand.Int64N(100))
				if err != nil {
					t.Error(err)
					return
				}
				r := 1 + rand.Int64N(200)
				if err := p.Settle(context.Background(), l, creds.Outcome{Cost: r}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				real += r
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if c := credStats(t, p, "k"); c.Limits[0].Used != real {
		t.Fatalf("the window holds %d, the real costs add up to %d", c.Limits[0].Used, real)
	}
	// Up: a start that cost more than estimated makes the next one wait.
	e2 := newEnv(t)
	q := e2.pool()
	e2.register(q, creds.Credential{ID: "k", MaxConcurrent: 5, Limits: []creds.Limit{mustLimit(t, "cost=10/400ms")}})
	l, err := q.AcquireCost(context.Background(), "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Settle(context.Background(), l, creds.Outcome{Cost: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.TryAcquire(context.Background(), "b"); !errors.Is(err, creds.ErrNoneAvailable) {
		t.Fatalf("after a start reconciled to the whole window: %v, want ErrNoneAvailable", err)
	}
	next := mustAcquire(t, q, "c")
	if next.Acquired.Before(l.Acquired.Add(400 * time.Millisecond)) {
		t.Fatalf("a start at +%s, before the reconciled one left the window", next.Acquired.Sub(l.Acquired))
	}
}

// A cost above every credential's cost limit fails at once, naming the
// largest cost that fits; a credential without a cost limit takes any.
func TestCostThatNeverFits(t *testing.T) {
	e := newEnv(t)
	p := e.registered(
		creds.Credential{ID: "a", MaxConcurrent: 1, Limits: []creds.Limit{mustLimit(t, "cost=6000/10s")}},
		creds.Credential{ID: "b", MaxConcurrent: 1, Limits: []creds.Limit{mustLimit(t, "cost=3000/10s"), mustLimit(t, "rate=5/s")}},
	)
	_, err := p.AcquireCost(ctxT(t, 5*time.Second), "w", 7000)
	var ce *creds.CostError
	if !errors.As(err, &ce) || !errors.Is(err, creds.ErrNeverFits) || ce.Max != 6000 || ce.Cost != 7000 ||
		!strings.Contains(err.Error(), "credential a cost=6000/10s") {
		t.Fatalf("cost 7000: %v, want a CostError with max 6000", err)
	}
	l, err := p.AcquireCost(ctxT(t, 5*time.Second), "w", 5000)
	if err != nil || l.CredentialID != "a" {
		t.Fatalf("cost 5000: %v %v, want a lease on a", l, err)
	}
	_ = p.Release(context.Background(), l)
	// A handle that may only use b: 5000 never fits there.
	onlyB := e.pool(creds.WithOnly("b"))
	if _, err := onlyB.AcquireCost(ctxT(t, 5*time.Second), "w", 5000); !errors.Is(err, creds.ErrNeverFits) {
		t.Fatalf("only b, cost 5000: %v, want ErrNeverFits", err)
	}
	// Lifting the limit lets it fit.
	if err := p.SetLimits(context.Background(), "b", creds.Limits{Limits: &[]creds.Limit{mustLimit(t, "rate=5/s")}}); err != nil {
		t.Fatal(err)
	}
	if l, err := onlyB.AcquireCost(ctxT(t, 5*time.Second), "w", 50000); err != nil {
		t.Fatalf("after the cost limit is lifted: %v", err)
	} else {
		_ = onlyB.Release(context.Background(), l)
	}
}

// Replacing a credential's limits keeps the history of a limit that stays.
func TestLimitChangeKeepsHistory(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 5, Rate: "3/1s"})
	ctx := context.Background()
	for range 3 {
		l := mustAcquire(t, p, "w")
		_ = p.Release(ctx, l)
	}
	ls := []creds.Limit{mustLimit(t, "rate=3/s"), mustLimit(t, "cost=100/s")}
	if err := p.SetLimits(ctx, "k", creds.Limits{Limits: &ls}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.TryAcquire(ctx, "w"); !errors.Is(err, creds.ErrNoneAvailable) {
		t.Fatalf("a 4th start in the window after the change: %v, want ErrNoneAvailable", err)
	}
	c := credStats(t, p, "k")
	if len(c.Limits) != 2 || c.Limits[0].Used != 3 || c.Limits[1].Limit != "cost=100/s" || c.State != creds.StateBusy {
		t.Fatalf("after the change: %+v", c)
	}
}
