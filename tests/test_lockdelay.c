/* test_lockdelay.c -- lock-delay (dlock_mutexattr_setlockdelay, the URL's
 * lock_delay_ms): a hold that ends without a release keeps everyone out
 * for the delay after its lapse; a release, an exit() unlock and a break
 * hand over at once.  On one server, Cluster, Sentinel and Redlock.
 * labels: redis; timeout: 300
 */
#include "fixture.h"
#include "fixture_multi.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEASE_MS 400u
#define DELAY_MS 1200u

/* How the holder's hold ends. */
enum { END_KILL, END_STOP, END_UNLOCK, END_EXIT };

typedef struct ld_holder {
    char url[600]; /* "" the default client */
    const char *name;
    unsigned delay_ms;
    int how;
    int locked, go, lock_rc;
} ld_holder;

static dlock_mutex_t ld_exit_mutex; /* static: still reachable at exit() */

/* A mutex of name with the lease and lock-delay on url's client ("" the
 * default one; the client comes back in *cp, to destroy). */
static int ld_open(dlock_mutex_t *m, const char *url, const char *name, unsigned delay_ms, dlock_client_t **cp) {
    dlock_mutexattr_t a;
    int rc;
    *cp = NULL;
    if (url[0] != '\0' && (rc = dlt_client_make(cp, url, 3000)) != 0) return rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if ((rc = dlock_mutexattr_setlease(&a, LEASE_MS)) != 0) return rc;
    if ((rc = dlock_mutexattr_setlockdelay(&a, delay_ms)) != 0) return rc;
    if (*cp != NULL && (rc = dlock_mutexattr_setclient(&a, *cp)) != 0) return rc;
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static volatile sig_atomic_t ld_exiting_child;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) {
    return ld_exiting_child; /* as test_robust.c: a child that exit()s on purpose */
}

/* The holder process: locks, says so, and ends its hold as h->how says
 * (END_KILL and END_STOP: the test's signal does). */
static int ld_holder_main(void *p) {
    ld_holder *h = p;
    dlock_mutex_t own, *m = h->how == END_EXIT ? &ld_exit_mutex : &own;
    dlock_client_t *c;
    int rc = ld_open(m, h->url, h->name, h->delay_ms, &c);
    if (rc == 0) rc = dlock_mutex_lock(m);
    h->lock_rc = rc;
    dlt_flag_set(&h->locked, 1);
    DLT_CK(rc, 0);
    DLT_CKT(dlt_flag_wait(&h->go, 1, DLT_JOIN_MS));
    if (h->how == END_EXIT) {
        ld_exiting_child = 1;
        exit(0); /* the library releases the lock at exit */
    }
    DLT_CK(dlock_mutex_unlock(m), 0);
    DLT_CK(dlock_mutex_destroy(m), 0);
    if (c != NULL) dlock_client_destroy(c);
    return 0;
}

/* When the test saw a hold lapse: the lapse came after `held` (the
 * hold's end was caused, or a read sent then still found it held) and
 * before the server answered the read sent at `sent` (back: its answer
 * came), which found the lock free with delay_left_ms to go -- so the
 * delay ends no sooner than sent + delay_left_ms.  Under load a poll can
 * be late by far more than its period: bounds on the delay go by these
 * times, never by the poll's period. */
typedef struct ld_seen {
    double held, sent, back;
} ld_seen;

/* Polls dlock_lock_info until name is not held: 1 and *info, or 0.  The
 * hold's end was caused at seen->held, which the caller set. */
static int ld_wait_free(dlock_client_t *c, const char *name, dlock_lock_info_t *info, int timeout_ms, ld_seen *seen) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (dlt_now() < end) {
        double t = dlt_now();
        int rc = dlock_lock_info(c, name, info);
        if (rc == 0 && !info->held) {
            seen->sent = t;
            seen->back = dlt_now();
            return 1;
        }
        if (rc == 0) seen->held = t;
        dlt_sleep_ms(5);
    }
    return 0;
}

