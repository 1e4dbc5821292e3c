/* test_lua_other.c -- the contract of the scripts beside the lock's
 * (src/backend/lua/): cond, sem, sem_info, sem_admin, waits, stats and
 * range, each run alone by EVALSHA on a real redis-server with the KEYS
 * and ARGV its header states, its replies and the keys it leaves checked
 * on the main cases.
 * labels: redis
 */
#include "fixture.h"
#include "lua_run.h"

#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

/* ------------------------------------------------------------ helpers */

static void do_cmd(redisReply *r) {
    if (r != NULL) freeReplyObject(r);
}

static long long run_int(redisReply *r) {
    long long v = dlt_int(r);
    do_cmd(r);
    return v;
}

static const char *get(const char *key, char *out, size_t cap) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET %s", key);
    snprintf(out, cap, "%s", dlt_str(r));
    do_cmd(r);
    return out;
}

/* --------------------------------------------------------------- cond */

#define CK "dlock:{v}:cond"

static long long cond(const char *op, const char *tok, const char *stale) {
    return run_int(dlt_lua(DLOCK__SCRIPT_COND, 1, CK, op, tok, "5000", stale, NULL));
}

/* wait registers; signal wakes the oldest (it is no longer registered);
 * check: still registered (and refreshed: the newest now); withdraw: 0 once signalled; broadcast wakes all;
 * stale registrations named after the ttl go first. */
static void test_cond(void) {
    DLT_ASSERT_INT_EQ(cond("wait", "w1", NULL), 1);
    DLT_ASSERT_INT_EQ(cond("wait", "w2", NULL), 1);
    DLT_ASSERT_INT_EQ(cond("wait", "w3", NULL), 1);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "PTTL %s", CK)) > 5000);
    /* (no check before the signal: a check refreshes, and w1 would be
     * the newest registration if a millisecond had passed) */
    DLT_ASSERT_INT_EQ(cond("signal", "-", NULL), 1);
    DLT_ASSERT_INT_EQ(cond("check", "w1", NULL), 0);
    DLT_ASSERT_INT_EQ(cond("withdraw", "w1", NULL), 0);
    DLT_ASSERT_INT_EQ(cond("check", "w2", "w3"), 1); /* w3 named stale: gone */
    DLT_ASSERT_INT_EQ(cond("check", "w3", NULL), 0);
    DLT_ASSERT_INT_EQ(cond("wait", "w4", NULL), 1);
    DLT_ASSERT_INT_EQ(cond("broadcast", "-", NULL), 2);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS %s", CK)), 0);
    DLT_ASSERT_INT_EQ(cond("signal", "-", NULL), 0);
}

/* ---------------------------------------------------------- semaphore */

#define SEMKEYS "dlock:{s}:sem", "dlock:{s}:semq", "dlock:{s}:semx", "dlock:{s}:semg", "dlock:{s}:semd", \
                "dlock:{s}:semo", "dlock:{s}:semu"

/* op, token, arg, lease, caller, op number (caller NULL: not remembered). */
static long long sem(const char *op, const char *tok, const char *arg, const char *lease, const char *caller,
                     const char *seq) {
    return run_int(dlt_lua(DLOCK__SCRIPT_SEM, 7, SEMKEYS, op, tok, "10000", arg, "60000", "h:1:2", lease, caller,
                           seq, NULL));
}

/* init once; take; an empty semaphore queues a waiter ('1'); a post hands
 * its unit to the queue's head (granted, the value untouched) and the
 * head's next take claims it; an op asked again does nothing twice. */
