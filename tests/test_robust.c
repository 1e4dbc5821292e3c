/* test_robust.c -- robust mutexes, lost leases, fencing, the restart guard.
 * labels: redis; timeout: 300
 *
 * Robust mutexes and the restart guard, against SPEC section 2: the
 * two ROBUST rows, "Thread death", "Leases" and "Fencing".  Every scenario
 * runs across processes (dlt_spawn; a child reports through its exit
 * status) and, where it means something, across threads of this process.
 * Values a worker measures travel through MAP_SHARED memory, so one struct
 * serves a thread and a child alike.  Where a test starts processes and
 * threads, it forks first: GCC's AddressSanitizer runtime can deadlock a
 * child forked next to a thread that is starting.
 *
 * Helpers here are all rb_-prefixed (static), so that they never collide
 * with what the shared fixture grows.
 */
#define DLT_CK_MOD 120 /* worker codes 1..120: clear of 128 + signal */
#include "fixture.h"
#include "proxy.h"

#include <dlock.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ========================================================================
 * Mutexes and the server
 * ====================================================================== */

/* The lost-lock record of one holder, in shared memory: the handler
 * writes one byte per call to fd ('L', or 'X' if it was called with the
 * wrong name or object) and counts its calls. */
typedef struct rb_lost {
    int fd;
    int count;
    double t_first;
    const dlock_mutex_t *obj;
    char name[64];
} rb_lost;

static void rb_on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    rb_lost *r = arg;
    char b = (name != NULL && strcmp(name, r->name) == 0 && (r->obj == NULL || r->obj == m)) ? 'L' : 'X';
    if (__atomic_add_fetch(&r->count, 1, __ATOMIC_SEQ_CST) == 1) r->t_first = dlt_now();
    if (write(r->fd, &b, 1) != 1) perror("rb_on_lost: write");
}

/* A lost-lock record with a fresh pipe: *rd gets the (non-blocking) read end. */
static rb_lost *rb_lost_new(const char *name, int *rd) {
    rb_lost *r = DLT_SHM_NEW(rb_lost, 1);
    int p[2];
    if (pipe(p) != 0) {
        perror("pipe");
        abort();
    }
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    r->fd = p[1];
    snprintf(r->name, sizeof r->name, "%s", name);
    *rd = p[0];
    return r;
}

static void rb_lost_free(rb_lost *r, int rd) {
    close(r->fd);
    close(rd);
    DLT_SHM_FREE(r, 1);
}

/* Bytes the handler wrote, waiting up to wait_ms for the first and then
 * settle_ms more for any further one.  *bad counts 'X' bytes. */
static int rb_lost_bytes(int rd, int wait_ms, int settle_ms, int *bad) {
    int n = 0;
    double end = dlt_now() + wait_ms / 1000.0;
    *bad = 0;
    for (;;) {
        char b;
        ssize_t k = read(rd, &b, 1);
        if (k == 1) {
            n++;
            if (b != 'L') (*bad)++;
            end = dlt_now() + settle_ms / 1000.0;
            continue;
        }
        if (dlt_now() > end) break;
        if (n > 0 && settle_ms == 0) break;
        struct pollfd pf = { rd, POLLIN, 0 };
        (void)poll(&pf, 1, 20);
    }
    return n;
}

/* dlock_mutex_init of name: robust or not, lease_ms (0: default), a
 * lost-lock record (or NULL), a client (or NULL). */
static int rb_open(dlock_mutex_t *m, const char *name, int robust, unsigned lease_ms, rb_lost *lost,
                   dlock_client_t *c) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (robust && (rc = dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST)) != 0) goto out;
    if (lease_ms && (rc = dlock_mutexattr_setlease(&a, lease_ms)) != 0) goto out;
    if (lost && (rc = dlock_mutexattr_setlostcallback(&a, rb_on_lost, lost)) != 0) goto out;
    if (c && (rc = dlock_mutexattr_setclient(&a, c)) != 0) goto out;
    rc = dlock_mutex_init(m, name, &a);
out:
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* "dlock:{name}" plus suffix (e.g. ":state"). */
static size_t rb_key(const char *name, const char *suffix, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "dlock:{%s}%s", name, suffix);
    return n < 0 ? 0 : (size_t)n;
}

static long long rb_exists(const char *name) {
    char k[600];
    size_t n = rb_key(name, "", k, sizeof k);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS %b", k, n));
}

static long long rb_del(const char *name) {
    char k[600];
    size_t n = rb_key(name, "", k, sizeof k);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %b", k, n));
}

/* 1 and the value of field of hash key (a literal key), or 0. */
static int rb_hget_raw(const char *key, const char *field, char *out, size_t cap) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "HGET %s %s", key, field);
    int ok = r != NULL && r->type == REDIS_REPLY_STRING;
    out[0] = '\0';
    if (ok) snprintf(out, cap, "%.*s", (int)r->len, r->str);
    if (r != NULL) freeReplyObject(r);
    return ok;
}

static int rb_hget(const char *name, const char *field, char *out, size_t cap) {
    char k[600];
    rb_key(name, "", k, sizeof k);
    return rb_hget_raw(k, field, out, cap);
}

/* The robust marker: "held", "notrecoverable", or "" when absent. */
static void rb_state(const char *name, char *out, size_t cap) {
    char k[600];
    size_t n = rb_key(name, ":state", k, sizeof k);
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET %b", k, n);
    out[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_STRING) snprintf(out, cap, "%.*s", (int)r->len, r->str);
    else if (r == NULL || r->type != REDIS_REPLY_NIL) snprintf(out, cap, "?");
    if (r != NULL) freeReplyObject(r);
}

/* Waits (bounded) until the lock key is gone: 1, or 0 on timeout. */
static int rb_wait_gone(const char *name, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (rb_exists(name) != 0) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(5);
    }
    return 1;
}

/* robust_state from dlock_lock_info (default client), or -1. */
static int rb_info_state(const char *name) {
    dlock_lock_info_t info;
    if (dlock_lock_info(NULL, name, &info) != 0) return -1;
    return info.robust_state;
}

/* ========================================================================
 * Common workers
 * ====================================================================== */

/* A holder: opens its own mutex (or uses the shared object m), locks, says
 * so and then, by `how`:
 *   HOLD_KILL  waits to be killed (SIGKILL);
 *   HOLD_EXIT  waits for `go`, then calls exit() while holding it;
 *   HOLD_TEXIT pthread_exit()s while holding it (a thread holder), after
 *              `go` if texit_go is set;
 *   HOLD_UNLOCK waits for `go`, then unlocks (want unlock_want). */
enum { HOLD_KILL, HOLD_EXIT, HOLD_TEXIT, HOLD_UNLOCK };
typedef struct rb_holder {
    const char *name;
    dlock_mutex_t *m; /* shared object (threads), or NULL */
    int robust;
    unsigned lease;
    int how, texit_go;
    rb_lost *lost;
    int locked, go;
    int lock_rc, unlock_rc, unlock_want;
    uint64_t fence;
    double t_locked, t_exit;
} rb_holder;

static dlock_mutex_t rb_exit_mutex; /* static: still reachable at exit() */

/* LeakSanitizer's hook: a child that calls exit() on purpose (to show the
 * library's release at exit) skips the leak check.  That check would scan
 * the heap the child inherited from this process without the stacks of
 * this process's other threads, and so report their objects, or anything
 * a failed earlier test left behind, as the child's leaks.  This process's
 * own check at the end still runs. */
static volatile sig_atomic_t rb_exiting_child;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) {
    return rb_exiting_child;
}

static int rb_holder_main(void *p) {
    rb_holder *h = p;
    dlock_mutex_t own, *m = h->m;
    int rc;
    if (m == NULL) {
        m = h->how == HOLD_EXIT ? &rb_exit_mutex : &own;
        if ((rc = rb_open(m, h->name, h->robust, h->lease, h->lost, NULL)) != 0) {
            h->lock_rc = rc;
            dlt_flag_set(&h->locked, 1);
            return DLT_CK_FAIL("rb_open", rc, 0);
        }
    }
    if (h->lost != NULL) h->lost->obj = m;
    h->lock_rc = dlock_mutex_lock(m);
    h->t_locked = dlt_now();
    h->fence = dlock_mutex_fence(m);
    dlt_flag_set(&h->locked, 1);
    DLT_CK(h->lock_rc, 0);
    DLT_CK(dlock_mutex_holds(m), 1);
    DLT_CKT(h->fence > 0);
    switch (h->how) {
    case HOLD_KILL:
        dlt_flag_wait(&h->go, 1, DLT_JOIN_MS); /* killed long before */
        return 99;
    case HOLD_EXIT:
        DLT_CKT(dlt_flag_wait(&h->go, 1, DLT_JOIN_MS));
        h->t_exit = dlt_now();
        rb_exiting_child = 1;
        exit(0); /* the library releases the lock at exit */
    case HOLD_TEXIT:
        if (h->texit_go) DLT_CKT(dlt_flag_wait(&h->go, 1, DLT_JOIN_MS));
        h->t_exit = dlt_now();
        pthread_exit(NULL); /* holding it */
    default:
        DLT_CKT(dlt_flag_wait(&h->go, 1, DLT_JOIN_MS));
        h->unlock_rc = dlock_mutex_unlock(m);
        DLT_CK(h->unlock_rc, h->unlock_want);
        if (m == &own) DLT_CK(dlock_mutex_destroy(m), 0);
        return 0;
    }
}

static void rb_holder_init(rb_holder *h, const char *name, int robust, unsigned lease, int how) {
    memset(h, 0, sizeof *h);
    h->name = name;
    h->robust = robust;
    h->lease = lease;
    h->how = how;
    h->lock_rc = h->unlock_rc = -1;
}

/* An acquirer: waits for `go` (if asked to), takes the lock by `mode`
 * (lock, trylock, timedlock with a 5 s deadline) and checks the result
 * against `want`.  When it got the lock (0 or EOWNERDEAD) it checks
 * holds() and the fence, then by `then`:
 *   THEN_CONSISTENT  consistent (0 after EOWNERDEAD, then EINVAL when
 *                    called again; EINVAL after a plain 0), unlock 0;
 *   THEN_UNLOCK      unlock without consistent (want 0).
 * With `hold` set it first holds the lock until `release`. */
enum { MODE_LOCK, MODE_TRY, MODE_TIMED };
enum { THEN_CONSISTENT, THEN_UNLOCK };
typedef struct rb_acq {
    const char *name;
    dlock_mutex_t *m; /* shared object (threads), or NULL */
    int robust;
    unsigned lease;
    int mode, want, then;
    int use_go, hold;
    int ready, go, got, release, done;
    int rc, holds, cons_rc, cons2_rc, unlock_rc;
    uint64_t fence;
    double t_start, t_acq;
    char err[200];
} rb_acq;

