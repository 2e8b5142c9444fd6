package creds_test

import (
	"context"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// A run's release that says when its request left (Outcome.Sent) moves
// its start there in every limit: the start leaves the windows that much
// later than its grant, and a smooth limit's next start comes one
// interval after it, as an API that counts arrivals sees them.
func TestSentRestampsTheStart(t *testing.T) {
	e := newEnv(t)
	p := e.registered(
		creds.Credential{ID: "w", MaxConcurrent: 5, Limits: []creds.Limit{mustLimit(t, "rate=1/300ms"), mustLimit(t, "cost=6/300ms")}},
		creds.Credential{ID: "g", MaxConcurrent: 5, Limits: []creds.Limit{mustLimit(t, "rate=10/s,burst=1")}},
	)
	ctx := context.Background()
	const lag = 50 * time.Millisecond
	run := func(id string, o creds.Outcome, sent func(*creds.Lease) time.Time) *creds.Lease {
		t.Helper()
		var l *creds.Lease
		var err error
		for {
			// The other credential may be the one free: hand it back.
			if l, err = p.AcquireCost(ctxT(t, 10*time.Second), "o", 4); err != nil {
				t.Fatal(err)
			}
			if l.CredentialID == id {
				break
			}
			defer func(l *creds.Lease) {
				if err := p.ReleaseUnused(ctx, l); err != nil {
					t.Error(err)
				}
			}(l)
		}
		waitFor(t, "the request's moment to pass", 10*time.Second, func() bool { return time.Since(l.RequestedAt) > lag+10*time.Millisecond })
		o.Sent = sent(l)
		if err := p.Settle(ctx, l, o); err != nil {
			t.Fatal(err)
		}
		return l
	}
	at := func(l *creds.Lease) time.Time { return l.RequestedAt.Add(lag) }
	next := func(id string) []time.Time {
		t.Helper()
		var out []time.Time
		for _, s := range credStats(t, p, id).Limits {
			out = append(out, s.NextRoom)
		}
		return out
	}

	l := run("w", creds.Outcome{Cost: 6}, at)
	want := l.Acquired.Add(lag + 300*time.Millisecond)
	if got := next("w"); !got[0].Equal(want) || !got[1].Equal(want) {
		t.Errorf("room after a start sent %s after its grant: %v, want both at +%s", lag, got, want.Sub(l.Acquired))
	}
	if n := mustAcquire(t, p, "n"); n.CredentialID == "w" && n.Acquired.Before(want) {
		t.Errorf("the next start on w at +%s, before +%s", n.Acquired.Sub(l.Acquired), want.Sub(l.Acquired))
	}

	g := run("g", creds.Outcome{}, at)
	if want, got := g.Acquired.Add(lag+100*time.Millisecond), next("g")[0]; !got.Equal(want) {
		t.Errorf("smooth limit's next room after a start sent %s after its grant: +%s, want +%s", lag, got.Sub(g.Acquired), want.Sub(g.Acquired))
	}

	// A moment after the release is the release's; one before the lease,
	// or a lease never used, changes nothing.
	e2 := newEnv(t)
	p = e2.registered(creds.Credential{ID: "w", MaxConcurrent: 5, Limits: []creds.Limit{mustLimit(t, "rate=1/300ms")}}, creds.Credential{ID: "g", MaxConcurrent: 1})
	before := time.Now()
	l = run("w", creds.Outcome{}, func(l *creds.Lease) time.Time { return l.RequestedAt.Add(time.Hour) })
	if got := next("w")[0]; got.Before(l.Acquired.Add(lag+300*time.Millisecond)) || got.After(l.Acquired.Add(time.Since(before)+300*time.Millisecond)) {
		t.Errorf("a moment after the release: room at +%s, want the release's (after +%s)", got.Sub(l.Acquired), lag+300*time.Millisecond)
	}
	for _, c := range []struct {
		what string
		o    creds.Outcome
		sent func(*creds.Lease) time.Time
	}{
		{"before the lease was asked for", creds.Outcome{}, func(l *creds.Lease) time.Time { return l.RequestedAt.Add(-time.Millisecond) }},
		{"never used", creds.Outcome{Unused: true}, at},
	} {
		waitFor(t, "room on w", 10*time.Second, func() bool { n := next("w")[0]; return n.IsZero() || time.Now().After(n) })
		l := run("w", c.o, c.sent)
		if got, want := next("w")[0], l.Acquired.Add(300*time.Millisecond); !got.Equal(want) {
			t.Errorf("%s: room at +%s, want +%s (from the grant)", c.what, got.Sub(l.Acquired), want.Sub(l.Acquired))
		}
	}
}
