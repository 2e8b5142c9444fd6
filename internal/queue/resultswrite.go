package queue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// ResultsWritten counts what WriteResults wrote.
type ResultsWritten struct {
	Results, Failed int
}

// WriteResults writes the latest result of every item of batch to w as
// JSON Lines, streaming: one Result per line, as `producer results` and
// the dashboard's GET /api/batches/{id}/results give them (encoding/json,
// HTML characters not escaped; C1 and bidirectional controls escaped as
// \uNNNN, termsafe.JSON, so that a job's output printed on a terminal
// cannot act on it). A write error and a read error are told apart by
// errors.As(err, *WriteError).
func (q *Queue) WriteResults(ctx context.Context, batch string, w io.Writer) (ResultsWritten, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false)
	var n ResultsWritten
	err := q.ReadResults(ctx, batch, func(r Result) error {
		line.Reset()
		if err := enc.Encode(r); err != nil {
			return &WriteError{Err: err}
		}
		if _, err := bw.Write(termsafe.JSON(line.Bytes())); err != nil {
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
