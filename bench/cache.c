/* cache.c -- lock caching: what a caching mutex costs when one
 * process has the lock to itself, and what it costs when two processes
 * pass it back and forth.
 *
 * Uncontended (one thread, free lock), the kinds interleaved in rounds
 * (order turning each round) as in seq.c: a plain pthread_mutex_lock/unlock
 * pair in this program (the pthread floor), a PING (the round-trip floor),
 * dlock's default lock+unlock (round trips), and a caching mutex's
 * lock+unlock and trylock+unlock after a warm-up (the caching process keeps
 * the lock: no round trip).  Each kind's time per pair is its batch's
 * elapsed time over its count, the median over rounds; the server's
 * requests per pair come from INFO commandstats around every batch, so a
 * "local" pair that still goes to the server shows.  The warm-up itself is
 * reported: the first pairs may go to the server until the lock's channel
 * subscription is confirmed.
 *
 * Ping-pong: two forked processes, each with its own client and a mutex
 * object on one lock name, pass the lock back and forth: in strict
 * alternation (a turn word in shared memory, waited on with a futex: a
 * process calls lock only once the other has unlocked, so every
 * acquisition takes the lock from the other process; with caching, from
 * the other's cache), and free (both loop lock -> increment -> unlock
 * with no hold, contending).  Each is run with a caching and with a plain
 * mutex.  Inside the lock each process increments a shared counter with a
 * plain (non-atomic) read and write, and records the hold at the index the
 * counter gave it, with the hold's fence: the counter must end equal to
 * the acquisitions made, no two holds may overlap, and the fences must
 * increase strictly in the counter's order, or mutual exclusion broke
 * (exit status 1).  The event log goes through analyze.c: handoff =
 * release issued by one process -> lock returned in the other.
 *
 * Every loop is bounded by a count and a time; a worker still alive 20 s
 * past its deadline is killed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static void check(int rc, const char *what) {
    if (rc != 0) die("%s: %s (%s)", what, dlock_strerror(rc), dlock_last_error());
}

/* ---------------------------------------------------------- uncontended */

enum { U_PTHREAD, U_PING, U_PLAIN, U_CLOCK, U_CTRY, U_N };
static const char *const uname_[U_N] = { "pthread_pair", "ping", "plain_lock_unlock", "caching_lock_unlock",
                                          "caching_trylock_unlock" };

typedef struct ukind {
    series ns;    /* per round: ns per op, x1000 */
    long ops, reqs, cmds;
} ukind;

typedef struct uctx {
    redisContext *rc;
    pthread_mutex_t pm;
    dlock_mutex_t plain, cm;
} uctx;

/* One batch of kind k: at most n ops, at most `seconds`; returns ops done
 * and their elapsed time in *ns. */
static long ubatch(uctx *u, int k, long n, double seconds, int64_t *ns) {
    int64_t t0 = now_ns(), end = t0 + (int64_t)(seconds * 1e9);
    long i = 0;
    switch (k) {
    case U_PTHREAD:
        for (; i < n; i++) {
            pthread_mutex_lock(&u->pm);
            pthread_mutex_unlock(&u->pm);
            if ((i & 1023) == 1023 && now_ns() > end) { i++; break; }
        }
        break;
    case U_PING:
        for (; i < n && now_ns() < end; i++) freeReplyObject(bcmd(u->rc, "PING"));
        break;
    case U_PLAIN:
        for (; i < n && now_ns() < end; i++) {
            check(dlock_mutex_lock(&u->plain), "lock");
            check(dlock_mutex_unlock(&u->plain), "unlock");
        }
        break;
    case U_CLOCK:
        for (; i < n; i++) {
            check(dlock_mutex_lock(&u->cm), "caching lock");
            check(dlock_mutex_unlock(&u->cm), "caching unlock");
            if ((i & 1023) == 1023 && now_ns() > end) { i++; break; }
        }
        break;
    case U_CTRY:
        for (; i < n; i++) {
            check(dlock_mutex_trylock(&u->cm), "caching trylock");
            check(dlock_mutex_unlock(&u->cm), "caching unlock");
            if ((i & 1023) == 1023 && now_ns() > end) { i++; break; }
        }
        break;
    }
    *ns = now_ns() - t0;
    return i;
}

