-- Sliding-window limiter: at most ARGV[1] starts in any ARGV[2] microseconds.
-- KEYS[1]  the log of starts (sorted set)
-- ARGV[1]  limit (N)
-- ARGV[2]  window in microseconds
-- ARGV[3]  n, the number of starts requested
-- ARGV[4]  a unique member prefix for the starts recorded by this call
-- Returns {allowed, remaining, retry_after_us (-1 when allowed), reset_after_us}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

local wait_us, count = sw_wait(key, limit, window_us, now_us, n)
if wait_us ~= 0 then
  return {0, limit - count, wait_us, sw_reset_us(key, window_us, now_us)}
end
for i = 1, n do
  sw_record(key, window_us, now_us, ARGV[4] .. ':' .. i)
end
return {n, limit - count - n, -1, window_us}
