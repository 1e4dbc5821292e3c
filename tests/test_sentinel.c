/* labels: redis; timeout: 300 */
/* test_sentinel.c -- Sentinel deployments:
 * redis+sentinel:// URLs, failover following, wait=N.
 *
 * Each test starts its own topology on free loopback ports: a master, its
 * replicas (replicaof) and sentinels monitoring it as "mymaster" (the
 * fixture's dlt_sentinel, fixture_multi.h), and tears it down at its end
 * (dlt_sentinel_cleanup; a test that stops half-way leaves it to the next
 * st_up, and the fixture kills whatever is left at exit).  The
 * suite's own server (dlt_server, DLOCK_URL) is not used: every client
 * here is made from the sentinel URL with dlt_client_make.
 *
 * Only outcomes are asserted, never durations: waits on the topology are
 * polls with generous bounds.  Processes are forked before the test
 * process makes any client of its own (AddressSanitizer and fork: see
 * fixture.h).  Helpers are st_-prefixed (static).
 */
#define DLT_CK_MOD 120 /* worker codes 1..120: clear of 128 + signal */
#include "fixture_multi.h"

#include <dlock.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ========================================================================
 * The topology
 * ====================================================================== */

static dlt_sentinel st; /* one topology at a time, global so that any test can clean it up */

/* The plain topology. */
static int st_up(int nrep, int nsent) {
    return dlt_sentinel_start(&st, nrep, nsent, NULL, 30000);
}

/* Polls EXISTS dlock:{name} on node i until it is want (1 / 0), within
 * timeout_ms.  1 if it was. */
static int st_wait_exists(int i, const char *name, int want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    for (int round = 0; round < 100000; round++) {
        if (dlt_redis_lock_exists(&st.node[i], name) == want) return 1;
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(20);
    }
    return 0;
}

/* A mutex named name on client c with lease_ms (0: default) and an
 * optional lost-lock handler. */
static int st_mutex(dlock_mutex_t *m, const char *name, dlock_client_t *c, unsigned lease_ms,
                    dlock_lost_fn fn, void *arg) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (lease_ms && (rc = dlock_mutexattr_setlease(&a, lease_ms)) != 0) goto out;
    if (fn && (rc = dlock_mutexattr_setlostcallback(&a, fn, arg)) != 0) goto out;
    rc = dlock_mutexattr_setclient(&a, c);
    if (rc == 0) rc = dlock_mutex_init(m, name, &a);
out:
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* ========================================================================
 * 1. Basic use through the sentinels
 * ====================================================================== */

struct st_other {
    dlock_client_t *c;
    const char *name;
    int trylock_busy, timed_busy, trylock_free, unlock_free;
};

/* Another thread, another client: the lock is busy for it while the test
 * holds it.  Phase 1 runs while held. */
static void *st_other_busy(void *p) {
    struct st_other *o = p;
    dlock_mutex_t m;
    struct timespec ts;
    if (st_mutex(&m, o->name, o->c, 0, NULL, NULL) != 0) return NULL;
    o->trylock_busy = dlock_mutex_trylock(&m);
    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    o->timed_busy = dlock_mutex_timedlock(&m, &ts);
    dlock_mutex_destroy(&m);
    return NULL;
}

static void *st_other_free(void *p) {
    struct st_other *o = p;
    dlock_mutex_t m;
    if (st_mutex(&m, o->name, o->c, 0, NULL, NULL) != 0) return NULL;
    o->trylock_free = dlock_mutex_trylock(&m);
    if (o->trylock_free == 0) o->unlock_free = dlock_mutex_unlock(&m);
    dlock_mutex_destroy(&m);
    return NULL;
}

static void test_sentinel_basic(void) {
    static const char *name = "sent/basic";
    dlock_client_t *c1 = NULL, *c2 = NULL, *c3 = NULL;
    dlock_mutex_t m;
    struct timespec ts;
    char url[600];
    pthread_t th;
    int rc;

    CU_ASSERT_FATAL(st_up(2, 3) == 0);
    DLT_ASSERT_ERR(dlt_client_make(&c1, st.url, 10000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&c2, st.url, 10000), 0);
    CU_ASSERT_FATAL(c1 != NULL && c2 != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, name, c1, 0, NULL, NULL), 0);

    /* lock: the key is on the master and reaches both replicas */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 1);
    DLT_ASSERT_INT_EQ(st_wait_exists(1, name, 1, 10000), 1);
    DLT_ASSERT_INT_EQ(st_wait_exists(2, name, 1, 10000), 1);

    /* another client sees it busy */
    struct st_other o = { c2, name, -1, -1, -1, -1 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, st_other_busy, &o) == 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(o.trylock_busy, EBUSY);
    DLT_ASSERT_ERR(o.timed_busy, ETIMEDOUT);

    /* unlock: gone from the master (and then from the replicas) */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 0);
    DLT_ASSERT_INT_EQ(st_wait_exists(1, name, 0, 10000), 1);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, st_other_free, &o) == 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(o.trylock_free, 0);
    DLT_ASSERT_ERR(o.unlock_free, 0);

    /* trylock and timedlock through the sentinels, free lock */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &ts), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* Never on a replica: nothing of ours was written there directly
     * (a replica refuses writes, so a key there came by replication). */
    redisReply *r = dlt_redis_cmd(&st.node[1], "ROLE");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              strcmp(r->element[0]->str, "slave") == 0);
    if (r) freeReplyObject(r);

    /* The first sentinel is down (nothing listens on port 1): the next
     * one in the list answers. */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:1,127.0.0.1:%d/%s", st.sent[1].port, DLT_SENTINEL_MASTER);
    DLT_ASSERT_ERR(dlt_client_make(&c3, url, 10000), 0);
    if (c3 != NULL) {
        DLT_ASSERT_ERR(st_mutex(&m, "sent/basic2", c3, 0, NULL, NULL), 0);
        rc = dlock_mutex_lock(&m);
        DLT_ASSERT_ERR(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], "sent/basic2"), 1);
        if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(c3), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
    dlt_sentinel_cleanup(&st);
}

/* ========================================================================
 * 2. Planned failover while A holds and B waits
 * ====================================================================== */

