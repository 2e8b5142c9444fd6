package dashboard

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/status"
)

func pool(creds ...status.Credential) status.Pool { return status.Pool{Credentials: creds} }

// The history turns cumulative counters into rates between samples, keeps
// a bounded ring, and never shows a negative rate (a counter reset).
func TestHistorySeries(t *testing.T) {
	h := newHistory(4)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	steps := []struct {
		starts, limited int64
		inFlight        int
	}{{0, 0, 0}, {10, 0, 1}, {30, 4, 2}, {5, 4, 2}, {15, 6, 1}}
	for i, s := range steps {
		h.add(t0.Add(time.Duration(i)*2*time.Second), pool(
			status.Credential{ID: "key-a", Starts: s.starts, RateLimited: s.limited, InFlight: s.inFlight, MaxConcurrent: 2}))
	}
	got, ok := h.series("key-a")
	if !ok {
		t.Fatal("key-a not found")
	}
	// The ring holds the last 4 samples: steps 1..4.
	want := []chartPoint{
		{At: t0.Add(2 * time.Second), StartsPerSec: -1, LimitedPerSec: -1, InFlight: 1},
		{At: t0.Add(4 * time.Second), StartsPerSec: 10, LimitedPerSec: 2, InFlight: 2},
		{At: t0.Add(6 * time.Second), StartsPerSec: 0, LimitedPerSec: 0, InFlight: 2},
		{At: t0.Add(8 * time.Second), StartsPerSec: 5, LimitedPerSec: 1, InFlight: 1},
	}
	if len(got.Points) != len(want) {
		t.Fatalf("want %d points, got %+v", len(want), got.Points)
	}
	for i := range want {
		if got.Points[i] != want[i] {
			t.Errorf("point %d: want %+v, got %+v", i, want[i], got.Points[i])
		}
	}
	if got.Max != 2 || !got.End.Equal(t0.Add(8*time.Second)) {
		t.Errorf("want max 2 and end at the last sample, got %d %s", got.Max, got.End)
	}
	if _, ok := h.series("key-b"); ok {
		t.Error("a credential never sampled has no series")
	}
}

// The chart is well-formed SVG whatever the input, escapes the ID, and
// draws at most maxColumns points.
func TestChartSVG(t *testing.T) {
	end := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	many := chartSeries{ID: `key<&>"a`, End: end, Max: 3}
	for i := range 3000 {
		many.Points = append(many.Points, chartPoint{
			At: end.Add(-time.Duration(3000-i) * 300 * time.Millisecond), StartsPerSec: float64(i % 7), LimitedPerSec: float64(i % 2), InFlight: i % 4,
		})
	}
	for name, s := range map[string]chartSeries{
		"empty":  {ID: "key-e", End: end},
		"one":    {ID: "key-1", End: end, Max: 1, Points: []chartPoint{{At: end, StartsPerSec: -1, LimitedPerSec: -1, InFlight: 1}}},
		"many":   many,
		"zeroes": {ID: "key-z", End: end, Max: 2, Points: []chartPoint{{At: end.Add(-time.Second)}, {At: end}}},
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			if err := writeChart(&b, s, 10*time.Minute); err != nil {
				t.Fatal(err)
			}
			svg := b.String()
			dec := xml.NewDecoder(strings.NewReader(svg))
			for {
				_, err := dec.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("not well-formed: %v\n%s", err, svg)
				}
			}
			if strings.Contains(svg, `key<&>`) || strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
				t.Fatalf("unescaped ID or a bad number:\n%s", svg)
			}
		})
	}
	pts := mergePoints(many.Points, end.Add(-10*time.Minute), 10*time.Minute)
	if len(pts) > maxColumns || len(pts) < maxColumns/2 {
		t.Errorf("want up to %d merged points, got %d", maxColumns, len(pts))
	}
	peak := 0
	for _, p := range pts {
		peak = max(peak, p.InFlight)
	}
	if peak != 3 {
		t.Errorf("merging must keep the in-flight peaks: want 3, got %d", peak)
	}
}

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0, 1}, {0.3, 0.5}, {1, 1}, {1.2, 2}, {3, 5}, {7, 10}, {42, 50}, {180, 200}} {
		if got := niceCeil(c.in); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("niceCeil(%g): want %g, got %g", c.in, c.want, got)
		}
	}
}

func TestChartSpan(t *testing.T) {
	end := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		covered, limit, want time.Duration
	}{
		{5 * time.Second, 10 * time.Minute, time.Minute},
		{3*time.Minute + 4*time.Second, 10 * time.Minute, 3 * time.Minute},
		{time.Hour, 10 * time.Minute, 10 * time.Minute},
		{5 * time.Second, 30 * time.Second, 30 * time.Second},
	} {
		s := chartSeries{Oldest: end.Add(-c.covered), End: end}
		if got := s.span(c.limit); got != c.want {
			t.Errorf("covered %s, limit %s: want %s, got %s", c.covered, c.limit, c.want, got)
		}
	}
	for d, want := range map[time.Duration]string{30 * time.Second: "30s", time.Minute: "1m", 90 * time.Second: "1m30s", 10 * time.Minute: "10m"} {
		if got := spanText(d); got != want {
			t.Errorf("spanText(%s): want %s, got %s", d, want, got)
		}
	}
}
