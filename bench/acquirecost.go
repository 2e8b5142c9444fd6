package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Scenario 9: what one acquire costs Redis against the pool's size, in
// process (pkg/creds). Credentials of max_concurrent 1; one goroutine on
// one handle does one operation at a time, so each step carries one op.
//
//   - with room: acquire + release, nothing else held (2 steps);
//   - saturated: every credential held by another handle (leases of 10
//     min), then an acquire that has to queue and its cancel: the acquire
//     runs until the pool's fleet-wide queue holds its waiter (polled
//     with ZCARD, which is not a script), then its context is cancelled
//     and the loop waits until the queue is empty again (2 steps).
//
// Redis µs per operation: INFO commandstats, the server time of EVALSHA
// and EVAL (usec) ÷ operations, in 10 batches, the median batch (the
// machine is shared: a batch in which Redis lost its CPU does not move
// the figure); it is the scripts' own time on Redis's thread, without
// network and parsing. The limit rows
// repeat "with room" on 64 credentials that each carry 1, 3 or 6 limits
// (exact windows, smooth rates and cost windows, none of them binding):
// the cost each limit adds to a start and its settlement.
var acquireCostScenario = &scenario{
	name:    "acquirecost",
	title:   "9. acquire cost vs pool size",
	figures: acquireCostFigures(),
	run:     runAcquireCost,
}

var (
	acquireSizes      = []int{4, 64, 512, 2048, 10000}
	acquireSizesQuick = []int{4, 512, 10000}
	acquireLimitSets  = map[int][]string{
		1: {"rate=1000000/m"},
		3: {"rate=1000000/m", "rate=100000/s,burst=1000", "cost=100000000/m"},
		6: {"rate=1000000/m", "rate=100000/s,burst=1000", "cost=100000000/m",
			"rate=100000000/h", "rate=1000000/10s,burst=5000", "cost=1000000000/h"},
	}
)

const acquireLimitKeys = 64

func acquireCostFigures() []figSpec {
	var fs []figSpec
	for _, n := range acquireSizes {
		fs = append(fs, figSpec{id: fmt.Sprintf("room_%d", n), name: fmt.Sprintf("Redis µs per acquire+release, room, %s keys", thousands(float64(n))), unit: "µs"})
	}
	fs = append(fs, figSpec{id: "room_ratio", name: "… 10,000 keys ÷ 4 keys, room", unit: "fraction", goal: atMost(2),
		note: "per run: the 10,000-key figure ÷ the 4-key figure"})
	for _, n := range acquireSizes {
		fs = append(fs, figSpec{id: fmt.Sprintf("sat_%d", n), name: fmt.Sprintf("Redis µs per acquire that queues + its cancel, all %s keys held", thousands(float64(n))), unit: "µs"})
	}
	fs = append(fs, figSpec{id: "sat_ratio", name: "… 10,000 keys ÷ 4 keys, saturated", unit: "fraction", goal: atMost(2),
		note: "per run: the 10,000-key figure ÷ the 4-key figure"})
	for _, l := range []int{1, 3, 6} {
		fs = append(fs, figSpec{id: fmt.Sprintf("lim_%d", l), name: fmt.Sprintf("Redis µs per acquire+release, %d limits per key (64 keys, room)", l), unit: "µs",
			ceiling: "room_64", note: "the ratio column is the multiple of the same without limits"})
	}
	return fs
}

