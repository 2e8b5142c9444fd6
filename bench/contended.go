package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Scenario 3: a contended pool. 4 credentials of max_concurrent 1, 3
// worker processes × 4 slots, N sleep items of 25 ms, enqueued before the
// workers start. Utilization = busy key-time / (4 × wall), where busy
// key-time is the sum of the job durations the workers measured and wall
// runs from the first lease grant to the last result's finished_at (which
// comes after the last release: the figure errs low, never high).
//
// The ceiling is the pool alone, in process: 3 Pool handles (each with its
// own Redis client, as 3 processes) × 4 goroutines acquire, sleep 25 ms,
// release; the same utilization formula. It runs a second time with the
// scripts through go-redis' AutoPipeliner, as the worker builds its pool.
var contendedScenario = &scenario{
	name:  "contended",
	title: "3. contended pool",
	figures: []figSpec{
		{id: "utilization", name: "utilization: 4 keys × 1, 3 workers × 4 slots, 25 ms items", unit: "fraction",
			goal: atLeast(0.98), ceiling: "pool_utilization"},
		{id: "steady", name: "… each key from its first grant to its last finish (no start-up or tail)", unit: "fraction", ceiling: "pool_steady"},
		{id: "failed", name: "items failed or missing", unit: "count", goal: never("<=", 0)},
		{id: "reruns", name: "items run more than once", unit: "count"},
		{id: "gap_p50", name: "key idle between runs p50 (next grant − previous grant − job)", unit: "ms"},
		{id: "gap_p99", name: "key idle between runs p99", unit: "ms"},
		{id: "holder_p50", name: "… of which in the holding worker: lease held but no job running, p50 (finished_at − leased_at − duration)", unit: "ms"},
		{id: "pool_utilization", name: "ceiling: the pool alone, 3 handles × 4 goroutines (in process)", unit: "fraction"},
		{id: "pool_steady", name: "ceiling: … each key from its first grant to its last finish, pool alone", unit: "fraction"},
		{id: "pool_gap_p50", name: "ceiling: key idle between runs p50, pool alone", unit: "ms"},
		{id: "pool_ap_utilization", name: "the pool alone, scripts auto-pipelined as in the worker", unit: "fraction", ceiling: "pool_utilization"},
		{id: "pool_ap_gap_p50", name: "key idle between runs p50, pool alone, auto-pipelined", unit: "ms"},
	},
	run: runContended,
}

const (
	contendedKeys  = 4
	contendedSleep = 25 * time.Millisecond
)

func runContended(ctx context.Context, e *env, r runInfo) (*sample, error) {
	n := pick(r.quick, 400, 80)
	smp := newSample()
	f, err := e.newFleet(ctx, "con", fleetSpec{concurrency: 4, creds: keyCreds(contendedKeys, 1)})
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	if err := f.enqueue(ctx, n, float64(contendedSleep.Milliseconds())); err != nil {
		return nil, err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return nil, err
	}
	if err := f.startWorkers("w1", "w2", "w3"); err != nil {
		return nil, err
	}
	if _, err := f.waitResults(ctx, n, 5*time.Minute, 20*time.Millisecond); err != nil {
		return nil, err
	}
	use, rs, err := f.finish(ctx, m, "keyfleet: 3 worker processes", n)
	if err != nil {
		return nil, err
	}
	failed, reruns := n-len(rs), 0
	for _, r := range rs {
		if r.Outcome != kftype.OutcomeSucceeded {
			failed++
		}
		if r.Attempts > 1 {
			reruns++
		}
	}
	smp.values["failed"], smp.values["reruns"] = float64(failed), float64(reruns)
	first, last := span(rs)
	busy := 0.0
	runs := make([]keyRun, 0, len(rs))
	for _, r := range rs {
		busy += r.Duration
		runs = append(runs, keyRun{key: r.CredentialID, granted: r.LeasedAt, dur: time.Duration(r.Duration * float64(time.Second)), end: r.FinishedAt})
	}
	wall := last.Sub(first)
	smp.values["utilization"] = busy / (contendedKeys * wall.Seconds())
	smp.values["steady"] = busy / keySpans(runs).Seconds()
	var held []float64
	for _, r := range rs {
		held = append(held, float64(r.FinishedAt.Sub(r.LeasedAt)-time.Duration(r.Duration*float64(time.Second)))/float64(time.Millisecond))
	}
	slices.Sort(held)
	smp.values["holder_p50"] = quantile(held, 0.5)
	gaps := keyGaps(runs)
	smp.values["gap_p50"], smp.values["gap_p99"] = quantile(gaps, 0.5), quantile(gaps, 0.99)
	use.Wall = wall.Seconds()
	smp.cpu = append(smp.cpu, use)
	if err := poolUtilization(ctx, e, smp, n, false); err != nil {
		return nil, err
	}
	if err := poolUtilization(ctx, e, smp, n, true); err != nil {
		return nil, err
	}
	return smp, nil
}

