/* labels: redis cli; timeout: 300 */
/* test_cli_slots.c -- `dlock exec --slots N NAME -- CMD`, run as a real
 * program (DLOCK_CLI, the built binary) against the suite's real
 * redis-server: at most N of M concurrent commands run at once, all of
 * them run; -n and -w give the busy exit code when every slot is taken; a
 * slot comes back when the command ends (also when it fails or is killed
 * by a signal); joining an existing semaphore keeps its count; a signal
 * while waiting ends dlock, and CMD never runs; bad arguments.
 *
 * The jobs that hold slots are shell scripts gated on files, as in
 * test_cli.c: a holder creates STARTED when it runs, and ends when the
 * test creates GO.
 */
#include "fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

#ifndef DLOCK_CLI
#error "DLOCK_CLI (the path of the built dlock program) must be defined by the build"
#endif

/* ============================================================ processes */

#define OUTMAX 16384
#define ARGMAX 64

typedef struct result {
    int code;    /* exit code, 128 + signal, or -1 (timed out: killed) */
    double secs; /* how long it ran */
    char err[OUTMAX];
} result;

static result R; /* the last run */

/* In a child before exec: stdin /dev/null, stdout /dev/null, stderr to
 * err_fd (or /dev/null), no other descriptor, default signals. */