func runAcquireCost(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	pairs := pick(r.quick, 2000, 300)
	queued := pick(r.quick, 600, 100)
	for _, n := range pick(r.quick, acquireSizes, acquireSizesQuick) {
		row := n == 4 || n == 10000
		if err := acquireCostSize(ctx, e, smp, n, pairs, queued, row); err != nil {
			return nil, fmt.Errorf("%d keys: %w", n, err)
		}
	}
	for _, k := range []string{"room", "sat"} {
		a, b := smp.values[k+"_10000"], smp.values[k+"_4"]
		if b > 0 && a > 0 {
			smp.values[k+"_ratio"] = a / b
		}
	}
	for _, l := range []int{1, 3, 6} {
		var ls []creds.Limit
		for _, spec := range acquireLimitSets[l] {
			lim, err := creds.ParseLimit(spec)
			if err != nil {
				return nil, fmt.Errorf("bench: limit %q: %w", spec, err)
			}
			ls = append(ls, lim)
		}
		us, use, err := acquireRoom(ctx, e, acquireLimitKeys, ls, pairs, fmt.Sprintf("acquire+release, %d limits per key, 64 keys (in process)", l))
		if err != nil {
			return nil, fmt.Errorf("%d limits: %w", l, err)
		}
		smp.values[fmt.Sprintf("lim_%d", l)] = us
		smp.cpu = append(smp.cpu, use)
	}
	return smp, nil
}

// acquireCostSize measures both modes on a pool of n credentials.
func acquireCostSize(ctx context.Context, e *env, smp *sample, n, pairs, queued int, row bool) error {
	us, use, err := acquireRoom(ctx, e, n, nil, pairs, fmt.Sprintf("acquire+release, room, %d keys (in process)", n))
	if err != nil {
		return err
	}
	smp.values[fmt.Sprintf("room_%d", n)] = us
	if row {
		smp.cpu = append(smp.cpu, use)
	}
	us, use, err = acquireSaturated(ctx, e, n, queued, fmt.Sprintf("acquire that queues + cancel, %d keys held (in process)", n))
	if err != nil {
		return err
	}
	smp.values[fmt.Sprintf("sat_%d", n)] = us
	if row {
		smp.cpu = append(smp.cpu, use)
	}
	return nil
}

// registerLimited registers n credentials k0, k1, ... of max_concurrent
// maxConc, each with the given limits.
func registerLimited(ctx context.Context, p *creds.Pool, n, maxConc int, limits []creds.Limit) error {
	defs := make([]creds.Credential, n)
	for i := range defs {
		defs[i] = creds.Credential{ID: fmt.Sprintf("k%d", i), MaxConcurrent: maxConc, Limits: limits}
	}
	return p.Register(ctx, defs)
}

// acquireRoom: `pairs` sequential acquire+release on a fresh pool of n
// credentials; it returns Redis script µs per pair.
func acquireRoom(ctx context.Context, e *env, n int, limits []creds.Limit, pairs int, variant string) (float64, CPUUse, error) {
	defer e.flushAfter(ctx)
	hs, err := e.openHandles(e.uniq("acq"), 1)
	if err != nil {
		return 0, CPUUse{}, err
	}
	defer hs.close()
	p := hs.pools[0]
	if err := registerLimited(ctx, p, n, 1, limits); err != nil {
		return 0, CPUUse{}, err
	}
	// One pair first: the scripts are loaded and the connection is open.
	if err := acquireRelease(ctx, p); err != nil {
		return 0, CPUUse{}, err
	}
	return e.batchedEvalCost(ctx, pairs, variant, func() error { return acquireRelease(ctx, p) })
}

// acquireBatches is how many batches an operation count is cut into:
// the figure is the median batch, so that a moment in which Redis lost
// its CPU to another process (the machine is shared) does not move it.
const acquireBatches = 10

// batchedEvalCost runs op n times in acquireBatches batches and returns
// the median batch's Redis script µs (EVALSHA and EVAL, INFO
// commandstats) per op, and the CPU of the whole phase.
func (e *env) batchedEvalCost(ctx context.Context, n int, variant string, op func() error) (float64, CPUUse, error) {
	m, err := e.meter(ctx)
	if err != nil {
		return 0, CPUUse{}, err
	}
	per := make([]float64, 0, acquireBatches)
	start := time.Now()
	for b := range acquireBatches {
		k := n/acquireBatches + min(1, max(0, n%acquireBatches-b))
		s0, err := e.evalStats(ctx)
		if err != nil {
			return 0, CPUUse{}, err
		}
		for range k {
			if err := op(); err != nil {
				return 0, CPUUse{}, err
			}
		}
		s1, err := e.evalStats(ctx)
		if err != nil {
			return 0, CPUUse{}, err
		}
		if k > 0 {
			per = append(per, float64(s1.usec-s0.usec)/float64(k))
		}
	}
	use, err := m.done(ctx, variant, n, time.Since(start), nil)
	if err != nil {
		return 0, CPUUse{}, err
	}
	return median(per), use, nil
}