static void rb_acq_init(rb_acq *a, const char *name, int robust, unsigned lease, int mode, int want, int then) {
    memset(a, 0, sizeof *a);
    a->name = name;
    a->robust = robust;
    a->lease = lease;
    a->mode = mode;
    a->want = want;
    a->then = then;
    a->rc = a->cons_rc = a->cons2_rc = a->unlock_rc = -1;
}

static int rb_take(dlock_mutex_t *m, int mode) {
    struct timespec ts;
    switch (mode) {
    case MODE_TRY: return dlock_mutex_trylock(m);
    case MODE_TIMED:
        ts = dlt_abs_in(CLOCK_REALTIME, 5000);
        return dlock_mutex_timedlock(m, &ts);
    default: return dlock_mutex_lock(m);
    }
}

static int rb_acq_main(void *p) {
    rb_acq *a = p;
    dlock_mutex_t own, *m = a->m;
    if (m == NULL) {
        m = &own;
        DLT_CK(rb_open(m, a->name, a->robust, a->lease, NULL, NULL), 0);
    }
    dlt_flag_set(&a->ready, 1);
    if (a->use_go) DLT_CKT(dlt_flag_wait(&a->go, 1, DLT_JOIN_MS));
    a->t_start = dlt_now();
    a->rc = rb_take(m, a->mode);
    a->t_acq = dlt_now();
    if (a->rc != 0) snprintf(a->err, sizeof a->err, "%s", dlock_last_error());
    a->holds = dlock_mutex_holds(m);
    a->fence = dlock_mutex_fence(m);
    dlt_flag_set(&a->got, 1);
    DLT_CK(a->rc, a->want);
    if (a->rc == 0 || a->rc == EOWNERDEAD) {
        DLT_CK(a->holds, 1);
        DLT_CKT(a->fence > 0);
        if (a->hold) DLT_CKT(dlt_flag_wait(&a->release, 1, DLT_JOIN_MS));
        if (a->then == THEN_UNLOCK) {
            a->unlock_rc = dlock_mutex_unlock(m);
            DLT_CK(a->unlock_rc, 0);
        } else {
            a->cons_rc = dlock_mutex_consistent(m);
            DLT_CK(a->cons_rc, a->rc == EOWNERDEAD ? 0 : EINVAL);
            a->cons2_rc = dlock_mutex_consistent(m); /* no longer inconsistent */
            DLT_CK(a->cons2_rc, EINVAL);
            DLT_CK(dlock_mutex_holds(m), 1);
            a->unlock_rc = dlock_mutex_unlock(m);
            DLT_CK(a->unlock_rc, 0);
        }
        DLT_CK(dlock_mutex_holds(m), 0);
        DLT_CK(dlock_mutex_unlock(m), EPERM);
    } else {
        DLT_CK(a->holds, 0);
        DLT_CK(a->fence, 0);
    }
    dlt_flag_set(&a->done, 1);
    if (m == &own) DLT_CK(dlock_mutex_destroy(m), 0);
    return 0;
}

/* One acquirer run to completion: its result (0 when all its checks held). */
static int rb_acq_run(int proc, const char *name, dlock_mutex_t *shared, int robust, unsigned lease, int mode,
                      int want, int then, rb_acq *out) {
    dlt_task t;
    rb_acq_init(out, name, robust, lease, mode, want, then);
    out->m = proc ? NULL : shared;
    dlt_task_start(&t, proc, rb_acq_main, out);
    return dlt_task_join(&t, DLT_JOIN_MS);
}

/* Spawns a holder process (HOLD_KILL) and waits until it holds the lock. */
static int rb_killable_holder(rb_holder *h, dlt_task *t, const char *name, int robust, unsigned lease) {
    rb_holder_init(h, name, robust, lease, HOLD_KILL);
    dlt_task_start(t, DLT_PROC, rb_holder_main, h);
    return dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0;
}

/* ========================================================================
 * 1. Robust mutexes
 * ====================================================================== */

/* A robust holder process is SIGKILLed while holding (lease 500 ms): the
 * next acquirer -- another process or a thread, by lock, trylock or
 * timedlock -- gets EOWNERDEAD after the lease, holds the lock with a
 * newer fence, makes it consistent and unlocks; the acquirer after it
 * gets 0. */
static void test_robust_holder_killed(void) {
    static const char *name = "rb/killed";
    static const struct {
        int proc, mode;
    } rounds[] = {
        { DLT_PROC, MODE_LOCK }, { DLT_PROC, MODE_TRY }, { DLT_PROC, MODE_TIMED },
        { DLT_THREAD, MODE_LOCK }, { DLT_THREAD, MODE_TRY }, { DLT_THREAD, MODE_TIMED },
    };
    rb_holder *h = DLT_SHM_NEW(rb_holder, 1);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 3);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    char st[32];
    size_t i;

    DLT_ASSERT_ERR(rb_open(&m, name, 1, 500, NULL, NULL), 0);
    for (i = 0; i < sizeof rounds / sizeof rounds[0]; i++) {
        dlt_task th;
        double t_kill;
        fprintf(stderr, "  round %zu: %s, %s\n", i, rounds[i].proc ? "process" : "thread",
                rounds[i].mode == MODE_LOCK ? "lock" : rounds[i].mode == MODE_TRY ? "trylock" : "timedlock");
        CU_ASSERT_TRUE_FATAL(rb_killable_holder(h, &th, name, 1, 500));
        rb_state(name, st, sizeof st);
        CU_ASSERT_STRING_EQUAL(st, "held");
        DLT_ASSERT_INT_EQ(rb_info_state(name), 1);
        kill(th.pid, SIGKILL);
        t_kill = dlt_now();
        DLT_ASSERT_INT_EQ(dlt_task_join(&th, 5000), 128 + SIGKILL);
        /* trylock does not wait: let the lease run out first. */
        if (rounds[i].mode == MODE_TRY) CU_ASSERT_TRUE(rb_wait_gone(name, 3000));
        DLT_ASSERT_INT_EQ(rb_acq_run(rounds[i].proc, name, &m, 1, 500, rounds[i].mode, EOWNERDEAD,
                                     THEN_CONSISTENT, &a[0]), 0);
        DLT_ASSERT_ERR(a[0].rc, EOWNERDEAD);
        DLT_ASSERT_INT_EQ(a[0].holds, 1);
        CU_ASSERT_TRUE(a[0].fence > h->fence);
        DLT_ASSERT_ERR(a[0].cons_rc, 0);
        DLT_ASSERT_ERR(a[0].unlock_rc, 0);
        /* It waited for the lease (the key was not released), not longer
         * than the lease plus about a round trip. */
        CU_ASSERT_TRUE(a[0].t_acq - t_kill < 0.5 + 1.0);
        if (rounds[i].mode != MODE_TRY) CU_ASSERT_TRUE(a[0].t_acq - h->t_locked > 0.3);
        /* Made consistent: the marker is gone, the next acquirers get 0. */
        rb_state(name, st, sizeof st);
        CU_ASSERT_STRING_EQUAL(st, "");
        DLT_ASSERT_INT_EQ(rb_info_state(name), 0);
        DLT_ASSERT_INT_EQ(rb_acq_run(DLT_PROC, name, NULL, 1, 500, rounds[i].mode, 0, THEN_CONSISTENT, &a[1]), 0);
        DLT_ASSERT_ERR(a[1].rc, 0);
        CU_ASSERT_TRUE(a[1].fence > a[0].fence);
        DLT_ASSERT_INT_EQ(rb_acq_run(DLT_THREAD, name, &m, 1, 500, rounds[i].mode, 0, THEN_CONSISTENT, &a[2]), 0);
        DLT_ASSERT_ERR(a[2].rc, 0);
        CU_ASSERT_TRUE(a[2].fence > a[1].fence);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(h, 1);
    DLT_SHM_FREE(a, 3);
}

/* A thread that exits holding a robust lock (pthread_exit, no unlock):
 * the lock is not released and no longer renewed, so it expires; the next
 * acquirer -- a thread of the same process, or another process -- gets
 * EOWNERDEAD after the lease. */
