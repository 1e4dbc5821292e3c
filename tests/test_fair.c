/* labels: redis; timeout: 300 */
/* test_fair.c -- fair (FIFO) mutexes: dlock_mutexattr_setfair.
 *
 * A fair waiter takes a place in the server's queue, the list
 * dlock:{NAME}:fifo (an entry "TOKEN|LEASE|ROBUST|DELIVERY|WHO"), and is a
 * waiting writer in dlock:{NAME}:writers; a release hands the lock to the
 * live head and publishes its token.  Every scenario runs across processes
 * (dlt_spawn); the FIFO tests also run across threads of one process and
 * mixed.  Threads only ever run inside child processes: this process makes
 * no dlock call that could start a library thread, so forking stays safe
 * under AddressSanitizer.
 *
 * Workers report through MAP_SHARED memory (one fw_board per test) and their
 * exit status.  A waiter counts as "queued" once its token is in the queue
 * (polled, bounded), so waiters are started strictly one after the other.
 * No assert depends on how fast anything is: waits are bounded generously
 * and only outcomes (order, return codes, server state, command counts in a
 * window where no timer can fire) are asserted.
 */
#define DLT_CK_MOD 120 /* worker codes 1..120: clear of 128 + signal */
#include "fixture.h"

#include <dlock.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ========================================================================
 * Workers
 * ====================================================================== */

#define FW_MAX 12 /* waiters per test */
#define FW_TOK 80 /* a token as the server has it (32 hex digits) */
#define FW_BOUND_MS 15000 /* the longest a step may take before the test gives up */
#define FW_Q ":fifo"       /* the fair queue, a list (scripts.c) */

enum { FW_LOCK, FW_TIMED, FW_TRY, FW_TRYRD };

struct fw_board;

/* One acquirer: opens its own mutex (fair or not, robust or not, lease),
 * waits for `go`, takes the lock by `mode` (timedlock: a deadline timed_ms
 * after go) and expects `want`.  If it got the lock (0, EOWNERDEAD) it
 * records its place in the board's order and its fence, holds it until
 * `release` (hold) or for hold_ms, makes it consistent after EOWNERDEAD
 * (consistent), and unlocks.  With linger it then waits for `bye`. */
typedef struct fw_waiter {
    struct fw_board *b;
    int idx;
    const char *name; /* a string literal: the same address in every child */
    int fair, robust;
    unsigned lease; /* 0: the default lease */
    int mode, timed_ms, want;
    int hold, hold_ms, consistent, linger;
    /* progress, set by the worker */
    int ready, got, done;
    /* orders, set by the test */
    int go, release, bye;
    /* results */
    int rc, seq, unlock_rc, cons_rc, thread_rc;
    unsigned long long fence;
    double t_go, t_got;
    char err[200];
} fw_waiter;

/* The waiters one child process runs: itself (n == 1) or as threads. */
typedef struct fw_host {
    struct fw_board *b;
    int n;
    int idx[FW_MAX];
} fw_host;

typedef struct fw_board {
    int seq;               /* acquisitions so far */
    int order[FW_MAX];     /* order[k]: the waiter that made acquisition k + 1 */
    int inside, violations; /* in the critical section now; more than one seen */
    fw_waiter w[FW_MAX];
    fw_host host[FW_MAX];
} fw_board;

/* Query parameters for the waiters' client ("" : the default client): the
 * waiter processes, forked after the test sets it, each make their own
 * client from the suite's URL with them, which their mutexes use. */
static char fw_query[64];
static dlock_client_t *fw_client;

static int fw_open(dlock_mutex_t *m, const char *name, int fair, int robust, unsigned lease) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (fw_client != NULL && (rc = dlock_mutexattr_setclient(&a, fw_client)) != 0) goto out;
    if (fair && (rc = dlock_mutexattr_setfair(&a, 1)) != 0) goto out;
    if (robust && (rc = dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST)) != 0) goto out;
    if (lease && (rc = dlock_mutexattr_setlease(&a, lease)) != 0) goto out;
    rc = dlock_mutex_init(m, name, &a);
out:
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* FW_TRYRD: a reader.  A rwlock opened with the waiter's attributes
 * (fair: ignored for read locks) tries a read lock, unlocks it if it got
 * it, and expects `want`. */
static int fw_reader_main(fw_waiter *w) {
    dlock_mutexattr_t a;
    dlock_rwlock_t rw;
    int rc;
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_setfair(&a, w->fair), 0);
    rc = dlock_rwlock_init(&rw, w->name, &a);
    dlock_mutexattr_destroy(&a);
    DLT_CK(rc, 0);
    dlt_flag_set(&w->ready, 1);
    DLT_CKT(dlt_flag_wait(&w->go, 1, 120000));
    w->t_go = dlt_now();
    w->rc = dlock_rwlock_tryrdlock(&rw);
    if (w->rc != 0) snprintf(w->err, sizeof w->err, "%s", dlock_last_error());
    dlt_flag_set(&w->got, 1);
    if (w->rc == 0) w->unlock_rc = dlock_rwlock_unlock(&rw);
    dlt_flag_set(&w->done, 1);
    DLT_CK(w->rc, w->want);
    if (w->rc == 0) DLT_CK(w->unlock_rc, 0);
    DLT_CK(dlock_rwlock_destroy(&rw), 0);
    return 0;
}

static int fw_waiter_main(void *p) {
    fw_waiter *w = p;
    fw_board *b = w->b;
    dlock_mutex_t m;
    struct timespec ts;
    int got;

    if (w->mode == FW_TRYRD) return fw_reader_main(w);

    DLT_CK(fw_open(&m, w->name, w->fair, w->robust, w->lease), 0);
    dlt_flag_set(&w->ready, 1);
    DLT_CKT(dlt_flag_wait(&w->go, 1, 120000));
    w->t_go = dlt_now();
    switch (w->mode) {
    case FW_TRY: w->rc = dlock_mutex_trylock(&m); break;
    case FW_TIMED:
        ts = dlt_abs_in(CLOCK_REALTIME, w->timed_ms);
        w->rc = dlock_mutex_timedlock(&m, &ts);
        break;
    default: w->rc = dlock_mutex_lock(&m); break;
    }
    w->t_got = dlt_now();
    got = w->rc == 0 || w->rc == EOWNERDEAD;
    if (got) {
        if (dlt_flag_add(&b->inside, 1) != 1) dlt_flag_add(&b->violations, 1);
        w->seq = dlt_flag_add(&b->seq, 1);
        if (w->seq >= 1 && w->seq <= FW_MAX) b->order[w->seq - 1] = w->idx;
        w->fence = dlock_mutex_fence(&m);
    } else {
        snprintf(w->err, sizeof w->err, "%s", dlock_last_error());
    }
    dlt_flag_set(&w->got, 1);
    if (got) {
        if (w->hold) (void)dlt_flag_wait(&w->release, 1, 120000);
        else if (w->hold_ms > 0) dlt_sleep_ms((unsigned)w->hold_ms);
        if (w->rc == EOWNERDEAD && w->consistent) w->cons_rc = dlock_mutex_consistent(&m);
        dlt_flag_add(&b->inside, -1);
        w->unlock_rc = dlock_mutex_unlock(&m);
    }
    dlt_flag_set(&w->done, 1);
    if (w->linger) (void)dlt_flag_wait(&w->bye, 1, 120000);
    DLT_CK(w->rc, w->want);
    if (got) {
        if (w->rc == EOWNERDEAD && w->consistent) DLT_CK(w->cons_rc, 0);
        DLT_CK(w->unlock_rc, 0);
    }
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void *fw_thread(void *p) {
    fw_waiter *w = p;
    w->thread_rc = fw_waiter_main(w);
    return NULL;
}

static int fw_host_run(fw_host *h) {
    pthread_t th[FW_MAX];
    int i, n = 0, rc = 0;
    if (h->n == 1) return fw_waiter_main(&h->b->w[h->idx[0]]);
    for (i = 0; i < h->n; i++) {
        if (pthread_create(&th[i], NULL, fw_thread, &h->b->w[h->idx[i]]) != 0) {
            rc = 119;
            break;
        }
        n++;
    }
    for (i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (rc == 0) rc = h->b->w[h->idx[i]].thread_rc;
    }
    return rc;
}

static int fw_host_main(void *p) {
    char url[400];
    int rc;
    if (fw_query[0] != '\0') {
        snprintf(url, sizeof url, "%s?%s", dlt_server.url, fw_query);
        if (dlt_client_make(&fw_client, url, 5000) != 0) return 118;
    }
    rc = fw_host_run(p);
    if (fw_client != NULL && dlock_client_destroy(fw_client) != 0 && rc == 0) rc = 117;
    return rc;
}

/* ========================================================================
 * The test's side
 * ====================================================================== */

typedef struct fw_run {
    fw_board *b;
    const char *name;
    int nw, np;
    pid_t pid[FW_MAX];
    int reaped[FW_MAX], status[FW_MAX];
    int host_of[FW_MAX];     /* waiter -> index into pid[] */
    char tok[FW_MAX][FW_TOK]; /* waiter -> its token on the server, once seen */
} fw_run;

static void fw_init(fw_run *r, const char *name) {
    memset(r, 0, sizeof *r);
    r->b = DLT_SHM_NEW(fw_board, 1);
    r->name = name;
}

/* A new waiter (not started): its index. */
static int fw_new(fw_run *r, int fair, unsigned lease) {
    int i = r->nw++;
    fw_waiter *w;
    CU_ASSERT_FATAL(i < FW_MAX);
    w = &r->b->w[i];
    memset(w, 0, sizeof *w);
    w->b = r->b;
    w->idx = i;
    w->name = r->name;
    w->fair = fair;
    w->lease = lease;
    w->mode = FW_LOCK;
    w->rc = w->unlock_rc = w->cons_rc = -1;
    return i;
}

static fw_waiter *fw_w(fw_run *r, int i) {
    return &r->b->w[i];
}

/* Forks one process that runs the n waiters idx[] (threads if n > 1). */
static pid_t fw_spawn(fw_run *r, const int *idx, int n) {
    int k = r->np++, i;
    fw_host *h = &r->b->host[k];
    h->b = r->b;
    h->n = n;
    for (i = 0; i < n; i++) {
        h->idx[i] = idx[i];
        r->host_of[idx[i]] = k;
    }
    r->pid[k] = dlt_spawn(fw_host_main, h);
    r->reaped[k] = r->pid[k] <= 0;
    r->status[k] = -1;
    CU_ASSERT_TRUE(r->pid[k] > 0);
    return r->pid[k];
}

static pid_t fw_spawn1(fw_run *r, int i) {
    return fw_spawn(r, &i, 1);
}

/* SIGKILLs the process of waiter i and reaps it: its exit status. */
static int fw_kill(fw_run *r, int i) {
    int k = r->host_of[i], j;
    if (r->reaped[k]) return r->status[k];
    kill(r->pid[k], SIGKILL);
    r->status[k] = dlt_wait(r->pid[k], 10000);
    r->reaped[k] = 1;
    /* A holder killed in its critical section is out of it now (its lease
     * will run out), or the next holder would count as a violation. */
    for (j = 0; j < r->b->host[k].n; j++) {
        fw_waiter *w = &r->b->w[r->b->host[k].idx[j]];
        if (dlt_flag_get(&w->got) && !dlt_flag_get(&w->done) && (w->rc == 0 || w->rc == EOWNERDEAD))
            dlt_flag_add(&r->b->inside, -1);
    }
    return r->status[k];
}

static void fw_signal(fw_run *r, int i, int sig) {
    int k = r->host_of[i];
    if (!r->reaped[k]) kill(r->pid[k], sig);
}

/* Lets every worker run to its end (go, release, bye; SIGCONT) and reaps
 * every process, killing any that is still running after the bound.
 * Returns how many exited with a status other than 0 (killed ones that
 * were reaped before, by fw_kill, do not count). */
static int fw_finish(fw_run *r) {
    double end = dlt_now() + 30.0;
    int i, bad = 0;
    for (i = 0; i < r->nw; i++) {
        dlt_flag_set(&r->b->w[i].go, 1);
        dlt_flag_set(&r->b->w[i].release, 1);
        dlt_flag_set(&r->b->w[i].bye, 1);
    }
    for (i = 0; i < r->np; i++)
        if (!r->reaped[i]) kill(r->pid[i], SIGCONT);
    for (i = 0; i < r->np; i++) {
        int left = (int)((end - dlt_now()) * 1000);
        if (r->reaped[i]) continue;
        r->status[i] = dlt_wait(r->pid[i], left < 200 ? 200 : left);
        r->reaped[i] = 1;
        if (r->status[i] != 0) {
            fprintf(stderr, "  process %d (pid %d) exited with %d\n", i, (int)r->pid[i], r->status[i]);
            bad++;
        }
    }
    for (i = 0; i < r->nw; i++) {
        const fw_waiter *w = &r->b->w[i];
        if (w->err[0] != '\0' && w->rc != w->want)
            fprintf(stderr, "  waiter %d: rc %s, want %s: %s\n", i, dlt_errno_label(w->rc),
                    dlt_errno_label(w->want), w->err);
    }
    return bad;
}

static void fw_free(fw_run *r) {
    DLT_SHM_FREE(r->b, 1);
    r->b = NULL;
}

/* ------------------------------------------------------ the server side */

static size_t fw_key(const char *name, const char *suffix, char *buf, size_t cap) {
    size_t n = dlt_lock_key(name, buf, cap);
    int k = snprintf(buf + n, cap - n, "%s", suffix);
    return k < 0 ? n : n + (size_t)k;
}

/* The tokens in name+suffix in order (at most max): the zset's members
 * by rank, or, for the queue (FW_Q, a list), the tokens its entries
 * begin with.  Their number, or -1 when the server did not answer. */
static int fw_members(const char *name, const char *suffix, char (*out)[FW_TOK], int max) {
    char k[600];
    size_t n = fw_key(name, suffix, k, sizeof k);
    int list = strcmp(suffix, FW_Q) == 0;
    redisReply *r = dlt_redis_cmd(&dlt_server, list ? "LRANGE %b 0 -1" : "ZRANGE %b 0 -1", k, n);
    int i, cnt = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY) {
        cnt = 0;
        for (i = 0; i < (int)r->elements && cnt < max; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_STRING) continue;
            size_t len = e->len;
            if (list) {
                const char *bar = memchr(e->str, '|', e->len);
                if (bar != NULL) len = (size_t)(bar - e->str);
            }
            snprintf(out[cnt++], FW_TOK, "%.*s", (int)len, e->str);
        }
    }
    if (r != NULL) freeReplyObject(r);
    return cnt;
}

