/* lean.c -- how much one Redis core
 * carries, and the pairs the callgrind mode counts.
 *
 * carry: T threads (1, 4, 16, 64 by default), each on a lock name of its
 * own, loop lock+unlock for a fixed time: dlock's default mutex (the
 * threads share one dlock client, as the threads of one program do), and
 * the raw hiredis pair (SET key tok NX PX, then EVALSHA compare-and-delete;
 * each thread its own connection and key).  With enough threads the
 * server's one core is the bottleneck, and pairs/s is what it carries.  The
 * two kinds run alternately in rounds (order turning each round); each
 * rate is the median of its rounds, the ratio the median of the per-round
 * ratios.  Beside them: the server's own time per pair (INFO commandstats
 * usec of the top-level commands), its CPU share over the run (INFO cpu), and
 * connections it accepted per 1000 pairs (a pool that closes connections
 * under load shows there).
 *
 * pairs: N uncontended pairs of one kind on one thread, after a warm-up,
 * with a shell command run just before and just after them (bench/run
 * zeroes and dumps a callgrind-run server's counters there); kinds
 * "handoff" and "handoff-lean": N handoffs done by minimal scripts, the
 * same way (handoff.c).
 *
 * Every loop is bounded by a count and a time.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static void check(int rc, const char *what) {
    if (rc != 0) die("%s: %s (%s)", what, dlock_strerror(rc), dlock_last_error());
}

typedef struct cthr {
    int dlock;           /* 1: dlock's mutex, 0: the raw pair */
    redisContext *rc;    /* raw: this thread's connection */
    const char *sha;
    char key[64];
    dlock_mutex_t m;
    long pairs, errors;
    const int *go, *stop;
} cthr;

static void *carry_thread(void *arg) {
    cthr *t = arg;
    long cap = 100000000; /* a count bound besides the time bound */
    t->pairs = 0;
    while (!__atomic_load_n(t->go, __ATOMIC_ACQUIRE)) sleep_ms(0.1);
    while (!__atomic_load_n(t->stop, __ATOMIC_ACQUIRE) && t->pairs < cap) {
        if (t->dlock) {
            if (dlock_mutex_lock(&t->m) != 0 || dlock_mutex_unlock(&t->m) != 0) {
                t->errors++;
                break;
            }
        } else if (raw_pair(t->rc, t->key, TOKEN, t->sha) != 0) {
            t->errors++;
            break;
        }
        t->pairs++;
    }
    return NULL;
}

typedef struct crun {
    double rate, srv_us, cpu_share, conns_per_k, calls;
} crun;

/* One timed run of `n` threads of one kind. */
static void carry_run(redisContext *rc, const snap *ov, cthr *th, int n, double secs, crun *out) {
    const char *top = th[0].dlock ? DLOCK_PAIR_CMDS : RAW_CMDS;
    pthread_t *pt = calloc((size_t)n, sizeof *pt);
    int go = 0, stop = 0, i;
    long pairs = 0, errors = 0;
    int64_t t0, t1;
    snap a, b, d;

    for (i = 0; i < n; i++) {
        th[i].go = &go;
        th[i].stop = &stop;
        th[i].errors = 0;
        if (pthread_create(&pt[i], NULL, carry_thread, &th[i]) != 0) die("pthread_create");
    }
    sleep_ms(20);
    server_snap(rc, top, &a);
    t0 = now_ns();
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    sleep_ms(secs * 1e3);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (i = 0; i < n; i++) pthread_join(pt[i], NULL);
    t1 = now_ns();
    server_snap(rc, top, &b);
    snap_delta(&a, &b, ov, &d);
    for (i = 0; i < n; i++) {
        pairs += th[i].pairs;
        errors += th[i].errors;
    }
    if (errors) die("carry: %ld pair(s) failed", errors);
    out->rate = (double)pairs * 1e9 / (double)(t1 - t0);
    out->srv_us = pairs ? (double)d.usec / (double)pairs : 0;
    out->calls = pairs ? (double)d.calls / (double)pairs : 0;
    out->cpu_share = d.cpu * 1e9 / (double)(t1 - t0);
    out->conns_per_k = pairs ? (double)d.conns * 1000 / (double)pairs : 0;
    free(pt);
}

static double med(double *v, int n) {
    int i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return n ? v[n / 2] : 0;
}

