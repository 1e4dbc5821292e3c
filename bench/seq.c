/* seq.c -- the floor and the uncontended paths, measured in one run.
 *
 * Floor: the PING round trip, and the pair a careful user of raw hiredis
 * writes by hand: SET key token NX PX lease, then EVALSHA of the usual
 * compare-and-delete script.  Then dlock's lock+unlock, trylock+unlock and
 * timedlock+unlock pairs on a free lock, and the recursive relock+unlock
 * by the holder.  The kinds run interleaved, in rounds (their order turning
 * each round), so that noise from the rest of the machine hits all of them
 * alike; each rate is the median of its per-round rates, and each ratio
 * the median of the per-round ratios to the raw pair of the same round.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static const char raw_release_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

void script_load(redisContext *c, const char *body, char *sha, size_t size) {
    redisReply *r = bcmd(c, "SCRIPT LOAD %s", body);
    if (r->type != REDIS_REPLY_STRING) die("SCRIPT LOAD failed");
    snprintf(sha, size, "%s", r->str);
    freeReplyObject(r);
}

const char *raw_release_sha(redisContext *c) {
    static char sha[64];
    script_load(c, raw_release_lua, sha, sizeof sha);
    return sha;
}

int raw_pair(redisContext *c, const char *key, const char *token, const char *sha) {
    redisReply *r = bcmd(c, "SET %s %s NX PX 10000", key, token);
    int ok = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!ok) return -1;
    r = bcmd(c, "EVALSHA %s 1 %s %s", sha, key, token);
    ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return ok ? 0 : -1;
}

int64_t bench_ping(const bopts *o, redisContext *c, long n, double seconds, series *out) {
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    long i;
    (void)o;
    for (i = 0; i < n && now_ns() < end; i++) {
        int64_t t0 = now_ns();
        redisReply *r = bcmd(c, "PING");
        series_add(out, now_ns() - t0);
        freeReplyObject(r);
    }
    return series_pct(out, 50);
}

enum { K_PING, K_RAW, K_LOCK, K_TRY, K_TIMED, K_N };
static const char *const kname[K_N] = { "ping", "raw_pair", "lock_unlock", "trylock_unlock", "timedlock_unlock" };

typedef struct kind {
    series lat;     /* one sample per op (ns) */
    series rate;    /* one sample per round (ops/s, x1000 for precision) */
    series ratio;   /* per round: this kind's rate / the raw pair's rate in the same round (x1e6) */
    long cmds, rts, reqs, ops, usec;
    long sends, sent_bytes;  /* dlock's send() calls (round trips) and bytes, counted at the client */
    snap srv;                /* the server's counters over this kind's batches, readings' own taken off */
    double last_rate;
} kind;

static void check(int rc, const char *what) {
    if (rc != 0) die("%s: %s (%s)", what, dlock_strerror(rc), dlock_last_error());
}

static void one_round(int k, long n, double seconds, kind *kd, redisContext *rc, const char *sha,
                      dlock_mutex_t *m, const char *rawkey) {
    int64_t end = now_ns() + (int64_t)(seconds * 1e9), t_start = now_ns();
    struct timespec abst;
    long i;

    for (i = 0; i < n && now_ns() < end; i++) {
        int64_t t0 = now_ns();
        redisReply *r;
        switch (k) {
        case K_PING:
            r = bcmd(rc, "PING");
            freeReplyObject(r);
            break;
        case K_RAW:
            if (raw_pair(rc, rawkey, "0123456789abcdef0123456789abcdef", sha) != 0) die("raw pair failed");
            break;
        case K_LOCK:
            check(dlock_mutex_lock(m), "lock");
            check(dlock_mutex_unlock(m), "unlock");
            break;
        case K_TRY:
            check(dlock_mutex_trylock(m), "trylock");
            check(dlock_mutex_unlock(m), "unlock");
            break;
        case K_TIMED:
            clock_gettime(CLOCK_REALTIME, &abst);
            abst.tv_sec += 5;
            check(dlock_mutex_timedlock(m, &abst), "timedlock");
            check(dlock_mutex_unlock(m), "unlock");
            break;
        }
        series_add(&kd->lat, now_ns() - t0);
    }
    if (i > 0) kd->last_rate = series_add_rate(&kd->rate, i, t_start);
    kd->ops += i;
}