static long long fw_zcard(const char *name, const char *suffix) {
    char k[600];
    size_t n = fw_key(name, suffix, k, sizeof k);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "ZCARD %b", k, n));
}

/* 1 if tok is in name+suffix (a zset, or the queue: fw_members), 0 if
 * not, -1: no answer. */
static int fw_zhas(const char *name, const char *suffix, const char *tok) {
    char m[32][FW_TOK];
    int n = fw_members(name, suffix, m, 32), i;
    if (n < 0) return -1;
    for (i = 0; i < n; i++)
        if (strcmp(m[i], tok) == 0) return 1;
    return 0;
}

static long long fw_exists(const char *name, const char *suffix) {
    char k[600];
    size_t n = fw_key(name, suffix, k, sizeof k);
    return dlt_reply_int(dlt_redis_cmd(&dlt_server, "EXISTS %b", k, n));
}

/* A run's end: every worker ran to its end with status 0, the queue of
 * name is gone, and the run is freed. */
static void fw_end(fw_run *r, const char *name) {
    DLT_ASSERT_INT_EQ(fw_finish(r), 0);
    DLT_ASSERT_INT_EQ(fw_exists(name, FW_Q), 0);
    fw_free(r);
}

/* Worker i's call returned within ms, with want: 1, else 0. */
static int fw_got(fw_run *r, int i, int want, int ms) {
    int ok = dlt_flag_wait(&fw_w(r, i)->got, 1, ms);
    CU_ASSERT_TRUE(ok);
    DLT_ASSERT_ERR(fw_w(r, i)->rc, want);
    return ok;
}

/* How many clients of the suite's server are blocked in BLPOP (a queued
 * waiter on its grant list): CLIENT LIST's lines with flags b and cmd
 * blpop.  -1 if the server does not answer. */
static int fw_blocked(void) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "CLIENT LIST");
    const char *p;
    int n = 0;
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r != NULL) freeReplyObject(r);
        return -1;
    }
    for (p = r->str; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p != NULL ? p + 1 : NULL) {
        const char *end = strchr(p, '\n'), *f = strstr(p, " flags="), *cmd = strstr(p, " cmd=blpop");
        if (end == NULL) end = p + strlen(p);
        if (f != NULL && f < end && cmd != NULL && cmd < end) {
            size_t k = strcspn(f + 7, " \n");
            if (memchr(f + 7, 'b', k) != NULL) n++;
        }
    }
    freeReplyObject(r);
    return n;
}

/* The fair queue's first entry into out ("" when there is none). */
static void fw_qfirst(const char *name, char *out, size_t cap) {
    char k[600];
    size_t n = fw_key(name, FW_Q, k, sizeof k);
    redisReply *r = dlt_redis_cmd(&dlt_server, "LINDEX %b 0", k, n);
    out[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_STRING) snprintf(out, cap, "%.*s", (int)r->len, r->str);
    if (r != NULL) freeReplyObject(r);
}

/* The lock's owner token into out ("" when the lock is free). */
static void fw_owner(const char *name, char *out, size_t cap) {
    char k[600];
    size_t n = fw_key(name, "", k, sizeof k);
    redisReply *r = dlt_redis_cmd(&dlt_server, "EVAL_RO %s 1 %b owner", DLT_LOCK_FIELD_LUA, k, n);
    out[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_STRING) snprintf(out, cap, "%.*s", (int)r->len, r->str);
    if (r != NULL) freeReplyObject(r);
}

/* Waits (bounded by ms) until tok is in neither the queue nor the
 * writers: 1, or 0 on the bound. */
static int fw_withdrawn(const char *name, const char *tok, int ms) {
    double end = dlt_now() + ms / 1000.0;
    while (fw_zhas(name, FW_Q, tok) != 0 || fw_zhas(name, ":writers", tok) != 0) {
        if (dlt_now() >= end) return 0;
        dlt_sleep_ms(5);
    }
    return 1;
}

/* Waits (bounded by ms) until the lock's owner is no longer tok; the
 * owner then into out.  1 if it changed, 0 on the bound. */
static int fw_owner_leaves(const char *name, const char *tok, int ms, char *out, size_t cap) {
    double end = dlt_now() + ms / 1000.0;
    for (;;) {
        fw_owner(name, out, cap);
        if (strcmp(out, tok) != 0) return 1;
        if (dlt_now() >= end) return 0;
        dlt_sleep_ms(5);
    }
}

static int fw_known(const fw_run *r, const char *tok) {
    int i;
    for (i = 0; i < r->nw; i++)
        if (strcmp(r->tok[i], tok) == 0) return 1;
    return 0;
}

/* Waits (bounded) until name+suffix (fw_members) holds a token no waiter is known
 * by, and makes it waiter i's.  1, or 0 on the bound. */
static int fw_learn(fw_run *r, int i, const char *suffix) {
    double end = dlt_now() + FW_BOUND_MS / 1000.0;
    char m[32][FW_TOK];
    for (;;) {
        int n = fw_members(r->name, suffix, m, 32), j;
        for (j = 0; j < n; j++) {
            if (!fw_known(r, m[j])) {
                snprintf(r->tok[i], FW_TOK, "%.*s", FW_TOK - 1, m[j]);
                return 1;
            }
        }
        if (dlt_now() > end) {
            fprintf(stderr, "  waiter %d never appeared in %s%s\n", i, r->name, suffix);
            return 0;
        }
        dlt_sleep_ms(2);
    }
}