/* All rounds at one thread count; results under carry.T.* */
static void carry_at(const bopts *o, redisContext *rc, const char *sha, const snap *ov, int n, int rounds, double secs) {
    dlock_client_t *cl = bclient(o);
    cthr *th[2];
    crun r[2][16];
    double v[16], ratio[16];
    int k, i, j;
    char key[96];
    bopts oo = *o;

    oo.label = NULL;
    for (k = 0; k < 2; k++) {
        th[k] = calloc((size_t)n, sizeof *th[k]);
        for (i = 0; i < n; i++) {
            cthr *t = &th[k][i];
            t->dlock = k;
            t->sha = sha;
            snprintf(t->key, sizeof t->key, "bench:carry-raw-%d", i);
            if (k) {
                char name[64];
                snprintf(name, sizeof name, "carry-%d", i);
                bmutex_init(&t->m, cl, name, DLOCK_MUTEX_DEFAULT, 0, 0);
            } else {
                t->rc = bconnect(o);
            }
        }
        carry_run(rc, ov, th[k], n, 0.1, &r[k][0]); /* warm-up: connections, scripts */
    }
    for (j = 0; j < rounds; j++) {
        for (i = 0; i < 2; i++) {
            k = (i + j) % 2; /* the order turns each round */
            carry_run(rc, ov, th[k], n, secs, &r[k][j]);
        }
        ratio[j] = r[0][j].rate > 0 ? r[1][j].rate / r[0][j].rate : 0;
        note("  %d threads, round %d: raw %.0f pairs/s (server %.0f%% CPU, %.1f us/pair), dlock %.0f pairs/s (server %.0f%% CPU, %.1f us/pair, %.2f conn/1000 pairs): %.2fx",
             n, j + 1, r[0][j].rate, r[0][j].cpu_share * 100, r[0][j].srv_us, r[1][j].rate, r[1][j].cpu_share * 100,
             r[1][j].srv_us, r[1][j].conns_per_k, ratio[j]);
    }
    for (k = 0; k < 2; k++) {
        const char *kn = k ? "dlock" : "raw";
#define CARRY_RESULT(field, name, unit)                                   \
        do {                                                              \
            for (j = 0; j < rounds; j++) v[j] = r[k][j].field;            \
            snprintf(key, sizeof key, "carry.%d.%s_%s", n, kn, name);     \
            result(&oo, key, med(v, rounds), unit);                       \
        } while (0)
        CARRY_RESULT(rate, "per_s", "pairs/s");
        CARRY_RESULT(srv_us, "server_us", "us/pair");
        CARRY_RESULT(calls, "server_calls", "req/pair");
        CARRY_RESULT(cpu_share, "server_cpu", "share");
        CARRY_RESULT(conns_per_k, "conns_per_1000", "conn");
#undef CARRY_RESULT
    }
    snprintf(key, sizeof key, "carry.%d.ratio", n);
    result(&oo, key, med(ratio, rounds), "x");
    for (k = 0; k < 2; k++) {
        for (i = 0; i < n; i++) {
            if (k) check(dlock_mutex_destroy(&th[k][i].m), "destroy");
            else redisFree(th[k][i].rc);
        }
        free(th[k]);
    }
    check(dlock_client_destroy(cl), "dlock_client_destroy");
}

int cmd_carry(const bopts *o) {
    redisContext *rc = bconnect(o);
    const char *sha = raw_release_sha(rc);
    char list[256], *save = NULL, *tok;
    int rounds = o->smoke ? 1 : 5;
    double secs = o->seconds > 0 ? o->seconds : (o->smoke ? 0.2 : 0.6);
    snap ov;

    snprintf(list, sizeof list, "%s", o->list ? o->list : (o->smoke ? "1,16" : "1,4,16,64"));
    snap_overhead(rc, &ov);
    note("carry: threads on names of their own, dlock (one client) against the raw pair, %d round(s) of %.1f s",
         rounds, secs);
    for (tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        int n = atoi(tok);
        if (n > 0 && n <= 1024) carry_at(o, rc, sha, &ov, n, rounds, secs);
    }
    redisFree(rc);
    return 0;
}

/* ----------------------------------------------------------------- pairs */

static void pairs_loop(int dl, long n, redisContext *rc, const char *sha, dlock_mutex_t *m) {
    long i;
    int64_t end = now_ns() + (int64_t)120e9;
    for (i = 0; i < n && now_ns() < end; i++) {
        if (dl) {
            check(dlock_mutex_lock(m), "lock");
            check(dlock_mutex_unlock(m), "unlock");
        } else if (raw_pair(rc, "bench:raw-cg", TOKEN, sha) != 0) {
            die("raw pair failed");
        }
    }
}

int cmd_pairs(const bopts *o) {
    redisContext *rc = bconnect(o);
    const char *sha = raw_release_sha(rc);
    int dl = o->kind != NULL && strcmp(o->kind, "dlock") == 0;
    long n = o->count > 0 ? o->count : 2000;
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    bcounters c0, c1;
    int64_t t0, t1;

    if (o->kind != NULL && strncmp(o->kind, "handoff", 7) == 0) {
        redisFree(rc);
        return handoff_pairs(o);
    }
    if (o->kind == NULL || (!dl && strcmp(o->kind, "raw") != 0)) die("pairs: --kind raw|dlock|handoff|handoff-lean");
    if (dl) {
        cl = bclient(o);
        bmutex_init(&m, cl, "cg", DLOCK_MUTEX_DEFAULT, 0, 0);
    }
    pairs_loop(dl, 50, rc, sha, &m); /* warm-up: connections, scripts */
    if (o->before != NULL && system(o->before) != 0) die("pairs: %s failed", o->before);
    counters_get(&c0);
    t0 = now_ns();
    pairs_loop(dl, n, rc, sha, &m);
    t1 = now_ns();
    counters_get(&c1);
    if (o->after != NULL && system(o->after) != 0) die("pairs: %s failed", o->after);
    printf("pairs %s %ld %.3f s, client sends %ld\n", o->kind, n, (double)(t1 - t0) / 1e9, c1.sends - c0.sends);
    if (dl) {
        check(dlock_mutex_destroy(&m), "destroy");
        check(dlock_client_destroy(cl), "dlock_client_destroy");
    }
    redisFree(rc);
    return 0;
}
