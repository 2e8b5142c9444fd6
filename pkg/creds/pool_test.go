package creds_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// 64 goroutines over 4 pool handles (as if 4 processes) hammer 5
// credentials with mixed limits: holders never exceed a credential's limit,
// and every goroutine is served again and again.
func TestHammerNeverExceedsLimits(t *testing.T) {
	e := newEnv(t)
	defs := []creds.Credential{
		{ID: "a", MaxConcurrent: 1},
		{ID: "b", MaxConcurrent: 1},
		{ID: "c", MaxConcurrent: 2},
		{ID: "d", MaxConcurrent: 3, Rate: "400/s"},
		{ID: "e", MaxConcurrent: 5, Rate: "100/200ms"},
	}
	limit := map[string]int64{}
	for _, d := range defs {
		limit[d.ID] = int64(d.MaxConcurrent)
	}
	pools := make([]*creds.Pool, 4)
	for i := range pools {
		pools[i] = e.pool()
	}
	e.register(pools[0], defs...)

	served, violations := hammer(t, pools, 64, limit, time.Now().Add(3*time.Second), func() time.Duration {
		return time.Duration(rand.IntN(500)) * time.Microsecond
	})
	if violations != 0 {
		t.Fatalf("%d times a credential had more holders than its limit", violations)
	}
	var total int64
	for g, n := range served {
		if n == 0 {
			t.Errorf("goroutine %d was never served", g)
		}
		total += n
	}
	if st := stats(t, pools[0]); st.InFlight != 0 {
		t.Fatalf("leases left after the run: %+v", st)
	}
	t.Logf("served %d acquisitions in 3s across 64 goroutines", total)
}

