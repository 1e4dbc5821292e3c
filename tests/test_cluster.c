/* labels: redis; timeout: 240 */
/* test_cluster.c -- Redis Cluster deployments: redis+cluster:// URLs
 * (src/backend/cluster.c, the redirections in src/net/cmd.c).
 *
 * The suite forms one cluster of three masters without replicas, on free
 * loopback ports (the fixture's dlt_cluster, fixture_multi.h: CLUSTER
 * ADDSLOTSRANGE, CLUSTER MEET, polled until every node says
 * cluster_state:ok and all three agree on the slot map), and reuses it
 * from test to test: before each test it checks that the cluster is still
 * whole and healthy (re-forming it if not) and empties every node.  A test
 * that moves a slot moves it back.  The test that kills a node runs last.
 * The suite's own server (dlt_server) is used only as a plain, non-cluster
 * Redis.
 *
 * Lock keys are located independently of the library: each key's hash
 * slot is computed by the fixture (dlt_key_slot: CRC16, checked against
 * CLUSTER KEYSLOT) and the nodes are asked directly.  Nothing asserts a
 * speed; the few time bounds are generous and separate "woken by a
 * notification" from "waited out a 10 s lease", or "bounded" from "hangs".
 *
 * Processes are forked before the test process makes any client of its
 * own in that test (AddressSanitizer and fork: see fixture.h).
 *
 * The last test forms a TLS-only cluster in place of the plain one
 * (dlt_cluster_start with tls: certificates from dlt_tls_dir; the test's own
 * admin commands go over TLS through the fixture) and uses it through
 * rediss+cluster://.
 */
#define DLT_CK_MOD 120 /* worker codes 1..120: clear of 128 + signal */
#include "fixture_multi.h"

#include <dlock.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ========================================================================
 * The cluster
 * ====================================================================== */

#define NN 3 /* masters */
#define SLOTS DLT_SLOTS
/* The TLS-only cluster (dlt_redis_start_tls: "port 0", "tls-port P"):
 * clients and the cluster bus over TLS, no client certificate asked for. */
#define CL_TLS_CONF "tls-cluster yes\ntls-auth-clients no"

static dlt_cluster clus; /* the shared cluster: the plain one, or the TLS-only one */
static int cl_failed[2]; /* forming it (plain, TLS) failed once: do not try again */

/* The cluster (tls: the TLS-only one, formed in place of the plain one),
 * whole, healthy and empty, with zero command counts. */
static int cl_ensure(int tls) {
    if (clus.n == 0 || clus.tls != tls || !dlt_cluster_healthy(&clus, 1)) {
        if (cl_failed[tls]) return 0;
        if (clus.n > 0 && clus.tls == tls)
            fprintf(stderr, "  cluster: not healthy after the last test; forming it again\n");
        if (dlt_cluster_start(&clus, NN, 0, tls, tls ? CL_TLS_CONF : NULL) != 0) {
            cl_failed[tls] = 1;
            return 0;
        }
        printf("  %scluster formed: nodes at ports %d, %d, %d\n", tls ? "TLS-only " : "", clus.node[0].port,
               clus.node[1].port, clus.node[2].port);
    }
    return dlt_cluster_flush(&clus) == 0;
}

#define CL_UP()                              \
    do {                                     \
        int ok_ = cl_ensure(0);              \
        CU_ASSERT_TRUE_FATAL(ok_);           \
    } while (0)
#define CL_TLS_UP()                          \
    do {                                     \
        int ok_ = cl_ensure(1);              \
        CU_ASSERT_TRUE_FATAL(ok_);           \
    } while (0)

/* ========================================================================
 * Keys on the nodes (the slots: the fixture's dlt_key_slot, CRC16
 * computed independently of the library)
 * ====================================================================== */

/* A command on node i after ASKING, on one connection (for a slot that
 * node imports); the reply, or NULL. */
static redisReply *cmd_asking(int i, const char *fmt, ...) {
    struct timeval tv = { 2, 0 };
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", clus.node[i].port, tv);
    redisReply *r = NULL;
    va_list ap;
    if (ctx == NULL || ctx->err) {
        if (ctx != NULL) redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    r = redisCommand(ctx, "ASKING");
    if (r != NULL) freeReplyObject(r);
    va_start(ap, fmt);
    r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    redisFree(ctx);
    return r;
}

/* EXISTS key on node i after ASKING: 1, 0, or -1. */
static int exists_asking(int i, const char *key) {
    redisReply *r = cmd_asking(i, "EXISTS %s", key);
    int v = r != NULL && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    if (r != NULL) freeReplyObject(r);
    return v;
}

/* Keys node i holds in slot (CLUSTER COUNTKEYSINSLOT), or -1. */
static long long keys_in_slot(int i, int slot) {
    return dlt_reply_int(dlt_redis_cmd(&clus.node[i], "CLUSTER COUNTKEYSINSLOT %d", slot));
}

/* ========================================================================
 * dlock objects
 * ====================================================================== */

static int mutex_make(dlock_mutex_t *m, const char *name, dlock_client_t *cl, unsigned lease_ms, int fair,
                      int caching, dlock_lost_fn lost, void *lost_arg) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    rc = dlock_mutexattr_setclient(&a, cl);
    if (rc == 0 && lease_ms) rc = dlock_mutexattr_setlease(&a, lease_ms);
    if (rc == 0 && fair) rc = dlock_mutexattr_setfair(&a, 1);
    if (rc == 0 && caching) rc = dlock_mutexattr_setcaching(&a, 1);
    if (rc == 0 && lost) rc = dlock_mutexattr_setlostcallback(&a, lost, lost_arg);
    if (rc == 0) rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static int timedlock_ms(dlock_mutex_t *m, long ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    return dlock_mutex_timedlock(m, &ts);
}

static int lost_calls;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)arg;
    fprintf(stderr, "  lost-lock handler: %s\n", name);
    dlt_flag_add(&lost_calls, 1);
}

/* ========================================================================
 * Slot migration, the standard way
 * ====================================================================== */

/* While the test waits, it checks that the calling thread still holds
 * *hold_m (if set): how often, and how often it did not. */
static dlock_mutex_t *hold_m;
static int hold_checks, hold_misses;

static void pause_checking(unsigned ms) {
    double end = dlt_now() + ms / 1000.0;
    do {
        if (hold_m != NULL) {
            hold_checks++;
            if (dlock_mutex_holds(hold_m) != 1) hold_misses++;
        }
        dlt_sleep_ms(20);
    } while (dlt_now() < end);
}

/* CLUSTER SETSLOT slot IMPORTING on b, MIGRATING on a.  1 or 0. */
static int slot_begin(int slot, int a, int b) {
    return dlt_reply_ok(dlt_redis_cmd(&clus.node[b], "CLUSTER SETSLOT %d IMPORTING %s", slot, clus.id[a])) &&
           dlt_reply_ok(dlt_redis_cmd(&clus.node[a], "CLUSTER SETSLOT %d MIGRATING %s", slot, clus.id[b]));
}

/* Moves every key of slot from a to b, MIGRATE by MIGRATE, with pause_ms
 * between keys, until a has none left (at most 15 s).  Keys moved, or -1. */
static int move_keys(int slot, int a, int b, unsigned pause_ms) {
    double end = dlt_now() + 15.0;
    int moved = 0;
    while (dlt_now() < end) {
        redisReply *r = dlt_redis_cmd(&clus.node[a], "CLUSTER GETKEYSINSLOT %d 100", slot);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
            if (r != NULL) freeReplyObject(r);
            return -1;
        }
        if (r->elements == 0) {
            freeReplyObject(r);
            return moved;
        }
        for (size_t k = 0; k < r->elements; k++) {
            redisReply *x = dlt_redis_cmd(&clus.node[a], "MIGRATE 127.0.0.1 %d %s 0 5000", clus.node[b].port,
                                          r->element[k]->str);
            /* OK, or NOKEY: it expired or was deleted meanwhile */
            if (x != NULL && x->type == REDIS_REPLY_STATUS && strcmp(x->str, "OK") == 0) moved++;
            else if (x == NULL || x->type == REDIS_REPLY_ERROR)
                fprintf(stderr, "  MIGRATE %s: %s\n", r->element[k]->str, x ? x->str : "no answer");
            if (x != NULL) freeReplyObject(x);
            if (pause_ms) pause_checking(pause_ms);
        }
        freeReplyObject(r);
    }
    return -1;
}

/* CLUSTER SETSLOT slot NODE b on b, then on the others (the source only
 * once it has no key of the slot left), and waits until every node names
 * b.  1 or 0. */
static int slot_end(int slot, int a, int b) {
    int ok = dlt_reply_ok(dlt_redis_cmd(&clus.node[b], "CLUSTER SETSLOT %d NODE %s", slot, clus.id[b]));
    for (int tries = 0; ok && tries < 20; tries++) {
        if (move_keys(slot, a, b, 0) < 0) return 0;
        redisReply *r = dlt_redis_cmd(&clus.node[a], "CLUSTER SETSLOT %d NODE %s", slot, clus.id[b]);
        int done = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL) freeReplyObject(r);
        if (done) break;
        if (tries == 19) ok = 0;
    }
    for (int i = 0; ok && i < NN; i++)
        if (i != a && i != b)
            ok = dlt_reply_ok(dlt_redis_cmd(&clus.node[i], "CLUSTER SETSLOT %d NODE %s", slot, clus.id[b]));
    if (!ok) return 0;
    for (double end = dlt_now() + 10.0; dlt_now() < end; pause_checking(50)) {
        static signed char map[SLOTS];
        int agree = 1;
        for (int i = 0; i < NN && agree; i++) agree = dlt_cluster_slot_map(&clus, i, map) > 0 && map[slot] == b;
        if (agree) return 1;
    }
    fprintf(stderr, "  the nodes do not agree that slot %d is on node %d\n", slot, b);
    return 0;
}

/* The whole migration of slot from a to b, without pauses. */
static int slot_migrate(int slot, int a, int b) {
    return slot_begin(slot, a, b) && move_keys(slot, a, b, 0) >= 0 && slot_end(slot, a, b);
}

/* ========================================================================
 * 1. Routing
 * ====================================================================== */

#define RN 30

/* Every lock key on exactly the node that serves its slot, each node with
 * some; another client (another seed node) gets EBUSY while held. */
static void test_cluster_routing(void) {
    static signed char owner[SLOTS];
    dlock_client_t *c1 = NULL, *c2 = NULL;
    dlock_mutex_t m1[RN], m2[RN];
    char names[RN][32], key[300], url[256];
    int per[NN] = { 0 }, wrong = 0, badslot = 0, i, j;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    /* One node each in the URL: the others are discovered. */
    dlt_cluster_url(&clus, url, sizeof url, "1", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c1, url, 3000), 0);
    dlt_cluster_url(&clus, url, sizeof url, "2", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c2, url, 3000), 0);
    CU_ASSERT_FATAL(c1 != NULL && c2 != NULL);
    for (i = 0; i < RN; i++) {
        snprintf(names[i], sizeof names[i], "route/%d", i);
        DLT_ASSERT_ERR(mutex_make(&m1[i], names[i], c1, 0, 0, 0, NULL, NULL), 0);
        DLT_ASSERT_ERR(mutex_make(&m2[i], names[i], c2, 0, 0, 0, NULL, NULL), 0);
    }
    for (i = 0; i < RN; i++) {
        DLT_ASSERT_ERR(dlock_mutex_lock(&m1[i]), 0);
        CU_ASSERT_TRUE(dlock_mutex_fence(&m1[i]) > 0);
    }
    for (i = 0; i < RN; i++) {
        int slot, o;
        dlt_lock_key(names[i], key, sizeof key);
        slot = dlt_key_slot(key);
        if (dlt_cluster_keyslot(&clus, i % NN, key) != slot) badslot++;
        o = owner[slot];
        CU_ASSERT_FATAL(o >= 0 && o < NN);
        per[o]++;
        for (j = 0; j < NN; j++) {
            /* the owner has it; the others redirect to the owner */
            int e = j == o ? dlt_redis_exists(&clus.node[j], key) : dlt_cluster_moved_port(&clus, j, key);
            if (e != (j == o ? 1 : clus.node[o].port)) {
                wrong++;
                printf("  %s (slot %d, node %d): node %d says %d\n", key, slot, o, j, e);
            }
        }
    }
    printf("  %d locks held: %d on node 0, %d on node 1, %d on node 2\n", RN, per[0], per[1], per[2]);
    DLT_ASSERT_INT_EQ(badslot, 0);
    DLT_ASSERT_INT_EQ(wrong, 0);
    for (j = 0; j < NN; j++) CU_ASSERT_TRUE(per[j] > 0);
    for (i = 0; i < RN; i++) DLT_ASSERT_ERR(dlock_mutex_trylock(&m2[i]), EBUSY);
    for (i = 0; i < RN; i++) DLT_ASSERT_ERR(dlock_mutex_unlock(&m1[i]), 0);
    for (i = 0, wrong = 0; i < RN; i++)
        if (dlt_redis_lock_exists(&clus.node[owner[dlt_lock_slot(names[i])]], names[i]) != 0) wrong++;
    DLT_ASSERT_INT_EQ(wrong, 0);
    for (i = 0; i < RN; i++) {
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m2[i]), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m2[i]), 0);
    }
    for (i = 0; i < RN; i++) {
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m1[i]), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m2[i]), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
}

