-- The pool library, prepended to every pool script (after pkg/ratelimit's
-- sliding-window, GCRA and cost-window libraries).
--
-- Every key of a pool starts with one prefix holding the pool's hash tag
-- ("keyfleet:{<pool>}:"), so all of them live in one Redis Cluster slot.
-- Each script gets the pool's registry in KEYS[1] ("<prefix>creds") and
-- derives the other keys from its prefix:
--
--   creds            zset   every credential (score 0): the registry
--   ready            zset   id -> last start (us): usable now (room for a
--                           start of cost 1), least recently used first
--   sched            zset   id -> the moment it may be usable again: the end
--                           of its rest, of a lease (when full) or of a limit
--   cred:<id>        hash   max, limits (every limit), lim0 (the unscoped
--                           ones), lim|<scope> (each scope's), limscopes
--                           (the scopes: see write_limits),
--                           disabled(_reason,_at,_by), cfg_max,
--                           refused, refused_items (the streak of items
--                           it refused in a row: text, and item keys),
--                           cfg_limits, last (start, us), starts, rate_limited, rests,
--                           pace_us, pace_tat, pace_streak, pace_widened,
--                           rest_until, rest_reason, rest_cause, rest_at,
--                           srest|<scope>, srest_reason|<scope> (a rest of
--                           one scope only: see set_scope_rest)
--   leases:<id>      zset   "<token>|<owner>" -> lease expiry (us)
--   lw:<id>:<P>      zset   sliding-window log of starts, window P us
--   lc:<id>:<P>      zset   cost-window log "<token>:<cost>", window P us
--   lcs:<id>:<P>     string running sum of lc:<id>:<P>
--   lg:<id>:<spec>   string GCRA theoretical arrival time (us)
--   fence            string fencing-token counter
--   wq:<class>       zset   waiter -> priority * 2^40 + arrival number: the
--                           queue of one class of waiters (<class>: a key
--                           group, "=<scope>" when it has one), highest
--                           priority (1) first, then first come first
--                           served; a waiter is
--                           "<inst>.<n>|<cost>|<class>|<owner>"
--   waitq            zset   the fleet's queue: the head of each class's
--                           queue (its first waiter, written
--                           "<inst>.<n>|<cost>|~<class>|<owner>", with its
--                           score), so that a blocked class is one entry
--                           however many waiters it holds; and a waiter an
--                           older version queued (no '~': it is in waitq
--                           alone). Ordered like the classes' queues.
--   wseq             string arrival counter
--   wrot             string where serve's rotation through waitq past its
--                           bound left off (a score; see serve)
--   procs            zset   instance -> alive until (us): pool handles
--                           with waiters refresh it
--   pw:<inst>        set    the waiters of one instance
--   gr:<inst>        hash   wid -> "<id>|<token>|<at>|<cost>|<owner>": grants
--                           made to one instance that its steps have not
--                           collected yet (its messages may have delivered
--                           them already)
--   grp:<group>      set    credential ids a handle may use (WithOnly)
--   groups           set    every group
--   maxcost          hash   group ('' for all; "<group>=<scope>" per scope)
--                           -> the largest cost any of its credentials can
--                           ever take (-1: none; "inf"), ':by' the limit
--                           that sets it; ':use', ':useby': the same over
--                           its usable (not disabled) credentials; ':dby':
--                           the disabled credential that takes more than
--                           any usable one ('' none)
--   timer            hash   at, inst: who runs the next timed step, when
--   accts            zset   every account (score 0), as its entity id
--                           "*<account>" ('*' is never in an ID)
--   cred:*<a>        hash   an account, stored as a credential is (limits,
--                           lim0, lim|<scope>, rests, pace, last, cfg_*)
--                           and read by the same functions; 'up' names
--                           its enclosing account ("*<parent>"), as a
--                           credential's 'up' names its account
--   leases:*<a>      zset   the live leases of the account's own keys
--                           (their members and expiries): its runs in
--                           flight, for what a reply says of its room
--   lw|lc|lcs|lg:*<a>:...   its limits' state, as a credential's
--   ar:*<a>          zset   its own keys that are usable now as far as
--                           they go (the key's own state and limits), LRU
--   as:*<a>          zset   its own keys usable at a known moment
--   ak:*<a>          set    its own keys
--   pool             hash   reserve: the share of every limit that
--                           starts of priority >= 1 leave free (gateway)
-- ready and sched hold units: a credential without an account, or an
-- account with keys of its own ("*<a>"), usable now when its chain of
-- accounts has room for a start of cost 1 and one of its keys is usable
-- (ar), so that an account at its limits is one entry however many keys
-- it has. grp:<group> holds the units of its credentials as well.
--   g:<inst>         channel  messages to one pool handle: "g" (grants
--                           wait in gr:<inst>), "t<us>" (run a step then)
-- All times are integer microseconds of redis.call('TIME').

local PFX = string.sub(KEYS[1], 1, -6) -- strip "creds"
local K_CREDS = KEYS[1]
local K_READY = PFX .. 'ready'
local K_SCHED = PFX .. 'sched'
local K_FENCE = PFX .. 'fence'
local K_WAITQ = PFX .. 'waitq'
local K_WSEQ = PFX .. 'wseq'
local K_WROT = PFX .. 'wrot'
-- PRIO_SPAN separates the priorities of the waiter queue's scores (2^40
-- arrivals each; scores stay exact doubles up to priority 8).
local PRIO_SPAN = 1099511627776
local K_PROCS = PFX .. 'procs'
local K_MAXCOST = PFX .. 'maxcost'
local K_TIMER = PFX .. 'timer'
local K_GROUPS = PFX .. 'groups'
local K_ACCTS = PFX .. 'accts'
local K_POOL = PFX .. 'pool'

local function k_cred(id) return PFX .. 'cred:' .. id end
local function k_leases(id) return PFX .. 'leases:' .. id end
local function k_pw(inst) return PFX .. 'pw:' .. inst end
local function k_wq(class) return PFX .. 'wq:' .. class end
local function k_gr(inst) return PFX .. 'gr:' .. inst end
local function k_grp(g) return PFX .. 'grp:' .. g end
local function ch_of(inst) return PFX .. 'g:' .. inst end
local function k_ar(a) return PFX .. 'ar:' .. a end
local function k_as(a) return PFX .. 'as:' .. a end
local function k_ak(a) return PFX .. 'ak:' .. a end

-- is_acct: whether entity id is an account ("*<account>") rather than a
-- credential.
local function is_acct(id) return string.byte(id, 1) == 42 end -- '*'

-- ACCT_MAX is an account's concurrency: accounts limit rates and costs,
-- not runs in flight (their keys do).
local ACCT_MAX = 1e12
-- CHAIN_MAX bounds the accounts above a key (the config refuses cycles).
local CHAIN_MAX = 8

-- reserve_now: the share of every limit a start being decided must leave
-- free (the pool's reserve for a start of priority >= 1, 0 for an
-- interactive one of priority 0, and 0 where a credential is indexed: the
-- index says what the most favoured start may do). lim_when reads it.
local reserve_now = 0
local pool_reserve = nil
local function reserve_for(prio)
  if prio and prio >= 1 then
    if pool_reserve == nil then
      pool_reserve = tonumber(redis.call('HGET', K_POOL, 'reserve') or '0') or 0
    end
    return pool_reserve
  end
  return 0
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- n2s writes an integer without Lua's scientific notation.
local function n2s(x)
  return string.format('%.0f', x)
end

-- Bounds on the work of one script, so that no call's cost grows with the
-- pool or the fleet.
local PROMOTE_MAX = 32   -- scheduled credentials re-examined per call
local CANDIDATES = 8     -- ready credentials examined for one waiter
local SCAN_MAX = 16      -- waitq entries (class heads) examined per call
                         -- in order, beyond those served
local ROT_MAX = 8        -- waitq entries examined per call past those, where
                         -- the previous call's rotation left off
local ROT_NEXT_US = 2000 -- a rotation that did not come round asks for the
                         -- next step this soon

---------------------------------------------------------------------------
-- Limits. A credential's limits are one string, ';'-separated:
--   w<N>/<P>        at most N starts in any window of P us (exact log)
--   g<N>/<P>/<B>    smooth: at most B back to back, then one every P/N us
--   c<N>/<P>        at most N cost units in any window of P us (exact log)
-- each optionally followed by =<scope>: the limit counts and binds only
-- starts of that scope (an API's limit per model); without, every start.
---------------------------------------------------------------------------

local function parse_limits(s)
  local out = {}
  if not s or s == '' then
    return out
  end
  for spec in string.gmatch(s, '[^;]+') do
    local kind = string.sub(spec, 1, 1)
    local nums, scope = string.match(spec, '^([^=]*)=?(.*)$')
    local n, p, b = string.match(nums, '^%a(%d+)/(%d+)/?(%d*)$')
    if n then
      out[#out + 1] = {kind = kind, n = tonumber(n), p = tonumber(p), b = tonumber(b) or 1, spec = spec, scope = scope}
    end
  end
  return out
end

-- write_limits stores credential id's limits (the encoded list raw): all
-- of them in 'limits' (stats, admin), the unscoped ones in 'lim0' and
-- each scope's in 'lim|<scope>', so that a start reads and parses only
-- the limits that bind it, however many scopes the key has.
local function write_limits(id, raw)
  local k = k_cred(id)
  local old = redis.call('HGET', k, 'limscopes')
  if old and old ~= '' then
    for sc in string.gmatch(old, '[^,]+') do
      redis.call('HDEL', k, 'lim|' .. sc)
    end
  end
  local u, per, order = {}, {}, {}
  for spec in string.gmatch(raw, '[^;]+') do
    local sc = string.match(spec, '=(.*)$')
    if sc and sc ~= '' then
      if not per[sc] then
        per[sc] = {}
        order[#order + 1] = sc
      end
      per[sc][#per[sc] + 1] = spec
    else
      u[#u + 1] = spec
    end
  end
  redis.call('HSET', k, 'limits', raw, 'lim0', table.concat(u, ';'), 'limscopes', table.concat(order, ','))
  for _, sc in ipairs(order) do
    redis.call('HSET', k, 'lim|' .. sc, table.concat(per[sc], ';'))
  end
end

-- applies: whether limit l binds a start of `scope` ('' none): an
-- unscoped limit binds every start, a scoped one only its scope's.
local function applies(l, scope)
  return l.scope == '' or l.scope == scope
end

-- lim_keys: a scoped limit's keys end in '|<scope>' ('|' is never in a
-- scope), so limits of one period but different scopes never share one.
local function lim_keys(id, l)
  local sfx = ''
  if l.scope ~= '' then
    sfx = '|' .. l.scope
  end
  if l.kind == 'c' then
    return PFX .. 'lc:' .. id .. ':' .. l.p .. sfx, PFX .. 'lcs:' .. id .. ':' .. l.p .. sfx
  elseif l.kind == 'g' then
    return PFX .. 'lg:' .. id .. ':' .. l.spec
  end
  return PFX .. 'lw:' .. id .. ':' .. l.p .. sfx
end

-- lim_when: the earliest moment (>= now) a start of `cost` fits in limit
-- l; -1 if it never can (cost above a cost limit). With reserve_now, the
-- start must leave that share of the limit free: a window or cost limit
-- of N holds at most N * (1 - reserve) for it (at least one start, and at
-- least its own cost: a start the whole limit takes is not made to wait
-- forever), and a smooth limit keeps that share of its burst.
local function lim_when(id, l, now, cost)
  local n = l.n
  if reserve_now > 0 then
    n = math.floor(n * (1 - reserve_now))
  end
  if l.kind == 'w' then
    local wait = sw_wait(lim_keys(id, l), math.max(n, 1), l.p, now, 1)
    if wait < 0 then
      return -1
    end
    return now + wait
  elseif l.kind == 'c' then
    local k, sk = lim_keys(id, l)
    return cw_when(k, sk, math.max(n, math.min(cost, l.n)), l.p, now, cost)
  elseif l.kind == 'g' then
    local tat = tonumber(redis.call('GET', lim_keys(id, l)) or '')
    local interval = l.p / l.n
    if reserve_now > 0 and tat then
      tat = tat + reserve_now * l.b * interval
    end
    return gcra_when(tat, now, interval, l.b, 1)
  end
  return now
end

-- gcra_store writes a smooth limit's theoretical arrival time, kept until
-- it has passed.
local function gcra_store(k, tat, now)
  redis.call('SET', k, string.format('%.3f', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
end

local function lim_take(id, l, now, token, cost)
  if l.kind == 'w' then
    sw_record(lim_keys(id, l), l.p, now, token)
  elseif l.kind == 'c' then
    local k, sk = lim_keys(id, l)
    cw_record(k, sk, l.p, now, token, cost)
  elseif l.kind == 'g' then
    local k = lim_keys(id, l)
    local interval = l.p / l.n
    gcra_store(k, gcra_take(tonumber(redis.call('GET', k) or ''), now, interval, 1), now)
  end
end

-- lim_use: {used, of, next room (us, 0 = now)} for stats.
local function lim_use(id, l, now)
  local at = lim_when(id, l, now, 1)
  if at <= now then
    at = 0
  end
  if l.kind == 'w' then
    return {sw_count(lim_keys(id, l), l.p, now), l.n, at}
  elseif l.kind == 'c' then
    local k, sk = lim_keys(id, l)
    return {cw_sum(k, sk, l.p, now), l.n, at}
  end
  local tat = tonumber(redis.call('GET', lim_keys(id, l)) or '')
  return {gcra_used(tat, now, l.p / l.n), l.b, at}
end

---------------------------------------------------------------------------
-- Credential state
---------------------------------------------------------------------------

-- read_bucket reads a learnt bucket "<tat>:<interval>:<limit>:<sent>"
-- (see learn_bucket); nil when none.
local function read_bucket(v)
  if not v then
    return nil
  end
  local tat, iv, limit, sent = string.match(v, '^([^:]*):([^:]*):([^:]*):?([^:]*)$')
  tat, iv, limit = tonumber(tat or ''), tonumber(iv or ''), tonumber(limit or '')
  if not tat or not iv or not limit or iv <= 0 then
    return nil
  end
  return {tat = tat, iv = iv, limit = limit, sent = tonumber(sent or '') or 0}
end

-- cred_cache: when a script sets it to a table, load keeps each
-- credential's state there for the rest of the call, so that several
-- operations on one credential read its hash and count its leases once.
-- Whatever changes that state in such a script goes through the loaded
-- table (grant, set_rest, end_lease, the pacing functions do).
local cred_cache = nil

local function load(id)
  if cred_cache and cred_cache[id] then
    return cred_cache[id]
  end
  local c = redis.call('HMGET', k_cred(id), 'max', 'lim0', 'disabled', 'pace_us', 'pace_tat', 'rest_until', 'last',
    'starts', 'pace_floor', 'refused_items', 'up', 'lbr', 'lbt', 'lb_share', 'ut', 'pace_ok')
  if not c[1] then
    return nil
  end
  local up, lbr, lbt, lb_share, ut, pace_ok = c[11], c[12], c[13], c[14], c[15], c[16]
  if up == '' then
    up = nil
  end
  local ulimits, slim = nil, {}
  if c[2] then
    ulimits = parse_limits(c[2])
  else
    -- Written by an older version (no lim0): split every limit here.
    ulimits = {}
    for _, l in ipairs(parse_limits(redis.call('HGET', k_cred(id), 'limits'))) do
      if l.scope == '' then
        ulimits[#ulimits + 1] = l
      else
        slim[l.scope] = slim[l.scope] or {}
        table.insert(slim[l.scope], l)
      end
    end
    slim[true] = true -- every scope is known: none is read
  end
  c = {
    max = tonumber(c[1]) or 1,
    ulimits = ulimits, -- the unscoped limits
    slim = slim, -- scope -> its limits, read when first needed (scoped_limits)
    disabled = c[3] == '1',
    pace_us = tonumber(c[4] or '0') or 0,
    pace_tat = tonumber(c[5] or '0') or 0,
    rest_until = tonumber(c[6] or '0') or 0,
    last = c[7] or '0',
    starts = tonumber(c[8] or '0') or 0,
    pace_floor = tonumber(c[9] or '0') or 0,
    refused_items = c[10] or '',
    up = up, -- the account above ("*<a>"), nil: none
    acct = is_acct(id),
    -- the API's buckets as its replies told them (see learn_bucket)
    lbr = read_bucket(lbr), lbt = read_bucket(lbt),
    lb_share = tonumber(lb_share or '') or 1, -- see share_refused
    ut = tonumber(ut or '') or 0, -- an account's: see reindex_unit
    pace_ok = tonumber(pace_ok or '') or 0, -- successes since the pace last widened
  }
  if cred_cache then
    cred_cache[id] = c
  end
  return c
end

-- scoped_limits: credential id's limits of scope (state c), read once.
local function scoped_limits(id, c, scope)
  local s = c.slim[scope]
  if s == nil then
    if c.slim[true] then
      s = {}
    else
      s = parse_limits(redis.call('HGET', k_cred(id), 'lim|' .. scope))
    end
    c.slim[scope] = s
  end
  return s
end

-- limits_for: the limits that bind a start of scope ('' none) on
-- credential id: the unscoped ones, then the scope's.
local function limits_for(id, c, scope)
  if scope == '' then
    return c.ulimits
  end
  local s = scoped_limits(id, c, scope)
  if #s == 0 then
    return c.ulimits
  end
  c.lf = c.lf or {}
  local out = c.lf[scope]
  if not out then
    out = {}
    for _, l in ipairs(c.ulimits) do
      out[#out + 1] = l
    end
    for _, l in ipairs(s) do
      out[#out + 1] = l
    end
    c.lf[scope] = out
  end
  return out
end

-- all_limits: every limit of credential id (stats, admin, the largest
-- cost per scope).
local function all_limits(id)
  return parse_limits(redis.call('HGET', k_cred(id), 'limits'))
end

-- held returns the live leases of credential id (state c), counted once
-- per script. Expired entries (a crashed holder's) stay until stats or a
-- renewal drops them.
local function held(id, c, now)
  if c.held == nil then
    c.held = redis.call('ZCOUNT', k_leases(id), '(' .. n2s(now), '+inf')
  end
  return c.held
end

-- scope_rest: the end of credential id's rest for scope only (0: none),
-- read once per call and scope.
local function scope_rest(id, c, scope)
  c.srest = c.srest or {}
  local u = c.srest[scope]
  if u == nil then
    u = tonumber(redis.call('HGET', k_cred(id), 'srest|' .. scope) or '0') or 0
    c.srest[scope] = u
  end
  return u
end

-- has_scope: whether credential c has a limit of scope (then the API
-- limits the key per scope, and what a run of that scope learns about the
-- key's room is about that scope).
local function has_scope(id, c, scope)
  return scope ~= '' and #scoped_limits(id, c, scope) > 0
end

-- fit_at: the earliest moment (>= now) at which credential id (state c)
-- can take a start of `cost` in `scope` ('' or nil: none; then only the
-- unscoped limits count): the latest of the end of its rest, the end of a
-- lease when it is full, its learnt pace and the answer of each limit
-- that applies. -1: disabled; -2: the cost never fits one of its limits.
local function fit_at(id, c, now, cost, scope)
  scope = scope or ''
  if c.disabled then
    return -1
  end
  local t = now
  if c.rest_until > t then
    t = c.rest_until
  end
  if scope ~= '' then
    local u = scope_rest(id, c, scope)
    if u > t then
      t = u
    end
  end
  local n, cap = 0, c.max
  if not c.acct then
    n = held(id, c, now)
  end
  if c.refused_items ~= '' then
    -- On probation: a key that refused the last items it ran takes one
    -- request at a time until it takes one, so that it is disabled after
    -- at most REFUSALS_TO_DISABLE requests sent after the first refusal.
    cap = 1
  end
  if n >= cap then
    -- room comes back when n-cap+1 live leases have ended
    local e = redis.call('ZRANGEBYSCORE', k_leases(id), '(' .. n2s(now), '+inf', 'WITHSCORES', 'LIMIT', n - cap, 1)
    if #e > 0 and tonumber(e[2]) > t then
      t = tonumber(e[2])
    end
  end
  if c.pace_us > 0 and c.pace_tat > t then
    t = c.pace_tat
  end
  -- the API's own buckets, as its replies told them: a request, and the
  -- start's cost in tokens
  local lb = c.lbr
  if lb then
    local w = gcra_when(lb.tat, now, lb.iv, lb.limit, 1)
    if w > t then
      t = w
    end
  end
  lb = c.lbt
  if lb then
    local w = gcra_when(lb.tat, now, lb.iv, lb.limit, math.min(cost, lb.limit))
    if w > t then
      t = w
    end
  end
  for _, l in ipairs(limits_for(id, c, scope)) do
    local w = lim_when(id, l, now, cost)
    if w < 0 then
      return -2
    end
    if w > t then
      t = w
    end
  end
  return t
end

-- chain_fit: the earliest moment (>= now) at which every account of the
-- chain that starts at entity `up` (nil: none) can take a start of `cost`
-- in `scope`; -2 when one never can.
local function chain_fit(up, now, cost, scope)
  local t, depth = now, 0
  while up and depth < CHAIN_MAX do
    local a = load(up)
    if not a then
      break
    end
    local w = fit_at(up, a, now, cost, scope)
    if w < 0 then
      return -2
    end
    if w > t then
      t = w
    end
    up, depth = a.up, depth + 1
  end
  return t
end

-- renew_up moves credential id's lease member to its new expiry among
-- its account's runs in flight (when it has an account).
local function renew_up(id, member, exp)
  local up = redis.call('HGET', k_cred(id), 'up')
  if up and up ~= '' then
    redis.call('ZADD', k_leases(up), 'XX', n2s(exp), member)
  end
end

-- each_up calls f(entity, state) for every account of credential c's
-- chain, nearest first.
local function each_up(c, f)
  local up, depth = c.up, 0
  while up and depth < CHAIN_MAX do
    local e = load(up)
    if not e then
      return
    end
    f(up, e)
    up, depth = e.up, depth + 1
  end
end

-- full_fit: fit_at of credential id with its accounts: the latest of its
-- own answer and its chain's (-1 disabled, -2 never fits).
local function full_fit(id, c, now, cost, scope)
  local t = fit_at(id, c, now, cost, scope)
  if t < 0 or not c.up then
    return t
  end
  local w = chain_fit(c.up, now, cost, scope)
  if w < 0 then
    return w
  end
  return math.max(t, w)
end

-- place writes member where t says: in zr (usable now, scored by last:
-- LRU), in zs (usable at t) or in neither (t < 0: never, disabled).
-- c.idx and c.idx_at remember what this call wrote, so that a cached
-- entity placed again at the same place costs nothing; a member is in at
-- most one of the two (only place writes them), so one that was already
-- where it belongs needs no removal.
local function place(zr, zs, member, c, t, now)
  if t == now then
    if c.idx ~= 'r' or c.idx_at ~= c.last or c.idx_in ~= zr then
      if redis.call('ZADD', zr, c.last, member) == 1 then
        redis.call('ZREM', zs, member)
      end
      c.idx, c.idx_at, c.idx_in = 'r', c.last, zr
    end
  elseif t > now then
    if c.idx ~= 's' or c.idx_at ~= t or c.idx_in ~= zs then
      if redis.call('ZADD', zs, n2s(t), member) == 1 then
        redis.call('ZREM', zr, member)
      end
      c.idx, c.idx_at, c.idx_in = 's', t, zs
    end
  else
    redis.call('ZREM', zr, member)
    redis.call('ZREM', zs, member)
    c.idx, c.idx_at, c.idx_in = nil, nil, nil
  end
end

-- reindex_unit puts account a (an entity "*<a>" with keys of its own)
-- where its state says, in ready or sched: usable now when one of its
-- keys is in ar:<a> and its chain has room for a start of cost 1; else at
-- the later of the moment its chain has room and its first key's (a
-- bound: promote looks again then); in neither when it has no key that
-- may ever be usable.
--
-- full: the chain's limits are asked (chain_fit), and the moment it has
-- room is kept in the account ('ut'). Otherwise (a key's state changed)
-- only what the account holds is looked at: 'ut', its own rest and pace.
-- A unit whose chain filled since is then found so by the next pick that
-- looks at it (pick indexes it fully), which asks the chain anyway: the
-- limits are not asked twice for one start.
local function reindex_unit(a, now, full)
  local ca = load(a)
  if not ca then
    redis.call('ZREM', K_READY, a)
    redis.call('ZREM', K_SCHED, a)
    return -1
  end
  local kt = -1
  if redis.call('ZCARD', k_ar(a)) > 0 then
    kt = now
  else
    local s = redis.call('ZRANGE', k_as(a), 0, 0, 'WITHSCORES')
    if #s > 0 then
      kt = math.max(tonumber(s[2]), now)
    end
  end
  local t = kt
  if kt >= 0 then
    local ct
    if full then
      local saved = reserve_now
      reserve_now = 0
      ct = chain_fit(a, now, 1, '')
      reserve_now = saved
      local ut = 0
      if ct > now then
        ut = ct
      end
      if ut ~= ca.ut then
        ca.ut = ut
        redis.call('HSET', k_cred(a), 'ut', n2s(ut))
      end
    else
      ct = math.max(ca.ut, ca.rest_until)
      if ca.pace_us > 0 then
        ct = math.max(ct, ca.pace_tat)
      end
    end
    if ct > t then
      t = ct
    end
  end
  place(K_READY, K_SCHED, a, ca, t, now)
  return t
end

-- reindex puts credential id where its state says: ready (usable now, in
-- LRU order), sched (usable at a known moment) or neither (disabled) for a
-- credential without an account; ar:<a> or as:<a> of its account a, by
-- its own state, and then the account's unit (unless keep_unit: the
-- caller reindexes the unit once for several keys).
local function reindex(id, now, c, keep_unit)
  c = c or load(id)
  if not c then
    redis.call('ZREM', K_READY, id)
    redis.call('ZREM', K_SCHED, id)
    return -1
  end
  local saved = reserve_now
  reserve_now = 0
  local t = fit_at(id, c, now, 1)
  reserve_now = saved
  if not c.up then
    place(K_READY, K_SCHED, id, c, t, now)
    return t
  end
  place(k_ar(c.up), k_as(c.up), id, c, t, now)
  if not keep_unit then
    reindex_unit(c.up, now)
  end
  return t
end

-- promote_keys re-examines account a's keys whose moment has come
-- (at most PROMOTE_MAX); the caller reindexes the unit.
local function promote_keys(a, now)
  local due = redis.call('ZRANGEBYSCORE', k_as(a), '-inf', n2s(now), 'LIMIT', 0, PROMOTE_MAX)
  for _, id in ipairs(due) do
    reindex(id, now, nil, true)
  end
  return #due
end

-- promote re-examines the units whose scheduled moment has come.
local function promote(now)
  local due = redis.call('ZRANGEBYSCORE', K_SCHED, '-inf', n2s(now), 'LIMIT', 0, PROMOTE_MAX)
  for _, id in ipairs(due) do
    if is_acct(id) then
      promote_keys(id, now)
      reindex_unit(id, now, true)
    else
      reindex(id, now)
    end
  end
end

-- rest_until returns the end of credential id's rest, 0 if none.
local function rest_until(id, now)
  local u = tonumber(redis.call('HGET', k_cred(id), 'rest_until') or '0') or 0
  if u > now then
    return u
  end
  return 0
end

-- set_rest makes the credential rest until now+dur_us (never shortening a
-- longer rest in place); returns the end.
local function set_rest(id, now, dur_us, reason, cause, c)
  c = c or (cred_cache and cred_cache[id])
  local until_us = now + dur_us
  local cur = rest_until(id, now)
  if cur >= until_us then
    return cur
  end
  redis.call('HSET', k_cred(id), 'rest_until', n2s(until_us), 'rest_reason', reason, 'rest_cause', cause or '',
    'rest_at', n2s(now))
  redis.call('HINCRBY', k_cred(id), 'rests', 1)
  if c then
    c.rest_until = until_us
  end
  return until_us
end

-- set_scope_rest makes credential id rest for starts of scope only, until
-- now+dur_us (never shortening a longer one): the API's reply to a run of
-- that scope said the scope's limit is used up (an API that limits a key
-- per model says so per model), and the key's other scopes keep going.
local function set_scope_rest(id, c, now, dur_us, scope, reason)
  local until_us = now + dur_us
  local cur = scope_rest(id, c, scope)
  if cur >= until_us then
    return cur
  end
  redis.call('HSET', k_cred(id), 'srest|' .. scope, n2s(until_us), 'srest_reason|' .. scope, reason)
  redis.call('HINCRBY', k_cred(id), 'rests', 1)
  c.srest[scope] = until_us
  return until_us
end

-- FENCE_FLOOR: a counter below it (about 2001 in microseconds) was lost
-- with Redis's state or never set.
local FENCE_FLOOR = 1e15

-- FENCE_BLOCK: tokens a call takes from the counter at once, so that a
-- step granting many leases pays one INCRBY, not one INCR a grant. What a
-- call does not use is skipped: tokens only need to increase. The counter
-- then grows by at most FENCE_BLOCK a call, which stays slower than the
-- clock's microseconds (what next_token falls back to) as long as Redis
-- runs fewer than 125,000 granting calls a second, several times what one
-- Redis can.
local FENCE_BLOCK = 8
local fence_next, fence_last = 0, -1

local function next_token(now)
  if fence_next > fence_last then
    fence_last = redis.call('INCRBY', K_FENCE, FENCE_BLOCK)
    if fence_last < FENCE_FLOOR then
      -- The counter started from nothing (Redis lost its state): it
      -- follows the clock from here, so tokens keep increasing.
      -- Registration sets it to the clock too; between, tokens grow by at
      -- most FENCE_BLOCK a call, far slower than the clock.
      fence_last = now + FENCE_BLOCK - 1
      redis.call('SET', K_FENCE, n2s(fence_last))
    end
    fence_next = fence_last - FENCE_BLOCK + 1
  end
  local token = fence_next
  fence_next = fence_next + 1
  return n2s(token)
end

-- write_bucket writes a learnt bucket (read_bucket reads it).
local function write_bucket(lb)
  return string.format('%.0f:%.6g:%d:%.0f', lb.tat, lb.iv, lb.limit, lb.sent)
end

-- charge takes a start's share of entity id's limits that apply to
-- `scope`, and its place in the entity's learnt pace.
local function charge(id, c, now, token, cost, scope)
  for _, l in ipairs(limits_for(id, c, scope or '')) do
    lim_take(id, l, now, token, cost)
  end
  if c.pace_us > 0 then
    local tat = c.pace_tat
    if tat < now then
      tat = now
    end
    c.pace_tat = tat + c.pace_us
    redis.call('HSET', k_cred(id), 'pace_tat', n2s(c.pace_tat))
  end
  if c.lbr then
    c.lbr.tat = gcra_take(c.lbr.tat, now, c.lbr.iv, 1)
    redis.call('HSET', k_cred(id), 'lbr', write_bucket(c.lbr))
  end
  if c.lbt then
    c.lbt.tat = gcra_take(c.lbt.tat, now, c.lbt.iv, cost)
    redis.call('HSET', k_cred(id), 'lbt', write_bucket(c.lbt))
  end
end

-- grant leases credential id (state c, checked to fit with its accounts)
-- to owner for ttl_us, charging every limit that applies to `scope`, its
-- own and its accounts', at once. Returns token, expiry.
local function grant(id, c, now, owner, cost, ttl_us, scope)
  local token = next_token(now)
  local exp = now + ttl_us
  held(id, c, now)
  redis.call('ZADD', k_leases(id), n2s(exp), token .. '|' .. owner)
  c.held = c.held + 1
  charge(id, c, now, token, cost, scope)
  c.last = n2s(now)
  c.starts = c.starts + 1
  redis.call('HSET', k_cred(id), 'last', c.last, 'starts', c.starts)
  if c.up then
    -- Its accounts: the lease counts among its account's runs in flight,
    -- and the start is charged to every account of the chain.
    local a = load(c.up)
    if a then
      redis.call('ZADD', k_leases(c.up), n2s(exp), token .. '|' .. owner)
      if a.held then
        a.held = a.held + 1
      end
      a.last = c.last
      a.starts = a.starts + 1
      redis.call('HSET', k_cred(c.up), 'last', a.last, 'starts', a.starts)
    end
    each_up(c, function(e, ce)
      charge(e, ce, now, token, cost, scope)
    end)
  end
  -- The key's account's unit is left where it is: the next pick that
  -- looks at it finds whether its chain still has room and indexes it
  -- again if not (pick, pick_in), as it does for a key whose state
  -- changed; a start does not pay for that look twice.
  reindex(id, now, c, true)
  return token, exp
end

-- end_lease removes a live lease; returns false when it was not live.
local function end_lease(id, member, now)
  local lk = k_leases(id)
  local exp = tonumber(redis.call('ZSCORE', lk, member) or '0') or 0
  if exp == 0 then
    return false
  end
  redis.call('ZREM', lk, member)
  local c = load(id)
  if c and c.held and exp > now then
    c.held = c.held - 1
  end
  if c and c.up then
    local a = load(c.up)
    if redis.call('ZREM', k_leases(c.up), member) == 1 and a and a.held and exp > now then
      a.held = a.held - 1
    end
  end
  return exp > now
end

---------------------------------------------------------------------------
-- What the API says: header signals and bare 429s
---------------------------------------------------------------------------

-- Pacing from bare 429s (no Retry-After), fleet-wide. The key keeps a
-- floor: the spacing of starts at which the API last refused one (too
-- fast). A bare 429 on a start made after the last widening raises the
-- floor to the spacing in use and sets the pace PACE_MARGIN above it
-- (PACE_MARGIN_CONFIGURED when that spacing was a configured rate's), or
-- wider when the API refused a large share at that pace: pace × (ok + 1)
-- / ok after ok successes at it (x2 while 429s follow each other with no
-- success between), and rests the key one spacing, doubling with each
-- 429 in a row, at most the pool's cooldown. Each success narrows the
-- pace by PACE_NARROW (PACE_NARROW_FAR while it is more than PACE_MARGIN
-- above the floor), never below the floor plus PACE_NEAR, and lowers the
-- floor by PACE_FORGET, so that the key probes again slowly after a long
-- calm. Below PACE_OFF_US the pace is dropped. A pace spaces arrivals:
-- the next start comes a pace after the request left (step.lua R).
local PACE_MARGIN = 1.25
local PACE_MARGIN_CONFIGURED = 1.05
local PACE_WIDEN_STREAK = 2
local PACE_NARROW = 0.0025
local PACE_NARROW_FAR = 0.01
local PACE_NEAR = 1.03
local PACE_FORGET = 0.0002
local PACE_OFF_US = 100
local PACE_FIRST_MIN_US = 1000

-- bare_429 widens the pace of credential id after a 429 that said nothing
-- more, on a start granted at `granted`; max_rest_us bounds the rest.
local function bare_429(id, c, now, granted, max_rest_us, reason)
  local f = redis.call('HMGET', k_cred(id), 'pace_streak', 'pace_widened')
  local streak = tonumber(f[1] or '0') or 0
  local widened = tonumber(f[2] or '0') or 0
  local pace = c.pace_us
  if granted >= widened then
    -- New information: the start was made at the current spacing: the
    -- pace, else at least what the configured rates allow, else what
    -- this run's length and the runs in flight with it say.
    local spacing, margin = pace, PACE_MARGIN
    if spacing <= 0 then
      spacing = math.max((now - granted) / (held(id, c, now) + 1), PACE_FIRST_MIN_US)
      for _, l in ipairs(c.ulimits) do
        if l.kind ~= 'c' and l.p / l.n > spacing then
          -- A configured rate refused: the requests arrived closer than
          -- their starts were (network jitter), or the limit is a little
          -- off. A small margin first.
          spacing, margin = l.p / l.n, PACE_MARGIN_CONFIGURED
        end
      end
    end
    c.pace_floor = math.max(c.pace_floor, spacing)
    if pace > 0 and c.pace_ok == 0 then
      -- Refused again before any success at this pace: twice as wide.
      pace = math.max(pace * PACE_WIDEN_STREAK, c.pace_floor * margin)
    elseif pace > 0 then
      -- The API took pace_ok requests at this pace and refused this one:
      -- its spacing is about pace × (ok + 1) / ok (a large share refused:
      -- far wider), at least the floor with its margin.
      pace = math.max(pace * (c.pace_ok + 1) / c.pace_ok, c.pace_floor * margin)
    else
      pace = c.pace_floor * margin
    end
    streak = streak + 1
    c.pace_us, c.pace_ok = pace, 0
    redis.call('HSET', k_cred(id), 'pace_us', n2s(pace), 'pace_floor', n2s(c.pace_floor), 'pace_streak', streak,
      'pace_widened', n2s(now), 'pace_ok', 0)
  end
  local rest = math.min(math.max(pace, 10000) * 2 ^ (math.max(streak, 1) - 1), max_rest_us)
  if rest > 0 then
    set_rest(id, now, rest, reason, 'bare 429 (no Retry-After): pace ' .. n2s(pace / 1000) .. 'ms', c)
  end
end

-- paced_success narrows the pace after a run that was not refused.
local function paced_success(id, c)
  if c.pace_us <= 0 then
    return
  end
  local floor = c.pace_floor * (1 - PACE_FORGET)
  local narrow = PACE_NARROW
  if c.pace_us > floor * PACE_MARGIN then
    narrow = PACE_NARROW_FAR -- far above where it was refused: come down faster
  end
  local pace = math.max(c.pace_us * (1 - narrow), floor * PACE_NEAR)
  if floor < PACE_OFF_US then
    redis.call('HDEL', k_cred(id), 'pace_us', 'pace_tat', 'pace_floor', 'pace_streak', 'pace_widened', 'pace_ok')
    c.pace_us, c.pace_tat, c.pace_floor, c.pace_ok = 0, 0, 0, 0
  else
    c.pace_us, c.pace_ok = pace, c.pace_ok + 1
    redis.call('HSET', k_cred(id), 'pace_us', n2s(pace), 'pace_floor', n2s(floor), 'pace_streak', 0, 'pace_ok', c.pace_ok)
  end
end

-- REFUSALS_TO_DISABLE: how many different items a credential must refuse
-- in a row before it is disabled (creds.RefusalsToDisable).
local REFUSALS_TO_DISABLE = 3

-- refuse records that credential id (state c) refused a run: text is
-- "<item>\t<reason>". The credential keeps the streak of items it refused
-- in a row (a run it takes ends it, in step's R); one item refused again
-- adds nothing, so an item the API refuses for its own sake never disables
-- a key alone. At REFUSALS_TO_DISABLE different items the credential is
-- disabled by the API, the streak being the reason.
local function refuse(id, c, now, text)
  local item, reason = string.match(text, '^(.-)\t(.*)$')
  item, reason = item or '', reason or text
  local items = {}
  for it in string.gmatch(c.refused_items, '[^\n]+') do
    if it == item then
      return
    end
    items[#items + 1] = it
  end
  items[#items + 1] = item
  local line = item .. ': ' .. reason
  local prev = redis.call('HGET', k_cred(id), 'refused')
  local lines = line
  if prev and prev ~= '' then
    lines = prev .. '\n' .. line
  end
  if #items >= REFUSALS_TO_DISABLE then
    local why = 'refused ' .. #items .. ' different items in a row: ' .. (string.gsub(lines, '\n', '; '))
    redis.call('HSET', k_cred(id), 'disabled', '1', 'disabled_reason', why, 'disabled_at', n2s(now), 'disabled_by', 'api')
    redis.call('HDEL', k_cred(id), 'refused', 'refused_items')
    c.disabled = true
    c.refused_items = ''
    return
  end
  c.refused_items = table.concat(items, '\n')
  redis.call('HSET', k_cred(id), 'refused', lines, 'refused_items', c.refused_items)
end

-- told_room: the least room credential id's told limits of kind ('c':
-- cost, 'w': a window of starts) that bind a start of scope leave now;
-- nil when it has none of that kind.
local function told_room(id, c, now, kind, scope)
  local room = nil
  for _, l in ipairs(limits_for(id, c, scope or '')) do
    local left = nil
    if l.kind == 'c' and kind == 'c' then
      local k, sk = lim_keys(id, l)
      left = l.n - cw_sum(k, sk, l.p, now)
    elseif l.kind == 'w' and kind == 'w' then
      left = l.n - sw_count(lim_keys(id, l), l.p, now)
    end
    if left and (room == nil or left < room) then
      room = left
    end
  end
  return room
end

-- told_freed_at: the moment credential id's told limits of kind ('c' or
-- 'w') that bind a start of scope will have freed `amount` more units
-- than they hold free now (the oldest starts leaving their windows); nil
-- when one of them holds too little to free that much.
local function told_freed_at(id, c, now, kind, scope, amount)
  local at = now
  for _, l in ipairs(limits_for(id, c, scope or '')) do
    local t = nil
    if l.kind == 'c' and kind == 'c' then
      local k, sk = lim_keys(id, l)
      local sum = cw_sum(k, sk, l.p, now)
      t = cw_when(k, sk, l.n, l.p, now, amount + l.n - sum)
    elseif l.kind == 'w' and kind == 'w' then
      local k = lim_keys(id, l)
      local wait = sw_wait(k, l.n, l.p, now, amount + l.n - sw_count(k, l.p, now))
      if wait >= 0 then
        t = now + wait
      else
        t = -1
      end
    end
    if t then
      if t < 0 then
        return nil
      end
      if t > at then
        at = t
      end
    end
  end
  return at
end

-- Refill. Both providers describe their limits as token buckets that
-- refill continuously, and a reset as the time until the bucket is whole
-- again: (limit - remaining) / reset is then the bucket's refill rate.
-- remaining is rounded down and a reset up (Anthropic's to whole
-- seconds), so (limit - remaining - 1) / reset is a bound below it; the
-- highest bound the replies gave for a limit (rr_req, rr_tok:
-- "<units per us>:<limit>") is the entity's refill rate, until a reply
-- tells another limit (the account's limits changed).
--
-- An API whose limit is a window, not a bucket, frees nothing until its
-- oldest requests leave: a key resting only until one start has refilled
-- would send into a full window, and its 429's Retry-After would start
-- the cycle again. Such a rest is noted (rr_short: "<end>:<length>", us);
-- a 429 on a start granted within one such length after it ended, while
-- no other run of the entity granted since it ended is in flight
-- (share_refused: those may have taken what had refilled, as the keys of
-- an account share its bucket; runs granted before it were counted in
-- the figure that set it), stops these short rests for REFILL_OFF_US
-- (rr_off: until when): a short figure then rests the entity until the
-- reset, when the limit is whole again, as it does with no limit told,
-- and it keeps no copy, which would refill before then.
local REFILL_OFF_US = 600e6
local function refill_rate(id, rr, f, remaining, reset, limit)
  local known, of = string.match(rr[f] or '', '^([^:]*):(.*)$')
  known, of = tonumber(known or ''), tonumber(of or '')
  if of ~= limit then
    known = nil
  end
  if reset > 0 and limit - remaining >= 2 then
    local obs = (limit - remaining - 1) / reset
    if not known or obs > known then
      known = obs
      rr[f] = string.format('%.9g:%d', obs, limit)
      redis.call('HSET', k_cred(id), f == 1 and 'rr_req' or 'rr_tok', rr[f])
    end
  end
  return known
end

-- learn_bucket sets entity id's copy of the API's bucket of one unit
-- (f: 'lbr' requests, 'lbt' tokens) from a reply to a request sent at
-- `sent`: limit units, refilled at rate (units per us), of which the
-- reply left `level` for starts it did not count yet. A start needs room
-- in it as in a smooth limit of burst `limit` (fit_at), and takes its
-- share (charge), so that between replies the keys send no faster than
-- the bucket refills. A reply to a request sent before the one the copy
-- was last set from (replies overtake each other) only makes it hold
-- less, never more.
local function learn_bucket(id, c, f, now, limit, rate, level, sent)
  -- Keys that share an account nobody declared each see the whole
  -- account's room in their replies: each takes its share (shared_share)
  -- of what is left and of the refill.
  local share = c.lb_share or 1
  local iv = 1 / (rate * share)
  local lb = {tat = now + (limit - level * share) * iv, iv = iv, limit = limit, sent = sent}
  local old = c[f]
  if old and old.limit == limit and sent < old.sent then
    if lb.tat <= old.tat then
      return old
    end
    lb.sent = old.sent
  end
  c[f] = lb
  redis.call('HSET', k_cred(id), f, write_bucket(lb))
  return lb
end

-- Share. A copy of a bucket that other keys draw on too (keys of one
-- account that the pool was not told share it) lets each of them take
-- all of what is left: a 429 on an entity with a copy halves the share
-- of the copy it takes (lb_share, at least SHARE_MIN), and each reply
-- that finds room gives back SHARE_UP of it, up to 1: keys with buckets
-- of their own keep 1, keys that share one settle near their part.
local SHARE_MIN = 1 / 16
local SHARE_UP = 0.01

-- share_refused halves entity id's share of its copies after a 429 at
-- now on a start granted at `granted` (its lease ended), and stops its
-- rests short of the reset for REFILL_OFF_US when that start came just
-- after such a rest with no other run granted since in flight, of leases
-- that live lease_ttl (see REFILL_OFF_US).
local function share_refused(id, c, now, granted, lease_ttl)
  if not c.lbr and not c.lbt then
    return
  end
  c.lb_share = math.max((c.lb_share or 1) / 2, SHARE_MIN)
  redis.call('HSET', k_cred(id), 'lb_share', string.format('%.4f', c.lb_share))
  local s = redis.call('HGET', k_cred(id), 'rr_short')
  local ended, len = string.match(s or '', '^(%d+):(%d+)$')
  ended, len = tonumber(ended or ''), tonumber(len or '')
  if ended and granted and granted >= ended and granted <= ended + len and
    redis.call('ZCOUNT', k_leases(id), '(' .. n2s(ended + lease_ttl), '+inf') == 0 then
    redis.call('HSET', k_cred(id), 'rr_off', n2s(now + REFILL_OFF_US))
    redis.call('HDEL', k_cred(id), 'rr_short')
  end
end

-- share_answered gives back part of entity id's share after a reply that
-- found room.
local function share_answered(id, c)
  local sh = c.lb_share or 1
  if sh < 1 then
    c.lb_share = math.min(1, sh + SHARE_UP)
    redis.call('HSET', k_cred(id), 'lb_share', string.format('%.4f', c.lb_share))
  end
end

-- Arrival order. The API counts a request when it arrives, and runs
-- granted one after the other do not arrive in that order: each waits
-- its own time between its grant and its request's leaving (a process,
-- a connection, a scheduler in between). A reply's figures leave out the
-- runs that arrived after it, which are those granted after it and some
-- granted shortly before it. The entity keeps the longest of its recent
-- grant-to-send delays (sd: "<us>:<at>", halved every SEND_SPREAD_HALF_US
-- since it was set) as the spread of that order: a run granted within it
-- before this one may have arrived after it.
local SEND_SPREAD_HALF_US = 1e6

-- send_spread notes the grant-to-send delay of a run granted at `granted`
-- whose request left at `sent` (0: unknown) and returns entity id's
-- spread (rr[4] holds its sd field).
local function send_spread(id, rr, now, granted, sent)
  local d = 0
  if sent and sent > granted then
    d = math.min(sent, now) - granted
  end
  local old, at = string.match(rr[4] or '', '^(%d+):(%d+)$')
  old, at = tonumber(old or ''), tonumber(at or '')
  local spread = 0
  if old and at then
    spread = old * 0.5 ^ (math.max(now - at, 0) / SEND_SPREAD_HALF_US)
  end
  if d > spread then
    rr[4] = n2s(d) .. ':' .. n2s(now)
    redis.call('HSET', k_cred(id), 'sd', rr[4])
    return d
  end
  return spread
end

-- apply_signals reads the API's own figures about entity id's room (a
-- key's, or its account's: the API reports the account's), sig being
-- "<kind>:<remaining>:<reset us>:<limit>:<name>;..." with kind "req" or
-- "tok" and limit 0 when not told, from the reply to a start granted at
-- `granted` whose request left at `sent` (0: unknown), on a pool whose
-- leases live lease_ttl.
--
-- With the limit told, the figures are a token bucket's (both providers
-- describe their limits so): the entity keeps a copy of it (learn_bucket)
-- refilled at the rate the replies imply (refill_rate; a minute's bucket
-- of limit until they imply one), holding what was left less the runs in
-- flight the reply could not have counted: those granted after this
-- start, and those granted within the send spread before it (see
-- send_spread), which may have arrived after it.
-- When that is short of the next start, the entity rests until enough
-- has refilled (until the reset, for a while after a 429: REFILL_OFF_US),
-- and the copy spaces its starts at the refill rate after that. A reset
-- of 0 with too little left (an API that rounds a short
-- reset down to 0ms) is not room. Without a limit, a short figure (fewer
-- requests left than the runs in flight plus one, or fewer tokens than as
-- many estimates) rests the entity until the reset.
--
-- scope ('' none): a run of a scope the key has limits of rests only that
-- scope (see set_scope_rest) and keeps no copy. With told limits of the
-- signal's unit (cost limits for tokens, windows of starts for
-- requests), the signal is passed over when they leave no more room than
-- the API says is left (they bind first); when the API says less, the
-- rest is at most until the told windows have freed what the API is
-- short of.
local function apply_signals(id, c, now, est, sig, scope, granted, sent, lease_ttl)
  if not sig or sig == '' then
    return
  end
  scope = scope or ''
  local inflight = held(id, c, now)
  local after = nil -- runs granted after this one, still in flight
  if sent == nil or sent <= 0 then
    sent = granted or 0
  end
  local rr = nil
  for kind, remaining, reset, limit, name in string.gmatch(sig, '(%a+):(%-?%d+):(%d+):(%d+):([^;]*)') do
    remaining, reset, limit = tonumber(remaining), tonumber(reset), tonumber(limit)
    local need, per = inflight + 1, 1
    local unit, lkind, f, lf = 'requests', 'w', 1, 'lbr'
    if kind == 'tok' then
      need, per = est * (inflight + 1), est
      unit, lkind, f, lf = 'tokens', 'c', 2, 'lbt'
    end
    local room = told_room(id, c, now, lkind, scope)
    local told_first = room ~= nil and room <= remaining
    local rate, off = nil, false
    local short = remaining < need
    if limit > 0 then
      rr = rr or redis.call('HMGET', k_cred(id), 'rr_req', 'rr_tok', 'rr_off', 'sd')
      rate = refill_rate(id, rr, f, remaining, reset, limit)
      if not rate or rate <= 0 then
        rate = limit / 60e6
      end
      if after == nil then
        after = inflight
        if granted and granted > 0 and lease_ttl then
          local from = granted - send_spread(id, rr, now, granted, sent)
          after = redis.call('ZCOUNT', k_leases(id), '(' .. n2s(from + lease_ttl), '+inf')
        end
      end
      -- what this reply left for starts it could not have counted
      local level = remaining - after * per
      need = remaining - level + per
      short = level < per
      off = (tonumber(rr[3] or '') or 0) > now
      if scope == '' and not told_first then
        if off then
          -- no copy either: it would refill before the reset
          if c[lf] then
            c[lf] = nil
            redis.call('HDEL', k_cred(id), lf)
          end
        else
          learn_bucket(id, c, lf, now, limit, rate, level, sent)
          if not short and remaining > 0 then
            share_answered(id, c)
          end
        end
      end
    end
    if short and not told_first then
      local rest = 0
      if off and reset > 0 then
        rest = reset -- short rests stopped (REFILL_OFF_US)
      elseif rate then
        rest = math.ceil((need - remaining) / rate)
        if reset > 0 and rest > reset then
          rest = reset
        elseif rest > 0 and scope == '' and not room then
          redis.call('HSET', k_cred(id), 'rr_short', n2s(now + rest) .. ':' .. n2s(rest))
        end
      elseif reset > 0 then
        rest = reset
      end
      if room ~= nil and rest > 0 then
        local at = told_freed_at(id, c, now, lkind, scope, need - remaining)
        if at and at - now < rest then
          rest = at - now
        end
      end
      if rest > 0 then
        local why = name .. ': ' .. n2s(remaining) .. ' ' .. unit .. ' left, ' .. n2s(need) .. ' needed (' .. n2s(inflight) ..
          ' in flight)'
        if rate then
          why = why .. ', refill ' .. string.format('%.3g', rate * 1e6) .. '/s'
        end
        if scope ~= '' then
          set_scope_rest(id, c, now, rest, scope, why .. ' [' .. scope .. ']')
        else
          set_rest(id, now, rest, why, name, c)
        end
      end
    end
  end
end

---------------------------------------------------------------------------
-- Waiters
---------------------------------------------------------------------------

-- A waiter member: "<inst>.<n>|<cost>|<class>|<owner>", class
-- "<group>[=<scope>]"; in waitq, the head of its class's queue has '~'
-- before its class (an entry an older version queued has none).
-- parse_waiter returns wid, inst, cost, group, owner, scope, class and
-- whether m is written as a class's head.
local function parse_waiter(m)
  local wid, cost, class, owner = string.match(m, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  local inst = string.match(wid or '', '^([^.]*)')
  class = class or ''
  local head = string.sub(class, 1, 1) == '~'
  if head then
    class = string.sub(class, 2)
  end
  local group, scope = string.match(class, '^([^=]*)=?(.*)$')
  return wid, inst, tonumber(cost) or 1, group or '', owner or '', scope or '', class, head
end

-- waiter_member writes a waiter's member (see parse_waiter).
local function waiter_member(wid, cost, group, scope, owner)
  local class = group
  if scope ~= '' then
    class = group .. '=' .. scope
  end
  return wid .. '|' .. n2s(cost) .. '|' .. class .. '|' .. owner
end

-- head_entry: waiter m's entry in waitq when it heads its class. The '~'
-- also keeps an older version's step, which reads waitq as waiters, from
-- serving it (it finds no credential in group "~..."): only this
-- version's steps, which keep the classes' queues, serve them.
local function head_entry(m)
  local a, b = string.match(m, '^([^|]*|[^|]*|)(.*)$')
  if not a then
    return m
  end
  return a .. '~' .. b
end

-- member_of is head_entry's inverse.
local function member_of(e)
  local a, b = string.match(e, '^([^|]*|[^|]*|)~(.*)$')
  if not a then
    return e
  end
  return a .. b
end

-- enqueue puts waiter m of class with score (a string) in the fleet's
-- queue: in its class's queue, and in waitq when it comes first in its
-- class (the class was empty, or m has a higher priority than its head).
local function enqueue(m, class, score)
  local k = k_wq(class)
  local h = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  redis.call('ZADD', k, score, m)
  if #h == 0 then
    redis.call('ZADD', K_WAITQ, score, head_entry(m))
  elseif tonumber(score) < tonumber(h[2]) then
    redis.call('ZREM', K_WAITQ, head_entry(h[1]))
    redis.call('ZADD', K_WAITQ, score, head_entry(m))
  end
end

-- unqueue takes waiter m (a member) out of the fleet's queue: out of its
-- class's queue and, when it was its class's head, out of waitq, where the
-- class's next waiter takes its place. A waiter an older version queued is
-- in waitq alone. Returns whether m was queued.
local function unqueue(m)
  local _, _, _, _, _, _, class = parse_waiter(m)
  local k = k_wq(class)
  if redis.call('ZREM', k, m) == 0 then
    -- An older version's waiter, or none; a head entry whose class queue
    -- lost it (keys deleted by hand) goes too, so that no walk meets it
    -- again.
    return redis.call('ZREM', K_WAITQ, m, head_entry(m)) > 0
  end
  if redis.call('ZREM', K_WAITQ, head_entry(m)) == 1 then
    local nx = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
    if #nx > 0 then
      redis.call('ZADD', K_WAITQ, nx[2], head_entry(nx[1]))
    end
  end
  return true
end

local function alive(inst, now)
  local u = tonumber(redis.call('ZSCORE', K_PROCS, inst) or '0') or 0
  return u >= now
end

-- reap forgets a dead instance: its waiters leave the queue; the leases
-- granted to it lapse unrenewed (they may be running: a grant's message
-- alone gives it to its waiter).
local function reap(inst)
  local ws = redis.call('SMEMBERS', k_pw(inst))
  for _, m in ipairs(ws) do
    unqueue(m)
  end
  redis.call('DEL', k_pw(inst), k_gr(inst))
  redis.call('ZREM', K_PROCS, inst)
end

-- cost_verdict: whether a waiter of group and scope ('' none) with cost
-- can ever be served, from K_MAXCOST (a scope no limit names has the
-- group's figures): nil when it can, or when every credential it may use
-- is disabled (it waits for one to come back: nothing usable is held
-- back meanwhile); 'none' when the group has no credential; 'over', max,
-- by, dis when its cost is above the largest any credential takes (by:
-- "<id> <limit>" that sets max; dis ''), or above the largest any usable
-- one takes while a disabled one takes it (max and by of the usable
-- ones, dis the disabled credential). A pool written by an older version
-- has no ':use' fields: every credential counts as usable.
local function cost_verdict(group, scope, cost)
  local fs = group .. '=' .. scope
  local v = redis.call('HMGET', K_MAXCOST, fs, fs .. ':use', group, group .. ':use')
  local f, all, use = fs, v[1], v[2]
  if scope == '' or not all then
    f, all, use = group, v[3], v[4]
  end
  local function dec(x)
    if x == 'inf' then
      return math.huge
    end
    return tonumber(x or '-1') or -1
  end
  all = dec(all)
  if use then
    use = dec(use)
  else
    use = all
  end
  if all < 0 then
    return 'none'
  end
  if cost > all then
    return 'over', n2s(all), redis.call('HGET', K_MAXCOST, f .. ':by') or '', ''
  end
  if use >= 0 and cost > use then
    local r = redis.call('HMGET', K_MAXCOST, f .. ':useby', f .. ':dby')
    return 'over', n2s(use), r[1] or '', r[2] or ''
  end
  return nil
end

-- recompute_maxcost refreshes K_MAXCOST for every group and scope: the
-- largest cost over all its credentials and over its usable ones, and the
-- limits that set them. It reads every credential: registration, admin
-- changes and a credential disabled or enabled call it, never an acquire.
local function recompute_maxcost()
  local ids = redis.call('ZRANGE', K_CREDS, 0, -1)
  local function enc(x)
    if x == math.huge then
      return 'inf'
    end
    return n2s(x)
  end
  -- per[scope][id]: the largest cost credential id takes in scope ('':
  -- the unscoped limits only); by[scope][id]: the limit that sets it.
  local scopes = {['' ] = true}
  local loaded, off = {}, {}
  -- An account's limits bind every key of it: they count as the key's.
  local acct_limits = {}
  local function chain_limits(up, ls)
    local depth = 0
    while up and up ~= '' and depth < CHAIN_MAX do
      local a = acct_limits[up]
      if not a then
        local f = redis.call('HMGET', k_cred(up), 'limits', 'up')
        a = {parse_limits(f[1]), f[2]}
        acct_limits[up] = a
      end
      for _, l in ipairs(a[1]) do
        ls[#ls + 1] = {kind = l.kind, n = l.n, p = l.p, b = l.b, spec = 'account ' .. string.sub(up, 2) .. ' ' .. l.spec,
          scope = l.scope, acct = true}
      end
      up, depth = a[2], depth + 1
    end
  end
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', k_cred(id), 'limits', 'disabled', 'max', 'up')
    if f[3] then -- the hash exists ('max' is always written)
      local ls = parse_limits(f[1])
      chain_limits(f[4], ls)
      loaded[id] = ls
      off[id] = f[2] == '1'
      for _, l in ipairs(ls) do
        scopes[l.scope] = true
      end
    end
  end
  local per, by = {}, {}
  for sc in pairs(scopes) do
    per[sc], by[sc] = {}, {}
    for id, ls in pairs(loaded) do
      local m = math.huge
      for _, l in ipairs(ls) do
        if l.kind == 'c' and applies(l, sc) and l.n < m then
          m = l.n
          if l.acct then
            by[sc][id] = l.spec
          else
            by[sc][id] = id .. ' ' .. l.spec
          end
        end
      end
      per[sc][id] = m
    end
  end
  local function set(g, members)
    for sc in pairs(scopes) do
      local gm, gby, um, uby, dm, dby = -1, '', -1, '', -1, ''
      for _, id in ipairs(members) do
        local m = per[sc][id]
        if m and m > gm then
          gm, gby = m, by[sc][id] or ''
        end
        if m and off[id] then
          if m > dm then
            dm, dby = m, id
          end
        elseif m and m > um then
          um, uby = m, by[sc][id] or ''
        end
      end
      if dm <= um then
        dby = ''
      end
      local f = g
      if sc ~= '' then
        f = g .. '=' .. sc
      end
      redis.call('HSET', K_MAXCOST, f, enc(gm), f .. ':by', gby, f .. ':use', enc(um), f .. ':useby', uby, f .. ':dby', dby)
    end
  end
  redis.call('DEL', K_MAXCOST)
  set('', ids)
  for _, g in ipairs(redis.call('SMEMBERS', K_GROUPS)) do
    set(g, redis.call('SMEMBERS', k_grp(g)))
  end
end

-- group_units adds to group g the units of its credentials: the account
-- of each that has one ("*<a>", what ready holds for its keys), and takes
-- out the units none of its credentials has any more.
local function group_units(g)
  local k = k_grp(g)
  local want, have = {}, {}
  for _, m in ipairs(redis.call('SMEMBERS', k)) do
    if is_acct(m) then
      have[m] = true
    else
      local up = redis.call('HGET', k_cred(m), 'up')
      if up and up ~= '' then
        want[up] = true
      end
    end
  end
  for u in pairs(have) do
    if not want[u] then
      redis.call('SREM', k, u)
    end
  end
  for u in pairs(want) do
    if not have[u] then
      redis.call('SADD', k, u)
    end
  end
end

-- pick finds a credential for a waiter among the least recently used
-- ready ones. Returns id, state; or nil, hol, allowed: hol is the earliest
-- moment one of them takes `cost` (-1: none known), allowed whether any
-- examined credential was one the waiter may use.
-- in_group: whether group ('' for all) holds credential id; asked of
-- Redis once per call and pair (groups change only in join.lua).
local group_cache = {}
local function in_group(group, id)
  if group == '' then
    return true
  end
  local k = group .. '|' .. id
  local v = group_cache[k]
  if v == nil then
    v = redis.call('SISMEMBER', k_grp(group), id) == 1
    group_cache[k] = v
  end
  return v
end

-- pick(now, cost, group, scope, reserved): reserved (nil: none) holds
-- the credentials waiters ahead are waiting for; they are passed over.
-- When nothing fits, the fourth result lists the credentials this waiter
-- waits for in what it shares with others (a full unscoped limit, not
-- only its scope's): the waiters behind it may not take them.
-- GROUP_DIRECT: a group of at most this many credentials is looked up
-- directly in ready (ZMSCORE) when none of the least recently used ready
-- credentials is the group's; a larger group pages through ready.
local GROUP_DIRECT = 64
local GROUP_PAGE = 32
local GROUP_SCAN = 512

-- candidates: the usable entries of zr (ready: units; ar:<a>: an
-- account's keys) a waiter of group looks at, least recently used first:
-- the first CANDIDATES of zr, unless none of them is the group's (the
-- other groups' idle keys would hide the group's forever); then the
-- group's own entries of zr, found directly for a small group (its
-- members in zr: members_of() lists them), else by paging through zr (at
-- most GROUP_SCAN). The work is bounded by the group's size or GROUP_SCAN,
-- never the number of groups.
local function candidates(group, zr, members_of)
  zr = zr or K_READY
  local cands = redis.call('ZRANGE', zr, 0, CANDIDATES - 1)
  if group == '' or #cands < CANDIDATES then
    return cands
  end
  for _, id in ipairs(cands) do
    if in_group(group, id) then
      return cands
    end
  end
  local out = {}
  local ids = nil
  if members_of then
    ids = members_of()
  elseif redis.call('SCARD', k_grp(group)) <= GROUP_DIRECT then
    ids = redis.call('SMEMBERS', k_grp(group))
  end
  if ids then
    if #ids == 0 then
      return out
    end
    local scores = redis.call('ZMSCORE', zr, unpack(ids))
    local found = {}
    for i, id in ipairs(ids) do
      if scores[i] then
        found[#found + 1] = {id, tonumber(scores[i])}
      end
    end
    table.sort(found, function(a, b)
      return a[2] < b[2]
    end)
    for i = 1, math.min(#found, CANDIDATES) do
      out[i] = found[i][1]
      group_cache[group .. '|' .. found[i][1]] = true
    end
    return out
  end
  for off = CANDIDATES, GROUP_SCAN - 1, GROUP_PAGE do
    local page = redis.call('ZRANGE', zr, off, off + GROUP_PAGE - 1)
    for _, id in ipairs(page) do
      if in_group(group, id) then
        out[#out + 1] = id
        if #out >= CANDIDATES then
          return out
        end
      end
    end
    if #page < GROUP_PAGE then
      break
    end
  end
  return out
end

-- try_key: whether credential id can take the waiter's start now (its own
-- state and limits; its accounts were checked by the caller). Returns the
-- state when it can; else nil and the moment it can (-1 none known), and
-- whether it holds what later waiters would share (its unscoped limits
-- are short of the cost). A key that is not usable after all (its state
-- changed) is indexed again (keep_unit: its account's unit is the
-- caller's to index).
local function try_key(id, now, cost, scope, fit, keep_unit)
  local c = load(id)
  local t = -1
  if c then
    t = fit(id, c, now, cost, scope)
  end
  if t == now then
    return c
  end
  if t > now and (cost > 1 or scope ~= '' or reserve_now > 0) then
    -- ready for smaller costs, other scopes or an interactive start:
    -- stays ready
    return nil, t, scope == '' or fit(id, c, now, cost, '') > now
  elseif t ~= -2 then
    reindex(id, now, c, keep_unit) -- not usable after all (state changed)
  end
  return nil, -1, false
end

-- pick_in finds a key for a waiter in account unit a, whose chain has
-- room (checked by the caller): among the least recently used of its
-- usable keys, after promoting those whose moment has come. Returns the
-- key and its state, or nil, hol and the keys it holds (see pick).
local function pick_in(a, now, cost, group, scope, reserved)
  local moved = promote_keys(a, now) > 0
  local members = nil
  if group ~= '' then
    members = function()
      if redis.call('SCARD', k_ak(a)) <= GROUP_DIRECT then
        return redis.call('SINTER', k_ak(a), k_grp(group))
      end
      return nil
    end
  end
  local hol, shared = -1, {}
  local cands = candidates(group, k_ar(a), members)
  if #cands == 0 and group == '' then
    moved = true -- none of its keys is usable: the unit leaves ready
  end
  for _, id in ipairs(cands) do
    if in_group(group, id) and not (reserved and reserved[id]) then
      local c, t, holds = try_key(id, now, cost, scope, fit_at, true)
      if c then
        if moved then
          reindex_unit(a, now)
        end
        return id, c
      end
      if t < 0 then
        moved = true
      elseif hol < 0 or t < hol then
        hol = t
      end
      if holds then
        shared[#shared + 1] = id
      end
    end
  end
  if moved then
    reindex_unit(a, now)
  end
  return nil, hol, shared
end

local function pick(now, cost, group, scope, reserved)
  scope = scope or ''
  local cands = candidates(group)
  local hol, allowed = -1, false
  local shared = {}
  local function held_back(t, holds, id)
    if hol < 0 or t < hol then
      hol = t
    end
    if holds then
      shared[#shared + 1] = id
    end
  end
  for _, u in ipairs(cands) do
    if in_group(group, u) and not (reserved and reserved[u]) then
      allowed = true
      if is_acct(u) then
        -- An account: its chain first, then one of its keys.
        local ca = load(u)
        local ct = -2
        if ca then
          ct = chain_fit(u, now, cost, scope)
        end
        if ct == now then
          local id, c, keys = pick_in(u, now, cost, group, scope, reserved)
          if id then
            return id, c
          end
          if c > now then
            held_back(c, false)
          end
          for _, k in ipairs(keys) do
            shared[#shared + 1] = k
          end
        elseif ct > now and (cost > 1 or scope ~= '' or reserve_now > 0) then
          held_back(ct, scope == '' or chain_fit(u, now, cost, '') > now, u)
        elseif ct ~= -2 then
          reindex_unit(u, now, true) -- not usable after all (state changed)
        end
      else
        local c, t, holds = try_key(u, now, cost, scope, fit_at)
        if c then
          return u, c
        end
        if t > now then
          held_back(t, holds, u)
        end
      end
    end
  end
  return nil, hol, allowed or #cands == 0, shared
end

-- grant_reply encodes a grant for the step's reply in one string, which
-- the client reads with one allocation instead of seven:
-- wid|id|token|expiry_us|cost|granted_us|owner (the owner last: it may
-- hold '|'; IDs and wids never do). A lost grant is 'wid|' (lost_reply:
-- no ID).
local function grant_reply(wid, id, token, exp, cost, at, owner)
  return wid .. '|' .. id .. '|' .. token .. '|' .. exp .. '|' .. cost .. '|' .. at .. '|' .. owner
end

local function lost_reply(wid)
  return wid .. '|'
end

-- never_fits_reply: the reply for waiter wid whose cost no credential it
-- may use can ever take (cost_verdict's max, by and dis):
-- 'wid|!max|dis|by'. In gr:<inst>, the same without 'wid|'.
local function never_fits_reply(wid, max, by, dis)
  return wid .. '|!' .. max .. '|' .. dis .. '|' .. by
end

-- serve hands freed capacity to the longest-waiting waiters, one grant
-- per waiter, in the fleet's order (priority, then arrival). It walks
-- waitq, which holds the first waiter of each class (a key group and
-- scope; first come, first served within a class), so that a class whose
-- first waiter cannot be served costs one look however many waiters it
-- holds; the next waiter of a class served takes its place in the walk.
-- A waiter gets a lease of lease_ttl (the calling handle's lease TTL; an
-- operator's action passes the short claim TTL). One of the calling
-- instance is returned in the reply; one of another instance is recorded
-- in gr:<inst> and sent whole in one message per instance on its channel
-- ('g', then each grant as its length in bytes, ':' and grant_reply),
-- which is enough for that instance to start on it (a waiter whose cost
-- never fits: 'g' alone, the answer in gr). A
-- waiter that cannot be served holds back only what it shares with the
-- waiters behind it (no head-of-line blocking across classes): its class
-- and the credentials it waits for in their unscoped limits (so that a
-- large cost is not starved by smaller ones). A waiter of another class
-- may take any other credential, such as one only the first waiter's
-- scope has used up, or one of another group. A waiter whose cost no
-- usable credential it may use can ever take (it fits only disabled
-- ones) leaves the queue with that answer and holds nothing back; an
-- older version's waiter, which could not read the answer, is passed
-- over. Dead instances' waiters are dropped on the way.
--
-- The walk examines at most max_grants + SCAN_MAX entries in order. When
-- more remain, it examines ROT_MAX more from where the previous such walk
-- left off (K_WROT), coming round to the start after the end; until it
-- has come round it asks for the next step ROT_NEXT_US later (in hol),
-- so that with more blocked classes than the bound every class is still
-- examined within a few steps, even when nothing else happens. What those
-- later classes take is what the ones ahead could not use at that
-- moment; that the ones between were examined a step or two before is
-- the price of a step whose cost does not grow with the number of
-- classes.
-- queue_empty: the caller knows nobody waits. Returns the grants of the
-- caller, hol (see pick; or when the rotation goes on) and whether
-- anybody was waiting.
local function serve(now, caller, lease_ttl, max_grants, queue_empty)
  local mine = {}
  local notify, answered = {}, {} -- by instance: its grants; whether it has an answer
  local served, scanned, idx = 0, 0, 0
  local hol = -1
  if queue_empty or redis.call('ZCARD', K_WAITQ) == 0 then
    return mine, hol, false
  end
  if redis.call('ZCARD', K_READY) == 0 then
    return mine, hol, true -- a saturated pool: nothing to hand out
  end
  local blocked, reserved = {}, {}
  -- visit examines entry e of waitq. It returns true when e stays where
  -- it was, false when it left (the entry after it now has its rank).
  local function visit(e, score)
    local wid, inst, cost, group, owner, scope, class, head = parse_waiter(e)
    local m = e
    if head then
      m = member_of(e)
    end
    if inst ~= caller and not alive(inst, now) then
      unqueue(m) -- also when an older version reaped its other entries
      reap(inst)
      return false
    end
    if blocked[class] then
      return true -- an older version's waiter behind one of its class
    end
    reserve_now = reserve_for(math.floor((tonumber(score) or 0) / PRIO_SPAN))
    local id, c, allowed, shared = pick(now, cost, group, scope, reserved)
    reserve_now = 0
    if id then
      local token, exp = grant(id, c, now, owner, cost, lease_ttl, scope)
      unqueue(m)
      redis.call('SREM', k_pw(inst), m)
      served = served + 1
      local reply = grant_reply(wid, id, token, n2s(exp), n2s(cost), n2s(now), owner)
      if inst == caller then
        mine[#mine + 1] = reply
      else
        redis.call('HSET', k_gr(inst), wid, id .. '|' .. token .. '|' .. n2s(now) .. '|' .. n2s(cost) .. '|' .. owner)
        notify[inst] = (notify[inst] or '') .. #reply .. ':' .. reply
      end
      return false
    end
    if not allowed then
      return true
    end
    -- pick's second result: when its cost fits (-1: unknown).
    if c < 0 and cost > 1 then
      -- No credential examined ever takes it, or none is ready: does any
      -- usable one? (A disable or a limit change may have left none.)
      local v, max, by, dis = cost_verdict(group, scope, cost)
      if v == 'over' then
        if not head then
          return true
        end
        unqueue(m)
        redis.call('SREM', k_pw(inst), m)
        if inst == caller then
          mine[#mine + 1] = never_fits_reply(wid, max, by, dis)
        else
          redis.call('HSET', k_gr(inst), wid, '!' .. max .. '|' .. dis .. '|' .. by)
          answered[inst] = true
        end
        return false
      end
    end
    -- The timer comes at the earliest of the blocked waiters'.
    if c > 0 and (hol < 0 or c < hol) then
      hol = c
    end
    blocked[class] = true
    for _, k in ipairs(shared) do
      reserved[k] = true
    end
    return true
  end

  local last, ended = nil, false
  while served < max_grants and scanned < max_grants + SCAN_MAX do
    local w = redis.call('ZRANGE', K_WAITQ, idx, idx, 'WITHSCORES')
    if #w == 0 then
      ended = true
      break
    end
    scanned = scanned + 1
    last = w[2]
    if visit(w[1], w[2]) then
      idx = idx + 1
    end
  end
  if not ended and served < max_grants then
    -- The bound came before the end of the queue: the rotation.
    local from = tonumber(last)
    local cur = tonumber(redis.call('GET', K_WROT) or '')
    if cur and cur > from then
      from = cur
    end
    local es = redis.call('ZRANGEBYSCORE', K_WAITQ, '(' .. n2s(from), '+inf', 'WITHSCORES', 'LIMIT', 0, ROT_MAX)
    local upto, seen = nil, 0
    for j = 1, #es, 2 do
      if served >= max_grants then
        break
      end
      visit(es[j], es[j + 1])
      upto, seen = es[j + 1], seen + 2
    end
    if #es < 2 * ROT_MAX and seen == #es then
      redis.call('DEL', K_WROT) -- come round: the next one starts after the walk
    else
      if upto then
        redis.call('SET', K_WROT, upto)
      end
      local nxt = now + ROT_NEXT_US
      if hol < 0 or nxt < hol then
        hol = nxt
      end
    end
  end
  for inst, grants in pairs(notify) do
    redis.call('PUBLISH', ch_of(inst), 'g' .. grants)
  end
  for inst in pairs(answered) do
    redis.call('PUBLISH', ch_of(inst), 'g')
  end
  return mine, hol, true
end

-- arm_timer makes sure one live instance runs a step when the next timed
-- event comes (a rest, lease or window ending, a blocked waiter's cost
-- fitting, or serve's rotation going on: hol); waited says whether serve
-- found anybody waiting. It returns the microseconds until then when the
-- caller is that instance, else -1. The head of waitq (the fleet's first
-- waiter) names the instance that takes the duty when nobody alive has
-- it.
local function arm_timer(now, caller, hol, waited)
  if not waited then
    -- Nobody waited when this step served: no timer is needed. One left
    -- from before only makes its owner run one step more.
    return -1
  end
  local head = redis.call('ZRANGE', K_WAITQ, 0, 0)
  if #head == 0 then
    redis.call('DEL', K_TIMER)
    return -1
  end
  local nxt = -1
  local s = redis.call('ZRANGE', K_SCHED, 0, 0, 'WITHSCORES')
  if #s > 0 then
    nxt = tonumber(s[2])
  end
  if hol > 0 and (nxt < 0 or hol < nxt) then
    nxt = hol
  end
  if nxt < 0 then
    redis.call('DEL', K_TIMER)
    return -1
  end
  local cur = redis.call('HMGET', K_TIMER, 'at', 'inst')
  local owner = cur[2]
  if not owner or (owner ~= caller and not alive(owner, now)) then
    local _, hinst = parse_waiter(head[1])
    owner = hinst
    if owner ~= caller and caller ~= '' and not alive(owner, now) then
      owner = caller -- the head's process is gone: the caller is alive
    end
  end
  local at = n2s(nxt)
  if cur[1] ~= at or cur[2] ~= owner then
    redis.call('HSET', K_TIMER, 'at', at, 'inst', owner)
    -- The owner hears of a new owner or an earlier time; a later time it
    -- learns when its timer fires early (its step's reply re-arms it).
    if owner ~= caller and (cur[2] ~= owner or nxt < (tonumber(cur[1] or '') or math.huge)) then
      redis.call('PUBLISH', ch_of(owner), 't' .. n2s(math.max(nxt - now, 0)))
    end
  end
  if owner == caller then
    return math.max(nxt - now, 0)
  end
  return -1
end
