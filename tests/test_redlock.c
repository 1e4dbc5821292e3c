/* labels: redis; timeout: 240 */
/* test_redlock.c -- Redlock: a lock held on a quorum
 * of independent masters, redlock://h1:p1,...,h5:p5 (src/backend/redlock.c).
 *
 * Every test starts five fresh masters of its own (the suite's dlt_server
 * is not used), kills and restarts some of them, and looks at the lock's
 * keys on each master directly.  Nothing here asserts a duration: only
 * outcomes (who holds, what the masters hold, fences, error codes).
 *
 * Processes are forked before the parent makes any client, so that the
 * sanitizer build never forks next to a client's threads (fixture.h).
 */
#include "fixture_multi.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlock.h>

#define NM 5 /* masters */
#define QUORUM 3

static dlt_masters rl; /* the test's masters; rl.url: their redlock:// URL */

/* ------------------------------------------------------------ masters */

#define MASTERS_UP() DLT_MASTERS_UP(&rl, NM, 0)

static void kill_master(int i) {
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&rl.srv[i]), 0);
}

static void restart_master(int i) {
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&rl.srv[i]), 0);
}

/* The holder (owner) of the lock of name on master i into buf ("" if none). */
static void owner_on(int i, const char *name, char *buf, size_t cap) {
    char key[300];
    redisReply *r;
    dlt_lock_key(name, key, sizeof key);
    buf[0] = '\0';
    r = dlt_redis_cmd(&rl.srv[i], "EVAL_RO %s 1 %s owner", DLT_LOCK_FIELD_LUA, key);
    if (r != NULL && r->type == REDIS_REPLY_STRING) snprintf(buf, cap, "%s", r->str);
    if (r != NULL) freeReplyObject(r);
}

/* The fence key of name on master i, as a number (0: none or no answer). */
static unsigned long long fence_key_on(int i, const char *name) {
    char key[320];
    redisReply *r;
    unsigned long long v = 0;
    dlt_lock_key(name, key, sizeof key);
    strcat(key, ":fence");
    r = dlt_redis_cmd(&rl.srv[i], "GET %s", key);
    if (r != NULL && r->type == REDIS_REPLY_STRING) v = strtoull(r->str, NULL, 10);
    if (r != NULL) freeReplyObject(r);
    return v;
}

/* How many of the first n masters have name's fence key at least f. */
static int floor_count(int n, const char *name, unsigned long long f) {
    int i, k = 0;
    for (i = 0; i < n; i++) k += fence_key_on(i, name) >= f;
    return k;
}

static int set_fence_key(int i, const char *name, unsigned long long fence) {
    char key[320], val[32];
    redisReply *r;
    int ok;
    dlt_lock_key(name, key, sizeof key);
    strcat(key, ":fence");
    snprintf(val, sizeof val, "%llu", fence);
    r = dlt_redis_cmd(&rl.srv[i], "SET %s %s PX 3600000", key, val);
    ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r != NULL) freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Writes a hold of name by token on master i, as another client would
 * have: HSET owner token fence 1, leased ms. */
static int plant_hold(int i, const char *name, const char *token, int ms) {
    char key[300];
    redisReply *r;
    int ok;
    dlt_lock_key(name, key, sizeof key);
    r = dlt_redis_cmd(&rl.srv[i], "HSET %s owner %s fence 1", key, token);
    ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (r != NULL) freeReplyObject(r);
    r = dlt_redis_cmd(&rl.srv[i], "PEXPIRE %s %d", key, ms);
    ok = ok && r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r != NULL) freeReplyObject(r);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------ objects */

static int client_make(dlock_client_t **cl, unsigned unreachable_ms) {
    return dlt_client_make(cl, rl.url, unreachable_ms);
}

