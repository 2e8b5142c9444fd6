package executor

import (
	"context"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
)

// Clock is the executor's time: when it is, the keep-alives' timer, the
// backoffs' sleeps and the deadlines of settling. Real is the system's; a
// test steps a stub.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// Sleep waits d, or until ctx ends (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
	// WithTimeout is context.WithTimeout on this clock.
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// Timer is a Clock's one-shot timer.
type Timer interface {
	C() <-chan time.Time
	// Reset arms the timer to fire d from now; a value not received
	// from an earlier firing is dropped.
	Reset(d time.Duration)
	Stop()
}

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) Sleep(ctx context.Context, d time.Duration) error { return ctxsleep.Sleep(ctx, d) }

func (realClock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// realTimer relies on Go 1.23's timers: Reset and Stop drop a value not
// yet received.
type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time   { return t.t.C }
func (t realTimer) Reset(d time.Duration) { t.t.Reset(d) }
func (t realTimer) Stop()                 { t.t.Stop() }
