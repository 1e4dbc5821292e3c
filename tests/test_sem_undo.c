/* test_sem_undo.c -- semaphore undo (leased units) and interruptible waits.
 * labels: redis; timeout: 240
 *
 * Against SPEC section 2 (Semaphores) and the
 * dlock_sem_* section of dlock.h: with dlock_semattr_setundo each unit
 * taken is leased to the process (the server keeps its token in
 * dlock:{name}:semu by expiry and "u:SINCE:WHO" in dlock:{name}:semo),
 * renewed by the renewal thread, given back when its holder is killed
 * (a waiter elsewhere gets it), returned by its holder's post (a post by
 * a process with none adds one), told lost once to the lost-unit handler
 * (and then never given back twice), not inherited by a fork child, and
 * given back by dlock_client_destroy.  On a Redis Cluster too.  And
 * dlock_sem_xwait with DLOCK_F_INTR: EINTR on a signal, without losing a
 * unit a post handed to the wait.  A take or a return whose answer was
 * lost, asked again, leases or gives back one unit, not two.
 *
 * Workers report through their result (a child: its exit status), with
 * DLT_CK; what they share travels through MAP_SHARED memory.
 */
#define DLT_CK_MOD 120
#include "fixture.h"
#include "fixture_multi.h"
#include "proxy.h"

#include <dlock.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ========================================================================
 * Helpers: the semaphore's keys on dlt_server
 * ====================================================================== */

static int su_key(char *k, size_t cap, const char *name, const char *suffix) {
    return snprintf(k, cap, "dlock:{%s}:%s", name, suffix);
}

/* ZCARD of dlock:{name}:semu, the units leased under undo. */
static long long su_leased(const char *name) {
    char k[700];
    int n = su_key(k, sizeof k, name, "semu");
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %b", k, (size_t)n));
}

/* Entries of dlock:{name}:semo whose value starts with kind ("u:", "w:");
 * with pid > 0, only those whose WHO names that pid. */
static long long su_owners(const char *name, const char *kind, long pid) {
    char k[700], pidpart[32];
    redisReply *r;
    long long count = 0;
    size_t i;
    int n = su_key(k, sizeof k, name, "semo");
    snprintf(pidpart, sizeof pidpart, ":%ld:", pid);
    r = dlt_redis_cmd(&dlt_server, "HGETALL %b", k, (size_t)n);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r != NULL) freeReplyObject(r);
        return -1;
    }
    for (i = 1; i < r->elements; i += 2) {
        const char *v = r->element[i]->str;
        if (strncmp(v, kind, strlen(kind)) != 0) continue;
        /* u:SINCE:host:pid:tid */
        if (pid > 0 && strstr(v + 2, pidpart) == NULL) continue;
        count++;
    }
    freeReplyObject(r);
    return count;
}

/* The value as the server has it, LLONG_MIN if none. */
static long long su_value(const char *name) {
    char k[700];
    redisReply *r;
    long long v = LLONG_MIN;
    int n = su_key(k, sizeof k, name, "sem");
    r = dlt_redis_cmd(&dlt_server, "GET %b", k, (size_t)n);
    if (r != NULL && r->type == REDIS_REPLY_STRING) v = strtoll(r->str, NULL, 10);
    if (r != NULL) freeReplyObject(r);
    return v;
}

static long long su_queued(const char *name) {
    char k[700];
    int n = su_key(k, sizeof k, name, "semq");
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %b", k, (size_t)n));
}

/* Polls until f(name) == want: 1, or 0 after timeout_ms. */
static int su_wait(long long (*f)(const char *), const char *name, long long want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (dlt_now() < end) {
        if (f(name) == want) return 1;
        dlt_sleep_ms(5);
    }
    return 0;
}

/* Makes every leased unit of name lapse on the server now (their scores
 * in :semu in the past): the next op gives them back. */
static void su_lapse(const char *name) {
    char k[700];
    redisReply *r;
    size_t i;
    int n = su_key(k, sizeof k, name, "semu");
    r = dlt_redis_cmd(&dlt_server, "ZRANGE %b 0 -1", k, (size_t)n);
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_ARRAY);
    for (i = 0; i < r->elements; i++)
        freeReplyObject(dlt_redis_cmd(&dlt_server, "ZADD %b XX 1 %s", k, (size_t)n, r->element[i]->str));
    freeReplyObject(r);
}

static int su_getvalue(dlock_sem_t *s) {
    int v = -12345;
    int rc = dlock_sem_getvalue(s, &v);
    return rc == 0 ? v : -rc - 100000;
}

