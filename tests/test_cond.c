/* test_cond.c -- condition variables across hosts: dlock_cond_*.
 * labels: redis; timeout: 300
 *
 * Against SPEC "Beyond the mutex" and the dlock_cond_*
 * section of dlock.h: init/destroy with a name; wait, timedwait and
 * clockwait paired with a dlock mutex (release atomically, sleep until a
 * signal from any thread of any process, take the mutex again before
 * returning); signal wakes at least one waiter anywhere, broadcast wakes
 * all; no lost wake-ups; spurious wake-ups allowed, as in POSIX.  The
 * centre piece is a bounded producer/consumer queue kept in Redis and
 * driven by 2 producer processes and 5 consumer threads in 3 processes,
 * whose totals must come out exact.
 *
 * As in test_mutex.c and test_robust.c, workers are written once and run
 * as threads of this process and as child processes (dlt_spawn); a worker
 * returns 0, or a nonzero code after saying why on stderr (a child reports
 * through its exit status and never touches CUnit).  What a worker
 * measures travels through MAP_SHARED memory.  Where a test starts both
 * processes and threads, it forks first: GCC's AddressSanitizer runtime
 * can deadlock a child forked next to a thread that is starting.
 *
 * Helpers here are cv_-prefixed (static), so they never collide with what
 * the shared fixture grows.
 */
#define DLT_CK_MOD 120 /* worker codes 1..120: clear of 128 + signal */
#include "fixture.h"
#include "proxy.h"

#include <dlock.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ========================================================================
 * Objects, the server
 * ====================================================================== */

static int cv_timedwait_ms(dlock_cond_t *c, dlock_mutex_t *m, long ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    return dlock_cond_timedwait(c, m, &ts);
}

static int cv_clockwait_ms(dlock_cond_t *c, dlock_mutex_t *m, long ms) {
    struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, ms);
    return dlock_cond_clockwait(c, m, CLOCK_MONOTONIC, &ts);
}

static int cv_timedlock_ms(dlock_mutex_t *m, long ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    return dlock_mutex_timedlock(m, &ts);
}

/* The three ways to wait, by number: 0 wait, 1 timedwait, 2 clockwait
 * (CLOCK_MONOTONIC); the timed ones with a deadline ms from now. */
static int cv_wait_kind(int kind, dlock_cond_t *c, dlock_mutex_t *m, long ms) {
    switch (kind % 3) {
    case 0: return dlock_cond_wait(c, m);
    case 1: return cv_timedwait_ms(c, m, ms);
    default: return cv_clockwait_ms(c, m, ms);
    }
}

/* ZCARD of a condition variable's waiters, "dlock:{name}:cond" (src/api/cond.c;
 * informational: an implementation detail, printed, never asserted). */
static long long cv_registered(const char *name) {
    char k[700];
    int n = snprintf(k, sizeof k, "dlock:{%s}:cond", name);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %b", k, (size_t)n));
}

/* A 512-byte name of arbitrary bytes (every value but NUL), with the
 * characters that matter to keys and channels: braces, ":cond". */
static void cv_binary_name(char *buf) {
    static const char special[] = "}:cond{ {*}\n\xff?[]\\\"'\r\t{{}}:cond";
    int i;
    for (i = 0; i < DLOCK_NAME_MAX; i++) buf[i] = (char)(1 + (i * 37) % 255);
    memcpy(buf, special, sizeof special - 1);
    memcpy(buf + 300, special, sizeof special - 1);
    memcpy(buf + DLOCK_NAME_MAX - 6, "}:cond", 6);
    buf[DLOCK_NAME_MAX] = '\0';
}

/* ========================================================================
 * init / destroy: names, NULL, uninitialised and destroyed objects
 * ====================================================================== */

/* Every call on c gives EINVAL, nothing crashes, and m (held by the
 * caller) stays held. */
static int cv_check_invalid(dlock_cond_t *c, dlock_mutex_t *m) {
    struct timespec rt = dlt_abs_in(CLOCK_REALTIME, 100), mt = dlt_abs_in(CLOCK_MONOTONIC, 100);
    DLT_CK(dlock_cond_signal(c), EINVAL);
    DLT_CK(dlock_cond_broadcast(c), EINVAL);
    DLT_CK(dlock_cond_wait(c, m), EINVAL);
    DLT_CK(dlock_cond_timedwait(c, m, &rt), EINVAL);
    DLT_CK(dlock_cond_clockwait(c, m, CLOCK_MONOTONIC, &mt), EINVAL);
    DLT_CK(dlock_cond_clockwait(c, m, CLOCK_REALTIME, &rt), EINVAL);
    DLT_CK(dlock_mutex_holds(m), 1);
    DLT_CK(dlock_cond_destroy(c), EINVAL);
    return 0;
}

typedef struct cv_names_arg {
    int idx;
} cv_names_arg;

static int cv_names_worker(void *p) {
    cv_names_arg *a = p;
    char bin[DLOCK_NAME_MAX + 1], mname[64];
    dlock_cond_t c, copy;
    dlock_mutex_t m;
    int i, rc;

    snprintf(mname, sizeof mname, "cv/names/m%d", a->idx);
    DLT_CK(dlock_mutex_init(&m, mname, NULL), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);

    memset(&c, 0x5A, sizeof c);
    DLT_CK(dlock_cond_init(NULL, "x"), EINVAL);
    DLT_CK(dlock_cond_init_client(NULL, "x", NULL), EINVAL);
    DLT_CK(dlock_cond_init(&c, NULL), EINVAL);
    DLT_CK(dlock_cond_init(&c, ""), EINVAL);
    {
        char b[DLOCK_NAME_MAX + 2];
        memset(b, 'n', DLOCK_NAME_MAX + 1);
        b[DLOCK_NAME_MAX + 1] = '\0';
        DLT_CK(strlen(b), 513);
        DLT_CK(dlock_cond_init(&c, b), EINVAL);
        DLT_CK(dlock_cond_init_client(&c, b, NULL), EINVAL);
        for (i = 0; i < DLOCK_NAME_MAX + 1; i++) b[i] = (char)(1 + (i * 37) % 255);
        DLT_CK(strlen(b), 513);
        DLT_CK(dlock_cond_init(&c, b), EINVAL);
    }
    /* Nothing was made: still no condition variable. */
    if ((rc = cv_check_invalid(&c, &m)) != 0) return rc;
    /* Zeroed: not one either. */
    memset(&c, 0, sizeof c);
    if ((rc = cv_check_invalid(&c, &m)) != 0) return rc;
    /* NULL. */
    if ((rc = cv_check_invalid(NULL, &m)) != 0) return rc;

    /* The limits that are fine: 512 arbitrary bytes, and 1 byte. */
    cv_binary_name(bin);
    DLT_CK(strlen(bin), DLOCK_NAME_MAX);
    DLT_CK(dlock_cond_init(&c, bin), 0);
    DLT_CK(dlock_cond_signal(&c), 0);
    DLT_CK(dlock_cond_broadcast(&c), 0);
    DLT_CK(dlock_cond_destroy(&c), 0);
    /* Destroyed: EINVAL everywhere, a second destroy included. */
    if ((rc = cv_check_invalid(&c, &m)) != 0) return rc;
    DLT_CK(dlock_cond_init(&c, "x"), 0);
    /* A byte copy is not an initialised object (pthreads: undefined; dlock: EINVAL). */
    memcpy(&copy, &c, sizeof c);
    DLT_CK(dlock_cond_signal(&copy), EINVAL);
    DLT_CK(dlock_cond_wait(&copy, &m), EINVAL);
    DLT_CK(dlock_cond_destroy(&copy), EINVAL);
    DLT_CK(dlock_cond_destroy(&c), 0);
    DLT_CK(dlock_cond_init_client(&c, "x", NULL), 0);
    DLT_CK(dlock_cond_destroy(&c), 0);

    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_cond_init_names_invalid(void) {
    cv_names_arg *a = DLT_SHM_NEW(cv_names_arg, 5);
    int i;
    for (i = 0; i < 5; i++) a[i].idx = i;
    /* Here first (CUnit sees each call), then 3 threads and 2 processes at once. */
    DLT_ASSERT_INT_EQ(cv_names_worker(&a[0]), 0);
    dlt_run_all(cv_names_worker, a, sizeof *a, 3, 2);
    DLT_SHM_FREE(a, 5);
}

/* ========================================================================
 * signal / broadcast with no waiter: 0, and nothing is remembered.
 * ====================================================================== */

static int cv_nowaiter_worker(void *p) {
    const char *name = p;
    dlock_cond_t c;
    dlock_mutex_t m;
    struct timespec ts;
    double t0;
    int i;
    DLT_CK(dlock_cond_init(&c, name), 0);
    DLT_CK(dlock_mutex_init(&m, name, NULL), 0); /* the same name as the cond: separate objects */
    for (i = 0; i < 5; i++) {
        DLT_CK(dlock_cond_signal(&c), 0);
        DLT_CK(dlock_cond_broadcast(&c), 0);
    }
    /* A signal with nobody waiting is not kept for a later waiter. */
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_cond_signal(&c), 0);
    t0 = dlt_now();
    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    DLT_CK(dlock_cond_timedwait(&c, &m, &ts), ETIMEDOUT);
    DLT_CKT(dlt_now() - t0 >= 0.29);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_cond_destroy(&c), 0);
    return 0;
}

