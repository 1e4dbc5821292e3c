/* test_sem_admin.c -- a semaphore's administration: dlock_sem_info,
 * dlock_sem_owners, dlock_sem_list, dlock_sem_unlink, dlock_sem_break.
 * labels: redis; timeout: 300
 *
 * Status, list and break know semaphores, against the
 * dlock.h semaphore section: info of a missing and of an existing
 * semaphore; a waiter in another process listed with its host, pid and
 * place; units leased under undo listed with their holder and lease, and
 * taken back by dlock_sem_break; unlink, then ENOENT, and a waiter
 * blocked in an unlinked semaphore served by the next init that makes it
 * with units, or by a post on the name; list by glob; one round on a
 * Redis Cluster; ENOTSUP on Redlock.
 *
 * The leased units are written into the semaphore's keys by hand
 * (":semo" record "u:SINCE:host:pid:tid", ":semu" lease expiry), as the
 * undo path writes them: what is tested is how they are read and taken
 * back.
 */
#define DLT_CK_MOD 120
#include "fixture.h"
#include "fixture_multi.h"

#include <dlock.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ========================================================================
 * Helpers
 * ====================================================================== */

/* The people of a semaphore, collected. */
#define PMAX 16
struct people {
    dlock_sem_owner_t v[PMAX];
    int n;
};

static int collect(const dlock_sem_owner_t *o, void *arg) {
    struct people *p = arg;
    if (p->n < PMAX) p->v[p->n] = *o;
    p->n++;
    return 0;
}

static int stop_first(const dlock_sem_owner_t *o, void *arg) {
    collect(o, arg);
    return 1;
}

/* A unit leased under undo to host:pid:tid since `since`, its lease
 * ending at `until` (server ms), written as the undo path writes it. */
static void fake_lease(const char *name, const char *tok, long long since, const char *who, long long until) {
    char ko[700], ku[700], rec[400];
    int no = snprintf(ko, sizeof ko, "dlock:{%s}:semo", name), nu = snprintf(ku, sizeof ku, "dlock:{%s}:semu", name);
    int nr = snprintf(rec, sizeof rec, "u:%lld:%s", since, who);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "HSET %b %s %b", ko, (size_t)no, tok, rec, (size_t)nr)) == 1);
    CU_ASSERT(dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %b %lld %s", ku, (size_t)nu, until, tok)) == 1);
}

/* Keys of the semaphore name left on the server. */
static long long sem_keys_left(const char *name) {
    static const char *const tails[] = { "", "q", "x", "g", "d", "o", "u" };
    long long n = 0;
    size_t i;
    for (i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        char k[700];
        int kn = snprintf(k, sizeof k, "dlock:{%s}:sem%s", name, tails[i]);
        n += dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS %b", k, (size_t)kn));
    }
    return n;
}

/* A child that waits in `name` (made with 0 units if it is not there)
 * and exits 0 once it took a unit. */
static int waiter_run(void *arg) {
    dlock_sem_t s;
    DLT_CK(dlock_sem_init(&s, (const char *)arg, 0, NULL), 0);
    DLT_CK(dlock_sem_wait(&s), 0);
    DLT_CK(dlock_sem_destroy(&s), 0);
    return 0;
}

/* ========================================================================
 * Info
 * ====================================================================== */

static void test_info_missing(void) {
    dlock_sem_info_t i;
    struct people p;
    memset(&i, 0x55, sizeof i);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/none", &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 0);
    DLT_ASSERT_INT_EQ(i.value, 0);
    DLT_ASSERT_INT_EQ(i.waiters, 0);
    DLT_ASSERT_INT_EQ(i.leased, 0);
    CU_ASSERT(llabs(i.server_now_ms - dlt_wall_ms()) < 10000);
    memset(&p, 0, sizeof p);
    DLT_ASSERT_ERR(dlock_sem_owners(NULL, "a/none", NULL, DLOCK_SEM_OWNERS_ALL, collect, &p), 0);
    DLT_ASSERT_INT_EQ(p.n, 0);
    /* Reading made nothing. */
    DLT_ASSERT_INT_EQ(sem_keys_left("a/none"), 0);
    /* Bad arguments. */
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/none", NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "", &i), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, NULL, &i), EINVAL);
    DLT_ASSERT_ERR(dlock_sem_list(NULL, "*", NULL, NULL), EINVAL);
}