/* Starts waiter i (it must be ready) and waits until it waits at the
 * server: its token appeared in `suffix` (FW_Q for a fair waiter,
 * ":writers" for a non-fair one).  1, or 0. */
static int fw_go_queued(fw_run *r, int i, const char *suffix) {
    fw_waiter *w = fw_w(r, i);
    if (!dlt_flag_wait(&w->ready, 1, FW_BOUND_MS)) {
        fprintf(stderr, "  waiter %d never got ready\n", i);
        return 0;
    }
    dlt_flag_set(&w->go, 1);
    if (!fw_learn(r, i, suffix)) return 0;
    if (dlt_flag_get(&w->got)) {
        fprintf(stderr, "  waiter %d returned %s instead of waiting\n", i, dlt_errno_label(w->rc));
        return 0;
    }
    return 1;
}

/* Starts waiter i and waits until it has the lock (or returned): 1, or 0. */
static int fw_go_got(fw_run *r, int i) {
    fw_waiter *w = fw_w(r, i);
    if (!dlt_flag_wait(&w->ready, 1, FW_BOUND_MS)) return 0;
    dlt_flag_set(&w->go, 1);
    return dlt_flag_wait(&w->got, 1, FW_BOUND_MS);
}

/* Starts the holder h and learns its token (the lock's owner).  1, or 0. */
static int fw_hold(fw_run *r, int h) {
    fw_waiter *w = fw_w(r, h);
    w->hold = 1;
    if (!fw_go_got(r, h) || w->rc != 0) {
        fprintf(stderr, "  holder %d: %s\n", h, dlt_errno_label(w->rc));
        return 0;
    }
    fw_owner(r->name, r->tok[h], FW_TOK);
    return r->tok[h][0] != '\0';
}

/* Asserts that the queue holds exactly the tokens of waiters idx[], in
 * that order. */
static void fw_assert_queue(fw_run *r, const int *idx, int n) {
    char m[32][FW_TOK];
    int got = fw_members(r->name, FW_Q, m, 32), i, same = got == n;
    for (i = 0; same && i < n; i++) same = strcmp(m[i], r->tok[idx[i]]) == 0;
    if (!same) {
        fprintf(stderr, "  queue has %d members, want %d:", got, n);
        for (i = 0; i < got; i++) fprintf(stderr, " %.8s", m[i]);
        fprintf(stderr, "; want");
        for (i = 0; i < n; i++) fprintf(stderr, " %.8s", r->tok[idx[i]]);
        fprintf(stderr, "\n");
    }
    CU_ASSERT_TRUE(same);
}

/* Asserts that the acquisitions were exactly waiters want[] in order. */
static void fw_assert_order(fw_run *r, const int *want, int n) {
    int seq = dlt_flag_get(&r->b->seq), i, same = seq == n;
    for (i = 0; same && i < n; i++) same = r->b->order[i] == want[i];
    if (!same) {
        fprintf(stderr, "  acquisition order:");
        for (i = 0; i < seq && i < FW_MAX; i++) fprintf(stderr, " %d", r->b->order[i]);
        fprintf(stderr, "; want");
        for (i = 0; i < n; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    CU_ASSERT_TRUE(same);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&r->b->violations), 0);
}
/* fw_assert_order with the workers listed. */
#define FW_ORDER(r, ...)                                                    \
    do {                                                                    \
        int want_[] = { __VA_ARGS__ };                                      \
        fw_assert_order((r), want_, (int)(sizeof want_ / sizeof want_[0])); \
    } while (0)

/* Waits (bounded) for the done flag of every waiter idx[]: 1, or 0. */
static int fw_wait_done(fw_run *r, const int *idx, int n, int timeout_ms) {
    int i;
    for (i = 0; i < n; i++) {
        if (!dlt_flag_wait(&fw_w(r, idx[i])->done, 1, timeout_ms)) {
            fprintf(stderr, "  waiter %d not done after %d ms\n", idx[i], timeout_ms);
            return 0;
        }
    }
    return 1;
}

/* Resets the command counts and waits until a whole window of window_ms
 * passes with no script call: every worker is asleep.  1, or 0. */
static int fw_quiet(int window_ms, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    do {
        if (dlt_redis_reset_stats(&dlt_server) != 0) return 0;
        dlt_sleep_ms((unsigned)window_ms);
        if (dlt_evals() == 0) return 1;
    } while (dlt_now() < end);
    return 0;
}

/* ========================================================================
 * 8. The attribute
 * ====================================================================== */

static void test_attr_setfair_getfair(void) {
    dlock_mutexattr_t a, z;
    int v = -7;

    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 0); /* off by default */
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, 1), 0);
    v = -7;
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 1);
    /* Anything but 0 and 1 is refused and changes nothing. */
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, 2), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, -1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, INT_MAX), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, INT_MIN), EINVAL);
    v = -7;
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 1);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, 0), 0);
    v = -7;
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, 5), EINVAL);
    v = -7;
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, 0);
    /* The other attributes are untouched by it. */
    {
        int robust = -1;
        unsigned lease = 0;
        DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, 1), 0);
        DLT_ASSERT_ERR(dlock_mutexattr_getrobust(&a, &robust), 0);
        DLT_ASSERT_INT_EQ(robust, DLOCK_MUTEX_STALLED);
        DLT_ASSERT_ERR(dlock_mutexattr_getlease(&a, &lease), 0);
        DLT_ASSERT_INT_EQ(lease, DLOCK_LEASE_DEFAULT_MS);
    }
    /* NULL pointers. */
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(NULL, 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(NULL, 0), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(NULL, &v), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(&a, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(NULL, NULL), EINVAL);
    /* A destroyed or never initialised attribute object. */
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&a, 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(&a, &v), EINVAL);
    memset(&z, 0, sizeof z);
    DLT_ASSERT_ERR(dlock_mutexattr_setfair(&z, 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getfair(&z, &v), EINVAL);
}

/* An uncontended fair mutex, in a child: lock, trylock and timedlock take
 * it at once; nothing waited, so no queue key is ever made. */
