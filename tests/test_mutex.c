/* test_mutex.c -- the mutex contract (SPEC section 2), row by row.
 * labels: redis; timeout: 300
 *
 * Every row of the table except the two ROBUST rows, each exercised by
 * several threads of this process and by several processes (dlt_spawn).
 * Workers are written once and run both ways: a worker returns 0, or a
 * nonzero code after printing what it saw on stderr (a child reports
 * through its exit status and never touches CUnit).  Values a worker
 * measures (times, fences, return codes) travel through MAP_SHARED memory,
 * so that the same struct serves a thread and a child process.
 */
#include "fixture.h"

#include <dlock.h>

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LEASE_DEFAULT DLOCK_LEASE_DEFAULT_MS
#define T_DEFAULT (-1) /* mspec.type: leave the attribute's default */

/* ========================================================================
 * Signals
 * ====================================================================== */

static volatile sig_atomic_t usr1_seen;
static void on_usr1(int sig) {
    (void)sig;
    usr1_seen++;
}
/* An empty-ish SIGUSR1 handler without SA_RESTART: a blocking call that
 * the signal interrupts sees EINTR. */
static void usr1_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGUSR1, &sa, NULL);
}

/* ========================================================================
 * Opening a mutex: a worker either shares the caller's object (threads of
 * one process) or initialises its own with the same name (any process).
 * ====================================================================== */

typedef struct mspec {
    dlock_mutex_t *m; /* shared object, or NULL: make our own */
    const char *name;
    int type;         /* DLOCK_MUTEX_*, or T_DEFAULT */
    unsigned lease;   /* ms, 0: default */
} mspec;

static mspec ms_shared(dlock_mutex_t *m) {
    mspec s = { m, NULL, T_DEFAULT, 0 };
    return s;
}
static mspec ms_own(const char *name, int type, unsigned lease) {
    mspec s = { NULL, name, type, lease };
    return s;
}

static int open_mutex(const mspec *s, dlock_mutex_t *own, dlock_mutex_t **out) {
    dlock_mutexattr_t a;
    int rc;
    *out = own;
    if (s->m != NULL) {
        *out = s->m;
        return 0;
    }
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (s->type != T_DEFAULT && (rc = dlock_mutexattr_settype(&a, s->type)) != 0) return rc;
    if (s->lease != 0 && (rc = dlock_mutexattr_setlease(&a, s->lease)) != 0) return rc;
    rc = dlock_mutex_init(own, s->name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static int close_mutex(const mspec *s, dlock_mutex_t *own) {
    return s->m != NULL ? 0 : dlock_mutex_destroy(own);
}

static int init_typed(dlock_mutex_t *m, const char *name, int type, unsigned lease) {
    mspec s = ms_own(name, type, lease);
    dlock_mutex_t *out;
    return open_mutex(&s, m, &out);
}

/* ========================================================================
 * Looking at the server
 * ====================================================================== */

static long long key_del(const char *name) {
    char k[600];
    size_t n = dlt_lock_key(name, k, sizeof k);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %b", k, n));
}

/* 1 and the value of the lock holder record's field, or 0. */
static int key_hget(const char *name, const char *field, char *out, size_t cap) {
    char k[600];
    size_t n = dlt_lock_key(name, k, sizeof k);
    redisReply *r = dlt_redis_cmd(&dlt_server, "EVAL_RO %s 1 %b %s", DLT_LOCK_FIELD_LUA, k, n, field);
    int ok = r != NULL && r->type == REDIS_REPLY_STRING;
    if (ok) snprintf(out, cap, "%.*s", (int)r->len, r->str);
    if (r != NULL) freeReplyObject(r);
    return ok;
}

/* The fence the server has for the lock's holder: its record's, or for
 * a hold taken by the pipelined SET, which keeps none, the fence key's
 * (the last issued: right while no other call asks for the lock); 0 when
 * there is neither. */
static uint64_t hold_fence(const char *name) {
    char buf[64], k[600];
    size_t n;
    redisReply *r;
    uint64_t f = 0;
    if (key_hget(name, "fence", buf, sizeof buf)) return strtoull(buf, NULL, 10);
    if (!key_hget(name, "owner", buf, sizeof buf)) return 0;
    n = dlt_lock_key(name, k, sizeof k);
    r = dlt_redis_cmd(&dlt_server, "GET %b:fence", k, n);
    if (r != NULL && r->type == REDIS_REPLY_STRING) f = strtoull(r->str, NULL, 10);
    if (r != NULL) freeReplyObject(r);
    return f;
}

/* 1 once the lock's release channel has want subscribers (one per
 * waiting process), 0 if timeout_ms passed first. */
static int wait_numsub(const char *name, long long want, int timeout_ms) {
    char k[600];
    double end = dlt_now() + timeout_ms / 1000.0;
    dlt_lock_key(name, k, sizeof k);
    while (dlt_numsub(k) < want) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(5);
    }
    return 1;
}

/* ========================================================================
 * Common workers
 * ====================================================================== */

/* A holder: locks, says so, and then unlocks when told (H_UNLOCK), exits
 * holding it (H_RETURN: a thread ends, a child _exit()s), or stays until
 * killed (H_STAY). */
enum { H_UNLOCK, H_RETURN, H_STAY };
typedef struct holder {
    mspec ms;
    int how;
    int locked, release;
    double t_locked, t_unlock;
    uint64_t fence;
    int lock_rc, unlock_rc, holds_at_unlock;
    int unlock_want; /* what unlock must give (0 normally; -1: anything) */
} holder;

static void holder_init(holder *h, mspec ms, int how) {
    memset(h, 0, sizeof *h);
    h->ms = ms;
    h->how = how;
    h->lock_rc = h->unlock_rc = -1;
}

static int holder_main(void *p) {
    holder *h = p;
    dlock_mutex_t own, *m;
    int rc = open_mutex(&h->ms, &own, &m);
    if (rc != 0) {
        h->lock_rc = rc;
        dlt_flag_set(&h->locked, 1);
        return DLT_CK_FAIL("open_mutex", rc, 0);
    }
    h->lock_rc = dlock_mutex_lock(m);
    h->t_locked = dlt_now();
    h->fence = dlock_mutex_fence(m);
    dlt_flag_set(&h->locked, 1);
    DLT_CK(h->lock_rc, 0);
    if (h->how == H_RETURN) return 0; /* still holding it */
    if (h->how == H_STAY) {
        dlt_flag_wait(&h->release, 1, DLT_JOIN_MS); /* killed long before */
        return 99;
    }
    DLT_CKT(dlt_flag_wait(&h->release, 1, DLT_JOIN_MS));
    h->holds_at_unlock = dlock_mutex_holds(m);
    h->t_unlock = dlt_now();
    h->unlock_rc = dlock_mutex_unlock(m);
    if (h->unlock_want >= 0) DLT_CK(h->unlock_rc, h->unlock_want);
    DLT_CK(close_mutex(&h->ms, &own), 0);
    return 0;
}

static int holder_wait_locked(holder *h) {
    return dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0;
}

/* A waiter: says it is ready, locks (waiting), notes when it got the lock,
 * holds it hold_ms, unlocks. */
typedef struct waiter {
    mspec ms;
    unsigned hold_ms;
    long timed_ms; /* > 0: timedlock that far ahead; < 0: clocklock(MONOTONIC) */
    int ready, done;
    double t_start, t_acq;
    int rc, unlock_rc, holds;
    uint64_t fence;
    int usr1; /* SIGUSR1s this process handled while we waited */
    char err[200]; /* dlock_last_error() after a failed lock */
} waiter;

static void waiter_init(waiter *w, mspec ms, unsigned hold_ms) {
    memset(w, 0, sizeof *w);
    w->ms = ms;
    w->hold_ms = hold_ms;
    w->rc = w->unlock_rc = -1;
}

static int waiter_main(void *p) {
    waiter *w = p;
    dlock_mutex_t own, *m;
    int before = usr1_seen;
    DLT_CK(open_mutex(&w->ms, &own, &m), 0);
    w->t_start = dlt_now();
    dlt_flag_set(&w->ready, 1);
    if (w->timed_ms > 0) {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, w->timed_ms);
        w->rc = dlock_mutex_timedlock(m, &ts);
    } else if (w->timed_ms < 0) {
        struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, -w->timed_ms);
        w->rc = dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
    } else {
        w->rc = dlock_mutex_lock(m);
    }
    w->t_acq = dlt_now();
    w->usr1 = usr1_seen - before;
    if (w->rc != 0) snprintf(w->err, sizeof w->err, "%s", dlock_last_error());
    w->holds = dlock_mutex_holds(m);
    w->fence = dlock_mutex_fence(m);
    if (w->rc == 0) {
        if (w->hold_ms) dlt_sleep_ms(w->hold_ms);
        w->unlock_rc = dlock_mutex_unlock(m);
    }
    dlt_flag_set(&w->done, 1);
    DLT_CK(close_mutex(&w->ms, &own), 0);
    return 0;
}

/* A probe: on request, tries the lock (and gives it back), unlocks, or asks
 * holds(), from its own thread or process, and reports the result. */
enum { P_TRY = 1, P_UNLOCK, P_HOLDS };
typedef struct probe {
    mspec ms;
    int op, req, resp, quit;
    int rc, rc2;
} probe;

static int probe_main(void *p) {
    probe *pr = p;
    dlock_mutex_t own, *m;
    int seen = 0;
    DLT_CK(open_mutex(&pr->ms, &own, &m), 0);
    for (;;) {
        double end = dlt_now() + 60;
        while (dlt_flag_get(&pr->req) == seen && !dlt_flag_get(&pr->quit)) {
            if (dlt_now() > end) return 98;
            usleep(300);
        }
        if (dlt_flag_get(&pr->quit)) break;
        seen = dlt_flag_get(&pr->req);
        pr->rc2 = 0;
        switch (pr->op) {
        case P_TRY:
            pr->rc = dlock_mutex_trylock(m);
            if (pr->rc == 0) pr->rc2 = dlock_mutex_unlock(m);
            break;
        case P_UNLOCK: pr->rc = dlock_mutex_unlock(m); break;
        case P_HOLDS: pr->rc = dlock_mutex_holds(m); break;
        default: pr->rc = -3000;
        }
        dlt_flag_set(&pr->resp, seen);
    }
    DLT_CK(close_mutex(&pr->ms, &own), 0);
    return 0;
}

static void probe_init(probe *pr, mspec ms) {
    memset(pr, 0, sizeof *pr);
    pr->ms = ms;
}

/* The probe's answer; -1000 if it did not answer, -2000 if a trylock
 * succeeded but giving the lock back failed. */
static int probe_call(probe *pr, int op) {
    int n = dlt_flag_get(&pr->req) + 1;
    pr->op = op;
    dlt_flag_set(&pr->req, n);
    if (!dlt_flag_wait(&pr->resp, n, 10000)) return -1000;
    if (pr->op == P_TRY && pr->rc == 0 && pr->rc2 != 0) return -2000;
    return pr->rc;
}

static void probe_quit(probe *pr, dlt_task *t) {
    dlt_flag_set(&pr->quit, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(t, 10000), 0);
}

/* Every call on m gives EINVAL (or 0 / NULL), and nothing crashes. */
static int check_invalid(dlock_mutex_t *m) {
    struct timespec rt = dlt_abs_in(CLOCK_REALTIME, 100), mt = dlt_abs_in(CLOCK_MONOTONIC, 100);
    DLT_CK(dlock_mutex_lock(m), EINVAL);
    DLT_CK(dlock_mutex_trylock(m), EINVAL);
    DLT_CK(dlock_mutex_timedlock(m, &rt), EINVAL);
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &mt), EINVAL);
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_REALTIME, &rt), EINVAL);
    DLT_CK(dlock_mutex_unlock(m), EINVAL);
    DLT_CK(dlock_mutex_consistent(m), EINVAL);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(dlock_mutex_fence(m), 0);
    DLT_CKT(dlock_mutex_name(m) == NULL);
    DLT_CK(dlock_mutex_destroy(m), EINVAL);
    return 0;
}

/* A thread or process that does not hold the lock: holds() 0, fence() 0,
 * unlock EPERM. */
static int not_holder_worker(void *p) {
    mspec *s = p;
    dlock_mutex_t own, *m;
    DLT_CK(open_mutex(s, &own, &m), 0);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(dlock_mutex_fence(m), 0);
    DLT_CK(dlock_mutex_unlock(m), EPERM);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(close_mutex(s, &own), 0);
    return 0;
}

