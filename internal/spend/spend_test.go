package spend_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

func TestPrice(t *testing.T) {
	p := spend.Price{Input: 0.15, Output: 0.60}
	// 1,000,000 input tokens cost 0.15; 1,000 output tokens 0.0006.
	if got := p.Of(1_000_000, 0, 1); got != spend.Unit*15/100 {
		t.Errorf("1M input tokens: %s", got)
	}
	if got := p.Of(0, 1000, 1); got.String() != "0.0006" {
		t.Errorf("1k output tokens: %s", got)
	}
	if got := p.Of(1000, 1000, 0.5); got.String() != "0.000375" {
		t.Errorf("through a Batch API: %s", got)
	}
	if got := (spend.Price{Input: 3, Output: 15}).Ceiling(1, 1); got != 18000 {
		t.Errorf("ceiling of 1+1 tokens at 3/15: %d", got)
	}
	if (spend.Price{Input: -1}).Check() == nil {
		t.Error("a negative price passes")
	}
}

func TestPeriods(t *testing.T) {
	at := time.Date(2026, 11, 27, 23, 59, 0, 0, time.UTC) // a Friday
	for _, tc := range []struct{ period, id, end string }{
		{spend.Day, "2026-11-27", "2026-11-28T00:00:00Z"},
		{spend.Week, "2026-W48", "2026-11-30T00:00:00Z"},
		{spend.Month, "2026-11", "2026-12-01T00:00:00Z"},
	} {
		if id := spend.PeriodOf(tc.period, at); id != tc.id {
			t.Errorf("%s: period %s, want %s", tc.period, id, tc.id)
		}
		if end := spend.PeriodEnd(tc.period, at).Format(time.RFC3339); end != tc.end {
			t.Errorf("%s: ends %s, want %s", tc.period, end, tc.end)
		}
	}
	b, err := spend.ParseBudget("100/d")
	if err != nil || b.Amount != 100*spend.Unit || b.Period != spend.Day {
		t.Errorf("ParseBudget: %+v %v", b, err)
	}
	for _, bad := range []string{"100", "100/y", "x/d"} {
		if _, err := spend.ParseBudget(bad); err == nil {
			t.Errorf("ParseBudget(%q): want an error", bad)
		}
	}
}

func ledger(t *testing.T) *spend.Ledger {
	t.Helper()
	return spend.NewLedger(redistest.Start(t).Client(t), "p-"+t.Name())
}

