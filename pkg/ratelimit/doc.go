// Package ratelimit implements rate limiters on Redis with Lua scripts, so
// that any number of processes share one exact limit.
//
// Three algorithms ship:
//
//   - SlidingWindow: at most N starts in any window of length P. It keeps a
//     log of start times per key (a sorted set), so the bound is exact, not
//     approximated.
//   - GCRA: the generic cell rate algorithm with rate, burst and period, with
//     the semantics of github.com/go-redis/redis_rate.
//   - An exact sliding cost window: at most N cost units (tokens, credits)
//     in any window of length P, a sorted set of starts with their costs
//     and a running sum, so a start costs O(log n) whatever its cost. It
//     ships as a Lua library only (CostWindowLua), with no limiter of its
//     own.
//
// Every script takes its keys in KEYS and reads the time with
// redis.call('TIME'), so limits hold across machines whose clocks differ.
// Each algorithm is also published as a Lua library (SlidingWindowLua,
// GCRALua, CostWindowLua) that pkg/creds embeds in its own scripts, so
// the credential pool enforces a credential's limits with the same code
// inside one atomic decision. Int64s, Int64 and Float64 decode script
// replies with checked type assertions.
package ratelimit
