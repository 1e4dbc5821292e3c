/* test_cli_exporter.c -- `dlock exporter`, scraped while it runs.
 * labels: redis, cli; timeout: 120
 *
 * The real program (DLOCK_CLI), scraped by a real curl, its output
 * checked by a real `promtool check metrics`.  The figures of a workload and the holder of a held lock are
 * there, with the lock glob and the lock cap honoured; a stopped or a
 * frozen (SIGSTOP) server is `dlock_up 0` within the scrape timeout, and
 * the exporter recovers with the server; the host's outage record
 * is the breaker's metric; a hold lost under a break,
 * EDEADLK answers and lease-at-risk warnings are counters, a lock in its
 * lock-delay a gauge of the delay left; the wait and hold histograms count holds
 * in the right buckets and only grow; garbage HTTP and a slowloris
 * client, and a flood of idle connections from one address, leave it
 * serving; bad options exit 64, a port in use 69.  The
 * rules and the dashboard of contrib/ pass promtool and name only metrics
 * the exporter serves.
 */
#include "figures.h"
#include "fixture.h"

#include <dlock.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#if !defined(DLOCK_CLI) || !defined(DLT_CURL) || !defined(DLT_PROMTOOL) || !defined(DLT_PYTHON) || \
    !defined(DLT_SOURCE_DIR)
#error "DLOCK_CLI, DLT_CURL, DLT_PROMTOOL, DLT_PYTHON (programs) and DLT_SOURCE_DIR must be defined by the build"
#endif

#define OUT_MAX 65536
static char out[OUT_MAX], err[OUT_MAX];
static int port;
static pid_t exporter;

/* A TCP connection to the exporter's port (reads time out after 5 s):
 * the fd, or -1. */
