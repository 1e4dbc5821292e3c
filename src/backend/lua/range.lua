-- range.lua -- POSIX record locks (the preload's fcntl and lockf;
-- docs/preload.md, "Record locks").
--
-- KEYS: [1] <prefix>{<name>}:rl, a hash: one field per owner (a process,
--   "NONCE.PID"), its value "EXPIRY|WHO|WAITED|WANTS|RANGES[|1]": the
--   owner's lease expiry (server ms), WHO host:pid, WAITED the server ms of
--   its last blocked request (0: not waiting), WANTS that request,
--   "START:END:TYPE" (or empty), RANGES its locks as "START:END:TYPE" (END
--   inclusive, TYPE 1 read, 2 write), comma-separated, sorted, disjoint,
--   neighbours of one type merged, and "|1" when the owner holds the
--   table's cache: it may lock any range of the file without asking, so to
--   every other owner it is as one write lock over the whole file, until
--   it hands its real ranges back ("uncache").  An owner whose lease ran
--   out is deleted by the next request.  Also written, in the same slot:
--   <lock key>:g:<owner> (a cache's owner is asked to give it back) and
--   <KEYS[1]>:hot (no cache is given for 2 s after one was asked back).
-- ARGV: [1] op, [2] owner, [3] lease ms, [4] type, [5] start, [6] end,
--   [7] who, [8] wait ("1": the caller will wait if refused), [9] for
--   "restore", "trim" and "uncache" the segments, [10] for "set" "1": the
--   caller would keep the cache.
-- Reply, by op:
--   set      checks the range against every other owner's (a write
--            conflicts with any lock, a read with a write), and if none
--            conflicts applies POSIX replacement to the owner's own ranges
--            (the part of each overlapped range outside start..end stays,
--            split if need be; start..end takes the type; neighbours of
--            one type merge): {"0", the owner's former segments in the
--            range}; else {"1", type, start, end, who} of the lowest
--            conflicting range, and the conflicting owners, comma-separated
--            (the caller's wait edges, for a cycle through other files'
--            tables: the preload's range.c) -- and with wait, the request
--            is written as the owner's, or {"2"} when waiting would close a
--            cycle: an owner that blocks it waits (its written request) for
--            a range that conflicts with one of an owner that waits ... for
--            one of the caller's (EDEADLK).  With ARGV[10] "1", a set
--            granted while no other owner is in the table, and none was
--            refused for a cache in the last 2 s (<key>:hot), gives the
--            owner the cache: {"0", former segments, "c"}.  A set or get
--            that meets another owner's cache gets {"3", that owner}: the
--            cache's owner is told (its list <lock key>:g:<owner> gets
--            "1:1"), the table is hot, and the caller asks again shortly
--   unl      removes start..end from the owner's ranges: {"0", ranges left}
--   restore  puts ARGV[9]'s segments back over start..end (a kernel call
--            that failed after a set): {"0"}
--   get      the conflict set would meet, without taking: {"0"} or {"1", ...}
--   renew    extends the owner's lease: {"0", ranges} or {"1"} when the
--            owner is unknown (its lease ran out)
--   trim     cuts the owner's ranges to what ARGV[9]'s segments cover (the
--            kernel's), each part with the weaker of its two types, and
--            the cache goes: after a set whose answer never came, so that
--            a set the server did apply leaves no range (nor cache) the
--            process does not know of: {"0", ranges left}
--   uncache  the owner's ranges become ARGV[9]'s segments (the kernel's)
--            and it gives the cache up: {"0"}, or {"1"} when the owner is
--            unknown
--   nowait   withdraws the owner's waiting request: {"0"}
--   show     every live owner's record: {now, owner, record, owner,
--            record, ...} (dlock_range_list)
--   drop     deletes the record of the owner (of every owner if it is
--            ""): {"0", owners dropped} (dlock_range_break)
--   a bad request: an error reply "range: bad request" / "range: unknown op".
--
-- A waiting request counts while its owner asked within the last second
-- (a waiter asks again at least every 50 ms); who blocks it is worked out
-- from the ranges as they are now, so a waiter that has not asked again
-- since its blocker let go is not taken for blocked.
local key, op, me, lease = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function num(x) return string.format('%.0f', x) end
local function dec(v)
  local x, who, wt, ws, rs, c = string.match(v, '^(%d+)|([^|]*)|(%d+)|([^|]*)|([^|]*)|?(%d*)$')
  if not x then return nil end
  local o = {x = tonumber(x), who = who, wt = tonumber(wt), w = ws, r = {}, c = c == '1'}
  for s, e, ty in string.gmatch(rs, '(%d+):(%d+):(%d)') do
    o.r[#o.r + 1] = {tonumber(s), tonumber(e), tonumber(ty)}
  end
  return o
end
local function segs(r)
  local p = {}
  for i, g in ipairs(r) do p[i] = num(g[1]) .. ':' .. num(g[2]) .. ':' .. g[3] end
  return table.concat(p, ',')
end
local all, own, ids, gone = redis.call('HGETALL', key), {}, {}, {}
for i = 1, #all, 2 do
  local o = dec(all[i + 1])
  if o and o.x > now then own[all[i]] = o ids[#ids + 1] = all[i] else gone[#gone + 1] = all[i] end
end
if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
local function save(o)
  if #o.r == 0 and o.w == '' and not o.c then redis.call('HDEL', key, me) return end
  o.x = now + lease
  redis.call('HSET', key, me, num(o.x) .. '|' .. o.who .. '|' .. num(o.wt) .. '|' .. o.w .. '|' .. segs(o.r) ..
    (o.c and '|1' or ''))
  if redis.call('PTTL', key) < 2 * lease then redis.call('PEXPIRE', key, 2 * lease) end
end
local function cut(r, s, e)
  local keep, old = {}, {}
  for _, g in ipairs(r) do
    if g[2] < s or g[1] > e then keep[#keep + 1] = g
    else
      if g[1] < s then keep[#keep + 1] = {g[1], s - 1, g[3]} end
      if g[2] > e then keep[#keep + 1] = {e + 1, g[2], g[3]} end
      old[#old + 1] = {math.max(g[1], s), math.min(g[2], e), g[3]}
    end
  end
  return keep, old
end
local function merge(r)
  table.sort(r, function(a, b) return a[1] < b[1] end)
  local out = {}
  for _, g in ipairs(r) do
    local l = out[#out]
    if l and l[3] == g[3] and g[1] <= l[2] + 1 then
      if g[2] > l[2] then l[2] = g[2] end
    else out[#out + 1] = {g[1], g[2], g[3]} end
  end
  return out
end
local function conflict(s, e, ty, asker)
  local first, by = nil, {}
  for _, id in ipairs(ids) do
    if id ~= asker then
      local hit = false
      for _, g in ipairs(own[id].r) do
        if g[1] <= e and g[2] >= s and (ty == 2 or g[3] == 2) then
          if not first or g[1] < first[1] then first = {g[1], g[2], g[3], own[id].who} end
          hit = true
        end
      end
      if hit then by[#by + 1] = id end
    end
  end
  return first, by
end
local function reaches(from)
  local seen, stack = {}, {}
  for i, id in ipairs(from) do stack[i] = id end
  while #stack > 0 do
    local id = table.remove(stack)
    if id == me then return true end
    local o = own[id]
    if not seen[id] and o and o.wt > 0 and now - o.wt < 1000 then
      seen[id] = true
      local a, b, c = string.match(o.w, '^(%d+):(%d+):(%d)$')
      if a then
        local _, by = conflict(tonumber(a), tonumber(b), tonumber(c), id)
        for _, w in ipairs(by) do stack[#stack + 1] = w end
      end
    end
  end
  return false
end
local o = own[me] or {x = 0, who = ARGV[7] or '', wt = 0, w = '', r = {}, c = false}
local function parse(list)
  local r = {}
  for a, b, c in string.gmatch(list or '', '(%d+):(%d+):(%d)') do r[#r + 1] = {tonumber(a), tonumber(b), tonumber(c)} end
  return r
end
local function cacher()
  for _, id in ipairs(ids) do
    if id ~= me and own[id].c then
      local nk = string.sub(key, 1, #key - 3) .. ':g:' .. id
      if redis.call('LLEN', nk) == 0 then redis.call('RPUSH', nk, '1:1') end
      redis.call('PEXPIRE', nk, 2 * lease)
      redis.call('SET', key .. ':hot', '1', 'PX', 2000)
      return id
    end
  end
  return nil
end
if op == 'show' then
  local out = {num(now)}
  for i = 1, #all, 2 do
    if own[all[i]] then out[#out + 1] = all[i] out[#out + 1] = all[i + 1] end
  end
  return out
elseif op == 'drop' then
  local n = 0
  for _, id in ipairs(ids) do
    if me == '' or id == me then redis.call('HDEL', key, id) n = n + 1 end
  end
  return {'0', tostring(n)}
elseif op == 'renew' then
  if not own[me] then return {'1'} end
  save(o)
  return {'0', tostring(#o.r)}
elseif op == 'nowait' then
  if own[me] then o.w = '' o.wt = 0 save(o) end
  return {'0'}
elseif op == 'trim' then
  if not own[me] then return {'0', '0'} end
  local out = {}
  for _, g in ipairs(o.r) do
    for _, h in ipairs(parse(ARGV[9])) do
      local a, b = math.max(g[1], h[1]), math.min(g[2], h[2])
      if a <= b then out[#out + 1] = {a, b, math.min(g[3], h[3])} end
    end
  end
  o.r = merge(out) o.c = false
  save(o)
  return {'0', tostring(#o.r)}
elseif op == 'uncache' then
  if not own[me] then return {'1'} end
  redis.call('DEL', string.sub(key, 1, #key - 3) .. ':g:' .. me)
  o.r = merge(parse(ARGV[9])) o.c = false o.w = '' o.wt = 0
  save(o)
  return {'0'}
end
local ty, s, e = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if not (ty and s and e) or s > e then return redis.error_reply('range: bad request') end
if op == 'get' or op == 'set' then
  local held = cacher()
  if held then return {'3', held} end
  local first, by = conflict(s, e, ty, me)
  if first then
    if op == 'set' and ARGV[8] == '1' then
      if reaches(by) then
        if own[me] then o.w = '' o.wt = 0 save(o) end
        return {'2'}
      end
      o.w = num(s) .. ':' .. num(e) .. ':' .. ty o.wt = now save(o)
    end
    return {'1', tostring(first[3]), num(first[1]), num(first[2]), first[4], table.concat(by, ',')}
  end
  if op == 'get' then return {'0'} end
  local keep, old = cut(o.r, s, e)
  keep[#keep + 1] = {s, e, ty}
  o.r = merge(keep) o.w = '' o.wt = 0
  if ARGV[10] == '1' and not o.c and #ids <= (own[me] and 1 or 0) and redis.call('EXISTS', key .. ':hot') == 0 then
    o.c = true
  end
  save(o)
  if o.c then return {'0', segs(old), 'c'} end
  return {'0', segs(old)}
elseif op == 'unl' then
  if not own[me] then return {'0', '0'} end
  o.r = merge((cut(o.r, s, e))) o.w = '' o.wt = 0
  save(o)
  return {'0', tostring(#o.r)}
elseif op == 'restore' then
  local keep = cut(o.r, s, e)
  for a, b, c in string.gmatch(ARGV[9] or '', '(%d+):(%d+):(%d)') do
    keep[#keep + 1] = {tonumber(a), tonumber(b), tonumber(c)}
  end
  o.r = merge(keep)
  save(o)
  return {'0'}
end
return redis.error_reply('range: unknown op')
