package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// ErrResultNotStored and ErrAckNotConfirmed say which half of a Commit
// failed: the result (then nothing was acknowledged) or the
// acknowledgement (the result is stored).
var (
	ErrResultNotStored = errors.New("queue: result not stored")
	ErrAckNotConfirmed = errors.New("queue: acknowledgement not confirmed")
)

// Committer stores the results of succeeded items and then acknowledges
// their messages, many items at a time: while one batch is on its way,
// the items finished meanwhile gather into the next (a group commit).
// A batch publishes its results asynchronously and waits for the server to
// confirm each one; only then are the acknowledgements of the stored ones
// sent, all together, and confirmed by one round trip (a flush: the server
// has read them). Against a stored result and a confirmed acknowledgement
// per item, one request and reply each, a batch of n costs the server n
// stores, n plain acknowledgements and one ping.
//
// The guarantee is the per-item one: no message is acknowledged before
// its result is stored. A server that dies after reading an
// acknowledgement but before applying it redelivers that item, as it does
// one whose applied acknowledgement it had not yet written to disk; the
// rerun stores the same result again.
type Committer struct {
	q       *Queue
	opts    CommitterOptions
	reqs    chan *commitReq
	stop    chan struct{}
	stopOne sync.Once
	stopped chan struct{}
}

// CommitterOptions tune a Committer.
type CommitterOptions struct {
	// Observe, if set, is called with the size of every batch.
	Observe func(items int)
}

type commitReq struct {
	subject string
	data    []byte
	item    string
	msg     jetstream.Msg
	done    chan error
}

// maxCommitBatch bounds the items of one batch (the client's async
// publish window is 4,000).
const maxCommitBatch = 512

// NewCommitter starts a Committer; Close ends it. Each batch has
// RequestTimeout to be confirmed.
func (q *Queue) NewCommitter(o CommitterOptions) *Committer {
	c := &Committer{
		q:       q,
		opts:    o,
		reqs:    make(chan *commitReq), // unbuffered: taken means answered
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go c.run()
	return c
}

// Commit stores r, then acknowledges msg, and returns once both are
// confirmed. Its error wraps ErrResultNotStored (nothing was acknowledged)
// or ErrAckNotConfirmed (the result is stored; the acknowledgement may or
// may not have been applied).
func (c *Committer) Commit(ctx context.Context, r kftype.Result, msg jetstream.Msg) error {
	data, err := fitResult(r, c.q.recordLimit())
	if err != nil {
		return fmt.Errorf("%w: encode: %w", ErrResultNotStored, err)
	}
	if msg.Reply() == "" {
		return fmt.Errorf("%w: message of %q has no reply subject", ErrResultNotStored, r.Item)
	}
	req := &commitReq{subject: c.q.ResultSubject(r.Batch, r.Item), data: data, item: r.Item, msg: msg, done: make(chan error, 1)}
	select {
	case c.reqs <- req:
	case <-c.stop:
		return fmt.Errorf("%w: the committer is closed", ErrResultNotStored)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrResultNotStored, ctx.Err())
	}
	// A request taken is answered within the batch timeout.
	return <-req.done
}

// Close ends the Committer after the batch on its way; a Commit not yet
// taken fails with ErrResultNotStored. It may be called more than once,
// from any goroutine.
func (c *Committer) Close() {
	c.stopOne.Do(func() { close(c.stop) })
	<-c.stopped
}

func (c *Committer) run() {
	defer close(c.stopped)
	batch := make([]*commitReq, 0, maxCommitBatch)
	for {
		select {
		case <-c.stop:
			return
		case r := <-c.reqs:
			batch = append(batch[:0], r)
		}
	more:
		for len(batch) < maxCommitBatch {
			select {
			case r := <-c.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		if c.opts.Observe != nil {
			c.opts.Observe(len(batch))
		}
		c.commit(batch)
	}
}

// commit stores the batch's results, acknowledges the messages of those
// stored, and answers every request.
func (c *Committer) commit(batch []*commitReq) {
	timeout := c.q.cfg.RequestTimeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, len(batch))
	futures := make([]jetstream.PubAckFuture, len(batch))
	for i, r := range batch {
		f, err := c.q.js.PublishAsync(r.subject, r.data)
		if err != nil {
			errs[i] = fmt.Errorf("%w: %q: %w", ErrResultNotStored, r.item, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("%w: %q: %w", ErrResultNotStored, batch[i].item, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("%w: %q: no confirmation within %s", ErrResultNotStored, batch[i].item, timeout)
		}
	}
	acked := false
	for i, r := range batch {
		if errs[i] != nil {
			continue
		}
		if err := c.q.nc.Publish(r.msg.Reply(), ackBody); err != nil {
			errs[i] = fmt.Errorf("%w: %q: %w", ErrAckNotConfirmed, r.item, err)
			continue
		}
		acked = true
	}
	if acked {
		if err := c.q.nc.FlushWithContext(ctx); err != nil {
			for i := range batch {
				if errs[i] == nil {
					errs[i] = fmt.Errorf("%w: %q: %w", ErrAckNotConfirmed, batch[i].item, err)
				}
			}
		}
	}
	for i, r := range batch {
		r.done <- errs[i]
	}
}
