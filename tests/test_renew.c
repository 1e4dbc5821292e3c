/* labels: redis slow */
/* test_renew.c -- the renewal thread: leases kept alive, batched, stopped.
 *
 * Every test runs against the suite's real redis-server (dlt_server).  A
 * lock named N is the key "dlock:{N}" whose expiry is the lease.
 */
#include "fixture.h"
#include "proxy.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

/* ------------------------------------------------------------ helpers */

/* total_reads_processed of INFO stats: the server's read events, which
 * is how many times it found new bytes on some connection. */
static long long server_reads(void) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "INFO stats");
    long long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "total_reads_processed:");
        if (p != NULL) v = atoll(p + strlen("total_reads_processed:"));
    }
    if (r != NULL) freeReplyObject(r);
    return v;
}

static int task_count(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    if (d == NULL) return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* ------------------------------------------------- held with renewals */

/* The contender: trylock every 50 ms; every answer must be EBUSY until
 * the holder announces 'S' (about to unlock), then after 'U' (unlocked)
 * one trylock must succeed at once.  0 on success, else a code. */
static int contend(dlock_mutex_t *m, int rfd, int *busy_out) {
    double start = dlt_now();
    int busy = 0, seen_s = 0;
    *busy_out = 0;
    while (dlt_now() - start < 8.0) {
        struct pollfd p = { rfd, POLLIN, 0 };
        if (!seen_s && poll(&p, 1, 0) > 0) {
            int c = dlt_pipe_get(rfd, 0);
            if (c != 'S') return 20;
            seen_s = 1;
        }
        if (seen_s) {
            if (dlt_pipe_get(rfd, 3000) != 'U') return 21;
            double t0 = dlt_now();
            int rc = dlock_mutex_trylock(m);
            if (rc != 0) return 22;
            if (dlt_now() - t0 > 0.5) return 23;
            if (dlock_mutex_holds(m) != 1) return 24;
            if (dlock_mutex_unlock(m) != 0) return 25;
            *busy_out = busy;
            return busy >= 40 ? 0 : 26;
        }
        int rc = dlock_mutex_trylock(m);
        if (rc == 0) {
            /* Only legal if the holder announced its unlock meanwhile. */
            struct pollfd q = { rfd, POLLIN, 0 };
            int ok = poll(&q, 1, 0) > 0 && dlt_pipe_get(rfd, 0) == 'S';
            dlock_mutex_unlock(m);
            if (!ok) return 27; /* acquired while the other held it */
            if (dlt_pipe_get(rfd, 3000) != 'U') return 21;
            *busy_out = busy;
            return busy >= 40 ? 0 : 26;
        }
        if (rc != EBUSY) return 28;
        busy++;
        dlt_sleep_ms(50);
    }
    return 29; /* never released */
}

struct contender {
    const char *name;
    dlock_mutex_t *m; /* thread variant: the shared object */
    int rfd;
    int rc;
    int busy;
};

static int contender_proc(void *p) {
    struct contender *a = p;
    dlock_mutex_t m;
    int busy;
    if (dlock_mutex_init(&m, a->name, NULL) != 0) return 10;
    if (dlt_pipe_get(a->rfd, 10000) != 'L') return 30; /* the holder holds it now */
    int rc = contend(&m, a->rfd, &busy);
    if (rc == 0 && dlock_mutex_destroy(&m) != 0) rc = 11;
    return rc;
}

static void *contender_thread(void *p) {
    struct contender *a = p;
    a->rc = contend(a->m, a->rfd, &a->busy);
    return NULL;
}

/* The holder side: holds for 5 s while checking PTTL > 0 and holds()==1
 * every 50 ms, then announces and unlocks. */
static void hold_five_seconds(dlock_mutex_t *m, const char *name, int wfd) {
    long long min_pttl = -100;
    int bad_pttl = 0, bad_holds = 0, checks = 0;
    double start = dlt_now();
    while (dlt_now() - start < 5.0 && checks < 200) {
        long long t = dlt_key_pttl(name);
        if (t <= 0) bad_pttl++;
        if (min_pttl == -100 || t < min_pttl) min_pttl = t;
        if (dlock_mutex_holds(m) != 1) bad_holds++;
        checks++;
        dlt_sleep_ms(50);
    }
    printf("  held 5 s with a 400 ms lease: %d checks, min PTTL %lld ms\n", checks, min_pttl);
    DLT_ASSERT_INT_EQ(bad_pttl, 0);
    DLT_ASSERT_INT_EQ(bad_holds, 0);
    CU_ASSERT_TRUE(checks >= 50);
    CU_ASSERT_TRUE(dlt_pipe_put(wfd, 'S') == 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(m), 0);
    CU_ASSERT_TRUE(dlt_pipe_put(wfd, 'U') == 0);
}

static void test_short_lease_held_against_process(void) {
    const char *name = "renew/held-proc";
    dlock_mutex_t m;
    int fds[2];
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 400, NULL), 0);
    CU_ASSERT_FATAL(pipe(fds) == 0);

    /* The contender is forked before this process has a background
     * thread (its first lock starts them): a fork while one of them is
     * inside the allocator leaves the child's allocator locked for ever
     * under ASan.  It starts contending once told the lock is held. */
    struct contender a = { name, NULL, fds[0], 0, 0 };
    pid_t pid = dlt_spawn(contender_proc, &a);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_TRUE(dlt_pipe_put(fds[1], 'L') == 0);
    hold_five_seconds(&m, name, fds[1]);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    close(fds[0]);
    close(fds[1]);
}

