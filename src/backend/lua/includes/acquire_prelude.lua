-- acquire_prelude: the start of the acquires' paths past the uncontended
-- one, on A, their arguments: A[1] token, A[2] lease ms, A[3] restart
-- guard ms ("0": off); K, t, us and nows set before.  Sets now and lease,
-- makes fence() (fence_fn), and applies the restart guard.
--
-- The restart guard (Redis's "delayed restart" advice, done in data): a
-- server restarted without persistence has forgotten every holder, who
-- may still believe, until its next renewal is refused, that it holds its
-- lock.  With a guard, the first acquire that finds no epoch key writes
-- one saying "nothing is granted before now + guard", and every acquire
-- until then answers busy ({0, ms}).  A guard at least as long as the
-- longest lease makes holds from before the data loss run out first.  The
-- price: a brand-new server also waits one guard period before its first
-- grant.
now = nows + 0
--- @include "fence_fn"
local lease = A[2] + 0
if A[3] ~= '0' then
  local guard = tonumber(A[3])
  local nb = tonumber(redis.call('GET', K[8]) or '')
  if not nb then
    nb = now + guard
    redis.call('SET', K[8], string.format('%.0f', nb))
  end
  if now < nb then return {0, nb - now} end
end
