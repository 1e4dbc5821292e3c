/* labels: redis slow */
/* test_failure.c -- failures and recovery: an unreachable server gives
 * ENOLCK within the configured bound, errors never show a password, a
 * restarted server is used again by the same objects, a hold whose data
 * the server lost is reported lost, and waiters survive a restart.
 *
 * The suite's server is stopped and restarted here; dlt_main restarts it
 * before the next test if a test leaves it down.
 */
#include "fixture.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

/* ------------------------------------------------------------ helpers */

/* The last error names the server (host and port) and never `secret`. */
static void check_error_text(const char *what, int port, const char *secret) {
    const char *e = dlock_last_error();
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    printf("  %s: dlock_last_error() = \"%s\"\n", what, e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "127.0.0.1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, portstr));
    if (secret != NULL) CU_ASSERT_PTR_NULL(strstr(e, secret));
}

/* One call of m, timed and said: a lock (in_ms < 0), a trylock (0) or a
 * timedlock with its deadline in_ms from now.  Its answer; *dt the
 * seconds it took. */
static int timed_call(dlock_mutex_t *m, int in_ms, const char *label, double *dt) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, in_ms > 0 ? (unsigned)in_ms : 0);
    double t0 = dlt_now();
    int rc = in_ms < 0 ? dlock_mutex_lock(m) : in_ms == 0 ? dlock_mutex_trylock(m) : dlock_mutex_timedlock(m, &ts);
    *dt = dlt_now() - t0;
    printf("  %s: %s after %.3f s\n", label, dlock_err_name(rc), *dt);
    return rc;
}

/* ------------------------------------- unreachable: ENOLCK, bounded */

static void test_unreachable_short_bound(void) {
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    double dt;

    DLT_ASSERT_ERR(dlt_client_make(&cl, dlt_server.url, 1000), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cl);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "fail/short", 0, cl), 0);
    /* Connected and working first, so that stale pooled connections are
     * part of the picture. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);

    DLT_ASSERT_ERR(timed_call(&m, -1, "lock (bound 1 s)", &dt), ENOLCK);
    CU_ASSERT_TRUE(dt < 2.5);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    check_error_text("lock", dlt_server.port, NULL);

    DLT_ASSERT_ERR(timed_call(&m, 0, "trylock", &dt), ENOLCK);
    CU_ASSERT_TRUE(dt < 2.5);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);

    DLT_ASSERT_ERR(timed_call(&m, 10000, "timedlock (deadline in 10 s)", &dt), ENOLCK);
    CU_ASSERT_TRUE(dt < 2.5);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);

    /* The server comes back: the same objects work again (the restarted
     * server knows no scripts). */
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fail/short"), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fail/short"), 0);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

static void test_unreachable_default_bound(void) {
    dlock_mutex_t m;
    struct timespec ts;
    double dt;

    /* The default client (DLOCK_URL), default bound 5 s. */
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "fail/default", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);

    DLT_ASSERT_ERR(timed_call(&m, -1, "lock (bound 5 s)", &dt), ENOLCK);
    CU_ASSERT_TRUE(dt < 7.0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    check_error_text("lock", dlt_server.port, NULL);

    /* A deadline sooner than the bound wins: ETIMEDOUT by the deadline. */
    DLT_ASSERT_ERR(timed_call(&m, 500, "timedlock (deadline in 0.5 s)", &dt), ETIMEDOUT);
    CU_ASSERT_TRUE(dt >= 0.45);
    CU_ASSERT_TRUE(dt < 0.5 + 0.3);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);

    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fail/default"), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 1000);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &ts), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* ------------------------------------------------- passwords stay out */

#define SECRET "s3cretPW"
#define WRONG "wr0ngPWx"

