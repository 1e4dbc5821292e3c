/* labels: redis */
/* test_wait.c -- waiting without polling: waiters sleep on the release
 * notification, wake within about a round trip, and never miss a release.
 *
 * Children report through exit codes only.  Server command counts come
 * from INFO commandstats: EVALSHA + EVAL, one per lock script call.
 */
#include "fixture.h"
#include "proxy.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

/* ------------------------------------------------------------ helpers */

static long long stat_of(const char *cmd) {
    return dlt_redis_cmdstat(&dlt_server, cmd);
}

static long long script_calls(void) {
    return stat_of("evalsha") + stat_of("eval");
}

/* ------------------------------------------- contended runs: cost/acq */

#define NPROC 4
#define NACQ 50

struct contended {
    const char *name;
    unsigned hold_ms;
    volatile int *shared; /* [0] in the critical section, [1] violations */
};

static int contended_proc(void *p) {
    struct contended *a = p;
    dlock_mutex_t m;
    int i;
    if (dlock_mutex_init(&m, a->name, NULL) != 0) return 10;
    for (i = 0; i < NACQ; i++) {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 30000);
        if (dlock_mutex_timedlock(&m, &ts) != 0) return 11;
        if (__atomic_add_fetch(&a->shared[0], 1, __ATOMIC_SEQ_CST) != 1)
            __atomic_add_fetch(&a->shared[1], 1, __ATOMIC_SEQ_CST);
        dlt_sleep_ms(a->hold_ms);
        __atomic_sub_fetch(&a->shared[0], 1, __ATOMIC_SEQ_CST);
        if (dlock_mutex_unlock(&m) != 0) return 12;
    }
    if (dlock_mutex_destroy(&m) != 0) return 13;
    return 0;
}

/* Runs NPROC processes x NACQ acquisitions; returns the script calls per
 * acquisition, or -1. */
static double contended_run(const char *name, unsigned hold_ms) {
    volatile int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pids[NPROC];
    int i, ok = 1;
    CU_ASSERT_FATAL(shared != MAP_FAILED);
    shared[0] = shared[1] = 0;
    struct contended a = { name, hold_ms, shared };

    if (dlt_redis_reset_stats(&dlt_server) != 0) ok = 0;
    double t0 = dlt_now();
    for (i = 0; i < NPROC; i++) pids[i] = dlt_spawn(contended_proc, &a);
    for (i = 0; i < NPROC; i++) {
        int st = dlt_wait(pids[i], 60000);
        if (st != 0) {
            printf("  contender %d exited with %d\n", i, st);
            ok = 0;
        }
    }
    double took = dlt_now() - t0;
    long long calls = script_calls();
    int violations = shared[1];
    munmap((void *)shared, 4096);
    DLT_ASSERT_INT_EQ(violations, 0);
    CU_ASSERT_TRUE(ok);
    if (!ok || calls < 0) return -1;
    double per = (double)calls / (NPROC * NACQ);
    printf("  hold %u ms: %d processes x %d acquisitions in %.2f s: %lld script calls, "
           "%.2f per acquisition\n",
           hold_ms, NPROC, NACQ, took, calls, per);
    return per;
}

static void test_contended_cost_does_not_grow_with_wait(void) {
    double short_per = contended_run("wait/contended-2ms", 2);
    double long_per = contended_run("wait/contended-40ms", 40);
    printf("  script calls per acquisition: %.2f with 2 ms holds, %.2f with 40 ms holds\n",
           short_per, long_per);
    CU_ASSERT_TRUE(short_per > 0);
    CU_ASSERT_TRUE(short_per <= 8.0);
    /* A wait shorter than 50 ms (DLOCK__DL_LEAF_MS) registers nothing for
     * `dlock status`: with 2 ms holds, nearly every acquisition is its
     * acquire and its release (~2.0; 3.0 when every wait registered). */
    CU_ASSERT_TRUE(short_per < 2.5);
    CU_ASSERT_TRUE(long_per > 0);
    CU_ASSERT_TRUE(long_per <= short_per + 2.0);
    /* Nor does a longer one (40 ms holds: 3 processes queued, waits of
     * ~120 ms) of a waiter that holds nothing: its queue entry lists it
     * (3.0 when it registered after 50 ms). */
    CU_ASSERT_TRUE(long_per < 2.5);
}

