/* labels: redis */
/* test_pipelined.c -- the pipelined unlock (dlock_mutexattr_setpipelined,
 * URL pipelined=1): unlock returns without waiting for the server, the
 * server holds the lock until the release lands, a release that finds the
 * hold gone is told to the lost-lock handler, a release whose answer is
 * lost (or never reaches the server) is asked again, and exit, fork and
 * destroy read the answers still owed; a release is held back for the
 * thread's next request while nobody else wants the lock, and written at
 * once (the thread then yields its CPU once) when someone does.  The fault proxy (proxy.h) delays,
 * swallows or cuts the server's answers.
 */
#include "fixture.h"
#include "proxy.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dlock.h>

/* ------------------------------------------------------------ helpers */

static int lost_count;
static int lost_fd = -1; /* a child's pipe to tell its parent */

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    __atomic_add_fetch(&lost_count, 1, __ATOMIC_SEQ_CST);
    if (lost_fd >= 0) (void)dlt_pipe_put(lost_fd, 'L');
}

static int lost_get(void) {
    return __atomic_load_n(&lost_count, __ATOMIC_SEQ_CST);
}

/* A mutex of type `type` with pipelined = pipe (-1: unset) on client c. */
static int make(dlock_mutex_t *m, const char *name, int type, int pipe, unsigned lease_ms, dlock_client_t *c) {
    dlock_mutexattr_t a;
    int rc;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_settype(&a, type);
    if (lease_ms) dlock_mutexattr_setlease(&a, lease_ms);
    if (pipe >= 0 && (rc = dlock_mutexattr_setpipelined(&a, pipe)) != 0) return rc;
    if (c != NULL) dlock_mutexattr_setclient(&a, c);
    dlock_mutexattr_setlostcallback(&a, on_lost, NULL);
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static void del_key(const char *name) {
    char key[600];
    dlt_lock_key(name, key, sizeof key);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "DEL %s", key));
}

static int wait_key_gone(const char *name, int ms) {
    double end = dlt_now() + ms / 1000.0;
    while (dlt_now() < end) {
        if (!dlt_key_exists(name)) return 1;
        dlt_sleep_ms(5);
    }
    return !dlt_key_exists(name);
}

static int unlock_rc = -1;

static void *unlock_thread(void *arg) {
    unlock_rc = dlock_mutex_unlock(arg);
    return NULL;
}

/* ------------------------------------------------------------- the attribute */

static void test_einval_on_other_types(void) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    int on = -1;
    DLT_ASSERT_ERR(make(&m, "pipe/errorcheck", DLOCK_MUTEX_ERRORCHECK, 1, 0, NULL), EINVAL);
    DLT_ASSERT_ERR(make(&m, "pipe/recursive", DLOCK_MUTEX_RECURSIVE, 1, 0, NULL), EINVAL);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST);
    dlock_mutexattr_settype(&a, DLOCK_MUTEX_NORMAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setpipelined(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "pipe/robust", &a), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setpipelined(&a, 2), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getpipelined(&a, &on), 0);
    DLT_ASSERT_INT_EQ(on, 1);
    DLT_ASSERT_ERR(dlock_mutexattr_setpipelined(&a, 0), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getpipelined(&a, &on), 0);
    DLT_ASSERT_INT_EQ(on, 0);
    dlock_mutexattr_destroy(&a);
    /* (off on any type is fine) */
    DLT_ASSERT_ERR(make(&m, "pipe/errorcheck", DLOCK_MUTEX_ERRORCHECK, 0, 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(make(&m, "pipe/normal", DLOCK_MUTEX_NORMAL, 1, 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(make(&m, "pipe/default", DLOCK_MUTEX_DEFAULT, 1, 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    /* a process-owned NORMAL one (the LD_PRELOAD mode's default mutexes):
     * locked by one thread, unlocked by another, pipelined */
    dlock_mutexattr_init(&a);
    dlock_mutexattr_settype(&a, DLOCK_MUTEX_NORMAL);
    dlock_mutexattr_setowner(&a, DLOCK_OWNER_PROCESS);
    DLT_ASSERT_ERR(dlock_mutexattr_setpipelined(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "pipe/process", &a), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    {
        pthread_t th;
        int rc = -1;
        CU_ASSERT_FATAL(pthread_create(&th, NULL, unlock_thread, &m) == 0);
        pthread_join(th, NULL);
        rc = unlock_rc;
        DLT_ASSERT_ERR(rc, 0);
    }
    CU_ASSERT_TRUE(wait_key_gone("pipe/process", 2000));
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* ------------------------------------------------- unlock does not wait */

/* Through a proxy that swallows every request and never answers: a
 * pipelined unlock returns 0 (it does not wait for the answer); a
 * confirmed one, waiting, ends with ENOLCK at the unreachable bound.  URL
 * pipelined=1 is the default for the client's NORMAL mutexes, an
 * attribute set to 0 wins, and an ERRORCHECK mutex of that client keeps
 * the confirmed unlock (no EINVAL).  Once the server answers again, every
 * release is asked again and the locks are free. */
static void test_unlock_does_not_wait(void) {
    int before = lost_get();
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_mutex_t pm, cm, em;
    char url[256];
    CU_ASSERT_FATAL(p != NULL);
    snprintf(url, sizeof url, "%s?pipelined=1", dlt_proxy_url(p));
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 1000), 0);
    DLT_ASSERT_ERR(make(&pm, "pipe/fast", DLOCK_MUTEX_NORMAL, -1, 0, c), 0);
    DLT_ASSERT_ERR(make(&cm, "pipe/slow", DLOCK_MUTEX_NORMAL, 0, 0, c), 0);
    DLT_ASSERT_ERR(make(&em, "pipe/check", DLOCK_MUTEX_ERRORCHECK, -1, 0, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&pm), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&cm), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&em), 0);
    dlt_proxy_set(p, DLT_PROXY_DROP, 0, NULL, 0);

    DLT_ASSERT_ERR(dlock_mutex_unlock(&pm), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&pm), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&pm), EPERM); /* not held any more, here */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&cm), ENOLCK);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&em), ENOLCK);
    DLT_ASSERT_INT_EQ(dlt_key_exists("pipe/fast"), 1); /* the server holds it until the release lands */

    dlt_proxy_pass(p);
    dlt_proxy_close_all(p);
    CU_ASSERT_TRUE(wait_key_gone("pipe/fast", 8000));
    CU_ASSERT_TRUE(wait_key_gone("pipe/slow", 8000));
    CU_ASSERT_TRUE(wait_key_gone("pipe/check", 8000));
    DLT_ASSERT_ERR(dlock_mutex_destroy(&pm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&cm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&em), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(p);
    DLT_ASSERT_INT_EQ(lost_get(), before);
}

