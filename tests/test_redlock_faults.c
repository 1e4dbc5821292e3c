/* labels: redis; timeout: 180 */
/* test_redlock_faults.c -- Redlock keeps the single server's deadline
 * rules with one master paused, and says EOWNERDEAD once per death.
 *
 *  - one of three masters paused (SIGSTOP): a trylock is one attempt of
 *    the reply floor (200 ms) at most, a timedlock on a held lock returns
 *    by its deadline + 50 ms, an unlock returns once a quorum confirmed
 *    the release (well before the command timeout) -- each call decides
 *    once a quorum answered, and the paused master is not waited for
 *    again while it owes an answer;
 *  - resumed, the paused master runs what it was sent in order: the
 *    grants it makes late are released behind them (no key left there,
 *    long before the lease could end it);
 *  - a robust mutex whose holder dies (SIGKILL) while one master is
 *    paused: the next taker gets EOWNERDEAD, marks it consistent and
 *    unlocks; the master resumed keeps the dead holder's marker, which a
 *    quorum no longer shows: the clean lock/unlock cycles after it never
 *    get EOWNERDEAD again;
 *  - the first master paused (where a call that asked the masters in
 *    turn went first, and the client's subscriber): a fenced write, a
 *    break and a condition variable's signal and broadcast decide once
 *    the other two answered, within a try's bound; a condition
 *    variable's wait is signalled (the subscriber passes over the paused
 *    master); and a hold on a short lease is renewed by the two
 *    throughout, never told lost;
 *  - a break from a client that owes the paused master an answer is
 *    queued behind it, and ends the lock there once it runs again;
 *  - a release to a master whose answers a proxy delays, its script
 *    cache flushed: sent in a form it runs (a NOSCRIPT read late would be
 *    the release lost, the key left for the lease); and the same after a
 *    SCRIPT FLUSH of that running server, the release sent as EVALSHA on
 *    a connection where it ran before (its NOSCRIPT, read late, sends it
 *    whole);
 *  - a break from a client with several calls owed by a slow master (they
 *    were in flight at once) runs there once, not once per connection;
 *  - 300 releases queued on a paused master: the last one (of a lock it
 *    had granted) reaches it too, once it runs again -- also when four
 *    more calls that were out leave that master more owing connections
 *    (none is closed for room);
 *  - busy tries while a master is paused queue no give-back there, but
 *    for the one try that asked it;
 *  - a master that owes an answer it is about to give (a timed call
 *    ended before it came) is waited for and asked, not passed over as
 *    paused: a trylock right after is EBUSY, not ENOLCK;
 *  - a master whose answers come late still owes the last renewal round's
 *    answers when the next round starts: it is asked every round all the
 *    same (judged paused by its silence, not by what it owes);
 *  - a master whose script cache was flushed, its renewal answers always
 *    read late: its renewals run there all the same (the key stays on
 *    every master);
 *  - a hold's first renewal round with the first master paused (owing a
 *    lock call's answer): connects the two that run first, and renews;
 *  - a fenced write with master 0 paused and master 2 owing a recent
 *    answer: waits for it and asks master 2, within a try's bound.
 *
 * Every server is the fixture's, started, paused, resumed and killed by
 * pid here; a paused one is resumed before the test ends.
 */
#include "fixture_multi.h"
#include "proxy.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlock.h>

#define NM 3
#define LATE_MS 50.0   /* a timed call's allowance past its deadline */
#define TRY_MS 200.0   /* one attempt of a try */

static dlt_masters rl;

#define MASTERS_UP() DLT_MASTERS_UP(&rl, NM, 0)

static void pause_master(int i) {
    DLT_ASSERT_INT_EQ(kill(rl.srv[i].pid, SIGSTOP), 0);
}

static void resume_master(int i) {
    DLT_ASSERT_INT_EQ(kill(rl.srv[i].pid, SIGCONT), 0);
}

static int mutex_make(dlock_mutex_t *m, const char *name, dlock_client_t *cl, unsigned lease_ms, int robust) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    rc = dlock_mutexattr_setclient(&a, cl);
    if (rc == 0) rc = dlock_mutexattr_setlease(&a, lease_ms);
    if (rc == 0 && robust) rc = dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST);
    if (rc == 0) rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* A fault proxy before master k and a client (5 s unreachable bound)
 * whose URL names the three masters, master k through the proxy. */
static dlt_proxy *client_via_proxy(int k, dlock_client_t **cl) {
    dlt_proxy *px = dlt_proxy_start(rl.srv[k].port);
    char url[320];
    int port[NM], i;
    CU_ASSERT_FATAL(px != NULL);
    for (i = 0; i < NM; i++) port[i] = i == k ? dlt_proxy_port(px) : rl.srv[i].port;
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", port[0], port[1], port[2]);
    DLT_ASSERT_ERR(dlt_client_make(cl, url, 5000), 0);
    return px;
}

static int timedlock_ms(dlock_mutex_t *m, long ms) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, ms);
    return dlock_mutex_timedlock(m, &ts);
}

/* ------------------------------------------- 1. deadlines, one paused */

