package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The search box in a real browser: an item found by its batch (offered
// by the batch box) and ID shows its state, attempts and key; its error
// only once the admin token is entered; an unknown item says so.
func TestFindItemInBrowser(t *testing.T) {
	e := newEnv(t)
	token := randomSecret("admin-", 16)
	e.startWorker("worker-1")
	base := e.startDashboard(token)
	e.enqueue("nightly", "exec", map[string]string{"doc-1": `{"id":"doc-1","ms":1}`, "doc-bad": `{"id":"doc-bad"}`})
	ctx := newBrowser(t, e.ctx)
	run(t, ctx, "opening the dashboard", chromedp.Navigate(base+"/"))
	until(t, ctx, "nightly done and offered in the batch box",
		`(() => { const r = document.querySelector('tr[data-batch="nightly"]'); return r && r.dataset.state === 'done' &&
			!!document.querySelector('#batch-ids option[value="nightly"]') })()`, 60*time.Second)

	find := func(batch, item string) {
		t.Helper()
		run(t, ctx, "finding "+item,
			chromedp.SetValue(`#item-batch`, batch, chromedp.ByQuery),
			chromedp.SetValue(`#item-id`, item, chromedp.ByQuery),
			clickOn(`#item-form button[type=submit]`))
	}
	find("nightly", "doc-bad")
	until(t, ctx, "doc-bad dead-lettered", `!!document.querySelector('#item-result .item-view[data-item="doc-bad"] [data-state="dead-lettered"]')`, 10*time.Second)
	var text string
	run(t, ctx, "reading the item", textOf(`#item-result`, &text))
	for _, want := range []string{"doc-bad", "of batch nightly", "attempts", "1", "key", "key-", "permanent failure", "enter the admin token"} {
		if !strings.Contains(text, want) {
			t.Errorf("without the token, the item lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "refused: empty text") {
		t.Errorf("without the token, the item shows the job's error:\n%s", text)
	}

	run(t, ctx, "entering the token", chromedp.SendKeys(`#token`, token, chromedp.ByQuery))
	find("nightly", "doc-bad")
	until(t, ctx, "the job's error", `(document.querySelector('#item-result .item-error') || {}).textContent?.includes('refused: empty text')`, 10*time.Second)

	find("nightly", "doc-1")
	until(t, ctx, "doc-1 succeeded with its output", `!!document.querySelector('#item-result [data-state="succeeded"]') &&
		(document.querySelector('#item-result .item-output') || {}).textContent?.includes('"ok":true')`, 10*time.Second)

	find("nightly", "no-such-item")
	until(t, ctx, "the 404", `(document.querySelector('#item-result [data-item-error="404"]') || {}).textContent?.includes('no item "no-such-item"')`, 10*time.Second)
}
