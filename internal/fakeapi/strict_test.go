package fakeapi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

const (
	oaKey  = "sk-test-openai-0000001"
	oaKey2 = "sk-test-openai-0000002"
	anKey  = "sk-ant-test-00000001"
	anKey2 = "sk-ant-test-00000002"
)

// strictServer starts a strict server of the provider with two keys
// (key-1 limited as cfg.Keys[1] says, if given).
func strictServer(t *testing.T, cfg fakeapi.Config) (*fakeapi.Server, string) {
	t.Helper()
	if len(cfg.Keys) == 0 {
		k1, k2 := oaKey, oaKey2
		if cfg.Provider == fakeapi.ProviderAnthropic {
			k1, k2 = anKey, anKey2
		}
		cfg.Keys = []fakeapi.Key{{Secret: k1}, {Secret: k2}}
	}
	return start(t, cfg)
}

type answer struct {
	status int
	header http.Header
	body   string
}

// send makes one request; hdr holds header name/value pairs.
func send(t *testing.T, method, url, body string, hdr ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func openaiAuth(key string) []string { return []string{"Authorization", "Bearer " + key} }

func anthropicAuth(key string) []string {
	return []string{"x-api-key", key, "anthropic-version", "2023-06-01"}
}

// oaError is OpenAI's error body; param and code "" are null.
func oaError(msg, typ, param, code string) string {
	q := func(s string) string {
		if s == "" {
			return "null"
		}
		return strconv.Quote(s)
	}
	return fmt.Sprintf(`{"error":{"message":%s,"type":%q,"param":%s,"code":%s}}`, jsonString(msg), typ, q(param), q(code))
}

// anError is Anthropic's error body for the answer's request-id.
func anError(a answer, typ, msg string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%s},"request_id":%q}`, typ, jsonString(msg), a.header.Get("request-id"))
}

func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSpace(b.String())
}

func want(t *testing.T, name string, got answer, status int, body string) {
	t.Helper()
	if got.status != status || got.body != body {
		t.Errorf("%s:\n got  %d %s\n want %d %s", name, got.status, got.body, status, body)
	}
}

func TestStrictOpenAIAuth(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	noKey := "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys."
	want(t, "no key", send(t, "POST", url+"/v1/chat/completions", chat), 401, oaError(noKey, "invalid_request_error", "", ""))
	want(t, "x-api-key is not OpenAI's", send(t, "POST", url+"/v1/chat/completions", chat, "x-api-key", oaKey), 401, oaError(noKey, "invalid_request_error", "", ""))
	bad := "Incorrect API key provided: sk-************9999. You can find your API key at https://platform.openai.com/account/api-keys."
	want(t, "unknown key", send(t, "POST", url+"/v1/chat/completions", chat, openaiAuth("sk-unknown-key-9999")...), 401, oaError(bad, "invalid_request_error", "", "invalid_api_key"))
	if r := send(t, "POST", url+"/v1/chat/completions", chat, openaiAuth(oaKey)...); r.status != 200 || r.header.Get("x-request-id") == "" {
		t.Errorf("known key: %d %s request id %q", r.status, r.body, r.header.Get("x-request-id"))
	}
	if err := api.Revoke("key-0", true); err != nil {
		t.Fatal(err)
	}
	revoked := "Incorrect API key provided: sk-***************0001. You can find your API key at https://platform.openai.com/account/api-keys."
	want(t, "revoked", send(t, "POST", url+"/v1/chat/completions", chat, openaiAuth(oaKey)...), 401, oaError(revoked, "invalid_request_error", "", "invalid_api_key"))
	st := api.Stats()
	if st.Unauthorized != 3 || st.Keys[0].Refused != 1 || st.Keys[0].OK != 1 {
		t.Errorf("stats %+v", st)
	}
	if b, _ := json.Marshal(st); strings.Contains(string(b), oaKey) {
		t.Errorf("stats show a secret: %s", b)
	}
}

func TestStrictAnthropicAuth(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	msg := `{"model":"claude-sonnet-4-6","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	r := send(t, "POST", url+"/v1/messages", msg, "anthropic-version", "2023-06-01")
	want(t, "no key", r, 401, anError(r, "authentication_error", "x-api-key header is required"))
	r = send(t, "POST", url+"/v1/messages", msg, "Authorization", "Bearer "+anKey, "anthropic-version", "2023-06-01")
	want(t, "bearer is not Anthropic's", r, 401, anError(r, "authentication_error", "x-api-key header is required"))
	r = send(t, "POST", url+"/v1/messages", msg, anthropicAuth("sk-ant-nope")...)
	want(t, "unknown key", r, 401, anError(r, "authentication_error", "invalid x-api-key"))
	r = send(t, "POST", url+"/v1/messages", msg, "x-api-key", anKey)
	want(t, "no version", r, 400, anError(r, "invalid_request_error", "anthropic-version: header is required"))
	r = send(t, "POST", url+"/v1/messages", msg, "x-api-key", anKey, "anthropic-version", "2099-01-01")
	want(t, "bad version", r, 400, anError(r, "invalid_request_error", `anthropic-version: "2099-01-01" is not a valid version`))
	// The version the official Go SDK v2 sends is served too.
	if r := send(t, "POST", url+"/v1/messages", msg, "x-api-key", anKey, "anthropic-version", "2026-10-21"); r.status != 200 {
		t.Errorf("anthropic-version 2026-10-21: %d %s", r.status, r.body)
	}
	if r := send(t, "POST", url+"/v1/messages", msg, anthropicAuth(anKey)...); r.status != 200 || !strings.HasPrefix(r.header.Get("request-id"), "req_") {
		t.Errorf("known key: %d %s request-id %q", r.status, r.body, r.header.Get("request-id"))
	}
	if err := api.Revoke("key-1", true); err != nil {
		t.Fatal(err)
	}
	r = send(t, "POST", url+"/v1/messages", msg, anthropicAuth(anKey2)...)
	want(t, "revoked", r, 401, anError(r, "authentication_error", "invalid x-api-key"))
	if st := api.Stats(); st.Unauthorized != 3 || st.Keys[1].Refused != 1 || st.BadRequests != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestStrictNotFound(t *testing.T) {
	t.Parallel()
	_, oa := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	_, an := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	for _, tt := range []struct{ method, path string }{
		{"POST", "/v1/chat/completions/chat/completions"},
		{"GET", "/v1/chat/completions"},
		{"POST", "/v1/messages"},
		{"POST", "/chat/completions"},
	} {
		want(t, "openai "+tt.path, send(t, tt.method, oa+tt.path, `{}`, openaiAuth(oaKey)...), 404,
			oaError(fmt.Sprintf("Invalid URL (%s %s)", tt.method, tt.path), "invalid_request_error", "", ""))
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/complete2", "/messages"} {
		r := send(t, "POST", an+path, `{}`, anthropicAuth(anKey)...)
		want(t, "anthropic "+path, r, 404, anError(r, "not_found_error", "Not Found"))
	}
}

// TestStrictRefusals: each refusal's status and exact body.
func TestStrictRefusals(t *testing.T) {
	t.Parallel()
	_, oa := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Models: []string{"gpt-4o", "text-embedding-3-small"}})
	_, an := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	parse := "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)"
	user := `"messages":[{"role":"user","content":"hi"}]`
	openai := []struct {
		path, body       string
		status           int
		msg, param, code string
		typ              string
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o",` + user + `,"id":"item-1"}`, 400, "Unrecognized request argument supplied: id", "", "", ""},
		{"/v1/chat/completions", `{"id":"item-1","model":"gpt-4o",` + user + `,"cost":3}`, 400, "Unrecognized request arguments supplied: id, cost", "", "", ""},
		{"/v1/chat/completions", `{` + user + `}`, 400, "Missing required parameter: 'model'.", "model", "missing_required_parameter", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o"}`, 400, "Missing required parameter: 'messages'.", "messages", "missing_required_parameter", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o",` + user + `,"max_tokens":"10"}`, 400, "Invalid type for 'max_tokens': expected an integer, but got a string instead.", "max_tokens", "invalid_type", ""},
		{"/v1/chat/completions", `{"model":7,` + user + `}`, 400, "Invalid type for 'model': expected a string, but got an integer instead.", "model", "invalid_type", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":"hi"}`, 400, "Invalid type for 'messages': expected an array, but got a string instead.", "messages", "invalid_type", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, 400, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"content":"hi"}]}`, 400, "Missing required parameter: 'messages[0].role'.", "messages[0].role", "missing_required_parameter", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":5}]}`, 400, "Invalid type for 'messages[0].content': expected one of a string or an array, but got an integer instead.", "messages[0].content", "invalid_type", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"robot","content":"hi"}]}`, 400, "Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", "messages[0].role", "invalid_value", ""},
		{"/v1/chat/completions", `{"model":"gpt-5x",` + user + `}`, 404, "The model `gpt-5x` does not exist or you do not have access to it.", "", "model_not_found", ""},
		{"/v1/chat/completions", `not json`, 400, parse, "", "", ""},
		{"/v1/chat/completions", `[1]`, 400, parse, "", "", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o",` + user + `,"stream_options":{"include_usage":true}}`, 400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options", "", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o",` + user + `,"stream":false,"stream_options":{"include_usage":true}}`, 400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options", "", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o",` + user + `,"stream":"true"}`, 400, "Invalid type for 'stream': expected a boolean, but got a string instead.", "stream", "invalid_type", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o",` + user + `,"stream":true,"stream_options":{"include_usage":1}}`, 400, "Invalid type for 'stream_options.include_usage': expected a boolean, but got an integer instead.", "stream_options.include_usage", "invalid_type", ""},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"x","stream":true}`, 400, "Unrecognized request argument supplied: stream", "", "", ""},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi [fake:bogus]"}]}`, 400, "fakeapi: unknown marker [fake:bogus]", "", "", ""},
		{"/v1/embeddings", `{"model":"text-embedding-3-small"}`, 400, "Missing required parameter: 'input'.", "input", "missing_required_parameter", ""},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"x","truncate":true}`, 400, "Unrecognized request argument supplied: truncate", "", "", ""},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":""}`, 400, "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.", "", "", ""},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":{"a":1}}`, 400, "Invalid type for 'input': expected one of a string or an array, but got an object instead.", "input", "invalid_type", ""},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"x","encoding_format":"hex"}`, 400, "Invalid value: 'hex'. Supported values are: 'float' and 'base64'.", "encoding_format", "invalid_value", ""},
	}
	for _, tt := range openai {
		r := send(t, "POST", oa+tt.path, tt.body, openaiAuth(oaKey)...)
		want(t, "openai "+tt.body, r, tt.status, oaError(tt.msg, "invalid_request_error", tt.param, tt.code))
	}
	msg := func(extra string) string {
		return `{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	anthropic := []struct {
		body, typ, msg string
		status         int
	}{
		{msg(`,"id":"item-1"`), "invalid_request_error", "id: Extra inputs are not permitted", 400},
		{`{"model":"claude-sonnet-4-6","messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error", "max_tokens: Field required", 400},
		{`{"model":"claude-sonnet-4-6","max_tokens":10}`, "invalid_request_error", "messages: Field required", 400},
		{`{"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error", "model: Field required", 400},
		{`{"model":"claude-sonnet-4-6","max_tokens":"ten","messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error", "max_tokens: Input should be a valid integer", 400},
		{`{"model":"claude-sonnet-4-6","max_tokens":10,"messages":{}}`, "invalid_request_error", "messages: Input should be a valid list", 400},
		{`{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[]}`, "invalid_request_error", "messages: at least one message is required", 400},
		{`{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"system","content":"hi"}]}`, "invalid_request_error", "messages.0.role: Input should be 'user' or 'assistant'", 400},
		{`{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user"}]}`, "invalid_request_error", "messages.0.content: Field required", 400},
		{`{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user","content":"hi","name":"x"}]}`, "invalid_request_error", "messages.0.name: Extra inputs are not permitted", 400},
		{`{"model":"claude-sonnet-4-6","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error", "max_tokens: Input should be greater than or equal to 0", 400},
		{msg(`,"temperature":"hot"`), "invalid_request_error", "temperature: Input should be a valid number", 400},
		{msg(`,"stream":"yes"`), "invalid_request_error", "stream: Input should be a valid boolean", 400},
		{msg(`,"stream":true,"stream_options":{"include_usage":true}`), "invalid_request_error", "stream_options: Extra inputs are not permitted", 400},
	}
	for _, tt := range anthropic {
		r := send(t, "POST", an+"/v1/messages", tt.body, anthropicAuth(anKey)...)
		want(t, "anthropic "+tt.body, r, tt.status, anError(r, tt.typ, tt.msg))
	}
}

func TestStrictOpenAIReplies(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, OutputTokens: 9})
	text := "Hello there, how are you? [fake:output_tokens=5]" // 48 bytes: 12 tokens
	body := `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"` + text + `"}],"max_completion_tokens":20,"n":2}`
	r := send(t, "POST", url+"/v1/chat/completions", body, openaiAuth(oaKey)...)
	if r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	var chat struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Role, Content string
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			TotalTokens      int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(r.body), &chat); err != nil {
		t.Fatal(err)
	}
	in := int64((len("Be brief.") + len(text) + 3) / 4)
	if !strings.HasPrefix(chat.ID, "chatcmpl-") || chat.Object != "chat.completion" || chat.Created == 0 || chat.Model != "gpt-4o-mini" ||
		len(chat.Choices) != 2 || chat.Choices[1].Index != 1 || chat.Choices[0].Message.Role != "assistant" ||
		chat.Choices[0].Message.Content != "tok tok tok tok tok" || chat.Choices[0].FinishReason != "stop" ||
		chat.Usage.PromptTokens != in || chat.Usage.CompletionTokens != 10 || chat.Usage.TotalTokens != in+10 {
		t.Errorf("chat reply %s", r.body)
	}
	if in > int64(len(body)) {
		t.Errorf("input tokens %d exceed the body's %d bytes", in, len(body))
	}
	if !strings.HasPrefix(r.header.Get("x-request-id"), "req_") || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", r.header)
	}
	// Capped: the default output (9) above max_tokens (4).
	r = send(t, "POST", url+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"abcd"}],"max_tokens":4}`, openaiAuth(oaKey)...)
	if !strings.Contains(r.body, `"finish_reason":"length"`) || !strings.Contains(r.body, `"prompt_tokens":1,"completion_tokens":4,"total_tokens":5`) {
		t.Errorf("capped reply %s", r.body)
	}
	// Embeddings, float and base64.
	r = send(t, "POST", url+"/v1/embeddings", `{"model":"text-embedding-3-small","input":["abcdefgh","x"],"dimensions":3}`, openaiAuth(oaKey2)...)
	var emb struct {
		Object string `json:"object"`
		Data   []struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Model string           `json:"model"`
		Usage map[string]int64 `json:"usage"`
	}
	if err := json.Unmarshal([]byte(r.body), &emb); err != nil || emb.Object != "list" || len(emb.Data) != 2 || emb.Data[1].Index != 1 ||
		emb.Data[0].Object != "embedding" || len(emb.Data[0].Embedding) != 3 || emb.Usage["prompt_tokens"] != 3 || emb.Usage["total_tokens"] != 3 {
		t.Errorf("embeddings %d %s (%v)", r.status, r.body, err)
	}
	r = send(t, "POST", url+"/v1/embeddings", `{"model":"text-embedding-3-small","input":[[1,2,3],[4]],"encoding_format":"base64"}`, openaiAuth(oaKey2)...)
	var b64 struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
		Usage map[string]int64 `json:"usage"`
	}
	if err := json.Unmarshal([]byte(r.body), &b64); err != nil || len(b64.Data) != 2 || b64.Usage["prompt_tokens"] != 5 {
		t.Fatalf("base64 embeddings %s (%v)", r.body, err)
	}
	if raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding); err != nil || len(raw) != 16*4 {
		t.Errorf("base64 vector: %d bytes, %v", len(raw), err)
	}
	st := api.Stats()
	k0, k1 := st.Keys[0], st.Keys[1]
	if k0.Usage.RealTime != (fakeapi.Usage{Requests: 2, InputTokens: in + 1, OutputTokens: 14}) || k0.Usage.Batch != (fakeapi.Usage{}) {
		t.Errorf("key-0 usage %+v", k0.Usage)
	}
	if k0.ModelUsage["gpt-4o-mini"].RealTime != (fakeapi.Usage{Requests: 1, InputTokens: in, OutputTokens: 10}) ||
		k0.ModelUsage["gpt-4o"].RealTime != (fakeapi.Usage{Requests: 1, InputTokens: 1, OutputTokens: 4}) {
		t.Errorf("key-0 model usage %+v", k0.ModelUsage)
	}
	if k1.Usage.RealTime != (fakeapi.Usage{Requests: 2, InputTokens: 8, OutputTokens: 0}) || k1.OK != 2 || k1.Tokens != 8 {
		t.Errorf("key-1 %+v", k1)
	}
	if got := st.Usage().RealTime.InputTokens; got != in+9 {
		t.Errorf("total input %d", got)
	}
	if got := st.ModelUsage()["text-embedding-3-small"].RealTime.Requests; got != 2 {
		t.Errorf("embedding requests %d", got)
	}
}