static void test_redlock_paused_master_deadlines(void) {
    const char *name = "rlf/deadline";
    dlock_client_t *cl = NULL, *other = NULL;
    dlock_mutex_t m, o;
    double t0, dt, worst_try = 0, worst_unlock = 0;
    int i, rc;

    MASTERS_UP();
    DLT_ASSERT_ERR(dlt_client_make(&cl, rl.url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&other, rl.url, 5000), 0);
    /* A long lease: a quarter of it (the old per-step wait) is far above
     * the bounds checked, and no key can lapse during the test. */
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    DLT_ASSERT_ERR(mutex_make(&o, name, other, 20000, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* connections to every master */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&o), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&o), 0);

    for (i = 0; i < 50 && dlt_masters_lock_count(&rl, name) != 0; i++) dlt_sleep_ms(20); /* a release read late */
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);
    pause_master(2);
    for (i = 0; i < 8; i++) {
        t0 = dlt_now();
        rc = dlock_mutex_trylock(&m);
        dt = (dlt_now() - t0) * 1000;
        DLT_ASSERT_ERR(rc, 0);
        if (dt > worst_try) worst_try = dt;
        t0 = dlt_now();
        rc = dlock_mutex_unlock(&m);
        dt = (dlt_now() - t0) * 1000;
        DLT_ASSERT_ERR(rc, 0);
        if (dt > worst_unlock) worst_unlock = dt;
    }
    printf("  one of 3 paused: trylock at most %.1f ms, unlock at most %.1f ms\n", worst_try, worst_unlock);
    CU_ASSERT_TRUE(worst_try <= TRY_MS + LATE_MS);
    CU_ASSERT_TRUE(worst_unlock <= TRY_MS + LATE_MS);

    /* Held by the other client: a timed call ends by its deadline. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&o), 0);
    for (i = 0; i < 3; i++) {
        long ms = 150 + 200 * i;
        t0 = dlt_now();
        rc = timedlock_ms(&m, ms);
        dt = (dlt_now() - t0) * 1000;
        printf("  timedlock(%ld ms) on a held lock: %s after %.1f ms\n", ms, dlt_errno_label(rc), dt);
        DLT_ASSERT_ERR(rc, ETIMEDOUT);
        CU_ASSERT_TRUE(dt <= ms + LATE_MS);
        t0 = dlt_now();
        rc = dlock_mutex_trylock(&m);
        dt = (dlt_now() - t0) * 1000;
        if (rc != EBUSY) printf("  trylock on a held lock after %.1f ms: %s\n", dt, dlock_last_error());
        DLT_ASSERT_ERR(rc, EBUSY);
        CU_ASSERT_TRUE(dt <= TRY_MS + LATE_MS);
    }
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&o), 0);
    CU_ASSERT_TRUE((dlt_now() - t0) * 1000 <= TRY_MS + LATE_MS);

    /* Resumed: what it was sent runs in order, the releases behind the
     * grants; nothing stays held there (the lease would take 20 s). */
    resume_master(2);
    for (i = 0; i < 50 && dlt_masters_lock_count(&rl, name) != 0; i++) dlt_sleep_ms(20);
    printf("  resumed: the lock key on %d masters after %d ms\n", dlt_masters_lock_count(&rl, name), i * 20);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);
    /* And it takes part again: a hold is on all three. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    for (i = 0; i < 50 && dlt_masters_lock_count(&rl, name) != NM; i++) dlt_sleep_ms(20);
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), NM);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&o), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(other), 0);
}

/* ------------------------------------- 2. EOWNERDEAD once per death */

struct holder {
    const char *name;
    int *held; /* shm */
};

/* Takes the robust lock and keeps it until killed. */
static int hold_forever(void *p) {
    struct holder *h = p;
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    if (dlt_client_make(&cl, rl.url, 5000) != 0) return 10;
    if (mutex_make(&m, h->name, cl, 1000, 1) != 0) return 11;
    if (dlock_mutex_lock(&m) != 0) return 12;
    dlt_flag_set(h->held, 1);
    for (;;) dlt_sleep_ms(1000);
    return 0;
}

