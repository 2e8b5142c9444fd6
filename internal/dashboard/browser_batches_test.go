package dashboard_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// The batch buttons in a real browser: each row shows the batch's
// priority, weight and state; without the token (or with a wrong one) a
// button is refused and nothing changes; with it, pause makes the row say
// paused (and who paused it), resume running, cancel cancelled with the
// cancelled items counted, and a cancelled batch offers no button.
func TestBatchButtonsInBrowser(t *testing.T) {
	e := newEnv(t)
	token := randomSecret("admin-", 16)
	e.startWorker("worker-1")
	base := e.startDashboard(token)
	// A finished batch, then a long one of priority 2, weight 4 to steer
	// (enqueued once the first is done: it would run first).
	e.enqueue("nightly", "exec", waitingItems("n", 3, 5))
	ctx := newBrowser(t, e.ctx)
	run(t, ctx, "opening the dashboard", chromedp.Navigate(base+"/"))
	until(t, ctx, "nightly done", `(() => { const r = document.querySelector('tr[data-batch="nightly"]'); return r && r.dataset.state === 'done' })()`, 60*time.Second)
	if _, err := e.q.AddToBatch(e.ctx, "steer-me", "exec", 0, queue.WithPriority(2), queue.WithWeight(4)); err != nil {
		t.Fatal(err)
	}
	// Many more items than the worker runs during the test's steps on a
	// loaded machine: the cancel must find items to cancel.
	const steerItems = 200
	e.enqueue("steer-me", "exec", waitingItems("s", steerItems, 3000))
	row := `document.querySelector('tr[data-batch="steer-me"]')`
	button := func(name string) string { return `tr[data-batch="steer-me"] button.action.` + name }
	until(t, ctx, "steer-me running with a pause button", row+` && `+row+`.dataset.state === 'running' && !!document.querySelector('`+button("pause")+`')`, 30*time.Second)
	var cells []string
	run(t, ctx, "reading steer-me's row", chromedp.Evaluate(`Array.from(`+row+`.cells).map((c) => c.innerText.trim())`, &cells))
	if len(cells) < 12 || cells[0] != "steer-me" || cells[2] != "2" || cells[3] != "4" || cells[4] != "running" {
		t.Errorf("steer-me's row: want its ID, priority 2, weight 4, running; got %q", cells)
	}
	var nightlyButtons int
	run(t, ctx, "counting nightly's buttons", chromedp.Evaluate(`document.querySelectorAll('tr[data-batch="nightly"] button').length`, &nightlyButtons))
	if nightlyButtons != 0 {
		t.Errorf("a done batch offers %d buttons, want none", nightlyButtons)
	}

	// Without the token: refused, in the page and over fetch.
	toast := `document.getElementById('toast')`
	run(t, ctx, "pausing without a token", clickOn(button("pause")))
	until(t, ctx, "the page to ask for the token", `!`+toast+`.hidden && `+toast+`.textContent.includes('admin token')`, 10*time.Second)
	run(t, ctx, "pausing with a wrong token",
		chromedp.SendKeys(`#token`, "wrong-token-0123456789", chromedp.ByQuery),
		clickOn(button("pause")))
	until(t, ctx, "the refusal", toast+`.textContent.includes('refused (401)')`, 10*time.Second)
	var codes []int
	run(t, ctx, "steering without the token", chromedp.Evaluate(`Promise.all(['pause', 'resume', 'cancel'].map((a) =>
		fetch('/api/batches/steer-me/' + a, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'}).then((r) => r.status)))`,
		&codes, awaitPromise))
	if len(codes) != 3 || codes[0] != 401 || codes[1] != 401 || codes[2] != 401 {
		t.Errorf("batch actions without the token: want 401 each, got %v", codes)
	}
	if b, err := e.q.Batch(e.ctx, "steer-me"); err != nil || b.State != kftype.BatchRunning || len(b.History) != 0 {
		t.Fatalf("a refused action changed steer-me: %+v %v", b, err)
	}

	// With the token: pause, resume, cancel.
	run(t, ctx, "pausing with the token",
		chromedp.Evaluate(`document.getElementById('token').value = ''`, nil),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
		clickOn(button("pause")))
	until(t, ctx, "steer-me paused on the page, with a resume button", row+`.dataset.state === 'paused' && !!document.querySelector('`+button("resume")+`') && !document.querySelector('`+button("pause")+`')`, 10*time.Second)
	var text string
	run(t, ctx, "reading the paused row", textOf(`tr[data-batch="steer-me"]`, &text))
	if !strings.Contains(text, "paused by dashboard@127.0.0.1") {
		t.Errorf("the paused row does not say who paused it:\n%s", text)
	}
	if b, _ := e.q.Batch(e.ctx, "steer-me"); b.State != kftype.BatchPaused {
		t.Errorf("steer-me's record after the pause button: %+v", b)
	}
	shot := screenshot(t, ctx)

	run(t, ctx, "resuming", clickOn(button("resume")))
	until(t, ctx, "steer-me running on the page", row+`.dataset.state === 'running' && !!document.querySelector('`+button("pause")+`')`, 10*time.Second)
	run(t, ctx, "reading the resumed row", textOf(`tr[data-batch="steer-me"]`, &text))
	if !strings.Contains(text, "resumed by dashboard@127.0.0.1") {
		t.Errorf("the resumed row does not say who resumed it:\n%s", text)
	}

	// Cancel asks first; the test answers yes.
	run(t, ctx, "cancelling", chromedp.Evaluate(`window.confirm = () => true`, nil), clickOn(button("cancel")))
	until(t, ctx, "steer-me cancelled on the page with its cancelled items counted",
		row+`.dataset.state === 'cancelled' && +`+row+`.dataset.cancelled > 0 && `+row+`.querySelector('td.cancelled-count').innerText.trim() === `+row+`.dataset.cancelled`, 30*time.Second)
	until(t, ctx, "the cancel's toast", toast+`.textContent.includes('now cancelled') && `+toast+`.textContent.includes('recorded as cancelled')`, 10*time.Second)
	var buttons int
	run(t, ctx, "counting steer-me's buttons", chromedp.Evaluate(`document.querySelectorAll('tr[data-batch="steer-me"] button').length`, &buttons))
	if buttons != 0 {
		t.Errorf("a cancelled batch offers %d buttons, want none", buttons)
	}
	b, err := e.q.Batch(e.ctx, "steer-me")
	if err != nil || b.State != kftype.BatchCancelled || len(b.History) != 3 {
		t.Fatalf("steer-me's record after the cancel button: %+v %v", b, err)
	}
	// Every item ends with an outcome: those running finish, the rest are
	// cancelled.
	testutil.WaitFor(t, "every item of steer-me with an outcome on the page", 60*time.Second, func() bool {
		var done string
		_ = chromedp.Run(ctx, chromedp.Evaluate(row+`.dataset.done`, &done))
		return done == strconv.Itoa(steerItems)
	})

	noSecretOnPage(t, ctx, e, token)
	t.Logf("screenshot of the dashboard with a paused batch: %s", shot)
}