static void child_setup(int err_fd) {
    int null = open("/dev/null", O_RDWR), fd;
    sigset_t none;
    dup2(null, 0);
    dup2(null, 1);
    dup2(err_fd >= 0 ? err_fd : null, 2);
    for (fd = 3; fd < 1024; fd++) close(fd);
    for (fd = 1; fd < NSIG; fd++) signal(fd, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Starts argv in the background, stderr to err_path (or /dev/null). */
static pid_t start_v(char *const argv[], const char *err_path) {
    pid_t pid = fork();
    if (pid == 0) {
        int e = err_path ? open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
        child_setup(e);
        execv(argv[0], argv);
        _exit(120);
    }
    if (pid > 0) dlt_bg_add(pid);
    return pid;
}

/* Runs dlock with these arguments (NULL-terminated) to its end (20 s at
 * most); its stderr in R.err.  Returns R.code. */
static int dl_v(const char *a, ...) {
    char *argv[ARGMAX];
    int ep[2], n = 0, raw;
    size_t ne = 0;
    double t0 = dlt_now(), end = t0 + 20;
    va_list ap;
    pid_t pid;

    memset(&R, 0, sizeof R);
    argv[n++] = (char *)DLOCK_CLI;
    va_start(ap, a);
    for (; a != NULL && n < ARGMAX - 1; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    if (pipe(ep) != 0) return R.code = -1;
    pid = fork();
    if (pid == 0) {
        child_setup(ep[1]);
        execv(argv[0], argv);
        _exit(120);
    }
    close(ep[1]);
    for (;;) {
        struct pollfd p = { ep[0], POLLIN, 0 };
        int left = (int)((end - dlt_now()) * 1000);
        ssize_t r;
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        r = read(ep[0], R.err + ne, OUTMAX - 1 - ne);
        if (r <= 0) break;
        ne += (size_t)r;
    }
    close(ep[0]);
    raw = dlt_wait_raw(pid, (int)((end - dlt_now()) * 1000) + 100);
    R.code = raw == -1 ? -1 : dlt_exit_code(raw);
    R.secs = dlt_now() - t0;
    return R.code;
}
#define dl(...) dl_v(__VA_ARGS__, (const char *)NULL)

#define CHECK_CODE(expr, want)                                                                          \
    do {                                                                                                 \
        int got_ = (expr);                                                                               \
        if (got_ != (want))                                                                              \
            fprintf(stderr, "  [%s:%d] exit %d after %.2fs\n  stderr: %s\n", __func__, __LINE__, R.code, \
                    R.secs, R.err);                                                                      \
        DLT_ASSERT_INT_EQ(got_, (want));                                                                 \
    } while (0)

/* ============================================================ holders */

/* A job in a slot: creates STARTED, runs until GO exists, exits 0. */
static const char gate_sh[] = ": > \"$1\"; while [ ! -e \"$2\" ]; do sleep 0.02; done";

typedef struct holder {
    pid_t pid;
    char started[64], go[64];
} holder;

/* Starts `dlock exec --slots N NAME -- sh -c GATE` in the background and
 * waits until it runs in its slot.  0, or -1 if it did not in 5 s. */
static int holder_start(holder *h, const char *tag, const char *name, const char *slots) {
    char *argv[ARGMAX];
    int n = 0, rc;
    snprintf(h->started, sizeof h->started, "started.%s", tag);
    snprintf(h->go, sizeof h->go, "go.%s", tag);
    unlink(dlt_tpath(h->started));
    unlink(dlt_tpath(h->go));
    argv[n++] = (char *)DLOCK_CLI;
    argv[n++] = "exec";
    argv[n++] = "--slots";
    argv[n++] = (char *)slots;
    argv[n++] = (char *)name;
    argv[n++] = "--";
    argv[n++] = "sh";
    argv[n++] = "-c";
    argv[n++] = (char *)gate_sh;
    argv[n++] = "sh";
    argv[n++] = strdup(dlt_tpath(h->started));
    argv[n++] = strdup(dlt_tpath(h->go));
    argv[n] = NULL;
    h->pid = start_v(argv, NULL);
    rc = h->pid > 0 && dlt_twait_file(h->started, 5000) ? 0 : -1;
    free(argv[n - 1]);
    free(argv[n - 2]);
    return rc;
}

/* Lets the holder's job end; dlock's exit code (or -1). */
static int holder_end(holder *h) {
    int raw;
    dlt_ttouch(h->go);
    raw = dlt_wait_raw(h->pid, 15000);
    return raw == -1 ? -1 : dlt_exit_code(raw);
}

/* The semaphore's value as the library reads it (it exists already: the
 * value given here is not used). */
static int sem_value(const char *name) {
    dlock_sem_t s;
    int v = -100;
    if (dlock_sem_init(&s, name, 0, NULL) != 0) return -101;
    if (dlock_sem_getvalue(&s, &v) != 0) v = -102;
    dlock_sem_destroy(&s);
    return v;
}

/* Waits up to ms for the value to be want (a slot handed to a waiter
 * that died comes back within seconds); the last value read. */
static int wait_value(const char *name, int want, int ms) {
    double end = dlt_now() + ms / 1000.0;
    int v;
    while ((v = sem_value(name)) != want && dlt_now() < end) dlt_sleep_ms(50);
    return v;
}

/* ============================================================ the tests */

/* M = 8 commands with --slots 3 at once: all run, never more than 3 at a
 * time, and 3 at some moment.  Each job records its entry and exit under
 * flock(1) on a file of the test's: the number inside after its entry
 * goes to `peak`, one line each. */
static void test_slots_bound_concurrency(void) {
    static const char job[] =
        "flock \"$1/mu\" sh -c 'n=$(cat \"$1/cur\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$1/cur\"; "
        "echo $n >> \"$1/peak\"' sh \"$1\"; sleep 0.4; "
        "flock \"$1/mu\" sh -c 'n=$(cat \"$1/cur\"); echo $((n-1)) > \"$1/cur\"; echo x >> \"$1/done\"' sh \"$1\"";
    enum { M = 8, N = 3 };
    pid_t p[M];
    int i, max = 0, v;
    FILE *f;
    dlt_tdir_make("dlslots");
    for (i = 0; i < M; i++) {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "--slots", "3", "batch", "--", "sh", "-c", (char *)job, "sh", (char *)dlt_tdir(),
                         NULL };
        p[i] = start_v(argv, NULL);
    }
    for (i = 0; i < M; i++) DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(p[i], 60000)), 0);
    DLT_ASSERT_INT_EQ(dlt_tlines("done"), M);
    DLT_ASSERT_INT_EQ(dlt_tlines("peak"), M);
    f = fopen(dlt_tpath("peak"), "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    while (fscanf(f, "%d", &v) == 1)
        if (v > max) max = v;
    fclose(f);
    DLT_ASSERT_INT_EQ(max, N); /* at most N; and N did run together */
    DLT_ASSERT_INT_EQ(sem_value("batch"), N); /* every slot came back */
    dlt_tdir_done();
}

/* -n (and -w 0, -E): every slot taken is the busy exit code at once, and
 * CMD does not run; with a slot free it runs. */
static void test_slots_nonblock(void) {
    holder a, b;
    dlt_tdir_make("dlslots");
    CU_ASSERT_FATAL(holder_start(&a, "a", "nb", "2") == 0);
    CHECK_CODE(dl("exec", "--slots", "2", "-n", "nb", "--", "touch", dlt_tpath("ran1")), 0); /* one is free */
    CU_ASSERT(dlt_texists("ran1"));
    CU_ASSERT_FATAL(holder_start(&b, "b", "nb", "2") == 0);
    CHECK_CODE(dl("exec", "--slots", "2", "-n", "nb", "--", "touch", dlt_tpath("ran")), 1);
    CU_ASSERT_STRING_EQUAL(R.err, ""); /* silent, as flock -n */
    CHECK_CODE(dl("exec", "--slots", "2", "--nonblock", "-E", "42", "nb", "--", "touch", dlt_tpath("ran")), 42);
    CHECK_CODE(dl("exec", "--slots", "2", "-w", "0", "nb", "--", "touch", dlt_tpath("ran")), 1);
    CHECK_CODE(dl("exec", "--slots", "2", "-n", "-v", "nb", "--", "touch", dlt_tpath("ran")), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "no free slot"));
    CU_ASSERT(!dlt_texists("ran"));
    DLT_ASSERT_INT_EQ(holder_end(&a), 0);
    CHECK_CODE(dl("exec", "--slots", "2", "-n", "nb", "--", "touch", dlt_tpath("ran")), 0);
    CU_ASSERT(dlt_texists("ran"));
    DLT_ASSERT_INT_EQ(holder_end(&b), 0);
    DLT_ASSERT_INT_EQ(sem_value("nb"), 2);
    dlt_tdir_done();
}

