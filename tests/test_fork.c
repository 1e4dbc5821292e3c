/* labels: redis */
/* test_fork.c -- fork and exit: a child holds none of its parent's locks,
 * uses its own connections (never the parent's sockets), and locks held
 * at exit() are released while _exit/SIGKILL leave them to expire.
 *
 * Children are made with dlt_spawn (so that exit() in a child never runs
 * the fixture's server clean-up) and report through exit codes only.
 */
#include "fixture.h"

#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <signal.h>
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

/* --------------------------------- one object, both sides of a fork */

static dlock_mutex_t shared_m; /* initialised before the fork */

static int both_sides_child(void *p) {
    struct dlt_chan *ch = p;
    if (dlock_mutex_holds(&shared_m) != 0) return 10;
    if (dlock_mutex_fence(&shared_m) != 0) return 11;
    if (dlock_mutex_trylock(&shared_m) != EBUSY) return 12; /* the parent holds it */
    if (dlock_mutex_unlock(&shared_m) != EPERM) return 13; /* we hold nothing */
    if (dlock_mutex_holds(&shared_m) != 0) return 14;
    if (dlt_pipe_put(ch->to_parent[1], 'C') != 0) return 15;
    if (dlt_pipe_get(ch->to_child[0], 10000) != 'U') return 16; /* parent unlocked */
    if (timedlock_ms(&shared_m, 5000) != 0) return 17;
    if (dlock_mutex_holds(&shared_m) != 1) return 18;
    if (dlock_mutex_fence(&shared_m) == 0) return 19;
    if (dlock_mutex_unlock(&shared_m) != 0) return 20;
    if (dlock_mutex_trylock(&shared_m) != 0) return 21;
    if (dlock_mutex_unlock(&shared_m) != 0) return 22;
    return 0;
}

static void test_object_usable_on_both_sides(void) {
    struct dlt_chan ch;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&shared_m, "fork/both", 600, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&shared_m), 0);
    uint64_t fence = dlock_mutex_fence(&shared_m);

    pid_t pid = dlt_spawn(both_sides_child, &ch);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(ch.to_parent[0], 10000), 'C');
    dlt_sleep_ms(700); /* past the lease: our renewals went on */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&shared_m), 1);
    CU_ASSERT_TRUE(dlock_mutex_fence(&shared_m) == fence);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&shared_m), 0);
    CU_ASSERT_TRUE(dlt_pipe_put(ch.to_child[1], 'U') == 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 15000), 0);

    /* Our connections are intact: a child writing on them would leave
     * stray replies or protocol errors behind. */
    int bad = 0, i;
    uint64_t last = 0;
    for (i = 0; i < 20; i++) {
        int rc = (i % 2) ? dlock_mutex_trylock(&shared_m) : dlock_mutex_lock(&shared_m);
        if (rc != 0) {
            printf("  parent op %d: %s (%s)\n", i, dlock_err_name(rc), dlock_last_error());
            bad++;
            continue;
        }
        uint64_t f = dlock_mutex_fence(&shared_m);
        if (f <= last) bad++;
        last = f;
        if (dlock_mutex_unlock(&shared_m) != 0) bad++;
    }
    DLT_ASSERT_INT_EQ(bad, 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fork/both"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&shared_m), 0);
    dlt_chan_close(&ch);
}

/* ------------------------------- fork while threads wait on a lock */

static dlock_mutex_t waited_m, other_m;

static int busy_holder_fn(void *p) {
    struct dlt_chan *ch = p;
    dlock_mutex_t m;
    if (dlock_mutex_init(&m, "fork/waited", NULL) != 0) return 10;
    if (dlock_mutex_lock(&m) != 0) return 11;
    if (dlt_pipe_put(ch->to_parent[1], 'H') != 0) return 12;
    if (dlt_pipe_get(ch->to_child[0], 20000) != 'R') return 13;
    if (dlock_mutex_unlock(&m) != 0) return 14;
    return 0;
}

