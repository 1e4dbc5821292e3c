/* test_rwlock.c -- the read-write lock contract (SPEC "Beyond the mutex").
 * labels: redis; timeout: 240
 *
 * dlock_rwlock_* carries the mutex contract (SPEC section 2: the same
 * names, return codes and leases) to shared/exclusive locks, as
 * pthread_rwlock_*.  Each row runs with threads of this process and with
 * several processes (dlt_spawn).  The work is done by "actors": a thread
 * or a child process that owns an rwlock (its own object of the lock's
 * name, or, for a thread, the test's object) and runs one call at a time
 * on request.  Requests, answers and timestamps travel through MAP_SHARED
 * memory, so one struct serves a thread and a child; a child reports
 * failures through its exit status and never touches CUnit.
 *
 * Processes are always forked before threads are started (GCC 12's
 * AddressSanitizer runtime is not fork-safe next to busy threads).
 *
 * The policy under test is WRITERS FIRST (dlock.h): a writer that has to
 * wait registers itself on the server (the lock's :writers zset), and
 * while one is registered, new readers wait too -- tryrdlock says EBUSY
 * -- so a stream of overlapping readers never starves a writer.  Readers
 * that already hold the lock are not affected (a thread's recursive
 * rdlock is local).  Once the writer got and released the lock, the
 * readers that queued behind it proceed.
 */
#include "fixture.h"

#include <dlock.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NOANSWER (-1000)  /* an actor did not answer in time */
#define POLL_US 300       /* how often the test and its actors look at a flag */
#define LONG_LEASE 30000u /* holders whose renewals must not disturb round-trip counts */

/* ========================================================================
 * SIGALRM: a counting handler, with or without SA_RESTART.
 * ====================================================================== */

static volatile sig_atomic_t alrm_count;
static void on_alrm(int sig) {
    (void)sig;
    alrm_count++;
}
static void alrm_install(int restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alrm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGALRM, &sa, NULL);
}
/* alarm(2) with millisecond resolution: SIGALRM to the process after ms
 * (0: cancel). */
static void alrm_arm(long ms) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ms / 1000;
    it.it_value.tv_usec = (ms % 1000) * 1000;
    setitimer(ITIMER_REAL, &it, NULL);
}

/* The fixture bounds the run with alarm(600) and a SIGALRM handler that
 * kills its servers.  A test that sends SIGALRM to a thread of this
 * process parks both, blocks SIGALRM in the main thread (so that it goes
 * to the one actor thread that takes it), and puts them back after. */
static struct sigaction alrm_saved;
static unsigned alrm_left;
static double alrm_parked_at;
static void alrm_park(void) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    alrm_left = alarm(0);
    alrm_parked_at = dlt_now();
    sigaction(SIGALRM, NULL, &alrm_saved);
}
static void alrm_unpark(void) {
    sigset_t s;
    unsigned spent = (unsigned)(dlt_now() - alrm_parked_at) + 1;
    alrm_arm(0);
    sigaction(SIGALRM, &alrm_saved, NULL);
    sigemptyset(&s);
    sigaddset(&s, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    if (alrm_left > 0) alarm(alrm_left > spent ? alrm_left - spent : 1);
}

/* ========================================================================
 * Looking at the server
 * ====================================================================== */

/* ZCARD of the lock's zset `what` ("readers" or "writers"). */
static long long zcard(const char *name, const char *what) {
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD dlock:{%s}:%s", name, what));
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The members of the lock's zset `what`, sorted, "a,b,..." into out; their
 * number, or -1 on error. */
static int zmembers(const char *name, const char *what, char *out, size_t cap) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "ZRANGE dlock:{%s}:%s 0 -1", name, what);
    size_t i, n = 0;
    int k = -1;
    out[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_ARRAY) {
        char *m[64];
        k = (int)r->elements;
        for (i = 0; i < r->elements && i < 64; i++) m[i] = r->element[i]->str;
        qsort(m, i, sizeof m[0], cmp_str);
        for (i = 0; i < r->elements && i < 64; i++)
            n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s%s", i ? "," : "", m[i]);
    }
    if (r != NULL) freeReplyObject(r);
    return k;
}

/* The smallest score in the lock's zset minus the server's time now (ms):
 * how long the first member to expire has left; LLONG_MIN if empty. */
static long long zmin_left_ms(const char *name, const char *what) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "ZRANGE dlock:{%s}:%s 0 0 WITHSCORES", name, what);
    redisReply *t = dlt_redis_cmd(&dlt_server, "TIME");
    long long v = LLONG_MIN;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && t != NULL &&
        t->type == REDIS_REPLY_ARRAY && t->elements == 2) {
        long long now = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
        v = atoll(r->element[1]->str) - now;
    }
    if (r != NULL) freeReplyObject(r);
    if (t != NULL) freeReplyObject(t);
    return v;
}

static int wait_zcard_ge(const char *name, const char *what, long long want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (zcard(name, what) < want) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(5);
    }
    return 1;
}

static void dump_lock(const char *name) {
    char r[512], w[512];
    zmembers(name, "readers", r, sizeof r);
    zmembers(name, "writers", w, sizeof w);
    fprintf(stderr, "  [%s] readers {%s} writers {%s} (first writer entry expires in %lld ms)\n", name, r, w,
            zmin_left_ms(name, "writers"));
}

