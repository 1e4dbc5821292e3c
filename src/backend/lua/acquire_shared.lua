-- acquire_shared.lua -- the shared acquire (a rwlock's read lock).
--
-- KEYS: as acquire.lua's (the lock key; or all eight; or the lock and the
--   epoch key).
-- ARGV: [1] token, [2] lease ms, [3] restart guard ms ("0": off),
--   [4] "1": prefer readers (a reader waits only while a writer holds the
--   lock: flock(2) semantics; waiting or queued writers, fair or not, do
--   not hold it back), else writers first (a reader waits while a writer
--   holds the lock or waits for it, so a stream of readers never starves
--   a writer).
-- Reply: {1, fence} acquired; {2, fence} already held by this token (the
--   lease starts again); {0, ms} held by a writer, or writers wait, for
--   about ms (or the restart guard holds every acquire back).
--
-- Shared holders are a zset of tokens scored by lease expiry at
-- <prefix>{<name>}:readers.  A reader marks a writer's hash (w), so that
-- its release publishes "released".  A writer's lapse in its lock-delay
-- (acquire.lua: its key kept past its lease) holds readers back as a
-- writer does.
local A = ARGV
--- @include "keys"
local t, us, now, nows
--- @include "clock"
local lv = redis.call('MGET', K[1])[1]
--- @include "lock_norm"
--- @include "acquire_prelude"
--- @include "lock_rest"
local hm = redis.call('HMGET', K[1], 'owner', 'cache', 'w')
if hm[1] then
  local wait
  local p, waits = K[1], true
  --- @include "held_by_another"
  return {0, wait}
end
local sc = redis.call('ZSCORE', K[4], ARGV[1])
if sc and tonumber(sc) > now then
  redis.call('ZADD', K[4], string.format('%d', now + lease), ARGV[1])
  keep(K[4], 2 * lease)
  return {2, redis.call('GET', K[2]) or '1'}
end
if ARGV[4] ~= '1' then
  local w = live(K[5])
  if w then return {0, w - now} end
end
redis.call('ZADD', K[4], string.format('%d', now + lease), ARGV[1])
keep(K[4], 2 * lease)
return {1, fence()}