/* Attributes: undo on, lease_ms. */
static void su_attr(dlock_semattr_t *a, unsigned lease_ms, dlock_client_t *c) {
    DLT_ASSERT_ERR(dlock_semattr_init(a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setundo(a, 1), 0);
    DLT_ASSERT_ERR(dlock_semattr_setlease(a, lease_ms), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(a, c), 0);
}

/* ========================================================================
 * A killed holder's unit comes back; a living one's does not
 * ====================================================================== */

struct holder {
    const char *name;
    unsigned lease_ms;
    int *took;  /* shared: set once the unit is taken */
    int *done;  /* shared: a waiter returned */
    int rc;
};

/* Takes a unit with undo, says so, and sleeps until killed. */
static int holder_run(void *arg) {
    struct holder *h = arg;
    dlock_semattr_t a;
    dlock_sem_t s;
    int i;
    DLT_CK(dlock_semattr_init(&a), 0);
    DLT_CK(dlock_semattr_setundo(&a, 1), 0);
    DLT_CK(dlock_semattr_setlease(&a, h->lease_ms), 0);
    DLT_CK(dlock_sem_init(&s, h->name, 0, &a), 0);
    DLT_CK(dlock_sem_trywait(&s), 0);
    dlt_flag_set(h->took, 1);
    for (i = 0; i < 600; i++) dlt_sleep_ms(100); /* killed long before */
    return 0;
}

/* Waits (plain, 20 s at most) and says so. */
static int waiter_run(void *arg) {
    struct holder *h = arg;
    struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, 20000);
    dlock_sem_t s;
    DLT_CK(dlock_sem_init(&s, h->name, 0, NULL), 0);
    h->rc = dlock_sem_clockwait(&s, CLOCK_MONOTONIC, &ts);
    dlt_flag_add(h->done, 1);
    DLT_CK(h->rc, 0);
    DLT_CK(dlock_sem_destroy(&s), 0);
    return 0;
}

/* A holder with a 1000 ms lease keeps its unit, renewed, past several
 * leases while a waiter in another process waits; kill -9 it, and the
 * unit comes back within about its lease: the waiter gets it, and the
 * server forgets the lease. */
