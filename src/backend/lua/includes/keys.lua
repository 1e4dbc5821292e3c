-- keys: K, the lock's keys K[1..8] in the order of DLOCK__K_* (lock,
-- fence, state, readers, writers, handoff, queue) and then the epoch key.
-- On Redis Cluster the caller passes all eight as KEYS, so that a slot in
-- migration is redirected (ASK, TRYAGAIN) before the script runs, never
-- half-way through it.  On one server (and on each Redlock master) it
-- passes only the lock key and, when the script needs it (the restart
-- guard), the epoch key, and the others are made here from the lock key:
-- declaring the six others cost the server about a microsecond per
-- script (docs/design.md), and they all extend the lock key's
-- "<prefix>{<name>}" (dlock__keys_make).  ACLs still check every key a
-- script touches, declared or not.
local K = KEYS
if #K <= 2 then
  local p = K[1]
  K = {p, p .. ':fence', p .. ':state', p .. ':readers', p .. ':writers', p .. ':handoff',
       p .. ':fifo', K[2]}
end
