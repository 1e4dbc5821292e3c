-- reset.lua -- the administrative reset (dlock break, dlock_lock_reset):
-- ends every hold, writer and readers alike, and the waiters' queue.
--
-- KEYS: as acquire.lua's (the lock key; or all eight).
-- ARGV: [1] the release channel, [2] how: "break" (a robust lock's next
--   acquirer gets EOWNERDEAD: the marker says a holder was cut off) or
--   "reset" (the marker goes too, and an unrecoverable lock is usable
--   again).
-- Reply: 1 if the lock was held (by a writer or readers), else 0.
--
-- Asked once (scripts.c): asked again it could cut off a holder that came
-- in between.
--- @include "keys"
-- (a lock in its lock-delay is its lapsed holder's key: deleted, no delay)
local held = redis.call('DEL', K[1]) + redis.call('DEL', K[4])
redis.call('DEL', K[5], K[6], K[7], K[1] .. ':taker') -- the marker is the reset's
if ARGV[2] == 'reset' then redis.call('DEL', K[3]) end
-- the value block stays as it is, valid or not: a break is no lapse
redis.call('HDEL', K[1] .. ':lvb', 'open')
redis.call('PUBLISH', ARGV[1], 'released')
if held > 0 then return 1 end
return 0
