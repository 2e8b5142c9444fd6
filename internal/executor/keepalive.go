package executor

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// keepMessageAlive sends confirmed in-progress acks every ackWait/3 until
// x.keep is stopped. If none is confirmed for an ack wait (minus a margin),
// the server may already have given the message to another worker: the
// item's context is cancelled with ErrMessageLost.
func (e *Executor) keepMessageAlive(x *item) {
	ackWait := e.policy.AckWait
	x.msg = keepTask{
		every: max(ackWait/3, 50*time.Millisecond),
		limit: ackWait - keepMargin(ackWait),
		job:   messageJob{x},
	}
	x.keep = e.keeper.add(&x.msg)
}

// messageJob keeps a delivery's message alive.
type messageJob struct{ x *item }

func (j messageJob) keep(ctx context.Context) error { return j.x.d.InProgress(ctx) }
func (messageJob) fatal(error) bool                 { return false }
func (j messageJob) lost() {
	j.x.e.metrics.MessagesLost.Inc()
	j.x.cancel(ErrMessageLost)
}

// leaseJob renews a run's lease.
type leaseJob struct {
	task  keepTask
	e     *Executor
	lease *creds.Lease
	log   *zap.Logger
	// cancel cancels the run's job.
	cancel context.CancelCauseFunc
	last   atomic.Pointer[error] // the last renewal's error
}

// renewLease renews the lease every TTL/3 until the handle is stopped. A
// lease reported lost, or not renewed for a TTL (minus a margin), cancels
// the job with ErrLeaseLost.
func (e *Executor) renewLease(l *creds.Lease, log *zap.Logger, cancel context.CancelCauseFunc) keepHandle {
	ttl := e.policy.LeaseTTL
	j := &leaseJob{e: e, lease: l, log: log, cancel: cancel}
	j.task = keepTask{
		every: max(ttl/3, 10*time.Millisecond),
		limit: ttl - keepMargin(ttl),
		since: l.RequestedAt, // the lease counts from its grant, not from now
		job:   j,
	}
	return e.keeper.add(&j.task)
}

func (j *leaseJob) keep(ctx context.Context) error {
	_, err := j.e.pool.Renew(ctx, j.lease)
	if err != nil {
		j.e.metrics.LeaseRenewFails.Inc()
		j.last.Store(&err)
	}
	return err
}

func (*leaseJob) fatal(err error) bool { return errors.Is(err, creds.ErrLeaseLost) }

func (j *leaseJob) lost() {
	var last error
	if p := j.last.Load(); p != nil {
		last = *p
	}
	j.log.Warn("credential lease lost: cancelling the job", zap.Error(last))
	j.e.metrics.LeasesLost.Inc()
	j.cancel(ErrLeaseLost)
}

// keepMargin is how long before the server's expiry (a lease's TTL, a
// message's ack wait) the worker declares a keep-alive lost and cancels
// the job: a quarter of it, at most a second. The time a busy machine
// takes to schedule the worker and kill the job's processes does not
// shrink with the TTL: a tenth of a 2 s lease, 200 ms, is within the
// scheduling delays of a loaded 2-core machine.
func keepMargin(d time.Duration) time.Duration { return min(time.Second, d/4) }