/* ------------------------------------------------ one long wait: sleeps */

/* A child that holds `name` for hold_ms, once it told the parent ('H'). */
struct timed_holder {
    struct dlt_chan *ch;
    const char *name;
    unsigned lease_ms, hold_ms;
};

static int timed_holder_fn(void *p) {
    struct timed_holder *t = p;
    dlock_mutex_t m;
    if (dlt_mutex_make(&m, t->name, t->lease_ms, NULL) != 0) return 10;
    if (dlock_mutex_lock(&m) != 0) return 11;
    if (dlt_pipe_put(t->ch->to_parent[1], 'H') != 0) return 12;
    dlt_sleep_ms(t->hold_ms);
    if (dlock_mutex_unlock(&m) != 0) return 13;
    return dlock_mutex_destroy(&m) == 0 ? 0 : 14;
}

/* A holder in another process holds "wait/long" (lease 10 s) for 3 s.
 * Counts the script calls from just after its acquire until the lock is
 * released: with a waiter (holding "wait/other" meanwhile when other is
 * set), until the waiter's lock returns; without, until the holder has
 * exited.  *waited: how long the waiter waited; *blpops: the BLPOPs sent
 * meanwhile (only a waiter sends them). */
static long long long_hold_calls(int with_waiter, int other, double *waited, long long *blpops) {
    struct dlt_chan ch;
    dlock_mutex_t m, o;
    struct timespec ts;
    long long calls = -1;
    *waited = 0;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "wait/long", 10000, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&o, "wait/other", 10000, NULL), 0);
    if (other) DLT_ASSERT_ERR(dlock_mutex_lock(&o), 0);
    struct timed_holder th_arg = { &ch, "wait/long", 10000, 3000 };
    pid_t pid = dlt_spawn(timed_holder_fn, &th_arg);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(ch.to_parent[0], 10000), 'H');
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    if (with_waiter) {
        double t0 = dlt_now();
        ts = dlt_abs_in(CLOCK_REALTIME, 10000);
        int rc = dlock_mutex_timedlock(&m, &ts);
        *waited = dlt_now() - t0;
        calls = script_calls();
        DLT_ASSERT_ERR(rc, 0);
        if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
    } else {
        DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
        calls = script_calls();
    }
    *blpops = dlt_redis_cmdstat(&dlt_server, "blpop");
    if (other) DLT_ASSERT_ERR(dlock_mutex_unlock(&o), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&o), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlt_chan_close(&ch);
    return calls;
}

static void test_long_wait_sleeps_on_notification(void) {
    double waited;
    long long blpops;
    /* The holder's own calls (its renewals and its release), alone. */
    long long holder = long_hold_calls(0, 0, &waited, &blpops);
    long long total = long_hold_calls(1, 0, &waited, &blpops);
    long long waiter = total - holder, ticking;
    printf("  waited %.2f s for a 3 s holder: %lld script calls in that time, the holder alone "
           "makes %lld: the waiter made %lld acquire attempts, %lld BLPOP\n",
           waited, total, holder, waiter, blpops);
    CU_ASSERT_TRUE(holder >= 1);
    CU_ASSERT_TRUE(waited > 2.0 && waited < 5.0);
    CU_ASSERT_TRUE(waiter >= 1);
    /* (no registration: it holds nothing, and its queue entry lists it
     * for `dlock status`; 4 when it registered) */
    CU_ASSERT_TRUE(waiter <= 3);
    DLT_ASSERT_INT_EQ(blpops, 1); /* one BLPOP for the whole wait */
    /* A waiter that holds a lock registers its wait and its edge every
     * 250 ms (it may close a cycle): ticks made while its BLPOP stays
     * pending, not by ending it and sending another. */
    ticking = long_hold_calls(1, 1, &waited, &blpops) - holder;
    printf("  holding another lock meanwhile: %lld script calls, %lld BLPOP\n", ticking, blpops);
    CU_ASSERT_TRUE(waited > 2.0 && waited < 5.0);
    CU_ASSERT_TRUE(ticking >= waiter + 10);
    DLT_ASSERT_INT_EQ(blpops, 1);
}

/* ------------------------------------------------- handoff latency */

