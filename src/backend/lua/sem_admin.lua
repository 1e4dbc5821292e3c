-- sem_admin.lua -- administration of a semaphore.
--
-- KEYS: the semaphore's seven keys, DLOCK__KS_* (sem.lua).
-- ARGV: [1] 'unlink', 'break', 'expire' or 'keep'; [2] the most units
--   (break) or the expiry ms (expire, keep); [3] how long the unlink mark
--   stays, ms (unlink).
-- Reply: unlink 1, or 0 when it did not exist (no value); break how many
--   units came back, or -1 when it does not exist; expire and keep 1, 0
--   (keep) when it has no expiry, -1 when it does not exist.
--
-- unlink deletes every key of it (as sem_unlink removes a name), leaves
-- the mark <value key>:unlinked for ARGV[3] ms (while it is there, sem.lua
-- does not make the name again for objects still open on it: it was
-- removed on purpose, not lost) and wakes its waiters, whose next take
-- finds it gone and queues them again (a post on the name, or a new init
-- with units, then serves them).  break takes back every unit leased under
-- undo -- their holders' leases are gone, the units back in the value (at
-- most ARGV[2]) -- and wakes the waiters, whose next take hands those
-- units on in queue order.  expire: every key of it expires ARGV[2] ms
-- from now (sem.lua gives that expiry to the keys an op makes, and keeps
-- it over the value's SET); keep: the same, but only for a semaphore that
-- has an expiry already (renewing it).  Asked once (scripts.c): an unlink
-- or break asked again could delete or take back what was made between.
local exists = redis.call('EXISTS', KEYS[1])
if ARGV[1] == 'unlink' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
  redis.call('SET', KEYS[1] .. ':unlinked', '1', 'PX', ARGV[3])
  redis.call('PUBLISH', KEYS[1], 'unlinked')
  return exists
end
if exists == 0 then return -1 end
if ARGV[1] == 'expire' or ARGV[1] == 'keep' then
  if ARGV[1] == 'keep' and redis.call('PTTL', KEYS[1]) < 0 then return 0 end
  for i = 1, 7 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
  return 1
end
local toks = redis.call('ZRANGE', KEYS[7], 0, -1)
if #toks == 0 then return 0 end
for _, tok in ipairs(toks) do redis.call('HDEL', KEYS[6], tok) end
redis.call('DEL', KEYS[7])
local v = tonumber(redis.call('GET', KEYS[1]) or '0') + #toks
if v > tonumber(ARGV[2]) then v = tonumber(ARGV[2]) end
redis.call('SET', KEYS[1], tostring(v))
redis.call('PUBLISH', KEYS[1], 'reset')
return #toks
