/* redlock.c -- a Redlock deployment beside the single server, in one run.
 *
 *   dlock-bench redlock --port P --masters P1,P2,P3 [--seconds S] [--smoke]
 *
 * (a) the uncontended lock+unlock pair, one thread, free lock: on the
 *     single server (--port) and on redlock:// over the masters, in
 *     interleaved rounds (order turning each round); the median per-pair
 *     time of each and their ratio;
 * (b) contention: 4 processes, one lock, 1 ms hold, S seconds, on each
 *     deployment: acquisitions/s, the longest wait, and mutual exclusion
 *     (a holder count in shared memory: a second holder fails the run).
 * Traffic goes only to 127.0.0.1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define NPROC 4

static dlock_client_t *client_at(const char *url) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    int rc;
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = "bench:";
    if ((rc = dlock_client_create(&c, &cfg)) != 0)
        die("dlock_client_create(%s): %s (%s)", url, dlock_strerror(rc), dlock_last_error());
    return c;
}

/* One batch of n pairs on m: ns per pair. */
static double pairs(dlock_mutex_t *m, long n) {
    int64_t t0 = now_ns();
    long i;
    for (i = 0; i < n; i++) {
        if (dlock_mutex_lock(m) != 0 || dlock_mutex_unlock(m) != 0) die("pair: %s", dlock_last_error());
    }
    return (double)(now_ns() - t0) / (double)n;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void uncontended(const bopts *o, const char *single, const char *rl) {
    dlock_client_t *c[2] = { client_at(single), client_at(rl) };
    dlock_mutex_t m[2];
    double ns[2][15];
    int rounds = o->smoke ? 3 : 15, r, k;
    long n = o->smoke ? 200 : 2000;
    for (k = 0; k < 2; k++) {
        bmutex_init(&m[k], c[k], "rl-pair", DLOCK_MUTEX_NORMAL, 10000, 0);
        (void)pairs(&m[k], 50); /* connections made */
    }
    for (r = 0; r < rounds; r++)
        for (k = 0; k < 2; k++) {
            int kk = (k + r) % 2;
            ns[kk][r] = pairs(&m[kk], n);
        }
    for (k = 0; k < 2; k++) qsort(ns[k], (size_t)rounds, sizeof ns[k][0], cmp_d);
    result(o, "redlock.single_pair_us", ns[0][rounds / 2] / 1000, "us");
    result(o, "redlock.pair_us", ns[1][rounds / 2] / 1000, "us");
    result(o, "redlock.pair_vs_single", ns[1][rounds / 2] / ns[0][rounds / 2], "x");
    for (k = 0; k < 2; k++) {
        dlock_mutex_destroy(&m[k]);
        dlock_client_destroy(c[k]);
    }
}

struct cshared {
    int in, twice, acq;
    int64_t max_wait_ns;
};

static int contend_child(const char *url, struct cshared *s, double seconds) {
    dlock_client_t *c = client_at(url);
    dlock_mutex_t m;
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    bmutex_init(&m, c, "rl-contend", DLOCK_MUTEX_NORMAL, 10000, 0);
    while (now_ns() < end) {
        int64_t t0 = now_ns(), w;
        if (dlock_mutex_lock(&m) != 0) return 2;
        w = now_ns() - t0;
        if (__atomic_add_fetch(&s->in, 1, __ATOMIC_SEQ_CST) != 1) __atomic_add_fetch(&s->twice, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&s->acq, 1, __ATOMIC_SEQ_CST);
        if (w > __atomic_load_n(&s->max_wait_ns, __ATOMIC_RELAXED)) __atomic_store_n(&s->max_wait_ns, w, __ATOMIC_RELAXED);
        hold_until(now_ns() + 1000000);
        __atomic_sub_fetch(&s->in, 1, __ATOMIC_SEQ_CST);
        if (dlock_mutex_unlock(&m) != 0) return 3;
    }
    dlock_mutex_destroy(&m);
    dlock_client_destroy(c);
    return 0;
}

/* 4 processes on url for the run's seconds: 0, or -1 when a second
 * holder was seen or a worker failed. */
static int contended(const bopts *o, const char *url, const char *key) {
    struct cshared *s = shared_alloc(sizeof *s);
    double seconds = o->smoke ? 1.0 : o->seconds > 0 ? o->seconds : 5;
    pid_t pid[NPROC];
    int i, bad = 0;
    char k[96];
    memset(s, 0, sizeof *s);
    for (i = 0; i < NPROC; i++)
        if ((pid[i] = fork()) == 0) _exit(contend_child(url, s, seconds));
    for (i = 0; i < NPROC; i++) {
        int st = 0;
        if (pid[i] < 0 || waitpid(pid[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
    }
    snprintf(k, sizeof k, "redlock.%s_contend_acq_per_s", key);
    result(o, k, s->acq / seconds, "acq/s");
    snprintf(k, sizeof k, "redlock.%s_contend_max_wait_ms", key);
    result(o, k, (double)s->max_wait_ns / 1e6, "ms");
    snprintf(k, sizeof k, "redlock.%s_contend_two_holders", key);
    result(o, k, s->twice, "count");
    if (s->twice != 0) note("%s: a second holder was seen %d times", url, s->twice);
    return bad || s->twice != 0 ? -1 : 0;
}

int cmd_redlock(const bopts *o) {
    char single[64], rl[512];
    size_t len;
    const char *p = o->masters;
    if (p == NULL || *p == '\0') die("redlock: --masters P1,P2,P3 needed");
    snprintf(single, sizeof single, "redis://127.0.0.1:%d", o->port);
    len = (size_t)snprintf(rl, sizeof rl, "redlock://");
    while (*p != '\0' && len < sizeof rl) {
        const char *e = strchr(p, ',');
        size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
        len += (size_t)snprintf(rl + len, sizeof rl - len, "%s127.0.0.1:%.*s", len > 10 ? "," : "", (int)n, p);
        p += n + (e != NULL);
    }
    uncontended(o, single, rl);
    if (contended(o, single, "single") != 0 || contended(o, rl, "rl") != 0) return 1;
    return 0;
}
