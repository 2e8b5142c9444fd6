package ops_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// A tenant set --budget: the live budget in the ledger; the tenant's
// batches paused for its budget run again once it covers their next start
// (one paused by an operator, and another tenant's, stay paused); a
// budget that does not cover resumes nothing; none drops it.
func TestSetTenantBudget(t *testing.T) {
	f := newFleet(t)
	rs := redistest.Start(t)
	l := spend.NewLedger(rs.Client(t), redistest.UniqueName(t))
	day := &spend.Budget{Amount: 100, Period: spend.Day}
	tenants := []status.TenantSpec{{Name: "research", Weight: 2, Budget: day}, {Name: "support", Weight: 1}}
	for _, b := range []struct{ id, tenant, reason string }{
		{"r1", "research", spend.ReasonTenantBudget}, {"r2", "research", spend.ReasonTenantBudget},
		{"r3", "research", ""}, {"other", "elsewhere", spend.ReasonTenantBudget},
	} {
		if _, err := f.q.AddToBatch(f.ctx, b.id, "sleep", 1, queue.WithTenant(b.tenant)); err != nil {
			t.Fatal(err)
		}
		if b.reason != "" {
			if _, _, err := f.q.PauseFor(f.ctx, b.id, b.reason, "worker-1"); err != nil {
				t.Fatal(err)
			}
		} else if _, err := ops.Steer(f.ctx, f.q, b.id, kftype.ActionPause, "alice@host"); err != nil {
			t.Fatal(err)
		}
	}
	// 100 of 100 spent: the configured budget covers nothing.
	if v, err := l.Reserve(f.ctx, spend.Reservation{Token: "t1", Amount: 100, Batch: "r1", Tenant: "research",
		Period: spend.PeriodOf(spend.Day, time.Now()), TenantBudget: 100, Expires: time.Now().Add(time.Minute)}); err != nil || !v.OK {
		t.Fatalf("%+v %v", v, err)
	}
	if err := l.Settle(f.ctx, "t1", 100, "r1", "research", spend.PeriodOf(spend.Day, time.Now())); err != nil {
		t.Fatal(err)
	}

	// Raised, but not enough for a start: nothing resumes.
	set, err := ops.SetTenantBudget(f.ctx, f.q, l, tenants, "research", &spend.Budget{Amount: 100, Period: spend.Day}, "alice@host")
	if err != nil || len(set.Resumed) != 0 || set.Tenant.BudgetSource != spend.SourceLive {
		t.Fatalf("a live budget that covers nothing: %+v %v", set, err)
	}
	// Raised: r1 and r2 run again, r3 (paused by an operator) and another
	// tenant's batch stay paused.
	set, err = ops.SetTenantBudget(f.ctx, f.q, l, tenants, "research", &spend.Budget{Amount: 500, Period: spend.Day}, "alice@host")
	slices.Sort(set.Resumed)
	if err != nil || !slices.Equal(set.Resumed, []string{"r1", "r2"}) {
		t.Fatalf("raised to 500/d: resumed %v %v, want r1 and r2", set.Resumed, err)
	}
	tn := set.Tenant
	if tn.Name != "research" || tn.Weight != 2 || tn.BudgetSource != spend.SourceLive || tn.Budget == nil || *tn.Budget != 500 ||
		tn.Period != spend.Day || tn.ConfigBudget == nil || *tn.ConfigBudget != 100 || tn.Spent != 100 || tn.SetBy != "alice@host" || tn.SetAt == nil {
		t.Errorf("the tenant after the change: %+v", tn)
	}
	for id, want := range map[string]kftype.BatchState{"r1": kftype.BatchRunning, "r2": kftype.BatchRunning,
		"r3": kftype.BatchPaused, "other": kftype.BatchPaused} {
		if b, err := f.q.Batch(f.ctx, id); err != nil || b.State != want {
			t.Errorf("batch %s: %s %v, want %s", id, b.State, err, want)
		}
	}
	// none: the configured 100/d again.
	set, err = ops.SetTenantBudget(f.ctx, f.q, l, tenants, "research", nil, "alice@host")
	if err != nil || set.Tenant.BudgetSource != spend.SourceConfig || *set.Tenant.Budget != 100 || set.Tenant.SetAt != nil {
		t.Fatalf("none: %+v %v, want the configured budget", set.Tenant, err)
	}

	for _, c := range []struct {
		name, tenant string
		budget       *spend.Budget
		class        error
		says         string
	}{
		{"a tenant not in the configuration", "marketing", day, ops.ErrNotFound, `tenant "marketing" is not in the configuration (tenants: research, support)`},
		{"a tenant without a configured budget", "support", day, ops.ErrConflict, "tenants.support a budget"},
		{"a bad name", "no such", day, ops.ErrInvalid, `tenant "no such"`},
		{"zero", "research", &spend.Budget{Period: spend.Day}, ops.ErrInvalid, "more than 0"},
	} {
		_, err := ops.SetTenantBudget(f.ctx, f.q, l, tenants, c.tenant, c.budget, "alice@host")
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: want %v saying %q, got %v", c.name, c.class, c.says, err)
		}
	}
	for _, c := range []struct{ in, says string }{
		{"500", "AMOUNT/PERIOD"}, {"500/y", `unknown period "y"`}, {"x/d", "x"}, {"0/d", "more than 0"}, {"-5/d", "-5"},
	} {
		if _, err := ops.ParseTenantBudget(c.in); !errors.Is(err, ops.ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseTenantBudget(%q): want invalid saying %q, got %v", c.in, c.says, err)
		}
	}
	if b, err := ops.ParseTenantBudget(" None "); b != nil || err != nil {
		t.Errorf("none: %+v %v, want nil", b, err)
	}

	rs.Stop()
	if _, err := ops.SetTenantBudget(f.ctx, f.q, l, tenants, "research", day, "alice@host"); !errors.Is(err, ops.ErrUnavailable) {
		t.Errorf("Redis stopped: want ErrUnavailable, got %v", err)
	}
}
