package creds_test

import (
	"context"
	"fmt"
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
