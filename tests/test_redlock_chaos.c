/* labels: redis slow; timeout: 900 */
/* test_redlock_chaos.c -- a Redlock deployment under faults, one master at
 * a time, and what must hold all the same.
 *
 * Three masters with AOF (appendfsync always) behind one redlock:// URL
 * with the restart guard at the lease; NPROC worker processes of NTHR
 * threads each take one robust mutex over and over -- trylock, timedlock
 * with deadlines of 30-600 ms, lock -- hold it a few ms and unlock.
 * Meanwhile the injector, in shuffled rounds of every kind, kills a master
 * and restarts it with its AOF, kills one and restarts it empty, pauses one
 * (SIGSTOP) for 0.3-1.5 s, or kills a worker process while it holds the
 * lock (a death: the next taker must get EOWNERDEAD), with a calm second
 * between faults.  Checked:
 *
 *   - deadlines: a trylock returns within the reply floor, a timedlock
 *     within its deadline, an unlock within the unreachable bound, each
 *     + 50 ms, as docs/dlock.3 promises (a lock has none: it waits for
 *     holders), the time the calling thread waited for a CPU left out
 *     (bound_check);
 *   - exclusion: no two live holders at once; fences strictly increase
 *     from one holder to the next;
 *   - EOWNERDEAD only after a death, and at most once per death;
 *   - work goes on: acquisitions after the last fault.
 *
 * REDLOCK_CHAOS_SECONDS (default 8: a few seconds per fault kind in CI)
 * runs it longer; docs/testing.md says so.  REDLOCK_CHAOS_VERBOSE=1
 * prints each fault and each late call with its time.
 */
#include "fixture_multi.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlock.h>

#define NM 3
#define NPROC 3
#define NTHR 2
#define LEASE_MS 2000
#define UNREACHABLE_MS 2000
/* A call's allowance past its bound: docs/dlock.3's 50 ms.  The library
 * ends every wait of a timed call DLOCK__LATE_MS (25 ms) past its
 * deadline, and a multi-master call decides once a quorum answered, so a
 * master killed, restarted or paused holds no call up. */
#define LATE_MS 50.0
/* The test's processes (workers, injector, the redis-servers it starts)
 * run at this nice value when allowed (root; otherwise the default): on
 * a host whose CPUs other work keeps busy, a process at the default
 * weight goes unscheduled for 50-100 ms now and then, all its threads
 * with it, which a bound of 50 ms would count against the library. */
#define NICE -10
#define TRY_MS 200.0
#define NAME "rlchaos/lock"

enum { K_KILL_AOF, K_KILL_EMPTY, K_PAUSE, K_DEATH, K_NKINDS };
static const char *const kind_names[K_NKINDS] = { "kill+AOF", "kill+empty", "pause", "holder death" };

struct shared {
    int stop;
    int holder;                 /* the pid in the critical section, or 0 */
    int dead[64], ndead;        /* worker pids killed by the injector */
    int deaths;                 /* holders killed holding it */
    int ownerdead;              /* EOWNERDEAD answers */
    int acquired, busy, timedout, nolck, lost;
    int late, two_holders, fence_back, odd_errors, ownerdead_early;
    int late_raw;               /* calls past their bound + LATE_MS, the time waiting for a CPU included */
    int worst_late_us;          /* the most a call went past its bound, that time left out */
    unsigned long long last_fence;
    pthread_mutex_t mu;         /* process-shared: holder and last_fence checks */
    char why[4][200];           /* the first violations, said */
    int nwhy;
};

static struct shared *sh;
static dlt_redis srv[NM];
static char url[512];

static void note(const char *fmt, const char *a, double x) {
    pthread_mutex_lock(&sh->mu);
    if (sh->nwhy < 4) snprintf(sh->why[sh->nwhy++], sizeof sh->why[0], fmt, a, x);
    pthread_mutex_unlock(&sh->mu);
}

static int was_killed(int pid) {
    int i;
    for (i = 0; i < sh->ndead; i++)
        if (sh->dead[i] == pid) return 1;
    return 0;
}

/* The longest this process went unscheduled lately: a thread that
 * sleeps 1 ms at a time notes each wake-up more than STALL_MS late, so
 * that a late call can be told from a machine that did not run the
 * process (printed with REDLOCK_CHAOS_VERBOSE). */
#define STALL_MS 10.0
#define NSTALL 64
static struct {
    double at, ms;
} stalls[NSTALL];
static unsigned nstalls;
static pthread_mutex_t stall_mu = PTHREAD_MUTEX_INITIALIZER;

