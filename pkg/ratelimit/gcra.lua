-- GCRA (generic cell rate algorithm) with the semantics of
-- github.com/go-redis/redis_rate v10: a bucket of Burst cells refilled at
-- Rate cells per period.
-- KEYS[1]  the theoretical arrival time (TAT) of the key: microseconds since
--          2017-01-01 as a decimal string, expiring when the bucket is full
-- ARGV[1]  burst (cells the bucket holds)
-- ARGV[2]  rate (cells refilled per period)
-- ARGV[3]  period in microseconds
-- ARGV[4]  n, the cells requested (0 only reports the state)
-- ARGV[5]  mode: "n" takes all n cells or none; "at_most" takes as many as
--          are there, up to n
-- Returns {allowed, remaining, retry_after_us, reset_after_us}; the last two
-- are decimal strings (Redis truncates Lua numbers), retry_after_us is "-1"
-- when cells were taken or n = 0 fits.
--
-- No redis.replicate_commands(): since Redis 5 scripts are replicated by
-- their effects, so the TIME call before a write is allowed (Redis 7 made
-- the call a no-op).
local key = KEYS[1]
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period_us = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local mode = ARGV[5]

-- Microseconds since 2017-01-01 stay far below 2^53, so a double holds them
-- with a precision of a fraction of a microsecond.
local epoch_2017 = 1483228800
local t = redis.call('TIME')
local now = (tonumber(t[1]) - epoch_2017) * 1000000 + tonumber(t[2])

-- TIME counts whole microseconds; EPS absorbs the rounding of the stored
-- TAT (far below a microsecond) so that an exact boundary (the bucket holds
-- exactly k cells) does not come out as k - 1 cells.
local eps = 0.5

local interval = period_us / rate
local burst_offset = interval * burst

local tat = redis.call('GET', key)
if tat then
  tat = tonumber(tat)
end
if not tat or tat < now then
  tat = now
end

local function us(x)
  return string.format('%.3f', x)
end

local function store(new_tat)
  local ttl_ms = math.ceil((new_tat - now) / 1000)
  if ttl_ms > 0 then
    redis.call('SET', key, us(new_tat), 'PX', ttl_ms)
  end
end

if mode == 'n' then
  local new_tat = tat + interval * n
  local diff = now - (new_tat - burst_offset)
  if diff + eps < 0 then
    return {0, 0, us(-diff), us(tat - now)}
  end
  store(new_tat)
  return {n, math.floor((diff + eps) / interval), '-1', us(new_tat - now)}
end

if mode == 'at_most' then
  local diff = now - (tat - burst_offset)
  local remaining = math.floor((diff + eps) / interval)
  if remaining < 1 then
    return {0, 0, us(interval - diff), us(tat - now)}
  end
  -- Take whole cells only (redis_rate takes the fraction too but reports
  -- the truncated count).
  local cost = math.min(n, remaining)
  local new_tat = tat + interval * cost
  store(new_tat)
  return {cost, remaining - cost, '-1', us(new_tat - now)}
end

return redis.error_reply('ratelimit: gcra: unknown mode ' .. tostring(mode))