static void test_killed_holder(void) {
    struct holder *h = DLT_SHM_NEW(struct holder, 1);
    int *took = DLT_SHM_NEW(int, 1), *done = DLT_SHM_NEW(int, 1);
    dlt_task th, tw;
    double t0;
    h->name = "u/kill";
    h->lease_ms = 1000;
    h->took = took;
    h->done = done;
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET dlock:{u/kill}:sem 1"));
    if (dlt_task_start(&th, DLT_PROC, holder_run, h) != 0) return;
    CU_ASSERT_FATAL(dlt_flag_wait(took, 1, 10000));
    DLT_ASSERT_INT_EQ(su_leased("u/kill"), 1);
    DLT_ASSERT_INT_EQ(su_owners("u/kill", "u:", (long)th.pid), 1);
    if (dlt_task_start(&tw, DLT_PROC, waiter_run, h) != 0) {
        dlt_task_signal(&th, SIGKILL);
        dlt_task_join(&th, DLT_JOIN_MS);
        return;
    }
    CU_ASSERT(su_wait(su_queued, "u/kill", 1, 10000));
    dlt_sleep_ms(3000); /* three leases: renewed, the unit stays taken */
    DLT_ASSERT_INT_EQ(dlt_flag_get(done), 0);
    DLT_ASSERT_INT_EQ(su_leased("u/kill"), 1);
    t0 = dlt_now();
    dlt_task_signal(&th, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_task_join(&th, DLT_JOIN_MS), 128 + SIGKILL);
    CU_ASSERT(dlt_flag_wait(done, 1, 10000));
    /* The lease (1 s) plus the waiter's next ask (every second): well
     * under 5 s; not a speed claim, a bound on "about its lease". */
    CU_ASSERT(dlt_now() - t0 < 5.0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&tw, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(su_leased("u/kill"), 0);
    DLT_ASSERT_INT_EQ(su_owners("u/kill", "u:", 0), 0);
    DLT_ASSERT_INT_EQ(su_value("u/kill"), 0); /* the waiter took it (no undo: not leased) */
    DLT_SHM_FREE(h, 1);
    DLT_SHM_FREE(took, 1);
    DLT_SHM_FREE(done, 1);
}

/* A living holder with a short lease (300 ms) keeps its unit well past
 * several leases: every other op the server runs meanwhile (a trywait
 * elsewhere) would give a lapsed unit back, and none does. */
static void test_renewal_keeps(void) {
    dlock_semattr_t a;
    dlock_sem_t s, other;
    int i;
    su_attr(&a, 300, NULL);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "u/renew", 1, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&other, "u/renew", 1, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    for (i = 0; i < 8; i++) {
        dlt_sleep_ms(250);
        DLT_ASSERT_ERR(dlock_sem_trywait(&other), EAGAIN);
        DLT_ASSERT_INT_EQ(su_leased("u/renew"), 1);
    }
    DLT_ASSERT_INT_EQ(su_owners("u/renew", "u:", (long)getpid()), 1);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(su_getvalue(&s), 1);
    DLT_ASSERT_INT_EQ(su_leased("u/renew"), 0);
    DLT_ASSERT_INT_EQ(su_owners("u/renew", "u:", 0), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
}

/* ========================================================================
 * Posts: the holder's returns its own; another process's adds one
 * ====================================================================== */

static int poster_run(void *arg) {
    dlock_sem_t s;
    DLT_CK(dlock_sem_init(&s, (const char *)arg, 0, NULL), 0);
    DLT_CK(dlock_sem_post(&s), 0);
    DLT_CK(dlock_sem_destroy(&s), 0);
    return 0;
}

/* Two units taken with undo: each post by the holder gives one back (its
 * lease ends: :semu and :semo forget it), so the value comes back to 2
 * and no higher; a post by a process with none adds one; a post by the
 * holder once it has none adds one too. */
static void test_post_returns_own(void) {
    static char name[] = "u/post";
    dlock_semattr_t a;
    dlock_sem_t s;
    dlt_task t;
    su_attr(&a, 5000, NULL);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 2, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), EAGAIN);
    DLT_ASSERT_INT_EQ(su_leased(name), 2);
    DLT_ASSERT_INT_EQ(su_owners(name, "u:", (long)getpid()), 2);
    /* Another process (none leased) posts: a unit more. */
    if (dlt_task_start(&t, DLT_PROC, poster_run, name) != 0) return;
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(su_value(name), 1);
    DLT_ASSERT_INT_EQ(su_leased(name), 2);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0); /* leased too: 3 */
    DLT_ASSERT_INT_EQ(su_leased(name), 3);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(su_value(name), 1);
    DLT_ASSERT_INT_EQ(su_leased(name), 2);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(su_value(name), 3);
    DLT_ASSERT_INT_EQ(su_leased(name), 0);
    DLT_ASSERT_INT_EQ(su_owners(name, "u:", 0), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0); /* none left: adds */
    DLT_ASSERT_INT_EQ(su_value(name), 4);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
}

/* A fork child holds none of its parent's units: its post adds one; the
 * parent's unit stays leased until the parent posts it back. */
static void test_fork_child_none(void) {
    static char name[] = "u/fork";
    dlock_semattr_t a;
    dlock_sem_t s;
    pid_t pid;
    su_attr(&a, 5000, NULL);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 1, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) _exit(dlock_sem_post(&s) == 0 ? 0 : 1);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, DLT_JOIN_MS), 0);
    DLT_ASSERT_INT_EQ(su_value(name), 1);
    DLT_ASSERT_INT_EQ(su_leased(name), 1);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(su_value(name), 2);
    DLT_ASSERT_INT_EQ(su_leased(name), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
}

/* ========================================================================
 * Lost leases: told once, never given back twice
 * ====================================================================== */

struct lost_seen {
    int calls;
    int why;
    dlock_sem_t *s;
    char name[64];
};

static void on_lost(dlock_sem_t *s, const char *name, void *arg) {
    struct lost_seen *ls = arg;
    ls->why = dlock_lost_reason();
    ls->s = s;
    snprintf(ls->name, sizeof ls->name, "%s", name);
    dlt_flag_add(&ls->calls, 1);
}

/* how 0: the server lets the lease lapse (its :semu score in the past):
 * the next op gives the unit back and the renewal is refused (BROKEN).
 * how 1: the server is stopped (SIGSTOP) past the lease: the validity
 * runs out here (EXPIRED), and the server gives the unit back once it
 * runs again.  Either way the handler runs once, and the holder's post
 * then adds nothing: the value is back at 1, not 2. */