static void test_sem(void) {
    char v[64];
    DLT_ASSERT_INT_EQ(sem("init", "-", "1", "0", NULL, NULL), 1);
    DLT_ASSERT_INT_EQ(sem("init", "-", "5", "0", NULL, NULL), 0);
    DLT_ASSERT_INT_EQ(sem("take", "tA", "0", "0", "cA", "1"), 1);
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem", v, sizeof v), "0");
    DLT_ASSERT_INT_EQ(sem("take", "tA", "0", "0", "cA", "1"), 1); /* asked again */
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem", v, sizeof v), "0");
    DLT_ASSERT_INT_EQ(sem("take", "tB", "1", "0", "cB", "1"), 0);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %s", "dlock:{s}:semq")) == 1);
    DLT_ASSERT_INT_EQ(sem("post", "pA", "10", "0", "cA", "2"), 1);
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem", v, sizeof v), "0");
    {
        redisReply *r = dlt_redis_cmd(&dlt_server, "HGET %s tB", "dlock:{s}:semg");
        CU_ASSERT_STRING_EQUAL(dlt_str(r), "1");
        do_cmd(r);
    }
    DLT_ASSERT_INT_EQ(sem("take", "tB", "1", "0", "cB", "2"), 1);
    DLT_ASSERT_INT_EQ(sem("value", "-", "0", "0", NULL, NULL), 0);
    DLT_ASSERT_INT_EQ(sem("post", "pB", "10", "0", "cB", "3"), 1);
    DLT_ASSERT_INT_EQ(sem("post", "pB", "10", "0", "cB", "3"), 1); /* asked again: not twice */
    DLT_ASSERT_INT_EQ(sem("value", "-", "0", "0", NULL, NULL), 1);
    DLT_ASSERT_INT_EQ(sem("post", "pC", "1", "0", "cC", "1"), 0); /* past the maximum */
}

/* Undo's lease: a leased unit is listed, renewed, returned; sem_info
 * shows the value, the waiters by place and the leased units. */
static void test_sem_lease_and_info(void) {
    redisReply *r;
    DLT_ASSERT_INT_EQ(sem("init", "-", "1", "0", NULL, NULL), 1);
    DLT_ASSERT_INT_EQ(sem("take", "uA", "0", "10000", "cA", "1"), 1);
    DLT_ASSERT_INT_EQ(sem("take", "tB", "1", "0", "cB", "1"), 0);
    DLT_ASSERT_INT_EQ(sem("renew", "uA", "0", "10000", NULL, NULL), 1);
    DLT_ASSERT_INT_EQ(sem("renew", "uX", "0", "10000", NULL, NULL), 0);
    r = dlt_lua(DLOCK__SCRIPT_SEM_INFO, 7, SEMKEYS, "10", NULL);
    DLT_ASSERT_INT_EQ(dlt_len(r), 7);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "0");
    DLT_ASSERT_INT_EQ(dlt_int(dlt_el(r, 2)), 1); /* one live waiter */
    DLT_ASSERT_INT_EQ(dlt_int(dlt_el(r, 3)), 1); /* one leased unit */
    DLT_ASSERT_INT_EQ(dlt_int(dlt_el(dlt_el(r, 4), 0)), 0);
    CU_ASSERT(strncmp(dlt_str(dlt_el(dlt_el(r, 4), 1)), "w:", 2) == 0);
    CU_ASSERT(strncmp(dlt_str(dlt_el(dlt_el(r, 5), 1)), "u:", 2) == 0);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 6)), "(nil)"); /* never remade */
    do_cmd(r);
    DLT_ASSERT_INT_EQ(sem("return", "uA", "0", "10000", "cA", "2"), 1); /* to the waiter */
    DLT_ASSERT_INT_EQ(sem("return", "uA", "0", "10000", "cA", "2"), 1); /* asked again: once */
    DLT_ASSERT_INT_EQ(sem("return", "uA", "0", "10000", "cZ", "1"), 2); /* the lease is gone */
    DLT_ASSERT_INT_EQ(sem("take", "tB", "1", "0", "cB", "2"), 1);
}

/* sem_admin: expire and keep; break takes the leased units back; unlink
 * deletes it and leaves the mark that stops it being made again. */
