package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// Spend and tenants' budgets count gateway requests as they count batch
// runs: each request's spend is its reply's usage at its model's price,
// in its tenant's account of the period (`producer status --json`
// tenants), reserved at its most before it is sent so that the budget is
// never overspent; once the budget cannot cover the next request, the
// tenant's requests get 429 naming the budget, and reach no key.
func TestSpendAndBudgetsCountGatewayRequests(t *testing.T) {
	price := spend.Price{Input: 1000, Output: 2000} // per 1,000,000 tokens: a thousandth and two per token
	f := newFleet(t, options{
		pool: "prices:\n  gpt-4o-mini: {input: 1000, output: 2000}",
		top:  "tenants:\n  support: {budget: 0.5/d}\n",
	})
	f.startWorker("w1")
	answered := 0
	var refused reply
	for i := range 60 {
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Question %d, in a few words."}],"max_tokens":20}`, i)
		got := post(t, f.gateway+"/chat/v1/chat/completions", body, "Authorization", "Bearer "+appToken)
		if got.status == http.StatusTooManyRequests {
			refused = got
			break
		}
		if got.status != 200 {
			t.Fatalf("request %d: %d %s", i, got.status, got.body)
		}
		answered++
	}
	if refused.status == 0 || answered == 0 {
		t.Fatalf("%d requests answered and none refused: the budget of 0.5/d did not bind", answered)
	}
	if !strings.Contains(refused.body, "tenant support's budget (0.5/d) is spent") || !strings.Contains(refused.body, `"type":"insufficient_quota"`) {
		t.Fatalf("the refusal does not name the budget: %s", refused.body)
	}
	var want spend.Amount
	for _, k := range f.oa.Stats().Keys {
		u := k.ModelUsage["gpt-4o-mini"].RealTime
		want += price.Of(u.InputTokens, u.OutputTokens, 1)
	}
	if int64(len(f.oa.Received())) != int64(answered) {
		t.Fatalf("the API got %d requests for %d answered: the refused one reached it", len(f.oa.Received()), answered)
	}
	// A request settles its spend once its reply is out.
	testutil.WaitFor(t, "status to show the tenant's spend", time.Minute, func() bool {
		st, _ := f.StatusJSON()
		for _, tn := range st.Tenants {
			if tn.Name == "support" {
				if tn.Spent > spend.Unit/2 {
					t.Fatalf("tenant support spent %s of a budget of 0.5", tn.Spent)
				}
				return tn.Spent == want && tn.Reserved == 0
			}
		}
		return false
	})
	// Another tenant's token is not bound by support's budget.
	if got := post(t, f.gateway+"/chat/v1/chat/completions", chatBody, "Authorization", "Bearer "+opsToken); got.status != 200 {
		t.Fatalf("a token of no tenant: %d %s", got.status, got.body)
	}
	if v := metricLine(f.metrics(), `keyfleet_spend_total{model="gpt-4o-mini",tenant="support"}`); v == "" {
		t.Fatalf("/metrics has no spend of tenant support")
	}
}
