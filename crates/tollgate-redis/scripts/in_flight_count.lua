-- tollgate in-flight limits: how many slots of a key are held now (leases
-- not yet ended). Reads only.
--
-- KEYS[1]: the key's slot set (see in_flight_acquire.lua).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
