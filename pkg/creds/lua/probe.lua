-- Claim the probe of one credential, fleet-wide, for a while.
-- KEYS[1]  <prefix>probe:<id>
-- ARGV[1]  who claims it (shown to whoever reads the key)
-- ARGV[2]  how long the claim lasts (ms)
-- Returns 1 when claimed, 0 when a claim made within its lifetime holds.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
