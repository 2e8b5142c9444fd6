package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// An item of a kind with a fallback (jobs.kinds.<name>.fallback) runs on
// another kind when its own kind's keys cannot serve it, in place: the
// worker that holds its unacknowledged message acquires a key of the
// fallback kind and runs that kind's handler with the same request. The
// message stays the only checkpoint: nothing is republished, so the item
// cannot run twice because of a move, and a worker that dies mid-move
// leaves the message to come back as any other (docs/providers.md,
// "Fallbacks"). Where it runs is decided at each start, never kept:
//
//   - waited: it waits at most Fallback.After for a key of its own kind;
//     then (or at once, when no key of its kind can ever take its cost)
//     it tries the fallback kinds in order, waiting at most After for
//     each, and comes round again while none has a key. A kind whose
//     wait ran out is remembered by this worker (per kind and scope): its
//     later items try it once without waiting before they move, until it
//     grants a key again. So the first items wait After and the others
//     follow them at once, while each new item still starts on its own
//     kind the moment one of its keys has room.
//   - failing: its runs failed transiently (a 5xx, a refused connection,
//     a timeout before any reply) twice in a row on its own kind's keys
//     (two keys, or the same one when the pool gave it that key again;
//     the run counters keep the credentials of the failures in a row,
//     RunCount.Streak, across deliveries): it runs on the fallback kinds
//     at once and at every later start, never on its own kind again. A
//     worker remembers the kind (per scope) until one of its items runs
//     to the end on it: meanwhile, an item's first failure on it is
//     retried at once, not after the retry backoff.
//
// On the healthy path this costs no Redis call: the wait on its own keys
// is the same acquire, bounded by a timer.

// Fallback is where a kind's items run when its own keys cannot serve
// them.
type Fallback struct {
	// Kinds are the kinds they move to, in order; each one the executor
	// runs.
	Kinds []string
	// After is the longest an item waits for a key of its own kind (and
	// of each fallback kind in turn) before it moves on.
	After time.Duration
}

// Mover counts the items that started on a fallback kind
// (*fallback.Router).
type Mover interface {
	Moved(from, to, why string)
}

// routing is where an item of a kind with a fallback runs.
type routing struct {
	own Kind // its own kind (x.it.Kind)
	// ran is the kind it runs on now: its own, or the fallback kind it
	// moved to; why says why it moved ("" it runs on its own).
	ran, why string
	// failing: its runs failed twice in a row on its own kind's keys;
	// it starts on the fallback kinds only.
	failing bool
	// counted: its move is counted (once a delivery).
	counted bool
}

// candidate is a kind an item may start on.
type candidate struct {
	name string
	kind Kind
}

// errTriedOnce: a kind tried without waiting had no key with room.
var errTriedOnce = errors.New("no key of the kind has room now")

// route acquires a lease for an item of a kind with a fallback: on its
// own kind's keys, else on a fallback kind's (see above). It sets where
// the item runs (x.kind, x.route).
func (e *Executor) route(pullCtx, itemCtx context.Context, x *item) (*creds.Lease, error) {
	own := x.route.own
	why := kftype.FallbackWaited
	var cands []candidate
	if x.route.failing {
		why = kftype.FallbackFailing
	} else {
		cands = append(cands, candidate{x.it.Kind, own})
	}
	for _, name := range own.Fallback.Kinds {
		cands = append(cands, candidate{name, e.kinds[name]})
	}
	var neverFits error
	for pass := 0; ; pass++ {
		waited, never := false, 0
		for i, c := range cands {
			isOwn := c.name == x.it.Kind
			var l *creds.Lease
			var err error
			waitedOut, probed := false, false
			if pass == 0 && e.stuck.stuck(c.name, x.scope) {
				l, err, probed = e.probe(pullCtx, itemCtx, x, c)
			}
			if !probed {
				bound := own.Fallback.After
				if pass > 0 && x.route.failing && i == len(cands)-1 {
					bound = 0 // its last place to wait: as long as it takes
				}
				l, err, waitedOut = e.leaseBounded(pullCtx, itemCtx, x, c.kind.Keys, mayWait, bound)
			}
			switch {
			case err == nil:
				e.runOn(x, c, why)
				return l, nil
			case waitedOut:
				waited = true
				e.stuck.set(c.name, x.scope, true)
				x.log.Debug("no key of the kind within its fallback's after", zap.String("on", c.name), zap.Duration("after", own.Fallback.After))
			case errors.Is(err, creds.ErrNeverFits):
				never++
				neverFits = cmp.Or(neverFits, err)
			case errors.Is(err, errTriedOnce):
			case errors.Is(err, ErrClassWaiting):
				if isOwn && pass == 0 {
					// Its own keys are busy and its class has its share of
					// slots waiting for them: it goes back, as an item
					// without a fallback does.
					return nil, err
				}
			default:
				return nil, err
			}
		}
		if never == len(cands) {
			return nil, neverFits
		}
		if pass > 0 && !waited {
			return nil, ErrClassWaiting
		}
	}
}

// probe tries once, without waiting, for a key of c, a kind this worker
// remembers as stuck: one start at a time (the others wait for its
// answer), so that when the kind serves again the start that finds it so
// ends the memory before the next one looks: a burst of items that
// starts as the kind's keys come back waits for them rather than moving
// because the first of them took the room. probed is false when the kind
// is not stuck any more (then the item waits for it as usual); else l or
// err is the try's (errTriedOnce: no key has room).
func (e *Executor) probe(pullCtx, itemCtx context.Context, x *item, c candidate) (l *creds.Lease, err error, probed bool) {
	unlock, err := e.stuck.lock(pullCtx, itemCtx, c.name, x.scope)
	if err != nil {
		return nil, err, true
	}
	defer unlock()
	if !e.stuck.stuck(c.name, x.scope) {
		return nil, nil, false
	}
	l, err = e.lease(pullCtx, itemCtx, x, c.kind.Keys, tryOnce)
	if err == nil {
		e.stuck.set(c.name, x.scope, false)
		x.log.Info("the kind's keys serve again", zap.String("kind", c.name))
	}
	return l, err, true
}

