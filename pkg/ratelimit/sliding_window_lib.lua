-- Sliding-window log, shared by pkg/ratelimit and pkg/creds (prepended to
-- their scripts). A key is a sorted set of start times in microseconds
-- (score) with unique members. Times are integers of microseconds from
-- redis.call('TIME'); scores are written with %.0f so that Lua never turns
-- them into scientific notation.

-- sw_count drops the starts that left the window and returns how many remain.
local function sw_count(key, window_us, now_us)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now_us - window_us))
  return redis.call('ZCARD', key)
end

-- sw_wait returns (wait_us, count): wait_us is 0 when n more starts fit in
-- the window now, else the microseconds until enough old starts leave it.
local function sw_wait(key, limit, window_us, now_us, n)
  local count = sw_count(key, window_us, now_us)
  if count + n <= limit then
    return 0, count
  end
  if n > limit then
    return -1, count
  end
  -- After the entries 0 .. count+n-limit-1 leave, count+n-limit of them are
  -- gone and the rest plus n fit.
  local idx = count + n - limit - 1
  local oldest = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
  return tonumber(oldest[2]) + window_us - now_us, count
end

-- sw_record adds one start at now_us; member must be unique in the key.
local function sw_record(key, window_us, now_us, member)
  redis.call('ZADD', key, string.format('%.0f', now_us), member)
  redis.call('PEXPIRE', key, math.floor(window_us / 1000) + 1)
end

-- sw_reset_us returns the microseconds until the window holds no start.
local function sw_reset_us(key, window_us, now_us)
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #newest == 0 then
    return 0
  end
  return tonumber(newest[2]) + window_us - now_us
end

-- sw_restamp moves start `member` to at_us when it is in the key and was
-- recorded earlier: the start then counts in the window from at_us (when
-- its request left, for a window that counts arrivals), and leaves it
-- that much later. A start already gone stays gone. Returns 1 when moved.
local function sw_restamp(key, window_us, member, at_us)
  local cur = redis.call('ZSCORE', key, member)
  if not cur or tonumber(cur) >= at_us then
    return 0
  end
  redis.call('ZADD', key, 'XX', string.format('%.0f', at_us), member)
  redis.call('PEXPIRE', key, math.floor(window_us / 1000) + 1)
  return 1
end
