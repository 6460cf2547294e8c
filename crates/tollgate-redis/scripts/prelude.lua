-- tollgate: what every algorithm shares. The Rust side joins this file, the
-- files of the algorithms a policy uses, and check.lua into one script.
--
-- Times are whole microseconds. Redis runs Lua 5.1, whose numbers are
-- doubles: integers up to 2^53 are exact, and microseconds since 1970 stay
-- far below that (2^53 µs is year 2255). Nanoseconds would not fit.

local NEVER = -1
-- A limit no count reaches: what an algorithm's `force` evaluates against.
local UNBOUNDED = 4503599627370496 -- 2^52
local floor = math.floor
local max = math.max
local min = math.min

-- Each algorithm registers itself here under the code the Rust side sends:
-- load(key) -> state, evaluate(state, now, cost, p) -> decision, admission,
-- commit(key, admission, now, p, ttl_ms). For the local-first store
-- (share.lua), optionally: force(state, now, cost, p) -> decision, admission,
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
-- replenish_after.
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

-- A state kept as one integer string (GCRA, leaky bucket).
local function load_number(key)
  local value = redis.call('GET', key)
  return (value and tonumber(value)) or 0
end

-- A state kept as integers separated by spaces; a missing or unreadable
-- value is the state at rest.
local function load_numbers(key, pattern)
  local value = redis.call('GET', key)
  if not value then
    return nil
  end
  return { string.match(value, pattern) }
end

local function store(key, value, ttl_ms)
  redis.call('SET', key, value, 'PX', ttl_ms)
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
    return tonumber(arg)
  end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- The first `n` limits, their arguments from ARGV[first] on (five each: the
-- algorithm's name, four parameters), each with its key and loaded state;
-- or nil and an error reply for an algorithm no file registered.
local function load_limits(n, first)
  local limits = {}
  for i = 1, n do
    local base = first + 5 * (i - 1)
    local algorithm = ALGORITHMS[ARGV[base]]
    if not algorithm then
      return nil, redis.error_reply('tollgate: unknown algorithm ' .. tostring(ARGV[base]))
    end
    local p = {
      tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]),
      tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4]),
    }
    limits[i] = { algorithm = algorithm, p = p, key = KEYS[i], state = algorithm.load(KEYS[i]) }
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

-- Writes a state's new value, keeping the key's expiry (a refund only
-- brings a state nearer rest).
local function restore(key, value)
  redis.call('SET', key, value, 'KEEPTTL')
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