typedef struct st_ft {
    char url[600];
    char name[64];
    int in_cs, max_cs;   /* processes in the critical section, and its maximum */
    int a_locked;        /* A holds it */
    int a_in;            /* A counts itself in the critical section */
    int a_lost;          /* calls of A's lost-lock handler */
    int a_unlock_rc;     /* A's unlock: 0 (held through) or EPERM (lost) */
    int a_outcome;       /* 1: held through the failover, 2: told it lost it */
    int go_unlock;       /* the test: the failover is over, A may unlock */
    int b_waiting;       /* B is about to wait in timedlock */
    int b_got;           /* B acquired */
    int b_a_in;          /* A was still in (a_in) when B got in: 1 is a violation */
    int b_unlock_rc;
} st_ft;

/* A leaves its critical section once: at its unlock or at the report of
 * its loss, whichever comes first. */
static void st_ft_a_leave(st_ft *f) {
    if (__atomic_exchange_n(&f->a_in, 0, __ATOMIC_SEQ_CST) == 1) dlt_flag_add(&f->in_cs, -1);
}

static void st_ft_on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    st_ft *f = arg;
    (void)m;
    (void)name;
    dlt_flag_add(&f->a_lost, 1);
    st_ft_a_leave(f);
}

static int st_ft_a(void *p) {
    st_ft *f = p;
    dlock_client_t *c;
    dlock_mutex_t m;
    char url[700];
    int rc;
    snprintf(url, sizeof url, "%s?wait=1", f->url);
    DLT_CK(dlt_client_make(&c, url, 10000), 0);
    DLT_CK(st_mutex(&m, f->name, c, 3000, st_ft_on_lost, f), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    dlt_flag_set(&f->a_in, 1);
    dlt_flag_max(&f->max_cs, dlt_flag_add(&f->in_cs, 1));
    dlt_flag_set(&f->a_locked, 1);
    DLT_CKT(dlt_flag_wait(&f->go_unlock, 1, 90000));
    st_ft_a_leave(f);
    rc = dlock_mutex_unlock(&m);
    dlt_flag_set(&f->a_unlock_rc, rc);
    DLT_CKT(rc == 0 || rc == EPERM);
    /* A hold the handler reported lost is not unlocked (EPERM); an unlock
     * may also be the first to find it gone (EPERM, no handler yet). */
    if (dlt_flag_get(&f->a_lost) > 0) DLT_CK(rc, EPERM);
    dlt_flag_set(&f->a_outcome, rc == 0 ? 1 : 2);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

/* B (or C) got the lock: its critical section, told in f (whether A was
 * in its own then, the most in one at once), its unlock (0, or EPERM for
 * a hold lost meanwhile) and its end.  0, or the failing step. */
static int st_b_section(st_ft *f, dlock_client_t *c, dlock_mutex_t *m) {
    int rc;
    dlt_flag_set(&f->b_a_in, dlt_flag_get(&f->a_in));
    dlt_flag_max(&f->max_cs, dlt_flag_add(&f->in_cs, 1));
    dlt_flag_set(&f->b_got, 1);
    dlt_sleep_ms(50);
    dlt_flag_add(&f->in_cs, -1);
    rc = dlock_mutex_unlock(m);
    dlt_flag_set(&f->b_unlock_rc, rc);
    DLT_CKT(rc == 0 || rc == EPERM);
    DLT_CK(dlock_mutex_destroy(m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static int st_ft_b(void *p) {
    st_ft *f = p;
    dlock_client_t *c;
    dlock_mutex_t m;
    struct timespec ts;
    int rc;
    DLT_CK(dlt_client_make(&c, f->url, 10000), 0);
    DLT_CK(st_mutex(&m, f->name, c, 3000, NULL, NULL), 0);
    DLT_CKT(dlt_flag_wait(&f->a_locked, 1, 60000));
    dlt_flag_set(&f->b_waiting, 1);
    ts = dlt_abs_in(CLOCK_REALTIME, 30000);
    rc = dlock_mutex_timedlock(&m, &ts);
    DLT_CK(rc, 0);
    return st_b_section(f, c, &m);
}

static void test_sentinel_planned_failover(void) {
    st_ft *f = DLT_SHM_NEW(st_ft, 1);
    pid_t a, b;
    int newm = -1, rc, reps;
    dlock_client_t *c = NULL;
    dlock_mutex_t m;

    if (st_up(2, 3) != 0) {
        CU_FAIL("topology did not start");
        goto out;
    }
    snprintf(f->url, sizeof f->url, "%s", st.url);
    snprintf(f->name, sizeof f->name, "sent/failover");
    a = dlt_spawn(st_ft_a, f);
    b = dlt_spawn(st_ft_b, f);
    CU_ASSERT_FATAL(a > 0 && b > 0);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&f->a_locked, 1, 30000), 1);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&f->b_waiting, 1, 30000), 1);
    dlt_sleep_ms(300); /* B is (almost surely) inside timedlock by now */
    DLT_ASSERT_INT_EQ(dlt_flag_get(&f->b_got), 0);
    /* wait=1: A's grant reached a replica before lock returned */
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], f->name), 1);
    reps = (dlt_redis_lock_exists(&st.node[1], f->name) == 1) + (dlt_redis_lock_exists(&st.node[2], f->name) == 1);
    CU_ASSERT(reps >= 1);

    /* The sentinels must know both replicas before a failover. */
    CU_ASSERT(dlt_sentinel_wait_healthy(&st, 2, 30000) == 0);
    (void)dlt_sentinel_failover(&st, 0);
    newm = dlt_sentinel_wait_new_master(&st, 0, 45000);
    CU_ASSERT(newm > 0);
    dlt_flag_set(&f->go_unlock, 1);

    DLT_ASSERT_INT_EQ(dlt_wait(a, 60000), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(b, 60000), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&f->b_got), 1);
    CU_ASSERT(f->a_outcome == 1 || f->a_outcome == 2);
    /* B in while A still inside can only be the failover window of
     * asynchronous replication (see test_sentinel_failover_fresh_client);
     * then A must have been told. */
    if (dlt_flag_get(&f->b_a_in) || dlt_flag_get(&f->max_cs) > 1)
        CU_ASSERT(dlt_flag_get(&f->a_lost) > 0 || f->a_unlock_rc == EPERM);
    printf("\n  planned failover: master node 0 -> node %d; A %s (unlock %s, handler calls %d); "
           "B's unlock %s\n",
           newm, f->a_outcome == 1 ? "held through it" : "was told it lost the lock",
           dlt_errno_label(f->a_unlock_rc), f->a_lost, dlt_errno_label(f->b_unlock_rc));

    /* New traffic goes to the new master. */
    if (newm > 0) {
        DLT_ASSERT_ERR(dlt_client_make(&c, st.url, 10000), 0);
        if (c != NULL) {
            DLT_ASSERT_ERR(st_mutex(&m, "sent/after", c, 0, NULL, NULL), 0);
            rc = dlock_mutex_lock(&m);
            DLT_ASSERT_ERR(rc, 0);
            DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[newm], "sent/after"), 1);
            if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
            DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[newm], "sent/after"), 0);
            /* and the failed-over lock is free there */
            DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
            DLT_ASSERT_ERR(st_mutex(&m, f->name, c, 0, NULL, NULL), 0);
            struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 20000);
            rc = dlock_mutex_timedlock(&m, &ts);
            DLT_ASSERT_ERR(rc, 0);
            DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[newm], f->name), 1);
            if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
            DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
            DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
        }
    }
