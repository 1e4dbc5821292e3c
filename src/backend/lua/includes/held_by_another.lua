-- held_by_another: a caller that found the lock p held by another (hm:
-- the hash's owner, cache and w, by HMGET) learns for how long (wait,
-- which the caller declares: the lock's PTTL), tells a caching holder
-- that it is wanted, and, when it will wait (waits), marks the hash (w)
-- unless it is marked: a release of an unmarked hash tells nobody.
wait = redis.call('PTTL', p)
if hm[2] == '1' then redis.call('PUBLISH', p, 'wanted') end
if waits and not hm[3] then redis.call('HSET', p, 'w', '1') end
