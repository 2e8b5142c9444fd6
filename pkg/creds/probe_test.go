package creds_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// disableByAPI disables credential id the way a run's evidence does: a
// lease on it settled with Outcome.Disable.
func disableByAPI(t *testing.T, p *creds.Pool, id, reason string) {
	t.Helper()
	ctx := context.Background()
	var other []*creds.Lease
	defer func() {
		for _, l := range other {
			_ = p.Release(ctx, l)
		}
	}()
	for {
		l := mustAcquire(t, p, "w")
		if l.CredentialID != id {
			other = append(other, l)
			continue
		}
		if err := p.Settle(ctx, l, creds.Outcome{Disable: reason}); err != nil {
			t.Fatal(err)
		}
		return
	}
}

func TestEnableAfterProbe(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "api-off", MaxConcurrent: 1}, creds.Credential{ID: "op-off", MaxConcurrent: 1}, creds.Credential{ID: "on", MaxConcurrent: 1})
	ctx := context.Background()
	disableByAPI(t, p, "api-off", "401 invalid api key")
	if err := p.Disable(ctx, "op-off", "quota spent until Monday"); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "api-off"); c.State != creds.StateDisabled || c.DisabledBy != creds.DisabledByAPI {
		t.Fatalf("disabled by a run: want disabled by %q, got %+v", creds.DisabledByAPI, c)
	}
	if c := credStats(t, p, "op-off"); c.State != creds.StateDisabled || c.DisabledBy != creds.DisabledByOperator {
		t.Fatalf("disabled by Disable: want disabled by %q, got %+v", creds.DisabledByOperator, c)
	}

	// An operator's disable is never undone by a probe.
	ok, err := p.EnableAfterProbe(ctx, "op-off", "probe_command exited 0")
	if err != nil || ok {
		t.Fatalf("EnableAfterProbe of an operator-disabled key: want false, nil; got %v, %v", ok, err)
	}
	if c := credStats(t, p, "op-off"); c.State != creds.StateDisabled || c.DisabledReason != "quota spent until Monday" || c.EnabledBy != "" {
		t.Fatalf("operator-disabled key after a probe: %+v", c)
	}
	// A key that is not disabled is left alone.
	if ok, err := p.EnableAfterProbe(ctx, "on", "probe_command exited 0"); err != nil || ok {
		t.Fatalf("EnableAfterProbe of an enabled key: want false, nil; got %v, %v", ok, err)
	}
	if c := credStats(t, p, "on"); c.EnabledBy != "" || !c.EnabledAt.IsZero() {
		t.Fatalf("an enabled key a probe did nothing to: %+v", c)
	}

	// The API's disable is undone, with its cause.
	const cause = "probe GET https://api.example.com/v1/models answered 200"
	ok, err = p.EnableAfterProbe(ctx, "api-off", cause)
	if err != nil || !ok {
		t.Fatalf("EnableAfterProbe of an API-disabled key: want true, nil; got %v, %v", ok, err)
	}
	c := credStats(t, p, "api-off")
	if c.State != creds.StateAvailable || c.DisabledBy != "" || c.DisabledReason != "" ||
		c.EnabledBy != creds.EnabledByProbe || c.EnabledReason != cause || c.EnabledAt.IsZero() {
		t.Fatalf("API-disabled key after a successful probe: %+v", c)
	}
	if ok, err := p.EnableAfterProbe(ctx, "api-off", cause); err != nil || ok {
		t.Fatalf("a second EnableAfterProbe: want false, nil; got %v, %v", ok, err)
	}
	if _, err := p.EnableAfterProbe(ctx, "nope", cause); !errors.Is(err, creds.ErrNoSuchCredential) {
		t.Fatalf("EnableAfterProbe of an unknown key: want ErrNoSuchCredential, got %v", err)
	}

	// An operator's Enable says so; disabling again hides the last enable.
	if err := p.Enable(ctx, "op-off"); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "op-off"); c.State != creds.StateAvailable || c.EnabledBy != creds.EnabledByOperator || c.EnabledReason != "" {
		t.Fatalf("after Enable: %+v", c)
	}
	disableByAPI(t, p, "api-off", "401 again")
	if c := credStats(t, p, "api-off"); c.EnabledBy != "" || c.EnabledReason != "" || !c.EnabledAt.IsZero() || c.DisabledBy != creds.DisabledByAPI {
		t.Fatalf("disabled again after a probe enabled it: %+v", c)
	}
}

