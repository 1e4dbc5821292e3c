/* labels: redis; timeout: 400 */
/* test_cache.c -- lock caching: a caching mutex keeps a lock
 * that nobody else asked for in the process after unlock, so that the next
 * lock by any of its threads takes no round trip; a request from another
 * process makes it give the lock up.
 *
 * What is checked here holds whatever the scheduling: counts of server
 * commands (INFO commandstats) where nothing else talks to the server,
 * the state of the lock's hash, fences, mutual exclusion through a counter
 * in shared memory, and that every waiter gets the lock within a generous
 * bound.  No timing is asserted (speed is bench/'s business); durations
 * are printed for the record.
 *
 * Children report through exit codes (DLT_CK).  Every child is reaped by
 * dlt_wait (which kills it on a timeout); nothing fatal is asserted while
 * a child runs.  A test leaves no cached lock behind (ca_flush), so that
 * no renewal of an earlier test's hold shows in a later test's counts.
 *
 * Helpers are all ca_-prefixed (static).
 */
#define DLT_CK_MOD 120 /* worker codes 1..120: clear of 128 + signal */
#include "fixture.h"
#include "proxy.h"

#include <dlock.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A lease so long that no renewal falls inside a measurement (renewals
 * come at about a third of it). */
#define CA_LONG_LEASE 600000u
/* A long run of local holds (2^20), far more fences than the server's
 * microsecond clock would advance by meanwhile. */
#define CA_BLOCK 1048576ull
/* What any wait that must end may take at most. */
#define CA_WAIT_MS 15000

/* ========================================================================
 * Helpers
 * ====================================================================== */

/* LeakSanitizer's hook (as in test_robust.c): a child that calls exit()
 * on purpose skips the leak check, which would scan the heap it inherited
 * without this process's other threads' stacks. */
static volatile sig_atomic_t ca_exiting_child;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) {
    return ca_exiting_child;
}

/* exit() (not _exit) from a child: the library's exit handler runs. */
static void ca_child_exit(int rc) {
    ca_exiting_child = 1;
    fflush(NULL);
    exit(rc & 0xff);
}

typedef struct ca_spec {
    int caching;
    int type;   /* DLOCK_MUTEX_*, or -1: the default */
    int robust;
    unsigned lease; /* 0: the default */
    dlock_lost_fn lost_fn;
    void *lost_arg;
    dlock_client_t *client;
} ca_spec;

static int ca_open_spec(dlock_mutex_t *m, const char *name, const ca_spec *s) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if ((rc = dlock_mutexattr_setcaching(&a, s->caching)) != 0) goto out;
    if (s->type >= 0 && (rc = dlock_mutexattr_settype(&a, s->type)) != 0) goto out;
    if (s->robust && (rc = dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST)) != 0) goto out;
    if (s->lease && (rc = dlock_mutexattr_setlease(&a, s->lease)) != 0) goto out;
    if (s->lost_fn && (rc = dlock_mutexattr_setlostcallback(&a, s->lost_fn, s->lost_arg)) != 0) goto out;
    if (s->client && (rc = dlock_mutexattr_setclient(&a, s->client)) != 0) goto out;
    rc = dlock_mutex_init(m, name, &a);
out:
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* A caching mutex (default type, not robust) with lease (0: default). */
static int ca_open(dlock_mutex_t *m, const char *name, unsigned lease) {
    ca_spec s = { 1, -1, 0, lease, NULL, NULL, NULL };
    return ca_open_spec(m, name, &s);
}

static int ca_timedlock(dlock_mutex_t *m, int ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    return dlock_mutex_timedlock(m, &ts);
}

static void ca_key(const char *name, char *k, size_t cap) {
    dlt_lock_key(name, k, cap);
}

/* The server's clock in ns (TIME), 0 on no answer: no fence, local or
 * not, is ever above it when issued (docs/fencing.md). */
static uint64_t ca_server_ns(void) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "TIME");
    uint64_t v = 0;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        v = (strtoull(r->element[0]->str, NULL, 10) * 1000000ull + strtoull(r->element[1]->str, NULL, 10)) * 1000ull;
    if (r != NULL) freeReplyObject(r);
    return v;
}

/* HEXISTS dlock:{name} field: 1, 0, or -1 -- 0 also when the lock key is
 * no hash (a hold taken on the uncontended path is a string, which no
 * caching hold ever is). */
static long long ca_hexists(const char *name, const char *field) {
    char k[600];
    ca_key(name, k, sizeof k);
    redisReply *r = dlt_redis_cmd(&dlt_server,
                                  "EVAL_RO %s 1 %s %s",
                                  "if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return 0 end "
                                  "return redis.call('HEXISTS', KEYS[1], ARGV[1])",
                                  k, field);
    long long v = dlt_reply_int(r);
    return v == LLONG_MIN ? -1 : v;
}

static long long ca_del(const char *name) {
    char k[600];
    ca_key(name, k, sizeof k);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s", k));
}

static long long ca_numsub(const char *name) {
    char k[600];
    ca_key(name, k, sizeof k);
    return dlt_numsub(k);
}

/* 1 once the channel of name has at least want subscribers, else 0. */
static int ca_wait_numsub(const char *name, long long want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (ca_numsub(name) < want) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(5);
    }
    return 1;
}

/* Does this process (pid) keep name cached on the server: the hash has an
 * owner of this pid and the cache mark, with a lease running. */
static int ca_server_shows_cached(const char *name, pid_t pid) {
    return ca_hexists(name, "owner") == 1 && dlt_key_field(name, "pid") == (long long)pid &&
           dlt_key_field(name, "cache") == 1 && dlt_key_pttl(name) > 0;
}

/* Lock/unlock pairs through m until an unlock has kept the lock (the
 * server still shows this process as its owner afterwards, and the
 * channel is heard).  Only where no other process wants the lock.
 * 0, or the first failing call's error / -1 if it never got cached
 * within 10 s.  *last_fence (if not NULL): the last hold's fence. */
static int ca_warm(dlock_mutex_t *m, const char *name, uint64_t *last_fence) {
    double end = dlt_now() + 10.0;
    int rc;
    for (;;) {
        if ((rc = dlock_mutex_lock(m)) != 0) return rc;
        if (last_fence != NULL) *last_fence = dlock_mutex_fence(m);
        int heard = ca_numsub(name) >= 1;
        if ((rc = dlock_mutex_unlock(m)) != 0) return rc;
        if (heard && ca_server_shows_cached(name, getpid())) return 0;
        if (dlt_now() > end) return -1;
        dlt_sleep_ms(10);
    }
}

/* Gives up whatever this process caches of name: a lock and unlock
 * through a plain (non-caching) object, which takes the cache back to
 * the server first.  0 or an error. */
static int ca_flush(const char *name) {
    dlock_mutex_t p;
    int rc;
    if ((rc = dlt_mutex_make(&p, name, 0, NULL)) != 0) return rc;
    rc = ca_timedlock(&p, CA_WAIT_MS);
    if (rc == 0) rc = dlock_mutex_unlock(&p);
    int rc2 = dlock_mutex_destroy(&p);
    return rc ? rc : rc2;
}

/* A critical section's check: enter (the count must go 0 -> 1), leave. */
static int ca_enter(int *in_cs) {
    return dlt_flag_add(in_cs, 1) == 1;
}
static void ca_leave(int *in_cs) {
    dlt_flag_add(in_cs, -1);
}

/* ========================================================================
 * 10. Attributes
 * ====================================================================== */

