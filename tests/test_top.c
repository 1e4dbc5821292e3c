/* test_top.c -- live figures (stats.c, stats.lua, dlock_stats), library side.
 * labels: redis; timeout: 180
 *
 * Every client counts acquisitions and wait and hold
 * times per lock and a background thread flushes them in batches.  A
 * workload of known counts in two processes gives those counts on the
 * server; the hold and wait percentiles fall in the bucket resolution
 * (a power of two) of known hold and wait times; the flushes are one
 * script call a second or so, not one per acquisition (INFO
 * commandstats, against the same workload with DLOCK_STATS=0);
 * DLOCK_STATS=0 flushes nothing; a minimal ACL user's flushes are
 * refused and its locks unaffected; a fork child does not flush its
 * parent's figures again; on Redis Cluster the figures of locks
 * whose slots are on different masters all go to {dlock-stats}'s node;
 * Redlock keeps none (ENOTSUP, and lock calls work); the buckets'
 * arithmetic (unit).  A hold lost (its lock broken under it: the renewal
 * is refused) and EDEADLK answers (an ERRORCHECK relock) are counted per
 * lock, flushed with the figures, and kept as counters that only grow
 * (a second client's add to them), as are the cumulative wait and hold
 * histograms, whose known holds land in their buckets.
 */
#define DLT_CK_MOD 120
#include "figures.h"
#include "fixture.h"
#include "fixture_multi.h"

#include <dlock.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

/* The figures of `name` over the last minute (acquisitions -1: none). */
static dlock_lock_stats_t tp_read(dlock_client_t *c, const char *name) {
    dlock_lock_stats_t out[32], none;
    size_t n = 0, i;
    memset(&none, 0, sizeof none);
    none.acquisitions = (uint64_t)-1;
    if (dlock_stats(c, 60, out, 32, &n) != 0) return none;
    for (i = 0; i < n; i++)
        if (strcmp(out[i].name, name) == 0) return out[i];
    return none;
}

