/* test_sem.c -- named counting semaphores across hosts: dlock_sem_*.
 * labels: redis; timeout: 300
 *
 * Against SPEC section 2 (Semaphores) and the
 * dlock_sem_* section of dlock.h: init creates or joins (leaving the value
 * alone); trywait EAGAIN; wait sleeps until a post from any thread of any
 * process hands it a unit, one waiter per post, FIFO among waiters;
 * timedwait / clockwait ETIMEDOUT with the mutex's deadline semantics;
 * EOVERFLOW past DLOCK_SEM_VALUE_MAX, EINVAL for bad arguments; getvalue;
 * destroy EBUSY while a thread waits; a run of processes that never lets
 * more than K in; one case on a Redis Cluster and one through Sentinel;
 * ENOTSUP on Redlock; ENOLCK when no server answers; an answer lost and
 * the op asked again does it once; a waiter told of its unit by a push
 * to its grant list, killed before it took it: the unit goes on when
 * the grant lapses.
 *
 * Workers report through their result (a child: its exit status), with
 * DLT_CK; what they share travels through MAP_SHARED memory.  Where a
 * test starts processes, it forks them before any thread of its own.
 */
#define DLT_CK_MOD 120
#include "fixture.h"
#include "fixture_multi.h"
#include "proxy.h"

#include "backend/backend.h" /* dlock__script_body: sem.lua itself, for test_done_rules */

#include <dlock.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

/* ========================================================================
 * Helpers
 * ====================================================================== */

/* ZCARD of a semaphore's queue of waiters, "dlock:{name}:semq" (an
 * implementation detail: the tests use it to know a waiter is queued). */
static long long sm_queued(const char *name) {
    char k[700];
    int n = snprintf(k, sizeof k, "dlock:{%s}:semq", name);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %b", k, (size_t)n));
}

/* Polls until name has `want` waiters queued on the server: 1, or 0 after
 * timeout_ms. */
static int sm_wait_queued(const char *name, long long want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (dlt_now() < end) {
        if (sm_queued(name) == want) return 1;
        dlt_sleep_ms(5);
    }
    return 0;
}

static int sm_value(dlock_sem_t *s) {
    int v = -12345;
    int rc = dlock_sem_getvalue(s, &v);
    return rc == 0 ? v : -rc - 100000;
}

static int sm_timedwait_ms(dlock_sem_t *s, long ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    return dlock_sem_timedwait(s, &ts);
}

static int sm_clockwait_ms(dlock_sem_t *s, long ms) {
    struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, ms);
    return dlock_sem_clockwait(s, CLOCK_MONOTONIC, &ts);
}

/* ========================================================================
 * Init, join, trywait, getvalue, arguments
 * ====================================================================== */

static void test_init_join(void) {
    dlock_sem_t a, b;
    DLT_ASSERT_ERR(dlock_sem_init(&a, "s/join", 2, NULL), 0);
    DLT_ASSERT_INT_EQ(sm_value(&a), 2);
    /* A second init of the name joins: the value stays 2, not 5. */
    DLT_ASSERT_ERR(dlock_sem_init(&b, "s/join", 5, NULL), 0);
    DLT_ASSERT_INT_EQ(sm_value(&b), 2);
    DLT_ASSERT_ERR(dlock_sem_trywait(&b), 0);
    DLT_ASSERT_INT_EQ(sm_value(&a), 1);
    DLT_ASSERT_ERR(dlock_sem_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&b), 0);
    /* Destroy frees local resources only: the semaphore stays. */
    DLT_ASSERT_ERR(dlock_sem_init(&a, "s/join", 7, NULL), 0);
    DLT_ASSERT_INT_EQ(sm_value(&a), 1);
    DLT_ASSERT_ERR(dlock_sem_destroy(&a), 0);
    /* Value 0 makes a semaphore too. */
    DLT_ASSERT_ERR(dlock_sem_init(&a, "s/zero", 0, NULL), 0);
    DLT_ASSERT_INT_EQ(sm_value(&a), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&a), EAGAIN);
    DLT_ASSERT_ERR(dlock_sem_destroy(&a), 0);
}

