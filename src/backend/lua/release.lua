-- release.lua -- ends a hold and wakes the waiters.
--
-- KEYS: as acquire.lua's (the lock key; or all eight).  The release
--   channel is the lock key.
-- ARGV: [1] token, [2] "HOW WINDOW WHO": how (below), the handoff window
--   ms and the releaser's host:pid:tid -- one argument, whose last two
--   are read past the uncontended path only; [3] (a hold's end only, and
--   only when its holder set one) the lock value block's new value.
-- Reply: 1 released, 2 released and handed to the fair queue's head (the
--   grant below: the releasing thread lets the woken waiter run first,
--   core/release.c), 0 the token did not hold it; for a how written in
--   capitals (the pipelined unlock's) 2 also when "released" was published
--   to waiters: a waiter was told either way, and its process then stops
--   holding its releases back for a while (core/release.c).
--
-- how, told apart by its first letter:
--   "plain"   a hold of a mutex that is not robust;
--   "hash"    the same, of a hold the client knows to be the hash (taken
--             past the uncontended path, which no script turns back into
--             a string: no MGET; should the token's lease have run out and
--             another taken the lock as the string, the HMGET's WRONGTYPE,
--             caught, answers 0, the one case where a release makes the
--             server count an error);
--   "clean"   robust: the owner-died marker goes;
--   "inconsistent"  robust, unlocked after EOWNERDEAD without consistent:
--             unrecoverable for everyone;
--   "dead"    robust, the holder died: the next acquirer gets EOWNERDEAD;
--   "undo"    robust, an acquisition taken back unused: "clean" or "dead"
--             as its take found the lock;
--   "shared"  a read hold;
--   "withdraw"  not a hold: a writer that stopped waiting takes back its
--             registration and its place in the fair queue, so readers
--             need not wait for it to lapse; if the queue had meanwhile
--             granted it the lock, that grant is released as a hold would
--             be.
--
-- A hold in the string form (acquire.lua) is never marked: its release is
-- the raw compare-and-delete.  The script tells the two forms apart by an
-- MGET of the lock key: it answers a string's value, and nil for a hash
-- (or no key) without an error -- one call where TYPE and GET were two.
-- When the hash was never marked (w), nobody can be waiting for this
-- release, and it tells nobody: a plain release of a hash is then three
-- calls (the MGET, one HMGET of the owner and the mark, the DEL).
--
-- A release that leaves the lock free hands it to the fair queue's head
-- when there is one (and no robust marker needs the head's own acquire to
-- see it: then the head is only woken), taking the head off the waiters'
-- list (waits.lua: its wait ends here, and it need not say so itself).
-- The queue's entries are "TOK|LEASE|RB|Q|L|SINCE|WHO": the waiter's
-- token, lease ms, robust (0/1), delivery (Q, 1-4: acquire.lua), L (0: the
-- waiter registers its wait itself, waits.lua; 1: a waiter that holds
-- nothing, listed by this entry and never registered; 2: the same, with
-- deadlock detection on), since when its call waits (ms, the waiter's
-- clock; empty when L is 0) and its host:pid:tid.  The grant tells that
-- waiter alone: it pushes "FENCE:MS" ("FENCE:MS:C" to a caching waiter,
-- whose grant marks the hold cached: C 1 nobody else waits, it may keep
-- the lock at its unlock; 2 others wait, it may not) to the waiter's grant
-- list <lock key>:g:<token>, on which the waiter blocks in BLPOP
-- (delivery 2: the server answers the waiter itself, before any other),
-- or publishes "TOKEN:FENCE:MS" on the release channel (delivery 1: the
-- waiting process's subscriber hears it; the fallback where BLPOP cannot
-- be used, and where the push is refused).  A grant is leased for MS = at
-- most 2000 ms until the new holder renews it, so one given to a waiter
-- that died in the meantime runs out soon.  The waiter takes the lock
-- from the grant alone when its last request (sent before the grant) plus
-- MS is still ahead; otherwise it confirms with one acquire, which finds
-- the lock already its own (lock.c).  The queue's commands are
-- redis.pcall'ed: a user whose ACL line predates the list gets no order --
-- a refused pop grants nobody and the release publishes "released" --
-- rather than a release that fails and leaves its hold.
--
-- A hold with a lock-delay (ld and exp in the hash: acquire.lua) is
-- released as any other before exp; past it, the hold lapsed and its key
-- is the delay: the release answers 0 and leaves it.  A grant to a queued
-- waiter that asked for a delay (its entry's LEASE is then "LEASE+DELAY")
-- writes ld and exp for it, and drops them otherwise.
--
-- The lock value block (acquire.lua): a hold's end closes it (open goes),
-- writing ARGV[3] as its value, valid, when there is one; a grant opens
-- it for the new holder.
--
-- Otherwise it publishes "released", and when live writers wait and
-- nobody is queued, the releasing thread is held back from the lock for
-- the handoff window (acquire.lua's {5, ms}).
local tok, hw = ARGV[1], ARGV[2]
local c1 = string.byte(hw, 1)
local told = 1 -- the answer of a release that tells a waiter
if c1 < 97 then c1, told = c1 + 32, 2 end
local marked, cached, gone, ld, lvbf
if c1 ~= 115 and c1 ~= 119 then -- neither "shared" nor "withdraw": a hold
  local hm
  if c1 == 104 then -- "hash": it was, and is while tok holds it
    hm = redis.pcall('HMGET', KEYS[1], 'owner', 'w', 'cache', 'ld', 'lvb', 'exp')
    if hm.err then return 0 end -- a string: another's, since tok's lease ran out
  else
    local v = redis.call('MGET', KEYS[1])[1]
    if v then
      -- the string is tok's: its token, then a space
      if not (string.sub(v, 1, #tok + 1) == tok .. ' ') then return 0 end
      redis.call('DEL', KEYS[1])
      if ARGV[3] then redis.call('HSET', KEYS[1] .. ':lvb', 'v', ARGV[3], 'ok', '1') end
      return 1
    end
    hm = redis.call('HMGET', KEYS[1], 'owner', 'w', 'cache', 'ld', 'lvb', 'exp')
  end
  if hm[1] ~= tok then
    if c1 ~= 117 or hm[1] then return 0 end -- an "undo" of a hold that lapsed: below
    gone = true
  end
  marked, cached, ld, lvbf = hm[2], hm[3], hm[4], hm[5]
  if hm[6] and not gone then -- a lock-delay's hold: past its lease, the key is the delay
    local t = redis.call('TIME')
    if hm[6] + 0 <= t[1] * 1000 + math.floor(t[2] / 1000) then return 0 end
  end
  if (c1 == 112 or c1 == 104) and not marked then -- "plain", "hash"
    redis.call('DEL', KEYS[1])
    if lvbf or ARGV[3] then
      local lk = KEYS[1] .. ':lvb'
      if ARGV[3] then redis.call('HSET', lk, 'v', ARGV[3], 'ok', '1') end
      redis.call('HDEL', lk, 'open')
    end
    return 1
  end
end
-- how by its first letter, which tells each apart; WINDOW and WHO are
-- read only where a release holds its thread back (~2k instructions a
-- handoff less than matching the three at once).
local how = c1
--- @include "keys"
-- "undo": the hold is given back as if never taken.  Taken on a clean
-- lock (the taker key names it) it ends "clean", and, should its lease
-- have run out meanwhile with nobody taking the lock since, its marker
-- goes all the same; else (it found the marker) "dead".
if how == 117 then
  local fresh = redis.call('GET', K[1] .. ':taker') == tok
  if gone then
    if fresh and redis.call('GET', K[3]) == 'held' then redis.call('DEL', K[3], K[1] .. ':taker') end
    return 0
  end
  how = fresh and 99 or 100
end
if how == 119 then -- "withdraw"
  local lv = redis.call('MGET', K[1])[1]
  --- @include "lock_norm"
  local was = redis.call('ZREM', K[5], tok)
  local qk = K[7]
  --- @include "queue_find"
  if at then redis.call('LREM', K[7], '0', q[at]) end
  redis.call('DEL', K[1] .. ':g:' .. tok)
  local hm = redis.call('HMGET', K[1], 'owner', 'w', 'rb', 'cache', 'ld', 'lvb')
  -- (a grant its waiter never took: no writes of its to wait for, so no
  -- lock-delay, whatever its exp says)
  if hm[1] ~= tok then
    if was == 1 then redis.call('PUBLISH', K[1], 'released') end
    return 0
  end
  marked, cached, ld, lvbf = hm[2], hm[4], hm[5], hm[6]
  how = 112 -- "plain"
  if hm[3] == '1' then how = 99 end -- "clean"
end
if how == 115 then -- "shared"
  if redis.call('ZREM', K[4], tok) == 1 then
    redis.call('PUBLISH', K[1], 'released')
    return 1
  end
  return 0
end
-- The lock key goes (DEL) on every way out but a grant, which rewrites
-- the hash in place (one call fewer).
if how == 99 then redis.call('DEL', K[3], K[1] .. ':taker') -- "clean"
elseif how == 105 then redis.call('SET', K[3], 'notrecoverable') end -- "inconsistent"
if (lvbf or ARGV[3]) and not gone then
  if ARGV[3] then redis.call('HSET', K[1] .. ':lvb', 'v', ARGV[3], 'ok', '1') end
  redis.call('HDEL', K[1] .. ':lvb', 'open')
end
if not marked then
  redis.call('DEL', K[1])
  return 1
end
-- The clock and the fence as statements, not functions: a script makes
-- its functions anew at every run.
local t, us, now, nows
-- The queue's live head, popped (the dead ones before it go), with no
-- EXISTS first: an LPOP of no list answers nil as cheaply.  A live head is
-- one whose registration as a waiting writer has not lapsed: once the
-- lapsed registrations are gone (one ZREMRANGEBYSCORE, as live() and the
-- window below do), the ZREM that takes the head's registration away
-- answers 1 for a live head and 0 for a dead one -- one call an entry
-- where a ZSCORE (a double, formatted by the server and parsed again
-- here) and the ZREM were two.  A release that leaves the robust marker
-- ("dead", "inconsistent") grants nobody: the next robust acquirer must
-- meet it.  A plain one asks for the marker only when the head is robust
-- -- a head that is not never reads it, and its own acquire would take
-- the lock all the same -- and, finding it (robustness mixed on one
-- name), puts a live head back in its place, its registration kept (no
-- LPUSH in the README's ACL line: the entries move one place up, by LSET,
-- as rare as the case is): its acquire, woken by "released", meets the
-- marker.
local h, ls, rb, d, lf, who, back, hd
local pops = how ~= 100 and how ~= 105 -- neither "dead" nor "inconsistent"
if pops then
  while true do
    local e = redis.pcall('LPOP', K[7])
    if type(e) ~= 'string' then break end
    -- the entry's six fields but SINCE, and the LEASE's delay
    local t1, t2, t7, t3, t4, t5, t6 = string.match(e, '^([^|]+)|(%d+)%+?(%d*)|([01])|([1-4])|([0-2])|%d*|(.*)$')
    if t1 then
      if not now then
        --- @include "clock"
        now = nows + 0
        redis.call('ZREMRANGEBYSCORE', K[5], '-inf', nows)
      end
      if t3 == '1' and how ~= 99 and redis.call('EXISTS', K[3]) == 1 then
        if redis.call('ZSCORE', K[5], t1) then -- live: back in its place
          local q = redis.call('LRANGE', K[7], '0', '-1')
          redis.call('RPUSH', K[7], e)
          for i = #q, 1, -1 do redis.call('LSET', K[7], string.format('%d', i), q[i]) end
          redis.call('LSET', K[7], '0', e)
          if #q == 0 then redis.call('PEXPIRE', K[7], string.format('%d', 2 * tonumber(t2))) end
          back = true
          break
        end
      elseif redis.call('ZREM', K[5], t1) == 1 then
        h, ls, rb, d, lf, who, hd = t1, t2, t3, t4, t5, t6, t7
        break
      end
    end
  end
end
if h then
  if lf == '0' and redis.call('HDEL', K[1] .. ':wmeta', h) == 1 then redis.call('ZREM', K[1] .. ':waiting', h) end
  local g = string.format('%d', math.min(ls, 2000)) -- the grant's lease, at most 2 s
  local fk = K[2]
  --- @include "fence"
  -- The hash is rewritten in place by one HSET and one PEXPIRE, whatever
  -- the grant marks: w is "1" already (the hold was marked: nobody else
  -- comes here), and so is lvb when the hold had the value block; a
  -- caching grant's cache, a value block new to the hash, and the
  -- grantee's lock-delay (ld, exp) join the same HSET; with a lock-delay
  -- the key ends at exp + the delay by PEXPIREAT (acquire.lua's
  -- delay_mark(): a PEXPIRE would count from later than now, by the dead
  -- queue entries popped in between).
  local cq = d == '3' or d == '4'
  local lvn = ARGV[3] and not lvbf
  local pe, at = g, nil
  if cq or lvn or hd ~= '' then
    local a = {'owner', h, 'fence', fs, 'who', who, 'since', nows, 'rb', rb}
    if cq then
      a[#a + 1] = 'cache'
      a[#a + 1] = '1'
    end
    if lvn then
      a[#a + 1] = 'lvb'
      a[#a + 1] = '1'
    end
    if hd ~= '' then
      a[#a + 1] = 'ld'
      a[#a + 1] = hd
      a[#a + 1] = 'exp'
      a[#a + 1] = string.format('%d', now + g)
      at = now + g + hd
    end
    redis.call('HSET', K[1], unpack(a))
  else
    redis.call('HSET', K[1], 'owner', h, 'fence', fs, 'who', who, 'since', nows, 'rb', rb)
  end
  if cached and not cq then redis.call('HDEL', K[1], 'cache') end
  if ld and hd == '' then redis.call('HDEL', K[1], 'ld', 'exp') end
  if not at then redis.call('PEXPIRE', K[1], pe)
  elseif type(redis.pcall('PEXPIREAT', K[1], string.format('%d', at))) == 'table' then
    redis.call('PEXPIRE', K[1], string.format('%d', g + hd)) -- an ACL line without PEXPIREAT
  end
  -- the value block, there if this hold had it open or wrote it: the grantee's now
  if lvbf or ARGV[3] then redis.call('HSET', K[1] .. ':lvb', 'open', h) end
  if rb == '1' then redis.call('MSET', K[3], 'held', K[1] .. ':taker', h) end
  local gs = fs .. ':' .. g
  if cq then
    if redis.call('EXISTS', K[5], K[7]) > 0 then gs = gs .. ':2'
    else gs = gs .. ':1' redis.call('HDEL', K[1], 'w') end
    d = d == '4' and '2' or '1'
  end
  if d == '2' then
    local gk = K[1] .. ':g:' .. h
    if type(redis.pcall('RPUSH', gk, gs)) == 'number' then redis.call('PEXPIRE', gk, g)
    else d = '1' end
  end
  if d ~= '2' then redis.call('PUBLISH', K[1], h .. ':' .. gs) end
  return 2
end
redis.call('DEL', K[1])
-- Live waiting writers and an empty queue: the releasing thread is held
-- back for the window.  (The queue is known empty when the LPOP found
-- nothing.)
local _, win, rwho = string.match(hw, '^(%a+) (%d+) (.*)$')
if tonumber(win) > 0 and not back and redis.call('EXISTS', K[5]) == 1
   and (pops or redis.call('EXISTS', K[7]) == 0) then
  --- @include "clock"
  redis.call('ZREMRANGEBYSCORE', K[5], '-inf', nows)
  if redis.call('ZCARD', K[5]) > 0 then
    redis.call('SET', K[6], rwho, 'PX', win)
  end
end
redis.call('PUBLISH', K[1], 'released')
return told
