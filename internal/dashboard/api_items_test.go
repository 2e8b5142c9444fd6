package dashboard_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// GET /api/batches/{id}/items/{item}: where one item is, as `producer item
// show --json` prints it. Its error and output (what the job wrote) only
// with the admin token; its state, attempts, key and reason for anyone.
// An ID with a slash or a space works; an unknown item is a 404, a bad ID
// a 400; no secret in any answer.
func TestItemAPI(t *testing.T) {
	e := newEnv(t)
	token := randomSecret("admin-", 16)
	base := e.startDashboard(token)
	rec := &recorder{}
	get := func(batch, item string, withToken bool) (int, itemview.Item, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/api/batches/"+url.PathEscape(batch)+"/items/"+url.PathEscape(item), nil)
		if err != nil {
			t.Fatal(err)
		}
		if withToken {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		code, body := rec.do(t, req)
		var it itemview.Item
		if code == http.StatusOK {
			if err := json.Unmarshal([]byte(body), &it); err != nil {
				t.Fatalf("not an item: %v\n%s", err, body)
			}
		}
		return code, it, body
	}

	e.enqueue("find me", "exec", map[string]string{
		"docs/1": `{"id":"docs/1","ms":1}`, "doc bad": `{"id":"doc bad"}`,
	})
	// No worker yet: both wait.
	if code, it, body := get("find me", "docs/1", false); code != http.StatusOK || it.State != itemview.StateWaiting || it.Item != "docs/1" ||
		it.Batch != "find me" || it.Message == nil {
		t.Fatalf("a waiting item: %d %s", code, body)
	}

	e.startWorker("w1")
	testutil.WaitFor(t, "both items settled", time.Minute, func() bool {
		_, a, _ := get("find me", "docs/1", true)
		_, b, _ := get("find me", "doc bad", true)
		return a.State == itemview.StateSucceeded && b.State == itemview.StateDeadLettered
	})
	code, it, body := get("find me", "doc bad", false)
	if code != http.StatusOK || it.State != itemview.StateDeadLettered || it.Reason != "permanent failure" || it.Attempts != 1 ||
		it.CredentialID == "" || it.Error != "" || it.Output != "" || !it.TextHidden || strings.Contains(body, "refused: empty text") {
		t.Fatalf("without the token: the state, reason, attempts and key, no job text; got %d %s", code, body)
	}
	code, it, body = get("find me", "doc bad", true)
	if code != http.StatusOK || !strings.Contains(it.Error, "refused: empty text") || it.TextHidden || it.DeadLetter == nil ||
		!strings.Contains(it.DeadLetter.Error, "refused: empty text") {
		t.Fatalf("with the token: the job's error too; got %d %s", code, body)
	}
	if _, it, body = get("find me", "docs/1", true); it.Output != `{"ok":true}`+"\n" || it.Attempts != 1 {
		t.Fatalf("a succeeded item's output: %s", body)
	}
	if code, _, body := get("find me", "nope", true); code != http.StatusNotFound || !strings.Contains(body, `no item \"nope\" in batch \"find me\"`) {
		t.Fatalf("an unknown item: want 404 naming it, got %d %s", code, body)
	}
	if code, _, _ := get("find me", strings.Repeat("x", 600), false); code != http.StatusBadRequest {
		t.Fatalf("a too long ID: want 400, got %d", code)
	}
	rec.scan(t, e.sensitive(token))
}
