-- The sliding window counter: the current window's count plus the previous
-- window's, weighted by how much of it the sliding window still covers.
-- p = { limit, period }; state "window previous current".
--
-- ⌊previous × (period − elapsed) / period⌋ is exact while limit × period
-- (in µs) stays below 2^53; beyond that the double's rounding can move an
-- estimate that lands exactly on an integer by one.

local function weighted(previous, elapsed, period)
  return div_floor(previous * (period - elapsed), period)
end

-- The first elapsed time in a window at which `previous` weighs at most
-- `budget`.
local function first_elapsed_within(previous, budget, period)
  if previous <= budget then
    return 0
  end
  local span = div_ceil((budget + 1) * period, previous)
  return max(period + 1 - span, 0)
end

ALGORITHMS.sliding_window = {
  load = function(key)
    return load_numbers(key, '^(%d+) (%d+) (%d+)$')
  end,

  evaluate = function(state, now, cost, p)
    local limit, period = p[1], p[2]
    local current = div_floor(now, period)
    local into = now - current * period
    local window, previous, count = current, 0, 0
    if state and state[1] then
      local w, prev, cur = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
      if w >= current then
        -- Same window, or the clock went back: keep the counts.
        window, previous, count = w, prev, cur
      elseif w + 1 == current then
        previous = cur
      end
    end
    local elapsed = (window == current) and into or 0
    local previous_weight = weighted(previous, elapsed, period)
    local estimate = count + previous_weight
    local allowed = estimate + cost <= limit
    local to_end = period - elapsed
    local after = allowed and count + cost or count
    -- Whole again once the current count, weighted in the next window, has
    -- fallen to nothing; else once the previous window's has.
    local reset
    if after > 0 then
      reset = to_end + first_elapsed_within(after, 0, period)
    else
      reset = max(first_elapsed_within(previous, 0, period) - elapsed, 0)
    end
    -- The estimate next falls when the previous window's weight drops; when
    -- that weighs nothing already, 1 µs into the next window.
    local replenish = 0
    if previous_weight > 0 then
      replenish = first_elapsed_within(previous, previous_weight - 1, period) - elapsed
    elseif after > 0 then
      replenish = to_end + first_elapsed_within(after, after - 1, period)
    end
    local retry = 0
    if not allowed then
      if cost > limit then
        retry = NEVER
      else
        local budget = limit - cost
        if count <= budget then
          -- The previous window is what blocks: wait for its weight to fall.
          retry = first_elapsed_within(previous, budget - count, period) - elapsed
        else
          -- Only the next window helps; there `count` is the weighted one.
          retry = to_end + first_elapsed_within(count, budget, period)
        end
      end
    end
    local used = estimate + (allowed and cost or 0)
    return decision(allowed, limit, limit - used, reset, retry, 0, replenish),
      { window, previous, after }
  end,

  commit = function(key, state, now, p, ttl_ms)
    store(key, int(state[1]) .. ' ' .. int(state[2]) .. ' ' .. int(state[3]), ttl_ms)
  end,
}

-- Charges `cost` whatever the state (see share.lua).
ALGORITHMS.sliding_window.debit = function(state, now, cost, p)
  return ALGORITHMS.sliding_window.evaluate(state, now, cost, { UNBOUNDED, p[2] })
end

-- Reserved in a window, counted whole in it: spent in the next, it would
-- weigh only in part there (see fixed_window.lua).
ALGORITHMS.sliding_window.lapse = function(now, p)
  return (div_floor(now, p[2]) + 1) * p[2] - now
end

-- A charge counts in its window, then weighted in the next: given back
-- from whichever of the state's two counts holds it.
ALGORITHMS.sliding_window.refund = function(key, state, now, at, cost, reset, p)
  if not (state and state[1]) then
    return
  end
  local window, previous, current = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
  local charged = div_floor(at, p[2])
  if window == charged then
    current = current - min(cost, current)
  elseif window == charged + 1 then
    previous = previous - min(cost, previous)
  else
    return
  end
  restore(key, int(window) .. ' ' .. int(previous) .. ' ' .. int(current))
end
