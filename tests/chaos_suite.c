/* chaos_suite.c -- the chaos suite on every lock kind that keeps state on
 * the server: one harness, run once per kind (tests/CMakeLists.txt
 * registers one ctest entry per kind: chaos_default, chaos_robust, ...).
 *
 *   chaos_suite --kind KIND --faults F,F,... [--rounds N] [--sabotage MODE]
 *               [--expect CHECK] [--lock-delay MS]
 *
 * KIND: default robust fair caching (mutexes), rwlock (readers and
 * writers), sem, sem_undo (semaphores of SEM_N units, without and with
 * undo).  FAULTS (comma-separated, or "none"):
 *   kill          SIGKILL a worker -- one that holds something, when one
 *                 does -- and fork another in its place (which posts back
 *                 the units of a plain semaphore the dead one held: they
 *                 have no owner; a unit caught inside a take or post call
 *                 by the kill may still be lost, as POSIX's would be)
 *   pause         SIGSTOP a holder for lease + 300..1200 ms, then SIGCONT
 *   restart       SIGTERM the server and start it again (AOF kept: data kept)
 *   restart-lost  SIGKILL the server, delete its AOF/RDB, start it: no data
 *   flushall      FLUSHALL on the running server: no data
 *   freeze        SIGSTOP the server for 200..2000 ms
 *   cut           the fault proxy closes every connection, and every new
 *                 one, for 300..1500 ms
 *   drop          the fault proxy answers nothing (a black hole) for
 *                 lease + 300..1200 ms
 *   slow          the fault proxy holds each answer 50..300 ms, for 1.5..3 s
 *
 * SHAPE
 *
 * The main process only injects faults and checks; it never calls dlock,
 * and it starts no thread, so the processes it forks start clean (GCC 12's
 * ASan runtime is not fork-safe next to busy threads: fixture.h).  It
 * starts a redis-server with persistence ("appendonly yes", "appendfsync
 * always": a plain restart keeps every key), and the fault proxy
 * (tests/proxy.h) in a process of its own, which the main process drives
 * through a pipe.  NPROC worker processes of NTHR threads each, over NLOCK
 * names, connect through the proxy (lease LEASE_MS, command and connect
 * timeouts 400 ms, unreachable bound 1.5 s, restart guard 1 s >= the lease).
 * A worker thread loops: pick a name (and, for a rwlock, read or write: a
 * third write); take it with a timed call on CLOCK_REALTIME or
 * CLOCK_MONOTONIC, deadline 300..1500 ms ahead; then 1-3 steps of work:
 * t = now, holds() (stop at 0; semaphores have no holds()), 20..120 ms of
 * work, and for an exclusive hold (mutex, writer) a write of its fence to
 * the fenced store; then unlock / post.  The work is long on purpose, so
 * that a pause of a holder lands between "I hold it" and "I write", the
 * window fences exist for.
 *
 * The fenced store is in the shared page, not on the lock server: the
 * greatest fence written per name, raised by compare-and-swap; a write
 * with a smaller fence is refused (ESTALE).  It survives the lock server's
 * data loss, as a real store would, so fences are held to "above every
 * earlier fence" across restarts without data too.
 *
 * Every event is one line written with one write(2) to the process's
 * O_APPEND log (times CLOCK_MONOTONIC ns: the logs of all processes
 * compare directly):
 *   L pid thr seq lock mode start ret deadline rc fence cpu rq   a take
 *   H pid thr seq t ok                                   a holds() check
 *   W pid thr seq lock fence start end rc                a store write
 *   U pid thr seq start end rc                           unlock / post
 *   X pid lock t                                         the lost handler
 * (mode: 0 mutex, 1 read, 2 write, 3 a unit of a semaphore; cpu, rq: how
 * long the calling thread ran, and waited runnable for a CPU, during the
 * call, from its schedstat.)
 *
 * CHECKS (the checker reads the logs after the workers stopped)
 *   fence     (a) no fence of an exclusive hold given to another hold
 *             (readers granted together may share one); (b) a take
 *             that returned before another take of the name started has a
 *             smaller fence -- real-time order, across every fault,
 *             restarts without data included.
 *   stale     no store write accepted that started after a write with a
 *             greater fence had been accepted (the store's own check).
 *   exclusion the valid intervals of one name -- [return of the take, the
 *             last holds() that said 1] -- never hold two writers, or a
 *             writer and a reader; for a semaphore, the units out --
 *             [return of the take, the post, the lost handler or the
 *             holder's death, whichever first; for undo, a pause of the
 *             holder too; without undo, a data loss] -- never exceed SEM_N
 *             (without undo, SEM_N plus the units taken before a data
 *             loss and posted after it, until the next loss: the
 *             semaphore made again counts its own units, and such a post
 *             adds one, as docs/locks.md says; a take or a post in flight
 *             across the loss counts as one of them).
 *   told      a hold that the server let lapse is told to the lost
 *             handler (an X of the process for the name between the take
 *             and the end of its release): a release that said EPERM; a
 *             hold across a pause of its process, or across a freeze,
 *             restart, cut or drop, longer than the lease + 100 ms; a hold
 *             across a data loss (restart-lost, flushall) -- a caching
 *             mutex's too, whose unlock into the cache asked the server
 *             nothing: the cache's renewal that finds the lock gone tells
 *             it (README "Lock caching").  Not a
 *             semaphore unit without undo: it has no lease and no owner on
 *             the server, and is not told (docs/locks.md).
 *   deadline  a timed take returns by its deadline + 50 ms, unless its
 *             process was paused during the call, or its whole process (by
 *             the stall probe) or its thread, asleep (by its schedstat:
 *             it ran under 20 ms), waited for a CPU meanwhile as long as
 *             it was late past the 50 ms.
 *   result    takes give 0, ETIMEDOUT, ENOLCK (EOWNERDEAD: robust);
 *             releases 0, EPERM, ENOLCK (posts 0, ENOLCK).
 *   hung      no call runs past its deadline + 2 s (releases: unreachable
 *             bound + 2 s) while its process runs; every worker exits
 *             within 10 s of being told to stop.
 *   progress  some take succeeds within 5 s of each fault's end; at least
 *             MIN_ACQ takes in the run.
 *   delay     (--lock-delay MS, mutex kinds: every mutex has that
 *             lock-delay) after a kill or a pause of a process that held
 *             a name (and did not release it after all: no unlock that
 *             said 0), no take of the name returns sooner than the
 *             fault's start + MS: the hold lapsed no sooner than the
 *             fault began, and ended without a release.
 * Every violation is printed with the fault it happened under (the last
 * one begun before it), and a table of violations by check and fault.
 *
 * SABOTAGE (--sabotage, or CHAOS_SABOTAGE) proves each check can fail:
 *   nolock   the take is skipped (and holds() taken as 1): exclusion must fail
 *   nofence  the store accepts every write: stale must fail
 *   silent   the lost handler logs nothing: told must fail
 *   nodelay  the mutexes get no lock-delay: delay must fail
 * With --expect CHECK the run passes only if CHECK found a violation.
 *
 * LENGTH: each fault of the list once (--rounds N: N times), in a seeded
 * random order (CI).
 * CHAOS_SECONDS=N (at most MAX_SECONDS) repeats shuffled rounds of the
 * list for N s (the long run; docs/testing.md).  CHAOS_SEED=S repeats a run's choices (not its
 * timing); CHAOS_KEEP_LOGS=1 keeps the logs (they are kept on failure).
 */
#include "fixture.h"
#include "proxy.h"

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
#define NLOCK 2
#define SEM_N 2
#define LEASE_MS 600
#define CMD_TIMEOUT_MS 400u
#define CONNECT_TIMEOUT_MS 400u
#define UNREACHABLE_MS 1500
#define GUARD_MS 1000u
#define LATE_MS 50      /* a timed call's allowance past its deadline (docs/locks.md) */
#define HUNG_MS 2000    /* a call this far past its bound is hung */
#define RESUME_MS 5000
#define MIN_ACQ 10
#define WARM_TAKES 20   /* successful takes before the first fault */
#define MAX_SECONDS 480 /* CHAOS_SECONDS: the fixture's alarm ends a run at 600 s */
#define MAX_FAULTS 256
#define SHOWN 5         /* violations printed per check */
#define NS_PER_MS 1000000LL

enum { K_DEFAULT, K_ROBUST, K_FAIR, K_CACHING, K_RWLOCK, K_SEM, K_SEM_UNDO, K_N };
static const char *const kind_names[K_N] = { "default", "robust", "fair", "caching",
                                             "rwlock",  "sem",    "sem_undo" };

