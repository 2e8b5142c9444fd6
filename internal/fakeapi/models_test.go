package fakeapi_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Each model has its own windows on the same key: one held at its limit
// does not refuse another, nor a request without a model; the 429 names
// the model as OpenAI's does and is not taken for "request too large".
func TestModelRateLimits(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{Keys: []fakeapi.Key{{Secret: "k", Models: map[string]fakeapi.ModelLimits{
		"gpt-4o":      {Rate: ratelimit.Limit{N: 2, Period: time.Minute}},
		"gpt-4o-mini": {Rate: ratelimit.Limit{N: 3, Period: time.Minute}},
	}}}})
	do := func(body string) reply { return post(t.Context(), t, url, "Authorization", "Bearer k", body) }
	for i := range 2 {
		if r := do(`{"model":"gpt-4o"}`); r.status != 200 {
			t.Fatalf("gpt-4o #%d: %d %s", i+1, r.status, r.body)
		}
	}
	r := do(`{"model":"gpt-4o"}`)
	wantMsg := "Rate limit reached for gpt-4o in organization org-test on requests per min (RPM): Limit 2, Used 2, Requested 1."
	if r.status != 429 || !strings.Contains(r.body, wantMsg) || !strings.Contains(r.body, `"code":"rate_limit_exceeded"`) || r.retryAfter == "" {
		t.Fatalf("gpt-4o over its limit: %d %q %s\nwant a 429 with Retry-After saying %q", r.status, r.retryAfter, r.body, wantMsg)
	}
	if jobs.TooLarge([]byte(r.body)) {
		t.Fatalf("the worker reads a model's rate limit as a request too large: %s", r.body)
	}
	for i := range 3 {
		if r := do(`{"model":"gpt-4o-mini"}`); r.status != 200 {
			t.Fatalf("gpt-4o-mini #%d while gpt-4o is at its limit: %d %s", i+1, r.status, r.body)
		}
	}
	if r := do(`{"model":"gpt-4o-mini"}`); r.status != 429 || !strings.Contains(r.body, "for gpt-4o-mini ") {
		t.Fatalf("gpt-4o-mini over its limit: %d %s", r.status, r.body)
	}
	// No limits for these: the key's own (none) alone.
	for _, body := range []string{`{}`, `{"model":"o1"}`, `{"model":7}`} {
		if r := do(body); r.status != 200 {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
	st := api.Stats()
	want := map[string]fakeapi.ModelStats{
		"gpt-4o":      {Requests: 3, OK: 2, RateLimited: 1, ModelLimited: 1, Tokens: 2},
		"gpt-4o-mini": {Requests: 4, OK: 3, RateLimited: 1, ModelLimited: 1, Tokens: 3},
	}
	for name, w := range want {
		if got := st.Keys[0].Models[name]; got != w {
			t.Errorf("stats of %s: got %+v, want %+v", name, got, w)
		}
	}
	if got := st.Models(); len(got) != 2 || got["gpt-4o"] != want["gpt-4o"] {
		t.Errorf("Stats.Models() = %+v", got)
	}
	if k := st.Keys[0]; k.Requests != 10 || k.OK != 8 || k.RateLimited != 2 || st.OverLimit() != 0 {
		t.Errorf("key stats %+v, over limit %d", k, st.OverLimit())
	}
}

// A model's token window and the key's own unscoped rate both bind: the
// model's refuses only its model; the key's refuses every model, and then
// it is not the model's limit.
func TestModelTokensAndKeyRate(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{Keys: []fakeapi.Key{{
		Secret: "k",
		Rate:   ratelimit.Limit{N: 4, Period: time.Minute},
		Models: map[string]fakeapi.ModelLimits{
			"gpt-4o":      {Tokens: ratelimit.Limit{N: 100, Period: time.Minute}},
			"gpt-4o-mini": {Tokens: ratelimit.Limit{N: 1000, Period: time.Minute}},
		},
	}}})
	do := func(body string) reply { return post(t.Context(), t, url, "Authorization", "Bearer k", body) }
	if r := do(`{"model":"gpt-4o","cost":60,"actual_tokens":70}`); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	// 70 used (reconciled) + 40 > 100.
	r := do(`{"model":"gpt-4o","cost":40}`)
	if want := "on tokens per min (TPM): Limit 100, Used 70, Requested 40."; r.status != 429 || !strings.Contains(r.body, want) {
		t.Fatalf("over gpt-4o's tokens: %d %s\nwant %q", r.status, r.body, want)
	}
	if jobs.TooLarge([]byte(r.body)) {
		t.Fatalf("the worker reads a model's token limit as a request too large: %s", r.body)
	}
	if r := do(`{"model":"gpt-4o","cost":30}`); r.status != 200 {
		t.Fatalf("30 more tokens fit: %d %s", r.status, r.body)
	}
	for i := range 2 {
		if r := do(`{"model":"gpt-4o-mini","cost":300}`); r.status != 200 {
			t.Fatalf("gpt-4o-mini #%d: %d %s", i+1, r.status, r.body)
		}
	}
	// The key's 4 requests a minute are spent, whatever the model.
	r = do(`{"model":"gpt-4o-mini","cost":1}`)
	if r.status != 429 || !strings.Contains(r.body, `"limit":"rate"`) || strings.Contains(r.body, "gpt-4o-mini") {
		t.Fatalf("over the key's rate: %d %s", r.status, r.body)
	}
	st := api.Stats()
	if got, want := st.Keys[0].Models["gpt-4o"], (fakeapi.ModelStats{Requests: 3, OK: 2, RateLimited: 1, ModelLimited: 1, Tokens: 100}); got != want {
		t.Errorf("gpt-4o: got %+v, want %+v", got, want)
	}
	if got, want := st.Keys[0].Models["gpt-4o-mini"], (fakeapi.ModelStats{Requests: 3, OK: 2, RateLimited: 1, Tokens: 600}); got != want {
		t.Errorf("gpt-4o-mini: got %+v, want %+v", got, want)
	}
}