#define NHANDOFF 20

static int handoff_holder_fn(void *p) {
    struct dlt_chan *ch = p;
    dlock_mutex_t m;
    int i;
    if (dlt_mutex_make(&m, "wait/handoff", 10000, NULL) != 0) return 10;
    for (i = 0; i < NHANDOFF; i++) {
        struct timespec ts;
        /* After the first round, relock only once the waiter is done, or
         * we could take the lock back before the waiter wakes. */
        if (i > 0 && dlt_pipe_get(ch->to_child[0], 10000) != 'N') return 16;
        ts = dlt_abs_in(CLOCK_REALTIME, 10000);
        if (dlock_mutex_timedlock(&m, &ts) != 0) return 11;
        if (dlt_pipe_put(ch->to_parent[1], 'H') != 0) return 12;
        if (dlt_pipe_get(ch->to_child[0], 10000) != 'G') return 13;
        dlt_sleep_ms(30); /* the waiter is asleep by now */
        double t = dlt_now();
        if (dlock_mutex_unlock(&m) != 0) return 14;
        if (write(ch->to_parent[1], &t, sizeof t) != (ssize_t)sizeof t) return 15;
    }
    dlock_mutex_destroy(&m);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_handoff_latency_to_other_process(void) {
    struct dlt_chan ch;
    dlock_mutex_t m;
    double lat[NHANDOFF];
    int i, n = 0;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "wait/handoff", 10000, NULL), 0);
    pid_t pid = dlt_spawn(handoff_holder_fn, &ch);
    CU_ASSERT_FATAL(pid > 0);
    for (i = 0; i < NHANDOFF; i++) {
        struct timespec ts;
        double t_unlock;
        if (dlt_pipe_get(ch.to_parent[0], 10000) != 'H') break;
        if (dlt_pipe_put(ch.to_child[1], 'G') != 0) break;
        ts = dlt_abs_in(CLOCK_REALTIME, 10000);
        int rc = dlock_mutex_timedlock(&m, &ts);
        double t_got = dlt_now();
        DLT_ASSERT_ERR(rc, 0);
        if (rc != 0) break;
        if (dlt_pipe_read(ch.to_parent[0], &t_unlock, sizeof t_unlock, 10000) != 0) break;
        lat[n++] = t_got - t_unlock;
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        if (dlt_pipe_put(ch.to_child[1], 'N') != 0) break;
    }
    DLT_ASSERT_INT_EQ(n, NHANDOFF);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
    if (n > 0) {
        qsort(lat, (size_t)n, sizeof lat[0], cmp_double);
        double median = lat[n / 2];
        printf("  handoff latency over %d handoffs: min %.3f ms, median %.3f ms, max %.3f ms\n", n,
               lat[0] * 1000, median * 1000, lat[n - 1] * 1000);
        CU_ASSERT_TRUE(median < 0.005);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlt_chan_close(&ch);
}

/* ------------------------------------------- a release is never missed */

#define NMISS 50

static void miss_name(char *buf, size_t len, int i) {
    /* Three rounds in four: a fresh name, so subscribing races with the
     * release; every fourth: one name, whose subscription lingers. */
    if (i % 4 != 3) snprintf(buf, len, "wait/miss/%d", i);
    else snprintf(buf, len, "wait/miss/same");
}

static int miss_holder_fn(void *p) {
    struct dlt_chan *ch = p;
    unsigned seed = (unsigned)getpid();
    int i;
    for (i = 0; i < NMISS; i++) {
        char name[64];
        dlock_mutex_t m;
        struct timespec ts;
        miss_name(name, sizeof name, i);
        if (dlt_mutex_make(&m, name, 30000, NULL) != 0) return 10;
        ts = dlt_abs_in(CLOCK_REALTIME, 10000);
        if (dlock_mutex_timedlock(&m, &ts) != 0) return 11;
        if (dlt_pipe_put(ch->to_parent[1], 'H') != 0) return 12;
        if (dlt_pipe_get(ch->to_child[0], 10000) != 'G') return 13;
        /* A random moment 0-5 ms into the wait, skewed (u^3) towards the
         * first few hundred microseconds, where the waiter's first attempt
         * and its SUBSCRIBE are in flight and a missed release would hide. */
        double u = (double)rand_r(&seed) / RAND_MAX;
        usleep((useconds_t)(5000.0 * u * u * u));
        if (dlock_mutex_unlock(&m) != 0) return 14;
        if (dlock_mutex_destroy(&m) != 0) return 15;
    }
    return 0;
}

