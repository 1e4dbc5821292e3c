/* test_convert.c -- lock conversion: dlock_rwlock_upgrade / _downgrade
 * (SPEC section 2, "Dead holders, conversion, ..."), as the DLM's convert.
 * labels: redis cluster; timeout: 300
 *
 * Each party is an "actor": a child process (another host, as far as the
 * lock can tell) with its own client and rwlock object of the lock's
 * name, which runs one call at a time on request and reports its answer,
 * its fence and dlock_rwlock_holds through MAP_SHARED memory.  A call
 * that blocks is seen not to answer; the test then makes the change that
 * should free it and sees it answer.  The scenarios run on one server and
 * on a Redis Cluster of three masters, through Sentinel; Redlock answers
 * ENOTSUP.
 */
#include "fixture.h"
#include "fixture_multi.h"
#include "proxy.h"

#include <dlock.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define BLOCKED_MS 400   /* a call that has not answered after this long is blocked */
#define ANSWER_MS 10000  /* a freed call answers within this */

enum { OP_QUIT = 1, OP_RD, OP_WR, OP_UNLOCK, OP_UP, OP_DOWN, OP_TRYRD, OP_TRYWR, OP_TIMEDUP };

typedef struct actor {
    char name[64];
    char url[512]; /* "": the default client (the suite's server) */
    int kind;      /* its rwlock's kind */
    unsigned lease;
    int ready;
    int seq, done; /* the request number; the last one answered */
    int op;
    long arg;      /* OP_TIMEDUP: ms */
    int rc;
    unsigned long long fence;
    int holds;
} actor;

