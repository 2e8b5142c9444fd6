-- Read the state of every credential and account.
-- KEYS[1]  <prefix>creds
-- Returns {now_us, waiters, {cred}, ..., {account}, ...} where each cred is
--   {id, max, limits, disabled, disabled_reason, disabled_at,
--    rest_until, rest_reason, rest_cause, last_used_us, starts,
--    rate_limited, pace_us, next_us, {member, expiry_us, ...},
--    {used, of, next_us, ...} (three per limit, in the order of limits),
--    disabled_by, enabled_by, enabled_reason, enabled_at,
--    refused ('\n'-separated "<item>: <reason>", the current streak),
--    groups (','-separated),
--    {scope, until_us, reason, ...} (the rests of one scope that last),
--    account ("*<a>" its account, '' none),
--    keys ('' for a credential)}
-- and an account has the same shape, its id "*<a>", its leases those of
-- its own keys, account its enclosing account and keys its own keys
-- (','-separated).
-- (Fields are only ever added at the end.)
-- next_us: when it can take a start of cost 1 (now when usable; -1
-- disabled), its accounts' limits and rests included. Expired leases and
-- starts that left a window are dropped on the way.
local now = now_us()
-- The waiters: every class's queue, and the entries an older version
-- queued in waitq alone.
local waiting, counted = 0, {}
for _, e in ipairs(redis.call('ZRANGE', K_WAITQ, 0, -1)) do
  local _, _, _, _, _, _, class, head = parse_waiter(e)
  if not head then
    waiting = waiting + 1
  elseif not counted[class] then
    counted[class] = true
    waiting = waiting + redis.call('ZCARD', k_wq(class))
  end
end
local out = {n2s(now), waiting}
local function row(id)
  local f = redis.call('HMGET', k_cred(id), 'max', 'limits', 'disabled', 'disabled_reason', 'disabled_at',
    'starts', 'rate_limited', 'pace_us', 'last')
  local last = f[9] or '0'
  local r = redis.call('HMGET', k_cred(id), 'rest_until', 'rest_reason', 'rest_cause')
  local ru = tonumber(r[1] or '0') or 0
  if ru <= now then
    ru, r[2], r[3] = 0, '', ''
  end
  local c = load(id)
  local nxt = -1
  local uses = {}
  if c then
    nxt = full_fit(id, c, now, 1)
    for _, l in ipairs(parse_limits(f[2])) do
      local u = lim_use(id, l, now)
      uses[#uses + 1] = n2s(u[1])
      uses[#uses + 1] = n2s(u[2])
      uses[#uses + 1] = n2s(u[3])
    end
  end
  redis.call('ZREMRANGEBYSCORE', k_leases(id), '-inf', n2s(now)) -- crashed holders' leases
  local leases = redis.call('ZRANGE', k_leases(id), 0, -1, 'WITHSCORES')
  local e = redis.call('HMGET', k_cred(id), 'disabled_by', 'enabled_by', 'enabled_reason', 'enabled_at', 'refused', 'groups',
    'limscopes', 'up')
  local srests = {}
  for sc in string.gmatch(e[7] or '', '[^,]+') do
    local r = redis.call('HMGET', k_cred(id), 'srest|' .. sc, 'srest_reason|' .. sc)
    local u = tonumber(r[1] or '0') or 0
    if u > now then
      srests[#srests + 1] = sc
      srests[#srests + 1] = n2s(u)
      srests[#srests + 1] = r[2] or ''
    end
  end
  local keys = ''
  if is_acct(id) then
    local ks = redis.call('SMEMBERS', k_ak(id))
    table.sort(ks)
    keys = table.concat(ks, ',')
  end
  return {id, f[1] or '1', f[2] or '', f[3] or '0', f[4] or '', f[5] or '0',
    n2s(ru), r[2] or '', r[3] or '', last, f[6] or '0', f[7] or '0', f[8] or '0', n2s(nxt), leases, uses,
    e[1] or '', e[2] or '', e[3] or '', e[4] or '0', e[5] or '', e[6] or '', srests, e[8] or '', keys}
end
for _, id in ipairs(redis.call('ZRANGE', K_CREDS, 0, -1)) do
  out[#out + 1] = row(id)
end
for _, id in ipairs(redis.call('ZRANGE', K_ACCTS, 0, -1)) do
  out[#out + 1] = row(id)
end
return out