func TestStrictAnthropicReplies(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	text := "What is the capital of France?" // 30 bytes: 8 tokens
	body := `{"model":"claude-sonnet-4-6","max_tokens":100,"system":"Answer in one word.","messages":[{"role":"user","content":[{"type":"text","text":"` + text + ` [fake:output_tokens=2]"}]}]}`
	r := send(t, "POST", url+"/v1/messages", body, anthropicAuth(anKey)...)
	in := (len("Answer in one word.") + len(text+" [fake:output_tokens=2]") + 3) / 4
	wantBody := fmt.Sprintf(`{"id":"msg_fake%%012d","type":"message","role":"assistant","content":[{"type":"text","text":"tok tok"}],"model":"claude-sonnet-4-6","stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2,"service_tier":"standard"}}`, in)
	var n int
	if _, err := fmt.Sscanf(r.body, `{"id":"msg_fake%012d"`, &n); err != nil || r.status != 200 || r.body != fmt.Sprintf(wantBody, n) {
		t.Errorf("message:\n got  %d %s\n want %s", r.status, r.body, fmt.Sprintf(wantBody, n))
	}
	r = send(t, "POST", url+"/v1/messages", `{"model":"claude-haiku-4-5","max_tokens":3,"messages":[{"role":"user","content":"tell me everything"}]}`, anthropicAuth(anKey)...)
	if !strings.Contains(r.body, `"stop_reason":"max_tokens"`) || !strings.Contains(r.body, `"output_tokens":3`) {
		t.Errorf("capped: %s", r.body)
	}
	u := api.Stats().Keys[0]
	if u.Usage.RealTime != (fakeapi.Usage{Requests: 2, InputTokens: int64(in) + 5, OutputTokens: 5}) || u.ModelUsage["claude-haiku-4-5"].RealTime.OutputTokens != 3 {
		t.Errorf("usage %+v %+v", u.Usage, u.ModelUsage)
	}
}

