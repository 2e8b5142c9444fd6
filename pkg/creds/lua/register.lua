-- Register (sync) credential definitions.
-- KEYS[1]  <prefix>creds
-- KEYS[2]  <prefix>fence
-- ARGV[1]  origin (pool instance, for the wake message)
-- ARGV[2..] groups of 4: id, max, rate_n, rate_us (rate_n 0: no rate)
-- A credential new to the pool gets the given limits. For a known one, the
-- limits are replaced only when the definition changed since the last
-- register (cfg_* fields hold what was last registered), so a limit set at
-- run time (SetLimits) survives other processes starting with the same
-- definitions. Disabled state and cooldowns are kept.
-- Returns the number of credentials whose limits were written.
local now = now_us()
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], n2s(now))
end
local written = 0
for i = 2, #ARGV, 4 do
  local id, max, rn, ru = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local k = k_cred(id)
  local cfg = redis.call('HMGET', k, 'cfg_max', 'cfg_rate_n', 'cfg_rate_us')
  if cfg[1] ~= max or cfg[2] ~= rn or cfg[3] ~= ru then
    redis.call('HSET', k, 'max', max, 'rate_n', rn, 'rate_us', ru,
      'cfg_max', max, 'cfg_rate_n', rn, 'cfg_rate_us', ru)
    written = written + 1
  end
  redis.call('ZADD', KEYS[1], 'NX', '0', id)
end
wake(ARGV[1])
return written
