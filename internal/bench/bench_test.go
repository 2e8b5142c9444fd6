package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The quick profile of the cheapest scenario, so that `make test` runs the
// program's machinery (build, servers, a worker process, the table, the
// JSON). It checks the shape of the output, never a timing.
func TestQuickFootprint(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	var out bytes.Buffer
	res, err := Run(t.Context(), Options{Runs: 1, Quick: true, Only: []string{"footprint"}, JSONFile: jsonPath, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(res.Figures) != len(footprintScenario.figures) {
		t.Fatalf("want %d figures, got %d", len(footprintScenario.figures), len(res.Figures))
	}
	for _, f := range res.Figures {
		if f.Scenario != "footprint" || len(f.Runs) != 1 {
			t.Errorf("figure %s: scenario %q, %d runs; want footprint, 1", f.ID, f.Scenario, len(f.Runs))
		}
		if (f.Target != "") != (f.Met != nil) {
			t.Errorf("figure %s: target %q but met %v", f.ID, f.Target, f.Met)
		}
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var back Results
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("the JSON does not decode: %v", err)
	}
	if len(back.Figures) != len(res.Figures) || back.Options.Runs != 1 || !back.Options.Quick {
		t.Errorf("the JSON differs from the results: %+v", back.Options)
	}
	for _, want := range []string{"7. footprint", "worker start-up", "idle worker VmRSS", "target", "ratio"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Runs: 1, Only: []string{"nope"}}, `unknown scenario "nope"`},
		{Options{Runs: -1}, "Runs must be at least 1"},
		{Options{Runs: 2, Only: []string{"rate", "handoff"}}, ""},
	} {
		err := tc.o.validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: want %q, got %v", tc.o, tc.want, err)
		}
	}
}

func TestMaxInWindow(t *testing.T) {
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, time.Unix(0, 0).Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	for _, tc := range []struct {
		ts   []time.Time
		want int
	}{
		{nil, 0},
		{at(0, 1, 2), 3},
		{at(0, 1000, 2000), 1}, // half-open windows: exactly one period apart is fine
		{at(0, 999, 1000), 2},  // 0 and 999 share a window
		{at(0, 10, 20, 1005, 1015, 1030), 3},
	} {
		if got := maxInWindow(tc.ts, time.Second); got != tc.want {
			t.Errorf("%v: want %d, got %d", tc.ts, tc.want, got)
		}
	}
}

func TestKeyGaps(t *testing.T) {
	t0 := time.Unix(100, 0)
	ms := time.Millisecond
	runs := []keyRun{
		{key: "a", granted: t0.Add(26 * ms), dur: 25 * ms},
		{key: "a", granted: t0, dur: 25 * ms},
		{key: "b", granted: t0, dur: 10 * ms},
		{key: "b", granted: t0.Add(13 * ms), dur: 10 * ms},
	}
	got := keyGaps(runs)
	want := []float64{1, 3}
	if len(got) != len(want) || math.Abs(got[0]-want[0]) > 1e-9 || math.Abs(got[1]-want[1]) > 1e-9 {
		t.Errorf("want %v, got %v", want, got)
	}
}

func TestStats(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 values: %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median of 4 values: %v", m)
	}
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if q := quantile(s, 0.5); q != 5 {
		t.Errorf("p50: %v", q)
	}
	if q := quantile(s, 0.99); q != 10 {
		t.Errorf("p99: %v", q)
	}
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{21345.4, "items/s", "21,345"},
		{999, "items/s", "999"},
		{1234567, "ops/s", "1,234,567"},
		{0.98123, "fraction", "0.981"},
		{1.5, "ms", "1.500"},
		{math.NaN(), "ms", "-"},
	} {
		if got := formatValue(tc.v, tc.unit); got != tc.want {
			t.Errorf("formatValue(%v, %s): want %s, got %s", tc.v, tc.unit, tc.want, got)
		}
	}
}

func TestGoal(t *testing.T) {
	f := Figure{Median: 0.99, Min: 0.97, Max: 1.0}
	if !atLeast(0.98).met(f) {
		t.Error("median 0.99 ≥ 0.98 not met")
	}
	if never(">=", 0.98).met(f) {
		t.Error("a run at 0.97 met ≥ 0.98 in every run")
	}
	if !never("<=", 1).met(f) || never("<=", 0.995).met(f) {
		t.Error("≤ in every run compares the max")
	}
}
