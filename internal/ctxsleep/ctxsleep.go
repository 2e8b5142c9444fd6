// Package ctxsleep waits for a duration unless a context ends first: the
// pause of retry loops, heartbeats and paced jobs.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d. It returns nil when d has passed, or context.Cause(ctx)
// as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
