/* labels: redis; timeout: 120 */
/* test_acl.c -- dlock as a minimal Redis ACL user.
 *
 * The user is made with exactly the ACL SETUSER line that README.md
 * ("Running as a minimal ACL user") documents: its keys, its channels and
 * its commands, nothing of +@all.  Every kind of lock works through it,
 * across processes; a user that lacks one permission gets a clear error
 * and never sees the lock granted; a wrong password is refused; and the
 * password never shows in an error message.
 */
#include "fixture.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlock.h>

#define PASSWORD "acl-s3cret-pw"

/* The README's line, split into the words of one ACL SETUSER command
 * (laid out by hand: the formatter would give each word a line). */
/* clang-format off */
static const char *const acl_rules[] = {
    "on", ">" PASSWORD, "resetkeys", "~dlock:*", "resetchannels", "&dlock:*", "-@all",
    "+evalsha", "+eval", "+script|load", "+subscribe", "+unsubscribe", "+select", "+scan",
    "+time", "+get", "+set", "+incr", "+mget", "+mset", "+del", "+exists", "+pexpire", "+pexpireat", "+pttl",
    "+rpush", "+blpop",
    "+lpop", "+lindex", "+lpos", "+lset", "+lrange", "+lrem", "+llen",
    "+hget", "+hmget", "+hset", "+hsetnx", "+hdel", "+hgetall",
    "+zadd", "+zrem", "+zscore", "+zcard", "+zcount", "+zrange", "+zrangebyscore", "+zremrangebyscore", "+zpopmin",
    "+publish",
};
/* clang-format on */
#define NRULES (sizeof acl_rules / sizeof acl_rules[0])
/* The fair queue's list commands (since it is a list), as setuser's skip. */
#define LIST_RULES " +lpop +lindex +lpos +lset +lrange +lrem"

