package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// Scenario 17: batches an operator can steer (issue 23; the model is
// docs/waiting-model.md). Each figure is a ratio taken in one run.
//
// One fleet, the issue's: 4 credentials of max_concurrent 1, 2 worker
// processes × 4 slots, sleep items of 20 ms (so the keys, not the CPU,
// bound it: about 200 items/s). On it, in order:
//
//   - Urgent alone: after 8 warm-up items, a 60-item batch of priority 1
//     on the idle fleet; its makespan runs from the start of its enqueue
//     to its last result's finished_at.
//   - Urgent behind a backlog: a 1,500-item batch of priority 3; once 200
//     of its items have results, the same 60 items in a new batch of
//     priority 1; its makespan the same way. The figure is the ratio of
//     the two makespans.
//   - Cancel: the backlog is then cancelled as `producer batch cancel`
//     does it (queue.SetBatchState, then queue.DrainCancelled); once every
//     item has a result, the last start of the batch (the latest leased_at
//     of its succeeded items: the pool's grant, which is the run's start)
//     less the moment the cancel returned. The same for the four batches
//     below, each cancelled at its window's end; the figure is the worst
//     of the run's five cancels (0 when nothing started after a return).
//   - Fair share: batch A (2,000 items), a second later batch B (2,000
//     items), same priority and weight; a window of 4 s starting 0.5 s
//     after B's record is written, while both hold a backlog (checked: each
//     still has items when it is cancelled). The figure is A's items
//     finished in the window ÷ B's.
//   - Weights: the same with A of weight 3 and B of weight 1.
//
// Then, on fresh fleets of scenario 1's shape (2 workers × 64 slots, 8
// credentials of max_concurrent 64), 100,000 items of 0 ms enqueued
// before the workers start, either in one batch or in 100 batches of
// 1,000; items/s from the first lease to the last result, as scenario 1
// counts them, the CPU per item of every process (less sensitive than
// items/s to the rest of the machine) and the workers' messages per
// fetch. The two alternate which goes first from one run to the next. The
// same with 20,000 items (100 batches of 200) shows what a batch costs
// whatever its size (its consumer made, filled, drained and deleted):
// those batches last a few milliseconds each, one after the other, rather
// than being active together.
var batchesScenario = &scenario{
	name:  "batches",
	title: "17. batches: priority, fair share, cancel",
	figures: []figSpec{
		{id: "urgent_ratio", name: "60-item batch of priority 1 behind a 1,500-item backlog: makespan ÷ alone", unit: "×", goal: atMost(1.5),
			note: "4 keys × 1, 2 workers × 4 slots, 20 ms items; enqueued once 200 items of the backlog are done"},
		{id: "urgent_behind", name: "… makespan behind the backlog (enqueue → last result)", unit: "s"},
		{id: "urgent_alone", name: "… makespan alone, on the idle fleet", unit: "s"},
		{id: "urgent_first", name: "… behind the backlog: enqueue → its first start", unit: "ms"},
		{id: "equal_ratio", name: "two equal batches, enqueued 1 s apart: A's items done ÷ B's (4 s window)", unit: "×", goal: within(0.9, 1.1)},
		{id: "weighted_ratio", name: "weights 3 : 1, enqueued 1 s apart: A's items done ÷ B's (4 s window)", unit: "×", goal: within(2.7, 3.3)},
		{id: "window_per_s", name: "… items/s of the fleet in those windows (4 keys × 1 of 20 ms: at most 200)", unit: "items/s"},
		{id: "many_ratio", name: "items/s with 100 active batches ÷ with one batch (100,000 items, 0 ms, 2 workers × 64)", unit: "×", goal: atLeast(0.9)},
		{id: "many_per_s", name: "… 100 batches of 1,000 items, items/s (first lease → last result)", unit: "items/s"},
		{id: "one_per_s", name: "… one batch of 100,000 items, items/s", unit: "items/s"},
		{id: "one_fetch", name: "… messages per pull request (fetch), one batch", unit: "msgs",
			note: "keyfleet_fetch_messages of the workers: a fetch asks one lane for as many as the free slots"},
		{id: "many_fetch", name: "… messages per pull request (fetch), 100 batches", unit: "msgs"},
		{id: "many_cpu_ratio", name: "… CPU per item, every process: 100 batches ÷ one batch", unit: "×",
			note: "less sensitive than items/s to what else runs on the machine; see the CPU table"},
		{id: "small_ratio", name: "the same with 20,000 items (100 batches of 200, each a few ms of work) ÷ one batch", unit: "×"},
		{id: "small_cpu_ratio", name: "… CPU per item, every process: 100 batches ÷ one batch", unit: "×"},
		{id: "batch_cpu", name: "… what a batch costs beyond its items: CPU of every process per batch", unit: "ms",
			note: "(CPU of 100 batches − CPU of one batch) ÷ 99, 20,000 items: its consumer made, filled, drained and deleted"},
		{id: "cancel_last_start", name: "cancel returned → the batch's last start, worst of 5 cancels", unit: "s", goal: never("<=", 1),
			note: "0 when nothing started after the cancel returned"},
		{id: "cancel_started_after", name: "… items started after a cancel returned, all 5 cancels", unit: "count"},
		{id: "cancel_took", name: "… the cancel itself (SetBatchState + DrainCancelled), slowest of 5", unit: "s"},
	},
	run: runBatches,
}