static int actor_main(void *p) {
    actor *a = p;
    dlock_client_t *c = NULL;
    dlock_mutexattr_t at;
    dlock_rwlock_t rw;
    dlock_config_t cfg;
    int seen = 0;
    if (a->url[0] != '\0') {
        dlock_config_init(&cfg);
        cfg.url = a->url;
        DLT_CK(dlock_client_create(&c, &cfg), 0);
    }
    DLT_CK(dlock_mutexattr_init(&at), 0);
    DLT_CK(dlock_mutexattr_setrwkind(&at, a->kind), 0);
    DLT_CK(dlock_mutexattr_setlease(&at, a->lease ? a->lease : 10000), 0);
    if (c != NULL) DLT_CK(dlock_mutexattr_setclient(&at, c), 0);
    DLT_CK(dlock_rwlock_init(&rw, a->name, &at), 0);
    dlock_mutexattr_destroy(&at);
    dlt_flag_set(&a->ready, 1);
    for (;;) {
        struct timespec ts;
        int op, rc = 0;
        DLT_CKT(dlt_flag_wait_ge(&a->seq, seen + 1, 120000));
        seen = dlt_flag_get(&a->seq);
        op = a->op;
        if (op == OP_QUIT) break;
        switch (op) {
        case OP_RD: rc = dlock_rwlock_rdlock(&rw); break;
        case OP_WR: rc = dlock_rwlock_wrlock(&rw); break;
        case OP_UNLOCK: rc = dlock_rwlock_unlock(&rw); break;
        case OP_UP: rc = dlock_rwlock_upgrade(&rw); break;
        case OP_DOWN: rc = dlock_rwlock_downgrade(&rw); break;
        case OP_TRYRD: rc = dlock_rwlock_tryrdlock(&rw); break;
        case OP_TRYWR: rc = dlock_rwlock_trywrlock(&rw); break;
        case OP_TIMEDUP:
            ts = dlt_abs_in(CLOCK_REALTIME, a->arg);
            rc = dlock_rwlock_timedupgrade(&rw, &ts);
            break;
        default: rc = -1;
        }
        a->rc = rc;
        a->fence = dlock_rwlock_fence(&rw);
        a->holds = dlock_rwlock_holds(&rw);
        dlt_flag_set(&a->done, seen);
    }
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    if (c != NULL) DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

/* n actors on lock `name` of deployment url, each a child process. */
typedef struct cast {
    actor *a;
    dlt_task t[6];
    int dead[6]; /* killed and joined by the test */
    int n;
} cast;

static unsigned cast_lease; /* the actors' lease (0: 10 s) */

static void cast_start(cast *cs, int n, const char *name, const char *url, const int *kinds) {
    int i;
    memset(cs, 0, sizeof *cs);
    cs->a = DLT_SHM_NEW(actor, n);
    cs->n = n;
    for (i = 0; i < n; i++) {
        snprintf(cs->a[i].name, sizeof cs->a[i].name, "%s", name);
        snprintf(cs->a[i].url, sizeof cs->a[i].url, "%s", url);
        cs->a[i].kind = kinds != NULL ? kinds[i] : DLOCK_RWLOCK_DEFAULT;
        cs->a[i].lease = cast_lease;
        dlt_task_start(&cs->t[i], DLT_PROC, actor_main, &cs->a[i]);
    }
    for (i = 0; i < n; i++) CU_ASSERT_TRUE_FATAL(dlt_flag_wait(&cs->a[i].ready, 1, ANSWER_MS));
}

static void ask(actor *a, int op, long arg) {
    a->op = op;
    a->arg = arg;
    dlt_flag_add(&a->seq, 1);
}

/* The answer to a's last request, within ms; -1000 if none came. */
static int answer(actor *a, int ms) {
    if (!dlt_flag_wait(&a->done, dlt_flag_get(&a->seq), ms)) return -1000;
    return a->rc;
}

static int call(actor *a, int op) {
    ask(a, op, 0);
    return answer(a, ANSWER_MS);
}

/* a's last request has not been answered (it blocks). */
static int blocked(actor *a) {
    dlt_sleep_ms(BLOCKED_MS);
    return dlt_flag_get(&a->done) != dlt_flag_get(&a->seq);
}

static void cast_end(cast *cs) {
    int i;
    for (i = 0; i < cs->n; i++) {
        if (cs->dead[i]) continue;
        ask(&cs->a[i], OP_QUIT, 0);
        DLT_ASSERT_INT_EQ(dlt_task_join(&cs->t[i], DLT_JOIN_MS), 0);
    }
    DLT_SHM_FREE(cs->a, cs->n);
}

/* The lock's registered waiting writers (dlock_lock_info: an upgrader
 * counts as one) reach want within ms. */
static int writers_reach(dlock_client_t *c, const char *name, unsigned want, int ms) {
    double end = dlt_now() + ms / 1000.0;
    for (;;) {
        dlock_lock_info_t in;
        if (dlock_lock_info(c, name, &in) == 0 && in.writers_waiting >= want) return 1;
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(10);
    }
}

/* ========================================================================
 * Scenarios, on the deployment of url (its client c, for dlock_lock_info).
 * ====================================================================== */

/* Readers A and B; writer W queues; A upgrades (waits for B); a newcomer
 * reader N is held back meanwhile; B leaves: A is the writer, under a
 * fence above its read fence, and W still waits; A unlocks: W gets in. */
static void sc_upgrade_goes_first(const char *url, dlock_client_t *c, const char *name) {
    cast cs;
    actor *A, *B, *W, *N;
    unsigned long long rfence;
    cast_start(&cs, 4, name, url, NULL);
    A = &cs.a[0], B = &cs.a[1], W = &cs.a[2], N = &cs.a[3];
    DLT_ASSERT_ERR(call(A, OP_RD), 0);
    DLT_ASSERT_ERR(call(B, OP_RD), 0);
    rfence = A->fence;
    CU_ASSERT(rfence > 0);
    ask(W, OP_WR, 0);
    CU_ASSERT_TRUE(blocked(W));
    CU_ASSERT_TRUE(writers_reach(c, name, 1, ANSWER_MS));
    ask(A, OP_UP, 0);
    CU_ASSERT_TRUE(blocked(A));
    CU_ASSERT_TRUE(writers_reach(c, name, 2, ANSWER_MS)); /* W and the upgrader */
    DLT_ASSERT_ERR(call(N, OP_TRYRD), EBUSY);            /* held back, as by a waiting writer */
    DLT_ASSERT_ERR(call(B, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(answer(A, ANSWER_MS), 0);
    DLT_ASSERT_INT_EQ(A->holds, 2);
    CU_ASSERT(A->fence > rfence);
    CU_ASSERT(A->fence > B->fence);
    CU_ASSERT_TRUE(blocked(W)); /* the upgrader went first */
    DLT_ASSERT_ERR(call(N, OP_TRYRD), EBUSY);
    DLT_ASSERT_ERR(call(A, OP_UNLOCK), 0);
    DLT_ASSERT_INT_EQ(A->holds, 0);
    DLT_ASSERT_ERR(answer(W, ANSWER_MS), 0);
    CU_ASSERT(W->fence > A->fence ? 1 : (printf("W %llu A %llu\n", W->fence, A->fence), 0));
    DLT_ASSERT_ERR(call(W, OP_UNLOCK), 0);
    cast_end(&cs);
}

/* Readers A and B both upgrade: A asked first and waits; B gets EDEADLK
 * and keeps its read lock; B's unlock lets A in. */
static void sc_two_upgraders(const char *url, dlock_client_t *c, const char *name) {
    cast cs;
    actor *A, *B;
    cast_start(&cs, 2, name, url, NULL);
    A = &cs.a[0], B = &cs.a[1];
    DLT_ASSERT_ERR(call(A, OP_RD), 0);
    DLT_ASSERT_ERR(call(B, OP_RD), 0);
    ask(A, OP_UP, 0);
    CU_ASSERT_TRUE(writers_reach(c, name, 1, ANSWER_MS));
    DLT_ASSERT_ERR(call(B, OP_UP), EDEADLK);
    DLT_ASSERT_INT_EQ(B->holds, 1); /* it still reads */
    CU_ASSERT(B->fence > 0);
    CU_ASSERT_TRUE(blocked(A));
    DLT_ASSERT_ERR(call(B, OP_TRYWR), EBUSY); /* read-locked by it: no write lock on top */
    DLT_ASSERT_ERR(call(B, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(answer(A, ANSWER_MS), 0);
    DLT_ASSERT_INT_EQ(A->holds, 2);
    DLT_ASSERT_ERR(call(B, OP_TRYRD), EBUSY);
    DLT_ASSERT_ERR(call(A, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(call(B, OP_TRYRD), 0);
    DLT_ASSERT_ERR(call(B, OP_UNLOCK), 0);
    cast_end(&cs);
}

/* Writer A; a prefer-reader reader R and a writer W wait; A downgrades:
 * R gets in at once, W stays out, A reads under its write fence; then a
 * writers-first reader D waiting alone is let in by a downgrade too. */
static void sc_downgrade(const char *url, dlock_client_t *c, const char *name) {
    static const int kinds[] = { DLOCK_RWLOCK_DEFAULT, DLOCK_RWLOCK_PREFER_READER, DLOCK_RWLOCK_DEFAULT,
                                 DLOCK_RWLOCK_DEFAULT };
    cast cs;
    actor *A, *R, *W, *D;
    unsigned long long wfence;
    cast_start(&cs, 4, name, url, kinds);
    A = &cs.a[0], R = &cs.a[1], W = &cs.a[2], D = &cs.a[3];
    DLT_ASSERT_ERR(call(A, OP_WR), 0);
    wfence = A->fence;
    ask(R, OP_RD, 0);
    ask(W, OP_WR, 0);
    CU_ASSERT_TRUE(blocked(R));
    CU_ASSERT_TRUE(writers_reach(c, name, 1, ANSWER_MS));
    DLT_ASSERT_ERR(call(A, OP_DOWN), 0);
    DLT_ASSERT_INT_EQ(A->holds, 1);
    DLT_ASSERT_INT_EQ((long long)(A->fence == wfence), 1);
    DLT_ASSERT_ERR(answer(R, ANSWER_MS), 0);
    CU_ASSERT_TRUE(blocked(W));
    DLT_ASSERT_ERR(call(A, OP_UNLOCK), 0);
    CU_ASSERT_TRUE(blocked(W));
    DLT_ASSERT_ERR(call(R, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(answer(W, ANSWER_MS), 0);
    CU_ASSERT(W->fence > wfence);
    /* W downgrades with a writers-first reader waiting alone. */
    ask(D, OP_RD, 0);
    CU_ASSERT_TRUE(blocked(D));
    DLT_ASSERT_ERR(call(W, OP_DOWN), 0);
    DLT_ASSERT_ERR(answer(D, ANSWER_MS), 0);
    DLT_ASSERT_ERR(call(A, OP_TRYWR), EBUSY);
    DLT_ASSERT_ERR(call(W, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(call(D, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(call(A, OP_TRYWR), 0);
    DLT_ASSERT_ERR(call(A, OP_UNLOCK), 0);
    cast_end(&cs);
}

/* ========================================================================
 * Tests
 * ====================================================================== */

static void test_upgrade_goes_before_queued_writer(void) {
    sc_upgrade_goes_first("", NULL, "conv/first");
}

static void test_two_upgraders_one_edeadlk(void) {
    sc_two_upgraders("", NULL, "conv/two");
}

static void test_downgrade_lets_readers_in(void) {
    sc_downgrade("", NULL, "conv/down");
}

/* EPERM without the hold the conversion needs; an upgrade alone is at
 * once; nested read locks convert together; EINVAL for bad objects. */
static void test_eperm_and_recursion(void) {
    dlock_rwlock_t rw, other;
    uint64_t f0;
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "conv/eperm", NULL), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&other, "conv/eperm", NULL), 0);
    DLT_ASSERT_ERR(dlock_rwlock_upgrade(&rw), EPERM);
    DLT_ASSERT_ERR(dlock_rwlock_downgrade(&rw), EPERM);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_downgrade(&rw), EPERM); /* a reader is no writer */
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&other), 0);     /* the thread's read lock, counted twice */
    f0 = dlock_rwlock_fence(&rw);
    DLT_ASSERT_ERR(dlock_rwlock_upgrade(&rw), 0);       /* the only reader: at once */
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 2);
    CU_ASSERT(dlock_rwlock_fence(&rw) > f0);
    DLT_ASSERT_ERR(dlock_rwlock_upgrade(&rw), EPERM);   /* a writer holds no read lock */
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 2);      /* still held: the count was 2 */
    DLT_ASSERT_INT_EQ(dlt_key_exists("conv/eperm"), 1);
    DLT_ASSERT_ERR(dlock_rwlock_downgrade(&rw), 0);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 1);
    DLT_ASSERT_INT_EQ(dlt_key_exists("conv/eperm"), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD dlock:{conv/eperm}:readers")), 1);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&other), 0);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS dlock:{conv/eperm}:readers")), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), EPERM);
    /* The uncontended write lock (the string form) downgrades too. */
    DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rw), 0);
    f0 = dlock_rwlock_fence(&rw);
    DLT_ASSERT_ERR(dlock_rwlock_downgrade(&rw), 0);
    DLT_ASSERT_INT_EQ((long long)(dlock_rwlock_fence(&rw) == f0), 1);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_upgrade(NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_rwlock_downgrade(&rw), EINVAL); /* destroyed */
}

