package ratelimit_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in     string
		want   ratelimit.Limit
		String string
	}{
		{"60/m", ratelimit.Limit{N: 60, Period: time.Minute}, "60/m"},
		{"10/s", ratelimit.Limit{N: 10, Period: time.Second}, "10/s"},
		{"1000/h", ratelimit.Limit{N: 1000, Period: time.Hour}, "1000/h"},
		{"5/30s", ratelimit.Limit{N: 5, Period: 30 * time.Second}, "5/30s"},
		{"1/1m30s", ratelimit.Limit{N: 1, Period: 90 * time.Second}, "1/1m30s"},
		{"3/d", ratelimit.Limit{N: 3, Period: 24 * time.Hour}, "3/d"},
		{"2/500ms", ratelimit.Limit{N: 2, Period: 500 * time.Millisecond}, "2/500ms"},
		{"1/1ms", ratelimit.Limit{N: 1, Period: time.Millisecond}, "1/1ms"},
		{" 60 / min ", ratelimit.Limit{N: 60, Period: time.Minute}, "60/m"},
		{"7/60s", ratelimit.Limit{N: 7, Period: time.Minute}, "7/m"},
		{"4/48h", ratelimit.Limit{N: 4, Period: 48 * time.Hour}, "4/48h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ratelimit.ParseLimit(tt.in)
			if err != nil {
				t.Fatalf("ParseLimit(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseLimit(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate(%+v): %v", got, err)
			}
			if s := got.String(); s != tt.String {
				t.Errorf("String() = %q, want %q", s, tt.String)
			}
			again, err := ratelimit.ParseLimit(got.String())
			if err != nil || again != got {
				t.Errorf("ParseLimit(%q) = %+v, %v; want %+v (round trip)", got.String(), again, err, got)
			}
		})
	}
}

func TestParseLimitBad(t *testing.T) {
	tests := []struct {
		in, why string
	}{
		{"", "want N/PERIOD"},
		{"60m", "want N/PERIOD"},
		{"0/m", "count must be at least 1, got 0"},
		{"-1/s", "count must be at least 1, got -1"},
		{"x/m", `count "x" is not a whole number`},
		{"1.5/m", `count "1.5" is not a whole number`},
		{"99999999999999999999/s", "out of range"},
		{"5/", "period is missing"},
		{"5/w", `period "w" is neither a unit`},
		{"5/0s", "period must be at least 1ms, got 0s"},
		{"5/-1s", "period must be at least 1ms, got -1s"},
		{"5/999us", "period must be at least 1ms"},
		{"5/m/s", `period "m/s" is neither a unit`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			l, err := ratelimit.ParseLimit(tt.in)
			if err == nil {
				t.Fatalf("ParseLimit(%q) = %+v, want an error", tt.in, l)
			}
			if !errors.Is(err, ratelimit.ErrBadRate) {
				t.Errorf("error %q does not wrap ErrBadRate", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "ratelimit: bad rate ") {
				t.Errorf("error %q: want the prefix %q", msg, "ratelimit: bad rate ")
			}
			if !strings.Contains(msg, fmt.Sprintf("%q", tt.in)) {
				t.Errorf("error %q does not quote the input %q", msg, tt.in)
			}
			if !strings.Contains(msg, tt.why) {
				t.Errorf("error %q does not say %q", msg, tt.why)
			}
			if !l.IsZero() {
				t.Errorf("ParseLimit(%q) returned %+v with its error, want the zero Limit", tt.in, l)
			}
		})
	}
}

func TestLimitZeroAndValidate(t *testing.T) {
	var zero ratelimit.Limit
	if !zero.IsZero() || zero.String() != "" {
		t.Errorf("zero Limit: IsZero=%v String=%q, want true and \"\"", zero.IsZero(), zero.String())
	}
	for _, l := range []ratelimit.Limit{
		{N: 0, Period: time.Second},
		{N: 1, Period: 0},
		{N: 1, Period: time.Microsecond},
		{N: -3, Period: time.Minute},
	} {
		err := l.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "ratelimit: ") {
			t.Errorf("Validate(%+v) = %v, want a ratelimit: error", l, err)
		}
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{
		"60/m", "10/s", "1000/h", "5/30s", "1/1m30s", "3/d", "2/500ms",
		"", "/", "0/m", "-1/s", "x/m", "5/", "5/w", "5/0s", "5/-1s", "+5/1.5ms",
		"9223372036854775807/2562047h", " 1 / day ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ratelimit.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, ratelimit.ErrBadRate) {
				t.Fatalf("ParseLimit(%q): error %q does not wrap ErrBadRate", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %+v, which does not validate: %v", s, l, err)
		}
		again, err := ratelimit.ParseLimit(l.String())
		if err != nil {
			t.Fatalf("ParseLimit(%q) = %+v, but its String %q does not parse: %v", s, l, l.String(), err)
		}
		if again != l {
			t.Fatalf("ParseLimit(%q) = %+v, String %q re-parses as %+v", s, l, l.String(), again)
		}
	})
}
