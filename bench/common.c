/* common.c -- time, statistics, results, the bench's own Redis connection,
 * and the link-time wrappers that count the requests dlock itself makes. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* ---------------------------------------------------------------- time */

int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void spin_until(int64_t until) {
    while (now_ns() < until)
        ;
}

void hold_until(int64_t until) {
    int64_t wake = until - 150000; /* sleep most of it, spin the last 150 µs */
    if (wake > now_ns()) {
        struct timespec ts = { (time_t)(wake / 1000000000), (long)(wake % 1000000000) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
    spin_until(until);
}

void sleep_ms(double ms) {
    struct timespec ts;
    if (ms <= 0) return;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* -------------------------------------------------------------- series */

void series_add(series *s, int64_t x) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        int64_t *v = realloc(s->v, cap * sizeof *v);
        if (v == NULL) die("out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

double series_add_rate(series *s, long n, int64_t t_start) {
    double rate = (double)n * 1e9 / (double)(now_ns() - t_start);
    series_add(s, (int64_t)(rate * 1e3));
    return rate;
}

void series_free(series *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int64_t series_pct(series *s, double p) {
    size_t i;
    if (s->n == 0) return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp64);
    i = (size_t)(p / 100.0 * (double)(s->n - 1) + 0.5);
    if (i >= s->n) i = s->n - 1;
    return s->v[i];
}

double series_mean(const series *s) {
    double sum = 0;
    size_t i;
    if (s->n == 0) return 0;
    for (i = 0; i < s->n; i++) sum += (double)s->v[i];
    return sum / (double)s->n;
}

int64_t series_max(const series *s) {
    int64_t m = 0;
    size_t i;
    for (i = 0; i < s->n; i++)
        if (s->v[i] > m) m = s->v[i];
    return m;
}

/* ------------------------------------------------------------- results */

void result(const bopts *o, const char *key, double value, const char *unit) {
    char k[256];
    if (o->label != NULL && o->label[0] != '\0') snprintf(k, sizeof k, "%s.%s", o->label, key);
    else snprintf(k, sizeof k, "%s", key);
    printf("  %-40s %14.3f %s\n", k, value, unit);
    fflush(stdout);
    if (o->csv != NULL) {
        FILE *f = fopen(o->csv, "a");
        if (f == NULL) die("cannot append to %s: %s", o->csv, strerror(errno));
        fprintf(f, "%s,%.6g,%s\n", k, value, unit);
        fclose(f);
    }
}

void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

void die(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("dlock-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

/* ------------------------------------------------------------ hiredis */

redisContext *bconnect(const bopts *o) {
    struct timeval tv = { 5, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", o->port, tv);
    if (c == NULL || c->err) die("cannot connect to 127.0.0.1:%d: %s", o->port, c ? c->errstr : "out of memory");
    redisSetTimeout(c, tv);
    return c;
}

redisReply *bcmd(redisContext *c, const char *fmt, ...) {
    va_list ap;
    redisReply *r;
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL) die("redis: %s", c->errstr);
    return r;
}

/* The value of `field` in an INFO section, as text. */
static int info_field(const char *info, const char *field, char *out, size_t outlen) {
    size_t fl = strlen(field);
    const char *p = info;
    while ((p = strstr(p, field)) != NULL) {
        if ((p == info || p[-1] == '\n') && p[fl] == ':') {
            size_t n = strcspn(p + fl + 1, "\r\n");
            if (n >= outlen) n = outlen - 1;
            memcpy(out, p + fl + 1, n);
            out[n] = '\0';
            return 0;
        }
        p += fl;
    }
    return -1;
}

long server_requests(redisContext *c, const char *cmds, long *total) {
    return server_requests_usec(c, cmds, total, NULL);
}

long server_requests_usec(redisContext *c, const char *cmds, long *total, long *usec) {
    redisReply *r = bcmd(c, "INFO commandstats");
    char list[512], *save = NULL, *cmd;
    long sum = 0;
    if (usec != NULL) *usec = 0;
    snprintf(list, sizeof list, "%s", cmds);
    for (cmd = strtok_r(list, ",", &save); cmd != NULL; cmd = strtok_r(NULL, ",", &save)) {
        char field[128], val[256];
        /* "-NAME": NAME's calls are taken off (not its time) */
        int minus = cmd[0] == '-';
        snprintf(field, sizeof field, "cmdstat_%s", cmd + minus);
        if (info_field(r->str, field, val, sizeof val) == 0) {
            const char *calls = strstr(val, "calls=");
            const char *us = strstr(val, "usec=");
            if (calls) sum += minus ? -atol(calls + 6) : atol(calls + 6);
            if (us && usec != NULL && !minus) *usec += atol(us + 5);
        }
    }
    freeReplyObject(r);
    if (total != NULL) {
        char val[64];
        r = bcmd(c, "INFO stats");
        *total = info_field(r->str, "total_commands_processed", val, sizeof val) == 0 ? atol(val) : 0;
        freeReplyObject(r);
    }
    return sum;
}

static long long info_ll(const char *info, const char *field) {
    char v[64];
    return info_field(info, field, v, sizeof v) == 0 ? atoll(v) : 0;
}

/* Is cmdstat line p (at "cmdstat_") one of the comma-separated names? */
static int in_list(const char *p, const char *list) {
    const char *name = p + 8, *colon = strchr(name, ':');
    size_t nl = colon ? (size_t)(colon - name) : strlen(name);
    while (list != NULL && *list) {
        size_t l = strcspn(list, ",");
        if (l == nl && strncmp(list, name, nl) == 0) return 1;
        list += l + (list[l] == ',');
    }
    return 0;
}

void server_snap(redisContext *c, const char *top, snap *s) {
    redisReply *r = bcmd(c, "INFO commandstats");
    const char *p = r->str;
    memset(s, 0, sizeof *s);
    /* cmdstat_<name>:calls=N,usec=N,... a line each; INFO's own left out */
    while ((p = strstr(p, "cmdstat_")) != NULL) {
        const char *calls = strstr(p, "calls="), *us = strstr(p, "usec="), *eol = strchr(p, '\n');
        if (eol == NULL) eol = p + strlen(p);
        if (strncmp(p, "cmdstat_info:", 13) != 0 && calls != NULL && calls < eol) {
            s->all_calls += atol(calls + 6);
            if (in_list(p, top)) {
                s->calls += atol(calls + 6);
                if (us != NULL && us < eol) s->usec += atol(us + 5);
            }
        }
        p = eol;
    }
    freeReplyObject(r);
    r = bcmd(c, "INFO stats");
    s->net_in = info_ll(r->str, "total_net_input_bytes");
    s->net_out = info_ll(r->str, "total_net_output_bytes");
    s->conns = (long)info_ll(r->str, "total_connections_received");
    freeReplyObject(r);
    s->cpu = server_cpu(c);
}

void snap_delta(const snap *a, const snap *b, const snap *ov, snap *d) {
    d->calls = b->calls - a->calls - (ov ? ov->calls : 0);
    d->all_calls = b->all_calls - a->all_calls - (ov ? ov->all_calls : 0);
    d->usec = b->usec - a->usec - (ov ? ov->usec : 0);
    d->conns = b->conns - a->conns - (ov ? ov->conns : 0);
    d->net_in = b->net_in - a->net_in - (ov ? ov->net_in : 0);
    d->net_out = b->net_out - a->net_out - (ov ? ov->net_out : 0);
    d->cpu = b->cpu - a->cpu - (ov ? ov->cpu : 0);
}

void snap_overhead(redisContext *c, snap *ov) {
    snap a, b;
    server_snap(c, NULL, &a);
    server_snap(c, NULL, &b);
    snap_delta(&a, &b, NULL, ov);
    ov->cpu = 0; /* the CPU is not constant: left in */
}

double server_cpu(redisContext *c) {
    redisReply *r = bcmd(c, "INFO cpu");
    char u[64], s[64];
    double v = 0;
    if (info_field(r->str, "used_cpu_user", u, sizeof u) == 0 && info_field(r->str, "used_cpu_sys", s, sizeof s) == 0)
        v = atof(u) + atof(s);
    freeReplyObject(r);
    return v;
}

long server_used_memory(redisContext *c) {
    redisReply *r = bcmd(c, "INFO memory");
    char v[64];
    long m = info_field(r->str, "used_memory", v, sizeof v) == 0 ? atol(v) : 0;
    freeReplyObject(r);
    return m;
}

/* ---------------------------------------------- request counting (wrap) */

static bcounters local_counters;
bcounters *bc = &local_counters;

void *shared_alloc(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap %zu: %s", n, strerror(errno));
    return p;
}

int turn_wait(uint32_t *turn, const uint32_t *stop, uint32_t id, int64_t give_up) {
    int spins = 0;
    for (;;) {
        uint32_t t = __atomic_load_n(turn, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(stop, __ATOMIC_ACQUIRE)) return -1;
        if (t == id) return 0;
        if (++spins < 200) continue;
        if (now_ns() > give_up) return -2;
        {
            struct timespec ts = { 0, 20000000 };
            syscall(SYS_futex, turn, FUTEX_WAIT, t, &ts, NULL, 0);
        }
    }
}

void turn_pass(uint32_t *turn, uint32_t to) {
    __atomic_store_n(turn, to, __ATOMIC_RELEASE);
    syscall(SYS_futex, turn, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void counters_init(void) {
    bc = shared_alloc(sizeof *bc);
}

void counters_get(bcounters *out) {
    out->cmds = __atomic_load_n(&bc->cmds, __ATOMIC_RELAXED);
    out->rts = __atomic_load_n(&bc->rts, __ATOMIC_RELAXED);
    out->sends = __atomic_load_n(&bc->sends, __ATOMIC_RELAXED);
    out->sent_bytes = __atomic_load_n(&bc->sent_bytes, __ATOMIC_RELAXED);
}

static void count(long cmds, long rts) {
    if (cmds) __atomic_fetch_add(&bc->cmds, cmds, __ATOMIC_RELAXED);
    if (rts) __atomic_fetch_add(&bc->rts, rts, __ATOMIC_RELAXED);
}

/* The link step wraps these hiredis entry points (-Wl,--wrap=...): calls
 * from libdlock.a land here.  The bench's own requests use redisvCommand,
 * which is not wrapped, so they are not counted. */
void *__real_redisCommandArgv(redisContext *c, int argc, const char **argv, const size_t *argvlen);
int __real_redisAppendCommandArgv(redisContext *c, int argc, const char **argv, const size_t *argvlen);
int __real_redisGetReply(redisContext *c, void **reply);

void *__wrap_redisCommandArgv(redisContext *c, int argc, const char **argv, const size_t *argvlen);
int __wrap_redisAppendCommandArgv(redisContext *c, int argc, const char **argv, const size_t *argvlen);
int __wrap_redisGetReply(redisContext *c, void **reply);
void *__wrap_redisCommand(redisContext *c, const char *fmt, ...);

void *__wrap_redisCommandArgv(redisContext *c, int argc, const char **argv, const size_t *argvlen) {
    count(1, 1);
    return __real_redisCommandArgv(c, argc, argv, argvlen);
}

int __wrap_redisAppendCommandArgv(redisContext *c, int argc, const char **argv, const size_t *argvlen) {
    count(1, 0);
    return __real_redisAppendCommandArgv(c, argc, argv, argvlen);
}

int __wrap_redisGetReply(redisContext *c, void **reply) {
    /* A non-empty output buffer is flushed here: one round trip for the
     * whole pipeline written so far. */
    if (c != NULL && c->obuf != NULL && c->obuf[0] != '\0') count(0, 1);
    return __real_redisGetReply(c, reply);
}

/* dlock encodes its requests itself (src/net/resp.c): each call is one
 * command appended to a connection's output. */
int __real_dlock__resp_append(redisContext *ctx, int argc, const char *const *argv, const size_t *lens);
int __wrap_dlock__resp_append(redisContext *ctx, int argc, const char *const *argv, const size_t *lens);

int __wrap_dlock__resp_append(redisContext *ctx, int argc, const char *const *argv, const size_t *lens) {
    count(1, 0);
    return __real_dlock__resp_append(ctx, argc, argv, lens);
}

/* dlock writes its requests itself with send() (src/net/conn.c): each call
 * here is one request or pipeline written, then waited on. */
ssize_t __real_send(int fd, const void *buf, size_t len, int flags);
ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags);

ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags) {
    ssize_t n = __real_send(fd, buf, len, flags);
    __atomic_fetch_add(&bc->sends, 1, __ATOMIC_RELAXED);
    if (n > 0) __atomic_fetch_add(&bc->sent_bytes, (long)n, __ATOMIC_RELAXED);
    return n;
}

void *__wrap_redisCommand(redisContext *c, const char *fmt, ...) {
    va_list ap;
    void *r;
    count(1, 1);
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    return r;
}

/* -------------------------------------------------------------- dlock */

dlock_client_t *bclient(const bopts *o) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    char url[64];
    int rc;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", o->port);
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = "bench:";
    if ((rc = dlock_client_create(&c, &cfg)) != 0)
        die("dlock_client_create: %s (%s)", dlock_strerror(rc), dlock_last_error());
    return c;
}

void bmutex_init(dlock_mutex_t *m, dlock_client_t *c, const char *name, int type, unsigned lease_ms, int flags) {
    dlock_mutexattr_t a;
    int rc;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, c);
    dlock_mutexattr_settype(&a, type);
    if (lease_ms) dlock_mutexattr_setlease(&a, lease_ms);
    if ((flags & BMUTEX_FAIR) && (rc = dlock_mutexattr_setfair(&a, 1)) != 0) die("dlock_mutexattr_setfair: %s", dlock_strerror(rc));
    if ((flags & BMUTEX_CACHING) && (rc = dlock_mutexattr_setcaching(&a, 1)) != 0)
        die("dlock_mutexattr_setcaching: %s", dlock_strerror(rc));
    if ((rc = dlock_mutex_init(m, name, &a)) != 0)
        die("dlock_mutex_init(%s): %s (%s)", name, dlock_strerror(rc), dlock_last_error());
    dlock_mutexattr_destroy(&a);
}