// TestStrictMarkers: each content marker's answer, in both providers'
// terms.
func TestStrictMarkers(t *testing.T) {
	t.Parallel()
	api, oa := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	_, an := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	chat := func(marker string) string {
		return `{"model":"gpt-4o","messages":[{"role":"user","content":"earlier [fake:status=500]"},{"role":"assistant","content":"ok"},{"role":"user","content":"now ` + marker + `"}]}`
	}
	msg := func(marker string) string {
		return `{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user","content":"now ` + marker + `"}]}`
	}
	want(t, "status=500", send(t, "POST", oa+"/v1/chat/completions", chat("[fake:status=500]"), openaiAuth(oaKey)...), 500,
		oaError("The server had an error while processing your request. Sorry about that!", "server_error", "", ""))
	want(t, "status=400", send(t, "POST", oa+"/v1/chat/completions", chat("[fake:status=400]"), openaiAuth(oaKey)...), 400,
		oaError("This request was refused with status 400 (fakeapi status marker).", "invalid_request_error", "", ""))
	want(t, "refuse", send(t, "POST", oa+"/v1/chat/completions", chat("[fake:refuse]"), openaiAuth(oaKey)...), 403,
		oaError("This request was refused by a content rule.", "invalid_request_error", "", "content_policy_violation"))
	want(t, "too_large", send(t, "POST", oa+"/v1/chat/completions", chat("[fake:too_large]"), openaiAuth(oaKey)...), 429,
		oaError("Request too large for gpt-4o in organization org-test on tokens per min (TPM): Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.", "tokens", "", "rate_limit_exceeded"))
	want(t, "quota", send(t, "POST", oa+"/v1/chat/completions", chat("[fake:quota]"), openaiAuth(oaKey)...), 429,
		oaError("You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.", "insufficient_quota", "", "insufficient_quota"))
	r := send(t, "POST", oa+"/v1/chat/completions", chat("[fake:retry_after=7]"), openaiAuth(oaKey)...)
	want(t, "retry_after", r, 429, oaError("Rate limit reached. Please try again later.", "requests", "", "rate_limit_exceeded"))
	if r.header.Get("retry-after") != "7" {
		t.Errorf("retry-after %q", r.header.Get("retry-after"))
	}
	if r := send(t, "POST", oa+"/v1/chat/completions", chat("[fake:status=429]"), openaiAuth(oaKey)...); r.status != 429 || r.header.Get("retry-after") != "" {
		t.Errorf("a bare 429: %d retry-after %q", r.status, r.header.Get("retry-after"))
	}
	start := time.Now()
	if r := send(t, "POST", oa+"/v1/chat/completions", chat("[fake:latency=150ms]"), openaiAuth(oaKey)...); r.status != 200 || time.Since(start) < 150*time.Millisecond {
		t.Errorf("latency: %d after %s", r.status, time.Since(start))
	}
	st := api.Stats().Keys[0]
	if st.Forced != 3 || st.Refused != 1 || st.Quota != 1 || st.RateLimited != 2 || st.OK != 1 || st.Requests != 8 {
		t.Errorf("stats %+v", st)
	}
	for _, tt := range []struct {
		marker, typ, msg string
		status           int
	}{
		{"[fake:status=529]", "overloaded_error", "Overloaded", 529},
		{"[fake:status=500]", "api_error", "Internal server error", 500},
		{"[fake:refuse]", "permission_error", "Your API key does not have permission to use the specified resource.", 403},
		{"[fake:too_large]", "request_too_large", "Request exceeds the maximum allowed number of bytes.", 413},
		{"[fake:quota]", "invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.", 400},
		{"[fake:retry_after=2]", "rate_limit_error", "Number of requests has exceeded your rate limit. Please try again later.", 429},
	} {
		r := send(t, "POST", an+"/v1/messages", msg(tt.marker), anthropicAuth(anKey)...)
		want(t, "anthropic "+tt.marker, r, tt.status, anError(r, tt.typ, tt.msg))
	}
}

