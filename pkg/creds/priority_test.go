package creds_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// A freed key goes to the oldest waiter of the highest priority, across
// processes; within a priority, first come, first served.
func TestWaitersByPriority(t *testing.T) {
	e := newEnv(t)
	holder, other := e.holderAndWaiter("k", false)
	held := mustAcquire(t, holder, "holder")
	// Arrival order: 5, 3a, 1, 3b, 2 (two handles, as two processes).
	order := []struct {
		name string
		prio int
		p    *creds.Pool
	}{{"p5", 5, other}, {"p3a", 3, holder}, {"p1", 1, other}, {"p3b", 3, other}, {"p2", 2, holder}}
	got := make(chan string, len(order))
	leases := make(chan *creds.Lease, len(order))
	for i, w := range order {
		go func() {
			l, err := w.p.AcquireWith(ctxT(t, 30*time.Second), creds.Request{Owner: w.name, Priority: w.prio})
			if err != nil {
				t.Error(err)
				return
			}
			got <- w.name
			leases <- l
		}()
		e.waitQueued(holder, i+1)
	}
	ctx := context.Background()
	if err := holder.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	var served []string
	for range order {
		select {
		case name := <-got:
			served = append(served, name)
		case <-time.After(20 * time.Second):
			t.Fatalf("served so far: %v", served)
		}
		l := <-leases
		p := holder
		if l.Owner != "p3a" && l.Owner != "p2" {
			p = other
		}
		if err := p.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if want := "[p1 p2 p3a p3b p5]"; fmt.Sprint(served) != want {
		t.Fatalf("served %v, want %s", served, want)
	}
}

func TestPriorityOutOfRange(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	for _, prio := range []int{-1, 6} {
		if _, err := p.AcquireWith(context.Background(), creds.Request{Owner: "w", Priority: prio}); !errors.Is(err, creds.ErrInvalid) {
			t.Errorf("priority %d: want ErrInvalid, got %v", prio, err)
		}
	}
}

// Request.Queued says an acquire waits in the fleet's queue: once, only
// for one that could not be served at once, never after it returned.
func TestQueuedIsCalledOnlyForWaiters(t *testing.T) {
	e := newEnv(t)
	p := e.registered(creds.Credential{ID: "k", MaxConcurrent: 1})
	var calls atomic.Int32
	queued := func() { calls.Add(1) }
	held, err := p.AcquireWith(ctxT(t, 10*time.Second), creds.Request{Owner: "first", Queued: queued})
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("served at once: Queued called %d times, want 0", n)
	}
	done := make(chan *creds.Lease, 1)
	go func() {
		l, err := p.AcquireWith(ctxT(t, 30*time.Second), creds.Request{Owner: "second", Queued: queued})
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	e.waitQueued(p, 1)
	testutil.WaitFor(t, "Queued to be called", 10*time.Second, func() bool { return calls.Load() == 1 })
	if err := p.Release(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	l := <-done
	if l == nil {
		t.Fatal("the waiter got no lease")
	}
	// One that gives up while queued: called once, and not after.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := p.AcquireWith(ctx, creds.Request{Owner: "third", Queued: queued})
		gaveUp <- err
	}()
	testutil.WaitFor(t, "the third to be queued", 10*time.Second, func() bool { return calls.Load() == 2 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, creds.ErrCanceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if err := p.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("Queued called %d times in all, want 2", n)
	}
}
