/* labels: redis; timeout: 180 */
/* test_owner.c -- process-owned mutexes (dlock_mutexattr_setowner with
 * DLOCK_OWNER_PROCESS), against the suite's real redis-server: a hold
 * that belongs to the process, as glibc lets any thread unlock a NORMAL
 * mutex.  Any thread of the process unlocks it and the lock is free on the
 * server at once; another thread of the process waits while it is held
 * (it is not EDEADLK, nor a second hold); a thread's exit does not end it;
 * exit() releases it; a fork child holds nothing; a condition wait takes
 * it from any thread of the process.  Thread-owned mutexes
 * keep EPERM for an unlock by another thread.
 */
#include "fixture.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

/* ------------------------------------------------------------ helpers */

static int timedlock_ms(dlock_mutex_t *m, unsigned ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    return dlock_mutex_timedlock(m, &ts);
}

/* A mutex of `name` owned by owner (DLOCK_OWNER_*), with lease_ms (0: the
 * default), fair or not, on client c (NULL: the default client). */
static int make(dlock_mutex_t *m, const char *name, int owner, unsigned lease_ms, int fair, dlock_client_t *c) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if ((rc = dlock_mutexattr_setowner(&a, owner)) != 0) return rc;
    if (lease_ms != 0 && (rc = dlock_mutexattr_setlease(&a, lease_ms)) != 0) return rc;
    if ((rc = dlock_mutexattr_setfair(&a, fair)) != 0) return rc;
    if ((rc = dlock_mutexattr_setclient(&a, c)) != 0) return rc;
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* A thread that runs one operation on m when asked (step), and reports
 * its result (rc) and what it saw. */
struct worker {
    dlock_mutex_t *m;
    int op;          /* OP_* */
    unsigned ms;     /* OP_TIMED: the deadline */
    int go, done;    /* flags: asked, finished */
    int rc, holds;   /* the call's result; holds() after it */
    uint64_t fence;  /* fence() after it */
    double at;       /* when the call returned (dlt_now) */
    int quit;        /* OP_LOCK_STAY: leave now */
    pthread_t th;
};
enum { OP_LOCK, OP_UNLOCK, OP_TIMED, OP_LOCK_STAY };

static void *worker_main(void *p) {
    struct worker *w = p;
    if (!dlt_flag_wait(&w->go, 1, DLT_JOIN_MS)) return NULL;
    switch (w->op) {
    case OP_LOCK:
    case OP_LOCK_STAY: w->rc = dlock_mutex_lock(w->m); break;
    case OP_UNLOCK: w->rc = dlock_mutex_unlock(w->m); break;
    default: w->rc = timedlock_ms(w->m, w->ms); break;
    }
    w->holds = dlock_mutex_holds(w->m);
    w->fence = dlock_mutex_fence(w->m);
    w->at = dlt_now();
    dlt_flag_set(&w->done, 1);
    if (w->op == OP_LOCK_STAY) dlt_flag_wait(&w->quit, 1, DLT_JOIN_MS);
    return NULL;
}

static void worker_start(struct worker *w, dlock_mutex_t *m, int op, unsigned ms) {
    memset(w, 0, sizeof *w);
    w->m = m;
    w->op = op;
    w->ms = ms;
    CU_ASSERT_FATAL(pthread_create(&w->th, NULL, worker_main, w) == 0);
    dlt_flag_set(&w->go, 1);
}

static void worker_join(struct worker *w) {
    dlt_flag_set(&w->quit, 1);
    pthread_join(w->th, NULL);
}

/* -------------------------------------------------------- attributes */

static void test_attr_owner(void) {
    dlock_mutexattr_t a, bad;
    dlock_mutex_t m;
    dlock_rwlock_t rw;
    int v = -1;

    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getowner(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, DLOCK_OWNER_THREAD); /* the default, as the contract says */
    DLT_ASSERT_ERR(dlock_mutexattr_setowner(&a, -1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setowner(&a, 2), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getowner(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, DLOCK_OWNER_THREAD); /* unchanged by the refused values */
    DLT_ASSERT_ERR(dlock_mutexattr_setowner(NULL, DLOCK_OWNER_PROCESS), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getowner(NULL, &v), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getowner(&a, NULL), EINVAL);
    memset(&bad, 0x5a, sizeof bad);
    DLT_ASSERT_ERR(dlock_mutexattr_setowner(&bad, DLOCK_OWNER_PROCESS), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getowner(&bad, &v), EINVAL);

    DLT_ASSERT_ERR(dlock_mutexattr_setowner(&a, DLOCK_OWNER_PROCESS), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getowner(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, DLOCK_OWNER_PROCESS);

    /* A process cannot be checked as a thread is: ERRORCHECK and
     * RECURSIVE are refused with it, at init. */
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "owner/attr", &a), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_RECURSIVE), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "owner/attr", &a), EINVAL);
    /* ...and a rwlock is always owned by threads. */
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_NORMAL), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "owner/attr", &a), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "owner/attr", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    /* DEFAULT is NORMAL for a process-owned mutex: a relock waits. */
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_DEFAULT), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "owner/attr", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(timedlock_ms(&m, 300), ETIMEDOUT);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM); /* held by nobody now */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
}