static void test_cond_signal_no_waiter(void) {
    static const char *name = "cv/nowaiter";
    char *names = DLT_SHM_NEW(char, 4 * 32);
    int i;
    dlock_cond_t c;
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
    DLT_ASSERT_ERR(dlock_cond_broadcast(&c), 0);
    /* Nothing was left on the server for a signal that found nobody. */
    DLT_ASSERT_INT_EQ(cv_registered(name), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    for (i = 0; i < 4; i++) snprintf(names + 32 * i, 32, "cv/nowaiter/%d", i);
    dlt_run_all(cv_nowaiter_worker, names, 32, 2, 2);
    DLT_SHM_FREE(names, 4 * 32);
}

/* ========================================================================
 * wait's errors: EPERM without the mutex, EINVAL for bad arguments, a
 * mutex on another client, a bad deadline.
 * ====================================================================== */

typedef struct cv_err_arg {
    int idx;
} cv_err_arg;

static int cv_errors_worker(void *p) {
    cv_err_arg *a = p;
    char name[64];
    dlock_cond_t c, c2;
    dlock_mutex_t m, m2, bad;
    dlock_client_t *cl = NULL;
    struct timespec ts;
    double t0;

    snprintf(name, sizeof name, "cv/errors/%d", a->idx);
    DLT_CK(dlock_cond_init(&c, name), 0);
    DLT_CK(dlock_mutex_init(&m, name, NULL), 0);
    memset(&bad, 0x5A, sizeof bad);

    /* Not holding the mutex: EPERM, at once. */
    t0 = dlt_now();
    DLT_CK(dlock_cond_wait(&c, &m), EPERM);
    DLT_CK(cv_timedwait_ms(&c, &m, 2000), EPERM);
    DLT_CK(cv_clockwait_ms(&c, &m, 2000), EPERM);
    DLT_CKT(dlt_now() - t0 < 1.0);
    DLT_CK(dlock_mutex_holds(&m), 0);
    /* Bad objects: EINVAL, held or not. */
    DLT_CK(dlock_cond_wait(&c, NULL), EINVAL);
    DLT_CK(dlock_cond_wait(&c, &bad), EINVAL);
    DLT_CK(dlock_cond_wait(NULL, &m), EINVAL);
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_cond_wait(NULL, &m), EINVAL);
    DLT_CK(dlock_cond_wait(&c, NULL), EINVAL);
    DLT_CK(dlock_cond_wait(&c, &bad), EINVAL);
    DLT_CK(dlock_mutex_holds(&m), 1);

    /* Deadlines: NULL, a bad tv_nsec, a bad clock: EINVAL at once, the
     * mutex still held (never released). */
    t0 = dlt_now();
    DLT_CK(dlock_cond_timedwait(&c, &m, NULL), EINVAL);
    DLT_CK(dlock_cond_clockwait(&c, &m, CLOCK_MONOTONIC, NULL), EINVAL);
    DLT_CK(dlock_cond_clockwait(&c, &m, CLOCK_REALTIME, NULL), EINVAL);
    ts = dlt_abs_in(CLOCK_REALTIME, 2000);
    ts.tv_nsec = 1000000000L;
    DLT_CK(dlock_cond_timedwait(&c, &m, &ts), EINVAL);
    ts.tv_nsec = -1;
    DLT_CK(dlock_cond_timedwait(&c, &m, &ts), EINVAL);
    ts = dlt_abs_in(CLOCK_MONOTONIC, 2000);
    ts.tv_nsec = 1000000000L;
    DLT_CK(dlock_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &ts), EINVAL);
    ts.tv_nsec = -5;
    DLT_CK(dlock_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &ts), EINVAL);
    ts = dlt_abs_in(CLOCK_MONOTONIC, 2000);
    DLT_CK(dlock_cond_clockwait(&c, &m, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
    DLT_CK(dlock_cond_clockwait(&c, &m, (clockid_t)12345, &ts), EINVAL);
    DLT_CKT(dlt_now() - t0 < 1.0);
    DLT_CK(dlock_mutex_holds(&m), 1);

    /* A mutex on another client than the condition variable: EINVAL, and
     * the mutex stays held.  Both ways round. */
    DLT_CK(dlt_client_make(&cl, dlt_server.url, 0), 0);
    DLT_CK(dlt_mutex_make(&m2, name, 0, cl), 0);
    DLT_CK(dlock_cond_init_client(&c2, name, cl), 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_lock(&m2), 0);
    DLT_CK(dlock_cond_wait(&c, &m2), EINVAL);
    DLT_CK(cv_timedwait_ms(&c, &m2, 200), EINVAL);
    DLT_CK(dlock_mutex_holds(&m2), 1);
    /* The pair on the same client works (times out here). */
    DLT_CK(cv_timedwait_ms(&c2, &m2, 200), ETIMEDOUT);
    DLT_CK(dlock_mutex_holds(&m2), 1);
    DLT_CK(dlock_mutex_unlock(&m2), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_cond_wait(&c2, &m), EINVAL);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(cv_timedwait_ms(&c, &m, 200), ETIMEDOUT);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_cond_destroy(&c2), 0);
    DLT_CK(dlock_mutex_destroy(&m2), 0);
    DLT_CK(dlock_client_destroy(cl), 0);

    DLT_CK(dlock_cond_destroy(&c), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

/* wait by a thread (or process) while another one holds the mutex: EPERM. */
typedef struct cv_eperm_arg {
    dlock_mutex_t *m; /* shared object (a thread), or NULL (a process: its own) */
    dlock_cond_t *c;
    const char *name;
} cv_eperm_arg;

static int cv_eperm_worker(void *p) {
    cv_eperm_arg *a = p;
    dlock_mutex_t own_m, *m = a->m;
    dlock_cond_t own_c, *c = a->c;
    double t0;
    if (m == NULL) {
        m = &own_m;
        c = &own_c;
        DLT_CK(dlock_mutex_init(m, a->name, NULL), 0);
        DLT_CK(dlock_cond_init(c, a->name), 0);
    }
    DLT_CK(dlock_mutex_trylock(m), EBUSY); /* held by the test */
    t0 = dlt_now();
    DLT_CK(dlock_cond_wait(c, m), EPERM);
    DLT_CK(cv_timedwait_ms(c, m, 2000), EPERM);
    DLT_CK(cv_clockwait_ms(c, m, 2000), EPERM);
    DLT_CKT(dlt_now() - t0 < 1.0);
    DLT_CK(dlock_mutex_holds(m), 0);
    if (m == &own_m) {
        DLT_CK(dlock_cond_destroy(c), 0);
        DLT_CK(dlock_mutex_destroy(m), 0);
    }
    return 0;
}

static void test_cond_wait_errors(void) {
    static const char *name = "cv/eperm";
    cv_err_arg *a = DLT_SHM_NEW(cv_err_arg, 4);
    cv_eperm_arg *e = DLT_SHM_NEW(cv_eperm_arg, 2);
    dlock_mutex_t m;
    dlock_cond_t c;
    int i;

    for (i = 0; i < 4; i++) a[i].idx = i;
    DLT_ASSERT_INT_EQ(cv_errors_worker(&a[0]), 0);
    dlt_run_all(cv_errors_worker, a, sizeof *a, 2, 2);

    /* The mutex held by this thread: another thread of this process and
     * another process get EPERM. */
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    e[0].m = &m;
    e[0].c = &c;
    e[1].name = name;
    dlt_run_all(cv_eperm_worker, e, sizeof *e, 1, 1);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(a, 4);
    DLT_SHM_FREE(e, 2);
}

/* ========================================================================
 * A waiter: wait returns holding the mutex; while it waits the mutex is
 * free for others; it does not return before it has the mutex again.
 * ====================================================================== */

typedef struct cv_waiter {
    const char *name;  /* for a process: opens its own objects */
    dlock_mutex_t *m;  /* a thread: shared objects */
    dlock_cond_t *c;
    int kind;          /* cv_wait_kind */
    long timed_ms;     /* the deadline of a timed kind */
    int *go;           /* the predicate: wait while *go == 0 */
    int ready;         /* set (under the mutex) just before the first wait */
    int returned;      /* set once the wait loop is over, still holding */
    int unlock_go;     /* wait for this before unlocking (if hold_after) */
    int hold_after;
    int waits, spurious, timeouts;
    int rc, holds_after;
    uint64_t fence_before, fence_after;
    double t_ready, t_returned;
} cv_waiter;

static int cv_waiter_main(void *p) {
    cv_waiter *w = p;
    dlock_mutex_t own_m, *m = w->m;
    dlock_cond_t own_c, *c = w->c;
    int rc = 0;
    if (m == NULL) {
        m = &own_m;
        c = &own_c;
        DLT_CK(dlock_mutex_init(m, w->name, NULL), 0);
        DLT_CK(dlock_cond_init(c, w->name), 0);
    }
    DLT_CK(dlock_mutex_lock(m), 0);
    w->fence_before = dlock_mutex_fence(m);
    w->t_ready = dlt_now();
    dlt_flag_set(&w->ready, 1);
    while (dlt_flag_get(w->go) == 0) {
        rc = cv_wait_kind(w->kind, c, m, w->timed_ms);
        dlt_flag_add(&w->waits, 1);
        if (rc == ETIMEDOUT) dlt_flag_add(&w->timeouts, 1);
        else if (rc != 0) break;
        else if (dlt_flag_get(w->go) == 0) dlt_flag_add(&w->spurious, 1);
        if (dlock_mutex_holds(m) != 1) break;
    }
    w->rc = rc;
    w->holds_after = dlock_mutex_holds(m);
    w->fence_after = dlock_mutex_fence(m);
    w->t_returned = dlt_now();
    dlt_flag_set(&w->returned, 1);
    if (w->hold_after) dlt_flag_wait_ge(&w->unlock_go, 1, DLT_JOIN_MS);
    DLT_CK(rc, 0);
    DLT_CK(w->holds_after, 1);
    DLT_CK(dlock_mutex_unlock(m), 0);
    if (m == &own_m) {
        DLT_CK(dlock_cond_destroy(c), 0);
        DLT_CK(dlock_mutex_destroy(m), 0);
    }
    return 0;
}

/* Takes the mutex (another process / thread) while the waiter waits. */
typedef struct cv_prober {
    const char *name;
    dlock_mutex_t *m;
    int go, done, rc_lock, holds, rc_unlock;
    double took;
} cv_prober;

static int cv_prober_main(void *p) {
    cv_prober *pr = p;
    dlock_mutex_t own, *m = pr->m;
    double t0;
    DLT_CKT(dlt_flag_wait_ge(&pr->go, 1, DLT_JOIN_MS));
    if (m == NULL) {
        m = &own;
        DLT_CK(dlock_mutex_init(m, pr->name, NULL), 0);
    }
    t0 = dlt_now();
    pr->rc_lock = cv_timedlock_ms(m, 5000);
    pr->took = dlt_now() - t0;
    pr->holds = dlock_mutex_holds(m);
    pr->rc_unlock = pr->rc_lock == 0 ? dlock_mutex_unlock(m) : -1;
    dlt_flag_set(&pr->done, 1);
    DLT_CK(pr->rc_lock, 0);
    DLT_CK(pr->holds, 1);
    DLT_CK(pr->rc_unlock, 0);
    if (m == &own) DLT_CK(dlock_mutex_destroy(m), 0);
    return 0;
}

static void cv_release_reacquire_round(int waiter_proc, int kind) {
    static const char *name = "cv/reacquire";
    cv_waiter *w = DLT_SHM_NEW(cv_waiter, 1);
    cv_prober *pp = DLT_SHM_NEW(cv_prober, 2); /* [0] a process, [1] a thread */
    int *go = DLT_SHM_NEW(int, 1);
    dlock_mutex_t m;
    dlock_cond_t c;
    dlt_task tw, tp0, tp1;
    double t_unlock;

    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    w->name = name;
    w->m = waiter_proc ? NULL : &m;
    w->c = waiter_proc ? NULL : &c;
    w->kind = kind;
    w->timed_ms = 20000;
    w->go = go;
    w->hold_after = 1;
    pp[0].name = name;
    pp[1].m = &m;
    /* Processes first, then threads. */
    dlt_task_start(&tp0, DLT_PROC, cv_prober_main, &pp[0]);
    if (waiter_proc) dlt_task_start(&tw, DLT_PROC, cv_waiter_main, w);
    if (!waiter_proc) dlt_task_start(&tw, DLT_THREAD, cv_waiter_main, w);
    dlt_task_start(&tp1, DLT_THREAD, cv_prober_main, &pp[1]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&w->ready, 1, 10000));

    /* While it waits, the mutex is free: a process and a thread take it. */
    dlt_flag_set(&pp[0].go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tp0, DLT_JOIN_MS), 0);
    dlt_flag_set(&pp[1].go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tp1, DLT_JOIN_MS), 0);
    fprintf(stderr, "  (waiter a %s, kind %d) a process took the mutex in %.3f s, a thread in %.3f s\n",
            waiter_proc ? "process" : "thread", kind, pp[0].took, pp[1].took);

    /* Woken while we hold the mutex: it must not return before it has it. */
    DLT_ASSERT_ERR(cv_timedlock_ms(&m, 5000), 0);
    dlt_flag_set(go, 1);
    DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
    dlt_sleep_ms(400);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&w->returned), 0);
    t_unlock = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT_TRUE(dlt_flag_wait_ge(&w->returned, 1, 3000));
    /* It holds the mutex: nobody else can have it. */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    dlt_flag_set(&w->unlock_go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tw, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(w->rc, 0);
    DLT_ASSERT_INT_EQ(w->holds_after, 1);
    DLT_ASSERT_INT_EQ(w->timeouts, 0);
    CU_ASSERT_TRUE(w->fence_after > w->fence_before); /* a new acquisition */
    CU_ASSERT_TRUE(w->t_returned >= t_unlock);
    fprintf(stderr, "  returned %.3f s after our unlock (%d waits, %d spurious)\n", w->t_returned - t_unlock,
            w->waits, w->spurious);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(w, 1);
    DLT_SHM_FREE(pp, 2);
    DLT_SHM_FREE(go, 1);
}

