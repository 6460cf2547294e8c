-- tollgate: what every algorithm shares. The Rust side joins this file, the
-- files of the algorithms a policy uses, and check.lua into one script.
--
-- Times are whole microseconds. Redis runs Lua 5.1, whose numbers are
-- doubles: integers up to 2^53 are exact, and microseconds since 1970 stay
-- far below that (2^53 µs is year 2255). Nanoseconds would not fit.

local NEVER = -1
-- A limit no count reaches: what an algorithm's `debit` evaluates against.
local UNBOUNDED = 4503599627370496 -- 2^52
local floor = math.floor
local max = math.max
local min = math.min

-- Each algorithm registers itself here under the code the Rust side sends:
-- load(key) -> state, evaluate(state, now, cost, p) -> decision, admission,
-- commit(key, admission, now, p, ttl_ms). For the local-first store
-- (share.lua), optionally: debit(state, now, cost, p) -> decision, admission,
-- a charge taken whatever the state (counts other instances already
-- admitted); lapse(now, p) -> µs, how long capacity reserved now may be
-- spent (absent: as long as the instance holds it, see `held` below); and
-- held(state, held_key, now, p) -> state, the state with what instances
-- hold taken into account (see gcra.lua; absent: nothing to take).
local ALGORITHMS = {}