/* The delay the read in seen found left is within DELAY_MS of the lapse:
 * no less than DELAY_MS minus the time from when the lapse may have come
 * to when that read was answered (+ 2 ms of the server's rounding), and
 * at most DELAY_MS (+ LD_SCRIPT_MS, 1 ms of rounding): the key ends at
 * the hold's end (exp) + the delay exactly (PEXPIREAT), and the read
 * finds it free only at exp or later. */
#define LD_SCRIPT_MS 1
static void ld_check_left(const char *name, const dlock_lock_info_t *info, const ld_seen *seen) {
    double late_ms = (seen->back - seen->held) * 1000.0;
    CU_ASSERT(info->delay_left_ms <= (int64_t)DELAY_MS + LD_SCRIPT_MS);
    CU_ASSERT((double)info->delay_left_ms >= DELAY_MS - late_ms - 2 && info->delay_left_ms > 0);
    if ((double)info->delay_left_ms < DELAY_MS - late_ms - 2 || late_ms > 200 ||
        info->delay_left_ms > (int64_t)DELAY_MS)
        fprintf(stderr, "  %s: the delay seen with %lld ms left, the lapse at most %.0f ms before\n", name,
                (long long)info->delay_left_ms, late_ms);
}

/* A timedlock whose deadline falls inside the delay (which ends no
 * sooner than end) times out at its deadline: 300 ms, less if less is
 * left of the delay as seen (the host was slow to see it). */
static void ld_timed_inside(dlock_mutex_t *m, const char *name, double end) {
    double t0 = dlt_now(), ms = (end - t0) * 1000.0 - 100;
    struct timespec dl;
    if (ms > 300) ms = 300;
    if (ms < 50) {
        fprintf(stderr, "  %s: %.0f ms of the delay left when seen: too late for the timedlock step\n", name,
                (end - t0) * 1000.0);
        return;
    }
    dl = dlt_abs_in(CLOCK_REALTIME, (int)ms);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(m, &dl), ETIMEDOUT);
    CU_ASSERT(dlt_now() - t0 > ms / 1000.0 - 0.05 && dlt_now() - t0 < ms / 1000.0 + 0.3);
}

/* One round on url ("" the suite's server): a holder process with the
 * lock-delay takes name and its hold ends by `how`; the test's own mutex
 * m (no delay of its own: the holder's counts) then asks for it.  A lapse
 * (kill -9, SIGSTOP past the lease): the lock is free by dlock_lock_info
 * but in its delay (delay_left_ms), trylock answers EBUSY, a timedlock
 * whose deadline falls inside the delay times out at it, and a lock gets
 * it no sooner than the lapse + the delay, and not much later (it wakes
 * at the delay's end).  A release or an exit() unlock: trylock gets it at
 * once. */
