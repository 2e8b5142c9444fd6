package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Scenario 14: the peers, what a user would pick instead of keyfleet,
// measured on the same machine in the same program run: the harnesses of
// Options.PeersDir (BullMQ, asynq, the original Python coordinator of the
// seeds), run by their own run.sh with REPS = Options.Runs; it starts its
// own redis-server, and keyfleet's servers sit idle meanwhile. Each of its
// repetitions is one run here; figures are medians as everywhere.
//
// run.sh builds the asynq harness and installs BullMQ (npm) into its own
// directory, so it runs from a copy in the user's cache directory
// (…/keyfleet/kfbench-peers/<hash of the harness files>), never from the
// repository or the shared directory. A harness that cannot run leaves its
// rows empty with the reason run.sh gave; no figure is made up.
//
// asynq and BullMQ: items/s = N ÷ processing time (enqueued first, 50
// concurrent handlers, no key reserved: a queue without a credential
// pool). Seed: key utilization = succeeded × 25 ms ÷ (4 keys × wall), and
// the items the reserving coordinator failed for want of a key.
var peersScenario = &scenario{
	name:  "peers",
	title: "14. peers (same machine)",
	figures: []figSpec{
		{id: "asynq_noop", name: "asynq: 20,000 no-op tasks, 50 handlers", unit: "items/s"},
		{id: "asynq_5ms", name: "asynq: 2,000 × 5 ms tasks, 50 handlers", unit: "items/s"},
		{id: "bullmq_noop", name: "BullMQ: 20,000 no-op jobs, concurrency 50", unit: "items/s"},
		{id: "bullmq_5ms", name: "BullMQ: 2,000 × 5 ms jobs, concurrency 50", unit: "items/s"},
		{id: "keyfleet_vs_bullmq", name: "keyfleet throughput (scenario 1, items/s) ÷ BullMQ no-op", unit: "ratio",
			note: "the throughput scenario's median ÷ the BullMQ no-op median of the same program run; min and max pair the extremes (keyfleet reserves a credential per item, BullMQ does not)"},
		{id: "keyfleet_1p_vs_bullmq", name: "… with each worker on one P (GOMAXPROCS=1) ÷ BullMQ no-op", unit: "ratio",
			note: "BullMQ's worker is one Node process: one thread runs its JavaScript"},
		{id: "seed_reserving_10", name: "seed, reserving coordinator: 4 keys, 10 threads, 400 × 25 ms: key utilization", unit: "fraction"},
		{id: "seed_reserving_10_failed", name: "… items failed for want of a key", unit: "count"},
		{id: "seed_reserving_4", name: "seed, reserving coordinator: 4 keys, 4 threads: key utilization", unit: "fraction"},
		{id: "seed_blocking_10", name: "seed, blocking coordinator: 4 keys, 10 threads: key utilization", unit: "fraction"},
		{id: "seed_blocking_4", name: "seed, blocking coordinator: 4 keys, 4 threads: key utilization", unit: "fraction"},
	},
	runAll: runPeers,
}

// peerHarness maps a figure to the harness line that gives it.
type peerHarness struct {
	id    string
	name  string            // first word of the line
	match map[string]string // fields that select the line
	field string            // the field that is the figure
	cmd   string            // what run.sh names the harness in its ERROR lines
}

var peerHarnesses = []peerHarness{
	{"asynq_noop", "asynq", map[string]string{"job_ms": "0"}, "items_per_s", "asynq/asynqbench"},
	{"asynq_5ms", "asynq", map[string]string{"job_ms": "5"}, "items_per_s", "asynq/asynqbench"},
	{"bullmq_noop", "bullmq", map[string]string{"job_ms": "0"}, "items_per_s", "bullmq/bench.js"},
	{"bullmq_5ms", "bullmq", map[string]string{"job_ms": "5"}, "items_per_s", "bullmq/bench.js"},
	{"seed_reserving_10", "seed-reserving", map[string]string{"workers": "10"}, "utilization", "seedpy/bench.py"},
	{"seed_reserving_10_failed", "seed-reserving", map[string]string{"workers": "10"}, "failed", "seedpy/bench.py"},
	{"seed_reserving_4", "seed-reserving", map[string]string{"workers": "4"}, "utilization", "seedpy/bench.py"},
	{"seed_blocking_10", "seed-blocking", map[string]string{"workers": "10"}, "utilization", "seedpy/bench.py"},
	{"seed_blocking_4", "seed-blocking", map[string]string{"workers": "4"}, "utilization", "seedpy/bench.py"},
}

