/* test_deadlock.c -- deadlocks found across processes, and who waits.
 * labels: redis; timeout: 300
 *
 * Against SPEC section 2 (Deadlocks across
 * hosts) and dlock_mutexattr_setdeadlock / dlock_lock_waiters in dlock.h:
 * a cycle of waits across processes (2 and 3 members; a mutex and a
 * rwlock mixed) fails exactly one member with EDEADLK -- the one the
 * victim rule names, the greatest "host:pid:tid" -- and the others then
 * acquire; DEFAULT mutexes without the attribute never get EDEADLK; a
 * soak in one lock order never does either, and in random orders every
 * EDEADLK is a real cycle (checked from the processes' log); a member killed before its
 * cycle closes leaves no false EDEADLK (its records stop being
 * refreshed); a cycle across the slots of a Redis Cluster; ENOTSUP for
 * the attribute on Redlock; the waiters as dlock_lock_waiters lists them;
 * a cycle between two "hosts" (network namespaces with their own host
 * names), whose victim the rule names by host.
 *
 * Each member of a cycle is a child process with its own connections:
 * member i holds lock i, then waits for lock i+1 (mod n).  Workers report
 * through their exit status (DLT_CK); what they share travels through
 * MAP_SHARED memory.
 */
#define DLT_CK_MOD 120
#include "fixture.h"
#include "fixture_multi.h"

#include "backend/backend.h" /* dlock__script_body: the waits script, asked directly */

#include <dlock.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CY_MAX 4

/* What a lock of a cycle is. */
enum {
    K_ERRORCHECK, /* an ERRORCHECK mutex: detection on by default */
    K_DEFAULT,    /* a DEFAULT mutex, no attribute: detection off */
    K_RW_READ,    /* a rwlock with the attribute: held for reading, waited for as a writer */
};

/* A cycle's shared state. */
struct cyc {
    int n;              /* members */
    int kind[CY_MAX];   /* lock i's kind */
    unsigned lease_ms;  /* 0: the default */
    int wait_ms;        /* each member's bound on its second lock */
    char url[512];      /* "": the default client */
    char prefix[32];    /* lock i is "<prefix>/i" */
    int held;           /* members holding their first lock */
    int go;             /* member i waits for its second lock once go > i */
    int rc[CY_MAX];     /* each member's result for its second lock (-1: not yet) */
    int waited;         /* members whose wait for their second lock ended */
    char who[CY_MAX][300]; /* each member's "host:pid:tid" */
    int edeadlk, acquired;
    double t_go, t_edeadlk; /* when the members were let wait; when EDEADLK came (dlt_now) */
};

struct member {
    struct cyc *s;
    int i;
};

/* One lock of the cycle, of its kind, on client c. */
struct obj {
    int kind;
    dlock_mutex_t m;
    dlock_rwlock_t rw;
};

