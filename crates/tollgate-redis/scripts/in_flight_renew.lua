-- tollgate in-flight limits: renew the lease of one slot still held.
--
-- KEYS[1]: the key's slot set (see in_flight_acquire.lua).
-- ARGV[1]: the lease in ms; ARGV[2]: the slot's id.
--
-- Returns 1 when renewed (its lease ends a lease from now), 0 when the
-- slot is gone: its lease ended before this renewal (it is dropped then,
-- if another call has not dropped it already), or it was given back.
local key = KEYS[1]
local lease = tonumber(ARGV[1])
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
redis.call('ZADD', key, 'XX', now + lease, ARGV[2])
if redis.call('PTTL', key) < lease then
  redis.call('PEXPIRE', key, lease)
end
return 1
