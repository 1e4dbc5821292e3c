/* test_lockform.c -- the lock key's two forms (docs/protocol.md, "The lock
 * key's two forms"): a hold taken on the uncontended path is the string
 * "TOKEN FENCE SINCE WHO" (FENCE "-" from one server's pipelined SET,
 * EXISTS, fence script), released by MGET and DEL; every path past it turns
 * the string into the hash first; fences from the clock; the pipelined SET
 * that finds others' keys gives its string back; what this version
 * does with a lock key it did not write; how long the waiters'
 * registration keys live (also on a server that refuses PEXPIRE's GT,
 * emulated); a busy lock's flag H; a hash hold's release.
 * labels: redis
 *
 * Every test runs against the suite's real redis-server (dlt_server).
 */
#include "fixture.h"

#include "backend/backend.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

/* ------------------------------------------------------------ helpers */

/* TYPE dlock:{name} into out ("none" when absent, "" no answer). */
static void key_type(const char *name, char *out, size_t cap) {
    char k[600];
    size_t n = dlt_lock_key(name, k, sizeof k);
    redisReply *r = dlt_redis_cmd(&dlt_server, "TYPE %b", k, n);
    out[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_STATUS) snprintf(out, cap, "%s", r->str);
    if (r != NULL) freeReplyObject(r);
}

/* GET of a string lock key (field NULL), or HGET of a hash lock key's
 * field, into out: 1, or 0 (none, or not of that form). */
static int key_read(const char *name, const char *field, char *out, size_t cap) {
    char k[600];
    size_t n = dlt_lock_key(name, k, sizeof k);
    redisReply *r = field == NULL ? dlt_redis_cmd(&dlt_server, "GET %b", k, n)
                                  : dlt_redis_cmd(&dlt_server, "HGET %b %s", k, n, field);
    int ok = r != NULL && r->type == REDIS_REPLY_STRING;
    out[0] = '\0';
    if (ok) snprintf(out, cap, "%.*s", (int)r->len, r->str);
    if (r != NULL) freeReplyObject(r);
    return ok;
}

/* The server's clock, in microseconds. */
static long long server_us(void) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "TIME");
    long long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        v = atoll(r->element[0]->str) * 1000000LL + atoll(r->element[1]->str);
    if (r != NULL) freeReplyObject(r);
    return v;
}

/* The string form's four fields (fence 0: "-", not kept). */
struct form {
    char token[80];
    unsigned long long fence;
    long long since;
    char who[300];
};

static int form_parse(const char *v, struct form *f) {
    char fs[32];
    int used = 0;
    memset(f, 0, sizeof *f);
    if (sscanf(v, "%79s %31s %lld %n", f->token, fs, &f->since, &used) != 3 || used == 0) return -1;
    if (strcmp(fs, "-") != 0) {
        char *end;
        f->fence = strtoull(fs, &end, 10);
        if (*end != '\0' || f->fence == 0) return -1;
    }
    snprintf(f->who, sizeof f->who, "%s", v + used);
    return 0;
}

/* The lock's fence key, as a number (-1: none). */
static long long fence_key(const char *name) {
    char k[600];
    dlt_lock_key(name, k, sizeof k);
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET %s:fence", k);
    long long v = r != NULL && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    if (r != NULL) freeReplyObject(r);
    return v;
}

/* A lock/unlock pair on m. */
static int pair(dlock_mutex_t *m) {
    int rc = dlock_mutex_lock(m);
    return rc != 0 ? rc : dlock_mutex_unlock(m);
}

/* Two pairs: a lock's first acquisition in a process asks the script;
 * the next ones take the pipelined uncontended path, whose fence script
 * the first of them loads (NOSCRIPT, then EVAL).  0, or the failing
 * call's error. */
static int warm(dlock_mutex_t *m) {
    int rc = pair(m);
    return rc != 0 ? rc : pair(m);
}

/* ------------------------------------------------------------ tests */

/* An uncontended hold is the string, with the lease as its expiry, and
 * the pair runs SET, EXISTS, the fence script (TIME, SET ... GET;
 * pipelined: one request) then MGET, DEL in the release's script (MGET
 * reads a string, and answers nil for a hash without an error: no TYPE)
 * -- no hash command, two requests.  The string keeps no fence ("-"):
 * the fence key has it. */