static void test_info_value(void) {
    dlock_sem_t s;
    dlock_sem_info_t i;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "a/val", 3, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/val", &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 1);
    DLT_ASSERT_INT_EQ(i.value, 2);
    DLT_ASSERT_INT_EQ(i.waiters, 0);
    DLT_ASSERT_INT_EQ(i.leased, 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/val", &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 1); /* empty, but there */
    DLT_ASSERT_INT_EQ(i.value, 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* Waiters in other processes: listed in the order they will be served,
 * with their pid (the process's main thread: tid == pid) and host. */
static void test_info_waiters(void) {
    char host[256];
    dlock_sem_t s;
    dlock_sem_info_t i;
    struct people p;
    dlt_task t[2];
    long long t0 = dlt_wall_ms();
    int k;
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    for (k = 0; k < 2; k++) {
        if (dlt_task_start(&t[k], DLT_PROC, waiter_run, "a/wait") != 0) return;
        CU_ASSERT_FATAL(dlt_sem_wait_waiters("a/wait", (unsigned)k + 1, 10000));
    }
    memset(&p, 0, sizeof p);
    DLT_ASSERT_ERR(dlock_sem_owners(NULL, "a/wait", &i, DLOCK_SEM_OWNERS_ALL, collect, &p), 0);
    DLT_ASSERT_INT_EQ(i.exists, 1);
    DLT_ASSERT_INT_EQ(i.value, 0);
    DLT_ASSERT_INT_EQ(i.waiters, 2);
    DLT_ASSERT_INT_EQ(p.n, 2);
    for (k = 0; k < 2 && k < p.n; k++) {
        DLT_ASSERT_INT_EQ(p.v[k].kind, DLOCK_SEM_WAITING);
        DLT_ASSERT_INT_EQ(p.v[k].pid, t[k].pid);
        DLT_ASSERT_INT_EQ(p.v[k].tid, t[k].pid);
        CU_ASSERT_STRING_EQUAL(p.v[k].host, host);
        DLT_ASSERT_INT_EQ(p.v[k].place, k);
        DLT_ASSERT_INT_EQ(p.v[k].lease_left_ms, -1);
        CU_ASSERT(p.v[k].since_ms >= t0 - 5000 && p.v[k].since_ms <= i.server_now_ms);
    }
    /* max bounds the people, not the counts. */
    memset(&p, 0, sizeof p);
    DLT_ASSERT_ERR(dlock_sem_owners(NULL, "a/wait", &i, 1, collect, &p), 0);
    DLT_ASSERT_INT_EQ(p.n, 1);
    DLT_ASSERT_INT_EQ(i.waiters, 2);
    /* A post serves the first; the second is now at the head. */
    DLT_ASSERT_ERR(dlock_sem_init(&s, "a/wait", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t[0], DLT_JOIN_MS), 0);
    CU_ASSERT(dlt_sem_wait_waiters("a/wait", 1, 10000));
    memset(&p, 0, sizeof p);
    DLT_ASSERT_ERR(dlock_sem_owners(NULL, "a/wait", NULL, DLOCK_SEM_OWNERS_ALL, collect, &p), 0);
    DLT_ASSERT_INT_EQ(p.n, 1);
    DLT_ASSERT_INT_EQ(p.v[0].pid, t[1].pid);
    DLT_ASSERT_INT_EQ(p.v[0].place, 0);
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t[1], DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/wait", &i), 0);
    DLT_ASSERT_INT_EQ(i.waiters, 0);
    DLT_ASSERT_INT_EQ(i.value, 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* What is left out and what is shown half-known, written by hand into
 * the keys: a waiter a post handed a unit (in ":semg", being taken) comes
 * first with place -1; a queued waiter whose registration lapsed (its
 * process died, not cleaned up yet) is not shown nor counted; a waiter
 * with no ":semo" record is shown unnamed. */
static void test_info_handed_and_dead(void) {
    dlock_sem_t s;
    dlock_sem_info_t i;
    struct people p;
    char kq[64], kx[64], kg[64], ko[64];
    long long now;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "a/hd", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/hd", &i), 0);
    now = i.server_now_ms;
    snprintf(kq, sizeof kq, "dlock:{a/hd}:semq");
    snprintf(kx, sizeof kx, "dlock:{a/hd}:semx");
    snprintf(kg, sizeof kg, "dlock:{a/hd}:semg");
    snprintf(ko, sizeof ko, "dlock:{a/hd}:semo");
    /* dead: queued first, registration lapsed */
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s 1 dead", kq));
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s %lld dead", kx, now - 10));
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "HSET %s dead w:%lld:gone:1:1", ko, now - 5000));
    /* anon: queued second, live, no record */
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s 2 anon", kq));
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s %lld anon", kx, now + 60000));
    /* handed: a post handed it a unit */
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "HSET %s handed 1", kg));
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZADD %s %lld handed", kx, now + 60000));
    dlt_reply_int(dlt_redis_cmd(&dlt_server, "HSET %s handed w:%lld:hosty:7:8", ko, now - 100));
    memset(&p, 0, sizeof p);
    DLT_ASSERT_ERR(dlock_sem_owners(NULL, "a/hd", &i, DLOCK_SEM_OWNERS_ALL, collect, &p), 0);
    DLT_ASSERT_INT_EQ(i.waiters, 2);
    DLT_ASSERT_INT_EQ(p.n, 2);
    if (p.n == 2) {
        CU_ASSERT_STRING_EQUAL(p.v[0].host, "hosty");
        DLT_ASSERT_INT_EQ(p.v[0].pid, 7);
        DLT_ASSERT_INT_EQ(p.v[0].place, -1);
        DLT_ASSERT_INT_EQ(p.v[0].since_ms, now - 100);
        CU_ASSERT_STRING_EQUAL(p.v[1].host, "");
        DLT_ASSERT_INT_EQ(p.v[1].pid, 0);
        DLT_ASSERT_INT_EQ(p.v[1].place, 0); /* the dead one before it takes no place */
        DLT_ASSERT_INT_EQ(p.v[1].since_ms, 0);
        DLT_ASSERT_INT_EQ(p.v[1].kind, DLOCK_SEM_WAITING);
    }
    /* fn may stop the walk. */
    memset(&p, 0, sizeof p);
    DLT_ASSERT_ERR(dlock_sem_owners(NULL, "a/hd", NULL, DLOCK_SEM_OWNERS_ALL, stop_first, &p), 0);
    DLT_ASSERT_INT_EQ(p.n, 1);
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, "a/hd"), 0);
    DLT_ASSERT_INT_EQ(sem_keys_left("a/hd"), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* ========================================================================
 * Leased units, and dlock_sem_break
 * ====================================================================== */

static void test_leased_and_break(void) {
    dlock_sem_t s;
    dlock_sem_info_t i;
    struct people p;
    unsigned back = 99;
    long long now;
    DLT_ASSERT_ERR(dlock_sem_break(NULL, "a/lease", &back), ENOENT);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "a/lease", 1, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/lease", &i), 0);
    now = i.server_now_ms;
    fake_lease("a/lease", "tokA", now - 3000, "web1:12:34", now + 8000);
    fake_lease("a/lease", "tokB", now - 1000, "h:o:st:56:78", now + 4000); /* a host with colons */
    fake_lease("a/lease", "tokC", now - 9000, "dead:1:1", now - 100);      /* lapsed: not shown */
    memset(&p, 0, sizeof p);
    DLT_ASSERT_ERR(dlock_sem_owners(NULL, "a/lease", &i, DLOCK_SEM_OWNERS_ALL, collect, &p), 0);
    DLT_ASSERT_INT_EQ(i.leased, 2);
    DLT_ASSERT_INT_EQ(i.value, 1);
    DLT_ASSERT_INT_EQ(p.n, 2);
    if (p.n == 2) {
        /* Soonest lease end first. */
        DLT_ASSERT_INT_EQ(p.v[0].kind, DLOCK_SEM_LEASED);
        CU_ASSERT_STRING_EQUAL(p.v[0].host, "h:o:st");
        DLT_ASSERT_INT_EQ(p.v[0].pid, 56);
        DLT_ASSERT_INT_EQ(p.v[0].tid, 78);
        DLT_ASSERT_INT_EQ(p.v[0].since_ms, now - 1000);
        CU_ASSERT(p.v[0].lease_left_ms > 2000 && p.v[0].lease_left_ms <= 4000);
        DLT_ASSERT_INT_EQ(p.v[0].place, -1);
        CU_ASSERT_STRING_EQUAL(p.v[1].host, "web1");
        DLT_ASSERT_INT_EQ(p.v[1].pid, 12);
        DLT_ASSERT_INT_EQ(p.v[1].tid, 34);
        CU_ASSERT(p.v[1].lease_left_ms > 6000 && p.v[1].lease_left_ms <= 8000);
    }
    /* The reset takes back all three (the lapsed one too) into the value. */
    DLT_ASSERT_ERR(dlock_sem_break(NULL, "a/lease", &back), 0);
    DLT_ASSERT_INT_EQ(back, 3);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/lease", &i), 0);
    DLT_ASSERT_INT_EQ(i.leased, 0);
    DLT_ASSERT_INT_EQ(i.value, 4);
    DLT_ASSERT_ERR(dlock_sem_break(NULL, "a/lease", &back), 0);
    DLT_ASSERT_INT_EQ(back, 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* A unit taken back goes to a waiter at once (the break wakes it). */
static void test_break_serves_waiter(void) {
    dlock_sem_info_t i;
    dlt_task t;
    unsigned back = 0;
    if (dlt_task_start(&t, DLT_PROC, waiter_run, "a/bw") != 0) return;
    CU_ASSERT_FATAL(dlt_sem_wait_waiters("a/bw", 1, 10000));
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/bw", &i), 0);
    fake_lease("a/bw", "tokA", i.server_now_ms, "web1:12:34", i.server_now_ms + 60000);
    DLT_ASSERT_ERR(dlock_sem_break(NULL, "a/bw", &back), 0);
    DLT_ASSERT_INT_EQ(back, 1);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/bw", &i), 0);
    DLT_ASSERT_INT_EQ(i.value, 0);
    DLT_ASSERT_INT_EQ(i.waiters, 0);
}

/* ========================================================================
 * Unlink
 * ====================================================================== */

static void test_unlink(void) {
    dlock_sem_t s, s2;
    dlock_sem_info_t i;
    int v = -1;
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, "a/un"), ENOENT);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "a/un", 2, NULL), 0);
    CU_ASSERT(sem_keys_left("a/un") >= 1);
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, "a/un"), 0);
    DLT_ASSERT_INT_EQ(sem_keys_left("a/un"), 0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/un", &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 0);
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, "a/un"), ENOENT);
    /* The open object is not invalidated: the name is gone, so no unit. */
    DLT_ASSERT_ERR(dlock_sem_getvalue(&s, &v), 0);
    DLT_ASSERT_INT_EQ(v, 0);
    DLT_ASSERT_ERR(dlock_sem_trywait(&s), EAGAIN);
    /* The next init makes a new one with its own value. */
    DLT_ASSERT_ERR(dlock_sem_init(&s2, "a/un", 5, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_getvalue(&s, &v), 0);
    DLT_ASSERT_INT_EQ(v, 5);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s2), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* A waiter blocked in an unlinked semaphore goes on waiting, and the
 * next init that makes the name anew with a unit serves it; another, a
 * post on the name by an object opened before the unlink. */
