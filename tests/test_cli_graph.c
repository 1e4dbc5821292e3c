/* test_cli_graph.c -- who waits for whom, as the dlock program shows it.
 * labels: redis; timeout: 120
 *
 * `dlock status NAME` lists the lock's waiters (host,
 * pid, thread, since, mode) beside the holder, in the table and in
 * --json; `dlock graph [--json]` shows who waits for which lock held by
 * whom, with a cycle of two processes marked; `dlock graph --dot`, drawn
 * by Graphviz's dot, has the cycle in red; the Prometheus figures count it
 * (dlock_wait_cycles).  Waiters are other
 * processes, waiting in dlock_mutex_timedlock.
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
    CU_ASSERT(strstr(out, "\"mode\":\"exclusive\",\"deadlock\":false}],\"kind\":\"lock\"") != NULL);
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

/* ------------------------------------------------------------- graph */

struct gc {
    int held, go, rc[2];
};
struct gcm {
    struct gc *s;
    int i;
};

/* Member i of a cycle of DEFAULT mutexes (nobody detects: it stays until
 * the members' own 4 s bound): holds g/c/i, waits for g/c/(i+1). */
static int cycle_member(void *p) {
    struct gcm *m = p;
    dlock_mutex_t mine, next;
    char a[32], b[32];
    struct timespec ts;
    snprintf(a, sizeof a, "g/c/%d", m->i);
    snprintf(b, sizeof b, "g/c/%d", 1 - m->i);
    DLT_CK(dlt_mutex_make(&mine, a, 0, NULL), 0);
    DLT_CK(dlt_mutex_make(&next, b, 0, NULL), 0);
    DLT_CK(dlock_mutex_lock(&mine), 0);
    dlt_flag_add(&m->s->held, 1);
    DLT_CKT(dlt_flag_wait(&m->s->go, 1, 10000));
    ts = dlt_abs_in(CLOCK_REALTIME, 4000);
    m->s->rc[m->i] = dlock_mutex_timedlock(&next, &ts);
    DLT_CK(dlock_mutex_unlock(&mine), 0);
    dlock_mutex_destroy(&mine);
    dlock_mutex_destroy(&next);
    return 0;
}

static int graph_run(int json, char *out, size_t cap) {
    char err[4096];
    char *argv[] = { DLOCK_CLI, "graph", json ? "--json" : "g/*", json ? "g/*" : NULL, NULL };
    return dlt_run_capture(argv, out, err, cap, 10000);
}

/* `dlock graph --dot` of the g/ locks rendered by Graphviz's dot into its plain
 * format (one line per node and edge, with its colour): the two locks
 * as boxes, the two threads, and the cycle's four arrows in red. */
static void dot_check(void) {
    char out[16384], prelude[1024], *line, *save = NULL;
    int boxes = 0, threads = 0, red_edges = 0, edges = 0, rc;
    dlt_tdir_make("dlgraph");
    snprintf(prelude, sizeof prelude, "cd '%s' || exit 1\nDLOCK='%s'\nDOT='%s'\n", dlt_tdir(), DLOCK_CLI, DLT_DOT);
    rc = dlt_sh_scenario(dlt_tdir(), prelude,
                         "\"$DLOCK\" graph --dot 'g/*' > graph.dot && \"$DOT\" -Tplain graph.dot && "
                         "\"$DOT\" -Tsvg graph.dot > graph.svg && grep -c '<svg' graph.svg >&2",
                         out, sizeof out);
    DLT_ASSERT_INT_EQ(rc, 0);
    for (line = strtok_r(out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "node \"L:g/c/", 12) == 0 && strstr(line, " box ") != NULL) boxes++;
        if (strncmp(line, "node \"T:", 8) == 0 && strstr(line, " ellipse red ") != NULL) threads++;
        if (strncmp(line, "edge ", 5) == 0 && ++edges && strstr(line, " red") == line + strlen(line) - 4)
            red_edges++;
    }
    DLT_ASSERT_INT_EQ(boxes, 2);
    DLT_ASSERT_INT_EQ(threads, 2);
    DLT_ASSERT_INT_EQ(edges, 4);
    DLT_ASSERT_INT_EQ(red_edges, 4);
    if (red_edges != 4 || boxes != 2) fprintf(stderr, "  dot -Tplain said:\n%s\n", out);
    dlt_tdir_done();
}

