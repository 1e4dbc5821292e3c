/* test_cli_top.c -- `dlock top`, run as a real program (DLOCK_CLI).
 * labels: redis, cli; timeout: 180
 *
 * `dlock top --once --json` gives per-lock fields
 * name, acquisitions, wait_ms_p50, wait_ms_p99, hold_ms_p50 with the
 * workload's values; `--prometheus` is the Prometheus text format; and
 * lost_leases, deadlocks and lease_risks count a hold lost under a
 * break, EDEADLK answers and a lease-at-risk warning; the live view, in a real terminal (tmux, on a server of its own: -L),
 * draws the busiest locks with their figures and holder, and quits on q.
 * Bad options exit 64.
 */
#include "figures.h"
#include "fixture.h"

#include <dlock.h>

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DLOCK_CLI
#error "DLOCK_CLI (the path of the built dlock program) must be defined by the build"
#endif

#define OUT_MAX 65536
static char out[OUT_MAX], err[OUT_MAX];

/* Runs dlock with argv (after the program's name; NULL-terminated) and
 * --url of the suite's server: its exit code, out and err filled. */
static int top_run(const char *a1, const char *a2, const char *a3) {
    char *argv[8];
    int n = 0;
    argv[n++] = (char *)DLOCK_CLI;
    argv[n++] = "top";
    argv[n++] = "--url";
    argv[n++] = dlt_server.url;
    if (a1) argv[n++] = (char *)a1;
    if (a2) argv[n++] = (char *)a2;
    if (a3) argv[n++] = (char *)a3;
    argv[n] = NULL;
    return dlt_run_capture(argv, out, err, OUT_MAX, 20000);
}

/* The number after "field": in the object that starts at obj, or -1. */
static double json_num(const char *obj, const char *field) {
    char key[64];
    const char *p, *end = strchr(obj, '}');
    snprintf(key, sizeof key, "\"%s\":", field);
    p = strstr(obj, key);
    if (p == NULL || (end != NULL && p > end)) return -1;
    return strtod(p + strlen(key), NULL);
}

static void test_once_json(void) {
    const char *a, *b;
    dlt_figures_workload("cli/a", 12, 20, "cli/b", 3);
    DLT_ASSERT_INT_EQ(top_run("--once", "--json", NULL), 0);
    CU_ASSERT(strncmp(out, "{\"window_s\":60,\"locks\":[", 24) == 0);
    CU_ASSERT(strstr(out, "]}\n") != NULL);
    a = strstr(out, "{\"name\":\"cli/a\"");
    b = strstr(out, "{\"name\":\"cli/b\"");
    CU_ASSERT_FATAL(a != NULL && b != NULL);
    CU_ASSERT(a < b); /* the busiest first */
    DLT_ASSERT_INT_EQ((long long)json_num(a, "acquisitions"), 12);
    DLT_ASSERT_INT_EQ((long long)json_num(b, "acquisitions"), 3);
    CU_ASSERT(json_num(a, "hold_ms_p50") >= 16 && json_num(a, "hold_ms_p50") < 32);
    CU_ASSERT(json_num(a, "wait_ms_p50") >= 0 && json_num(a, "wait_ms_p50") < 16);
    CU_ASSERT(json_num(a, "wait_ms_p99") >= json_num(a, "wait_ms_p50"));
    CU_ASSERT(json_num(b, "hold_ms_p50") >= 0 && json_num(b, "hold_ms_p50") < 16);
    CU_ASSERT(strstr(a, "\"holder\":null") != NULL);
    if (json_num(a, "hold_ms_p50") < 16) fprintf(stderr, "%s", out);
    /* Nothing flushed yet under another prefix: an empty array. */
    {
        char *argv[] = { (char *)DLOCK_CLI, "--prefix", "other:", "top", "--url", dlt_server.url, "--once", "--json", NULL };
        DLT_ASSERT_INT_EQ(dlt_run_capture(argv, out, err, OUT_MAX, 20000), 0);
        CU_ASSERT(strcmp(out, "{\"window_s\":60,\"locks\":[]}\n") == 0);
    }
}