static void test_uncontended_is_a_string(void) {
    const char *name = "form/plain";
    dlock_mutex_t m;
    struct form f;
    char v[512], t[32], want[64];
    long long pttl, before = dlt_wall_ms();

    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 4000, NULL), 0);
    DLT_ASSERT_ERR(warm(&m), 0);
    /* the pair alone, counted */
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 2); /* the fence's, the release */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "eval"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "exists"), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "incr"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 2); /* the lock's, the fence key's */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "mget"), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "del"), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "type"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "get"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "hmget"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "time"), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "hset"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "publish"), 0);
    /* what the server holds meanwhile */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    key_type(name, t, sizeof t);
    CU_ASSERT_STRING_EQUAL(t, "string");
    CU_ASSERT_FATAL(key_read(name, NULL, v, sizeof v));
    CU_ASSERT_FATAL(form_parse(v, &f) == 0);
    DLT_ASSERT_INT_EQ(f.fence, 0);
    DLT_ASSERT_INT_EQ(fence_key(name), (long long)dlock_mutex_fence(&m));
    CU_ASSERT_EQUAL(strlen(f.token), 32);
    CU_ASSERT(f.since >= before - 1000 && f.since <= dlt_wall_ms() + 1000);
    snprintf(want, sizeof want, ":%ld:", (long)getpid());
    CU_ASSERT_PTR_NOT_NULL(strstr(f.who, want));
    pttl = dlt_key_pttl(name);
    CU_ASSERT(pttl > 2000 && pttl <= 4000);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* Fences of the uncontended path are the server's clock in ns (the
 * fence script's); the fence key gone (lost data), the pipelined path
 * makes it again from the clock, above every fence before, and keeps
 * it an hour. */