func TestStrictWholeServerControls(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	msg := `{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	api.ForceStatus(529)
	r := send(t, "POST", url+"/v1/messages", msg, anthropicAuth(anKey)...)
	want(t, "overloaded", r, 529, anError(r, "overloaded_error", "Overloaded"))
	if r := send(t, "GET", url+"/v1/models", "", anthropicAuth(anKey)...); r.status != 200 {
		t.Errorf("models while forced: %d", r.status)
	}
	api.ForceStatus(0)
	api.SetLatency(120 * time.Millisecond)
	start := time.Now()
	if r := send(t, "POST", url+"/v1/messages", msg, anthropicAuth(anKey)...); r.status != 200 || time.Since(start) < 120*time.Millisecond {
		t.Errorf("latency: %d after %s", r.status, time.Since(start))
	}
}

// TestStrictLimits: the key's limits count the reported usage; 429s and
// rate headers in each provider's format.
func TestStrictLimits(t *testing.T) {
	t.Parallel()
	api, oa := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{{
		Secret: oaKey, Rate: ratelimit.Limit{N: 10, Period: time.Minute}, Tokens: ratelimit.Limit{N: 30, Period: time.Minute},
		Models: map[string]fakeapi.ModelLimits{"gpt-4o": {Rate: ratelimit.Limit{N: 1, Period: time.Hour}}},
	}}})
	// 8 bytes of text: 2 input tokens, 10 output: 12 tokens a request.
	chat := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"abcdefgh"}],"max_tokens":10}`
	}
	r := send(t, "POST", oa+"/v1/chat/completions", chat("gpt-4o-mini"), openaiAuth(oaKey)...)
	h := r.header
	if r.status != 200 || h.Get("x-ratelimit-limit-requests") != "10" || h.Get("x-ratelimit-remaining-requests") != "9" ||
		h.Get("x-ratelimit-limit-tokens") != "30" || h.Get("x-ratelimit-remaining-tokens") != "18" {
		t.Errorf("first: %d %v", r.status, h)
	}
	// Token buckets: the reset is the time until the bucket is full again,
	// one request's refill at 10 a minute, 12 tokens' at 30 a minute.
	if h.Get("x-ratelimit-reset-requests") != "6s" || h.Get("x-ratelimit-reset-tokens") != "24s" {
		t.Errorf("resets %q %q", h.Get("x-ratelimit-reset-requests"), h.Get("x-ratelimit-reset-tokens"))
	}
	send(t, "POST", oa+"/v1/chat/completions", chat("gpt-4o-mini"), openaiAuth(oaKey)...)
	r = send(t, "POST", oa+"/v1/chat/completions", chat("gpt-4o-mini"), openaiAuth(oaKey)...)
	var body struct {
		Error struct{ Message, Type, Code string }
	}
	_ = json.Unmarshal([]byte(r.body), &body)
	if r.status != 429 || body.Error.Type != "tokens" || body.Error.Code != "rate_limit_exceeded" ||
		!strings.HasPrefix(body.Error.Message, "Rate limit reached for gpt-4o-mini in organization org-test on tokens per min (TPM): Limit 30, Used 24, Requested 12. Please try again in ") ||
		r.header.Get("retry-after") == "" || r.header.Get("retry-after-ms") == "" {
		t.Errorf("tokens 429: %d %s %v", r.status, r.body, r.header)
	}
	// The model's own limit.
	api2, oa2 := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{{
		Secret: oaKey, Models: map[string]fakeapi.ModelLimits{"gpt-4o": {Rate: ratelimit.Limit{N: 1, Period: time.Hour}}},
	}}})
	send(t, "POST", oa2+"/v1/chat/completions", chat("gpt-4o"), openaiAuth(oaKey)...)
	r = send(t, "POST", oa2+"/v1/chat/completions", chat("gpt-4o"), openaiAuth(oaKey)...)
	if r.status != 429 || r.header.Get("retry-after") != "3600" || !strings.Contains(r.body, `on requests per 1h0m0s: Limit 1, Used 1, Requested 1.`) {
		t.Errorf("model 429: %d %s", r.status, r.body)
	}
	if m := api2.Stats().Keys[0].Models["gpt-4o"]; m.ModelLimited != 1 || m.OK != 1 {
		t.Errorf("model stats %+v", m)
	}
	if st := api.Stats(); st.Keys[0].Tokens != 24 || st.Keys[0].RateLimited != 1 || st.OverLimit() != 0 {
		t.Errorf("stats %+v", st.Keys[0])
	}

	_, an := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic, Keys: []fakeapi.Key{{
		Secret: anKey, Rate: ratelimit.Limit{N: 1, Period: time.Minute}, Tokens: ratelimit.Limit{N: 20000, Period: time.Minute},
	}}})
	msg := `{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user","content":"abcd"}]}`
	r = send(t, "POST", an+"/v1/messages", msg, anthropicAuth(anKey)...)
	h = r.header
	for _, name := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		if h.Get("anthropic-ratelimit-"+name+"-limit") == "" || h.Get("anthropic-ratelimit-"+name+"-remaining") == "" {
			t.Errorf("anthropic %s headers missing: %v", name, h)
		}
		if _, err := time.Parse(time.RFC3339, h.Get("anthropic-ratelimit-"+name+"-reset")); err != nil {
			t.Errorf("anthropic %s reset: %v", name, err)
		}
	}
	if h.Get("anthropic-ratelimit-tokens-remaining") != "19989" || h.Get("anthropic-ratelimit-requests-remaining") != "0" {
		t.Errorf("anthropic remaining: %v", h)
	}
	r = send(t, "POST", an+"/v1/messages", msg, anthropicAuth(anKey)...)
	want(t, "anthropic 429", r, 429, anError(r, "rate_limit_error", "This request would exceed the rate limit for your organization (org-test) of 1 requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."))
	if ra, _ := strconv.Atoi(r.header.Get("retry-after")); ra < 50 || ra > 60 || r.header.Get("retry-after-ms") != "" {
		t.Errorf("anthropic retry headers %v", r.header)
	}
}