static void test_redlock_ownerdead_once_per_death(void) {
    const char *name = "rlf/robust";
    struct holder h;
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    pid_t pid;
    double t0;
    int i, rc, dead = 0;

    MASTERS_UP();
    h.name = name;
    h.held = DLT_SHM_NEW(int, 1);
    pid = dlt_spawn(hold_forever, &h);
    CU_ASSERT_TRUE(pid > 0);
    if (pid <= 0) return;
    dlt_bg_add(pid);
    CU_ASSERT_TRUE(dlt_flag_wait(h.held, 1, 10000));
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), NM);
    DLT_ASSERT_ERR(dlt_client_make(&cl, rl.url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 1000, 1), 0);

    /* Master 2 paused across the death and the recovery. */
    pause_master(2);
    DLT_ASSERT_INT_EQ(kill(pid, SIGKILL), 0);
    CU_ASSERT_TRUE(dlt_wait(pid, 5000) == 128 + SIGKILL);
    t0 = dlt_now();
    rc = timedlock_ms(&m, 5000);
    printf("  holder killed, master 2 paused: %s after %.1f ms\n", dlt_errno_label(rc), (dlt_now() - t0) * 1000);
    DLT_ASSERT_ERR(rc, EOWNERDEAD);
    if (rc == EOWNERDEAD) {
        DLT_ASSERT_ERR(dlock_mutex_consistent(&m), 0);
        t0 = dlt_now();
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        printf("  unlocked after %.1f ms\n", (dlt_now() - t0) * 1000);
        CU_ASSERT_TRUE((dlt_now() - t0) * 1000 <= TRY_MS + LATE_MS);
    }
    resume_master(2);
    dlt_sleep_ms(1200); /* every lease of the dead holder is over there too */

    /* Clean cycles: the death was dealt with, once. */
    for (i = 0; i < 6; i++) {
        rc = timedlock_ms(&m, 5000);
        if (rc == EOWNERDEAD) {
            dead++;
            (void)dlock_mutex_consistent(&m);
        }
        CU_ASSERT_TRUE(rc == 0 || rc == EOWNERDEAD);
        if (rc == 0 || rc == EOWNERDEAD) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        if (i == 2) dlt_sleep_ms(1100); /* a grant the paused master made late has lapsed too */
    }
    printf("  6 clean cycles after the recovery: %d EOWNERDEAD\n", dead);
    DLT_ASSERT_INT_EQ(dead, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

/* ------------------------- 3. the other calls, the first master paused */

static int lost_calls;
static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m, (void)name, (void)arg;
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

struct signaller {
    dlock_cond_t *cv;
    dlock_mutex_t *m;
    double took_ms; /* the signal's */
    int rc;
};

/* Signals under the mutex, which the waiter gives up once registered. */
static void *signal_later(void *p) {
    struct signaller *s = p;
    double t0;
    dlt_sleep_ms(200);
    if ((s->rc = dlock_mutex_lock(s->m)) != 0) return NULL;
    t0 = dlt_now();
    s->rc = dlock_cond_signal(s->cv);
    s->took_ms = (dlt_now() - t0) * 1000;
    if (dlock_mutex_unlock(s->m) != 0 && s->rc == 0) s->rc = -1;
    return NULL;
}

/* How long (ms) a call took, printed and checked against a try's bound. */
#define WITHIN_TRY(what, call)                                                           \
    do {                                                                                 \
        double t0_ = dlt_now(), dt_;                                                     \
        DLT_ASSERT_ERR((call), 0);                                                       \
        dt_ = (dlt_now() - t0_) * 1000;                                                  \
        printf("  first master paused: %s in %.1f ms\n", what, dt_);                     \
        CU_ASSERT_TRUE(dt_ <= TRY_MS + LATE_MS);                                         \
    } while (0)

static void test_redlock_paused_first_master_calls(void) {
    const char *name = "rlf/calls";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m, s;
    dlock_mutexattr_t a;
    dlock_cond_t cv;
    struct signaller sg = { NULL, NULL, 0, -1 };
    pthread_t t;
    struct timespec ts;
    double t0;
    int held = 0, rc;

    MASTERS_UP();
    lost_calls = 0;
    DLT_ASSERT_ERR(dlt_client_make(&cl, rl.url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    /* A short lease: renewed every 200 ms, by a quorum of two. */
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, cl), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 600), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&s, "rlf/short", &a), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_ERR(dlock_cond_init_client(&cv, "rlf/cv", cl), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* connections to every master */
    DLT_ASSERT_ERR(dlock_cond_broadcast(&cv), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&s), 0);

    pause_master(0);
    WITHIN_TRY("fenced write", dlock_fenced_set(&m, "rlf/data", "v1", 2));
    WITHIN_TRY("signal", dlock_cond_signal(&cv));
    WITHIN_TRY("broadcast", dlock_cond_broadcast(&cv));
    /* A wait, signalled by another thread 200 ms later: the client's
     * subscriber, not connected yet, passes over the paused master (its
     * connection accepted, a PING unanswered) for one that runs, where
     * the signal is published too. */
    sg.cv = &cv;
    sg.m = &m;
    DLT_ASSERT_INT_EQ(pthread_create(&t, NULL, signal_later, &sg), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 4000);
    t0 = dlt_now();
    rc = dlock_cond_timedwait(&cv, &m, &ts);
    t0 = (dlt_now() - t0) * 1000;
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0); /* (held again, whatever the wait said) */
    pthread_join(t, NULL);
    printf("  first master paused: timedwait %s after %.1f ms, its signal in %.1f ms\n", dlt_errno_label(rc), t0,
           sg.took_ms);
    DLT_ASSERT_ERR(rc, 0);
    DLT_ASSERT_ERR(sg.rc, 0);
    CU_ASSERT_TRUE(sg.took_ms <= TRY_MS + LATE_MS);
    dlt_sleep_ms(1500); /* the short lease renewed through more than two leases */
    CU_ASSERT_TRUE(dlock_mutex_holds(&s));
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
    WITHIN_TRY("break", dlock_break(cl, "rlf/short", DLOCK_BREAK_RESET, &held));
    CU_ASSERT_TRUE(held);
    resume_master(0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&cv), 0);
    (void)dlock_mutex_unlock(&s); /* broken: EPERM, or lost already */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

/* -------------------------------- 4. a break behind an owed answer */

/* Waits (1 s at most) until the lock key of name is on `want` masters. */
static int keys_settle(const char *name, int want) {
    int i;
    for (i = 0; i < 50 && dlt_masters_lock_count(&rl, name) != want; i++) dlt_sleep_ms(20);
    return dlt_masters_lock_count(&rl, name);
}

/* Locks m (of name) so that every master has its key, before a fault
 * that needs it there: how many have it.  A round decides on a quorum's
 * grants, and a master that still owes a fresh client's first calls an
 * answer (a loaded machine) may not be asked: then m is taken again. */
static int lock_everywhere(dlock_mutex_t *m, const char *name) {
    int i, n = 0;
    for (i = 0; i < 5; i++) {
        if (i > 0 && dlock_mutex_unlock(m) != 0) return -1;
        if (dlock_mutex_lock(m) != 0) return -1;
        if ((n = keys_settle(name, NM)) == NM) break;
    }
    return n;
}

/* Goes on working with b (a trylock and unlock every 20 ms, up to 100)
 * until no master has name's key nor, if not NULL, also's: what waited to
 * go out to a master goes with the client's next calls.  Says after how
 * many calls, under label. */
static void calls_until_gone(dlock_mutex_t *b, const char *name, const char *also, const char *label) {
    int i;
    for (i = 0; i < 100 &&
                (dlt_masters_lock_count(&rl, name) != 0 || (also != NULL && dlt_masters_lock_count(&rl, also) != 0));
         i++) {
        DLT_ASSERT_ERR(dlock_mutex_trylock(b), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(b), 0);
        dlt_sleep_ms(20);
    }
    printf("  %s after %d more calls\n", label, i);
}

/* The breaking client owes the paused master an answer (its own grant,
 * made there late): the break is queued behind it, as a release is, so
 * once that master runs again the lock is gone from it too -- not left
 * there until the holder's 20 s lease ends. */
