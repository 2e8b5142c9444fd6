package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Scenario 11: rate precision per kind of limit, in process (pkg/creds).
// For each kind, 4 credentials (max_concurrent 64, so only the limit
// binds) carry the same limit; 2 handles (as 2 processes) × 8 goroutines
// acquire and release at once (0 ms jobs) for k periods and a bit. Starts
// are the leases' grant times on Redis's clock.
//
//   - exact window rate=40/s: the most starts in any window [t, t+1s) ÷ 40;
//   - smooth rate=20/s,burst=1 (one start every 50 ms): the most starts in
//     any window of 50 ms ÷ 1 and of 1 s ÷ 20 (the worse of the two);
//   - cost=1000/s, each start a random cost of 1 to 50: the largest cost
//     sum in any window [t, t+1s) ÷ 1000.
//
// Achieved ÷ allowed, exact window and cost: per credential, from its
// first start t0, what started in [t0, t0 + k periods) ÷ the most the
// limit allows there (k × N), summed over the credentials. A cost limit
// loses what does not fit at the end of a window: the queue is first
// come, first served, so a large cost at its head waits for room. Smooth:
// each credential's steady rate, (starts − burst) ÷ (last start − first
// start), summed, ÷ the limits' N/P; a start late after its slot delays
// every later one (GCRA counts from the start), so lateness shows here.
var limitsScenario = &scenario{
	name:  "limits",
	title: "11. limit precision",
	figures: []figSpec{
		{id: "window_worst", name: "exact window rate=40/s: most starts in any 1 s ÷ 40 (worst key)", unit: "fraction", goal: never("<=", 1)},
		{id: "window_achieved", name: "… achieved ÷ allowed", unit: "fraction", goal: atLeast(0.95)},
		{id: "smooth_worst", name: "smooth rate=20/s,burst=1: most starts in any 50 ms ÷ 1 or 1 s ÷ 20 (worst key)", unit: "fraction", goal: never("<=", 1)},
		{id: "smooth_achieved", name: "… achieved ÷ allowed", unit: "fraction", goal: atLeast(0.95)},
		{id: "smooth_late_p50", name: "… start lateness after its slot, p50 (start − previous start − 50 ms)", unit: "ms"},
		{id: "cost_worst", name: "cost=1000/s, random costs 1-50: most cost in any 1 s ÷ 1000 (worst key)", unit: "fraction", goal: never("<=", 1)},
		{id: "cost_achieved", name: "… achieved ÷ allowed", unit: "fraction", goal: atLeast(0.95)},
	},
	run: runLimits,
}

const (
	limitKeys    = 4
	limitHandles = 2
	limitSlots   = 8
	limitMaxCost = 50
)

// start is one grant: when (Redis's clock) and at what cost.
type start struct {
	at   time.Time
	cost int64
}

