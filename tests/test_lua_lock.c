/* test_lua_lock.c -- the contract of each lock script (src/backend/lua/):
 * acquire, acquire_shared, release, renew, reset, info, fence_next,
 * fence_raise and fenced_set, each run alone by EVALSHA on a real
 * redis-server with the KEYS and ARGV its header states, its replies and
 * the keys it leaves checked on the main cases.
 * labels: redis
 */
#include "fixture.h"
#include "lua_run.h"

#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#define LK "dlock:{c}"

/* ------------------------------------------------------------ helpers */

static void do_cmd(redisReply *r) {
    if (r != NULL) freeReplyObject(r);
}

static redisReply *cmd(const char *fmt, const char *a) {
    return dlt_redis_cmd(&dlt_server, fmt, a);
}

/* GET key ("(nil)" when absent), into out. */
static const char *get(const char *key, char *out, size_t cap) {
    redisReply *r = cmd("GET %s", key);
    snprintf(out, cap, "%s", dlt_str(r));
    if (r != NULL) freeReplyObject(r);
    return out;
}

static const char *hget(const char *key, const char *field, char *out, size_t cap) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "HGET %s %s", key, field);
    snprintf(out, cap, "%s", dlt_str(r));
    if (r != NULL) freeReplyObject(r);
    return out;
}

static long long pttl(const char *key) {
    return dlt_reply_int(cmd("PTTL %s", key));
}

/* The server's clock in ns, as digits. */
static void clock_ns(char *out, size_t cap) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "TIME");
    snprintf(out, cap, "%s%06ld000", dlt_str(dlt_el(r, 0)), atol(dlt_str(dlt_el(r, 1))));
    if (r != NULL) freeReplyObject(r);
}

/* Decimal strings (no leading zeros) compared: <0, 0, >0. */
static int deccmp(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}

/* An exclusive acquire on LK alone: token, lease, flags, "SINCE WHO". */
static redisReply *acq(const char *tok, const char *lease, const char *flags, const char *who) {
    return dlt_lua(DLOCK__SCRIPT_ACQUIRE, 1, LK, tok, lease, flags, who, NULL);
}

static redisReply *rel(const char *tok, const char *how) {
    return dlt_lua(DLOCK__SCRIPT_RELEASE, 1, LK, tok, how, NULL);
}

/* The reply's first element (a status) and, for a string reply (the
 * uncontended path's fence alone), -1. */
static long long status_of(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_STRING ? -1 : dlt_int(dlt_el(r, 0));
}

/* ------------------------------------------------------------ acquire */

/* A free lock: the fence alone, the string "TOKEN FENCE SINCE WHO" with
 * the lease, the fence key; the same token again: {2, fence}, the string
 * now the hash it stands for. */
static void test_acquire_free_and_again(void) {
    char ns[40], v[200], want[200], fence[40];
    redisReply *r;
    clock_ns(ns, sizeof ns);
    r = acq("tA", "5000", "0000", "123 h:1:2");
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_STRING);
    snprintf(fence, sizeof fence, "%s", r->str);
    freeReplyObject(r);
    CU_ASSERT(deccmp(fence, ns) >= 0);
    snprintf(want, sizeof want, "tA %s 123 h:1:2", fence);
    CU_ASSERT_STRING_EQUAL(get(LK, v, sizeof v), want);
    CU_ASSERT(pttl(LK) > 0 && pttl(LK) <= 5000);
    CU_ASSERT_STRING_EQUAL(get(LK ":fence", v, sizeof v), fence);
    r = acq("tA", "7000", "0000", "124 h:1:2");
    DLT_ASSERT_INT_EQ(status_of(r), 2);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 1)), fence);
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT_STRING_EQUAL(hget(LK, "owner", v, sizeof v), "tA");
    CU_ASSERT_STRING_EQUAL(hget(LK, "fence", v, sizeof v), fence);
    CU_ASSERT_STRING_EQUAL(hget(LK, "who", v, sizeof v), "h:1:2");
    CU_ASSERT(pttl(LK) > 5000);
}

/* Held by another: {0, ms, the holder's fence}; a waiter (W) marks the
 * hash and registers; with Q it joins the fair queue once, its entry
 * "TOK|LEASE|RB|Q|L|SINCE|WHO"; asked again (and by the H path) it is not
 * queued twice. */