static int dial(void) {
    struct timeval tv = { 5, 0 };
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

/* Starts `dlock exporter --listen 127.0.0.1:<free port> ARGS...` (its
 * stderr into the test folder's exporter.err) and waits until it
 * accepts connections: 0, or -1. */
static int exporter_start(const char *a1, const char *a2, const char *a3, const char *a4) {
    char where[64];
    char *argv[16];
    int n = 0, fd = -1;
    double end;
    port = dlt_free_port();
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    argv[n++] = (char *)DLOCK_CLI;
    argv[n++] = "--url";
    argv[n++] = dlt_server.url;
    argv[n++] = "exporter";
    argv[n++] = "--listen";
    argv[n++] = where;
    argv[n++] = "--scrape-timeout";
    argv[n++] = "2s";
    if (a1) argv[n++] = (char *)a1;
    if (a2) argv[n++] = (char *)a2;
    if (a3) argv[n++] = (char *)a3;
    if (a4) argv[n++] = (char *)a4;
    argv[n] = NULL;
    if ((exporter = fork()) == 0) {
        int e = open(dlt_tpath("exporter.err"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(e, 2);
        execv(argv[0], argv);
        _exit(120);
    }
    if (exporter < 0) return -1;
    dlt_bg_add(exporter);
    for (end = dlt_now() + 5; fd < 0 && dlt_now() < end; dlt_sleep_ms(20))
        fd = dial();
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

/* SIGTERM: it stops, exit 0. */
static void exporter_stop(void) {
    kill(exporter, SIGTERM);
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(exporter, 5000)), 0);
    dlt_bg_forget(exporter);
}

/* curl of path: the HTTP status (-1: curl failed); the body in out and in
 * the test folder's file body.txt; *took (if not NULL) its seconds. */
static int scrape(const char *path, double *took) {
    char url[128];
    char *argv[] = { DLT_CURL, "-sS", "--max-time", "10", "-o", NULL, "-w", "%{http_code}", url, NULL };
    double t0 = dlt_now();
    int rc, status;
    FILE *f;
    size_t k;
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    argv[5] = dlt_tpath("body.txt");
    rc = dlt_run_capture(argv, out, err, OUT_MAX, 15000);
    if (took) *took = dlt_now() - t0;
    if (rc != 0 || sscanf(out, "%d", &status) != 1) {
        fprintf(stderr, "  curl %s: exit %d: %s\n", url, rc, err);
        return -1;
    }
    out[0] = '\0';
    if ((f = fopen(dlt_tpath("body.txt"), "r")) != NULL) {
        k = fread(out, 1, OUT_MAX - 1, f);
        out[k] = '\0';
        fclose(f);
    }
    return status;
}

/* `promtool check metrics` on body.txt: its exit status (its words in err). */
static int promtool_check(void) {
    char cmd[512];
    FILE *p;
    snprintf(cmd, sizeof cmd, "'%s' check metrics < '%s' 2>&1", DLT_PROMTOOL, dlt_tpath("body.txt"));
    p = popen(cmd, "r");
    return p == NULL ? -1 : dlt_pclose_read(p, err, OUT_MAX);
}

/* Waits up to ms for the figures of `name` to count `want` acquisitions:
 * 1 when they do, else 0. */
static int acquisitions_reach(const char *name, uint64_t want, int ms) {
    dlock_lock_stats_t s[16];
    double end = dlt_now() + ms / 1000.0;
    size_t n, i;
    do {
        if (dlock_stats(NULL, 60, s, 16, &n) == 0)
            for (i = 0; i < n; i++)
                if (strcmp(s[i].name, name) == 0 && s[i].acquisitions == want) return 1;
        dlt_sleep_ms(50);
    } while (dlt_now() < end);
    return 0;
}

/* The value of the line that starts with `series ` in out, or -1. */
static double value_of(const char *series) {
    char key[256];
    const char *p;
    snprintf(key, sizeof key, "\n%s ", series);
    p = strstr(out, key);
    return p == NULL ? -1 : strtod(p + strlen(key), NULL);
}

/* The workload's figures, a held lock with its holder's time, a name that
 * needs escaping; only the e/ locks (--locks); promtool accepts it all. */
static void test_scrape(void) {
    dlock_mutex_t held, odd, busy, more[8];
    dlock_client_t *hc;
    const char *oddname = "e/q\"uo\\te\nnot-utf8:\xff";
    char name[32];
    int i;
    dlt_tdir_make("dlexp");
    dlt_figures_workload("e/a", 5, 10, "x/b", 1); /* flushed by its client's destruction */
    DLT_ASSERT_ERR(dlt_mutex_make(&held, "e/held", 0, NULL), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&odd, oddname, 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&held), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&odd), 0);
    for (i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "m/%d", i);
        DLT_ASSERT_ERR(dlt_mutex_make(&more[i], name, 0, NULL), 0);
        DLT_ASSERT_ERR(dlock_mutex_lock(&more[i]), 0);
    }
    /* e/a, the busiest, held now by a client whose figures are flushed
     * (its sixth acquisition, within the second). */
    CU_ASSERT_FATAL(dlt_figures_client(&hc) == 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&busy, "e/a", 0, hc), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&busy), 0);
    CU_ASSERT(acquisitions_reach("e/a", 6, 5000));
    dlt_sleep_ms(1000); /* e/held's hold: at least a second long */
    CU_ASSERT_FATAL(exporter_start("--locks", "e/*", NULL, NULL) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(value_of("dlock_up") == 1);
    CU_ASSERT(value_of("dlock_server_round_trip_seconds") >= 0 && value_of("dlock_server_round_trip_seconds") < 1);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_wait_seconds histogram\n") != NULL);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_wait_window_seconds summary\n") != NULL);
    CU_ASSERT(strstr(out, "# HELP dlock_lock_held_seconds ") != NULL);
    /* 6 holds begun over the 60 s window, 5 of ~10 ms ended */
    CU_ASSERT(value_of("dlock_lock_acquisitions_per_second{lock=\"e/a\"}") > 6 / 60.0 - 1e-6);
    CU_ASSERT(value_of("dlock_lock_acquisitions_per_second{lock=\"e/a\"}") < 6 / 60.0 + 1e-6);
    CU_ASSERT(value_of("dlock_lock_releases_per_second{lock=\"e/a\"}") > 5 / 60.0 - 1e-6);
    CU_ASSERT(value_of("dlock_lock_hold_window_seconds{lock=\"e/a\",quantile=\"0.5\"}") >= 0.008);
    CU_ASSERT(value_of("dlock_lock_hold_window_seconds{lock=\"e/a\",quantile=\"0.5\"}") < 0.016);
    /* the 5 holds of 10 ms and more in the histogram, none under 5 ms */
    CU_ASSERT(value_of("dlock_lock_hold_seconds_count{lock=\"e/a\"}") == 5);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_bucket{lock=\"e/a\",le=\"0.005\"}") == 0);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_bucket{lock=\"e/a\",le=\"+Inf\"}") == 5);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_sum{lock=\"e/a\"}") >= 0.05);
    CU_ASSERT(value_of("dlock_lock_wait_seconds_count{lock=\"e/a\"}") == 6);
    CU_ASSERT(value_of("dlock_lock_held{lock=\"e/held\"}") == 1);
    CU_ASSERT(value_of("dlock_lock_held_seconds{lock=\"e/held\"}") >= 1);
    CU_ASSERT(value_of("dlock_lock_lease_remaining_seconds{lock=\"e/held\"}") > 0);
    CU_ASSERT(value_of("dlock_lock_waiters{lock=\"e/held\"}") == 0);
    CU_ASSERT(value_of("dlock_lock_held{lock=\"e/q\\\"uo\\\\te\\nnot-utf8:\xEF\xBF\xBD\"}") == 1);
    CU_ASSERT(strstr(out, "x/b") == NULL && strstr(out, "m/0") == NULL); /* not under e/ */
    CU_ASSERT(value_of("dlock_locks_truncated") == 0);
    CU_ASSERT(value_of("dlock_wait_cycles") == 0);
    CU_ASSERT(value_of("dlock_exporter_scrapes_total") == 1);
    DLT_ASSERT_INT_EQ(promtool_check(), 0);
    if (value_of("dlock_up") != 1 || err[0]) fprintf(stderr, "  scraped:\n%s\n  promtool: %s\n", out, err);
    exporter_stop();
    /* At most one lock labelled, the busiest, whose holder is found
     * among the ten held locks listed in any order: the cap is said. */
    CU_ASSERT_FATAL(exporter_start("--max-locks", "1", NULL, NULL) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(value_of("dlock_locks_truncated") == 1);
    CU_ASSERT(value_of("dlock_lock_held{lock=\"e/a\"}") == 1);
    CU_ASSERT(strstr(out, "dlock_lock_held{lock=") != NULL);
    CU_ASSERT(strstr(strstr(out, "dlock_lock_held{lock=") + 1, "dlock_lock_held{lock=") == NULL);
    DLT_ASSERT_INT_EQ(promtool_check(), 0);
    exporter_stop();
    DLT_ASSERT_ERR(dlock_mutex_unlock(&held), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&odd), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&busy), 0);
    dlock_mutex_destroy(&held);
    dlock_mutex_destroy(&odd);
    dlock_mutex_destroy(&busy);
    for (i = 0; i < 8; i++) {
        DLT_ASSERT_ERR(dlock_mutex_unlock(&more[i]), 0);
        dlock_mutex_destroy(&more[i]);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(hc), 0);
    dlt_tdir_done();
}

