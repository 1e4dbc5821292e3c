/* scripts.c -- the Lua scripts that acquire, release and renew a lock.
 *
 * Each operation is one script so that it is atomic on the server and
 * costs one round trip.  Names, tokens and every other value travel only
 * as KEYS and ARGV: no caller data is ever spliced into script text.
 * Scripts run by EVALSHA; a NOSCRIPT answer (a restarted or flushed
 * server) loads the script and runs it again, so a restart changes nothing
 * for the caller.
 *
 * An exclusive hold is the key <prefix>{<name>}, with the lease as its
 * expiry, in one of two forms.  Taken on the uncontended path (a free lock
 * with no readers, waiting writers, handoff or queue; not robust, not
 * caching, no restart guard) it is a string "TOKEN FENCE SINCE WHO"
 * (FENCE "-" when the hold was taken by the pipelined SET of one server
 * (backend.c, plain_acquire), which cannot know it; SINCE the taker's
 * wall clock in ms, WHO host:pid:tid): the raw pair's SET, plus the
 * fence's.  Any other hold is a hash: owner (the token), fence, who,
 * since (server ms), and the marks below.  Every path past the
 * uncontended one that reads or marks the holder first turns a string
 * into that hash (LOCK_NORM): so a string is never marked, and its release
 * is the raw compare-and-delete.  Shared holders are a zset of tokens
 * scored by lease expiry at <prefix>{<name>}:readers.  The keys are
 * listed at DLOCK__K_*.  A fence is max(last fence + 1, the server's
 * time in nanoseconds) on every path, and so never above the server's
 * clock: fences increase strictly even when the server lost its data or
 * came back with an older copy of it, as long as the server's clock does
 * not step back past the last fence it issued (docs/fencing.md).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "backend/backend.h"

/* Every lock script works on the same keys, K[1..8] in the order of
 * DLOCK__K_* (lock, fence, state, readers, writers, handoff, queue) and
 * then the epoch key; each uses the ones it needs.  On Redis
 * Cluster the caller passes all eight as KEYS, so that a slot in migration
 * is redirected (ASK, TRYAGAIN) before the script runs, never half-way
 * through it.  On one server (and on each Redlock master) it passes only
 * the lock key and, when the script needs it (the restart guard), the
 * epoch key, and KEYS_PRELUDE makes the others
 * from the lock key: declaring the six others cost the server about a
 * microsecond per script (docs/design.md), and they all extend the lock
 * key's "<prefix>{<name>}" (dlock__keys_make, below).  ACLs still check
 * every key a script touches, declared or not.
 *
 * The lock hash has a field w ("1") when somebody may be waiting for its
 * release: a hash written on the uncontended path (no readers, waiters,
 * queue or handoff) has none, and a waiter marks it -- a writer that will
 * wait, a reader, every hold taken past the uncontended path, every
 * grant.  A release of a hash without w has nobody to tell: it publishes
 * nothing and looks at no other key (three calls: the MGET that finds
 * no string, one HMGET of the owner and the mark, the DEL).  Whoever waits without having marked it (a reader
 * held back by a waiting writer, before that writer takes the lock)
 * waits for a hold that marks it, or for its own retry at the writer's
 * expiry: the mark only saves messages, it never decides who holds.
 *
 * CLOCK_READ reads the server's clock (t; us, its microseconds as six
 * digits; nows, in ms, as a string; now, the number, is set where a path
 * needs it); FENCE_NEXT makes fs, a new fencing token: max(last + 1,
 * server time in ns), as decimal digits, compared and counted on as text
 * (19 digits: no Lua number holds them exactly; see FENCE_SUCC).  Where a
 * path often taken needs a number from a string (the clock, a score, an
 * argument), arithmetic makes it (s + 0): Lua 5.1's tonumber() converts
 * twice (lua_isnumber, then lua_tonumber), each a strtod of up to 16
 * digits (~7k instructions a handoff for six of them).
 * FENCE_FN wraps the latter as the function fence() for the acquires'
 * paths past the uncontended one; the uncontended path and the release
 * write their statements out: a script makes its functions anew at every
 * run, and on those paths that costs as much as a call (bench/README.md).
 * LOCK_REST defines the rest, which only the acquires' paths past the
 * uncontended one need (a release pops the queue's head itself, below),
 * so an uncontended acquire returns before these are made:
 *   live(z)  drops expired members of a zset of tokens scored by expiry
 *            and returns the latest expiry left, or nil;
 *   keep(z, ms, fresh)  makes z live at least ms more: one PEXPIRE GT
 *            when z has an expiry (it always has but just after it is
 *            made), then PEXPIRE NX for a z just made (no expiry yet);
 *            with fresh (z was most likely just made: the queueing
 *            waiter found the queue empty) NX first, then GT: at most
 *            two calls either way, never PTTL.  Redis 7.0's GT and NX:
 *            an older server refuses them, which costs it an error and
 *            the PTTL's way.  KEEP_FN, which the renewal of a read hold
 *            makes too;
 *   qhead()  the fair queue's first live waiter (its token and the
 *            expiry of its registration), dropping the entries ahead of
 *            it whose registration as a waiting writer lapsed (a waiter
 *            that died or gave up; its registration goes too, so that
 *            should it come back it queues anew, at the end): the queue
 *            never wedges on a dead waiter.
 *
 * The holder is named in the lock hash by its token (owner) and by who
 * holds it, "host:pid:tid" (who).
 *
 * The fair queue (every mutex but on Redlock): a list, in the server's
 * order, of entries "TOKEN|LEASE|ROBUST|DELIVERY|WHO" -- what a release
 * needs to hand the waiter the lock: its lease, robustness, how it hears of
 * a grant and host:pid:tid.  A waiting acquirer joins it (RPUSH) when its
 * registration as a waiting writer is new; a later attempt, which refreshes
 * that registration, looks for its entry (LPOS), rewrites it in place (LSET)
 * if it says something else (its delivery changed), and joins only if it is
 * not there (a waiter held back by the handoff window registered without
 * queueing).  The queue's commands are redis.pcall'ed: a user whose ACL line
 * predates the list (no +lpop +lindex +lpos +lset +lrange +lrem, or no
 * +rpush either) gets no order -- a refused push queues nobody, a refused
 * read finds nobody queued, a refused pop grants nobody and the release
 * publishes "released" -- rather than an error, or worse a release that
 * fails and leaves its hold.  A release hands the lock straight to the
 * queue's head and tells that waiter alone: it pushes "FENCE:MS"
 * ("FENCE:MS:C" to a caching waiter, whose grant marks the hold cached:
 * C 1 nobody else waits, it may keep the lock at its unlock; 2
 * others wait, it may not) to the waiter's grant list <lock key>:g:<token>,
 * on which the waiter blocks in BLPOP (delivery 2: the server answers the
 * waiter itself, before any other), or publishes "TOKEN:FENCE:MS" on the
 * release channel (delivery 1: the waiting process's subscriber hears it;
 * the fallback where BLPOP cannot be used, and where the push is refused: an
 * ACL without RPUSH, whose user cannot BLPOP either, so the waiter,
 * subscribed, will hear it).  A grant is leased for MS = at most GRANT_MS
 * until the new holder renews it, so one given to a waiter that died in the
 * meantime runs out soon.  The waiter takes the lock from the grant alone
 * when its last request (sent before the grant) plus MS is still ahead;
 * otherwise it confirms with one acquire, which finds the lock already its
 * own (lock.c). */
#define KEYS_PRELUDE                                                              \
    "local K = KEYS\n"                                                            \
    "if #K <= 2 then\n"                                                           \
    "  local p = K[1]\n"                                                          \
    "  K = {p, p .. ':fence', p .. ':state', p .. ':readers', p .. ':writers', p .. ':handoff',\n" \
    "       p .. ':fifo', K[2]}\n"                                                 \
    "end\n"
#define GRANT_MS "2000"
/* Fences are the server's clock in nanoseconds (TIME's seconds and
 * microseconds, then "000"), or the last fence + 1 when that is not
 * greater: 19 digits, beyond a Lua number's exact range (2^53), so the
 * scripts never make a number of one.  They compare fences as text
 * (digits, no leading zeros: longer is larger) and add one to the text
 * (FENCE_SUCC); Redis keeps them as strings (the server's own INCR would
 * be exact, but its answer reaches Lua as a double).  A fence is then at
 * most its server's clock when issued (a server issues far fewer than
 * 1000 fences a microsecond), so the fence key never runs ahead of the
 * clock and its expiry need not follow it: once gone (lost, restored
 * from an older copy, or expired), the clock alone puts the next fence
 * above every earlier one (docs/fencing.md). */
#define FENCE_PX "'3600000'"
/* Statements: fs = the decimal string ls plus one. */
#define FENCE_SUCC(ls)                                                            \
    "  local i = #" ls "\n"                                                       \
    "  while string.byte(" ls ", i) == 57 do i = i - 1 end\n"                     \
    "  if i == 0 then fs = '1' .. string.rep('0', #" ls ")\n"                     \
    "  else fs = string.sub(" ls ", 1, i - 1) .. string.char(string.byte(" ls ", i) + 1) .. string.rep('0', #" ls " - i) end\n"
/* Statements: local fs = the next fence of the fence key fk, max(last +
 * 1, the clock), from sec and usd (TIME's seconds, its microseconds as
 * six digits), written to fk (SET ... GET: one call stores it and reads
 * the last; a second SET only when the last was not below the clock). */
#define FENCE_FROM(fk, sec, usd)                                                  \
    "local fs = " sec " .. " usd " .. '000'\n"                                    \
    "local ls = redis.call('SET', " fk ", fs, 'PX', " FENCE_PX ", 'GET')\n"       \
    "if ls and (#ls > #fs or (#ls == #fs and ls >= fs)) then\n"                   \
    FENCE_SUCC("ls")                                                              \
    "  redis.call('SET', " fk ", fs, 'PX', " FENCE_PX ")\n"                       \
    "end\n"
/* Statements: reads TIME into tt (seconds) and tu (microseconds, six
 * digits), then FENCE_FROM. */
#define FENCE_TIMED(fk)                                                           \
    "local tt = redis.call('TIME')\n"                                             \
    "local tu = tt[2]\n"                                                          \
    "if #tu < 6 then tu = string.rep('0', 6 - #tu) .. tu end\n"                   \
    FENCE_FROM(fk, "tt[1]", "tu")
#define CLOCK_VARS "local t, us, now, nows\n"
#define CLOCK_READ                                                                \
    "t = redis.call('TIME')\n"                                                    \
    "us = t[2]\n"                                                                 \
    "if #us < 6 then us = string.rep('0', 6 - #us) .. us end\n"                   \
    "nows = t[1] .. string.sub(us, 1, 3)\n"
#define FENCE_NEXT /* statements: local fs = the next fence */ FENCE_FROM("K[2]", "t[1]", "us")
#define FENCE_FN "local function fence()\n" FENCE_NEXT "return fs\nend\n"
#define KEEP_FN                                                                   \
    "local function keep(z, ms, fresh)\n"                                         \
    "  local e = string.format('%d', ms)\n"                                       \
    "  if fresh and redis.pcall('PEXPIRE', z, e, 'NX') == 1 then return end\n"   \
    "  local r = redis.pcall('PEXPIRE', z, e, 'GT')\n"                            \
    "  if r == 1 then return end\n"                                              \
    "  if r == 0 then\n"                                                          \
    "    if not fresh then redis.call('PEXPIRE', z, e, 'NX') end\n"              \
    "    return\n"                                                               \
    "  end\n"                                                                    \
    "  local p = redis.call('PTTL', z)\n"                                         \
    "  if p == -1 or p < ms then redis.call('PEXPIRE', z, e) end\n"               \
    "end\n"
#define LOCK_REST                                                                 \
    "local function live(z)\n"                                                    \
    "  if redis.call('EXISTS', z) == 0 then return nil end\n"                     \
    "  redis.call('ZREMRANGEBYSCORE', z, '-inf', nows)\n"                         \
    "  local r = redis.call('ZRANGE', z, '-1', '-1', 'WITHSCORES')\n"             \
    "  if #r > 0 then return tonumber(r[2]) end\n"                                \
    "  return nil\n"                                                              \
    "end\n"                                                                       \
    KEEP_FN                                                                       \
    "local function qhead()\n"                                                    \
    "  while true do\n"                                                           \
    "    local e = redis.pcall('LINDEX', K[7], '0')\n"                            \
    "    if type(e) ~= 'string' then return nil end\n"                            \
    "    local tk = string.match(e, '^([^|]+)|')\n"                               \
    "    local sc = (tk and redis.call('ZSCORE', K[5], tk) or 0) + 0\n"           \
    "    if sc > now then return tk, sc end\n"                                    \
    "    redis.pcall('LPOP', K[7])\n"                                             \
    "    if tk then redis.call('ZREM', K[5], tk) end\n"                           \
    "  end\n"                                                                     \
    "end\n"

/* Statements: a caller that found the lock p held by another (hm: the
 * hash's owner, cache and w, by HMGET) learns for how long (wait, which
 * must be declared: the lock's PTTL), tells a caching holder that it is
 * wanted, and, when it will wait (the Lua expression waits), marks the
 * hash (w) unless it is marked.  ARGV_WHO: the caller's host:pid:tid, from
 * the exclusive acquire's "SINCE WHO" argument. */
#define HELD_BY_ANOTHER(p, hm, waits)                                             \
    "wait = redis.call('PTTL', " p ")\n"                                          \
    "if " hm "[2] == '1' then redis.call('PUBLISH', " p ", 'wanted') end\n"       \
    "if " waits " and not " hm "[3] then redis.call('HSET', " p ", 'w', '1') end\n"
#define ARGV_WHO "(string.match(ARGV[4], '^%d+ (.*)$') or ARGV[4])"