static int uncontended_fn(void *p) {
    const char *name = p;
    dlock_mutex_t m;
    struct timespec ts;
    int i;
    DLT_CK(fw_open(&m, name, 1, 0, 0), 0);
    for (i = 0; i < 3; i++) {
        DLT_CK(dlock_mutex_lock(&m), 0);
        DLT_CK(dlock_mutex_holds(&m), 1);
        DLT_CK(dlock_mutex_trylock(&m), EBUSY); /* held by the caller */
        DLT_CK(dlock_mutex_unlock(&m), 0);
        DLT_CK(dlock_mutex_trylock(&m), 0);
        DLT_CK(dlock_mutex_unlock(&m), 0);
        ts = dlt_abs_in(CLOCK_REALTIME, 5000);
        DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
        DLT_CK(fw_exists(name, FW_Q), 0);
        DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

static void test_uncontended_fair(void) {
    static const char *name = "fair/uncontended";
    DLT_ASSERT_INT_EQ(dlt_wait(dlt_spawn(uncontended_fn, (void *)name), 30000), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    DLT_ASSERT_INT_EQ(fw_exists(name, FW_Q), 0);
}

/* ========================================================================
 * 1. Arrival order: processes, threads of one process, mixed
 * ====================================================================== */

#define ORDER_N_MAX (FW_MAX - 1)

/* A holder holds; waiters 0..n-1 are started one at a time, each once the
 * previous one is in the server's queue; the holder releases; they must
 * acquire exactly in that order.  group[k] (k < n): the process waiter k
 * runs in; holder_group: the holder's.  Waiters of one group are threads of
 * one process.  fair: the mutexes' fair attribute.  blocked >= 0: once
 * all are queued, exactly that many of them wait in BLPOP on their grant
 * lists (the others hear of their grant on the release channel). */
static void order_run(const char *name, int fair, int holder_group, const int *group, int n, int blocked) {
    fw_run r;
    int h, ws[ORDER_N_MAX], want[ORDER_N_MAX + 1], g, k, ok = 1, ngroups = 0;

    fw_init(&r, name);
    h = fw_new(&r, fair, 0);
    for (k = 0; k < n; k++) {
        ws[k] = fw_new(&r, fair, 0);
        fw_w(&r, ws[k])->hold_ms = 5;
    }
    for (k = 0; k < n; k++)
        if (group[k] + 1 > ngroups) ngroups = group[k] + 1;
    if (holder_group + 1 > ngroups) ngroups = holder_group + 1;
    /* Every process is forked first, before any of them starts threads. */
    for (g = 0; g < ngroups; g++) {
        int idx[FW_MAX], m = 0;
        if (g == holder_group) idx[m++] = h;
        for (k = 0; k < n; k++)
            if (group[k] == g) idx[m++] = ws[k];
        if (m > 0) fw_spawn(&r, idx, m);
    }
    ok = fw_hold(&r, h);
    CU_ASSERT_TRUE(ok);
    for (k = 0; ok && k < n; k++) {
        ok = fw_go_queued(&r, ws[k], FW_Q);
        CU_ASSERT_TRUE(ok);
    }
    if (ok && blocked >= 0) {
        double end = dlt_now() + FW_BOUND_MS / 1000.0;
        while (fw_blocked() != blocked && dlt_now() < end) dlt_sleep_ms(5);
        DLT_ASSERT_INT_EQ(fw_blocked(), blocked);
        dlt_sleep_ms(200); /* and no more come */
        DLT_ASSERT_INT_EQ(fw_blocked(), blocked);
    }
    if (ok) {
        /* Tickets in arrival order, one each. */
        fw_assert_queue(&r, ws, n);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&r.b->seq), 1); /* only the holder so far */
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        CU_ASSERT_TRUE(fw_wait_done(&r, ws, n, 30000));
        want[0] = h;
        for (k = 0; k < n; k++) want[k + 1] = ws[k];
        fw_assert_order(&r, want, n + 1);
        for (k = 0; k < n; k++) DLT_ASSERT_ERR(fw_w(&r, ws[k])->rc, 0);
        /* Each acquisition has a newer fence than the one before. */
        for (k = 1; k <= n; k++)
            CU_ASSERT_TRUE(fw_w(&r, want[k])->fence > fw_w(&r, want[k - 1])->fence);
    }
    DLT_ASSERT_INT_EQ(fw_finish(&r), 0);
    /* The queue is empty and gone, and so is the lock. */
    DLT_ASSERT_INT_EQ(fw_exists(name, FW_Q), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0);
    fw_free(&r);
}

/* Six waiter processes, the holder a seventh. */
static void test_order_processes(void) {
    static const int group[] = { 1, 2, 3, 4, 5, 6 };
    order_run("fair/order-procs", 1, 0, group, 6, 6);
}

/* The holder and six waiters are threads of one process: a fair waiter
 * goes to the server's queue even though a thread of its own process
 * holds the lock. */
static void test_order_threads(void) {
    static const int group[] = { 0, 0, 0, 0, 0, 0 };
    order_run("fair/order-threads", 1, 0, group, 6, 6);
}

/* The default (not fair) mutex queues the same way on a server that keeps
 * queues, threads of the holder's own process too: each is handed the
 * lock by the release before it (not a caching one: test_cache). */
static void test_order_threads_default(void) {
    static const int group[] = { 0, 0, 0, 0 };
    order_run("fair/order-threads-default", 0, 0, group, 4, 4);
}

/* Threads of one process (group 1) interleaved with other processes, and
 * one waiter a thread of the holder's process. */
static void test_order_mixed(void) {
    static const int group[] = { 1, 2, 1, 0, 3, 1, 2 };
    order_run("fair/order-mixed", 1, 0, group, 7, 7);
}

/* Eleven waiting threads of one process (the holder's), whose client
 * says wait_conns=3: three of them wait in BLPOP, each on a connection of
 * its own; the other eight hear of their grant on the release channel,
 * through the subscriber's one connection.  With wait_conns=0, none
 * does.  The order is the queue's all the same, and each is handed the
 * lock by the release before it. */
static void test_order_threads_wait_conns(void) {
    static const int group[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    snprintf(fw_query, sizeof fw_query, "wait_conns=3");
    order_run("fair/order-threads-wait-conns", 0, 0, group, 11, 3);
    snprintf(fw_query, sizeof fw_query, "wait_conns=0");
    order_run("fair/order-threads-wait-conns-0", 1, 0, group, 6, 0);
    fw_query[0] = '\0';
}

/* ========================================================================
 * 2. Herd-free: a release wakes only the head
 * ====================================================================== */

/* Three fair waiters in three processes are queued behind a holder (all
 * with a 90 s lease: nobody renews anything for 30 s, so no timer fires
 * during the measurement).  The head is stopped (SIGSTOP) before the
 * release, so the release and the head's confirmation are counted apart.
 * The release alone: one script call, no PUBLISH, one BLPOP answered
 * (the head's, blocked on its grant list: the others stay blocked on
 * theirs, and the server counts a blocked command when it answers it),
 * and the lock is the head's already.  Nothing else happens while the
 * head is stopped -- the other waiters did not wake.  The head,
 * continued, takes the grant it was sent with exactly one script call
 * (its renewal), and still nobody else asks. */
static void test_release_wakes_only_head(void) {
    static const char *name = "fair/herd";
    fw_run r;
    int h, ws[3], k, ok;
    char owner[FW_TOK];
    long long e1 = -1, p1 = -1, e2 = -1, p2 = -1, e3 = -1, p3 = -1, b1 = -1, b2 = -1, b3 = -1;
    long long zs = -1, zr = -1, zb = -1, hs = -1, px = -1;
    int k0 = -1, k1 = -1, k2 = -1, k3 = -1;

    fw_init(&r, name);
    h = fw_new(&r, 1, 90000);
    fw_spawn1(&r, h);
    for (k = 0; k < 3; k++) {
        ws[k] = fw_new(&r, 1, 90000);
        fw_w(&r, ws[k])->hold = 1;
        fw_spawn1(&r, ws[k]);
    }
    ok = fw_hold(&r, h);
    for (k = 0; ok && k < 3; k++) ok = fw_go_queued(&r, ws[k], FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        fw_assert_queue(&r, ws, 3);
        /* Every waiter is asleep: a whole window without a request. */
        ok = fw_quiet(500, FW_BOUND_MS);
        CU_ASSERT_TRUE(ok);
    }
    if (ok) {
        k0 = fw_blocked();
        fw_signal(&r, ws[0], SIGSTOP);
        DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        ok = dlt_flag_wait(&fw_w(&r, h)->done, 1, FW_BOUND_MS);
        CU_ASSERT_TRUE(ok);
    }
    if (ok) {
        e1 = dlt_evals_ok();
        p1 = dlt_redis_cmdstat(&dlt_server, "publish");
        b1 = dlt_redis_cmdstat(&dlt_server, "blpop");
        k1 = fw_blocked();
        /* The grant's calls (the release ran alone): the head's liveness
         * by the ZREM that takes its registration, once the lapsed ones
         * went (no ZSCORE); the hash rewritten by one HSET and one
         * PEXPIRE; the grant list's expiry the other PEXPIRE. */
        zs = dlt_redis_cmdstat(&dlt_server, "zscore");
        zr = dlt_redis_cmdstat(&dlt_server, "zrem");
        zb = dlt_redis_cmdstat(&dlt_server, "zremrangebyscore");
        hs = dlt_redis_cmdstat(&dlt_server, "hset");
        px = dlt_redis_cmdstat(&dlt_server, "pexpire");
        fw_owner(name, owner, sizeof owner);
        /* Handed straight to the head, which has not asked yet. */
        CU_ASSERT_STRING_EQUAL(owner, r.tok[ws[0]]);
        DLT_ASSERT_ERR(fw_w(&r, h)->unlock_rc, 0);
        /* Short: the grant to the stopped head lasts 2 s. */
        dlt_sleep_ms(200);
        e2 = dlt_evals_ok();
        p2 = dlt_redis_cmdstat(&dlt_server, "publish");
        b2 = dlt_redis_cmdstat(&dlt_server, "blpop");
        k2 = fw_blocked();
        DLT_ASSERT_INT_EQ(dlt_flag_get(&fw_w(&r, ws[1])->got), 0);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&fw_w(&r, ws[2])->got), 0);
        fw_signal(&r, ws[0], SIGCONT);
        ok = dlt_flag_wait(&fw_w(&r, ws[0])->got, 1, FW_BOUND_MS);
        CU_ASSERT_TRUE(ok);
        DLT_ASSERT_ERR(fw_w(&r, ws[0])->rc, 0);
        /* The head takes the lock from the release's message if its grant
         * is recent enough, else it confirms with one acquire; either way
         * the grant's short lease becomes its own (a renewal, or that
         * acquire): wait for that, bounded, then count. */
        {
            double end = dlt_now() + 3.0;
            while (dlt_key_pttl(name) <= 60000 && dlt_now() < end) dlt_sleep_ms(20);
        }
        dlt_sleep_ms(200);
        e3 = dlt_evals_ok();
        p3 = dlt_redis_cmdstat(&dlt_server, "publish");
        b3 = dlt_redis_cmdstat(&dlt_server, "blpop");
        k3 = fw_blocked();
        printf("  blocked in BLPOP before the release: %d; release: %lld script call(s), %lld publish, %lld new "
               "blpop, %d blocked; 200 ms later %lld, %lld, %lld, %d; after the head took it %lld (that ran), "
               "%lld, %lld, %d\n", k0, e1, p1, b1, k1, e2, p2, b2, k2, e3, p3, b3, k3);
        DLT_ASSERT_INT_EQ(k0, 3); /* every waiter, on its grant list */
        DLT_ASSERT_INT_EQ(e1, 1); /* the release */
        DLT_ASSERT_INT_EQ(p1, 0);
        DLT_ASSERT_INT_EQ(b1, 0); /* (a BLPOP is counted when it is sent) */
        DLT_ASSERT_INT_EQ(k1, 2); /* the head's was answered, with its grant */
        printf("  the grant's calls: %lld zscore, %lld zrem, %lld zremrangebyscore, %lld hset, %lld pexpire\n", zs, zr,
               zb, hs, px);
        DLT_ASSERT_INT_EQ(zs, 0);
        DLT_ASSERT_INT_EQ(zr, 1);
        DLT_ASSERT_INT_EQ(zb, 1);
        DLT_ASSERT_INT_EQ(hs, 1);
        DLT_ASSERT_INT_EQ(px, 2);
        DLT_ASSERT_INT_EQ(e2, 1); /* nobody else woke */
        DLT_ASSERT_INT_EQ(p2, 0);
        DLT_ASSERT_INT_EQ(b2, 0);
        DLT_ASSERT_INT_EQ(k2, 2);
        DLT_ASSERT_INT_EQ(e3, 2); /* + the head's one request (its renewal) */
        DLT_ASSERT_INT_EQ(p3, 0);
        DLT_ASSERT_INT_EQ(b3, 0);
        DLT_ASSERT_INT_EQ(k3, 2);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&fw_w(&r, ws[1])->got), 0);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&fw_w(&r, ws[2])->got), 0);
        fw_assert_queue(&r, ws + 1, 2);
        fw_owner(name, owner, sizeof owner);
        CU_ASSERT_STRING_EQUAL(owner, r.tok[ws[0]]);
        /* The confirmed hold has the waiter's own lease again. */
        CU_ASSERT_TRUE(dlt_key_pttl(name) > 60000);
    }
    if (ok) {
        int want[] = { h, ws[0], ws[1], ws[2] };
        for (k = 0; k < 3; k++) dlt_flag_set(&fw_w(&r, ws[k])->release, 1);
        CU_ASSERT_TRUE(fw_wait_done(&r, ws, 3, 30000));
        fw_assert_order(&r, want, 4);
    }
    fw_signal(&r, ws[0], SIGCONT);
    DLT_ASSERT_INT_EQ(fw_finish(&r), 0);
    fw_free(&r);
}