/* Holds of `name` of 30 ms and 300 ms (a client of its own, whose
 * destruction flushes them). */
static void two_holds(const char *name, int second) {
    dlock_client_t *c;
    dlock_mutex_t m;
    CU_ASSERT_FATAL(dlt_figures_client(&c) == 0);
    CU_ASSERT_FATAL(dlt_mutex_make(&m, name, 0, c) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_sleep_ms(30);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    if (second) {
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
        dlt_sleep_ms(300);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* The hold histogram counts a 30 ms hold and a 300 ms one in their
 * buckets (with room for a loaded machine's late wake-ups); a later
 * hold grows the counters, none of which shrinks from one scrape to the
 * next; promtool accepts them. */
static void test_histograms(void) {
    static const char *const les[] = { "0.001", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
                                       "0.5", "1", "2.5", "5", "10", "+Inf" };
    char series[128];
    double before[13];
    unsigned i;
    dlt_tdir_make("dlexp");
    two_holds("h/x", 1);
    CU_ASSERT_FATAL(exporter_start("--locks", "h/*", NULL, NULL) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_hold_seconds histogram\n") != NULL);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_bucket{lock=\"h/x\",le=\"0.025\"}") == 0);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_bucket{lock=\"h/x\",le=\"0.1\"}") == 1);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_bucket{lock=\"h/x\",le=\"0.25\"}") == 1);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_bucket{lock=\"h/x\",le=\"0.5\"}") == 2);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_bucket{lock=\"h/x\",le=\"+Inf\"}") == 2);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_count{lock=\"h/x\"}") == 2);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_sum{lock=\"h/x\"}") >= 0.33);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_sum{lock=\"h/x\"}") < 0.6);
    CU_ASSERT(value_of("dlock_lock_wait_seconds_count{lock=\"h/x\"}") == 2);
    DLT_ASSERT_INT_EQ(promtool_check(), 0);
    for (i = 0; i < 13; i++) {
        snprintf(series, sizeof series, "dlock_lock_hold_seconds_bucket{lock=\"h/x\",le=\"%s\"}", les[i]);
        before[i] = value_of(series);
    }
    two_holds("h/x", 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    for (i = 0; i < 13; i++) {
        snprintf(series, sizeof series, "dlock_lock_hold_seconds_bucket{lock=\"h/x\",le=\"%s\"}", les[i]);
        CU_ASSERT(value_of(series) >= before[i]);
        if (i > 0) CU_ASSERT(value_of(series) >= before[i - 1]); /* cumulative */
    }
    CU_ASSERT(value_of("dlock_lock_hold_seconds_bucket{lock=\"h/x\",le=\"0.25\"}") == 2);
    CU_ASSERT(value_of("dlock_lock_hold_seconds_count{lock=\"h/x\"}") == 3);
    DLT_ASSERT_INT_EQ(promtool_check(), 0);
    if (value_of("dlock_lock_hold_seconds_count{lock=\"h/x\"}") != 3) fprintf(stderr, "  scraped:\n%s\n", out);
    exporter_stop();
    dlt_tdir_done();
}

