package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// printTable writes the figures and the CPU accounting as text tables.
func printTable(w io.Writer, res *Results) {
	fmt.Fprintf(w, "keyfleet benchmark — %d CPUs (%s), %s, commit %s", res.Machine.CPUs, res.Machine.Model, res.Machine.Go, res.Machine.GitCommit)
	if len(res.Machine.GitDirty) > 0 {
		fmt.Fprintf(w, " + uncommitted changes in %s", strings.Join(res.Machine.GitDirty, ", "))
	}
	fmt.Fprintf(w, "\nruns per figure: %d%s; median [min, max]; ratio = median / ceiling\n\n", res.Options.Runs, map[bool]string{true: " (quick sizes: a smoke run)", false: ""}[res.Options.Quick])
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tfigure\tunit\tmedian\tmin\tmax\ttarget\tmet?\tceiling\tratio")
	prev := ""
	for _, f := range res.Figures {
		sc := f.Title
		if f.Scenario == prev {
			sc = ""
		}
		prev = f.Scenario
		med, lo, hi := "-", "-", "-"
		if len(f.Runs) > 0 {
			med, lo, hi = formatValue(f.Median, f.Unit), formatValue(f.Min, f.Unit), formatValue(f.Max, f.Unit)
		}
		met := ""
		if f.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*f.Met]
		}
		ceil, ratio := "", ""
		if f.Ceiling != nil {
			ceil = formatValue(*f.Ceiling, f.Unit)
			ratio = fmt.Sprintf("%.2f", *f.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sc, f.Name, f.Unit, med, lo, hi, f.Target, met, ceil, ratio)
	}
	_ = tw.Flush()
	first := true
	for _, f := range res.Figures {
		if len(f.Runs) == 0 && f.Missing != "" {
			if first {
				fmt.Fprintf(w, "\nnot measured:\n")
				first = false
			}
			fmt.Fprintf(w, "  %s / %s: %s\n", f.Title, f.Name, f.Missing)
		}
	}

	if len(res.CPU) > 0 {
		fmt.Fprintf(w, "\nCPU per item, µs (median of runs; nats-server and redis-server from /proc in 10 ms ticks, workers and producer from rusage;\nothers: cores used by everything else on the machine meanwhile, from /proc/stat — the benchmark shares the machine)\n\n")
		tw = tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
		fmt.Fprint(tw, "scenario\tphase\titems\twall µs/item")
		for _, p := range procOrder {
			fmt.Fprintf(tw, "\t%s", p)
		}
		fmt.Fprintln(tw, "\ttotal\tothers, cores (worst)\tnats msgs in/out\tredis script µs\tredis calls/item")
		prev = ""
		for _, r := range res.CPU {
			sc := r.Scenario
			if sc == prev {
				sc = ""
			}
			prev = r.Scenario
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f", sc, r.Variant, r.Items, r.WallUS)
			for _, p := range procOrder {
				if v, ok := r.CPUUS[p]; ok {
					fmt.Fprintf(tw, "\t%.1f", v)
				} else {
					fmt.Fprint(tw, "\t")
				}
			}
			fmt.Fprintf(tw, "\t%.1f\t%.2f (%.2f)\t%.1f/%.1f\t%.1f\t%s\n", r.TotalUS, r.OthersCores, r.OthersCoresMax, r.NATSIn, r.NATSOut, r.RedisScriptUS, topCalls(r.RedisCalls, 4))
		}
		_ = tw.Flush()
	}
	for _, e := range res.Errors {
		fmt.Fprintf(w, "\nERROR %s\n", e)
	}
	fmt.Fprintf(w, "\n%s\n", res.Servers.Note)
}

// formatValue prints a value with the precision its unit deserves.
func formatValue(v float64, unit string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	switch unit {
	case "items/s", "msgs/s", "ops/s", "pairs/s", "starts/s", "bytes":
		return thousands(v)
	case "ms":
		if v < 10 {
			return fmt.Sprintf("%.3f", v)
		}
		return fmt.Sprintf("%.1f", v)
	case "s":
		return fmt.Sprintf("%.3f", v)
	case "µs":
		return fmt.Sprintf("%.1f", v)
	case "MB":
		return fmt.Sprintf("%.1f", v)
	case "count", "items":
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// thousands formats an integer part with thin separators: 21,345.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// writeJSON writes the results atomically.
func writeJSON(path string, res *Results) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode results: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}
