/* first_lock.c -- dlock-first-lock: what a fresh process pays for its
 * first lock (bench/short-lived).
 *
 *   dlock-first-lock lock NAME   init + lock + unlock of NAME on the
 *                                default client ($DLOCK_URL), then the
 *                                same pair again; prints
 *                                "init_ns lock_ns unlock_ns total_ns second_pair_ns"
 *   dlock-first-lock rtt N       N PINGs on one hiredis connection to
 *                                $DLOCK_URL's server; prints the median
 *                                round trip in ns
 *   dlock-first-lock drbg        the first lock's floor: what dlock's
 *                                random source costs a fresh process to
 *                                set up on one thread (a library context
 *                                of its own, a HASH-DRBG, a first
 *                                RAND_bytes_ex: the work the library
 *                                splits between its set-up thread and
 *                                the first token's caller); ns
 *
 * Linked against the shared libdlock, as a program is: its loading is not
 * in the figure (it happens before main), its set-up is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlock.h>
#include <hiredis/hiredis.h>
#include <openssl/rand.h>

static long long ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int first_lock(const char *name) {
    dlock_mutex_t m;
    long long t0 = ns(), t1, t2, t3, t4;
    int rc = dlock_mutex_init(&m, name, NULL);
    t1 = ns();
    if (rc == 0) rc = dlock_mutex_lock(&m);
    t2 = ns();
    if (rc == 0) rc = dlock_mutex_unlock(&m);
    t3 = ns();
    if (rc == 0) rc = dlock_mutex_lock(&m);
    if (rc == 0) rc = dlock_mutex_unlock(&m);
    t4 = ns();
    if (rc != 0) {
        fprintf(stderr, "dlock-first-lock: %s\n", dlock_last_error());
        return 1;
    }
    printf("%lld %lld %lld %lld %lld\n", t1 - t0, t2 - t1, t3 - t2, t3 - t0, t4 - t3);
    return 0;
}

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* The server of redis://HOST:PORT (no password, no TLS: a bench server). */
static int rtt(int n) {
    const char *url = getenv("DLOCK_URL"), *hp;
    char host[256];
    int port = 6379, i;
    long long *d;
    redisContext *ctx;
    if (url == NULL || strncmp(url, "redis://", 8) != 0) return fprintf(stderr, "DLOCK_URL: redis://HOST:PORT\n"), 1;
    hp = url + 8;
    if (sscanf(hp, "%255[^:/]:%d", host, &port) < 1) return 1;
    if ((ctx = redisConnect(host, port)) == NULL || ctx->err) return fprintf(stderr, "cannot connect\n"), 1;
    if ((d = calloc((size_t)n, sizeof *d)) == NULL) return 1;
    for (i = 0; i < n; i++) {
        long long t0 = ns();
        redisReply *r = redisCommand(ctx, "PING");
        d[i] = ns() - t0;
        if (r == NULL) return 1;
        freeReplyObject(r);
    }
    qsort(d, (size_t)n, sizeof *d, cmp_ll);
    printf("%lld\n", d[n / 2]);
    free(d);
    redisFree(ctx);
    return 0;
}

/* The random source's set-up alone, as src/base/token.c makes it. */
static int drbg(void) {
    unsigned char b[1];
    long long t0 = ns(), t1;
    OSSL_LIB_CTX *ctx = OSSL_LIB_CTX_new();
    int ok = ctx != NULL && RAND_set_DRBG_type(ctx, "HASH-DRBG", NULL, NULL, "SHA256") == 1 &&
             RAND_bytes_ex(ctx, b, sizeof b, 0) == 1;
    t1 = ns();
    if (!ok) return fprintf(stderr, "dlock-first-lock: RAND_bytes_ex failed\n"), 1;
    printf("%lld\n", t1 - t0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "lock") == 0) return first_lock(argv[2]);
    if (argc == 3 && strcmp(argv[1], "rtt") == 0) return rtt(atoi(argv[2]) > 0 ? atoi(argv[2]) : 100);
    if (argc == 2 && strcmp(argv[1], "drbg") == 0) return drbg();
    fprintf(stderr, "usage: dlock-first-lock lock NAME | rtt N | drbg\n");
    return 64;
}