/* A mutex on cl: lease_ms (0: default), caching, lost handler (or NULL). */
static int mutex_make(dlock_mutex_t *m, const char *name, dlock_client_t *cl, unsigned lease_ms, int caching,
                      dlock_lost_fn lost, void *lost_arg) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (rc == 0) rc = dlock_mutexattr_setclient(&a, cl);
    if (rc == 0 && lease_ms) rc = dlock_mutexattr_setlease(&a, lease_ms);
    if (rc == 0 && caching) rc = dlock_mutexattr_setcaching(&a, 1);
    if (rc == 0 && lost) rc = dlock_mutexattr_setlostcallback(&a, lost, lost_arg);
    if (rc == 0) rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static int rwlock_make(dlock_rwlock_t *rw, const char *name, dlock_client_t *cl) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    rc = dlock_mutexattr_setclient(&a, cl);
    if (rc == 0) rc = dlock_rwlock_init(rw, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static int timedlock_ms(dlock_mutex_t *m, long ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    return dlock_mutex_timedlock(m, &ts);
}

/* ------------------------------------------- contention across processes */

#define NPROC 3
#define NACQ_MAX 40

struct contend {
    const char *name;
    int nacq;
    unsigned unreachable_ms;
    int caching;
    int *in;                   /* shm: holders in the critical section */
    int *violations;           /* shm */
    int *total;                /* shm: acquisitions, in order */
    unsigned long long *fence; /* shm: fence of acquisition k (NPROC * NACQ_MAX) */
};

static int contend_proc(void *p) {
    struct contend *a = p;
    dlock_client_t *cl;
    dlock_mutex_t m;
    int i;
    DLT_CK(client_make(&cl, a->unreachable_ms), 0);
    DLT_CK(mutex_make(&m, a->name, cl, 3000, a->caching, NULL, NULL), 0);
    for (i = 0; i < a->nacq; i++) {
        int k;
        DLT_CK(timedlock_ms(&m, 30000), 0);
        if (dlt_flag_add(a->in, 1) != 1) dlt_flag_add(a->violations, 1);
        k = dlt_flag_add(a->total, 1) - 1;
        if (k >= 0 && k < NPROC * NACQ_MAX) a->fence[k] = dlock_mutex_fence(&m);
        dlt_sleep_ms(2);
        dlt_flag_add(a->in, -1);
        DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

/* NPROC processes x nacq acquisitions of name: no overlap, exact total,
 * fences strictly increasing in the order of the acquisitions. */
static void run_contention(const char *name, int nacq, int caching) {
    int *flags = DLT_SHM_NEW(int, 3);
    unsigned long long *fences = DLT_SHM_NEW(unsigned long long, NPROC * NACQ_MAX);
    struct contend a = { name, nacq, 3000, caching, &flags[0], &flags[1], &flags[2], fences };
    pid_t pids[NPROC];
    int i, total, bad = 0;
    for (i = 0; i < NPROC; i++) pids[i] = dlt_spawn(contend_proc, &a);
    for (i = 0; i < NPROC; i++) DLT_ASSERT_INT_EQ(pids[i] > 0 ? dlt_wait(pids[i], 90000) : -1, 0);
    total = dlt_flag_get(&flags[2]);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&flags[1]), 0);
    DLT_ASSERT_INT_EQ(total, NPROC * nacq);
    if (total > NPROC * NACQ_MAX) total = NPROC * NACQ_MAX;
    for (i = 0; i < total; i++) {
        if (fences[i] == 0 || (i > 0 && fences[i] <= fences[i - 1])) {
            if (bad++ < 5)
                printf("  %s: acquisition %d has fence %llu after %llu\n", name, i, fences[i],
                       i > 0 ? fences[i - 1] : 0ULL);
        }
    }
    DLT_ASSERT_INT_EQ(bad, 0);
    printf("  %s: %d acquisitions by %d processes, fences %llu .. %llu\n", name, total, NPROC,
           total ? fences[0] : 0ULL, total ? fences[total - 1] : 0ULL);
    DLT_SHM_FREE(flags, 3);
    DLT_SHM_FREE(fences, NPROC * NACQ_MAX);
}

/* ------------------------------------------------------------- 1. basic */

struct waiter_arg {
    dlock_mutex_t *m;
    int rc;
    uint64_t fence;
};

static void *waiter_thread(void *p) {
    struct waiter_arg *w = p;
    w->rc = timedlock_ms(w->m, 15000);
    if (w->rc == 0) {
        w->fence = dlock_mutex_fence(w->m);
        if (dlock_mutex_unlock(w->m) != 0) w->rc = -1;
    }
    return NULL;
}

/* While held: the key on >= QUORUM masters (all five here), one owner
 * token; after unlock on none; another client gets EBUSY / ETIMEDOUT and
 * a waiter wakes on the release; dlock_break reaches every master. */
static void test_redlock_basic(void) {
    const char *name = "rl/basic";
    dlock_client_t *c1 = NULL, *c2 = NULL;
    dlock_mutex_t m1, m2;
    char tok[NM][128];
    int i, same = 0, first = -1, was_held = -1;
    uint64_t f1, f2, f3;
    struct waiter_arg w = { &m2, -1, 0 };
    pthread_t th;

    MASTERS_UP();
    DLT_ASSERT_ERR(client_make(&c1, 3000), 0);
    DLT_ASSERT_ERR(client_make(&c2, 3000), 0);
    DLT_ASSERT_ERR(mutex_make(&m1, name, c1, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&m2, name, c2, 0, 0, NULL, NULL), 0);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m1), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m1), 1);
    f1 = dlock_mutex_fence(&m1);
    CU_ASSERT_TRUE(f1 > 0);
    for (i = 0; i < NM; i++) {
        owner_on(i, name, tok[i], sizeof tok[i]);
        if (tok[i][0] && first < 0) first = i;
    }
    for (i = 0; first >= 0 && i < NM; i++)
        if (tok[i][0] && strcmp(tok[i], tok[first]) == 0) same++;
    for (i = 0; first >= 0 && i < NM; i++) /* every owner found is the one token */
        if (tok[i][0]) CU_ASSERT_STRING_EQUAL(tok[i], tok[first]);
    printf("  held on %d of %d masters, owner %s\n", same, NM, first >= 0 ? tok[first] : "(none)");
    CU_ASSERT_TRUE(same >= QUORUM);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), same);

    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), EBUSY);
    DLT_ASSERT_ERR(timedlock_ms(&m2, 300), ETIMEDOUT);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m1), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);

    /* trylock and timedlock by the first, then the second's trylock. */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m1), 0);
    f2 = dlock_mutex_fence(&m1);
    CU_ASSERT_TRUE(f2 > f1);
    CU_ASSERT_TRUE(dlt_masters_lock_count(&rl, name) >= QUORUM);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    DLT_ASSERT_ERR(timedlock_ms(&m1, 5000), 0);
    f3 = dlock_mutex_fence(&m1);
    CU_ASSERT_TRUE(f3 > f2);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&m2) > f3);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);

    /* A waiter (the other client) wakes on the release and gets it. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m1), 0);
    f1 = dlock_mutex_fence(&m1);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, waiter_thread, &w) == 0);
    dlt_sleep_ms(300);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc, 0);
    CU_ASSERT_TRUE(w.fence > f1);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);

    /* dlock_break from the other client: gone from every master, and the
     * holder's unlock says it no longer held it. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m1), 0);
    CU_ASSERT_TRUE(dlt_masters_lock_count(&rl, name) >= QUORUM);
    DLT_ASSERT_ERR(dlock_break(c2, name, DLOCK_BREAK_RESET, &was_held), 0);
    DLT_ASSERT_INT_EQ(was_held, 1);
    /* A master that still owed c2 an answer (the waiter's release, read
     * late) gets the break behind it, not awaited: it runs there within a
     * moment, long before the 10 s lease could end the key. */
    for (i = 0; i < 50 && dlt_masters_lock_count(&rl, name) != 0; i++) dlt_sleep_ms(20);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
    dlt_masters_cleanup(&rl);
}

