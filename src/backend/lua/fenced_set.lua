-- fenced_set.lua -- a fenced write (dlock_fenced_set).
--
-- KEYS: [1] the target, a hash {value, fence}.
-- ARGV: [1] the caller's fence (decimal, up to 20 digits), [2] the value.
-- Reply: 1 written, 0 refused as stale.
--
-- The write happens only if the caller's fence is not older than the
-- fence of the last write, so a holder whose lease ran out (and whose
-- successor already wrote) can never overwrite newer data.  Fences are
-- compared as decimal strings (no leading zeros: longer is larger).
local cur = redis.call('HGET', KEYS[1], 'fence')
local f = ARGV[1]
if cur and (#cur > #f or (#cur == #f and cur > f)) then return 0 end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', f)
return 1
