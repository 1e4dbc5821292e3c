-- queue_find: local q, the entries of the fair queue qk, and at, the index
-- in q of the first of token tok's, or nil -- a linear scan, for the rare
-- requests that look for a waiter's entry by its token (a refresh whose
-- entry changed or went, a withdrawal).  A refused LRANGE (an ACL without
-- the list commands) finds nobody.
local q, at = redis.pcall('LRANGE', qk, '0', '-1'), nil
if q.err then q = {} end
for i = 1, #q do
  if string.sub(q[i], 1, #tok + 1) == tok .. '|' then at = i break end
end
