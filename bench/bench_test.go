package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// quickCovered are the scenarios TestQuick runs at their quick sizes in
// one program run (one build of the binaries): the cheapest, so that
// `make bench-smoke` (CI runs it after `make test`) runs the program's
// machinery (build, servers, a worker process, in-process pool handles,
// the table, the JSON). It checks the shape of the output, never a timing.
var quickCovered = []string{"footprint", "acquirecost", "limits"}

// quickExcluded are the scenarios TestQuick leaves out, and why; their
// arithmetic has unit tests below.
var quickExcluded = map[string]string{
	"throughput":    "not run by make test before the scenarios 8-14 were added either: ~11 s of two worker processes at quick size",
	"enqueue":       "not run by make test before the scenarios 8-14 were added either",
	"contended":     "not run by make test before the scenarios 8-14 were added either: ~11 s at quick size",
	"rate":          "not run by make test before the scenarios 8-14 were added either: ~7 s at quick size",
	"handoff":       "not run by make test before the scenarios 8-14 were added either",
	"shutdown":      "not run by make test before the scenarios 8-14 were added either: waits out a 1 s grace and a 2.5 s job",
	"scale":         "opens up to 1,000 pool handles (2,000 Redis connections) for ~12 s even at quick size; under -race it measures the race detector (clipBusy is tested)",
	"shard":         "drives Redis and the machine's CPU to saturation by design, which would slow every package testing in parallel",
	"gateway":       "~15 s of real worker processes even at quick size: learning a pace from bare 429s takes hundreds of requests (okRate, convergence and per1000 are tested)",
	"spend":         "runs a fleet of two worker processes until a budget runs out (~10 s at quick size)",
	"llm":           "the stand-in API's windows are 10 s: a quick run lasts at least 11 s by construction",
	"llm95":         "the stand-in API's windows are 10 s: a quick run lasts at least 11 s by construction (skewOf is tested)",
	"llmhandler":    "the stand-in API's windows are 10 s: two fleets of at least 11 s each, with node and python3 handlers (the handlers' headers are tested end to end: internal/e2e/providers TestHandlersPassHeaders)",
	"batchapi":      "a fleet of worker processes and a 10,000-item deadline batch against the strict stand-in, whose provider batches take 5 s: ~20 s even at quick size; what it measures is tested in-process (internal/batchapi) and end to end (internal/e2e/batchapi)",
	"providerbytes": "a fleet of worker processes against the strict stand-in; what a provider kind sends is tested in-process (internal/jobs TestProviderRequests) and end to end (internal/e2e/providers providers_test.go)",
	"scopes":        "two fleets of worker processes for 5 s or more each even at quick size (scopeItems and scopeRatios are tested)",
	"scopecost":     "four pools of 100 keys and ten handles, a few seconds at quick size, the same machinery as acquirecost (covered)",
	"persistent":    "two fleets of worker processes and a python3 process per item of the first: ~10 s at quick size",
	"httpenqueue":   "writes a file of 1,000,000 items (45 MB) and dry-runs it even at quick size, beside a dashboard process",
	"batches":       "~8 s of two fleets of worker processes even at quick size, and its fair-share windows are wall-clock by construction (doneIn, startsAfter and within are tested)",
	"fallback":      "six fleets of worker processes against two stand-in APIs, one waiting out the fallback's 5 s after, even at quick size; what moves and when is tested in-process (internal/executor TestFallback) and end to end (internal/e2e/fallback)",
	"peers":         "needs node, npm (a network install on first use) and its own redis-server; 30 s or more per repetition (parsePeers and derive are tested)",
	"gwlatency":     "a worker process and 600 timed requests at quick size; what the gateway does is tested in-process (internal/gateway) and end to end (internal/e2e/gateway)",
	"gwbehind":      "two worker processes under a saturating batch for 5 s or more even at quick size (the gateway going first is tested end to end: internal/e2e/gateway TestAheadOfSaturatingBatch)",
	"gwthroughput":  "two worker processes at 1,000 requests/s: it loads both cores by design, which would slow every package testing in parallel",
	"accounts":      "four fleets of two worker processes for 10 s each even at quick size (keys sharing an account are tested end to end: internal/e2e/providers TestKeysOfAnAccountShareItsLimits; the pool in pkg/creds)",
	"nginx":         "needs nginx on the machine, and two worker processes for 10 s at quick size (the pace from bare 429s is tested in pkg/creds)",
	"refill":        "two fleets of two worker processes for 10 s each at quick size (pacing at the refill rate is tested in pkg/creds TestSignalsRestUntilEnoughHasRefilled)",
}