// An operator who disables a key the API disabled (after the probe began,
// say) wins: the probe's success changes nothing.
func TestEnableAfterProbeOperatorWins(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	ctx := context.Background()
	disableByAPI(t, p, "k", "401")
	if err := p.Disable(ctx, "k", "rotating this key"); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.EnableAfterProbe(ctx, "k", "probe_command exited 0"); err != nil || ok {
		t.Fatalf("want false, nil; got %v, %v", ok, err)
	}
	if c := credStats(t, p, "k"); c.State != creds.StateDisabled || c.DisabledBy != creds.DisabledByOperator || c.DisabledReason != "rotating this key" {
		t.Fatalf("after the operator's disable and a probe: %+v", c)
	}
}

// A credential disabled by a version that did not record who counts as an
// operator's: never probed back.
func TestEnableAfterProbeUnrecordedDisable(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	ctx := context.Background()
	disableByAPI(t, p, "k", "401")
	if err := e.rdb.HDel(ctx, p.KeyPrefix()+"cred:k", "disabled_by").Err(); err != nil {
		t.Fatal(err)
	}
	if c := credStats(t, p, "k"); c.DisabledBy != creds.DisabledByOperator {
		t.Fatalf("a disable without disabled_by: want shown as %q, got %+v", creds.DisabledByOperator, c)
	}
	if ok, err := p.EnableAfterProbe(ctx, "k", "probe_command exited 0"); err != nil || ok {
		t.Fatalf("want false, nil; got %v, %v", ok, err)
	}
}

// A waiter gets the key a probe enables, from any process.
func TestEnableAfterProbeServesWaiter(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	waiter := e.pool()
	disableByAPI(t, p, "k", "401")
	got := acquireAsync(t, waiter, "waiter", 1, 20*time.Second)
	e.waitQueued(p, 1)
	if ok, err := p.EnableAfterProbe(context.Background(), "k", "probe_command exited 0"); err != nil || !ok {
		t.Fatalf("want true, nil; got %v, %v", ok, err)
	}
	select {
	case l := <-got:
		if l == nil || l.CredentialID != "k" {
			t.Fatalf("waiter got %+v", l)
		}
		_ = waiter.Release(context.Background(), l)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not served after the probe enabled the key")
	}
}

// One claim per key and interval, fleet-wide.
func TestClaimProbe(t *testing.T) {
	e := newEnv(t)
	a, b := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1}, creds.Credential{ID: "j", MaxConcurrent: 1}), e.pool()
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	claim := func(p *creds.Pool, id, owner string) bool {
		t.Helper()
		ok, err := p.ClaimProbe(ctx, id, owner, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	start := time.Now()
	if !claim(a, "k", "w1") {
		t.Fatal("the first claim failed")
	}
	if claim(b, "k", "w2") || claim(a, "k", "w1") {
		if time.Since(start) < ttl {
			t.Fatal("a second claim within the interval succeeded")
		}
	}
	if !claim(b, "j", "w2") {
		t.Fatal("a claim on another key failed")
	}
	if pttl := e.rdb.PTTL(ctx, a.KeyPrefix()+"probe:k").Val(); pttl <= 0 || pttl > ttl {
		t.Fatalf("the claim's key lives %s, want (0, %s]", pttl, ttl)
	}
	waitFor(t, "the claim to lapse", 5*time.Second, func() bool { return claim(b, "k", "w2") })
	if d := time.Since(start); d < ttl-10*time.Millisecond {
		t.Fatalf("claimed again after %s, before the interval (%s) ran out", d, ttl)
	}
	for _, bad := range []struct {
		id  string
		ttl time.Duration
	}{{"", ttl}, {"k", 0}, {"k", -time.Second}} {
		if _, err := a.ClaimProbe(ctx, bad.id, "w", bad.ttl); !errors.Is(err, creds.ErrInvalid) {
			t.Errorf("ClaimProbe(%q, %s): want ErrInvalid, got %v", bad.id, bad.ttl, err)
		}
	}
}

// Stats shows the streak of refusals the pool keeps in the credential's
// hash ("refused": one line per item).
func TestStatsRefusals(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	ctx := context.Background()
	if c := credStats(t, p, "k"); c.Refusals != nil {
		t.Fatalf("no refusals yet: got %q", c.Refusals)
	}
	want := []string{"b1/i1: 401 invalid api key", "b1/i2: 403 forbidden"}
	if err := e.rdb.HSet(ctx, p.KeyPrefix()+"cred:k", "refused", want[0]+"\n"+want[1]).Err(); err != nil {
		t.Fatal(err)
	}
	if got := credStats(t, p, "k").Refusals; !slices.Equal(got, want) {
		t.Fatalf("refusals: want %q, got %q", want, got)
	}
	// Enabling starts the key afresh.
	if err := p.Enable(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := credStats(t, p, "k").Refusals; got != nil {
		t.Fatalf("refusals after Enable: want none, got %q", got)
	}
}
