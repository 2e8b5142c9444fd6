package jobs

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signal is one figure an API reported about its key's remaining room,
// from a rate-limit header: the runner rests the key until Reset when the
// runs in flight plus the next would not fit.
type Signal struct {
	// Name of the header holding the remaining figure.
	Name string
	// Tokens: the figure counts tokens, compared with the items' estimated
	// costs; else it counts requests (one per run).
	Tokens bool
	// Remaining is what the key has left; Reset is when it is whole again.
	Remaining int64
	Reset     time.Duration
	// Limit is the whole of it, from the family's limit header (0: not
	// sent): with it the pool learns the refill rate.
	Limit int64
}

// RateReport is what a reply's rate-limit headers say.
type RateReport struct {
	// RetryAfter is the wait a retry-after-ms or Retry-After header asked
	// for; RetryAfterFrom names the header (empty: none given, or none
	// readable).
	RetryAfter     time.Duration
	RetryAfterFrom string
	// Unreadable quotes a Retry-After that could not be read.
	Unreadable string
	// Signals are the remaining/reset pairs that could be read.
	Signals []Signal
}

// rateHeaderFamily describes one provider's remaining/reset headers.
type rateHeaderFamily struct {
	remaining, reset, limit string // with %s for the limit's name
	names                   []string
	resetIsTime             bool // RFC 3339 time (Anthropic); else a Go duration (OpenAI)
}

var rateHeaderFamilies = []rateHeaderFamily{
	{
		// OpenAI: x-ratelimit-remaining-tokens: 5990, x-ratelimit-reset-tokens: 6m0s
		remaining: "x-ratelimit-remaining-%s", reset: "x-ratelimit-reset-%s", limit: "x-ratelimit-limit-%s",
		names: []string{"requests", "tokens"},
	},
	{
		// Anthropic: anthropic-ratelimit-tokens-remaining: 5990,
		// anthropic-ratelimit-tokens-reset: 2024-01-01T00:00:30Z
		remaining: "anthropic-ratelimit-%s-remaining", reset: "anthropic-ratelimit-%s-reset", limit: "anthropic-ratelimit-%s-limit",
		names:       []string{"requests", "tokens", "input-tokens", "output-tokens"},
		resetIsTime: true,
	},
}

// ParseRateHeaders reads the rate-limit headers of a reply (any status):
// retry-after-ms (milliseconds, preferred), Retry-After (seconds or an
// HTTP-date), OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}
// (resets as durations: 20ms, 1.5s, 6m0s) and Anthropic's
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
// (resets as RFC 3339 times). A pair whose figures cannot be read is left
// out; a limit that cannot be read (or is below what remains) is 0.
// Output tokens count as requests: a run needs at least one, and its
// estimate is of its whole cost. The times a reply names (a Retry-After
// date, Anthropic's resets) are read against now, which is the time on
// the replying host's clock (ServerClocks.Now) when the reply arrived.
func ParseRateHeaders(h http.Header, now time.Time) RateReport {
	var r RateReport
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && ms >= 0 && ms < 1e12 {
			r.RetryAfter, r.RetryAfterFrom = time.Duration(ms*float64(time.Millisecond)), "retry-after-ms header"
		} else {
			r.Unreadable = "retry-after-ms " + strconv.Quote(headString([]byte(v), 64))
		}
	}
	if v := h.Get("Retry-After"); v != "" && r.RetryAfterFrom == "" {
		if d, ok := ParseRetryAfter(v, now); ok {
			r.RetryAfter, r.RetryAfterFrom, r.Unreadable = d, "Retry-After header", ""
		} else {
			r.Unreadable = "Retry-After " + strconv.Quote(headString([]byte(v), 64))
		}
	}
	for _, f := range rateHeaderFamilies {
		for _, name := range f.names {
			remName := strings.Replace(f.remaining, "%s", name, 1)
			rem, ok := parseRemaining(h.Get(remName))
			if !ok {
				continue
			}
			reset, ok := parseReset(h.Get(strings.Replace(f.reset, "%s", name, 1)), f.resetIsTime, now)
			if !ok {
				continue
			}
			limit, _ := parseRemaining(h.Get(strings.Replace(f.limit, "%s", name, 1)))
			if limit < rem {
				limit = 0 // not a whole that holds what is left: not told
			}
			r.Signals = append(r.Signals, Signal{
				Name: remName, Tokens: name == "tokens" || name == "input-tokens", Remaining: rem, Reset: reset, Limit: limit,
			})
		}
	}
	return r
}

func parseRemaining(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n >= 0
}

// maxReset is the longest reset read; a longer one is read as this. The
// worker cuts every rest to pool.max_rest anyway, with a warning.
const maxReset = time.Duration(math.MaxInt64)

func parseReset(v string, isTime bool, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if isTime {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return 0, false
		}
		d = max(t.Sub(now), 0)
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			// A bare number: seconds, as some gateways send.
			s, ferr := strconv.ParseFloat(v, 64)
			if ferr != nil || s < 0 || math.IsNaN(s) {
				return 0, false
			}
			if s >= maxReset.Seconds() {
				return maxReset, true
			}
			d = time.Duration(s * float64(time.Second))
		}
	}
	if d < 0 {
		return 0, false
	}
	return d, true
}
