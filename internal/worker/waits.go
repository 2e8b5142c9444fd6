package worker

import (
	"slices"
	"sync"
)

// laneWaits bounds how many of a worker's slots may wait for a key on
// behalf of one lane (a batch's items of one scope): an item whose lane
// has its share of waiting slots does not wait in its slot, and the lane
// is not pulled from until one of them is served. So items blocked on one
// scope's or one group's limits never take every slot while items of
// another lane have room (no head-of-line blocking), and a lane whose
// keys merely take turns keeps enough waiters queued to use every key the
// moment it frees. See docs/waiting-model.md.
type laneWaits struct {
	max int // slots one lane may have waiting

	mu sync.Mutex
	n  map[string]int
}

// laneWaitShare is the share of a worker's slots one lane may have
// waiting for a key: half, at least one.
func laneWaitShare(concurrency int) int { return max(1, concurrency/2) }

func newLaneWaits(concurrency int) *laneWaits {
	return &laneWaits{max: laneWaitShare(concurrency), n: map[string]int{}}
}

// enter counts a slot that is about to wait for lane, and reports false
// (counting nothing) when the lane has its share waiting already.
func (l *laneWaits) enter(lane string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[lane] >= l.max {
		return false
	}
	l.n[lane]++
	return true
}

// leave ends what enter counted; it reports whether the lane was full
// (so that the puller may look at it again).
func (l *laneWaits) leave(lane string) (wasFull bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wasFull = l.n[lane] >= l.max
	if l.n[lane] <= 1 {
		delete(l.n, lane)
	} else {
		l.n[lane]--
	}
	return wasFull
}

// full lists the lanes with their share of slots waiting, sorted: the
// puller passes them over.
func (l *laneWaits) full() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for lane, n := range l.n {
		if n >= l.max {
			out = append(out, lane)
		}
	}
	slices.Sort(out)
	return out
}
