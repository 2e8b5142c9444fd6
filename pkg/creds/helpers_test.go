package creds_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

type env struct {
	t    testing.TB
	srv  *redistest.Server
	rdb  *redis.Client
	name string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := redistest.Start(t)
	return &env{t: t, srv: srv, rdb: srv.Client(t), name: redistest.UniqueName(t)}
}

// pool returns a new handle on the test's pool (one per simulated process).
func (e *env) pool(opts ...creds.Option) *creds.Pool {
	e.t.Helper()
	p, err := creds.New(e.rdb, e.name, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	return p
}

// registered is a new handle on the test's pool (pool) after registering
// defs through it.
func (e *env) registered(defs ...creds.Credential) *creds.Pool {
	e.t.Helper()
	p := e.pool()
	e.register(p, defs...)
	return p
}

func (e *env) register(p *creds.Pool, defs ...creds.Credential) {
	e.t.Helper()
	if err := p.Register(context.Background(), defs); err != nil {
		e.t.Fatal(err)
	}
}

// waitFor is testutil.WaitFor polling every 2 ms: the pool's handoffs
// take a few milliseconds.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	testutil.WaitForEvery(t, what, timeout, 2*time.Millisecond, cond)
}

// waitQueued waits until n acquires wait in the pool's fleet-wide queue.
func (e *env) waitQueued(p *creds.Pool, n int) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("%d waiters to queue", n), 10*time.Second, func() bool {
		st, err := p.Stats(context.Background())
		return err == nil && st.Waiting >= n
	})
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, p *creds.Pool, owner string) *creds.Lease {
	t.Helper()
	l, err := p.Acquire(ctxT(t, 10*time.Second), owner)
	if err != nil {
		t.Fatalf("acquire for %s: %v", owner, err)
	}
	return l
}

func stats(t testing.TB, p *creds.Pool) creds.Stats {
	t.Helper()
	st, err := p.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func credStats(t testing.TB, p *creds.Pool, id string) creds.CredentialStats {
	t.Helper()
	for _, c := range stats(t, p).Credentials {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("credential %q not in stats", id)
	return creds.CredentialStats{}
}

// holderAndWaiter registers one credential of max_concurrent 1 and returns
// the handle that is to hold it and the one that is to wait for it: the
// same handle, or another one as another process would have.
func (e *env) holderAndWaiter(id string, same bool) (holder, waiter *creds.Pool) {
	e.t.Helper()
	holder = e.pool()
	waiter = holder
	if !same {
		waiter = e.pool()
	}
	e.register(holder, creds.Credential{ID: id, MaxConcurrent: 1})
	return holder, waiter
}

// acquireAsync runs p.AcquireCost(owner, cost) in a goroutine, bounded by
// timeout. The lease comes on the channel; after an error, which fails the
// test, nil does.
func acquireAsync(t testing.TB, p *creds.Pool, owner string, cost int64, timeout time.Duration) <-chan *creds.Lease {
	ctx := ctxT(t, timeout)
	got := make(chan *creds.Lease, 1)
	go func() {
		l, err := p.AcquireCost(ctx, owner, cost)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// inGoroutines runs f in n goroutines, goroutine g with pools[g%len(pools)]
// (handles as of several processes), and waits for them all.
func inGoroutines(n int, pools []*creds.Pool, f func(g int, p *creds.Pool)) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() { f(g, pools[g%len(pools)]) })
	}
	wg.Wait()
}

// hammer runs n goroutines (inGoroutines) until stop: each acquires a lease
// as "g<g>", holds it for hold() and releases it, again and again. It
// returns how many leases each goroutine got and how many times a
// credential had more holders than limit[its ID]. An error fails the test
// and ends its goroutine.
func hammer(t testing.TB, pools []*creds.Pool, n int, limit map[string]int64, stop time.Time, hold func() time.Duration) (served []int64, violations int64) {
	holders := map[string]*atomic.Int64{}
	for id := range limit {
		holders[id] = new(atomic.Int64)
	}
	var over atomic.Int64
	counts := make([]atomic.Int64, n)
	inGoroutines(n, pools, func(g int, p *creds.Pool) {
		owner := fmt.Sprintf("g%d", g)
		for time.Now().Before(stop) {
			l, err := p.Acquire(ctxT(t, 20*time.Second), owner)
			if err != nil {
				t.Errorf("%s: %v", owner, err)
				return
			}
			h := holders[l.CredentialID]
			if h.Add(1) > limit[l.CredentialID] {
				over.Add(1)
			}
			time.Sleep(hold())
			h.Add(-1)
			if err := p.Release(context.Background(), l); err != nil {
				t.Errorf("%s release: %v", owner, err)
				return
			}
			counts[g].Add(1)
		}
	})
	served = make([]int64, n)
	for g := range counts {
		served[g] = counts[g].Load()
	}
	return served, over.Load()
}