enum { F_KILL, F_PAUSE, F_RESTART, F_RESTART_LOST, F_FLUSHALL, F_FREEZE, F_CUT, F_DROP, F_SLOW,
       F_N };
static const char *const fault_names[F_N] = { "kill",   "pause", "restart", "restart-lost", "flushall",
                                              "freeze", "cut",   "drop",    "slow" };

enum { S_NONE, S_NOLOCK, S_NOFENCE, S_SILENT, S_NODELAY, S_N };
static const char *const sabotage_names[S_N] = { "none", "nolock", "nofence", "silent", "nodelay" };

enum { C_FENCE, C_STALE, C_EXCL, C_TOLD, C_DEADLINE, C_RESULT, C_HUNG, C_PROGRESS, C_DELAY, C_N };
static const char *const check_names[C_N] = { "fence",  "stale", "exclusion", "told",
                                              "deadline", "result", "hung",   "progress", "delay" };

enum { M_MUTEX, M_READ, M_WRITE, M_UNIT };

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

static unsigned rng_range(uint64_t *s, unsigned lo, unsigned hi) {
    return lo + (unsigned)((rng_next(s) >> 33) % (uint64_t)(hi - lo + 1));
}

#define MS(ns) ((double)(ns) / 1e6)

/* ------------------------------------------- state shared with workers */

/* One thread of a worker, as the injector sees it. */
typedef struct tslot {
    atomic_llong call_limit; /* inside a call: when it is hung; else 0 */
    atomic_int holding;      /* 1 + the name it holds, or 0 */
} tslot;

typedef struct shared {
    atomic_int stop;
    atomic_llong last_ok_ns; /* return of the latest successful take */
    atomic_long takes;       /* successful takes so far */
    int64_t hard_end_ns;     /* workers stop by then whatever happens */
    uint64_t seed;
    int kind, sabotage;
    unsigned lock_delay_ms; /* --lock-delay: every mutex's */
    char url[128];
    char logdir[256];
    atomic_ullong store[NLOCK]; /* the fenced store: greatest fence accepted */
    atomic_ullong fake_fence;   /* nolock: fences that do increase, so that
                                   only exclusion can find the sabotage */
    tslot t[NPROC][NTHR];
    int repay[NPROC][NLOCK]; /* plain semaphore: units a new worker posts back */
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

static void lost_note(int lock) {
    if (sh->sabotage == S_SILENT) return;
    log_line("X %d %d %" PRId64 "\n", (int)my_pid, lock, now_ns());
}

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    lost_note((int)(intptr_t)arg);
}

static void on_sem_lost(dlock_sem_t *s, const char *name, void *arg) {
    (void)s;
    (void)name;
    lost_note((int)(intptr_t)arg);
}

/* A worker process's objects: one per name, of the run's kind. */
typedef struct objs {
    dlock_client_t *cl;
    dlock_mutex_t m[NLOCK];
    dlock_rwlock_t rw[NLOCK];
    dlock_sem_t s[NLOCK];
} objs;

typedef struct wthread {
    int idx, thr;
    objs *o;
    uint64_t rng;
} wthread;

static int is_sem(void) {
    return sh->kind == K_SEM || sh->kind == K_SEM_UNDO;
}

/* The take, on the deadline `abs` of clock `clk`. */
static int take(objs *o, int lock, int mode, clockid_t clk, const struct timespec *abs) {
    if (sh->sabotage == S_NOLOCK) return 0;
    switch (mode) {
    case M_MUTEX: return dlock_mutex_clocklock(&o->m[lock], clk, abs);
    case M_READ: return dlock_rwlock_clockrdlock(&o->rw[lock], clk, abs);
    case M_WRITE: return dlock_rwlock_clockwrlock(&o->rw[lock], clk, abs);
    default: return dlock_sem_clockwait(&o->s[lock], clk, abs);
    }
}

static int release(objs *o, int lock, int mode) {
    if (sh->sabotage == S_NOLOCK) return 0;
    switch (mode) {
    case M_MUTEX: return dlock_mutex_unlock(&o->m[lock]);
    case M_READ:
    case M_WRITE: return dlock_rwlock_unlock(&o->rw[lock]);
    default: return dlock_sem_post(&o->s[lock]);
    }
}

static int holds(objs *o, int lock, int mode) {
    if (sh->sabotage == S_NOLOCK) return 1;
    if (mode == M_MUTEX) return dlock_mutex_holds(&o->m[lock]);
    return dlock_rwlock_holds(&o->rw[lock]) != 0;
}

static uint64_t fence_of(objs *o, int lock, int mode) {
    if (sh->sabotage == S_NOLOCK) return atomic_fetch_add(&sh->fake_fence, 1) + 1;
    if (mode == M_MUTEX) return dlock_mutex_fence(&o->m[lock]);
    if (mode == M_UNIT) return 0;
    return dlock_rwlock_fence(&o->rw[lock]);
}

/* The fenced store: 0 written, ESTALE refused. */
static int store_write(int lock, uint64_t fence) {
    atomic_ullong *s = &sh->store[lock];
    unsigned long long cur = atomic_load(s);
    for (;;) {
        if (fence < cur && sh->sabotage != S_NOFENCE) return ESTALE;
        if (fence == cur) return 0;
        if (atomic_compare_exchange_weak(s, &cur, fence)) return 0;
    }
}

/* 1-3 steps of work under a hold taken with fence; seq names the hold. */
static void work(wthread *w, int lock, int mode, int seq, uint64_t fence) {
    unsigned steps = rng_range(&w->rng, 1, 3);
    for (unsigned s = 0; s < steps; s++) {
        if (mode != M_UNIT) {
            int64_t t = now_ns();
            int ok = holds(w->o, lock, mode);
            log_line("H %d %d %d %" PRId64 " %d\n", (int)my_pid, w->thr, seq, t, ok);
            if (ok != 1) return;
        }
        sleep_ns((int64_t)rng_range(&w->rng, 20, 120) * NS_PER_MS);
        if (mode != M_MUTEX && mode != M_WRITE) continue;
        int64_t ws = now_ns();
        int wrc = store_write(lock, fence);
        log_line("W %d %d %d %d %" PRIu64 " %" PRId64 " %" PRId64 " %d\n", (int)my_pid, w->thr,
                 seq, lock, fence, ws, now_ns(), wrc);
        if (wrc != 0) return;
    }
}

/* The calling thread's schedstat: the time it ran on a CPU and the time
 * it waited, runnable, for one (ns); zeros when the kernel does not say. */
static void sched_times(int64_t *run, int64_t *wait) {
    char buf[128];
    long long r = 0, w = 0;
    *run = *wait = 0;
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = '\0';
    if (sscanf(buf, "%lld %lld", &r, &w) == 2) {
        *run = r;
        *wait = w;
    }
}

/* One take, the work, the release.  seq: the thread's holds so far. */
static void one_round(wthread *w, int *seq) {
    tslot *ts = &sh->t[w->idx][w->thr];
    int lock = (int)rng_range(&w->rng, 0, NLOCK - 1);
    int mode = is_sem() ? M_UNIT
               : sh->kind == K_RWLOCK ? (rng_range(&w->rng, 0, 2) == 0 ? M_WRITE : M_READ)
                                      : M_MUTEX;
    unsigned d_ms = rng_range(&w->rng, 300, 1500);
    clockid_t clk = (rng_next(&w->rng) & 1) ? CLOCK_REALTIME : CLOCK_MONOTONIC;
    int64_t start = now_ns(), deadline = start + (int64_t)d_ms * NS_PER_MS;
    struct timespec abs = dlt_abs_in(clk, (long)d_ms);
    atomic_store(&ts->call_limit, deadline + HUNG_MS * NS_PER_MS);
    int64_t cpu0, rq0, cpu, rq;
    sched_times(&cpu0, &rq0);
    int rc = take(w->o, lock, mode, clk, &abs);
    int64_t ret = now_ns();
    sched_times(&cpu, &rq);
    cpu -= cpu0;
    rq -= rq0;
    atomic_store(&ts->call_limit, 0);
    int ok = rc == 0 || rc == EOWNERDEAD;
    if (rc == EOWNERDEAD && dlock_mutex_consistent(&w->o->m[lock]) != 0) ok = 0;
    uint64_t fence = ok ? fence_of(w->o, lock, mode) : 0;
    if (ok) {
        (*seq)++;
        atomic_store(&ts->holding, lock + 1);
        atomic_store(&sh->last_ok_ns, ret);
        atomic_fetch_add(&sh->takes, 1);
    }
    log_line("L %d %d %d %d %d %" PRId64 " %" PRId64 " %" PRId64 " %d %" PRIu64 " %" PRId64 " %" PRId64
             "\n", (int)my_pid, w->thr, *seq, lock, mode, start, ret, deadline, rc, fence, cpu, rq);
    if (!ok) {
        if (rc != ETIMEDOUT && rc != ENOLCK) sleep_ns(5 * NS_PER_MS); /* don't spin */
        return;
    }
    work(w, lock, mode, *seq, fence);
    /* Not holding from here: a kill inside the post must not be repaid
     * (the post may have given the unit back already). */
    atomic_store(&ts->holding, 0);
    int64_t us = now_ns();
    atomic_store(&ts->call_limit, us + (UNREACHABLE_MS + HUNG_MS) * NS_PER_MS);
    int urc = release(w->o, lock, mode);
    int64_t ue = now_ns();
    atomic_store(&ts->call_limit, 0);
    log_line("U %d %d %d %" PRId64 " %" PRId64 " %d\n", (int)my_pid, w->thr, *seq, us, ue, urc);
    if (rng_range(&w->rng, 0, 3) == 0) sleep_ns((int64_t)rng_range(&w->rng, 0, 2000) * 1000);
}