static void test_cond_wait_releases_and_reacquires(void) {
    cv_release_reacquire_round(1, 0);
    cv_release_reacquire_round(0, 0);
    cv_release_reacquire_round(1, 1);
    cv_release_reacquire_round(0, 2);
}

/* ========================================================================
 * No lost wake-up: 50 rounds of "waiter waits; signaller locks the mutex
 * (so the waiter released it), signals, unlocks"; each round the waiter
 * returns within 1 s.
 * ====================================================================== */

#define CV_ROUNDS 50

typedef struct cv_rounds {
    const char *name;
    dlock_mutex_t *m; /* thread: shared objects; process: NULL */
    dlock_cond_t *c;
    int n;
    int ready;    /* round announced (under the mutex, just before waiting) */
    int go;       /* the predicate: round number released by the signaller */
    int returned; /* round the waiter has come back from */
    int spurious, timeouts, bad_holds;
    int rc;
} cv_rounds;

static int cv_rounds_waiter(void *p) {
    cv_rounds *r = p;
    dlock_mutex_t own_m, *m = r->m;
    dlock_cond_t own_c, *c = r->c;
    int i;
    if (m == NULL) {
        m = &own_m;
        c = &own_c;
        DLT_CK(dlock_mutex_init(m, r->name, NULL), 0);
        DLT_CK(dlock_cond_init(c, r->name), 0);
    }
    for (i = 1; i <= r->n; i++) {
        DLT_CK(dlock_mutex_lock(m), 0);
        dlt_flag_set(&r->ready, i);
        while (dlt_flag_get(&r->go) < i) {
            int rc = cv_wait_kind(i, c, m, 10000);
            if (rc == ETIMEDOUT) dlt_flag_add(&r->timeouts, 1);
            else if (rc != 0) {
                r->rc = rc;
                return DLT_CK_FAIL("cv_wait_kind", rc, 0);
            } else if (dlt_flag_get(&r->go) < i) {
                dlt_flag_add(&r->spurious, 1);
            }
            if (dlock_mutex_holds(m) != 1) dlt_flag_add(&r->bad_holds, 1);
        }
        dlt_flag_set(&r->returned, i);
        DLT_CK(dlock_mutex_unlock(m), 0);
    }
    if (m == &own_m) {
        DLT_CK(dlock_cond_destroy(c), 0);
        DLT_CK(dlock_mutex_destroy(m), 0);
    }
    return 0;
}

static void cv_rounds_run(int proc, const char *name) {
    cv_rounds *r = DLT_SHM_NEW(cv_rounds, 1);
    dlock_mutex_t m;
    dlock_cond_t c;
    dlt_task t;
    double worst = 0, sum = 0;
    int i, late = 0, stuck = 0;

    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    r->name = name;
    r->m = proc ? NULL : &m;
    r->c = proc ? NULL : &c;
    r->n = CV_ROUNDS;
    dlt_task_start(&t, proc, cv_rounds_waiter, r);
    for (i = 1; i <= CV_ROUNDS && !stuck; i++) {
        double t0, d;
        if (!dlt_flag_wait_ge(&r->ready, i, 10000)) {
            fprintf(stderr, "  round %d: the waiter never announced itself\n", i);
            stuck = 1;
            break;
        }
        /* Taking the mutex proves the waiter released it in wait. */
        int rc = cv_timedlock_ms(&m, 5000);
        DLT_ASSERT_ERR(rc, 0);
        if (rc != 0) {
            stuck = 1;
            break;
        }
        dlt_flag_set(&r->go, i);
        t0 = dlt_now();
        DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        if (!dlt_flag_wait_ge(&r->returned, i, 1000)) {
            late++;
            fprintf(stderr, "  round %d (kind %d): the waiter did not return within 1 s\n", i, i % 3);
            if (!dlt_flag_wait_ge(&r->returned, i, 15000)) stuck = 1;
        }
        d = dlt_now() - t0;
        sum += d;
        if (d > worst) worst = d;
    }
    if (stuck) {
        /* Let a stuck waiter out, so that the join below ends. */
        dlt_flag_set(&r->go, CV_ROUNDS + 1);
        (void)dlock_cond_broadcast(&c);
    }
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(stuck, 0);
    DLT_ASSERT_INT_EQ(late, 0);
    DLT_ASSERT_INT_EQ(r->timeouts, 0);
    DLT_ASSERT_INT_EQ(r->bad_holds, 0);
    fprintf(stderr, "  waiter a %s: %d rounds, wake-up latency mean %.1f ms, worst %.1f ms, %d spurious\n",
            proc ? "process" : "thread", CV_ROUNDS, 1000 * sum / CV_ROUNDS, 1000 * worst, r->spurious);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(r, 1);
}

