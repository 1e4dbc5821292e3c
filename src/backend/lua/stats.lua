-- stats.lua -- live figures (stats.c; docs/design.md, "Live figures").
--
-- KEYS: [1] <prefix>{dlock-stats}, which names nothing itself: the
--   figures of the server's second S are KEYS[1]:z:S, a zset of lock names
--   by acquisitions, and for each lock KEYS[1]:h:S:<name>, a hash of
--   counts: a (holds begun), r (holds ended), w<i> and h<i> (waits and
--   holds in bucket i); and KEYS[1]:c:<name>, a hash of counters that only
--   grow, every field whose name starts with a capital: L (holds lost), D
--   (EDEADLK answers), R (lease-at-risk warnings), W<i> and H<i> (waits and holds in bucket i of the
--   cumulative histograms), WS and HS (their sums in µs), whose expiry
--   every flush of the lock puts off.  All in one cluster slot.
-- ARGV: [1] op; "add": [2] the per-second keys' expiry in seconds, [3]
--   the payload, for each lock "<namelen>:<name>" then " <field> <count>"
--   pairs and ";", [4] the counters' expiry in seconds (absent: [2]);
--   "read": [2] seconds, [3] the most locks.
-- Reply: "add" the server's second; "read" the busiest ARGV[3] locks of
--   the last ARGV[2] seconds (this one included): {now, name, {field,
--   count, ...}, ...}.
local base, op = KEYS[1], ARGV[1]
local now = tonumber(redis.call('TIME')[1])
if op == 'add' then
  local ttl, p, pos = tonumber(ARGV[2]), ARGV[3], 1
  local cttl = tonumber(ARGV[4] or ARGV[2])
  local z = base .. ':z:' .. now
  while pos <= #p do
    local c = string.find(p, ':', pos, true)
    if not c then break end
    local n = tonumber(string.sub(p, pos, c - 1))
    if not n then break end
    local name = string.sub(p, c + 1, c + n)
    local e = string.find(p, ';', c + n + 1, true)
    if not e then break end
    local h, a = base .. ':h:' .. now .. ':' .. name, 0
    local cu = base .. ':c:' .. name
    for f, v in string.gmatch(string.sub(p, c + n + 1, e - 1), '(%S+) (%d+)') do
      if string.find(f, '^%u') then redis.call('HINCRBY', cu, f, v)
      else redis.call('HINCRBY', h, f, v) end
      if f == 'a' then a = tonumber(v) end
    end
    redis.call('EXPIRE', h, ttl)
    redis.call('EXPIRE', cu, cttl)
    redis.call('ZINCRBY', z, a, name)
    pos = e + 1
  end
  redis.call('EXPIRE', z, ttl)
  return now
end
local w, max = tonumber(ARGV[2]), tonumber(ARGV[3])
local tot, names = {}, {}
for s = now - w + 1, now do
  local z = redis.call('ZRANGE', base .. ':z:' .. s, 0, -1, 'WITHSCORES')
  for i = 1, #z, 2 do
    if not tot[z[i]] then tot[z[i]] = 0 names[#names + 1] = z[i] end
    tot[z[i]] = tot[z[i]] + tonumber(z[i + 1])
  end
end
table.sort(names, function(x, y) if tot[x] ~= tot[y] then return tot[x] > tot[y] end return x < y end)
local out = {now}
for i = 1, math.min(max, #names) do
  local sum, fs, flat = {}, {}, {}
  for s = now - w + 1, now do
    local hv = redis.call('HGETALL', base .. ':h:' .. s .. ':' .. names[i])
    for j = 1, #hv, 2 do
      if not sum[hv[j]] then sum[hv[j]] = 0 fs[#fs + 1] = hv[j] end
      sum[hv[j]] = sum[hv[j]] + tonumber(hv[j + 1])
    end
  end
  for _, f in ipairs(fs) do flat[#flat + 1] = f flat[#flat + 1] = sum[f] end
  local cv = redis.call('HGETALL', base .. ':c:' .. names[i])
  for j = 1, #cv, 2 do flat[#flat + 1] = cv[j] flat[#flat + 1] = tonumber(cv[j + 1]) end
  out[#out + 1] = names[i]
  out[#out + 1] = flat
end
return out
