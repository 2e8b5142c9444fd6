package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// batchRecordMinAge is how long a batch's record is kept at least after
// its last change, whatever it holds.
const batchRecordMinAge = time.Hour

// batchFromKey is the batch ID of a record's key (kvKey reversed).
func batchFromKey(key string) (string, error) {
	return Untoken(strings.ReplaceAll(key, "=", "~"))
}

// SweepBatchRecords deletes the records of the batches that hold nothing
// any more, neither a message in the work stream nor a result (results
// leave after queue.results_max_age), and whose record has not changed for
// an hour; it returns the batches it deleted. A record is deleted at the
// revision it was read at, so an enqueue or a command that changes it
// meanwhile keeps it. The cost is a read of every record and, for the
// idle ones, two stream lookups each.
func (q *Queue) SweepBatchRecords(ctx context.Context, now time.Time) ([]string, error) {
	keys, err := q.batches.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue: list batch records: %w", err)
	}
	var deleted []string
	for key := range keys.Keys() {
		e, err := q.batches.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("queue: read batch record %q: %w", key, err)
		}
		var b kftype.BatchInfo
		if json.Unmarshal(e.Value(), &b) != nil || now.Sub(b.LastChange()) < batchRecordMinAge {
			continue
		}
		holds, err := q.batchHoldsAnything(ctx, b.ID)
		if err != nil || holds {
			continue
		}
		if err := q.batches.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
			continue // changed meanwhile: it holds something again
		}
		q.deleteProviderBatches(ctx, b.ID)
		deleted = append(deleted, b.ID)
	}
	return deleted, nil
}

// batchHoldsAnything reports whether batch has a message in the work
// stream (staged ones included), an active provider batch or a result.
func (q *Queue) batchHoldsAnything(ctx context.Context, batch string) (bool, error) {
	if active, err := q.providerBatchesActive(ctx, batch); err != nil || active {
		return true, err
	}
	for _, c := range []struct {
		s      jetstream.Stream
		filter string
	}{
		{q.work, q.cfg.SubjectPrefix + ".b." + Token(batch) + ".>"},
		{q.results, q.batchFilter("results", batch)},
	} {
		info, err := c.s.Info(ctx, jetstream.WithSubjectFilter(c.filter))
		if err != nil {
			return true, err
		}
		if len(info.State.Subjects) > 0 {
			return true, nil
		}
	}
	return false, nil
}