static void test_cond_signal_after_release_no_lost_wakeup(void) {
    static char bin[DLOCK_NAME_MAX + 1];
    cv_rounds_run(DLT_PROC, "cv/rounds");
    cv_rounds_run(DLT_THREAD, "cv/rounds");
    /* A 512-byte name of arbitrary bytes, braces and ":cond" in it. */
    cv_binary_name(bin);
    cv_rounds_run(DLT_PROC, bin);
}

/* ========================================================================
 * broadcast wakes all: 4 waiters (2 processes x 2 threads), one broadcast.
 * signal wakes at least one: 3 waiters, one signal.
 * ====================================================================== */

typedef struct cv_group {
    const char *name;
    int registered;  /* waiters that are about to wait (incremented under the mutex) */
    int woke;        /* waiters back from wait */
    int go;          /* predicate (broadcast test), 0: single wait, no predicate */
    int use_pred;
    long timed_ms;
    int rcs[8];
    int holds[8];
    double t_woke[8];
    int next;        /* slot allocator */
    int spurious;
} cv_group;

typedef struct cv_gthread {
    cv_group *g;
    dlock_mutex_t *m;
    dlock_cond_t *c;
    int rc;
} cv_gthread;

/* One waiter: lock; registered++; wait (in a predicate loop, or once);
 * note when and with what it came back; unlock. */
static int cv_group_wait(cv_group *g, dlock_mutex_t *m, dlock_cond_t *c) {
    int slot = dlt_flag_add(&g->next, 1) - 1, rc;
    DLT_CK(dlock_mutex_lock(m), 0);
    dlt_flag_add(&g->registered, 1);
    if (g->use_pred) {
        rc = 0;
        while (dlt_flag_get(&g->go) == 0) {
            rc = cv_timedwait_ms(c, m, g->timed_ms);
            if (rc != 0) break;
            if (dlt_flag_get(&g->go) == 0) dlt_flag_add(&g->spurious, 1);
        }
    } else {
        rc = cv_timedwait_ms(c, m, g->timed_ms);
    }
    g->rcs[slot] = rc;
    g->holds[slot] = dlock_mutex_holds(m);
    g->t_woke[slot] = dlt_now();
    dlt_flag_add(&g->woke, 1);
    DLT_CK(g->holds[slot], 1);
    DLT_CK(dlock_mutex_unlock(m), 0);
    return 0;
}

static void *cv_gthread_main(void *p) {
    cv_gthread *t = p;
    t->rc = cv_group_wait(t->g, t->m, t->c);
    return NULL;
}

/* A process with nthreads waiter threads on its own objects. */
typedef struct cv_gproc {
    cv_group *g;
    int nthreads;
} cv_gproc;

static int cv_gproc_main(void *p) {
    cv_gproc *gp = p;
    dlock_mutex_t m;
    dlock_cond_t c;
    pthread_t th[4];
    cv_gthread t[4];
    int i, bad = 0;
    DLT_CK(dlock_mutex_init(&m, gp->g->name, NULL), 0);
    DLT_CK(dlock_cond_init(&c, gp->g->name), 0);
    for (i = 0; i < gp->nthreads; i++) {
        t[i].g = gp->g;
        t[i].m = &m;
        t[i].c = &c;
        t[i].rc = -1;
        DLT_CK(pthread_create(&th[i], NULL, cv_gthread_main, &t[i]), 0);
    }
    for (i = 0; i < gp->nthreads; i++) {
        pthread_join(th[i], NULL);
        if (t[i].rc != 0) bad = t[i].rc;
    }
    if (bad) return bad;
    DLT_CK(dlock_cond_destroy(&c), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_cond_broadcast_wakes_all(void) {
    static const char *name = "cv/broadcast";
    cv_group *g = DLT_SHM_NEW(cv_group, 1);
    cv_gproc *gp = DLT_SHM_NEW(cv_gproc, 2);
    dlock_mutex_t m;
    dlock_cond_t c;
    dlt_task t[2];
    double tb, worst = 0;
    int i;

    g->name = name;
    g->use_pred = 1;
    g->timed_ms = 10000; /* a safety net only: none may time out */
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    for (i = 0; i < 2; i++) {
        gp[i].g = g;
        gp[i].nthreads = 2;
        dlt_task_start(&t[i], DLT_PROC, cv_gproc_main, &gp[i]);
    }
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&g->registered, 4, 10000));
    /* Every one of them released the mutex in wait, or we could not have it. */
    DLT_ASSERT_ERR(cv_timedlock_ms(&m, 5000), 0);
    fprintf(stderr, "  registered on the server: %lld\n", cv_registered(name));
    dlt_flag_set(&g->go, 1);
    tb = dlt_now();
    DLT_ASSERT_ERR(dlock_cond_broadcast(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT_TRUE(dlt_flag_wait_ge(&g->woke, 4, 2000));
    for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    for (i = 0; i < 4; i++) {
        DLT_ASSERT_ERR(g->rcs[i], 0);
        DLT_ASSERT_INT_EQ(g->holds[i], 1);
        if (g->t_woke[i] - tb > worst) worst = g->t_woke[i] - tb;
    }
    fprintf(stderr, "  all 4 back %.1f ms after the broadcast (%d spurious)\n", 1000 * worst, g->spurious);
    CU_ASSERT_TRUE(worst < 2.0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(g, 1);
    DLT_SHM_FREE(gp, 2);
}

/* 3 waiters (2 processes, 1 thread here), each a single timedwait with no
 * predicate.  Part A: one signal wakes at least one; the others wait on
 * until a broadcast.  Part B: three signals wake all three, one or more at
 * a time (signal need not hold the mutex). */
static void cv_three_waiters(cv_group *g, dlt_task *t, cv_gproc *gp, dlock_mutex_t *m, dlock_cond_t *c,
                             cv_gthread *gt, pthread_t *th) {
    int i;
    memset(g, 0, sizeof *g);
    g->name = "cv/signal";
    g->timed_ms = 15000;
    for (i = 0; i < 2; i++) {
        gp[i].g = g;
        gp[i].nthreads = 1;
        dlt_task_start(&t[i], DLT_PROC, cv_gproc_main, &gp[i]);
    }
    gt->g = g;
    gt->m = m;
    gt->c = c;
    gt->rc = -1;
    CU_ASSERT_FATAL(pthread_create(th, NULL, cv_gthread_main, gt) == 0);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&g->registered, 3, 10000));
    DLT_ASSERT_ERR(cv_timedlock_ms(m, 5000), 0); /* all three released it */
    DLT_ASSERT_ERR(dlock_mutex_unlock(m), 0);
}

static void cv_three_join(cv_group *g, dlt_task *t, cv_gthread *gt, pthread_t th) {
    int i;
    for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_INT_EQ(gt->rc, 0);
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_ERR(g->rcs[i], 0); /* none timed out */
        DLT_ASSERT_INT_EQ(g->holds[i], 1);
    }
}

static void test_cond_signal_wakes_at_least_one(void) {
    cv_group *g = DLT_SHM_NEW(cv_group, 1);
    cv_gproc *gp = DLT_SHM_NEW(cv_gproc, 2);
    dlock_mutex_t m;
    dlock_cond_t c;
    cv_gthread gt;
    pthread_t th;
    dlt_task t[2];
    int n1, k;

    DLT_ASSERT_ERR(dlock_mutex_init(&m, "cv/signal", NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, "cv/signal"), 0);

    /* Part A. */
    cv_three_waiters(g, t, gp, &m, &c, &gt, &th);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT_TRUE(dlt_flag_wait_ge(&g->woke, 1, 1000));
    dlt_sleep_ms(500);
    n1 = dlt_flag_get(&g->woke);
    fprintf(stderr, "  one signal, 3 waiters: %d woke\n", n1);
    CU_ASSERT_TRUE(n1 >= 1);
    DLT_ASSERT_ERR(dlock_cond_broadcast(&c), 0);
    CU_ASSERT_TRUE(dlt_flag_wait_ge(&g->woke, 3, 2000));
    cv_three_join(g, t, &gt, th);

    /* Part B: after k signals, at least k of them are back. */
    cv_three_waiters(g, t, gp, &m, &c, &gt, &th);
    for (k = 1; k <= 3; k++) {
        DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
        if (!dlt_flag_wait_ge(&g->woke, k, 1000)) {
            fprintf(stderr, "  after %d signals only %d of 3 waiters woke\n", k, dlt_flag_get(&g->woke));
            CU_FAIL("a signal woke nobody");
        }
        dlt_sleep_ms(100);
    }
    if (dlt_flag_get(&g->woke) < 3) (void)dlock_cond_broadcast(&c); /* let them out */
    cv_three_join(g, t, &gt, th);

    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(g, 1);
    DLT_SHM_FREE(gp, 2);
}