/* Statements: q, the entries of the fair queue qk, and at, the index in
 * q of the first of tok's (qk and tok: Lua expressions), or nil -- a
 * linear scan, for the rare requests that look for a waiter's entry by
 * its token (a refresh whose entry changed or went, a withdrawal). */
#define QUEUE_FIND(qk, tok)                                                       \
    "local q, at = redis.pcall('LRANGE', " qk ", '0', '-1'), nil\n"              \
    "if q.err then q = {} end\n"                                                 \
    "for i = 1, #q do\n"                                                         \
    "  if string.sub(q[i], 1, #" tok " + 1) == " tok " .. '|' then at = i break end\n" \
    "end\n"

/* The fair queue's entry, "TOK|LEASE|RB|Q|L|SINCE|WHO": the waiter's
 * token, lease ms, robust (0/1), delivery (Q: 1-4, acquire_lua), L (0:
 * the waiter registers its wait itself, waits_lua; 1: a waiter that holds
 * nothing, listed by this entry and never registered; 2: the same, with
 * deadlock detection on), since when its call waits (ms, the waiter's
 * clock; empty when L is 0) and its host:pid:tid.  QUEUE_ENTRY matches
 * one: six captures (all but SINCE: a grant's); QUEUE_LISTED one whose
 * L is 1 or 2: TOK, L, SINCE, WHO (waits_lua's list). */
#define QUEUE_ENTRY "'^([^|]+)|(%d+)|([01])|([1-4])|([0-2])|%d*|(.*)$'"
#define QUEUE_LISTED "'^([^|]+)|%d+|[01]|[1-4]|([12])|(%d*)|(.*)$'"

/* Statements: a caller that will wait registers as a waiting writer
 * (zset wk, scored by now + lease: the Lua numbers now and lease) and,
 * when it queues (q, its delivery, is not '0'), joins the fair queue qk
 * with its entry (QUEUE_ENTRY; tok, ls, rb, q, who: Lua strings; L and
 * SINCE from the flags fl, acquire_lua's; all the same at every attempt
 * of a call) at its end when its registration is new; a refresh finds the entry (LPOS), rewrites it in
 * place if it says something else (QUEUE_FIND, LSET), or joins at the end
 * if it is not there.  Then keep(), which must be defined, keeps both
 * keys for twice the lease. */
#define REGISTER(tok, ls, rb, q, who, wk, qk)                                     \
    "local new = redis.call('ZADD', " wk ", string.format('%d', now + lease), " tok ")\n" \
    "local fresh = false\n"                                                      \
    "if " q " ~= '0' then\n"                                                     \
    "  local e = " tok " .. '|' .. " ls " .. '|' .. " rb " .. '|' .. " q " .. '|' ..\n"            \
    "            (#fl > 5 and string.sub(fl, 6, 6) or '0') .. '|' .. string.sub(fl, 7) .. '|' .. " who "\n" \
    "  if new == 1 then fresh = redis.pcall('RPUSH', " qk ", e) == 1\n"          \
    "  elseif redis.pcall('LPOS', " qk ", e) == false then\n"                    \
    "    " QUEUE_FIND(qk, tok)                                                    \
    "    if at then redis.call('LSET', " qk ", string.format('%d', at - 1), e)\n" \
    "    else fresh = redis.pcall('RPUSH', " qk ", e) == 1 end\n"                \
    "  end\n"                                                                    \
    "  keep(" qk ", 2 * lease, fresh)\n"                                         \
    "end\n"                                                                      \
    "keep(" wk ", 2 * lease, fresh)\n"

/* The string form's patterns: its four fields (owner token, fence or "-",
 * since, who), and its owner token alone. */
#define FORM_FIELDS "'^(%S+) (%S+) (%d+) (.*)$'"
#define FORM_OWNER "'^(%S+) '"
/* A Lua expression: the string form v (a Lua string) is held by tok (a
 * token: no spaces) -- FORM_OWNER's test by a prefix, fewer instructions
 * than a match; for the release, renewal and the pipelined SET's
 * take-back. */
#define FORM_OWNED(v, tok) "string.sub(" v ", 1, #" tok " + 1) == " tok " .. ' '"
/* LOCK_NORM: a lock taken on the uncontended path is a string (see
 * acquire_lua); every path past it that reads or marks the holder first
 * turns such a string into the hash it stands for, with the same expiry
 * (a string that does not parse is left alone: the hash calls that
 * follow then fail, and the caller is told, rather than a hold be lost).
 * LOCK_NORM_OF(read): the same, the lock key's value (or false) read by
 * the Lua expression read, which may use a value read before. */
#define LOCK_NORM LOCK_NORM_OF("redis.call('MGET', K[1])[1]")
#define LOCK_NORM_OF(read)                                                        \
    "local lv = " read "\n"                                                      \
    "if lv then\n"                                                                \
    "  local o, f, s, w = string.match(lv, " FORM_FIELDS ")\n"                    \
    "  if o then\n"                                                               \
    "    local ttl = redis.call('PTTL', K[1])\n"                                  \
    "    redis.call('DEL', K[1])\n"                                               \
    "    if ttl ~= -2 then\n"                                                     \
    "      if f == '-' then redis.call('HSET', K[1], 'owner', o, 'who', w, 'since', s)\n" \
    "      else redis.call('HSET', K[1], 'owner', o, 'fence', f, 'who', w, 'since', s) end\n" \
    "      if ttl > 0 then redis.call('PEXPIRE', K[1], ttl) end\n"                \
    "    end\n"                                                                   \
    "  end\n"                                                                     \
    "end\n"

/* The prelude of the acquire scripts, on A, their arguments in this
 * order: A[1] token, A[2] lease ms, A[3] restart guard ms ("0": off)
 * (the shared acquire's ARGV; the exclusive acquire unpacks its own).
 *
 * The restart guard (Redis's "delayed restart" advice, done in data): a
 * server restarted without persistence has forgotten every holder, who
 * may still believe, until its next renewal is refused, that it holds its
 * lock.  With a guard, the first acquire that finds no epoch key writes
 * one saying "nothing is granted before now + guard", and every acquire
 * until then answers busy.  A guard at least as long as the longest lease
 * makes holds from before the data loss run out first.  The price: a
 * brand-new server also waits one guard period before its first grant. */
#define ACQUIRE_CLOCK KEYS_PRELUDE CLOCK_VARS CLOCK_READ
#define ACQUIRE_PRELUDE                                                           \
    "now = nows + 0\n"                                                            \
    FENCE_FN                                                                      \
    "local lease = A[2] + 0\n"                                                    \
    "if A[3] ~= '0' then\n"                                                       \
    "  local guard = tonumber(A[3])\n"                                            \
    "  local nb = tonumber(redis.call('GET', K[8]) or '')\n"                      \
    "  if not nb then\n"                                                          \
    "    nb = now + guard\n"                                                      \
    "    redis.call('SET', K[8], string.format('%.0f', nb))\n"                    \
    "  end\n"                                                                     \
    "  if now < nb then return {0, nb - now} end\n"                               \
    "end\n"

/* The uncontended path's hold (acquire_lua): the next fence of the fence
 * key fk (FENCE_TIMED), the lock key p set to the string form, with the
 * lease; answers the fence alone. */
#define STRING_TAKE(p, fk)                                                        \
    FENCE_TIMED(fk)                                                               \
    "redis.call('SET', " p ", ARGV[1] .. ' ' .. fs .. ' ' .. ARGV[4], 'PX', ARGV[2])\n" \
    "do return fs end\n"

/* Exclusive acquire (mutex, write lock).  ARGV: [1] token, [2] lease ms,
 * [3] four flags "RWQC" (or five or six, below), [4] "SINCE WHO" (the caller's
 * wall clock in ms, host:pid:tid), [5] restart guard ms (absent: off) -- few arguments,
 * since each costs the server on every call (bench/README.md).  The
 * uncontended path reads them as they come; the others unpack them as
 * A[1..8]: token, lease, guard, who, and the flags: [5]
 * robust ("1"/"0"), [6] wait ("1": the caller will wait, so register it
 * as a waiting writer, which holds new readers back, and tells a releaser
 * that someone waits), [7] queue ("0": no; with [6], take a place in the
 * fair queue, and be told of a grant by "1": a message on the release
 * channel, "2": a push to the grant list; "3" and "4": the same for a
 * caching waiter, whose grant marks its hold cached; every
 * queuing request says it anew), [8] caching ("1": mark the hold
 * cached, and answer whether others wait -- queued, or registered as
 * waiting writers -- as a third element, 1 or 0: their requests may
 * have come before the hash said "cache", so no "wanted" message told
 * the holder, which must then not keep the lock at its unlock); a fifth
 * flag, V ("1", sent only then), says that the caller's pipelined SET
 * took the lock as a string but found others' keys, or got no fence
 * (backend.c, plain_acquire; one server only, KEYS[1] the lock): that
 * string, if still the caller's, is taken back first ("released"
 * published if a waiter made it a hash and marked it meanwhile), and the
 * call goes on as any other: a lock found free with nobody there is
 * taken on the script's uncontended path, its string keeping its fence.  The fifth flag is H
 * ("2") instead when the lock was held at this process's last
 * acquisition, or this call has waited, or the pipelined SET has just
 * found it held -- sent only for a lock the uncontended path may take
 * (not robust, not caching, no restart guard): the script reads the
 * holder first and skips the uncontended path's EXISTS, which would most
 * likely find the lock held (one call fewer for a waiter); a lock it
 * finds free with nobody there is taken as the string all the same, so
 * that the next acquisition may take the pipelined path.  A caller that
 * queues sends six flags (the fifth "0" when neither V nor H) and, when
 * the sixth, L, is not "0", the digits of when its call began (ms, its
 * clock): both go into its queue entry (QUEUE_ENTRY: L "0" it registers
 * its wait itself, "1" or "2" it holds nothing and its entry lists it,
 * as waiting since then).  While the
 * fair queue has a live waiter, the lock goes to nobody else, fair or
 * not: a free lock with a queue is taken only by the queue's head.  A
 * thread that has just released the lock while others waited is held
 * back for the handoff window (see release_lua), so that a waiter, which
 * has to be woken first, gets its turn instead of the releaser taking the
 * lock straight back.  A free lock with no readers, waiters or queue
 * (one EXISTS tells) is taken at once: when neither robust nor caching
 * nor guarded, by four calls made before anything else (that EXISTS,
 * the fence's TIME and SET ... GET (a second SET only when the last
 * fence was not below the clock), the SET of the string form, with its
 * lease), answering the fence alone.  A
 * caller that will wait for a lock another holds marks its hash (w).
 * Returns the fence alone (a string) acquired on the uncontended path;
 * {1, fence} acquired; {4, fence} acquired, but the last robust
 * holder died holding it (EOWNERDEAD); {2, fence} already held by this
 * token (an earlier attempt whose answer was lost, or a fair grant; the
 * lease starts again) -- each with the third element "others wait" when
 * caching; {0, ms, last} held by another (a writer, or
 * readers, or promised to the queue's head) for about ms, last being the
 * holder's fence, or the fence key's where the lock keeps none (readers,
 * a string's "-"; '' if there is none): every grant made before this
 * answer has a fence at most the holder's (each take and grant issues
 * its fence above all before it), every grant after it one above the
 * fence key's, so a grant the caller hears of later was made after this
 * answer only if its fence is above last (lock.c) -- read with the
 * holder, one call fewer than a GET of the fence key; {5, ms} free, but this
 * thread released it while others waited and is held back for ms (a call
 * that waits; trylock is never held back); {3, 0} robust and not
 * recoverable.  Only robust acquirers read or write the state key. */