/* --------------------------------- unlock by another thread: released */

static void test_process_unlock_by_other_thread(void) {
    dlock_client_t *c2 = NULL;
    dlock_mutex_t m, m2;
    struct worker a;
    uint64_t fence;

    DLT_ASSERT_ERR(make(&m, "owner/handoff", DLOCK_OWNER_PROCESS, 0, 0, NULL), 0);
    CU_ASSERT_FATAL(dlt_client_make(&c2, dlt_server.url, 0) == 0);
    DLT_ASSERT_ERR(make(&m2, "owner/handoff", DLOCK_OWNER_THREAD, 0, 0, c2), 0); /* another owner, as another host */

    worker_start(&a, &m, OP_LOCK_STAY, 0);
    CU_ASSERT_FATAL(dlt_flag_wait(&a.done, 1, 10000));
    DLT_ASSERT_ERR(a.rc, 0);
    DLT_ASSERT_INT_EQ(a.holds, 1);
    CU_ASSERT(a.fence > 0);
    /* The process holds it: so does every thread of it. */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    fence = dlock_mutex_fence(&m);
    CU_ASSERT(fence == a.fence);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), EBUSY);

    /* This thread did not lock it, and unlocks it. */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/handoff"), 0); /* released on the server */
    /* Another owner takes it at once, with no wait for a lease. */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), 0);
    CU_ASSERT(dlock_mutex_fence(&m2) > fence);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);

    /* The locking thread no longer holds it either (nor does renewal). */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    worker_join(&a);
    dlt_sleep_ms(300);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/handoff"), 0);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
}

