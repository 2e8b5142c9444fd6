package fakeapi_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Keys of one account draw on its buckets: what one key took, the other
// cannot; both keys' replies report the room they share; the account's
// 429 names it and says when the request would fit; the figures count
// each key's 429s and the account's admissions and 429s.
func TestStrictAccountShared(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI,
		Accounts: []fakeapi.Account{{ID: "org-shared", Rate: ratelimit.Limit{N: 3, Period: time.Hour}}},
		Keys: []fakeapi.Key{
			{Secret: oaKey, Account: "org-shared"},
			{Secret: oaKey2, Account: "org-shared", Rate: ratelimit.Limit{N: 100, Period: time.Hour}},
		}})
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"abcd"}],"max_tokens":1}`
	remaining := func(r answer) string { return r.header.Get("x-ratelimit-remaining-requests") }
	for i, key := range []string{oaKey, oaKey, oaKey2} {
		r := send(t, "POST", url+"/v1/chat/completions", chat, openaiAuth(key)...)
		// Key 1's own bucket (100) has more room than the account's: the
		// headers report the account's, the least.
		if r.status != 200 || remaining(r) != strconv.Itoa(2-i) || r.header.Get("x-ratelimit-limit-requests") != "3" {
			t.Fatalf("request %d: %d remaining %q limit %q %s", i, r.status, remaining(r), r.header.Get("x-ratelimit-limit-requests"), r.body)
		}
	}
	r := send(t, "POST", url+"/v1/chat/completions", chat, openaiAuth(oaKey2)...)
	var body struct {
		Error struct{ Message, Type, Code string }
	}
	_ = json.Unmarshal([]byte(r.body), &body)
	// One request comes back in 3600s/3 = 1200s.
	if r.status != 429 || remaining(r) != "0" || r.header.Get("retry-after") != "1200" || body.Error.Type != "requests" ||
		!strings.HasPrefix(body.Error.Message, "Rate limit reached for gpt-4o in organization org-shared on requests per 1h0m0s: Limit 3, Used 3, Requested 1. Please try again in ") {
		t.Fatalf("over the account: %d %v %s", r.status, r.header, r.body)
	}
	if ms, _ := strconv.Atoi(r.header.Get("retry-after-ms")); ms < 1_199_000 || ms > 1_200_000 {
		t.Errorf("retry-after-ms %q", r.header.Get("retry-after-ms"))
	}
	st := api.Stats()
	if len(st.Accounts) != 1 {
		t.Fatalf("accounts %+v", st.Accounts)
	}
	a := st.Accounts[0]
	if a.ID != "org-shared" || strings.Join(a.Keys, ",") != "key-0,key-1" || a.Admitted != 3 || a.RateLimited != 1 || a.Tokens != 3*2 {
		t.Errorf("account %+v", a)
	}
	if st.Keys[0].Account != "org-shared" || st.Keys[0].OK != 2 || st.Keys[1].OK != 1 || st.Keys[1].RateLimited != 1 || st.Keys[0].RateLimited != 0 {
		t.Errorf("keys %+v", st.Keys)
	}
}

// A key's own limit below its account's binds first, and its headers
// report it; an account's per-model limit binds that model's requests of
// every key.
func TestStrictAccountModelsAndOwnLimits(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic,
		Accounts: []fakeapi.Account{{ID: "ws-1", Rate: ratelimit.Limit{N: 50, Period: time.Minute},
			Models: map[string]fakeapi.ModelLimits{"claude-haiku-4-5": {Tokens: ratelimit.Limit{N: 30, Period: time.Minute}}}}},
		Keys: []fakeapi.Key{
			{Secret: anKey, Account: "ws-1", Rate: ratelimit.Limit{N: 1, Period: time.Minute}},
			{Secret: anKey2, Account: "ws-1"},
		}})
	msg := func(model string) string {
		return `{"model":"` + model + `","max_tokens":10,"messages":[{"role":"user","content":"abcdefgh"}]}` // 2 + 10 tokens
	}
	r := send(t, "POST", url+"/v1/messages", msg("claude-sonnet-4-6"), anthropicAuth(anKey)...)
	if r.status != 200 || r.header.Get("anthropic-ratelimit-requests-limit") != "1" || r.header.Get("anthropic-ratelimit-requests-remaining") != "0" {
		t.Fatalf("key-0: %d %v", r.status, r.header)
	}
	r = send(t, "POST", url+"/v1/messages", msg("claude-sonnet-4-6"), anthropicAuth(anKey)...)
	want(t, "key-0's own limit", r, 429, anError(r, "rate_limit_error", "This request would exceed the rate limit for your organization (org-test) of 1 requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."))
	// key-1: the account's request bucket (48 left) and its haiku tokens.
	for i := range 2 {
		r = send(t, "POST", url+"/v1/messages", msg("claude-haiku-4-5"), anthropicAuth(anKey2)...)
		if r.status != 200 || r.header.Get("anthropic-ratelimit-tokens-limit") != "30" || r.header.Get("anthropic-ratelimit-tokens-remaining") != strconv.Itoa(18-12*i) ||
			r.header.Get("anthropic-ratelimit-input-tokens-remaining") != strconv.Itoa(18-12*i) || r.header.Get("anthropic-ratelimit-requests-remaining") != strconv.Itoa(48-i) {
			t.Fatalf("haiku %d: %d %v", i, r.status, r.header)
		}
	}
	r = send(t, "POST", url+"/v1/messages", msg("claude-haiku-4-5"), anthropicAuth(anKey2)...)
	want(t, "the account's haiku tokens", r, 429, anError(r, "rate_limit_error", "This request would exceed the rate limit for your organization (ws-1) of 30 tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."))
	// 6 tokens missing: 6 × 2 s.
	if ra := r.header.Get("retry-after"); ra != "12" {
		t.Errorf("retry-after %q, want 12", ra)
	}
	st := api.Stats()
	if a := st.Accounts[0]; a.Admitted != 3 || a.RateLimited != 1 {
		t.Errorf("account %+v", a)
	}
	if st.Keys[0].RateLimited != 1 || st.Keys[1].RateLimited != 1 {
		t.Errorf("keys %+v", st.Keys)
	}
	// The account's models are listed.
	if r := send(t, "GET", url+"/v1/models/claude-haiku-4-5", "", anthropicAuth(anKey)...); r.status != 200 {
		t.Errorf("model of an account: %d", r.status)
	}
}

// A request larger than a bucket holds gets OpenAI's "Request too large",
// which no wait cures: no retry-after.
func TestStrictBucketTooLarge(t *testing.T) {
	t.Parallel()
	_, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{{Secret: oaKey, Tokens: ratelimit.Limit{N: 10, Period: time.Minute}}}})
	r := send(t, "POST", url+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"abcdefgh"}],"max_tokens":10}`, openaiAuth(oaKey)...)
	want(t, "too large", r, 429, oaError("Request too large for gpt-4o in organization org-test on tokens per min (TPM): Limit 10, Requested 12. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.", "tokens", "", "rate_limit_exceeded"))
	if r.header.Get("retry-after") != "" {
		t.Errorf("retry-after %q on a request no wait cures", r.header.Get("retry-after"))
	}
}