static void test_acquire_busy_registers_and_queues(void) {
    char v[200], fence[40];
    redisReply *r = acq("tA", "5000", "0000", "123 h:1:2");
    snprintf(fence, sizeof fence, "%s", dlt_str(r));
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "0110", "124 h:1:3");
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    CU_ASSERT(dlt_int(dlt_el(r, 1)) > 0 && dlt_int(dlt_el(r, 1)) <= 5000);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 2)), fence);
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT_STRING_EQUAL(hget(LK, "owner", v, sizeof v), "tA");
    CU_ASSERT_STRING_EQUAL(hget(LK, "w", v, sizeof v), "1");
    r = dlt_redis_cmd(&dlt_server, "ZSCORE %s tB", LK ":writers");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING);
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "01102", "124 h:1:3"); /* H: the holder read first */
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 2)), fence);
    if (r != NULL) freeReplyObject(r);
    r = dlt_redis_cmd(&dlt_server, "LRANGE %s 0 -1", LK ":fifo");
    DLT_ASSERT_INT_EQ(dlt_len(r), 1);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "tB|5000|0|1|0||h:1:3");
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT(pttl(LK ":fifo") > 5000 && pttl(LK ":writers") > 5000);
}

/* An acquire with a lock-delay (ARGV[5] "0", [6] the delay): the hash
 * with ld and exp (its lease's end), the key kept lease + delay; a
 * release before exp deletes it.  Past exp (a lapse) the key stays: its
 * holder's renewal and release are refused (0) and leave it, its own
 * acquire finds it another's; everyone gets {0, ms} with the delay's rest,
 * a fair waiter registers and queues, and takes it at the delay's end; a
 * grant gives a queued waiter with a delay (its entry's LEASE
 * "LEASE+DELAY") ld and exp; info tells the delay (7th) with an empty
 * record; a reset (dlock break) ends it. */
static void test_acquire_lock_delay(void) {
    char v[200];
    redisReply *r = dlt_lua(DLOCK__SCRIPT_ACQUIRE, 1, LK, "tA", "300", "0000", "1 h:1:2", "0", "400", NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT_STRING_EQUAL(hget(LK, "ld", v, sizeof v), "400");
    CU_ASSERT(pttl(LK) > 400 && pttl(LK) <= 700);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "hash 0 h:1:2")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK)), 0);
    /* a lapse: nobody until the key's expiry, trylock or queue */
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE, 1, LK, "tA", "150", "0000", "1 h:1:2", "0", "400", NULL);
    if (r != NULL) freeReplyObject(r);
    dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RENEW, 1, LK, "tA", "150", "x", NULL)), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "hash 0 h:1:2")), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK)), 1);
    r = dlt_lua(DLOCK__SCRIPT_INFO, 1, LK, NULL);
    DLT_ASSERT_INT_EQ(dlt_len(dlt_el(r, 0)), 0);
    CU_ASSERT(dlt_int(dlt_el(r, 6)) > 0 && dlt_int(dlt_el(r, 6)) <= 400);
    if (r != NULL) freeReplyObject(r);
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE, 1, LK, "tA", "150", "0000", "1 h:1:2", "0", "400", NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 0); /* its own, past its lease: another's */
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "0000", "2 h:1:3");
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    CU_ASSERT(dlt_int(dlt_el(r, 1)) > 0 && dlt_int(dlt_el(r, 1)) <= 400);
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "0110", "2 h:1:3"); /* a fair waiter registers and queues */
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    CU_ASSERT(dlt_int(dlt_el(r, 1)) > 0 && dlt_int(dlt_el(r, 1)) <= 400);
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "01102", "2 h:1:3"); /* the H path too */
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("LLEN %s", LK ":fifo")), 1);
    dlt_sleep_ms(450);
    r = acq("tB", "5000", "0110", "2 h:1:3");
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    if (r != NULL) freeReplyObject(r);
    /* a grant gives a queued waiter with a delay its ld and exp */
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE, 1, LK, "tC", "5000", "0120", "3 h:1:4", "0", "700", NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    if (r != NULL) freeReplyObject(r);
    r = dlt_redis_cmd(&dlt_server, "LRANGE %s 0 -1", LK ":fifo");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "tC|5000+700|0|2|0||h:1:4");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tB", "plain 0 h:1:3")), 2); /* handed to tC */
    CU_ASSERT_STRING_EQUAL(hget(LK, "owner", v, sizeof v), "tC");
    CU_ASSERT_STRING_EQUAL(hget(LK, "ld", v, sizeof v), "700");
    CU_ASSERT(pttl(LK) > 2000 && pttl(LK) <= 2700);
    /* renewal keeps it the delay past the lease */
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RENEW, 1, LK, "tC", "5000", "x", NULL)), 1);
    CU_ASSERT(pttl(LK) > 5000 && pttl(LK) <= 5700);
    r = dlt_lua(DLOCK__SCRIPT_INFO, 1, LK, NULL);
    DLT_ASSERT_INT_EQ(dlt_int(dlt_el(r, 6)), -2);
    CU_ASSERT(dlt_int(dlt_el(r, 1)) > 4000 && dlt_int(dlt_el(r, 1)) <= 5000); /* the lease left, not the key's */
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RESET, 1, LK, LK, "break", NULL)), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK)), 0);
}

