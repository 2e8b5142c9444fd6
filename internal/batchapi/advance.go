package batchapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// advance moves a record on by one step, under its claim (docs/batch-api.md
// draws the states):
//
//	staged ──▶ creating ──▶ submitted ──▶ (cancelling) ──▶ collecting ──▶ done
//	   │            └──(not created)──▶ staged   └──▶ late ──┘
//	   └──(deadline, a refusal, a cancelled batch)──▶ fallback ──▶ done
//
// A claim held on after a poll is the time until the record's next poll.
func (r *Runner) advance(ctx context.Context, p queue.ProviderBatch) (err error) {
	key := r.cl.recKey(p.ID)
	if !r.due(key) {
		return nil
	}
	b, ok := r.batch(p.Batch)
	if !ok {
		return nil // the batch's record is gone (or has no deadline): nothing to do
	}
	polling := isPolled(p.State)
	ttl := r.o.WorkTTL
	if polling {
		ttl = r.poll
	}
	got, err := r.cl.take(ctx, key, ttl)
	if err != nil || !got {
		if polling {
			r.later(key, min(r.poll, time.Second))
		}
		return err
	}
	var stopKeep func()
	if !polling {
		stopKeep = r.cl.keep(ctx, key, ttl)
	}
	defer func() {
		if stopKeep != nil {
			stopKeep()
		}
		if errors.Is(err, errCrash) {
			return // a crash leaves its claims to their TTL
		}
		if !isPolled(p.State) {
			r.cl.release(context.WithoutCancel(ctx), key)
		} else {
			// Polled next after the poll interval, by whichever worker.
			_, _ = r.cl.extend(context.WithoutCancel(ctx), key, r.poll)
		}
	}()
	store, err := r.openStore(ctx)
	if err != nil {
		return err
	}
	// The view may lag: the record as stored now.
	if p, err = store.Get(ctx, p.Batch, p.ID); err != nil {
		return err
	}
	r.seen(p)
	switch p.State {
	case queue.PBStaged:
		err = r.stepStaged(ctx, store, &p, b)
	case queue.PBCreating:
		err = r.stepCreating(ctx, store, &p)
	case queue.PBSubmitted, queue.PBCancelling, queue.PBLate:
		stopKeep = r.cl.keep(ctx, key, r.o.WorkTTL) // it may end and collect
		err = r.stepPoll(ctx, store, &p, b)
	case queue.PBCollecting:
		err = r.stepCollecting(ctx, store, &p)
	case queue.PBFallback:
		err = r.finish(ctx, store, &p, nil)
	}
	if errors.Is(err, queue.ErrStale) {
		return nil // another worker moved it meanwhile: the view catches up
	}
	return err
}

// isPolled reports whether a record in state runs at its provider: it is
// polled once per poll interval.
func isPolled(state string) bool {
	return state == queue.PBSubmitted || state == queue.PBCancelling || state == queue.PBLate
}

// stepCollecting records the results of an ended provider batch (again,
// after a crash part-way: what was recorded is not recorded twice).
func (r *Runner) stepCollecting(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch) error {
	if p.ProviderID == "" {
		return r.finish(ctx, store, p, nil)
	}
	a, err := r.api(p.Kind, p.Credential)
	if err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, callTimeout)
	rem, err := a.get(gctx, p.ProviderID)
	cancel()
	switch {
	case err == nil:
		return r.finish(ctx, store, p, &rem)
	case errStatus(p.Provider, err) == http.StatusNotFound:
		return r.finish(ctx, store, p, nil)
	}
	return err
}

// update writes p (compare and set) and takes it into the view.
func (r *Runner) update(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch) error {
	if err := store.Update(ctx, p); err != nil {
		return err
	}
	r.seen(*p)
	return nil
}