static void test_fences_from_the_clock(void) {
    const char *name = "form/fence";
    char k[600];
    dlock_mutex_t m;
    uint64_t f1, f2, f3;
    long long before;

    dlt_lock_key(name, k, sizeof k);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 0, NULL), 0);
    DLT_ASSERT_ERR(warm(&m), 0);
    before = server_us();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    f1 = dlock_mutex_fence(&m);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT((long long)f1 >= before * 1000 && (long long)f1 <= server_us() * 1000 + 999);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    f2 = dlock_mutex_fence(&m);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT(f2 > f1);

    /* The fence key gone (lost data): the fence script makes it from the
     * clock; the pipelined SET keeps its hold. */
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s:fence", k)) == 1);
    before = server_us();
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    f3 = dlock_mutex_fence(&m);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 1); /* the fence's alone */
    {
        char v[512];
        struct form f;
        CU_ASSERT(key_read(name, NULL, v, sizeof v) && form_parse(v, &f) == 0 && f.fence == 0);
    }
    DLT_ASSERT_INT_EQ(fence_key(name), (long long)f3);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT(f3 > f2);
    CU_ASSERT((long long)f3 >= before * 1000); /* from the clock, in ns */
    {
        long long pttl = dlt_reply_int(dlt_redis_cmd(&dlt_server, "PTTL %s:fence", k));
        CU_ASSERT(pttl > 3500000 && pttl <= 3600000); /* an hour */
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* The waiter of test_waiter_turns_it_into_a_hash, a process of its own. */
/* A waiter on `name` (lease `lease` ms, 0: the default): a timedlock of
 * 10 s, its result in rc and, acquired, its fence. */
struct waiter {
    char name[64];
    unsigned lease;
    int rc;
    unsigned long long fence;
};

static int waiter_main(void *arg) {
    struct waiter *w = arg;
    dlock_mutex_t m;
    struct timespec dl = dlt_abs_in(CLOCK_REALTIME, 10000);
    if (dlt_mutex_make(&m, w->name, w->lease, NULL) != 0) return 1;
    w->rc = dlock_mutex_timedlock(&m, &dl);
    if (w->rc == 0) {
        w->fence = dlock_mutex_fence(&m);
        (void)dlock_mutex_unlock(&m);
    }
    dlock_mutex_destroy(&m);
    return 0;
}

/* A waiter turns the string into the hash it stands for (same holder and
 * expiry, no fence since the string kept none, marked): the holder's renewal and release work on
 * it, and the release hands the lock to the waiter. */
static void test_waiter_turns_it_into_a_hash(void) {
    const char *name = "form/waited";
    struct waiter *w = DLT_SHM_NEW(struct waiter, 1);
    dlock_mutex_t m;
    struct form f;
    char v[512], t[32], o[80], fs[32], mark[8], who[300];
    dlt_task task;
    double t0;
    uint64_t f0;

    snprintf(w->name, sizeof w->name, "%s", name);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 900, NULL), 0);
    DLT_ASSERT_ERR(warm(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    f0 = dlock_mutex_fence(&m);
    CU_ASSERT_FATAL(key_read(name, NULL, v, sizeof v));
    CU_ASSERT_FATAL(form_parse(v, &f) == 0);
    CU_ASSERT_FATAL(dlt_task_start(&task, DLT_PROC, waiter_main, w) == 0);
    t0 = dlt_now();
    do {
        dlt_sleep_ms(20);
        key_type(name, t, sizeof t);
    } while (strcmp(t, "hash") != 0 && dlt_now() - t0 < 10);
    CU_ASSERT_STRING_EQUAL_FATAL(t, "hash");
    CU_ASSERT(key_read(name, "owner", o, sizeof o));
    CU_ASSERT_STRING_EQUAL(o, f.token);
    /* no fence, unless a renewal recorded it in the string before */
    if (key_read(name, "fence", fs, sizeof fs)) DLT_ASSERT_INT_EQ(strtoull(fs, NULL, 10), f0);
    CU_ASSERT(key_read(name, "who", who, sizeof who));
    CU_ASSERT_STRING_EQUAL(who, f.who);
    CU_ASSERT(key_read(name, "w", mark, sizeof mark));
    CU_ASSERT(dlt_key_pttl(name) > 0 && dlt_key_pttl(name) <= 900);
    /* held past several leases: the renewal thread renews the hash, and
     * records the fence in it */
    dlt_sleep_ms(2000);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    CU_ASSERT(key_read(name, "owner", o, sizeof o));
    CU_ASSERT_STRING_EQUAL(o, f.token);
    CU_ASSERT(key_read(name, "fence", fs, sizeof fs) && strtoull(fs, NULL, 10) == f0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&task, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(w->rc, 0);
    CU_ASSERT(w->fence > f0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(w, 1);
}

/* PTTL of the lock's key with suffix (":writers"...). */
static long long key_pttl_sfx(const char *name, const char *suffix) {
    char k[600];
    dlt_lock_key(name, k, sizeof k);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "PTTL %s%s", k, suffix));
}

/* Waits (10 s at most) until the lock's queue has n waiters: 1, or 0. */
static int queue_has(const char *name, long long n) {
    char k[600];
    double t0 = dlt_now();
    dlt_lock_key(name, k, sizeof k);
    while (dlt_reply_int(dlt_redis_cmd(&dlt_server, "LLEN %s:fifo", k)) != n) {
        if (dlt_now() - t0 > 10) return 0;
        dlt_sleep_ms(10);
    }
    return 1;
}

/* A waiter's registration keys -- the waiting writers and the queue --
 * live at least twice the lease of the longest-leased waiter
 * (the acquire script's keep(): one PEXPIRE ... GT; a key just made,
 * which has no expiry yet, gets one by PEXPIRE ... NX, tried first when
 * the queue was empty): the first waiter's 60 s lease gives
 * them two minutes, and a second waiter's 1 s lease, registering again
 * every third of it, does not cut them to two seconds. */
static void test_waiter_keys_kept(void) {
    const char *name = "form/keys-kept", *sfx[] = { ":writers", ":fifo" };
    struct waiter *w = DLT_SHM_NEW(struct waiter, 2);
    dlock_mutex_t m;
    dlt_task task[2];
    int i, j;

    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 30000, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    for (i = 0; i < 2; i++) {
        snprintf(w[i].name, sizeof w[i].name, "%s", name);
        w[i].lease = i == 0 ? 60000 : 1000;
        w[i].rc = -1;
        CU_ASSERT_FATAL(dlt_task_start(&task[i], DLT_PROC, waiter_main, &w[i]) == 0);
        CU_ASSERT_FATAL(queue_has(name, i + 1));
        for (j = 0; j < 2; j++) {
            long long pttl = key_pttl_sfx(name, sfx[j]);
            printf("  after waiter %d (lease %u ms): %s expires in %lld ms\n", i, w[i].lease, sfx[j], pttl);
            CU_ASSERT(pttl > 110000 && pttl <= 120000);
        }
    }
    dlt_sleep_ms(1000); /* the short-leased waiter registers again, three times */
    for (j = 0; j < 2; j++) CU_ASSERT(key_pttl_sfx(name, sfx[j]) > 110000);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    for (i = 0; i < 2; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&task[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(w[i].rc, 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(w, 2);
}

/* A string hold is renewed as a string, and what the server says of it
 * (dlock_lock_info) is its fields: no fence (0) for one taken by the
 * pipelined SET, until its first renewal records it. */
static void test_string_renewed_and_shown(void) {
    const char *name = "form/renewed";
    dlock_mutex_t m;
    dlock_lock_info_t in;
    struct form f;
    char v[512], v2[512];
    double t0;

    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 600, NULL), 0);
    DLT_ASSERT_ERR(warm(&m), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_FATAL(key_read(name, NULL, v, sizeof v));
    CU_ASSERT_FATAL(form_parse(v, &f) == 0);
    DLT_ASSERT_ERR(dlock_lock_info(NULL, name, &in), 0);
    if (dlt_now() - t0 < 0.15) { /* not renewed yet (a third of the lease: 200 ms) */
        DLT_ASSERT_INT_EQ(f.fence, 0);
        DLT_ASSERT_INT_EQ(in.fence, 0);
    }
    dlt_sleep_ms(1500); /* two and a half leases */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    CU_ASSERT(key_read(name, NULL, v2, sizeof v2));
    {   /* the same string, its fence recorded, its expiry renewed */
        char want[600];
        snprintf(want, sizeof want, "%s %llu %lld %s", f.token, (unsigned long long)dlock_mutex_fence(&m), f.since,
                 f.who);
        CU_ASSERT_STRING_EQUAL(v2, want);
    }
    CU_ASSERT(dlt_key_pttl(name) > 0);
    DLT_ASSERT_ERR(dlock_lock_info(NULL, name, &in), 0);
    DLT_ASSERT_INT_EQ(in.held, 1);
    DLT_ASSERT_INT_EQ(in.pid, (long)getpid());
    DLT_ASSERT_INT_EQ(in.fence, dlock_mutex_fence(&m));
    DLT_ASSERT_INT_EQ(in.since_ms, f.since);
    CU_ASSERT(in.lease_left_ms > 0 && in.lease_left_ms <= 600);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* What takes a lock past the uncontended path writes the hash: a robust
 * mutex, a caching one (whose block of fences gives the fence key an
 * expiry an hour past the block's last fence). */
static void test_other_holds_are_hashes(void) {
    const char *name = "form/robust", *cname = "form/caching";
    char k[600], t[32];
    dlock_mutexattr_t a;
    dlock_mutex_t m;

    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    key_type(name, t, sizeof t);
    CU_ASSERT_STRING_EQUAL(t, "hash");
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);

    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, cname, &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    key_type(cname, t, sizeof t);
    CU_ASSERT_STRING_EQUAL(t, "hash");
    dlt_lock_key(cname, k, sizeof k);
    {   /* no block reserved: the fence key is the hold's fence, kept an hour */
        long long pttl = dlt_reply_int(dlt_redis_cmd(&dlt_server, "PTTL %s:fence", k));
        CU_ASSERT(pttl > 3500000 && pttl <= 3600000);
        DLT_ASSERT_INT_EQ(fence_key(cname), (long long)dlock_mutex_fence(&m));
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
}

/* A hold another client wrote as a hash (an earlier release's holder)
 * excludes this one until it ends; then the fence goes on above it. */
static void test_hash_hold_of_another_version(void) {
    const char *name = "form/older";
    char k[600];
    dlock_mutex_t m;

    dlt_lock_key(name, k, sizeof k);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HSET %s owner 0123456789abcdef0123456789abcdef fence "
                                          "9000000000000000 who elsewhere:1:1 since 1700000000000", k)) == 4);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "PEXPIRE %s 700", k)) == 1);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s:fence 9000000000000000", k));
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* once its lease ran out */
    CU_ASSERT(dlock_mutex_fence(&m) > 9000000000000000ull);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* A lock key this version cannot read (no form it writes: a later
 * release's, or anyone's SET) is refused, never overwritten nor taken. */