static void lost_case(int how) {
    const char *name = how ? "u/lost1" : "u/lost0";
    struct lost_seen ls;
    dlock_semattr_t a;
    dlock_sem_t s;
    memset(&ls, 0, sizeof ls);
    su_attr(&a, 600, NULL);
    DLT_ASSERT_ERR(dlock_semattr_setlostcallback(&a, on_lost, &ls), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 1, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_INT_EQ(su_leased(name), 1);
    if (how == 0) {
        su_lapse(name);
    } else {
        CU_ASSERT_FATAL(kill(dlt_server.pid, SIGSTOP) == 0);
        dlt_sleep_ms(1500);
        CU_ASSERT(kill(dlt_server.pid, SIGCONT) == 0);
    }
    CU_ASSERT(dlt_flag_wait(&ls.calls, 1, 5000));
    DLT_ASSERT_INT_EQ(ls.why, how ? DLOCK_LOST_EXPIRED : DLOCK_LOST_BROKEN);
    CU_ASSERT(ls.s == &s);
    CU_ASSERT(strcmp(ls.name, name) == 0);
    DLT_ASSERT_INT_EQ(su_getvalue(&s), 1); /* the unit came back */
    DLT_ASSERT_INT_EQ(su_leased(name), 0);
    DLT_ASSERT_INT_EQ(su_owners(name, "u:", 0), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0); /* forgets the lost unit */
    DLT_ASSERT_INT_EQ(su_getvalue(&s), 1);
    dlt_sleep_ms(300);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&ls.calls), 1);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0); /* none left: adds */
    DLT_ASSERT_INT_EQ(su_getvalue(&s), 2);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
}

static void test_lost_lapsed(void) {
    lost_case(0);
}

static void test_lost_server_stopped(void) {
    lost_case(1);
}

/* A lease the server says is gone when the holder posts it (the renewal
 * has not found out yet): the post tells the handler, adds nothing. */
static void test_lost_found_by_post(void) {
    static const char name[] = "u/lostpost";
    struct lost_seen ls;
    dlock_semattr_t a;
    dlock_sem_t s;
    char k[64];
    int n = su_key(k, sizeof k, name, "semu");
    memset(&ls, 0, sizeof ls);
    su_attr(&a, 20000, NULL); /* renewed first after ~6 s: the post comes first */
    DLT_ASSERT_ERR(dlock_semattr_setlostcallback(&a, on_lost, &ls), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 1, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    /* The lease goes, and the unit with it (as a `dlock break` would). */
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL %b", k, (size_t)n)), 1);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "SET dlock:{u/lostpost}:sem 1"));
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&ls.calls), 1);
    DLT_ASSERT_INT_EQ(ls.why, DLOCK_LOST_BROKEN);
    DLT_ASSERT_INT_EQ(su_getvalue(&s), 1);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
}

/* ========================================================================
 * Destroy and the client's end
 * ====================================================================== */

/* dlock_sem_destroy leaves the process's units leased (and renewed); a
 * later object posts one back; dlock_client_destroy gives back the rest. */
static void test_destroy_keeps_client_returns(void) {
    static const char name[] = "u/destroy";
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_server.url, 3000), 0);
    su_attr(&a, 300, c);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 2, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    dlt_sleep_ms(1000); /* past three leases: still renewed */
    DLT_ASSERT_INT_EQ(su_leased(name), 2);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 2, &a), 0);
    DLT_ASSERT_INT_EQ(su_getvalue(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(su_leased(name), 1);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_INT_EQ(su_leased(name), 0);
    DLT_ASSERT_INT_EQ(su_value(name), 2);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
}

/* ========================================================================
 * EINTR
 * ====================================================================== */

static void on_usr1(int sig) {
    (void)sig;
}

struct xwait_arg {
    dlock_sem_t *s;
    int flags;
    int rc;
    int *done;
};

static void *xwait_run(void *p) {
    struct xwait_arg *x = p;
    struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, 10000);
    x->rc = dlock_sem_xwait(x->s, x->flags, CLOCK_MONOTONIC, &ts);
    dlt_flag_set(x->done, 1);
    return NULL;
}

/* A waiter in dlock_sem_xwait(DLOCK_F_INTR) gets EINTR when a signal
 * handler runs in its thread, and leaves the queue; one without the flag
 * goes on waiting through the signal and takes the next post.  A signal
 * and a post at once: either the unit is taken (0), or EINTR and the
 * unit is still there -- never lost.  Bad flags are EINVAL. */
