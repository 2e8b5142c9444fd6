package fakeapi

import (
	"fmt"
	"net/http"
)

// itemControls are the request fields that make an item misbehave the
// ways that must not take out a key pool.
type itemControls struct {
	// Refuse: 403 whatever the key, as a content rule or a WAF answers.
	Refuse bool `json:"refuse"`
	// TooLarge: OpenAI's 429 for a request larger than the key's limit,
	// which no wait can fix.
	TooLarge bool `json:"too_large"`
	// RetryAfter: a 429 whose Retry-After is this value, as given.
	RetryAfter *string `json:"retry_after"`
}

// answerItemControls answers a request whose item asks to misbehave; it
// reports whether it answered.
func (s *Server) answerItemControls(w http.ResponseWriter, k *keyState, c itemControls) bool {
	switch {
	case c.Refuse:
		k.refused.Add(1)
		writeJSON(w, http.StatusForbidden, map[string]any{"error": map[string]any{
			"code": "content_policy", "message": "This request was refused by a content rule.",
		}})
	case c.TooLarge:
		k.rateLimited.Add(1)
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{
			"code": "rate_limit_exceeded", "type": "tokens",
			"message": "Request too large for gpt-4o in organization org-test on tokens per min (TPM): " +
				"Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully.",
		}})
	case c.RetryAfter != nil:
		k.rateLimited.Add(1)
		w.Header().Set("Retry-After", *c.RetryAfter)
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "rate_limited"})
	default:
		return false
	}
	return true
}

// writeRevoked answers as OpenAI does for a revoked key.
func writeRevoked(w http.ResponseWriter) {
	writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{
		"code": "invalid_api_key", "message": "Incorrect API key provided.",
	}})
}

// Revoke makes the key with this label ("key-0", ...) refuse every
// request with 401 (revoked true) or accept them again (false), as a key
// whose quota ran out and came back does.
func (s *Server) Revoke(label string, revoked bool) error {
	for _, k := range s.keys {
		if k.label == label {
			k.revoked.Store(revoked)
			return nil
		}
	}
	return fmt.Errorf("fakeapi: no key %q", label)
}
