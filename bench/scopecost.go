package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Scenario 9b: what an acquire costs against the number of scopes a key's
// limits name and of key groups the acquires are limited to, in process
// (pkg/creds), through one pool handle as in a worker. A pool of 100
// credentials (max_concurrent 4) in four shapes:
//
//   - 1 scope × 1 group: each key has one scoped limit (rate
//     1000000/m, scope s0); acquires may use every key;
//   - 10 scopes × 1 group: each key has ten scoped limits, s0 … s9;
//   - 1 scope × 10 groups: ten key sets (creds.KeySet, a kind's keys) of
//     10 keys each;
//   - 10 scopes × 10 groups: both.
//
// Starts go round the (scope, group) pairs, so each pair gets as many.
// None of the limits binds: each start finds room (as scenario 9's "with
// room"), the cost is the scripts' own. Each lease's credential is checked
// to be of its key set.
//
// Redis µs per acquire+release: INFO commandstats (EVALSHA and EVAL usec)
// ÷ pairs, the median of 10 batches, at concurrency 1 (one acquire+release
// at a time) and at 16 (16 goroutines share the handles; wall µs per pair
// there is the batch's time ÷ its pairs: 1 ÷ throughput).
var scopeCostScenario = &scenario{
	name:  "scopecost",
	title: "9b. acquire cost vs scopes and key groups",
	figures: []figSpec{
		{id: "seq_1x1", name: "Redis µs per acquire+release, 1 scope × 1 group (100 keys, concurrency 1)", unit: "µs"},
		{id: "seq_10x1", name: "… 10 scopes × 1 group", unit: "µs", ceiling: "seq_1x1"},
		{id: "seq_1x10", name: "… 1 scope × 10 groups", unit: "µs", ceiling: "seq_1x1"},
		{id: "seq_10x10", name: "… 10 scopes × 10 groups", unit: "µs", ceiling: "seq_1x1"},
		{id: "seq_ratio", name: "… 10 scopes × 10 groups ÷ 1 × 1", unit: "fraction", goal: atMost(1.3),
			note: "per run: the 10 × 10 figure ÷ the 1 × 1 figure"},
		{id: "conc_1x1", name: "Redis µs per acquire+release, 1 scope × 1 group, concurrency 16", unit: "µs"},
		{id: "conc_10x1", name: "… 10 scopes × 1 group, concurrency 16", unit: "µs", ceiling: "conc_1x1"},
		{id: "conc_1x10", name: "… 1 scope × 10 groups (10 key sets, one handle), concurrency 16", unit: "µs", ceiling: "conc_1x1"},
		{id: "conc_10x10", name: "… 10 scopes × 10 groups, concurrency 16", unit: "µs", ceiling: "conc_1x1"},
		{id: "conc_ratio", name: "… 10 × 10 ÷ 1 × 1, concurrency 16", unit: "fraction", goal: atMost(1.3),
			note: "per run: the 10 × 10 figure ÷ the 1 × 1 figure"},
		{id: "wall_1x1", name: "wall µs per acquire+release (1 ÷ throughput), 1 × 1, concurrency 16", unit: "µs"},
		{id: "wall_10x1", name: "… 10 × 1, concurrency 16", unit: "µs", ceiling: "wall_1x1"},
		{id: "wall_1x10", name: "… 1 × 10, concurrency 16", unit: "µs", ceiling: "wall_1x1"},
		{id: "wall_10x10", name: "… 10 × 10, concurrency 16", unit: "µs", ceiling: "wall_1x1"},
	},
	run: runScopeCost,
}

const (
	scopeCostKeys  = 100
	scopeCostConc  = 16
	scopeCostStuck = 10 * time.Second
)

// errAcquireStuck: an acquire on a pool with room got nothing within
// scopeCostStuck.
var errAcquireStuck = errors.New("bench: an acquire got no key within 10s")

