package queue_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// A record whose texts grow when encoded (a < is six bytes escaped, a
// control character six too) is cut to fit the server's max payload and
// stored, saying so; before, such a record was refused by the server
// ("maximum payload exceeded") on every run of its item, which then ran
// again forever.
func TestRecordsAreCutToFit(t *testing.T) {
	q, nc := open(t)
	limit := int(nc.MaxPayload())
	lt := strings.Repeat("<", limit*3/10)     // 300 KB of '<': 1.8 MB if escaped as \u003c
	ctl := strings.Repeat("\x01é", limit*2/5) // 1.2 MB escaped as \u0001
	bin := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\xff", limit)))

	for _, tt := range []struct {
		name string
		r    kftype.Result
	}{
		{"output of <", kftype.Result{Item: "a", Batch: "fit", Outcome: kftype.OutcomeSucceeded, Output: lt + lt + lt + lt}},
		{"output of control characters", kftype.Result{Item: "b", Batch: "fit", Outcome: kftype.OutcomeSucceeded, Output: ctl}},
		{"base64 output", kftype.Result{Item: "c", Batch: "fit", Outcome: kftype.OutcomeSucceeded, Output: bin, OutputEncoding: "base64"}},
		{"an error and an output", kftype.Result{Item: "d", Batch: "fit", Outcome: kftype.OutcomeFailed, Error: ctl, Output: ctl}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.FinishedAt = time.Now().UTC()
			if err := q.PutResult(ctx(t), tt.r); err != nil {
				t.Fatalf("PutResult: %v", err)
			}
			var got kftype.Result
			if err := q.ReadResults(ctx(t), "fit", func(r kftype.Result) error {
				if r.Item == tt.r.Item {
					got = r
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if got.Item != tt.r.Item || !got.OutputTruncated || !strings.HasPrefix(tt.r.Output, got.Output) || len(got.Output) == 0 {
				t.Fatalf("stored %q: truncated %v, %d bytes of output (a prefix of the original: %v)",
					got.Item, got.OutputTruncated, len(got.Output), strings.HasPrefix(tt.r.Output, got.Output))
			}
			if tt.r.OutputEncoding == "base64" {
				if _, err := base64.StdEncoding.DecodeString(got.Output); err != nil {
					t.Errorf("the cut base64 output does not decode: %v", err)
				}
			}
			if tt.r.Error != "" && (!strings.HasSuffix(got.Error, queue.CutNote) || len(got.Error) >= len(tt.r.Error)) {
				t.Errorf("error of %d bytes stored as %d bytes ending %q", len(tt.r.Error), len(got.Error), got.Error[max(len(got.Error)-60, 0):])
			}
		})
	}

	t.Run("dead letter of <", func(t *testing.T) {
		payload := []byte(`{"id":"e","text":"` + lt + `"}`) // as enqueued: < unescaped
		d := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: "e", Batch: "fit", Kind: "exec",
			Reason: kftype.ReasonPermanent, Error: "permanent failure: " + lt, FailedAt: time.Now().UTC()}, Payload: payload}
		if err := q.PutDeadLetter(ctx(t), d); err != nil {
			t.Fatalf("PutDeadLetter: %v", err)
		}
		got := listDeadLetters(t, q, "fit")
		if len(got) != 1 || string(got[0].Payload) != string(payload) || got[0].PayloadTruncated || got[0].Error != d.Error {
			t.Fatalf("the record (< unescaped fits whole) came back changed: %d records, payload %d bytes (want %d), truncated %v",
				len(got), len(got[0].Payload), len(payload), got[0].PayloadTruncated)
		}
	})

	t.Run("dead letter whose payload must be cut", func(t *testing.T) {
		payload, _ := json.Marshal(map[string]string{"id": "f", "text": ctl[:limit-100]})
		d := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: "f", Batch: "fit2", Kind: "exec",
			Reason: kftype.ReasonPermanent, Error: ctl, FailedAt: time.Now().UTC()}, Payload: payload}
		if err := q.PutDeadLetter(ctx(t), d); err != nil {
			t.Fatalf("PutDeadLetter: %v", err)
		}
		got := listDeadLetters(t, q, "fit2")
		if len(got) != 1 || !got[0].PayloadTruncated || !strings.HasSuffix(got[0].Error, queue.CutNote) {
			t.Fatalf("want the error and the payload cut, and said so: %+v", got)
		}
		if err := q.Replay(ctx(t), got[0]); err == nil || !strings.Contains(err.Error(), "cut") {
			t.Fatalf("replaying a cut payload: %v, want a refusal", err)
		}
	})
}

func listDeadLetters(t *testing.T, q *queue.Queue, batch string) []kftype.DeadLetter {
	t.Helper()
	var out []kftype.DeadLetter
	if err := q.ListDeadLetters(ctx(t), batch, func(d kftype.DeadLetter) error {
		out = append(out, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
