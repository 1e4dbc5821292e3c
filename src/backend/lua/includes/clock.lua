-- clock: reads the server's clock into t (TIME's answer), us (its
-- microseconds as six digits) and nows (ms, as a string); the caller
-- declares them (local t, us, now, nows) and sets now, the number, where a
-- path needs it (nows + 0: arithmetic, where tonumber() would convert
-- twice, lua_isnumber then lua_tonumber, each a strtod).
t = redis.call('TIME')
us = t[2]
if #us < 6 then us = string.rep('0', 6 - #us) .. us end
nows = t[1] .. string.sub(us, 1, 3)
