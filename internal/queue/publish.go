package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// PublishReport counts what the server confirmed.
type PublishReport struct {
	// Published: stored as new messages.
	Published int
	// Duplicates: dropped by the server as already enqueued (same message
	// ID inside the duplicate window).
	Duplicates int
	// Unconfirmed: sent but without a confirmation (the server may or may
	// not have stored them; publishing again is safe).
	Unconfirmed int
}

// Publisher publishes items asynchronously with a bounded window of
// unconfirmed messages; Flush waits until every one is confirmed or failed.
// Not safe for concurrent use.
type Publisher struct {
	q       *Queue
	js      jetstream.JetStream
	window  int
	pending []pendingPub
	report  PublishReport
	err     error
}

type pendingPub struct {
	paf  jetstream.PubAckFuture
	item string
}

// DefaultWindow is the default number of publishes in flight.
const DefaultWindow = 4096

// NewPublisher returns a Publisher with at most window unconfirmed
// publishes (DefaultWindow when window < 1).
func (q *Queue) NewPublisher(window int) (*Publisher, error) {
	if window < 1 {
		window = DefaultWindow
	}
	js, err := jetstream.New(q.nc,
		jetstream.WithPublishAsyncMaxPending(window+1),
		jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("queue: publisher: %w", err)
	}
	return &Publisher{q: q, js: js, window: window}, nil
}

// Fits reports the size an item takes on the wire (payload and headers)
// and whether it fits the connected server's max payload (see Fits).
func (q *Queue) Fits(it kftype.Item) (size int, limit int64, ok bool) {
	limit = q.nc.MaxPayload()
	size, ok = Fits(it, limit)
	return size, limit, ok
}

// Add publishes one item, waiting for confirmations when the window is
// full. After a failure it returns the first error without publishing.
func (p *Publisher) Add(ctx context.Context, it kftype.Item) error {
	if p.err != nil {
		return p.err
	}
	for len(p.pending) >= p.window {
		if err := p.settleOldest(ctx); err != nil {
			return err
		}
	}
	paf, err := p.js.PublishMsgAsync(p.q.Message(it))
	if err != nil {
		p.err = fmt.Errorf("queue: publish item %q: %w", it.ID, err)
		return p.err
	}
	p.pending = append(p.pending, pendingPub{paf: paf, item: it.ID})
	return nil
}

func (p *Publisher) settleOldest(ctx context.Context) error {
	pp := p.pending[0]
	p.pending = p.pending[1:]
	select {
	case ack := <-pp.paf.Ok():
		if ack.Duplicate {
			p.report.Duplicates++
		} else {
			p.report.Published++
		}
	case err := <-pp.paf.Err():
		p.report.Unconfirmed++
		if p.err == nil {
			p.err = fmt.Errorf("queue: publish item %q: %w", pp.item, err)
		}
	case <-ctx.Done():
		p.report.Unconfirmed++
		if p.err == nil {
			p.err = fmt.Errorf("queue: publish item %q: %w", pp.item, context.Cause(ctx))
		}
	}
	return p.err
}

// Flush waits for every outstanding publish and returns what was
// confirmed, with the first error if any publish failed.
func (p *Publisher) Flush(ctx context.Context) (PublishReport, error) {
	for len(p.pending) > 0 {
		_ = p.settleOldest(ctx)
	}
	return p.report, p.err
}

// Report is what has been confirmed so far.
func (p *Publisher) Report() PublishReport { return p.report }

// Publish publishes items one after another through a Publisher, then
// adds what the server stored as new to each batch's record (which, on a
// handle with a lane writer, registers the batch's lanes for the workers
// to pull): the simple path for tests and small batches. A batch that is cancelled takes nothing (ErrBatchCancelled).
func (q *Queue) Publish(ctx context.Context, items ...kftype.Item) (PublishReport, error) {
	type key struct{ batch, kind, scope string }
	var order []key
	seen := map[key]bool{}
	for _, it := range items {
		k := key{it.Batch, it.Kind, it.Scope}
		if !seen[k] {
			seen[k] = true
			order = append(order, k)
		}
	}
	for _, k := range order {
		if b, err := q.Batch(ctx, k.batch); err == nil && b.State == kftype.BatchCancelled {
			return PublishReport{}, fmt.Errorf("batch %q: %w", k.batch, ErrBatchCancelled)
		}
	}
	var total PublishReport
	for _, k := range order {
		p, err := q.NewPublisher(0)
		if err != nil {
			return total, err
		}
		for _, it := range items {
			if it.Batch != k.batch || it.Kind != k.kind || it.Scope != k.scope {
				continue
			}
			if err := p.Add(ctx, it); err != nil {
				break
			}
		}
		rep, err := p.Flush(ctx)
		total.Published += rep.Published
		total.Duplicates += rep.Duplicates
		total.Unconfirmed += rep.Unconfirmed
		if err != nil {
			return total, errors.Join(err)
		}
		if _, err := q.AddToBatch(ctx, k.batch, k.kind, rep.Published, WithScopes(k.scope)); err != nil {
			return total, err
		}
	}
	return total, nil
}