out:
    dlt_sentinel_cleanup(&st);
    DLT_SHM_FREE(f, 1);
}

/* ========================================================================
 * 2b. After a planned failover, a process that starts afresh (its first
 * connection goes to the new master) must not get a lock that A still
 * believes it holds.  The sentinels demote the old master only several
 * seconds after naming the new one; A's renewals must not keep going to
 * it meanwhile, or A's key on the new master runs out under A's feet.
 * ====================================================================== */

static int st_fresh_c(void *p) {
    st_ft *f = p;
    dlock_client_t *c;
    dlock_mutex_t m;
    struct timespec ts;
    int rc;
    /* b_waiting: set by the test once the sentinels name the new master */
    DLT_CKT(dlt_flag_wait(&f->b_waiting, 1, 120000));
    DLT_CK(dlt_client_make(&c, f->url, 10000), 0);
    DLT_CK(st_mutex(&m, f->name, c, 3000, NULL, NULL), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 40000);
    rc = dlock_mutex_timedlock(&m, &ts);
    DLT_CK(rc, 0);
    return st_b_section(f, c, &m);
}

/* wait=N holds renewals to the same rule as acquisitions: a renewal that
 * fewer than N replicas acknowledged does not extend the hold, so when the
 * master loses its replicas (as a master a failover leaves behind does),
 * the hold runs out and its holder is told, instead of going on renewing
 * where no replica sees it. */
static int wr_lost;

static void test_sentinel_wait_renewals_need_replicas(void) {
    static const char *name = "sent/wait-renew";
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    char url[700];
    int i, held_before = 0;

    CU_ASSERT_FATAL(st_up(2, 1) == 0);
    /* A replica's acknowledgement may take a while on a loaded host (the
     * ASan run of the suite, beside other tests, saw this first lock fail
     * once with 200 ms); a second is still well inside the 5 s the test
     * gives the hold to be lost once the replicas are gone. */
    dlt_sentinel_url(&st, url, sizeof url, "wait=1&wait_timeout_ms=1000");
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 5000), 0);
    CU_ASSERT_FATAL(c != NULL);
    __atomic_store_n(&wr_lost, 0, __ATOMIC_SEQ_CST);
    DLT_ASSERT_ERR(st_mutex(&m, name, c, 1000, dlt_count_lost, &wr_lost), 0);
    {
        int rc = dlock_mutex_lock(&m);
        if (rc != 0) printf("\n  lock: %s\n", dlock_last_error());
        DLT_ASSERT_ERR(rc, 0);
    }
    /* With a replica, renewals are confirmed: held over several leases. */
    for (i = 0; i < 25; i++) {
        dlt_sleep_ms(100);
        held_before += dlock_mutex_holds(&m);
    }
    DLT_ASSERT_INT_EQ(held_before, 25);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&wr_lost, __ATOMIC_SEQ_CST), 0);
    /* Both replicas gone: no renewal is confirmed any more. */
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&st.node[1]), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&st.node[2]), 0);
    for (i = 0; i < 100 && __atomic_load_n(&wr_lost, __ATOMIC_SEQ_CST) == 0; i++) dlt_sleep_ms(50);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&wr_lost, __ATOMIC_SEQ_CST), 1);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_sentinel_cleanup(&st);
}

static void test_sentinel_failover_fresh_client(void) {
    st_ft *f = DLT_SHM_NEW(st_ft, 1);
    pid_t a, c;
    int newm;

    if (st_up(2, 3) != 0) {
        CU_FAIL("topology did not start");
        goto out;
    }
    snprintf(f->url, sizeof f->url, "%s", st.url);
    snprintf(f->name, sizeof f->name, "sent/fresh");
    a = dlt_spawn(st_ft_a, f);
    c = dlt_spawn(st_fresh_c, f);
    CU_ASSERT_FATAL(a > 0 && c > 0);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&f->a_locked, 1, 30000), 1);
    CU_ASSERT(dlt_sentinel_wait_healthy(&st, 2, 30000) == 0);
    (void)dlt_sentinel_failover(&st, 0);
    newm = dlt_sentinel_wait_new_master(&st, 0, 45000);
    CU_ASSERT(newm > 0);
    dlt_flag_set(&f->b_waiting, 1); /* C starts: its connections go to the new master */
    /* A holds on for 12 s (past the old master's demotion), unless C got
     * the lock or A was told it lost it before. */
    for (int i = 0; i < 1200 && !dlt_flag_get(&f->b_got) && !dlt_flag_get(&f->a_lost); i++) dlt_sleep_ms(10);
    dlt_flag_set(&f->go_unlock, 1);
    DLT_ASSERT_INT_EQ(dlt_wait(a, 60000), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(c, 60000), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&f->b_got), 1);
    /* Replication is asynchronous: a failover can let the new master run
     * A's lease out while A still renews on the old one, so C may get the
     * lock before A knows it lost it.  What must never happen is that A
     * stays unaware: if C got in while A was inside, A was told (the
     * lost-lock handler ran, or its unlock said EPERM). */
    if (dlt_flag_get(&f->b_a_in) || dlt_flag_get(&f->max_cs) > 1)
        CU_ASSERT(dlt_flag_get(&f->a_lost) > 0 || f->a_unlock_rc == EPERM);
    printf("\n  fresh client after failover: A %s (unlock %s, handler calls %d)%s\n",
           f->a_outcome == 1 ? "held through it" : "was told it lost the lock",
           dlt_errno_label(f->a_unlock_rc), f->a_lost,
           f->b_a_in ? "; C GOT THE LOCK WHILE A STILL HELD IT" : "");