static void test_trywait_post(void) {
    dlock_sem_t s;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/try", 1, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), EAGAIN);
    DLT_ASSERT_INT_EQ(sm_value(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), 2);
    DLT_ASSERT_ERR(dlock_sem_wait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), EAGAIN);
    /* trywait never queues. */
    DLT_ASSERT_INT_EQ(sm_queued("s/try"), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

static void test_bad_args(void) {
    dlock_sem_t s, z;
    dlock_semattr_t a;
    struct timespec bad = dlt_abs_in(CLOCK_REALTIME, 1000);
    int v;
    memset(&z, 0, sizeof z);
    DLT_ASSERT_ERR(dlock_sem_init(NULL, "s/bad", 1, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "", 1, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_init(&s, NULL, 1, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/bad", (unsigned)DLOCK_SEM_VALUE_MAX + 1u, NULL), EINVAL);
    DLT_ASSERT_INT_EQ(DLOCK_SEM_VALUE_MAX, SEM_VALUE_MAX);
    memset(&a, 0, sizeof a);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/bad", 1, &a), EINVAL); /* attr not initialised */
    DLT_ASSERT_ERR(dlock_semattr_setundo(&a, 0), EINVAL);
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setundo(&a, 0), 0);
    DLT_ASSERT_ERR(dlock_semattr_setundo(&a, 1), 0); /* undo: test_sem_undo */
    DLT_ASSERT_ERR(dlock_semattr_setundo(&a, 2), EINVAL);
    DLT_ASSERT_ERR(dlock_semattr_setundo(&a, 0), 0);
    DLT_ASSERT_ERR(dlock_semattr_setlease(&a, 1), EINVAL);
    DLT_ASSERT_ERR(dlock_semattr_setlease(&a, 5000), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/bad", 1, &a), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), EINVAL);
    /* Calls on objects never initialised, or destroyed: EINVAL. */
    DLT_ASSERT_ERR(dlock_sem_wait(&z), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_trywait(NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_post(&z), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_getvalue(&z, &v), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_getvalue(&s, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_destroy(&z), EINVAL);
    /* A bad tv_nsec: EINVAL only if the call would have to wait. */
    bad.tv_nsec = 1000000000L;
    DLT_ASSERT_ERR(dlock_sem_timedwait(&s, &bad), 0);      /* a unit is free */
    DLT_ASSERT_ERR(dlock_sem_timedwait(&s, &bad), EINVAL); /* none is */
    DLT_ASSERT_ERR(dlock_sem_timedwait(&s, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_clockwait(&s, CLOCK_PROCESS_CPUTIME_ID, &bad), EINVAL);
    DLT_ASSERT_INT_EQ(sm_queued("s/bad"), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), EINVAL);
}

static void test_overflow(void) {
    dlock_sem_t s;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/max", DLOCK_SEM_VALUE_MAX, NULL), 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), DLOCK_SEM_VALUE_MAX);
    DLT_ASSERT_ERR(dlock_sem_post(&s), EOVERFLOW);
    DLT_ASSERT_INT_EQ(sm_value(&s), DLOCK_SEM_VALUE_MAX);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), EOVERFLOW);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* ========================================================================
 * Timed waits
 * ====================================================================== */

static void test_timedwait(void) {
    dlock_sem_t s;
    double t0, took;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/timed", 0, NULL), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(sm_timedwait_ms(&s, 300), ETIMEDOUT);
    took = dlt_now() - t0;
    CU_ASSERT(took >= 0.29);
    CU_ASSERT(took < 10.0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(sm_clockwait_ms(&s, 300), ETIMEDOUT);
    took = dlt_now() - t0;
    CU_ASSERT(took >= 0.29);
    CU_ASSERT(took < 10.0);
    /* Withdrawn at the deadline: nobody left queued, nothing taken. */
    DLT_ASSERT_INT_EQ(sm_queued("s/timed"), 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), 0);
    /* A deadline in the past: still tries once. */
    DLT_ASSERT_ERR(sm_timedwait_ms(&s, -1000), ETIMEDOUT);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_ERR(sm_timedwait_ms(&s, -1000), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_ERR(sm_clockwait_ms(&s, -1000), 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* ========================================================================
 * Waiting for a post: threads, processes, FIFO, one per post
 * ====================================================================== */

struct waiter {
    const char *name;
    const char *query; /* NULL: the default client; else one of its own on dlt_server with this URL query */
    int kind;       /* 0 wait, 1 timedwait (30 s), 2 clockwait (30 s) */
    int *order;     /* shared: the next place in the order of wake-ups */
    int *done;      /* shared: waiters that returned */
    int place;      /* out: its place (1 first) */
    int rc;
};

static int waiter_run(void *arg) {
    struct waiter *w = arg;
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    DLT_CK(dlock_semattr_init(&a), 0);
    if (w->query != NULL) {
        char url[256];
        snprintf(url, sizeof url, "%s?%s", dlt_server.url, w->query);
        DLT_CK(dlt_client_make(&c, url, 5000), 0);
        DLT_CK(dlock_semattr_setclient(&a, c), 0);
    }
    DLT_CK(dlock_sem_init(&s, w->name, 0, &a), 0);
    w->rc = w->kind == 0 ? dlock_sem_wait(&s) : w->kind == 1 ? sm_timedwait_ms(&s, 30000) : sm_clockwait_ms(&s, 30000);
    if (w->order != NULL) w->place = dlt_flag_add(w->order, 1);
    if (w->done != NULL) dlt_flag_add(w->done, 1);
    DLT_CK(w->rc, 0);
    DLT_CK(dlock_sem_destroy(&s), 0);
    DLT_CK(dlock_semattr_destroy(&a), 0);
    if (c != NULL) DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static void test_post_wakes_thread(void) {
    dlock_sem_t s;
    struct waiter *w = DLT_SHM_NEW(struct waiter, 1);
    int *done = DLT_SHM_NEW(int, 1);
    dlt_task t;
    w->name = "s/thread";
    w->done = done;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/thread", 0, NULL), 0);
    if (dlt_task_start(&t, DLT_THREAD, waiter_run, w) != 0) return;
    CU_ASSERT(sm_wait_queued("s/thread", 1, 10000));
    dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(dlt_flag_get(done), 0); /* it waits */
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), 0); /* the unit went to the waiter */
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_SHM_FREE(w, 1);
    DLT_SHM_FREE(done, 1);
}

static void test_post_wakes_process(void) {
    dlock_sem_t s;
    struct waiter *w = DLT_SHM_NEW(struct waiter, 3);
    int *done = DLT_SHM_NEW(int, 1);
    dlt_task t[3];
    int i;
    for (i = 0; i < 3; i++) {
        w[i].name = "s/proc";
        w[i].kind = i;
        w[i].done = done;
        if (dlt_task_start(&t[i], DLT_PROC, waiter_run, &w[i]) != 0) return;
    }
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/proc", 0, NULL), 0);
    CU_ASSERT(sm_wait_queued("s/proc", 3, 10000));
    for (i = 0; i < 3; i++) DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    for (i = 0; i < 3; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(done), 3);
    DLT_ASSERT_INT_EQ(sm_value(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_SHM_FREE(w, 3);
    DLT_SHM_FREE(done, 1);
}

/* Waiters queued one after the other are served in that order, one per
 * post: after each post exactly one more waiter returns (no herd: the
 * others go on waiting), and it is the next in line.  Each post tells
 * that waiter alone: by a push to its grant list, on which it waits in
 * BLPOP (no message published), or, where the waiters' client has no
 * place for that (wait_conns=0: query), by its token published. */
#define NFIFO 5
static void fifo_run(const char *name, const char *query) {
    dlock_sem_t s;
    struct waiter *w = DLT_SHM_NEW(struct waiter, NFIFO);
    int *order = DLT_SHM_NEW(int, 1), *done = DLT_SHM_NEW(int, 1);
    dlt_task t[NFIFO];
    int i;
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 0, NULL), 0);
    for (i = 0; i < NFIFO; i++) {
        w[i].name = name;
        w[i].query = query;
        w[i].kind = i % 3;
        w[i].order = order;
        w[i].done = done;
        /* Processes, forked while no thread of ours is busy (fixture.h). */
        if (dlt_task_start(&t[i], DLT_PROC, waiter_run, &w[i]) != 0) return;
        CU_ASSERT_FATAL(sm_wait_queued(name, i + 1, 10000));
    }
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    for (i = 0; i < NFIFO; i++) {
        DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
        CU_ASSERT(dlt_flag_wait(done, i + 1, 10000));
        dlt_sleep_ms(300); /* room for a wrong second wake-up to show */
        DLT_ASSERT_INT_EQ(dlt_flag_get(done), i + 1);
        DLT_ASSERT_INT_EQ(sm_queued(name), NFIFO - 1 - i);
    }
    /* One message per post, naming one waiter (the scripts publish on the
     * channel and push to waiters' grant lists, nothing else): no
     * broadcast to every waiter. */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "publish"), query == NULL ? 0 : NFIFO);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "rpush"), query == NULL ? NFIFO : 0);
    for (i = 0; i < NFIFO; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_INT_EQ(w[i].place, i + 1); /* FIFO */
    }
    DLT_ASSERT_INT_EQ(sm_value(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_SHM_FREE(w, NFIFO);
    DLT_SHM_FREE(order, 1);
    DLT_SHM_FREE(done, 1);
}

static void test_fifo_one_per_post(void) {
    fifo_run("s/fifo", NULL);
    fifo_run("s/fifo-published", "wait_conns=0");
}

/* A waiter that times out leaves the queue: the next post goes to the one
 * behind it, not to nobody. */
/* Keys of name's waiters' grant lists, dlock:{name}:sem:g:* (an
 * implementation detail, as sm_queued's). */
static long long sm_grant_lists(const char *name) {
    char pat[700];
    snprintf(pat, sizeof pat, "dlock:{%s}:sem:g:*", name);
    return dlt_redis_keys_count(&dlt_server, pat);
}

/* A waiter told of its unit by a push, killed before it takes it: the
 * post's push waits in its grant list, the unit stays out until the
 * grant lapses (3 s), then goes on to the next waiter, and the dead
 * one's list goes with it. */
static void test_dead_pushed_waiter(void) {
    dlock_sem_t s;
    struct waiter *w = DLT_SHM_NEW(struct waiter, 1);
    dlt_task t;
    double t0;
    int status;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/dead", 0, NULL), 0);
    w->name = "s/dead";
    if (dlt_task_start(&t, DLT_PROC, waiter_run, w) != 0) return;
    CU_ASSERT_FATAL(sm_wait_queued("s/dead", 1, 10000));
    DLT_ASSERT_INT_EQ(kill(t.pid, SIGKILL), 0);
    DLT_ASSERT_INT_EQ(waitpid(t.pid, &status, 0), t.pid);
    t.running = 0;
    DLT_ASSERT_INT_EQ(sm_grant_lists("s/dead"), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(sm_grant_lists("s/dead"), 1); /* told the dead one */
    DLT_ASSERT_ERR(sm_timedwait_ms(&s, 10000), 0);
    CU_ASSERT(dlt_now() - t0 > 2.5); /* not before the grant lapsed */
    DLT_ASSERT_INT_EQ(sm_grant_lists("s/dead"), 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_SHM_FREE(w, 1);
}

static void test_timeout_leaves_queue(void) {
    dlock_sem_t s;
    struct waiter *w = DLT_SHM_NEW(struct waiter, 1);
    dlt_task t;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/leave", 0, NULL), 0);
    w->name = "s/leave";
    w->kind = 0;
    DLT_ASSERT_ERR(sm_timedwait_ms(&s, 200), ETIMEDOUT);
    if (dlt_task_start(&t, DLT_THREAD, waiter_run, w) != 0) return;
    CU_ASSERT(sm_wait_queued("s/leave", 1, 10000));
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_SHM_FREE(w, 1);
}

struct busy_arg {
    dlock_sem_t *s;
    int rc;
};

static void *busy_wait(void *p) {
    struct busy_arg *b = p;
    b->rc = dlock_sem_wait(b->s);
    return NULL;
}

static void test_destroy_busy(void) {
    dlock_sem_t s;
    struct busy_arg b;
    pthread_t th;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/busy", 0, NULL), 0);
    b.s = &s;
    b.rc = -1;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, busy_wait, &b) == 0);
    CU_ASSERT(sm_wait_queued("s/busy", 1, 10000));
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), EBUSY);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(b.rc, 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* ========================================================================
 * A run of processes: never more than K inside
 * ====================================================================== */

#define CH_K 2
#define CH_PROCS 5
#define CH_ROUNDS 25

struct chaos {
    int inside, max_inside, entered, bad;
};

struct chaos_arg {
    struct chaos *sh;
    int id;
};

static int chaos_run(void *arg) {
    struct chaos_arg *a = arg;
    dlock_sem_t s;
    int i, v;
    srand((unsigned)getpid());
    DLT_CK(dlock_sem_init(&s, "s/chaos", CH_K, NULL), 0);
    for (i = 0; i < CH_ROUNDS; i++) {
        int rc, n, how = rand() % 3;
        if (how == 0) rc = dlock_sem_wait(&s);
        else if (how == 1) rc = sm_timedwait_ms(&s, 20000);
        else
            while ((rc = dlock_sem_trywait(&s)) == EAGAIN) dlt_sleep_ms(2);
        DLT_CK(rc, 0);
        n = dlt_flag_add(&a->sh->inside, 1);
        dlt_flag_max(&a->sh->max_inside, n);
        if (n > CH_K) dlt_flag_add(&a->sh->bad, 1);
        dlt_flag_add(&a->sh->entered, 1);
        DLT_CK(dlock_sem_getvalue(&s, &v), 0);
        if (v < 0 || v > CH_K) dlt_flag_add(&a->sh->bad, 1);
        dlt_sleep_ms((unsigned)(rand() % 8));
        dlt_flag_add(&a->sh->inside, -1);
        DLT_CK(dlock_sem_post(&s), 0);
    }
    DLT_CK(dlock_sem_destroy(&s), 0);
    return 0;
}

static void test_chaos_bound(void) {
    struct chaos *sh = DLT_SHM_NEW(struct chaos, 1);
    struct chaos_arg args[CH_PROCS];
    dlock_sem_t s;
    int i;
    for (i = 0; i < CH_PROCS; i++) {
        args[i].sh = sh;
        args[i].id = i;
    }
    dlt_run_all(chaos_run, args, sizeof args[0], 0, CH_PROCS);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&sh->bad), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&sh->entered), CH_PROCS * CH_ROUNDS);
    CU_ASSERT(dlt_flag_get(&sh->max_inside) <= CH_K);
    CU_ASSERT(dlt_flag_get(&sh->max_inside) >= 1);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/chaos", 0, NULL), 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), CH_K); /* every unit came back */
    DLT_ASSERT_INT_EQ(sm_queued("s/chaos"), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_SHM_FREE(sh, 1);
}

/* ========================================================================
 * Deployments
 * ====================================================================== */

struct cl_waiter {
    dlock_sem_t *s;
    int rc;
};

static void *cl_wait(void *p) {
    struct cl_waiter *w = p;
    w->rc = dlock_sem_wait(w->s);
    return NULL;
}

/* The basic round on another deployment (a's client): a semaphore of 1
 * taken, then empty; a waiter woken by a post, which leaves it empty;
 * another post brings it back to 1. */
static void take_wait_post(const dlock_semattr_t *a, const char *name) {
    dlock_sem_t s;
    struct cl_waiter w;
    pthread_t th;
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 1, a), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), EAGAIN);
    w.s = &s;
    w.rc = -1;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, cl_wait, &w) == 0);
    dlt_sleep_ms(300);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc, 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(sm_value(&s), 1);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* On a Redis Cluster: the keys in the name's slot, the post's message
 * (SPUBLISH) heard by the waiter's node subscriber. */