/* The lost hold and the EDEADLK answers as counters; promtool accepts
 * them. */
static void test_lost_and_deadlocks(void) {
    dlt_tdir_make("dlexp");
    DLT_ASSERT_INT_EQ(dlt_figures_trouble("e/lost", "e/dead", 2), 0);
    CU_ASSERT_FATAL(exporter_start("--locks", "e/*", NULL, NULL) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_lost_leases_total counter\n") != NULL);
    CU_ASSERT(strstr(out, "# HELP dlock_lock_deadlocks_total ") != NULL);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_deadlocks_total counter\n") != NULL);
    CU_ASSERT(value_of("dlock_lock_lost_leases_total{lock=\"e/lost\"}") == 1);
    CU_ASSERT(value_of("dlock_lock_deadlocks_total{lock=\"e/lost\"}") == 0);
    CU_ASSERT(value_of("dlock_lock_lost_leases_total{lock=\"e/dead\"}") == 0);
    CU_ASSERT(value_of("dlock_lock_deadlocks_total{lock=\"e/dead\"}") == 2);
    DLT_ASSERT_INT_EQ(promtool_check(), 0);
    if (value_of("dlock_lock_deadlocks_total{lock=\"e/dead\"}") != 2) fprintf(stderr, "  scraped:\n%s\n", out);
    exporter_stop();
    dlt_tdir_done();
}

/* A holder of e/delay with a 20 s lock-delay, in a process of its own
 * (killed by the test: its hold lapses and the delay begins). */
static int delay_holder_main(void *arg) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    (void)arg;
    DLT_CK(dlock_mutexattr_init(&a), 0);
    DLT_CK(dlock_mutexattr_setlease(&a, 300), 0);
    DLT_CK(dlock_mutexattr_setlockdelay(&a, 20000), 0);
    DLT_CK(dlock_mutex_init(&m, "e/delay", &a), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    dlt_sleep_ms(60000);
    return 0;
}

/* Waits up to 10 s for e/delay to be held (held) or in its delay: 1, or 0. */
static int delay_state(int held) {
    double end = dlt_now() + 10;
    dlock_lock_info_t i;
    while (dlt_now() < end) {
        if (dlock_lock_info(NULL, "e/delay", &i) == 0 && (held ? i.held : !i.held && i.delay_left_ms > 0)) return 1;
        dlt_sleep_ms(10);
    }
    return 0;
}

/* The lease-at-risk warnings as a counter (one warning told to e/risk's
 * holder), and a lock in its lock-delay (its holder killed past its
 * lease) with the delay left as a gauge: listed though free, its figure
 * within the 20 s delay; promtool accepts them. */
static void test_risk_and_delay(void) {
    pid_t pid;
    dlt_tdir_make("dlexp");
    DLT_ASSERT_INT_EQ(dlt_figures_risk("e/risk"), 0);
    pid = dlt_spawn(delay_holder_main, NULL);
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_TRUE_FATAL(delay_state(1));
    kill(pid, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_wait(pid, 5000), 128 + SIGKILL);
    CU_ASSERT_TRUE_FATAL(delay_state(0));
    CU_ASSERT_FATAL(exporter_start("--locks", "e/*", NULL, NULL) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_lease_risks_total counter\n") != NULL);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_delay_remaining_seconds gauge\n") != NULL);
    CU_ASSERT(value_of("dlock_lock_lease_risks_total{lock=\"e/risk\"}") == 1);
    CU_ASSERT(value_of("dlock_lock_delay_remaining_seconds{lock=\"e/delay\"}") > 5);
    CU_ASSERT(value_of("dlock_lock_delay_remaining_seconds{lock=\"e/delay\"}") <= 20);
    CU_ASSERT(value_of("dlock_lock_held{lock=\"e/delay\"}") == 0);
    CU_ASSERT(value_of("dlock_lock_delay_remaining_seconds{lock=\"e/risk\"}") == -1); /* none: no row */
    DLT_ASSERT_INT_EQ(promtool_check(), 0);
    if (value_of("dlock_lock_lease_risks_total{lock=\"e/risk\"}") != 1 ||
        value_of("dlock_lock_delay_remaining_seconds{lock=\"e/delay\"}") <= 5)
        fprintf(stderr, "  scraped:\n%s\n", out);
    exporter_stop();
    DLT_ASSERT_ERR(dlock_break(NULL, "e/delay", DLOCK_BREAK_RESET, NULL), 0);
    dlt_tdir_done();
}
/* The breaker's metrics: closed with the server up; once a client of
 * this host (and user) found the stopped server unreachable and wrote
 * the host's outage record, open -- the exporter's own client keeps no
 * breaker (breaker_ms=0): it is the record it reads --; closed again once
 * a client's probe found the server back.  promtool accepts them. */