/* ========================================================================
 * 2. Exclusion across processes, and wake-ups across nodes
 * ====================================================================== */

/* A worker process: its own client on url, a mutex (lease_ms) for each
 * of its nnames names, shared by its nthreads threads, each running
 * fn(thread).  sh: what the test shares with its workers. */
#define WNAMES 40
struct wproc;
struct wthread {
    struct wproc *p;
    dlock_mutex_t *m; /* nnames mutexes shared by the process's threads */
    int t;
};
struct wproc {
    void *sh;
    char names[WNAMES][32];
    int nnames, nthreads, id;
    unsigned lease_ms;
    char url[256];
    int (*fn)(struct wthread *);
};

static int w_thread(void *arg) {
    struct wthread *w = arg;
    return w->p->fn(w);
}

static int w_proc(void *arg) {
    struct wproc *p = arg;
    dlock_client_t *cl;
    static dlock_mutex_t m[WNAMES]; /* one process each: static is fine */
    struct wthread wt[4];
    dlt_task t[4];
    int k, rc = 0;
    DLT_CKT(p->nnames <= WNAMES && p->nthreads <= 4);
    DLT_CK(dlt_client_make(&cl, p->url, 8000), 0);
    for (k = 0; k < p->nnames; k++) DLT_CK(mutex_make(&m[k], p->names[k], cl, p->lease_ms, 0, 0, NULL, NULL), 0);
    for (k = 0; k < p->nthreads; k++) {
        wt[k] = (struct wthread){ p, m, k };
        memset(&t[k], 0, sizeof t[k]);
        t[k].fn = w_thread;
        t[k].arg = &wt[k];
        DLT_CKT(pthread_create(&t[k].th, NULL, dlt_task_thread, &t[k]) == 0);
    }
    for (k = 0; k < p->nthreads; k++) {
        pthread_join(t[k].th, NULL);
        if (t[k].rc != 0) rc = t[k].rc;
    }
    for (k = 0; k < p->nnames; k++) DLT_CK(dlock_mutex_destroy(&m[k]), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return rc;
}

#define XP 3    /* processes */
#define XT 2    /* threads in each */
#define XN 3    /* lock names, one on each node */
#define XITER 20

struct xshared {
    int inside[XN], acq[XN];
    volatile int count[XN]; /* incremented under the lock, not atomically */
    unsigned long long lastfence[XN];
    int violations, fencebad, errors;
};


static int x_thread(struct wthread *x) {
    struct xshared *sh = x->p->sh;
    unsigned seed = (unsigned)(x->p->id * 31 + x->t * 7 + 1);
    for (int i = 0; i < XITER; i++) {
        int k = (int)(rand_r(&seed) % XN), rc, v;
        unsigned long long f;
        if ((rc = timedlock_ms(&x->m[k], 20000)) != 0) {
            dlt_flag_add(&sh->errors, 1);
            return DLT_CK_FAIL("timedlock", rc, 0);
        }
        if (dlt_flag_add(&sh->inside[k], 1) != 1) dlt_flag_add(&sh->violations, 1);
        f = dlock_mutex_fence(&x->m[k]);
        if (f <= sh->lastfence[k]) dlt_flag_add(&sh->fencebad, 1);
        sh->lastfence[k] = f;
        v = sh->count[k];
        usleep(300);
        sh->count[k] = v + 1;
        dlt_flag_add(&sh->acq[k], 1);
        dlt_flag_add(&sh->inside[k], -1);
        if ((rc = dlock_mutex_unlock(&x->m[k])) != 0) {
            dlt_flag_add(&sh->errors, 1);
            return DLT_CK_FAIL("unlock", rc, 0);
        }
    }
    return 0;
}

/* XP processes x XT threads on XN names (one per node), each process's
 * client seeded with another node: never two inside, exact counts,
 * fences increasing. */
static void test_cluster_exclusion_across_processes(void) {
    static signed char owner[SLOTS];
    struct xshared *sh = DLT_SHM_NEW(struct xshared, 1);
    struct wproc p[XP];
    pid_t pids[XP];
    int next = 0, i, k, total = 0;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    for (i = 0; i < XP; i++) {
        p[i].sh = sh;
        p[i].id = i;
        p[i].nnames = XN;
        p[i].nthreads = XT;
        p[i].lease_ms = 3000;
        p[i].fn = x_thread;
        for (k = 0; k < XN; k++) {
            if (i == 0) {
                CU_ASSERT_FATAL(dlt_slot_name(p[0].names[k], sizeof p[0].names[k], "excl/", &next, owner, k, -1) == 0);
            } else {
                memcpy(p[i].names[k], p[0].names[k], sizeof p[i].names[k]);
            }
        }
        char which[2] = { (char)('0' + i % NN), 0 };
        dlt_cluster_url(&clus, p[i].url, sizeof p[i].url, which, NULL);
    }
    for (i = 0; i < XP; i++) pids[i] = dlt_spawn(w_proc, &p[i]);
    for (i = 0; i < XP; i++) DLT_ASSERT_INT_EQ(pids[i] > 0 ? dlt_wait(pids[i], 90000) : -1, 0);
    for (k = 0; k < XN; k++) {
        printf("  %s (node %d): %d acquisitions, counter %d\n", p[0].names[k], k, sh->acq[k], sh->count[k]);
        DLT_ASSERT_INT_EQ(sh->count[k], sh->acq[k]);
        total += sh->acq[k];
    }
    DLT_ASSERT_INT_EQ(total, XP * XT * XITER);
    DLT_ASSERT_INT_EQ(sh->violations, 0);
    DLT_ASSERT_INT_EQ(sh->fencebad, 0);
    DLT_ASSERT_INT_EQ(sh->errors, 0);
    DLT_SHM_FREE(sh, 1);
}

#define TLS_URL_MAX 1200 /* a URL with a CA file's path in it */

struct wake {
    char name[64];
    char url[TLS_URL_MAX];
    int held, release, released;
    double t_unlock;
};

/* The holder: lock (10 s lease), hold until told, unlock. */
static int wake_holder(void *arg) {
    struct wake *w = arg;
    dlock_client_t *cl;
    dlock_mutex_t m;
    DLT_CK(dlt_client_make(&cl, w->url, 3000), 0);
    DLT_CK(mutex_make(&m, w->name, cl, 10000, 0, 0, NULL, NULL), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    dlt_flag_set(&w->held, 1);
    DLT_CKT(dlt_flag_wait(&w->release, 1, 20000));
    w->t_unlock = dlt_now();
    dlt_flag_set(&w->released, 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

struct waiter {
    dlock_mutex_t *m;
    long ms;
    int rc;
    double t_got;
};

static void *waiter_thread(void *arg) {
    struct waiter *w = arg;
    w->rc = timedlock_ms(w->m, w->ms);
    w->t_got = dlt_now();
    if (w->rc == 0 && dlock_mutex_unlock(w->m) != 0) w->rc = -1;
    return NULL;
}

/* A waiter whose client knows only node 0 gets a lock held (10 s lease)
 * by another process on node 2 soon after the unlock: the release
 * published on node 2 reached it (through the cluster bus to the node it
 * listens on, or on node 2 itself with sharded pub/sub). */
static void test_cluster_wakeup_crosses_nodes(void) {
    static signed char owner[SLOTS];
    struct wake *w = DLT_SHM_NEW(struct wake, 1);
    struct waiter wt = { NULL, 15000, -1, 0 };
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    char key[300], url[256];
    pthread_t th;
    pid_t pid;
    int next = 0;
    double dt;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    CU_ASSERT_FATAL(dlt_slot_name(w->name, sizeof w->name, "wake/", &next, owner, 2, -1) == 0);
    dlt_cluster_url(&clus, w->url, sizeof w->url, "2", NULL);
    pid = dlt_spawn(wake_holder, w); /* before any client of ours */
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&w->held, 1, 10000), 1);

    dlt_cluster_url(&clus, url, sizeof url, "0", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 3000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, w->name, cl, 0, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    wt.m = &m;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, waiter_thread, &wt) == 0);
    dlt_lock_key(w->name, key, sizeof key);
    {
        char where[64];
        long long n = dlt_cluster_subs_wait(&clus, key, where, sizeof where);
        printf("  the waiter (client seeded with node 0) listens for %s on %s\n", key, where);
        DLT_ASSERT_INT_EQ(n, 1);
    }
    dlt_sleep_ms(300);
    dlt_flag_set(&w->release, 1);
    pthread_join(th, NULL);
    DLT_ASSERT_INT_EQ(pid > 0 ? dlt_wait(pid, 20000) : -1, 0);
    dt = wt.t_got - w->t_unlock;
    printf("  waiter (seeded with node 0) got the lock of node 2 %.3f s after the unlock (lease 10 s)\n", dt);
    DLT_ASSERT_ERR(wt.rc, 0);
    CU_ASSERT_TRUE(dt >= 0 && dt < 2.0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_SHM_FREE(w, 1);
}

/* ========================================================================
 * 3. Slot migration under lock traffic
 * ====================================================================== */

#define MP 3  /* worker processes */
#define MT 2  /* threads in each */
#define MN 40 /* lock names */
#define MS 6  /* of them in the migrating slot (the first MS) */

struct mshared {
    int stop, phase; /* phase: 0 before, 1 migrating, 2 after */
    int inside[MN], acq[MN];
    volatile int count[MN];
    unsigned long long lastfence[MN];
    int slot_acq[3]; /* acquisitions of names in the slot, by phase */
    int violations, fencebad, errors;
};


static int m_thread(struct wthread *x) {
    struct mshared *sh = x->p->sh;
    unsigned seed = (unsigned)(x->p->id * 131 + x->t * 17 + 3);
    double end = dlt_now() + 60.0, t0;
    while (!dlt_flag_get(&sh->stop) && dlt_now() < end) {
        /* Half the time a name of the migrating slot. */
        int k = rand_r(&seed) % 2 ? (int)(rand_r(&seed) % MS) : (int)(rand_r(&seed) % MN), rc, v;
        unsigned long long f;
        if ((rc = timedlock_ms(&x->m[k], 20000)) != 0) {
            dlt_flag_add(&sh->errors, 1);
            return DLT_CK_FAIL("timedlock", rc, 0);
        }
        if (dlt_flag_add(&sh->inside[k], 1) != 1) dlt_flag_add(&sh->violations, 1);
        f = dlock_mutex_fence(&x->m[k]);
        if (f <= sh->lastfence[k]) {
            dlt_flag_add(&sh->fencebad, 1);
            fprintf(stderr, "  %s: fence %llu after %llu (phase %d, pid %d)\n", x->p->names[k], f, sh->lastfence[k],
                    dlt_flag_get(&sh->phase), (int)getpid());
        }
        sh->lastfence[k] = f;
        if (k < MS) dlt_flag_add(&sh->slot_acq[dlt_flag_get(&sh->phase)], 1);
        v = sh->count[k];
        usleep(200);
        sh->count[k] = v + 1;
        dlt_flag_add(&sh->acq[k], 1);
        dlt_flag_add(&sh->inside[k], -1);
        t0 = dlt_now();
        if ((rc = dlock_mutex_unlock(&x->m[k])) != 0) {
            dlt_flag_add(&sh->errors, 1);
            fprintf(stderr, "  %s: unlock after %.3f s, fence %llu, phase %d\n", x->p->names[k], dlt_now() - t0, f,
                    dlt_flag_get(&sh->phase));
            return DLT_CK_FAIL("unlock", rc, 0);
        }
    }
    return 0;
}

/* One slot of node A moves to node B while MP x MT workers lock, count
 * and unlock over MN names (MS of them in that slot), while the test
 * holds another lock of that slot with a 1 s lease across the whole
 * migration -- including over a second in which its key is already on B
 * but the slot is not yet B's (its renewals are answered ASK) -- and while
 * a client that used the slot before sits idle. */
static void test_cluster_slot_migration_under_traffic(void) {
    static signed char owner[SLOTS];
    struct mshared *sh = DLT_SHM_NEW(struct mshared, 1);
    struct wproc *p = DLT_SHM_NEW(struct wproc, MP);
    char hold_name[32], idle_name[32], wait_name[32], hold_key[300], wait_key[300], url[256], where[64];
    dlock_client_t *c_idle = NULL, *c_hold = NULL, *c_wait = NULL;
    dlock_mutex_t m_idle, m_hold, m_h10, m_w10;
    struct waiter wt = { NULL, 30000, -1, 0 };
    pthread_t wth;
    double t_unlock;
    pid_t pids[MP];
    int slot, A, B, next = 0, i, k, moved, rc;
    long long asking;
    double t_hold;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    snprintf(p[0].names[0], sizeof p[0].names[0], "m0");
    slot = dlt_lock_slot("m0");
    A = owner[slot];
    B = (A + 1) % NN;
    CU_ASSERT_FATAL(A >= 0);
    CU_ASSERT_FATAL(dlt_cluster_keyslot(&clus, 0, "dlock:{m0}") == slot);
    next = 1;
    for (k = 1; k < MS; k++) CU_ASSERT_FATAL(dlt_slot_name(p[0].names[k], 32, "m", &next, owner, -1, slot) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(hold_name, sizeof hold_name, "m", &next, owner, -1, slot) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(idle_name, sizeof idle_name, "m", &next, owner, -1, slot) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(wait_name, sizeof wait_name, "m", &next, owner, -1, slot) == 0);
    for (k = MS; k < MN; k++) snprintf(p[0].names[k], 32, "mw/%d", k);
    printf("  slot %d (node %d -> node %d): workers' names %s %s %s %s %s %s, held %s, idle %s\n", slot, A, B,
           p[0].names[0], p[0].names[1], p[0].names[2], p[0].names[3], p[0].names[4], p[0].names[5], hold_name,
           idle_name);
    for (i = 0; i < MP; i++) {
        char which[2] = { (char)('0' + i % NN), 0 };
        if (i > 0) memcpy(p[i].names, p[0].names, sizeof p[i].names);
        p[i].sh = sh;
        p[i].id = i;
        p[i].nnames = MN;
        p[i].nthreads = MT;
        /* Shorter than the migration's window (about 2 s), in which a lock
         * or unlock of the slot is refused (TRYAGAIN) and asked again:
         * holds are renewed meanwhile, and a lease counts from the
         * attempt that was answered. */
        p[i].lease_ms = 2000;
        p[i].fn = m_thread;
        dlt_cluster_url(&clus, p[i].url, sizeof p[i].url, which, NULL);
    }
    for (i = 0; i < MP; i++) pids[i] = dlt_spawn(w_proc, &p[i]); /* before any client of ours */

    /* A client that knows the slot on A, then sits idle. */
    dlt_cluster_url(&clus, url, sizeof url, "2", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c_idle, url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m_idle, idle_name, c_idle, 0, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m_idle), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&clus.node[A], idle_name), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m_idle), 0);

    /* The long hold: 1 s lease, for about 3.5 s, across the migration. */
    dlt_flag_set(&lost_calls, 0);
    dlt_cluster_url(&clus, url, sizeof url, "1", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c_hold, url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m_hold, hold_name, c_hold, 1000, 0, 0, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m_hold), 0);
    t_hold = dlt_now();
    dlt_lock_key(hold_name, hold_key, sizeof hold_key);
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&clus.node[A], hold_key), 1);
    hold_m = &m_hold;
    hold_checks = hold_misses = 0;

    /* Another lock of the slot, held with a 10 s lease, and a waiter for
     * it that blocks across the whole migration. */
    DLT_ASSERT_ERR(mutex_make(&m_h10, wait_name, c_hold, 10000, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m_h10), 0);
    dlt_cluster_url(&clus, url, sizeof url, "0", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c_wait, url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m_w10, wait_name, c_wait, 0, 0, 0, NULL, NULL), 0);
    wt.m = &m_w10;
    CU_ASSERT_FATAL(pthread_create(&wth, NULL, waiter_thread, &wt) == 0);
    dlt_lock_key(wait_name, wait_key, sizeof wait_key);
    DLT_ASSERT_INT_EQ(dlt_cluster_subs_wait(&clus, wait_key, where, sizeof where), 1);
    printf("  a waiter for %s listens on %s before the migration\n", wait_name, where);

    /* Traffic on the slot before. */
    DLT_ASSERT_INT_EQ(dlt_flag_wait_ge(&sh->slot_acq[0], 20, 15000), 1);

    /* The migration: IMPORTING / MIGRATING, a pause, the keys one by one,
     * a second with every key on B but the slot still A's, then NODE. */
    dlt_flag_set(&sh->phase, 1);
    CU_ASSERT_TRUE(slot_begin(slot, A, B));
    pause_checking(300);
    moved = move_keys(slot, A, B, 30);
    printf("  %d keys moved; the held lock's key on node %d: %d\n", moved, B, exists_asking(B, hold_key));
    CU_ASSERT_TRUE(moved > 0);
    DLT_ASSERT_INT_EQ(exists_asking(B, hold_key), 1);
    pause_checking(1200);
    CU_ASSERT_TRUE(slot_end(slot, A, B));
    dlt_flag_set(&sh->phase, 2);
    asking = dlt_redis_cmdstat(&clus.node[B], "asking");

    /* The hold lasts on, renewed on B now; then it is released cleanly. */
    while (dlt_now() - t_hold < 3.5) pause_checking(50);
    printf("  held lock: held at %d of %d checks across the migration, lost handler ran %d times\n",
           hold_checks - hold_misses, hold_checks, dlt_flag_get(&lost_calls));
    hold_m = NULL;
    DLT_ASSERT_INT_EQ(hold_misses, 0);
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&clus.node[B], hold_key), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m_hold), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&clus.node[B], hold_key), 0);

    /* The waiter still listens (wherever the slot's releases are heard
     * now), and wakes at the release, long before the 10 s lease. */
    DLT_ASSERT_INT_EQ(dlt_cluster_subs_wait(&clus, wait_key, where, sizeof where), 1);
    printf("  the waiter listens on %s after the migration\n", where);
    t_unlock = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m_h10), 0);
    pthread_join(wth, NULL);
    printf("  the waiter got %s %.3f s after the release (lease 10 s)\n", wait_name, wt.t_got - t_unlock);
    DLT_ASSERT_ERR(wt.rc, 0);
    CU_ASSERT_TRUE(wt.t_got - t_unlock < 2.0);

    /* Traffic on the slot after; then the workers stop. */
    DLT_ASSERT_INT_EQ(dlt_flag_wait_ge(&sh->slot_acq[2], 20, 15000), 1);
    dlt_flag_set(&sh->stop, 1);
    for (i = 0; i < MP; i++) DLT_ASSERT_INT_EQ(pids[i] > 0 ? dlt_wait(pids[i], 60000) : -1, 0);

    /* The idle client: its map still says A (MOVED). */
    rc = dlock_mutex_lock(&m_idle);
    DLT_ASSERT_ERR(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&clus.node[B], idle_name), 1);
    {
        char idle_key[300];
        dlt_lock_key(idle_name, idle_key, sizeof idle_key);
        DLT_ASSERT_INT_EQ(dlt_cluster_moved_port(&clus, A, idle_key), clus.node[B].port); /* A redirects to B */
    }
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m_idle), 0);

    {
        int total = 0, wrong = 0;
        for (k = 0; k < MN; k++) {
            total += sh->acq[k];
            if (sh->count[k] != sh->acq[k]) {
                wrong++;
                printf("  %s: counter %d after %d acquisitions\n", p[0].names[k], sh->count[k], sh->acq[k]);
            }
        }
        printf("  workers: %d acquisitions; in the slot %d before, %d during, %d after the migration; "
               "ASKING on node %d: %lld\n",
               total, sh->slot_acq[0], sh->slot_acq[1], sh->slot_acq[2], B, asking);
        DLT_ASSERT_INT_EQ(wrong, 0);
    }
    DLT_ASSERT_INT_EQ(sh->errors, 0);
    DLT_ASSERT_INT_EQ(sh->violations, 0);
    DLT_ASSERT_INT_EQ(sh->fencebad, 0);
    CU_ASSERT_TRUE(asking > 0); /* the ASK path was taken */
    DLT_ASSERT_INT_EQ(keys_in_slot(A, slot), 0);
    CU_ASSERT_TRUE(keys_in_slot(B, slot) > 0); /* the fence keys, at least */
    DLT_ASSERT_INT_EQ(dlt_cluster_slot_owner(&clus, slot), B);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&m_idle), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m_hold), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m_h10), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m_w10), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c_idle), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c_hold), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c_wait), 0);
    CU_ASSERT_TRUE(slot_migrate(slot, B, A)); /* back, for the next tests */
    DLT_SHM_FREE(sh, 1);
    DLT_SHM_FREE(p, MP);
}

