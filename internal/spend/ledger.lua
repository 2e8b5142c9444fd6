-- The spend ledger: what each batch and each tenant (per period) has
-- spent and holds reserved, fleet-wide, so that a budget is never
-- overspent however many workers start at once. One script, every op
-- atomic. Amounts are integers of billionths (spend.Amount).
-- KEYS[1]  <prefix>ledger (the other keys share its prefix and hash tag)
-- ARGV[1]  op, then per op:
--   reserve token amount expiry_us batch batch_limit tenant period tenant_limit
--            (a limit of -1: none; tenant "" none)
--   settle  token actual batch tenant period
--   limit   batch limit                 set (or, -1, drop) a batch's budget
--   read    batch tenant period
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
    local t = account('t', tenant .. ':' .. period)
    local tspent, tres, tneed, _, tnext = current(t, now)
    checks[2] = {a = t, spent = tspent, res = tres, need = tneed, next = tnext, limit = tlimit, what = 'tenant-budget'}
  end
  for _, c in ipairs(checks) do
    if c.limit >= 0 and c.spent + c.res + amt > c.limit then
      redis.call('HSET', c.a.h, 'need', n2s(amt))
      if c.res > 0 then
        return {'wait', c.what, n2s(c.limit - c.spent - c.res)}
      end
      return {'exhausted', c.what, n2s(c.limit - c.spent - c.res)}
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
  return {'ok', '', ''}
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
end
return redis.error_reply('spend: unknown op ' .. tostring(op))