/* The process's own view of the machine: a thread that sleeps 5 ms at a
 * time and logs every wake-up later than STALL_MS -- a stretch in which
 * the process was not run (a loaded machine), which the deadline check
 * must not count against the library, as it does not count a pause. */
#define STALL_MS 30
static void *stall_probe(void *arg) {
    (void)arg;
    while (!atomic_load(&sh->stop) && now_ns() < sh->hard_end_ns) {
        int64_t t = now_ns();
        sleep_ns(5 * NS_PER_MS);
        int64_t u = now_ns();
        if (u - t > STALL_MS * NS_PER_MS) log_line("Z %d %" PRId64 " %" PRId64 "\n", (int)my_pid, t, u);
    }
    return NULL;
}

static void *worker_thread(void *arg) {
    wthread *w = arg;
    int seq = 0;
    while (!atomic_load(&sh->stop) && now_ns() < sh->hard_end_ns) one_round(w, &seq);
    return NULL;
}

/* The objects of the run's kind on client cl: 0, or a setup failure. */
static int objs_init(objs *o) {
    for (int i = 0; i < NLOCK; i++) {
        char name[32];
        snprintf(name, sizeof name, "chaos/%d", i);
        if (is_sem()) {
            dlock_semattr_t a;
            if (dlock_semattr_init(&a) != 0 || dlock_semattr_setclient(&a, o->cl) != 0 ||
                dlock_semattr_setundo(&a, sh->kind == K_SEM_UNDO) != 0 ||
                dlock_semattr_setlease(&a, LEASE_MS) != 0 ||
                dlock_semattr_setlostcallback(&a, on_sem_lost, (void *)(intptr_t)i) != 0 ||
                dlock_sem_init(&o->s[i], name, SEM_N, &a) != 0)
                return -1;
            dlock_semattr_destroy(&a);
            continue;
        }
        dlock_mutexattr_t a;
        if (dlock_mutexattr_init(&a) != 0 || dlock_mutexattr_setclient(&a, o->cl) != 0 ||
            dlock_mutexattr_setlease(&a, LEASE_MS) != 0 ||
            dlock_mutexattr_setlostcallback(&a, on_lost, (void *)(intptr_t)i) != 0 ||
            (sh->kind == K_ROBUST && dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST) != 0) ||
            (sh->kind == K_FAIR && dlock_mutexattr_setfair(&a, 1) != 0) ||
            (sh->kind == K_CACHING && dlock_mutexattr_setcaching(&a, 1) != 0) ||
            (sh->sabotage != S_NODELAY && dlock_mutexattr_setlockdelay(&a, sh->lock_delay_ms) != 0))
            return -1;
        int rc = sh->kind == K_RWLOCK ? dlock_rwlock_init(&o->rw[i], name, &a)
                                      : dlock_mutex_init(&o->m[i], name, &a);
        dlock_mutexattr_destroy(&a);
        if (rc != 0) return -1;
    }
    return 0;
}

static int objs_destroy(objs *o) {
    int bad = 0;
    for (int i = 0; i < NLOCK; i++) {
        if (is_sem()) bad |= dlock_sem_destroy(&o->s[i]) != 0;
        else if (sh->kind == K_RWLOCK) bad |= dlock_rwlock_destroy(&o->rw[i]) != 0;
        else bad |= dlock_mutex_destroy(&o->m[i]) != 0;
    }
    return bad;
}