static void test_short_lease_held_against_thread(void) {
    const char *name = "renew/held-thread";
    dlock_mutex_t m;
    pthread_t th;
    int fds[2];
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 400, NULL), 0);
    CU_ASSERT_FATAL(pipe(fds) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);

    struct contender a = { name, &m, fds[0], -1, 0 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, contender_thread, &a) == 0);
    hold_five_seconds(&m, name, fds[1]);
    pthread_join(th, NULL);
    printf("  contender thread: %d EBUSY answers, result %d\n", a.busy, a.rc);
    DLT_ASSERT_INT_EQ(a.rc, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    close(fds[0]);
    close(fds[1]);
}

/* ------------------------------------------------------------ batches */

#define NMANY 300
static dlock_mutex_t many[NMANY];

/* How many of the NMANY keys exist with an expiry, by one pipelined
 * connection of our own. */
static int live_many_keys(void) {
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", dlt_server.port, tv);
    int live = 0, i;
    if (c == NULL || c->err) {
        if (c) redisFree(c);
        return -1;
    }
    redisSetTimeout(c, tv);
    for (i = 0; i < NMANY; i++) redisAppendCommand(c, "PTTL dlock:{renew/many/%d}", i);
    for (i = 0; i < NMANY; i++) {
        void *p = NULL;
        if (redisGetReply(c, &p) != REDIS_OK || p == NULL) {
            live = -1;
            break;
        }
        redisReply *r = p;
        if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) live++;
        freeReplyObject(r);
    }
    redisFree(c);
    return live;
}

static void test_many_locks_renewed_in_batches(void) {
    char name[64];
    int i, inited = 0, locked = 0;
    for (i = 0; i < NMANY; i++) {
        snprintf(name, sizeof name, "renew/many/%d", i);
        if (dlt_mutex_make(&many[i], name, 600, NULL) != 0) break;
        inited++;
    }
    DLT_ASSERT_INT_EQ(inited, NMANY);
    double t0 = dlt_now();
    for (i = 0; i < inited; i++) {
        if (dlock_mutex_lock(&many[i]) != 0) break;
        locked++;
    }
    DLT_ASSERT_INT_EQ(locked, NMANY);
    double t_locked = dlt_now();

    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    long long reads0 = server_reads();
    double t_start = dlt_now();
    dlt_sleep_ms(2000);
    long long evalsha = dlt_redis_cmdstat(&dlt_server, "evalsha");
    long long eval = dlt_redis_cmdstat(&dlt_server, "eval");
    long long reads1 = server_reads();
    double span = dlt_now() - t_start;

    int holds = 0;
    for (i = 0; i < locked; i++) holds += dlock_mutex_holds(&many[i]);
    int live = live_many_keys();

    double periods = span / 0.2; /* renewal period: a third of the lease */
    printf("  %d locks acquired in %.0f ms; over %.2f s (%.1f renewal periods): %lld EVALSHA + "
           "%lld EVAL (%.0f per renewal period; one per lock would be %d), %lld server read "
           "events\n",
           locked, (t_locked - t0) * 1000, span, periods, evalsha, eval,
           (evalsha + eval) / periods, NMANY, reads1 - reads0);
    /* Nothing lost, every key still there with its lease. */
    DLT_ASSERT_INT_EQ(holds, NMANY);
    DLT_ASSERT_INT_EQ(live, NMANY);
    /* One renewal script call per lock per renewal: every lock is renewed
     * at least once per lease (else it would have expired), and never
     * more often than every sixth of a lease. */
    CU_ASSERT_TRUE(evalsha + eval >= (long long)(NMANY * (span / 0.6) * 0.8));
    CU_ASSERT_TRUE(evalsha + eval <= (long long)(NMANY * (span / 0.1) + NMANY));
    /* Pipelined: the server saw far fewer read events than commands (one
     * round trip per lock would give about one read per command). */
    CU_ASSERT_TRUE(reads1 - reads0 >= 0);
    CU_ASSERT_TRUE((reads1 - reads0) * 5 < evalsha + eval);

    int unlocked = 0;
    for (i = 0; i < locked; i++)
        if (dlock_mutex_unlock(&many[i]) == 0) unlocked++;
    DLT_ASSERT_INT_EQ(unlocked, locked);
    for (i = 0; i < inited; i++) dlock_mutex_destroy(&many[i]);
    DLT_ASSERT_INT_EQ(live_many_keys(), 0);
}

