-- The sliding log: every admitted request's time and cost, in a sorted set
-- of "at:cost" members scored by `at`, with the summed cost of the entries
-- and the newest entry's time in the member "total:NEWEST|PARAMS" (scored
-- -1 - total, so it sorts before every entry; PARAMS what it was written
-- under, see WRITTEN). A refused call reads one
-- range of the set, never the whole log: its cost grows with the logarithm
-- of the log's length, not with the limit.
-- Exact; beyond `max_entries` entries the oldest is merged into the next,
-- as in tollgate-core's sliding_log.rs.
-- p = { limit, period, max_entries }

local U32_MAX = 4294967295

-- The newest entry's time, if `member` is the total's member, and what it
-- says the log was written under.
local function log_total_newest(member)
  local newest, params = string.match(member, '^total:(%d*)(|?[%d,]*)$')
  if newest then
    return tonumber(newest) or false, params ~= '' and params or nil
  end
  return nil
end

-- An entry's time and cost, from its member.
local function log_entry(member)
  local at, cost = string.match(member, '^(%d+):(%d+)$')
  return tonumber(at) or 0, tonumber(cost) or 0
end

-- The entries of ranks `from` to `to` (1 is the oldest: rank 0 is the total).
local function log_entries(key, from, to)
  local entries = {}
  for _, member in ipairs(redis.call('ZRANGE', key, from, to)) do
    if log_total_newest(member) == nil then
      local at, cost = log_entry(member)
      entries[#entries + 1] = { member = member, at = at, cost = cost }
    end
  end
  return entries
end

-- Writes the total, and the newest entry's time if it changed, with what
-- the log is written under.
local function log_set_total(log, newest)
  if newest then
    log.newest = newest
  end
  local member = 'total:' .. (log.newest and int(log.newest) or '') .. (WRITING[log.key] or '')
  if log.member and log.member ~= member then
    redis.call('ZREM', log.key, log.member)
  end
  log.member = member
  redis.call('ZADD', log.key, -1 - log.total, member)
end

-- The log's total, its member, the newest entry's time, and the oldest
-- entries, up to `n` of them: one call.
local function log_head(key, n)
  local log = { key = key, total = 0, head = {} }
  local reply = redis.call('ZRANGE', key, 0, n, 'WITHSCORES')
  WRITTEN[key] = nil
  for i = 1, #reply, 2 do
    local newest, params = log_total_newest(reply[i])
    if newest ~= nil then
      log.total, log.member = -1 - tonumber(reply[i + 1]), reply[i]
      log.newest = newest or nil
      WRITTEN[key] = params
    else
      local at, cost = log_entry(reply[i])
      log.head[#log.head + 1] = { member = reply[i], at = at, cost = cost }
    end
  end
  return log
end

ALGORITHMS.sliding_log = {
  load = function(key)
    local ok, log = pcall(log_head, key, 1)
    if not ok then
      -- A key of another type (a log kept as a list by an older version):
      -- start afresh rather than fail every call.
      redis.call('DEL', key)
      log = { key = key, total = 0, head = {} }
    end
    return log
  end,

  evaluate = function(log, now, cost, p)
    local limit, period, max_entries = p[1], p[2], p[3]
    local key = log.key
    -- Entries that have left the window (now - at >= period) count for
    -- nothing: drop them, each once.
    local horizon = now - period
    if log.head[1] and log.head[1].at <= horizon then
      for _, member in ipairs(redis.call('ZRANGEBYSCORE', key, 0, horizon)) do
        local _, c = log_entry(member)
        log.total = log.total - c
      end
      redis.call('ZREMRANGEBYSCORE', key, 0, horizon)
      log_set_total(log, nil)
      log.head = log_head(key, 1).head
    end
    local head = log.head
    local in_use = log.total
    local wanted = in_use + cost
    local allowed = wanted <= limit
    local retry = 0
    if not allowed then
      if cost > limit then
        retry = NEVER
      else
        -- Wait until enough of the oldest entries have left the window:
        -- every entry costs at least 1, so `excess` entries are enough.
        local excess, freed = wanted - limit, 0
        local oldest = head
        if excess > #head then
          oldest = log_entries(key, 1, excess)
        end
        for _, entry in ipairs(oldest) do
          freed = freed + entry.cost
          if freed >= excess then
            retry = entry.at + period - now
            break
          end
        end
      end
    end
    -- The newest entry: read whole only when this request may join it.
    local last = nil
    if allowed and cost > 0 and log.newest == now then
      last = log_entries(key, -1, -1)[1]
    end
    local joins_last = last ~= nil and last.at == now and last.cost + cost <= U32_MAX
    local newest = nil
    if allowed and cost > 0 then
      newest = now
    elseif log.total > 0 then
      newest = log.newest
    end
    local reset = newest and max(newest + period - now, 0) or 0
    -- The oldest entry gives its cost back first; at the bound, the commit
    -- merges it into the next one (only an entry added can take the log
    -- past its bound).
    local appended = allowed and cost > 0 and not joins_last
    local oldest = nil
    if head[1] then
      oldest = head[1].at
      -- ZCARD counts the total's member too: entries + 1 (new) > bound.
      if appended and redis.call('ZCARD', key) > max_entries then
        local two = log_entries(key, 1, 2)
        if two[2] and two[1].cost + two[2].cost <= U32_MAX then
          oldest = two[2].at
        end
      end
    elseif allowed and cost > 0 then
      oldest = now
    end
    local replenish = oldest and max(oldest + period - now, 0) or 0
    local remaining = limit - (allowed and wanted or in_use)
    return decision(allowed, limit, remaining, reset, retry, 0, replenish),
      { log = log, cost = cost, last = joins_last and last or nil }
  end,
  commit = function(key, admission, now, p, ttl_ms)
    local log, cost, max_entries = admission.log, admission.cost, p[3]
    if cost > 0 then
      -- Requests admitted in the same microsecond share one entry.
      local last = admission.last
      if last then
        redis.call('ZREM', key, last.member)
        redis.call('ZADD', key, now, int(now) .. ':' .. int(last.cost + cost))
      else
        redis.call('ZADD', key, now, int(now) .. ':' .. int(cost))
      end
      log.total = log.total + cost
      log_set_total(log, now)
      if redis.call('ZCARD', key) - 1 > max_entries then
        local two = log_entries(key, 1, 2)
        if two[2] and two[1].cost + two[2].cost <= U32_MAX then
          redis.call('ZREM', key, two[1].member, two[2].member)
          redis.call('ZADD', key, two[2].at, int(two[2].at) .. ':' .. int(two[1].cost + two[2].cost))
        end
      end
    end
    redis.call('PEXPIRE', key, ttl(ttl_ms))
  end,
}

-- Charges `cost` whatever the log holds (see share.lua, debit.lua).
ALGORITHMS.sliding_log.debit = function(log, now, cost, p)
  return ALGORITHMS.sliding_log.evaluate(log, now, cost, { UNBOUNDED, p[2], p[3], p[4] })
end

-- Gives back from the entry made at `at` (several requests of one
-- microsecond share it), else from the newest entry before it (entries
-- merged at the bound); nothing once the entry has left the log.
ALGORITHMS.sliding_log.refund = function(key, log, now, at, cost, reset, p)
  local members = redis.call('ZRANGEBYSCORE', key, at, at)
  if #members == 0 then
    members = redis.call('ZREVRANGEBYSCORE', key, at, 0, 'LIMIT', 0, 1)
  end
  local member = members[#members]
  if not member or log_total_newest(member) ~= nil then
    return
  end
  local entry_at, entry_cost = log_entry(member)
  local give = min(cost, entry_cost)
  redis.call('ZREM', key, member)
  if give < entry_cost then
    redis.call('ZADD', key, entry_at, int(entry_at) .. ':' .. int(entry_cost - give))
  end
  log.total = log.total - give
  -- The newest entry's time, should this one have been it and gone.
  local last = log_entries(key, -1, -1)[1]
  log_set_total(log, last and last.at or nil)
end