static void test_eintr(void) {
    static const char name[] = "u/intr";
    struct sigaction sa, old;
    struct xwait_arg x;
    dlock_semattr_t a;
    dlock_sem_t s;
    pthread_t th;
    int done = 0, round;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    CU_ASSERT_FATAL(sigaction(SIGUSR1, &sa, &old) == 0);
    su_attr(&a, 5000, NULL);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 0, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_xwait(&s, 4, CLOCK_MONOTONIC, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_xwait(&s, DLOCK_F_TRY | DLOCK_F_INTR, CLOCK_MONOTONIC, NULL), EAGAIN);
    for (round = 0; round < 2; round++) {
        x.s = &s;
        x.flags = round == 0 ? DLOCK_F_INTR : 0;
        x.rc = -1;
        x.done = &done;
        dlt_flag_set(&done, 0);
        CU_ASSERT_FATAL(pthread_create(&th, NULL, xwait_run, &x) == 0);
        CU_ASSERT(su_wait(su_queued, name, 1, 10000));
        pthread_kill(th, SIGUSR1);
        if (round == 0) {
            CU_ASSERT(dlt_flag_wait(&done, 1, 5000));
            pthread_join(th, NULL);
            DLT_ASSERT_ERR(x.rc, EINTR);
            DLT_ASSERT_INT_EQ(su_queued(name), 0);
        } else {
            dlt_sleep_ms(300);
            DLT_ASSERT_INT_EQ(dlt_flag_get(&done), 0); /* not interrupted */
            DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
            pthread_join(th, NULL);
            DLT_ASSERT_ERR(x.rc, 0);
            DLT_ASSERT_INT_EQ(su_leased(name), 1); /* leased: undo */
            DLT_ASSERT_ERR(dlock_sem_post(&s), 0); /* back */
            DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
        }
    }
    DLT_ASSERT_INT_EQ(su_getvalue(&s), 0);
    for (round = 0; round < 6; round++) {
        x.flags = DLOCK_F_INTR;
        x.rc = -1;
        dlt_flag_set(&done, 0);
        CU_ASSERT_FATAL(pthread_create(&th, NULL, xwait_run, &x) == 0);
        CU_ASSERT(su_wait(su_queued, name, 1, 10000));
        if (round % 2) pthread_kill(th, SIGUSR1);
        DLT_ASSERT_ERR(dlock_sem_post(&s), 0); /* a plain unit (this process's is given back) */
        if (!(round % 2)) pthread_kill(th, SIGUSR1);
        pthread_join(th, NULL);
        CU_ASSERT(x.rc == 0 || x.rc == EINTR);
        /* taken (and leased) or still there: one unit either way */
        DLT_ASSERT_INT_EQ(su_getvalue(&s) + su_leased(name), 1);
        DLT_ASSERT_INT_EQ(su_leased(name), x.rc == 0 ? 1 : 0);
        if (x.rc == 0) DLT_ASSERT_ERR(dlock_sem_post(&s), 0); /* give it back */
        DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    }
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    sigaction(SIGUSR1, &old, NULL);
}

/* ========================================================================
 * Answers lost
 * ====================================================================== */

static void count_lost(dlock_sem_t *s, const char *name, void *arg) {
    (void)s;
    (void)name;
    dlt_flag_add(arg, 1);
}

struct cut_arg {
    dlock_sem_t *s;
    int post; /* 1 post (a return), 0 trywait (a leased take) */
    int rc;
};

static void *cut_call(void *p) {
    struct cut_arg *a = p;
    a->rc = a->post ? dlock_sem_post(a->s) : dlock_sem_trywait(a->s);
    return NULL;
}

/* The answers of a leased take and of its return are cut (the proxy):
 * the library asks again, and the server, which did it the first time,
 * does not do it again: one unit leased, then that one given back (and
 * the return asked again is not taken for a lost lease). */
static void test_lost_answer_once(void) {
    static const char name[] = "u/cut";
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    struct cut_arg ca;
    pthread_t th;
    int post, lost = 0;
    CU_ASSERT_FATAL(px != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(px), 5000), 0);
    su_attr(&a, 5000, c);
    DLT_ASSERT_ERR(dlock_semattr_setlostcallback(&a, count_lost, &lost), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 3, &a), 0);
    for (post = 0; post <= 1; post++) {
        ca.s = &s;
        ca.post = post;
        ca.rc = -1;
        dlt_proxy_set(px, DLT_PROXY_CUT, 0, NULL, 0);
        CU_ASSERT_FATAL(pthread_create(&th, NULL, cut_call, &ca) == 0);
        dlt_sleep_ms(400);
        dlt_proxy_pass(px);
        pthread_join(th, NULL);
        DLT_ASSERT_ERR(ca.rc, 0);
        DLT_ASSERT_INT_EQ(su_value(name), post ? 3 : 2);
        DLT_ASSERT_INT_EQ(su_leased(name), post ? 0 : 1);
    }
    CU_ASSERT(dlt_proxy_faults(px) > 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    dlt_proxy_stop(px);
}