static int obj_init(struct obj *o, const struct cyc *s, int i, dlock_client_t *c) {
    dlock_mutexattr_t a;
    char name[64];
    int rc;
    snprintf(name, sizeof name, "%s/%d", s->prefix, i);
    o->kind = s->kind[i];
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (c != NULL) dlock_mutexattr_setclient(&a, c);
    if (s->lease_ms) dlock_mutexattr_setlease(&a, s->lease_ms);
    if (o->kind == K_ERRORCHECK) dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK);
    if (o->kind == K_RW_READ) dlock_mutexattr_setdeadlock(&a, 1);
    rc = o->kind == K_RW_READ ? dlock_rwlock_init(&o->rw, name, &a) : dlock_mutex_init(&o->m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* first: the member's own lock (a read lock for a rwlock); else the one
 * it waits for (a write lock), until ms from now. */
static int obj_lock(struct obj *o, int first, int ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    if (o->kind == K_RW_READ) return first ? dlock_rwlock_rdlock(&o->rw) : dlock_rwlock_timedwrlock(&o->rw, &ts);
    return first ? dlock_mutex_lock(&o->m) : dlock_mutex_timedlock(&o->m, &ts);
}

static int obj_unlock(struct obj *o) {
    return o->kind == K_RW_READ ? dlock_rwlock_unlock(&o->rw) : dlock_mutex_unlock(&o->m);
}

static void obj_destroy(struct obj *o) {
    if (o->kind == K_RW_READ) dlock_rwlock_destroy(&o->rw);
    else dlock_mutex_destroy(&o->m);
}

/* Member i: holds lock i, waits for lock i+1; on EDEADLK unlocks lock i
 * (as the victim must), on success unlocks both.  One that timed out
 * keeps lock i until every member's wait ended: its unlock would hand the
 * lock to a member whose own deadline had not come yet (they began to wait
 * at nearly the same time, which a loaded host spreads apart), and that
 * member would acquire it -- not a detection, but not a timeout either. */
static int member_run(void *p) {
    struct member *mb = p;
    struct cyc *s = mb->s;
    dlock_client_t *c = NULL;
    struct obj mine, next;
    char host[256];
    int rc;
    if (s->url[0]) DLT_CK(dlt_client_make(&c, s->url, 5000), 0);
    DLT_CK(obj_init(&mine, s, mb->i, c), 0);
    DLT_CK(obj_init(&next, s, (mb->i + 1) % s->n, c), 0);
    gethostname(host, sizeof host);
    snprintf(s->who[mb->i], sizeof s->who[0], "%s:%ld:%ld", host, (long)getpid(), (long)syscall(SYS_gettid));
    DLT_CK(obj_lock(&mine, 1, 0), 0);
    dlt_flag_add(&s->held, 1);
    DLT_CKT(dlt_flag_wait_ge(&s->go, mb->i + 1, 10000));
    rc = obj_lock(&next, 0, s->wait_ms);
    dlt_flag_set(&s->rc[mb->i], rc);
    dlt_flag_add(&s->waited, 1);
    if (rc == ETIMEDOUT) DLT_CKT(dlt_flag_wait_ge(&s->waited, s->n, 20000));
    if (rc == EDEADLK) {
        s->t_edeadlk = dlt_now();
        DLT_CKT(strstr(dlock_last_error(), "deadlock") != NULL);
        dlt_flag_add(&s->edeadlk, 1);
    } else if (rc == 0) {
        dlt_flag_add(&s->acquired, 1);
        DLT_CK(obj_unlock(&next), 0);
    }
    DLT_CK(obj_unlock(&mine), 0);
    obj_destroy(&mine);
    obj_destroy(&next);
    if (c != NULL) dlock_client_destroy(c);
    return 0;
}

static struct cyc *cyc_new(int n, const char *prefix) {
    struct cyc *s = DLT_SHM_NEW(struct cyc, 1);
    int i;
    s->n = n;
    s->wait_ms = 8000;
    snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
    for (i = 0; i < CY_MAX; i++) s->rc[i] = -1;
    return s;
}

/* Runs the cycle: every member holds its lock, then all wait; returns
 * when every member is done.  The members' exit statuses are asserted. */
static void cyc_run(struct cyc *s) {
    struct member mb[CY_MAX];
    pid_t pid[CY_MAX];
    int i;
    for (i = 0; i < s->n; i++) {
        mb[i].s = s;
        mb[i].i = i;
        pid[i] = dlt_spawn(member_run, &mb[i]);
        CU_ASSERT_FATAL(pid[i] > 0);
    }
    CU_ASSERT(dlt_flag_wait(&s->held, s->n, 10000));
    s->t_go = dlt_now();
    dlt_flag_set(&s->go, s->n);
    for (i = 0; i < s->n; i++) DLT_ASSERT_INT_EQ(dlt_wait(pid[i], 20000), 0);
    if (s->edeadlk > 0) printf("  EDEADLK %.2f s after the members began to wait\n", s->t_edeadlk - s->t_go);
}

/* The member the victim rule names: the greatest "host:pid:tid". */
static int cyc_victim(const struct cyc *s) {
    int i, v = 0;
    for (i = 1; i < s->n; i++)
        if (strcmp(s->who[i], s->who[v]) > 0) v = i;
    return v;
}

/* Exactly one EDEADLK, the victim's; every other member acquired. */
static void cyc_check_one(const struct cyc *s) {
    int i, v = cyc_victim(s);
    DLT_ASSERT_INT_EQ(s->edeadlk, 1);
    DLT_ASSERT_INT_EQ(s->acquired, s->n - 1);
    for (i = 0; i < s->n; i++) DLT_ASSERT_ERR(s->rc[i], i == v ? EDEADLK : 0);
}

/* ========================================================================
 * Cycles
 * ====================================================================== */

static void test_two_process_cycle(void) {
    struct cyc *s = cyc_new(2, "d/two");
    double t0 = dlt_now();
    cyc_run(s);
    cyc_check_one(s);
    /* Found well before the members' own 8 s bound (not a speed claim:
     * the bound only tells detection from a timeout). */
    CU_ASSERT(dlt_now() - t0 < 6.0);
    DLT_SHM_FREE(s, 1);
}

static void test_three_process_cycle(void) {
    struct cyc *s = cyc_new(3, "d/three");
    cyc_run(s);
    cyc_check_one(s);
    DLT_SHM_FREE(s, 1);
}

/* A mutex and a rwlock: member 0 holds the mutex and waits to write the
 * rwlock, which member 1 holds for reading while it waits for the
 * mutex. */
static void test_mixed_cycle(void) {
    struct cyc *s = cyc_new(2, "d/mixed");
    s->kind[0] = K_ERRORCHECK;
    s->kind[1] = K_RW_READ;
    cyc_run(s);
    cyc_check_one(s);
    DLT_SHM_FREE(s, 1);
}

/* The victim is chosen among the members that detect: member 1 waits for
 * a DEFAULT mutex (no detection), member 0 for an ERRORCHECK one; member
 * 0 gets EDEADLK whichever "host:pid:tid" is greater. */
static void test_victim_detects(void) {
    struct cyc *s = cyc_new(2, "d/victim");
    s->kind[0] = K_DEFAULT;    /* member 1 waits for it */
    s->kind[1] = K_ERRORCHECK; /* member 0 waits for it */
    cyc_run(s);
    DLT_ASSERT_INT_EQ(s->edeadlk, 1);
    DLT_ASSERT_ERR(s->rc[0], EDEADLK);
    DLT_ASSERT_ERR(s->rc[1], 0);
    DLT_SHM_FREE(s, 1);
}

/* DEFAULT mutexes without the attribute: a real cycle, but nobody
 * detects; both time out. */
static void test_default_never(void) {
    struct cyc *s = cyc_new(2, "d/default");
    s->kind[0] = s->kind[1] = K_DEFAULT;
    s->wait_ms = 2500;
    cyc_run(s);
    DLT_ASSERT_INT_EQ(s->edeadlk, 0);
    DLT_ASSERT_ERR(s->rc[0], ETIMEDOUT);
    DLT_ASSERT_ERR(s->rc[1], ETIMEDOUT);
    DLT_SHM_FREE(s, 1);
}

/* Through the README's minimal ACL user: the waits' scripts use only the
 * commands it allows (a refused registration would be silent: no
 * detection), so the cycle is found. */
static void test_acl_user_cycle(void) {
    struct cyc *s = cyc_new(2, "d/acl");
    redisReply *r = dlt_redis_cmd(&dlt_server,
                                  "ACL SETUSER dldl on >dl-pw resetkeys ~dlock:* resetchannels &dlock:* -@all "
                                  "+evalsha +eval +script|load +subscribe +unsubscribe +select +scan +time +get +set +incr +mget "
                                  "+del +exists +pexpire +pttl +hget +hmget +hset +hdel +hgetall +zadd +zrem +zscore +zcard "
                                  "+zcount +zrange +zremrangebyscore +zpopmin +publish +rpush +blpop +lpop +lindex +lpos +lset +lrange +lrem");
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    snprintf(s->url, sizeof s->url, "redis://dldl:dl-pw@127.0.0.1:%d", dlt_server.port);
    cyc_run(s);
    cyc_check_one(s);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "ACL DELUSER dldl"));
    DLT_SHM_FREE(s, 1);
}


