-- lock_rest: the functions only the acquires' paths past the uncontended
-- one need (so an uncontended acquire returns before they are made; K,
-- now and nows set before):
--   live(z)  drops expired members of a zset of tokens scored by expiry
--            and returns the latest expiry left, or nil;
--   keep(z, ms, fresh)  (keep);
--   qhead()  the fair queue's first live waiter (its token and the expiry
--            of its registration), dropping the entries ahead of it whose
--            registration as a waiting writer lapsed (a waiter that died
--            or gave up; its registration goes too, so that should it
--            come back it queues anew, at the end): the queue never
--            wedges on a dead waiter.
local function live(z)
  if redis.call('EXISTS', z) == 0 then return nil end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', nows)
  local r = redis.call('ZRANGE', z, '-1', '-1', 'WITHSCORES')
  if #r > 0 then return tonumber(r[2]) end
  return nil
end
--- @include "keep"
local function qhead()
  while true do
    local e = redis.pcall('LINDEX', K[7], '0')
    if type(e) ~= 'string' then return nil end
    local tk = string.match(e, '^([^|]+)|')
    local sc = (tk and redis.call('ZSCORE', K[5], tk) or 0) + 0
    if sc > now then return tk, sc end
    redis.pcall('LPOP', K[7])
    if tk then redis.call('ZREM', K[5], tk) end
  end
end
