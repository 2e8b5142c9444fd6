-- Read the state of every credential.
-- KEYS[1]  <prefix>creds
-- Returns {now_us, {cred}, ...} where each cred is
--   {id, max, rate_n, rate_us, disabled, disabled_reason, disabled_at,
--    cool_until, cool_reason, last_used_us, starts_in_window,
--    {member, expiry_us, member, expiry_us, ...}}
-- Expired leases and starts that left the window are dropped on the way.
local now = now_us()
local out = {n2s(now)}
local ids = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #ids, 2 do
  local id, last = ids[i], ids[i + 1]
  local c = redis.call('HMGET', k_cred(id), 'max', 'rate_n', 'rate_us', 'disabled', 'disabled_reason', 'disabled_at')
  local cool = redis.call('HMGET', k_cool(id), 'until', 'reason')
  local cu = tonumber(cool[1] or '0') or 0
  if cu <= now then
    cu = 0
    cool[2] = ''
  end
  local lk = k_leases(id)
  redis.call('ZREMRANGEBYSCORE', lk, '-inf', n2s(now))
  local leases = redis.call('ZRANGE', lk, 0, -1, 'WITHSCORES')
  local starts = 0
  local rate_n = tonumber(c[2]) or 0
  if rate_n > 0 then
    starts = sw_count(k_rate(id), tonumber(c[3]), now)
  end
  out[#out + 1] = {id, c[1] or '1', c[2] or '0', c[3] or '0', c[4] or '0', c[5] or '', c[6] or '0',
    n2s(cu), cool[2] or '', last, starts, leases}
end
return out