/* A thread-owned mutex keeps the POSIX rule: only the holder unlocks. */
static void test_thread_owned_keeps_eperm(void) {
    dlock_mutex_t m;
    struct worker a, u;

    DLT_ASSERT_ERR(make(&m, "owner/thread", DLOCK_OWNER_THREAD, 0, 0, NULL), 0);
    worker_start(&a, &m, OP_LOCK_STAY, 0);
    CU_ASSERT_FATAL(dlt_flag_wait(&a.done, 1, 10000));
    DLT_ASSERT_ERR(a.rc, 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/thread"), 1); /* still held */
    /* The holder unlocks it. */
    worker_join(&a);
    worker_start(&u, &m, OP_UNLOCK, 0); /* another thread again */
    CU_ASSERT_FATAL(dlt_flag_wait(&u.done, 1, 10000));
    DLT_ASSERT_ERR(u.rc, EPERM);
    pthread_join(u.th, NULL);
    /* (the holder has exited: its hold expires; nobody else may end it) */
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/thread"), 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* --------------------------- another thread of the process waits */

static void test_process_other_thread_waits(void) {
    dlock_mutex_t m;
    struct worker a, b;
    double unlocked;

    DLT_ASSERT_ERR(make(&m, "owner/wait", DLOCK_OWNER_PROCESS, 0, 0, NULL), 0);
    worker_start(&a, &m, OP_LOCK_STAY, 0);
    CU_ASSERT_FATAL(dlt_flag_wait(&a.done, 1, 10000));
    DLT_ASSERT_ERR(a.rc, 0);

    /* B waits: the process holds it, and B is of the process -- it is no
     * second hold, and no EDEADLK either (as a NORMAL pthread mutex). */
    worker_start(&b, &m, OP_TIMED, 20000);
    dlt_sleep_ms(600);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&b.done), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_ERR(timedlock_ms(&m, 200), ETIMEDOUT); /* this thread waits too */
    DLT_ASSERT_INT_EQ(dlt_flag_get(&b.done), 0);

    /* Any thread's unlock lets B in. */
    unlocked = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT_FATAL(dlt_flag_wait(&b.done, 1, 10000));
    DLT_ASSERT_ERR(b.rc, 0);
    CU_ASSERT(b.at >= unlocked);
    DLT_ASSERT_INT_EQ(b.holds, 1);
    CU_ASSERT(b.fence > a.fence);
    pthread_join(b.th, NULL);
    /* B has exited; the process still holds it, and A unlocks it. */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/wait"), 1);
    worker_join(&a);
    worker_start(&a, &m, OP_UNLOCK, 0);
    CU_ASSERT_FATAL(dlt_flag_wait(&a.done, 1, 10000));
    DLT_ASSERT_ERR(a.rc, 0);
    pthread_join(a.th, NULL);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/wait"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* Threads of the process hand a fair (queued) process-owned mutex to one
 * another, unlocking each other's holds, with another client competing:
 * every hold is exclusive, none is reported lost, and nothing is left
 * held at the end. */
static int lost_calls;

struct relay {
    dlock_mutex_t *m;
    int inside; /* holders inside now */
    int bad;    /* failed calls, or two holders at once */
    int req;    /* a holder asks the unlocker to unlock for it */
    int rounds; /* per locker */
};

/* Locks, then leaves the unlock to the unlocker thread, and locks again
 * (waiting for that unlock, or for the other locker's). */
static void *relay_locker(void *p) {
    struct relay *r = p;
    int i;
    for (i = 0; i < r->rounds; i++) {
        if (timedlock_ms(r->m, 10000) != 0) { /* (a hold stuck in "releasing": never) */
            dlt_flag_add(&r->bad, 1);
            dlt_flag_set(&r->req, 1); /* let the unlocker finish */
            return NULL;
        }
        if (dlt_flag_add(&r->inside, 1) != 1) dlt_flag_add(&r->bad, 1);
        dlt_flag_add(&r->inside, -1);
        dlt_flag_set(&r->req, 1);
    }
    return NULL;
}

static void *relay_unlocker(void *p) {
    struct relay *r = p;
    int i;
    for (i = 0; i < 2 * r->rounds; i++) {
        if (!dlt_flag_wait(&r->req, 1, 15000)) {
            dlt_flag_add(&r->bad, 1);
            return NULL;
        }
        dlt_flag_set(&r->req, 0);
        if (dlock_mutex_unlock(r->m) != 0) dlt_flag_add(&r->bad, 1);
    }
    return NULL;
}

static void test_process_fair_relay(void) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    dlock_client_t *c2 = NULL;
    dlock_mutex_t m2;
    pthread_t th[3];
    int i, j, other_bad = 0;
    struct relay r;

    memset(&r, 0, sizeof r);
    r.m = &m;
    r.rounds = 30;
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setowner(&a, DLOCK_OWNER_PROCESS), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 2000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, dlt_count_lost, &lost_calls), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "owner/relay", &a), 0);
    CU_ASSERT_FATAL(dlt_client_make(&c2, dlt_server.url, 0) == 0);
    DLT_ASSERT_ERR(make(&m2, "owner/relay", DLOCK_OWNER_THREAD, 2000, 1, c2), 0);
    lost_calls = 0;
    CU_ASSERT_FATAL(pthread_create(&th[0], NULL, relay_unlocker, &r) == 0);
    for (i = 1; i < 3; i++) CU_ASSERT_FATAL(pthread_create(&th[i], NULL, relay_locker, &r) == 0);
    for (j = 0; j < 15; j++) { /* another owner in the queue now and then */
        if (timedlock_ms(&m2, 10000) != 0) {
            other_bad++;
            break;
        }
        if (dlt_flag_get(&r.inside) != 0) other_bad++;
        if (dlock_mutex_unlock(&m2) != 0) other_bad++;
        dlt_sleep_ms(5);
    }
    for (i = 0; i < 3; i++) pthread_join(th[i], NULL);
    DLT_ASSERT_INT_EQ(r.bad, 0);
    DLT_ASSERT_INT_EQ(other_bad, 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/relay"), 0);
    dlt_sleep_ms(2500); /* past a lease: nothing renewed or reported lost */
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/relay"), 0);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
    dlock_mutexattr_destroy(&a);
}

/* dlock_cond_wait takes a process-owned mutex from any thread of the
 * process, gives it up for the wait and returns with the process holding
 * it again. */
