/* test_fence.c -- fences that never repeat or go back (docs/fencing.md):
 * after a caching mutex's million local holds and a restart without
 * data, after a restart from an older snapshot (every kind: default,
 * robust, fair, rwlock), after a failover to a replica that lagged
 * (promoted by hand), with the pipelined path
 * and the script's interleaved, above an earlier version's microsecond
 * fences, and through dlock_fenced_set.
 * labels: redis  timeout: 240
 *
 * Every test runs against the suite's real redis-server (dlt_server),
 * which it kills (SIGKILL) and starts again on the same port.
 */
#include "fixture.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlock.h>

/* ------------------------------------------------------------ helpers */

/* The server's clock in ns (TIME's us * 1000), -1 on no answer. */
static long long server_ns(void) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "TIME");
    long long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        v = (atoll(r->element[0]->str) * 1000000LL + atoll(r->element[1]->str)) * 1000LL;
    if (r != NULL) freeReplyObject(r);
    return v;
}

/* The fence key's text into out ("" none). */
static void fence_key_text(const char *name, char *out, size_t cap) {
    char k[600];
    dlt_lock_key(name, k, sizeof k);
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET %s:fence", k);
    snprintf(out, cap, "%s", r != NULL && r->type == REDIS_REPLY_STRING ? r->str : "");
    if (r != NULL) freeReplyObject(r);
}

/* A mutex on a client of its own (a process that knows nothing of the
 * others' holds), lease_ms, caching or not. */
static int open_on(dlock_mutex_t *m, const char *name, dlock_client_t *cl, int caching, int robust) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if ((rc = dlock_mutexattr_setcaching(&a, caching)) != 0) goto out;
    if (robust && (rc = dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST)) != 0) goto out;
    if (cl != NULL && (rc = dlock_mutexattr_setclient(&a, cl)) != 0) goto out;
    rc = dlock_mutex_init(m, name, &a);
out:
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* One hold of m: its fence in *f (0 on a failure). */
static int hold_once(dlock_mutex_t *m, uint64_t *f) {
    int rc = dlock_mutex_lock(m);
    *f = rc == 0 ? dlock_mutex_fence(m) : 0;
    if (rc == 0) rc = dlock_mutex_unlock(m);
    return rc;
}

/* Asserts fence f above every fence before it (*max), and raises *max. */
static void rise(uint64_t f, uint64_t *max) {
    CU_ASSERT(f > *max);
    if (f > *max) *max = f;
}