/* The converted hold is renewed as its new kind: with a 1.2 s lease, a
 * write hold from an upgrade and then a read hold from a downgrade each
 * outlive three leases, still exclusive (another client's trywrlock and
 * tryrdlock: EBUSY) and then shared (tryrdlock 0, trywrlock EBUSY). */
static void test_renewed_after_conversion(void) {
    dlock_mutexattr_t a;
    dlock_rwlock_t rw;
    cast cs;
    actor *O;
    cast_start(&cs, 1, "conv/renew", "", NULL); /* (forked before this process has threads) */
    O = &cs.a[0];
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 1200), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "conv/renew", &a), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_upgrade(&rw), 0);
    dlt_sleep_ms(3600);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 2);
    DLT_ASSERT_ERR(call(O, OP_TRYWR), EBUSY);
    DLT_ASSERT_ERR(call(O, OP_TRYRD), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_downgrade(&rw), 0);
    dlt_sleep_ms(3600);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 1);
    DLT_ASSERT_ERR(call(O, OP_TRYWR), EBUSY);
    DLT_ASSERT_ERR(call(O, OP_TRYRD), 0);
    DLT_ASSERT_ERR(call(O, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(call(O, OP_TRYWR), 0);
    DLT_ASSERT_ERR(call(O, OP_UNLOCK), 0);
    cast_end(&cs);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
}

/* The other reader dies (SIGKILL) while A waits to upgrade: A is the
 * writer once that reader's lease has run out (1.5 s), not before. */
static void test_upgrade_outlives_dead_reader(void) {
    cast cs;
    actor *A;
    double t0;
    memset(&cs, 0, sizeof cs);
    cast_lease = 1500;
    cast_start(&cs, 2, "conv/dead", "", NULL);
    cast_lease = 0;
    A = &cs.a[0];
    DLT_ASSERT_ERR(call(A, OP_RD), 0);
    DLT_ASSERT_ERR(call(&cs.a[1], OP_RD), 0);
    ask(A, OP_UP, 0);
    CU_ASSERT_TRUE(blocked(A));
    t0 = dlt_now();
    dlt_task_signal(&cs.t[1], SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_task_join(&cs.t[1], DLT_JOIN_MS), 128 + SIGKILL);
    cs.dead[1] = 1;
    DLT_ASSERT_ERR(answer(A, ANSWER_MS), 0);
    /* (B renewed at most a third of its lease before it died) */
    CU_ASSERT(dlt_now() - t0 >= 0.9);
    CU_ASSERT(dlt_now() - t0 < 3.5);
    DLT_ASSERT_INT_EQ(A->holds, 2);
    DLT_ASSERT_ERR(call(A, OP_UNLOCK), 0);
    cast_end(&cs);
}

/* A timed upgrade that the other reader outlasts: ETIMEDOUT, the read
 * lock kept, the registration gone (a writers-first newcomer gets in). */
static void test_timed_upgrade(void) {
    cast cs;
    actor *A, *B, *N;
    double t0;
    cast_start(&cs, 3, "conv/timed", "", NULL);
    A = &cs.a[0], B = &cs.a[1], N = &cs.a[2];
    DLT_ASSERT_ERR(call(A, OP_RD), 0);
    DLT_ASSERT_ERR(call(B, OP_RD), 0);
    t0 = dlt_now();
    ask(A, OP_TIMEDUP, 500);
    DLT_ASSERT_ERR(answer(A, ANSWER_MS), ETIMEDOUT);
    CU_ASSERT(dlt_now() - t0 >= 0.45);
    DLT_ASSERT_INT_EQ(A->holds, 1);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS dlock:{conv/timed}:writers")), 0);
    DLT_ASSERT_ERR(call(N, OP_TRYRD), 0);
    DLT_ASSERT_ERR(call(N, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(call(B, OP_UNLOCK), 0);
    DLT_ASSERT_ERR(call(A, OP_UP), 0);
    DLT_ASSERT_ERR(call(A, OP_UNLOCK), 0);
    cast_end(&cs);
}

/* The read lock broken while its holder waits to upgrade: EPERM, and
 * the thread holds nothing. */
static void test_upgrade_lost_while_waiting(void) {
    cast cs;
    actor *A, *B;
    dlock_client_t *c = NULL;
    int was = 0;
    cast_start(&cs, 2, "conv/lost", "", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_server.url, 5000), 0);
    A = &cs.a[0], B = &cs.a[1];
    DLT_ASSERT_ERR(call(A, OP_RD), 0);
    DLT_ASSERT_ERR(call(B, OP_RD), 0);
    ask(A, OP_UP, 0);
    CU_ASSERT_TRUE(writers_reach(c, "conv/lost", 1, ANSWER_MS));
    DLT_ASSERT_ERR(dlock_break(c, "conv/lost", DLOCK_BREAK_RESET, &was), 0);
    DLT_ASSERT_ERR(answer(A, ANSWER_MS), EPERM);
    DLT_ASSERT_INT_EQ(A->holds, 0);
    DLT_ASSERT_ERR(call(B, OP_UNLOCK), EPERM); /* broken too */
    DLT_ASSERT_ERR(call(A, OP_TRYWR), 0);
    DLT_ASSERT_ERR(call(A, OP_UNLOCK), 0);
    cast_end(&cs);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* Polls until the lock's key and its readers are gone from the suite's
 * server (within ms): 1, or 0. */
static int lock_gone(const char *name, int ms) {
    double end = dlt_now() + ms / 1000.0;
    while (dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS dlock:{%s} dlock:{%s}:readers", name, name)) != 0) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(50);
    }
    return 1;
}

/* A conversion whose answer never comes within the unreachable bound:
 * ENOLCK, and the caller holds nothing -- whether the server made the
 * change (an upgrade whose answer was held back: the write hash is the
 * token's) or not (a downgrade dropped on the way: still the writer) --
 * and what the server holds goes as soon as it answers again, long before
 * the 30 s lease would run out (the next lock call of the process gives
 * it back first). */
static void test_unanswered_conversion(void) {
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_mutexattr_t a;
    dlock_rwlock_t rw;
    struct timespec ts;
    CU_ASSERT_FATAL(p != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(p), 1000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 30000), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "conv/noanswer", &a), 0);
    dlock_mutexattr_destroy(&a);

    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    dlt_proxy_set(p, DLT_PROXY_DELAY, 4000, NULL, 0);
    DLT_ASSERT_ERR(dlock_rwlock_upgrade(&rw), ENOLCK);
    CU_ASSERT(strstr(dlock_last_error(), "no longer held") != NULL);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 0);
    dlt_proxy_pass(p);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), EPERM);
    /* The next lock call gives back what the server may hold first: a
     * read or write hold of the old token would keep it out for 30 s. */
    ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    DLT_ASSERT_ERR(dlock_rwlock_timedwrlock(&rw, &ts), 0);

    dlt_proxy_set(p, DLT_PROXY_DROP, 0, NULL, 0);
    DLT_ASSERT_ERR(dlock_rwlock_downgrade(&rw), ENOLCK);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("conv/noanswer"), 1); /* not converted: still the writer's */
    dlt_proxy_pass(p);
    ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    DLT_ASSERT_ERR(dlock_rwlock_timedrdlock(&rw, &ts), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    CU_ASSERT_TRUE(lock_gone("conv/noanswer", 5000));

    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(p);
}

