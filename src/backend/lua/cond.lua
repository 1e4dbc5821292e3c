-- cond.lua -- condition variables.
--
-- KEYS: [1] the waiters zset <prefix>{<name>}:cond (also the channel).
-- ARGV: [1] op, [2] token, [3] ttl ms, [4...] registrations of this
--   process's earlier waits that it could not take back (the server did
--   not answer): removed first, so that they do not absorb the signals
--   meant for the live waiter.
-- Reply: wait 1; check 1 still registered (refreshed) / 0 not (it was
--   signalled); withdraw 1 taken back / 0 it had been signalled
--   meanwhile; signal 1 a waiter woken / 0 none; broadcast how many.
--
-- A waiter registers ('wait') before it releases its mutex, so a signal
-- sent after that always finds it: no lost wake-up.  'check' tells a woken
-- waiter whether it is still registered (a wake-up that was not for it)
-- and refreshes it; 'withdraw' takes a timed-out waiter back.  'signal'
-- wakes the waiter whose registration is oldest (at least one, as POSIX
-- says); 'broadcast' wakes all.  A registration lapses after ttl unless
-- refreshed, so a waiter that died does not keep absorbing signals.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, ttl = ARGV[1], tonumber(ARGV[3])
for i = 4, #ARGV do redis.call('ZREM', KEYS[1], ARGV[i]) end
if op == 'wait' or op == 'check' then
  if op == 'check' and not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 0 end
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
  if redis.call('PTTL', KEYS[1]) < 2 * ttl then redis.call('PEXPIRE', KEYS[1], 2 * ttl) end
  return 1
end
if op == 'withdraw' then return redis.call('ZREM', KEYS[1], ARGV[2]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if op == 'signal' then
  local w = redis.call('ZPOPMIN', KEYS[1])
  if #w == 0 then return 0 end
  redis.call('PUBLISH', KEYS[1], 'signal')
  return 1
end
local n = redis.call('ZCARD', KEYS[1])
if n > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], 'broadcast')
end
return n