/* ---------------------------------------------------------- 2. contention */

static void test_redlock_contention_across_processes(void) {
    MASTERS_UP();
    run_contention("rl/contend", 25, 0);
    dlt_masters_cleanup(&rl);
}

/* ------------------------------------------------------ 3. masters down */

static void test_redlock_minority_down_works_majority_down_fails(void) {
    const char *name = "rl/down";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    const char *msg;
    int i, rc;

    MASTERS_UP();
    /* Two of five down, the first two (the subscriber's first choice). */
    kill_master(0);
    kill_master(1);
    run_contention("rl/down-contend", 10, 0); /* forks first: no client yet */

    DLT_ASSERT_ERR(client_make(&cl, 3000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 3);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);

    /* Three of five down: no quorum, ENOLCK by the call's bound. */
    kill_master(2);
    DLT_ASSERT_ERR(client_make(&cl, 1000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 0, 0, NULL, NULL), 0);
    rc = dlock_mutex_lock(&m);
    msg = dlock_last_error();
    DLT_ASSERT_ERR(rc, ENOLCK);
    printf("  3 of 5 down, lock: %s\n", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "2 of 5 masters granted the lock, 3 did not answer; a quorum is 3"));
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0); /* the two grants were given back */
    rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_PTR_NOT_NULL(strstr(dlock_last_error(), "a quorum is 3"));
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);
    {
        /* A deadline before the unreachable bound: ETIMEDOUT at it, as on
         * every deployment (the rounds run to the deadline). */
        double t0 = dlt_now(), el;
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 500);
        rc = dlock_mutex_timedlock(&m, &ts);
        el = dlt_now() - t0;
        printf("  3 of 5 down, timedlock(0.5 s): %s after %.3f s\n", dlt_errno_label(rc), el);
        DLT_ASSERT_ERR(rc, ETIMEDOUT);
        CU_ASSERT_TRUE(el >= 0.495 && el <= 0.550);
        if (rc == 0) (void)dlock_mutex_unlock(&m);
    }

    /* Back up: locks work again, on the same client and mutex. */
    for (i = 0; i < 3; i++) restart_master(i);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_TRUE(dlt_masters_lock_count(&rl, name) >= QUORUM);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_masters_cleanup(&rl);
}

