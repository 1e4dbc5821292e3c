/* test_cli_graph.c -- who waits for whom, as the dlock program shows it.
 * labels: redis; timeout: 120
 *
 * Issue 23, point 2: `dlock status NAME` lists the lock's waiters (host,
 * pid, thread, since, mode) beside the holder, in the table and in
 * --json.  The waiter is another process, waiting in dlock_mutex_lock.
 */
#define DLT_CK_MOD 120
#include "fixture.h"

#include <dlock.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct gw {
    int go, rc;
};

/* Waits (exclusively) for "g/x" once told to, up to 10 s. */
static int waiter_run(void *p) {
    struct gw *g = p;
    dlock_mutex_t m;
    struct timespec ts;
    DLT_CK(dlt_mutex_make(&m, "g/x", 0, NULL), 0);
    DLT_CKT(dlt_flag_wait(&g->go, 1, 10000));
    ts = dlt_abs_in(CLOCK_REALTIME, 10000);
    g->rc = dlock_mutex_timedlock(&m, &ts);
    if (g->rc == 0) dlock_mutex_unlock(&m);
    dlock_mutex_destroy(&m);
    return 0;
}

static int count(const dlock_lock_waiter_t *w, void *arg) {
    (void)w;
    ++*(int *)arg;
    return 0;
}

/* Runs `dlock status [--json] g/x`: its exit status, its output in out. */
static int status(int json, char *out, size_t cap) {
    char err[4096];
    char *argv[] = { DLOCK_CLI, "status", json ? "--json" : "g/x", json ? "g/x" : NULL, NULL };
    return dlt_run_capture(argv, out, err, cap, 10000);
}

static void test_status_lists_waiters(void) {
    struct gw *g = DLT_SHM_NEW(struct gw, 1);
    char out[8192], want[512], host[256];
    dlock_mutex_t m;
    double end;
    pid_t pid;
    int n = 0;
    CU_ASSERT_FATAL((pid = dlt_spawn(waiter_run, g)) > 0); /* (forked before this process's threads) */
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "g/x", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    /* No waiter yet: an empty list. */
    DLT_ASSERT_INT_EQ(status(1, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "\"waiters\":[]") != NULL);
    dlt_flag_set(&g->go, 1);
    for (end = dlt_now() + 5; n != 1 && dlt_now() < end; dlt_sleep_ms(10)) {
        n = 0;
        DLT_ASSERT_ERR(dlock_lock_waiters(NULL, "g/x", count, &n), 0);
    }
    DLT_ASSERT_INT_EQ(n, 1);
    gethostname(host, sizeof host);
    DLT_ASSERT_INT_EQ(status(1, out, sizeof out), 0);
    snprintf(want, sizeof want, "\"waiters\":[{\"host\":\"%s\",\"pid\":%ld,", host, (long)pid);
    CU_ASSERT(strstr(out, want) != NULL);
    CU_ASSERT(strstr(out, "\"mode\":\"exclusive\",\"deadlock\":false}]}") != NULL);
    CU_ASSERT(strstr(out, "\"since_ms\":") != NULL && strstr(out, "\"waited_ms\":") != NULL);
    CU_ASSERT(strstr(out, "\"state\":\"exclusive\"") != NULL); /* the holder, as before */
    if (strstr(out, want) == NULL) fprintf(stderr, "  status --json said: %s\n", out);
    DLT_ASSERT_INT_EQ(status(0, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "waiters          1\n") != NULL);
    snprintf(want, sizeof want, "  %s, pid %ld, thread ", host, (long)pid);
    CU_ASSERT(strstr(out, want) != NULL);
    CU_ASSERT(strstr(out, ", exclusive, since ") != NULL);
    if (strstr(out, want) == NULL) fprintf(stderr, "  status said: %s\n", out);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 15000), 0);
    DLT_ASSERT_ERR(g->rc, 0);
    /* Its wait is over: listed no more. */
    DLT_ASSERT_INT_EQ(status(1, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "\"waiters\":[]") != NULL);
    dlock_mutex_destroy(&m);
    DLT_SHM_FREE(g, 1);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_status_lists_waiters),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "cli_graph", tests);
}
