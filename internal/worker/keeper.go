package worker

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// keeper keeps the messages and leases of in-flight items alive from one
// goroutine: every task is due again `every` after its last attempt; the
// keeper sleeps until the earliest is due and starts the attempts that are
// (each in its own goroutine, so a slow server cannot hold up the others).
// An item shorter than `every` costs a heap push and a removal, nothing
// more.
type keeper struct {
	mu    sync.Mutex
	tasks taskHeap
	wake  chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
}

// keepTask is one message or lease to keep alive.
type keepTask struct {
	every time.Duration // between attempts
	limit time.Duration // lost after this long without a success
	do    func(context.Context) error
	fatal func(error) bool // an error that means lost at once
	lost  func()

	// guarded by keeper.mu
	due     time.Time
	lastOK  time.Time
	index   int // in the heap, or -1
	removed bool
}

func newKeeper() *keeper {
	k := &keeper{wake: make(chan struct{}, 1), done: make(chan struct{})}
	k.wg.Add(1)
	go k.run()
	return k
}

// add starts keeping t alive; the returned func stops it (lost is not
// called after that).
func (k *keeper) add(t *keepTask) (remove func()) {
	now := time.Now()
	k.mu.Lock()
	t.lastOK, t.due, t.index = now, now.Add(t.every), -1
	heap.Push(&k.tasks, t)
	first := t.index == 0
	k.mu.Unlock()
	if first {
		k.poke()
	}
	return func() {
		k.mu.Lock()
		t.removed = true
		if t.index >= 0 {
			heap.Remove(&k.tasks, t.index)
		}
		k.mu.Unlock()
	}
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// close stops the keeper and waits for attempts in flight.
func (k *keeper) close() {
	close(k.done)
	k.wg.Wait()
}

func (k *keeper) run() {
	defer k.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		now := time.Now()
		for len(k.tasks) > 0 && !k.tasks[0].due.After(now) {
			t := heap.Pop(&k.tasks).(*keepTask)
			k.wg.Add(1)
			go k.attempt(t)
		}
		wait := time.Hour
		if len(k.tasks) > 0 {
			wait = k.tasks[0].due.Sub(now)
		}
		k.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-k.done:
			return
		case <-k.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

func (k *keeper) attempt(t *keepTask) {
	defer k.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), t.every)
	err := t.do(ctx)
	cancel()
	k.mu.Lock()
	if t.removed {
		k.mu.Unlock()
		return
	}
	now := time.Now()
	if err == nil {
		t.lastOK = now
	} else if (t.fatal != nil && t.fatal(err)) || now.Sub(t.lastOK) >= t.limit {
		t.removed = true
		k.mu.Unlock()
		t.lost()
		return
	}
	t.due = now.Add(t.every)
	heap.Push(&k.tasks, t)
	first := t.index == 0
	k.mu.Unlock()
	if first {
		k.poke()
	}
}

// taskHeap orders tasks by due time.
type taskHeap []*keepTask

func (h taskHeap) Len() int           { return len(h) }
func (h taskHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h taskHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *taskHeap) Push(x any) {
	t := x.(*keepTask)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *taskHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