// batchesSizes are one run's sizes (the quick ones are a smoke run).
type batchesSizes struct {
	backlog, backlogDone, urgent int
	fair                         int           // items of each fair-share batch
	gap, lead, window            time.Duration // A → B; B → window; the window
	many, small, manyBatches     int           // items of the throughput phases; batches of their "many" variant
}

func batchesSizesFor(quick bool) batchesSizes {
	if quick {
		return batchesSizes{backlog: 400, backlogDone: 100, urgent: 60, fair: 600,
			gap: 500 * time.Millisecond, lead: 300 * time.Millisecond, window: 1500 * time.Millisecond,
			many: 4000, small: 2000, manyBatches: 100}
	}
	return batchesSizes{backlog: 1500, backlogDone: 200, urgent: 60, fair: 2000,
		gap: time.Second, lead: 500 * time.Millisecond, window: 4 * time.Second,
		many: 100000, small: 20000, manyBatches: 100}
}

// batchItemMS is the sleep of the key-bound fleet's items.
const batchItemMS = 20

func runBatches(ctx context.Context, e *env, r runInfo) (*sample, error) {
	sz := batchesSizesFor(r.quick)
	smp := newSample()
	if err := batchesSteering(ctx, e, sz, smp); err != nil {
		return nil, err
	}
	for _, total := range []int{sz.many, sz.small} {
		variants := []bool{false, true} // one batch, then 100
		if r.n%2 == 0 {
			variants = []bool{true, false}
		}
		cpu, perS := map[bool]float64{}, map[bool]float64{}
		for _, many := range variants {
			c, p, err := batchesThroughput(ctx, e, r, total, sz.manyBatches, many, total == sz.many, smp)
			if err != nil {
				return nil, err
			}
			cpu[many], perS[many] = c, p
		}
		if total == sz.many {
			smp.values["many_per_s"], smp.values["one_per_s"] = perS[true], perS[false]
			smp.values["many_ratio"] = perS[true] / perS[false]
			smp.values["many_cpu_ratio"] = cpu[true] / cpu[false]
			continue
		}
		smp.values["small_ratio"] = perS[true] / perS[false]
		smp.values["small_cpu_ratio"] = cpu[true] / cpu[false]
		smp.values["batch_cpu"] = (cpu[true] - cpu[false]) * float64(total) / float64(sz.manyBatches-1) * 1e3
	}
	return smp, nil
}

// cancelStat is what one cancel measured.
type cancelStat struct {
	took      time.Duration // SetBatchState + DrainCancelled
	lastStart time.Duration // last start after the return (<= 0: none after)
	after     int           // items started after the return
}

