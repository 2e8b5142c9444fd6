package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

func newGCRA(t testing.TB) (*ratelimit.GCRA, *redis.Client, string) {
	t.Helper()
	return newLimiter(t, ratelimit.NewGCRA)
}

func TestGCRALimit(t *testing.T) {
	for _, tc := range []struct {
		got  ratelimit.GCRALimit
		want ratelimit.GCRALimit
		str  string
	}{
		{ratelimit.PerSecond(10), ratelimit.GCRALimit{Rate: 10, Burst: 10, Period: time.Second}, "10 req/s (burst 10)"},
		{ratelimit.PerMinute(60), ratelimit.GCRALimit{Rate: 60, Burst: 60, Period: time.Minute}, "60 req/m (burst 60)"},
		{ratelimit.PerHour(5), ratelimit.GCRALimit{Rate: 5, Burst: 5, Period: time.Hour}, "5 req/h (burst 5)"},
		{ratelimit.GCRALimit{Rate: 1, Burst: 3, Period: 30 * time.Second}, ratelimit.GCRALimit{Rate: 1, Burst: 3, Period: 30 * time.Second}, "1 req/30s (burst 3)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %+v, want %+v", tc.got, tc.want)
		}
		if s := tc.got.String(); s != tc.str {
			t.Errorf("String() = %q, want %q", s, tc.str)
		}
		if tc.got.IsZero() || tc.got.Validate() != nil {
			t.Errorf("%v: IsZero=%v Validate=%v, want false and nil", tc.got, tc.got.IsZero(), tc.got.Validate())
		}
	}
	if !(ratelimit.GCRALimit{}).IsZero() {
		t.Error("GCRALimit{}.IsZero() = false")
	}
}

type gcraStep struct {
	op   string // "allow" (AllowN), "atmost" (AllowAtMost), "reset"
	n    int
	want ratelimit.Result // durations as seen at the case's start
}

func allowN(n int, allowed, remaining int, retry, reset time.Duration) gcraStep {
	return gcraStep{"allow", n, ratelimit.Result{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}}
}

func atMost(n int, allowed, remaining int, retry, reset time.Duration) gcraStep {
	return gcraStep{"atmost", n, ratelimit.Result{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}}
}

var reset = gcraStep{op: "reset"}