/* -w: the busy exit code when the time is up; a waiter within its time
 * runs as soon as a slot is given back. */
static void test_slots_wait_timeout(void) {
    holder h;
    pid_t w;
    double t0;
    dlt_tdir_make("dlslots");
    CU_ASSERT_FATAL(holder_start(&h, "a", "tw", "1") == 0);
    CHECK_CODE(dl("exec", "--slots", "1", "-w", "0.5", "tw", "--", "touch", dlt_tpath("ran")), 1);
    CU_ASSERT(R.secs >= 0.45);
    CHECK_CODE(dl("exec", "--slots", "1", "--timeout", "0.3", "-E", "3", "-v", "tw", "--", "touch", dlt_tpath("ran")), 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "timed out"));
    CU_ASSERT(!dlt_texists("ran"));
    {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "--slots", "1", "-w", "30", "tw", "--", "touch", dlt_tpath("ran"),
                         NULL };
        w = start_v(argv, NULL);
    }
    dlt_sleep_ms(500);
    CU_ASSERT(!dlt_texists("ran"));
    t0 = dlt_now();
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(w, 20000)), 0);
    CU_ASSERT(dlt_texists("ran"));
    fprintf(stderr, "  (a waiter ran %.2fs after the slot came back)\n", dlt_now() - t0);
    DLT_ASSERT_INT_EQ(wait_value("tw", 1, 10000), 1);
    dlt_tdir_done();
}

/* The slot comes back when the command ends: with its own status, when it
 * fails, when a signal kills it, when it cannot be run. */
static void test_slots_come_back(void) {
    dlt_tdir_make("dlslots");
    CHECK_CODE(dl("exec", "--slots", "1", "back", "--", "sh", "-c", "exit 7"), 7);
    DLT_ASSERT_INT_EQ(sem_value("back"), 1);
    CHECK_CODE(dl("exec", "--slots", "1", "back", "--", "sh", "-c", "kill -TERM $$"), 128 + SIGTERM);
    DLT_ASSERT_INT_EQ(sem_value("back"), 1);
    CHECK_CODE(dl("exec", "--slots", "1", "back", "--", "/nonexistent/dlock-test-cmd"), 127);
    DLT_ASSERT_INT_EQ(sem_value("back"), 1);
    /* One after the other, each gets the one slot. */
    CHECK_CODE(dl("exec", "--slots", "1", "-n", "back", "--", "touch", dlt_tpath("a")), 0);
    {
        char sh[700];
        snprintf(sh, sizeof sh, "touch '%s'", dlt_tpath("b"));
        CHECK_CODE(dl("exec", "--slots", "1", "-n", "back", "-c", sh), 0); /* flock's NAME -c form */
    }
    CU_ASSERT(dlt_texists("a") && dlt_texists("b"));
    /* The command's environment has no DLOCK_FENCE: a slot has none. */
    CHECK_CODE(dl("exec", "--slots", "1", "back", "--", "sh", "-c", "[ -z \"$DLOCK_FENCE\" ]"), 0);
    DLT_ASSERT_INT_EQ(sem_value("back"), 1);
    dlt_tdir_done();
}

/* A semaphore that exists keeps its count: --slots 5 on one made with 1
 * still lets one command in at a time. */