static void ld_round(const char *url, const char *name, int how) {
    ld_holder *h = DLT_SHM_NEW(ld_holder, 1);
    dlock_mutex_t m;
    dlock_client_t *c = NULL;
    dlock_lock_info_t info;
    dlt_task th;
    double t_acq;
    ld_seen seen;
    long long calls;
    int rc;

    snprintf(h->url, sizeof h->url, "%s", url);
    h->name = name;
    h->delay_ms = DELAY_MS;
    h->how = how;
    dlt_task_start(&th, DLT_PROC, ld_holder_main, h);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0);
    DLT_ASSERT_ERR(ld_open(&m, url, name, 0, &c), 0);
    seen.held = dlt_now();
    if (how == END_KILL || how == END_STOP) {
        kill(th.pid, how == END_KILL ? SIGKILL : SIGSTOP);
    } else {
        dlt_flag_set(&h->go, 1);
        DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 0);
    }
    CU_ASSERT_TRUE_FATAL(ld_wait_free(c, name, &info, 5000, &seen));
    if (how == END_UNLOCK || how == END_EXIT) {
        DLT_ASSERT_INT_EQ(info.delay_left_ms, 0);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0); /* handed over at once */
    } else {
        double end = seen.sent + info.delay_left_ms / 1000.0; /* the delay ends no sooner */
        ld_check_left(name, &info, &seen);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
        ld_timed_inside(&m, name, end);
        calls = url[0] == '\0' ? dlt_redis_cmdstat(&dlt_server, "evalsha") : 0;
        rc = dlock_mutex_lock(&m);
        t_acq = dlt_now();
        DLT_ASSERT_ERR(rc, 0);
        if (url[0] == '\0') { /* it slept until the delay's end: a few requests, not a poll */
            calls = dlt_redis_cmdstat(&dlt_server, "evalsha") - calls;
            CU_ASSERT(calls <= 12);
            if (calls > 12) fprintf(stderr, "  %lld server calls while it waited out the delay\n", calls);
        }
        /* no sooner than the delay's end as seen, and not much later */
        CU_ASSERT(t_acq >= end - 0.03);
        CU_ASSERT(t_acq - seen.back < DELAY_MS / 1000.0 + 0.5);
        if (t_acq < end - 0.03 || t_acq - seen.back >= DELAY_MS / 1000.0 + 0.5)
            fprintf(stderr, "  %s: acquired %.3f s after the delay's end as seen (%lld ms left at the read)\n", name,
                    t_acq - end, (long long)info.delay_left_ms);
        if (how == END_STOP) kill(th.pid, SIGCONT);
        kill(th.pid, SIGKILL);
        DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 128 + SIGKILL);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    /* a release after all that: free, and no delay */
    DLT_ASSERT_ERR(dlock_lock_info(c, name, &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 0);
    DLT_ASSERT_INT_EQ(info.delay_left_ms, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    if (c != NULL) dlock_client_destroy(c);
    DLT_SHM_FREE(h, 1);
}

static void ld_rounds(const char *url, const char *stem) {
    static const char *const what[] = { "kill -9", "SIGSTOP", "unlock", "exit()" };
    char name[64];
    int how;
    for (how = END_KILL; how <= END_EXIT; how++) {
        fprintf(stderr, "  %s: %s\n", stem, what[how]);
        snprintf(name, sizeof name, "%s/%d", stem, how);
        ld_round(url, name, how);
    }
}

/* The attribute: default 0, set and read back, at most
 * DLOCK_LOCK_DELAY_MAX_MS; the URL's lock_delay_ms checked. */
static void test_attr_and_url(void) {
    dlock_mutexattr_t a;
    dlock_client_t *c = NULL;
    unsigned ms = 7;
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getlockdelay(&a, &ms), 0);
    DLT_ASSERT_INT_EQ(ms, 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlockdelay(&a, 1500), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getlockdelay(&a, &ms), 0);
    DLT_ASSERT_INT_EQ(ms, 1500);
    DLT_ASSERT_ERR(dlock_mutexattr_setlockdelay(&a, DLOCK_LOCK_DELAY_MAX_MS + 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getlockdelay(&a, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    CU_ASSERT_NOT_EQUAL(dlt_client_make(&c, "redis://127.0.0.1:1/?lock_delay_ms=60001", 1000), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(dlock_last_error(), "lock_delay_ms"));
}

/* The URL's lock_delay_ms is the delay of a mutex whose attribute says
 * nothing (its hold's hash says ld, its key lives lease + delay), and an
 * attribute's 0 wins. */
static void test_url_default(void) {
    char url[600];
    dlock_client_t *c = NULL;
    dlock_mutexattr_t a;
    dlock_mutex_t m1, m2;
    snprintf(url, sizeof url, "%s?lock_delay_ms=900", getenv("DLOCK_URL"));
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 3000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m1, "ld/url1", &a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlockdelay(&a, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m2, "ld/url2", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m2), 0);
    DLT_ASSERT_INT_EQ(dlt_key_field("ld/url1", "ld"), 900);
    CU_ASSERT(dlt_key_pttl("ld/url1") > 10000); /* the default lease + the delay */
    CU_ASSERT(dlt_key_pttl("ld/url2") <= 10000);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&dlt_server, "dlock:{ld/url1}"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    dlock_mutexattr_destroy(&a);
    dlock_client_destroy(c);
}

static void test_single(void) {
    ld_rounds("", "ld/one");
}

/* A hold with a lock-delay is one HSET (owner, fence, who, since, ld,
 * exp) and one PEXPIREAT (exp plus the delay) on the server.  A long
 * lease: no renewal runs before the count. */
static void test_take_writes_once(void) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    long long hs, px, pttl;
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 30000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlockdelay(&a, DELAY_MS), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "ld/take", &a), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    hs = dlt_redis_cmdstat(&dlt_server, "hset");
    px = dlt_redis_cmdstat(&dlt_server, "pexpireat");
    pttl = dlt_key_pttl("ld/take");
    DLT_ASSERT_INT_EQ(hs, 1);
    DLT_ASSERT_INT_EQ(px, 1);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "pexpire"), 0);
    CU_ASSERT(pttl > 30000 && pttl <= 30000 + DELAY_MS);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* The lock key's end (PEXPIRETIME) against the hold's: exp + ld, read
 * from the hash in the same call.  0 when they agree to the ms. */
