package creds_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The pool through a *redis.ClusterClient on a 3-master Redis Cluster: every
// script runs (no CROSSSLOT or non-local key refusal), waiting is still
// event-driven across nodes, and every key of a pool lives in one slot.
func TestPoolOnRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)

	newPool := func(t *testing.T, name string, opts ...creds.Option) *creds.Pool {
		t.Helper()
		p, err := creds.New(cc, name, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	ctx := func(t *testing.T) context.Context { return ctxT(t, 20*time.Second) }

	t.Run("acquire release stats", func(t *testing.T) {
		name := redistest.UniqueName(t)
		p := newPool(t, name)
		if err := p.Register(ctx(t), []creds.Credential{
			{ID: "a", MaxConcurrent: 1},
			{ID: "b", MaxConcurrent: 2, Rate: "1000/s"},
		}); err != nil {
			t.Fatal(err)
		}
		held := map[string]int{}
		var leases []*creds.Lease
		for i := range 3 {
			l, err := p.Acquire(ctx(t), fmt.Sprintf("o%d", i))
			if err != nil {
				t.Fatal(err)
			}
			held[l.CredentialID]++
			leases = append(leases, l)
		}
		if held["a"] != 1 || held["b"] != 2 {
			t.Fatalf("held %v, want a:1 b:2", held)
		}
		if _, err := p.TryAcquire(ctx(t), "extra"); !errors.Is(err, creds.ErrNoneAvailable) {
			t.Fatalf("TryAcquire on a full pool: %v, want ErrNoneAvailable", err)
		}
		st, err := p.Stats(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if st.Total != 2 || st.Leased != 2 || st.InFlight != 3 || st.Available != 0 {
			t.Fatalf("stats with every slot held: %+v", st)
		}
		if _, err := p.Renew(ctx(t), leases[0]); err != nil {
			t.Fatal(err)
		}
		for _, l := range leases {
			if err := p.Release(ctx(t), l); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.Renew(ctx(t), leases[0]); !errors.Is(err, creds.ErrLeaseLost) {
			t.Fatalf("renew after release: %v, want ErrLeaseLost", err)
		}

		// Cooldown, disable, limits and remove: the admin script.
		l, err := p.Acquire(ctx(t), "cool")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.ReleaseCooldown(ctx(t), l, time.Hour, "429 test"); err != nil {
			t.Fatal(err)
		}
		other := map[string]string{"a": "b", "b": "a"}[l.CredentialID]
		if err := p.Disable(ctx(t), other, "rejected test"); err != nil {
			t.Fatal(err)
		}
		st, err = p.Stats(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if st.Cooling != 1 || st.Disabled != 1 || st.Available != 0 {
			t.Fatalf("stats after a cooldown and a disable: %+v", st)
		}
		one := 1
		if err := p.SetLimits(ctx(t), other, creds.Limits{MaxConcurrent: &one}); err != nil {
			t.Fatal(err)
		}
		if err := p.Enable(ctx(t), other); err != nil {
			t.Fatal(err)
		}
		if l, err := p.TryAcquire(ctx(t), "after enable"); err != nil || l.CredentialID != other {
			t.Fatalf("after enable: %v %v, want a lease on %s", l, err, other)
		} else if err := p.Release(ctx(t), l); err != nil {
			t.Fatal(err)
		}

		assertOneSlot(t, cl, p, []string{"creds", "fence", "cred:a", "cred:b", "lw:b:1000000",
			"ready", "sched", "maxcost"})

		if err := p.Remove(ctx(t), "a"); err != nil {
			t.Fatal(err)
		}
		if err := p.Remove(ctx(t), "b"); err != nil {
			t.Fatal(err)
		}
		if _, err := p.TryAcquire(ctx(t), "empty"); !errors.Is(err, creds.ErrPoolEmpty) {
			t.Fatalf("TryAcquire on an emptied pool: %v, want ErrPoolEmpty", err)
		}
	})

	t.Run("waiting is woken by a release on another handle", func(t *testing.T) {
		name := redistest.UniqueName(t)
		holder, waiter := newPool(t, name), newPool(t, name)
		if err := holder.Register(ctx(t), []creds.Credential{{ID: "only", MaxConcurrent: 1}}); err != nil {
			t.Fatal(err)
		}
		l, err := holder.Acquire(ctx(t), "holder")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l2, err := waiter.Acquire(ctxT(t, 20*time.Second), "waiter")
			if err == nil {
				err = waiter.Release(context.Background(), l2)
			}
			got <- err
		}()
		// The waiter is queued, and its handle listens on its own channel on
		// some node.
		ch := waiter.KeyPrefix() + "g:" + waiter.Instance()
		waitFor(t, "the waiter to queue", 10*time.Second, func() bool {
			st, err := waiter.Stats(ctx(t))
			return err == nil && st.Waiting == 1 && numSub(t, cl, ch) >= 1
		})
		select {
		case err := <-got:
			t.Fatalf("Acquire returned while the only credential was held: %v", err)
		default:
		}
		// The lease TTL is 30s: only the grant message can end the wait soon.
		released := time.Now()
		if err := holder.Release(ctx(t), l); err != nil {
			t.Fatal(err)
		}
		if err := testutil.Receive(t, got, 10*time.Second, "the waiter was not woken by the release"); err != nil {
			t.Fatal(err)
		}
		t.Logf("woken %s after the release", time.Since(released).Round(time.Millisecond))
	})

	t.Run("an expired lease frees the credential at its expiry", func(t *testing.T) {
		name := redistest.UniqueName(t)
		p := newPool(t, name, creds.WithLeaseTTL(300*time.Millisecond))
		if err := p.Register(ctx(t), []creds.Credential{{ID: "only", MaxConcurrent: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Acquire(ctx(t), "crashed"); err != nil {
			t.Fatal(err)
		}
		l, err := p.Acquire(ctx(t), "next")
		if err != nil {
			t.Fatalf("acquire after the holder's lease expired: %v", err)
		}
		if l.Owner != "next" {
			t.Fatalf("lease %+v", l)
		}
	})

	t.Run("concurrent handles never exceed limits", func(t *testing.T) {
		name := redistest.UniqueName(t)
		pools := []*creds.Pool{newPool(t, name), newPool(t, name), newPool(t, name)}
		if err := pools[0].Register(ctx(t), []creds.Credential{
			{ID: "a", MaxConcurrent: 1}, {ID: "b", MaxConcurrent: 2}, {ID: "c", MaxConcurrent: 1, Rate: "200/s"},
		}); err != nil {
			t.Fatal(err)
		}
		limit := map[string]int64{"a": 1, "b": 2, "c": 1}
		perGoroutine, violations := hammer(t, pools, 12, limit, time.Now().Add(1500*time.Millisecond), func() time.Duration {
			return 200 * time.Microsecond
		})
		if violations != 0 {
			t.Fatalf("%d times a credential was held beyond its limit", violations)
		}
		var served int64
		for _, n := range perGoroutine {
			served += n
		}
		if served < 12 {
			t.Fatalf("only %d acquisitions served", served)
		}
		t.Logf("%d acquisitions through the cluster in 1.5s", served)
	})
}

// assertOneSlot checks that every key of the pool, found by scanning every
// node, hashes (CLUSTER KEYSLOT) to the slot of the pool's hash tag and
// lives on one node (redistest's OneSlotKeys); and that the keys named by
// suffix exist.
func assertOneSlot(t *testing.T, cl *redistest.Cluster, p *creds.Pool, suffixes []string) {
	t.Helper()
	c := ctxT(t, 20*time.Second)
	prefix := p.KeyPrefix()
	all, slot := cl.OneSlotKeys(t, c, prefix)
	for _, s := range suffixes {
		found := false
		for _, k := range all {
			found = found || k == prefix+s
		}
		if !found {
			t.Errorf("key %s not found; the pool's keys: %s", prefix+s, strings.Join(all, " "))
		}
	}
	t.Logf("%d keys of pool %s, all in slot %d: %s", len(all), p.Name(), slot, strings.Join(all, " "))
}

// numSub sums PUBSUB NUMSUB of a channel over the cluster's nodes (each
// node counts only its own subscribers).
func numSub(t *testing.T, cl *redistest.Cluster, ch string) int64 {
	t.Helper()
	var n int64
	for _, s := range cl.Nodes() {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1})
		m, err := c.PubSubNumSub(context.Background(), ch).Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		n += m[ch]
	}
	return n
}
