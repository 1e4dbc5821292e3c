-- convert.lua -- lock conversion (as the DLM's convert): a read hold
-- becomes the write hold (up) or the write hold a read hold (down).
--
-- KEYS: as acquire.lua's (the lock key; or all eight on Redis Cluster).
-- ARGV: [1] token (the hold's, kept across the conversion), [2] lease ms,
--   [3] op: 'up', 'down' or 'cancel', [4] host:pid:tid (up: the writer's
--   `who`).
-- Reply: {code, value}:
--   up:     {1, fence} converted: the token holds the lock alone, under a
--           new fence; {2, fence} it did already (an earlier attempt's
--           answer was lost); {0, ms} other readers hold it (or a writer's
--           pipelined SET is being taken back): the token is registered as
--           the upgrader, asks again when one leaves or in about ms;
--           {6, 0} another live reader is registered as the upgrader: the
--           conversion deadlock (EDEADLK; the read hold stays); {7, 0} the
--           token holds no live read lock.
--   down:   {1, 0} the token's write hold is a read hold now (or was made
--           one by an earlier attempt); {7, 0} the token is not the writer.
--   cancel: {1, 0}: the token's registration as the upgrader is gone.
--
-- The upgrader is registered in :writers as "u:TOKEN", scored by its
-- lease's end, as a waiting writer is: readers that prefer writers wait
-- for it (acquire_shared.lua), writers wait for it because it still reads
-- (acquire.lua: live readers keep them out), and it takes the lock before
-- any of them, queued or not, once it is the only reader left.  Nothing
-- in the queue (:fifo) names it, so no release hands it the lock.
local A = ARGV
--- @include "keys"
local t, us, now, nows
--- @include "clock"
now = nows + 0
local tok, lease, op = A[1], A[2] + 0, A[3]
local mark = 'u:' .. tok
--- @include "keep"
if op == 'cancel' then
  if redis.call('ZREM', K[5], mark) == 1 then redis.call('PUBLISH', K[1], 'released') end
  return {1, 0}
end
local lv = redis.call('MGET', K[1])[1]
if op == 'down' then
  local mine
  if lv then mine = string.match(lv, '^(%S+) ') == tok
  else mine = redis.call('HGET', K[1], 'owner') == tok end
  if not mine then
    local sc = redis.call('ZSCORE', K[4], tok)
    if sc and sc + 0 > now then return {1, 0} end
    return {7, 0}
  end
  -- The hold moves from the lock key to :readers in one step: no writer
  -- can come between; every waiter is told (a reader gets in, a writer
  -- finds the reader and waits on).
  redis.call('DEL', K[1])
  redis.call('ZADD', K[4], string.format('%d', now + lease), tok)
  keep(K[4], 2 * lease)
  redis.call('PUBLISH', K[1], 'released')
  return {1, 0}
end
--- @include "lock_norm"
local hm = redis.call('HMGET', K[1], 'owner', 'fence')
if hm[1] == tok then
  redis.call('PEXPIRE', K[1], A[2])
  return {2, hm[2] or redis.call('GET', K[2]) or '1'}
end
local sc = redis.call('ZSCORE', K[4], tok)
if not sc or sc + 0 <= now then
  redis.call('ZREM', K[5], mark)
  return {7, 0}
end
-- Another upgrader that still reads: of two, the second to ask backs out.
-- One that reads no more is no upgrader.
local ws = redis.call('ZRANGE', K[5], '(' .. nows, '+inf', 'BYSCORE')
for i = 1, #ws do
  local o = string.match(ws[i], '^u:(.+)$')
  if o and o ~= tok then
    local osc = redis.call('ZSCORE', K[4], o)
    if osc and osc + 0 > now then return {6, 0} end
    redis.call('ZREM', K[5], ws[i])
  end
end
redis.call('ZREMRANGEBYSCORE', K[4], '-inf', nows)
local wait = nil
if hm[1] then
  -- a writer's pipelined SET, about to be taken back (acquire.lua, V):
  -- marked, so that taking it back tells us
  redis.call('HSET', K[1], 'w', '1')
  wait = redis.call('PTTL', K[1])
elseif redis.call('ZCARD', K[4]) > 1 then
  local r = redis.call('ZRANGE', K[4], '-1', '-1', 'WITHSCORES')
  wait = r[2] - now
end
if wait then
  redis.call('ZADD', K[5], string.format('%d', now + lease), mark)
  keep(K[5], 2 * lease)
  return {0, wait}
end
-- The only reader: the writer now, under a new fence.  The hash is marked
-- (w): readers held back meanwhile left no mark, and its release tells them.
redis.call('ZREM', K[4], tok)
redis.call('ZREM', K[5], mark)
--- @include "fence_fn"
local fs = fence()
redis.call('HSET', K[1], 'owner', tok, 'fence', fs, 'who', A[4], 'since', nows, 'w', '1')
redis.call('PEXPIRE', K[1], A[2])
return {1, fs}