/* Is rule one of the space-separated words of skip (NULL: none)? */
static int skipped(const char *rule, const char *skip) {
    size_t n = strlen(rule);
    const char *p = skip;
    while (p != NULL && (p = strstr(p, rule)) != NULL) {
        if ((p == skip || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ')) return 1;
        p += n;
    }
    return 0;
}

/* ACL SETUSER user <rules...>, leaving out the rules in `skip` (space-
 * separated; NULL: none), with the key and channel patterns of `prefix`
 * (NULL: the README's, dlock:). */
static int setuser_prefix(const char *user, const char *skip, const char *prefix) {
    char keys[128], chans[128];
    const char *argv[3 + NRULES];
    size_t lens[3 + NRULES];
    int argc = 0;
    size_t i;
    redisContext *ctx = redisConnect("127.0.0.1", dlt_server.port);
    redisReply *r;
    int ok;
    if (ctx == NULL || ctx->err) {
        if (ctx) redisFree(ctx);
        return -1;
    }
    argv[argc++] = "ACL";
    argv[argc++] = "SETUSER";
    argv[argc++] = user;
    snprintf(keys, sizeof keys, "~%s*", prefix ? prefix : "dlock:");
    snprintf(chans, sizeof chans, "&%s*", prefix ? prefix : "dlock:");
    for (i = 0; i < NRULES; i++) {
        if (skipped(acl_rules[i], skip)) continue;
        if (strcmp(acl_rules[i], "~dlock:*") == 0) argv[argc++] = keys;
        else if (strcmp(acl_rules[i], "&dlock:*") == 0) argv[argc++] = chans;
        else argv[argc++] = acl_rules[i];
    }
    for (i = 0; i < (size_t)argc; i++) lens[i] = strlen(argv[i]);
    r = redisCommandArgv(ctx, argc, argv, lens);
    ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (!ok) fprintf(stderr, "ACL SETUSER: %s\n", r && r->str ? r->str : ctx->errstr);
    if (r) freeReplyObject(r);
    redisFree(ctx);
    return ok ? 0 : -1;
}

static int setuser(const char *user, const char *skip) {
    return setuser_prefix(user, skip, NULL);
}

static void user_url(char *buf, size_t n, const char *user, const char *password) {
    snprintf(buf, n, "redis://%s:%s@127.0.0.1:%d", user, password, dlt_server.port);
}

static int acl_client(dlock_client_t **cl, const char *user, const char *password) {
    char url[256];
    user_url(url, sizeof url, user, password);
    return dlt_client_make(cl, url, 3000);
}

static int mutex_on(dlock_mutex_t *m, const char *name, dlock_client_t *cl, int fair, int caching) {
    dlock_mutexattr_t a;
    int rc;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, cl);
    dlock_mutexattr_setfair(&a, fair);
    dlock_mutexattr_setcaching(&a, caching);
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* ------------------------------------------- contention across processes */

#define NPROC 3
#define NACQ 30

struct contend {
    const char *user;
    int fair, caching;
    int sem; /* a semaphore of value 1, waited for and posted, instead of a mutex */
    const char *name;
    int *in;         /* shm: holders in the critical section */
    int *violations; /* shm */
    int *total;      /* shm */
};

static int contend_proc(void *p) {
    struct contend *a = p;
    dlock_client_t *cl;
    dlock_mutex_t m;
    dlock_sem_t s;
    dlock_semattr_t sa;
    int i;
    if (acl_client(&cl, a->user, PASSWORD) != 0) return 10;
    if (a->sem) {
        dlock_semattr_init(&sa);
        dlock_semattr_setclient(&sa, cl);
        if (dlock_sem_init(&s, a->name, 1, &sa) != 0) return 11;
        dlock_semattr_destroy(&sa);
    } else if (mutex_on(&m, a->name, cl, a->fair, a->caching) != 0) {
        return 11;
    }
    for (i = 0; i < NACQ; i++) {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 30000);
        if ((a->sem ? dlock_sem_timedwait(&s, &ts) : dlock_mutex_timedlock(&m, &ts)) != 0) return 12;
        if (dlt_flag_add(a->in, 1) != 1) dlt_flag_add(a->violations, 1);
        dlt_flag_add(a->total, 1);
        dlt_sleep_ms(1);
        dlt_flag_add(a->in, -1);
        if ((a->sem ? dlock_sem_post(&s) : dlock_mutex_unlock(&m)) != 0) return 13;
    }
    if ((a->sem ? dlock_sem_destroy(&s) : dlock_mutex_destroy(&m)) != 0) return 14;
    if (dlock_client_destroy(cl) != 0) return 15;
    return 0;
}

/* NPROC processes take name NACQ times each, one at a time: a mutex, or
 * (sem) a semaphore of value 1. */
static void run_contention_of(const char *user, const char *name, int fair, int caching, int sem) {
    int *shm = dlt_shm(3 * sizeof(int));
    struct contend a = { user, fair, caching, sem, name, &shm[0], &shm[1], &shm[2] };
    pid_t pids[NPROC];
    int i;
    CU_ASSERT_FATAL(shm != NULL);
    for (i = 0; i < NPROC; i++) pids[i] = dlt_spawn(contend_proc, &a);
    for (i = 0; i < NPROC; i++) DLT_ASSERT_INT_EQ(pids[i] > 0 ? dlt_wait(pids[i], 60000) : -1, 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(a.violations), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(a.total), NPROC * NACQ);
}

static void run_contention(const char *user, const char *name, int fair, int caching) {
    run_contention_of(user, name, fair, caching, 0);
}

static void test_acl_user_mutexes_across_processes(void) {
    CU_ASSERT_FATAL(setuser("dlockuser", NULL) == 0);
    run_contention("dlockuser", "acl/plain", 0, 0);
    run_contention("dlockuser", "acl/fair", 1, 0);
    run_contention("dlockuser", "acl/caching", 0, 1);
    run_contention_of("dlockuser", "acl/sem-contended", 0, 0, 1);
}

/* The README's line without +blpop and +rpush: a waiter's BLPOP is refused and the
 * release's push too; the grant is published instead, which the waiter,
 * subscribed to the release channel, hears: every lock still goes round,
 * one holder at a time -- and a semaphore's units, which a post hands to
 * a waiter the same way. */
static void test_acl_user_without_blpop(void) {
    CU_ASSERT_FATAL(setuser("oldacl", "+blpop +rpush" LIST_RULES) == 0);
    run_contention("oldacl", "acl/old-plain", 0, 0);
    run_contention("oldacl", "acl/old-fair", 1, 0);
    run_contention_of("oldacl", "acl/old-sem", 0, 0, 1);
}

/* The README's line without +lpop +lindex +lpos +lset +lrange +lrem.
 * The scripts pcall those: a waiter is
 * queued (RPUSH is allowed) but nobody is ever granted from the queue, a
 * release publishes "released" instead and the waiters ask again -- so
 * locks still go round, one holder at a time, without order, and no call
 * fails (a release that failed would leave its hold). */
static void test_acl_user_without_list_commands(void) {
    CU_ASSERT_FATAL(setuser("oldlist", LIST_RULES + 1) == 0);
    run_contention("oldlist", "acl/nolist-plain", 0, 0);
    run_contention("oldlist", "acl/nolist-fair", 1, 0);
    run_contention("oldlist", "acl/nolist-caching", 0, 1);
}

/* ------------------------------------------ every other call, one process */

struct condarg {
    dlock_mutex_t *m;
    dlock_cond_t *cv;
    int *ready;
    int rc;
};

static void *cond_waiter(void *p) {
    struct condarg *a = p;
    int rc = dlock_mutex_lock(a->m);
    if (rc == 0) {
        while (!dlt_flag_get(a->ready) && rc == 0) {
            struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 10000);
            rc = dlock_cond_timedwait(a->cv, a->m, &ts);
        }
        if (dlock_mutex_unlock(a->m) != 0 && rc == 0) rc = -1;
    }
    a->rc = rc;
    return NULL;
}

