-- The claim library: what a handle does with the grants other handles
-- made to it (gr:<inst>). Prepended to the pool library (lib.lua, whose
-- serve writes those grants) and to claim.lua, the step of a handle that
-- only claims, which runs without the pool library (see claim.lua).

-- grant_reply encodes a grant for a reply in one string, which the client
-- reads with one allocation instead of seven:
-- wid|id|token|expiry_us|cost|granted_us|owner (the owner last: it may
-- hold '|'; IDs and wids never do). A lost grant is 'wid|' (lost_reply:
-- no ID).
local function grant_reply(wid, id, token, exp, cost, at, owner)
  return wid .. '|' .. id .. '|' .. token .. '|' .. exp .. '|' .. cost .. '|' .. at .. '|' .. owner
end

local function lost_reply(wid)
  return wid .. '|'
end

-- claim_grants turns the grants waiting for instance inst into its full
-- leases (lease_ttl us from now), unless a grant's claim TTL ran out
-- (lost_reply). A waiter whose cost serve found never fits gets that
-- answer ('!': never_fits_reply in lib.lua). pfx is the pool's key
-- prefix. Appends the replies to grants.
local function claim_grants(pfx, inst, now, lease_ttl, grants)
  local gk = pfx .. 'gr:' .. inst
  local pending = redis.call('HGETALL', gk)
  if #pending == 0 then
    return
  end
  redis.call('DEL', gk)
  for j = 1, #pending, 2 do
    local wid, g = pending[j], pending[j + 1]
    if string.sub(g, 1, 1) == '!' then
      grants[#grants + 1] = wid .. '|' .. g
    else
      local id, token, at, cost, owner = string.match(g, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
      local member = (token or '') .. '|' .. (owner or '')
      local lk = pfx .. 'leases:' .. (id or '')
      local exp = tonumber(redis.call('ZSCORE', lk, member) or '0') or 0
      if id and exp > now then
        local new_exp = string.format('%.0f', now + lease_ttl)
        redis.call('ZADD', lk, 'XX', new_exp, member)
        grants[#grants + 1] = grant_reply(wid, id, token, new_exp, cost, at, owner)
      else
        grants[#grants + 1] = lost_reply(wid)
      end
    end
  end
end
