package worker

import (
	"context"
	"testing"
	"time"
)

// gatherSlots stops at what it wants, at a fetch ending, at its linger
// and when pulling stops; it never takes more slots than it wants.
func TestGatherSlots(t *testing.T) {
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, c := range []struct {
		name       string
		ctx        context.Context
		free       int  // slots freed before the call
		ended      bool // a fetch ended before the call
		n, want    int
		wantN      int
		wantLinger bool // it returned at the linger
	}{
		{name: "enough slots come", ctx: t.Context(), free: 5, n: 1, want: 4, wantN: 4},
		{name: "a fetch ends", ctx: t.Context(), free: 0, ended: true, n: 2, want: 16, wantN: 2},
		{name: "pulling stops", ctx: cancelled, free: 0, n: 1, want: 16, wantN: 1},
		{name: "the linger runs out", ctx: t.Context(), free: 2, n: 1, want: 16, wantN: 3, wantLinger: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			free := make(chan struct{}, 64)
			for range c.free {
				free <- struct{}{}
			}
			ended := make(chan struct{}, 1)
			if c.ended {
				ended <- struct{}{}
			}
			linger := time.NewTimer(time.Hour)
			linger.Stop()
			start := time.Now()
			got := gatherSlots(c.ctx, free, ended, c.n, c.want, linger)
			if got != c.wantN {
				t.Fatalf("holds %d slots, want %d", got, c.wantN)
			}
			if took := time.Since(start); c.wantLinger && took < fetchLinger {
				t.Fatalf("returned after %s, before its linger of %s", took, fetchLinger)
			}
			if left := len(free); left != c.free-(got-c.n) {
				t.Fatalf("%d free slots left, want %d", left, c.free-(got-c.n))
			}
		})
	}
}