/* ========================================================================
 * 4. ASK: single-key requests while their key has moved
 * ====================================================================== */

struct cv_waiter {
    dlock_cond_t *cv;
    dlock_mutex_t *m;
    int *flag;
    int rc, woke;
};

static void *cv_waiter_thread(void *arg) {
    struct cv_waiter *w = arg;
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 15000);
    int rc;
    if ((w->rc = dlock_mutex_lock(w->m)) != 0) return NULL;
    rc = 0;
    while (!dlt_flag_get(w->flag) && rc == 0) rc = dlock_cond_timedwait(w->cv, w->m, &ts);
    w->woke = dlt_flag_get(w->flag);
    w->rc = rc;
    if (dlock_mutex_unlock(w->m) != 0 && w->rc == 0) w->rc = -1;
    return NULL;
}

/* A lock holder's field on node i after ASKING (a slot that node imports) into
 * buf; "" if none. */
static void hget_asking(int i, const char *key, const char *field, char *buf, size_t cap) {
    redisReply *r = cmd_asking(i, "EVAL_RO %s 1 %s %s", DLT_LOCK_FIELD_LUA, key, field);
    buf[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_STRING) snprintf(buf, cap, "%s", r->str);
    if (r != NULL) freeReplyObject(r);
}

/* A slot in migration whose keys have all moved (the slot still A's): a
 * fenced write to a key there and a signal to a condition variable there
 * -- each a one-key script -- are served by B after ASK. */
static void test_cluster_ask_single_key_requests(void) {
    static signed char owner[SLOTS];
    const char *cvname = "askcv";
    char data_key[64], cv_key[300], mname[32], url[256], val[64];
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    dlock_cond_t cv;
    int flag = 0, slot, A, B, next = 0;
    struct cv_waiter w = { &cv, &m, &flag, -1, 0 };
    pthread_t th;
    double end;
    long long asking;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    snprintf(data_key, sizeof data_key, "data:{%s}", cvname); /* the cond's slot */
    snprintf(cv_key, sizeof cv_key, "dlock:{%s}:cond", cvname);
    slot = dlt_key_slot(cv_key);
    CU_ASSERT_FATAL(dlt_key_slot(data_key) == slot && dlt_cluster_keyslot(&clus, 0, cv_key) == slot);
    A = owner[slot];
    B = (A + 1) % NN;
    /* The mutex on the third node, out of the way of the migration. */
    CU_ASSERT_FATAL(dlt_slot_name(mname, sizeof mname, "askm/", &next, owner, (A + 2) % NN, -1) == 0);

    dlt_cluster_url(&clus, url, sizeof url, "0", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, mname, cl, 0, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_cond_init_client(&cv, cvname, cl), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_fenced_set(&m, data_key, "v1", 2), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&clus.node[A], data_key), 1);

    /* A waiter registered on the condition variable (key on A). */
    CU_ASSERT_FATAL(pthread_create(&th, NULL, cv_waiter_thread, &w) == 0);
    for (end = dlt_now() + 5.0; dlt_now() < end && dlt_redis_exists(&clus.node[A], cv_key) != 1;) dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&clus.node[A], cv_key), 1);

    /* The slot migrates; both keys go to B; the slot stays A's. */
    CU_ASSERT_TRUE(slot_begin(slot, A, B));
    DLT_ASSERT_INT_EQ(move_keys(slot, A, B, 0), 2);
    DLT_ASSERT_INT_EQ(keys_in_slot(A, slot), 0);
    DLT_ASSERT_INT_EQ(keys_in_slot(B, slot), 2);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_fenced_set(&m, data_key, "v2", 2), 0);
    dlt_flag_set(&flag, 1);
    DLT_ASSERT_ERR(dlock_cond_signal(&cv), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc, 0);
    DLT_ASSERT_INT_EQ(w.woke, 1);
    hget_asking(B, data_key, "value", val, sizeof val);
    CU_ASSERT_STRING_EQUAL(val, "v2");
    asking = dlt_redis_cmdstat(&clus.node[B], "asking");
    printf("  slot %d moving %d -> %d: fenced write and signal served by node %d (ASKING: %lld)\n", slot, A, B, B,
           asking);
    CU_ASSERT_TRUE(asking > 0);
    DLT_ASSERT_INT_EQ(keys_in_slot(A, slot), 0);

    CU_ASSERT_TRUE(slot_end(slot, A, B));
    DLT_ASSERT_ERR(dlock_cond_destroy(&cv), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    CU_ASSERT_TRUE(slot_migrate(slot, B, A));
}