func runLimits(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	k := pick(r.quick, 3, 1)
	for _, c := range []struct {
		key  string
		spec string
		cost bool
	}{
		{"window", "rate=40/s", false},
		{"smooth", "rate=20/s,burst=1", false},
		{"cost", "cost=1000/s", true},
	} {
		lim, err := creds.ParseLimit(c.spec)
		if err != nil {
			return nil, fmt.Errorf("bench: limit %q: %w", c.spec, err)
		}
		run := time.Duration(k)*lim.Period + 300*time.Millisecond
		starts, use, err := limitRun(ctx, e, lim, run, c.cost, fmt.Sprintf("%s, 4 keys, 2 handles × 8 (in process)", c.spec))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.spec, err)
		}
		smp.cpu = append(smp.cpu, use)
		worst, got, allowed := 0.0, 0.0, 0.0
		var late []float64
		for id, ss := range starts {
			slices.SortFunc(ss, func(a, b start) int { return a.at.Compare(b.at) })
			if len(ss) == 0 {
				return nil, fmt.Errorf("bench: %s: no start on %s", c.spec, id)
			}
			t0 := ss[0].at
			switch lim.Kind {
			case creds.LimitSmooth:
				interval := lim.Period / time.Duration(lim.N)
				ts := startTimes(ss)
				worst = max(worst,
					float64(maxInWindow(ts, interval))/float64(lim.Burst),
					float64(maxInWindow(ts, lim.Period))/float64(int64(lim.Burst)-1+lim.N))
				// The steady rate: the starts after the first burst over the
				// time from the first start to the last, against N/P.
				if span := ss[len(ss)-1].at.Sub(t0); len(ss) > lim.Burst && span > 0 {
					got += float64(len(ss)-lim.Burst) / span.Seconds() * lim.Period.Seconds()
				}
				allowed += float64(lim.N)
				for i := 1; i < len(ss); i++ {
					late = append(late, float64(ss[i].at.Sub(ss[i-1].at)-interval)/float64(time.Millisecond))
				}
			default:
				worst = max(worst, float64(maxCostInWindow(ss, lim.Period))/float64(lim.N))
				end := t0.Add(time.Duration(k) * lim.Period)
				for _, s := range ss {
					if s.at.Before(end) {
						got += float64(s.cost)
					}
				}
				allowed += float64(int64(k) * lim.N)
			}
		}
		smp.values[c.key+"_worst"] = worst
		smp.values[c.key+"_achieved"] = got / allowed
		if late != nil {
			slices.Sort(late)
			smp.values[c.key+"_late_p50"] = quantile(late, 0.5)
		}
	}
	return smp, nil
}

func startTimes(ss []start) []time.Time {
	ts := make([]time.Time, len(ss))
	for i, s := range ss {
		ts[i] = s.at
	}
	return ts
}

// maxCostInWindow is the largest cost sum of sorted starts inside any
// half-open window [t, t+period).
func maxCostInWindow(ss []start, period time.Duration) int64 {
	var best, sum int64
	j := 0
	for i := range ss {
		for j < len(ss) && ss[j].at.Before(ss[i].at.Add(period)) {
			sum += ss[j].cost
			j++
		}
		best = max(best, sum)
		sum -= ss[i].cost
	}
	return best
}

// limitRun runs the pattern on a fresh pool for d and returns the starts
// by credential.
func limitRun(ctx context.Context, e *env, lim creds.Limit, d time.Duration, randomCost bool, variant string) (map[string][]start, CPUUse, error) {
	defer e.flushAfter(ctx)
	hs, err := e.openHandles(e.uniq("lim"), limitHandles)
	if err != nil {
		return nil, CPUUse{}, err
	}
	defer hs.close()
	if err := registerLimited(ctx, hs.pools[0], limitKeys, 64, []creds.Limit{lim}); err != nil {
		return nil, CPUUse{}, err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return nil, CPUUse{}, err
	}
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var mu sync.Mutex
	starts := map[string][]start{}
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	for hi, p := range hs.pools {
		for s := range limitSlots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("h%d/%d", hi, s)
				rng := rand.New(rand.NewPCG(uint64(hi), uint64(s)))
				for runCtx.Err() == nil {
					cost := int64(1)
					if randomCost {
						cost = 1 + rng.Int64N(limitMaxCost)
					}
					l, err := p.AcquireCost(runCtx, owner, cost)
					if err != nil {
						if runCtx.Err() == nil {
							firstErr.CompareAndSwap(nil, fmt.Errorf("bench: acquire: %w", err))
						}
						return
					}
					mu.Lock()
					starts[l.CredentialID] = append(starts[l.CredentialID], start{at: l.Acquired, cost: l.Cost})
					mu.Unlock()
					if err := p.Release(context.WithoutCancel(ctx), l); err != nil {
						firstErr.CompareAndSwap(nil, fmt.Errorf("bench: release: %w", err))
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, CPUUse{}, err
	}
	n := 0
	for _, ss := range starts {
		n += len(ss)
	}
	use, err := m.done(ctx, variant, n, time.Since(t0), nil)
	if err != nil {
		return nil, CPUUse{}, err
	}
	if len(starts) != limitKeys {
		return nil, CPUUse{}, fmt.Errorf("bench: starts on %d of %d credentials", len(starts), limitKeys)
	}
	return starts, use, nil
}
