// Command demo shows keyfleet end to end on one machine (`make demo`): it
// brings up NATS with JetStream (embedded) and Redis (a local
// redis-server) on free loopback ports, unless KEYFLEET_NATS_URL /
// KEYFLEET_REDIS_URL point at running ones; starts a local stand-in for a
// paid API that enforces per-key limits and answers 429 with Retry-After;
// and runs three real workers and the producer over a pool of demo keys,
// with `producer dashboard` showing it all at http://127.0.0.1:8080/
// (-hold keeps everything up at the end until Ctrl-C).
// Everything it started is cleaned up at the end, also on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding the producer and worker binaries")
	items := flag.Int("items", 300, "how many items to run")
	workers := flag.Int("workers", 3, "how many worker processes to start")
	keep := flag.Bool("keep", false, "keep the demo's directory (config, logs) at the end")
	dash := flag.String("dashboard", "127.0.0.1:8080", "where `producer dashboard` serves during the demo (a free port if taken; empty: none)")
	hold := flag.Bool("hold", false, "at the end, keep everything running (the dashboard too) until Ctrl-C")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	abs, err := filepath.Abs(*bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	d := &demo{bin: abs, items: *items, workers: *workers, keep: *keep, dashboard: *dash, hold: *hold, out: os.Stdout}
	code := d.run(ctx)
	d.cleanup()
	if ctx.Err() != nil && !*hold {
		fmt.Fprintln(os.Stderr, "\ndemo interrupted: everything it started has been stopped")
		code = 130
	}
	os.Exit(code)
}