/* ========================================================================
 * 5. Calls that outlast their lease in a slot that does not move
 * ====================================================================== */

struct staller {
    int slot, a, b;
    unsigned ms;
    int ok;
};

/* Ends the slot's MIGRATING / IMPORTING state after ms without moving
 * anything (CLUSTER SETSLOT STABLE on both nodes). */
static void *staller_thread(void *arg) {
    struct staller *s = arg;
    dlt_sleep_ms(s->ms);
    s->ok = dlt_reply_ok(dlt_redis_cmd(&clus.node[s->a], "CLUSTER SETSLOT %d STABLE", s->slot)) &&
            dlt_reply_ok(dlt_redis_cmd(&clus.node[s->b], "CLUSTER SETSLOT %d STABLE", s->slot));
    return NULL;
}

/* A slot is set MIGRATING / IMPORTING and left so for 1.5 s, longer than
 * the 1 s leases of its locks: their multi-key scripts get TRYAGAIN
 * meanwhile, and are retried (the unreachable bound is 5 s).  An unlock
 * begun in that window by a valid holder returns 0 once the slot is
 * stable (the hold must not run out on the server meanwhile: its
 * renewals, one key each, are still served); a lock begun in that window
 * returns 0 with a valid hold (holds() 1, a fence, renewed after) -- not
 * one whose lease is counted from the first, refused attempt. */
static void test_cluster_calls_outlast_a_stalled_slot(void) {
    static signed char owner[SLOTS];
    dlock_client_t *cl = NULL;
    dlock_mutex_t mu, ma;
    char nu[32], na[32], url[256];
    struct staller st;
    pthread_t th;
    int next = 0, slot, A, B, rc, holds;
    uint64_t fence;
    double t0, el;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    snprintf(nu, sizeof nu, "stall/0");
    slot = dlt_lock_slot(nu);
    A = owner[slot];
    B = (A + 1) % NN;
    CU_ASSERT_FATAL(dlt_slot_name(na, sizeof na, "stall/", &next, owner, -1, slot) == 0 && strcmp(na, nu) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(na, sizeof na, "stall/", &next, owner, -1, slot) == 0);
    dlt_flag_set(&lost_calls, 0);
    dlt_cluster_url(&clus, url, sizeof url, "0", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&mu, nu, cl, 1000, 0, 0, on_lost, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&ma, na, cl, 1000, 0, 0, on_lost, NULL), 0);

    /* The unlock. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&mu), 0);
    CU_ASSERT_TRUE_FATAL(slot_begin(slot, A, B));
    st = (struct staller){ slot, A, B, 1500, 0 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, staller_thread, &st) == 0);
    t0 = dlt_now();
    rc = dlock_mutex_unlock(&mu);
    el = dlt_now() - t0;
    pthread_join(th, NULL);
    CU_ASSERT_TRUE(st.ok);
    printf("  slot %d stalled 1.5 s: unlock (lease 1 s) %s after %.2f s [%s]\n", slot, dlt_errno_label(rc), el,
           rc ? dlock_last_error() : "");
    DLT_ASSERT_ERR(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&clus.node[A], nu), 0);

    /* The lock. */
    CU_ASSERT_TRUE_FATAL(slot_begin(slot, A, B));
    st = (struct staller){ slot, A, B, 1500, 0 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, staller_thread, &st) == 0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&ma);
    el = dlt_now() - t0;
    holds = dlock_mutex_holds(&ma);
    fence = dlock_mutex_fence(&ma);
    pthread_join(th, NULL);
    CU_ASSERT_TRUE(st.ok);
    printf("  slot %d stalled 1.5 s: lock (lease 1 s) %s after %.2f s, holds %d, fence %llu [%s]\n", slot,
           dlt_errno_label(rc), el, holds, (unsigned long long)fence, rc ? dlock_last_error() : "");
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) {
        DLT_ASSERT_INT_EQ(holds, 1);
        CU_ASSERT_TRUE(fence > 0);
        hold_m = &ma;
        hold_checks = hold_misses = 0;
        pause_checking(1500); /* renewed on */
        hold_m = NULL;
        DLT_ASSERT_INT_EQ(hold_misses, 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
    }
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mu), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&ma), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

/* ========================================================================
 * 6. Bad input
 * ====================================================================== */

static int expect_create_einval(const char *url) {
    dlock_client_t *cl = NULL;
    int rc = dlt_client_make(&cl, url, 1000);
    printf("  %s: %s [%s]\n", url, dlt_errno_label(rc), dlock_last_error());
    if (rc == 0) dlock_client_destroy(cl);
    return rc;
}

static void test_cluster_bad_input(void) {
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    dlock_cond_t cv;
    dlock_lock_info_t info;
    char url[256];
    const char *msg;
    int rc, p1, p2;
    double t0, el;

    CL_UP();
    /* A database other than 0; no node at all. */
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d/1", clus.node[0].port);
    DLT_ASSERT_ERR(expect_create_einval(url), EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(dlock_last_error(), "database"));
    DLT_ASSERT_ERR(expect_create_einval("redis+cluster://"), EINVAL);
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d/0", clus.node[0].port);
    DLT_ASSERT_ERR(expect_create_einval(url), 0);

    /* A plain (non-cluster) server: EINVAL, saying so, at the first use. */
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", dlt_server.port);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 1000), 0);
    if (cl != NULL) {
        DLT_ASSERT_ERR(mutex_make(&m, "bad/plain", cl, 0, 0, 0, NULL, NULL), 0);
        rc = dlock_mutex_lock(&m);
        msg = dlock_last_error();
        printf("  at a plain server: %s [%s]\n", dlt_errno_label(rc), msg);
        DLT_ASSERT_ERR(rc, EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "not a cluster node"));
        if (rc == 0) (void)dlock_mutex_unlock(&m);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EINVAL);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
        cl = NULL;
    }

    /* A name starting with '}' (an empty hash tag); names with other
     * braces are fine: all their keys share one slot. */
    dlt_cluster_url(&clus, url, sizeof url, "0", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 3000), 0);
    CU_ASSERT_FATAL(cl != NULL);
    rc = mutex_make(&m, "}x", cl, 0, 0, 0, NULL, NULL);
    printf("  name \"}x\": %s [%s]\n", dlt_errno_label(rc), dlock_last_error());
    if (rc == 0) {
        rc = dlock_mutex_lock(&m);
        if (rc == 0) (void)dlock_mutex_unlock(&m);
        (void)dlock_mutex_destroy(&m);
    }
    DLT_ASSERT_ERR(rc, EINVAL);
    rc = dlock_cond_init_client(&cv, "}cv", cl);
    DLT_ASSERT_ERR(rc, EINVAL);
    if (rc == 0) (void)dlock_cond_destroy(&cv);
    DLT_ASSERT_ERR(dlock_lock_info(cl, "}x", &info), EINVAL);
    {
        static const char *const odd[] = { "a}", "x{y}", "{", "{}", "a{b}c}" };
        for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
            rc = mutex_make(&m, odd[i], cl, 0, 0, 0, NULL, NULL);
            DLT_ASSERT_ERR(rc, 0);
            if (rc != 0) continue;
            rc = dlock_mutex_lock(&m);
            if (rc != 0) printf("  name \"%s\": %s [%s]\n", odd[i], dlt_errno_label(rc), dlock_last_error());
            DLT_ASSERT_ERR(rc, 0);
            if (rc == 0) {
                int o = dlt_cluster_slot_owner(&clus, dlt_lock_slot(odd[i]));
                DLT_ASSERT_INT_EQ(o >= 0 ? dlt_redis_lock_exists(&clus.node[o], odd[i]) : -1, 1);
                DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
            }
            DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        }
    }
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    cl = NULL;

    /* Seeds that do not answer (closed ports): ENOLCK, bounded. */
    p1 = dlt_free_port();
    p2 = dlt_free_port();
    CU_ASSERT_FATAL(p1 > 0 && p2 > 0);
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", p1, p2);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 1000), 0);
    CU_ASSERT_FATAL(cl != NULL);
    DLT_ASSERT_ERR(mutex_make(&m, "bad/nowhere", cl, 0, 0, 0, NULL, NULL), 0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m);
    el = dlt_now() - t0;
    printf("  unreachable seeds: %s after %.2f s [%s]\n", dlt_errno_label(rc), el, dlock_last_error());
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(el < 10.0);
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOLCK);
    CU_ASSERT_TRUE(dlt_now() - t0 < 10.0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

/* ========================================================================
 * 7. Fair mutexes, rwlocks, condition variables, caching, dlock_list, restart guard
 * ====================================================================== */

struct fair_waiter {
    dlock_mutex_t *m;
    int id, *order, *pos, rc;
};

static void *fair_thread(void *arg) {
    struct fair_waiter *w = arg;
    w->rc = timedlock_ms(w->m, 15000);
    if (w->rc == 0) {
        int k = dlt_flag_add(w->pos, 1) - 1;
        if (k >= 0 && k < 2) w->order[k] = w->id;
        dlt_sleep_ms(30);
        if (dlock_mutex_unlock(w->m) != 0) w->rc = -1;
    }
    return NULL;
}

/* ZCARD key on node i, or -1. */
static long long zcard_on(int i, const char *key) {
    return dlt_reply_int(dlt_redis_cmd(&clus.node[i], "ZCARD %s", key));
}

/* LLEN key (a lock's fair queue) on node i, or -1. */
static long long llen_on(int i, const char *key) {
    return dlt_reply_int(dlt_redis_cmd(&clus.node[i], "LLEN %s", key));
}

static long long llen_wait(int i, const char *key, long long want) {
    long long n = -1;
    for (double end = dlt_now() + 5.0; dlt_now() < end; dlt_sleep_ms(10))
        if ((n = llen_on(i, key)) >= want) break;
    return n;
}

/* A fair mutex: two waiters (other clients) get it in their order of
 * arrival; its queue lives in the lock's slot. */
static void test_cluster_fair_mutex(void) {
    static signed char owner[SLOTS];
    dlock_client_t *ch = NULL, *c1 = NULL, *c2 = NULL;
    dlock_mutex_t mh, m1, m2;
    int order[2] = { 0, 0 }, pos = 0, o, next = 0;
    struct fair_waiter w1 = { &m1, 1, order, &pos, -1 }, w2 = { &m2, 2, order, &pos, -1 };
    char name[32], qkey[300], url[256];
    pthread_t t1, t2;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    CU_ASSERT_FATAL(dlt_slot_name(name, sizeof name, "fair/", &next, owner, 1, -1) == 0);
    o = owner[dlt_lock_slot(name)];
    dlt_lock_key(name, qkey, sizeof qkey);
    strcat(qkey, ":fifo");
    dlt_cluster_url(&clus, url, sizeof url, "0", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&ch, url, 3000), 0);
    dlt_cluster_url(&clus, url, sizeof url, "1", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c1, url, 3000), 0);
    dlt_cluster_url(&clus, url, sizeof url, "2", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c2, url, 3000), 0);
    DLT_ASSERT_ERR(mutex_make(&mh, name, ch, 0, 1, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&m1, name, c1, 0, 1, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&m2, name, c2, 0, 1, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mh), 0);
    CU_ASSERT_FATAL(pthread_create(&t1, NULL, fair_thread, &w1) == 0);
    DLT_ASSERT_INT_EQ(llen_wait(o, qkey, 1), 1);
    CU_ASSERT_FATAL(pthread_create(&t2, NULL, fair_thread, &w2) == 0);
    DLT_ASSERT_INT_EQ(llen_wait(o, qkey, 2), 2);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mh), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    printf("  fair mutex on node %d: granted to waiter %d, then %d\n", o, order[0], order[1]);
    DLT_ASSERT_ERR(w1.rc, 0);
    DLT_ASSERT_ERR(w2.rc, 0);
    DLT_ASSERT_INT_EQ(order[0], 1);
    DLT_ASSERT_INT_EQ(order[1], 2);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mh), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mh), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mh), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(ch), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);
}