/* ========================================================================
 * init: bad name, bad lease, bad attr -> EINVAL; nothing is allocated
 * (the sanitizer build's leak check sees that).
 * ====================================================================== */

static int init_bad_name_worker(void *arg) {
    dlock_mutex_t m;
    char big[DLOCK_NAME_MAX + 2];
    int i;
    (void)arg;
    memset(&m, 0x5A, sizeof m);
    DLT_CK(dlock_mutex_init(NULL, "x", NULL), EINVAL);
    DLT_CK(dlock_mutex_init(&m, NULL, NULL), EINVAL);
    DLT_CK(dlock_mutex_init(&m, "", NULL), EINVAL);
    memset(big, 'n', DLOCK_NAME_MAX + 1);
    big[DLOCK_NAME_MAX + 1] = '\0';
    DLT_CK(strlen(big), 513);
    DLT_CK(dlock_mutex_init(&m, big, NULL), EINVAL);
    for (i = 0; i < DLOCK_NAME_MAX + 1; i++) big[i] = (char)(1 + (i * 37) % 255);
    DLT_CK(strlen(big), 513);
    DLT_CK(dlock_mutex_init(&m, big, NULL), EINVAL);
    /* Nothing was made: the object is still no mutex. */
    DLT_CK(dlock_mutex_lock(&m), EINVAL);
    DLT_CK(dlock_mutex_holds(&m), 0);
    /* The limits that are fine: 1 and 512 bytes. */
    big[DLOCK_NAME_MAX] = '\0';
    DLT_CK(dlock_mutex_init(&m, big, NULL), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_mutex_init(&m, "x", NULL), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_init_bad_name(void) {
    dlock_mutex_t m;
    char big[DLOCK_NAME_MAX + 2];
    memset(&m, 0x5A, sizeof m);
    DLT_ASSERT_ERR(dlock_mutex_init(NULL, "x", NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, NULL, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "", NULL), EINVAL);
    memset(big, 'n', DLOCK_NAME_MAX + 1);
    big[DLOCK_NAME_MAX + 1] = '\0';
    DLT_ASSERT_ERR(dlock_mutex_init(&m, big, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EINVAL);
    CU_ASSERT_STRING_NOT_EQUAL(dlock_last_error(), "");
    big[DLOCK_NAME_MAX] = '\0';
    DLT_ASSERT_ERR(dlock_mutex_init(&m, big, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* The same from several threads and several processes at once. */
    char dummy[5];
    dlt_run_all(init_bad_name_worker, dummy, 1, 3, 2);
}

/* A 512-byte name of arbitrary bytes (every value but NUL) works, and init
 * copies it. */
static void make_binary_name(char *buf) {
    static const char special[] = " {*}\n\xff?[]\\\"'\r\t{{}}";
    int i;
    for (i = 0; i < DLOCK_NAME_MAX; i++) buf[i] = (char)(1 + (i * 37) % 255);
    memcpy(buf, special, sizeof special - 1);
    memcpy(buf + 300, special, sizeof special - 1);
    buf[DLOCK_NAME_MAX - 1] = '\xff';
    buf[DLOCK_NAME_MAX] = '\0';
}

static void test_init_name_512_arbitrary_bytes(void) {
    static char orig[DLOCK_NAME_MAX + 1];
    char name[DLOCK_NAME_MAX + 1], buf[128];
    dlock_mutex_t m;
    probe *pr = DLT_SHM_NEW(probe, 2);
    dlt_task tp[2];

    make_binary_name(orig);
    CU_ASSERT_EQUAL_FATAL(strlen(orig), DLOCK_NAME_MAX);
    memcpy(name, orig, sizeof name);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    memset(name, 'z', DLOCK_NAME_MAX); /* init made its own copy */
    const char *n = dlock_mutex_name(&m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    DLT_ASSERT_INT_EQ(strlen(n), DLOCK_NAME_MAX);
    CU_ASSERT_TRUE(memcmp(n, orig, DLOCK_NAME_MAX) == 0);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    /* The key holds the name's bytes exactly. */
    CU_ASSERT_TRUE(key_hget(orig, "owner", buf, sizeof buf));
    DLT_ASSERT_INT_EQ(hold_fence(orig), dlock_mutex_fence(&m));

    /* Another thread and another process see it held under that name. */
    probe_init(&pr[0], ms_shared(&m));
    probe_init(&pr[1], ms_own(orig, T_DEFAULT, 0));
    dlt_task_start(&tp[1], DLT_PROC, probe_main, &pr[1]);
    dlt_task_start(&tp[0], DLT_THREAD, probe_main, &pr[0]);
    DLT_ASSERT_ERR(probe_call(&pr[0], P_TRY), EBUSY);
    DLT_ASSERT_ERR(probe_call(&pr[1], P_TRY), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(orig), 0);
    DLT_ASSERT_ERR(probe_call(&pr[1], P_TRY), 0);
    DLT_ASSERT_ERR(probe_call(&pr[0], P_TRY), 0);
    probe_quit(&pr[0], &tp[0]);
    probe_quit(&pr[1], &tp[1]);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(pr, 2);
}

static int attr_checks_worker(void *arg) {
    dlock_mutexattr_t a, bad;
    dlock_mutex_t m;
    int t, r;
    unsigned l;
    dlock_client_t *c;
    (void)arg;

    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_gettype(&a, &t), 0);
    DLT_CK(t, DLOCK_MUTEX_DEFAULT);
    DLT_CK(dlock_mutexattr_getrobust(&a, &r), 0);
    DLT_CK(r, DLOCK_MUTEX_STALLED);
    DLT_CK(dlock_mutexattr_getlease(&a, &l), 0);
    DLT_CK(l, DLOCK_LEASE_DEFAULT_MS);
    /* Leases: [100 ms, 24 h]. */
    DLT_CK(dlock_mutexattr_setlease(&a, 99), EINVAL);
    DLT_CK(dlock_mutexattr_setlease(&a, 0), EINVAL);
    DLT_CK(dlock_mutexattr_setlease(&a, DLOCK_LEASE_MAX_MS + 1), EINVAL);
    DLT_CK(dlock_mutexattr_setlease(&a, UINT_MAX), EINVAL);
    DLT_CK(dlock_mutexattr_getlease(&a, &l), 0);
    DLT_CK(l, DLOCK_LEASE_DEFAULT_MS);
    DLT_CK(dlock_mutexattr_setlease(&a, 100), 0);
    DLT_CK(dlock_mutexattr_setlease(&a, DLOCK_LEASE_MAX_MS), 0);
    DLT_CK(dlock_mutexattr_getlease(&a, &l), 0);
    DLT_CK(l, DLOCK_LEASE_MAX_MS);
    /* Types. */
    DLT_CK(dlock_mutexattr_settype(&a, -1), EINVAL);
    DLT_CK(dlock_mutexattr_settype(&a, 4), EINVAL);
    DLT_CK(dlock_mutexattr_settype(&a, 99), EINVAL);
    DLT_CK(dlock_mutexattr_settype(&a, INT_MIN), EINVAL);
    DLT_CK(dlock_mutexattr_settype(&a, INT_MAX), EINVAL);
    DLT_CK(dlock_mutexattr_gettype(&a, &t), 0);
    DLT_CK(t, DLOCK_MUTEX_DEFAULT);
    for (t = DLOCK_MUTEX_NORMAL; t <= DLOCK_MUTEX_DEFAULT; t++) {
        int back = -1;
        DLT_CK(dlock_mutexattr_settype(&a, t), 0);
        DLT_CK(dlock_mutexattr_gettype(&a, &back), 0);
        DLT_CK(back, t);
    }
    /* NULL pointers. */
    DLT_CK(dlock_mutexattr_init(NULL), EINVAL);
    DLT_CK(dlock_mutexattr_destroy(NULL), EINVAL);
    DLT_CK(dlock_mutexattr_settype(NULL, DLOCK_MUTEX_NORMAL), EINVAL);
    DLT_CK(dlock_mutexattr_gettype(NULL, &t), EINVAL);
    DLT_CK(dlock_mutexattr_gettype(&a, NULL), EINVAL);
    DLT_CK(dlock_mutexattr_setlease(NULL, 1000), EINVAL);
    DLT_CK(dlock_mutexattr_getlease(NULL, &l), EINVAL);
    DLT_CK(dlock_mutexattr_getlease(&a, NULL), EINVAL);
    /* An uninitialised attribute object. */
    memset(&bad, 0xAB, sizeof bad);
    memset(&m, 0x5A, sizeof m);
    DLT_CK(dlock_mutex_init(&m, "attr/bad", &bad), EINVAL);
    DLT_CK(dlock_mutex_lock(&m), EINVAL); /* nothing was made */
    DLT_CK(dlock_mutexattr_settype(&bad, DLOCK_MUTEX_NORMAL), EINVAL);
    DLT_CK(dlock_mutexattr_gettype(&bad, &t), EINVAL);
    DLT_CK(dlock_mutexattr_setlease(&bad, 1000), EINVAL);
    DLT_CK(dlock_mutexattr_getlease(&bad, &l), EINVAL);
    DLT_CK(dlock_mutexattr_setrobust(&bad, DLOCK_MUTEX_STALLED), EINVAL);
    DLT_CK(dlock_mutexattr_getrobust(&bad, &r), EINVAL);
    DLT_CK(dlock_mutexattr_setlostcallback(&bad, NULL, NULL), EINVAL);
    DLT_CK(dlock_mutexattr_setclient(&bad, NULL), EINVAL);
    DLT_CK(dlock_mutexattr_getclient(&bad, &c), EINVAL);
    DLT_CK(dlock_mutexattr_destroy(&bad), EINVAL);
    /* A destroyed attribute object is no attribute object. */
    DLT_CK(dlock_mutexattr_destroy(&a), 0);
    DLT_CK(dlock_mutex_init(&m, "attr/destroyed", &a), EINVAL);
    DLT_CK(dlock_mutexattr_settype(&a, DLOCK_MUTEX_NORMAL), EINVAL);
    return 0;
}

static void test_init_bad_attributes(void) {
    dlock_mutexattr_t a, bad;
    dlock_mutex_t m;
    int t = -1;

    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 99), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, DLOCK_LEASE_MAX_MS + 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, 4), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, -1), EINVAL);
    memset(&bad, 0xAB, sizeof bad);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "attr/bad", &bad), EINVAL);

    /* DEFAULT (explicit, and the default of a NULL attr) behaves as
     * ERRORCHECK. */
    DLT_ASSERT_ERR(dlock_mutexattr_gettype(&a, &t), 0);
    DLT_ASSERT_INT_EQ(t, DLOCK_MUTEX_DEFAULT);
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_DEFAULT), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "attr/default", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EDEADLK);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "attr/null", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EDEADLK);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* The attribute's lease is the key's lease. */
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 1500), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "attr/lease", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    long long pttl = dlt_key_pttl("attr/lease");
    CU_ASSERT_TRUE(pttl > 1000 && pttl <= 1500);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);

    char dummy[5];
    dlt_run_all(attr_checks_worker, dummy, 1, 3, 2);
}

/* ========================================================================
 * NULL and uninitialised objects: EINVAL from every call, never a crash.
 * ====================================================================== */

static int invalid_objects_worker(void *arg) {
    dlock_mutex_t g, z, ff;
    (void)arg;
    memset(&g, 0x5A, sizeof g);
    memset(&z, 0, sizeof z);
    memset(&ff, 0xFF, sizeof ff);
    DLT_CK(check_invalid(NULL), 0);
    DLT_CK(check_invalid(&g), 0);
    DLT_CK(check_invalid(&z), 0);
    DLT_CK(check_invalid(&ff), 0);
    DLT_CK(dlock_mutex_init(NULL, "invalid", NULL), EINVAL);
    return 0;
}

static void test_invalid_objects(void) {
    dlock_mutex_t g;
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 100);
    memset(&g, 0x5A, sizeof g);
    DLT_ASSERT_ERR(dlock_mutex_lock(NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_trylock(NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(NULL, &ts), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_unlock(NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_destroy(NULL), EINVAL);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(NULL), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&g), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&g), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&g), EINVAL);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&g), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&g), 0);
    DLT_ASSERT_INT_EQ(invalid_objects_worker(NULL), 0);
    char dummy[5];
    dlt_run_all(invalid_objects_worker, dummy, 1, 2, 2);
}

/* ========================================================================
 * lock, free: 0; the caller holds it; a new fencing token is issued.
 * ====================================================================== */

typedef struct fence_arg {
    mspec ms;
    uint64_t prev, got;
} fence_arg;