static int count_one(const char *name, const dlock_lock_info_t *info, void *arg) {
    (void)info;
    if (strcmp(name, "acl/info") == 0) ++*(int *)arg;
    return 0;
}

static void test_acl_user_every_call(void) {
    dlock_client_t *cl;
    dlock_mutex_t m;
    dlock_rwlock_t rw;
    dlock_mutexattr_t a;
    dlock_cond_t cv;
    dlock_lock_info_t info;
    struct condarg ca;
    pthread_t th;
    int *ready = dlt_shm(sizeof(int));
    int found = 0, was_held = -1, rc;

    CU_ASSERT_FATAL(ready != NULL);
    CU_ASSERT_FATAL(setuser("dlockuser", NULL) == 0);
    DLT_ASSERT_ERR(acl_client(&cl, "dlockuser", PASSWORD), 0);

    /* Mutex: every call, a fenced write under the prefix, info, list. */
    DLT_ASSERT_ERR(mutex_on(&m, "acl/info", cl, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&m) > 0);
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "dlock:acl-data", "v1", 2), 0);
    DLT_ASSERT_ERR(dlock_lock_info(cl, "acl/info", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 1);
    DLT_ASSERT_INT_EQ(info.pid, (long)getpid());
    DLT_ASSERT_ERR(dlock_list(cl, "acl/*", count_one, &found), 0);
    DLT_ASSERT_INT_EQ(found, 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &ts), 0);
    DLT_ASSERT_ERR(dlock_break(cl, "acl/info", DLOCK_BREAK_RESET, &was_held), 0);
    DLT_ASSERT_INT_EQ(was_held, 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM); /* broken behind its back */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* Read-write lock. */
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, cl);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "acl/rw", &a), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    dlock_mutexattr_destroy(&a);

    /* Condition variable: a waiter woken by a signal. */
    DLT_ASSERT_ERR(mutex_on(&m, "acl/cond-mutex", cl, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_cond_init_client(&cv, "acl/cond", cl), 0);
    ca.m = &m;
    ca.cv = &cv;
    ca.ready = ready;
    ca.rc = -1;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, cond_waiter, &ca) == 0);
    dlt_sleep_ms(200); /* let it wait (if not yet, it sees ready and never waits) */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_flag_set(ready, 1);
    DLT_ASSERT_ERR(dlock_cond_signal(&cv), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(ca.rc, 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&cv), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* Semaphore: a plain one, and one with undo (leased units, renewed
     * by the renewal thread), a timed wait that queues, and its info. */
    {
        dlock_sem_t s, u;
        dlock_semattr_t sa;
        dlock_sem_info_t si;
        int v = -1;
        dlock_semattr_init(&sa);
        dlock_semattr_setclient(&sa, cl);
        DLT_ASSERT_ERR(dlock_sem_init(&s, "acl/sem", 1, &sa), 0);
        DLT_ASSERT_ERR(dlock_sem_trywait(&s), 0);
        DLT_ASSERT_ERR(dlock_sem_trywait(&s), EAGAIN);
        ts = dlt_abs_in(CLOCK_REALTIME, 200);
        DLT_ASSERT_ERR(dlock_sem_timedwait(&s, &ts), ETIMEDOUT); /* queued, then withdrew */
        DLT_ASSERT_ERR(dlock_sem_post(&s), 0);
        DLT_ASSERT_ERR(dlock_sem_getvalue(&s, &v), 0);
        DLT_ASSERT_INT_EQ(v, 1);
        DLT_ASSERT_ERR(dlock_sem_info(cl, "acl/sem", &si), 0);
        DLT_ASSERT_INT_EQ(si.value, 1);
        DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
        DLT_ASSERT_ERR(dlock_semattr_setundo(&sa, 1), 0);
        DLT_ASSERT_ERR(dlock_semattr_setlease(&sa, 1000), 0);
        DLT_ASSERT_ERR(dlock_sem_init(&u, "acl/sem-undo", 1, &sa), 0);
        DLT_ASSERT_ERR(dlock_sem_wait(&u), 0);
        dlt_sleep_ms(1500); /* renewed meanwhile, by the same user */
        DLT_ASSERT_ERR(dlock_sem_info(cl, "acl/sem-undo", &si), 0);
        DLT_ASSERT_INT_EQ(si.leased, 1);
        DLT_ASSERT_ERR(dlock_sem_post(&u), 0);
        DLT_ASSERT_ERR(dlock_sem_getvalue(&u, &v), 0);
        DLT_ASSERT_INT_EQ(v, 1);
        DLT_ASSERT_ERR(dlock_sem_destroy(&u), 0);
        DLT_ASSERT_ERR(dlock_sem_unlink(cl, "acl/sem"), 0);
        dlock_semattr_destroy(&sa);
    }

    rc = dlock_client_destroy(cl);
    DLT_ASSERT_ERR(rc, 0);
}