static void test_redlock_break_behind_owed_answer(void) {
    const char *name = "rlf/breakq", *own = "rlf/breakq-own";
    dlock_client_t *holder = NULL, *breaker = NULL;
    dlock_mutex_t h, b;
    int was_held = 0;

    MASTERS_UP();
    DLT_ASSERT_ERR(dlt_client_make(&holder, rl.url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&breaker, rl.url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&h, name, holder, 20000, 0), 0);
    DLT_ASSERT_ERR(mutex_make(&b, own, breaker, 20000, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&b), 0); /* the breaker's connections to every master */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&b), 0);
    DLT_ASSERT_INT_EQ(keys_settle(own, 0), 0);
    DLT_ASSERT_INT_EQ(lock_everywhere(&h, name), NM);

    pause_master(2);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&b), 0); /* held by the two others; master 2 owes its answer */
    DLT_ASSERT_ERR(dlock_break(breaker, name, DLOCK_BREAK_RESET, &was_held), 0);
    DLT_ASSERT_INT_EQ(was_held, 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&b), 0);
    resume_master(2);

    DLT_ASSERT_INT_EQ(keys_settle(name, 0), 0);
    DLT_ASSERT_INT_EQ(keys_settle(own, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&h), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&h), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&b), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(holder), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(breaker), 0);
}

/* ------------------------- 5. a script the slow master does not have */

/* One master behind a proxy that holds its answers 600 ms, its script
 * cache flushed while a lock is held: the unlock is decided by the two
 * others, and that master's answer is read late.  The release must reach
 * it in a form it can run (an EVALSHA it answers NOSCRIPT to, read late,
 * would be the release lost and the key left there for the lease). */
static void test_redlock_release_to_a_slow_master_without_scripts(void) {
    const char *name = "rlf/noscript";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    dlt_proxy *px;
    redisReply *r;

    MASTERS_UP();
    px = client_via_proxy(2, &cl);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    DLT_ASSERT_INT_EQ(lock_everywhere(&m, name), NM);
    r = dlt_redis_cmd(&rl.srv[2], "SCRIPT FLUSH");
    CU_ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    dlt_proxy_set(px, DLT_PROXY_DELAY, 600, NULL, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(keys_settle(name, 0), 0);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_proxy_stop(px);
}

/* The same, the release script run on that connection before the flush
 * (SCRIPT FLUSH on a running server: the connection stays, its record
 * of the server's scripts does not hold any more): the release, sent as
 * EVALSHA and answered NOSCRIPT late, must still run there. */
static void test_redlock_release_to_a_slow_master_after_script_flush(void) {
    const char *name = "rlf/flushed";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m, b;
    dlt_proxy *px;
    int i;

    MASTERS_UP();
    px = client_via_proxy(2, &cl);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    DLT_ASSERT_ERR(mutex_make(&b, "rlf/flushed-busy", cl, 20000, 0), 0);
    for (i = 0; i < 3; i++) { /* each script answered on the connections */
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    dlt_sleep_ms(50); /* (an answer read late is read by then) */
    DLT_ASSERT_INT_EQ(lock_everywhere(&m, name), NM);
    DLT_ASSERT_INT_EQ(dlt_reply_ok(dlt_redis_cmd(&rl.srv[2], "SCRIPT FLUSH")), 1);
    dlt_proxy_set(px, DLT_PROXY_DELAY, 600, NULL, 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    /* The client goes on working: the late answer is read, and acted on. */
    calls_until_gone(&b, name, NULL, "the key gone");
    DLT_ASSERT_INT_EQ(keys_settle(name, 0), 0);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&b), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_proxy_stop(px);
}

/* ------------------------ 6. a break runs once on a slow master */

#define ONCE_N 4 /* calls in flight at once when the master turns slow */
#define WORKERS_MAX 8

struct once_worker {
    dlock_mutex_t *m; /* NULL: asks the information of `info` instead */
    dlock_client_t *cl;
    const char *info;
    pthread_barrier_t *go;
    int *hold; /* a flag: kept while it is 1 (0: unlocked at once) */
    int rc, took;
};

/* Takes its mutex when the others do, keeps it while *hold, unlocks (or
 * asks for a lock's information). */
static void *once_run(void *p) {
    struct once_worker *w = p;
    dlock_lock_info_t in;
    pthread_barrier_wait(w->go);
    if (w->m == NULL) {
        (void)dlock_lock_info(w->cl, w->info, &in); /* (its answer does not matter) */
        w->rc = 0;
        w->took = 1;
        return NULL;
    }
    w->rc = dlock_mutex_lock(w->m);
    w->took = 1;
    while (dlt_flag_get(w->hold)) dlt_sleep_ms(5);
    if (w->rc == 0) w->rc = dlock_mutex_unlock(w->m);
    return NULL;
}

/* n workers, each on a thread of its own, all at once: mutexes ms[i]
 * taken and kept until once_end, or with ms NULL, the information of
 * `info` on cl asked. */
struct once_set {
    struct once_worker w[WORKERS_MAX];
    pthread_t t[WORKERS_MAX];
    pthread_barrier_t go;
    int n;
};

static void once_start(struct once_set *s, int n, dlock_mutex_t *ms, dlock_client_t *cl, const char *info, int *hold) {
    int i;
    s->n = n;
    CU_ASSERT_FATAL(n <= WORKERS_MAX && pthread_barrier_init(&s->go, NULL, (unsigned)n) == 0);
    for (i = 0; i < n; i++) {
        s->w[i] = (struct once_worker){ ms != NULL ? &ms[i] : NULL, cl, info, &s->go, hold, -1, 0 };
        CU_ASSERT_FATAL(pthread_create(&s->t[i], NULL, once_run, &s->w[i]) == 0);
    }
}

/* Waits until every worker took its mutex (or asked). */
static void once_took(struct once_set *s) {
    int i;
    for (i = 0; i < s->n; i++) CU_ASSERT_TRUE(dlt_flag_wait(&s->w[i].took, 1, 5000));
}

static void once_end(struct once_set *s, int *hold) {
    int i;
    dlt_flag_set(hold, 0);
    for (i = 0; i < s->n; i++) {
        pthread_join(s->t[i], NULL);
        DLT_ASSERT_ERR(s->w[i].rc, 0);
    }
    pthread_barrier_destroy(&s->go);
}

/* The connections r has (CLIENT LIST; the one asking included), or -1. */
static int clients_on(dlt_redis *r) {
    redisReply *rep = dlt_redis_cmd(r, "CLIENT LIST");
    const char *p;
    int n = 0;
    if (rep == NULL || rep->type != REDIS_REPLY_STRING) {
        if (rep != NULL) freeReplyObject(rep);
        return -1;
    }
    for (p = rep->str; (p = strchr(p, '\n')) != NULL; p++) n++;
    freeReplyObject(rep);
    return n;
}

/* How many requests the server ran (SLOWLOG, every command logged) with
 * an argument equal to arg. */
static int slowlog_count(dlt_redis *r, const char *arg) {
    redisReply *rep = dlt_redis_cmd(r, "SLOWLOG GET 4096");
    size_t i, j;
    int n = 0;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        if (rep != NULL) freeReplyObject(rep);
        return -1;
    }
    for (i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i], *args = e->elements > 3 ? e->element[3] : NULL;
        for (j = 0; args != NULL && args->type == REDIS_REPLY_ARRAY && j < args->elements; j++)
            if (args->element[j]->type == REDIS_REPLY_STRING && strcmp(args->element[j]->str, arg) == 0) n++;
    }
    freeReplyObject(rep);
    return n;
}