/* ------------------------------------------------ 4. a hold through kills */

struct rival {
    const char *name;
    int *go, *stop;    /* shm, set by the test */
    int *believes;     /* shm: the test's holder thinks it holds the lock */
    int *got, *overlap, *busy, *nolck, *other; /* shm counts */
};

/* Tries the lock every 20 ms until told to stop (at most 60 s). */
static int rival_proc(void *p) {
    struct rival *a = p;
    dlock_client_t *cl;
    dlock_mutex_t m;
    double t0;
    if (!dlt_flag_wait(a->go, 1, 30000)) return 9;
    DLT_CK(client_make(&cl, 1000), 0);
    DLT_CK(mutex_make(&m, a->name, cl, 1000, 0, NULL, NULL), 0);
    t0 = dlt_now();
    while (!dlt_flag_get(a->stop) && dlt_now() - t0 < 60) {
        int rc = dlock_mutex_trylock(&m);
        if (rc == 0) {
            dlt_flag_add(a->got, 1);
            if (dlt_flag_get(a->believes)) dlt_flag_add(a->overlap, 1);
            (void)dlock_mutex_unlock(&m);
        } else if (rc == EBUSY) {
            dlt_flag_add(a->busy, 1);
        } else if (rc == ENOLCK) {
            dlt_flag_add(a->nolck, 1);
        } else {
            fprintf(stderr, "rival: trylock %d: %s\n", rc, dlock_last_error());
            dlt_flag_add(a->other, 1);
        }
        dlt_sleep_ms(20);
    }
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

static int lost_calls;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    dlt_flag_add(&lost_calls, 1);
}