static int fence_worker(void *p) {
    fence_arg *a = p;
    dlock_mutex_t own, *m;
    const char *name;
    DLT_CK(open_mutex(&a->ms, &own, &m), 0);
    name = dlock_mutex_name(m);
    DLT_CKT(name != NULL);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(dlock_mutex_fence(m), 0);
    DLT_CK(dlock_mutex_lock(m), 0);
    DLT_CK(dlock_mutex_holds(m), 1);
    a->got = dlock_mutex_fence(m);
    DLT_CKT(a->got > a->prev);
    DLT_CK(hold_fence(name), a->got);
    DLT_CK(dlt_key_field(name, "pid"), getpid());
    DLT_CK(dlt_key_field(name, "tid"), syscall(SYS_gettid));
    DLT_CK(dlock_mutex_unlock(m), 0);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(dlock_mutex_fence(m), 0);
    DLT_CK(close_mutex(&a->ms, &own), 0);
    return 0;
}

static void test_lock_free_holds_fence(void) {
    dlock_mutex_t m;
    char buf[128];
    uint64_t f1, f2, f5;
    size_t i;
    fence_arg *fa = DLT_SHM_NEW(fence_arg, 1);
    dlt_task t;

    DLT_ASSERT_ERR(dlock_mutex_init(&m, "free", NULL), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    f1 = dlock_mutex_fence(&m);
    CU_ASSERT_TRUE(f1 > 0);

    /* The lock as the server has it. */
    CU_ASSERT_TRUE(key_hget("free", "owner", buf, sizeof buf));
    DLT_ASSERT_INT_EQ(strlen(buf), 32);
    for (i = 0; i < strlen(buf); i++) CU_ASSERT_TRUE(strchr("0123456789abcdefABCDEF", buf[i]) != NULL);
    DLT_ASSERT_INT_EQ(hold_fence("free"), f1);
    {
        long long pid = 0, tid = 0;
        char host[256] = "";
        CU_ASSERT_TRUE(dlt_key_who("free", host, sizeof host, &pid, &tid) && host[0] != '\0');
        DLT_ASSERT_INT_EQ(pid, getpid());
        DLT_ASSERT_INT_EQ(tid, syscall(SYS_gettid));
    }
    CU_ASSERT_TRUE(key_hget("free", "since", buf, sizeof buf) && buf[0] != '\0');
    /* Taken on the uncontended path: nobody has marked it as waited for. */
    CU_ASSERT_FALSE(key_hget("free", "w", buf, sizeof buf));
    long long pttl = dlt_key_pttl("free");
    CU_ASSERT_TRUE(pttl > 9000 && pttl <= 10000);

    /* Ownership is the thread's: another thread does not hold it. */
    mspec shared = ms_shared(&m);
    dlt_task_start(&t, DLT_THREAD, not_holder_worker, &shared);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);

    /* Its release has nobody to tell: no message, no look at the waiters'
     * keys (the script's calls count in commandstats too). */
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "del"), 1);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "publish"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "exists"), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("free"), 0);

    /* Every later acquisition gets a strictly greater fence: this thread,
     * another thread, another process, this thread again. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    f2 = dlock_mutex_fence(&m);
    CU_ASSERT_TRUE(f2 > f1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    fa->ms = ms_shared(&m);
    fa->prev = f2;
    dlt_task_start(&t, DLT_THREAD, fence_worker, fa);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    CU_ASSERT_TRUE(fa->got > f2);

    fa->ms = ms_own("free", T_DEFAULT, 0);
    fa->prev = fa->got;
    dlt_task_start(&t, DLT_PROC, fence_worker, fa);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    CU_ASSERT_TRUE(fa->got > fa->prev);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    f5 = dlock_mutex_fence(&m);
    CU_ASSERT_TRUE(f5 > fa->got);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(fa, 1);
}

/* ========================================================================
 * lock, held by another thread anywhere: waits, without polling the
 * server, until released; never EINTR.
 * ====================================================================== */

static void test_lock_waits_for_release(void) {
    enum { NT = 3, NP = 2, N = NT + NP };
    dlock_mutex_t m;
    waiter *w = DLT_SHM_NEW(waiter, N);
    dlt_task t[N];
    uint64_t f0;
    int i, j;

    usr1_install();
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "wait", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    f0 = dlock_mutex_fence(&m);
    int parent_usr1 = usr1_seen;
    for (i = N - 1; i >= 0; i--) {
        waiter_init(&w[i], i < NT ? ms_shared(&m) : ms_own("wait", T_DEFAULT, 0), 20);
        dlt_task_start(&t[i], i >= NT, waiter_main, &w[i]);
    }
    for (i = 0; i < N; i++) CU_ASSERT_TRUE(dlt_flag_wait(&w[i].ready, 1, 5000));
    /* Each waiting child subscribes to the release (the threads of this
     * process wait for this thread's unlock locally). */
    CU_ASSERT_TRUE(wait_numsub("wait", NP, 5000));
    dlt_sleep_ms(250);
    for (i = 0; i < N; i++) DLT_ASSERT_INT_EQ(dlt_flag_get(&w[i].done), 0);
    {
        /* The holder took it uncontended; the waiters marked it, so its
         * release tells them (below: they get it at once). */
        char mark[8];
        CU_ASSERT_TRUE(key_hget("wait", "w", mark, sizeof mark) && strcmp(mark, "1") == 0);
    }

    /* Waiting is not polling: hardly a script call in 600 ms (the holder's
     * first renewal is due at about 1.7 s). */
    long long e0 = dlt_evals();
    dlt_sleep_ms(600);
    long long e1 = dlt_evals();
    CU_ASSERT_TRUE(e0 >= 0 && e1 - e0 <= 2);
    if (e1 - e0 > 2) fprintf(stderr, "  %lld script calls while %d waiters waited 600 ms\n", e1 - e0, N);

    /* Signals without SA_RESTART do not end the wait. */
    for (j = 0; j < 3; j++) {
        for (i = 0; i < N; i++) dlt_task_signal(&t[i], SIGUSR1);
        dlt_sleep_ms(30);
    }
    dlt_sleep_ms(100);
    for (i = 0; i < N; i++) DLT_ASSERT_INT_EQ(dlt_flag_get(&w[i].done), 0);
    CU_ASSERT_TRUE(usr1_seen - parent_usr1 >= 1);

    double t_rel = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    double first = 1e9;
    for (i = 0; i < N; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(w[i].rc, 0);
        if (w[i].rc != 0) fprintf(stderr, "  waiter %d: %s\n", i, w[i].err);
        DLT_ASSERT_ERR(w[i].unlock_rc, 0);
        DLT_ASSERT_INT_EQ(w[i].holds, 1);
        CU_ASSERT_TRUE(w[i].fence > f0);
        CU_ASSERT_TRUE(w[i].t_acq > t_rel);
        CU_ASSERT_TRUE(w[i].t_acq - t_rel < 2.0);
        if (w[i].t_acq - first < 0) first = w[i].t_acq;
        if (i >= NT) CU_ASSERT_TRUE(w[i].usr1 >= 1);
        for (j = 0; j < i; j++) CU_ASSERT_TRUE(w[i].fence != w[j].fence);
    }
    CU_ASSERT_TRUE(first - t_rel < 0.5);
    if (first - t_rel >= 0.5) fprintf(stderr, "  first waiter got the lock %.3f s after the unlock\n", first - t_rel);

    /* A storm: SIGUSR1 about every millisecond through a waiter's whole
     * life (connecting, acquiring, subscribing, waiting, acquiring), for a
     * thread and a fresh process: still 0, never EINTR. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    waiter_init(&w[0], ms_shared(&m), 0);
    waiter_init(&w[1], ms_own("wait", T_DEFAULT, 0), 0);
    dlt_task_start(&t[1], DLT_PROC, waiter_main, &w[1]);
    dlt_task_start(&t[0], DLT_THREAD, waiter_main, &w[0]);
    double t_storm = dlt_now(), end = t_storm + 10;
    int sent = 0;
    t_rel = 0;
    while ((!dlt_flag_get(&w[0].done) || !dlt_flag_get(&w[1].done)) && dlt_now() < end) {
        if (!dlt_flag_get(&w[0].done)) dlt_task_signal(&t[0], SIGUSR1);
        if (!dlt_flag_get(&w[1].done)) dlt_task_signal(&t[1], SIGUSR1);
        sent++;
        usleep(1000);
        if (t_rel == 0 && dlt_now() - t_storm > 0.5) {
            for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(dlt_flag_get(&w[i].done), 0);
            t_rel = dlt_now();
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        }
    }
    for (i = 0; i < 2; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(w[i].rc, 0);
        DLT_ASSERT_ERR(w[i].unlock_rc, 0);
        CU_ASSERT_TRUE(w[i].t_acq > t_rel);
    }
    CU_ASSERT_TRUE(w[1].usr1 >= 10);
    fprintf(stderr, "  storm: %d rounds of signals; the child handled %d while it waited\n", sent, w[1].usr1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(w, N);
}

/* ========================================================================
 * lock, held by another whose holder dies without unlock: every waiter
 * gets it within the lease plus a little.
 * ====================================================================== */

static void test_lock_holder_dies(void) {
    const double lease = 0.5, margin = 1.5;
    holder *h = DLT_SHM_NEW(holder, 3);
    waiter *w = DLT_SHM_NEW(waiter, 4);
    dlock_mutex_t m, mk, mt;
    dlt_task th, tw[2];
    double t0, t_acq;
    int i;

    /* A child that _exit()s holding the lock (no atexit release). */
    holder_init(&h[0], ms_own("dies/exit", T_DEFAULT, 500), H_RETURN);
    dlt_task_start(&th, DLT_PROC, holder_main, &h[0]);
    CU_ASSERT_TRUE(holder_wait_locked(&h[0]));
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("dies/exit"), 1); /* left to expire */
    waiter_init(&w[0], ms_own("dies/exit", T_DEFAULT, 500), 0);
    dlt_task_start(&tw[0], DLT_PROC, waiter_main, &w[0]);
    DLT_ASSERT_ERR(init_typed(&m, "dies/exit", T_DEFAULT, 500), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    t_acq = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tw[0], DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(w[0].rc, 0);
    t0 = h[0].t_locked;
    CU_ASSERT_TRUE(t_acq - t0 >= 0.3 && t_acq - t0 < lease + margin);
    CU_ASSERT_TRUE(w[0].t_acq - t0 >= 0.3 && w[0].t_acq - t0 < lease + margin);
    fprintf(stderr, "  _exit: waiters got it %.3f and %.3f s after the holder locked\n", t_acq - t0, w[0].t_acq - t0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* A child SIGKILLed while holding: alive, it kept the lock past its
     * 500 ms lease; dead, the lease runs out. */
    holder_init(&h[1], ms_own("dies/kill", T_DEFAULT, 500), H_STAY);
    dlt_task_start(&th, DLT_PROC, holder_main, &h[1]);
    CU_ASSERT_TRUE(holder_wait_locked(&h[1]));
    dlt_sleep_ms(800);
    DLT_ASSERT_INT_EQ(dlt_key_exists("dies/kill"), 1);
    DLT_ASSERT_ERR(init_typed(&mk, "dies/kill", T_DEFAULT, 500), 0);
    waiter_init(&w[1], ms_shared(&mk), 0);
    waiter_init(&w[2], ms_own("dies/kill", T_DEFAULT, 500), 0);
    dlt_task_start(&tw[1], DLT_PROC, waiter_main, &w[2]);
    dlt_task_start(&tw[0], DLT_THREAD, waiter_main, &w[1]);
    CU_ASSERT_TRUE(dlt_flag_wait(&w[1].ready, 1, 5000) && dlt_flag_wait(&w[2].ready, 1, 5000));
    dlt_sleep_ms(100);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&w[1].done) + dlt_flag_get(&w[2].done), 0);
    t0 = dlt_now();
    kill(th.pid, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 128 + SIGKILL);
    for (i = 0; i < 2; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&tw[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(w[1 + i].rc, 0);
        CU_ASSERT_TRUE(w[1 + i].t_acq - t0 < lease + margin);
        fprintf(stderr, "  SIGKILL: waiter %d got it %.3f s after the kill\n", i, w[1 + i].t_acq - t0);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mk), 0);

    /* A thread that exits holding the lock: no longer renewed, it expires. */
    DLT_ASSERT_ERR(init_typed(&mt, "dies/thread", T_DEFAULT, 500), 0);
    holder_init(&h[2], ms_shared(&mt), H_RETURN);
    dlt_task_start(&th, DLT_THREAD, holder_main, &h[2]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(h[2].lock_rc, 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&mt), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mt), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mt), EBUSY); /* not released: it expires */
    waiter_init(&w[3], ms_own("dies/thread", T_DEFAULT, 500), 0);
    dlt_task_start(&tw[1], DLT_PROC, waiter_main, &w[3]);
    waiter_init(&w[1], ms_shared(&mt), 0);
    dlt_task_start(&tw[0], DLT_THREAD, waiter_main, &w[1]);
    t0 = h[2].t_locked;
    DLT_ASSERT_INT_EQ(dlt_task_join(&tw[0], DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tw[1], DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(w[1].rc, 0);
    DLT_ASSERT_ERR(w[3].rc, 0);
    CU_ASSERT_TRUE(w[1].t_acq - t0 >= 0.3 && w[1].t_acq - t0 < lease + margin);
    CU_ASSERT_TRUE(w[3].t_acq - t0 >= 0.3 && w[3].t_acq - t0 < lease + margin);
    fprintf(stderr, "  thread exit: waiters got it %.3f and %.3f s after the holder locked\n", w[1].t_acq - t0,
            w[3].t_acq - t0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mt), 0);
    DLT_SHM_FREE(h, 3);
    DLT_SHM_FREE(w, 4);
}

