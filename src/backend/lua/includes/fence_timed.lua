-- fence_timed: reads the server's clock (t, us: local here), then
-- local fs = the next fence of the fence key fk (fence).
local t = redis.call('TIME')
local us = t[2]
if #us < 6 then us = string.rep('0', 6 - #us) .. us end
--- @include "fence"
