package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Scenario 15: a trivial Python handler, persistent against a process per
// item (issue 26). The same work either way: read the item's JSON, answer
// its ID as JSON, with Python's json module, on the python3 of the
// machine (its real interpreter, not a pyenv shim, so that the shim's
// start-up does not pad the process-per-item figure). 2 workers × 4
// slots, 8 credentials of max_concurrent 64 (nobody waits for a key).
// The items (300 for a process per item, 12,000 persistent; 40 and 1,000
// with -quick) are enqueued first; each variant's clock runs from the first
// lease grant to the last result (as scenario 1's), so the workers' and
// the handlers' start-ups are inside it. CPU per item counts every
// process: the workers with their handler processes (which they reap, so
// their CPU is the workers'), nats-server, redis-server.
var persistentScenario = &scenario{
	name:  "persistent",
	title: "15. persistent handlers (a trivial Python handler)",
	figures: []figSpec{
		{id: "ratio", name: "persistent ÷ a process per item, items/s", unit: "×", goal: atLeast(10)},
		{id: "persistent_per_s", name: "persistent handler (exec persistent: true), 2 workers × 4 slots, items/s", unit: "items/s",
			goal: atLeast(2000)},
		{id: "per_item_per_s", name: "a python3 process per item (exec), 2 workers × 4 slots, items/s", unit: "items/s"},
		{id: "persistent_cpu", name: "persistent: CPU per item, every process", unit: "µs",
			note: "workers with their handlers, nats-server, redis-server; see the CPU table"},
		{id: "per_item_cpu", name: "a process per item: CPU per item, every process", unit: "µs"},
		{id: "persistent_starts", name: "persistent: handler processes started", unit: "count",
			note: "at most the 8 slots"},
	},
	run: runPersistent,
}

// The handlers: the same work, a loop over stdin lines or one item.
const (
	persistentPy = `import json, sys
with open(__file__ + ".starts", "a") as f:
    f.write("1\n")
out = sys.stdout
for line in sys.stdin:
    req = json.loads(line)
    out.write(json.dumps({"id": req["id"], "status": "ok", "output": {"id": req["item"]["id"]}}) + "\n")
    out.flush()
`
	perItemPy = `import json, sys
item = json.load(sys.stdin)
sys.stdout.write(json.dumps({"id": item["id"]}) + "\n")
`
)

func runPersistent(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	python, err := realPython(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.dir, "python")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for name, body := range map[string]string{"persistent.py": persistentPy, "per_item.py": perItemPy} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	variants := []struct {
		label, exec, items, cpu string
		n                       int
	}{
		{"a python3 process per item (exec)",
			fmt.Sprintf("{command: [%q, %q], timeout: 1m}", python, filepath.Join(dir, "per_item.py")),
			"per_item_per_s", "per_item_cpu", pick(r.quick, 300, 40)},
		{"persistent Python handler (exec persistent: true)",
			fmt.Sprintf("{command: [%q, %q], persistent: true, timeout: 1m}", python, filepath.Join(dir, "persistent.py")),
			"persistent_per_s", "persistent_cpu", pick(r.quick, 12000, 1000)},
	}
	starts := filepath.Join(dir, "persistent.py.starts") // a line per handler process
	_ = os.Remove(starts)
	for _, v := range variants {
		spec := fleetSpec{concurrency: 4, creds: keyCreds(8, 64), exec: v.exec}
		perS, cpuUS, err := runPythonFleet(ctx, e, spec, v.n, v.label, smp)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.label, err)
		}
		smp.values[v.items], smp.values[v.cpu] = perS, cpuUS
	}
	b, err := os.ReadFile(starts)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	smp.values["persistent_starts"] = float64(strings.Count(string(b), "\n"))
	smp.values["ratio"] = smp.values["persistent_per_s"] / smp.values["per_item_per_s"]
	return smp, nil
}

// runPythonFleet runs n exec items on 2 workers of spec and returns the
// items/s (first lease → last result) and the CPU µs per item of every
// process; the CPU use goes into smp under label.
func runPythonFleet(ctx context.Context, e *env, spec fleetSpec, n int, label string, smp *sample) (float64, float64, error) {
	f, err := e.newFleet(ctx, "py", spec)
	if err != nil {
		return 0, 0, err
	}
	defer f.close(ctx)
	if err := f.enqueueKind(ctx, "exec", n, func(id string) []byte { return fmt.Appendf(nil, `{"id":%q}`, id) }); err != nil {
		return 0, 0, err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return 0, 0, err
	}
	if err := f.startWorkers("w1", "w2"); err != nil {
		return 0, 0, err
	}
	if _, err := f.waitResults(ctx, n, 10*time.Minute, 20*time.Millisecond); err != nil {
		return 0, 0, err
	}
	use, rs, err := f.finish(ctx, m, label, n)
	if err != nil {
		return 0, 0, err
	}
	if err := spanWall(&use, rs, n); err != nil {
		return 0, 0, err
	}
	smp.cpu = append(smp.cpu, use)
	return float64(n) / use.Wall, use.total() / float64(n) * 1e6, nil
}

// realPython is the interpreter python3 runs (sys.executable): a pyenv
// or asdf shim starts a shell script before it.
func realPython(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("bench: the persistent scenario needs python3: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
