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

local cost, failure = cost_and_clock()
if not cost then
  return failure
end
local charged_at, bad_at = optional_whole_arg(3, 'the charge time in µs', 0, ANY_U64, nil)
local ago, bad_ago = optional_whole_arg(4, 'the time since the check in µs', 0, ANY_U64, 0)
if bad_at or bad_ago then
  return bad_at or bad_ago
end
for i = 1, #KEYS do
  local _, bad_reset = optional_whole_arg(4 + i, 'the reset_after of limit ' .. i .. ' in µs', 0, ANY_U64, -1)
  if bad_reset then
    return bad_reset
  end
end
local now = time_now(ARGV[2])
local at = charged_at or max(now - ago, 0)

local limits, failure = load_limits(#KEYS, 5 + #KEYS, now)
if not limits then
  return failure
end
for i, limit in ipairs(limits) do
  local reset = tonumber(ARGV[4 + i]) or -1
  limit.algorithm.refund(limit.key, limit.state, now, at, cost, reset, limit.p)
end
return { now }