static long long ld_key_end_off(const char *key) {
    static const char lua[] = "local h = redis.call('HMGET', KEYS[1], 'exp', 'ld') "
                              "return redis.call('PEXPIRETIME', KEYS[1]) - (h[1] + h[2])";
    redisReply *r = dlt_redis_cmd(&dlt_server, "EVAL %s 1 %s", lua, key);
    long long v = dlt_reply_int(r);
    if (v != 0) fprintf(stderr, "  %s: the key ends %lld ms past exp + ld\n", key, v);
    return v;
}

/* The delay ends at the hold's lease end + the delay, however long the
 * acquire script worked after reading the server's clock: 200 k dead
 * readers left in the readers key make its ZREMRANGEBYSCORE take tens of
 * ms between the TIME exp comes from and the key's expiry (a relative
 * PEXPIRE would count from then).  After renewals too (a short lease). */
static void test_delay_end_fixed(void) {
    static const char fill[] = "for i = 1, 200000, 500 do local a = {} "
                               "for j = i, i + 499 do a[#a + 1] = 1 a[#a + 1] = 'r' .. j end "
                               "redis.call('ZADD', KEYS[1], unpack(a)) end return redis.call('ZCARD', KEYS[1])";
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    char key[600], rk[640];
    dlt_lock_key("ld/end", key, sizeof key);
    snprintf(rk, sizeof rk, "%s:readers", key);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EVAL %s 1 %s", fill, rk)), 200000);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, LEASE_MS), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlockdelay(&a, DELAY_MS), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "ld/end", &a), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS %s", rk)), 0); /* the dead readers went */
    DLT_ASSERT_INT_EQ(ld_key_end_off(key), 0);
    dlt_sleep_ms(3 * LEASE_MS); /* renewed a few times */
    DLT_ASSERT_INT_EQ(ld_key_end_off(key), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* dlock_break ends a hold with no delay: a holder killed, broken before
 * its lease runs out, and the lock is taken at once. */
static void test_break_no_delay(void) {
    ld_holder *h = DLT_SHM_NEW(ld_holder, 1);
    dlock_mutex_t m;
    dlock_client_t *c;
    dlt_task th;
    h->name = "ld/break";
    h->delay_ms = DELAY_MS;
    h->how = END_KILL;
    dlt_task_start(&th, DLT_PROC, ld_holder_main, h);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0);
    kill(th.pid, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 128 + SIGKILL);
    DLT_ASSERT_ERR(ld_open(&m, "", "ld/break", 0, &c), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_ERR(dlock_break(NULL, "ld/break", DLOCK_BREAK_OWNERDEAD, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(h, 1);
}

/* A fair mutex's queue keeps its order through the delay: two waiters
 * queued during it (first, then second) are served in that order once it
 * ends, the first no sooner than the delay's end. */
typedef struct ld_waiter {
    const char *name;
    int queued, order, *turn;
    double t_acq;
} ld_waiter;

static int ld_waiter_main(void *p) {
    ld_waiter *w = p;
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_setfair(&a, 1), 0);
    DLT_CK(dlock_mutex_init(&m, w->name, &a), 0);
    dlt_flag_set(&w->queued, 1);
    DLT_CK(dlock_mutex_lock(&m), 0);
    w->t_acq = dlt_now();
    w->order = dlt_flag_add(w->turn, 1);
    dlt_sleep_ms(50);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    dlock_mutexattr_destroy(&a);
    return 0;
}

static void test_fair_order(void) {
    ld_holder *h = DLT_SHM_NEW(ld_holder, 1);
    ld_waiter *w = DLT_SHM_NEW(ld_waiter, 2);
    int *turn = DLT_SHM_NEW(int, 1);
    dlock_lock_info_t info;
    dlt_task th, t1, t2;
    ld_seen seen;
    h->name = "ld/fair";
    h->delay_ms = DELAY_MS;
    h->how = END_KILL;
    dlt_task_start(&th, DLT_PROC, ld_holder_main, h);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0);
    seen.held = dlt_now();
    kill(th.pid, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 128 + SIGKILL);
    CU_ASSERT_TRUE_FATAL(ld_wait_free(NULL, "ld/fair", &info, 5000, &seen));
    ld_check_left("ld/fair", &info, &seen);
    w[0] = (ld_waiter){ "ld/fair", 0, 0, turn, 0 };
    w[1] = w[0];
    dlt_task_start(&t1, DLT_PROC, ld_waiter_main, &w[0]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&w[0].queued, 1, 10000));
    dlt_sleep_ms(200); /* the first is in the queue */
    dlt_task_start(&t2, DLT_PROC, ld_waiter_main, &w[1]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t1, 10000), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t2, 10000), 0);
    DLT_ASSERT_INT_EQ(w[0].order, 1);
    DLT_ASSERT_INT_EQ(w[1].order, 2);
    CU_ASSERT(w[0].t_acq >= seen.sent + info.delay_left_ms / 1000.0 - 0.03);
    DLT_SHM_FREE(h, 1);
    DLT_SHM_FREE(w, 2);
    DLT_SHM_FREE(turn, 1);
}

