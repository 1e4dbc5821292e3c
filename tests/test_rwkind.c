/* test_rwkind.c -- rwlock kinds.
 * labels: redis; timeout: 240
 *
 * dlock_mutexattr_setrwkind, as glibc's pthread_rwlockattr_setkind_np:
 *   DLOCK_RWLOCK_PREFER_READER: a reader gets in whenever no writer holds
 *     the lock, even while writers wait (Linux flock(2) semantics);
 *   DLOCK_RWLOCK_PREFER_WRITER and _PREFER_WRITER_NONRECURSIVE (the
 *     default): writers first, a waiting writer holds new readers back;
 *   any other value: EINVAL.
 * In every kind a thread that holds a read lock takes it again without
 * waiting, whoever waits (glibc's rule against self-deadlock): the read
 * hold is counted in the thread, no round trip.
 *
 * The "other side" (the waiting writer, the newcomer reader) runs as a
 * child process (another host, as far as the lock can tell) or as a
 * thread of the test; workers report through MAP_SHARED memory and their
 * result.  Processes are forked before threads are started.
 */
#include "fixture.h"

#include <dlock.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define NULL_ATTR (-1) /* a kind of "no attributes at all" */

static const char *kind_name(int kind) {
    switch (kind) {
    case DLOCK_RWLOCK_PREFER_READER: return "prefer-reader";
    case DLOCK_RWLOCK_PREFER_WRITER: return "prefer-writer";
    case DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE: return "prefer-writer-nonrecursive";
    default: return "default (NULL attributes)";
    }
}

/* An rwlock of name with kind (NULL_ATTR: dlock_rwlock_init with NULL)
 * on client c (NULL: the default client). */
static int rw_make_on(dlock_rwlock_t *rw, const char *name, int kind, dlock_client_t *c) {
    dlock_mutexattr_t a;
    int rc;
    if (kind == NULL_ATTR && c == NULL) return dlock_rwlock_init(rw, name, NULL);
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (kind != NULL_ATTR) rc = dlock_mutexattr_setrwkind(&a, kind);
    if (rc == 0 && c != NULL) rc = dlock_mutexattr_setclient(&a, c);
    if (rc == 0) rc = dlock_rwlock_init(rw, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static int rw_make(dlock_rwlock_t *rw, const char *name, int kind) {
    return rw_make_on(rw, name, kind, NULL);
}

/* A client of url ("": none, the default client is used). */
static int client_for(const char *url, dlock_client_t **out) {
    dlock_config_t cfg;
    *out = NULL;
    if (url[0] == '\0') return 0;
    dlock_config_init(&cfg);
    cfg.url = url;
    return dlock_client_create(out, &cfg);
}

/* The members of the lock's zset `what` (readers, writers), or the
 * entries of its fair queue (fifo, a list). */
static long long zcard(const char *name, const char *what) {
    const char *cmd = strcmp(what, "fifo") == 0 ? "LLEN dlock:{%s}:%s" : "ZCARD dlock:{%s}:%s";
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, cmd, name, what));
}

static int wait_zcard_ge(const char *name, const char *what, long long want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (zcard(name, what) < want) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(5);
    }
    return 1;
}

/* ========================================================================
 * The attribute: values, default, EINVAL.
 * ====================================================================== */

