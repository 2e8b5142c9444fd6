-- Claims of the Batch API runner (claims.go): one owner at a time does a
-- piece of work (staging a batch, a step of a provider batch record,
-- creating a provider batch on a key), for a TTL.
--
-- KEYS[1] the claim's key
-- ARGV[1] op: 'extend' (keep the claim for ARGV[3] ms more) or 'release'
-- ARGV[2] the owner
-- ARGV[3] ttl in ms (extend)
--
-- Reply: 1 when the claim was the owner's (and is extended or released),
-- else 0.
local op, owner = ARGV[1], ARGV[2]
if redis.call('GET', KEYS[1]) ~= owner then
  return 0
end
if op == 'extend' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
elseif op == 'release' then
  redis.call('DEL', KEYS[1])
else
  return redis.error_reply('batchapi: unknown op ' .. tostring(op))
end
return 1
