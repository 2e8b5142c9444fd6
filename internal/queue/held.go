package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// HeldItems calls fn with the ID of every item batch holds: each item
// whose message waits in the work stream (in a lane, or staged for a
// Batch API), each item an active provider batch holds, then each item
// with a result (an item may be given more than once). JetStream's duplicate window finds a
// repeated enqueue only within the window; past it, an enqueue into an
// existing batch asks this instead, so that a repeated enqueue never runs
// an item twice. Messages are read in the order they were stored, one
// request each (a batch's pending items are read once per such enqueue);
// results by their subjects, in pages. The waiting messages are read
// first: an item settled meanwhile has its result stored before its
// message leaves the stream, so none is missed.
func (q *Queue) HeldItems(ctx context.Context, batch string, fn func(id string) error) error {
	filter := q.cfg.SubjectPrefix + ".b." + Token(batch) + ".>"
	for seq := uint64(1); ; {
		m, err := q.work.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fmt.Errorf("queue: reading batch %q's waiting items: %w", batch, err)
		}
		it := kftype.Item{ID: m.Header.Get(HeaderItem), Batch: m.Header.Get(HeaderBatch)}
		if enc := m.Header.Get(HeaderIDEncoding); enc != "" {
			if err := decodeIDs(&it, enc); err != nil {
				return fmt.Errorf("queue: reading batch %q's waiting items: message %d: %w", batch, m.Sequence, err)
			}
		}
		if it.ID != "" && it.Batch == batch {
			if err := fn(it.ID); err != nil {
				return err
			}
		}
		seq = m.Sequence + 1
	}
	if err := q.heldByProviderBatches(ctx, batch, fn); err != nil {
		return fmt.Errorf("queue: reading batch %q's provider batches: %w", batch, err)
	}
	subjects, err := q.resultSubjects(ctx, batch)
	if err != nil {
		return err
	}
	for subj, token := range subjects {
		id, err := Untoken(token)
		if err != nil {
			return fmt.Errorf("queue: reading batch %q's results: subject %q: %w", batch, subj, err)
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}