static void test_password_never_in_errors(void) {
    dlt_redis srv;
    dlock_client_t *good = NULL, *user = NULL, *bad = NULL;
    dlock_mutex_t mg, mu, mb;
    char url[256];
    double dt;
    int rc;

    memset(&srv, 0, sizeof srv);
    CU_ASSERT_FATAL(dlt_redis_start(&srv, NULL) == 0);
    /* Set after start: the fixture's readiness check is an unauthenticated PING. */
    redisReply *r = dlt_redis_cmd(&srv, "CONFIG SET requirepass %s", SECRET);
    CU_ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_STATUS);
    if (r != NULL) freeReplyObject(r);

    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", SECRET, srv.port);
    DLT_ASSERT_ERR(dlt_client_make(&good, url, 1000), 0);
    snprintf(url, sizeof url, "redis://default:%s@127.0.0.1:%d", SECRET, srv.port);
    DLT_ASSERT_ERR(dlt_client_make(&user, url, 1000), 0);
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", WRONG, srv.port);
    DLT_ASSERT_ERR(dlt_client_make(&bad, url, 0 /* default bound */), 0);
    CU_ASSERT_FATAL(good != NULL && user != NULL && bad != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&mg, "fail/pw", 0, good), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&mu, "fail/pw-user", 0, user), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&mb, "fail/pw-bad", 0, bad), 0);

    /* The right password works, with and without a user name. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&mg), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mg), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mu), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mu), 0);

    /* A wrong password: a clear ENOLCK that shows no password. */
    DLT_ASSERT_ERR(timed_call(&mb, -1, "wrong password", &dt), ENOLCK);
    CU_ASSERT_TRUE(dt < 7.0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&mb), 0);
    check_error_text("wrong password", srv.port, WRONG);
    CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), SECRET));
    CU_ASSERT_PTR_NOT_NULL(strcasestr(dlock_last_error(), "auth"));
    /* Clear: it names the error the call returned, not "UNKNOWN". */
    CU_ASSERT_PTR_NULL(strstr(dlock_last_error(), "UNKNOWN"));
    rc = dlock_mutex_trylock(&mb);
    DLT_ASSERT_ERR(rc, ENOLCK);
    check_error_text("wrong password, trylock", srv.port, WRONG);

    /* The server goes away: errors name it, never the password. */
    DLT_ASSERT_INT_EQ(dlt_redis_stop(&srv), 0);
    DLT_ASSERT_ERR(timed_call(&mg, -1, "stopped", &dt), ENOLCK);
    CU_ASSERT_TRUE(dt < 2.5);
    check_error_text("stopped, lock", srv.port, SECRET);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mg), ENOLCK);
    check_error_text("stopped, trylock", srv.port, SECRET);
    DLT_ASSERT_ERR(dlock_mutex_lock(&mu), ENOLCK);
    check_error_text("stopped, lock with user", srv.port, SECRET);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&mg), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mu), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(good), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(user), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(bad), 0);
    dlt_redis_cleanup(&srv);
}

/* --------------------------------- restart loses a hold: reported lost */

static int lost_calls;
static dlock_mutex_t *lost_m;
static char lost_name[64];

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)arg;
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
    lost_m = m;
    snprintf(lost_name, sizeof lost_name, "%s", name ? name : "(null)");
}

static void test_restart_loses_hold(void) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    lost_calls = 0;
    lost_m = NULL;
    lost_name[0] = '\0';
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 1000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "fail/lost", &a), 0);
    dlock_mutexattr_destroy(&a);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);

    /* Restarted with its data lost (no persistence). */
    DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    double t0 = dlt_now();
    DLT_ASSERT_INT_EQ(dlt_key_exists("fail/lost"), 0);

    double lost_after = -1;
    while (dlt_now() - t0 < 3.0) {
        if (dlock_mutex_holds(&m) == 0) {
            lost_after = dlt_now() - t0;
            break;
        }
        dlt_sleep_ms(20);
    }
    printf("  hold lost %.0f ms after the restart (lease 1 s)\n", lost_after * 1000);
    CU_ASSERT_TRUE(lost_after >= 0);
    CU_ASSERT_TRUE(lost_after < 1.5);
    dlt_sleep_ms(500);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    CU_ASSERT_TRUE(lost_m == &m);
    CU_ASSERT_STRING_EQUAL(lost_name, "fail/lost");
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_INT_EQ(dlt_key_exists("fail/lost"), 0);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);

    /* A fresh hold works, and is not reported. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* ------------------------------------ restart while a waiter waits */

struct rw_holder {
    int hold_w, unlock_r;
};

static int restart_holder_fn(void *p) {
    struct rw_holder *h = p;
    dlock_mutex_t m;
    dlock_mutexattr_t a;
    if (dlock_mutexattr_init(&a) != 0 || dlock_mutexattr_setlease(&a, 30000) != 0) return 10;
    if (dlock_mutex_init(&m, "fail/wait", &a) != 0) return 11;
    if (dlock_mutex_lock(&m) != 0) return 12;
    if (dlt_pipe_put(h->hold_w, 'H') != 0) return 13;
    if (dlt_pipe_get(h->unlock_r, 20000) != 'U') return 14;
    /* The server lost the key: this hold is gone. */
    int rc = dlock_mutex_unlock(&m);
    if (rc != EPERM) return 20 + (rc & 0x3f);
    return 0;
}

struct rw_waiter {
    dlock_mutex_t *m;
    int rc, unlock_rc;
    double t_done;
};

static void *restart_waiter_thread(void *p) {
    struct rw_waiter *w = p;
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 15000);
    w->rc = dlock_mutex_timedlock(w->m, &ts);
    w->t_done = dlt_now();
    w->unlock_rc = w->rc == 0 ? dlock_mutex_unlock(w->m) : -1;
    return NULL;
}

