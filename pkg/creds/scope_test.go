package creds_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

func limit(t *testing.T, spec string) creds.Limit {
	t.Helper()
	l, err := creds.ParseLimit(spec)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func tryWith(t *testing.T, p *creds.Pool, r creds.Request) *creds.Lease {
	t.Helper()
	l, err := p.TryAcquireWith(context.Background(), r)
	if err != nil && !errors.Is(err, creds.ErrNoneAvailable) {
		t.Fatal(err)
	}
	return l
}

// A scoped limit counts and binds only starts of its scope; unscoped
// limits bind every start.
func TestScopedLimits(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 100, Groups: []string{"llm"}, Limits: []creds.Limit{
		limit(t, "rate=5/h"), limit(t, "rate=2/h,scope=gpt-4o"), limit(t, "cost=100/h,scope=gpt-4o-mini"),
	}})
	for i := range 2 {
		if tryWith(t, p, creds.Request{Owner: "a", Scope: "gpt-4o"}) == nil {
			t.Fatalf("gpt-4o start %d refused", i+1)
		}
	}
	if tryWith(t, p, creds.Request{Owner: "a", Scope: "gpt-4o"}) != nil {
		t.Fatal("a third gpt-4o start got a key past rate=2/h,scope=gpt-4o")
	}
	if tryWith(t, p, creds.Request{Owner: "b", Scope: "gpt-4o-mini", Cost: 60}) == nil {
		t.Fatal("gpt-4o-mini refused: the gpt-4o limit bound it")
	}
	if tryWith(t, p, creds.Request{Owner: "b", Scope: "gpt-4o-mini", Cost: 60}) != nil {
		t.Fatal("gpt-4o-mini went past cost=100/h,scope=gpt-4o-mini")
	}
	if tryWith(t, p, creds.Request{Owner: "c"}) == nil {
		t.Fatal("an unscoped start refused: scoped limits bound it")
	}
	// The unscoped rate=5/h has counted all four starts: one more.
	if tryWith(t, p, creds.Request{Owner: "d", Scope: "other"}) == nil {
		t.Fatal("a fifth start refused under rate=5/h")
	}
	if tryWith(t, p, creds.Request{Owner: "d", Scope: "other"}) != nil {
		t.Fatal("a sixth start got a key past the unscoped rate=5/h")
	}
	_, err := p.TryAcquireWith(context.Background(), creds.Request{Owner: "e", Scope: "gpt-4o-mini", Cost: 101})
	var ce *creds.CostError
	if !errors.As(err, &ce) || ce.Max != 100 {
		t.Fatalf("cost 101 in gpt-4o-mini: want a CostError with max 100, got %v", err)
	}
	if l := tryWith(t, p, creds.Request{Owner: "e", Scope: "gpt-4o", Cost: 101}); l != nil {
		t.Fatal("rate=5/h is used up")
	}
	cs := credStats(t, p, "k")
	if len(cs.Groups) != 1 || cs.Groups[0] != "llm" {
		t.Errorf("groups %v, want [llm]", cs.Groups)
	}
	want := map[string]int64{"": 5, "gpt-4o": 2, "gpt-4o-mini": 60}
	for _, ls := range cs.Limits {
		if ls.Used != want[ls.Scope] {
			t.Errorf("limit %s (scope %q) used %d, want %d", ls.Limit, ls.Scope, ls.Used, want[ls.Scope])
		}
	}
	if cs.Rate != "5/h" {
		t.Errorf("rate %q, want the unscoped 5/h", cs.Rate)
	}
	if _, err := p.TryAcquireWith(context.Background(), creds.Request{Owner: "x", Scope: "a b"}); !errors.Is(err, creds.ErrInvalid) {
		t.Errorf("a scope with a space: %v, want ErrInvalid", err)
	}
}

