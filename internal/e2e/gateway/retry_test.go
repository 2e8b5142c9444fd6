package gateway

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

// A 429 from one key is sent again on another before anything goes back
// to the caller: key-a's API (its own url) refuses every request with a
// 429; every caller gets its answer all the same, from key-b, and key-a
// is rate limited in the pool, fleet-wide (it rests and paces its starts).
func TestRateLimitedKeyRetriedOnAnother(t *testing.T) {
	limited, limitedURL := strictAPI(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Record: true,
		Keys: []fakeapi.Key{{Secret: keySecrets["key-a"]}}})
	limited.ForceStatus(http.StatusTooManyRequests)
	f := newFleet(t, options{credentials: fmt.Sprintf("- {id: key-a, secret_env: KEY_A, max_concurrent: 4, groups: [openai], url: %q}\n", limitedURL) +
		"- {id: key-b, secret_env: KEY_B, max_concurrent: 4, groups: [openai]}\n" +
		"- {id: key-c, secret_env: KEY_C, max_concurrent: 4, groups: [anthropic]}"})
	f.startWorker("w1")
	const n = 6
	for i := range n {
		if got := post(t, f.gateway+"/chat/v1/chat/completions", chatBody, "Authorization", "Bearer "+appToken); got.status != 200 {
			t.Fatalf("request %d: %d %s: a key's 429 reached the caller", i, got.status, got.body)
		}
	}
	tried := len(limited.Received())
	if tried < 1 {
		t.Fatal("key-a was never tried (the pool picks the least recently used key first)")
	}
	if ok := f.oa.Stats().Keys[1].OK; ok != n {
		t.Fatalf("key-b answered %d requests, want all %d", ok, n)
	}
	if v := metricLine(f.metrics(), `keyfleet_gateway_retries_total{cause="rate_limited",kind="chat"}`); v != fmt.Sprint(tried) {
		t.Fatalf("/metrics counts %q retries after a 429; key-a refused %d", v, tried)
	}
	rep, _ := f.StatusJSON()
	for _, c := range rep.Pool.Credentials {
		if c.ID == "key-a" && c.RateLimited != int64(tried) {
			t.Fatalf("key-a: %d rate-limited runs in the pool, want %d", c.RateLimited, tried)
		}
	}
}