// Fencing tokens never repeat, however many leases one step grants: 2
// handles × 32 goroutines take 20 leases each (a step takes its tokens
// from Redis in blocks), and every lease has a token of its own.
func TestFencingTokensAreUnique(t *testing.T) {
	e := newEnv(t)
	pools := []*creds.Pool{e.pool(), e.pool()}
	e.register(pools[0], creds.Credential{ID: "a", MaxConcurrent: 16}, creds.Credential{ID: "b", MaxConcurrent: 16})
	var mu sync.Mutex
	seen := map[uint64]string{}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			p := pools[g%2]
			for i := range 20 {
				owner := fmt.Sprintf("g%d/%d", g, i)
				l, err := p.Acquire(ctxT(t, 10*time.Second), owner)
				if err != nil {
					t.Errorf("acquire for %s: %v", owner, err)
					return
				}
				mu.Lock()
				if other, dup := seen[l.Token]; dup {
					t.Errorf("token %d granted to %s and to %s", l.Token, other, owner)
				}
				seen[l.Token] = owner
				mu.Unlock()
				if err := p.Release(context.Background(), l); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 64*20 {
		t.Fatalf("%d distinct tokens for %d leases", len(seen), 64*20)
	}
}

func TestReleaseWakesWaiter(t *testing.T) {
	for _, sameHandle := range []bool{true, false} {
		t.Run(fmt.Sprintf("same_handle=%v", sameHandle), func(t *testing.T) {
			e := newEnv(t)
			holderPool, waiterPool := e.holderAndWaiter("only", sameHandle)
			held := mustAcquire(t, holderPool, "holder")

			got := acquireAsync(t, waiterPool, "waiter", 1, 20*time.Second)
			e.waitQueued(waiterPool, 1)
			select {
			case <-got:
				t.Fatal("waiter got a lease while the only credential was held")
			default:
			}
			released := time.Now()
			if err := holderPool.Release(context.Background(), held); err != nil {
				t.Fatal(err)
			}
			l := testutil.Receive(t, got, 5*time.Second, "waiter not woken within 5s of the release")
			if l == nil || l.CredentialID != "only" || l.Token <= held.Token {
				t.Fatalf("waiter got %+v after release of token %d", l, held.Token)
			}
			t.Logf("handoff took %s", time.Since(released))
		})
	}
}

// A grant made to another handle is a full lease (the lease TTL) from the
// moment it is made, handed to the waiter by its message alone: no step
// of the waiter's handle runs before the lease is the waiter's. The
// handle's next step collects the grant's record in Redis and leaves the
// lease alone (it was delivered); the lease lives, on this process's
// clock, at least until RequestedAt plus the TTL, and RequestedAt is no
// later than the grant.
func TestGrantToAnotherHandleIsAFullLease(t *testing.T) {
	const leaseTTL, waiterTTL = 10 * time.Second, 200 * time.Millisecond
	e := newEnv(t)
	ctx := context.Background()
	holder := e.pool(creds.WithLeaseTTL(leaseTTL), creds.WithWaiterTTL(waiterTTL))
	waiter := e.pool(creds.WithLeaseTTL(leaseTTL), creds.WithWaiterTTL(waiterTTL))
	e.register(holder, creds.Credential{ID: "only", MaxConcurrent: 1})
	held := mustAcquire(t, holder, "holder")
	got := acquireAsync(t, waiter, "waiter", 1, 20*time.Second)
	e.waitQueued(waiter, 1)
	released := time.Now()
	if err := holder.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	l := testutil.Receive(t, got, 5*time.Second, "waiter not woken within 5s of the release")
	received := time.Now()
	if l == nil {
		t.Fatal("no lease")
	}
	if life := l.Expires.Sub(l.Acquired); life < leaseTTL {
		t.Fatalf("the granted lease lives %s from its grant, want the lease TTL %s", life, leaseTTL)
	}
	if l.RequestedAt.After(received) || l.RequestedAt.Before(released.Add(-time.Second)) {
		t.Fatalf("RequestedAt %s: want between the release (%s) and the lease's arrival (%s)",
			l.RequestedAt.Format(time.StampMicro), released.Format(time.StampMicro), received.Format(time.StampMicro))
	}
	member := fmt.Sprintf("%d|%s", l.Token, l.Owner)
	leases := "keyfleet:{" + e.name + "}:leases:only"
	grants := "keyfleet:{" + e.name + "}:gr:" + waiter.Instance()
	exp, err := e.rdb.ZScore(ctx, leases, member).Result()
	if err != nil {
		t.Fatalf("the lease is not in Redis: %v", err)
	}
	if got := time.UnixMicro(int64(exp)); !got.Equal(l.Expires) {
		t.Fatalf("Redis has the lease until %s, the holder until %s", got, l.Expires)
	}
	if n, err := e.rdb.HLen(ctx, grants).Result(); err != nil || n != 1 {
		t.Fatalf("%d grant records (%v) before the waiter's handle stepped, want 1: the lease came by its message", n, err)
	}
	// The handle's next step (a try on the key it holds) collects the
	// record and keeps the lease.
	if _, err := waiter.TryAcquire(ctx, "again"); !errors.Is(err, creds.ErrNoneAvailable) {
		t.Fatalf("a try while the only key is held: %v, want ErrNoneAvailable", err)
	}
	if n, err := e.rdb.HLen(ctx, grants).Result(); err != nil || n != 0 {
		t.Fatalf("%d grant records (%v) after the handle's step, want 0", n, err)
	}
	if _, err := e.rdb.ZScore(ctx, leases, member).Result(); err != nil {
		t.Fatalf("the lease left Redis when its grant's record was collected: %v", err)
	}
	if err := waiter.Release(ctx, l); err != nil {
		t.Fatalf("release of the granted lease: %v", err)
	}
}

// A cooldown, an abandoned lease and a full rate window each wake a waiter
// when they end — after the end, and not a polling interval later.
func TestTimedEventsWakeWaiterAtTheirEnd(t *testing.T) {
	const slack = 400 * time.Millisecond // generous for a loaded 2-core machine; exact figures are in the benchmarks

	t.Run("cooldown", func(t *testing.T) {
		e := newEnv(t)
		p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
		until, err := p.MarkCooling(context.Background(), "k", 300*time.Millisecond, "429 from test")
		if err != nil {
			t.Fatal(err)
		}
		l := mustAcquire(t, p, "w")
		if l.Acquired.Before(until) {
			t.Fatalf("acquired at %s, before the cooldown ended at %s", l.Acquired, until)
		}
		if late := l.Acquired.Sub(until); late > slack {
			t.Fatalf("acquired %s after the cooldown ended", late)
		}
	})
	// A waiter that went to sleep until a held lease's expiry must wake
	// when the holder releases with a cooldown (or disables the key): the
	// soonest event is then the cooldown's end, not the lease's expiry.
	for _, mode := range []string{"cooldown", "cooldown in another process"} {
		t.Run("release with "+mode, func(t *testing.T) {
			e := newEnv(t)
			holderPool, waiterPool := e.holderAndWaiter("k", mode == "cooldown")
			held := mustAcquire(t, holderPool, "holder") // expires in 30s
			got := acquireAsync(t, waiterPool, "waiter", 1, 20*time.Second)
			e.waitQueued(waiterPool, 1)
			if err := holderPool.ReleaseCooldown(context.Background(), held, 200*time.Millisecond, "429"); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			l := testutil.Receive(t, got, 15*time.Second, "waiter still asleep 15s after a 200ms cooldown (it waits for the released lease's expiry)")
			if l == nil {
				t.Fatal("no lease")
			}
			if took := time.Since(released); took > 5*time.Second {
				t.Fatalf("waiter got the key %s after a 200ms cooldown", took)
			}
		})
	}
	t.Run("abandoned lease", func(t *testing.T) {
		e := newEnv(t)
		p := e.pool(creds.WithLeaseTTL(300 * time.Millisecond))
		e.register(p, creds.Credential{ID: "k", MaxConcurrent: 1})
		abandoned := mustAcquire(t, p, "crashed")
		l := mustAcquire(t, p, "w")
		if l.Acquired.Before(abandoned.Expires) {
			t.Fatalf("acquired at %s, before the abandoned lease expired at %s", l.Acquired, abandoned.Expires)
		}
		if late := l.Acquired.Sub(abandoned.Expires); late > slack {
			t.Fatalf("acquired %s after the abandoned lease expired", late)
		}
	})
	t.Run("rate window", func(t *testing.T) {
		e := newEnv(t)
		p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10, Rate: "3/400ms"})
		var first *creds.Lease
		for i := range 3 {
			l := mustAcquire(t, p, "w")
			if i == 0 {
				first = l
			}
			if err := p.Release(context.Background(), l); err != nil {
				t.Fatal(err)
			}
		}
		_, err := p.TryAcquire(context.Background(), "w")
		var ue *creds.UnavailableError
		if !errors.As(err, &ue) || !errors.Is(err, creds.ErrNoneAvailable) {
			t.Fatalf("4th start in the window: want UnavailableError, got %v", err)
		}
		if ue.RetryAfter <= 0 || ue.RetryAfter > 400*time.Millisecond {
			t.Fatalf("RetryAfter = %s, want in (0, 400ms]", ue.RetryAfter)
		}
		l := mustAcquire(t, p, "w")
		windowEnd := first.Acquired.Add(400 * time.Millisecond)
		if l.Acquired.Before(windowEnd) {
			t.Fatalf("4th start at %s, before the first left the window at %s", l.Acquired, windowEnd)
		}
		if late := l.Acquired.Sub(windowEnd); late > slack {
			t.Fatalf("4th start %s after the window freed", late)
		}
	})
}

