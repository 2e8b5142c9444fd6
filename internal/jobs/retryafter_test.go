package jobs_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	maxD := time.Duration(math.MaxInt64)
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{"120", 2 * time.Minute, true},
		{" 30 ", 30 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"0.25", 250 * time.Millisecond, true},
		{".5", 500 * time.Millisecond, true},
		{"2.", 2 * time.Second, true},
		{"99999999999999999999", maxD, true},
		{"99999999999999999999.5", maxD, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(time.Hour).Format(time.RFC850), time.Hour, true},
		{now.Add(time.Hour).Format(time.ANSIC), time.Hour, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{now.Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"   ", 0, false},
		{"-1", 0, false},
		{"-0.5", 0, false},
		{"+5", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"1.2.3", 0, false},
		{".", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"Wed, 32 Oct 2015 07:28:00 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := jobs.ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{"0", "120", "1.5", "", "-1", "1e9", "Wed, 21 Oct 2015 07:28:00 GMT",
		now.Add(time.Hour).Format(http.TimeFormat), "99999999999999999999.99999", "\x00", "١٢"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := jobs.ParseRetryAfter(s, now)
		if d < 0 {
			t.Errorf("ParseRetryAfter(%q) = %v: negative", s, d)
		}
		if !ok && d != 0 {
			t.Errorf("ParseRetryAfter(%q) = %v, false: want 0 when not ok", s, d)
		}
	})
}
