// Package ctxsleep waits for a duration unless a context ends first: the
// pause of retry loops, heartbeats and paced jobs.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d (d ≤ 0: not at all). It returns nil when d has passed,
// or context.Cause(ctx) as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx) // no timer for nothing to wait
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