static void test_cache_attr(void) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    int v = -7;
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getcaching(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 0); /* off by default */
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, 1), 0);
    v = -7;
    DLT_ASSERT_ERR(dlock_mutexattr_getcaching(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 1);
    /* EINVAL for anything but 0 and 1, and the value stays. */
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, 2), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, -1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, 1 << 30), EINVAL);
    v = -7;
    DLT_ASSERT_ERR(dlock_mutexattr_getcaching(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 1);
    DLT_ASSERT_ERR(dlock_mutexattr_getcaching(&a, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(NULL, 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getcaching(NULL, &v), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, 0), 0);
    v = -7;
    DLT_ASSERT_ERR(dlock_mutexattr_getcaching(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 0);
    /* Caching goes with the other attributes. */
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_RECURSIVE), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "cache/attr", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_field("cache/attr", "cache"), 1); /* marked cached */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush("cache/attr"), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("cache/attr"), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    /* A destroyed attribute object is refused. */
    DLT_ASSERT_ERR(dlock_mutexattr_setcaching(&a, 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getcaching(&a, &v), EINVAL);

    /* A non-caching mutex never marks the lock. */
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "cache/attr-off", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(ca_hexists("cache/attr-off", "cache"), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("cache/attr-off"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* ========================================================================
 * 1. Zero round trips once cached
 * ====================================================================== */

#define CA_PAIRS 300

typedef struct ca_zero_thr {
    const char *name;
    uint64_t first, last; /* fences seen */
    int evals_before;
} ca_zero_thr;

/* Another thread of the process, with its own caching object of the same
 * name: its holds come from the cache too, with no server command. */
static int ca_zero_thread(void *p) {
    ca_zero_thr *t = p;
    dlock_mutex_t m;
    uint64_t prev = 0;
    int i;
    DLT_CK(ca_open(&m, t->name, CA_LONG_LEASE), 0);
    for (i = 0; i < CA_PAIRS; i++) {
        DLT_CK(dlock_mutex_lock(&m), 0);
        uint64_t f = dlock_mutex_fence(&m);
        if (i == 0) t->first = f;
        else DLT_CK(f > prev, 1);
        prev = f;
        DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    t->last = prev;
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_cache_no_round_trips(void) {
    const char *name = "cache/zero";
    dlock_mutex_t m;
    uint64_t f0 = 0, prev, f;
    int i, bad_lock = 0, bad_fence = 0, bad_holds = 0;
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    long long total0 = dlt_redis_total_calls(&dlt_server);

    /* lock/unlock, trylock/unlock, timedlock/unlock, clocklock/unlock. */
    prev = f0;
    double t0 = dlt_now();
    for (i = 0; i < 4 * CA_PAIRS; i++) {
        int rc;
        switch (i % 4) {
        case 0: rc = dlock_mutex_lock(&m); break;
        case 1: rc = dlock_mutex_trylock(&m); break;
        case 2: rc = ca_timedlock(&m, 10000); break;
        default: {
            struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, 10000);
            rc = dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts);
        }
        }
        if (rc != 0) {
            bad_lock++;
            continue;
        }
        if (dlock_mutex_holds(&m) != 1) bad_holds++;
        f = dlock_mutex_fence(&m);
        if (f <= prev) bad_fence++; /* a new fence, higher than the last */
        prev = f;
        if (dlock_mutex_unlock(&m) != 0) bad_lock++;
    }
    double took = dlt_now() - t0;
    DLT_ASSERT_INT_EQ(bad_lock, 0);
    DLT_ASSERT_INT_EQ(bad_holds, 0);
    DLT_ASSERT_INT_EQ(bad_fence, 0);
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "publish"), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "del"), 0);
    /* Nothing at all reached the server but this test's own INFOs. */
    long long total1 = dlt_redis_total_calls(&dlt_server);
    printf("  %d cached pairs in %.3f s; server commands meanwhile: %lld (the test's own INFO calls)\n",
           4 * CA_PAIRS, took, total1 - total0);
    CU_ASSERT_TRUE(total1 - total0 <= 8);
    /* The server still shows this process as the owner. */
    CU_ASSERT_TRUE(ca_server_shows_cached(name, getpid()));
    DLT_ASSERT_INT_EQ(ca_hexists(name, "owner"), 1);
    CU_ASSERT_TRUE(dlt_key_pttl(name) > 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0); /* held by no thread */
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&m), 0);

    /* Another thread, through its own caching object. */
    ca_zero_thr t;
    dlt_task tk;
    memset(&t, 0, sizeof t);
    t.name = name;
    if (dlt_task_start(&tk, DLT_THREAD, ca_zero_thread, &t) == 0) DLT_ASSERT_INT_EQ(dlt_task_join(&tk, DLT_JOIN_MS), 0);
    CU_ASSERT_TRUE(t.first > prev);
    CU_ASSERT_TRUE(t.last >= t.first + CA_PAIRS - 1);
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    CU_ASSERT_TRUE(ca_server_shows_cached(name, getpid()));

    /* The local fences follow the server-issued one, never past the
     * server's clock. */
    long long base = dlt_key_field(name, "fence");
    CU_ASSERT_TRUE(base > 0 && (uint64_t)base <= f0 && t.last <= ca_server_ns());

    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
}

/* ========================================================================
 * 2. Fences: strictly increasing locally, never past the server's clock,
 * and the next process's fence comes after every local one
 * ====================================================================== */

typedef struct ca_fence_child {
    const char *name;
    uint64_t fence;
    int locked;
} ca_fence_child;

static int ca_fence_child_main(void *p) {
    ca_fence_child *a = p;
    dlock_mutex_t m;
    DLT_CK(dlt_mutex_make(&m, a->name, 0, NULL), 0); /* plain: nothing stays behind */
    DLT_CK(ca_timedlock(&m, CA_WAIT_MS), 0);
    a->fence = dlock_mutex_fence(&m);
    dlt_flag_set(&a->locked, 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_cache_fences(void) {
    const char *name = "cache/fence";
    dlock_mutex_t m;
    uint64_t f0 = 0, prev, maxlocal = 0;
    int i, bad = 0;
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    long long base = dlt_key_field(name, "fence"); /* the server-issued fence of the cached hold */
    CU_ASSERT_FATAL(base > 0);
    prev = f0;
    for (i = 0; i < 100; i++) {
        if (dlock_mutex_lock(&m) != 0) {
            bad++;
            continue;
        }
        uint64_t f = dlock_mutex_fence(&m);
        if (f <= prev) bad++;
        if (f < (uint64_t)base) bad++;
        prev = f;
        if (f > maxlocal) maxlocal = f;
        if (dlock_mutex_unlock(&m) != 0) bad++;
    }
    DLT_ASSERT_INT_EQ(bad, 0);
    DLT_ASSERT_INT_EQ(maxlocal, prev);
    CU_ASSERT_TRUE(maxlocal <= ca_server_ns());

    ca_fence_child *a = DLT_SHM_NEW(ca_fence_child, 1);
    a->name = name;
    pid_t pid = dlt_spawn(ca_fence_child_main, a);
    CU_ASSERT_TRUE(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 2 * CA_WAIT_MS), 0);
    DLT_ASSERT_INT_EQ(a->locked, 1);
    printf("  local fences %llu..%llu (server-issued %lld), other process: %llu\n", (unsigned long long)(f0 + 1),
           (unsigned long long)maxlocal, base, (unsigned long long)a->fence);
    CU_ASSERT_TRUE(a->fence > maxlocal);

    /* And this process's next hold comes from the server, after it. */
    DLT_ASSERT_ERR(ca_timedlock(&m, CA_WAIT_MS), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > a->fence);
    DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), getpid());
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_SHM_FREE(a, 1);
}

/* ========================================================================
 * 3. Giving up an idle cached lock on request; 4. giving it up at the
 * local holder's unlock
 * ====================================================================== */

enum { REQ_LOCK, REQ_TRYLOCK, REQ_RDLOCK };

typedef struct ca_req {
    const char *name;
    int how;         /* REQ_* */
    int caching;     /* the requester's mutex caches too */
    int asking, got, go, leaving, done;
    int in_cs, violations;
    int tries;
    uint64_t fence;
    double waited;
} ca_req;

/* Another process asks for the lock, holds it until `go`, then unlocks. */
static int ca_req_main(void *p) {
    ca_req *a = p;
    dlock_mutex_t m;
    dlock_rwlock_t rw;
    int rc = -1;
    double t0;
    if (a->how == REQ_RDLOCK) {
        DLT_CK(dlock_rwlock_init(&rw, a->name, NULL), 0);
    } else {
        ca_spec s = { a->caching, -1, 0, 0, NULL, NULL, NULL };
        DLT_CK(ca_open_spec(&m, a->name, &s), 0);
    }
    dlt_flag_set(&a->asking, 1);
    t0 = dlt_now();
    switch (a->how) {
    case REQ_LOCK: rc = ca_timedlock(&m, CA_WAIT_MS); break;
    case REQ_TRYLOCK:
        /* Each busy trylock is a request too: the holder gives it up. */
        while ((rc = dlock_mutex_trylock(&m)) == EBUSY && dlt_now() - t0 < CA_WAIT_MS / 1000.0) {
            a->tries++;
            dlt_sleep_ms(20);
        }
        break;
    default: {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, CA_WAIT_MS);
        rc = dlock_rwlock_timedrdlock(&rw, &ts);
    }
    }
    a->waited = dlt_now() - t0;
    DLT_CK(rc, 0);
    if (!ca_enter(&a->in_cs)) dlt_flag_add(&a->violations, 1);
    a->fence = a->how == REQ_RDLOCK ? dlock_rwlock_fence(&rw) : dlock_mutex_fence(&m);
    dlt_flag_set(&a->got, 1);
    DLT_CKT(dlt_flag_wait(&a->go, 1, DLT_JOIN_MS));
    dlt_sleep_ms(100); /* the test's next lock is waiting meanwhile, most likely */
    dlt_flag_set(&a->leaving, 1);
    ca_leave(&a->in_cs);
    if (a->how == REQ_RDLOCK) {
        DLT_CK(dlock_rwlock_unlock(&rw), 0);
        DLT_CK(dlock_rwlock_destroy(&rw), 0);
    } else {
        DLT_CK(dlock_mutex_unlock(&m), 0);
        DLT_CK(dlock_mutex_destroy(&m), 0);
        if (a->caching) DLT_CK(ca_flush(a->name), 0); /* leave nothing cached when _exit()ing */
    }
    dlt_flag_set(&a->done, 1);
    return 0;
}

