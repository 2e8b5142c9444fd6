package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Options configure a benchmark run.
type Options struct {
	// Runs of each scenario; each figure is the median of them (default 3).
	Runs int
	// Quick uses small sizes: a smoke run, not a measurement.
	Quick bool
	// Only runs the named scenarios (default: all; see Scenarios).
	Only []string
	// JSONFile receives the figures as JSON ("" writes none).
	JSONFile string
	// BinDir holds worker, producer and nats-server built without -race;
	// "" builds them into the temporary directory (needs the module).
	BinDir string
	// ProfileDir, when set, receives CPU profiles of the workers and of
	// nats-server taken during the last throughput run.
	ProfileDir string
	// KeepTemp keeps the temporary directory (server and worker logs).
	KeepTemp bool
	// PeersDir holds the peer harnesses and their run.sh (scenario peers;
	// default PeersDirDefault).
	PeersDir string
	// QuietWait: before each run, wait up to this long for the rest of the
	// machine to use less than a quarter of a core (0: do not wait). The
	// load seen during each run is reported either way.
	QuietWait time.Duration
	// Out receives the table (default io.Discard).
	Out io.Writer
	// Progress receives one line per run (default: none).
	Progress io.Writer
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.Runs == 0 {
		o.Runs = 3
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

func (o Options) validate() error {
	if o.Runs < 1 {
		return fmt.Errorf("bench: Runs must be at least 1, got %d", o.Runs)
	}
	for _, name := range o.Only {
		if !slices.Contains(Scenarios(), name) {
			return fmt.Errorf("bench: unknown scenario %q (want one of %s)", name, strings.Join(Scenarios(), ", "))
		}
	}
	return nil
}

// Scenarios are the scenario names, in the order they run.
func Scenarios() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
}

// scenarios, in the order they run. Each file scenario_*.go defines one.
var scenarios = []*scenario{
	throughputScenario,
	enqueueScenario,
	contendedScenario,
	rateScenario,
	handoffScenario,
	shutdownScenario,
	footprintScenario,
	scaleScenario,
	acquireCostScenario,
	scopeCostScenario,
	shardScenario,
	limitsScenario,
	gatewayScenario,
	nginxScenario,
	llmScenario,
	llm95Scenario,
	llmHandlerScenario,
	providerBytesScenario,
	refillScenario,
	batchAPIScenario,
	spendScenario,
	scopesScenario,
	peersScenario,
	persistentScenario,
	httpEnqueueScenario,
	batchesScenario,
	accountsScenario,
	gwLatencyScenario,
	gwBehindScenario,
	gwThroughputScenario,
	fallbackScenario,
}

// scenario is one numbered item of the benchmark.
type scenario struct {
	name  string
	title string
	// figures, in table order.
	figures []figSpec
	// run does one run and returns a value for (some of) the figures.
	run func(ctx context.Context, e *env, r runInfo) (*sample, error)
	// runAll, when set, replaces the Options.Runs calls of run: one call
	// returns every run's sample (for a scenario that repeats itself, such
	// as an outside harness with its own repetitions).
	runAll func(ctx context.Context, e *env, o Options) ([]*sample, error)
}

// runInfo says which run this is.
type runInfo struct {
	quick   bool
	n, runs int // n counts from 1
}

func (r runInfo) last() bool { return r.n == r.runs }

// figSpec describes one figure of a scenario.
type figSpec struct {
	id   string // key in sample.values
	name string
	unit string
	// goal, when set, is the target.
	goal *goal
	// ceiling names another figure of the same scenario whose median is
	// this figure's ceiling (ratio = this median / that median).
	ceiling string
	// ceilingScale multiplies the ceiling figure (default 1).
	ceilingScale float64
	note         string
}

// goal is a target: the figure's statistic compared with a value.
type goal struct {
	op    string // ">=", "<=" or "in" (value ≤ statistic ≤ hi)
	value float64
	hi    float64 // the upper bound of "in"
	// on is the statistic compared: "median" (default) or "worst" (the
	// worst run: min for >=, max for <=), for "never" targets.
	on string
}

func atLeast(v float64) *goal     { return &goal{op: ">=", value: v} }
func atMost(v float64) *goal      { return &goal{op: "<=", value: v} }
func within(lo, hi float64) *goal { return &goal{op: "in", value: lo, hi: hi} }
func never(op string, v float64) *goal {
	return &goal{op: op, value: v, on: "worst"}
}

func (g *goal) text(unit string) string {
	if g.op == "in" {
		return formatValue(g.value, unit) + "–" + formatValue(g.hi, unit)
	}
	s := "≥ "
	if g.op == "<=" {
		s = "≤ "
	}
	s += formatValue(g.value, unit)
	if g.on == "worst" {
		s += " (every run)"
	}
	return s
}

func (g *goal) met(f Figure) bool {
	v := f.Median
	if g.on == "worst" {
		if g.op == ">=" {
			v = f.Min
		} else {
			v = f.Max
		}
	}
	switch g.op {
	case ">=":
		return v >= g.value
	case "in":
		return v >= g.value && v <= g.hi
	}
	return v <= g.value
}

// sample is what one run measured.
type sample struct {
	values map[string]float64
	cpu    []CPUUse
	// missing says, by figure ID, why a figure was not measured.
	missing map[string]string
}

func newSample() *sample { return &sample{values: map[string]float64{}, missing: map[string]string{}} }

// Figure is one row of the results.
type Figure struct {
	Scenario string    `json:"scenario"`
	Title    string    `json:"title"`
	ID       string    `json:"id"`
	Name     string    `json:"figure"`
	Unit     string    `json:"unit"`
	Median   float64   `json:"median"`
	Min      float64   `json:"min"`
	Max      float64   `json:"max"`
	Runs     []float64 `json:"runs"`
	Target   string    `json:"target,omitempty"`
	Met      *bool     `json:"met,omitempty"`
	// Ceiling is the median of the figure named by CeilingID; Ratio is
	// Median / Ceiling.
	Ceiling   *float64 `json:"ceiling,omitempty"`
	CeilingID string   `json:"ceiling_id,omitempty"`
	Ratio     *float64 `json:"ratio,omitempty"`
	Note      string   `json:"note,omitempty"`
	// Missing says why the figure has no value, when a run said so.
	Missing string `json:"missing,omitempty"`
}

// Results is everything one program run measured.
type Results struct {
	Started  time.Time `json:"started"`
	Duration float64   `json:"duration_s"`
	Machine  Machine   `json:"machine"`
	Options  struct {
		Runs  int      `json:"runs"`
		Quick bool     `json:"quick"`
		Only  []string `json:"only,omitempty"`
	} `json:"options"`
	Figures []Figure  `json:"figures"`
	CPU     []CPURow  `json:"cpu"`
	Errors  []string  `json:"errors,omitempty"`
	Servers ServerSet `json:"servers"`
}

// ServerSet says how the servers ran.
type ServerSet struct {
	NATS  string `json:"nats"`
	Redis string `json:"redis"`
	Note  string `json:"note"`
}

// Run runs the selected scenarios, prints the table to Options.Out and
// writes Options.JSONFile. A scenario that fails is reported (in the
// table, the JSON and the returned error) and the others still run.
func Run(ctx context.Context, o Options) (*Results, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	res := &Results{Started: time.Now().UTC(), Machine: machine(ctx)}
	res.Options.Runs, res.Options.Quick, res.Options.Only = o.Runs, o.Quick, o.Only
	e, err := newEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	res.Servers = ServerSet{
		NATS:  serverVersion(ctx, e.natsBin, "--version"),
		Redis: serverVersion(ctx, "redis-server", "--version"),
		Note: "one nats-server (JetStream, file storage) and one redis-server (no persistence) for the whole program, " +
			"separate processes on loopback; every run uses fresh stream, subject and pool names, then deletes its streams and flushes Redis",
	}
	var errs []error
	for _, s := range scenarios {
		if len(o.Only) > 0 && !slices.Contains(o.Only, s.name) {
			continue
		}
		figs, cpu, err := runScenario(ctx, e, s, o)
		res.Figures = append(res.Figures, figs...)
		res.CPU = append(res.CPU, cpu...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", s.name, err))
		}
		if ctx.Err() != nil {
			break
		}
	}
	derive(res)
	res.Duration = time.Since(res.Started).Seconds()
	printTable(o.Out, res)
	if o.JSONFile != "" {
		if err := writeJSON(o.JSONFile, res); err != nil {
			errs = append(errs, err)
		}
	}
	if ctx.Err() != nil && len(errs) == 0 {
		errs = append(errs, context.Cause(ctx))
	}
	return res, errors.Join(errs...)
}

func runScenario(ctx context.Context, e *env, s *scenario, o Options) ([]Figure, []CPURow, error) {
	if s.runAll != nil {
		start := time.Now()
		samples, err := s.runAll(ctx, e, o)
		for i, smp := range samples {
			e.progress("%s run %d/%d: %s", s.name, i+1, len(samples), s.summary(smp))
		}
		e.progress("%s: %d runs in %.1fs", s.name, len(samples), time.Since(start).Seconds())
		return aggregate(s, samples), aggregateCPU(s.name, samples), err
	}
	var samples []*sample
	var runErr error
	for i := range o.Runs {
		if ctx.Err() != nil {
			runErr = context.Cause(ctx)
			break
		}
		if o.QuietWait > 0 {
			if _, err := e.waitQuiet(ctx); err != nil {
				runErr = err
				break
			}
		}
		start := time.Now()
		smp, err := s.run(ctx, e, runInfo{quick: o.Quick, n: i + 1, runs: o.Runs})
		if err != nil {
			runErr = fmt.Errorf("run %d: %w", i+1, err)
			break
		}
		samples = append(samples, smp)
		e.progress("%s run %d/%d (%.1fs): %s", s.name, i+1, o.Runs, time.Since(start).Seconds(), s.summary(smp))
	}
	figs := aggregate(s, samples)
	return figs, aggregateCPU(s.name, samples), runErr
}

// summary is a one-line digest of a run for the progress output.
func (s *scenario) summary(smp *sample) string {
	var parts []string
	for _, f := range s.figures {
		if v, ok := smp.values[f.id]; ok && f.goal != nil {
			parts = append(parts, fmt.Sprintf("%s %s %s", f.id, formatValue(v, f.unit), f.unit))
		}
	}
	others := 0.0
	for _, u := range smp.cpu {
		if u.PhaseWall > 0 {
			others = max(others, u.Others/u.PhaseWall)
		}
	}
	parts = append(parts, fmt.Sprintf("other processes used up to %.2f cores", others))
	return strings.Join(parts, ", ")
}

// aggregate turns the runs into figures: median, min, max, target, ceiling.
func aggregate(s *scenario, samples []*sample) []Figure {
	byID := map[string]*Figure{}
	var out []Figure
	for _, spec := range s.figures {
		var vals []float64
		for _, smp := range samples {
			if v, ok := smp.values[spec.id]; ok && !math.IsNaN(v) {
				vals = append(vals, v)
			}
		}
		f := Figure{Scenario: s.name, Title: s.title, ID: spec.id, Name: spec.name, Unit: spec.unit, Runs: vals, Note: spec.note}
		if len(vals) == 0 {
			var why []string
			for _, smp := range samples {
				if w := smp.missing[spec.id]; w != "" && !slices.Contains(why, w) {
					why = append(why, w)
				}
			}
			f.Missing = strings.Join(why, "; ")
		}
		if len(vals) > 0 {
			f.Median, f.Min, f.Max = median(vals), slices.Min(vals), slices.Max(vals)
		}
		if spec.goal != nil {
			f.Target = spec.goal.text(spec.unit)
			if len(vals) > 0 {
				m := spec.goal.met(f)
				f.Met = &m
			}
		}
		out = append(out, f)
		byID[spec.id] = &out[len(out)-1]
	}
	for i, spec := range s.figures {
		c, ok := byID[spec.ceiling]
		if spec.ceiling == "" || !ok || len(c.Runs) == 0 || len(out[i].Runs) == 0 || c.Median == 0 {
			continue
		}
		cm := c.Median
		if spec.ceilingScale != 0 {
			cm *= spec.ceilingScale
		}
		r := out[i].Median / cm
		out[i].Ceiling, out[i].CeilingID, out[i].Ratio = &cm, spec.ceiling, &r
	}
	return out
}

// median of vals (the mean of the middle two for an even count).
func median(vals []float64) float64 {
	s := slices.Clone(vals)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// pick chooses between the full and the quick size.
func pick[T any](quick bool, full, small T) T {
	if quick {
		return small
	}
	return full
}