/* Runs cmd on s, which must answer with a status (SAVE, REPLICAOF). */
static void status_cmd(dlt_redis *s, const char *cmd) {
    redisReply *r = dlt_redis_cmd(s, cmd);
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* The server killed (SIGKILL) and started again on its port, empty
 * (wipe: its snapshot removed first) or from its last snapshot. */
static int crash_restart(int wipe) {
    char p[400];
    if (dlt_redis_kill(&dlt_server) != 0) return -1;
    if (wipe) {
        snprintf(p, sizeof p, "%s/dump.rdb", dlt_server.dir);
        (void)unlink(p);
    }
    return dlt_redis_restart(&dlt_server);
}

/* ------------------------------------------------------------ tests */

/* A caching mutex's million local holds, then the server restarted
 * without data: the next fence, to another client, is above every fence
 * the caching holder was given. */
static void test_cache_million_then_empty_restart(void) {
    const char *name = "fence/cache";
    dlock_mutex_t m, other;
    dlock_client_t *cl = NULL;
    uint64_t f, prev = 0, max = 0;
    long i, bad = 0;
    double t0;

    DLT_ASSERT_ERR(open_on(&m, name, NULL, 1, 0), 0);
    t0 = dlt_now();
    for (i = 0; i < 1000000; i++) {
        if (hold_once(&m, &f) != 0 || f <= prev) {
            bad++;
            break;
        }
        prev = f;
    }
    max = prev;
    printf("  %ld caching holds in %.2f s, last fence %llu, server clock %lld ns\n", i, dlt_now() - t0,
           (unsigned long long)max, server_ns());
    DLT_ASSERT_INT_EQ(bad, 0);
    CU_ASSERT((long long)max <= server_ns()); /* never ahead of the server's clock */
    CU_ASSERT_FATAL(crash_restart(1) == 0);

    DLT_ASSERT_ERR(dlt_client_make(&cl, dlt_server.url, 5000), 0);
    DLT_ASSERT_ERR(open_on(&other, name, cl, 0, 0), 0);
    DLT_ASSERT_ERR(hold_once(&other, &f), 0);
    printf("  after the empty restart: fence %llu (%s the last before)\n", (unsigned long long)f,
           f > max ? "above" : "NOT above");
    CU_ASSERT(f > max);
    DLT_ASSERT_ERR(hold_once(&other, &f), 0);
    CU_ASSERT(f > max);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    /* the caching holder too, once its cache is gone with the data */
    DLT_ASSERT_ERR(hold_once(&m, &f), 0);
    CU_ASSERT(f > max);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* Fences issued, a snapshot taken after some of them, more issued, the
 * server killed and started from that snapshot: the next two fences, on
 * the same mutex (the pipelined path) and on another client (the
 * script's), are above every fence before. */
static void test_restart_from_older_snapshot(void) {
    const char *name = "fence/snapshot";
    dlock_mutex_t m, other;
    dlock_client_t *cl = NULL;
    uint64_t f, max = 0;
    int i;

    DLT_ASSERT_ERR(open_on(&m, name, NULL, 0, 0), 0);
    for (i = 0; i < 5; i++) {
        DLT_ASSERT_ERR(hold_once(&m, &f), 0);
        if (f > max) max = f;
    }
    status_cmd(&dlt_server, "SAVE");
    for (i = 0; i < 5; i++) {
        DLT_ASSERT_ERR(hold_once(&m, &f), 0);
        rise(f, &max);
    }
    CU_ASSERT_FATAL(crash_restart(0) == 0);
    {
        char v[64];
        fence_key_text(name, v, sizeof v);
        CU_ASSERT(v[0] != '\0'); /* the snapshot's (stale) fence key is back */
    }
    DLT_ASSERT_ERR(hold_once(&m, &f), 0);
    printf("  after the restart from the snapshot: %llu (last before %llu)\n", (unsigned long long)f,
           (unsigned long long)max);
    rise(f, &max);
    DLT_ASSERT_ERR(hold_once(&m, &f), 0);
    rise(f, &max);

    /* Once more, the first acquisition after it by a client of its own
     * (the acquire script's uncontended path). */
    status_cmd(&dlt_server, "SAVE");
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_ERR(hold_once(&m, &f), 0);
        if (f > max) max = f;
    }
    CU_ASSERT_FATAL(crash_restart(0) == 0);
    DLT_ASSERT_ERR(dlt_client_make(&cl, dlt_server.url, 5000), 0);
    DLT_ASSERT_ERR(open_on(&other, name, cl, 0, 0), 0);
    DLT_ASSERT_ERR(hold_once(&other, &f), 0);
    rise(f, &max);
    DLT_ASSERT_ERR(hold_once(&other, &f), 0);
    CU_ASSERT(f > max);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* A fair mutex's holds, a write lock's and a read lock's (one name, one
 * sequence): after a restart from an older snapshot, each kind's next
 * fence is above every fence before. */
static void test_kinds_after_older_snapshot(void) {
    const char *name = "fence/kinds";
    dlock_mutexattr_t a;
    dlock_mutex_t fair;
    dlock_rwlock_t rw;
    uint64_t f, max = 0;
    int i;

    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&fair, name, &a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, name, NULL), 0);
    for (i = 0; i < 6; i++) {
        if (i == 2) {
            status_cmd(&dlt_server, "SAVE");
        }
        DLT_ASSERT_ERR(hold_once(&fair, &f), 0);
        if (f > max) max = f;
        DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rw), 0);
        f = dlock_rwlock_fence(&rw);
        rise(f, &max);
        DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
        DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
        f = dlock_rwlock_fence(&rw);
        rise(f, &max);
        DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    }
    CU_ASSERT_FATAL(crash_restart(0) == 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    f = dlock_rwlock_fence(&rw);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    rise(f, &max);
    DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rw), 0);
    f = dlock_rwlock_fence(&rw);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    rise(f, &max);
    DLT_ASSERT_ERR(hold_once(&fair, &f), 0);
    CU_ASSERT(f > max);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&fair), 0);
}