/* -------------------------------------------------- what must be refused */

/* The error of a lock attempt by a user lacking `skip`: refused, clearly,
 * without the password, and the lock not left granted on the server. */
static void refused_without(const char *skip, const char *name) {
    dlock_client_t *cl;
    dlock_mutex_t m;
    char user[64];
    int rc;
    snprintf(user, sizeof user, "lacks%s", skip + 1);
    for (char *p = user; *p; p++)
        if (*p == '|' || *p == '*' || *p == '~' || *p == '&' || *p == ':') *p = '_';
    CU_ASSERT_FATAL(setuser(user, skip) == 0);
    DLT_ASSERT_ERR(acl_client(&cl, user, PASSWORD), 0);
    DLT_ASSERT_ERR(mutex_on(&m, name, cl, 0, 0), 0);
    rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, EPROTO);
    printf("  without %s: %s\n", skip, dlock_last_error());
    CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), PASSWORD));
    CU_ASSERT_PTR_NOT_NULL(strstr(dlock_last_error(), "refused by the server's ACL"));
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

static void test_acl_missing_permission_is_a_clear_error(void) {
    refused_without("+time", "acl/no-time");       /* a command the uncontended acquire's fence runs */
    refused_without("~dlock:*", "acl/no-keys");    /* the keys */
}

/* One server's pipelined uncontended acquire (SET, EXISTS, the fence
 * script: after a first acquisition, which asks the script) whose fence
 * the ACL refuses (its TIME) after its SET took the lock: the lock is
 * given back, and the caller told why. */
