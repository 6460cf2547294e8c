-- The local-first store's calls: an instance reserves capacity to spend on
-- its own (exact mode), or reports what it admitted on its own and reads the
-- shared state (periodic mode). Joined after the algorithms' files, like
-- check.lua.
--
-- KEYS[i], i ≤ #limits: the state of limit i. Reserve: KEYS[#limits + i],
-- what instances hold of limit i (see `held` in gcra.lua). Sync:
-- KEYS[#limits + 1], the instances' sequence numbers (any key of the same
-- hash tag).
-- ARGV[1]: "reserve" or "sync".
-- ARGV[2]: "" to read the server's time; a number of µs only in tests.
-- ARGV[3]: reserve: the least worth granting (the cost of the request that
--          waits); sync: the units this instance admitted since its last
--          sync.
-- ARGV[4]: reserve: the most this instance wants; sync: the instance's id.
-- ARGV[5]: reserve: the fan-out, a share of what remains (see below);
--          sync: the report's sequence number, increasing per instance.
-- ARGV[6]: reserve: who holds (the instance, for one policy).
-- ARGV[7]: reserve: the units it holds now, unspent (what it had less
--          what it spent since; the grant is added to it).
-- ARGV[8]: reserve: for how many µs it will spend what it then holds (0:
--          it spends the grant at once and holds nothing).
-- ARGV[9]: reserve: the µs `want` was sized for (its rate × this long).
-- ARGV[10 + 5(i−1) ...]: limit i's algorithm code, then four parameters.
--
-- Returns three integers, then seven per limit (as check.lua), then the
-- time the script ran at:
--   reserve: granted (0 when even the least would not pass: the limits'
--            decisions are then for that least, with their retry times),
--            the µs the grant may be spent for by the window limits (−1:
--            none has a lapse), the µs everything the instance holds may
--            be spent for by the limits that count held units (−1: none
--            does);
--   sync:    1 if the report was applied, 0 if it had been already (a
--            retried call), then 0, 0; the decisions read for a cost of 0
--            (what remains now).

local op = ARGV[1]
local now = time_now(ARGV[2])
local count = tonumber(ARGV[3])

-- A sync's last key is the sequence numbers'; a reservation's second half
-- are the held units'.
local n = (op == 'sync') and #KEYS - 1 or #KEYS / 2
local limits, failure = load_limits(n, 10)
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

-- Records that `reporter` now holds `units` of each limit that counts held
-- units, until `expiry`; drops the counts that expired.
local function record_held(reporter, units, expiry)
  for _, limit in ipairs(limits) do
    if limit.held_key then
      redis.call('DEL', limit.held_key)
      for field, held in pairs(limit.live) do
        if field ~= reporter then
          redis.call('HSET', limit.held_key, field, int(held) .. ' ' .. int(limit.expiry[field]))
        end
      end
      if units > 0 and expiry > now then
        redis.call('HSET', limit.held_key, reporter, int(units) .. ' ' .. int(expiry))
      end
      if redis.call('EXISTS', limit.held_key) == 1 then
        -- Kept while a count's floor can still matter: its expiry, then a
        -- whole refill.
        redis.call('PEXPIRE', limit.held_key, floor((expiry - now + limit.p[2]) / 1000) + 1000)
      end
    end
  end
end

if op == 'reserve' then
  local need, want, fanout = count, tonumber(ARGV[4]), tonumber(ARGV[5])
  local reporter, held_now, hold = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
  local ahead = tonumber(ARGV[9])
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
      limit.state, limit.live, limit.expiry =
        limit.algorithm.held(limit.state, limit.held_key, now, limit.p)
      any_held = true
    end
  end
  if not evaluate_all(need) then
    -- Nothing written: what instances hold stays as it was.
    return reply(0, 0, 0)
  end
  -- The most that would pass now, up to want × fanout: admission is
  -- monotone in the cost for every algorithm, so a bisection finds it.
  local low, high = need, max(want * fanout, need)
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
  commit_all()
  if any_held then
    record_held(reporter, held_now + granted, now + hold)
  end
  return reply(granted, lapse, any_held and hold or NEVER)
end

if op == 'sync' then
  local sequences, instance, sequence = KEYS[#KEYS], ARGV[4], tonumber(ARGV[5])
  local applied = 0
  local last = tonumber(redis.call('HGET', sequences, instance) or '0') or 0
  if count > 0 and sequence > last then
    local longest = 0
    for _, limit in ipairs(limits) do
      local d, admission = limit.algorithm.force(limit.state, now, count, limit.p)
      local ttl_ms = floor(d[4] / 1000) + 1
      limit.algorithm.commit(limit.key, admission, now, limit.p, ttl_ms)
      limit.state = limit.algorithm.load(limit.key)
      longest = max(longest, ttl_ms)
    end
    redis.call('HSET', sequences, instance, int(sequence))
    -- Kept as long as the counts it guards, and then some: a report retried
    -- later than that finds nothing to count twice anyway.
    redis.call('PEXPIRE', sequences, max(longest, 60000))
    applied = 1
  end
  -- Read for a cost of 0: what remains now, nothing taken off.
  evaluate_all(0)
  return reply(applied, 0, 0)
end

return redis.error_reply('tollgate: unknown operation ' .. tostring(op))
