package bench

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
)

// Scenario 6: shutdown. Worker A (4 slots) takes 4 sleep items of 5000 ms
// (shutdown_grace 1s, ack_wait 30s); once all 4 run, worker B starts
// (4 slots) and A gets SIGTERM. A lets them run for its grace, cancels
// them and hands them back; B runs them again. The figure is, per item,
// the time from the SIGTERM to its next run's start on B (finished_at −
// duration of B's result: a start measured after B's lease and run
// counter, so the figure errs high), the worst of the 4 items; and the
// same minus the configured grace: the hand-back itself.
var shutdownScenario = &scenario{
	name:  "shutdown",
	title: "6. shutdown",
	figures: []figSpec{
		{id: "to_rerun", name: "SIGTERM → running on the other worker (worst of 4 items; includes the 1 s grace)", unit: "s",
			goal: atMost(1), ceiling: "ack_wait", note: "includes shutdown_grace (1 s) by construction"},
		{id: "handback", name: "… minus the grace: cancel, nak, redelivery, lease, start (worst of 4)", unit: "s"},
		{id: "exit", name: "SIGTERM → worker A exited (code 0)", unit: "s"},
		{id: "ack_wait", name: "ceiling: what a crash costs (ack_wait)", unit: "s"},
	},
	run: runShutdown,
}

func runShutdown(ctx context.Context, e *env, r runInfo) (*sample, error) {
	const k = 4
	grace := time.Second
	ms := pick(r.quick, 5000.0, 2500.0)
	smp := newSample()
	f, err := e.newFleet(ctx, "shut", fleetSpec{
		creds:       []credSpec{{id: "k0", max: 4}, {id: "k1", max: 4}},
		concurrency: k, grace: grace, ackWait: 30 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	a, _, err := f.startReady(ctx, "A")
	if err != nil {
		return nil, err
	}
	if err := f.enqueue(ctx, k, ms); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := a.metric(ctx, "keyfleet_credential_in_flight")
		if err == nil && v >= k {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: worker A runs %v of %d items after 30s\n%s", v, k, f.workerLogs())
		}
		if err := ctxsleep.Sleep(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if _, _, err := f.startReady(ctx, "B"); err != nil {
		return nil, err
	}
	sigterm := time.Now()
	if err := a.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	if err := a.Wait(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("worker A after SIGTERM: %w\n%s", err, a.logTail())
	}
	exited := time.Since(sigterm)
	if _, err := f.waitResults(ctx, k, 60*time.Second, 20*time.Millisecond); err != nil {
		return nil, err
	}
	rs, err := f.results(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkSucceeded(rs, k); err != nil {
		return nil, err
	}
	var d []float64
	for _, r := range rs {
		if r.Worker != "B" || r.Attempts != 2 {
			return nil, fmt.Errorf("bench: item %s: last run on %s, attempt %d; want B, 2", r.Item, r.Worker, r.Attempts)
		}
		start := r.FinishedAt.Add(-time.Duration(r.Duration * float64(time.Second)))
		d = append(d, start.Sub(sigterm).Seconds())
	}
	worst := slices.Max(d)
	smp.values["to_rerun"] = worst
	smp.values["handback"] = worst - grace.Seconds()
	smp.values["exit"] = exited.Seconds()
	smp.values["ack_wait"] = 30
	if _, err := f.stopWorkers(ctx); err != nil {
		return nil, err
	}
	return smp, nil
}