static void test_acl_pipeline_refused_gives_back(void) {
    const char *user = "losestime", *name = "acl/pipe-no-time";
    dlock_client_t *cl;
    dlock_mutex_t m;
    int rc;
    CU_ASSERT_FATAL(setuser(user, NULL) == 0);
    DLT_ASSERT_ERR(acl_client(&cl, user, PASSWORD), 0);
    DLT_ASSERT_ERR(mutex_on(&m, name, cl, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* by the script */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "ACL SETUSER %s -time", user));
    DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
    rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, EPROTO);
    printf("  pipelined, without +time: %s\n", dlock_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(dlock_last_error(), "refused by the server's ACL"));
    CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), PASSWORD));
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "set"), 1); /* the pipelined SET took it... */
    DLT_ASSERT_INT_EQ(dlt_redis_cmdstat(&dlt_server, "del"), 1); /* ...and the release gave it back */
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

/* A user made with an earlier version's line (+type where the scripts now
 * read the lock key with MGET): its uncontended acquire is the pipelined
 * commands, which it may run, and its unlock is refused, clearly (the
 * upgrade note in docs/deployments.md says so); the hold is left to its lease. */
static void test_acl_user_without_mget(void) {
    const char *user = "oldline", *name = "acl/no-mget";
    dlock_client_t *cl;
    dlock_mutex_t m;
    long long pttl;
    CU_ASSERT_FATAL(setuser(user, "+mget") == 0);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "ACL SETUSER %s +type", user));
    DLT_ASSERT_ERR(acl_client(&cl, user, PASSWORD), 0);
    DLT_ASSERT_ERR(mutex_on(&m, name, cl, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPROTO);
    printf("  without +mget, unlock: %s\n", dlock_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(dlock_last_error(), "refused by the server's ACL"));
    CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), PASSWORD));
    pttl = dlt_key_pttl(name);
    CU_ASSERT(pttl > 0 && pttl <= 10000); /* left to its lease (the default 10 s) */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

static void test_acl_wrong_password_refused_and_never_shown(void) {
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    int rc;
    CU_ASSERT_FATAL(setuser("dlockuser", NULL) == 0);
    rc = acl_client(&cl, "dlockuser", "not-the-" PASSWORD);
    if (rc == 0) {
        /* The client may connect lazily: the first lock call then fails. */
        DLT_ASSERT_ERR(mutex_on(&m, "acl/wrongpw", cl, 0, 0), 0);
        rc = dlock_mutex_trylock(&m);
        DLT_ASSERT_ERR(rc, ENOLCK);
        printf("  wrong password: %s\n", dlock_last_error());
        CU_ASSERT_PTR_NOT_NULL(strstr(dlock_last_error(), "authentication failed"));
        CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), PASSWORD));
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    } else {
        printf("  wrong password: %s\n", dlock_last_error());
        CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), PASSWORD));
    }
    DLT_ASSERT_INT_EQ(dlt_key_exists("acl/wrongpw"), 0);
}

/* ------------------------------------------------ one prefix per team */

/* docs/deployments.md's "One prefix per team": each team's user has its own key and
 * channel patterns, and its clients that prefix.  Team A locks and breaks
 * its own locks; pointed at team B's prefix, it can neither take nor
 * break B's lock (EPROTO: NOPERM), which stays held. */