func TestStaleLeaseFailsAndChangesNothing(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	ctx := context.Background()

	old := mustAcquire(t, p, "w1")
	if _, err := p.Renew(ctx, old); err != nil {
		t.Fatalf("renew of a live lease: %v", err)
	}
	if err := p.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	cur := mustAcquire(t, p, "w2")
	if cur.Token <= old.Token {
		t.Fatalf("fencing tokens must increase: %d then %d", old.Token, cur.Token)
	}
	if _, err := p.Renew(ctx, old); !errors.Is(err, creds.ErrLeaseLost) {
		t.Fatalf("renew with a stale lease: want ErrLeaseLost, got %v", err)
	}
	for name, release := range map[string]func() error{
		"release":  func() error { return p.Release(ctx, old) },
		"cooldown": func() error { return p.ReleaseCooldown(ctx, old, time.Minute, "x") },
		"disable":  func() error { return p.ReleaseDisable(ctx, old, "x") },
	} {
		if err := release(); !errors.Is(err, creds.ErrLeaseLost) {
			t.Fatalf("%s with a stale lease: want ErrLeaseLost, got %v", name, err)
		}
	}
	c := credStats(t, p, "k")
	if c.InFlight != 1 || c.Holders[0].Token != cur.Token || c.State != creds.StateBusy {
		t.Fatalf("stale calls changed the pool: %+v", c)
	}
	if _, err := p.Renew(ctx, cur); err != nil {
		t.Fatalf("the current lease must still renew: %v", err)
	}
}

func TestAbandonedLeaseExpires(t *testing.T) {
	e := newEnv(t)
	p := e.pool(creds.WithLeaseTTL(150 * time.Millisecond))
	e.register(p, creds.Credential{ID: "k", MaxConcurrent: 1})
	abandoned := mustAcquire(t, p, "crashed")
	waitFor(t, "the abandoned lease to expire", 10*time.Second, func() bool {
		l, err := p.TryAcquire(context.Background(), "w")
		if err == nil {
			_ = p.Release(context.Background(), l)
			return true
		}
		return false
	})
	if _, err := p.Renew(context.Background(), abandoned); !errors.Is(err, creds.ErrLeaseLost) {
		t.Fatalf("renew after expiry: want ErrLeaseLost, got %v", err)
	}
}

