/* labels: redis slow; timeout: 600 */
/* test_chaos.c -- the chaos suite: many holders doing fenced work while
 * the suite kills them, pauses them, restarts and freezes the server.
 *
 * SHAPE
 *
 * The test's main process is only the fault injector and, at the end, the
 * checker; it never calls dlock itself, so every worker it forks starts
 * clean.  It starts its own redis-server with persistence ("appendonly yes",
 * "appendfsync always"), so a clean restart keeps every key.  Workers are
 * NPROC processes x NTHR threads over NLOCK lock names, lease LEASE_MS.
 * Each worker process has its own client: command timeout 400 ms, connect
 * timeout 400 ms, unreachable bound 1500 ms and a restart guard of 1000 ms
 * (>= the 600 ms lease: after the server lost its data nothing is granted
 * until every hold from before the loss has run out; see
 * src/backend/lua/acquire.lua).
 *
 * A worker thread loops: pick a lock; timedlock (CLOCK_REALTIME) or
 * clocklock (CLOCK_MONOTONIC), at random, with a deadline 1-2 s ahead; on
 * success do 1-4 steps of "fenced work": t = now; holds() (stop at once if
 * 0: the hold was lost); 1-5 ms of work; dlock_fenced_set of the lock's
 * data key; then unlock (EPERM is legal after a loss).  The work sits
 * between the holds() check and the write on purpose: a pause that hits
 * the holder is then most likely to hit it between "I still hold it" and
 * "I write", the window fencing exists for.  Every event is one fixed-format
 * line written with one write(2) on an O_APPEND file per process, so a
 * SIGKILL loses at most the record being made.  Times are CLOCK_MONOTONIC
 * nanoseconds: system-wide, so the logs of all processes compare directly.
 *
 *   L pid thr seq lock start ret deadline rc fence tf   a lock call
 *   H pid thr seq lock t ok                             a holds() check
 *   W pid thr seq lock fence start end rc               a fenced write
 *   U pid thr seq lock start end rc                     an unlock
 *   X pid lock t                                        lost-lock handler
 *
 * (tf: when dlock_mutex_fence was asked after a successful lock; a nonzero
 * fence is itself proof that the hold was valid at tf.)
 *
 * FAULTS
 *
 * For CHAOS_SECONDS (default 75) the injector draws fault kinds in shuffled
 * rounds of all five kinds (so every kind is injected equally often, far more
 * than twice), seeded (CHAOS_SEED, printed):
 *   kill          SIGKILL a worker -- the holder of a random lock when one of
 *                 ours holds it (the pid in the lock's `who`), else a random
 *                 one -- and fork a fresh worker in its place;
 *   pause         SIGSTOP a worker (a holder when possible) for lease +
 *                 300..1500 ms, then SIGCONT; the interval is recorded;
 *   restart       SIGTERM the server and start it again: data survives;
 *   restart-lost  SIGKILL the server, delete its AOF/RDB files, start it
 *                 again: every key is gone (locks, fence counters, data);
 *   freeze        SIGSTOP the server for 200..2500 ms, then SIGCONT.  Most
 *                 freezes are shorter than the unreachable bound (1.5 s),
 *                 so calls ride them out; the longer ones make calls give
 *                 up with ENOLCK/ETIMEDOUT while their requests still sit
 *                 in the frozen server's sockets, to be run when it wakes.
 * After each fault the injector waits 1-2 s, and longer (up to 8 s) until
 * some acquisition has succeeded after the fault ended, so every fault
 * finds a working system (an anonymous shared page carries the time of the
 * latest success).
 *
 * THE CHECKER (after the workers have stopped)
 *
 * (1) Fences strictly increase per lock.  Ordering by return time alone is
 *     not sound: a holder paused (or starved) between the server's grant and
 *     the return of its lock call returns after its lease ran out, possibly
 *     after its successor returned with a larger fence, and that is correct
 *     behaviour (its hold is invalid from the start; holds() says 0).  So:
 *     (a) no two successful acquisitions of a lock share a fence; (b) among
 *     acquisitions that were provably valid at some moment (an H check said
 *     1, or dlock_mutex_fence gave nonzero), ordered by return time, fences
 *     strictly increase; (c) for ALL successful acquisitions: if A's call
 *     returned before B's call started, A's fence < B's fence (A's grant
 *     preceded B's, whatever pauses happened).
 * (2) No stale fenced write is accepted: for one key, an accepted write with
 *     fence f1 that STARTED after another accepted write with fence f2 > f1
 *     had ENDED is a violation -- unless a data-losing restart lies between
 *     the start of the earlier and the end of the later write: the fenced
 *     data lives in the same Redis and is lost with it, after which an old
 *     fence can legitimately write first (the window counted is from just
 *     before SIGKILL to when the dead server has been reaped).  Also the
 *     key's final fence must be >= every fence accepted since the last loss.
 * (3) Valid intervals of holders of one lock never overlap.  A hold's valid
 *     interval is [return of its lock call, the last moment it was proven
 *     valid]: t of its last H check that said 1 (t is taken BEFORE holds(),
 *     so a pause inside holds() cannot stretch it), or tf.
 * (4) Every lock call returns by its deadline plus MARGIN_MS (200 ms),
 *     except calls of a process that was SIGSTOPped during the call (it
 *     could not run).  Why 200 ms: the library ends every connect attempt
 *     and reply wait of a timed call 25 ms past its deadline
 *     (DLOCK__LATE_MS; docs/locks.md promises 50 ms, which test_deadline holds
 *     it to, one fault at a time), the grant wait included, and a
 *     withdrawal not made by then is left to the background.  Before that,
 *     a call overshot by up to two reply floors (a grant wait on a frozen
 *     server, then the withdrawal's reply wait), ~400 ms (seed 683937105:
 *     402.6 ms), and earlier by a command timeout plus a floor (601.8 ms);
 *     runs since overshoot by ~35 ms, with sanitizers too.  The rest is
 *     slack: the workers, their library threads, redis-server and the
 *     injector share a loaded 2-CPU CI machine, and a bound much tighter
 *     would measure the machine rather than the library.  The detail line
 *     prints the worst unpaused overshoot of every run.
 * (5) Work resumes after each fault: within RESUME_MS (5 s) after each fault
 *     ended (kill: the SIGKILL; pause/freeze: the SIGCONT; restarts: the
 *     server answering again), some acquisition succeeds.  5 s covers the
 *     restart guard (1 s), reconnect backoff, and waiters sleeping out the
 *     lease of a killed holder.
 * (R) Results stay inside the contract: a lock call gives 0, ETIMEDOUT or
 *     ENOLCK; a fenced write 0, ESTALE, EPERM or ENOLCK; an unlock 0, EPERM or
 *     ENOLCK.  Anything else (EPROTO because a restarting server said
 *     "-LOADING", say) is a violation too: a server that restarts is a fault
 *     the library must ride out, not report as a protocol error.
 * Before all that, the checker checks itself on two synthetic logs: one
 * with a violation of every kind (each must be found) and one with only
 * legal corner cases (nothing may be found).
 * It prints the first 5 violations of each kind in detail, a detail line,
 * and then one line:
 *   chaos: acquisitions=N faults=N (kill=.. pause=.. restart=..
 *   restart-lost=.. freeze=..) violations=N
 * and asserts violations == 0 and acquisitions >= 3000 (scaled down when
 * CHAOS_SECONDS is set shorter).  The logs are kept (path printed) when
 * the test fails, removed otherwise.
 *
 * Knobs for reproducing a run: CHAOS_SEED, CHAOS_SECONDS, CHAOS_KEEP_LOGS=1
 * (keep the logs even on success), CHAOS_CHECK=<kept log folder> (run only
 * the checker again, on the logs and the injector's record of an earlier
 * run); and CHAOS_GUARD_MS=0, which turns the restart guard off so that
 * the checker must find overlapping holds after data-losing restarts -- a
 * check of the checker on real logs (it does find them).
 *
 * Every process the test starts is ended by its pid: workers by a stop flag
 * in the shared page, then SIGKILL after a grace period; they also die with
 * the test (PR_SET_PDEATHSIG); the server by the fixture.
 */