static void test_unlink_waiter(void) {
    dlock_sem_t s, s2;
    dlock_sem_info_t i;
    dlt_task t;
    DLT_ASSERT_ERR(dlock_sem_init(&s, "a/uw", 0, NULL), 0);
    if (dlt_task_start(&t, DLT_PROC, waiter_run, "a/uw") != 0) return;
    CU_ASSERT_FATAL(dlt_sem_wait_waiters("a/uw", 1, 10000));
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, "a/uw"), 0);
    /* Woken by the unlink, it queues again on the name. */
    CU_ASSERT(dlt_sem_wait_waiters("a/uw", 1, 10000));
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "a/uw", &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 0);
    CU_ASSERT(waitpid(t.pid, NULL, WNOHANG) == 0); /* it waits still */
    DLT_ASSERT_ERR(dlock_sem_init(&s2, "a/uw", 1, NULL), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s2), 0);

    /* The second: a post through the object opened before the unlink. */
    if (dlt_task_start(&t, DLT_PROC, waiter_run, "a/uw") != 0) return;
    CU_ASSERT_FATAL(dlt_sem_wait_waiters("a/uw", 1, 10000));
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, "a/uw"), 0);
    CU_ASSERT(dlt_sem_wait_waiters("a/uw", 1, 10000));
    DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
    DLT_ASSERT_INT_EQ(dlt_task_join(&t, DLT_JOIN_MS), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
}

