package ops

import (
	"context"
	"time"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// DrainTimeout bounds the drain a cancel does before Steer returns; the
// workers' sweeper records what is left, fleet-wide, within seconds.
const DrainTimeout = 10 * time.Second

// Drain is what a cancel's drain did.
type Drain struct {
	// Drained: items not started that the drain recorded as cancelled and
	// deleted from the stream.
	Drained int
	// Out: items out with workers (running, or waiting for a key): those
	// running finish and record their own outcome, the workers record the
	// others as cancelled.
	Out int
	// Err: the drain stopped before the end (DrainTimeout, or a server:
	// ErrUnavailable). The batch is cancelled all the same, no item of it
	// starts, and the workers record the items left within seconds.
	Err error
}

// drain records batch's items not started as cancelled and deletes their
// messages (queue.DrainCancelled), for at most DrainTimeout, whether or
// not ctx ends first: a cancel's drain is not tied to its caller staying.
func drain(ctx context.Context, q *queue.Queue, batch, by string) Drain {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DrainTimeout)
	defer cancel()
	drained, out, err := q.DrainCancelled(ctx, batch, by)
	d := Drain{Drained: drained, Out: out}
	if err != nil {
		d.Err = unavailable(err, "recording batch %s's items not started as cancelled", batch)
	}
	return d
}