static void test_robust_thread_exit(void) {
    static const char *name = "rb/texit";
    rb_holder *h = DLT_SHM_NEW(rb_holder, 2);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 3);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    dlt_task tp, th, ta;
    long long pttl;
    char k[600];
    size_t kn = rb_key(name, "", k, sizeof k);

    DLT_ASSERT_ERR(rb_open(&m, name, 1, 500, NULL, NULL), 0);
    /* The process acquirer of the second round, forked before any thread. */
    rb_acq_init(&a[2], name, 1, 500, MODE_LOCK, EOWNERDEAD, THEN_CONSISTENT);
    a[2].use_go = 1;
    dlt_task_start(&tp, DLT_PROC, rb_acq_main, &a[2]);
    CU_ASSERT_TRUE(dlt_flag_wait(&a[2].ready, 1, 10000));

    /* Round 1: the next acquirer is another thread of this process. */
    rb_holder_init(&h[0], name, 1, 500, HOLD_TEXIT);
    h[0].m = &m;
    dlt_task_start(&th, DLT_THREAD, rb_holder_main, &h[0]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0); /* pthread_exit: rc stays 0 */
    DLT_ASSERT_ERR(h[0].lock_rc, 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    /* Not released: the key is still there, with what is left of its lease. */
    DLT_ASSERT_INT_EQ(rb_exists(name), 1);
    pttl = dlt_reply_int(dlt_redis_cmd(&dlt_server, "PTTL %b", k, kn));
    CU_ASSERT_TRUE(pttl > 0 && pttl <= 500);
    rb_acq_init(&a[0], name, 1, 500, MODE_LOCK, EOWNERDEAD, THEN_CONSISTENT);
    a[0].m = &m;
    dlt_task_start(&ta, DLT_THREAD, rb_acq_main, &a[0]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&ta, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(a[0].rc, EOWNERDEAD);
    CU_ASSERT_TRUE(a[0].fence > h[0].fence);
    CU_ASSERT_TRUE(a[0].t_acq - h[0].t_exit > 0.25); /* waited for the lease */
    CU_ASSERT_TRUE(a[0].t_acq - h[0].t_exit < 0.5 + 1.0);
    fprintf(stderr, "  thread after thread exit: EOWNERDEAD %.3f s after the exit\n", a[0].t_acq - h[0].t_exit);

    /* Round 2: the next acquirer is another process. */
    rb_holder_init(&h[1], name, 1, 500, HOLD_TEXIT);
    h[1].m = &m;
    dlt_task_start(&th, DLT_THREAD, rb_holder_main, &h[1]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(h[1].lock_rc, 0);
    DLT_ASSERT_INT_EQ(rb_exists(name), 1);
    dlt_flag_set(&a[2].go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tp, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(a[2].rc, EOWNERDEAD);
    CU_ASSERT_TRUE(a[2].fence > h[1].fence);
    CU_ASSERT_TRUE(a[2].t_acq - h[1].t_exit > 0.25);
    CU_ASSERT_TRUE(a[2].t_acq - h[1].t_exit < 0.5 + 1.0);
    fprintf(stderr, "  process after thread exit: EOWNERDEAD %.3f s after the exit\n", a[2].t_acq - h[1].t_exit);

    /* Round 3: a thread of this process is already waiting (locally,
     * behind its sibling's hold) when the holder thread exits. */
    rb_holder_init(&h[0], name, 1, 500, HOLD_TEXIT);
    h[0].m = &m;
    h[0].texit_go = 1;
    dlt_task_start(&th, DLT_THREAD, rb_holder_main, &h[0]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h[0].locked, 1, 10000) && h[0].lock_rc == 0);
    rb_acq_init(&a[0], name, 1, 500, MODE_LOCK, EOWNERDEAD, THEN_CONSISTENT);
    a[0].m = &m;
    dlt_task_start(&ta, DLT_THREAD, rb_acq_main, &a[0]);
    CU_ASSERT_TRUE(dlt_flag_wait(&a[0].ready, 1, 10000));
    dlt_sleep_ms(300); /* waiting now; the holder's lease is being renewed */
    DLT_ASSERT_INT_EQ(dlt_flag_get(&a[0].got), 0);
    dlt_flag_set(&h[0].go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&ta, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(a[0].rc, EOWNERDEAD);
    CU_ASSERT_TRUE(a[0].fence > h[0].fence);
    CU_ASSERT_TRUE(a[0].t_acq - h[0].t_exit > 0.1);
    CU_ASSERT_TRUE(a[0].t_acq - h[0].t_exit < 0.5 + 1.0);
    fprintf(stderr, "  thread waiting at the exit: EOWNERDEAD %.3f s after it\n", a[0].t_acq - h[0].t_exit);

    /* Consistent again: a thread gets 0. */
    DLT_ASSERT_INT_EQ(rb_acq_run(DLT_THREAD, name, &m, 1, 500, MODE_LOCK, 0, THEN_CONSISTENT, &a[1]), 0);
    DLT_ASSERT_ERR(a[1].rc, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(h, 2);
    DLT_SHM_FREE(a, 3);
}

/* A process that calls exit() holding a robust lock: the library releases
 * it as "owner died", so the next acquirer -- a process already waiting, or
 * a thread -- gets EOWNERDEAD at once, not after the (10 s) lease.  A
 * non-robust lock released at exit gives the next acquirer 0. */
static void test_robust_exit_releases_dead(void) {
    static const char *name = "rb/exit";
    rb_holder *h = DLT_SHM_NEW(rb_holder, 3);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 3);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    dlt_task th, ta;
    char st[32];

    /* A process waiting in lock when the holder exits. */
    rb_holder_init(&h[0], name, 1, 10000, HOLD_EXIT);
    dlt_task_start(&th, DLT_PROC, rb_holder_main, &h[0]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h[0].locked, 1, 10000) && h[0].lock_rc == 0);
    rb_acq_init(&a[0], name, 1, 10000, MODE_LOCK, EOWNERDEAD, THEN_CONSISTENT);
    dlt_task_start(&ta, DLT_PROC, rb_acq_main, &a[0]);
    CU_ASSERT_TRUE(dlt_flag_wait(&a[0].ready, 1, 10000));
    dlt_sleep_ms(150); /* it is waiting now */
    DLT_ASSERT_INT_EQ(dlt_flag_get(&a[0].got), 0);
    dlt_flag_set(&h[0].go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&ta, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(a[0].rc, EOWNERDEAD);
    CU_ASSERT_TRUE(a[0].fence > h[0].fence);
    CU_ASSERT_TRUE(a[0].t_acq - h[0].t_exit < 1.0);
    fprintf(stderr, "  waiting process: EOWNERDEAD %.3f s after the holder's exit()\n", a[0].t_acq - h[0].t_exit);

    /* A thread that comes after the exit: EOWNERDEAD at once. */
    rb_holder_init(&h[1], name, 1, 10000, HOLD_EXIT);
    dlt_task_start(&th, DLT_PROC, rb_holder_main, &h[1]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h[1].locked, 1, 10000) && h[1].lock_rc == 0);
    dlt_flag_set(&h[1].go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 0);
    DLT_ASSERT_INT_EQ(rb_exists(name), 0); /* released, not left to expire */
    rb_state(name, st, sizeof st);
    CU_ASSERT_STRING_EQUAL(st, "held");
    DLT_ASSERT_ERR(rb_open(&m, name, 1, 10000, NULL, NULL), 0);
    DLT_ASSERT_INT_EQ(rb_acq_run(DLT_THREAD, name, &m, 1, 10000, MODE_TRY, EOWNERDEAD, THEN_CONSISTENT, &a[1]), 0);
    DLT_ASSERT_ERR(a[1].rc, EOWNERDEAD);
    CU_ASSERT_TRUE(a[1].t_acq - a[1].t_start < 0.5);

    /* Not robust: released plainly at exit, the next acquirer gets 0 at once. */
    rb_holder_init(&h[2], "rb/exit-plain", 0, 10000, HOLD_EXIT);
    dlt_task_start(&th, DLT_PROC, rb_holder_main, &h[2]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h[2].locked, 1, 10000) && h[2].lock_rc == 0);
    dlt_flag_set(&h[2].go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 0);
    DLT_ASSERT_INT_EQ(rb_exists("rb/exit-plain"), 0);
    DLT_ASSERT_INT_EQ(rb_acq_run(DLT_PROC, "rb/exit-plain", NULL, 0, 10000, MODE_TRY, 0, THEN_CONSISTENT, &a[2]), 0);
    DLT_ASSERT_ERR(a[2].rc, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(h, 3);
    DLT_SHM_FREE(a, 3);
}

/* A caller, on request, runs lock / trylock / timedlock on a robust
 * mutex of its own and reports each result and how long it took. */
typedef struct rb_nr {
    const char *name;
    dlock_mutex_t *m;
    int rc[3];
    double dt[3];
    int holds;
} rb_nr;

static int rb_nr_main(void *p) {
    rb_nr *n = p;
    dlock_mutex_t own, *m = n->m;
    int i;
    if (m == NULL) {
        m = &own;
        DLT_CK(rb_open(m, n->name, 1, 500, NULL, NULL), 0);
    }
    for (i = 0; i < 3; i++) {
        double t0 = dlt_now();
        n->rc[i] = rb_take(m, i == 0 ? MODE_LOCK : i == 1 ? MODE_TRY : MODE_TIMED);
        n->dt[i] = dlt_now() - t0;
        DLT_CK(n->rc[i], ENOTRECOVERABLE);
        DLT_CKT(n->dt[i] < 0.5); /* at once, not after a wait */
    }
    n->holds = dlock_mutex_holds(m);
    DLT_CK(n->holds, 0);
    DLT_CK(dlock_mutex_unlock(m), EPERM);
    DLT_CK(dlock_mutex_consistent(m), EINVAL);
    if (m == &own) DLT_CK(dlock_mutex_destroy(m), 0);
    return 0;
}

/* An acquirer that got EOWNERDEAD unlocks without consistent: every
 * caller on every process then gets ENOTRECOVERABLE from lock, trylock and
 * timedlock at once -- also one that was already waiting -- until
 * dlock_break(DLOCK_BREAK_RESET); then lock gives 0 again. */
static void test_robust_notrecoverable(void) {
    static const char *name = "rb/nr";
    rb_holder *h = DLT_SHM_NEW(rb_holder, 1);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 4);
    rb_nr *n = DLT_SHM_NEW(rb_nr, 4);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    dlt_task th, ta, tw, tn[4];
    char st[32];
    int held = -1, i;

    /* A holder that exits: the lock is left "owner died". */
    rb_holder_init(h, name, 1, 10000, HOLD_EXIT);
    dlt_task_start(&th, DLT_PROC, rb_holder_main, h);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0);
    dlt_flag_set(&h->go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 0);
    /* The next acquirer gets EOWNERDEAD and holds it for a while... */
    rb_acq_init(&a[0], name, 1, 2000, MODE_LOCK, EOWNERDEAD, THEN_UNLOCK);
    a[0].hold = 1;
    dlt_task_start(&ta, DLT_PROC, rb_acq_main, &a[0]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&a[0].got, 1, 10000));
    DLT_ASSERT_ERR(a[0].rc, EOWNERDEAD);
    /* ...while another process waits in lock... */
    rb_acq_init(&a[1], name, 1, 2000, MODE_LOCK, ENOTRECOVERABLE, THEN_CONSISTENT);
    dlt_task_start(&tw, DLT_PROC, rb_acq_main, &a[1]);
    CU_ASSERT_TRUE(dlt_flag_wait(&a[1].ready, 1, 10000));
    dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&a[1].got), 0);
    /* ...and unlocks without consistent. */
    dlt_flag_set(&a[0].release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&ta, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(a[0].unlock_rc, 0);
    rb_state(name, st, sizeof st);
    CU_ASSERT_STRING_EQUAL(st, "notrecoverable");
    DLT_ASSERT_INT_EQ(rb_info_state(name), 2);
    /* The waiter wakes with ENOTRECOVERABLE. */
    DLT_ASSERT_INT_EQ(dlt_task_join(&tw, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(a[1].rc, ENOTRECOVERABLE);
    CU_ASSERT_TRUE(a[1].t_acq - a[0].t_acq < 3.0);

    /* Every later caller, 2 processes and 2 threads: lock, trylock,
     * timedlock, each ENOTRECOVERABLE at once.  Processes first. */
    DLT_ASSERT_ERR(rb_open(&m, name, 1, 500, NULL, NULL), 0);
    for (i = 0; i < 4; i++) {
        n[i].name = name;
        n[i].m = i < 2 ? NULL : &m;
        dlt_task_start(&tn[i], i < 2 ? DLT_PROC : DLT_THREAD, rb_nr_main, &n[i]);
    }
    for (i = 0; i < 4; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&tn[i], DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(n[i].rc[0], ENOTRECOVERABLE);
        DLT_ASSERT_ERR(n[i].rc[1], ENOTRECOVERABLE);
        DLT_ASSERT_ERR(n[i].rc[2], ENOTRECOVERABLE);
    }
    /* Still so a while later: it does not expire. */
    dlt_sleep_ms(600);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOTRECOVERABLE);

    /* The administrator resets it: usable again, and not EOWNERDEAD. */
    DLT_ASSERT_ERR(dlock_break(NULL, name, DLOCK_BREAK_RESET, &held), 0);
    DLT_ASSERT_INT_EQ(held, 0);
    rb_state(name, st, sizeof st);
    CU_ASSERT_STRING_EQUAL(st, "");
    DLT_ASSERT_INT_EQ(rb_info_state(name), 0);
    DLT_ASSERT_INT_EQ(rb_acq_run(DLT_PROC, name, NULL, 1, 500, MODE_LOCK, 0, THEN_CONSISTENT, &a[2]), 0);
    DLT_ASSERT_ERR(a[2].rc, 0);
    DLT_ASSERT_INT_EQ(rb_acq_run(DLT_THREAD, name, &m, 1, 500, MODE_TIMED, 0, THEN_CONSISTENT, &a[3]), 0);
    DLT_ASSERT_ERR(a[3].rc, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(h, 1);
    DLT_SHM_FREE(a, 4);
    DLT_SHM_FREE(n, 4);
}

/* A holder (process or thread) whose robust lock is broken with
 * DLOCK_BREAK_OWNERDEAD: its hold is lost (holds() turns 0 within about
 * the lease, its handler runs, unlock gives EPERM) and the next acquirer
 * gets EOWNERDEAD. */
typedef struct rb_victim {
    const char *name;
    dlock_mutex_t *m;
    rb_lost *lost;
    int locked, broken;
    int lock_rc, unlock_rc;
    double t_gone; /* when holds() turned 0 */
} rb_victim;

static int rb_victim_main(void *p) {
    rb_victim *v = p;
    dlock_mutex_t own, *m = v->m;
    double end;
    if (m == NULL) {
        m = &own;
        DLT_CK(rb_open(m, v->name, 1, 600, v->lost, NULL), 0);
    }
    v->lost->obj = m;
    v->lock_rc = dlock_mutex_lock(m);
    dlt_flag_set(&v->locked, 1);
    DLT_CK(v->lock_rc, 0);
    DLT_CKT(dlt_flag_wait(&v->broken, 1, DLT_JOIN_MS));
    end = dlt_now() + 3.0;
    while (dlock_mutex_holds(m) && dlt_now() < end) dlt_sleep_ms(5);
    v->t_gone = dlt_now();
    DLT_CK(dlock_mutex_holds(m), 0);
    DLT_CK(dlock_mutex_fence(m), 0);
    v->unlock_rc = dlock_mutex_unlock(m);
    DLT_CK(v->unlock_rc, EPERM);
    if (m == &own) DLT_CK(dlock_mutex_destroy(m), 0);
    return 0;
}

static void test_robust_break_ownerdead(void) {
    static const char *names[2] = { "rb/break-p", "rb/break-t" };
    rb_victim *v = DLT_SHM_NEW(rb_victim, 2);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 4);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    dlt_task tv;
    int k, held, rd[2], bad;

    DLT_ASSERT_ERR(rb_open(&m, names[1], 1, 600, NULL, NULL), 0);
    for (k = 0; k < 2; k++) {
        int proc = k == 0;
        double t_break;
        v[k].name = names[k];
        v[k].lost = rb_lost_new(names[k], &rd[k]);
        /* The thread victim uses its own object (with the handler). */
        dlt_task_start(&tv, proc ? DLT_PROC : DLT_THREAD, rb_victim_main, &v[k]);
        CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&v[k].locked, 1, 10000) && v[k].lock_rc == 0);
        held = -1;
        DLT_ASSERT_ERR(dlock_break(NULL, names[k], DLOCK_BREAK_OWNERDEAD, &held), 0);
        t_break = dlt_now();
        DLT_ASSERT_INT_EQ(held, 1);
        dlt_flag_set(&v[k].broken, 1);
        /* The next acquirer: EOWNERDEAD (a process for the process victim,
         * a thread of the victim's process for the thread victim). */
        DLT_ASSERT_INT_EQ(rb_acq_run(proc, names[k], &m, 1, 600, MODE_LOCK, EOWNERDEAD, THEN_CONSISTENT, &a[k]), 0);
        DLT_ASSERT_ERR(a[k].rc, EOWNERDEAD);
        DLT_ASSERT_INT_EQ(dlt_task_join(&tv, DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(v[k].unlock_rc, EPERM);
        CU_ASSERT_TRUE(v[k].t_gone - t_break < 0.6 + 0.5);
        DLT_ASSERT_INT_EQ(rb_lost_bytes(rd[k], 2000, 200, &bad), 1);
        DLT_ASSERT_INT_EQ(bad, 0);
        fprintf(stderr, "  %s victim: hold gone %.3f s after the break; next acquirer waited %.3f s\n",
                proc ? "process" : "thread", v[k].t_gone - t_break, a[k].t_acq - a[k].t_start);
        /* Consistent again: the next one gets 0. */
        DLT_ASSERT_INT_EQ(rb_acq_run(DLT_PROC, names[k], NULL, 1, 600, MODE_TRY, 0, THEN_CONSISTENT, &a[2 + k]), 0);
        DLT_ASSERT_ERR(a[2 + k].rc, 0);
        rb_lost_free(v[k].lost, rd[k]);
    }
    /* A break of a lock nobody holds says so. */
    held = -1;
    DLT_ASSERT_ERR(dlock_break(NULL, "rb/break-none", DLOCK_BREAK_OWNERDEAD, &held), 0);
    DLT_ASSERT_INT_EQ(held, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(v, 2);
    DLT_SHM_FREE(a, 4);
}

/* dlock_mutex_consistent outside the inconsistent state is EINVAL: not
 * held, held after a plain acquire, a second time, from a thread that does
 * not hold it, on a non-robust mutex. */
typedef struct rb_cons {
    const char *name;
    int step, done; /* thread steps, see rb_cons_other */
    dlock_mutex_t *m;
    int rc;
} rb_cons;

static int rb_cons_other(void *p) {
    rb_cons *c = p;
    c->rc = dlock_mutex_consistent(c->m); /* held inconsistent by another thread */
    DLT_CK(c->rc, EINVAL);
    DLT_CK(dlock_mutex_holds(c->m), 0);
    DLT_CK(dlock_mutex_unlock(c->m), EPERM);
    return 0;
}

static int rb_cons_main(void *p) {
    rb_cons *c = p;
    dlock_mutex_t m, plain;
    char other_name[128];
    DLT_CK(rb_open(&m, c->name, 1, 500, NULL, NULL), 0);
    snprintf(other_name, sizeof other_name, "%s-plain", c->name);
    DLT_CK(rb_open(&plain, other_name, 0, 500, NULL, NULL), 0);
    DLT_CK(dlock_mutex_consistent(&m), EINVAL);      /* not held */
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlock_mutex_consistent(&m), EINVAL);      /* held, consistent */
    DLT_CK(dlock_mutex_holds(&m), 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_consistent(&m), EINVAL);      /* unlocked */
    DLT_CK(dlock_mutex_lock(&plain), 0);
    DLT_CK(dlock_mutex_consistent(&plain), EINVAL);  /* not robust */
    DLT_CK(dlock_mutex_unlock(&plain), 0);
    DLT_CK(dlock_mutex_destroy(&plain), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_robust_consistent_einval(void) {
    static const char *name = "rb/cons";
    rb_cons *c = DLT_SHM_NEW(rb_cons, 3);
    rb_holder *h = DLT_SHM_NEW(rb_holder, 1);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    dlt_task t[2], th, to;
    int i;

    c[0].name = "rb/cons-p";
    c[1].name = "rb/cons-t";
    dlt_task_start(&t[0], DLT_PROC, rb_cons_main, &c[0]);
    dlt_task_start(&t[1], DLT_THREAD, rb_cons_main, &c[1]);
    for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_mutex_consistent(NULL), EINVAL);

    /* EOWNERDEAD here: another thread's consistent is EINVAL (the state is
     * the owner's), the owner's own is 0 once, then EINVAL. */
    rb_holder_init(h, name, 1, 10000, HOLD_EXIT);
    dlt_task_start(&th, DLT_PROC, rb_holder_main, h);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0);
    dlt_flag_set(&h->go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 0);
    DLT_ASSERT_ERR(rb_open(&m, name, 1, 500, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EOWNERDEAD);
    c[2].m = &m;
    dlt_task_start(&to, DLT_THREAD, rb_cons_other, &c[2]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&to, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_mutex_consistent(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_consistent(&m), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_consistent(&m), EINVAL);
    /* The unlock was clean: the next lock is 0. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(c, 3);
    DLT_SHM_FREE(h, 1);
}

/* A STALLED (non-robust) mutex whose holder died: the next acquirer,
 * process or thread, gets 0 after the lease, never EOWNERDEAD; and a
 * robust acquirer of the same name is not told of a death it could not
 * know of (no marker was written). */
static void test_stalled_holder_died(void) {
    static const char *name = "rb/stalled";
    rb_holder *h = DLT_SHM_NEW(rb_holder, 1);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 3);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    char st[32];
    int i;

    DLT_ASSERT_ERR(rb_open(&m, name, 0, 500, NULL, NULL), 0);
    for (i = 0; i < 2; i++) {
        dlt_task th;
        double t_kill;
        CU_ASSERT_TRUE_FATAL(rb_killable_holder(h, &th, name, 0, 500));
        kill(th.pid, SIGKILL);
        t_kill = dlt_now();
        DLT_ASSERT_INT_EQ(dlt_task_join(&th, 5000), 128 + SIGKILL);
        rb_state(name, st, sizeof st);
        CU_ASSERT_STRING_EQUAL(st, "");
        DLT_ASSERT_INT_EQ(rb_info_state(name), 0);
        DLT_ASSERT_INT_EQ(rb_acq_run(i == 0, name, &m, 0, 500, i == 0 ? MODE_LOCK : MODE_TIMED, 0,
                                     THEN_CONSISTENT, &a[i]), 0);
        DLT_ASSERT_ERR(a[i].rc, 0);
        CU_ASSERT_TRUE(a[i].fence > h->fence);
        CU_ASSERT_TRUE(a[i].t_acq - t_kill < 0.5 + 1.0);
    }
    /* Killed again; a robust acquirer of the name afterwards gets 0. */
    {
        dlt_task th;
        CU_ASSERT_TRUE_FATAL(rb_killable_holder(h, &th, name, 0, 500));
        kill(th.pid, SIGKILL);
        DLT_ASSERT_INT_EQ(dlt_task_join(&th, 5000), 128 + SIGKILL);
        DLT_ASSERT_INT_EQ(rb_acq_run(DLT_PROC, name, NULL, 1, 500, MODE_LOCK, 0, THEN_CONSISTENT, &a[2]), 0);
        DLT_ASSERT_ERR(a[2].rc, 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(h, 1);
    DLT_SHM_FREE(a, 3);
}

/* The owner that got EOWNERDEAD dies too, before consistent: by exit()
 * (released "dead") or SIGKILL (its lease runs out).  The next acquirer
 * gets EOWNERDEAD again -- the owner died, it did not unlock -- not
 * ENOTRECOVERABLE; once made consistent, the one after gets 0. */
typedef struct rb_dies {
    const char *name;
    int how; /* HOLD_EXIT or HOLD_KILL */
    int got, go;
    int rc;
    uint64_t fence;
} rb_dies;

static dlock_mutex_t rb_dies_mutex; /* static: still reachable at exit() */

static int rb_dies_main(void *p) {
    rb_dies *d = p;
    DLT_CK(rb_open(&rb_dies_mutex, d->name, 1, 500, NULL, NULL), 0);
    d->rc = dlock_mutex_lock(&rb_dies_mutex);
    d->fence = dlock_mutex_fence(&rb_dies_mutex);
    dlt_flag_set(&d->got, 1);
    DLT_CK(d->rc, EOWNERDEAD);
    DLT_CK(dlock_mutex_holds(&rb_dies_mutex), 1);
    if (d->how == HOLD_EXIT) {
        DLT_CKT(dlt_flag_wait(&d->go, 1, DLT_JOIN_MS));
        rb_exiting_child = 1;
        exit(0); /* inconsistent, never made consistent */
    }
    dlt_flag_wait(&d->go, 1, DLT_JOIN_MS); /* killed long before */
    return 99;
}

static void test_robust_ownerdead_owner_dies(void) {
    static const char *name = "rb/dies";
    static const int hows[2] = { HOLD_EXIT, HOLD_KILL };
    rb_holder *h = DLT_SHM_NEW(rb_holder, 1);
    rb_dies *d = DLT_SHM_NEW(rb_dies, 2);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 4);
    dlt_task th, td;
    char st[32];
    int k;

    for (k = 0; k < 2; k++) {
        rb_holder_init(h, name, 1, 500, HOLD_EXIT);
        dlt_task_start(&th, DLT_PROC, rb_holder_main, h);
        CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0);
        dlt_flag_set(&h->go, 1);
        DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 0);
        d[k].name = name;
        d[k].how = hows[k];
        dlt_task_start(&td, DLT_PROC, rb_dies_main, &d[k]);
        CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&d[k].got, 1, 10000));
        DLT_ASSERT_ERR(d[k].rc, EOWNERDEAD);
        if (hows[k] == HOLD_EXIT) {
            dlt_flag_set(&d[k].go, 1);
            DLT_ASSERT_INT_EQ(dlt_task_join(&td, 10000), 0);
        } else {
            kill(td.pid, SIGKILL);
            DLT_ASSERT_INT_EQ(dlt_task_join(&td, 10000), 128 + SIGKILL);
        }
        rb_state(name, st, sizeof st);
        CU_ASSERT_STRING_EQUAL(st, "held");
        /* A process after the exit, a thread after the kill. */
        DLT_ASSERT_INT_EQ(rb_acq_run(k == 0, name, NULL, 1, 500, MODE_LOCK, EOWNERDEAD, THEN_CONSISTENT,
                                     &a[2 * k]), 0);
        DLT_ASSERT_ERR(a[2 * k].rc, EOWNERDEAD);
        CU_ASSERT_TRUE(a[2 * k].fence > d[k].fence);
        if (hows[k] == HOLD_EXIT) CU_ASSERT_TRUE(a[2 * k].t_acq - a[2 * k].t_start < 0.5);
        DLT_ASSERT_INT_EQ(rb_acq_run(DLT_PROC, name, NULL, 1, 500, MODE_TRY, 0, THEN_CONSISTENT, &a[2 * k + 1]), 0);
        DLT_ASSERT_ERR(a[2 * k + 1].rc, 0);
    }
    DLT_SHM_FREE(h, 1);
    DLT_SHM_FREE(d, 2);
    DLT_SHM_FREE(a, 4);
}