static void test_unknown_form_refused(void) {
    const char *name = "form/unknown";
    char k[600], v[64];
    dlock_mutex_t m;
    int rc;

    dlt_lock_key(name, k, sizeof k);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s something-else PX 30000", k));
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 0, NULL), 0);
    rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, EPROTO);
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    CU_ASSERT(key_read(name, NULL, v, sizeof v));
    CU_ASSERT_STRING_EQUAL(v, "something-else");
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s", k)) == 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    /* A refused answer may have come with a hold (the client cannot tell):
     * its token is an orphan, which the renewal thread releases soon after
     * (one EVALSHA, which finds nothing of its own).  Waited for here, or
     * it may land among a later test's counted requests (under load it
     * did: test_first_hold_keeps_its_fence and test_pipelined_set_gives_way
     * counted two scripts where they made one). */
    {
        double end = dlt_now() + 10.0;
        while (dlt_redis_cmdstat(&dlt_server, "evalsha") < 2 && dlt_now() < end) dlt_sleep_ms(5);
        DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 2);
    }
}

/* A lock's first acquisition in a process asks the script (a name new
 * to the server has no fence key yet): its uncontended path makes the
 * fence from the server's clock, and its string keeps it, shown by
 * dlock_lock_info.  One request: no pipelined SET before it. */