/* Several calls in flight at once when a master turns slow leave it
 * several connections that owe answers.  A break is queued behind one of
 * them only: run once per such connection, a second run could end the
 * hold of a taker that came in between on that master.  Every master is
 * behind a proxy: the two others answer 80 ms late (the calls overlap),
 * the slow one 1.5 s late (its server runs each request at once: the
 * SLOWLOG counts them). */
static void test_redlock_break_runs_once_on_a_slow_master(void) {
    const char *name = "rlf/once-held";
    dlock_client_t *cl = NULL, *holder = NULL;
    dlock_mutex_t ms[ONCE_N], h;
    dlt_proxy *px[NM];
    struct once_set set;
    char url[256], mname[32];
    redisReply *r;
    int i, was_held = 0, runs, hold = 0;

    MASTERS_UP();
    for (i = 0; i < NM; i++) CU_ASSERT_FATAL((px[i] = dlt_proxy_start(rl.srv[i].port)) != NULL);
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", dlt_proxy_port(px[0]),
             dlt_proxy_port(px[1]), dlt_proxy_port(px[2]));
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&holder, rl.url, 5000), 0);
    for (i = 0; i < ONCE_N; i++) {
        snprintf(mname, sizeof mname, "rlf/once-%d", i);
        DLT_ASSERT_ERR(mutex_make(&ms[i], mname, cl, 20000, 0), 0);
    }
    DLT_ASSERT_ERR(mutex_make(&h, name, holder, 20000, 0), 0);
    DLT_ASSERT_INT_EQ(lock_everywhere(&h, name), NM);
    dlt_proxy_set(px[0], DLT_PROXY_DELAY, 80, NULL, 0);
    dlt_proxy_set(px[1], DLT_PROXY_DELAY, 80, NULL, 0);
    for (i = 0; i < 5 && clients_on(&rl.srv[2]) < ONCE_N + 2; i++) { /* (the holder's and the one that asks) */
        once_start(&set, ONCE_N, ms, NULL, NULL, &hold); /* a connection to each master per thread, in the pools */
        once_end(&set, &hold);
    }

    dlt_proxy_set(px[2], DLT_PROXY_DELAY, 1500, NULL, 0);
    hold = 1;
    once_start(&set, ONCE_N, ms, NULL, NULL, &hold); /* each thread's connection to master 2 owes its answer */
    once_took(&set);
    DLT_ASSERT_INT_EQ(dlt_reply_ok(dlt_redis_cmd(&rl.srv[2], "CONFIG SET slowlog-log-slower-than 0")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_ok(dlt_redis_cmd(&rl.srv[2], "CONFIG SET slowlog-max-len 4096")), 1);
    DLT_ASSERT_INT_EQ(dlt_reply_ok(dlt_redis_cmd(&rl.srv[2], "SLOWLOG RESET")), 1);
    DLT_ASSERT_ERR(dlock_break(cl, name, DLOCK_BREAK_RESET, &was_held), 0);
    DLT_ASSERT_INT_EQ(was_held, 1);
    for (i = 0; i < 150 && dlt_masters_lock_count(&rl, name) != 0; i++) dlt_sleep_ms(20); /* the slow master: 1.5 s */
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), 0);
    dlt_sleep_ms(300); /* any second run there */
    runs = slowlog_count(&rl.srv[2], "reset");
    printf("  the break ran %d time(s) on the slow master\n", runs);
    DLT_ASSERT_INT_EQ(runs, 1);

    for (i = 0; i < NM; i++) dlt_proxy_pass(px[i]);
    once_end(&set, &hold);
    for (i = 0; i < ONCE_N; i++) DLT_ASSERT_ERR(dlock_mutex_destroy(&ms[i]), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&h), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&h), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(holder), 0);
    r = dlt_redis_cmd(&rl.srv[2], "CONFIG SET slowlog-log-slower-than 10000");
    if (r != NULL) freeReplyObject(r);
    for (i = 0; i < NM; i++) dlt_proxy_stop(px[i]);
}

/* ------------------- 7. many releases queued on a paused master */

/* A master paused while a client locks and unlocks again and again: each
 * release is queued behind what that master owes, more of them than go
 * to its socket at once (300 of some 150 bytes: the rest wait in memory
 * until it has answered what was sent, and go with the client's next
 * call to it).  Unlocked last, a lock it granted before the pause is
 * released there too once it runs again -- not left to its 20 s lease. */