// batchesSteering runs the key-bound fleet's phases: urgent alone, urgent
// behind a backlog, the backlog's cancel, equal and weighted fair share.
func batchesSteering(ctx context.Context, e *env, sz batchesSizes, smp *sample) error {
	f, err := e.newFleet(ctx, "bat", fleetSpec{concurrency: 4, creds: keyCreds(4, 1)})
	if err != nil {
		return err
	}
	defer f.close(ctx)
	if err := f.startWorkers("w1", "w2"); err != nil {
		return err
	}
	if err := f.waitReady(ctx); err != nil {
		return err
	}
	// Warm-up: the workers' connections and scripts.
	if _, err := f.publishBatch(ctx, "warmup", 8, batchItemMS); err != nil {
		return err
	}
	if _, err := f.waitBatch(ctx, "warmup", 8, 30*time.Second); err != nil {
		return err
	}

	// The urgent batch alone.
	alone, _, err := f.urgentRun(ctx, "urgent-alone", sz.urgent)
	if err != nil {
		return err
	}

	// Behind a backlog.
	if _, err := f.publishBatch(ctx, "backlog", sz.backlog, batchItemMS, queue.WithPriority(3)); err != nil {
		return err
	}
	if _, err := f.waitBatch(ctx, "backlog", sz.backlogDone, 2*time.Minute); err != nil {
		return err
	}
	behind, first, err := f.urgentRun(ctx, "urgent-behind", sz.urgent)
	if err != nil {
		return err
	}
	smp.values["urgent_alone"] = alone.Seconds()
	smp.values["urgent_behind"] = behind.Seconds()
	smp.values["urgent_first"] = float64(first) / float64(time.Millisecond)
	smp.values["urgent_ratio"] = behind.Seconds() / alone.Seconds()

	var cancels []cancelStat
	cs, _, err := f.cancelAndCount(ctx, "backlog", sz.backlog)
	if err != nil {
		return err
	}
	cancels = append(cancels, cs)

	// Fair share: equal, then 3 : 1.
	var windowItems, windowSecs float64
	for _, c := range []struct {
		key    string
		wA, wB int
	}{{"equal_ratio", 1, 1}, {"weighted_ratio", 3, 1}} {
		ratio, done, cs, err := f.fairRun(ctx, sz, c.key, c.wA, c.wB)
		if err != nil {
			return err
		}
		if math.IsNaN(ratio) {
			smp.missing[c.key] = "batch B had nothing done in the window"
		} else {
			smp.values[c.key] = ratio
		}
		windowItems += float64(done)
		windowSecs += sz.window.Seconds()
		cancels = append(cancels, cs...)
	}
	smp.values["window_per_s"] = windowItems / windowSecs

	worst, slowest, after := time.Duration(0), time.Duration(0), 0
	for _, c := range cancels {
		worst = max(worst, c.lastStart)
		slowest = max(slowest, c.took)
		after += c.after
	}
	smp.values["cancel_last_start"] = worst.Seconds()
	smp.values["cancel_took"] = slowest.Seconds()
	smp.values["cancel_started_after"] = float64(after)
	_, err = f.stopWorkers(ctx)
	return err
}

// urgentRun enqueues n items in a new batch of priority 1 and waits for
// their results: its makespan (enqueue → last finished_at) and its first
// start (enqueue → earliest leased_at).
func (f *fleet) urgentRun(ctx context.Context, batch string, n int) (makespan, first time.Duration, err error) {
	start, err := f.publishBatch(ctx, batch, n, batchItemMS, queue.WithPriority(1))
	if err != nil {
		return 0, 0, err
	}
	rs, err := f.waitBatch(ctx, batch, n, 2*time.Minute)
	if err != nil {
		return 0, 0, err
	}
	if err := checkSucceeded(rs, n); err != nil {
		return 0, 0, fmt.Errorf("batch %s: %w", batch, err)
	}
	lease, last := span(rs)
	return last.Sub(start), lease.Sub(start), nil
}

