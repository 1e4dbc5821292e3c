/* contend.c -- contention: P processes x T threads on one lock.
 *
 * Every worker loops: lock, hold for exactly `hold` (sleeping, then
 * spinning the last 150 µs), note the time, unlock.  Each
 * acquisition is one event {worker, lock called, lock returned, unlock
 * issued} in shared memory; the parent analyses the log afterwards (see
 * analyze.c): acquisitions/s against the ideal 1/(hold + 2 RT), handoff
 * latency (unlock issued -> lock returned in another worker), waits,
 * fairness, and the requests the server saw per acquisition (INFO
 * commandstats) and the client sent (hiredis calls counted at link time).
 *
 * Implementations: "dlock" (dlock_mutex_lock/unlock, one mutex object per
 * process shared by its threads, like a pthread mutex; with --fair a fair
 * (FIFO) mutex, dlock_mutexattr_setfair, on a lock of its own name), and "poll", the
 * naive loop people write by hand: SET NX PX, on failure sleep 1 ms and
 * try again; release by EVALSHA compare-and-delete.
 *
 * Workers run in forked children (the parent only measures), start
 * together at a shared instant and stop calling lock at a shared
 * deadline; a child that is still alive 20 s past it is killed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

typedef struct shared {
    int64_t start_at, stop_at;
    long cap;
    long next;         /* events written (atomic) */
    long inside;       /* holders right now (atomic): must never exceed 1 */
    long violations;   /* times it did */
    long errors;
    bevent ev[];
} shared;

typedef struct wctx {
    const bopts *o;
    shared *sh;
    int id;
    int impl_poll;
    dlock_mutex_t *m;
    const char *sha;
} wctx;

static void record(shared *sh, int id, int64_t t_call, int64_t t_acq, int64_t t_rel) {
    long i = __atomic_fetch_add(&sh->next, 1, __ATOMIC_RELAXED);
    if (i >= sh->cap) return;
    sh->ev[i].worker = id;
    sh->ev[i].t_call = t_call;
    sh->ev[i].t_acq = t_acq;
    sh->ev[i].t_rel = t_rel;
}

static void enter(shared *sh) {
    if (__atomic_add_fetch(&sh->inside, 1, __ATOMIC_ACQ_REL) != 1) __atomic_fetch_add(&sh->violations, 1, __ATOMIC_RELAXED);
}

static void leave(shared *sh) {
    __atomic_sub_fetch(&sh->inside, 1, __ATOMIC_ACQ_REL);
}

static void *worker(void *arg) {
    wctx *w = arg;
    shared *sh = w->sh;
    int64_t hold = (int64_t)(w->o->hold_ms * 1e6);
    redisContext *rc = NULL;
    char token[40];

    if (w->impl_poll) {
        rc = bconnect(w->o);
        snprintf(token, sizeof token, "%016lx%08x%08x", (unsigned long)getpid(), (unsigned)w->id, (unsigned)rand());
    }
    while (now_ns() < sh->start_at) sleep_ms(0.2);
    while (now_ns() < sh->stop_at && __atomic_load_n(&sh->next, __ATOMIC_RELAXED) < sh->cap) {
        int64_t t_call = now_ns(), t_acq, t_rel;
        if (w->impl_poll) {
            for (;;) {
                redisReply *r = bcmd(rc, "SET bench:poll %s NX PX 10000", token);
                int ok = r->type == REDIS_REPLY_STATUS;
                freeReplyObject(r);
                if (ok) break;
                sleep_ms(1.0);
            }
        } else {
            int rc2 = dlock_mutex_lock(w->m);
            if (rc2 != 0) {
                __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
                fprintf(stderr, "lock: %s (%s)\n", dlock_strerror(rc2), dlock_last_error());
                break;
            }
        }
        t_acq = now_ns();
        enter(sh);
        hold_until(t_acq + hold);
        leave(sh);
        t_rel = now_ns();
        record(sh, w->id, t_call, t_acq, t_rel);
        if (w->impl_poll) {
            redisReply *r = bcmd(rc, "EVALSHA %s 1 bench:poll %s", w->sha, token);
            if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
            freeReplyObject(r);
        } else {
            int rc2 = dlock_mutex_unlock(w->m);
            if (rc2 != 0) {
                __atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED);
                fprintf(stderr, "unlock: %s (%s)\n", dlock_strerror(rc2), dlock_last_error());
                break;
            }
        }
    }
    if (rc) redisFree(rc);
    return NULL;
}

