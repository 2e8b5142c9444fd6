-- End a lease, with an outcome for the credential.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  credential id
-- ARGV[2]  lease member "<token>|<owner>"
-- ARGV[3]  mode: "ok" | "cool" | "disable"
-- ARGV[4]  cooldown in microseconds (mode cool)
-- ARGV[5]  reason (modes cool and disable)
-- ARGV[6]  origin: the releasing pool instance, sent on the wake channel
-- Returns 1, or 0 when the lease was not live (stale token, expired,
-- released before): then nothing is changed.
local now = now_us()
local id = ARGV[1]
local lk = k_leases(id)
local exp = tonumber(redis.call('ZSCORE', lk, ARGV[2]) or '0') or 0
if exp == 0 then
  return 0
end
redis.call('ZREM', lk, ARGV[2])
if exp <= now then
  return 0
end
local mode = ARGV[3]
if mode == 'cool' then
  set_cooling(id, now, tonumber(ARGV[4]), ARGV[5])
elseif mode == 'disable' then
  redis.call('HSET', k_cred(id), 'disabled', '1', 'disabled_reason', ARGV[5], 'disabled_at', n2s(now))
end
-- Every release changes what waiters wait for: a waiter may be asleep
-- until this lease's expiry, and the soonest event is now a free slot, a
-- cooldown's end or nothing. Wake them to look again.
wake(ARGV[6])
return 1
