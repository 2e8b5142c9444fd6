package jobs_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

// dateAt is the Date header a host whose clock is skew ahead of ours sends
// at our time t.
func dateAt(t time.Time, skew time.Duration) http.Header {
	return http.Header{"Date": {t.Add(skew).UTC().Format(http.TimeFormat)}}
}

// observe sends n replies 50 ms apart (each taking 20 ms, its Date stamped
// halfway), from a host skew ahead of ours, and returns when the last
// arrived.
func observe(c *jobs.ServerClocks, host string, from time.Time, n int, skew time.Duration) time.Time {
	at := from
	for range n {
		c.Observe(host, dateAt(at.Add(10*time.Millisecond), skew), at, at.Add(20*time.Millisecond))
		at = at.Add(50 * time.Millisecond)
	}
	return at
}

func TestServerClocksReadTheHostsTime(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 29, 10, 0, 0, 300_000_000, time.UTC)
	for _, c := range []struct {
		name    string
		skew    time.Duration
		replies int
		// want: the correction lies within [min, max].
		min, max time.Duration
	}{
		{"no replies: no correction", 30 * time.Second, 0, 0, 0},
		{"clocks agree: no correction", 0, 50, 0, 0},
		{"host 400 ms ahead: not proven by whole-second dates", 400 * time.Millisecond, 50, 0, 400 * time.Millisecond},
		{"host 30 s ahead, one reply: at least 29 s", 30 * time.Second, 1, 29 * time.Second, 30 * time.Second},
		{"host 30 s ahead, replies over 2.5 s: within a reply's time", 30 * time.Second, 50, 30*time.Second - 70*time.Millisecond, 30 * time.Second},
		{"host 30 s behind, one reply: at least 29 s", -30 * time.Second, 1, -30 * time.Second, -29 * time.Second},
		{"host 30 s behind, replies over 2.5 s: within a reply's time", -30 * time.Second, 50, -30 * time.Second, -30*time.Second + 70*time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var clocks jobs.ServerClocks
			last := observe(&clocks, "api.example.com", base, c.replies, c.skew)
			got := clocks.Now("api.example.com", last).Sub(last)
			if got < c.min || got > c.max {
				t.Fatalf("correction %v, want within [%v, %v]", got, c.min, c.max)
			}
			if other := clocks.Now("other.example.com", last); !other.Equal(last) {
				t.Fatalf("another host's time corrected by %v", other.Sub(last))
			}
		})
	}
}

func TestServerClocksFollowAStep(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	var clocks jobs.ServerClocks
	at := observe(&clocks, "h", base, 20, 30*time.Second)
	// The host's clock is set right: its next reply contradicts the
	// bounds, and the estimate starts again from it.
	at = observe(&clocks, "h", at, 1, 0)
	if got := clocks.Now("h", at).Sub(at); got != 0 {
		t.Fatalf("after the step: correction %v, want 0", got)
	}
	// Replies older than two windows no longer count.
	at = observe(&clocks, "h", at, 20, 10*time.Second)
	at = observe(&clocks, "h", at.Add(3*time.Minute), 1, 0)
	if got := clocks.Now("h", at).Sub(at); got != 0 {
		t.Fatalf("3 min on: correction %v, want 0", got)
	}
}

func TestServerClocksIgnoreAnUnreadableDate(t *testing.T) {
	t.Parallel()
	var clocks jobs.ServerClocks
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, h := range []http.Header{{}, {"Date": {"yesterday"}}} {
		clocks.Observe("h", h, at, at.Add(time.Millisecond))
	}
	clocks.Observe("h", dateAt(at, time.Hour), time.Time{}, at) // sent unknown
	if got := clocks.Now("h", at); !got.Equal(at) {
		t.Fatalf("corrected by %v", got.Sub(at))
	}
}