/* A post whose return gets no answer for the whole bound (the proxy a
 * black hole) ends in ENOLCK; the unit is the program's no more: it is
 * renewed no more and comes back when its lease runs out, and the next
 * take and post leave the value whole.  (Renewed on, it stayed leased
 * for the process's life: the next post returned its own take's unit.) */
static void test_unanswered_return(void) {
    static const char name[] = "u/noreturn";
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    int lost = 0, v = -1, rc;
    double end;
    CU_ASSERT_FATAL(px != NULL);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_proxy_url(px), 800), 0);
    su_attr(&a, 2000, c);
    DLT_ASSERT_ERR(dlock_semattr_setlostcallback(&a, count_lost, &lost), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 1, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_wait(&s), 0);
    DLT_ASSERT_INT_EQ(su_leased(name), 1);
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), ENOLCK);
    dlt_proxy_pass(px);
    dlt_sleep_ms(2500); /* the lease, from its last renewal before the drop */
    end = dlt_now() + 10.0;
    while ((rc = dlock_sem_getvalue(&s, &v)) == ENOLCK && dlt_now() < end) dlt_sleep_ms(50);
    DLT_ASSERT_ERR(rc, 0);
    DLT_ASSERT_INT_EQ(v, 1);
    DLT_ASSERT_INT_EQ(su_leased(name), 0);
    DLT_ASSERT_ERR(dlock_sem_wait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(su_value(name), 1);
    DLT_ASSERT_INT_EQ(su_leased(name), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost), 0); /* posted by the program: not lost */
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    dlt_proxy_stop(px);
}

/* ========================================================================
 * A cut-off holder hears of its loss before the unit goes on
 * ====================================================================== */

struct cutoff_seen {
    int calls;
    int why;
    long long at_us; /* dlt_now() when the handler ran, in µs */
};

static void cutoff_lost(dlock_sem_t *s, const char *name, void *arg) {
    struct cutoff_seen *cs = arg;
    (void)s;
    (void)name;
    cs->why = dlock_lost_reason();
    __atomic_store_n(&cs->at_us, (long long)(dlt_now() * 1e6), __ATOMIC_SEQ_CST);
    dlt_flag_add(&cs->calls, 1);
}

/* A holder whose link to the server goes dead (the proxy answers
 * nothing, as a partition) a little after it took a leased unit (lease
 * 1500 ms): its lost-unit handler runs by its own clock, no later than
 * the take + lease - drift, and so before another client, polling the
 * server all along, is given the unit the lease gave back -- though the
 * renewal must connect anew, and connecting hangs longer than the lease
 * is left.  The unreachable bound (5 s) is far past the lease: the
 * handler must not wait for the link to be given up. */
static void test_cut_off_holder(void) {
    static const char name[] = "u/cutoff";
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL, *oc = NULL;
    dlock_semattr_t a;
    dlock_sem_t held, other;
    struct cutoff_seen cs;
    char url[256];
    double t0, end, got = 0;
    int rc;
    memset(&cs, 0, sizeof cs);
    CU_ASSERT_FATAL(px != NULL);
    /* Database 1: connecting asks SELECT, so a connection made through
     * the black hole hangs for its connect budget (2 s), as one to a host
     * cut off hangs in connect(2).  Drift 100 ms: the holder's margin. */
    snprintf(url, sizeof url, "%s/1?drift_ms=100&connect_timeout_ms=2000", dlt_proxy_url(px));
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 5000), 0);
    snprintf(url, sizeof url, "%s/1", dlt_server.url);
    DLT_ASSERT_ERR(dlt_client_make(&oc, url, 5000), 0);
    su_attr(&a, 1500, c);
    DLT_ASSERT_ERR(dlock_semattr_setlostcallback(&a, cutoff_lost, &cs), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&held, name, 1, &a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setundo(&a, 0), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, oc), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&other, name, 1, &a), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_sem_trywait(&held), 0);
    dlt_sleep_ms(100);
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(px); /* a link reset too: the renewals must connect anew */
    /* The other client takes the unit as soon as the server gives it. */
    end = dlt_now() + 6.0;
    while (dlt_now() < end) {
        if ((rc = dlock_sem_trywait(&other)) == 0) {
            got = dlt_now();
            break;
        }
        DLT_ASSERT_ERR(rc, EAGAIN);
        dlt_sleep_ms(2);
    }
    CU_ASSERT_FATAL(got > 0);
    CU_ASSERT(got - t0 >= 1.45); /* the server kept the lease */
    DLT_ASSERT_INT_EQ(dlt_flag_get(&cs.calls), 1);
    if (dlt_flag_get(&cs.calls) == 1) {
        double told = __atomic_load_n(&cs.at_us, __ATOMIC_SEQ_CST) / 1e6;
        CU_ASSERT(told <= got);
        CU_ASSERT(told - t0 <= 1.45); /* by take + lease - drift, and a little */
        DLT_ASSERT_INT_EQ(cs.why, DLOCK_LOST_EXPIRED);
        if (!(told <= got) || told - t0 > 1.45) fprintf(stderr, "handler %.3f s, the unit went on at %.3f s\n", told - t0, got - t0);
    }
    DLT_ASSERT_ERR(dlock_sem_post(&other), 0);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_sem_post(&held), 0); /* forgets the lost unit */
    DLT_ASSERT_ERR(dlock_sem_destroy(&held), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(oc), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    dlt_proxy_stop(px);
}

