/* labels: unit; timeout: 60 */
/* test_core_unit.c -- the lock core without a server: the acquisition
 * state machine's steps (src/core/lock.c: mine, queue, cached, local,
 * ready, ask, hold, busy, sleep, grant, out), the transitions of a hold
 * (held, cached, taken from the cache, releasing, lost) and the error
 * paths, against the scripted in-memory server of fake_backend.c.  Each
 * test counts the requests the core makes ("a try makes one request", "a
 * recursive relock makes none").  No redis-server, no socket: the whole
 * file runs in well under a second.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include "fake_backend.h"
#include "fixture.h"

/* Another owner's token (another process, as the server sees it). */
#define OTHER "0123456789abcdef0123456789abcdef"

static dlock_client_t *C; /* each test's client, on the fake */

static void begin(int queues) {
    fk_reset(queues);
    CU_ASSERT_FATAL(fk_client_new(&C, 50, 0) == 0);
}

/* Every hold is gone and every object destroyed, or destroy says EBUSY. */
static void finish(void) {
    DLT_ASSERT_ERR(fk_client_free(C), 0);
    C = NULL;
}

enum { ROBUST = 1, CACHING = 2 };

static void mk(dlock_mutex_t *m, const char *name, int type, unsigned lease, int opts) {
    dlock_mutexattr_t a;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_settype(&a, type);
    dlock_mutexattr_setlease(&a, lease);
    if (opts & ROBUST) dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST);
    if (opts & CACHING) dlock_mutexattr_setcaching(&a, 1);
    dlock_mutexattr_setclient(&a, C);
    CU_ASSERT_FATAL(dlock_mutex_init(m, name, &a) == 0);
    dlock_mutexattr_destroy(&a);
}

/* A drift margin of 50 ms: a 100 ms lease is valid for 50 ms after its
 * request went out (the margin is at most half the lease), so an answer
 * 60 ms late comes after the hold's validity. */
static void short_validity(void) {
    pthread_mutex_lock(&C->mu);
    C->be.node.conf.drift_ms = 50;
    pthread_mutex_unlock(&C->mu);
}

static long long now_ms(void) {
    return (long long)(dlock__now() / DLOCK__MS);
}

/* Polls cond (a count reaching n) for up to 2 s. */
static int wait_count(int op, int n) {
    long long end = now_ms() + 2000;
    while (fk_count(op) < n && now_ms() < end) usleep(500);
    return fk_count(op) >= n;
}

/* c's entry of name, c->mu NOT held; the lock's fields read under it. */
static dlock__lock *entry(const char *name) {
    dlock__lock *l;
    pthread_mutex_lock(&C->mu);
    l = dlock__lock_find(C, name, strlen(name), DLOCK__KIND_LOCK);
    pthread_mutex_unlock(&C->mu);
    return l;
}

static int has_orphans(void) {
    int o;
    pthread_mutex_lock(&C->mu);
    o = C->orphans != NULL;
    pthread_mutex_unlock(&C->mu);
    return o;
}

/* A lock call on another thread: what it got, its fence; it keeps the
 * lock linger_ms (its exit forgets a hold still held), then unlocks it
 * (urc) when `unlock`. */
typedef struct job {
    dlock_mutex_t *m;
    int try, unlock, linger_ms;
    int rc, urc;
    uint64_t fence;
    int locked, done;
    pthread_t th;
} job;