static void test_first_hold_keeps_its_fence(void) {
    const char *name = "form/first";
    dlock_mutex_t m;
    dlock_lock_info_t in;
    struct form f;
    char v[512];
    long long before = server_us();

    DLT_ASSERT_INT_EQ(fence_key(name), -1);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 0, NULL), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 2); /* the script's: fence key, lock */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "time"), 1);
    CU_ASSERT_FATAL(key_read(name, NULL, v, sizeof v));
    CU_ASSERT_FATAL(form_parse(v, &f) == 0);
    DLT_ASSERT_INT_EQ(f.fence, dlock_mutex_fence(&m));
    CU_ASSERT((long long)f.fence >= before);
    DLT_ASSERT_INT_EQ(fence_key(name), (long long)f.fence);
    DLT_ASSERT_ERR(dlock_lock_info(NULL, name, &in), 0);
    DLT_ASSERT_INT_EQ(in.fence, f.fence);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* The pipelined SET takes a free lock key even where others are: readers
 * (of another host, planted here), or the fair queue's live head.  Its
 * EXISTS sees them, and the script takes the string back before deciding:
 * busy, the lock key left absent, the others untouched. */
static void test_pipelined_set_gives_way(void) {
    const char *name = "form/gives-way";
    char k[600];
    dlock_mutex_t m;
    struct timespec dl;
    long long now_ms;
    int rc;

    dlt_lock_key(name, k, sizeof k);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 0, NULL), 0);
    DLT_ASSERT_ERR(warm(&m), 0);
    now_ms = server_us() / 1000;

    /* A reader of another host. */
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s:readers %lld 0123456789abcdef0123456789abcdef", k,
                                          now_ms + 60000)) == 1);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, EBUSY);
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 2); /* it was taken (and its fence issued)... */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 2); /* ...and given back (the fence's, the acquire) */
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %s:readers", k)), 1);
    dl = dlt_abs_in(CLOCK_REALTIME, 300);
    rc = dlock_mutex_timedlock(&m, &dl); /* asks the script at once now: it was busy */
    DLT_ASSERT_ERR(rc, ETIMEDOUT);
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s:readers %s:writers", k, k)) >= 1);

    /* The fair queue's head, live (registered as a waiting writer). */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* free again: the next call pipelines */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s:writers %lld fedcba9876543210fedcba9876543210", k,
                                          now_ms + 60000)) == 1);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "RPUSH %s:fifo fedcba9876543210fedcba9876543210|60000|0|2|h:1:1", k)) == 1);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, EBUSY);
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 2); /* the lock's, the fence key's */
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "LLEN %s:fifo", k)), 1);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s:fifo %s:writers", k, k)) == 2);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* keep() on a server before Redis 7.0, which refuses PEXPIRE's GT and NX:
 * the renewal of a read hold (renew.lua's shared branch, which runs
 * keep()) run with redis.pcall answering GT and NX with that server's
 * error.  An expiry
 * shorter than twice the lease is raised by PTTL and a plain PEXPIRE, a
 * longer one is left alone (never cut). */