#include "fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

/* ------------------------------------------------------------ settings */

#define NPROC 4
#define NTHR 2
#define NLOCK 3
#define LEASE_MS 600u
#define CMD_TIMEOUT_MS 400u
#define CONNECT_TIMEOUT_MS 400u
#define UNREACHABLE_MS 1500u
#define GUARD_MS 1000u
#define MARGIN_MS 200
#define FREEZE_MIN_MS 200
#define FREEZE_MAX_MS 2500 /* past UNREACHABLE_MS now and then: ENOLCK paths too */
#define RESUME_MS 5000
#define DEFAULT_SECONDS 75
#define MIN_ACQUISITIONS 3000
#define MAX_FAULTS 256
#define MAX_PAUSES 256
#define SHOWN_PER_KIND 5 /* violations printed in detail, per kind */

#define NS_PER_MS 1000000LL

enum { F_KILL, F_PAUSE, F_RESTART, F_RESTART_LOST, F_FREEZE, F_NKINDS };
static const char *const fault_names[F_NKINDS] = { "kill", "pause", "restart", "restart-lost",
                                                   "freeze" };

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
    if (ns <= 0) return;
    struct timespec ts = { (time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

/* A number in [lo, hi]. */
static unsigned rng_range(uint64_t *s, unsigned lo, unsigned hi) {
    return lo + (unsigned)((rng_next(s) >> 33) % (uint64_t)(hi - lo + 1));
}

/* ------------------------------------------- state shared with workers */

/* One anonymous shared page, mapped before the first fork. */
typedef struct shared {
    atomic_int stop;            /* workers finish their current hold and exit */
    atomic_llong last_ok_ns;    /* return time of the latest successful lock */
    atomic_llong acquisitions;  /* successful lock calls (progress display) */
    int64_t hard_end_ns;        /* workers exit by then whatever happens */
    uint64_t seed;
    unsigned guard_ms;          /* the clients' restart guard */
    char url[128];
    char logdir[256];
} shared;

static shared *sh;

/* ------------------------------------------------------------- workers */

static int log_fd = -1;
static pid_t my_pid;

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n <= 0 || n >= (int)sizeof buf || log_fd < 0) return;
    ssize_t w = write(log_fd, buf, (size_t)n);
    (void)w;
}

typedef struct worker_thread {
    int thr;
    dlock_mutex_t *m; /* the NLOCK mutexes of the process */
    uint64_t rng;
} worker_thread;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    log_line("X %d %d %" PRId64 "\n", (int)my_pid, (int)(intptr_t)arg, now_ns());
}

static int worker_should_stop(void) {
    return atomic_load(&sh->stop) || now_ns() >= sh->hard_end_ns;
}

static void *worker_thread_main(void *arg) {
    worker_thread *w = arg;
    int seq = 0;

    while (!worker_should_stop()) {
        int lock = (int)rng_range(&w->rng, 0, NLOCK - 1);
        dlock_mutex_t *m = &w->m[lock];
        unsigned d_ms = rng_range(&w->rng, 1000, 2000);
        int64_t start = now_ns();
        int64_t deadline = start + (int64_t)d_ms * NS_PER_MS;
        struct timespec abs;
        int rc;

        if (rng_next(&w->rng) & 1) {
            abs = dlt_abs_in(CLOCK_REALTIME, d_ms);
            rc = dlock_mutex_timedlock(m, &abs);
        } else {
            abs.tv_sec = (time_t)(deadline / 1000000000LL);
            abs.tv_nsec = (long)(deadline % 1000000000LL);
            rc = dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &abs);
        }
        int64_t ret = now_ns();
        uint64_t fence = 0;
        int64_t tf = 0;
        if (rc == 0) {
            seq++;
            tf = now_ns();
            fence = dlock_mutex_fence(m);
            atomic_store(&sh->last_ok_ns, ret);
            atomic_fetch_add(&sh->acquisitions, 1);
        }
        log_line("L %d %d %d %d %" PRId64 " %" PRId64 " %" PRId64 " %d %" PRIu64 " %" PRId64 "\n",
                 (int)my_pid, w->thr, seq, lock, start, ret, deadline, rc, fence, tf);
        if (rc != 0) {
            /* ETIMEDOUT / ENOLCK are the expected failures; anything else
             * is logged with its message; don't spin on it. */
            if (rc != ETIMEDOUT && rc != ENOLCK) {
                log_line("M %d %d lock %d %.150s\n", (int)my_pid, w->thr, rc, dlock_last_error());
                sleep_ns(5 * NS_PER_MS);
            }
            continue;
        }

        unsigned steps = rng_range(&w->rng, 1, 4);
        for (unsigned s = 0; s < steps; s++) {
            int64_t t = now_ns();
            int ok = dlock_mutex_holds(m);
            log_line("H %d %d %d %d %" PRId64 " %d\n", (int)my_pid, w->thr, seq, lock, t, ok);
            if (ok != 1) break; /* lost: stop working */
            sleep_ns((int64_t)rng_range(&w->rng, 1000, 5000) * 1000); /* the work */
            char key[64], val[96];
            snprintf(key, sizeof key, "chaos:data:%d", lock);
            int vlen = snprintf(val, sizeof val, "%d:%d:%d:%" PRIu64 ":%u", (int)my_pid, w->thr,
                                seq, fence, s);
            int64_t ws = now_ns();
            int wrc = dlock_fenced_set(m, key, val, (size_t)vlen);
            int64_t we = now_ns();
            log_line("W %d %d %d %d %" PRIu64 " %" PRId64 " %" PRId64 " %d\n", (int)my_pid, w->thr,
                     seq, lock, fence, ws, we, wrc);
            if (wrc != 0 && wrc != ESTALE && wrc != EPERM && wrc != ENOLCK)
                log_line("M %d %d write %d %.150s\n", (int)my_pid, w->thr, wrc, dlock_last_error());
            if (wrc != 0) break; /* the hold is over, or its fate unknown */
        }
        int64_t us = now_ns();
        int urc = dlock_mutex_unlock(m);
        int64_t ue = now_ns();
        if (urc != 0 && urc != EPERM && urc != ENOLCK)
            log_line("M %d %d unlock %d %.150s\n", (int)my_pid, w->thr, urc, dlock_last_error());
        log_line("U %d %d %d %d %" PRId64 " %" PRId64 " %d\n", (int)my_pid, w->thr, seq, lock, us,
                 ue, urc);
        if (rng_range(&w->rng, 0, 3) == 0) sleep_ns((int64_t)rng_range(&w->rng, 0, 2000) * 1000);
    }
    return NULL;
}

