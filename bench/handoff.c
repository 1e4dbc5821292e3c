/* handoff.c -- what a contended handoff done by Lua scripts can
 * cost a Redis server at the least (`dlock-bench pairs --kind handoff` and
 * `--kind handoff-lean`; bench/run --callgrind counts their instructions).
 *
 * Each kind is two scripts and a BLPOP, run between two tokens on one
 * connection, the lock going back and forth: the waiter's acquire finds
 * the lock held and queues itself, the holder's release hands the lock to
 * the queue's head and pushes the grant to the head's list, the waiter
 * pops it (answered at once).  Every answer is checked.
 *
 * handoff: the floor -- ten calls, no guarantee beyond the order: the
 *   lock a string "TOKEN FENCE", the queue a list, the fence an INCR; no
 *   waiter's liveness, no expiry of its registration, no readers, robust
 *   marker, caching, deadlock record or holder identity.
 * handoff-lean: a lean design with dlock's guarantees on this path (21
 *   calls): the holder's hash (owner, fence, who, since, w), the waiter's
 *   liveness as a score in the waiting writers' zset (with its expiry),
 *   the queue a list whose entries carry the waiter's lease and identity
 *   (no ticket to compute, no metadata hash), a dead head skipped, the
 *   deadlock record cleared, the fence from the server's clock above the
 *   last one, the hash rewritten in place for the head.  dlock's layout
 *   since the fair queue became a list (its key here is :fifo too), less
 *   what dlock's scripts do beside it: the MGET that tells the lock's two
 *   forms apart, the robust marker, caching, withdrawal, the general
 *   paths (bench/README.md, "The handoff's server instructions").
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define TOK_A "0123456789abcdef0123456789abcdef"
#define TOK_B "fedcba9876543210fedcba9876543210"

static const char floor_acquire_lua[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v then return -1 end\n"
    "if string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then return 2 end\n"
    "local q = KEYS[1] .. ':q'\n"
    "redis.call('RPUSH', q, ARGV[1] .. '|' .. ARGV[2] .. '|' .. ARGV[3])\n"
    "redis.call('PEXPIRE', q, '20000')\n"
    "return {0, redis.call('PTTL', KEYS[1])}\n";
static const char floor_release_lua[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then return 0 end\n"
    "local h = redis.call('LPOP', KEYS[1] .. ':q')\n"
    "if not h then redis.call('DEL', KEYS[1]) return 1 end\n"
    "local tok = string.match(h, '^(%x+)|')\n"
    "local f = redis.call('INCR', KEYS[1] .. ':f')\n"
    "redis.call('SET', KEYS[1], tok .. ' ' .. f, 'PX', '2000')\n"
    "local gk = KEYS[1] .. ':g:' .. tok\n"
    "redis.call('RPUSH', gk, f)\n"
    "redis.call('PEXPIRE', gk, '2000')\n"
    "return 1\n";

static const char lean_acquire_lua[] =
    "local p, tok = KEYS[1], ARGV[1]\n"
    "local hm = redis.call('HMGET', p, 'owner', 'w')\n"
    "if not hm[1] then return -1 end\n"
    "if hm[1] == tok then return 2 end\n"
    "local wait = redis.call('PTTL', p)\n"
    "if not hm[2] then redis.call('HSET', p, 'w', '1') end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local lease = tonumber(ARGV[2])\n"
    "local e = string.format('%d', 2 * lease)\n"
    "local wk = p .. ':writers'\n"
    "local new = redis.call('ZADD', wk, string.format('%d', now + lease), tok)\n"
    "if redis.call('PEXPIRE', wk, e, 'GT') == 0 then redis.call('PEXPIRE', wk, e, 'NX') end\n"
    "if new == 1 then\n"
    "  local qk = p .. ':fifo'\n"
    "  if redis.call('RPUSH', qk, tok .. '|' .. ARGV[2] .. '|' .. ARGV[3]) == 1 then redis.call('PEXPIRE', qk, e)\n"
    "  elseif redis.call('PEXPIRE', qk, e, 'GT') == 0 then redis.call('PEXPIRE', qk, e, 'NX') end\n"
    "end\n"
    "return {0, wait, redis.call('GET', p .. ':fence') or ''}\n";
static const char lean_release_lua[] =
    "local p, tok = KEYS[1], ARGV[1]\n"
    "local hm = redis.call('HMGET', p, 'owner', 'w')\n"
    "if hm[1] ~= tok then return 0 end\n"
    "if not hm[2] then redis.call('DEL', p) return 1 end\n"
    "local wk, qk = p .. ':writers', p .. ':fifo'\n"
    "if redis.call('EXISTS', qk) == 0 then\n"
    "  redis.call('DEL', p)\n"
    "  redis.call('PUBLISH', p, 'released')\n"
    "  return 1\n"
    "end\n"
    "local t = redis.call('TIME')\n"
    "local us = t[2]\n"
    "if #us < 6 then us = string.rep('0', 6 - #us) .. us end\n"
    "local nows = t[1] .. string.sub(us, 1, 3)\n"
    "local now = tonumber(nows)\n"
    "local h, lease, who\n"
    "while true do\n"
    "  local e = redis.call('LPOP', qk)\n"
    "  if not e then break end\n"
    "  local tk, ls, w = string.match(e, '^(%x+)|(%d+)|(.*)$')\n"
    "  if tk and tonumber(redis.call('ZSCORE', wk, tk) or '0') > now then h, lease, who = tk, ls, w break end\n"
    "end\n"
    "if not h then\n"
    "  redis.call('DEL', p)\n"
    "  redis.call('PUBLISH', p, 'released')\n"
    "  return 1\n"
    "end\n"
    "redis.call('ZREM', wk, h)\n"
    "if redis.call('HDEL', p .. ':wmeta', h) == 1 then redis.call('ZREM', p .. ':waiting', h) end\n"
    "local fs = t[1] .. us\n"
    "local ls = redis.call('SET', p .. ':fence', fs, 'PX', '3600000', 'GET')\n"
    "if ls and (#ls > #fs or (#ls == #fs and ls >= fs)) then\n"
    "  fs = string.format('%d', tonumber(ls) + 1)\n"
    "  redis.call('SET', p .. ':fence', fs, 'PX', '3600000')\n"
    "end\n"
    "local g = string.format('%d', math.min(tonumber(lease), 2000))\n"
    "redis.call('HSET', p, 'owner', h, 'fence', fs, 'who', who, 'since', nows, 'w', '1')\n"
    "redis.call('PEXPIRE', p, g)\n"
    "local gk = p .. ':g:' .. h\n"
    "redis.call('RPUSH', gk, fs .. ':' .. g)\n"
    "redis.call('PEXPIRE', gk, g)\n"
    "return 1\n";

static void clear(redisContext *rc, const char *key) {
    freeReplyObject(bcmd(rc, "DEL %s %s:q %s:f %s:fifo %s:writers %s:fence %s:g:" TOK_A " %s:g:" TOK_B, key, key, key,
                         key, key, key, key, key));
}

/* Handoffs from, to, through the loaded scripts sa, sr on key: the i-th
 * goes from tok[i % 2] to the other (TOK_A holds the lock at the first). */