static void *stall_watch(void *arg) {
    (void)arg;
    for (;;) {
        double t0 = dlt_now(), late;
        dlt_sleep_ms(1);
        late = (dlt_now() - t0) * 1000 - 1;
        if (late < STALL_MS) continue;
        pthread_mutex_lock(&stall_mu);
        stalls[nstalls % NSTALL].at = dlt_now();
        stalls[nstalls % NSTALL].ms = late;
        nstalls++;
        pthread_mutex_unlock(&stall_mu);
    }
    return NULL;
}

/* The longest stall noted that ended after `since` (s, dlt_now). */
static double stall_since(double since) {
    double worst = 0;
    unsigned i;
    pthread_mutex_lock(&stall_mu);
    for (i = 0; i < NSTALL && i < nstalls; i++)
        if (stalls[i].at >= since && stalls[i].ms > worst) worst = stalls[i].ms;
    pthread_mutex_unlock(&stall_mu);
    return worst;
}

/* How long (ms) the calling thread has waited, runnable, for a CPU since
 * it started (the kernel's run_delay, /proc/thread-self/schedstat); 0
 * when the kernel does not say. */
static double cpu_wait_ms(void) {
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    unsigned long long run = 0, wait = 0;
    if (f == NULL) return 0;
    if (fscanf(f, "%llu %llu", &run, &wait) != 2) wait = 0;
    fclose(f);
    return wait / 1e6;
}

/* A call of `what` took dt ms against a bound of `bound` ms, `waited` ms
 * of them runnable but given no CPU (cpu_wait_ms): a thread the machine
 * does not run cannot return, so the bound is checked on dt - waited;
 * calls late by dt alone are counted and printed too. */
static void bound_check(const char *what, double dt, double waited, double bound) {
    if (dt > bound + LATE_MS) dlt_flag_add(&sh->late_raw, 1);
    if (dt - waited > bound) dlt_flag_max(&sh->worst_late_us, (int)((dt - waited - bound) * 1000));
    if (dt <= bound + LATE_MS) return;
    if (getenv("REDLOCK_CHAOS_VERBOSE"))
        fprintf(stderr, "  %.3f pid %d %s late by %.1f ms (bound %.0f; %.0f ms waiting for a CPU; this process "
                "unscheduled up to %.0f ms meanwhile): %s\n", dlt_now(), (int)getpid(), what, dt - bound, bound, waited,
                stall_since(dlt_now() - dt / 1000), dlock_last_error());
    if (dt - waited <= bound + LATE_MS) return;
    dlt_flag_add(&sh->late, 1);
    note("%s late by %.1f ms", what, dt - waited - bound);
}

/* In the critical section: nobody alive is in it, and the fence is above
 * the last holder's. */
static void critical(dlock_mutex_t *m) {
    unsigned long long f = dlock_mutex_fence(m);
    pthread_mutex_lock(&sh->mu);
    if (sh->holder != 0 && !was_killed(sh->holder)) {
        sh->two_holders++;
        if (sh->nwhy < 4) snprintf(sh->why[sh->nwhy++], sizeof sh->why[0], "two holders: %d and %d", sh->holder, getpid());
    }
    if (f <= sh->last_fence) {
        sh->fence_back++;
        if (sh->nwhy < 4)
            snprintf(sh->why[sh->nwhy++], sizeof sh->why[0], "fence %llu after %llu", f, sh->last_fence);
    }
    if (f > sh->last_fence) sh->last_fence = f;
    sh->holder = getpid();
    pthread_mutex_unlock(&sh->mu);
    dlt_sleep_ms((unsigned)(rand() % 8));
    pthread_mutex_lock(&sh->mu);
    if (sh->holder == getpid()) sh->holder = 0;
    pthread_mutex_unlock(&sh->mu);
}

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m, (void)name, (void)arg;
    dlt_flag_add(&sh->lost, 1);
}