/* Another process runs ca_req_main (how, through a mutex that caches or
 * not): its request (*out, shared memory) and its pid. */
static pid_t ca_spawn(const char *name, int how, int caching, ca_req **out) {
    ca_req *a = DLT_SHM_NEW(ca_req, 1);
    a->name = name;
    a->how = how;
    a->caching = caching;
    pid_t pid = dlt_spawn(ca_req_main, a);
    CU_ASSERT_TRUE(pid > 0);
    *out = a;
    return pid;
}

/* The lock is idle in this process's cache; another process asks for it
 * (lock, trylock or a read lock), gets it, and this process's next lock
 * waits until that process unlocks. */
static void ca_idle_giveup(const char *name, int how, int caching) {
    dlock_mutex_t m;
    uint64_t f0 = 0;
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);

    ca_req *a;
    pid_t pid = ca_spawn(name, how, caching, &a);
    int got = dlt_flag_wait(&a->got, 1, CA_WAIT_MS + 5000);
    CU_ASSERT_TRUE(got);
    if (got) {
        printf("  %s: the other process got the lock after %.3f s (%d busy trylocks)\n", name, a->waited, a->tries);
        /* This process gave the lock up: it is not held here any more. */
        if (how == REQ_RDLOCK) {
            DLT_ASSERT_INT_EQ(ca_hexists(name, "owner"), 0);
        } else {
            DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), pid);
        }
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
        /* The next lock waits until the other process unlocks. */
        dlt_flag_set(&a->go, 1);
        int rc = ca_timedlock(&m, CA_WAIT_MS);
        DLT_ASSERT_ERR(rc, 0);
        if (rc == 0) {
            DLT_ASSERT_INT_EQ(dlt_flag_get(&a->leaving), 1);
            if (!ca_enter(&a->in_cs)) dlt_flag_add(&a->violations, 1);
            CU_ASSERT_TRUE(dlock_mutex_fence(&m) > a->fence);
            CU_ASSERT_TRUE(dlock_mutex_fence(&m) > f0);
            DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), getpid());
            ca_leave(&a->in_cs);
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        }
    }
    dlt_flag_set(&a->go, 1);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 2 * CA_WAIT_MS), 0);
    DLT_ASSERT_INT_EQ(a->violations, 0);
    DLT_ASSERT_INT_EQ(a->done, 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_SHM_FREE(a, 1);
}

static void test_cache_idle_giveup_lock(void) {
    ca_idle_giveup("cache/idle-lock", REQ_LOCK, 0);
}

static void test_cache_idle_giveup_caching_requester(void) {
    ca_idle_giveup("cache/idle-caching", REQ_LOCK, 1);
}

static void test_cache_idle_giveup_trylock(void) {
    ca_idle_giveup("cache/idle-try", REQ_TRYLOCK, 0);
}

static void test_cache_idle_giveup_rdlock(void) {
    ca_idle_giveup("cache/idle-rd", REQ_RDLOCK, 0);
}

/* A thread of this process holds the (cached) lock; another process asks
 * and waits; at the unlock here the lock goes to it, and is not kept. */
static void test_cache_giveup_at_unlock(void) {
    const char *name = "cache/at-unlock";
    dlock_mutex_t m;
    uint64_t f0 = 0;
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* from the cache */
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > f0);

    ca_req *a = DLT_SHM_NEW(ca_req, 1);
    a->name = name;
    a->how = REQ_LOCK;
    a->caching = 1;
    if (!ca_enter(&a->in_cs)) a->violations++;
    pid_t pid = dlt_spawn(ca_req_main, a);
    CU_ASSERT_TRUE(pid > 0);
    CU_ASSERT_TRUE(dlt_flag_wait(&a->asking, 1, CA_WAIT_MS));
    /* The requester waits on the channel (this process's subscriber and
     * its own); it has asked by then.  Holding a little longer changes
     * nothing for correctness. */
    CU_ASSERT_TRUE(ca_wait_numsub(name, 2, CA_WAIT_MS));
    dlt_sleep_ms(50);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&a->got), 0); /* mutual exclusion */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    ca_leave(&a->in_cs);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    int got = dlt_flag_wait(&a->got, 1, CA_WAIT_MS + 5000);
    CU_ASSERT_TRUE(got);
    if (got) {
        printf("  the waiting process got the lock after %.3f s\n", a->waited);
        /* Not kept here: the server shows the other process, and neither a
         * trylock of this process nor a thread of it gets the lock. */
        DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), pid);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
        CU_ASSERT_TRUE(a->fence > f0 + 1);
        dlt_flag_set(&a->go, 1);
        int rc = ca_timedlock(&m, CA_WAIT_MS);
        DLT_ASSERT_ERR(rc, 0);
        if (rc == 0) {
            DLT_ASSERT_INT_EQ(dlt_flag_get(&a->leaving), 1);
            if (!ca_enter(&a->in_cs)) dlt_flag_add(&a->violations, 1);
            CU_ASSERT_TRUE(dlock_mutex_fence(&m) > a->fence);
            ca_leave(&a->in_cs);
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        }
    }
    dlt_flag_set(&a->go, 1);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 2 * CA_WAIT_MS), 0);
    DLT_ASSERT_INT_EQ(a->violations, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_SHM_FREE(a, 1);
}

/* ========================================================================
 * 5. Ping-pong between two processes, both caching
 * ====================================================================== */

#define CA_ROUNDS 200

typedef struct ca_pp {
    const char *name;
    int strict;           /* take turns (every lock needs the other's cache) */
    int nthr;             /* threads per process (free-running only) */
    int turn;             /* whose turn, when strict */
    int ready;            /* processes at the start line */
    int in_cs, violations, counter, fence_bad;
    long long last_fence; /* the last hold's fence, any process */
    int done[2];
    double maxwait[2];
} ca_pp;

typedef struct ca_pp_arg {
    ca_pp *s;
    int me;
    dlock_mutex_t *m;
} ca_pp_arg;

static int ca_pp_rounds(ca_pp *s, int me, dlock_mutex_t *m, int rounds) {
    int i;
    for (i = 0; i < rounds; i++) {
        if (s->strict) DLT_CKT(dlt_flag_wait(&s->turn, me, DLT_JOIN_MS));
        double t0 = dlt_now();
        DLT_CK(ca_timedlock(m, DLT_JOIN_MS), 0);
        double w = dlt_now() - t0;
        if (w > s->maxwait[me & 1]) s->maxwait[me & 1] = w; /* a record only */
        if (!ca_enter(&s->in_cs)) dlt_flag_add(&s->violations, 1);
        long long f = (long long)dlock_mutex_fence(m);
        if (f <= s->last_fence) dlt_flag_add(&s->fence_bad, 1);
        s->last_fence = f;
        int c = s->counter; /* not atomic on purpose: the lock protects it */
        if (i % 16 == 0) sched_yield();
        s->counter = c + 1;
        if (s->strict) dlt_flag_set(&s->turn, 1 - me);
        ca_leave(&s->in_cs);
        DLT_CK(dlock_mutex_unlock(m), 0);
    }
    return 0;
}

static int ca_pp_thread(void *p) {
    ca_pp_arg *a = p;
    return ca_pp_rounds(a->s, a->me, a->m, CA_ROUNDS);
}

