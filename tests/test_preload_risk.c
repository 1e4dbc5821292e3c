/* labels: redis; timeout: 120 */
/* test_preload_risk.c -- DLOCK_ON_RISK=signal:SIG in the LD_PRELOAD mode.
 *
 * flock(1), under the preload, holds a mapped file lock (its keeper holds
 * the cluster lock, lease 10 s) and runs a shell that waits.  The server
 * then stops answering (the fault proxy swallows everything): the
 * keeper's renewals fail, and with a third of the lease left, before the
 * lease runs out, the program (flock) is sent SIGUSR1, which it does not
 * catch: it dies of it.  Without DLOCK_ON_RISK it would not, until its
 * command ends.  (A lease of 10 s is the preload's: the test takes ~7 s.)
 */
#include "fixture.h"
#include "proxy.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

static pid_t flock_start(const char *url, const char *risk) {
    pid_t pid = fork();
    if (pid == 0) {
        char map[512], lk[512], job[1024];
        snprintf(map, sizeof map, "file:%s", dlt_tpath("*"));
        snprintf(lk, sizeof lk, "%s", dlt_tpath("lk"));
        /* bounded, and it ends with the test's folder too (the lock's
         * file description is the shell's as well as flock's) */
        snprintf(
            job, sizeof job,
            ": > '%s'; i=0; while [ ! -e '%s' ] && [ -e '%s' ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done",
            dlt_tpath("started"), dlt_tpath("go"), dlt_tpath("started"));
        setenv("LD_PRELOAD", DLPL_SO, 1);
        setenv("DLOCK_MAP", map, 1);
        setenv("DLOCK_URL", url, 1);
        if (risk != NULL) setenv("DLOCK_ON_RISK", risk, 1);
        else unsetenv("DLOCK_ON_RISK");
        execlp("flock", "flock", lk, "sh", "-c", job, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits up to s seconds for pid: its wait status, or -1 (still running). */
static int wait_for(pid_t pid, double s) {
    double end = dlt_now() + s;
    int status;
    while (dlt_now() < end) {
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        dlt_sleep_ms(10);
    }
    return -1;
}

static void test_risk_signals_the_program(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    char url[256];
    double t0, took;
    pid_t pid;
    int status;
    CU_ASSERT_FATAL(px != NULL);
    dlt_tdir_make("dlplrisk");
    snprintf(url, sizeof url, "%s?connect_timeout_ms=2000", dlt_proxy_url(px));
    pid = flock_start(url, "signal:USR1");
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_FATAL(dlt_twait_file("started", 10000));
    DLT_ASSERT_INT_EQ(dlt_key_exists(dlt_tpath("lk")), 1); /* mapped: its keeper holds the cluster lock */
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(px);
    t0 = dlt_now();
    status = wait_for(pid, 15);
    took = dlt_now() - t0;
    printf("  flock: %s %d after %.2f s\n", status == -1 ? "still running" : WIFSIGNALED(status) ? "signal" : "exit",
           status == -1 ? 0 : WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), took);
    CU_ASSERT(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR1);
    /* with a third of the lease (10 s) left: not before renewals could
     * fail, before the lease ran out */
    CU_ASSERT(took > 3.0 && took < 9.5);
    if (status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    dlt_ttouch("go");
    dlt_proxy_pass(px);
    dlt_proxy_stop(px);
    dlt_tdir_done();
}

/* Without DLOCK_ON_RISK (and with a bad one, which is said and ignored)
 * the program is left alone while its lease is at risk. */
static void test_no_risk_policy(void) {
    dlt_proxy *px = dlt_proxy_start(dlt_server.port);
    char url[256];
    pid_t pid;
    int status;
    CU_ASSERT_FATAL(px != NULL);
    dlt_tdir_make("dlplrisk");
    snprintf(url, sizeof url, "%s?connect_timeout_ms=2000", dlt_proxy_url(px));
    pid = flock_start(url, "signal:NOSUCH");
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_FATAL(dlt_twait_file("started", 10000));
    DLT_ASSERT_INT_EQ(dlt_key_exists(dlt_tpath("lk")), 1); /* mapped: its keeper holds the cluster lock */
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_proxy_close_all(px);
    status = wait_for(pid, 8);
    CU_ASSERT(status == -1); /* still running, past the point the policy would have signalled */
    dlt_ttouch("go");
    dlt_proxy_pass(px);
    dlt_proxy_close_all(px);
    if (status == -1) status = wait_for(pid, 15);
    CU_ASSERT(status != -1 && !WIFSIGNALED(status));
    if (status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    dlt_proxy_stop(px);
    dlt_tdir_done();
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_risk_signals_the_program),
    DLT_TEST(test_no_risk_policy),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "preload_risk", tests);
}