static int init_lease(dlock_rwlock_t *rw, const char *name, unsigned lease) {
    dlock_mutexattr_t a;
    int rc;
    if (lease == 0) return dlock_rwlock_init(rw, name, NULL);
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if ((rc = dlock_mutexattr_setlease(&a, lease)) == 0) rc = dlock_rwlock_init(rw, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* ========================================================================
 * Actors: a thread or process that runs one rwlock (or mutex) call at a
 * time on request and reports its result, when it began and ended, and
 * what holds() and fence() said after it.
 * ====================================================================== */

enum {
    A_RD = 1, A_WR, A_TRYRD, A_TRYWR,
    A_TIMEDRD, A_TIMEDWR, /* CLOCK_REALTIME deadline q.ms ahead */
    A_CLOCKRD, A_CLOCKWR, /* deadline q.ms ahead on q.clk */
    A_XLOCK,              /* dlock_rwlock_xlock(q.shared, q.flags), deadline on q.clk if q.timed */
    A_UNLOCK, A_HOLDS,
    A_MLOCK, A_MTRY, A_MTIMED, A_MUNLOCK, /* the mutex of the same name */
    A_EXIT                                /* end the thread or process, holding what it holds */
};

typedef struct areq {
    int op;
    long ms;
    clockid_t clk;
    int badns;     /* 1: tv_nsec = 1000000000; 2: tv_nsec = -1 */
    int timed;     /* A_XLOCK: with a deadline */
    int shared;    /* A_XLOCK */
    int flags;     /* A_XLOCK */
    long alarm_ms; /* > 0: SIGALRM this long after the call starts */
    int sig;       /* 1: SIGALRM handler without SA_RESTART; 2: with */
} areq;
#define Q(...) ((areq){ __VA_ARGS__ })

typedef struct actor {
    /* configuration, set before actor_start */
    dlock_rwlock_t *rw; /* a thread's shared object, or NULL: the actor's own */
    char name[128];
    unsigned lease;
    int with_mutex;
    int alrm; /* SIGALRM unblocked in this thread */
    /* one request at a time */
    areq q;
    int ready, req, begun, resp, quit;
    /* the answer */
    int rc, holds;
    uint64_t fence;
    double t_begin, t_end;
    int sigs; /* SIGALRM handler runs during the call */
    char err[200];
    dlt_task t; /* the parent's */
} actor;

static int actor_call(actor *a, dlock_rwlock_t *rw, dlock_mutex_t *mx) {
    const areq *q = &a->q;
    struct timespec ts;
    clockid_t clk = (q->op == A_TIMEDRD || q->op == A_TIMEDWR || q->op == A_MTIMED) ? CLOCK_REALTIME : q->clk;
    ts = dlt_abs_in(clk, q->ms);
    if (q->badns == 1) ts.tv_nsec = 1000000000L;
    if (q->badns == 2) ts.tv_nsec = -1;
    switch (q->op) {
    case A_RD: return dlock_rwlock_rdlock(rw);
    case A_WR: return dlock_rwlock_wrlock(rw);
    case A_TRYRD: return dlock_rwlock_tryrdlock(rw);
    case A_TRYWR: return dlock_rwlock_trywrlock(rw);
    case A_TIMEDRD: return dlock_rwlock_timedrdlock(rw, &ts);
    case A_TIMEDWR: return dlock_rwlock_timedwrlock(rw, &ts);
    case A_CLOCKRD: return dlock_rwlock_clockrdlock(rw, clk, &ts);
    case A_CLOCKWR: return dlock_rwlock_clockwrlock(rw, clk, &ts);
    case A_XLOCK: return dlock_rwlock_xlock(rw, q->shared, q->flags, clk, q->timed ? &ts : NULL);
    case A_UNLOCK: return dlock_rwlock_unlock(rw);
    case A_HOLDS: return dlock_rwlock_holds(rw);
    case A_MLOCK: return dlock_mutex_lock(mx);
    case A_MTRY: return dlock_mutex_trylock(mx);
    case A_MTIMED: return dlock_mutex_timedlock(mx, &ts);
    case A_MUNLOCK: return dlock_mutex_unlock(mx);
    case A_EXIT: return 0;
    default: return -3000;
    }
}

static int actor_main(void *p) {
    actor *a = p;
    dlock_rwlock_t own, *rw = a->rw != NULL ? a->rw : &own;
    dlock_mutex_t mx;
    dlock_mutexattr_t at;
    sigset_t ss;
    int seen = 0;

    sigemptyset(&ss);
    sigaddset(&ss, SIGALRM);
    pthread_sigmask(a->alrm ? SIG_UNBLOCK : SIG_BLOCK, &ss, NULL);
    DLT_CK(dlock_mutexattr_init(&at), 0);
    if (a->lease) DLT_CK(dlock_mutexattr_setlease(&at, a->lease), 0);
    if (a->rw == NULL) DLT_CK(dlock_rwlock_init(&own, a->name, &at), 0);
    if (a->with_mutex) DLT_CK(dlock_mutex_init(&mx, a->name, &at), 0);
    DLT_CK(dlock_mutexattr_destroy(&at), 0);
    dlt_flag_set(&a->ready, 1);
    for (;;) {
        double end = dlt_now() + 120;
        int before;
        while (dlt_flag_get(&a->req) == seen && !dlt_flag_get(&a->quit)) {
            if (dlt_now() > end) return 98;
            usleep(200);
        }
        if (dlt_flag_get(&a->req) == seen) break; /* quit */
        seen = dlt_flag_get(&a->req);
        if (a->q.sig) alrm_install(a->q.sig == 2);
        before = alrm_count;
        if (a->q.alarm_ms > 0) alrm_arm(a->q.alarm_ms);
        a->t_begin = dlt_now();
        dlt_flag_set(&a->begun, seen);
        a->rc = actor_call(a, rw, &mx);
        a->t_end = dlt_now();
        if (a->q.alarm_ms > 0) alrm_arm(0);
        a->sigs = alrm_count - before;
        snprintf(a->err, sizeof a->err, "%s", a->rc != 0 ? dlock_last_error() : "");
        a->holds = dlock_rwlock_holds(rw);
        a->fence = dlock_rwlock_fence(rw);
        dlt_flag_set(&a->resp, seen);
        if (a->q.op == A_EXIT) return 0;
    }
    if (a->rw == NULL) DLT_CK(dlock_rwlock_destroy(&own), 0);
    if (a->with_mutex) DLT_CK(dlock_mutex_destroy(&mx), 0);
    return 0;
}

/* Sets an actor up: its own object of `name` with `lease` (0: default). */
static void actor_init(actor *a, const char *name, unsigned lease) {
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->lease = lease;
}

static void actor_start(actor *a, int proc) {
    dlt_task_start(&a->t, proc, actor_main, a);
    CU_ASSERT_TRUE(dlt_flag_wait_ge_every(&a->ready, 1, 10000, POLL_US));
}

static int actor_post(actor *a, areq q) {
    int n = dlt_flag_get(&a->req) + 1;
    a->q = q;
    dlt_flag_set(&a->req, n);
    return n;
}

static int actor_done(actor *a, int seq) {
    return dlt_flag_get(&a->resp) >= seq;
}

/* The answer to request seq, or NOANSWER after timeout_ms. */
static int actor_wait(actor *a, int seq, int timeout_ms) {
    if (!dlt_flag_wait_ge_every(&a->resp, seq, timeout_ms, POLL_US)) return NOANSWER;
    if (a->rc != 0 && a->q.op != A_HOLDS && getenv("DLT_RW_VERBOSE") != NULL)
        fprintf(stderr, "    (actor %s %s: op %d -> %s: %s)\n", a->t.proc ? "process" : "thread", a->name,
                a->q.op, dlt_errno_label(a->rc), a->err);
    return a->rc;
}

static int actor_do(actor *a, areq q) {
    return actor_wait(a, actor_post(a, q), 15000);
}

static int ado(actor *a, int op) {
    return actor_do(a, Q(.op = op));
}

/* Waits for the actor to end (after telling it to quit) and asserts it
 * returned 0. */
static void actor_stop(actor *a) {
    dlt_flag_set(&a->quit, 1);
    int rc = dlt_task_join(&a->t, DLT_JOIN_MS);
    if (rc != 0) fprintf(stderr, "  (actor %s %s ended with %d)\n", a->t.proc ? "process" : "thread", a->name, rc);
    DLT_ASSERT_INT_EQ(rc, 0);
}

static void actor_kill(actor *a) {
    if (a->t.running && a->t.proc) kill(a->t.pid, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_task_join(&a->t, DLT_JOIN_MS), 128 + SIGKILL);
}

/* ========================================================================
 * Bad objects: every call gives EINVAL (or 0 from holds/fence), never a
 * crash.
 * ====================================================================== */

static int check_invalid_rw(dlock_rwlock_t *rw) {
    struct timespec rt = dlt_abs_in(CLOCK_REALTIME, 100), mt = dlt_abs_in(CLOCK_MONOTONIC, 100);
    DLT_CK(dlock_rwlock_rdlock(rw), EINVAL);
    DLT_CK(dlock_rwlock_tryrdlock(rw), EINVAL);
    DLT_CK(dlock_rwlock_timedrdlock(rw, &rt), EINVAL);
    DLT_CK(dlock_rwlock_clockrdlock(rw, CLOCK_MONOTONIC, &mt), EINVAL);
    DLT_CK(dlock_rwlock_clockrdlock(rw, CLOCK_REALTIME, &rt), EINVAL);
    DLT_CK(dlock_rwlock_wrlock(rw), EINVAL);
    DLT_CK(dlock_rwlock_trywrlock(rw), EINVAL);
    DLT_CK(dlock_rwlock_timedwrlock(rw, &rt), EINVAL);
    DLT_CK(dlock_rwlock_clockwrlock(rw, CLOCK_MONOTONIC, &mt), EINVAL);
    DLT_CK(dlock_rwlock_clockwrlock(rw, CLOCK_REALTIME, &rt), EINVAL);
    DLT_CK(dlock_rwlock_xlock(rw, 1, 0, CLOCK_REALTIME, NULL), EINVAL);
    DLT_CK(dlock_rwlock_xlock(rw, 0, DLOCK_F_TRY, CLOCK_MONOTONIC, &mt), EINVAL);
    DLT_CK(dlock_rwlock_xlock(rw, 0, DLOCK_F_INTR, CLOCK_REALTIME, NULL), EINVAL);
    DLT_CK(dlock_rwlock_unlock(rw), EINVAL);
    DLT_CK(dlock_rwlock_holds(rw), 0);
    DLT_CK(dlock_rwlock_fence(rw), 0);
    DLT_CK(dlock_rwlock_destroy(rw), EINVAL);
    return 0;
}

typedef struct named {
    char name[64];
} named;

static int bad_args_worker(void *p) {
    named *nm = p;
    dlock_rwlock_t rw, copy, z, ff;
    dlock_mutexattr_t bad, gone, a;
    char big[DLOCK_NAME_MAX + 2];
    int i;

    memset(&rw, 0x5A, sizeof rw);
    memset(&z, 0, sizeof z);
    memset(&ff, 0xFF, sizeof ff);
    /* NULL and never-initialised objects. */
    DLT_CK(check_invalid_rw(NULL), 0);
    DLT_CK(check_invalid_rw(&rw), 0);
    DLT_CK(check_invalid_rw(&z), 0);
    DLT_CK(check_invalid_rw(&ff), 0);
    /* Bad names: nothing is made. */
    DLT_CK(dlock_rwlock_init(NULL, nm->name, NULL), EINVAL);
    DLT_CK(dlock_rwlock_init(&rw, NULL, NULL), EINVAL);
    DLT_CK(dlock_rwlock_init(&rw, "", NULL), EINVAL);
    memset(big, 'n', DLOCK_NAME_MAX + 1);
    big[DLOCK_NAME_MAX + 1] = '\0';
    DLT_CK(dlock_rwlock_init(&rw, big, NULL), EINVAL);
    for (i = 0; i < DLOCK_NAME_MAX + 1; i++) big[i] = (char)(1 + (i * 37) % 255);
    DLT_CK(dlock_rwlock_init(&rw, big, NULL), EINVAL);
    DLT_CK(check_invalid_rw(&rw), 0);
    /* Bad attributes: garbage, destroyed. */
    memset(&bad, 0xAB, sizeof bad);
    DLT_CK(dlock_rwlock_init(&rw, nm->name, &bad), EINVAL);
    DLT_CK(check_invalid_rw(&rw), 0);
    DLT_CK(dlock_mutexattr_init(&gone), 0);
    DLT_CK(dlock_mutexattr_destroy(&gone), 0);
    DLT_CK(dlock_rwlock_init(&rw, nm->name, &gone), EINVAL);
    DLT_CK(check_invalid_rw(&rw), 0);
    /* The limits that are fine: 512 bytes of anything but NUL, and 1. */
    big[DLOCK_NAME_MAX] = '\0';
    DLT_CK(dlock_rwlock_init(&rw, big, NULL), 0);
    DLT_CK(dlock_rwlock_tryrdlock(&rw), 0);
    DLT_CK(dlock_rwlock_unlock(&rw), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    DLT_CK(check_invalid_rw(&rw), 0); /* destroyed, twice */
    DLT_CK(dlock_rwlock_init(&rw, "x", NULL), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    /* A byte copy of a live rwlock is not an rwlock. */
    DLT_CK(dlock_rwlock_init(&rw, nm->name, NULL), 0);
    memcpy(&copy, &rw, sizeof rw);
    DLT_CK(check_invalid_rw(&copy), 0);
    /* Unknown xlock flags: EINVAL, even on a free lock, and nothing held. */
    DLT_CK(dlock_rwlock_xlock(&rw, 0, 4, CLOCK_REALTIME, NULL), EINVAL);
    DLT_CK(dlock_rwlock_xlock(&rw, 1, DLOCK_F_TRY | 8, CLOCK_REALTIME, NULL), EINVAL);
    DLT_CK(dlock_rwlock_xlock(&rw, 1, -1, CLOCK_REALTIME, NULL), EINVAL);
    DLT_CK(dlock_rwlock_xlock(&rw, 0, INT_MIN, CLOCK_REALTIME, NULL), EINVAL);
    DLT_CK(dlock_rwlock_holds(&rw), 0);
    /* Bad clock, NULL deadline. */
    {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 100);
        DLT_CK(dlock_rwlock_clockrdlock(&rw, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
        DLT_CK(dlock_rwlock_clockwrlock(&rw, CLOCK_THREAD_CPUTIME_ID, &ts), EINVAL);
        DLT_CK(dlock_rwlock_clockwrlock(&rw, (clockid_t)1234, &ts), EINVAL);
        DLT_CK(dlock_rwlock_xlock(&rw, 1, 0, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
        DLT_CK(dlock_rwlock_timedrdlock(&rw, NULL), EINVAL);
        DLT_CK(dlock_rwlock_timedwrlock(&rw, NULL), EINVAL);
        DLT_CK(dlock_rwlock_clockrdlock(&rw, CLOCK_MONOTONIC, NULL), EINVAL);
        DLT_CK(dlock_rwlock_clockwrlock(&rw, CLOCK_MONOTONIC, NULL), EINVAL);
        DLT_CK(dlock_rwlock_holds(&rw), 0);
    }
    /* The type and robustness of the attributes are ignored: a relock by
     * the holder is EDEADLK even for NORMAL and RECURSIVE. */
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    for (i = DLOCK_MUTEX_NORMAL; i <= DLOCK_MUTEX_RECURSIVE; i += 2) {
        DLT_CK(dlock_mutexattr_init(&a), 0);
        DLT_CK(dlock_mutexattr_settype(&a, i), 0);
        DLT_CK(dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST), 0);
        DLT_CK(dlock_rwlock_init(&rw, nm->name, &a), 0);
        DLT_CK(dlock_mutexattr_destroy(&a), 0); /* init copied what it needs */
        DLT_CK(dlock_rwlock_wrlock(&rw), 0);
        DLT_CK(dlock_rwlock_wrlock(&rw), EDEADLK);
        DLT_CK(dlock_rwlock_holds(&rw), 2);
        DLT_CK(dlock_rwlock_unlock(&rw), 0);
        DLT_CK(dlock_rwlock_unlock(&rw), EPERM);
        DLT_CK(dlock_rwlock_destroy(&rw), 0);
    }
    return 0;
}

static void test_init_bad_args(void) {
    named *nm = DLT_SHM_NEW(named, 5);
    int i;
    for (i = 0; i < 5; i++) snprintf(nm[i].name, sizeof nm[i].name, "rw/badargs/%d", i);
    DLT_ASSERT_INT_EQ(bad_args_worker(&nm[0]), 0);
    CU_ASSERT_STRING_NOT_EQUAL(dlock_last_error(), "");
    /* The same from 2 threads and 2 processes at once. */
    dlt_run_all(bad_args_worker, &nm[1], sizeof *nm, 2, 2);
    DLT_SHM_FREE(nm, 5);
}

/* destroy: EBUSY while a thread of this process holds the lock through
 * this object (read or write) or waits in one of its calls; otherwise it
 * frees local resources only. */
static int destroy_worker(void *p) {
    named *nm = p;
    dlock_rwlock_t rw;
    DLT_CK(dlock_rwlock_init(&rw, nm->name, NULL), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    DLT_CK(dlock_rwlock_init(&rw, nm->name, NULL), 0);
    DLT_CK(dlock_rwlock_rdlock(&rw), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), EBUSY);
    DLT_CK(dlock_rwlock_holds(&rw), 1); /* still usable */
    DLT_CK(dlock_rwlock_rdlock(&rw), 0);
    DLT_CK(dlock_rwlock_unlock(&rw), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), EBUSY); /* count 1 left */
    DLT_CK(dlock_rwlock_unlock(&rw), 0);
    DLT_CK(dlock_rwlock_wrlock(&rw), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), EBUSY);
    DLT_CK(dlock_rwlock_holds(&rw), 2);
    DLT_CK(dlock_rwlock_unlock(&rw), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    DLT_CK(check_invalid_rw(&rw), 0);
    return 0;
}

static void test_destroy(void) {
    named *nm = DLT_SHM_NEW(named, 5);
    actor *A = DLT_SHM_NEW(actor, 3);
    dlock_rwlock_t rw, rw2;
    int i, seq;

    for (i = 0; i < 5; i++) snprintf(nm[i].name, sizeof nm[i].name, "rw/destroy/%d", i);
    DLT_ASSERT_INT_EQ(destroy_worker(&nm[0]), 0);
    dlt_run_all(destroy_worker, &nm[1], sizeof *nm, 2, 2);

    /* Held by another process (A[0]): destroy here is 0. */
    actor_init(&A[0], "rw/destroy/x", 0);
    actor_start(&A[0], DLT_PROC);
    /* Another thread (A[1], sharing rw) holds it, or waits in it. */
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "rw/destroy/x", NULL), 0);
    actor_init(&A[1], "rw/destroy/x", 0);
    A[1].rw = &rw;
    actor_start(&A[1], DLT_THREAD);

    DLT_ASSERT_ERR(ado(&A[1], A_RD), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), EBUSY);
    DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(&A[1], A_WR), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), EBUSY);
    DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), 0);

    DLT_ASSERT_ERR(ado(&A[0], A_WR), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw2, "rw/destroy/x", NULL), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw2), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw2), 0);
    DLT_ASSERT_INT_EQ(check_invalid_rw(&rw2), 0);
    seq = actor_post(&A[1], Q(.op = A_RD)); /* waits for A[0] */
    dlt_sleep_ms(200);
    CU_ASSERT_FALSE(actor_done(&A[1], seq));
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), EBUSY);
    DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
    DLT_ASSERT_ERR(actor_wait(&A[1], seq, 5000), 0);
    DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), 0);
    actor_stop(&A[1]);
    actor_stop(&A[0]);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_ASSERT_INT_EQ(check_invalid_rw(&rw), 0);
    DLT_SHM_FREE(A, 3);
    DLT_SHM_FREE(nm, 5);
}

/* ========================================================================
 * Many readers at once: threads and processes hold a read lock together.
 * ====================================================================== */

typedef struct overlap_shared {
    int n, inside, peak, go, writer_inside;
} overlap_shared;

typedef struct overlap_arg {
    overlap_shared *s;
    dlock_rwlock_t *rw;
    const char *name;
    uint64_t fence;
} overlap_arg;

