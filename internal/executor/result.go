package executor

import (
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

const maxErrorText = 4 << 10

// result builds an item's result record; outputs and error texts are
// scrubbed of every configured secret, and error texts bounded (the queue
// cuts what does not fit a NATS message when it stores the record).
func (e *Executor) result(it kftype.Item, outcome string, attempt int, dur time.Duration, credID, errText string, out jobs.Output) kftype.Result {
	body := e.scrub.Bytes(out.Body)
	truncated := out.Truncated
	if len(errText) > maxErrorText {
		errText = errText[:maxErrorText] + "…"
	}
	r := kftype.Result{
		Item: it.ID, Batch: it.Batch, Kind: it.Kind, Outcome: outcome, Attempts: attempt,
		Duration: dur.Seconds(), CredentialID: credID, Error: e.scrub.String(errText),
		OutputTruncated: truncated, StatusCode: out.Status, RequestID: e.scrub.String(out.RequestID),
		Worker: e.id, FinishedAt: e.clock.Now().UTC(),
	}
	if utf8.Valid(body) {
		r.Output = string(body)
	} else {
		r.Output, r.OutputEncoding = base64.StdEncoding.EncodeToString(body), "base64"
	}
	return r
}