/* The lock value block <lock>:lvb: a release's ARGV[3] writes it (v, ok
 * 1), even of the string form; a lock with one is taken as the hash
 * (lvb 1), which opens it (open: the token); a take that finds it still
 * open (the hold before lapsed) marks it invalid (ok 0); a release closes
 * it, a reset too, keeping it as it is. */
static void test_lvb(void) {
    char v[200];
    redisReply *r = acq("tA", "5000", "0000", "1 h:1:2");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RELEASE, 1, LK, "tA", "plain 0 h:1:2", "v1", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "v", v, sizeof v), "v1");
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "ok", v, sizeof v), "1");
    r = acq("tB", "5000", "0000", "2 h:1:3"); /* not the string: the EXISTS names the block */
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT_STRING_EQUAL(hget(LK, "lvb", v, sizeof v), "1");
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "open", v, sizeof v), "tB");
    (void)dlt_reply_int(cmd("DEL %s", LK)); /* tB's lease lapses */
    r = acq("tC", "5000", "0000", "3 h:1:4");
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "ok", v, sizeof v), "0");
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "open", v, sizeof v), "tC");
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "v", v, sizeof v), "v1");
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RELEASE, 1, LK, "tC", "hash 0 h:1:4", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "open", v, sizeof v), "(nil)");
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "ok", v, sizeof v), "0"); /* written by nobody since */
    r = acq("tD", "5000", "0000", "4 h:1:5");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RELEASE, 1, LK, "tD", "hash 0 h:1:5", "v2", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "v", v, sizeof v), "v2");
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "ok", v, sizeof v), "1");
    r = acq("tE", "5000", "0000", "5 h:1:6");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RESET, 1, LK, LK, "break", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "open", v, sizeof v), "(nil)");
    CU_ASSERT_STRING_EQUAL(hget(LK ":lvb", "ok", v, sizeof v), "1");
}

/* Robust: the marker "held" and the taker; after a holder died ("dead"
 * release) the next gets {4, fence} (EOWNERDEAD) with a higher fence;
 * after "inconsistent", {3, 0} for everyone. */
static void test_acquire_robust(void) {
    char v[64], f1[40];
    redisReply *r = acq("tA", "5000", "1000", "1 h:1:2");
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    snprintf(f1, sizeof f1, "%s", dlt_str(dlt_el(r, 1)));
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT_STRING_EQUAL(get(LK ":state", v, sizeof v), "held");
    CU_ASSERT_STRING_EQUAL(get(LK ":taker", v, sizeof v), "tA");
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "dead 0 h:1:2")), 1);
    r = acq("tB", "5000", "1000", "2 h:1:3");
    DLT_ASSERT_INT_EQ(status_of(r), 4);
    CU_ASSERT(deccmp(dlt_str(dlt_el(r, 1)), f1) > 0);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tB", "inconsistent 0 h:1:3")), 1);
    CU_ASSERT_STRING_EQUAL(get(LK ":state", v, sizeof v), "notrecoverable");
    r = acq("tC", "5000", "1000", "3 h:1:4");
    DLT_ASSERT_INT_EQ(status_of(r), 3);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK)), 0);
}

