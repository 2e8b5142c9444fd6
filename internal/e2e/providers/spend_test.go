package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// docs/operations.md "Spend, budgets and tenants", through the binaries
// against the strict stand-in of OpenAI's API, whose replies report their
// usage exactly: a budget is never overspent (the stand-in's recorded usage
// times the prices), a batch out of budget pauses with the reason and a
// higher budget resumes it; a tenant's budget stops all its batches
// together; tenants share the keys by weight.

// spendPrices are the prices the tests' configs give, per 1,000,000 tokens.
var spendPrices = map[string]spend.Price{"gpt-4o": {Input: 2.5, Output: 10}, "gpt-4o-mini": {Input: 0.15, Output: 0.6}}

const spendPricesYAML = "prices:\n  gpt-4o: {input: 2.5, output: 10}\n  gpt-4o-mini: {input: 0.15, output: 0.6}"

// spendFleet is a fleet of a kind `llm` of provider openai on keys keys of
// the strict stand-in (each limited to rate), with prices, tenants (YAML,
// "" none) and workers × slots.
func spendFleet(t *testing.T, keys int, rate ratelimit.Limit, tenants string, slots int) (*e2etest.Fleet, *fakeapi.Server) {
	t.Helper()
	var fk []fakeapi.Key
	var creds, env []string
	for i := range keys {
		secret := fmt.Sprintf("sk-spend-%02d-secret", i)
		fk = append(fk, fakeapi.Key{Secret: secret, Rate: rate})
		creds = append(creds, fmt.Sprintf("- {id: k%02d, secret_env: KEY_%02d, max_concurrent: 4}", i, i))
		env = append(env, fmt.Sprintf("KEY_%02d=%s", i, secret))
	}
	api, err := fakeapi.New(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: fk, Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	o := e2etest.FleetOptions{
		Pool:        spendPricesYAML,
		Credentials: strings.Join(creds, "\n"),
		Worker:      fmt.Sprintf("concurrency: %d\nretry_backoff: [100ms]", slots),
		Jobs:        fmt.Sprintf("kinds:\n  llm:\n    http: {provider: openai, url: %q}", srv.URL),
		Env:         env,
	}
	f := e2etest.NewFleet(t, o)
	if tenants != "" {
		appendConfig(f, "tenants:\n"+e2etest.Indent(tenants, 2))
	}
	return f, api
}

// appendConfig adds YAML at the end of the fleet's config file.
func appendConfig(f *e2etest.Fleet, yaml string) {
	f.T.Helper()
	if err := os.WriteFile(f.ConfigPath, []byte(f.File("keyfleet.yaml")+yaml+"\n"), 0o600); err != nil {
		f.T.Fatal(err)
	}
}

// spent is what the stand-in's recorded usage costs at spendPrices.
func spentAtAPI(api *fakeapi.Server) spend.Amount {
	var total spend.Amount
	for model, u := range api.Stats().ModelUsage() {
		p := spendPrices[model]
		total += p.Of(u.RealTime.InputTokens, u.RealTime.OutputTokens, 1) + p.Of(u.Batch.InputTokens, u.Batch.OutputTokens, 0.5)
	}
	return total
}

// chatLines writes n chat requests of model, each with max_tokens.
func chatLines(n int, model string, prefix string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"%s-%04d","model":%q,"messages":[{"role":"user","content":"Question %d: summarise the news."}],"max_tokens":40}`+"\n",
			prefix, i, model, i)
	}
	return b.String()
}

// batchJSON is `producer batch show ID --json`.
func batchJSON(f *e2etest.Fleet, id string) map[string]any {
	f.T.Helper()
	r := f.Producer(nil, "batch", "show", id, "--json")
	var b map[string]any
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &b) != nil {
		f.T.Fatalf("batch show:\n%s", r)
	}
	return b
}

func TestBudgetNeverOverspent(t *testing.T) {
	f, api := spendFleet(t, 8, ratelimit.Limit{}, "", 16)
	f.StartWorker("w1")
	f.StartWorker("w2")
	const budget = "0.02"
	path := f.WriteInput("paid.jsonl", chatLines(400, "gpt-4o", "q"))
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--batch", "paid", "--budget", budget, path); r.Code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}
	var b map[string]any
	testutil.WaitFor(t, "the batch to pause for its budget", time.Minute, func() bool {
		b = batchJSON(f, "paid")
		return b["state"] == "paused" && b["paused_reason"] == "budget"
	})
	// Items running when it paused finish: wait for the API to go quiet.
	var atAPI spend.Amount
	testutil.WaitFor(t, "the running items to finish", 30*time.Second, func() bool {
		before := spentAtAPI(api)
		time.Sleep(200 * time.Millisecond)
		atAPI = spentAtAPI(api)
		return atAPI == before
	})
	limit, _ := spend.ParseAmount(budget)
	if atAPI > limit {
		t.Fatalf("overspent: the API's usage costs %s, the budget is %s", atAPI, limit)
	}
	if atAPI < limit*80/100 {
		t.Errorf("the batch paused having spent %s of %s: the budget is barely used", atAPI, limit)
	}
	done := b["done"].(float64)
	if done <= 0 || done >= 400 {
		t.Fatalf("done %v of 400 when it paused", done)
	}
	// A higher budget resumes it; it pauses again at that one.
	r := f.Producer(nil, "batch", "set", "paid", "--budget", "0.03", "--json")
	var set struct {
		Resumed bool `json:"resumed"`
	}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &set) != nil || !set.Resumed {
		t.Fatalf("batch set --budget: want resumed:\n%s", r)
	}
	testutil.WaitFor(t, "more items done, then a pause at the new budget", time.Minute, func() bool {
		b = batchJSON(f, "paid")
		return b["done"].(float64) > done && b["state"] == "paused"
	})
	testutil.WaitFor(t, "the running items to finish", 30*time.Second, func() bool {
		before := spentAtAPI(api)
		time.Sleep(200 * time.Millisecond)
		atAPI = spentAtAPI(api)
		return atAPI == before
	})
	if limit, _ = spend.ParseAmount("0.03"); atAPI > limit {
		t.Fatalf("overspent after the raise: %s of %s", atAPI, limit)
	}
	if logs := f.Logs(); strings.Contains(logs, "sk-spend-") {
		t.Error("a secret reached the logs")
	}
}

// An item of a model without a price cannot start under a budget: it is
// dead-lettered, naming the model; priced items run.
func TestBudgetRefusesAnUnpricedModel(t *testing.T) {
	f, _ := spendFleet(t, 2, ratelimit.Limit{}, "", 4)
	f.StartWorker("w1")
	lines := chatLines(3, "gpt-4o-mini", "ok") + `{"id":"odd","model":"gpt-5-unpriced","messages":[{"role":"user","content":"x"}],"max_tokens":5}` + "\n"
	path := f.WriteInput("mixed.jsonl", lines)
	r := f.Producer(nil, "enqueue", "--kind", "llm", "--batch", "mixed", "--budget", "1", "--wait", path)
	if r.Code != 1 {
		t.Fatalf("enqueue --wait: want exit 1 (one item failed):\n%s", r)
	}
	res := f.WaitResults("mixed", 4, 30*time.Second)
	if o := res["odd"]; o.Outcome != "failed" || !strings.Contains(o.Error, "gpt-5-unpriced") || !strings.Contains(o.Error, "price") {
		t.Errorf("the unpriced item: %s %q, want failed naming its model and the missing price", o.Outcome, o.Error)
	}
	for i := range 3 {
		if o := res[fmt.Sprintf("ok-%04d", i)]; o.Outcome != "succeeded" || o.Spend <= 0 {
			t.Errorf("ok-%04d: %s, spend %s", i, o.Outcome, o.Spend)
		}
	}
}

// A tenant's budget of the day stops all its batches together; another
// tenant's batch runs on.
func TestTenantBudgetStopsAllItsBatches(t *testing.T) {
	f, api := spendFleet(t, 4, ratelimit.Limit{}, "research: {weight: 1, budget: 0.01/d}\nsupport: {weight: 1}", 8)
	f.StartWorker("w1")
	for _, b := range []string{"r1", "r2"} {
		path := f.WriteInput(b+".jsonl", chatLines(200, "gpt-4o", b))
		if r := f.Producer(nil, "enqueue", "--kind", "llm", "--batch", b, "--tenant", "research", path); r.Code != 0 {
			t.Fatalf("enqueue %s:\n%s", b, r)
		}
	}
	path := f.WriteInput("s1.jsonl", chatLines(20, "gpt-4o-mini", "s1"))
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--batch", "s1", "--tenant", "support", path); r.Code != 0 {
		t.Fatalf("enqueue s1:\n%s", r)
	}
	testutil.WaitFor(t, "both of research's batches paused for the tenant's budget", time.Minute, func() bool {
		a, b := batchJSON(f, "r1"), batchJSON(f, "r2")
		return a["paused_reason"] == "tenant-budget" && b["paused_reason"] == "tenant-budget"
	})
	f.WaitResults("s1", 20, 30*time.Second)
	testutil.WaitFor(t, "the running items to finish", 30*time.Second, func() bool {
		before := spentAtAPI(api)
		time.Sleep(200 * time.Millisecond)
		return spentAtAPI(api) == before
	})
	research := spend.Amount(0)
	for model, u := range api.Stats().ModelUsage() {
		if model == "gpt-4o" {
			research += spendPrices[model].Of(u.RealTime.InputTokens, u.RealTime.OutputTokens, 1)
		}
	}
	if limit, _ := spend.ParseAmount("0.01"); research > limit {
		t.Fatalf("research overspent its day: %s of %s", research, limit)
	}
	r := f.Producer(nil, "status", "--json")
	var st struct {
		Tenants []struct {
			Name  string
			Spent float64
		}
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || len(st.Tenants) != 2 || st.Tenants[0].Name != "research" || st.Tenants[0].Spent <= 0 {
		t.Errorf("status --json tenants: %+v %v", st.Tenants, err)
	}
}

// Two tenants of weight 2 and 1, each with three batches, share the keys
// 2:1 while all wait for them.
func TestTenantsShareByWeight(t *testing.T) {
	f, _ := spendFleet(t, 2, ratelimit.Limit{N: 50, Period: time.Second}, "heavy: {weight: 2}\nlight: {weight: 1}", 8)
	for i := range 3 {
		for _, tn := range []string{"heavy", "light"} {
			b := fmt.Sprintf("%s-%d", tn, i)
			path := f.WriteInput(b+".jsonl", chatLines(300, "gpt-4o-mini", b))
			if r := f.Producer(nil, "enqueue", "--kind", "llm", "--batch", b, "--tenant", tn, path); r.Code != 0 {
				t.Fatalf("enqueue %s:\n%s", b, r)
			}
		}
	}
	f.StartWorker("w1")
	f.StartWorker("w2")
	// The share is read from the results' finish times, in process: the
	// items finished between the 100th and the 1,000th result, while both
	// tenants still hold a backlog (heavy's 900 last until about the
	// 1,350th). Counting through the CLI took seconds under load, long
	// enough for the counts to be of different moments.
	var finished []kftype.Result
	testutil.WaitFor(t, "1,000 items done", 2*time.Minute, func() bool {
		finished = finished[:0]
		if err := f.Queue.ReadResults(context.Background(), "", func(r kftype.Result) error {
			finished = append(finished, r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return len(finished) >= 1000
	})
	slices.SortFunc(finished, func(a, b kftype.Result) int { return a.FinishedAt.Compare(b.FinishedAt) })
	from, to := finished[99].FinishedAt, finished[999].FinishedAt
	var heavy, light float64
	for _, r := range finished {
		if !r.FinishedAt.After(from) || r.FinishedAt.After(to) {
			continue
		}
		if strings.HasPrefix(r.Batch, "heavy-") {
			heavy++
		} else {
			light++
		}
	}
	ratio := heavy / max(light, 1)
	t.Logf("heavy %v, light %v: %.2f", heavy, light, ratio)
	if ratio < 1.7 || ratio > 2.4 {
		t.Errorf("tenants 2:1: heavy did %v, light %v (%.2f) between the 100th and the 1,000th result, want 1.7-2.4", heavy, light, ratio)
	}
}
