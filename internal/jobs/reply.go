package jobs

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/keyfleet/keyfleet/internal/secret"
)

// ReplyBodyMax is how much of a non-2xx reply's body ReplyError needs:
// the bytes read for its markers (insufficient quota, a request too
// large) and for the snippet its error quotes.
const ReplyBodyMax = 16 << 10

// ReplyError is what a non-2xx reply of an API means for the run that
// sent it, as HTTPConfig documents the mapping: rate limited (with the
// Retry-After and the signals of rates, ParseRateHeaders' reading of its
// headers), credential rejected (401, 403, 402, insufficient quota), a
// permanent failure (a request too large, x-should-retry: false, other
// 3xx and 4xx) or a transient one (5xx). raw is the start of its body
// (up to ReplyBodyMax bytes); sc scrubs the snippet the error quotes. The
// http kind and the gateway both judge replies with it.
func ReplyError(code int, hdr http.Header, raw []byte, rates RateReport, sc *secret.Scrubber) error {
	status := statusText(code)
	if snip := snippet(raw, sc); snip != "" {
		status += ": " + snip
	}
	noRetry := strings.EqualFold(strings.TrimSpace(hdr.Get("X-Should-Retry")), "false")
	switch {
	case code == http.StatusTooManyRequests && bytes.Contains(raw, []byte(quotaMarker)):
		return Rejected("insufficient quota (" + status + ")")
	case code == http.StatusTooManyRequests && TooLarge(raw):
		// The item can never fit what the key allows, however long it
		// waits: the item's failure, and no key rests for it.
		return Permanent(fmt.Errorf("http: %s (the request is larger than the key's limit)", status))
	case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusPaymentRequired:
		return Rejected(status)
	case noRetry:
		return Permanent(fmt.Errorf("http: %s (x-should-retry: false)", status))
	case code == http.StatusTooManyRequests:
		detail := status
		if rates.Unreadable != "" {
			detail += " (unreadable " + rates.Unreadable + ")"
		}
		return &RateLimitedError{RetryAfter: rates.RetryAfter, Source: rates.RetryAfterFrom, Detail: detail, Signals: rates.Signals}
	case code >= 300 && code <= 399:
		return Permanent(fmt.Errorf("http: %s (redirects are not followed)", status))
	case code >= 400 && code <= 499:
		return Permanent(fmt.Errorf("http: %s", status))
	default: // 5xx (529 overloaded included: the API's trouble, not the key's), and any status outside the classes
		return fmt.Errorf("http: %s", status)
	}
}
