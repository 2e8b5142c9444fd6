package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// chromiumPath is Debian's chromium (.ci/run installs it), or
// $KEYFLEET_CHROMIUM.
func chromiumPath() string {
	if p := os.Getenv("KEYFLEET_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// newBrowser starts a headless Chromium with a fresh profile, closed when
// the test ends. A missing Chromium fails the test: the page is only
// tested in a real browser.
func newBrowser(t *testing.T, parent context.Context) context.Context {
	t.Helper()
	path := chromiumPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the dashboard's browser tests need Chromium at %s (Debian: apt-get install chromium; .ci/run installs it; "+
			"or set KEYFLEET_CHROMIUM): %v", path, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(string, ...any) {}))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	return ctx
}

// run runs browser actions, failing the test with what was being done.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var html string
		_ = chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector('main') ? document.querySelector('main').innerText : ''`, &html))
		t.Fatalf("%s: %v\npage text:\n%.3000s", what, err, html)
	}
}

// until waits for a JavaScript condition on the page.
func until(t *testing.T, ctx context.Context, what, expr string, timeout time.Duration) {
	t.Helper()
	var ok bool
	run(t, ctx, "waiting for "+what, chromedp.Poll(expr, &ok, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(50*time.Millisecond)))
}

// noSecretOnPage fails the test if the page's HTML or text holds a
// secret of the env or the token.
func noSecretOnPage(t *testing.T, ctx context.Context, e *env, token string) {
	t.Helper()
	var html string
	run(t, ctx, "reading the page", chromedp.Evaluate(`document.documentElement.outerHTML + document.body.innerText`, &html))
	for _, s := range e.sensitive(token) {
		if strings.Contains(html, s) {
			t.Errorf("the page holds a secret (%.12s…)", s)
		}
	}
}

func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

// The page in a real browser: it shows every key with its state and why,
// a batch's progress once its scripts ran, and updates itself (no reload)
// while items complete; a write without the token is refused, in the page
// and over fetch; with the token it works; no secret reaches the page.
// A screenshot is left for a person to look at.
func TestDashboardInBrowser(t *testing.T) {
	e := newEnv(t)
	token := randomSecret("admin-", 16)
	e.startWorker("worker-1")
	base := e.startDashboard(token)
	testutil.WaitFor(t, "the worker's keys in the pool", 30*time.Second, func() bool {
		st, err := e.pool.Stats(e.ctx)
		return err == nil && st.Total == 4
	})
	if _, err := e.pool.MarkCooling(e.ctx, "key-c", 10*time.Minute, "429 from the API: Retry-After 600 s (header retry-after)"); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.Disable(e.ctx, "key-d", "401 Unauthorized: invalid API key"); err != nil {
		t.Fatal(err)
	}
	// A key the API disabled and a probe enabled again shows the probe's
	// answer.
	const probeCause = "probe GET https://api.example.com/v1/models answered 200 OK"
	l, err := e.pool.Acquire(e.ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	probed := l.CredentialID
	if err := e.pool.Settle(e.ctx, l, creds.Outcome{Disable: "401 Unauthorized"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.pool.EnableAfterProbe(e.ctx, probed, probeCause); err != nil || !ok {
		t.Fatalf("EnableAfterProbe(%s): %v, %v", probed, ok, err)
	}
	docs := map[string]string{"doc-bad": `{"id":"doc-bad"}`}
	for i := 1; i <= 8; i++ {
		id := fmt.Sprintf("doc-%02d", i)
		docs[id] = fmt.Sprintf(`{"id":%q,"ms":100}`, id)
	}
	e.enqueue("docs-2026-11", "exec", docs)

	ctx := newBrowser(t, e.ctx)
	run(t, ctx, "opening the dashboard", chromedp.Navigate(base+"/"))
	until(t, ctx, "the four keys", `document.querySelectorAll('.cred').length === 4`, 30*time.Second)
	var cardC, cardD, cardProbed string
	run(t, ctx, "reading the cards",
		textOf(`.cred[data-id="key-c"]`, &cardC),
		textOf(`.cred[data-id="key-d"]`, &cardD),
		textOf(`.cred[data-id="`+probed+`"]`, &cardProbed))
	// Without the admin token the page shows no text an API or a probe
	// wrote: the class of a reason, who did what, and the IDs.
	if !strings.Contains(cardProbed, "enabled by probe: "+status.Hidden) || strings.Contains(cardProbed, probeCause) {
		t.Errorf("%s's card (no token entered) does not show that a probe enabled it, or shows the probe's answer:\n%s", probed, cardProbed)
	}
	if !strings.Contains(cardC, "resting until") || strings.Contains(cardC, "Retry-After 600 s") {
		t.Errorf("key-c's card (no token entered) does not say it rests, or shows the API's text:\n%s", cardC)
	}
	if !strings.Contains(cardD, "disabled") || !strings.Contains(cardD, "invalid API key") || !strings.Contains(cardD, "by an operator") {
		t.Errorf("key-d's card does not say it is disabled, why and by whom:\n%s", cardD)
	}
	until(t, ctx, "key-a's chart", `(() => { const i = document.querySelector('.cred[data-id="key-a"] img.chart'); return i && i.complete && i.naturalWidth > 0 })()`, 30*time.Second)

	// The batch's progress once its scripts ran: 9 done, 1 failed.
	row := `document.querySelector('tr[data-batch="docs-2026-11"]')`
	until(t, ctx, "batch docs-2026-11 complete", row+` && `+row+`.dataset.done === '9'`, 60*time.Second)
	var rowText string
	run(t, ctx, "reading the batch row", textOf(`tr[data-batch="docs-2026-11"]`, &rowText))
	if !strings.Contains(rowText, "9 / 9 (100%)") || !strings.Contains(rowText, "done") {
		t.Errorf("the batch row does not show 9 / 9 done:\n%s", rowText)
	}
	until(t, ctx, "doc-bad in the dead letters", `!!document.querySelector('#deadletters tr[data-item="doc-bad"]')`, 30*time.Second)

	// Live: the page updates as items complete, without a reload.
	run(t, ctx, "marking the page", chromedp.Evaluate(`window.__kfMarker = 'kept'`, nil))
	slow := map[string]string{}
	for i := 1; i <= 6; i++ {
		id := fmt.Sprintf("slow-%d", i)
		slow[id] = fmt.Sprintf(`{"id":%q,"ms":2500}`, id)
	}
	e.enqueue("slow-run", "exec", slow)
	srow := `document.querySelector('tr[data-batch="slow-run"]')`
	until(t, ctx, "batch slow-run at 0 of 6", srow+` && `+srow+`.dataset.total === '6'`, 30*time.Second)
	until(t, ctx, "worker-1 busy on the page", `(() => { const r = document.querySelector('tr[data-worker="worker-1"]'); return r && +r.dataset.busy > 0 })()`, 30*time.Second)
	until(t, ctx, "the first items of slow-run done", srow+` && +`+srow+`.dataset.done >= 3`, 60*time.Second)

	shot := screenshot(t, ctx)
	until(t, ctx, "slow-run complete", srow+` && `+srow+`.dataset.done === '6'`, 60*time.Second)
	var marker string
	run(t, ctx, "reading the marker", chromedp.Evaluate(`window.__kfMarker || 'reloaded'`, &marker))
	if marker != "kept" {
		t.Errorf("the page reloaded instead of updating itself")
	}

	// Writes without the token are refused, from the page and over fetch.
	var codes []int
	run(t, ctx, "writing without the token", chromedp.Evaluate(`Promise.all([
		fetch('/api/creds/disable', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{"id":"key-a"}'}).then(r => r.status),
		fetch('/api/creds/disable', {method: 'POST', headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer not-the-token-0000'}, body: '{"id":"key-a"}'}).then(r => r.status),
		fetch('/api/dlq/replay', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'}).then(r => r.status),
	])`, &codes, awaitPromise))
	for i, c := range codes {
		if c != 401 {
			t.Errorf("write %d without the right token: want 401, got %d", i, c)
		}
	}
	enable := `.cred[data-id="key-d"] button.action`
	toast := `document.getElementById('toast')`
	run(t, ctx, "enabling key-d without a token", clickOn(enable))
	until(t, ctx, "the page to ask for the token", `!`+toast+`.hidden && `+toast+`.textContent.includes('admin token')`, 10*time.Second)
	run(t, ctx, "enabling key-d with a wrong token",
		chromedp.SendKeys(`#token`, "wrong-token-0123456789", chromedp.ByQuery),
		clickOn(enable))
	until(t, ctx, "the refusal", toast+`.textContent.includes('refused (401)')`, 10*time.Second)
	if st := credState(t, e, "key-d"); st != creds.StateDisabled {
		t.Fatalf("a refused write changed key-d: %s", st)
	}
	run(t, ctx, "enabling key-d with the token",
		chromedp.Evaluate(`document.getElementById('token').value = ''`, nil),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
		clickOn(enable))
	until(t, ctx, "key-d enabled on the page", `document.querySelector('.cred[data-id="key-d"]').dataset.state !== 'disabled'`, 10*time.Second)
	if st := credState(t, e, "key-d"); st == creds.StateDisabled {
		t.Errorf("key-d still disabled in the pool")
	}
	// With the token entered, the page reads the job and API text.
	until(t, ctx, "the probe's answer and the rest's reason, with the token",
		`document.querySelector('.cred[data-id="`+probed+`"]').innerText.includes(`+strconv.Quote(probeCause)+`) && `+
			`document.querySelector('.cred[data-id="key-c"]').innerText.includes('Retry-After 600 s')`, 10*time.Second)

	// No secret and not the token in what the page holds.
	noSecretOnPage(t, ctx, e, token)
	t.Logf("screenshot of the dashboard mid-run: %s", shot)
}

// screenshot writes the whole page as a PNG into a temporary directory
// that outlives the test (for a person to look at) and, when
// $KEYFLEET_DASHBOARD_SCREENSHOT names a file, there too (docs/dashboard.png).
func screenshot(t *testing.T, ctx context.Context) string {
	t.Helper()
	var png []byte
	run(t, ctx, "taking a screenshot", chromedp.FullScreenshot(&png, 100))
	dir, err := os.MkdirTemp("", "keyfleet-dashboard-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if extra := os.Getenv("KEYFLEET_DASHBOARD_SCREENSHOT"); extra != "" {
		if err := os.WriteFile(extra, png, 0o644); err != nil {
			t.Errorf("writing the screenshot to $KEYFLEET_DASHBOARD_SCREENSHOT: %v", err)
		}
	}
	return path
}

func credState(t *testing.T, e *env, id string) string {
	t.Helper()
	st, err := e.pool.Stats(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Credentials {
		if c.ID == id {
			return c.State
		}
	}
	t.Fatalf("no %s in the pool", id)
	return ""
}

// textOf reads an element's text in one evaluation in the page: the page
// re-renders parts of itself live, so a node found by one DevTools call
// may be gone by the next.
func textOf(sel string, out *string) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : '' })()`, sel), out)
}

// clickOn clicks an element in one evaluation in the page (see textOf).
func clickOn(sel string) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error('no ' + %q); e.click(); return true })()`, sel, sel), nil)
}