/* The grant travels in the release's message: a waiter queued a moment
 * ago owns the lock as the message arrives, with the fence the release
 * issued, having sent nothing itself (the release is the only script call
 * until the new holder's first renewal, due no sooner than a quarter of
 * the grant's lease, 2 s, later). */
static void test_grant_taken_from_message(void) {
    static const char *name = "fair/grant";
    fw_run r;
    int h, w, ok;
    long long e = -1;
    char owner[FW_TOK];

    fw_init(&r, name);
    h = fw_new(&r, 1, 90000);
    w = fw_new(&r, 1, 90000);
    fw_w(&r, w)->hold = 1;
    fw_spawn1(&r, h);
    fw_spawn1(&r, w);
    /* Queued, and asleep: its attempts are over (a waiter asks once more
     * after its subscription is confirmed; that request, counted after
     * the reset below, would be taken for the confirmation this test
     * says never comes). */
    ok = fw_hold(&r, h) && fw_go_queued(&r, w, FW_Q) && fw_quiet(300, FW_BOUND_MS);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&dlt_server), 0);
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        ok = dlt_flag_wait(&fw_w(&r, w)->got, 1, FW_BOUND_MS);
        CU_ASSERT_TRUE(ok);
    }
    if (ok) {
        e = dlt_evals_ok();
        printf("  script calls from the release to the new holder's lock: %lld\n", e);
        DLT_ASSERT_INT_EQ(e, 1); /* the release, nothing else */
        DLT_ASSERT_ERR(fw_w(&r, w)->rc, 0);
        fw_owner(name, owner, sizeof owner);
        CU_ASSERT_STRING_EQUAL(owner, r.tok[w]);
        DLT_ASSERT_INT_EQ((long long)fw_w(&r, w)->fence, dlt_key_field(name, "fence"));
        /* Then its hold is renewed to its own lease, well before the
         * grant's 2 s run out. */
        {
            double end = dlt_now() + 3.0;
            while (dlt_key_pttl(name) <= 60000 && dlt_now() < end) dlt_sleep_ms(20);
        }
        CU_ASSERT_TRUE(dlt_key_pttl(name) > 60000);
        dlt_flag_set(&fw_w(&r, w)->release, 1);
        CU_ASSERT_TRUE(fw_wait_done(&r, &w, 1, 30000));
        DLT_ASSERT_ERR(fw_w(&r, w)->unlock_rc, 0);
    }
    DLT_ASSERT_INT_EQ(fw_finish(&r), 0);
    fw_free(&r);
}

/* A grant message heard late -- from before the waiter's last busy
 * answer, its lease long run out -- must not be taken for the lock.  (The
 * chaos suite met it: a waiter stopped by SIGSTOP while a grant to it ran
 * out resumed, asked again, was told busy, and then read the old grant.)
 * The test plays the late message itself: with H holding and W queued, it
 * publishes "W's token:the lock's current fence:2000" on the lock's
 * channel.  W must go on waiting (it may ask the server, which says busy),
 * and acquire with a greater fence once H releases.  For a fair waiter and
 * a default one (both wait in the queue). */
static void stale_grant_round(const char *name, int fair) {
    fw_run r;
    int h, w, ok;
    long long f0;
    char msg[128], ch[300];

    fw_init(&r, name);
    h = fw_new(&r, fair, 90000);
    w = fw_new(&r, fair, 90000);
    fw_spawn1(&r, h);
    fw_spawn1(&r, w);
    ok = fw_hold(&r, h) && fw_go_queued(&r, w, FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        redisReply *rp;
        f0 = dlt_key_field(name, "fence");
        CU_ASSERT_TRUE(f0 > 0);
        snprintf(msg, sizeof msg, "%s:%lld:2000", r.tok[w], f0);
        dlt_lock_key(name, ch, sizeof ch); /* the lock's channel is its key */
        {
            /* W queues with its first attempt and subscribes after it: wait
             * for the subscription, or the message reaches nobody. */
            double end = dlt_now() + FW_BOUND_MS / 1000.0;
            while (dlt_numsub(ch) < 1 && dlt_now() < end) dlt_sleep_ms(5);
        }
        rp = dlt_redis_cmd(&dlt_server, "PUBLISH %s %s", ch, msg);
        DLT_ASSERT_INT_EQ(dlt_reply_int(rp), 1); /* W's process heard it */
        dlt_sleep_ms(500);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&fw_w(&r, w)->got), 0); /* still waiting */
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        ok = dlt_flag_wait(&fw_w(&r, w)->got, 1, FW_BOUND_MS);
        CU_ASSERT_TRUE(ok);
    }
    if (ok) {
        DLT_ASSERT_ERR(fw_w(&r, w)->rc, 0);
        CU_ASSERT_TRUE((long long)fw_w(&r, w)->fence > f0);
    }
    DLT_ASSERT_INT_EQ(fw_finish(&r), 0);
    fw_free(&r);
}

static void test_stale_grant_not_taken(void) {
    stale_grant_round("fair/stale-grant", 1);
    stale_grant_round("fair/stale-grant-default", 0);
}

/* ========================================================================
 * 3. A dead waiter does not wedge the queue
 * ====================================================================== */

/* A holder holds; waiter D (lease 1000 ms) and waiter W behind it are
 * queued; D is SIGKILLed.  Round 0: the holder releases at once, while D's
 * registration is still live, so the lock may be handed to the dead D.
 * Round 1: the holder releases only once D's registration has lapsed.
 * Either way W gets the lock (within a generous bound), and D's token is
 * gone from the queue and its metadata. */
static void dead_waiter_round(const char *name, int late) {
    fw_run r;
    int h, d, w, ok;
    char owner[FW_TOK];

    fw_init(&r, name);
    h = fw_new(&r, 1, 3000);
    d = fw_new(&r, 1, 1000);
    w = fw_new(&r, 1, 1000);
    fw_w(&r, w)->hold = 1;
    fw_spawn1(&r, h);
    fw_spawn1(&r, d);
    fw_spawn1(&r, w);
    ok = fw_hold(&r, h) && fw_go_queued(&r, d, FW_Q) && fw_go_queued(&r, w, FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        int q[] = { d, w };
        fw_assert_queue(&r, q, 2);
        DLT_ASSERT_INT_EQ(fw_kill(&r, d), 128 + SIGKILL);
        if (late) {
            dlt_sleep_ms(1500); /* D's registration (1000 ms) lapses */
            printf("  released after D's registration lapsed; D still queued: %d\n",
                   fw_zhas(name, FW_Q, r.tok[d]));
        }
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        CU_ASSERT_TRUE(dlt_flag_wait(&fw_w(&r, h)->done, 1, FW_BOUND_MS));
        DLT_ASSERT_ERR(fw_w(&r, h)->unlock_rc, 0);
        fw_owner(name, owner, sizeof owner);
        if (late) {
            /* The release looked at the queue, dropped D and handed the
             * lock straight to W (W holds it until told). */
            CU_ASSERT_STRING_EQUAL(owner, r.tok[w]);
        } else {
            printf("  released at once: the lock went to %s\n",
                   strcmp(owner, r.tok[d]) == 0 ? "the dead waiter" :
                   strcmp(owner, r.tok[w]) == 0 ? "the live waiter" : "nobody");
        }
        /* W acquires (a dead waiter delays it by about its lease, the 2 s
         * of a grant, and W's own re-ask interval: 10 s is generous). */
        ok = fw_got(&r, w, 0, 10000);
        DLT_ASSERT_INT_EQ(fw_zhas(name, FW_Q, r.tok[d]), 0);
        dlt_flag_set(&fw_w(&r, w)->release, 1);
        CU_ASSERT_TRUE(fw_wait_done(&r, &w, 1, FW_BOUND_MS));
        FW_ORDER(&r, h, w);
        CU_ASSERT_TRUE(fw_w(&r, w)->fence > fw_w(&r, h)->fence);
    }
    fw_end(&r, name);
}

static void test_dead_waiter_released_at_once(void) {
    dead_waiter_round("fair/dead-early", 0);
}

static void test_dead_waiter_lapsed(void) {
    dead_waiter_round("fair/dead-late", 1);
}

/* The holder H (lease 3 s), then the waiters A and B (1 s, holds of
 * 5 ms) queued behind it, A first: 1, or 0 (asserted). */
static int fw_two_queued(fw_run *r, const char *name, int *h, int *a, int *b) {
    int ok;
    fw_init(r, name);
    *h = fw_new(r, 1, 3000);
    *a = fw_new(r, 1, 1000);
    *b = fw_new(r, 1, 1000);
    fw_w(r, *a)->hold_ms = 5;
    fw_w(r, *b)->hold_ms = 5;
    fw_spawn1(r, *h);
    fw_spawn1(r, *a);
    fw_spawn1(r, *b);
    ok = fw_hold(r, *h) && fw_go_queued(r, *a, FW_Q) && fw_go_queued(r, *b, FW_Q);
    CU_ASSERT_TRUE(ok);
    return ok;
}

/* H releases; first, then second, get the lock, each without error. */
static void fw_release_in_order(fw_run *r, int h, int first, int second) {
    int both[] = { first, second }, want[] = { h, first, second };
    dlt_flag_set(&fw_w(r, h)->release, 1);
    CU_ASSERT_TRUE(dlt_flag_wait(&fw_w(r, h)->done, 1, FW_BOUND_MS));
    DLT_ASSERT_ERR(fw_w(r, h)->unlock_rc, 0);
    CU_ASSERT_TRUE(fw_wait_done(r, both, 2, FW_BOUND_MS));
    fw_assert_order(r, want, 3);
    DLT_ASSERT_ERR(fw_w(r, first)->rc, 0);
    DLT_ASSERT_ERR(fw_w(r, second)->rc, 0);
}

/* A waiter registered as a waiting writer but missing from the queue (the
 * handoff window registers the releaser so, and a stale entry may have
 * been dropped) joins the queue at its next attempt -- its refresh, a
 * third of its lease later -- at the end: here A's entry is taken out by
 * hand, so A, first to queue, comes after B.  (Were a refresh to look only
 * at the registration, A would never be queued again, and would take the
 * lock only once the queue was empty.)  The refresh of a waiter that is
 * queued keeps its place and adds no second entry: B's stays the one. */