static int ca_pp_main(void *p) {
    ca_pp_arg *a = p;
    ca_pp *s = a->s;
    dlock_mutex_t m;
    int rc = 0, i;
    DLT_CK(ca_open(&m, s->name, 0), 0);
    dlt_flag_add(&s->ready, 1);
    DLT_CKT(dlt_flag_wait(&s->ready, 2, DLT_JOIN_MS)); /* start together */
    if (s->nthr <= 1) {
        rc = ca_pp_rounds(s, a->me, &m, CA_ROUNDS);
    } else {
        dlt_task t[4];
        ca_pp_arg ta[4];
        for (i = 0; i < s->nthr && i < 4; i++) {
            ta[i].s = s;
            ta[i].me = a->me;
            ta[i].m = &m;
            t[i].proc = DLT_THREAD;
            t[i].fn = ca_pp_thread;
            t[i].arg = &ta[i];
            t[i].rc = -1;
            DLT_CK(pthread_create(&t[i].th, NULL, dlt_task_thread, &t[i]), 0);
        }
        for (i = 0; i < s->nthr && i < 4; i++) {
            pthread_join(t[i].th, NULL);
            if (t[i].rc != 0 && rc == 0) rc = t[i].rc;
        }
    }
    DLT_CK(rc, 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    s->done[a->me] = 1;
    ca_child_exit(0); /* exit(): the cached lock goes back to the server */
    return 0;
}

static void ca_pingpong(const char *name, int strict, int nthr) {
    ca_pp *s = DLT_SHM_NEW(ca_pp, 1);
    ca_pp_arg a[2];
    pid_t pid[2];
    int i;
    s->name = name;
    s->strict = strict;
    s->nthr = nthr;
    double t0 = dlt_now();
    for (i = 0; i < 2; i++) {
        a[i].s = s;
        a[i].me = i;
        a[i].m = NULL;
        pid[i] = dlt_spawn(ca_pp_main, &a[i]);
        CU_ASSERT_TRUE(pid[i] > 0);
    }
    for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(dlt_wait(pid[i], 2 * DLT_JOIN_MS), 0);
    printf("  %s: %d rounds x %d thread(s) x 2 processes in %.2f s, longest wait %.3f / %.3f s\n", name, CA_ROUNDS,
           nthr, dlt_now() - t0, s->maxwait[0], s->maxwait[1]);
    DLT_ASSERT_INT_EQ(s->violations, 0);
    DLT_ASSERT_INT_EQ(s->fence_bad, 0);
    /* A request for the cached lock makes the cacher give it up at once:
     * no wait comes near the 2 s a grant to a caching waiter lapses in, or
     * the third of a lease (3.3 s) after which a waiter asks again (a
     * caching holder that was handed the lock by a release and never
     * heard that others were queued kept it that long). */
    CU_ASSERT_TRUE(s->maxwait[0] < 1.0 && s->maxwait[1] < 1.0);
    DLT_ASSERT_INT_EQ(s->counter, 2 * CA_ROUNDS * (nthr > 1 ? nthr : 1));
    DLT_ASSERT_INT_EQ(s->done[0], 1);
    DLT_ASSERT_INT_EQ(s->done[1], 1);
    /* Both exited (exit()): nothing is left held on the server. */
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_SHM_FREE(s, 1);
}

static void test_cache_pingpong_turns(void) {
    ca_pingpong("cache/pingpong", 1, 1);
}

static void test_cache_pingpong_free(void) {
    ca_pingpong("cache/contend", 0, 2);
}

/* ========================================================================
 * 6. Per-thread ownership inside the caching process
 * ====================================================================== */

typedef struct ca_thr {
    dlock_mutex_t *m;
    int step, calling, got;
    int rc_unlock, rc_try, rc_lock;
    uint64_t fence;
} ca_thr;

/* Another thread, while the test's thread holds m. */
static int ca_other_thread(void *p) {
    ca_thr *t = p;
    t->rc_unlock = dlock_mutex_unlock(t->m); /* not the holder */
    t->rc_try = dlock_mutex_trylock(t->m);   /* held by another local thread */
    DLT_CK(t->rc_unlock, EPERM);
    DLT_CK(t->rc_try, EBUSY);
    return 0;
}

/* A second thread waits in lock() while the first holds the lock. */
static int ca_waiter_thread(void *p) {
    ca_thr *t = p;
    dlt_flag_set(&t->calling, 1);
    t->rc_lock = dlock_mutex_lock(t->m);
    DLT_CK(t->rc_lock, 0);
    t->fence = dlock_mutex_fence(t->m);
    dlt_flag_set(&t->got, 1);
    DLT_CK(dlock_mutex_holds(t->m), 1);
    DLT_CK(dlock_mutex_unlock(t->m), 0);
    return 0;
}

static void test_cache_thread_semantics(void) {
    const char *name = "cache/threads";
    ca_spec s = { 1, DLOCK_MUTEX_ERRORCHECK, 0, CA_LONG_LEASE, NULL, NULL, NULL };
    dlock_mutex_t m;
    dlt_task tk;
    ca_thr t;
    uint64_t f0 = 0;
    DLT_ASSERT_ERR(ca_open_spec(&m, name, &s), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);

    /* ERRORCHECK: EPERM / EBUSY for another thread, EDEADLK for a relock. */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM); /* cached, but held by no thread */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EDEADLK);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    memset(&t, 0, sizeof t);
    t.m = &m;
    if (dlt_task_start(&tk, DLT_THREAD, ca_other_thread, &t) == 0) DLT_ASSERT_INT_EQ(dlt_task_join(&tk, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(t.rc_unlock, EPERM);
    DLT_ASSERT_ERR(t.rc_try, EBUSY);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1); /* still ours */
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > f0);

    /* A second local thread waiting in lock() gets it from the cache when
     * this one unlocks: no server command at all. */
    memset(&t, 0, sizeof t);
    t.m = &m;
    int started = dlt_task_start(&tk, DLT_THREAD, ca_waiter_thread, &t) == 0;
    if (started) {
        CU_ASSERT_TRUE(dlt_flag_wait(&t.calling, 1, CA_WAIT_MS));
        dlt_sleep_ms(50); /* most likely waiting in lock() by now; either way is right */
        DLT_ASSERT_INT_EQ(dlt_flag_get(&t.got), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_INT_EQ(dlt_task_join(&tk, DLT_JOIN_MS), 0);
        DLT_ASSERT_ERR(t.rc_lock, 0);
        CU_ASSERT_TRUE(t.fence > f0 + 1);
    } else {
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    CU_ASSERT_TRUE(ca_server_shows_cached(name, getpid()));

    /* RECURSIVE: counts, no round trip; another thread gets EBUSY / EPERM
     * until the count is back to zero.  (Opened before m is destroyed:
     * destroying the last object of a name gives the cache up.) */
    dlock_mutex_t r;
    s.type = DLOCK_MUTEX_RECURSIVE;
    DLT_ASSERT_ERR(ca_open_spec(&r, name, &s), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&r), 0);
    uint64_t fr = dlock_mutex_fence(&r);
    CU_ASSERT_TRUE(fr > f0 + 2);
    DLT_ASSERT_ERR(dlock_mutex_lock(&r), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&r), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&r), fr); /* one hold, one fence */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&r), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&r), 0);
    memset(&t, 0, sizeof t);
    t.m = &r;
    if (dlt_task_start(&tk, DLT_THREAD, ca_other_thread, &t) == 0) DLT_ASSERT_INT_EQ(dlt_task_join(&tk, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&r), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&r), 0); /* the last: back to the cache */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&r), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&r), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&r), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&r) > fr);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&r), 0);
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    CU_ASSERT_TRUE(ca_server_shows_cached(name, getpid()));
    DLT_ASSERT_ERR(dlock_mutex_destroy(&r), 0);

    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
}

/* ========================================================================
 * Same process, other kinds of object: a non-caching mutex, a caching
 * mutex of other robustness, a read lock -- each gives the cache up
 * first, then acquires on the server
 * ====================================================================== */

