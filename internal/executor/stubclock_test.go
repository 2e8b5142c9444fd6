package executor

import (
	"context"
	"sync"
	"time"
)

// stubClock is a Clock that moves only when told (set). Its Sleep moves it
// through onSleep (the harness steps it, letting the keeper keep up).
type stubClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*stubTimer
	onSleep func(d time.Duration)
}

type stubTimer struct {
	c     *stubClock
	ch    chan time.Time
	at    time.Time
	armed bool
	fn    func() // a deadline's cancel, instead of a channel
}

func newStubClock() *stubClock { return &stubClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *stubClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// set moves the clock to t and fires the timers due by then.
func (c *stubClock) set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	fns := c.fireLocked()
	c.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

func (c *stubClock) fireLocked() (fns []func()) {
	for _, t := range c.timers {
		if !t.armed || t.at.After(c.now) {
			continue
		}
		t.armed = false
		if t.fn != nil {
			fns = append(fns, t.fn)
			continue
		}
		select {
		case t.ch <- c.now:
		default:
		}
	}
	return fns
}

func (c *stubClock) NewTimer(d time.Duration) Timer {
	t := &stubTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

func (c *stubClock) Sleep(ctx context.Context, d time.Duration) error {
	if c.onSleep != nil {
		c.onSleep(d)
	} else {
		c.set(c.Now().Add(d))
	}
	return ctx.Err()
}

func (c *stubClock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	t := &stubTimer{c: c, fn: cancel}
	c.mu.Lock()
	t.at, t.armed = c.now.Add(d), true
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		t.armed = false
		c.mu.Unlock()
		cancel()
	}
}

func (t *stubTimer) C() <-chan time.Time { return t.ch }

func (t *stubTimer) Reset(d time.Duration) {
	c := t.c
	c.mu.Lock()
	select { // a value not received is dropped
	case <-t.ch:
	default:
	}
	t.at, t.armed = c.now.Add(d), true
	fns := c.fireLocked()
	c.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

func (t *stubTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.armed = false
	select {
	case <-t.ch:
	default:
	}
}