/* A read-write lock: readers through clients seeded with different
 * nodes share it, a writer waits for both and then excludes them; its
 * readers' key lives in the lock's slot. */
static void test_cluster_rwlock(void) {
    static signed char owner[SLOTS];
    dlock_client_t *c[3] = { NULL, NULL, NULL };
    dlock_rwlock_t rw[3];
    dlock_mutexattr_t a;
    char name[32], rkey[320], url[256];
    int next = 0, o, i;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    CU_ASSERT_FATAL(dlt_slot_name(name, sizeof name, "rw/", &next, owner, 2, -1) == 0);
    o = owner[dlt_lock_slot(name)];
    dlt_lock_key(name, rkey, sizeof rkey);
    strcat(rkey, ":readers");
    for (i = 0; i < 3; i++) {
        char which[2] = { (char)('0' + i), 0 };
        dlt_cluster_url(&clus, url, sizeof url, which, NULL);
        DLT_ASSERT_ERR(dlt_client_make(&c[i], url, 3000), 0);
        DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
        DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c[i]), 0);
        DLT_ASSERT_ERR(dlock_rwlock_init(&rw[i], name, &a), 0);
        dlock_mutexattr_destroy(&a);
    }
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw[0]), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw[1]), 0);
    DLT_ASSERT_INT_EQ(zcard_on(o, rkey), 2);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&rw[2]), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw[0]), 0);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&rw[2]), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw[1]), 0);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&rw[2]), 0);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw[2]), 2);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&clus.node[o], name), 1);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw[0]), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw[2]), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw[0]), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw[0]), 0);
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw[i]), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(c[i]), 0);
    }
}

#define PP_ROUNDS 6

struct pingpong {
    dlock_cond_t *cv;
    dlock_mutex_t *m;
    int *turn;
    int me, rounds, rc;
};

static void *pingpong_thread(void *arg) {
    struct pingpong *p = arg;
    for (int r = 0; r < PP_ROUNDS; r++) {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 10000);
        int rc;
        if ((rc = dlock_mutex_lock(p->m)) != 0) {
            p->rc = rc;
            return NULL;
        }
        while (*p->turn != p->me && rc == 0) rc = dlock_cond_timedwait(p->cv, p->m, &ts);
        if (rc == 0) {
            *p->turn = 1 - p->me;
            rc = dlock_cond_signal(p->cv);
        }
        if (dlock_mutex_unlock(p->m) != 0 && rc == 0) rc = -1;
        if (rc != 0) {
            p->rc = rc;
            return NULL;
        }
        p->rounds++;
    }
    p->rc = 0;
    return NULL;
}

/* A condition variable (its key on one node) with a mutex on another:
 * two threads on two clients pass the turn back and forth. */
static void test_cluster_condvar(void) {
    static signed char owner[SLOTS];
    dlock_client_t *c[2] = { NULL, NULL };
    dlock_mutex_t m[2];
    dlock_cond_t cv[2];
    char mname[32], cvname[32], url[256];
    int turn = 0, next = 0, i;
    struct pingpong pp[2];
    pthread_t th[2];

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    CU_ASSERT_FATAL(dlt_slot_name(mname, sizeof mname, "cvm/", &next, owner, 0, -1) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(cvname, sizeof cvname, "cv/", &next, owner, 2, -1) == 0);
    for (i = 0; i < 2; i++) {
        dlt_cluster_url(&clus, url, sizeof url, i ? "2" : "1", NULL);
        DLT_ASSERT_ERR(dlt_client_make(&c[i], url, 3000), 0);
        DLT_ASSERT_ERR(mutex_make(&m[i], mname, c[i], 0, 0, 0, NULL, NULL), 0);
        DLT_ASSERT_ERR(dlock_cond_init_client(&cv[i], cvname, c[i]), 0);
        pp[i] = (struct pingpong){ &cv[i], &m[i], &turn, i, 0, -1 };
    }
    for (i = 0; i < 2; i++) CU_ASSERT_FATAL(pthread_create(&th[i], NULL, pingpong_thread, &pp[i]) == 0);
    for (i = 0; i < 2; i++) pthread_join(th[i], NULL);
    printf("  condition variable %s (node 2), mutex %s (node 0): rounds %d and %d\n", cvname, mname, pp[0].rounds,
           pp[1].rounds);
    for (i = 0; i < 2; i++) {
        DLT_ASSERT_ERR(pp[i].rc, 0);
        DLT_ASSERT_INT_EQ(pp[i].rounds, PP_ROUNDS);
    }
    for (i = 0; i < 2; i++) {
        DLT_ASSERT_ERR(dlock_cond_destroy(&cv[i]), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m[i]), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(c[i]), 0);
    }
}

struct cache_share {
    char name[32], url[256];
    int node; /* the node that serves name */
    int cached, local, done;
    unsigned long long child_fence, parent_fence, child_after;
};

/* The scripts node r has run (EVALSHA, EVAL), -1 on no answer. */
static long long node_evals(dlt_redis *r) {
    long long a = dlt_redis_cmdstat(r, "evalsha"), b = dlt_redis_cmdstat(r, "eval");
    return (a < 0 || b < 0) ? -1 : a + b;
}

/* A process caches the lock (local holds: a greater fence, and no script
 * run on the node), hands it over when the test asks, and gets it back
 * afterwards with a greater fence. */
static int cache_proc(void *arg) {
    struct cache_share *s = arg;
    dlock_client_t *cl;
    dlock_mutex_t m;
    unsigned long long f, fl = 0;
    int i, local = 0;
    DLT_CK(dlt_client_make(&cl, s->url, 3000), 0);
    DLT_CK(mutex_make(&m, s->name, cl, 3000, 0, 1, NULL, NULL), 0);
    for (i = 0; i < 200 && local < 2; i++) {
        long long e0 = node_evals(&clus.node[s->node]);
        DLT_CK(dlock_mutex_lock(&m), 0);
        f = dlock_mutex_fence(&m);
        DLT_CKT(f > fl);
        fl = f;
        DLT_CK(dlock_mutex_unlock(&m), 0);
        local = e0 >= 0 && node_evals(&clus.node[s->node]) == e0 ? local + 1 : 0;
        if (local < 2) dlt_sleep_ms(10);
    }
    s->child_fence = fl;
    s->local = local;
    dlt_flag_set(&s->cached, 1);
    DLT_CKT(dlt_flag_wait(&s->done, 1, 20000));
    DLT_CK(timedlock_ms(&m, 10000), 0);
    s->child_after = dlock_mutex_fence(&m);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

static void test_cluster_caching_handover(void) {
    static signed char owner[SLOTS];
    struct cache_share *s = DLT_SHM_NEW(struct cache_share, 1);
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    char url[256];
    int next = 0, o, rc;
    pid_t pid;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    CU_ASSERT_FATAL(dlt_slot_name(s->name, sizeof s->name, "cache/", &next, owner, 2, -1) == 0);
    o = owner[dlt_lock_slot(s->name)];
    s->node = o;
    dlt_cluster_url(&clus, s->url, sizeof s->url, "0", NULL);
    pid = dlt_spawn(cache_proc, s); /* before any client of ours */
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&s->cached, 1, 15000), 1);
    DLT_ASSERT_INT_EQ(s->local, 2);
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&clus.node[o], s->name), 1); /* kept by the caching process */

    dlt_cluster_url(&clus, url, sizeof url, "1", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 3000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, s->name, cl, 0, 0, 0, NULL, NULL), 0);
    rc = timedlock_ms(&m, 10000);
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) {
        s->parent_fence = dlock_mutex_fence(&m);
        CU_ASSERT_TRUE(s->parent_fence > s->child_fence);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    dlt_flag_set(&s->done, 1);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 20000), 0);
    printf("  caching process up to fence %llu; this process %llu; the cache again %llu\n", s->child_fence,
           s->parent_fence, s->child_after);
    CU_ASSERT_TRUE(s->child_after > s->parent_fence);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_SHM_FREE(s, 1);
}

struct listed {
    char names[8][32];
    uint64_t fence[8];
    int held[8];
    int n;
};

static int list_cb(const char *name, const dlock_lock_info_t *info, void *arg) {
    struct listed *l = arg;
    if (l->n < 8) {
        snprintf(l->names[l->n], sizeof l->names[l->n], "%s", name);
        l->fence[l->n] = info->fence;
        l->held[l->n] = info->held;
    }
    l->n++;
    return 0;
}

/* dlock_list through a client seeded with one node finds the held locks
 * of every node; with restart_guard_ms, the first grant of each lock
 * waits for its own marker (<prefix>{name}:epoch, in the lock's slot). */
static void test_cluster_list_and_restart_guard(void) {
    static signed char owner[SLOTS];
    dlock_client_t *ch = NULL, *cl = NULL, *cg = NULL;
    dlock_mutex_t m[NN], other, g1, g2;
    char names[NN][32], oname[32], gn1[32], gn2[32], key[320], url[256];
    struct listed found;
    int next = 0, i, j, hits, o;
    double t0, el;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    dlt_cluster_url(&clus, url, sizeof url, "0", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&ch, url, 3000), 0);
    dlt_cluster_url(&clus, url, sizeof url, "1", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 3000), 0);
    for (i = 0; i < NN; i++) {
        CU_ASSERT_FATAL(dlt_slot_name(names[i], sizeof names[i], "ls/", &next, owner, i, -1) == 0);
        DLT_ASSERT_ERR(mutex_make(&m[i], names[i], ch, 0, 0, 0, NULL, NULL), 0);
        DLT_ASSERT_ERR(dlock_mutex_lock(&m[i]), 0);
    }
    CU_ASSERT_FATAL(dlt_slot_name(oname, sizeof oname, "other/", &next, owner, 2, -1) == 0);
    DLT_ASSERT_ERR(mutex_make(&other, oname, ch, 0, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&other), 0);

    memset(&found, 0, sizeof found);
    DLT_ASSERT_ERR(dlock_list(cl, "ls/*", list_cb, &found), 0);
    printf("  dlock_list(\"ls/*\") through node 1: %d locks\n", found.n);
    DLT_ASSERT_INT_EQ(found.n, NN);
    for (i = 0; i < NN; i++) {
        for (j = 0, hits = 0; j < found.n && j < 8; j++) {
            if (strcmp(found.names[j], names[i]) != 0) continue;
            hits++;
            DLT_ASSERT_INT_EQ(found.held[j], 1);
            CU_ASSERT_TRUE(found.fence[j] == dlock_mutex_fence(&m[i]));
        }
        DLT_ASSERT_INT_EQ(hits, 1);
    }
    memset(&found, 0, sizeof found);
    DLT_ASSERT_ERR(dlock_list(cl, NULL, list_cb, &found), 0);
    DLT_ASSERT_INT_EQ(found.n, NN + 1);
    for (i = 0; i < NN; i++) DLT_ASSERT_ERR(dlock_mutex_unlock(&m[i]), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&other), 0);
    memset(&found, 0, sizeof found);
    DLT_ASSERT_ERR(dlock_list(cl, NULL, list_cb, &found), 0);
    DLT_ASSERT_INT_EQ(found.n, 0);
    for (i = 0; i < NN; i++) DLT_ASSERT_ERR(dlock_mutex_destroy(&m[i]), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&other), 0);

    /* The restart guard, per lock. */
    dlt_cluster_url(&clus, url, sizeof url, "2", "restart_guard_ms=700");
    DLT_ASSERT_ERR(dlt_client_make(&cg, url, 5000), 0);
    CU_ASSERT_FATAL(dlt_slot_name(gn1, sizeof gn1, "guard/", &next, owner, 0, -1) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(gn2, sizeof gn2, "guard/", &next, owner, 1, -1) == 0);
    DLT_ASSERT_ERR(mutex_make(&g1, gn1, cg, 0, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&g2, gn2, cg, 0, 0, 0, NULL, NULL), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&g1), 0);
    el = dlt_now() - t0;
    o = owner[dlt_lock_slot(gn1)];
    dlt_lock_key(gn1, key, sizeof key);
    strcat(key, ":epoch");
    printf("  restart guard 700 ms: first grant of %s after %.2f s (%s on node %d: %d)\n", gn1, el, key, o,
           dlt_redis_exists(&clus.node[o], key));
    CU_ASSERT_TRUE(el >= 0.35); /* it did wait for the guard */
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&clus.node[o], key), 1);
    DLT_ASSERT_INT_EQ(dlt_cluster_keyslot(&clus, o, key), dlt_lock_slot(gn1));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&g1), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&g1), 0); /* the guard has passed for it */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&g1), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&g2), EBUSY); /* its own guard starts now */
    DLT_ASSERT_ERR(dlock_mutex_lock(&g2), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&g2), 0);
    o = owner[dlt_lock_slot(gn2)];
    dlt_lock_key(gn2, key, sizeof key);
    strcat(key, ":epoch");
    DLT_ASSERT_INT_EQ(dlt_redis_exists(&clus.node[o], key), 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&g1), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&g2), 0);

    DLT_ASSERT_ERR(dlock_client_destroy(ch), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cg), 0);
}

