package executor

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// acquire is the step before a run: what the item must hold to start.
// Today that is a credential lease among the keys the item's kind may
// use, for its cost and scope (lease); a reservation that a start must
// hold besides its key (a budget's) belongs here too, taken before the
// lease and given back with it when the item does not run.
//
// An item of a kind with a fallback may lease a key of a fallback kind
// instead (route, fallback.go).
func (e *Executor) acquire(pullCtx, itemCtx context.Context, x *item) (*creds.Lease, error) {
	if x.route.own.Fallback != nil {
		return e.route(pullCtx, itemCtx, x)
	}
	return e.lease(pullCtx, itemCtx, x, x.kind.Keys, mayWait)
}

// waitMode says whether an acquire may wait for a key.
type waitMode uint8

const (
	// mayWait: it waits while its class has less than its share of the
	// worker's slots waiting (ClassWaits), else it tries once
	// (ErrClassWaiting when no key has room).
	mayWait waitMode = iota
	// tryOnce: it never waits (errTriedOnce when no key has room).
	tryOnce
)

// lease waits for a credential lease among keys (the keys of the kind the
// item is to run on; nil every key), for its cost and scope. While its
// class (keys and scope) has its share of this worker's slots waiting
// already (ClassWaits), or with tryOnce, it does not wait: a key with room
// now, or ErrClassWaiting (errTriedOnce). When pullCtx ends first
// it fails with ErrDraining. It fails closed: while Redis cannot be
// reached it keeps waiting (the message is kept alive meanwhile) and runs
// nothing. When Redis has lost the pool it registers it again.
func (e *Executor) lease(pullCtx, itemCtx context.Context, x *item, keys *creds.KeySet, mode waitMode) (*creds.Lease, error) {
	ctx, cancel := context.WithCancelCause(itemCtx)
	defer cancel(nil)
	stop := context.AfterFunc(pullCtx, func() { cancel(ErrDraining) })
	defer stop()
	owner := e.id + "/" + shorten(x.it.ID, 64)
	b := newBackoff(e.clock, 100*time.Millisecond, 5*time.Second)
	start := e.clock.Now()
	class := WaitClass(keys, x.scope)
	for {
		_, prio := e.batches.State(x.it.Batch)
		req := creds.Request{Owner: owner, Cost: x.cost, Priority: prio, Scope: x.scope, Keys: keys}
		var l *creds.Lease
		var err error
		if mode == mayWait && e.waits.enter(class) {
			var queued atomic.Bool
			req.Queued = func() {
				queued.Store(true)
				e.waits.queued(class)
			}
			l, err = e.pool.AcquireWith(ctx, req)
			if e.waits.leave(class, queued.Load()) {
				e.batches.Poke() // the puller may take from the class's lanes again
			}
		} else if l, err = e.pool.TryAcquireWith(ctx, req); errors.Is(err, creds.ErrNoneAvailable) {
			if mode == tryOnce {
				return nil, errTriedOnce
			}
			return nil, ErrClassWaiting
		}
		if err == nil {
			e.host.RedisUp(true)
			e.metrics.CredentialWait.Observe(e.clock.Now().Sub(start).Seconds())
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if errors.Is(err, creds.ErrNeverFits) {
			e.host.RedisUp(true)
			return nil, err
		}
		if errors.Is(err, creds.ErrPoolEmpty) {
			x.log.Warn("the credential pool is empty in Redis (did Redis lose its state?): registering the credentials again")
			if err = e.host.Register(ctx); err == nil {
				continue
			}
		}
		e.host.RedisUp(false)
		e.metrics.RedisUnavailable.Inc()
		x.log.Warn("cannot reserve a credential: no job runs until Redis answers", zap.Error(err), zap.Duration("retry_in", b.peek()))
		b.wait(ctx)
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