/* The three scenarios on a Redis Cluster of three masters. */
static void test_on_cluster(void) {
    dlt_cluster cl;
    dlock_client_t *c = NULL;
    char url[512];
    if (dlt_cluster_client(&cl, url, sizeof url, &c) != 0) {
        CU_FAIL("no cluster");
        return;
    }
    sc_upgrade_goes_first(url, c, "conv/cl/first");
    sc_two_upgraders(url, c, "conv/cl/two");
    sc_downgrade(url, c, "conv/cl/down");
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_cluster_cleanup(&cl);
}

/* Sentinel: the master it names converts as one server does. */
static void test_on_sentinel(void) {
    dlt_sentinel s;
    dlock_client_t *c = NULL;
    memset(&s, 0, sizeof s);
    if (dlt_sentinel_start(&s, 0, 1, NULL, 20000) != 0) {
        CU_FAIL("no sentinel deployment");
        dlt_sentinel_cleanup(&s);
        return;
    }
    DLT_ASSERT_ERR(dlt_client_make(&c, s.url, 5000), 0);
    sc_two_upgraders(s.url, c, "conv/se/two");
    sc_downgrade(s.url, c, "conv/se/down");
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_sentinel_cleanup(&s);
}

/* Redlock: no atomic conversion across independent masters: ENOTSUP,
 * and the hold stays as it was. */
