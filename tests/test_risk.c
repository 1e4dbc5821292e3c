/* labels: redis cluster */
/* test_risk.c -- the lease-at-risk warning (dlock_mutexattr_setriskcallback).
 *
 * A holder reaches the suite's real redis-server through the fault proxy;
 * the proxy then answers nothing.  Its renewals fail, and the warning must
 * come while the lease is still valid by the holder's own clock, with the
 * margin left, before the lost-lock handler; a renewal that succeeds
 * after it says DLOCK_LEASE_RECOVERED.  A holder whose renewals succeed
 * hears nothing, whatever its margin.  The same on Redis Cluster and
 * Sentinel, their servers paused.  And `dlock exec --risk-signal`.
 */
#include "fixture.h"
#include "fixture_multi.h"
#include "proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

#define LEASE_MS 1500u
#define DRIFT_MS 100u
#define MARGIN_MS 500u

/* What the handlers saw (written on the renewal thread). */
static int risk_calls, recovered_calls, lost_calls, risk_event_bad;
static long long risk_at_us, recovered_at_us, lost_at_us;
static int risk_left_ms, recovered_left_ms;

static void on_risk(dlock_mutex_t *m, const char *name, int event, unsigned left_ms, void *arg) {
    long long now = (long long)(dlt_now() * 1e6);
    (void)m;
    if (arg != &risk_calls || strcmp(name, "risk/held") != 0) dlt_flag_add(&risk_event_bad, 1);
    if (event == DLOCK_LEASE_AT_RISK) {
        __atomic_store_n(&risk_left_ms, (int)left_ms, __ATOMIC_SEQ_CST);
        __atomic_store_n(&risk_at_us, now, __ATOMIC_SEQ_CST);
        dlt_flag_add(&risk_calls, 1);
    } else if (event == DLOCK_LEASE_RECOVERED) {
        __atomic_store_n(&recovered_left_ms, (int)left_ms, __ATOMIC_SEQ_CST);
        __atomic_store_n(&recovered_at_us, now, __ATOMIC_SEQ_CST);
        dlt_flag_add(&recovered_calls, 1);
    } else {
        dlt_flag_add(&risk_event_bad, 1);
    }
}

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    __atomic_store_n(&lost_at_us, (long long)(dlt_now() * 1e6), __ATOMIC_SEQ_CST);
    dlt_flag_add(&lost_calls, 1);
}

static void reset_seen(void) {
    risk_calls = recovered_calls = lost_calls = risk_event_bad = 0;
    risk_at_us = recovered_at_us = lost_at_us = 0;
    risk_left_ms = recovered_left_ms = 0;
}

/* A holder of "risk/held" through proxy px (margin as given). */
static void holder_make(dlt_proxy *px, dlock_client_t **c, dlock_mutex_t *m, unsigned margin) {
    dlock_mutexattr_t a;
    char url[256];
    snprintf(url, sizeof url, "%s/1?drift_ms=%u&connect_timeout_ms=2000", dlt_proxy_url(px), DRIFT_MS);
    DLT_ASSERT_ERR(dlt_client_make(c, url, 5000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, LEASE_MS), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, *c), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setriskcallback(&a, on_risk, &risk_calls, margin), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(m, "risk/held", &a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
}

static void test_attr_checks(void) {
    dlock_mutexattr_t a;
    DLT_ASSERT_ERR(dlock_mutexattr_setriskcallback(NULL, on_risk, NULL, 100), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setriskcallback(&a, on_risk, NULL, 0), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_setriskcallback(&a, on_risk, NULL, 100), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setriskcallback(&a, NULL, NULL, 0), 0); /* off again */
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setriskcallback(&a, on_risk, NULL, 100), EINVAL); /* destroyed */
}

/* Cut off after the lock: the warning comes with the margin left, then the
 * loss, by the holder's clock; no "recovered". */
