-- Gives back a charge that check.lua made, as far as it still counts
-- (every algorithm's `refund`, as in tollgate-core): each limit of the
-- policy then stands as if the request had not been admitted, or, where
-- the charge has partly or wholly stopped counting, no more lenient.
--
-- KEYS[i]: the state of limit i.
-- ARGV[1]: the cost charged.
-- ARGV[2]: "" to read the time from the server; a number of µs in tests.
-- ARGV[3]: when the charge was made, in the script's µs (check.lua's
--          reply ends with it); "" when unknown: then now less ARGV[4].
-- ARGV[4]: how long ago the request was checked, in µs (never shorter
--          than the time since the charge).
-- ARGV[5 .. 4 + #KEYS]: limit i's reset_after in the admission, in µs;
--          "" when unknown.
-- ARGV[5 + #KEYS + 5(i−1) ...]: limit i's algorithm code, then four
--          parameters.
--
-- Returns the time the script ran at.

local cost = tonumber(ARGV[1])
local now = time_now(ARGV[2])
local at = tonumber(ARGV[3]) or max(now - (tonumber(ARGV[4]) or 0), 0)

local limits, failure = load_limits(#KEYS, 5 + #KEYS)
if not limits then
  return failure
end
for i, limit in ipairs(limits) do
  local reset = tonumber(ARGV[4 + i]) or -1
  limit.algorithm.refund(limit.key, limit.state, now, at, cost, reset, limit.p)
end
return { now }