static long long renew_read_without_gt(const char *zkey, long long ttl_ms) {
    static const char stub[] =
        "local R = redis\n"
        "local redis = setmetatable({pcall = function(...)\n"
        "  local a = {...}\n"
        "  if a[1] == 'PEXPIRE' and (a[4] == 'GT' or a[4] == 'NX') then return {err = 'ERR Unsupported option ' .. a[4]} end\n"
        "  return R.pcall(...)\n"
        "end}, {__index = R})\n";
    const char *body = dlock__script_body(DLOCK__SCRIPT_RENEW, 0);
    char script[8192];
    redisReply *r;
    long long now_ms = server_us() / 1000;
    CU_ASSERT_FATAL(body != NULL && strlen(stub) + strlen(body) < sizeof script);
    snprintf(script, sizeof script, "%s%s", stub, body);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "DEL %s", zkey));
    freeReplyObject(dlt_redis_cmd(&dlt_server, "ZADD %s %lld tok-r", zkey, now_ms + 10000));
    freeReplyObject(dlt_redis_cmd(&dlt_server, "PEXPIRE %s %lld", zkey, ttl_ms));
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    r = dlt_redis_cmd(&dlt_server, "EVAL %s 1 %s tok-r 10000 s", script, zkey);
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    if (r == NULL || r->type != REDIS_REPLY_INTEGER) printf("  renew without GT: %s\n", r && r->str ? r->str : "?");
    freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "pttl"), 1); /* GT refused: the PTTL's way */
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "PTTL %s", zkey));
}

static void test_keep_without_gt(void) {
    char k[600], z[640];
    long long p;
    dlt_lock_key("form/nogt", k, sizeof k);
    snprintf(z, sizeof z, "%s:readers", k);
    p = renew_read_without_gt(z, 5000); /* shorter than 2 x 10 s: raised */
    CU_ASSERT(p > 15000 && p <= 20000);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "pexpire"), 1);
    p = renew_read_without_gt(z, 60000); /* longer: left alone */
    CU_ASSERT(p > 55000 && p <= 60000);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "pexpire"), 0);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "DEL %s", z));
}

/* A hold taken past the uncontended path (here: beside another host's
 * waiting writer) is the hash, and the client knows it: its release reads
 * the hash at once (no MGET).  Should its lease have run out and another
 * host taken the lock as the string, that release answers "not yours"
 * (EPERM) and leaves the other's string alone. */
static void test_hash_release_after_loss(void) {
    const char *name = "form/hash-lost";
    const char *other = "0123456789abcdef0123456789abcdef - 1700000000000 elsewhere:1:1";
    char k[600], t[32], v[512];
    dlock_mutex_t m;

    dlt_lock_key(name, k, sizeof k);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 60000, NULL), 0);
    DLT_ASSERT_ERR(warm(&m), 0);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s:writers %lld fedcba9876543210fedcba9876543210", k,
                                          server_us() / 1000 + 60000)) == 1);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    key_type(name, t, sizeof t);
    CU_ASSERT_STRING_EQUAL(t, "hash");
    /* a plain release of it: the HMGET, the DEL, and no look for a string */
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "mget"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "hmget"), 1);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    /* again, and this time it is lost to a string meanwhile */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    key_type(name, t, sizeof t);
    CU_ASSERT_STRING_EQUAL(t, "hash");
    freeReplyObject(dlt_redis_cmd(&dlt_server, "DEL %s", k));
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s %s PX 60000", k, other));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    CU_ASSERT_FATAL(key_read(name, NULL, v, sizeof v));
    CU_ASSERT_STRING_EQUAL(v, other);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s %s:writers", k, k)) == 2);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* After a "held" answer a process asks the script first for that lock
 * (one round trip for a waiter, not the pipeline and then the script),
 * until a call finds it free with nobody there: then it pipelines again.
 * A script asked because the lock was found held (flag H) reads the
 * holder without the uncontended path's EXISTS; finding the lock free
 * with nobody there, it takes the string all the same. */
