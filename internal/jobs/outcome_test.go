package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

func TestClassify(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want jobs.Outcome
	}{
		{"nil", nil, jobs.OutcomeOK},
		{"plain", base, jobs.OutcomeTransient},
		{"canceled", context.Canceled, jobs.OutcomeTransient},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), jobs.OutcomeTransient},
		{"rate limited", jobs.RateLimited(time.Second, "Retry-After header", "429"), jobs.OutcomeRateLimited},
		{"rate limited wrapped", fmt.Errorf("job: %w", jobs.RateLimited(0, "", "")), jobs.OutcomeRateLimited},
		{"rejected", jobs.Rejected("401"), jobs.OutcomeRejected},
		{"rejected wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", jobs.Rejected("x"))), jobs.OutcomeRejected},
		{"permanent", jobs.Permanent(base), jobs.OutcomePermanent},
		{"permanent nil", jobs.Permanent(nil), jobs.OutcomePermanent},
		{"permanent wrapped", fmt.Errorf("x: %w", jobs.Permanent(base)), jobs.OutcomePermanent},
		{"outermost wins", jobs.Permanent(jobs.Rejected("x")), jobs.OutcomePermanent},
		{"joined", errors.Join(base, jobs.Rejected("x")), jobs.OutcomeRejected},
		{"panic", &jobs.PanicError{Kind: "x", Value: "boom"}, jobs.OutcomeTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := jobs.Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestOutcomeString(t *testing.T) {
	want := map[jobs.Outcome]string{
		jobs.OutcomeOK:          "ok",
		jobs.OutcomeRateLimited: "rate_limited",
		jobs.OutcomeRejected:    "rejected",
		jobs.OutcomePermanent:   "permanent",
		jobs.OutcomeTransient:   "transient",
		jobs.Outcome(42):        "Outcome(42)",
	}
	for o, s := range want {
		if got := o.String(); got != s {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, s)
		}
	}
}

func TestOutcomeErrors(t *testing.T) {
	base := errors.New("bad item")
	err := fmt.Errorf("wrapped: %w", jobs.Permanent(base))
	var pe *jobs.PermanentError
	if !errors.As(err, &pe) || pe.Err != base || !errors.Is(err, base) {
		t.Errorf("Permanent: errors.As/Is failed on %v", err)
	}
	if got, want := jobs.Permanent(base).Error(), "permanent failure: bad item"; got != want {
		t.Errorf("Permanent text = %q, want %q", got, want)
	}

	var rl *jobs.RateLimitedError
	err = jobs.RateLimited(3*time.Second, "Retry-After header", "429 Too Many Requests")
	if !errors.As(err, &rl) || rl.RetryAfter != 3*time.Second || rl.Source != "Retry-After header" || rl.Detail != "429 Too Many Requests" {
		t.Errorf("RateLimited fields: %+v", rl)
	}
	if got, want := err.Error(), "rate limited (retry after 3s, from Retry-After header): 429 Too Many Requests"; got != want {
		t.Errorf("RateLimited text = %q, want %q", got, want)
	}
	if errors.As(jobs.RateLimited(-time.Second, "", ""), &rl); rl.RetryAfter != 0 {
		t.Errorf("negative RetryAfter kept: %v", rl.RetryAfter)
	}

	var rj *jobs.RejectedError
	if err := jobs.Rejected("401 Unauthorized"); !errors.As(err, &rj) || rj.Reason != "401 Unauthorized" || err.Error() != "credential rejected: 401 Unauthorized" {
		t.Errorf("Rejected: %v %+v", err, rj)
	}
}

type panicker struct{ v any }

func (panicker) Kind() string { return "panicky" }
func (p panicker) Run(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) {
	panic(p.v)
}

type fine struct{}

func (fine) Kind() string { return "fine" }
func (fine) Run(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) {
	return jobs.Output{Body: []byte("ok")}, jobs.Rejected("r")
}

func TestSafeRun(t *testing.T) {
	for _, v := range []any{"kaboom", errors.New("kaboom error"), nil} {
		out, err := jobs.SafeRun(t.Context(), panicker{v}, jobs.Item{ID: "i1"}, jobs.Credential{})
		if err == nil {
			t.Fatalf("panic(%v): no error", v)
		}
		if got := jobs.Classify(err); got != jobs.OutcomeTransient {
			t.Errorf("panic(%v): outcome %v, want transient", v, got)
		}
		if out.Body != nil {
			t.Errorf("panic(%v): output %q, want none", v, out.Body)
		}
		var pe *jobs.PanicError
		if !errors.As(err, &pe) {
			t.Fatalf("panic(%v): %T is no *PanicError", v, err)
		}
		if v != nil && !strings.Contains(err.Error(), fmt.Sprint(v)) {
			t.Errorf("error %q lacks the panic value %v", err, v)
		}
		if !strings.Contains(err.Error(), "panicky") {
			t.Errorf("error %q lacks the kind", err)
		}
		if !strings.Contains(string(pe.Stack), "panicker.Run") {
			t.Errorf("stack lacks the panicking function:\n%s", pe.Stack)
		}
	}

	out, err := jobs.SafeRun(t.Context(), fine{}, jobs.Item{}, jobs.Credential{})
	if string(out.Body) != "ok" || jobs.Classify(err) != jobs.OutcomeRejected {
		t.Errorf("SafeRun changed a normal return: %q, %v", out.Body, err)
	}
	if _, err := jobs.SafeRun(t.Context(), nil, jobs.Item{}, jobs.Credential{}); err == nil {
		t.Error("nil handler: no error")
	}
}