/* ========================================================================
 * List
 * ====================================================================== */

struct found {
    char names[8][64];
    int values[8];
    unsigned waiters[8];
    int n;
};

static int found_one(const char *name, const dlock_sem_info_t *info, void *arg) {
    struct found *f = arg;
    if (f->n < 8) {
        snprintf(f->names[f->n], sizeof f->names[0], "%s", name);
        f->values[f->n] = info->value;
        f->waiters[f->n] = info->waiters;
    }
    f->n++;
    return 0;
}

static int find(const struct found *f, const char *name) {
    int i;
    for (i = 0; i < f->n && i < 8; i++)
        if (strcmp(f->names[i], name) == 0) return i;
    return -1;
}

static void test_list(void) {
    dlock_sem_t a, b;
    dlock_mutex_t m;
    struct found f;
    int k;
    memset(&f, 0, sizeof f);
    DLT_ASSERT_ERR(dlock_sem_list(NULL, NULL, found_one, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 0);
    DLT_ASSERT_ERR(dlock_sem_init(&a, "l/a", 1, NULL), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&b, "l/b", 4, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "l/c", 0, NULL), 0); /* a lock: not a semaphore */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_sem_list(NULL, "l/*", found_one, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 2);
    CU_ASSERT((k = find(&f, "l/a")) >= 0 && f.values[k] == 1);
    CU_ASSERT((k = find(&f, "l/b")) >= 0 && f.values[k] == 4);
    memset(&f, 0, sizeof f);
    DLT_ASSERT_ERR(dlock_sem_list(NULL, "l/b", found_one, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 1);
    memset(&f, 0, sizeof f);
    DLT_ASSERT_ERR(dlock_sem_list(NULL, "x*", found_one, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 0);
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, "l/a"), 0);
    memset(&f, 0, sizeof f);
    DLT_ASSERT_ERR(dlock_sem_list(NULL, NULL, found_one, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 1);
    CU_ASSERT(find(&f, "l/b") == 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&b), 0);
}

