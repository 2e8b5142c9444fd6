package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/executor"
)

// handle runs one message through the executor, from its delivery to its
// settlement, and counts what it came to. pullCtx ends when the worker
// stops taking work; runCtx ends when the shutdown grace is over.
func (w *Worker) handle(pullCtx, runCtx context.Context, msg jetstream.Msg) {
	w.count(w.exec.Execute(pullCtx, runCtx, &natsDelivery{msg: msg, nc: w.nc}))
}

// count records a delivery's outcome in the worker's figures (status,
// heartbeat) and metrics.
func (w *Worker) count(o executor.Outcome) {
	switch o.Fate {
	case executor.Succeeded:
		w.done.Add(1)
		w.metrics.Items.WithLabelValues(o.Kind, "succeeded").Inc()
		w.metrics.Attempts.WithLabelValues(o.Kind, "succeeded").Observe(float64(o.Attempt))
	case executor.DeadLettered:
		w.failed.Add(1)
		w.metrics.DeadLetters.WithLabelValues(o.Kind, o.Reason).Inc()
		w.metrics.Items.WithLabelValues(o.Kind, "failed").Inc()
		w.metrics.Attempts.WithLabelValues(o.Kind, "failed").Observe(float64(o.Attempt))
	case executor.Retried:
		w.metrics.Items.WithLabelValues(o.Kind, "retried").Inc()
	case executor.Interrupted:
		w.metrics.Items.WithLabelValues(o.Kind, "interrupted").Inc()
	}
}

// host is what the executor tells the worker (executor.Host).
type host struct{ w *Worker }

func (h host) RedisUp(ok bool)                    { h.w.redisOK.Store(ok) }
func (h host) Register(ctx context.Context) error { return h.w.register(ctx) }

// newExecutor builds the item executor from the worker's configuration
// and connections (Start, once the queue and the pool are set up).
func (w *Worker) newExecutor() (*executor.Executor, error) {
	kinds := make(map[string]executor.Kind, len(w.handlers))
	for name, h := range w.handlers {
		kinds[name] = executor.Kind{Handler: h, Keys: w.keysFor(name), KeyCount: w.kindKeyCount(name),
			Provider: w.cfg.Jobs.KindProvider(name) != "", Timeout: w.cfg.Jobs.KindTimeout(name),
			Endpoint: w.cfg.Jobs.KindEndpoint(name), Fallback: w.fallbackOf(name)}
	}
	qcfg := w.q.Config()
	var ledger executor.Ledger
	var binding executor.Budgets
	if w.ledger != nil {
		ledger, binding = w.ledger, budgets{w}
	}
	return executor.New(executor.Config{
		ID: w.id, Kinds: kinds, KindNames: w.kinds(),
		Secrets: w.secrets, URLs: w.credURLs, Scrub: w.scrub,
		Policy:   executor.PolicyFrom(w.cfg, qcfg, w.pool.LeaseTTL()),
		Pool:     w.pool,
		Recorder: &recorder{q: w.q, commits: w.commits},
		// The counters use the plain client: they are written rarely
		// (never on an item's first successful run) and must end by
		// their deadline.
		Runs:    &runLog{rdb: w.rdb, prefix: "keyfleet:runs:" + qcfg.Stream + ":", ttl: runsTTL},
		Batches: w.batches, Waits: w.waits, Host: host{w},
		Ledger: ledger, Budgets: binding, Moves: w.fallbacks,
		Metrics: w.metrics, Logger: w.log,
	})
}

// runsTTL is how long an item's run counters outlive its last event.
const runsTTL = 7 * 24 * time.Hour