static void test_redlock_many_releases_queued_on_a_paused_master(void) {
    const char *name = "rlf/queued", *busy = "rlf/queued-busy";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m, b;
    int i;

    MASTERS_UP();
    DLT_ASSERT_ERR(dlt_client_make(&cl, rl.url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    DLT_ASSERT_ERR(mutex_make(&b, busy, cl, 20000, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&b), 0); /* connections to every master */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&b), 0);
    DLT_ASSERT_INT_EQ(lock_everywhere(&m, name), NM);
    DLT_ASSERT_INT_EQ(keys_settle(busy, 0), 0);

    pause_master(2);
    for (i = 0; i < 300; i++) {
        DLT_ASSERT_ERR(dlock_mutex_trylock(&b), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&b), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    resume_master(2);

    /* The client goes on working: what waited goes out. */
    calls_until_gone(&b, name, busy, "resumed: the keys gone");
    DLT_ASSERT_INT_EQ(keys_settle(name, 0), 0);
    DLT_ASSERT_INT_EQ(keys_settle(busy, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&b), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

/* ---------- 8. a master's owing connections are all kept, however many */

/* Calls in flight when a master is paused leave it one owing connection
 * each.  A client that queues many releases on the first of them, while
 * four lock information calls (which wait for every master, up to the
 * command timeout) are still out, must not lose them when those four
 * join it: a connection closed for room would take the releases still
 * waiting in memory with it, and the key of the last one would stay on
 * that master for its lease. */
static void test_redlock_owing_connections_all_kept(void) {
    const char *name = "rlf/kept", *busy = "rlf/kept-busy";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m, b, warm[5];
    dlt_proxy *px[2];
    struct once_set set;
    char url[320], wname[32];
    int i, hold = 0;

    MASTERS_UP();
    for (i = 0; i < 2; i++) CU_ASSERT_FATAL((px[i] = dlt_proxy_start(rl.srv[i].port)) != NULL);
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?command_timeout_ms=1000",
             dlt_proxy_port(px[0]), dlt_proxy_port(px[1]), rl.srv[2].port);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    DLT_ASSERT_ERR(mutex_make(&b, busy, cl, 20000, 0), 0);
    for (i = 0; i < 5; i++) {
        snprintf(wname, sizeof wname, "rlf/kept-%d", i);
        DLT_ASSERT_ERR(mutex_make(&warm[i], wname, cl, 20000, 0), 0);
    }
    dlt_proxy_set(px[0], DLT_PROXY_DELAY, 80, NULL, 0);
    dlt_proxy_set(px[1], DLT_PROXY_DELAY, 80, NULL, 0);
    /* Five connections to master 2 in the pool: while it is paused, each
     * of five calls at once needs one of its own there (its requests are
     * answered in a moment: calls that merely overlap need not take five,
     * and on a loaded machine often did not). */
    for (i = 0; i < 5 && clients_on(&rl.srv[2]) < 5 + 1; i++) {
        pause_master(2);
        once_start(&set, 5, warm, NULL, NULL, &hold);
        dlt_sleep_ms(150);
        resume_master(2);
        once_end(&set, &hold);
    }
    CU_ASSERT_TRUE(clients_on(&rl.srv[2]) >= 5 + 1); /* (and the one that asks) */
    dlt_proxy_pass(px[0]);
    dlt_proxy_pass(px[1]);
    DLT_ASSERT_INT_EQ(lock_everywhere(&m, name), NM);

    pause_master(2);
    once_start(&set, 4, NULL, cl, "rlf/kept-info", &hold); /* out until the command timeout */
    dlt_sleep_ms(100);
    for (i = 0; i < 300; i++) { /* the first owing connection: the releases behind it */
        DLT_ASSERT_ERR(dlock_mutex_trylock(&b), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&b), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    once_took(&set); /* the four owe master 2 too now */
    once_end(&set, &hold);
    resume_master(2);

    calls_until_gone(&b, name, NULL, "resumed: the key gone");
    DLT_ASSERT_INT_EQ(keys_settle(name, 0), 0);
    DLT_ASSERT_INT_EQ(keys_settle(busy, 0), 0);
    for (i = 0; i < 5; i++) DLT_ASSERT_ERR(dlock_mutex_destroy(&warm[i]), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&b), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    for (i = 0; i < 2; i++) dlt_proxy_stop(px[i]);
}

/* ------------- 9. no give-back to a master that was not asked */

/* A round that does not hold gives back what it may have been granted:
 * on the masters that granted it, and on those that were asked and did
 * not answer (a grant they make late).  A paused master that owes an
 * earlier answer is not asked at all: a give-back queued there would be
 * one more request for nothing, each round (a waiter's every round). */
static void test_redlock_no_give_back_where_not_asked(void) {
    const char *name = "rlf/giveback";
    dlock_client_t *holder = NULL, *cl = NULL;
    dlock_mutex_t h, m;
    long long before, after;
    int i;

    MASTERS_UP();
    DLT_ASSERT_ERR(dlt_client_make(&holder, rl.url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&cl, rl.url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&h, name, holder, 20000, 0), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    DLT_ASSERT_INT_EQ(lock_everywhere(&h, name), NM);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY); /* connections to every master */
    dlt_sleep_ms(50);
    before = dlt_redis_cmdstat(&rl.srv[2], "evalsha") + dlt_redis_cmdstat(&rl.srv[2], "eval");

    pause_master(2);
    for (i = 0; i < 20; i++) DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY); /* the first asks master 2 */
    resume_master(2);
    dlt_sleep_ms(300);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY); /* what master 2 owed read */
    dlt_sleep_ms(100);
    after = dlt_redis_cmdstat(&rl.srv[2], "evalsha") + dlt_redis_cmdstat(&rl.srv[2], "eval");
    printf("  master 2 ran %lld scripts for 21 busy tries made while it was paused, and one after\n", after - before);
    CU_ASSERT_TRUE(after - before <= 4); /* the first try, its give-back; the last try, its give-back */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&h), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&h), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(holder), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

