package fakeapi

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

// marks are the test controls a strict request carries in its text (see
// the package documentation): the strict API refuses extra fields, so the
// controls ride in the content.
type marks struct {
	status     int            // answer with this status (0: none)
	output     int64          // output tokens (-1: Config.OutputTokens)
	refuse     bool           // 403
	tooLarge   bool           // OpenAI's 429 "Request too large", Anthropic's 413
	quota      bool           // out of credit
	retryAfter *string        // a 429 with this retry-after
	latency    time.Duration  // added to the request's time
	seen       map[string]int // marker names, for duplicates
}

func noMarks() marks { return marks{output: -1} }

var markRE = regexp.MustCompile(`\[fake:([a-z_]+)(?:=([^\]\s]*))?\]`)

// parseMarks reads the markers in texts (the last user message's text, or
// an embeddings request's last input).
func (st *strictState) parseMarks(texts []string) (marks, *apiError) {
	mk := noMarks()
	bad := func(format string, a ...any) (marks, *apiError) {
		return mk, invalid("fakeapi: "+fmt.Sprintf(format, a...), "", "")
	}
	for _, t := range texts {
		for _, m := range markRE.FindAllStringSubmatch(t, -1) {
			name, val := m[1], m[2]
			switch name {
			case "status":
				n, err := strconv.Atoi(val)
				if err != nil || n < 400 || n > 599 {
					return bad("marker %s: want a status 400..599", m[0])
				}
				mk.status = n
			case "output_tokens":
				n, err := strconv.ParseInt(val, 10, 64)
				if err != nil || n < 0 {
					return bad("marker %s: want a number ≥ 0", m[0])
				}
				mk.output = n
			case "latency":
				d, err := time.ParseDuration(val)
				if err != nil || d < 0 {
					return bad("marker %s: want a duration such as 300ms", m[0])
				}
				mk.latency = d
			case "retry_after":
				if val == "" {
					return bad("marker %s: want a value", m[0])
				}
				v := val
				mk.retryAfter = &v
			case "refuse", "too_large", "quota", "hold":
				if val != "" {
					return bad("marker %s takes no value", m[0])
				}
				mk.refuse = mk.refuse || name == "refuse"
				mk.tooLarge = mk.tooLarge || name == "too_large"
				mk.quota = mk.quota || name == "quota"
			default:
				return bad("unknown marker %s", m[0])
			}
		}
	}
	return mk, nil
}

// markError is the refusal a request's markers ask for, nil when they ask
// for none; it counts the refusal in the key's figures (k may be nil: a
// batch line).
func (st *strictState) markError(q *query, k *keyState) *apiError {
	mk := q.marks
	switch {
	case mk.status != 0:
		if k != nil {
			k.forced.Add(1)
		}
		return st.statusError(mk.status)
	case mk.refuse:
		if k != nil {
			k.refused.Add(1)
		}
		e := st.statusError(http.StatusForbidden)
		if st.openai() {
			e.message, e.code = "This request was refused by a content rule.", strp("content_policy_violation")
		}
		return e
	case mk.tooLarge:
		if k != nil {
			k.rateLimited.Add(1)
		}
		if st.openai() {
			// "Request too large for gpt-4o in organization org-xxx on tokens per
			// min (TPM): Limit 30000, Requested 50000. The input or output tokens
			// must be reduced in order to run successfully.": the 429 no wait
			// cures, as the API words it.
			return &apiError{status: http.StatusTooManyRequests, typ: "tokens", code: strp("rate_limit_exceeded"),
				message: fmt.Sprintf("Request too large for %s in organization org-test on tokens per min (TPM): Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.", q.model)}
		}
		// Anthropic: 413 request_too_large (docs.anthropic.com/en/api/errors).
		return st.statusError(http.StatusRequestEntityTooLarge)
	case mk.quota:
		if k != nil {
			k.quota.Add(1)
		}
		if st.openai() {
			// OpenAI's 429 insufficient_quota (platform.openai.com error codes:
			// "You exceeded your current quota, please check your plan and
			// billing details").
			return &apiError{status: http.StatusTooManyRequests, typ: "insufficient_quota", code: strp("insufficient_quota"),
				message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."}
		}
		return invalid("Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.", "", "")
	case mk.retryAfter != nil:
		if k != nil {
			k.rateLimited.Add(1)
		}
		e := st.statusError(http.StatusTooManyRequests)
		e.header = map[string]string{"retry-after": *mk.retryAfter}
		return e
	}
	return nil
}