// A waiter blocked by its scope's limit does not hold back a waiter of
// another scope queued behind it: the freed key goes to the one it fits.
func TestNoHeadOfLineBlockingAcrossScopes(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1, Limits: []creds.Limit{limit(t, "rate=1/h,scope=a")}})
	ctx := context.Background()
	first := tryWith(t, p, creds.Request{Owner: "a0", Scope: "a"}) // a's one start this hour
	if first == nil {
		t.Fatal("the first start of scope a was refused")
	}
	if err := p.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	held := tryWith(t, p, creds.Request{Owner: "b0", Scope: "b"})
	if held == nil {
		t.Fatal("scope b refused")
	}
	aGot := make(chan error, 1)
	go func() {
		_, err := p.AcquireWith(ctxT(t, 20*time.Second), creds.Request{Owner: "a1", Scope: "a"})
		aGot <- err
	}()
	e.waitQueued(p, 1)
	bGot := make(chan *creds.Lease, 1)
	go func() {
		l, err := p.AcquireWith(ctxT(t, 20*time.Second), creds.Request{Owner: "b1", Scope: "b"})
		if err != nil {
			t.Error(err)
		}
		bGot <- l
	}()
	e.waitQueued(p, 2)
	if err := p.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-bGot:
		if l == nil {
			t.Fatal("b1 got no lease")
		}
	case err := <-aGot:
		t.Fatalf("a1 was served past its scope's limit: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("b1 waited behind a1, whose scope is at its limit (head-of-line blocking)")
	}
	select {
	case err := <-aGot:
		t.Fatalf("a1 ended: %v", err)
	default:
	}
}

// A waiter of one key group whose keys are busy for its cost does not
// hold back a waiter of another group that has room.
func TestNoHeadOfLineBlockingAcrossGroups(t *testing.T) {
	e := newEnv(t)
	defs := []creds.Credential{
		{ID: "llm-1", MaxConcurrent: 5, Limits: []creds.Limit{limit(t, "cost=100/h")}},
		{ID: "emb-1", MaxConcurrent: 1},
	}
	e.register(e.pool(), defs...)
	llm := e.pool(creds.WithOnly("llm-1"))
	emb := e.pool(creds.WithOnly("emb-1"))
	ctx := context.Background()
	if l, err := llm.AcquireCost(ctxT(t, 5*time.Second), "llm0", 60); err != nil {
		t.Fatal(err)
	} else if err := llm.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	held, err := emb.Acquire(ctxT(t, 5*time.Second), "emb0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// 60 more does not fit the hour's 100 before an hour: it waits.
		_, _ = llm.AcquireCost(ctxT(t, 20*time.Second), "llm1", 60)
	}()
	e.waitQueued(llm, 1)
	got := make(chan error, 1)
	go func() {
		_, err := emb.Acquire(ctxT(t, 20*time.Second), "emb1")
		got <- err
	}()
	e.waitQueued(emb, 2)
	if err := emb.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the emb waiter waited behind an llm waiter whose cost does not fit (head-of-line blocking)")
	}
}

// Within what waiters share, first come first served holds: a large cost
// waiting for a key's unscoped cost limit is not overtaken on that key by
// a smaller cost of another scope.
func TestSharedLimitKeepsOrder(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 5, Limits: []creds.Limit{limit(t, "cost=100/h")}})
	ctx := context.Background()
	if l := tryWith(t, p, creds.Request{Owner: "x", Cost: 60, Scope: "a"}); l == nil {
		t.Fatal("refused")
	} else if err := p.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = p.AcquireWith(ctxT(t, 20*time.Second), creds.Request{Owner: "big", Cost: 60, Scope: "a"})
	}()
	e.waitQueued(p, 1)
	if l := tryWith(t, p, creds.Request{Owner: "small", Cost: 10, Scope: "b"}); l != nil {
		t.Fatal("a smaller cost of another scope overtook the waiter for the key's shared cost limit")
	}
}

