package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

func TestSleep(t *testing.T) {
	h := jobs.NewSleep()
	if h.Kind() != "sleep" {
		t.Fatalf("Kind() = %q", h.Kind())
	}
	tests := []struct {
		payload string
		want    string // output body; empty: a permanent error naming "ms"
	}{
		{`{"ms":20}`, `{"slept_ms":20}`},
		{`{"id":"x","ms":0}`, `{"slept_ms":0}`},
		{`{"ms":1.5}`, `{"slept_ms":1.5}`},
		{`{"ms":1e1}`, `{"slept_ms":10}`},
		{`{"id":"x"}`, `{"slept_ms":0}`},
		{`{"ms":null}`, `{"slept_ms":0}`},
		{``, `{"slept_ms":0}`},
		{" {\"ms\":3}\n", `{"slept_ms":3}`},
		{`{"nested":{"ms":9},"s":"{\"ms\":8}","ms":2}`, `{"slept_ms":2}`},
		{`{"ms":5,}`, ""},
		{`{"ms":5`, ""},
		{`{"ms":"20"}`, ""},
		{`{"ms":-1}`, ""},
		{`{"ms":true}`, ""},
		{`{"ms":[1]}`, ""},
		{`{"ms":1e300}`, ""},
		{`[1,2]`, ""},
		{`not json`, ""},
	}
	for _, tt := range tests {
		out, err := h.Run(t.Context(), jobs.Item{ID: "i", Payload: []byte(tt.payload)}, jobs.Credential{})
		switch {
		case tt.want != "" && (err != nil || string(out.Body) != tt.want):
			t.Errorf("payload %s: %q, %v; want %s", tt.payload, out.Body, err, tt.want)
		case tt.want == "" && jobs.Classify(err) != jobs.OutcomePermanent:
			t.Errorf("payload %s: %v, want a permanent error", tt.payload, err)
		case tt.want == "" && strings.HasPrefix(tt.payload, `{"ms"`) && !strings.Contains(err.Error(), `"ms"`):
			t.Errorf("payload %s: error %q does not name the field", tt.payload, err)
		}
	}
}

func TestSleepHonoursContext(t *testing.T) {
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := jobs.NewSleep().Run(ctx, jobs.Item{Payload: []byte(`{"ms":600000}`)}, jobs.Credential{})
		done <- err
	}()
	cancel(cause)
	err := testutil.Receive(t, done, 10*time.Second, "sleep ignored the cancellation")
	if !errors.Is(err, cause) || !errors.Is(err, context.Canceled) || jobs.Classify(err) != jobs.OutcomeTransient {
		t.Errorf("err %v: want transient, wrapping the cause", err)
	}
}
