-- waits.lua -- who waits for whom (deadlock detection, and the waiters
-- `dlock status` lists; docs/design.md, "Deadlock detection").
--
-- KEYS, on a lock's slot: [1] the lock, [2] <lock>:waiting (zset: waits'
--   ids by expiry), [3] <lock>:wmeta (hash: id -> "since|rec", since in
--   server ms, written once), [4] <lock>:readers, [5] <lock>:writers,
--   [6] <lock>:fifo (the fair queue).  Or, on a holder token's edge key,
--   KEYS[1] alone (its own slot).
-- ARGV: [1] op, [2] id, [3] rec, [4] ttl ms.
-- Reply, by op:
--   note     registers or refreshes the wait id, its rec given as
--            "AGE|rec" (AGE: ms the wait has lasted, so since is the
--            server's clock less AGE): {since}, or {} if id holds the lock
--            (a grant withdrew it);
--   drop     withdraws it: {};
--   holders  {the writer's token or '', each live reader's token};
--   list     {now, each live wait's "since|rec"}: the registered waits,
--            then the queued waiters that hold nothing (the queue entry's
--            L 1 or 2, release.lua: they never register), from their
--            entries, while their registration as waiting writers is live
--            -- "since|who|x|detect", since by the waiter's clock (no later
--            than the server's);
--   eset     on an edge key: writes rec with the ttl: {};
--   eget     {rec} or {};
--   edel     deletes it if it still begins with rec: {}.
--
-- Lapsed waits are swept by note and list; note only ever lengthens the
-- two keys' expiry (a short registration must not cut a long one's).
-- ZRANGE ... BYSCORE: a command the README's minimal ACL user has always
-- had.
local op = ARGV[1]
if op == 'eset' then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  return {}
elseif op == 'eget' then
  local v = redis.call('GET', KEYS[1])
  if v then return {v} end
  return {}
elseif op == 'edel' then
  local v = redis.call('GET', KEYS[1])
  if v and string.sub(v, 1, #ARGV[3]) == ARGV[3] then redis.call('DEL', KEYS[1]) end
  return {}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function sweep()
  local old = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE')
  for _, m in ipairs(old) do redis.call('HDEL', KEYS[3], m) end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
end
if op == 'note' then
  sweep()
  -- a tick that comes after the release granted the wait the lock
  -- (which withdrew it): nothing to register
  if redis.pcall('HGET', KEYS[1], 'owner') == ARGV[2] then return {} end
  local v = redis.call('HGET', KEYS[3], ARGV[2])
  local since = v and string.match(v, '^(%d+)|')
  if not since then
    local age, rec = string.match(ARGV[3], '^(%d+)|(.*)$')
    if not age then return redis.error_reply('waits: bad record') end
    since = tostring(now - math.min(tonumber(age), now))
    redis.call('HSET', KEYS[3], ARGV[2], since .. '|' .. rec)
  end
  local ttl = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
  for i = 2, 3 do
    if redis.call('PTTL', KEYS[i]) < 2 * ttl then redis.call('PEXPIRE', KEYS[i], 2 * ttl) end
  end
  return {since}
elseif op == 'drop' then
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('HDEL', KEYS[3], ARGV[2])
  return {}
elseif op == 'holders' then
  local o = redis.call('MGET', KEYS[1])[1] -- the holder, of either form
  if o then o = string.match(o, '^(%S+) ') else o = redis.call('HGET', KEYS[1], 'owner') end
  local out = {o or ''}
  for _, m in ipairs(redis.call('ZRANGE', KEYS[4], '(' .. now, '+inf', 'BYSCORE')) do out[#out + 1] = m end
  return out
elseif op == 'list' then
  sweep()
  local out, seen = {tostring(now)}, {}
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    local v = redis.call('HGET', KEYS[3], m)
    if v then out[#out + 1] = v seen[m] = true end
  end
  -- the queued waiters that hold nothing (L 1 or 2), listed by their
  -- entries while their registration as waiting writers is live
  local q = KEYS[6] and redis.pcall('LRANGE', KEYS[6], 0, -1) or {}
  if q.err then q = {} end
  for _, e in ipairs(q) do
    local tk, lf, since, who = string.match(e, '^([^|]+)|%d+|[01]|[1-4]|([12])|(%d*)|(.*)$')
    if tk and not seen[tk] and tonumber(redis.call('ZSCORE', KEYS[5], tk) or '0') > now then
      since = math.min(tonumber(since) or now, now) -- (another host's clock may be ahead)
      out[#out + 1] = string.format('%d', since) .. '|' .. who .. '|x|' .. (lf == '2' and '1' or '0')
    end
  end
  return out
end
return redis.error_reply('waits: unknown op')
