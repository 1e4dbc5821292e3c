-- renew.lua -- extends a hold's lease (the renewal thread, pipelined).
--
-- KEYS: the lock key (an exclusive hold) or its readers key (a read
--   hold): one key, so that in a cluster slot being migrated the request
--   is served wherever that key is (ASK), never refused for keys not
--   there (TRYAGAIN).
-- ARGV: [1] token, [2] lease ms, [3] "s" for a read hold ("x" not),
--   [4] for a hold taken by one server's pipelined SET, its fence, which
--   the renewal records where the lock keeps none (the string's "-", or
--   the hash a waiter made of it).
-- Reply: 1 renewed; 0 the token no longer holds it; 2 renewed, but the
--   lock is cached (cache) and someone asked for it since (w): the holder
--   gives it back (lock caching's bound on how long an idle cached lock is
--   kept once asked for, should the "wanted" message not be heard).
--
-- An exclusive hold in either form (acquire.lua): the string
-- "TOKEN FENCE SINCE WHO" or the hash.  A hash with a lock-delay (ld)
-- moves exp, its lease's end, and keeps the key the delay past it
-- (PEXPIREAT exp + delay, as acquire.lua's delay_mark()); past exp it is
-- refused (acquire.lua).
if ARGV[3] == 's' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local sc = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if sc and tonumber(sc) > now then
    redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
    --- @include "keep"
    keep(KEYS[1], 2 * tonumber(ARGV[2]))
    return 1
  end
  return 0
end
local v = redis.call('MGET', KEYS[1])[1]
if v then
  -- the string is the token's: its token, then a space
  if not (string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ') then return 0 end
  local n = #ARGV[1]
  if ARGV[4] and string.sub(v, n + 1, n + 3) == ' - ' then -- its fence, kept from now on
    redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[4] .. string.sub(v, n + 3), 'PX', ARGV[2])
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
local hm = redis.call('HMGET', KEYS[1], 'owner', 'cache', 'w', 'ld', 'exp')
if hm[1] ~= ARGV[1] then return 0 end
if hm[4] then -- a lock-delay's hold: refused past its lease (the key is the delay)
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  if hm[5] and hm[5] + 0 <= now then return 0 end
  redis.call('HSET', KEYS[1], 'exp', string.format('%d', now + ARGV[2]))
  if type(redis.pcall('PEXPIREAT', KEYS[1], string.format('%d', now + ARGV[2] + hm[4]))) == 'table' then
    redis.call('PEXPIRE', KEYS[1], string.format('%d', ARGV[2] + hm[4])) -- an ACL line without PEXPIREAT
  end
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if ARGV[4] then redis.call('HSETNX', KEYS[1], 'fence', ARGV[4]) end
if hm[2] == '1' and hm[3] == '1' then return 2 end
return 1
