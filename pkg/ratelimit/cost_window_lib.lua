-- Exact sliding cost window, as a library: at most N cost units in any
-- window of length W. Each start is one member "<id>:<cost>" of a sorted set
-- scored by its time, and a companion string key holds the running sum, so
-- a start costs O(log n) whatever its cost. Both keys expire together when
-- the window has emptied. Times are integer microseconds from
-- redis.call('TIME'), written with %.0f.

-- cw_sum drops the starts that left the window and returns the cost in it.
local function cw_sum(key, sumkey, window_us, now_us)
  local cut = string.format('%.0f', now_us - window_us)
  local old = redis.call('ZRANGEBYSCORE', key, '-inf', cut)
  if #old == 0 then
    if redis.call('EXISTS', key) == 0 then
      -- No start in the window (the log expired or never existed): a sum
      -- left behind would be stale.
      redis.call('DEL', sumkey)
      return 0
    end
    return tonumber(redis.call('GET', sumkey) or '0') or 0
  end
  local freed = 0
  for _, m in ipairs(old) do
    freed = freed + (tonumber(string.match(m, ':(%-?%d+)$')) or 0)
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', cut)
  if redis.call('EXISTS', key) == 0 then
    redis.call('DEL', sumkey)
    return 0
  end
  return redis.call('DECRBY', sumkey, freed)
end

-- CW_WALK bounds how many starts cw_when reads to find when room comes.
local CW_WALK = 64

-- cw_when returns the earliest moment (>= now) at which `cost` more units
-- fit: now when they fit, -1 when cost > limit (never), else the moment
-- enough of the oldest starts have left the window. When more than CW_WALK
-- starts must leave, it returns the moment the CW_WALK-th leaves (early,
-- never late: the caller asks again then).
local function cw_when(key, sumkey, limit, window_us, now_us, cost)
  if cost > limit then
    return -1
  end
  local sum = cw_sum(key, sumkey, window_us, now_us)
  local need = sum + cost - limit
  if need <= 0 then
    return now_us
  end
  local entries = redis.call('ZRANGE', key, 0, CW_WALK - 1, 'WITHSCORES')
  local freed, at = 0, now_us
  for i = 1, #entries, 2 do
    freed = freed + (tonumber(string.match(entries[i], ':(%-?%d+)$')) or 0)
    at = tonumber(entries[i + 1]) + window_us
    if freed >= need then
      break
    end
  end
  if at < now_us then
    at = now_us
  end
  return at
end

-- cw_record adds a start of `cost` units at now; id must be unique in key.
local function cw_record(key, sumkey, window_us, now_us, id, cost)
  redis.call('ZADD', key, string.format('%.0f', now_us), id .. ':' .. string.format('%.0f', cost))
  redis.call('INCRBY', sumkey, cost)
  local ms = math.floor(window_us / 1000) + 1
  redis.call('PEXPIRE', key, ms)
  redis.call('PEXPIRE', sumkey, ms)
end

-- cw_reconcile replaces the cost of start id (charged `est`) with `real`,
-- if that start is still in the window. Returns 1 when it was.
local function cw_reconcile(key, sumkey, id, est, real)
  local old = id .. ':' .. string.format('%.0f', est)
  local at = redis.call('ZSCORE', key, old)
  if not at then
    return 0
  end
  redis.call('ZREM', key, old)
  redis.call('ZADD', key, at, id .. ':' .. string.format('%.0f', real))
  redis.call('INCRBY', sumkey, real - est)
  return 1
end

-- cw_restamp moves start id (charged `cost`) to at_us when it is in the
-- window and was recorded earlier: its cost then counts from at_us (when
-- its request left, for a window that counts arrivals) and leaves the
-- window that much later. A start already gone stays gone. Returns 1 when
-- moved.
local function cw_restamp(key, sumkey, window_us, id, cost, at_us)
  local m = id .. ':' .. string.format('%.0f', cost)
  local cur = redis.call('ZSCORE', key, m)
  if not cur or tonumber(cur) >= at_us then
    return 0
  end
  redis.call('ZADD', key, 'XX', string.format('%.0f', at_us), m)
  local ms = math.floor(window_us / 1000) + 1
  redis.call('PEXPIRE', key, ms)
  redis.call('PEXPIRE', sumkey, ms)
  return 1
end