func TestStrictAccountErrors(t *testing.T) {
	t.Parallel()
	k := []fakeapi.Key{{Secret: "x"}}
	for _, tt := range []struct {
		cfg  fakeapi.Config
		want string
	}{
		{fakeapi.Config{Keys: k, Accounts: []fakeapi.Account{{ID: "a"}}}, "accounts: only the strict mode"},
		{fakeapi.Config{Keys: []fakeapi.Key{{Secret: "x", Account: "a"}}}, "keys[0]: account \"a\": only the strict mode"},
		{fakeapi.Config{Provider: "openai", Keys: []fakeapi.Key{{Secret: "x", Account: "b"}}, Accounts: []fakeapi.Account{{ID: "a"}}}, `keys[0]: account "b" is not in accounts`},
		{fakeapi.Config{Provider: "openai", Keys: k, Accounts: []fakeapi.Account{{ID: ""}}}, "accounts[0]: id is empty"},
		{fakeapi.Config{Provider: "openai", Keys: k, Accounts: []fakeapi.Account{{ID: "a"}, {ID: "a"}}}, `accounts[1]: same id "a" as accounts[0]`},
		{fakeapi.Config{Provider: "openai", Keys: k, Accounts: []fakeapi.Account{{ID: "a", Rate: ratelimit.Limit{N: -1, Period: time.Second}}}}, "accounts[0] (a): rate"},
		{fakeapi.Config{Provider: "openai", Keys: k, Accounts: []fakeapi.Account{{ID: "a", Models: map[string]fakeapi.ModelLimits{"": {}}}}}, "accounts[0] (a): models: a model's name is empty"},
	} {
		if _, err := fakeapi.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v; want %q", tt.cfg, err, tt.want)
		}
	}
}