static void test_unqueued_waiter_joins_at_refresh(void) {
    static const char *name = "fair/rejoin";
    fw_run r;
    int h, a, b, ok = fw_two_queued(&r, name, &h, &a, &b);
    if (ok) {
        char k[600];
        size_t n = fw_key(name, FW_Q, k, sizeof k);
        int q[] = { a, b }, ba[] = { b, a };
        redisReply *e;
        double end;
        fw_assert_queue(&r, q, 2);
        e = dlt_redis_cmd(&dlt_server, "LINDEX %b 0", k, n);
        CU_ASSERT_TRUE(e != NULL && e->type == REDIS_REPLY_STRING);
        if (e != NULL && e->type == REDIS_REPLY_STRING)
            DLT_ASSERT_INT_EQ(dlt_reply_int(dlt_redis_cmd(&dlt_server, "LREM %b 0 %b", k, n, e->str, e->len)), 1);
        if (e != NULL) freeReplyObject(e);
        end = dlt_now() + FW_BOUND_MS / 1000.0;
        while (!(fw_zhas(name, FW_Q, r.tok[a]) == 1) && dlt_now() < end) dlt_sleep_ms(5);
        dlt_sleep_ms(700); /* both refresh again: neither adds an entry */
        fw_assert_queue(&r, ba, 2);
        fw_release_in_order(&r, h, b, a);
    }
    fw_end(&r, name);
}

/* A queued waiter whose entry no longer says what it asks (here its
 * delivery is changed by hand; a waiter's own changes when it stops or
 * starts waiting in BLPOP) has the entry rewritten by its refresh, in its
 * place: A stays ahead of B, no second entry is added, and the release
 * tells A the way it listens. */
static void test_changed_entry_rewritten_in_place(void) {
    static const char *name = "fair/rewrite";
    fw_run r;
    int h, a, b, ok = fw_two_queued(&r, name, &h, &a, &b);
    if (ok) {
        char k[600], was[300] = "", now[300] = "", *d = NULL;
        size_t n = fw_key(name, FW_Q, k, sizeof k);
        int q[] = { a, b }, bars = 0;
        double end;
        fw_assert_queue(&r, q, 2);
        fw_qfirst(name, was, sizeof was);
        snprintf(now, sizeof now, "%s", was);
        for (d = now; *d != '\0' && bars < 3; d++) bars += *d == '|';
        CU_ASSERT_TRUE(bars == 3 && (*d == '1' || *d == '2'));
        if (bars == 3) *d = *d == '2' ? '1' : '2';
        {
            redisReply *set = dlt_redis_cmd(&dlt_server, "LSET %b 0 %s", k, n, now);
            CU_ASSERT_TRUE(set != NULL && set->type == REDIS_REPLY_STATUS);
            if (set != NULL) freeReplyObject(set);
        }
        end = dlt_now() + FW_BOUND_MS / 1000.0;
        do {
            dlt_sleep_ms(5);
            fw_qfirst(name, now, sizeof now);
        } while (strcmp(now, was) != 0 && dlt_now() < end);
        CU_ASSERT_STRING_EQUAL(now, was);
        fw_assert_queue(&r, q, 2);
        fw_release_in_order(&r, h, a, b);
    }
    fw_end(&r, name);
}

/* Nobody releases: the holder (lease 1000 ms) and the queue's head D
 * (lease 1000 ms) are both SIGKILLed.  The lock runs out; the next waiter
 * W finds D's registration lapsed, D is dropped from the queue, and W gets
 * the lock: the queue does not wedge on a dead head even without a
 * release to hand it on. */
static void test_dead_holder_and_dead_head(void) {
    static const char *name = "fair/dead-both";
    fw_run r;
    int h, d, w, ok;

    fw_init(&r, name);
    h = fw_new(&r, 1, 1000);
    d = fw_new(&r, 1, 1000);
    w = fw_new(&r, 1, 1000);
    fw_spawn1(&r, h);
    fw_spawn1(&r, d);
    fw_spawn1(&r, w);
    ok = fw_hold(&r, h) && fw_go_queued(&r, d, FW_Q) && fw_go_queued(&r, w, FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        DLT_ASSERT_INT_EQ(fw_kill(&r, d), 128 + SIGKILL);
        DLT_ASSERT_INT_EQ(fw_kill(&r, h), 128 + SIGKILL);
        ok = fw_got(&r, w, 0, 10000);
        DLT_ASSERT_INT_EQ(fw_zhas(name, FW_Q, r.tok[d]), 0);
        CU_ASSERT_TRUE(fw_wait_done(&r, &w, 1, FW_BOUND_MS));
        FW_ORDER(&r, h, w);
    }
    fw_end(&r, name);
}

/* The dead waiter is the head and the lock is handed to it for certain:
 * it is SIGSTOPped, the holder releases (the grant goes to it), then it is
 * SIGKILLed before it can confirm.  The waiter behind gets the lock once
 * the grant (at most 2 s) runs out. */
static void test_dead_waiter_after_grant(void) {
    static const char *name = "fair/dead-granted";
    fw_run r;
    int h, d, w, ok;
    char owner[FW_TOK];

    fw_init(&r, name);
    h = fw_new(&r, 1, 3000);
    d = fw_new(&r, 1, 30000); /* the grant: min(lease, 2 s) */
    w = fw_new(&r, 1, 1000);
    fw_spawn1(&r, h);
    fw_spawn1(&r, d);
    fw_spawn1(&r, w);
    ok = fw_hold(&r, h) && fw_go_queued(&r, d, FW_Q) && fw_go_queued(&r, w, FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        fw_signal(&r, d, SIGSTOP);
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        CU_ASSERT_TRUE(dlt_flag_wait(&fw_w(&r, h)->done, 1, FW_BOUND_MS));
        fw_owner(name, owner, sizeof owner);
        CU_ASSERT_STRING_EQUAL(owner, r.tok[d]); /* handed to the stopped head */
        {
            long long pttl = dlt_key_pttl(name);
            CU_ASSERT_TRUE(pttl > 0 && pttl <= 2000); /* a grant, not a 30 s lease */
        }
        DLT_ASSERT_INT_EQ(fw_kill(&r, d), 128 + SIGKILL);
        ok = fw_got(&r, w, 0, 10000);
        DLT_ASSERT_INT_EQ(fw_zhas(name, FW_Q, r.tok[d]), 0);
        CU_ASSERT_TRUE(fw_wait_done(&r, &w, 1, FW_BOUND_MS));
        FW_ORDER(&r, h, w);
    }
    fw_end(&r, name);
}

/* ========================================================================
 * 4. A waiter that times out withdraws
 * ====================================================================== */

/* Holder; F1, T (timedlock, 3 s), F3, F4 queued in that order.  T returns
 * ETIMEDOUT while the holder still holds; its token is then soon in
 * neither the queue, the writers nor the queue's metadata, and the queue
 * is F1, F3, F4.  After the release they acquire in that order.  Soon:
 * T withdraws within its call's end (deadline + DLOCK__LATE_MS) when the
 * server answers by then, else the orphan list does it right after (see
 * test_timedout_after_grant_passes_on): the test gives it 10 s, a third
 * of the lease after which the registration would merely lapse. */
static void test_timedout_waiter_withdraws(void) {
    static const char *name = "fair/timedout";
    fw_run r;
    int h, f1, t, f3, f4, ok;

    fw_init(&r, name);
    h = fw_new(&r, 1, 0);
    f1 = fw_new(&r, 1, 0);
    t = fw_new(&r, 1, 0);
    f3 = fw_new(&r, 1, 0);
    f4 = fw_new(&r, 1, 0);
    fw_w(&r, t)->mode = FW_TIMED;
    fw_w(&r, t)->timed_ms = 3000;
    fw_w(&r, t)->want = ETIMEDOUT;
    fw_w(&r, t)->linger = 1; /* alive after its call, as a program goes on: a withdrawal left to its
                              * renewal thread is not cut off by the worker's _exit */
    fw_spawn1(&r, h);
    fw_spawn1(&r, f1);
    fw_spawn1(&r, t);
    fw_spawn1(&r, f3);
    fw_spawn1(&r, f4);
    ok = fw_hold(&r, h) && fw_go_queued(&r, f1, FW_Q) && fw_go_queued(&r, t, FW_Q) &&
         fw_go_queued(&r, f3, FW_Q) && fw_go_queued(&r, f4, FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        ok = dlt_flag_wait(&fw_w(&r, t)->got, 1, FW_BOUND_MS);
        CU_ASSERT_TRUE(ok);
    }
    if (ok) {
        int q[] = { f1, f3, f4 };
        DLT_ASSERT_ERR(fw_w(&r, t)->rc, ETIMEDOUT);
        CU_ASSERT_TRUE(fw_withdrawn(name, r.tok[t], 10000));
        DLT_ASSERT_INT_EQ(fw_zhas(name, FW_Q, r.tok[t]), 0);
        DLT_ASSERT_INT_EQ(fw_zhas(name, ":writers", r.tok[t]), 0);
        fw_assert_queue(&r, q, 3);
        DLT_ASSERT_INT_EQ(dlt_flag_get(&r.b->seq), 1); /* nobody else got it */
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        CU_ASSERT_TRUE(fw_wait_done(&r, q, 3, 30000));
        FW_ORDER(&r, h, f1, f3, f4);
    }
    fw_end(&r, name);
}

/* A timed waiter at the head is handed the lock while it cannot run
 * (SIGSTOP) and its deadline passes; continued, it returns ETIMEDOUT, and
 * the grant is released and passed on: it is out of the queue and the
 * writers, the lock is soon no longer its own, and the waiter behind it
 * gets the lock.  Soon, not by its return: continued past its call's end
 * (deadline + DLOCK__LATE_MS), its withdrawal waits for the server's
 * answer only until that end, i.e. 1 ms, and an answer slower than that
 * (a loaded host) leaves the withdrawal to the orphan list, which the
 * renewal thread works through at once (docs/design.md, "a withdrawal
 * that cannot be made by then").  So the test gives the grant 10 s to
 * move -- a third of the 30 s lease, after which it would merely have
 * lapsed. */