out:
    dlt_sentinel_cleanup(&st);
    DLT_SHM_FREE(f, 1);
}

/* ========================================================================
 * 3. The master is killed under lock traffic
 * ====================================================================== */

#define ST_KW 3          /* workers */
#define ST_K_AFTER 10    /* acquisitions each must make after the failover */
#define ST_K_MAXITER 2000

typedef struct st_kill {
    char url[600];
    int in_cs, max_cs, violations;
    int phase; /* 0 before the kill, 1 killed, 2 the sentinels name the new master */
    int ok_before[ST_KW], ok_after[ST_KW], errs[ST_KW], unlock_errs[ST_KW];
    int idx;
    unsigned long long last_fence; /* the last holder's, written inside the lock */
    int fence_back;                /* holds whose fence was not above the last holder's */
} st_kill;

static int st_kill_worker(void *p) {
    st_kill *k = p;
    int me = dlt_flag_add(&k->idx, 1) - 1;
    dlock_client_t *c;
    dlock_mutex_t m;
    char url[700];
    double end = dlt_now() + 75.0;
    snprintf(url, sizeof url, "%s?wait=1", k->url);
    DLT_CK(dlt_client_make(&c, url, 3000), 0);
    DLT_CK(st_mutex(&m, "sent/kill", c, 2000, NULL, NULL), 0);
    for (int i = 0; i < ST_K_MAXITER && dlt_now() < end; i++) {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 4000);
        int phase = dlt_flag_get(&k->phase), rc = dlock_mutex_timedlock(&m, &ts);
        if (rc != 0) {
            /* the outage: the master is gone, or not yet replicated to */
            if (rc != ENOLCK && rc != ETIMEDOUT) return DLT_CK_FAIL("timedlock", rc, ENOLCK);
            dlt_flag_add(&k->errs[me], 1);
            continue;
        }
        int n = dlt_flag_add(&k->in_cs, 1);
        dlt_flag_max(&k->max_cs, n);
        if (n != 1) dlt_flag_add(&k->violations, 1);
        /* holds follow one another in real time: so must their fences,
         * across the failover too (docs/fencing.md) */
        unsigned long long f = dlock_mutex_fence(&m);
        if (f <= __atomic_load_n(&k->last_fence, __ATOMIC_SEQ_CST)) dlt_flag_add(&k->fence_back, 1);
        __atomic_store_n(&k->last_fence, f, __ATOMIC_SEQ_CST);
        dlt_sleep_ms(2);
        dlt_flag_add(&k->in_cs, -1);
        rc = dlock_mutex_unlock(&m);
        if (rc != 0) {
            if (rc != ENOLCK && rc != EPERM) return DLT_CK_FAIL("unlock", rc, 0);
            dlt_flag_add(&k->unlock_errs[me], 1);
        }
        /* a success counts as after the failover only if it began after */
        if (phase == 2) {
            if (dlt_flag_add(&k->ok_after[me], 1) >= ST_K_AFTER) break;
        } else if (phase == 0) {
            dlt_flag_add(&k->ok_before[me], 1);
        }
        dlt_sleep_ms(5);
    }
    DLT_CK(dlt_flag_get(&k->ok_after[me]), ST_K_AFTER);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static void test_sentinel_master_killed(void) {
    st_kill *k = DLT_SHM_NEW(st_kill, 1);
    pid_t pid[ST_KW];
    int newm, errs = 0;

    if (st_up(2, 3) != 0) {
        CU_FAIL("topology did not start");
        goto out;
    }
    snprintf(k->url, sizeof k->url, "%s", st.url);
    for (int i = 0; i < ST_KW; i++) {
        pid[i] = dlt_spawn(st_kill_worker, k);
        CU_ASSERT_FATAL(pid[i] > 0);
    }
    /* traffic runs: every worker got the lock a few times */
    for (int i = 0; i < ST_KW; i++) DLT_ASSERT_INT_EQ(dlt_flag_wait_ge(&k->ok_before[i], 3, 30000), 1);
    DLT_ASSERT_INT_EQ(dlt_sentinel_wait_healthy(&st, 2, 30000), 0);
    dlt_flag_set(&k->phase, 1);
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&st.node[0]), 0);
    newm = dlt_sentinel_wait_new_master(&st, 0, 60000);
    CU_ASSERT(newm > 0);
    dlt_flag_set(&k->phase, 2);
    for (int i = 0; i < ST_KW; i++) DLT_ASSERT_INT_EQ(dlt_wait(pid[i], 90000), 0);
    for (int i = 0; i < ST_KW; i++) {
        DLT_ASSERT_INT_EQ(dlt_flag_get(&k->ok_after[i]), ST_K_AFTER);
        errs += k->errs[i];
    }
    DLT_ASSERT_INT_EQ(dlt_flag_get(&k->violations), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&k->max_cs), 1);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&k->fence_back), 0);
    printf("\n  master killed: node 0 -> node %d; %d failed acquisitions during the outage, "
           "unlock errors %d/%d/%d\n",
           newm, errs, k->unlock_errs[0], k->unlock_errs[1], k->unlock_errs[2]);
out:
    dlt_sentinel_cleanup(&st);
    DLT_SHM_FREE(k, 1);
}

/* ========================================================================
 * 3b. One failover rule: an unlock in flight, a timed call in an outage
 * ====================================================================== */

