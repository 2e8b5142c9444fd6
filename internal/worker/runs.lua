-- Per-item run counters.
-- KEYS[1]  the item's hash: runs, failures, open (1 while a run has not reported)
-- ARGV[1]  op: start | fail | settle | done
-- ARGV[2]  TTL in seconds (refreshed on every op but done)
-- Returns {runs, failures, unreported} where unreported is 1 when `start`
-- found the previous run open (its worker died) and counted it as failed.
local k = KEYS[1]
local op = ARGV[1]
if op == 'done' then
  redis.call('DEL', k)
  return {0, 0, 0}
end
local unreported = 0
if op == 'start' then
  if redis.call('HGET', k, 'open') == '1' then
    redis.call('HINCRBY', k, 'failures', 1)
    unreported = 1
  end
  redis.call('HSET', k, 'open', '1')
  redis.call('HINCRBY', k, 'runs', 1)
elseif op == 'fail' then
  redis.call('HSET', k, 'open', '0')
  redis.call('HINCRBY', k, 'failures', 1)
elseif op == 'settle' then
  redis.call('HSET', k, 'open', '0')
else
  return redis.error_reply('unknown op ' .. op)
end
redis.call('EXPIRE', k, ARGV[2])
local v = redis.call('HMGET', k, 'runs', 'failures')
return {tonumber(v[1] or '0'), tonumber(v[2] or '0'), unreported}
