package jobs

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter reads a Retry-After value (RFC 9110 section 10.2.3) as
// a wait from now: either delta-seconds ("120"; a decimal such as "1.5"
// is accepted too) or an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT", and
// the obsolete forms http.ParseTime reads). A date in the past gives 0,
// true. Surrounding spaces are ignored. Anything else (empty, negative,
// not a number, not a date) gives 0, false. Waits too long for a
// time.Duration saturate at its maximum.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDecimal(v) {
		return secondsToDuration(v)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return d, true
	}
	return 0, true
}

// isDecimal reports whether v is digits with at most one '.', and at least
// one digit.
func isDecimal(v string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// secondsToDuration converts a string accepted by isDecimal.
func secondsToDuration(v string) (time.Duration, bool) {
	const maxSeconds = math.MaxInt64 / int64(time.Second)
	if !strings.Contains(v, ".") {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(maxSeconds) { // only ErrRange is possible
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(n) * time.Second, true
	}
	f, err := strconv.ParseFloat(v, 64) // only ErrRange is possible: f is +Inf
	ns := math.Round(f * float64(time.Second))
	if err != nil || ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(ns), true
}