static void uncontended(const bopts *o, const bopts *oo, double rt_us) {
    uctx u;
    dlock_client_t *cl = bclient(o);
    ukind kd[U_N];
    int rounds = o->smoke ? 2 : 15, r, j, k, i, first_local = -1, pairs = 0;
    long nmax[U_N], warm_reqs, s0, s1, after_reqs = 0, after_n = o->smoke ? 2000 : 20000;
    double secs[U_N];
    int64_t t_first, first_local_ns = -1, dt;
    series lat = { 0 };
    bcounters c0, c1;

    memset(&u, 0, sizeof u);
    memset(kd, 0, sizeof kd);
    u.rc = bconnect(o);
    pthread_mutex_init(&u.pm, NULL);
    bmutex_init(&u.plain, cl, "cache-plain", DLOCK_MUTEX_DEFAULT, 0, 0);
    bmutex_init(&u.cm, cl, "cache-uncontended", DLOCK_MUTEX_DEFAULT, 0, BMUTEX_CACHING);

    /* Warm-up of the caching mutex, pair by pair: which pair is the first
     * that the server does not see, and when (from the first lock). */
    s0 = server_requests(u.rc, DLOCK_CMDS, NULL);
    t_first = now_ns();
    for (i = 0; i < 50 && now_ns() - t_first < (int64_t)2e9; i++) {
        long a = server_requests(u.rc, DLOCK_CMDS, NULL), b;
        int64_t t = now_ns();
        check(dlock_mutex_lock(&u.cm), "caching lock");
        check(dlock_mutex_unlock(&u.cm), "caching unlock");
        b = server_requests(u.rc, DLOCK_CMDS, NULL);
        pairs++;
        if (b == a && first_local < 0) {
            first_local = i + 1;
            first_local_ns = t - t_first;
        }
        if (first_local > 0 && i + 1 >= first_local + 10) break;
    }
    s1 = server_requests(u.rc, DLOCK_CMDS, NULL);
    warm_reqs = s1 - s0;
    note("caching warm-up: %d pairs, %ld server requests; first local pair: #%d, %.2f ms after the first lock", pairs,
         warm_reqs, first_local, first_local_ns / 1e6);
    result(oo, "cache.warmup_pairs", (double)pairs, "pairs");
    result(oo, "cache.warmup_server_reqs", (double)warm_reqs, "req");
    result(oo, "cache.warmup_first_local_pair", (double)first_local, "");
    result(oo, "cache.warmup_first_local_ms", first_local_ns / 1e6, "ms");
    /* Once local, a long run of pairs must stay local. */
    s0 = server_requests(u.rc, DLOCK_CMDS, NULL);
    for (i = 0; i < after_n; i++) {
        check(dlock_mutex_lock(&u.cm), "caching lock");
        check(dlock_mutex_unlock(&u.cm), "caching unlock");
    }
    after_reqs = server_requests(u.rc, DLOCK_CMDS, NULL) - s0;
    result(oo, "cache.after_warmup_server_reqs", (double)after_reqs, "req");
    result(oo, "cache.after_warmup_pairs", (double)after_n, "pairs");
    {   /* the other kinds' warm-up */
        int64_t ns;
        ubatch(&u, U_PTHREAD, 100000, 0.1, &ns);
        ubatch(&u, U_PING, 50, 0.5, &ns);
        ubatch(&u, U_PLAIN, 50, 0.5, &ns);
    }

    nmax[U_PTHREAD] = o->smoke ? 200000 : 2000000; secs[U_PTHREAD] = 0.05;
    nmax[U_PING] = o->smoke ? 50 : 300;           secs[U_PING] = o->smoke ? 0.1 : 0.3;
    nmax[U_PLAIN] = o->smoke ? 50 : 300;          secs[U_PLAIN] = o->smoke ? 0.1 : 0.4;
    nmax[U_CLOCK] = o->smoke ? 100000 : 1000000;  secs[U_CLOCK] = o->smoke ? 0.05 : 0.1;
    nmax[U_CTRY] = nmax[U_CLOCK];                 secs[U_CTRY] = secs[U_CLOCK];
    note("uncontended: %d interleaved rounds", rounds);
    for (r = 0; r < rounds; r++) {
        for (j = 0; j < U_N; j++) {
            int64_t ns;
            long n, a, b;
            k = (j + r) % U_N;
            a = k == U_PING ? 0 : server_requests(u.rc, DLOCK_CMDS, NULL);
            counters_get(&c0);
            n = ubatch(&u, k, nmax[k], secs[k], &ns);
            counters_get(&c1);
            b = k == U_PING ? 0 : server_requests(u.rc, DLOCK_CMDS, NULL);
            if ((k == U_CLOCK || k == U_CTRY) && b - a > 0)
                note("  round %d: %s batch (after %s) made %ld server requests in %ld pairs", r + 1, uname_[k],
                     j > 0 ? uname_[(j - 1 + r) % U_N] : "the previous round", b - a, n);
            if (n > 0) series_add(&kd[k].ns, (int64_t)((double)ns * 1e3 / (double)n));
            kd[k].ops += n;
            kd[k].reqs += b - a;
            kd[k].cmds += c1.cmds - c0.cmds;
        }
    }
    /* Per-pair latency of the cached pair (each timed: includes one clock
     * read, ~20-30 ns). */
    {
        long n = o->smoke ? 20000 : 200000;
        int64_t end = now_ns() + (int64_t)1e9;
        for (i = 0; i < n && (i & 1023 || now_ns() < end); i++) {
            int64_t t0 = now_ns();
            check(dlock_mutex_lock(&u.cm), "caching lock");
            check(dlock_mutex_unlock(&u.cm), "caching unlock");
            series_add(&lat, now_ns() - t0);
        }
        dt = 0;
        for (i = 0; i < 1000; i++) { int64_t t0 = now_ns(); dt += now_ns() - t0; }
    }

    {
        double ns_k[U_N];
        char key[96];
        for (k = 0; k < U_N; k++) ns_k[k] = (double)series_pct(&kd[k].ns, 50) / 1e3;
        /* RT here: the PING of the same rounds (the round trip can change
         * regime between steps on a busy host). */
        result(oo, "cache.ping_local_p50_us", ns_k[U_PING] / 1e3, "us");
        if (ns_k[U_PING] > 0) rt_us = ns_k[U_PING] / 1e3;
        for (k = 0; k < U_N; k++) {
            if (k == U_PING) continue;
            snprintf(key, sizeof key, "cache.%s_ns", uname_[k]);
            result(oo, key, ns_k[k], "ns/pair");
            snprintf(key, sizeof key, "cache.%s_per_s", uname_[k]);
            result(oo, key, ns_k[k] > 0 ? 1e9 / ns_k[k] : 0, "pairs/s");
            snprintf(key, sizeof key, "cache.%s_min_ns", uname_[k]);
            result(oo, key, (double)series_pct(&kd[k].ns, 0) / 1e3, "ns/pair");
            snprintf(key, sizeof key, "cache.%s_max_ns", uname_[k]);
            result(oo, key, (double)series_pct(&kd[k].ns, 100) / 1e3, "ns/pair");
            if (k == U_PTHREAD) continue;
            snprintf(key, sizeof key, "cache.%s_pairs", uname_[k]);
            result(oo, key, (double)kd[k].ops, "pairs");
            snprintf(key, sizeof key, "cache.%s_server_reqs", uname_[k]);
            result(oo, key, (double)kd[k].reqs / (double)kd[k].ops, "req/pair");
            snprintf(key, sizeof key, "cache.%s_client_cmds", uname_[k]);
            result(oo, key, (double)kd[k].cmds / (double)kd[k].ops, "cmd/pair");
            snprintf(key, sizeof key, "cache.%s_rt", uname_[k]);
            result(oo, key, ns_k[k] / 1e3 / rt_us, "RT");
        }
        result(oo, "cache.caching_server_reqs_total", (double)(kd[U_CLOCK].reqs + kd[U_CTRY].reqs), "req");
        result(oo, "cache.caching_vs_pthread", ns_k[U_CLOCK] / ns_k[U_PTHREAD], "x");
        result(oo, "cache.caching_try_vs_pthread", ns_k[U_CTRY] / ns_k[U_PTHREAD], "x");
        result(oo, "cache.caching_speedup_vs_plain", ns_k[U_PLAIN] / ns_k[U_CLOCK], "x");
        result(oo, "cache.caching_pair_timed_p50_ns", (double)series_pct(&lat, 50), "ns");
        result(oo, "cache.caching_pair_timed_p99_ns", (double)series_pct(&lat, 99), "ns");
        result(oo, "cache.caching_pair_timed_max_us", (double)series_max(&lat) / 1e3, "us");
        result(oo, "cache.clock_read_ns", (double)dt / 1000, "ns");
    }
    for (k = 0; k < U_N; k++) series_free(&kd[k].ns);
    series_free(&lat);
    check(dlock_mutex_destroy(&u.cm), "destroy");
    check(dlock_mutex_destroy(&u.plain), "destroy");
    dlock_client_destroy(cl);
    pthread_mutex_destroy(&u.pm);
    redisFree(u.rc);
}