static void test_attr_rwkind(void) {
    dlock_mutexattr_t a, gone;
    int k = -7;
    int bad[] = { -1, 3, 4, 42, INT_MIN, INT_MAX };
    size_t i;

    /* glibc's numbering, and the default named. */
    DLT_ASSERT_INT_EQ(DLOCK_RWLOCK_PREFER_READER, 0);
    DLT_ASSERT_INT_EQ(DLOCK_RWLOCK_PREFER_WRITER, 1);
    DLT_ASSERT_INT_EQ(DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE, 2);
    DLT_ASSERT_INT_EQ(DLOCK_RWLOCK_DEFAULT, DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE);

    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getrwkind(&a, &k), 0);
    DLT_ASSERT_INT_EQ(k, DLOCK_RWLOCK_DEFAULT);
    for (k = DLOCK_RWLOCK_PREFER_READER; k <= DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE; k++) {
        int got = -7;
        DLT_ASSERT_ERR(dlock_mutexattr_setrwkind(&a, k), 0);
        DLT_ASSERT_ERR(dlock_mutexattr_getrwkind(&a, &got), 0);
        DLT_ASSERT_INT_EQ(got, k);
    }
    /* Bad values: EINVAL, and the kind set before stays. */
    DLT_ASSERT_ERR(dlock_mutexattr_setrwkind(&a, DLOCK_RWLOCK_PREFER_READER), 0);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        DLT_ASSERT_ERR(dlock_mutexattr_setrwkind(&a, bad[i]), EINVAL);
        CU_ASSERT(strstr(dlock_last_error(), "kind") != NULL);
    }
    DLT_ASSERT_ERR(dlock_mutexattr_getrwkind(&a, &k), 0);
    DLT_ASSERT_INT_EQ(k, DLOCK_RWLOCK_PREFER_READER);
    /* Bad objects and pointers. */
    DLT_ASSERT_ERR(dlock_mutexattr_setrwkind(NULL, DLOCK_RWLOCK_PREFER_READER), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getrwkind(NULL, &k), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getrwkind(&a, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&gone), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&gone), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setrwkind(&gone, DLOCK_RWLOCK_PREFER_READER), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getrwkind(&gone, &k), EINVAL);
    /* A mutex made with any kind is a mutex as before. */
    {
        dlock_mutex_t m;
        DLT_ASSERT_ERR(dlock_mutex_init(&m, "rwkind/attr/mutex", &a), 0);
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    }
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
}

/* ========================================================================
 * Workers.
 * ====================================================================== */

/* A writer: takes the write lock (waiting), says so, holds it until told
 * to release. */
typedef struct writer {
    char name[64];
    char url[256]; /* "": the default client */
    int kind;
    int started, got, release;
    int rc;
    double t_got;
} writer;

