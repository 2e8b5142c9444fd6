package queue

import (
	"context"
	"fmt"
	"iter"
	"strings"

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
	subjects, err := q.resultSubjects(ctx, batch)
	if err != nil {
		return err
	}
	for _, token := range subjects {
		if id, err := Untoken(token); err == nil {
			fn(id)
		}
	}
	return nil
}

// resultSubjects reads the subjects of batch's results (from the results
// stream's info, in pages): it yields each subject with its last token,
// the item's ID as Token made it.
func (q *Queue) resultSubjects(ctx context.Context, batch string) (iter.Seq2[string, string], error) {
	info, err := q.results.Info(ctx, jetstream.WithSubjectFilter(q.batchFilter("results", batch)))
	if err != nil {
		return nil, fmt.Errorf("queue: reading batch %q's results: %w", batch, err)
	}
	prefix := q.cfg.SubjectPrefix + ".results." + Token(batch) + "."
	return func(yield func(string, string) bool) {
		for subj := range info.State.Subjects {
			if token, ok := strings.CutPrefix(subj, prefix); ok && token != "" && !yield(subj, token) {
				return
			}
		}
	}, nil
}