/* A worker process.  Exit status: 0, or a small code for a setup failure. */
static int worker_main(void *arg) {
    (void)arg;
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) return 90;
    my_pid = getpid();

    char path[320];
    snprintf(path, sizeof path, "%s/w%d.log", sh->logdir, (int)my_pid);
    log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return 91;
    log_line("S %d %" PRId64 "\n", (int)my_pid, now_ns());

    dlock_config_t cfg;
    dlock_client_t *cl = NULL;
    dlock_config_init(&cfg);
    cfg.url = sh->url;
    cfg.command_timeout_ms = CMD_TIMEOUT_MS;
    cfg.connect_timeout_ms = CONNECT_TIMEOUT_MS;
    cfg.unreachable_ms = UNREACHABLE_MS;
    cfg.restart_guard_ms = sh->guard_ms;
    if (dlock_client_create(&cl, &cfg) != 0) return 92;

    dlock_mutex_t m[NLOCK];
    for (int i = 0; i < NLOCK; i++) {
        dlock_mutexattr_t a;
        char name[32];
        snprintf(name, sizeof name, "chaos/%d", i);
        if (dlock_mutexattr_init(&a) != 0 || dlock_mutexattr_setclient(&a, cl) != 0 ||
            dlock_mutexattr_setlease(&a, LEASE_MS) != 0 ||
            dlock_mutexattr_setlostcallback(&a, on_lost, (void *)(intptr_t)i) != 0 ||
            dlock_mutex_init(&m[i], name, &a) != 0)
            return 93;
        dlock_mutexattr_destroy(&a);
    }

    worker_thread wt[NTHR];
    pthread_t th[NTHR];
    int started = 0;
    for (int i = 0; i < NTHR; i++) {
        wt[i].thr = i;
        wt[i].m = m;
        wt[i].rng = sh->seed ^ ((uint64_t)my_pid << 20) ^ (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull;
        if (wt[i].rng == 0) wt[i].rng = 1;
        if (pthread_create(&th[i], NULL, worker_thread_main, &wt[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    int rc = started == NTHR ? 0 : 94;
    for (int i = 0; i < NLOCK; i++)
        if (dlock_mutex_destroy(&m[i]) != 0 && rc == 0) rc = 95;
    if (dlock_client_destroy(cl) != 0 && rc == 0) rc = 96;
    log_line("E %d %" PRId64 "\n", (int)my_pid, now_ns());
    close(log_fd);
    return rc;
}

/* ------------------------------------------------------ fault injector */

typedef struct fault {
    int kind;
    pid_t pid;     /* kill, pause: the worker */
    int holder;    /* kill, pause: it held a lock when picked */
    int64_t start; /* just before the fault began */
    int64_t end;   /* when it healed */
} fault;

typedef struct pause_iv {
    pid_t pid;
    int64_t from, to;
} pause_iv;

typedef struct loss_iv {
    int64_t from, to; /* just before SIGKILL .. the dead server reaped */
} loss_iv;

static dlt_redis srv;
static pid_t workers[NPROC];
static fault faults[MAX_FAULTS];
static int nfaults;
static pause_iv pauses[MAX_PAUSES];
static int npauses;
static loss_iv losses[MAX_FAULTS];
static int nlosses;
static int worker_bad_exits;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *path) {
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Deletes the server's persistence files: appendonlydir/, *.aof, *.rdb. */
static void remove_persistence(const dlt_redis *r) {
    char path[512];
    snprintf(path, sizeof path, "%s/appendonlydir", r->dir);
    rm_tree(path);
    DIR *d = opendir(r->dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if ((n > 4 && strcmp(e->d_name + n - 4, ".aof") == 0) ||
            (n > 4 && strcmp(e->d_name + n - 4, ".rdb") == 0)) {
            snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

static pid_t spawn_worker(void) {
    return dlt_spawn(worker_main, NULL);
}

/* Reaps a worker; counts exits other than 0 (or our SIGKILL). */
static void reap_worker(pid_t pid, int timeout_ms, int killed) {
    int st = dlt_wait(pid, timeout_ms);
    if (killed && st == 128 + SIGKILL) return;
    if (st != 0) {
        fprintf(stderr, "chaos: worker %d ended with status %d\n", (int)pid, st);
        worker_bad_exits++;
    }
}

/* The worker that holds a random lock now, if one of ours does; else a
 * random worker.  *holder says which. */
static int pick_worker(uint64_t *rng, int *holder) {
    int lock = (int)rng_range(rng, 0, NLOCK - 1);
    *holder = 0;
    if (srv.pid > 0) {
        char key[64];
        long long p;
        snprintf(key, sizeof key, "dlock:{chaos/%d}", lock);
        if (dlt_redis_who(&srv, key, NULL, 0, &p, NULL))
            for (int i = 0; i < NPROC; i++)
                if (workers[i] == (pid_t)p) {
                    *holder = 1;
                    return i;
                }
    }
    return (int)rng_range(rng, 0, NPROC - 1);
}

static int inject(int kind, uint64_t *rng) {
    fault *f = &faults[nfaults];
    f->kind = kind;
    f->pid = 0;
    f->holder = 0;
    switch (kind) {
    case F_KILL: {
        int i = pick_worker(rng, &f->holder);
        f->pid = workers[i];
        f->start = now_ns();
        kill(workers[i], SIGKILL);
        f->end = now_ns();
        reap_worker(workers[i], 5000, 1);
        workers[i] = spawn_worker();
        if (workers[i] < 0) return -1;
        break;
    }
    case F_PAUSE: {
        int i = pick_worker(rng, &f->holder);
        f->pid = workers[i];
        int64_t len = (int64_t)(LEASE_MS + rng_range(rng, 300, 1500)) * NS_PER_MS;
        f->start = now_ns();
        kill(workers[i], SIGSTOP);
        sleep_ns(len);
        kill(workers[i], SIGCONT);
        f->end = now_ns();
        if (npauses < MAX_PAUSES) pauses[npauses++] = (pause_iv){ f->pid, f->start, f->end };
        break;
    }
    case F_RESTART:
        f->start = now_ns();
        if (dlt_redis_stop(&srv) != 0 || dlt_redis_restart(&srv) != 0) return -1;
        f->end = now_ns();
        break;
    case F_RESTART_LOST:
        f->start = now_ns();
        if (dlt_redis_kill(&srv) != 0) return -1;
        losses[nlosses++] = (loss_iv){ f->start, now_ns() };
        remove_persistence(&srv);
        if (dlt_redis_restart(&srv) != 0) return -1;
        f->end = now_ns();
        break;
    case F_FREEZE: {
        int64_t len = (int64_t)rng_range(rng, FREEZE_MIN_MS, FREEZE_MAX_MS) * NS_PER_MS;
        f->start = now_ns();
        kill(srv.pid, SIGSTOP);
        sleep_ns(len);
        kill(srv.pid, SIGCONT);
        f->end = now_ns();
        break;
    }
    }
    nfaults++;
    return 0;
}

/* ------------------------------------------------------------- checker */

typedef struct acq {
    pid_t pid;
    int thr, seq, lock, rc;
    int64_t start, ret, deadline, tf;
    uint64_t fence;
    int64_t vend; /* last moment proven valid; 0: never */
} acq;

typedef struct wr {
    pid_t pid;
    int thr, seq, lock, rc;
    uint64_t fence;
    int64_t start, end;
} wr;

typedef struct vec {
    void *p;
    size_t n, cap, size;
} vec;

static void *vec_push(vec *v) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 1024;
        void *np = realloc(v->p, nc * v->size);
        if (np == NULL) abort();
        v->p = np;
        v->cap = nc;
    }
    return (char *)v->p + v->size * v->n++;
}

typedef struct stats {
    long calls, acquisitions, timeouts, enolck, other_rc;
    long holds_checked, holds_lost, lost_handler;
    long writes, writes_ok, writes_estale, writes_eperm, writes_other;
    long unlocks_ok, unlocks_eperm, unlocks_other;
    long malformed, messages;
    long late_paused;
    int64_t max_late;
} stats;

/* Violations by kind: the five properties, and (R) results outside the
 * contract.  The first few of each kind are printed, so that a flood of one
 * kind does not hide another. */
enum { V_FENCE, V_STALE, V_OVERLAP, V_DEADLINE, V_RESUME, V_RESULT, V_NKINDS };
static const char *const vnames[V_NKINDS] = { "(1) fences", "(2) stale writes",
                                              "(3) overlaps", "(4) deadlines", "(5) resumption",
                                              "(R) results" };
static int violations, vcount[V_NKINDS];
static int quiet; /* the checker's self-test: count, don't print */

static void violation(int kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(int kind, const char *fmt, ...) {
    if (!quiet && vcount[kind] < SHOWN_PER_KIND) {
        va_list ap;
        va_start(ap, fmt);
        printf("chaos: VIOLATION ");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    }
    vcount[kind]++;
    violations++;
}

#define MS(ns) ((double)(ns) / 1e6)

/* Reads one worker log.  H records update the valid end of the hold they
 * belong to: lines of one thread are in order in its process's file. */
static void read_log(const char *path, vec *acqs, vec *wrs, stats *st) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    long cur[NTHR];
    for (int i = 0; i < NTHR; i++) cur[i] = -1;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        int pid, thr, seq, lock, rc, ok;
        long long a, b, c, d;
        unsigned long long fence;
        if (strchr(line, '\n') == NULL) {
            st->malformed++; /* cut short by SIGKILL */
            continue;
        }
        switch (line[0]) {
        case 'L':
            if (sscanf(line, "L %d %d %d %d %lld %lld %lld %d %llu %lld", &pid, &thr, &seq, &lock,
                       &a, &b, &c, &rc, &fence, &d) != 10 ||
                thr < 0 || thr >= NTHR || lock < 0 || lock >= NLOCK) {
                st->malformed++;
                break;
            }
            {
                acq *x = vec_push(acqs);
                *x = (acq){ pid, thr, seq, lock, rc, a, b, c, d, fence, 0 };
                if (rc == 0 && fence != 0) x->vend = d;
                cur[thr] = rc == 0 ? (long)(acqs->n - 1) : -1;
            }
            break;
        case 'H':
            if (sscanf(line, "H %d %d %d %d %lld %d", &pid, &thr, &seq, &lock, &a, &ok) != 6 ||
                thr < 0 || thr >= NTHR) {
                st->malformed++;
                break;
            }
            st->holds_checked++;
            if (ok != 1) st->holds_lost++;
            if (ok == 1 && cur[thr] >= 0) {
                acq *x = (acq *)acqs->p + cur[thr];
                if (x->seq == seq && x->lock == lock && a > x->vend) x->vend = a;
            }
            break;
        case 'W':
            if (sscanf(line, "W %d %d %d %d %llu %lld %lld %d", &pid, &thr, &seq, &lock, &fence, &a,
                       &b, &rc) != 8 ||
                lock < 0 || lock >= NLOCK) {
                st->malformed++;
                break;
            }
            {
                wr *x = vec_push(wrs);
                *x = (wr){ pid, thr, seq, lock, rc, fence, a, b };
            }
            break;
        case 'U':
            if (sscanf(line, "U %d %d %d %d %lld %lld %d", &pid, &thr, &seq, &lock, &a, &b, &rc) !=
                7) {
                st->malformed++;
                break;
            }
            if (rc == 0) st->unlocks_ok++;
            else if (rc == EPERM) st->unlocks_eperm++;
            else {
                st->unlocks_other++;
                if (rc != ENOLCK)
                    violation(V_RESULT, "(R) unlock of pid %d thr %d (lock %d) returned %s: outside the "
                              "contract (0, EPERM, ENOLCK)", pid, thr, lock, dlock_err_name(rc));
            }
            break;
        case 'X':
            st->lost_handler++;
            break;
        case 'M':
            if (st->messages++ < 10) printf("chaos: note: %s", line);
            break;
        case 'S':
        case 'E':
            break;
        default:
            st->malformed++;
        }
    }
    fclose(f);
}

static int paused_during(pid_t pid, int64_t from, int64_t to) {
    for (int i = 0; i < npauses; i++)
        if (pauses[i].pid == pid && pauses[i].from <= to && pauses[i].to >= from) return 1;
    return 0;
}

static int cmp_ret(const void *x, const void *y) {
    const acq *a = *(const acq *const *)x, *b = *(const acq *const *)y;
    return a->ret < b->ret ? -1 : a->ret > b->ret;
}

static int cmp_fence(const void *x, const void *y) {
    const acq *a = *(const acq *const *)x, *b = *(const acq *const *)y;
    return a->fence < b->fence ? -1 : a->fence > b->fence;
}

static int cmp_wend(const void *x, const void *y) {
    const wr *a = *(const wr *const *)x, *b = *(const wr *const *)y;
    return a->end < b->end ? -1 : a->end > b->end;
}

static void describe_acq(char *buf, size_t len, const acq *a, int64_t t0) {
    snprintf(buf, len, "[pid %d thr %d seq %d fence %" PRIu64 " call %.1f..%.1f ms valid-to %.1f]",
             (int)a->pid, a->thr, a->seq, a->fence, MS(a->start - t0), MS(a->ret - t0),
             a->vend ? MS(a->vend - t0) : -1.0);
}

/* (1) and (3) for one lock. */
static void check_lock(int lock, acq **all, size_t n, int64_t t0) {
    char d1[200], d2[200];
    if (n == 0) return;

    /* (1a) distinct fences. */
    qsort(all, n, sizeof *all, cmp_fence);
    for (size_t i = 1; i < n; i++)
        if (all[i]->fence == all[i - 1]->fence) {
            describe_acq(d1, sizeof d1, all[i - 1], t0);
            describe_acq(d2, sizeof d2, all[i], t0);
            violation(V_FENCE, "(1) lock %d: fence %" PRIu64 " granted twice: %s %s", lock, all[i]->fence,
                      d1, d2);
        }

    qsort(all, n, sizeof *all, cmp_ret);
    /* (1c) real-time precedence, for every acquisition: the largest fence
     * among calls that returned before B's call started must be < B's. */
    {
        uint64_t *pmax = malloc(n * sizeof *pmax);
        size_t *parg = malloc(n * sizeof *parg);
        if (pmax == NULL || parg == NULL) abort();
        for (size_t i = 0; i < n; i++) {
            if (i == 0 || all[i]->fence > pmax[i - 1]) {
                pmax[i] = all[i]->fence;
                parg[i] = i;
            } else {
                pmax[i] = pmax[i - 1];
                parg[i] = parg[i - 1];
            }
        }
        for (size_t j = 0; j < n; j++) {
            /* k = number of acquisitions with ret < all[j]->start */
            size_t lo = 0, hi = n;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (all[mid]->ret < all[j]->start) lo = mid + 1;
                else hi = mid;
            }
            if (lo > 0 && pmax[lo - 1] >= all[j]->fence) {
                describe_acq(d1, sizeof d1, all[parg[lo - 1]], t0);
                describe_acq(d2, sizeof d2, all[j], t0);
                violation(V_FENCE, "(1) lock %d: an acquisition returned before a later call started, "
                          "with a fence not smaller: %s then %s", lock, d1, d2);
            }
        }
        free(pmax);
        free(parg);
    }

    /* (1b) and (3): the provably valid holds, by return time. */
    const acq *prev = NULL;    /* previous valid hold */
    const acq *maxend = NULL;  /* the valid hold reaching furthest so far */
    for (size_t i = 0; i < n; i++) {
        const acq *a = all[i];
        if (a->vend == 0) continue;
        if (prev != NULL && a->fence <= prev->fence) {
            describe_acq(d1, sizeof d1, prev, t0);
            describe_acq(d2, sizeof d2, a, t0);
            violation(V_FENCE, "(1) lock %d: fences of valid holds by return time do not increase: %s then %s",
                      lock, d1, d2);
        }
        if (maxend != NULL && a->ret <= maxend->vend) {
            describe_acq(d1, sizeof d1, maxend, t0);
            describe_acq(d2, sizeof d2, a, t0);
            violation(V_OVERLAP, "(3) lock %d: valid intervals overlap by %.3f ms: %s and %s", lock,
                      MS(maxend->vend - a->ret), d1, d2);
        }
        if (maxend == NULL || a->vend > maxend->vend) maxend = a;
        prev = a;
    }
}

/* (2) for one key.  w: the accepted writes of the key. */
static void check_writes(int lock, wr **w, size_t n, uint64_t final_fence, int have_final,
                         int64_t t0) {
    qsort(w, n, sizeof *w, cmp_wend);
    for (size_t j = 0; j < n; j++) {
        const wr *w1 = w[j];
        /* The start of w1's data epoch: the end of the last loss that began
         * before w1 ended.  An earlier write counts only if it started
         * after that. */
        int64_t lb = INT64_MIN;
        for (int k = 0; k < nlosses; k++)
            if (losses[k].from <= w1->end && losses[k].to > lb) lb = losses[k].to;
        /* writes that ended before w1 started: indices < hi */
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (w[mid]->end < w1->start) lo = mid + 1;
            else hi = mid;
        }
        for (size_t i = lo; i-- > 0;) {
            const wr *w2 = w[i];
            if (w2->end <= lb) break; /* sorted by end: all earlier ones too */
            if (w2->start > lb && w2->fence > w1->fence) {
                violation(V_STALE, "(2) key chaos:data:%d: stale write accepted: fence %" PRIu64
                          " (pid %d thr %d seq %d, %.1f..%.1f ms) after fence %" PRIu64
                          " (pid %d thr %d seq %d, %.1f..%.1f ms)",
                          lock, w1->fence, (int)w1->pid, w1->thr, w1->seq, MS(w1->start - t0),
                          MS(w1->end - t0), w2->fence, (int)w2->pid, w2->thr, w2->seq,
                          MS(w2->start - t0), MS(w2->end - t0));
                break;
            }
        }
    }
    /* The final value: no accepted write since the last loss may have a
     * larger fence than what the key holds now. */
    if (have_final) {
        int64_t lb = nlosses > 0 ? losses[nlosses - 1].to : INT64_MIN;
        for (size_t i = 0; i < n; i++)
            if (w[i]->start > lb && w[i]->fence > final_fence) {
                violation(V_STALE, "(2) key chaos:data:%d ends with fence %" PRIu64
                          ", older than accepted write fence %" PRIu64 " (pid %d)",
                          lock, final_fence, w[i]->fence, (int)w[i]->pid);
                break;
            }
    }
}

static int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

static void run_checker(const char *logdir, int64_t t0, const uint64_t *final_fence,
                        const int *have_final, stats *st) {
    vec acqs = { NULL, 0, 0, sizeof(acq) }, wrs = { NULL, 0, 0, sizeof(wr) };
    DIR *d = opendir(logdir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] != 'w') continue;
            char path[600];
            snprintf(path, sizeof path, "%s/%s", logdir, e->d_name);
            read_log(path, &acqs, &wrs, st);
        }
        closedir(d);
    }
    acq *A = acqs.p;
    wr *W = wrs.p;

    /* Counts, and (4) deadlines. */
    int64_t *oks = malloc((acqs.n + 1) * sizeof *oks);
    size_t nok = 0;
    if (oks == NULL) abort();
    for (size_t i = 0; i < acqs.n; i++) {
        acq *a = &A[i];
        st->calls++;
        if (!paused_during(a->pid, a->start, a->ret) && a->ret - a->deadline > st->max_late)
            st->max_late = a->ret - a->deadline;
        if (a->rc == 0) {
            st->acquisitions++;
            oks[nok++] = a->ret;
        } else if (a->rc == ETIMEDOUT) {
            st->timeouts++;
        } else if (a->rc == ENOLCK) {
            st->enolck++;
        } else {
            st->other_rc++;
            violation(V_RESULT, "(R) lock call of pid %d thr %d (lock %d) returned %s after %.1f ms "
                      "(call %.1f..%.1f ms): outside the contract (0, ETIMEDOUT, ENOLCK)",
                      (int)a->pid, a->thr, a->lock, dlock_err_name(a->rc), MS(a->ret - a->start),
                      MS(a->start - t0), MS(a->ret - t0));
        }
        if (a->ret > a->deadline + (int64_t)MARGIN_MS * NS_PER_MS &&
            paused_during(a->pid, a->start, a->ret))
            st->late_paused++;
        else if (a->ret > a->deadline + (int64_t)MARGIN_MS * NS_PER_MS)
            violation(V_DEADLINE, "(4) lock call of pid %d thr %d (lock %d) returned %s %.1f ms after its "
                      "deadline (call %.1f..%.1f ms, %.0f ms timeout)",
                      (int)a->pid, a->thr, a->lock, dlock_err_name(a->rc),
                      MS(a->ret - a->deadline), MS(a->start - t0), MS(a->ret - t0),
                      MS(a->deadline - a->start));
    }

    /* (1), (3) per lock. */
    acq **per = malloc((acqs.n + 1) * sizeof *per);
    if (per == NULL) abort();
    for (int l = 0; l < NLOCK; l++) {
        size_t n = 0;
        for (size_t i = 0; i < acqs.n; i++)
            if (A[i].lock == l && A[i].rc == 0 && A[i].fence != 0) per[n++] = &A[i];
        check_lock(l, per, n, t0);
    }
    free(per);

    /* (2) per key. */
    wr **pw = malloc((wrs.n + 1) * sizeof *pw);
    if (pw == NULL) abort();
    for (size_t i = 0; i < wrs.n; i++) {
        st->writes++;
        if (W[i].rc == 0) st->writes_ok++;
        else if (W[i].rc == ESTALE) st->writes_estale++;
        else if (W[i].rc == EPERM) st->writes_eperm++;
        else if (W[i].rc == ENOLCK) st->writes_other++;
        else {
            st->writes_other++;
            violation(V_RESULT, "(R) fenced write of pid %d thr %d (lock %d) returned %s at %.1f ms: "
                      "outside the contract (0, ESTALE, EPERM, ENOLCK)",
                      (int)W[i].pid, W[i].thr, W[i].lock, dlock_err_name(W[i].rc),
                      MS(W[i].end - t0));
        }
    }
    for (int l = 0; l < NLOCK; l++) {
        size_t n = 0;
        for (size_t i = 0; i < wrs.n; i++)
            if (W[i].lock == l && W[i].rc == 0) pw[n++] = &W[i];
        check_writes(l, pw, n, final_fence[l], have_final[l], t0);
    }
    free(pw);

    /* (5) resumption after each fault. */
    qsort(oks, nok, sizeof *oks, cmp_i64);
    for (int i = 0; i < nfaults; i++) {
        const fault *f = &faults[i];
        size_t lo = 0, hi = nok;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (oks[mid] < f->end) lo = mid + 1;
            else hi = mid;
        }
        if (lo == nok || oks[lo] > f->end + (int64_t)RESUME_MS * NS_PER_MS)
            violation(V_RESUME, "(5) no acquisition within %d ms after fault %d (%s, %.1f..%.1f ms)",
                      RESUME_MS, i, fault_names[f->kind], MS(f->start - t0), MS(f->end - t0));
    }
    free(oks);
    free(acqs.p);
    free(wrs.p);
}

