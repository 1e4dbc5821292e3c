-- fence_raise.lua -- Redlock (redlock.c): raises a master's last fence.
--
-- KEYS: [1] a lock's fence key.
-- ARGV: [1] a fence (decimal).
-- Reply: 1.
--
-- Raises the last fence issued to at least ARGV[1], so that every later
-- fence of this master is above it.  Fences are compared as decimal
-- strings (no leading zeros: longer is larger).
local cur = redis.call('GET', KEYS[1])
local f = ARGV[1]
if not cur or #cur < #f or (#cur == #f and cur < f) then
  redis.call('SET', KEYS[1], f, 'PX', 3600000)
end
return 1
