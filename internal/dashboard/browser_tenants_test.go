package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keyfleet/keyfleet/internal/api"
	"github.com/keyfleet/keyfleet/internal/dashboard"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/status"
)

// The tenants in a real browser: each row shows the budget in force and
// where it comes from; a tenant with a configured budget offers a budget
// button (one without offers none); without the token it is refused and
// nothing changes; with it, the budget given becomes the tenant's live
// one, the row says so, and the tenant's batch paused for its budget runs
// again.
func TestTenantBudgetInBrowser(t *testing.T) {
	e := newEnv(t)
	token := randomSecret("admin-", 16)
	ledger := spend.NewLedger(e.rdb, e.cfg.Pool.Name)
	day := &spend.Budget{Amount: 10 * spend.Unit, Period: spend.Day}
	base := e.startDashboardWith(dashboard.Options{AdminToken: token, Enqueue: api.EnqueueDefaults{Ledger: ledger},
		TenantSpecs: []status.TenantSpec{{Name: "research", Weight: 2, Budget: day}, {Name: "support", Weight: 1}}})
	// research spent its day; its batch r1 is paused for it.
	period := spend.PeriodOf(spend.Day, time.Now())
	if v, err := ledger.Reserve(e.ctx, spend.Reservation{Token: "t", Amount: day.Amount, Batch: "r1", Tenant: "research", Period: period,
		TenantBudget: day.Amount, Expires: time.Now().Add(time.Minute)}); err != nil || !v.OK {
		t.Fatalf("%+v %v", v, err)
	}
	if err := ledger.Settle(e.ctx, "t", day.Amount, "r1", "research", period); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.AddToBatch(e.ctx, "r1", "exec", 1, queue.WithTenant("research")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.q.PauseFor(e.ctx, "r1", spend.ReasonTenantBudget, "worker-1"); err != nil {
		t.Fatal(err)
	}

	ctx := newBrowser(t, e.ctx)
	row := func(name string) string { return `document.querySelector('tr[data-tenant="` + name + `"]')` }
	button := `tr[data-tenant="research"] button.action.budget`
	run(t, ctx, "opening the dashboard", chromedp.Navigate(base+"/"))
	until(t, ctx, "research's row from the configuration, with a budget button",
		row("research")+` && `+row("research")+`.dataset.source === 'config' && `+row("research")+`.dataset.budget === '10/d' && !!document.querySelector('`+button+`')`,
		30*time.Second)
	var buttons int
	run(t, ctx, "counting support's buttons", chromedp.Evaluate(`document.querySelectorAll('tr[data-tenant="support"] button').length`, &buttons))
	if buttons != 0 {
		t.Errorf("a tenant without a configured budget offers %d buttons, want none", buttons)
	}

	toast := `document.getElementById('toast')`
	run(t, ctx, "setting a budget without a token", chromedp.Evaluate(`window.prompt = () => '25/w'`, nil), clickOn(button))
	until(t, ctx, "the page to ask for the token", `!`+toast+`.hidden && `+toast+`.textContent.includes('admin token')`, 10*time.Second)
	run(t, ctx, "setting a budget with a wrong token",
		chromedp.SendKeys(`#token`, "wrong-token-0123456789", chromedp.ByQuery), clickOn(button))
	until(t, ctx, "the refusal", toast+`.textContent.includes('refused (401)')`, 10*time.Second)
	if v, err := ledger.Tenant(e.ctx, "research", day, time.Now()); err != nil || v.Source != spend.SourceConfig {
		t.Fatalf("a refused change changed research: %+v %v", v, err)
	}

	run(t, ctx, "setting a budget with the token",
		chromedp.Evaluate(`document.getElementById('token').value = ''`, nil),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
		clickOn(button))
	until(t, ctx, "the toast saying r1 resumed", toast+`.textContent.includes('now 25/w (live)') && `+toast+`.textContent.includes('resumed r1')`, 10*time.Second)
	until(t, ctx, "research's row with its live budget", row("research")+`.dataset.source === 'live' && `+row("research")+`.dataset.budget === '25/w'`, 10*time.Second)
	var text string
	run(t, ctx, "reading research's row", textOf(`tr[data-tenant="research"]`, &text))
	if !strings.Contains(text, "live · config 10/d · set by dashboard@127.0.0.1") {
		t.Errorf("research's row does not say where its budget comes from:\n%s", text)
	}
	if b, err := e.q.Batch(e.ctx, "r1"); err != nil || b.State != kftype.BatchRunning {
		t.Errorf("r1 after the raise: %s %v, want running", b.State, err)
	}
	noSecretOnPage(t, ctx, e, token)
}
