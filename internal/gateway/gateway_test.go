package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/gateway"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Paths: /<kind><endpoint> for the endpoints of each kind's provider;
// the endpoint alone when one kind serves it; 404 and 405 in the
// provider's shape otherwise.
func TestRouting(t *testing.T) {
	h := newHarness(t, setup{kinds: []gateway.Kind{{Name: "local", Provider: "openai-compatible", BaseURL: "http://127.0.0.1:1",
		AuthHeader: "Authorization", AuthFormat: "Bearer {secret}", Timeout: time.Second}}})
	tests := []struct {
		name, path, body string
		headers          []string
		status           int
		anthropicShape   bool
		want             string // in the body
	}{
		{"an OpenAI kind's chat completions", "/chat/v1/chat/completions", chatBody, bearer(appToken), 200, false, `"object":"chat.completion"`},
		{"an Anthropic kind's messages", "/claude/v1/messages", claudeBody, apiKey(appToken), 200, false, `"type":"message"`},
		{"messages without the kind: one Anthropic kind", "/v1/messages", claudeBody, apiKey(appToken), 200, false, `"type":"message"`},
		{"chat completions without the kind: two kinds serve it", "/v1/chat/completions", chatBody, bearer(appToken), 404, false,
			`several kinds serve it ([chat local]); call /\u003ckind\u003e/v1/chat/completions`},
		{"an endpoint the kind's provider has not", "/claude/v1/chat/completions", chatBody, bearer(appToken), 404, false, "Invalid URL"},
		{"no such kind, Anthropic's path", "/nope/v1/messages", claudeBody, apiKey(appToken), 404, true, "not_found_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := h.post(tt.path, tt.body, tt.headers...)
			if got.status != tt.status || !strings.Contains(got.body, tt.want) {
				t.Fatalf("POST %s: %d %s, want %d with %q", tt.path, got.status, got.body, tt.status, tt.want)
			}
			if got.status >= 400 {
				checkShape(t, got.body, tt.anthropicShape)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodGet, h.url+"/chat/v1/chat/completions", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET: %d, Allow %q; want 405 and Allow: POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// checkShape fails unless body is the provider's error shape: OpenAI's
// {"error": {"message", "type", "param", "code"}}, Anthropic's {"type":
// "error", "error": {"type", "message"}}.
func checkShape(t *testing.T, body string, anthropic bool) (typ, message string) {
	t.Helper()
	var v map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("the error is not JSON: %s", body)
	}
	var e map[string]json.RawMessage
	if err := json.Unmarshal(v["error"], &e); err != nil {
		t.Fatalf("no error object: %s", body)
	}
	_ = json.Unmarshal(e["type"], &typ)
	_ = json.Unmarshal(e["message"], &message)
	if typ == "" || message == "" {
		t.Fatalf("the error has no type or message: %s", body)
	}
	if anthropic {
		if string(v["type"]) != `"error"` || len(e) != 2 {
			t.Fatalf("not Anthropic's error shape: %s", body)
		}
		return typ, message
	}
	for _, f := range []string{"param", "code"} {
		if _, ok := e[f]; !ok {
			t.Fatalf("OpenAI's error shape has %s: %s", f, body)
		}
	}
	if len(v) != 1 {
		t.Fatalf("not OpenAI's error shape: %s", body)
	}
	return typ, message
}

// No token or a wrong one: 401 in the provider's shape, and nothing
// reaches the API; either SDK's way of sending the key is taken.
func TestAuth(t *testing.T) {
	h := newHarness(t, setup{})
	for _, tt := range []struct {
		name, path, body string
		headers          []string
		anthropic        bool
		typ              string
	}{
		{"OpenAI, no token", "/chat/v1/chat/completions", chatBody, nil, false, "invalid_request_error"},
		{"OpenAI, a wrong token", "/chat/v1/chat/completions", chatBody, bearer("gw-token-wrong"), false, "invalid_request_error"},
		{"OpenAI, the key itself is not a token", "/chat/v1/chat/completions", chatBody, bearer("sk-oa-secret-0001"), false, "invalid_request_error"},
		{"Anthropic, no token", "/claude/v1/messages", claudeBody, []string{"anthropic-version", "2023-06-01"}, true, "authentication_error"},
		{"Anthropic, a wrong token", "/claude/v1/messages", claudeBody, apiKey("nope"), true, "authentication_error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := h.post(tt.path, tt.body, tt.headers...)
			if got.status != http.StatusUnauthorized {
				t.Fatalf("%d %s, want 401", got.status, got.body)
			}
			if typ, _ := checkShape(t, got.body, tt.anthropic); typ != tt.typ {
				t.Fatalf("error type %q, want %q: %s", typ, tt.typ, got.body)
			}
		})
	}
	if n := len(received(h.oa)) + len(received(h.an)); n != 0 {
		t.Fatalf("the APIs got %d requests without a valid token; want none", n)
	}
	for _, hdr := range [][]string{bearer(opsToken), {"x-api-key", appToken}, {"authorization", "bearer " + appToken}} {
		if got := h.post("/chat/v1/chat/completions", chatBody, hdr...); got.status != 200 {
			t.Fatalf("token as %s: %d %s", hdr[0], got.status, got.body)
		}
	}
}

// The request reaches the API byte for byte, with the key's secret in
// the provider's auth header instead of the caller's token, and the
// reply comes back byte for byte, headers included.
func TestByteForByte(t *testing.T) {
	h := newHarness(t, setup{})
	// Spacing and key order the API must get unchanged.
	body := "{ \"messages\": [{\"role\":\"user\",\"content\":\"Say  hello.\"}],\n  \"model\":\"gpt-4o-mini\", \"max_tokens\": 20 }"
	got := h.post("/chat/v1/chat/completions?trace=1", body, append(bearer(appToken), "OpenAI-Organization", "org-caller", "X-Custom", "kept")...)
	if got.status != 200 {
		t.Fatalf("%d %s", got.status, got.body)
	}
	rs := received(h.oa)
	if len(rs) != 1 {
		t.Fatalf("the API got %d requests, want 1", len(rs))
	}
	r := rs[0]
	if !sameBytes(r.Body, body) || r.Path != "/v1/chat/completions" || r.RawQuery != "trace=1" || r.KeyIndex != 0 {
		t.Fatalf("the API got %s %s?%s key %d body %q; want the caller's bytes on key 0", r.Method, r.Path, r.RawQuery, r.KeyIndex, r.Body)
	}
	if a := r.Header.Get("Authorization"); a != "Bearer sk-oa-secret-0001" {
		t.Fatalf("Authorization %q: want the key's secret", a)
	}
	if r.Header.Get("OpenAI-Organization") != "" || r.Header.Get("X-Custom") != "kept" || r.Header.Get("X-Forwarded-For") != "" {
		t.Fatalf("headers the API got: %v", r.Header)
	}
	if got.header.Get("X-Request-Id") == "" {
		t.Fatalf("the API's headers did not come back: %v", got.header)
	}
	// Anthropic: x-api-key carries the key; the caller's anthropic-version stays.
	got = h.post("/claude/v1/messages", claudeBody, "x-api-key", appToken, "anthropic-version", "2023-06-01")
	if got.status != 200 {
		t.Fatalf("%d %s", got.status, got.body)
	}
	ar := received(h.an)[0]
	if ar.Header.Get("X-Api-Key") != "sk-ant-secret-0001" || ar.Header.Get("Anthropic-Version") != "2023-06-01" || !sameBytes(ar.Body, claudeBody) {
		t.Fatalf("Anthropic got headers %v body %q", ar.Header, ar.Body)
	}
}

// A request reserves its key ahead of every batch waiter, whatever its
// priority: with the only key held and a batch item of priority 1
// waiting for it first, the freed key goes to the gateway's request.
func TestAheadOfBatches(t *testing.T) {
	h := newHarness(t, setup{openai: []key{{def: creds.Credential{ID: "oa-1", MaxConcurrent: 1}, secret: "sk-oa-secret-0001"}}})
	ctx := t.Context()
	held, err := h.pool.AcquireWith(ctx, creds.Request{Owner: "batch/held", Keys: h.keys["chat"]})
	if err != nil {
		t.Fatal(err)
	}
	batchQueued := make(chan struct{})
	batchGot := make(chan *creds.Lease, 1)
	go func() {
		l, err := h.pool.AcquireWith(ctx, creds.Request{Owner: "batch/urgent", Priority: creds.PriorityFirst, Keys: h.keys["chat"],
			Queued: func() { close(batchQueued) }})
		if err == nil {
			batchGot <- l
		}
	}()
	<-batchQueued
	gwDone := h.postAsync("/chat/v1/chat/completions", chatBody, bearer(appToken)...)
	// The gateway's request is queued once the pool counts two waiters.
	testutil.WaitFor(t, "the gateway's request to wait behind the batch item", time.Minute, func() bool {
		st, err := h.pool.Stats(ctx)
		return err == nil && st.Waiting >= 2
	})
	if err := h.pool.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	// The key takes one start at a time: once the batch item holds it,
	// the gateway's request must have reached the API already.
	l := testutil.Receive(t, batchGot, time.Minute, "the batch item never got the key")
	if n := len(received(h.oa)); n != 1 {
		t.Fatalf("the batch item got the key (%s) while the API had %d requests: the gateway's request did not go first", l.CredentialID, n)
	}
	_ = h.pool.Release(ctx, l)
	if got := testutil.Receive(t, gwDone, time.Minute, "the gateway never answered"); got.status != 200 {
		t.Fatalf("gateway: %d %s", got.status, got.body)
	}
}
