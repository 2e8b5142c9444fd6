package ratelimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed sliding_window_lib.lua
var slidingWindowLib string

//go:embed sliding_window.lua
var slidingWindowScript string

// SlidingWindowLua returns the Lua source of the sliding-window log: local
// functions sw_count, sw_wait, sw_record and sw_reset_us (see the file for
// their contracts). Other scripts prepend it to use the same algorithm
// inside their own atomic decision; pkg/creds does.
func SlidingWindowLua() string { return slidingWindowLib }

var slidingWindow = redis.NewScript(slidingWindowLib + slidingWindowScript)

// SlidingWindow is an exact sliding-window limiter: at most Limit.N events in
// any window of Limit.Period. Safe for concurrent use.
type SlidingWindow struct {
	limiter
}

// NewSlidingWindow returns a limiter that runs its script on rdb (a
// *redis.Client, *redis.ClusterClient or *redis.Ring).
func NewSlidingWindow(rdb redis.Scripter, opts ...Option) (*SlidingWindow, error) {
	l, err := newLimiter("sliding window", rdb, opts)
	if err != nil {
		return nil, err
	}
	return &SlidingWindow{l}, nil
}

// Allow records one event under key if the limit allows it.
func (s *SlidingWindow) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return s.AllowN(ctx, key, limit, 1)
}

// AllowN records n events under key if all n fit in the limit; otherwise it
// records none and says how long to wait for room (RetryAfter is -1 when
// n can never fit, i.e. n > limit.N).
func (s *SlidingWindow) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	if err := limit.Validate(); err != nil {
		return Result{}, err
	}
	if n < 1 {
		return Result{}, fmt.Errorf("ratelimit: n must be at least 1, got %d", n)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	v, err := slidingWindow.Run(ctx, s.rdb, []string{s.prefix + key},
		limit.N, limit.Period.Microseconds(), n, hex.EncodeToString(nonce[:])).Result()
	if err != nil {
		return Result{}, fmt.Errorf("ratelimit: sliding window %q: %w", key, err)
	}
	vals, err := Int64s(v, 4)
	if err != nil {
		return Result{}, fmt.Errorf("ratelimit: sliding window %q: %w", key, err)
	}
	res := Result{
		Allowed:    int(vals[0]),
		Remaining:  int(vals[1]),
		RetryAfter: time.Duration(vals[2]) * time.Microsecond,
		ResetAfter: time.Duration(vals[3]) * time.Microsecond,
	}
	if vals[2] == -1 {
		res.RetryAfter = -1
	}
	if res.Remaining < 0 {
		res.Remaining = 0 // the limit was lowered below the starts in the window
	}
	return res, nil
}

// Reset forgets every event recorded under key.
func (s *SlidingWindow) Reset(ctx context.Context, key string) error {
	return s.reset(ctx, key)
}
