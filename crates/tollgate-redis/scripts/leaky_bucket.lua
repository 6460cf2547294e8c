-- The leaky bucket as a shaper: one request every interval, up to `burst`
-- waiting. The state is the moment the bucket's next slot is free.
-- p = { interval, tolerance (= (burst + 1) × interval − 1), burst }
ALGORITHMS.leaky = {
  load = load_number,

  evaluate = function(next_free, now, cost, p)
    local interval, tolerance, burst = p[1], p[2], p[3]
    local allowed, finish, before, after, retry =
      schedule(next_free, now, cost * interval, tolerance, 0)
    local ahead = allowed and after or before
    local remaining = max(burst - div_ceil(ahead, interval), 0)
    local wait = allowed and before or 0
    return decision(allowed, burst, remaining, ahead, retry, wait), finish
  end,

  commit = function(key, next_free, now, p, ttl_ms)
    store(key, int(next_free), ttl_ms)
  end,
}