/* ------------------------------------------------ the release held back */

/* How many of `tries` uncontended pairs of m left the lock still held on
 * the server when unlock returned (its release held back for the
 * thread's next request). */
static int held_after_unlock(dlock_mutex_t *m, const char *name, int tries) {
    int i, held = 0;
    for (i = 0; i < tries; i++) {
        if (dlock_mutex_lock(m) != 0 || dlock_mutex_unlock(m) != 0) return -1;
        held += dlt_key_exists(name);
    }
    return held;
}

/* Nobody else wants the lock: the release waits for the thread's next
 * request (the next lock carries it), and with none it is written within
 * a bound all the same. */
static void test_release_held(void) {
    dlock_mutex_t m;
    DLT_ASSERT_ERR(make(&m, "pipe/held", DLOCK_MUTEX_NORMAL, 1, 0, NULL), 0);
    /* (a check that comes more than the hold's 2 ms after its unlock, on
     * a loaded machine, finds the release written: most, not all) */
    CU_ASSERT_TRUE(held_after_unlock(&m, "pipe/held", 20) >= 10);
    CU_ASSERT_TRUE(wait_key_gone("pipe/held", 1000));
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

struct taker {
    dlock_client_t *c;
    volatile int waiting;
    double took; /* when its lock returned */
    int rc;
};

static void *taker_thread(void *arg) {
    struct taker *t = arg;
    dlock_mutex_t m;
    if ((t->rc = make(&m, "pipe/wanted", DLOCK_MUTEX_NORMAL, 0, 0, t->c)) != 0) return NULL;
    t->waiting = 1;
    if ((t->rc = dlock_mutex_lock(&m)) == 0) {
        t->took = dlt_now();
        t->rc = dlock_mutex_unlock(&m);
    }
    if (t->rc == 0) t->rc = dlock_mutex_destroy(&m);
    return NULL;
}

/* Another owner waits while the release is held back: the release is
 * written within the bound and hands the lock over; its answer says a
 * waiter was told, and the next unlocks of that lock write their release
 * at once (not held back) for the quiet period. */
static void test_wanted_not_held(void) {
    struct taker t = { NULL, 0, 0, -1 };
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    pthread_t th;
    double t0;
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_server.url, 3000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&t.c, dlt_server.url, 3000), 0);
    DLT_ASSERT_ERR(make(&m, "pipe/wanted", DLOCK_MUTEX_NORMAL, 1, 0, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, taker_thread, &t) == 0);
    while (!t.waiting) dlt_sleep_ms(1);
    dlt_sleep_ms(100); /* (its request reached the server: it waits) */
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(t.rc, 0);
    CU_ASSERT_TRUE(t.took > t0 && t.took - t0 < 1.0);
    dlt_sleep_ms(50); /* (the answer read, by the renewal thread if no request did) */
    CU_ASSERT_TRUE(held_after_unlock(&m, "pipe/wanted", 20) < 10);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(t.c), 0);
}