static int worker_main(void *arg) {
    int idx = (int)(intptr_t)arg;
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) return 90;
    my_pid = getpid();
    char path[320];
    snprintf(path, sizeof path, "%s/w%d.log", sh->logdir, (int)my_pid);
    log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return 91;

    dlock_config_t cfg;
    objs o;
    memset(&o, 0, sizeof o);
    dlock_config_init(&cfg);
    cfg.url = sh->url;
    cfg.command_timeout_ms = CMD_TIMEOUT_MS;
    cfg.connect_timeout_ms = CONNECT_TIMEOUT_MS;
    cfg.unreachable_ms = UNREACHABLE_MS;
    cfg.restart_guard_ms = GUARD_MS;
    if (dlock_client_create(&o.cl, &cfg) != 0) return 92;
    if (objs_init(&o) != 0) return 93;
    /* A plain semaphore's units that a killed predecessor held go back. */
    for (int l = 0; l < NLOCK && is_sem(); l++)
        for (; sh->repay[idx][l] > 0; sh->repay[idx][l]--) dlock_sem_post(&o.s[l]);

    wthread wt[NTHR];
    pthread_t th[NTHR], probe;
    int started = 0, probing = pthread_create(&probe, NULL, stall_probe, NULL) == 0;
    for (int i = 0; i < NTHR; i++) {
        wt[i] = (wthread){ idx, i, &o, sh->seed ^ ((uint64_t)my_pid << 20) ^ (uint64_t)(i + 1) };
        if (pthread_create(&th[i], NULL, worker_thread, &wt[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (probing) pthread_join(probe, NULL);
    int rc = started == NTHR && probing ? 0 : 94;
    if (objs_destroy(&o) != 0 && rc == 0) rc = 95;
    if (dlock_client_destroy(o.cl) != 0 && rc == 0) rc = 96;
    close(log_fd);
    return rc;
}

/* -------------------------------------------------- the proxy process */

/* The fault proxy runs in a process of its own (the main process starts
 * no thread: above); the main process sends it commands on a pipe and
 * waits for a byte back. */
typedef struct proxy_cmd {
    int mode; /* enum dlt_proxy_mode */
    unsigned ms;
    int close_all;
} proxy_cmd;

static dlt_redis srv;
static int cmd_pipe[2] = { -1, -1 }, ack_pipe[2] = { -1, -1 };
static pid_t proxy_pid;

static int proxy_main(void *arg) {
    (void)arg;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(cmd_pipe[1]);
    close(ack_pipe[0]);
    dlt_proxy *p = dlt_proxy_start(srv.port);
    if (p == NULL) return 80;
    snprintf(sh->url, sizeof sh->url, "%s", dlt_proxy_url(p));
    proxy_cmd c;
    for (;;) {
        if (dlt_pipe_put(ack_pipe[1], 'k') != 0) break;
        if (dlt_pipe_read(cmd_pipe[0], &c, sizeof c, 24 * 3600 * 1000) != 0) break;
        dlt_proxy_set(p, (enum dlt_proxy_mode)c.mode, c.ms, NULL, 0);
        if (c.close_all) dlt_proxy_close_all(p);
    }
    dlt_proxy_stop(p);
    return 0;
}

static int proxy_start(void) {
    if (pipe(cmd_pipe) != 0 || pipe(ack_pipe) != 0) return -1;
    proxy_pid = dlt_spawn(proxy_main, NULL);
    close(cmd_pipe[0]);
    close(ack_pipe[1]);
    if (proxy_pid < 0) return -1;
    return dlt_pipe_get(ack_pipe[0], 5000) == 'k' ? 0 : -1;
}

static int proxy_send(int mode, unsigned ms, int close_all) {
    proxy_cmd c = { mode, ms, close_all };
    if (write(cmd_pipe[1], &c, sizeof c) != (ssize_t)sizeof c) return -1;
    return dlt_pipe_get(ack_pipe[0], 5000) == 'k' ? 0 : -1;
}

static void proxy_end(void) {
    if (cmd_pipe[1] >= 0) close(cmd_pipe[1]);
    cmd_pipe[1] = -1;
    if (proxy_pid > 0 && dlt_wait(proxy_pid, 10000) != 0)
        fprintf(stderr, "chaos: the proxy process did not end cleanly\n");
    proxy_pid = 0;
    if (ack_pipe[0] >= 0) close(ack_pipe[0]);
    ack_pipe[0] = -1;
}

/* ------------------------------------------------------ fault injector */

typedef struct fault {
    int kind;
    pid_t pid;     /* kill, pause: the worker */
    int holder;    /* kill, pause: it held something when picked */
    int64_t start; /* just before the fault began */
    int64_t end;   /* when it healed */
} fault;

typedef struct hung_rec {
    pid_t pid;
    int thr;
    int64_t t;
} hung_rec;

static pid_t workers[NPROC];
static fault faults[MAX_FAULTS];
static int nfaults;
static hung_rec hungs[64];
static int nhung;
static int worker_bad_exits;
static int paused_idx = -1; /* the worker SIGSTOPped now */

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

/* Deletes the server's persistence: appendonlydir/, *.aof, *.rdb. */
static void remove_persistence(const dlt_redis *r) {
    char path[512];
    snprintf(path, sizeof path, "%s/appendonlydir", r->dir);
    rm_tree(path);
    DIR *d = opendir(r->dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 4 && (strcmp(e->d_name + n - 4, ".aof") == 0 || strcmp(e->d_name + n - 4, ".rdb") == 0)) {
            snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* Sleeps ns, watching for hung calls: a call past its limit while its
 * process runs is recorded once. */
static void watch_sleep(int64_t ns) {
    int64_t end = now_ns() + ns;
    for (;;) {
        int64_t now = now_ns();
        for (int i = 0; i < NPROC; i++)
            for (int t = 0; t < NTHR && i != paused_idx && workers[i] > 0; t++) {
                long long lim = atomic_load(&sh->t[i][t].call_limit);
                if (lim == 0 || now <= lim) continue;
                if (nhung < (int)(sizeof hungs / sizeof hungs[0]))
                    hungs[nhung++] = (hung_rec){ workers[i], t, now };
                atomic_store(&sh->t[i][t].call_limit, 0); /* once per call */
            }
        if (now >= end) break;
        sleep_ns(end - now < 10 * NS_PER_MS ? end - now : 10 * NS_PER_MS);
    }
}

static int spawn_worker(int i) {
    for (int t = 0; t < NTHR; t++) {
        atomic_store(&sh->t[i][t].call_limit, 0);
        atomic_store(&sh->t[i][t].holding, 0);
    }
    workers[i] = dlt_spawn(worker_main, (void *)(intptr_t)i);
    return workers[i] > 0 ? 0 : -1;
}

/* A worker that holds something now, waiting up to 1 s for one; else a
 * random one.  *holder says which. */
static int pick_worker(uint64_t *rng, int *holder) {
    int64_t until = now_ns() + 1000 * NS_PER_MS;
    int first = (int)rng_range(rng, 0, NPROC - 1);
    do {
        for (int k = 0; k < NPROC; k++) {
            int i = (first + k) % NPROC;
            for (int t = 0; t < NTHR; t++)
                if (atomic_load(&sh->t[i][t].holding) != 0) {
                    *holder = 1;
                    return i;
                }
        }
        sleep_ns(2 * NS_PER_MS);
    } while (now_ns() < until);
    *holder = 0;
    return first;
}

static void reap_worker(pid_t pid, int timeout_ms, int killed) {
    int st = dlt_wait(pid, timeout_ms);
    if (killed && st == 128 + SIGKILL) return;
    if (st == -1 && nhung < (int)(sizeof hungs / sizeof hungs[0]))
        hungs[nhung++] = (hung_rec){ pid, -1, now_ns() };
    if (st != 0) {
        fprintf(stderr, "chaos: worker %d ended with status %d\n", (int)pid, st);
        worker_bad_exits++;
    }
}

static int fault_kill(fault *f, uint64_t *rng) {
    int i = pick_worker(rng, &f->holder);
    f->pid = workers[i];
    f->start = now_ns();
    kill(workers[i], SIGKILL);
    f->end = now_ns();
    reap_worker(workers[i], 5000, 1);
    /* A plain semaphore's units die with their holder: the next worker
     * posts them back, or the run would starve. */
    for (int t = 0; t < NTHR; t++) {
        int h = atomic_load(&sh->t[i][t].holding);
        if (h > 0 && sh->kind == K_SEM) sh->repay[i][h - 1]++;
    }
    return spawn_worker(i);
}

/* The pause: its process's calls get their limits moved by its length. */
static int fault_pause(fault *f, uint64_t *rng) {
    int i = pick_worker(rng, &f->holder);
    f->pid = workers[i];
    int64_t len = (int64_t)(LEASE_MS + (int)rng_range(rng, 300, 1200)) * NS_PER_MS;
    f->start = now_ns();
    paused_idx = i;
    kill(workers[i], SIGSTOP);
    watch_sleep(len);
    for (int t = 0; t < NTHR; t++) {
        long long lim = atomic_load(&sh->t[i][t].call_limit);
        if (lim != 0) atomic_compare_exchange_strong(&sh->t[i][t].call_limit, &lim, lim + len);
    }
    kill(workers[i], SIGCONT);
    paused_idx = -1;
    f->end = now_ns();
    return 0;
}

static int fault_proxy(fault *f, int mode, unsigned ms, int close_all, int64_t len) {
    f->start = now_ns();
    if (proxy_send(mode, ms, close_all) != 0) return -1;
    watch_sleep(len);
    if (proxy_send(DLT_PROXY_PASS, 0, 0) != 0) return -1;
    f->end = now_ns();
    return 0;
}

static int inject(int kind, uint64_t *rng) {
    fault *f = &faults[nfaults];
    *f = (fault){ kind, 0, 0, 0, 0 };
    int rc = 0;
    switch (kind) {
    case F_KILL: rc = fault_kill(f, rng); break;
    case F_PAUSE: rc = fault_pause(f, rng); break;
    case F_RESTART:
        f->start = now_ns();
        rc = dlt_redis_stop(&srv) != 0 || dlt_redis_restart(&srv) != 0 ? -1 : 0;
        f->end = now_ns();
        break;
    case F_RESTART_LOST:
        f->start = now_ns();
        if (dlt_redis_kill(&srv) != 0) return -1;
        remove_persistence(&srv);
        rc = dlt_redis_restart(&srv);
        f->end = now_ns();
        break;
    case F_FLUSHALL: {
        f->start = now_ns();
        redisReply *r = dlt_redis_cmd(&srv, "FLUSHALL");
        rc = r != NULL && r->type == REDIS_REPLY_STATUS ? 0 : -1;
        if (r != NULL) freeReplyObject(r);
        f->end = now_ns();
        break;
    }
    case F_FREEZE:
        f->start = now_ns();
        kill(srv.pid, SIGSTOP);
        watch_sleep((int64_t)rng_range(rng, 200, 2000) * NS_PER_MS);
        kill(srv.pid, SIGCONT);
        f->end = now_ns();
        break;
    case F_CUT:
        rc = fault_proxy(f, DLT_PROXY_CLOSE, 0, 1, (int64_t)rng_range(rng, 300, 1500) * NS_PER_MS);
        break;
    case F_DROP:
        rc = fault_proxy(f, DLT_PROXY_DROP, 0, 0,
                         (int64_t)(LEASE_MS + (int)rng_range(rng, 300, 1200)) * NS_PER_MS);
        break;
    case F_SLOW:
        rc = fault_proxy(f, DLT_PROXY_DELAY, rng_range(rng, 50, 300), 0,
                         (int64_t)rng_range(rng, 1500, 3000) * NS_PER_MS);
        break;
    }
    nfaults++;
    return rc;
}

static void stop_workers(void) {
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < NPROC; i++)
        if (workers[i] > 0) kill(workers[i], SIGCONT);
    /* A take ends by its deadline (1.5 s), a release by the unreachable
     * bound (1.5 s) plus a reply wait, the work in < 0.5 s. */
    for (int i = 0; i < NPROC; i++) {
        if (workers[i] <= 0) continue;
        reap_worker(workers[i], 10000, 0);
        workers[i] = 0;
    }
}

/* ------------------------------------------------------------- checker */

typedef struct hold {
    pid_t pid;
    int thr, seq, lock, mode, rc;
    int64_t start, ret, deadline;
    uint64_t fence;
    int64_t cpu, rq; /* the take's thread ran, and waited for a CPU, this long in it */
    int64_t vend;   /* the last holds() that said 1; 0: none */
    int released;   /* a U record came */
    int64_t us, ue; /* the release call */
    int urc;
} hold;

typedef struct wrec {
    pid_t pid;
    int lock, rc;
    uint64_t fence;
    int64_t start, end;
} wrec;

typedef struct xrec {
    pid_t pid;
    int lock;
    int64_t t;
} xrec;

typedef struct stall {
    pid_t pid;
    int64_t from, to;
} stall;

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

typedef struct run_log {
    vec holds, writes, lost, stalls; /* hold, wrec, xrec, stall */
    long malformed, excused;
} run_log;

static int vcount[C_N], vtable[C_N][F_N + 1];
static int64_t t0;

/* The fault a moment belongs to: the last one begun by then (F_N: none). */
static int fault_at(int64_t t) {
    int k = F_N;
    for (int i = 0; i < nfaults && faults[i].start <= t; i++) k = faults[i].kind;
    return k;
}

static void violation(int check, int64_t t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void violation(int check, int64_t t, const char *fmt, ...) {
    int f = fault_at(t);
    if (vcount[check] < SHOWN) {
        va_list ap;
        va_start(ap, fmt);
        printf("chaos: VIOLATION %s (under %s) at %.1f ms: ", check_names[check],
               f == F_N ? "no fault yet" : fault_names[f], MS(t - t0));
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    }
    vcount[check]++;
    vtable[check][f]++;
}

static void parse_line(const char *line, run_log *lg, long *cur) {
    int pid, thr, seq, lock, mode, rc, ok;
    long long a, b, c, d, e;
    unsigned long long fence;
    hold *h;
    switch (line[0]) {
    case 'L':
        if (sscanf(line, "L %d %d %d %d %d %lld %lld %lld %d %llu %lld %lld", &pid, &thr, &seq, &lock,
                   &mode, &a, &b, &c, &rc, &fence, &d, &e) != 12 || thr < 0 || thr >= NTHR ||
            lock < 0 || lock >= NLOCK)
            break;
        h = vec_push(&lg->holds);
        *h = (hold){ pid, thr, seq, lock, mode, rc, a, b, c, fence, d, e, 0, 0, 0, 0, 0 };
        cur[thr] = rc == 0 || rc == EOWNERDEAD ? (long)lg->holds.n - 1 : -1;
        return;
    case 'H':
        if (sscanf(line, "H %d %d %d %lld %d", &pid, &thr, &seq, &a, &ok) != 5 || thr < 0 || thr >= NTHR)
            break;
        h = cur[thr] >= 0 ? (hold *)lg->holds.p + cur[thr] : NULL;
        if (ok == 1 && h != NULL && h->seq == seq && a > h->vend) h->vend = a;
        return;
    case 'W': {
        if (sscanf(line, "W %d %d %d %d %llu %lld %lld %d", &pid, &thr, &seq, &lock, &fence, &a, &b,
                   &rc) != 8 || lock < 0 || lock >= NLOCK)
            break;
        wrec *w = vec_push(&lg->writes);
        *w = (wrec){ pid, lock, rc, fence, a, b };
        return;
    }
    case 'U':
        if (sscanf(line, "U %d %d %d %lld %lld %d", &pid, &thr, &seq, &a, &b, &rc) != 6 || thr < 0 ||
            thr >= NTHR)
            break;
        h = cur[thr] >= 0 ? (hold *)lg->holds.p + cur[thr] : NULL;
        if (h != NULL && h->seq == seq) {
            h->released = 1;
            h->us = a;
            h->ue = b;
            h->urc = rc;
        }
        cur[thr] = -1;
        return;
    case 'Z': {
        if (sscanf(line, "Z %d %lld %lld", &pid, &a, &b) != 3) break;
        stall *z = vec_push(&lg->stalls);
        *z = (stall){ pid, a, b };
        return;
    }
    case 'X': {
        if (sscanf(line, "X %d %d %lld", &pid, &lock, &a) != 3) break;
        xrec *x = vec_push(&lg->lost);
        *x = (xrec){ pid, lock, a };
        return;
    }
    }
    lg->malformed++;
}

static void read_logs(const char *dir, run_log *lg) {
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != 'w') continue;
        char path[600], line[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        long cur[NTHR];
        for (int i = 0; i < NTHR; i++) cur[i] = -1;
        while (fgets(line, sizeof line, f) != NULL)
            if (strchr(line, '\n') != NULL) parse_line(line, lg, cur); /* else cut by SIGKILL */
        fclose(f);
    }
    closedir(d);
}

static int taken(const hold *h) {
    return h->rc == 0 || h->rc == EOWNERDEAD;
}

static int paused_during(pid_t pid, int64_t from, int64_t to) {
    for (int i = 0; i < nfaults; i++)
        if (faults[i].kind == F_PAUSE && faults[i].pid == pid && faults[i].start <= to &&
            faults[i].end >= from)
            return 1;
    return 0;
}

static const char *rc_name(int rc) {
    const char *n = dlt_errno_name(rc);
    return n != NULL ? n : "?";
}

/* How long pid was not run (its stall probe overslept) within [from, to]. */
static int64_t stalled(const run_log *lg, pid_t pid, int64_t from, int64_t to) {
    const stall *Z = lg->stalls.p;
    int64_t sum = 0;
    for (size_t i = 0; i < lg->stalls.n; i++) {
        if (Z[i].pid != pid) continue;
        int64_t a = Z[i].from > from ? Z[i].from : from, b = Z[i].to < to ? Z[i].to : to;
        if (b > a) sum += b - a;
    }
    return sum;
}

/* A call that returned late is excused when its process was paused, or
 * kept from a CPU (its stall probe) as long as it was late, less the
 * allowance; or when its thread waited for a CPU that long while it
 * hardly ran (under IDLE_CPU_MS): a thread that was asleep and woke late,
 * the machine's doing -- one that spins waits for a CPU too, by its own. */
#define IDLE_CPU_MS 20
static int late_excused(run_log *lg, const hold *h) {
    int64_t over = h->ret - h->deadline - LATE_MS * NS_PER_MS;
    int64_t z = stalled(lg, h->pid, h->start, h->ret);
    int64_t rq = h->cpu < IDLE_CPU_MS * NS_PER_MS ? h->rq : 0;
    if (!paused_during(h->pid, h->start, h->ret) && (z > rq ? z : rq) < over) return 0;
    lg->excused++;
    return 1;
}

/* result, deadline; returns the successful takes. */
static long check_calls(run_log *lg) {
    const hold *H = lg->holds.p;
    long ok = 0;
    for (size_t i = 0; i < lg->holds.n; i++) {
        const hold *h = &H[i];
        int rc = h->rc;
        ok += taken(h);
        if (!(rc == 0 || rc == ETIMEDOUT || rc == ENOLCK || (rc == EOWNERDEAD && sh->kind == K_ROBUST)))
            violation(C_RESULT, h->ret, "take of pid %d (name %d) returned %s", (int)h->pid, h->lock,
                      rc_name(rc));
        if (h->ret > h->deadline + LATE_MS * NS_PER_MS && !late_excused(lg, h))
            violation(C_DEADLINE, h->ret, "take of pid %d (name %d) returned %s %.1f ms past its "
                      "deadline (a %.0f ms call; its thread ran %.1f ms and waited %.1f ms for a "
                      "CPU in it, its process was not run for %.1f ms)", (int)h->pid, h->lock,
                      rc_name(rc), MS(h->ret - h->deadline), MS(h->deadline - h->start),
                      MS(h->cpu), MS(h->rq), MS(stalled(lg, h->pid, h->start, h->ret)));
        if (h->released && !(h->urc == 0 || h->urc == ENOLCK || (h->urc == EPERM && h->mode != M_UNIT)))
            violation(C_RESULT, h->ue, "release of pid %d (name %d) returned %s", (int)h->pid,
                      h->lock, rc_name(h->urc));
    }
    return ok;
}

static int cmp_ret(const void *x, const void *y) {
    const hold *a = *(const hold *const *)x, *b = *(const hold *const *)y;
    return a->ret < b->ret ? -1 : a->ret > b->ret;
}

static int cmp_fence(const void *x, const void *y) {
    const hold *a = *(const hold *const *)x, *b = *(const hold *const *)y;
    return a->fence < b->fence ? -1 : a->fence > b->fence;
}

/* fence (a) and (b) for the n successful takes of one name. */
static void check_fences(int lock, const hold **hs, size_t n) {
    /* a: a writer's fence is its own.  Readers granted together by one
     * release may share one: fences do not tell concurrent readers apart
     * anyway (docs/fencing.md), and no write is fenced by a read hold. */
    qsort(hs, n, sizeof *hs, cmp_fence);
    for (size_t i = 1; i < n; i++)
        if (hs[i]->fence == hs[i - 1]->fence && (hs[i]->mode != M_READ || hs[i - 1]->mode != M_READ))
            violation(C_FENCE, hs[i]->ret, "name %d: fence %" PRIu64 " given twice (pids %d, %d)",
                      lock, hs[i]->fence, (int)hs[i - 1]->pid, (int)hs[i]->pid);
    qsort(hs, n, sizeof *hs, cmp_ret);
    /* b: the greatest fence of the takes that returned before hs[j]'s
     * call began must be below hs[j]'s. */
    size_t arg = 0;
    uint64_t *pmax = malloc((n + 1) * sizeof *pmax);
    size_t *parg = malloc((n + 1) * sizeof *parg);
    if (pmax == NULL || parg == NULL) abort();
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || hs[i]->fence > pmax[i - 1]) arg = i;
        pmax[i] = hs[arg]->fence;
        parg[i] = arg;
    }
    for (size_t j = 0; j < n; j++) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (hs[mid]->ret < hs[j]->start) lo = mid + 1;
            else hi = mid;
        }
        if (lo == 0 || pmax[lo - 1] < hs[j]->fence) continue;
        const hold *p = hs[parg[lo - 1]];
        violation(C_FENCE, hs[j]->ret, "name %d: fence %" PRIu64 " (pid %d, call %.1f..%.1f ms) "
                  "not above fence %" PRIu64 " (pid %d, returned %.1f ms) given before the call",
                  lock, hs[j]->fence, (int)hs[j]->pid, MS(hs[j]->start - t0), MS(hs[j]->ret - t0),
                  p->fence, (int)p->pid, MS(p->ret - t0));
    }
    free(pmax);
    free(parg);
}