/* The master stops as an unlock's request leaves (SIGSTOP: the request
 * sits unanswered in its socket), then dies (SIGKILL): the unlock is asked
 * again on the replica the sentinels promote, which had the hold, and
 * returns 0 there, the lock gone -- not ENOLCK ("the request may have
 * run") at once.  Then the new master is killed too, and a 0.5 s
 * timedlock ends at its deadline (+50 ms) with ETIMEDOUT, as on a cluster
 * or one server. */
static void test_sentinel_unlock_in_flight(void) {
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    dlt_unlocker u = { &m, 0, 0, -1, -1, 0, "" };
    static const char *name = "sent/inflight";
    int newm, started = 0;
    double t_kill, el;
    pthread_t th;

    if (st_up(2, 3) != 0) {
        CU_FAIL("topology did not start");
        goto out;
    }
    DLT_ASSERT_INT_EQ(dlt_sentinel_wait_healthy(&st, 2, 30000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&c, st.url, 15000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, name, c, 15000, NULL, NULL), 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, dlt_unlocker_run, &u) == 0);
    started = 1;
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&u.locked, 1, 10000), 1);
    DLT_ASSERT_ERR(u.lock_rc, 0);
    DLT_ASSERT_INT_EQ(st_wait_exists(1, name, 1, 3000), 1); /* the replicas have the hold */
    DLT_ASSERT_INT_EQ(st_wait_exists(2, name, 1, 3000), 1);

    CU_ASSERT_FATAL(kill(st.node[0].pid, SIGSTOP) == 0);
    dlt_flag_set(&u.go, 1);
    dlt_sleep_ms(300);
    DLT_ASSERT_INT_EQ(u.t_done == 0, 1); /* unanswered so far */
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&st.node[0]), 0);
    t_kill = dlt_now();
    pthread_join(th, NULL);
    started = 0;
    el = u.t_done - t_kill;
    printf("\n  unlock in flight when the master died: %s %.2f s after the kill [%s]\n", dlt_errno_label(u.rc), el,
           u.err);
    DLT_ASSERT_ERR(u.rc, 0);
    CU_ASSERT_TRUE(el < 15.0);
    newm = dlt_sentinel_wait_new_master(&st, 0, 30000);
    CU_ASSERT_FATAL(newm > 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[newm], name), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    /* The new master killed too: a timed call ends at its deadline. */
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&st.node[newm]), 0);
    dlt_timedlock_ends_at_deadline(&m, "the master was killed");
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
out:
    if (started) pthread_join(th, NULL);
    if (c != NULL) DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_sentinel_cleanup(&st);
}

/* ========================================================================
 * 4. wait=N
 * ====================================================================== */

/* Continues a stopped replica after a while. */
static void *st_cont_later(void *p) {
    dlt_redis *r = p;
    dlt_sleep_ms(800);
    if (r->pid > 0) kill(r->pid, SIGCONT);
    return NULL;
}

static void test_sentinel_wait_replicas(void) {
    static const char *name = "sent/wait";
    dlock_client_t *c2 = NULL, *c3 = NULL, *cl = NULL;
    dlock_mutex_t m;
    char url[700];
    const char *msg;
    struct timespec ts;
    pthread_t th;
    double t0, dt;
    int rc;

    CU_ASSERT_FATAL(st_up(2, 1) == 0);

    /* wait=2 with 2 replicas: granted, and both replicas have it at once */
    dlt_sentinel_url(&st, url, sizeof url, "wait=2");
    DLT_ASSERT_ERR(dlt_client_make(&c2, url, 5000), 0);
    CU_ASSERT_FATAL(c2 != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, name, c2, 0, NULL, NULL), 0);
    rc = dlock_mutex_lock(&m);
    DLT_ASSERT_ERR(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[1], name), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[2], name), 1);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* wait=2 with a replica that lags (stopped, then continued 0.8 s
     * later): each acquisition it does not acknowledge is given back and
     * made again, and lock returns once both replicas have one -- not
     * ENOLCK at the first late acknowledgement. */
    dlt_sentinel_url(&st, url, sizeof url, "wait=2&wait_timeout_ms=200");
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 5000), 0);
    CU_ASSERT_FATAL(cl != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, name, cl, 0, NULL, NULL), 0);
    CU_ASSERT_FATAL(st.node[2].pid > 0 && kill(st.node[2].pid, SIGSTOP) == 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, st_cont_later, &st.node[2]) == 0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m);
    dt = dlt_now() - t0;
    pthread_join(th, NULL);
    kill(st.node[2].pid, SIGCONT);
    if (rc != 0) printf("\n  lock with a lagging replica: %s\n", dlock_last_error());
    DLT_ASSERT_ERR(rc, 0);
    CU_ASSERT(dt >= 0.7); /* not before the replica was back */
    CU_ASSERT(dt < 4.0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[2], name), 1);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);

    /* wait=3 with 2 replicas: refused, and given back, after trying again
     * up to the unreachable bound (1 s here) */
    dlt_sentinel_url(&st, url, sizeof url, "wait=3&wait_timeout_ms=200");
    DLT_ASSERT_ERR(dlt_client_make(&c3, url, 1000), 0);
    CU_ASSERT_FATAL(c3 != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, name, c3, 0, NULL, NULL), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    dt = dlt_now() - t0;
    CU_ASSERT(dt >= 0.5 && dt < 3.0);
    msg = dlock_last_error();
    CU_ASSERT(msg != NULL && strstr(msg, "wait=") != NULL && strstr(msg, "acknowledged") != NULL &&
              strstr(msg, "only 2 of the 3") != NULL);
    if (msg) printf("\n  wait=3: %s\n", msg);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOLCK);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 3000);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &ts), ENOLCK);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* the refused grants left the lock free for wait=2 */
    DLT_ASSERT_ERR(st_mutex(&m, name, c2, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c3), 0);
    dlt_sentinel_cleanup(&st);
}

/* ========================================================================
 * 5. Bad input
 * ====================================================================== */

#define ST_SECRET "s3cr3tPW9x"

