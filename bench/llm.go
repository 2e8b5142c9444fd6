package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

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
	run: func(ctx context.Context, e *env, r runInfo) (*sample, error) {
		s, err := runLLM(ctx, e, r, llmVariant{tag: "llm", variant: "keyfleet: 2 workers, LLM API, no limits", headers: "openai"})
		return s.sample, err
	},
}

// Scenario 13b: the same LLM API, the pool told 95% of both its limits:
// every credential has limits [{rate: 28/10s}, {cost: 5700/10s}] (30 and
// 6,000, 95% rounded down), the rest as in 13: (a) with its rate headers,
// (b) without them (the told limits and the 429s' Retry-After alone), a
// run of k windows each. The API counts a request when it arrives, the
// pool when it grants the lease: the figures below the 429s break those
// of both phases down by what the API's window held that the pool's did
// not (skew.go); one line per 429 goes to logs/llm95?-skew-<run>.txt
// (kfbench -keep keeps it).
var llm95Scenario = &scenario{
	name:  "llm95",
	title: "13b. LLM API, limits told at 95%",
	figures: []figSpec{
		{id: "per1000", name: "(a) rate headers as in 13: 429s per 1,000 requests", unit: "per 1,000", goal: atMost(5)},
		{id: "ratio", name: "(a) tokens ÷ allowed, k whole 10 s windows from the first request (goodput)", unit: "fraction", goal: atLeast(0.90)},
		{id: "requests_ratio", name: "(a) requests ÷ allowed (4 keys × 30 / 10 s) over those windows", unit: "fraction"},
		{id: "b_per1000", name: "(b) no rate headers (the told limits and Retry-After): 429s per 1,000 requests", unit: "per 1,000", goal: atMost(5)},
		{id: "b_ratio", name: "(b) tokens ÷ allowed (goodput)", unit: "fraction"},
		{id: "b_requests_ratio", name: "(b) requests ÷ allowed", unit: "fraction"},
		{id: "dispatch_p50", name: "lease grant → request at the API, p50 (200 answers, a and b)", unit: "ms",
			note: "the results' leased_at (Redis's clock) to the API's arrival (the same machine's clock)"},
		{id: "dispatch_p99", name: "lease grant → request at the API, p99", unit: "ms"},
		{id: "skew_n", name: "429s of a and b broken down (the API's window at each against the pool's at its grant)", unit: "429s"},
		{id: "skew_tokens", name: "… refused by the token limit (the rest: the request limit)", unit: "fraction"},
		{id: "skew_jitter", name: "… that the API would have admitted without requests granted outside the pool's window (grant → arrival skew)", unit: "fraction"},
		{id: "skew_cost", name: "… else without the difference between charged estimates and reconciled costs", unit: "fraction"},
		{id: "skew_other", name: "… neither", unit: "fraction"},
		{id: "skew_retry", name: "… on an item refused before (a retry)", unit: "fraction"},
		{id: "skew_over", name: "… whose grant found the pool's window over the told limit (must be 0)", unit: "429s", goal: never("<=", 0)},
		{id: "skew_unmatched", name: "… whose lease was not found in the pool's logs", unit: "429s"},
		{id: "skew_lead_p50", name: "request granted outside the pool's window yet inside the API's: how much later it arrived after its grant than the refused one, p50", unit: "ms"},
	},
	run: runLLM95,
}

// runLLM95 runs 13b's two phases and breaks down their 429s together.
func runLLM95(ctx context.Context, e *env, r runInfo) (*sample, error) {
	limits := fmt.Sprintf("[{rate: %d/10s}, {cost: %d/10s}]", llmRequests*95/100, llmTokens*95/100)
	smp := newSample()
	var all skew
	var dispatch []float64
	for _, v := range []llmVariant{
		{tag: "llm95a", variant: "keyfleet: 2 workers, LLM API, limits told at 95%", limits: limits, headers: "openai", skew: true},
		{tag: "llm95b", variant: "keyfleet: 2 workers, LLM API without rate headers, limits told at 95%", limits: limits, skew: true},
	} {
		s, err := runLLM(ctx, e, r, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.tag, err)
		}
		pfx := ""
		if v.headers == "" {
			pfx = "b_"
		}
		for _, id := range []string{"per1000", "ratio", "requests_ratio"} {
			smp.values[pfx+id] = s.values[id]
		}
		smp.cpu = append(smp.cpu, s.cpu...)
		all.add(s.skew)
		dispatch = append(dispatch, s.dispatch...)
		// One line per 429, kept with the run's logs (-keep).
		_ = os.WriteFile(filepath.Join(e.dir, "logs", fmt.Sprintf("%s-skew-%d.txt", v.tag, r.n)), []byte(strings.Join(s.skew.lines, "\n")+"\n"), 0o600)
	}
	slices.Sort(dispatch)
	smp.values["dispatch_p50"], smp.values["dispatch_p99"] = quantile(dispatch, 0.5), quantile(dispatch, 0.99)
	slices.Sort(all.lead)
	all.put(smp)
	return smp, nil
}