// However many starts race, a batch's reservations never take more than
// its budget; a start refused while others hold the rest waits, one
// refused with nothing held finds the budget exhausted.
func TestLedgerNeverOverspends(t *testing.T) {
	l := ledger(t)
	ctx := context.Background()
	if _, err := l.SetBatchBudget(ctx, "b", 100); err != nil {
		t.Fatal(err)
	}
	var ok, waited atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			v, err := l.Reserve(ctx, spend.Reservation{Token: fmt.Sprint(i), Amount: 7, Batch: "b", Expires: time.Now().Add(time.Minute)})
			if err != nil {
				t.Error(err)
				return
			}
			switch {
			case v.OK:
				ok.Add(1)
			case v.Wait:
				waited.Add(1)
			default:
				t.Errorf("start %d: %+v with reservations held: want wait", i, v)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 14 || waited.Load() != 50 {
		t.Fatalf("%d reserved, %d waited: want 14 (14 x 7 <= 100) and 50", ok.Load(), waited.Load())
	}
	// Each reserved start settles at less than it reserved: room again.
	for i := range 64 {
		if err := l.Settle(ctx, fmt.Sprint(i), 5, "b", "", ""); err != nil {
			t.Fatal(err)
		}
	}
	b, _, err := l.Read(ctx, "b", "", "")
	// 14 reservations settled at 5; the 50 that never reserved add their
	// cost too (a start without a reservation is counted).
	if err != nil || b.Reserved != 0 || b.Spent != 64*5 {
		t.Fatalf("account %+v %v", b, err)
	}
	v, err := l.Reserve(ctx, spend.Reservation{Token: "late", Amount: 7, Batch: "b", Expires: time.Now().Add(time.Minute)})
	if err != nil || v.Exhausted != spend.ReasonBudget {
		t.Fatalf("a start past the budget with nothing held: %+v %v, want exhausted", v, err)
	}
	// A higher budget covers the next start.
	a, err := l.SetBatchBudget(ctx, "b", 400)
	if err != nil || !a.Covers() || a.Need != 7 {
		t.Fatalf("after raising the budget: %+v %v", a, err)
	}
}

// A tenant's budget of the period binds its batches together; the next
// period starts afresh.
func TestLedgerTenantBudget(t *testing.T) {
	l := ledger(t)
	ctx := context.Background()
	r := func(tok, batch, period string) spend.Verdict {
		t.Helper()
		v, err := l.Reserve(ctx, spend.Reservation{Token: tok, Amount: 40, Batch: batch, Tenant: "research", Period: period,
			TenantBudget: 100, Expires: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if !r("1", "x", "2026-11-27").OK || !r("2", "y", "2026-11-27").OK {
		t.Fatal("two starts of 40 within 100")
	}
	if v := r("3", "z", "2026-11-27"); !v.Wait {
		t.Fatalf("a third, with 80 held: %+v, want wait", v)
	}
	_ = l.Settle(ctx, "1", 40, "x", "research", "2026-11-27")
	_ = l.Settle(ctx, "2", 40, "y", "research", "2026-11-27")
	if v := r("4", "z", "2026-11-27"); v.Exhausted != spend.ReasonTenantBudget {
		t.Fatalf("80 spent of 100, 40 asked: %+v, want tenant-budget exhausted", v)
	}
	if !r("5", "z", "2026-11-28").OK {
		t.Fatal("the next day starts afresh")
	}
	_, tn, err := l.Read(ctx, "", "research", "2026-11-27")
	if err != nil || tn.Spent != 80 || tn.Need != 40 {
		t.Fatalf("tenant account %+v %v", tn, err)
	}
}

// A reservation whose start never settles lapses and counts as spent (the
// run may have been paid); a late settle corrects it to the real cost.
func TestLedgerLapse(t *testing.T) {
	l := ledger(t)
	ctx := context.Background()
	if _, err := l.SetBatchBudget(ctx, "b", 100); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Reserve(ctx, spend.Reservation{Token: "dies", Amount: 60, Batch: "b", Expires: time.Now().Add(50 * time.Millisecond)}); err != nil || !v.OK {
		t.Fatalf("%+v %v", v, err)
	}
	testutil.WaitFor(t, "the reservation to lapse, counted as spent", 5*time.Second, func() bool {
		b, _, err := l.Read(ctx, "b", "", "")
		return err == nil && b.Spent == 60 && b.Reserved == 0
	})
	if err := l.Settle(ctx, "dies", 12, "b", "", ""); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := l.Read(ctx, "b", "", ""); b.Spent != 12 {
		t.Fatalf("after the late settle: %+v, want 12 spent", b)
	}

	// Expired reservations are looked for only once the earliest expiry
	// has passed: a reservation made by the call that lapsed the last one
	// must still lapse in its turn, and one that lives on must not.
	reserve := func(tok string, amt spend.Amount, ttl time.Duration) {
		t.Helper()
		if v, err := l.Reserve(ctx, spend.Reservation{Token: tok, Amount: amt, Batch: "b", Expires: time.Now().Add(ttl)}); err != nil || !v.OK {
			t.Fatalf("reserve %s: %+v %v", tok, v, err)
		}
	}
	reserve("first", 10, -time.Second)         // expired already: the next call lapses it
	reserve("second", 20, 50*time.Millisecond) // made by the call that lapses the first
	reserve("long", 5, time.Hour)
	testutil.WaitFor(t, "the second reservation to lapse too", 5*time.Second, func() bool {
		b, _, err := l.Read(ctx, "b", "", "")
		return err == nil && b.Spent == 12+10+20 && b.Reserved == 5
	})
	if err := l.Settle(ctx, "long", 3, "b", "", ""); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := l.Read(ctx, "b", "", ""); b.Spent != 12+10+20+3 || b.Reserved != 0 {
		t.Fatalf("after settling the live one: %+v, want 45 spent, 0 reserved", b)
	}
}

// A tenant's live budget overrides the configured one at the next
// reservation, in the period of its own kind; dropped, the configured
// one applies again; a worker starting with a changed configured budget
// drops it, one with the same keeps it.
func TestLedgerLiveTenantBudget(t *testing.T) {
	l := ledger(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	day, week := spend.PeriodOf(spend.Day, at), spend.PeriodOf(spend.Week, at)
	configured := &spend.Budget{Amount: 100, Period: spend.Day}
	r := func(tok string, amount spend.Amount) spend.Verdict {
		t.Helper()
		v, err := l.Reserve(ctx, spend.Reservation{Token: tok, Amount: amount, Batch: "x", Tenant: "research", Period: day,
			TenantBudget: configured.Amount, At: at, Expires: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	view := func() spend.TenantView {
		t.Helper()
		v, err := l.Tenant(ctx, "research", configured, at)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := r("1", 80); !v.OK || v.Period != day {
		t.Fatalf("80 of the configured 100: %+v, want ok in %s", v, day)
	}
	_ = l.Settle(ctx, "1", 80, "x", "research", day)
	if v := r("2", 40); v.Exhausted != spend.ReasonTenantBudget {
		t.Fatalf("80 spent of 100, 40 asked: %+v, want tenant-budget exhausted", v)
	}
	if v := view(); v.Source != spend.SourceConfig || v.Budget == nil || *v.Budget != *configured || v.Account.Covers() {
		t.Fatalf("before the change: %+v, want the configured budget, not covering the next start", v)
	}

	// Raised live: the view covers the start refused, and it goes.
	set, err := l.SetTenantBudget(ctx, "research", &spend.Budget{Amount: 150, Period: spend.Day}, configured, "alice@host", at)
	if err != nil || set.Source != spend.SourceLive || set.Budget.Amount != 150 || set.SetBy != "alice@host" || set.SetAt.IsZero() ||
		set.Period != day || set.Account.Spent != 80 || !set.Account.Covers() {
		t.Fatalf("set 150/d: %+v %v", set, err)
	}
	if v := r("3", 40); !v.OK || v.Period != day {
		t.Fatalf("80 spent of a live 150, 40 asked: %+v, want ok", v)
	}
	_ = l.Settle(ctx, "3", 40, "x", "research", day)

	// Of another kind: counted in the week, afresh.
	if _, err := l.SetTenantBudget(ctx, "research", &spend.Budget{Amount: 50, Period: spend.Week}, configured, "alice@host", at); err != nil {
		t.Fatal(err)
	}
	if v := r("4", 40); !v.OK || v.Period != week {
		t.Fatalf("a live 50/w: %+v, want ok in %s", v, week)
	}
	if v := r("5", 40); !v.Wait || v.Period != week {
		t.Fatalf("40 of a live 50/w held: %+v, want wait", v)
	}
	_ = l.Settle(ctx, "4", 30, "x", "research", week)
	if v := view(); v.Period != week || v.Account.Spent != 30 || v.Budget.Period != spend.Week {
		t.Fatalf("the week's view: %+v", v)
	}

	// A worker with the same configuration keeps it; dropped, the
	// configured budget applies again.
	if dropped, err := l.RegisterTenants(ctx, map[string]*spend.Budget{"research": configured, "support": nil}); err != nil || len(dropped) != 0 {
		t.Fatalf("register the same configuration: dropped %v %v", dropped, err)
	}
	if v := view(); v.Source != spend.SourceLive {
		t.Fatalf("after a register of the same configuration: %+v, want the live budget kept", v)
	}
	if v, err := l.SetTenantBudget(ctx, "research", nil, configured, "bob@host", at); err != nil || v.Source != spend.SourceConfig ||
		v.Budget.Amount != 100 || v.Account.Spent != 120 || v.Account.Covers() {
		t.Fatalf("dropped: %+v %v, want the configured 100/d with 120 spent", v, err)
	}
	if v := r("6", 1); v.Exhausted != spend.ReasonTenantBudget || v.Period != day {
		t.Fatalf("dropped, back to 100/d with 120 spent: %+v", v)
	}

	// A worker starting with a changed configured budget drops the live
	// one.
	if _, err := l.SetTenantBudget(ctx, "research", &spend.Budget{Amount: 500, Period: spend.Day}, configured, "alice@host", at); err != nil {
		t.Fatal(err)
	}
	changed := &spend.Budget{Amount: 200, Period: spend.Day}
	if dropped, err := l.RegisterTenants(ctx, map[string]*spend.Budget{"research": changed}); err != nil || len(dropped) != 1 || dropped[0] != "research" {
		t.Fatalf("register a changed configuration: dropped %v %v, want research", dropped, err)
	}
	if v, err := l.Tenant(ctx, "research", changed, at); err != nil || v.Source != spend.SourceConfig || v.Budget.Amount != 200 {
		t.Fatalf("after the configuration changed: %+v %v", v, err)
	}
	if v, err := l.Tenant(ctx, "support", nil, at); err != nil || v.Source != spend.SourceNone || v.Budget != nil || v.Period != day ||
		!v.Account.Covers() {
		t.Fatalf("a tenant without a budget: %+v %v", v, err)
	}
}