static void test_release_never_missed(void) {
    struct dlt_chan ch;
    int i, got = 0, slow = 0;
    double worst = 0;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    pid_t pid = dlt_spawn(miss_holder_fn, &ch);
    CU_ASSERT_FATAL(pid > 0);
    for (i = 0; i < NMISS; i++) {
        char name[64];
        dlock_mutex_t m;
        struct timespec ts;
        miss_name(name, sizeof name, i);
        if (dlt_mutex_make(&m, name, 30000, NULL) != 0) break;
        if (dlt_pipe_get(ch.to_parent[0], 10000) != 'H') {
            dlock_mutex_destroy(&m);
            break;
        }
        dlt_pipe_put(ch.to_child[1], 'G');
        double t0 = dlt_now();
        ts = dlt_abs_in(CLOCK_REALTIME, 2000);
        int rc = dlock_mutex_timedlock(&m, &ts);
        double took = dlt_now() - t0;
        if (took > worst) worst = took;
        if (rc != 0) {
            printf("  round %d (%s): timedlock gave %s after %.3f s\n", i, name, dlock_err_name(rc),
                   took);
        } else {
            got++;
            if (took >= 1.0) slow++;
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        }
        dlock_mutex_destroy(&m);
        if (rc != 0) break;
    }
    printf("  %d of %d releases caught; slowest wait %.3f s\n", got, NMISS, worst);
    DLT_ASSERT_INT_EQ(got, NMISS);
    DLT_ASSERT_INT_EQ(slow, 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 15000), 0);
    dlt_chan_close(&ch);
}

/* ------------------------------------- holder killed: lease runs out */

static int killed_holder_fn(void *p) {
    struct dlt_chan *ch = p;
    dlock_mutex_t m;
    if (dlt_mutex_make(&m, "wait/killed", 800, NULL) != 0) return 10;
    if (dlock_mutex_lock(&m) != 0) return 11;
    if (dlt_pipe_put(ch->to_parent[1], 'H') != 0) return 12;
    dlt_sleep_ms(20000); /* until killed */
    return 13;
}

struct killer {
    pid_t pid;
    double t_kill;
};

static void *killer_thread(void *p) {
    struct killer *k = p;
    dlt_sleep_ms(200); /* the waiter is asleep by now */
    k->t_kill = dlt_now();
    kill(k->pid, SIGKILL);
    return NULL;
}

static void test_waiter_gets_lock_of_killed_holder(void) {
    struct dlt_chan ch;
    dlock_mutex_t m;
    pthread_t th;
    struct timespec ts;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "wait/killed", 800, NULL), 0);
    pid_t pid = dlt_spawn(killed_holder_fn, &ch);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(ch.to_parent[0], 10000), 'H');
    struct killer k = { pid, 0 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, killer_thread, &k) == 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    int rc = dlock_mutex_timedlock(&m, &ts);
    double t_got = dlt_now();
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(rc, 0);
    printf("  lock acquired %.0f ms after its holder was SIGKILLed (lease 800 ms)\n",
           (t_got - k.t_kill) * 1000);
    CU_ASSERT_TRUE(t_got - k.t_kill < 0.8 + 0.5);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 5000), 128 + SIGKILL);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlt_chan_close(&ch);
}

/* ------------------------------- a channel lingers, then goes */

/* A wait of 200 ms that times out: when it ended. */
static double linger_wait(dlock_mutex_t *m) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 200);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(m, &ts), ETIMEDOUT);
    return dlt_now();
}

/* A lock's channel stays subscribed for the linger (2 s) after the last
 * wait on it ends, then goes: after a first wait the subscriber thread
 * sleeps towards that linger's end; a second wait, ending 1.2 s later,
 * need not wake it (notify.c, dlock__notify_idle) -- it sweeps when it
 * wakes (at that end, or at the "released" a timed-out waiter's
 * withdrawal publishes) and keeps the channel for the second wait's
 * linger, then drops it. */