/* One call of a random kind; its bound checked, its result counted. */
static void one_call(dlock_mutex_t *m, unsigned *seed) {
    int kind = (int)(rand_r(seed) % 4), rc;
    long ms = 30 + (long)(rand_r(seed) % 570);
    double w0 = cpu_wait_ms(), t0 = dlt_now(), dt;
    if (kind == 0) {
        rc = dlock_mutex_trylock(m);
        bound_check("trylock", (dlt_now() - t0) * 1000, cpu_wait_ms() - w0, TRY_MS);
    } else if (kind == 3) {
        rc = dlock_mutex_lock(m); /* no bound: it waits while others hold it */
    } else {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
        rc = dlock_mutex_timedlock(m, &ts);
        bound_check(rc == 0 ? "timedlock (0)" : rc == ETIMEDOUT ? "timedlock (ETIMEDOUT)" : "timedlock (other)",
                    (dlt_now() - t0) * 1000, cpu_wait_ms() - w0, (double)ms);
    }
    if (rc == EOWNERDEAD) {
        dlt_flag_add(&sh->ownerdead, 1);
        if (dlt_flag_get(&sh->deaths) == 0) dlt_flag_add(&sh->ownerdead_early, 1);
        (void)dlock_mutex_consistent(m);
    }
    if (rc == 0 || rc == EOWNERDEAD) {
        dlt_flag_add(&sh->acquired, 1);
        critical(m);
        w0 = cpu_wait_ms();
        t0 = dlt_now();
        rc = dlock_mutex_unlock(m);
        dt = (dlt_now() - t0) * 1000;
        bound_check("unlock", dt, cpu_wait_ms() - w0, UNREACHABLE_MS);
        if (rc != 0 && rc != EPERM && rc != ENOLCK) dlt_flag_add(&sh->odd_errors, 1);
        return;
    }
    if (rc == EBUSY) dlt_flag_add(&sh->busy, 1);
    else if (rc == ETIMEDOUT) dlt_flag_add(&sh->timedout, 1);
    else if (rc == ENOLCK) dlt_flag_add(&sh->nolck, 1);
    else {
        dlt_flag_add(&sh->odd_errors, 1);
        note("%s (%.0f)", dlock_last_error(), (double)rc);
    }
}

static void *worker_thread(void *p) {
    dlock_client_t *cl = p;
    dlock_mutex_t m;
    dlock_mutexattr_t a;
    unsigned seed = (unsigned)getpid() * 7919u + (unsigned)(uintptr_t)&m;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, cl);
    dlock_mutexattr_setlease(&a, LEASE_MS);
    dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST);
    dlock_mutexattr_setlostcallback(&a, on_lost, NULL);
    if (dlock_mutex_init(&m, NAME, &a) != 0) {
        dlt_flag_add(&sh->odd_errors, 1);
        return NULL;
    }
    dlock_mutexattr_destroy(&a);
    while (!dlt_flag_get(&sh->stop)) one_call(&m, &seed);
    dlock_mutex_destroy(&m);
    return NULL;
}

static int worker(void *arg) {
    dlock_client_t *cl = NULL;
    pthread_t t[NTHR];
    int i;
    (void)arg;
    if (dlt_client_make(&cl, url, UNREACHABLE_MS) != 0) return 10;
    if (getenv("REDLOCK_CHAOS_VERBOSE")) {
        pthread_t w;
        pthread_create(&w, NULL, stall_watch, NULL);
        pthread_detach(w);
    }
    for (i = 0; i < NTHR; i++) pthread_create(&t[i], NULL, worker_thread, cl);
    for (i = 0; i < NTHR; i++) pthread_join(t[i], NULL);
    dlock_client_destroy(cl);
    return 0;
}

/* ------------------------------------------------------------- faults */