static void test_slots_join_keeps_count(void) {
    holder h;
    dlt_tdir_make("dlslots");
    CU_ASSERT_FATAL(holder_start(&h, "a", "join", "1") == 0);
    CHECK_CODE(dl("exec", "--slots", "5", "-n", "join", "--", "touch", dlt_tpath("ran")), 1);
    CU_ASSERT(!dlt_texists("ran"));
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    CHECK_CODE(dl("exec", "--slots", "5", "-n", "join", "--", "touch", dlt_tpath("ran")), 0);
    DLT_ASSERT_INT_EQ(sem_value("join"), 1);
    dlt_tdir_done();
}

/* A signal while waiting for a slot ends dlock (it dies of it), CMD never
 * runs, and no slot is lost: the holder's, given back, reaches the next
 * caller (a dead waiter's place is dropped by the server within
 * seconds). */
static void test_slots_signal_while_waiting(void) {
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    holder h;
    size_t i;
    dlt_tdir_make("dlslots");
    CU_ASSERT_FATAL(holder_start(&h, "a", "sigwait", "1") == 0);
    for (i = 0; i < 3; i++) {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "--slots", "1", "sigwait", "--", "touch", dlt_tpath("ran"), NULL };
        pid_t w = start_v(argv, NULL);
        int raw;
        dlt_sleep_ms(600); /* it waits */
        kill(w, sigs[i]);
        raw = dlt_wait_raw(w, 5000);
        CU_ASSERT(raw != -1 && WIFSIGNALED(raw) && WTERMSIG(raw) == sigs[i]);
    }
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    CU_ASSERT(!dlt_texists("ran"));
    DLT_ASSERT_INT_EQ(wait_value("sigwait", 1, 15000), 1);
    CHECK_CODE(dl("exec", "--slots", "1", "-w", "20", "sigwait", "--", "touch", dlt_tpath("after")), 0);
    CU_ASSERT(dlt_texists("after"));
    dlt_tdir_done();
}

/* The waiters and leased units the server shows for name: *waiters,
 * *leased; 0 or -1. */
static int sem_people(const char *name, unsigned *waiters, unsigned *leased) {
    dlock_sem_info_t si;
    if (dlock_sem_info(NULL, name, &si) != 0) return -1;
    *waiters = si.waiters;
    *leased = si.leased;
    return 0;
}

/* A signal ends the wait at once and takes the waiter's place back (the
 * library's interruptible wait, DLOCK_F_INTR): the server shows no waiter
 * right after dlock died of it, not a place that lapses seconds later. */
static void test_slots_signal_withdraws(void) {
    holder h;
    unsigned waiters = 99, leased = 99;
    int i;
    dlt_tdir_make("dlslots");
    CU_ASSERT_FATAL(holder_start(&h, "a", "sigdraw", "1") == 0);
    char *argv[] = { (char *)DLOCK_CLI, "exec", "--slots", "1", "sigdraw", "--", "touch", dlt_tpath("ran"), NULL };
    pid_t w = start_v(argv, NULL);
    for (i = 0; i < 200 && (sem_people("sigdraw", &waiters, &leased) != 0 || waiters != 1); i++) dlt_sleep_ms(25);
    DLT_ASSERT_INT_EQ(waiters, 1);
    kill(w, SIGTERM);
    int raw = dlt_wait_raw(w, 5000);
    CU_ASSERT(raw != -1 && WIFSIGNALED(raw) && WTERMSIG(raw) == SIGTERM);
    DLT_ASSERT_INT_EQ(sem_people("sigdraw", &waiters, &leased), 0);
    DLT_ASSERT_INT_EQ(waiters, 0);
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    CU_ASSERT(!dlt_texists("ran"));
    DLT_ASSERT_INT_EQ(sem_value("sigdraw"), 1);
    dlt_tdir_done();
}

/* A dlock killed with SIGKILL while its command runs cannot post: its
 * slot is a unit leased under undo, and comes back when the lease (here
 * 1 s) runs out -- to the next caller. */