// stepStaged: the messages purged, the record is submitted, or sent to
// real time (the deadline has come) or recorded cancelled (a cancelled
// batch). A paused batch submits nothing, nor one whose budget cannot
// take the record's most spend now (spend.go; it may be cut to what the
// budget covers, split.go).
func (r *Runner) stepStaged(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, b kftype.BatchInfo) error {
	if p.Split != nil {
		// A cut to fit a budget did not end (a crash): its rest becomes a
		// record before anything else (split.go).
		if err := r.splitRest(ctx, store, p); err != nil {
			return err
		}
	}
	if !p.Purged {
		if err := r.purge(ctx, store, p); err != nil {
			return err
		}
	}
	switch {
	case b.State == kftype.BatchCancelled, r.deadlinePassed(*p, b):
		p.State = queue.PBFallback
		if err := r.update(ctx, store, p); err != nil {
			return err
		}
		return r.finish(ctx, store, p, nil)
	case b.State == kftype.BatchPaused:
		return nil
	}
	if ok, err := r.budget(ctx, store, p, b); err != nil || !ok {
		return err
	}
	return r.submit(ctx, store, p)
}

// submit creates p at the provider: OpenAI, its input uploaded as a file
// (kept in the record), then the batch with metadata keyfleet_record;
// Anthropic, the message batch, while the key's creation lock is held
// (how a creation with no answer is found again). The record says
// "creating" before the request goes: a crash, or an answer that never
// comes, leaves it so, and stepCreating finds the provider batch (or
// learns there is none) before anything else is done.
func (r *Runner) submit(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch) (err error) {
	a, err := r.api(p.Kind, p.Credential)
	if err != nil {
		return err
	}
	if p.Provider == provider.OpenAI && p.InputFileID == "" {
		in, err := store.Object(ctx, p.Input)
		if err != nil {
			return err
		}
		uctx, cancel := context.WithTimeout(ctx, transferTimeout)
		id, err := a.upload(uctx, p.ID, in)
		cancel()
		in.Close()
		if err != nil {
			return r.refused(ctx, store, p, err)
		}
		p.InputFileID = id
		if err := r.update(ctx, store, p); err != nil {
			return err
		}
		if r.crashed("uploaded") {
			return errCrash
		}
	}
	if p.Provider == provider.Anthropic {
		lock := r.cl.keyKey(p.Credential)
		got, err := r.cl.take(ctx, lock, r.o.WorkTTL)
		if err != nil || !got {
			r.later(r.cl.recKey(p.ID), time.Second)
			return err
		}
		defer r.cl.keep(ctx, lock, r.o.WorkTTL)()
		defer r.releaseUnlessCrashed(ctx, lock, &err)
		// Another record's creation on this key that is unresolved is
		// resolved first: at most one such creation per key at a time.
		if err := r.resolveKey(ctx, store, p.Credential, p.ID); err != nil {
			return err
		}
	}
	p.State, p.CreatingAt, p.Error = queue.PBCreating, r.now().UTC(), ""
	p.Attempts++
	if err := r.update(ctx, store, p); err != nil {
		return err
	}
	if r.crashed("creating") {
		return errCrash
	}
	var in io.ReadCloser = io.NopCloser(http.NoBody)
	if p.Provider == provider.Anthropic {
		if in, err = store.Object(ctx, p.Input); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, transferTimeout)
	rem, err := a.create(cctx, *p, in)
	cancel()
	in.Close()
	if err != nil {
		if errStatus(p.Provider, err) == 0 {
			// No answer: it may have been created. Found again, or not, by
			// stepCreating.
			r.log.Warn("creating a provider batch got no answer: it is looked for before anything else", zap.String("record", p.ID), r.errField(err))
			return nil
		}
		p.State = queue.PBStaged
		return r.refused(ctx, store, p, err)
	}
	if r.crashed("created") {
		return errCrash
	}
	return r.submitted(ctx, store, p, rem)
}

// submitted records the provider batch p was created as.
func (r *Runner) submitted(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, rem remote) error {
	p.State, p.ProviderID, p.Status, p.SubmittedAt, p.Error = queue.PBSubmitted, rem.ID, rem.Status, r.now().UTC(), ""
	if err := r.update(ctx, store, p); err != nil {
		return err
	}
	r.count(p.Provider, "created")
	r.log.Info("provider batch created", zap.String("batch", p.Batch), zap.String("record", p.ID),
		zap.String("provider_batch", p.ProviderID), zap.String("credential", p.Credential), zap.Int("items", p.Items))
	return nil
}

