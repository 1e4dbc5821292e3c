/* sem.c -- the semaphore (dlock_sem_*) beside the mutex and the
 * floor, in one run.
 *
 * Uncontended: one thread, a semaphore of value 1 that nobody else uses.
 * The kinds -- PING, the raw hiredis pair (the floor `seq` prints: SET NX
 * PX, then EVALSHA compare-and-delete), the default mutex's lock+unlock,
 * the semaphore's wait+post and trywait+post -- run interleaved in rounds
 * (the order turning each round), as in seq.c; each rate is the median of
 * its per-round rates, each ratio the median of the per-round ratios to
 * the raw pair and to the mutex of the same round.  Beside them: round
 * trips dlock sent per pair (its send() calls), requests the server saw,
 * and the server's memory for the semaphore afterwards.
 *
 * Contended: P processes (4; --procs) x 1 thread, each looping wait, hold
 * exactly --hold-ms (1 ms), post, on one semaphore of value 1 -- a mutex
 * with no owner -- and then the default mutex in the same shape
 * (run_contend, as `contend` runs it).  Both logs go through the same
 * analysis (analyze.c): acquisitions/s against the ideal 1/(hold + 2 RT),
 * handoff latency (post issued -> wait returned in another process),
 * waits, requests per acquisition, and overlapping holds (which must be
 * none: value 1).  Labels sem.contend_sem and sem.contend_mutex.
 *
 * Every loop is bounded by a count and a time.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static void check(int rc, const char *what) {
    if (rc != 0) die("%s: %s (%s)", what, dlock_strerror(rc), dlock_last_error());
}

static void bsem_init(dlock_sem_t *s, dlock_client_t *c, const char *name, unsigned value) {
    dlock_semattr_t a;
    dlock_semattr_init(&a);
    dlock_semattr_setclient(&a, c);
    check(dlock_sem_init(s, name, value, &a), "dlock_sem_init");
    dlock_semattr_destroy(&a);
}

/* ---------------------------------------------------------- uncontended */

enum { K_PING, K_RAW, K_MUTEX, K_SEM, K_SEMTRY, K_N };
static const char *const kname[K_N] = { "ping", "raw_pair", "mutex_lock_unlock", "wait_post", "trywait_post" };

typedef struct kind {
    series lat;          /* one sample per pair (ns) */
    series rate;         /* per round (pairs/s x1000) */
    series vs_raw, vs_mutex; /* per round: rate / the raw pair's, / the mutex's (x1e6) */
    long ops, sends, reqs;
    double last_rate;
} kind;

typedef struct useq {
    redisContext *rc;
    const char *sha;
    dlock_mutex_t m;
    dlock_sem_t s;
} useq;

static void one_round(int k, long n, double seconds, kind *kd, useq *u) {
    int64_t end = now_ns() + (int64_t)(seconds * 1e9), t_start = now_ns();
    long i;
    for (i = 0; i < n && now_ns() < end; i++) {
        int64_t t0 = now_ns();
        redisReply *r;
        switch (k) {
        case K_PING:
            r = bcmd(u->rc, "PING");
            freeReplyObject(r);
            break;
        case K_RAW:
            if (raw_pair(u->rc, "bench:sem-raw", TOKEN, u->sha) != 0) die("raw pair failed");
            break;
        case K_MUTEX:
            check(dlock_mutex_lock(&u->m), "lock");
            check(dlock_mutex_unlock(&u->m), "unlock");
            break;
        case K_SEM:
            check(dlock_sem_wait(&u->s), "sem_wait");
            check(dlock_sem_post(&u->s), "sem_post");
            break;
        case K_SEMTRY:
            check(dlock_sem_trywait(&u->s), "sem_trywait");
            check(dlock_sem_post(&u->s), "sem_post");
            break;
        }
        series_add(&kd->lat, now_ns() - t0);
    }
    if (i > 0) kd->last_rate = series_add_rate(&kd->rate, i, t_start);
    kd->ops += i;
}

/* Prints the uncontended figures; returns the PING p50 (µs). */
static double uncontended_report(const bopts *o, kind *kd) {
    double ping_us = (double)series_pct(&kd[K_PING].lat, 50) / 1e3;
    char key[96];
    int k;
    result(o, "ping_p50_us", ping_us, "us");
    for (k = K_RAW; k < K_N; k++) {
        double ops = kd[k].ops > 0 ? (double)kd[k].ops : 1, p50 = (double)series_pct(&kd[k].lat, 50) / 1e3;
        snprintf(key, sizeof key, "%s_per_s", kname[k]);
        result(o, key, (double)series_pct(&kd[k].rate, 50) / 1e3, "pairs/s");
        snprintf(key, sizeof key, "%s_p50_us", kname[k]);
        result(o, key, p50, "us");
        snprintf(key, sizeof key, "%s_p99_us", kname[k]);
        result(o, key, (double)series_pct(&kd[k].lat, 99) / 1e3, "us");
        snprintf(key, sizeof key, "%s_rt", kname[k]);
        result(o, key, p50 / ping_us, "RT");
        snprintf(key, sizeof key, "%s_server_reqs", kname[k]);
        result(o, key, (double)kd[k].reqs / ops, "req/pair");
        if (k == K_RAW) continue;
        snprintf(key, sizeof key, "%s_client_sends", kname[k]);
        result(o, key, (double)kd[k].sends / ops, "RT/pair");
        snprintf(key, sizeof key, "%s_vs_raw", kname[k]);
        result(o, key, (double)series_pct(&kd[k].vs_raw, 50) / 1e6, "x");
        if (k == K_MUTEX) continue;
        snprintf(key, sizeof key, "%s_vs_mutex", kname[k]);
        result(o, key, (double)series_pct(&kd[k].vs_mutex, 50) / 1e6, "x");
    }
    return ping_us;
}

