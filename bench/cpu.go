package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CPUUse is the CPU one measured phase cost, per process.
type CPUUse struct {
	Variant string
	Items   int
	Wall    float64 // seconds
	// Proc: CPU seconds by process: nats-server, redis-server, workers,
	// producer, kfbench (this program: in-process clients and ceilings).
	Proc map[string]float64
	// RedisCalls: Redis commands by name (INFO commandstats; commands run
	// by scripts count too).
	RedisCalls map[string]float64
	// RedisScriptUS: server time inside EVALSHA/EVAL, microseconds.
	RedisScriptUS float64
	// Others: CPU seconds the machine spent outside the processes above
	// (other users' processes, interrupts), from /proc/stat.
	Others float64
	// PhaseWall is the metered phase's wall time in seconds (it may be
	// longer than Wall, the figure's own clock).
	PhaseWall float64
	// NATSMsgs: messages into and out of nats-server (its /varz counters,
	// all clients and internal traffic).
	NATSIn, NATSOut float64
}

// CPURow is the median cost per item of one measured phase.
type CPURow struct {
	Scenario string `json:"scenario"`
	Variant  string `json:"variant"`
	Items    int    `json:"items"`
	Runs     int    `json:"runs"`
	// WallUS: wall-clock µs per item (1e6 / throughput). With 2 cores the
	// machine has 2×WallUS of CPU per item to spend.
	WallUS float64 `json:"wall_us_per_item"`
	// CPUUS: CPU µs per item by process, and their total.
	CPUUS   map[string]float64 `json:"cpu_us_per_item"`
	TotalUS float64            `json:"cpu_us_per_item_total"`
	// RedisCalls: Redis commands per item by command.
	RedisCalls map[string]float64 `json:"redis_calls_per_item,omitempty"`
	// RedisScriptUS: Redis server µs per item inside scripts.
	RedisScriptUS float64 `json:"redis_script_us_per_item"`
	// OthersCores: the average number of cores everything else on the
	// machine used meanwhile (the benchmark shares it): interference. The
	// median over runs, and the worst run.
	OthersCores    float64 `json:"others_cores"`
	OthersCoresMax float64 `json:"others_cores_max"`
	// NATSIn, NATSOut: messages into and out of nats-server per item.
	NATSIn  float64 `json:"nats_msgs_in_per_item"`
	NATSOut float64 `json:"nats_msgs_out_per_item"`
}

// procOrder is the column order of the CPU table.
var procOrder = []string{"nats-server", "redis-server", "workers", "producer", "kfbench"}

// meter measures the CPU of the servers and of this process over a phase.
type meter struct {
	e                 *env
	start             time.Time
	nats, redis, self float64
	busy              float64
	natsIn, natsOut   float64
	cmds              map[string]cmdStat
}

func (e *env) meter(ctx context.Context) (*meter, error) {
	m := &meter{e: e, start: time.Now(), self: selfCPU()}
	var err error
	if m.nats, err = cpuOf(e.natsProc); err != nil {
		return nil, err
	}
	if m.redis, err = cpuOf(e.redisProc); err != nil {
		return nil, err
	}
	if m.cmds, err = e.commandStats(ctx); err != nil {
		return nil, err
	}
	if m.natsIn, m.natsOut, err = e.natsCounters(ctx); err != nil {
		return nil, err
	}
	m.busy = machineBusy()
	return m, nil
}

// total is the CPU seconds of every process in Proc.
func (u CPUUse) total() float64 {
	t := 0.0
	for _, s := range u.Proc {
		t += s
	}
	return t
}

// done closes the phase. others adds the CPU of processes that lived only
// for the phase (workers, producer), in seconds.
func (m *meter) done(ctx context.Context, variant string, items int, wall time.Duration, others map[string]float64) (CPUUse, error) {
	u := CPUUse{Variant: variant, Items: items, Wall: wall.Seconds(), Proc: map[string]float64{}}
	u.Proc["kfbench"] = selfCPU() - m.self
	n, err := cpuOf(m.e.natsProc)
	if err != nil {
		return u, err
	}
	r, err := cpuOf(m.e.redisProc)
	if err != nil {
		return u, err
	}
	u.Proc["nats-server"], u.Proc["redis-server"] = n-m.nats, r-m.redis
	for k, v := range others {
		u.Proc[k] += v
	}
	u.Others = max(0, machineBusy()-m.busy-u.total())
	u.PhaseWall = time.Since(m.start).Seconds()
	in, out, err := m.e.natsCounters(ctx)
	if err != nil {
		return u, err
	}
	u.NATSIn, u.NATSOut = in-m.natsIn, out-m.natsOut
	cmds, err := m.e.commandStats(ctx)
	if err != nil {
		return u, err
	}
	u.RedisCalls = map[string]float64{}
	for name, c := range cmds {
		d := c.calls - m.cmds[name].calls
		if d > 0 && name != "info" {
			u.RedisCalls[name] = float64(d)
		}
		if name == "evalsha" || name == "eval" {
			u.RedisScriptUS += float64(c.usec - m.cmds[name].usec)
		}
	}
	return u, nil
}

type cmdStat struct{ calls, usec int64 }

// machineBusy is the CPU seconds all CPUs spent outside idle and iowait
// (steal excluded) since boot.
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	total := 0.0
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		v, _ := strconv.ParseFloat(f[i], 64)
		total += v
	}
	return total / 100 // USER_HZ
}

