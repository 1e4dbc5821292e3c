/* renew.c -- many locks held by one process: renewal cost and memory.
 *
 * N locks (10 000 by default) are taken by one thread and held for a few
 * lease periods while the process does nothing else, so every request the
 * client sends and every CPU second it spends in that window is the
 * renewal thread's.  Reported per lease period: renewals, round trips,
 * client CPU and server CPU, against N (one round trip per lock would be
 * N x 3 per period, renewal being at about a third of the lease).
 *
 * Memory: client heap bytes per lock (mallinfo2 before init, after init,
 * after acquiring; the caller's dlock_mutex_t is counted apart), server
 * bytes per lock (used_memory before/after, and MEMORY USAGE of one
 * lock's keys).
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"

static long lost_count;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    __atomic_fetch_add(&lost_count, 1, __ATOMIC_RELAXED);
}

static double cpu_self(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static long heap_used(void) {
    struct mallinfo2 mi = mallinfo2();
    return (long)(mi.uordblks + mi.hblkhd);
}

static long mem_usage(redisContext *rc, const char *key) {
    redisReply *r = bcmd(rc, "MEMORY USAGE %s SAMPLES 0", key);
    long v = r->type == REDIS_REPLY_INTEGER ? (long)r->integer : 0;
    freeReplyObject(r);
    return v;
}

int cmd_renew(const bopts *o) {
    int n = o->locks > 0 ? o->locks : (o->smoke ? 1000 : 10000), i, held = 0;
    unsigned lease = o->lease_ms ? o->lease_ms : (o->smoke ? 600 : 3000);
    double periods = o->smoke ? 2 : 2;
    redisContext *rc = bconnect(o);
    dlock_client_t *cl = bclient(o);
    dlock_mutex_t *m = calloc((size_t)n, sizeof *m);
    dlock_mutexattr_t a;
    long h0, h1, h2, u0, u1, s0, s1;
    int64_t t0, t1, first_acq;
    double c0cpu, c1cpu, sc0, sc1, w;
    bcounters k0, k1;
    bopts oo = *o;
    char name[64];

    oo.label = "renew";
    if (m == NULL) die("out of memory");
    redisReply *fl = bcmd(rc, "FLUSHALL");
    freeReplyObject(fl);

    /* Memory of the lock objects, then of the holds. */
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, cl);
    dlock_mutexattr_setlease(&a, lease);
    dlock_mutexattr_setlostcallback(&a, on_lost, NULL);
    h0 = heap_used();
    for (i = 0; i < n; i++) {
        int rc2;
        snprintf(name, sizeof name, "renew/%d", i);
        if ((rc2 = dlock_mutex_init(&m[i], name, &a)) != 0) die("init: %s", dlock_strerror(rc2));
    }
    h1 = heap_used();
    u0 = server_used_memory(rc);
    c0cpu = cpu_self();
    t0 = now_ns();
    first_acq = t0;
    for (i = 0; i < n; i++) {
        int rc2 = dlock_mutex_trylock(&m[i]);
        if (rc2 != 0) die("trylock %d: %s (%s)", i, dlock_strerror(rc2), dlock_last_error());
        if (now_ns() - t0 > (int64_t)lease * 1000000 / 2) die("acquiring %d locks takes longer than half a lease", n);
    }
    t1 = now_ns();
    c1cpu = cpu_self();
    h2 = heap_used();
    u1 = server_used_memory(rc);
    note("renewal: %d locks, lease %u ms, acquired in %.0f ms", n, lease, (double)(t1 - t0) / 1e6);
    result(&oo, "locks", n, "");
    result(&oo, "lease_ms", lease, "ms");
    result(&oo, "acquire_all_ms", (double)(t1 - t0) / 1e6, "ms");
    result(&oo, "acquire_cpu_us_per_lock", (c1cpu - c0cpu) * 1e6 / n, "us");
    result(&oo, "mem.client_bytes_per_mutex_object", (double)(h1 - h0) / n + (double)sizeof(dlock_mutex_t), "B");
    result(&oo, "mem.client_bytes_per_held_lock", (double)(h2 - h0) / n + (double)sizeof(dlock_mutex_t), "B");
    result(&oo, "mem.client_bytes_per_hold_only", (double)(h2 - h1) / n, "B");
    result(&oo, "mem.server_bytes_per_lock", (double)(u1 - u0) / n, "B");
    result(&oo, "mem.server_memory_usage_lock_key", mem_usage(rc, "bench:{renew/0}"), "B");
    result(&oo, "mem.server_memory_usage_fence_key", mem_usage(rc, "bench:{renew/0}:fence"), "B");

    /* Wait until renewals have begun, then watch whole lease periods. */
    while (now_ns() < first_acq + (int64_t)lease * 1000000 / 3) sleep_ms(5);
    counters_get(&k0);
    s0 = server_requests(rc, "evalsha,eval", NULL);
    sc0 = server_cpu(rc);
    c0cpu = cpu_self();
    t0 = now_ns();
    sleep_ms(periods * lease);
    t1 = now_ns();
    c1cpu = cpu_self();
    sc1 = server_cpu(rc);
    s1 = server_requests(rc, "evalsha,eval", NULL);
    counters_get(&k1);
    w = (double)(t1 - t0) / 1e6 / lease; /* lease periods watched */
    for (i = 0; i < n; i++) held += dlock_mutex_holds(&m[i]);

    result(&oo, "renewals_per_period", (double)(k1.cmds - k0.cmds) / w, "renewals");
    result(&oo, "round_trips_per_period", (double)(k1.rts - k0.rts) / w, "RT");
    result(&oo, "one_rt_per_lock_would_be", 3.0 * n, "RT");
    result(&oo, "server_reqs_per_period", (double)(s1 - s0) / w, "req");
    result(&oo, "client_cpu_ms_per_period", (c1cpu - c0cpu) * 1e3 / w, "ms");
    result(&oo, "server_cpu_ms_per_period", (sc1 - sc0) * 1e3 / w, "ms");
    result(&oo, "client_cpu_share", (c1cpu - c0cpu) / ((double)(t1 - t0) / 1e9), "cores");
    result(&oo, "held_at_end", held, "");
    result(&oo, "lost", lost_count, "");

    c0cpu = cpu_self();
    t0 = now_ns();
    for (i = 0; i < n; i++) {
        int rc2 = dlock_mutex_unlock(&m[i]);
        if (rc2 != 0) die("unlock %d: %s (%s)", i, dlock_strerror(rc2), dlock_last_error());
    }
    t1 = now_ns();
    result(&oo, "release_all_ms", (double)(t1 - t0) / 1e6, "ms");
    for (i = 0; i < n; i++) dlock_mutex_destroy(&m[i]);
    dlock_mutexattr_destroy(&a);
    dlock_client_destroy(cl);
    free(m);
    redisFree(rc);
    return (held == n && lost_count == 0) ? 0 : 1;
}
