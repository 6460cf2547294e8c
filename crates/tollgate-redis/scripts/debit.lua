-- Charges a cost learned once a request is over (pay after), whatever the
-- limits say: every algorithm's `debit`, as tollgate-core's. A key may go
-- past its limit, into debt; its next checks are refused until the debt
-- is paid off, with retry_after saying when.
--
-- KEYS[i]: the state of limit i.
-- ARGV[1]: the cost to charge.
-- ARGV[2]: "" to read the time from the server; a number of µs in tests.
-- ARGV[3 + 5(i−1) ...]: limit i's algorithm code, then four parameters.
--
-- Returns the time the script ran at.

local cost, failure = cost_and_clock()
if not cost then
  return failure
end
local now = time_now(ARGV[2])

local limits, failure = load_limits(#KEYS, 3, now)
if not limits then
  return failure
end
for _, limit in ipairs(limits) do
  limit.decision, limit.admission = limit.algorithm.debit(limit.state, now, cost, limit.p)
  commit_limit(limit, now)
end
return { now }