/* ========================================================================
 * timedwait / clockwait: ETIMEDOUT by the deadline (+ margin), holding the
 * mutex; a deadline in the past; CLOCK_MONOTONIC.
 * ====================================================================== */

#define CV_MARGIN 1.5 /* s: how late a timed-out wait may come back */

typedef struct cv_timed_arg {
    int idx;
} cv_timed_arg;

static int cv_timed_worker(void *p) {
    cv_timed_arg *a = p;
    char name[64];
    dlock_mutex_t m;
    dlock_cond_t c;
    struct timespec ts;
    double t0, el;

    snprintf(name, sizeof name, "cv/timed/%d", a->idx);
    DLT_CK(dlock_mutex_init(&m, name, NULL), 0);
    DLT_CK(dlock_cond_init(&c, name), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    uint64_t f0 = dlock_mutex_fence(&m);

    t0 = dlt_now();
    DLT_CK(cv_timedwait_ms(&c, &m, 300), ETIMEDOUT);
    el = dlt_now() - t0;
    DLT_CKT(el >= 0.295 && el < 0.3 + CV_MARGIN);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CKT(dlock_mutex_fence(&m) > f0);

    t0 = dlt_now();
    DLT_CK(cv_clockwait_ms(&c, &m, 400), ETIMEDOUT);
    el = dlt_now() - t0;
    DLT_CKT(el >= 0.395 && el < 0.4 + CV_MARGIN);
    DLT_CK(dlock_mutex_holds(&m), 1);

    t0 = dlt_now();
    ts = dlt_abs_in(CLOCK_REALTIME, 250);
    DLT_CK(dlock_cond_clockwait(&c, &m, CLOCK_REALTIME, &ts), ETIMEDOUT);
    el = dlt_now() - t0;
    DLT_CKT(el >= 0.245 && el < 0.25 + CV_MARGIN);
    DLT_CK(dlock_mutex_holds(&m), 1);

    /* Deadlines in the past: ETIMEDOUT soon, holding the mutex. */
    t0 = dlt_now();
    DLT_CK(cv_timedwait_ms(&c, &m, -1000), ETIMEDOUT);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(cv_clockwait_ms(&c, &m, -1000), ETIMEDOUT);
    DLT_CK(dlock_mutex_holds(&m), 1);
    ts.tv_sec = 0;
    ts.tv_nsec = 0;
    DLT_CK(dlock_cond_timedwait(&c, &m, &ts), ETIMEDOUT);
    DLT_CK(dlock_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CKT(dlt_now() - t0 < CV_MARGIN);

    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_holds(&m), 0);
    DLT_CK(dlock_cond_destroy(&c), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

/* A timed-out waiter whose mutex someone else holds at the deadline
 * comes back only once it has the mutex again. */
typedef struct cv_late {
    dlock_mutex_t *m;
    dlock_cond_t *c;
    int ready, done, rc, holds;
    double t_done;
} cv_late;

static int cv_late_main(void *p) {
    cv_late *l = p;
    DLT_CK(dlock_mutex_lock(l->m), 0);
    dlt_flag_set(&l->ready, 1);
    l->rc = cv_timedwait_ms(l->c, l->m, 300);
    l->holds = dlock_mutex_holds(l->m);
    l->t_done = dlt_now();
    dlt_flag_set(&l->done, 1);
    if (l->holds) DLT_CK(dlock_mutex_unlock(l->m), 0);
    return 0;
}

static void test_cond_timedwait_clockwait(void) {
    cv_timed_arg *a = DLT_SHM_NEW(cv_timed_arg, 4);
    cv_late *l = DLT_SHM_NEW(cv_late, 1);
    dlock_mutex_t m;
    dlock_cond_t c;
    dlt_task t;
    double t_unlock;
    int i;

    for (i = 0; i < 4; i++) a[i].idx = i;
    DLT_ASSERT_INT_EQ(cv_timed_worker(&a[0]), 0);
    dlt_run_all(cv_timed_worker, a, sizeof *a, 2, 2);

    DLT_ASSERT_ERR(dlock_mutex_init(&m, "cv/late", NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, "cv/late"), 0);
    l->m = &m;
    l->c = &c;
    dlt_task_start(&t, DLT_THREAD, cv_late_main, l);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&l->ready, 1, 10000));
    DLT_ASSERT_ERR(cv_timedlock_ms(&m, 5000), 0); /* it released it */
    dlt_sleep_ms(1000);                           /* well past its deadline */
    DLT_ASSERT_INT_EQ(dlt_flag_get(&l->done), 0);       /* still wanting the mutex */
    t_unlock = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(l->rc, ETIMEDOUT);
    DLT_ASSERT_INT_EQ(l->holds, 1);
    CU_ASSERT_TRUE(l->t_done >= t_unlock);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(a, 4);
    DLT_SHM_FREE(l, 1);
}

/* ========================================================================
 * destroy: EBUSY while a thread of this process waits; 0 when idle; a
 * waiter in another process does not make it busy here.
 * ====================================================================== */

static void test_cond_destroy(void) {
    static const char *name = "cv/destroy";
    cv_waiter *w = DLT_SHM_NEW(cv_waiter, 2); /* [0] a thread, [1] a process */
    int *go = DLT_SHM_NEW(int, 2);
    dlock_mutex_t m;
    dlock_cond_t c;
    dlt_task tp, tt;
    int i;

    /* Idle: 0, even after use. */
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
    DLT_ASSERT_ERR(dlock_cond_broadcast(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(cv_timedwait_ms(&c, &m, 100), ETIMEDOUT);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);

    /* A process waits on its own object of the same name, then a thread of
     * this process on ours. */
    w[1].name = name;
    w[1].go = &go[1];
    w[1].kind = 0;
    dlt_task_start(&tp, DLT_PROC, cv_waiter_main, &w[1]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&w[1].ready, 1, 10000));
    w[0].m = &m;
    w[0].c = &c;
    w[0].go = &go[0];
    w[0].kind = 1;
    w[0].timed_ms = 20000;
    dlt_task_start(&tt, DLT_THREAD, cv_waiter_main, &w[0]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&w[0].ready, 1, 10000));
    DLT_ASSERT_ERR(cv_timedlock_ms(&m, 5000), 0); /* both are in wait now */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_ERR(dlock_cond_destroy(&c), EBUSY);
        dlt_sleep_ms(50);
    }
    /* Still a working object after EBUSY: wake our thread, which returns. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_flag_set(&go[0], 1);
    DLT_ASSERT_ERR(dlock_cond_broadcast(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tt, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(w[0].timeouts, 0);
    /* The other process's waiter may have woken too (broadcast); it waits
     * on while go[1] is 0.  Nobody here waits: destroy is 0. */
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), EINVAL);
    DLT_ASSERT_ERR(dlock_cond_signal(&c), EINVAL);
    /* A new object of the same name still reaches the other process. */
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    DLT_ASSERT_ERR(cv_timedlock_ms(&m, 5000), 0);
    dlt_flag_set(&go[1], 1);
    DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT_TRUE(dlt_flag_wait_ge(&w[1].returned, 1, 2000));
    DLT_ASSERT_INT_EQ(dlt_task_join(&tp, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(w[1].timeouts, 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(w, 2);
    DLT_SHM_FREE(go, 2);
}

/* ========================================================================
 * Objects inherited through fork: a child signals a waiter of its parent
 * with the parent's objects, then destroys them (no thread of the child
 * waits on them: 0, not EBUSY).
 * ====================================================================== */

static dlock_mutex_t cv_fork_m;
static dlock_cond_t cv_fork_c;

typedef struct cv_fork_rep {
    int *go;
    int holds, lock_rc, signal_rc, unlock_rc, cond_destroy_rc, mutex_destroy_rc;
} cv_fork_rep;

static int cv_fork_child(void *p) {
    cv_fork_rep *r = p;
    r->holds = dlock_mutex_holds(&cv_fork_m);
    r->lock_rc = cv_timedlock_ms(&cv_fork_m, 5000);
    dlt_flag_set(r->go, 1);
    r->signal_rc = dlock_cond_signal(&cv_fork_c);
    r->unlock_rc = r->lock_rc == 0 ? dlock_mutex_unlock(&cv_fork_m) : -1;
    r->cond_destroy_rc = dlock_cond_destroy(&cv_fork_c);
    r->mutex_destroy_rc = dlock_mutex_destroy(&cv_fork_m);
    DLT_CK(r->holds, 0);
    DLT_CK(r->lock_rc, 0);
    DLT_CK(r->signal_rc, 0);
    DLT_CK(r->unlock_rc, 0);
    DLT_CK(r->mutex_destroy_rc, 0);
    DLT_CK(r->cond_destroy_rc, 0);
    return 0;
}

static void test_cond_fork_inherited(void) {
    cv_waiter *w = DLT_SHM_NEW(cv_waiter, 1);
    cv_fork_rep *r = DLT_SHM_NEW(cv_fork_rep, 1);
    int *go = DLT_SHM_NEW(int, 1);
    dlt_task tw, tc;

    DLT_ASSERT_ERR(dlock_mutex_init(&cv_fork_m, "cv/fork", NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&cv_fork_c, "cv/fork"), 0);
    w->m = &cv_fork_m;
    w->c = &cv_fork_c;
    w->go = go;
    w->kind = 1;
    w->timed_ms = 20000;
    r->go = go;
    dlt_task_start(&tw, DLT_THREAD, cv_waiter_main, w);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&w->ready, 1, 10000));
    DLT_ASSERT_ERR(cv_timedlock_ms(&cv_fork_m, 5000), 0); /* it is in wait */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&cv_fork_m), 0);
    /* Fork while our thread waits (it is running, not starting). */
    dlt_task_start(&tc, DLT_PROC, cv_fork_child, r);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tc, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(r->holds, 0);
    DLT_ASSERT_ERR(r->lock_rc, 0);
    DLT_ASSERT_ERR(r->signal_rc, 0);
    DLT_ASSERT_ERR(r->unlock_rc, 0);
    DLT_ASSERT_ERR(r->mutex_destroy_rc, 0);
    if (r->cond_destroy_rc != 0)
        fprintf(stderr, "  the child's dlock_cond_destroy of the inherited object: %s (a thread of the "
                        "PARENT waits on it, none of the child's)\n", dlt_errno_name(r->cond_destroy_rc));
    DLT_ASSERT_ERR(r->cond_destroy_rc, 0);
    /* The child's signal reached our thread. */
    CU_ASSERT_TRUE(dlt_flag_wait_ge(&w->returned, 1, 3000));
    DLT_ASSERT_INT_EQ(dlt_task_join(&tw, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(w->timeouts, 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&cv_fork_c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&cv_fork_m), 0);
    DLT_SHM_FREE(w, 1);
    DLT_SHM_FREE(r, 1);
    DLT_SHM_FREE(go, 1);
}