/* n lock/unlock pairs of name on client c, each hold hold_ms long. */
static int tp_pairs(dlock_client_t *c, const char *name, int n, unsigned hold_ms) {
    dlock_mutex_t m;
    int i;
    DLT_CK(dlt_mutex_make(&m, name, 0, c), 0);
    for (i = 0; i < n; i++) {
        DLT_CK(dlock_mutex_lock(&m), 0);
        if (hold_ms) dlt_sleep_ms(hold_ms);
        DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

/* A process's workload: 30 pairs of top/a, 7 of top/b, on its own client,
 * whose destruction flushes the last figures. */
static int worker(void *arg) {
    dlock_client_t *c;
    (void)arg;
    DLT_CK(dlt_client_make(&c, NULL, 0), 0);
    if (tp_pairs(c, "top/a", 30, 0) != 0) return 1;
    if (tp_pairs(c, "top/b", 7, 0) != 0) return 2;
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static void test_counts_two_processes(void) {
    pid_t p1 = dlt_spawn(worker, NULL), p2 = dlt_spawn(worker, NULL);
    dlock_lock_stats_t out[8], a, b;
    dlock_client_t *c;
    size_t n = 0;
    CU_ASSERT_FATAL(p1 > 0 && p2 > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(p1, 30000), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(p2, 30000), 0);
    CU_ASSERT_FATAL(dlt_client_make(&c, NULL, 0) == 0);
    a = tp_read(c, "top/a");
    b = tp_read(c, "top/b");
    DLT_ASSERT_INT_EQ(a.acquisitions, 60);
    DLT_ASSERT_INT_EQ(a.releases, 60);
    DLT_ASSERT_INT_EQ(b.acquisitions, 14);
    DLT_ASSERT_INT_EQ(b.releases, 14);
    /* Busiest first; max bounds the answer. */
    DLT_ASSERT_ERR(dlock_stats(c, 60, out, 8, &n), 0);
    DLT_ASSERT_INT_EQ(n, 2);
    CU_ASSERT(strcmp(out[0].name, "top/a") == 0);
    DLT_ASSERT_ERR(dlock_stats(c, 60, out, 1, &n), 0);
    DLT_ASSERT_INT_EQ(n, 1);
    DLT_ASSERT_ERR(dlock_stats(c, 0, out, 8, &n), EINVAL);
    DLT_ASSERT_ERR(dlock_stats(c, DLOCK_STATS_WINDOW_MAX + 1, out, 8, &n), EINVAL);
    DLT_ASSERT_ERR(dlock_stats(c, 60, NULL, 8, &n), EINVAL);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* Holds of 20 ms: hold p50 in [16, 32) ms, the power of two holding
 * 20 ms (and a little more).  Uncontended waits: p50 below 16 ms.  A
 * waiter kept out for 60 ms: wait p99 in [32, 128) ms. */
struct blocker {
    dlock_client_t *c;
    int held;
};

static void *blocker_main(void *p) {
    struct blocker *b = p;
    dlock_mutex_t m;
    if (dlt_mutex_make(&m, "top/wait", 0, b->c) != 0 || dlock_mutex_lock(&m) != 0) return NULL;
    dlt_flag_set(&b->held, 1);
    dlt_sleep_ms(60);
    (void)dlock_mutex_unlock(&m);
    (void)dlock_mutex_destroy(&m);
    return NULL;
}

static void test_percentiles(void) {
    dlock_client_t *c, *r;
    struct blocker b = { NULL, 0 };
    dlock_lock_stats_t s, w;
    dlock_mutex_t m;
    pthread_t th;
    CU_ASSERT_FATAL(dlt_client_make(&c, NULL, 0) == 0);
    DLT_ASSERT_INT_EQ(tp_pairs(c, "top/hold", 10, 20), 0);
    b.c = c;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, blocker_main, &b) == 0);
    CU_ASSERT(dlt_flag_wait(&b.held, 1, 5000));
    CU_ASSERT_FATAL(dlt_mutex_make(&m, "top/wait", 0, c) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0); /* flushes */
    CU_ASSERT_FATAL(dlt_client_make(&r, NULL, 0) == 0);
    s = tp_read(r, "top/hold");
    DLT_ASSERT_INT_EQ(s.acquisitions, 10);
    CU_ASSERT(s.hold_ms_p50 >= 16.0 && s.hold_ms_p50 < 32.0);
    CU_ASSERT(s.wait_ms_p50 >= 0.0 && s.wait_ms_p50 < 16.0);
    w = tp_read(r, "top/wait");
    DLT_ASSERT_INT_EQ(w.acquisitions, 2);
    CU_ASSERT(w.wait_ms_p99 >= 32.0 && w.wait_ms_p99 < 128.0);
    CU_ASSERT(w.hold_ms_p99 >= 32.0 && w.hold_ms_p99 < 128.0);
    if (!(s.hold_ms_p50 >= 16.0 && s.hold_ms_p50 < 32.0) || !(w.wait_ms_p99 >= 32.0))
        fprintf(stderr, "hold p50 %.3f wait p50 %.3f; waited p99 %.3f\n", s.hold_ms_p50, s.wait_ms_p50,
                w.wait_ms_p99);
    DLT_ASSERT_ERR(dlock_client_destroy(r), 0);
}

/* The cumulative histograms: a 30 ms hold and a 300 ms one land in the
 * buckets of DLOCK_STATS_BOUNDS_MS that hold them (25 ms < 30 ms <= 100
 * ms, room for a late wake-up; 250 ms < 300 ms <= 500 ms), their sum in
 * µs; a later client's hold adds to them.  dlock_client_breaker says the
 * breaker is closed with the server up, and refuses a NULL out. */
static void test_cumulative(void) {
    dlock_client_t *c, *r;
    dlock_lock_stats_t s;
    dlock_breaker_state_t b;
    uint64_t hn = 0, wn = 0;
    unsigned i;
    CU_ASSERT_FATAL(dlt_client_make(&c, NULL, 0) == 0);
    DLT_ASSERT_INT_EQ(tp_pairs(c, "top/cum", 1, 30), 0);
    DLT_ASSERT_INT_EQ(tp_pairs(c, "top/cum", 1, 300), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0); /* flushes */
    CU_ASSERT_FATAL(dlt_client_make(&r, NULL, 0) == 0);
    s = tp_read(r, "top/cum");
    for (i = 0; i < DLOCK_STATS_BUCKETS; i++) hn += s.hold_buckets[i], wn += s.wait_buckets[i];
    DLT_ASSERT_INT_EQ(hn, 2);
    DLT_ASSERT_INT_EQ(wn, 2);
    DLT_ASSERT_INT_EQ(s.hold_buckets[0] + s.hold_buckets[1] + s.hold_buckets[2] + s.hold_buckets[3], 0);
    DLT_ASSERT_INT_EQ(s.hold_buckets[4] + s.hold_buckets[5], 1);
    DLT_ASSERT_INT_EQ(s.hold_buckets[7], 1);
    CU_ASSERT(s.hold_us_sum >= 330000 && s.hold_us_sum < 600000);
    CU_ASSERT_FATAL(dlt_client_make(&c, NULL, 0) == 0);
    DLT_ASSERT_INT_EQ(tp_pairs(c, "top/cum", 1, 30), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    s = tp_read(r, "top/cum");
    DLT_ASSERT_INT_EQ(s.hold_buckets[4] + s.hold_buckets[5], 2);
    DLT_ASSERT_INT_EQ(s.hold_buckets[7], 1);
    DLT_ASSERT_ERR(dlock_client_breaker(r, &b), 0);
    DLT_ASSERT_INT_EQ(b.open, 0);
    DLT_ASSERT_INT_EQ(b.open_ms, 0);
    DLT_ASSERT_ERR(dlock_client_breaker(r, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_client_destroy(r), 0);
}

/* Pairs for about `secs` seconds on a client made with DLOCK_STATS as
 * `env` (NULL: on), their number in *pairs: the script calls the server
 * ran meanwhile, the client's destruction included. */
static long long tp_run(const char *env, double secs, long long *pairs) {
    dlock_client_t *c;
    dlock_mutex_t m;
    double end;
    long long n = 0, before;
    setenv("DLOCK_STATS", env ? env : "1", 1);
    if (dlt_client_make(&c, NULL, 0) != 0) return -1;
    setenv("DLOCK_STATS", "1", 1);
    if (dlt_mutex_make(&m, "top/rate", 0, c) != 0) return -1;
    /* The first pair loads the scripts (NOSCRIPT, EVAL): not counted. */
    if (dlock_mutex_lock(&m) != 0 || dlock_mutex_unlock(&m) != 0) return -1;
    before = dlt_evals_ok(); /* (a script's first EVALSHA, refused NOSCRIPT, is not counted) */
    for (end = dlt_now() + secs; dlt_now() < end && n < 1000000; n++)
        if (dlock_mutex_lock(&m) != 0 || dlock_mutex_unlock(&m) != 0) return -1;
    (void)dlock_mutex_destroy(&m);
    (void)dlock_client_destroy(c); /* the last flush */
    *pairs = n;
    return dlt_evals_ok() - before;
}

static void test_flush_per_second(void) {
    long long off_pairs = 0, on_pairs = 0, off, on, extra;
    dlock_lock_stats_t s;
    dlock_client_t *r;
    off = tp_run("0", 1.0, &off_pairs);
    on = tp_run(NULL, 3.0, &on_pairs);
    CU_ASSERT_FATAL(off > 0 && on > 0 && off_pairs > 20 && on_pairs > 20);
    /* Without figures every pair is 2 script calls: the fence script
     * pipelined with the SET of the uncontended path, and the release. */
    DLT_ASSERT_INT_EQ(off, 2 * off_pairs);
    /* With them: a flush a second (the last at destroy), whatever the
     * number of pairs (hundreds to thousands here). */
    extra = on - 2 * on_pairs;
    CU_ASSERT(extra >= 1 && extra <= 3 + 2);
    if (!(extra >= 1 && extra <= 5)) fprintf(stderr, "%lld flushes for %lld pairs in 3 s\n", extra, on_pairs);
    CU_ASSERT(on_pairs > 10 * extra);
    /* And the run with DLOCK_STATS=0 left no figure: only the other's. */
    CU_ASSERT_FATAL(dlt_client_make(&r, NULL, 0) == 0);
    s = tp_read(r, "top/rate");
    DLT_ASSERT_INT_EQ(s.acquisitions, on_pairs + 1);
    DLT_ASSERT_ERR(dlock_client_destroy(r), 0);
}

/* The buckets: every length falls in its bucket's bounds, the bounds
 * tile the line, and a quantile lands in its sample's bucket. */
static void test_buckets(void) {
    uint64_t us, hist[DLOCK__STAT_NB];
    unsigned b, prev = 0;
    double lo, hi, q;
    for (us = 0; us < (1ull << 33); us = us < 64 ? us + 1 : us + us / 7) {
        b = dlock__stats_bucket(us);
        dlock__stats_bounds(b, &lo, &hi);
        CU_ASSERT((double)us >= lo && (double)us < hi);
        CU_ASSERT(b == prev || b == prev + 1 || us > 64);
        prev = b;
    }
    for (b = 1; b < DLOCK__STAT_NB; b++) {
        double plo, phi;
        dlock__stats_bounds(b - 1, &plo, &phi);
        dlock__stats_bounds(b, &lo, &hi);
        CU_ASSERT(phi == lo);
    }
    memset(hist, 0, sizeof hist);
    CU_ASSERT(dlock__stats_quantile(hist, 0.5) == 0.0);
    hist[dlock__stats_bucket(20000)] = 9;
    hist[dlock__stats_bucket(900000)] = 1;
    q = dlock__stats_quantile(hist, 0.5);
    CU_ASSERT(q >= 16.384 && q < 20.48);
    q = dlock__stats_quantile(hist, 0.99);
    CU_ASSERT(q >= 786.432 && q < 917.504);
}

/* The renewal thread flushes by itself, within a second or two, even
 * when its client's only hold had a long lease (its idle tick 10 s):
 * the first figure since a flush wakes it. */
static void test_flush_while_idle(void) {
    dlock_client_t *c, *r;
    dlock_mutex_t m;
    dlock_lock_stats_t s;
    double t0, end;
    int seen = 0;
    CU_ASSERT_FATAL(dlt_client_make(&c, NULL, 0) == 0);
    CU_ASSERT_FATAL(dlt_client_make(&r, NULL, 0) == 0);
    CU_ASSERT_FATAL(dlt_mutex_make(&m, "top/idle", 60000, c) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_sleep_ms(1500); /* the renewal thread sleeps until the hold is due */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    t0 = dlt_now();
    for (end = t0 + 6; !seen && dlt_now() < end; dlt_sleep_ms(50)) {
        s = tp_read(r, "top/idle");
        seen = s.acquisitions == 1 && s.releases == 1;
    }
    CU_ASSERT(seen);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(r), 0);
}

/* A minimal ACL user (README.md's line) without HINCRBY, ZINCRBY and
 * EXPIRE: its flushes are refused, its locks work as before; with them,
 * its figures are flushed. */
#define ACL_LINE                                                                                          \
    "ACL SETUSER topu on >topu-pw resetkeys ~dlock:* resetchannels &dlock:* -@all +evalsha +eval "         \
    "+script|load +subscribe +unsubscribe +select +scan +time +get +set +incr +mget +del +exists +pexpire +pttl +hget +hmget " \
    "+hset +hdel +hgetall +zadd +zrem +zscore +zcard +zcount +zrange +zrangebyscore +zremrangebyscore +zpopmin "  \
    "+publish +rpush +blpop +lpop +lindex +lpos +lset +lrange +lrem"

static void test_acl_refused(void) {
    dlock_client_t *c, *r;
    dlock_lock_stats_t s;
    redisReply *rep;
    char url[256];
    snprintf(url, sizeof url, "redis://topu:topu-pw@127.0.0.1:%d", dlt_server.port);
    rep = dlt_redis_cmd(&dlt_server, ACL_LINE);
    CU_ASSERT_FATAL(rep != NULL && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    CU_ASSERT_FATAL(dlt_client_make(&c, url, 0) == 0);
    DLT_ASSERT_INT_EQ(tp_pairs(c, "top/acl", 5, 0), 0);
    dlt_sleep_ms(300); /* (the renewal thread's flush is refused meanwhile) */
    DLT_ASSERT_INT_EQ(tp_pairs(c, "top/acl", 5, 0), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    CU_ASSERT_FATAL(dlt_client_make(&r, NULL, 0) == 0);
    s = tp_read(r, "top/acl");
    DLT_ASSERT_INT_EQ(s.acquisitions, (uint64_t)-1); /* none */
    rep = dlt_redis_cmd(&dlt_server, "ACL SETUSER topu +hincrby +zincrby +expire");
    freeReplyObject(rep);
    CU_ASSERT_FATAL(dlt_client_make(&c, url, 0) == 0);
    DLT_ASSERT_INT_EQ(tp_pairs(c, "top/acl", 4, 0), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    s = tp_read(r, "top/acl");
    DLT_ASSERT_INT_EQ(s.acquisitions, 4);
    DLT_ASSERT_ERR(dlock_client_destroy(r), 0);
}

/* A fork child forgets the parent's unflushed figures: the parent's 5
 * and the child's 2 make 7, not 12. */
static dlock_client_t *fork_client;

static int fork_child_main(void *arg) {
    (void)arg;
    if (tp_pairs(fork_client, "top/fork", 2, 0) != 0) return 1;
    DLT_CK(dlock_client_destroy(fork_client), 0); /* flushes the child's */
    return 0;
}

static void test_fork(void) {
    dlock_lock_stats_t s;
    dlock_client_t *r;
    pid_t pid;
    CU_ASSERT_FATAL(dlt_client_make(&fork_client, NULL, 0) == 0);
    DLT_ASSERT_INT_EQ(tp_pairs(fork_client, "top/fork", 5, 0), 0);
    pid = dlt_spawn(fork_child_main, NULL);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 30000), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(fork_client), 0);
    CU_ASSERT_FATAL(dlt_client_make(&r, NULL, 0) == 0);
    s = tp_read(r, "top/fork");
    DLT_ASSERT_INT_EQ(s.acquisitions, 7);
    DLT_ASSERT_INT_EQ(s.releases, 7);
    DLT_ASSERT_ERR(dlock_client_destroy(r), 0);
}

/* Redis Cluster: locks on three masters; every figure in one slot. */
static void test_cluster(void) {
    dlt_cluster cl;
    dlock_client_t *c = NULL;
    char url[512], name[32];
    int i;
    if (dlt_cluster_client(&cl, url, sizeof url, &c) != 0) {
        CU_FAIL("cannot start a cluster and a client on it");
        return;
    }
    for (i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "top/cl%d", i);
        DLT_ASSERT_INT_EQ(tp_pairs(c, name, 3 + i, 0), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    CU_ASSERT_FATAL(dlt_client_make(&c, url, 5000) == 0);
    for (i = 0; i < 3; i++) {
        dlock_lock_stats_t s;
        snprintf(name, sizeof name, "top/cl%d", i);
        s = tp_read(c, name);
        DLT_ASSERT_INT_EQ(s.acquisitions, 3 + i);
        DLT_ASSERT_INT_EQ(s.releases, 3 + i);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_cluster_cleanup(&cl);
}

/* Redlock: no figures are kept; lock calls work as before. */
static void test_redlock_none(void) {
    dlt_masters m;
    dlock_client_t *c = NULL;
    dlock_lock_stats_t out[4];
    size_t n = 7;
    memset(&m, 0, sizeof m);
    if (dlt_masters_start(&m, 3, 0) != 0) {
        CU_FAIL("cannot start the masters");
        return;
    }
    CU_ASSERT_FATAL(dlt_client_make(&c, m.url, 3000) == 0);
    DLT_ASSERT_INT_EQ(tp_pairs(c, "top/rl", 5, 0), 0);
    DLT_ASSERT_ERR(dlock_stats(c, 60, out, 4, &n), ENOTSUP);
    DLT_ASSERT_INT_EQ(n, 0);
    CU_ASSERT(strstr(dlock_last_error(), "Redlock") != NULL);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&m);
}

/* On the server the counts are one hash per lock, not the per-second
 * ones of the window: field == want there, expiring within a day (not the
 * window's 70 s), and
 * field in none of the per-second hashes. */
static void tp_counters_kept(const char *name, const char *field, long long want) {
    char pat[128];
    redisReply *k, *v;
    size_t i;
    snprintf(pat, sizeof pat, "*{dlock-stats}:c:%s", name);
    k = dlt_redis_cmd(&dlt_server, "KEYS %s", pat);
    CU_ASSERT_FATAL(k != NULL && k->type == REDIS_REPLY_ARRAY);
    DLT_ASSERT_INT_EQ(k->elements, 1);
    if (k->elements == 1) {
        v = dlt_redis_cmd(&dlt_server, "HGET %s %s", k->element[0]->str, field);
        CU_ASSERT(v != NULL && v->type == REDIS_REPLY_STRING && atoll(v->str) == want);
        freeReplyObject(v);
        v = dlt_redis_cmd(&dlt_server, "PTTL %s", k->element[0]->str);
        CU_ASSERT(v != NULL && v->type == REDIS_REPLY_INTEGER && v->integer > 70000 && v->integer <= 86400000);
        freeReplyObject(v);
    }
    freeReplyObject(k);
    snprintf(pat, sizeof pat, "*{dlock-stats}:h:*:%s", name);
    k = dlt_redis_cmd(&dlt_server, "KEYS %s", pat);
    CU_ASSERT_FATAL(k != NULL && k->type == REDIS_REPLY_ARRAY);
    CU_ASSERT(k->elements >= 1);
    for (i = 0; i < k->elements; i++) {
        v = dlt_redis_cmd(&dlt_server, "HEXISTS %s %s", k->element[i]->str, field);
        CU_ASSERT(v != NULL && v->type == REDIS_REPLY_INTEGER && v->integer == 0);
        freeReplyObject(v);
    }
    freeReplyObject(k);
}

static void test_lost_and_deadlocks(void) {
    dlock_lock_stats_t l, d;
    dlock_client_t *r;
    DLT_ASSERT_INT_EQ(dlt_figures_trouble("top/lost", "top/dead", 2), 0);
    CU_ASSERT_FATAL(dlt_client_make(&r, NULL, 0) == 0);
    l = tp_read(r, "top/lost");
    d = tp_read(r, "top/dead");
    DLT_ASSERT_INT_EQ(l.acquisitions, 1);
    DLT_ASSERT_INT_EQ(l.lost_leases, 1);
    DLT_ASSERT_INT_EQ(l.deadlocks, 0);
    DLT_ASSERT_INT_EQ(d.acquisitions, 1);
    DLT_ASSERT_INT_EQ(d.deadlocks, 2);
    DLT_ASSERT_INT_EQ(d.lost_leases, 0);
    /* Another client's: added to the counters. */
    DLT_ASSERT_INT_EQ(dlt_figures_trouble("top/lost", "top/dead", 3), 0);
    l = tp_read(r, "top/lost");
    d = tp_read(r, "top/dead");
    DLT_ASSERT_INT_EQ(l.lost_leases, 2);
    DLT_ASSERT_INT_EQ(d.deadlocks, 5);
    DLT_ASSERT_INT_EQ(d.acquisitions, 2);
    tp_counters_kept("top/dead", "D", 5);
    tp_counters_kept("top/lost", "L", 2);
    DLT_ASSERT_ERR(dlock_client_destroy(r), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_lost_and_deadlocks),
    DLT_TEST(test_buckets),
    DLT_TEST(test_counts_two_processes),
    DLT_TEST(test_percentiles),
    DLT_TEST(test_cumulative),
    DLT_TEST(test_flush_per_second),
    DLT_TEST(test_flush_while_idle),
    DLT_TEST(test_acl_refused),
    DLT_TEST(test_fork),
    DLT_TEST(test_cluster),
    DLT_TEST(test_redlock_none),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    setenv("DLOCK_STATS", "1", 1); /* (the fixture turns them off unless set) */
    return dlt_main(argc, argv, "top", tests);
}
