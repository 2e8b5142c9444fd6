-- GCRA (generic cell rate algorithm) as a library, shared by pkg/ratelimit's
-- GCRA limiter and pkg/creds' smooth limits. A bucket of `burst` cells is
-- refilled at one cell per `interval` (period / rate). The state is one
-- number, the theoretical arrival time (TAT): the moment the bucket would be
-- full again. All times are in one unit (microseconds) on one clock.

-- GCRA_EPS absorbs the rounding of a stored TAT (far below a microsecond),
-- so that an exact boundary does not come out one cell short.
local GCRA_EPS = 0.5

-- gcra_when returns the earliest moment (>= now) at which n cells can be
-- taken: now - (tat' + n*interval - burst*interval) >= 0, with tat' =
-- max(tat, now). n > burst never fits: then -1.
local function gcra_when(tat, now, interval, burst, n)
  if n > burst then
    return -1
  end
  if tat == nil or tat < now then
    tat = now
  end
  local at = tat + interval * n - interval * burst
  if at <= now + GCRA_EPS then
    return now
  end
  return at
end

-- gcra_take returns the TAT after n cells are taken at now (the caller
-- checked gcra_when first).
local function gcra_take(tat, now, interval, n)
  if tat == nil or tat < now then
    tat = now
  end
  return tat + interval * n
end

-- gcra_used returns how many of the burst's cells are in use at now.
local function gcra_used(tat, now, interval)
  if tat == nil or tat <= now then
    return 0
  end
  return math.ceil((tat - now) / interval - 1e-9)
end

-- gcra_restamp returns the TAT once the latest cell, taken earlier, is
-- counted as taken at `at` instead (when its request left, for a limit
-- enforced on arrivals): at least at + interval, so that the next cell
-- comes one interval after it. Never earlier than tat.
local function gcra_restamp(tat, at, interval)
  local t = at + interval
  if tat ~= nil and tat > t then
    return tat
  end
  return t
end
