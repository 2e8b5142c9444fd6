package worker

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

//go:embed runs.lua
var runsLua string

var runsScript = redis.NewScript(runsLua)

// runCounter counts each item's runs and failures in Redis, so that every
// worker agrees on KEYFLEET_ATTEMPT and max_attempts. Keys expire after
// ttl without activity and are deleted at the item's final outcome. If
// Redis loses its state, counting starts again (an item may then run more
// than max_attempts times in all).
type runCounter struct {
	rdb    redis.Scripter
	prefix string
	ttl    time.Duration
}

type runCount struct {
	Runs, Failures int
	// Unreported: the previous run never reported (its worker died) and
	// was counted as a failure now.
	Unreported bool
}

func (c *runCounter) key(batch, item string) string { return c.prefix + batch + "/" + item }

func (c *runCounter) do(ctx context.Context, op, batch, item string) (runCount, error) {
	reply, err := runsScript.Run(ctx, c.rdb, []string{c.key(batch, item)}, op, int64(c.ttl.Seconds())).Result()
	if err != nil {
		return runCount{}, fmt.Errorf("run counter %s: %w", op, err)
	}
	v, err := ratelimit.Int64s(reply, 3)
	if err != nil {
		return runCount{}, fmt.Errorf("run counter %s: %w", op, err)
	}
	return runCount{Runs: int(v[0]), Failures: int(v[1]), Unreported: v[2] == 1}, nil
}

// start records the start of a run and returns the run number.
func (c *runCounter) start(ctx context.Context, batch, item string) (runCount, error) {
	return c.do(ctx, "start", batch, item)
}

// fail records that the current run failed.
func (c *runCounter) fail(ctx context.Context, batch, item string) (runCount, error) {
	return c.do(ctx, "fail", batch, item)
}

// settle records that the current run ended without a failure (rate
// limited, rejected key, interrupted).
func (c *runCounter) settle(ctx context.Context, batch, item string) error {
	_, err := c.do(ctx, "settle", batch, item)
	return err
}

// done forgets the item (final outcome reached).
func (c *runCounter) done(ctx context.Context, batch, item string) error {
	_, err := c.do(ctx, "done", batch, item)
	return err
}
