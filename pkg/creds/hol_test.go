package creds_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// queueBlocked starts n acquires spread over handles, each of r with the
// owner "<prefix><i>" and the scope scopeOf(i) ("" none), and waits until
// want acquires in all wait in the fleet's queue. They wait until the
// test ends (their handles close then).
func (e *env) queueBlocked(handles []*creds.Pool, n, want int, owner string, scopeOf func(int) string) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	for i := range n {
		p := handles[i%len(handles)]
		go func() {
			l, err := p.AcquireWith(ctx, creds.Request{Owner: fmt.Sprint(owner, i), Scope: scopeOf(i)})
			if err == nil {
				_ = p.Release(context.Background(), l)
			}
		}()
	}
	e.waitQueued(handles[0], want)
}

// A waiter of another group or scope is served at once when a whole
// fleet's slots (10 processes x 8 slots: 40 waiters, at most half of each
// worker's slots per class) wait ahead of it for one class's keys: a
// blocked class is one look, however many waiters it holds. Before, a
// step examined the first 16 + its grants of the fleet's queue only, and
// the waiter behind 36 of one blocked class waited for the next timed
// event (here the lease's end, 30 s) while its key was idle.
func TestNoHeadOfLineBlockingPastTheScanWindow(t *testing.T) {
	const blocked = 40
	t.Run("group", func(t *testing.T) {
		e := newEnv(t)
		e.register(e.pool(), creds.Credential{ID: "a", MaxConcurrent: 1}, creds.Credential{ID: "b", MaxConcurrent: 1})
		var fleet []*creds.Pool
		for range 10 {
			fleet = append(fleet, e.pool(creds.WithOnly("a")))
		}
		mustAcquire(t, fleet[0], "holder") // a is busy for the lease's 30 s
		e.queueBlocked(fleet, blocked, blocked, "a", func(int) string { return "" })
		other := e.pool(creds.WithOnly("b"))
		start := time.Now()
		l, err := other.Acquire(ctxT(t, 5*time.Second), "b")
		if err != nil {
			t.Fatalf("a waiter of group b, whose key is idle, behind %d waiters of group a: %v (head-of-line blocking)", blocked, err)
		}
		if l.CredentialID != "b" {
			t.Fatalf("got %s, want b", l.CredentialID)
		}
		t.Logf("served in %s behind %d blocked waiters of another group", time.Since(start).Round(time.Millisecond), blocked)
	})
	t.Run("scope", func(t *testing.T) {
		e := newEnv(t)
		p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1000, Limits: []creds.Limit{limit(t, "rate=1/h,scope=a")}})
		if l := tryWith(t, p, creds.Request{Owner: "a", Scope: "a"}); l == nil {
			t.Fatal("the first start of scope a was refused")
		} else if err := p.Release(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		fleet := []*creds.Pool{p}
		for range 9 {
			fleet = append(fleet, e.pool())
		}
		e.queueBlocked(fleet, blocked, blocked, "a", func(int) string { return "a" })
		start := time.Now()
		l, err := fleet[3].AcquireWith(ctxT(t, 5*time.Second), creds.Request{Owner: "b", Scope: "b"})
		if err != nil {
			t.Fatalf("a waiter of scope b, with room on k, behind %d waiters of scope a at its limit: %v (head-of-line blocking)", blocked, err)
		}
		_ = fleet[3].Release(context.Background(), l)
		t.Logf("served in %s behind %d blocked waiters of another scope", time.Since(start).Round(time.Millisecond), blocked)
	})
}

// The number of classes a step examines is bounded, and that bound does
// not starve a class either: with 60 classes blocked ahead (60 scopes,
// each at its limit), a waiter of a scope with room is served within a
// moment, by the steps that rotate through the classes past the bound.
func TestManyBlockedClassesDoNotStarveAnother(t *testing.T) {
	const scopes = 60
	e := newEnv(t)
	var lims []creds.Limit
	for i := range scopes {
		lims = append(lims, limit(t, fmt.Sprintf("rate=1/h,scope=s%02d", i)))
	}
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1000, Limits: lims})
	ctx := context.Background()
	for i := range scopes {
		l := tryWith(t, p, creds.Request{Owner: "first", Scope: fmt.Sprintf("s%02d", i)})
		if l == nil {
			t.Fatalf("the first start of scope s%02d was refused", i)
		}
		if err := p.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	fleet := []*creds.Pool{p, e.pool(), e.pool(), e.pool()}
	e.queueBlocked(fleet, scopes, scopes, "w", func(i int) string { return fmt.Sprintf("s%02d", i) })
	start := time.Now()
	l, err := fleet[1].AcquireWith(ctxT(t, 5*time.Second), creds.Request{Owner: "free", Scope: "free"})
	if err != nil {
		t.Fatalf("a waiter of a scope with room behind %d blocked classes: %v", scopes, err)
	}
	_ = fleet[1].Release(ctx, l)
	t.Logf("served in %s behind %d blocked classes", time.Since(start).Round(time.Millisecond), scopes)
	if st := stats(t, p); st.Waiting != scopes {
		t.Errorf("%d waiting, want the %d blocked ones", st.Waiting, scopes)
	}
}

