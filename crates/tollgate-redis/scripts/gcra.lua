-- GCRA, and the token bucket with continuous refill (the same algorithm:
-- a bucket of `burst` tokens refilled one per interval).
-- p = { interval, tolerance (= interval × burst), burst, max_delay }
ALGORITHMS.gcra = {
  -- A debt shows as how far the schedule is ahead (see `units_used`).
  schedule = true,
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

  -- Units reserved by instances (share.lua) and not yet reported spent
  -- are still in the bucket, held elsewhere: the bucket must not refill
  -- them too, or a unit held past its own refill would be spent on top of
  -- it. `held_key` is a hash, instance → "units expiry report" (report:
  -- the number of the reservation that recorded it; absent in counts an
  -- older version wrote); while Σ units = O, the TAT is at least
  -- t + O × interval (free ≤ burst − O). Each held count is applied up to
  -- its expiry (the instance spends nothing after it), then dropped.
  -- Returns the TAT with that floor, the counts still live (field →
  -- units, field → expiry, field → report), and what holders spent of
  -- counts that left (field → { report, units, at }: see `spent_field` in
  -- prelude.lua; an expired count leaves now, at its expiry; a record
  -- whose units' charge is all behind now is dropped), for share.lua to
  -- update.
  held = function(tat, held_key, now, p)
    local interval = p[1]
    local raw = redis.call('HGETALL', held_key)
    local entries, total, spent = {}, 0, {}
    -- Whether a block of `units` charged from `at` still reaches past now.
    local function ahead(units, at)
      return units > 0 and at + units * interval > now
    end
    for i = 1, #raw, 2 do
      local units, expiry, report = parse_held(raw[i + 1])
      if units then
        entries[#entries + 1] = { field = raw[i], units = units, expiry = expiry, report = report }
        total = total + units
      else
        local s_report, s_units, s_at = parse_spent(raw[i + 1])
        local holder = string.match(raw[i], '^(.*)/spent$')
        if s_report and holder and ahead(s_units, s_at) then
          spent[holder] = { report = s_report, units = s_units, at = s_at }
        end
      end
    end
    table.sort(entries, function(a, b) return a.expiry < b.expiry end)
    local live, expiries, reports = {}, {}, {}
    for _, e in ipairs(entries) do
      if e.expiry <= now then
        tat = max(tat, e.expiry + total * interval)
        total = total - e.units
        if e.report > 0 and ahead(e.units, e.expiry) then
          spent[e.field] = { report = e.report, units = e.units, at = e.expiry }
        end
      else
        live[e.field], expiries[e.field], reports[e.field] = e.units, e.expiry, e.report
      end
    end
    return max(tat, now + total * interval), live, expiries, reports, spent
  end,

  -- Charges `cost` whatever the state (requests another instance already
  -- admitted on its own): the schedule moves on without a bound.
  debit = function(tat, now, cost, p)
    local finish = max(tat, now) + cost * p[1]
    return decision(true, p[3], 0, finish - now, 0, 0, 0), finish
  end,
}

-- Gives back what is left of a charge of `cost` made at `at` (as
-- tollgate-core's gcra.rs): the charge's time still ahead of now comes off
-- the TAT.
ALGORITHMS.gcra.refund = function(key, tat, now, at, cost, reset, p)
  local charge = cost * p[1]
  local give = schedule_give(charge, schedule_mark(at, charge, reset, 0), tat, now)
  if give > 0 then
    restore(key, int(tat - give))
  end
end
