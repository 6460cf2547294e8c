-- Checks one request against every limit of a policy and charges them all
-- or none.
--
-- KEYS[i]: the state of limit i.
-- ARGV[1]: the request's cost.
-- ARGV[2]: "" to read the time from the server (always, in production); a
--          number of microseconds only where tests set the clock.
-- ARGV[3]: the deadline, in the server's µs: a call that runs later charges
--          nothing (its caller has stopped waiting); "" for none.
-- ARGV[4 + 5(i−1) ...]: limit i's algorithm code, then four parameters.
--
-- Returns seven integers per limit: allowed, limit, remaining, reset_after,
-- retry_after, wait, replenish_after (times in µs; retry_after −1 = never),
-- then the time the script ran at. A call past its deadline returns that
-- time alone, having read and written nothing.

-- Every argument is checked before anything is read or written.
local cost, failure = cost_and_clock()
if not cost then
  return failure
end
local deadline, bad_deadline = optional_whole_arg(3, 'the deadline in µs', 0, ANY_U64, nil)
if bad_deadline then
  return bad_deadline
end
local now = time_now(ARGV[2])
if deadline and now > deadline then
  return { now }
end

local limits, failure = load_limits(#KEYS, 4, now)
if not limits then
  return failure
end
local all_allowed = true
for _, limit in ipairs(limits) do
  limit.decision, limit.admission = limit.algorithm.evaluate(limit.state, now, cost, limit.p)
  all_allowed = all_allowed and limit.decision[1] == 1
end

for _, limit in ipairs(limits) do
  if all_allowed then
    commit_limit(limit, now)
  elseif #limits > 1 and limit.decision[1] == 1 then
    -- Denied by another limit: report this one's state with nothing charged.
    local d = limit.algorithm.evaluate(limit.state, now, 0, limit.p)
    d[1] = 1
    limit.decision = d
  end
end

return reply_with_decisions({}, limits, now)
