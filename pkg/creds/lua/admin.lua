-- Operator changes to one credential.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  credential id
-- ARGV[2]  op: "limits" | "disable" | "enable" | "cool" | "remove"
-- ARGV[3..] per op:
--   limits:  max ("" keeps it), rate_n ("" keeps the rate; "0" removes it), rate_us
--   disable: reason
--   enable:  (none) clears the disabled state and any cooldown
--   cool:    duration in microseconds, reason; never shortens a longer cooldown
--   remove:  (none) deletes the credential and its state; live leases
--            then fail to renew
-- ARGV[last] origin (pool instance, for the wake message)
-- Returns 1 (for cool: the cooldown's end in microseconds), or -1 when the
-- credential does not exist.
local id, op = ARGV[1], ARGV[2]
if not exists(id) then
  return -1
end
local now = now_us()
local origin = ARGV[#ARGV]
if op == 'limits' then
  if ARGV[3] ~= '' then
    redis.call('HSET', k_cred(id), 'max', ARGV[3])
  end
  if ARGV[4] ~= '' then
    redis.call('HSET', k_cred(id), 'rate_n', ARGV[4], 'rate_us', ARGV[5])
  end
  wake(origin)
elseif op == 'disable' then
  redis.call('HSET', k_cred(id), 'disabled', '1', 'disabled_reason', ARGV[3], 'disabled_at', n2s(now))
elseif op == 'enable' then
  redis.call('HDEL', k_cred(id), 'disabled', 'disabled_reason', 'disabled_at')
  redis.call('DEL', k_cool(id))
  wake(origin)
elseif op == 'cool' then
  return n2s(set_cooling(id, now, tonumber(ARGV[3]), ARGV[4]))
elseif op == 'remove' then
  redis.call('ZREM', KEYS[1], id)
  redis.call('DEL', k_cred(id), k_cool(id), k_leases(id), k_rate(id))
else
  return redis.error_reply('unknown op ' .. op)
end
return 1