static void test_redlock_enotsup(void) {
    dlt_masters m;
    dlock_client_t *c = NULL;
    dlock_mutexattr_t a;
    dlock_rwlock_t rw;
    memset(&m, 0, sizeof m);
    CU_ASSERT_FATAL(dlt_masters_start(&m, 3, 0) == 0);
    DLT_ASSERT_ERR(dlt_client_make(&c, m.url, 5000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "conv/redlock", &a), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_upgrade(&rw), ENOTSUP);
    CU_ASSERT(strstr(dlock_last_error(), "Redlock") != NULL);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 1);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_downgrade(&rw), ENOTSUP);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 2);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&m);
}

/* The tests that fork actors come first, before this process has taken a
 * lock itself (and so started the client's threads): GCC 12's
 * AddressSanitizer runtime is not fork-safe next to busy threads. */
static const struct dlt_test tests[] = {
    DLT_TEST(test_upgrade_goes_before_queued_writer),
    DLT_TEST(test_two_upgraders_one_edeadlk),
    DLT_TEST(test_downgrade_lets_readers_in),
    DLT_TEST(test_timed_upgrade),
    DLT_TEST(test_upgrade_outlives_dead_reader),
    DLT_TEST(test_upgrade_lost_while_waiting),
    DLT_TEST(test_on_cluster),
    DLT_TEST(test_on_sentinel),
    DLT_TEST(test_renewed_after_conversion),
    DLT_TEST(test_eperm_and_recursion),
    DLT_TEST(test_unanswered_conversion),
    DLT_TEST(test_redlock_enotsup),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "convert", tests);
}
