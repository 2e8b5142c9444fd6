package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Scenario 4: rate precision. 3 credentials with rate limits of 40, 20
// and 10 starts per second (max_concurrent 64 each, so only the rates
// bind), 2 workers × 64 slots, 0 ms items: (periods+1) × 70 items, enough
// to keep every credential at its limit for `periods` seconds.
//
// From the results' leased_at (the grant on Redis's clock, where the pool
// counts the start):
//   - the largest number of starts of one credential in any window of its
//     period, over its limit: must never exceed 1;
//   - the steady rate: all starts after the first window's allowance (Σ N)
//     over the time from the first to the last start, over Σ N/period;
//   - the lateness of each start after the first N of a credential: how
//     long after the moment its window allowed it (t_j − (t_{j−N} + P)).
var rateScenario = &scenario{
	name:  "rate",
	title: "4. rate precision",
	figures: []figSpec{
		{id: "max_window", name: "most starts in any window ÷ limit (worst credential)", unit: "fraction", goal: never("<=", 1)},
		{id: "achieved", name: "steady rate ÷ Σ limits (40/s + 20/s + 10/s)", unit: "fraction", goal: atLeast(0.95)},
		{id: "rate", name: "steady rate, all credentials", unit: "starts/s", ceiling: "limits"},
		{id: "limits", name: "ceiling: Σ limits", unit: "starts/s"},
		{id: "late_p50", name: "start lateness after its window opened, p50", unit: "ms"},
		{id: "late_p99", name: "start lateness after its window opened, p99", unit: "ms"},
	},
	run: runRate,
}

var rateCreds = []struct {
	id     string
	n      int
	period time.Duration
}{
	{"r40", 40, time.Second},
	{"r20", 20, time.Second},
	{"r10", 10, time.Second},
}

func runRate(ctx context.Context, e *env, r runInfo) (*sample, error) {
	periods := pick(r.quick, 5, 2)
	smp := newSample()
	spec := fleetSpec{concurrency: 64}
	sumN, limit := 0, 0.0
	for _, c := range rateCreds {
		spec.creds = append(spec.creds, credSpec{id: c.id, max: 64, rate: fmt.Sprintf("%d/%s", c.n, c.period)})
		sumN += c.n
		limit += float64(c.n) / c.period.Seconds()
	}
	n := (periods + 1) * sumN
	f, err := e.newFleet(ctx, "rate", spec)
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	if err := f.enqueue(ctx, n, 0); err != nil {
		return nil, err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return nil, err
	}
	if err := f.startWorkers("w1", "w2"); err != nil {
		return nil, err
	}
	if _, err := f.waitResults(ctx, n, time.Duration(periods+30)*time.Second, 20*time.Millisecond); err != nil {
		return nil, err
	}
	use, rs, err := f.finish(ctx, m, "keyfleet: 2 worker processes", n)
	if err != nil {
		return nil, err
	}
	if err := checkSucceeded(rs, n); err != nil {
		return nil, err
	}
	starts := map[string][]time.Time{}
	var all []time.Time
	for _, r := range rs {
		starts[r.CredentialID] = append(starts[r.CredentialID], r.LeasedAt)
		all = append(all, r.LeasedAt)
	}
	worst := 0.0
	var late []float64
	for _, c := range rateCreds {
		ts := starts[c.id]
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		worst = max(worst, float64(maxInWindow(ts, c.period))/float64(c.n))
		for j := c.n; j < len(ts); j++ {
			late = append(late, float64(ts[j].Sub(ts[j-c.n].Add(c.period)))/float64(time.Millisecond))
		}
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	slices.Sort(late)
	spanS := all[len(all)-1].Sub(all[0]).Seconds()
	rate := float64(n-sumN) / spanS
	smp.values["max_window"] = worst
	smp.values["rate"] = rate
	smp.values["limits"] = limit
	smp.values["achieved"] = rate / limit
	smp.values["late_p50"], smp.values["late_p99"] = quantile(late, 0.5), quantile(late, 0.99)
	use.Wall = spanS
	smp.cpu = append(smp.cpu, use)
	return smp, nil
}

// maxInWindow is the largest number of sorted times inside any half-open
// window [t, t+period).
func maxInWindow(ts []time.Time, period time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j].Before(ts[i].Add(period)) {
			j++
		}
		best = max(best, j-i)
	}
	return best
}
