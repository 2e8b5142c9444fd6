package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Scenario 8: the pool at fleet scale, in process (pkg/creds), one Redis.
// P pool handles, each with its own Redis client as P processes would
// have, × 4 slots; each slot loops acquire → sleep (the job) → release.
// Credentials of max_concurrent 1.
//
// Key utilization is busy key-time ÷ (keys × wall) over a steady-state
// window: each slot's sleeps are clipped to the window and summed, so the
// start-up and the tail do not count. For each (keys, P) the handles are
// opened once and the job length changes between windows (5, 25, 100 ms),
// each window after a warm-up.
//
// With 64 keys only P ≥ 32 runs (128 slots or more): below that there are
// fewer slots than keys (P=1: 4 slots, P=8: 32), so utilization is capped
// by slots ÷ keys and says nothing about the pool; the ratio's baseline is
// then P=32. With 64 keys and 5 ms jobs the keys could start 12,800 items/s:
// that load is bound by Redis and the handles' CPU on 2 cores, not by the
// queue (see scenario 10 for one shard's ceiling).
//
// Redis CPU per item: INFO cpu (used_cpu_sys + used_cpu_user) over the
// window ÷ items finished in it.
var scaleScenario = &scenario{
	name:    "scale",
	title:   "8. pool at fleet scale",
	figures: scaleFigures(),
	run:     runScale,
}

const scaleSlots = 4

// scaleCase is one number of keys and the handle counts tried with it.
type scaleCase struct {
	keys int
	ps   []int
	jobs []time.Duration
}

var (
	scaleJobsAll = []time.Duration{5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond}
	scaleFull    = []scaleCase{
		{4, []int{1, 8, 32, 96, 256}, scaleJobsAll},
		{64, []int{32, 96, 256}, scaleJobsAll},
	}
	scaleQuick = []scaleCase{
		{4, []int{1, 32, 256}, []time.Duration{5 * time.Millisecond, 25 * time.Millisecond}},
		{64, []int{32, 256}, []time.Duration{25 * time.Millisecond}},
	}
)

// The 1,000-handle simulation: P=1000 × 1 slot, 64 keys, 25 ms jobs.
const (
	scaleBigP    = 1000
	scaleBigKeys = 64
	scaleBigJob  = 25 * time.Millisecond
)

func scaleUtilID(keys int, job time.Duration, p int) string {
	return fmt.Sprintf("u_k%d_j%d_p%d", keys, job.Milliseconds(), p)
}

func scaleRatioID(keys int, job time.Duration) string {
	return fmt.Sprintf("ratio_k%d_j%d", keys, job.Milliseconds())
}

func scaleCPUID(keys int, job time.Duration) string {
	return fmt.Sprintf("rcpu_k%d_j%d", keys, job.Milliseconds())
}

func scaleFigures() []figSpec {
	var fs []figSpec
	for _, c := range scaleFull {
		for _, j := range c.jobs {
			var g *goal
			if j >= 25*time.Millisecond {
				g = atLeast(0.97)
			}
			for _, p := range c.ps {
				fs = append(fs, figSpec{id: scaleUtilID(c.keys, j, p),
					name: fmt.Sprintf("utilization: %d keys, %d ms jobs, P=%d handles × %d slots", c.keys, j.Milliseconds(), p, scaleSlots),
					unit: "fraction", goal: g})
			}
			base, top := c.ps[0], c.ps[len(c.ps)-1]
			note := "per run: the P=256 window's utilization ÷ the P=1 window's"
			if base != 1 {
				note = fmt.Sprintf("per run: P=%d ÷ P=%d (with %d keys, fewer handles have fewer slots than keys)", top, base, c.keys)
			}
			fs = append(fs, figSpec{id: scaleRatioID(c.keys, j),
				name: fmt.Sprintf("… P=%d ÷ P=%d (%d keys, %d ms)", top, base, c.keys, j.Milliseconds()),
				unit: "fraction", goal: g, note: note})
			fs = append(fs, figSpec{id: scaleCPUID(c.keys, j),
				name: fmt.Sprintf("Redis CPU per item at P=%d (%d keys, %d ms)", top, c.keys, j.Milliseconds()),
				unit: "µs", note: "INFO cpu (used_cpu_sys + used_cpu_user) over the window ÷ items finished in it"})
		}
	}
	fs = append(fs,
		figSpec{id: "u_1000", name: fmt.Sprintf("utilization: %d handles × 1 slot, %d keys, %d ms jobs", scaleBigP, scaleBigKeys, scaleBigJob.Milliseconds()),
			unit: "fraction", goal: atLeast(0.97), note: "1,000 processes of one slot each, simulated: 1,000 pool handles, each with its own Redis client and subscription"},
		figSpec{id: "rcpu_1000", name: fmt.Sprintf("Redis CPU per item, %d handles × 1 slot", scaleBigP), unit: "µs"},
		figSpec{id: "evalsha_1000", name: "… script calls (EVALSHA) per item", unit: "calls",
			note: "an item needs 2: the release that grants the key to the next waiter, and that waiter's claim; the rest are the handles' keep-alive steps (each handle with a waiter steps every WaiterTTL/4) and steps woken by timer messages"},
		figSpec{id: "publish_1000", name: "… PUBLISH per item", unit: "calls", note: "an item needs 1: the grant message to the waiter's handle; the rest are timer messages"},
	)
	return fs
}