// PeersDirDefault is where the peer harnesses are looked for when
// Options.PeersDir is empty.
const PeersDirDefault = "/work/shared/peers"

func runPeers(ctx context.Context, e *env, o Options) ([]*sample, error) {
	src := o.PeersDir
	if src == "" {
		src = PeersDirDefault
	}
	fail := func(why string) []*sample {
		smp := newSample()
		for _, h := range peerHarnesses {
			smp.missing[h.id] = why
		}
		return []*sample{smp}
	}
	if _, err := os.Stat(filepath.Join(src, "run.sh")); err != nil {
		return fail(fmt.Sprintf("no peer harnesses: %v (set -peers DIR)", err)), nil
	}
	dir, err := peersCopy(src)
	if err != nil {
		return fail(err.Error()), nil
	}
	if o.QuietWait > 0 {
		if _, err := e.waitQuiet(ctx); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(e.dir, "logs", "peers.log")
	e.progress("peers: %s/run.sh, REPS=%d (log: %s)", dir, o.Runs, logPath)
	p, err := e.start("peers", "bash", []string{filepath.Join(dir, "run.sh")}, []string{"REPS=" + strconv.Itoa(o.Runs)})
	if err != nil {
		return fail(err.Error()), nil
	}
	limit := 5*time.Minute + time.Duration(o.Runs)*3*time.Minute
	waitErr := p.Wait(ctx, limit)
	if !p.Exited() {
		// run.sh stops its redis-server on SIGTERM; the harness it runs is
		// in its process group.
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
		_ = p.Wait(context.WithoutCancel(ctx), 10*time.Second)
		p.Kill()
	}
	f, err := os.Open(logPath)
	if err != nil {
		return fail(err.Error()), nil
	}
	defer f.Close()
	samples, errs := parsePeers(f, o.Runs)
	why := ""
	switch {
	case ctx.Err() != nil:
		return samples, context.Cause(ctx)
	case waitErr != nil:
		why = fmt.Sprintf("run.sh: %v; log end: %s", waitErr, oneLine(p.logTail(), 300))
	}
	for _, smp := range samples {
		for _, h := range peerHarnesses {
			if _, ok := smp.values[h.id]; ok {
				continue
			}
			switch {
			case errs[h.cmd] != "":
				smp.missing[h.id] = errs[h.cmd]
			case why != "":
				smp.missing[h.id] = why
			default:
				smp.missing[h.id] = "run.sh printed no such line"
			}
		}
	}
	return samples, nil
}

// parsePeers reads run.sh's output: "# rep i/N" starts repetition i; each
// result line is a harness name then key=value fields. It returns one
// sample per repetition (reps at least) and, by harness command, the
// first error run.sh reported for it.
func parsePeers(r io.Reader, reps int) ([]*sample, map[string]string) {
	samples := make([]*sample, max(reps, 1))
	for i := range samples {
		samples[i] = newSample()
	}
	errs := map[string]string{}
	rep := 0
	sc := bufio.NewScanner(r)
	var pendingErr string // an ERROR line; the next line says more
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pendingErr != "" {
			cmd := pendingErr
			pendingErr = ""
			if errs[cmd] != "" && !strings.HasPrefix(line, "ERROR") && !strings.HasPrefix(line, "#") && !isPeerLine(line) {
				errs[cmd] += ": " + oneLine(line, 200)
			}
		}
		if rest, ok := strings.CutPrefix(line, "# rep "); ok {
			if i, _, ok := strings.Cut(rest, "/"); ok {
				if n, err := strconv.Atoi(i); err == nil && n >= 1 && n <= len(samples) {
					rep = n - 1
				}
			}
			continue
		}
		if strings.HasPrefix(line, "ERROR ") {
			for _, h := range peerHarnesses {
				if strings.Contains(line, h.cmd) && errs[h.cmd] == "" {
					errs[h.cmd] = oneLine(line, 200)
					pendingErr = h.cmd
				}
			}
			continue
		}
		if !isPeerLine(line) {
			continue
		}
		name, fields := parsePeerLine(line)
		for _, h := range peerHarnesses {
			if h.name != name || !matches(fields, h.match) {
				continue
			}
			if v, err := strconv.ParseFloat(fields[h.field], 64); err == nil {
				samples[rep].values[h.id] = v
			}
		}
	}
	return samples, errs
}

