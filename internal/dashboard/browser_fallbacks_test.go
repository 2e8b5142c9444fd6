package dashboard_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// Fallbacks in a real browser: a batch whose items ran on a fallback kind
// says how many, where and why under its kind; the Fallbacks section
// shows what the workers running now counted (their heartbeats), and is
// hidden while there is none.
func TestFallbacksInBrowser(t *testing.T) {
	e := newEnv(t)
	base := e.startDashboard("")
	ctx := newBrowser(t, e.ctx)
	run(t, ctx, "opening the dashboard", chromedp.Navigate(base+"/"))
	until(t, ctx, "the first reading", `document.body.dataset.sample > 0`, 30*time.Second)
	var hidden bool
	run(t, ctx, "looking at the Fallbacks section", chromedp.Evaluate(`document.getElementById('fallbacks-section').hidden`, &hidden))
	if !hidden {
		t.Error("the Fallbacks section shows while nothing moved")
	}

	if _, err := e.q.AddToBatch(e.ctx, "moved", "chat", 3); err != nil {
		t.Fatal(err)
	}
	for i, why := range []string{kftype.FallbackFailing, kftype.FallbackFailing, ""} {
		r := kftype.Result{Item: fmt.Sprintf("i%d", i), Batch: "moved", Kind: "chat", Outcome: kftype.OutcomeSucceeded,
			CredentialID: "key-a", Worker: "w1", FinishedAt: time.Now().UTC()}
		if why != "" {
			r.Kind, r.CredentialID, r.FallbackFrom, r.FallbackReason = "chat-azure", "az-1", "chat", why
		}
		if err := e.q.PutResult(e.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.q.Announce(e.ctx, queue.WorkerInfo{ID: "w1", Host: "h", State: "running", Concurrency: 4, Kinds: []string{"chat", "chat-azure"},
		Fallbacks: []kftype.FallbackCount{{Kind: "chat", To: "chat-azure", Why: kftype.FallbackWaited, Items: 7}},
		StartedAt: time.Now(), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the batch's fallback line", `!!document.querySelector('tr[data-batch="moved"] .fallback[data-to="chat-azure"][data-why="failing"][data-items="2"]')`, 30*time.Second)
	until(t, ctx, "the Fallbacks section", `!document.getElementById('fallbacks-section').hidden && !!document.querySelector('#fallbacks tr[data-kind="chat"][data-to="chat-azure"][data-why="waited"][data-items="7"]')`, 30*time.Second)
	var text string
	run(t, ctx, "reading the batch's row", textOf(`tr[data-batch="moved"]`, &text))
	if !strings.Contains(text, "2 ran on chat-azure (failing)") {
		t.Errorf("the batch's row does not say its items ran on the fallback:\n%s", text)
	}
}
