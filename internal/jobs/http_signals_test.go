package jobs_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

// A reply's rate-limit headers, its usage figure and the provider's own
// error signals reach the runner.
func TestHTTPProviderSignals(t *testing.T) {
	t.Parallel()
	type reply struct {
		status  int
		headers map[string]string
		body    string
	}
	for _, c := range []struct {
		name     string
		reply    reply
		costFrom string
		check    func(t *testing.T, out jobs.Output, err error)
	}{
		{"2xx with OpenAI headers and usage", reply{200, map[string]string{
			"x-ratelimit-remaining-tokens": "120", "x-ratelimit-reset-tokens": "1.5s",
		}, `{"choices":[],"usage":{"prompt_tokens":10,"total_tokens":37}}`}, "usage.total_tokens",
			func(t *testing.T, out jobs.Output, err error) {
				if err != nil || out.Cost != 37 || out.CostNote != "" || len(out.Signals) != 1 ||
					out.Signals[0] != (jobs.Signal{Name: "x-ratelimit-remaining-tokens", Tokens: true, Remaining: 120, Reset: 1500 * time.Millisecond}) {
					t.Fatalf("out %+v, err %v", out, err)
				}
			}},
		{"usage missing", reply{200, nil, `{"choices":[]}`}, "usage.total_tokens",
			func(t *testing.T, out jobs.Output, err error) {
				if err != nil || out.Cost != 0 || !strings.Contains(out.CostNote, "the reply has no usage") {
					t.Fatalf("out %+v, err %v", out, err)
				}
			}},
		{"not JSON", reply{200, nil, `plain text`}, "usage.total_tokens",
			func(t *testing.T, out jobs.Output, err error) {
				if err != nil || out.Cost != 0 || !strings.Contains(out.CostNote, "not JSON") {
					t.Fatalf("out %+v, err %v", out, err)
				}
			}},
		{"429 with retry-after-ms", reply{429, map[string]string{"retry-after-ms": "1500", "Retry-After": "9"}, `{}`}, "",
			func(t *testing.T, _ jobs.Output, err error) {
				var rl *jobs.RateLimitedError
				if !errors.As(err, &rl) || rl.RetryAfter != 1500*time.Millisecond || rl.Source != "retry-after-ms header" {
					t.Fatalf("err %v", err)
				}
			}},
		{"bare 429", reply{429, nil, `too many`}, "",
			func(t *testing.T, _ jobs.Output, err error) {
				var rl *jobs.RateLimitedError
				if !errors.As(err, &rl) || rl.RetryAfter != 0 || rl.Source != "" {
					t.Fatalf("err %v", err)
				}
			}},
		{"insufficient_quota in a 429 is a rejected key", reply{429, nil, `{"error":{"code":"insufficient_quota"}}`}, "",
			func(t *testing.T, _ jobs.Output, err error) {
				if jobs.Classify(err) != jobs.OutcomeRejected {
					t.Fatalf("err %v, outcome %s", err, jobs.Classify(err))
				}
			}},
		{"x-should-retry false is permanent", reply{429, map[string]string{"x-should-retry": "false"}, `{}`}, "",
			func(t *testing.T, _ jobs.Output, err error) {
				if jobs.Classify(err) != jobs.OutcomePermanent || !strings.Contains(err.Error(), "x-should-retry") {
					t.Fatalf("err %v, outcome %s", err, jobs.Classify(err))
				}
			}},
		{"529 overloaded is transient", reply{529, nil, `{"type":"error","error":{"type":"overloaded_error"}}`}, "",
			func(t *testing.T, _ jobs.Output, err error) {
				if jobs.Classify(err) != jobs.OutcomeTransient {
					t.Fatalf("err %v, outcome %s", err, jobs.Classify(err))
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := serve(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				for k, v := range c.reply.headers {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.reply.status)
				_, _ = io.WriteString(w, c.reply.body)
			})
			h := newHTTP(t, jobs.HTTPConfig{URL: url, CostFrom: c.costFrom})
			out, err := h.Run(t.Context(), testItem, testCred)
			c.check(t, out, err)
		})
	}
}

// An API whose clock is 30 s off ours names its resets on its own clock:
// they are read as the time they are from its Date, not from our clock.
func TestHTTPResetsOnTheAPIsClock(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			url := serve(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				now := time.Now().Add(skew).UTC()
				w.Header().Set("Date", now.Format(http.TimeFormat))
				w.Header().Set("anthropic-ratelimit-requests-remaining", "0")
				w.Header().Set("anthropic-ratelimit-requests-reset", now.Add(2*time.Second).Format(time.RFC3339Nano))
				_, _ = io.WriteString(w, `{}`)
			})
			h := newHTTP(t, jobs.HTTPConfig{URL: url})
			out, err := h.Run(t.Context(), testItem, testCred)
			if err != nil || len(out.Signals) != 1 {
				t.Fatalf("out %+v, err %v", out, err)
			}
			// One reply bounds the skew to within a second (its Date is in
			// whole seconds): the reset reads 2 s, give or take that.
			if r := out.Signals[0].Reset; r < 500*time.Millisecond || r > 3500*time.Millisecond {
				t.Fatalf("reset read as %v, want about 2s", r)
			}
		})
	}
}