static int forked_from_waiting_fn(void *p) {
    (void)p;
    /* The parent's waiters do not exist here; the objects still work. */
    if (dlock_mutex_holds(&waited_m) != 0) return 10;
    if (timedlock_ms(&other_m, 5000) != 0) return 11;
    if (dlock_mutex_holds(&other_m) != 1) return 12;
    if (dlock_mutex_unlock(&other_m) != 0) return 13;
    /* The waited lock is still held by the holder process. */
    if (dlock_mutex_trylock(&waited_m) != EBUSY) return 14;
    /* Waiting works in the child too (its own subscriber). */
    if (timedlock_ms(&waited_m, 300) != ETIMEDOUT) return 15;
    return 0;
}

struct waiter {
    int rc, unlock_rc;
};

static void *waiter_thread(void *p) {
    struct waiter *w = p;
    w->rc = timedlock_ms(&waited_m, 20000);
    w->unlock_rc = w->rc == 0 ? dlock_mutex_unlock(&waited_m) : -1;
    return NULL;
}

static void test_fork_while_threads_wait(void) {
    struct dlt_chan ch;
    pthread_t th[2];
    struct waiter w[2] = { { -1, -1 }, { -1, -1 } };
    int i;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&waited_m, "fork/waited", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&other_m, "fork/other", NULL), 0);

    pid_t holder = dlt_spawn(busy_holder_fn, &ch);
    CU_ASSERT_FATAL(holder > 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(ch.to_parent[0], 10000), 'H');
    for (i = 0; i < 2; i++) CU_ASSERT_FATAL(pthread_create(&th[i], NULL, waiter_thread, &w[i]) == 0);
    double t0 = dlt_now();
    while (dlt_numsub("dlock:{fork/waited}") < 1 && dlt_now() - t0 < 5.0) dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(dlt_numsub("dlock:{fork/waited}"), 1);
    dlt_sleep_ms(50);

    pid_t child = dlt_spawn(forked_from_waiting_fn, NULL);
    CU_ASSERT_FATAL(child > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(child, 15000), 0);

    /* The parent's waiters are unharmed: both get the lock in turn. */
    CU_ASSERT_TRUE(dlt_pipe_put(ch.to_child[1], 'R') == 0);
    DLT_ASSERT_INT_EQ(dlt_wait(holder, 10000), 0);
    for (i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        DLT_ASSERT_ERR(w[i].rc, 0);
        DLT_ASSERT_ERR(w[i].unlock_rc, 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_trylock(&other_m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&other_m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&waited_m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&other_m), 0);
    dlt_chan_close(&ch);
}

/* ------------------------------------------------ exit() releases */

static int exit_holder_fn(void *p) {
    struct dlt_chan *ch = p;
    dlock_mutex_t m;
    if (dlt_mutex_make(&m, "fork/exit", 30000, NULL) != 0) return 10;
    if (dlock_mutex_lock(&m) != 0) return 11;
    if (dlt_pipe_put(ch->to_parent[1], 'H') != 0) return 12;
    exit(0); /* not _exit: exit handlers run */
}

static void test_exit_releases(void) {
    struct dlt_chan ch;
    dlock_mutex_t m;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "fork/exit", 30000, NULL), 0);
    pid_t pid = dlt_spawn(exit_holder_fn, &ch);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(ch.to_parent[0], 10000), 'H');
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
    double t_exit = dlt_now();
    int rc = EBUSY;
    double got = -1;
    while (dlt_now() - t_exit < 2.0) {
        rc = dlock_mutex_trylock(&m);
        if (rc != EBUSY) {
            got = dlt_now() - t_exit;
            break;
        }
        dlt_sleep_ms(20);
    }
    printf("  trylock: %s %.0f ms after the holder's exit(0) (lease 30 s)\n", dlock_err_name(rc),
           got * 1000);
    DLT_ASSERT_ERR(rc, 0);
    CU_ASSERT_TRUE(got >= 0 && got < 0.5);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlt_chan_close(&ch);
}

/* ------------------------------- _exit and SIGKILL leave it to expire */

#define DIE_LEASE_MS 700

