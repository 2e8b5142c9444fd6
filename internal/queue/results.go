package queue

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// PutResult stores an item's outcome (confirmed by the server), cut to
// fit the server's max payload (fitResult).
func (q *Queue) PutResult(ctx context.Context, r kftype.Result) error {
	data, err := fitResult(r, q.recordLimit())
	if err != nil {
		return err
	}
	return q.store(ctx, "result", r.Item, q.ResultSubject(r.Batch, r.Item), data)
}

// store publishes data, the record (what) of item, on subject and waits
// for the server to confirm it.
func (q *Queue) store(ctx context.Context, what, item, subject string, data []byte) error {
	if _, err := q.js.Publish(ctx, subject, data); err != nil {
		return fmt.Errorf("queue: store %s of %q: %w", what, item, err)
	}
	return nil
}

// ReadResults calls fn with the latest result of every item of batch (all
// batches when batch is ""), streaming, and returns when it has seen them
// all.
func (q *Queue) ReadResults(ctx context.Context, batch string, fn func(kftype.Result) error) error {
	return q.readLast(ctx, q.resultsStream(), q.batchFilter("results", batch), false, nil, func(data []byte, subj string, _ uint64) error {
		var r kftype.Result
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("queue: result on %s: %w", subj, err)
		}
		return fn(r)
	})
}

// WatchResults calls fn with the latest result of every item of batch and
// then with every new one, until fn returns false, fn fails or ctx ends.
func (q *Queue) WatchResults(ctx context.Context, batch string, fn func(kftype.Result) (more bool, err error)) error {
	errStop := fmt.Errorf("stop")
	err := q.readLast(ctx, q.resultsStream(), q.batchFilter("results", batch), true, nil, func(data []byte, subj string, _ uint64) error {
		var r kftype.Result
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("queue: result on %s: %w", subj, err)
		}
		more, err := fn(r)
		if err != nil {
			return err
		}
		if !more {
			return errStop
		}
		return nil
	})
	if err == errStop {
		return nil
	}
	return err
}

// FollowResults calls fn with the latest result of every item of every
// batch, then caughtUp (once, also when there is none), then fn with every
// new result, until ctx ends (it returns ctx's cause), fn fails or the
// stream cannot be read.
func (q *Queue) FollowResults(ctx context.Context, fn func(kftype.Result) error, caughtUp func()) error {
	return q.readLast(ctx, q.resultsStream(), q.batchFilter("results", ""), true, caughtUp, func(data []byte, subj string, _ uint64) error {
		var r kftype.Result
		if err := json.Unmarshal(data, &r); err != nil {
			return nil // not a result of ours: skip it, keep following
		}
		return fn(r)
	})
}

// readLast streams the last message of every subject matching filter with
// an ordered consumer. Without follow it stops when it has caught up;
// caughtUp (optional) is called once when it has.
func (q *Queue) readLast(ctx context.Context, stream, filter string, follow bool, caughtUp func(), fn func(data []byte, subject string, seq uint64) error) error {
	cons, err := q.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return fmt.Errorf("queue: read %s: %w", stream, err)
	}
	if !follow || caughtUp != nil {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("queue: read %s: %w", stream, err)
		}
		if info.NumPending == 0 {
			if caughtUp != nil {
				caughtUp()
				caughtUp = nil
			}
			if !follow {
				return nil
			}
		}
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("queue: read %s: %w", stream, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("queue: read %s: %w", stream, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("queue: read %s: %w", stream, err)
		}
		if err := fn(msg.Data(), msg.Subject(), meta.Sequence.Stream); err != nil {
			return err
		}
		if caughtUp != nil && meta.NumPending == 0 {
			caughtUp()
			caughtUp = nil
		}
		if !follow && meta.NumPending == 0 {
			return nil
		}
	}
}