/* ---------------------------------------------------- checker self-test */

/* The checker must see what it is meant to see: it runs first on a
 * synthetic log with one instance of every kind of violation, then on one
 * full of legal corner cases (a late call of a paused process, a stale
 * write after a data loss, holds that touch but do not overlap), which
 * must pass.  Times are in ms from an arbitrary origin. */
#define ST(ms) (1000000000000LL + (long long)(ms) * NS_PER_MS)

static void selftest_write(const char *dir, const char *const *lines, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/w1.log", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) return;
    for (size_t i = 0; i < n; i++) {
        /* each line: a record with {ms} placeholders turned into ns */
        const char *p = lines[i];
        while (*p) {
            if (*p == '{') {
                long long ms = strtoll(p + 1, (char **)&p, 10);
                fprintf(f, "%lld", ST(ms));
                if (*p == '}') p++;
            } else {
                fputc(*p++, f);
            }
        }
        fputc('\n', f);
    }
    fclose(f);
}

static void selftest_reset(void) {
    violations = 0;
    memset(vcount, 0, sizeof vcount);
    nfaults = npauses = nlosses = 0;
}

static int checker_selftest(void) {
    char dir[300];
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp != '/') tmp = "/tmp";
    snprintf(dir, sizeof dir, "%s/dlock-chaos-selftest-XXXXXX", tmp);
    if (mkdtemp(dir) == NULL) return -1;
    uint64_t ff[NLOCK] = { 0 };
    int hf[NLOCK] = { 0 };
    stats st;
    int ok = 1;

    /* Every kind once (or more). */
    static const char *const bad[] = {
        /* (3): 1/0 valid {10}..{50}, 2/0 valid from {40} */
        "L 1 0 1 0 {0} {10} {1000} 0 100 {11}", "H 1 0 1 0 {50} 1",
        "L 2 0 1 0 {5} {40} {1000} 0 200 {41}", "H 2 0 1 0 {60} 1",
        /* (1): fence 300 twice on lock 1 */
        "L 3 0 1 1 {0} {10} {1000} 0 300 {11}", "L 4 0 1 1 {100} {110} {1100} 0 300 {111}",
        /* (2): fence 400 accepted after fence 500 on key 2 */
        "W 1 0 1 2 500 {0} {5} 0", "W 2 0 1 2 400 {10} {15} 0",
        /* (4): 2 s past its deadline, not paused */
        "L 5 0 1 2 {0} {3000} {1000} 110 0 0",
        /* (R): EPROTO */
        "L 5 1 1 2 {0} {1} {1000} 71 0 0",
    };
    selftest_reset();
    selftest_write(dir, bad, sizeof bad / sizeof bad[0]);
    faults[nfaults++] = (fault){ F_FREEZE, 0, 0, ST(100000), ST(100500) }; /* (5) */
    memset(&st, 0, sizeof st);
    quiet = 1;
    run_checker(dir, ST(0), ff, hf, &st);
    quiet = 0;
    for (int k = 0; k < V_NKINDS; k++)
        if (vcount[k] == 0) {
            printf("chaos: checker self-test: %s not detected\n", vnames[k]);
            ok = 0;
        }

    /* Legal corner cases: nothing to report. */
    static const char *const good[] = {
        /* back-to-back valid holds of lock 0, the later call started first */
        "L 1 0 1 0 {0} {5} {1000} 0 10 {6}", "H 1 0 1 0 {20} 1",
        "L 2 0 1 0 {3} {30} {1000} 0 20 {31}", "H 2 0 1 0 {40} 1",
        /* a holder paused inside lock: it returns after its successor,
         * with a smaller fence and no valid moment (fence() said 0) */
        "L 3 0 1 1 {0} {2000} {3000} 0 0 0", "H 3 0 1 1 {2001} 0",
        "L 4 0 1 1 {500} {1200} {2500} 0 50 {1201}", "H 4 0 1 1 {1210} 1",
        /* a paused process's late call */
        "L 6 0 1 2 {100} {4000} {1100} 110 0 0",
        /* a smaller fence writes first after a data loss */
        "W 1 0 1 2 700 {900} {950} 0", "W 2 0 1 2 600 {1100} {1150} 0",
        /* a refused stale write, and ENOLCK results */
        "W 3 0 1 2 650 {1200} {1210} 116", "W 3 0 1 2 650 {1300} {1310} 37",
        "L 7 0 1 2 {0} {1600} {1500} 37 0 0", "U 7 0 1 2 {0} {10} 37",
    };
    selftest_reset();
    selftest_write(dir, good, sizeof good / sizeof good[0]);
    faults[nfaults++] = (fault){ F_KILL, 9, 0, ST(20), ST(25) };
    pauses[npauses++] = (pause_iv){ 6, ST(0), ST(5000) };
    losses[nlosses++] = (loss_iv){ ST(1000), ST(1020) };
    memset(&st, 0, sizeof st);
    quiet = 1;
    run_checker(dir, ST(0), ff, hf, &st);
    quiet = 0;
    if (violations != 0) {
        printf("chaos: checker self-test: %d false alarms:", violations);
        for (int k = 0; k < V_NKINDS; k++) printf(" %s=%d", vnames[k], vcount[k]);
        printf("\n");
        ok = 0;
    }
    selftest_reset();
    rm_tree(dir);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------- the test */