static int overlap_worker(void *p) {
    overlap_arg *a = p;
    dlock_rwlock_t own, *rw = a->rw != NULL ? a->rw : &own;
    int in, pk;
    if (a->rw == NULL) DLT_CK(dlock_rwlock_init(&own, a->name, NULL), 0);
    DLT_CK(dlock_rwlock_holds(rw), 0);
    DLT_CK(dlock_rwlock_rdlock(rw), 0);
    DLT_CK(dlock_rwlock_holds(rw), 1);
    a->fence = dlock_rwlock_fence(rw);
    DLT_CKT(a->fence > 0);
    in = dlt_flag_add(&a->s->inside, 1);
    while ((pk = dlt_flag_get(&a->s->peak)) < in && !__atomic_compare_exchange_n(&a->s->peak, &pk, in, 0,
                                                                            __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    DLT_CK(dlt_flag_get(&a->s->writer_inside), 0);
    /* Everyone is inside at once, or the test fails here. */
    DLT_CKT(dlt_flag_wait_ge_every(&a->s->inside, a->s->n, 15000, POLL_US));
    DLT_CKT(dlt_flag_wait_ge_every(&a->s->go, 1, 15000, POLL_US));
    DLT_CK(dlt_flag_get(&a->s->writer_inside), 0);
    dlt_flag_add(&a->s->inside, -1);
    DLT_CK(dlock_rwlock_unlock(rw), 0);
    DLT_CK(dlock_rwlock_holds(rw), 0);
    DLT_CK(dlock_rwlock_fence(rw), 0);
    if (a->rw == NULL) DLT_CK(dlock_rwlock_destroy(&own), 0);
    return 0;
}

static void test_readers_share(void) {
    enum { NT = 3, NP = 3, N = NT + NP };
    const char *name = "rw/share";
    overlap_shared *s = DLT_SHM_NEW(overlap_shared, 1);
    overlap_arg *a = DLT_SHM_NEW(overlap_arg, N);
    actor *A = DLT_SHM_NEW(actor, 2);
    dlock_rwlock_t rw;
    dlt_task t[N];
    int i;

    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, name, NULL), 0);
    s->n = N;
    for (i = 0; i < N; i++) {
        a[i].s = s;
        a[i].name = name;
        a[i].rw = i < 2 ? &rw : NULL; /* two threads share the test's object */
    }
    /* Probes in another process and another thread of this one. */
    actor_init(&A[0], name, 0);
    actor_start(&A[0], DLT_PROC);
    for (i = N - 1; i >= 0; i--) dlt_task_start(&t[i], i >= NT, overlap_worker, &a[i]);
    actor_init(&A[1], name, 0);
    actor_start(&A[1], DLT_THREAD);

    CU_ASSERT_TRUE(dlt_flag_wait_ge_every(&s->inside, N, 15000, POLL_US));
    DLT_ASSERT_INT_EQ(dlt_flag_get(&s->peak), N);
    DLT_ASSERT_INT_EQ(zcard(name, "readers"), N);
    /* One more reader is welcome; writers are not. */
    DLT_ASSERT_ERR(ado(&A[0], A_TRYRD), 0);
    DLT_ASSERT_INT_EQ(A[0].holds, 1);
    DLT_ASSERT_ERR(ado(&A[1], A_TRYRD), 0);
    DLT_ASSERT_INT_EQ(zcard(name, "readers"), N + 2);
    DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(&A[0], A_TRYWR), EBUSY);
    DLT_ASSERT_ERR(ado(&A[1], A_TRYWR), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&rw), EBUSY);
    DLT_ASSERT_ERR(ado(&A[1], A_HOLDS), 0);
    dlt_flag_set(&s->go, 1);
    for (i = 0; i < N; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(zcard(name, "readers"), 0);
    /* Every read hold got its own fence. */
    for (i = 0; i < N; i++) {
        int j;
        CU_ASSERT_TRUE(a[i].fence > 0);
        for (j = 0; j < i; j++) CU_ASSERT_TRUE(a[i].fence != a[j].fence);
    }
    /* Free again: a writer gets in. */
    DLT_ASSERT_ERR(ado(&A[0], A_TRYWR), 0);
    DLT_ASSERT_INT_EQ(A[0].holds, 2);
    DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
    actor_stop(&A[1]);
    actor_stop(&A[0]);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(A, 2);
    DLT_SHM_FREE(a, N);
    DLT_SHM_FREE(s, 1);
}

/* ========================================================================
 * A writer excludes readers and other writers: a non-atomic counter (in a
 * Redis key and in shared memory) incremented under wrlock is exact, and
 * no reader ever sees a writer inside.
 * ====================================================================== */

typedef struct excl_shared {
    int writers, readers, violations;
    volatile long counter;
    int writes, reads;
} excl_shared;

typedef struct excl_arg {
    excl_shared *s;
    dlock_rwlock_t *rw;
    const char *name;
    int writer, iters;
} excl_arg;

#define EXCL_KEY "rwtest:excl:counter"

static long long redis_get_ll(const char *key) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET %s", key);
    long long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) v = atoll(r->str);
    if (r != NULL && r->type == REDIS_REPLY_NIL) v = 0;
    if (r != NULL) freeReplyObject(r);
    return v;
}

static int redis_set_ll(const char *key, long long v) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "SET %s %lld", key, v);
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r != NULL) freeReplyObject(r);
    return ok;
}

static int excl_worker(void *p) {
    excl_arg *a = p;
    excl_shared *s = a->s;
    dlock_rwlock_t own, *rw = a->rw != NULL ? a->rw : &own;
    unsigned seed = (unsigned)getpid() * 31u + (unsigned)syscall(SYS_gettid);
    int i;
    if (a->rw == NULL) DLT_CK(dlock_rwlock_init(&own, a->name, NULL), 0);
    for (i = 0; i < a->iters; i++) {
        if (a->writer) {
            long long v;
            long c;
            DLT_CK(dlock_rwlock_wrlock(rw), 0);
            if (dlt_flag_add(&s->writers, 1) != 1 || dlt_flag_get(&s->readers) != 0) dlt_flag_add(&s->violations, 1);
            v = redis_get_ll(EXCL_KEY);
            c = s->counter;
            DLT_CKT(v >= 0);
            usleep(1000 + rand_r(&seed) % 1000);
            DLT_CKT(redis_set_ll(EXCL_KEY, v + 1));
            s->counter = c + 1;
            if (dlt_flag_get(&s->writers) != 1 || dlt_flag_get(&s->readers) != 0) dlt_flag_add(&s->violations, 1);
            dlt_flag_add(&s->writers, -1);
            dlt_flag_add(&s->writes, 1);
            DLT_CK(dlock_rwlock_unlock(rw), 0);
        } else {
            DLT_CK(dlock_rwlock_rdlock(rw), 0);
            dlt_flag_add(&s->readers, 1);
            if (dlt_flag_get(&s->writers) != 0) dlt_flag_add(&s->violations, 1);
            usleep(300 + rand_r(&seed) % 1200);
            if (dlt_flag_get(&s->writers) != 0) dlt_flag_add(&s->violations, 1);
            dlt_flag_add(&s->readers, -1);
            dlt_flag_add(&s->reads, 1);
            DLT_CK(dlock_rwlock_unlock(rw), 0);
        }
        usleep(rand_r(&seed) % 800);
    }
    if (a->rw == NULL) DLT_CK(dlock_rwlock_destroy(&own), 0);
    return 0;
}

static void test_writer_excludes(void) {
    /* workers 0..3 threads (0, 2 on the shared object), 4..7 processes;
     * even ones write. */
    enum { N = 8, WI = 12, RI = 20 };
    const char *name = "rw/excl";
    excl_shared *s = DLT_SHM_NEW(excl_shared, 1);
    excl_arg *a = DLT_SHM_NEW(excl_arg, N);
    dlock_rwlock_t rw;
    double t0 = dlt_now();
    int i;

    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, name, NULL), 0);
    for (i = 0; i < N; i++) {
        a[i].s = s;
        a[i].name = name;
        a[i].rw = (i == 0 || i == 3) ? &rw : NULL;
        a[i].writer = i % 2 == 0;
        a[i].iters = a[i].writer ? WI : RI;
    }
    dlt_run_all(excl_worker, a, sizeof *a, 4, 4);
    fprintf(stderr, "  %d writes and %d reads in %.2f s\n", s->writes, s->reads, dlt_now() - t0);
    DLT_ASSERT_INT_EQ(s->violations, 0);
    DLT_ASSERT_INT_EQ(s->writes, 4 * WI);
    DLT_ASSERT_INT_EQ(s->reads, 4 * RI);
    DLT_ASSERT_INT_EQ(s->counter, 4 * WI);
    DLT_ASSERT_INT_EQ(redis_get_ll(EXCL_KEY), 4 * WI);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(a, N);
    DLT_SHM_FREE(s, 1);
}

/* ========================================================================
 * tryrdlock / trywrlock: EBUSY after one round trip at most.
 * ====================================================================== */

/* rc of one try in `a`, and asserts it cost at most max_evals scripts and
 * came back at once.  A write try may go the pipelined uncontended way
 * first (the lock was free at the actor's last write), whose fence
 * script runs whether or not its SET took the lock: one script more. */
static int try_counted(actor *a, int op, long long max_evals) {
    long long e0, e1;
    int rc;
    if (op == A_TRYWR) max_evals++;
    dlt_redis_reset_stats(&dlt_server);
    e0 = dlt_evals();
    rc = ado(a, op);
    e1 = dlt_evals();
    if (e1 - e0 > max_evals) fprintf(stderr, "  op %d: %lld round trips\n", op, e1 - e0);
    CU_ASSERT_TRUE(e1 - e0 <= max_evals);
    CU_ASSERT_TRUE(a->t_end - a->t_begin < 0.5);
    return rc;
}

static void test_try_busy(void) {
    const char *name = "rw/try";
    actor *A = DLT_SHM_NEW(actor, 5);
    dlock_rwlock_t rw;
    long long e0;

    /* A[0] writer process, A[1] probe process, A[2] probe thread (own
     * object), A[3] thread on the test's object, A[4] reader thread. */
    DLT_ASSERT_ERR(init_lease(&rw, name, LONG_LEASE), 0);
    actor_init(&A[0], name, LONG_LEASE);
    actor_init(&A[1], name, LONG_LEASE);
    actor_init(&A[2], name, LONG_LEASE);
    actor_init(&A[3], name, 0);
    A[3].rw = &rw;
    actor_init(&A[4], name, LONG_LEASE);
    actor_start(&A[0], DLT_PROC);
    actor_start(&A[1], DLT_PROC);
    actor_start(&A[2], DLT_THREAD);
    actor_start(&A[3], DLT_THREAD);
    actor_start(&A[4], DLT_THREAD);

    /* A writer in another process holds it. */
    DLT_ASSERT_ERR(ado(&A[0], A_WR), 0);
    DLT_ASSERT_ERR(try_counted(&A[1], A_TRYRD, 1), EBUSY);
    DLT_ASSERT_ERR(try_counted(&A[1], A_TRYWR, 1), EBUSY);
    DLT_ASSERT_ERR(try_counted(&A[2], A_TRYRD, 1), EBUSY);
    DLT_ASSERT_ERR(try_counted(&A[2], A_TRYWR, 1), EBUSY);
    DLT_ASSERT_ERR(try_counted(&A[3], A_TRYRD, 1), EBUSY);
    DLT_ASSERT_INT_EQ(A[3].holds, 0);
    DLT_ASSERT_ERR(actor_do(&A[1], Q(.op = A_XLOCK, .shared = 1, .flags = DLOCK_F_TRY)), EBUSY);
    DLT_ASSERT_ERR(actor_do(&A[2], Q(.op = A_XLOCK, .shared = 0, .flags = DLOCK_F_TRY)), EBUSY);
    DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);

    /* A writer thread of this process (same object): no round trip. */
    DLT_ASSERT_ERR(ado(&A[3], A_WR), 0);
    dlt_redis_reset_stats(&dlt_server);
    e0 = dlt_evals();
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&rw), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_xlock(&rw, 1, DLOCK_F_TRY | DLOCK_F_INTR, CLOCK_REALTIME, NULL), EBUSY);
    DLT_ASSERT_INT_EQ(dlt_evals() - e0, 0);
    DLT_ASSERT_ERR(try_counted(&A[1], A_TRYRD, 1), EBUSY);
    DLT_ASSERT_ERR(try_counted(&A[2], A_TRYWR, 1), EBUSY);
    DLT_ASSERT_ERR(ado(&A[3], A_UNLOCK), 0);

    /* Readers hold it (a process and a thread): trywrlock is EBUSY,
     * tryrdlock is 0. */
    DLT_ASSERT_ERR(ado(&A[0], A_RD), 0);
    DLT_ASSERT_ERR(ado(&A[4], A_RD), 0);
    DLT_ASSERT_ERR(try_counted(&A[1], A_TRYWR, 1), EBUSY);
    DLT_ASSERT_ERR(try_counted(&A[2], A_TRYWR, 1), EBUSY);
    DLT_ASSERT_ERR(try_counted(&A[3], A_TRYWR, 1), EBUSY);
    DLT_ASSERT_ERR(actor_do(&A[1], Q(.op = A_XLOCK, .shared = 0, .flags = DLOCK_F_TRY)), EBUSY);
    DLT_ASSERT_ERR(try_counted(&A[1], A_TRYRD, 1), 0);
    DLT_ASSERT_ERR(try_counted(&A[3], A_TRYRD, 1), 0);
    DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(&A[3], A_UNLOCK), 0);
    /* Once one reader leaves, the other still keeps writers out. */
    DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
    DLT_ASSERT_ERR(try_counted(&A[1], A_TRYWR, 1), EBUSY);
    DLT_ASSERT_ERR(ado(&A[4], A_UNLOCK), 0);
    DLT_ASSERT_ERR(try_counted(&A[1], A_TRYWR, 1), 0);
    DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), 0);
    DLT_ASSERT_ERR(actor_do(&A[2], Q(.op = A_XLOCK, .shared = 1, .flags = DLOCK_F_TRY)), 0);
    DLT_ASSERT_INT_EQ(A[2].holds, 1);
    DLT_ASSERT_ERR(ado(&A[2], A_UNLOCK), 0);

    actor_stop(&A[4]);
    actor_stop(&A[3]);
    actor_stop(&A[2]);
    actor_stop(&A[1]);
    actor_stop(&A[0]);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(A, 5);
}