/* The library's sched_yield calls, counted per thread (this definition
 * takes the place of libc's in this program). */
static __thread int yields;

int sched_yield(void) {
    yields++;
    return (int)syscall(SYS_sched_yield);
}

/* An unlock whose release goes out at once (another owner wanted the lock
 * lately) yields the thread's CPU once, so that the release reaches the
 * server before the caller's next step (an acquire by the process it hands
 * its turn to could otherwise get there first and find the lock held); a
 * release held back for the thread's next request does not. */
static void test_written_release_yields(void) {
    struct taker t = { NULL, 0, 0, -1 };
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    pthread_t th;
    int before;
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_server.url, 3000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&t.c, dlt_server.url, 3000), 0);
    DLT_ASSERT_ERR(make(&m, "pipe/wanted", DLOCK_MUTEX_NORMAL, 1, 0, c), 0);
    before = yields;
    CU_ASSERT_TRUE(held_after_unlock(&m, "pipe/wanted", 20) >= 0);
    CU_ASSERT_EQUAL(yields - before, 0); /* held back: nobody else wants it */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, taker_thread, &t) == 0);
    while (!t.waiting) dlt_sleep_ms(1);
    dlt_sleep_ms(100); /* (its request reached the server: it waits) */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(t.rc, 0);
    dlt_sleep_ms(50); /* (the answer that told of the waiter read) */
    before = yields;
    CU_ASSERT_TRUE(held_after_unlock(&m, "pipe/wanted", 20) >= 0);
    CU_ASSERT_EQUAL(yields - before, 20); /* written at once, each unlock yields once */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(t.c), 0);
}

/* ------------------------------------------------------------ exclusion */

struct excl {
    int counter;
    int bad;
};

static int excl_child(void *arg) {
    struct excl *x = arg;
    dlock_mutex_t m;
    uint64_t last = 0;
    int i;
    if (make(&m, "pipe/excl", DLOCK_MUTEX_NORMAL, 1, 0, NULL) != 0) return 10;
    for (i = 0; i < 150; i++) {
        int v;
        uint64_t f;
        if (dlock_mutex_lock(&m) != 0) return 11;
        f = dlock_mutex_fence(&m);
        if (f <= last) dlt_flag_add(&x->bad, 1);
        last = f;
        v = dlt_flag_get(&x->counter);
        if (i % 16 == 0) usleep(200);
        dlt_flag_set(&x->counter, v + 1);
        if (dlock_mutex_unlock(&m) != 0) return 12;
    }
    return dlock_mutex_destroy(&m) == 0 ? 0 : 13;
}

/* Two processes and a thread of this one each take the lock 150 times
 * with the pipelined unlock: no increment is lost, fences rise. */
static void test_exclusion(void) {
    struct excl *x = dlt_shm(sizeof *x);
    pid_t a, b;
    CU_ASSERT_FATAL(x != NULL);
    a = dlt_spawn(excl_child, x);
    b = dlt_spawn(excl_child, x);
    DLT_ASSERT_INT_EQ(excl_child(x), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(a, 60000), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(b, 60000), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&x->counter), 450);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&x->bad), 0);
    CU_ASSERT_TRUE(wait_key_gone("pipe/excl", 2000));
}

/* ------------------------------------------------------ lost lease told */

/* The key goes while held (as when the lease ran out on the server): the
 * pipelined unlock returns 0 and the handler hears of it within a bound,
 * with no other request made. */
