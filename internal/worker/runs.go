package worker

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

//go:embed runs.lua
var runsLua string

var runsScript = redis.NewScript(runsLua)

// runLog keeps each item's run counters in Redis (executor.RunLog), one
// hash per item (runs.lua says what each op does). Keys expire after ttl
// without activity and are deleted at the item's final outcome (op done).
type runLog struct {
	rdb    redis.Scripter
	prefix string
	ttl    time.Duration
}

// runLogTimeout bounds one op.
const runLogTimeout = 5 * time.Second

func (c *runLog) Do(ctx context.Context, batch, id, op string, delivery uint64, held int, text string) (executor.RunCount, error) {
	ctx, cancel := context.WithTimeout(ctx, runLogTimeout)
	defer cancel()
	args := []any{op, delivery, held, int64(c.ttl.Seconds())}
	if op == executor.OpRefuse || (op == executor.OpFail && text != "") {
		args = append(args, text)
	}
	reply, err := runsScript.Run(ctx, c.rdb, []string{c.prefix + batch + "/" + id}, args...).Result()
	if err != nil {
		return executor.RunCount{}, fmt.Errorf("run counter %s: %w", op, err)
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) != 7 {
		return executor.RunCount{}, fmt.Errorf("run counter %s: unexpected reply %T", op, reply)
	}
	v, err := ratelimit.Int64s(arr[:5], 5)
	if err != nil {
		return executor.RunCount{}, fmt.Errorf("run counter %s: %w", op, err)
	}
	refused, _ := arr[5].(string)
	streak, _ := arr[6].(string)
	return executor.RunCount{Runs: int(v[0]), Failures: int(v[1]), Lost: int(v[2]), Limited: int(v[3]), Refusals: int(v[4]), Refused: refused,
		Streak: streak}, nil
}