static void test_timedout_after_grant_passes_on(void) {
    static const char *name = "fair/timedout-granted";
    fw_run r;
    int h, t, f, ok;
    char owner[FW_TOK];

    fw_init(&r, name);
    h = fw_new(&r, 1, 30000);
    t = fw_new(&r, 1, 30000);
    f = fw_new(&r, 1, 30000);
    fw_w(&r, t)->mode = FW_TIMED;
    fw_w(&r, t)->timed_ms = 2000;
    fw_w(&r, t)->want = ETIMEDOUT;
    fw_w(&r, t)->linger = 1; /* as in test_timedout_waiter_withdraws */
    fw_spawn1(&r, h);
    fw_spawn1(&r, t);
    fw_spawn1(&r, f);
    ok = fw_hold(&r, h) && fw_go_queued(&r, t, FW_Q) && fw_go_queued(&r, f, FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        fw_signal(&r, t, SIGSTOP);
        /* Past T's deadline (its clock: from its go). */
        while (dlt_now() < fw_w(&r, t)->t_go + 2.3) dlt_sleep_ms(10);
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        CU_ASSERT_TRUE(dlt_flag_wait(&fw_w(&r, h)->done, 1, FW_BOUND_MS));
        fw_owner(name, owner, sizeof owner);
        CU_ASSERT_STRING_EQUAL(owner, r.tok[t]); /* handed to the stopped T */
        fw_signal(&r, t, SIGCONT);
        ok = dlt_flag_wait(&fw_w(&r, t)->got, 1, FW_BOUND_MS);
        CU_ASSERT_TRUE(ok);
    }
    if (ok) {
        DLT_ASSERT_ERR(fw_w(&r, t)->rc, ETIMEDOUT);
        CU_ASSERT_TRUE(fw_owner_leaves(name, r.tok[t], 10000, owner, sizeof owner));
        DLT_ASSERT_INT_EQ(fw_zhas(name, FW_Q, r.tok[t]), 0);
        DLT_ASSERT_INT_EQ(fw_zhas(name, ":writers", r.tok[t]), 0);
        ok = fw_got(&r, f, 0, 10000);
        CU_ASSERT_TRUE(fw_wait_done(&r, &f, 1, FW_BOUND_MS));
        FW_ORDER(&r, h, f);
    }
    fw_end(&r, name);
}

/* ========================================================================
 * 5. No barging
 * ====================================================================== */

/* The lock is free but its queue has a live waiter: the holder was
 * SIGKILLed (its lease ran out) while the queue's head W was stopped, so
 * W has not asked for it yet.  Nobody else takes it: trylock from other
 * processes, fair and not, is EBUSY, a non-fair timedlock times out, and a
 * read lock (of a rwlock opened with the fair attribute) is EBUSY too: W is
 * a waiting writer; the lock stays free.  A fair waiter F and then a
 * non-fair lock() N arrive; W is continued: W, F, N acquire in that order.
 * Then, with the queue empty, the reader gets its read lock. */
static void test_no_barging_free_lock(void) {
    static const char *name = "fair/nobarge";
    fw_run r;
    int h, w, f, n, try_fair, try_plain, timed_plain, rd_busy, rd_after, ok;

    fw_init(&r, name);
    h = fw_new(&r, 1, 1000);
    w = fw_new(&r, 1, 30000);
    f = fw_new(&r, 1, 0);
    n = fw_new(&r, 0, 0);
    try_fair = fw_new(&r, 1, 0);
    try_plain = fw_new(&r, 0, 0);
    timed_plain = fw_new(&r, 0, 0);
    rd_busy = fw_new(&r, 1, 0);
    rd_after = fw_new(&r, 1, 0);
    fw_w(&r, rd_busy)->mode = fw_w(&r, rd_after)->mode = FW_TRYRD;
    fw_w(&r, rd_busy)->want = EBUSY;
    fw_w(&r, try_fair)->mode = FW_TRY;
    fw_w(&r, try_fair)->want = EBUSY;
    fw_w(&r, try_plain)->mode = FW_TRY;
    fw_w(&r, try_plain)->want = EBUSY;
    fw_w(&r, timed_plain)->mode = FW_TIMED;
    fw_w(&r, timed_plain)->timed_ms = 1000;
    fw_w(&r, timed_plain)->want = ETIMEDOUT;
    fw_spawn1(&r, h);
    fw_spawn1(&r, w);
    fw_spawn1(&r, f);
    fw_spawn1(&r, n);
    fw_spawn1(&r, try_fair);
    fw_spawn1(&r, try_plain);
    fw_spawn1(&r, timed_plain);
    fw_spawn1(&r, rd_busy);
    fw_spawn1(&r, rd_after);

    ok = fw_hold(&r, h) && fw_go_queued(&r, w, FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        double end;
        fw_signal(&r, w, SIGSTOP);
        DLT_ASSERT_INT_EQ(fw_kill(&r, h), 128 + SIGKILL);
        end = dlt_now() + 10.0;
        while (dlt_key_exists(name) != 0 && dlt_now() < end) dlt_sleep_ms(10);
        ok = dlt_key_exists(name) == 0;
        CU_ASSERT_TRUE(ok); /* the dead holder's lease ran out */
    }
    if (ok) {
        /* Free, with a live waiter queued. */
        DLT_ASSERT_INT_EQ(fw_zhas(name, FW_Q, r.tok[w]), 1);
        CU_ASSERT_TRUE(fw_go_got(&r, try_fair));
        DLT_ASSERT_ERR(fw_w(&r, try_fair)->rc, EBUSY);
        CU_ASSERT_TRUE(fw_go_got(&r, try_plain));
        DLT_ASSERT_ERR(fw_w(&r, try_plain)->rc, EBUSY);
        CU_ASSERT_TRUE(fw_go_got(&r, timed_plain));
        DLT_ASSERT_ERR(fw_w(&r, timed_plain)->rc, ETIMEDOUT);
        CU_ASSERT_TRUE(fw_go_got(&r, rd_busy));
        DLT_ASSERT_ERR(fw_w(&r, rd_busy)->rc, EBUSY);
        DLT_ASSERT_INT_EQ(fw_exists(name, ":readers"), 0);
        DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0); /* still free: nobody barged */
        DLT_ASSERT_INT_EQ(dlt_flag_get(&r.b->seq), 1);
        /* F queues behind W; N, not fair, queues behind F (a default
         * mutex waits in the same queue: the release hands it over). */
        ok = fw_go_queued(&r, f, FW_Q) && fw_go_queued(&r, n, FW_Q);
        CU_ASSERT_TRUE(ok);
    }
    if (ok) {
        int q[] = { w, f, n };
        int want[] = { h, w, f, n };
        fw_assert_queue(&r, q, 3);
        fw_signal(&r, w, SIGCONT);
        CU_ASSERT_TRUE(fw_wait_done(&r, q, 2, 30000));
        CU_ASSERT_TRUE(fw_wait_done(&r, &n, 1, 30000));
        fw_assert_order(&r, want, 4);
        DLT_ASSERT_ERR(fw_w(&r, w)->rc, 0);
        DLT_ASSERT_ERR(fw_w(&r, f)->rc, 0);
        DLT_ASSERT_ERR(fw_w(&r, n)->rc, 0);
        /* Queue empty, lock free: the read lock is granted, and a shared
         * hold takes no ticket. */
        CU_ASSERT_TRUE(fw_go_got(&r, rd_after));
        DLT_ASSERT_ERR(fw_w(&r, rd_after)->rc, 0);
        CU_ASSERT_TRUE(fw_wait_done(&r, &rd_after, 1, FW_BOUND_MS));
    }
    fw_signal(&r, w, SIGCONT);
    fw_end(&r, name);
}

/* A holder holds; fair F1, F2, F3 queue; then a non-fair lock() N starts
 * (it queues too, behind them).  After the release N acquires only after
 * all of them; trylock from another process, fair or not, is
 * EBUSY in between (while the queue is not empty). */
static void test_nonfair_waits_behind_queue(void) {
    static const char *name = "fair/nonfair-behind";
    fw_run r;
    int h, fs[3], n, k, ok;

    fw_init(&r, name);
    h = fw_new(&r, 1, 0);
    for (k = 0; k < 3; k++) {
        fs[k] = fw_new(&r, 1, 0);
        fw_w(&r, fs[k])->hold_ms = 20;
    }
    n = fw_new(&r, 0, 0);
    fw_spawn1(&r, h);
    for (k = 0; k < 3; k++) fw_spawn1(&r, fs[k]);
    fw_spawn1(&r, n);
    ok = fw_hold(&r, h);
    for (k = 0; ok && k < 3; k++) ok = fw_go_queued(&r, fs[k], FW_Q);
    if (ok) ok = fw_go_queued(&r, n, FW_Q);
    CU_ASSERT_TRUE(ok);
    if (ok) {
        int want[] = { h, fs[0], fs[1], fs[2], n };
        int q[] = { fs[0], fs[1], fs[2], n };
        fw_assert_queue(&r, q, 4); /* N took the ticket after theirs */
        DLT_ASSERT_INT_EQ(fw_zcard(name, ":writers"), 4);
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        CU_ASSERT_TRUE(fw_wait_done(&r, fs, 3, 30000));
        CU_ASSERT_TRUE(fw_wait_done(&r, &n, 1, 30000));
        fw_assert_order(&r, want, 5);
        DLT_ASSERT_ERR(fw_w(&r, n)->rc, 0);
    }
    fw_end(&r, name);
}

/* ========================================================================
 * 6. Robust and fair
 * ====================================================================== */

/* The holder H, then W1 and W2 queued behind it (fair, each with lease
 * ms): W1 robust, to get EOWNERDEAD, make the lock consistent and hold it
 * hold_ms; H and W2 robust when all is set.  1, or 0 (asserted). */