// leaseBounded is lease on keys, waiting at most bound (0: as long as it
// takes); waitedOut says the bound ran out.
func (e *Executor) leaseBounded(pullCtx, itemCtx context.Context, x *item, keys *creds.KeySet, mode waitMode, bound time.Duration) (
	l *creds.Lease, err error, waitedOut bool) {
	if bound <= 0 || mode == tryOnce {
		l, err = e.lease(pullCtx, itemCtx, x, keys, mode)
		return l, err, false
	}
	ctx, cancel := e.clock.WithTimeout(itemCtx, bound)
	defer cancel()
	l, err = e.lease(pullCtx, ctx, x, keys, mode)
	waitedOut = err != nil && ctx.Err() != nil && itemCtx.Err() == nil && pullCtx.Err() == nil
	return l, err, waitedOut
}

// runOn makes c the kind x runs on, for why when c is not its own.
func (e *Executor) runOn(x *item, c candidate, why string) {
	if c.name == x.it.Kind {
		x.kind, x.route.ran, x.route.why = x.route.own, c.name, ""
		return
	}
	x.kind, x.route.ran, x.route.why = c.kind, c.name, why
	e.waits.divert(WaitClass(x.route.own.Keys, x.scope), WaitClass(c.kind.Keys, x.scope))
	if x.route.counted {
		return
	}
	x.route.counted = true
	if e.moves != nil {
		e.moves.Moved(x.it.Kind, c.name, why)
	}
	x.log.Info("the item runs on a fallback kind", zap.String("on", c.name), zap.String("why", why))
}

// failingKey is the credential a transient failure of x's run counts
// against, toward its kind's fallback ("" when it does not count): a run
// that got no reply or a 5xx. A failure on a fallback kind counts too, so
// that an item that moved and failed there starts there again.
func failingKey(x *item, credential string, out jobs.Output) string {
	if x.route.own.Fallback == nil || (out.Status != 0 && out.Status < 500) {
		return ""
	}
	return credential
}

// failingOver reports whether the failures in a row that st counts make
// an item move: two. They are on two keys when the pool gives it another
// key for its second run; when it gives it the same one again (the least
// recently used of the kind's keys is often the one that just failed it),
// that key is the one the kind would keep running it on, and two
// failures there count as well: an item that waited for a second key
// would spend its attempts on the first and be dead-lettered while the
// fallback kind's keys sat idle.
func failingOver(st RunCount) bool {
	return strings.Count(st.Streak, "\n") >= 1
}

// movesOn says whether x, whose run just failed on its own kind with st
// counted, moves to its fallback kinds now (failing).
func (e *Executor) movesOn(x *item, st RunCount, credential string) bool {
	if credential == "" || x.route.ran != x.it.Kind || !failingOver(st) {
		return false
	}
	x.route.failing = true
	e.stuck.setFailing(x.it.Kind, x.scope, true)
	x.log.Warn("its runs failed twice in a row on its kind's keys: the item runs on its kind's fallback",
		zap.Strings("fallback", x.route.own.Fallback.Kinds), zap.String("keys", strings.ReplaceAll(st.Streak, "\n", ",")))
	return true
}

// retriesAtOnce says whether x, whose run on its own kind just failed
// (counting toward its fallback: credential set), runs again at once
// instead of after the retry backoff: while its kind is failing (an item
// of it moved for failing, and none ran to the end on it since), its
// second run in a row decides at once whether it moves.
func (e *Executor) retriesAtOnce(x *item, credential string) bool {
	return credential != "" && x.route.ran == x.it.Kind && e.stuck.isFailing(x.it.Kind, x.scope)
}

// served records that x ran on its own kind to the end: items of its
// class run on their own keys again.
func (e *Executor) served(x *item) {
	if x.route.own.Fallback == nil || x.route.why != "" {
		return
	}
	e.stuck.setFailing(x.it.Kind, x.scope, false)
	if e.waits.undivert(WaitClass(x.route.own.Keys, x.scope)) {
		e.batches.Poke()
	}
}

// tag names the kind that ran x in its result, and the kind it moved
// from and why when that is a fallback kind.
func (x *item) tag(r *kftype.Result) {
	r.Kind = x.route.ran
	if x.route.why != "" {
		r.FallbackFrom, r.FallbackReason = x.it.Kind, x.route.why
	}
}

// endpoint is the API path of x's request on the kind it runs on: a moved
// request goes to the endpoint its own kind would have sent it to.
func (x *item) endpoint() string {
	if x.route.why == "" {
		return x.it.Endpoint
	}
	return cmp.Or(x.it.Endpoint, x.route.own.Endpoint)
}

// checkFallbacks checks that every kind a kind falls back to is one the
// executor runs.
func checkFallbacks(kinds map[string]Kind) error {
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		if f := kinds[name].Fallback; f != nil {
			for _, to := range f.Kinds {
				if _, ok := kinds[to]; !ok || to == name {
					return fmt.Errorf("executor: kind %s falls back to %s, which is not another kind it runs", name, to)
				}
			}
			if f.After <= 0 {
				return fmt.Errorf("executor: kind %s: its fallback's After must be positive", name)
			}
		}
	}
	return nil
}
