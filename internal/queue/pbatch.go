package queue

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ProviderBatch is the record of one provider batch: a chunk of a
// deadline batch's items run through a provider's Batch API (OpenAI
// Batch, Anthropic Message Batches). It is the items' checkpoint while the
// provider runs them, for hours: written with its input (an object of the
// ProviderBatchStore) before their staged messages are purged and before
// anything is created at the provider, and changed only by compare and
// set (Rev). docs/batch-api.md describes its states.
type ProviderBatch struct {
	// ID is the record's own ID ("pb-" and 16 hex digits), given to the
	// provider as the batch's metadata keyfleet_record where it takes
	// metadata (OpenAI), so that it is found again after a crash.
	ID       string `json:"id"`
	Batch    string `json:"batch"`
	Kind     string `json:"kind"`
	Provider string `json:"provider"`
	Scope    string `json:"scope,omitempty"`
	// Endpoint is the API path of its requests (one per provider batch).
	Endpoint string `json:"endpoint"`
	// Credential is the key it is (or is to be) created with.
	Credential string `json:"credential"`
	State      string `json:"state"`
	// Subject, FirstSeq and LastSeq are the staged messages it took: those
	// of Subject stored from FirstSeq through LastSeq. Purged: they are
	// gone from the stream.
	Subject  string `json:"subject"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Purged   bool   `json:"purged,omitempty"`
	// Items is how many items it holds; Bytes the size of its input.
	Items int   `json:"items"`
	Bytes int64 `json:"bytes"`
	// Input and Manifest name its objects: the input as the provider gets
	// it (custom_id i is the i-th request) and the items in that order
	// (ProviderBatchItem lines).
	Input    string `json:"input"`
	Manifest string `json:"manifest"`
	// InputFileID is the uploaded input file (OpenAI).
	InputFileID string `json:"input_file_id,omitempty"`
	// ProviderID is the provider's batch ID once it is known.
	ProviderID string `json:"provider_id,omitempty"`
	// Status is the provider's status as last polled; Completed and Failed
	// its request counts.
	Status    string `json:"status,omitempty"`
	Completed int64  `json:"completed"`
	Failed    int64  `json:"failed"`
	// Deadline is the batch's when the record was written.
	Deadline time.Time `json:"deadline"`
	// CreatedAt: the record's writing; CreatingAt: the last attempt at
	// creating it at the provider began (a crash after it is resolved by
	// finding the provider's batch); SubmittedAt: the provider's batch is
	// known; EndedAt: it ended at the provider.
	CreatedAt   time.Time `json:"created_at"`
	CreatingAt  time.Time `json:"creating_at,omitzero"`
	SubmittedAt time.Time `json:"submitted_at,omitzero"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Attempts counts the attempts at creating it at the provider.
	Attempts int `json:"attempts,omitempty"`
	// Cancel says why keyfleet cancelled it at the provider: CancelDeadline
	// or CancelBatch ("": it did not), CancelAt when.
	Cancel   string    `json:"cancel,omitempty"`
	CancelAt time.Time `json:"cancel_at,omitzero"`
	// GaveUpAt: keyfleet stopped waiting for the provider to end a cancel
	// for the deadline (half the margin after it) and its items without a
	// result went to real time; from then on none of its results is
	// recorded (PBLate).
	GaveUpAt time.Time `json:"gave_up_at,omitzero"`
	// Error is the last error met (the provider's refusal, say).
	Error string `json:"error,omitempty"`
	// Split is the rest of the record's items, cut off to fit a budget
	// and not yet in a record of its own: while it is set, those items are
	// held by its objects (docs/batch-api.md, "Spend and budgets").
	Split *ProviderBatchSplit `json:"split,omitempty"`
	// What was recorded of its items once it ended: results of succeeded
	// and failed requests, items sent back to real time, items cancelled.
	Succeeded int `json:"succeeded"`
	FailedN   int `json:"failed_items"`
	RealTime  int `json:"real_time"`
	Cancelled int `json:"cancelled"`
	// SpentTwice counts the requests the provider finished whose items
	// had gone to real time meanwhile (GaveUpAt): paid through the Batch
	// API and again in real time, recorded once (real time's result).
	SpentTwice int `json:"spent_twice,omitempty"`
	// Rev is the record's revision (not stored).
	Rev uint64 `json:"-"`
}