static int cmp_wend(const void *x, const void *y) {
    const wrec *a = *(const wrec *const *)x, *b = *(const wrec *const *)y;
    return a->end < b->end ? -1 : a->end > b->end;
}

/* stale: accepted writes of one name, n of them. */
static void check_stale(int lock, const wrec **w, size_t n) {
    qsort(w, n, sizeof *w, cmp_wend);
    uint64_t *pmax = malloc((n + 1) * sizeof *pmax);
    if (pmax == NULL) abort();
    for (size_t i = 0; i < n; i++) pmax[i] = i == 0 || w[i]->fence > pmax[i - 1] ? w[i]->fence : pmax[i - 1];
    for (size_t j = 0; j < n; j++) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (w[mid]->end < w[j]->start) lo = mid + 1;
            else hi = mid;
        }
        if (lo > 0 && pmax[lo - 1] > w[j]->fence)
            violation(C_STALE, w[j]->end, "name %d: write of fence %" PRIu64 " (pid %d) accepted "
                      "after one of fence %" PRIu64 " was", lock, w[j]->fence, (int)w[j]->pid,
                      pmax[lo - 1]);
    }
    free(pmax);
}

/* The first lost-handler call of pid for lock in [from, to]; 0: none. */
static int64_t told_at(const run_log *lg, pid_t pid, int lock, int64_t from, int64_t to) {
    const xrec *X = lg->lost.p;
    int64_t best = 0;
    for (size_t i = 0; i < lg->lost.n; i++)
        if (X[i].pid == pid && X[i].lock == lock && X[i].t >= from && X[i].t <= to &&
            (best == 0 || X[i].t < best))
            best = X[i].t;
    return best;
}