static const char acquire_lua[] =
    "local fl = ARGV[3]\n"
    /* V: the caller's string (or the hash a waiter made of it) goes.  Not
     * release_lua's way: this was never a hold (readers or the queue's
     * head may be there beside it), so nobody is granted it; the waiters
     * that saw it are only told. */
    "if string.byte(fl, 5) == 49 then\n"
    "  local p = KEYS[1]\n"
    "  local v = redis.call('MGET', p)[1]\n"
    "  if v then\n"
    "    if " FORM_OWNED("v", "ARGV[1]") " then redis.call('DEL', p) end\n"
    "  else\n"
    "    local hm = redis.call('HMGET', p, 'owner', 'w')\n"
    "    if hm[1] == ARGV[1] then\n"
    "      if hm[2] then redis.call('PUBLISH', p, 'released') end\n"
    "      redis.call('DEL', p)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local held = string.byte(fl, 5) == 50\n"
    "local asked = not ARGV[5] and string.byte(fl, 1) == 48 and string.byte(fl, 4) == 48\n"
    "if asked and not held then\n"
    "  local p, fk, n = KEYS[1]\n"
    "  if #KEYS == 1 then\n"
    "    fk = p .. ':fence'\n"
    "    n = redis.call('EXISTS', p, p .. ':readers', p .. ':writers', p .. ':handoff', p .. ':fifo')\n"
    "  else\n"
    "    fk = KEYS[2]\n"
    "    n = redis.call('EXISTS', p, KEYS[4], KEYS[5], KEYS[6], KEYS[7])\n"
    "  end\n"
    "  if n == 0 then\n"
    STRING_TAKE("p", "fk")
    "  end\n"
    "end\n"
    /* H and W: a waiter that most likely finds the lock held.  Held as a
     * hash by another, it waits, and its path is written out here, before
     * the tables, functions and flags the others need are made (~20k
     * instructions a handoff; bench/README.md).  Otherwise what it read
     * (lv0: the lock key as a string, or false; hm0: the hash's holder and
     * marks) goes on to the paths below, which read it no more. */
    "local lv0, hm0\n"
    "if held and string.byte(fl, 2) == 49 then\n"
    "  local p = KEYS[1]\n"
    "  lv0 = redis.call('MGET', p)[1]\n"
    "  if not lv0 then\n"
    "    hm0 = redis.call('HMGET', p, 'owner', 'cache', 'w', 'fence')\n"
    "    if hm0[1] and hm0[1] ~= ARGV[1] then\n"
    "      local wait\n"
    HELD_BY_ANOTHER("p", "hm0", "true")
    "      local wk, qk = KEYS[5], KEYS[7]\n"
    "      if not wk then wk, qk = p .. ':writers', p .. ':fifo' end\n"
    "      local t = redis.call('TIME')\n"
    "      local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "      local lease = ARGV[2] + 0\n"
    "      local who = " ARGV_WHO "\n"
    KEEP_FN
    REGISTER("ARGV[1]", "ARGV[2]", "'0'", "string.sub(fl, 3, 3)", "who", "wk", "qk")
    "      return {0, wait, hm0[4] or redis.call('GET', KEYS[5] and KEYS[2] or p .. ':fence') or ''}\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local A = {ARGV[1], ARGV[2], ARGV[5] or '0', " ARGV_WHO ",\n"
    "           string.sub(fl, 1, 1), string.sub(fl, 2, 2), string.sub(fl, 3, 3), string.sub(fl, 4, 4)}\n"
    ACQUIRE_CLOCK
    LOCK_NORM_OF("lv0 == nil and redis.call('MGET', K[1])[1] or lv0")
    ACQUIRE_PRELUDE
    "local robust = A[5] == '1'\n"
    "local state = false\n"
    "if robust then\n"
    "  state = redis.call('GET', K[3])\n"
    "  if state == 'notrecoverable' then return {3, 0} end\n"
    "end\n"
    "local function reserve(fs)\n"
    "  redis.call('HSET', K[1], 'fence', fs, 'cache', '1')\n"
    "  if redis.call('EXISTS', K[7]) == 1 then return 1 end\n"
    "  local n = redis.call('ZCARD', K[5])\n"
    "  if n > 1 or (n == 1 and not redis.call('ZSCORE', K[5], A[1])) then return 1 end\n"
    "  return 0\n"
    "end\n"
    "local rw = false\n"
    "local function take()\n"
    "  local fs = fence()\n"
    "  if rw then\n"
    "    redis.call('HSET', K[1], 'owner', A[1], 'fence', fs, 'who', A[4], 'since', nows, 'w', '1')\n"
    "  else\n"
    "    redis.call('HSET', K[1], 'owner', A[1], 'fence', fs, 'who', A[4], 'since', nows)\n"
    "  end\n"
    "  redis.call('PEXPIRE', K[1], A[2])\n"
    "  local others = nil\n"
    "  if A[8] == '1' then others = reserve(fs) end\n"
    /* The marker, and who set it on a clean lock (release_lua, "undo").
     * The marker a lapsed earlier attempt of this very call set (its
     * answer lost, the request asked again) is no holder's death. */
    "  if robust then\n"
    "    redis.call('SET', K[3], 'held')\n"
    "    if state == 'held' and redis.call('GET', K[1] .. ':taker') ~= A[1] then\n"
    "      redis.call('DEL', K[1] .. ':taker')\n"
    "      return {4, fs, others}\n"
    "    end\n"
    "    redis.call('SET', K[1] .. ':taker', A[1])\n"
    "  end\n"
    "  return {1, fs, others}\n"
    "end\n"
    "if not asked and not held and redis.call('EXISTS', K[1], K[4], K[5], K[6], K[7]) == 0 then return take() end\n"
    LOCK_REST
    "local hm = hm0 or redis.call('HMGET', K[1], 'owner', 'cache', 'w', 'fence')\n"
    "local owner = hm[1]\n"
    "if owner == A[1] then\n"
    "  redis.call('PEXPIRE', K[1], A[2])\n"
    "  if A[8] == '1' then\n"
    "    local fs = fence()\n"
    "    return {2, fs, reserve(fs)}\n"
    "  end\n"
    "  local fs = hm[4]\n"
    "  if not fs then\n" /* a string hold keeps no fence: issued anew */
    "    fs = fence()\n"
    "    redis.call('HSET', K[1], 'fence', fs)\n"
    "  end\n"
    "  return {2, fs}\n"
    "end\n"
    "local wait, h = nil, nil\n"
    "if owner then\n"
    HELD_BY_ANOTHER("K[1]", "hm", "A[6] == '1'")
    "elseif redis.call('EXISTS', K[4], K[5], K[6], K[7]) > 0 then\n"
    "  rw = true\n"
    "  local r = live(K[4])\n"
    "  if r then wait = r - now end\n"
    "  local hx\n"
    "  if not wait then h, hx = qhead() end\n"
    "  if h and h ~= A[1] then\n"
    "    wait = hx - now\n"
    "  elseif not wait and not h and A[6] == '1' and redis.call('GET', K[6]) == A[4] then\n"
    "    redis.call('ZADD', K[5], string.format('%d', now + lease), A[1])\n"
    "    keep(K[5], 2 * lease)\n"
    "    return {5, redis.call('PTTL', K[6])}\n"
    "  end\n"
    "elseif asked then\n" /* H, but the lock free and nobody there */
    STRING_TAKE("K[1]", "K[2]")
    "end\n"
    "if wait then\n"
    "  if A[6] == '1' then\n"
    REGISTER("A[1]", "A[2]", "A[5]", "A[7]", "A[4]", "K[5]", "K[7]")
    "  end\n"
    "  return {0, wait, owner and hm[4] or redis.call('GET', K[2]) or ''}\n"
    "end\n"
    "if rw then\n" /* its registration goes, and, if it is the queue's head, its entry */
    "  redis.call('ZREM', K[5], A[1])\n"
    "  if h then redis.pcall('LPOP', K[7]) end\n"
    "end\n"
    "return take()\n";

/* Shared acquire (read lock).  ARGV[4] "1": prefer readers (a reader
 * waits only while a writer holds the lock: flock(2) semantics; waiting
 * or queued writers, fair or not, do not hold it back), else writers
 * first (a reader waits while a writer holds the lock or waits for it,
 * so a stream of readers never starves a writer).  Returns as acquire_lua
 * ({1, fence}, {2, fence}, {0, ms}). */
static const char acquire_shared_lua[] =
    "local A = ARGV\n"
    ACQUIRE_CLOCK
    LOCK_NORM
    ACQUIRE_PRELUDE
    LOCK_REST
    "local hm = redis.call('HMGET', K[1], 'owner', 'cache', 'w')\n"
    "if hm[1] then\n"
    "  local wait\n"
    HELD_BY_ANOTHER("K[1]", "hm", "true")
    "  return {0, wait}\n"
    "end\n"
    "local sc = redis.call('ZSCORE', K[4], ARGV[1])\n"
    "if sc and tonumber(sc) > now then\n"
    "  redis.call('ZADD', K[4], string.format('%d', now + lease), ARGV[1])\n"
    "  keep(K[4], 2 * lease)\n"
    "  return {2, redis.call('GET', K[2]) or '1'}\n"
    "end\n"
    "if ARGV[4] ~= '1' then\n"
    "  local w = live(K[5])\n"
    "  if w then return {0, w - now} end\n"
    "end\n"
    "redis.call('ZADD', K[4], string.format('%d', now + lease), ARGV[1])\n"
    "keep(K[4], 2 * lease)\n"
    "return {1, fence()}\n";

/* ARGV: token, "HOW WINDOW WHO" (how, the handoff window ms, the releaser
 * host:pid:tid: one argument, read past the uncontended path only); the
 * release channel is the lock key.  Ends the token's hold and wakes the
 * waiters; 1 if released, 0 if the token did not hold it.  A hold in the
 * string form (acquire_lua) is never marked: its release is the raw
 * compare-and-delete (MGET, DEL).  A script tells the two forms apart
 * by an MGET of the lock key: it answers a string's value, and nil for
 * a hash (or no key) without an error -- one call where TYPE and GET
 * were two.  how: "plain" (not robust), "hash" (plain, of a hold the
 * client knows to be the hash -- taken past the uncontended path, which
 * no script turns back into a string: no MGET; should tok's lease have
 * run out and another taken the lock as the string, the HMGET's
 * WRONGTYPE, caught, answers 0, the one case where a release makes the
 * server count an error), "clean" (robust:
 * forget the marker), "inconsistent" (robust, unlocked after EOWNERDEAD
 * without consistent: unrecoverable for everyone), "dead" (robust, the
 * holder died: the next acquirer gets EOWNERDEAD), "undo" (robust, an
 * acquisition taken back unused: "clean" or "dead" as its take found the
 * lock), "shared" (a read hold), "withdraw" (not a hold: a writer that stopped waiting takes back
 * its registration and its place in the fair queue, so readers need not
 * wait for it to lapse; if the queue had meanwhile granted it the lock,
 * that grant is released as a hold would be).
 *
 * A release that leaves the lock free hands it to the fair queue's head
 * when there is one (and no robust marker needs the head's own acquire to
 * see it: then the head is only woken), taking the head off the waiters'
 * list (waits_lua: its wait ends here, and it need not say so itself);
 * otherwise it publishes
 * "released", and when live writers wait and nobody is queued, the
 * releasing thread is held back from the lock for the handoff window
 * (acquire_lua).  When the hash was never marked (w), nobody can be
 * waiting for this release, and it tells nobody: a plain release of a
 * hash is then three calls (the MGET, one HMGET of the owner and the
 * mark, the DEL). */
static const char release_lua[] =
    "local tok, hw = ARGV[1], ARGV[2]\n"
    "local c1 = string.byte(hw, 1)\n"
    "local marked, cached, gone\n"
    "if c1 ~= 115 and c1 ~= 119 then\n" /* neither "shared" nor "withdraw": a hold */
    "  local hm\n"
    "  if c1 == 104 then\n" /* "hash": it was, and is while tok holds it */
    "    hm = redis.pcall('HMGET', KEYS[1], 'owner', 'w', 'cache')\n"
    "    if hm.err then return 0 end\n" /* a string: another's, since tok's lease ran out */
    "  else\n"
    "    local v = redis.call('MGET', KEYS[1])[1]\n"
    "    if v then\n"
    "      if not (" FORM_OWNED("v", "tok") ") then return 0 end\n"
    "      redis.call('DEL', KEYS[1])\n"
    "      return 1\n"
    "    end\n"
    "    hm = redis.call('HMGET', KEYS[1], 'owner', 'w', 'cache')\n"
    "  end\n"
    "  if hm[1] ~= tok then\n"
    "    if c1 ~= 117 or hm[1] then return 0 end\n" /* an "undo" of a hold that lapsed: below */
    "    gone = true\n"
    "  end\n"
    "  marked, cached = hm[2], hm[3]\n"
    "  if (c1 == 112 or c1 == 104) and not marked then\n" /* "plain", "hash" */
    "    redis.call('DEL', KEYS[1])\n"
    "    return 1\n"
    "  end\n"
    "end\n"
    /* how by its first letter, which tells each apart; WINDOW and WHO are
     * read only where a release holds its thread back (~2k instructions a
     * handoff less than matching the three at once). */
    "local how = c1\n"
    KEYS_PRELUDE
    /* "undo": the hold is given back as if never taken.  Taken on a clean
     * lock (the taker key names it) it ends "clean", and, should its lease
     * have run out meanwhile with nobody taking the lock since, its marker
     * goes all the same; else (it found the marker) "dead". */
    "if how == 117 then\n"
    "  local fresh = redis.call('GET', K[1] .. ':taker') == tok\n"
    "  if gone then\n"
    "    if fresh and redis.call('GET', K[3]) == 'held' then redis.call('DEL', K[3], K[1] .. ':taker') end\n"
    "    return 0\n"
    "  end\n"
    "  how = fresh and 99 or 100\n"
    "end\n"
    "if how == 119 then\n" /* "withdraw" */
    LOCK_NORM
    "  local was = redis.call('ZREM', K[5], tok)\n"
    "  " QUEUE_FIND("K[7]", "tok")
    "  if at then redis.call('LREM', K[7], '0', q[at]) end\n"
    "  redis.call('DEL', K[1] .. ':g:' .. tok)\n"
    "  local hm = redis.call('HMGET', K[1], 'owner', 'w', 'rb', 'cache')\n"
    "  if hm[1] ~= tok then\n"
    "    if was == 1 then redis.call('PUBLISH', K[1], 'released') end\n"
    "    return 0\n"
    "  end\n"
    "  marked, cached = hm[2], hm[4]\n"
    "  how = 112\n" /* "plain" */
    "  if hm[3] == '1' then how = 99 end\n" /* "clean" */
    "end\n"
    "if how == 115 then\n" /* "shared" */
    "  if redis.call('ZREM', K[4], tok) == 1 then\n"
    "    redis.call('PUBLISH', K[1], 'released')\n"
    "    return 1\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    /* The lock key goes (DEL) on every way out but a grant, which
     * rewrites the hash in place (one call fewer). */
    "if how == 99 then redis.call('DEL', K[3], K[1] .. ':taker')\n" /* "clean" */
    "elseif how == 105 then redis.call('SET', K[3], 'notrecoverable') end\n" /* "inconsistent" */
    "if not marked then\n"
    "  redis.call('DEL', K[1])\n"
    "  return 1\n"
    "end\n"
    /* The clock and the fence as statements, not functions: a script
     * makes its functions anew at every run. */
    CLOCK_VARS
    /* The queue's live head, popped (the dead ones before it go), with no
     * EXISTS first: an LPOP of no list answers nil as cheaply.  A release
     * that leaves the robust marker ("dead", "inconsistent") grants
     * nobody: the next robust acquirer must meet it.  A plain one asks for
     * the marker only when the head is robust -- a head that is not never
     * reads it, and its own acquire would take the lock all the same --
     * and, finding it (robustness mixed on one name), puts the head back
     * in its place (no LPUSH in the README's ACL line: the entries move
     * one place up, by LSET, as rare as the case is): its acquire, woken
     * by "released", meets the marker. */
    "local h, ls, rb, d, lf, who, back\n"
    "local pops = how ~= 100 and how ~= 105\n" /* neither "dead" nor "inconsistent" */
    "if pops then\n"
    "  while true do\n"
    "    local e = redis.pcall('LPOP', K[7])\n"
    "    if type(e) ~= 'string' then break end\n"
    "    if not now then\n"
    CLOCK_READ
    "      now = nows + 0\n"
    "    end\n"
    "    local t1, t2, t3, t4, t5, t6 = string.match(e, " QUEUE_ENTRY ")\n"
    "    if t1 and (redis.call('ZSCORE', K[5], t1) or 0) + 0 > now then\n"
    "      if t3 == '1' and how ~= 99 and redis.call('EXISTS', K[3]) == 1 then\n"
    "        local q = redis.call('LRANGE', K[7], '0', '-1')\n"
    "        redis.call('RPUSH', K[7], e)\n"
    "        for i = #q, 1, -1 do redis.call('LSET', K[7], string.format('%d', i), q[i]) end\n"
    "        redis.call('LSET', K[7], '0', e)\n"
    "        if #q == 0 then redis.call('PEXPIRE', K[7], string.format('%d', 2 * tonumber(t2))) end\n"
    "        back = true\n"
    "        break\n"
    "      end\n"
    "      h, ls, rb, d, lf, who = t1, t2, t3, t4, t5, t6\n"
    "      break\n"
    "    end\n"
    "    if t1 then redis.call('ZREM', K[5], t1) end\n"
    "  end\n"
    "end\n"
    "if h then\n"
    "  redis.call('ZREM', K[5], h)\n"
    "  if lf == '0' and redis.call('HDEL', K[1] .. ':wmeta', h) == 1 then redis.call('ZREM', K[1] .. ':waiting', h) end\n"
    "  local g = string.format('%d', math.min(ls, " GRANT_MS "))\n"
    FENCE_NEXT
    "  redis.call('HSET', K[1], 'owner', h, 'fence', fs, 'who', who, 'since', nows, 'rb', rb, 'w', '1')\n"
    "  if cached and d ~= '3' and d ~= '4' then redis.call('HDEL', K[1], 'cache') end\n"
    "  redis.call('PEXPIRE', K[1], g)\n"
    "  if rb == '1' then redis.call('MSET', K[3], 'held', K[1] .. ':taker', h) end\n"
    "  local gs = fs .. ':' .. g\n"
    "  if d == '3' or d == '4' then\n"
    "    redis.call('HSET', K[1], 'cache', '1')\n"
    "    if redis.call('EXISTS', K[5], K[7]) > 0 then gs = gs .. ':2'\n"
    "    else gs = gs .. ':1' redis.call('HDEL', K[1], 'w') end\n"
    "    d = d == '4' and '2' or '1'\n"
    "  end\n"
    "  if d == '2' then\n"
    "    local gk = K[1] .. ':g:' .. h\n"
    "    if type(redis.pcall('RPUSH', gk, gs)) == 'number' then redis.call('PEXPIRE', gk, g)\n"
    "    else d = '1' end\n"
    "  end\n"
    "  if d ~= '2' then redis.call('PUBLISH', K[1], h .. ':' .. gs) end\n"
    "  return 1\n"
    "end\n"
    "redis.call('DEL', K[1])\n"
    /* Live waiting writers and an empty queue: the releasing thread is
     * held back for the window.  (The queue is known empty when the LPOP
     * found nothing.) */
    "local _, win, rwho = string.match(hw, '^(%a+) (%d+) (.*)$')\n"
    "if tonumber(win) > 0 and not back and redis.call('EXISTS', K[5]) == 1\n"
    "   and (pops or redis.call('EXISTS', K[7]) == 0) then\n"
    CLOCK_READ
    "  redis.call('ZREMRANGEBYSCORE', K[5], '-inf', nows)\n"
    "  if redis.call('ZCARD', K[5]) > 0 then\n"
    "    redis.call('SET', K[6], rwho, 'PX', win)\n"
    "  end\n"
    "end\n"
    "redis.call('PUBLISH', K[1], 'released')\n"
    "return 1\n";