// keyRun is one run on a credential.
type keyRun struct {
	key     string
	granted time.Time
	dur     time.Duration
	end     time.Time // when the run was over (after its release)
}

// keySpans sums, over the keys, the time from a key's first grant to its
// last run's end.
func keySpans(runs []keyRun) time.Duration {
	first, last := map[string]time.Time{}, map[string]time.Time{}
	for _, r := range runs {
		if f, ok := first[r.key]; !ok || r.granted.Before(f) {
			first[r.key] = r.granted
		}
		if r.end.After(last[r.key]) {
			last[r.key] = r.end
		}
	}
	var sum time.Duration
	for k, f := range first {
		sum += last[k].Sub(f)
	}
	return sum
}

// keyGaps returns, sorted, the time each key spent between the end of one
// job and the grant of the next (grant − previous grant − previous job),
// in ms.
func keyGaps(runs []keyRun) []float64 {
	byKey := map[string][]keyRun{}
	for _, r := range runs {
		byKey[r.key] = append(byKey[r.key], r)
	}
	var gaps []float64
	for _, rs := range byKey {
		slices.SortFunc(rs, func(a, b keyRun) int { return a.granted.Compare(b.granted) })
		for i := 1; i < len(rs); i++ {
			g := rs[i].granted.Sub(rs[i-1].granted) - rs[i-1].dur
			gaps = append(gaps, float64(g)/float64(time.Millisecond))
		}
	}
	slices.Sort(gaps)
	return gaps
}

// poolUtilization runs the contended pattern on pkg/creds alone;
// pipelined routes the scripts through go-redis' AutoPipeliner, as the
// worker builds its pool.
func poolUtilization(ctx context.Context, e *env, smp *sample, n int, pipelined bool) error {
	defer e.rdb.FlushAll(context.WithoutCancel(ctx))
	name := e.uniq("conpool")
	var pools []*creds.Pool
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: e.rdb.Options().Addr, PoolSize: 20, Protocol: 2})
		defer rdb.Close()
		var opts []creds.Option
		if pipelined {
			ap, err := rdb.AutoPipeline()
			if err != nil {
				return fmt.Errorf("bench: auto-pipeline: %w", err)
			}
			opts = append(opts, creds.WithScripter(ap))
		}
		p, err := creds.New(rdb, name, opts...)
		if err != nil {
			return err
		}
		defer p.Close()
		pools = append(pools, p)
	}
	if err := registerKeys(ctx, pools[0], contendedKeys, 1); err != nil {
		return err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return err
	}
	var claimed atomic.Int64
	var mu sync.Mutex
	var runs []keyRun
	var busy time.Duration
	var first, last time.Time
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for pi, p := range pools {
		for s := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("p%d/%d", pi, s)
				for claimed.Add(1) <= int64(n) {
					l, err := p.Acquire(ctx, owner)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					t0 := time.Now()
					time.Sleep(contendedSleep)
					d := time.Since(t0)
					// As the worker ends a lease: without waiting.
					if err := p.SettleAsync(l, creds.Outcome{}, func(err error) {
						if err != nil {
							firstErr.CompareAndSwap(nil, err)
						}
					}); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					end := time.Now()
					mu.Lock()
					runs = append(runs, keyRun{key: l.CredentialID, granted: l.Acquired, dur: d, end: end})
					busy += d
					if first.IsZero() || l.Acquired.Before(first) {
						first = l.Acquired
					}
					if end.After(last) {
						last = end
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("bench: pool: %w", err)
	}
	wall := last.Sub(first)
	variant, key := "ceiling: the pool alone (in process)", "pool"
	if pipelined {
		variant, key = "the pool alone, auto-pipelined (in process)", "pool_ap"
	}
	use, err := m.done(ctx, variant, n, wall, nil)
	if err != nil {
		return err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values[key+"_utilization"] = busy.Seconds() / (contendedKeys * wall.Seconds())
	smp.values[key+"_steady"] = busy.Seconds() / keySpans(runs).Seconds()
	smp.values[key+"_gap_p50"] = quantile(keyGaps(runs), 0.5)
	return nil
}
