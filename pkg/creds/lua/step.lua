-- One step of a pool handle: a batch of operations, then the pool's
-- bookkeeping (timed events, serving waiters, the timer), in one atomic
-- call. A handle sends one step at a time, carrying every operation its
-- callers asked for meanwhile.
-- KEYS[1]  <prefix>creds
-- ARGV[1]  instance (the handle)
-- ARGV[2]  lease TTL (us)
-- ARGV[3]  waiter TTL (us): how long a waiter queued by this step stays
--          queued without another
-- ARGV[4]  alive TTL (us): how long the handle's waiters stay queued
--          without another step; 0 when it has none queued (a waiter
--          queued by this step keeps it alive for the waiter TTL)
-- ARGV[5]  group ('' for any credential)
-- ARGV[6]  flags: 'c' collect the grants recorded for this handle (a
--          grant message came and was not enough, a message delivered a
--          grant whose record is left, or its waiters wait); 'q' count its queued
--          waiters (it has some)
-- ARGV[7..] operations, each an opcode and its arguments:
--   E wid cost owner try prio scope group
--                             enqueue a waiter (try=1: only if served now);
--                             prio 1..5 orders the queue before arrival;
--                             scope ('' none) picks the scoped limits that
--                             bind it; group: the keys it may use (a
--                             KeySet's or the handle's, ARGV[5])
--   X wid member              cancel a waiter: leave the queue, or hand
--                             back a grant it did not claim
--   R id member est real mode dur text granted sig sent scope
--                             end a lease: est is the cost charged, real
--                             the cost reported (-1: unknown), granted
--                             its grant time (us), sent when its request
--                             left (us, 0: unknown); mode ok | rest (dur us,
--                             text: reason, a tab, cause) | bare429 (a 429
--                             that said nothing more: widen the pace; dur:
--                             the longest rest, text: reason) | disable
--                             (text: reason); sig: the API's figures (see
--                             apply_signals: they, the rests and the pace
--                             land on the key's account when it has one)
--                             | refuse (text: item, a tab,
--                             reason: see refuse) | unused (never used:
--                             nothing learnt about the key); a credential
--                             it disables (disable, a refuse that ends a
--                             streak) has the largest costs recomputed
--                             (recompute_maxcost reads every credential)
-- Returns {now, {result per op}, {grant...}, timer_us, queued}
--   E: {0} queued or {1} (try: served, see grants) | {-1} no credential
--      usable by this handle | {-2, max, by, dis} the cost never fits
--      (max: the largest cost any of its credentials takes, or any usable
--      one when a disabled one takes it; by: "<id> <limit>" that sets
--      max; dis: that disabled credential, '' none: see cost_verdict) |
--      {-3, wait_us} (try: not served; wait_us -1 when only a release can
--      help)
--   X: {0} left the queue | {1} its grant was handed back | {2} unknown
--   R: {1} done | {0} the lease was not live
--   grant: 'wid|id|token|expiry_us|cost|granted_us|owner' (grant_reply),
--          a lease now held by this handle (collected grants, now a full
--          lease of this handle's TTL, and its own waiters served), 'wid|'
--          for a collected grant whose lease is gone (it lapsed, or was
--          released after its message delivered it), or
--          'wid|!max|dis|by' for a queued waiter whose cost no usable
--          credential takes any more (never_fits_reply; as E's -2)
--   timer_us: run a step again in this many us (-1: not this handle's job)
--   queued: how many of this handle's waiters are in the fleet's queue
--          (-1: not counted, flag 'q' not given)
local now = now_us()
cred_cache = {}
local inst, lease_ttl, waiter_ttl, alive_ttl, group, flags =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
local results = {}
local tries = {}
local fast = {} -- grants made without queueing

if alive_ttl > 0 then
  redis.call('ZADD', K_PROCS, n2s(now + alive_ttl), inst)
end

local i = 7
local queue_empty = nil -- known emptiness of the fleet's queue, this step
local maxcost_stale = false -- an R op disabled a credential
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'E' then
    local wid, cost, owner, try, prio, scope, group =
      ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4], tonumber(ARGV[i + 5]), ARGV[i + 6], ARGV[i + 7]
    i = i + 8
    local granted = false
    if queue_empty == nil then
      queue_empty = redis.call('ZCARD', K_WAITQ) == 0
    end
    if queue_empty then
      -- Nobody waits: take a credential at once, without queueing.
      reserve_now = reserve_for(prio)
      local id, c = pick(now, cost, group, scope)
      reserve_now = 0
      if id then
        local token, exp = grant(id, c, now, owner, cost, lease_ttl, scope)
        fast[#fast + 1] = grant_reply(wid, id, token, n2s(exp), n2s(cost), n2s(now), owner)
        results[#results + 1] = {1}
        granted = true
      end
    end
    if not granted then
      -- It waits, unless no credential of its handle exists or its cost
      -- never fits a usable one.
      local v, max, by, dis = cost_verdict(group, scope, cost)
      if v == 'none' then
        results[#results + 1] = {-1}
      elseif v == 'over' then
        results[#results + 1] = {-2, max, by, dis}
      else
        local m = waiter_member(wid, cost, group, scope, owner)
        queue_empty = false
        -- Priority first (1 before 5), then arrival: the head of the
        -- queue is the oldest waiter of the highest priority.
        local class = group
        if scope ~= '' then
          class = group .. '=' .. scope
        end
        enqueue(m, class, n2s(prio * PRIO_SPAN + redis.call('INCR', K_WSEQ)))
        redis.call('SADD', k_pw(inst), m)
        if alive_ttl <= 0 then
          alive_ttl = waiter_ttl
          redis.call('ZADD', K_PROCS, n2s(now + alive_ttl), inst)
        end
        if try == '1' then
          tries[#tries + 1] = {#results + 1, wid, m}
          results[#results + 1] = {1}
        else
          results[#results + 1] = {0}
        end
      end
    end
  elseif op == 'X' then
    local wid, m = ARGV[i + 1], ARGV[i + 2]
    i = i + 3
    if unqueue(m) then
      redis.call('SREM', k_pw(inst), m)
      results[#results + 1] = {0}
    else
      local g = redis.call('HGET', k_gr(inst), wid)
      if g then
        redis.call('HDEL', k_gr(inst), wid)
        local id, token, owner = string.match(g, '^([^|]*)|([^|]*)|[^|]*|[^|]*|(.*)$')
        if id and end_lease(id, token .. '|' .. owner, now) then
          reindex(id, now)
        end
        results[#results + 1] = {1}
      else
        results[#results + 1] = {2}
      end
    end
  elseif op == 'R' then
    local id, member, est, real, mode, dur, text, granted, sig, sent, scope =
      ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]), ARGV[i + 5], tonumber(ARGV[i + 6]),
      ARGV[i + 7], tonumber(ARGV[i + 8]), ARGV[i + 9], tonumber(ARGV[i + 10]), ARGV[i + 11] or ''
    i = i + 12
    local live = end_lease(id, member, now)
    local c = load(id)
    -- What the reply says of the key's room is about its account's (the
    -- API limits the account: every key of it draws on the same room),
    -- or the key's own when it has none.
    local sid, sc = id, c
    if c and c.up then
      sid, sc = c.up, load(c.up) or c
      if sc == c then
        sid = id
      end
    end
    -- What a run of a scope the key (or account) limits per scope learns
    -- about its room rests that scope only.
    local own = ''
    if sc and has_scope(sid, sc, scope) then
      own = scope
    end
    -- every entity the start was charged to: the key and its accounts
    local charged = {}
    if c then
      charged[1] = {id, c}
      each_up(c, function(e, ce)
        charged[#charged + 1] = {e, ce}
      end)
    end
    if c and real >= 0 and real ~= est then
      -- The real cost replaces the estimate in every window the start was
      -- charged to (still in it), whether or not the lease is still live:
      -- it is what the start cost.
      local token = string.match(member, '^([^|]*)')
      for _, ec in ipairs(charged) do
        for _, l in ipairs(limits_for(ec[1], ec[2], scope)) do
          if l.kind == 'c' then
            local k, sk = lim_keys(ec[1], l)
            cw_reconcile(k, sk, token, est, real)
          end
        end
      end
    end
    if c and sent > granted and mode ~= 'unused' then
      -- The API counted the request when it arrived, after the grant by a
      -- delay that varies from start to start: counted from its grant, a
      -- start would leave the windows before it leaves the API's, and a
      -- start granted then would arrive into a full window. It counts
      -- from when its request left instead (kept before now), in the
      -- windows that still hold it, and a smooth limit's next start comes
      -- one interval after it. Only the limits that bound the start (its
      -- scope's and the unscoped ones) hold it.
      local token = string.match(member, '^([^|]*)')
      local at = math.min(sent, now)
      local cost = est
      if real >= 0 then
        cost = real
      end
      for _, ec in ipairs(charged) do
        local eid = ec[1]
        for _, l in ipairs(limits_for(eid, ec[2], scope)) do
          if l.kind == 'w' then
            sw_restamp(lim_keys(eid, l), l.p, token, at)
          elseif l.kind == 'c' then
            local k, sk = lim_keys(eid, l)
            cw_restamp(k, sk, l.p, token, cost, at)
          elseif l.kind == 'g' then
            local k = lim_keys(eid, l)
            local tat = tonumber(redis.call('GET', k) or '')
            local nt = gcra_restamp(tat, at, l.p / l.n)
            if nt > now and (tat == nil or nt > tat) then
              gcra_store(k, nt, now)
            end
          end
        end
      end
      if sc and sc.pace_us > 0 then
        -- A pace spaces the requests' arrivals: the next start comes one
        -- pace after this request left, not after its grant (its way out
        -- varies from start to start, and a later start whose request
        -- left faster would arrive less than a pace after it).
        local nt = at + sc.pace_us
        if nt > sc.pace_tat and nt > now then
          sc.pace_tat = nt
          redis.call('HSET', k_cred(sid), 'pace_tat', n2s(nt))
        end
      end
      if not live then
        reindex(id, now, c) -- a live lease's end reindexes below
      end
    end
    if c and live then
      -- A stale lease (expired, released before) changes nothing more.
      local was_disabled = c.disabled
      if mode == 'disable' then
        redis.call('HSET', k_cred(id), 'disabled', '1', 'disabled_reason', text, 'disabled_at', n2s(now), 'disabled_by', 'api')
        c.disabled = true
      elseif mode == 'refuse' then
        refuse(id, c, now, text)
      elseif mode == 'unused' then
        -- given back before any request: nothing learnt about the key
      elseif mode == 'rest' then
        local reason, cause = string.match(text, '^(.-)\t(.*)$')
        if own ~= '' then
          set_scope_rest(sid, sc, now, dur, own, (reason or text) .. ' [' .. own .. ']')
        else
          set_rest(sid, now, dur, reason or text, cause or '', sc)
        end
        share_refused(sid, sc, now, granted, lease_ttl)
        redis.call('HINCRBY', k_cred(id), 'rate_limited', 1)
        if sid ~= id then
          redis.call('HINCRBY', k_cred(sid), 'rate_limited', 1)
        end
      elseif mode == 'bare429' then
        bare_429(sid, sc, now, granted, dur, text)
        share_refused(sid, sc, now, granted, lease_ttl)
        redis.call('HINCRBY', k_cred(id), 'rate_limited', 1)
        if sid ~= id then
          redis.call('HINCRBY', k_cred(sid), 'rate_limited', 1)
        end
      else
        paced_success(sid, sc)
      end
      if mode ~= 'disable' and mode ~= 'refuse' and mode ~= 'unused' then
        apply_signals(sid, sc, now, est, sig, own, granted, sent, lease_ttl)
        if c.refused_items ~= '' then
          -- The key took a run: its streak of refusals ends.
          redis.call('HDEL', k_cred(id), 'refused', 'refused_items')
          c.refused_items = ''
        end
      end
      if c.disabled and not was_disabled then
        maxcost_stale = true
      end
      reindex(id, now, c)
    end
    if live then
      results[#results + 1] = {1}
    else
      results[#results + 1] = {0}
    end
  else
    return redis.error_reply('creds: step: unknown op ' .. tostring(op))
  end
end

-- Collect the grants recorded for this handle: each is a lease, renewed
-- now for this handle's lease TTL (a grant made by an operator's action
-- lives the short claim TTL until then), unless it is gone. The grants
-- their messages delivered are passed over by the handle. A waiter whose
-- cost serve found never fits gets that answer ('!': never_fits_reply).
local grants = fast
local pending = {}
if string.find(flags, 'c', 1, true) then
  pending = redis.call('HGETALL', k_gr(inst))
end
if #pending > 0 then
  redis.call('DEL', k_gr(inst))
  for j = 1, #pending, 2 do
    local wid, g = pending[j], pending[j + 1]
    if string.sub(g, 1, 1) == '!' then
      grants[#grants + 1] = wid .. '|' .. g
    else
      local id, token, at, cost, owner = string.match(g, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
      local member = (token or '') .. '|' .. (owner or '')
      local lk = k_leases(id or '')
      local exp = tonumber(redis.call('ZSCORE', lk, member) or '0') or 0
      if id and exp > now then
        local new_exp = now + lease_ttl
        redis.call('ZADD', lk, 'XX', n2s(new_exp), member)
        renew_up(id, member, new_exp)
        grants[#grants + 1] = grant_reply(wid, id, token, n2s(new_exp), cost, at, owner)
      else
        grants[#grants + 1] = lost_reply(wid)
      end
    end
  end
end

if maxcost_stale then
  -- The largest cost a group's usable credentials take may have fallen:
  -- serve then answers the waiters whose cost fits only disabled ones.
  recompute_maxcost()
end
promote(now)
local mine, hol, waited = serve(now, inst, lease_ttl, #ARGV - 6 + 8, queue_empty)
for _, g in ipairs(mine) do
  grants[#grants + 1] = g
end

-- A try that was not served leaves the queue at once.
for _, t in ipairs(tries) do
  local r, wid, m = t[1], t[2], t[3]
  if unqueue(m) then
    redis.call('SREM', k_pw(inst), m)
    local wait = -1
    local s = redis.call('ZRANGE', K_SCHED, 0, 0, 'WITHSCORES')
    if #s > 0 then
      wait = math.max(tonumber(s[2]) - now, 0)
    end
    results[r] = {-3, n2s(wait)}
  end
end

local queued = -1
if string.find(flags, 'q', 1, true) then
  queued = 0
  if waited then
    queued = redis.call('SCARD', k_pw(inst))
  end
end
return {n2s(now), results, grants, n2s(arm_timer(now, inst, hol, waited)), queued}
