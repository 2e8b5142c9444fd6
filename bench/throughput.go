package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Scenario 1: end-to-end throughput.
//
// N sleep items of 0 ms are enqueued first (in process, confirmed); then 2
// worker processes start (64 slots each; 8 credentials of max_concurrent
// 64, so a credential is reserved and released per item but nobody
// waits). The figure's clock runs from the first lease grant (the earliest
// leased_at of the results, on Redis's clock) to the last result's
// finished_at: it covers pulling, leasing, running, releasing, storing the
// result and acknowledging every item, and excludes the workers' start-up
// (the second figure includes it: from the first worker's exec until the
// results stream held N results). The run is then repeated with each
// worker on one P (see throughputVariants).
var throughputScenario = &scenario{
	name:  "throughput",
	title: "1. end-to-end throughput",
	figures: []figSpec{
		{id: "items_per_s", name: "keyfleet: 2 workers × 64, items/s (first lease → last result)", unit: "items/s",
			goal: atLeast(20000), ceiling: "js_pull_ack"},
		{id: "items_per_s_wall", name: "keyfleet incl. worker start-up (exec → all results)", unit: "items/s", ceiling: "js_pull_ack"},
		{id: "items_per_s_cpu_bound", name: "keyfleet if CPU-bound on an idle machine: cores ÷ CPU-s/item (nats, redis, workers)", unit: "items/s",
			ceiling: "js_pull_ack_cpu_bound", note: "an estimate that does not depend on other processes; see the CPU table"},
		{id: "worker_allocs", name: "… worker heap allocations per item (both workers, ready → all results)", unit: "count",
			note: "go_memstats_mallocs_total from the workers' /metrics: a figure the machine's speed does not move"},
		{id: "worker_alloc_bytes", name: "… worker heap bytes allocated per item", unit: "bytes"},
		{id: "items_per_s_1p", name: "keyfleet, each worker on one P (GOMAXPROCS=1, as in a 1-CPU container), items/s", unit: "items/s",
			goal: atLeast(20000), ceiling: "js_pull_ack"},
		{id: "js_pull_ack", name: "ceiling: JetStream pull+ack, 2 consumers", unit: "msgs/s"},
		{id: "js_pull_ack_cpu_bound", name: "ceiling: JetStream pull+ack if CPU-bound: cores ÷ CPU-s/msg (nats, clients)", unit: "msgs/s"},
		{id: "js_pull_ack_result", name: "ceiling: JetStream pull+ack + async result publish", unit: "msgs/s", ceiling: "js_pull_ack"},
		{id: "js_worker_calls", name: "ceiling: JetStream, the worker's calls (committed result + ack, 2×64 in flight)", unit: "msgs/s", ceiling: "js_pull_ack"},
		{id: "redis_evalsha", name: "ceiling: raw EVALSHA (trivial script), 64 clients", unit: "ops/s"},
		{id: "pool_pairs", name: "pool acquire+release pairs, 64 goroutines (in process)", unit: "pairs/s",
			ceiling: "redis_evalsha", ceilingScale: 0.5, note: "ceiling: half the raw EVALSHA rate (a pair is 2 scripts)"},
	},
	run: runThroughput,
}

func runThroughput(ctx context.Context, e *env, r runInfo) (*sample, error) {
	n := pick(r.quick, 20000, 2000)
	smp := newSample()
	for _, v := range throughputVariants {
		if err := throughputKeyfleet(ctx, e, r, smp, n, v); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		mode jsMode
		key  string
	}{{jsPullAck, "js_pull_ack"}, {jsPullAckResult, "js_pull_ack_result"}, {jsWorkerCalls, "js_worker_calls"}} {
		if err := jsCeiling(ctx, e, smp, n, c.mode, c.key); err != nil {
			return nil, fmt.Errorf("%s: %w", jsModeNames[c.mode], err)
		}
	}
	d := pick(r.quick, 2*time.Second, 500*time.Millisecond)
	if err := redisCeiling(ctx, e, smp, d, "redis_evalsha"); err != nil {
		return nil, err
	}
	if err := poolCeiling(ctx, e, smp, d, "pool_pairs"); err != nil {
		return nil, err
	}
	return smp, nil
}