/* ========================================================================
 * A semaphore the server lost comes back
 * ====================================================================== */

struct lossw {
    dlock_sem_t *s;
    int *lost;        /* the lost-unit handler's count */
    int rc;
    int lost_at_done; /* *lost when the wait returned */
    double done_at;   /* dlt_now() when the wait returned */
};

static void *lossw_run(void *p) {
    struct lossw *w = p;
    struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, 8000);
    w->rc = dlock_sem_clockwait(w->s, CLOCK_MONOTONIC, &ts);
    w->done_at = dlt_now();
    w->lost_at_done = dlt_flag_get(w->lost);
    return NULL;
}

/* A semaphore of 2 (lease 1500 ms), both units leased to this process
 * and a waiter (undo too) in another thread; then the server loses
 * everything (how 0: restarted without persistence; 1: FLUSHALL).  The
 * wait returns 0, the semaphore made again with the value it was opened
 * with (2: the waiter's unit taken, 1 left) -- within lease + 1 s of the
 * server being back after a restart (the waiter's next take remakes it
 * at once, its connection broken, and it asks again when the units are
 * no longer held back), lease + 1 s and a little after a FLUSHALL (the
 * waiter's next take, within a second, remakes it) -- and not before
 * both units held before were told lost: the remade semaphore holds its
 * units back for a lease.  dlock_sem_info says when it was remade; the holder's posts
 * then add nothing (the units came back with the remade value), the
 * waiter's gives its unit back: 2. */
static void loss_case(int how) {
    const char *name = how ? "u/flushed" : "u/restarted";
    struct lost_seen ls;
    struct lossw w;
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t held, waiting;
    dlock_sem_info_t i;
    pthread_t th;
    double back;
    long long wall0;
    memset(&ls, 0, sizeof ls);
    memset(&w, 0, sizeof w);
    DLT_ASSERT_ERR(dlt_client_make(&c, dlt_server.url, 10000), 0);
    su_attr(&a, 1500, c);
    DLT_ASSERT_ERR(dlock_semattr_setlostcallback(&a, on_lost, &ls), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&held, name, 2, &a), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&held), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&held), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&waiting, name, 2, &a), 0);
    w.s = &waiting;
    w.lost = &ls.calls;
    w.rc = -1;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, lossw_run, &w) == 0);
    CU_ASSERT(dlt_sem_wait_waiters(name, 1, 5000));
    wall0 = dlt_wall_ms();
    if (how == 0) {
        DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);
        DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    } else {
        freeReplyObject(dlt_redis_cmd(&dlt_server, "FLUSHALL"));
    }
    back = dlt_now();
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc, 0);
    CU_ASSERT(w.done_at - back <= (how == 0 ? 2.5 : 2.8));
    fprintf(stderr, "the wait returned %.3f s after the loss\n", w.done_at - back);
    DLT_ASSERT_INT_EQ(w.lost_at_done, 2); /* told before the unit went on */
    CU_ASSERT(dlt_flag_wait(&ls.calls, 2, 3000));
    DLT_ASSERT_INT_EQ(su_value(name), 1);
    DLT_ASSERT_INT_EQ(su_leased(name), 1);
    DLT_ASSERT_ERR(dlock_sem_info(c, name, &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 1);
    CU_ASSERT(i.remade_ms >= wall0 - 1000 && i.remade_ms <= dlt_wall_ms() + 1000);
    DLT_ASSERT_ERR(dlock_sem_post(&held), 0); /* lost: forgotten, nothing added */
    DLT_ASSERT_ERR(dlock_sem_post(&held), 0);
    DLT_ASSERT_INT_EQ(su_value(name), 1);
    DLT_ASSERT_ERR(dlock_sem_post(&waiting), 0); /* returns its leased unit */
    DLT_ASSERT_INT_EQ(su_value(name), 2);
    DLT_ASSERT_INT_EQ(su_leased(name), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&ls.calls), 2);
    DLT_ASSERT_ERR(dlock_sem_destroy(&held), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&waiting), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