/* ========================================================================
 * A waiter process SIGKILLed in wait does not swallow signals forever:
 * once its registration lapses (3 s, src/api/cond.c), one signal reaches a
 * live waiter.
 * ====================================================================== */

typedef struct cv_dead {
    int registered;
} cv_dead;

static void *cv_dead_thread(void *p) {
    dlock_cond_t *c = ((void **)p)[0];
    dlock_mutex_t *m = ((void **)p)[1];
    cv_dead *d = ((void **)p)[2];
    if (dlock_mutex_lock(m) != 0) return NULL;
    dlt_flag_add(&d->registered, 1);
    for (;;) (void)dlock_cond_wait(c, m); /* until SIGKILL */
    return NULL;
}

/* A process with 2 threads waiting for ever; it is killed. */
static int cv_dead_main(void *p) {
    static dlock_mutex_t m;
    static dlock_cond_t c;
    static void *args[3];
    pthread_t th[2];
    DLT_CK(dlock_mutex_init(&m, "cv/killed", NULL), 0);
    DLT_CK(dlock_cond_init(&c, "cv/killed"), 0);
    args[0] = &c;
    args[1] = &m;
    args[2] = p;
    DLT_CK(pthread_create(&th[0], NULL, cv_dead_thread, args), 0);
    DLT_CK(pthread_create(&th[1], NULL, cv_dead_thread, args), 0);
    pthread_join(th[0], NULL); /* never */
    return 99;
}

static void test_cond_waiter_killed(void) {
    static const char *name = "cv/killed";
    cv_dead *d = DLT_SHM_NEW(cv_dead, 1);
    cv_waiter *w = DLT_SHM_NEW(cv_waiter, 1);
    int *go = DLT_SHM_NEW(int, 1);
    dlock_mutex_t m;
    dlock_cond_t c;
    dlt_task td, tw;
    double t_kill, t_sig2 = 0;
    int early;

    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&c, name), 0);
    dlt_task_start(&td, DLT_PROC, cv_dead_main, d);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&d->registered, 2, 10000));
    DLT_ASSERT_ERR(cv_timedlock_ms(&m, 5000), 0); /* both of its threads are in wait */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    /* The live waiter: a thread here, registered after the doomed ones. */
    w->m = &m;
    w->c = &c;
    w->go = go;
    w->kind = 1;
    w->timed_ms = 20000;
    dlt_task_start(&tw, DLT_THREAD, cv_waiter_main, w);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&w->ready, 1, 10000));
    DLT_ASSERT_ERR(cv_timedlock_ms(&m, 5000), 0);
    fprintf(stderr, "  registered before the kill: %lld\n", cv_registered(name));
    dlt_flag_set(go, 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    kill(td.pid, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_task_join(&td, 10000), 128 + SIGKILL);
    t_kill = dlt_now();
    /* A signal now may go to a dead registration... */
    DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
    early = dlt_flag_wait_ge(&w->returned, 1, 500);
    if (!early) {
        /* ...but not once the dead ones have lapsed (3 s TTL). */
        double left = 3.5 - (dlt_now() - t_kill);
        if (left > 0) dlt_sleep_ms((unsigned)(left * 1000));
        fprintf(stderr, "  registered %.1f s after the kill: %lld\n", dlt_now() - t_kill, cv_registered(name));
        t_sig2 = dlt_now();
        DLT_ASSERT_ERR(dlock_cond_signal(&c), 0);
        if (!dlt_flag_wait_ge(&w->returned, 1, 1000)) CU_FAIL("a signal after the dead waiters lapsed did not wake the live one");
    }
    fprintf(stderr, "  live waiter woken %.2f s after the kill (%s signal)\n", w->t_returned - t_kill,
            early ? "first" : "second");
    if (!dlt_flag_get(&w->returned)) {
        (void)dlock_cond_broadcast(&c); /* let it out */
        dlt_flag_wait_ge(&w->returned, 1, 3000);
    }
    CU_ASSERT_TRUE(dlt_flag_get(&w->returned) && w->t_returned - t_kill < 5.0);
    if (t_sig2 > 0) CU_ASSERT_TRUE(w->t_returned - t_sig2 < 1.0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tw, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(w->timeouts, 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(d, 1);
    DLT_SHM_FREE(w, 1);
    DLT_SHM_FREE(go, 1);
}

/* ========================================================================
 * A transient fault during a wait leaves no stale registration behind
 * that swallows a later signal.
 *
 * The waiter's client goes through a proxy.  While the waiter sleeps, the
 * proxy turns into a black hole for a moment, so its periodic refresh of
 * its registration gets no answer; its wait comes back (spuriously, or
 * with an error) and, the proxy healed, the waiter waits again on the
 * predicate.  A signal sent after that second wait released the mutex
 * must reach it -- not the registration the first wait left behind.
 * ====================================================================== */

typedef struct cv_flaky {
    dlock_mutex_t *m;
    dlock_cond_t *c;
    int ready, go, waits_started, returns, returned, last_rc, errors, relock_fail;
    double t_returned;
} cv_flaky;

static int cv_flaky_main(void *p) {
    cv_flaky *f = p;
    double end = dlt_now() + DLT_JOIN_MS / 1000.0;
    while (cv_timedlock_ms(f->m, 500) != 0)
        if (dlt_now() > end) return DLT_CKT_FAIL("locked");
    dlt_flag_set(&f->ready, 1);
    while (dlt_flag_get(&f->go) == 0) {
        int rc;
        dlt_flag_add(&f->waits_started, 1);
        rc = dlock_cond_wait(f->c, f->m);
        f->last_rc = rc;
        if (rc != 0) dlt_flag_add(&f->errors, 1);
        dlt_flag_add(&f->returns, 1);
        if (dlock_mutex_holds(f->m) != 1) {
            /* A failed reacquire (the server was unreachable): take it again. */
            while (cv_timedlock_ms(f->m, 500) != 0) {
                dlt_flag_add(&f->relock_fail, 1);
                if (dlt_now() > end) return DLT_CKT_FAIL("locked again");
            }
        }
    }
    f->t_returned = dlt_now();
    dlt_flag_set(&f->returned, 1);
    DLT_CK(dlock_mutex_unlock(f->m), 0);
    return 0;
}

/* The score of the first member of the zset key, or -1. */
static double cv_first_score(const char *key) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "ZRANGE %s 0 0 WITHSCORES", key);
    double v = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
        v = atof(r->element[1]->str);
    if (r != NULL) freeReplyObject(r);
    return v;
}