// ProviderBatchSplit is the part of a staged record cut off from it: the
// record it is to become (its ID, its staged messages' range, its items
// and input size, its objects, written before the cut).
type ProviderBatchSplit struct {
	ID       string `json:"id"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Items    int    `json:"items"`
	Bytes    int64  `json:"bytes"`
	Input    string `json:"input"`
	Manifest string `json:"manifest"`
}

// States of a ProviderBatch.
const (
	// PBStaged: written; its messages may still be in the stream; nothing
	// created at the provider (an OpenAI input file may be uploaded).
	PBStaged = "staged"
	// PBCreating: its creation at the provider began and its outcome is not
	// known: found again (or not) before anything else is done.
	PBCreating = "creating"
	// PBSubmitted: running at the provider (ProviderID), polled.
	PBSubmitted = "submitted"
	// PBCancelling: keyfleet cancelled it at the provider; polled until it
	// ends.
	PBCancelling = "cancelling"
	// PBLate: cancelled for the deadline, it did not end within half the
	// margin: its items without a result went to real time (GaveUpAt);
	// polled until it ends, then collected for what it cost alone.
	PBLate = "late"
	// PBCollecting: ended at the provider: its results are being recorded.
	PBCollecting = "collecting"
	// PBFallback: never to be created: its items are being sent to real time
	// (or recorded cancelled).
	PBFallback = "fallback"
	// PBDone: every item has a result, a real-time message, or a
	// cancelled result.
	PBDone = "done"
)

// Why keyfleet cancels a provider batch (ProviderBatch.Cancel).
const (
	CancelDeadline = "deadline"
	CancelBatch    = "batch"
)

// Active reports whether the record is not done.
func (p ProviderBatch) Active() bool { return p.State != PBDone }

// ProviderBatchItem is one line of a provider batch's manifest: the item
// whose request is the input's line of the same index (custom_id), the
// stream sequence of its staged message and its estimated cost.
type ProviderBatchItem struct {
	ID   string `json:"id"`
	Seq  uint64 `json:"seq"`
	Cost int64  `json:"cost,omitempty"`
}

// ErrNoProviderBatch: no such record (or none can be, the store not
// existing yet).
var ErrNoProviderBatch = errors.New("queue: no such provider batch")

// ProviderBatchStore holds the provider batch records (a KV bucket) and
// their inputs and manifests (an object store):
//
//	KV  <Stream>_PBATCHES   <kvKey(batch)>.<record ID>
//	OBJ <Stream>_PBINPUT    <record ID>.<nonce>.input, .manifest
type ProviderBatchStore struct {
	q   *Queue
	kv  jetstream.KeyValue
	obs jetstream.ObjectStore
}

func (q *Queue) pbBucket() string   { return q.cfg.Stream + "_PBATCHES" }
func (q *Queue) pbObjects() string  { return q.cfg.Stream + "_PBINPUT" }
func pbKey(batch, id string) string { return kvKey(batch) + "." + id }

// OpenProviderBatches creates the store when it does not exist (a worker
// running provider batches) and opens it.
func (q *Queue) OpenProviderBatches(ctx context.Context) (*ProviderBatchStore, error) {
	storage := jetstream.FileStorage
	if q.cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err := ensureBucket(ctx, q.cfg.RequestTimeout, q.js, q.update, jetstream.KeyValueConfig{
		Bucket:      q.pbBucket(),
		Description: "keyfleet provider batches: the checkpoint of items run through a Batch API",
		Storage:     storage,
		Replicas:    q.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: provider batch bucket %s: %w", q.pbBucket(), err)
	}
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	obs, err := q.js.ObjectStore(sctx, q.pbObjects())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = q.js.CreateObjectStore(sctx, jetstream.ObjectStoreConfig{
			Bucket:      q.pbObjects(),
			Description: "keyfleet provider batches' inputs and manifests",
			Storage:     storage,
			Replicas:    q.cfg.Replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = q.js.ObjectStore(sctx, q.pbObjects())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("queue: provider batch objects %s: %w", q.pbObjects(), noAnswer(ctx, q.cfg.RequestTimeout, err))
	}
	return &ProviderBatchStore{q: q, kv: kv, obs: obs}, nil
}

// existingProviderBatches opens the store if it exists (nil, nil when it
// does not: no batch ever had a deadline), without creating anything.
func (q *Queue) existingProviderBatches(ctx context.Context) (*ProviderBatchStore, error) {
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	kv, err := q.js.KeyValue(sctx, q.pbBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: provider batch bucket %s: %w", q.pbBucket(), err)
	}
	obs, err := q.js.ObjectStore(sctx, q.pbObjects())
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("queue: provider batch objects %s: %w", q.pbObjects(), err)
	}
	return &ProviderBatchStore{q: q, kv: kv, obs: obs}, nil
}

// ProviderBatches lists the provider batch records of batch ("" for every
// batch), oldest first; none when the store does not exist. It creates
// nothing (a producer reads with it).
func (q *Queue) ProviderBatches(ctx context.Context, batch string) ([]ProviderBatch, error) {
	s, err := q.existingProviderBatches(ctx)
	if s == nil || err != nil {
		return nil, err
	}
	return s.List(ctx, batch)
}

// Create writes a new record; jetstream.ErrKeyExists when one of its ID
// exists (another worker wrote it first). It sets p.Rev.
func (s *ProviderBatchStore) Create(ctx context.Context, p *ProviderBatch) error {
	p.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	rev, err := s.kv.Create(ctx, pbKey(p.Batch, p.ID), data)
	if err != nil {
		return fmt.Errorf("queue: create provider batch record %s: %w", p.ID, err)
	}
	p.Rev = rev
	return nil
}

// ErrStale: the record changed since it was read (Update's compare and
// set lost).
var ErrStale = errors.New("queue: the provider batch record changed meanwhile")

// Update writes p if the stored record is still at p.Rev (ErrStale
// otherwise), and sets p.Rev.
func (s *ProviderBatchStore) Update(ctx context.Context, p *ProviderBatch) error {
	p.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	rev, err := s.kv.Update(ctx, pbKey(p.Batch, p.ID), data, p.Rev)
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		return fmt.Errorf("%w: %s", ErrStale, p.ID)
	}
	if err != nil {
		return fmt.Errorf("queue: update provider batch record %s: %w", p.ID, err)
	}
	p.Rev = rev
	return nil
}

// Get reads a record; ErrNoProviderBatch when there is none.
func (s *ProviderBatchStore) Get(ctx context.Context, batch, id string) (ProviderBatch, error) {
	e, err := s.kv.Get(ctx, pbKey(batch, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ProviderBatch{}, fmt.Errorf("%w: %s", ErrNoProviderBatch, id)
	}
	if err != nil {
		return ProviderBatch{}, fmt.Errorf("queue: read provider batch record %s: %w", id, err)
	}
	var p ProviderBatch
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return ProviderBatch{}, fmt.Errorf("queue: provider batch record %s: %w", id, err)
	}
	p.Rev = e.Revision()
	return p, nil
}

// List reads the records of batch ("" for all), oldest first.
func (s *ProviderBatchStore) List(ctx context.Context, batch string) ([]ProviderBatch, error) {
	filter := ">"
	if batch != "" {
		filter = kvKey(batch) + ".>"
	}
	keys, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("queue: list provider batch records: %w", err)
	}
	var out []ProviderBatch
	for key := range keys.Keys() {
		b, id, ok := strings.Cut(key, ".")
		if !ok {
			continue
		}
		bid, err := batchFromKey(b)
		if err != nil {
			continue
		}
		p, err := s.Get(ctx, bid, id)
		if errors.Is(err, ErrNoProviderBatch) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b ProviderBatch) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Delete removes a record and its objects (those of its split too).
func (s *ProviderBatchStore) Delete(ctx context.Context, p ProviderBatch) error {
	s.DeleteObjects(ctx, p)
	if p.Split != nil {
		s.DeleteObjects(ctx, ProviderBatch{Input: p.Split.Input, Manifest: p.Split.Manifest})
	}
	if err := s.kv.Purge(ctx, pbKey(p.Batch, p.ID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("queue: delete provider batch record %s: %w", p.ID, err)
	}
	return nil
}

// Watch calls fn with every record and then every change (a deleted
// record comes with State "" and its ID and Batch), then caughtUp once the
// records that existed are in, until ctx ends.
func (s *ProviderBatchStore) Watch(ctx context.Context, fn func(ProviderBatch), caughtUp func()) error {
	return watchKV(ctx, s.kv, "provider batches", func(e jetstream.KeyValueEntry) (ProviderBatch, bool) {
		var p ProviderBatch
		if e.Operation() != jetstream.KeyValuePut {
			b, id, _ := strings.Cut(e.Key(), ".")
			bid, _ := batchFromKey(b)
			p = ProviderBatch{ID: id, Batch: bid}
		} else if err := json.Unmarshal(e.Value(), &p); err != nil {
			return p, false
		}
		p.Rev = e.Revision()
		return p, true
	}, fn, caughtUp)
}

// PutObject stores an object (an input or a manifest) from r.
func (s *ProviderBatchStore) PutObject(ctx context.Context, name string, r io.Reader) (int64, error) {
	info, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: name}, r)
	if err != nil {
		return 0, fmt.Errorf("queue: store object %s: %w", name, err)
	}
	return int64(info.Size), nil
}

// Object opens an object for reading; the caller closes it.
func (s *ProviderBatchStore) Object(ctx context.Context, name string) (io.ReadCloser, error) {
	if s.obs == nil {
		return nil, fmt.Errorf("queue: object %s: %w", name, jetstream.ErrObjectNotFound)
	}
	r, err := s.obs.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("queue: object %s: %w", name, err)
	}
	return r, nil
}

// DeleteObjects removes a record's input and manifest (those already gone
// are no matter).
func (s *ProviderBatchStore) DeleteObjects(ctx context.Context, p ProviderBatch) {
	if s.obs == nil {
		return
	}
	for _, name := range []string{p.Input, p.Manifest} {
		if name != "" {
			_ = s.obs.Delete(ctx, name)
		}
	}
}

// ReadManifest calls fn with each item of a record's manifest, in order
// (index i is custom_id i's).
func (s *ProviderBatchStore) ReadManifest(ctx context.Context, p ProviderBatch, fn func(i int, it ProviderBatchItem) error) error {
	r, err := s.Object(ctx, p.Manifest)
	if err != nil {
		return err
	}
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4*MaxIDLen+1024)
	for i := 0; sc.Scan(); i++ {
		var it ProviderBatchItem
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			return fmt.Errorf("queue: manifest of %s, line %d: %w", p.ID, i+1, err)
		}
		if err := fn(i, it); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("queue: manifest of %s: %w", p.ID, err)
	}
	return nil
}

// heldByProviderBatches calls fn with the ID of every item of batch that
// an active provider batch record holds.
func (q *Queue) heldByProviderBatches(ctx context.Context, batch string, fn func(id string) error) error {
	s, err := q.existingProviderBatches(ctx)
	if s == nil || err != nil {
		return err
	}
	recs, err := s.List(ctx, batch)
	if err != nil {
		return err
	}
	for _, p := range recs {
		if !p.Active() {
			continue
		}
		if err := s.ReadManifest(ctx, p, func(_ int, it ProviderBatchItem) error { return fn(it.ID) }); err != nil {
			return err
		}
		if p.Split != nil {
			rest := ProviderBatch{ID: p.Split.ID, Manifest: p.Split.Manifest}
			if err := s.ReadManifest(ctx, rest, func(_ int, it ProviderBatchItem) error { return fn(it.ID) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// providerBatchesActive reports whether batch has an active provider
// batch record.
func (q *Queue) providerBatchesActive(ctx context.Context, batch string) (bool, error) {
	s, err := q.existingProviderBatches(ctx)
	if s == nil || err != nil {
		return false, err
	}
	recs, err := s.List(ctx, batch)
	if err != nil {
		return true, err
	}
	return slices.ContainsFunc(recs, ProviderBatch.Active), nil
}

// deleteProviderBatches deletes batch's records (its batch record is
// gone).
func (q *Queue) deleteProviderBatches(ctx context.Context, batch string) {
	s, err := q.existingProviderBatches(ctx)
	if s == nil || err != nil {
		return
	}
	recs, err := s.List(ctx, batch)
	if err != nil {
		return
	}
	for _, p := range recs {
		_ = s.Delete(ctx, p)
	}
}