/* ========================================================================
 * 8. A node dies (last: it leaves the cluster without node 2)
 * ====================================================================== */

/* Node 2 is killed (no replica takes over): its locks are ENOLCK within
 * the client's unreachable bound; nodes 0 and 1 go on granting, renewing
 * and waking waiters -- also for a client whose first seed is the dead
 * node. */
static void test_cluster_node_dies(void) {
    static signed char owner[SLOTS];
    dlock_client_t *ca = NULL, *cw = NULL;
    dlock_mutex_t mA, mB, mC, wB;
    char nA[32], nB[32], nC[32], key[300], url[256];
    struct waiter wt = { NULL, 15000, -1, 0 };
    pthread_t th;
    double t0, el, t_unlock;
    int next = 0, rc, i;

    CL_UP();
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);
    CU_ASSERT_FATAL(dlt_slot_name(nA, sizeof nA, "die/", &next, owner, 0, -1) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(nB, sizeof nB, "die/", &next, owner, 1, -1) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(nC, sizeof nC, "die/", &next, owner, 2, -1) == 0);
    dlt_cluster_url(&clus, url, sizeof url, "20", NULL); /* the node that dies first */
    DLT_ASSERT_ERR(dlt_client_make(&ca, url, 1500), 0);
    DLT_ASSERT_ERR(dlt_client_make(&cw, url, 1500), 0);
    dlt_flag_set(&lost_calls, 0);
    DLT_ASSERT_ERR(mutex_make(&mA, nA, ca, 1000, 0, 0, on_lost, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&mB, nB, ca, 10000, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&mC, nC, ca, 0, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&wB, nB, cw, 0, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mC), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mC), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mA), 0); /* held across the kill */

    CU_ASSERT_FATAL(dlt_cluster_kill(&clus, 2) == 0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&mC);
    el = dlt_now() - t0;
    printf("  node 2 dead: lock of its %s: %s after %.2f s [%s]\n", nC, dlt_errno_label(rc), el, dlock_last_error());
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(el < 10.0);
    if (rc == 0) (void)dlock_mutex_unlock(&mC);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mC), ENOLCK);
    CU_ASSERT_TRUE(dlt_now() - t0 < 10.0);

    /* Node 1's locks work, and a waiter (its subscriber on node 0: node 2,
     * the first seed, is dead) is woken by the release. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&mB), 0);
    wt.m = &wB;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, waiter_thread, &wt) == 0);
    dlt_lock_key(nB, key, sizeof key);
    {
        char where[64];
        long long n = dlt_cluster_subs_wait(&clus, key, where, sizeof where);
        printf("  the waiter listens for %s on %s\n", key, where);
        DLT_ASSERT_INT_EQ(n, 1);
    }
    dlt_sleep_ms(200);
    t_unlock = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mB), 0);
    pthread_join(th, NULL);
    printf("  waiter woke %.3f s after the release (lease 10 s)\n", wt.t_got - t_unlock);
    DLT_ASSERT_ERR(wt.rc, 0);
    CU_ASSERT_TRUE(wt.t_got - t_unlock < 2.0);

    /* After the other nodes have marked it failed too (node timeout 2 s):
     * node 0's hold was renewed all along; both live nodes still grant. */
    hold_m = &mA;
    hold_checks = hold_misses = 0;
    pause_checking(3000);
    hold_m = NULL;
    DLT_ASSERT_INT_EQ(hold_misses, 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_ERR(dlock_mutex_trylock(&mB), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&mB), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mA), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mA), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mA), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mC), ENOLCK);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&mA), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mB), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mC), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&wB), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(ca), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cw), 0);
}

/* ========================================================================
 * 9. A TLS-only cluster (rediss+cluster://)
 * ====================================================================== */

/* rediss+cluster://HOST:P,... for the nodes listed in which (as cl_url),
 * with tls_ca_file=<the fixture's certificate folder>/ca_file unless
 * ca_file is NULL (the system store), then &query when not NULL. */
static void tls_url(char *buf, size_t cap, const char *host, const char *which, const char *ca_file,
                    const char *query) {
    size_t n = (size_t)snprintf(buf, cap, "rediss+cluster://");
    const char *sep = "?";
    for (const char *p = which; *p; p++)
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s:%d", p == which ? "" : ",", host,
                              clus.node[*p - '0'].port);
    if (ca_file != NULL) {
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "?tls_ca_file=%s/%s", clus.node[0].tls_dir, ca_file);
        sep = "&";
    }
    if (query != NULL) snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", sep, query);
}

struct twake {
    struct wake h; /* the holder: wake_holder */
    char waiter_url[TLS_URL_MAX];
    int waiting;
    double t_got;
};

/* The waiter: finds the lock busy, then waits for it at most 8 s -- less
 * than the holder's lease, so only the release notification can end the
 * wait in time. */
static int twake_waiter(void *arg) {
    struct twake *w = arg;
    dlock_client_t *cl;
    dlock_mutex_t m;
    DLT_CK(dlt_client_make(&cl, w->waiter_url, 3000), 0);
    DLT_CK(mutex_make(&m, w->h.name, cl, 0, 0, 0, NULL, NULL), 0);
    DLT_CK(dlock_mutex_trylock(&m), EBUSY);
    dlt_flag_set(&w->waiting, 1);
    DLT_CK(timedlock_ms(&m, 8000), 0);
    w->t_got = dlt_now();
    DLT_CK(dlt_flag_get(&w->h.released), 1); /* granted after the release, not before */
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

/* A client of the TLS cluster that must not get in: it is made, its
 * trylock and its lock (no deadline) fail with ENOLCK and a certificate
 * reason, within the unreachable bound (1 s) and some slack, and so does
 * destroying it. */
static void tls_refused(const char *what, const char *url, const char *name, int owner) {
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    double t0;
    int rc;
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 1000), 0);
    CU_ASSERT_FATAL(cl != NULL);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 0, 0, 0, NULL, NULL), 0);
    for (int blocking = 0; blocking < 2; blocking++) {
        char msg[1024];
        t0 = dlt_now();
        rc = blocking ? dlock_mutex_lock(&m) : dlock_mutex_trylock(&m);
        double el = dlt_now() - t0;
        snprintf(msg, sizeof msg, "%s", rc ? dlock_last_error() : "(granted)");
        printf("  %s, %s: %s after %.2f s: %s\n", what, blocking ? "lock" : "trylock", dlt_errno_label(rc), el,
               msg);
        DLT_ASSERT_ERR(rc, ENOLCK);
        CU_ASSERT_TRUE(el < 6.0);
        if (strstr(msg, "certificate") == NULL) {
            fprintf(stderr, "  %s: the message does not say \"certificate\": %s\n", what, msg);
            CU_FAIL("no certificate reason in dlock_last_error()");
        }
        if (rc == 0) (void)dlock_mutex_unlock(&m);
    }
    DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&clus.node[owner], name), 0); /* nothing was granted */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    /* (The failed attempts are orphans the client tries to release before
     * it goes, within the unreachable bound.) */
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    printf("  %s: the client destroyed in %.2f s\n", what, dlt_now() - t0);
    CU_ASSERT_TRUE(dlt_now() - t0 < 6.0);
}

#define TN 3 /* lock names per node */

/* A TLS-only cluster (3 masters with "port 0", clients and the cluster
 * bus over TLS), used through rediss+cluster:// with the test CA:
 *  - the servers do not answer plain TCP;
 *  - a waiter in one process (its client seeded with node 0, by the name
 *    localhost) is woken by a release made by another process on node 2
 *    (lease 10 s) within 2 s: the release notification reached it over a
 *    TLS subscriber;
 *  - locks on names of every node (a client seeded with node 1 only) land
 *    on the owning node, and only there (the others answer MOVED to it);
 *    another client sees them busy, then free after the unlocks;
 *  - with an unrelated CA, or with the system store, the trylock and the
 *    lock fail with ENOLCK and a certificate reason, within a few seconds,
 *    and grant nothing.
 * It forms its cluster in place of the plain one (which the next plain
 * test would form again). */