/* ========================================================================
 * lock, caller holds it, NORMAL: blocks; timedlock then gives ETIMEDOUT.
 * ====================================================================== */

static int normal_relock_worker(void *p) {
    mspec *s = p;
    dlock_mutex_t own, *m;
    struct timespec ts;
    double t0, dt;
    DLT_CK(open_mutex(s, &own, &m), 0);
    DLT_CK(dlock_mutex_lock(m), 0);

    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    t0 = dlt_now();
    DLT_CK(dlock_mutex_timedlock(m, &ts), ETIMEDOUT);
    dt = dlt_now() - t0;
    DLT_CKT(dt >= 0.299 && dt < 1.0);
    DLT_CK(dlock_mutex_holds(m), 1);

    ts = dlt_abs_in(CLOCK_MONOTONIC, 300);
    t0 = dlt_now();
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
    dt = dlt_now() - t0;
    DLT_CKT(dt >= 0.299 && dt < 1.0);

    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    t0 = dlt_now();
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_REALTIME, &ts), ETIMEDOUT);
    dt = dlt_now() - t0;
    DLT_CKT(dt >= 0.299 && dt < 1.0);

    DLT_CK(dlock_mutex_trylock(m), EBUSY);
    DLT_CK(dlock_mutex_holds(m), 1);
    DLT_CK(dlock_mutex_unlock(m), 0);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(dlock_mutex_unlock(m), EPERM);
    DLT_CK(close_mutex(s, &own), 0);
    return 0;
}

/* A NORMAL relock that has no deadline does not come back. */
static int normal_block_child(void *p) {
    int *reached = p;
    dlock_mutex_t m;
    DLT_CK(init_typed(&m, "normal/block", DLOCK_MUTEX_NORMAL, 500), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    dlt_flag_set(reached, 1);
    int rc = dlock_mutex_lock(&m);
    fprintf(stderr, "normal_block_child: the second lock returned %d (%s)\n", rc, dlt_errno_label(rc));
    return 100 + rc % 100;
}

static void test_normal_relock_deadlocks(void) {
    mspec *s = DLT_SHM_NEW(mspec, 5);
    int *reached = DLT_SHM_NEW(int, 1);
    static const char *names[5] = { "normal/0", "normal/1", "normal/2", "normal/3", "normal/4" };
    dlt_task t;
    int i;

    for (i = 0; i < 5; i++) s[i] = ms_own(names[i], DLOCK_MUTEX_NORMAL, 0);
    DLT_ASSERT_INT_EQ(normal_relock_worker(&s[0]), 0);
    dlt_run_all(normal_relock_worker, &s[1], sizeof *s, 2, 2);

    /* Two threads sharing one NORMAL object, each deadlocking on itself in turn. */
    dlock_mutex_t m;
    mspec sh[2];
    DLT_ASSERT_ERR(init_typed(&m, "normal/shared", DLOCK_MUTEX_NORMAL, 0), 0);
    sh[0] = sh[1] = ms_shared(&m);
    dlt_run_all(normal_relock_worker, sh, sizeof *sh, 2, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    dlt_task_start(&t, DLT_PROC, normal_block_child, reached);
    CU_ASSERT_TRUE(dlt_flag_wait(reached, 1, 5000));
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, 700), -1); /* still blocked: killed */
    DLT_SHM_FREE(s, 5);
    DLT_SHM_FREE(reached, 1);
}

/* ========================================================================
 * lock, caller holds it, ERRORCHECK or DEFAULT: EDEADLK.
 * ====================================================================== */

typedef struct edeadlk_arg {
    mspec ms;
    int iters;
} edeadlk_arg;

static int edeadlk_worker(void *p) {
    edeadlk_arg *a = p;
    dlock_mutex_t own, *m;
    int i;
    DLT_CK(open_mutex(&a->ms, &own, &m), 0);
    for (i = 0; i < a->iters; i++) {
        struct timespec rt = dlt_abs_in(CLOCK_REALTIME, 1000), mt = dlt_abs_in(CLOCK_MONOTONIC, 1000);
        double t0;
        DLT_CK(dlock_mutex_lock(m), 0);
        t0 = dlt_now();
        DLT_CK(dlock_mutex_lock(m), EDEADLK);
        DLT_CK(dlock_mutex_timedlock(m, &rt), EDEADLK);
        DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &mt), EDEADLK);
        DLT_CK(dlock_mutex_clocklock(m, CLOCK_REALTIME, &rt), EDEADLK);
        DLT_CKT(dlt_now() - t0 < 0.5); /* at once, not at the deadline */
        DLT_CK(dlock_mutex_trylock(m), EBUSY);
        DLT_CK(dlock_mutex_holds(m), 1);
        DLT_CK(dlock_mutex_unlock(m), 0);
        DLT_CK(dlock_mutex_unlock(m), EPERM);
    }
    DLT_CK(close_mutex(&a->ms, &own), 0);
    return 0;
}

static dlock_mutex_t s_edeadlk = DLOCK_MUTEX_INITIALIZER("edeadlk/static");

static void test_errorcheck_default_edeadlk(void) {
    enum { N = 10 };
    edeadlk_arg *a = DLT_SHM_NEW(edeadlk_arg, N);
    dlock_mutex_t mec, mdef, mnull;
    int i;

    DLT_ASSERT_ERR(init_typed(&mec, "edeadlk/ec", DLOCK_MUTEX_ERRORCHECK, 0), 0);
    DLT_ASSERT_ERR(init_typed(&mdef, "edeadlk/def", DLOCK_MUTEX_DEFAULT, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&mnull, "edeadlk/null", NULL), 0);

    DLT_ASSERT_ERR(dlock_mutex_lock(&mec), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mec), EDEADLK);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mec), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mdef), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mdef), EDEADLK);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mdef), 0);

    /* Threads 0-2 share the ERRORCHECK object, 3-5 the DEFAULT object;
     * processes 6-7 and 8-9 open their own of each type. */
    for (i = 0; i < 3; i++) {
        a[i].ms = ms_shared(&mec);
        a[3 + i].ms = ms_shared(&mdef);
    }
    a[6].ms = a[7].ms = ms_own("edeadlk/ec", DLOCK_MUTEX_ERRORCHECK, 0);
    a[8].ms = a[9].ms = ms_own("edeadlk/def", DLOCK_MUTEX_DEFAULT, 0);
    for (i = 0; i < N; i++) a[i].iters = 5;
    dlt_run_all(edeadlk_worker, a, sizeof *a, 6, 4);

    /* A NULL attribute and the static initialiser give DEFAULT too. */
    edeadlk_arg one;
    one.ms = ms_shared(&mnull);
    one.iters = 2;
    DLT_ASSERT_INT_EQ(edeadlk_worker(&one), 0);
    one.ms = ms_shared(&s_edeadlk);
    DLT_ASSERT_INT_EQ(edeadlk_worker(&one), 0);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&mec), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mdef), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mnull), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&s_edeadlk), 0);
    DLT_SHM_FREE(a, N);
}

/* ========================================================================
 * RECURSIVE: relock 0, count+1, no round trip; unlock with count > 1: 0,
 * count-1, no round trip; the last unlock releases; EAGAIN at the limit.
 * ====================================================================== */

typedef struct rec_arg {
    mspec ms;
    int count_evals; /* only when nothing else talks to the server */
} rec_arg;

static int recursive_worker(void *p) {
    rec_arg *a = p;
    dlock_mutex_t own, *m;
    long long e0, e1;
    uint64_t f;
    int i;
    DLT_CK(open_mutex(&a->ms, &own, &m), 0);
    DLT_CK(dlock_mutex_lock(m), 0);
    f = dlock_mutex_fence(m);
    e0 = dlt_evals();
    for (i = 0; i < 1000; i++) DLT_CK(dlock_mutex_lock(m), 0);
    DLT_CK(dlock_mutex_trylock(m), 0);
    DLT_CK(dlock_mutex_fence(m), f);
    if (a->count_evals) DLT_CK(dlt_evals(), e0);
    for (i = 0; i < 1001; i++) {
        DLT_CK(dlock_mutex_unlock(m), 0);
        DLT_CK(dlock_mutex_holds(m), 1);
    }
    if (a->count_evals) DLT_CK(dlt_evals(), e0);
    DLT_CK(dlock_mutex_fence(m), f);
    e1 = dlt_evals();
    DLT_CK(dlock_mutex_unlock(m), 0); /* the last one releases, in one round trip */
    if (a->count_evals) DLT_CK(dlt_evals() - e1, 1);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(dlock_mutex_unlock(m), EPERM);
    DLT_CK(close_mutex(&a->ms, &own), 0);
    return 0;
}

