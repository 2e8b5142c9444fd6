package redistest_test

import (
	"context"
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

func TestStartRestart(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after restart: exists=%d err=%v, want a fresh server", n, err)
	}
}