static void test_acl_team_prefixes(void) {
    char url[256];
    dlock_client_t *a = NULL, *a_as_b = NULL, *b = NULL;
    dlock_mutex_t ma, mb, mab;
    int held = -1;
    CU_ASSERT_FATAL(setuser_prefix("team-a", NULL, "team-a:") == 0);
    CU_ASSERT_FATAL(setuser_prefix("team-b", NULL, "team-b:") == 0);
    snprintf(url, sizeof url, "redis://team-a:%s@127.0.0.1:%d?prefix=team-a:", PASSWORD, dlt_server.port);
    DLT_ASSERT_ERR(dlt_client_make(&a, url, 3000), 0);
    snprintf(url, sizeof url, "redis://team-a:%s@127.0.0.1:%d?prefix=team-b:", PASSWORD, dlt_server.port);
    DLT_ASSERT_ERR(dlt_client_make(&a_as_b, url, 3000), 0);
    snprintf(url, sizeof url, "redis://team-b:%s@127.0.0.1:%d?prefix=team-b:", PASSWORD, dlt_server.port);
    DLT_ASSERT_ERR(dlt_client_make(&b, url, 3000), 0);

    DLT_ASSERT_ERR(mutex_on(&mb, "job", b, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mb), 0);
    DLT_ASSERT_ERR(mutex_on(&ma, "job", a, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&ma), 0); /* its own "job": another key */
    DLT_ASSERT_ERR(dlock_break(a, "job", DLOCK_BREAK_RESET, &held), 0);
    DLT_ASSERT_INT_EQ(held, 1);

    DLT_ASSERT_ERR(mutex_on(&mab, "job", a_as_b, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mab), EPROTO);
    DLT_ASSERT_ERR(dlock_break(a_as_b, "job", DLOCK_BREAK_RESET, &held), EPROTO);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&mb), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mb), 0);

    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), EPERM); /* broken above */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mab), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&ma), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
    dlock_client_destroy(a_as_b);
    dlock_client_destroy(a);
    dlock_client_destroy(b);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "ACL DELUSER team-a team-b"));
}

/* ------------------------------------- a waiter while the holder holds */

struct acl_waiter {
    dlock_mutex_t *m;
    int rc_lock, rc_unlock;
};

static void *acl_waiter_main(void *p) {
    struct acl_waiter *w = p;
    w->rc_lock = dlock_mutex_lock(w->m);
    w->rc_unlock = w->rc_lock == 0 ? dlock_mutex_unlock(w->m) : -1;
    return NULL;
}

/* Holder and waiter, each with a client of its own as the ACL user (the
 * README's line but the rules in skip, as setuser's), on mutexes made
 * with a: the holder takes the lock, the waiter queues for it, the holder
 * keeps it hold_ms, then unlocks (which must give 0). */
static void acl_hold_with_waiter(const char *user, const char *skip, const char *name, const dlock_mutexattr_t *a,
                                 int warm, unsigned hold_ms, int *lost) {
    dlock_client_t *ch, *cw;
    dlock_mutexattr_t ah = *a, aw = *a;
    dlock_mutex_t m, wm;
    struct acl_waiter w = { &wm, -1, -1 };
    pthread_t th;
    int rc;
    CU_ASSERT_FATAL(setuser(user, skip) == 0);
    DLT_ASSERT_ERR(acl_client(&ch, user, PASSWORD), 0);
    DLT_ASSERT_ERR(acl_client(&cw, user, PASSWORD), 0);
    dlock_mutexattr_setclient(&ah, ch);
    dlock_mutexattr_setclient(&aw, cw);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, &ah), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&wm, name, &aw), 0);
    if (warm) { /* a first acquisition asks the script; the next is the pipelined SET */
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, acl_waiter_main, &w) == 0);
    dlt_sleep_ms(hold_ms);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    if (lost != NULL) DLT_ASSERT_INT_EQ(__atomic_load_n(lost, __ATOMIC_SEQ_CST), 0);
    rc = dlock_mutex_unlock(&m);
    if (rc != 0) printf("  %s: the holder's unlock: %s\n", name, dlock_last_error());
    DLT_ASSERT_ERR(rc, 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc_lock, 0);
    DLT_ASSERT_ERR(w.rc_unlock, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&wm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cw), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(ch), 0);
}

/* A hold with a lock-delay ends its key at exp + the delay (PEXPIREAT)
 * at its acquisition, its renewals and a grant: through the README's user
 * it is taken, renewed (a short lease) and handed over, never lost; and
 * through a user whose line predates PEXPIREAT (the scripts then fall
 * back to PEXPIRE) all the same. */
static void test_acl_lockdelay(void) {
    dlock_mutexattr_t a;
    int lost = 0;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setlease(&a, 300);
    dlock_mutexattr_setlockdelay(&a, 500);
    dlock_mutexattr_setfair(&a, 1);
    dlock_mutexattr_setlostcallback(&a, dlt_count_lost, &lost);
    acl_hold_with_waiter("delayer", NULL, "acl/lockdelay", &a, 0, 700, &lost);
    acl_hold_with_waiter("olddelayer", "+pexpireat", "acl/lockdelay-old", &a, 0, 700, &lost);
    dlock_mutexattr_destroy(&a);
}