static int writer_main(void *p) {
    writer *w = p;
    dlock_client_t *c;
    dlock_rwlock_t rw;
    DLT_CK(client_for(w->url, &c), 0);
    DLT_CK(rw_make_on(&rw, w->name, w->kind, c), 0);
    dlt_flag_set(&w->started, 1);
    w->rc = dlock_rwlock_wrlock(&rw);
    w->t_got = dlt_now();
    dlt_flag_set(&w->got, 1);
    DLT_CK(w->rc, 0);
    DLT_CKT(dlt_flag_wait(&w->release, 1, DLT_JOIN_MS - 5000));
    DLT_CK(dlock_rwlock_unlock(&rw), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    if (c != NULL) DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

/* A newcomer reader: tryrdlock, a timed rdlock (timed_ms ahead), and
 * xlock(shared, TRY), each unlocked again when it succeeds; the answers
 * and the timed call's duration go to rc[] and timed_s. */
typedef struct probe {
    char name[64];
    char url[256]; /* "": the default client */
    int kind;
    long timed_ms;
    int rc[3];
    double timed_s;
} probe;

static int probe_main(void *p) {
    probe *q = p;
    dlock_client_t *c;
    dlock_rwlock_t rw;
    struct timespec ts;
    double t0;
    DLT_CK(client_for(q->url, &c), 0);
    DLT_CK(rw_make_on(&rw, q->name, q->kind, c), 0);
    if ((q->rc[0] = dlock_rwlock_tryrdlock(&rw)) == 0) DLT_CK(dlock_rwlock_unlock(&rw), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, q->timed_ms);
    t0 = dlt_now();
    q->rc[1] = dlock_rwlock_timedrdlock(&rw, &ts);
    q->timed_s = dlt_now() - t0;
    if (q->rc[1] == 0) DLT_CK(dlock_rwlock_unlock(&rw), 0);
    if ((q->rc[2] = dlock_rwlock_xlock(&rw, 1, DLOCK_F_TRY, CLOCK_MONOTONIC, NULL)) == 0)
        DLT_CK(dlock_rwlock_unlock(&rw), 0);
    DLT_CK(dlock_rwlock_holds(&rw), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    if (c != NULL) DLT_CK(dlock_client_destroy(c), 0);
    return 0;
}

static void run_probe(probe *q, int proc) {
    dlt_task t;
    dlt_task_start(&t, proc, probe_main, q);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
}

/* ========================================================================
 * The policy: while a writer waits for a reader, does a new reader get
 * in?  Prefer-reader: yes, at once; the writers-first kinds (and NULL
 * attributes): no, until the writer has had its turn.  Whoever holds the
 * write lock keeps every reader out, in every kind.
 * ====================================================================== */

static void policy_row(int kind, int proc) {
    char name[64];
    writer *w = DLT_SHM_NEW(writer, 1);
    probe *q = DLT_SHM_NEW(probe, 1);
    dlock_rwlock_t rw;
    dlt_task wt;
    double t_unlock;
    int readfirst = kind == DLOCK_RWLOCK_PREFER_READER;

    snprintf(name, sizeof name, "rwkind/policy/%d/%d", kind, proc);
    fprintf(stderr, "  %s, the others %s\n", kind_name(kind), proc ? "processes" : "threads of this one");
    snprintf(w->name, sizeof w->name, "%s", name);
    w->kind = kind;
    snprintf(q->name, sizeof q->name, "%s", name);
    q->kind = kind;

    /* This thread reads; a writer comes to wait for it. */
    DLT_ASSERT_ERR(rw_make(&rw, name, kind), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    dlt_task_start(&wt, proc, writer_main, w);
    CU_ASSERT_TRUE(wait_zcard_ge(name, "writers", 1, 10000));
    dlt_sleep_ms(50);
    CU_ASSERT_FALSE(dlt_flag_get(&w->got));

    /* A new reader (another process, or another thread of this one). */
    q->timed_ms = readfirst ? 5000 : 300;
    run_probe(q, proc);
    if (readfirst) {
        DLT_ASSERT_ERR(q->rc[0], 0);
        DLT_ASSERT_ERR(q->rc[1], 0);
        DLT_ASSERT_ERR(q->rc[2], 0);
        CU_ASSERT(q->timed_s < 2.0); /* in at once, not at the 5 s deadline */
    } else {
        DLT_ASSERT_ERR(q->rc[0], EBUSY);
        DLT_ASSERT_ERR(q->rc[1], ETIMEDOUT);
        DLT_ASSERT_ERR(q->rc[2], EBUSY);
    }
    /* The writer still waits for this thread, in every kind. */
    CU_ASSERT_FALSE(dlt_flag_get(&w->got));
    DLT_ASSERT_INT_EQ(zcard(name, "writers"), 1);

    /* The last reader leaves: the writer gets the lock, promptly. */
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    t_unlock = dlt_now();
    CU_ASSERT_TRUE(dlt_flag_wait(&w->got, 1, 10000));
    DLT_ASSERT_ERR(w->rc, 0);
    CU_ASSERT(w->t_got - t_unlock < 2.0);

    /* A held write lock keeps readers out, whatever the kind. */
    q->timed_ms = 200;
    run_probe(q, proc);
    DLT_ASSERT_ERR(q->rc[0], EBUSY);
    DLT_ASSERT_ERR(q->rc[1], ETIMEDOUT);
    DLT_ASSERT_ERR(q->rc[2], EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), EBUSY);

    dlt_flag_set(&w->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&wt, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(q, 1);
    DLT_SHM_FREE(w, 1);
}

static void test_prefer_reader_admits_reader_while_writer_waits(void) {
    policy_row(DLOCK_RWLOCK_PREFER_READER, DLT_PROC);
    policy_row(DLOCK_RWLOCK_PREFER_READER, DLT_THREAD);
}

static void test_prefer_writer_holds_reader_back(void) {
    policy_row(DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE, DLT_PROC);
    policy_row(DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE, DLT_THREAD);
    policy_row(DLOCK_RWLOCK_PREFER_WRITER, DLT_PROC);
    policy_row(DLOCK_RWLOCK_PREFER_WRITER, DLT_THREAD);
    policy_row(NULL_ATTR, DLT_PROC); /* the default is writers first */
}

/* ========================================================================
 * A read lock taken by a thread that holds one already never waits, in
 * every kind, while a writer waits for that very hold: not even a call
 * whose deadline has passed fails, and no other call blocks.  Each take
 * needs its unlock; the writer gets the lock only at the last one.
 * ====================================================================== */

static void recursive_row(int kind, int proc) {
    char name[64];
    writer *w = DLT_SHM_NEW(writer, 1);
    dlock_rwlock_t rw, other;
    dlt_task wt;
    struct timespec past;
    double t0;
    int i, n = 0;

    snprintf(name, sizeof name, "rwkind/recursive/%d/%d", kind, proc);
    fprintf(stderr, "  %s, the writer a %s\n", kind_name(kind), proc ? "process" : "thread");
    snprintf(w->name, sizeof w->name, "%s", name);
    w->kind = kind;

    DLT_ASSERT_ERR(rw_make(&rw, name, kind), 0);
    DLT_ASSERT_ERR(rw_make(&other, name, kind), 0); /* a second object of the name */
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    n++;
    dlt_task_start(&wt, proc, writer_main, w);
    CU_ASSERT_TRUE(wait_zcard_ge(name, "writers", 1, 10000));
    dlt_sleep_ms(50);
    CU_ASSERT_FALSE(dlt_flag_get(&w->got));

    t0 = dlt_now();
    past = dlt_abs_in(CLOCK_REALTIME, -100);
    DLT_ASSERT_ERR(dlock_rwlock_timedrdlock(&rw, &past), 0); /* no waiting: no deadline to miss */
    n++;
    past = dlt_abs_in(CLOCK_MONOTONIC, -100);
    DLT_ASSERT_ERR(dlock_rwlock_clockrdlock(&rw, CLOCK_MONOTONIC, &past), 0);
    n++;
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), 0);
    n++;
    DLT_ASSERT_ERR(dlock_rwlock_xlock(&rw, 1, DLOCK_F_TRY, CLOCK_MONOTONIC, NULL), 0);
    n++;
    past = dlt_abs_in(CLOCK_REALTIME, -100);
    DLT_ASSERT_ERR(dlock_rwlock_timedrdlock(&other, &past), 0); /* another object, the same hold */
    n++;
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&other), 0);
    n++;
    {
        /* The blocking forms, bounded by a watchdog: a 2 s timed call
         * went first, so a blocking one cannot hang the run. */
        struct timespec soon = dlt_abs_in(CLOCK_REALTIME, 2000);
        int rc = dlock_rwlock_timedrdlock(&rw, &soon);
        DLT_ASSERT_ERR(rc, 0);
        if (rc == 0) {
            n++;
            DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
            n++;
            DLT_ASSERT_ERR(dlock_rwlock_xlock(&other, 1, DLOCK_F_INTR, CLOCK_MONOTONIC, NULL), 0);
            n++;
        }
    }
    CU_ASSERT(dlt_now() - t0 < 1.5);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 1);
    DLT_ASSERT_INT_EQ(zcard(name, "readers"), 1); /* one hold on the server, counted here */
    CU_ASSERT_FALSE(dlt_flag_get(&w->got));

    /* Every take but the last unlocked: the writer still waits. */
    for (i = 1; i < n; i++) DLT_ASSERT_ERR(dlock_rwlock_unlock(i % 2 ? &rw : &other), 0);
    dlt_sleep_ms(200);
    CU_ASSERT_FALSE(dlt_flag_get(&w->got));
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 1);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    CU_ASSERT_TRUE(dlt_flag_wait(&w->got, 1, 10000));
    DLT_ASSERT_ERR(w->rc, 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), EPERM);
    dlt_flag_set(&w->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&wt, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(w, 1);
}

