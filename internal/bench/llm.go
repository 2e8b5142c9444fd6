package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Scenario 13: an LLM API. Real worker processes (2 × 4 slots, http kind)
// against internal/fakeapi acting as an LLM API: 4 keys, each 30 requests
// and 6,000 tokens per 10 s (sliding windows), OpenAI's x-ratelimit-*
// headers on every reply, 429s with Retry-After and retry-after-ms; each
// request takes 20 ms. Items carry an estimated cost of 100 to 300 tokens
// (the "cost" field, pool.cost) and use 80% to 120% of it (actual_tokens,
// reported in usage.total_tokens, read by jobs.http.cost_from). The pool
// has no limits configured (max_concurrent 2): the headers and the 429s
// are all it knows. More items are enqueued than the keys can take.
//
// The run lasts k windows (3; 1 with -quick) from the first request, then
// the workers stop. Tokens/s ÷ allowed: the tokens of the 200 answers that
// came in [first request, first request + k × 10 s) ÷ k × 4 × 6,000, the
// most the API's sliding windows allow there. Each answer's tokens are its
// item's actual_tokens; their sum over the run is checked against
// fakeapi's Stats (Tokens). 429s per 1,000 requests come from the Stats.
var llmScenario = &scenario{
	name:  "llm",
	title: "13. LLM API (requests and tokens per key, rate headers)",
	figures: []figSpec{
		{id: "per1000", name: "429s per 1,000 requests (no limits configured; headers and Retry-After)", unit: "per 1,000", goal: atMost(20)},
		{id: "ratio", name: "tokens ÷ allowed, k whole 10 s windows from the first request", unit: "fraction", goal: atLeast(0.85)},
		{id: "tokens_per_s", name: "tokens/s over those windows", unit: "tokens/s", ceiling: "allowed"},
		{id: "allowed", name: "allowed: 4 keys × 6,000 tokens / 10 s", unit: "tokens/s"},
		{id: "requests_ratio", name: "requests ÷ allowed (4 keys × 30 / 10 s) over those windows", unit: "fraction"},
	},
	run: runLLM,
}

const (
	llmKeys     = 4
	llmRequests = 30
	llmTokens   = 6000
	llmPeriod   = 10 * time.Second
)

func runLLM(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	k := pick(r.quick, 3, 1)
	n := (k + 1) * llmKeys * llmRequests * 3 / 2
	ids := credIDs("m", llmKeys)
	keys := make([]fakeapi.Key, len(ids))
	for i := range keys {
		keys[i] = fakeapi.Key{Rate: ratelimit.Limit{N: llmRequests, Period: llmPeriod}, Tokens: ratelimit.Limit{N: llmTokens, Period: llmPeriod}}
	}
	api, err := startAPI(fakeapi.Config{Keys: keys, Latency: 20 * time.Millisecond, RateHeaders: "openai"}, ids)
	if err != nil {
		return nil, err
	}
	defer api.close()
	spec := fleetSpec{concurrency: 4, httpURL: api.url, cost: true, costFrom: "usage.total_tokens"}
	for _, id := range ids {
		spec.creds = append(spec.creds, credSpec{id: id, max: 2})
	}
	rng := rand.New(rand.NewPCG(uint64(r.n), 13))
	actual := map[string]int64{}
	payloads := map[string][]byte{}
	for i := range n {
		id := fmt.Sprintf("item-%06d", i)
		c := 100 + rng.IntN(201)
		actual[id] = int64(c * (80 + rng.IntN(41)) / 100)
		payloads[id] = fmt.Appendf(nil, `{"id":%q,"cost":%d,"actual_tokens":%d}`, id, c, actual[id])
	}
	window := time.Duration(k) * llmPeriod
	var t0 time.Time
	stop := func(ctx context.Context) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if ev := api.events(); len(ev) > 0 {
				t0 = ev[0].at
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("bench: no request reached the API within 30s")
			}
			if err := ctxsleep.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
		return ctxsleep.Sleep(ctx, time.Until(t0.Add(window+200*time.Millisecond)))
	}
	use, _, err := e.runHTTPFleet(ctx, "llm", spec, n, 2, "keyfleet: 2 workers, LLM API, no limits", func(id string) []byte { return payloads[id] }, stop)
	if err != nil {
		return nil, err
	}
	smp.cpu = append(smp.cpu, use)
	st := api.api.Stats()
	if o := st.OverLimit(); o != 0 {
		return nil, fmt.Errorf("bench: the stand-in API admitted %d requests over its limits (its self-check)", o)
	}
	var statTokens, all, in, oks int64
	for _, ks := range st.Keys {
		statTokens += ks.Tokens
	}
	for _, ev := range api.events() {
		if ev.status != http.StatusOK {
			continue
		}
		all += actual[ev.item]
		if ev.at.Before(t0.Add(window)) {
			in += actual[ev.item]
			oks++
		}
	}
	if all != statTokens {
		return nil, fmt.Errorf("bench: the 200 answers' items used %d tokens, fakeapi's Stats say %d", all, statTokens)
	}
	allowed := float64(llmKeys*llmTokens) / llmPeriod.Seconds()
	smp.values["per1000"] = per1000(st)
	smp.values["allowed"] = allowed
	smp.values["tokens_per_s"] = float64(in) / window.Seconds()
	smp.values["ratio"] = float64(in) / float64(int64(k)*llmKeys*llmTokens)
	smp.values["requests_ratio"] = float64(oks) / float64(int64(k)*llmKeys*llmRequests)
	return smp, nil
}
