package provider_test

import (
	"encoding/json"
	"testing"

	"github.com/keyfleet/keyfleet/internal/provider"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ base, endpoint, want string }{
		{"https://api.openai.com", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"http://vllm:8000/", "/v1/embeddings", "http://vllm:8000/v1/embeddings"},
		{"http://127.0.0.1:9/v1", "/v1/chat/completions", "http://127.0.0.1:9/v1/chat/completions"},
		{"https://gw.example.com/openai", "/v1/chat/completions", "https://gw.example.com/openai/v1/chat/completions"},
	} {
		if got := provider.URL(tc.base, tc.endpoint); got != tc.want {
			t.Errorf("URL(%q, %q) = %q, want %q", tc.base, tc.endpoint, got, tc.want)
		}
	}
}

func TestEstimate(t *testing.T) {
	for _, tc := range []struct {
		body, endpoint string
		want           int64
	}{
		{`{"model":"m","messages":[{"role":"user","content":"12345678"}]}`, "", 2 + provider.DefaultMaxTokens},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"1234"},{"type":"image_url","image_url":{"url":"x"}}]}],"max_tokens":100}`, "", 1 + 100},
		{`{"model":"m","system":"abcd","messages":[{"role":"user","content":"é"}],"max_tokens":3}`, "", 2 + 3},
		{`{"model":"m","max_completion_tokens":50,"max_tokens":9,"messages":[]}`, "", 50},
		{`{"model":"m","input":["ab","cd"]}`, "/v1/embeddings", 1},
	} {
		if got := provider.Estimate([]byte(tc.body), tc.endpoint); got != tc.want {
			t.Errorf("Estimate(%s) = %d, want %d", tc.body, got, tc.want)
		}
	}
}

func TestReadUsage(t *testing.T) {
	for _, tc := range []struct {
		body string
		want provider.Usage
		ok   bool
	}{
		{`{"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`, provider.Usage{Input: 10, Output: 5, Total: 15}, true},
		{`{"usage":{"input_tokens":7,"output_tokens":3}}`, provider.Usage{Input: 7, Output: 3, Total: 10}, true},
		{`{"usage":{"prompt_tokens":4,"total_tokens":4}}`, provider.Usage{Input: 4, Total: 4}, true},
		{`{"id":"x"}`, provider.Usage{}, false},
		{`not json`, provider.Usage{}, false},
	} {
		got, ok := provider.ReadUsage([]byte(tc.body))
		if got != tc.want || ok != tc.ok {
			t.Errorf("ReadUsage(%s) = %+v %v, want %+v %v", tc.body, got, ok, tc.want, tc.ok)
		}
	}
}

// Result lines read as the providers' own: OpenAI's output and error file
// lines, Anthropic's result types.
func TestResultLine(t *testing.T) {
	ok := provider.ResultView{Batch: "b", Item: "req-1", Outcome: provider.OutcomeSucceeded, StatusCode: 200, RequestID: "req_abc",
		Output: `{"id":"chatcmpl-1","object":"chat.completion"}`}
	failed := provider.ResultView{Batch: "b", Item: "req-2", Outcome: provider.OutcomeFailed, StatusCode: 400,
		Output: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`}
	noReply := provider.ResultView{Batch: "b", Item: "req-3", Outcome: provider.OutcomeFailed, Error: "out of attempts: http: connection refused"}
	cancelled := provider.ResultView{Batch: "b", Item: "req-4", Outcome: provider.OutcomeCancelled}

	type oaLine struct {
		ID       string `json:"id"`
		CustomID string `json:"custom_id"`
		Response *struct {
			StatusCode int             `json:"status_code"`
			RequestID  string          `json:"request_id"`
			Body       json.RawMessage `json:"body"`
		} `json:"response"`
		Error *struct{ Code, Message string } `json:"error"`
	}
	read := func(v provider.ResultView, format string, into any) {
		t.Helper()
		b, err := provider.ResultLine(format, v)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	var l oaLine
	read(ok, provider.FormatOpenAIBatch, &l)
	if l.CustomID != "req-1" || len(l.ID) != len("batch_req_")+24 || l.Response == nil || l.Response.StatusCode != 200 ||
		l.Response.RequestID != "req_abc" || string(l.Response.Body) != ok.Output || l.Error != nil {
		t.Errorf("openai ok line: %+v", l)
	}
	l = oaLine{}
	read(noReply, provider.FormatOpenAIBatch, &l)
	if l.Response != nil || l.Error == nil || l.Error.Code != "request_failed" || l.Error.Message != noReply.Error {
		t.Errorf("openai no-reply line: %+v", l)
	}
	l = oaLine{}
	read(cancelled, provider.FormatOpenAIBatch, &l)
	if l.Response != nil || l.Error == nil || l.Error.Code != "batch_cancelled" {
		t.Errorf("openai cancelled line: %+v", l)
	}

	type anLine struct {
		CustomID string `json:"custom_id"`
		Result   struct {
			Type    string          `json:"type"`
			Message json.RawMessage `json:"message"`
			Error   struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			} `json:"error"`
		} `json:"result"`
	}
	var a anLine
	read(ok, provider.FormatAnthropicBatch, &a)
	if a.CustomID != "req-1" || a.Result.Type != "succeeded" || string(a.Result.Message) != ok.Output {
		t.Errorf("anthropic succeeded: %+v", a)
	}
	a = anLine{}
	read(failed, provider.FormatAnthropicBatch, &a)
	if a.Result.Type != "errored" || a.Result.Error.Type != "error" || a.Result.Error.Error.Message != "max_tokens: Field required" {
		t.Errorf("anthropic errored with the API's error: %+v", a)
	}
	a = anLine{}
	read(noReply, provider.FormatAnthropicBatch, &a)
	if a.Result.Type != "errored" || a.Result.Error.Error.Type != "api_error" || a.Result.Error.Error.Message != noReply.Error {
		t.Errorf("anthropic errored without a reply: %+v", a)
	}
	a = anLine{}
	read(cancelled, provider.FormatAnthropicBatch, &a)
	if a.Result.Type != "canceled" {
		t.Errorf("anthropic cancelled: %+v", a)
	}
	if _, err := provider.ResultLine("csv", ok); err == nil {
		t.Error("an unknown format is refused")
	}
}