// refused handles a provider's refusal of an upload or a creation (an
// answer came: nothing was created): a key the provider refuses (401,
// 403) gives way to another; a request it refuses as such (another 4xx
// but 408, 409, 429) sends the items to real time, where each gets its
// own answer; anything else is tried again later.
func (r *Runner) refused(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, err error) error {
	status := errStatus(p.Provider, err)
	p.Error = r.scrub.String(err.Error())
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		keys := r.keys(p.Kind)
		next := p.Credential
		for i, k := range keys {
			if k == p.Credential {
				next = keys[(i+1)%len(keys)]
			}
		}
		r.log.Warn("the provider refused the key for a provider batch: trying the next key", zap.String("record", p.ID),
			zap.String("credential", p.Credential), zap.String("next", next), r.errField(err))
		p.Credential, p.InputFileID = next, ""
		r.later(r.cl.recKey(p.ID), 5*time.Second)
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusConflict && status != http.StatusTooManyRequests:
		r.log.Warn("the provider refused a provider batch: its items run in real time", zap.String("record", p.ID), r.errField(err))
		p.State = queue.PBFallback
		if uerr := r.update(ctx, store, p); uerr != nil {
			return uerr
		}
		return r.finish(ctx, store, p, nil)
	default:
		r.log.Warn("creating a provider batch failed: tried again later", zap.String("record", p.ID), zap.Int("status", status), r.errField(err))
		r.later(r.cl.recKey(p.ID), min(r.poll, 30*time.Second))
	}
	return r.update(ctx, store, p)
}

// stepCreating resolves a creation whose outcome is not known: the
// provider batch is looked for (OpenAI: the key's batches whose metadata
// names the record; Anthropic, under the key's creation lock: the key's
// message batch created since the creation began that no other record
// holds, of as many requests). Found, it is the record's; not found
// ResolveGrace after the creation began, the record is staged again and
// created anew.
func (r *Runner) stepCreating(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch) (err error) {
	if p.Provider == provider.Anthropic {
		lock := r.cl.keyKey(p.Credential)
		got, err := r.cl.take(ctx, lock, r.o.WorkTTL)
		if err != nil || !got {
			return err
		}
		defer r.cl.keep(ctx, lock, r.o.WorkTTL)()
		defer r.releaseUnlessCrashed(ctx, lock, &err)
	}
	_, err = r.resolve(ctx, store, p)
	return err
}

// releaseUnlessCrashed releases a claim when the work is over, unless a
// test crashed the runner (a dead worker's claims lapse by their TTL).
func (r *Runner) releaseUnlessCrashed(ctx context.Context, key string, err *error) {
	if !errors.Is(*err, errCrash) {
		r.cl.release(context.WithoutCancel(ctx), key)
	}
}

// resolveKey resolves the unresolved creations of other records on a key
// (the caller holds the key's creation lock).
func (r *Runner) resolveKey(ctx context.Context, store *queue.ProviderBatchStore, credential, except string) error {
	all, err := store.List(ctx, "")
	if err != nil {
		return err
	}
	for _, o := range all {
		if o.ID == except || o.Credential != credential || o.State != queue.PBCreating || o.Provider != provider.Anthropic {
			continue
		}
		if resolved, err := r.resolve(ctx, store, &o); err != nil {
			return err
		} else if !resolved {
			return fmt.Errorf("record %s's creation on key %s is not resolved yet: no other is created on the key meanwhile", o.ID, credential)
		}
	}
	return nil
}