/* One child process: T worker threads on one mutex object. */
static void child(const bopts *o, shared *sh, int proc, int threads, int impl_poll, const char *sha) {
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    wctx *w = calloc((size_t)threads, sizeof *w);
    int t;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    srand((unsigned)getpid());
    if (!impl_poll) {
        cl = bclient(o);
        /* The fair mode on a name of its own: a lock's name is either fair
         * or not, never both in one run. */
        bmutex_init(&m, cl, o->caching ? "contend-caching" : o->fair ? "contend-fair" : "contend", DLOCK_MUTEX_DEFAULT, 0,
                    (o->fair ? BMUTEX_FAIR : 0) | (o->caching ? BMUTEX_CACHING : 0));
    }
    for (t = 0; t < threads; t++) {
        w[t].o = o;
        w[t].sh = sh;
        w[t].id = proc * 1000 + t;
        w[t].impl_poll = impl_poll;
        w[t].m = &m;
        w[t].sha = sha;
        if (pthread_create(&th[t], NULL, worker, &w[t]) != 0) die("pthread_create");
    }
    for (t = 0; t < threads; t++) pthread_join(th[t], NULL);
    if (!impl_poll) {
        dlock_mutex_destroy(&m);
        dlock_client_destroy(cl);
    }
    free(th);
    free(w);
    fflush(NULL);
    _exit(0);
}

