package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed gcra.lua
var gcraScriptSrc string

var gcraScript = redis.NewScript(gcraScriptSrc)

// GCRALimit is a GCRA limit: a bucket of Burst events refilled at Rate
// events per Period. It mirrors redis_rate.Limit.
type GCRALimit struct {
	// Rate is the number of events refilled per Period; at least 1.
	Rate int
	// Burst is the number of events allowed at once; at least 1.
	Burst int
	// Period is the time over which Rate events are refilled; at least 1µs.
	Period time.Duration
}

// PerSecond allows rate events a second, all of them at once (burst = rate).
func PerSecond(rate int) GCRALimit {
	return GCRALimit{Rate: rate, Burst: rate, Period: time.Second}
}

// PerMinute allows rate events a minute, all of them at once (burst = rate).
func PerMinute(rate int) GCRALimit {
	return GCRALimit{Rate: rate, Burst: rate, Period: time.Minute}
}

// PerHour allows rate events an hour, all of them at once (burst = rate).
func PerHour(rate int) GCRALimit {
	return GCRALimit{Rate: rate, Burst: rate, Period: time.Hour}
}

// IsZero reports whether the limit is unset.
func (l GCRALimit) IsZero() bool { return l == GCRALimit{} }

// String renders the limit like redis_rate: "10 req/s (burst 10)".
func (l GCRALimit) String() string {
	var p string
	switch l.Period {
	case time.Second:
		p = "s"
	case time.Minute:
		p = "m"
	case time.Hour:
		p = "h"
	default:
		p = l.Period.String()
	}
	return fmt.Sprintf("%d req/%s (burst %d)", l.Rate, p, l.Burst)
}

// Validate reports whether the limit can be enforced.
func (l GCRALimit) Validate() error {
	if l.Rate < 1 {
		return fmt.Errorf("ratelimit: GCRA rate must be at least 1, got %d", l.Rate)
	}
	if l.Burst < 1 {
		return fmt.Errorf("ratelimit: GCRA burst must be at least 1, got %d (nothing would ever be allowed)", l.Burst)
	}
	if l.Period < time.Microsecond {
		return fmt.Errorf("ratelimit: GCRA period must be at least 1µs, got %s", l.Period)
	}
	return nil
}

// GCRA is a limiter running the generic cell rate algorithm in Redis, with
// the semantics of github.com/go-redis/redis_rate v10. Each key costs one
// small string in Redis that expires when its bucket is full again. Safe
// for concurrent use.
//
// The state of key lives in Redis under prefix+key (see WithPrefix). A key
// holds either a GCRA state or a SlidingWindow log: do not use the
// same key (under the same prefix) with both, Redis would reject the second
// with a WRONGTYPE error.
type GCRA struct {
	limiter
}

// NewGCRA returns a GCRA limiter that runs its script on rdb (a
// *redis.Client, *redis.ClusterClient or *redis.Ring).
func NewGCRA(rdb redis.Scripter, opts ...Option) (*GCRA, error) {
	l, err := newLimiter("gcra", rdb, opts)
	if err != nil {
		return nil, err
	}
	return &GCRA{l}, nil
}

// Allow is AllowN(ctx, key, limit, 1).
func (g *GCRA) Allow(ctx context.Context, key string, limit GCRALimit) (Result, error) {
	return g.AllowN(ctx, key, limit, 1)
}

// AllowN takes n events under key if all of them are allowed now, or none.
// n = 0 reports the state without taking anything. When denied, RetryAfter
// is how long until n events are allowed; like redis_rate it is computed
// even when n > limit.Burst, which is never allowed, so callers that may ask
// for more than Burst should check that first.
func (g *GCRA) AllowN(ctx context.Context, key string, limit GCRALimit, n int) (Result, error) {
	return g.run(ctx, key, limit, n, "n")
}

// AllowAtMost takes as many events as are allowed now under key, up to n,
// and reports how many in Result.Allowed. When none is allowed, RetryAfter
// is how long until one is.
func (g *GCRA) AllowAtMost(ctx context.Context, key string, limit GCRALimit, n int) (Result, error) {
	return g.run(ctx, key, limit, n, "at_most")
}

// Reset forgets every event counted under key.
func (g *GCRA) Reset(ctx context.Context, key string) error {
	return g.reset(ctx, key)
}

func (g *GCRA) run(ctx context.Context, key string, limit GCRALimit, n int, mode string) (Result, error) {
	if err := limit.Validate(); err != nil {
		return Result{}, err
	}
	if n < 0 {
		return Result{}, fmt.Errorf("ratelimit: n must not be negative, got %d", n)
	}
	v, err := gcraScript.Run(ctx, g.rdb, []string{g.prefix + key},
		limit.Burst, limit.Rate, limit.Period.Microseconds(), n, mode).Result()
	if err != nil {
		return Result{}, fmt.Errorf("ratelimit: gcra %q: %w", key, err)
	}
	res, err := decodeGCRA(v)
	if err != nil {
		return Result{}, fmt.Errorf("ratelimit: gcra %q: %w", key, err)
	}
	return res, nil
}

// decodeGCRA reads {allowed, remaining, "retry_after_us", "reset_after_us"}.
func decodeGCRA(v any) (Result, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 4 {
		return Result{}, fmt.Errorf("unexpected script reply %v (%T), want 4 elements", v, v)
	}
	allowed, err := Int64(arr[0])
	if err != nil {
		return Result{}, fmt.Errorf("allowed: %w", err)
	}
	remaining, err := Int64(arr[1])
	if err != nil {
		return Result{}, fmt.Errorf("remaining: %w", err)
	}
	retryUs, err := Float64(arr[2])
	if err != nil {
		return Result{}, fmt.Errorf("retry after: %w", err)
	}
	resetUs, err := Float64(arr[3])
	if err != nil {
		return Result{}, fmt.Errorf("reset after: %w", err)
	}
	res := Result{
		Allowed:    int(allowed),
		Remaining:  int(max(remaining, 0)),
		RetryAfter: -1,
		ResetAfter: microseconds(resetUs),
	}
	if retryUs != -1 {
		res.RetryAfter = microseconds(retryUs)
	}
	return res, nil
}

// microseconds converts a non-negative count of microseconds to a duration,
// rounded to the nanosecond and capped at the largest duration.
func microseconds(us float64) time.Duration {
	ns := math.Round(us * float64(time.Microsecond))
	switch {
	case ns <= 0:
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	default:
		return time.Duration(ns)
	}
}
