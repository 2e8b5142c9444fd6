-- Register (sync) credential definitions.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  claim TTL (us), for grants to waiters this frees
-- ARGV[2..] groups of 4: id, max, limits (the encoded list; '' none),
--           key groups (','-separated; shown in stats)
-- A credential new to the pool gets the given limits. For a known one, the
-- limits are replaced only when the definition changed since the last
-- register (cfg_* fields hold what was last registered), so a limit set at
-- run time (SetLimits) survives other processes starting with the same
-- definitions. Disabled state, rests and counters are kept.
-- Returns the number of credentials whose limits were written.
local now = now_us()
local claim_ttl = tonumber(ARGV[1])
if redis.call('EXISTS', K_FENCE) == 0 then
  redis.call('SET', K_FENCE, n2s(now))
end
local written = 0
for i = 2, #ARGV, 4 do
  local id, max, lims, groups = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local k = k_cred(id)
  if groups == '' then
    redis.call('HDEL', k, 'groups')
  else
    redis.call('HSET', k, 'groups', groups)
  end
  local cfg = redis.call('HMGET', k, 'cfg_max', 'cfg_limits')
  if cfg[1] ~= max or (cfg[2] or '') ~= lims then
    redis.call('HSET', k, 'max', max, 'cfg_max', max, 'cfg_limits', lims)
    write_limits(id, lims)
    written = written + 1
  elseif redis.call('HEXISTS', k, 'lim0') == 0 then
    -- Registered by an older version: split its limits as they are now.
    write_limits(id, redis.call('HGET', k, 'limits') or '')
  end
  redis.call('ZADD', K_CREDS, 'NX', '0', id)
  reindex(id, now)
end
recompute_maxcost()
local _, hol, waited = serve(now, '', claim_ttl, 64)
arm_timer(now, '', hol, waited)
return written
