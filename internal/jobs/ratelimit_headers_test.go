package jobs_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

func TestParseRateHeaders(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	for _, c := range []struct {
		name string
		h    http.Header
		want jobs.RateReport
	}{
		{"none", h(), jobs.RateReport{}},
		{"retry-after seconds", h("Retry-After", "3"), jobs.RateReport{RetryAfter: 3 * time.Second, RetryAfterFrom: "Retry-After header"}},
		{"retry-after-ms wins", h("Retry-After", "3", "retry-after-ms", "250.5"),
			jobs.RateReport{RetryAfter: 250500 * time.Microsecond, RetryAfterFrom: "retry-after-ms header"}},
		{"retry-after date", h("Retry-After", "Mon, 23 Nov 2026 10:00:07 GMT"), jobs.RateReport{RetryAfter: 7 * time.Second, RetryAfterFrom: "Retry-After header"}},
		{"unreadable", h("Retry-After", "soon"), jobs.RateReport{Unreadable: `Retry-After "soon"`}},
		{"bad ms, good seconds", h("retry-after-ms", "x", "Retry-After", "2"), jobs.RateReport{RetryAfter: 2 * time.Second, RetryAfterFrom: "Retry-After header"}},
		{"openai", h(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6m0s"),
			jobs.RateReport{Signals: []jobs.Signal{
				{Name: "x-ratelimit-remaining-requests", Remaining: 59, Reset: time.Second, Limit: 60},
				{Name: "x-ratelimit-remaining-tokens", Tokens: true, Remaining: 149984, Reset: 6 * time.Minute, Limit: 150000},
			}}},
		{"a limit below what remains is not told", h("x-ratelimit-limit-requests", "5", "x-ratelimit-remaining-requests", "9",
			"x-ratelimit-reset-requests", "0ms"),
			jobs.RateReport{Signals: []jobs.Signal{{Name: "x-ratelimit-remaining-requests", Remaining: 9}}}},
		{"openai fractions", h("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20ms",
			"x-ratelimit-remaining-tokens", "10", "x-ratelimit-reset-tokens", "1.5s"),
			jobs.RateReport{Signals: []jobs.Signal{
				{Name: "x-ratelimit-remaining-requests", Remaining: 0, Reset: 20 * time.Millisecond},
				{Name: "x-ratelimit-remaining-tokens", Tokens: true, Remaining: 10, Reset: 1500 * time.Millisecond},
			}}},
		{"anthropic", h(
			"anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "49", "anthropic-ratelimit-requests-reset", "2026-11-23T10:00:01Z",
			"anthropic-ratelimit-input-tokens-remaining", "3000", "anthropic-ratelimit-input-tokens-reset", "2026-11-23T10:00:30.5Z",
			"anthropic-ratelimit-output-tokens-remaining", "100", "anthropic-ratelimit-output-tokens-reset", "2026-11-23T09:59:00Z"),
			jobs.RateReport{Signals: []jobs.Signal{
				{Name: "anthropic-ratelimit-requests-remaining", Remaining: 49, Reset: time.Second, Limit: 50},
				{Name: "anthropic-ratelimit-input-tokens-remaining", Tokens: true, Remaining: 3000, Reset: 30500 * time.Millisecond},
				{Name: "anthropic-ratelimit-output-tokens-remaining", Remaining: 100, Reset: 0},
			}}},
		{"a reset beyond a day is kept for the worker to cut", h(
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", "2100-01-01T00:00:00Z"),
			jobs.RateReport{Signals: []jobs.Signal{
				{Name: "anthropic-ratelimit-tokens-remaining", Tokens: true, Remaining: 0,
					Reset: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now)},
			}}},
		{"half pairs and junk are left out", h(
			"x-ratelimit-remaining-requests", "5",
			"x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "1s",
			"anthropic-ratelimit-tokens-remaining", "9", "anthropic-ratelimit-tokens-reset", "tomorrow"),
			jobs.RateReport{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := jobs.ParseRateHeaders(c.h, now)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func FuzzParseRateHeaders(f *testing.F) {
	f.Add("x-ratelimit-remaining-tokens", "5", "x-ratelimit-reset-tokens", "6m0s")
	f.Add("anthropic-ratelimit-tokens-remaining", "5", "anthropic-ratelimit-tokens-reset", "2026-11-23T10:00:01Z")
	f.Add("retry-after-ms", "1e300", "Retry-After", "99999999999999999999")
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := http.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		r := jobs.ParseRateHeaders(h, now)
		if r.RetryAfter < 0 {
			t.Fatalf("negative retry-after %s", r.RetryAfter)
		}
		for _, s := range r.Signals {
			// Long resets are kept: the worker cuts every rest to
			// pool.max_rest, with a warning naming the header.
			if s.Remaining < 0 || s.Reset < 0 {
				t.Fatalf("signal %+v", s)
			}
		}
	})
}
