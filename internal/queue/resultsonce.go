package queue

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// resultsOnceWindow bounds the publishes PutResultsIfAbsent has in
// flight.
const resultsOnceWindow = 256

// PutResultsIfAbsent stores each result unless its item has one already
// (as PutResultIfAbsent, cut to fit the server's max payload like
// PutResult), many at a time: the results of a provider batch are
// recorded once each, however often a crash makes a worker record them
// again. stored[i] reports whether rs[i] was stored; on an error, those
// not confirmed are false.
func (q *Queue) PutResultsIfAbsent(ctx context.Context, rs []kftype.Result) (stored []bool, err error) {
	stored = make([]bool, len(rs))
	limit := q.recordLimit()
	for start := 0; start < len(rs); start += resultsOnceWindow {
		end := min(start+resultsOnceWindow, len(rs))
		futures := make([]jetstream.PubAckFuture, end-start)
		for i := start; i < end; i++ {
			data, ferr := fitResult(rs[i], limit)
			if ferr != nil {
				return stored, ferr
			}
			f, perr := q.js.PublishAsync(q.ResultSubject(rs[i].Batch, rs[i].Item), data, jetstream.WithExpectLastSequencePerSubject(0))
			if perr != nil {
				return stored, fmt.Errorf("queue: store result of %q: %w", rs[i].Item, perr)
			}
			futures[i-start] = f
		}
		for j, f := range futures {
			select {
			case <-f.Ok():
				stored[start+j] = true
			case ferr := <-f.Err():
				if !isWrongLastSequence(ferr) && err == nil {
					err = fmt.Errorf("queue: store result of %q: %w", rs[start+j].Item, ferr)
				}
			case <-ctx.Done():
				return stored, fmt.Errorf("queue: store results: %w", context.Cause(ctx))
			}
		}
		if err != nil {
			return stored, err
		}
	}
	return stored, nil
}

// ItemsWithResults calls fn with the ID of every item of batch that has a
// result (read from the results stream's subjects, in pages; no result is
// read).
func (q *Queue) ItemsWithResults(ctx context.Context, batch string, fn func(id string)) error {
	info, err := q.results.Info(ctx, jetstream.WithSubjectFilter(q.batchFilter("results", batch)))
	if err != nil {
		return fmt.Errorf("queue: reading batch %q's results: %w", batch, err)
	}
	prefix := q.cfg.SubjectPrefix + ".results." + Token(batch) + "."
	for subj := range info.State.Subjects {
		if len(subj) <= len(prefix) || subj[:len(prefix)] != prefix {
			continue
		}
		if id, err := Untoken(subj[len(prefix):]); err == nil {
			fn(id)
		}
	}
	return nil
}