// What a run of a scope learns about the key's room (a Retry-After, rate
// headers) rests only that scope when the key has limits of it: an API
// that limits a key per model says so per model.
func TestRestOfAScope(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 10, Limits: []creds.Limit{
		limit(t, "rate=100/s,scope=a"), limit(t, "rate=100/s,scope=b"),
	}})
	ctx := context.Background()
	la := tryWith(t, p, creds.Request{Owner: "a", Scope: "a"})
	if la == nil {
		t.Fatal("refused")
	}
	if err := p.Settle(ctx, la, creds.Outcome{Rest: time.Hour, RestReason: "429 for a"}); err != nil {
		t.Fatal(err)
	}
	if tryWith(t, p, creds.Request{Owner: "a2", Scope: "a"}) != nil {
		t.Fatal("scope a got the key during its rest")
	}
	lb := tryWith(t, p, creds.Request{Owner: "b", Scope: "b"})
	if lb == nil {
		t.Fatal("scope b was refused: a's rest rested the whole key")
	}
	cs := credStats(t, p, "k")
	if len(cs.ScopeRests) != 1 || cs.ScopeRests[0].Scope != "a" || !strings.Contains(cs.ScopeRests[0].Reason, "429 for a") ||
		!cs.CoolingUntil.IsZero() {
		t.Errorf("stats: scope rests %+v, cooling until %v; want a's rest only", cs.ScopeRests, cs.CoolingUntil)
	}
	// Headers of a b reply saying b has no requests left: b rests too,
	// a start without a scope does not.
	if err := p.Settle(ctx, lb, creds.Outcome{Signals: []creds.Signal{{Name: "x-ratelimit-remaining-requests", Remaining: 0, Reset: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	if tryWith(t, p, creds.Request{Owner: "b2", Scope: "b"}) != nil {
		t.Fatal("scope b got the key after its headers said none left")
	}
	if tryWith(t, p, creds.Request{Owner: "none"}) == nil {
		t.Fatal("an unscoped start was refused: a scope's rest rested the key")
	}
	// A scope no limit names rests the whole key, as before.
	lc := tryWith(t, p, creds.Request{Owner: "c", Scope: "c"})
	if lc == nil {
		t.Fatal("scope c refused")
	}
	if err := p.Settle(ctx, lc, creds.Outcome{Rest: time.Hour, RestReason: "429 for c"}); err != nil {
		t.Fatal(err)
	}
	if tryWith(t, p, creds.Request{Owner: "none2"}) != nil {
		t.Fatal("a rest from a scope the key has no limit of should rest the key")
	}
}

// A waiter limited to a key group finds its keys even when the least
// recently used ready keys all belong to another, idle group.
func TestGroupFindsItsKeysBehindIdleOnes(t *testing.T) {
	for _, n := range []int{20, 200} { // a small group (looked up) and a large one (paged)
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := newEnv(t)
			var defs []creds.Credential
			var second []string
			for i := range n {
				id := fmt.Sprintf("k%03d", i)
				defs = append(defs, creds.Credential{ID: id, MaxConcurrent: 1})
				if i >= n/2 {
					second = append(second, id)
				}
			}
			e.register(e.pool(), defs...)
			p := e.pool(creds.WithOnly(second...))
			for i := range 3 {
				l, err := p.Acquire(ctxT(t, 10*time.Second), fmt.Sprintf("w%d", i))
				if err != nil {
					t.Fatalf("acquire %d through the second group: %v", i, err)
				}
				if !slices.Contains(second, l.CredentialID) {
					t.Fatalf("got %s, not of the group", l.CredentialID)
				}
			}
		})
	}
}

// A credential whose hash an older version wrote (every limit in one
// field, none split by scope) is read the same, and registering it again
// splits it.
func TestLimitsOfAnOlderVersion(t *testing.T) {
	e := newEnv(t)
	def := creds.Credential{ID: "k", MaxConcurrent: 10, Limits: []creds.Limit{limit(t, "rate=1/h,scope=a"), limit(t, "rate=2/h")}}
	p := e.registered(def)
	ctx := context.Background()
	key := "keyfleet:{" + e.name + "}:cred:k"
	strip := func() {
		if err := e.rdb.HDel(ctx, key, "lim0", "lim|a", "limscopes").Err(); err != nil {
			t.Fatal(err)
		}
	}
	strip()
	if tryWith(t, p, creds.Request{Owner: "a1", Scope: "a"}) == nil {
		t.Fatal("refused")
	}
	if tryWith(t, p, creds.Request{Owner: "a2", Scope: "a"}) != nil {
		t.Fatal("an old hash lost its scoped limit")
	}
	e.register(p, def)
	if n, err := e.rdb.HExists(ctx, key, "lim0").Result(); err != nil || !n {
		t.Fatalf("registering again did not split the limits (%v)", err)
	}
	if tryWith(t, p, creds.Request{Owner: "b"}) == nil {
		t.Fatal("the unscoped rate=2/h refused its second start")
	}
	if tryWith(t, p, creds.Request{Owner: "c"}) != nil {
		t.Fatal("rate=2/h let a third start in")
	}
}

// One handle serves acquires of several key sets (the kinds of one
// worker): each gets only keys of its set, a set blocked on its keys does
// not hold back another, and a set Redis lost is recorded again.
func TestKeySetsOnOneHandle(t *testing.T) {
	e := newEnv(t)
	var defs []creds.Credential
	for i := range 20 {
		defs = append(defs, creds.Credential{ID: fmt.Sprintf("k%02d", i), MaxConcurrent: 1})
	}
	p := e.registered(defs...)
	first, err := creds.NewKeySet("k00", "k01")
	if err != nil {
		t.Fatal(err)
	}
	second, err := creds.NewKeySet("k18", "k19", "k19")
	if err != nil {
		t.Fatal(err)
	}
	if got := second.IDs(); !slices.Equal(got, []string{"k18", "k19"}) {
		t.Fatalf("IDs %v", got)
	}
	ctx := context.Background()
	var held []*creds.Lease
	for i := range 2 {
		l, err := p.AcquireWith(ctxT(t, 10*time.Second), creds.Request{Owner: fmt.Sprint("a", i), Keys: first})
		if err != nil || (l.CredentialID != "k00" && l.CredentialID != "k01") {
			t.Fatalf("first set: %v %v", l, err)
		}
		held = append(held, l)
	}
	// The first set's keys are busy: its next acquire waits, and the
	// second set's, behind it, is served from k18/k19 (behind k02..k17,
	// idle keys of neither set, in LRU order).
	go func() { _, _ = p.AcquireWith(ctxT(t, 20*time.Second), creds.Request{Owner: "a-wait", Keys: first}) }()
	e.waitQueued(p, 1)
	l, err := p.AcquireWith(ctxT(t, 10*time.Second), creds.Request{Owner: "b", Keys: second})
	if err != nil || (l.CredentialID != "k18" && l.CredentialID != "k19") {
		t.Fatalf("second set: %v %v", l, err)
	}
	// Redis loses the groups: the next acquire of a set records it again.
	if err := e.rdb.Del(ctx, "keyfleet:{"+e.name+"}:groups", "keyfleet:{"+e.name+"}:maxcost").Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"grp:"} {
		keys, _ := e.rdb.Keys(ctx, "keyfleet:{"+e.name+"}:"+k+"*").Result()
		if len(keys) > 0 {
			e.rdb.Del(ctx, keys...)
		}
	}
	l2, err := p.AcquireWith(ctxT(t, 10*time.Second), creds.Request{Owner: "b2", Keys: second})
	if err != nil || (l2.CredentialID != "k18" && l2.CredentialID != "k19") {
		t.Fatalf("second set after Redis lost the groups: %v %v", l2, err)
	}
	if _, err := creds.NewKeySet(); !errors.Is(err, creds.ErrInvalid) {
		t.Errorf("an empty key set: %v", err)
	}
	for _, l := range append(held, l, l2) {
		_ = p.Release(ctx, l)
	}
}
