package creds_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// refuseOn leases credential id and ends the lease as refused for item.
func refuseOn(t *testing.T, p *creds.Pool, id, item, reason string) {
	t.Helper()
	ctx := context.Background()
	l := mustAcquire(t, p, "w")
	for l.CredentialID != id {
		_ = p.Release(ctx, l)
		l = mustAcquire(t, p, "w")
	}
	if err := p.Settle(ctx, l, creds.Outcome{Refused: &creds.Refusal{Item: item, Reason: reason}}); err != nil {
		t.Fatal(err)
	}
}

// A key is disabled by evidence about the key: refusals of different items
// in a row. One item refused again and again (its own fault) never
// disables it, and a run the key takes ends the streak.
func TestRefusalStreak(t *testing.T) {
	e := newEnv(t)
	p := e.pool()
	ctx := context.Background()
	e.register(p, creds.Credential{ID: "k", MaxConcurrent: 1})

	for range 5 {
		refuseOn(t, p, "k", "b/poison", "403 Forbidden: content rule")
	}
	c := credStats(t, p, "k")
	if c.State == creds.StateDisabled || len(c.Refusals) != 1 || !strings.Contains(c.Refusals[0], "b/poison: 403") {
		t.Fatalf("one item refused 5 times: want usable with 1 refusal shown, got %+v", c)
	}

	refuseOn(t, p, "k", "b/x", "401 Unauthorized")
	// A lease given back unused says nothing about the key.
	l0 := mustAcquire(t, p, "w")
	if err := p.ReleaseUnused(ctx, l0); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); len(c.Refusals) != 2 {
		t.Fatalf("after an unused lease: want the streak kept, got %+v", c)
	}
	// A success ends the streak.
	l := mustAcquire(t, p, "w")
	if err := p.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); len(c.Refusals) != 0 || c.State == creds.StateDisabled {
		t.Fatalf("after a success: want no refusals, got %+v", c)
	}

	for i, item := range []string{"b/1", "b/2", "b/3"} {
		refuseOn(t, p, "k", item, "401 Unauthorized: invalid_api_key")
		c := credStats(t, p, "k")
		if disabled := c.State == creds.StateDisabled; disabled != (i == 2) {
			t.Fatalf("after %d different refused items: disabled %v, want %v (%+v)", i+1, disabled, i == 2, c)
		}
	}
	c = credStats(t, p, "k")
	if c.DisabledBy != creds.DisabledByAPI || !strings.Contains(c.DisabledReason, "refused 3 different items in a row") ||
		!strings.Contains(c.DisabledReason, "b/1: 401") || !strings.Contains(c.DisabledReason, "b/3: 401") {
		t.Fatalf("disabled credential: want the streak as its reason, by the API; got %+v", c)
	}
	if err := p.Enable(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); c.State == creds.StateDisabled || len(c.Refusals) != 0 {
		t.Fatalf("enabled again: want usable with a clean streak, got %+v", c)
	}
}

// A key on probation (it refused the last item it ran) takes one request
// at a time, whatever its max_concurrent, until a run it takes ends the
// streak: so a revoked key is disabled after at most 3 requests sent
// after its first refusal, not 3 x max_concurrent.
func TestProbationTakesOneRequestAtATime(t *testing.T) {
	e := newEnv(t)
	p := e.pool()
	ctx := context.Background()
	e.register(p, creds.Credential{ID: "k", MaxConcurrent: 3})
	tryAcquire := func() (*creds.Lease, error) { return p.TryAcquire(ctxT(t, 10*time.Second), "w") }

	refuseOn(t, p, "k", "b/1", "401 Unauthorized")
	l1, err := tryAcquire()
	if err != nil {
		t.Fatalf("a key on probation refused its one request: %v", err)
	}
	if l2, err := tryAcquire(); !errors.Is(err, creds.ErrNoneAvailable) {
		t.Fatalf("a key on probation (max_concurrent 3) took a second request at once: %v, %v", l2, err)
	}
	// The run it took succeeds: the streak ends, and with it the cap.
	if err := p.Release(ctx, l1); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := tryAcquire(); err != nil {
			t.Fatalf("off probation, request %d of max_concurrent 3: %v", i+1, err)
		}
	}
}
