-- The fixed window counter. Windows are aligned on multiples of the period
-- since 1970, so every instance agrees on where one starts.
-- p = { limit, period }; state "window count".
ALGORITHMS.fixed_window = {
  load = function(key)
    return load_numbers(key, '^(%d+) (%d+)$')
  end,

  evaluate = function(state, now, cost, p)
    local limit, period = p[1], p[2]
    local current = div_floor(now, period)
    local window, count = current, 0
    -- An older window counts for nothing; a later one (the clock went
    -- back) is kept, conservatively.
    if state and state[1] and tonumber(state[1]) >= current then
      window, count = tonumber(state[1]), tonumber(state[2])
    end
    local allowed = count + cost <= limit
    local after = allowed and count + cost or count
    local until_next = max((window + 1) * period - now, 0)
    local retry = 0
    if not allowed then
      retry = (cost > limit) and NEVER or until_next
    end
    local reset = (after == 0) and 0 or until_next
    -- The whole count comes back at once, at the window's end.
    return decision(allowed, limit, limit - after, reset, retry, 0, reset),
      { window, after }
  end,

  commit = function(key, state, now, p, ttl_ms)
    store(key, int(state[1]) .. ' ' .. int(state[2]), ttl_ms)
  end,
}

-- Charges `cost` whatever the state (see share.lua).
ALGORITHMS.fixed_window.debit = function(state, now, cost, p)
  return ALGORITHMS.fixed_window.evaluate(state, now, cost, { UNBOUNDED, p[2] })
end

-- Capacity reserved in a window is that window's: spent later, it would
-- count in a window that never charged it.
ALGORITHMS.fixed_window.lapse = function(now, p)
  return (div_floor(now, p[2]) + 1) * p[2] - now
end

-- A charge counts in its own window only: given back there, nothing later.
ALGORITHMS.fixed_window.refund = function(key, state, now, at, cost, reset, p)
  if state and state[1] and tonumber(state[1]) == div_floor(at, p[2]) then
    local count = tonumber(state[2])
    restore(key, state[1] .. ' ' .. int(count - min(cost, count)))
  end
end
