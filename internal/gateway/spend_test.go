package gateway_test

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

var (
	miniPrice   = spend.Price{Input: 0.15, Output: 0.6}
	sonnetPrice = spend.Price{Input: 3, Output: 15}
	testPrices  = spend.Prices{"gpt-4o-mini": miniPrice, "claude-sonnet-4-6": sonnetPrice}
)

// apiSpend is what the stand-in's recorded usage of model costs.
func apiSpend(api *fakeapi.Server, model string, p spend.Price) spend.Amount {
	var total spend.Amount
	for _, k := range api.Stats().Keys {
		u := k.ModelUsage[model].RealTime
		total += p.Of(u.InputTokens, u.OutputTokens, 1)
	}
	return total
}

// tenantSpent reads a tenant's account in the ledger for today.
func tenantSpent(t *testing.T, h *harness, tenant string) spend.Account {
	t.Helper()
	_, a, err := h.ledger.Read(t.Context(), "", tenant, spend.PeriodOf(spend.Day, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A request's spend is its reply's usage at its model's price, in its
// tenant's account, whether its reply was streamed (OpenAI's
// include_usage chunk, Anthropic's message_start and message_delta) or
// not; a tenant with a budget reserves before and settles after.
func TestSpendCountsRequests(t *testing.T) {
	h := newHarness(t, setup{prices: testPrices, budgets: map[string]spend.Budget{"support": {Amount: 10 * spend.Unit, Period: spend.Day}}})
	for _, c := range []struct{ path, body string }{
		{"/chat/v1/chat/completions", chatBody},
		{"/chat/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":30,"messages":[{"role":"user","content":"A longer question, streamed."}]}`},
		{"/claude/v1/messages", claudeBody},
		{"/claude/v1/messages", `{"model":"claude-sonnet-4-6","max_tokens":25,"stream":true,"messages":[{"role":"user","content":"Streamed, please."}]}`},
	} {
		headers := bearer(appToken)
		if strings.Contains(c.path, "claude") {
			headers = apiKey(appToken)
		}
		if got := h.post(c.path, c.body, headers...); got.status != 200 {
			t.Fatalf("%s: %d %s", c.path, got.status, got.body)
		}
	}
	want := apiSpend(h.oa, "gpt-4o-mini", miniPrice) + apiSpend(h.an, "claude-sonnet-4-6", sonnetPrice)
	if want == 0 {
		t.Fatal("the API recorded no usage")
	}
	// A request settles its spend once its reply is out: wait for the last.
	var a spend.Account
	testutil.WaitFor(t, "the tenant's spend to be what the API's usage costs", time.Minute, func() bool {
		a = tenantSpent(t, h, "support")
		m := metricValue(t, h, "keyfleet_spend_total", `tenant="support"`)
		return a.Spent == want && a.Reserved == 0 && math.Abs(m-want.Float()) < 1e-9
	})
}

// A tenant out of budget gets a 429 in the provider's shape naming its
// budget, and nothing reaches the API; a request a budget cannot bound
// (no max_tokens, no price) is refused before it is sent.
func TestTenantBudget(t *testing.T) {
	h := newHarness(t, setup{prices: testPrices, budgets: map[string]spend.Budget{"support": {Amount: spend.Unit / 100_000, Period: spend.Day}}})
	got := h.post("/chat/v1/chat/completions", chatBody, bearer(appToken)...)
	if got.status != http.StatusTooManyRequests || got.header.Get("X-Should-Retry") != "false" || got.header.Get("Retry-After") == "" {
		t.Fatalf("over budget: %d %v %s", got.status, got.header, got.body)
	}
	if typ, msg := checkShape(t, got.body, false); typ != "insufficient_quota" || !strings.Contains(msg, "tenant support's budget (0.00001/d) is spent") {
		t.Fatalf("over budget: %s", got.body)
	}
	got = h.post("/claude/v1/messages", claudeBody, apiKey(appToken)...)
	if typ, msg := checkShape(t, got.body, true); got.status != 429 || typ != "rate_limit_error" || !strings.Contains(msg, "budget") {
		t.Fatalf("over budget, Anthropic: %d %s", got.status, got.body)
	}
	for _, c := range []struct{ body, want string }{
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`, "sets no max_tokens"},
		{`{"model":"gpt-5-unpriced","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, `model "gpt-5-unpriced" has no price`},
	} {
		got := h.post("/chat/v1/chat/completions", c.body, bearer(appToken)...)
		if _, msg := checkShape(t, got.body, false); got.status != 400 || !strings.Contains(msg, c.want) {
			t.Fatalf("%s: %d %s", c.body, got.status, got.body)
		}
	}
	if n := len(received(h.oa)) + len(received(h.an)); n != 0 {
		t.Fatalf("the APIs got %d requests; want none", n)
	}
	// A token without a tenant has no budget: it runs, and its spend is
	// known but counts in no tenant.
	if got := h.post("/chat/v1/chat/completions", chatBody, bearer(opsToken)...); got.status != 200 {
		t.Fatalf("ops: %d %s", got.status, got.body)
	}
	testutil.WaitFor(t, "the lease to be settled", time.Minute, func() bool {
		st, err := h.pool.Stats(t.Context())
		return err == nil && st.InFlight == 0
	})
}