/* ========================================================================
 * The README's minimal ACL user
 * ====================================================================== */

/* The administration's scripts use only what the README's minimal ACL
 * user may (its line, as tests/test_acl.c makes it). */
static void test_acl_user(void) {
    dlock_client_t *c = NULL;
    dlock_sem_t s;
    dlock_sem_info_t i;
    struct people p;
    struct found f;
    unsigned back = 9;
    redisReply *r = dlt_redis_cmd(&dlt_server,
        "ACL SETUSER semadm on >semadm-pw resetkeys ~dlock:* resetchannels &dlock:* -@all +evalsha +eval "
        "+script|load +subscribe +unsubscribe +select +scan +time +get +set +del +exists +pexpire +pttl +rpush "
        "+blpop +hget +hmget +hset +hdel +hgetall +zadd +zrem +zscore +zcard +zcount +zrange +zremrangebyscore "
        "+zpopmin +publish +lpop +lindex +lpos +lset +lrange +lrem");
    char url[128];
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    snprintf(url, sizeof url, "redis://semadm:semadm-pw@127.0.0.1:%d", dlt_server.port);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 3000), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "acl/s", 2, NULL), 0); /* on the default client */
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "acl/s", &i), 0);
    fake_lease("acl/s", "tokA", i.server_now_ms, "web1:12:34", i.server_now_ms + 60000);
    memset(&p, 0, sizeof p);
    DLT_ASSERT_ERR(dlock_sem_owners(c, "acl/s", &i, DLOCK_SEM_OWNERS_ALL, collect, &p), 0);
    DLT_ASSERT_INT_EQ(i.value, 2);
    DLT_ASSERT_INT_EQ(p.n, 1);
    memset(&f, 0, sizeof f);
    DLT_ASSERT_ERR(dlock_sem_list(c, "acl/*", found_one, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 1);
    DLT_ASSERT_ERR(dlock_sem_break(c, "acl/s", &back), 0);
    DLT_ASSERT_INT_EQ(back, 1);
    DLT_ASSERT_ERR(dlock_sem_unlink(c, "acl/s"), 0);
    DLT_ASSERT_ERR(dlock_sem_info(c, "acl/s", &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    r = dlt_redis_cmd(&dlt_server, "ACL DELUSER semadm");
    if (r) freeReplyObject(r);
}

/* ========================================================================
 * Other deployments
 * ====================================================================== */

/* On a Redis Cluster: info, list across the masters, unlink. */
static void test_cluster(void) {
    dlt_cluster cl;
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s[3];
    dlock_sem_info_t i;
    struct found f;
    char url[512], name[32];
    int k;
    if (dlt_cluster_client(&cl, url, sizeof url, &c) != 0) {
        CU_FAIL("cannot start a cluster and a client on it");
        return;
    }
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    for (k = 0; k < 3; k++) { /* names whose slots are on different masters */
        snprintf(name, sizeof name, "s/cl%d", k);
        DLT_ASSERT_ERR(dlock_sem_init(&s[k], name, (unsigned)k + 1, &a), 0);
        DLT_ASSERT_ERR(dlock_sem_info(c, name, &i), 0);
        DLT_ASSERT_INT_EQ(i.exists, 1);
        DLT_ASSERT_INT_EQ(i.value, k + 1);
    }
    memset(&f, 0, sizeof f);
    DLT_ASSERT_ERR(dlock_sem_list(c, NULL, found_one, &f), 0);
    DLT_ASSERT_INT_EQ(f.n, 3);
    CU_ASSERT((k = find(&f, "s/cl2")) >= 0 && f.values[k] == 3);
    DLT_ASSERT_ERR(dlock_sem_unlink(c, "s/cl1"), 0);
    DLT_ASSERT_ERR(dlock_sem_unlink(c, "s/cl1"), ENOENT);
    DLT_ASSERT_ERR(dlock_sem_info(c, "s/cl1", &i), 0);
    DLT_ASSERT_INT_EQ(i.exists, 0);
    for (k = 0; k < 3; k++) DLT_ASSERT_ERR(dlock_sem_destroy(&s[k]), 0);
    DLT_ASSERT_ERR(dlock_semattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_cluster_cleanup(&cl);
}

static void test_redlock_enotsup(void) {
    dlt_masters m;
    dlock_client_t *c = NULL;
    dlock_sem_info_t i;
    struct found f;
    memset(&m, 0, sizeof m);
    if (dlt_masters_start(&m, 3, 0) != 0) {
        CU_FAIL("cannot start the masters");
        return;
    }
    DLT_ASSERT_ERR(dlt_client_make(&c, m.url, 3000), 0);
    DLT_ASSERT_ERR(dlock_sem_info(c, "s/rl", &i), ENOTSUP);
    CU_ASSERT(strstr(dlock_last_error(), "Redlock") != NULL);
    DLT_ASSERT_ERR(dlock_sem_unlink(c, "s/rl"), ENOTSUP);
    DLT_ASSERT_ERR(dlock_sem_break(c, "s/rl", NULL), ENOTSUP);
    DLT_ASSERT_ERR(dlock_sem_list(c, NULL, found_one, &f), ENOTSUP);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_masters_cleanup(&m);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_info_missing),
    DLT_TEST(test_info_value),
    DLT_TEST(test_info_waiters),
    DLT_TEST(test_info_handed_and_dead),
    DLT_TEST(test_leased_and_break),
    DLT_TEST(test_break_serves_waiter),
    DLT_TEST(test_unlink),
    DLT_TEST(test_unlink_waiter),
    DLT_TEST(test_list),
    DLT_TEST(test_acl_user),
    DLT_TEST(test_cluster),
    DLT_TEST(test_redlock_enotsup),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "sem_admin", tests);
}
