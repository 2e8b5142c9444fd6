-- Record the credentials a pool handle may use (WithOnly), once per group.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  group
-- ARGV[2..] credential ids
-- The group also holds the units of its credentials (their accounts; see
-- group_units). Returns 1 when the group was new.
local g = ARGV[1]
if redis.call('SISMEMBER', K_GROUPS, g) == 1 and redis.call('EXISTS', k_grp(g)) == 1 then
  return 0
end
redis.call('DEL', k_grp(g))
for i = 2, #ARGV do
  redis.call('SADD', k_grp(g), ARGV[i])
end
redis.call('SADD', K_GROUPS, g)
group_units(g)
recompute_maxcost()
return 1