/* Caching: {1, fence, others}, the hash marked cache; held back: the
 * releaser named by the handoff key, with a live waiting writer, gets
 * {5, ms}; the restart guard: {0, ms} until the epoch. */
static void test_acquire_caching_heldback_guard(void) {
    char v[64];
    redisReply *r = acq("tA", "5000", "0001", "1 h:1:2");
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    DLT_ASSERT_INT_EQ(dlt_int(dlt_el(r, 2)), 0);
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT_STRING_EQUAL(hget(LK, "cache", v, sizeof v), "1");
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("DEL %s", LK)), 1);
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s 99999999999999 tW", LK ":writers"));
    do_cmd(dlt_redis_cmd(&dlt_server, "SET %s h:1:2 PX 5000", LK ":handoff"));
    r = acq("tA", "5000", "0100", "1 h:1:2");
    DLT_ASSERT_INT_EQ(status_of(r), 5);
    CU_ASSERT(dlt_int(dlt_el(r, 1)) > 0 && dlt_int(dlt_el(r, 1)) <= 5000);
    if (r != NULL) freeReplyObject(r);
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE, 2, "dlock:{g}", "dlock:{g}:epoch", "tA", "5000", "0000", "1 h:1:2", "1000",
                NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    CU_ASSERT(dlt_int(dlt_el(r, 1)) > 900 && dlt_int(dlt_el(r, 1)) <= 1000);
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT(strcmp(get("dlock:{g}:epoch", v, sizeof v), "(nil)") != 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", "dlock:{g}")), 0);
}

/* A cluster's request names all eight keys: the same uncontended take. */
static void test_acquire_eight_keys(void) {
    char v[200];
    redisReply *r = dlt_lua(DLOCK__SCRIPT_ACQUIRE, 8, LK, LK ":fence", LK ":state", LK ":readers", LK ":writers",
                            LK ":handoff", LK ":fifo", LK ":epoch", "tA", "5000", "0000", "9 h:1:2", NULL);
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_STRING);
    CU_ASSERT_STRING_EQUAL(get(LK ":fence", v, sizeof v), r->str);
    freeReplyObject(r);
    CU_ASSERT(strncmp(get(LK, v, sizeof v), "tA ", 3) == 0);
}

/* ----------------------------------------------------- acquire_shared */

/* Readers share; again: {2, ...}; a waiting writer holds new readers
 * back unless they prefer readers; a writer's hold, every reader, and the
 * reader marks (and first turns the string into) the hash. */
static void test_acquire_shared(void) {
    char v[64];
    redisReply *r = dlt_lua(DLOCK__SCRIPT_ACQUIRE_SHARED, 1, LK, "tR", "5000", "0", "0", NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    CU_ASSERT(strlen(dlt_str(dlt_el(r, 1))) >= 19);
    if (r != NULL) freeReplyObject(r);
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE_SHARED, 1, LK, "tR", "5000", "0", "0", NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 2);
    if (r != NULL) freeReplyObject(r);
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s 99999999999999 tW", LK ":writers"));
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE_SHARED, 1, LK, "tS", "5000", "0", "0", NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    if (r != NULL) freeReplyObject(r);
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE_SHARED, 1, LK, "tS", "5000", "0", "1", NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("ZCARD %s", LK ":readers")), 2);
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s %s", LK ":readers", LK ":writers"));
    r = acq("tA", "5000", "0000", "1 h:1:2");
    if (r != NULL) freeReplyObject(r);
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE_SHARED, 1, LK, "tR", "5000", "0", "1", NULL);
    DLT_ASSERT_INT_EQ(status_of(r), 0);
    CU_ASSERT(dlt_int(dlt_el(r, 1)) > 0);
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT_STRING_EQUAL(hget(LK, "owner", v, sizeof v), "tA");
    CU_ASSERT_STRING_EQUAL(hget(LK, "w", v, sizeof v), "1");
}

/* ------------------------------------------------------------ release */

