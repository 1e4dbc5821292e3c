-- info.lua -- what `dlock status` shows of a lock, in one round trip.
--
-- KEYS: as acquire.lua's (the lock key; or all eight).
-- ARGV: none.
-- Reply: {the holder's record as a flat list (the hash, or the string
--   form "TOKEN FENCE SINCE WHO" read as one: owner, who, since, and fence
--   unless "-"), its PTTL, the robust state ('' none), live readers, live
--   waiting writers, the server's time in ms, and how long the lock is
--   in its lock-delay (-2: not; then the record is empty, the hold past
--   its lease: acquire.lua)}.
--- @include "keys"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h
local v = redis.call('MGET', K[1])[1]
if v then
  local o, f, s, w = string.match(v, '^(%S+) (%S+) (%d+) (.*)$')
  h = o and {'owner', o, 'who', w, 'since', s} or {}
  if o and f ~= '-' then h[#h + 1] = 'fence' h[#h + 1] = f end
else
  h = redis.call('HGETALL', K[1])
end
local pt, dl = redis.call('PTTL', K[1]), -2
if not v then
  local e = redis.call('HGET', K[1], 'exp')
  if e and e + 0 <= now then h, dl, pt = {}, pt, -2
  elseif e then pt = e - now end
end
return {h, pt,
        redis.call('GET', K[3]) or '',
        redis.call('ZCOUNT', K[4], now + 1, '+inf'),
        redis.call('ZCOUNT', K[5], now + 1, '+inf'), now, dl}