/* ========================================================================
 * timedrdlock / timedwrlock / clockrdlock / clockwrlock: ETIMEDOUT by the
 * deadline; a past deadline still acquires a free lock; a bad tv_nsec is
 * EINVAL only on a call that would wait.
 * ====================================================================== */

#define TIMED_MS 250

/* Posts op to the waiters w[0..n), waits for all; each must give want
 * after about TIMED_MS. */
static void timed_round(actor *w, int n, areq q, int want) {
    int seq[4], i;
    for (i = 0; i < n; i++) seq[i] = actor_post(&w[i], q);
    for (i = 0; i < n; i++) {
        double took;
        DLT_ASSERT_ERR(actor_wait(&w[i], seq[i], 10000), want);
        DLT_ASSERT_INT_EQ(w[i].holds, 0);
        took = w[i].t_end - w[i].t_begin;
        if (took < (TIMED_MS - 15) / 1000.0 || took > (TIMED_MS + 700) / 1000.0)
            fprintf(stderr, "  op %d clk %d: %.3f s for a %d ms deadline\n", q.op, (int)q.clk, took, TIMED_MS);
        CU_ASSERT_TRUE(took >= (TIMED_MS - 15) / 1000.0);
        CU_ASSERT_TRUE(took <= (TIMED_MS + 700) / 1000.0);
    }
}

static void timed_rows(int holder_proc) {
    char n1[64], n2[64], n3[64], n4[64];
    actor *A = DLT_SHM_NEW(actor, 3);
    int i;
    /* A[0] the holder; A[1] a waiter thread, A[2] a waiter process.  Each
     * phase uses its own lock name, so that what one phase leaves on the
     * server cannot decide the next. */
    snprintf(n1, sizeof n1, "rw/timed/%d/readers-hold", holder_proc);
    snprintf(n2, sizeof n2, "rw/timed/%d/writer-holds", holder_proc);
    snprintf(n3, sizeof n3, "rw/timed/%d/free", holder_proc);
    snprintf(n4, sizeof n4, "rw/timed/%d/badns", holder_proc);

    for (i = 0; i < 4; i++) {
        const char *nm = i == 0 ? n1 : i == 1 ? n2 : i == 2 ? n3 : n4;
        actor_init(&A[0], nm, 0);
        actor_init(&A[1], nm, 0);
        actor_init(&A[2], nm, 0);
        if (holder_proc) actor_start(&A[0], DLT_PROC);
        actor_start(&A[2], DLT_PROC);
        if (!holder_proc) actor_start(&A[0], DLT_THREAD);
        actor_start(&A[1], DLT_THREAD);
        if (i == 0) {
            /* Readers hold: readers get in at once, writers time out. */
            DLT_ASSERT_ERR(ado(&A[0], A_RD), 0);
            DLT_ASSERT_ERR(actor_do(&A[1], Q(.op = A_TIMEDRD, .ms = TIMED_MS)), 0);
            DLT_ASSERT_ERR(actor_do(&A[2], Q(.op = A_CLOCKRD, .ms = TIMED_MS, .clk = CLOCK_MONOTONIC)), 0);
            DLT_ASSERT_INT_EQ(A[1].holds, 1);
            DLT_ASSERT_INT_EQ(A[2].holds, 1);
            CU_ASSERT_TRUE(A[1].t_end - A[1].t_begin < 0.2);
            CU_ASSERT_TRUE(A[2].t_end - A[2].t_begin < 0.2);
            DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), 0);
            DLT_ASSERT_ERR(ado(&A[2], A_UNLOCK), 0);
            timed_round(&A[1], 2, Q(.op = A_TIMEDWR, .ms = TIMED_MS), ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_CLOCKWR, .ms = TIMED_MS, .clk = CLOCK_REALTIME), ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_CLOCKWR, .ms = TIMED_MS, .clk = CLOCK_MONOTONIC), ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_XLOCK, .ms = TIMED_MS, .clk = CLOCK_MONOTONIC, .timed = 1),
                        ETIMEDOUT);
            DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
        } else if (i == 1) {
            /* A writer holds: everyone times out. */
            DLT_ASSERT_ERR(ado(&A[0], A_WR), 0);
            timed_round(&A[1], 2, Q(.op = A_TIMEDRD, .ms = TIMED_MS), ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_CLOCKRD, .ms = TIMED_MS, .clk = CLOCK_REALTIME), ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_CLOCKRD, .ms = TIMED_MS, .clk = CLOCK_MONOTONIC), ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_XLOCK, .ms = TIMED_MS, .clk = CLOCK_REALTIME, .timed = 1, .shared = 1),
                        ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_TIMEDWR, .ms = TIMED_MS), ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_CLOCKWR, .ms = TIMED_MS, .clk = CLOCK_REALTIME), ETIMEDOUT);
            timed_round(&A[1], 2, Q(.op = A_CLOCKWR, .ms = TIMED_MS, .clk = CLOCK_MONOTONIC), ETIMEDOUT);
            /* The holder is unaffected. */
            DLT_ASSERT_ERR(ado(&A[0], A_HOLDS), 2);
            DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
        } else if (i == 2) {
            /* Free: a deadline in the past still acquires; so does a bad
             * tv_nsec, which need not be looked at. */
            static const int ops[] = { A_TIMEDRD, A_CLOCKRD, A_TIMEDWR, A_CLOCKWR };
            int k, j;
            for (k = 0; k < 4; k++) {
                for (j = 0; j < 3; j++) {
                    clockid_t clk = j == 1 ? CLOCK_MONOTONIC : CLOCK_REALTIME;
                    areq q = Q(.op = ops[k], .ms = -1500, .clk = clk);
                    if (j == 2) {
                        q.ms = 1000;
                        q.badns = 1 + k % 2;
                    }
                    DLT_ASSERT_ERR(actor_do(&A[1 + (k + j) % 2], q), 0);
                    DLT_ASSERT_INT_EQ(A[1 + (k + j) % 2].holds, ops[k] == A_TIMEDRD || ops[k] == A_CLOCKRD ? 1 : 2);
                    CU_ASSERT_TRUE(A[1 + (k + j) % 2].t_end - A[1 + (k + j) % 2].t_begin < 0.3);
                    DLT_ASSERT_ERR(ado(&A[1 + (k + j) % 2], A_UNLOCK), 0);
                }
            }
            DLT_ASSERT_ERR(actor_do(&A[1], Q(.op = A_XLOCK, .ms = -10, .clk = CLOCK_MONOTONIC, .timed = 1)), 0);
            DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), 0);
        } else {
            /* Busy, and a bad tv_nsec: EINVAL, at once, nothing held. */
            DLT_ASSERT_ERR(ado(&A[0], A_WR), 0);
            for (int k = 1; k <= 2; k++) {
                DLT_ASSERT_ERR(actor_do(&A[1], Q(.op = A_TIMEDRD, .ms = 1000, .badns = k)), EINVAL);
                DLT_ASSERT_ERR(actor_do(&A[2], Q(.op = A_TIMEDRD, .ms = 1000, .badns = k)), EINVAL);
                DLT_ASSERT_ERR(actor_do(&A[1], Q(.op = A_CLOCKWR, .ms = 1000, .clk = CLOCK_MONOTONIC, .badns = k)),
                               EINVAL);
                DLT_ASSERT_ERR(actor_do(&A[2], Q(.op = A_CLOCKWR, .ms = 1000, .clk = CLOCK_MONOTONIC, .badns = k)),
                               EINVAL);
                DLT_ASSERT_INT_EQ(A[1].holds, 0);
                DLT_ASSERT_INT_EQ(A[2].holds, 0);
                CU_ASSERT_TRUE(A[1].t_end - A[1].t_begin < 0.3);
                CU_ASSERT_TRUE(A[2].t_end - A[2].t_begin < 0.3);
            }
            DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
        }
        actor_stop(&A[1]);
        actor_stop(&A[2]);
        actor_stop(&A[0]);
    }
    DLT_SHM_FREE(A, 3);
}

static void test_timed_and_clock(void) {
    timed_rows(DLT_PROC);
    timed_rows(DLT_THREAD);
}

/* ========================================================================
 * EDEADLK and recursive reads.  wrlock by the write holder, wrlock by a
 * read holder, rdlock by the write holder: EDEADLK.  A read holder may
 * rdlock again (a count, no round trip) and must unlock as many times.
 * ====================================================================== */

typedef struct dl_arg {
    char name[64];
    dlock_rwlock_t *rw;
    long long recursion_evals; /* filled when count_evals */
    int count_evals;
} dl_arg;

static int deadlock_worker(void *p) {
    dl_arg *a = p;
    dlock_rwlock_t own, *rw = a->rw != NULL ? a->rw : &own;
    struct timespec rt = dlt_abs_in(CLOCK_REALTIME, 200), mt = dlt_abs_in(CLOCK_MONOTONIC, 200);
    uint64_t f1, f2;
    long long e0 = 0;
    int i;
    if (a->rw == NULL) DLT_CK(dlock_rwlock_init(&own, a->name, NULL), 0);

    /* The write holder. */
    DLT_CK(dlock_rwlock_wrlock(rw), 0);
    DLT_CK(dlock_rwlock_holds(rw), 2);
    f1 = dlock_rwlock_fence(rw);
    DLT_CKT(f1 > 0);
    DLT_CK(dlock_rwlock_wrlock(rw), EDEADLK);
    DLT_CK(dlock_rwlock_rdlock(rw), EDEADLK);
    DLT_CK(dlock_rwlock_timedwrlock(rw, &rt), EDEADLK);
    DLT_CK(dlock_rwlock_timedrdlock(rw, &rt), EDEADLK);
    DLT_CK(dlock_rwlock_clockwrlock(rw, CLOCK_MONOTONIC, &mt), EDEADLK);
    DLT_CK(dlock_rwlock_clockrdlock(rw, CLOCK_MONOTONIC, &mt), EDEADLK);
    DLT_CK(dlock_rwlock_xlock(rw, 0, DLOCK_F_INTR, CLOCK_REALTIME, NULL), EDEADLK);
    DLT_CK(dlock_rwlock_xlock(rw, 1, 0, CLOCK_REALTIME, NULL), EDEADLK);
    DLT_CK(dlock_rwlock_trywrlock(rw), EBUSY);
    DLT_CK(dlock_rwlock_tryrdlock(rw), EBUSY);
    DLT_CK(dlock_rwlock_xlock(rw, 1, DLOCK_F_TRY, CLOCK_REALTIME, NULL), EBUSY);
    DLT_CK(dlock_rwlock_holds(rw), 2);
    DLT_CK(dlock_rwlock_fence(rw), f1);
    DLT_CK(dlock_rwlock_unlock(rw), 0); /* one unlock releases it */
    DLT_CK(dlock_rwlock_holds(rw), 0);
    DLT_CK(dlock_rwlock_fence(rw), 0);
    DLT_CK(dlock_rwlock_unlock(rw), EPERM);

    /* The read holder: recursion, and no upgrade. */
    DLT_CK(dlock_rwlock_rdlock(rw), 0);
    f2 = dlock_rwlock_fence(rw);
    DLT_CKT(f2 > f1);
    if (a->count_evals) {
        dlt_redis_reset_stats(&dlt_server);
        e0 = dlt_evals();
    }
    DLT_CK(dlock_rwlock_rdlock(rw), 0);
    DLT_CK(dlock_rwlock_tryrdlock(rw), 0);
    DLT_CK(dlock_rwlock_timedrdlock(rw, &rt), 0);
    DLT_CK(dlock_rwlock_clockrdlock(rw, CLOCK_MONOTONIC, &mt), 0);
    DLT_CK(dlock_rwlock_xlock(rw, 1, DLOCK_F_INTR, CLOCK_REALTIME, NULL), 0);
    DLT_CK(dlock_rwlock_xlock(rw, 1, DLOCK_F_TRY, CLOCK_REALTIME, NULL), 0); /* count 7 */
    DLT_CK(dlock_rwlock_wrlock(rw), EDEADLK);
    DLT_CK(dlock_rwlock_timedwrlock(rw, &rt), EDEADLK);
    DLT_CK(dlock_rwlock_clockwrlock(rw, CLOCK_REALTIME, &rt), EDEADLK);
    DLT_CK(dlock_rwlock_xlock(rw, 0, DLOCK_F_INTR, CLOCK_REALTIME, NULL), EDEADLK);
    DLT_CK(dlock_rwlock_trywrlock(rw), EBUSY);
    DLT_CK(dlock_rwlock_xlock(rw, 0, DLOCK_F_TRY, CLOCK_REALTIME, NULL), EBUSY);
    DLT_CK(dlock_rwlock_holds(rw), 1);
    DLT_CK(dlock_rwlock_fence(rw), f2);
    for (i = 0; i < 6; i++) {
        DLT_CK(dlock_rwlock_unlock(rw), 0);
        DLT_CK(dlock_rwlock_holds(rw), 1);
    }
    if (a->count_evals) a->recursion_evals = dlt_evals() - e0;
    DLT_CK(dlock_rwlock_unlock(rw), 0);
    DLT_CK(dlock_rwlock_holds(rw), 0);
    DLT_CK(dlock_rwlock_unlock(rw), EPERM);
    /* And the lock is free for a writer again. */
    DLT_CK(dlock_rwlock_trywrlock(rw), 0);
    DLT_CKT(dlock_rwlock_fence(rw) > f2);
    DLT_CK(dlock_rwlock_unlock(rw), 0);
    if (a->rw == NULL) DLT_CK(dlock_rwlock_destroy(&own), 0);
    return 0;
}