static void test_cluster(void) {
    dlt_cluster cl;
    char url[600];
    memset(&cl, 0, sizeof cl);
    CU_ASSERT_EQUAL_FATAL(dlt_cluster_start(&cl, 3, 0, 0, NULL), 0);
    dlt_cluster_url(&cl, url, sizeof url, "0", NULL);
    ld_rounds(url, "ld/cl");
    dlt_cluster_cleanup(&cl);
}

static void test_sentinel(void) {
    dlt_sentinel st;
    memset(&st, 0, sizeof st);
    CU_ASSERT_EQUAL_FATAL(dlt_sentinel_start(&st, 0, 1, NULL, 20000), 0);
    ld_rounds(st.url, "ld/st");
    dlt_sentinel_cleanup(&st);
}

/* Redlock: each master keeps the marker; the lock is granted once a
 * quorum of them is past the delay, so the delay holds as on one server
 * while the masters keep their data. */
static void test_redlock(void) {
    dlt_masters ms;
    memset(&ms, 0, sizeof ms);
    CU_ASSERT_EQUAL_FATAL(dlt_masters_start(&ms, 3, 0), 0);
    ld_round(ms.url, "ld/rl/kill", END_KILL);
    ld_round(ms.url, "ld/rl/unlock", END_UNLOCK);
    dlt_masters_cleanup(&ms);
}

/* The dlock program: `exec --lock-delay` holds with the delay; killed
 * (kill -9) past its lease, `status` shows the lock in its delay (and
 * --json its delay_left_ms and delay_until), `list` lists it, `graph`
 * shows it waited for in its delay, `exec -n` finds it busy until the
 * delay's end and a waiting `exec` gets it then; a bad --lock-delay is a
 * usage error (64).  The delay must outlast the runs of dlock made in it
 * (eight or more): it is set from how long one run took here (slow under
 * ASan on a loaded host). */
static int ld_exec_main(void *p) {
    execl(DLOCK_CLI, DLOCK_CLI, "exec", "-q", "--lock-delay", (const char *)p, "-l", "300ms", "ld/cli", "--", "sleep",
          "5", (char *)NULL);
    return 127;
}

/* A waiter for ld/cli (`dlock exec -w 60`), to be seen by `dlock graph`
 * while the delay lasts. */
static int ld_exec_wait_main(void *p) {
    (void)p;
    execl(DLOCK_CLI, DLOCK_CLI, "exec", "-q", "-w", "60", "ld/cli", "--", "true", (char *)NULL);
    return 127;
}