/* ------------- 10. a master that owes an answer it is about to give */

/* A call that ends before two healthy masters answer it (a timed call's
 * last request, its end near) leaves them owing those answers for a
 * moment.  The next call must wait for them (within its own bound) and
 * ask them, not skip them as paused: with the third master paused, a
 * trylock on a held lock is EBUSY, not ENOLCK.  Proxies hold masters
 * 0's and 1's answers 60 ms during a 10 ms timed call (longer than its
 * end leaves its requests), then pass them on. */
static void test_redlock_owed_answer_awaited(void) {
    const char *name = "rlf/owed";
    dlock_client_t *cl = NULL, *holder = NULL;
    dlock_mutex_t m, h;
    dlt_proxy *px[2];
    char url[320];
    double t0, dt;
    int i, rc;

    MASTERS_UP();
    for (i = 0; i < 2; i++) CU_ASSERT_FATAL((px[i] = dlt_proxy_start(rl.srv[i].port)) != NULL);
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", dlt_proxy_port(px[0]),
             dlt_proxy_port(px[1]), rl.srv[2].port);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&holder, rl.url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    DLT_ASSERT_ERR(mutex_make(&h, name, holder, 20000, 0), 0);
    DLT_ASSERT_INT_EQ(lock_everywhere(&h, name), NM);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY); /* connections to every master */
    pause_master(2);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY); /* master 2 owes this one's answer */
    for (i = 0; i < 2; i++) dlt_proxy_set(px[i], DLT_PROXY_DELAY, 60, NULL, 0);
    rc = timedlock_ms(&m, 10);
    printf("  timedlock(10 ms), masters 0 and 1 60 ms late: %s\n", dlt_errno_label(rc));
    for (i = 0; i < 2; i++) dlt_proxy_pass(px[i]); /* (what they owe comes within 60 ms) */
    t0 = dlt_now();
    rc = dlock_mutex_trylock(&m);
    dt = (dlt_now() - t0) * 1000;
    printf("  trylock after %.1f ms: %s\n", dt, rc != EBUSY ? dlock_last_error() : "EBUSY");
    DLT_ASSERT_ERR(rc, EBUSY);
    CU_ASSERT_TRUE(dt <= TRY_MS + LATE_MS);
    resume_master(2);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&h), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&h), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(holder), 0);
    for (i = 0; i < 2; i++) dlt_proxy_stop(px[i]);
}

/* ------------- 11. renewals to a master whose answers come late */

/* Renewals this client's renewal thread ran on master i so far. */
static long long renewals_on(int i) {
    return dlt_redis_cmdstat(&rl.srv[i], "evalsha") + dlt_redis_cmdstat(&rl.srv[i], "eval");
}

/* A master whose answers a proxy holds 110 ms (220 at most: a request
 * that comes meanwhile waits too): the other two decide each round, and
 * it owes the last round's renewals when the next one starts, 100 ms
 * later.  Holds on 300 ms and 1200 ms leases make rounds of one renewal
 * and of two in turn.  It is asked every round all the same (it answers: not
 * paused), and runs as many renewals as master 0 -- not passed over
 * whenever it owes more than the round's batch (a paused master 2 would
 * leave such a round undecided). */
static void test_redlock_renewals_with_a_late_master(void) {
    static const char *names[2] = { "rlf/late-short", "rlf/late-long" };
    static const unsigned leases[2] = { 300, 1200 };
    dlock_client_t *cl = NULL;
    dlock_mutex_t mx[2];
    dlock_mutexattr_t a;
    dlt_proxy *px;
    long long r0, r1;
    int i;

    MASTERS_UP();
    lost_calls = 0;
    px = client_via_proxy(1, &cl);
    for (i = 0; i < 2; i++) {
        DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
        DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, cl), 0);
        DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, leases[i]), 0);
        DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, on_lost, NULL), 0);
        DLT_ASSERT_ERR(dlock_mutex_init(&mx[i], names[i], &a), 0);
        dlock_mutexattr_destroy(&a);
        DLT_ASSERT_ERR(dlock_mutex_lock(&mx[i]), 0);
    }
    dlt_sleep_ms(300);   /* renewal connections to every master */
    r1 = renewals_on(1); /* (first: a round that runs between the two counts more on master 0) */
    r0 = renewals_on(0);
    dlt_proxy_set(px, DLT_PROXY_DELAY, 110, NULL, 0);
    dlt_sleep_ms(1000);
    dlt_proxy_pass(px);
    for (i = 0; i < 2; i++) CU_ASSERT_TRUE(dlock_mutex_holds(&mx[i]));
    for (i = 0; i < 2; i++) DLT_ASSERT_ERR(dlock_mutex_unlock(&mx[i]), 0); /* no more renewals */
    dlt_sleep_ms(200);                                                     /* what master 1 was sent has run */
    r0 = renewals_on(0) - r0;
    r1 = renewals_on(1) - r1;
    printf("  master 1 110 ms late: %lld renewals (and releases) ran there, %lld on master 0\n", r1, r0);
    CU_ASSERT_TRUE(r0 >= 10); /* every 100 ms, 1 s: ten rounds */
    CU_ASSERT_TRUE(r1 >= r0);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
    for (i = 0; i < 2; i++) DLT_ASSERT_ERR(dlock_mutex_destroy(&mx[i]), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_proxy_stop(px);
}

/* ---------- 12. renewals to a master whose script cache was flushed */

/* Master 2's script cache flushed, its answers held 10 ms by a proxy:
 * masters 0 and 1 decide every renewal round before master 2 answers, so
 * its answers are read late, at the next round.  A renewal sent there as
 * EVALSHA would be answered NOSCRIPT, read late and dropped: never run,
 * the key left to lapse there while the hold counts on that master.  The
 * renewal connection loads its scripts first: after two leases and more
 * the key is on every master. */