/* The fence key's value on server s ("" none). */
static void fence_key_on(dlt_redis *s, const char *name, char *out, size_t cap) {
    char k[600];
    dlt_lock_key(name, k, sizeof k);
    redisReply *r = dlt_redis_cmd(s, "GET %s:fence", k);
    snprintf(out, cap, "%s", r != NULL && r->type == REDIS_REPLY_STRING ? r->str : "");
    if (r != NULL) freeReplyObject(r);
}

/* A replica that lagged is promoted: fences issued on the master after
 * the replica stopped following it are above none of the replica's, yet
 * the first fences the promoted replica issues are above them all. */
static void test_failover_to_lagged_replica(void) {
    const char *name = "fence/failover";
    dlt_redis rep;
    char conf[128], want[32], got[32];
    dlock_mutex_t m, other;
    dlock_client_t *cl = NULL;
    uint64_t f, max = 0;
    double end;
    int i;

    memset(&rep, 0, sizeof rep);
    snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d", dlt_server.port);
    CU_ASSERT_FATAL(dlt_redis_start(&rep, conf) == 0);
    DLT_ASSERT_ERR(open_on(&m, name, NULL, 0, 0), 0);
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_ERR(hold_once(&m, &f), 0);
        if (f > max) max = f;
    }
    /* the replica has them */
    snprintf(want, sizeof want, "%llu", (unsigned long long)max);
    end = dlt_now() + 10.0;
    do {
        fence_key_on(&rep, name, got, sizeof got);
        if (strcmp(got, want) == 0) break;
        dlt_sleep_ms(10);
    } while (dlt_now() < end);
    CU_ASSERT_STRING_EQUAL_FATAL(got, want);
    /* it stops following; the master goes on */
    status_cmd(&rep, "REPLICAOF NO ONE");
    for (i = 0; i < 5; i++) {
        DLT_ASSERT_ERR(hold_once(&m, &f), 0);
        rise(f, &max);
    }
    fence_key_on(&rep, name, got, sizeof got);
    CU_ASSERT_STRING_EQUAL(got, want); /* lagged: the last three are not there */
    /* the promoted replica issues the next fences */
    DLT_ASSERT_ERR(dlt_client_make(&cl, rep.url, 5000), 0);
    DLT_ASSERT_ERR(open_on(&other, name, cl, 0, 0), 0);
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_ERR(hold_once(&other, &f), 0); /* the script's path, then the pipelined one */
        rise(f, &max);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlt_redis_cleanup(&rep);
}

/* Fences are the server's clock in ns (or the last + 1): the pipelined
 * path, the script's (a robust mutex of the same name) and a caching
 * holder's, interleaved, strictly increase, each no later than the
 * server's clock when it was returned. */
static void test_paths_interleaved(void) {
    const char *name = "fence/mixed";
    dlock_mutex_t plain, rob, cache;
    uint64_t f, prev = 0;
    long long before, after;
    int i, j, bad = 0;

    DLT_ASSERT_ERR(open_on(&plain, name, NULL, 0, 0), 0);
    DLT_ASSERT_ERR(open_on(&rob, name, NULL, 0, 1), 0);
    before = server_ns();
    DLT_ASSERT_ERR(hold_once(&plain, &f), 0);
    after = server_ns();
    CU_ASSERT((long long)f >= before && (long long)f < after + 1000); /* the clock, in ns */
    prev = f;
    for (i = 0; i < 200; i++) {
        dlock_mutex_t *m = i % 3 == 0 ? &rob : &plain;
        if (hold_once(m, &f) != 0 || f <= prev) bad++;
        prev = f;
    }
    DLT_ASSERT_INT_EQ(bad, 0);
    /* a caching holder in between: its local fences, then the others' */
    DLT_ASSERT_ERR(open_on(&cache, name, NULL, 1, 0), 0);
    for (j = 0; j < 3; j++) {
        for (i = 0; i < 1000; i++) {
            if (hold_once(&cache, &f) != 0 || f <= prev) bad++;
            prev = f;
        }
        CU_ASSERT((long long)prev <= server_ns());
        for (i = 0; i < 20; i++) {
            if (hold_once(i % 2 ? &rob : &plain, &f) != 0 || f <= prev) bad++;
            prev = f;
        }
    }
    DLT_ASSERT_INT_EQ(bad, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&cache), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&rob), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&plain), 0);
}

/* A fence key an earlier version left (microseconds, up to 2^53): the
 * first fence of this version is above it, on either path. */