static void test_cluster_basic(void) {
    dlt_cluster cl;
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    char url[512];
    int i;
    if (dlt_cluster_client(&cl, url, sizeof url, &c) != 0) {
        CU_FAIL("cannot start a cluster and a client on it");
        return;
    }
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    /* Names whose slots are on different masters. */
    for (i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "s/cl%d", i);
        take_wait_post(&a, name);
    }
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_cluster_cleanup(&cl);
}

/* Through Sentinel: the master it names keeps the semaphore. */
static void test_sentinel_basic(void) {
    dlt_sentinel st;
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    memset(&st, 0, sizeof st);
    if (dlt_sentinel_start(&st, 0, 1, NULL, 20000) != 0) {
        CU_FAIL("cannot start a Sentinel deployment");
        dlt_sentinel_cleanup(&st);
        return;
    }
    DLT_ASSERT_ERR(dlt_client_make(&c, st.url, 5000), 0);
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    take_wait_post(&a, "s/sent");
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_sentinel_cleanup(&st);
}

static void test_redlock_enotsup(void) {
    dlt_masters m;
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    memset(&m, 0, sizeof m);
    if (dlt_masters_start(&m, 3, 0) != 0) {
        CU_FAIL("cannot start the masters");
        return;
    }
    DLT_ASSERT_ERR(dlt_client_make(&c, m.url, 3000), 0);
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/rl", 1, &a), ENOTSUP);
    CU_ASSERT(strstr(dlock_last_error(), "Redlock") != NULL);
    DLT_ASSERT_ERR(dlock_sem_wait(&s), EINVAL); /* nothing was made */
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&m);
}