// natsCounters reads in_msgs and out_msgs of nats-server's /varz.
func (e *env) natsCounters(ctx context.Context) (in, out float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.natsMonitor+"/varz", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("bench: nats-server /varz: %w", err)
	}
	defer resp.Body.Close()
	var v struct {
		InMsgs  float64 `json:"in_msgs"`
		OutMsgs float64 `json:"out_msgs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, 0, fmt.Errorf("bench: nats-server /varz: %w", err)
	}
	return v.InMsgs, v.OutMsgs, nil
}

// commandStats reads INFO commandstats.
func (e *env) commandStats(ctx context.Context) (map[string]cmdStat, error) {
	info, err := e.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("bench: redis INFO commandstats: %w", err)
	}
	out := map[string]cmdStat{}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		var c cmdStat
		for kv := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				c.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				c.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[name] = c
	}
	return out, nil
}

// aggregateCPU turns the runs' CPU uses into medians per item, one row per
// variant, in first-seen order.
func aggregateCPU(scenario string, samples []*sample) []CPURow {
	var order []string
	uses := map[string][]CPUUse{}
	for _, s := range samples {
		for _, u := range s.cpu {
			if _, ok := uses[u.Variant]; !ok {
				order = append(order, u.Variant)
			}
			uses[u.Variant] = append(uses[u.Variant], u)
		}
	}
	var rows []CPURow
	for _, v := range order {
		us := uses[v]
		row := CPURow{Scenario: scenario, Variant: v, Items: us[0].Items, Runs: len(us),
			CPUUS: map[string]float64{}, RedisCalls: map[string]float64{}}
		per := func(f func(CPUUse) float64) float64 {
			vals := make([]float64, 0, len(us))
			for _, u := range us {
				if u.Items > 0 {
					vals = append(vals, f(u)/float64(u.Items))
				}
			}
			if len(vals) == 0 {
				return 0
			}
			return median(vals)
		}
		row.WallUS = per(func(u CPUUse) float64 { return u.Wall * 1e6 })
		procs := map[string]bool{}
		cmds := map[string]bool{}
		for _, u := range us {
			for p := range u.Proc {
				procs[p] = true
			}
			for c := range u.RedisCalls {
				cmds[c] = true
			}
		}
		for p := range procs {
			row.CPUUS[p] = per(func(u CPUUse) float64 { return u.Proc[p] * 1e6 })
		}
		row.TotalUS = per(func(u CPUUse) float64 { return u.total() * 1e6 })
		for c := range cmds {
			if v := per(func(u CPUUse) float64 { return u.RedisCalls[c] }); v >= 0.005 {
				row.RedisCalls[c] = v
			}
		}
		row.RedisScriptUS = per(func(u CPUUse) float64 { return u.RedisScriptUS })
		var oc []float64
		for _, u := range us {
			if u.PhaseWall > 0 {
				oc = append(oc, u.Others/u.PhaseWall)
			}
		}
		if len(oc) > 0 {
			row.OthersCores, row.OthersCoresMax = median(oc), slices.Max(oc)
		}
		row.NATSIn = per(func(u CPUUse) float64 { return u.NATSIn })
		row.NATSOut = per(func(u CPUUse) float64 { return u.NATSOut })
		rows = append(rows, row)
	}
	return rows
}

// topCalls formats the most frequent Redis commands per item.
func topCalls(m map[string]float64, n int) string {
	type kv struct {
		k string
		v float64
	}
	var s []kv
	for k, v := range m {
		s = append(s, kv{k, v})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].v > s[j].v || s[i].v == s[j].v && s[i].k < s[j].k })
	var parts []string
	for i, x := range s {
		if i == n {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(x.k), x.v))
	}
	return strings.Join(parts, ", ")
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs      int    `json:"cpus"`
	Model     string `json:"cpu_model"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
	GitCommit string `json:"git_commit"`
	// GitDirty lists the paths with uncommitted changes when the
	// benchmark ran (they may be in the binaries measured).
	GitDirty []string `json:"git_dirty,omitempty"`
}

func machine(ctx context.Context) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.GitCommit = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		for line := range strings.SplitSeq(strings.TrimRight(string(out), "\n"), "\n") {
			if len(line) > 3 {
				m.GitDirty = append(m.GitDirty, strings.TrimSpace(line[3:]))
			}
		}
		slices.Sort(m.GitDirty)
	}
	return m
}

func serverVersion(ctx context.Context, bin string, arg string) string {
	out, err := exec.CommandContext(ctx, bin, arg).Output()
	if err != nil {
		return bin
	}
	return strings.TrimSpace(string(out))
}

// redisCPU is redis-server's CPU time in seconds (INFO cpu:
// used_cpu_sys + used_cpu_user, the server's getrusage in µs; finer than
// /proc's 10 ms ticks, so short phases can be measured).
func (e *env) redisCPU(ctx context.Context) (float64, error) {
	info, err := e.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("bench: redis INFO cpu: %w", err)
	}
	total, seen := 0.0, 0
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: redis INFO cpu: %s %q: %w", k, v, err)
		}
		total += f
		seen++
	}
	if seen != 2 {
		return 0, fmt.Errorf("bench: redis INFO cpu: used_cpu_sys or used_cpu_user missing")
	}
	return total, nil
}

// evalStats is the calls and server µs of EVALSHA and EVAL together, from
// INFO commandstats.
func (e *env) evalStats(ctx context.Context) (cmdStat, error) {
	cs, err := e.commandStats(ctx)
	if err != nil {
		return cmdStat{}, err
	}
	return cmdStat{calls: cs["evalsha"].calls + cs["eval"].calls, usec: cs["evalsha"].usec + cs["eval"].usec}, nil
}
