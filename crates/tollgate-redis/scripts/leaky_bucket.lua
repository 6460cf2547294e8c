-- The leaky bucket as a shaper: one request every interval, up to `burst`
-- waiting. The state is the moment the bucket's next slot is free.
-- p = { interval, tolerance (= (burst + 1) × interval − 1), burst }
ALGORITHMS.leaky_bucket = {
  -- A debt shows as how far the schedule is ahead (see `units_used`).
  schedule = true,
  load = load_number,

  evaluate = function(next_free, now, cost, p)
    local interval, tolerance, burst = p[1], p[2], p[3]
    local allowed, finish, before, after, retry =
      schedule(next_free, now, cost * interval, tolerance, 0)
    local ahead = allowed and after or before
    -- Requests whose wait is under burst × interval pass: the next one
    -- would wait `ahead`. Whole once that is under one interval (as in
    -- tollgate-core's leaky_bucket.rs).
    local remaining = max(burst - div_floor(ahead, interval), 0)
    local whole = max(ahead + 1 - interval, 0)
    local wait = allowed and before or 0
    local replenish = replenish_after(whole, remaining, burst, interval)
    return decision(allowed, burst, remaining, whole, retry, wait, replenish), finish
  end,

  commit = function(key, next_free, now, p, ttl_ms)
    -- Kept until the queue is empty, not only until whole: the next
    -- request's slot depends on it until then.
    store(key, int(next_free), floor(max(next_free - now, 0) / 1000) + 1)
  end,

  -- Charges `cost` whatever the state (see gcra.lua).
  debit = function(next_free, now, cost, p)
    local finish = max(next_free, now) + cost * p[1]
    return decision(true, p[3], 0, finish - now, 0, 0, 0), finish
  end,
}

-- As GCRA's (tollgate-core's leaky_bucket.rs): `reset` is the queue's end
-- less an interval but 1 µs.
ALGORITHMS.leaky_bucket.refund = function(key, next_free, now, at, cost, reset, p)
  local charge = cost * p[1]
  local mark = schedule_mark(at, charge, reset, p[1] - 1)
  local give = schedule_give(charge, mark, next_free, now)
  if give > 0 then
    restore(key, int(next_free - give))
  end
end