/* The lost hold, the EDEADLK answers and a lease-at-risk warning, in
 * the JSON. */
static void test_lost_and_deadlocks(void) {
    const char *l, *d, *r;
    DLT_ASSERT_INT_EQ(dlt_figures_trouble("cli/lost", "cli/dead", 2), 0);
    DLT_ASSERT_INT_EQ(dlt_figures_risk("cli/risk"), 0);
    DLT_ASSERT_INT_EQ(top_run("--once", "--json", NULL), 0);
    l = strstr(out, "{\"name\":\"cli/lost\"");
    d = strstr(out, "{\"name\":\"cli/dead\"");
    r = strstr(out, "{\"name\":\"cli/risk\"");
    CU_ASSERT_FATAL(l != NULL && d != NULL && r != NULL);
    DLT_ASSERT_INT_EQ((long long)json_num(r, "lease_risks"), 1);
    DLT_ASSERT_INT_EQ((long long)json_num(r, "lost_leases"), 0);
    DLT_ASSERT_INT_EQ((long long)json_num(l, "lease_risks"), 0);
    DLT_ASSERT_INT_EQ((long long)json_num(l, "lost_leases"), 1);
    DLT_ASSERT_INT_EQ((long long)json_num(l, "deadlocks"), 0);
    DLT_ASSERT_INT_EQ((long long)json_num(d, "lost_leases"), 0);
    DLT_ASSERT_INT_EQ((long long)json_num(d, "deadlocks"), 2);
}

/* 1 if every "_total" in text ends the name of one of the three counter
 * families. */
static int only_counters_total(const char *text) {
    static const char *const ok[] = { "dlock_lock_lost_leases_total", "dlock_lock_deadlocks_total",
                                      "dlock_lock_lease_risks_total" };
    const char *p;
    size_t k;
    for (p = strstr(text, "_total"); p != NULL; p = strstr(p + 1, "_total")) {
        int found = 0;
        for (k = 0; k < sizeof ok / sizeof ok[0]; k++) {
            size_t pre = strlen(ok[k]) - strlen("_total");
            if ((size_t)(p - text) >= pre && strncmp(p - pre, ok[k], strlen(ok[k])) == 0) found = 1;
        }
        if (!found) return 0;
    }
    return 1;
}

static void test_prometheus(void) {
    regex_t re;
    char *line, *save = NULL;
    int lines = 0, bad = 0;
    dlt_figures_workload("cli/a", 12, 20, "cli/b", 3);
    DLT_ASSERT_INT_EQ(top_run("--prometheus", NULL, NULL), 0);
    /* The window's sums are gauges (a "_total" name is a counter's), per
     * second over the 60 s window: 12 and 3 holds.  The only counters are
     * the lost leases, the EDEADLK answers, the lease-at-risk warnings and
     * the histograms. */
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_acquisitions_per_second gauge\n") != NULL);
    CU_ASSERT(strstr(out, "\ndlock_lock_acquisitions_per_second{lock=\"cli/a\"} 0.2\n") != NULL);
    CU_ASSERT(strstr(out, "\ndlock_lock_acquisitions_per_second{lock=\"cli/b\"} 0.05\n") != NULL);
    CU_ASSERT(only_counters_total(out));
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_lost_leases_total counter\n") != NULL);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_hold_window_seconds summary\n") != NULL);
    CU_ASSERT(strstr(out, "\ndlock_lock_hold_window_seconds{lock=\"cli/a\",quantile=\"0.5\"} 0.0") != NULL);
    CU_ASSERT(strstr(out, "# TYPE dlock_lock_hold_seconds histogram\n") != NULL);
    CU_ASSERT(strstr(out, "\ndlock_lock_hold_seconds_count{lock=\"cli/a\"} 12\n") != NULL);
    CU_ASSERT(strstr(out, "\ndlock_lock_waiters{lock=\"cli/a\"} 0\n") != NULL);
    CU_ASSERT(strstr(out, "\ndlock_up 1\n") != NULL);
    CU_ASSERT_FATAL(regcomp(&re,
                            "^(# (HELP|TYPE) dlock_[a-z_]+ .+|dlock_[a-z_]+(\\{lock=\"[^\"]*\"(,quantile=\"0\\.[0-9]+\"|,le=\"([0-9.]+|\\+Inf)\")?\\})? "
                            "-?[0-9.]+(e[-+][0-9]+)?)$",
                            REG_EXTENDED | REG_NOSUB) == 0);
    for (line = strtok_r(out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        lines++;
        if (regexec(&re, line, 0, NULL, 0) != 0) {
            fprintf(stderr, "not the Prometheus text format: %s\n", line);
            bad++;
        }
    }
    regfree(&re);
    DLT_ASSERT_INT_EQ(bad, 0);
    CU_ASSERT(lines >= 10 + 2 * 7);
}

