/* labels: redis; timeout: 120 */
/* test_fixture_multi.c -- tests of the multi-server fixtures
 * (fixture_multi.h) themselves, against real redis-servers: the hash slot
 * computed without the library, a server with a password, Redlock
 * masters and their clean-up by pid, a TLS-only server with an ACL user.
 * (The cluster and the sentinel deployments are used, and so checked, by
 * test_cluster and test_sentinel.) */
#include "fixture_multi.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* 1 if no process pid exists any more (it was killed and reaped). */
static int gone(pid_t pid) {
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

/* A plain connection's answer to PING, without AUTH: 1 if NOAUTH. */
static int ping_says_noauth(int port) {
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = c != NULL && !c->err ? redisCommand(c, "PING") : NULL;
    int noauth = r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0;
    if (r != NULL) freeReplyObject(r);
    if (c != NULL) redisFree(c);
    return noauth;
}

/* Slots as the Redis Cluster specification gives them, and as a server
 * computes them. */
static void test_key_slot(void) {
    static const char *const keys[] = { "foo", "somekey", "{user1000}.following", "foo{}{bar}", "{}x", "a{b}c}",
                                        "dlock:{x}", "123456789" };
    DLT_ASSERT_INT_EQ(dlt_key_slot("123456789"), 0x31C3 & 16383); /* CRC16/XModem's check value */
    DLT_ASSERT_INT_EQ(dlt_key_slot("foo"), 12182);
    DLT_ASSERT_INT_EQ(dlt_key_slot("somekey"), 11058);
    DLT_ASSERT_INT_EQ(dlt_key_slot("{user1000}.following"), dlt_key_slot("{user1000}.followers"));
    DLT_ASSERT_INT_EQ(dlt_key_slot("{user1000}.following"), dlt_key_slot("user1000"));
    DLT_ASSERT_INT_EQ(dlt_lock_slot("x"), dlt_key_slot("x"));
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        long long s = dlt_reply_int(dlt_redis_cmd(&dlt_server, "CLUSTER KEYSLOT %s", keys[i]));
        if (s == LLONG_MIN) break; /* a server without cluster support: only the known values */
        DLT_ASSERT_INT_EQ(dlt_key_slot(keys[i]), s);
    }
}

/* A name in a given slot, or owned by a given node in a slot map. */
static void test_slot_name(void) {
    static signed char owner[DLT_SLOTS];
    char name[64];
    int next = 0, slot;
    memset(owner, 0, sizeof owner);
    for (int s = 8000; s < DLT_SLOTS; s++) owner[s] = 1;
    CU_ASSERT_FATAL(dlt_slot_name(name, sizeof name, "n/", &next, owner, 1, -1) == 0);
    CU_ASSERT_TRUE(dlt_lock_slot(name) >= 8000);
    slot = dlt_lock_slot("n/0");
    CU_ASSERT_FATAL(dlt_slot_name(name, sizeof name, "n/", &next, owner, -1, slot) == 0);
    DLT_ASSERT_INT_EQ(dlt_lock_slot(name), slot);
    CU_ASSERT_TRUE(strcmp(name, "n/0") != 0); /* past *next */
}

/* A server with requirepass: the fixture's own connections authenticate
 * (readiness, commands, a restart), a bare one does not get in. */
static void test_requirepass(void) {
    dlt_redis r;
    redisReply *rep;
    pid_t pid;
    CU_ASSERT_FATAL(dlt_redis_start(&r, "requirepass \"fx-s3cret pw\"") == 0);
    rep = dlt_redis_cmd(&r, "SET k v");
    CU_ASSERT_TRUE(dlt_reply_ok(rep));
    CU_ASSERT_TRUE(ping_says_noauth(r.port));
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&r, "k"), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&r), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&r, "k"), -1);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&r), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&r, "k"), 0);
    pid = r.pid;
    dlt_redis_cleanup(&r);
    CU_ASSERT_TRUE(gone(pid));
}

/* Redlock masters: their URL, the lock count, clean-up by pid. */
static void test_masters(void) {
    static dlt_masters m;
    pid_t pids[3];
    char want[128];
    CU_ASSERT_FATAL(dlt_masters_start(&m, 3, 0) == 0);
    DLT_ASSERT_INT_EQ(m.n, 3);
    snprintf(want, sizeof want, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", m.srv[0].port, m.srv[1].port,
             m.srv[2].port);
    CU_ASSERT_STRING_EQUAL(m.url, want);
    for (int i = 0; i < 2; i++) CU_ASSERT_TRUE(dlt_reply_int(dlt_redis_cmd(&m.srv[i], "HSET dlock:{fx} owner t")) == 1);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&m, "fx"), 2);
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&m.srv[0]), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&m, "fx"), 1);
    for (int i = 0; i < 3; i++) pids[i] = m.srv[i].pid;
    /* Started again: fresh masters, the old ones ended. */
    CU_ASSERT_FATAL(dlt_masters_start(&m, 3, 0) == 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&m, "fx"), 0);
    CU_ASSERT_TRUE(gone(pids[1]) && gone(pids[2]));
    for (int i = 0; i < 3; i++) pids[i] = m.srv[i].pid;
    dlt_masters_cleanup(&m);
    for (int i = 0; i < 3; i++) CU_ASSERT_TRUE(gone(pids[i]));
    DLT_ASSERT_INT_EQ(m.n, 0);
    dlt_masters_cleanup(&m); /* twice: nothing happens */
}

/* A TLS-only server with a password and an ACL user: the fixture talks to
 * it; a client gets in with the user's password, not with a wrong one. */
static void test_tls_server(void) {
    static dlt_redis r;
    char url[1200], q[400];
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    CU_ASSERT_FATAL(dlt_tls_server_start(&r, 0, "fx-default-pw", "fxuser", "fx-user-pw") == 0);
    CU_ASSERT_TRUE(r.tls_dir[0] != '\0');
    snprintf(q, sizeof q, "tls_ca_file=%s/ca.crt", r.tls_dir);
    dlt_tls_server_url(&r, url, sizeof url, "fxuser:fx-user-pw@", "localhost", q);
    DLT_ASSERT_INT_EQ(strncmp(url, "rediss://fxuser:fx-user-pw@localhost:", 37), 0);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 3000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "fx/tls", 0, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&r, "fx/tls"), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_tls_server_url(&r, url, sizeof url, "fxuser:wrong-pw@", "127.0.0.1", q);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 1000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "fx/tls", 0, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOLCK);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_redis_cleanup(&r);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_key_slot),
    DLT_TEST(test_slot_name),
    DLT_TEST(test_requirepass),
    DLT_TEST(test_masters),
    DLT_TEST(test_tls_server),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "fixture_multi", tests);
}
