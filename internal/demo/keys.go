package main

import (
	"slices"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// demoKey is one key of the demo: what the pool is told (poolConcurrency,
// poolLimits, as the config file writes them) and what the stand-in API
// really enforces (api; its Secret is filled in from secret).
type demoKey struct {
	id, env, secret string
	group           string // its key group (pool.credentials[].groups)
	poolConcurrency int
	poolLimits      string // YAML flow list, "" for none
	api             fakeapi.Key
	apiSays         string
	note            string
	revoked         bool // the API does not know it
}

// demoKeys are the keys of the demo's first part, group "enrich": the
// keys of the enrich kind.
var demoKeys = []demoKey{
	{"alpha", "DEMO_KEY_ALPHA", "demo-sk-alpha-4f1c2e9b7d", "enrich", 2, "[{rate: 7/s, burst: 1}]",
		fakeapi.Key{Every: 125 * time.Millisecond, BareRateLimit: true}, "one request per 125 ms (leaky bucket), bare 429s",
		"a smooth limit a little under the gateway's: no 429s", false},
	{"bravo", "DEMO_KEY_BRAVO", "demo-sk-bravo-9a7e3c1f05", "enrich", 2, "[{rate: 5/s}, {cost: 1800/10s}]",
		fakeapi.Key{Rate: ratelimit.Limit{N: 6, Period: time.Second}, Tokens: ratelimit.Limit{N: 2000, Period: 10 * time.Second}},
		"6 requests/s and 2000 tokens per 10 s", "limited by tokens: each item's cost, then its real usage (cost_from)", false},
	{"charlie", "DEMO_KEY_CHARLIE", "demo-sk-charlie-2b8d6f4a13", "enrich", 2, "",
		fakeapi.Key{Every: 200 * time.Millisecond, BareRateLimit: true}, "one request per 200 ms, bare 429s",
		"no limits in the pool: the fleet learns the pace from bare 429s", false},
	{"delta", "DEMO_KEY_DELTA", "demo-sk-delta-7c5a1e3b92", "enrich", 2, "",
		fakeapi.Key{Rate: ratelimit.Limit{N: 4, Period: 4 * time.Second}, RateHeaders: "openai"},
		"4 requests per 4 s, said in x-ratelimit-* headers", "no limits in the pool: the headers rest the key before a 429", false},
	{"echo", "DEMO_KEY_ECHO", "demo-sk-echo-0e6b4d2c81", "enrich", 1, "", fakeapi.Key{}, "nothing (revoked key)",
		"revoked: the API answers 401; after 3 refused items the key is disabled", true},
}

// Models of the demo's chat items, each limited on its own on every llm
// key, as OpenAI limits a key per model.
const (
	slowModel = "gpt-4o"      // 2 requests/s per key
	fastModel = "gpt-4o-mini" // 10 requests/s per key
)

// kindKeys are the keys of the demo's second part: two more key groups,
// llm (limits per model) for the chat kind and emb for the embed kind.
// The pool is told the API's limits exactly: starts count from when their
// request left, so no margin is needed.
var kindKeys = []demoKey{
	llmKey("llm-1", "DEMO_KEY_LLM_1", "demo-sk-llm1-5d2a9c7e41"),
	llmKey("llm-2", "DEMO_KEY_LLM_2", "demo-sk-llm2-8e3b6f1a27"),
	{"emb-1", "DEMO_KEY_EMB_1", "demo-sk-emb1-3c9d7a5e60", "emb", 4, "[{rate: 20/s}]",
		fakeapi.Key{Rate: ratelimit.Limit{N: 20, Period: time.Second}}, "20 requests/s", "the embed kind's own key", false},
}

// allKeys are the keys of both parts of the demo: the pool's credentials.
func allKeys() []demoKey { return append(slices.Clone(demoKeys), kindKeys...) }

// llmKey is a key of group llm: the API limits it per model (slowModel 2
// requests/s, fastModel 10/s), and the pool is told exactly that.
func llmKey(id, env, secret string) demoKey {
	return demoKey{id, env, secret, "llm", 4,
		"[{rate: 2/s, scope: " + slowModel + "}, {rate: 10/s, scope: " + fastModel + "}]",
		fakeapi.Key{Models: map[string]fakeapi.ModelLimits{
			slowModel: {Rate: ratelimit.Limit{N: 2, Period: time.Second}},
			fastModel: {Rate: ratelimit.Limit{N: 10, Period: time.Second}},
		}}, slowModel + " 2/s, " + fastModel + " 10/s", "limits per model on one key", false}
}