// llmVariant is what the pool is told of the LLM API.
type llmVariant struct {
	tag, variant string
	// limits are every credential's (a YAML flow sequence; "" none).
	limits string
	// headers: the API's rate headers (fakeapi.Config.RateHeaders).
	headers string
	// skew follows the pool's window logs and breaks the 429s down.
	skew bool
	// handler, when set, calls the API instead of the http kind: a
	// persistent exec handler, "python" (examples/python/handler.py) or
	// "node" (examples/node/handler.mjs, on the official openai package),
	// which passes the reply's rate-limit headers back in its answers.
	handler string
}

// Scenario 13d: the LLM API of 13 (limits not told, OpenAI's headers)
// called by a persistent handler instead of the http kind: the example
// handlers, which pass the API's rate-limit headers back in their
// answers, and the keys are paced from them as the http kind's replies
// pace them. Two fleets, one per handler, k windows each.
var llmHandlerScenario = &scenario{
	name:  "llmhandler",
	title: "13d. LLM API through a persistent handler passing headers (limits not told)",
	figures: []figSpec{
		{id: "per1000", name: "examples/node (official openai package): 429s per 1,000 requests", unit: "per 1,000", goal: atMost(20)},
		{id: "ratio", name: "examples/node: tokens ÷ allowed", unit: "fraction", goal: atLeast(0.85)},
		{id: "py_per1000", name: "examples/python: 429s per 1,000 requests", unit: "per 1,000", goal: atMost(20)},
		{id: "py_ratio", name: "examples/python: tokens ÷ allowed", unit: "fraction", goal: atLeast(0.85)},
	},
	run: func(ctx context.Context, e *env, r runInfo) (*sample, error) {
		smp := newSample()
		for _, h := range []struct{ handler, pfx string }{{"node", ""}, {"python", "py_"}} {
			s, err := runLLM(ctx, e, r, llmVariant{tag: "llmh" + h.handler, variant: "keyfleet: 2 workers, LLM API, a " + h.handler + " handler passing headers",
				headers: "openai", handler: h.handler})
			if err != nil {
				return nil, fmt.Errorf("%s handler: %w", h.handler, err)
			}
			smp.values[h.pfx+"per1000"], smp.values[h.pfx+"ratio"] = s.values["per1000"], s.values["ratio"]
			smp.cpu = append(smp.cpu, s.cpu...)
		}
		return smp, nil
	},
}

// handlerExec is the jobs.exec section of a persistent example handler.
func handlerExec(handler string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	var cmd []string
	switch handler {
	case "python":
		cmd = []string{"python3", filepath.Join(wd, "examples", "python", "handler.py")}
	case "node":
		cmd = []string{"node", filepath.Join(wd, "examples", "node", "handler.mjs")}
		if _, err := os.Stat(filepath.Join(wd, "examples", "node", "node_modules", "openai")); err != nil {
			return "", fmt.Errorf("bench: examples/node needs its packages: npm ci --prefix examples/node (%w)", err)
		}
	default:
		return "", fmt.Errorf("bench: unknown handler %q", handler)
	}
	if _, err := os.Stat(cmd[1]); err != nil {
		return "", fmt.Errorf("bench: run it from the repository's root: %w", err)
	}
	return fmt.Sprintf("{command: [%q, %q], persistent: true, timeout: 30s}", cmd[0], cmd[1]), nil
}

// llmSample is a run's figures, and with llmVariant.skew its 429s'
// breakdown and the grant → arrival times of its 200s (ms, sorted).
type llmSample struct {
	*sample
	skew     skew
	dispatch []float64
}

const (
	llmKeys     = 4
	llmRequests = 30
	llmTokens   = 6000
	llmPeriod   = 10 * time.Second
)