static void test_process_cond_wait_any_thread(void) {
    dlock_mutex_t m;
    dlock_cond_t cv;
    struct worker a;
    struct timespec ts;

    DLT_ASSERT_ERR(make(&m, "owner/cond", DLOCK_OWNER_PROCESS, 0, 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init(&cv, "owner/cond-cv"), 0);
    worker_start(&a, &m, OP_LOCK_STAY, 0);
    CU_ASSERT_FATAL(dlt_flag_wait(&a.done, 1, 10000));
    DLT_ASSERT_ERR(a.rc, 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    DLT_ASSERT_ERR(dlock_cond_timedwait(&cv, &m, &ts), ETIMEDOUT); /* not EPERM: the process holds it */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    CU_ASSERT(dlock_mutex_fence(&m) > a.fence); /* given up for the wait, taken again */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    DLT_ASSERT_ERR(dlock_cond_timedwait(&cv, &m, &ts), EPERM); /* now nobody holds it */
    worker_join(&a);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/cond"), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&cv), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* A caching process-owned mutex: another thread's unlock leaves the lock
 * in the process's cache (no thread holds it), and another owner's
 * request makes the process give it up, as for any caching mutex. */
static void test_process_caching(void) {
    dlock_mutexattr_t a;
    dlock_client_t *c2 = NULL;
    dlock_mutex_t m, m2;
    struct worker w;

    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setowner(&a, DLOCK_OWNER_PROCESS), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "owner/cache", &a), 0);
    CU_ASSERT_FATAL(dlt_client_make(&c2, dlt_server.url, 0) == 0);
    DLT_ASSERT_ERR(make(&m2, "owner/cache", DLOCK_OWNER_THREAD, 0, 0, c2), 0);
    worker_start(&w, &m, OP_LOCK_STAY, 0);
    CU_ASSERT_FATAL(dlt_flag_wait(&w.done, 1, 10000));
    DLT_ASSERT_ERR(w.rc, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    /* Cached: this thread takes it back with no wait... */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    /* ...and another owner gets it once it asks. */
    DLT_ASSERT_ERR(timedlock_ms(&m2, 5000), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    worker_join(&w);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
    dlock_mutexattr_destroy(&a);
}

/* ------------------------------------ thread exit, process exit, fork */

static void test_process_hold_outlives_thread(void) {
    dlock_client_t *c2 = NULL;
    dlock_mutex_t m, m2;
    struct worker a;

    DLT_ASSERT_ERR(make(&m, "owner/outlive", DLOCK_OWNER_PROCESS, 600, 0, NULL), 0);
    CU_ASSERT_FATAL(dlt_client_make(&c2, dlt_server.url, 0) == 0);
    DLT_ASSERT_ERR(make(&m2, "owner/outlive", DLOCK_OWNER_THREAD, 600, 0, c2), 0);
    worker_start(&a, &m, OP_LOCK, 0);
    pthread_join(a.th, NULL); /* the thread that locked it is gone */
    DLT_ASSERT_ERR(a.rc, 0);
    dlt_sleep_ms(2000); /* more than three leases: renewed all along */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    CU_ASSERT(dlock_mutex_fence(&m) == a.fence);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/outlive"), 1);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
}

/* A child locks in a thread that exits, then calls exit(): the process's
 * hold is released then, as every hold at exit. */
static void *lock_and_go(void *p) {
    return (void *)(intptr_t)dlock_mutex_lock(p);
}

static int exit_child(void *p) {
    dlock_mutex_t m;
    pthread_t th;
    void *res;
    (void)p;
    if (make(&m, "owner/exit", DLOCK_OWNER_PROCESS, 30000, 0, NULL) != 0) return 10;
    if (pthread_create(&th, NULL, lock_and_go, &m) != 0) return 11;
    pthread_join(th, &res);
    if ((intptr_t)res != 0) return 12;
    if (dlock_mutex_holds(&m) != 1) return 13;
    exit(0); /* not _exit: exit handlers run */
}

static void test_process_hold_released_at_exit(void) {
    dlock_mutex_t m;
    pid_t pid;
    DLT_ASSERT_ERR(make(&m, "owner/exit", DLOCK_OWNER_THREAD, 0, 0, NULL), 0);
    pid = dlt_spawn(exit_child, NULL);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 20000), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0); /* at once: not after the 30 s lease */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

static dlock_mutex_t fork_m;

static int fork_child(void *p) {
    (void)p;
    if (dlock_mutex_holds(&fork_m) != 0) return 10; /* the parent's hold is not ours */
    if (dlock_mutex_fence(&fork_m) != 0) return 11;
    if (dlock_mutex_unlock(&fork_m) != EPERM) return 12;
    if (dlock_mutex_trylock(&fork_m) != EBUSY) return 13; /* the parent holds it */
    if (timedlock_ms(&fork_m, 15000) != 0) return 14; /* until the parent unlocks */
    if (dlock_mutex_holds(&fork_m) != 1) return 15;
    if (dlock_mutex_unlock(&fork_m) != 0) return 16;
    return 0;
}

static void test_process_fork_child_holds_nothing(void) {
    pid_t pid;
    DLT_ASSERT_ERR(make(&fork_m, "owner/fork", DLOCK_OWNER_PROCESS, 0, 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&fork_m), 0);
    pid = dlt_spawn(fork_child, NULL);
    CU_ASSERT_FATAL(pid > 0);
    dlt_sleep_ms(1000);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&fork_m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&fork_m), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 20000), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("owner/fork"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&fork_m), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_attr_owner),
    DLT_TEST(test_process_unlock_by_other_thread),
    DLT_TEST(test_thread_owned_keeps_eperm),
    DLT_TEST(test_process_other_thread_waits),
    DLT_TEST(test_process_fair_relay),
    DLT_TEST(test_process_cond_wait_any_thread),
    DLT_TEST(test_process_caching),
    DLT_TEST(test_process_hold_outlives_thread),
    DLT_TEST(test_process_hold_released_at_exit),
    DLT_TEST(test_process_fork_child_holds_nothing),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "owner", tests);
}
