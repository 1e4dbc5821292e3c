/* test_lua_convert.c -- the contract of convert.lua (lock conversion),
 * run alone by EVALSHA on a real redis-server with the KEYS and ARGV its
 * header states (one server: the lock key alone), its answers and the keys
 * it leaves checked: up, down and cancel, the conversion deadlock, a
 * stale upgrader, both forms of the lock key, answers asked again.
 * labels: redis
 */
#include "fixture.h"
#include "lua_run.h"

#include "backend/backend.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#define LK "dlock:{c}"
#define FAR "9999999999999" /* a reader's lease that does not end during the test */

/* convert.lua's answer for op by tok: its code; its value's text in val. */
static long long conv(const char *op, const char *tok, char *val, size_t cap) {
    redisReply *r = dlt_lua(DLOCK__SCRIPT_CONVERT, 1, LK, tok, "10000", op, "h:1:2", NULL);
    long long code = dlt_int(dlt_el(r, 0));
    const redisReply *v = dlt_el(r, 1);
    if (val != NULL) {
        if (v != NULL && v->type == REDIS_REPLY_INTEGER) snprintf(val, cap, "%lld", v->integer);
        else snprintf(val, cap, "%s", dlt_str(v));
    }
    if (r != NULL) freeReplyObject(r);
    return code;
}

static long long cmd_int(const char *fmt, const char *a) {
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, fmt, a));
}

static void reader(const char *tok) {
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD " LK ":readers " FAR " %s", tok));
}

static int fence_gt(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    return la != lb ? la > lb : strcmp(a, b) > 0;
}

/* The only reader upgrades at once, to a hash with a new fence, marked;
 * asked again: the same fence (2); down: back among the readers, the lock
 * key gone; asked again: 1; a token that neither reads nor writes: 7. */
static void test_up_down(void) {
    char f1[64], f2[64], v[64];
    redisReply *r;
    DLT_ASSERT_INT_EQ(conv("up", "tA", v, sizeof v), 7);
    reader("tA");
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "SET " LK ":fence 5"));
    DLT_ASSERT_INT_EQ(conv("up", "tA", f1, sizeof f1), 1);
    CU_ASSERT(fence_gt(f1, "5"));
    r = dlt_redis_cmd(&dlt_server, "HMGET " LK " owner fence w who");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 0)), "tA");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 1)), f1);
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 2)), "1");
    CU_ASSERT_STRING_EQUAL(dlt_str(dlt_el(r, 3)), "h:1:2");
    if (r != NULL) freeReplyObject(r);
    CU_ASSERT(cmd_int("PTTL %s", LK) > 9000);
    DLT_ASSERT_INT_EQ(cmd_int("EXISTS %s:readers", LK), 0);
    DLT_ASSERT_INT_EQ(conv("up", "tA", f2, sizeof f2), 2);
    CU_ASSERT_STRING_EQUAL(f2, f1);
    DLT_ASSERT_INT_EQ(conv("down", "tB", v, sizeof v), 7);
    DLT_ASSERT_INT_EQ(conv("down", "tA", v, sizeof v), 1);
    DLT_ASSERT_INT_EQ(cmd_int("EXISTS %s", LK), 0);
    DLT_ASSERT_INT_EQ(cmd_int("ZCARD %s:readers", LK), 1);
    CU_ASSERT(cmd_int("PTTL %s:readers", LK) > 10000);
    DLT_ASSERT_INT_EQ(conv("down", "tA", v, sizeof v), 1);
    DLT_ASSERT_INT_EQ(cmd_int("ZCARD %s:readers", LK), 1);
    /* A third conversion takes a fence above the first. */
    DLT_ASSERT_INT_EQ(conv("up", "tA", f2, sizeof f2), 1);
    CU_ASSERT(fence_gt(f2, f1));
}

/* Two readers: the first to ask registers (u:tA in :writers) and waits;
 * the second gets 6 and stays a reader; cancel takes the registration
 * back; tB then registers, and once tA has left, converts, its
 * registration gone. */
static void test_deadlock_and_cancel(void) {
    char v[64];
    reader("tA");
    reader("tB");
    DLT_ASSERT_INT_EQ(conv("up", "tA", v, sizeof v), 0);
    CU_ASSERT(atoll(v) > 0);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZRANK " LK ":writers u:tA")) >= 0);
    DLT_ASSERT_INT_EQ(conv("up", "tB", v, sizeof v), 6);
    DLT_ASSERT_INT_EQ(cmd_int("ZCARD %s:readers", LK), 2);
    DLT_ASSERT_INT_EQ(conv("cancel", "tA", v, sizeof v), 1);
    DLT_ASSERT_INT_EQ(cmd_int("EXISTS %s:writers", LK), 0);
    DLT_ASSERT_INT_EQ(conv("up", "tB", v, sizeof v), 0);
    DLT_ASSERT_INT_EQ(conv("up", "tA", v, sizeof v), 6);
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZREM " LK ":readers tA"));
    DLT_ASSERT_INT_EQ(conv("up", "tB", v, sizeof v), 1);
    DLT_ASSERT_INT_EQ(cmd_int("EXISTS %s:writers", LK), 0);
    DLT_ASSERT_INT_EQ(cmd_int("EXISTS %s:readers", LK), 0);
}

/* An upgrader that reads no more is no upgrader: dropped, and the caller
 * registers; a reader whose lease ended is no reader (7, its own
 * registration dropped too). */
static void test_stale(void) {
    char v[64];
    reader("tA");
    reader("tB");
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD " LK ":writers " FAR " u:tX"));
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZRANK " LK ":writers u:tX")) >= 0);
    DLT_ASSERT_INT_EQ(conv("up", "tA", v, sizeof v), 0);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZRANK " LK ":writers u:tX")) == LLONG_MIN);
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD " LK ":readers 1 tA"));
    DLT_ASSERT_INT_EQ(conv("up", "tA", v, sizeof v), 7);
    DLT_ASSERT_INT_EQ(cmd_int("EXISTS %s:writers", LK), 0);
}

/* The uncontended path's string form downgrades as the hash does; an
 * upgrade that meets another token's string (a writer's pipelined SET,
 * to be given back) marks it and waits. */
static void test_string_form(void) {
    char v[64];
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "SET " LK " %s PX 10000", "tC 123 1000 h:1:2"));
    DLT_ASSERT_INT_EQ(conv("down", "tD", v, sizeof v), 7);
    DLT_ASSERT_INT_EQ(conv("down", "tC", v, sizeof v), 1);
    DLT_ASSERT_INT_EQ(cmd_int("EXISTS %s", LK), 0);
    DLT_ASSERT_INT_EQ(cmd_int("ZCARD %s:readers", LK), 1);
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "SET " LK " %s PX 10000", "tW - 1000 h:1:2"));
    DLT_ASSERT_INT_EQ(conv("up", "tC", v, sizeof v), 0);
    CU_ASSERT(atoll(v) > 9000);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HEXISTS " LK " w")) == 1);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_up_down),
    DLT_TEST(test_deadlock_and_cancel),
    DLT_TEST(test_stale),
    DLT_TEST(test_string_form),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "lua_convert", tests);
}