// resolve looks for p's provider batch; it reports whether p is resolved
// (found, or staged again).
func (r *Runner) resolve(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch) (bool, error) {
	a, err := r.api(p.Kind, p.Credential)
	if err != nil {
		return false, err
	}
	held := map[string]bool{}
	if p.Provider == provider.Anthropic {
		all, err := store.List(ctx, "")
		if err != nil {
			return false, err
		}
		for _, o := range all {
			if o.ProviderID != "" {
				held[o.ProviderID] = true
			}
		}
	}
	since := p.CreatingAt.Add(-createSkew)
	var found []remote // newest first
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	err = a.list(lctx, func(rem remote) bool {
		if rem.CreatedAt.Before(since) {
			return false
		}
		switch {
		case p.Provider == provider.OpenAI && rem.Record == p.ID,
			p.Provider == provider.Anthropic && !held[rem.ID] && rem.Total == int64(p.Items):
			found = append(found, rem)
		}
		return true
	})
	cancel()
	if err != nil {
		return false, err
	}
	if len(found) > 0 {
		rem := found[len(found)-1] // the first created
		for _, dup := range found[:len(found)-1] {
			if p.Provider == provider.OpenAI { // named by the metadata: ours for sure
				r.log.Error("a second provider batch of one record found: cancelling it", zap.String("record", p.ID), zap.String("provider_batch", dup.ID))
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				_, _ = a.cancel(cctx, dup.ID)
				cancel()
			}
		}
		r.log.Info("a creation without an answer found its provider batch", zap.String("record", p.ID), zap.String("provider_batch", rem.ID))
		return true, r.submitted(ctx, store, p, rem)
	}
	if r.now().Sub(p.CreatingAt) < r.o.ResolveGrace {
		r.later(r.cl.recKey(p.ID), min(r.poll, 10*time.Second))
		return false, nil
	}
	r.log.Warn("a creation without an answer made no provider batch: it is created again", zap.String("record", p.ID),
		zap.Time("creating_at", p.CreatingAt))
	p.State, p.Error = queue.PBStaged, "its creation got no answer and made no provider batch"
	return true, r.update(ctx, store, p)
}

// stepPoll reads a running provider batch: ended, its results are
// recorded; else it is cancelled when its batch was cancelled or its
// deadline (less the margin) has come, and given up on (giveUp) when a
// cancel for the deadline has not ended it within half the margin.
func (r *Runner) stepPoll(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, b kftype.BatchInfo) error {
	if p.State == queue.PBCancelling && !p.GaveUpAt.IsZero() {
		// A give-up began and did not end (a crash): it ends first.
		return r.giveUp(ctx, store, p)
	}
	a, err := r.api(p.Kind, p.Credential)
	if err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, callTimeout)
	rem, err := a.get(gctx, p.ProviderID)
	cancel()
	if err != nil {
		if s := errStatus(p.Provider, err); s == http.StatusNotFound {
			// Gone at the provider (deleted by hand): its items run in real time.
			p.State, p.Error = queue.PBCollecting, r.scrub.String(err.Error())
			return r.finish(ctx, store, p, nil)
		}
		return err
	}
	changed := rem.Status != p.Status || rem.Completed != p.Completed || rem.Failed != p.Failed
	p.Status, p.Completed, p.Failed = rem.Status, rem.Completed, rem.Failed
	if rem.Ended {
		p.State, p.EndedAt = queue.PBCollecting, r.now().UTC()
		if err := r.update(ctx, store, p); err != nil {
			return err
		}
		if r.crashed("ended") {
			return errCrash
		}
		return r.finish(ctx, store, p, &rem)
	}
	why := ""
	switch {
	case p.Cancel != "":
		if p.State == queue.PBCancelling && p.Cancel == queue.CancelDeadline && r.waitedEnough(*p, b) {
			r.log.Warn("a provider batch cancelled for the deadline has not ended within half the margin: its items without a result run in real time",
				zap.String("record", p.ID), zap.String("provider_batch", p.ProviderID), zap.String("status", rem.Status))
			p.GaveUpAt = r.now().UTC()
			p.Error = fmt.Sprintf("cancelled for the deadline at %s; still %s at %s: its items run in real time",
				p.CancelAt.Format(time.RFC3339), rem.Status, p.GaveUpAt.Format(time.RFC3339))
			if err := r.update(ctx, store, p); err != nil {
				return err
			}
			if r.crashed("gave-up") {
				return errCrash
			}
			return r.giveUp(ctx, store, p)
		}
	case b.State == kftype.BatchCancelled:
		why = queue.CancelBatch
	case r.deadlinePassed(*p, b):
		why = queue.CancelDeadline
	}
	if why != "" {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		crem, err := a.cancel(cctx, p.ProviderID)
		cancel()
		if err != nil && errStatus(p.Provider, err) == 0 {
			return err // tried again at the next poll
		}
		if err == nil {
			p.Status = crem.Status
		}
		p.State, p.Cancel, p.CancelAt = queue.PBCancelling, why, r.now().UTC()
		r.count(p.Provider, "cancelled")
		r.log.Info("provider batch cancelled", zap.String("record", p.ID), zap.String("provider_batch", p.ProviderID), zap.String("why", why))
		return r.update(ctx, store, p)
	}
	if changed {
		return r.update(ctx, store, p)
	}
	return nil
}