static void test_warned_before_loss(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    double t0, end, risk_t, lost_t;
    CU_ASSERT_FATAL(px != NULL);
    reset_seen();
    holder_make(px, &c, &m, MARGIN_MS);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_sleep_ms(100);
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(px);
    end = t0 + 4.0;
    while (dlt_flag_get(&lost_calls) == 0 && dlt_now() < end) dlt_sleep_ms(5);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&risk_calls), 1);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 1);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&recovered_calls), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&risk_event_bad), 0);
    risk_t = __atomic_load_n(&risk_at_us, __ATOMIC_SEQ_CST) / 1e6 - t0;
    lost_t = __atomic_load_n(&lost_at_us, __ATOMIC_SEQ_CST) / 1e6 - t0;
    printf("  at risk %.3f s (left %d ms), lost %.3f s after the lock\n", risk_t, risk_left_ms, lost_t);
    /* the margin left by the holder's clock (a few ms for the wake-up) */
    CU_ASSERT(risk_left_ms + 25 >= (int)MARGIN_MS);
    CU_ASSERT(risk_left_ms <= (int)(LEASE_MS - DRIFT_MS));
    CU_ASSERT(lost_t - risk_t >= (MARGIN_MS - 25) / 1000.0);
    /* not before the renewals could have failed: at a third of the lease at the earliest */
    CU_ASSERT(risk_t >= LEASE_MS / 3 / 1000.0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

/* Cut off until the warning, then back: a renewal succeeds, "recovered"
 * is told with the lease renewed, the hold lives on and unlocks. */
static void test_recovered(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    double t0, end;
    CU_ASSERT_FATAL(px != NULL);
    reset_seen();
    holder_make(px, &c, &m, MARGIN_MS);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(px);
    end = t0 + 3.0;
    while (dlt_flag_get(&risk_calls) == 0 && dlt_now() < end) dlt_sleep_ms(2);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&risk_calls), 1);
    /* the server is back: connections hung in the black hole are cut
     * (after the switch has reached every proxy thread: one whose request
     * was swallowed just before it would hang on) */
    dlt_proxy_pass(px);
    dlt_sleep_ms(60);
    dlt_proxy_close_all(px);
    end = dlt_now() + 2.0;
    while (dlt_flag_get(&recovered_calls) == 0 && dlt_flag_get(&lost_calls) == 0 && dlt_now() < end) dlt_sleep_ms(2);
    printf("  at risk %.3f s, recovered %.3f s (left %d ms)\n",
           __atomic_load_n(&risk_at_us, __ATOMIC_SEQ_CST) / 1e6 - t0,
           __atomic_load_n(&recovered_at_us, __ATOMIC_SEQ_CST) / 1e6 - t0, recovered_left_ms);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&recovered_calls), 1);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
    CU_ASSERT(recovered_left_ms > (int)MARGIN_MS); /* a whole lease again, less what the renewal took */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    /* still held well past the first lease: renewed */
    dlt_sleep_ms(LEASE_MS);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&risk_calls), 1);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&risk_event_bad), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

/* A healthy hold for two leases: no warning, even with a margin larger
 * than the lease (it counts as half the lease). */
static void test_quiet_when_renewed(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    CU_ASSERT_FATAL(px != NULL);
    reset_seen();
    holder_make(px, &c, &m, 10 * LEASE_MS);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_sleep_ms(2 * LEASE_MS);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&risk_calls), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&recovered_calls), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

/* `dlock exec --risk-signal USR1`: the command gets SIGUSR1 while the
 * lock is still held, once the server stops answering; its handler
 * writes a file.  dlock's stderr says so, and only later that the lock
 * was lost (the server never comes back): exit 75. */
static void test_exec_risk_signal(void) {
    static const char job[] = "trap ': > \"$3\"' USR1; : > \"$1\"; "
                              "while [ ! -e \"$2\" ]; do sleep 0.02; done";
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    char url[256], err[4096];
    double end, t0, risk_t = -1;
    pid_t pid;
    int status = -1;
    FILE *f;
    size_t n;
    CU_ASSERT_FATAL(px != NULL);
    dlt_tdir_make("dlrisk");
    snprintf(url, sizeof url, "%s/1?drift_ms=%u&connect_timeout_ms=2000", dlt_proxy_url(px), DRIFT_MS);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int fd = open(dlt_tpath("err"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) dup2(fd, 2);
        execl(DLOCK_CLI, DLOCK_CLI, "exec", "--url", url, "--lease", "1500ms", "--risk-signal", "USR1", "risk/exec",
              "--", "sh", "-c", job, "sh", dlt_tpath("started"), dlt_tpath("go"), dlt_tpath("risk"), (char *)NULL);
        _exit(127);
    }
    CU_ASSERT_FATAL(dlt_twait_file("started", 5000));
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(px);
    t0 = dlt_now();
    if (dlt_twait_file("risk", 3000)) risk_t = dlt_now() - t0;
    end = dlt_now() + 15;
    while (waitpid(pid, &status, WNOHANG) == 0 && dlt_now() < end) dlt_sleep_ms(10);
    if (dlt_now() >= end) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    err[0] = '\0';
    if ((f = fopen(dlt_tpath("err"), "r")) != NULL) {
        n = fread(err, 1, sizeof err - 1, f);
        err[n] = '\0';
        fclose(f);
    }
    printf("  the command's handler ran %.3f s after the server stopped answering; dlock exec: exit %d, stderr: %s",
           risk_t, WIFEXITED(status) ? WEXITSTATUS(status) : -1, err);
    /* before the lease (1.5 s less the drift) ran out by the holder's clock */
    CU_ASSERT(risk_t > 0 && risk_t < (LEASE_MS - DRIFT_MS) / 1000.0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "at risk"));
    CU_ASSERT(strstr(err, "at risk") != NULL && strstr(err, "lost the lock") != NULL &&
              strstr(err, "at risk") < strstr(err, "lost the lock"));
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 75);
    dlt_proxy_stop(px);
    dlt_tdir_done();
}