func runScopeCost(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	pairs := pick(r.quick, 3000, 400)
	for _, c := range []struct{ scopes, groups int }{{1, 1}, {10, 1}, {1, 10}, {10, 10}} {
		id := fmt.Sprintf("%dx%d", c.scopes, c.groups)
		us, use, err := scopeCostCase(ctx, e, c.scopes, c.groups, 1, pairs)
		if errors.Is(err, errAcquireStuck) {
			// The other shapes still say what they cost.
			for _, f := range []string{"seq_", "conc_", "wall_"} {
				smp.missing[f+id] = err.Error()
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s, concurrency 1: %w", id, err)
		}
		smp.values["seq_"+id] = us
		smp.cpu = append(smp.cpu, use)
		us, use, err = scopeCostCase(ctx, e, c.scopes, c.groups, scopeCostConc, pairs)
		if errors.Is(err, errAcquireStuck) {
			smp.missing["conc_"+id], smp.missing["wall_"+id] = err.Error(), err.Error()
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s, concurrency %d: %w", id, scopeCostConc, err)
		}
		smp.values["conc_"+id] = us
		smp.values["wall_"+id] = use.Wall / float64(use.Items) * 1e6
		smp.cpu = append(smp.cpu, use)
	}
	for _, k := range []string{"seq", "conc"} {
		if a, b := smp.values[k+"_10x10"], smp.values[k+"_1x1"]; a > 0 && b > 0 {
			smp.values[k+"_ratio"] = a / b
		} else {
			smp.missing[k+"_ratio"] = cmp.Or(smp.missing[k+"_10x10"], smp.missing[k+"_1x1"])
		}
	}
	return smp, nil
}

// scopeCostCase registers the pool's 100 keys with `scopes` scoped limits
// each, opens one handle per group (restricted to its keys) and measures
// `pairs` acquire+release at concurrency conc; it returns the Redis µs per
// pair (the median batch) and the phase's CPU (Wall: the batches' time).
func scopeCostCase(ctx context.Context, e *env, scopes, groups, conc, pairs int) (float64, CPUUse, error) {
	defer e.flushAfter(ctx)
	name := e.uniq("scopecost")
	var limits []creds.Limit
	for s := range scopes {
		l, err := creds.ParseLimit(fmt.Sprintf("rate=1000000/m,scope=s%d", s))
		if err != nil {
			return 0, CPUUse{}, fmt.Errorf("bench: %w", err)
		}
		limits = append(limits, l)
	}
	defs := make([]creds.Credential, scopeCostKeys)
	members := make([][]string, groups)
	for i := range defs {
		g := i * groups / scopeCostKeys
		id := fmt.Sprintf("k%d", i)
		defs[i] = creds.Credential{ID: id, MaxConcurrent: 4, Limits: limits, Groups: []string{fmt.Sprintf("g%d", g)}}
		members[g] = append(members[g], id)
	}
	// One handle, as in a worker: each group is a key set (a kind's keys),
	// and the acquires of every group go out in the same steps.
	hs, err := e.openHandles(name, 1)
	if err != nil {
		return 0, CPUUse{}, err
	}
	defer hs.close()
	pool := hs.pools[0]
	sets := make([]*creds.KeySet, groups)
	for g := range groups {
		if groups == 1 {
			break // one group: every key, the handle's own
		}
		if sets[g], err = creds.NewKeySet(members[g]...); err != nil {
			return 0, CPUUse{}, fmt.Errorf("bench: %w", err)
		}
	}
	if err := pool.Register(ctx, defs); err != nil {
		return 0, CPUUse{}, fmt.Errorf("bench: register: %w", err)
	}
	// op i takes the (scope, group) pair i names, round the pairs.
	op := func(i int) error {
		c := i % (scopes * groups)
		g, s := c%groups, c/groups
		// Every key has room: an acquire that takes long is stuck.
		actx, cancel := context.WithTimeout(ctx, scopeCostStuck)
		defer cancel()
		l, err := pool.AcquireWith(actx, creds.Request{Owner: fmt.Sprintf("bench/%d", i%scopeCostConc), Scope: fmt.Sprintf("s%d", s), Keys: sets[g]})
		if creds.IsCanceled(err) && ctx.Err() == nil {
			return fmt.Errorf("%w: group g%d (keys %s … %s), scope s%d, with every key idle", errAcquireStuck, g, members[g][0], members[g][len(members[g])-1], s)
		}
		if err != nil {
			return fmt.Errorf("bench: acquire (group g%d, scope s%d): %w", g, s, err)
		}
		if !slices.Contains(members[g], l.CredentialID) {
			return fmt.Errorf("bench: an acquire of key set g%d got %s", g, l.CredentialID)
		}
		if err := pool.Release(ctx, l); err != nil {
			return fmt.Errorf("bench: release: %w", err)
		}
		return nil
	}
	// Every pair once first, not measured: scripts loaded, connections open.
	for i := range scopes * groups {
		if err := op(i); err != nil {
			return 0, CPUUse{}, err
		}
	}
	variant := fmt.Sprintf("acquire+release, %d scopes × %d groups, 100 keys, concurrency %d (in process)", scopes, groups, conc)
	if conc == 1 {
		i := 0
		return e.batchedEvalCost(ctx, pairs, variant, func() error { i++; return op(i) })
	}
	return e.concurrentEvalCost(ctx, pairs, conc, variant, op)
}

// concurrentEvalCost runs op n times, conc at a time, in acquireBatches
// batches, and returns the median batch's Redis script µs per op and the
// CPU of the phase (Wall: the batches' time, Items: n).
func (e *env) concurrentEvalCost(ctx context.Context, n, conc int, variant string, op func(i int) error) (float64, CPUUse, error) {
	m, err := e.meter(ctx)
	if err != nil {
		return 0, CPUUse{}, err
	}
	per := make([]float64, 0, acquireBatches)
	var busy time.Duration
	next := 0
	for b := range acquireBatches {
		k := n/acquireBatches + min(1, max(0, n%acquireBatches-b))
		s0, err := e.evalStats(ctx)
		if err != nil {
			return 0, CPUUse{}, err
		}
		start := time.Now()
		var mu sync.Mutex
		var firstErr error
		todo := make(chan int, k)
		for range k {
			todo <- next
			next++
		}
		close(todo)
		var wg sync.WaitGroup
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range todo {
					if err := op(i); err != nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
						return
					}
				}
			}()
		}
		wg.Wait()
		busy += time.Since(start)
		if firstErr != nil {
			return 0, CPUUse{}, firstErr
		}
		s1, err := e.evalStats(ctx)
		if err != nil {
			return 0, CPUUse{}, err
		}
		if k > 0 {
			per = append(per, float64(s1.usec-s0.usec)/float64(k))
		}
	}
	use, err := m.done(ctx, variant, n, busy, nil)
	if err != nil {
		return 0, CPUUse{}, err
	}
	return median(per), use, nil
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