/* `dlock graph` shows ld/cli, waited for in its delay, as in its
 * lock-delay with the time left (not as a lock of 0 read holders), and
 * --json its delay_left_ms: 1 once seen (within 5 s), else 0. */
static int ld_graph_seen(void) {
    static char out[8192], err[8192];
    char *const graph[] = { DLOCK_CLI, "graph", "ld/*", NULL };
    char *const graph_json[] = { DLOCK_CLI, "graph", "--json", "ld/*", NULL };
    double end = dlt_now() + 5;
    const char *p;
    while (dlt_now() < end) {
        if (dlt_run_capture(graph, out, err, sizeof out, 10000) == 0 && strstr(out, "ld/cli: ") != NULL) break;
        dlt_sleep_ms(20);
    }
    if (strstr(out, "ld/cli: in its lock-delay, ") == NULL) {
        fprintf(stderr, "  dlock graph printed:\n%s\n", out);
        return 0;
    }
    if (dlt_run_capture(graph_json, out, err, sizeof out, 10000) != 0) return 0;
    p = strstr(out, "\"delay_left_ms\":");
    return p != NULL && p[strlen("\"delay_left_ms\":")] >= '1' && p[strlen("\"delay_left_ms\":")] <= '9';
}

/* Waits until ld/cli is out of its delay: 1, or 0 after timeout_ms. */
static int ld_wait_delay_end(int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    dlock_lock_info_t info;
    while (dlt_now() < end) {
        if (dlock_lock_info(NULL, "ld/cli", &info) == 0 && !info.held && info.delay_left_ms == 0) return 1;
        dlt_sleep_ms(20);
    }
    return 0;
}

/* `dlock list` of the ld/ locks (the table and --json) while ld/cli is in its
 * lock-delay (in_delay): listed, free, its DELAY cell the time left (a
 * duration: ms or s) and its delay_left_ms above 0; after the delay's
 * end (free, no delay) it is not listed at all. */