// fairRun enqueues batch A (weight wA), a gap later batch B (weight wB),
// both of priority 3, counts the items of each finished in the window,
// then cancels both. It returns A's count ÷ B's (NaN when B did none), the
// items both did in the window, and the two cancels.
func (f *fleet) fairRun(ctx context.Context, sz batchesSizes, name string, wA, wB int) (float64, int, []cancelStat, error) {
	a, b := name+"-a", name+"-b"
	if _, err := f.publishBatch(ctx, a, sz.fair, batchItemMS, queue.WithWeight(wA)); err != nil {
		return 0, 0, nil, err
	}
	if err := ctxsleep.Sleep(ctx, sz.gap); err != nil {
		return 0, 0, nil, err
	}
	if _, err := f.publishBatch(ctx, b, sz.fair, batchItemMS, queue.WithWeight(wB)); err != nil {
		return 0, 0, nil, err
	}
	from := time.Now().Add(sz.lead)
	to := from.Add(sz.window)
	// A little past the window, so that what finished in it is stored.
	if err := ctxsleep.Sleep(ctx, time.Until(to)+100*time.Millisecond); err != nil {
		return 0, 0, nil, err
	}
	var cancels []cancelStat
	counts := map[string]int{}
	for _, batch := range []string{a, b} {
		cs, rs, err := f.cancelAndCount(ctx, batch, sz.fair)
		if err != nil {
			return 0, 0, nil, err
		}
		cancels = append(cancels, cs)
		done, cancelled := doneIn(rs, from, to)
		if cancelled == 0 {
			return 0, 0, nil, fmt.Errorf("bench: batch %s ran out of items before its window ended: the window does not measure a shared backlog", batch)
		}
		counts[batch] = done
	}
	if counts[b] == 0 {
		return math.NaN(), counts[a], cancels, nil
	}
	return float64(counts[a]) / float64(counts[b]), counts[a] + counts[b], cancels, nil
}

// doneIn counts the results that succeeded with finished_at in [from, to),
// and the cancelled ones.
func doneIn(rs []kftype.Result, from, to time.Time) (done, cancelled int) {
	for _, r := range rs {
		switch {
		case r.Outcome == kftype.OutcomeCancelled:
			cancelled++
		case r.Outcome == kftype.OutcomeSucceeded && !r.FinishedAt.Before(from) && r.FinishedAt.Before(to):
			done++
		}
	}
	return done, cancelled
}

// cancelAndCount cancels batch (n items) as `producer batch cancel` does,
// waits until every item has a result, and measures the starts after the
// cancel returned.
func (f *fleet) cancelAndCount(ctx context.Context, batch string, n int) (cancelStat, []kftype.Result, error) {
	id := f.batchID(batch)
	t0 := time.Now()
	if _, err := f.q.SetBatchState(ctx, id, kftype.ActionCancel, "kfbench"); err != nil {
		return cancelStat{}, nil, err
	}
	if _, _, err := f.q.DrainCancelled(ctx, id, "kfbench"); err != nil {
		return cancelStat{}, nil, err
	}
	returned := time.Now()
	rs, err := f.waitBatch(ctx, batch, n, time.Minute)
	if err != nil {
		return cancelStat{}, nil, err
	}
	cs := cancelStat{took: returned.Sub(t0)}
	cs.lastStart, cs.after = startsAfter(rs, returned)
	return cs, rs, nil
}

// startsAfter is the latest start (leased_at) of rs less t (0 when none
// is later) and how many started after t.
func startsAfter(rs []kftype.Result, t time.Time) (last time.Duration, n int) {
	for _, r := range rs {
		if r.LeasedAt.IsZero() || !r.LeasedAt.After(t) {
			continue
		}
		n++
		last = max(last, r.LeasedAt.Sub(t))
	}
	return last, n
}

// batchID is the ID of one of the run's batches.
func (f *fleet) batchID(name string) string { return f.batch + "-" + name }