func TestEveryScenarioCoveredOrExcluded(t *testing.T) {
	for _, name := range Scenarios() {
		_, excluded := quickExcluded[name]
		if slices.Contains(quickCovered, name) == excluded {
			t.Errorf("scenario %s: covered %v, excluded %v; want exactly one (add it to quickCovered, or to quickExcluded with the reason)",
				name, slices.Contains(quickCovered, name), excluded)
		}
	}
	for name := range quickExcluded {
		if !slices.Contains(Scenarios(), name) {
			t.Errorf("quickExcluded names %s, which is not a scenario", name)
		}
	}
}

func TestQuick(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	var out bytes.Buffer
	res, err := Run(t.Context(), Options{Runs: 1, Quick: true, Only: quickCovered, JSONFile: jsonPath, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := 0
	for _, s := range scenarios {
		if slices.Contains(quickCovered, s.name) {
			want += len(s.figures)
		}
	}
	if len(res.Figures) != want {
		t.Fatalf("want %d figures, got %d", want, len(res.Figures))
	}
	measured := map[string]int{}
	for _, f := range res.Figures {
		if !slices.Contains(quickCovered, f.Scenario) || len(f.Runs) > 1 {
			t.Errorf("figure %s: scenario %q, %d runs; want one of %v, at most 1", f.ID, f.Scenario, len(f.Runs), quickCovered)
		}
		if len(f.Runs) == 1 {
			measured[f.Scenario]++
			if math.IsNaN(f.Median) || math.IsInf(f.Median, 0) {
				t.Errorf("figure %s/%s: %v", f.Scenario, f.ID, f.Median)
			}
		}
		if (f.Target != "") != (f.Met != nil) && len(f.Runs) > 0 {
			t.Errorf("figure %s: target %q but met %v", f.ID, f.Target, f.Met)
		}
	}
	for _, name := range quickCovered {
		if measured[name] == 0 {
			t.Errorf("scenario %s measured no figure", name)
		}
	}
	if measured["footprint"] != len(footprintScenario.figures) || measured["limits"] != len(limitsScenario.figures) {
		t.Errorf("footprint and limits measure every figure at quick size: %v", measured)
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
	for _, want := range []string{"7. footprint", "worker start-up", "idle worker VmRSS", "9. acquire cost", "11. limit precision", "target", "ratio"} {
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
	if !within(0.9, 1.1).met(f) || within(1.0, 1.1).met(f) || within(0.9, 0.98).met(f) {
		t.Error("within compares the median with both bounds")
	}
	if got := within(2.7, 3.3).text("×"); got != "2.700–3.300" {
		t.Errorf("within's text: %q", got)
	}
}

func TestBatchesCounts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rs := []kftype.Result{
		{Item: "a", Outcome: kftype.OutcomeSucceeded, LeasedAt: at(-30), FinishedAt: at(-10)}, // before the window
		{Item: "b", Outcome: kftype.OutcomeSucceeded, LeasedAt: at(-20), FinishedAt: at(0)},   // at its start: in
		{Item: "c", Outcome: kftype.OutcomeSucceeded, LeasedAt: at(500), FinishedAt: at(520)},
		{Item: "d", Outcome: kftype.OutcomeFailed, LeasedAt: at(600), FinishedAt: at(620)},     // not done
		{Item: "e", Outcome: kftype.OutcomeSucceeded, LeasedAt: at(980), FinishedAt: at(1000)}, // at its end: out
		{Item: "f", Outcome: kftype.OutcomeCancelled, FinishedAt: at(1100)},
		{Item: "g", Outcome: kftype.OutcomeCancelled, FinishedAt: at(1200)},
	}
	if done, cancelled := doneIn(rs, at(0), at(1000)); done != 2 || cancelled != 2 {
		t.Errorf("doneIn: %d done, %d cancelled; want 2, 2", done, cancelled)
	}
	if last, n := startsAfter(rs, at(550)); last != 430*time.Millisecond || n != 2 {
		t.Errorf("startsAfter 550 ms: %s, %d; want 430ms, 2 (cancelled items never started)", last, n)
	}
	if last, n := startsAfter(rs, at(2000)); last != 0 || n != 0 {
		t.Errorf("startsAfter, nothing later: %s, %d", last, n)
	}
}

func TestClipBusy(t *testing.T) {
	logs := [][]interval{
		{{0, 10}, {20, 30}}, // inside, and across the end (25)
		{{-5, 5}, {40, 50}}, // across the start, and after
	}
	busy, ended := clipBusy(logs, 0, 25)
	if busy != 10+5+5 || ended != 2 {
		t.Errorf("want busy 20, 2 ended; got %d, %d", busy, ended)
	}
}

func TestMaxCostInWindow(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int, cost int64) start {
		return start{at: t0.Add(time.Duration(ms) * time.Millisecond), cost: cost}
	}
	ss := []start{at(0, 10), at(500, 20), at(999, 30), at(1000, 40), at(1600, 5)}
	// [0,1000): 60; [500,1500): 90; [999,1999): 75; [1000,2000): 45
	if got := maxCostInWindow(ss, time.Second); got != 90 {
		t.Errorf("want 90, got %d", got)
	}
	if got := maxCostInWindow(nil, time.Second); got != 0 {
		t.Errorf("no starts: want 0, got %d", got)
	}
}

func TestAPIFigures(t *testing.T) {
	t0 := time.Unix(100, 0)
	ev := func(ms int, cred string, status int) apiEvent {
		return apiEvent{at: t0.Add(time.Duration(ms) * time.Millisecond), cred: cred, status: status}
	}
	var evs []apiEvent
	// 0-500 ms: every other answer a 429; then only 200s for 3 s.
	for ms := 0; ms < 500; ms += 50 {
		evs = append(evs, ev(ms, "a", http.StatusOK), ev(ms+1, "a", http.StatusTooManyRequests))
	}
	for ms := 500; ms <= 3500; ms += 50 {
		evs = append(evs, ev(ms, "a", http.StatusOK))
	}
	c := convergence(evs, 0.05)
	// The last window with 5% or more of 429s ends when the one at 451 ms
	// is still in it and enough 200s have not come yet: between 1.4 and
	// 1.452 s.
	if c < 1400*time.Millisecond || c > 1452*time.Millisecond {
		t.Errorf("convergence: %s", c)
	}
	if c := convergence(evs[20:], 0.05); c != 0 {
		t.Errorf("no 429s: want 0, got %s", c)
	}
	// 10 + 61 answers of one credential from 0 to 3.5 s: (71-1)/3.5.
	if r := okRate(evs); math.Abs(r-70/3.5) > 1e-9 {
		t.Errorf("okRate: want 20, got %v", r)
	}
	st := fakeapi.Stats{Keys: []fakeapi.KeyStats{{Requests: 900, RateLimited: 9}, {Requests: 100, RateLimited: 1}}}
	if p := per1000(st); p != 10 {
		t.Errorf("per1000: want 10, got %v", p)
	}
}

func TestParsePeers(t *testing.T) {
	out := `# redis v=7.0.15 on 127.0.0.1:16380 (pid 1); reps=2; 2 cpus
# rep 1/2
asynq items=20000 concurrency=50 job_ms=0 enqueue_s=1.0 process_s=2.0 total_s=3.0 items_per_s=10000.0
ERROR rc=1: node bullmq/bench.js -redis 127.0.0.1:16380 -n 20000 -concurrency 50 -job-ms 0
Error: Cannot find module 'bullmq'
asynq items=2000 concurrency=50 job_ms=5 enqueue_s=0.4 process_s=0.5 total_s=0.9 items_per_s=4000.0
seed-reserving items=400 creds=4 workers=10 job_ms=25 wall_s=3.5 succeeded=394 failed=6 utilization=0.695 overlaps=0
# rep 2/2
asynq items=20000 concurrency=50 job_ms=0 enqueue_s=1.0 process_s=2.5 total_s=3.5 items_per_s=8000.0
seed-blocking items=400 creds=4 workers=4 job_ms=25 wall_s=2.5 succeeded=400 failed=0 utilization=0.978 overlaps=0
# medians over 2 reps
median asynq items=20000 concurrency=50 job_ms=0 reps=2 items_per_s=9000.000
`
	smps, errs := parsePeers(strings.NewReader(out), 2)
	if len(smps) != 2 {
		t.Fatalf("want 2 samples, got %d", len(smps))
	}
	for _, c := range []struct {
		rep  int
		id   string
		want float64
	}{
		{0, "asynq_noop", 10000}, {0, "asynq_5ms", 4000}, {0, "seed_reserving_10", 0.695}, {0, "seed_reserving_10_failed", 6},
		{1, "asynq_noop", 8000}, {1, "seed_blocking_4", 0.978},
	} {
		if got, ok := smps[c.rep].values[c.id]; !ok || got != c.want {
			t.Errorf("rep %d %s: want %v, got %v (%v)", c.rep+1, c.id, c.want, got, ok)
		}
	}
	if _, ok := smps[1].values["asynq_5ms"]; ok {
		t.Error("rep 2 has no asynq 5 ms line")
	}
	if e := errs["bullmq/bench.js"]; !strings.Contains(e, "rc=1") || !strings.Contains(e, "Cannot find module") {
		t.Errorf("bullmq's error: %q", e)
	}
}

func TestDerive(t *testing.T) {
	res := &Results{Figures: []Figure{
		{Scenario: "throughput", ID: "items_per_s", Median: 20000, Min: 18000, Max: 22000, Runs: []float64{18000, 20000, 22000}},
		{Scenario: "throughput", ID: "items_per_s_1p", Median: 25000, Min: 24000, Max: 26000, Runs: []float64{24000, 25000, 26000}},
		{Scenario: "peers", ID: "bullmq_noop", Median: 10000, Min: 9000, Max: 11000, Runs: []float64{9000, 10000, 11000}},
		{Scenario: "peers", ID: "keyfleet_vs_bullmq"},
		{Scenario: "peers", ID: "keyfleet_1p_vs_bullmq"},
	}}
	derive(res)
	if f := res.Figures[3]; f.Median != 2 || math.Abs(f.Min-18000.0/11000) > 1e-9 || math.Abs(f.Max-22000.0/9000) > 1e-9 || len(f.Runs) != 1 || f.Missing != "" {
		t.Errorf("derived: %+v", f)
	}
	if f := res.Figures[4]; f.Median != 2.5 || math.Abs(f.Min-24000.0/11000) > 1e-9 || math.Abs(f.Max-26000.0/9000) > 1e-9 || f.Missing != "" {
		t.Errorf("derived for one P: %+v", f)
	}
	res.Figures = res.Figures[2:]
	res.Figures[1] = Figure{Scenario: "peers", ID: "keyfleet_vs_bullmq"}
	res.Figures[2] = Figure{Scenario: "peers", ID: "keyfleet_1p_vs_bullmq"}
	derive(res)
	for _, f := range res.Figures[1:] {
		if len(f.Runs) != 0 || f.Missing == "" {
			t.Errorf("without the throughput scenario: %+v", f)
		}
	}
}