static int die_holder_fn(void *p) {
    struct dlt_chan *ch = p;
    dlock_mutex_t m;
    if (dlt_mutex_make(&m, "fork/die", DIE_LEASE_MS, NULL) != 0) return 10;
    if (dlock_mutex_lock(&m) != 0) return 11;
    if (dlt_pipe_put(ch->to_parent[1], 'H') != 0) return 12;
    if (dlt_pipe_get(ch->to_child[0], 10000) != 'X') return 13;
    _exit(0); /* no exit handlers; the parent may also SIGKILL us first */
}

static void die_and_expire(int use_kill) {
    struct dlt_chan ch;
    dlock_mutex_t m;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "fork/die", DIE_LEASE_MS, NULL), 0);
    pid_t pid = dlt_spawn(die_holder_fn, &ch);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(ch.to_parent[0], 10000), 'H');
    double t_held = dlt_now();
    if (use_kill) {
        kill(pid, SIGKILL);
        DLT_ASSERT_INT_EQ(dlt_wait(pid, 5000), 128 + SIGKILL);
    } else {
        CU_ASSERT_TRUE(dlt_pipe_put(ch.to_child[1], 'X') == 0);
        DLT_ASSERT_INT_EQ(dlt_wait(pid, 5000), 0);
    }
    double t_dead = dlt_now();
    /* Right after its death the lock is still held (left to expire). */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fork/die"), 1);
    int rc = EBUSY;
    double got = -1;
    while (dlt_now() - t_dead < 3.0) {
        rc = dlock_mutex_trylock(&m);
        if (rc != EBUSY) {
            got = dlt_now() - t_held;
            break;
        }
        dlt_sleep_ms(20);
    }
    printf("  %s: trylock %s %.0f ms after the child took the lock (lease %d ms; died at %.0f ms)\n",
           use_kill ? "SIGKILL" : "_exit", dlock_err_name(rc), got * 1000, DIE_LEASE_MS,
           (t_dead - t_held) * 1000);
    DLT_ASSERT_ERR(rc, 0);
    /* Not before the lease, and within the lease (plus a renewal that may
     * have run just before death) plus a margin. */
    CU_ASSERT_TRUE(got >= DIE_LEASE_MS / 1000.0 * 0.5);
    CU_ASSERT_TRUE(got < (t_dead - t_held) + DIE_LEASE_MS / 1000.0 + 0.4);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlt_chan_close(&ch);
}

static void test_underscore_exit_leaves_lock_to_expire(void) {
    die_and_expire(0);
}

static void test_sigkill_leaves_lock_to_expire(void) {
    die_and_expire(1);
}

/* ----------------------------------------------------- grandchildren */

static dlock_mutex_t gp_m, child_m, gc_m;

static int grandchild_fn(void *p) {
    (void)p;
    if (dlock_mutex_holds(&gp_m) != 0) return 30;
    if (dlock_mutex_holds(&child_m) != 0) return 31;
    if (dlock_mutex_trylock(&gp_m) != EBUSY) return 32;  /* grandparent holds it */
    if (dlock_mutex_trylock(&child_m) != EBUSY) return 33; /* parent holds it */
    if (dlock_mutex_unlock(&child_m) != EPERM) return 34;
    if (timedlock_ms(&gc_m, 5000) != 0) return 35;
    if (dlock_mutex_holds(&gc_m) != 1) return 36;
    if (dlock_mutex_unlock(&gc_m) != 0) return 37;
    return 0;
}

static int child_fn(void *p) {
    (void)p;
    if (dlock_mutex_holds(&gp_m) != 0) return 10;
    if (dlock_mutex_trylock(&gp_m) != EBUSY) return 11;
    if (timedlock_ms(&child_m, 5000) != 0) return 12;
    pid_t gc = dlt_spawn(grandchild_fn, NULL);
    if (gc <= 0) return 13;
    int st = dlt_wait(gc, 15000);
    if (st != 0) return st; /* the grandchild's code */
    if (dlock_mutex_holds(&child_m) != 1) return 14;
    if (dlock_mutex_unlock(&child_m) != 0) return 15;
    if (timedlock_ms(&gc_m, 5000) != 0) return 16;
    if (dlock_mutex_unlock(&gc_m) != 0) return 17;
    return 0;
}