static int64_t death_of(pid_t pid, int64_t t_end) {
    for (int i = 0; i < nfaults; i++)
        if (faults[i].kind == F_KILL && faults[i].pid == pid) return faults[i].start;
    return t_end;
}

static int is_loss(const fault *f) {
    return f->kind == F_RESTART_LOST || f->kind == F_FLUSHALL;
}

/* The first fault that took the server's data begun in (from, to), or
 * NULL. */
static const fault *loss_in(int64_t from, int64_t to) {
    const fault *first = NULL;
    for (int i = 0; i < nfaults; i++)
        if (is_loss(&faults[i]) && faults[i].start > from && faults[i].start < to &&
            (first == NULL || faults[i].start < first->start))
            first = &faults[i];
    return first;
}

/* A semaphore unit's interval ends at its post, the lost handler, its
 * holder's death, or (undo: the unit is leased) a pause of its holder.
 * A plain unit (no undo) has no owner and no lease: the server's data
 * loss takes it with the semaphore, which the next call makes again
 * with the value it was opened with (docs/locks.md "A semaphore the server lost
 * comes back"), so it counts against the semaphore of before only. */
static int64_t unit_end(const run_log *lg, const hold *h, int64_t t_end) {
    int64_t end = h->released ? h->us : death_of(h->pid, t_end);
    int64_t x = told_at(lg, h->pid, h->lock, h->ret, end);
    const fault *loss;
    if (x != 0) end = x;
    for (int i = 0; i < nfaults && sh->kind == K_SEM_UNDO; i++)
        if (faults[i].kind == F_PAUSE && faults[i].pid == h->pid && faults[i].start >= h->ret &&
            faults[i].start < end)
            end = faults[i].start;
    if (sh->kind == K_SEM && (loss = loss_in(h->ret, end)) != NULL) end = loss->start;
    return end;
}

typedef struct edge {
    int64_t t;
    int delta; /* +1 begins, -1 ends; 0: the value allowed changes by `excl` */
    int excl;
} edge;

/* A plain unit taken before a data loss and posted after it is added to
 * the semaphore made again: one unit more than the value, from its post
 * until the next loss makes the semaphore anew (docs/locks.md: "one more than
 * the value; use undo where that matters").  The server's order is not
 * the log's: a take in flight across the loss (begun before it, returned
 * after) may have taken its unit from the semaphore of before, so the
 * one made again may give its full value besides it, and its post adds
 * one; a post in flight across it may have reached the one made again,
 * and so may one that got no answer, which the thread's next call asks
 * again (docs/locks.md: the server's record of the calls it did is lost
 * too).  Each allows one unit more from the loss (or its post) until the
 * next loss.  Its allowance edges in e. */
static size_t allow_until_next_loss(int64_t from, const fault *loss, edge *e) {
    const fault *next;
    size_t n = 0;
    if (from < loss->start) from = loss->start;
    e[n++] = (edge){ from, 0, 1 };
    if ((next = loss_in(from, INT64_MAX)) != NULL) e[n++] = (edge){ next->start, 0, -1 };
    return n;
}

/* (A unit its holder held when killed is posted by the worker forked in
 * its place (fault_kill): posted after a loss, a unit of before too.) */
static size_t unit_repaid(const hold *h, edge *e) {
    const fault *loss;
    int64_t death = h->released ? 0 : death_of(h->pid, 0);
    size_t n = 0;
    if (sh->kind != K_SEM) return 0;
    if ((loss = loss_in(h->start, h->ret)) != NULL) n += allow_until_next_loss(h->ret, loss, e + n);
    else if (h->released && (loss = loss_in(h->ret, h->urc == 0 ? h->ue : INT64_MAX)) != NULL)
        n += allow_until_next_loss(h->us, loss, e + n);
    else if (death != 0 && (loss = loss_in(h->ret, death)) != NULL) n += allow_until_next_loss(death, loss, e + n);
    return n;
}

static int cmp_edge(const void *x, const void *y) {
    const edge *a = x, *b = y;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    return a->delta - b->delta; /* ends first: intervals that touch do not overlap */
}

/* exclusion for one name: at most one writer, or readers only, or SEM_N units. */
static void check_exclusion(const run_log *lg, int lock, int64_t t_end) {
    const hold *H = lg->holds.p;
    edge *e = malloc((4 * lg->holds.n + 1) * sizeof *e); /* (2 per hold, and 2 of allowance) */
    size_t n = 0;
    if (e == NULL) abort();
    for (size_t i = 0; i < lg->holds.n; i++) {
        const hold *h = &H[i];
        if (h->lock != lock || !taken(h)) continue;
        int64_t end = h->mode == M_UNIT ? unit_end(lg, h, t_end) : h->vend;
        if (end == 0 || end < h->ret) continue;
        int excl = h->mode == M_MUTEX || h->mode == M_WRITE;
        e[n++] = (edge){ h->ret, 1, excl };
        e[n++] = (edge){ end, -1, excl };
        n += unit_repaid(h, e + n);
    }
    qsort(e, n, sizeof *e, cmp_edge);
    int ex = 0, sharers = 0, bad = 0, value = SEM_N;
    for (size_t i = 0; i < n; i++) {
        if (e[i].delta == 0) value += e[i].excl;
        else if (e[i].excl) ex += e[i].delta;
        else sharers += e[i].delta;
        int over = is_sem() ? sharers > value : ex > 1 || (ex == 1 && sharers > 0);
        if (over && !bad)
            violation(C_EXCL, e[i].t, "name %d: %d exclusive and %d shared holds at once%s", lock, ex,
                      sharers, is_sem() ? " (units out past the value)" : "");
        bad = over;
    }
    free(e);
}

