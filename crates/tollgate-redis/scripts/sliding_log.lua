-- The sliding log: every admitted request's time and cost, oldest first, in
-- a Redis list of "at:cost" entries. Exact; memory grows with the limit.
-- p = { limit, period }
ALGORITHMS.log = {
  load = function(key)
    local entries = redis.call('LRANGE', key, 0, -1)
    local log = { at = {}, cost = {}, total = 0 }
    for i, entry in ipairs(entries) do
      local at, cost = string.match(entry, '^(%d+):(%d+)$')
      log.at[i], log.cost[i] = tonumber(at) or 0, tonumber(cost) or 0
      log.total = log.total + log.cost[i]
    end
    return log
  end,

  evaluate = function(log, now, cost, p)
    local limit, period = p[1], p[2]
    local function in_window(at)
      return max(now - at, 0) < period
    end
    local n = #log.at
    local expired = 0
    local oldest = nil
    for i = 1, n do
      if in_window(log.at[i]) then
        oldest = log.at[i]
        break
      end
      expired = expired + log.cost[i]
    end
    local in_use = log.total - expired
    local wanted = in_use + cost
    local allowed = wanted <= limit
    local retry = 0
    if not allowed then
      if cost > limit then
        retry = NEVER
      else
        -- Wait until enough of the oldest entries have left the window.
        local excess, freed = wanted - limit, 0
        for i = 1, n do
          if in_window(log.at[i]) then
            freed = freed + log.cost[i]
            if freed >= excess then
              retry = log.at[i] + period - now
              break
            end
          end
        end
      end
    end
    local newest = nil
    if allowed and cost > 0 then
      newest = now
    elseif n > 0 and in_window(log.at[n]) then
      newest = log.at[n]
    end
    local reset = newest and max(newest + period - now, 0) or 0
    -- The oldest entry in the window gives its cost back first; a request
    -- admitted into an empty window is its own oldest entry.
    oldest = oldest or newest
    local replenish = oldest and max(oldest + period - now, 0) or 0
    local remaining = limit - (allowed and wanted or min(in_use, limit))
    return decision(allowed, limit, remaining, reset, retry, 0, replenish),
      { log = log, cost = cost }
  end,

  commit = function(key, admission, now, p, ttl_ms)
    local log, cost, period = admission.log, admission.cost, p[2]
    local n = #log.at
    local leaving = 0
    while leaving < n and max(now - log.at[leaving + 1], 0) >= period do
      leaving = leaving + 1
    end
    if leaving > 0 then
      redis.call('LTRIM', key, leaving, -1)
    end
    if cost > 0 then
      -- Requests admitted in the same microsecond share one entry.
      if n > leaving and log.at[n] == now then
        redis.call('LSET', key, -1, int(now) .. ':' .. int(log.cost[n] + cost))
      else
        redis.call('RPUSH', key, int(now) .. ':' .. int(cost))
      end
    end
    redis.call('PEXPIRE', key, ttl_ms)
  end,
}
