package ratelimit_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// restampScript runs the libraries' restamp functions on fixed times
// (µs), so that a window's answer before and after can be compared:
// ARGV[1] op: 'sw' | 'cw' | 'gcra'; the rest per op (see below).
var restampScript = redis.NewScript(ratelimit.SlidingWindowLua() + ratelimit.GCRALua() + ratelimit.CostWindowLua() + `
local op = ARGV[1]
if op == 'sw' then
  -- record 'a' at 1000 and 'b' at 2000 (window 10000), restamp ARGV[2]
  -- to ARGV[3]; return moved, the wait for 2 starts at 11500 (limit 2),
  -- and the key's PTTL (read here: a window of 10 ms expires the key
  -- within milliseconds of real time)
  sw_record(KEYS[1], 10000, 1000, 'a')
  sw_record(KEYS[1], 10000, 2000, 'b')
  local moved = sw_restamp(KEYS[1], 10000, ARGV[2], tonumber(ARGV[3]))
  local wait = sw_wait(KEYS[1], 2, 10000, 11500, 1)
  return {moved, wait, redis.call('PTTL', KEYS[1])}
elseif op == 'cw' then
  -- 'a' costs 30 at 1000, 'b' 50 at 2000 (window 10000, limit 100);
  -- reconcile b to 60, restamp ARGV[2] (cost ARGV[3]) to ARGV[4]; return
  -- moved, the sum at 11500, when 20 more fit then and both keys' PTTL
  cw_record(KEYS[1], KEYS[2], 10000, 1000, 'a', 30)
  cw_record(KEYS[1], KEYS[2], 10000, 2000, 'b', 50)
  cw_reconcile(KEYS[1], KEYS[2], 'b', 50, 60)
  local moved = cw_restamp(KEYS[1], KEYS[2], 10000, ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
  local sum = cw_sum(KEYS[1], KEYS[2], 10000, 11500)
  return {moved, sum, cw_when(KEYS[1], KEYS[2], 100, 10000, 11500, 20), redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}
end
-- gcra: tat ARGV[2] ('' none), at ARGV[3], interval 100
return tostring(gcra_restamp(tonumber(ARGV[2]), tonumber(ARGV[3]), 100))
`)

func TestRestamp(t *testing.T) {
	rdb, prefix := newRedis(t)
	ctx := context.Background()
	run := func(keys []string, args ...any) []any {
		t.Helper()
		for _, k := range keys {
			rdb.Del(ctx, k)
		}
		v, err := restampScript.Run(ctx, rdb, keys, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sw := []string{prefix + "sw"}
	// Counted from its grant, 'a' left the window at 11000: one more fits.
	// Moved to 1600 (its request left then), it stays until 11600.
	for _, tc := range []struct {
		member string
		at     int64
		moved  int64
		wait   int64
	}{
		{"a", 1600, 1, 100}, // in the window until 11600
		{"a", 900, 0, 0},    // never earlier than recorded
		{"zz", 1600, 0, 0},  // unknown: nothing added
		{"b", 2500, 1, 0},   // 'a' has left, 'b' stays: one fits
	} {
		v := run(sw, "sw", tc.member, tc.at)
		if v[0].(int64) != tc.moved || v[1].(int64) != tc.wait {
			t.Errorf("sw restamp %s to %d = moved %v, wait %v; want %d, %d", tc.member, tc.at, v[0], v[1], tc.moved, tc.wait)
		}
		if ttl := v[2].(int64); ttl <= 0 {
			t.Errorf("the window's key has no expiry after a restamp of %s: PTTL %d", tc.member, ttl)
		}
	}

	cw := []string{prefix + "cw", prefix + "cws"}
	for _, tc := range []struct {
		id        string
		cost      int64
		at        int64
		moved     int64
		sum, when int64
	}{
		// 'a' (30) moved to 1600 stays until 11600: 90 in the window, 20
		// more fit once it leaves.
		{"a", 30, 1600, 1, 90, 11600},
		// 'b' was reconciled to 60: the member charged 50 is gone.
		{"b", 50, 2500, 0, 60, 11500},
		{"b", 60, 2500, 1, 60, 11500},
		{"a", 30, 500, 0, 60, 11500},
	} {
		v := run(cw, "cw", tc.id, tc.cost, tc.at)
		if v[0].(int64) != tc.moved || v[1].(int64) != tc.sum || v[2].(int64) != tc.when {
			t.Errorf("cw restamp %s:%d to %d = moved %v, sum %v, fits at %v; want %d, %d, %d", tc.id, tc.cost, tc.at, v[0], v[1], v[2], tc.moved, tc.sum, tc.when)
		}
		for i, k := range cw {
			if ttl := v[3+i].(int64); ttl <= 0 {
				t.Errorf("%s has no expiry after a restamp of %s: PTTL %d", k, tc.id, ttl)
			}
		}
	}

	for _, tc := range []struct {
		tat, at string
		want    string
	}{
		{"", "1000", "1100"},
		{"1050", "1000", "1100"}, // the cell went out at 1000: the next one at 1100
		{"1300", "1000", "1300"}, // later cells keep their TAT
	} {
		v, err := restampScript.Run(ctx, rdb, []string{prefix + "g"}, "gcra", tc.tat, tc.at).Text()
		if err != nil || v != tc.want {
			t.Errorf("gcra_restamp(%s, %s) = %q, %v; want %s", tc.tat, tc.at, v, err, tc.want)
		}
	}
}