static void test_cond_transient_fault_no_stale_registration(void) {
    static const char *name = "cv/flaky";
    static const char *key = "dlock:{cv/flaky}:cond";
    cv_flaky *f = DLT_SHM_NEW(cv_flaky, 1);
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *cl = NULL;
    dlock_mutex_t m, md;
    dlock_cond_t c, cd;
    dlt_task t;
    double t_drop, t_pass, t_sig, s0, end;
    int woke, came_back;

    CU_ASSERT_PTR_NOT_NULL_FATAL(px);
    DLT_ASSERT_ERR(dlt_client_make(&cl, dlt_proxy_url(px), 300), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 0, cl), 0);
    DLT_ASSERT_ERR(dlock_cond_init_client(&c, name, cl), 0);
    /* Ours, straight to the server. */
    DLT_ASSERT_ERR(dlock_mutex_init(&md, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&cd, name), 0);
    f->m = &m;
    f->c = &c;
    dlt_task_start(&t, DLT_THREAD, cv_flaky_main, f);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait_ge(&f->ready, 1, 10000));
    DLT_ASSERT_ERR(cv_timedlock_ms(&md, 5000), 0); /* it is in wait */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&md), 0);

    /* Right after one of its refreshes, the black hole. */
    s0 = cv_first_score(key);
    end = dlt_now() + 3.0;
    while (cv_first_score(key) == s0 && dlt_now() < end) usleep(1000);
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    t_drop = dlt_now();
    /* A wait may also ride the fault out (fine): then it is still the first. */
    came_back = dlt_flag_wait_ge(&f->returns, 1, 2500);
    dlt_proxy_pass(px);
    t_pass = dlt_now();
    if (came_back) {
        /* It waits again, on the same predicate. */
        CU_ASSERT_TRUE(dlt_flag_wait_ge(&f->waits_started, 2, 10000));
        DLT_ASSERT_ERR(cv_timedlock_ms(&md, 5000), 0); /* ...and released the mutex */
        fprintf(stderr, "  wait came back %.2f s into the fault (%s; %d relock failures); registrations now: %lld\n",
                t_pass - t_drop, dlt_errno_name(f->last_rc) ? dlt_errno_name(f->last_rc) : "?", f->relock_fail,
                cv_registered(name));
    } else {
        DLT_ASSERT_ERR(cv_timedlock_ms(&md, 5000), 0);
        fprintf(stderr, "  the wait rode out a %.2f s fault; registrations now: %lld\n", t_pass - t_drop,
                cv_registered(name));
    }
    dlt_flag_set(&f->go, 1);
    t_sig = dlt_now();
    DLT_ASSERT_ERR(dlock_cond_signal(&cd), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&md), 0);
    woke = dlt_flag_wait_ge(&f->returned, 1, 2000);
    fprintf(stderr, "  signal sent %.2f s after the fault began: the waiter %s\n", t_sig - t_drop,
            woke ? "woke" : "did NOT wake within 2 s (the signal went to the stale registration)");
    if (!woke) {
        DLT_ASSERT_ERR(dlock_cond_broadcast(&cd), 0); /* let it out */
        dlt_flag_wait_ge(&f->returned, 1, 5000);
    }
    CU_ASSERT_TRUE(woke);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&c), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&cd), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&md), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_proxy_stop(px);
    DLT_SHM_FREE(f, 1);
}

/* ========================================================================
 * The bounded producer/consumer queue across processes.
 *
 * The queue lives in Redis: the list pc:q, its length in pc:count, the
 * items put and taken so far in pc:put and pc:taken, all three counters
 * read and written with plain GET / SET under the dlock mutex (so a
 * breach of mutual exclusion shows as wrong totals).  Capacity 5; two
 * condition variables, not_full and not_empty, as in the textbook; 2
 * producer processes put 200 items each; 5 consumer threads in 3
 * processes take them.  Every item must be taken exactly once, the queue
 * must never exceed its capacity, and no timedwait (a 10 s safety net) may
 * time out: a lost wake-up shows as a stall.
 * ====================================================================== */

enum { PC_CAP = 5, PC_N = 200, PC_PRODUCERS = 2, PC_TOTAL = PC_PRODUCERS * PC_N };
#define PC_WAIT_MS 10000
#define PC_BOUND_S 30.0

typedef struct pc_shared {
    int seen[PC_TOTAL];       /* times each item was taken */
    int inside, overlaps;     /* threads inside the critical section */
    int max_count, over_cap;  /* the queue's length as seen under the mutex */
    int mismatch;             /* pc:count != LLEN pc:q */
    int waits, timeouts;
    int errors;
    int taken_by[8];
} pc_shared;

typedef struct pc_arg {
    int producer;       /* 1 producer, 0 consumer */
    int id;             /* producer: 0..1; consumer: slot in taken_by */
    int threads;        /* consumer: threads in this process */
    int inherit;        /* use the parent's objects (initialised before fork) */
    pc_shared *sh;
} pc_arg;

static dlock_mutex_t pc_m;
static dlock_cond_t pc_not_full, pc_not_empty;

typedef struct pc_objs {
    dlock_mutex_t *m;
    dlock_cond_t *not_full, *not_empty;
} pc_objs;

static long long pc_get(redisContext *x, const char *key, int *err) {
    redisReply *r = redisCommand(x, "GET %s", key);
    long long v = 0;
    if (r == NULL) *err = 1;
    else if (r->type == REDIS_REPLY_STRING) v = atoll(r->str);
    else if (r->type != REDIS_REPLY_NIL) *err = 1;
    if (r != NULL) freeReplyObject(r);
    return v;
}

static void pc_set(redisContext *x, const char *key, long long v, int *err) {
    redisReply *r = redisCommand(x, "SET %s %lld", key, v);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) *err = 1;
    if (r != NULL) freeReplyObject(r);
}

/* An integer command: LLEN pc:q, or RPUSH pc:q v when fmt takes v. */
static long long pc_int(redisContext *x, int *err, const char *fmt, ...) {
    va_list ap;
    redisReply *r;
    va_start(ap, fmt);
    r = redisvCommand(x, fmt, ap);
    va_end(ap);
    long long out = -1;
    if (r == NULL) *err = 1;
    else if (r->type == REDIS_REPLY_INTEGER) out = r->integer;
    else if (r->type == REDIS_REPLY_STRING) out = atoll(r->str);
    else *err = 1;
    if (r != NULL) freeReplyObject(r);
    return out;
}

static redisContext *pc_connect(void) {
    struct timeval tv = { 5, 0 };
    redisContext *x = redisConnectWithTimeout("127.0.0.1", dlt_server.port, tv);
    if (x != NULL && x->err == 0) redisSetTimeout(x, tv);
    return x;
}

static void pc_enter(pc_shared *sh) {
    if (dlt_flag_add(&sh->inside, 1) != 1) dlt_flag_add(&sh->overlaps, 1);
}
static void pc_leave(pc_shared *sh) {
    dlt_flag_add(&sh->inside, -1);
}

/* One wait of the safety-net kind, leaving and re-entering the critical
 * section around it.  pred() is re-read by the caller. */
static int pc_wait(pc_shared *sh, dlock_cond_t *c, dlock_mutex_t *m) {
    int rc;
    pc_leave(sh);
    rc = cv_timedwait_ms(c, m, PC_WAIT_MS);
    pc_enter(sh);
    dlt_flag_add(&sh->waits, 1);
    if (rc == ETIMEDOUT) dlt_flag_add(&sh->timeouts, 1);
    else if (rc != 0) return DLT_CK_FAIL("dlock_cond_timedwait", rc, 0);
    DLT_CK(dlock_mutex_holds(m), 1);
    return 0;
}

static int pc_producer(pc_arg *a, pc_objs *o, redisContext *x) {
    int i, err = 0, rc;
    for (i = 0; i < PC_N && !err; i++) {
        long long v = (long long)a->id * PC_N + i, cnt, len, put;
        DLT_CK(dlock_mutex_lock(o->m), 0);
        pc_enter(a->sh);
        for (;;) {
            cnt = pc_get(x, "pc:count", &err);
            if (err || cnt < PC_CAP) break;
            if ((rc = pc_wait(a->sh, o->not_full, o->m)) != 0) return rc;
        }
        len = pc_int(x, &err, "LLEN pc:q");
        if (len != cnt) dlt_flag_add(&a->sh->mismatch, 1);
        (void)pc_int(x, &err, "RPUSH pc:q %lld", v);
        pc_set(x, "pc:count", cnt + 1, &err);
        if (cnt + 1 > PC_CAP) dlt_flag_add(&a->sh->over_cap, 1);
        dlt_flag_max(&a->sh->max_count, (int)(cnt + 1));
        put = pc_get(x, "pc:put", &err);
        pc_set(x, "pc:put", put + 1, &err);
        rc = dlock_cond_signal(o->not_empty);
        pc_leave(a->sh);
        DLT_CK(rc, 0);
        DLT_CK(dlock_mutex_unlock(o->m), 0);
    }
    DLT_CK(err, 0);
    return 0;
}