/* The injector's record, next to the workers' logs, so that the checker
 * can run again on kept logs (CHAOS_CHECK=<dir>):
 *   T t0 t_end seconds bad_worker_exits
 *   F kind pid holder start end      a fault
 *   P pid from to                    a pause
 *   D from to                        a data loss
 *   Z lock have fence                the data key's final fence */
#define RECORD_FILE "injector.txt"

static int write_record(const char *dir, int64_t t0, int64_t t_end, int seconds,
                        const uint64_t *final_fence, const int *have_final) {
    char path[600];
    snprintf(path, sizeof path, "%s/" RECORD_FILE, dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    fprintf(f, "T %" PRId64 " %" PRId64 " %d %d\n", t0, t_end, seconds, worker_bad_exits);
    for (int i = 0; i < nfaults; i++)
        fprintf(f, "F %d %d %d %" PRId64 " %" PRId64 "\n", faults[i].kind, (int)faults[i].pid,
                faults[i].holder, faults[i].start, faults[i].end);
    for (int i = 0; i < npauses; i++)
        fprintf(f, "P %d %" PRId64 " %" PRId64 "\n", (int)pauses[i].pid, pauses[i].from,
                pauses[i].to);
    for (int i = 0; i < nlosses; i++)
        fprintf(f, "D %" PRId64 " %" PRId64 "\n", losses[i].from, losses[i].to);
    for (int l = 0; l < NLOCK; l++)
        fprintf(f, "Z %d %d %" PRIu64 "\n", l, have_final[l], final_fence[l]);
    return fclose(f) == 0 ? 0 : -1;
}

/* Reads the record, runs the checker, prints the report and asserts.
 * Returns 1 if the run failed. */
static int check_and_report(const char *dir, int inject_failed) {
    char path[600], line[256];
    int64_t t0 = 0, t_end = 0;
    int seconds = DEFAULT_SECONDS, bad_exits = 0;
    uint64_t final_fence[NLOCK] = { 0 };
    int have_final[NLOCK] = { 0 };

    nfaults = npauses = nlosses = 0;
    snprintf(path, sizeof path, "%s/" RECORD_FILE, dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        printf("chaos: no %s\n", path);
        CU_FAIL("no injector record");
        return 1;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        long long a, b;
        int x, y, z;
        unsigned long long u;
        if (sscanf(line, "T %lld %lld %d %d", &a, &b, &x, &y) == 4) {
            t0 = a;
            t_end = b;
            seconds = x;
            bad_exits = y;
        } else if (sscanf(line, "F %d %d %d %lld %lld", &x, &y, &z, &a, &b) == 5 &&
                   nfaults < MAX_FAULTS && x >= 0 && x < F_NKINDS) {
            faults[nfaults++] = (fault){ x, (pid_t)y, z, a, b };
        } else if (sscanf(line, "P %d %lld %lld", &x, &a, &b) == 3 && npauses < MAX_PAUSES) {
            pauses[npauses++] = (pause_iv){ (pid_t)x, a, b };
        } else if (sscanf(line, "D %lld %lld", &a, &b) == 2 && nlosses < MAX_FAULTS) {
            losses[nlosses++] = (loss_iv){ a, b };
        } else if (sscanf(line, "Z %d %d %llu", &x, &y, &u) == 3 && x >= 0 && x < NLOCK) {
            have_final[x] = y;
            final_fence[x] = u;
        }
    }
    fclose(f);

    for (int i = 0; i < nfaults; i++)
        printf("chaos: fault %2d %-12s %8.1f .. %8.1f ms%s%.0d%s\n", i,
               fault_names[faults[i].kind], MS(faults[i].start - t0), MS(faults[i].end - t0),
               faults[i].pid ? " pid " : "", (int)faults[i].pid,
               faults[i].pid ? (faults[i].holder ? " (a holder)" : " (not a holder)") : "");

    stats st;
    memset(&st, 0, sizeof st);
    run_checker(dir, t0, final_fence, have_final, &st);

    int counts[F_NKINDS] = { 0 }, holders = 0;
    for (int i = 0; i < nfaults; i++) {
        counts[faults[i].kind]++;
        holders += faults[i].holder;
    }
    int min_acq = seconds >= DEFAULT_SECONDS ? MIN_ACQUISITIONS
                                              : MIN_ACQUISITIONS * seconds / DEFAULT_SECONDS;
    printf("chaos-detail: %.1f s; lock calls=%ld ok=%ld ETIMEDOUT=%ld ENOLCK=%ld other=%ld; "
           "holds() checks=%ld lost=%ld; lost-handler=%ld; fenced writes=%ld ok=%ld ESTALE=%ld "
           "EPERM=%ld other=%ld; unlocks ok=%ld EPERM=%ld other=%ld; kill/pause hit a holder "
           "%d times; late calls excused by a pause=%ld; latest unpaused return %.1f ms after its "
           "deadline; bad worker exits=%d; torn log lines=%ld\n",
           MS(t_end - t0) / 1000.0, st.calls, st.acquisitions, st.timeouts, st.enolck,
           st.other_rc, st.holds_checked, st.holds_lost, st.lost_handler, st.writes, st.writes_ok,
           st.writes_estale, st.writes_eperm, st.writes_other, st.unlocks_ok, st.unlocks_eperm,
           st.unlocks_other, holders, st.late_paused, MS(st.max_late), bad_exits, st.malformed);
    if (violations > 0) {
        printf("chaos: violations by kind:");
        for (int k = 0; k < V_NKINDS; k++) printf(" %s=%d", vnames[k], vcount[k]);
        printf("\n");
    }
    printf("chaos: acquisitions=%ld faults=%d (kill=%d pause=%d restart=%d restart-lost=%d "
           "freeze=%d) violations=%d\n",
           st.acquisitions, nfaults, counts[F_KILL], counts[F_PAUSE], counts[F_RESTART],
           counts[F_RESTART_LOST], counts[F_FREEZE], violations);

    CU_ASSERT(!inject_failed);
    DLT_ASSERT_INT_EQ(violations, 0);
    CU_ASSERT(st.acquisitions >= min_acq);
    for (int k = 0; k < F_NKINDS; k++) CU_ASSERT(counts[k] >= 2);
    DLT_ASSERT_INT_EQ(bad_exits, 0);

    int failed = inject_failed || violations != 0 || st.acquisitions < min_acq || bad_exits != 0;
    for (int k = 0; k < F_NKINDS; k++) failed |= counts[k] < 2;
    return failed;
}

static void stop_workers(void) {
    if (sh == NULL) return;
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < NPROC; i++)
        if (workers[i] > 0) kill(workers[i], SIGCONT);
    /* A worker finishes its hold (lock calls end by their deadline, 2 s)
     * and exits; the unreachable bound caps its unlock. */
    for (int i = 0; i < NPROC; i++) {
        if (workers[i] <= 0) continue;
        reap_worker(workers[i], 15000, 0);
        workers[i] = 0;
    }
}