// TestGCRA replays redis_rate v10's own tests (rate_test.go) and more. The
// limits refill slowly (a cell every few seconds or more) so that Allowed and
// Remaining are exact on a slow machine; the durations are checked against
// the time elapsed since the case began.
func TestGCRA(t *testing.T) {
	t.Parallel()
	const e = 6 * time.Second // the emission interval of PerMinute(10)
	tests := []struct {
		name  string
		limit ratelimit.GCRALimit
		steps []gcraStep
	}{
		{"redis_rate TestAllow", ratelimit.PerMinute(10), []gcraStep{
			allowN(1, 1, 9, -1, e),
			reset,
			allowN(1, 1, 9, -1, e),
			allowN(2, 2, 7, -1, 3*e),
			allowN(7, 7, 0, -1, 10*e),
			allowN(1000, 0, 0, 1000*e, 10*e),
			allowN(1, 0, 0, e, 10*e),
		}},
		{"redis_rate TestAllowN_IncrementZero", ratelimit.PerMinute(10), []gcraStep{
			allowN(0, 0, 10, -1, 0),
			allowN(1, 1, 9, -1, e),
			allowN(0, 0, 9, -1, e),
		}},
		{"redis_rate TestAllowAtMost", ratelimit.PerMinute(10), []gcraStep{
			allowN(1, 1, 9, -1, e),
			atMost(2, 2, 7, -1, 3*e),
			allowN(0, 0, 7, -1, 3*e),
			atMost(10, 7, 0, -1, 10*e),
			allowN(0, 0, 0, -1, 10*e),
			atMost(1000, 0, 0, e, 10*e),
			allowN(1000, 0, 0, 1000*e, 10*e),
		}},
		{"redis_rate TestAllowAtMost_IncrementZero", ratelimit.PerMinute(10), []gcraStep{
			atMost(0, 0, 10, -1, 0),
			allowN(1, 1, 9, -1, e),
			atMost(0, 0, 9, -1, e),
		}},
		{"burst above rate", ratelimit.GCRALimit{Rate: 1, Burst: 3, Period: time.Minute}, []gcraStep{
			allowN(1, 1, 2, -1, time.Minute),
			allowN(1, 1, 1, -1, 2*time.Minute),
			allowN(1, 1, 0, -1, 3*time.Minute),
			allowN(1, 0, 0, time.Minute, 3*time.Minute),
			atMost(5, 0, 0, time.Minute, 3*time.Minute),
			reset,
			allowN(3, 3, 0, -1, 3*time.Minute),
		}},
		{"burst below rate", ratelimit.GCRALimit{Rate: 10, Burst: 2, Period: time.Minute}, []gcraStep{
			allowN(2, 2, 0, -1, 2*e),
			allowN(1, 0, 0, e, 2*e),
			reset,
			// More than the burst is never allowed; like redis_rate,
			// RetryAfter is what it would be if the bucket were big enough.
			allowN(3, 0, 0, e, 0),
			atMost(3, 2, 0, -1, 2*e),
		}},
		{"uneven interval", ratelimit.GCRALimit{Rate: 7, Burst: 7, Period: time.Minute}, []gcraStep{
			allowN(1, 1, 6, -1, time.Minute/7),
			allowN(6, 6, 0, -1, time.Minute),
			allowN(1, 0, 0, time.Minute/7, time.Minute),
		}},
		{"PerHour", ratelimit.PerHour(3600), []gcraStep{
			allowN(1, 1, 3599, -1, time.Second),
			atMost(5000, 3599, 0, -1, time.Hour),
			atMost(1, 0, 0, time.Second, time.Hour),
		}},
	}
	g, _, _ := newGCRA(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := tt.name
			start := time.Now()
			for i, st := range tt.steps {
				var (
					res ratelimit.Result
					err error
				)
				switch st.op {
				case "reset":
					if err := g.Reset(ctx, key); err != nil {
						t.Fatalf("step %d: Reset: %v", i, err)
					}
					start = time.Now()
					continue
				case "allow":
					res, err = g.AllowN(ctx, key, tt.limit, st.n)
				case "atmost":
					res, err = g.AllowAtMost(ctx, key, tt.limit, st.n)
				}
				if err != nil {
					t.Fatalf("step %d: %s(%d): %v", i, st.op, st.n, err)
				}
				if res.Allowed != st.want.Allowed || res.Remaining != st.want.Remaining {
					t.Errorf("step %d: %s(%d) = %+v, want %+v", i, st.op, st.n, res, st.want)
				}
				if st.want.RetryAfter == -1 {
					if res.RetryAfter != -1 {
						t.Errorf("step %d: %s(%d).RetryAfter = %v, want -1", i, st.op, st.n, res.RetryAfter)
					}
				} else {
					within(t, "RetryAfter", res.RetryAfter, st.want.RetryAfter, start)
				}
				if st.want.ResetAfter == 0 {
					if res.ResetAfter != 0 {
						t.Errorf("step %d: %s(%d).ResetAfter = %v, want 0", i, st.op, st.n, res.ResetAfter)
					}
				} else {
					within(t, "ResetAfter", res.ResetAfter, st.want.ResetAfter, start)
				}
			}
		})
	}
}

func TestGCRARefillsAfterRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, rdb, prefix := newGCRA(t)
	// A cell every second: the denial below needs no more than the two
	// calls to follow each other within a second, which any machine does
	// (a cell every 200ms let a stalled machine skip the check).
	lim := ratelimit.GCRALimit{Rate: 1, Burst: 2, Period: time.Second}

	start := time.Now()
	res, err := g.AllowN(ctx, "k", lim, 2)
	if err != nil || res.Allowed != 2 {
		t.Fatalf("AllowN(2) = %+v, %v; want allowed", res, err)
	}
	// The key expires when the bucket is full again.
	ttl, err := rdb.PTTL(ctx, prefix+"k").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > 2*time.Second+time.Millisecond {
		t.Errorf("PTTL = %v, want in (0, 2s]", ttl)
	}

	res, err = g.Allow(ctx, "k", lim)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed != 0 || res.RetryAfter <= 0 {
		t.Fatalf("a third call on a bucket of 2 just emptied (%v ago): %+v, want denied with a RetryAfter", time.Since(start), res)
	}
	within(t, "RetryAfter", res.RetryAfter, time.Second, start)

	time.Sleep(res.RetryAfter + clockSlack) // the refill is the condition
	res, err = g.Allow(ctx, "k", lim)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed != 1 || res.RetryAfter != -1 {
		t.Fatalf("after RetryAfter: %+v, want allowed", res)
	}

	time.Sleep(res.ResetAfter + clockSlack)
	if n, err := rdb.Exists(ctx, prefix+"k").Result(); err != nil || n != 0 {
		t.Errorf("after ResetAfter: EXISTS = %d, %v; want the key gone", n, err)
	}
}

// Like redis_rate's TestRetryAfter: a denied call never asks to wait longer
// than one emission interval for one event.
func TestGCRARetryAfterAtMostOneInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, _, _ := newGCRA(t)
	// One event every 50ms, 300 calls back to back: most are denied
	// (each call takes far less than 50ms), and the test requires some.
	lim := ratelimit.GCRALimit{Rate: 1, Burst: 1, Period: 50 * time.Millisecond}
	denied := 0
	for range 300 {
		res, err := g.Allow(ctx, "k", lim)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed > 0 {
			continue
		}
		denied++
		if res.RetryAfter <= 0 || res.RetryAfter > 50*time.Millisecond {
			t.Fatalf("denied with RetryAfter %v, want in (0, 50ms]", res.RetryAfter)
		}
	}
	if denied == 0 {
		t.Fatal("300 calls back to back on one event per 50ms: none denied")
	}
	t.Logf("%d of 300 denied", denied)
}

func TestGCRABadInput(t *testing.T) {
	t.Parallel()
	if _, err := ratelimit.NewGCRA(nil); err == nil {
		t.Error("NewGCRA(nil): want an error")
	}
	g, _, _ := newGCRA(t)
	bad := []badInput[ratelimit.GCRALimit]{
		{ratelimit.GCRALimit{}, 1, "rate must be at least 1"},
		{ratelimit.GCRALimit{Rate: 10, Period: time.Second}, 1, "burst must be at least 1"},
		{ratelimit.GCRALimit{Rate: 1, Burst: 1}, 1, "period must be at least 1µs"},
		{ratelimit.PerSecond(1), -1, "n must not be negative"},
	}
	refuses(t, "AllowN", g.AllowN, bad)
	refuses(t, "AllowAtMost", g.AllowAtMost, bad)
}

func TestGCRARedisErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	g, err := ratelimit.NewGCRA(unreachableRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Allow(ctx, "k", ratelimit.PerSecond(1)); err == nil || !strings.HasPrefix(err.Error(), `ratelimit: gcra "k": `) {
		t.Errorf("Allow with Redis down: %v, want a ratelimit: error naming the key", err)
	}
	if err := g.Reset(ctx, "k"); err == nil || !strings.HasPrefix(err.Error(), `ratelimit: gcra reset "k": `) {
		t.Errorf("Reset with Redis down: %v, want a ratelimit: error naming the key", err)
	}

	// A key that holds something else (here a sliding-window log) is an
	// error, not a reset.
	rdb, prefix := newRedis(t)
	sw, err := ratelimit.NewSlidingWindow(rdb, ratelimit.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	g, err = ratelimit.NewGCRA(rdb, ratelimit.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Allow(ctx, "shared", ratelimit.Limit{N: 1, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Allow(ctx, "shared", ratelimit.PerSecond(1)); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("GCRA on a sliding-window key: %v, want a WRONGTYPE error", err)
	}
}

func BenchmarkGCRAAllow(b *testing.B) {
	g, _, _ := newGCRA(b)
	lim := ratelimit.PerSecond(1e9) // never reached: every call takes a cell
	benchAllow(b, func(ctx context.Context, key string) (ratelimit.Result, error) {
		return g.Allow(ctx, key, lim)
	})
}