static void test_redlock_hold_survives_one_kill_lost_at_three(void) {
    const char *name = "rl/survive";
    int *sh = DLT_SHM_NEW(int, 16);
    struct rival r = { name, &sh[0], &sh[1], &sh[2], &sh[3], &sh[4], &sh[5], &sh[6], &sh[7] };
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    pid_t pid;
    double t0;
    int i, not_held = 0, checks = 0, lost = 0;

    MASTERS_UP();
    dlt_flag_set(&lost_calls, 0);
    pid = dlt_spawn(rival_proc, &r); /* before any client of ours */
    CU_ASSERT_TRUE(pid > 0);

    DLT_ASSERT_ERR(client_make(&cl, 2000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 1000, 0, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_flag_set(r.believes, 1);
    dlt_flag_set(r.go, 1);
    dlt_sleep_ms(300);

    /* One master down: the other four renew; held for > 3 leases. */
    kill_master(0);
    t0 = dlt_now();
    while (dlt_now() - t0 < 3.6) {
        checks++;
        if (dlock_mutex_holds(&m) != 1) not_held++;
        dlt_sleep_ms(100);
    }
    printf("  one master down: held at %d of %d checks over 3.6 leases\n", checks - not_held, checks);
    DLT_ASSERT_INT_EQ(not_held, 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
    CU_ASSERT_TRUE(dlt_masters_lock_count(&rl, name) >= QUORUM);
    DLT_ASSERT_INT_EQ(dlt_flag_get(r.got), 0);

    /* Two more down: only two can renew; the hold is lost. */
    kill_master(1);
    kill_master(2);
    t0 = dlt_now();
    while (dlt_now() - t0 < 10 && dlock_mutex_holds(&m) == 1) dlt_sleep_ms(10);
    lost = dlock_mutex_holds(&m) == 0;
    dlt_flag_set(r.believes, 0);
    printf("  three masters down: hold %s after %.2f s\n", lost ? "lost" : "still counted", dlt_now() - t0);
    CU_ASSERT_TRUE(lost);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&lost_calls, 1, 5000), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 1);

    /* Let the rival try past the two live masters' leases too. */
    dlt_sleep_ms(1500);
    dlt_flag_set(r.stop, 1);
    DLT_ASSERT_INT_EQ(pid > 0 ? dlt_wait(pid, 20000) : -1, 0);
    printf("  rival: %d got, %d busy, %d no quorum, %d other\n", dlt_flag_get(r.got), dlt_flag_get(r.busy),
           dlt_flag_get(r.nolck), dlt_flag_get(r.other));
    DLT_ASSERT_INT_EQ(dlt_flag_get(r.got), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(r.overlap), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(r.other), 0);
    CU_ASSERT_TRUE(dlt_flag_get(r.busy) > 0);

    /* Masters back: the same mutex locks again. */
    for (i = 0; i < 3; i++) restart_master(i);
    DLT_ASSERT_ERR(timedlock_ms(&m, 10000), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_SHM_FREE(sh, 16);
    dlt_masters_cleanup(&rl);
}

/* --------------------------------------------------------------- 5. fences */

/* A master's fence ahead of the others' clocks (in ns: the year 2223),
 * within a signed 64-bit integer. */
#define FENCE_AHEAD 8000000000000000000ULL

static uint64_t hold_fence(dlock_mutex_t *m) {
    uint64_t f = 0;
    int rc = timedlock_ms(m, 10000);
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) {
        f = dlock_mutex_fence(m);
        DLT_ASSERT_ERR(dlock_mutex_unlock(m), 0);
    }
    return f;
}

static void test_redlock_fences_increase_across_quorums(void) {
    const char *a = "rl/fence-quorums", *b = "rl/fence-lag";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    uint64_t f1, f2, f3, g1, g2, g3;
    int k;

    MASTERS_UP();
    DLT_ASSERT_ERR(client_make(&cl, 3000), 0);

    /* Quorum {0,1,2}, master 0 ahead; then quorum {2,3,4} (3, 4 restarted
     * empty, 0 and 1 down): only master 2 carries the floor across. */
    DLT_ASSERT_ERR(mutex_make(&m, a, cl, 0, 0, NULL, NULL), 0);
    kill_master(3);
    kill_master(4);
    DLT_ASSERT_INT_EQ(set_fence_key(0, a, FENCE_AHEAD), 0);
    f1 = hold_fence(&m);
    CU_ASSERT_TRUE(f1 > FENCE_AHEAD);
    /* The floor: written back before the call returns to a quorum of the
     * masters (a call decides once a quorum has answered; a master that
     * had just come back may be skipped); the next holds' fences are
     * above it whichever quorum grants them (below). */
    k = floor_count(3, a, f1);
    CU_ASSERT_TRUE(k >= 2);
    restart_master(3);
    restart_master(4);
    kill_master(0);
    kill_master(1);
    f2 = hold_fence(&m);
    f3 = hold_fence(&m);
    printf("  quorum {0,1,2}: %llu; quorum {2,3,4}: %llu, %llu\n", (unsigned long long)f1,
           (unsigned long long)f2, (unsigned long long)f3);
    CU_ASSERT_TRUE(f2 > f1);
    CU_ASSERT_TRUE(f3 > f2);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* All five; master 4 ahead; its fence raises the floor everywhere, and
     * holds without it (killed) stay above. */
    restart_master(0);
    restart_master(1);
    DLT_ASSERT_ERR(mutex_make(&m, b, cl, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_INT_EQ(set_fence_key(4, b, FENCE_AHEAD + 1000000), 0);
    g1 = hold_fence(&m);
    CU_ASSERT_TRUE(g1 > FENCE_AHEAD + 1000000);
    k = floor_count(NM, b, g1);
    if (k < NM) printf("  the floor on %d of %d masters at once\n", k, NM);
    CU_ASSERT_TRUE(k >= NM / 2 + 1);
    kill_master(4);
    g2 = hold_fence(&m);
    g3 = hold_fence(&m);
    printf("  master 4 ahead: %llu; without it: %llu, %llu\n", (unsigned long long)g1, (unsigned long long)g2,
           (unsigned long long)g3);
    CU_ASSERT_TRUE(g2 > g1);
    CU_ASSERT_TRUE(g3 > g2);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_masters_cleanup(&rl);
}

/* ---------------------------------------------------------------- 6. split */

static void test_redlock_split_gives_grants_back(void) {
    const char *name = "rl/split", *minor = "rl/minority";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    char tok[128], mine[128];
    int i;

    MASTERS_UP();
    /* Held by another token on masters 0, 1, 2. */
    for (i = 0; i < 3; i++) DLT_ASSERT_INT_EQ(plant_hold(i, name, "other-token-X", 30000), 0);
    DLT_ASSERT_ERR(client_make(&cl, 3000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 3); /* nothing left on 3 and 4 */
    for (i = 0; i < 3; i++) {
        owner_on(i, name, tok, sizeof tok);
        CU_ASSERT_STRING_EQUAL(tok, "other-token-X");
    }
    DLT_ASSERT_ERR(timedlock_ms(&m, 400), ETIMEDOUT);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 3);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* Held by another token on masters 0, 1 only: 2, 3, 4 are a quorum. */
    for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(plant_hold(i, minor, "other-token-Y", 30000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, minor, cl, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, minor), NM);
    owner_on(2, minor, mine, sizeof mine);
    CU_ASSERT_TRUE(mine[0] != '\0' && strcmp(mine, "other-token-Y") != 0);
    for (i = 0; i < NM; i++) {
        owner_on(i, minor, tok, sizeof tok);
        CU_ASSERT_STRING_EQUAL(tok, i < 2 ? "other-token-Y" : mine);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, minor), 2); /* the other's two untouched */
    for (i = 0; i < 2; i++) {
        owner_on(i, minor, tok, sizeof tok);
        CU_ASSERT_STRING_EQUAL(tok, "other-token-Y");
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_masters_cleanup(&rl);
}

/* ------------------------------------------------------------ 7. bad URLs */

#define SECRET "rl-s3cret-pw"

static void expect_einval(const char *url) {
    dlock_client_t *cl = NULL;
    int rc = dlt_client_make(&cl, url, 1000);
    DLT_ASSERT_ERR(rc, EINVAL);
    printf("  %s: %s\n", url, dlock_last_error());
    CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), SECRET));
    if (rc == 0) dlock_client_destroy(cl);
}

