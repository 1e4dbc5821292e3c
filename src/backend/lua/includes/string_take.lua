-- string_take: the uncontended path's hold -- the next fence of the fence
-- key fk (fence_timed), the lock key p set to the string form
-- "TOKEN FENCE SINCE WHO" with the lease (ARGV as acquire.lua's); answers
-- the fence alone.
--- @include "fence_timed"
redis.call('SET', p, ARGV[1] .. ' ' .. fs .. ' ' .. ARGV[4], 'PX', ARGV[2])
do return fs end
