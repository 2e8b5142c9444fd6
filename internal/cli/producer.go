package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"golang.org/x/term"

	"github.com/keyfleet/keyfleet/internal/batchlanes"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/connect"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/termsafe"
	"github.com/keyfleet/keyfleet/internal/version"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// ProducerMain runs the producer command line and returns the exit code.
func ProducerMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// go-redis logs its dial failures on its own; the producer reports
	// the error once, naming the server.
	redis.SetLogger(quietRedisLog{})
	return run(newProducerCmd(stdin, stdout, stderr), args, stderr)
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// Timeouts of the producer: it is an interactive tool, so an unreachable
// server is reported within seconds.
const (
	connectTimeout = 3 * time.Second  // NATS connect, Redis ping
	setupTimeout   = 10 * time.Second // one attempt at creating or opening the streams
	callTimeout    = 15 * time.Second // one admin or status call
)

// exitCodesHelp lists every exit code of the producer's commands.
var exitCodesHelp = exitCodes(exitOK,
	exitDoc{exitcode.Failed, "items failed or were cancelled (enqueue --wait, results), or a question not confirmed"},
	exitDoc{exitcode.Usage, "usage, configuration or input error (nothing was changed), or a configuration config check refuses"},
	exitDoc{exitcode.Unreachable, "NATS or Redis unreachable, or a publish not confirmed"},
	exitDoc{exitcode.Interrupted, "interrupted (Ctrl-C) while waiting; the batch goes on"}) + `
Each command's --help lists the codes it can return.`