static int acl_user_on(int i) {
    redisReply *r = dlt_redis_cmd(&rl.srv[i], "ACL SETUSER rluser on >%s ~* &* +@all", SECRET);
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r != NULL) freeReplyObject(r);
    return ok ? 0 : -1;
}

static void test_redlock_bad_urls_and_passwords(void) {
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    char url[600];
    int i, rc;

    MASTERS_UP();
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d", rl.srv[0].port);
    expect_einval(url);
    snprintf(url, sizeof url, "redlock://rluser:" SECRET "@127.0.0.1:%d", rl.srv[0].port);
    expect_einval(url);
    snprintf(url, sizeof url, "redlock://rluser:" SECRET "@127.0.0.1:%d/0", rl.srv[0].port);
    expect_einval(url);
    expect_einval("redlock://");
    snprintf(url, sizeof url, "redlock://rluser:" SECRET "@127.0.0.1:%d,127.0.0.1:99999", rl.srv[0].port);
    expect_einval(url);
    snprintf(url, sizeof url, "redlock://rluser:" SECRET "@127.0.0.1:%d,127.0.0.1:%d/abc", rl.srv[0].port,
             rl.srv[1].port);
    expect_einval(url);

    /* A user the masters do not know: refused, without the password. */
    snprintf(url, sizeof url, "redlock://rluser:" SECRET "@%s", rl.url + strlen("redlock://"));
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 1000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, "rl/auth", cl, 0, 0, NULL, NULL), 0);
    rc = dlock_mutex_trylock(&m);
    CU_ASSERT_TRUE(rc != 0);
    printf("  unknown user: %s (%s)\n", dlt_errno_label(rc), dlock_last_error());
    CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), SECRET));
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, "rl/auth"), 0);

    /* Known on three masters: a quorum, and a hold there. */
    for (i = 0; i < 3; i++) DLT_ASSERT_INT_EQ(acl_user_on(i), 0);
    rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, "rl/auth"), 3);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, "rl/auth"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_masters_cleanup(&rl);
}

