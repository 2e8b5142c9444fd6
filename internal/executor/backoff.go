package executor

import (
	"context"
	"time"
)

// backoff is an exponential wait for retry loops, on a clock.
type backoff struct {
	clock         Clock
	min, max, cur time.Duration
}

func newBackoff(c Clock, lo, hi time.Duration) backoff {
	return backoff{clock: c, min: lo, max: hi, cur: lo}
}

func (b *backoff) peek() time.Duration { return b.cur }

// wait sleeps the current delay (or until ctx ends) and doubles it.
func (b *backoff) wait(ctx context.Context) {
	_ = b.clock.Sleep(ctx, b.cur)
	b.cur = min(b.cur*2, b.max)
}