static void test_edeadlk_and_recursive_read(void) {
    dl_arg *a = DLT_SHM_NEW(dl_arg, 6);
    actor *A = DLT_SHM_NEW(actor, 1);
    dlock_rwlock_t rw;
    int i, seq;

    for (i = 0; i < 6; i++) snprintf(a[i].name, sizeof a[i].name, "rw/deadlk/%d", i);
    /* This thread, with the round trips of the recursion counted. */
    a[0].count_evals = 1;
    DLT_ASSERT_INT_EQ(deadlock_worker(&a[0]), 0);
    DLT_ASSERT_INT_EQ(a[0].recursion_evals, 0);
    /* 3 threads (one on an object of this thread's) and 2 processes. */
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, a[1].name, NULL), 0);
    a[1].rw = &rw;
    dlt_run_all(deadlock_worker, &a[1], sizeof *a, 3, 2);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);

    /* While the read count is above 1, and until the last unlock, the
     * read hold stays on the server: another process cannot write. */
    actor_init(&A[0], "rw/deadlk/count", 0);
    actor_start(&A[0], DLT_PROC);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "rw/deadlk/count", NULL), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(ado(&A[0], A_TRYWR), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(ado(&A[0], A_TRYWR), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_INT_EQ(zcard("rw/deadlk/count", "readers"), 1);
    seq = actor_post(&A[0], Q(.op = A_WR));
    dlt_sleep_ms(200);
    CU_ASSERT_FALSE(actor_done(&A[0], seq));
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(actor_wait(&A[0], seq, 5000), 0);
    CU_ASSERT_TRUE(A[0].t_end - A[0].t_begin < 2.0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), EPERM);
    DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
    actor_stop(&A[0]);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(A, 1);
    DLT_SHM_FREE(a, 6);
}

/* ========================================================================
 * unlock: EPERM for a non-holder; releases whichever mode the caller
 * holds; a writer waiting in another process (or thread) wakes promptly
 * when the last reader unlocks.
 * ====================================================================== */

static void unlock_eperm_row(int holder_proc) {
    const char *name = holder_proc ? "rw/unlock/eperm/p" : "rw/unlock/eperm/t";
    actor *A = DLT_SHM_NEW(actor, 3);
    dlock_rwlock_t rw;
    int mode;

    /* A[0] the holder; A[1] a thread on the test's object; A[2] a process. */
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, name, NULL), 0);
    actor_init(&A[0], name, 0);
    actor_init(&A[1], name, 0);
    A[1].rw = &rw;
    actor_init(&A[2], name, 0);
    if (holder_proc) actor_start(&A[0], DLT_PROC);
    actor_start(&A[2], DLT_PROC);
    if (!holder_proc) {
        A[0].rw = &rw; /* threads of one process, one object */
        actor_start(&A[0], DLT_THREAD);
    }
    actor_start(&A[1], DLT_THREAD);

    /* Free: nobody holds it. */
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), EPERM);
    DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), EPERM);
    DLT_ASSERT_ERR(ado(&A[2], A_UNLOCK), EPERM);
    for (mode = A_RD; mode <= A_WR; mode++) {
        DLT_ASSERT_ERR(ado(&A[0], mode), 0);
        DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), EPERM);
        DLT_ASSERT_ERR(ado(&A[1], A_UNLOCK), EPERM);
        DLT_ASSERT_ERR(ado(&A[2], A_UNLOCK), EPERM);
        /* The holder still holds it. */
        DLT_ASSERT_ERR(ado(&A[0], A_HOLDS), mode == A_RD ? 1 : 2);
        DLT_ASSERT_ERR(ado(&A[2], A_TRYWR), EBUSY);
        /* Its unlock releases whichever mode it holds. */
        DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
        DLT_ASSERT_INT_EQ(A[0].holds, 0);
        DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), EPERM);
        DLT_ASSERT_ERR(ado(&A[2], A_TRYWR), 0);
        DLT_ASSERT_ERR(ado(&A[2], A_UNLOCK), 0);
    }
    /* Another reader's unlock does not release mine. */
    DLT_ASSERT_ERR(ado(&A[0], A_RD), 0);
    DLT_ASSERT_ERR(ado(&A[2], A_RD), 0);
    DLT_ASSERT_ERR(ado(&A[2], A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(&A[2], A_UNLOCK), EPERM);
    DLT_ASSERT_ERR(ado(&A[2], A_TRYWR), EBUSY);
    DLT_ASSERT_ERR(ado(&A[0], A_UNLOCK), 0);
    DLT_ASSERT_INT_EQ(zcard(name, "readers"), 0);

    actor_stop(&A[1]);
    actor_stop(&A[0]);
    actor_stop(&A[2]);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(A, 3);
}

/* Readers R0 (a thread) and R1 (a process) hold; writer W waits; R1
 * unlocks, W still waits; R0 unlocks, W gets the lock well under 1 s. */
static void wake_row(int writer_proc) {
    const char *name = writer_proc ? "rw/unlock/wake/p" : "rw/unlock/wake/t";
    actor *A = DLT_SHM_NEW(actor, 3);
    actor *R0 = &A[0], *R1 = &A[1], *W = &A[2];
    double lat;
    int seq;

    actor_init(R0, name, 0);
    actor_init(R1, name, 0);
    actor_init(W, name, 0);
    actor_start(R1, DLT_PROC);
    if (writer_proc) actor_start(W, DLT_PROC);
    actor_start(R0, DLT_THREAD);
    if (!writer_proc) actor_start(W, DLT_THREAD);

    DLT_ASSERT_ERR(ado(R0, A_RD), 0);
    DLT_ASSERT_ERR(ado(R1, A_RD), 0);
    seq = actor_post(W, Q(.op = A_WR));
    CU_ASSERT_TRUE(wait_zcard_ge(name, "writers", 1, 5000));
    dlt_sleep_ms(100);
    CU_ASSERT_FALSE(actor_done(W, seq));
    DLT_ASSERT_ERR(ado(R1, A_UNLOCK), 0);
    dlt_sleep_ms(200);
    CU_ASSERT_FALSE(actor_done(W, seq));
    DLT_ASSERT_ERR(ado(R0, A_UNLOCK), 0);
    DLT_ASSERT_ERR(actor_wait(W, seq, 5000), 0);
    DLT_ASSERT_INT_EQ(W->holds, 2);
    lat = W->t_end - R0->t_end;
    fprintf(stderr, "  writer (%s) woke %.1f ms after the last reader's unlock\n", writer_proc ? "process" : "thread",
            lat * 1000);
    CU_ASSERT_TRUE(lat < 0.5);
    DLT_ASSERT_ERR(ado(R1, A_TRYRD), EBUSY);
    DLT_ASSERT_ERR(ado(W, A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(R1, A_TRYRD), 0);
    DLT_ASSERT_ERR(ado(R1, A_UNLOCK), 0);
    actor_stop(R0);
    actor_stop(W);
    actor_stop(R1);
    DLT_SHM_FREE(A, 3);
}

static void test_unlock(void) {
    unlock_eperm_row(DLT_PROC);
    unlock_eperm_row(DLT_THREAD);
    wake_row(DLT_PROC);
    wake_row(DLT_THREAD);
}

/* ========================================================================
 * Writers first.  The policy (dlock.h): a writer that has to wait
 * registers itself, and while a writer waits, new readers wait too --
 * tryrdlock is EBUSY -- so readers cannot starve it; when the writer has
 * had the lock and released it, the queued readers proceed at once.
 * ====================================================================== */

static void writers_first_row(int proc) {
    const char *name = proc ? "rw/wfirst/p" : "rw/wfirst/t";
    actor *A = DLT_SHM_NEW(actor, 3);
    actor *R = &A[0], *W = &A[1], *N = &A[2];
    dlock_rwlock_t rw;
    double t0;
    int sw, sn;

    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, name, NULL), 0);
    actor_init(R, name, 0);
    actor_init(W, name, 0);
    actor_init(N, name, 0);
    actor_start(R, proc);
    actor_start(W, proc);
    actor_start(N, proc);

    DLT_ASSERT_ERR(ado(R, A_RD), 0);
    DLT_ASSERT_ERR(ado(N, A_TRYRD), 0); /* no writer waits yet: readers share */
    DLT_ASSERT_ERR(ado(N, A_UNLOCK), 0);
    sw = actor_post(W, Q(.op = A_WR));
    CU_ASSERT_TRUE(wait_zcard_ge(name, "writers", 1, 5000));
    dlt_sleep_ms(50);
    CU_ASSERT_FALSE(actor_done(W, sw));
    /* A writer waits: new readers do not get in, from anywhere. */
    DLT_ASSERT_ERR(ado(N, A_TRYRD), EBUSY);
    DLT_ASSERT_ERR(actor_do(N, Q(.op = A_XLOCK, .shared = 1, .flags = DLOCK_F_TRY)), EBUSY);
    DLT_ASSERT_ERR(actor_do(N, Q(.op = A_TIMEDRD, .ms = 200)), ETIMEDOUT);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), EBUSY);
    sn = actor_post(N, Q(.op = A_RD));
    dlt_sleep_ms(300);
    CU_ASSERT_FALSE(actor_done(N, sn));
    CU_ASSERT_FALSE(actor_done(W, sw));
    /* The reader that holds it is not affected: it may read-lock again. */
    DLT_ASSERT_ERR(ado(R, A_RD), 0);
    DLT_ASSERT_ERR(ado(R, A_UNLOCK), 0);
    /* The last reader leaves: the writer first, promptly. */
    DLT_ASSERT_ERR(ado(R, A_UNLOCK), 0);
    t0 = R->t_end;
    DLT_ASSERT_ERR(actor_wait(W, sw, 5000), 0);
    fprintf(stderr, "  writer (%s) got it %.1f ms after the reader left\n", proc ? "process" : "thread",
            (W->t_end - t0) * 1000);
    CU_ASSERT_TRUE(W->t_end - t0 < 0.5);
    /* Taken while a reader waited (one that could not mark any hold: there
     * was none), so its release must tell: the hold is marked. */
    DLT_ASSERT_INT_EQ(dlt_key_field(name, "w"), 1);
    dlt_sleep_ms(200);
    CU_ASSERT_FALSE(actor_done(N, sn));
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), EBUSY);
    /* The writer leaves: the queued reader proceeds, promptly. */
    DLT_ASSERT_ERR(ado(W, A_UNLOCK), 0);
    t0 = W->t_end;
    DLT_ASSERT_ERR(actor_wait(N, sn, 5000), 0);
    fprintf(stderr, "  queued reader (%s) got it %.1f ms after the writer left\n", proc ? "process" : "thread",
            (N->t_end - t0) * 1000);
    CU_ASSERT_TRUE(N->t_end - t0 < 0.5);
    DLT_ASSERT_INT_EQ(N->holds, 1);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), 0);
    DLT_ASSERT_ERR(ado(R, A_TRYRD), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(ado(R, A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(N, A_UNLOCK), 0);
    DLT_ASSERT_INT_EQ(zcard(name, "writers"), 0);
    actor_stop(N);
    actor_stop(W);
    actor_stop(R);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(A, 3);
}

static void test_writers_first(void) {
    writers_first_row(DLT_PROC);
    writers_first_row(DLT_THREAD);
}

/* A writer that took the lock uncontended (its hold unmarked: its release
 * would tell nobody): a reader in another process that comes to wait
 * marks it, and the writer's unlock wakes that reader at once, long
 * before the lease.  A reader thread of the writer's own process waits in
 * the process (its unlock wakes it there), so it need not mark it. */
static void reader_marks_row(int proc) {
    const char *name = proc ? "rw/mark/p" : "rw/mark/t";
    actor *A = DLT_SHM_NEW(actor, 2);
    actor *W = &A[0], *N = &A[1];
    int sn;

    actor_init(W, name, 0);
    actor_init(N, name, 0);
    actor_start(W, proc);
    actor_start(N, proc);
    DLT_ASSERT_ERR(ado(W, A_WR), 0);
    DLT_ASSERT_INT_EQ(dlt_key_field(name, "w"), -1);
    DLT_ASSERT_ERR(ado(N, A_TRYRD), EBUSY);
    sn = actor_post(N, Q(.op = A_RD));
    if (proc) {
        double end = dlt_now() + 5;
        while (dlt_key_field(name, "w") != 1 && dlt_now() < end) dlt_sleep_ms(5);
        DLT_ASSERT_INT_EQ(dlt_key_field(name, "w"), 1);
    }
    dlt_sleep_ms(100);
    CU_ASSERT_FALSE(actor_done(N, sn));
    DLT_ASSERT_ERR(ado(W, A_UNLOCK), 0);
    double t0 = W->t_end;
    DLT_ASSERT_ERR(actor_wait(N, sn, 5000), 0);
    fprintf(stderr, "  reader (%s) got it %.1f ms after the writer left\n", proc ? "process" : "thread",
            (N->t_end - t0) * 1000);
    CU_ASSERT_TRUE(N->t_end - t0 < 0.5);
    DLT_ASSERT_ERR(ado(N, A_UNLOCK), 0);
    actor_stop(N);
    actor_stop(W);
    DLT_SHM_FREE(A, 2);
}

static void test_reader_marks_writer(void) {
    reader_marks_row(DLT_PROC);
    reader_marks_row(DLT_THREAD);
}

/* A writer that gives up (ETIMEDOUT, EINVAL for a bad deadline, EINTR)
 * waits no more: it must not go on holding new readers back. */
enum { G_TIMED, G_PAST, G_BADNS, G_MUTEX_TIMED, G_INTR, G_N };
static const char *const g_what[G_N] = { "timedwrlock ETIMEDOUT", "clockwrlock past deadline ETIMEDOUT",
                                         "timedwrlock bad tv_nsec EINVAL", "mutex timedlock ETIMEDOUT",
                                         "xlock(DLOCK_F_INTR) EINTR" };

static void giveup_case(int proc, int how) {
    char name[64];
    actor *A = DLT_SHM_NEW(actor, 3);
    actor *R = &A[0], *W = &A[1], *N = &A[2];
    int rc;

    snprintf(name, sizeof name, "rw/giveup/%d/%d", proc, how);
    actor_init(R, name, 0);
    actor_init(W, name, 0);
    actor_init(N, name, 0);
    W->with_mutex = how == G_MUTEX_TIMED;
    W->alrm = 1;
    actor_start(R, proc);
    actor_start(W, proc);
    actor_start(N, proc);

    DLT_ASSERT_ERR(ado(R, A_RD), 0);
    switch (how) {
    case G_TIMED: rc = actor_do(W, Q(.op = A_TIMEDWR, .ms = 200)); DLT_ASSERT_ERR(rc, ETIMEDOUT); break;
    case G_PAST:
        rc = actor_do(W, Q(.op = A_CLOCKWR, .ms = -100, .clk = CLOCK_MONOTONIC));
        DLT_ASSERT_ERR(rc, ETIMEDOUT);
        break;
    case G_BADNS: rc = actor_do(W, Q(.op = A_TIMEDWR, .ms = 200, .badns = 1)); DLT_ASSERT_ERR(rc, EINVAL); break;
    case G_MUTEX_TIMED: rc = actor_do(W, Q(.op = A_MTIMED, .ms = 200)); DLT_ASSERT_ERR(rc, ETIMEDOUT); break;
    default:
        rc = actor_do(W, Q(.op = A_XLOCK, .shared = 0, .flags = DLOCK_F_INTR, .alarm_ms = 200, .sig = 1));
        DLT_ASSERT_ERR(rc, EINTR);
        break;
    }
    DLT_ASSERT_INT_EQ(W->holds, 0);
    /* No writer holds or waits: a new reader gets in. */
    rc = ado(N, A_TRYRD);
    if (rc != 0) {
        fprintf(stderr, "  BUG: after %s (%s), a new reader's tryrdlock gives %s:\n", g_what[how],
                proc ? "processes" : "threads", dlt_errno_label(rc));
        dump_lock(name);
    }
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) DLT_ASSERT_ERR(ado(N, A_UNLOCK), 0);
    rc = actor_do(N, Q(.op = A_TIMEDRD, .ms = 500));
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) DLT_ASSERT_ERR(ado(N, A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(R, A_UNLOCK), 0);
    actor_stop(N);
    actor_stop(W);
    actor_stop(R);
    DLT_SHM_FREE(A, 3);
}