static void remove_data(const dlt_redis *r) {
    char path[600];
    DIR *d;
    struct dirent *e;
    snprintf(path, sizeof path, "rm -rf '%s/appendonlydir'", r->dir);
    if (system(path) != 0) fprintf(stderr, "  (could not remove %s/appendonlydir)\n", r->dir);
    if ((d = opendir(r->dir)) == NULL) return;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 4 && (strcmp(e->d_name + n - 4, ".aof") == 0 || strcmp(e->d_name + n - 4, ".rdb") == 0)) {
            snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* Kills a worker while it holds the lock (waits up to 2 s for one to),
 * and starts another in its place. */
static int holder_death(pid_t *workers) {
    double end = dlt_now() + 2;
    int i, h = 0;
    while (dlt_now() < end && h == 0) {
        pthread_mutex_lock(&sh->mu);
        h = sh->holder;
        for (i = 0; i < NPROC && workers[i] != h; i++)
            ;
        if (h != 0 && i < NPROC) {
            kill(h, SIGKILL); /* under mu: it cannot leave the section first */
            sh->dead[sh->ndead++ % 64] = h;
            sh->deaths++;
        } else {
            h = 0;
        }
        pthread_mutex_unlock(&sh->mu);
        if (h == 0) dlt_sleep_ms(1);
    }
    if (h == 0) return -1;
    (void)dlt_wait(h, 5000);
    workers[i] = dlt_spawn(worker, NULL);
    return 0;
}

static void inject(int kind, unsigned *seed, pid_t *workers) {
    dlt_redis *r = &srv[rand_r(seed) % NM];
    unsigned down = 300 + rand_r(seed) % 1200;
    if (getenv("REDLOCK_CHAOS_VERBOSE")) fprintf(stderr, "  %.3f fault %s on %d for %u ms\n", dlt_now(), kind_names[kind], (int)(r - srv), down);
    if (kind == K_DEATH) {
        if (holder_death(workers) != 0) printf("  (no holder to kill within 2 s)\n");
        return;
    }
    if (kind == K_PAUSE) {
        CU_ASSERT_EQUAL(kill(r->pid, SIGSTOP), 0);
        dlt_sleep_ms(down);
        CU_ASSERT_EQUAL(kill(r->pid, SIGCONT), 0);
        return;
    }
    CU_ASSERT_EQUAL(dlt_redis_kill(r), 0);
    dlt_sleep_ms(down);
    if (kind == K_KILL_EMPTY) remove_data(r);
    CU_ASSERT_EQUAL(dlt_redis_restart(r), 0);
}

static void test_redlock_chaos(void) {
    const char *e = getenv("REDLOCK_CHAOS_SECONDS");
    double seconds = e != NULL && atof(e) > 0 ? atof(e) : 8, end;
    unsigned seed = (unsigned)getpid();
    pid_t workers[NPROC];
    int i, n = 0, counts[K_NKINDS] = { 0 }, order[K_NKINDS], acq_before;
    pthread_mutexattr_t ma;
    size_t len = 0;

    if (setpriority(PRIO_PROCESS, 0, NICE) != 0) printf("\n  (nice %d not allowed: the default priority)", NICE);
    sh = DLT_SHM_NEW(struct shared, 1);
    memset(sh, 0, sizeof *sh);
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&sh->mu, &ma);
    for (i = 0; i < NM; i++) {
        int ok = dlt_redis_start(&srv[i], "appendonly yes\nappendfsync always") == 0;
        CU_ASSERT_TRUE(ok);
        if (!ok) return;
        len += (size_t)snprintf(url + len, sizeof url - len, "%s127.0.0.1:%d", i ? "," : "redlock://", srv[i].port);
    }
    snprintf(url + len, sizeof url - len, "?restart_guard_ms=%d", LEASE_MS);
    for (i = 0; i < NPROC; i++) workers[i] = dlt_spawn(worker, NULL);
    dlt_sleep_ms(500);
    end = dlt_now() + seconds;
    while (dlt_now() < end) {
        for (i = 0; i < K_NKINDS; i++) order[i] = i;
        for (i = K_NKINDS - 1; i > 0; i--) {
            int j = (int)(rand_r(&seed) % (unsigned)(i + 1)), t = order[i];
            order[i] = order[j], order[j] = t;
        }
        for (i = 0; i < K_NKINDS && (dlt_now() < end || n < K_NKINDS); i++) {
            inject(order[i], &seed, workers);
            counts[order[i]]++;
            n++;
            dlt_sleep_ms(800 + rand_r(&seed) % 400);
        }
    }
    /* Work goes on after the last fault (the guard and a lease at most). */
    acq_before = dlt_flag_get(&sh->acquired);
    dlt_sleep_ms(2 * LEASE_MS);
    dlt_flag_set(&sh->stop, 1);
    for (i = 0; i < NPROC; i++) CU_ASSERT_EQUAL(dlt_wait(workers[i], 20000), 0);

    printf("\n  redlock chaos: %d faults (", n);
    for (i = 0; i < K_NKINDS; i++) printf("%s%s=%d", i ? " " : "", kind_names[i], counts[i]);
    printf(") over %.0f s; acquisitions=%d busy=%d timedout=%d enolck=%d lost=%d\n", seconds, sh->acquired, sh->busy,
           sh->timedout, sh->nolck, sh->lost);
    printf("  deaths=%d EOWNERDEAD=%d (before any death: %d); calls past their bound + %.0f ms: %d, %d with the time "
           "waiting for a CPU (worst %.1f ms past without it); two holders=%d; fences back=%d; odd errors=%d\n",
           sh->deaths, sh->ownerdead, sh->ownerdead_early, LATE_MS, sh->late, sh->late_raw,
           sh->worst_late_us / 1000.0, sh->two_holders, sh->fence_back, sh->odd_errors);
    for (i = 0; i < sh->nwhy; i++) printf("  - %s\n", sh->why[i]);
    CU_ASSERT_EQUAL(sh->late, 0);
    CU_ASSERT_EQUAL(sh->two_holders, 0);
    CU_ASSERT_EQUAL(sh->fence_back, 0);
    CU_ASSERT_EQUAL(sh->odd_errors, 0);
    CU_ASSERT_EQUAL(sh->ownerdead_early, 0);
    CU_ASSERT_TRUE(sh->ownerdead <= sh->deaths);
    CU_ASSERT_TRUE(dlt_flag_get(&sh->acquired) > acq_before);
    for (i = 0; i < NM; i++) dlt_redis_cleanup(&srv[i]);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_redlock_chaos),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int i, rc = dlt_main(argc, argv, "redlock_chaos", tests);
    for (i = 0; i < NM; i++) {
        if (srv[i].pid > 0) (void)kill(srv[i].pid, SIGCONT);
        dlt_redis_cleanup(&srv[i]);
    }
    return rc;
}