static void test_recursive_read_never_waits(void) {
    recursive_row(DLOCK_RWLOCK_PREFER_READER, DLT_PROC);
    recursive_row(DLOCK_RWLOCK_PREFER_READER, DLT_THREAD);
    recursive_row(DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE, DLT_PROC);
    recursive_row(DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE, DLT_THREAD);
    recursive_row(DLOCK_RWLOCK_PREFER_WRITER, DLT_PROC);
    recursive_row(NULL_ATTR, DLT_THREAD);
}

/* ========================================================================
 * Two kinds in one process, one name: the kind belongs to each reader's
 * request.  A writers-first reader thread waits behind the writer; a
 * prefer-reader thread of the same process, asking meanwhile, gets in.
 * ====================================================================== */

typedef struct rdr {
    char name[64];
    int kind;
    long timed_ms; /* 0: rdlock */
    int started, done, rc;
    double took;
} rdr;

static int rdr_main(void *p) {
    rdr *r = p;
    dlock_rwlock_t rw;
    double t0;
    DLT_CK(rw_make(&rw, r->name, r->kind), 0);
    dlt_flag_set(&r->started, 1);
    t0 = dlt_now();
    if (r->timed_ms > 0) {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, r->timed_ms);
        r->rc = dlock_rwlock_timedrdlock(&rw, &ts);
    } else {
        r->rc = dlock_rwlock_rdlock(&rw);
    }
    r->took = dlt_now() - t0;
    if (r->rc == 0) DLT_CK(dlock_rwlock_unlock(&rw), 0);
    dlt_flag_set(&r->done, 1);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    return 0;
}