static void test_unreachable_enolck(void) {
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    char url[128];
    double t0;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", dlt_free_port());
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 500), 0);
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/down", 1, &a), ENOLCK);
    CU_ASSERT(dlt_now() - t0 < 30.0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* The server goes away under a waiter, past the bound: ENOLCK. */
static void test_wait_enolck(void) {
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_server.url, 500), 0);
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/gone", 0, &a), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_sem_wait(&s), ENOLCK);
    DLT_ASSERT_ERR(dlock_sem_post(&s), ENOLCK);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
}

/* The value as the server has it (GET dlock:{name}:sem), LLONG_MIN if none. */
static long long sm_server_value(const char *name) {
    char k[700];
    redisReply *r;
    long long v = LLONG_MIN;
    int n = snprintf(k, sizeof k, "dlock:{%s}:sem", name);
    r = dlt_redis_cmd(&dlt_server, "GET %b", k, (size_t)n);
    if (r != NULL && r->type == REDIS_REPLY_STRING) v = strtoll(r->str, NULL, 10);
    if (r != NULL) freeReplyObject(r);
    return v;
}

struct cut_arg {
    dlock_sem_t *s;
    int post; /* 1 post, 0 trywait */
    int rc;
};

/* The record of ops done (sem.lua's `done`, "dlock:{name}:semd") holds
 * one entry per caller -- its last op -- not one per op: 5,000 wait/post
 * pairs from 2 threads leave 2 callers' entries (and the record's count,
 * field "#"), each naming a post as its last op and counting its 5,000
 * ops done. */