static void test_above_earlier_version(void) {
    const char *name = "fence/older";
    char k[600];
    dlock_mutex_t m, rob;
    uint64_t f;

    dlt_lock_key(name, k, sizeof k);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s:fence 9007199254740991 PX 3600000", k));
    DLT_ASSERT_ERR(open_on(&m, name, NULL, 0, 0), 0);
    DLT_ASSERT_ERR(hold_once(&m, &f), 0); /* the script's path */
    CU_ASSERT(f > 9007199254740991ull);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s:fence 9007199254740991 PX 3600000", k));
    DLT_ASSERT_ERR(hold_once(&m, &f), 0); /* the pipelined path */
    CU_ASSERT(f > 9007199254740991ull);
    DLT_ASSERT_ERR(open_on(&rob, name, NULL, 0, 1), 0);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s:fence 9007199254740991 PX 3600000", k));
    DLT_ASSERT_ERR(hold_once(&rob, &f), 0); /* a hash hold */
    CU_ASSERT(f > 9007199254740991ull);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&rob), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* A fence key whose last fence is ahead of the clock (a Redlock floor,
 * or 19-digit fences issued within one microsecond): the next is its
 * successor, exactly -- no rounding of 19-digit numbers. */
static void test_successor_exact(void) {
    const char *name = "fence/ahead";
    char k[600], v[64];
    dlock_mutex_t m, rob;
    uint64_t f;

    dlt_lock_key(name, k, sizeof k);
    DLT_ASSERT_ERR(open_on(&m, name, NULL, 0, 0), 0);
    DLT_ASSERT_ERR(open_on(&rob, name, NULL, 0, 1), 0);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s:fence 8999999999999999999 PX 3600000", k));
    DLT_ASSERT_ERR(hold_once(&m, &f), 0);
    DLT_ASSERT_INT_EQ(f, 9000000000000000000ull);
    fence_key_text(name, v, sizeof v);
    CU_ASSERT_STRING_EQUAL(v, "9000000000000000000");
    DLT_ASSERT_ERR(hold_once(&m, &f), 0);
    DLT_ASSERT_INT_EQ(f, 9000000000000000001ull);
    DLT_ASSERT_ERR(hold_once(&rob, &f), 0);
    DLT_ASSERT_INT_EQ(f, 9000000000000000002ull);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s:fence 1999999999999999999 PX 3600000", k));
    DLT_ASSERT_ERR(hold_once(&rob, &f), 0);
    DLT_ASSERT_INT_EQ(f, 2000000000000000000ull);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&rob), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* dlock_fenced_set with these fences: a later holder's write refuses an
 * earlier holder's; a value an earlier version wrote (a 16-digit fence)
 * is overwritten; a stored fence of the same length but greater refuses. */
static void test_fenced_set(void) {
    const char *name = "fence/store";
    dlock_mutex_t m;
    redisReply *r;
    char f1[32];

    DLT_ASSERT_ERR(open_on(&m, name, NULL, 0, 0), 0);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "HSET fence:data value old fence 9007199254740991"));
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    snprintf(f1, sizeof f1, "%llu", (unsigned long long)dlock_mutex_fence(&m));
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "fence:data", "one", 3), 0);
    r = dlt_redis_cmd(&dlt_server, "HGET fence:data fence");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, f1) == 0);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "fence:data", "two", 3), 0); /* not older: the same hold again */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    /* a newer fence stored (same length, greater): refused */
    {
        char newer[32];
        snprintf(newer, sizeof newer, "%llu", (unsigned long long)strtoull(f1, NULL, 10) + 1000000000ull);
        freeReplyObject(dlt_redis_cmd(&dlt_server, "HSET fence:data fence %s", newer));
    }
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "fence:data", "three", 5), ESTALE);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    r = dlt_redis_cmd(&dlt_server, "HGET fence:data value");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, "two") == 0);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_cache_million_then_empty_restart),
    DLT_TEST(test_restart_from_older_snapshot),
    DLT_TEST(test_kinds_after_older_snapshot),
    DLT_TEST(test_failover_to_lagged_replica),
    DLT_TEST(test_paths_interleaved),
    DLT_TEST(test_above_earlier_version),
    DLT_TEST(test_successor_exact),
    DLT_TEST(test_fenced_set),
    { NULL, NULL }
};

int main(int argc, char **argv) { return dlt_main(argc, argv, "fence", tests); }