static int fw_robust_three(fw_run *r, const char *name, unsigned lease, int all, int hold_ms, int *h, int *w1,
                           int *w2) {
    int ok;
    fw_init(r, name);
    *h = fw_new(r, 1, lease);
    *w1 = fw_new(r, 1, lease);
    *w2 = fw_new(r, 1, lease);
    fw_w(r, *h)->robust = fw_w(r, *w2)->robust = all;
    fw_w(r, *w1)->robust = 1;
    fw_w(r, *w1)->want = EOWNERDEAD;
    fw_w(r, *w1)->consistent = 1;
    fw_w(r, *w1)->hold_ms = hold_ms;
    fw_spawn1(r, *h);
    fw_spawn1(r, *w1);
    fw_spawn1(r, *w2);
    ok = fw_hold(r, *h) && fw_go_queued(r, *w1, FW_Q) && fw_go_queued(r, *w2, FW_Q);
    CU_ASSERT_TRUE(ok);
    return ok;
}

/* The end of fw_robust_three's run: W1 made the lock consistent and
 * released it cleanly, so no owner-died marker is left, nor a queue. */
static void fw_robust_end(fw_run *r, const char *name) {
    DLT_ASSERT_INT_EQ(fw_finish(r), 0);
    DLT_ASSERT_INT_EQ(fw_exists(name, ":state"), 0);
    DLT_ASSERT_INT_EQ(fw_exists(name, FW_Q), 0);
    fw_free(r);
}

/* A robust fair holder (lease 1000 ms) is SIGKILLed with W1 and W2 queued:
 * W1, the head, gets EOWNERDEAD once the lease runs out, makes the lock
 * consistent and unlocks; W2 then gets 0.  Fences increase. */
static void test_robust_fair_holder_killed(void) {
    static const char *name = "fair/robust";
    fw_run r;
    int h, w1, w2, ok = fw_robust_three(&r, name, 1000, 1, 20, &h, &w1, &w2);
    if (ok) {
        int q[] = { w1, w2 };
        int want[] = { h, w1, w2 };
        DLT_ASSERT_INT_EQ(fw_kill(&r, h), 128 + SIGKILL);
        ok = fw_got(&r, w1, EOWNERDEAD, 10000);
        CU_ASSERT_TRUE(fw_wait_done(&r, q, 2, 10000));
        DLT_ASSERT_ERR(fw_w(&r, w1)->cons_rc, 0);
        DLT_ASSERT_ERR(fw_w(&r, w1)->unlock_rc, 0);
        DLT_ASSERT_ERR(fw_w(&r, w2)->rc, 0);
        DLT_ASSERT_ERR(fw_w(&r, w2)->unlock_rc, 0);
        fw_assert_order(&r, want, 3);
        CU_ASSERT_TRUE(fw_w(&r, w1)->fence > fw_w(&r, h)->fence);
        CU_ASSERT_TRUE(fw_w(&r, w2)->fence > fw_w(&r, w1)->fence);
    }
    fw_robust_end(&r, name);
}

/* Robustness mixed on one name: the owner-died marker is left by a robust
 * holder that died (set here by hand), a holder H that is not robust
 * takes the lock all the same (it never reads the marker), and the
 * robust W1, then W2, which is not, queue behind it.  H's release must
 * not grant W1 the lock as if nothing had happened: W1 gets EOWNERDEAD
 * from its own acquire, woken by the release, not a lease later (a release
 * asks for the marker only when the head it pops is robust, and puts that
 * head back in its place); W2 keeps its place behind W1 and is granted
 * the lock at W1's clean unlock, which clears the marker. */
static void test_plain_release_leaves_marker_to_robust_head(void) {
    static const char *name = "fair/robust-mixed";
    char k[600];
    size_t n = fw_key(name, ":state", k, sizeof k);
    redisReply *set = dlt_redis_cmd(&dlt_server, "SET %b held", k, n);
    fw_run r;
    int h, w1, w2, ok;

    CU_ASSERT_FATAL(set != NULL && set->type == REDIS_REPLY_STATUS);
    freeReplyObject(set);
    ok = fw_robust_three(&r, name, 10000, 0, 5, &h, &w1, &w2);
    if (ok) {
        int q[] = { w1, w2 };
        int want[] = { h, w1, w2 };
        double t0 = dlt_now();
        dlt_flag_set(&fw_w(&r, h)->release, 1);
        CU_ASSERT_TRUE(fw_wait_done(&r, q, 2, FW_BOUND_MS));
        DLT_ASSERT_ERR(fw_w(&r, h)->unlock_rc, 0);
        DLT_ASSERT_ERR(fw_w(&r, w1)->rc, EOWNERDEAD);
        CU_ASSERT_TRUE(fw_w(&r, w1)->t_got - t0 < 5.0);
        DLT_ASSERT_ERR(fw_w(&r, w1)->cons_rc, 0);
        DLT_ASSERT_ERR(fw_w(&r, w2)->rc, 0);
        fw_assert_order(&r, want, 3);
    }
    fw_robust_end(&r, name);
}

/* ========================================================================
 * 7. Contention
 * ====================================================================== */

#define CT_PROCS 4
#define CT_ITERS 50

typedef struct ct_board {
    int inside, violations, seq;
    int count[CT_PROCS];
    int who[CT_PROCS * CT_ITERS];
    unsigned long long fence[CT_PROCS * CT_ITERS];
    int fail_rc[CT_PROCS];
} ct_board;

typedef struct ct_arg {
    ct_board *b;
    int id;
} ct_arg;

static int ct_main(void *p) {
    ct_arg *a = p;
    ct_board *b = a->b;
    dlock_mutex_t m;
    int i;
    DLT_CK(fw_open(&m, "fair/contention", 1, 0, 0), 0);
    for (i = 0; i < CT_ITERS; i++) {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 60000);
        int rc = dlock_mutex_timedlock(&m, &ts), s;
        if (rc != 0) {
            b->fail_rc[a->id] = rc;
            DLT_CK(rc, 0);
        }
        if (dlt_flag_add(&b->inside, 1) != 1) dlt_flag_add(&b->violations, 1);
        s = dlt_flag_add(&b->seq, 1);
        if (s >= 1 && s <= CT_PROCS * CT_ITERS) {
            b->who[s - 1] = a->id;
            b->fence[s - 1] = dlock_mutex_fence(&m);
        }
        dlt_flag_add(&b->count[a->id], 1);
        dlt_sleep_ms(1);
        dlt_flag_add(&b->inside, -1);
        DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    DLT_CK(dlock_mutex_destroy(&m), 0);
    return 0;
}

/* 4 processes x 50 lock / hold 1 ms / unlock on one fair mutex: no two
 * are ever inside at once, every acquisition's fence is newer than the
 * one before, all complete, and each process acquired (no starvation). */
static void test_contention(void) {
    ct_board *b = DLT_SHM_NEW(ct_board, 1);
    ct_arg *args = DLT_SHM_NEW(ct_arg, CT_PROCS);
    pid_t pid[CT_PROCS];
    int i, st, increasing = 1, streak = 1, longest = 1;

    for (i = 0; i < CT_PROCS; i++) {
        args[i].b = b;
        args[i].id = i;
        pid[i] = dlt_spawn(ct_main, &args[i]);
        CU_ASSERT_TRUE(pid[i] > 0);
    }
    for (i = 0; i < CT_PROCS; i++) {
        st = dlt_wait(pid[i], 180000);
        if (st != 0) fprintf(stderr, "  contender %d exited with %d (lock rc %d)\n", i, st, b->fail_rc[i]);
        DLT_ASSERT_INT_EQ(st, 0);
    }
    DLT_ASSERT_INT_EQ(b->violations, 0);
    DLT_ASSERT_INT_EQ(b->seq, CT_PROCS * CT_ITERS);
    for (i = 0; i < CT_PROCS; i++) {
        CU_ASSERT_TRUE(b->count[i] >= 1);
        DLT_ASSERT_INT_EQ(b->count[i], CT_ITERS);
    }
    for (i = 1; i < b->seq && i < CT_PROCS * CT_ITERS; i++) {
        if (b->fence[i] <= b->fence[i - 1]) increasing = 0;
        streak = b->who[i] == b->who[i - 1] ? streak + 1 : 1;
        if (streak > longest) longest = streak;
    }
    CU_ASSERT_TRUE(increasing);
    printf("  %d acquisitions; the longest run by one process: %d\n", b->seq, longest);
    DLT_ASSERT_INT_EQ(fw_exists("fair/contention", FW_Q), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fair/contention"), 0);
    DLT_SHM_FREE(b, 1);
    DLT_SHM_FREE(args, CT_PROCS);
}

/* ========================================================================
 * Suite
 * ====================================================================== */

static const struct dlt_test tests[] = {
    DLT_TEST(test_attr_setfair_getfair),
    DLT_TEST(test_uncontended_fair),
    DLT_TEST(test_order_processes),
    DLT_TEST(test_order_threads),
    DLT_TEST(test_order_threads_default),
    DLT_TEST(test_order_mixed),
    DLT_TEST(test_order_threads_wait_conns),
    DLT_TEST(test_release_wakes_only_head),
    DLT_TEST(test_grant_taken_from_message),
    DLT_TEST(test_stale_grant_not_taken),
    DLT_TEST(test_dead_waiter_released_at_once),
    DLT_TEST(test_dead_waiter_lapsed),
    DLT_TEST(test_unqueued_waiter_joins_at_refresh),
    DLT_TEST(test_changed_entry_rewritten_in_place),
    DLT_TEST(test_dead_holder_and_dead_head),
    DLT_TEST(test_dead_waiter_after_grant),
    DLT_TEST(test_timedout_waiter_withdraws),
    DLT_TEST(test_timedout_after_grant_passes_on),
    DLT_TEST(test_no_barging_free_lock),
    DLT_TEST(test_nonfair_waits_behind_queue),
    DLT_TEST(test_robust_fair_holder_killed),
    DLT_TEST(test_plain_release_leaves_marker_to_robust_head),
    DLT_TEST(test_contention),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "fair", tests);
}