/* Runs one contention configuration and analyses it. */
int run_contend(const bopts *o, const char *impl, int procs, int threads, double seconds,
                const char *label, const char *events_out, const char *handoff_out, cstats *st) {
    redisContext *rc = bconnect(o);
    int impl_poll = strcmp(impl, "poll") == 0;
    const char *sha = impl_poll ? raw_release_sha(rc) : NULL;
    const char *reqcmds = impl_poll ? "set,evalsha" : DLOCK_CMDS;
    long cap = o->count > 0 ? o->count : 400000, s0, s1, tot0, tot1, n, p;
    shared *sh = shared_alloc(sizeof *sh + (size_t)cap * sizeof(bevent));
    pid_t *pids = calloc((size_t)procs, sizeof *pids);
    bcounters c0, c1;
    double cpu0, cpu1, ping;
    struct rusage ru;
    double child_cpu = 0;
    series ps = { 0 };
    bopts oo = *o;
    int64_t kill_at;
    snap sa, sb, sd;

    oo.label = label;
    if (impl_poll && o->fair) die("--fair is for --impl dlock");
    /* The round trip: the one measured by `seq` in the same run when
     * given (--rt-us), else a PING burst now. */
    ping = (double)bench_ping(o, rc, 300, 0.5, &ps) / 1e3;
    series_free(&ps);
    result(&oo, "ping_local_p50_us", ping, "us");
    if (o->rt_us > 0) ping = o->rt_us;
    sh->cap = cap;
    counters_get(&c0);
    s0 = server_requests(rc, reqcmds, &tot0);
    cpu0 = server_cpu(rc);
    server_snap(rc, reqcmds, &sa);
    sh->start_at = now_ns() + (int64_t)400e6; /* children connect meanwhile */
    sh->stop_at = sh->start_at + (int64_t)(seconds * 1e9);
    fflush(NULL);
    for (p = 0; p < procs; p++) {
        pid_t pid = fork();
        if (pid < 0) die("fork: %s", strerror(errno));
        if (pid == 0) child(o, sh, (int)p, threads, impl_poll, sha);
        pids[p] = pid;
    }
    kill_at = sh->stop_at + (int64_t)20e9;
    if (o->before != NULL) { /* at the start, the workers connected (callgrind: zero the counters) */
        while (now_ns() < sh->start_at) sleep_ms(1);
        if (system(o->before) != 0) fprintf(stderr, "dlock-bench: %s failed\n", o->before);
    }
    for (p = 0; p < procs; p++) {
        int status;
        for (;;) {
            pid_t r = wait4(pids[p], &status, WNOHANG, &ru);
            if (r == pids[p]) {
                child_cpu += (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                             (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) sh->errors++;
                break;
            }
            if (now_ns() > kill_at) {
                fprintf(stderr, "dlock-bench: worker %d did not stop; killing it\n", (int)pids[p]);
                kill(pids[p], SIGKILL);
            }
            sleep_ms(5);
        }
    }
    if (o->after != NULL && system(o->after) != 0) fprintf(stderr, "dlock-bench: %s failed\n", o->after);
    counters_get(&c1);
    server_snap(rc, reqcmds, &sb);
    s1 = server_requests(rc, reqcmds, &tot1);
    cpu1 = server_cpu(rc);
    n = sh->next < sh->cap ? sh->next : sh->cap;

    note("%s: %s%s, %d process(es) x %d thread(s), hold %.2f ms, %.1f s, %ld acquisitions%s", label, impl,
         o->fair ? " (fair)" : "", procs,
         threads, o->hold_ms, seconds, n, sh->errors ? " (ERRORS)" : "");
    if (events_out != NULL) {
        FILE *f = fopen(events_out, "w");
        long i;
        if (f == NULL) die("%s: %s", events_out, strerror(errno));
        fprintf(f, "# worker t_call_ns t_acq_ns t_rel_ns\n");
        for (i = 0; i < n; i++)
            fprintf(f, "%d %lld %lld %lld\n", sh->ev[i].worker, (long long)sh->ev[i].t_call,
                    (long long)sh->ev[i].t_acq, (long long)sh->ev[i].t_rel);
        fclose(f);
    }
    memset(st, 0, sizeof *st);
    st->rt_us = ping;
    analyze_events(&oo, sh->ev, (size_t)n, ping, handoff_out, st);
    if (n > 0) {
        result(&oo, "server_reqs_per_acq", (double)(s1 - s0) / (double)n, "req/acq");
        result(&oo, "server_cmds_incl_script_per_acq", (double)(tot1 - tot0 - 8) / (double)n, "cmd/acq");
        if (!impl_poll) {
            result(&oo, "client_cmds_per_acq", (double)(c1.cmds - c0.cmds) / (double)n, "cmd/acq");
            result(&oo, "client_rts_per_acq", (double)(c1.rts - c0.rts) / (double)n, "RT/acq");
        }
        result(&oo, "server_cpu_us_per_acq", (cpu1 - cpu0) * 1e6 / (double)n, "us/acq");
        /* The server's own time (commandstats usec of the
         * top-level commands) and bytes per acquisition, and per handoff
         * (an acquisition by another worker than the one before it). */
        snap_delta(&sa, &sb, NULL, &sd);
        result(&oo, "server_usec_per_acq", (double)sd.usec / (double)n, "us/acq");
        result(&oo, "bytes_in_per_acq", (double)sd.net_in / (double)n, "B/acq");
        if (!impl_poll) result(&oo, "client_sends_per_acq", (double)(c1.sends - c0.sends) / (double)n, "RT/acq");
        if (st->handoffs_all > 0) {
            result(&oo, "handoffs_all", (double)st->handoffs_all, "");
            result(&oo, "server_usec_per_handoff", (double)sd.usec / (double)st->handoffs_all, "us/handoff");
            result(&oo, "server_calls_per_handoff", (double)sd.calls / (double)st->handoffs_all, "req/handoff");
            result(&oo, "server_cmds_incl_script_per_handoff", (double)sd.all_calls / (double)st->handoffs_all, "cmd/handoff");
        }
        result(&oo, "client_cpu_us_per_acq", child_cpu * 1e6 / (double)n, "us/acq");
        st->reqs_per_acq = (double)(s1 - s0) / (double)n;
        st->client_cmds_per_acq = (double)(c1.cmds - c0.cmds) / (double)n;
    }
    result(&oo, "exclusion_violations", (double)sh->violations, "");
    result(&oo, "errors", (double)sh->errors, "");
    st->violations += sh->violations;
    st->errors += sh->errors;
    munmap(sh, sizeof *sh + (size_t)cap * sizeof(bevent));
    free(pids);
    redisFree(rc);
    return (st->errors || st->violations) ? 1 : 0;
}

int cmd_contend(const bopts *o) {
    cstats st;
    double secs = o->seconds > 0 ? o->seconds : (o->smoke ? 1.0 : 5.0);
    char hf[512], *handoff = NULL;
    if (o->events != NULL) {
        snprintf(hf, sizeof hf, "%s.handoff", o->events);
        handoff = hf;
    }
    return run_contend(o, o->impl ? o->impl : "dlock", o->procs > 0 ? o->procs : 4, o->threads > 0 ? o->threads : 1,
                       secs, o->label ? o->label : "contend", o->events, handoff, &st);
}

/* Throughput and requests as the number of waiters grows: W waiters in
 * min(W, 4) processes.  Labels waiters.W, or waiters_fair.W with --fair. */
int cmd_waiters(const bopts *o) {
    char list[256], *save = NULL, *tok;
    double secs = o->seconds > 0 ? o->seconds : (o->smoke ? 0.7 : 3.0);
    FILE *plot = NULL;
    int rc = 0;

    snprintf(list, sizeof list, "%s", o->waiters ? o->waiters : (o->smoke ? "1,4,16" : "1,2,4,8,16,32,64,100"));
    if (o->events != NULL) {
        plot = fopen(o->events, "w");
        if (plot == NULL) die("%s: %s", o->events, strerror(errno));
        fprintf(plot, "# %s: waiters procs threads acq_per_s ideal_per_s server_reqs_per_acq client_cmds_per_acq handoff_p50_us handoff_p99_us max_wait_ms max_overtaken\n",
                o->fair ? "fair" : "default");
    }
    for (tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        int w = atoi(tok), procs, threads;
        char label[64];
        cstats st;
        if (w <= 0) continue;
        procs = w < 4 ? w : 4;
        threads = (w + procs - 1) / procs;
        snprintf(label, sizeof label, "%s.%d", o->fair ? "waiters_fair" : "waiters", procs * threads);
        rc |= run_contend(o, "dlock", procs, threads, secs, label, NULL, NULL, &st);
        if (plot)
            fprintf(plot, "%d %d %d %.1f %.1f %.3f %.3f %.1f %.1f %.2f %ld\n", procs * threads, procs, threads, st.acq_per_s,
                    st.ideal_per_s, st.reqs_per_acq, st.client_cmds_per_acq, st.handoff_p50_us, st.handoff_p99_us,
                    st.max_wait_ms, st.max_overtaken);
    }
    if (plot) fclose(plot);
    return rc;
}