static void test_writer_giving_up_lets_readers_in(void) {
    int how;
    for (how = 0; how < G_N; how++) {
        if (how == G_INTR) continue; /* processes only: below */
        giveup_case(DLT_THREAD, how);
    }
    for (how = 0; how < G_N; how++) giveup_case(DLT_PROC, how);
}

/* A writer whose lease is shorter than the time it has to wait for the
 * readers is still waiting: new readers must still wait. */
static void test_writers_first_long_wait(void) {
    const char *name = "rw/wfirst/longwait";
    actor *A = DLT_SHM_NEW(actor, 3);
    actor *R = &A[0], *W = &A[1], *N = &A[2];
    int sw, rc;

    actor_init(R, name, 0);
    actor_init(W, name, 300); /* its registration must outlive 300 ms */
    actor_init(N, name, 0);
    actor_start(R, DLT_PROC);
    actor_start(W, DLT_PROC);
    actor_start(N, DLT_PROC);
    DLT_ASSERT_ERR(ado(R, A_RD), 0);
    sw = actor_post(W, Q(.op = A_WR));
    CU_ASSERT_TRUE(wait_zcard_ge(name, "writers", 1, 5000));
    DLT_ASSERT_ERR(ado(N, A_TRYRD), EBUSY);
    dlt_sleep_ms(900); /* three of the writer's leases */
    CU_ASSERT_FALSE(actor_done(W, sw));
    rc = ado(N, A_TRYRD);
    if (rc != EBUSY) {
        fprintf(stderr, "  BUG: a writer with a 300 ms lease has waited 900 ms; a new reader's tryrdlock gives %s:\n",
                dlt_errno_label(rc));
        dump_lock(name);
    }
    DLT_ASSERT_ERR(rc, EBUSY);
    if (rc == 0) DLT_ASSERT_ERR(ado(N, A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(R, A_UNLOCK), 0);
    DLT_ASSERT_ERR(actor_wait(W, sw, 15000), 0);
    DLT_ASSERT_ERR(ado(W, A_UNLOCK), 0);
    actor_stop(N);
    actor_stop(W);
    actor_stop(R);
    DLT_SHM_FREE(A, 3);
}

/* ========================================================================
 * No writer starvation: 4 readers (2 threads, 2 processes) take
 * overlapping read locks without pause for ~3 s; a writer still gets the
 * lock, each time, within 1 s.
 * ====================================================================== */

typedef struct starve_shared {
    int stop, inside, peak, reads, violations, writer_inside;
} starve_shared;

typedef struct starve_arg {
    starve_shared *s;
    char name[64];
    int i;
} starve_arg;

static int starve_reader(void *p) {
    starve_arg *a = p;
    starve_shared *s = a->s;
    dlock_rwlock_t rw;
    unsigned seed = (unsigned)getpid() * 7919u + (unsigned)a->i;
    double end = dlt_now() + 20;
    int in, pk;
    DLT_CK(dlock_rwlock_init(&rw, a->name, NULL), 0);
    dlt_sleep_ms(10u * (unsigned)a->i); /* staggered: the holds overlap */
    while (!dlt_flag_get(&s->stop) && dlt_now() < end) {
        DLT_CK(dlock_rwlock_rdlock(&rw), 0);
        if (dlt_flag_get(&s->writer_inside)) dlt_flag_add(&s->violations, 1);
        in = dlt_flag_add(&s->inside, 1);
        while ((pk = dlt_flag_get(&s->peak)) < in &&
               !__atomic_compare_exchange_n(&s->peak, &pk, in, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            ;
        dlt_flag_add(&s->reads, 1);
        dlt_sleep_ms(20 + rand_r(&seed) % 40);
        dlt_flag_add(&s->inside, -1);
        DLT_CK(dlock_rwlock_unlock(&rw), 0);
    }
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    return 0;
}

static void starve_row(int writer_proc) {
    enum { NR = 4, ROUNDS = 3 };
    starve_shared *s = DLT_SHM_NEW(starve_shared, 1);
    starve_arg *a = DLT_SHM_NEW(starve_arg, NR);
    actor *W = DLT_SHM_NEW(actor, 1);
    const char *name = writer_proc ? "rw/starve/p" : "rw/starve/t";
    dlt_task t[NR];
    int i, r;

    for (i = 0; i < NR; i++) {
        a[i].s = s;
        a[i].i = i;
        snprintf(a[i].name, sizeof a[i].name, "%s", name);
    }
    actor_init(W, name, 0);
    /* Processes first: readers 2, 3 and a writer process. */
    dlt_task_start(&t[3], DLT_PROC, starve_reader, &a[3]);
    dlt_task_start(&t[2], DLT_PROC, starve_reader, &a[2]);
    if (writer_proc) actor_start(W, DLT_PROC);
    dlt_task_start(&t[1], DLT_THREAD, starve_reader, &a[1]);
    dlt_task_start(&t[0], DLT_THREAD, starve_reader, &a[0]);
    if (!writer_proc) actor_start(W, DLT_THREAD);

    dlt_sleep_ms(400);
    for (r = 0; r < ROUNDS; r++) {
        int before = dlt_flag_get(&s->reads);
        double took;
        DLT_ASSERT_ERR(ado(W, A_WR), 0);
        dlt_flag_set(&s->writer_inside, 1);
        took = W->t_end - W->t_begin;
        fprintf(stderr, "  writer (%s) round %d: got it in %.1f ms, with readers at work (%d reads so far)\n",
                writer_proc ? "process" : "thread", r, took * 1000, before);
        CU_ASSERT_TRUE(took < 1.0);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&s->inside), 0);
        dlt_sleep_ms(50);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&s->inside), 0);
        dlt_flag_set(&s->writer_inside, 0);
        DLT_ASSERT_ERR(ado(W, A_UNLOCK), 0);
        before = dlt_flag_get(&s->reads);
        dlt_sleep_ms(600);
        /* The readers proceed after the writer. */
        CU_ASSERT_TRUE(dlt_flag_get(&s->reads) > before + 4);
    }
    dlt_flag_set(&s->stop, 1);
    for (i = 0; i < NR; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    actor_stop(W);
    fprintf(stderr, "  %d reads, up to %d at once\n", s->reads, s->peak);
    CU_ASSERT_TRUE(s->peak >= 2); /* they did overlap */
    DLT_ASSERT_INT_EQ(s->violations, 0);
    DLT_SHM_FREE(W, 1);
    DLT_SHM_FREE(a, NR);
    DLT_SHM_FREE(s, 1);
}

static void test_no_writer_starvation(void) {
    starve_row(DLT_PROC);
    starve_row(DLT_THREAD);
}

/* ========================================================================
 * Leases: a read hold is renewed; a reader that dies leaves the lock to
 * expire; holds() and fence().
 * ====================================================================== */

static void test_lease_renewed(void) {
    const char *name = "rw/lease/renew";
    actor *A = DLT_SHM_NEW(actor, 4);
    actor *RT = &A[0], *RP = &A[1], *PP = &A[2], *PT = &A[3];
    char first[512], now[512];
    double end;
    int k = 0, n;

    actor_init(RT, name, 300);
    actor_init(RP, name, 300);
    actor_init(PP, name, 0);
    actor_init(PT, name, 0);
    actor_start(RP, DLT_PROC);
    actor_start(PP, DLT_PROC);
    actor_start(RT, DLT_THREAD);
    actor_start(PT, DLT_THREAD);

    DLT_ASSERT_ERR(ado(RT, A_RD), 0);
    DLT_ASSERT_ERR(ado(RP, A_RD), 0);
    uint64_t frt = RT->fence, frp = RP->fence;
    CU_ASSERT_TRUE(frt > 0 && frp > 0);
    DLT_ASSERT_INT_EQ(zmembers(name, "readers", first, sizeof first), 2);
    /* 2 s: well over six leases.  The same two members stay, unexpired,
     * and writers stay out. */
    end = dlt_now() + 2.0;
    while (dlt_now() < end) {
        long long left;
        dlt_sleep_ms(150);
        n = zmembers(name, "readers", now, sizeof now);
        DLT_ASSERT_INT_EQ(n, 2);
        CU_ASSERT_STRING_EQUAL(now, first);
        left = zmin_left_ms(name, "readers");
        CU_ASSERT_TRUE(left > 0 && left <= 300);
        if (!(left > 0 && left <= 300)) fprintf(stderr, "  first reader expires in %lld ms\n", left);
        DLT_ASSERT_ERR(ado(k++ % 2 ? PP : PT, A_TRYWR), EBUSY);
    }
    DLT_ASSERT_ERR(ado(RT, A_HOLDS), 1);
    DLT_ASSERT_ERR(ado(RP, A_HOLDS), 1);
    DLT_ASSERT_INT_EQ(RT->fence, frt);
    DLT_ASSERT_INT_EQ(RP->fence, frp);
    DLT_ASSERT_ERR(ado(RT, A_UNLOCK), 0);
    DLT_ASSERT_INT_EQ(RT->holds, 0);
    DLT_ASSERT_INT_EQ(RT->fence, 0);
    DLT_ASSERT_ERR(ado(PP, A_TRYWR), EBUSY); /* RP still reads */
    DLT_ASSERT_ERR(ado(RP, A_UNLOCK), 0);
    DLT_ASSERT_INT_EQ(zcard(name, "readers"), 0);
    /* A writer with a 300 ms lease is renewed too. */
    DLT_ASSERT_ERR(ado(RP, A_WR), 0);
    DLT_ASSERT_INT_EQ(RP->holds, 2);
    CU_ASSERT_TRUE(RP->fence > frp && RP->fence > frt);
    dlt_sleep_ms(1000);
    DLT_ASSERT_ERR(ado(PT, A_TRYRD), EBUSY);
    DLT_ASSERT_ERR(ado(RP, A_HOLDS), 2);
    DLT_ASSERT_ERR(ado(RP, A_UNLOCK), 0);
    DLT_ASSERT_INT_EQ(RP->holds, 0);
    DLT_ASSERT_INT_EQ(RP->fence, 0);
    actor_stop(PT);
    actor_stop(RT);
    actor_stop(PP);
    actor_stop(RP);
    DLT_SHM_FREE(A, 4);
}

