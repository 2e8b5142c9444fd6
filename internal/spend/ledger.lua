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
--                               refused start needed), limit (batches only)
--   br:<B> / tr:<T>:<P>   hash  token -> amount: live reservations
--   bx:<B> / tx:<T>:<P>   zset  token -> expiry (us)
--   bl:<B> / tl:<T>:<P>   hash  token -> amount: reservations that lapsed
--                               (their holder never settled in time: the
--                               amount was counted as spent)
local PFX = string.sub(KEYS[1], 1, -7) -- strip "ledger"

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function n2s(x) return string.format('%.0f', x) end

-- account: the keys of batch B or tenant T in period P.
local function account(kind, name)
  if kind == 'b' then
    return {h = PFX .. 'b:' .. name, r = PFX .. 'br:' .. name, x = PFX .. 'bx:' .. name, l = PFX .. 'bl:' .. name}
  end
  return {h = PFX .. 't:' .. name, r = PFX .. 'tr:' .. name, x = PFX .. 'tx:' .. name, l = PFX .. 'tl:' .. name}
end

-- lapse counts the reservations of a whose holders did not settle before
-- their expiry as spent (their runs may have been paid: never assume
-- less), keeping them in l for a late settle to correct.
local function lapse(a, now)
  local old = redis.call('ZRANGEBYSCORE', a.x, '-inf', n2s(now), 'LIMIT', 0, 64)
  for _, tok in ipairs(old) do
    local amt = tonumber(redis.call('HGET', a.r, tok) or '0') or 0
    redis.call('HDEL', a.r, tok)
    redis.call('ZREM', a.x, tok)
    redis.call('HINCRBY', a.h, 'reserved', -amt)
    redis.call('HINCRBY', a.h, 'spent', amt)
    redis.call('HSET', a.l, tok, amt)
  end
end

local function figures(a)
  local f = redis.call('HMGET', a.h, 'spent', 'reserved', 'need', 'limit')
  return tonumber(f[1] or '0') or 0, tonumber(f[2] or '0') or 0, tonumber(f[3] or '0') or 0, tonumber(f[4] or '-1') or -1
end

local op = ARGV[1]
if op == 'reserve' then
  local tok, amt, exp = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local batch, blimit, tenant, period, tlimit = ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8], tonumber(ARGV[9])
  local now = now_us()
  local checks = {}
  local b = account('b', batch)
  lapse(b, now)
  local bspent, bres, _, stored = figures(b)
  if blimit < 0 then
    blimit = stored
  end
  checks[#checks + 1] = {a = b, spent = bspent, res = bres, limit = blimit, what = 'budget'}
  local t = nil
  if tenant ~= '' then
    t = account('t', tenant .. ':' .. period)
    lapse(t, now)
    local tspent, tres = figures(t)
    checks[#checks + 1] = {a = t, spent = tspent, res = tres, limit = tlimit, what = 'tenant-budget'}
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
  for _, c in ipairs(checks) do
    redis.call('HSET', c.a.r, tok, n2s(amt))
    redis.call('ZADD', c.a.x, n2s(exp), tok)
    redis.call('HINCRBY', c.a.h, 'reserved', amt)
    redis.call('HDEL', c.a.h, 'need')
  end
  return {'ok', '', ''}
elseif op == 'settle' then
  local tok, actual, batch, tenant, period = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
  local as = {account('b', batch)}
  if tenant ~= '' then
    as[2] = account('t', tenant .. ':' .. period)
  end
  for _, a in ipairs(as) do
    local amt = redis.call('HGET', a.r, tok)
    if amt then
      redis.call('HDEL', a.r, tok)
      redis.call('ZREM', a.x, tok)
      redis.call('HINCRBY', a.h, 'reserved', -tonumber(amt))
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
  lapse(b, now_us())
  if limit < 0 then
    redis.call('HDEL', b.h, 'limit')
  else
    redis.call('HSET', b.h, 'limit', n2s(limit))
  end
  local spent, res, need = figures(b)
  return {n2s(spent), n2s(res), n2s(need)}
elseif op == 'read' then
  local batch, tenant, period = ARGV[2], ARGV[3], ARGV[4]
  local now = now_us()
  local out = {}
  if batch ~= '' then
    local b = account('b', batch)
    lapse(b, now)
    local spent, res, need, limit = figures(b)
    out = {n2s(spent), n2s(res), n2s(need), n2s(limit)}
  else
    out = {'0', '0', '0', '-1'}
  end
  if tenant ~= '' then
    local t = account('t', tenant .. ':' .. period)
    lapse(t, now)
    local spent, res, need = figures(t)
    out[5], out[6], out[7] = n2s(spent), n2s(res), n2s(need)
  end
  return out
end
return redis.error_reply('spend: unknown op ' .. tostring(op))