static void test_sem_admin(void) {
    char v[64];
    DLT_ASSERT_INT_EQ(run_int(dlt_lua(DLOCK__SCRIPT_SEM_ADMIN, 7, SEMKEYS, "keep", "9000", "100", NULL)), -1);
    DLT_ASSERT_INT_EQ(sem("init", "-", "2", "0", NULL, NULL), 1);
    DLT_ASSERT_INT_EQ(run_int(dlt_lua(DLOCK__SCRIPT_SEM_ADMIN, 7, SEMKEYS, "keep", "9000", "100", NULL)), 0);
    DLT_ASSERT_INT_EQ(run_int(dlt_lua(DLOCK__SCRIPT_SEM_ADMIN, 7, SEMKEYS, "expire", "9000", "100", NULL)), 1);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "PTTL %s", "dlock:{s}:sem")) > 8000);
    DLT_ASSERT_INT_EQ(sem("take", "uA", "0", "10000", "cA", "1"), 1);
    DLT_ASSERT_INT_EQ(sem("take", "uB", "0", "10000", "cB", "1"), 1);
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem", v, sizeof v), "0");
    DLT_ASSERT_INT_EQ(run_int(dlt_lua(DLOCK__SCRIPT_SEM_ADMIN, 7, SEMKEYS, "break", "2", "100", NULL)), 2);
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem", v, sizeof v), "2");
    DLT_ASSERT_INT_EQ(sem("renew", "uA", "0", "10000", NULL, NULL), 0);
    DLT_ASSERT_INT_EQ(run_int(dlt_lua(DLOCK__SCRIPT_SEM_ADMIN, 7, SEMKEYS, "unlink", "2", "5000", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem", v, sizeof v), "(nil)");
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem:unlinked", v, sizeof v), "1");
    /* a take that names the value it opened with finds it unlinked, not lost */
    DLT_ASSERT_INT_EQ(run_int(dlt_lua(DLOCK__SCRIPT_SEM, 7, SEMKEYS, "take", "tC", "3000", "0", "60000", "h:1:2", "0",
                                      "cC", "1", "2", NULL)),
                      0);
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem", v, sizeof v), "(nil)");
}

/* A semaphore the server lost is made again by the op that names its
 * value, once, and noted '!remade'. */
static void test_sem_remade(void) {
    char v[64];
    DLT_ASSERT_INT_EQ(run_int(dlt_lua(DLOCK__SCRIPT_SEM, 7, SEMKEYS, "take", "tA", "3000", "0", "60000", "h:1:2", "0",
                                      "cA", "1", "3", NULL)),
                      1);
    CU_ASSERT_STRING_EQUAL(get("dlock:{s}:sem", v, sizeof v), "2");
    {
        redisReply *r = dlt_redis_cmd(&dlt_server, "HEXISTS %s !remade", "dlock:{s}:semo");
        DLT_ASSERT_INT_EQ(dlt_int(r), 1);
        do_cmd(r);
    }
}

/* -------------------------------------------------------------- waits */

#define WKEYS "dlock:{w}", "dlock:{w}:waiting", "dlock:{w}:wmeta", "dlock:{w}:readers", "dlock:{w}:writers", \
              "dlock:{w}:fifo"

static redisReply *waits(const char *op, const char *id, const char *rec) {
    return dlt_lua(DLOCK__SCRIPT_WAITS, 6, WKEYS, op, id, rec, "10000", NULL);
}

/* note registers a wait (since: the server's clock less its age), list
 * shows it and the queued waiters that hold nothing, holders names the
 * writer and readers, drop withdraws; the edge key's eset, eget, edel. */
static void test_waits(void) {
    redisReply *r = waits("note", "id1", "250|rec1");
    long long since, now;
    char want[64];
    DLT_ASSERT_INT_EQ(dlt_len(r), 1);
    since = atoll(dlt_str(dlt_el(r, 0)));
    do_cmd(r);
    r = waits("note", "id1", "999999|other"); /* written once */
    CU_ASSERT(atoll(dlt_str(dlt_el(r, 0))) == since);
    do_cmd(r);
    do_cmd(dlt_redis_cmd(&dlt_server, "ZADD %s 99999999999999 tQ", "dlock:{w}:writers"));
    do_cmd(dlt_redis_cmd(&dlt_server, "RPUSH %s %s", "dlock:{w}:fifo", "tQ|5000|0|2|2|1234|h:9:9"));
    r = waits("list", "-", "-");
    DLT_ASSERT_INT_EQ(dlt_len(r), 3);
    now = atoll(dlt_str(dlt_el(r, 0)));
    CU_ASSERT(now - since >= 250 && now - since < 60000);
    snprintf(want, sizeof want, "%lld|rec1", since);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 1)), want);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 2)), "1234|h:9:9|x|1");
    do_cmd(r);
    do_cmd(dlt_redis_cmd(&dlt_server, "SET %s %s", "dlock:{w}", "tH 5 6 h:1:1"));
    do_cmd(dlt_redis_cmd(&dlt_server, "ZADD %s 99999999999999 tR", "dlock:{w}:readers"));
    r = waits("holders", "-", "-");
    DLT_ASSERT_INT_EQ(dlt_len(r), 2);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "tH");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 1)), "tR");
    do_cmd(r);
    do_cmd(waits("drop", "id1", "-"));
    r = waits("list", "-", "-");
    DLT_ASSERT_INT_EQ(dlt_len(r), 2); /* now, and the queued waiter */
    do_cmd(r);
    do_cmd(dlt_lua(DLOCK__SCRIPT_WAITS, 1, "dlock:dlw:{tH}", "eset", "tH", "edge1 x", "10000", NULL));
    r = dlt_lua(DLOCK__SCRIPT_WAITS, 1, "dlock:dlw:{tH}", "eget", "tH", "-", "10000", NULL);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "edge1 x");
    do_cmd(r);
    do_cmd(dlt_lua(DLOCK__SCRIPT_WAITS, 1, "dlock:dlw:{tH}", "edel", "tH", "edge2", "10000", NULL));
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS %s", "dlock:dlw:{tH}")), 1);
    do_cmd(dlt_lua(DLOCK__SCRIPT_WAITS, 1, "dlock:dlw:{tH}", "edel", "tH", "edge1", "10000", NULL));
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS %s", "dlock:dlw:{tH}")), 0);
    r = waits("nosuch", "-", "-");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_ERROR && strstr(r->str, "waits: unknown op") != NULL);
    do_cmd(r);
}