/* Why the server let h lapse, or NULL: its release said so, or a fault
 * kept its renewals from the server past the lease, or took its data.
 * A plain semaphore unit (no undo) has no lease and no owner on the
 * server: neither a fault's length nor a data loss is told for it (docs/locks.md
 * "A semaphore the server lost comes back"; unit_end). */
static const char *lapse_reason(const hold *h) {
    int leased = h->mode != M_UNIT || sh->kind == K_SEM_UNDO;
    if (!leased) return NULL;
    if (h->urc == EPERM && h->mode != M_UNIT) return "its release said EPERM";
    for (int i = 0; i < nfaults; i++) {
        const fault *f = &faults[i];
        if (f->start <= h->ret || f->end >= h->us) continue;
        int64_t len = f->end - f->start;
        if (is_loss(f)) return fault_names[f->kind];
        if (len <= (LEASE_MS + 100) * NS_PER_MS) continue;
        if ((f->kind == F_PAUSE && f->pid == h->pid) || f->kind == F_FREEZE ||
            f->kind == F_RESTART || f->kind == F_CUT || f->kind == F_DROP)
            return fault_names[f->kind];
    }
    return NULL;
}

static void check_told(const run_log *lg) {
    const hold *H = lg->holds.p;
    for (size_t i = 0; i < lg->holds.n; i++) {
        const hold *h = &H[i];
        if (!taken(h) || !h->released) continue;
        const char *why = lapse_reason(h);
        if (why == NULL) continue;
        if (told_at(lg, h->pid, h->lock, h->ret, h->ue + (LEASE_MS + 500) * NS_PER_MS) == 0)
            violation(C_TOLD, h->ue, "a hold of pid %d (name %d, %.1f..%.1f ms) lapsed (%s) and "
                      "its lost handler never ran", (int)h->pid, h->lock, MS(h->ret - t0),
                      MS(h->us - t0), why);
    }
}

static int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* delay: h, an exclusive hold of the process that fault f killed or
 * paused, held when f began; no other take of its name may return
 * before f's start + the lock-delay. */
static void check_delay_after(const run_log *lg, const fault *f, const hold *h) {
    const hold *H = lg->holds.p;
    int64_t bound = f->start + (int64_t)sh->lock_delay_ms * NS_PER_MS;
    for (size_t j = 0; j < lg->holds.n; j++) {
        const hold *o = &H[j];
        if (o == h || o->lock != h->lock || !taken(o) || o->ret <= f->start || o->ret >= bound) continue;
        if (o->mode != M_MUTEX && o->mode != M_WRITE) continue;
        violation(C_DELAY, o->ret, "name %d: taken by pid %d %.1f ms after the %s of its holder pid %d "
                  "(lock-delay %u ms)", h->lock, (int)o->pid, MS(o->ret - f->start), fault_names[f->kind],
                  (int)h->pid, sh->lock_delay_ms);
    }
}

static void check_delay(const run_log *lg) {
    const hold *H = lg->holds.p;
    if (sh->lock_delay_ms == 0 || is_sem() || sh->kind == K_RWLOCK) return;
    for (int i = 0; i < nfaults; i++) {
        const fault *f = &faults[i];
        if (f->kind != F_KILL && f->kind != F_PAUSE) continue;
        for (size_t j = 0; j < lg->holds.n; j++) {
            const hold *h = &H[j];
            /* (a release that said 0 reached the server in time: the
             * signal landed a moment after f->start, a clean handover) */
            if (h->pid == f->pid && taken(h) && h->ret <= f->start &&
                (!h->released || (h->us > f->start && h->urc != 0)))
                check_delay_after(lg, f, h);
        }
    }
}

static void check_progress(const run_log *lg, long acquisitions) {
    const hold *H = lg->holds.p;
    int64_t *ok = malloc((lg->holds.n + 1) * sizeof *ok);
    size_t n = 0;
    if (ok == NULL) abort();
    for (size_t i = 0; i < lg->holds.n; i++)
        if (taken(&H[i])) ok[n++] = H[i].ret;
    qsort(ok, n, sizeof *ok, cmp_i64);
    for (int i = 0; i < nfaults; i++) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (ok[mid] < faults[i].end) lo = mid + 1;
            else hi = mid;
        }
        if (lo == n || ok[lo] > faults[i].end + RESUME_MS * NS_PER_MS)
            violation(C_PROGRESS, faults[i].end, "no take succeeded within %d ms after the fault "
                      "ended", RESUME_MS);
    }
    if (acquisitions < MIN_ACQ)
        violation(C_PROGRESS, now_ns(), "%ld takes succeeded in the run (< %d)", acquisitions, MIN_ACQ);
    free(ok);
}

/* Every check on the logs in dir; returns the successful takes. */
static long run_checker(const char *dir, int64_t t_end) {
    run_log lg = { { NULL, 0, 0, sizeof(hold) }, { NULL, 0, 0, sizeof(wrec) },
                   { NULL, 0, 0, sizeof(xrec) }, { NULL, 0, 0, sizeof(stall) }, 0, 0 };
    read_logs(dir, &lg);
    long acquisitions = check_calls(&lg);
    size_t cap = lg.holds.n + lg.writes.n + 1;
    const void **ptrs = malloc(cap * sizeof *ptrs);
    if (ptrs == NULL) abort();
    for (int l = 0; l < NLOCK; l++) {
        size_t n = 0;
        const hold *H = lg.holds.p;
        for (size_t i = 0; i < lg.holds.n; i++)
            if (H[i].lock == l && taken(&H[i]) && H[i].fence != 0 && H[i].mode != M_UNIT)
                ptrs[n++] = &H[i];
        check_fences(l, (const hold **)ptrs, n);
        n = 0;
        const wrec *W = lg.writes.p;
        for (size_t i = 0; i < lg.writes.n; i++)
            if (W[i].lock == l && W[i].rc == 0) ptrs[n++] = &W[i];
        check_stale(l, (const wrec **)ptrs, n);
        check_exclusion(&lg, l, t_end);
    }
    free(ptrs);
    check_told(&lg);
    check_delay(&lg);
    check_progress(&lg, acquisitions);
    for (int i = 0; i < nhung; i++)
        violation(C_HUNG, hungs[i].t, "pid %d %s", (int)hungs[i].pid,
                  hungs[i].thr < 0 ? "did not exit within 10 s of the stop" : "has a call past its bound");
    printf("chaos-detail: calls=%zu ok=%ld writes=%zu lost-handler=%zu late calls excused (process "
           "paused or not run)=%ld stalls=%zu torn-lines=%ld\n", lg.holds.n, acquisitions, lg.writes.n,
           lg.lost.n, lg.excused, lg.stalls.n, lg.malformed);
    free(lg.holds.p);
    free(lg.writes.p);
    free(lg.lost.p);
    free(lg.stalls.p);
    return acquisitions;
}

/* ------------------------------------------------------------- the run */

static int cfg_kind = K_DEFAULT, cfg_sabotage = S_NONE, cfg_expect = -1;
static int cfg_faults[F_N], cfg_nfaults, cfg_rounds = 1;
static unsigned cfg_lock_delay_ms;

static void report(long acquisitions, int inject_failed) {
    int counts[F_N] = { 0 }, total = 0;
    for (int i = 0; i < nfaults; i++) {
        counts[faults[i].kind]++;
        printf("chaos: fault %2d %-12s %8.1f .. %8.1f ms%s\n", i, fault_names[faults[i].kind],
               MS(faults[i].start - t0), MS(faults[i].end - t0),
               faults[i].pid == 0 ? "" : faults[i].holder ? " (a holder)" : " (not a holder)");
    }
    for (int c = 0; c < C_N; c++) total += vcount[c];
    if (total > 0) {
        printf("chaos: violations by check and fault (the fault begun last before each):\n");
        for (int c = 0; c < C_N; c++)
            for (int f = 0; f <= F_N; f++)
                if (vtable[c][f] > 0)
                    printf("chaos:   %-10s under %-13s %d\n", check_names[c],
                           f == F_N ? "(none yet)" : fault_names[f], vtable[c][f]);
    }
    printf("chaos: kind=%s sabotage=%s acquisitions=%ld faults=%d", kind_names[cfg_kind],
           sabotage_names[cfg_sabotage], acquisitions, nfaults);
    for (int f = 0; f < F_N; f++)
        if (counts[f] > 0) printf(" %s=%d", fault_names[f], counts[f]);
    printf(" violations=%d%s\n", total, inject_failed ? " (a fault could not be injected)" : "");
}

