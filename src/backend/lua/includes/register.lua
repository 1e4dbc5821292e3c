-- register: a caller that will wait registers as a waiting writer (zset
-- wk, scored by now + lease: numbers) and, when it queues (dl, its
-- delivery, is not '0'), joins the fair queue qk with its entry
-- "TOK|LEASE|RB|Q|L|SINCE|WHO" (release.lua) made of tok, ls (the lease,
-- a string), rb, dl and who, with L and SINCE from the flags fl
-- (acquire.lua; all the same at every attempt of a call): at its end when
-- its registration is new; a refresh finds the entry (LPOS), rewrites it
-- in place if it says something else (queue_find, LSET), or joins at the
-- end if it is not there.  Then keep(), defined before, keeps both keys
-- for twice the lease.  The queue's commands are redis.pcall'ed: an ACL
-- without them queues nobody rather than failing.
local new = redis.call('ZADD', wk, string.format('%d', now + lease), tok)
local fresh = false
if dl ~= '0' then
  local e = tok .. '|' .. ls .. '|' .. rb .. '|' .. dl .. '|' ..
            (#fl > 5 and string.sub(fl, 6, 6) or '0') .. '|' .. string.sub(fl, 7) .. '|' .. who
  if new == 1 then fresh = redis.pcall('RPUSH', qk, e) == 1
  elseif redis.pcall('LPOS', qk, e) == false then
    --- @include "queue_find"
    if at then redis.call('LSET', qk, string.format('%d', at - 1), e)
    else fresh = redis.pcall('RPUSH', qk, e) == 1 end
  end
  keep(qk, 2 * lease, fresh)
end
keep(wk, 2 * lease, fresh)
