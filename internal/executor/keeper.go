package executor

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
// While an attempt is in flight the task stays in the heap at its loss
// deadline (last success + limit), so the loss is declared on time even
// if the attempt hangs past its context. An item shorter than `every`
// costs a heap push and a removal, nothing more. Time is the clock's.
type keeper struct {
	clock Clock
	mu    sync.Mutex
	tasks taskHeap
	wake  chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
}

// keepJob is what a task keeps alive.
type keepJob interface {
	// keep makes one attempt (an in-progress ack, a renewal).
	keep(ctx context.Context) error
	// fatal reports an error that means lost at once.
	fatal(err error) bool
	// lost is called once when the task is lost.
	lost()
}

// keepTask is one message or lease to keep alive.
type keepTask struct {
	every time.Duration // between attempts
	limit time.Duration // lost after this long without a success
	job   keepJob
	// since is when the thing kept alive was last known good (zero: now);
	// the first attempt and the loss deadline count from it.
	since time.Time

	// guarded by keeper.mu
	due     time.Time // next attempt, or the loss deadline while one runs
	lastOK  time.Time
	index   int // in the heap, or -1
	running bool
	removed bool
}

func (t *keepTask) deadline() time.Time { return t.lastOK.Add(t.limit) }

func newKeeper(clock Clock) *keeper {
	k := &keeper{clock: clock, wake: make(chan struct{}, 1), done: make(chan struct{})}
	k.wg.Add(1)
	go k.run()
	return k
}

// keepHandle is a task in the keeper.
type keepHandle struct {
	k *keeper
	t *keepTask
}

// Stop stops keeping the task alive; lost is not called after that.
func (h keepHandle) Stop() {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	h.t.removed = true
	if h.t.index >= 0 {
		heap.Remove(&h.k.tasks, h.t.index)
	}
}

// Alive reports whether the task is still within its limit: the last
// success is less than `limit` ago. For a message, that means no other
// worker can have been given it yet.
func (h keepHandle) Alive() bool {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	return h.k.clock.Now().Before(h.t.deadline())
}

// add starts keeping t alive. A task is added once: an attempt in flight
// may still hold a task after its Stop.
func (k *keeper) add(t *keepTask) keepHandle {
	now := k.clock.Now()
	k.mu.Lock()
	t.lastOK = now
	if !t.since.IsZero() && t.since.Before(now) {
		t.lastOK = t.since
	}
	t.due, t.index = t.lastOK.Add(t.every), -1
	heap.Push(&k.tasks, t)
	first := t.index == 0
	k.mu.Unlock()
	if first {
		k.poke()
	}
	return keepHandle{k: k, t: t}
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// close stops the keeper and waits a little for attempts in flight (one
// stuck on a dead connection is left to its own timeout).
func (k *keeper) close() {
	close(k.done)
	done := make(chan struct{})
	go func() { k.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

func (k *keeper) run() {
	defer k.wg.Done()
	timer := k.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		now := k.clock.Now()
		var lost []*keepTask
		for len(k.tasks) > 0 && !k.tasks[0].due.After(now) {
			t := k.tasks[0]
			switch {
			case !now.Before(t.deadline()):
				// No success for `limit`, whether or not an attempt still
				// hangs.
				heap.Pop(&k.tasks)
				t.removed = true
				lost = append(lost, t)
			case t.running:
				t.due = t.deadline()
				heap.Fix(&k.tasks, 0)
			default:
				t.running = true
				t.due = t.deadline()
				heap.Fix(&k.tasks, 0)
				k.wg.Add(1)
				go k.attempt(t, t.due)
			}
		}
		wait := time.Hour
		if len(k.tasks) > 0 {
			wait = k.tasks[0].due.Sub(now)
		}
		k.mu.Unlock()
		for _, t := range lost {
			t.job.lost()
		}
		timer.Reset(wait)
		select {
		case <-k.done:
			return
		case <-k.wake:
			timer.Stop()
		case <-timer.C():
		}
	}
}

// attempt runs one keep-alive; deadline is the task's loss deadline when
// it started, past which the attempt is no use.
func (k *keeper) attempt(t *keepTask, deadline time.Time) {
	defer k.wg.Done()
	// A success counts from when it was asked: the server's timer (ack
	// wait, lease TTL) restarted no earlier than that.
	sent := k.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), min(t.every, deadline.Sub(sent)))
	err := t.job.keep(ctx)
	cancel()
	k.mu.Lock()
	t.running = false
	if t.removed {
		k.mu.Unlock()
		return
	}
	now := k.clock.Now()
	if err == nil {
		t.lastOK = sent
	} else if t.job.fatal(err) || !now.Before(t.deadline()) {
		t.removed = true
		if t.index >= 0 {
			heap.Remove(&k.tasks, t.index)
		}
		k.mu.Unlock()
		t.job.lost()
		return
	}
	// The next attempt, but never later than the loss deadline.
	t.due = now.Add(t.every)
	if dl := t.deadline(); dl.Before(t.due) {
		t.due = dl
	}
	if t.index >= 0 {
		heap.Fix(&k.tasks, t.index)
	} else {
		heap.Push(&k.tasks, t)
	}
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
