package batchapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// stageIdle is how long a staging pass keeps its claim when done: the
// fleet looks at a batch's staged items at most this often. A worker that
// found nothing staged in a batch looks again when the batch's record
// changes (an enqueue changes it after publishing, and every second while
// it publishes), or after stageRecheck.
const (
	stageIdle    = time.Second
	stageRecheck = time.Minute
)

// stage turns batch b's staged items into provider batch records, one
// worker of the fleet at a time: each staging subject's messages, read in
// stream order, fill provider batches within the provider's bounds; each
// record is written with its input before its messages are purged. Items
// staged in a cancelled batch are recorded cancelled instead.
func (r *Runner) stage(ctx context.Context, b kftype.BatchInfo) (err error) {
	key := r.cl.stageKey(b.ID)
	if !r.due(key) {
		return nil
	}
	r.mu.Lock()
	e, seen := r.empty[b.ID]
	r.mu.Unlock()
	if seen && e.rev == b.Rev && e.change.Equal(b.LastChange()) && time.Since(e.at) < stageRecheck {
		return nil
	}
	ok, err := r.cl.take(ctx, key, r.o.WorkTTL)
	if err != nil || !ok {
		r.later(key, stageIdle)
		return err
	}
	stopKeep := r.cl.keep(ctx, key, r.o.WorkTTL)
	// Held on for stageIdle when done: the claim spaces the fleet's looks.
	defer func() {
		stopKeep()
		if !errors.Is(err, errCrash) {
			_, _ = r.cl.extend(context.WithoutCancel(ctx), key, stageIdle)
		}
	}()
	subjects, err := r.q.StagedSubjects(ctx, b.ID)
	if err != nil {
		return err
	}
	if len(subjects) == 0 {
		r.mu.Lock()
		r.empty[b.ID] = emptyAt{rev: b.Rev, change: b.LastChange(), at: time.Now()}
		r.mu.Unlock()
		return nil
	}
	settled := !r.now().Before(b.UpdatedAt.Add(r.o.Settle))
	var errs []error
	for _, subj := range slices.Sorted(maps.Keys(subjects)) {
		if err := r.stageSubject(ctx, b, subj, subjects[subj], settled); errors.Is(err, errCrash) {
			return err
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stageSubject makes the records of one staging subject's messages.
func (r *Runner) stageSubject(ctx context.Context, b kftype.BatchInfo, subject string, count uint64, settled bool) error {
	kind, scope, endpoint, err := r.q.StagingParts(b.ID, subject)
	if err != nil {
		return err
	}
	if b.State == kftype.BatchCancelled {
		return r.cancelStaged(ctx, b, subject)
	}
	prov := r.kindProvider(kind)
	if prov == "" {
		r.noteOnce("kind:"+kind, func() {
			r.log.Warn("items staged for a Batch API are of a kind this worker's configuration gives no provider with one: left to a worker that has it",
				zap.String("batch", b.ID), zap.String("kind", kind))
		})
		return nil
	}
	spec, _ := provider.Lookup(prov)
	endpoint = cmp.Or(endpoint, spec.Endpoint)
	keys := r.keys(kind)
	if len(keys) == 0 {
		r.noteOnce("keys:"+kind, func() {
			r.log.Warn("no key of this worker may run the kind's provider batches", zap.String("kind", kind))
		})
		return nil
	}
	r.mu.Lock()
	for _, p := range r.records {
		if p.Subject == subject && p.Active() && !p.Purged {
			r.mu.Unlock()
			return nil // its messages are purged first (its own step)
		}
	}
	r.mu.Unlock()
	bounds := r.o.Bounds[prov]
	store, err := r.openStore(ctx)
	if err != nil {
		return err
	}
	var carry *queue.StagedMsg
	seq := uint64(1)
	left := count
	for chunkPlan(left, bounds, settled) {
		first := carry
		if first == nil {
			if first, err = r.q.NextStaged(ctx, subject, seq); err != nil || first == nil {
				return err
			}
		}
		carry = nil
		id := recordID(r.q.Config().Stream, subject, first.Seq)
		n := nonce()
		p := queue.ProviderBatch{ID: id, Batch: b.ID, Kind: kind, Provider: prov, Scope: scope, Endpoint: endpoint,
			Credential: r.pickKey(keys), State: queue.PBStaged, Subject: subject, Deadline: b.Deadline,
			Input: id + "." + n + ".input", Manifest: id + "." + n + ".manifest", CreatedAt: r.now().UTC()}
		c := newChunk(ctx, store, p.Input, prov, endpoint, bounds)
		m := first
		for m != nil {
			l := inputLine(prov, c.n, endpoint, m.Item.Payload)
			if !c.fits(len(l)) {
				if c.n == 0 {
					c.abort(ctx)
					return fmt.Errorf("item %q of %d bytes does not fit a provider batch (%d bytes at most)", m.Item.ID, len(l), bounds.MaxBytes)
				}
				carry = m
				break
			}
			if err := c.add(m, l); err != nil {
				c.abort(ctx)
				return err
			}
			if c.full() {
				break
			}
			if m, err = r.q.NextStaged(ctx, subject, m.Seq+1); err != nil {
				c.abort(ctx)
				return err
			}
		}
		full := carry != nil || c.full()
		if !full && !settled {
			c.abort(ctx)
			return nil
		}
		if err := c.finish(ctx, p.Manifest); err != nil {
			store.DeleteObjects(ctx, p)
			return err
		}
		p.FirstSeq, p.LastSeq, p.Items, p.Bytes = c.first, c.last, c.n, c.size
		if err := store.Create(ctx, &p); err != nil {
			store.DeleteObjects(ctx, p)
			if errors.Is(err, jetstream.ErrKeyExists) {
				return nil // another worker made this record first
			}
			return err
		}
		r.seen(p)
		if r.crashed("record-written") {
			return errCrash
		}
		r.log.Info("items staged into a provider batch record", zap.String("batch", b.ID), zap.String("record", p.ID),
			zap.String("credential", p.Credential), zap.Int("items", p.Items), zap.Int64("bytes", p.Bytes),
			zap.Uint64("first_seq", p.FirstSeq), zap.Uint64("last_seq", p.LastSeq))
		if err := r.purge(ctx, store, &p); err != nil {
			return err
		}
		seq = p.LastSeq + 1
		left -= min(left, uint64(p.Items))
	}
	return nil
}

// purge deletes the staged messages a record took (it holds them now) and
// says so in the record. Done again after a crash, it deletes nothing
// more.
func (r *Runner) purge(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch) error {
	if err := r.q.PurgeStaged(ctx, p.Subject, p.LastSeq); err != nil {
		return err
	}
	p.Purged = true
	if err := store.Update(ctx, p); err != nil {
		return err
	}
	r.seen(*p)
	return nil
}

// pickKey is the least loaded key: the one with the fewest active
// records, then the fewest records, then the first.
func (r *Runner) pickKey(keys []string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	active, all := map[string]int{}, map[string]int{}
	for _, p := range r.records {
		all[p.Credential]++
		if p.Active() {
			active[p.Credential]++
		}
	}
	best := keys[0]
	for _, k := range keys[1:] {
		if active[k] < active[best] || active[k] == active[best] && all[k] < all[best] {
			best = k
		}
	}
	return best
}

// cancelStaged records the staged items of a cancelled batch as
// cancelled and purges them.
func (r *Runner) cancelStaged(ctx context.Context, b kftype.BatchInfo, subject string) error {
	for seq := uint64(1); ; {
		var batch []kftype.Result
		last := uint64(0)
		for len(batch) < 256 {
			m, err := r.q.NextStaged(ctx, subject, seq)
			if err != nil {
				return err
			}
			if m == nil {
				break
			}
			batch = append(batch, cancelledResult(m.Item.ID, b.ID, m.Item.Kind, r.o.Owner, r.now()))
			seq, last = m.Seq+1, m.Seq
		}
		if len(batch) == 0 {
			return nil
		}
		if _, err := r.q.PutResultsIfAbsent(ctx, batch); err != nil {
			return err
		}
		if err := r.q.PurgeStaged(ctx, subject, last); err != nil {
			return err
		}
	}
}

// cancelledResult is the result of an item of a cancelled batch that
// never ran.
func cancelledResult(item, batch, kind, by string, at time.Time) kftype.Result {
	return kftype.Result{Item: item, Batch: batch, Kind: kind, Outcome: kftype.OutcomeCancelled,
		Error: "the batch was cancelled before the item ran", Worker: by, FinishedAt: at.UTC()}
}
