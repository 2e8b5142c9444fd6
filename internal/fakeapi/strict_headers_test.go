package fakeapi_test

import (
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// The rate-limit headers say what the providers' docs define, pinned:
// OpenAI's reset is "the time until the rate limit ... resets to its
// initial state", the time until the bucket is full, as a Go duration
// rounded up to the millisecond, so that it is "0s" of a full bucket only
// and never while the bucket lacks anything (a fraction of a millisecond
// reads "1ms"); remaining is the whole units left after the request.
func TestStrictOpenAIResetHeaders(t *testing.T) {
	t.Parallel()
	_, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{
		{Secret: oaKey, Rate: ratelimit.Limit{N: 10, Period: time.Second}, Tokens: ratelimit.Limit{N: 1000, Period: time.Minute}},
		{Secret: oaKey2, Rate: ratelimit.Limit{N: 7, Period: time.Second}, Tokens: ratelimit.Limit{N: 1_000_000, Period: time.Minute}},
	}})
	// 8 bytes: 2 input tokens, 10 output: 12 tokens.
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"abcdefgh"}],"max_tokens":10}`
	type figures struct{ limit, remaining, reset string }
	get := func(r answer, name string) figures {
		return figures{r.header.Get("x-ratelimit-limit-" + name), r.header.Get("x-ratelimit-remaining-" + name), r.header.Get("x-ratelimit-reset-" + name)}
	}
	r := send(t, "POST", url+"/v1/chat/completions", chat, openaiAuth(oaKey)...)
	// One request of 10 a second: 100 ms to be whole again; 12 tokens of
	// 1,000 a minute: 720 ms.
	if got := get(r, "requests"); got != (figures{"10", "9", "100ms"}) {
		t.Errorf("requests %+v", got)
	}
	if got := get(r, "tokens"); got != (figures{"1000", "988", "720ms"}) {
		t.Errorf("tokens %+v", got)
	}
	r = send(t, "POST", url+"/v1/chat/completions", chat, openaiAuth(oaKey2)...)
	// 1 s / 7 = 142.857… ms reads 143ms; 12 tokens of a million a minute
	// refill in 0.72 ms: 1ms, not 0s, while the bucket lacks them.
	if got := get(r, "requests"); got != (figures{"7", "6", "143ms"}) {
		t.Errorf("requests of 7/s %+v", got)
	}
	if got := get(r, "tokens"); got != (figures{"1000000", "999988", "1ms"}) {
		t.Errorf("tokens of a million a minute %+v", got)
	}
	// A request no bucket takes (too large for the tokens): the request
	// bucket is not drawn on, and a full one reads 0s.
	_, big := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{
		{Secret: oaKey, Rate: ratelimit.Limit{N: 5, Period: time.Minute}, Tokens: ratelimit.Limit{N: 10, Period: time.Minute}},
	}})
	r = send(t, "POST", big+"/v1/chat/completions", chat, openaiAuth(oaKey)...)
	if got := get(r, "requests"); r.status != 429 || got != (figures{"5", "5", "0s"}) {
		t.Errorf("a full bucket: %d %+v", r.status, got)
	}
	// An empty bucket: 0 left, whole again in a full period.
	_, one := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{{Secret: oaKey, Rate: ratelimit.Limit{N: 1, Period: time.Hour}}}})
	if got := get(send(t, "POST", one+"/v1/chat/completions", chat, openaiAuth(oaKey)...), "requests"); got != (figures{"1", "0", "1h0m0s"}) {
		t.Errorf("an empty bucket %+v", got)
	}
}

// Anthropic's reset is "the time when the request rate limit will be
// fully replenished, provided in RFC 3339 format", in whole seconds rounded
// up: never before the bucket is full, at most a second after.
func TestStrictAnthropicResetHeaders(t *testing.T) {
	t.Parallel()
	_, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic, Keys: []fakeapi.Key{
		{Secret: anKey, Rate: ratelimit.Limit{N: 4, Period: time.Minute}, Tokens: ratelimit.Limit{N: 10, Period: time.Minute}},
	}})
	msg := `{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user","content":"abcdefgh"}]}` // 12 tokens
	before := time.Now()
	r := send(t, "POST", url+"/v1/messages", `{"model":"claude-sonnet-4-6","max_tokens":3,"messages":[{"role":"user","content":"abcd"}]}`, anthropicAuth(anKey)...)
	after := time.Now()
	within := func(name string, d time.Duration) {
		t.Helper()
		v := r.header.Get("anthropic-ratelimit-" + name + "-reset")
		at, err := time.Parse(time.RFC3339, v)
		switch {
		case err != nil || at.Nanosecond() != 0 || v != at.UTC().Format(time.RFC3339):
			t.Errorf("%s reset %q: not RFC 3339 whole seconds in UTC (%v)", name, v, err)
		case at.Before(before.Add(d)) || !at.Before(after.Add(d).Add(time.Second)):
			t.Errorf("%s reset %s: want the moment %s after the request, rounded up to the second (request between %s and %s)",
				name, at, d, before.UTC().Format(time.RFC3339Nano), after.UTC().Format(time.RFC3339Nano))
		}
	}
	// One request of 4 a minute: whole again in 15 s; 4 tokens of 10 a
	// minute: in 24 s, for the tokens and the input and output tokens.
	if r.status != 200 || r.header.Get("anthropic-ratelimit-requests-remaining") != "3" || r.header.Get("anthropic-ratelimit-tokens-remaining") != "6" ||
		r.header.Get("anthropic-ratelimit-output-tokens-limit") != "10" {
		t.Fatalf("%d %v", r.status, r.header)
	}
	within("requests", 15*time.Second)
	for _, name := range []string{"tokens", "input-tokens", "output-tokens"} {
		within(name, 24*time.Second)
	}
	// 12 tokens never fit 10: the 429 takes nothing, and the request
	// bucket reports what the first request left.
	r = send(t, "POST", url+"/v1/messages", msg, anthropicAuth(anKey)...)
	if r.status != 429 || r.header.Get("anthropic-ratelimit-requests-remaining") != "3" {
		t.Fatalf("too large: %d %v", r.status, r.header)
	}
}