static void test_busy_lock_asks_the_script_first(void) {
    const char *name = "form/busy";
    char k[600], t[32];
    dlock_mutex_t m;

    dlt_lock_key(name, k, sizeof k);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 0, NULL), 0);
    DLT_ASSERT_ERR(warm(&m), 0);
    /* held by another host for 300 ms */
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s %s PX 300", k,
                                  "0123456789abcdef0123456789abcdef - 1700000000000 elsewhere:1:1"));
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 2);    /* the pipelined SET found it held... */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "exists"), 1); /* ...so the script's EXISTS is skipped */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 2); /* (the fence's skipped, the acquire) */
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "exists"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 1);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* after the other's lease */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* free, nobody there: by the script, as the string */
    key_type(name, t, sizeof t);
    CU_ASSERT_STRING_EQUAL(t, "string");
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 2); /* the fence key's, the string */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 2);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* and pipelined again */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 2);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "evalsha"), 2); /* the fence's, the release */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* A waiter tells the lock key's two forms apart without making the server
 * count an error: whichever form it finds, held by another host, the
 * string or the hash, no call of its wait fails (an HMGET of the string
 * would be refused with WRONGTYPE, counted in INFO errorstats, which
 * operators watch).  Its requests carry flag H (read the holder first)
 * once the call has waited, and from the first in rounds after one that
 * found the lock held. */
static void test_waiter_counts_no_error(void) {
    const char *name = "form/no-error";
    const char *tok = "0123456789abcdef0123456789abcdef";
    char k[600], t[32], o[80], s[160];
    dlock_mutex_t m;
    struct timespec dl;
    int round;

    dlt_lock_key(name, k, sizeof k);
    snprintf(s, sizeof s, "%s - 1700000000000 elsewhere:1:1", tok);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 0, NULL), 0);
    DLT_ASSERT_ERR(warm(&m), 0);
    for (round = 0; round < 3; round++) {
        /* rounds 0 and 1: the string (round 1 with H from its first
         * request: the last call found it held); round 2: the hash the
         * waits made of it */
        if (round < 2) {
            freeReplyObject(dlt_redis_cmd(&dlt_server, "DEL %s", k));
            freeReplyObject(dlt_redis_cmd(&dlt_server, "SET %s %s PX 60000", k, s));
        }
        DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
        dl = dlt_abs_in(CLOCK_REALTIME, 150);
        DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &dl), ETIMEDOUT);
        key_type(name, t, sizeof t);
        CU_ASSERT_STRING_EQUAL(t, "hash");
        CU_ASSERT(key_read(name, "owner", o, sizeof o));
        CU_ASSERT_STRING_EQUAL(o, tok);
        DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "hmget") - dlt_redis_cmdstat_ok(&dlt_server, "hmget"), 0);
        DLT_ASSERT_INT_EQ(dlt_redis_errors(&dlt_server), 0);
    }
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s", k)) == 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_uncontended_is_a_string),
    DLT_TEST(test_fences_from_the_clock),
    DLT_TEST(test_waiter_turns_it_into_a_hash),
    DLT_TEST(test_waiter_keys_kept),
    DLT_TEST(test_string_renewed_and_shown),
    DLT_TEST(test_other_holds_are_hashes),
    DLT_TEST(test_hash_hold_of_another_version),
    DLT_TEST(test_unknown_form_refused),
    DLT_TEST(test_first_hold_keeps_its_fence),
    DLT_TEST(test_pipelined_set_gives_way),
    DLT_TEST(test_busy_lock_asks_the_script_first),
    DLT_TEST(test_hash_release_after_loss),
    DLT_TEST(test_waiter_counts_no_error),
    DLT_TEST(test_keep_without_gt),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "lockform", tests);
}