/* ------------------------------------------------------ stop at unlock */

static void test_renewal_stops_at_unlock(void) {
    dlock_mutex_t keep, gone;
    DLT_ASSERT_ERR(dlt_mutex_make(&keep, "renew/keep", 300, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&gone, "renew/gone", 300, NULL), 0);
    /* "keep" stays held so that the renewal thread keeps running. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&keep), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&gone), 0);
    dlt_sleep_ms(450); /* past the lease: only renewal keeps it */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&gone), 1);
    DLT_ASSERT_INT_EQ(dlt_key_exists("renew/gone"), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&gone), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("renew/gone"), 0);
    for (int i = 0; i < 3; i++) {
        dlt_sleep_ms(333);
        DLT_ASSERT_INT_EQ(dlt_key_exists("renew/gone"), 0);
    }
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&gone), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&keep), 1);
    DLT_ASSERT_INT_EQ(dlt_key_exists("renew/keep"), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&keep), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&keep), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&gone), 0);
}

/* ------------------------------------------------- stop at thread exit */

struct exiter {
    dlock_mutex_t *m;
    int lock_rc, held_after, existed_after;
};

static void *exiter_thread(void *p) {
    struct exiter *e = p;
    e->lock_rc = dlock_mutex_lock(e->m);
    dlt_sleep_ms(700); /* longer than the lease: renewal must run */
    e->held_after = dlock_mutex_holds(e->m);
    e->existed_after = dlt_key_exists("renew/exiter");
    return NULL; /* without unlocking */
}

static void test_renewal_stops_at_thread_exit(void) {
    dlock_mutex_t m, keep;
    pthread_t th;
    struct exiter e = { &m, -1, -1, -1 };
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "renew/exiter", 500, NULL), 0);
    /* Another held lock keeps the renewal thread busy throughout. */
    DLT_ASSERT_ERR(dlt_mutex_make(&keep, "renew/keep2", 500, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&keep), 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, exiter_thread, &e) == 0);
    pthread_join(th, NULL);
    double t_exit = dlt_now();
    DLT_ASSERT_ERR(e.lock_rc, 0);
    DLT_ASSERT_INT_EQ(e.held_after, 1);
    DLT_ASSERT_INT_EQ(e.existed_after, 1);

    double gone_at = -1;
    for (int i = 0; i < 40 && dlt_now() - t_exit < 2.0; i++) {
        if (dlt_key_exists("renew/exiter") == 0) {
            gone_at = dlt_now() - t_exit;
            break;
        }
        dlt_sleep_ms(50);
    }
    printf("  key expired %.0f ms after the owner thread exited (lease 500 ms)\n", gone_at * 1000);
    CU_ASSERT_TRUE(gone_at >= 0);
    CU_ASSERT_TRUE(gone_at < 0.8);
    dlt_sleep_ms(600);
    DLT_ASSERT_INT_EQ(dlt_key_exists("renew/exiter"), 0); /* not renewed back */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    /* It is free for the next owner. */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&keep), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&keep), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&keep), 0);
}

/* ---------------------------------------------------- not in fork child */

static dlock_mutex_t fork_m;
static pid_t fork_parent_pid;

