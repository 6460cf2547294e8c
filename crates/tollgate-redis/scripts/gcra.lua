-- GCRA, and the token bucket with continuous refill (the same algorithm:
-- a bucket of `burst` tokens refilled one per interval).
-- p = { interval, tolerance (= interval × burst), burst, max_delay }
ALGORITHMS.gcra = {
  load = load_number,

  evaluate = function(tat, now, cost, p)
    local interval, tolerance, burst, delay = p[1], p[2], p[3], p[4]
    local allowed, finish, before, after, retry =
      schedule(tat, now, cost * interval, tolerance, delay)
    local ahead = allowed and after or before
    local remaining = div_floor(max(tolerance - ahead, 0), interval)
    local wait = allowed and max(after - tolerance, 0) or 0
    local replenish = replenish_after(ahead, remaining, burst, interval)
    return decision(allowed, burst, remaining, ahead, retry, wait, replenish), finish
  end,

  commit = function(key, tat, now, p, ttl_ms)
    store(key, int(tat), ttl_ms)
  end,

  -- Charges `cost` whatever the state (requests another instance already
  -- admitted on its own): the schedule moves on without a bound.
  force = function(tat, now, cost, p)
    local finish = max(tat, now) + cost * p[1]
    return decision(true, p[3], 0, finish - now, 0, 0, 0), finish
  end,
}