/* The server's memory for the semaphore `name` (MEMORY USAGE of its
 * keys: the value, the queue, the registrations, the grants and the
 * record of calls done, one entry per caller -- it no longer grows with
 * the calls). */
static long long sem_bytes(redisContext *rc, const char *name) {
    static const char *const suffix[] = { ":sem", ":semq", ":semx", ":semg", ":semd" };
    long long sum = 0;
    size_t i;
    for (i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        redisReply *r = bcmd(rc, "MEMORY USAGE bench:{%s}%s", name, suffix[i]);
        if (r->type == REDIS_REPLY_INTEGER) sum += r->integer;
        freeReplyObject(r);
    }
    return sum;
}

/* The uncontended kinds; returns the PING p50 (µs). */
static double uncontended(const bopts *o, redisContext *rc, dlock_client_t *cl) {
    useq u;
    kind kd[K_N];
    int rounds = o->smoke ? 2 : 15, r, j, k;
    double ping_us;
    long n = o->count > 0 ? o->count : (o->smoke ? 200 : 1500);
    double per = o->smoke ? 0.3 : 1.0;
    bopts oo = *o;

    memset(kd, 0, sizeof kd);
    oo.label = "sem";
    u.rc = rc;
    u.sha = raw_release_sha(rc);
    bmutex_init(&u.m, cl, "sem-mutex", DLOCK_MUTEX_DEFAULT, 0, 0);
    bsem_init(&u.s, cl, "sem-seq", 1);
    for (k = 0; k < K_N; k++) { /* warm-up: connections, scripts, threads */
        kind w;
        memset(&w, 0, sizeof w);
        one_round(k, 100, 1.0, &w, &u);
        series_free(&w.lat);
        series_free(&w.rate);
    }
    note("sem, uncontended: %d interleaved rounds of up to %ld pairs (%.1f s) per kind; semaphore of value 1", rounds,
         n, per);
    for (r = 0; r < rounds; r++) {
        for (j = 0; j < K_N; j++) {
            bcounters c0, c1;
            long s0, s1;
            k = (j + r) % K_N; /* the order turns every round */
            s0 = server_requests(rc, k <= K_RAW ? "ping,set,evalsha" : DLOCK_CMDS, NULL);
            counters_get(&c0);
            one_round(k, n, per, &kd[k], &u);
            counters_get(&c1);
            s1 = server_requests(rc, k <= K_RAW ? "ping,set,evalsha" : DLOCK_CMDS, NULL);
            kd[k].sends += c1.sends - c0.sends;
            kd[k].reqs += s1 - s0;
        }
        for (k = K_MUTEX; k < K_N; k++) {
            if (kd[K_RAW].last_rate > 0) series_add(&kd[k].vs_raw, (int64_t)(kd[k].last_rate / kd[K_RAW].last_rate * 1e6));
            if (kd[K_MUTEX].last_rate > 0)
                series_add(&kd[k].vs_mutex, (int64_t)(kd[k].last_rate / kd[K_MUTEX].last_rate * 1e6));
        }
    }
    ping_us = uncontended_report(&oo, kd);
    result(&oo, "server_bytes_after", (double)sem_bytes(rc, "sem-seq"), "B");
    result(&oo, "server_bytes_per_pair", (double)sem_bytes(rc, "sem-seq") / (double)(kd[K_SEM].ops + kd[K_SEMTRY].ops + 1),
           "B/pair");
    for (k = 0; k < K_N; k++) {
        series_free(&kd[k].lat);
        series_free(&kd[k].rate);
        series_free(&kd[k].vs_raw);
        series_free(&kd[k].vs_mutex);
    }
    check(dlock_sem_destroy(&u.s), "dlock_sem_destroy");
    check(dlock_mutex_destroy(&u.m), "dlock_mutex_destroy");
    return ping_us;
}

/* ------------------------------------------------------------ contended */

typedef struct cshared {
    int64_t start_at, stop_at;
    long cap, next, inside, violations, errors;
    bevent ev[];
} cshared;

