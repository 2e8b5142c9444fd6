package provider

import (
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"
)

// DefaultMaxTokens is the output a request without max_tokens (or
// max_completion_tokens) is expected to take, in the estimate.
const DefaultMaxTokens = 16

// CharsPerToken is how many characters of prompt text the estimate counts
// as one token.
const CharsPerToken = 4

// Estimate is the estimated tokens of a request to endpoint ("" for the
// provider's default) whose body is body (see Request.Estimate), for an
// item published without its cost; 1 at least.
func Estimate(body []byte, endpoint string) int64 {
	est, err := estimate(body, endpoint)
	if err != nil {
		return max(est.tokens, 1)
	}
	return est.tokens
}

// Ceiling is the most tokens a request to endpoint ("" for the
// provider's default) whose body is body can use, for a budget's
// reservation: its input counted high (a token per byte of the body) and
// its max output tokens; given says the request names its max output
// (or takes none: embeddings).
func Ceiling(body []byte, endpoint string) (in, out int64, given bool) {
	est, err := estimate(body, endpoint)
	if err != nil {
		return int64(len(body)), est.maxOut, false
	}
	return int64(len(body)), est.maxOut, est.given
}

// estimated is what estimate learnt of a request.
type estimated struct {
	tokens int64 // prompt characters ÷ 4 + max output
	maxOut int64 // the max output tokens it asks for (DefaultMaxTokens when none; 0 for embeddings)
	given  bool  // it names its max output tokens (or takes none: embeddings)
}

// estimate reads a request's prompt text and its output bound: the
// characters of every text it sends (messages' contents, a system
// prompt, a prompt or an input) ÷ CharsPerToken, rounded up, plus its
// max_completion_tokens, max_output_tokens or max_tokens
// (DefaultMaxTokens when it has none; none for embeddings). A bound that
// is not a non-negative integer is a FieldError.
func estimate(body []byte, endpoint string) (estimated, *FieldError) {
	var r struct {
		Messages            []struct{ Content json.RawMessage } `json:"messages"`
		System              json.RawMessage                     `json:"system"`
		Prompt              json.RawMessage                     `json:"prompt"`
		Input               json.RawMessage                     `json:"input"`
		Instructions        json.RawMessage                     `json:"instructions"`
		MaxTokens           json.RawMessage                     `json:"max_tokens"`
		MaxCompletionTokens json.RawMessage                     `json:"max_completion_tokens"`
		MaxOutputTokens     json.RawMessage                     `json:"max_output_tokens"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		// A field of another type than these: the provider reports it; the
		// estimate counts what it can.
		var m map[string]json.RawMessage
		_ = json.Unmarshal(body, &m)
		r.Messages = nil
		r.System, r.Prompt, r.Input, r.Instructions = m["system"], m["prompt"], m["input"], m["instructions"]
		r.MaxTokens, r.MaxCompletionTokens, r.MaxOutputTokens = m["max_tokens"], m["max_completion_tokens"], m["max_output_tokens"]
	}
	chars := 0
	for _, m := range r.Messages {
		chars += textChars(m.Content)
	}
	for _, raw := range []json.RawMessage{r.System, r.Prompt, r.Input, r.Instructions} {
		chars += textChars(raw)
	}
	var out estimated
	out.maxOut = DefaultMaxTokens
	if endpoint == "/v1/embeddings" {
		out.maxOut, out.given = 0, true
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"max_completion_tokens", r.MaxCompletionTokens}, {"max_output_tokens", r.MaxOutputTokens}, {"max_tokens", r.MaxTokens}} {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		var n float64
		if json.Unmarshal(f.raw, &n) != nil || n < 0 || n != math.Trunc(n) || n > 1<<40 {
			return out, &FieldError{f.name, fmt.Sprintf("is %s, want a whole number of tokens", shown(f.raw))}
		}
		out.maxOut, out.given = int64(n), true
		break
	}
	out.tokens = int64((chars+CharsPerToken-1)/CharsPerToken) + out.maxOut
	out.tokens = max(out.tokens, 1)
	return out, nil
}

// textChars counts the characters of the text in a content value: a
// string, an array of strings, or an array of parts whose "text" (or
// nested "content") holds text.
func textChars(raw json.RawMessage) int {
	if len(raw) == 0 {
		return 0
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return utf8.RuneCountInString(s)
		}
	case '[':
		var parts []json.RawMessage
		if json.Unmarshal(raw, &parts) != nil {
			return 0
		}
		n := 0
		for _, p := range parts {
			n += textChars(p)
		}
		return n
	case '{':
		var part struct {
			Text    json.RawMessage `json:"text"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &part) == nil {
			return textChars(part.Text) + textChars(part.Content)
		}
	}
	return 0
}
