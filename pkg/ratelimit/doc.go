// Package ratelimit implements rate limiters on Redis with Lua scripts, so
// that any number of processes share one exact limit.
//
// Two algorithms are offered:
//
//   - SlidingWindow: at most N starts in any window of length P. It keeps a
//     log of start times per key (a sorted set), so the bound is exact, not
//     approximated.
//   - GCRA: the generic cell rate algorithm with rate, burst and period, with
//     the semantics of github.com/go-redis/redis_rate.
//
// Every script takes its keys in KEYS and reads the time with
// redis.call('TIME'), so limits hold across machines whose clocks differ.
// The sliding-window log is also published as a Lua library
// (SlidingWindowLua) that pkg/creds embeds in its own scripts, so the
// credential pool enforces per-credential rates with the same code.
package ratelimit