static void test_cache_other_objects_give_up(void) {
    const char *name = "cache/mixed";
    dlock_mutex_t m, plain, rob;
    dlock_rwlock_t rw;
    uint64_t f0 = 0;
    ca_spec rs = { 1, -1, 1, CA_LONG_LEASE, NULL, NULL, NULL };
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&plain, name, CA_LONG_LEASE, NULL), 0);
    DLT_ASSERT_ERR(ca_open_spec(&rob, name, &rs), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, name, NULL), 0);

    /* A plain mutex: the cache goes back, the plain hold is on the server. */
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    DLT_ASSERT_ERR(ca_timedlock(&plain, CA_WAIT_MS), 0);
    CU_ASSERT_TRUE(dlt_evals() >= 1);
    DLT_ASSERT_INT_EQ(ca_hexists(name, "cache"), 0); /* a fresh, non-caching hold */
    CU_ASSERT_TRUE(dlock_mutex_fence(&plain) > f0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY); /* the cache is gone: held by this thread */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&plain), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0); /* a plain unlock releases */

    /* A caching mutex of the other robustness cannot use the cache. */
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    int rc = ca_timedlock(&rob, CA_WAIT_MS);
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0 || rc == EOWNERDEAD) {
        CU_ASSERT_TRUE(dlock_mutex_fence(&rob) > f0);
        DLT_ASSERT_INT_EQ(dlt_key_field(name, "cache"), 1);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&rob), 0);
    }
    /* ... and the lock it now caches is not used by the non-robust one. */
    DLT_ASSERT_ERR(ca_timedlock(&m, CA_WAIT_MS), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    /* A read lock of the same name. */
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, CA_WAIT_MS);
    DLT_ASSERT_ERR(dlock_rwlock_timedrdlock(&rw, &ts), 0);
    DLT_ASSERT_INT_EQ(ca_hexists(name, "owner"), 0); /* no writer left */
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 1);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY); /* read-locked by this thread */
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(ca_timedlock(&m, CA_WAIT_MS), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&rob), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&plain), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
}

/* ========================================================================
 * 7. fork: the child does not inherit the cached lock
 * ====================================================================== */

typedef struct ca_fork {
    dlock_mutex_t *m;
    const char *name;
    uint64_t parent_fence;
    uint64_t fence;
    long long evals_before, evals_after;
    int holds_before;
} ca_fork;

static int ca_fork_child(void *p) {
    ca_fork *a = p;
    /* The parent's object, inherited: the child holds nothing. */
    a->holds_before = dlock_mutex_holds(a->m);
    DLT_CK(a->holds_before, 0);
    DLT_CK(dlock_mutex_unlock(a->m), EPERM);
    a->evals_before = dlt_evals();
    DLT_CK(ca_timedlock(a->m, CA_WAIT_MS), 0); /* from the server: the parent gives it up */
    a->evals_after = dlt_evals();
    a->fence = dlock_mutex_fence(a->m);
    DLT_CKT(a->evals_after > a->evals_before);
    DLT_CK(dlt_key_field(a->name, "pid"), getpid());
    DLT_CKT(a->fence > a->parent_fence);
    DLT_CK(dlock_mutex_unlock(a->m), 0);
    /* The child's own unlock may have kept it: give it back before _exit. */
    DLT_CK(ca_flush(a->name), 0);
    DLT_CK(dlt_key_exists(a->name), 0);
    return 0;
}

static void test_cache_fork(void) {
    const char *name = "cache/fork";
    dlock_mutex_t m;
    uint64_t f0 = 0;
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    ca_fork *a = DLT_SHM_NEW(ca_fork, 1);
    a->m = &m;
    a->name = name;
    a->parent_fence = f0;
    a->holds_before = -1;
    pid_t pid = dlt_spawn(ca_fork_child, a);
    CU_ASSERT_TRUE(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 2 * CA_WAIT_MS), 0);
    DLT_ASSERT_INT_EQ(a->holds_before, 0);
    CU_ASSERT_TRUE(a->fence > f0);
    /* The parent's next lock works: from the server, after the child's. */
    DLT_ASSERT_ERR(ca_timedlock(&m, CA_WAIT_MS), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > a->fence);
    DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), getpid());
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_SHM_FREE(a, 1);
}

/* ========================================================================
 * 8. exit() releases a cached lock; SIGKILL leaves it to its lease, and a
 * robust caching mutex then means EOWNERDEAD
 * ====================================================================== */

typedef struct ca_dier {
    const char *name;
    int robust;
    unsigned lease;
    int cached;
    int kill_me;
} ca_dier;

static dlock_mutex_t ca_exit_mutex; /* static: still reachable at exit() */

static int ca_dier_main(void *p) {
    ca_dier *a = p;
    ca_spec s = { 1, -1, a->robust, a->lease, NULL, NULL, NULL };
    DLT_CK(ca_open_spec(&ca_exit_mutex, a->name, &s), 0);
    DLT_CK(ca_warm(&ca_exit_mutex, a->name, NULL), 0);
    dlt_flag_set(&a->cached, 1);
    if (a->kill_me) {
        dlt_flag_wait(&a->kill_me, 2, DLT_JOIN_MS); /* killed long before */
        return 99;
    }
    ca_child_exit(0); /* the library gives the cached lock back */
    return 0;
}

static void ca_exit_case(const char *name, int robust) {
    ca_dier *a = DLT_SHM_NEW(ca_dier, 1);
    dlock_mutex_t m;
    ca_spec s = { 1, -1, robust, CA_LONG_LEASE, NULL, NULL, NULL };
    a->name = name;
    a->robust = robust;
    a->lease = CA_LONG_LEASE; /* no running out: only a release frees it */
    pid_t pid = dlt_spawn(ca_dier_main, a);
    CU_ASSERT_TRUE(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 2 * CA_WAIT_MS), 0);
    DLT_ASSERT_INT_EQ(a->cached, 1);
    /* Released at exit(), not left to its (10 minute) lease. */
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_ASSERT_ERR(ca_open_spec(&m, name, &s), 0);
    int rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, 0); /* a robust one: clean, no EOWNERDEAD */
    if (rc == 0 || rc == EOWNERDEAD) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_SHM_FREE(a, 1);
}

static void test_cache_exit_releases(void) {
    ca_exit_case("cache/exit", 0);
}

static void test_cache_exit_releases_robust(void) {
    ca_exit_case("cache/exit-robust", 1);
}

/* A cached lock another process asks for goes back to the server even
 * when its process exits at that very moment.  The renewal thread gives
 * it back once the request is heard; the hold is off the held list while
 * that release is on its way, and exit() must wait for it, or the asker
 * waits for the lease.  Each round: A takes the lock (3 s lease) and
 * keeps it cached; B, here, asks; A watches the server and exits as soon
 * as B is queued -- about when A's renewal thread starts giving the lock
 * back.  B must have it well before A's lease would run out. */
#define CA_RACE_ROUNDS 20
#define CA_RACE_LEASE 3000

typedef struct ca_racer {
    const char *name;
    int cached, done; /* done: B has the lock (it never queued: A's cache was not kept) */
    int delay_us;     /* A exits this long after it saw B queued */
} ca_racer;

static int ca_racer_main(void *p) {
    ca_racer *a = p;
    dlock_mutex_t m;
    char q[600];
    redisContext *rc;
    double end;
    int rc_warm;
    if (ca_open(&m, a->name, CA_RACE_LEASE) != 0) return 10;
    /* Kept in the cache once the release channel is heard (the first
     * acquire subscribes, and the subscriber thread confirms it when it
     * runs: on a loaded host that can outlast any number of quick lock
     * and unlock pairs, so this waits by the clock). */
    if ((rc_warm = ca_warm(&m, a->name, NULL)) != 0) return rc_warm < 0 ? 16 : 11;
    ca_key(a->name, q, sizeof q - 8);
    strcat(q, ":fifo");
    if ((rc = redisConnect("127.0.0.1", dlt_server.port)) == NULL || rc->err) return 13;
    dlt_flag_set(&a->cached, 1);
    end = dlt_now() + CA_WAIT_MS / 1000.0;
    for (;;) {
        redisReply *r = redisCommand(rc, "EXISTS %s", q);
        long long n = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        if (r != NULL) freeReplyObject(r);
        if (n == 1 || dlt_flag_get(&a->done)) break;
        if (n < 0 || dlt_now() > end) return 14;
    }
    redisFree(rc);
    /* A's renewal thread hears the request about now: give it a moment
     * (more each round, from 0 to 190 us), so that exit() comes at a
     * different point of its giving the lock back each time. */
    if (a->delay_us > 0) usleep((useconds_t)a->delay_us);
    if (dlock_mutex_destroy(&m) != 0) return 15;
    ca_child_exit(0); /* while A's renewal thread gives the lock back */
    return 0;
}

