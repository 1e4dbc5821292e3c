/* labels: redis; timeout: 120 */
/* test_sem_expire.c -- a semaphore's expiry (dlock_sem_expire), which
 * every operation keeps on every key of it, and which its users renew
 * (DLOCK_SEM_RENEW); and the semaphore's calls under the client's circuit
 * breaker: an unreachable server costs one wait per back-off period, a
 * trywait one attempt.  Against real redis-servers.
 */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

/* Every key of the semaphore `name` on the suite's server has an expiry
 * (PTTL > 0); how many keys it has in *n. */
static int all_expire(const char *name, long long *n) {
    char pattern[128];
    redisReply *r;
    size_t i;
    int ok = 1;
    snprintf(pattern, sizeof pattern, "dlock:{%s}*", name);
    r = dlt_redis_cmd(&dlt_server, "KEYS %s", pattern);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r != NULL) freeReplyObject(r);
        return 0;
    }
    *n = (long long)r->elements;
    for (i = 0; i < r->elements; i++) {
        redisReply *t = dlt_redis_cmd(&dlt_server, "PTTL %s", r->element[i]->str);
        if (t == NULL || t->type != REDIS_REPLY_INTEGER || t->integer <= 0) {
            fprintf(stderr, "  %s: no expiry\n", r->element[i]->str);
            ok = 0;
        }
        if (t != NULL) freeReplyObject(t);
    }
    freeReplyObject(r);
    return ok;
}

static long long keys_of(const char *name) {
    char pattern[128];
    snprintf(pattern, sizeof pattern, "dlock:{%s}*", name);
    return dlt_redis_keys_count(&dlt_server, pattern);
}

static void *waiter(void *arg) {
    return (void *)(intptr_t)dlock_sem_wait(arg);
}

/* The expiry covers the keys that ops make later (a waiter's queue and
 * registrations, the done hash) and survives the value's SET; without
 * renewals everything of the semaphore goes at the expiry. */
static void test_expire_covers_every_key(void) {
    dlock_sem_t s;
    pthread_t t;
    void *res;
    long long n = 0;
    double end;
    DLT_ASSERT_INT_EQ(dlock_sem_init(&s, "ex-all", 1, NULL), 0);
    DLT_ASSERT_INT_EQ(dlock_sem_expire(NULL, "ex-all", 2000, 0), 0);
    CU_ASSERT(all_expire("ex-all", &n));
    DLT_ASSERT_INT_EQ(dlock_sem_trywait(&s), 0); /* the value's SET */
    CU_ASSERT(pthread_create(&t, NULL, waiter, &s) == 0);
    CU_ASSERT(dlt_sem_wait_waiters("ex-all", 1, 5000));
    CU_ASSERT(all_expire("ex-all", &n));
    CU_ASSERT(n >= 4); /* value, queue, registrations, owners (and done) */
    DLT_ASSERT_INT_EQ(dlock_sem_post(&s), 0);
    pthread_join(t, &res);
    DLT_ASSERT_INT_EQ((int)(intptr_t)res, 0);
    DLT_ASSERT_INT_EQ(dlock_sem_post(&s), 0);
    CU_ASSERT(all_expire("ex-all", &n));
    DLT_ASSERT_INT_EQ(dlock_sem_destroy(&s), 0);
    end = dlt_now() + 4.0;
    while ((n = keys_of("ex-all")) != 0 && dlt_now() < end) dlt_sleep_ms(100);
    DLT_ASSERT_INT_EQ(n, 0);
}

/* Renewals keep it (past several expiries), RENEW of a semaphore that
 * has no expiry changes nothing (ENOENT), and bad arguments are EINVAL. */
static void test_expire_renew(void) {
    dlock_sem_t s;
    long long n = 0;
    double end;
    int v = -1;
    DLT_ASSERT_INT_EQ(dlock_sem_init(&s, "ex-renew", 3, NULL), 0);
    DLT_ASSERT_INT_EQ(dlock_sem_expire(NULL, "ex-renew", 1000, DLOCK_SEM_RENEW), ENOENT);
    CU_ASSERT(!all_expire("ex-renew", &n)); /* still none */
    DLT_ASSERT_INT_EQ(dlock_sem_expire(NULL, "ex-nothing", 1000, 0), ENOENT);
    DLT_ASSERT_INT_EQ(dlock_sem_expire(NULL, "ex-renew", 10, 0), EINVAL);
    DLT_ASSERT_INT_EQ(dlock_sem_expire(NULL, "ex-renew", 1000, 4), EINVAL);
    DLT_ASSERT_INT_EQ(dlock_sem_expire(NULL, "ex-renew", 1000, 0), 0);
    end = dlt_now() + 3.5;
    while (dlt_now() < end) {
        dlt_sleep_ms(300);
        DLT_ASSERT_INT_EQ(dlock_sem_expire(NULL, "ex-renew", 1000, DLOCK_SEM_RENEW), 0);
    }
    DLT_ASSERT_INT_EQ(dlock_sem_getvalue(&s, &v), 0);
    DLT_ASSERT_INT_EQ(v, 3);
    dlt_sleep_ms(1300);
    DLT_ASSERT_INT_EQ(keys_of("ex-renew"), 0);
    DLT_ASSERT_INT_EQ(dlock_sem_expire(NULL, "ex-renew", 1000, DLOCK_SEM_RENEW), ENOENT);
    DLT_ASSERT_INT_EQ(dlock_sem_destroy(&s), 0);
}

