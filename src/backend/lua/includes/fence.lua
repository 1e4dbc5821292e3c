-- fence: local fs = the next fence of the fence key fk, max(last + 1, the
-- server's clock in ns), from t and us (TIME's answer, its microseconds as
-- six digits), written to fk: SET ... GET stores it and reads the last in
-- one call; a second SET only when the last was not below the clock.
-- A fence is then at most its server's clock when issued (a server issues
-- far fewer than 1000 fences a microsecond), so the fence key never runs
-- ahead of the clock and its expiry (an hour) need not follow it: once
-- gone (lost, restored from an older copy, or expired), the clock alone
-- puts the next fence above every earlier one (docs/fencing.md).  Redis
-- keeps fences as strings (its own INCR would be exact, but its answer
-- reaches Lua as a double).
local fs = t[1] .. us .. '000'
local ls = redis.call('SET', fk, fs, 'PX', '3600000', 'GET')
if ls and (#ls > #fs or (#ls == #fs and ls >= fs)) then
  --- @include "fence_succ"
  redis.call('SET', fk, fs, 'PX', '3600000')
end
