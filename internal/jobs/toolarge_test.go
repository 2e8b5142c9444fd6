package jobs_test

import (
	"testing"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

// A 429 that says the request can never fit is told apart from a rate
// limit: the first is the item's fault, the second the key's moment.
func TestTooLarge(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 50000."}}`, true},
		{`{"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}`, true},
		{`{"error":{"message":"Limit: 100, Requested: 250"}}`, true},
		{`{"error":{"message":"Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000."}}`, false},
		{`{"error":{"message":"Limit 30000, Requested 200"}}`, false},
		{`{"error":"rate_limited"}`, false},
		{``, false},
	} {
		if got := jobs.TooLarge([]byte(c.body)); got != c.want {
			t.Errorf("TooLarge(%s) = %v, want %v", c.body, got, c.want)
		}
	}
}
