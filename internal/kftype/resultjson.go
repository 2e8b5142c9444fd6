package kftype

import (
	"fmt"
	"strconv"
	"time"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// AppendJSON appends r encoded as json.Marshal encodes it (the same
// bytes: FuzzResultJSON holds it to that), without reflection: every
// succeeded item's result is encoded on the worker's hot path.
func (r *Result) AppendJSON(b []byte) ([]byte, error) {
	if hint := r.jsonSizeHint(); cap(b)-len(b) < hint {
		b = append(make([]byte, 0, len(b)+hint), b...)
	}
	b = append(b, `{"item":`...)
	b = jsonl.AppendString(b, r.Item)
	b = append(b, `,"batch":`...)
	b = jsonl.AppendString(b, r.Batch)
	b = append(b, `,"kind":`...)
	b = jsonl.AppendString(b, r.Kind)
	b = append(b, `,"outcome":`...)
	b = jsonl.AppendString(b, r.Outcome)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	b = append(b, `,"duration":`...)
	b, ok := jsonl.AppendFloat(b, r.Duration)
	if !ok {
		return nil, fmt.Errorf("kftype: result of %q: duration %v has no JSON form", r.Item, r.Duration)
	}
	b = append(b, `,"credential_id":`...)
	b = jsonl.AppendString(b, r.CredentialID)
	var err error
	if !r.LeasedAt.IsZero() {
		b = append(b, `,"leased_at":`...)
		if b, err = appendJSONTime(b, r.LeasedAt); err != nil {
			return nil, fmt.Errorf("kftype: result of %q: leased_at: %w", r.Item, err)
		}
	}
	b = append(b, `,"error":`...)
	b = jsonl.AppendString(b, r.Error)
	b = append(b, `,"output":`...)
	b = jsonl.AppendString(b, r.Output)
	if r.OutputEncoding != "" {
		b = append(b, `,"output_encoding":`...)
		b = jsonl.AppendString(b, r.OutputEncoding)
	}
	b = append(b, `,"output_truncated":`...)
	b = strconv.AppendBool(b, r.OutputTruncated)
	if r.StatusCode != 0 {
		b = append(b, `,"status_code":`...)
		b = strconv.AppendInt(b, int64(r.StatusCode), 10)
	}
	if r.RequestID != "" {
		b = append(b, `,"request_id":`...)
		b = jsonl.AppendString(b, r.RequestID)
	}
	if r.Via != "" {
		b = append(b, `,"via":`...)
		b = jsonl.AppendString(b, r.Via)
	}
	if r.Spend != 0 {
		b = append(b, `,"spend":`...)
		b = append(b, r.Spend.String()...)
	}
	if r.FallbackFrom != "" {
		b = append(b, `,"fallback_from":`...)
		b = jsonl.AppendString(b, r.FallbackFrom)
	}
	if r.FallbackReason != "" {
		b = append(b, `,"fallback_reason":`...)
		b = jsonl.AppendString(b, r.FallbackReason)
	}
	b = append(b, `,"worker":`...)
	b = jsonl.AppendString(b, r.Worker)
	b = append(b, `,"finished_at":`...)
	if b, err = appendJSONTime(b, r.FinishedAt); err != nil {
		return nil, fmt.Errorf("kftype: result of %q: finished_at: %w", r.Item, err)
	}
	return append(b, '}'), nil
}

// jsonSizeHint is about the length of r's JSON: the keys, two times and
// the strings, plus an eighth for escapes (one allocation for most).
func (r *Result) jsonSizeHint() int {
	n := len(r.Item) + len(r.Batch) + len(r.Kind) + len(r.Outcome) + len(r.CredentialID) +
		len(r.Error) + len(r.Output) + len(r.OutputEncoding) + len(r.Worker) + len(r.RequestID) + len(r.Via) +
		len(r.FallbackFrom) + len(r.FallbackReason)
	return 256 + n + n/8
}

// appendJSONTime appends t as time.Time's MarshalJSON writes it.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}
