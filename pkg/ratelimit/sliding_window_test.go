package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

func newSlidingWindow(t testing.TB) (*ratelimit.SlidingWindow, *redis.Client, string) {
	t.Helper()
	return newLimiter(t, ratelimit.NewSlidingWindow)
}

func TestSlidingWindowDeniesTheExtraStartUntilTheOldestLeaves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw, _, _ := newSlidingWindow(t)
	const period = 300 * time.Millisecond
	lim := ratelimit.Limit{N: 3, Period: period}

	start := time.Now()
	for i := range 3 {
		res, err := sw.Allow(ctx, "k", lim)
		if err != nil {
			t.Fatal(err)
		}
		want := ratelimit.Result{Allowed: 1, Remaining: 2 - i, RetryAfter: -1, ResetAfter: period}
		if res != want {
			t.Fatalf("start %d: got %+v, want %+v", i+1, res, want)
		}
	}

	res, err := sw.Allow(ctx, "k", lim)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed != 0 || res.Remaining != 0 {
		t.Fatalf("4th start: got %+v, want denied with nothing remaining", res)
	}
	// RetryAfter is the time until the oldest start leaves: period minus the
	// time elapsed since it, which is less than the time since start.
	within(t, "RetryAfter", res.RetryAfter, period, start)
	within(t, "ResetAfter", res.ResetAfter, period, start)
	if res.RetryAfter <= 0 || res.ResetAfter < res.RetryAfter {
		t.Fatalf("4th start: got %+v, want 0 < RetryAfter <= ResetAfter", res)
	}

	// Waiting for the window to pass is the condition itself.
	time.Sleep(res.RetryAfter + clockSlack)
	res, err = sw.Allow(ctx, "k", lim)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed != 1 || res.RetryAfter != -1 || res.Remaining > 2 {
		t.Fatalf("after RetryAfter: got %+v, want allowed", res)
	}

	if err := sw.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	res, err = sw.AllowN(ctx, "k", lim, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ratelimit.Result{Allowed: 3, Remaining: 0, RetryAfter: -1, ResetAfter: period}); res != want {
		t.Fatalf("AllowN(3) after Reset: got %+v, want %+v", res, want)
	}
}

func TestSlidingWindowAllowN(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw, _, _ := newSlidingWindow(t)
	lim := ratelimit.Limit{N: 3, Period: time.Minute}

	start := time.Now()
	steps := []struct {
		n    int
		want ratelimit.Result
	}{
		// More than the limit can never fit: RetryAfter -1, nothing recorded.
		{4, ratelimit.Result{Allowed: 0, Remaining: 3, RetryAfter: -1, ResetAfter: 0}},
		{2, ratelimit.Result{Allowed: 2, Remaining: 1, RetryAfter: -1, ResetAfter: time.Minute}},
		{2, ratelimit.Result{Allowed: 0, Remaining: 1, RetryAfter: time.Minute, ResetAfter: time.Minute}},
		{1, ratelimit.Result{Allowed: 1, Remaining: 0, RetryAfter: -1, ResetAfter: time.Minute}},
		{3, ratelimit.Result{Allowed: 0, Remaining: 0, RetryAfter: time.Minute, ResetAfter: time.Minute}},
		{4, ratelimit.Result{Allowed: 0, Remaining: 0, RetryAfter: -1, ResetAfter: time.Minute}},
	}
	for i, st := range steps {
		res, err := sw.AllowN(ctx, "k", lim, st.n)
		if err != nil {
			t.Fatalf("step %d: AllowN(%d): %v", i, st.n, err)
		}
		if res.Allowed != st.want.Allowed || res.Remaining != st.want.Remaining {
			t.Errorf("step %d: AllowN(%d) = %+v, want %+v", i, st.n, res, st.want)
		}
		if st.want.RetryAfter == -1 {
			if res.RetryAfter != -1 {
				t.Errorf("step %d: AllowN(%d).RetryAfter = %v, want -1", i, st.n, res.RetryAfter)
			}
		} else {
			within(t, "RetryAfter", res.RetryAfter, st.want.RetryAfter, start)
		}
		within(t, "ResetAfter", res.ResetAfter, st.want.ResetAfter, start)
	}
}