static void test_recursive(void) {
    dlock_mutex_t m;
    probe *pr = DLT_SHM_NEW(probe, 2);
    rec_arg *ra = DLT_SHM_NEW(rec_arg, 4);
    dlt_task tp[2], t;
    long long e0;
    uint64_t f;
    int i, bad = 0;

    /* 60 s leases: no renewal (due after 10 s) disturbs the script counts. */
    DLT_ASSERT_ERR(init_typed(&m, "rec", DLOCK_MUTEX_RECURSIVE, 60000), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    f = dlock_mutex_fence(&m);
    e0 = dlt_evals();
    for (i = 0; i < 1000; i++) bad += dlock_mutex_lock(&m) != 0;
    DLT_ASSERT_INT_EQ(bad, 0);
    DLT_ASSERT_INT_EQ(dlt_evals(), e0); /* no round trip */
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&m), f);
    for (i = 0; i < 1000; i++) bad += dlock_mutex_unlock(&m) != 0 || dlock_mutex_holds(&m) != 1;
    DLT_ASSERT_INT_EQ(bad, 0);
    DLT_ASSERT_INT_EQ(dlt_evals(), e0);

    /* Count 3; another thread and another process see it held until the
     * third unlock. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    probe_init(&pr[0], ms_shared(&m));
    probe_init(&pr[1], ms_own("rec", DLOCK_MUTEX_RECURSIVE, 60000));
    dlt_task_start(&tp[1], DLT_PROC, probe_main, &pr[1]);
    dlt_task_start(&tp[0], DLT_THREAD, probe_main, &pr[0]);
    for (i = 3; i >= 1; i--) {
        DLT_ASSERT_ERR(probe_call(&pr[0], P_TRY), EBUSY);
        DLT_ASSERT_ERR(probe_call(&pr[1], P_TRY), EBUSY);
        e0 = dlt_evals();
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_INT_EQ(dlt_evals() - e0, i > 1 ? 0 : 1);
        DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), i > 1);
    }
    DLT_ASSERT_INT_EQ(dlt_key_exists("rec"), 0);
    DLT_ASSERT_ERR(probe_call(&pr[1], P_TRY), 0);
    DLT_ASSERT_ERR(probe_call(&pr[0], P_TRY), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    probe_quit(&pr[0], &tp[0]);
    probe_quit(&pr[1], &tp[1]);

    /* The same by a thread, then by a process, counting round trips; then
     * two threads (one shared object) and two processes at once. */
    ra[0].ms = ms_shared(&m);
    ra[0].count_evals = 1;
    dlt_task_start(&t, DLT_THREAD, recursive_worker, &ra[0]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    ra[0].ms = ms_own("rec", DLOCK_MUTEX_RECURSIVE, 60000);
    dlt_task_start(&t, DLT_PROC, recursive_worker, &ra[0]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    ra[0].ms = ra[1].ms = ms_shared(&m);
    ra[2].ms = ra[3].ms = ms_own("rec", DLOCK_MUTEX_RECURSIVE, 60000);
    for (i = 0; i < 4; i++) ra[i].count_evals = 0;
    dlt_run_all(recursive_worker, ra, sizeof *ra, 2, 2);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(pr, 2);
    DLT_SHM_FREE(ra, 4);
}

/* Depth DLOCK_RECURSIVE_MAX is the limit: one more gives EAGAIN, from
 * lock, trylock and timedlock alike; no round trip on the way.  Two of
 * these run at once; between the two barriers neither talks to the server
 * (the hour-long leases see no renewal), so the script count must not
 * move.  The worker ends still holding the lock at full depth (a thread
 * exits, a child _exit()s): unlocking 16M times more would only cost time;
 * the caller cleans up. */
typedef struct limit_arg {
    mspec ms;
    int *barrier;  /* shared by the two workers */
    int *progress; /* shared: relocks done, in steps of LIMIT_STEP */
    int done;      /* the worker returned */
} limit_arg;

/* The relocks are CPU work of seconds (2 x 2^24, ~10 s under ASan), and
 * many times that on a loaded host: every wait for the workers (the
 * barrier, their end) fails only when none of them moved for
 * LIMIT_STALL_MS, not past a total time that a slow host passes. */
#define LIMIT_STEP 0x10000u
#define LIMIT_STALL_MS 30000

/* Waits until *flag >= target while *progress moves: 1, or 0 after
 * LIMIT_STALL_MS without a step. */
static int wait_progressing(const int *flag, int target, const int *progress) {
    int seen = dlt_flag_get(progress);
    double stall_end = dlt_now() + LIMIT_STALL_MS / 1000.0;
    while (dlt_flag_get(flag) < target) {
        int now = dlt_flag_get(progress);
        if (now != seen) {
            seen = now;
            stall_end = dlt_now() + LIMIT_STALL_MS / 1000.0;
        } else if (dlt_now() > stall_end) {
            return 0;
        }
        usleep(20000);
    }
    return 1;
}

static int barrier_wait(const limit_arg *a, int target) {
    dlt_flag_add(a->barrier, 1);
    return wait_progressing(a->barrier, target, a->progress);
}

static int recursive_limit_worker(void *p) {
    limit_arg *a = p;
    dlock_mutex_t own, *m;
    struct timespec ts;
    long long e0;
    unsigned i;
    int rc;
    DLT_CK(open_mutex(&a->ms, &own, &m), 0);
    DLT_CK(dlock_mutex_lock(m), 0);
    DLT_CKT(barrier_wait(a, 2));
    e0 = dlt_evals();
    for (i = 1; i < DLOCK_RECURSIVE_MAX; i++) {
        if (i % LIMIT_STEP == 0) dlt_flag_add(a->progress, 1);
        if ((rc = dlock_mutex_lock(m)) != 0) {
            fprintf(stderr, "recursive_limit_worker: relock to depth %u gave %d (%s)\n", i + 1, rc, dlt_errno_label(rc));
            DLT_CK(rc, 0);
        }
    }
    DLT_CK(dlock_mutex_lock(m), EAGAIN);
    DLT_CK(dlock_mutex_trylock(m), EAGAIN);
    ts = dlt_abs_in(CLOCK_REALTIME, 1000);
    DLT_CK(dlock_mutex_timedlock(m, &ts), EAGAIN);
    ts = dlt_abs_in(CLOCK_MONOTONIC, 1000);
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts), EAGAIN);
    DLT_CK(dlock_mutex_holds(m), 1);
    /* Down 1000 and up again, still no round trip. */
    for (i = 0; i < 1000; i++) DLT_CK(dlock_mutex_unlock(m), 0);
    DLT_CK(dlock_mutex_holds(m), 1);
    for (i = 0; i < 1000; i++) DLT_CK(dlock_mutex_lock(m), 0);
    DLT_CK(dlock_mutex_lock(m), EAGAIN);
    DLT_CK(dlt_evals(), e0);
    DLT_CKT(barrier_wait(a, 4));
    return 0; /* holding it */
}

/* As recursive_limit_worker, telling the test when it returned. */
static int recursive_limit_task(void *p) {
    limit_arg *a = p;
    int rc = recursive_limit_worker(a);
    dlt_flag_set(&a->done, 1);
    return rc;
}

static void test_recursive_limit(void) {
    limit_arg *a = DLT_SHM_NEW(limit_arg, 2);
    int *flags = DLT_SHM_NEW(int, 2); /* the barrier, the progress */
    dlock_mutex_t m;
    dlt_task t[2];
    double t0 = dlt_now();

    /* Leases of an hour: no renewal disturbs the count. */
    DLT_ASSERT_ERR(init_typed(&m, "rec/limit/thread", DLOCK_MUTEX_RECURSIVE, 3600000), 0);
    a[0].ms = ms_shared(&m);
    a[1].ms = ms_own("rec/limit/process", DLOCK_MUTEX_RECURSIVE, 3600000);
    a[0].barrier = a[1].barrier = &flags[0];
    a[0].progress = a[1].progress = &flags[1];
    DLT_ASSERT_INT_EQ(dlt_task_start(&t[1], DLT_PROC, recursive_limit_task, &a[1]), 0);
    DLT_ASSERT_INT_EQ(dlt_task_start(&t[0], DLT_THREAD, recursive_limit_task, &a[0]), 0);
    /* (a worker that fails returns at once; one that stalls fails here) */
    CU_ASSERT_TRUE(wait_progressing(&a[0].done, 1, a[0].progress));
    CU_ASSERT_TRUE(wait_progressing(&a[1].done, 1, a[1].progress));
    DLT_ASSERT_INT_EQ(dlt_task_join(&t[0], DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t[1], DLT_JOIN_MS), 0);
    fprintf(stderr, "  2 x %u relocks took %.1f s\n", DLOCK_RECURSIVE_MAX, dlt_now() - t0);
    /* The thread and the process ended holding their locks. */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_INT_EQ(key_del("rec/limit/thread") + key_del("rec/limit/process"), 2);
    DLT_SHM_FREE(a, 2);
    DLT_SHM_FREE(flags, 2);
}

/* ========================================================================
 * lock, the backend unreachable past the configured bound: ENOLCK;
 * nothing is held.
 * ====================================================================== */

static int dead_port(void) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd); /* bound, never listening: connections are refused */
    return port;
}

typedef struct unreach_arg {
    dlock_mutex_t *m; /* shared, or NULL: make a client on url and a mutex */
    char url[128];
    unsigned bound_ms;
} unreach_arg;

static int unreach_worker(void *p) {
    unreach_arg *a = p;
    dlock_client_t *c = NULL;
    dlock_mutex_t own, *m = a->m;
    double t0, dt, bound = a->bound_ms / 1000.0;
    if (m == NULL) {
        dlock_mutexattr_t at;
        DLT_CK(dlt_client_make(&c, a->url, a->bound_ms), 0);
        DLT_CK(dlock_mutexattr_init(&at), 0);
        DLT_CK(dlock_mutexattr_setclient(&at, c), 0);
        DLT_CK(dlock_mutex_init(&own, "unreach", &at), 0);
        DLT_CK(dlock_mutexattr_destroy(&at), 0);
        m = &own;
    }
    t0 = dlt_now();
    DLT_CK(dlock_mutex_lock(m), ENOLCK);
    dt = dlt_now() - t0;
    DLT_CKT(dt >= 0.8 * bound);
    DLT_CKT(dt < 3.0);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(dlock_mutex_fence(m), 0);
    DLT_CKT(dlock_last_error()[0] != '\0');

    t0 = dlt_now();
    DLT_CK(dlock_mutex_trylock(m), ENOLCK);
    dt = dlt_now() - t0;
    DLT_CKT(dt < 3.0);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CKT(dlock_last_error()[0] != '\0');
    DLT_CK(dlock_mutex_unlock(m), EPERM);
    if (a->m == NULL) {
        DLT_CK(dlock_mutex_destroy(&own), 0);
        DLT_CK(dlock_client_destroy(c), 0);
    }
    return 0;
}

static void test_unreachable_enolck(void) {
    unreach_arg *a = DLT_SHM_NEW(unreach_arg, 6);
    dlock_mutexattr_t at;
    dlock_client_t *c = NULL, *c2 = NULL;
    dlock_mutex_t m, m2;
    struct timespec ts;
    double t0, dt;
    int port = dead_port(), i;

    CU_ASSERT_FATAL(port > 0);
    /* A client for a port where nothing listens. */
    snprintf(a[0].url, sizeof a[0].url, "redis://127.0.0.1:%d", port);
    DLT_ASSERT_ERR(dlt_client_make(&c, a[0].url, 1000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&at), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&at, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "unreach", &at), 0);

    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    dt = dlt_now() - t0;
    fprintf(stderr, "  lock gave ENOLCK after %.3f s: %s\n", dt, dlock_last_error());
    CU_ASSERT_TRUE(dt >= 0.8 && dt < 3.0);
    CU_ASSERT_STRING_NOT_EQUAL(dlock_last_error(), "");
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOLCK);
    CU_ASSERT_TRUE(dlt_now() - t0 < 3.0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 10000); /* the server's bound comes first */
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &ts), ENOLCK);
    CU_ASSERT_TRUE(dlt_now() - t0 < 3.0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);

    /* Three threads on that object and two processes with their own
     * clients, all at once. */
    for (i = 0; i < 5; i++) {
        a[i].m = i < 3 ? &m : NULL;
        snprintf(a[i].url, sizeof a[i].url, "redis://127.0.0.1:%d", port);
        a[i].bound_ms = 1000;
    }
    dlt_run_all(unreach_worker, a, sizeof *a, 3, 2);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);

    /* A server that goes away: the same, then it comes back. */
    DLT_ASSERT_ERR(dlt_client_make(&c2, dlt_server.url, 1000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&at, c2), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m2, "unreach", &at), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    CU_ASSERT_FATAL(dlt_redis_stop(&dlt_server) == 0);
    a[0].m = &m2;
    a[1].m = NULL;
    snprintf(a[1].url, sizeof a[1].url, "%s", dlt_server.url);
    a[0].bound_ms = a[1].bound_ms = 1000;
    dlt_run_all(unreach_worker, a, sizeof *a, 1, 1);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m2), ENOLCK);
    dt = dlt_now() - t0;
    CU_ASSERT_TRUE(dt >= 0.8 && dt < 3.0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m2), 0);
    CU_ASSERT_STRING_NOT_EQUAL(dlock_last_error(), "");
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m2), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m2), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&at), 0);
    DLT_SHM_FREE(a, 6);
}

/* A lock that is waiting for a holder when the server goes away gives
 * ENOLCK too, once the bound has passed: it waits for the lock, not for
 * an unreachable server. */
typedef struct waitgone_arg {
    waiter w;
    char url[128];
} waitgone_arg;