/* The one place that decides how a hold ends (the `how` of release_lua):
 * a read hold is "shared"; a hold of a mutex that is not robust,
 * "plain"; of a robust one, "dead" when its holder died or may have (the
 * process exits holding it; an acquire found, or may have found, the
 * owner-died marker and its hold is given back), "inconsistent" when it
 * is unlocked after EOWNERDEAD without consistent(), "clean" otherwise. */
int dlock__release_kind(int shared, int robust, int dead, int inconsistent, int hashed) {
    if (shared) return DLOCK__REL_SHARED;
    if (!robust) return hashed ? DLOCK__REL_HASH : DLOCK__REL_PLAIN;
    if (dead) return DLOCK__REL_DEAD;
    return inconsistent ? DLOCK__REL_INCONSISTENT : DLOCK__REL_CLEAN;
}

/* An acquisition taken back unused leaves the robust marker as it found
 * it: "dead" would leave the marker its own take set on a clean lock, and
 * the next acquirer would get EOWNERDEAD though nobody died holding it. */
int dlock__undo_kind(int shared, int robust) {
    return robust && !shared ? DLOCK__REL_UNDO : dlock__release_kind(shared, robust, 0, 0, 0);
}

/* KEYS: the lock (an exclusive hold) or its readers (a read hold): one
 * key, so that in a cluster slot being migrated the request is served
 * wherever that key is (ASK), never refused for keys not there (TRYAGAIN).
 * ARGV: token, lease ms, "s" for a read hold ("x" not), and, for a hold
 * taken by one server's pipelined SET, its fence, which the renewal
 * records where the lock keeps none (the string's "-", or the hash a
 * waiter made of it).  An exclusive hold in either form (acquire_lua).
 * 1 if renewed, 0 if the token no longer holds it; 2 renewed, but the lock is cached (`cache`)
 * and someone asked for it since (`w`): the holder gives it back (lock
 * caching's bound on how long an idle cached lock is kept once asked for,
 * should the "wanted" message not be heard). */
static const char renew_lua[] =
    "if ARGV[3] == 's' then\n"
    "  local t = redis.call('TIME')\n"
    "  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "  local sc = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
    "  if sc and tonumber(sc) > now then\n"
    "    redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])\n"
    KEEP_FN
    "    keep(KEYS[1], 2 * tonumber(ARGV[2]))\n"
    "    return 1\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local v = redis.call('MGET', KEYS[1])[1]\n"
    "if v then\n"
    "  if not (" FORM_OWNED("v", "ARGV[1]") ") then return 0 end\n"
    "  local n = #ARGV[1]\n"
    "  if ARGV[4] and string.sub(v, n + 1, n + 3) == ' - ' then\n" /* its fence, kept from now on */
    "    redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[4] .. string.sub(v, n + 3), 'PX', ARGV[2])\n"
    "  else\n"
    "    redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  end\n"
    "  return 1\n"
    "end\n"
    "local hm = redis.call('HMGET', KEYS[1], 'owner', 'cache', 'w')\n"
    "if hm[1] ~= ARGV[1] then return 0 end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "if ARGV[4] then redis.call('HSETNX', KEYS[1], 'fence', ARGV[4]) end\n"
    "if hm[2] == '1' and hm[3] == '1' then return 2 end\n"
    "return 1\n";

/* ARGV: channel, how.  The administrative reset: ends every hold, writer
 * and readers alike.  how "break": a robust lock's next acquirer gets
 * EOWNERDEAD (the marker says a holder was cut off); how "reset": the
 * marker goes too, and an unrecoverable lock is usable again.  Returns 1
 * if the lock was held. */
static const char reset_lua[] =
    KEYS_PRELUDE
    "local held = redis.call('DEL', K[1]) + redis.call('DEL', K[4])\n"
    "redis.call('DEL', K[5], K[6], K[7], K[1] .. ':taker')\n" /* the marker is the reset's */
    "if ARGV[2] == 'reset' then redis.call('DEL', K[3]) end\n"
    "redis.call('PUBLISH', ARGV[1], 'released')\n"
    "if held > 0 then return 1 end\n"
    "return 0\n";

/* What `dlock status` shows, in one round trip: {the holder's record as
 * a flat list (the hash, or the string form read as one), its PTTL, the
 * robust state, live readers, live waiting writers, the server's time in
 * ms}. */
static const char info_lua[] =
    KEYS_PRELUDE
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local h\n"
    "local v = redis.call('MGET', K[1])[1]\n"
    "if v then\n"
    "  local o, f, s, w = string.match(v, " FORM_FIELDS ")\n"
    "  h = o and {'owner', o, 'who', w, 'since', s} or {}\n"
    "  if o and f ~= '-' then h[#h + 1] = 'fence' h[#h + 1] = f end\n"
    "else\n"
    "  h = redis.call('HGETALL', K[1])\n"
    "end\n"
    "return {h, redis.call('PTTL', K[1]),\n"
    "        redis.call('GET', K[3]) or '',\n"
    "        redis.call('ZCOUNT', K[4], now + 1, '+inf'),\n"
    "        redis.call('ZCOUNT', K[5], now + 1, '+inf'), now}\n";

/* KEYS: target.  ARGV: fence, value.  A fenced write: the target is a
 * hash {value, fence}; the write happens only if the caller's fence is not
 * older than the fence of the last write, so a holder whose lease ran out
 * (and whose successor already wrote) can never overwrite newer data.
 * Fences are decimal strings of up to 20 digits, compared as such.
 * Returns 1 written, 0 refused as stale. */
static const char fenced_set_lua[] =
    "local cur = redis.call('HGET', KEYS[1], 'fence')\n"
    "local f = ARGV[1]\n"
    "if cur and (#cur > #f or (#cur == #f and cur > f)) then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', f)\n"
    "return 1\n";

/* Condition variables.  KEYS: the waiters zset (also the channel).  ARGV:
 * op, token, ttl ms.  A waiter registers ('wait') before it releases its
 * mutex, so a signal sent after that always finds it: no lost wake-up.
 * 'check' tells a woken waiter whether it is still registered (a wake-up
 * that was not for it) and refreshes it; 'withdraw' takes a timed-out
 * waiter back (0: it had been signalled meanwhile).  'signal' wakes the
 * waiter whose registration is oldest (at least one, as POSIX says);
 * 'broadcast' wakes all.  A registration lapses after ttl unless
 * refreshed, so a waiter that died does not keep absorbing signals.
 * ARGV[4...]: registrations of this process's earlier waits that it could
 * not take back (the server did not answer): removed first, so that they
 * do not absorb the signals meant for the live waiter. */
static const char cond_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local op, ttl = ARGV[1], tonumber(ARGV[3])\n"
    "for i = 4, #ARGV do redis.call('ZREM', KEYS[1], ARGV[i]) end\n"
    "if op == 'wait' or op == 'check' then\n"
    "  if op == 'check' and not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 0 end\n"
    "  redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])\n"
    "  if redis.call('PTTL', KEYS[1]) < 2 * ttl then redis.call('PEXPIRE', KEYS[1], 2 * ttl) end\n"
    "  return 1\n"
    "end\n"
    "if op == 'withdraw' then return redis.call('ZREM', KEYS[1], ARGV[2]) end\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
    "if op == 'signal' then\n"
    "  local w = redis.call('ZPOPMIN', KEYS[1])\n"
    "  if #w == 0 then return 0 end\n"
    "  redis.call('PUBLISH', KEYS[1], 'signal')\n"
    "  return 1\n"
    "end\n"
    "local n = redis.call('ZCARD', KEYS[1])\n"
    "if n > 0 then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  redis.call('PUBLISH', KEYS[1], 'broadcast')\n"
    "end\n"
    "return n\n";

/* The uncontended path of one server (backend.c, plain_acquire),
 * pipelined after its SET NX PX and EXISTS.  KEYS: a lock's fence key.
 * Issues the next fence, max(last + 1, the server's clock in ns), as
 * every acquire does, and answers it (a string). */
static const char fence_next_lua[] = FENCE_TIMED("KEYS[1]") "return fs\n";

/* Redlock (redlock.c): KEYS: a lock's fence key.  ARGV: a fence.  Raises
 * the last fence issued to at least that one, so that every later fence
 * of this master is above it.  Fences are decimal strings, compared as
 * such. */