static void test_slots_sigkill_slot_comes_back(void) {
    unsigned waiters = 0, leased = 0;
    int i;
    dlt_tdir_make("dlslots");
    char *argv[] = { (char *)DLOCK_CLI, "exec", "--slots", "1", "--lease", "1s", "killed", "--", "sleep", "30", NULL };
    pid_t w = start_v(argv, NULL);
    for (i = 0; i < 200 && (sem_people("killed", &waiters, &leased) != 0 || leased != 1); i++) dlt_sleep_ms(25);
    DLT_ASSERT_INT_EQ(leased, 1);
    DLT_ASSERT_INT_EQ(sem_value("killed"), 0);
    double t0 = dlt_now();
    kill(w, SIGKILL);
    (void)dlt_wait_raw(w, 5000);
    CHECK_CODE(dl("exec", "--slots", "1", "-w", "20", "killed", "--", "touch", dlt_tpath("next")), 0);
    CU_ASSERT(dlt_texists("next"));
    fprintf(stderr, "  (the killed dlock's slot served the next caller after %.2fs)\n", dlt_now() - t0);
    DLT_ASSERT_INT_EQ(sem_value("killed"), 1);
    dlt_tdir_done();
}

/* The server loses its data (restarted without persistence) while a
 * command runs in a slot (lease 1 s): dlock hears its slot is lost
 * (SIGTERM to the command, exit 75) within about the lease, and the
 * semaphore comes back with its N: the next caller, a new dlock, makes
 * it anew with its --slots and runs. */
static void test_slots_server_loss(void) {
    unsigned waiters = 0, leased = 0;
    dlock_sem_info_t si;
    double t0;
    int i, raw;
    dlt_tdir_make("dlslots");
    char *argv[] = { (char *)DLOCK_CLI, "exec", "--slots", "1", "--lease", "1s", "lossy", "--", "sleep", "30", NULL };
    pid_t w = start_v(argv, NULL);
    for (i = 0; i < 200 && (sem_people("lossy", &waiters, &leased) != 0 || leased != 1); i++) dlt_sleep_ms(25);
    DLT_ASSERT_INT_EQ(leased, 1);
    DLT_ASSERT_INT_EQ(dlt_redis_stop(&dlt_server), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&dlt_server), 0);
    t0 = dlt_now();
    raw = dlt_wait_raw(w, 10000);
    CU_ASSERT(raw != -1);
    if (raw != -1) DLT_ASSERT_INT_EQ(dlt_exit_code(raw), 75);
    CU_ASSERT(dlt_now() - t0 < 2.0);
    CHECK_CODE(dl("exec", "--slots", "1", "--lease", "1s", "-w", "20", "lossy", "--", "touch", dlt_tpath("next")), 0);
    CU_ASSERT(dlt_texists("next"));
    fprintf(stderr, "  (the next caller ran %.2fs after the server came back empty)\n", dlt_now() - t0);
    DLT_ASSERT_ERR(dlock_sem_info(NULL, "lossy", &si), 0);
    DLT_ASSERT_INT_EQ(si.exists, 1);
    DLT_ASSERT_INT_EQ(si.value, 1);
    DLT_ASSERT_INT_EQ(si.leased, 0);
    dlt_tdir_done();
}

/* Bad arguments: exit 64 with a message, nothing run. */
static void test_slots_usage_errors(void) {
    static const char *const bad[] = { "0", "-1", "x", "3x", "", "2147483648", "99999999999" };
    size_t i;
    dlt_tdir_make("dlslots");
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_CODE(dl("exec", "--slots", bad[i], "u", "--", "touch", dlt_tpath("ran")), 64);
        CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "--slots"));
    }
    CHECK_CODE(dl("exec", "--slots", "2", "-s", "u", "--", "touch", dlt_tpath("ran")), 64);
    CHECK_CODE(dl("exec", "-s", "--slots", "2", "u", "--", "touch", dlt_tpath("ran")), 64);
    CHECK_CODE(dl("exec", "--slots"), 64);
    CU_ASSERT(!dlt_texists("ran"));
    CHECK_CODE(dl("exec", "--slots=2147483647", "u", "--", "true"), 0); /* the largest */
    dlt_tdir_done();
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_slots_bound_concurrency),
    DLT_TEST(test_slots_nonblock),
    DLT_TEST(test_slots_wait_timeout),
    DLT_TEST(test_slots_come_back),
    DLT_TEST(test_slots_join_keeps_count),
    DLT_TEST(test_slots_signal_while_waiting),
    DLT_TEST(test_slots_signal_withdraws),
    DLT_TEST(test_slots_sigkill_slot_comes_back),
    DLT_TEST(test_slots_server_loss),
    DLT_TEST(test_slots_usage_errors),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    atexit(dlt_tdir_done); /* fork children of the tests leave with _exit */
    return dlt_main(argc, argv, "cli_slots", tests);
}
