package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Scenario 5: handoff, in process (pkg/creds). One credential of
// max_concurrent 1; a holder on one Pool handle releases it while a waiter
// on another handle (its own Redis client, as another process would be)
// is queued in Acquire. The figure is the time from the start of Release
// to the return of the waiter's Acquire: the release script, the wake
// message through Redis pub/sub, and the waiter's acquire script. Before
// each release the waiter gets 3 ms to fail its first attempt and queue
// (not timed).
//
// The ceiling is the same shape without the pool: a script that PUBLISHes
// on one client, the subscriber of another client receiving it, then a
// trivial EVALSHA on that client.
//
// A second variant routes both handles' scripts through go-redis'
// AutoPipeliner (creds.WithScripter), as internal/worker builds its pool.
var handoffScenario = &scenario{
	name:  "handoff",
	title: "5. handoff",
	figures: []figSpec{
		{id: "p50", name: "release → waiting acquire (other handle) p50, in process", unit: "ms", ceiling: "raw_p50"},
		{id: "p99", name: "release → waiting acquire (other handle) p99, in process", unit: "ms", goal: atMost(1), ceiling: "raw_p99"},
		{id: "p50_ap", name: "the same, scripts auto-pipelined as in the worker, p50", unit: "ms", ceiling: "raw_p50"},
		{id: "p99_ap", name: "the same, scripts auto-pipelined as in the worker, p99", unit: "ms", goal: atMost(1), ceiling: "raw_p99"},
		{id: "raw_p50", name: "ceiling: script PUBLISH → subscriber → EVALSHA, p50", unit: "ms"},
		{id: "raw_p99", name: "ceiling: script PUBLISH → subscriber → EVALSHA, p99", unit: "ms"},
	},
	run: runHandoff,
}

const handoffPause = 3 * time.Millisecond

func runHandoff(ctx context.Context, e *env, r runInfo) (*sample, error) {
	n := pick(r.quick, 500, 100)
	smp := newSample()
	for _, v := range []struct {
		pipelined bool
		suffix    string
		variant   string
	}{
		{false, "", "keyfleet: pool handoffs (in process)"},
		{true, "_ap", "keyfleet: pool handoffs, auto-pipelined scripts (in process)"},
	} {
		lat, use, err := handoffs(ctx, e, n, v.pipelined)
		if err != nil {
			return nil, err
		}
		use.Variant = v.variant
		smp.cpu = append(smp.cpu, use)
		smp.values["p50"+v.suffix], smp.values["p99"+v.suffix] = quantile(lat, 0.5), quantile(lat, 0.99)
	}
	if err := rawHandoff(ctx, e, smp, n); err != nil {
		return nil, err
	}
	return smp, nil
}

// handoffs measures n handoffs between two Pool handles, each on its own
// Redis client; pipelined routes their scripts through go-redis'
// AutoPipeliner, as the worker builds its pool. It returns the sorted
// latencies in ms.
func handoffs(ctx context.Context, e *env, n int, pipelined bool) ([]float64, CPUUse, error) {
	defer e.rdb.FlushAll(context.WithoutCancel(ctx))
	addr := e.rdb.Options().Addr
	name := e.uniq("handoff")
	handle := func() (*creds.Pool, func(), error) {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4, Protocol: 2})
		var opts []creds.Option
		if pipelined {
			ap, err := c.AutoPipeline()
			if err != nil {
				c.Close()
				return nil, nil, fmt.Errorf("bench: auto-pipeline: %w", err)
			}
			opts = append(opts, creds.WithScripter(ap))
		}
		p, err := creds.New(c, name, opts...)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return p, func() { p.Close(); c.Close() }, nil
	}
	holder, closeH, err := handle()
	if err != nil {
		return nil, CPUUse{}, err
	}
	defer closeH()
	waiter, closeW, err := handle()
	if err != nil {
		return nil, CPUUse{}, err
	}
	defer closeW()
	if err := holder.Register(ctx, []creds.Credential{{ID: "only", MaxConcurrent: 1}}); err != nil {
		return nil, CPUUse{}, err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return nil, CPUUse{}, err
	}
	lat := make([]float64, 0, n)
	start := time.Now()
	for range n {
		held, err := holder.Acquire(ctx, "holder")
		if err != nil {
			return nil, CPUUse{}, err
		}
		type got struct {
			l   *creds.Lease
			err error
		}
		ch := make(chan got, 1)
		go func() {
			l, err := waiter.Acquire(ctx, "waiter")
			ch <- got{l, err}
		}()
		if err := ctxsleep.Sleep(ctx, handoffPause); err != nil {
			return nil, CPUUse{}, err
		}
		t0 := time.Now()
		if err := holder.Release(ctx, held); err != nil {
			return nil, CPUUse{}, err
		}
		g := <-ch
		d := time.Since(t0)
		if g.err != nil {
			return nil, CPUUse{}, g.err
		}
		lat = append(lat, float64(d)/float64(time.Millisecond))
		if err := waiter.Release(ctx, g.l); err != nil {
			return nil, CPUUse{}, err
		}
	}
	use, err := m.done(ctx, "", n, time.Since(start), nil)
	if err != nil {
		return nil, CPUUse{}, err
	}
	slices.Sort(lat)
	return lat, use, nil
}

// rawHandoff measures the ceiling: PUBLISH from a script, receive, EVALSHA.
func rawHandoff(ctx context.Context, e *env, smp *sample, n int) error {
	addr := e.rdb.Options().Addr
	pc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
	defer pc.Close()
	sc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
	defer sc.Close()
	channel := e.uniq("kfbench-wake-")
	pubScript := redis.NewScript(`redis.call('PUBLISH', ARGV[1], 'x') return 1`)
	trivial := redis.NewScript(`return 1`)
	for _, s := range []*redis.Script{pubScript, trivial} {
		if err := s.Load(ctx, pc).Err(); err != nil {
			return fmt.Errorf("bench: script load: %w", err)
		}
	}
	sub := sc.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return fmt.Errorf("bench: subscribe: %w", err)
	}
	msgs := sub.Channel()
	lat := make([]float64, 0, n)
	for range n {
		if err := ctxsleep.Sleep(ctx, handoffPause); err != nil {
			return err
		}
		t0 := time.Now()
		if err := pubScript.EvalSha(ctx, pc, nil, channel).Err(); err != nil {
			return fmt.Errorf("bench: publish script: %w", err)
		}
		select {
		case <-msgs:
		case <-time.After(5 * time.Second):
			return fmt.Errorf("bench: no message on %s within 5s", channel)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if err := trivial.EvalSha(ctx, sc, nil).Err(); err != nil {
			return fmt.Errorf("bench: evalsha: %w", err)
		}
		lat = append(lat, float64(time.Since(t0))/float64(time.Millisecond))
	}
	slices.Sort(lat)
	smp.values["raw_p50"], smp.values["raw_p99"] = quantile(lat, 0.5), quantile(lat, 0.99)
	return nil
}
