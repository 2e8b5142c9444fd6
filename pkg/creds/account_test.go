package creds_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// defined is a new handle on the test's pool after Define(d) through it.
func (e *env) defined(d creds.Definitions) *creds.Pool {
	e.t.Helper()
	p := e.pool()
	if err := p.Define(context.Background(), d); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func keySet(t testing.TB, ids ...string) *creds.KeySet {
	t.Helper()
	k, err := creds.NewKeySet(ids...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// tryN takes leases for r at once (TryAcquireWith) until none is left, at
// most max; it returns them.
func tryN(t testing.TB, p *creds.Pool, r creds.Request, max int) []*creds.Lease {
	t.Helper()
	var out []*creds.Lease
	for range max {
		l, err := p.TryAcquireWith(ctxT(t, 10*time.Second), r)
		if errors.Is(err, creds.ErrNoneAvailable) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

func releaseAll(t testing.TB, p *creds.Pool, ls []*creds.Lease) {
	t.Helper()
	for _, l := range ls {
		if err := p.Release(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
}

func acctStats(t testing.TB, p *creds.Pool, id string) creds.AccountStats {
	t.Helper()
	for _, a := range stats(t, p).Accounts {
		if a.ID == id {
			return a
		}
	}
	t.Fatalf("account %q not in stats", id)
	return creds.AccountStats{}
}

// Keys of one account share its limits: together they start no more than
// it allows, and one key alone may use all of it.
func TestAccountLimitBindsItsKeysTogether(t *testing.T) {
	e := newEnv(t)
	p := e.defined(creds.Definitions{
		Accounts: []creds.Account{{ID: "org", Limits: []creds.Limit{mustLimit(t, "rate=5/m")}}},
		Credentials: []creds.Credential{
			{ID: "k1", MaxConcurrent: 10, Account: "org"},
			{ID: "k2", MaxConcurrent: 10, Account: "org"},
			{ID: "k3", MaxConcurrent: 10, Account: "org"},
			{ID: "solo", MaxConcurrent: 10},
		},
	})
	org := keySet(t, "k1", "k2", "k3")
	got := tryN(t, p, creds.Request{Owner: "w", Keys: org}, 20)
	if len(got) != 5 {
		t.Fatalf("the account's keys took %d starts, its limit is 5 a minute", len(got))
	}
	used := map[string]int{}
	for _, l := range got {
		used[l.CredentialID]++
	}
	if len(used) < 2 {
		t.Fatalf("starts went to %v: least recently used spreads them", used)
	}
	releaseAll(t, p, got)
	// A key outside the account is not bound by it.
	if solo := tryN(t, p, creds.Request{Owner: "w", Keys: keySet(t, "solo")}, 3); len(solo) != 3 {
		t.Fatalf("a key of no account got %d starts", len(solo))
	}
	a := acctStats(t, p, "org")
	if len(a.Limits) != 1 || a.Limits[0].Used != 5 || a.Limits[0].Of != 5 || a.State != creds.StateBusy ||
		strings.Join(a.Keys, ",") != "k1,k2,k3" || a.Starts != 5 {
		t.Fatalf("account stats: %+v", a)
	}
	if c := credStats(t, p, "k1"); c.Account != "org" || c.State != creds.StateBusy || c.NextStart.IsZero() {
		t.Fatalf("a key of a full account: %+v", c)
	}

	// One key alone gets the whole of its account's rate.
	e2 := newEnv(t)
	p2 := e2.defined(creds.Definitions{
		Accounts:    []creds.Account{{ID: "org", Limits: []creds.Limit{mustLimit(t, "rate=6/m")}}},
		Credentials: []creds.Credential{{ID: "a", MaxConcurrent: 10, Account: "org"}, {ID: "b", MaxConcurrent: 10, Account: "org"}},
	})
	if got := tryN(t, p2, creds.Request{Owner: "w", Keys: keySet(t, "a")}, 20); len(got) != 6 {
		t.Fatalf("one key of the account got %d of its 6 starts", len(got))
	}
}

// A start needs room in every enclosing account too, and takes its share
// of all of them.
func TestNestedAccounts(t *testing.T) {
	e := newEnv(t)
	p := e.defined(creds.Definitions{
		Accounts: []creds.Account{
			{ID: "org", Limits: []creds.Limit{mustLimit(t, "rate=4/m")}},
			{ID: "proj", Account: "org", Limits: []creds.Limit{mustLimit(t, "rate=2/m")}},
		},
		Credentials: []creds.Credential{
			{ID: "kp", MaxConcurrent: 10, Account: "proj"},
			{ID: "ko", MaxConcurrent: 10, Account: "org"},
		},
	})
	if got := tryN(t, p, creds.Request{Owner: "w", Keys: keySet(t, "kp")}, 10); len(got) != 2 {
		t.Fatalf("the project's key got %d starts, the project allows 2", len(got))
	}
	if got := tryN(t, p, creds.Request{Owner: "w", Keys: keySet(t, "ko")}, 10); len(got) != 2 {
		t.Fatalf("the organization's own key got %d starts, the organization has 2 left", len(got))
	}
	if a := acctStats(t, p, "org"); a.Limits[0].Used != 4 || a.Account != "" {
		t.Fatalf("org: %+v", a)
	}
	if a := acctStats(t, p, "proj"); a.Limits[0].Used != 2 || a.Account != "org" {
		t.Fatalf("proj: %+v", a)
	}
}

// A waiter blocked on its account's limit is served when the window
// frees, without anybody releasing anything (the pool's timer).
func TestWaiterOnAnAccountIsServedWhenItsWindowFrees(t *testing.T) {
	e := newEnv(t)
	p := e.defined(creds.Definitions{
		Accounts: []creds.Account{{ID: "org", Limits: []creds.Limit{mustLimit(t, "rate=2/1s")}}},
		Credentials: []creds.Credential{
			{ID: "k1", MaxConcurrent: 10, Account: "org"},
			{ID: "k2", MaxConcurrent: 10, Account: "org"},
		},
	})
	first := tryN(t, p, creds.Request{Owner: "w"}, 5)
	if len(first) != 2 {
		t.Fatalf("%d starts, want 2", len(first))
	}
	got := acquireAsync(t, e.pool(), "late", 1, 20*time.Second)
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if gap := l.Acquired.Sub(first[0].Acquired); gap < time.Second-5*time.Millisecond {
		t.Fatalf("the third start came %s after the first: the account allows 2 a second", gap)
	}
}

// What a reply says rests the key's whole account, fleet-wide: its other
// keys rest too, keys of other accounts do not.
func TestAReplyRestsTheWholeAccount(t *testing.T) {
	e := newEnv(t)
	p := e.defined(creds.Definitions{
		Accounts: []creds.Account{{ID: "org"}, {ID: "other"}},
		Credentials: []creds.Credential{
			{ID: "k1", MaxConcurrent: 5, Account: "org"},
			{ID: "k2", MaxConcurrent: 5, Account: "org"},
			{ID: "k3", MaxConcurrent: 5, Account: "other"},
		},
	})
	ctx := context.Background()
	l, err := p.TryAcquireWith(ctx, creds.Request{Owner: "w", Keys: keySet(t, "k1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(ctx, l, creds.Outcome{RateLimited: true, Rest: time.Minute, RestReason: "429 from the API",
		RestCause: "retry-after header"}); err != nil {
		t.Fatal(err)
	}
	if got := tryN(t, p, creds.Request{Owner: "w", Keys: keySet(t, "k1", "k2")}, 1); len(got) != 0 {
		t.Fatalf("a key of the resting account started: %+v", got[0])
	}
	if got := tryN(t, p, creds.Request{Owner: "w", Keys: keySet(t, "k3")}, 1); len(got) != 1 {
		t.Fatal("a key of another account could not start")
	}
	a := acctStats(t, p, "org")
	if a.State != creds.StateCooling || a.RestCause != "retry-after header" || a.RateLimited != 1 {
		t.Fatalf("org: %+v", a)
	}
	if c := credStats(t, p, "k2"); c.State != creds.StateBusy || c.NextStart.Before(a.CoolingUntil) {
		t.Fatalf("k2 of the resting account: %+v", c)
	}

	// Headers: the API's room is the account's, and its runs in flight are
	// those of all its keys.
	e2 := newEnv(t)
	p2 := e2.defined(creds.Definitions{
		Accounts: []creds.Account{{ID: "org"}},
		Credentials: []creds.Credential{
			{ID: "k1", MaxConcurrent: 5, Account: "org"},
			{ID: "k2", MaxConcurrent: 5, Account: "org"},
		},
	})
	held := tryN(t, p2, creds.Request{Owner: "w", Keys: keySet(t, "k2")}, 3)
	l, err = p2.TryAcquireWith(ctx, creds.Request{Owner: "w", Keys: keySet(t, "k1")})
	if err != nil || len(held) != 3 {
		t.Fatal(err, len(held))
	}
	// 3 requests left: enough for k1's own next start, not for the 3 runs
	// of k2 in flight as well.
	if err := p2.Settle(ctx, l, creds.Outcome{Signals: []creds.Signal{{Name: "x-ratelimit-remaining-requests",
		Remaining: 3, Reset: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	if a := acctStats(t, p2, "org"); a.State != creds.StateCooling || a.InFlight != 3 ||
		!strings.Contains(a.CoolingReason, "3 in flight") {
		t.Fatalf("org after its key read 3 requests left with 3 in flight: %+v", a)
	}
	releaseAll(t, p2, held)
}

// A bare 429 on one key paces its whole account.
func TestBare429PacesTheAccount(t *testing.T) {
	e := newEnv(t)
	p := e.defined(creds.Definitions{
		Accounts: []creds.Account{{ID: "org"}},
		Credentials: []creds.Credential{
			{ID: "k1", MaxConcurrent: 5, Account: "org"},
			{ID: "k2", MaxConcurrent: 5, Account: "org"},
		},
	})
	ctx := context.Background()
	l, err := p.TryAcquireWith(ctx, creds.Request{Owner: "w", Keys: keySet(t, "k1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(ctx, l, creds.Outcome{RateLimited: true, MaxRest: time.Minute, RestReason: "429"}); err != nil {
		t.Fatal(err)
	}
	// The rest a first bare 429 gives is about the time since the grant
	// (a few ms): it may be over by the time the stats are read, the pace
	// is not.
	a := acctStats(t, p, "org")
	if a.Pace <= 0 || a.RateLimited != 1 || (a.State == creds.StateCooling && !strings.Contains(a.RestCause, "bare 429")) {
		t.Fatalf("org after a bare 429 on k1: %+v", a)
	}
	if c := credStats(t, p, "k2"); c.Pace != 0 || c.RateLimited != 0 {
		t.Fatalf("k2 of the paced account: %+v, want the account paced, not the key", c)
	}
}

// An account's limits change for the running fleet, and a cost above an
// account's cost limit never fits, naming the account.
func TestAccountLimitsLiveAndNeverFits(t *testing.T) {
	e := newEnv(t)
	p := e.defined(creds.Definitions{
		Accounts:    []creds.Account{{ID: "org", Limits: []creds.Limit{mustLimit(t, "rate=1/m"), mustLimit(t, "cost=100/m")}}},
		Credentials: []creds.Credential{{ID: "k1", MaxConcurrent: 10, Account: "org"}},
	})
	ctx := context.Background()
	if got := tryN(t, p, creds.Request{Owner: "w"}, 5); len(got) != 1 {
		t.Fatalf("%d starts, want 1", len(got))
	}
	if err := p.SetAccountLimits(ctx, "org", []creds.Limit{mustLimit(t, "rate=3/m"), mustLimit(t, "cost=100/m")}); err != nil {
		t.Fatal(err)
	}
	if got := tryN(t, p, creds.Request{Owner: "w"}, 5); len(got) != 2 {
		t.Fatalf("%d more starts after the limit went to 3, want 2", len(got))
	}
	_, err := p.AcquireWith(ctxT(t, 10*time.Second), creds.Request{Owner: "w", Cost: 500})
	var ce *creds.CostError
	if !errors.As(err, &ce) || !strings.Contains(ce.Limits, "account org cost=100/m") {
		t.Fatalf("cost 500 against an account of 100: %v", err)
	}
	if err := p.SetAccountLimits(ctx, "nope", nil); !errors.Is(err, creds.ErrNoSuchAccount) {
		t.Fatalf("an unknown account: %v", err)
	}
}

// Define refuses an unknown or cyclic account, and an ID both an account
// and a credential have.
func TestDefineRefusesBadAccounts(t *testing.T) {
	e := newEnv(t)
	p := e.pool()
	err := p.Define(context.Background(), creds.Definitions{
		Accounts: []creds.Account{
			{ID: "a", Account: "b"}, {ID: "b", Account: "a"},
			{ID: "c", Account: "nope"},
			{ID: "k1"},
		},
		Credentials: []creds.Credential{{ID: "k1", MaxConcurrent: 1}, {ID: "k2", MaxConcurrent: 1, Account: "zz"}},
		Reserve:     2,
	})
	for _, want := range []string{
		"accounts[0].account: accounts enclose each other in a cycle: a -> b -> a",
		`accounts[2].account: "nope" is not an account of the pool`,
		`accounts[3].id: "k1" is also the ID of credentials[0]`,
		`credentials[1].account: "zz" is not an account of the pool`,
		"reserve must be 0 to 0.9, got 2",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	if !errors.Is(err, creds.ErrInvalid) {
		t.Fatalf("%v is not ErrInvalid", err)
	}
}

// With a reserve, starts of priority 1..5 leave that share of every limit
// to interactive ones, which go ahead of them in the queue.
func TestReserveAndInteractiveStarts(t *testing.T) {
	e := newEnv(t)
	p := e.defined(creds.Definitions{
		Accounts:    []creds.Account{{ID: "org", Limits: []creds.Limit{mustLimit(t, "rate=10/m")}}},
		Credentials: []creds.Credential{{ID: "k1", MaxConcurrent: 100, Account: "org"}, {ID: "k2", MaxConcurrent: 100, Limits: []creds.Limit{mustLimit(t, "rate=10/m")}}},
		Reserve:     0.3,
	})
	for _, ks := range []*creds.KeySet{keySet(t, "k1"), keySet(t, "k2")} {
		batch := tryN(t, p, creds.Request{Owner: "batch", Keys: ks}, 20)
		if len(batch) != 7 {
			t.Fatalf("%v: batches took %d of 10 with a reserve of 0.3", ks.IDs(), len(batch))
		}
		if gw := tryN(t, p, creds.Request{Owner: "gw", Keys: ks, Interactive: true}, 20); len(gw) != 3 {
			t.Fatalf("%v: interactive starts took %d, want the 3 left", ks.IDs(), len(gw))
		}
	}

	// In the queue, an interactive waiter goes before batch waiters that
	// came first.
	e2 := newEnv(t)
	p2 := e2.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	hold := mustAcquire(t, p2, "holder")
	batch := acquireAsync(t, e2.pool(), "batch", 1, 20*time.Second)
	e2.waitQueued(p2, 1)
	gw := make(chan *creds.Lease, 1)
	go func() {
		l, err := e2.pool().AcquireWith(ctxT(t, 20*time.Second), creds.Request{Owner: "gw", Interactive: true})
		if err != nil {
			t.Error(err)
		}
		gw <- l
	}()
	e2.waitQueued(p2, 2)
	if err := p2.Release(context.Background(), hold); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-gw:
		if l == nil {
			t.FailNow()
		}
		if err := p2.Release(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	case l := <-batch:
		t.Fatalf("the batch waiter got the key first: %+v", l)
	}
	if l := <-batch; l == nil {
		t.FailNow()
	}
}

// An account with many keys: a start costs the same whatever their
// number, and a key of it is found behind the idle keys of other groups.
func TestManyKeysInOneAccount(t *testing.T) {
	e := newEnv(t)
	var defs []creds.Credential
	for i := range 300 {
		defs = append(defs, creds.Credential{ID: fmt.Sprintf("k%03d", i), MaxConcurrent: 1, Account: "org"})
	}
	for i := range 20 {
		defs = append(defs, creds.Credential{ID: fmt.Sprintf("idle%02d", i), MaxConcurrent: 1})
	}
	p := e.defined(creds.Definitions{
		Accounts:    []creds.Account{{ID: "org", Limits: []creds.Limit{mustLimit(t, "rate=50/m")}}},
		Credentials: defs,
	})
	last := keySet(t, "k299")
	if got := tryN(t, p, creds.Request{Owner: "w", Keys: last}, 2); len(got) != 1 {
		t.Fatalf("the last key of the account: %d starts", len(got))
	}
	var ids []string
	for i := range 300 {
		ids = append(ids, fmt.Sprintf("k%03d", i))
	}
	got := tryN(t, p, creds.Request{Owner: "w", Keys: keySet(t, ids...)}, 100)
	if len(got) != 49 {
		t.Fatalf("the account's keys took %d more starts, want 49 (50 a minute)", len(got))
	}
	seen := map[string]bool{}
	for _, l := range got {
		if seen[l.CredentialID] {
			t.Fatalf("%s leased twice (max_concurrent 1)", l.CredentialID)
		}
		seen[l.CredentialID] = true
	}
	if idle := tryN(t, p, creds.Request{Owner: "w"}, 30); len(idle) != 20 {
		t.Fatalf("%d keys of no account started, want 20", len(idle))
	}
}
