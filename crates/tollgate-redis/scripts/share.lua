-- The local-first store's calls: an instance reserves capacity to spend on
-- its own (exact mode), or reports what it admitted on its own and reads the
-- shared state (periodic mode), or gives back a charge it made on its own
-- (exact mode). Joined after the algorithms' files, like check.lua.
--
-- KEYS[i], i ≤ #limits: the state of limit i. Reserve and refund:
-- KEYS[#limits + i], what instances hold of limit i (see `held` in
-- gcra.lua). Sync: KEYS[#limits + 1], the instances' sequence numbers (any
-- key of the same hash tag); KEYS[#limits + 2], the shares instances were
-- given of the policy's limits (its first limit's state key, `~share`).
-- ARGV[1]: "reserve", "sync" or "refund".
-- ARGV[2]: "" to read the server's time; a number of µs only in tests.
-- ARGV[3]: reserve: the least worth granting (the cost of the request that
--          waits; 0 ahead of need: a fan-out share below one unit is then
--          none, not one); sync: the units this instance admitted since its last
--          sync; refund: the cost to give back.
-- ARGV[4]: reserve: the most this instance wants; sync: the instance's id;
--          refund: who holds (as a reservation's ARGV[6]).
-- ARGV[5]: reserve: the fan-out, a share of what remains (see below);
--          sync: the report's sequence number, increasing per instance;
--          refund: the number of the holder's last reservation sent before
--          the units were spent (their report, as ARGV[10]).
-- ARGV[6]: reserve: who holds (the instance, for one policy); refund: how
--          long ago (µs) the request was checked; sync: for how many µs
--          the share given now may be spent (the instance spends none of
--          it later; the others count it as spent until then).
-- ARGV[7]: reserve: the units it holds now, unspent (what it had less
--          what it spent since; the grant is added to it); sync: how many
--          instances share the limits (0: those with a share still live,
--          this one included).
-- ARGV[8]: reserve: for how many µs it will spend what it then holds (0:
--          it spends the grant at once and holds nothing); sync: the
--          least share worth giving (the cost of the request that waits;
--          0 when none does).
-- ARGV[9]: sync: what the instance may still spend of its last share
--          while this call is on its way (it decides meanwhile): counted
--          as its until the share given now replaces it; an idle sync's
--          (see ARGV[10]): what it holds, offered back.
-- ARGV[9]: reserve: the µs `want` was sized for (its rate × this long).
-- ARGV[10]: reserve: this reservation's number, increasing per instance
--          (recorded beside the units held: a refund names it); sync:
--          what the instance wants to spend until its next sync (its
--          recent rate; 0 with ARGV[8] 0: it was idle, and offers its
--          share back, see `give_share`).
-- ARGV[11 + 5(i−1) ...]: limit i's algorithm code, then four parameters.
-- Refund, then: ARGV[11 + 5 × #limits + (i−1)]: limit i's reset_after in
--          the admission, in µs; "" when unknown.
--
-- Returns three integers, then seven per limit (as check.lua), then the
-- time the script ran at:
--   reserve: granted (0 when even the least would not pass: the limits'
--            decisions are then for that least, at least 1, with their
--            retry times; or, ahead of need, when the share is none: the
--            decisions then allow, for a cost of 0),
--            the µs the grant may be spent for by the window limits (−1:
--            none has a lapse), the µs everything the instance holds may
--            be spent for by the limits that count held units (−1: none
--            does);
--   sync:    1 if the report was applied, 0 if it had been already (a
--            retried call), then the share given (what the instance may
--            admit until its next sync, out of what remains less what the
--            others may still spend of theirs: see `give_share`; an idle
--            sync's, what it keeps), then how many instances
--            hold a live share (this one included); the decisions read for
--            a cost of 0 (what remains now), each with, in its retry field,
--            its retry for a cost of 1 if that would be refused, and, in
--            its replenish field when it reads 0 (whole), its replenish
--            for a cost of 1;
--   refund:  the units taken off the holder's held count (of the first
--            limit that counts them; 0 if none), 0, 0; the decisions read
--            for a cost of 0 after the refund.

local op = ARGV[1]
if op ~= 'reserve' and op ~= 'sync' and op ~= 'refund' then
  return redis.error_reply('TOLLGATEARG unknown operation ' .. string.format('%q', tostring(op)))
end
-- Every number is checked before anything is written. The Rust side sends
-- u64s; ids (ARGV[4] of a sync, ARGV[6] of a reservation, ARGV[4] of a
-- refund) are only names, not numbers.
do
  local _, bad_time = check_time(2)
  if bad_time then
    return bad_time
  end
  local numbers
  if op == 'reserve' then
    numbers = { [3] = 'the least to grant', [4] = 'the most wanted', [5] = 'the fan-out',
      [7] = 'the units held', [8] = 'the hold in µs', [9] = 'the µs wanted for',
      [10] = 'the reservation number' }
  elseif op == 'sync' then
    numbers = { [3] = 'the units spent', [5] = 'the sequence number',
      [6] = 'the share\'s life in µs', [7] = 'the instances', [8] = 'the least share',
      [9] = 'the share left', [10] = 'the share wanted' }
  else
    numbers = { [3] = 'the cost', [5] = 'the reservation number', [6] = 'the µs since the check' }
  end
  for index, what in pairs(numbers) do
    local _, failure = whole_arg(index, what, 0, ANY_U64)
    if failure then
      return failure
    end
  end
end
local now = time_now(ARGV[2])
local count = tonumber(ARGV[3])

-- A sync's last key is the sequence numbers'; a reservation's or a
-- refund's second half are the held units'.
local n = (op == 'sync') and #KEYS - 2 or #KEYS / 2
local limits, failure = load_limits(n, 11, now)
if not limits then
  return failure
end

-- Every limit's decision for `cost`, and whether all allow it.
local function evaluate_all(cost)
  local all = true
  for _, limit in ipairs(limits) do
    limit.decision, limit.admission = limit.algorithm.evaluate(limit.state, now, cost, limit.p)
    all = all and limit.decision[1] == 1
  end
  return all
end

local function commit_all()
  for _, limit in ipairs(limits) do
    commit_limit(limit, now)
  end
end

local function reply(a, b, c)
  return reply_with_decisions({ a, b, c }, limits, now)
end

-- A held count as the hash keeps it (see `held` in gcra.lua).
local function held_value(units, expiry, report)
  return int(units) .. ' ' .. int(expiry) .. ' ' .. int(report)
end

-- Records that `reporter` now holds `units` of each limit that counts held
-- units, until `expiry`, as reservation number `report`, of which `kept`
-- were in its last count (what it held unspent); drops the counts that
-- expired. What the reporter spent of its last count (the rest of it),
-- charged from now on, is recorded as spent (see `spent_field` in
-- prelude.lua), as are the expired counts: a refund of a unit spent from
-- a count that left gives it back whole from where the count left it, not
-- from when the request was checked (earlier, by the time the count was
-- held after it).
local function record_held(reporter, units, expiry, report, kept)
  for _, limit in ipairs(limits) do
    if limit.held_key then
      local last = limit.live[reporter]
      if last and last > kept and limit.reports[reporter] > 0 then
        limit.spent[reporter] = { report = limit.reports[reporter], units = last - kept, at = now }
      end
      redis.call('DEL', limit.held_key)
      for field, held in pairs(limit.live) do
        if field ~= reporter then
          redis.call('HSET', limit.held_key, field,
            held_value(held, limit.expiry[field], limit.reports[field]))
        end
      end
      for field, spent in pairs(limit.spent) do
        redis.call('HSET', limit.held_key, spent_field(field),
          spent_value(spent.report, spent.units, spent.at))
      end
      if units > 0 and expiry > now then
        redis.call('HSET', limit.held_key, reporter, held_value(units, expiry, report))
      end
      if redis.call('EXISTS', limit.held_key) == 1 then
        -- Kept while a count's floor can still matter: its expiry, then a
        -- whole refill.
        redis.call('PEXPIRE', limit.held_key, ttl(floor((expiry - now + limit.p[2]) / 1000) + 1000))
      end
    end
  end
end

-- Periodic mode: the share of what remains that `instance` may admit
-- until its next sync, and how many instances hold a live share. Every
-- other instance may still spend what it was given at its last sync (its
-- report of it comes with its next): that is taken off what remains first,
-- so that all shares together never exceed it (but for rounding up, less
-- than a unit per instance). Of the rest (`free`), when that leaves the
-- others room for what they want beyond what they hold, the instance gets
-- what it wants (its recent rate over two intervals, ARGV[10]), or its
-- part of `free` with room for one more instance if that is more (so that
-- an instance new to the key finds some); when it does not, its even part,
-- rounded up, never more than it wants; and at least the request that
-- waits if that much is free. Recorded in `shares` until it lapses, with,
-- apart, what it wants beyond the share given (the others leave that free
-- when they can).
--
-- An idle instance (it wants nothing and no request waits) offers back
-- what it holds (ARGV[9]; it spends none of it while the call is on its
-- way): it keeps at most half of what the others leave free, and none
-- that they want beyond what they hold, until its share lapses as it was
-- given; the rest returns to the others at once; holding nothing, it is
-- taken out of the shares.
local function give_share(shares, instance)
  local life, fixed, need = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
  local left, want = tonumber(ARGV[9]), tonumber(ARGV[10])
  local others, sharing, wanted, latest = 0, 1, 0, now + life
  local own = nil
  -- Each instance's field holds its units and expiry (as older versions
  -- wrote and read them); beside it, `<instance>~short`, what it wants
  -- beyond the share it was given (an older version drops that field as
  -- unreadable, and reads the rest as before).
  local shorts, live = {}, {}
  local entries = redis.call('HGETALL', shares)
  for i = 1, #entries, 2 do
    local field = entries[i]
    local holder = string.match(field, '^(.*)~short$')
    if holder then
      shorts[holder] = tonumber(entries[i + 1])
    else
      local units, expiry = string.match(entries[i + 1], '^(%d+) (%d+)$')
      units, expiry = tonumber(units), tonumber(expiry)
      if field == instance then
        own = expiry
      elseif units and expiry and expiry > now then
        others = others + units
        sharing = sharing + 1
        live[field] = true
        latest = max(latest, expiry)
      else
        redis.call('HDEL', shares, field, field .. '~short')
      end
    end
  end
  for holder, short in pairs(shorts) do
    if live[holder] then
      wanted = wanted + (short or 0)
    elseif holder ~= instance then
      redis.call('HDEL', shares, holder .. '~short')
    end
  end
  local remaining = nil
  for _, limit in ipairs(limits) do
    local left = limit.decision[3]
    if remaining == nil or left < remaining then
      remaining = left
    end
  end
  local free = max((remaining or 0) - others, 0)
  if want == 0 and need == 0 and left > 0 then
    -- Idle: it keeps at most half of what the others leave free, and
    -- none the others want (beyond what they hold), until its share
    -- lapses as it was given.
    local kept = min(left, floor(free / 2), max(free - wanted, 0))
    redis.call('HDEL', shares, instance .. '~short')
    if kept > 0 and own and own > now then
      redis.call('HSET', shares, instance, int(kept) .. ' ' .. int(own))
      redis.call('PEXPIRE', shares, ttl(floor((max(latest, own) - now) / 1000) + 1))
      return kept, sharing
    end
    redis.call('HDEL', shares, instance)
    return 0, sharing - 1
  end
  local share = 0
  if want + wanted <= free and (want > 0 or need > 0) then
    -- Room for every want: its own, and at least its part of what is
    -- free with room for one more instance (or among the instances set),
    -- as far as the others' wants leave it.
    local part = div_ceil(free, (fixed > 0) and fixed or sharing + 1)
    share = max(want, min(part, free - wanted))
  elseif want > 0 then
    share = min(want, div_ceil(free, (fixed > 0) and fixed or sharing))
  end
  if need > share and need <= free then
    share = need
  end
  -- What the instance may have outstanding until its next sync: the share,
  -- and anything it spent of its last one while this call was on its way
  -- (not reported yet, and at most what it had left then). An idle
  -- instance that holds nothing is taken out: what it held is free.
  local outstanding = max(share, left)
  if outstanding == 0 and want == 0 and need == 0 then
    redis.call('HDEL', shares, instance, instance .. '~short')
    return 0, sharing - 1
  end
  redis.call('HSET', shares, instance, int(outstanding) .. ' ' .. int(now + life))
  local short = max(want, need) - share
  if short > 0 then
    redis.call('HSET', shares, instance .. '~short', int(short))
  else
    redis.call('HDEL', shares, instance .. '~short')
  end
  -- Kept while a share in it lives.
  redis.call('PEXPIRE', shares, ttl(floor((latest - now) / 1000) + 1))
  return share, sharing
end

if op == 'reserve' then
  local need, want, fanout = count, tonumber(ARGV[4]), tonumber(ARGV[5])
  local reporter, held_now, hold = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
  local ahead = tonumber(ARGV[9])
  local report = tonumber(ARGV[10]) or 0
  -- Units of a window lapse at its end: no more than the instance spends
  -- at its rate before then (unspent, they would be lost to everyone).
  local lapse = NEVER
  for _, limit in ipairs(limits) do
    if limit.algorithm.lapse then
      local l = limit.algorithm.lapse(now, limit.p)
      if lapse == NEVER or l < lapse then
        lapse = l
      end
    end
  end
  if lapse ~= NEVER and ahead > 0 and lapse < ahead then
    want = max(need, div_ceil(want * lapse, ahead))
  end
  local any_held = false
  for i, limit in ipairs(limits) do
    if limit.algorithm.held then
      limit.held_key = KEYS[n + i]
      limit.state, limit.live, limit.expiry, limit.reports, limit.spent =
        limit.algorithm.held(limit.state, limit.held_key, now, limit.p)
      any_held = true
    end
  end
  -- A reservation ahead of need asks for 0: at least one unit must pass,
  -- but it gets only a share of what remains, which may be none.
  local least = max(need, 1)
  if not evaluate_all(least) then
    -- Nothing written: what instances hold stays as it was.
    return reply(0, 0, 0)
  end
  -- The most that would pass now, up to want × fanout: admission is
  -- monotone in the cost for every algorithm, so a bisection finds it.
  local low, high = least, max(want * fanout, least)
  while low < high do
    local middle = floor((low + high + 1) / 2)
    if evaluate_all(middle) then
      low = middle
    else
      high = middle - 1
    end
  end
  -- A share of what remains, so that other instances find some too; never
  -- less than the request that waits, never more than wanted.
  local granted = min(want, max(need, div_floor(low, fanout)))
  evaluate_all(granted)
  if granted > 0 then
    commit_all()
  else
    -- Ahead of need, and less than a unit is this instance's share: none
    -- is held back from the others (near the limit a request waits for
    -- its own reservation instead). The count of what the instance holds
    -- is still renewed under this reservation's number: what it spent
    -- since its last report is charged, as at every reservation.
    for _, limit in ipairs(limits) do
      if limit.held_key then
        commit_limit(limit, now)
      end
    end
  end
  if any_held then
    record_held(reporter, held_now + granted, now + hold, report, held_now)
  end
  return reply(granted, lapse, any_held and hold or NEVER)
end

if op == 'sync' then
  local sequences, instance, sequence = KEYS[#KEYS - 1], ARGV[4], tonumber(ARGV[5])
  local applied = 0
  local last = tonumber(redis.call('HGET', sequences, instance) or '0') or 0
  if count > 0 and sequence > last then
    local longest = 0
    for _, limit in ipairs(limits) do
      local d, admission = limit.algorithm.debit(limit.state, now, count, limit.p)
      local ttl_ms = floor(d[4] / 1000) + 1
      limit.algorithm.commit(limit.key, admission, now, limit.p, ttl_ms)
      limit.state = limit.algorithm.load(limit.key)
      longest = max(longest, ttl_ms)
    end
    redis.call('HSET', sequences, instance, int(sequence))
    -- Kept as long as the counts it guards, and then some: a report retried
    -- later than that finds nothing to count twice anyway.
    redis.call('PEXPIRE', sequences, ttl(max(longest, 60000)))
    applied = 1
  end
  -- Read for a cost of 0: what remains now, nothing taken off. A limit
  -- that would refuse one unit also says when one would pass (its retry
  -- for a cost of 1, in the retry field), which its figures at cost 0 do
  -- not tell for a key in debt (a window's estimate falling by one unit is
  -- not yet a unit free).
  --
  -- A limit that reads whole (nothing to come back: replenish 0) says
  -- instead, in its replenish field, when a unit spent now would be back
  -- (its replenish for a cost of 1): the instance spends from the reading
  -- and answers that as its `t`, never "whole" for a limit it spent.
  evaluate_all(0)
  for _, limit in ipairs(limits) do
    local one = limit.algorithm.evaluate(limit.state, now, 1, limit.p)
    if one[1] == 0 then
      limit.decision[5] = one[5]
    elseif limit.decision[7] == 0 then
      limit.decision[7] = one[7]
    end
  end
  local share, sharing = give_share(KEYS[#KEYS], instance)
  return reply(applied, share, sharing)
end

if op == 'refund' then
  local holder, report = ARGV[4], tonumber(ARGV[5]) or 0
  local at = max(now - (tonumber(ARGV[6]) or 0), 0)
  local taken = nil
  for i, limit in ipairs(limits) do
    local reset = tonumber(ARGV[10 + 5 * n + i]) or -1
    if limit.algorithm.held then
      limit.held_key = KEYS[n + i]
      -- Spent since the holder's reservation number `report` left, the
      -- units are in the count it recorded (held, so the bucket has not
      -- refilled them): taken off it, so that no later floor charges them
      -- again, and given back whole from the schedule (the count's floor
      -- kept them ahead of now until now, or until its expiry). A count
      -- another reservation recorded since does not hold them: the
      -- reservation charged them when it dropped the old count, from then
      -- on (the old count's floor kept them until it), and recorded them
      -- spent: they are given back whole from there, and taken off that
      -- record so that no later refund gives the same time back.
      local value = redis.call('HGET', limit.held_key, holder)
      local units, expiry, recorded = parse_held(value)
      if units and recorded == report and report > 0 and units > 0 then
        local lower = min(count, units)
        local mark = min(now, expiry) + units * limit.p[1]
        reset = max(reset, mark - at)
        redis.call('HSET', limit.held_key, holder, held_value(units - lower, expiry, recorded))
        taken = taken or lower
      elseif report > 0 then
        local field = spent_field(holder)
        local s_report, s_units, s_at = parse_spent(redis.call('HGET', limit.held_key, field))
        if s_report == report and s_units > 0 then
          local lower = min(count, s_units)
          reset = max(reset, s_at + s_units * limit.p[1] - at)
          if s_units > lower then
            redis.call('HSET', limit.held_key, field, spent_value(s_report, s_units - lower, s_at))
          else
            redis.call('HDEL', limit.held_key, field)
          end
        end
      end
    end
    limit.algorithm.refund(limit.key, limit.state, now, at, count, reset, limit.p)
  end
  -- What remains now, as a reservation would see it: the states after the
  -- refund, with what instances hold.
  for i, limit in ipairs(limits) do
    limit.state = limit.algorithm.load(limit.key)
    if limit.algorithm.held then
      limit.state = limit.algorithm.held(limit.state, KEYS[n + i], now, limit.p)
    end
  end
  evaluate_all(0)
  return reply(taken or 0, 0, 0)
end

return redis.error_reply('tollgate: unknown operation ' .. tostring(op))