static void test_cache_exit_while_giving_back(void) {
    const char *name = "cache/exit-race";
    ca_racer *a = DLT_SHM_NEW(ca_racer, 1);
    dlock_mutex_t m;
    ca_spec s = { 0, -1, 0, CA_RACE_LEASE, NULL, NULL, NULL };
    double worst = 0;
    int i, late = 0;
    a->name = name;
    DLT_ASSERT_ERR(ca_open_spec(&m, name, &s), 0);
    for (i = 0; i < CA_RACE_ROUNDS; i++) {
        pid_t pid;
        double t0, dt;
        int rc;
        a->cached = a->done = 0;
        a->delay_us = i * 10;
        pid = dlt_spawn(ca_racer_main, a);
        CU_ASSERT_TRUE_FATAL(pid > 0);
        CU_ASSERT_TRUE(dlt_flag_wait(&a->cached, 1, CA_WAIT_MS));
        t0 = dlt_now();
        rc = ca_timedlock(&m, CA_WAIT_MS);
        dt = dlt_now() - t0;
        dlt_flag_set(&a->done, 1);
        DLT_ASSERT_ERR(rc, 0);
        if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_INT_EQ(dlt_wait(pid, CA_WAIT_MS), 0);
        if (dt > worst) worst = dt;
        if (dt > 1.5) late++;
    }
    printf("  %d rounds: the longest wait for the lock given back at exit %.3f s; %d waited for the lease\n",
           CA_RACE_ROUNDS, worst, late);
    DLT_ASSERT_INT_EQ(late, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_SHM_FREE(a, 1);
}

static void test_cache_sigkill_robust_ownerdead(void) {
    const char *name = "cache/killed";
    ca_dier *a = DLT_SHM_NEW(ca_dier, 1);
    dlock_mutex_t m;
    ca_spec s = { 1, -1, 1, 0, NULL, NULL, NULL };
    a->name = name;
    a->robust = 1;
    a->lease = 1000;
    a->kill_me = 1;
    DLT_ASSERT_ERR(ca_open_spec(&m, name, &s), 0);
    pid_t pid = dlt_spawn(ca_dier_main, a);
    CU_ASSERT_TRUE(pid > 0);
    int cached = dlt_flag_wait(&a->cached, 1, CA_WAIT_MS);
    CU_ASSERT_TRUE(cached);
    if (pid > 0) kill(pid, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, CA_WAIT_MS), 128 + SIGKILL);
    if (cached) {
        /* The lease runs out; the robust marker says a holder died. */
        int rc = ca_timedlock(&m, CA_WAIT_MS);
        DLT_ASSERT_ERR(rc, EOWNERDEAD);
        if (rc == EOWNERDEAD) {
            DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
            DLT_ASSERT_ERR(dlock_mutex_consistent(&m), 0);
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
            /* Made consistent: the next lock is a plain one. */
            DLT_ASSERT_ERR(ca_timedlock(&m, CA_WAIT_MS), 0);
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        } else if (rc == 0) {
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        }
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_SHM_FREE(a, 1);
}

/* ========================================================================
 * 9. A lease lost while the lock is idle in the cache, every hold of it
 * confirmed by a renewal since: dropped silently; while a thread holds it,
 * or after a hold ended into the cache unconfirmed: the lost-lock handler
 * ====================================================================== */

static int ca_lost_count, ca_lost_why;

static void ca_on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    __atomic_store_n(&ca_lost_why, dlock_lost_reason(), __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&ca_lost_count, 1, __ATOMIC_SEQ_CST);
}

static void test_cache_lost_while_idle(void) {
    const char *name = "cache/lost";
    const unsigned lease = 600;
    ca_spec s = { 1, -1, 0, lease, ca_on_lost, NULL, NULL };
    dlock_mutex_t m;
    uint64_t f0 = 0;
    CU_ASSERT_FATAL(lease >= DLOCK_LEASE_MIN_MS);
    __atomic_store_n(&ca_lost_count, 0, __ATOMIC_SEQ_CST);
    DLT_ASSERT_ERR(ca_open_spec(&m, name, &s), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    dlt_sleep_ms(lease); /* renewed since the last hold ended: it was exclusive */

    /* Idle in the cache: the key goes behind its back. */
    DLT_ASSERT_INT_EQ(ca_del(name), 1);
    dlt_sleep_ms(3 * lease); /* past the renewal, and past the lease */
    DLT_ASSERT_INT_EQ(__atomic_load_n(&ca_lost_count, __ATOMIC_SEQ_CST), 0);
    DLT_ASSERT_ERR(ca_timedlock(&m, CA_WAIT_MS), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    /* Really on the server again, with a fence from it. */
    DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), getpid());
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > f0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    dlt_sleep_ms(lease); /* a handler that is late would show by now */
    DLT_ASSERT_INT_EQ(__atomic_load_n(&ca_lost_count, __ATOMIC_SEQ_CST), 0);

    /* Held by a thread (from the cache): the loss is reported, once, and
     * the unlock says EPERM. */
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > f0);
    DLT_ASSERT_INT_EQ(ca_del(name), 1);
    double end = dlt_now() + 10.0;
    while (__atomic_load_n(&ca_lost_count, __ATOMIC_SEQ_CST) == 0 && dlt_now() < end) dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&ca_lost_count, __ATOMIC_SEQ_CST), 1);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(ca_timedlock(&m, CA_WAIT_MS), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&ca_lost_count, __ATOMIC_SEQ_CST), 1);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
}

/* A hold that ends into the cache asks the server nothing: had the
 * server lost the lock before (here: its key deleted while a thread holds
 * it, the renewal not yet come), that hold was not exclusive.  The
 * renewal that then finds the cached lock gone tells the lost-lock
 * handler, once (DLOCK_LOST_BROKEN), and the next lock goes to the server
 * for a fresh hold and fence.  (A renewal that comes between the delete
 * and the unlock finds the hold held: the unlock says EPERM, told as
 * ever; the round is then made again.) */
static void test_cache_lost_after_unconfirmed_hold(void) {
    const char *name = "cache/unconfirmed";
    const unsigned lease = 600;
    ca_spec s = { 1, -1, 0, lease, ca_on_lost, NULL, NULL };
    dlock_mutex_t m;
    uint64_t f0 = 0;
    int urc = -1, tries;
    __atomic_store_n(&ca_lost_count, 0, __ATOMIC_SEQ_CST);
    DLT_ASSERT_ERR(ca_open_spec(&m, name, &s), 0);
    for (tries = 0; tries < 5 && urc != 0; tries++) {
        CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
        dlt_sleep_ms(lease); /* every hold so far confirmed */
        __atomic_store_n(&ca_lost_count, 0, __ATOMIC_SEQ_CST);
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* from the cache */
        DLT_ASSERT_INT_EQ(ca_del(name), 1);
        urc = dlock_mutex_unlock(&m); /* into the cache: 0, no round trip */
        if (urc != 0) DLT_ASSERT_ERR(urc, EPERM);
        double end = dlt_now() + 10.0;
        while (__atomic_load_n(&ca_lost_count, __ATOMIC_SEQ_CST) == 0 && dlt_now() < end) dlt_sleep_ms(10);
        DLT_ASSERT_INT_EQ(__atomic_load_n(&ca_lost_count, __ATOMIC_SEQ_CST), 1);
    }
    DLT_ASSERT_ERR(urc, 0);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&ca_lost_why, __ATOMIC_SEQ_CST), DLOCK_LOST_BROKEN);
    /* The next hold comes from the server, with a fence of its own. */
    DLT_ASSERT_ERR(ca_timedlock(&m, CA_WAIT_MS), 0);
    DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), getpid());
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > f0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    dlt_sleep_ms(lease); /* told once, not again */
    DLT_ASSERT_INT_EQ(__atomic_load_n(&ca_lost_count, __ATOMIC_SEQ_CST), 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
}

/* ========================================================================
 * Destroy: a cached lock is not a held one.  Destroying an object while
 * another object of the name remains keeps the cache; destroying the last
 * one gives the lock back to the server, so that the client can go too.
 * ====================================================================== */

