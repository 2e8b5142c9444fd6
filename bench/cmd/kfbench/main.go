// Command kfbench is keyfleet's benchmark program (`make bench`); see
// package bench (github.com/keyfleet/keyfleet/bench, its own module).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/keyfleet/keyfleet/bench"
)

func main() {
	var o bench.Options
	var only, cpuProfile string
	flag.IntVar(&o.Runs, "runs", 3, "runs of each scenario; each figure is their median")
	flag.BoolVar(&o.Quick, "quick", false, "small sizes: a smoke run, not a measurement")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run (default all): "+strings.Join(bench.Scenarios(), ","))
	flag.StringVar(&o.JSONFile, "json", "bench-results.json", "write the figures as JSON to this file (empty: none)")
	flag.StringVar(&o.BinDir, "bin", "", "directory holding worker, producer and nats-server built without -race (default: build them)")
	flag.StringVar(&o.ProfileDir, "profile", "", "save CPU profiles of the workers and nats-server during the last throughput run here")
	flag.BoolVar(&o.KeepTemp, "keep", false, "keep the temporary directory (server and worker logs)")
	flag.StringVar(&o.PeersDir, "peers", bench.PeersDirDefault, "directory of the peer harnesses (BullMQ, asynq, the seed) and their run.sh, for scenario peers")
	flag.DurationVar(&o.QuietWait, "quiet-wait", time.Minute, "before each run, wait up to this long for other processes to leave the CPUs (0: never wait)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this program (the in-process pool handles of scenarios such as scale, acquirecost and shard) to this file")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kfbench: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if only != "" {
		o.Only = strings.Split(only, ",")
	}
	o.Out, o.Progress = os.Stdout, os.Stderr
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kfbench: -cpuprofile: %v\n", err)
			os.Exit(1)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := bench.Run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "kfbench: %v\n", err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
