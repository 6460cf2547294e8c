-- The token bucket with interval refill: `limit` tokens added at once at
-- every multiple of the period, up to `burst`. (With continuous refill the
-- token bucket is GCRA; see gcra.lua.)
-- p = { limit, period, burst }; state "interval used".
ALGORITHMS.token_bucket = {
  load = function(key)
    return load_numbers(key, '^(%d+) (%d+)$')
  end,

  evaluate = function(state, now, cost, p)
    local limit, period, burst = p[1], p[2], p[3]
    local current = div_floor(now, period)
    local interval, used = current, 0
    if state and state[1] then
      local i, u = tonumber(state[1]), tonumber(state[2])
      if i >= current then
        interval, used = i, u
      else
        used = max(u - (current - i) * limit, 0)
      end
    end
    local available = max(burst - used, 0)
    local allowed = cost <= available
    local after = allowed and used + cost or used
    -- How long until `n` refills from now have happened.
    local function after_refills(n)
      return max((interval + n) * period - now, 0)
    end
    local retry = 0
    if not allowed then
      if cost > burst then
        retry = NEVER
      else
        -- Past a debt (more used than the bucket holds), all of it first.
        retry = after_refills(div_ceil(used + cost - burst, limit))
      end
    end
    local reset = after_refills(div_ceil(after, limit))
    -- Tokens come back only at boundaries, the next one first.
    local replenish = (after == 0) and 0 or after_refills(1)
    return decision(allowed, burst, burst - after, reset, retry, 0, replenish),
      { interval, after }
  end,

  commit = function(key, state, now, p, ttl_ms)
    store(key, int(state[1]) .. ' ' .. int(state[2]), ttl_ms)
  end,
}

-- Reserved before a refill, spent after it, a unit would be spent on top of
-- the tokens the refill brought back: a grant lapses at the next boundary.
ALGORITHMS.token_bucket.lapse = function(now, p)
  return (div_floor(now, p[2]) + 1) * p[2] - now
end

-- Charges `cost` whatever the state (see share.lua).
ALGORITHMS.token_bucket.debit = function(state, now, cost, p)
  return ALGORITHMS.token_bucket.evaluate(state, now, cost, { p[1], p[2], UNBOUNDED, p[4] })
end

-- Gives back what of a charge at `at` the refills since have not already
-- made good (tollgate-core's token_bucket.rs).
ALGORITHMS.token_bucket.refund = function(key, state, now, at, cost, reset, p)
  if not (state and state[1]) then
    return
  end
  local limit, period = p[1], p[2]
  local interval, used = tonumber(state[1]), tonumber(state[2])
  local current = max(div_floor(now, period), interval)
  local used_now = max(used - (current - interval) * limit, 0)
  local since = max(current - div_floor(at, period), 0)
  local still = max(cost - since * limit, 0)
  restore(key, int(current) .. ' ' .. int(used_now - min(still, used_now)))
end
