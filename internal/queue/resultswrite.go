package queue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// ResultsWritten counts what WriteResults wrote: every result, and of
// them those that failed and those cancelled (Failed counts both: every
// item that did not succeed).
type ResultsWritten struct {
	Results, Failed, Cancelled int
}

// WriteResults writes the latest result of every item of batch to w as
// JSON Lines, streaming: one Result per line, as `producer results` and
// the dashboard's GET /api/batches/{id}/results give them (encoding/json,
// HTML characters not escaped; C1 and bidirectional controls escaped as
// \uNNNN, termsafe.JSON, so that a job's output printed on a terminal
// cannot act on it). A write error and a read error are told apart by
// errors.As(err, *WriteError).
func (q *Queue) WriteResults(ctx context.Context, batch string, w io.Writer) (ResultsWritten, error) {
	return q.WriteResultsIn(ctx, batch, provider.FormatJSONL, w)
}

// WriteResultsIn is WriteResults in format: provider.FormatJSONL (a Result
// a line), or a provider's batch output format (provider.ResultLine),
// which code written for the provider's Batch API reads unchanged.
func (q *Queue) WriteResultsIn(ctx context.Context, batch, format string, w io.Writer) (ResultsWritten, error) {
	if format != provider.FormatJSONL {
		if _, err := provider.ResultLine(format, provider.ResultView{}); err != nil {
			return ResultsWritten{}, err
		}
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false)
	var n ResultsWritten
	err := q.ReadResults(ctx, batch, func(r kftype.Result) error {
		line.Reset()
		if format == provider.FormatJSONL {
			if err := enc.Encode(r); err != nil {
				return &WriteError{Err: err}
			}
		} else {
			b, err := provider.ResultLine(format, resultView(r))
			if err != nil {
				return &WriteError{Err: err}
			}
			line.Write(b)
			line.WriteByte('\n')
		}
		if _, err := bw.Write(termsafe.JSON(line.Bytes())); err != nil {
			return &WriteError{Err: err}
		}
		n.Results++
		if r.Outcome != kftype.OutcomeSucceeded {
			n.Failed++
		}
		if r.Outcome == kftype.OutcomeCancelled {
			n.Cancelled++
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

// resultView is what a provider's result line is written from.
func resultView(r kftype.Result) provider.ResultView {
	return provider.ResultView{Batch: r.Batch, Item: r.Item, Outcome: r.Outcome, StatusCode: r.StatusCode, RequestID: r.RequestID,
		Output: r.Output, OutputEncoding: r.OutputEncoding, Error: r.Error}
}

// WriteError is a failure to write the results (not to read them).
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return fmt.Sprintf("writing the results: %v", e.Err) }
func (e *WriteError) Unwrap() error { return e.Err }
