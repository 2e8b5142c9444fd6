-- The step of a handle that only claims grants (a grant message came, or
-- its queued waiters want their grants collected) and has no operation to
-- send and no timed duty: claim_grants (claim_lib.lua) alone, without the
-- pool library, whose definitions cost every call that loads them several
-- microseconds of Redis's only thread. It frees no capacity, so it leaves
-- serving waiters and the timer to the steps that do. Same arguments as
-- step.lua (ARGV[1..6]; no operations) and the same reply: {now, {}, grants,
-- -1, queued}.
local pfx = string.sub(KEYS[1], 1, -6) -- strip "creds"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local inst, lease_ttl, alive_ttl, flags = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4]), ARGV[6]
if alive_ttl > 0 then
  redis.call('ZADD', pfx .. 'procs', string.format('%.0f', now + alive_ttl), inst)
end
local grants = {}
claim_grants(pfx, inst, now, lease_ttl, grants)
local queued = -1
if string.find(flags, 'q', 1, true) then
  queued = redis.call('SCARD', pfx .. 'pw:' .. inst)
end
return {string.format('%.0f', now), {}, grants, -1, queued}