static void *job_main(void *arg) {
    job *j = arg;
    j->rc = j->try ? dlock_mutex_trylock(j->m) : dlock_mutex_lock(j->m);
    if (j->rc == 0) j->fence = dlock_mutex_fence(j->m);
    __atomic_store_n(&j->locked, 1, __ATOMIC_SEQ_CST);
    if (j->linger_ms > 0) usleep((useconds_t)j->linger_ms * 1000);
    if (j->rc == 0 && j->unlock) j->urc = dlock_mutex_unlock(j->m);
    __atomic_store_n(&j->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void job_start_linger(job *j, dlock_mutex_t *m, int try, int unlock, int linger_ms) {
    memset(j, 0, sizeof *j);
    j->m = m;
    j->try = try;
    j->unlock = unlock;
    j->linger_ms = linger_ms;
    CU_ASSERT_FATAL(pthread_create(&j->th, NULL, job_main, j) == 0);
}

static void job_start(job *j, dlock_mutex_t *m, int try, int unlock) {
    job_start_linger(j, m, try, unlock, 0);
}

static int job_done(job *j) {
    return __atomic_load_n(&j->done, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------- mine/recursion */

/* A try on a free lock: one request, no waiting flag; unlock: one release. */
static void test_try_one_request(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "try1", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_INT_EQ(fk_last_flags() & (DLOCK__F_WAIT | DLOCK__F_FAIR), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&m), fk_fence("try1"));
    DLT_ASSERT_INT_EQ(fk_owner("try1", NULL), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_INT_EQ(fk_last_how(), DLOCK__REL_PLAIN);
    DLT_ASSERT_INT_EQ(fk_owner("try1", NULL), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* A recursive relock makes no request; only the last unlock releases. */
static void test_recursive_relock_no_request(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "rec", DLOCK_MUTEX_RECURSIVE, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* The recursion limit: EAGAIN, still no request. */
static void test_recursion_limit_eagain(void) {
    dlock_mutex_t m;
    dlock__lock *l;
    begin(1);
    mk(&m, "recmax", DLOCK_MUTEX_RECURSIVE, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    l = entry("recmax");
    pthread_mutex_lock(&C->mu);
    l->x.count = DLOCK_RECURSIVE_MAX;
    pthread_mutex_unlock(&C->mu);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EAGAIN);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    pthread_mutex_lock(&C->mu);
    l->x.count = 1;
    pthread_mutex_unlock(&C->mu);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* ERRORCHECK relock: EDEADLK without a request; a try by the holder: EBUSY. */
static void test_errorcheck_edeadlk_no_request(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "ec", DLOCK_MUTEX_ERRORCHECK, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EDEADLK);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* NORMAL relock deadlocks as POSIX says, locally (no request), until the
 * deadline. */
static void test_normal_selfdeadlock_local(void) {
    dlock_mutex_t m;
    struct timespec t;
    long long t0;
    begin(1);
    mk(&m, "normal", DLOCK_MUTEX_NORMAL, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    t = dlt_abs_in(CLOCK_MONOTONIC, 30);
    t0 = now_ms();
    DLT_ASSERT_ERR(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    CU_ASSERT(now_ms() - t0 >= 25);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* Read holds: a reader read-locks again with no request; a write request
 * by a reader is EDEADLK (no upgrade), its try EBUSY; one shared release. */
static void test_rwlock_read_recursion(void) {
    dlock_rwlock_t rw;
    dlock_mutexattr_t a;
    begin(1);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, C);
    CU_ASSERT_FATAL(dlock_rwlock_init(&rw, "rw", &a) == 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_INT_EQ(fk_last_flags() & DLOCK__F_SHARED, DLOCK__F_SHARED);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rw), EDEADLK);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&rw), EBUSY);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_INT_EQ(dlock_rwlock_holds(&rw), 1);
    DLT_ASSERT_INT_EQ(fk_other_acquire("rw", OTHER, 10000, 0, 0), EBUSY); /* a writer elsewhere waits */
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_INT_EQ(fk_last_how(), DLOCK__REL_SHARED);
    DLT_ASSERT_INT_EQ(fk_other_acquire("rw", OTHER, 10000, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    dlock_mutexattr_destroy(&a);
    finish();
}

/* -------------------------------------------------------- local holder */

/* Another thread of the process holds it: its try is EBUSY, no request. */
static void test_local_holder_try_ebusy(void) {
    dlock_mutex_t m;
    job j;
    begin(1);
    mk(&m, "local", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    job_start(&j, &m, 1, 0);
    pthread_join(j.th, NULL);
    DLT_ASSERT_ERR(j.rc, EBUSY);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* No server queue (Redlock's case): a waiter waits locally for the
 * holder thread's unlock, asking nothing meanwhile, then asks once. */
static void test_local_holder_waits_locally(void) {
    dlock_mutex_t m;
    job j;
    begin(0);
    mk(&m, "localw", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    job_start(&j, &m, 0, 1);
    usleep(20000);
    DLT_ASSERT_INT_EQ(job_done(&j), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    pthread_join(j.th, NULL);
    DLT_ASSERT_ERR(j.rc, 0);
    DLT_ASSERT_ERR(j.urc, 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 2);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 2);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* --------------------------------------------------------- ask, errors */

/* The server unreachable: ENOLCK once the unreachable bound (50 ms) is
 * out, after one request that never went out (no orphan). */
static void test_enolck_within_bound(void) {
    dlock_mutex_t m;
    long long t0;
    begin(1);
    mk(&m, "unreach", DLOCK_MUTEX_DEFAULT, 10000, 0);
    fk_script(FK_ACQUIRE, FK_ENOLCK, 1);
    t0 = now_ms();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    CU_ASSERT(now_ms() - t0 >= 40);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_INT_EQ(has_orphans(), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* A deadline before the unreachable bound: ETIMEDOUT at the deadline. */
static void test_unreachable_deadline_etimedout(void) {
    dlock_mutex_t m;
    struct timespec t;
    begin(1);
    mk(&m, "unreachd", DLOCK_MUTEX_DEFAULT, 10000, 0);
    fk_script(FK_ACQUIRE, FK_ENOLCK, 1);
    t = dlt_abs_in(CLOCK_MONOTONIC, 15);
    DLT_ASSERT_ERR(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    CU_ASSERT(strstr(dlock_last_error(), "unreachable") != NULL);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* A call that waited out the whole bound opens the breaker: the next
 * calls fail with ENOLCK at once, without a request. */
static void test_breaker_open_no_request(void) {
    dlock_client_t *b;
    dlock_mutex_t m;
    dlock_mutexattr_t a;
    long long t0;
    begin(1);
    CU_ASSERT_FATAL(fk_client_new(&b, 50, 5000) == 0);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, b);
    CU_ASSERT_FATAL(dlock_mutex_init(&m, "breaker", &a) == 0);
    fk_script(FK_ACQUIRE, FK_ENOLCK, 1);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    t0 = now_ms();
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOLCK);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    CU_ASSERT(now_ms() - t0 < 40);
    CU_ASSERT(strstr(dlock_last_error(), "circuit breaker") != NULL);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_ERR(fk_client_free(b), 0);
    finish();
}

/* The answer lost after the server took the lock: ENOLCK, and the token
 * is an orphan, released in the background; the lock is free again. */
static void test_outcome_unknown_orphan(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "unknown", DLOCK_MUTEX_DEFAULT, 10000, 0);
    fk_script(FK_ACQUIRE, FK_UNKNOWN, 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOLCK);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    CU_ASSERT(wait_count(FK_RELEASE, 1));
    DLT_ASSERT_INT_EQ(fk_owner("unknown", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* A bad abstime: EINVAL only if the call would have to wait -- a free
 * lock is acquired; a busy one is asked once, not as a waiter. */
static void test_bad_deadline_einval(void) {
    dlock_mutex_t m;
    struct timespec bad = { 1, 2000000000L };
    begin(1);
    mk(&m, "einval", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &bad), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("einval", OTHER, 10000, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &bad), EINVAL);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 2);
    DLT_ASSERT_INT_EQ(fk_last_flags() & DLOCK__F_WAIT, 0);
    DLT_ASSERT_INT_EQ(fk_queued("einval"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* ---------------------------------------------------------------- busy */

/* Busy: a try is EBUSY after one request that registers nothing; so is
 * an answer "held back". */
static void test_try_busy_ebusy(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "busy", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("busy", OTHER, 10000, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_INT_EQ(fk_last_flags() & DLOCK__F_WAIT, 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 0); /* nothing to withdraw */
    DLT_ASSERT_INT_EQ(fk_other_release("busy", OTHER, DLOCK__REL_PLAIN), 0);
    fk_script(FK_ACQUIRE, FK_HELDBACK, 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 2);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* Busy until the deadline: the call becomes a waiter (asks again once
 * subscribed, then sleeps in the server's queue), times out, and takes
 * its registration back (a withdrawal), leaving the queue empty. */
static void test_timedlock_busy_withdraws(void) {
    dlock_mutex_t m;
    struct timespec t;
    begin(1);
    mk(&m, "tbusy", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("tbusy", OTHER, 10000, 0, 0), 0);
    t = dlt_abs_in(CLOCK_MONOTONIC, 30);
    DLT_ASSERT_ERR(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 2);
    DLT_ASSERT_INT_EQ(fk_last_flags() & (DLOCK__F_WAIT | DLOCK__F_FAIR), DLOCK__F_WAIT | DLOCK__F_FAIR);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_INT_EQ(fk_last_how(), DLOCK__REL_WITHDRAW);
    DLT_ASSERT_INT_EQ(fk_queued("tbusy"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* --------------------------------------------------------------- sleep */

/* Busy with a short lease left: the waiter sleeps until it runs out and
 * then gets the lock (the holder never released it). */
static void test_sleep_until_lease_ends(void) {
    dlock_mutex_t m;
    long long t0;
    begin(1);
    mk(&m, "expire", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("expire", OTHER, 40, 0, 0), 0);
    t0 = now_ms();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT(now_ms() - t0 >= 30);
    CU_ASSERT(fk_count(FK_ACQUIRE) >= 3); /* busy, busy (subscribed), acquired */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* No server queue: the release's notification wakes the sleeping waiter,
 * which asks again at once (long before the holder's lease is out). */
static void test_sleep_woken_by_release(void) {
    dlock_mutex_t m;
    job j;
    begin(0);
    mk(&m, "wake", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("wake", OTHER, 10000, 0, 0), 0);
    job_start(&j, &m, 0, 1);
    CU_ASSERT(wait_count(FK_ACQUIRE, 2));
    usleep(10000);
    DLT_ASSERT_INT_EQ(job_done(&j), 0);
    DLT_ASSERT_INT_EQ(fk_other_release("wake", OTHER, DLOCK__REL_PLAIN), 0);
    pthread_join(j.th, NULL);
    DLT_ASSERT_ERR(j.rc, 0);
    DLT_ASSERT_ERR(j.urc, 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 3);
    DLT_ASSERT_INT_EQ(fk_last_flags() & DLOCK__F_FAIR, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* --------------------------------------------------------------- grant */

/* A release hands the lock to the queue's head: the waiter takes it from
 * the grant message, with its fence, and no request of its own. */
static void test_grant_taken_from_message(void) {
    dlock_mutex_t m;
    job j;
    begin(1);
    mk(&m, "grant", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("grant", OTHER, 10000, 0, 0), 0);
    job_start(&j, &m, 0, 1);
    CU_ASSERT(wait_count(FK_ACQUIRE, 2));
    usleep(10000);
    DLT_ASSERT_INT_EQ(fk_queued("grant"), 1);
    DLT_ASSERT_INT_EQ(fk_other_release("grant", OTHER, DLOCK__REL_PLAIN), 0);
    pthread_join(j.th, NULL);
    DLT_ASSERT_ERR(j.rc, 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 2); /* none after the grant */
    DLT_ASSERT_INT_EQ(j.fence, fk_fence("grant")); /* the grant's, the last issued */
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1); /* its unlock */
    DLT_ASSERT_INT_EQ(fk_last_how(), DLOCK__REL_HASH); /* a grant is the lock hash */
    DLT_ASSERT_INT_EQ(fk_owner("grant", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* A queued waiter of this process asks the server even while another
 * thread holds the lock; that thread's unlock hands it over (releasing
 * -> the waiter's hold, not lost), and the unlock still succeeds.  The
 * waiter's exit, holding it, forgets the hold (not released: it expires). */
static void test_local_handoff_releasing(void) {
    dlock_mutex_t m;
    dlock__lock *l;
    long long end;
    int ok;
    job j;
    begin(1);
    mk(&m, "handoff", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    job_start_linger(&j, &m, 0, 0, 50);
    CU_ASSERT(wait_count(FK_ACQUIRE, 3));
    usleep(10000);
    DLT_ASSERT_INT_EQ(job_done(&j), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    end = now_ms() + 2000;
    while (!__atomic_load_n(&j.locked, __ATOMIC_SEQ_CST) && now_ms() < end) usleep(500);
    DLT_ASSERT_ERR(j.rc, 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0); /* the other thread's */
    l = entry("handoff");
    pthread_mutex_lock(&C->mu);
    ok = l->x.owner != NULL && dlock__hold_is_live(&l->x) && !dlock__hold_is_releasing(&l->x) && l->x.count == 1;
    pthread_mutex_unlock(&C->mu);
    CU_ASSERT(ok);
    pthread_join(j.th, NULL);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 3);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_INT_EQ(j.fence, fk_fence("handoff")); /* the last issued */
    DLT_ASSERT_INT_EQ(fk_owner("handoff", NULL), 1);
    pthread_mutex_lock(&C->mu);
    ok = l->x.owner == NULL && C->held == NULL;
    pthread_mutex_unlock(&C->mu);
    CU_ASSERT(ok);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* ---------------------------------------------------------------- hold */

/* A robust holder's lease ran out on the server: EOWNERDEAD, held; made
 * consistent, the unlock is a clean one. */
static void test_ownerdead_consistent(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "dead", DLOCK_MUTEX_DEFAULT, 10000, ROBUST);
    DLT_ASSERT_INT_EQ(fk_other_acquire("dead", OTHER, 20, 1, 0), 0);
    usleep(30000);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EOWNERDEAD);
    DLT_ASSERT_INT_EQ(fk_last_flags() & DLOCK__F_ROBUST, DLOCK__F_ROBUST);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_consistent(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_consistent(&m), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_last_how(), DLOCK__REL_CLEAN);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0); /* clean again */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* EOWNERDEAD unlocked without consistent(): inconsistent, and the lock
 * is not recoverable for anyone (one request each, no hold). */
static void test_ownerdead_to_notrecoverable(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "notrec", DLOCK_MUTEX_DEFAULT, 10000, ROBUST);
    DLT_ASSERT_INT_EQ(fk_other_acquire("notrec", OTHER, 10000, 1, 0), 0);
    DLT_ASSERT_INT_EQ(fk_other_release("notrec", OTHER, DLOCK__REL_DEAD), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EOWNERDEAD);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_last_how(), DLOCK__REL_INCONSISTENT);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), ENOTRECOVERABLE);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOTRECOVERABLE);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 3);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("notrec", OTHER, 10000, 1, 0), 0); /* (the fake's own answer: not EBUSY) */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* Scripted answers: OWNERDEAD on a robust mutex; NOTRECOVERABLE. */
static void test_scripted_ownerdead_notrecoverable(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "script", DLOCK_MUTEX_DEFAULT, 10000, ROBUST);
    fk_script(FK_ACQUIRE, FK_OWNERDEAD, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EOWNERDEAD);
    DLT_ASSERT_ERR(dlock_mutex_consistent(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    fk_script(FK_ACQUIRE, FK_NOTRECOVERABLE, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOTRECOVERABLE);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* An answer that came after the hold's validity ran out is never given
 * to the caller: the hold goes back (release of that token), and the
 * call tries again with a fresh token. */
static void test_late_answer_given_back(void) {
    dlock_mutex_t m;
    char first[DLOCK__OWNER_LEN + 1], now[DLOCK__OWNER_LEN + 1];
    begin(1);
    short_validity();
    mk(&m, "late", DLOCK_MUTEX_DEFAULT, 100, 0);
    fk_script(FK_ACQUIRE, FK_DELAY, 60);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 2);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    fk_last_release_token(first);
    CU_ASSERT_FATAL(fk_owner("late", now) == 1);
    CU_ASSERT(strcmp(first, now) != 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* MINE (an earlier attempt of the call got it, its answer lost) begins
 * the hold like ACQUIRED. */
static void test_mine_begins_hold(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "mine", DLOCK_MUTEX_DEFAULT, 10000, 0);
    fk_script(FK_ACQUIRE, FK_MINE, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(&m), fk_fence("mine"));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* Answers that keep coming after the lease ran out: each hold goes back,
 * and after unreachable_ms (50) of them the call gives up with ENOLCK; a
 * timed call gives up at its deadline with ETIMEDOUT. */
static void test_late_answers_keep_coming(void) {
    dlock_mutex_t m;
    struct timespec t;
    int i, n;
    begin(1);
    short_validity();
    mk(&m, "later", DLOCK_MUTEX_DEFAULT, 100, 0);
    for (i = 0; i < 4; i++) fk_script(FK_ACQUIRE, FK_DELAY, 60);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK);
    CU_ASSERT(strstr(dlock_last_error(), "keep coming") != NULL);
    n = fk_count(FK_ACQUIRE);
    CU_ASSERT(n >= 2 && n <= 3);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), n); /* every one given back */
    DLT_ASSERT_INT_EQ(fk_owner("later", NULL), 0);
    fk_reset(1);
    for (i = 0; i < 4; i++) fk_script(FK_ACQUIRE, FK_DELAY, 60);
    t = dlt_abs_in(CLOCK_MONOTONIC, 30);
    DLT_ASSERT_ERR(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    CU_ASSERT(strstr(dlock_last_error(), "after the lease had run out") != NULL);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), fk_count(FK_ACQUIRE));
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

static void *unlock_main(void *arg) {
    dlock_mutex_t *m = arg;
    intptr_t r = dlock_mutex_holds(m) ? dlock_mutex_unlock(m) : -1;
    return (void *)r;
}

/* A process-owned mutex: any thread of the process holds it and may
 * unlock it (one release). */
static void test_process_owned_unlock_by_other_thread(void) {
    dlock_mutex_t m;
    dlock_mutexattr_t a;
    pthread_t th;
    void *r;
    begin(1);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_settype(&a, DLOCK_MUTEX_NORMAL);
    dlock_mutexattr_setowner(&a, DLOCK_OWNER_PROCESS);
    dlock_mutexattr_setclient(&a, C);
    CU_ASSERT_FATAL(dlock_mutex_init(&m, "proc", &a) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, unlock_main, &m) == 0);
    pthread_join(th, &r);
    DLT_ASSERT_ERR((intptr_t)r, 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 1);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_INT_EQ(fk_owner("proc", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlock_mutexattr_destroy(&a);
    finish();
}

static int rd_rc = -1;

static void *rdlock_main(void *arg) {
    dlock_rwlock_t *rw = arg;
    int rc = dlock_rwlock_rdlock(rw);
    if (rc == 0) rc = dlock_rwlock_holds(rw) == 1 ? dlock_rwlock_unlock(rw) : -1;
    __atomic_store_n(&rd_rc, rc, __ATOMIC_SEQ_CST);
    return NULL;
}

/* A reader waiting for a writer elsewhere (never queued: it sleeps on the
 * release channel) asks again when the writer's release is heard. */
static void test_reader_woken_by_writer_release(void) {
    dlock_rwlock_t rw;
    dlock_mutexattr_t a;
    pthread_t th;
    begin(1);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, C);
    CU_ASSERT_FATAL(dlock_rwlock_init(&rw, "rdwake", &a) == 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("rdwake", OTHER, 10000, 0, 0), 0);
    rd_rc = -1;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, rdlock_main, &rw) == 0);
    CU_ASSERT(wait_count(FK_ACQUIRE, 2));
    usleep(10000);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&rd_rc, __ATOMIC_SEQ_CST), -1);
    DLT_ASSERT_INT_EQ(fk_last_flags() & (DLOCK__F_SHARED | DLOCK__F_FAIR), DLOCK__F_SHARED);
    DLT_ASSERT_INT_EQ(fk_other_release("rdwake", OTHER, DLOCK__REL_PLAIN), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(rd_rc, 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 3);
    DLT_ASSERT_INT_EQ(fk_last_how(), DLOCK__REL_SHARED);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    dlock_mutexattr_destroy(&a);
    finish();
}

/* -------------------------------------------------------------- unlock */

/* Unlock by a non-owner: EPERM without a request (never locked; locked
 * by another thread). */
static void test_unlock_not_owner_eperm(void) {
    dlock_mutex_t m;
    job j;
    begin(1);
    mk(&m, "eperm", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    job_start(&j, &m, 0, 0);
    pthread_join(j.th, NULL);
    DLT_ASSERT_ERR(j.rc, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

static int lost_calls, lost_why;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m, (void)name, (void)arg;
    __atomic_store_n(&lost_why, dlock_lost_reason(), __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

/* The renewal refused (the lock is no longer ours there): the hold is
 * lost, its handler told BROKEN; unlock is EPERM without a request. */
static void test_lost_hold_eperm(void) {
    dlock_mutex_t m;
    dlock_mutexattr_t a;
    long long end;
    begin(1);
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setlease(&a, 100);
    dlock_mutexattr_setlostcallback(&a, on_lost, NULL);
    dlock_mutexattr_setclient(&a, C);
    CU_ASSERT_FATAL(dlock_mutex_init(&m, "lost", &a) == 0);
    lost_calls = lost_why = 0;
    fk_renew_refuse(1);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    end = now_ms() + 2000;
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && now_ms() < end) usleep(500);
    DLT_ASSERT_INT_EQ(lost_calls, 1);
    DLT_ASSERT_INT_EQ(lost_why, DLOCK_LOST_BROKEN);
    CU_ASSERT(fk_count(FK_RENEW) >= 1);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlock_mutexattr_destroy(&a);
    finish();
}

/* The server says the hold was not the token's any more: EPERM. */
static void test_unlock_refused_eperm(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "refused", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    fk_script(FK_RELEASE, FK_REFUSE, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    CU_ASSERT(strstr(dlock_last_error(), "run out on the server") != NULL);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_INT_EQ(has_orphans(), 0);
    fk_reset(1); /* (the fake still has the lock: forget it) */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* An unlock that gets no answer: ENOLCK, the hold is gone here, and its
 * token is released later in the background (an orphan). */
static void test_unlock_enolck_orphan(void) {
    dlock_mutex_t m;
    begin(1);
    mk(&m, "uorphan", DLOCK_MUTEX_DEFAULT, 10000, 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    fk_script(FK_RELEASE, FK_ENOLCK, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), ENOLCK);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    CU_ASSERT(wait_count(FK_RELEASE, 2));
    DLT_ASSERT_INT_EQ(fk_owner("uorphan", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* -------------------------------------------------------------- cached */

/* A caching mutex: held -> (unlock) cached, no request -> taken from the
 * cache, no request, the next fence of its block -> asked for by another
 * owner ("wanted"): given back in the background. */
static void test_cache_transitions(void) {
    dlock_mutex_t m;
    dlock__lock *l;
    uint64_t f;
    int cached;
    begin(1);
    mk(&m, "cache", DLOCK_MUTEX_DEFAULT, 10000, CACHING);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_last_flags() & DLOCK__F_CACHING, DLOCK__F_CACHING);
    CU_ASSERT_FATAL(fk_sub_wait(C, "cache", 2000));
    /* acquired before the channel was heard: its unlock cannot keep it */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 2);
    f = dlock_mutex_fence(&m);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1); /* kept */
    l = entry("cache");
    pthread_mutex_lock(&C->mu);
    cached = dlock__hold_is_cached(&l->x) && l->x.owner == NULL;
    pthread_mutex_unlock(&C->mu);
    CU_ASSERT(cached);
    DLT_ASSERT_INT_EQ(fk_owner("cache", NULL), 1);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 2); /* from the cache */
    CU_ASSERT(dlock_mutex_fence(&m) > f); /* the server's clock as this process vouches for it */
    f = dlock_mutex_fence(&m);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(fk_other_acquire("cache", OTHER, 10000, 0, 0), EBUSY);
    CU_ASSERT(wait_count(FK_RELEASE, 2));
    DLT_ASSERT_INT_EQ(fk_other_acquire("cache", OTHER, 10000, 0, 0), 0);
    DLT_ASSERT_INT_EQ(fk_fence("cache") > f, 1); /* after every local fence */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

/* The cache is not used for a call it does not fit (a robust mutex of the
 * same name): it is given up first, then the lock asked for. */
static void test_cache_dropped_for_other_call(void) {
    dlock_mutex_t m, r;
    begin(1);
    mk(&m, "cdrop", DLOCK_MUTEX_DEFAULT, 10000, CACHING);
    mk(&r, "cdrop", DLOCK_MUTEX_DEFAULT, 10000, ROBUST);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_FATAL(fk_sub_wait(C, "cdrop", 2000));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0); /* cached now */
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 1);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&r), 0);
    DLT_ASSERT_INT_EQ(fk_count(FK_RELEASE), 2); /* the cache's */
    DLT_ASSERT_INT_EQ(fk_count(FK_ACQUIRE), 3);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&r), 0);
    DLT_ASSERT_INT_EQ(fk_last_how(), DLOCK__REL_CLEAN);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&r), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    finish();
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_try_one_request),
    DLT_TEST(test_recursive_relock_no_request),
    DLT_TEST(test_recursion_limit_eagain),
    DLT_TEST(test_errorcheck_edeadlk_no_request),
    DLT_TEST(test_normal_selfdeadlock_local),
    DLT_TEST(test_rwlock_read_recursion),
    DLT_TEST(test_local_holder_try_ebusy),
    DLT_TEST(test_local_holder_waits_locally),
    DLT_TEST(test_enolck_within_bound),
    DLT_TEST(test_unreachable_deadline_etimedout),
    DLT_TEST(test_breaker_open_no_request),
    DLT_TEST(test_outcome_unknown_orphan),
    DLT_TEST(test_bad_deadline_einval),
    DLT_TEST(test_try_busy_ebusy),
    DLT_TEST(test_timedlock_busy_withdraws),
    DLT_TEST(test_sleep_until_lease_ends),
    DLT_TEST(test_sleep_woken_by_release),
    DLT_TEST(test_grant_taken_from_message),
    DLT_TEST(test_local_handoff_releasing),
    DLT_TEST(test_ownerdead_consistent),
    DLT_TEST(test_ownerdead_to_notrecoverable),
    DLT_TEST(test_scripted_ownerdead_notrecoverable),
    DLT_TEST(test_late_answer_given_back),
    DLT_TEST(test_mine_begins_hold),
    DLT_TEST(test_late_answers_keep_coming),
    DLT_TEST(test_process_owned_unlock_by_other_thread),
    DLT_TEST(test_reader_woken_by_writer_release),
    DLT_TEST(test_unlock_not_owner_eperm),
    DLT_TEST(test_lost_hold_eperm),
    DLT_TEST(test_unlock_refused_eperm),
    DLT_TEST(test_unlock_enolck_orphan),
    DLT_TEST(test_cache_transitions),
    DLT_TEST(test_cache_dropped_for_other_call),
    { NULL, NULL }
};

/* No server (dlt_main would start one).  `./test_core_unit NAME` runs
 * only the test NAME; 20 s bound the run (a step that loops for ever). */
int main(int argc, char **argv) {
    return dlt_main_unit(argc, argv, "core_unit", tests, 20);
}