/* A cycle on a Redis Cluster of three masters: the locks, and the edge
 * keys of the holders' tokens, on different slots. */
static void test_cluster_cycle(void) {
    dlt_cluster cl;
    struct cyc *s = cyc_new(3, "d/cl");
    memset(&cl, 0, sizeof cl);
    if (dlt_cluster_start(&cl, 3, 0, 0, NULL) != 0) {
        CU_FAIL("cannot start a cluster");
        DLT_SHM_FREE(s, 1);
        return;
    }
    dlt_cluster_url(&cl, s->url, sizeof s->url, "0", NULL);
    cyc_run(s);
    cyc_check_one(s);
    dlt_cluster_cleanup(&cl);
    DLT_SHM_FREE(s, 1);
}

/* Random orders: four processes take "d/rand/0" and "d/rand/1" in a
 * random order, over and over.  Cycles happen; every EDEADLK must be a
 * real one, which the log shows: the victim, holding X and waiting for Y,
 * overlapped in its wait with another process's round that held Y and
 * waited for X. */
#define RD_PROCS 4
#define RD_MAX 400
struct rd_ev {
    int first, rc;
    double t_wait, t_end;
};
struct rd_log {
    int stop;
    int n[RD_PROCS];
    struct rd_ev ev[RD_PROCS][RD_MAX];
};
struct rd_arg {
    struct rd_log *log;
    int p;
};

static int rand_run(void *q) {
    struct rd_arg *ra = q;
    struct rd_log *lg = ra->log;
    dlock_mutex_t m[2];
    dlock_mutexattr_t a;
    unsigned seed = (unsigned)getpid() * 2654435761u;
    int i;
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK), 0);
    DLT_CK(dlock_mutex_init(&m[0], "d/rand/0", &a), 0);
    DLT_CK(dlock_mutex_init(&m[1], "d/rand/1", &a), 0);
    while (!dlt_flag_get(&lg->stop) && lg->n[ra->p] < RD_MAX) {
        struct rd_ev *e = &lg->ev[ra->p][lg->n[ra->p]];
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 5000);
        e->first = rand_r(&seed) % 2;
        DLT_CK(dlock_mutex_lock(&m[e->first]), 0);
        dlt_sleep_ms(10 + rand_r(&seed) % 30);
        e->t_wait = dlt_now();
        e->rc = dlock_mutex_timedlock(&m[1 - e->first], &ts);
        e->t_end = dlt_now();
        if (e->rc == 0) DLT_CK(dlock_mutex_unlock(&m[1 - e->first]), 0);
        DLT_CK(dlock_mutex_unlock(&m[e->first]), 0);
        DLT_CKT(e->rc == 0 || e->rc == EDEADLK);
        dlt_flag_add(&lg->n[ra->p], 1);
        dlt_sleep_ms(rand_r(&seed) % 20);
    }
    for (i = 0; i < 2; i++) dlock_mutex_destroy(&m[i]);
    dlock_mutexattr_destroy(&a);
    return 0;
}