static void test_bad_options(void) {
    DLT_ASSERT_INT_EQ(top_run("--window", "0", NULL), 64);
    DLT_ASSERT_INT_EQ(top_run("--window", "61", NULL), 64);
    DLT_ASSERT_INT_EQ(top_run("-n", "x", NULL), 64);
    DLT_ASSERT_INT_EQ(top_run("--json", "--prometheus", NULL), 64);
    DLT_ASSERT_INT_EQ(top_run("extra", NULL, NULL), 64);
    CU_ASSERT(strstr(err, "unexpected argument 'extra'") != NULL);
    /* Off a terminal, the live view says to use --once. */
    DLT_ASSERT_INT_EQ(top_run(NULL, NULL, NULL), 64);
    CU_ASSERT(strstr(err, "--once") != NULL);
}

/* ------------------------------------------------------------ tmux */

static const char *tmux_path(void) {
    static const char *const where[] = { "/usr/bin/tmux", "/usr/local/bin/tmux", "/bin/tmux" };
    size_t i;
    for (i = 0; i < sizeof where / sizeof where[0]; i++)
        if (access(where[i], X_OK) == 0) return where[i];
    return NULL;
}

static char sock[64]; /* our tmux server's socket name (-L) */

/* tmux -L sock ARGS...: its exit code, its output in out. */
static int tmux(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5) {
    char *argv[10];
    int n = 0;
    argv[n++] = (char *)tmux_path();
    argv[n++] = "-L";
    argv[n++] = sock;
    if (a1) argv[n++] = (char *)a1;
    if (a2) argv[n++] = (char *)a2;
    if (a3) argv[n++] = (char *)a3;
    if (a4) argv[n++] = (char *)a4;
    if (a5) argv[n++] = (char *)a5;
    argv[n] = NULL;
    return dlt_run_capture(argv, out, err, OUT_MAX, 10000);
}

/* Our tmux server goes at exit, even after a failed fatal assert. */
static void tmux_cleanup(void) {
    char *argv[] = { (char *)tmux_path(), "-L", sock, "kill-server", NULL };
    static char o[256], e[256];
    if (sock[0] != '\0' && argv[0] != NULL) (void)dlt_run_capture(argv, o, e, sizeof o, 5000);
}

/* Starts `dlock top` in a new tmux session `sess` of our server, in a
 * shell that says how it exited and what the terminal's modes are then,
 * and stays (so the pane can be read after).  The shell survives a Ctrl-C
 * (trapped, not ignored: top gets the default disposition). */
static int top_session(const char *sess) {
    static const char script[] =
        "trap : INT; \"$0\" top --url \"$1\"; echo \"top exited $?\"; "
        "stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo; exec sleep 60";
    /* (More than one word after the session's options: tmux runs them as
     * they are, with no shell of its own in between.) */
    char *argv[] = { (char *)tmux_path(), "-L", sock, "new-session", "-d", "-s", (char *)sess, "-x", "140", "-y", "20",
                     "sh", "-c", (char *)script, (char *)DLOCK_CLI, dlt_server.url, NULL };
    return dlt_run_capture(argv, out, err, OUT_MAX, 10000);
}