func runScale(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	warm := pick(r.quick, time.Second, 300*time.Millisecond)
	window := pick(r.quick, 2*time.Second, 700*time.Millisecond)
	for _, c := range pick(r.quick, scaleFull, scaleQuick) {
		top := c.ps[len(c.ps)-1]
		utils := map[int][]float64{} // by P, per job length
		for _, p := range c.ps {
			var variants []string
			if p == top {
				for _, j := range c.jobs {
					variants = append(variants, fmt.Sprintf("P=%d × %d slots, %d keys, %d ms jobs (in process)", p, scaleSlots, c.keys, j.Milliseconds()))
				}
			}
			ws, err := scaleRun(ctx, e, smp, c.keys, p, scaleSlots, c.jobs, warm, window, variants)
			if err != nil {
				return nil, fmt.Errorf("%d keys, P=%d: %w", c.keys, p, err)
			}
			for i, j := range c.jobs {
				smp.values[scaleUtilID(c.keys, j, p)] = ws[i].util
				utils[p] = append(utils[p], ws[i].util)
				if p == top {
					smp.values[scaleCPUID(c.keys, j)] = ws[i].redisUS
				}
			}
		}
		for i, j := range c.jobs {
			if b := utils[c.ps[0]][i]; b > 0 {
				smp.values[scaleRatioID(c.keys, j)] = utils[top][i] / b
			}
		}
	}
	ws, err := scaleRun(ctx, e, smp, scaleBigKeys, scaleBigP, 1, []time.Duration{scaleBigJob}, warm, window,
		[]string{fmt.Sprintf("P=%d × 1 slot, %d keys, %d ms jobs (in process)", scaleBigP, scaleBigKeys, scaleBigJob.Milliseconds())})
	if err != nil {
		return nil, fmt.Errorf("%d handles × 1 slot: %w", scaleBigP, err)
	}
	smp.values["u_1000"], smp.values["rcpu_1000"] = ws[0].util, ws[0].redisUS
	if u := smp.cpu[len(smp.cpu)-1]; u.Items > 0 {
		smp.values["evalsha_1000"] = (u.RedisCalls["evalsha"] + u.RedisCalls["eval"]) / float64(u.Items)
		smp.values["publish_1000"] = u.RedisCalls["publish"] / float64(u.Items)
	}
	return smp, nil
}

// scaleWindow is what one steady-state window measured.
type scaleWindow struct {
	util     float64       // busy key-time ÷ (keys × wall)
	items    int           // jobs finished in the window
	redisUS  float64       // Redis CPU µs per item
	redisCPU float64       // Redis CPU seconds in the window
	selfCPU  float64       // this process's CPU seconds in the window (the handles)
	wall     time.Duration // the window
}

// interval is one job on some key, in ns since the run's base time.
type interval struct{ start, end int64 }