/* ------------------------------------------------------------ ping-pong */

typedef struct ppx {
    uint64_t fence;
    int64_t unlock_ns; /* unlock called -> returned */
    int32_t worker;
    int32_t set;
} ppx;

typedef struct ppshared {
    int64_t start_at, stop_at;
    long cap;
    long counter;     /* read and written (not atomically) under the lock */
    long acquired[2]; /* acquisitions made by each process */
    long inside, violations, errors;
    uint32_t turn;    /* futex word: whose turn (alternation) */
    uint32_t stop;
    bevent *ev;       /* indexed by the counter's value at the acquisition */
    ppx *x;
} ppshared;

/* Waits until it is `id`'s turn; 0, or -1 when the run is over. */
static int wait_turn(ppshared *sh, uint32_t id, int64_t give_up) {
    int rc = turn_wait(&sh->turn, &sh->stop, id, give_up);
    if (rc == -2) {
        __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "ping-pong: process %u waited for its turn past the deadline\n", id);
    }
    return rc == 0 ? 0 : -1;
}

static void pp_child(const bopts *o, ppshared *sh, uint32_t id, int caching, int alternate, const char *name) {
    dlock_client_t *cl;
    dlock_mutex_t m;
    int64_t give_up = sh->stop_at + (int64_t)10e9;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    cl = bclient(o);
    bmutex_init(&m, cl, name, DLOCK_MUTEX_DEFAULT, 0, caching ? BMUTEX_CACHING : 0);
    while (now_ns() < sh->start_at) sleep_ms(0.2);
    for (;;) {
        int64_t t_call, t_acq, t_rel, u0;
        long c;
        int rc;
        volatile long *vc = &sh->counter;
        if (alternate && wait_turn(sh, id, give_up) != 0) break;
        if (now_ns() >= sh->stop_at || __atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) break;
        t_call = now_ns();
        if ((rc = dlock_mutex_lock(&m)) != 0) {
            __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
            fprintf(stderr, "ping-pong lock: %s (%s)\n", dlock_strerror(rc), dlock_last_error());
            break;
        }
        t_acq = now_ns();
        if (__atomic_add_fetch(&sh->inside, 1, __ATOMIC_ACQ_REL) != 1) __atomic_fetch_add(&sh->violations, 1, __ATOMIC_RELAXED);
        c = *vc; /* a plain read and write: lost updates if two hold the lock */
        *vc = c + 1;
        if (c < sh->cap) {
            sh->ev[c].worker = (int32_t)id;
            sh->ev[c].t_call = t_call;
            sh->ev[c].t_acq = t_acq;
            sh->x[c].fence = dlock_mutex_fence(&m);
            sh->x[c].worker = (int32_t)id;
        }
        sh->acquired[id]++;
        __atomic_sub_fetch(&sh->inside, 1, __ATOMIC_ACQ_REL);
        t_rel = now_ns();
        if (c < sh->cap) sh->ev[c].t_rel = t_rel;
        u0 = now_ns();
        if ((rc = dlock_mutex_unlock(&m)) != 0) {
            __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
            fprintf(stderr, "ping-pong unlock: %s (%s)\n", dlock_strerror(rc), dlock_last_error());
            break;
        }
        if (c < sh->cap) {
            sh->x[c].unlock_ns = now_ns() - u0;
            __atomic_store_n(&sh->x[c].set, 1, __ATOMIC_RELEASE);
        }
        if (c + 1 >= sh->cap) __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
        if (alternate) turn_pass(&sh->turn, 1 - id);
    }
    /* Whoever stops first lets the other one out of its wait. */
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    turn_pass(&sh->turn, 1 - id);
    check(dlock_mutex_destroy(&m), "destroy");
    dlock_client_destroy(cl);
    fflush(NULL);
    _exit(0);
}