/* A read hold whose lease is lost (its member taken off the server): the
 * renewal fails, holds() turns 0 and unlock is EPERM; writers get in. */
static void test_read_lease_lost(void) {
    const char *name = "rw/lease/lost";
    actor *A = DLT_SHM_NEW(actor, 3);
    actor *RT = &A[0], *RP = &A[1], *W = &A[2];
    actor_init(RT, name, 300);
    actor_init(RP, name, 300);
    actor_init(W, name, 0);
    actor_start(RP, DLT_PROC);
    actor_start(W, DLT_PROC);
    actor_start(RT, DLT_THREAD);
    DLT_ASSERT_ERR(ado(RT, A_RD), 0);
    DLT_ASSERT_ERR(ado(RP, A_RD), 0);
    DLT_ASSERT_ERR(ado(RP, A_RD), 0); /* count 2 */
    DLT_ASSERT_ERR(ado(W, A_TRYWR), EBUSY);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL dlock:{%s}:readers", name)), 1);
    dlt_sleep_ms(500); /* past the lease: a renewal was refused, or validity ran out */
    DLT_ASSERT_ERR(ado(RT, A_HOLDS), 0);
    DLT_ASSERT_INT_EQ(RT->fence, 0);
    DLT_ASSERT_ERR(ado(RP, A_HOLDS), 0);
    DLT_ASSERT_ERR(ado(W, A_TRYWR), 0);
    DLT_ASSERT_ERR(ado(RT, A_UNLOCK), EPERM);
    DLT_ASSERT_ERR(ado(RP, A_UNLOCK), EPERM);
    DLT_ASSERT_ERR(ado(RP, A_UNLOCK), EPERM);
    DLT_ASSERT_ERR(ado(W, A_HOLDS), 2); /* the lost readers' unlocks took nothing */
    DLT_ASSERT_ERR(ado(W, A_UNLOCK), 0);
    /* And they can read-lock afresh. */
    DLT_ASSERT_ERR(ado(RT, A_TRYRD), 0);
    DLT_ASSERT_ERR(ado(RP, A_TRYRD), 0);
    DLT_ASSERT_ERR(ado(RT, A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(RP, A_UNLOCK), 0);
    actor_stop(RT);
    actor_stop(W);
    actor_stop(RP);
    DLT_SHM_FREE(A, 3);
}

/* A reader that dies holding (a SIGKILLed process; a thread that exits):
 * a writer waiting elsewhere gets the lock after the lease runs out, and
 * not before. */
static void reader_dies_row(int proc) {
    const char *name = proc ? "rw/lease/dies/p" : "rw/lease/dies/t";
    enum { LEASE = 1000 };
    actor *A = DLT_SHM_NEW(actor, 2);
    actor *R = &A[0], *W = &A[1];
    dlock_rwlock_t rw;
    double t_dead, after;
    int sw;

    actor_init(R, name, LEASE);
    actor_init(W, name, 0);
    actor_start(W, DLT_PROC);
    if (proc) {
        actor_start(R, DLT_PROC);
    } else {
        /* The thread reads through the test's object, which outlives it. */
        DLT_ASSERT_ERR(init_lease(&rw, name, LEASE), 0);
        R->rw = &rw;
        actor_start(R, DLT_THREAD);
    }
    DLT_ASSERT_ERR(ado(R, A_RD), 0);
    sw = actor_post(W, Q(.op = A_WR));
    CU_ASSERT_TRUE(wait_zcard_ge(name, "writers", 1, 5000));
    dlt_sleep_ms(600); /* past a renewal or two */
    CU_ASSERT_FALSE(actor_done(W, sw));
    if (proc) {
        t_dead = dlt_now();
        actor_kill(R);
    } else {
        DLT_ASSERT_ERR(ado(R, A_EXIT), 0);
        DLT_ASSERT_INT_EQ(dlt_task_join(&R->t, DLT_JOIN_MS), 0);
        t_dead = R->t_end;
    }
    DLT_ASSERT_ERR(actor_wait(W, sw, 10000), 0);
    after = W->t_end - t_dead;
    fprintf(stderr, "  reader %s; the writer got the lock %.0f ms later (lease %d ms)\n",
            proc ? "SIGKILLed" : "thread exited", after * 1000, LEASE);
    CU_ASSERT_TRUE(after > 0.3);                     /* not released: it ran out */
    CU_ASSERT_TRUE(after < LEASE / 1000.0 + 0.5);    /* within the lease and a round trip */
    DLT_ASSERT_ERR(ado(W, A_UNLOCK), 0);
    actor_stop(W);
    if (!proc) {
        /* The dead thread's hold is forgotten here too. */
        DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 0);
        DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), 0);
        DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
        DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    }
    DLT_SHM_FREE(A, 2);
}

static void test_reader_dies(void) {
    reader_dies_row(DLT_PROC);
    reader_dies_row(DLT_THREAD);
}

/* holds(): 1 read, 2 write, 0 after unlock; fence > 0 while held, 0 after,
 * and each acquisition's fence beyond every earlier one. */
typedef struct hf_shared {
    uint64_t fences[64];
    int n;
} hf_shared;

typedef struct hf_arg {
    hf_shared *s;
    dlock_rwlock_t *rw;
} hf_arg;

static int holds_fence_worker(void *p) {
    hf_arg *a = p;
    dlock_rwlock_t own, *rw = a->rw != NULL ? a->rw : &own;
    uint64_t last = 0;
    int i;
    if (a->rw == NULL) DLT_CK(dlock_rwlock_init(&own, "rw/holdsfence", NULL), 0);
    for (i = 0; i < 4; i++) {
        int w = i % 2;
        uint64_t f;
        DLT_CK(dlock_rwlock_holds(rw), 0);
        DLT_CK(dlock_rwlock_fence(rw), 0);
        DLT_CK(w ? dlock_rwlock_wrlock(rw) : dlock_rwlock_rdlock(rw), 0);
        DLT_CK(dlock_rwlock_holds(rw), w ? 2 : 1);
        f = dlock_rwlock_fence(rw);
        DLT_CKT(f > last);
        last = f;
        a->s->fences[dlt_flag_add(&a->s->n, 1) - 1] = f;
        DLT_CK(dlock_rwlock_unlock(rw), 0);
        DLT_CK(dlock_rwlock_holds(rw), 0);
        DLT_CK(dlock_rwlock_fence(rw), 0);
    }
    if (a->rw == NULL) DLT_CK(dlock_rwlock_destroy(&own), 0);
    return 0;
}

static void test_holds_and_fence(void) {
    hf_shared *s = DLT_SHM_NEW(hf_shared, 1);
    hf_arg *a = DLT_SHM_NEW(hf_arg, 4);
    dlock_rwlock_t rw;
    int i, j;
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "rw/holdsfence", NULL), 0);
    for (i = 0; i < 4; i++) {
        a[i].s = s;
        a[i].rw = i == 0 ? &rw : NULL;
    }
    dlt_run_all(holds_fence_worker, a, sizeof *a, 2, 2);
    DLT_ASSERT_INT_EQ(s->n, 16);
    /* Every acquisition, read or write, got a fence of its own. */
    for (i = 0; i < s->n; i++)
        for (j = 0; j < i; j++) CU_ASSERT_TRUE(s->fences[i] != s->fences[j]);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(a, 4);
    DLT_SHM_FREE(s, 1);
}

/* ========================================================================
 * A mutex and an rwlock of the same name are one lock: the mutex excludes
 * readers and writers, and readers exclude the mutex.
 * ====================================================================== */