/* Did another process hold what e waited for while waiting for what e held? */
static int rd_real(const struct rd_log *lg, int p, const struct rd_ev *e) {
    int q, k;
    for (q = 0; q < RD_PROCS; q++)
        for (k = 0; q != p && k < lg->n[q]; k++) {
            const struct rd_ev *f = &lg->ev[q][k];
            if (f->first == 1 - e->first && f->t_wait < e->t_end && f->t_end > e->t_wait) return 1;
        }
    return 0;
}

static void test_random_orders_real(void) {
    struct rd_log *lg = DLT_SHM_NEW(struct rd_log, 1);
    struct rd_arg ra[RD_PROCS];
    pid_t pid[RD_PROCS];
    int p, k, dead = 0, rounds = 0;
    for (p = 0; p < RD_PROCS; p++) {
        ra[p].log = lg;
        ra[p].p = p;
        CU_ASSERT_FATAL((pid[p] = dlt_spawn(rand_run, &ra[p])) > 0);
    }
    dlt_sleep_ms(5000);
    dlt_flag_set(&lg->stop, 1);
    for (p = 0; p < RD_PROCS; p++) DLT_ASSERT_INT_EQ(dlt_wait(pid[p], 20000), 0);
    for (p = 0; p < RD_PROCS; p++)
        for (k = 0; k < lg->n[p]; k++) {
            rounds++;
            if (lg->ev[p][k].rc != EDEADLK) continue;
            dead++;
            CU_ASSERT(rd_real(lg, p, &lg->ev[p][k]));
        }
    printf("  %d rounds, %d EDEADLK, each a real cycle\n", rounds, dead);
    CU_ASSERT(rounds >= 8);
    DLT_SHM_FREE(lg, 1);
}


static int count_waiter(const dlock_lock_waiter_t *w, void *arg) {
    (void)w;
    ++*(int *)arg;
    return 0;
}

static int waiters(const char *name) {
    int n = 0, rc = dlock_lock_waiters(NULL, name, count_waiter, &n);
    return rc == 0 ? n : -rc;
}

/* Polls until name has `want` waiters listed: 1, or 0 after timeout_ms. */
static int waiters_wait(const char *name, int want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (dlt_now() < end) {
        if (waiters(name) == want) return 1;
        dlt_sleep_ms(10);
    }
    return 0;
}

/* ========================================================================
 * No false positives
 * ====================================================================== */

struct soak {
    int stop, edeadlk, errors, rounds;
};

/* Takes "d/soak/0..2" in one order (a random prefix of it), holds them a
 * little, lets them go, until told to stop. */
static int soak_run(void *p) {
    struct soak *s = p;
    dlock_mutex_t m[3];
    dlock_mutexattr_t a;
    unsigned seed = (unsigned)getpid();
    int i, k, rc;
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK), 0);
    for (i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "d/soak/%d", i);
        DLT_CK(dlock_mutex_init(&m[i], name, &a), 0);
    }
    while (!dlt_flag_get(&s->stop)) {
        int first = rand_r(&seed) % 3, last = first + rand_r(&seed) % (3 - first);
        for (k = first; k <= last; k++) {
            if ((rc = dlock_mutex_lock(&m[k])) != 0) {
                dlt_flag_add(rc == EDEADLK ? &s->edeadlk : &s->errors, 1);
                break;
            }
            dlt_sleep_ms(20 + rand_r(&seed) % 60);
        }
        for (k = k - 1; k >= first; k--) DLT_CK(dlock_mutex_unlock(&m[k]), 0);
        dlt_flag_add(&s->rounds, 1);
    }
    for (i = 0; i < 3; i++) dlock_mutex_destroy(&m[i]);
    dlock_mutexattr_destroy(&a);
    return 0;
}

/* Four processes, three locks always taken in one order: waits, chains
 * of waits (the walks run), never a cycle, never EDEADLK. */
static void test_soak_one_order(void) {
    struct soak *s = DLT_SHM_NEW(struct soak, 1);
    pid_t pid[4];
    int i;
    for (i = 0; i < 4; i++) CU_ASSERT_FATAL((pid[i] = dlt_spawn(soak_run, s)) > 0);
    dlt_sleep_ms(4000);
    dlt_flag_set(&s->stop, 1);
    for (i = 0; i < 4; i++) DLT_ASSERT_INT_EQ(dlt_wait(pid[i], 20000), 0);
    DLT_ASSERT_INT_EQ(s->edeadlk, 0);
    DLT_ASSERT_INT_EQ(s->errors, 0);
    CU_ASSERT(s->rounds > 10);
    DLT_SHM_FREE(s, 1);
}

