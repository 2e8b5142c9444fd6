package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// ErrPayloadCut: a dead letter's payload was cut to fit its record, so
// the item cannot be replayed from it.
var ErrPayloadCut = errors.New("its payload was cut to fit the dead letter's record: replaying it would run another item; enqueue it again")

// PutDeadLetter stores a dead-letter record (confirmed by the server), cut
// to fit the server's max payload (fitDeadLetter). Call it before
// terminating the message: on a work-queue stream the term deletes the
// message.
func (q *Queue) PutDeadLetter(ctx context.Context, d kftype.DeadLetter) error {
	if !json.Valid(d.Payload) {
		s, _ := json.Marshal(string(d.Payload))
		d.Payload = s
	}
	data, err := fitDeadLetter(d, q.recordLimit())
	if err != nil {
		return err
	}
	return q.store(ctx, "dead letter", d.Item, q.DeadLetterSubject(d.Batch, d.Item), data)
}

// ListDeadLetters calls fn with every dead-letter record of batch (all
// batches when batch is "").
func (q *Queue) ListDeadLetters(ctx context.Context, batch string, fn func(kftype.DeadLetter) error) error {
	return q.readLast(ctx, q.dlqStream(), q.batchFilter("dlq", batch), false, nil, func(data []byte, subj string, seq uint64) error {
		var d kftype.DeadLetter
		if err := json.Unmarshal(data, &d); err != nil {
			return fmt.Errorf("queue: dead letter on %s: %w", subj, err)
		}
		d.Seq = seq
		return fn(d)
	})
}

// DeadLettersToReplay picks the dead-letter records of batch ("" for all
// batches) that a replay of items takes: those of the given items, or every
// record when items is empty. missing lists, sorted, the items that have no
// record.
func (q *Queue) DeadLettersToReplay(ctx context.Context, batch string, items []string) (todo []kftype.DeadLetter, missing []string, err error) {
	want := map[string]bool{}
	for _, id := range items {
		want[id] = false
	}
	err = q.ListDeadLetters(ctx, batch, func(d kftype.DeadLetter) error {
		if _, ok := want[d.Item]; ok || len(items) == 0 {
			want[d.Item] = true
			todo = append(todo, d)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for id, found := range want {
		if !found {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	return todo, missing, nil
}

// Replay puts a dead-lettered item back on the work queue with fresh
// attempts and then removes its record (pass a record from
// ListDeadLetters).
func (q *Queue) Replay(ctx context.Context, d kftype.DeadLetter) error {
	if d.PayloadTruncated {
		return fmt.Errorf("queue: replay %q of batch %q: %w", d.Item, d.Batch, ErrPayloadCut)
	}
	it := kftype.Item{ID: d.Item, Batch: d.Batch, Kind: d.Kind, Scope: d.Scope, Endpoint: d.Endpoint, Payload: d.Payload,
		Replay: strconv.FormatInt(time.Now().UnixNano(), 10)}
	if b, err := q.Batch(ctx, d.Batch); err == nil && b.State == kftype.BatchCancelled {
		return fmt.Errorf("queue: replay %q: batch %q: %w", d.Item, d.Batch, ErrBatchCancelled)
	}
	if _, err := q.js.PublishMsg(ctx, q.Message(it)); err != nil {
		return fmt.Errorf("queue: replay %q of batch %q: %w", d.Item, d.Batch, err)
	}
	// The batch's record changes (no new item: the replayed one was
	// counted when first enqueued), which registers its lanes again
	// (through the handle's lane writer).
	if _, err := q.AddToBatch(ctx, d.Batch, d.Kind, 0, WithScopes(d.Scope)); err != nil {
		return fmt.Errorf("queue: replayed %q of batch %q: %w", d.Item, d.Batch, err)
	}
	// Remove this record only: if the replayed item has already failed
	// again, its newer record stays.
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(q.DeadLetterSubject(d.Batch, d.Item))}
	if d.Seq > 0 {
		opts = append(opts, jetstream.WithPurgeSequence(d.Seq+1))
	}
	if err := q.dlq.Purge(ctx, opts...); err != nil {
		return fmt.Errorf("queue: replayed %q of batch %q but could not remove its record: %w", d.Item, d.Batch, err)
	}
	return nil
}