static void test_chaos(void) {
    int seconds = DEFAULT_SECONDS;
    const char *e = getenv("CHAOS_SECONDS");
    if (e != NULL && atoi(e) > 0) seconds = atoi(e);
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    if ((e = getenv("CHAOS_SEED")) != NULL && *e) seed = strtoull(e, NULL, 0);
    if (seed == 0) seed = 1;
    printf("\nchaos: seed=%" PRIu64 " seconds=%d (CHAOS_SEED / CHAOS_SECONDS to repeat)\n", seed,
           seconds);
    if (checker_selftest() != 0) CU_FAIL_FATAL("the checker's self-test failed");
    printf("chaos: checker self-test passed\n");
    if ((e = getenv("CHAOS_CHECK")) != NULL && *e) {
        /* Only the checker, on the kept logs of an earlier run. */
        printf("chaos: checking %s again\n", e);
        check_and_report(e, 0);
        return;
    }
    uint64_t rng = seed;

    if (dlt_redis_start(&srv, "appendonly yes\nappendfsync always") != 0) {
        CU_FAIL_FATAL("cannot start the chaos redis-server");
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        sh = NULL;
        dlt_redis_cleanup(&srv);
        CU_FAIL_FATAL("mmap");
    }
    memset(sh, 0, sizeof *sh);
    sh->seed = seed;
    /* CHAOS_GUARD_MS=0 turns the restart guard off: the checker must then
     * find overlapping holds after data-losing restarts (a check of the
     * checker, not a configuration to ship). */
    sh->guard_ms = GUARD_MS;
    if ((e = getenv("CHAOS_GUARD_MS")) != NULL && *e) sh->guard_ms = (unsigned)atoi(e);
    snprintf(sh->url, sizeof sh->url, "%s", srv.url);
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp != '/') tmp = "/tmp";
    snprintf(sh->logdir, sizeof sh->logdir, "%s/dlock-chaos-XXXXXX", tmp);
    if (mkdtemp(sh->logdir) == NULL) {
        dlt_redis_cleanup(&srv);
        CU_FAIL_FATAL("mkdtemp");
    }
    printf("chaos: server %s (pid %d), logs in %s\n", srv.url, (int)srv.pid, sh->logdir);

    int64_t t0 = now_ns();
    int64_t chaos_end = t0 + (int64_t)seconds * 1000000000LL;
    sh->hard_end_ns = chaos_end + 60LL * 1000000000LL;
    int setup_ok = 1;
    for (int i = 0; i < NPROC; i++)
        if ((workers[i] = spawn_worker()) < 0) setup_ok = 0;
    CU_ASSERT_FATAL(setup_ok);

    /* Let the system warm up before the first fault. */
    sleep_ns(1000 * NS_PER_MS);

    int order[F_NKINDS], next = F_NKINDS, inject_failed = 0;
    while (now_ns() < chaos_end && nfaults < MAX_FAULTS - 1) {
        if (next == F_NKINDS) {
            for (int i = 0; i < F_NKINDS; i++) order[i] = i;
            for (int i = F_NKINDS - 1; i > 0; i--) {
                int j = (int)rng_range(&rng, 0, (unsigned)i);
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            next = 0;
        }
        int kind = order[next++];
        if (inject(kind, &rng) != 0) {
            fprintf(stderr, "chaos: injecting %s failed\n", fault_names[kind]);
            inject_failed = 1;
            break;
        }
        const fault *f = &faults[nfaults - 1];
        /* 1-2 s, and until work has resumed (at most 8 s). */
        int64_t gap_end = f->end + (int64_t)rng_range(&rng, 1000, 2000) * NS_PER_MS;
        int64_t cap = f->end + 8000 * NS_PER_MS;
        for (;;) {
            int64_t now = now_ns();
            if (now >= cap) break;
            if (now >= gap_end && atomic_load(&sh->last_ok_ns) > f->end) break;
            sleep_ns(20 * NS_PER_MS);
        }
    }
    /* Let the last fault heal, then stop. */
    sleep_ns(1500 * NS_PER_MS);
    if (srv.pid > 0) kill(srv.pid, SIGCONT);
    stop_workers();
    int64_t t_end = now_ns();

    uint64_t final_fence[NLOCK] = { 0 };
    int have_final[NLOCK] = { 0 };
    for (int l = 0; l < NLOCK; l++) {
        redisReply *r = dlt_redis_cmd(&srv, "HGET chaos:data:%d fence", l);
        if (r != NULL && r->type == REDIS_REPLY_STRING) {
            final_fence[l] = strtoull(r->str, NULL, 10);
            have_final[l] = 1;
        }
        if (r != NULL) freeReplyObject(r);
    }

    if (write_record(sh->logdir, t0, t_end, seconds, final_fence, have_final) != 0)
        fprintf(stderr, "chaos: cannot write %s/" RECORD_FILE "\n", sh->logdir);
    int failed = check_and_report(sh->logdir, inject_failed);
    if (failed || getenv("CHAOS_KEEP_LOGS") != NULL) {
        printf("chaos: logs kept in %s (server folder %s removed)\n", sh->logdir, srv.dir);
    } else {
        rm_tree(sh->logdir);
    }
    dlt_redis_cleanup(&srv);
}

int main(int argc, char **argv) {
    static const struct dlt_test tests[] = { DLT_TEST(test_chaos), { NULL, NULL } };
    int rc = dlt_main(argc, argv, "chaos", tests);
    /* Whatever happened, no worker outlives the test. */
    for (int i = 0; i < NPROC; i++)
        if (workers[i] > 0) {
            kill(workers[i], SIGKILL);
            waitpid(workers[i], NULL, 0);
        }
    return rc;
}
