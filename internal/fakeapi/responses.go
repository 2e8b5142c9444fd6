package fakeapi

import (
	"encoding/json"
	"fmt"
	"time"
)

// OpenAI's Responses API (POST /v1/responses), not streamed: a gateway
// endpoint (DESIGN "Gateway") served as chat completions are, with the
// Responses API's own request and reply shapes. "stream": true is refused
// as not served by this stand-in, as a request without input (a stored
// prompt or conversation) is.

// unknownParameter is the Responses API's refusal of a field it does not
// know: 400 invalid_request_error "Unknown parameter: 'x'." with param x
// and code unknown_parameter (the API's reply as quoted, e.g. for
// external_web_access, in public projects' notes; the same words as its
// refusals of nested unknown fields).
func unknownParameter(name string) *apiError {
	return invalid(fmt.Sprintf("Unknown parameter: '%s'.", name), name, "unknown_parameter")
}

// parseResponses reads a Responses API request (openai-node 6.49.0
// ResponseCreateParamsBase): input a string or a list of items, whose
// messages ({role, content} with "type": "message" or without) have a
// string or a list of parts (their "text" counts); other items count as
// their JSON. instructions counts as text. max_output_tokens must be at
// least 16: "Invalid 'max_output_tokens': integer below minimum value.
// Expected a value >= 16, but got 1 instead." with code
// integer_below_min_value (the API's reply as quoted by several clients).
func (st *strictState) parseResponses(q *query, fields map[string]json.RawMessage) *apiError {
	if q.stream {
		return invalid("fakeapi: streaming (\"stream\": true) of /v1/responses is not supported by this stand-in.", "stream", "")
	}
	raw, ok := fields["input"]
	if !ok || kindOf(raw) == kindNull {
		return invalid("fakeapi: a response without input (a stored prompt or conversation) is not served by this stand-in.", "input", "")
	}
	if kindOf(raw) == kindString {
		var s string
		_ = json.Unmarshal(raw, &s)
		q.texts = []string{s}
		mk, e := st.parseMarks(q.texts)
		if e != nil {
			return e
		}
		q.marks = mk
	} else {
		var items []json.RawMessage
		_ = json.Unmarshal(raw, &items)
		last, e := st.readMessages(q, items, "input[%d]", func(path string, m map[string]json.RawMessage) *apiError {
			roleRaw, isMessage := m["role"]
			if !isMessage {
				return nil
			}
			var role string
			if json.Unmarshal(roleRaw, &role) != nil {
				return st.wrongType(path+".role", []jsonKind{kindString}, kindOf(roleRaw))
			}
			switch role {
			case "user", "assistant", "system", "developer":
			default:
				return invalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", role), path+".role", "invalid_value")
			}
			if _, ok := m["content"]; !ok {
				return st.missing(path + ".content")
			}
			return nil
		})
		if e != nil {
			return e
		}
		for _, it := range items {
			var m map[string]json.RawMessage
			if json.Unmarshal(it, &m) == nil && m["role"] == nil {
				q.texts = append(q.texts, string(it)) // a tool call's output, a reasoning item
			}
		}
		if e := st.userMarks(q, items, last); e != nil {
			return e
		}
	}
	if raw, ok := fields["instructions"]; ok && kindOf(raw) == kindString {
		var s string
		_ = json.Unmarshal(raw, &s)
		q.texts = append(q.texts, s)
		q.instructions = s
	}
	if raw, ok := fields["tools"]; ok {
		q.texts = append(q.texts, string(raw))
	}
	if n, ok := intField(fields, "max_output_tokens"); ok {
		if n < 16 {
			return invalid(fmt.Sprintf("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got %d instead.", n), "max_output_tokens", "integer_below_min_value")
		}
		q.max = n
	}
	return nil
}

// responseReply is a Response (openai-node 6.49.0 Response: id, object
// "response", created_at, status, error, incomplete_details,
// instructions, max_output_tokens, model, output, parallel_tool_calls,
// ... usage ResponseUsage {input_tokens, input_tokens_details
// {cached_tokens}, output_tokens, output_tokens_details
// {reasoning_tokens}, total_tokens}) whose output is one assistant
// message of output_text; capped by max_output_tokens, its status is
// "incomplete" with incomplete_details {"reason": "max_output_tokens"}.
func (st *strictState) responseReply(q *query) any {
	status, incomplete := "completed", any(nil)
	if q.max >= 0 && q.out == q.max {
		status, incomplete = "incomplete", map[string]string{"reason": "max_output_tokens"}
	}
	var maxOut any
	if q.max >= 0 {
		maxOut = q.max
	}
	text := []kv{{"type", "output_text"}, {"annotations", []any{}}, {"logprobs", []any{}}, {"text", outputText(q.out)}}
	message := []kv{{"id", st.nextID("msg_")}, {"type", "message"}, {"status", status}, {"content", []object{text}}, {"role", "assistant"}}
	usage := []kv{
		{"input_tokens", q.input}, {"input_tokens_details", object{{"cached_tokens", 0}}},
		{"output_tokens", q.out}, {"output_tokens_details", object{{"reasoning_tokens", 0}}},
		{"total_tokens", q.input + q.out},
	}
	return object{
		{"id", st.nextID("resp_")}, {"object", "response"}, {"created_at", time.Now().Unix()}, {"status", status},
		{"background", false}, {"error", nil}, {"incomplete_details", incomplete}, {"instructions", q.instructions},
		{"max_output_tokens", maxOut}, {"model", q.model}, {"output", []object{message}},
		{"parallel_tool_calls", true}, {"previous_response_id", nil},
		{"reasoning", object{{"effort", nil}, {"summary", nil}}}, {"service_tier", "default"}, {"store", true},
		{"temperature", 1.0}, {"text", object{{"format", object{{"type", "text"}}}, {"verbosity", "medium"}}},
		{"tool_choice", "auto"}, {"tools", []any{}}, {"top_p", 1.0}, {"truncation", "disabled"},
		{"usage", object(usage)}, {"user", nil}, {"metadata", object{}},
	}
}