static int fork_child_fn(void *p) {
    (void)p;
    if (dlock_mutex_holds(&fork_m) != 0) return 10;
    if (dlock_mutex_fence(&fork_m) != 0) return 11;
    dlt_sleep_ms(2000);
    if (dlock_mutex_holds(&fork_m) != 0) return 12;
    /* The parent still owns the key: its renewals went on, ours never ran. */
    if (dlt_key_field("renew/forked", "pid") != (long long)fork_parent_pid) return 13;
    if (task_count() != 1) return 14; /* no renewal thread in the child */
    return 0;
}

static void test_no_renewal_in_fork_child(void) {
    DLT_ASSERT_ERR(dlt_mutex_make(&fork_m, "renew/forked", 600, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&fork_m), 0);
    uint64_t fence = dlock_mutex_fence(&fork_m);
    fork_parent_pid = getpid();
    pid_t pid = dlt_spawn(fork_child_fn, NULL);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&fork_m), 1);
    CU_ASSERT_TRUE(dlock_mutex_fence(&fork_m) == fence);
    DLT_ASSERT_INT_EQ(dlt_key_exists("renew/forked"), 1);
    CU_ASSERT_TRUE(dlt_key_pttl("renew/forked") > 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&fork_m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&fork_m), 0);
}

/* -------------------------------------------- background signal masks */

struct sig_holder {
    int hold_w, release_r;
};

static int sig_holder_fn(void *p) {
    struct sig_holder *h = p;
    dlock_mutex_t m;
    if (dlock_mutex_init(&m, "renew/sig-b", NULL) != 0) return 10;
    if (dlock_mutex_lock(&m) != 0) return 11;
    if (dlt_pipe_put(h->hold_w, 'H') != 0) return 12;
    if (dlt_pipe_get(h->release_r, 15000) != 'R') return 13;
    if (dlock_mutex_unlock(&m) != 0) return 14;
    return 0;
}

struct sig_waiter {
    dlock_mutex_t *m;
    volatile pid_t tid;
    int rc, unlock_rc;
};

static void *sig_waiter_thread(void *p) {
    struct sig_waiter *w = p;
    struct timespec ts;
    w->tid = (pid_t)syscall(SYS_gettid);
    ts = dlt_abs_in(CLOCK_REALTIME, 15000);
    w->rc = dlock_mutex_timedlock(w->m, &ts);
    w->unlock_rc = w->rc == 0 ? dlock_mutex_unlock(w->m) : -1;
    return NULL;
}

/* SigBlk of thread tid, or 0 with *ok = 0. */
static unsigned long long sigblk(const char *tid, int *ok) {
    char path[300], line[256];
    unsigned long long v = 0;
    snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
    FILE *f = fopen(path, "r");
    *ok = 0;
    if (f == NULL) return 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "SigBlk:", 7) == 0) {
            v = strtoull(line + 7, NULL, 16);
            *ok = 1;
            break;
        }
    }
    fclose(f);
    return v;
}

#define SIGBIT(s) (1ull << ((s) - 1))

static void test_background_threads_block_signals(void) {
    dlock_mutex_t a, b;
    int hold[2], rel[2];
    pthread_t th;
    DLT_ASSERT_ERR(dlt_mutex_make(&a, "renew/sig-a", 600, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&b, "renew/sig-b", 0, NULL), 0);
    CU_ASSERT_FATAL(pipe(hold) == 0 && pipe(rel) == 0);

    /* Renewal thread: we hold a. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&a), 0);
    /* Subscriber thread: a thread of ours waits for b, held elsewhere. */
    struct sig_holder h = { hold[1], rel[0] };
    pid_t pid = dlt_spawn(sig_holder_fn, &h);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(hold[0], 10000), 'H');
    struct sig_waiter w = { &b, 0, -1, -1 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, sig_waiter_thread, &w) == 0);
    double t0 = dlt_now();
    while (dlt_numsub("dlock:{renew/sig-b}") < 1 && dlt_now() - t0 < 5.0) dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(dlt_numsub("dlock:{renew/sig-b}"), 1);

    pid_t main_tid = (pid_t)syscall(SYS_gettid);
    DIR *d = opendir("/proc/self/task");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    struct dirent *e;
    int background = 0, unmasked = 0;
    const unsigned long long need = SIGBIT(SIGINT) | SIGBIT(SIGTERM) | SIGBIT(SIGUSR1) |
                                    SIGBIT(SIGUSR2) | SIGBIT(SIGHUP) | SIGBIT(SIGALRM) |
                                    SIGBIT(SIGCHLD) | SIGBIT(SIGPIPE) | SIGBIT(SIGQUIT);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        pid_t tid = (pid_t)atoi(e->d_name);
        int ok;
        unsigned long long blk = sigblk(e->d_name, &ok);
        if (!ok) continue; /* gone meanwhile */
        if (tid == main_tid || tid == w.tid) {
            printf("  test thread %d: SigBlk %016llx\n", (int)tid, blk);
            continue;
        }
        background++;
        printf("  background thread %d: SigBlk %016llx\n", (int)tid, blk);
        if ((blk & need) != need) unmasked++;
    }
    closedir(d);
    CU_ASSERT_TRUE(background >= 2); /* renewal + subscriber */
    DLT_ASSERT_INT_EQ(unmasked, 0);

    CU_ASSERT_TRUE(dlt_pipe_put(rel[1], 'R') == 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc, 0);
    DLT_ASSERT_ERR(w.unlock_rc, 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&a), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&b), 0);
    close(hold[0]);
    close(hold[1]);
    close(rel[0]);
    close(rel[1]);
}

