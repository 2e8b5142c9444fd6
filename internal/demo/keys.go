package main

import (
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// demoKey is one key of the demo: what the pool is told (poolConcurrency,
// poolLimits, as the config file writes them) and what the stand-in API
// really enforces (api; its Secret is filled in from secret).
type demoKey struct {
	id, env, secret string
	poolConcurrency int
	poolLimits      string // YAML flow list, "" for none
	api             fakeapi.Key
	apiSays         string
	note            string
	revoked         bool // the API does not know it
}

var demoKeys = []demoKey{
	{"alpha", "DEMO_KEY_ALPHA", "demo-sk-alpha-4f1c2e9b7d", 2, "[{rate: 7/s, burst: 1}]",
		fakeapi.Key{Every: 125 * time.Millisecond, BareRateLimit: true}, "one request per 125 ms (leaky bucket), bare 429s",
		"a smooth limit a little under the gateway's: no 429s", false},
	{"bravo", "DEMO_KEY_BRAVO", "demo-sk-bravo-9a7e3c1f05", 2, "[{rate: 5/s}, {cost: 1800/10s}]",
		fakeapi.Key{Rate: ratelimit.Limit{N: 6, Period: time.Second}, Tokens: ratelimit.Limit{N: 2000, Period: 10 * time.Second}},
		"6 requests/s and 2000 tokens per 10 s", "limited by tokens: each item's cost, then its real usage (cost_from)", false},
	{"charlie", "DEMO_KEY_CHARLIE", "demo-sk-charlie-2b8d6f4a13", 2, "",
		fakeapi.Key{Every: 200 * time.Millisecond, BareRateLimit: true}, "one request per 200 ms, bare 429s",
		"no limits in the pool: the fleet learns the pace from bare 429s", false},
	{"delta", "DEMO_KEY_DELTA", "demo-sk-delta-7c5a1e3b92", 2, "",
		fakeapi.Key{Rate: ratelimit.Limit{N: 4, Period: 4 * time.Second}, RateHeaders: "openai"},
		"4 requests per 4 s, said in x-ratelimit-* headers", "no limits in the pool: the headers rest the key before a 429", false},
	{"echo", "DEMO_KEY_ECHO", "demo-sk-echo-0e6b4d2c81", 1, "", fakeapi.Key{}, "nothing (revoked key)",
		"revoked: the API answers 401, the key is disabled", true},
}
