package provider

import (
	"encoding/json"
	"math"
)

// Usage is what a reply says a request used, in tokens.
type Usage struct {
	// Input and Output tokens (OpenAI's prompt_tokens and
	// completion_tokens; Anthropic's and the Responses API's input_tokens
	// and output_tokens).
	Input, Output int64
	// Total is total_tokens where the reply gives it, else Input +
	// Output: what the run really cost in a key's token limits.
	Total int64
}

// ReadUsage reads the usage object of a reply (either provider's names),
// and whether it found one.
func ReadUsage(body []byte) (Usage, bool) {
	var r struct {
		Usage *struct {
			PromptTokens     *float64 `json:"prompt_tokens"`
			CompletionTokens *float64 `json:"completion_tokens"`
			TotalTokens      *float64 `json:"total_tokens"`
			InputTokens      *float64 `json:"input_tokens"`
			OutputTokens     *float64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return Usage{}, false
	}
	u := r.Usage
	n := func(p *float64) int64 {
		if p == nil || *p < 0 || *p > math.MaxInt64/4 || math.IsNaN(*p) {
			return 0
		}
		return int64(math.Ceil(*p))
	}
	var out Usage
	switch {
	case u.PromptTokens != nil || u.CompletionTokens != nil:
		out.Input, out.Output = n(u.PromptTokens), n(u.CompletionTokens)
	case u.InputTokens != nil || u.OutputTokens != nil:
		out.Input, out.Output = n(u.InputTokens), n(u.OutputTokens)
	case u.TotalTokens == nil:
		return Usage{}, false
	}
	out.Total = out.Input + out.Output
	if t := n(u.TotalTokens); t > 0 {
		out.Total = t
	}
	return out, true
}