static int waitgone_worker(void *p) {
    waitgone_arg *a = p;
    dlock_mutexattr_t at;
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    DLT_CK(dlt_client_make(&c, a->url, 1000), 0);
    DLT_CK(dlock_mutexattr_init(&at), 0);
    DLT_CK(dlock_mutexattr_setclient(&at, c), 0);
    DLT_CK(dlock_mutex_init(&m, "unreach/waiting", &at), 0);
    DLT_CK(dlock_mutexattr_destroy(&at), 0);
    a->w.ms = ms_shared(&m);
    DLT_CK(waiter_main(&a->w), 0);
    if (a->w.rc == ENOLCK) DLT_CKT(dlock_last_error()[0] != '\0');
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static void test_unreachable_while_waiting(void) {
    holder *h = DLT_SHM_NEW(holder, 1);
    waitgone_arg *a = DLT_SHM_NEW(waitgone_arg, 2);
    dlt_task th, t[2];
    double t_stop;
    int i;

    holder_init(h, ms_own("unreach/waiting", T_DEFAULT, 0), H_UNLOCK);
    h->unlock_want = -1; /* its unlock may or may not find its key again */
    dlt_task_start(&th, DLT_PROC, holder_main, h);
    CU_ASSERT_TRUE(holder_wait_locked(h));
    for (i = 1; i >= 0; i--) {
        waiter_init(&a[i].w, ms_shared(NULL), 0);
        snprintf(a[i].url, sizeof a[i].url, "%s", dlt_server.url);
        dlt_task_start(&t[i], i, waitgone_worker, &a[i]);
    }
    for (i = 0; i < 2; i++) CU_ASSERT_TRUE(dlt_flag_wait(&a[i].w.ready, 1, 5000));
    CU_ASSERT_TRUE(wait_numsub("unreach/waiting", 2, 5000));
    dlt_sleep_ms(100);
    CU_ASSERT_FATAL(dlt_redis_stop(&dlt_server) == 0);
    t_stop = dlt_now();
    for (i = 0; i < 2; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(a[i].w.rc, ENOLCK);
        DLT_ASSERT_INT_EQ(a[i].w.holds, 0);
        CU_ASSERT_TRUE(a[i].w.t_acq - t_stop < 3.0);
        fprintf(stderr, "  waiter %d: %s %.3f s after the server stopped\n", i, dlt_errno_label(a[i].w.rc),
                a[i].w.t_acq - t_stop);
    }
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    dlt_flag_set(&h->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_SHM_FREE(h, 1);
    DLT_SHM_FREE(a, 2);
}

/* ========================================================================
 * trylock: held by another, or by the caller (non-recursive): EBUSY after
 * one round trip at most.
 * ====================================================================== */

static int trylock_self_worker(void *p) {
    const char *name = p;
    static const int types[] = { DLOCK_MUTEX_NORMAL, DLOCK_MUTEX_ERRORCHECK, DLOCK_MUTEX_DEFAULT };
    size_t i;
    for (i = 0; i < sizeof types / sizeof types[0]; i++) {
        dlock_mutex_t m;
        DLT_CK(init_typed(&m, name, types[i], 0), 0);
        DLT_CK(dlock_mutex_trylock(&m), 0);
        DLT_CK(dlock_mutex_holds(&m), 1);
        DLT_CKT(dlock_mutex_fence(&m) > 0);
        DLT_CK(dlock_mutex_trylock(&m), EBUSY);
        DLT_CK(dlock_mutex_holds(&m), 1);
        DLT_CK(dlock_mutex_unlock(&m), 0);
        DLT_CK(dlock_mutex_destroy(&m), 0);
    }
    return 0;
}

static void test_trylock_busy(void) {
    enum { NP = 4 };
    dlock_mutex_t m;
    holder *h = DLT_SHM_NEW(holder, 2);
    probe *pr = DLT_SHM_NEW(probe, NP);
    dlt_task th, tp[NP];
    long long e0, e1;
    double t0;
    int i;

    DLT_ASSERT_ERR(dlock_mutex_init(&m, "try", NULL), 0);
    /* Warm up: the scripts are loaded, so a round trip is one call. */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    for (i = NP - 1; i >= 0; i--) {
        probe_init(&pr[i], i < 2 ? ms_shared(&m) : ms_own("try", T_DEFAULT, 0));
        dlt_task_start(&tp[i], i >= 2, probe_main, &pr[i]);
    }

    /* Held by another thread of this process. */
    holder_init(&h[0], ms_shared(&m), H_UNLOCK);
    dlt_task_start(&th, DLT_THREAD, holder_main, &h[0]);
    CU_ASSERT_TRUE(holder_wait_locked(&h[0]));
    e0 = dlt_evals();
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    e1 = dlt_evals();
    CU_ASSERT_TRUE(e1 - e0 <= 1);
    for (i = 0; i < NP; i++) DLT_ASSERT_ERR(probe_call(&pr[i], P_TRY), EBUSY);
    dlt_flag_set(&h[0].release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(h[0].unlock_rc, 0);

    /* Held by another process. */
    holder_init(&h[1], ms_own("try", T_DEFAULT, 60000), H_UNLOCK);
    dlt_task_start(&th, DLT_PROC, holder_main, &h[1]);
    CU_ASSERT_TRUE(holder_wait_locked(&h[1]));
    e0 = dlt_evals();
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    e1 = dlt_evals();
    CU_ASSERT_TRUE(dlt_now() - t0 < 0.5);
    /* the acquire script, and the fence script of the pipelined attempt
     * (the lock was free at this process's last acquisition), which runs
     * whether or not its SET took the lock */
    CU_ASSERT_TRUE(e1 - e0 <= 2);
    if (e1 - e0 > 2) fprintf(stderr, "  a busy trylock made %lld script calls\n", e1 - e0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    for (i = 0; i < NP; i++) DLT_ASSERT_ERR(probe_call(&pr[i], P_TRY), EBUSY);
    dlt_flag_set(&h[1].release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(h[1].unlock_rc, 0);

    /* Free again: everyone gets it. */
    for (i = 0; i < NP; i++) DLT_ASSERT_ERR(probe_call(&pr[i], P_TRY), 0);
    /* Held by the caller: this thread... */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    e0 = dlt_evals();
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    CU_ASSERT_TRUE(dlt_evals() - e0 <= 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    for (i = 0; i < NP; i++) probe_quit(&pr[i], &tp[i]);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* ...and, for NORMAL, ERRORCHECK and DEFAULT, threads and processes. */
    static const char *names[4] = { "try/self/0", "try/self/1", "try/self/2", "try/self/3" };
    dlt_task t[4];
    for (i = 3; i >= 0; i--) dlt_task_start(&t[i], i >= 2, trylock_self_worker, (void *)names[i]);
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    DLT_SHM_FREE(h, 2);
    DLT_SHM_FREE(pr, NP);
}

/* ========================================================================
 * timedlock / clocklock: ETIMEDOUT when not acquired by abstime; a past
 * abstime still acquires a free lock; a bad tv_nsec on a call that would
 * wait is EINVAL.
 * ====================================================================== */

/* The lock is held by someone else for the whole run. */
static int timed_busy_worker(void *p) {
    mspec *s = p;
    dlock_mutex_t own, *m;
    struct timespec ts;
    double t0, dt;
    DLT_CK(open_mutex(s, &own, &m), 0);

    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    t0 = dlt_now();
    DLT_CK(dlock_mutex_timedlock(m, &ts), ETIMEDOUT);
    dt = dlt_now() - t0;
    DLT_CKT(dt >= 0.299 && dt < 1.2);
    ts = dlt_abs_in(CLOCK_MONOTONIC, 300);
    t0 = dlt_now();
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
    dt = dlt_now() - t0;
    DLT_CKT(dt >= 0.299 && dt < 1.2);
    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    t0 = dlt_now();
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_REALTIME, &ts), ETIMEDOUT);
    dt = dlt_now() - t0;
    DLT_CKT(dt >= 0.299 && dt < 1.2);

    /* Deadlines in the past: at once. */
    t0 = dlt_now();
    ts = dlt_abs_in(CLOCK_REALTIME, -1000);
    DLT_CK(dlock_mutex_timedlock(m, &ts), ETIMEDOUT);
    ts.tv_sec = 0;
    ts.tv_nsec = 0;
    DLT_CK(dlock_mutex_timedlock(m, &ts), ETIMEDOUT);
    ts = dlt_abs_in(CLOCK_MONOTONIC, -1000);
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
    DLT_CKT(dlt_now() - t0 < 0.5);

    /* A bad tv_nsec on a call that would wait. */
    t0 = dlt_now();
    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    ts.tv_nsec = -1;
    DLT_CK(dlock_mutex_timedlock(m, &ts), EINVAL);
    ts.tv_nsec = 1000000000L;
    DLT_CK(dlock_mutex_timedlock(m, &ts), EINVAL);
    ts = dlt_abs_in(CLOCK_MONOTONIC, 300);
    ts.tv_nsec = 1000000000L;
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts), EINVAL);
    ts.tv_nsec = -1;
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts), EINVAL);
    DLT_CKT(dlt_now() - t0 < 0.5); /* without waiting */

    ts = dlt_abs_in(CLOCK_REALTIME, 300);
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
    DLT_CK(dlock_mutex_timedlock(m, NULL), EINVAL);
    DLT_CK(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, NULL), EINVAL);
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(close_mutex(s, &own), 0);
    return 0;
}

