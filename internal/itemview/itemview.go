// Package itemview builds the view of one item that `producer item show`
// and the dashboard's GET /api/batches/{id}/items/{item} show: where the
// item is (waiting, running, succeeded, failed, dead-lettered, cancelled),
// its attempts, last error, key and result. Front ends only format an
// Item; what makes an item's state is State, here, so the CLI and the web
// page cannot disagree.
//
// An item leaves a trace in up to three places, each read by its subject
// or its batch's: its message in the work stream while it waits or runs
// (the batch's subjects, read headers only until the item is found), its
// latest result (queue.ResultSubject), and its dead-letter record
// (queue.DeadLetterSubject). A replayed item has a message again and may
// keep an older result; the latest of the three says where it is.
package itemview

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// States of an Item.
const (
	// StateWaiting: its message waits in the stream, not delivered yet
	// (behind other items, or its batch is paused).
	StateWaiting = "waiting"
	// StateRunning: its message is out with a worker and not settled:
	// running, waiting there for a key, or for its next try.
	StateRunning      = "running"
	StateSucceeded    = kftype.OutcomeSucceeded
	StateFailed       = kftype.OutcomeFailed
	StateCancelled    = kftype.OutcomeCancelled
	StateDeadLettered = "dead-lettered"
	// StateBatchAPI: it runs in a provider batch (a deadline batch's,
	// docs/batch-api.md): its checkpoint is the provider batch's record.
	StateBatchAPI = "batch-api"
)

// ErrNoItem: the item has no message, no result and no dead letter.
var ErrNoItem = errors.New("itemview: no such item")

// Item is where one item is: `item show --json`'s object and the answer of
// GET /api/batches/{id}/items/{item}. Keys may be added, never removed.
type Item struct {
	Batch string `json:"batch"`
	Item  string `json:"item"`
	Kind  string `json:"kind"`
	Scope string `json:"scope,omitempty"`
	// State: waiting, running, succeeded, failed, dead-lettered or
	// cancelled.
	State string `json:"state"`
	// BatchState is the batch's state as the batch list shows it
	// (batchview.State: running, paused, cancelled or done); "" when the
	// batch left neither a record nor results.
	BatchState string `json:"batch_state"`
	// Attempts, Error, Reason, CredentialID and the output come from the
	// item's latest recorded outcome (its result, or its dead letter): runs
	// of the item, the last run's error, why it was dead-lettered (a
	// class: queue.Reason*), the key it last ran on, and what it wrote. An
	// item that waits or runs again after a replay shows its previous
	// outcome's; one that never settled has none (0, "").
	Attempts        int    `json:"attempts"`
	Error           string `json:"error"`
	Reason          string `json:"reason,omitempty"`
	CredentialID    string `json:"credential_id"`
	Output          string `json:"output"`
	OutputEncoding  string `json:"output_encoding,omitempty"`
	OutputTruncated bool   `json:"output_truncated"`
	// Message is its message while it waits or runs (null otherwise).
	Message *Message `json:"message"`
	// ProviderBatch is the provider batch it runs in (state batch-api;
	// null otherwise).
	ProviderBatch *batchview.ProviderBatch `json:"provider_batch,omitempty"`
	// Result is its latest result as `producer results` writes it, and
	// DeadLetter its dead-letter record without the payload (null when
	// there is none).
	Result     *kftype.Result            `json:"result"`
	DeadLetter *kftype.DeadLetterSummary `json:"dead_letter"`
	// TextHidden: Error, Output and the error and output of Result and
	// DeadLetter were left out (Public), as the dashboard does for a
	// reader without the admin token.
	TextHidden bool `json:"text_hidden,omitempty"`
}

