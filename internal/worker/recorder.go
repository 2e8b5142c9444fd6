package worker

import (
	"context"
	"fmt"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// recorder stores what becomes of items (executor.Recorder): succeeded
// items through the group committer, the rest through the queue. Its
// deliveries are the worker's own (natsDelivery).
type recorder struct {
	q       *queue.Queue
	commits *queue.Committer
}

func (r *recorder) Commit(ctx context.Context, res kftype.Result, d executor.Delivery) error {
	nd, ok := d.(*natsDelivery)
	if !ok {
		return fmt.Errorf("%w: %T is not a NATS delivery", queue.ErrResultNotStored, d)
	}
	return r.commits.Commit(ctx, res, nd.msg)
}

func (r *recorder) PutResult(ctx context.Context, res kftype.Result) error {
	return r.q.PutResult(ctx, res)
}

func (r *recorder) PutDeadLetter(ctx context.Context, dl kftype.DeadLetter) error {
	return r.q.PutDeadLetter(ctx, dl)
}

func (r *recorder) CancelItem(ctx context.Context, d executor.Delivery, it kftype.Item, by string) (bool, error) {
	nd, ok := d.(*natsDelivery)
	if !ok {
		return false, fmt.Errorf("queue: cancel item: %T is not a NATS delivery", d)
	}
	return r.q.CancelItem(ctx, nd.msg, it, by)
}
