package jobs

import (
	"bytes"
	"regexp"
	"strconv"
)

// tooLargeRE finds the figures of OpenAI's "Request too large for gpt-4o
// ... on tokens per min (TPM): Limit 30000, Requested 50000".
var tooLargeRE = regexp.MustCompile(`(?i)limit:?\s*([0-9]+)\s*,\s*requested:?\s*([0-9]+)`)

// TooLarge reports whether a rate-limit reply's body says the request can
// never fit the key's limit, whatever it waits: OpenAI's 429 "Request too
// large for <model> ... Limit N, Requested M" (M > N), or a body naming
// request_too_large / "request too large" as Anthropic's and gateways'
// replies do. Such a 429 is the item's permanent failure, not the key's
// rate limit.
func TooLarge(body []byte) bool {
	lower := bytes.ToLower(body)
	if bytes.Contains(lower, []byte("request too large")) || bytes.Contains(lower, []byte("request_too_large")) {
		return true
	}
	m := tooLargeRE.FindSubmatch(body)
	if m == nil {
		return false
	}
	limit, err1 := strconv.ParseInt(string(m[1]), 10, 64)
	requested, err2 := strconv.ParseInt(string(m[2]), 10, 64)
	return err1 == nil && err2 == nil && requested > limit
}