static void test_exec_risk_signal_usage(void) {
    int status = -1;
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        execl(DLOCK_CLI, DLOCK_CLI, "exec", "--risk-signal", "NOSUCH", "risk/exec", "--", "true", (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 64);
}

/* The warning on a deployment of several servers: a mutex of client c
 * (url) is held; the servers in pids are paused (SIGSTOP: connections
 * stay open, nothing is answered) until the warning comes, then go on
 * (SIGCONT): the renewal waiting on them is answered, "recovered" comes,
 * and the hold lives on. */
static void risk_pause_cycle(const char *url, const char *name, const pid_t *pids, int n) {
    dlock_client_t *c = NULL;
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    double t0, end;
    int i;
    reset_seen();
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 5000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, LEASE_MS), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setriskcallback(&a, on_risk, &risk_calls, MARGIN_MS), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, &a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    for (i = 0; i < n; i++) kill(pids[i], SIGSTOP);
    end = t0 + 3.0;
    while (dlt_flag_get(&risk_calls) == 0 && dlt_flag_get(&lost_calls) == 0 && dlt_now() < end) dlt_sleep_ms(2);
    for (i = 0; i < n; i++) kill(pids[i], SIGCONT);
    end = dlt_now() + 2.0;
    while (dlt_flag_get(&recovered_calls) == 0 && dlt_flag_get(&lost_calls) == 0 && dlt_now() < end) dlt_sleep_ms(2);
    printf("  %s: at risk %.3f s (left %d ms), recovered %.3f s\n", name,
           __atomic_load_n(&risk_at_us, __ATOMIC_SEQ_CST) / 1e6 - t0, risk_left_ms,
           __atomic_load_n(&recovered_at_us, __ATOMIC_SEQ_CST) / 1e6 - t0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&risk_calls), 1);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&recovered_calls), 1);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&lost_calls), 0);
    CU_ASSERT(risk_left_ms + 25 >= (int)MARGIN_MS);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* Redis Cluster: every master paused (the lock's among them). */
static void test_risk_cluster(void) {
    dlt_cluster cl;
    char url[700], base[600];
    pid_t pids[DLT_CLUSTER_MAX];
    int i;
    memset(&cl, 0, sizeof cl);
    CU_ASSERT_EQUAL_FATAL(dlt_cluster_start(&cl, 3, 0, 0, NULL), 0);
    dlt_cluster_url(&cl, base, sizeof base, "0", NULL);
    snprintf(url, sizeof url, "%s%sdrift_ms=%u", base, strchr(base, '?') ? "&" : "?", DRIFT_MS);
    for (i = 0; i < cl.n; i++) pids[i] = cl.node[i].pid;
    risk_pause_cycle(url, "risk/cluster", pids, cl.n);
    dlt_cluster_cleanup(&cl);
}

/* Sentinel: the master paused (no replica: nothing to fail over to). */
static void test_risk_sentinel(void) {
    dlt_sentinel st;
    char url[600 + 32];
    memset(&st, 0, sizeof st);
    CU_ASSERT_EQUAL_FATAL(dlt_sentinel_start(&st, 0, 1, NULL, 20000), 0);
    snprintf(url, sizeof url, "%s?drift_ms=%u", st.url, DRIFT_MS);
    risk_pause_cycle(url, "risk/sentinel", &st.node[0].pid, 1);
    dlt_sentinel_cleanup(&st);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_attr_checks),        DLT_TEST(test_warned_before_loss),     DLT_TEST(test_recovered),
    DLT_TEST(test_quiet_when_renewed), DLT_TEST(test_risk_cluster),           DLT_TEST(test_risk_sentinel),
    DLT_TEST(test_exec_risk_signal),   DLT_TEST(test_exec_risk_signal_usage), { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "risk", tests);
}
