package fakeapi_test

import (
	"encoding/json"
	"testing"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

func TestStrictResponses(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	type reply struct {
		ID                string `json:"id"`
		Object            string `json:"object"`
		Status            string `json:"status"`
		Model             string `json:"model"`
		Instructions      any    `json:"instructions"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
		Output []struct {
			Type, Role, Status string
			Content            []struct{ Type, Text string }
		} `json:"output"`
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
			TotalTokens  int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	post := func(body string) (answer, reply) {
		t.Helper()
		r := send(t, "POST", url+"/v1/responses", body, openaiAuth(oaKey)...)
		var rp reply
		if r.status == 200 {
			if err := json.Unmarshal([]byte(r.body), &rp); err != nil {
				t.Fatalf("%s: %v", r.body, err)
			}
		}
		return r, rp
	}
	// "Say hi [fake:output_tokens=3]" (29 bytes) and "Be brief." (9): 10 tokens.
	r, rp := post(`{"model":"gpt-4o-mini","instructions":"Be brief.","input":"Say hi [fake:output_tokens=3]"}`)
	if r.status != 200 || rp.Object != "response" || rp.Status != "completed" || rp.Model != "gpt-4o-mini" || rp.Instructions != "Be brief." ||
		len(rp.Output) != 1 || rp.Output[0].Type != "message" || rp.Output[0].Role != "assistant" ||
		rp.Output[0].Content[0].Type != "output_text" || rp.Output[0].Content[0].Text != "tok tok tok" ||
		rp.Usage.InputTokens != 10 || rp.Usage.OutputTokens != 3 || rp.Usage.TotalTokens != 13 || r.header.Get("x-request-id") == "" {
		t.Errorf("string input: %d %s", r.status, r.body)
	}
	// A list of items: the last user message's markers; capped by
	// max_output_tokens, the response is incomplete.
	r, rp = post(`{"model":"gpt-4o","input":[{"role":"user","content":"first [fake:output_tokens=1]"},{"type":"message","role":"assistant","content":"ok"},` +
		`{"role":"user","content":[{"type":"input_text","text":"go on [fake:output_tokens=40]"}]}],"max_output_tokens":16}`)
	if r.status != 200 || rp.Status != "incomplete" || rp.IncompleteDetails == nil || rp.IncompleteDetails.Reason != "max_output_tokens" || rp.Usage.OutputTokens != 16 {
		t.Errorf("items: %d %s", r.status, r.body)
	}
	if u := api.Stats().Keys[0].Usage.RealTime; u.Requests != 2 || u.OutputTokens != 19 {
		t.Errorf("usage %+v", u)
	}
	for _, tt := range []struct {
		body             string
		msg, param, code string
	}{
		{`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "Unknown parameter: 'messages'.", "messages", "unknown_parameter"},
		{`{"input":"hi"}`, "Missing required parameter: 'model'.", "model", "missing_required_parameter"},
		{`{"model":"gpt-4o","input":5}`, "Invalid type for 'input': expected one of a string or an array, but got an integer instead.", "input", "invalid_type"},
		{`{"model":"gpt-4o","input":"hi","max_output_tokens":5}`, "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 5 instead.", "max_output_tokens", "integer_below_min_value"},
		{`{"model":"gpt-4o","input":[{"role":"robot","content":"hi"}]}`, "Invalid value: 'robot'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", "input[0].role", "invalid_value"},
		{`{"model":"gpt-4o","input":"hi","stream":true}`, `fakeapi: streaming ("stream": true) of /v1/responses is not supported by this stand-in.`, "stream", ""},
		{`{"model":"gpt-4o"}`, "fakeapi: a response without input (a stored prompt or conversation) is not served by this stand-in.", "input", ""},
	} {
		r, _ := post(tt.body)
		want(t, tt.body, r, 400, oaError(tt.msg, "invalid_request_error", tt.param, tt.code))
	}
	_, an := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	if r := send(t, "POST", an+"/v1/responses", `{"model":"x","input":"hi"}`, anthropicAuth(anKey)...); r.status != 404 {
		t.Errorf("Anthropic /v1/responses: %d", r.status)
	}
}