// publishBatch publishes n sleep items of ms milliseconds in the run's
// batch name, confirmed, then writes the batch's record with opts (which
// registers its lane with the workers). It returns when it began.
func (f *fleet) publishBatch(ctx context.Context, name string, n int, ms float64, opts ...queue.BatchOption) (time.Time, error) {
	start := time.Now()
	id := f.batchID(name)
	pub, err := f.q.NewPublisher(0)
	if err != nil {
		return start, err
	}
	sleep := strconv.FormatFloat(ms, 'f', -1, 64)
	for i := range n {
		item := fmt.Sprintf("item-%06d", i)
		it := kftype.Item{ID: item, Batch: id, Kind: "sleep", Payload: fmt.Appendf(nil, `{"id":%q,"ms":%s}`, item, sleep)}
		if err := pub.Add(ctx, it); err != nil {
			return start, err
		}
	}
	rep, err := pub.Flush(ctx)
	if err != nil {
		return start, err
	}
	if rep.Published != n {
		return start, fmt.Errorf("bench: enqueued %d of %d items of batch %s (%d duplicates)", rep.Published, n, id, rep.Duplicates)
	}
	_, err = f.q.AddToBatch(ctx, id, "sleep", n, opts...)
	return start, err
}

// waitBatch follows the results of the run's batch name until n items
// have one, and returns them (the latest of each item).
func (f *fleet) waitBatch(ctx context.Context, name string, n int, within time.Duration) ([]kftype.Result, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	latest := map[string]kftype.Result{}
	err := f.q.WatchResults(wctx, f.batchID(name), func(r kftype.Result) (bool, error) {
		latest[r.Item] = r
		return len(latest) < n, nil
	})
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return nil, fmt.Errorf("bench: batch %s: %d of %d results after %s\n%s", name, len(latest), n, within, f.workerLogs())
		}
		return nil, err
	}
	out := make([]kftype.Result, 0, len(latest))
	for _, r := range latest {
		out = append(out, r)
	}
	return out, nil
}

// batchesThroughput measures items/s on scenario 1's fleet with total
// items in one batch or in manyBatches batches, and returns the CPU
// seconds per item of every process and the items/s. The main run (the
// larger total) also records the messages per fetch and, with -profile on
// the last run, saves CPU profiles of nats-server and the workers.
func batchesThroughput(ctx context.Context, e *env, r runInfo, total, manyBatches int, many, main bool, smp *sample) (cpuPerItem, perS float64, err error) {
	f, err := e.newFleet(ctx, "batp", throughputSpec())
	if err != nil {
		return 0, 0, err
	}
	defer f.close(ctx)
	batches, label, tag := 1, fmt.Sprintf("keyfleet: one batch of %d (scenario 17)", total), "one"
	if many {
		batches, label, tag = manyBatches, fmt.Sprintf("keyfleet: %d batches of %d (scenario 17)", manyBatches, total/manyBatches), "many"
	}
	per := total / batches
	for i := range batches {
		if _, err := f.publishBatch(ctx, fmt.Sprintf("t%03d", i), per, 0); err != nil {
			return 0, 0, err
		}
	}
	n := per * batches
	m, err := e.meter(ctx)
	if err != nil {
		return 0, 0, err
	}
	if err := f.startWorkers("w1", "w2"); err != nil {
		return 0, 0, err
	}
	if err := f.waitReady(ctx); err != nil {
		return 0, 0, err
	}
	profiled := f.profile(ctx, r.last() && main, n, "batches-"+tag+"-")
	if _, err := f.waitResults(ctx, n, 5*time.Minute, 10*time.Millisecond); err != nil {
		return 0, 0, err
	}
	if err := profiled(); err != nil {
		return 0, 0, err
	}
	fetches, err := f.workersMetrics(ctx, "keyfleet_fetch_messages_count", "keyfleet_fetch_messages_sum")
	if err != nil {
		return 0, 0, err
	}
	if fetches[0] > 0 && main {
		smp.values[tag+"_fetch"] = fetches[1] / fetches[0]
	}
	workersCPU, err := f.stopWorkers(ctx)
	if err != nil {
		return 0, 0, err
	}
	use, err := m.done(ctx, label, n, 0, map[string]float64{"workers": workersCPU})
	if err != nil {
		return 0, 0, err
	}
	var rs []kftype.Result
	if err := f.q.ReadResults(ctx, "", func(r kftype.Result) error {
		rs = append(rs, r)
		return nil
	}); err != nil {
		return 0, 0, err
	}
	if err := spanWall(&use, rs, n); err != nil {
		return 0, 0, err
	}
	smp.cpu = append(smp.cpu, use)
	return use.total() / float64(n), float64(n) / use.Wall, nil
}