static void test_redlock_renewals_to_a_flushed_master(void) {
    const char *name = "rlf/flushed";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    dlt_proxy *px;

    MASTERS_UP();
    DLT_ASSERT_INT_EQ(dlt_reply_ok(dlt_redis_cmd(&rl.srv[2], "SCRIPT FLUSH")), 1);
    px = client_via_proxy(2, &cl);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 300, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_proxy_set(px, DLT_PROXY_DELAY, 10, NULL, 0);
    dlt_sleep_ms(800); /* the key's first lease there is long over */
    printf("  master 2 flushed, 10 ms late: the key on %d of 3 masters after 800 ms\n",
           dlt_masters_lock_count(&rl, name));
    DLT_ASSERT_INT_EQ(dlt_masters_lock_count(&rl, name), NM);
    CU_ASSERT_TRUE(dlock_mutex_holds(&m));
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_proxy_stop(px);
}

/* ----------- 13. a first renewal round with the first master paused */

/* A hold's first renewal round, no renewal connection made yet, the
 * first master paused (it owes a lock call's answer): the connections go
 * to the two that run first.  Connecting to the paused one first took
 * the round's whole bound (it takes the connection, then answers
 * nothing), the others were left none: the round decided nothing, and
 * the hold's renewal came one round later.  Renewed at a third of its
 * 600 ms lease, the key has more than 400 ms left there 330 ms after the
 * lock. */
static void test_redlock_first_renewal_first_master_paused(void) {
    const char *name = "rlf/first-renewal";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m, s;
    char key[600];
    redisReply *r;
    double t0;
    long long pttl;

    MASTERS_UP();
    lost_calls = 0;
    DLT_ASSERT_ERR(dlt_client_make(&cl, rl.url, 5000), 0);
    DLT_ASSERT_ERR(mutex_make(&m, "rlf/first-other", cl, 20000, 0), 0);
    DLT_ASSERT_ERR(mutex_make(&s, name, cl, 600, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* connections to every master */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    pause_master(0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0); /* master 0 owes its answer from now */
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&s), 0);
    dlt_sleep_ms(330 - (int)((dlt_now() - t0) * 1000));
    dlt_lock_key(name, key, sizeof key);
    r = dlt_redis_cmd(&rl.srv[1], "PTTL %s", key);
    pttl = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -3;
    if (r != NULL) freeReplyObject(r);
    printf("  first master paused: 330 ms after the lock, %lld ms left on master 1\n", pttl);
    CU_ASSERT_TRUE(pttl > 400);
    CU_ASSERT_TRUE(dlock_mutex_holds(&s));
    resume_master(0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&s), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

/* ---------- 14. a fenced write to a master that owes a recent answer */

/* A fenced write decided by masters 0 and 1 leaves master 2, whose
 * answers a proxy holds 30 ms, owing its answer for a moment; master 0 is
 * paused then.  The next fenced write needs master 2's answer: it waits
 * for the owed one (within its own bound), then asks -- not queued behind
 * it unawaited, the call left waiting for the paused master until its
 * bound (the command timeout) and asking again. */
static void test_redlock_fenced_write_to_an_owing_master(void) {
    const char *name = "rlf/fence-owing";
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    dlt_proxy *px;
    double t0, dt;

    MASTERS_UP();
    px = client_via_proxy(2, &cl);
    DLT_ASSERT_ERR(mutex_make(&m, name, cl, 20000, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "rlf/fence-owing-data", "v0", 2), 0); /* scripts known everywhere */
    dlt_proxy_set(px, DLT_PROXY_DELAY, 30, NULL, 0);
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "rlf/fence-owing-data", "v1", 2), 0); /* master 2 owes this answer */
    pause_master(0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "rlf/fence-owing-data", "v2", 2), 0);
    dt = (dlt_now() - t0) * 1000;
    printf("  master 0 paused, master 2 owing: fenced write in %.1f ms\n", dt);
    CU_ASSERT_TRUE(dt <= TRY_MS + LATE_MS);
    resume_master(0);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    dlt_proxy_stop(px);
}

static void cleanup(void) {
    int i;
    for (i = 0; i < rl.n; i++)
        if (rl.srv[i].pid > 0) (void)kill(rl.srv[i].pid, SIGCONT);
    dlt_masters_cleanup(&rl);
}

static const struct dlt_test tests[] = {
    { "test_redlock_paused_master_deadlines", test_redlock_paused_master_deadlines },
    { "test_redlock_owed_answer_awaited", test_redlock_owed_answer_awaited },
    { "test_redlock_ownerdead_once_per_death", test_redlock_ownerdead_once_per_death },
    { "test_redlock_paused_first_master_calls", test_redlock_paused_first_master_calls },
    { "test_redlock_break_behind_owed_answer", test_redlock_break_behind_owed_answer },
    { "test_redlock_release_to_a_slow_master_without_scripts", test_redlock_release_to_a_slow_master_without_scripts },
    { "test_redlock_release_to_a_slow_master_after_script_flush",
      test_redlock_release_to_a_slow_master_after_script_flush },
    { "test_redlock_break_runs_once_on_a_slow_master", test_redlock_break_runs_once_on_a_slow_master },
    { "test_redlock_many_releases_queued_on_a_paused_master", test_redlock_many_releases_queued_on_a_paused_master },
    { "test_redlock_owing_connections_all_kept", test_redlock_owing_connections_all_kept },
    { "test_redlock_no_give_back_where_not_asked", test_redlock_no_give_back_where_not_asked },
    { "test_redlock_renewals_with_a_late_master", test_redlock_renewals_with_a_late_master },
    { "test_redlock_renewals_to_a_flushed_master", test_redlock_renewals_to_a_flushed_master },
    { "test_redlock_first_renewal_first_master_paused", test_redlock_first_renewal_first_master_paused },
    { "test_redlock_fenced_write_to_an_owing_master", test_redlock_fenced_write_to_an_owing_master },
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "redlock_faults", tests);
    cleanup();
    return rc;
}