static void mutex_same_name_row(int proc) {
    const char *name = proc ? "rw/samename/p" : "rw/samename/t";
    actor *A = DLT_SHM_NEW(actor, 2);
    actor *M = &A[0], *P = &A[1];
    dlock_rwlock_t rw;
    dlock_mutex_t m;
    int seq;

    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    actor_init(M, name, 0);
    M->with_mutex = 1;
    actor_init(P, name, 0);
    P->with_mutex = 1;
    actor_start(M, proc);
    actor_start(P, proc);

    /* The mutex is held (M): no reader, no writer. */
    DLT_ASSERT_ERR(ado(M, A_MLOCK), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&rw), EBUSY);
    DLT_ASSERT_ERR(ado(P, A_TRYRD), EBUSY);
    DLT_ASSERT_ERR(ado(P, A_TRYWR), EBUSY);
    DLT_ASSERT_ERR(actor_do(P, Q(.op = A_TIMEDRD, .ms = 200)), ETIMEDOUT);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    /* Its holder cannot read-lock it either. */
    CU_ASSERT_TRUE(ado(M, A_TRYRD) != 0);
    DLT_ASSERT_ERR(ado(M, A_MUNLOCK), 0);
    /* A reader (this thread): the mutex is busy, everywhere. */
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(ado(M, A_MTRY), EBUSY);
    DLT_ASSERT_ERR(ado(P, A_MTRY), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    /* A mutex lock waits for the reader and gets it when it leaves. */
    seq = actor_post(M, Q(.op = A_MLOCK));
    dlt_sleep_ms(300);
    CU_ASSERT_FALSE(actor_done(M, seq));
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(actor_wait(M, seq, 5000), 0);
    CU_ASSERT_TRUE(M->t_end - M->t_begin > 0.25);
    DLT_ASSERT_ERR(ado(P, A_TRYRD), EBUSY);
    DLT_ASSERT_ERR(ado(M, A_MUNLOCK), 0);
    /* A writer: the mutex is busy. */
    DLT_ASSERT_ERR(ado(P, A_WR), 0);
    DLT_ASSERT_ERR(ado(M, A_MTRY), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_ERR(ado(P, A_UNLOCK), 0);
    DLT_ASSERT_ERR(ado(M, A_MTRY), 0);
    DLT_ASSERT_ERR(ado(M, A_MUNLOCK), 0);
    actor_stop(P);
    actor_stop(M);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(A, 2);
}

static void test_mutex_and_rwlock_same_name(void) {
    mutex_same_name_row(DLT_PROC);
    mutex_same_name_row(DLT_THREAD);
}

/* ========================================================================
 * DLOCK_F_INTR: a waiting xlock ends with EINTR when a SIGALRM handler runs
 * in the thread -- with or without SA_RESTART, as flock(2).  The plain
 * calls never give EINTR.  DLOCK_F_TRY: EBUSY at once.
 * ====================================================================== */

#define ALRM_MS 200

/* holder H holds the write lock; waiter X (which takes SIGALRM). */
static void intr_cases(actor *H, actor *X) {
    int shared, restart;
    DLT_ASSERT_ERR(ado(H, A_WR), 0);
    for (shared = 0; shared <= 1; shared++) {
        for (restart = 0; restart <= 1; restart++) {
            int rc = actor_do(X, Q(.op = A_XLOCK, .shared = shared, .flags = DLOCK_F_INTR, .alarm_ms = ALRM_MS,
                                   .sig = 1 + restart));
            double took = X->t_end - X->t_begin;
            DLT_ASSERT_ERR(rc, EINTR);
            DLT_ASSERT_INT_EQ(X->holds, 0);
            DLT_ASSERT_INT_EQ(X->sigs, 1);
            if (took < 0.15 || took > 1.0)
                fprintf(stderr, "  EINTR after %.3f s (SIGALRM at %d ms)\n", took, ALRM_MS);
            CU_ASSERT_TRUE(took >= 0.15 && took <= 1.0);
        }
    }
    /* With a deadline too: the signal first gives EINTR; no signal, the
     * deadline gives ETIMEDOUT. */
    DLT_ASSERT_ERR(actor_do(X, Q(.op = A_XLOCK, .shared = 1, .flags = DLOCK_F_INTR, .timed = 1,
                                 .clk = CLOCK_MONOTONIC, .ms = 3000, .alarm_ms = ALRM_MS, .sig = 1)),
                   EINTR);
    CU_ASSERT_TRUE(X->t_end - X->t_begin < 1.0);
    DLT_ASSERT_ERR(actor_do(X, Q(.op = A_XLOCK, .shared = 0, .flags = DLOCK_F_INTR, .timed = 1,
                                 .clk = CLOCK_REALTIME, .ms = 200)),
                   ETIMEDOUT);
    /* DLOCK_F_TRY: EBUSY at once, with or without DLOCK_F_INTR. */
    DLT_ASSERT_ERR(actor_do(X, Q(.op = A_XLOCK, .shared = 1, .flags = DLOCK_F_TRY)), EBUSY);
    CU_ASSERT_TRUE(X->t_end - X->t_begin < 0.2);
    DLT_ASSERT_ERR(actor_do(X, Q(.op = A_XLOCK, .shared = 0, .flags = DLOCK_F_TRY | DLOCK_F_INTR)), EBUSY);
    CU_ASSERT_TRUE(X->t_end - X->t_begin < 0.2);
    /* Unknown flags: EINVAL. */
    DLT_ASSERT_ERR(actor_do(X, Q(.op = A_XLOCK, .shared = 0, .flags = 4)), EINVAL);
    DLT_ASSERT_ERR(actor_do(X, Q(.op = A_XLOCK, .shared = 1, .flags = DLOCK_F_INTR | 0x100)), EINVAL);
    DLT_ASSERT_ERR(ado(H, A_UNLOCK), 0);
}

/* The plain calls wait through signals, SA_RESTART or not, and get the
 * lock when the holder (H) releases it. */
static void no_eintr_cases(actor *H, actor *X) {
    static const int ops[] = { A_RD, A_WR, A_TIMEDRD, A_CLOCKWR };
    int i;
    for (i = 0; i < 4; i++) {
        int seq, rc;
        DLT_ASSERT_ERR(ado(H, A_WR), 0);
        seq = actor_post(X, Q(.op = ops[i], .ms = 5000, .clk = CLOCK_MONOTONIC, .alarm_ms = ALRM_MS,
                              .sig = 1 + i % 2));
        dlt_sleep_ms(ALRM_MS + 250);
        CU_ASSERT_FALSE(actor_done(X, seq));
        DLT_ASSERT_ERR(ado(H, A_UNLOCK), 0);
        rc = actor_wait(X, seq, 10000);
        DLT_ASSERT_ERR(rc, 0);
        DLT_ASSERT_INT_EQ(X->sigs, 1);
        CU_ASSERT_TRUE(X->t_end - X->t_begin >= (ALRM_MS + 200) / 1000.0);
        if (rc == 0) DLT_ASSERT_ERR(ado(X, A_UNLOCK), 0);
    }
}

static void intr_row(int proc, int shared_object) {
    char n1[64], n2[64];
    actor *A = DLT_SHM_NEW(actor, 2);
    actor *H = &A[0], *X = &A[1];
    dlock_rwlock_t rw;
    int k;

    snprintf(n1, sizeof n1, "rw/intr/%d%d/a", proc, shared_object);
    snprintf(n2, sizeof n2, "rw/intr/%d%d/b", proc, shared_object);
    for (k = 0; k < 2; k++) {
        const char *name = k == 0 ? n1 : n2;
        actor_init(H, name, 0);
        actor_init(X, name, 0);
        X->alrm = 1;
        if (shared_object) {
            DLT_ASSERT_ERR(dlock_rwlock_init(&rw, name, NULL), 0);
            H->rw = X->rw = &rw;
        }
        if (!proc) alrm_park();
        actor_start(H, proc);
        actor_start(X, proc);
        if (k == 0) intr_cases(H, X);
        else no_eintr_cases(H, X);
        actor_stop(X);
        actor_stop(H);
        if (!proc) alrm_unpark();
        if (shared_object) DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    }
    DLT_SHM_FREE(A, 2);
}

static void test_intr_and_flags(void) {
    intr_row(DLT_PROC, 0);
    intr_row(DLT_THREAD, 0);
    intr_row(DLT_THREAD, 1); /* the holder is a thread on the same object: a local wait */
}

/* ========================================================================
 * Mixed: 2 processes x 2 threads doing random read and write locks of all
 * kinds for ~3 s; shared-memory invariants: never a writer with anyone
 * else inside; a non-atomic counter under the write lock is exact.  Run
 * with a 1 s lease (expiries and renewals go by), then with a 10 s one,
 * where the longest untimed wait must stay far below the lease: a release
 * that told no waiter (the hash left unmarked, scripts.c) would leave
 * that waiter asleep until its retry, a third of its lease or more.
 * ====================================================================== */

typedef struct mix_shared {
    int writers, readers, violations, errors;
    volatile long counter;
    int writes, reads, busy, timeouts;
    long max_wait_us; /* the longest rdlock or wrlock call */
} mix_shared;

typedef struct mix_arg {
    mix_shared *s;
    int proc;
    int share; /* the process's two threads share one object */
    unsigned lease;
} mix_arg;

typedef struct mix_thread {
    mix_shared *s;
    dlock_rwlock_t *rw;
    unsigned seed;
    int rc;
} mix_thread;

static void mix_waited(mix_shared *s, double t0) {
    long us = (long)((dlt_now() - t0) * 1e6), cur = __atomic_load_n(&s->max_wait_us, __ATOMIC_RELAXED);
    while (us > cur && !__atomic_compare_exchange_n(&s->max_wait_us, &cur, us, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

#define MIX_NAME "rw/mixed"

static int mix_read_section(mix_thread *t, dlock_rwlock_t *rw) {
    mix_shared *s = t->s;
    dlt_flag_add(&s->readers, 1);
    if (dlt_flag_get(&s->writers) != 0) dlt_flag_add(&s->violations, 1);
    if (rand_r(&t->seed) % 4 == 0) { /* a recursive read */
        DLT_CK(dlock_rwlock_rdlock(rw), 0);
        DLT_CK(dlock_rwlock_unlock(rw), 0);
    }
    if (rand_r(&t->seed) % 8 == 0) DLT_CK(dlock_rwlock_trywrlock(rw), EBUSY);
    DLT_CK(dlock_rwlock_holds(rw), 1);
    usleep(rand_r(&t->seed) % 3000);
    if (dlt_flag_get(&s->writers) != 0) dlt_flag_add(&s->violations, 1);
    dlt_flag_add(&s->readers, -1);
    dlt_flag_add(&s->reads, 1);
    DLT_CK(dlock_rwlock_unlock(rw), 0);
    return 0;
}

static int mix_write_section(mix_thread *t, dlock_rwlock_t *rw) {
    mix_shared *s = t->s;
    long c;
    if (dlt_flag_add(&s->writers, 1) != 1 || dlt_flag_get(&s->readers) != 0) dlt_flag_add(&s->violations, 1);
    DLT_CK(dlock_rwlock_holds(rw), 2);
    if (rand_r(&t->seed) % 8 == 0) DLT_CK(dlock_rwlock_rdlock(rw), EDEADLK);
    c = s->counter;
    usleep(rand_r(&t->seed) % 2000);
    s->counter = c + 1;
    if (dlt_flag_get(&s->writers) != 1 || dlt_flag_get(&s->readers) != 0) dlt_flag_add(&s->violations, 1);
    dlt_flag_add(&s->writers, -1);
    dlt_flag_add(&s->writes, 1);
    DLT_CK(dlock_rwlock_unlock(rw), 0);
    return 0;
}

static int mix_loop(mix_thread *t) {
    mix_shared *s = t->s;
    dlock_rwlock_t *rw = t->rw;
    double end = dlt_now() + 3.0;
    int it;
    for (it = 0; it < 100000 && dlt_now() < end; it++) {
        int op = (int)(rand_r(&t->seed) % 10), rc, wr;
        struct timespec ts;
        double t0 = dlt_now();
        switch (op) {
        case 0: case 1: case 2: wr = 0; rc = dlock_rwlock_rdlock(rw); mix_waited(s, t0); break;
        case 3: case 4: wr = 1; rc = dlock_rwlock_wrlock(rw); mix_waited(s, t0); break;
        case 5: wr = 0; rc = dlock_rwlock_tryrdlock(rw); break;
        case 6: wr = 1; rc = dlock_rwlock_trywrlock(rw); break;
        case 7: wr = 0; ts = dlt_abs_in(CLOCK_REALTIME, 100); rc = dlock_rwlock_timedrdlock(rw, &ts); break;
        case 8: wr = 1; ts = dlt_abs_in(CLOCK_MONOTONIC, 100); rc = dlock_rwlock_clockwrlock(rw, CLOCK_MONOTONIC, &ts); break;
        default:
            wr = rand_r(&t->seed) % 2;
            ts = dlt_abs_in(CLOCK_MONOTONIC, 100);
            rc = dlock_rwlock_xlock(rw, !wr, rand_r(&t->seed) % 2 ? DLOCK_F_INTR : 0, CLOCK_MONOTONIC, &ts);
            break;
        }
        if (rc == EBUSY && (op == 5 || op == 6)) {
            dlt_flag_add(&s->busy, 1);
            continue;
        }
        if (rc == ETIMEDOUT && op >= 7) {
            dlt_flag_add(&s->timeouts, 1);
            continue;
        }
        DLT_CK(rc, 0);
        if (wr ? mix_write_section(t, rw) : mix_read_section(t, rw)) return 1;
    }
    return 0;
}

static void *mix_thread_main(void *p) {
    mix_thread *t = p;
    t->rc = mix_loop(t);
    return NULL;
}

static int mix_process(void *p) {
    mix_arg *a = p;
    dlock_rwlock_t rw[2];
    mix_thread t[2];
    pthread_t th[2];
    int i, rc = 0;
    for (i = 0; i < 2; i++) {
        if (i == 0 || !a->share) DLT_CK(init_lease(&rw[i], MIX_NAME, a->lease), 0);
        t[i].s = a->s;
        t[i].rw = a->share ? &rw[0] : &rw[i];
        t[i].seed = (unsigned)getpid() * 2654435761u + (unsigned)i;
        t[i].rc = -1;
        DLT_CK(pthread_create(&th[i], NULL, mix_thread_main, &t[i]), 0);
    }
    for (i = 0; i < 2; i++) {
        DLT_CK(pthread_join(th[i], NULL), 0);
        if (t[i].rc != 0) rc = t[i].rc;
    }
    for (i = 0; i < 2; i++)
        if (i == 0 || !a->share) DLT_CK(dlock_rwlock_destroy(&rw[i]), 0);
    return rc;
}

static void mixed_run(unsigned lease) {
    mix_shared *s = DLT_SHM_NEW(mix_shared, 1);
    mix_arg *a = DLT_SHM_NEW(mix_arg, 2);
    dlt_task t[2];
    int i;
    for (i = 0; i < 2; i++) {
        a[i].s = s;
        a[i].proc = i;
        a[i].share = i == 0;
        a[i].lease = lease;
    }
    for (i = 0; i < 2; i++) dlt_task_start(&t[i], DLT_PROC, mix_process, &a[i]);
    for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    fprintf(stderr, "  lease %u ms: %d reads, %d writes, %d EBUSY, %d ETIMEDOUT; longest wait %.1f ms\n", lease,
            s->reads, s->writes, s->busy, s->timeouts, s->max_wait_us / 1000.0);
    if (lease >= 10000) CU_ASSERT_TRUE(s->max_wait_us < 2000000); /* a missed wake-up costs >= 3.3 s */
    DLT_ASSERT_INT_EQ(s->violations, 0);
    DLT_ASSERT_INT_EQ(s->counter, s->writes);
    CU_ASSERT_TRUE(s->writes > 0);
    CU_ASSERT_TRUE(s->reads > 0);
    DLT_ASSERT_INT_EQ(zcard(MIX_NAME, "readers"), 0);
    DLT_SHM_FREE(a, 2);
    DLT_SHM_FREE(s, 1);
}

static void test_mixed(void) {
    mixed_run(1000);
    mixed_run(10000);
}

/* ====================================================================== */

static const struct dlt_test tests[] = {
    DLT_TEST(test_init_bad_args),
    DLT_TEST(test_destroy),
    DLT_TEST(test_readers_share),
    DLT_TEST(test_writer_excludes),
    DLT_TEST(test_try_busy),
    DLT_TEST(test_timed_and_clock),
    DLT_TEST(test_edeadlk_and_recursive_read),
    DLT_TEST(test_unlock),
    DLT_TEST(test_writers_first),
    DLT_TEST(test_reader_marks_writer),
    DLT_TEST(test_writer_giving_up_lets_readers_in),
    DLT_TEST(test_writers_first_long_wait),
    DLT_TEST(test_no_writer_starvation),
    DLT_TEST(test_lease_renewed),
    DLT_TEST(test_read_lease_lost),
    DLT_TEST(test_reader_dies),
    DLT_TEST(test_holds_and_fence),
    DLT_TEST(test_mutex_and_rwlock_same_name),
    DLT_TEST(test_intr_and_flags),
    DLT_TEST(test_mixed),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "rwlock", tests);
}