// The rate headers describe the request's model where it has a limit,
// the key's otherwise.
func TestModelRateHeaders(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"openai", "anthropic"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			_, url := start(t, fakeapi.Config{RateHeaders: format, Keys: []fakeapi.Key{{
				Secret: "k",
				Rate:   ratelimit.Limit{N: 500, Period: time.Minute},
				Models: map[string]fakeapi.ModelLimits{
					"gpt-4o":      {Tokens: ratelimit.Limit{N: 30000, Period: time.Minute}},
					"gpt-4o-mini": {Rate: ratelimit.Limit{N: 50, Period: time.Minute}, Tokens: ratelimit.Limit{N: 200000, Period: time.Minute}},
				},
			}}})
			name := map[string]func(what, field string) string{
				"openai":    func(what, field string) string { return "x-ratelimit-" + field + "-" + what },
				"anthropic": func(what, field string) string { return "anthropic-ratelimit-" + what + "-" + field },
			}[format]
			tests := []struct {
				body string
				want map[string]string // header → value
			}{
				{`{"model":"gpt-4o","cost":1000}`, map[string]string{
					name("tokens", "limit"): "30000", name("tokens", "remaining"): "29000",
					name("requests", "limit"): "500", name("requests", "remaining"): "499",
				}},
				{`{"model":"gpt-4o-mini","cost":5000}`, map[string]string{
					name("tokens", "limit"): "200000", name("tokens", "remaining"): "195000",
					name("requests", "limit"): "50", name("requests", "remaining"): "49",
				}},
				{`{"model":"gpt-4o","cost":500}`, map[string]string{
					name("tokens", "remaining"): "28500", name("requests", "remaining"): "497",
				}},
				{`{}`, map[string]string{name("tokens", "limit"): "", name("requests", "remaining"): "496"}},
			}
			for _, tc := range tests {
				r := post(t.Context(), t, url, "Authorization", "Bearer k", tc.body)
				if r.status != 200 {
					t.Fatalf("%s: %d %s", tc.body, r.status, r.body)
				}
				for h, want := range tc.want {
					if got := r.header.Get(h); got != want {
						t.Errorf("%s: %s = %q, want %q", tc.body, h, got, want)
					}
				}
			}
		})
	}
}

// Concurrent requests of two models on one key: each model admits exactly
// its limit, the self-checks stay 0 (run with -race).
func TestModelLimitsConcurrent(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{Keys: []fakeapi.Key{{Secret: "k", Models: map[string]fakeapi.ModelLimits{
		"a": {Rate: ratelimit.Limit{N: 5, Period: time.Hour}},
		"b": {Rate: ratelimit.Limit{N: 20, Period: time.Hour}},
	}}}})
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t.Context(), t, url, "Authorization", "Bearer k", fmt.Sprintf(`{"model":%q}`, []string{"a", "b"}[i%2]))
		}()
	}
	wg.Wait()
	st := api.Stats()
	for name, limit := range map[string]int64{"a": 5, "b": 20} {
		m := st.Keys[0].Models[name]
		if m.Requests != 50 || m.OK != limit || m.ModelLimited != 50-limit {
			t.Errorf("model %s: %+v, want %d admitted of 50", name, m, limit)
		}
	}
	if st.OverLimit() != 0 {
		t.Errorf("over limit %d", st.OverLimit())
	}
}

func TestModelLimitsInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		models map[string]fakeapi.ModelLimits
		want   string
	}{
		{map[string]fakeapi.ModelLimits{"": {Rate: ratelimit.Limit{N: 1, Period: time.Second}}}, "keys[0]: models: a model's name is empty"},
		{map[string]fakeapi.ModelLimits{"gpt-4o": {Tokens: ratelimit.Limit{N: -1, Period: time.Second}}}, `keys[0]: models["gpt-4o"]: tokens:`},
	}
	for _, tc := range tests {
		_, err := fakeapi.New(fakeapi.Config{Keys: []fakeapi.Key{{Secret: "k", Models: tc.models}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v): %v, want an error containing %q", tc.models, err, tc.want)
		}
	}
}