static void test_sentinel_bad_input(void) {
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    char url[700];
    const char *msg;
    int sp;

    CU_ASSERT_FATAL(st_up(0, 1) == 0);
    sp = st.sent[0].port;

    /* syntax: EINVAL at creation, without the password in the message */
    const char *fmts[] = {
        "redis+sentinel://127.0.0.1:%d",              /* no master name */
        "redis+sentinel://127.0.0.1:%d/",             /* empty master name */
        "redis+sentinel://127.0.0.1:%d,/mymaster",    /* empty sentinel */
        "redis+sentinel://127.0.0.1:%d/my$master",    /* bad character */
        "redis+sentinel://127.0.0.1:%d/mymaster/x",   /* bad database */
        "redis+sentinel://127.0.0.1:%d/mymaster?wait=x",
        "redis+sentinel://u:" ST_SECRET "@127.0.0.1:%d", /* no master name, with a password */
    };
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        snprintf(url, sizeof url, fmts[i], sp);
        c = NULL;
        int rc = dlt_client_make(&c, url, 1000);
        if (rc != EINVAL) fprintf(stderr, "URL %s: got %s\n", url, dlt_errno_label(rc));
        DLT_ASSERT_ERR(rc, EINVAL);
        msg = dlock_last_error();
        CU_ASSERT(msg != NULL && strstr(msg, ST_SECRET) == NULL);
        if (rc == 0 && c) dlock_client_destroy(c);
    }
    const char *bad[] = {
        "redis+sentinel://127.0.0.1:0/mymaster",
        "redis+sentinel://127.0.0.1:65536/mymaster",
        "redis+sentinel://127.0.0.1:abc/mymaster",
        "redis+sentinel://127.0.0.1:26379,127.0.0.1:-1/mymaster",
        "redis+sentinel://u:" ST_SECRET "@127.0.0.1:99999/mymaster",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = NULL;
        int rc = dlt_client_make(&c, bad[i], 1000);
        if (rc != EINVAL) fprintf(stderr, "URL %s: got %s\n", bad[i], dlt_errno_label(rc));
        DLT_ASSERT_ERR(rc, EINVAL);
        msg = dlock_last_error();
        CU_ASSERT(msg != NULL && strstr(msg, ST_SECRET) == NULL);
        if (rc == 0 && c) dlock_client_destroy(c);
    }

    /* an unknown master: the sentinel answers nil -> ENOLCK at lock time,
     * naming the master, within the unreachable bound */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/nosuchmaster", sp);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 1000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, "sent/bad", c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    msg = dlock_last_error();
    CU_ASSERT(msg != NULL && strstr(msg, "nosuchmaster") != NULL);
    if (msg) printf("\n  unknown master: %s\n", msg);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOLCK);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);

    /* the same with a password: it never shows */
    snprintf(url, sizeof url, "redis+sentinel://someone:" ST_SECRET "@127.0.0.1:%d/nosuchmaster", sp);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 1000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, "sent/bad", c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    msg = dlock_last_error();
    CU_ASSERT(msg != NULL && strstr(msg, "nosuchmaster") != NULL && strstr(msg, ST_SECRET) == NULL);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);

    /* a password for a master that has none: AUTH is refused (ENOLCK),
     * the message does not show the password */
    snprintf(url, sizeof url, "redis+sentinel://someone:" ST_SECRET "@127.0.0.1:%d/%s", sp, DLT_SENTINEL_MASTER);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 1000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, "sent/bad", c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    msg = dlock_last_error();
    CU_ASSERT(msg != NULL && strstr(msg, ST_SECRET) == NULL && strstr(msg, "***") != NULL);
    if (msg) printf("  AUTH refused: %s\n", msg);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], "sent/bad"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);

    /* no sentinel listens at all */
    DLT_ASSERT_ERR(dlt_client_make(&c, "redis+sentinel://127.0.0.1:1/mymaster", 1000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, "sent/bad", c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOLCK);
    msg = dlock_last_error();
    CU_ASSERT(msg != NULL && strstr(msg, DLT_SENTINEL_MASTER) != NULL);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);

    /* and the right master through the same sentinel works */
    DLT_ASSERT_ERR(dlt_client_make(&c, st.url, 5000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, "sent/bad", c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], "sent/bad"), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_sentinel_cleanup(&st);
}

/* ========================================================================
 * 6. rediss+sentinel://: the sentinels and the servers speak only TLS
 * ====================================================================== */

/* As st_up, but every process is a TLS-only server (dlt_redis_start_tls:
 * "port 0", tls-port, tls-replication yes, so that replication and the
 * sentinels' links to the servers and to one another are TLS too) with the
 * certificates of dlt_tls_dir().  st.url is then
 * "rediss+sentinel://127.0.0.1:S1,.../mymaster", without a query; *dir
 * the certificates' folder.  0 or -1. */
static int st_up_tls(int nrep, int nsent, const char **dir) {
    if ((*dir = dlt_tls_dir()) == NULL) return -1;
    return dlt_sentinel_start(&st, nrep, nsent, *dir, 20000);
}

/* The holder's fence of dlock:{name} on node i as a number; 0 when absent or no answer. */
static unsigned long long st_fence_on(int i, const char *name) {
    char key[256];
    unsigned long long v = 0;
    dlt_lock_key(name, key, sizeof key);
    redisReply *r = dlt_redis_cmd(&st.node[i], "EVAL_RO %s 1 %s fence", DLT_LOCK_FIELD_LUA, key);
    if (r != NULL && r->type == REDIS_REPLY_STRING) v = strtoull(r->str, NULL, 10);
    if (r) freeReplyObject(r);
    return v;
}

/* The waiter of test_sentinel_tls, a process of its own. */
typedef struct st_tw {
    char url[700];
    int held;     /* the test holds the lock */
    int waiting;  /* the waiter is about to wait */
    int got;      /* the waiter acquired */
    double t_got; /* dlt_now() when it did (CLOCK_MONOTONIC: one clock for both) */
} st_tw;