/* The server stopped: a trywait makes one attempt (a refused connection:
 * its request never went out) and opens nothing; the first call that
 * waits pays the unreachable bound (1 s) and opens the breaker; then
 * every call fails with ENOLCK at once (post, wait, trywait, getvalue,
 * timedwait, expire).  The server back, a call a second later gets
 * through (the probe).  (A trywait whose answer is lost is asked again:
 * test_sem's test_lost_answer_once.) */
static void test_sem_breaker(void) {
    dlt_redis r2;
    dlock_client_t *c = NULL, *c2 = NULL;
    dlock_semattr_t a;
    dlock_sem_t s, s2;
    char url[256], url2[300];
    struct timespec ts;
    double t;
    int v, i;
    CU_ASSERT_FATAL(dlt_redis_start(&r2, NULL) == 0);
    snprintf(url, sizeof url, "%s?unreachable_ms=1000&breaker_ms=30000", r2.url);
    /* c2 keeps its breaker to itself (host_breaker=0): whether its own
     * tries open it is what it shows; the host-wide record, which c's
     * wait writes, is test_hostrec's */
    snprintf(url2, sizeof url2, "%s&host_breaker=0", url);
    CU_ASSERT_FATAL(dlt_client_make(&c, url, 1000) == 0 && dlt_client_make(&c2, url2, 1000) == 0);
    dlock_semattr_init(&a);
    dlock_semattr_setclient(&a, c);
    DLT_ASSERT_INT_EQ(dlock_sem_init(&s, "br", 1, &a), 0);
    dlock_semattr_setclient(&a, c2);
    DLT_ASSERT_INT_EQ(dlock_sem_init(&s2, "br", 1, &a), 0);
    dlock_semattr_destroy(&a);
    CU_ASSERT_FATAL(dlt_redis_stop(&r2) == 0);

    for (i = 0; i < 3; i++) { /* c2: tries, one attempt each */
        t = dlt_now();
        DLT_ASSERT_INT_EQ(dlock_sem_trywait(&s2), ENOLCK);
        CU_ASSERT(dlt_now() - t < 0.5);
    }
    t = dlt_now();
    DLT_ASSERT_INT_EQ(dlock_sem_post(&s), ENOLCK); /* the one wait */
    t = dlt_now() - t;
    CU_ASSERT(t >= 0.5 && t < 2.5);
    t = dlt_now();
    for (i = 0; i < 10; i++) {
        DLT_ASSERT_INT_EQ(dlock_sem_wait(&s), ENOLCK);
        DLT_ASSERT_INT_EQ(dlock_sem_trywait(&s), ENOLCK);
        DLT_ASSERT_INT_EQ(dlock_sem_getvalue(&s, &v), ENOLCK);
        DLT_ASSERT_INT_EQ(dlock_sem_post(&s), ENOLCK);
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 5;
        DLT_ASSERT_INT_EQ(dlock_sem_timedwait(&s, &ts), ENOLCK);
        DLT_ASSERT_INT_EQ(dlock_sem_expire(c, "br", 1000, DLOCK_SEM_RENEW), ENOLCK);
    }
    t = dlt_now() - t;
    fprintf(stderr, "  (60 calls with the breaker open: %.3fs)\n", t);
    CU_ASSERT(t < 1.0);
    t = dlt_now();
    DLT_ASSERT_INT_EQ(dlock_sem_getvalue(&s2, &v), ENOLCK); /* c2's tries opened nothing: it waits */
    CU_ASSERT(dlt_now() - t >= 0.5);

    CU_ASSERT_FATAL(dlt_redis_restart(&r2) == 0);
    dlt_sleep_ms(1100);
    v = -1;
    DLT_ASSERT_INT_EQ(dlock_sem_getvalue(&s, &v), 0); /* the probe */
    /* a server without persistence lost it: made again with the value s was opened with */
    DLT_ASSERT_INT_EQ(v, 1);
    dlock_sem_destroy(&s);
    dlock_sem_destroy(&s2);
    dlock_client_destroy(c);
    dlock_client_destroy(c2);
    dlt_redis_cleanup(&r2);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_expire_covers_every_key),
    DLT_TEST(test_expire_renew),
    DLT_TEST(test_sem_breaker),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "sem_expire", tests);
}
