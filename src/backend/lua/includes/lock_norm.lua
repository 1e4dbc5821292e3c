-- lock_norm: a lock taken on the uncontended path is a string
-- "TOKEN FENCE SINCE WHO" (acquire.lua); every path past it that reads or
-- marks the holder first turns such a string into the hash it stands for,
-- with the same expiry.  lv: the lock key K[1]'s value as MGET reads it (a
-- string, or false for a hash or no key), read by the caller.  A string
-- that does not parse is left alone: the hash calls that follow then
-- fail, and the caller is told, rather than a hold be lost.
if lv then
  local o, f, s, w = string.match(lv, '^(%S+) (%S+) (%d+) (.*)$')
  if o then
    local ttl = redis.call('PTTL', K[1])
    redis.call('DEL', K[1])
    if ttl ~= -2 then
      if f == '-' then redis.call('HSET', K[1], 'owner', o, 'who', w, 'since', s)
      else redis.call('HSET', K[1], 'owner', o, 'fence', f, 'who', w, 'since', s) end
      if ttl > 0 then redis.call('PEXPIRE', K[1], ttl) end
    end
  end
end