static int st_tls_waiter(void *p) {
    st_tw *w = p;
    dlock_client_t *c;
    dlock_mutex_t m;
    struct timespec ts;
    DLT_CK(dlt_client_make(&c, w->url, 10000), 0);
    DLT_CK(st_mutex(&m, "tlssent/basic", c, 10000, NULL, NULL), 0);
    DLT_CKT(dlt_flag_wait(&w->held, 1, 60000));
    dlt_flag_set(&w->waiting, 1);
    ts = dlt_abs_in(CLOCK_REALTIME, 20000);
    DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
    w->t_got = dlt_now();
    dlt_flag_set(&w->got, 1);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static int tls_lost;

/* 1 master, 1 replica and 2 sentinels, all TLS-only: locks through the
 * sentinels, a waiter in another process woken by the unlock, then a
 * SENTINEL FAILOVER followed by the same client. */
static void test_sentinel_tls(void) {
    static const char *name = "tlssent/basic", *held = "tlssent/held", *after = "tlssent/after";
    st_tw *w = DLT_SHM_NEW(st_tw, 1);
    struct st_other o;
    dlock_client_t *c1 = NULL, *c2 = NULL;
    dlock_mutex_t m, mh, ma;
    const char *dir = NULL;
    char url[700];
    pthread_t th;
    pid_t wp;
    double t0, t_unlock;
    int rc, newm = -1, h;
    uint64_t fence;

    t0 = dlt_now();
    if (st_up_tls(1, 2, &dir) != 0) {
        CU_FAIL("TLS topology did not start");
        goto out;
    }
    printf("\n  TLS topology up in %.1f s\n", dlt_now() - t0);
    snprintf(url, sizeof url, "%s?cacert=%s/ca.crt", st.url, dir);
    snprintf(w->url, sizeof w->url, "%s", url);
    /* the waiter process first: no client (nor its threads) here yet */
    wp = dlt_spawn(st_tls_waiter, w);
    CU_ASSERT_FATAL(wp > 0);

    DLT_ASSERT_ERR(dlt_client_make(&c1, url, 10000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&c2, url, 10000), 0);
    CU_ASSERT_FATAL(c1 != NULL && c2 != NULL);

    /* 1. lock: the key is on the master (and reaches the replica) */
    DLT_ASSERT_ERR(st_mutex(&m, name, c1, 10000, NULL, NULL), 0);
    rc = dlock_mutex_lock(&m);
    DLT_ASSERT_ERR(rc, 0);
    if (rc != 0) printf("  lock: %s\n", dlock_last_error());
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], name), 1);
    DLT_ASSERT_INT_EQ(st_fence_on(0, name), dlock_mutex_fence(&m));
    DLT_ASSERT_INT_EQ(st_wait_exists(1, name, 1, 10000), 1);

    /* another client (another thread) finds it busy */
    o = (struct st_other){ c2, name, -1, -1, -1, -1 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, st_other_busy, &o) == 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(o.trylock_busy, EBUSY);
    DLT_ASSERT_ERR(o.timed_busy, ETIMEDOUT);

    /* the waiter in another process is woken by the unlock, long before
     * the 10 s lease would have run out */
    dlt_flag_set(&w->held, 1);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&w->waiting, 1, 30000), 1);
    dlt_sleep_ms(500); /* it is (almost surely) subscribed and waiting by now */
    DLT_ASSERT_INT_EQ(dlt_flag_get(&w->got), 0);
    t_unlock = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(wp, 30000), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&w->got), 1);
    if (dlt_flag_get(&w->got)) {
        printf("  waiter woken %.0f ms after the unlock\n", (w->t_got - t_unlock) * 1000);
        CU_ASSERT(w->t_got - t_unlock < 2.0);
    }
    DLT_ASSERT_INT_EQ(st_wait_exists(0, name, 0, 5000), 1);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, st_other_free, &o) == 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(o.trylock_free, 0);
    DLT_ASSERT_ERR(o.unlock_free, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* 2. a hold (3 s lease, renewed) taken before a planned failover */
    __atomic_store_n(&tls_lost, 0, __ATOMIC_SEQ_CST);
    DLT_ASSERT_ERR(st_mutex(&mh, held, c1, 3000, dlt_count_lost, &tls_lost), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mh), 0);
    fence = dlock_mutex_fence(&mh);
    CU_ASSERT(fence != 0);
    DLT_ASSERT_INT_EQ(st_wait_exists(1, held, 1, 10000), 1);
    CU_ASSERT(dlt_sentinel_wait_healthy(&st, 1, 20000) == 0);
    t0 = dlt_now();
    (void)dlt_sentinel_failover(&st, 0);
    newm = dlt_sentinel_wait_new_master(&st, 0, 20000);
    DLT_ASSERT_INT_EQ(newm, 1);
    printf("  failover: both sentinels name node %d after %.1f s\n", newm, dlt_now() - t0);
    if (newm != 1) goto done;

    /* a new lock through the same client goes to the new master */
    DLT_ASSERT_ERR(st_mutex(&ma, after, c1, 0, NULL, NULL), 0);
    {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 15000);
        double ta = dlt_now();
        rc = dlock_mutex_timedlock(&ma, &ts);
        DLT_ASSERT_ERR(rc, 0);
        printf("  new lock after the failover: %s in %.0f ms\n", dlt_errno_label(rc), (dlt_now() - ta) * 1000);
        if (rc != 0) printf("  %s\n", dlock_last_error());
    }
    if (rc == 0) {
        DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[newm], after), 1);
        DLT_ASSERT_INT_EQ(st_fence_on(newm, after), dlock_mutex_fence(&ma));
        DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
        DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[newm], after), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&ma), 0);

    /* The hold of before: over a whole lease past the failover (renewals
     * had to go to the new master), either still held -- and then the
     * new master has it with its fence -- or reported lost. */
    for (int i = 0, bad = 0; i < 35 && bad == 0; i++) {
        unsigned long long f;
        dlt_sleep_ms(100);
        if (dlock_mutex_holds(&mh) != 1) continue;
        f = st_fence_on(newm, held);
        /* holds() said 1: the new master must have our key (looked at
         * again once, should a renewal be on its way) */
        if (f != fence && dlock_mutex_holds(&mh) == 1) {
            dlt_sleep_ms(50);
            f = dlock_mutex_holds(&mh) == 1 ? st_fence_on(newm, held) : fence;
        }
        if (f != fence) {
            fprintf(stderr, "holds() says 1, the new master's fence is %llu, ours %llu\n", f,
                    (unsigned long long)fence);
            bad = 1;
        }
        DLT_ASSERT_INT_EQ(f, fence);
    }
    h = dlock_mutex_holds(&mh);
    if (h == 1) {
        DLT_ASSERT_INT_EQ(st_fence_on(newm, held), fence);
        DLT_ASSERT_INT_EQ(__atomic_load_n(&tls_lost, __ATOMIC_SEQ_CST), 0);
        rc = dlock_mutex_unlock(&mh);
        DLT_ASSERT_ERR(rc, 0);
        DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[newm], held), 0);
    } else {
        /* told: the handler ran (or runs now, at the unlock), unlock is EPERM */
        rc = dlock_mutex_unlock(&mh);
        DLT_ASSERT_ERR(rc, EPERM);
        for (int i = 0; i < 50 && __atomic_load_n(&tls_lost, __ATOMIC_SEQ_CST) == 0; i++) dlt_sleep_ms(20);
        DLT_ASSERT_INT_EQ(__atomic_load_n(&tls_lost, __ATOMIC_SEQ_CST), 1);
    }
    printf("  hold taken before the failover: %s (unlock %s, handler calls %d)\n",
           h == 1 ? "held through it, renewed on the new master" : "reported lost", dlt_errno_label(rc),
           __atomic_load_n(&tls_lost, __ATOMIC_SEQ_CST));
    /* and the lock is free on the new master for a second client now */
    o = (struct st_other){ c2, held, -1, -1, -1, -1 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, st_other_free, &o) == 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(o.trylock_free, 0);
    DLT_ASSERT_ERR(o.unlock_free, 0);
