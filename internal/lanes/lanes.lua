-- The lane schedule: which batch a worker pulls from next (see
-- docs/waiting-model.md). One script, every op atomic, on Redis time.
-- KEYS[1]  <prefix>epoch: exists while the schedule holds every lane (a
--          Redis that lost its state has none: a worker registers the
--          lanes again from the batch records, then sets it: complete)
-- ARGV[1]  op, then per op:
--   sync    lane state prio weight gen classes tenant tweight
--                                        register (state running) or take
--           out (paused, cancelled) a lane; gen orders the calls;
--           classes: what its items wait for (space separated, may be
--           empty: never passed over); tenant ("" none) and its weight
--   pick    n turn_us turn_slots [class...]
--                                        give n slots to the next lane,
--                                        passing over the lanes whose
--                                        every class is given
--   got     lane asked got               a fetch took fewer than given
--   drained lane gen                     nothing of the lane is left
--   claim   what owner ttl_ms            one worker at a time does what
--   complete                             every lane is registered: set epoch
--   gens    lane...                      the generation each lane is
--                                        registered at ('0': none)
-- Keys under the prefix:
--   q:<p>     zset  lane -> virtual start time, priority p = 1..5
--   vt:<p>    string the level's virtual time (the start of the last turn)
--   turn:<p>:<classes>
--             hash  l (the lane of those classes whose turn it is at
--             level p), e (the turn's end, us), n (slots given in it)
--   lane:<l>  hash  p, w, gen, drained (the gen found empty), dry (until,
--             us), dryn (dry picks in a row), c (classes), t (tenant), tw
--             (its weight), ts ("<p>|<t>|<w>": what it adds to ts:<p>)
--   ts:<p>    hash  tenant -> the sum of the weights of its lanes in q:<p>
-- Tenants share a level by their weights before their lanes do: a lane of
-- tenant T counts with weight tw(T) * w / ts(T) (its share of its
-- tenant's share); a lane without a tenant with its own weight.
local PFX = string.sub(KEYS[1], 1, -6) -- strip "epoch"
local K_EPOCH = KEYS[1]
local SCAN = 16           -- lanes examined per level and pick
local PASS_MAX = 1024     -- lanes passed over (their classes given) per level, at most
local PAGE = 32           -- lanes read at once while passing over
local DRY_MIN = 50000     -- us: the first rest of a lane found empty
local DRY_MAX = 1000000   -- us: the longest
local LANE_TTL = 691200   -- s: a lane's hash outlives its batch record (7 days)

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function n2s(x) return string.format('%.0f', x) end
local function k_q(p) return PFX .. 'q:' .. p end
local function k_vt(p) return PFX .. 'vt:' .. p end
local function k_lane(l) return PFX .. 'lane:' .. l end
local function k_turn(p, c) return PFX .. 'turn:' .. p .. ':' .. c end
local function vt(p) return tonumber(redis.call('GET', k_vt(p)) or '0') or 0 end
local function k_ts(p) return PFX .. 'ts:' .. p end

-- uncount takes what lane l (its ts field: "<p>|<t>|<w>") added to its
-- tenant's sum out.
local function uncount(l, ts)
  if not ts or ts == '' then
    return
  end
  local p, t, w = string.match(ts, '^(%d+)|(.*)|(%d+)$')
  if p and t ~= '' then
    redis.call('HINCRBY', k_ts(tonumber(p)), t, -tonumber(w))
  end
  redis.call('HDEL', k_lane(l), 'ts')
end

-- count adds lane l of tenant t ('' none) and weight w at level p to its
-- tenant's sum.
local function count(l, p, t, w)
  if t ~= '' then
    redis.call('HINCRBY', k_ts(p), t, w)
  end
  redis.call('HSET', k_lane(l), 'ts', p .. '|' .. t .. '|' .. w)
end

-- eff is the weight a lane of weight w and tenant t (of weight tw) counts
-- with at level p: its share of its tenant's share.
local function eff(p, w, t, tw)
  if not t or t == '' then
    return w
  end
  local sum = tonumber(redis.call('HGET', k_ts(p), t) or '0') or 0
  if sum < w then
    sum = w
  end
  return (tonumber(tw) or 1) * w / sum
end

local op = ARGV[1]
if op == 'sync' then
  local l, state, p, w, gen, c = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] or ''
  local tenant, tw = ARGV[8] or '', tonumber(ARGV[9] or '1') or 1
  local h = redis.call('HMGET', k_lane(l), 'p', 'gen', 'drained', 'ts')
  local oldp, oldgen, drained = tonumber(h[1] or '0') or 0, tonumber(h[2] or '0') or 0, tonumber(h[3] or '-1') or -1
  if gen < oldgen then
    return 0 -- a newer state is in already
  end
  uncount(l, h[4])
  local score = nil
  if oldp > 0 then
    score = redis.call('ZSCORE', k_q(oldp), l)
    if state ~= 'running' or oldp ~= p then
      redis.call('ZREM', k_q(oldp), l)
    end
  end
  redis.call('HSET', k_lane(l), 'p', p, 'w', w, 'gen', gen, 'c', c, 't', tenant, 'tw', tw)
  redis.call('EXPIRE', k_lane(l), LANE_TTL)
  if state ~= 'running' then
    return 1
  end
  if gen <= drained then
    return 2 -- found empty at this revision: nothing new came since
  end
  count(l, p, tenant, w)
  if gen > oldgen then
    -- Something changed (items added, resumed): look at it at once.
    redis.call('HDEL', k_lane(l), 'dry', 'dryn')
  end
  local s = vt(p)
  if score and oldp == p and tonumber(score) > s then
    s = tonumber(score) -- keep what it paid already
  end
  redis.call('ZADD', k_q(p), s, l)
  return 1
elseif op == 'pick' then
  if redis.call('EXISTS', K_EPOCH) == 0 then
    return {'', '-2'}
  end
  local n, turn_us, turn_slots = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local now = now_us()
  local soonest = -1
  local skip, skipping = {}, false
  for i = 5, #ARGV do
    skip[ARGV[i]] = true
    skipping = true
  end
  -- A lane is passed over when the caller cannot take items of any class
  -- it has (it has its share of slots waiting for those keys already).
  local function passed_over(c)
    if not skipping or not c or c == '' then
      return false
    end
    for class in string.gmatch(c, '%S+') do
      if not skip[class] then
        return false
      end
    end
    return true
  end
  for p = 1, 5 do
    -- The lowest virtual time of the level among the lanes that are not
    -- resting after a short fetch and not passed over. A lane passed over
    -- keeps its place and its score.
    local examined, read, passed = 0, 0, false
    local best, bsc, bw, bc = nil, 0, 1, ''
    while not best and examined < SCAN and read < SCAN + PASS_MAX do
      local m = redis.call('ZRANGE', k_q(p), read, read + PAGE - 1, 'WITHSCORES')
      if #m == 0 then
        break
      end
      read = read + #m / 2
      for j = 1, #m, 2 do
        local l, sc = m[j], tonumber(m[j + 1])
        local h = redis.call('HMGET', k_lane(l), 'dry', 'w', 'c', 't', 'tw')
        if passed_over(h[3]) then
          passed = true
        else
          examined = examined + 1
          local dry = tonumber(h[1] or '0') or 0
          if dry <= now then
            best, bsc, bw, bc = l, sc, eff(p, tonumber(h[2] or '1') or 1, h[4], h[5]), h[3] or ''
            break
          elseif soonest < 0 or dry < soonest then
            soonest = dry
          end
          if examined >= SCAN then
            break
          end
        end
      end
    end
    if best then
      -- A lane of the same classes (batches that want the same keys)
      -- whose turn it is goes on instead while it has items, for up to
      -- turn_us or turn_slots, whichever ends first: fewer lanes are
      -- active at once (each active JetStream consumer costs nats-server
      -- a state write every 100 ms), and its score grows with every pick
      -- all the same, so the shares stay exact beyond a turn. Lanes of
      -- other classes are not held back by it.
      local tk = k_turn(p, bc)
      if turn_us > 0 then
        local t = redis.call('HMGET', tk, 'l', 'e', 'n')
        if t[1] and (tonumber(t[2]) or 0) > now and (tonumber(t[3]) or turn_slots) < turn_slots then
          local tsc = tonumber(redis.call('ZSCORE', k_q(p), t[1]) or '')
          local th = t[1] == best and {'0', bw, bc} or redis.call('HMGET', k_lane(t[1]), 'dry', 'w', 'c', 't', 'tw')
          if tsc and (th[3] or '') == bc and (tonumber(th[1] or '0') or 0) <= now then
            local tw = bw
            if t[1] ~= best then
              tw = eff(p, tonumber(th[2] or '1') or 1, th[4], th[5])
            end
            redis.call('ZADD', k_q(p), tsc + n / tw, t[1])
            redis.call('HINCRBY', tk, 'n', n)
            return {t[1], tostring(n)}
          end
        end
      end
      local v = vt(p)
      if bsc < v then
        bsc = v -- it was dry meanwhile: no credit for the time it had nothing
      end
      redis.call('ZADD', k_q(p), bsc + n / bw, best)
      redis.call('SET', k_vt(p), tostring(bsc))
      -- A lane taken because the caller passed over others gets no turn:
      -- the next caller may take one of those.
      if not passed and turn_slots > n and turn_us > 0 then
        redis.call('HSET', tk, 'l', best, 'e', n2s(now + turn_us), 'n', n)
        redis.call('PEXPIRE', tk, math.floor(turn_us / 1000) + 1000)
      end
      return {best, tostring(n)}
    end
  end
  if soonest < 0 then
    return {'', '-1'}
  end
  return {'', n2s(soonest - now)}
elseif op == 'got' then
  local l, asked, got = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local h = redis.call('HMGET', k_lane(l), 'p', 'w', 'dryn', 't', 'tw')
  local p, w, dryn = tonumber(h[1] or '0') or 0, tonumber(h[2] or '1') or 1, tonumber(h[3] or '0') or 0
  if p == 0 then
    return 0
  end
  w = eff(p, w, h[4], h[5])
  if got >= asked then
    if dryn > 0 then
      redis.call('HDEL', k_lane(l), 'dry', 'dryn')
    end
    return 1
  end
  if redis.call('ZSCORE', k_q(p), l) then
    redis.call('ZINCRBY', k_q(p), -(asked - got) / w, l) -- what it did not use
  end
  local rest = math.min(DRY_MIN * 2 ^ dryn, DRY_MAX)
  redis.call('HSET', k_lane(l), 'dry', n2s(now_us() + rest), 'dryn', dryn + 1)
  return 1
elseif op == 'drained' then
  local l, gen = ARGV[2], tonumber(ARGV[3])
  local h = redis.call('HMGET', k_lane(l), 'p', 'gen', 'ts')
  local p, cur = tonumber(h[1] or '0') or 0, tonumber(h[2] or '0') or 0
  if cur ~= gen then
    return 0 -- registered again since: items came
  end
  if p > 0 then
    redis.call('ZREM', k_q(p), l)
  end
  uncount(l, h[3])
  redis.call('HSET', k_lane(l), 'drained', gen)
  redis.call('HDEL', k_lane(l), 'dry', 'dryn')
  return 1
elseif op == 'gens' then
  local out = {}
  for i = 2, #ARGV do
    out[#out + 1] = redis.call('HGET', k_lane(ARGV[i]), 'gen') or '0'
  end
  return out
elseif op == 'complete' then
  redis.call('SET', K_EPOCH, '1')
  return 1
elseif op == 'claim' then
  if redis.call('SET', PFX .. 'claim:' .. ARGV[2], ARGV[3], 'NX', 'PX', ARGV[4]) then
    return 1
  end
  return 0
end
return redis.error_reply('lanes: unknown op ' .. tostring(op))