func acquireRelease(ctx context.Context, p *creds.Pool) error {
	l, err := p.Acquire(ctx, "bench")
	if err != nil {
		return fmt.Errorf("bench: acquire: %w", err)
	}
	if err := p.Release(ctx, l); err != nil {
		return fmt.Errorf("bench: release: %w", err)
	}
	return nil
}

// acquireSaturated holds every one of n credentials from one handle, then
// makes `ops` acquires on another handle that each queue and are
// cancelled; it returns Redis script µs per acquire + cancel.
func acquireSaturated(ctx context.Context, e *env, n, ops int, variant string) (float64, CPUUse, error) {
	defer e.flushAfter(ctx)
	name := e.uniq("acqsat")
	holder, err := e.openHandles(name, 1, creds.WithLeaseTTL(10*time.Minute))
	if err != nil {
		return 0, CPUUse{}, err
	}
	defer holder.close()
	if err := registerLimited(ctx, holder.pools[0], n, 1, nil); err != nil {
		return 0, CPUUse{}, err
	}
	if err := holdAll(ctx, holder.pools[0], n); err != nil {
		return 0, CPUUse{}, err
	}
	hs, err := e.openHandles(name, 1)
	if err != nil {
		return 0, CPUUse{}, err
	}
	defer hs.close()
	p := hs.pools[0]
	waitq := p.KeyPrefix() + "waitq"
	// One first, not measured: the subscription and the scripts.
	if err := queueAndCancel(ctx, e, p, waitq); err != nil {
		return 0, CPUUse{}, err
	}
	return e.batchedEvalCost(ctx, ops, variant, func() error { return queueAndCancel(ctx, e, p, waitq) })
}

// holdAll acquires n leases on p (64 at a time) and keeps them.
func holdAll(ctx context.Context, p *creds.Pool, n int) error {
	var left atomic.Int64
	left.Store(int64(n))
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if _, err := p.Acquire(ctx, fmt.Sprintf("holder/%d", g)); err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("bench: hold every key: %w", err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}

// queueAndCancel starts an acquire, waits until its waiter is in the
// fleet's queue, cancels it and waits until the queue is empty again.
func queueAndCancel(ctx context.Context, e *env, p *creds.Pool, waitq string) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := p.Acquire(actx, "bench")
		if err == nil {
			_ = p.Release(ctx, l)
			err = fmt.Errorf("bench: an acquire on a full pool got %s", l.CredentialID)
		} else if creds.IsCanceled(err) {
			err = nil
		}
		done <- err
	}()
	if err := waitZCard(ctx, e, waitq, func(n int64) bool { return n >= 1 }); err != nil {
		return fmt.Errorf("%w (waiting for the acquire to queue)", err)
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	if err := waitZCard(ctx, e, waitq, func(n int64) bool { return n == 0 }); err != nil {
		return fmt.Errorf("%w (waiting for the cancel)", err)
	}
	return nil
}

var errZCardTimeout = errors.New("bench: the pool's queue did not change within 5s")

func waitZCard(ctx context.Context, e *env, key string, ok func(int64) bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := e.rdb.ZCard(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("bench: ZCARD %s: %w", key, err)
		}
		if ok(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: ZCARD %s is %d", errZCardTimeout, key, n)
		}
		time.Sleep(20 * time.Microsecond)
	}
}