static void test_remade_after_restart(void) {
    loss_case(0);
}

static void test_remade_after_flushall(void) {
    loss_case(1);
}

/* Callers that disagree: the first op to find it lost makes it with its
 * own value.  An unlinked name is not made again by the objects still
 * open on it (it was removed on purpose): their trywait finds no unit,
 * until the mark of the unlink is gone (here deleted; it lapses after an
 * hour), and then the first op makes it with its opener's value. */
static void test_remade_first_wins_unlink_not(void) {
    static const char name[] = "u/remade1st";
    dlock_sem_t three, five;
    dlock_sem_info_t i;
    int v = -1;
    DLT_ASSERT_ERR(dlock_sem_init(&three, name, 3, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&five, name, 5, NULL), 0); /* joins: 3 */
    freeReplyObject(dlt_redis_cmd(&dlt_server, "FLUSHALL"));
    DLT_ASSERT_ERR(dlock_sem_getvalue(&five, &v), 0);
    DLT_ASSERT_INT_EQ(v, 5);
    DLT_ASSERT_ERR(dlock_sem_getvalue(&three, &v), 0);
    DLT_ASSERT_INT_EQ(v, 5);
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, name), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&three), EAGAIN);
    DLT_ASSERT_ERR(dlock_sem_getvalue(&three, &v), 0);
    DLT_ASSERT_INT_EQ(v, 0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, name, &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 0);
    DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "DEL dlock:{u/remade1st}:sem:unlinked")), 1);
    DLT_ASSERT_ERR(dlock_sem_trywait(&three), 0);
    DLT_ASSERT_ERR(dlock_sem_getvalue(&five, &v), 0);
    DLT_ASSERT_INT_EQ(v, 2);
    DLT_ASSERT_ERR(dlock_sem_destroy(&three), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&five), 0);
}

/* ========================================================================
 * Redis Cluster
 * ====================================================================== */

/* On a cluster: units leased on names of different masters are renewed
 * past several leases (the renewal batches go to each master), and each
 * holder's post returns its own. */
static void test_cluster_undo(void) {
    dlt_cluster cl;
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s[3], other[3];
    char url[512], names[3][32];
    int i, v;
    if (dlt_cluster_client(&cl, url, sizeof url, &c) != 0) {
        CU_FAIL("cannot start a cluster and a client on it");
        return;
    }
    su_attr(&a, 300, c);
    for (i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "u/cl%d", i);
        DLT_ASSERT_ERR(dlock_sem_init(&s[i], names[i], 1, &a), 0);
        DLT_ASSERT_ERR(dlock_sem_trywait(&s[i]), 0);
    }
    dlt_sleep_ms(1200); /* four leases */
    DLT_ASSERT_ERR(dlock_semattr_setundo(&a, 0), 0);
    for (i = 0; i < 3; i++) {
        DLT_ASSERT_ERR(dlock_sem_init(&other[i], names[i], 1, &a), 0);
        DLT_ASSERT_ERR(dlock_sem_trywait(&other[i]), EAGAIN); /* still leased */
        DLT_ASSERT_ERR(dlock_sem_post(&s[i]), 0);               /* returns it */
        v = -1;
        DLT_ASSERT_ERR(dlock_sem_getvalue(&other[i], &v), 0);
        DLT_ASSERT_INT_EQ(v, 1);
        DLT_ASSERT_ERR(dlock_sem_destroy(&other[i]), 0);
        DLT_ASSERT_ERR(dlock_sem_destroy(&s[i]), 0);
    }
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_cluster_cleanup(&cl);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_killed_holder),
    DLT_TEST(test_renewal_keeps),
    DLT_TEST(test_post_returns_own),
    DLT_TEST(test_fork_child_none),
    DLT_TEST(test_lost_lapsed),
    DLT_TEST(test_lost_server_stopped),
    DLT_TEST(test_lost_found_by_post),
    DLT_TEST(test_destroy_keeps_client_returns),
    DLT_TEST(test_eintr),
    DLT_TEST(test_lost_answer_once),
    DLT_TEST(test_unanswered_return),
    DLT_TEST(test_cut_off_holder),
    DLT_TEST(test_remade_after_restart),
    DLT_TEST(test_remade_after_flushall),
    DLT_TEST(test_remade_first_wins_unlink_not),
    DLT_TEST(test_cluster_undo),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "sem_undo", tests);
}