static void test_cache_destroy_and_client(void) {
    const char *name = "cache/client";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m, m2;
    uint64_t f0 = 0;
    CU_ASSERT_FATAL(dlt_client_make(&cl, dlt_server.url, 0) == 0);
    ca_spec s = { 1, -1, 0, CA_LONG_LEASE, NULL, NULL, cl };
    DLT_ASSERT_ERR(ca_open_spec(&m, name, &s), 0);
    DLT_ASSERT_ERR(ca_open_spec(&m2, name, &s), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    /* Unlocked from the program's point of view: destroy is allowed, and
     * with m2 still open the lock stays cached... */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    CU_ASSERT_TRUE(ca_server_shows_cached(name, getpid()));
    DLT_ASSERT_ERR(dlock_mutex_lock(&m2), 0); /* ...and m2 takes it locally */
    CU_ASSERT_TRUE(dlock_mutex_fence(&m2) > f0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), EBUSY); /* m2 is still there (and holds it) */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), EBUSY);  /* held */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    /* The last object goes: the lock goes back to the server. */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    /* And the client, with no mutex left, can be destroyed. */
    int rc = dlock_client_destroy(cl);
    DLT_ASSERT_ERR(rc, 0);
    if (rc != 0) {
        printf("  dlock_client_destroy: %s [%s]\n", dlt_errno_label(rc), dlock_last_error());
        /* Give the cache back through the client, then destroy it. */
        dlock_mutex_t p;
        ca_spec ps = { 0, -1, 0, CA_LONG_LEASE, NULL, NULL, cl };
        if (ca_open_spec(&p, name, &ps) == 0) {
            if (ca_timedlock(&p, CA_WAIT_MS) == 0) dlock_mutex_unlock(&p);
            dlock_mutex_destroy(&p);
        }
        DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    }
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
}

/* ========================================================================
 * Local fences follow the server's clock: 2^20 local holds with no
 * server command,
 * each fence above the last and none past the server's clock; the fence
 * key stays the server-issued fence (nothing reserved ahead of the clock)
 * ====================================================================== */

static void test_cache_fences_follow_the_clock(void) {
    const char *name = "cache/block";
    dlock_mutex_t m;
    uint64_t f0 = 0, prev, f, fk;
    long long i, bad = 0, base;
    char key[300];
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    base = dlt_key_field(name, "fence"); /* the server-issued fence */
    CU_ASSERT_FATAL(base > 0 && (uint64_t)base <= f0);
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    prev = f0;
    double t0 = dlt_now();
    for (i = 0; i < (long long)CA_BLOCK; i++) {
        if (dlock_mutex_lock(&m) != 0) {
            bad++;
            break;
        }
        f = dlock_mutex_fence(&m);
        if (f <= prev) bad++;
        prev = f;
        if (dlock_mutex_unlock(&m) != 0) {
            bad++;
            break;
        }
    }
    double took = dlt_now() - t0;
    uint64_t now = ca_server_ns();
    printf("  %lld local holds in %.2f s; fences %llu..%llu; the server's clock then %llu\n", i, took,
           (unsigned long long)f0, (unsigned long long)prev, (unsigned long long)now);
    DLT_ASSERT_INT_EQ(bad, 0);
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    CU_ASSERT_TRUE(prev <= now);
    CU_ASSERT_TRUE(prev - f0 >= (uint64_t)i); /* (at least one each) */
    DLT_ASSERT_INT_EQ(dlt_key_field(name, "fence"), base);
    dlt_lock_key(name, key, sizeof key);
    redisReply *r = dlt_redis_cmd(&dlt_server, "GET %s:fence", key);
    fk = r != NULL && r->type == REDIS_REPLY_STRING ? strtoull(r->str, NULL, 10) : 0;
    if (r != NULL) freeReplyObject(r);
    DLT_ASSERT_INT_EQ(fk, (uint64_t)base); /* no block reserved ahead of the clock */
    /* Still cached: the next hold is local too. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > prev);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
}

/* ========================================================================
 * A request made before the holder's subscription is confirmed.  The
 * holder's connections go through a proxy that holds every answer back
 * (DELAY), so its subscription becomes active some time after it got the
 * lock; another process asks for the lock in between (and again, once it
 * is itself subscribed).  The holder's unlock comes only after its
 * subscription is active: the lock must still go to the waiting process,
 * which has asked for it, rather than stay in the holder's cache until the
 * waiter asks again (it re-asks only every third of its own lease: 200 s
 * here, far beyond its 15 s deadline).
 * ====================================================================== */

typedef struct ca_late {
    const char *name;
    int start, asking, got, go;
    int rc;
    double waited;
} ca_late;

static int ca_late_child(void *p) {
    ca_late *a = p;
    dlock_mutex_t m;
    dlock_mutex_t w;
    /* Connections, scripts and subscriber made beforehand, so that this
     * process's requests come quickly after the grant. */
    DLT_CK(dlt_mutex_make(&w, "cache/late-sub-warm", 0, NULL), 0);
    DLT_CK(dlock_mutex_lock(&w), 0);
    DLT_CK(dlock_mutex_unlock(&w), 0);
    DLT_CK(dlock_mutex_destroy(&w), 0);
    DLT_CK(dlt_mutex_make(&m, a->name, CA_LONG_LEASE, NULL), 0);
    DLT_CKT(dlt_flag_wait(&a->start, 1, DLT_JOIN_MS));
    /* As soon as the holder has the lock on the server. */
    double end = dlt_now() + 20.0;
    while (dlt_key_exists(a->name) != 1) {
        DLT_CKT(dlt_now() < end);
        usleep(200);
    }
    dlt_flag_set(&a->asking, 1);
    double t0 = dlt_now();
    a->rc = ca_timedlock(&m, CA_WAIT_MS);
    a->waited = dlt_now() - t0;
    DLT_CK(a->rc, 0);
    dlt_flag_set(&a->got, 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_cache_request_before_subscribed(void) {
    const char *name = "cache/late-sub";
    ca_late *a = DLT_SHM_NEW(ca_late, 1);
    dlock_client_t *cl = NULL;
    dlock_mutex_t m, plain;
    dlt_proxy *px;
    a->name = name;
    a->rc = -1;
    /* Fork first, then start the proxy's threads (see fixture.h). */
    pid_t pid = dlt_spawn(ca_late_child, a);
    CU_ASSERT_TRUE(pid > 0);
    px = dlt_proxy_start(dlt_server.port);
    CU_ASSERT_TRUE(px != NULL);
    if (px != NULL && pid > 0 && dlt_client_make(&cl, dlt_proxy_url(px), 0) == 0) {
        ca_spec s = { 1, -1, 0, CA_LONG_LEASE, NULL, NULL, cl };
        ca_spec ps = { 0, -1, 0, CA_LONG_LEASE, NULL, NULL, cl };
        DLT_ASSERT_ERR(ca_open_spec(&m, name, &s), 0);
        DLT_ASSERT_ERR(ca_open_spec(&plain, name, &ps), 0);
        dlt_proxy_set(px, DLT_PROXY_DELAY, 300, NULL, 0);
        dlt_flag_set(&a->start, 1);
        int rc = dlock_mutex_lock(&m);
        DLT_ASSERT_ERR(rc, 0);
        CU_ASSERT_TRUE(dlt_flag_wait(&a->asking, 1, CA_WAIT_MS));
        /* Both processes subscribed on the server; then time for the
         * holder to see its own subscription confirmed (answers take
         * 300 ms through the proxy). */
        CU_ASSERT_TRUE(ca_wait_numsub(name, 2, CA_WAIT_MS));
        dlt_sleep_ms(1500);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&a->got), 0);
        if (rc == 0) {
            int urc = dlock_mutex_unlock(&m);
            if (urc != 0) printf("  unlock: %s [%s]\n", dlt_errno_label(urc), dlock_last_error());
            DLT_ASSERT_ERR(urc, 0);
        }
        int got = dlt_flag_wait(&a->got, 1, CA_WAIT_MS + 5000);
        CU_ASSERT_TRUE(got);
        if (!got) {
            printf("  the waiting process did not get the lock: this process kept it in its cache (%s)\n",
                   ca_server_shows_cached(name, getpid()) ? "the server still shows it cached here" : "?");
        }
        DLT_ASSERT_INT_EQ(dlt_wait(pid, 2 * CA_WAIT_MS), 0);
        pid = -1;
        printf("  the waiting process: %s after %.3f s\n", dlt_errno_label(a->rc), a->waited);
        /* Clean up: give the cache back through the plain object. */
        dlt_proxy_pass(px);
        if (ca_timedlock(&plain, CA_WAIT_MS) == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&plain), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&plain), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    } else {
        CU_FAIL("setup");
    }
    dlt_flag_set(&a->start, 1);
    if (pid > 0) dlt_wait(pid, 2 * CA_WAIT_MS);
    if (px != NULL) dlt_proxy_stop(px);
    DLT_SHM_FREE(a, 1);
}

/* The number of entries in the lock's fair queue, -1 on error. */
static long long ca_queued(const char *name) {
    char key[300];
    long long n = -1;
    dlt_lock_key(name, key, sizeof key);
    redisReply *r = dlt_redis_cmd(&dlt_server, "LLEN %s:fifo", key);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) n = r->integer;
    if (r != NULL) freeReplyObject(r);
    return n;
}