static void test_grandchild(void) {
    DLT_ASSERT_ERR(dlt_mutex_make(&gp_m, "fork/gp", 600, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&child_m, "fork/child", 600, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&gc_m, "fork/grandchild", 600, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&gp_m), 0);
    pid_t pid = dlt_spawn(child_fn, NULL);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 20000), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&gp_m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&gp_m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fork/child"), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fork/grandchild"), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&child_m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&child_m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&gp_m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&child_m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&gc_m), 0);
}


/* ------------------------------------- fork during background I/O */

/* The subscriber thread reads its socket without the client lock; a fork
 * that lands in the middle of that (a reader buffer being reallocated)
 * must not hurt the child, which used to free the half-updated context
 * (glibc "free(): invalid pointer", now and then).  A holder keeps the
 * lock, a thread of this process waits for it (so this process's
 * subscriber reads its channel), a publisher floods the channel with
 * messages of random sizes, and this process forks children that only
 * exit.  Every child must exit cleanly.  Bounded: 200 000 messages or
 * 20 s for the publisher, 600 forks. */
static int race_holder_fn(void *p) {
    dlock_mutex_t m;
    (void)p;
    if (dlt_mutex_make(&m, "fork/race", 30000, NULL) != 0 || dlock_mutex_lock(&m) != 0) return 1;
    dlt_sleep_ms(30000);
    return 0;
}

static int race_publisher_fn(void *p) {
    redisContext *c = redisConnect("127.0.0.1", dlt_server.port);
    static char buf[65536];
    unsigned n = 1, i;
    double end = dlt_now() + 20;
    (void)p;
    if (c == NULL || c->err) return 1;
    memset(buf, 'x', sizeof buf);
    for (i = 0; i < 200000 && dlt_now() < end; i++) {
        redisReply *r;
        n = n * 1103515245u + 12345u;
        r = redisCommand(c, "PUBLISH %s %b", "dlock:{fork/race}", buf, (size_t)(1 + (n >> 8) % sizeof buf));
        if (r == NULL) break;
        freeReplyObject(r);
    }
    redisFree(c);
    return 0;
}

static void *race_waiter(void *p) {
    (void)dlock_mutex_lock(p); /* waits until the test breaks the lock */
    (void)dlock_mutex_unlock(p);
    return NULL;
}

static int exit_at_once(void *p) {
    (void)p;
    return 0;
}

static void test_fork_during_subscriber_io(void) {
    pid_t holder, pub;
    pthread_t th;
    dlock_mutex_t m;
    int i, bad = 0;

    holder = dlt_spawn(race_holder_fn, NULL);
    CU_ASSERT_FATAL(holder > 0);
    for (i = 0; i < 100 && dlt_key_exists("fork/race") != 1; i++) dlt_sleep_ms(20);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fork/race"), 1);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "fork/race", 10000, NULL), 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, race_waiter, &m) == 0);
    for (i = 0; i < 100 && dlt_numsub("dlock:{fork/race}") < 1; i++) dlt_sleep_ms(20);
    pub = dlt_spawn(race_publisher_fn, NULL);
    CU_ASSERT_FATAL(pub > 0);
    dlt_sleep_ms(200);
    for (i = 0; i < 600; i++) {
        pid_t p = dlt_spawn(exit_at_once, NULL);
        int st = p > 0 ? dlt_wait(p, 5000) : -1;
        if (st != 0 && bad++ < 5) fprintf(stderr, "  fork %d: child ended with %d\n", i, st);
    }
    DLT_ASSERT_INT_EQ(bad, 0);
    kill(pub, SIGKILL);
    kill(holder, SIGKILL);
    (void)dlt_wait(pub, 5000);
    (void)dlt_wait(holder, 5000);
    DLT_ASSERT_ERR(dlock_break(NULL, "fork/race", DLOCK_BREAK_RESET, NULL), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_object_usable_on_both_sides),
    DLT_TEST(test_fork_while_threads_wait),
    DLT_TEST(test_exit_releases),
    DLT_TEST(test_underscore_exit_leaves_lock_to_expire),
    DLT_TEST(test_sigkill_leaves_lock_to_expire),
    DLT_TEST(test_grandchild),
    DLT_TEST(test_fork_during_subscriber_io),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "fork", tests);
}
