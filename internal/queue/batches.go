package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// maxBatchUpdateTries bounds the compare-and-set retries of writeBatch
// (each lost race means another writer changed the same batch).
const maxBatchUpdateTries = 20

// BatchOption changes a batch's record as AddToBatch writes it.
type BatchOption func(*kftype.BatchInfo)

// WithPriority sets the batch's priority (0: keep the record's).
func WithPriority(p int) BatchOption {
	return func(b *kftype.BatchInfo) {
		if p != 0 {
			b.Priority = p
		}
	}
}

// WithWeight sets the batch's weight (0: keep the record's).
func WithWeight(w int) BatchOption {
	return func(b *kftype.BatchInfo) {
		if w != 0 {
			b.Weight = w
		}
	}
}

// WithTenant makes the batch the tenant's ("": keep the record's).
func WithTenant(tenant string) BatchOption {
	return func(b *kftype.BatchInfo) {
		if tenant != "" {
			b.Tenant = tenant
		}
	}
}

// WithBudget sets the batch's budget (nil: keep the record's).
func WithBudget(budget *spend.Amount) BatchOption {
	return func(b *kftype.BatchInfo) {
		if budget != nil {
			v := *budget
			b.Budget = &v
		}
	}
}

// WithScopes adds scopes its items have to the batch's record (those it
// holds already stay).
func WithScopes(scopes ...string) BatchOption {
	return func(b *kftype.BatchInfo) {
		for _, s := range scopes {
			if s == "" {
				continue
			}
			if i, found := slices.BinarySearch(b.Scopes, s); !found {
				b.Scopes = slices.Insert(b.Scopes, i, s)
			}
		}
	}
}

// WithDeadline gives the batch a deadline for its items run through the
// provider's Batch API (zero: none given; a later deadline than the
// record's keeps the record's).
func WithDeadline(deadline time.Time, provider string) BatchOption {
	return func(b *kftype.BatchInfo) {
		if deadline.IsZero() {
			return
		}
		if b.Deadline.IsZero() || deadline.Before(b.Deadline) {
			b.Deadline = deadline.UTC()
		}
		if b.Provider == "" {
			b.Provider = provider
		}
	}
}

// ErrNoBatch: the batch has no record.
var ErrNoBatch = errors.New("queue: no such batch")

// Batch reads batch's record (with its Rev); ErrNoBatch when there is none.
func (q *Queue) Batch(ctx context.Context, batch string) (kftype.BatchInfo, error) {
	e, err := q.batches.Get(ctx, kvKey(batch))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return kftype.BatchInfo{}, fmt.Errorf("%w: %q", ErrNoBatch, batch)
	}
	if err != nil {
		return kftype.BatchInfo{}, fmt.Errorf("queue: read batch record %q: %w", batch, err)
	}
	var b kftype.BatchInfo
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		return kftype.BatchInfo{}, fmt.Errorf("queue: batch record %q: %w", batch, err)
	}
	b.Rev = e.Revision()
	return b, nil
}

// AddToBatch adds n new items of kind to batch's record, creating it on the
// first enqueue, and applies opts. Concurrent enqueues of the same batch
// add up: the record is updated with a compare-and-set.
func (q *Queue) AddToBatch(ctx context.Context, batch, kind string, n int, opts ...BatchOption) (kftype.BatchInfo, error) {
	fresh := func() kftype.BatchInfo {
		return kftype.BatchInfo{ID: batch, Priority: kftype.PriorityDefault, Weight: kftype.WeightDefault, State: kftype.BatchRunning}
	}
	return q.writeBatch(ctx, batch, fresh, func(b *kftype.BatchInfo) error {
		now := time.Now().UTC()
		if b.Rev == 0 { // the first enqueue
			b.EnqueuedAt = now
		}
		b.Total += int64(n)
		b.Kinds = b.Kinds.Add(kind)
		b.UpdatedAt = now
		for _, o := range opts {
			o(b)
		}
		return nil
	})
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Batches lists the batch records, newest first.
func (q *Queue) Batches(ctx context.Context) ([]kftype.BatchInfo, error) {
	out, err := listKV[kftype.BatchInfo](ctx, q.batches, "batches", "batch record")
	if err != nil {
		return nil, err
	}
	sortBatches(out)
	return out, nil
}

func sortBatches(bs []kftype.BatchInfo) {
	sort.Slice(bs, func(i, j int) bool {
		if !bs[i].EnqueuedAt.Equal(bs[j].EnqueuedAt) {
			return bs[i].EnqueuedAt.After(bs[j].EnqueuedAt)
		}
		return bs[i].ID < bs[j].ID
	})
}

// WatchBatches calls fn with every batch record and then with every change,
// until ctx ends (it then returns nil) or the watch fails. A deleted
// record (SweepBatchRecords) comes as a BatchInfo with Deleted set.
func (q *Queue) WatchBatches(ctx context.Context, fn func(kftype.BatchInfo)) error {
	return q.WatchBatchesCaughtUp(ctx, fn, nil)
}

// WatchBatchesCaughtUp is WatchBatches that also calls caughtUp (when not
// nil) once every record that existed when it began has been passed to fn.
func (q *Queue) WatchBatchesCaughtUp(ctx context.Context, fn func(kftype.BatchInfo), caughtUp func()) error {
	return watchKV(ctx, q.batches, "batches", func(e jetstream.KeyValueEntry) (kftype.BatchInfo, bool) {
		var b kftype.BatchInfo
		if e.Operation() != jetstream.KeyValuePut {
			id, err := batchFromKey(e.Key())
			if err != nil {
				return b, false
			}
			b = kftype.BatchInfo{ID: id, Deleted: true}
		} else if err := json.Unmarshal(e.Value(), &b); err != nil {
			return b, false
		}
		b.Rev = e.Revision()
		return b, true
	}, fn, caughtUp)
}