static void test_lost_lease_told(void) {
    dlock_mutex_t m;
    int before = lost_get(), i;
    DLT_ASSERT_ERR(make(&m, "pipe/lost", DLOCK_MUTEX_NORMAL, 1, 10000, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    del_key("pipe/lost");
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    for (i = 0; i < 100 && lost_get() == before; i++) dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(lost_get(), before + 1);
    /* and only once; a good release after it tells nothing */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    dlt_sleep_ms(100);
    DLT_ASSERT_INT_EQ(lost_get(), before + 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* ---------------------------------------------- answers lost, server gone */

/* The release reaches the server but its answer is cut: unlock said 0,
 * the lock is free, nothing is told lost, and the client goes on. */
static void test_answer_lost(void) {
    int before = lost_get();
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    CU_ASSERT_FATAL(p != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(p), 3000), 0);
    DLT_ASSERT_ERR(make(&m, "pipe/cut", DLOCK_MUTEX_NORMAL, 1, 10000, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_proxy_set(p, DLT_PROXY_CUT, 0, NULL, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT_TRUE(wait_key_gone("pipe/cut", 2000));
    dlt_sleep_ms(100);
    dlt_proxy_pass(p);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    CU_ASSERT_TRUE(wait_key_gone("pipe/cut", 2000));
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(p);
    DLT_ASSERT_INT_EQ(lost_get(), before);
}

/* The release never reaches the server (a black hole, then the
 * connections die, as with a server that died): the lock stays held on
 * the server meanwhile -- exclusion as before -- and once the server
 * answers again the release is asked again, long before the lease ends. */
static void test_server_gone_with_release_pending(void) {
    int before = lost_get();
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    CU_ASSERT_FATAL(p != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(p), 3000), 0);
    DLT_ASSERT_ERR(make(&m, "pipe/gone", DLOCK_MUTEX_NORMAL, 1, 20000, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_proxy_set(p, DLT_PROXY_DROP, 0, NULL, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0); /* (a confirmed one: ENOLCK) */
    dlt_sleep_ms(300);
    DLT_ASSERT_INT_EQ(dlt_key_exists("pipe/gone"), 1); /* not released: still held */
    dlt_proxy_set(p, DLT_PROXY_CLOSE, 0, NULL, 0);
    dlt_proxy_close_all(p);
    dlt_sleep_ms(300);
    DLT_ASSERT_INT_EQ(dlt_key_exists("pipe/gone"), 1);
    dlt_proxy_pass(p);
    CU_ASSERT_TRUE(wait_key_gone("pipe/gone", 8000)); /* the lease is 20 s */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(p);
    DLT_ASSERT_INT_EQ(lost_get(), before);
}

/* --------------------------------------------- exit, fork, destroy flush */

/* Each case: through a proxy that holds answers 300 ms, lock, the key goes
 * (a lost lease), unlock; then at once exit / fork / destroy, which must
 * read the answer: the handler runs before it is done. */
struct flush_case {
    dlt_proxy *p;
    int fds[2];
};

static int exit_child(void *arg) {
    struct flush_case *fc = arg;
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    lost_fd = fc->fds[1];
    if (dlt_client_make(&c, dlt_proxy_url(fc->p), 5000) != 0) return 10;
    if (make(&m, "pipe/exit", DLOCK_MUTEX_NORMAL, 1, 10000, c) != 0) return 11;
    if (dlock_mutex_lock(&m) != 0) return 12;
    del_key("pipe/exit");
    if (dlock_mutex_unlock(&m) != 0) return 13;
    exit(0); /* the answer is 300 ms away */
}

static void test_exit_flushes(void) {
    struct flush_case fc;
    pid_t pid;
    CU_ASSERT_FATAL(pipe(fc.fds) == 0);
    fc.p = dlt_proxy_start(dlt_server.port);
    CU_ASSERT_FATAL(fc.p != NULL);
    dlt_proxy_set(fc.p, DLT_PROXY_DELAY, 300, NULL, 0);
    pid = dlt_spawn(exit_child, &fc);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 20000), 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(fc.fds[0], 100), 'L'); /* told before it exited */
    close(fc.fds[0]);
    close(fc.fds[1]);
    dlt_proxy_stop(fc.p);
}

static int fork_child_fn(void *arg) {
    dlock_mutex_t *m = arg;
    /* its own connections: a lock and a pipelined unlock work here */
    if (dlock_mutex_lock(m) != 0) return 20;
    if (dlock_mutex_unlock(m) != 0) return 21;
    return dlock_mutex_destroy(m) == 0 ? 0 : 22;
}

static void test_fork_and_destroy_flush(void) {
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    int before = lost_get();
    pid_t pid;
    CU_ASSERT_FATAL(p != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(p), 5000), 0);
    DLT_ASSERT_ERR(make(&m, "pipe/fork", DLOCK_MUTEX_NORMAL, 1, 10000, c), 0);
    dlt_proxy_set(p, DLT_PROXY_DELAY, 300, NULL, 0);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    del_key("pipe/fork");
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    pid = dlt_spawn(fork_child_fn, &m); /* fork reads the owed answer first */
    DLT_ASSERT_INT_EQ(lost_get(), before + 1);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 20000), 0);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    del_key("pipe/fork");
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0); /* reads it too */
    DLT_ASSERT_INT_EQ(lost_get(), before + 2);

    dlt_proxy_pass(p);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(p);
}

static const struct dlt_test tests[] = { DLT_TEST(test_einval_on_other_types),
                                         DLT_TEST(test_unlock_does_not_wait),
                                         DLT_TEST(test_release_held),
                                         DLT_TEST(test_wanted_not_held),
                                         DLT_TEST(test_written_release_yields),
                                         DLT_TEST(test_exclusion),
                                         DLT_TEST(test_lost_lease_told),
                                         DLT_TEST(test_answer_lost),
                                         DLT_TEST(test_server_gone_with_release_pending),
                                         DLT_TEST(test_exit_flushes),
                                         DLT_TEST(test_fork_and_destroy_flush),
                                         { NULL, NULL } };

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "pipelined", tests);
}