static void ld_cli_list(int in_delay) {
    static char out[8192], err[8192];
    char *const list[] = { DLOCK_CLI, "list", "ld/*", NULL };
    char *const list_json[] = { DLOCK_CLI, "list", "--json", "ld/*", NULL };
    const char *row, *cell;
    long long left = -1;
    DLT_ASSERT_INT_EQ(dlt_run_capture(list, out, err, sizeof out, 10000), 0);
    row = strstr(out, "\nld/cli ");
    if (!in_delay) {
        CU_ASSERT_PTR_NULL(row);
        DLT_ASSERT_INT_EQ(dlt_run_capture(list_json, out, err, sizeof out, 10000), 0);
        CU_ASSERT_PTR_NULL(strstr(out, "\"ld/cli\""));
        return;
    }
    if (row == NULL) fprintf(stderr, "  dlock list printed:\n%s\n", out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
    CU_ASSERT(strncmp(out, "NAME ", 5) == 0 && strstr(out, "ROBUST  DELAY\n") != NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(row, " free "));
    cell = strrchr(row + 1, ' '); /* the last column, DELAY: "850ms" or "1.2s" */
    CU_ASSERT_FATAL(cell != NULL && strchr(row + 1, '\n') != NULL && cell < strchr(row + 1, '\n'));
    CU_ASSERT(cell[1] >= '1' && cell[1] <= '9' &&
              (strncmp(strchr(row + 1, '\n') - 2, "ms", 2) == 0 || strchr(row + 1, '\n')[-1] == 's'));
    DLT_ASSERT_INT_EQ(dlt_run_capture(list_json, out, err, sizeof out, 10000), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(row = strstr(out, "\"name\":\"ld/cli\""));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cell = strstr(row, "\"delay_left_ms\":"));
    left = strtoll(cell + strlen("\"delay_left_ms\":"), NULL, 10);
    CU_ASSERT(left > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(row, "\"delay_until\":\""));
}

static void test_cli(void) {
    static char out[8192], err[8192];
    char *const status[] = { DLOCK_CLI, "status", "ld/cli", NULL };
    char *const status_json[] = { DLOCK_CLI, "status", "--json", "ld/cli", NULL };
    char *const try[] = { DLOCK_CLI, "exec", "-n", "ld/cli", "true", NULL };
    char *const bad[] = { DLOCK_CLI, "exec", "--lock-delay", "60001", "ld/cli", "true", NULL };
    char *const wait_v[] = { DLOCK_CLI, "exec", "-v", "-w", "0.3", "ld/cli", "true", NULL };
    dlock_lock_info_t info;
    ld_seen seen;
    char delay[32];
    double end, run;
    int delay_ms;
    pid_t pid, waiter;

    run = dlt_now();
    DLT_ASSERT_INT_EQ(dlt_run_capture(status_json, out, err, sizeof out, 10000), 0); /* a run that connects */
    run = dlt_now() - run;
    delay_ms = 1500 + (int)(run * 12000); /* the runs, -w 0.3's wait, and room */
    snprintf(delay, sizeof delay, "%d", delay_ms < 20000 ? delay_ms : 20000);
    DLT_ASSERT_INT_EQ(dlt_run_capture(bad, out, err, sizeof out, 10000), 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--lock-delay"));
    pid = dlt_spawn(ld_exec_main, delay);
    CU_ASSERT_FATAL(pid > 0);
    end = dlt_now() + 10;
    while (dlt_now() < end && !(dlock_lock_info(NULL, "ld/cli", &info) == 0 && info.held)) dlt_sleep_ms(10);
    CU_ASSERT_TRUE_FATAL(info.held);
    seen.held = dlt_now();
    kill(pid, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 5000), 128 + SIGKILL);
    CU_ASSERT_TRUE_FATAL(ld_wait_free(NULL, "ld/cli", &info, 5000, &seen));
    end = seen.sent + info.delay_left_ms / 1000.0; /* the delay ends no sooner */
    DLT_ASSERT_INT_EQ(dlt_run_capture(status, out, err, sizeof out, 10000), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "lock-delay       until "));
    DLT_ASSERT_INT_EQ(dlt_run_capture(status_json, out, err, sizeof out, 10000), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"delay_until\":\""));
    CU_ASSERT_PTR_NULL(strstr(out, "\"delay_left_ms\":0"));
    ld_cli_list(1);
    waiter = dlt_spawn(ld_exec_wait_main, NULL);
    CU_ASSERT_FATAL(waiter > 0);
    CU_ASSERT(ld_graph_seen());
    DLT_ASSERT_INT_EQ(dlt_run_capture(try, out, err, sizeof out, 10000), 1);
    if (end - dlt_now() < 0.3 + run) /* the runs took far longer than the one measured: say so */
        fprintf(stderr, "  %.2f s of the %s ms delay left for exec -w 0.3 (a run took %.2f s)\n", end - dlt_now(),
                delay, run);
    DLT_ASSERT_INT_EQ(dlt_run_capture(wait_v, out, err, sizeof out, 10000), 1); /* -v says why */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "in its lock-delay for"));
    if (strstr(err, "in its lock-delay for") == NULL) fprintf(stderr, "  dlock exec -v said: %s\n", err);
    DLT_ASSERT_INT_EQ(dlt_wait(waiter, delay_ms + 10000), 0); /* it got the lock at the delay's end */
    CU_ASSERT_TRUE(ld_wait_delay_end(delay_ms + 5000));
    CU_ASSERT(dlt_now() >= end - 0.03); /* not over sooner than it was seen to end */
    DLT_ASSERT_INT_EQ(dlt_run_capture(try, out, err, sizeof out, 10000), 0);
    DLT_ASSERT_INT_EQ(dlt_run_capture(status_json, out, err, sizeof out, 10000), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"delay_left_ms\":0"));
    ld_cli_list(0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_attr_and_url),
    DLT_TEST(test_url_default),
    DLT_TEST(test_single),
    DLT_TEST(test_take_writes_once),
    DLT_TEST(test_delay_end_fixed),
    DLT_TEST(test_break_no_delay),
    DLT_TEST(test_cli),
    DLT_TEST(test_fair_order),
    DLT_TEST(test_cluster),
    DLT_TEST(test_sentinel),
    DLT_TEST(test_redlock),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "lockdelay", tests);
}
