package executor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// One case per way a run can end: what the lease and the item come to.
func TestJudge(t *testing.T) {
	p := judging{cooldown: time.Minute, maxRest: time.Hour, scrub: func(s string) string { return strings.ReplaceAll(s, "sk-secret", "[REDACTED]") }}
	sig := []jobs.Signal{{Name: "x-ratelimit-remaining-tokens", Tokens: true, Remaining: 10, Reset: time.Second}}
	poolSig := []creds.Signal{{Name: "x-ratelimit-remaining-tokens", Tokens: true, Remaining: 10, Reset: time.Second}}
	for _, c := range []struct {
		name string
		run  runEnd
		want verdict
	}{
		{"ok", runEnd{}, verdict{label: labelSucceeded}},
		{"ok with its cost and the API's figures", runEnd{out: jobs.Output{Cost: 1234, Signals: sig}},
			verdict{label: labelSucceeded, lease: creds.Outcome{Cost: 1234, Signals: poolSig}}},
		{"ok, and the job asks the key to rest", runEnd{out: jobs.Output{Rest: 3 * time.Second, RestFrom: "exec stderr Retry-After"}},
			verdict{label: labelSucceeded, lease: creds.Outcome{Rest: 3 * time.Second, RestReason: "the job asked for a rest after a success", RestCause: "exec stderr Retry-After"}}},
		{"rate limited with Retry-After", runEnd{err: jobs.RateLimited(5*time.Second, "Retry-After header", "429 Too Many Requests")},
			verdict{label: labelRateLimited, again: true, restSource: "retry_after",
				reason: "resting 5s (from Retry-After header) after: 429 Too Many Requests",
				lease: creds.Outcome{RateLimited: true, Rest: 5 * time.Second, RestCause: "Retry-After header",
					RestReason: "resting 5s (from Retry-After header) after: 429 Too Many Requests"}}},
		{"rate limited with Retry-After: 0", runEnd{err: jobs.RateLimited(0, "Retry-After header", "429")},
			verdict{label: labelRateLimited, again: true, restSource: "retry_after",
				reason: "resting 100ms (from Retry-After header) after: 429",
				lease:  creds.Outcome{RateLimited: true, Rest: minRest, RestCause: "Retry-After header", RestReason: "resting 100ms (from Retry-After header) after: 429"}}},
		{"bare 429", runEnd{err: &jobs.RateLimitedError{Detail: "429 Too Many Requests", Signals: sig}},
			verdict{label: labelRateLimited, again: true, restSource: "bare_429", reason: "429 without Retry-After: 429 Too Many Requests",
				lease: creds.Outcome{RateLimited: true, MaxRest: time.Minute, RestReason: "429 without Retry-After: 429 Too Many Requests", Signals: poolSig}}},
		{"rate limited with an absurd Retry-After: cut to max_rest", runEnd{err: jobs.RateLimited(99999999*time.Second, "Retry-After header", "429")},
			verdict{label: labelRateLimited, again: true, restSource: "retry_after",
				reason: "resting 1h0m0s (from Retry-After header) after: 429",
				cut:    []string{"Retry-After header asked for a rest of 27777h46m39s"},
				lease:  creds.Outcome{RateLimited: true, Rest: time.Hour, RestCause: "Retry-After header", RestReason: "resting 1h0m0s (from Retry-After header) after: 429"}}},
		{"a reset past max_rest is cut", runEnd{out: jobs.Output{Signals: []jobs.Signal{{Name: "x-ratelimit-reset-requests", Remaining: 0, Reset: 48 * time.Hour}}}},
			verdict{label: labelSucceeded, cut: []string{"x-ratelimit-reset-requests header asked for a rest of 48h0m0s"},
				lease: creds.Outcome{Signals: []creds.Signal{{Name: "x-ratelimit-reset-requests", Remaining: 0, Reset: time.Hour}}}}},
		{"an exec job's Retry-After after a success is cut", runEnd{out: jobs.Output{Rest: 30 * time.Hour, RestFrom: "exec stderr Retry-After"}},
			verdict{label: labelSucceeded, cut: []string{"exec stderr Retry-After asked for a rest of 30h0m0s"},
				lease: creds.Outcome{Rest: time.Hour, RestReason: "the job asked for a rest after a success", RestCause: "exec stderr Retry-After"}}},
		{"refused: evidence against the key and the item, no verdict yet", runEnd{err: jobs.Rejected("401 Unauthorized: key sk-secret revoked"), item: "b/x"},
			verdict{label: labelRejected, again: true, reason: "401 Unauthorized: key [REDACTED] revoked",
				lease: creds.Outcome{Refused: &creds.Refusal{Item: "b/x", Reason: "401 Unauthorized: key [REDACTED] revoked"}}}},
		{"permanent", runEnd{err: jobs.Permanent(errors.New("400 Bad Request"))},
			verdict{label: labelPermanent, fail: true, dead: kftype.ReasonPermanent}},
		{"transient", runEnd{err: errors.New("exec: exit status 1")}, verdict{label: labelTransient, fail: true}},
		{"interrupted by shutdown", runEnd{err: fmt.Errorf("exec: %w", context.Canceled), interrupted: ErrGraceOver},
			verdict{label: labelInterrupted}},
		{"lost lease", runEnd{err: fmt.Errorf("http: %w", context.Canceled), interrupted: ErrLeaseLost},
			verdict{label: labelInterrupted}},
		{"a verdict the job gave before the interruption stands", runEnd{err: jobs.Rejected("403"), interrupted: ErrLeaseLost, item: "b/y"},
			verdict{label: labelRejected, again: true, reason: "403", lease: creds.Outcome{Refused: &creds.Refusal{Item: "b/y", Reason: "403"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := judge(c.run, p); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("judge:\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

// An item is the culprit once three different keys refused it (or every
// key of a smaller pool), and not before; it is dead-lettered naming
// every refusal. A key is not asked twice for the same item.
func TestAfterRefusal(t *testing.T) {
	for _, c := range []struct {
		refused string
		usable  int
		want    string
	}{
		{"key-a\t403", 5, ""},
		{"key-a\t403\nkey-b\t403", 5, ""},
		{"key-a\t403\nkey-a\t403\nkey-a\t403", 5, ""},
		{"key-a\t403 Forbidden\nkey-b\t403 Forbidden\nkey-c\t401", 5,
			"refused by 3 keys: key-a: 403 Forbidden; key-b: 403 Forbidden; key-c: 401"},
		{"key-a\t403", 1, "refused by 1 keys: key-a: 403"},
		{"key-a\t403\nkey-b\t403", 2, "refused by 2 keys: key-a: 403; key-b: 403"},
	} {
		st := RunCount{Refused: c.refused}
		if got := afterRefusal(st, c.usable); got != c.want {
			t.Errorf("afterRefusal(%q, %d keys) = %q, want %q", c.refused, c.usable, got, c.want)
		}
	}
	st := RunCount{Refused: "key-a\t403\nkey:b\t401"}
	if !refusedAlready(st, "key:b") || !refusedAlready(st, "key-a") || refusedAlready(st, "key-c") {
		t.Errorf("refusedAlready of %q: want key-a and key:b only", st.Refused)
	}
}

// An item rate limited max_rate_limited times in a row is dead-lettered
// with the last reason.
func TestAfterRateLimit(t *testing.T) {
	for _, c := range []struct {
		limited, max int
		want         string
	}{
		{1, 20, ""},
		{19, 20, ""},
		{20, 20, "rate limited 20 times in a row (worker.max_rate_limited); the last: 429 slow down"},
		{3, 0, ""},
	} {
		if got := afterRateLimit(RunCount{Limited: c.limited}, c.max, "429 slow down"); got != c.want {
			t.Errorf("afterRateLimit(%d of %d) = %q, want %q", c.limited, c.max, got, c.want)
		}
	}
}

// A failed run's item runs again after the backoff, until it is out of
// attempts or of deliveries.
func TestAfterFailure(t *testing.T) {
	backoff := []time.Duration{time.Second, 5 * time.Second}
	p := failurePolicy{maxAttempts: 3, maxDeliver: -1, delay: func(n int) time.Duration { return backoff[min(n, len(backoff))-1] }}
	for _, c := range []struct {
		failures  int
		delivered uint64
		maxDel    int
		dead      string
		retry     time.Duration
	}{
		{1, 1, -1, "", time.Second},
		{2, 2, -1, "", 5 * time.Second},
		{3, 3, -1, kftype.ReasonOutOfAttempts, 0},
		{1, 10, 10, kftype.ReasonMaxDeliveries, 0},
		{1, 9, 10, "", time.Second},
	} {
		p.maxDeliver = c.maxDel
		dead, retry := afterFailure(c.failures, c.delivered, p)
		if dead != c.dead || retry != c.retry {
			t.Errorf("failures %d, delivery %d (max %d): %q, %s; want %q, %s", c.failures, c.delivered, c.maxDel, dead, retry, c.dead, c.retry)
		}
	}
}