/* The pane of sess until it shows every one of want[] (up to ms). */
static int pane_of_shows(const char *sess, const char *const *want, size_t n, int ms) {
    double end = dlt_now() + ms / 1000.0;
    size_t i;
    while (dlt_now() < end) {
        if (tmux("capture-pane", "-p", "-t", sess, NULL) == 0) {
            for (i = 0; i < n && strstr(out, want[i]) != NULL; i++)
                ;
            if (i == n) return 1;
        }
        dlt_sleep_ms(100);
    }
    return 0;
}

/* After top quit: it exited 0, the terminal is back in canonical mode
 * with echo, and off the alternate screen (the shell's lines show). */
static void check_restored(const char *sess) {
    const char *want[] = { "top exited 0", "\nicanon\n", "\necho\n" };
    int ok = pane_of_shows(sess, want, 3, 10000);
    CU_ASSERT(ok);
    if (!ok) fprintf(stderr, "after quitting, the pane showed:\n%s\n", out);
}

static void test_live_in_tmux(void) {
    char holder[64];
    dlock_client_t *c;
    dlock_mutex_t h;
    int shown;
    if (tmux_path() == NULL) {
        fprintf(stderr, "  tmux is not installed (scripts/deps installs it): the live view is not tested\n");
        CU_FAIL("tmux missing");
        return;
    }
    dlt_figures_workload("cli/a", 12, 20, "cli/b", 3);
    /* A lock held now, by this process: its holder is shown. */
    CU_ASSERT_FATAL(dlt_figures_client(&c) == 0);
    CU_ASSERT_FATAL(dlt_mutex_make(&h, "cli/held", 0, c) == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&h), 0);
    snprintf(holder, sizeof holder, ":%ld:", (long)getpid());
    snprintf(sock, sizeof sock, "dlt-top-%ld", (long)getpid());
    setenv("TERM", "xterm", 0);
    tmux("kill-server", NULL, NULL, NULL, NULL); /* (none of ours should be left) */
    atexit(tmux_cleanup);
    DLT_ASSERT_INT_EQ(top_session("top"), 0);
    {
        const char *want[] = { "dlock top", "q quits", "NAME", "WAIT50", "HOLD50", "cli/a", "cli/b", "cli/held", holder };
        shown = pane_of_shows("top", want, sizeof want / sizeof want[0], 10000);
    }
    CU_ASSERT(shown);
    if (!shown) fprintf(stderr, "the pane showed:\n%s\n", out);
    if (shown) {
        /* cli/a's row: 12 acquisitions, and a hold p50 in ms near 20. */
        const char *row = strstr(out, "cli/a");
        unsigned long long acq = 0;
        double rate = 0, w50 = -1, w99 = -1, h50 = -1;
        CU_ASSERT(row != NULL && sscanf(row, "cli/a %llu %lf %lf %lf %lf", &acq, &rate, &w50, &w99, &h50) == 5);
        DLT_ASSERT_INT_EQ(acq, 12);
        CU_ASSERT(h50 >= 16 && h50 < 32);
    }
    DLT_ASSERT_INT_EQ(tmux("send-keys", "-t", "top", "q", NULL), 0);
    check_restored("top");
    /* Ctrl-C quits too, and puts the terminal back the same way. */
    DLT_ASSERT_INT_EQ(top_session("top2"), 0);
    {
        const char *want[] = { "q quits", "cli/held" };
        CU_ASSERT(pane_of_shows("top2", want, 2, 10000));
    }
    DLT_ASSERT_INT_EQ(tmux("send-keys", "-t", "top2", "C-c", NULL), 0);
    check_restored("top2");
    tmux("kill-server", NULL, NULL, NULL, NULL);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&h), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&h), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_once_json),
    DLT_TEST(test_lost_and_deadlocks),
    DLT_TEST(test_prometheus),
    DLT_TEST(test_bad_options),
    DLT_TEST(test_live_in_tmux),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "cli_top", tests);
}