/* Member 1 holds d/kill/1; member 0 holds d/kill/0 and waits for
 * d/kill/1, and is killed (-9); only then does member 1 wait for
 * d/kill/0.  The dead member's records are still there for a while, a
 * cycle to a walk that looks, but never refreshed again: member 1 (the
 * only member that detects: d/kill/1 is a DEFAULT mutex) gets no EDEADLK,
 * and d/kill/0 once the dead one's lease runs out. */
static void test_killed_member(void) {
    struct cyc *s = cyc_new(2, "d/kill");
    struct member mb[2];
    pid_t pid[2];
    int i;
    s->lease_ms = 2000;
    s->kind[0] = K_ERRORCHECK;
    s->kind[1] = K_DEFAULT;
    for (i = 0; i < 2; i++) {
        mb[i].s = s;
        mb[i].i = i;
        CU_ASSERT_FATAL((pid[i] = dlt_spawn(member_run, &mb[i])) > 0);
    }
    CU_ASSERT(dlt_flag_wait(&s->held, 2, 10000));
    dlt_flag_set(&s->go, 1);
    CU_ASSERT(waiters_wait("d/kill/1", 1, 5000)); /* member 0 waits, its records written */
    dlt_sleep_ms(2 * 250);                        /* (refreshed once or twice more) */
    kill(pid[0], SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_wait(pid[0], 5000), 128 + SIGKILL);
    dlt_flag_set(&s->go, 2);
    DLT_ASSERT_INT_EQ(dlt_wait(pid[1], 20000), 0);
    DLT_ASSERT_ERR(s->rc[1], 0);
    DLT_ASSERT_INT_EQ(s->edeadlk, 0);
    DLT_SHM_FREE(s, 1);
}

/* ========================================================================
 * Waiters, attributes, Redlock
 * ====================================================================== */

struct one_waiter {
    int go, done, rc;
    long long began; /* wall ms just before the call */
};

static int wait_for_w(void *p) {
    struct one_waiter *o = p;
    dlock_rwlock_t rw;
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    DLT_CK(dlock_rwlock_init(&rw, "d/w", NULL), 0);
    DLT_CKT(dlt_flag_wait(&o->go, 1, 10000));
    ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    o->began = dlt_wall_ms();
    o->rc = dlock_rwlock_timedrdlock(&rw, &ts);
    if (o->rc == 0) dlock_rwlock_unlock(&rw);
    dlock_rwlock_destroy(&rw);
    dlt_flag_set(&o->done, 1);
    return 0;
}

static int first_waiter(const dlock_lock_waiter_t *w, void *arg) {
    *(dlock_lock_waiter_t *)arg = *w;
    return 1;
}

/* A waiting reader in another process is listed (host, pid, thread,
 * since, mode) while it waits, and no longer once it got the lock.  It
 * is listed once it has waited 50 ms (it holds nothing), as waiting
 * since its call began (the server's clock is this host's; the bound
 * leaves room for the registration's request to be held up 35 ms, and
 * was missed by 10 ms or more when since was the time first listed). */
static void test_waiters_listed(void) {
    struct one_waiter *o = DLT_SHM_NEW(struct one_waiter, 1);
    dlock_lock_waiter_t w;
    dlock_mutex_t m;
    char host[256];
    pid_t pid;
    CU_ASSERT_FATAL((pid = dlt_spawn(wait_for_w, o)) > 0); /* (forked before this process's threads) */
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "d/w", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(waiters("d/w"), 0);
    dlt_flag_set(&o->go, 1);
    CU_ASSERT(waiters_wait("d/w", 1, 5000));
    memset(&w, 0, sizeof w);
    DLT_ASSERT_ERR(dlock_lock_waiters(NULL, "d/w", first_waiter, &w), 0);
    gethostname(host, sizeof host);
    CU_ASSERT_STRING_EQUAL(w.host, host);
    DLT_ASSERT_INT_EQ(w.pid, pid);
    CU_ASSERT(w.tid > 0);
    DLT_ASSERT_INT_EQ(w.shared, 1);
    DLT_ASSERT_INT_EQ(w.deadlock, 0); /* a rwlock without the attribute */
    CU_ASSERT(w.since_ms > 0 && w.since_ms <= w.server_now_ms);
    CU_ASSERT(w.since_ms >= o->began - 5 && w.since_ms <= o->began + 40);
    if (w.since_ms < o->began - 5 || w.since_ms > o->began + 40)
        fprintf(stderr, "waiting since %lld, the call began at %lld\n", (long long)w.since_ms, o->began);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 10000), 0);
    DLT_ASSERT_ERR(o->rc, 0);
    DLT_ASSERT_INT_EQ(waiters("d/w"), 0);
    DLT_ASSERT_ERR(dlock_lock_waiters(NULL, "d/w", NULL, NULL), EINVAL);
    dlock_mutex_destroy(&m);
    DLT_SHM_FREE(o, 1);
}

/* Queued waiters on "d/q" in other processes: [0] holds nothing (an
 * ERRORCHECK mutex: its wait detects), [1] holds "d/q1" while it waits. */