/* ---------------------------- a server that is down is not spun on */

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void *idle_waiter_thread(void *p) {
    struct rw_waiter *w = p;
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 20000);
    w->rc = dlock_mutex_timedlock(w->m, &ts);
    w->t_done = dlt_now();
    w->unlock_rc = w->rc == 0 ? dlock_mutex_unlock(w->m) : -1;
    return NULL;
}

/* While the server is down, a process holding a lock (its renewals get no
 * answer) and waiting for another (its subscriber cannot reconnect) asks
 * again with pauses, not in a loop: over 1.5 s of outage the process uses
 * well under a quarter second of CPU (a thread spinning on refused connections
 * uses about all of one core).  Then, with the server back, the waiter
 * gets its lock. */
static void test_outage_not_spun_on(void) {
    dlock_client_t *cl;
    dlock_mutex_t held, other, mine;
    dlock_mutexattr_t a;
    struct rw_waiter w = { &mine, -1, -1, 0 };
    pthread_t th;
    double cpu0, cpu;

    DLT_ASSERT_ERR(dlt_client_make(&cl, dlt_server.url, 20000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, cl), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 3000), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&held, "fail/spin-held", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&mine, "fail/spin-wait", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&other, "fail/spin-wait", NULL), 0); /* the default client: another owner */
    DLT_ASSERT_ERR(dlock_mutex_lock(&held), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&other), 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, idle_waiter_thread, &w) == 0);
    {
        double t0 = dlt_now();
        while (dlt_numsub("dlock:{fail/spin-wait}") < 1 && dlt_now() - t0 < 5.0) dlt_sleep_ms(10);
    }
    DLT_ASSERT_INT_EQ(dlt_numsub("dlock:{fail/spin-wait}"), 1);

    DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);
    cpu0 = cpu_seconds();
    dlt_sleep_ms(1500);
    cpu = cpu_seconds() - cpu0;
    printf("  CPU used by the process over 1.5 s with the server down: %.3f s\n", cpu);
    CU_ASSERT_TRUE(cpu < 0.25);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);

    /* The restarted server lost every key: the waiter's lock is free. */
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc, 0);
    DLT_ASSERT_ERR(w.unlock_rc, 0);
    (void)dlock_mutex_unlock(&held); /* lost with the data: EPERM, or 0 if renewed in time */
    (void)dlock_mutex_unlock(&other);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&held), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mine), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&other), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

static void test_waiter_survives_restart(void) {
    int hold[2], unl[2];
    dlock_mutex_t m;
    pthread_t th;
    CU_ASSERT_FATAL(pipe(hold) == 0 && pipe(unl) == 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "fail/wait", NULL), 0);

    struct rw_holder h = { hold[1], unl[0] };
    pid_t pid = dlt_spawn(restart_holder_fn, &h);
    CU_ASSERT_FATAL(pid > 0);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(hold[0], 10000), 'H');

    struct rw_waiter w = { &m, -1, -1, 0 };
    CU_ASSERT_FATAL(pthread_create(&th, NULL, restart_waiter_thread, &w) == 0);
    double t0 = dlt_now();
    while (dlt_numsub("dlock:{fail/wait}") < 1 && dlt_now() - t0 < 5.0) dlt_sleep_ms(10);
    DLT_ASSERT_INT_EQ(dlt_numsub("dlock:{fail/wait}"), 1); /* the waiter sleeps */
    dlt_sleep_ms(100);

    /* Crash and restart: the subscription breaks, the data is lost. */
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&dlt_server), 0);
    dlt_sleep_ms(200);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    double t_restart = dlt_now();
    CU_ASSERT_TRUE(dlt_pipe_put(unl[1], 'U') == 0);
    int st = dlt_wait(pid, 10000);
    double t_unlocked = dlt_now();
    DLT_ASSERT_INT_EQ(st, 0); /* the holder's unlock: EPERM */

    pthread_join(th, NULL);
    printf("  waiter: %s %.0f ms after the restart (holder's unlock returned after %.0f ms)\n",
           dlock_err_name(w.rc), (w.t_done - t_restart) * 1000, (t_unlocked - t_restart) * 1000);
    DLT_ASSERT_ERR(w.rc, 0);
    CU_ASSERT_TRUE(w.t_done - t_restart < 1.5);
    CU_ASSERT_TRUE(w.t_done - t_unlocked < 1.0);
    DLT_ASSERT_ERR(w.unlock_rc, 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    close(hold[0]);
    close(hold[1]);
    close(unl[0]);
    close(unl[1]);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_unreachable_short_bound),
    DLT_TEST(test_unreachable_default_bound),
    DLT_TEST(test_password_never_in_errors),
    DLT_TEST(test_restart_loses_hold),
    DLT_TEST(test_waiter_survives_restart),
    DLT_TEST(test_outage_not_spun_on),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "failure", tests);
}