/* -------------------------------------------------------------- stats */

/* add sums a second's counts per lock and grows the counters; read
 * answers the busiest locks of the window with their summed figures. */
static void test_stats(void) {
    const char *base = "dlock:{dlock-stats}";
    const redisReply *f;
    redisReply *r;
    long long now = run_int(dlt_lua(DLOCK__SCRIPT_STATS, 1, base, "add", "70", "1:a a 3 w0 1 L 2;2:bb a 9;", NULL));
    long long now2 = run_int(dlt_lua(DLOCK__SCRIPT_STATS, 1, base, "add", "70", "1:a a 1;", NULL));
    size_t i;
    int a = 0, L = 0;
    CU_ASSERT(now > 1700000000LL && now2 >= now);
    r = dlt_lua(DLOCK__SCRIPT_STATS, 1, base, "read", "5", "10", NULL);
    DLT_ASSERT_INT_EQ(dlt_len(r), 5);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 1)), "bb"); /* the busiest first */
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 3)), "a");
    f = dlt_el(r, 4);
    for (i = 0; f != NULL && i + 1 < f->elements; i += 2) {
        if (strcmp(dlt_str(f->element[i]), "a") == 0) a = (int)dlt_int(f->element[i + 1]);
        if (strcmp(dlt_str(f->element[i]), "L") == 0) L = (int)dlt_int(f->element[i + 1]);
    }
    DLT_ASSERT_INT_EQ(a, 4);
    DLT_ASSERT_INT_EQ(L, 2);
    do_cmd(r);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "TTL %s", "dlock:{dlock-stats}:c:a")) > 60);
}

