-- Prelude shared by every pool script (pkg/ratelimit's sliding-window
-- library is prepended before it).
--
-- Every key of a pool starts with the same prefix, which holds the pool's
-- hash tag ("keyfleet:{<pool>}:"), so all of them live in one Redis Cluster
-- slot. Each script receives the pool's index key in KEYS[1]
-- ("<prefix>creds") and derives the per-credential keys from its prefix:
--   <prefix>creds          sorted set  credential id -> last acquire time (us), the LRU order
--   <prefix>cred:<id>      hash        max, rate_n, rate_us, cfg_*, disabled, disabled_reason, disabled_at
--   <prefix>cool:<id>      hash        until (us), reason, at; expires by itself at `until`
--   <prefix>leases:<id>    sorted set  "<token>|<owner>" -> lease expiry (us)
--   <prefix>rate:<id>      sorted set  sliding-window log of starts
--   <prefix>fence          string      fencing-token counter
--   <prefix>wake           channel     a message when capacity may have been freed
-- All times are integer microseconds of redis.call('TIME').

local PFX = string.sub(KEYS[1], 1, -6) -- strip "creds"

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- n2s writes an integer without Lua's scientific notation.
local function n2s(x)
  return string.format('%.0f', x)
end

local function k_cred(id) return PFX .. 'cred:' .. id end
local function k_cool(id) return PFX .. 'cool:' .. id end
local function k_leases(id) return PFX .. 'leases:' .. id end
local function k_rate(id) return PFX .. 'rate:' .. id end

local function exists(id)
  return redis.call('ZSCORE', KEYS[1], id) ~= false
end

-- cooling_until returns the end of the credential's cooldown, 0 if none.
local function cooling_until(id, now)
  local u = tonumber(redis.call('HGET', k_cool(id), 'until') or '0') or 0
  if u > now then
    return u
  end
  return 0
end

-- set_cooling makes the credential unusable until now+dur_us (never
-- shortening a longer cooldown already in place) and returns the end.
local function set_cooling(id, now, dur_us, reason)
  local until_us = now + dur_us
  local cur = cooling_until(id, now)
  if cur > until_us then
    return cur
  end
  local k = k_cool(id)
  redis.call('HSET', k, 'until', n2s(until_us), 'reason', reason, 'at', n2s(now))
  redis.call('PEXPIREAT', k, math.floor(until_us / 1000) + 1)
  return until_us
end

local function wake(origin)
  redis.call('PUBLISH', PFX .. 'wake', origin)
end