static void handoffs(redisContext *rc, const char *key, const char *sa, const char *sr, long from, long to) {
    static const char *tok[2] = { TOK_A, TOK_B };
    int64_t end = now_ns() + (int64_t)120e9;
    long i;
    redisReply *r;

    for (i = from; i < to && now_ns() < end; i++) {
        const char *h = tok[i % 2], *w = tok[(i + 1) % 2];
        int ok;
        r = bcmd(rc, "EVALSHA %s 1 %s %s 10000 host:1:2", sa, key, w);
        ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
             r->element[0]->integer == 0;
        freeReplyObject(r);
        if (!ok) die("handoff: the waiter's acquire did not queue");
        r = bcmd(rc, "EVALSHA %s 1 %s %s", sr, key, h);
        ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        freeReplyObject(r);
        if (!ok) die("handoff: the release did not grant");
        r = bcmd(rc, "BLPOP %s:g:%s 1", key, w);
        ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2;
        freeReplyObject(r);
        if (!ok) die("handoff: no grant");
    }
}

int handoff_pairs(const bopts *o) {
    redisContext *rc = bconnect(o);
    int lean = strcmp(o->kind, "handoff-lean") == 0;
    const char *key = lean ? "bench:{handoff-lean}" : "bench:{handoff}";
    long n = o->count > 0 ? o->count : 2000;
    char sa[64], sr[64];
    int64_t t0, t1;

    if (!lean && strcmp(o->kind, "handoff") != 0) die("pairs: --kind raw|dlock|handoff|handoff-lean");
    script_load(rc, lean ? lean_acquire_lua : floor_acquire_lua, sa, sizeof sa);
    script_load(rc, lean ? lean_release_lua : floor_release_lua, sr, sizeof sr);
    clear(rc, key);
    if (lean) {
        freeReplyObject(bcmd(rc, "HSET %s owner %s fence 1 who host:1:1 since 1 w 1", key, TOK_A));
        freeReplyObject(bcmd(rc, "PEXPIRE %s 60000", key));
    } else {
        freeReplyObject(bcmd(rc, "SET %s %s PX 60000", key, TOK_A " 1"));
    }
    handoffs(rc, key, sa, sr, 0, 50); /* warm-up */
    if (o->before != NULL && system(o->before) != 0) die("pairs: %s failed", o->before);
    t0 = now_ns();
    handoffs(rc, key, sa, sr, 50, 50 + n);
    t1 = now_ns();
    if (o->after != NULL && system(o->after) != 0) die("pairs: %s failed", o->after);
    clear(rc, key);
    printf("pairs %s %ld %.3f s\n", o->kind, n, (double)(t1 - t0) / 1e9);
    redisFree(rc);
    return 0;
}