// producer is the state shared by the producer's commands.
type producer struct {
	g      globalFlags
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func newProducerCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	p := &producer{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "producer",
		Short: "Enqueue work for the keyfleet workers and administer the fleet",
		Long: `producer is keyfleet's operator tool: it enqueues JSON Lines items on the
NATS JetStream work queue (and can wait for their outcomes), shows the state
of the queue, the workers and the credential pool, changes credentials for
the running fleet, lists, pauses, resumes and cancels batches, changes a
tenant's budget for the running fleet, finds one
item, exports results, replays dead letters and checks a configuration
without servers; dashboard serves all of it as a live web page.

Every command and subcommand takes --config FILE.
` + configHelp + `

--json prints one JSON value on every command that reports something (an
object, or an array for a list); results writes JSON Lines. Errors go to
standard error. Commands that change the whole fleet at once (dlq replay
of every batch, batch cancel, creds remove) ask first on a terminal;
--yes skips the question.

` + exitCodesHelp,
		Example: `  # check the configuration (./keyfleet.yaml here) without any server
  producer config check

  # enqueue a file and wait for every item's outcome
  producer enqueue --wait items.jsonl

  # what is going on
  producer status

  # the batches; hold one back, or stop one for good
  producer batch list
  producer batch pause items-3f2a9c1b
  producer batch cancel items-3f2a9c1b

  # where is one item, and why did it fail?
  producer item show items-3f2a9c1b item-17

  # take a key out of use, then export a batch's results
  producer creds disable key-b --reason "billing issue"
  producer results --batch items-3f2a9c1b -o results.jsonl

  # watch it all live at http://127.0.0.1:8080/
  producer dashboard --config kf.yaml`,
		Version:       version.Version,
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	p.g.register(root)
	root.AddCommand(p.enqueueCmd(), p.statusCmd(), p.batchCmd(), p.tenantCmd(), p.credsCmd(), p.resultsCmd(), p.dlqCmd(), p.itemCmd(),
		p.configCmd(), p.dashboardCmd())
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root
}

// setup loads the configuration and builds the logger.
func (p *producer) setup(edit func(*config.Loaded)) (*config.Config, *zap.Logger, error) {
	cfg, err := p.g.load(edit)
	if err != nil {
		return nil, nil, err
	}
	log, err := newLogger(cfg, p.stderr)
	if err != nil {
		return nil, nil, err
	}
	return cfg, log.Named("producer"), nil
}

// connectNATS connects with the producer's short timeout.
func connectNATS(cfg *config.Config, log *zap.Logger) (*nats.Conn, error) {
	nc := cfg.NATS
	if nc.ConnectTimeout <= 0 || nc.ConnectTimeout > connectTimeout {
		nc.ConnectTimeout = connectTimeout
	}
	return connect.NATS(nc, "keyfleet-producer", log, connect.NATSHooks{})
}

// openQueue connects to NATS and opens the queue; close with the returned
// func. Errors have exit code 3. The queue registers the lanes of every
// batch record it writes in the lane schedule (withLanes).
func openQueue(ctx context.Context, cfg *config.Config, log *zap.Logger) (*queue.Queue, func(), error) {
	nc, err := connectNATS(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	// While JetStream is not ready (a cluster still forming or electing
	// leaders) try again for nats.startup_timeout, saying why.
	startup := queue.Startup{
		Timeout: cfg.NATS.StartupTimeout,
		Attempt: setupTimeout,
		Waiting: func(err error, next time.Duration) {
			log.Warn("JetStream not ready yet: trying again", zap.Error(err), zap.Duration("next_in", next))
		},
	}
	q, err := startup.Attach(ctx, nc, queue.ConfigFrom(cfg))
	if err != nil {
		nc.Close()
		return nil, nil, exitcode.With(exitcode.Unreachable,
			fmt.Errorf("NATS at %s (is JetStream enabled?): %w", connect.Redact(cfg.NATS.URL), err))
	}
	closeLanes, err := withLanes(q, cfg, log)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return q, func() { closeLanes(); closeNATS(nc) }, nil
}

// withLanes gives q a lane writer (batchlanes): every batch record the
// command writes (an enqueue, a pause, resume or cancel, a budget change,
// a replay) registers the batch's lanes in the lane schedule, which the
// workers read. Its Redis client connects on its first use, so a command
// that writes no record never connects; one that cannot reach Redis says
// so and goes on (the record is written; the workers' lane repair
// registers its lanes within seconds).
func withLanes(q *queue.Queue, cfg *config.Config, log *zap.Logger) (func(), error) {
	rdb, err := connect.RedisClient(cfg.Redis, 2, connectTimeout)
	if err != nil {
		return nil, err
	}
	w, err := batchlanes.New(lanes.New(rdb, q.Config().Stream), cfg, batchlanes.OnError(func(batch string, err error) {
		log.Warn("the batch's record is written, but Redis did not take its lanes: the workers register them within seconds",
			zap.String("batch", termsafe.String(batch)), zap.String("error", termsafe.String(err.Error())))
	}))
	if err != nil {
		_ = rdb.Close()
		return nil, exitcode.With(exitcode.Usage, err)
	}
	q.SetLaneWriter(w)
	return func() { _ = rdb.Close() }, nil
}

// closeNATS flushes and closes, bounded.
func closeNATS(nc *nats.Conn) {
	_ = nc.FlushTimeout(2 * time.Second)
	nc.Close()
}

// connectRedis connects to the configuration's Redis; no answer within
// connectTimeout has exit code 3.
func connectRedis(ctx context.Context, cfg *config.Config) (redis.UniversalClient, error) {
	rdb, err := connect.Redis(ctx, cfg.Redis, 2, connectTimeout)
	if errors.Is(err, context.DeadlineExceeded) {
		err = exitcode.With(exitcode.Unreachable, fmt.Errorf("%w (no answer within %s)", err, connectTimeout))
	}
	return rdb, err
}

// openPool connects to Redis and returns a handle on the configured pool;
// close with the returned func. Errors have exit code 3.
func openPool(ctx context.Context, cfg *config.Config) (*creds.Pool, func(), error) {
	rdb, err := connectRedis(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	pool, err := creds.New(rdb, cfg.Pool.Name)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, exitcode.With(exitcode.Usage, err)
	}
	return pool, func() { _ = pool.Close(); _ = rdb.Close() }, nil
}

// openLedger opens the spend ledger of the configuration's pool (its
// Redis).
func openLedger(ctx context.Context, cfg *config.Config) (*spend.Ledger, func(), error) {
	rdb, err := connectRedis(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return spend.NewLedger(rdb, cfg.Pool.Name), func() { _ = rdb.Close() }, nil
}

// openQueueAndPool opens the queue, then the pool (openQueue, openPool);
// the func it returns closes the pool, then the queue.
func openQueueAndPool(ctx context.Context, cfg *config.Config, log *zap.Logger) (*queue.Queue, *creds.Pool, func(), error) {
	q, closeQ, err := openQueue(ctx, cfg, log)
	if err != nil {
		return nil, nil, nil, err
	}
	pool, closePool, err := openPool(ctx, cfg)
	if err != nil {
		closeQ()
		return nil, nil, nil, err
	}
	return q, pool, func() { closePool(); closeQ() }, nil
}

// withOpened loads the configuration and builds the logger (setup), opens
// what open opens (openQueue, openPool), runs fn with it and closes it.
func withOpened[T any](p *producer, ctx context.Context, open func(context.Context, *config.Config, *zap.Logger) (T, func(), error),
	fn func(context.Context, T) error) error {
	cfg, log, err := p.setup(nil)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	v, closeV, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeV()
	return fn(ctx, v)
}

// unreachable marks an error of a call to a server that was reachable a
// moment ago (a timeout, a lost connection) with exit code 3.
func unreachable(what string, err error) error {
	if err == nil {
		return nil
	}
	return exitcode.With(exitcode.Unreachable, fmt.Errorf("%s: %w", what, err))
}

// isTerminal reports whether f, a standard input, output or error, is a
// terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// usageErr is an error of the command line (exit code 2).
func usageErr(format string, args ...any) error {
	return exitcode.With(exitcode.Usage, fmt.Errorf(format, args...))
}
