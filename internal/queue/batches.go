package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// BatchInfo is a batch's record, written by enqueue: how many distinct
// items the batch holds, so that its progress can be shown without the
// input file. The results stream says how many are done.
type BatchInfo struct {
	ID string `json:"id"`
	// Kind of its items; several enqueues of different kinds give them
	// all, comma separated.
	Kind string `json:"kind"`
	// Scopes are the scopes its items have (pool.scope), sorted; each is a
	// lane of its own (Lanes). Items without a scope have the batch's
	// first lane.
	Scopes []string `json:"scopes,omitempty"`
	// Total counts the items the server stored as new: an item enqueued
	// again inside the duplicate window is a duplicate and adds nothing,
	// so a batch enqueued in several runs adds up correctly.
	Total int64 `json:"total"`
	// EnqueuedAt is the first enqueue's time, UpdatedAt the last one that
	// added items.
	EnqueuedAt time.Time `json:"enqueued_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	// Priority orders batches: 1 first, 5 last (0 in records written
	// before priorities: PriorityDefault). Weight shares the keys among
	// batches of one priority (0 in old records: WeightDefault).
	Priority int `json:"priority,omitempty"`
	Weight   int `json:"weight,omitempty"`
	// State is what an operator made of the batch: BatchRunning (also ""
	// in old records), BatchPaused or BatchCancelled. Whether it is done
	// is not recorded: its results say so.
	State string `json:"state,omitempty"`
	// History records each change of state: what, when, by whom.
	History []BatchEvent `json:"history,omitempty"`
	// PausedReason says why a paused batch is paused: "" (an operator),
	// spend.ReasonBudget or spend.ReasonTenantBudget (its budget, or its
	// tenant's of the period, cannot cover its next start).
	PausedReason string `json:"paused_reason,omitempty"`
	// Tenant is the team the batch belongs to ("" none): tenants share the
	// keys by weight before their batches do.
	Tenant string `json:"tenant,omitempty"`
	// Budget bounds what the batch spends, fleet-wide (nil: none); the
	// ledger in Redis (spend.Ledger) holds it and what is spent.
	Budget *spend.Amount `json:"budget,omitempty"`
	// Deadline, when set, is when the batch's items enqueued with a
	// deadline must be done by: they run through the Provider's Batch
	// API (internal/batchapi), and those not back by the deadline less
	// jobs.batch_api.margin run in real time. The earliest deadline of
	// the batch's enqueues.
	Deadline time.Time `json:"deadline,omitzero"`
	// Provider is the Batch API's provider (openai, anthropic) of a batch
	// with a deadline.
	Provider string `json:"provider,omitempty"`
	// Rev is the record's revision in the bucket (not stored): every
	// change has a higher one.
	Rev uint64 `json:"-"`
	// Deleted (not stored): a watch saw the record deleted (the batch
	// holds nothing any more: SweepBatchRecords); only ID and Rev are set.
	Deleted bool `json:"-"`
}

// BatchEvent is one change of a batch's state.
type BatchEvent struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"` // pause, resume, cancel
	By     string    `json:"by"`     // user@host of the command, or the API's caller
	// Reason is why a pause (or the resume that undid it) that no
	// operator made was made: budget, tenant-budget ("" for an
	// operator's).
	Reason string `json:"reason,omitempty"`
}

// Batch states (BatchInfo.State).
const (
	BatchRunning   = "running"
	BatchPaused    = "paused"
	BatchCancelled = "cancelled"
)

// Priorities and weights of a batch. A batch's priority is its items'
// place among the pool's waiters, so the pool's range is the batch's.
const (
	PriorityFirst   = creds.PriorityFirst
	PriorityLast    = creds.PriorityLast
	PriorityDefault = creds.PriorityDefault
	WeightMin       = 1
	WeightMax       = 1000
	WeightDefault   = 1
)

// Prio is the batch's priority, PriorityDefault for an old record.
func (b BatchInfo) Prio() int { return cmp.Or(b.Priority, PriorityDefault) }

// Wt is the batch's weight, WeightDefault for an old record.
func (b BatchInfo) Wt() int { return cmp.Or(b.Weight, WeightDefault) }

// Status is the batch's state, BatchRunning for an old record.
func (b BatchInfo) Status() string { return cmp.Or(b.State, BatchRunning) }

// maxBatchUpdateTries bounds the compare-and-set retries of AddToBatch
// (each lost race means another producer added to the same batch).
const maxBatchUpdateTries = 20

// BatchOption changes a batch's record as AddToBatch writes it.
type BatchOption func(*BatchInfo)

// WithPriority sets the batch's priority (0: keep the record's).
func WithPriority(p int) BatchOption {
	return func(b *BatchInfo) {
		if p != 0 {
			b.Priority = p
		}
	}
}