/* One worker process: wait, hold exactly `hold`, post, until stop_at. */
static void sem_worker(const bopts *o, cshared *sh, int id) {
    dlock_client_t *cl;
    dlock_sem_t s;
    int64_t hold = (int64_t)(o->hold_ms * 1e6);
    int rc;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    cl = bclient(o);
    bsem_init(&s, cl, "sem-contend", 1);
    while (now_ns() < sh->start_at) sleep_ms(0.2);
    while (now_ns() < sh->stop_at && __atomic_load_n(&sh->next, __ATOMIC_RELAXED) < sh->cap) {
        int64_t t_call = now_ns(), t_acq, t_rel;
        long i;
        if ((rc = dlock_sem_wait(&s)) != 0) {
            fprintf(stderr, "sem_wait: %s (%s)\n", dlock_strerror(rc), dlock_last_error());
            __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
            break;
        }
        t_acq = now_ns();
        if (__atomic_add_fetch(&sh->inside, 1, __ATOMIC_ACQ_REL) != 1)
            __atomic_fetch_add(&sh->violations, 1, __ATOMIC_RELAXED);
        hold_until(t_acq + hold);
        __atomic_sub_fetch(&sh->inside, 1, __ATOMIC_ACQ_REL);
        t_rel = now_ns();
        if ((i = __atomic_fetch_add(&sh->next, 1, __ATOMIC_RELAXED)) < sh->cap)
            sh->ev[i] = (bevent){ .worker = id, .t_call = t_call, .t_acq = t_acq, .t_rel = t_rel };
        if ((rc = dlock_sem_post(&s)) != 0) {
            fprintf(stderr, "sem_post: %s (%s)\n", dlock_strerror(rc), dlock_last_error());
            __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    dlock_sem_destroy(&s);
    dlock_client_destroy(cl);
    fflush(NULL);
    _exit(0);
}

/* Forks the workers, waits for them (killing any still alive 20 s past
 * the end), analyses the log.  0, or 1 on errors or overlapping holds. */
static int sem_contend(const bopts *o, redisContext *rc, int procs, double seconds) {
    long cap = o->count > 0 ? o->count : 400000, s0, s1, n;
    cshared *sh = shared_alloc(sizeof *sh + (size_t)cap * sizeof(bevent));
    pid_t *pids = calloc((size_t)procs, sizeof *pids);
    bcounters c0, c1;
    bopts oo = *o;
    cstats st;
    int p, bad;

    oo.label = "sem.contend_sem";
    sh->cap = cap;
    counters_get(&c0);
    s0 = server_requests(rc, DLOCK_CMDS, NULL);
    sh->start_at = now_ns() + (int64_t)400e6; /* the workers connect meanwhile */
    sh->stop_at = sh->start_at + (int64_t)(seconds * 1e9);
    fflush(NULL);
    for (p = 0; p < procs; p++) {
        if ((pids[p] = fork()) < 0) die("fork: %s", strerror(errno));
        if (pids[p] == 0) sem_worker(o, sh, p * 1000);
    }
    for (p = 0; p < procs; p++) {
        int status;
        while (waitpid(pids[p], &status, WNOHANG) != pids[p]) {
            if (now_ns() > sh->stop_at + (int64_t)20e9) {
                fprintf(stderr, "dlock-bench: worker %d did not stop; killing it\n", (int)pids[p]);
                kill(pids[p], SIGKILL);
            }
            sleep_ms(5);
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) sh->errors++;
    }
    counters_get(&c1);
    s1 = server_requests(rc, DLOCK_CMDS, NULL);
    n = sh->next < sh->cap ? sh->next : sh->cap;
    note("sem.contend_sem: semaphore of value 1, %d process(es) x 1 thread, hold %.2f ms, %.1f s, %ld acquisitions%s",
         procs, o->hold_ms, seconds, n, sh->errors ? " (ERRORS)" : "");
    memset(&st, 0, sizeof st);
    analyze_events(&oo, sh->ev, (size_t)n, o->rt_us, NULL, &st);
    if (n > 0) {
        result(&oo, "server_reqs_per_acq", (double)(s1 - s0) / (double)n, "req/acq");
        result(&oo, "client_sends_per_acq", (double)(c1.sends - c0.sends) / (double)n, "RT/acq");
    }
    result(&oo, "exclusion_violations", (double)sh->violations, "");
    result(&oo, "errors", (double)sh->errors, "");
    bad = sh->errors || sh->violations || st.violations;
    munmap(sh, sizeof *sh + (size_t)cap * sizeof(bevent));
    free(pids);
    return bad ? 1 : 0;
}

int cmd_sem(const bopts *o) {
    redisContext *rc = bconnect(o);
    dlock_client_t *cl = bclient(o);
    int procs = o->procs > 0 ? o->procs : 4, bad = 0;
    double secs = o->seconds > 0 ? o->seconds : (o->smoke ? 0.5 : 5.0), ping_us;
    bopts oo = *o;
    cstats st;

    ping_us = uncontended(o, rc, cl);
    check(dlock_client_destroy(cl), "dlock_client_destroy");
    /* Both contention runs are measured against one round trip: the one
     * `seq` measured in the same run (--rt-us), else the PING p50 of the
     * uncontended rounds above. */
    if (oo.rt_us <= 0) oo.rt_us = ping_us;
    bad |= sem_contend(&oo, rc, procs, secs);
    bad |= run_contend(&oo, "dlock", procs, 1, secs, "sem.contend_mutex", NULL, NULL, &st);
    redisFree(rc);
    return bad;
}
