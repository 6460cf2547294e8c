-- The sliding window of sub-window counters: the period cut into n
-- sub-windows of `sub` µs aligned to the epoch; a request in sub-window k
-- counts sub-windows k - n .. k (the one the period's start falls in,
-- whole), as in tollgate-core's sliding_window_buckets.rs.
-- p = { limit, sub, n }; state: a hash, field = a sub-window's index
-- (now / sub), value = the cost admitted in it. Only non-empty sub-windows
-- of the last n + 1 are kept: at most n + 1 small fields.

-- The hash as { index = count }, and the newest index in it (nil if none);
-- its field `q`, what it was written under, noted (see WRITTEN).
local function buckets_load(key)
  local reply = redis.call('HGETALL', key)
  local counts, newest = {}, nil
  WRITTEN[key] = nil
  for i = 1, #reply, 2 do
    local index, count = tonumber(reply[i]), tonumber(reply[i + 1])
    if reply[i] == 'q' then
      WRITTEN[key] = reply[i + 1]
    elseif index and count then
      counts[index] = count
      if not newest or index > newest then
        newest = index
      end
    end
  end
  return { counts = counts, newest = newest }
end

ALGORITHMS.sliding_window_buckets = {
  load = function(key)
    local ok, state = pcall(buckets_load, key)
    if not ok then
      -- A key of another type: start afresh rather than fail every call.
      redis.call('DEL', key)
      state = { counts = {}, newest = nil }
    end
    return state
  end,

  evaluate = function(state, now, cost, p)
    local limit, sub, n = p[1], p[2], p[3]
    local index = div_floor(now, sub)
    -- A newest sub-window after now's (the clock went back) is kept,
    -- conservatively: the request counts as in it.
    if state.newest and state.newest > index then
      index = state.newest
    end
    local first = max(index - n, 0)
    local counts = state.counts
    local in_window = 0
    for i, count in pairs(counts) do
      if i >= first and i <= index then
        in_window = in_window + count
      end
    end
    local allowed = in_window + cost <= limit
    local function after(i)
      local count = counts[i] or 0
      if allowed and i == index then
        count = count + cost
      end
      return count
    end
    -- Sub-window i leaves the window when sub-window i + n + 1 starts.
    local function leaves(i)
      return (i + n + 1) * sub - now
    end
    local oldest, newest = nil, nil
    for i, _ in pairs(counts) do
      if i >= first and i <= index and after(i) > 0 then
        if not oldest or i < oldest then oldest = i end
        if not newest or i > newest then newest = i end
      end
    end
    if allowed and cost > 0 then
      newest = index
      if not oldest then oldest = index end
    end
    local retry = 0
    if not allowed then
      if cost > limit then
        retry = NEVER
      else
        -- The oldest sub-windows leave first: wait for enough of them.
        local indexes = {}
        for i, count in pairs(counts) do
          if i >= first and i <= index and count > 0 then
            indexes[#indexes + 1] = i
          end
        end
        table.sort(indexes)
        local left = in_window
        for _, i in ipairs(indexes) do
          left = left - counts[i]
          if left + cost <= limit then
            retry = leaves(i)
            break
          end
        end
      end
    end
    local reset = newest and leaves(newest) or 0
    local replenish = oldest and leaves(oldest) or 0
    local remaining = limit - (allowed and (in_window + cost) or in_window)
    return decision(allowed, limit, remaining, reset, retry, 0, replenish),
      { state = state, index = index, first = first, cost = cost }
  end,

  commit = function(key, admission, now, p, ttl_ms)
    if admission.cost > 0 then
      -- Drop the sub-windows that have left the window, then count this one.
      local gone = {}
      for i, _ in pairs(admission.state.counts) do
        if i < admission.first then
          gone[#gone + 1] = int(i)
        end
      end
      if #gone > 0 then
        redis.call('HDEL', key, unpack(gone))
      end
      redis.call('HINCRBY', key, int(admission.index), admission.cost)
      if WRITTEN[key] ~= WRITING[key] then
        redis.call('HSET', key, 'q', WRITING[key])
        WRITTEN[key] = WRITING[key]
      end
    end
    redis.call('PEXPIRE', key, ttl(ttl_ms))
  end,
}

-- Charges `cost` whatever the state (see share.lua).
ALGORITHMS.sliding_window_buckets.debit = function(state, now, cost, p)
  return ALGORITHMS.sliding_window_buckets.evaluate(state, now, cost, { UNBOUNDED, p[2], p[3], p[4] })
end

-- Reserved in a sub-window, counted in it: spent later, it would leave the
-- window early.
ALGORITHMS.sliding_window_buckets.lapse = function(now, p)
  return (div_floor(now, p[2]) + 1) * p[2] - now
end

-- A charge counts in its sub-window's counter while that is in the hash.
ALGORITHMS.sliding_window_buckets.refund = function(key, state, now, at, cost, reset, p)
  local index = div_floor(at, p[2])
  local count = state.counts[index]
  if not count then
    return
  end
  local give = min(cost, count)
  if give >= count then
    redis.call('HDEL', key, int(index))
  else
    redis.call('HINCRBY', key, int(index), -give)
  end
end