func TestStrictModels(t *testing.T) {
	t.Parallel()
	_, oa := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Models: []string{"gpt-4o", "gpt-4o-mini"}})
	want(t, "openai list", send(t, "GET", oa+"/v1/models", "", openaiAuth(oaKey)...), 200,
		`{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1735689600,"owned_by":"system"},{"id":"gpt-4o-mini","object":"model","created":1735689600,"owned_by":"system"}]}`)
	want(t, "openai one", send(t, "GET", oa+"/v1/models/gpt-4o", "", openaiAuth(oaKey)...), 200,
		`{"id":"gpt-4o","object":"model","created":1735689600,"owned_by":"system"}`)
	want(t, "openai unknown", send(t, "GET", oa+"/v1/models/gpt-9", "", openaiAuth(oaKey)...), 404,
		oaError("The model `gpt-9` does not exist or you do not have access to it.", "invalid_request_error", "", "model_not_found"))
	_, an := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic, Keys: []fakeapi.Key{{Secret: anKey,
		Models: map[string]fakeapi.ModelLimits{"claude-opus-4-1": {Rate: ratelimit.Limit{N: 5, Period: time.Minute}}}}}})
	want(t, "anthropic list", send(t, "GET", an+"/v1/models", "", anthropicAuth(anKey)...), 200,
		`{"data":[{"type":"model","id":"claude-haiku-4-5","display_name":"claude-haiku-4-5","created_at":"2025-01-01T00:00:00Z"},{"type":"model","id":"claude-opus-4-1","display_name":"claude-opus-4-1","created_at":"2025-01-01T00:00:00Z"},{"type":"model","id":"claude-sonnet-4-6","display_name":"claude-sonnet-4-6","created_at":"2025-01-01T00:00:00Z"}],"has_more":false,"first_id":"claude-haiku-4-5","last_id":"claude-sonnet-4-6"}`)
	want(t, "anthropic one", send(t, "GET", an+"/v1/models/claude-opus-4-1", "", anthropicAuth(anKey)...), 200,
		`{"type":"model","id":"claude-opus-4-1","display_name":"claude-opus-4-1","created_at":"2025-01-01T00:00:00Z"}`)
	r := send(t, "GET", an+"/v1/models/claude-9", "", anthropicAuth(anKey)...)
	want(t, "anthropic unknown", r, 404, anError(r, "not_found_error", "model: claude-9"))
}