int cmd_seq(const bopts *o) {
    redisContext *rc = bconnect(o);
    const char *sha = raw_release_sha(rc);
    dlock_client_t *cl = bclient(o);
    dlock_mutex_t m, rm;
    kind kd[K_N];
    int rounds = o->smoke ? 2 : 15, r, k, j;
    long n = o->count > 0 ? o->count : (o->smoke ? 300 : 1500);
    double per = o->seconds > 0 ? o->seconds : (o->smoke ? 0.5 : 1.0); /* bound of one kind's round */
    bopts oo = *o;
    double ping_us, raw_rate;
    snap ov;

    memset(kd, 0, sizeof kd);
    oo.label = NULL;
    bmutex_init(&m, cl, "seq", DLOCK_MUTEX_DEFAULT, 0, 0);
    bmutex_init(&rm, cl, "seq-rec", DLOCK_MUTEX_RECURSIVE, 0, 0);

    /* Warm-up: connections, scripts, threads. */
    for (k = 0; k < K_N; k++) {
        kind w;
        memset(&w, 0, sizeof w);
        one_round(k, 100, 1.0, &w, rc, sha, &m, "bench:raw");
        series_free(&w.lat);
        series_free(&w.rate);
    }

    snap_overhead(rc, &ov);
    note("uncontended: %d interleaved rounds of up to %ld ops (%.1f s) per kind", rounds, n, per);
    for (r = 0; r < rounds; r++) {
        for (j = 0; j < K_N; j++) {
            /* The order turns every round, so no kind always runs first. */
            k = (j + r) % K_N;
            bcounters c0, c1;
            const char *cmds = k == K_PING || k == K_RAW ? "ping,set,evalsha" : DLOCK_PAIR_CMDS;
            snap a, b, d;
            long u0, u1, s0, s1;
            s0 = server_requests_usec(rc, cmds, NULL, &u0);
            server_snap(rc, cmds, &a);
            counters_get(&c0);
            one_round(k, n, per, &kd[k], rc, sha, &m, "bench:raw");
            counters_get(&c1);
            server_snap(rc, cmds, &b);
            s1 = server_requests_usec(rc, cmds, NULL, &u1);
            /* b - a: the batch, and one reading's own requests (ov) */
            snap_delta(&a, &b, &ov, &d);
            kd[k].srv.all_calls += d.all_calls;
            kd[k].srv.net_in += d.net_in;
            kd[k].srv.net_out += d.net_out;
            kd[k].srv.conns += d.conns;
            kd[k].sends += c1.sends - c0.sends;
            kd[k].sent_bytes += c1.sent_bytes - c0.sent_bytes;
            kd[k].cmds += c1.cmds - c0.cmds;
            kd[k].rts += c1.rts - c0.rts;
            kd[k].reqs += s1 - s0; /* INFO itself is not in the list */
            kd[k].usec += u1 - u0;
        }
        for (k = K_LOCK; k < K_N; k++)
            if (kd[K_RAW].last_rate > 0) series_add(&kd[k].ratio, (int64_t)(kd[k].last_rate / kd[K_RAW].last_rate * 1e6));
    }

    ping_us = (double)series_pct(&kd[K_PING].lat, 50) / 1e3;
    result(&oo, "floor.ping_p50_us", ping_us, "us");
    result(&oo, "floor.ping_p10_us", (double)series_pct(&kd[K_PING].lat, 10) / 1e3, "us");
    result(&oo, "floor.ping_p90_us", (double)series_pct(&kd[K_PING].lat, 90) / 1e3, "us");
    raw_rate = (double)series_pct(&kd[K_RAW].rate, 50) / 1e3;
    result(&oo, "floor.raw_pair_p50_us", (double)series_pct(&kd[K_RAW].lat, 50) / 1e3, "us");
    result(&oo, "floor.raw_pair_per_s", raw_rate, "pairs/s");
    result(&oo, "floor.raw_pair_rt", (double)series_pct(&kd[K_RAW].lat, 50) / 1e3 / ping_us, "RT");
    result(&oo, "floor.raw_pair_server_reqs", (double)kd[K_RAW].reqs / (double)kd[K_RAW].ops, "req/pair");
    result(&oo, "floor.raw_pair_server_us", (double)kd[K_RAW].usec / (double)kd[K_RAW].ops, "us/pair");
    result(&oo, "floor.ping_server_us", (double)kd[K_PING].usec / (double)kd[K_PING].ops, "us");
    /* The commands the server ran per pair (scripts' calls
     * included), the bytes each way, dlock's round trips (its send()s). */
    for (k = K_RAW; k < K_N; k++) {
        char key[96];
        const char *pre = k == K_RAW ? "floor.raw_pair" : NULL;
        double ops = kd[k].ops > 0 ? (double)kd[k].ops : 1;
        if (pre == NULL) {
            snprintf(key, sizeof key, "seq.%s", kname[k]);
            pre = key;
        }
        {
            char k2[128];
            snprintf(k2, sizeof k2, "%s_cmds_incl_script", pre);
            result(&oo, k2, (double)kd[k].srv.all_calls / ops, "cmd/pair");
            snprintf(k2, sizeof k2, "%s_bytes_in", pre);
            result(&oo, k2, (double)kd[k].srv.net_in / ops, "B/pair");
            snprintf(k2, sizeof k2, "%s_bytes_out", pre);
            result(&oo, k2, (double)kd[k].srv.net_out / ops, "B/pair");
            snprintf(k2, sizeof k2, "%s_srv_conns", pre);
            result(&oo, k2, (double)kd[k].srv.conns / ops, "conn/pair");
            if (k != K_RAW) {
                snprintf(k2, sizeof k2, "%s_client_sends", pre);
                result(&oo, k2, (double)kd[k].sends / ops, "RT/pair");
                snprintf(k2, sizeof k2, "%s_client_bytes", pre);
                result(&oo, k2, (double)kd[k].sent_bytes / ops, "B/pair");
            }
        }
    }
    for (k = K_LOCK; k < K_N; k++) {
        char key[96];
        double rate = (double)series_pct(&kd[k].rate, 50) / 1e3;
        double p50 = (double)series_pct(&kd[k].lat, 50) / 1e3;
        snprintf(key, sizeof key, "seq.%s_p50_us", kname[k]);
        result(&oo, key, p50, "us");
        snprintf(key, sizeof key, "seq.%s_p99_us", kname[k]);
        result(&oo, key, (double)series_pct(&kd[k].lat, 99) / 1e3, "us");
        snprintf(key, sizeof key, "seq.%s_per_s", kname[k]);
        result(&oo, key, rate, "pairs/s");
        /* The ratio: the median over rounds of this kind's rate over the
         * raw pair's rate in the same round (noise that lasts longer than
         * a round hits both sides alike); and the ratio of p50 latencies. */
        snprintf(key, sizeof key, "seq.%s_vs_raw", kname[k]);
        result(&oo, key, (double)series_pct(&kd[k].ratio, 50) / 1e6, "x");
        snprintf(key, sizeof key, "seq.%s_vs_raw_p50", kname[k]);
        result(&oo, key, (double)series_pct(&kd[K_RAW].lat, 50) / (double)series_pct(&kd[k].lat, 50), "x");
        snprintf(key, sizeof key, "seq.%s_rt", kname[k]);
        result(&oo, key, p50 / ping_us, "RT");
        snprintf(key, sizeof key, "seq.%s_client_cmds", kname[k]);
        result(&oo, key, (double)kd[k].cmds / (double)kd[k].ops, "cmd/pair");
        snprintf(key, sizeof key, "seq.%s_client_rts", kname[k]);
        result(&oo, key, (double)kd[k].rts / (double)kd[k].ops, "RT/pair");
        snprintf(key, sizeof key, "seq.%s_server_reqs", kname[k]);
        result(&oo, key, (double)kd[k].reqs / (double)kd[k].ops, "req/pair");
        snprintf(key, sizeof key, "seq.%s_server_us", kname[k]);
        result(&oo, key, (double)kd[k].usec / (double)kd[k].ops, "us/pair");
    }

    /* Recursive relock and unlock by the holder: no round trip. */
    {
        long i, nrec = o->smoke ? 100000 : 2000000;
        int64_t t0, t1, end;
        bcounters c0, c1;
        check(dlock_mutex_lock(&rm), "lock");
        counters_get(&c0);
        t0 = now_ns();
        end = t0 + (int64_t)2e9;
        for (i = 0; i < nrec; i++) {
            check(dlock_mutex_lock(&rm), "recursive lock");
            check(dlock_mutex_unlock(&rm), "recursive unlock");
            if ((i & 1023) == 0 && now_ns() > end) {
                i++;
                break;
            }
        }
        t1 = now_ns();
        counters_get(&c1);
        check(dlock_mutex_unlock(&rm), "unlock");
        result(&oo, "seq.recursive_pair_ns", (double)(t1 - t0) / (double)i, "ns");
        result(&oo, "seq.recursive_client_cmds", (double)(c1.cmds - c0.cmds) / (double)i, "cmd/pair");
    }

    for (k = 0; k < K_N; k++) {
        series_free(&kd[k].lat);
        series_free(&kd[k].rate);
        series_free(&kd[k].ratio);
    }
    check(dlock_mutex_destroy(&m), "destroy");
    check(dlock_mutex_destroy(&rm), "destroy");
    redisFree(rc);
    return 0;
}