static void test_kinds_side_by_side(void) {
    const char *name = "rwkind/side";
    writer *w = DLT_SHM_NEW(writer, 1);
    rdr *r = DLT_SHM_NEW(rdr, 2);
    dlock_rwlock_t rw;
    dlt_task wt, t1, t2;

    snprintf(w->name, sizeof w->name, "%s", name);
    w->kind = NULL_ATTR;
    snprintf(r[0].name, sizeof r[0].name, "%s", name);
    r[0].kind = DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE;
    snprintf(r[1].name, sizeof r[1].name, "%s", name);
    r[1].kind = DLOCK_RWLOCK_PREFER_READER;
    r[1].timed_ms = 4000;

    DLT_ASSERT_ERR(rw_make(&rw, name, DLOCK_RWLOCK_PREFER_READER), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    dlt_task_start(&wt, DLT_PROC, writer_main, w); /* forked before any thread */
    CU_ASSERT_TRUE(wait_zcard_ge(name, "writers", 1, 10000));
    /* A writers-first reader thread waits behind the writer... */
    dlt_task_start(&t1, DLT_THREAD, rdr_main, &r[0]);
    CU_ASSERT_TRUE(dlt_flag_wait(&r[0].started, 1, 10000));
    dlt_sleep_ms(300);
    CU_ASSERT_FALSE(dlt_flag_get(&r[0].done));
    /* ...a prefer-reader one of the same process gets in at once. */
    dlt_task_start(&t2, DLT_THREAD, rdr_main, &r[1]);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t2, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(r[1].rc, 0);
    CU_ASSERT(r[1].took < 2.0);
    CU_ASSERT_FALSE(dlt_flag_get(&r[0].done));
    CU_ASSERT_FALSE(dlt_flag_get(&w->got));
    /* The reader leaves: the writer, then the writers-first reader. */
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    CU_ASSERT_TRUE(dlt_flag_wait(&w->got, 1, 10000));
    DLT_ASSERT_ERR(w->rc, 0);
    CU_ASSERT_FALSE(dlt_flag_get(&r[0].done));
    dlt_flag_set(&w->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&wt, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t1, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(r[0].rc, 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(r, 2);
    DLT_SHM_FREE(w, 1);
}

/* ========================================================================
 * Prefer-reader with a fair writer: the fair queue does not hold a
 * prefer-reader reader back either (it holds a writers-first one back). */

static int fair_writer_main(void *p) {
    writer *w = p;
    dlock_mutexattr_t a;
    dlock_rwlock_t rw;
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_setfair(&a, 1), 0);
    DLT_CK(dlock_rwlock_init(&rw, w->name, &a), 0);
    DLT_CK(dlock_mutexattr_destroy(&a), 0);
    dlt_flag_set(&w->started, 1);
    w->rc = dlock_rwlock_wrlock(&rw);
    w->t_got = dlt_now();
    dlt_flag_set(&w->got, 1);
    DLT_CK(w->rc, 0);
    DLT_CKT(dlt_flag_wait(&w->release, 1, DLT_JOIN_MS - 5000));
    DLT_CK(dlock_rwlock_unlock(&rw), 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    return 0;
}

static void test_prefer_reader_and_fair_queue(void) {
    const char *name = "rwkind/fair";
    writer *w = DLT_SHM_NEW(writer, 1);
    probe *q = DLT_SHM_NEW(probe, 2);
    dlock_rwlock_t rw;
    dlt_task wt;

    snprintf(w->name, sizeof w->name, "%s", name);
    snprintf(q[0].name, sizeof q[0].name, "%s", name);
    q[0].kind = DLOCK_RWLOCK_PREFER_READER;
    q[0].timed_ms = 4000;
    snprintf(q[1].name, sizeof q[1].name, "%s", name);
    q[1].kind = DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE;
    q[1].timed_ms = 300;

    DLT_ASSERT_ERR(rw_make(&rw, name, DLOCK_RWLOCK_PREFER_READER), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    dlt_task_start(&wt, DLT_PROC, fair_writer_main, w);
    CU_ASSERT_TRUE(wait_zcard_ge(name, "fifo", 1, 10000));
    run_probe(&q[0], DLT_PROC);
    DLT_ASSERT_ERR(q[0].rc[0], 0);
    DLT_ASSERT_ERR(q[0].rc[1], 0);
    DLT_ASSERT_ERR(q[0].rc[2], 0);
    CU_ASSERT(q[0].timed_s < 2.0);
    run_probe(&q[1], DLT_PROC);
    DLT_ASSERT_ERR(q[1].rc[0], EBUSY);
    DLT_ASSERT_ERR(q[1].rc[1], ETIMEDOUT);
    DLT_ASSERT_ERR(q[1].rc[2], EBUSY);
    CU_ASSERT_FALSE(dlt_flag_get(&w->got));
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    CU_ASSERT_TRUE(dlt_flag_wait(&w->got, 1, 10000));
    DLT_ASSERT_ERR(w->rc, 0);
    dlt_flag_set(&w->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&wt, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(zcard(name, "fifo"), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_SHM_FREE(q, 2);
    DLT_SHM_FREE(w, 1);
}

/* ========================================================================
 * Redlock: the kind travels to every master.  Three masters; a reader
 * holds, a writer (another process) waits; a new prefer-reader reader gets
 * in on a quorum, a writers-first one is held back.
 * ====================================================================== */

static void test_kinds_on_redlock(void) {
    const char *name = "rwkind/redlock";
    dlt_redis m[3];
    char url[256];
    writer *w = DLT_SHM_NEW(writer, 1);
    probe *q = DLT_SHM_NEW(probe, 2);
    dlock_client_t *c = NULL;
    dlock_rwlock_t rw;
    dlt_task wt;
    size_t n;
    int i, ok = 1;

    memset(m, 0, sizeof m);
    n = (size_t)snprintf(url, sizeof url, "redlock://");
    for (i = 0; i < 3 && ok; i++) {
        if (dlt_redis_start(&m[i], NULL) != 0) ok = 0;
        else n += (size_t)snprintf(url + n, sizeof url - n, "%s127.0.0.1:%d", i ? "," : "", m[i].port);
    }
    CU_ASSERT_FATAL(ok);
    snprintf(w->url, sizeof w->url, "%s", url);
    snprintf(w->name, sizeof w->name, "%s", name);
    w->kind = NULL_ATTR;
    for (i = 0; i < 2; i++) {
        snprintf(q[i].url, sizeof q[i].url, "%s", url);
        snprintf(q[i].name, sizeof q[i].name, "%s", name);
    }
    q[0].kind = DLOCK_RWLOCK_PREFER_READER;
    q[0].timed_ms = 4000;
    q[1].kind = DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE;
    q[1].timed_ms = 300;

    DLT_ASSERT_ERR(client_for(url, &c), 0);
    DLT_ASSERT_ERR(rw_make_on(&rw, name, DLOCK_RWLOCK_PREFER_READER, c), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    dlt_task_start(&wt, DLT_PROC, writer_main, w);
    {
        double end = dlt_now() + 10;
        long long k = 0;
        while (dlt_now() < end) {
            for (k = 0, i = 0; i < 3; i++)
                k += dlt_reply_int(dlt_redis_cmd(&m[i], "ZCARD dlock:{%s}:writers", name)) >= 1;
            if (k >= 2) break;
            dlt_sleep_ms(5);
        }
        CU_ASSERT(k >= 2); /* registered on a quorum */
    }
    run_probe(&q[0], DLT_PROC);
    DLT_ASSERT_ERR(q[0].rc[0], 0);
    DLT_ASSERT_ERR(q[0].rc[1], 0);
    DLT_ASSERT_ERR(q[0].rc[2], 0);
    CU_ASSERT(q[0].timed_s < 2.0);
    run_probe(&q[1], DLT_PROC);
    DLT_ASSERT_ERR(q[1].rc[0], EBUSY);
    DLT_ASSERT_ERR(q[1].rc[1], ETIMEDOUT);
    DLT_ASSERT_ERR(q[1].rc[2], EBUSY);
    CU_ASSERT_FALSE(dlt_flag_get(&w->got));
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    CU_ASSERT_TRUE(dlt_flag_wait(&w->got, 1, 10000));
    DLT_ASSERT_ERR(w->rc, 0);
    dlt_flag_set(&w->release, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&wt, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    for (i = 0; i < 3; i++) dlt_redis_cleanup(&m[i]);
    DLT_SHM_FREE(q, 2);
    DLT_SHM_FREE(w, 1);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_attr_rwkind),
    DLT_TEST(test_prefer_reader_admits_reader_while_writer_waits),
    DLT_TEST(test_prefer_writer_holds_reader_back),
    DLT_TEST(test_recursive_read_never_waits),
    DLT_TEST(test_kinds_side_by_side),
    DLT_TEST(test_prefer_reader_and_fair_queue),
    DLT_TEST(test_kinds_on_redlock),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "rwkind", tests);
}
