package main

import (
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// demoKey is one key of the demo: what the pool is told (poolRate,
// poolConcurrency) and what the stand-in API really enforces. Where the
// API is stricter than the pool knows, the API answers 429 with
// Retry-After and the fleet cools the key down and routes around it.
// Where the pool knows the API's rate, it is set under it: the pool counts
// starts, the API counts arrivals, and on a loaded machine a request can
// reach the API late, bunching arrivals into one window.
type demoKey struct {
	id, env, secret string
	poolConcurrency int
	poolRate        string
	apiRate         ratelimit.Limit // zero: the API does not know the key (revoked)
	apiConcurrency  int
	note            string
}

var demoKeys = []demoKey{
	{"alpha", "DEMO_KEY_ALPHA", "demo-sk-alpha-4f1c2e9b7d", 2, "6/s", ratelimit.Limit{N: 8, Period: time.Second}, 2,
		"pool rate under the API's: 429s only if jitter bunches requests"},
	{"bravo", "DEMO_KEY_BRAVO", "demo-sk-bravo-9a7e3c1f05", 1, "4/s", ratelimit.Limit{N: 5, Period: time.Second}, 1,
		"pool rate under the API's: 429s only if jitter bunches requests"},
	{"charlie", "DEMO_KEY_CHARLIE", "demo-sk-charlie-2b8d6f4a13", 3, "", ratelimit.Limit{N: 6, Period: time.Second}, 3,
		"no rate in the pool, the API allows 6/s: some 429s, short cooldowns"},
	{"delta", "DEMO_KEY_DELTA", "demo-sk-delta-7c5a1e3b92", 2, "", ratelimit.Limit{N: 4, Period: 8 * time.Second}, 2,
		"the API allows only 4 per 8s: 429 with a long Retry-After"},
	{"echo", "DEMO_KEY_ECHO", "demo-sk-echo-0e6b4d2c81", 1, "", ratelimit.Limit{}, 0,
		"revoked: the API answers 401, the key is disabled"},
}
