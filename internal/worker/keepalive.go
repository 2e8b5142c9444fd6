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
func (w *Worker) keepMessageAlive(msg jetstream.Msg, lost func(error)) (stop func()) {
	ackWait := w.q.Config().AckWait
	every := max(ackWait/3, 50*time.Millisecond)
	margin := min(time.Second, ackWait/10)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		lastOK := time.Now()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), every)
			err := queue.InProgress(ctx, w.nc, msg)
			cancel()
			if err == nil {
				lastOK = time.Now()
				continue
			}
			if time.Since(lastOK) >= ackWait-margin {
				w.metrics.MessagesLost.Inc()
				lost(errMessageLost)
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// renewLease renews the lease every TTL/3 until stop is called. A lease
// reported lost, or not renewed for a TTL (minus a margin), calls lost with
// errLeaseLost.
func (w *Worker) renewLease(l *creds.Lease, log *zap.Logger, lost func(error)) (stop func()) {
	ttl := w.pool.LeaseTTL()
	every := max(ttl/3, 10*time.Millisecond)
	margin := min(time.Second, ttl/10)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		lastOK := time.Now()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), every)
			_, err := w.pool.Renew(ctx, l)
			cancel()
			if err == nil {
				lastOK = time.Now()
				continue
			}
			w.metrics.LeaseRenewFails.Inc()
			if errors.Is(err, creds.ErrLeaseLost) || time.Since(lastOK) >= ttl-margin {
				log.Warn("credential lease lost: cancelling the job", zap.Error(err))
				w.metrics.LeasesLost.Inc()
				lost(errLeaseLost)
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
