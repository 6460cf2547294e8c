-- tollgate in-flight limits: take one slot of a key if it has fewer than
-- the limit running.
--
-- KEYS[1]: the key's slot set, a sorted set of slot ids, each scored by the
-- end of its lease in milliseconds of this server's clock.
-- ARGV[1]: the limit; ARGV[2]: the lease in ms; ARGV[3]: the new slot's id.
--
-- Returns {1, held} when the slot is taken (held counts it), {0, held}
-- when the key is full. Slots whose lease has ended are dropped first:
-- they belong to an instance that stopped renewing them (it died, or lost
-- Redis for longer than a lease).
--
-- The arguments are checked before anything is written (an error reply
-- with the code TOLLGATEARG otherwise): a lease of 1 ms to MAX_LEASE, a
-- limit of 1 to 2^32 − 1, an id. The set's expiry is set with every digit
-- (Lua writes large numbers with an exponent, which PEXPIRE refuses), so
-- it cannot fail after the ZADD and leave the set without one.
local MAX_LEASE = 86400000 -- one day, RedisSlots::MAX_LEASE
local key = KEYS[1]
local function whole(index, what, lo, hi)
  local value = tonumber(ARGV[index])
  if value and value == math.floor(value) and value >= lo and value <= hi then
    return value
  end
  return nil, redis.error_reply('TOLLGATEARG ARGV[' .. index .. '] (' .. what
    .. ') must be a whole number from ' .. lo .. ' to ' .. hi .. ', not '
    .. string.format('%q', tostring(ARGV[index])))
end
local limit, bad_limit = whole(1, 'the limit', 1, 4294967295)
if not limit then
  return bad_limit
end
local lease, bad_lease = whole(2, 'the lease in ms', 1, MAX_LEASE)
if not lease then
  return bad_lease
end
if not ARGV[3] or ARGV[3] == '' then
  return redis.error_reply('TOLLGATEARG ARGV[3] (the slot id) is missing')
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if held >= limit then
  return {0, held}
end
redis.call('ZADD', key, string.format('%d', now + lease), ARGV[3])
-- The set lives as long as its longest lease, and no longer.
if redis.call('PTTL', key) < lease then
  redis.call('PEXPIRE', key, string.format('%d', lease))
end
return {1, held + 1}