// scaleRun opens p handles × slots loops on a fresh pool of `keys`
// credentials (max_concurrent 1) and measures one window per job length,
// each after a warm-up (the first one twice as long: the handles start
// and subscribe). variants, when given, name a CPU table row per window.
func scaleRun(ctx context.Context, e *env, smp *sample, keys, p, slots int, jobs []time.Duration, warm, window time.Duration, variants []string) ([]scaleWindow, error) {
	defer e.flushAfter(ctx)
	hs, err := e.openHandles(e.uniq("scale"), p)
	if err != nil {
		return nil, err
	}
	defer hs.close()
	if err := registerKeys(ctx, hs.pools[0], keys, 1); err != nil {
		return nil, err
	}
	var job atomic.Int64
	job.Store(int64(jobs[0]))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	base := time.Now()
	logs := make([][]interval, p*slots)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for pi, pool := range hs.pools {
		for s := range slots {
			idx := pi*slots + s
			wg.Add(1)
			go func() {
				defer wg.Done()
				logs[idx] = scaleSlot(runCtx, pool, fmt.Sprintf("p%d/%d", pi, s), &job, base, &firstErr)
			}()
		}
	}
	type win struct {
		from, to time.Duration
		cpu      float64
		self     float64
		use      *CPUUse
	}
	wins := make([]win, len(jobs))
	for i, j := range jobs {
		job.Store(int64(j))
		w := warm
		if i == 0 {
			w *= 2
		}
		if err := ctxsleep.Sleep(ctx, w); err != nil {
			return nil, err
		}
		var m *meter
		if len(variants) > i {
			if m, err = e.meter(ctx); err != nil {
				return nil, err
			}
		}
		c0, err := e.redisCPU(ctx)
		if err != nil {
			return nil, err
		}
		self0 := selfCPU()
		wins[i].from = time.Since(base)
		if err := ctxsleep.Sleep(ctx, window); err != nil {
			return nil, err
		}
		wins[i].to = time.Since(base)
		wins[i].self = selfCPU() - self0
		c1, err := e.redisCPU(ctx)
		if err != nil {
			return nil, err
		}
		wins[i].cpu = c1 - c0
		if m != nil {
			use, err := m.done(ctx, variants[i], 0, wins[i].to-wins[i].from, nil)
			if err != nil {
				return nil, err
			}
			wins[i].use = &use
		}
		if err, _ := firstErr.Load().(error); err != nil {
			return nil, err
		}
	}
	stop()
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	out := make([]scaleWindow, len(jobs))
	for i, w := range wins {
		busy, items := clipBusy(logs, int64(w.from), int64(w.to))
		wall := w.to - w.from
		out[i].util = float64(busy) / (float64(keys) * float64(wall))
		out[i].items, out[i].wall = items, wall
		out[i].redisCPU, out[i].selfCPU = w.cpu, w.self
		if items > 0 {
			out[i].redisUS = w.cpu * 1e6 / float64(items)
		}
		if w.use != nil {
			w.use.Items = items
			smp.cpu = append(smp.cpu, *w.use)
		}
	}
	return out, nil
}

// scaleSlot is one slot's loop until ctx ends: acquire, sleep the current
// job length, release (asynchronously, as the worker does). It returns its jobs' intervals.
func scaleSlot(ctx context.Context, p *creds.Pool, owner string, job *atomic.Int64, base time.Time, firstErr *atomic.Value) []interval {
	var log []interval
	for ctx.Err() == nil {
		l, err := p.Acquire(ctx, owner)
		if err != nil {
			if ctx.Err() == nil {
				firstErr.CompareAndSwap(nil, fmt.Errorf("bench: acquire (%s): %w", owner, err))
			}
			return log
		}
		d := time.Duration(job.Load())
		t0 := time.Since(base)
		time.Sleep(d)
		t1 := time.Since(base)
		log = append(log, interval{int64(t0), int64(t1)})
		// As the worker ends a lease: without waiting, so that the
		// release and the next acquire share a step.
		if err := p.SettleAsync(l, creds.Outcome{}, func(err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, fmt.Errorf("bench: release (%s): %w", owner, err))
			}
		}); err != nil {
			firstErr.CompareAndSwap(nil, fmt.Errorf("bench: release (%s): %w", owner, err))
			return log
		}
	}
	return log
}

// clipBusy sums the parts of the intervals inside [from, to) and counts
// the intervals that ended inside it.
func clipBusy(logs [][]interval, from, to int64) (busy int64, ended int) {
	for _, log := range logs {
		for _, iv := range log {
			s, e := max(iv.start, from), min(iv.end, to)
			if e > s {
				busy += e - s
			}
			if iv.end >= from && iv.end < to {
				ended++
			}
		}
	}
	return busy, ended
}