static void test_channel_lingers_then_goes(void) {
    const char *ch_name = "dlock:{wait/linger}";
    struct dlt_chan ch;
    dlock_mutex_t m;
    double t1, t2, gone;
    CU_ASSERT_FATAL(dlt_chan_open(&ch) == 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "wait/linger", 30000, NULL), 0);
    struct timed_holder th_arg = { &ch, "wait/linger", 30000, 6000 }; /* the waits time out: no release */
    pid_t pid = dlt_spawn(timed_holder_fn, &th_arg);
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_FATAL(dlt_pipe_get(ch.to_parent[0], 10000) == 'H');

    t1 = linger_wait(&m);
    dlt_sleep_ms(500);
    DLT_ASSERT_INT_EQ(dlt_numsub(ch_name), 1);
    dlt_sleep_ms(500);
    t2 = linger_wait(&m);
    while (dlt_now() < t1 + 2.5) dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(dlt_numsub(ch_name), 1); /* t1's linger passed; t2's runs */
    while (dlt_numsub(ch_name) != 0 && dlt_now() < t2 + 3.5) dlt_sleep_ms(20);
    gone = dlt_now();
    printf("  channel dropped %.0f ms after the last wait ended (linger 2000 ms)\n", (gone - t2) * 1000);
    DLT_ASSERT_INT_EQ(dlt_numsub(ch_name), 0);
    CU_ASSERT(gone - t2 >= 1.9);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlt_chan_close(&ch);
}

/* ------------------------- a slow subscription is no unreachable server */

struct slow_waiter {
    dlock_mutex_t *m;
    int rc;
    double t_got;
};

static void *slow_waiter_fn(void *p) {
    struct slow_waiter *w = p;
    w->rc = dlock_mutex_lock(w->m);
    w->t_got = dlt_now();
    if (w->rc != 0) printf("  waiter: %s\n", dlock_last_error());
    if (w->rc == 0) w->rc = dlock_mutex_unlock(w->m);
    return NULL;
}

/* A waiter's client reaches the server through a proxy that holds every
 * answer 400 ms (within the command timeout, 2 s), and counts the server
 * unreachable after 150 ms of failures: its SUBSCRIBE is confirmed
 * 400 ms after it went out, well past the 150 ms that the wait has
 * waited by then.  The server answers: the wait goes on (no ENOLCK), and
 * the lock is the waiter's once the holder unlocks. */
static void test_slow_subscription_is_waited_for(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *slow = NULL;
    dlock_mutex_t held, m;
    struct slow_waiter w = { &m, -1, 0 };
    pthread_t th;
    double t_unlock;
    CU_ASSERT_FATAL(px != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&slow, dlt_proxy_url(px), 20), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&held, "wait/slowsub", 30000, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "wait/slowsub", 30000, slow), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&held), 0);
    dlt_proxy_set(px, DLT_PROXY_DELAY, 100, NULL, 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, slow_waiter_fn, &w) == 0);
    t_unlock = dlt_now() + 10;
    while (dlt_numsub("dlock:{wait/slowsub}") == 0 && dlt_now() < t_unlock) dlt_sleep_ms(5);
    DLT_ASSERT_INT_EQ(dlt_numsub("dlock:{wait/slowsub}"), 1);
    dlt_sleep_ms(1200); /* its confirmation heard, the lock asked again: the waiter sleeps on it */
    t_unlock = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&held), 0);
    pthread_join(th, NULL);
    printf("  waiter: %s, %.0f ms after the unlock\n", w.rc == 0 ? "got the lock" : strerror(w.rc),
           (w.t_got - t_unlock) * 1000);
    DLT_ASSERT_ERR(w.rc, 0);
    CU_ASSERT(w.t_got >= t_unlock);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&held), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(slow), 0);
    dlt_proxy_stop(px);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_contended_cost_does_not_grow_with_wait), DLT_TEST(test_long_wait_sleeps_on_notification),
    DLT_TEST(test_handoff_latency_to_other_process),       DLT_TEST(test_release_never_missed),
    DLT_TEST(test_waiter_gets_lock_of_killed_holder),      DLT_TEST(test_channel_lingers_then_goes),
    DLT_TEST(test_slow_subscription_is_waited_for),        { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "wait", tests);
}
