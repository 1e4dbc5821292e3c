-- info.lua -- what `dlock status` shows of a lock, in one round trip.
--
-- KEYS: as acquire.lua's (the lock key; or all eight).
-- ARGV: none.
-- Reply: {the holder's record as a flat list (the hash, or the string
--   form "TOKEN FENCE SINCE WHO" read as one: owner, who, since, and fence
--   unless "-"), its PTTL, the robust state ('' none), live readers, live
--   waiting writers, the server's time in ms, the lock-delay's marker's
--   PTTL (docs/protocol.md; -2 none)}.
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
return {h, redis.call('PTTL', K[1]),
        redis.call('GET', K[3]) or '',
        redis.call('ZCOUNT', K[4], now + 1, '+inf'),
        redis.call('ZCOUNT', K[5], now + 1, '+inf'), now,
        redis.call('PTTL', K[1] .. ':delay')}
