package worker

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

//go:embed runs.lua
var runsLua string

var runsScript = redis.NewScript(runsLua)

// runCounter counts each item's runs and failures in Redis, so that every
// worker agrees on KEYFLEET_ATTEMPT and max_attempts. The first run of an
// item's first delivery is not recorded when it starts (most items succeed
// at once, and then nothing is written at all); every later event is.
// Keys expire after ttl without activity and are deleted at the item's
// final outcome. If Redis loses its state, the deliveries JetStream counted
// stand in for the lost runs.
type runCounter struct {
	rdb    redis.Scripter
	prefix string
	ttl    time.Duration
}

type runCount struct {
	Runs, Failures int
	// Lost: earlier runs that never reported (their workers died), counted
	// as failures now.
	Lost int
	// Limited: the rate-limited runs in a row (a failed or refused run
	// ends the row).
	Limited int
	// Refusals: the runs a key refused (401, 402, 403, quota, exit 77);
	// Refused their texts, one a line ("<credential>\t<reason>").
	Refusals int
	Refused  string
}

// itemRuns tracks one delivery of an item.
type itemRuns struct {
	c         *runCounter
	batch, id string
	delivery  uint64
	// wrote: Redis may hold counters for the item (an earlier delivery or
	// this one wrote them), so the final outcome must delete them.
	wrote bool
	// reported: this delivery's last op closed it in Redis (a run that
	// reported its end, or a norun): the next delivery counts nothing
	// lost for it.
	reported bool
	cur      runCount
}

func (c *runCounter) forItem(batch, id string, delivery uint64) *itemRuns {
	return &itemRuns{c: c, batch: batch, id: id, delivery: delivery, wrote: delivery > 1}
}

func (r *itemRuns) do(ctx context.Context, op string, args ...any) (runCount, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	reply, err := runsScript.Run(ctx, r.c.rdb, []string{r.c.prefix + r.batch + "/" + r.id},
		append([]any{op, r.delivery, r.cur.Runs, int64(r.c.ttl.Seconds())}, args...)...).Result()
	if err != nil {
		return runCount{}, fmt.Errorf("run counter %s: %w", op, err)
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) != 6 {
		return runCount{}, fmt.Errorf("run counter %s: unexpected reply %T", op, reply)
	}
	v, err := ratelimit.Int64s(arr[:5], 5)
	if err != nil {
		return runCount{}, fmt.Errorf("run counter %s: %w", op, err)
	}
	refused, _ := arr[5].(string)
	r.wrote = true
	switch op {
	case "peek":
	case "start":
		r.reported = false
	default:
		r.reported = true
	}
	return runCount{Runs: int(v[0]), Failures: int(v[1]), Lost: int(v[2]), Limited: int(v[3]), Refusals: int(v[4]), Refused: refused}, nil
}

// start begins a run and returns its number (and what was lost before).
func (r *itemRuns) start(ctx context.Context) (runCount, error) {
	if !r.wrote && r.cur.Runs == 0 {
		// The first run of the first delivery: nothing to write yet.
		r.cur = runCount{Runs: 1}
		return r.cur, nil
	}
	st, err := r.do(ctx, "start")
	if err == nil {
		r.cur = st
	}
	return st, err
}

// fail records that the current run failed.
func (r *itemRuns) fail(ctx context.Context) (runCount, error) {
	st, err := r.do(ctx, "fail")
	if err != nil {
		st = runCount{Runs: r.cur.Runs, Failures: r.cur.Failures + 1}
	}
	r.cur = st
	return st, err
}

// settle records that the current run ended without a failure (rate
// limited, rejected key, interrupted).
func (r *itemRuns) settle(ctx context.Context) error {
	st, err := r.do(ctx, "settle")
	if err == nil {
		r.cur = st
	}
	return err
}

// peek reads what earlier deliveries recorded (the keys that refused the
// item, above all), writing nothing.
func (r *itemRuns) peek(ctx context.Context) error {
	st, err := r.do(ctx, "peek")
	if err == nil {
		r.cur = st
	}
	return err
}

// limited records that the current run was rate limited; the count says
// how many in a row.
func (r *itemRuns) limited(ctx context.Context) (runCount, error) {
	st, err := r.do(ctx, "limited")
	if err != nil {
		st = runCount{Runs: r.cur.Runs, Failures: r.cur.Failures, Limited: r.cur.Limited + 1}
	}
	r.cur = st
	return st, err
}

// refuse records that a key refused the current run; text is
// "<credential>\t<reason>".
func (r *itemRuns) refuse(ctx context.Context, text string) (runCount, error) {
	st, err := r.do(ctx, "refuse", text)
	if err != nil {
		st = r.cur
		st.Refusals++
		st.Refused = strings.TrimPrefix(st.Refused+"\n"+text, "\n")
	}
	r.cur = st
	return st, err
}

// handBack records that this delivery ends before running the item again
// (shutdown, or its message lost while it waited for a credential), so the
// next delivery counts no lost run for it.
//
// A delivery after the first holds the counts of earlier ones (its peek):
// unless this delivery itself reported, it must say so, or the next
// delivery counts it as a run that died.
func (r *itemRuns) handBack(ctx context.Context) error {
	if r.reported {
		return nil // this delivery's last run already reported (settle or fail)
	}
	_, err := r.do(ctx, "norun")
	return err
}

// done forgets the item at its final outcome.
func (r *itemRuns) done(ctx context.Context) error {
	if !r.wrote {
		return nil // nothing was ever written
	}
	_, err := r.do(ctx, "done")
	return err
}