/* The string: only its token releases it.  An unmarked hash: deleted. */
static void test_release_plain(void) {
    redisReply *r = acq("tA", "5000", "0000", "1 h:1:2");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tB", "plain 0 h:1:3")), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "plain 0 h:1:2")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK)), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "plain 0 h:1:2")), 0);
    r = acq("tA", "5000", "0001", "1 h:1:2"); /* caching: a hash, unmarked */
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "hash 0 h:1:2")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK)), 0);
    r = acq("tA", "5000", "0000", "1 h:1:2"); /* "hash" of a string: another's, 0 */
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "hash 0 h:1:2")), 0);
}

/* A queued waiter (delivery 2) is granted the lock: the hash its own
 * with the grant's lease (at most 2 s), "FENCE:MS" pushed to its grant
 * list, the queue and its registration gone; the release answers 2 (a
 * handoff), and 1 when nobody is queued. */
static void test_release_grants_queue_head(void) {
    char v[200], want[240];
    redisReply *r = acq("tA", "5000", "0000", "1 h:1:2");
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "0120", "2 h:1:3");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "plain 0 h:1:2")), 2);
    CU_ASSERT_STRING_EQUAL(hget(LK, "owner", v, sizeof v), "tB");
    CU_ASSERT_STRING_EQUAL(hget(LK, "who", v, sizeof v), "h:1:3");
    CU_ASSERT(pttl(LK) > 0 && pttl(LK) <= 2000);
    hget(LK, "fence", v, sizeof v);
    snprintf(want, sizeof want, "%s:2000", v);
    r = dlt_redis_cmd(&dlt_server, "LRANGE %s 0 -1", LK ":g:tB");
    DLT_ASSERT_INT_EQ(dlt_len(r), 1);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), want);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK ":fifo")), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("ZCARD %s", LK ":writers")), 0);
    /* the new holder's acquire finds it its own */
    r = acq("tB", "5000", "0120", "2 h:1:3");
    DLT_ASSERT_INT_EQ(status_of(r), 2);
    if (r != NULL) freeReplyObject(r);
    /* its release, nobody queued: 1 */
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tB", "hash 0 h:1:3")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK)), 0);
}

/* A marked hash with a waiting writer and no queue: "released" published
 * on the lock key, and the releaser held back for the window (the
 * handoff key names it). */
static void test_release_publishes_and_holds_back(void) {
    char v[64];
    redisContext *sub = redisConnect("127.0.0.1", dlt_server.port);
    redisReply *r;
    CU_ASSERT_FATAL(sub != NULL && !sub->err);
    redisSetTimeout(sub, (struct timeval){ 2, 0 });
    r = redisCommand(sub, "SUBSCRIBE %s", LK);
    if (r != NULL) freeReplyObject(r);
    r = acq("tA", "5000", "0000", "1 h:1:2");
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "0100", "2 h:1:3");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "plain 5000 h:1:2")), 1);
    CU_ASSERT_STRING_EQUAL(get(LK ":handoff", v, sizeof v), "h:1:2");
    CU_ASSERT(pttl(LK ":handoff") > 0 && pttl(LK ":handoff") <= 5000);
    r = NULL;
    CU_ASSERT(redisGetReply(sub, (void **)&r) == REDIS_OK);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "message");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 2)), "released");
    if (r != NULL) freeReplyObject(r);
    redisFree(sub);
}

/* shared, withdraw, undo and clean: each ends what it names. */
static void test_release_other_kinds(void) {
    char v[64];
    redisReply *r = dlt_lua(DLOCK__SCRIPT_ACQUIRE_SHARED, 1, LK, "tR", "5000", "0", "0", NULL);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tR", "shared 0 x")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tR", "shared 0 x")), 0);
    r = acq("tA", "5000", "0000", "1 h:1:2");
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "0110", "2 h:1:3");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tB", "withdraw 0 x")), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK ":fifo")), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("ZCARD %s", LK ":writers")), 0);
    CU_ASSERT_STRING_EQUAL(hget(LK, "owner", v, sizeof v), "tA");
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "plain 0 x")), 1);
    r = acq("tA", "5000", "1000", "1 h:1:2"); /* robust, on a clean lock */
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "undo 0 x")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK ":state")), 0); /* as if never taken */
    r = acq("tA", "5000", "1000", "1 h:1:2");
    DLT_ASSERT_INT_EQ(status_of(r), 1);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(rel("tA", "clean 0 x")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK ":state")), 0);
}