/* One ping-pong run; returns non-zero if mutual exclusion broke or a
 * worker failed. */
static int pingpong(const bopts *o, const char *label, int caching, int alternate, double seconds, double rt_us,
                    const char *handoff_out) {
    redisContext *rc = bconnect(o);
    /* Free contention with caching runs at millions of local acquisitions
     * a second: its count bound ends it first. */
    long cap = o->count > 0 ? o->count : (alternate || o->smoke ? 400000 : 1000000), s0, s1, tot0, tot1, n, i, fence_bad = 0, unset = 0;
    ppshared *sh = shared_alloc(sizeof *sh);
    pid_t pids[2];
    bcounters c0, c1;
    double cpu0, cpu1, child_cpu = 0;
    struct rusage ru;
    series lockw = { 0 }, unl = { 0 };
    bopts oo = *o;
    cstats st;
    char name[64];
    int p, bad;
    int64_t kill_at;

    oo.label = label;
    oo.hold_ms = 0; /* no hold: the ideal is 1/(2 RT) */
    /* A lock name per run: no cached state or history carried over. */
    snprintf(name, sizeof name, "pingpong-%s-%s", alternate ? "alt" : "free", caching ? "caching" : "plain");
    sh->cap = cap;
    sh->ev = shared_alloc((size_t)cap * sizeof *sh->ev);
    sh->x = shared_alloc((size_t)cap * sizeof *sh->x);
    {   /* the round trip right now, for the record */
        series ps = { 0 };
        result(&oo, "ping_local_p50_us", (double)bench_ping(o, rc, 200, 0.3, &ps) / 1e3, "us");
        series_free(&ps);
    }
    counters_get(&c0);
    s0 = server_requests(rc, DLOCK_CMDS, &tot0);
    cpu0 = server_cpu(rc);
    sh->start_at = now_ns() + (int64_t)(o->smoke ? 150e6 : 400e6); /* the children connect meanwhile */
    sh->stop_at = sh->start_at + (int64_t)(seconds * 1e9);
    fflush(NULL);
    for (p = 0; p < 2; p++) {
        pid_t pid = fork();
        if (pid < 0) die("fork: %s", strerror(errno));
        if (pid == 0) pp_child(o, sh, (uint32_t)p, caching, alternate, name);
        pids[p] = pid;
    }
    kill_at = sh->stop_at + (int64_t)20e9;
    for (p = 0; p < 2; p++) {
        int status;
        for (;;) {
            pid_t r = wait4(pids[p], &status, WNOHANG, &ru);
            if (r == pids[p]) {
                child_cpu += (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                             ru.ru_stime.tv_usec / 1e6;
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) sh->errors++;
                break;
            }
            if (now_ns() > kill_at) {
                fprintf(stderr, "dlock-bench: ping-pong worker %d did not stop; killing it\n", (int)pids[p]);
                kill(pids[p], SIGKILL);
            }
            sleep_ms(5);
        }
    }
    counters_get(&c1);
    s1 = server_requests(rc, DLOCK_CMDS, &tot1);
    cpu1 = server_cpu(rc);

    n = sh->counter < cap ? sh->counter : cap;
    /* Mutual exclusion: every increment kept, every slot written once and
     * completely, fences strictly increasing in the counter's order. */
    for (i = 0; i < n; i++) {
        if (!sh->x[i].set) unset++;
        if (i > 0 && sh->x[i].fence <= sh->x[i - 1].fence) fence_bad++;
        series_add(&lockw, sh->ev[i].t_acq - sh->ev[i].t_call);
        series_add(&unl, sh->x[i].unlock_ns);
    }
    note("%s: %s mutex, %s, 2 processes, %.1f s, %ld acquisitions (%ld + %ld)%s", label, caching ? "caching" : "plain",
         alternate ? "strict alternation" : "free (both contending)", seconds, sh->counter, sh->acquired[0],
         sh->acquired[1], sh->errors ? " (ERRORS)" : "");
    memset(&st, 0, sizeof st);
    analyze_events(&oo, sh->ev, (size_t)n, rt_us, handoff_out, &st);
    if (sh->counter > 0) {
        result(&oo, "acquisitions", (double)sh->counter, "acq");
        result(&oo, "server_reqs_per_acq", (double)(s1 - s0) / (double)sh->counter, "req/acq");
        result(&oo, "server_cmds_incl_script_per_acq", (double)(tot1 - tot0 - 6) / (double)sh->counter, "cmd/acq");
        result(&oo, "client_cmds_per_acq", (double)(c1.cmds - c0.cmds) / (double)sh->counter, "cmd/acq");
        result(&oo, "server_cpu_us_per_acq", (cpu1 - cpu0) * 1e6 / (double)sh->counter, "us/acq");
        result(&oo, "client_cpu_us_per_acq", child_cpu * 1e6 / (double)sh->counter, "us/acq");
    }
    result(&oo, "lock_p50_us", (double)series_pct(&lockw, 50) / 1e3, "us");
    result(&oo, "lock_p99_us", (double)series_pct(&lockw, 99) / 1e3, "us");
    result(&oo, "unlock_call_p50_us", (double)series_pct(&unl, 50) / 1e3, "us");
    result(&oo, "unlock_call_p99_us", (double)series_pct(&unl, 99) / 1e3, "us");
    result(&oo, "counter_mismatch", (double)labs(sh->counter - (sh->acquired[0] + sh->acquired[1])) + (double)unset, "");
    result(&oo, "fence_violations", (double)fence_bad, "");
    result(&oo, "exclusion_violations", (double)sh->violations, "");
    result(&oo, "errors", (double)sh->errors, "");
    bad = sh->errors || sh->violations || fence_bad || unset || st.violations ||
          sh->counter != sh->acquired[0] + sh->acquired[1];
    if (bad) note("%s: MUTUAL EXCLUSION OR WORKER FAILURE (see the rows above)", label);
    series_free(&lockw);
    series_free(&unl);
    munmap(sh->ev, (size_t)cap * sizeof *sh->ev);
    munmap(sh->x, (size_t)cap * sizeof *sh->x);
    munmap(sh, sizeof *sh);
    redisFree(rc);
    return bad;
}