// runLLM runs one fleet against the stand-in LLM API (see scenario 13).
func runLLM(ctx context.Context, e *env, r runInfo, v llmVariant) (llmSample, error) {
	smp := llmSample{sample: newSample()}
	k := pick(r.quick, 3, 1)
	n := (k + 1) * llmKeys * llmRequests * 3 / 2
	ids := credIDs("m", llmKeys)
	keys := make([]fakeapi.Key, len(ids))
	for i := range keys {
		keys[i] = fakeapi.Key{Rate: ratelimit.Limit{N: llmRequests, Period: llmPeriod}, Tokens: ratelimit.Limit{N: llmTokens, Period: llmPeriod}}
	}
	api, err := startAPI(fakeapi.Config{Keys: keys, Latency: 20 * time.Millisecond, RateHeaders: v.headers}, ids)
	if err != nil {
		return smp, err
	}
	defer api.close()
	spec := fleetSpec{concurrency: 4, httpURL: api.url, cost: true, costFrom: "usage.total_tokens"}
	if v.handler != "" {
		exec, err := handlerExec(v.handler)
		if err != nil {
			return smp, err
		}
		spec.httpURL, spec.costFrom, spec.exec = "", "", exec
		spec.workerEnv = []string{"OPENAI_BASE_URL=" + strings.TrimSuffix(api.url, "/v1/bench") + "/v1", "EXAMPLE_TIMEOUT=10"}
	}
	for _, id := range ids {
		spec.creds = append(spec.creds, credSpec{id: id, max: 2, limits: v.limits})
	}
	var plog *poolLog
	if v.skew {
		plog = newPoolLog(e.rdb, ids, llmPeriod)
		api.on429 = plog.on429
		pctx, stopLog := context.WithCancel(ctx)
		defer stopLog()
		go plog.follow(pctx)
	}
	rng := rand.New(rand.NewPCG(uint64(r.n), 13))
	actual, est := map[string]int64{}, map[string]int64{}
	payloads := map[string][]byte{}
	for i := range n {
		id := fmt.Sprintf("item-%06d", i)
		c := 100 + rng.IntN(201)
		est[id] = int64(c)
		actual[id] = int64(c * (80 + rng.IntN(41)) / 100)
		payloads[id] = fmt.Appendf(nil, `{"id":%q,"cost":%d,"actual_tokens":%d}`, id, c, actual[id])
		if v.handler != "" {
			// A chat request, as the handlers send their items.
			payloads[id] = fmt.Appendf(nil, `{"id":%q,"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"user":%q,"cost":%d,"actual_tokens":%d}`,
				id, id, c, actual[id])
		}
	}
	window := time.Duration(k) * llmPeriod
	var t0 time.Time
	stop := api.windowFromFirst(window, &t0)
	use, rs, err := e.runHTTPFleet(ctx, v.tag, spec, n, 2, v.variant, func(id string) []byte { return payloads[id] }, stop)
	if err != nil {
		return smp, err
	}
	smp.cpu = append(smp.cpu, use)
	st := api.api.Stats()
	if o := st.OverLimit(); o != 0 {
		return smp, fmt.Errorf("bench: the stand-in API admitted %d requests over its limits (its self-check)", o)
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
		return smp, fmt.Errorf("bench: the 200 answers' items used %d tokens, fakeapi's Stats say %d", all, statTokens)
	}
	allowed := float64(llmKeys*llmTokens) / llmPeriod.Seconds()
	smp.values["per1000"] = per1000(st)
	smp.values["allowed"] = allowed
	smp.values["tokens_per_s"] = float64(in) / window.Seconds()
	smp.values["ratio"] = float64(in) / float64(int64(k)*llmKeys*llmTokens)
	smp.values["requests_ratio"] = float64(oks) / float64(int64(k)*llmKeys*llmRequests)
	if plog != nil {
		if err := plog.err(); err != nil {
			return smp, err
		}
		smp.dispatch = dispatchLatency(api.events(), rs)
		smp.skew = skewOf(api.events(), rs, plog.snapshot(), skewLimits{
			period: llmPeriod, latency: 20 * time.Millisecond, requests: llmRequests, tokens: llmTokens,
			toldRequests: llmRequests * 95 / 100, est: est, actual: actual,
		})
	}
	return smp, nil
}