/* -------------------------------------------------------------- renew */

static void test_renew(void) {
    char v[200];
    redisReply *r = acq("tA", "4000", "0000", "1 h:1:2");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RENEW, 1, LK, "tA", "9000", "x", NULL)), 1);
    CU_ASSERT(pttl(LK) > 5000);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RENEW, 1, LK, "tB", "9000", "x", NULL)), 0);
    /* a pipelined SET's string keeps no fence: the renewal records it */
    do_cmd(dlt_redis_cmd(&dlt_server, "SET %s %s PX 4000", LK, "tA - 123 h:1:2"));
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RENEW, 1, LK, "tA", "9000", "x", "777", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(get(LK, v, sizeof v), "tA 777 123 h:1:2");
    CU_ASSERT(pttl(LK) > 5000);
    /* a cached hash someone asked for: 2 */
    (void)dlt_reply_int(cmd("DEL %s", LK));
    do_cmd(dlt_redis_cmd(&dlt_server, "HSET %s owner tA cache 1 w 1", LK));
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RENEW, 1, LK, "tA", "9000", "x", NULL)), 2);
    /* a read hold: its score moves on */
    r = dlt_lua(DLOCK__SCRIPT_ACQUIRE_SHARED, 1, "dlock:{r}", "tR", "4000", "0", "0", NULL);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RENEW, 1, "dlock:{r}:readers", "tR", "9000", "s", NULL)),
                      1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RENEW, 1, "dlock:{r}:readers", "tX", "9000", "s", NULL)),
                      0);
    CU_ASSERT(pttl("dlock:{r}:readers") > 9000);
}

/* -------------------------------------------------------- reset, info */

static void test_reset(void) {
    char v[64];
    redisReply *r = acq("tA", "5000", "1000", "1 h:1:2");
    if (r != NULL) freeReplyObject(r);
    r = acq("tB", "5000", "1110", "2 h:1:3");
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RESET, 1, LK, LK, "break", NULL)), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS %s %s %s %s", LK, LK ":fifo",
                                                  LK ":writers", LK ":taker")),
                      0);
    CU_ASSERT_STRING_EQUAL(get(LK ":state", v, sizeof v), "held"); /* break: the next gets EOWNERDEAD */
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_RESET, 1, LK, LK, "reset", NULL)), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(cmd("EXISTS %s", LK ":state")), 0);
}

static void test_info(void) {
    char fence[40];
    const redisReply *h;
    redisReply *r = acq("tA", "5000", "0000", "123 h:1:2");
    snprintf(fence, sizeof fence, "%s", dlt_str(r));
    if (r != NULL) freeReplyObject(r);
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s 99999999999999 tW", LK ":writers"));
    r = dlt_lua(DLOCK__SCRIPT_INFO, 1, LK, NULL);
    DLT_ASSERT_INT_EQ(dlt_len(r), 7);
    DLT_ASSERT_INT_EQ(dlt_int(dlt_el(r, 6)), -2); /* no lock-delay marker */
    h = dlt_el(r, 0);
    DLT_ASSERT_INT_EQ(dlt_len(h), 8);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(h, 0)), "owner");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(h, 1)), "tA");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(h, 3)), "h:1:2");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(h, 5)), "123");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(h, 7)), fence);
    CU_ASSERT(dlt_int(dlt_el(r, 1)) > 0);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 2)), "");
    DLT_ASSERT_INT_EQ(dlt_int(dlt_el(r, 3)), 0);
    DLT_ASSERT_INT_EQ(dlt_int(dlt_el(r, 4)), 1);
    CU_ASSERT(dlt_int(dlt_el(r, 5)) > 1700000000000LL);
    if (r != NULL) freeReplyObject(r);
}

/* ------------------------------------------------------------- fences */

