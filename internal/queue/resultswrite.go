package queue

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// ResultsWritten counts what WriteResults wrote.
type ResultsWritten struct {
	Results, Failed int
}

// WriteResults writes the latest result of every item of batch to w as
// JSON Lines, streaming: one Result per line, as `producer results` and
// the dashboard's GET /api/batches/{id}/results give them (encoding/json,
// HTML characters not escaped). A write error and a read error are told
// apart by errors.As(err, *WriteError).
func (q *Queue) WriteResults(ctx context.Context, batch string, w io.Writer) (ResultsWritten, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	var n ResultsWritten
	err := q.ReadResults(ctx, batch, func(r Result) error {
		if err := enc.Encode(r); err != nil {
			return &WriteError{Err: err}
		}
		n.Results++
		if r.Outcome != OutcomeSucceeded {
			n.Failed++
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if err := bw.Flush(); err != nil {
		return n, &WriteError{Err: err}
	}
	return n, nil
}

// WriteError is a failure to write the results (not to read them).
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return fmt.Sprintf("writing the results: %v", e.Err) }
func (e *WriteError) Unwrap() error { return e.Err }