struct queued {
    int go[2], listed, rc[2];
    long long began[2]; /* wall ms just before each call */
};

static int queued_run(struct queued *q, int i) {
    dlock_mutexattr_t a;
    dlock_mutex_t m, other;
    struct timespec ts;
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_settype(&a, i == 0 ? DLOCK_MUTEX_ERRORCHECK : DLOCK_MUTEX_DEFAULT), 0);
    DLT_CK(dlock_mutex_init(&m, "d/q", &a), 0);
    DLT_CK(dlock_mutex_init(&other, "d/q1", NULL), 0);
    if (i == 1) DLT_CK(dlock_mutex_lock(&other), 0);
    DLT_CKT(dlt_flag_wait(&q->go[i], 1, 10000));
    ts = dlt_abs_in(CLOCK_REALTIME, 8000);
    q->began[i] = dlt_wall_ms();
    q->rc[i] = dlock_mutex_timedlock(&m, &ts);
    if (q->rc[i] == 0) {
        dlt_sleep_ms(20);
        DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    if (i == 1) DLT_CK(dlock_mutex_unlock(&other), 0);
    dlock_mutex_destroy(&other);
    dlock_mutex_destroy(&m);
    dlock_mutexattr_destroy(&a);
    return 0;
}

static int queued_leaf(void *p) { return queued_run(p, 0); }
static int queued_holder(void *p) { return queued_run(p, 1); }

struct queued_found {
    pid_t pid;
    dlock_lock_waiter_t w; /* its listing */
    int n;                 /* how often it is listed */
};

static int queued_find(const dlock_lock_waiter_t *w, void *arg) {
    struct queued_found *f = arg;
    if (w->pid == f->pid) {
        f->w = *w;
        f->n++;
    }
    return 0;
}

/* A queued waiter that holds nothing is listed by its queue entry, at
 * once and with no registration of its own (the lock's :waiting stays
 * without it), as waiting since it was queued, with its thread and its
 * detection; one that holds a lock registers as before (it may close a
 * cycle), and is listed once, not also by its entry.  Both are gone from
 * the list once they got the lock, the holder's registration taken back
 * by the grant. */
