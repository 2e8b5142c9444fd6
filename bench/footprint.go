package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Scenario 7: footprint. A worker joins an existing fleet (its streams and
// consumer exist; it still creates-or-updates them, registers 8
// credentials and connects to both servers, as every worker does): the
// time from its exec to the first 200 of /readyz (polled every 2 ms), then
// its VmRSS after 2 s idle (1 s with -quick). Configuration as in the
// throughput scenario (64 slots, 8 credentials, a listener).
//
// The ceilings are floors of the binary itself: `worker --version` from
// exec to exit, and the VmRSS of a worker still connecting (its NATS
// server accepts the connection and never answers): the runtime, the
// binary, the configuration and the job handlers, before any client.
var footprintScenario = &scenario{
	name:  "footprint",
	title: "7. footprint",
	figures: []figSpec{
		{id: "startup", name: "worker start-up: exec → /readyz 200", unit: "ms", goal: atMost(300), ceiling: "version_ms"},
		{id: "rss", name: "idle worker VmRSS", unit: "MB", goal: atMost(30), ceiling: "floor_rss"},
		{id: "hwm", name: "idle worker VmHWM (peak RSS so far)", unit: "MB"},
		{id: "version_ms", name: "ceiling: `worker --version`, exec → exit", unit: "ms"},
		{id: "floor_rss", name: "ceiling: VmRSS of a worker still connecting to NATS", unit: "MB"},
	},
	run: runFootprint,
}

func runFootprint(ctx context.Context, e *env, r runInfo) (*sample, error) {
	idle := pick(r.quick, 2*time.Second, time.Second)
	smp := newSample()
	f, err := e.newFleet(ctx, "foot", throughputSpec())
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	w, ready, err := f.startReady(ctx, "w1")
	if err != nil {
		return nil, err
	}
	smp.values["startup"] = float64(ready.Sub(w.Started())) / float64(time.Millisecond)
	if err := ctxsleep.Sleep(ctx, idle); err != nil {
		return nil, err
	}
	rss, err := statusKB(w.Pid(), "VmRSS")
	if err != nil {
		return nil, err
	}
	hwm, err := statusKB(w.Pid(), "VmHWM")
	if err != nil {
		return nil, err
	}
	smp.values["rss"], smp.values["hwm"] = rss/1024, hwm/1024
	if _, err := f.stopWorkers(ctx); err != nil {
		return nil, err
	}

	v, err := e.start(f.tag+"-version", e.workerBin, []string{"--version"}, nil)
	if err != nil {
		return nil, err
	}
	if err := v.Wait(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("worker --version: %w", err)
	}
	smp.values["version_ms"] = float64(time.Since(v.Started())) / float64(time.Millisecond)
	floor, err := connectingRSS(ctx, e, f)
	if err != nil {
		return nil, err
	}
	smp.values["floor_rss"] = floor
	return smp, nil
}

// connectingRSS starts a worker whose NATS server is a listener that
// accepts and stays silent, and reads its VmRSS while it waits.
func connectingRSS(ctx context.Context, e *env, f *fleet) (float64, error) {
	silent, err := launch.StartSilent()
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	defer silent.Close()
	path, err := f.writeConfig("silent", 0)
	if err != nil {
		return 0, err
	}
	cfg, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	cfg = []byte(strings.Replace(string(cfg), e.natsURL, "nats://"+silent.Addr(), 1))
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	p, err := e.start(f.tag+"-silent", e.workerBin, []string{"--config", path, "--id", "silent"}, f.workerEnviron())
	if err != nil {
		return 0, err
	}
	defer p.Kill()
	if err := ctxsleep.Sleep(ctx, 500*time.Millisecond); err != nil {
		return 0, err
	}
	if p.Exited() {
		return 0, fmt.Errorf("bench: the silent-server worker exited early: %v\n%s", p.Err(), p.logTail())
	}
	kb, err := statusKB(p.Pid(), "VmRSS")
	return kb / 1024, err
}
