package worker

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/version"
)

// announceMinGap spaces the announcements that activity triggers: a busy
// worker announces its figures about once a second, an idle one every
// worker.heartbeat.
const announceMinGap = time.Second

// activityCounter is a counter that signals on changed (without blocking)
// whenever it changes, so that the heartbeat announces the new figure.
type activityCounter struct {
	atomic.Int64
	changed chan struct{}
}

// Add adds d and signals the change.
func (c *activityCounter) Add(d int64) int64 {
	n := c.Int64.Add(d)
	if c.changed != nil {
		select {
		case c.changed <- struct{}{}:
		default: // a signal is already pending
		}
	}
	return n
}

// noteActivity asks the heartbeat to announce soon.
func (w *Worker) noteActivity() {
	select {
	case w.activity <- struct{}{}:
	default:
	}
}

// heartbeat announces the worker in the registry until ctx ends: every
// worker.heartbeat, and soon after its figures change (an item taken,
// done or failed; draining), at most once per announceMinGap. Announcing
// only on the period left `producer status` showing busy 0 and done 0 for
// workers in the middle of a batch.
func (w *Worker) heartbeat(ctx context.Context) {
	every := w.cfg.Worker.Heartbeat
	if every <= 0 {
		every = 5 * time.Second
	}
	gap := min(announceMinGap, every)
	host, _ := os.Hostname()
	period := time.NewTimer(every)
	defer period.Stop()
	for {
		w.announce(ctx, host, every)
		last := time.Now()
		period.Reset(every)
		select {
		case <-ctx.Done():
			return
		case <-period.C:
		case <-w.activity:
			if wait := gap - time.Since(last); wait > 0 && ctxsleep.Sleep(ctx, wait) != nil {
				return
			}
			// Changes during the wait are in this announcement.
			select {
			case <-w.activity:
			default:
			}
		}
	}
}

// announce puts the worker's current figures in the registry.
func (w *Worker) announce(ctx context.Context, host string, timeout time.Duration) {
	state := "running"
	if w.draining.Load() {
		state = "draining"
	}
	info := queue.WorkerInfo{
		ID: w.id, Host: host, PID: os.Getpid(), Version: version.Version, State: state,
		Concurrency: w.cfg.Worker.Concurrency, Busy: int(w.busy.Load()),
		Done: w.done.Load(), Failed: w.failed.Load(), Kinds: w.kinds(), Fallbacks: w.fallbacks.Counts(),
		StartedAt: w.started, LastSeen: time.Now(), Gateway: w.gatewayInfo(),
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := w.q.Announce(actx, info); err != nil && ctx.Err() == nil {
		w.log.Warn("heartbeat", zap.Error(err))
	}
}