func TestSlidingWindowLoweredLimitRemainingIsNotNegative(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw, _, _ := newSlidingWindow(t)

	start := time.Now()
	res, err := sw.AllowN(ctx, "k", ratelimit.Limit{N: 5, Period: time.Minute}, 5)
	if err != nil || res.Allowed != 5 {
		t.Fatalf("AllowN(5) = %+v, %v; want 5 allowed", res, err)
	}
	res, err = sw.Allow(ctx, "k", ratelimit.Limit{N: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed != 0 || res.Remaining != 0 {
		t.Fatalf("with the limit lowered to 2: got %+v, want denied and Remaining 0", res)
	}
	// Four of the five starts must leave before one more fits under 2.
	within(t, "RetryAfter", res.RetryAfter, time.Minute, start)
}

func TestSlidingWindowBadInput(t *testing.T) {
	t.Parallel()
	if _, err := ratelimit.NewSlidingWindow(nil); err == nil {
		t.Error("NewSlidingWindow(nil): want an error")
	}
	sw, _, _ := newSlidingWindow(t)
	refuses(t, "AllowN", sw.AllowN, []badInput[ratelimit.Limit]{
		{ratelimit.Limit{}, 1, "count must be at least 1"},
		{ratelimit.Limit{N: 1, Period: time.Microsecond}, 1, "period must be at least 1ms"},
		{ratelimit.Limit{N: 1, Period: time.Second}, 0, "n must be at least 1"},
		{ratelimit.Limit{N: 1, Period: time.Second}, -1, "n must be at least 1"},
	})
}

func TestSlidingWindowRedisDown(t *testing.T) {
	t.Parallel()
	sw, err := ratelimit.NewSlidingWindow(unreachableRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = sw.Allow(context.Background(), "k", ratelimit.Limit{N: 1, Period: time.Second})
	if err == nil || !strings.HasPrefix(err.Error(), `ratelimit: sliding window "k": `) {
		t.Fatalf("Allow with Redis down: %v, want a ratelimit: error naming the key", err)
	}
}

// TestSlidingWindowAnyWindow hammers a small limit from several goroutines
// and checks, on the start times Redis recorded, that no window of length P
// ever held more than N starts.
func TestSlidingWindowAnyWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw, rdb, prefix := newSlidingWindow(t)
	const (
		n       = 5
		period  = 200 * time.Millisecond
		run     = 700 * time.Millisecond
		workers = 4
	)
	lim := ratelimit.Limit{N: n, Period: period}

	var (
		mu      sync.Mutex
		starts  = map[string]float64{} // member -> Redis time in µs
		allowed atomic.Int64
		calls   atomic.Int64
	)
	// The log prunes starts that left the window; each allowed caller copies
	// it at once, long before its own start (and the ones before) can leave.
	snapshot := func() error {
		zs, err := rdb.ZRangeWithScores(ctx, prefix+"k", 0, -1).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, z := range zs {
			m, ok := z.Member.(string)
			if !ok {
				return errors.New("non-string member")
			}
			starts[m] = z.Score
		}
		return nil
	}

	deadline := time.Now().Add(run)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				calls.Add(1)
				res, err := sw.Allow(ctx, "k", lim)
				if err != nil {
					errs <- err
					return
				}
				if res.Allowed == 0 {
					if res.RetryAfter <= 0 || res.RetryAfter > period {
						errs <- errors.New("denied with RetryAfter " + res.RetryAfter.String() + ", want it in (0, P]")
						return
					}
					continue
				}
				allowed.Add(1)
				if err := snapshot(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	if got := int64(len(starts)); got != allowed.Load() {
		t.Fatalf("copied %d starts from the log, but %d were allowed: the machine stalled for a whole window; the check cannot run", got, allowed.Load())
	}
	if allowed.Load() <= n {
		t.Fatalf("%d starts allowed in %v of %d callers hammering %v: the window never moved on", allowed.Load(), run, workers, lim)
	}
	times := make([]float64, 0, len(starts))
	for _, s := range starts {
		times = append(times, s)
	}
	slices.Sort(times)
	for i := 0; i+n < len(times); i++ {
		// Starts i..i+n (n+1 of them) must not fit in a window of length P:
		// the window is half-open, a start leaves exactly P after it began.
		if span := times[i+n] - times[i]; span < float64(period.Microseconds()) {
			t.Errorf("starts %d..%d (Redis µs %.0f..%.0f) are %.0fµs apart: %d starts within %v, limit %v",
				i, i+n, times[i], times[i+n], span, n+1, period, lim)
		}
	}
	t.Logf("%d calls, %d allowed in %v (%v)", calls.Load(), allowed.Load(), run, lim)
}

func BenchmarkSlidingWindowAllow(b *testing.B) {
	sw, _, _ := newSlidingWindow(b)
	// A limit never reached: every call records a start (the costlier path),
	// and the log holds about one period's worth of them.
	lim := ratelimit.Limit{N: 1 << 30, Period: time.Second}
	benchAllow(b, func(ctx context.Context, key string) (ratelimit.Result, error) {
		return sw.Allow(ctx, key, lim)
	})
}