static void test_cluster_tls(void) {
    static signed char owner[SLOTS];
    struct twake *w = DLT_SHM_NEW(struct twake, 1);
    dlock_client_t *ca = NULL, *cb = NULL;
    dlock_mutex_t ma[NN * TN], mb[NN * TN];
    char names[NN * TN][32], key[300], url[TLS_URL_MAX];
    pid_t holder, waiter;
    int next = 0, i;
    double t0 = dlt_now();

    CL_TLS_UP();
    printf("  (formed and checked over TLS in %.2f s; certificates in %s)\n", dlt_now() - t0, clus.node[0].tls_dir);
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&clus, 0, owner) == NN);

    /* Plain TCP gets no answer. */
    {
        struct timeval tv = { 1, 0 };
        redisContext *ctx = redisConnectWithTimeout("127.0.0.1", clus.node[0].port, tv);
        redisReply *r = NULL;
        if (ctx != NULL && !ctx->err) {
            redisSetTimeout(ctx, tv);
            r = redisCommand(ctx, "PING");
        }
        CU_ASSERT_FALSE(r != NULL && r->type == REDIS_REPLY_STATUS);
        if (r != NULL) freeReplyObject(r);
        if (ctx != NULL) redisFree(ctx);
    }

    /* Wake-up across processes and nodes, over TLS.  (Both processes are
     * forked before this process makes any client.) */
    CU_ASSERT_FATAL(dlt_slot_name(w->h.name, sizeof w->h.name, "tlswake/", &next, owner, 2, -1) == 0);
    tls_url(w->h.url, sizeof w->h.url, "127.0.0.1", "2", "ca.crt", NULL);
    tls_url(w->waiter_url, sizeof w->waiter_url, "localhost", "0", "ca.crt", NULL);
    holder = dlt_spawn(wake_holder, &w->h);
    CU_ASSERT_FATAL(holder > 0);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&w->h.held, 1, 10000), 1);
    waiter = dlt_spawn(twake_waiter, w);
    CU_ASSERT_FATAL(waiter > 0);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&w->waiting, 1, 10000), 1);
    dlt_lock_key(w->h.name, key, sizeof key);
    {
        char where[64];
        long long n = dlt_cluster_subs_wait(&clus, key, where, sizeof where);
        printf("  the waiter (seeded with node 0) listens for %s on %s\n", key, where);
        DLT_ASSERT_INT_EQ(n, 1);
    }
    dlt_sleep_ms(300);
    dlt_flag_set(&w->h.release, 1);
    DLT_ASSERT_INT_EQ(dlt_wait(waiter, 20000), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(holder, 20000), 0);
    {
        double dt = w->t_got - w->h.t_unlock;
        printf("  the waiter got the lock of node 2 %.3f s after the unlock (lease 10 s)\n", dt);
        CU_ASSERT_TRUE(w->t_got > 0 && dt >= 0 && dt < 2.0);
    }

    /* Locks on every node, each key on its slot's master. */
    tls_url(url, sizeof url, "127.0.0.1", "1", "ca.crt", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&ca, url, 3000), 0);
    tls_url(url, sizeof url, "localhost", "2", "ca.crt", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&cb, url, 3000), 0);
    CU_ASSERT_FATAL(ca != NULL && cb != NULL);
    for (i = 0; i < NN * TN; i++) {
        CU_ASSERT_FATAL(dlt_slot_name(names[i], sizeof names[i], "tls/", &next, owner, i / TN, -1) == 0);
        DLT_ASSERT_ERR(mutex_make(&ma[i], names[i], ca, 0, 0, 0, NULL, NULL), 0);
        DLT_ASSERT_ERR(mutex_make(&mb[i], names[i], cb, 0, 0, 0, NULL, NULL), 0);
    }
    for (i = 0; i < NN * TN; i++) {
        int o = i / TN;
        DLT_ASSERT_ERR(dlock_mutex_lock(&ma[i]), 0);
        dlt_lock_key(names[i], key, sizeof key);
        DLT_ASSERT_INT_EQ(dlt_cluster_keyslot(&clus, o, key), dlt_lock_slot(names[i]));
        DLT_ASSERT_INT_EQ(dlt_redis_exists(&clus.node[o], key), 1);
        for (int j = 0; j < NN; j++)
            if (j != o) DLT_ASSERT_INT_EQ(dlt_cluster_moved_port(&clus, j, key), clus.node[o].port);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&mb[i]), EBUSY);
    }
    for (i = 0; i < NN * TN; i++) {
        DLT_ASSERT_ERR(dlock_mutex_unlock(&ma[i]), 0);
        DLT_ASSERT_INT_EQ(dlt_redis_lock_exists(&clus.node[i / TN], names[i]), 0);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&mb[i]), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&mb[i]), 0);
    }
    printf("  %d locks on each of the 3 nodes: each key on its slot's master only\n", TN);

    /* Certificates the client must refuse. */
    tls_url(url, sizeof url, "127.0.0.1", "0", "ca2.crt", NULL);
    tls_refused("an unrelated CA", url, names[0], 0);
    tls_url(url, sizeof url, "127.0.0.1", "12", NULL, NULL);
    tls_refused("the system store", url, names[TN], 1);
    /* The good clients are untouched by it. */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&ma[NN * TN - 1]), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mb[NN * TN - 1]), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma[NN * TN - 1]), 0);

    for (i = 0; i < NN * TN; i++) {
        DLT_ASSERT_ERR(dlock_mutex_destroy(&ma[i]), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&mb[i]), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(ca), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cb), 0);
    DLT_SHM_FREE(w, 1);
    printf("  the TLS cluster test took %.2f s\n", dlt_now() - t0);
}

/* ========================================================================
 * 10. A master fails over to its replica (a cluster of its own)
 * ====================================================================== */

/* Six nodes (dlt_cluster_start with a replica each): masters 0-2 (0-5460,
 * 5461-10922, 10923-16383), and 3-5, node i the replica of master i - 3.  The replicas may always fail over
 * (validity factor 0); a short node timeout keeps the failover quick. */
#define FO_CONF "cluster-node-timeout 1000\ncluster-replica-validity-factor 0\nrepl-diskless-sync-delay 0"

static dlt_cluster fo;

/* A lock holder's field on node i, a replica too (READONLY first, on the same
 * connection): 1 with the value in buf, 0 no such field or key, -1 no
 * answer or an error (a redirection). */
static int fo_hget(int i, const char *key, const char *field, char *buf, size_t cap) {
    struct timeval tv = { 2, 0 };
    redisContext *ctx;
    redisReply *r;
    int v = -1;
    buf[0] = '\0';
    if (fo.node[i].pid <= 0) return -1;
    ctx = redisConnectWithTimeout("127.0.0.1", fo.node[i].port, tv);
    if (ctx == NULL || ctx->err) {
        if (ctx != NULL) redisFree(ctx);
        return -1;
    }
    redisSetTimeout(ctx, tv);
    r = redisCommand(ctx, "READONLY");
    if (r != NULL) freeReplyObject(r);
    r = redisCommand(ctx, "EVAL_RO %s 1 %s %s", DLT_LOCK_FIELD_LUA, key, field);
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        snprintf(buf, cap, "%s", r->str);
        v = 1;
    } else if (r != NULL && r->type == REDIS_REPLY_NIL) {
        v = 0;
    }
    if (r != NULL) freeReplyObject(r);
    redisFree(ctx);
    return v;
}

static void fo_on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    fprintf(stderr, "  lost-lock handler: %s\n", name);
    dlt_flag_add((int *)arg, 1);
}

struct fowait {
    char name[64];
    char url[256];
    int go, waiting, done, rc, released;
    double t_unlock, t_got;
    char err[512];
};

/* The waiter (another process): finds C busy, then waits for it (at most
 * 20 s); reports what it got and when. */
static int fo_waiter(void *arg) {
    struct fowait *w = arg;
    dlock_client_t *cl;
    dlock_mutex_t m;
    int rc;
    DLT_CKT(dlt_flag_wait(&w->go, 1, 30000));
    DLT_CK(dlt_client_make(&cl, w->url, 10000), 0);
    DLT_CK(mutex_make(&m, w->name, cl, 0, 0, 0, NULL, NULL), 0);
    DLT_CK(dlock_mutex_trylock(&m), EBUSY);
    dlt_flag_set(&w->waiting, 1);
    rc = timedlock_ms(&m, 20000);
    w->t_got = dlt_now();
    w->rc = rc;
    snprintf(w->err, sizeof w->err, "%s", rc ? dlock_last_error() : "");
    if (rc == 0) {
        DLT_CK(dlt_flag_get(&w->released), 1); /* granted after the release, not before */
        DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    dlt_flag_set(&w->done, 1);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

#define FO_A 3 /* holds on the failing master, with different leases */

/* Master 0 of a cluster with replicas is SIGKILLed and its replica (node
 * 3) takes over its slots:
 *  - a hold on another master (B) stays valid throughout, never lost;
 *  - a new lock in the failed master's slots is granted through the same
 *    client after the failover, within its unreachable bound, on the
 *    promoted replica;
 *  - each hold taken on the failed master before the kill (A: leases of
 *    1, 3 and 8 s, so that some are usually lost and some kept) is either
 *    kept -- and then, whenever holds() says so, the promoted replica has
 *    the lock with that hold's token and fence; its unlock works there --
 *    or reported lost (the handler once, unlock EPERM): never silently
 *    wrong;
 *  - a waiter in another process, blocked on a lock of the failed
 *    master's slots (C, 15 s lease) held by a third client, gets it soon
 *    (2 s) after that client unlocks it after the failover: release
 *    notifications follow the slot to its new master. */
static void test_cluster_failover(void) {
    static signed char owner[SLOTS];
    struct fowait *w = DLT_SHM_NEW(struct fowait, 1);
    static const unsigned leaseA[FO_A] = { 1000, 3000, 8000 };
    dlock_client_t *ca = NULL, *cc = NULL;
    dlock_mutex_t mA[FO_A], mB, mN, mC;
    char nA[FO_A][32], nB[32], nN[32], key[300], url[256], tokA[FO_A][64], buf[128], role[32];
    int lostA[FO_A] = { 0 }, lostB = 0, keptA[FO_A] = { 0 }, next = 0, i, rc, promoted = 0;
    int b_checks = 0, b_misses = 0, a_checks = 0, a_wrong = 0;
    uint64_t fenceA[FO_A];
    double t_start = dlt_now(), t_kill, t_promoted = 0, t0, el;
    pid_t waiter = -1;

    if (dlt_cluster_start(&fo, NN, 1, 0, FO_CONF) != 0) {
        DLT_SHM_FREE(w, 1);
        CU_FAIL_FATAL("the failover cluster (3 masters, 3 replicas) did not form");
    }
    printf("  failover cluster formed in %.2f s: masters at %d, %d, %d; replicas at %d, %d, %d\n",
           dlt_now() - t_start, fo.node[0].port, fo.node[1].port, fo.node[2].port, fo.node[3].port, fo.node[4].port,
           fo.node[5].port);
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&fo, 1, owner) == NN);
    for (i = 0; i < FO_A; i++) CU_ASSERT_FATAL(dlt_slot_name(nA[i], sizeof nA[i], "fo/", &next, owner, 0, -1) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(nB, sizeof nB, "fo/", &next, owner, 1, -1) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(nN, sizeof nN, "fo/", &next, owner, 0, -1) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(w->name, sizeof w->name, "fo/", &next, owner, 0, -1) == 0);
    dlt_cluster_url(&fo, w->url, sizeof w->url, "12", NULL);
    waiter = dlt_spawn(fo_waiter, w); /* before any client of ours */
    CU_ASSERT_FATAL(waiter > 0);

    /* The holds: A (master 0) and B (master 1) by one client whose URL
     * names the master that will fail first; C (master 0) by another. */
    dlt_cluster_url(&fo, url, sizeof url, "01", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&ca, url, 10000), 0);
    dlt_cluster_url(&fo, url, sizeof url, "2", NULL);
    DLT_ASSERT_ERR(dlt_client_make(&cc, url, 10000), 0);
    CU_ASSERT_FATAL(ca != NULL && cc != NULL);
    for (i = 0; i < FO_A; i++) DLT_ASSERT_ERR(mutex_make(&mA[i], nA[i], ca, leaseA[i], 0, 0, fo_on_lost, &lostA[i]), 0);
    DLT_ASSERT_ERR(mutex_make(&mB, nB, ca, 3000, 0, 0, fo_on_lost, &lostB), 0);
    DLT_ASSERT_ERR(mutex_make(&mN, nN, ca, 3000, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&mC, w->name, cc, 15000, 0, 0, NULL, NULL), 0);
    for (i = 0; i < FO_A; i++) DLT_ASSERT_ERR(dlock_mutex_lock(&mA[i]), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mB), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mC), 0);
    dlt_flag_set(&w->go, 1);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&w->waiting, 1, 10000), 1);
    dlt_lock_key(w->name, key, sizeof key);
    {
        long long n = 0;
        for (double end = dlt_now() + 5.0; dlt_now() < end && (n = dlt_cluster_subs(&fo, 0, key, 1)) < 1;
             dlt_sleep_ms(20))
            ;
        printf("  the waiter listens for %s on master 0 (%lld subscriber)\n", key, n);
        DLT_ASSERT_INT_EQ(n, 1);
    }

    /* Each A: its token and fence on master 0, the same on its replica. */
    for (i = 0; i < FO_A; i++) {
        fenceA[i] = dlock_mutex_fence(&mA[i]);
        dlt_lock_key(nA[i], key, sizeof key);
        DLT_ASSERT_INT_EQ(fo_hget(0, key, "owner", tokA[i], sizeof tokA[i]), 1);
        DLT_ASSERT_INT_EQ(fo_hget(0, key, "fence", buf, sizeof buf), 1);
        DLT_ASSERT_INT_EQ(strtoull(buf, NULL, 10), fenceA[i]);
        rc = 0;
        for (double end = dlt_now() + 3.0; dlt_now() < end; dlt_sleep_ms(20))
            if (fo_hget(NN, key, "owner", buf, sizeof buf) == 1 && strcmp(buf, tokA[i]) == 0 && (rc = 1)) break;
        DLT_ASSERT_INT_EQ(rc, 1); /* replicated before the kill */
    }
    dlt_sleep_ms(300); /* the replica has the renewals so far, too */

    /* The kill; the replica takes over (B checked all along). */
    CU_ASSERT_FATAL(dlt_cluster_kill(&fo, 0) == 0);
    t_kill = dlt_now();
    for (double end = t_kill + 15.0; dlt_now() < end; dlt_sleep_ms(50)) {
        b_checks++;
        if (dlock_mutex_holds(&mB) != 1) b_misses++;
        if (dlt_redis_role(&fo.node[NN], role, sizeof role) == 0 && strcmp(role, "master") == 0 &&
            dlt_cluster_slot_map(&fo, NN, owner) == NN && owner[0] == NN && owner[5460] == NN) {
            promoted = 1;
            t_promoted = dlt_now();
            break;
        }
    }
    printf("  master 0 killed: node 3 %s after %.2f s\n", promoted ? "promoted" : "NOT promoted",
           (promoted ? t_promoted : dlt_now()) - t_kill);
    if (!promoted) {
        (void)dlt_wait(waiter, 1); /* ends it */
        dlt_cluster_cleanup(&fo);
        CU_FAIL_FATAL("the replica of the killed master was not promoted within 15 s");
    }

    /* A new lock in the failed master's slots, through the same client. */
    t0 = dlt_now();
    rc = dlock_mutex_lock(&mN);
    el = dlt_now() - t0;
    printf("  new lock %s in the failed master's slots: %s after %.2f s [%s]\n", nN, dlt_errno_label(rc), el,
           rc ? dlock_last_error() : "");
    DLT_ASSERT_ERR(rc, 0);
    CU_ASSERT_TRUE(el < 10.5);
    if (rc == 0) {
        dlt_lock_key(nN, key, sizeof key);
        DLT_ASSERT_INT_EQ(fo_hget(NN, key, "fence", buf, sizeof buf), 1);
        DLT_ASSERT_INT_EQ(strtoull(buf, NULL, 10), dlock_mutex_fence(&mN));
        DLT_ASSERT_ERR(dlock_mutex_unlock(&mN), 0);
        DLT_ASSERT_INT_EQ(fo_hget(NN, key, "owner", buf, sizeof buf), 0);
    }

    /* The A holds: whenever holds() says 1, the new master has that hold
     * (token, fence).  Watched for a while: long enough for renewals to
     * either reach the new master or fail there. */
    for (double end = dlt_now() + 2.0; dlt_now() < end; dlt_sleep_ms(50)) {
        b_checks++;
        if (dlock_mutex_holds(&mB) != 1) b_misses++;
        for (i = 0; i < FO_A; i++) {
            char tok[64], fen[32];
            int before, after, ho, hf;
            dlt_lock_key(nA[i], key, sizeof key);
            before = dlock_mutex_holds(&mA[i]);
            ho = fo_hget(NN, key, "owner", tok, sizeof tok);
            hf = fo_hget(NN, key, "fence", fen, sizeof fen);
            after = dlock_mutex_holds(&mA[i]);
            if (!(before && after)) continue;
            a_checks++;
            if (ho != 1 || hf != 1 || strcmp(tok, tokA[i]) != 0 || strtoull(fen, NULL, 10) != fenceA[i]) {
                a_wrong++;
                fprintf(stderr, "  %s: holds() says 1, but the new master has owner %s fence %s (hold: %.12s..., %" PRIu64 ")\n",
                        nA[i], ho == 1 ? tok : "(none)", hf == 1 ? fen : "(none)", tokA[i], fenceA[i]);
            }
        }
    }
    printf("  after the failover: holds() of an A said 1 %d times, the new master agreed every time but %d\n",
           a_checks, a_wrong);
    DLT_ASSERT_INT_EQ(a_wrong, 0);
    for (i = 0; i < FO_A; i++) {
        keptA[i] = dlock_mutex_holds(&mA[i]);
        dlt_lock_key(nA[i], key, sizeof key);
        if (keptA[i]) {
            DLT_ASSERT_INT_EQ(dlock_mutex_fence(&mA[i]), fenceA[i]);
            DLT_ASSERT_ERR(dlock_mutex_unlock(&mA[i]), 0);
            DLT_ASSERT_INT_EQ(fo_hget(NN, key, "owner", buf, sizeof buf), 0);
            DLT_ASSERT_INT_EQ(dlt_flag_get(&lostA[i]), 0);
        } else {
            DLT_ASSERT_ERR(dlock_mutex_unlock(&mA[i]), EPERM);
            DLT_ASSERT_INT_EQ(dlt_flag_get(&lostA[i]), 1);
        }
        printf("  A%d %s (lease %u ms): %s\n", i, nA[i], leaseA[i],
               keptA[i] ? "KEPT (renewed on the promoted replica; unlocked there)" : "LOST (handler ran, unlock EPERM)");
    }
    /* Still free for anyone afterwards. */
    for (i = 0; i < FO_A; i++) {
        DLT_ASSERT_ERR(dlock_mutex_trylock(&mA[i]), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&mA[i]), 0);
    }

    /* C: its holder unlocks; the waiter gets it soon. */
    w->t_unlock = dlt_now();
    dlt_flag_set(&w->released, 1);
    rc = dlock_mutex_unlock(&mC);
    printf("  C %s unlocked by its holder %.2f s after the kill: %s\n", w->name, w->t_unlock - t_kill,
           dlt_errno_label(rc));
    DLT_ASSERT_ERR(rc, 0);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&w->done, 1, 15000), 1);
    DLT_ASSERT_INT_EQ(dlt_wait(waiter, 10000), 0);
    if (w->rc == 0)
        printf("  the waiter got C %.3f s after the unlock (C's lease 15 s)\n", w->t_got - w->t_unlock);
    else
        printf("  the waiter: %s %.2f s after the unlock: %s\n", dlt_errno_label(w->rc), w->t_got - w->t_unlock,
               w->err);
    DLT_ASSERT_ERR(w->rc, 0);
    CU_ASSERT_TRUE(w->rc == 0 && w->t_got - w->t_unlock < 2.0);

    /* B: held all along, never lost. */
    b_checks++;
    if (dlock_mutex_holds(&mB) != 1) b_misses++;
    printf("  B on master 1: %d checks, %d misses\n", b_checks, b_misses);
    DLT_ASSERT_INT_EQ(b_misses, 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lostB), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mB), 0);

    for (i = 0; i < FO_A; i++) DLT_ASSERT_ERR(dlock_mutex_destroy(&mA[i]), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mB), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mN), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mC), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(ca), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cc), 0);
    DLT_SHM_FREE(w, 1);
    dlt_cluster_cleanup(&fo);
    printf("  the failover test took %.2f s\n", dlt_now() - t_start);
}