static void test_breaker(void) {
    char url[256];
    dlock_client_t *c;
    dlock_mutex_t m;
    double end;
    int rc = ENOLCK;
    dlt_tdir_make("dlexp");
    snprintf(url, sizeof url, "%s?unreachable_ms=500&breaker_ms=30000", dlt_server.url);
    CU_ASSERT_FATAL(exporter_start(NULL, NULL, NULL, NULL) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(strstr(out, "# TYPE dlock_breaker_open gauge\n") != NULL);
    CU_ASSERT(value_of("dlock_breaker_open") == 0);
    CU_ASSERT(value_of("dlock_breaker_open_seconds") == 0);
    CU_ASSERT_FATAL(dlt_redis_stop(&dlt_server) == 0);
    CU_ASSERT_FATAL(dlt_client_make(&c, url, 0) == 0);
    CU_ASSERT_FATAL(dlt_mutex_make(&m, "b/x", 0, c) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOLCK); /* the unreachable bound: the record is written */
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(value_of("dlock_up") == 0);
    CU_ASSERT(value_of("dlock_breaker_open") == 1);
    CU_ASSERT(value_of("dlock_breaker_open_seconds") > 0 && value_of("dlock_breaker_open_seconds") < 30);
    CU_ASSERT(value_of("dlock_breaker_next_probe_seconds") >= 0 &&
              value_of("dlock_breaker_next_probe_seconds") <= 1);
    DLT_ASSERT_INT_EQ(promtool_check(), 0);
    if (value_of("dlock_breaker_open") != 1) fprintf(stderr, "  scraped:\n%s\n", out);
    CU_ASSERT_FATAL(dlt_redis_restart(&dlt_server) == 0);
    for (end = dlt_now() + 5; rc != 0 && dlt_now() < end; dlt_sleep_ms(100))
        if ((rc = dlock_mutex_lock(&m)) == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0); /* the probe */
    DLT_ASSERT_ERR(rc, 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(value_of("dlock_up") == 1);
    CU_ASSERT(value_of("dlock_breaker_open") == 0);
    exporter_stop();
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_tdir_done();
}

/* A stopped server, then a frozen one: each scrape answers within the
 * scrape timeout (2 s) and a little, with dlock_up 0; the next scrape
 * after the server is back says 1. */
static void test_dead_server(void) {
    double took;
    dlt_tdir_make("dlexp");
    CU_ASSERT_FATAL(exporter_start(NULL, NULL, NULL, NULL) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(value_of("dlock_up") == 1);
    CU_ASSERT_FATAL(dlt_redis_stop(&dlt_server) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", &took), 200);
    CU_ASSERT(value_of("dlock_up") == 0);
    CU_ASSERT(took < 3.5);
    DLT_ASSERT_INT_EQ(promtool_check(), 0);
    CU_ASSERT_FATAL(dlt_redis_restart(&dlt_server) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(value_of("dlock_up") == 1);
    /* Frozen: it accepts connections (the kernel does) but never answers. */
    kill(dlt_server.pid, SIGSTOP);
    DLT_ASSERT_INT_EQ(scrape("/metrics", &took), 200);
    kill(dlt_server.pid, SIGCONT);
    CU_ASSERT(value_of("dlock_up") == 0);
    CU_ASSERT(took < 3.5);
    if (took >= 3.5) fprintf(stderr, "  a scrape of a frozen server took %.1f s\n", took);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    CU_ASSERT(value_of("dlock_up") == 1);
    exporter_stop();
    dlt_tdir_done();
}

/* n connections, each sending random bytes, or a request line and
 * headers with random bytes spliced in (a fixed seed: the same run each
 * time), then closed without reading the answer. */
static void random_requests(int n) {
    static const char *const starts[] = { "", "GET /metrics HTTP/1.1\r\n", "POST /metrics HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
                                          "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                          "GET /%%%00 HTTP/9.9\r\n" };
    unsigned seed = 20261129;
    char buf[4096];
    int i, fd;
    for (i = 0; i < n; i++) {
        size_t k = strlen(starts[i % 5]), len = k + (size_t)rand_r(&seed) % (sizeof buf - k), j;
        memcpy(buf, starts[i % 5], k);
        for (j = k; j < len; j++) buf[j] = (char)rand_r(&seed);
        if ((fd = dial()) < 0) continue;
        (void)write(fd, buf, len);
        close(fd);
    }
}

/* Garbage, a request line that never ends, a slowloris client sending a
 * header byte at a time: a scrape alongside them is answered at once, and
 * the garbage gets an HTTP error, not a crash; so do 200 connections of
 * random requests. */
static void test_bad_http(void) {
    static const char garbage[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 NOT HTTP\r\n\r\n";
    char buf[512];
    double took;
    int g, slow, i;
    ssize_t k;
    dlt_tdir_make("dlexp");
    CU_ASSERT_FATAL(exporter_start(NULL, NULL, NULL, NULL) == 0);
    CU_ASSERT_FATAL((g = dial()) >= 0);
    CU_ASSERT((size_t)write(g, garbage, sizeof garbage - 1) == sizeof garbage - 1);
    CU_ASSERT_FATAL((slow = dial()) >= 0);
    CU_ASSERT(write(slow, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ", 40) == 40);
    for (i = 0; i < 5; i++) {
        CU_ASSERT(write(slow, "a", 1) == 1);
        DLT_ASSERT_INT_EQ(scrape("/metrics", &took), 200);
        CU_ASSERT(value_of("dlock_up") == 1);
        CU_ASSERT(took < 1.5);
        dlt_sleep_ms(100);
    }
    /* The garbage was answered with an error and the connection closed. */
    k = read(g, buf, sizeof buf - 1);
    buf[k > 0 ? k : 0] = '\0';
    CU_ASSERT(strncmp(buf, "HTTP/1.1 4", 10) == 0 || strncmp(buf, "HTTP/1.0 4", 10) == 0);
    if (k <= 0 || buf[9] != '4') fprintf(stderr, "  garbage got: %s\n", buf);
    close(g);
    close(slow);
    DLT_ASSERT_INT_EQ(scrape("/", NULL), 200);
    CU_ASSERT(strstr(out, "/metrics") != NULL);
    DLT_ASSERT_INT_EQ(scrape("/nothing", NULL), 404);
    random_requests(200);
    CU_ASSERT(waitpid(exporter, NULL, WNOHANG) == 0); /* still running */
    DLT_ASSERT_INT_EQ(scrape("/metrics", &took), 200);
    CU_ASSERT(value_of("dlock_up") == 1);
    CU_ASSERT(took < 1.5);
    exporter_stop();
    dlt_tdir_done();
}

/* Runs cmd (sh) with its output in err: its exit status. */
static int sh(const char *cmd) {
    FILE *p = popen(cmd, "r");
    int rc = p == NULL ? -1 : dlt_pclose_read(p, err, OUT_MAX);
    if (rc != 0) fprintf(stderr, "  %s: exit %d: %s\n", cmd, rc, err);
    return rc;
}

/* contrib/: the alert rules pass `promtool check rules` and their own
 * `promtool test rules` cases; the rules and the Grafana dashboard name
 * only metrics a live exporter serves (tests/contrib_names.py). */
static void test_contrib(void) {
    char cmd[2048];
    const char *src = DLT_SOURCE_DIR;
    dlt_tdir_make("dlexp");
    CU_ASSERT_FATAL(exporter_start(NULL, NULL, NULL, NULL) == 0);
    DLT_ASSERT_INT_EQ(scrape("/metrics", NULL), 200);
    exporter_stop();
    snprintf(cmd, sizeof cmd, "'%s' check rules '%s/contrib/prometheus/dlock.rules.yml' 2>&1", DLT_PROMTOOL, src);
    DLT_ASSERT_INT_EQ(sh(cmd), 0);
    CU_ASSERT(strstr(err, "SUCCESS: 11 rules found") != NULL);
    snprintf(cmd, sizeof cmd, "cd '%s/contrib/prometheus' && '%s' test rules dlock.rules.test.yml 2>&1", src,
             DLT_PROMTOOL);
    DLT_ASSERT_INT_EQ(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/contrib_names.py' '%s' '%s/contrib/grafana/dlock.json' "
             "'%s/contrib/prometheus/dlock.rules.yml' 2>&1", DLT_PYTHON, src, dlt_tpath("body.txt"), src, src);
    DLT_ASSERT_INT_EQ(sh(cmd), 0);
    CU_ASSERT(strstr(err, " 0 unknown") != NULL);
    dlt_tdir_done();
}

/* A client from 127.0.0.2 opening 40 connections that each send half a
 * request and wait: it gets 16 of them at most (the rest closed at once),
 * and a scrape from 127.0.0.1 is answered meanwhile. */
static void test_connection_flood(void) {
    int fd[40], i, open_after = 0;
    struct sockaddr_in src, dst;
    double took;
    char c;
    dlt_tdir_make("dlexp");
    CU_ASSERT_FATAL(exporter_start(NULL, NULL, NULL, NULL) == 0);
    memset(&src, 0, sizeof src);
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = inet_addr("127.0.0.2");
    dst = src;
    dst.sin_port = htons((uint16_t)port);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (i = 0; i < 40; i++) {
        fd[i] = socket(AF_INET, SOCK_STREAM, 0);
        CU_ASSERT_FATAL(fd[i] >= 0 && bind(fd[i], (struct sockaddr *)&src, sizeof src) == 0);
        CU_ASSERT_FATAL(connect(fd[i], (struct sockaddr *)&dst, sizeof dst) == 0);
        (void)write(fd[i], "GET /metrics HTTP/1.1\r\n", 23);
    }
    DLT_ASSERT_INT_EQ(scrape("/metrics", &took), 200);
    CU_ASSERT(value_of("dlock_up") == 1);
    CU_ASSERT(took < 1.5);
    /* The connections past the limit were closed: a read sees their end
     * (or a reset) at once; the others would block, so each is polled
     * for a while instead. */
    for (i = 0; i < 40; i++) {
        struct pollfd p = { fd[i], POLLIN, 0 };
        if (poll(&p, 1, i == 0 ? 500 : 50) == 0 || (read(fd[i], &c, 1) < 0 && errno == EAGAIN)) open_after++;
        close(fd[i]);
    }
    CU_ASSERT(open_after <= 16);
    CU_ASSERT(open_after >= 8);
    if (open_after > 16 || open_after < 8) fprintf(stderr, "  %d of 40 connections stayed open\n", open_after);
    exporter_stop();
    dlt_tdir_done();
}

static int run_exporter(const char *a1, const char *a2) {
    char *argv[] = { (char *)DLOCK_CLI, "--url", dlt_server.url, "exporter", (char *)a1, (char *)a2, NULL };
    return dlt_run_capture(argv, out, err, OUT_MAX, 10000);
}

/* Bad options: 64 with a message; a port in use: 69. */
static void test_bad_options(void) {
    char where[64];
    int fd, one = 1;
    struct sockaddr_in sa;
    DLT_ASSERT_INT_EQ(run_exporter("--listen", "nonsense"), 64);
    CU_ASSERT(strstr(err, "--listen wants ADDR:PORT") != NULL);
    DLT_ASSERT_INT_EQ(run_exporter("--listen", "127.0.0.1:99999"), 64);
    DLT_ASSERT_INT_EQ(run_exporter("--max-locks", "0"), 64);
    DLT_ASSERT_INT_EQ(run_exporter("--window", "61"), 64);
    DLT_ASSERT_INT_EQ(run_exporter("--scrape-timeout", "5x"), 64);
    DLT_ASSERT_INT_EQ(run_exporter("--bogus", NULL), 64);
    DLT_ASSERT_INT_EQ(run_exporter("--help", NULL), 0);
    CU_ASSERT(strstr(out, "Usage: dlock exporter") != NULL);
    /* A port some other socket listens on. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)(port = dlt_free_port()));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CU_ASSERT_FATAL(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0);
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    DLT_ASSERT_INT_EQ(run_exporter("--listen", where), 69);
    CU_ASSERT(strstr(err, "cannot listen on") != NULL);
    close(fd);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_scrape),
    DLT_TEST(test_lost_and_deadlocks),
    DLT_TEST(test_risk_and_delay),
    DLT_TEST(test_histograms),
    DLT_TEST(test_dead_server),
    DLT_TEST(test_breaker),
    DLT_TEST(test_bad_http),
    DLT_TEST(test_connection_flood),
    DLT_TEST(test_bad_options),
    DLT_TEST(test_contrib),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "cli_exporter", tests);
}