/* fence_next: max(last + 1, the clock in ns), carried over every digit. */
static void test_fence_next(void) {
    char ns[40], f1[40], v[64];
    redisReply *r;
    clock_ns(ns, sizeof ns);
    r = dlt_lua(DLOCK__SCRIPT_FENCE_NEXT, 1, LK ":fence", NULL);
    snprintf(f1, sizeof f1, "%s", dlt_str(r));
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT(deccmp(f1, ns) >= 0);
    CU_ASSERT_STRING_EQUAL(get(LK ":fence", v, sizeof v), f1);
    do_cmd(dlt_redis_cmd(&dlt_server, "SET %s 99999999999999999999", LK ":fence"));
    r = dlt_lua(DLOCK__SCRIPT_FENCE_NEXT, 1, LK ":fence", NULL);
    CU_ASSERT_STRING_EQUAL(dlt_str(r), "100000000000000000000");
    if (r != NULL) freeReplyObject(r);
    do_cmd(dlt_redis_cmd(&dlt_server, "SET %s 99999999999999999919", LK ":fence"));
    r = dlt_lua(DLOCK__SCRIPT_FENCE_NEXT, 1, LK ":fence", NULL);
    CU_ASSERT_STRING_EQUAL(dlt_str(r), "99999999999999999920");
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT(pttl(LK ":fence") > 3500000);
}

static void test_fence_raise_and_fenced_set(void) {
    char v[64];
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_FENCE_RAISE, 1, LK ":fence", "500", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(get(LK ":fence", v, sizeof v), "500");
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_FENCE_RAISE, 1, LK ":fence", "40", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(get(LK ":fence", v, sizeof v), "500");
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_FENCE_RAISE, 1, LK ":fence", "1000", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(get(LK ":fence", v, sizeof v), "1000");
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_FENCED_SET, 1, "data", "100", "v1", NULL)), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_FENCED_SET, 1, "data", "99", "v0", NULL)), 0);
    CU_ASSERT_STRING_EQUAL(hget("data", "value", v, sizeof v), "v1");
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_FENCED_SET, 1, "data", "100", "v2", NULL)), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_lua(DLOCK__SCRIPT_FENCED_SET, 1, "data", "1000", "v3", NULL)), 1);
    CU_ASSERT_STRING_EQUAL(hget("data", "value", v, sizeof v), "v3");
    CU_ASSERT_STRING_EQUAL(hget("data", "fence", v, sizeof v), "1000");
}

static size_t count(const char *s, const char *w) {
    size_t n = 0;
    for (; (s = strstr(s, w)) != NULL; s += strlen(w)) n++;
    return n;
}

/* The cluster's variant publishes on the shard (SPUBLISH), and only
 * there: the bodies differ by that word alone. */
static void test_sharded_variant(void) {
    int i;
    for (i = 0; i < DLOCK__NSCRIPTS; i++) {
        const char *b0 = dlock__script_body(i, 0), *b1 = dlock__script_body(i, 1);
        CU_ASSERT_FATAL(b0 != NULL && b1 != NULL);
        CU_ASSERT(strstr(b1, "'PUBLISH'") == NULL);
        CU_ASSERT(strlen(b1) - strlen(b0) == count(b0, "'PUBLISH'")); /* one S each */
        CU_ASSERT(strstr(b0, "\n--") == NULL); /* comment lines stay in the .lua files */
    }
    CU_ASSERT(strstr(dlock__script_body(DLOCK__SCRIPT_RELEASE, 1), "'SPUBLISH'") != NULL);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_acquire_free_and_again),
    DLT_TEST(test_acquire_busy_registers_and_queues),
    DLT_TEST(test_acquire_lock_delay),
    DLT_TEST(test_lvb),
    DLT_TEST(test_acquire_robust),
    DLT_TEST(test_acquire_caching_heldback_guard),
    DLT_TEST(test_acquire_eight_keys),
    DLT_TEST(test_acquire_shared),
    DLT_TEST(test_release_plain),
    DLT_TEST(test_release_grants_queue_head),
    DLT_TEST(test_release_publishes_and_holds_back),
    DLT_TEST(test_release_other_kinds),
    DLT_TEST(test_renew),
    DLT_TEST(test_reset),
    DLT_TEST(test_info),
    DLT_TEST(test_fence_next),
    DLT_TEST(test_fence_raise_and_fenced_set),
    DLT_TEST(test_sharded_variant),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "lua_lock", tests);
}
