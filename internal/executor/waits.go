package executor

import (
	"slices"
	"sync"

	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// ClassWaits bounds how many of a worker's slots may wait for a key on
// behalf of one class of items: the keys of their kind (a key set, or
// every key) and their scope, what an item can wait for. At most half the
// slots may be in an acquire of one class that may wait (enter); an item
// past that tries once without waiting. The class is full, and the puller
// passes its lanes over until one of its slots leaves, when that many are
// queued in the pool without a grant (queued), or are in acquires while
// the class's last acquire was queued (its keys are busy: the next ones
// will be too, and an item pulled meanwhile would only try once and go
// back). So items blocked on one
// scope's or one group's limits never take every slot while items of
// another class have room (no head-of-line blocking), a class whose keys
// merely take turns keeps enough waiters queued to use every key the
// moment it frees, acquires served at once never stop the pulling, and
// lanes of one class (batches that want the same keys) share the waiting
// slots in the order the lane schedule picks them, so priority and
// weights hold among them. See docs/waiting-model.md.
type ClassWaits struct {
	max int // slots one class may have waiting

	mu       sync.Mutex
	entered  map[string]int  // slots in an acquire that may wait
	inQueued map[string]int  // of those, queued in the pool without a grant
	busy     map[string]bool // the class's last acquire was queued
	// diverted: classes whose items move to another class's keys (a
	// fallback kind's), by the class they move to (waits_divert.go).
	diverted map[string]string
}

// classWaitShare is the share of a worker's slots one class may have
// waiting for a key: half, at least one.
func classWaitShare(concurrency int) int { return max(1, concurrency/2) }

// NewClassWaits bounds the waits of a worker of concurrency slots.
func NewClassWaits(concurrency int) *ClassWaits {
	return &ClassWaits{max: classWaitShare(concurrency), entered: map[string]int{}, inQueued: map[string]int{}, busy: map[string]bool{},
		diverted: map[string]string{}}
}

// enter counts a slot that is about to acquire for class and may wait,
// and reports false (counting nothing) when the class has its share of
// slots in such acquires already.
func (c *ClassWaits) enter(class string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entered[class] >= c.max {
		return false
	}
	c.entered[class]++
	return true
}

// queued counts an entered slot that the pool queued without a grant.
func (c *ClassWaits) queued(class string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inQueued[class]++
	c.busy[class] = true
}

// leave ends what enter (and queued, if wasQueued) counted; it reports
// whether the class was full (so that the puller may look at its lanes
// again).
func (c *ClassWaits) leave(class string, wasQueued bool) (wasFull bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wasFull = c.isFull(class)
	decr(c.entered, class)
	if wasQueued {
		decr(c.inQueued, class)
	} else {
		delete(c.busy, class) // served at once: its keys have room
	}
	return wasFull
}

func (c *ClassWaits) isFull(class string) bool {
	return c.inQueued[class] >= c.max || (c.busy[class] && c.entered[class] >= c.max)
}

func decr(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

// Full lists the classes that are full, sorted: the puller passes their
// lanes over.
func (c *ClassWaits) Full() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for class := range c.entered {
		if c.isFull(class) {
			out = append(out, class)
		}
	}
	for from, to := range c.diverted {
		if c.isFull(to) && !slices.Contains(out, from) {
			out = append(out, from)
		}
	}
	slices.Sort(out)
	return out
}

// WaitClass names what an item of kind and scope waits for: its kind's
// key set (nil: every key) and its scope, as the lane schedule names it
// (lanes.Class).
func WaitClass(keys *creds.KeySet, scope string) string {
	set := lanes.EveryKey
	if keys != nil {
		set = keys.Name()
	}
	return lanes.Class(set, scope)
}
