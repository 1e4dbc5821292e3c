-- sem_info.lua -- what `dlock status` shows of a semaphore
-- (dlock_sem_owners), read only, in one round trip.
--
-- KEYS: the semaphore's seven keys, DLOCK__KS_* (sem.lua).
-- ARGV: [1] the most people to list.
-- Reply: {value (false: the semaphore does not exist), the server's time
--   in ms, live waiters, live leased units, waiters as place (0 the
--   queue's head; -1 a post handed it a unit, not taken yet) then its
--   owners record ('' none), leased units as lease expiry then record,
--   when sem.lua last made it again after a loss (server ms; false:
--   never)}.
--
-- A waiter is live while its registration runs (expiry), a leased unit
-- while its lease does: the dead ones, not cleaned up yet, are not shown.
-- Only the commands of the README's minimal ACL user.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[1])
local function live(tok)
  local e = redis.call('ZSCORE', KEYS[3], tok)
  return e and tonumber(e) > now
end
local ws, nw, place = {}, 0, 0
local function waiter(tok, p)
  nw = nw + 1
  if nw <= max then
    ws[#ws + 1] = p
    ws[#ws + 1] = redis.call('HGET', KEYS[6], tok) or ''
  end
end
local g = redis.call('HGETALL', KEYS[4])
for i = 1, #g, 2 do
  if live(g[i]) then waiter(g[i], -1) end
end
for _, tok in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if live(tok) then waiter(tok, place) place = place + 1 end
end
local us = {}
local leased = redis.call('ZRANGE', KEYS[7], '(' .. now, '+inf', 'BYSCORE', 'WITHSCORES')
for i = 1, #leased, 2 do
  if (i + 1) / 2 <= max then
    us[#us + 1] = tonumber(leased[i + 1])
    us[#us + 1] = redis.call('HGET', KEYS[6], leased[i]) or ''
  end
end
return {redis.call('GET', KEYS[1]), now, nw, #leased / 2, ws, us, redis.call('HGET', KEYS[6], '!remade')}