struct pairs_arg {
    const char *name;
    int n, rc;
};

static void *pairs_run(void *p) {
    struct pairs_arg *a = p;
    dlock_sem_t s;
    int i;
    if ((a->rc = dlock_sem_init(&s, a->name, 1, NULL)) != 0) return NULL;
    for (i = 0; i < a->n && a->rc == 0; i++)
        if ((a->rc = dlock_sem_wait(&s)) == 0) a->rc = dlock_sem_post(&s);
    (void)dlock_sem_destroy(&s);
    return NULL;
}

static void test_done_record_bounded(void) {
    struct pairs_arg a[2];
    pthread_t th[2];
    redisReply *r;
    long long fields;
    size_t i;
    int t;
    for (t = 0; t < 2; t++) {
        a[t].name = "s/bounded";
        a[t].n = 2500;
        a[t].rc = -1;
        CU_ASSERT_FATAL(pthread_create(&th[t], NULL, pairs_run, &a[t]) == 0);
    }
    for (t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        DLT_ASSERT_ERR(a[t].rc, 0);
    }
    DLT_ASSERT_INT_EQ(sm_server_value("s/bounded"), 1);
    fields = dlt_reply_int(dlt_redis_cmd(&dlt_server, "HLEN dlock:{s/bounded}:semd"));
    printf("\nsem: 5000 wait/post pairs from 2 threads: the done record holds %lld fields\n", fields);
    DLT_ASSERT_INT_EQ(fields, 3); /* the two callers, and "#" */
    r = dlt_redis_cmd(&dlt_server, "HGETALL dlock:{s/bounded}:semd");
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_ARRAY);
    for (i = 0; r != NULL && i + 1 < r->elements; i += 2) {
        if (strcmp(r->element[i]->str, "#") == 0) continue;
        /* "EXPIRY SEQ COUNT OP TOKEN": each caller's last op was a
         * post, and it did 2,500 takes and 2,500 posts */
        long long exp = 0, seq = 0, count = 0;
        char op[16] = "";
        CU_ASSERT(sscanf(r->element[i + 1]->str, "%lld %lld %lld %15s", &exp, &seq, &count, op) == 4);
        CU_ASSERT_STRING_EQUAL(op, "post");
        DLT_ASSERT_INT_EQ(count, 5000);
        CU_ASSERT(seq >= count);
    }
    freeReplyObject(r);
}

/* sem.lua run directly (EVAL) on "dlock:{s/raw}": op, token, arg (a
 * post's maximum), how long an entry lasts (ms), caller and op number;
 * the answer, or -1000 - the reply type when it is no number. */
static long long raw_sem(const char *op, const char *tok, const char *keep, const char *caller, const char *seq) {
    redisReply *r = dlt_redis_cmd(&dlt_server,
                                  "EVAL %s 7 dlock:{s/raw}:sem dlock:{s/raw}:semq dlock:{s/raw}:semx "
                                  "dlock:{s/raw}:semg dlock:{s/raw}:semd dlock:{s/raw}:semo dlock:{s/raw}:semu "
                                  "%s %s 3000 100 %s host:1:1 0 %s %s",
                                  dlock__script_body(DLOCK__SCRIPT_SEM, 0), op, tok, keep, caller, seq);
    long long v = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1000 - (r ? r->type : 0);
    if (r != NULL) freeReplyObject(r);
    return v;
}

