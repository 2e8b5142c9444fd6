-- Acquire a lease on the least recently used credential that is usable now.
-- KEYS[1]  <prefix>creds
-- KEYS[2]  <prefix>fence
-- ARGV[1]  owner (who holds the lease; shown in stats)
-- ARGV[2]  lease TTL in microseconds
-- ARGV[3..] optional: the only credential ids this caller may use
-- Returns {1, id, token, expiry_us, now_us} on success;
--         {0, wake_us, now_us} when none is usable now, where wake_us is the
--         soonest moment a cooldown, lease or rate window ends (-1: only a
--         release or an admin change can free one);
--         {-1} when the pool holds no (allowed) credential.
-- A credential is usable when it is not disabled, not cooling, holds fewer
-- live leases than max, and (with a rate) its window has room.
local now = now_us()
local only = nil
if #ARGV >= 3 then
  only = {}
  for i = 3, #ARGV do
    only[ARGV[i]] = true
  end
end

local wake_at = -1
local function soon(at)
  if wake_at < 0 or at < wake_at then
    wake_at = at
  end
end

local seen = 0
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  if only == nil or only[id] then
    seen = seen + 1
    local c = redis.call('HMGET', k_cred(id), 'max', 'rate_n', 'rate_us', 'disabled')
    if c[4] ~= '1' then
      local cool = cooling_until(id, now)
      if cool > 0 then
        soon(cool)
      else
        local lk = k_leases(id)
        redis.call('ZREMRANGEBYSCORE', lk, '-inf', n2s(now))
        local max = tonumber(c[1]) or 1
        local held = redis.call('ZCARD', lk)
        if held >= max then
          -- room comes back when held-max+1 leases have ended
          local e = redis.call('ZRANGE', lk, held - max, held - max, 'WITHSCORES')
          if #e > 0 then
            soon(tonumber(e[2]))
          end
        else
          local rate_n = tonumber(c[2]) or 0
          local rate_us = tonumber(c[3]) or 0
          local rk = k_rate(id)
          local wait = 0
          if rate_n > 0 then
            wait = sw_wait(rk, rate_n, rate_us, now, 1)
          end
          if wait ~= 0 then
            if wait > 0 then
              soon(now + wait)
            end
          else
            local fence = redis.call('INCR', KEYS[2])
            if fence <= now then
              -- Tokens follow the clock when the counter is behind it (first
              -- use, or after Redis lost its state), so they keep increasing.
              fence = now
              redis.call('SET', KEYS[2], n2s(fence))
            end
            local token = n2s(fence)
            local exp = now + tonumber(ARGV[2])
            redis.call('ZADD', lk, n2s(exp), token .. '|' .. ARGV[1])
            if rate_n > 0 then
              sw_record(rk, rate_us, now, token)
            end
            redis.call('ZADD', KEYS[1], n2s(now), id)
            return {1, id, token, n2s(exp), n2s(now)}
          end
        end
      end
    end
  end
end
if seen == 0 then
  return {-1}
end
return {0, n2s(wake_at), n2s(now)}