/* ------------------------------------------- a holder cut off from it */

static int cut_lost_calls;
static long long cut_lost_at_us; /* dlt_now() when the handler ran, in µs */

static void cut_on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    __atomic_store_n(&cut_lost_at_us, (long long)(dlt_now() * 1e6), __ATOMIC_SEQ_CST);
    dlt_flag_add(&cut_lost_calls, 1);
}

/* A holder (lease 1500 ms, drift margin 100 ms) whose link to the server
 * goes dead right after it took the lock -- the proxy answers nothing,
 * and a connection made anew hangs in its SELECT for the 2 s connect
 * budget, as a connect(2) to a host cut off hangs: its renewal thread
 * must connect anew.  Its lost-lock handler runs by its own clock, by
 * the lock + lease - drift, and so before another client, trying all
 * along, gets the lock (the lease ran out on the server). */
static void test_cut_off_holder_told_in_time(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL, *oc = NULL;
    dlock_mutexattr_t a;
    dlock_mutex_t held, other;
    char url[256];
    double t0, end, got = 0;
    int rc;
    CU_ASSERT_FATAL(px != NULL);
    cut_lost_calls = 0;
    snprintf(url, sizeof url, "%s/1?drift_ms=100&connect_timeout_ms=2000", dlt_proxy_url(px));
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 5000), 0);
    snprintf(url, sizeof url, "%s/1", dlt_server.url);
    DLT_ASSERT_ERR(dlt_client_make(&oc, url, 5000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 1500), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, cut_on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&held, "renew/cutoff", &a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, oc), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&other, "renew/cutoff", &a), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&held), 0);
    dlt_sleep_ms(100);
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(px);
    end = dlt_now() + 6.0;
    while (dlt_now() < end) {
        if ((rc = dlock_mutex_trylock(&other)) == 0) {
            got = dlt_now();
            break;
        }
        DLT_ASSERT_ERR(rc, EBUSY);
        dlt_sleep_ms(2);
    }
    CU_ASSERT_FATAL(got > 0);
    CU_ASSERT(got - t0 >= 1.45);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&cut_lost_calls), 1);
    if (dlt_flag_get(&cut_lost_calls) == 1) {
        double told = __atomic_load_n(&cut_lost_at_us, __ATOMIC_SEQ_CST) / 1e6;
        CU_ASSERT(told <= got);
        CU_ASSERT(told - t0 <= 1.45);
        if (!(told <= got) || told - t0 > 1.45)
            fprintf(stderr, "handler %.3f s, the lock went on at %.3f s\n", told - t0, got - t0);
    }
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&held), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&other), 0);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&held), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&held), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(oc), 0);
    dlt_proxy_stop(px);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_short_lease_held_against_process),
    DLT_TEST(test_short_lease_held_against_thread),
    DLT_TEST(test_many_locks_renewed_in_batches),
    DLT_TEST(test_renewal_stops_at_unlock),
    DLT_TEST(test_renewal_stops_at_thread_exit),
    DLT_TEST(test_no_renewal_in_fork_child),
    DLT_TEST(test_background_threads_block_signals),
    DLT_TEST(test_cut_off_holder_told_in_time),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "renew", tests);
}
