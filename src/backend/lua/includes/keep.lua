-- keep: the function keep(z, ms, fresh), which makes z live at least ms
-- more: one PEXPIRE GT when z has an expiry (it always has but just after
-- it is made), then PEXPIRE NX for a z just made (no expiry yet); with
-- fresh (z was most likely just made: the queueing waiter found the queue
-- empty) NX first, then GT: at most two calls either way, never PTTL.
-- Redis 7.0's GT and NX: an older server refuses them, which costs it an
-- error and the PTTL's way.
local function keep(z, ms, fresh)
  local e = string.format('%d', ms)
  if fresh and redis.pcall('PEXPIRE', z, e, 'NX') == 1 then return end
  local r = redis.pcall('PEXPIRE', z, e, 'GT')
  if r == 1 then return end
  if r == 0 then
    if not fresh then redis.call('PEXPIRE', z, e, 'NX') end
    return
  end
  local p = redis.call('PTTL', z)
  if p == -1 or p < ms then redis.call('PEXPIRE', z, e) end
end