/* ========================================================================
 * 2. Lost leases
 * ====================================================================== */

/* A holder that waits to be told to look again, then checks that it lost
 * the lock: holds() 0, fence 0, fenced_set EPERM, unlock EPERM. */
typedef struct rb_loser {
    const char *name;
    dlock_mutex_t *m;
    int robust;
    unsigned lease;
    rb_lost *lost;
    int locked, look, done;
    int lock_rc, holds, fset_rc, unlock_rc;
    uint64_t fence, fence_after;
    double t_sent, t_locked, t_look;
} rb_loser;

static int rb_loser_main(void *p) {
    rb_loser *l = p;
    dlock_mutex_t own, *m = l->m;
    if (m == NULL) {
        m = &own;
        DLT_CK(rb_open(m, l->name, l->robust, l->lease, l->lost, NULL), 0);
    }
    l->lost->obj = m;
    l->t_sent = dlt_now();
    l->lock_rc = dlock_mutex_lock(m);
    l->t_locked = dlt_now();
    l->fence = dlock_mutex_fence(m);
    dlt_flag_set(&l->locked, 1);
    DLT_CK(l->lock_rc, 0);
    DLT_CKT(dlt_flag_wait(&l->look, 1, DLT_JOIN_MS));
    l->t_look = dlt_now();
    l->holds = dlock_mutex_holds(m);
    l->fence_after = dlock_mutex_fence(m);
    l->fset_rc = dlock_fenced_set(m, "rb:lost:data", "late", 4);
    l->unlock_rc = dlock_mutex_unlock(m);
    DLT_CK(l->holds, 0);
    DLT_CK(l->fence_after, 0);
    DLT_CK(l->fset_rc, EPERM);
    DLT_CK(l->unlock_rc, EPERM);
    dlt_sleep_ms(300); /* time for a second handler call, which must not come */
    dlt_flag_set(&l->done, 1);
    if (m == &own) DLT_CK(dlock_mutex_destroy(m), 0);
    return 0;
}

