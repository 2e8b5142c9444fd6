-- Operator changes to one credential or account.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  credential id, or account "*<id>" (op limits only)
-- ARGV[2]  claim TTL (us), for grants to waiters a change frees
-- ARGV[3]  op: "limits" | "disable" | "enable" | "probed" | "rest" | "remove"
-- ARGV[4..] per op:
--   limits:  max ("" keeps it), limits ("-" keeps them; "" removes all)
--   disable: reason; disabled_by is "operator" (a probe never enables it)
--   enable:  (none) clears the disabled state, any rest and any streak of
--            refusals; enabled_by "operator"
--   probed:  cause; enables like enable (enabled_by "probe", the cause as
--            enabled_reason) only if the credential is still disabled by
--            the API (disabled_by "api"): an operator's disable in between
--            wins. Returns 0 when it did nothing.
--   rest:    duration (us), reason, cause; never shortens a longer rest
--   remove:  (none) deletes the credential and its state; live leases
--            then fail to renew
-- Returns 1 (for rest: its end in us), or -1 when the credential does not
-- exist.
-- disable, enable and probed recompute the largest cost each group's
-- usable credentials take when they change the credential's state (it
-- reads every credential); serve then answers the waiters whose cost fits
-- only disabled credentials.
local id, claim_ttl, op = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_us()
if is_acct(id) then
  -- An account ("*<a>"): only its limits change.
  if op ~= 'limits' or redis.call('ZSCORE', K_ACCTS, id) == false then
    return -1
  end
  if ARGV[5] ~= '-' then
    write_limits(id, ARGV[5])
  end
  recompute_maxcost()
  -- Every unit under it may be usable sooner or later now.
  for _, a in ipairs(redis.call('ZRANGE', K_ACCTS, 0, -1)) do
    reindex_unit(a, now, true)
  end
  local _, hol, waited = serve(now, '', claim_ttl, 64)
  arm_timer(now, '', hol, waited)
  return '1'
end
if redis.call('ZSCORE', K_CREDS, id) == false then
  return -1
end
local ret = 1
if op == 'limits' then
  if ARGV[4] ~= '' then
    redis.call('HSET', k_cred(id), 'max', ARGV[4])
  end
  if ARGV[5] ~= '-' then
    write_limits(id, ARGV[5])
  end
  recompute_maxcost()
elseif op == 'disable' then
  local was = redis.call('HGET', k_cred(id), 'disabled') == '1'
  redis.call('HSET', k_cred(id), 'disabled', '1', 'disabled_reason', ARGV[4], 'disabled_at', n2s(now), 'disabled_by', 'operator')
  if not was then
    recompute_maxcost() -- its costs no longer count for a usable key's
  end
elseif op == 'enable' or op == 'probed' then
  local by, why = 'operator', ''
  local f = redis.call('HMGET', k_cred(id), 'disabled', 'disabled_by')
  if op == 'probed' then
    if f[1] ~= '1' or f[2] ~= 'api' then
      return '0'
    end
    by, why = 'probe', ARGV[4]
  end
  redis.call('HDEL', k_cred(id), 'disabled', 'disabled_reason', 'disabled_at', 'disabled_by', 'pace_us', 'pace_tat', 'pace_floor',
    'pace_streak', 'pace_widened', 'pace_ok', 'rest_until', 'rest_reason', 'rest_cause', 'rest_at', 'refused', 'refused_items', 'lbr', 'lbt',
    'lb_share', 'rr_req', 'rr_tok', 'rr_off', 'rr_short', 'sd')
  redis.call('HSET', k_cred(id), 'enabled_by', by, 'enabled_reason', why, 'enabled_at', n2s(now))
  if f[1] == '1' then
    recompute_maxcost()
  end
elseif op == 'rest' then
  ret = set_rest(id, now, tonumber(ARGV[4]), ARGV[5], ARGV[6])
elseif op == 'remove' then
  redis.call('ZREM', K_CREDS, id)
  local up = redis.call('HGET', k_cred(id), 'up')
  if up and up ~= '' then
    redis.call('ZREM', k_ar(up), id)
    redis.call('ZREM', k_as(up), id)
    redis.call('SREM', k_ak(up), id)
  end
  if redis.call('EXISTS', k_cred(id)) == 1 then
    for _, l in ipairs(all_limits(id)) do
      local k, sk = lim_keys(id, l)
      redis.call('DEL', k)
      if sk then
        redis.call('DEL', sk)
      end
    end
  end
  redis.call('DEL', k_cred(id), k_leases(id))
  recompute_maxcost()
  if up and up ~= '' then
    reindex_unit(up, now, true)
  end
else
  return redis.error_reply('creds: unknown op ' .. op)
end
reindex(id, now)
local _, hol, waited = serve(now, '', claim_ttl, 64)
arm_timer(now, '', hol, waited)
return n2s(ret)