// TestStrictRecord: the bytes each request carried, as the server got
// them.
func TestStrictRecord(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []fakeapi.Received
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Record: true, OnRequest: func(r fakeapi.Received) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
	}})
	bodies := []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"é \u00e9 <b>&</b>"}]}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"id":"x"}`,
	}
	for _, b := range bodies {
		send(t, "POST", url+"/v1/chat/completions?x=1", b, openaiAuth(oaKey2)...)
	}
	send(t, "GET", url+"/v1/models", "", openaiAuth("sk-someone-else-0000")...)
	got := api.Received()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || len(seen) != 3 {
		t.Fatalf("received %d, callback %d", len(got), len(seen))
	}
	for i, b := range bodies {
		if string(got[i].Body) != b || string(seen[i].Body) != b || got[i].KeyIndex != 1 || got[i].Path != "/v1/chat/completions" ||
			got[i].RawQuery != "x=1" || got[i].Method != "POST" || got[i].Header.Get("Authorization") != "Bearer "+oaKey2 {
			t.Errorf("received[%d] = %+v", i, got[i])
		}
	}
	if got[2].KeyIndex != -1 || got[2].Method != "GET" || len(got[2].Body) != 0 {
		t.Errorf("unknown key: %+v", got[2])
	}
}

func TestStrictNewErrors(t *testing.T) {
	t.Parallel()
	k := []fakeapi.Key{{Secret: "x"}}
	for _, tt := range []struct {
		cfg  fakeapi.Config
		want string
	}{
		{fakeapi.Config{Keys: k, Provider: "gemini"}, `provider "gemini"`},
		{fakeapi.Config{Keys: k, Provider: "openai", OutputTokens: -1}, "output tokens"},
		{fakeapi.Config{Keys: k, Provider: "openai", BatchDelay: -1}, "batch delay"},
		{fakeapi.Config{Keys: k, Provider: "openai", Models: []string{""}}, "models[0]"},
	} {
		if _, err := fakeapi.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v; want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestStrictConcurrent: real-time requests, batch polls and stats reads at
// once, for the race detector; the figures add up.
func TestStrictConcurrent(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, BatchDelay: 50 * time.Millisecond})
	id := newBatch(t, url, oaKey2, chatLine("a", "x", 2), chatLine("b", "y", 2), chatLine("c", "z", 2))
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for range 10 {
				body := fmt.Sprintf(`{"model":"gpt-4o","messages":[{"role":"user","content":"abcd [fake:output_tokens=%d]"}]}`, g)
				if r := send(t, "POST", url+"/v1/chat/completions", body, openaiAuth(oaKey)...); r.status != 200 {
					t.Errorf("chat: %d %s", r.status, r.body)
				}
				send(t, "GET", url+"/v1/batches/"+id, "", openaiAuth(oaKey2)...)
				_ = api.Stats()
			}
		})
	}
	wg.Wait()
	pollUntil(t, url+"/v1/batches/"+id, oaKey2, openaiAuth, "status", "completed")
	st := api.Stats()
	// "abcd [fake:output_tokens=N]" is 27 bytes: 7 tokens; outputs 0..5, ten each.
	if st.Keys[0].Usage.RealTime != (fakeapi.Usage{Requests: 60, InputTokens: 420, OutputTokens: 150}) || st.Keys[0].OK != 60 {
		t.Errorf("real time %+v", st.Keys[0].Usage)
	}
	if st.Keys[1].Usage.Batch != (fakeapi.Usage{Requests: 3, InputTokens: 3, OutputTokens: 6}) {
		t.Errorf("batch %+v", st.Keys[1].Usage)
	}
}
