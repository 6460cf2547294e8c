-- tollgate in-flight limits: renew the lease of one slot still held.
--
-- KEYS[1]: the key's slot set (see in_flight_acquire.lua).
-- ARGV[1]: the lease in ms; ARGV[2]: the slot's id.
--
-- Returns 1 when renewed (its lease ends a lease from now), 0 when the
-- slot is gone: its lease ended before this renewal (it is dropped then,
-- if another call has not dropped it already), or it was given back.
-- The arguments are checked before anything is written (see
-- in_flight_acquire.lua).
local MAX_LEASE = 86400000 -- one day, RedisSlots::MAX_LEASE
local key = KEYS[1]
local lease = tonumber(ARGV[1])
if not (lease and lease == math.floor(lease) and lease >= 1 and lease <= MAX_LEASE) then
  return redis.error_reply('TOLLGATEARG ARGV[1] (the lease in ms) must be a whole number from 1 to '
    .. MAX_LEASE .. ', not ' .. string.format('%q', tostring(ARGV[1])))
end
if not ARGV[2] or ARGV[2] == '' then
  return redis.error_reply('TOLLGATEARG ARGV[2] (the slot id) is missing')
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local score = redis.call('ZSCORE', key, ARGV[2])
if not score then
  return 0
end
if tonumber(score) <= now then
  redis.call('ZREM', key, ARGV[2])
  return 0
end
redis.call('ZADD', key, 'XX', string.format('%d', now + lease), ARGV[2])
if redis.call('PTTL', key) < lease then
  redis.call('PEXPIRE', key, string.format('%d', lease))
end
return 1
