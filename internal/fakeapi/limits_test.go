package fakeapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// A gateway-style key admits one request per interval and answers the
// rest with a bare 429.
func TestEveryWithBare429s(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{Keys: []fakeapi.Key{{Secret: "k", Every: time.Hour}}, BareRateLimit: true})
	if r := post(t.Context(), t, url, "Authorization", "Bearer k", `{}`); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	r := post(t.Context(), t, url, "Authorization", "Bearer k", `{}`)
	if r.status != 429 || r.retryAfter != "" || !strings.Contains(r.body, `"limit":"every"`) {
		t.Fatalf("second within the interval: %d %q %s", r.status, r.retryAfter, r.body)
	}
	if st := api.Stats(); st.Keys[0].OK != 1 || st.Keys[0].RateLimited != 1 || st.OverLimit() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A token-limited key charges each request its cost, reports usage and its
// figures in OpenAI's or Anthropic's headers, and refuses what does not fit.
func TestTokensAndRateHeaders(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"openai", "anthropic"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			api, url := start(t, fakeapi.Config{RateHeaders: format, Keys: []fakeapi.Key{{
				Secret: "k", Rate: ratelimit.Limit{N: 30, Period: 10 * time.Second}, Tokens: ratelimit.Limit{N: 100, Period: 10 * time.Second},
			}}})
			r := post(t.Context(), t, url, "Authorization", "Bearer k", `{"cost":60,"actual_tokens":70}`)
			if r.status != 200 || !strings.Contains(r.body, `"usage":{"total_tokens":70}`) {
				t.Fatalf("first: %d %s", r.status, r.body)
			}
			remaining := map[string]string{"openai": "x-ratelimit-remaining-tokens", "anthropic": "anthropic-ratelimit-tokens-remaining"}[format]
			// The headers are read when the request is admitted: 100-60 left.
			if got := r.header.Get(remaining); got != "40" {
				t.Fatalf("%s = %q, want 40", remaining, got)
			}
			r = post(t.Context(), t, url, "Authorization", "Bearer k", `{"cost":40}`)
			if r.status != 429 || !strings.Contains(r.body, `"limit":"tokens"`) || r.retryAfter == "" {
				t.Fatalf("over the tokens: %d %s", r.status, r.body)
			}
			if format == "openai" && r.header.Get("retry-after-ms") == "" {
				t.Fatal("no retry-after-ms on a 429")
			}
			if st := api.Stats(); st.Keys[0].Tokens != 70 {
				t.Fatalf("tokens used %d, want 70", st.Keys[0].Tokens)
			}
		})
	}
}