static long long raw_value(void) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET dlock:{s/raw}:sem");
    long long v = r != NULL && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    if (r != NULL) freeReplyObject(r);
    return v;
}

/* The rules of the record of ops done, on the script itself: an op asked
 * again (its token the caller's last) answers 1 and does nothing; an
 * older op of the caller (a late copy of a request of a call that ended)
 * answers 0 and does nothing; a caller's new op replaces its entry; one
 * caller's entry never matches another's op; the entries of callers
 * gone are dropped once they pass 2 x the count left + 16; a record of
 * the old kind (a zset) is dropped. */
static void test_done_rules(void) {
    char caller[32], seq[8];
    redisReply *r;
    int i;
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL dlock:{s/raw}:sem dlock:{s/raw}:semd"));
    DLT_ASSERT_INT_EQ(raw_sem("init", "-", "60000", "A", "1"), 1);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET dlock:{s/raw}:sem 2"));
    DLT_ASSERT_INT_EQ(raw_sem("take", "ta1", "60000", "A", "2"), 1);
    DLT_ASSERT_INT_EQ(raw_value(), 1);
    DLT_ASSERT_INT_EQ(raw_sem("take", "ta1", "60000", "A", "2"), 1); /* asked again */
    DLT_ASSERT_INT_EQ(raw_value(), 1);
    DLT_ASSERT_INT_EQ(raw_sem("post", "pa3", "60000", "A", "3"), 1);
    DLT_ASSERT_INT_EQ(raw_value(), 2);
    DLT_ASSERT_INT_EQ(raw_sem("take", "ta1", "60000", "A", "2"), 0); /* a late copy */
    DLT_ASSERT_INT_EQ(raw_value(), 2);
    DLT_ASSERT_INT_EQ(raw_sem("post", "pa3", "60000", "A", "3"), 1); /* asked again */
    DLT_ASSERT_INT_EQ(raw_value(), 2);
    DLT_ASSERT_INT_EQ(raw_sem("post", "pa3", "60000", "B", "1"), 1); /* B's op: done */
    DLT_ASSERT_INT_EQ(raw_value(), 3);
    DLT_ASSERT_INT_EQ(raw_sem("take", "ta4", "60000", "A", "4"), 1);
    DLT_ASSERT_INT_EQ(raw_value(), 2);
    r = dlt_redis_cmd(&dlt_server, "HGET dlock:{s/raw}:semd A"); /* "EXPIRY SEQ COUNT OP TOKEN" */
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING && strstr(r->str, " 4 3 take ta4") != NULL);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HLEN dlock:{s/raw}:semd")), 3); /* A, B, # */
    for (i = 0; i < 100; i++) { /* 100 callers, each entry expired at once */
        snprintf(caller, sizeof caller, "C%d", i);
        snprintf(seq, sizeof seq, "%d", i + 1);
        DLT_ASSERT_INT_EQ(raw_sem(i % 2 ? "take" : "post", caller, "0", caller, seq), 1);
        CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HLEN dlock:{s/raw}:semd")) <= 2 * 3 + 16 + 2);
    }
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL dlock:{s/raw}:semd"));
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD dlock:{s/raw}:semd 1 old"));
    DLT_ASSERT_INT_EQ(raw_sem("post", "pz", "60000", "Z", "1"), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HLEN dlock:{s/raw}:semd")), 2); /* Z, # */
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL dlock:{s/raw}:sem dlock:{s/raw}:semd"));
}

/* The undo of a take whose answer was lost (sent by the same caller
 * before its next op): it gives back the unit its entry says the token
 * took, the entry's count one down, and naming 'undo' -- asked again it
 * does nothing, nor does a late copy of the take; an undo of a token the
 * caller's entry does not name gives nothing back, unless a post had
 * handed that token a unit it never took (the unit goes on) -- and it
 * leaves the queue. */
static void test_undo_rules(void) {
    redisReply *r;
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL dlock:{s/raw}:sem dlock:{s/raw}:semd dlock:{s/raw}:semq "
                                                   "dlock:{s/raw}:semx dlock:{s/raw}:semg dlock:{s/raw}:semo"));
    DLT_ASSERT_INT_EQ(raw_sem("init", "-", "60000", "A", "1"), 1);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET dlock:{s/raw}:sem 2"));
    DLT_ASSERT_INT_EQ(raw_sem("take", "tu1", "60000", "A", "1"), 1);
    DLT_ASSERT_INT_EQ(raw_value(), 1);
    DLT_ASSERT_INT_EQ(raw_sem("undo", "tu1", "60000", "A", "2"), 1);
    DLT_ASSERT_INT_EQ(raw_value(), 2);
    r = dlt_redis_cmd(&dlt_server, "HGET dlock:{s/raw}:semd A");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING && strstr(r->str, " 2 0 undo tu1") != NULL);
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(raw_sem("undo", "tu1", "60000", "A", "3"), 0); /* asked again */
    DLT_ASSERT_INT_EQ(raw_value(), 2);
    (void)raw_sem("take", "tu1", "60000", "A", "1"); /* a late copy of the take */
    DLT_ASSERT_INT_EQ(raw_value(), 2);
    DLT_ASSERT_INT_EQ(raw_sem("take", "tu2", "60000", "B", "1"), 1);
    DLT_ASSERT_INT_EQ(raw_sem("undo", "tu2", "60000", "A", "4"), 0); /* not A's */
    DLT_ASSERT_INT_EQ(raw_value(), 1);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET dlock:{s/raw}:sem 0"));
    DLT_ASSERT_INT_EQ(raw_sem("take", "tq", "60000", "C", "1"), 0); /* queued */
    DLT_ASSERT_INT_EQ(raw_sem("post", "pd", "60000", "D", "1"), 1); /* handed to tq */
    DLT_ASSERT_INT_EQ(raw_value(), 0);
    DLT_ASSERT_INT_EQ(raw_sem("undo", "tq", "60000", "C", "2"), 0); /* never took it: it goes on */
    DLT_ASSERT_INT_EQ(raw_value(), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS dlock:{s/raw}:semq dlock:{s/raw}:semx "
                                                               "dlock:{s/raw}:semg")), 0);
    (void)dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL dlock:{s/raw}:sem dlock:{s/raw}:semd dlock:{s/raw}:semo"));
}