static void test_queued_waiters_listed(void) {
    struct queued *q = DLT_SHM_NEW(struct queued, 1);
    struct queued_found f;
    char key[300];
    dlock_mutex_t m;
    pid_t pid[2];
    int i;
    dlt_lock_key("d/q", key, sizeof key);
    CU_ASSERT_FATAL((pid[0] = dlt_spawn(queued_leaf, q)) > 0);
    CU_ASSERT_FATAL((pid[1] = dlt_spawn(queued_holder, q)) > 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "d/q", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_flag_set(&q->go[0], 1);
    CU_ASSERT(waiters_wait("d/q", 1, 5000));
    /* listed before any registration could be made (50 ms), and none is */
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %s:waiting", key)), 0);
    memset(&f, 0, sizeof f);
    f.pid = pid[0];
    DLT_ASSERT_ERR(dlock_lock_waiters(NULL, "d/q", queued_find, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 1);
    CU_ASSERT(f.w.tid > 0);
    DLT_ASSERT_INT_EQ(f.w.shared, 0);
    DLT_ASSERT_INT_EQ(f.w.deadlock, 1); /* ERRORCHECK */
    CU_ASSERT(f.w.since_ms >= q->began[0] - 5 && f.w.since_ms <= q->began[0] + 40);
    dlt_flag_set(&q->go[1], 1);
    CU_ASSERT(waiters_wait("d/q", 2, 5000));
    for (i = 0; i < 50 && dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %s:waiting", key)) < 1; i++)
        dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %s:waiting", key)), 1);
    dlt_sleep_ms(300); /* the holder's registration refreshed: still two, each once */
    DLT_ASSERT_INT_EQ(waiters("d/q"), 2);
    memset(&f, 0, sizeof f);
    f.pid = pid[1];
    DLT_ASSERT_ERR(dlock_lock_waiters(NULL, "d/q", queued_find, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 1);
    DLT_ASSERT_INT_EQ(f.w.deadlock, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(dlt_wait(pid[i], 10000), 0);
    for (i = 0; i < 2; i++) DLT_ASSERT_ERR(q->rc[i], 0);
    DLT_ASSERT_INT_EQ(waiters("d/q"), 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %s:waiting", key)), 0);
    dlock_mutex_destroy(&m);
    DLT_SHM_FREE(q, 1);
}

/* waits.lua's "note" for wait id on "d/n" (KEYS: the lock, :waiting,
 * :wmeta, readers, writers, queue, as backend.c names them); then the
 * number of registered waits. */
static long long note_then_count(const char *id) {
    char k[300], kw[320], km[320], kr[320], kx[320], kq[320];
    dlt_lock_key("d/n", k, sizeof k);
    snprintf(kw, sizeof kw, "%s:waiting", k);
    snprintf(km, sizeof km, "%s:wmeta", k);
    snprintf(kr, sizeof kr, "%s:readers", k);
    snprintf(kx, sizeof kx, "%s:writers", k);
    snprintf(kq, sizeof kq, "%s:fifo", k);
    redisReply *r = dlt_redis_cmd(&dlt_server, "EVAL %s 6 %s %s %s %s %s %s note %s %s 1500",
                                  dlock__script_body(DLOCK__SCRIPT_WAITS, 0), k, kw, km, kr, kx, kq, id,
                                  "0|h:1:2|x|1");
    CU_ASSERT(r != NULL && r->type == REDIS_REPLY_ARRAY);
    if (r != NULL) freeReplyObject(r);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %s", kw));
}

/* A tick of a wait that the queue has meanwhile granted the lock (the
 * grant withdrew its registration; its answer was on its way) registers
 * nothing: the listing would show it waiting for a lock it holds, until
 * the record lapsed (its wait ends thinking the grant withdrew it). */
static void test_tick_after_grant_registers_nothing(void) {
    char k[300];
    dlt_lock_key("d/n", k, sizeof k);
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s %s:waiting %s:wmeta", k, k, k));
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "HSET %s owner tok-granted fence 1", k));
    DLT_ASSERT_INT_EQ(note_then_count("tok-granted"), 0);
    DLT_ASSERT_INT_EQ(note_then_count("tok-other"), 1); /* another's wait registers */
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %s %s:waiting %s:wmeta", k, k, k));
}

static void test_attr(void) {
    dlock_mutexattr_t a;
    int on = -1;
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getdeadlock(&a, &on), 0);
    DLT_ASSERT_INT_EQ(on, 0); /* DEFAULT */
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getdeadlock(&a, &on), 0);
    DLT_ASSERT_INT_EQ(on, 1);
    DLT_ASSERT_ERR(dlock_mutexattr_setdeadlock(&a, 0), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getdeadlock(&a, &on), 0);
    DLT_ASSERT_INT_EQ(on, 0);
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_NORMAL), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setdeadlock(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getdeadlock(&a, &on), 0);
    DLT_ASSERT_INT_EQ(on, 1);
    DLT_ASSERT_ERR(dlock_mutexattr_setdeadlock(&a, 2), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getdeadlock(&a, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setdeadlock(&a, 1), EINVAL);
}

/* Redlock keeps no waits: the attribute is ENOTSUP, an ERRORCHECK mutex
 * simply does not detect, and the waiters cannot be listed. */
static void test_redlock_enotsup(void) {
    dlt_masters ms;
    dlock_client_t *c = NULL;
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    memset(&ms, 0, sizeof ms);
    if (dlt_masters_start(&ms, 3, 0) != 0) {
        CU_FAIL("cannot start the masters");
        return;
    }
    DLT_ASSERT_ERR(dlt_client_make(&c, ms.url, 3000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "d/rl", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setdeadlock(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "d/rl", &a), ENOTSUP);
    CU_ASSERT(strstr(dlock_last_error(), "Redlock") != NULL);
    DLT_ASSERT_ERR(dlock_lock_waiters(c, "d/rl", count_waiter, NULL), ENOTSUP);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&ms);
}

/* ========================================================================
 * Two hosts
 * ====================================================================== */

/* `test_deadlock --member FIRST SECOND DIR ME OTHER`, as a host's process
 * (test_two_hosts_netns): holds FIRST (an ERRORCHECK mutex, $DLOCK_URL),
 * says so in DIR/held.ME, waits for DIR/held.OTHER, then waits for SECOND
 * (8 s at most) and prints "member ME rc N on HOST". */
static int member_main(char **argv) {
    dlock_mutexattr_t a;
    dlock_mutex_t first, second;
    struct timespec ts;
    char path[600];
    double end;
    FILE *f;
    int rc;
    if (dlock_mutexattr_init(&a) != 0 || dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK) != 0 ||
        dlock_mutex_init(&first, argv[2], &a) != 0 || dlock_mutex_init(&second, argv[3], &a) != 0 ||
        dlock_mutex_lock(&first) != 0) {
        printf("member %s setup failed: %s\n", argv[5], dlock_last_error());
        return 1;
    }
    snprintf(path, sizeof path, "%s/held.%s", argv[4], argv[5]);
    if ((f = fopen(path, "w")) != NULL) fclose(f);
    snprintf(path, sizeof path, "%s/held.%s", argv[4], argv[6]);
    for (end = dlt_now() + 10; access(path, F_OK) != 0 && dlt_now() < end;) dlt_sleep_ms(10);
    ts = dlt_abs_in(CLOCK_REALTIME, 8000);
    rc = dlock_mutex_timedlock(&second, &ts);
    if (rc == 0) dlock_mutex_unlock(&second);
    dlock_mutex_unlock(&first);
    dlock_mutex_destroy(&first);
    dlock_mutex_destroy(&second);
    dlock_mutexattr_destroy(&a);
    gethostname(path, sizeof path);
    printf("member %s rc %d on %s\n", argv[5], rc, path);
    return 0;
}

/* Two "hosts": network namespaces joined by a veth pair, each with its own
 * host name (a UTS namespace: "hosta", "hostb"), the server in the first.
 * A cycle between a process on each: exactly one EDEADLK, hostb's (the
 * victim rule: "hostb:..." is the greater "host:pid:tid"); then a cycle of
 * three, two processes on hosta and one on hostb: again exactly one
 * EDEADLK, hostb's, and the two others get their locks. */
static void test_two_hosts_netns(void) {
    char setup[4096], script[8192], self[512], out[4096], err[1024];
    ssize_t n;
    FILE *f;
    if (!dlt_netns_ok("test_two_hosts_netns", "unshare")) return;
    CU_ASSERT_FATAL((n = readlink("/proc/self/exe", self, sizeof self - 1)) > 0);
    self[n] = '\0';
    dlt_tdir_make("dl-hosts");
    CU_ASSERT_FATAL(dlt_netns_setup(setup, sizeof setup, "dldl", 214, 6391, "\"$DIR\"") == 0);
    snprintf(script, sizeof script,
             "DIR='%s'; SELF='%s'\n"
             "%s"
             "M() { h=$1; shift; ip netns exec $ns$h unshare -u sh -c 'hostname \"$0\"; exec \"$@\"' host$h"
             " env DLOCK_URL=redis://$SRV:$PORT \"$SELF\" --member \"$@\"; }\n"
             "M a d/nh/0 d/nh/1 \"$DIR\" a b > \"$DIR/a.out\" 2>&1 & PA=$!\n"
             "M b d/nh/1 d/nh/0 \"$DIR\" b a > \"$DIR/b.out\" 2>&1 & PB=$!\n"
             "wait $PA; wait $PB\n"
             "M a d/nh3/0 d/nh3/1 \"$DIR\" a1 b3 > \"$DIR/a1.out\" 2>&1 & P1=$!\n"
             "M b d/nh3/1 d/nh3/2 \"$DIR\" b3 a2 > \"$DIR/b3.out\" 2>&1 & P2=$!\n"
             "M a d/nh3/2 d/nh3/0 \"$DIR\" a2 a1 > \"$DIR/a2.out\" 2>&1 & P3=$!\n"
             "wait $P1; wait $P2; wait $P3\n"
             "cat \"$DIR/a.out\" \"$DIR/b.out\" \"$DIR/a1.out\" \"$DIR/b3.out\" \"$DIR/a2.out\"\n",
             dlt_tdir(), self, setup);
    CU_ASSERT_FATAL((f = fopen(dlt_tpath("hosts.sh"), "w")) != NULL);
    fputs(script, f);
    fclose(f);
    {
        char *argv[] = { "/bin/sh", dlt_tpath("hosts.sh"), NULL };
        DLT_ASSERT_INT_EQ(dlt_run_capture(argv, out, err, sizeof out, 30000), 0);
    }
    CU_ASSERT(strstr(out, "member a rc 0 on hosta\n") != NULL);
    CU_ASSERT(strstr(out, "member b rc 35 on hostb\n") != NULL); /* EDEADLK */
    CU_ASSERT(strstr(out, "member a1 rc 0 on hosta\n") != NULL);
    CU_ASSERT(strstr(out, "member b3 rc 35 on hostb\n") != NULL);
    CU_ASSERT(strstr(out, "member a2 rc 0 on hosta\n") != NULL);
    if (strstr(out, "member b rc 35 on hostb\n") == NULL || strstr(out, "member b3 rc 35 on hostb\n") == NULL ||
        strstr(out, "member a2 rc 0 on hosta\n") == NULL)
        fprintf(stderr, "  the hosts said: %s%s\n", out, err);
    {
        char chk[128];
        snprintf(chk, sizeof chk, "ip netns list | grep -q dldl%ld", (long)getpid());
        CU_ASSERT(system(chk) != 0); /* the namespaces are gone */
    }
    dlt_tdir_done();
}


static const struct dlt_test tests[] = {
    DLT_TEST(test_attr),
    DLT_TEST(test_two_process_cycle),
    DLT_TEST(test_three_process_cycle),
    DLT_TEST(test_mixed_cycle),
    DLT_TEST(test_victim_detects),
    DLT_TEST(test_default_never),
    DLT_TEST(test_killed_member),
    DLT_TEST(test_soak_one_order),
    DLT_TEST(test_random_orders_real),
    DLT_TEST(test_waiters_listed),
    DLT_TEST(test_queued_waiters_listed),
    DLT_TEST(test_tick_after_grant_registers_nothing),
    DLT_TEST(test_acl_user_cycle),
    DLT_TEST(test_cluster_cycle),
    DLT_TEST(test_redlock_enotsup),
    DLT_TEST(test_two_hosts_netns),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    if (argc == 7 && strcmp(argv[1], "--member") == 0) return member_main(argv); /* a host's process */
    return dlt_main(argc, argv, "deadlock", tests);
}
