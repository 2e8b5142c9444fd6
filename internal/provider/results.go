package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// Outcomes of an item, as a ResultView has them (queue's outcomes).
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
)

// ResultView is what a result line in a provider's format is written
// from: an item's latest result.
type ResultView struct {
	Batch, Item string
	Outcome     string
	// StatusCode is the HTTP status of the item's last API reply (0:
	// none: it got no reply).
	StatusCode int
	// RequestID is the API's ID of that request ("" when unknown).
	RequestID string
	// Output is the reply's body (OutputEncoding "base64" when it is not
	// text); Error is keyfleet's error text.
	Output, OutputEncoding string
	Error                  string
}

// body is the reply's body as JSON: itself when it is JSON, else its text
// as a JSON string (a reply that is not JSON, or was cut to fit).
func (v ResultView) body() json.RawMessage {
	text := v.Output
	if v.OutputEncoding == "base64" {
		if b, err := base64.StdEncoding.DecodeString(text); err == nil {
			text = string(b)
		}
	}
	if text != "" && json.Valid([]byte(text)) {
		return json.RawMessage(text)
	}
	s, _ := json.Marshal(text)
	return s
}

// requestLineID is the id of an OpenAI output line: batch_req_ and 24 hex
// digits of the item's SHA-256, the same for the same item every time.
func requestLineID(batch, item string) string {
	sum := sha256.Sum256([]byte(batch + "/" + item))
	return "batch_req_" + hex.EncodeToString(sum[:12])
}

// ResultLine writes v as one line (no newline) of format's output:
//
//   - FormatOpenAIBatch, as a line of OpenAI's batch output file:
//     {"id", "custom_id", "response": {"status_code", "request_id",
//     "body"}, "error": null}, body the API's last reply; an item with no
//     reply (cancelled, dead-lettered before any request) has "response":
//     null and "error": {"code", "message"};
//   - FormatAnthropicBatch, as a Message Batch result: {"custom_id",
//     "result": {"type": "succeeded", "message": {…}}}, {"type":
//     "errored", "error": {…}} or {"type": "canceled"}.
func ResultLine(format string, v ResultView) ([]byte, error) {
	switch format {
	case FormatOpenAIBatch:
		type response struct {
			StatusCode int             `json:"status_code"`
			RequestID  string          `json:"request_id"`
			Body       json.RawMessage `json:"body"`
		}
		type lineError struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		line := struct {
			ID       string     `json:"id"`
			CustomID string     `json:"custom_id"`
			Response *response  `json:"response"`
			Error    *lineError `json:"error"`
		}{ID: requestLineID(v.Batch, v.Item), CustomID: v.Item}
		switch {
		case v.StatusCode != 0:
			line.Response = &response{StatusCode: v.StatusCode, RequestID: v.RequestID, Body: v.body()}
		case v.Outcome == OutcomeCancelled:
			line.Error = &lineError{Code: "batch_cancelled", Message: "the batch was cancelled before this request ran"}
		default:
			line.Error = &lineError{Code: "request_failed", Message: v.Error}
		}
		return jsonl.Marshal(line)
	case FormatAnthropicBatch:
		type result struct {
			Type    string          `json:"type"`
			Message json.RawMessage `json:"message,omitempty"`
			Error   json.RawMessage `json:"error,omitempty"`
		}
		line := struct {
			CustomID string `json:"custom_id"`
			Result   result `json:"result"`
		}{CustomID: v.Item}
		switch {
		case v.Outcome == OutcomeSucceeded:
			line.Result = result{Type: "succeeded", Message: v.body()}
		case v.Outcome == OutcomeCancelled:
			line.Result = result{Type: "canceled"}
		default:
			line.Result = result{Type: "errored", Error: v.errorBody()}
		}
		return jsonl.Marshal(line)
	}
	return nil, fmt.Errorf("unknown result format %q (want %s, %s or %s)", format, FormatJSONL, FormatOpenAIBatch, FormatAnthropicBatch)
}

// errorBody is an errored Anthropic result's error: the API's own error
// reply when the item got one, else an api_error saying keyfleet's.
func (v ResultView) errorBody() json.RawMessage {
	if v.StatusCode != 0 {
		var e struct {
			Type  string          `json:"type"`
			Error json.RawMessage `json:"error"`
		}
		if b := v.body(); json.Unmarshal(b, &e) == nil && e.Type == "error" && len(e.Error) > 0 {
			return b
		}
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": "api_error", "message": v.Error}})
	return b
}
