-- sem.lua -- semaphores: every operation of a counting semaphore.
--
-- KEYS: the semaphore's seven keys, DLOCK__KS_* (one slot): [1] value
--   (a number in a string key, no expiry: a semaphore lives until
--   deleted, as a POSIX named one until sem_unlink; a missing key is 0;
--   also the channel), [2] queue (zset of waiters' tokens by ticket),
--   [3] expiry (zset: waiters' and grantees' registrations by expiry),
--   [4] granted (hash: tokens handed a unit, not taken yet), [5] done
--   (hash: one entry per caller, below), [6] owners (hash: token ->
--   "KIND:SINCE:WHO", KIND w a waiter, W one waiting in BLPOP, u a leased
--   unit; fields '!remade', '!held'), [7] leases (zset: leased units'
--   tokens by lease expiry).
-- ARGV: [1] op, [2] token, [3] ttl ms, [4] arg, [5] remember ms, [6] who
--   (host:pid:tid), [7] lease ms (undo; 0 none), [8] caller and [9] op
--   number (the done record; absent: the op is not remembered, as
--   'renew' in a renewal batch), [10] the value the caller opened the
--   semaphore with (absent: never remade).
-- Reply: init 1 made / 0 existed; take 1 taken / 0 not (queued when
--   ARGV[4] is '1' or '2') / -N held back N ms more (below); withdraw 1
--   the token had been handed a unit (now taken) / 0 it left the queue;
--   post 1 posted / 0 the value would pass ARGV[4]; renew 1 renewed / 0
--   the lease is gone; return 1 returned / 2 the lease was gone (its unit
--   came back before); value the value; undo 1 / 0 (below).
--
-- A waiter takes a ticket, one past the last in the queue (FIFO), and
-- registers until now + ttl, refreshed by its next 'take'.  A post with
-- waiters queued leaves the value alone and hands the unit to the queue's
-- head: the head goes from the queue to granted, with ttl to take it, and
-- the token alone is published on the value key's channel, so that only
-- that waiter (of whichever process) wakes -- or, to a waiter that queued
-- by a take with ARGV[4] '2' (its owners record's KIND is then W, not w),
-- "1:TTL" is pushed to its grant list <value key>:g:<token>, on which it
-- waits in BLPOP, as a fair mutex's waiter does: the server wakes it in
-- the post's own turn, no subscriber thread between (a push the ACL
-- refuses publishes instead).  Either is news only: the unit is the
-- waiter's when its next take claims it from granted, so a lost message
-- or a dead waiter loses no unit.  Every op but init first cleans:
-- registrations that lapsed (a waiter that died) leave the queue, a unit
-- handed to a grantee that never took it is posted again (to the next
-- head, or back to the value), and so is a leased unit whose lease lapsed
-- (its process died, or lost it); units free while waiters queue (none
-- should be) go to the waiters.  So the queue never wedges on a dead
-- waiter, and no unit is lost to one for longer than ttl (or, leased, its
-- lease).
--
-- Undo: a take or withdraw with a lease (ARGV[7] > 0) that takes a unit
-- leases it: its token goes in leases until now + lease and in owners as
-- "u:SINCE:WHO"; 'renew' extends a live lease (token: the unit's);
-- 'return' ends one and posts its unit (a post by its holder).
--
-- Asked once: each take, withdraw, post and return comes with a token of
-- its own call (a return: its unit's, remembered as "r:" .. token), its
-- caller ARGV[8] (a thread: "host:pid:tid/TAG", backend.c's sem_caller)
-- and the caller's op number ARGV[9] (a request sent again carries its
-- first sending's; a later op of the caller a higher one).  done is a
-- hash, one field per caller: "EXPIRY SEQ COUNT OP TOKEN", the caller's
-- last op that took, posted or returned a unit (all of them answer 1),
-- its number, how many such ops the caller has done, and when the entry
-- may go (now + ARGV[5] ms, longer than the caller would go on asking).
-- A caller's calls are sequential, so its last op is the only one it can
-- still be asking: asked again (its answer was lost: dlock__command sends
-- it again) an op whose token is its caller's entry's answers 1 and does
-- nothing, so no unit is taken, added or returned twice; one numbered at
-- or below the entry's is an older request of a call that has ended (a
-- stale copy arriving late) and answers 0 doing nothing; any other is
-- done, and if it moves a unit it replaces the entry.  So done holds one
-- entry per caller seen in the last ARGV[5] ms, not one per op: field "#"
-- ("N BASE") counts the entries, and once they pass twice BASE + 16 the
-- expired ones are dropped and BASE is what is left (amortised over new
-- callers; HGETALL, not HLEN or HSCAN, which the minimal ACL user lacks).
-- A done of the old kind (a zset) is dropped.
--
-- 'undo': a take or withdraw of the caller's whose answer never came (the
-- call ended with an error) is undone by the caller's next op of the
-- semaphore, sent before anything else, so that its done entry is still
-- that op's: when the entry names the token's take or withdraw, its unit
-- is given back (to the queue's head or the value; a leased one only if
-- its lease has not lapsed, which gave it back already), the entry's count
-- goes one down and it names 'undo' (a stale copy of the take arriving
-- later finds it and does nothing), and it answers 1; else the token took
-- nothing: it leaves the queue (a unit handed to it goes on) and it
-- answers 0.  Asked again, an undo answers 0 and does nothing.
--
-- Remade: an op (not 'renew') with ARGV[10] that finds the value key gone
-- with no unlink mark beside it (<value key>:unlinked, sem_admin.lua's)
-- finds a semaphore the server lost (an empty restart, FLUSHALL, a
-- failover to a replica that did not have it) and makes it again with
-- that value -- the first such op wins, as the first init does -- noting
-- when in owners field '!remade' (server ms); a post that remakes it adds
-- nothing (its unit was counted in the value made again), a return finds
-- its lease gone (2), as a renewal does, so every leased unit of before
-- is told lost.  An op with a lease (undo) that remakes it holds its units
-- back for that lease (owners field '!held': until when): a holder of
-- before, which may not have heard yet, stops believing by its own clock
-- by then (its last renewal + lease - drift), so no unit is held twice;
-- meanwhile takes queue and posts add to the value, and a take of a
-- caller that gave ARGV[10] answers -N instead of 0: the units are held
-- back N ms more (so it asks again then).
local op, tok, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local lease = tonumber(ARGV[7] or '0')
if op == 'init' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  redis.call('SET', KEYS[1], ARGV[4])
  redis.call('DEL', KEYS[1] .. ':unlinked')
  return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pt = redis.call('PTTL', KEYS[1]) -- an expiry (sem_admin's expire): every key keeps it
local dtok = tok
if op == 'return' then dtok = 'r:' .. tok end
local caller, seq = ARGV[8], tonumber(ARGV[9] or '0')
local remembered = caller ~= nil and (op == 'take' or op == 'withdraw' or op == 'post' or op == 'return')
local count = 0
if remembered then
  local rec = redis.pcall('HGET', KEYS[5], caller)
  if type(rec) == 'table' then redis.call('DEL', KEYS[5]) rec = false end
  if rec then
    local rseq, rcount, rtok = string.match(rec, '^%d+ (%d+) (%d+) %S+ (%S+)$')
    if rtok == dtok then return 1 end
    count = tonumber(rcount or '0')
    if rseq and seq <= tonumber(rseq) then return 0 end
  end
end
local v0 = redis.call('GET', KEYS[1])
local remade = false
if not v0 and ARGV[10] and op ~= 'renew' and redis.call('EXISTS', KEYS[1] .. ':unlinked') == 0 then
  v0 = ARGV[10]
  redis.call('SET', KEYS[1], v0)
  redis.call('HSET', KEYS[6], '!remade', now)
  if lease > 0 then redis.call('HSET', KEYS[6], '!held', now + lease) end
  remade = true
end
v0 = tonumber(v0 or '0')
local held = redis.call('HGET', KEYS[6], '!held')
if held and tonumber(held) <= now then redis.call('HDEL', KEYS[6], '!held') held = false end
local v = v0
local function give()
  if held then v = v + 1 return end
  local h = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #h == 0 then v = v + 1 return end
  redis.call('ZREM', KEYS[2], h[1])
  redis.call('HSET', KEYS[4], h[1], '1')
  redis.call('ZADD', KEYS[3], now + ttl, h[1])
  -- the caller's own take or withdraw, below, claims it: nobody to tell
  if h[1] == tok and (op == 'take' or op == 'withdraw') then return end
  local r = redis.call('HGET', KEYS[6], h[1])
  if r and string.byte(r, 1) == 87 then -- "W:": it waits in BLPOP
    local gk = KEYS[1] .. ':g:' .. h[1]
    -- its list expires with the grant; a withdrawal deletes it
    if type(redis.pcall('RPUSH', gk, '1:' .. ARGV[3])) == 'number' then
      redis.call('PEXPIRE', gk, ARGV[3])
      return
    end
  end
  redis.call('PUBLISH', KEYS[1], h[1])
end
local function leased()
  if lease > 0 then
    redis.call('ZADD', KEYS[7], now + lease, tok)
    redis.call('HSET', KEYS[6], tok, 'u:' .. now .. ':' .. ARGV[6])
  end
end
local back = 0
for _, w in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[3], w)
  redis.call('ZREM', KEYS[2], w)
  redis.call('HDEL', KEYS[6], w)
  back = back + redis.call('HDEL', KEYS[4], w)
end
for _, u in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now)) do
  redis.call('ZREM', KEYS[7], u)
  redis.call('HDEL', KEYS[6], u)
  back = back + 1
end
for i = 1, back do give() end
while v > 0 and not held and redis.call('EXISTS', KEYS[2]) == 1 do v = v - 1 give() end
local res = 0
if op == 'take' then
  if redis.call('HDEL', KEYS[4], tok) == 1 then
    redis.call('ZREM', KEYS[3], tok)
    redis.call('HDEL', KEYS[6], tok)
    res = 1
  elseif v > 0 and not held then
    v = v - 1
    res = 1
  elseif ARGV[4] ~= '0' then
    local kind = ARGV[4] == '2' and 'W:' or 'w:'
    if not redis.call('ZSCORE', KEYS[2], tok) then
      local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
      redis.call('ZADD', KEYS[2], #last > 0 and tonumber(last[2]) + 1 or 1, tok)
      redis.call('HSET', KEYS[6], tok, kind .. now .. ':' .. ARGV[6])
    else
      local r = redis.call('HGET', KEYS[6], tok)
      if r and string.sub(r, 1, 2) ~= kind then redis.call('HSET', KEYS[6], tok, kind .. string.sub(r, 3)) end
    end
    redis.call('ZADD', KEYS[3], now + ttl, tok)
  end
  if res == 1 then leased() end
  -- held back: how long still, so that a waiter asks again then
  if res == 0 and held and ARGV[10] then res = now - tonumber(held) end
elseif op == 'withdraw' then
  res = redis.call('HDEL', KEYS[4], tok)
  redis.call('DEL', KEYS[1] .. ':g:' .. tok)
  redis.call('ZREM', KEYS[2], tok)
  redis.call('ZREM', KEYS[3], tok)
  redis.call('HDEL', KEYS[6], tok)
  if res == 1 then leased() end
elseif op == 'post' then
  if remade then res = 1
  elseif redis.call('EXISTS', KEYS[2]) == 1 then give() res = 1
  elseif v < tonumber(ARGV[4]) then v = v + 1 res = 1 end
elseif op == 'renew' then
  if redis.call('ZSCORE', KEYS[7], tok) then
    redis.call('ZADD', KEYS[7], now + lease, tok)
    res = 1
  end
elseif op == 'return' then
  if redis.call('ZREM', KEYS[7], tok) == 1 then
    redis.call('HDEL', KEYS[6], tok)
    give()
    res = 1
  else
    redis.call('HDEL', KEYS[6], tok)
    res = 2
  end
elseif op == 'value' then
  res = v
elseif op == 'undo' then
  local rec = caller and redis.pcall('HGET', KEYS[5], caller)
  local rcount, rop, rtok
  if type(rec) == 'string' then
    rcount, rop, rtok = string.match(rec, '^%d+ %d+ (%d+) (%S+) (%S+)$')
  end
  if rtok == tok and (rop == 'take' or rop == 'withdraw') then
    -- a leased unit whose lease lapsed came back already (above)
    if lease == 0 or redis.call('ZREM', KEYS[7], tok) == 1 then give() end
    redis.call('HDEL', KEYS[6], tok)
    local rc = string.format('%.0f', tonumber(rcount) - 1)
    local exp = string.format('%.0f', now + tonumber(ARGV[5]))
    redis.call('HSET', KEYS[5], caller, exp .. ' ' .. ARGV[9] .. ' ' .. rc .. ' undo ' .. tok)
    res = 1
  else
    if redis.call('HDEL', KEYS[4], tok) == 1 then give() end
    redis.call('DEL', KEYS[1] .. ':g:' .. tok)
    redis.call('ZREM', KEYS[2], tok)
    redis.call('ZREM', KEYS[3], tok)
    redis.call('HDEL', KEYS[6], tok)
  end
end
if v ~= v0 then redis.call('SET', KEYS[1], tostring(v)) end
if res == 1 and remembered then
  local exp = string.format('%.0f', now + tonumber(ARGV[5]))
  local rec = exp .. ' ' .. ARGV[9] .. ' ' .. string.format('%.0f', count + 1) .. ' ' .. op .. ' ' .. dtok
  if redis.call('HSET', KEYS[5], caller, rec) == 1 then
    local c = redis.call('HGET', KEYS[5], '#') or '0 0'
    local n, base = string.match(c, '^(%d+) (%d+)$')
    n, base = tonumber(n) + 1, tonumber(base)
    if n > 2 * base + 16 then
      local all = redis.call('HGETALL', KEYS[5])
      n = 0
      for i = 1, #all, 2 do
        if all[i] ~= '#' then
          local e = string.match(all[i + 1], '^(%d+) ')
          if e and tonumber(e) <= now then redis.call('HDEL', KEYS[5], all[i]) else n = n + 1 end
        end
      end
      base = n
    end
    redis.call('HSET', KEYS[5], '#', n .. ' ' .. base)
  end
end
if pt > 0 then
  for i = 1, 7 do
    if redis.call('PTTL', KEYS[i]) == -1 then redis.call('PEXPIRE', KEYS[i], pt) end
  end
end
return res