/* The cumulative histograms' fields (capitals) grow the counters' hash,
 * which expires after ARGV[4] seconds, not the window's; the lower-case
 * per-second ones stay out of it. */
static void test_stats_cumulative(void) {
    const char *base = "dlock:{dlock-stats}";
    const char *ck = "dlock:{dlock-stats}:c:hc";
    redisReply *r;
    run_int(dlt_lua(DLOCK__SCRIPT_STATS, 1, base, "add", "70", "2:hc a 2 w0 2 W4 2 WS 61000 H7 1 HS 300000;",
                    "86400", NULL));
    run_int(dlt_lua(DLOCK__SCRIPT_STATS, 1, base, "add", "70", "2:hc a 1 W4 1 WS 30000;", "86400", NULL));
    DLT_ASSERT_INT_EQ(atoll(dlt_str(r = dlt_redis_cmd(&dlt_server, "HGET %s W4", ck))), 3);
    freeReplyObject(r);
    DLT_ASSERT_INT_EQ(atoll(dlt_str(r = dlt_redis_cmd(&dlt_server, "HGET %s WS", ck))), 91000);
    freeReplyObject(r);
    DLT_ASSERT_INT_EQ(atoll(dlt_str(r = dlt_redis_cmd(&dlt_server, "HGET %s H7", ck))), 1);
    freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HEXISTS %s w0", ck)), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HEXISTS %s a", ck)), 0);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "TTL %s", ck)) > 86000);
}

/* -------------------------------------------------------------- range */

#define RK "dlock:{f}:rl"

/* op, owner, type, start, end, wait. */
static redisReply *range(const char *op, const char *own, const char *ty, const char *s, const char *e,
                         const char *wait) {
    return dlt_lua(DLOCK__SCRIPT_RANGE, 1, RK, op, own, "10000", ty, s, e, own, wait, NULL);
}

/* set takes a range or names the lowest conflicting one and its owner;
 * a read beside a read is fine; unl cuts a range (split); a cycle of
 * waits is refused ({"2"}); renew names what is held; bad requests are
 * errors. */
static void test_range(void) {
    redisReply *r = range("set", "o1", "2", "0", "9", "0");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "0");
    do_cmd(r);
    r = range("set", "o2", "1", "5", "20", "0");
    DLT_ASSERT_INT_EQ(dlt_len(r), 6);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "1");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 1)), "2");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 2)), "0");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 3)), "9");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 4)), "o1");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 5)), "o1");
    do_cmd(r);
    r = range("unl", "o1", "2", "3", "5", "0");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 1)), "2"); /* 0-2 and 6-9 left */
    do_cmd(r);
    r = range("set", "o2", "1", "3", "5", "0");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "0");
    do_cmd(r);
    r = range("renew", "o2", "0", "0", "0", "0");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 1)), "1");
    do_cmd(r);
    r = range("renew", "o3", "0", "0", "0", "0");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "1"); /* unknown */
    do_cmd(r);
    /* o1 waits for o2's 3-5; o2 asking, waiting, for o1's 6-9 closes a cycle */
    r = range("set", "o1", "2", "3", "5", "1");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "1");
    do_cmd(r);
    r = dlt_lua(DLOCK__SCRIPT_RANGE, 1, RK, "set", "o2", "10000", "2", "6", "9", "o2", "1", NULL);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "2");
    do_cmd(r);
    r = range("get", "o2", "2", "9", "3", "0");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_ERROR && strstr(r->str, "range: bad request") != NULL);
    do_cmd(r);
    r = range("nosuch", "o2", "2", "3", "9", "0");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_ERROR && strstr(r->str, "range: unknown op") != NULL);
    do_cmd(r);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_cond),
    DLT_TEST(test_sem),
    DLT_TEST(test_sem_lease_and_info),
    DLT_TEST(test_sem_admin),
    DLT_TEST(test_sem_remade),
    DLT_TEST(test_waits),
    DLT_TEST(test_stats),
    DLT_TEST(test_stats_cumulative),
    DLT_TEST(test_range),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "lua_other", tests);
}
