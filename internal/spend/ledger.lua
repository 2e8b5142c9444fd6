-- The spend ledger: what each batch and each tenant (per period) has
-- spent and holds reserved, fleet-wide, so that a budget is never
-- overspent however many workers start at once. One script, every op
-- atomic. Amounts are integers of billionths (spend.Amount).
-- KEYS[1]  <prefix>ledger (the other keys share its prefix and hash tag)
-- ARGV[1]  op, then per op:
--   reserve token amount expiry_us batch batch_limit tenant period tenant_limit
--           day week month   (a limit of -1: none; tenant "" none)
--   settle  token actual batch tenant period
--   limit   batch limit                 set (or, -1, drop) a batch's budget
--   read    batch tenant period
--   tenant-set       tenant amount kind by cfg_limit cfg_kind day week month
--                    set (amount -1: drop) a tenant's live budget; returns
--                    the tenant's view (tenant-read)
--   tenant-read      tenant cfg_limit cfg_kind day week month
--                    {source, limit, kind, period, spent, reserved, need,
--                    set_at_us, set_by}: source 'live', 'config' or 'none'
--   tenant-register  (tenant cfg_limit cfg_kind)...: the configuration's
--                    budgets a worker started from; a tenant's live budget
--                    is dropped when its configured one changed since the
--                    last register; returns the tenants whose live budget
--                    was dropped
-- (day week month: the names of the periods of each kind the call is in;
-- a reserve passes them too, after tenant_limit: a tenant's live budget
-- overrides tenant_limit, counted in the period of its own kind, and the
-- reply's 4th element names the period reserved in.)
-- Keys under the prefix, for a batch B and a tenant T in period P:
--   b:<B> / t:<T>:<P>     hash  spent, reserved, need (the amount the last
--                               refused start needed), limit (batches
--                               only), next (the earliest expiry, us, of a
--                               reservation made since the last lapse scan)
--   br:<B> / tr:<T>:<P>   hash  token -> "<amount> <expiry us>": live
--                               reservations
--   bl:<B> / tl:<T>:<P>   hash  token -> amount: reservations that lapsed
--                               (their holder never settled in time: the
--                               amount was counted as spent)
--   tenants              hash  tenant -> "<amount> <kind> <set at us> <by>":
--                               the live budgets (they override the
--                               configuration's)
--   tenants-cfg          hash  tenant -> "<amount> <kind>" ('' none): the
--                               configured budget the fleet last started
--                               from
-- A start costs few calls: a reservation is one field of br plus the
-- account's reserved; expired ones are looked for only once the
-- earliest expiry recorded in next has passed (a holder dies rarely).
local PFX = string.sub(KEYS[1], 1, -7) -- strip "ledger"

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function n2s(x) return string.format('%.0f', x) end

-- account: the keys of batch B or tenant T in period P.
local function account(kind, name)
  if kind == 'b' then
    return {h = PFX .. 'b:' .. name, r = PFX .. 'br:' .. name, l = PFX .. 'bl:' .. name}
  end
  return {h = PFX .. 't:' .. name, r = PFX .. 'tr:' .. name, l = PFX .. 'tl:' .. name}
end

-- figures reads an account: spent, reserved, need, limit (-1 none), next.
local function figures(a)
  local f = redis.call('HMGET', a.h, 'spent', 'reserved', 'need', 'limit', 'next')
  return tonumber(f[1] or '0') or 0, tonumber(f[2] or '0') or 0, tonumber(f[3] or '0') or 0,
    tonumber(f[4] or '-1') or -1, tonumber(f[5] or '')
end

-- lapse counts the reservations of a whose holders did not settle before
-- their expiry as spent (their runs may have been paid: never assume
-- less), keeping them in l for a late settle to correct; next is the
-- account's recorded earliest expiry (nil: none). It returns how much
-- it moved from reserved to spent, and the earliest expiry after it.
local function lapse(a, now, next)
  if next == nil or next > now then
    return 0, next
  end
  local all = redis.call('HGETALL', a.r)
  local moved, earliest = 0, nil
  for i = 1, #all, 2 do
    local amt, exp = string.match(all[i + 1], '^(%d+) (%d+)$')
    amt, exp = tonumber(amt) or 0, tonumber(exp) or 0
    if exp <= now then
      redis.call('HDEL', a.r, all[i])
      redis.call('HSET', a.l, all[i], n2s(amt))
      moved = moved + amt
    elseif earliest == nil or exp < earliest then
      earliest = exp
    end
  end
  if moved > 0 then
    redis.call('HINCRBY', a.h, 'reserved', -moved)
    redis.call('HINCRBY', a.h, 'spent', moved)
  end
  if earliest then
    redis.call('HSET', a.h, 'next', n2s(earliest))
  else
    redis.call('HDEL', a.h, 'next')
  end
  return moved, earliest
end

-- current reads an account after lapsing what expired.
local function current(a, now)
  local spent, res, need, limit, next = figures(a)
  local moved
  moved, next = lapse(a, now, next)
  return spent + moved, res - moved, need, limit, next
end

-- live reads tenant's live budget: amount, kind, set at (us), by; nil
-- when it has none.
local function live(tenant)
  local rec = redis.call('HGET', PFX .. 'tenants', tenant)
  if not rec then
    return nil
  end
  local amt, kind, at, by = string.match(rec, '^(%d+) (%a+) (%d+) ?(.*)$')
  if not amt then
    return nil
  end
  return tonumber(amt), kind, at, by
end

-- named is the name of the period of kind among day, week and month
-- (nil: unknown kind, or no name given).
local function named(kind, day, week, month)
  local p = ({d = day, w = week, mo = month})[kind]
  if p == nil or p == '' then
    return nil
  end
  return p
end

-- cfgstr encodes a configured budget (limit -1: none).
local function cfgstr(limit, kind)
  if limit < 0 then
    return ''
  end
  return n2s(limit) .. ' ' .. kind
end

-- tenant_view is what tenant-read returns.
local function tenant_view(tenant, cfg_limit, cfg_kind, day, week, month, now)
  local source, limit, kind, at, by = 'none', -1, 'd', '', ''
  local lamt, lkind, lat, lby = live(tenant)
  if lamt and named(lkind, day, week, month) then
    source, limit, kind, at, by = 'live', lamt, lkind, lat, lby
  elseif cfg_limit >= 0 then
    source, limit, kind = 'config', cfg_limit, cfg_kind
  end
  local period = named(kind, day, week, month) or day
  local spent, res, need = current(account('t', tenant .. ':' .. period), now)
  return {source, n2s(limit), kind, period, n2s(spent), n2s(res), n2s(need), at, by}
end

local op = ARGV[1]
if op == 'reserve' then
  local tok, amt, exp = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local batch, blimit, tenant, period, tlimit = ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8], tonumber(ARGV[9])
  local now = now_us()
  local checks = {}
  local b = account('b', batch)
  local bspent, bres, bneed, stored, bnext = current(b, now)
  if blimit < 0 then
    blimit = stored
  end
  checks[1] = {a = b, spent = bspent, res = bres, need = bneed, next = bnext, limit = blimit, what = 'budget'}
  if tenant ~= '' then
    local lamt, lkind = live(tenant)
    local lperiod = lamt and named(lkind, ARGV[10], ARGV[11], ARGV[12])
    if lperiod then
      tlimit, period = lamt, lperiod
    end
    local t = account('t', tenant .. ':' .. period)
    local tspent, tres, tneed, _, tnext = current(t, now)
    checks[2] = {a = t, spent = tspent, res = tres, need = tneed, next = tnext, limit = tlimit, what = 'tenant-budget'}
  end
  for _, c in ipairs(checks) do
    if c.limit >= 0 and c.spent + c.res + amt > c.limit then
      redis.call('HSET', c.a.h, 'need', n2s(amt))
      if c.res > 0 then
        return {'wait', c.what, n2s(c.limit - c.spent - c.res), period}
      end
      return {'exhausted', c.what, n2s(c.limit - c.spent - c.res), period}
    end
  end
  local rec = n2s(amt) .. ' ' .. n2s(exp)
  for _, c in ipairs(checks) do
    redis.call('HSET', c.a.r, tok, rec)
    redis.call('HINCRBY', c.a.h, 'reserved', amt)
    if c.need > 0 then
      redis.call('HDEL', c.a.h, 'need')
    end
    if c.next == nil or exp < c.next then
      redis.call('HSET', c.a.h, 'next', n2s(exp))
    end
  end
  return {'ok', '', '', period}
elseif op == 'settle' then
  local tok, actual, batch, tenant, period = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
  local as = {account('b', batch)}
  if tenant ~= '' then
    as[2] = account('t', tenant .. ':' .. period)
  end
  for _, a in ipairs(as) do
    local rec = redis.call('HGET', a.r, tok)
    if rec then
      local amt = tonumber(string.match(rec, '^(%d+)')) or 0
      redis.call('HDEL', a.r, tok)
      redis.call('HINCRBY', a.h, 'reserved', -amt)
      redis.call('HINCRBY', a.h, 'spent', actual)
    else
      local lapsed = redis.call('HGET', a.l, tok)
      if lapsed then
        -- Counted as spent when it lapsed: correct to what it cost.
        redis.call('HDEL', a.l, tok)
        redis.call('HINCRBY', a.h, 'spent', actual - tonumber(lapsed))
      elseif actual > 0 then
        redis.call('HINCRBY', a.h, 'spent', actual)
      end
    end
  end
  return 1
elseif op == 'limit' then
  local batch, limit = ARGV[2], tonumber(ARGV[3])
  local b = account('b', batch)
  if limit < 0 then
    redis.call('HDEL', b.h, 'limit')
  else
    redis.call('HSET', b.h, 'limit', n2s(limit))
  end
  local spent, res, need = current(b, now_us())
  return {n2s(spent), n2s(res), n2s(need)}
elseif op == 'read' then
  local batch, tenant, period = ARGV[2], ARGV[3], ARGV[4]
  local now = now_us()
  local out = {}
  if batch ~= '' then
    local spent, res, need, limit = current(account('b', batch), now)
    out = {n2s(spent), n2s(res), n2s(need), n2s(limit)}
  else
    out = {'0', '0', '0', '-1'}
  end
  if tenant ~= '' then
    local spent, res, need = current(account('t', tenant .. ':' .. period), now)
    out[5], out[6], out[7] = n2s(spent), n2s(res), n2s(need)
  end
  return out
elseif op == 'tenant-set' then
  local tenant, amount, kind, by = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
  local cfg_limit, cfg_kind = tonumber(ARGV[6]), ARGV[7]
  local now = now_us()
  if amount < 0 then
    redis.call('HDEL', PFX .. 'tenants', tenant)
  else
    redis.call('HSET', PFX .. 'tenants', tenant, n2s(amount) .. ' ' .. kind .. ' ' .. n2s(now) .. ' ' .. by)
  end
  -- The configuration the fleet starts from, if no worker said it yet.
  redis.call('HSETNX', PFX .. 'tenants-cfg', tenant, cfgstr(cfg_limit, cfg_kind))
  return tenant_view(tenant, cfg_limit, cfg_kind, ARGV[8], ARGV[9], ARGV[10], now)
elseif op == 'tenant-read' then
  return tenant_view(ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7], now_us())
elseif op == 'tenant-register' then
  local dropped = {}
  for i = 2, #ARGV - 2, 3 do
    local tenant, cfg = ARGV[i], cfgstr(tonumber(ARGV[i + 1]), ARGV[i + 2])
    local was = redis.call('HGET', PFX .. 'tenants-cfg', tenant)
    if was ~= cfg then
      redis.call('HSET', PFX .. 'tenants-cfg', tenant, cfg)
      if was and redis.call('HDEL', PFX .. 'tenants', tenant) == 1 then
        dropped[#dropped + 1] = tenant
      end
    end
  end
  return dropped
end
return redis.error_reply('spend: unknown op ' .. tostring(op))
