package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// keepMessageAlive sends confirmed in-progress acks every ackWait/3 until
// stop is called. If none is confirmed for an ack wait (minus a margin),
// the server may already have given the message to another worker: lost is
// called with errMessageLost.
func (w *Worker) keepMessageAlive(msg jetstream.Msg, lost func(error)) keepHandle {
	ackWait := w.q.Config().AckWait
	return w.keeper.add(&keepTask{
		every: max(ackWait/3, 50*time.Millisecond),
		limit: ackWait - keepMargin(ackWait),
		do:    func(ctx context.Context) error { return queue.InProgress(ctx, w.nc, msg) },
		lost: func() {
			w.metrics.MessagesLost.Inc()
			lost(errMessageLost)
		},
	})
}

// renewLease renews the lease every TTL/3 until stop is called. A lease
// reported lost, or not renewed for a TTL (minus a margin), calls lost with
// errLeaseLost.
func (w *Worker) renewLease(l *creds.Lease, log *zap.Logger, lost func(error)) keepHandle {
	ttl := w.pool.LeaseTTL()
	var last error
	return w.keeper.add(&keepTask{
		every: max(ttl/3, 10*time.Millisecond),
		limit: ttl - keepMargin(ttl),
		since: l.RequestedAt, // the lease counts from its grant, not from now
		do: func(ctx context.Context) error {
			_, err := w.pool.Renew(ctx, l)
			if err != nil {
				w.metrics.LeaseRenewFails.Inc()
				last = err
			}
			return err
		},
		fatal: func(err error) bool { return errors.Is(err, creds.ErrLeaseLost) },
		lost: func() {
			log.Warn("credential lease lost: cancelling the job", zap.Error(last))
			w.metrics.LeasesLost.Inc()
			lost(errLeaseLost)
		},
	})
}

// keepMargin is how long before the server's expiry (a lease's TTL, a
// message's ack wait) the worker declares a keep-alive lost and cancels
// the job: a quarter of it, at most a second. The time a busy machine
// takes to schedule the worker and kill the job's processes does not
// shrink with the TTL: a tenth of a 2 s lease, 200 ms, is within the
// scheduling delays of a loaded 2-core machine.
func keepMargin(d time.Duration) time.Duration { return min(time.Second, d/4) }
