package ratelimit

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Option configures a limiter.
type Option func(*options) error

type options struct{ prefix string }

// WithPrefix sets the prefix of every key the limiter writes (default
// "ratelimit:"). Put a hash tag in it, or in the keys, to keep related keys
// in one Redis Cluster slot.
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		o.prefix = prefix
		return nil
	}
}

// limiter is what every limiter holds: the client its scripts run on, the
// prefix of its keys, and its name in errors ("gcra").
type limiter struct {
	rdb    redis.Scripter
	prefix string
	name   string
}

// newLimiter checks the client every limiter takes and applies opts.
func newLimiter(name string, rdb redis.Scripter, opts []Option) (limiter, error) {
	o := options{prefix: "ratelimit:"}
	if rdb == nil {
		return limiter{}, fmt.Errorf("ratelimit: nil redis client")
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return limiter{}, err
		}
	}
	return limiter{rdb: rdb, prefix: o.prefix, name: name}, nil
}

// reset forgets every event counted under key.
func (l limiter) reset(ctx context.Context, key string) error {
	if err := resetScript.Run(ctx, l.rdb, []string{l.prefix + key}).Err(); err != nil {
		return fmt.Errorf("ratelimit: %s reset %q: %w", l.name, key, err)
	}
	return nil
}
