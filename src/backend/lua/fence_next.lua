-- fence_next.lua -- the fence of one server's uncontended path
-- (backend.c, plain_acquire), pipelined after its SET NX PX and EXISTS.
--
-- KEYS: [1] a lock's fence key.
-- ARGV: none.
-- Reply: the next fence, max(last + 1, the server's clock in ns), as every
--   acquire issues it (a string).
local fk = KEYS[1]
--- @include "fence_timed"
return fs