// Message is an item's message in the work stream.
type Message struct {
	Sequence   uint64    `json:"sequence"`
	Subject    string    `json:"subject"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// Delivered: a worker has it (State running).
	Delivered bool `json:"delivered"`
	// Replay: the message is a replay of a dead letter.
	Replay bool `json:"replay"`
	// Staged: the message waits for a provider batch (its batch has a
	// deadline); no worker delivers it.
	Staged bool `json:"staged,omitempty"`
}

// Public is the item without the text jobs and APIs wrote (errors,
// outputs): what a reader without the admin token may see.
func (it Item) Public() Item {
	it.Error, it.Output, it.TextHidden = "", "", true
	if it.Result != nil {
		r := *it.Result
		r.Error, r.Output = "", ""
		it.Result = &r
	}
	if it.DeadLetter != nil {
		d := *it.DeadLetter
		d.Error = ""
		it.DeadLetter = &d
	}
	return it
}

// State is where an item is from what it left: its message (nil: none;
// delivered to a worker or not), its result and its dead letter (nil:
// none). The latest of them wins: a message newer than the item's
// outcomes is a replay or a new enqueue (waiting or running); a result is
// stored just before its message leaves the stream, so a result newer
// than the message is the item's outcome. A dead letter is written with
// the failed result of the same run: it wins unless a newer result
// (of a later run) is there.
func State(msg *Message, res *kftype.Result, dl *kftype.DeadLetterSummary) string {
	var settled time.Time
	if res != nil {
		settled = res.FinishedAt
	}
	if dl != nil && dl.FailedAt.After(settled) {
		settled = dl.FailedAt
	}
	switch {
	case msg != nil && (res == nil && dl == nil || !msg.EnqueuedAt.Before(settled)):
		if msg.Delivered {
			return StateRunning
		}
		return StateWaiting
	case deadLetterLatest(res, dl):
		return StateDeadLettered
	case res != nil:
		switch res.Outcome {
		case kftype.OutcomeSucceeded, kftype.OutcomeCancelled:
			return res.Outcome
		}
		return StateFailed
	}
	return ""
}

// deadLetterLatest reports whether the item's dead letter is its latest
// outcome: there is one, and no result of a later run that succeeded.
func deadLetterLatest(res *kftype.Result, dl *kftype.DeadLetterSummary) bool {
	return dl != nil && (res == nil || res.Outcome != kftype.OutcomeSucceeded || !res.FinishedAt.After(dl.FailedAt))
}

// Read returns where item of batch is, read now. It fails with ErrNoItem
// when the item left no trace (never enqueued, or its records are older
// than queue.results_max_age); other errors are the server's.
func Read(ctx context.Context, q *queue.Queue, batch, item string) (Item, error) {
	out := Item{Batch: batch, Item: item}
	res, err := lastRecord[kftype.Result](ctx, q, q.ResultSubject(batch, item))
	if err != nil {
		return out, fmt.Errorf("reading the result of item %q of batch %q: %w", item, batch, err)
	}
	dl, err := lastRecord[kftype.DeadLetter](ctx, q, q.DeadLetterSubject(batch, item))
	if err != nil {
		return out, fmt.Errorf("reading the dead letter of item %q of batch %q: %w", item, batch, err)
	}
	msg, it, err := waiting(ctx, q, batch, item)
	if err != nil {
		return out, fmt.Errorf("reading the waiting items of batch %q: %w", batch, err)
	}
	if row, err := batchview.Read(ctx, q, batch); err == nil {
		out.BatchState = row.State
	} else if !errors.Is(err, batchview.ErrNoBatch) {
		return out, fmt.Errorf("reading batch %q: %w", batch, err)
	}
	var sum *kftype.DeadLetterSummary
	if dl != nil {
		sum = &dl.DeadLetterSummary
	}
	out.Message, out.Result, out.DeadLetter = msg, res, sum
	out.State = State(msg, res, sum)
	if out.State == "" {
		pb, kind, scope, err := inProviderBatch(ctx, q, batch, item)
		if err != nil {
			return out, fmt.Errorf("reading the provider batches of batch %q: %w", batch, err)
		}
		if pb != nil {
			out.State, out.ProviderBatch, out.Kind, out.Scope = StateBatchAPI, pb, kind, scope
			return out, nil
		}
	}
	if out.State == "" {
		return out, fmt.Errorf("%w: %q in batch %q (no message waiting, no result, no dead letter: never enqueued, "+
			"or its records are older than queue.results_max_age)", ErrNoItem, item, batch)
	}
	switch {
	case msg != nil:
		out.Kind, out.Scope = it.Kind, it.Scope
	case sum != nil:
		out.Kind, out.Scope = sum.Kind, sum.Scope
	default:
		out.Kind = cmp.Or(res.FallbackFrom, res.Kind) // its own kind, not a fallback kind that ran it
	}
	// The latest outcome's details: the result's, or the dead letter's
	// when it is the later (a dead letter and the failed result of the
	// same run say the same; the result names the key).
	if res != nil {
		out.Attempts, out.Error, out.CredentialID = res.Attempts, res.Error, res.CredentialID
		out.Output, out.OutputEncoding, out.OutputTruncated = res.Output, res.OutputEncoding, res.OutputTruncated
	}
	if deadLetterLatest(res, sum) {
		out.Reason = sum.Reason
		if res == nil || sum.FailedAt.After(res.FinishedAt) {
			out.Attempts, out.Error = sum.Attempts, sum.Error
		}
	}
	return out, nil
}

// lastRecord reads the last message on subject (a result's or a dead
// letter's) as a T; nil when there is none.
func lastRecord[T any](ctx context.Context, q *queue.Queue, subject string) (*T, error) {
	js := q.JetStream()
	name, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(m.Data, &v); err != nil {
		return nil, fmt.Errorf("record %d on %s: %w", m.Sequence, subject, err)
	}
	return &v, nil
}

// waiting finds item's message among the messages batch holds in the
// work stream, read in the order they were stored, one direct read each
// (as queue.HeldItems reads them: a work-queue stream takes no consumer
// beside the lanes'), and says whether a worker has it: on a work-queue
// stream a message stays until it is acknowledged or terminated, so one
// at or below its lane consumer's delivered sequence is out with a worker.
// Nil when the item has none.
func waiting(ctx context.Context, q *queue.Queue, batch, item string) (*Message, kftype.Item, error) {
	cfg := q.Config()
	js := q.JetStream()
	s, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, kftype.Item{}, err
	}
	filter := cfg.SubjectPrefix + ".b." + queue.Token(batch) + ".>"
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, kftype.Item{}, nil
		}
		if err != nil {
			return nil, kftype.Item{}, err
		}
		seq = m.Sequence + 1
		found, err := queue.DecodeStoredItem(m)
		if err != nil || found.ID != item || found.Batch != batch {
			continue
		}
		msg := &Message{Sequence: m.Sequence, Subject: m.Subject, EnqueuedAt: m.Time.UTC(), Replay: found.Replay != ""}
		if _, _, _, err := q.StagingParts(batch, m.Subject); err == nil {
			msg.Staged = true // no lane's consumer delivers it
			return msg, found, nil
		}
		c, err := js.Consumer(ctx, cfg.Stream, q.LaneConsumerName(kftype.Lane(batch, found.Scope)))
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
		case err != nil:
			return nil, kftype.Item{}, err
		default:
			msg.Delivered = c.CachedInfo().Delivered.Stream >= msg.Sequence
		}
		return msg, found, nil
	}
}

// inProviderBatch finds the active provider batch record of batch whose
// items hold item (nil when none does), with the item's kind and scope.
func inProviderBatch(ctx context.Context, q *queue.Queue, batch, item string) (*batchview.ProviderBatch, string, string, error) {
	recs, err := q.ProviderBatches(ctx, batch)
	if err != nil || len(recs) == 0 {
		return nil, "", "", err
	}
	store, err := q.OpenProviderBatches(ctx)
	if err != nil {
		return nil, "", "", err
	}
	errFound := errors.New("found")
	for _, p := range recs {
		if !p.Active() {
			continue
		}
		err := store.ReadManifest(ctx, p, func(_ int, it queue.ProviderBatchItem) error {
			if it.ID == item {
				return errFound
			}
			return nil
		})
		if errors.Is(err, errFound) {
			row := batchview.ProviderBatches([]queue.ProviderBatch{p})[0]
			return &row, p.Kind, p.Scope, nil
		}
		if err != nil {
			return nil, "", "", err
		}
	}
	return nil, "", "", nil
}