/* A holder process SIGSTOPped past its lease (400 ms, stopped 1.2 s) while
 * another process takes the lock and writes: after SIGCONT the stopped
 * holder's holds() is 0, its handler ran exactly once, its fenced write
 * and unlock are EPERM, and the new holder still holds the lock. */
static void test_lost_lease_sigstop(void) {
    static const char *name = "rb/stopped";
    rb_loser *l = DLT_SHM_NEW(rb_loser, 1);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 1);
    dlt_task tl, ta;
    char owner1[64], owner2[64], val[64];
    double t_stop;
    int rd, bad;

    l->name = name;
    l->lease = 400;
    l->lost = rb_lost_new(name, &rd);
    rb_acq_init(a, name, 0, 2000, MODE_LOCK, 0, THEN_CONSISTENT);
    a->use_go = 1;
    a->hold = 1;
    dlt_task_start(&ta, DLT_PROC, rb_acq_main, a);
    dlt_task_start(&tl, DLT_PROC, rb_loser_main, l);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&l->locked, 1, 10000) && l->lock_rc == 0);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&a->ready, 1, 10000));
    kill(tl.pid, SIGSTOP);
    t_stop = dlt_now();
    dlt_flag_set(&a->go, 1);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&a->got, 1, 5000));
    DLT_ASSERT_ERR(a->rc, 0);
    CU_ASSERT_TRUE(a->fence > l->fence);
    CU_ASSERT_TRUE(a->t_acq - t_stop < 0.4 + 1.0);
    CU_ASSERT_TRUE(rb_hget(name, "owner", owner1, sizeof owner1));
    DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), ta.pid);
    while (dlt_now() - t_stop < 1.2) dlt_sleep_ms(10);
    kill(tl.pid, SIGCONT);
    dlt_flag_set(&l->look, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tl, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(l->holds, 0);
    DLT_ASSERT_ERR(l->fset_rc, EPERM);
    DLT_ASSERT_ERR(l->unlock_rc, EPERM);
    DLT_ASSERT_INT_EQ(rb_lost_bytes(rd, 1000, 100, &bad), 1);
    DLT_ASSERT_INT_EQ(bad, 0);
    DLT_ASSERT_INT_EQ(l->lost->count, 1);
    /* The new holder is untouched: same owner, and its lease renewed. */
    CU_ASSERT_TRUE(rb_hget(name, "owner", owner2, sizeof owner2));
    CU_ASSERT_STRING_EQUAL(owner1, owner2);
    CU_ASSERT_FALSE(rb_hget_raw("rb:lost:data", "value", val, sizeof val)); /* the late write never landed */
    dlt_flag_set(&a->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&ta, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(a->unlock_rc, 0);
    DLT_ASSERT_INT_EQ(rb_exists(name), 0);
    rb_lost_free(l->lost, rd);
    DLT_SHM_FREE(l, 1);
    DLT_SHM_FREE(a, 1);
}

/* Validity runs out without any refusal: the server is stopped under a
 * holder (process and thread, lease 600 ms).  The handler runs within
 * about the lease -- while the server is still down -- and holds() turns
 * 0; unlock is EPERM. */
static void test_lost_validity_server_down(void) {
    static const char *names[2] = { "rb/down-p", "rb/down-t" };
    rb_loser *l = DLT_SHM_NEW(rb_loser, 2);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    dlt_task t[2];
    double t_down, t_up;
    int rd[2], bad, k;

    for (k = 0; k < 2; k++) {
        l[k].name = names[k];
        l[k].lease = 600;
        l[k].lost = rb_lost_new(names[k], &rd[k]);
    }
    DLT_ASSERT_ERR(rb_open(&m, names[1], 0, 600, l[1].lost, NULL), 0);
    l[1].m = &m;
    dlt_task_start(&t[0], DLT_PROC, rb_loser_main, &l[0]); /* fork before the thread */
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&l[0].locked, 1, 10000) && l[0].lock_rc == 0);
    dlt_task_start(&t[1], DLT_THREAD, rb_loser_main, &l[1]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&l[1].locked, 1, 10000) && l[1].lock_rc == 0);
    t_down = dlt_now();
    CU_ASSERT_FATAL(dlt_redis_stop(&dlt_server) == 0);
    for (k = 0; k < 2; k++) {
        DLT_ASSERT_INT_EQ(rb_lost_bytes(rd[k], 3000, 0, &bad), 1);
        DLT_ASSERT_INT_EQ(bad, 0);
    }
    t_up = dlt_now();
    for (k = 0; k < 2; k++) {
        double dt = l[k].lost->t_first - t_down;
        fprintf(stderr, "  %s holder: handler %.3f s after the server stopped (%.3f s after the acquire)\n",
                k == 0 ? "process" : "thread", dt, l[k].lost->t_first - l[k].t_sent);
        CU_ASSERT_TRUE(l[k].lost->t_first > 0);
        CU_ASSERT_TRUE(dt < 0.6 + 0.3);
        /* Not before the validity could have run out. */
        CU_ASSERT_TRUE(l[k].lost->t_first - l[k].t_sent > 0.6 - 0.1);
        CU_ASSERT_TRUE(l[k].lost->t_first < t_up); /* the server was down the whole time */
        dlt_flag_set(&l[k].look, 1);
    }
    for (k = 0; k < 2; k++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&t[k], DLT_JOIN_MS), 0);
        DLT_ASSERT_INT_EQ(l[k].holds, 0);
        DLT_ASSERT_ERR(l[k].unlock_rc, EPERM);
        DLT_ASSERT_INT_EQ(l[k].lost->count, 1);
    }
    CU_ASSERT_FATAL(dlt_redis_restart(&dlt_server) == 0);
    for (k = 0; k < 2; k++) {
        DLT_ASSERT_INT_EQ(rb_lost_bytes(rd[k], 200, 0, &bad), 0); /* no late second call */
        rb_lost_free(l[k].lost, rd[k]);
    }
    /* Usable again once the server is back. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(l, 2);
}

/* A robust holder process SIGSTOPped past its lease (the lease "ran out
 * without unlock"): the next acquirer gets EOWNERDEAD, makes the state
 * consistent and keeps the lock; the woken holder has lost it (holds 0,
 * handler once, unlock EPERM) and its late unlock changes nothing: the
 * acquirer's unlock is 0 and the one after gets 0. */