/* A hold taken by the pipelined SET keeps no fence on the server; a waiter
 * turns its string into the hash, and the holder's first renewal records
 * the fence there (renew.lua's HSETNX): through the README's user the hold
 * is renewed, never lost. */
static void test_acl_renewal_after_a_waiter_came(void) {
    dlock_mutexattr_t a;
    int lost = 0;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setlease(&a, 600);
    dlock_mutexattr_setlostcallback(&a, dlt_count_lost, &lost);
    acl_hold_with_waiter("renewer", NULL, "acl/renew-contended", &a, 1, 900, &lost);
    dlock_mutexattr_destroy(&a);
}

/* A robust mutex's release hands the lock to the queued waiter
 * (release.lua's MSET of the robust state): the unlock gives 0. */
static void test_acl_robust_handoff(void) {
    dlock_mutexattr_t a;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST);
    acl_hold_with_waiter("robuster", NULL, "acl/robust-handoff", &a, 0, 200, NULL);
    dlock_mutexattr_destroy(&a);
}

/* A user whose ACL names no channel: every SUBSCRIBE of a waiter's
 * subscriber is refused (NOPERM).  The subscriber starts over after a
 * refusal as after a failed connect, backing off, not at once: over a
 * 1.2 s wait the server answers a few refusals, not one each round trip.
 * The waiter still gets its bound. */
static void test_acl_refused_subscribe_backs_off(void) {
    const char *user = "nochannels", *name = "acl/no-channels";
    dlock_client_t *cw;
    dlock_mutexattr_t a;
    dlock_mutex_t m, wm;
    struct timespec ts;
    long long e0, e1;
    double t0, took;
    int rc;
    CU_ASSERT_FATAL(setuser(user, "&dlock:*") == 0); /* resetchannels, and no pattern after it */
    DLT_ASSERT_ERR(acl_client(&cw, user, PASSWORD), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0); /* the holder: the default client */
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, cw);
    DLT_ASSERT_ERR(dlock_mutex_init(&wm, name, &a), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    e0 = dlt_redis_errors(&dlt_server);
    t0 = dlt_now();
    ts = dlt_abs_in(CLOCK_REALTIME, 1200);
    rc = dlock_mutex_timedlock(&wm, &ts);
    took = dlt_now() - t0;
    e1 = dlt_redis_errors(&dlt_server);
    printf("  waiter: %s after %.2f s; %lld refusals\n", dlock_strerror(rc), took, e1 - e0);
    CU_ASSERT(rc == ETIMEDOUT || rc == ENOLCK);
    CU_ASSERT(took < 2.0);
    CU_ASSERT(e0 >= 0 && e1 - e0 >= 1); /* it was refused */
    CU_ASSERT(e1 - e0 <= 25);           /* 10 ms doubling to 200 ms: ~10 in 1.2 s */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&wm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cw), 0);
    freeReplyObject(dlt_redis_cmd(&dlt_server, "ACL DELUSER %s", user));
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_acl_user_mutexes_across_processes),
    DLT_TEST(test_acl_user_without_blpop),
    DLT_TEST(test_acl_user_without_list_commands),
    DLT_TEST(test_acl_user_every_call),
    DLT_TEST(test_acl_missing_permission_is_a_clear_error),
    DLT_TEST(test_acl_pipeline_refused_gives_back),
    DLT_TEST(test_acl_user_without_mget),
    DLT_TEST(test_acl_wrong_password_refused_and_never_shown),
    DLT_TEST(test_acl_team_prefixes),
    DLT_TEST(test_acl_lockdelay),
    DLT_TEST(test_acl_renewal_after_a_waiter_came),
    DLT_TEST(test_acl_robust_handoff),
    DLT_TEST(test_acl_refused_subscribe_backs_off),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "acl", tests);
}
