package creds

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Acquire leases a credential for a start of cost 1 (see AcquireCost).
func (p *Pool) Acquire(ctx context.Context, owner string) (*Lease, error) {
	return p.AcquireCost(ctx, owner, 1)
}

// AcquireCost leases a credential for a start of `cost` units (the
// estimate charged to its cost limits), waiting until one is usable or
// ctx ends. owner names the holder (a worker and slot) in stats.
//
// Waiting is fleet-wide and first come, first served: the waiter joins
// the pool's queue in Redis, and capacity freed anywhere (a release, a
// rest or window ending, a lease expiring, an admin change) is granted to
// the longest-waiting waiter that can use it by the script that frees it.
// Among usable credentials the least recently used is chosen. A waiter
// whose cost does not fit yet holds back the ones behind it that wait for
// the same keys (and scope), so a large cost is not starved by smaller
// ones; a waiter whose cost fits only disabled credentials holds nothing
// back: it gets ErrNeverFits.
//
// When ctx ends, AcquireCost returns an error matching ErrCanceled and
// ctx's error, and holds nothing: a lease granted meanwhile is handed on.
//
// Errors: ErrPoolEmpty when the pool has no credential this handle may
// use, a *CostError (ErrNeverFits) when cost is above a cost limit of
// every one of them, or of every one that is not disabled (also while it
// waits, when the credentials that take it are disabled), ErrClosed,
// ErrCanceled, or a Redis error.
func (p *Pool) AcquireCost(ctx context.Context, owner string, cost int64) (*Lease, error) {
	return p.AcquireWith(ctx, Request{Owner: owner, Cost: cost})
}

// Request is what an acquire asks for.
type Request struct {
	// Owner names the holder (a worker and slot) in stats. Required.
	Owner string
	// Cost is the start's estimated cost, charged to cost limits. Zero
	// means 1.
	Cost int64
	// Priority orders the fleet's waiters: 1 first, 5 last; within a
	// priority, first come, first served. Zero means PriorityDefault.
	Priority int
	// Scope is the start's scope (its model, say): the credential's limits
	// with this scope bind it as well as the unscoped ones. Empty: only
	// the unscoped limits. See ValidScope.
	Scope string
	// Keys limits the start to a key set (a kind's keys). Nil: the
	// handle's keys (WithOnly, else every key). With WithOnly, a key set
	// should hold only keys of the handle's: the handle has no secret for
	// the others.
	Keys *KeySet
	// Interactive puts the start ahead of every start of Priority 1..5
	// (first come, first served among interactive ones), and exempts it
	// from the pool's reserve (Definitions.Reserve): the share of every
	// limit that other starts leave free is its to use. Priority is then
	// ignored.
	Interactive bool
	// Queued, when set, is called once if the acquire could not be
	// served at once and waits in the fleet's queue (never for one served
	// at once, nor after AcquireWith returned). It runs on the pool's own
	// goroutine, with the pool's lock held: it must be quick and must not
	// call the pool.
	Queued func()
}

// Priorities of a Request: PriorityFirst..PriorityLast, PriorityDefault
// when not given.
const (
	PriorityFirst   = 1
	PriorityLast    = 5
	PriorityDefault = 3
)

// priorityInteractive is an interactive Request's place in the fleet's
// queue: before PriorityFirst (lua/lib.lua exempts it from the reserve).
const priorityInteractive = 0

// AcquireWith leases a credential like AcquireCost, its place among the
// fleet's waiters set by r.Priority: a freed credential goes to the oldest
// waiter of the highest priority that may use it.
//
// Waiters of different classes (handle group and scope) do not hold each
// other back: a waiter that cannot be served yet keeps back only the later
// waiters of its class and the credentials it waits for in their unscoped
// limits.
func (p *Pool) AcquireWith(ctx context.Context, r Request) (*Lease, error) {
	r, err := r.withDefaults()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if ctx.Err() != nil {
		return nil, canceled(ctx, start)
	}
	return p.wait(ctx, r, false, start)
}

// TryAcquireWith leases a credential for r at once, or returns an
// *UnavailableError (ErrNoneAvailable) without waiting: no credential of
// r's class has room now, or waiters it shares them with come first.
// ErrNeverFits and ErrPoolEmpty as AcquireWith.
func (p *Pool) TryAcquireWith(ctx context.Context, r Request) (*Lease, error) {
	r, err := r.withDefaults()
	if err != nil {
		return nil, err
	}
	return p.wait(ctx, r, true, time.Now())
}

func (r Request) withDefaults() (Request, error) {
	if r.Cost == 0 {
		r.Cost = 1
	}
	if r.Priority == 0 {
		r.Priority = PriorityDefault
	}
	if err := checkRequest(r.Owner, r.Cost); err != nil {
		return r, err
	}
	if r.Priority < PriorityFirst || r.Priority > PriorityLast {
		return r, fmt.Errorf("%w: priority must be %d..%d, got %d", ErrInvalid, PriorityFirst, PriorityLast, r.Priority)
	}
	if r.Interactive {
		r.Priority = priorityInteractive
	}
	if r.Scope != "" {
		if err := ValidScope(r.Scope); err != nil {
			return r, fmt.Errorf("%w: scope %w", ErrInvalid, err)
		}
	}
	return r, nil
}

// wait queues a waiter and waits for its result or ctx's end.
func (p *Pool) wait(ctx context.Context, r Request, try bool, start time.Time) (*Lease, error) {
	w, err := p.d.newWaiter(r, try)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-w.res:
		return r.lease, r.err
	case <-ctx.Done():
		if !p.d.cancel(w) {
			// Its result came meanwhile: hand a lease on at once.
			if r := <-w.res; r.lease != nil {
				rctx, cancel := p.opCtx(ctx)
				_ = p.Release(rctx, r.lease)
				cancel()
			}
		}
		return nil, canceled(ctx, start)
	}
}

// TryAcquire leases a usable credential without waiting (cost 1). When
// none is usable, or other waiters come first, it returns an
// *UnavailableError (matching ErrNoneAvailable) that says when the next
// rest, lease or window ends.
func (p *Pool) TryAcquire(ctx context.Context, owner string) (*Lease, error) {
	return p.TryAcquireWith(ctx, Request{Owner: owner})
}

func checkRequest(owner string, cost int64) error {
	switch {
	case owner == "":
		return fmt.Errorf("%w: empty owner", ErrInvalid)
	case cost < 1:
		return fmt.Errorf("%w: cost must be at least 1, got %d", ErrInvalid, cost)
	}
	return nil
}

func canceled(ctx context.Context, start time.Time) error {
	return fmt.Errorf("%w after %s: %w", ErrCanceled, time.Since(start).Round(time.Millisecond), context.Cause(ctx))
}

// IsCanceled reports whether err is Acquire giving up on its context.
func IsCanceled(err error) bool { return errors.Is(err, ErrCanceled) }