// A pool written by the previous version holds its waiters in waitq
// alone, one entry per waiter: they keep their place in the order (first
// come, first served with the waiters of this version), and a dead
// process's are dropped.
func TestWaitersOfAnOlderVersion(t *testing.T) {
	e := newEnv(t)
	// A grant is a lease of the granting handle's TTL: short, so that the
	// old waiter's, never claimed, lapses soon.
	p := e.pool(creds.WithWaiterTTL(200*time.Millisecond), creds.WithLeaseTTL(time.Second))
	e.register(p, creds.Credential{ID: "k", MaxConcurrent: 1})
	ctx := context.Background()
	pfx := p.KeyPrefix()
	// oldWaiter queues a waiter of cost 1, any key, as the previous
	// version's step did, for instance inst alive until aliveUntil.
	oldWaiter := func(inst string, aliveUntil time.Time) string {
		m := inst + ".1|1||old-owner"
		seq, err := e.rdb.Incr(ctx, pfx+"wseq").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.ZAdd(ctx, pfx+"procs", redis.Z{Score: float64(aliveUntil.UnixMicro()), Member: inst}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.ZAdd(ctx, pfx+"waitq", redis.Z{Score: float64(3<<40 + seq), Member: m}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.SAdd(ctx, pfx+"pw:"+inst, m).Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}

	// An old process's waiter ahead of one of this version: it is served
	// first (its grant waits in gr:<inst>, unclaimed), then, when that
	// grant lapses unclaimed, the new one.
	held := mustAcquire(t, p, "holder")
	oldWaiter("0ld0000000000001", time.Now().Add(time.Hour))
	got := acquireAsync(t, p, "new", 1, 20*time.Second)
	e.waitQueued(p, 2)
	if err := p.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old version's waiter to be granted the key", 5*time.Second, func() bool {
		ok, err := e.rdb.HExists(ctx, pfx+"gr:0ld0000000000001", "0ld0000000000001.1").Result()
		return err == nil && ok
	})
	select {
	case l := <-got:
		t.Fatalf("the new waiter got %v ahead of the older waiter", l)
	default:
	}
	var l *creds.Lease
	select {
	case l = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the new waiter was not served after the old waiter's grant lapsed")
	}

	// A dead old process's waiter ahead: dropped, the new waiter served.
	m := oldWaiter("0ld0000000000002", time.Now().Add(-time.Second))
	got = acquireAsync(t, p, "new2", 1, 20*time.Second)
	e.waitQueued(p, 2)
	if err := p.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	select {
	case l = <-got:
		_ = p.Release(ctx, l)
	case <-time.After(10 * time.Second):
		t.Fatal("the new waiter was not served past a dead process's old waiter")
	}
	if n, err := e.rdb.ZScore(ctx, pfx+"waitq", m).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("the dead process's old waiter is still queued (%v %v)", n, err)
	}
	if st := stats(t, p); st.Waiting != 0 {
		t.Errorf("%d waiting, want 0", st.Waiting)
	}
}