func TestLeastRecentlyUsedSpreadsWork(t *testing.T) {
	e := newEnv(t)
	p := e.registered(
		creds.Credential{ID: "a", MaxConcurrent: 1},
		creds.Credential{ID: "b", MaxConcurrent: 4},
		creds.Credential{ID: "c", MaxConcurrent: 1},
		creds.Credential{ID: "d", MaxConcurrent: 2},
	)
	uses := map[string]int{}
	for range 40 {
		l := mustAcquire(t, p, "w")
		uses[l.CredentialID]++
		if err := p.Release(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if uses[id] != 10 {
			t.Fatalf("sequential acquire/release must rotate evenly: %v", uses)
		}
	}
}

func TestDisabledNeverHandedOut(t *testing.T) {
	e := newEnv(t)
	p := e.pool()
	ctx := context.Background()
	e.register(p, creds.Credential{ID: "good", MaxConcurrent: 2}, creds.Credential{ID: "bad", MaxConcurrent: 2})
	l := mustAcquire(t, p, "w")
	for l.CredentialID != "bad" {
		_ = p.Release(ctx, l)
		l = mustAcquire(t, p, "w")
	}
	if err := p.ReleaseDisable(ctx, l, "401 Unauthorized"); err != nil {
		t.Fatal(err)
	}
	c := credStats(t, p, "bad")
	if c.State != creds.StateDisabled || c.DisabledReason != "401 Unauthorized" || c.DisabledAt.IsZero() {
		t.Fatalf("disabled credential stats: %+v", c)
	}
	for range 20 {
		l := mustAcquire(t, p, "w")
		if l.CredentialID == "bad" {
			t.Fatal("a disabled credential was handed out")
		}
		_ = p.Release(ctx, l)
	}
	// With the only usable credential held, a waiter is served by Enable.
	held1, held2 := mustAcquire(t, p, "h1"), mustAcquire(t, p, "h2")
	got := acquireAsync(t, p, "waiter", 1, 20*time.Second)
	e.waitQueued(p, 1)
	if err := p.Enable(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l == nil || l.CredentialID != "bad" {
		t.Fatalf("after enable the waiter got %+v", l)
	}
	_, _ = held1, held2
}

func TestRuntimeLimitChangeTakesEffect(t *testing.T) {
	e := newEnv(t)
	p, other := e.pool(), e.pool()
	ctx := context.Background()
	e.register(p, creds.Credential{ID: "k", MaxConcurrent: 1})
	mustAcquire(t, p, "h1")
	if _, err := p.TryAcquire(ctx, "h2"); !errors.Is(err, creds.ErrNoneAvailable) {
		t.Fatalf("want ErrNoneAvailable at the limit, got %v", err)
	}
	// A waiter in another process is woken by the change.
	got := make(chan error, 1)
	go func() {
		_, err := other.Acquire(ctxT(t, 20*time.Second), "h2")
		got <- err
	}()
	e.waitQueued(other, 1)
	two := 2
	if err := p.SetLimits(ctx, "k", creds.Limits{MaxConcurrent: &two}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after raising the limit: %v", err)
	}
	// Registering the same definition again (another worker starting)
	// keeps the run-time change; a changed definition replaces it.
	e.register(p, creds.Credential{ID: "k", MaxConcurrent: 1})
	if c := credStats(t, p, "k"); c.MaxConcurrent != 2 {
		t.Fatalf("re-register of an unchanged definition reset the run-time limit: %+v", c)
	}
	e.register(p, creds.Credential{ID: "k", MaxConcurrent: 4, Rate: "10/s"})
	if c := credStats(t, p, "k"); c.MaxConcurrent != 4 || c.Rate != "10/s" {
		t.Fatalf("a changed definition must apply: %+v", c)
	}
	none := ""
	if err := p.SetLimits(ctx, "k", creds.Limits{Rate: &none}); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); c.Rate != "" {
		t.Fatalf("rate not removed: %+v", c)
	}
	if err := p.SetLimits(ctx, "missing", creds.Limits{MaxConcurrent: &two}); !errors.Is(err, creds.ErrNoSuchCredential) {
		t.Fatalf("want ErrNoSuchCredential, got %v", err)
	}
}

func TestCancelReturnsPromptlyAndLeavesNothingLeased(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	held := mustAcquire(t, p, "holder")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Acquire(ctx, "w")
	if !errors.Is(err, creds.ErrCanceled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrCanceled and DeadlineExceeded, got %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("cancelled acquire took %s", took)
	}

	// Many acquires cancelled at random moments while leases change hands:
	// afterwards, only what was returned is held.
	if err := p.Release(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var leases []*creds.Lease
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
				l, err := p.Acquire(ctx, fmt.Sprintf("g%d-%d", i, j))
				cancel()
				if err == nil {
					if j%2 == 0 {
						_ = p.Release(context.Background(), l)
					} else {
						mu.Lock()
						leases = append(leases, l)
						mu.Unlock()
						return // keep it: the credential stays held by us
					}
				} else if !errors.Is(err, creds.ErrCanceled) {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := stats(t, p)
	if st.InFlight != len(leases) {
		t.Fatalf("pool holds %d leases, callers hold %d: a cancelled acquire leaked one", st.InFlight, len(leases))
	}
}

func TestRedisRestartThenReRegister(t *testing.T) {
	e := newEnv(t)
	p := e.pool()
	defs := []creds.Credential{{ID: "k", MaxConcurrent: 1}}
	e.register(p, defs...)
	before := mustAcquire(t, p, "w")

	e.srv.Restart()

	ctx := ctxT(t, 10*time.Second)
	waitFor(t, "redis to answer again", 10*time.Second, func() bool { return e.rdb.Ping(ctx).Err() == nil })
	if _, err := p.Acquire(ctx, "w"); !errors.Is(err, creds.ErrPoolEmpty) {
		t.Fatalf("after state loss: want ErrPoolEmpty, got %v", err)
	}
	if _, err := p.Renew(ctx, before); !errors.Is(err, creds.ErrLeaseLost) {
		t.Fatalf("a lease from before the restart: want ErrLeaseLost, got %v", err)
	}
	e.register(p, defs...)
	after := mustAcquire(t, p, "w")
	if after.Token <= before.Token {
		t.Fatalf("fencing token went backwards across the restart: %d then %d", before.Token, after.Token)
	}
	// A waiter whose subscription was cut by the restart is still woken.
	got := make(chan error, 1)
	go func() { _, err := p.Acquire(ctxT(t, 20*time.Second), "w2"); got <- err }()
	e.waitQueued(p, 1)
	if err := p.Release(ctx, after); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestBadDefinitionsNameTheField(t *testing.T) {
	e := newEnv(t)
	p := e.pool()
	cases := []struct {
		name string
		defs []creds.Credential
		want []string
	}{
		{"empty id", []creds.Credential{{ID: "", MaxConcurrent: 1}}, []string{"credentials[0].id: is empty"}},
		{"space in id", []creds.Credential{{ID: "a b", MaxConcurrent: 1}}, []string{"credentials[0].id:"}},
		{"duplicate", []creds.Credential{{ID: "a", MaxConcurrent: 1}, {ID: "a", MaxConcurrent: 1}}, []string{`credentials[1].id: "a" is used twice (also credentials[0])`}},
		{"zero limit", []creds.Credential{{ID: "a"}}, []string{"credentials[0].max_concurrent: must be at least 1, got 0"}},
		{"negative limit", []creds.Credential{{ID: "a", MaxConcurrent: -2}}, []string{"credentials[0].max_concurrent: must be at least 1, got -2"}},
		{"bad rate", []creds.Credential{{ID: "a", MaxConcurrent: 1, Rate: "60/w"}}, []string{"credentials[0].rate:", `"60/w"`}},
		{"zero rate", []creds.Credential{{ID: "a", MaxConcurrent: 1, Rate: "0/m"}}, []string{"credentials[0].rate:", "at least 1"}},
		{"none", nil, []string{"no credentials given"}},
		{"several", []creds.Credential{{ID: ""}, {ID: "b", MaxConcurrent: 1, Rate: "x"}}, []string{"credentials[0].id", "credentials[0].max_concurrent", "credentials[1].rate"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Register(context.Background(), tc.defs)
			if !errors.Is(err, creds.ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if st := stats(t, p); st.Total != 0 {
		t.Fatalf("invalid definitions were partly registered: %+v", st)
	}
}

func TestStatsReportStates(t *testing.T) {
	e := newEnv(t)
	p := e.pool()
	ctx := context.Background()
	e.register(p,
		creds.Credential{ID: "free", MaxConcurrent: 2, Rate: "5/m"},
		creds.Credential{ID: "held", MaxConcurrent: 1},
		creds.Credential{ID: "cool", MaxConcurrent: 1},
		creds.Credential{ID: "off", MaxConcurrent: 1},
	)
	if err := p.Disable(ctx, "off", "402 insufficient quota"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.MarkCooling(ctx, "cool", time.Minute, "429: Retry-After header 60s"); err != nil {
		t.Fatal(err)
	}
	// LRU order: free, held (the two never used ones sort by id).
	l1 := mustAcquire(t, p, "w/1")
	l2 := mustAcquire(t, p, "w/2")
	if l1.CredentialID != "free" || l2.CredentialID != "held" {
		t.Fatalf("got %s and %s", l1.CredentialID, l2.CredentialID)
	}
	st := stats(t, p)
	if st.Total != 4 || st.Available != 1 || st.Leased != 2 || st.Cooling != 1 || st.Disabled != 1 || st.InFlight != 2 {
		t.Fatalf("totals: %+v", st)
	}
	byID := map[string]creds.CredentialStats{}
	for _, c := range st.Credentials {
		byID[c.ID] = c
	}
	if c := byID["free"]; c.State != creds.StateAvailable || c.Rate != "5/m" || c.StartsInWindow != 1 || c.InFlight != 1 || c.Holders[0].Owner != "w/1" {
		t.Fatalf("free: %+v", c)
	}
	if c := byID["held"]; c.State != creds.StateBusy || c.Holders[0].Token != l2.Token || c.LastUsed.IsZero() {
		t.Fatalf("held: %+v", c)
	}
	if c := byID["cool"]; c.State != creds.StateCooling || c.CoolingReason != "429: Retry-After header 60s" || c.CoolingUntil.Sub(st.At) < 50*time.Second {
		t.Fatalf("cool: %+v", c)
	}
	if c := byID["off"]; c.State != creds.StateDisabled || c.DisabledReason != "402 insufficient quota" {
		t.Fatalf("off: %+v", c)
	}
	// Cooldown on release keeps the longer of two cooldowns.
	if err := p.ReleaseCooldown(ctx, l2, 2*time.Second, "429 short"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.MarkCooling(ctx, "held", time.Millisecond, "shorter"); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "held"); c.State != creds.StateCooling || c.CoolingReason != "429 short" {
		t.Fatalf("a shorter cooldown replaced a longer one: %+v", c)
	}
}

func TestOnlyRestrictsCredentials(t *testing.T) {
	e := newEnv(t)
	all := e.pool()
	e.register(all, creds.Credential{ID: "a", MaxConcurrent: 5}, creds.Credential{ID: "b", MaxConcurrent: 5})
	onlyB := e.pool(creds.WithOnly("b"))
	for range 6 {
		if l := mustAcquire(t, onlyB, "w"); l.CredentialID != "b" {
			t.Fatalf("WithOnly(b) got %s", l.CredentialID)
		}
		if len(stats(t, all).Credentials) != 2 {
			t.Fatal("stats must show the whole pool")
		}
		break
	}
	none := e.pool(creds.WithOnly("zzz"))
	if _, err := none.Acquire(ctxT(t, 5*time.Second), "w"); !errors.Is(err, creds.ErrPoolEmpty) {
		t.Fatalf("want ErrPoolEmpty, got %v", err)
	}
}

func TestCloseEndsWaiters(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	mustAcquire(t, p, "holder")
	got := make(chan error, 1)
	go func() { _, err := p.Acquire(context.Background(), "w"); got <- err }()
	e.waitQueued(p, 1)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, creds.ErrClosed) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRemove(t *testing.T) {
	e := newEnv(t)
	p := e.pool()
	ctx := context.Background()
	e.register(p, creds.Credential{ID: "k", MaxConcurrent: 1})
	l := mustAcquire(t, p, "w")
	if err := p.Remove(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Renew(ctx, l); !errors.Is(err, creds.ErrLeaseLost) {
		t.Fatalf("renew on a removed credential: want ErrLeaseLost, got %v", err)
	}
	if err := p.Remove(ctx, "k"); !errors.Is(err, creds.ErrNoSuchCredential) {
		t.Fatalf("want ErrNoSuchCredential, got %v", err)
	}
	if _, err := p.TryAcquire(ctx, "w"); !errors.Is(err, creds.ErrPoolEmpty) {
		t.Fatalf("want ErrPoolEmpty, got %v", err)
	}
}