/* The faults to inject, in order: each of the list once, shuffled; with
 * CHAOS_SECONDS, rounds of them for that long (the caller stops). */
static int next_fault(uint64_t *rng, int *order, int *next) {
    if (*next >= cfg_nfaults) {
        for (int i = 0; i < cfg_nfaults; i++) order[i] = cfg_faults[i];
        for (int i = cfg_nfaults - 1; i > 0; i--) {
            int j = (int)rng_range(rng, 0, (unsigned)i);
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        *next = 0;
    }
    return order[(*next)++];
}

/* Injects the faults; returns 1 if one could not be injected. */
static int chaos(uint64_t *rng) {
    const char *e = getenv("CHAOS_SECONDS");
    int seconds = e != NULL && atoi(e) > 0 ? atoi(e) : 0;
    if (seconds > MAX_SECONDS) seconds = MAX_SECONDS;
    int64_t until = now_ns() + (int64_t)seconds * 1000000000LL;
    int order[F_N], next = F_N;
    if (cfg_nfaults == 0) {
        watch_sleep((seconds > 0 ? seconds : 4) * 1000LL * NS_PER_MS);
        return 0;
    }
    for (int done = 0; nfaults < MAX_FAULTS - 1; done++) {
        if (seconds > 0 ? now_ns() >= until : done >= cfg_nfaults * cfg_rounds) break;
        int kind = next_fault(rng, order, &next);
        if (inject(kind, rng) != 0) {
            fprintf(stderr, "chaos: injecting %s failed\n", fault_names[kind]);
            return 1;
        }
        /* 0.7 s at least, and until a take succeeded after the fault
         * healed (at most RESUME_MS + 0.5 s: progress then fails). */
        const fault *f = &faults[nfaults - 1];
        while (now_ns() < f->end + (RESUME_MS + 500) * NS_PER_MS &&
               (now_ns() < f->end + 700 * NS_PER_MS || atomic_load(&sh->last_ok_ns) <= f->end))
            watch_sleep(20 * NS_PER_MS);
    }
    return 0;
}

static int setup(uint64_t seed) {
    if (dlt_redis_start(&srv, "appendonly yes\nappendfsync always") != 0) return -1;
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        sh = NULL;
        return -1;
    }
    memset(sh, 0, sizeof *sh);
    sh->seed = seed;
    sh->kind = cfg_kind;
    sh->sabotage = cfg_sabotage;
    sh->lock_delay_ms = cfg_lock_delay_ms;
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp != '/') tmp = "/tmp";
    snprintf(sh->logdir, sizeof sh->logdir, "%s/dlock-chaos-suite-XXXXXX", tmp);
    if (mkdtemp(sh->logdir) == NULL || proxy_start() != 0) return -1;
    printf("chaos: server %s (pid %d), workers through %s, logs in %s\n", srv.url, (int)srv.pid,
           sh->url, sh->logdir);
    return 0;
}

static void test_chaos_kind(void) {
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    const char *e = getenv("CHAOS_SEED");
    if (e != NULL && *e) seed = strtoull(e, NULL, 0);
    if (seed == 0) seed = 1;
    printf("\nchaos: kind=%s sabotage=%s seed=%" PRIu64 " (CHAOS_SEED to repeat)\n",
           kind_names[cfg_kind], sabotage_names[cfg_sabotage], seed);
    uint64_t rng = seed;
    if (setup(seed) != 0) {
        proxy_end();
        dlt_redis_cleanup(&srv);
        CU_FAIL_FATAL("chaos: setup failed");
    }
    t0 = now_ns();
    sh->hard_end_ns = t0 + 500LL * 1000000000LL;
    int ok = 1;
    for (int i = 0; i < NPROC; i++) ok &= spawn_worker(i) == 0;
    CU_ASSERT_FATAL(ok);
    /* Warm up: 1 s, and until some holds were taken (5 s at most), so that
     * the first fault finds fences issued and holds to lose. */
    watch_sleep(1000 * NS_PER_MS);
    for (int64_t cap = now_ns() + 4000 * NS_PER_MS; atomic_load(&sh->takes) < WARM_TAKES && now_ns() < cap;)
        watch_sleep(20 * NS_PER_MS);
    int inject_failed = chaos(&rng);
    if (srv.pid > 0) kill(srv.pid, SIGCONT);
    proxy_send(DLT_PROXY_PASS, 0, 0);
    watch_sleep(1000 * NS_PER_MS);
    stop_workers();
    int64_t t_end = now_ns();
    proxy_end();

    long acquisitions = run_checker(sh->logdir, t_end);
    report(acquisitions, inject_failed);
    int total = 0;
    for (int c = 0; c < C_N; c++) total += vcount[c];
    CU_ASSERT(!inject_failed);
    DLT_ASSERT_INT_EQ(worker_bad_exits, 0);
    if (cfg_expect >= 0) {
        printf("chaos: sabotage %s must be found by the %s check: %d found\n",
               sabotage_names[cfg_sabotage], check_names[cfg_expect], vcount[cfg_expect]);
        CU_ASSERT(vcount[cfg_expect] > 0);
    } else {
        DLT_ASSERT_INT_EQ(total, 0);
    }
    int failed = inject_failed || worker_bad_exits != 0 ||
                 (cfg_expect >= 0 ? vcount[cfg_expect] == 0 : total != 0);
    if (failed || getenv("CHAOS_KEEP_LOGS") != NULL) printf("chaos: logs kept in %s\n", sh->logdir);
    else rm_tree(sh->logdir);
    dlt_redis_cleanup(&srv);
}

static int lookup(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

/* --kind K --faults a,b,c --sabotage M --expect C.  0, or -1 with a message. */
static int parse_args(int argc, char **argv) {
    const char *e = getenv("CHAOS_SABOTAGE");
    if (e != NULL && *e && (cfg_sabotage = lookup(e, sabotage_names, S_N)) < 0) return -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *opt = argv[i], *val = argv[i + 1];
        if (strcmp(opt, "--kind") == 0) {
            if ((cfg_kind = lookup(val, kind_names, K_N)) < 0) return -1;
        } else if (strcmp(opt, "--sabotage") == 0) {
            if ((cfg_sabotage = lookup(val, sabotage_names, S_N)) < 0) return -1;
        } else if (strcmp(opt, "--rounds") == 0) {
            if ((cfg_rounds = atoi(val)) < 1 || cfg_rounds > 20) return -1;
        } else if (strcmp(opt, "--lock-delay") == 0) {
            char *end;
            unsigned long v = strtoul(val, &end, 10);
            if (*end != '\0' || end == val || v > DLOCK_LOCK_DELAY_MAX_MS) return -1;
            cfg_lock_delay_ms = (unsigned)v;
        } else if (strcmp(opt, "--expect") == 0) {
            if ((cfg_expect = lookup(val, check_names, C_N)) < 0) return -1;
        } else if (strcmp(opt, "--faults") == 0) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", val);
            cfg_nfaults = 0;
            for (char *sp, *t = strtok_r(buf, ",", &sp); t != NULL; t = strtok_r(NULL, ",", &sp)) {
                int f = lookup(t, fault_names, F_N);
                if (strcmp(t, "none") == 0) continue;
                if (f < 0 || cfg_nfaults >= F_N) return -1;
                cfg_faults[cfg_nfaults++] = f;
            }
        } else {
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    static const struct dlt_test tests[] = { DLT_TEST(test_chaos_kind), { NULL, NULL } };
    if (parse_args(argc, argv) != 0) {
        fprintf(stderr, "usage: %s --kind default|robust|fair|caching|rwlock|sem|sem_undo "
                "--faults kill,pause,restart,restart-lost,flushall,freeze,cut,drop,slow|none "
                "[--rounds N] [--sabotage nolock|nofence|silent|nodelay --expect CHECK] [--lock-delay MS]\n",
                argv[0]);
        return 2;
    }
    for (int i = 0; i < cfg_nfaults; i++) /* no fault twice in a list */
        for (int j = 0; j < i; j++)
            if (cfg_faults[i] == cfg_faults[j]) return 2;
    char *args[] = { argv[0], NULL };
    int rc = dlt_main(1, args, "chaos_suite", tests);
    for (int i = 0; i < NPROC; i++) /* no worker outlives the test */
        if (workers[i] > 0) {
            kill(workers[i], SIGKILL);
            waitpid(workers[i], NULL, 0);
        }
    if (proxy_pid > 0) {
        kill(proxy_pid, SIGKILL);
        waitpid(proxy_pid, NULL, 0);
    }
    return rc;
}