// An item whose cost fits only a disabled key gets ErrNeverFits naming
// the disabled key, whether it asks after the key was disabled or waited
// when it was; meanwhile it never holds back its class: items that a
// usable key takes are served. Disabled by an operator, by the API, by a
// streak of refusals; enabled again by an operator or a probe.
func TestCostThatFitsOnlyDisabledKeys(t *testing.T) {
	e := newEnv(t)
	p := e.registered(
		creds.Credential{ID: "big", MaxConcurrent: 1, Limits: []creds.Limit{limit(t, "cost=100000/m")}},
		creds.Credential{ID: "small", MaxConcurrent: 5, Limits: []creds.Limit{limit(t, "cost=1000/m")}},
	)
	ctx := context.Background()
	neverFits := func(t *testing.T, err error, how string) {
		t.Helper()
		var ce *creds.CostError
		if !errors.As(err, &ce) || !errors.Is(err, creds.ErrNeverFits) || ce.Max != 1000 || ce.Disabled != "big" ||
			!strings.Contains(err.Error(), "disabled") || !strings.Contains(err.Error(), "big") {
			t.Fatalf("cost 5000 %s: %v, want a CostError with max 1000 naming the disabled key big", how, err)
		}
	}

	// big is busy: a cost of 5000 (only big takes it) waits, and 20 items
	// of cost 1 wait behind it (first come, first served in a class).
	bigLease, err := p.AcquireCost(ctxT(t, 5*time.Second), "big-holder", 5000)
	if err != nil || bigLease.CredentialID != "big" {
		t.Fatalf("cost 5000: %v %v, want a lease on big", bigLease, err)
	}
	waiting := make(chan error, 1)
	go func() {
		l, err := p.AcquireCost(ctxT(t, 20*time.Second), "w5000", 5000)
		if err == nil {
			_ = p.Release(ctx, l)
		}
		waiting <- err
	}()
	e.waitQueued(p, 1)
	const small = 20
	done := make(chan error, small)
	for i := range small {
		go func() {
			l, err := p.AcquireCost(ctxT(t, 20*time.Second), fmt.Sprint("s", i), 1)
			if err == nil {
				err = p.Release(ctx, l)
			}
			done <- err
		}()
	}
	e.waitQueued(p, 1+small)

	// The operator disables big: the waiter learns its cost never fits, and
	// the items behind it are served by small.
	if err := p.Disable(ctx, "big", "maintenance"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		neverFits(t, err, "waiting when big was disabled")
	case <-time.After(5 * time.Second):
		t.Fatal("the cost-5000 waiter still waits for the disabled key big")
	}
	deadline := time.After(5 * time.Second)
	for i := range small {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatalf("%d of %d cost-1 items done in 5 s with small idle: they wait behind a cost only the disabled key takes", i, small)
		}
	}
	_ = p.Release(ctx, bigLease)

	// Asked after the disable: at once.
	_, err = p.AcquireCost(ctxT(t, 3*time.Second), "after", 5000)
	neverFits(t, err, "after big was disabled")
	if _, err := p.AcquireCost(ctxT(t, 3*time.Second), "huge", 200000); !errors.Is(err, creds.ErrNeverFits) ||
		strings.Contains(err.Error(), "disabled") {
		t.Fatalf("cost 200000 (no key, disabled or not, takes it): %v, want ErrNeverFits naming no disabled key", err)
	}
	fits := func(how string) {
		t.Helper()
		l, err := p.AcquireCost(ctxT(t, 5*time.Second), "fits", 5000)
		if err != nil {
			t.Fatalf("cost 5000 %s: %v", how, err)
		}
		if err := p.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Enable(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	fits("after big was enabled")

	// Disabled by the API, then enabled by a probe.
	disableByAPI(t, p, "big", "401 invalid key")
	_, err = p.AcquireCost(ctxT(t, 3*time.Second), "api", 5000)
	neverFits(t, err, "after the API disabled big")
	if ok, err := p.EnableAfterProbe(ctx, "big", "probe answered 200"); err != nil || !ok {
		t.Fatalf("EnableAfterProbe: %v %v", ok, err)
	}
	fits("after a probe enabled big")

	// Disabled by a streak of refusals.
	for _, item := range []string{"b/1", "b/2", "b/3"} {
		refuseOn(t, p, "big", item, "401 Unauthorized")
	}
	if c := credStats(t, p, "big"); c.State != creds.StateDisabled {
		t.Fatalf("big after 3 refused items: %s", c.State)
	}
	_, err = p.AcquireCost(ctxT(t, 3*time.Second), "streak", 5000)
	neverFits(t, err, "after a streak of refusals disabled big")

	// Every key disabled: nothing is usable, so nothing is held back: it
	// waits for a key to come back, neither ErrNeverFits nor ErrPoolEmpty.
	if err := p.Disable(ctx, "small", "maintenance"); err != nil {
		t.Fatal(err)
	}
	for _, cost := range []int64{1, 5000} {
		if _, err := p.AcquireCost(ctxT(t, 300*time.Millisecond), "all-off", cost); !errors.Is(err, creds.ErrCanceled) {
			t.Fatalf("cost %d with every key disabled: %v, want it to wait", cost, err)
		}
	}
	if err := p.Enable(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	fits("with big enabled again")
}