static void test_robust_lease_lost_stopped(void) {
    static const char *name = "rb/stopped-robust";
    rb_loser *l = DLT_SHM_NEW(rb_loser, 1);
    rb_acq *a = DLT_SHM_NEW(rb_acq, 2);
    dlt_task tl, ta;
    char owner1[64], owner2[64], st[32];
    double t_stop;
    int rd, bad;

    l->name = name;
    l->robust = 1;
    l->lease = 400;
    l->lost = rb_lost_new(name, &rd);
    rb_acq_init(&a[0], name, 1, 2000, MODE_LOCK, EOWNERDEAD, THEN_CONSISTENT);
    a[0].use_go = 1;
    a[0].hold = 1;
    dlt_task_start(&ta, DLT_PROC, rb_acq_main, &a[0]);
    dlt_task_start(&tl, DLT_PROC, rb_loser_main, l);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&l->locked, 1, 10000) && l->lock_rc == 0);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&a[0].ready, 1, 10000));
    kill(tl.pid, SIGSTOP);
    t_stop = dlt_now();
    dlt_flag_set(&a[0].go, 1);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&a[0].got, 1, 5000));
    DLT_ASSERT_ERR(a[0].rc, EOWNERDEAD);
    CU_ASSERT_TRUE(a[0].fence > l->fence);
    CU_ASSERT_TRUE(a[0].t_acq - t_stop < 0.4 + 1.0);
    CU_ASSERT_TRUE(rb_hget(name, "owner", owner1, sizeof owner1));
    while (dlt_now() - t_stop < 1.2) dlt_sleep_ms(10);
    kill(tl.pid, SIGCONT);
    dlt_flag_set(&l->look, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tl, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(l->holds, 0);
    DLT_ASSERT_ERR(l->unlock_rc, EPERM);
    DLT_ASSERT_INT_EQ(rb_lost_bytes(rd, 1000, 100, &bad), 1);
    DLT_ASSERT_INT_EQ(bad, 0);
    CU_ASSERT_TRUE(rb_hget(name, "owner", owner2, sizeof owner2));
    CU_ASSERT_STRING_EQUAL(owner1, owner2);
    rb_state(name, st, sizeof st);
    CU_ASSERT_STRING_EQUAL(st, "held"); /* the acquirer holds it */
    dlt_flag_set(&a[0].release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&ta, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(a[0].cons_rc, 0);
    DLT_ASSERT_ERR(a[0].unlock_rc, 0);
    rb_state(name, st, sizeof st);
    CU_ASSERT_STRING_EQUAL(st, "");
    DLT_ASSERT_INT_EQ(rb_acq_run(DLT_PROC, name, NULL, 1, 500, MODE_TRY, 0, THEN_CONSISTENT, &a[1]), 0);
    DLT_ASSERT_ERR(a[1].rc, 0);
    rb_lost_free(l->lost, rd);
    DLT_SHM_FREE(l, 1);
    DLT_SHM_FREE(a, 2);
}

/* ========================================================================
 * 3. Fencing
 * ====================================================================== */

typedef struct rb_fence_log {
    int next;
    int bad;
    uint64_t f[256];
} rb_fence_log;

typedef struct rb_fencer {
    const char *name;
    dlock_mutex_t *m;
    int iters;
    rb_fence_log *log;
} rb_fencer;

static int rb_fencer_thread(void *p) {
    rb_fencer *w = p;
    int i;
    for (i = 0; i < w->iters; i++) {
        uint64_t f;
        int idx;
        DLT_CK(dlock_mutex_lock(w->m), 0);
        f = dlock_mutex_fence(w->m);
        DLT_CKT(f > 0);
        idx = __atomic_fetch_add(&w->log->next, 1, __ATOMIC_SEQ_CST);
        if (idx >= 0 && idx < 256) w->log->f[idx] = f;
        DLT_CK(dlock_mutex_unlock(w->m), 0);
    }
    return 0;
}

/* One process: two threads sharing one object, w->iters / 2 each. */
static int rb_fencer_proc(void *p) {
    rb_fencer *w = p, tw[2];
    dlock_mutex_t m;
    dlt_task t[2];
    int i, rc = 0;
    DLT_CK(rb_open(&m, w->name, 0, 2000, NULL, NULL), 0);
    for (i = 0; i < 2; i++) {
        tw[i] = *w;
        tw[i].m = &m;
        tw[i].iters = w->iters / 2;
        memset(&t[i], 0, sizeof t[i]);
        t[i].fn = rb_fencer_thread;
        t[i].arg = &tw[i];
        DLT_CK(pthread_create(&t[i].th, NULL, dlt_task_thread, &t[i]), 0);
    }
    for (i = 0; i < 2; i++) {
        pthread_join(t[i].th, NULL);
        if (t[i].rc != 0 && rc == 0) rc = t[i].rc;
    }
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return rc;
}

/* One acquisition's fence, from a fresh process. */
typedef struct rb_one {
    const char *name;
    int rc;
    uint64_t fence;
} rb_one;

static int rb_one_main(void *p) {
    rb_one *o = p;
    dlock_mutex_t m;
    DLT_CK(rb_open(&m, o->name, 0, 2000, NULL, NULL), 0);
    o->rc = dlock_mutex_lock(&m);
    DLT_CK(o->rc, 0);
    o->fence = dlock_mutex_fence(&m);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

/* Removes the server's data files (dump.rdb, AOF files and folder). */
static void rb_remove_data_files(const char *dir) {
    static const char *files[] = { "dump.rdb", "appendonly.aof", "temp-rewriteaof.aof" };
    char path[600];
    size_t i;
    DIR *d;
    for (i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        (void)unlink(path);
    }
    snprintf(path, sizeof path, "%s/appendonlydir", dir);
    if ((d = opendir(path)) != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char p2[900];
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p2, sizeof p2, "%s/%s", path, e->d_name);
            (void)unlink(p2);
        }
        closedir(d);
        (void)rmdir(path);
    }
}

static long long rb_dbsize(void) {
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "DBSIZE"));
}

/* Fences strictly increase over 200 acquisitions by 4 processes (2
 * threads each), in acquisition order; and after the server loses its
 * data (killed, files removed, restarted; then FLUSHALL), the next fence,
 * from a process or a thread, is still greater than every earlier one. */
static void test_fence_increasing_and_data_loss(void) {
    static const char *name = "rb/fence";
    rb_fence_log *log = DLT_SHM_NEW(rb_fence_log, 1);
    rb_fencer *w = DLT_SHM_NEW(rb_fencer, 4);
    rb_one *o = DLT_SHM_NEW(rb_one, 3);
    static dlock_mutex_t m; /* reachable if a fatal assert ends the test */
    dlt_task t[4];
    uint64_t max = 0, f;
    int i, inc = 1;

    for (i = 0; i < 4; i++) {
        w[i].name = name;
        w[i].iters = 50;
        w[i].log = log;
        dlt_task_start(&t[i], DLT_PROC, rb_fencer_proc, &w[i]);
    }
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], 60000), 0);
    DLT_ASSERT_INT_EQ(log->next, 200);
    for (i = 0; i < 200 && i < log->next; i++) {
        if (log->f[i] == 0) inc = 0;
        if (i > 0 && log->f[i] <= log->f[i - 1]) {
            if (inc) fprintf(stderr, "  fence %d (%llu) <= fence %d (%llu)\n", i, (unsigned long long)log->f[i],
                             i - 1, (unsigned long long)log->f[i - 1]);
            inc = 0;
        }
        if (log->f[i] > max) max = log->f[i];
    }
    CU_ASSERT_TRUE(inc);

    /* Data lost: a crash, its files gone, a restart. */
    CU_ASSERT_FATAL(dlt_redis_kill(&dlt_server) == 0);
    rb_remove_data_files(dlt_server.dir);
    CU_ASSERT_FATAL(dlt_redis_restart(&dlt_server) == 0);
    DLT_ASSERT_INT_EQ(rb_dbsize(), 0);
    o[0].name = name;
    dlt_task_start(&t[0], DLT_PROC, rb_one_main, &o[0]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t[0], DLT_JOIN_MS), 0);
    CU_ASSERT_TRUE(o[0].fence > max);
    DLT_ASSERT_ERR(rb_open(&m, name, 0, 2000, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* this process's client reconnects */
    f = dlock_mutex_fence(&m);
    CU_ASSERT_TRUE(f > o[0].fence);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    /* And FLUSHALL. */
    max = f;
    freeReplyObject(dlt_redis_cmd(&dlt_server, "FLUSHALL"));
    DLT_ASSERT_INT_EQ(rb_dbsize(), 0);
    o[1].name = name;
    dlt_task_start(&t[1], DLT_PROC, rb_one_main, &o[1]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t[1], DLT_JOIN_MS), 0);
    CU_ASSERT_TRUE(o[1].fence > max);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "FLUSHALL"));
    o[2].name = name;
    dlt_task_start(&t[2], DLT_THREAD, rb_one_main, &o[2]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t[2], DLT_JOIN_MS), 0);
    CU_ASSERT_TRUE(o[2].fence > o[1].fence);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(log, 1);
    DLT_SHM_FREE(w, 4);
    DLT_SHM_FREE(o, 3);
}

