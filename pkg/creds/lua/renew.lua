-- Extend a live lease.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  credential id
-- ARGV[2]  lease member "<token>|<owner>"
-- ARGV[3]  lease TTL in microseconds
-- Returns {expiry_us, now_us}, or {0, now_us} when the lease is gone
-- (released, expired or never granted): nothing is changed then, except
-- that an expired entry is dropped. The lease's entry among its
-- account's runs in flight (leases:*<a>) moves with it.
local now = now_us()
local lk = k_leases(ARGV[1])
local exp = tonumber(redis.call('ZSCORE', lk, ARGV[2]) or '0') or 0
if exp == 0 then
  return {'0', n2s(now)}
end
if exp <= now then
  redis.call('ZREM', lk, ARGV[2])
  return {'0', n2s(now)}
end
local new_exp = now + tonumber(ARGV[3])
redis.call('ZADD', lk, 'XX', n2s(new_exp), ARGV[2])
renew_up(ARGV[1], ARGV[2], new_exp)
return {n2s(new_exp), n2s(now)}
