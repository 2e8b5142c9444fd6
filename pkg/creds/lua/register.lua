-- Register (sync) account and credential definitions.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  claim TTL (us), for grants to waiters this frees
-- ARGV[2]  reserve: the share of every limit that starts of priority >= 1
--          leave free for interactive ones (0..1)
-- ARGV[3]  n: how many accounts follow
-- ARGV[4..] n groups of 3: account ("*<id>"), its enclosing account
--          ("*<id>", '' none), limits (the encoded list; '' none)
-- then groups of 5: credential id, max, limits, key groups (','-separated;
--          shown in stats), account ("*<id>", '' none)
-- An account or credential new to the pool gets the given limits. For a
-- known one, the limits are replaced only when the definition changed
-- since the last register (cfg_* fields hold what was last registered),
-- so a limit set at run time (SetLimits) survives other processes
-- starting with the same definitions. Disabled state, rests and counters
-- are kept. A credential that moves to another account (or out of one)
-- leaves its old account's indexes.
-- Returns the number of credentials and accounts whose limits were
-- written.
local now = now_us()
local claim_ttl = tonumber(ARGV[1])
redis.call('HSET', K_POOL, 'reserve', ARGV[2])
if redis.call('EXISTS', K_FENCE) == 0 then
  redis.call('SET', K_FENCE, n2s(now))
end
local written = 0
local n = tonumber(ARGV[3])
local i = 4
for _ = 1, n do
  local aid, up, lims = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  local k = k_cred(aid)
  local cfg = redis.call('HMGET', k, 'max', 'cfg_limits')
  if not cfg[1] or (cfg[2] or '') ~= lims then
    redis.call('HSET', k, 'max', n2s(ACCT_MAX), 'cfg_limits', lims)
    write_limits(aid, lims)
    written = written + 1
  end
  if up == '' then
    redis.call('HDEL', k, 'up')
  else
    redis.call('HSET', k, 'up', up)
  end
  redis.call('ZADD', K_ACCTS, 'NX', '0', aid)
end
local ids = {}
while i <= #ARGV do
  local id, max, lims, groups, up = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  local k = k_cred(id)
  if groups == '' then
    redis.call('HDEL', k, 'groups')
  else
    redis.call('HSET', k, 'groups', groups)
  end
  local cfg = redis.call('HMGET', k, 'cfg_max', 'cfg_limits', 'up')
  if cfg[1] ~= max or (cfg[2] or '') ~= lims then
    redis.call('HSET', k, 'max', max, 'cfg_max', max, 'cfg_limits', lims)
    write_limits(id, lims)
    written = written + 1
  elseif redis.call('HEXISTS', k, 'lim0') == 0 then
    -- Registered by an older version: split its limits as they are now.
    write_limits(id, redis.call('HGET', k, 'limits') or '')
  end
  local old = cfg[3] or ''
  if old ~= up then
    if old ~= '' then
      redis.call('ZREM', k_ar(old), id)
      redis.call('ZREM', k_as(old), id)
      redis.call('SREM', k_ak(old), id)
    end
    if up == '' then
      redis.call('HDEL', k, 'up')
    else
      redis.call('HSET', k, 'up', up)
    end
    redis.call('ZREM', K_READY, id)
    redis.call('ZREM', K_SCHED, id)
    if old ~= '' then
      reindex_unit(old, now, true)
    end
  end
  if up ~= '' then
    redis.call('SADD', k_ak(up), id)
  end
  redis.call('ZADD', K_CREDS, 'NX', '0', id)
  ids[#ids + 1] = id
end
for _, id in ipairs(ids) do
  reindex(id, now)
end
for _, g in ipairs(redis.call('SMEMBERS', K_GROUPS)) do
  group_units(g)
end
recompute_maxcost()
local _, hol, waited = serve(now, '', claim_ttl, 64)
arm_timer(now, '', hol, waited)
return written