static const char fence_raise_lua[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "local f = ARGV[1]\n"
    "if not cur or #cur < #f or (#cur == #f and cur < f) then\n"
    "  redis.call('SET', KEYS[1], f, 'PX', 3600000)\n"
    "end\n"
    "return 1\n";

/* Semaphores.  KEYS: value, queue, expiry, granted, done, owners, leases
 * (DLOCK__KS_*, one slot).  ARGV: op, token, ttl ms, arg, remember ms,
 * who (host:pid:tid), lease ms (undo; 0 none), caller and op number
 * (the `done` record; absent: the op is not remembered, as 'renew' in a
 * renewal batch).  The value is a number in a
 * string key with no expiry (a semaphore lives until deleted, as a POSIX
 * named one until sem_unlink); a missing key is 0.  A waiter takes a
 * ticket, one past the last in the queue (FIFO), and registers until
 * now + ttl, refreshed by its next 'take'.  A post with waiters queued
 * leaves the value alone and hands the unit to the queue's head: the
 * head goes from the queue to `granted`, with ttl to take it, and the
 * token alone is published on the value key's channel, so that only
 * that waiter (of whichever process) wakes -- or, to a waiter that
 * queued by a take with ARGV[4] '2' (its `owners` record's KIND is then
 * W, not w), "1:TTL" is pushed to its grant list <value key>:g:<token>,
 * on which it waits in BLPOP, as a fair mutex's waiter does: the server
 * wakes it in the post's own turn, no subscriber thread between (a push
 * the ACL refuses publishes instead).  Either is news only: the unit is
 * the waiter's when its next take claims it from `granted`, so a lost
 * message or a dead waiter loses no unit.  Every op but init first
 * cleans: registrations that lapsed (a waiter that died) leave the
 * queue, a unit handed to a grantee that never took it is posted again
 * (to the next head, or back to the value), and so is a leased unit
 * whose lease lapsed (its process died, or lost it); units free while
 * waiters queue (none should be) go to the waiters.  So the queue never
 * wedges on a dead waiter, and no unit is lost to one for longer than
 * ttl (or, leased, its lease).  Undo: a take or withdraw with a lease
 * (ARGV[7] > 0) that takes a unit leases it: its token goes in `leases`
 * until now + lease and in `owners` as "u:SINCE:WHO"; 'renew' extends a
 * live lease (token: the unit's); 'return' ends one and posts its unit
 * (a post by its holder).  Each take, withdraw, post and return comes
 * with a token of its own call (a return: its unit's, remembered as
 * "r:" .. token), its caller ARGV[8] (a thread: "host:pid:tid/TAG",
 * backend.c's sem_caller) and the caller's op number ARGV[9] (a request
 * sent again carries its first sending's; a later op of the caller a
 * higher one).  `done` is a hash, one field per caller: "EXPIRY SEQ
 * COUNT OP TOKEN", the caller's last op that took, posted or returned a
 * unit (all of them answer 1), its number, how many such ops the caller
 * has done, and when the entry may go (now + ARGV[5] ms, longer than
 * the caller would go on asking).  A caller's calls are sequential, so
 * its last op is the only one it can still be asking: asked again (its
 * answer was lost: dlock__command sends it again) an op whose token is
 * its caller's entry's answers 1 and does nothing, so no unit is taken,
 * added or returned twice; one numbered at or below the entry's is an
 * older request of a call that has ended (a stale copy arriving late)
 * and answers 0 doing nothing; any other is done, and if it moves a
 * unit it replaces the entry.  So `done` holds one entry per caller
 * seen in the last ARGV[5] ms, not one per op: field "#" ("N BASE")
 * counts the entries, and once they pass twice BASE + 16 the expired
 * ones are dropped and BASE is what is left (amortised over new callers;
 * HGETALL, not HLEN or HSCAN, which the minimal ACL user lacks).  A
 * `done` of the old kind (a zset) is dropped.  Returns: init 1 made / 0
 * existed; take 1 taken / 0 not (queued when ARGV[4] is '1' or '2'); withdraw
 * 1 the token had been handed a unit (now taken) / 0 it left the queue;
 * post 1 posted / 0 the value would pass ARGV[4]; renew 1 renewed / 0
 * the lease is gone; return 1 returned / 2 the lease was gone (its unit
 * came back before); value the value; undo 1 / 0 (below).  Undo: a take
 * or withdraw of the caller's whose answer never came (the call ended
 * with an error) is undone by the caller's next op of the semaphore,
 * sent before anything else, so that its `done` entry is still that
 * op's: when the entry names the token's take or withdraw, its unit is
 * given back (to the queue's head or the value; a leased one only if
 * its lease has not lapsed, which gave it back already), the entry's
 * count goes one down and it names 'undo' (a stale copy of the take
 * arriving later finds it and does nothing), and it answers 1; else the
 * token took nothing: it leaves the queue (a unit handed to it goes on)
 * and it answers 0.  Asked again, an undo answers 0 and does nothing.
 * Remade: ARGV[10], when given, is the value the caller opened the
 * semaphore with; an op (not 'renew')
 * that finds the value key gone with no unlink mark beside it
 * (<value key>:unlinked, sem_admin_lua's) finds a semaphore the server
 * lost (an empty restart, FLUSHALL, a failover to a replica that did
 * not have it) and makes it again with that value -- the first such op
 * wins, as the first init does -- noting when in `owners` field
 * '!remade' (server ms); a post that remakes it adds nothing (its unit
 * was counted in the value made again), a return finds its lease gone
 * (2), as a renewal does, so every leased unit of before is told lost.
 * An op with a lease (undo) that remakes it holds its units back for
 * that lease (`owners` field '!held': until when): a holder of before,
 * which may not have heard yet, stops believing by its own clock by
 * then (its last renewal + lease - drift), so no unit is held twice;
 * meanwhile takes queue and posts add to the value, and a take of a
 * caller that gave ARGV[10] answers -N instead of 0: the units are held
 * back N ms more (so it asks again then). */
static const char sem_lua[] =
    "local op, tok, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])\n"
    "local lease = tonumber(ARGV[7] or '0')\n"
    "if op == 'init' then\n"
    "  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "  redis.call('SET', KEYS[1], ARGV[4])\n"
    "  redis.call('DEL', KEYS[1] .. ':unlinked')\n"
    "  return 1\n"
    "end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local pt = redis.call('PTTL', KEYS[1])\n" /* an expiry (sem_admin's expire): every key keeps it */
    "local dtok = tok\n"
    "if op == 'return' then dtok = 'r:' .. tok end\n"
    "local caller, seq = ARGV[8], tonumber(ARGV[9] or '0')\n"
    "local remembered = caller ~= nil and (op == 'take' or op == 'withdraw' or op == 'post' or op == 'return')\n"
    "local count = 0\n"
    "if remembered then\n"
    "  local rec = redis.pcall('HGET', KEYS[5], caller)\n"
    "  if type(rec) == 'table' then redis.call('DEL', KEYS[5]) rec = false end\n"
    "  if rec then\n"
    "    local rseq, rcount, rtok = string.match(rec, '^%d+ (%d+) (%d+) %S+ (%S+)$')\n"
    "    if rtok == dtok then return 1 end\n"
    "    count = tonumber(rcount or '0')\n"
    "    if rseq and seq <= tonumber(rseq) then return 0 end\n"
    "  end\n"
    "end\n"
    "local v0 = redis.call('GET', KEYS[1])\n"
    "local remade = false\n"
    "if not v0 and ARGV[10] and op ~= 'renew' and redis.call('EXISTS', KEYS[1] .. ':unlinked') == 0 then\n"
    "  v0 = ARGV[10]\n"
    "  redis.call('SET', KEYS[1], v0)\n"
    "  redis.call('HSET', KEYS[6], '!remade', now)\n"
    "  if lease > 0 then redis.call('HSET', KEYS[6], '!held', now + lease) end\n"
    "  remade = true\n"
    "end\n"
    "v0 = tonumber(v0 or '0')\n"
    "local held = redis.call('HGET', KEYS[6], '!held')\n"
    "if held and tonumber(held) <= now then redis.call('HDEL', KEYS[6], '!held') held = false end\n"
    "local v = v0\n"
    "local function give()\n"
    "  if held then v = v + 1 return end\n"
    "  local h = redis.call('ZRANGE', KEYS[2], 0, 0)\n"
    "  if #h == 0 then v = v + 1 return end\n"
    "  redis.call('ZREM', KEYS[2], h[1])\n"
    "  redis.call('HSET', KEYS[4], h[1], '1')\n"
    "  redis.call('ZADD', KEYS[3], now + ttl, h[1])\n"
    /* the caller's own take or withdraw, below, claims it: nobody to tell */
    "  if h[1] == tok and (op == 'take' or op == 'withdraw') then return end\n"
    "  local r = redis.call('HGET', KEYS[6], h[1])\n"
    "  if r and string.byte(r, 1) == 87 then\n" /* "W:": it waits in BLPOP */
    "    local gk = KEYS[1] .. ':g:' .. h[1]\n"
    /* its list expires with the grant; a withdrawal deletes it */
    "    if type(redis.pcall('RPUSH', gk, '1:' .. ARGV[3])) == 'number' then\n"
    "      redis.call('PEXPIRE', gk, ARGV[3])\n"
    "      return\n"
    "    end\n"
    "  end\n"
    "  redis.call('PUBLISH', KEYS[1], h[1])\n"
    "end\n"
    "local function leased()\n"
    "  if lease > 0 then\n"
    "    redis.call('ZADD', KEYS[7], now + lease, tok)\n"
    "    redis.call('HSET', KEYS[6], tok, 'u:' .. now .. ':' .. ARGV[6])\n"
    "  end\n"
    "end\n"
    "local back = 0\n"
    "for _, w in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do\n"
    "  redis.call('ZREM', KEYS[3], w)\n"
    "  redis.call('ZREM', KEYS[2], w)\n"
    "  redis.call('HDEL', KEYS[6], w)\n"
    "  back = back + redis.call('HDEL', KEYS[4], w)\n"
    "end\n"
    "for _, u in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now)) do\n"
    "  redis.call('ZREM', KEYS[7], u)\n"
    "  redis.call('HDEL', KEYS[6], u)\n"
    "  back = back + 1\n"
    "end\n"
    "for i = 1, back do give() end\n"
    "while v > 0 and not held and redis.call('EXISTS', KEYS[2]) == 1 do v = v - 1 give() end\n"
    "local res = 0\n"
    "if op == 'take' then\n"
    "  if redis.call('HDEL', KEYS[4], tok) == 1 then\n"
    "    redis.call('ZREM', KEYS[3], tok)\n"
    "    redis.call('HDEL', KEYS[6], tok)\n"
    "    res = 1\n"
    "  elseif v > 0 and not held then\n"
    "    v = v - 1\n"
    "    res = 1\n"
    "  elseif ARGV[4] ~= '0' then\n"
    "    local kind = ARGV[4] == '2' and 'W:' or 'w:'\n"
    "    if not redis.call('ZSCORE', KEYS[2], tok) then\n"
    "      local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')\n"
    "      redis.call('ZADD', KEYS[2], #last > 0 and tonumber(last[2]) + 1 or 1, tok)\n"
    "      redis.call('HSET', KEYS[6], tok, kind .. now .. ':' .. ARGV[6])\n"
    "    else\n"
    "      local r = redis.call('HGET', KEYS[6], tok)\n"
    "      if r and string.sub(r, 1, 2) ~= kind then redis.call('HSET', KEYS[6], tok, kind .. string.sub(r, 3)) end\n"
    "    end\n"
    "    redis.call('ZADD', KEYS[3], now + ttl, tok)\n"
    "  end\n"
    "  if res == 1 then leased() end\n"
    /* held back: how long still, so that a waiter asks again then */
    "  if res == 0 and held and ARGV[10] then res = now - tonumber(held) end\n"
    "elseif op == 'withdraw' then\n"
    "  res = redis.call('HDEL', KEYS[4], tok)\n"
    "  redis.call('DEL', KEYS[1] .. ':g:' .. tok)\n"
    "  redis.call('ZREM', KEYS[2], tok)\n"
    "  redis.call('ZREM', KEYS[3], tok)\n"
    "  redis.call('HDEL', KEYS[6], tok)\n"
    "  if res == 1 then leased() end\n"
    "elseif op == 'post' then\n"
    "  if remade then res = 1\n"
    "  elseif redis.call('EXISTS', KEYS[2]) == 1 then give() res = 1\n"
    "  elseif v < tonumber(ARGV[4]) then v = v + 1 res = 1 end\n"
    "elseif op == 'renew' then\n"
    "  if redis.call('ZSCORE', KEYS[7], tok) then\n"
    "    redis.call('ZADD', KEYS[7], now + lease, tok)\n"
    "    res = 1\n"
    "  end\n"
    "elseif op == 'return' then\n"
    "  if redis.call('ZREM', KEYS[7], tok) == 1 then\n"
    "    redis.call('HDEL', KEYS[6], tok)\n"
    "    give()\n"
    "    res = 1\n"
    "  else\n"
    "    redis.call('HDEL', KEYS[6], tok)\n"
    "    res = 2\n"
    "  end\n"
    "elseif op == 'value' then\n"
    "  res = v\n"
    "elseif op == 'undo' then\n"
    "  local rec = caller and redis.pcall('HGET', KEYS[5], caller)\n"
    "  local rcount, rop, rtok\n"
    "  if type(rec) == 'string' then\n"
    "    rcount, rop, rtok = string.match(rec, '^%d+ %d+ (%d+) (%S+) (%S+)$')\n"
    "  end\n"
    "  if rtok == tok and (rop == 'take' or rop == 'withdraw') then\n"
    /* a leased unit whose lease lapsed came back already (above) */
    "    if lease == 0 or redis.call('ZREM', KEYS[7], tok) == 1 then give() end\n"
    "    redis.call('HDEL', KEYS[6], tok)\n"
    "    local rc = string.format('%.0f', tonumber(rcount) - 1)\n"
    "    local exp = string.format('%.0f', now + tonumber(ARGV[5]))\n"
    "    redis.call('HSET', KEYS[5], caller, exp .. ' ' .. ARGV[9] .. ' ' .. rc .. ' undo ' .. tok)\n"
    "    res = 1\n"
    "  else\n"
    "    if redis.call('HDEL', KEYS[4], tok) == 1 then give() end\n"
    "    redis.call('DEL', KEYS[1] .. ':g:' .. tok)\n"
    "    redis.call('ZREM', KEYS[2], tok)\n"
    "    redis.call('ZREM', KEYS[3], tok)\n"
    "    redis.call('HDEL', KEYS[6], tok)\n"
    "  end\n"
    "end\n"
    "if v ~= v0 then redis.call('SET', KEYS[1], tostring(v)) end\n"
    "if res == 1 and remembered then\n"
    "  local exp = string.format('%.0f', now + tonumber(ARGV[5]))\n"
    "  local rec = exp .. ' ' .. ARGV[9] .. ' ' .. string.format('%.0f', count + 1) .. ' ' .. op .. ' ' .. dtok\n"
    "  if redis.call('HSET', KEYS[5], caller, rec) == 1 then\n"
    "    local c = redis.call('HGET', KEYS[5], '#') or '0 0'\n"
    "    local n, base = string.match(c, '^(%d+) (%d+)$')\n"
    "    n, base = tonumber(n) + 1, tonumber(base)\n"
    "    if n > 2 * base + 16 then\n"
    "      local all = redis.call('HGETALL', KEYS[5])\n"
    "      n = 0\n"
    "      for i = 1, #all, 2 do\n"
    "        if all[i] ~= '#' then\n"
    "          local e = string.match(all[i + 1], '^(%d+) ')\n"
    "          if e and tonumber(e) <= now then redis.call('HDEL', KEYS[5], all[i]) else n = n + 1 end\n"
    "        end\n"
    "      end\n"
    "      base = n\n"
    "    end\n"
    "    redis.call('HSET', KEYS[5], '#', n .. ' ' .. base)\n"
    "  end\n"
    "end\n"
    "if pt > 0 then\n"
    "  for i = 1, 7 do\n"
    "    if redis.call('PTTL', KEYS[i]) == -1 then redis.call('PEXPIRE', KEYS[i], pt) end\n"
    "  end\n"
    "end\n"
    "return res\n";

/* What `dlock status` shows of a semaphore (dlock_sem_owners), read
 * only, in one round trip.  KEYS: DLOCK__KS_*.  ARGV: the most people to
 * list.  Returns {value (false: the semaphore does not exist), the
 * server's time in ms, live waiters, live leased units, waiters as
 * place (0 the queue's head; -1 a post handed it a unit, not taken yet)
 * then its `owners` record ('' none), leased units as lease expiry then
 * record, when sem_lua last made it again after a loss (server ms;
 * false: never)}.  A waiter is live while its registration runs
 * (`expiry`), a leased unit while its lease does: the dead ones, not
 * cleaned up yet, are not shown.  Only the commands of the README's minimal ACL user. */
static const char sem_info_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local max = tonumber(ARGV[1])\n"
    "local function live(tok)\n"
    "  local e = redis.call('ZSCORE', KEYS[3], tok)\n"
    "  return e and tonumber(e) > now\n"
    "end\n"
    "local ws, nw, place = {}, 0, 0\n"
    "local function waiter(tok, p)\n"
    "  nw = nw + 1\n"
    "  if nw <= max then\n"
    "    ws[#ws + 1] = p\n"
    "    ws[#ws + 1] = redis.call('HGET', KEYS[6], tok) or ''\n"
    "  end\n"
    "end\n"
    "local g = redis.call('HGETALL', KEYS[4])\n"
    "for i = 1, #g, 2 do\n"
    "  if live(g[i]) then waiter(g[i], -1) end\n"
    "end\n"
    "for _, tok in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do\n"
    "  if live(tok) then waiter(tok, place) place = place + 1 end\n"
    "end\n"
    "local us = {}\n"
    "local leased = redis.call('ZRANGE', KEYS[7], '(' .. now, '+inf', 'BYSCORE', 'WITHSCORES')\n"
    "for i = 1, #leased, 2 do\n"
    "  if (i + 1) / 2 <= max then\n"
    "    us[#us + 1] = tonumber(leased[i + 1])\n"
    "    us[#us + 1] = redis.call('HGET', KEYS[6], leased[i]) or ''\n"
    "  end\n"
    "end\n"
    "return {redis.call('GET', KEYS[1]), now, nw, #leased / 2, ws, us, redis.call('HGET', KEYS[6], '!remade')}\n";

/* Administration of a semaphore.  KEYS: DLOCK__KS_*.  ARGV: 'unlink',
 * 'break', 'expire' or 'keep'.  unlink: deletes every key of it (as
 * sem_unlink removes a name), leaves the mark <value key>:unlinked for
 * ARGV[3] ms (while it is there, sem_lua does not make the name again for
 * objects still open on it: it was removed on purpose, not lost) and wakes
 * its waiters, whose next take finds it gone and queues them again (a
 * post on the name, or a new init with units, then serves them); returns
 * 1, or 0 when it did not exist (no value).  break: takes
 * back every unit leased under undo -- their holders' leases are gone,
 * the units back in the value (at most ARGV[2]) -- and wakes the waiters,
 * whose next take hands those units on in queue order; returns how many,
 * or -1 when it does not exist.  expire: every key of it expires ARGV[2]
 * ms from now (sem_lua gives that expiry to the keys an op makes, and
 * keeps it over the value's SET); keep: the same, but only for a
 * semaphore that has an expiry already (renewing it); both return 1, 0
 * (keep) when it has none, -1 when it does not exist. */
static const char sem_admin_lua[] =
    "local exists = redis.call('EXISTS', KEYS[1])\n"
    "if ARGV[1] == 'unlink' then\n"
    "  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])\n"
    "  redis.call('SET', KEYS[1] .. ':unlinked', '1', 'PX', ARGV[3])\n"
    "  redis.call('PUBLISH', KEYS[1], 'unlinked')\n"
    "  return exists\n"
    "end\n"
    "if exists == 0 then return -1 end\n"
    "if ARGV[1] == 'expire' or ARGV[1] == 'keep' then\n"
    "  if ARGV[1] == 'keep' and redis.call('PTTL', KEYS[1]) < 0 then return 0 end\n"
    "  for i = 1, 7 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end\n"
    "  return 1\n"
    "end\n"
    "local toks = redis.call('ZRANGE', KEYS[7], 0, -1)\n"
    "if #toks == 0 then return 0 end\n"
    "for _, tok in ipairs(toks) do redis.call('HDEL', KEYS[6], tok) end\n"
    "redis.call('DEL', KEYS[7])\n"
    "local v = tonumber(redis.call('GET', KEYS[1]) or '0') + #toks\n"
    "if v > tonumber(ARGV[2]) then v = tonumber(ARGV[2]) end\n"
    "redis.call('SET', KEYS[1], tostring(v))\n"
    "redis.call('PUBLISH', KEYS[1], 'reset')\n"
    "return #toks\n";

/* Who waits for whom (deadlock detection, the waiters `dlock status`
 * lists; docs/design.md, "Deadlock detection").  ARGV: op, id, rec, ttl
 * ms.  On a lock's slot, KEYS: the lock, <lock>:waiting (zset: waits'
 * ids by expiry), <lock>:wmeta (hash: id -> "since|rec", since in server
 * ms, written once), <lock>:readers, <lock>:writers, <lock>:fifo (the
 * fair queue).  "note" registers or refreshes the
 * wait id, its rec given as "AGE|rec" (AGE: ms the wait has lasted, so
 * since is the server's clock less AGE), and returns {since} ({} if id
 * holds the lock: a grant withdrew it); "drop" withdraws it; "holders" returns
 * {the writer's token or '', each live reader's token}; "list" returns
 * {now, each live wait's "since|rec"}: the registered waits, then the
 * queued waiters that hold nothing (QUEUE_ENTRY's L 1 or 2: they never
 * register), from their entries, while their registration as waiting
 * writers is live -- "since|who|x|detect", since by the waiter's clock
 * (no later than the server's).
 * On a holder token's edge key
 * (KEYS[1] alone, its own slot): "eset" writes rec with the ttl, "eget"
 * returns {rec} or {}, "edel" deletes it if it still begins with rec.
 * Lapsed waits are swept by note and list; note only ever lengthens the
 * two keys' expiry (a short registration must not cut a long one's).
 * (ZRANGE ... BYSCORE: a command the README's minimal ACL user has
 * always had.) */
static const char waits_lua[] =
    "local op = ARGV[1]\n"
    "if op == 'eset' then\n"
    "  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])\n"
    "  return {}\n"
    "elseif op == 'eget' then\n"
    "  local v = redis.call('GET', KEYS[1])\n"
    "  if v then return {v} end\n"
    "  return {}\n"
    "elseif op == 'edel' then\n"
    "  local v = redis.call('GET', KEYS[1])\n"
    "  if v and string.sub(v, 1, #ARGV[3]) == ARGV[3] then redis.call('DEL', KEYS[1]) end\n"
    "  return {}\n"
    "end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local function sweep()\n"
    "  local old = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE')\n"
    "  for _, m in ipairs(old) do redis.call('HDEL', KEYS[3], m) end\n"
    "  if #old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end\n"
    "end\n"
    "if op == 'note' then\n"
    "  sweep()\n"
    /* a tick that comes after the release granted the wait the lock
     * (which withdrew it): nothing to register */
    "  if redis.pcall('HGET', KEYS[1], 'owner') == ARGV[2] then return {} end\n"
    "  local v = redis.call('HGET', KEYS[3], ARGV[2])\n"
    "  local since = v and string.match(v, '^(%d+)|')\n"
    "  if not since then\n"
    "    local age, rec = string.match(ARGV[3], '^(%d+)|(.*)$')\n"
    "    if not age then return redis.error_reply('waits: bad record') end\n"
    "    since = tostring(now - math.min(tonumber(age), now))\n"
    "    redis.call('HSET', KEYS[3], ARGV[2], since .. '|' .. rec)\n"
    "  end\n"
    "  local ttl = tonumber(ARGV[4])\n"
    "  redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])\n"
    "  for i = 2, 3 do\n"
    "    if redis.call('PTTL', KEYS[i]) < 2 * ttl then redis.call('PEXPIRE', KEYS[i], 2 * ttl) end\n"
    "  end\n"
    "  return {since}\n"
    "elseif op == 'drop' then\n"
    "  redis.call('ZREM', KEYS[2], ARGV[2])\n"
    "  redis.call('HDEL', KEYS[3], ARGV[2])\n"
    "  return {}\n"
    "elseif op == 'holders' then\n"
    "  local o = redis.call('MGET', KEYS[1])[1]\n" /* the holder, of either form */
    "  if o then o = string.match(o, " FORM_OWNER ") else o = redis.call('HGET', KEYS[1], 'owner') end\n"
    "  local out = {o or ''}\n"
    "  for _, m in ipairs(redis.call('ZRANGE', KEYS[4], '(' .. now, '+inf', 'BYSCORE')) do out[#out + 1] = m end\n"
    "  return out\n"
    "elseif op == 'list' then\n"
    "  sweep()\n"
    "  local out, seen = {tostring(now)}, {}\n"
    "  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do\n"
    "    local v = redis.call('HGET', KEYS[3], m)\n"
    "    if v then out[#out + 1] = v seen[m] = true end\n"
    "  end\n"
    /* the queued waiters that hold nothing (L 1 or 2), listed by their
     * entries while their registration as waiting writers is live */
    "  local q = KEYS[6] and redis.pcall('LRANGE', KEYS[6], 0, -1) or {}\n"
    "  if q.err then q = {} end\n"
    "  for _, e in ipairs(q) do\n"
    "    local tk, lf, since, who = string.match(e, " QUEUE_LISTED ")\n"
    "    if tk and not seen[tk] and tonumber(redis.call('ZSCORE', KEYS[5], tk) or '0') > now then\n"
    "      since = math.min(tonumber(since) or now, now)\n" /* (another host's clock may be ahead) */
    "      out[#out + 1] = string.format('%d', since) .. '|' .. who .. '|x|' .. (lf == '2' and '1' or '0')\n"
    "    end\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "return redis.error_reply('waits: unknown op')\n";

/* Live figures (stats.c; docs/design.md, "Live figures").  KEYS[1] is
 * <prefix>{dlock-stats}, which names nothing itself: the figures of the
 * server's second S are KEYS[1]:z:S, a zset of lock names by
 * acquisitions, and for each lock KEYS[1]:h:S:<name>, a hash of counts:
 * a (holds begun), r (holds ended), w<i> and h<i> (waits and holds in
 * bucket i); and KEYS[1]:c:<name>, a hash of counters that only grow, L
 * (holds lost) and D (EDEADLK answers), whose expiry every flush of the
 * lock puts off.  All in one cluster slot.  "add": ARGV[2] the keys'
 * expiry in seconds, ARGV[3] the payload, for each lock
 * "<namelen>:<name>" then " <field> <count>" pairs and ";"; answers the
 * server's second.  "read": the busiest ARGV[3] locks of the last ARGV[2]
 * seconds (this one included): {now, name, {field, count, ...}, ...}. */
static const char stats_lua[] =
    "local base, op = KEYS[1], ARGV[1]\n"
    "local now = tonumber(redis.call('TIME')[1])\n"
    "if op == 'add' then\n"
    "  local ttl, p, pos = tonumber(ARGV[2]), ARGV[3], 1\n"
    "  local z = base .. ':z:' .. now\n"
    "  while pos <= #p do\n"
    "    local c = string.find(p, ':', pos, true)\n"
    "    if not c then break end\n"
    "    local n = tonumber(string.sub(p, pos, c - 1))\n"
    "    if not n then break end\n"
    "    local name = string.sub(p, c + 1, c + n)\n"
    "    local e = string.find(p, ';', c + n + 1, true)\n"
    "    if not e then break end\n"
    "    local h, a = base .. ':h:' .. now .. ':' .. name, 0\n"
    "    local cu = base .. ':c:' .. name\n"
    "    for f, v in string.gmatch(string.sub(p, c + n + 1, e - 1), '(%S+) (%d+)') do\n"
    "      if f == 'L' or f == 'D' then redis.call('HINCRBY', cu, f, v)\n"
    "      else redis.call('HINCRBY', h, f, v) end\n"
    "      if f == 'a' then a = tonumber(v) end\n"
    "    end\n"
    "    redis.call('EXPIRE', h, ttl)\n"
    "    redis.call('EXPIRE', cu, ttl)\n"
    "    redis.call('ZINCRBY', z, a, name)\n"
    "    pos = e + 1\n"
    "  end\n"
    "  redis.call('EXPIRE', z, ttl)\n"
    "  return now\n"
    "end\n"
    "local w, max = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local tot, names = {}, {}\n"
    "for s = now - w + 1, now do\n"
    "  local z = redis.call('ZRANGE', base .. ':z:' .. s, 0, -1, 'WITHSCORES')\n"
    "  for i = 1, #z, 2 do\n"
    "    if not tot[z[i]] then tot[z[i]] = 0 names[#names + 1] = z[i] end\n"
    "    tot[z[i]] = tot[z[i]] + tonumber(z[i + 1])\n"
    "  end\n"
    "end\n"
    "table.sort(names, function(x, y) if tot[x] ~= tot[y] then return tot[x] > tot[y] end return x < y end)\n"
    "local out = {now}\n"
    "for i = 1, math.min(max, #names) do\n"
    "  local sum, fs, flat = {}, {}, {}\n"
    "  for s = now - w + 1, now do\n"
    "    local hv = redis.call('HGETALL', base .. ':h:' .. s .. ':' .. names[i])\n"
    "    for j = 1, #hv, 2 do\n"
    "      if not sum[hv[j]] then sum[hv[j]] = 0 fs[#fs + 1] = hv[j] end\n"
    "      sum[hv[j]] = sum[hv[j]] + tonumber(hv[j + 1])\n"
    "    end\n"
    "  end\n"
    "  for _, f in ipairs(fs) do flat[#flat + 1] = f flat[#flat + 1] = sum[f] end\n"
    "  local cv = redis.call('HGETALL', base .. ':c:' .. names[i])\n"
    "  for j = 1, #cv, 2 do flat[#flat + 1] = cv[j] flat[#flat + 1] = tonumber(cv[j + 1]) end\n"
    "  out[#out + 1] = names[i]\n"
    "  out[#out + 1] = flat\n"
    "end\n"
    "return out\n";

/* POSIX record locks (the preload's fcntl and lockf; docs/preload.md,
 * "Record locks").  KEYS[1] is <prefix>{<name>}:rl, a hash: one field per
 * owner (a process, "NONCE.PID"), its value
 * "EXPIRY|WHO|WAITED|WANTS|RANGES[|1]": the owner's lease expiry (server ms),
 * WHO host:pid, WAITED the server ms of its last blocked request (0: not
 * waiting), WANTS that request, "START:END:TYPE" (or empty), RANGES its
 * locks as "START:END:TYPE" (END inclusive, TYPE 1 read, 2 write),
 * comma-separated, sorted, disjoint, neighbours of one type merged, and
 * "|1" when the owner holds the table's cache: it may lock any range of
 * the file without asking, so to every other owner it is as one write
 * lock over the whole file, until it hands its real ranges back
 * ("uncache").  An owner whose lease ran out is deleted by the next
 * request.  ARGV: op, owner, lease ms, type, start, end, who, wait ("1":
 * the caller will wait if refused), for "restore" and "uncache" the
 * segments, and for "set" ARGV[10] "1": the caller would keep the cache.
 *   set      checks the range against every other owner's (a write
 *            conflicts with any lock, a read with a write), and if none
 *            conflicts applies POSIX replacement to the owner's own ranges
 *            (the part of each overlapped range outside start..end stays,
 *            split if need be; start..end takes the type; neighbours of
 *            one type merge): {"0", the owner's former segments in the
 *            range}; else {"1", type, start, end, who} of the lowest
 *            conflicting range, and the conflicting owners, comma-separated
 *            (the caller's wait edges, for a cycle through other files'
 *            tables: the preload's range.c) -- and with wait, the request is written as
 *            the owner's, or {"2"} when waiting would close a cycle: an
 *            owner that blocks it waits (its written request) for a range
 *            that conflicts with one of an owner that waits ... for one of
 *            the caller's (EDEADLK).  With ARGV[10] "1", a set granted
 *            while no other owner is in the table, and none was refused
 *            for a cache in the last 2 s (<key>:hot), gives the owner the
 *            cache: {"0", former segments, "c"}.  A set or get that meets
 *            another owner's cache gets {"3", that owner}: the cache's
 *            owner is told (its list <lock key>:g:<owner> gets "1:1"), the
 *            table is hot, and the caller asks again shortly
 *   unl      removes start..end from the owner's ranges: {"0", ranges left}
 *   restore  puts ARGV[9]'s segments back over start..end (a kernel call
 *            that failed after a set): {"0"}
 *   get      the conflict set would meet, without taking: {"0"} or {"1", ...}
 *   renew    extends the owner's lease: {"0", ranges} or {"1"} when the
 *            owner is unknown (its lease ran out)
 *   trim     cuts the owner's ranges to what ARGV[9]'s segments cover
 *            (the kernel's, in the shim), each part with the weaker of
 *            its two types, and the cache goes: after a set whose answer
 *            never came, so that a set the server did apply leaves no
 *            range (nor cache) the process does not know of: {"0",
 *            ranges left}
 *   uncache  the owner's ranges become ARGV[9]'s segments (the kernel's,
 *            in the shim) and it gives the cache up: {"0"}, or {"1"} when
 *            the owner is unknown
 *   nowait   withdraws the owner's waiting request: {"0"}
 *   show     every live owner's record: {now, owner, record, owner,
 *            record, ...} (dlock_range_list)
 *   drop     deletes the record of the owner (of every owner if it is
 *            ""): {"0", owners dropped} (dlock_range_break)
 * A waiting request counts while its owner asked within the last second
 * (a waiter asks again at least every 50 ms); who blocks it is worked out
 * from the ranges as they are now, so a waiter that has not asked again
 * since its blocker let go is not taken for blocked. */
static const char range_lua[] =
    "local key, op, me, lease = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local function num(x) return string.format('%.0f', x) end\n"
    "local function dec(v)\n"
    "  local x, who, wt, ws, rs, c = string.match(v, '^(%d+)|([^|]*)|(%d+)|([^|]*)|([^|]*)|?(%d*)$')\n"
    "  if not x then return nil end\n"
    "  local o = {x = tonumber(x), who = who, wt = tonumber(wt), w = ws, r = {}, c = c == '1'}\n"
    "  for s, e, ty in string.gmatch(rs, '(%d+):(%d+):(%d)') do\n"
    "    o.r[#o.r + 1] = {tonumber(s), tonumber(e), tonumber(ty)}\n"
    "  end\n"
    "  return o\n"
    "end\n"
    "local function segs(r)\n"
    "  local p = {}\n"
    "  for i, g in ipairs(r) do p[i] = num(g[1]) .. ':' .. num(g[2]) .. ':' .. g[3] end\n"
    "  return table.concat(p, ',')\n"
    "end\n"
    "local all, own, ids, gone = redis.call('HGETALL', key), {}, {}, {}\n"
    "for i = 1, #all, 2 do\n"
    "  local o = dec(all[i + 1])\n"
    "  if o and o.x > now then own[all[i]] = o ids[#ids + 1] = all[i] else gone[#gone + 1] = all[i] end\n"
    "end\n"
    "if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end\n"
    "local function save(o)\n"
    "  if #o.r == 0 and o.w == '' and not o.c then redis.call('HDEL', key, me) return end\n"
    "  o.x = now + lease\n"
    "  redis.call('HSET', key, me, num(o.x) .. '|' .. o.who .. '|' .. num(o.wt) .. '|' .. o.w .. '|' .. segs(o.r) ..\n"
    "    (o.c and '|1' or ''))\n"
    "  if redis.call('PTTL', key) < 2 * lease then redis.call('PEXPIRE', key, 2 * lease) end\n"
    "end\n"
    "local function cut(r, s, e)\n"
    "  local keep, old = {}, {}\n"
    "  for _, g in ipairs(r) do\n"
    "    if g[2] < s or g[1] > e then keep[#keep + 1] = g\n"
    "    else\n"
    "      if g[1] < s then keep[#keep + 1] = {g[1], s - 1, g[3]} end\n"
    "      if g[2] > e then keep[#keep + 1] = {e + 1, g[2], g[3]} end\n"
    "      old[#old + 1] = {math.max(g[1], s), math.min(g[2], e), g[3]}\n"
    "    end\n"
    "  end\n"
    "  return keep, old\n"
    "end\n"
    "local function merge(r)\n"
    "  table.sort(r, function(a, b) return a[1] < b[1] end)\n"
    "  local out = {}\n"
    "  for _, g in ipairs(r) do\n"
    "    local l = out[#out]\n"
    "    if l and l[3] == g[3] and g[1] <= l[2] + 1 then\n"
    "      if g[2] > l[2] then l[2] = g[2] end\n"
    "    else out[#out + 1] = {g[1], g[2], g[3]} end\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "local function conflict(s, e, ty, asker)\n"
    "  local first, by = nil, {}\n"
    "  for _, id in ipairs(ids) do\n"
    "    if id ~= asker then\n"
    "      local hit = false\n"
    "      for _, g in ipairs(own[id].r) do\n"
    "        if g[1] <= e and g[2] >= s and (ty == 2 or g[3] == 2) then\n"
    "          if not first or g[1] < first[1] then first = {g[1], g[2], g[3], own[id].who} end\n"
    "          hit = true\n"
    "        end\n"
    "      end\n"
    "      if hit then by[#by + 1] = id end\n"
    "    end\n"
    "  end\n"
    "  return first, by\n"
    "end\n"
    "local function reaches(from)\n"
    "  local seen, stack = {}, {}\n"
    "  for i, id in ipairs(from) do stack[i] = id end\n"
    "  while #stack > 0 do\n"
    "    local id = table.remove(stack)\n"
    "    if id == me then return true end\n"
    "    local o = own[id]\n"
    "    if not seen[id] and o and o.wt > 0 and now - o.wt < 1000 then\n"
    "      seen[id] = true\n"
    "      local a, b, c = string.match(o.w, '^(%d+):(%d+):(%d)$')\n"
    "      if a then\n"
    "        local _, by = conflict(tonumber(a), tonumber(b), tonumber(c), id)\n"
    "        for _, w in ipairs(by) do stack[#stack + 1] = w end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  return false\n"
    "end\n"
    "local o = own[me] or {x = 0, who = ARGV[7] or '', wt = 0, w = '', r = {}, c = false}\n"
    "local function parse(list)\n"
    "  local r = {}\n"
    "  for a, b, c in string.gmatch(list or '', '(%d+):(%d+):(%d)') do r[#r + 1] = {tonumber(a), tonumber(b), tonumber(c)} end\n"
    "  return r\n"
    "end\n"
    "local function cacher()\n"
    "  for _, id in ipairs(ids) do\n"
    "    if id ~= me and own[id].c then\n"
    "      local nk = string.sub(key, 1, #key - 3) .. ':g:' .. id\n"
    "      if redis.call('LLEN', nk) == 0 then redis.call('RPUSH', nk, '1:1') end\n"
    "      redis.call('PEXPIRE', nk, 2 * lease)\n"
    "      redis.call('SET', key .. ':hot', '1', 'PX', 2000)\n"
    "      return id\n"
    "    end\n"
    "  end\n"
    "  return nil\n"
    "end\n"
    "if op == 'show' then\n"
    "  local out = {num(now)}\n"
    "  for i = 1, #all, 2 do\n"
    "    if own[all[i]] then out[#out + 1] = all[i] out[#out + 1] = all[i + 1] end\n"
    "  end\n"
    "  return out\n"
    "elseif op == 'drop' then\n"
    "  local n = 0\n"
    "  for _, id in ipairs(ids) do\n"
    "    if me == '' or id == me then redis.call('HDEL', key, id) n = n + 1 end\n"
    "  end\n"
    "  return {'0', tostring(n)}\n"
    "elseif op == 'renew' then\n"
    "  if not own[me] then return {'1'} end\n"
    "  save(o)\n"
    "  return {'0', tostring(#o.r)}\n"
    "elseif op == 'nowait' then\n"
    "  if own[me] then o.w = '' o.wt = 0 save(o) end\n"
    "  return {'0'}\n"
    "elseif op == 'trim' then\n"
    "  if not own[me] then return {'0', '0'} end\n"
    "  local out = {}\n"
    "  for _, g in ipairs(o.r) do\n"
    "    for _, h in ipairs(parse(ARGV[9])) do\n"
    "      local a, b = math.max(g[1], h[1]), math.min(g[2], h[2])\n"
    "      if a <= b then out[#out + 1] = {a, b, math.min(g[3], h[3])} end\n"
    "    end\n"
    "  end\n"
    "  o.r = merge(out) o.c = false\n"
    "  save(o)\n"
    "  return {'0', tostring(#o.r)}\n"
    "elseif op == 'uncache' then\n"
    "  if not own[me] then return {'1'} end\n"
    "  redis.call('DEL', string.sub(key, 1, #key - 3) .. ':g:' .. me)\n"
    "  o.r = merge(parse(ARGV[9])) o.c = false o.w = '' o.wt = 0\n"
    "  save(o)\n"
    "  return {'0'}\n"
    "end\n"
    "local ty, s, e = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])\n"
    "if not (ty and s and e) or s > e then return redis.error_reply('range: bad request') end\n"
    "if op == 'get' or op == 'set' then\n"
    "  local held = cacher()\n"
    "  if held then return {'3', held} end\n"
    "  local first, by = conflict(s, e, ty, me)\n"
    "  if first then\n"
    "    if op == 'set' and ARGV[8] == '1' then\n"
    "      if reaches(by) then\n"
    "        if own[me] then o.w = '' o.wt = 0 save(o) end\n"
    "        return {'2'}\n"
    "      end\n"
    "      o.w = num(s) .. ':' .. num(e) .. ':' .. ty o.wt = now save(o)\n"
    "    end\n"
    "    return {'1', tostring(first[3]), num(first[1]), num(first[2]), first[4], table.concat(by, ',')}\n"
    "  end\n"
    "  if op == 'get' then return {'0'} end\n"
    "  local keep, old = cut(o.r, s, e)\n"
    "  keep[#keep + 1] = {s, e, ty}\n"
    "  o.r = merge(keep) o.w = '' o.wt = 0\n"
    "  if ARGV[10] == '1' and not o.c and #ids <= (own[me] and 1 or 0) and redis.call('EXISTS', key .. ':hot') == 0 then\n"
    "    o.c = true\n"
    "  end\n"
    "  save(o)\n"
    "  if o.c then return {'0', segs(old), 'c'} end\n"
    "  return {'0', segs(old)}\n"
    "elseif op == 'unl' then\n"
    "  if not own[me] then return {'0', '0'} end\n"
    "  o.r = merge((cut(o.r, s, e))) o.w = '' o.wt = 0\n"
    "  save(o)\n"
    "  return {'0', tostring(#o.r)}\n"
    "elseif op == 'restore' then\n"
    "  local keep = cut(o.r, s, e)\n"
    "  for a, b, c in string.gmatch(ARGV[9] or '', '(%d+):(%d+):(%d)') do\n"
    "    keep[#keep + 1] = {tonumber(a), tonumber(b), tonumber(c)}\n"
    "  end\n"
    "  o.r = merge(keep)\n"
    "  save(o)\n"
    "  return {'0'}\n"
    "end\n"
    "return redis.error_reply('range: unknown op')\n";

static const char *const bodies[] = {
    acquire_lua, acquire_shared_lua, release_lua, renew_lua, reset_lua, fenced_set_lua, info_lua, cond_lua,
    fence_raise_lua, sem_lua, sem_info_lua, sem_admin_lua, waits_lua, stats_lua, fence_next_lua, range_lua,
};
_Static_assert(sizeof bodies / sizeof bodies[0] == DLOCK__NSCRIPTS, "a body for every script");
/* On Redis Cluster the scripts publish with SPUBLISH (sharded pub/sub:
 * the message stays on the lock's shard) rather than PUBLISH (which the
 * cluster bus carries to every node): variant 1 of each body, made once. */
static char *sharded[DLOCK__NSCRIPTS];
static char shas[2][DLOCK__NSCRIPTS][41];
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

static char *sharded_make(const char *body) {
    static const char from[] = "'PUBLISH'", to[] = "'SPUBLISH'";
    size_t n = 0;
    const char *p;
    char *out, *o;
    for (p = body; (p = strstr(p, from)) != NULL; p += sizeof from - 1) n++;
    if ((out = malloc(strlen(body) + n + 1)) == NULL) return NULL;
    for (o = out, p = body;;) {
        const char *hit = strstr(p, from);
        size_t k = hit ? (size_t)(hit - p) : strlen(p);
        memcpy(o, p, k);
        o += k;
        if (hit == NULL) break;
        memcpy(o, to, sizeof to - 1);
        o += sizeof to - 1;
        p = hit + sizeof from - 1;
    }
    *o = '\0';
    return out;
}

static void sha_of(const char *body, char *out) {
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0, j;
    if (body == NULL || EVP_Digest(body, strlen(body), md, &n, EVP_sha1(), NULL) != 1 || n != 20) {
        out[0] = '\0'; /* EVALSHA of "" gets NOSCRIPT; we then EVAL */
        return;
    }
    for (j = 0; j < n; j++) {
        out[2 * j] = hex[md[j] >> 4];
        out[2 * j + 1] = hex[md[j] & 15];
    }
    out[40] = '\0';
}

static void sha_make(void) {
    int i;
    for (i = 0; i < DLOCK__NSCRIPTS; i++) {
        sharded[i] = sharded_make(bodies[i]);
        sha_of(bodies[i], shas[0][i]);
        sha_of(sharded[i], shas[1][i]);
    }
}

static const char *script_sha(int which, int variant) {
    pthread_once(&sha_once, sha_make);
    return shas[variant != 0][which];
}

const char *dlock__script_sha(int which, int variant) {
    return script_sha(which, variant);
}

const char *dlock__script_body(int which, int variant) {
    pthread_once(&sha_once, sha_make);
    return variant != 0 ? sharded[which] : bodies[which]; /* NULL: out of memory at start-up */
}

#define MAX_SCRIPT_ARGS 24

/* Fills argv for EVALSHA (or EVAL) of `which`. */
static int script_argv(int which, int variant, int use_eval, int numkeys, int nargs, const char **args,
                       const size_t *lens, const char **argv, size_t *argvlen, char *nk) {
    int i;
    if (nargs > MAX_SCRIPT_ARGS || numkeys < 0) return -1;
    argv[0] = use_eval ? "EVAL" : "EVALSHA";
    argvlen[0] = use_eval ? 4 : 7;
    argv[1] = use_eval ? dlock__script_body(which, variant) : script_sha(which, variant);
    if (argv[1] == NULL) return -1;
    argvlen[1] = strlen(argv[1]);
    argv[2] = nk;
    argvlen[2] = dlock__dec(nk, (unsigned long long)numkeys);
    for (i = 0; i < nargs; i++) {
        argv[3 + i] = args[i];
        argvlen[3 + i] = lens[i];
    }
    return 3 + nargs;
}

static int is_noscript(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static int script_run(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                      int nargs, const char **args, const size_t *lens, long long *acked, dlock__sent *sent);

int dlock__script_run(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                      int nargs, const char **args, const size_t *lens, dlock__sent *sent) {
    return script_run(c, which, out, deadline, numkeys, nargs, args, lens, NULL, sent);
}

int dlock__script_run_wait(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                           int nargs, const char **args, const size_t *lens, long long *acked, dlock__sent *sent) {
    return script_run(c, which, out, deadline, numkeys, nargs, args, lens, acked, sent);
}

int dlock__script_send(dlock__backend *c, int which, int numkeys, int nargs, const char **args, const size_t *lens,
                       dlock__owed_fn fn, void *arg, dlock__mono deadline) {
    const char *argv[3 + MAX_SCRIPT_ARGS];
    size_t argvlen[3 + MAX_SCRIPT_ARGS];
    char nk[DLOCK__DEC_MAX];
    int argc = script_argv(which, c->node.conf.cluster, 0, numkeys, nargs, args, lens, argv, argvlen, nk);
    if (argc < 0) return dlock__seterr(ENOMEM, "cannot make the script request (out of memory)");
    return dlock__command_send(&c->node, argc, argv, argvlen, fn, arg, deadline); /* (NOSCRIPT: the caller asks again) */
}

static int script_run(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                      int nargs, const char **args, const size_t *lens, long long *acked, dlock__sent *sent) {
    const char *argv[3 + MAX_SCRIPT_ARGS];
    size_t argvlen[3 + MAX_SCRIPT_ARGS];
    char nk[DLOCK__DEC_MAX];
    int argc, rc, once;

    argc = script_argv(which, c->node.conf.cluster, 0, numkeys, nargs, args, lens, argv, argvlen, nk);
    if (argc < 0) return dlock__seterr(ENOMEM, "cannot make the script request (out of memory)");
    /* A reset is asked once: asked again it could cut off a holder that
     * came in between; so is a semaphore's unlink or break, which could
     * delete or take back what was made in between.  The others are safe
     * to repeat -- a release too: the token decides, so a second one ends
     * nothing the first did not; only its answer may differ ("not held"
     * once the first has run), which sent->maybe_ran lets its caller read
     * (core/lock.c, release_as). */
    once = which == DLOCK__SCRIPT_RESET || which == DLOCK__SCRIPT_SEM_ADMIN;
    rc = acked ? dlock__command_wait(&c->node, out, deadline, argc, argv, argvlen, acked, sent)
               : dlock__command(&c->node, out, deadline, once, argc, argv, argvlen, sent);
    if (rc == 0 && is_noscript(*out)) {
        /* The server does not know the script (restarted or flushed): EVAL
         * runs it and caches it, so the next EVALSHA finds it. */
        freeReplyObject(*out);
        *out = NULL;
        argc = script_argv(which, c->node.conf.cluster, 1, numkeys, nargs, args, lens, argv, argvlen, nk);
        rc = acked ? dlock__command_wait(&c->node, out, deadline, argc, argv, argvlen, acked, sent)
                   : dlock__command(&c->node, out, deadline, once, argc, argv, argvlen, sent);
    }
    return rc;
}

void dlock__script_run_all(dlock__backend **cs, size_t n, size_t need, const dlock__all_judge *judge, int flags,
                           int which, redisReply **out, int *rcs, dlock__mono deadline, int numkeys, int nargs,
                           const char **args, const size_t *lens) {
    const char *argv[3 + MAX_SCRIPT_ARGS], *eargv[3 + MAX_SCRIPT_ARGS];
    size_t argvlen[3 + MAX_SCRIPT_ARGS], eargvlen[3 + MAX_SCRIPT_ARGS], i;
    char nk[DLOCK__DEC_MAX], enk[DLOCK__DEC_MAX];
    int argc = n > 0 ? script_argv(which, cs[0]->node.conf.cluster, 0, numkeys, nargs, args, lens, argv, argvlen, nk) : -1;
    dlock__all_req req = { argc, argv, eargv, argvlen, eargvlen };
    if (argc >= 0 && script_argv(which, cs[0]->node.conf.cluster, 1, numkeys, nargs, args, lens, eargv, eargvlen, enk) < 0)
        argc = -1;
    if (argc < 0) {
        for (i = 0; i < n; i++) {
            out[i] = NULL;
            rcs[i] = dlock__seterr(ENOMEM, "cannot make the script request (out of memory)");
        }
        return;
    }
    {
        dlock__node *ns[DLOCK__NODES_MAX];
        for (i = 0; i < n && i < DLOCK__NODES_MAX; i++) ns[i] = &cs[i]->node;
        dlock__command_all(ns, i, need, judge, flags, &req, out, rcs, deadline);
    }
    for (i = 0; i < n; i++) {
        if (out[i] == NULL || !is_noscript(out[i])) continue;
        /* That server does not know the script yet: the one-server path
         * loads it (rare: a new or restarted server). */
        freeReplyObject(out[i]);
        out[i] = NULL;
        rcs[i] = script_run(cs[i], which, &out[i], deadline, numkeys, nargs, args, lens, NULL, NULL);
    }
}

int dlock__script_append(redisContext *ctx, int which, int variant, int numkeys, int nargs,
                         const char **args, const size_t *lens) {
    const char *argv[3 + MAX_SCRIPT_ARGS];
    size_t argvlen[3 + MAX_SCRIPT_ARGS];
    char nk[DLOCK__DEC_MAX];
    int argc = script_argv(which, variant, 0, numkeys, nargs, args, lens, argv, argvlen, nk);
    if (argc < 0) return -1;
    return dlock__resp_append(ctx, argc, argv, argvlen) == 0 ? 0 : -1;
}

int dlock__script_load_all(dlock__conn *cn, int variant) {
    int i, n = 0, ok = 1;
    /* Every SCRIPT LOAD written at once, then every answer read: one round
     * trip, not one per script. */
    for (i = 0; i < DLOCK__NSCRIPTS; i++) {
        const char *body = dlock__script_body(i, variant);
        const char *argv[3] = { "SCRIPT", "LOAD", body };
        size_t lens[3] = { 6, 4, body ? strlen(body) : 0 };
        if (body == NULL || dlock__resp_append(cn->ctx, 3, argv, lens) != 0) return -2;
        n++;
    }
    if (dlock__conn_flush(cn) != 0) return -2;
    for (i = 0; i < n; i++) {
        void *r = NULL;
        if (dlock__conn_reply(cn, &r) != REDIS_OK || r == NULL) return -2; /* out of step: the caller drops cn */
        ok = ok && ((redisReply *)r)->type == REDIS_REPLY_STRING;
        freeReplyObject(r);
    }
    return ok ? 0 : -1;
}

/* Makes the keys of a lock (see DLOCK__K_*), of a condition variable
 * (its waiters at <prefix>{<name>}:cond, which is also its channel) or of
 * a semaphore (DLOCK__KS_*; the first, its value, is also its channel),
 * in one buffer; kind is a DLOCK__KEYS_*. */
int dlock__keys_make(dlock__keys *k, const char *prefix, const char *name, size_t namelen, int kind) {
    static const char *const lock_suffix[DLOCK__NKEYS + 1] = { "",         ":fence",   ":state", ":readers",
                                                               ":writers", ":handoff", ":fifo",  ":epoch" };
    static const char *const cond_suffix[DLOCK__NKEYS + 1] = { ":cond", ":cond", ":cond", ":cond",
                                                               ":cond", ":cond", ":cond", ":cond" };
    static const char *const sem_suffix[DLOCK__NKEYS + 1] = { ":sem",  ":semq", ":semx", ":semg",
                                                              ":semd", ":semo", ":semu", ":sem" };
    const char *const *suffix = kind == DLOCK__KEYS_COND ? cond_suffix : kind == DLOCK__KEYS_SEM ? sem_suffix : lock_suffix;
    size_t plen = strlen(prefix), base = plen + namelen + 2, total = 0, i;
    char *b;
    for (i = 0; i <= DLOCK__NKEYS; i++) total += base + strlen(suffix[i]) + 1;
    if ((b = malloc(total)) == NULL || (k->name = malloc(namelen + 1)) == NULL) {
        free(b);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    memcpy(k->name, name, namelen);
    k->name[namelen] = '\0';
    k->namelen = namelen;
    for (i = 0; i <= DLOCK__NKEYS; i++) {
        size_t sl = strlen(suffix[i]);
        k->keys[i] = b;
        k->keylens[i] = base + sl;
        memcpy(b, prefix, plen);
        b[plen] = '{';
        memcpy(b + plen + 1, name, namelen);
        b[plen + 1 + namelen] = '}';
        memcpy(b + base, suffix[i], sl + 1);
        b += base + sl + 1;
    }
    k->key = k->keys[DLOCK__K_LOCK];
    k->keylen = k->keylens[DLOCK__K_LOCK];
    return 0;
}

void dlock__keys_free(dlock__keys *k) {
    free(k->name);
    free(k->key);
    k->name = k->key = NULL;
}