/* The number of waits registered on the lock (the waits `dlock status`
 * lists, but for queued ones that hold nothing: their queue entries list
 * them); dlt_reply_int's LLONG_MIN on error. */
static long long ca_waiting(const char *name) {
    char key[300];
    dlt_lock_key(name, key, sizeof key);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %s:waiting", key));
}

static int ca_count_waiter(const dlock_lock_waiter_t *w, void *arg) {
    (void)w;
    ++*(int *)arg;
    return 0;
}

/* The waiters dlock_lock_waiters lists for name, or -1. */
static int ca_listed(const char *name) {
    int n = 0;
    return dlock_lock_waiters(NULL, name, ca_count_waiter, &n) == 0 ? n : -1;
}

/* Another process asks for name (lock) through a mutex that caches or
 * not, and is in the fair queue: its request (*out, shared memory) and
 * its pid. */
static pid_t ca_spawn_queued(const char *name, int caching, ca_req **out) {
    int i, queued = 0;
    ca_req *a;
    pid_t pid = ca_spawn(name, REQ_LOCK, caching, &a);
    CU_ASSERT_TRUE(dlt_flag_wait(&a->asking, 1, CA_WAIT_MS));
    for (i = 0; i < CA_WAIT_MS / 10 && !(queued = ca_queued(name) == 1); i++) dlt_sleep_ms(10);
    CU_ASSERT_TRUE(queued);
    *out = a;
    return pid;
}

/* A caching waiter that a release hands the lock to takes it from the
 * grant alone: the grant marked it cached (FENCE:MS:1), so it makes no
 * confirming acquire of its own -- one script runs between this
 * process's unlock and the waiter holding the lock: the release. */
static void test_cache_grant_taken_alone(void) {
    const char *name = "cache/grant";
    dlock_mutex_t m;
    int i;
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);

    ca_req *a;
    pid_t pid = ca_spawn_queued(name, 1, &a);
    CU_ASSERT_TRUE(ca_wait_numsub(name, 2, CA_WAIT_MS));
    /* It holds nothing: its queue entry lists its wait (what `dlock
     * status` shows), which it never registers -- none of its scripts
     * runs until its grant. */
    for (i = 0; i < CA_WAIT_MS / 10 && ca_listed(name) != 1; i++) dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(ca_listed(name), 1);
    DLT_ASSERT_INT_EQ(ca_waiting(name), 0);
    /* The waiter asks once more when its subscription is confirmed: wait
     * until no script runs for 100 ms (it sleeps until its grant). */
    for (i = 0; i < 50; i++) {
        DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
        dlt_sleep_ms(100);
        if (dlt_evals() == 0) break;
    }
    DLT_ASSERT_INT_EQ(dlt_evals(), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    int got = dlt_flag_wait(&a->got, 1, CA_WAIT_MS + 5000);
    CU_ASSERT_TRUE(got);
    if (got) {
        char key[300];
        dlt_lock_key(name, key, sizeof key);
        /* The release (this process's unlock, or its renewal thread giving
         * the cache back) and nothing else (an EVALSHA refused with
         * NOSCRIPT, then sent as EVAL, is one). */
        DLT_ASSERT_INT_EQ(dlt_evals_ok(), 1);
        /* The grant writes the new holder's fields and its cache mark in
         * one HSET, and sets one PEXPIRE on the hash and one on the grant
         * list. */
        DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "hset"), 1);
        DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "pexpire"), 2);
        DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), pid);
        redisReply *r = dlt_redis_cmd(&dlt_server, "GET %s:fence", key);
        CU_ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_STRING);
        if (r != NULL && r->type == REDIS_REPLY_STRING)
            DLT_ASSERT_INT_EQ(strtoull(r->str, NULL, 10), a->fence); /* the grant's: nothing reserved */
        if (r != NULL) freeReplyObject(r);
    }
    dlt_flag_set(&a->go, 1);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 2 * CA_WAIT_MS), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(a, 1);
}

/* A caching holder's lock granted to a waiter that does not cache: the
 * grant rewrites the holder's hash in place (the release makes no DEL
 * first), and the cache mark goes with the old holder -- were it left,
 * the new holder's renewal would take the lock for a cached one that
 * somebody asked for, and give it back. */
static void test_cache_grant_to_plain_waiter(void) {
    const char *name = "cache/grant-plain";
    dlock_mutex_t m;
    DLT_ASSERT_ERR(ca_open(&m, name, CA_LONG_LEASE), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(ca_hexists(name, "cache"), 1);

    ca_req *a;
    pid_t pid = ca_spawn_queued(name, 0, &a);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    int got = dlt_flag_wait(&a->got, 1, CA_WAIT_MS + 5000);
    CU_ASSERT_TRUE(got);
    if (got) {
        DLT_ASSERT_INT_EQ(dlt_key_field(name, "pid"), pid);
        DLT_ASSERT_INT_EQ(ca_hexists(name, "owner"), 1);
        DLT_ASSERT_INT_EQ(ca_hexists(name, "cache"), 0);
    }
    dlt_flag_set(&a->go, 1);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 2 * CA_WAIT_MS), 0);
    DLT_ASSERT_INT_EQ(a->violations, 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_SHM_FREE(a, 1);
}

/* A request whose "wanted" message this process never hears (here: the
 * mark a waiting acquire leaves in the hash, `w`, with no message at
 * all) still gets the lock back: the renewal of the idle cached hold
 * says someone asked, and the renewal thread gives it up.  With a 900 ms
 * lease (renewed every 300 ms) within a few seconds; without that answer
 * the cache would be renewed for ever. */
static void test_cache_wanted_unheard_goes_back(void) {
    const char *name = "cache/unheard";
    char key[300];
    dlock_mutex_t m;
    uint64_t f0 = 0;
    double t0;
    int i, gone = 0;
    DLT_ASSERT_ERR(ca_open(&m, name, 900), 0);
    CU_ASSERT_FATAL(ca_warm(&m, name, &f0) == 0);
    dlt_sleep_ms(700); /* renewed twice meanwhile: kept, nobody asked */
    DLT_ASSERT_INT_EQ(ca_server_shows_cached(name, getpid()), 1);
    dlt_lock_key(name, key, sizeof key);
    redisReply *r = dlt_redis_cmd(&dlt_server, "HSET %s w 1", key);
    CU_ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_INTEGER);
    if (r != NULL) freeReplyObject(r);
    t0 = dlt_now();
    for (i = 0; i < 500 && !(gone = !dlt_key_exists(name)); i++) dlt_sleep_ms(10);
    CU_ASSERT_TRUE(gone);
    printf("  the idle cached lock went back %.3f s after the unheard request\n", dlt_now() - t0);
    /* And the next lock here goes to the server (a fresh fence). */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > f0 + 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(ca_flush(name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* ========================================================================
 * The suite
 * ====================================================================== */

static const struct dlt_test tests[] = {
    DLT_TEST(test_cache_attr),
    DLT_TEST(test_cache_no_round_trips),
    DLT_TEST(test_cache_fences),
    DLT_TEST(test_cache_idle_giveup_lock),
    DLT_TEST(test_cache_idle_giveup_caching_requester),
    DLT_TEST(test_cache_idle_giveup_trylock),
    DLT_TEST(test_cache_idle_giveup_rdlock),
    DLT_TEST(test_cache_giveup_at_unlock),
    DLT_TEST(test_cache_pingpong_turns),
    DLT_TEST(test_cache_pingpong_free),
    DLT_TEST(test_cache_thread_semantics),
    DLT_TEST(test_cache_other_objects_give_up),
    DLT_TEST(test_cache_fork),
    DLT_TEST(test_cache_exit_releases),
    DLT_TEST(test_cache_exit_releases_robust),
    DLT_TEST(test_cache_exit_while_giving_back),
    DLT_TEST(test_cache_sigkill_robust_ownerdead),
    DLT_TEST(test_cache_lost_while_idle),
    DLT_TEST(test_cache_lost_after_unconfirmed_hold),
    DLT_TEST(test_cache_fences_follow_the_clock),
    DLT_TEST(test_cache_request_before_subscribed),
    DLT_TEST(test_cache_grant_taken_alone),
    DLT_TEST(test_cache_grant_to_plain_waiter),
    DLT_TEST(test_cache_wanted_unheard_goes_back),
    DLT_TEST(test_cache_destroy_and_client),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "cache", tests);
}