/* Two processes in a cycle: `dlock graph` shows both locks with their
 * holder and waiter, the waiters marked, and the cycle once. */
static void test_graph_marks_cycle(void) {
    struct gc *s = DLT_SHM_NEW(struct gc, 1);
    struct gcm m[2];
    char out[16384];
    pid_t pid[2];
    double end;
    int i, n = 0, k = 0;
    for (i = 0; i < 2; i++) {
        m[i].s = s;
        m[i].i = i;
        CU_ASSERT_FATAL((pid[i] = dlt_spawn(cycle_member, &m[i])) > 0);
    }
    CU_ASSERT(dlt_flag_wait(&s->held, 2, 10000));
    DLT_ASSERT_INT_EQ(graph_run(0, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "nobody waits") != NULL);
    dlt_flag_set(&s->go, 1);
    for (end = dlt_now() + 3; (n != 1 || k != 1) && dlt_now() < end; dlt_sleep_ms(10)) {
        n = k = 0;
        DLT_ASSERT_ERR(dlock_lock_waiters(NULL, "g/c/0", count, &n), 0);
        DLT_ASSERT_ERR(dlock_lock_waiters(NULL, "g/c/1", count, &k), 0);
    }
    CU_ASSERT(n == 1 && k == 1);
    DLT_ASSERT_INT_EQ(graph_run(1, out, sizeof out), 0);
    CU_ASSERT(strncmp(out, "{\"cycles\":[[{\"host\":", 20) == 0);
    CU_ASSERT(strstr(out, "]],\"locks\":[") != NULL); /* one cycle */
    CU_ASSERT(strstr(out, "\"waits_for\":\"g/c/0\"") != NULL && strstr(out, "\"waits_for\":\"g/c/1\"") != NULL);
    CU_ASSERT(strstr(out, "\"in_cycle\":true") != NULL && strstr(out, "\"in_cycle\":false") == NULL);
    CU_ASSERT(strstr(out, "\"name\":\"g/c/0\",\"holder\":{") != NULL);
    if (strstr(out, "\"in_cycle\":true") == NULL) fprintf(stderr, "  graph --json said: %s\n", out);
    DLT_ASSERT_INT_EQ(graph_run(0, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "g/c/0: held by ") != NULL && strstr(out, "g/c/1: held by ") != NULL);
    CU_ASSERT(strstr(out, "[cycle]") != NULL);
    CU_ASSERT(strstr(out, "cycle 1:") != NULL && strstr(out, "cycle 2:") == NULL);
    dot_check();
    /* The same cycle, counted in the Prometheus figures (`dlock top
     * --prometheus`, what `dlock exporter` serves). */
    {
        char err[4096];
        char *argv[] = { DLOCK_CLI, "top", "--once", "--prometheus", NULL };
        DLT_ASSERT_INT_EQ(dlt_run_capture(argv, out, err, sizeof out, 10000), 0);
        CU_ASSERT(strstr(out, "\ndlock_wait_cycles 1\n") != NULL);
        CU_ASSERT(strstr(out, "\ndlock_lock_waiters{lock=\"g/c/0\"} 1\n") != NULL);
    }
    for (i = 0; i < 2; i++) DLT_ASSERT_INT_EQ(dlt_wait(pid[i], 15000), 0);
    /* DEFAULT mutexes: nobody was failed with EDEADLK; the cycle ended at
     * a member's own time bound.  Which one's came first is the
     * scheduler's: the other may then be granted the lock the first let
     * go before its own bound (0), or time out too. */
    CU_ASSERT(s->rc[0] == ETIMEDOUT || s->rc[1] == ETIMEDOUT);
    for (i = 0; i < 2; i++) {
        if (s->rc[i] != 0 && s->rc[i] != ETIMEDOUT) fprintf(stderr, "  member %d: %s\n", i, dlt_errno_label(s->rc[i]));
        CU_ASSERT(s->rc[i] == 0 || s->rc[i] == ETIMEDOUT);
    }
    DLT_SHM_FREE(s, 1);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_status_lists_waiters),
    DLT_TEST(test_graph_marks_cycle),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "cli_graph", tests);
}