/* -------------------------------------------------- 8. rwlocks and caching */

static void test_redlock_rwlock_and_caching(void) {
    const char *rwname = "rl/rw", *cname = "rl/cache";
    dlock_client_t *c1 = NULL, *c2 = NULL, *c3 = NULL;
    dlock_rwlock_t r1, r2, r3;
    dlock_mutex_t mc, mo;
    uint64_t f, fl = 0;
    int i;

    MASTERS_UP();
    DLT_ASSERT_ERR(client_make(&c1, 3000), 0);
    DLT_ASSERT_ERR(client_make(&c2, 3000), 0);
    DLT_ASSERT_ERR(client_make(&c3, 3000), 0);
    DLT_ASSERT_ERR(rwlock_make(&r1, rwname, c1), 0);
    DLT_ASSERT_ERR(rwlock_make(&r2, rwname, c2), 0);
    DLT_ASSERT_ERR(rwlock_make(&r3, rwname, c3), 0);

    /* Two readers at once; a writer refused; then the writer alone. */
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&r1), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&r2), 0);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&r1), 1);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&r2), 1);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&r3), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&r1), 0);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&r3), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&r2), 0);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&r3), 0);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&r3), 2);
    CU_ASSERT_TRUE(dlt_masters_lock_count(&rl, rwname) >= QUORUM);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&r1), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&r3), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&r1), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&r1), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&r1), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&r2), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&r3), 0);

    /* A caching mutex: relocked locally, fences on from the hold's; a
     * plain mutex of another client gets it, with a greater fence. */
    DLT_ASSERT_ERR(mutex_make(&mc, cname, c1, 0, 1, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&mo, cname, c2, 0, 0, NULL, NULL), 0);
    for (i = 0; i < 5; i++) {
        DLT_ASSERT_ERR(dlock_mutex_lock(&mc), 0);
        f = dlock_mutex_fence(&mc);
        CU_ASSERT_TRUE(f > fl);
        fl = f;
        DLT_ASSERT_ERR(dlock_mutex_unlock(&mc), 0);
    }
    DLT_ASSERT_ERR(timedlock_ms(&mo, 10000), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&mo) > fl);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mo), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mc), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mo), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c3), 0);

    /* Caching mutexes contended across processes. */
    run_contention("rl/cache-contend", 15, 1);
    dlt_masters_cleanup(&rl);
}


/* ------------------------------------- 9. caching holds and the fence floor */

/* The scripts the masters have run (EVALSHA, EVAL), -1 on no answer. */
static long long masters_evals(void) {
    long long n = 0, a, b;
    int i;
    for (i = 0; i < rl.n; i++) {
        a = dlt_redis_cmdstat(&rl.srv[i], "evalsha");
        b = dlt_redis_cmdstat(&rl.srv[i], "eval");
        if (a < 0 || b < 0) return -1;
        n += a + b;
    }
    return n;
}

