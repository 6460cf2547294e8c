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
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if held >= limit then
  return {0, held}
end
redis.call('ZADD', key, now + lease, ARGV[3])
-- The set lives as long as its longest lease, and no longer.
if redis.call('PTTL', key) < lease then
  redis.call('PEXPIRE', key, lease)
end
return {1, held + 1}
