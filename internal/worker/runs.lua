-- Per-item run counters.
-- KEYS[1]  the item's hash: runs, failures, open (1 while a started run has
--          not reported), acc (the last delivery that reported anything)
-- ARGV[1]  op: start | fail | settle | norun | done
-- ARGV[2]  the delivery number of the message now held (JetStream's
--          NumDelivered)
-- ARGV[3]  the run number the worker holds (fail/settle of a first run it
--          did not record at its start)
-- ARGV[4]  TTL in seconds (refreshed on every op but done)
-- ARGV[5]  refuse: the refusal ("<credential>\t<reason>"); fail: the
--          credential of a failure that counts toward a fallback ("" none)
-- Returns {runs, failures, lost, limited, refusals, refused, streak}: lost
-- is the number of earlier runs that never reported (their workers died),
-- counted as failures by `start`; limited the rate-limited runs in a row
-- (a failed or refused run ends the row); refusals the runs a key refused,
-- refused their texts, one a line; streak the credentials of the last
-- failures in a row that count toward a fallback, one a line, at most 4
-- (a failure without a credential, a rate-limited or refused run ends
-- the row).
--
-- ops: start, fail, settle (ended without failing: interrupted), limited
-- (rate limited), refuse (a key refused the run), norun, done, peek
-- (read only).
--
-- A worker records nothing when it starts the first run of an item's first
-- delivery (the common case costs no write); every other start is
-- recorded. So at `start` of delivery d, the deliveries after `acc` and
-- before d reported nothing: each of them ran (at most) a first run and
-- died, and a run left open died too.
local k = KEYS[1]
local op = ARGV[1]
if op == 'done' then
  redis.call('DEL', k)
  return {0, 0, 0, 0, 0, '', ''}
end
local h = redis.call('HMGET', k, 'runs', 'failures', 'open', 'acc', 'limited', 'refusals', 'refused', 'streak')
local runs = tonumber(h[1] or '0') or 0
local fails = tonumber(h[2] or '0') or 0
local open = h[3] == '1'
local acc = tonumber(h[4] or '0') or 0
local limited = tonumber(h[5] or '0') or 0
local refusals = tonumber(h[6] or '0') or 0
local refused = h[7] or ''
local streak = h[8] or ''
if op == 'peek' then
  return {runs, fails, 0, limited, refusals, refused, streak}
end
local d = tonumber(ARGV[2])
local held = tonumber(ARGV[3])
local lost = 0
if op == 'start' then
  if open then
    lost = lost + 1
  end
  local gap = d - 1 - acc
  if gap > 0 then
    lost = lost + gap
    runs = runs + gap
  end
  fails = fails + lost
  runs = runs + 1
  open = true
elseif op == 'fail' then
  runs = math.max(runs, held)
  fails = fails + 1
  limited = 0
  open = false
  local cred = string.sub(ARGV[5] or '', 1, 128)
  if cred == '' then
    streak = ''
  else
    local kept = {}
    for id in string.gmatch(streak, '[^\n]+') do
      kept[#kept + 1] = id
    end
    kept[#kept + 1] = cred
    while #kept > 4 do
      table.remove(kept, 1)
    end
    streak = table.concat(kept, '\n')
  end
elseif op == 'settle' then
  runs = math.max(runs, held)
  open = false
elseif op == 'limited' then
  runs = math.max(runs, held)
  limited = limited + 1
  streak = ''
  open = false
elseif op == 'refuse' then
  runs = math.max(runs, held)
  refusals = refusals + 1
  limited = 0
  if refused ~= '' then
    refused = refused .. '\n'
  end
  refused = refused .. string.sub(ARGV[5] or '', 1, 300)
  streak = ''
  open = false
elseif op == 'norun' then
  open = false
else
  return redis.error_reply('unknown op ' .. op)
end
local o = '0'
if open then
  o = '1'
end
redis.call('HSET', k, 'runs', runs, 'failures', fails, 'open', o, 'acc', math.max(acc, d))
if op == 'limited' or limited ~= tonumber(h[5] or '0') then
  redis.call('HSET', k, 'limited', limited)
end
if op == 'refuse' then
  redis.call('HSET', k, 'refusals', refusals, 'refused', refused)
end
if streak ~= (h[8] or '') then
  if streak == '' then
    redis.call('HDEL', k, 'streak')
  else
    redis.call('HSET', k, 'streak', streak)
  end
end
redis.call('EXPIRE', k, ARGV[4])
return {runs, fails, lost, limited, refusals, refused, streak}