int cmd_cache(const bopts *o) {
    bopts oo = *o;
    double rt_us = o->rt_us, secs = o->seconds > 0 ? o->seconds : (o->smoke ? 0.3 : 3.0);
    int rc = 0, alt;
    char label[64], hf[512];

    oo.label = NULL;
    if (rt_us <= 0) { /* no --rt-us: a PING burst now */
        redisContext *c = bconnect(o);
        series ps = { 0 };
        rt_us = (double)bench_ping(o, c, 300, 0.5, &ps) / 1e3;
        series_free(&ps);
        redisFree(c);
    }
    result(&oo, "cache.rt_us", rt_us, "us");
    uncontended(o, &oo, rt_us);

    /* No dlock client is left in this process: the workers are forked. */
    for (alt = 1; alt >= 0; alt--) {
        int caching;
        if (!alt && o->smoke) {
            rc |= pingpong(o, "cache.pp_free_caching", 1, 0, secs, rt_us, NULL);
            break;
        }
        for (caching = 1; caching >= 0; caching--) {
            snprintf(label, sizeof label, "cache.pp_%s_%s", alt ? "alt" : "free", caching ? "caching" : "plain");
            /* Handoff samples of the alternation runs only: free contention
             * with caching releases a million times a run. */
            if (o->events != NULL && alt)
                snprintf(hf, sizeof hf, "%s-alt-%s.log.handoff", o->events, caching ? "caching" : "plain");
            rc |= pingpong(o, label, caching, alt, secs, rt_us, o->events != NULL && alt ? hf : NULL);
        }
    }
    return rc;
}