static void *cut_call(void *p) {
    struct cut_arg *a = p;
    a->rc = a->post ? dlock_sem_post(a->s) : dlock_sem_trywait(a->s);
    return NULL;
}

/* Answers lost on the way back (the proxy cuts them): the library asks
 * again, and the server, which did the op the first time, does not do it
 * again -- one post adds one unit, one trywait takes one. */
static void test_lost_answer_once(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    struct cut_arg ca;
    pthread_t th;
    int post;
    CU_ASSERT_FATAL(px != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(px), 5000), 0);
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/cut", 5, &a), 0);
    for (post = 1; post >= 0; post--) {
        long long before = sm_server_value("s/cut");
        ca.s = &s;
        ca.post = post;
        ca.rc = -1;
        dlt_proxy_set(px, DLT_PROXY_CUT, 0, NULL, 0);
        CU_ASSERT_FATAL(pthread_create(&th, NULL, cut_call, &ca) == 0);
        dlt_sleep_ms(400);
        dlt_proxy_pass(px);
        pthread_join(th, NULL);
        DLT_ASSERT_ERR(ca.rc, 0);
        DLT_ASSERT_INT_EQ(sm_server_value("s/cut"), before + (post ? 1 : -1));
    }
    CU_ASSERT(dlt_proxy_faults(px) > 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

/* A timed wait whose answer is lost while the server stays cut off past
 * its deadline: the server took the unit, the call cannot learn it by
 * deadline + 50 ms and gives ETIMEDOUT.  That unit is not lost: the
 * same thread's next call of the semaphore (getvalue here) first gives
 * it back, so the value is what it was before the wait -- plain or
 * leased (undo: not left to its lease either).  A call that learnt its
 * take in time (0) holds the unit: one less on the server. */
struct lost_take {
    dlock_sem_t *s;
    int rc, vrc, v;
    int passed; /* the proxy forwards again: the thread's next call may go */
    int deadline_ms;
    double took; /* how long the timed wait took, s */
};

static void *lost_take_run(void *p) {
    struct lost_take *a = p;
    struct timespec t = dlt_abs_in(CLOCK_MONOTONIC, a->deadline_ms);
    double t0 = dlt_now();
    a->rc = dlock_sem_clockwait(a->s, CLOCK_MONOTONIC, &t);
    a->took = dlt_now() - t0;
    dlt_flag_wait(&a->passed, 1, 10000);
    a->vrc = dlock_sem_getvalue(a->s, &a->v);
    return NULL;
}

static void test_lost_timed_take(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    int undo;
    CU_ASSERT_FATAL(px != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(px), 5000), 0);
    for (undo = 0; undo <= 1; undo++) {
        const char *name = undo ? "s/losttake-u" : "s/losttake";
        struct lost_take lt;
        dlock_semattr_t a;
        dlock_sem_t s;
        pthread_t th;
        unsigned long faults = dlt_proxy_faults(px);
        DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
        DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
        DLT_ASSERT_ERR(dlock_semattr_setundo(&a, undo), 0);
        DLT_ASSERT_ERR(dlock_sem_init(&s, name, 2, &a), 0);
        memset(&lt, 0, sizeof lt);
        lt.s = &s;
        lt.deadline_ms = 200;
        dlt_proxy_set(px, DLT_PROXY_CUT, 0, NULL, 0);
        CU_ASSERT_FATAL(pthread_create(&th, NULL, lost_take_run, &lt) == 0);
        dlt_sleep_ms(700); /* past the deadline + 50 ms: the call has ended */
        DLT_ASSERT_INT_EQ(sm_server_value(name), 1); /* the server took it */
        dlt_proxy_pass(px);
        dlt_flag_set(&lt.passed, 1);
        pthread_join(th, NULL);
        CU_ASSERT(dlt_proxy_faults(px) > faults);
        printf("\nsem: a timed wait (200 ms) cut off%s: %s after %.0f ms\n", undo ? " (undo)" : "",
               dlt_errno_label(lt.rc), lt.took * 1000);
        /* deadline + 50 ms, and 150 ms for a loaded machine's scheduling */
        CU_ASSERT(lt.took < 0.4);
        CU_ASSERT(lt.rc == 0 || lt.rc == ETIMEDOUT);
        DLT_ASSERT_ERR(lt.vrc, 0);
        if (lt.rc == 0) {
            DLT_ASSERT_INT_EQ(sm_server_value(name), 1);
            DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
        } else {
            DLT_ASSERT_INT_EQ(lt.v, 2);
            DLT_ASSERT_INT_EQ(sm_server_value(name), 2);
        }
        DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
        DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

/* A post whose answer never comes (ENOLCK after the unreachable bound)
 * is asked again, with its call token, by the same thread's next call of
 * the semaphore: done once, whether the first never reached the server
 * (the proxy a black hole: DROP) or ran there and only its answer was
 * held (DELAY, past the bound).  Without it the first unit is gone for
 * good. */
static void test_lost_post(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    int ran;
    CU_ASSERT_FATAL(px != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(px), 800), 0);
    for (ran = 0; ran <= 1; ran++) {
        const char *name = ran ? "s/lostpost-ran" : "s/lostpost";
        dlock_semattr_t a;
        dlock_sem_t s;
        double end;
        int v = -1, rc;
        DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
        DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
        DLT_ASSERT_ERR(dlock_sem_init(&s, name, 1, &a), 0);
        DLT_ASSERT_ERR(dlock_sem_wait(&s), 0);
        DLT_ASSERT_INT_EQ(sm_server_value(name), 0);
        dlt_proxy_set(px, ran ? DLT_PROXY_DELAY : DLT_PROXY_DROP, 3000, NULL, 0);
        DLT_ASSERT_ERR(dlock_sem_post(&s), ENOLCK);
        DLT_ASSERT_INT_EQ(sm_server_value(name), ran ? 1 : 0);
        dlt_proxy_pass(px);
        /* (the client's breaker may answer for a while: ask until served) */
        end = dlt_now() + 10.0;
        while ((rc = dlock_sem_getvalue(&s, &v)) == ENOLCK && dlt_now() < end) dlt_sleep_ms(50);
        DLT_ASSERT_ERR(rc, 0);
        DLT_ASSERT_INT_EQ(v, 1);
        DLT_ASSERT_INT_EQ(sm_server_value(name), 1);
        DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
        DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

/* The same for a waiter: queued, then cut off, and a post (of another
 * client) hands it the unit.  Its take again, sent on a new connection,
 * claims the unit on the server, but no answer comes back by deadline +
 * 50 ms: ETIMEDOUT, and the thread's next call gives the unit back.
 * (Or the call heard it in time: 0, with the unit.) */
static void test_lost_queued_take(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    struct lost_take lt;
    dlock_semattr_t a;
    dlock_sem_t s, other;
    pthread_t th;
    CU_ASSERT_FATAL(px != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(px), 5000), 0);
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "s/lostq", 0, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&other, "s/lostq", 0, NULL), 0); /* the default client: no proxy */
    memset(&lt, 0, sizeof lt);
    lt.s = &s;
    lt.deadline_ms = 500;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, lost_take_run, &lt) == 0);
    CU_ASSERT(dlt_sem_wait_waiters("s/lostq", 1, 3000));
    dlt_proxy_set(px, DLT_PROXY_CUT, 0, NULL, 0);
    DLT_ASSERT_ERR(dlock_sem_post(&other), 0);
    dlt_sleep_ms(1000); /* past the deadline + 50 ms: the call has ended */
    DLT_ASSERT_INT_EQ(sm_server_value("s/lostq"), 0); /* handed to the waiter, or taken by it */
    dlt_proxy_pass(px);
    dlt_flag_set(&lt.passed, 1);
    pthread_join(th, NULL);
    printf("\nsem: a queued wait (500 ms) cut off: %s after %.0f ms\n", dlt_errno_label(lt.rc), lt.took * 1000);
    CU_ASSERT(lt.took < 0.7);
    CU_ASSERT(lt.rc == 0 || lt.rc == ETIMEDOUT);
    DLT_ASSERT_ERR(lt.vrc, 0);
    if (lt.rc == 0) {
        DLT_ASSERT_INT_EQ(sm_server_value("s/lostq"), 0);
    } else {
        DLT_ASSERT_INT_EQ(lt.v, 1);
        DLT_ASSERT_INT_EQ(sm_server_value("s/lostq"), 1);
    }
    DLT_ASSERT_ERR(dlock_sem_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_init_join),
    DLT_TEST(test_trywait_post),
    DLT_TEST(test_bad_args),
    DLT_TEST(test_overflow),
    DLT_TEST(test_timedwait),
    DLT_TEST(test_post_wakes_thread),
    DLT_TEST(test_post_wakes_process),
    DLT_TEST(test_fifo_one_per_post),
    DLT_TEST(test_timeout_leaves_queue),
    DLT_TEST(test_dead_pushed_waiter),
    DLT_TEST(test_destroy_busy),
    DLT_TEST(test_chaos_bound),
    DLT_TEST(test_cluster_basic),
    DLT_TEST(test_sentinel_basic),
    DLT_TEST(test_redlock_enotsup),
    DLT_TEST(test_unreachable_enolck),
    DLT_TEST(test_wait_enolck),
    DLT_TEST(test_lost_answer_once),
    DLT_TEST(test_lost_timed_take),
    DLT_TEST(test_lost_queued_take),
    DLT_TEST(test_lost_post),
    DLT_TEST(test_done_record_bounded),
    DLT_TEST(test_done_rules),
    DLT_TEST(test_undo_rules),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "sem", tests);
}
