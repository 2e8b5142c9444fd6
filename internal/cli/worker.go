package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/configcheck"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/jobguard"
	"github.com/keyfleet/keyfleet/internal/version"
	"github.com/keyfleet/keyfleet/internal/worker"
)

// WorkerMain runs the worker command line and returns the exit code.
func WorkerMain(args []string, stdout, stderr io.Writer) int {
	return run(newWorkerCmd(stdout, stderr), args, stderr)
}

func newWorkerCmd(stdout, stderr io.Writer) *cobra.Command {
	var g globalFlags
	var concurrency int
	var id string
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run jobs from the keyfleet queue with credentials from the shared pool",
		Long: `worker pulls items from NATS JetStream, reserves a credential from the
Redis pool for each, runs the job with the credential's secret and
acknowledges it. Run as many workers as you like, on any machines.

The first SIGINT/SIGTERM stops pulling, lets running items finish within
worker.shutdown_grace, hands the rest back for immediate redelivery and exits
0. A second signal kills the running jobs and exits at once (leases expire,
messages come back after the ack wait). However the worker ends, SIGKILL
included, its exec job processes die with it.

Before it asks any server it checks its configuration as
` + "`producer config check`" + ` does (every problem at once, each with its line):
secrets present, job commands that can run, and the rest.

` + configHelp + `

` + exitCodes(exitDoc{exitcode.OK, "clean shutdown"},
			exitDoc{exitcode.Usage, "bad configuration or flags (every problem listed, with its line)"},
			exitDoc{exitcode.Unreachable, "NATS or Redis unreachable at start"},
			exitDoc{exitcode.Internal, "interrupted by a second signal, or an internal error"}),
		Example: `  # one worker with the settings in kf.yaml, 8 jobs at a time
  worker --config kf.yaml --concurrency 8

  # name it, and point it at other servers
  KEY_A=sk-... worker --config kf.yaml --id worker-eu-1 --nats-url nats://nats:4222 --redis-url redis://redis:6379/0`,
		Version: version.Version,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := g.readUnchecked(func(l *config.Loaded) {
				if cmd.Flags().Changed("concurrency") {
					l.Config.Worker.Concurrency = concurrency
					l.Note("worker.concurrency", "--concurrency")
				}
			})
			if err != nil {
				return err
			}
			// What `producer config check` checks (the configuration's
			// values, secrets, job commands), a worker checks before it
			// asks a server: every problem at once, each with its line.
			if err := configcheck.Check(l, os.Getenv); err != nil {
				return exitcode.With(exitcode.Usage, err)
			}
			cfg := l.Config
			log, err := newLogger(cfg, stderr)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			return runWorker(cfg, id, log)
		},
	}
	g.register(cmd)
	cmd.Flags().IntVar(&concurrency, "concurrency", 0, "jobs run at once by this process (overrides worker.concurrency)")
	cmd.Flags().StringVar(&id, "id", "", "worker name in logs, leases and status (default <hostname>-<pid>)")
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cmd
}

func runWorker(cfg *config.Config, id string, log *zap.Logger) error {
	// A job never outlives its worker. Every way out of here ends the job
	// processes: a normal return (the runs end, and Close makes the guard
	// kill whatever is still registered), a panic (the recover below), the
	// second signal (before os.Exit); a SIGKILL or a crash is the guard's
	// and the jobs' parent-death signal's.
	guard, err := startJobGuard(cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := guard.Close(); err != nil {
			log.Error("job guard", zap.Error(err))
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			guard.KillAll()
			panic(r)
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		s := <-sigs
		log.Info("signal received: shutting down gracefully (send it again to exit at once)", zap.String("signal", s.String()))
		cancel()
		s = <-sigs
		log.Warn("second signal: exiting now; leases expire by themselves and messages come back after the ack wait",
			zap.String("signal", s.String()))
		guard.KillAll()
		_ = guard.Close() // so that it is done before its pipe ends with us
		_ = log.Sync()
		os.Exit(exitcode.Internal)
	}()

	w, err := worker.New(worker.Options{Config: cfg, ID: id, Logger: log, JobGuard: guard})
	if err != nil {
		return err
	}
	// The health server is up before the connections, so that /healthz
	// answers and /readyz says what start-up waits for (a NATS cluster
	// still forming, for one).
	if cfg.Worker.Listen != "" {
		serveCtx, stopServe := context.WithCancel(context.Background())
		defer stopServe()
		addr, err := w.Serve(serveCtx, cfg.Worker.Listen)
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		if cfg.Worker.PProf {
			log.Warn("serving /metrics /healthz /readyz and /debug/pprof/ (worker.pprof): whoever reaches this address can profile the worker",
				zap.String("addr", addr))
		} else {
			log.Info("serving /metrics /healthz /readyz", zap.String("addr", addr))
		}
	}
	if err := w.Start(ctx); err != nil {
		if ctx.Err() != nil {
			// A signal while starting: nothing runs yet, nothing to hand back.
			log.Info("stopped while starting", zap.NamedError("while", err))
			return nil
		}
		return err
	}
	if err := w.Run(ctx); err != nil {
		return exitcode.With(exitcode.Internal, fmt.Errorf("worker: %w", err))
	}
	return nil
}

// startJobGuard starts the job guard (see jobguard) when the worker runs
// processes: the exec kind is configured. Nil otherwise.
func startJobGuard(cfg *config.Config, log *zap.Logger) (*jobguard.Guard, error) {
	if cfg.Jobs.Exec == nil {
		return nil, nil
	}
	g, err := jobguard.New(jobguard.Options{OnError: func(err error) { log.Error("job guard", zap.Error(err)) }})
	if err != nil {
		return nil, exitcode.With(exitcode.Internal, err)
	}
	return g, nil
}
