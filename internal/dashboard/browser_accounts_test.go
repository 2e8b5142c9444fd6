package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The page shows the pool's accounts: their limits and use, their keys
// and their rest with its cause, the API's text hidden without the token;
// each key's card names its account.
func TestAccountsInBrowser(t *testing.T) {
	e := newEnv(t)
	five, err := creds.ParseLimit("rate=5/m")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pool.Define(e.ctx, creds.Definitions{
		Accounts: []creds.Account{{ID: "org-a", Limits: []creds.Limit{five}}},
		Credentials: []creds.Credential{
			{ID: "key-a", MaxConcurrent: 1, Account: "org-a"}, {ID: "key-b", MaxConcurrent: 1, Account: "org-a"},
			{ID: "key-c", MaxConcurrent: 1}, {ID: "key-d", MaxConcurrent: 1},
		},
	}); err != nil {
		t.Fatal(err)
	}
	l, err := e.pool.AcquireWith(e.ctx, creds.Request{Owner: "test", Keys: mustKeySet(t, "key-a")})
	if err != nil {
		t.Fatal(err)
	}
	const apiText = "429 Too Many Requests: {\"error\":\"slow down, org-a\"}"
	if err := e.pool.Settle(e.ctx, l, creds.Outcome{RateLimited: true, Rest: 10 * time.Minute, RestReason: apiText,
		RestCause: "retry-after header"}); err != nil {
		t.Fatal(err)
	}
	base := e.startDashboard(randomSecret("admin-", 16))
	ctx := newBrowser(t, e.ctx)
	run(t, ctx, "opening the dashboard", chromedp.Navigate(base+"/"))
	until(t, ctx, "the account's row", `!!document.querySelector('tr[data-account="org-a"]')`, 30*time.Second)
	var row, card string
	run(t, ctx, "reading the row and a card", textOf(`tr[data-account="org-a"]`, &row), textOf(`.cred[data-id="key-b"]`, &card))
	for _, want := range []string{"org-a", "cooling", "key-a, key-b", "rate=5/m", "1 / 5", "retry-after header", status.Hidden} {
		if !strings.Contains(row, want) {
			t.Errorf("the account's row lacks %q:\n%s", want, row)
		}
	}
	if strings.Contains(row, "slow down") {
		t.Errorf("the account's row shows the API's text without the token:\n%s", row)
	}
	if !strings.Contains(card, "account: org-a") {
		t.Errorf("key-b's card does not name its account:\n%s", card)
	}
}

func mustKeySet(t *testing.T, ids ...string) *creds.KeySet {
	t.Helper()
	k, err := creds.NewKeySet(ids...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