/* The lock is free: past deadlines and bad tv_nsec still acquire it. */
static int timed_free_worker(void *p) {
    const char *name = p;
    dlock_mutex_t m;
    struct timespec ts;
    double t0;
    DLT_CK(dlock_mutex_init(&m, name, NULL), 0);

    ts = dlt_abs_in(CLOCK_REALTIME, -1000);
    DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    ts.tv_sec = 0;
    ts.tv_nsec = 0;
    DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    ts = dlt_abs_in(CLOCK_MONOTONIC, -1000);
    DLT_CK(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts), 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, -1000);
    DLT_CK(dlock_mutex_clocklock(&m, CLOCK_REALTIME, &ts), 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);

    /* A bad tv_nsec need not be checked when the call need not wait. */
    ts = dlt_abs_in(CLOCK_REALTIME, 1000);
    ts.tv_nsec = -1;
    DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    ts.tv_nsec = 1000000000L;
    DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    ts = dlt_abs_in(CLOCK_MONOTONIC, 1000);
    ts.tv_nsec = 1000000000L;
    DLT_CK(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts), 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);

    /* Bad clocks and NULL: EINVAL, nothing held. */
    ts = dlt_abs_in(CLOCK_REALTIME, 1000);
    DLT_CK(dlock_mutex_clocklock(&m, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
    DLT_CK(dlock_mutex_holds(&m), 0);
    DLT_CK(dlock_mutex_clocklock(&m, CLOCK_THREAD_CPUTIME_ID, &ts), EINVAL);
    DLT_CK(dlock_mutex_holds(&m), 0);
    DLT_CK(dlock_mutex_timedlock(&m, NULL), EINVAL);
    DLT_CK(dlock_mutex_clocklock(&m, CLOCK_REALTIME, NULL), EINVAL);
    DLT_CK(dlock_mutex_holds(&m), 0);

    /* A future deadline on a free lock: at once. */
    ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    t0 = dlt_now();
    DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
    DLT_CKT(dlt_now() - t0 < 0.5);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_timedlock_clocklock(void) {
    static const char *free_names[5] = { "timed/free/0", "timed/free/1", "timed/free/2", "timed/free/3",
                                         "timed/free/4" };
    dlock_mutex_t m;
    holder *h = DLT_SHM_NEW(holder, 1);
    mspec *s = DLT_SHM_NEW(mspec, 4);
    dlt_task th, t[4];
    int i;

    /* Free locks: in this thread, two threads and two processes. */
    DLT_ASSERT_INT_EQ(timed_free_worker((void *)free_names[0]), 0);
    for (i = 3; i >= 0; i--) dlt_task_start(&t[i], i >= 2, timed_free_worker, (void *)free_names[1 + i]);
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);

    /* Held by this thread: two other threads and two processes time out. */
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "timed/busy", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    s[0] = s[1] = ms_shared(&m);
    s[2] = s[3] = ms_own("timed/busy", T_DEFAULT, 0);
    dlt_run_all(timed_busy_worker, s, sizeof *s, 2, 2);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    /* Held by another process: this thread, another thread and another
     * process time out. */
    holder_init(h, ms_own("timed/busy", T_DEFAULT, 0), H_UNLOCK);
    dlt_task_start(&th, DLT_PROC, holder_main, h);
    CU_ASSERT_TRUE(holder_wait_locked(h));
    s[0] = ms_shared(&m);
    DLT_ASSERT_INT_EQ(timed_busy_worker(&s[0]), 0);
    s[1] = ms_shared(&m);
    s[2] = ms_own("timed/busy", T_DEFAULT, 0);
    dlt_run_all(timed_busy_worker, &s[1], sizeof *s, 1, 1);
    dlt_flag_set(&h->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(h->unlock_rc, 0);

    /* Released before the deadline: a timedlock (this process) and a
     * clocklock (another process) get it at once, despite signals. */
    waiter *w = DLT_SHM_NEW(waiter, 2);
    dlt_task tw[2];
    usr1_install();
    holder_init(h, ms_own("timed/busy", T_DEFAULT, 0), H_UNLOCK);
    dlt_task_start(&th, DLT_PROC, holder_main, h);
    CU_ASSERT_TRUE(holder_wait_locked(h));
    waiter_init(&w[0], ms_shared(&m), 0);
    w[0].timed_ms = 5000;
    waiter_init(&w[1], ms_own("timed/busy", T_DEFAULT, 0), 0);
    w[1].timed_ms = -5000;
    for (i = 1; i >= 0; i--) dlt_task_start(&tw[i], i, waiter_main, &w[i]);
    CU_ASSERT_TRUE(dlt_flag_wait(&w[0].ready, 1, 5000) && dlt_flag_wait(&w[1].ready, 1, 5000));
    CU_ASSERT_TRUE(wait_numsub("timed/busy", 2, 5000));
    for (i = 0; i < 2; i++) dlt_task_signal(&tw[i], SIGUSR1);
    dlt_sleep_ms(100);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&w[0].done) + dlt_flag_get(&w[1].done), 0);
    dlt_flag_set(&h->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    for (i = 0; i < 2; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&tw[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(w[i].rc, 0);
        DLT_ASSERT_ERR(w[i].unlock_rc, 0);
        CU_ASSERT_TRUE(w[i].t_acq > h->t_unlock && w[i].t_acq - h->t_unlock < 1.0);
    }
    DLT_ASSERT_INT_EQ(w[1].usr1, 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(w, 2);
    DLT_SHM_FREE(h, 1);
    DLT_SHM_FREE(s, 4);
}

/* ========================================================================
 * unlock, caller holds it: 0, released in one round trip; a waiter
 * anywhere wakes within about one round trip.
 * ====================================================================== */

static int unlock_round_trip_worker(void *p) {
    const char *name = p;
    dlock_mutex_t m;
    long long e0;
    DLT_CK(dlock_mutex_init(&m, name, NULL), 0);
    DLT_CK(dlock_mutex_lock(&m), 0); /* warm up: scripts loaded */
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    e0 = dlt_evals();
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlt_evals() - e0, 1);
    DLT_CK(dlt_key_exists(name), 0);
    DLT_CK(dlock_mutex_holds(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_unlock_by_holder(void) {
    enum { NW = 3 };
    dlock_mutex_t m;
    waiter *w = DLT_SHM_NEW(waiter, 2 * NW);
    holder *h = DLT_SHM_NEW(holder, 1);
    dlt_task t[NW], th;
    int i;

    /* One round trip: in this thread, another thread, another process
     * (one after the other, as the count is the server's). */
    DLT_ASSERT_INT_EQ(unlock_round_trip_worker((void *)"unlock/rt/main"), 0);
    dlt_task_start(&th, DLT_THREAD, unlock_round_trip_worker, (void *)"unlock/rt/thread");
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    dlt_task_start(&th, DLT_PROC, unlock_round_trip_worker, (void *)"unlock/rt/process");
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);

    /* This thread holds; a thread and two processes wait: they wake at
     * once when it unlocks. */
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "unlock/wake", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    for (i = NW - 1; i >= 0; i--) {
        waiter_init(&w[i], i == 0 ? ms_shared(&m) : ms_own("unlock/wake", T_DEFAULT, 0), 0);
        dlt_task_start(&t[i], i > 0, waiter_main, &w[i]);
    }
    for (i = 0; i < NW; i++) CU_ASSERT_TRUE(dlt_flag_wait(&w[i].ready, 1, 5000));
    CU_ASSERT_TRUE(wait_numsub("unlock/wake", NW - 1, 5000)); /* the children */
    dlt_sleep_ms(200);
    double t_rel = dlt_now(), first = 1e9;
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    for (i = 0; i < NW; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(w[i].rc, 0);
        DLT_ASSERT_ERR(w[i].unlock_rc, 0);
        CU_ASSERT_TRUE(w[i].t_acq > t_rel && w[i].t_acq - t_rel < 1.0);
        if (w[i].t_acq < first) first = w[i].t_acq;
    }
    CU_ASSERT_TRUE(first - t_rel < 0.5);
    fprintf(stderr, "  first waiter woke %.1f ms after this thread's unlock\n", (first - t_rel) * 1000);

    /* Another process holds; a thread of this process and another process
     * wait. */
    holder_init(h, ms_own("unlock/wake", T_DEFAULT, 0), H_UNLOCK);
    dlt_task_start(&th, DLT_PROC, holder_main, h);
    CU_ASSERT_TRUE(holder_wait_locked(h));
    waiter_init(&w[NW], ms_shared(&m), 0);
    waiter_init(&w[NW + 1], ms_own("unlock/wake", T_DEFAULT, 0), 0);
    dlt_task_start(&t[1], DLT_PROC, waiter_main, &w[NW + 1]);
    dlt_task_start(&t[0], DLT_THREAD, waiter_main, &w[NW]);
    CU_ASSERT_TRUE(dlt_flag_wait(&w[NW].ready, 1, 5000) && dlt_flag_wait(&w[NW + 1].ready, 1, 5000));
    CU_ASSERT_TRUE(wait_numsub("unlock/wake", 2, 5000));
    dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&w[NW].done) + dlt_flag_get(&w[NW + 1].done), 0);
    dlt_flag_set(&h->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(h->unlock_rc, 0);
    first = 1e9;
    for (i = 0; i < 2; i++) {
        waiter *wi = &w[NW + i];
        DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(wi->rc, 0);
        CU_ASSERT_TRUE(wi->t_acq > h->t_unlock && wi->t_acq - h->t_unlock < 1.0);
        if (wi->t_acq < first) first = wi->t_acq;
    }
    CU_ASSERT_TRUE(first - h->t_unlock < 0.5);
    fprintf(stderr, "  first waiter woke %.1f ms after the other process's unlock\n", (first - h->t_unlock) * 1000);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(w, 2 * NW);
    DLT_SHM_FREE(h, 1);
}

/* ========================================================================
 * unlock, caller does not hold it: EPERM.
 * ====================================================================== */

static void test_unlock_not_holder_eperm(void) {
    dlock_mutex_t m;
    holder *h = DLT_SHM_NEW(holder, 2);
    mspec *s = DLT_SHM_NEW(mspec, 4);
    dlt_task th;

    DLT_ASSERT_ERR(dlock_mutex_init(&m, "eperm", NULL), 0);
    /* Never locked: this thread, fresh threads that never used dlock,
     * processes. */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    s[0] = s[1] = ms_shared(&m);
    s[2] = s[3] = ms_own("eperm", T_DEFAULT, 0);
    dlt_run_all(not_holder_worker, s, sizeof *s, 2, 2);

    /* Another thread holds it. */
    holder_init(&h[0], ms_shared(&m), H_UNLOCK);
    dlt_task_start(&th, DLT_THREAD, holder_main, &h[0]);
    CU_ASSERT_TRUE(holder_wait_locked(&h[0]));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    dlt_run_all(not_holder_worker, &s[1], sizeof *s, 1, 1);
    DLT_ASSERT_INT_EQ(dlt_key_exists("eperm"), 1);
    dlt_flag_set(&h[0].release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(h[0].holds_at_unlock, 1); /* the EPERMs did not take it away */
    DLT_ASSERT_ERR(h[0].unlock_rc, 0);

    /* Another process holds it. */
    holder_init(&h[1], ms_own("eperm", T_DEFAULT, 0), H_UNLOCK);
    dlt_task_start(&th, DLT_PROC, holder_main, &h[1]);
    CU_ASSERT_TRUE(holder_wait_locked(&h[1]));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    dlt_run_all(not_holder_worker, &s[1], sizeof *s, 1, 1);
    DLT_ASSERT_INT_EQ(dlt_key_field("eperm", "pid"), th.pid);
    dlt_flag_set(&h[1].release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(h[1].holds_at_unlock, 1);
    DLT_ASSERT_ERR(h[1].unlock_rc, 0);

    /* Unlocked already. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(h, 2);
    DLT_SHM_FREE(s, 4);
}

/* ========================================================================
 * unlock, the lease was lost: EPERM; the lost-lock handler ran once.
 * ====================================================================== */

typedef struct lost_seen {
    int count, name_ok, m_ok;
    dlock_mutex_t *m;
    const char *name;
} lost_seen;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    lost_seen *ls = arg;
    if (m == ls->m) __atomic_add_fetch(&ls->m_ok, 1, __ATOMIC_SEQ_CST);
    if (name != NULL && strcmp(name, ls->name) == 0) __atomic_add_fetch(&ls->name_ok, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&ls->count, 1, __ATOMIC_SEQ_CST);
}

static int lost_worker(void *p) {
    const char *name = p;
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    lost_seen ls;
    double t0, dt;

    memset(&ls, 0, sizeof ls);
    ls.m = &m;
    ls.name = name;
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_setlease(&a, 300), 0);
    DLT_CK(dlock_mutexattr_setlostcallback(&a, on_lost, &ls), 0);
    DLT_CK(dlock_mutex_init(&m, name, &a), 0);
    DLT_CK(dlock_mutexattr_destroy(&a), 0);

    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(key_del(name), 1); /* the next renewal is refused */
    t0 = dlt_now();
    while (dlock_mutex_holds(&m) && dlt_now() - t0 < 2.0) dlt_sleep_ms(5);
    dt = dlt_now() - t0;
    DLT_CK(dlock_mutex_holds(&m), 0);
    DLT_CKT(dt < 1.2);
    DLT_CK(dlock_mutex_fence(&m), 0);
    t0 = dlt_now();
    while (__atomic_load_n(&ls.count, __ATOMIC_SEQ_CST) == 0 && dlt_now() - t0 < 1.0) dlt_sleep_ms(5);
    dlt_sleep_ms(300);
    DLT_CK(__atomic_load_n(&ls.count, __ATOMIC_SEQ_CST), 1);
    DLT_CK(ls.name_ok, 1);
    DLT_CK(ls.m_ok, 1);
    DLT_CK(dlock_mutex_unlock(&m), EPERM);
    DLT_CK(__atomic_load_n(&ls.count, __ATOMIC_SEQ_CST), 1);
    DLT_CK(dlock_mutex_unlock(&m), EPERM);

    /* A lost hold is over: the mutex works again. */
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(__atomic_load_n(&ls.count, __ATOMIC_SEQ_CST), 1);

    /* A lost hold is no hold: destroy gives 0, and the name works again. */
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(key_del(name), 1);
    t0 = dlt_now();
    while (dlock_mutex_holds(&m) && dlt_now() - t0 < 2.0) dlt_sleep_ms(5);
    DLT_CK(dlock_mutex_holds(&m), 0);
    t0 = dlt_now();
    while (__atomic_load_n(&ls.count, __ATOMIC_SEQ_CST) < 2 && dlt_now() - t0 < 1.0) dlt_sleep_ms(5);
    DLT_CK(__atomic_load_n(&ls.count, __ATOMIC_SEQ_CST), 2);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_mutex_init(&m, name, NULL), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_unlock_lease_lost(void) {
    static const char *names[5] = { "lost/0", "lost/1", "lost/2", "lost/3", "lost/4" };
    dlt_task t[4];
    int i;
    for (i = 3; i >= 0; i--) dlt_task_start(&t[i], i >= 2, lost_worker, (void *)names[1 + i]);
    DLT_ASSERT_INT_EQ(lost_worker((void *)names[0]), 0);
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);

    /* A real expiry: a holder process is stopped past its 300 ms lease,
     * this thread takes the lock meanwhile; woken up, the holder's unlock
     * is EPERM and does not touch the new holder's lock. */
    holder *h = DLT_SHM_NEW(holder, 1);
    dlock_mutex_t m;
    dlt_task th;
    double t0;
    holder_init(h, ms_own("lost/stopped", T_DEFAULT, 300), H_UNLOCK);
    h->unlock_want = EPERM;
    dlt_task_start(&th, DLT_PROC, holder_main, h);
    CU_ASSERT_TRUE(holder_wait_locked(h));
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "lost/stopped", NULL), 0);
    kill(th.pid, SIGSTOP);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_TRUE(dlt_now() - t0 < 0.3 + 1.5);
    kill(th.pid, SIGCONT);
    dlt_sleep_ms(100);
    dlt_flag_set(&h->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(h->holds_at_unlock, 0);
    DLT_ASSERT_ERR(h->unlock_rc, EPERM);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_INT_EQ(dlt_key_field("lost/stopped", "pid"), getpid());
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(h, 1);
}

/* ========================================================================
 * destroy: held by a thread of this process: EBUSY; otherwise frees local
 * resources only; any call on a destroyed mutex: EINVAL.
 * ====================================================================== */

static int destroy_worker(void *p) {
    const char *name = p;
    dlock_mutex_t m;
    DLT_CK(dlock_mutex_init(&m, name, NULL), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), EBUSY);
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(check_invalid(&m), 0);
    /* A destroyed object may be initialised again. */
    DLT_CK(dlock_mutex_init(&m, name, NULL), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static int destroy_expect_worker(void *p) {
    dlock_mutex_t *m = p;
    DLT_CK(dlock_mutex_destroy(m), EBUSY);
    return 0;
}

static dlock_mutex_t s_never_used = DLOCK_MUTEX_INITIALIZER("destroy/never");

static void test_destroy(void) {
    static const char *names[5] = { "destroy/0", "destroy/1", "destroy/2", "destroy/3", "destroy/4" };
    dlock_mutex_t m, m2;
    holder *h = DLT_SHM_NEW(holder, 2);
    dlt_task th, t[4];
    int i;

    /* Held by another thread of this process: EBUSY, and it stays usable. */
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "destroy/a", NULL), 0);
    holder_init(&h[0], ms_shared(&m), H_UNLOCK);
    dlt_task_start(&th, DLT_THREAD, holder_main, &h[0]);
    CU_ASSERT_TRUE(holder_wait_locked(&h[0]));
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    dlt_flag_set(&h[0].release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(h[0].holds_at_unlock, 1);
    DLT_ASSERT_ERR(h[0].unlock_rc, 0);
    /* Held by this thread: EBUSY here and from another thread. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), EBUSY);
    dlt_task_start(&th, DLT_THREAD, destroy_expect_worker, &m);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_INT_EQ(check_invalid(&m), 0);

    /* The whole cycle in this thread, two threads and two processes. */
    DLT_ASSERT_INT_EQ(destroy_worker((void *)names[0]), 0);
    for (i = 3; i >= 0; i--) dlt_task_start(&t[i], i >= 2, destroy_worker, (void *)names[1 + i]);
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);

    /* Held by another process: destroy frees only what is here; that
     * process still holds the lock. */
    holder_init(&h[1], ms_own("destroy/b", T_DEFAULT, 0), H_UNLOCK);
    dlt_task_start(&th, DLT_PROC, holder_main, &h[1]);
    CU_ASSERT_TRUE(holder_wait_locked(&h[1]));
    DLT_ASSERT_ERR(dlock_mutex_init(&m2, "destroy/b", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_INT_EQ(check_invalid(&m2), 0);
    DLT_ASSERT_INT_EQ(dlt_key_field("destroy/b", "pid"), th.pid);
    dlt_flag_set(&h[1].release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(h[1].holds_at_unlock, 1);
    DLT_ASSERT_ERR(h[1].unlock_rc, 0);

    /* A static mutex never used: 0, and then it is gone. */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&s_never_used), 0);
    DLT_ASSERT_INT_EQ(check_invalid(&s_never_used), 0);
    DLT_SHM_FREE(h, 2);
}

/* ========================================================================
 * DLOCK_MUTEX_INITIALIZER: a static mutex works from several threads and
 * processes; first use connects.
 * ====================================================================== */

static dlock_mutex_t s_threads = DLOCK_MUTEX_INITIALIZER("static/threads");
static dlock_mutex_t s_procs = DLOCK_MUTEX_INITIALIZER("static/procs");

typedef struct static_shared {
    int go;
    int inside, overlaps;
    long counter;
} static_shared;

typedef struct static_arg {
    dlock_mutex_t *m;
    const char *name;
    static_shared *sh;
    int iters;
    int destroy; /* a child destroys its copy at the end */
} static_arg;

static int static_worker(void *p) {
    static_arg *a = p;
    int i;
    DLT_CKT(dlt_flag_wait(&a->sh->go, 1, 10000));
    for (i = 0; i < a->iters; i++) {
        DLT_CK(dlock_mutex_lock(a->m), 0);
        if (__atomic_add_fetch(&a->sh->inside, 1, __ATOMIC_SEQ_CST) != 1)
            __atomic_add_fetch(&a->sh->overlaps, 1, __ATOMIC_SEQ_CST);
        long v = *(volatile long *)&a->sh->counter;
        sched_yield();
        *(volatile long *)&a->sh->counter = v + 1;
        DLT_CK(dlock_mutex_lock(a->m), EDEADLK); /* DEFAULT */
        DLT_CK(dlock_mutex_holds(a->m), 1);
        __atomic_sub_fetch(&a->sh->inside, 1, __ATOMIC_SEQ_CST);
        DLT_CK(dlock_mutex_unlock(a->m), 0);
    }
    DLT_CKT(dlock_mutex_name(a->m) != NULL && strcmp(dlock_mutex_name(a->m), a->name) == 0);
    if (a->destroy) DLT_CK(dlock_mutex_destroy(a->m), 0);
    return 0;
}

static void test_static_initializer(void) {
    enum { NT = 4, NP = 2 };
    static_shared *sh = DLT_SHM_NEW(static_shared, 2);
    static_arg *a = DLT_SHM_NEW(static_arg, NT + NP + 1);
    dlt_task t[NT + NP + 1];
    int i;

    /* Threads 0-3 race to first use s_threads; processes 4-5 and thread 6
     * use s_procs, which this process has not touched before the fork. */
    for (i = 0; i < NT + NP + 1; i++) {
        int thr = i < NT;
        a[i].m = thr ? &s_threads : &s_procs;
        a[i].name = thr ? "static/threads" : "static/procs";
        a[i].sh = thr ? &sh[0] : &sh[1];
        a[i].iters = thr ? 50 : 30;
        a[i].destroy = i >= NT && i < NT + NP;
    }
    for (i = NT; i < NT + NP; i++) dlt_task_start(&t[i], DLT_PROC, static_worker, &a[i]);
    for (i = 0; i < NT + NP + 1; i++)
        if (i < NT || i >= NT + NP) dlt_task_start(&t[i], DLT_THREAD, static_worker, &a[i]);
    dlt_flag_set(&sh[0].go, 1);
    dlt_flag_set(&sh[1].go, 1);
    for (i = 0; i < NT + NP + 1; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(sh[0].counter, NT * 50);
    DLT_ASSERT_INT_EQ(sh[1].counter, (NP + 1) * 30);
    DLT_ASSERT_INT_EQ(sh[0].overlaps + sh[1].overlaps, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&s_threads), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&s_procs), 0);
    DLT_ASSERT_INT_EQ(check_invalid(&s_threads), 0);
    DLT_SHM_FREE(sh, 2);
    DLT_SHM_FREE(a, NT + NP + 1);
}

/* ========================================================================
 * Mutual exclusion proper: a non-atomic read-increment-write of a Redis
 * counter (GET, then SET) under the lock comes out exact, at most one
 * holder is ever inside, and fences grow in the order of acquisition.
 * ====================================================================== */

typedef struct mx_shared {
    int inside, overlaps, fence_bad;
    uint64_t last_fence;
} mx_shared;

typedef struct mx_arg {
    mspec ms;
    const char *counter;
    int iters;
    mx_shared *sh;
} mx_arg;

static int mutex_worker(void *p) {
    mx_arg *a = p;
    dlock_mutex_t own, *m;
    struct timeval tv = { 2, 0 };
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", dlt_server.port, tv);
    int i, rc = 0;
    DLT_CKT(ctx != NULL && ctx->err == 0);
    redisSetTimeout(ctx, tv);
    if ((rc = open_mutex(&a->ms, &own, &m)) != 0) {
        redisFree(ctx);
        DLT_CK(rc, 0);
    }
    for (i = 0; i < a->iters && rc == 0; i++) {
        redisReply *r;
        long long v = 0;
        uint64_t f;
        if ((rc = dlock_mutex_lock(m)) != 0) {
            rc = DLT_CK_FAIL("dlock_mutex_lock(m)", rc, 0);
            break;
        }
        if (__atomic_add_fetch(&a->sh->inside, 1, __ATOMIC_SEQ_CST) != 1)
            __atomic_add_fetch(&a->sh->overlaps, 1, __ATOMIC_SEQ_CST);
        f = dlock_mutex_fence(m);
        if (f <= __atomic_load_n(&a->sh->last_fence, __ATOMIC_SEQ_CST))
            __atomic_add_fetch(&a->sh->fence_bad, 1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&a->sh->last_fence, f, __ATOMIC_SEQ_CST);
        r = redisCommand(ctx, "GET %s", a->counter);
        if (r != NULL && r->type == REDIS_REPLY_STRING) v = atoll(r->str);
        if (r != NULL) freeReplyObject(r);
        else rc = DLT_CKT_FAIL("GET answered");
        r = redisCommand(ctx, "SET %s %lld", a->counter, v + 1);
        if (r != NULL) freeReplyObject(r);
        else rc = DLT_CKT_FAIL("SET answered");
        __atomic_sub_fetch(&a->sh->inside, 1, __ATOMIC_SEQ_CST);
        int urc = dlock_mutex_unlock(m);
        if (urc != 0 && rc == 0) rc = DLT_CK_FAIL("dlock_mutex_unlock(m)", urc, 0);
    }
    redisFree(ctx);
    if (rc != 0) return rc;
    DLT_CK(close_mutex(&a->ms, &own), 0);
    return 0;
}

static long long counter_value(const char *key) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET %s", key);
    long long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) v = atoll(r->str);
    if (r != NULL) freeReplyObject(r);
    return v;
}