static int pc_consumer(pc_arg *a, pc_objs *o, redisContext *x, int slot) {
    int err = 0, rc;
    for (;;) {
        long long cnt, taken, v, len;
        redisReply *r;
        DLT_CK(dlock_mutex_lock(o->m), 0);
        pc_enter(a->sh);
        for (;;) {
            cnt = pc_get(x, "pc:count", &err);
            taken = pc_get(x, "pc:taken", &err);
            if (err || cnt > 0 || taken >= PC_TOTAL) break;
            if ((rc = pc_wait(a->sh, o->not_empty, o->m)) != 0) return rc;
        }
        if (err) {
            pc_leave(a->sh);
            (void)dlock_mutex_unlock(o->m);
            DLT_CK(err, 0);
        }
        if (cnt == 0) { /* all taken */
            pc_leave(a->sh);
            DLT_CK(dlock_mutex_unlock(o->m), 0);
            return 0;
        }
        len = pc_int(x, &err, "LLEN pc:q");
        if (len != cnt) dlt_flag_add(&a->sh->mismatch, 1);
        r = redisCommand(x, "LPOP pc:q");
        v = -1;
        if (r != NULL && r->type == REDIS_REPLY_STRING) v = atoll(r->str);
        if (r != NULL) freeReplyObject(r);
        if (v >= 0 && v < PC_TOTAL) dlt_flag_add(&a->sh->seen[v], 1);
        else dlt_flag_add(&a->sh->errors, 1);
        pc_set(x, "pc:count", cnt - 1, &err);
        pc_set(x, "pc:taken", taken + 1, &err);
        dlt_flag_add(&a->sh->taken_by[slot], 1);
        rc = 0;
        if (taken + 1 == PC_TOTAL) rc = dlock_cond_broadcast(o->not_empty); /* the others can stop */
        if (rc == 0) rc = dlock_cond_signal(o->not_full);
        pc_leave(a->sh);
        DLT_CK(rc, 0);
        DLT_CK(dlock_mutex_unlock(o->m), 0);
        DLT_CK(err, 0);
    }
}

typedef struct pc_thread {
    pc_arg *a;
    pc_objs *o;
    int slot, rc;
} pc_thread;

static void *pc_consumer_thread(void *p) {
    pc_thread *t = p;
    redisContext *x = pc_connect();
    if (x == NULL || x->err != 0) {
        t->rc = DLT_CKT_FAIL("connected");
    } else {
        t->rc = pc_consumer(t->a, t->o, x, t->slot);
    }
    if (t->rc != 0) {
        dlt_flag_add(&t->a->sh->errors, 1);
        fprintf(stderr, "  consumer thread (slot %d) failed: %d\n", t->slot, t->rc);
    }
    if (x != NULL) redisFree(x);
    return NULL;
}

static int pc_main(void *p) {
    pc_arg *a = p;
    dlock_mutex_t m;
    dlock_cond_t nf, ne;
    pc_objs o;
    int rc = 0, i;

    if (a->inherit) {
        o.m = &pc_m;
        o.not_full = &pc_not_full;
        o.not_empty = &pc_not_empty;
    } else {
        DLT_CK(dlock_mutex_init(&m, "pc/mutex", NULL), 0);
        DLT_CK(dlock_cond_init(&nf, "pc/not_full"), 0);
        DLT_CK(dlock_cond_init(&ne, "pc/not_empty"), 0);
        o.m = &m;
        o.not_full = &nf;
        o.not_empty = &ne;
    }
    if (a->producer) {
        redisContext *x = pc_connect();
        DLT_CKT(x != NULL && x->err == 0);
        rc = pc_producer(a, &o, x);
        redisFree(x);
    } else {
        pthread_t th[4];
        pc_thread t[4];
        for (i = 0; i < a->threads; i++) {
            t[i].a = a;
            t[i].o = &o;
            t[i].slot = a->id + i;
            t[i].rc = -1;
            DLT_CK(pthread_create(&th[i], NULL, pc_consumer_thread, &t[i]), 0);
        }
        for (i = 0; i < a->threads; i++) {
            pthread_join(th[i], NULL);
            if (t[i].rc != 0) rc = t[i].rc;
        }
    }
    if (rc != 0) return rc;
    DLT_CK(dlock_cond_destroy(o.not_empty), 0);
    DLT_CK(dlock_cond_destroy(o.not_full), 0);
    DLT_CK(dlock_mutex_destroy(o.m), 0);
    return 0;
}

static long long pc_value(const char *key) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET %s", key);
    long long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) v = atoll(r->str);
    if (r != NULL) freeReplyObject(r);
    return v;
}

static void test_cond_producer_consumer(void) {
    enum { NP = 5 };
    pc_shared *sh = DLT_SHM_NEW(pc_shared, 1);
    pc_arg *a = DLT_SHM_NEW(pc_arg, NP);
    dlt_task t[NP];
    double t0, el;
    int i, once = 0, never = 0, more = 0;
    long long sum = 0;

    /* The parent's objects, inherited by producer 0 and consumer 0. */
    DLT_ASSERT_ERR(dlock_mutex_init(&pc_m, "pc/mutex", NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&pc_not_full, "pc/not_full"), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&pc_not_empty, "pc/not_empty"), 0);
    /* producers */
    a[0] = (pc_arg){ .producer = 1, .id = 0, .inherit = 1, .sh = sh };
    a[1] = (pc_arg){ .producer = 1, .id = 1, .inherit = 0, .sh = sh };
    /* consumers: 1 thread (inherited objects), 1 thread, 3 threads */
    a[2] = (pc_arg){ .producer = 0, .id = 0, .threads = 1, .inherit = 1, .sh = sh };
    a[3] = (pc_arg){ .producer = 0, .id = 1, .threads = 1, .inherit = 0, .sh = sh };
    a[4] = (pc_arg){ .producer = 0, .id = 2, .threads = 3, .inherit = 0, .sh = sh };
    t0 = dlt_now();
    for (i = NP - 1; i >= 0; i--) dlt_task_start(&t[i], DLT_PROC, pc_main, &a[i]);
    for (i = 0; i < NP; i++) {
        int rc = dlt_task_join(&t[i], 60000);
        if (rc != 0) fprintf(stderr, "  (%s %d returned %d)\n", a[i].producer ? "producer" : "consumer", i, rc);
        DLT_ASSERT_INT_EQ(rc, 0);
    }
    el = dlt_now() - t0;

    for (i = 0; i < PC_TOTAL; i++) {
        if (sh->seen[i] == 1) once++;
        else if (sh->seen[i] == 0) never++;
        else more++;
        sum += (long long)sh->seen[i] * i;
    }
    fprintf(stderr, "  %d items through a queue of %d in %.2f s: %d waits (%d timed out), "
                    "max length %d, taken per consumer thread %d/%d/%d/%d/%d\n",
            PC_TOTAL, PC_CAP, el, sh->waits, sh->timeouts, sh->max_count, sh->taken_by[0],
            sh->taken_by[1], sh->taken_by[2], sh->taken_by[3], sh->taken_by[4]);
    DLT_ASSERT_INT_EQ(once, PC_TOTAL);
    DLT_ASSERT_INT_EQ(never, 0);
    DLT_ASSERT_INT_EQ(more, 0);
    DLT_ASSERT_INT_EQ(sum, (long long)PC_TOTAL * (PC_TOTAL - 1) / 2);
    DLT_ASSERT_INT_EQ(pc_value("pc:put"), PC_TOTAL);
    DLT_ASSERT_INT_EQ(pc_value("pc:taken"), PC_TOTAL);
    DLT_ASSERT_INT_EQ(pc_value("pc:count"), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "LLEN pc:q")), 0);
    DLT_ASSERT_INT_EQ(sh->overlaps, 0);
    DLT_ASSERT_INT_EQ(sh->over_cap, 0);
    CU_ASSERT_TRUE(sh->max_count <= PC_CAP);
    DLT_ASSERT_INT_EQ(sh->mismatch, 0);
    DLT_ASSERT_INT_EQ(sh->errors, 0);
    DLT_ASSERT_INT_EQ(sh->timeouts, 0); /* no stall: no lost wake-up */
    CU_ASSERT_TRUE(el < PC_BOUND_S);
    CU_ASSERT_TRUE(sh->waits > 0); /* the conditions were exercised */
    DLT_ASSERT_ERR(dlock_cond_destroy(&pc_not_empty), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&pc_not_full), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&pc_m), 0);
    DLT_SHM_FREE(sh, 1);
    DLT_SHM_FREE(a, NP);
}

/* ======================================================================== */

static const struct dlt_test tests[] = {
    DLT_TEST(test_cond_init_names_invalid),
    DLT_TEST(test_cond_signal_no_waiter),
    DLT_TEST(test_cond_wait_errors),
    DLT_TEST(test_cond_wait_releases_and_reacquires),
    DLT_TEST(test_cond_signal_after_release_no_lost_wakeup),
    DLT_TEST(test_cond_broadcast_wakes_all),
    DLT_TEST(test_cond_signal_wakes_at_least_one),
    DLT_TEST(test_cond_timedwait_clockwait),
    DLT_TEST(test_cond_destroy),
    DLT_TEST(test_cond_fork_inherited),
    DLT_TEST(test_cond_waiter_killed),
    DLT_TEST(test_cond_transient_fault_no_stale_registration),
    DLT_TEST(test_cond_producer_consumer),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "cond", tests);
}