func isPeerLine(line string) bool {
	for _, p := range []string{"asynq ", "bullmq ", "seed-"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

func parsePeerLine(line string) (string, map[string]string) {
	f := strings.Fields(line)
	kv := map[string]string{}
	for _, p := range f[1:] {
		if k, v, ok := strings.Cut(p, "="); ok {
			kv[k] = v
		}
	}
	return f[0], kv
}

func matches(fields, want map[string]string) bool {
	for k, v := range want {
		if fields[k] != v {
			return false
		}
	}
	return true
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// peersCopy copies the harness sources (not what they build) into the
// user's cache directory, once per version of them, and returns the copy.
func peersCopy(src string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("bench: peers: %w", err)
	}
	h := sha256.New()
	var files []string
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "__pycache__") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || d.Name() == "asynqbench" {
			return nil
		}
		rel, _ := filepath.Rel(src, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
		files = append(files, rel)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("bench: peers: read %s: %w", src, err)
	}
	dst := filepath.Join(cache, "keyfleet", "kfbench-peers", hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(filepath.Join(dst, ".copied")); err == nil {
		return dst, nil
	}
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return "", fmt.Errorf("bench: peers: %w", err)
		}
		info, err := os.Stat(filepath.Join(src, rel))
		if err != nil {
			return "", fmt.Errorf("bench: peers: %w", err)
		}
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return "", fmt.Errorf("bench: peers: %w", err)
		}
		if err := os.WriteFile(out, b, info.Mode().Perm()|0o200); err != nil {
			return "", fmt.Errorf("bench: peers: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dst, ".copied"), nil, 0o644); err != nil {
		return "", fmt.Errorf("bench: peers: %w", err)
	}
	return dst, nil
}

// derive fills the figures computed from other scenarios' medians: the
// ratios of keyfleet's throughput (each run of scenario 1) to BullMQ's
// no-op rate.
func derive(res *Results) {
	for _, d := range []struct{ throughput, ratio string }{
		{"items_per_s", "keyfleet_vs_bullmq"},
		{"items_per_s_1p", "keyfleet_1p_vs_bullmq"},
	} {
		deriveRatio(res, d.throughput, d.ratio)
	}
}

// deriveRatio sets figure ratio (of the peers scenario) to throughput
// figure tp ÷ BullMQ's no-op rate.
func deriveRatio(res *Results, tpID, ratioID string) {
	var tp, bull *Figure
	ratio := -1
	for i := range res.Figures {
		f := &res.Figures[i]
		switch {
		case f.Scenario == "throughput" && f.ID == tpID && len(f.Runs) > 0:
			tp = f
		case f.Scenario == "peers" && f.ID == "bullmq_noop" && len(f.Runs) > 0:
			bull = f
		case f.Scenario == "peers" && f.ID == ratioID:
			ratio = i
		}
	}
	if ratio < 0 {
		return
	}
	f := &res.Figures[ratio]
	if tp == nil || bull == nil || bull.Median <= 0 || bull.Min <= 0 {
		if f.Missing == "" {
			f.Missing = "needs the throughput scenario and BullMQ's no-op figure in the same program run"
		}
		return
	}
	f.Median = tp.Median / bull.Median
	f.Min, f.Max = tp.Min/bull.Max, tp.Max/bull.Min
	f.Runs = []float64{f.Median}
	f.Missing = ""
}