// WithWeight sets the batch's weight (0: keep the record's).
func WithWeight(w int) BatchOption {
	return func(b *BatchInfo) {
		if w != 0 {
			b.Weight = w
		}
	}
}

// WithTenant makes the batch the tenant's ("": keep the record's).
func WithTenant(tenant string) BatchOption {
	return func(b *BatchInfo) {
		if tenant != "" {
			b.Tenant = tenant
		}
	}
}

// WithBudget sets the batch's budget (nil: keep the record's).
func WithBudget(budget *spend.Amount) BatchOption {
	return func(b *BatchInfo) {
		if budget != nil {
			v := *budget
			b.Budget = &v
		}
	}
}

// WithScopes adds scopes its items have to the batch's record (those it
// holds already stay).
func WithScopes(scopes ...string) BatchOption {
	return func(b *BatchInfo) {
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
	return func(b *BatchInfo) {
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
func (q *Queue) Batch(ctx context.Context, batch string) (BatchInfo, error) {
	e, err := q.batches.Get(ctx, kvKey(batch))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return BatchInfo{}, fmt.Errorf("%w: %q", ErrNoBatch, batch)
	}
	if err != nil {
		return BatchInfo{}, fmt.Errorf("queue: read batch record %q: %w", batch, err)
	}
	var b BatchInfo
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		return BatchInfo{}, fmt.Errorf("queue: batch record %q: %w", batch, err)
	}
	b.Rev = e.Revision()
	return b, nil
}

// AddToBatch adds n new items of kind to batch's record, creating it on the
// first enqueue, and applies opts. Concurrent enqueues of the same batch
// add up: the record is updated with a compare-and-set.
func (q *Queue) AddToBatch(ctx context.Context, batch, kind string, n int, opts ...BatchOption) (BatchInfo, error) {
	key := kvKey(batch)
	for range maxBatchUpdateTries {
		now := time.Now().UTC()
		e, err := q.batches.Get(ctx, key)
		var b BatchInfo
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			b = BatchInfo{ID: batch, EnqueuedAt: now}
		case err != nil:
			return BatchInfo{}, fmt.Errorf("queue: read batch record %q: %w", batch, err)
		default:
			if err := json.Unmarshal(e.Value(), &b); err != nil {
				return BatchInfo{}, fmt.Errorf("queue: batch record %q: %w", batch, err)
			}
			rev = e.Revision()
		}
		b.Total += int64(n)
		b.Kind = addKind(b.Kind, kind)
		b.UpdatedAt = now
		for _, o := range opts {
			o(&b)
		}
		data, err := json.Marshal(b)
		if err != nil {
			return BatchInfo{}, fmt.Errorf("queue: encode batch record %q: %w", batch, err)
		}
		if rev == 0 {
			_, err = q.batches.Create(ctx, key, data)
		} else {
			_, err = q.batches.Update(ctx, key, data, rev)
		}
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return BatchInfo{}, fmt.Errorf("queue: write batch record %q: %w", batch, err)
		}
		// Another enqueue of the batch got there first: read it again.
	}
	return BatchInfo{}, fmt.Errorf("queue: write batch record %q: gave up after %d concurrent updates", batch, maxBatchUpdateTries)
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// addKind adds kind to a comma-separated, sorted list of kinds.
func addKind(kinds, kind string) string {
	if kinds == "" {
		return kind
	}
	list := strings.Split(kinds, ",")
	if kind == "" || slices.Contains(list, kind) {
		return kinds
	}
	list = append(list, kind)
	sort.Strings(list)
	return strings.Join(list, ",")
}

// Batches lists the batch records, newest first.
func (q *Queue) Batches(ctx context.Context) ([]BatchInfo, error) {
	out, err := listKV[BatchInfo](ctx, q.batches, "batches", "batch record")
	if err != nil {
		return nil, err
	}
	sortBatches(out)
	return out, nil
}

func sortBatches(bs []BatchInfo) {
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
func (q *Queue) WatchBatches(ctx context.Context, fn func(BatchInfo)) error {
	return q.WatchBatchesCaughtUp(ctx, fn, nil)
}

// WatchBatchesCaughtUp is WatchBatches that also calls caughtUp (when not
// nil) once every record that existed when it began has been passed to fn.
func (q *Queue) WatchBatchesCaughtUp(ctx context.Context, fn func(BatchInfo), caughtUp func()) error {
	w, err := q.batches.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("queue: watch batches: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("queue: watch batches: the watch ended")
			}
			if e == nil {
				if caughtUp != nil {
					caughtUp() // the initial values are all in
				}
				continue
			}
			var b BatchInfo
			if e.Operation() != jetstream.KeyValuePut {
				id, err := batchFromKey(e.Key())
				if err != nil {
					continue
				}
				b = BatchInfo{ID: id, Deleted: true}
			} else if err := json.Unmarshal(e.Value(), &b); err != nil {
				continue
			}
			b.Rev = e.Revision()
			fn(b)
		}
	}
}