/* Polls until node i is a master serving slot: 1, or 0 after timeout_ms. */
static int fo_serves(int i, int slot, int timeout_ms) {
    static signed char owner[SLOTS];
    char role[32];
    for (double end = dlt_now() + timeout_ms / 1000.0; dlt_now() < end; dlt_sleep_ms(50))
        if (dlt_redis_role(&fo.node[i], role, sizeof role) == 0 && strcmp(role, "master") == 0 &&
            dlt_cluster_slot_map(&fo, i, owner) > 0 && owner[slot] == i)
            return 1;
    return 0;
}

/* One failover rule, on a cluster with replicas:
 *  - an unlock whose request is on its way when its master dies (the
 *    master SIGSTOPped as the request leaves, so it sits unanswered in
 *    the master's socket, then SIGKILLed) is asked again on the replica
 *    promoted in its place and returns 0 there (the replica had the
 *    hold), the lock gone -- never ENOLCK ("the request may have run")
 *    before the unreachable bound;
 *  - a 0.5 s timedlock in the slots of a master killed just before ends
 *    at its deadline (+50 ms) with ETIMEDOUT, as on one server or
 *    Sentinel -- not ENOLCK a back-off step short of it. */
static void test_cluster_failover_unlock_in_flight(void) {
    static signed char owner[SLOTS];
    dlock_client_t *ca = NULL;
    dlock_mutex_t mU, mT;
    dlt_unlocker u = { &mU, 0, 0, -1, -1, 0, "" };
    char nU[32], nT[32], key[300], url[256], tok[64], buf[64];
    int next = 0, replicated = 0;
    double t_start = dlt_now(), t_kill, el;
    pthread_t th;

    if (dlt_cluster_start(&fo, NN, 1, 0, FO_CONF) != 0)
        CU_FAIL_FATAL("the failover cluster (3 masters, 3 replicas) did not form");
    CU_ASSERT_FATAL(dlt_cluster_slot_map(&fo, 2, owner) == NN);
    CU_ASSERT_FATAL(dlt_slot_name(nU, sizeof nU, "fu/", &next, owner, 0, -1) == 0);
    CU_ASSERT_FATAL(dlt_slot_name(nT, sizeof nT, "fu/", &next, owner, 1, -1) == 0);
    dlt_cluster_url(&fo, url, sizeof url, "2", NULL); /* a node that stays up */
    DLT_ASSERT_ERR(dlt_client_make(&ca, url, 10000), 0);
    CU_ASSERT_FATAL(ca != NULL);
    DLT_ASSERT_ERR(mutex_make(&mU, nU, ca, 10000, 0, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&mT, nT, ca, 10000, 0, 0, NULL, NULL), 0);

    /* U held on master 0 (by the thread that will unlock it), its hold on
     * the replica (node 3) too. */
    CU_ASSERT_FATAL(pthread_create(&th, NULL, dlt_unlocker_run, &u) == 0);
    DLT_ASSERT_INT_EQ(dlt_flag_wait(&u.locked, 1, 10000), 1);
    DLT_ASSERT_ERR(u.lock_rc, 0);
    dlt_lock_key(nU, key, sizeof key);
    DLT_ASSERT_INT_EQ(fo_hget(0, key, "owner", tok, sizeof tok), 1);
    for (double end = dlt_now() + 3.0; dlt_now() < end && !replicated; dlt_sleep_ms(20))
        replicated = fo_hget(NN, key, "owner", buf, sizeof buf) == 1 && strcmp(buf, tok) == 0;
    CU_ASSERT_FATAL(replicated);

    /* The unlock goes out to a master that has stopped; then it dies. */
    CU_ASSERT_FATAL(kill(fo.node[0].pid, SIGSTOP) == 0);
    dlt_flag_set(&u.go, 1);
    dlt_sleep_ms(300);
    DLT_ASSERT_INT_EQ(u.t_done == 0, 1); /* unanswered so far */
    CU_ASSERT_FATAL(dlt_cluster_kill(&fo, 0) == 0);
    t_kill = dlt_now();
    pthread_join(th, NULL);
    el = u.t_done - t_kill;
    printf("\n  unlock in flight when its master died: %s %.2f s after the kill [%s]\n", dlt_errno_label(u.rc),
           el, u.err);
    DLT_ASSERT_ERR(u.rc, 0);
    CU_ASSERT_TRUE(el < 10.0);
    DLT_ASSERT_INT_EQ(fo_serves(NN, 0, 1000), 1); /* answered by the promoted replica... */
    DLT_ASSERT_INT_EQ(fo_hget(NN, key, "owner", buf, sizeof buf), 0); /* ...where the lock is gone */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mU), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mU), 0);

    /* A timed lock in the slots of a master just killed. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&mT), 0); /* routed, a connection pooled */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mT), 0);
    CU_ASSERT_FATAL(dlt_cluster_kill(&fo, 1) == 0);
    dlt_timedlock_ends_at_deadline(&mT, "its master was killed");
    /* After the failover, the same call gets it. */
    DLT_ASSERT_INT_EQ(fo_serves(NN + 1, dlt_lock_slot(nT), 15000), 1);
    DLT_ASSERT_ERR(timedlock_ms(&mT, 5000), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mT), 0);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&mU), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mT), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(ca), 0);
    dlt_cluster_cleanup(&fo);
    printf("  the test took %.2f s\n", dlt_now() - t_start);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_cluster_routing),
    DLT_TEST(test_cluster_exclusion_across_processes),
    DLT_TEST(test_cluster_wakeup_crosses_nodes),
    DLT_TEST(test_cluster_slot_migration_under_traffic),
    DLT_TEST(test_cluster_ask_single_key_requests),
    DLT_TEST(test_cluster_calls_outlast_a_stalled_slot),
    DLT_TEST(test_cluster_bad_input),
    DLT_TEST(test_cluster_fair_mutex),
    DLT_TEST(test_cluster_rwlock),
    DLT_TEST(test_cluster_condvar),
    DLT_TEST(test_cluster_caching_handover),
    DLT_TEST(test_cluster_list_and_restart_guard),
    DLT_TEST(test_cluster_node_dies), /* last of the plain ones: node 2 stays dead */
    DLT_TEST(test_cluster_tls),       /* its own (TLS-only) cluster */
    DLT_TEST(test_cluster_failover),  /* a cluster of its own, with replicas */
    DLT_TEST(test_cluster_failover_unlock_in_flight), /* the same */
    { NULL, NULL }
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "cluster", tests);
    dlt_cluster_cleanup(&clus);
    dlt_cluster_cleanup(&fo);
    return rc;
}