-- ⌊a / b⌋ for non-negative integers, corrected for the rounding of the
-- floating-point division.
local function div_floor(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function div_ceil(a, b)
  return div_floor(a + b - 1, b)
end

-- An integer as Redis stores it: every digit, never an exponent.
local function int(x)
  return string.format('%.0f', x)
end

-- A decision as the Rust side reads it: allowed (1/0), limit, remaining,
-- reset_after, retry_after (NEVER when the cost can never pass), wait,
-- replenish_after. A window algorithm's `remaining` goes below 0 by what
-- its count is past the limit (a debt), which the Rust side reads as
-- remaining 0 and that debt (Decision::over_limit), so that a plan
-- change carries it.
local function decision(allowed, limit, remaining, reset, retry, wait, replenish)
  return { allowed and 1 or 0, limit, remaining, reset, retry, wait, replenish }
end

-- How long until a limit that gives one unit back every `interval` next
-- grows, its state `ahead` of now with `remaining` of `capacity` left (as
-- in tollgate-core's schedule.rs). 0 when the limit is whole.
local function replenish_after(ahead, remaining, capacity, interval)
  if remaining >= capacity then
    return 0
  end
  return max(ahead - (capacity - remaining - 1) * interval, 0)
end

-- Virtual scheduling, as in tollgate-core: a request of `increment` moves
-- the key's "theoretical arrival time" to max(tat, now) + increment, and
-- passes iff that lands at most tolerance + delay ahead of now.
local function schedule(tat, now, increment, tolerance, delay)
  local start = max(tat, now)
  local finish = start + increment
  local ahead_after = finish - now
  local fits = increment <= tolerance
  local allowed = fits and ahead_after <= tolerance + delay
  local retry
  if allowed then
    retry = 0
  elseif not fits then
    retry = NEVER
  else
    retry = ahead_after - tolerance - delay
  end
  return allowed, finish, start - now, ahead_after, retry
end

-- A stored state says what it was written under: the four parameters of
-- its limit, "|p1,p2,p3,p4", after a string state, in the field `q` of a
-- hash, after a sorted set's total member's time. A process
-- configured with another quota reads it as the same usage (`read_as`
-- below). A state without them was written by a version before this
-- one: it is read under the parameters of the call that reads it, as
-- that version read it, and says them from its next write.
--
-- WRITTEN[key]: the parameters the state loaded from `key` says, with
-- the '|' before them (nil: none); WRITING[key]: those its writes record,
-- the call's, in the same form.
local WRITTEN = {}
local WRITING = {}

-- The parameters of the limit whose arguments start at ARGV[base], as
-- its states say them: the Rust side's digits, joined (no formatting
-- per call).
local function params_text(base)
  return '|' .. ARGV[base + 1] .. ',' .. ARGV[base + 2] .. ',' .. ARGV[base + 3] .. ','
    .. ARGV[base + 4]
end

-- The parameters `text` ('|' and four numbers) says, as `load_limits`
-- reads parameters (a larger one than UNBOUNDED read as UNBOUNDED), or nil.
local function params_of(text)
  local a, b, c, d = string.match(text or '', '^|(%d+),(%d+),(%d+),(%d+)$')
  if not d then
    return nil
  end
  return { min(tonumber(a), UNBOUNDED), min(tonumber(b), UNBOUNDED),
    min(tonumber(c), UNBOUNDED), min(tonumber(d), UNBOUNDED) }
end

-- A string state's value as stored: the state, then what it was written
-- under.
local function with_params(key, value)
  local params = WRITING[key]
  if params then
    return value .. params
  end
  return value
end

-- A string state's value read: the state alone, noting what it says it
-- was written under.
local function without_params(key, value)
  -- The common case first, with no string made but the state's: the
  -- value ends with the call's own parameters.
  local own = WRITING[key]
  if own then
    local at = #value - #own + 1
    if at > 1 and string.find(value, own, at, true) == at then
      WRITTEN[key] = own
      return string.sub(value, 1, at - 1)
    end
  end
  local bar = string.find(value, '|', 1, true)
  if not bar then
    WRITTEN[key] = nil
    return value
  end
  WRITTEN[key] = string.sub(value, bar)
  return string.sub(value, 1, bar - 1)
end

-- A state kept as one integer string (GCRA, leaky bucket).
local function load_number(key)
  local value = redis.call('GET', key)
  if not value then
    WRITTEN[key] = nil
    return 0
  end
  return tonumber(without_params(key, value)) or 0
end

-- A state kept as integers separated by spaces; a missing or unreadable
-- value is the state at rest.
local function load_numbers(key, pattern)
  local value = redis.call('GET', key)
  if not value then
    WRITTEN[key] = nil
    return nil
  end
  return { string.match(without_params(key, value), pattern) }
end

-- The longest expiry a script sets, in ms (about 142,000 years): far
-- beyond any limit's window, and far below what PEXPIRE and SET PX accept
-- (now + ttl must fit in 63 bits), so that setting an expiry never fails
-- after a write it was meant to follow.
local MAX_TTL_MS = 4503599627370496 -- 2^52

-- A time to live as Redis reads it: a whole number of ms from 1 to
-- MAX_TTL_MS, every digit written out (Lua would write a large number
-- with an exponent, which Redis refuses).
local function ttl(ms)
  if ms ~= ms then -- NaN
    ms = MAX_TTL_MS
  end
  return int(min(max(floor(ms), 1), MAX_TTL_MS))
end

-- The error a script returns, before writing anything, for an argument it
-- cannot use. The Rust side reads the TOLLGATEARG code as a configuration
-- error.
local function bad_argument(index, what, expected)
  return redis.error_reply('TOLLGATEARG ARGV[' .. index .. '] (' .. what .. ') must be '
    .. expected .. ', not ' .. string.format('%q', tostring(ARGV[index])))
end

-- ARGV[index] as a whole number from `lo` to `hi`, or nil. (tonumber
-- also reads "nan" and "inf": both fail here.)
local function whole(index, lo, hi)
  local value = tonumber(ARGV[index])
  if value and value == floor(value) and value >= lo and value <= hi then
    return value
  end
  return nil
end

-- The error for ARGV[index], not a whole number from `lo` to `hi`.
local function not_whole(index, what, lo, hi)
  return bad_argument(index, what, 'a whole number from ' .. int(lo) .. ' to ' .. int(hi))
end

-- ARGV[index] as a whole number from `lo` to `hi`; else nil and the error
-- to return.
local function whole_arg(index, what, lo, hi)
  local value = whole(index, lo, hi)
  if value then
    return value
  end
  return nil, not_whole(index, what, lo, hi)
end

-- The same, where "" stands for none (returned as `default`).
local function optional_whole_arg(index, what, lo, hi, default)
  if ARGV[index] == '' then
    return default
  end
  return whole_arg(index, what, lo, hi)
end

-- The largest count, cost or time an argument may carry: 2^53, below which
-- Lua's doubles hold every integer.
local MAX_ARG = 9007199254740992
-- Above every u64 the Rust side sends: for arguments any size of which the
-- script can take (a bound it only compares with).
local ANY_U64 = 18446744073709551616 -- 2^64

local function store(key, value, ttl_ms)
  redis.call('SET', key, with_params(key, value), 'PX', ttl(ttl_ms))
end

-- Charges `limit` what its last evaluation admitted, keeping the key until
-- its state is back at rest (reset_after), rounded up.
local function commit_limit(limit, now)
  local ttl_ms = floor(limit.decision[4] / 1000) + 1
  limit.algorithm.commit(limit.key, limit.admission, now, limit.p, ttl_ms)
end

-- A script's reply: `out` (the values before the decisions), then the seven
-- integers of every limit's decision, then the time the script ran at.
local function reply_with_decisions(out, limits, now)
  for _, limit in ipairs(limits) do
    for _, field in ipairs(limit.decision) do
      out[#out + 1] = field
    end
  end
  out[#out + 1] = now
  return out
end

-- The time to decide at, in µs: `arg` when tests set it, else the server's.
local function time_now(arg)
  if arg ~= '' then
    return tonumber(arg) -- checked by `check_time`
  end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- ARGV[index], the test clock ("" in production: the server's clock), and
-- whether it is usable; nil and the error to return otherwise.
local function check_time(index)
  local _, failure = optional_whole_arg(index, 'the test clock in µs', 0, MAX_ARG, 0)
  if failure then
    return nil, failure
  end
  return true
end

-- ARGV[1], the cost, and ARGV[2], the test clock, as every script that
-- charges takes them, checked: the cost, or nil and the error reply.
local function cost_and_clock()
  local cost, failure = whole_arg(1, 'the cost', 0, MAX_ARG)
  if not cost then
    return nil, failure
  end
  local _, bad_time = check_time(2)
  if bad_time then
    return nil, bad_time
  end
  return cost
end

-- The units a decision under `p` says are used, as tollgate-core's
-- `used_of` reads them: the limit less what remains (below 0 for a
-- window's debt), and for a schedule (GCRA, the leaky bucket) with nothing
-- left, how far it is ahead at its rate (a debt), rounded up.
local function units_used(algorithm, d, p)
  local used = d[2] - d[3]
  if algorithm.schedule and d[3] <= 0 then
    used = max(used, div_ceil(d[4], p[1]))
  end
  return max(used, 0)
end

-- The state at `key`, written under `written`, as the same usage under
-- `p` at `now` (tollgate-core's `Limiter::read_as`): the units it used
-- under `written`, debit and all, charged to a fresh state of `p`, which
-- is written at once (so the move is made once, and its units come back
-- at `p`'s pace).
local function read_as(algorithm, key, state, written, now, p)
  local used = units_used(algorithm, algorithm.evaluate(state, now, 0, written), written)
  redis.call('DEL', key)
  local fresh = algorithm.load(key)
  if used <= 0 then
    return fresh
  end
  local decision, admission = algorithm.debit(fresh, now, used, p)
  commit_limit({ algorithm = algorithm, key = key, p = p, decision = decision,
    admission = admission }, now)
  return algorithm.load(key)
end

-- The first `n` limits, their arguments from ARGV[first] on (five each: the
-- algorithm's name, four parameters), each with its key and its state
-- loaded, read at `now` under these parameters when it was written under
-- others (`read_as`); or nil and an error reply for an algorithm no file
-- registered.
local function load_limits(n, first, now)
  local limits = {}
  for i = 1, n do
    local base = first + 5 * (i - 1)
    local algorithm = ALGORITHMS[ARGV[base]]
    if not algorithm then
      return nil, redis.error_reply('tollgate: unknown algorithm ' .. tostring(ARGV[base]))
    end
    -- Four whole numbers, the first two (a limit or an interval, and a
    -- period or a tolerance) at least 1. The Rust side sends u64s: a
    -- larger one than UNBOUNDED only means "no bound" (a log's longest
    -- length), and is read as UNBOUNDED.
    local p = {}
    for j = 1, 4 do
      local lo = (j <= 2) and 1 or 0
      local value = whole(base + j, lo, ANY_U64)
      if not value then
        -- The error's words are put together only for an error: on every
        -- call, they cost the server about 2 to 4 µs (redis-benchmark, here).
        return nil, not_whole(base + j, 'parameter ' .. j .. ' of limit ' .. i, lo, ANY_U64)
      end
      p[j] = min(value, UNBOUNDED)
    end
    local key = KEYS[i]
    WRITING[key] = params_text(base)
    local state = algorithm.load(key)
    -- Parameters that do not read (written by hand?) say nothing: the
    -- state is read under the call's, as one that says none.
    local written = WRITTEN[key] ~= WRITING[key] and params_of(WRITTEN[key])
    if written then
      state = read_as(algorithm, key, state, written, now, p)
    end
    limits[i] = { algorithm = algorithm, p = p, key = key, state = state }
  end
  return limits
end

-- One instance's held count (see `held` in gcra.lua), "units expiry
-- report": units, expiry (µs) and the number of the reservation that
-- recorded it (0 when an older version wrote it); nil when unreadable.
local function parse_held(value)
  local units, expiry, report = string.match(value or '', '^(%d+) (%d+) ?(%d*)$')
  units, expiry = tonumber(units), tonumber(expiry)
  if not (units and expiry) then
    return nil
  end
  return units, expiry, tonumber(report) or 0
end

-- What a holder spent of a held count that has left the hash (see `held`
-- in gcra.lua), kept in its field `spent_field(holder)` as "spent report
-- units at": the count recorded by reservation number `report` held
-- `units` the holder had spent when it left at `at` (µs), replaced by the
-- holder's next reservation or expired; from then they were charged (not
-- refilled before `at`). The leading word keeps older versions of the
-- scripts, which read every field as a held count, from reading it as one.
local function spent_field(holder)
  return holder .. '/spent'
end

local function spent_value(report, units, at)
  return 'spent ' .. int(report) .. ' ' .. int(units) .. ' ' .. int(at)
end

-- A spent record's report, units and time; nil when `value` is none.
local function parse_spent(value)
  local report, units, at = string.match(value or '', '^spent (%d+) (%d+) (%d+)$')
  report, units, at = tonumber(report), tonumber(units), tonumber(at)
  if not (report and units and at) then
    return nil
  end
  return report, units, at
end

-- Writes a state's new value, keeping the key's expiry (a refund only
-- brings a state nearer rest).
local function restore(key, value)
  -- XX: a key that is gone stays gone (SET would make one without expiry).
  redis.call('SET', key, with_params(key, value), 'KEEPTTL', 'XX')
end

-- For a refund: how much of a schedule's charge of `cost` µs, which left
-- it at `mark` (µs), is still ahead of `now` in a state at `state`: at most
-- the cost, never before now (a full bucket stays full).
local function schedule_give(cost, mark, state, now)
  return max(min(cost, mark - now, state - now), 0)
end

-- Where a charge at `at` of `cost` µs left a schedule whose decision's
-- reset_after was `reset` (µs; negative: unknown) less `slack`: that, or
-- the earliest it can have been, `at` plus the cost.
local function schedule_mark(at, cost, reset, slack)
  local earliest = at + cost
  if reset < 0 then
    return earliest
  end
  return max(at + reset + slack, earliest)
end
