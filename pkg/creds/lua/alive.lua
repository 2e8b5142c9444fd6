-- Keep a pool handle's queued waiters alive (the steps nobody asks for
-- while it only waits). Not prepended with the libraries: it is the most
-- frequent call of a large waiting fleet.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  instance
-- ARGV[2]  alive TTL (us)
-- Returns {waiters of the instance in the queue, grants waiting for it,
-- 1 when the pool's timed step is overdue (its owner died) else 0 (then
-- this handle runs it), Redis's time in us}.
local pfx = string.sub(KEYS[1], 1, -6)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', pfx .. 'procs', string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local at = tonumber(redis.call('HGET', pfx .. 'timer', 'at') or '') or 0
local overdue = 0
if at > 0 and at < now - tonumber(ARGV[2]) / 4 then
  overdue = 1
end
return {redis.call('SCARD', pfx .. 'pw:' .. ARGV[1]), redis.call('HLEN', pfx .. 'gr:' .. ARGV[1]), overdue, now}
