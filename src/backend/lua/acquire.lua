-- acquire.lua -- the exclusive acquire (a mutex, a rwlock's write lock).
--
-- KEYS: the lock key <prefix>{<name>} alone (one server, Redlock), or all
--   eight of keys.lua (a cluster), or the lock and the epoch key (the
--   restart guard on one server).
-- ARGV: [1] token, [2] lease ms, [3] flags "RWQC" (or five or six,
--   below), [4] "SINCE WHO" (the caller's wall clock in ms, its
--   host:pid:tid), [5] restart guard ms (absent: off; "0" off when [6] is
--   sent), [6] the lock-delay ms (absent: none) -- few arguments,
--   since each costs the server on every call (bench/README.md).
--   The uncontended path reads them as they come; the others unpack them
--   as A[1..8]: token, lease, guard, who, and the flags:
--   R robust ("1"/"0");
--   W wait ("1": the caller will wait, so register it as a waiting
--     writer, which holds new readers back, and tells a releaser that
--     someone waits);
--   Q queue ("0": no; with W, take a place in the fair queue and be told
--     of a grant by "1": a message on the release channel, "2": a push to
--     the grant list; "3" and "4": the same for a caching waiter, whose
--     grant marks its hold cached; every queuing request says it anew);
--   C caching ("1": mark the hold cached, and answer whether others wait
--     -- queued, or registered as waiting writers -- as a third element, 1
--     or 0: their requests may have come before the hash said "cache", so
--     no "wanted" message told the holder, which must then not keep the
--     lock at its unlock);
--   a fifth flag V ("1", sent only then) says that the caller's pipelined
--     SET took the lock as a string but found others' keys, or got no
--     fence (backend.c, plain_acquire; one server only): that string, if
--     still the caller's, is taken back first ("released" published if a
--     waiter made it a hash and marked it meanwhile), and the call goes on
--     as any other: a lock found free with nobody there is taken on the
--     uncontended path, its string keeping its fence;
--   or H ("2") instead when the lock was held at this process's last
--     acquisition, or this call has waited, or the pipelined SET has just
--     found it held -- sent only for a lock the uncontended path may take
--     (not robust, not caching, no restart guard): the script reads the
--     holder first and skips the uncontended path's EXISTS, which would
--     most likely find the lock held (one call fewer for a waiter); a lock
--     it finds free with nobody there is taken as the string all the
--     same, so that the next acquisition may take the pipelined path;
--   a caller that queues sends six flags (the fifth "0" when neither V
--     nor H) and, when the sixth, L, is not "0", the digits of when its
--     call began (ms, its clock): both go into its queue entry (L "0" it
--     registers its wait itself, waits.lua; "1" or "2" it holds nothing
--     and its entry lists it, as waiting since then).
-- Reply: the fence alone (a string): acquired on the uncontended path;
--   {1, fence} acquired; {4, fence} acquired, but the last robust holder
--   died holding it (EOWNERDEAD); {2, fence} already held by this token
--   (an earlier attempt whose answer was lost, or a fair grant; the lease
--   starts again) -- each with the third element "others wait" when
--   caching; {0, ms, last} held by another (a writer, or readers, or
--   promised to the queue's head) for about ms, last being the holder's
--   fence, or the fence key's where the lock keeps none (readers, a
--   string's "-"; '' if there is none): every grant made before this
--   answer has a fence at most the holder's, every grant after it one
--   above the fence key's, so a grant the caller hears of later was made
--   after this answer only if its fence is above last (lock.c); {5, ms}
--   free, but this thread released it while others waited and is held
--   back for ms (a call that waits; trylock is never held back); {3, 0}
--   robust and not recoverable.
--
-- An exclusive hold is the lock key, with the lease as its expiry, in one
-- of two forms.  Taken on the uncontended path (a free lock with no
-- readers, waiting writers, handoff or queue; not robust, not caching, no
-- restart guard) it is a string "TOKEN FENCE SINCE WHO" (FENCE "-" when
-- the hold was taken by one server's pipelined SET, which cannot know
-- it; SINCE the taker's wall clock in ms): four calls made before
-- anything else (an EXISTS, the fence's TIME and SET ... GET, the SET of
-- the string), answering the fence alone.  Any other hold is a hash:
-- owner (the token), fence, who, since (server ms), and the marks: w
-- ("1") when somebody may be waiting for its release (a waiter marks it;
-- a release of an unmarked hash tells nobody), cache (a caching hold),
-- rb (a robust grant).  While the fair queue has a live waiter, the lock
-- goes to nobody else, fair or not: a free lock with a queue is taken
-- only by the queue's head.  A thread that has just released the lock
-- while others waited is held back for the handoff window (release.lua),
-- so that a waiter, which has to be woken first, gets its turn instead of
-- the releaser taking the lock straight back.  Only robust acquirers read
-- or write the state key.
--
-- Lock-delay (docs/protocol.md): a hold that asks for one (ARGV[6]) is a
-- hash with ld, its delay, and exp, when its lease ends (server ms); the
-- lock key itself lives lease + delay, written so by its grant and every
-- renewal.  Past exp the hold is over -- its renewal and its release are
-- refused, its own acquire finds it another's -- but the key stays until
-- the delay has run: to everyone else the lock is held, for its PTTL (a
-- trylock is busy, a waiter waits that long, the queue keeps its order).
-- A release before exp deletes the key as any release does: no delay.
-- A lock without one pays nothing.
--
-- Lock value block (docs/protocol.md): <lock>:lvb, a hash of v (the value
-- the last release that carried one wrote), ok ("1" valid, "0" not) and
-- open (the token of the hold that began and has not ended by a release).
-- A hold taken while it exists opens it (take(); release.lua's grant), and
-- one that finds it still open -- the hold before ended without a release
-- -- marks it invalid.  A lock with one is never the string form (the
-- uncontended path's EXISTS names it).
local fl = ARGV[3]
-- V: the caller's string (or the hash a waiter made of it) goes.  Not
-- release.lua's way: this was never a hold (readers or the queue's head
-- may be there beside it), so nobody is granted it; the waiters that saw
-- it are only told.
if string.byte(fl, 5) == 49 then
  local p = KEYS[1]
  local v = redis.call('MGET', p)[1]
  if v then
    -- the string is the caller's: its token, then a space
    if string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then redis.call('DEL', p) end
  else
    local hm = redis.call('HMGET', p, 'owner', 'w')
    if hm[1] == ARGV[1] then
      if hm[2] then redis.call('PUBLISH', p, 'released') end
      redis.call('DEL', p)
    end
  end
end
local held = string.byte(fl, 5) == 50
local asked = not ARGV[5] and string.byte(fl, 1) == 48 and string.byte(fl, 4) == 48
-- The uncontended path: nothing there, the string taken.
if asked and not held then
  local p, fk, n = KEYS[1]
  if #KEYS == 1 then
    fk = p .. ':fence'
    n = redis.call('EXISTS', p, p .. ':readers', p .. ':writers', p .. ':handoff', p .. ':fifo', p .. ':lvb')
  else
    fk = KEYS[2]
    n = redis.call('EXISTS', p, KEYS[4], KEYS[5], KEYS[6], KEYS[7], p .. ':lvb')
  end
  if n == 0 then
    --- @include "string_take"
  end
end
-- H and W: a waiter that most likely finds the lock held.  Held as a hash
-- by another, it waits, and its path is written out here, before the
-- tables, functions and flags the others need are made (~20k instructions
-- a handoff; bench/README.md).  Otherwise what it read (lv0: the lock key
-- as a string, or false; hm0: the hash's holder and marks) goes on to the
-- paths below, which read it no more.
local lv0, hm0
if held and string.byte(fl, 2) == 49 then
  local p = KEYS[1]
  lv0 = redis.call('MGET', p)[1]
  if not lv0 then
    hm0 = redis.call('HMGET', p, 'owner', 'cache', 'w', 'fence', 'exp')
    if hm0[1] and hm0[1] ~= ARGV[1] then
      local wait
      local hm, waits = hm0, true
      --- @include "held_by_another"
      local wk, qk = KEYS[5], KEYS[7]
      if not wk then wk, qk = p .. ':writers', p .. ':fifo' end
      local t = redis.call('TIME')
      local now = t[1] * 1000 + math.floor(t[2] / 1000)
      local lease = ARGV[2] + 0
      local who = (string.match(ARGV[4], '^%d+ (.*)$') or ARGV[4])
      --- @include "keep"
      local tok, ls, rb, dl = ARGV[1], ARGV[6] and ARGV[2] .. '+' .. ARGV[6] or ARGV[2], '0', string.sub(fl, 3, 3)
      --- @include "register"
      return {0, wait, hm0[4] or redis.call('GET', KEYS[5] and KEYS[2] or p .. ':fence') or ''}
    end
  end
end
local A = {ARGV[1], ARGV[2], ARGV[5] or '0', (string.match(ARGV[4], '^%d+ (.*)$') or ARGV[4]),
           string.sub(fl, 1, 1), string.sub(fl, 2, 2), string.sub(fl, 3, 3), string.sub(fl, 4, 4), ARGV[6]}
--- @include "keys"
local t, us, now, nows
--- @include "clock"
local lv = lv0 == nil and redis.call('MGET', K[1])[1] or lv0
--- @include "lock_norm"
--- @include "acquire_prelude"
local robust = A[5] == '1'
local state = false
if robust then
  state = redis.call('GET', K[3])
  if state == 'notrecoverable' then return {3, 0} end
end
local function reserve(fs, marked)
  if not marked then redis.call('HSET', K[1], 'fence', fs, 'cache', '1') end
  if redis.call('EXISTS', K[7]) == 1 then return 1 end
  local n = redis.call('ZCARD', K[5])
  if n > 1 or (n == 1 and not redis.call('ZSCORE', K[5], A[1])) then return 1 end
  return 0
end
local rw = false
-- A hold with a lock-delay (A[9]): its lease's end in exp, and the lock
-- key kept the delay past it.  The key's end is set by PEXPIREAT at exp +
-- the delay: a PEXPIRE counts from the server's clock when it runs, later
-- than the TIME exp came from by the script's work in between (the dead
-- readers and waiters it drops), and the delay would run that much long.
-- A user whose ACL line predates PEXPIREAT gets that PEXPIRE of the time
-- left, rather than an acquisition that fails.
local function expire_at(at)
  if type(redis.pcall('PEXPIREAT', K[1], string.format('%d', at))) == 'table' then
    redis.call('PEXPIRE', K[1], string.format('%d', at - now))
  end
end
local function delay_mark()
  redis.call('HSET', K[1], 'ld', A[9], 'exp', string.format('%d', now + lease))
  expire_at(now + lease + A[9])
end
-- take(): one HSET and one PEXPIRE, a caching hold's cache and a
-- lock-delay's ld and exp in them (then PEXPIREAT: the key ends at exp +
-- the delay, delay_mark()).
local function take()
  local fs = fence()
  local pe, at = A[2], nil
  if A[8] == '1' or A[9] then
    local a = {'owner', A[1], 'fence', fs, 'who', A[4], 'since', nows}
    if rw then
      a[#a + 1] = 'w'
      a[#a + 1] = '1'
    end
    if A[8] == '1' then
      a[#a + 1] = 'cache'
      a[#a + 1] = '1'
    end
    if A[9] then
      a[#a + 1] = 'ld'
      a[#a + 1] = A[9]
      a[#a + 1] = 'exp'
      a[#a + 1] = string.format('%d', now + lease)
      at = now + lease + A[9]
    end
    redis.call('HSET', K[1], unpack(a))
  elseif rw then
    redis.call('HSET', K[1], 'owner', A[1], 'fence', fs, 'who', A[4], 'since', nows, 'w', '1')
  else
    redis.call('HSET', K[1], 'owner', A[1], 'fence', fs, 'who', A[4], 'since', nows)
  end
  if at then expire_at(at) else redis.call('PEXPIRE', K[1], pe) end
  local lk = K[1] .. ':lvb'
  local lo = redis.call('HMGET', lk, 'v', 'open')
  if lo[1] then -- a value block: this hold opens it (still open: the last hold lapsed)
    if lo[2] then redis.call('HSET', lk, 'ok', '0', 'open', A[1])
    else redis.call('HSET', lk, 'open', A[1]) end
    redis.call('HSET', K[1], 'lvb', '1')
  end
  local others = nil
  if A[8] == '1' then others = reserve(fs, true) end
  -- The marker, and who set it on a clean lock (release.lua, "undo").
  -- The marker a lapsed earlier attempt of this very call set (its answer
  -- lost, the request asked again) is no holder's death.
  if robust then
    redis.call('SET', K[3], 'held')
    if state == 'held' and redis.call('GET', K[1] .. ':taker') ~= A[1] then
      redis.call('DEL', K[1] .. ':taker')
      return {4, fs, others}
    end
    redis.call('SET', K[1] .. ':taker', A[1])
  end
  return {1, fs, others}
end
if not asked and not held and redis.call('EXISTS', K[1], K[4], K[5], K[6], K[7]) == 0 then return take() end
--- @include "lock_rest"
local hm = hm0 or redis.call('HMGET', K[1], 'owner', 'cache', 'w', 'fence', 'exp')
local owner = hm[1]
-- (its own hold past its lease, in its delay: another's now)
if owner == A[1] and not (hm[5] and hm[5] + 0 <= now) then
  if A[9] then delay_mark() else redis.call('PEXPIRE', K[1], A[2]) end
  if A[8] == '1' then
    local fs = fence()
    return {2, fs, reserve(fs)}
  end
  local fs = hm[4]
  if not fs then -- a string hold keeps no fence: issued anew
    fs = fence()
    redis.call('HSET', K[1], 'fence', fs)
  end
  return {2, fs}
end
local wait, h = nil, nil
if owner then
  local p, waits = K[1], A[6] == '1'
  --- @include "held_by_another"
elseif redis.call('EXISTS', K[4], K[5], K[6], K[7]) > 0 then
  rw = true
  local r = live(K[4])
  if r then wait = r - now end
  local hx
  if not wait then h, hx = qhead() end
  if h and h ~= A[1] then
    wait = hx - now
  elseif not wait and not h and A[6] == '1' and redis.call('GET', K[6]) == A[4] then
    redis.call('ZADD', K[5], string.format('%d', now + lease), A[1])
    keep(K[5], 2 * lease)
    return {5, redis.call('PTTL', K[6])}
  end
elseif asked and redis.call('EXISTS', K[1] .. ':lvb') == 0 then -- H, the lock free and nobody there
  local p, fk = K[1], K[2]
  --- @include "string_take"
end
if wait then
  if A[6] == '1' then
    local tok, ls, rb, dl, who, wk, qk = A[1], A[9] and A[2] .. '+' .. A[9] or A[2], A[5], A[7], A[4], K[5], K[7]
    --- @include "register"
  end
  return {0, wait, owner and hm[4] or redis.call('GET', K[2]) or ''}
end
-- Taken: its registration goes, and, if it is the queue's head, its entry.
if rw then
  redis.call('ZREM', K[5], A[1])
  if h then redis.pcall('LPOP', K[7]) end
end
return take()