done:
    if (newm != 1) (void)dlock_mutex_unlock(&mh); /* the hold of before, on the failure path */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mh), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
out:
    dlt_sentinel_cleanup(&st);
    DLT_SHM_FREE(w, 1);
}

/* rediss+sentinel:// with the wrong CA, and redis+sentinel:// (plain) to
 * TLS-only sentinels: ENOLCK, bounded; a refused certificate is said. */
static void test_sentinel_tls_refused(void) {
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    const char *dir = NULL, *msg;
    char url[700];
    double t0, took;
    int rc;

    if (st_up_tls(0, 1, &dir) != 0) {
        CU_FAIL("TLS topology did not start");
        goto out;
    }

    /* the wrong CA: every sentinel refuses our verification, a
     * configuration error and no outage to wait out (as for rediss://,
     * test_tls_refusal_not_retried): ENOLCK at once, not after the
     * client's unreachable bound (6 s) */
    snprintf(url, sizeof url, "%s?cacert=%s/ca2.crt", st.url, dir);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 6000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, "tlssent/refused", c, 0, NULL, NULL), 0);
    t0 = dlt_now();
    rc = dlock_mutex_trylock(&m);
    took = dlt_now() - t0;
    DLT_ASSERT_ERR(rc, ENOLCK);
    msg = dlock_last_error();
    printf("\n  wrong CA, trylock: %s after %.2f s: %s\n", dlt_errno_label(rc), took, msg ? msg : "(none)");
    CU_ASSERT(msg != NULL && strstr(msg, "certificate") != NULL && strstr(msg, DLT_SENTINEL_MASTER) != NULL);
    CU_ASSERT(took < 3.0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m);
    took = dlt_now() - t0;
    DLT_ASSERT_ERR(rc, ENOLCK);
    msg = dlock_last_error();
    printf("  wrong CA, lock: %s after %.2f s: %s\n", dlt_errno_label(rc), took, msg ? msg : "(none)");
    CU_ASSERT(msg != NULL && strstr(msg, "certificate") != NULL);
    CU_ASSERT(took < 3.0); /* well under the 6 s unreachable bound */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], "tlssent/refused"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);

    /* plain redis+sentinel:// to the TLS-only sentinels: they drop the
     * connection, which is an outage as far as the client can tell:
     * ENOLCK at the unreachable bound (3 s), trylock as lock */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/%s", st.sent[0].port, DLT_SENTINEL_MASTER);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 3000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, "tlssent/refused", c, 0, NULL, NULL), 0);
    t0 = dlt_now();
    rc = dlock_mutex_trylock(&m);
    took = dlt_now() - t0;
    DLT_ASSERT_ERR(rc, ENOLCK);
    msg = dlock_last_error();
    printf("  plain URL, trylock: %s after %.2f s: %s\n", dlt_errno_label(rc), took, msg ? msg : "(none)");
    CU_ASSERT(msg != NULL && strstr(msg, DLT_SENTINEL_MASTER) != NULL);
    CU_ASSERT(took < 3.0 + 3.0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m);
    took = dlt_now() - t0;
    DLT_ASSERT_ERR(rc, ENOLCK);
    printf("  plain URL, lock: %s after %.2f s\n", dlt_errno_label(rc), took);
    CU_ASSERT(took < 3.0 + 3.0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);

    /* and the right CA through the same sentinel works */
    snprintf(url, sizeof url, "%s?cacert=%s/ca.crt", st.url, dir);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 5000), 0);
    CU_ASSERT_FATAL(c != NULL);
    DLT_ASSERT_ERR(st_mutex(&m, "tlssent/refused", c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&st.node[0], "tlssent/refused"), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
out:
    dlt_sentinel_cleanup(&st);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_sentinel_basic),
    DLT_TEST(test_sentinel_wait_replicas),
    DLT_TEST(test_sentinel_bad_input),
    DLT_TEST(test_sentinel_wait_renewals_need_replicas),
    DLT_TEST(test_sentinel_planned_failover),
    DLT_TEST(test_sentinel_failover_fresh_client),
    DLT_TEST(test_sentinel_master_killed),
    DLT_TEST(test_sentinel_unlock_in_flight),
    DLT_TEST(test_sentinel_tls),
    DLT_TEST(test_sentinel_tls_refused),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "sentinel", tests);
    dlt_sentinel_cleanup(&st);
    return rc;
}