// throughputVariant is one way of running scenario 1's workers.
type throughputVariant struct {
	// cpuLabel names the run in the CPU table.
	cpuLabel string
	// workerEnv is added to the workers' environment.
	workerEnv []string
	// headline: the run the scenario's other figures (start-up,
	// CPU-bound rate, allocations, profiles) are taken from; every run
	// records its items/s as itemsFigure.
	headline    bool
	itemsFigure string
}

// throughputVariants: Go's default (a P per core in each worker), then
// one P per worker. With two workers, NATS and Redis on 2 cores, the
// default's idle Ps spin looking for work after every wake-up and take
// CPU from the other processes; GOMAXPROCS=1 is what each worker gets in
// a container limited to one CPU.
var throughputVariants = []throughputVariant{
	{cpuLabel: "keyfleet: 2 worker processes", headline: true, itemsFigure: "items_per_s"},
	{cpuLabel: "keyfleet: 2 worker processes, GOMAXPROCS=1", workerEnv: []string{"GOMAXPROCS=1"}, itemsFigure: "items_per_s_1p"},
}

func throughputKeyfleet(ctx context.Context, e *env, r runInfo, smp *sample, n int, v throughputVariant) error {
	spec := throughputSpec()
	spec.workerEnv = v.workerEnv
	f, err := e.newFleet(ctx, "tp", spec)
	if err != nil {
		return err
	}
	defer f.close(ctx)
	if err := f.enqueue(ctx, n, 0); err != nil {
		return err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := f.startWorkers("w1", "w2"); err != nil {
		return err
	}
	if err := f.waitReady(ctx); err != nil {
		return err
	}
	var allocs0 []float64
	if v.headline {
		if allocs0, err = f.workersMetrics(ctx, workerAllocMetrics...); err != nil {
			return err
		}
	}
	profiled := f.profile(ctx, r.last() && v.headline, n, "throughput-")
	end, err := f.waitResults(ctx, n, 5*time.Minute, 10*time.Millisecond)
	if err != nil {
		return err
	}
	var allocs1 []float64
	if v.headline {
		if allocs1, err = f.workersMetrics(ctx, workerAllocMetrics...); err != nil {
			return err
		}
	}
	if err := profiled(); err != nil {
		return err
	}
	use, rs, err := f.finish(ctx, m, v.cpuLabel, n)
	if err != nil {
		return err
	}
	if err := spanWall(&use, rs, n); err != nil {
		return err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values[v.itemsFigure] = float64(n) / use.Wall
	if v.headline {
		smp.values["items_per_s_wall"] = float64(n) / end.Sub(start).Seconds()
		smp.values["items_per_s_cpu_bound"] = cpuBound(use, n, "nats-server", "redis-server", "workers")
		smp.values["worker_allocs"] = (allocs1[0] - allocs0[0]) / float64(n)
		smp.values["worker_alloc_bytes"] = (allocs1[1] - allocs0[1]) / float64(n)
	}
	return nil
}

// workerAllocMetrics are the Go runtime's counts of heap allocations and
// allocated bytes, as every worker's /metrics has them.
var workerAllocMetrics = []string{"go_memstats_mallocs_total", "go_memstats_alloc_bytes_total"}

// workersMetrics sums each metric over the fleet's workers, one read of
// /metrics per worker.
func (f *fleet) workersMetrics(ctx context.Context, names ...string) ([]float64, error) {
	sums := make([]float64, len(names))
	for _, w := range f.workers {
		vs, err := w.metrics(ctx, names...)
		if err != nil {
			return nil, err
		}
		for i, v := range vs {
			sums[i] += v
		}
	}
	return sums, nil
}

// span is the earliest lease grant and the latest finish of the results.
func span(rs []kftype.Result) (first, last time.Time) {
	for i, r := range rs {
		if i == 0 || r.LeasedAt.Before(first) {
			first = r.LeasedAt
		}
		if r.FinishedAt.After(last) {
			last = r.FinishedAt
		}
	}
	return first, last
}

// fetchProfile saves a CPU profile of secs seconds from a pprof listener.
func fetchProfile(ctx context.Context, addr string, secs int, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: profile %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: profile %s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