/* dlock_fenced_set across a lost lease.  Holder A writes twice with its
 * fence (0 both times); its lock key is deleted behind its back and B
 * takes the lock (fB > fA) and writes; A, which still believes it holds
 * the lock (lease 10 s: no renewal has looked yet), writes late: ESTALE
 * (EPERM only if A already knows it lost the hold).  The value stays B's.
 * A and B are processes, or threads on separate clients. */
typedef struct rb_fw {
    const char *name, *key, *val1, *val2;
    dlock_client_t *c;
    int stage, want; /* stage: the test's go-ahead (1: write late; 2: unlock) */
    int locked, wrote, late_done;
    int rc1, rc2, holds_before, late_rc, holds_after, unlock_rc;
    uint64_t fence;
    double t_locked, t_late;
} rb_fw;

/* A: lock, write val1 twice; wait for stage 1: write val2 late; stage 2: unlock. */
static int rb_fw_a(void *p) {
    rb_fw *w = p;
    dlock_mutex_t m;
    DLT_CK(rb_open(&m, w->name, 0, 10000, NULL, w->c), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    w->t_locked = dlt_now();
    w->fence = dlock_mutex_fence(&m);
    w->rc1 = dlock_fenced_set(&m, w->key, w->val1, strlen(w->val1));
    w->rc2 = dlock_fenced_set(&m, w->key, w->val1, strlen(w->val1)); /* the same fence again */
    dlt_flag_set(&w->wrote, 1);
    DLT_CK(w->rc1, 0);
    DLT_CK(w->rc2, 0);
    DLT_CKT(dlt_flag_wait(&w->stage, 1, DLT_JOIN_MS));
    w->holds_before = dlock_mutex_holds(&m);
    w->t_late = dlt_now();
    w->late_rc = dlock_fenced_set(&m, w->key, w->val2, strlen(w->val2));
    w->holds_after = dlock_mutex_holds(&m);
    dlt_flag_set(&w->late_done, 1);
    if (w->late_rc != ESTALE) {
        DLT_CK(w->late_rc, EPERM);
        DLT_CK(w->holds_after, 0);
    }
    DLT_CKT(dlt_flag_wait(&w->stage, 2, DLT_JOIN_MS));
    w->unlock_rc = dlock_mutex_unlock(&m);
    DLT_CK(w->unlock_rc, EPERM); /* the server says B holds it */
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

/* B: trylocks as soon as it starts (the key is gone), writes val1, holds
 * until stage 2, then writes val2 with the same fence and unlocks. */
static int rb_fw_b(void *p) {
    rb_fw *w = p;
    dlock_mutex_t m;
    DLT_CK(rb_open(&m, w->name, 0, 10000, NULL, w->c), 0);
    w->rc1 = dlock_mutex_trylock(&m);
    DLT_CK(w->rc1, 0);
    w->t_locked = dlt_now();
    w->fence = dlock_mutex_fence(&m);
    dlt_flag_set(&w->locked, 1);
    w->rc2 = dlock_fenced_set(&m, w->key, w->val1, strlen(w->val1));
    dlt_flag_set(&w->wrote, 1);
    DLT_CK(w->rc2, 0);
    DLT_CKT(dlt_flag_wait(&w->stage, 2, DLT_JOIN_MS));
    w->holds_after = dlock_mutex_holds(&m);
    DLT_CK(w->holds_after, 1);
    w->late_rc = dlock_fenced_set(&m, w->key, w->val2, strlen(w->val2)); /* equal fence again */
    DLT_CK(w->late_rc, 0);
    w->unlock_rc = dlock_mutex_unlock(&m);
    DLT_CK(w->unlock_rc, 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void rb_fenced_round(int proc, const char *name, const char *key) {
    rb_fw *w = DLT_SHM_NEW(rb_fw, 2);
    dlock_client_t *c[2] = { NULL, NULL };
    dlt_task ta, tb;
    char val[64], fs[32];
    int i;

    if (!proc) {
        for (i = 0; i < 2; i++) {
            dlock_config_t cfg;
            dlock_config_init(&cfg);
            cfg.url = dlt_server.url;
            DLT_ASSERT_ERR(dlock_client_create(&c[i], &cfg), 0);
        }
    }
    w[0].name = w[1].name = name;
    w[0].key = w[1].key = key;
    w[0].val1 = "A1";
    w[0].val2 = "A-late";
    w[1].val1 = "B1";
    w[1].val2 = "B2";
    w[0].c = c[0];
    w[1].c = c[1];
    dlt_task_start(&ta, proc, rb_fw_a, &w[0]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&w[0].wrote, 1, 10000));
    DLT_ASSERT_ERR(w[0].rc1, 0);
    DLT_ASSERT_ERR(w[0].rc2, 0);
    CU_ASSERT_TRUE(rb_hget_raw(key, "value", val, sizeof val));
    CU_ASSERT_STRING_EQUAL(val, "A1");
    CU_ASSERT_TRUE(rb_hget_raw(key, "fence", fs, sizeof fs));
    DLT_ASSERT_INT_EQ(strtoull(fs, NULL, 10), w[0].fence);
    /* A's lease is lost behind its back; B takes the lock and writes. */
    DLT_ASSERT_INT_EQ(rb_del(name), 1);
    dlt_task_start(&tb, proc, rb_fw_b, &w[1]);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&w[1].wrote, 1, 10000));
    DLT_ASSERT_ERR(w[1].rc1, 0);
    DLT_ASSERT_ERR(w[1].rc2, 0);
    CU_ASSERT_TRUE(w[1].fence > w[0].fence);
    /* A's late write. */
    dlt_flag_set(&w[0].stage, 1);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&w[0].late_done, 1, 10000));
    fprintf(stderr, "  %s: A's late write %.3f s after its acquire: %s (holds before %d, after %d)\n",
            proc ? "processes" : "threads", w[0].t_late - w[0].t_locked, dlt_errno_label(w[0].late_rc),
            w[0].holds_before, w[0].holds_after);
    DLT_ASSERT_INT_EQ(w[0].holds_before, 1); /* it still believed it held the lock */
    DLT_ASSERT_ERR(w[0].late_rc, ESTALE);   /* refused by the server's check */
    CU_ASSERT_TRUE(rb_hget_raw(key, "value", val, sizeof val));
    CU_ASSERT_STRING_EQUAL(val, "B1");
    CU_ASSERT_TRUE(rb_hget_raw(key, "fence", fs, sizeof fs));
    DLT_ASSERT_INT_EQ(strtoull(fs, NULL, 10), w[1].fence);
    dlt_flag_set(&w[0].stage, 2);
    dlt_flag_set(&w[1].stage, 2);
    DLT_ASSERT_INT_EQ(dlt_task_join(&ta, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tb, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(w[0].unlock_rc, EPERM);
    DLT_ASSERT_ERR(w[1].late_rc, 0);
    DLT_ASSERT_ERR(w[1].unlock_rc, 0);
    CU_ASSERT_TRUE(rb_hget_raw(key, "value", val, sizeof val));
    CU_ASSERT_STRING_EQUAL(val, "B2");
    for (i = 0; i < 2; i++)
        if (c[i] != NULL) DLT_ASSERT_ERR(dlock_client_destroy(c[i]), 0);
    DLT_SHM_FREE(w, 2);
}

static void test_fenced_set_stale(void) {
    rb_fenced_round(DLT_PROC, "rb/fset-p", "rb:data:p");
    rb_fenced_round(DLT_THREAD, "rb/fset-t", "rb:data:t");
}

/* ========================================================================
 * 4. The restart guard
 * ====================================================================== */

typedef struct rb_guard {
    unsigned guard_ms;
    const char *name;
    int go, try_first;
    int try_rc, lock_rc, try2_rc;
    double t_try, t_locked;
} rb_guard;

static int rb_guard_main(void *p) {
    rb_guard *g = p;
    dlock_client_t *c;
    dlock_config_t cfg;
    dlock_mutex_t m;
    dlock_config_init(&cfg);
    cfg.url = dlt_server.url;
    cfg.restart_guard_ms = g->guard_ms;
    DLT_CK(dlock_client_create(&c, &cfg), 0);
    DLT_CK(rb_open(&m, g->name, 0, 2000, NULL, c), 0);
    DLT_CKT(dlt_flag_wait(&g->go, 1, DLT_JOIN_MS));
    if (g->try_first) {
        g->try_rc = dlock_mutex_trylock(&m);
        g->t_try = dlt_now();
        if (g->try_rc == 0) DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    g->lock_rc = dlock_mutex_lock(&m);
    g->t_locked = dlt_now();
    DLT_CK(g->lock_rc, 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    g->try2_rc = dlock_mutex_trylock(&m); /* the guard has passed: at once */
    DLT_CK(g->try2_rc, 0);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

/* Runs 2 processes and 1 thread with the given guard from a common start;
 * each trylocks (guard: EBUSY) then locks.  Checks when they got it. */
static void rb_guard_round(unsigned guard_ms, const char *what) {
    static const char *names[3] = { "rb/guard-0", "rb/guard-1", "rb/guard-2" };
    rb_guard *g = DLT_SHM_NEW(rb_guard, 3);
    dlt_task t[3];
    double t0;
    int i;
    for (i = 0; i < 3; i++) {
        g[i].guard_ms = guard_ms;
        g[i].name = names[i]; /* three locks: one guard holds them all back */
        g[i].try_first = 1;
        dlt_task_start(&t[i], i < 2 ? DLT_PROC : DLT_THREAD, rb_guard_main, &g[i]);
    }
    dlt_sleep_ms(200); /* all clients made */
    t0 = dlt_now();
    for (i = 0; i < 3; i++) dlt_flag_set(&g[i].go, 1);
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_INT_EQ(dlt_task_join(&t[i], DLT_JOIN_MS), 0);
        fprintf(stderr, "  %s, guard %u ms, %s: trylock %s, lock after %.3f s\n", what, guard_ms,
                i < 2 ? "process" : "thread", dlt_errno_label(g[i].try_rc), g[i].t_locked - t0);
        if (guard_ms > 0) {
            DLT_ASSERT_ERR(g[i].try_rc, EBUSY);
            CU_ASSERT_TRUE(g[i].t_locked - t0 > guard_ms / 1000.0 - 0.1);
            CU_ASSERT_TRUE(g[i].t_locked - t0 < guard_ms / 1000.0 + 1.0);
        } else {
            DLT_ASSERT_ERR(g[i].try_rc, 0);
            CU_ASSERT_TRUE(g[i].t_locked - t0 < 0.5);
        }
        DLT_ASSERT_ERR(g[i].lock_rc, 0);
        DLT_ASSERT_ERR(g[i].try2_rc, 0);
    }
    DLT_SHM_FREE(g, 3);
}

/* With restart_guard_ms 1500, an emptied server (FLUSHALL, or a crash and
 * a restart without data) grants nothing for about 1.5 s -- trylock is
 * EBUSY, lock waits -- and then grants; without the guard it grants at
 * once. */
/* A holder from before a data loss, on a guarded client: lease 1000 ms,
 * with a handler; it reports when holds() turned 0. */
typedef struct rb_gholder {
    const char *name;
    rb_lost *lost;
    int locked;
    int lock_rc, unlock_rc;
    double t_gone;
} rb_gholder;

static int rb_gholder_main(void *p) {
    rb_gholder *g = p;
    dlock_client_t *c;
    dlock_config_t cfg;
    dlock_mutex_t m;
    double end;
    dlock_config_init(&cfg);
    cfg.url = dlt_server.url;
    cfg.restart_guard_ms = 1500;
    DLT_CK(dlock_client_create(&c, &cfg), 0);
    DLT_CK(rb_open(&m, g->name, 0, 1000, g->lost, c), 0);
    g->lost->obj = &m;
    g->lock_rc = dlock_mutex_lock(&m);
    dlt_flag_set(&g->locked, 1);
    DLT_CK(g->lock_rc, 0);
    end = dlt_now() + 10.0;
    while (dlock_mutex_holds(&m) && dlt_now() < end) dlt_sleep_ms(5);
    g->t_gone = dlt_now();
    DLT_CK(dlock_mutex_holds(&m), 0);
    g->unlock_rc = dlock_mutex_unlock(&m);
    DLT_CK(g->unlock_rc, EPERM);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static void test_restart_guard(void) {
    rb_guard_round(0, "flushed");
    freeReplyObject(dlt_redis_cmd(&dlt_server, "FLUSHALL"));
    rb_guard_round(1500, "flushed");
    /* A fresh server: crashed, restarted without its data. */
    CU_ASSERT_FATAL(dlt_redis_kill(&dlt_server) == 0);
    rb_remove_data_files(dlt_server.dir);
    CU_ASSERT_FATAL(dlt_redis_restart(&dlt_server) == 0);
    rb_guard_round(1500, "restarted");

    /* What the guard is for: a holder from before the crash learns that
     * it lost the lock before anyone is granted it again. */
    {
        static const char *name = "rb/guard-held";
        rb_gholder *gh = DLT_SHM_NEW(rb_gholder, 1);
        rb_guard *g = DLT_SHM_NEW(rb_guard, 1);
        dlt_task th, tg;
        int rd, bad;
        freeReplyObject(dlt_redis_cmd(&dlt_server, "FLUSHALL"));
        gh->name = name;
        gh->lost = rb_lost_new(name, &rd);
        g->guard_ms = 1500;
        g->name = name;
        g->try_first = 1;
        dlt_task_start(&tg, DLT_PROC, rb_guard_main, g);
        dlt_task_start(&th, DLT_PROC, rb_gholder_main, gh);
        /* The holder's own first acquire met the guard too. */
        CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&gh->locked, 1, 10000) && gh->lock_rc == 0);
        CU_ASSERT_FATAL(dlt_redis_kill(&dlt_server) == 0);
        rb_remove_data_files(dlt_server.dir);
        CU_ASSERT_FATAL(dlt_redis_restart(&dlt_server) == 0);
        dlt_flag_set(&g->go, 1);
        DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 0);
        DLT_ASSERT_INT_EQ(dlt_task_join(&tg, DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(g->try_rc, EBUSY);
        DLT_ASSERT_ERR(g->lock_rc, 0);
        DLT_ASSERT_INT_EQ(rb_lost_bytes(rd, 1000, 100, &bad), 1);
        DLT_ASSERT_INT_EQ(bad, 0);
        fprintf(stderr, "  old holder lost it %.3f s before the new grant\n", g->t_locked - gh->t_gone);
        CU_ASSERT_TRUE(gh->t_gone < g->t_locked);
        CU_ASSERT_TRUE(gh->lost->t_first < g->t_locked);
        rb_lost_free(gh->lost, rd);
        DLT_SHM_FREE(gh, 1);
        DLT_SHM_FREE(g, 1);
    }
    freeReplyObject(dlt_redis_cmd(&dlt_server, "FLUSHALL"));
    rb_guard_round(0, "flushed again");
}


/* A robust acquisition whose answer comes too late to use (after the
 * hold's validity: a stalled process or server) or never comes is taken
 * back: the marker its own take set on a clean lock must go with it, even
 * though its lease ran out on the server meanwhile -- nobody died holding
 * the lock, and neither the caller's next attempt nor the next acquirer
 * may get EOWNERDEAD.  A marker it found (a holder that did die) stays. */
typedef struct rb_late {
    dlock_mutex_t *m;
    int rc, cons_rc, unlock_rc;
    double dt;
} rb_late;

static void *rb_late_main(void *p) {
    rb_late *a = p;
    double t0 = dlt_now();
    a->rc = dlock_mutex_lock(a->m);
    a->dt = dlt_now() - t0;
    if (a->rc == EOWNERDEAD) a->cons_rc = dlock_mutex_consistent(a->m);
    if (a->rc == 0 || a->rc == EOWNERDEAD) a->unlock_rc = dlock_mutex_unlock(a->m);
    return NULL;
}

/* One round: the proxy holds every answer back delay_ms, heals at
 * heal_ms (0: once the lock call has given up); the lock call through it
 * gets want; then, once the network has healed and the taken-back holds
 * have gone (the renewal thread releases them: up to 5 s allowed), the
 * state is st_want and a direct acquirer gets next_want. */
static void rb_late_round(dlt_proxy *px, dlock_mutex_t *pm, dlock_mutex_t *dm, unsigned delay_ms, unsigned heal_ms,
                          int want, const char *st_want, int next_want) {
    rb_late a = { pm, -1, -1, -1, 0 };
    pthread_t th;
    char st[32];
    double t0 = dlt_now();
    int rc;
    dlt_proxy_set(px, DLT_PROXY_DELAY, delay_ms, NULL, 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, rb_late_main, &a) == 0);
    if (heal_ms > 0) dlt_sleep_ms(heal_ms);
    else pthread_join(th, NULL);
    dlt_proxy_pass(px);
    if (heal_ms > 0) pthread_join(th, NULL);
    t0 = dlt_now();
    do {
        dlt_sleep_ms(50);
        rb_state("rb/late", st, sizeof st);
    } while (strcmp(st, st_want) != 0 && dlt_now() - t0 < 5.0);
    rc = dlock_mutex_lock(dm);
    fprintf(stderr, "  answers %u ms late, healed at %u ms: lock %s after %.3f s; then state '%s', next lock %s\n",
            delay_ms, heal_ms ? heal_ms : (unsigned)(a.dt * 1000), dlt_errno_label(a.rc), a.dt, st, dlt_errno_label(rc));
    DLT_ASSERT_ERR(a.rc, want);
    if (a.rc == EOWNERDEAD) DLT_ASSERT_ERR(a.cons_rc, 0);
    if (a.rc == 0 || a.rc == EOWNERDEAD) DLT_ASSERT_ERR(a.unlock_rc, 0);
    CU_ASSERT_STRING_EQUAL(st, st_want);
    DLT_ASSERT_ERR(rc, next_want);
    if (rc == EOWNERDEAD) DLT_ASSERT_ERR(dlock_mutex_consistent(dm), 0);
    if (rc == 0 || rc == EOWNERDEAD) DLT_ASSERT_ERR(dlock_mutex_unlock(dm), 0);
}

static void test_robust_late_answer_not_ownerdead(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *pc = NULL;
    rb_holder *h = DLT_SHM_NEW(rb_holder, 1);
    dlock_mutex_t pm, dm;
    dlt_task th;
    CU_ASSERT_FATAL(px != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&pc, dlt_proxy_url(px), 0), 0);
    DLT_ASSERT_ERR(rb_open(&pm, "rb/late", 1, 500, NULL, pc), 0);
    DLT_ASSERT_ERR(rb_open(&dm, "rb/late", 1, 500, NULL, NULL), 0);
    /* Late (the lease is 500 ms): given back, asked again with a new token. */
    rb_late_round(px, &pm, &dm, 700, 800, 0, "", 0);
    /* Later than the reply timeout (2 s): the request is asked again, same token. */
    rb_late_round(px, &pm, &dm, 2500, 3000, 0, "", 0);
    /* Late until the call gives up (ENOLCK): its holds go back later. */
    rb_late_round(px, &pm, &dm, 700, 0, ENOLCK, "", 0);
    /* A holder that did die: the late acquirer still gets EOWNERDEAD. */
    rb_holder_init(h, "rb/late", 1, 10000, HOLD_EXIT);
    dlt_task_start(&th, DLT_PROC, rb_holder_main, h);
    CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&h->locked, 1, 10000) && h->lock_rc == 0);
    dlt_flag_set(&h->go, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, 10000), 0);
    rb_late_round(px, &pm, &dm, 700, 800, EOWNERDEAD, "", 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&pm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&dm), 0);
    dlock_client_destroy(pc);
    dlt_proxy_stop(px);
    DLT_SHM_FREE(h, 1);
}

/* ======================================================================== */

static const struct dlt_test tests[] = {
    DLT_TEST(test_robust_holder_killed),
    DLT_TEST(test_robust_thread_exit),
    DLT_TEST(test_robust_exit_releases_dead),
    DLT_TEST(test_robust_notrecoverable),
    DLT_TEST(test_robust_late_answer_not_ownerdead),
    DLT_TEST(test_robust_break_ownerdead),
    DLT_TEST(test_robust_consistent_einval),
    DLT_TEST(test_stalled_holder_died),
    DLT_TEST(test_robust_ownerdead_owner_dies),
    DLT_TEST(test_robust_lease_lost_stopped),
    DLT_TEST(test_lost_lease_sigstop),
    DLT_TEST(test_lost_validity_server_down),
    DLT_TEST(test_fence_increasing_and_data_loss),
    DLT_TEST(test_fenced_set_stale),
    DLT_TEST(test_restart_guard),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "robust", tests);
}
