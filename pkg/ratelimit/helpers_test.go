package ratelimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// newRedis starts a private redis-server and returns a client and a key
// prefix unique to the test.
func newRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	s := redistest.Start(t)
	return s.Client(t), "{" + redistest.UniqueName(t) + "}:"
}

// newLimiter makes a limiter with newL (NewGCRA, NewSlidingWindow) on a
// private redis-server, under a key prefix unique to the test, and returns
// it with its client and prefix.
func newLimiter[L any](t testing.TB, newL func(redis.Scripter, ...ratelimit.Option) (L, error)) (L, *redis.Client, string) {
	t.Helper()
	rdb, prefix := newRedis(t)
	l, err := newL(rdb, ratelimit.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return l, rdb, prefix
}

// badInput is an argument a limiter must refuse, and what its error says.
type badInput[Lim any] struct {
	lim  Lim
	n    int
	want string
}

// refuses checks that allow (a limiter's method, named name) refuses each
// bad input with a "ratelimit: " error that says its want.
func refuses[Lim any](t *testing.T, name string, allow func(context.Context, string, Lim, int) (ratelimit.Result, error), bad []badInput[Lim]) {
	t.Helper()
	for _, tc := range bad {
		_, err := allow(context.Background(), "k", tc.lim, tc.n)
		if err == nil || !strings.HasPrefix(err.Error(), "ratelimit: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s(%+v, %d) = %v, want a ratelimit: error saying %q", name, tc.lim, tc.n, err, tc.want)
		}
	}
}

// unreachableRedis returns a client of a port where nothing listens.
func unreachableRedis(t testing.TB) *redis.Client {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clockSlack covers the difference between the test's monotonic clock and
// Redis's wall clock (TIME) over a test, and float rounding in the scripts.
const clockSlack = 2 * time.Millisecond

// within checks a duration the limiter computed at some moment of Redis
// time between start and now: want is the value at start, and it can only
// have shrunk by the time elapsed since.
func within(t *testing.T, what string, got, want time.Duration, start time.Time) {
	t.Helper()
	elapsed := time.Since(start)
	lo, hi := want-elapsed-clockSlack, want+clockSlack
	if got < lo || got > hi {
		t.Errorf("%s = %v, want %v minus the %v elapsed (between %v and %v)", what, got, want, elapsed, lo, hi)
	}
}

// benchAllow measures allow, one call at a time and from 4 goroutines per
// CPU; every call must be allowed.
func benchAllow(b *testing.B, allow func(ctx context.Context, key string) (ratelimit.Result, error)) {
	ctx := context.Background()
	b.Run("sequential", func(b *testing.B) {
		for b.Loop() {
			res, err := allow(ctx, "seq")
			if err != nil || res.Allowed != 1 {
				b.Fatalf("Allow = %+v, %v", res, err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, err := allow(ctx, "par")
				if err != nil || res.Allowed != 1 {
					b.Errorf("Allow = %+v, %v", res, err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}