/* A caching hold's local holds take fences after the hold's own, up to
 * DLOCK__FENCE_BLOCK (2^30) on; the floor written to the masters must
 * cover them, or a later hold by a quorum without the master that issued
 * the largest fence gets a fence a local hold already had. */
static void test_redlock_caching_fences_above_local_holds(void) {
    const char *name = "rl/cache-floor";
    dlock_client_t *c1 = NULL, *c2 = NULL;
    dlock_mutex_t mc, mo;
    uint64_t f, fl = 0, fo;
    int i, rc, local;

    MASTERS_UP();
    DLT_ASSERT_INT_EQ(set_fence_key(0, name, FENCE_AHEAD), 0);
    DLT_ASSERT_ERR(client_make(&c1, 3000), 0);
    DLT_ASSERT_ERR(client_make(&c2, 3000), 0);
    DLT_ASSERT_ERR(mutex_make(&mc, name, c1, 0, 1, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&mo, name, c2, 0, 0, NULL, NULL), 0);
    /* Until two holds in a row are local (no script on any master):
     * caching starts once the client's subscriber listens. */
    for (i = 0, local = 0; i < 200 && local < 2; i++) {
        long long e0 = masters_evals();
        DLT_ASSERT_ERR(dlock_mutex_lock(&mc), 0);
        f = dlock_mutex_fence(&mc);
        CU_ASSERT_TRUE(f > fl);
        fl = f;
        DLT_ASSERT_ERR(dlock_mutex_unlock(&mc), 0);
        local = e0 >= 0 && masters_evals() == e0 ? local + 1 : 0;
        if (local < 2) dlt_sleep_ms(10);
    }
    DLT_ASSERT_INT_EQ(local, 2);
    kill_master(0); /* the master whose fence was the hold's */
    rc = timedlock_ms(&mo, 10000);
    DLT_ASSERT_ERR(rc, 0);
    fo = dlock_mutex_fence(&mo);
    printf("  caching holds up to fence %llu; the next holder (master 0 down): %llu\n", (unsigned long long)fl,
           (unsigned long long)fo);
    CU_ASSERT_TRUE(fo > fl);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&mo), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mc), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mo), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
    dlt_masters_cleanup(&rl);
}


/* ------------------------------------------------ 10. one master hung */

/* One master of five stopped (SIGSTOP: it accepts connections, never
 * answers).  Four answer, a quorum: a lock with a 3 s lease must be
 * granted, and a lock call that returns 0 must leave a valid hold (never
 * one whose lease already ran out while other masters were waited for). */
static void test_redlock_one_hung_master(void) {
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    double t0;
    int rc, holds;

    MASTERS_UP();
    dlt_flag_set(&lost_calls, 0);
    DLT_ASSERT_ERR(client_make(&cl, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, "rl/hung", cl, 3000, 0, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* connections made */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT_FATAL(rl.srv[0].pid > 0);
    kill(rl.srv[0].pid, SIGSTOP);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m);
    holds = dlock_mutex_holds(&m);
    printf("  master 0 hung: lock %s after %.2f s, holds %d, lost handler ran %d times\n", dlt_errno_label(rc),
           dlt_now() - t0, holds, dlt_flag_get(&lost_calls));
    if (rc != 0) printf("  %s\n", dlock_last_error());
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) {
        DLT_ASSERT_INT_EQ(holds, 1);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
        (void)dlock_mutex_unlock(&m);
    }
    kill(rl.srv[0].pid, SIGCONT);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_masters_cleanup(&rl);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_redlock_basic),
    DLT_TEST(test_redlock_contention_across_processes),
    DLT_TEST(test_redlock_minority_down_works_majority_down_fails),
    DLT_TEST(test_redlock_hold_survives_one_kill_lost_at_three),
    DLT_TEST(test_redlock_fences_increase_across_quorums),
    DLT_TEST(test_redlock_split_gives_grants_back),
    DLT_TEST(test_redlock_bad_urls_and_passwords),
    DLT_TEST(test_redlock_rwlock_and_caching),
    DLT_TEST(test_redlock_caching_fences_above_local_holds),
    DLT_TEST(test_redlock_one_hung_master),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "redlock", tests);
    dlt_masters_cleanup(&rl);
    return rc;
}