static void test_mutual_exclusion(void) {
    enum { N = 4 };
    mx_shared *sh = DLT_SHM_NEW(mx_shared, 3);
    mx_arg *a = DLT_SHM_NEW(mx_arg, N);
    dlock_mutex_t m;
    double t0;
    int i;

    DLT_ASSERT_ERR(dlock_mutex_init(&m, "mx", NULL), 0);
    /* 4 threads x 200 on one object. */
    t0 = dlt_now();
    for (i = 0; i < N; i++) {
        a[i].ms = ms_shared(&m);
        a[i].counter = "mx:threads";
        a[i].iters = 200;
        a[i].sh = &sh[0];
    }
    dlt_run_all(mutex_worker, a, sizeof *a, N, 0);
    DLT_ASSERT_INT_EQ(counter_value("mx:threads"), N * 200);
    DLT_ASSERT_INT_EQ(sh[0].overlaps, 0);
    DLT_ASSERT_INT_EQ(sh[0].fence_bad, 0);
    fprintf(stderr, "  threads: %d acquisitions in %.2f s\n", N * 200, dlt_now() - t0);

    /* 4 processes x 100, each with its own object. */
    t0 = dlt_now();
    for (i = 0; i < N; i++) {
        a[i].ms = ms_own("mx", T_DEFAULT, 0);
        a[i].counter = "mx:processes";
        a[i].iters = 100;
        a[i].sh = &sh[1];
    }
    dlt_run_all(mutex_worker, a, sizeof *a, 0, N);
    DLT_ASSERT_INT_EQ(counter_value("mx:processes"), N * 100);
    DLT_ASSERT_INT_EQ(sh[1].overlaps, 0);
    DLT_ASSERT_INT_EQ(sh[1].fence_bad, 0);
    fprintf(stderr, "  processes: %d acquisitions in %.2f s\n", N * 100, dlt_now() - t0);

    /* Both at once: 2 threads sharing this object, 2 processes. */
    t0 = dlt_now();
    for (i = 0; i < N; i++) {
        a[i].ms = i < 2 ? ms_shared(&m) : ms_own("mx", T_DEFAULT, 0);
        a[i].counter = "mx:mixed";
        a[i].iters = 50;
        a[i].sh = &sh[2];
    }
    dlt_run_all(mutex_worker, a, sizeof *a, 2, 2);
    DLT_ASSERT_INT_EQ(counter_value("mx:mixed"), N * 50);
    DLT_ASSERT_INT_EQ(sh[2].overlaps, 0);
    DLT_ASSERT_INT_EQ(sh[2].fence_bad, 0);
    fprintf(stderr, "  mixed: %d acquisitions in %.2f s\n", N * 50, dlt_now() - t0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(sh, 3);
    DLT_SHM_FREE(a, N);
}

/* ======================================================================== */

static const struct dlt_test tests[] = {
    DLT_TEST(test_init_bad_name),
    DLT_TEST(test_init_name_512_arbitrary_bytes),
    DLT_TEST(test_init_bad_attributes),
    DLT_TEST(test_invalid_objects),
    DLT_TEST(test_lock_free_holds_fence),
    DLT_TEST(test_lock_waits_for_release),
    DLT_TEST(test_lock_holder_dies),
    DLT_TEST(test_normal_relock_deadlocks),
    DLT_TEST(test_errorcheck_default_edeadlk),
    DLT_TEST(test_recursive),
    DLT_TEST(test_recursive_limit),
    DLT_TEST(test_unreachable_enolck),
    DLT_TEST(test_unreachable_while_waiting),
    DLT_TEST(test_trylock_busy),
    DLT_TEST(test_timedlock_clocklock),
    DLT_TEST(test_unlock_by_holder),
    DLT_TEST(test_unlock_not_holder_eperm),
    DLT_TEST(test_unlock_lease_lost),
    DLT_TEST(test_destroy),
    DLT_TEST(test_static_initializer),
    DLT_TEST(test_mutual_exclusion),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "mutex", tests);
}
