/* labels: redis cli; timeout: 300 */
/* test_cli.c -- the dlock command, run as a real program (DLOCK_CLI, the
 * built binary) against the suite's real redis-server: exec with each flag
 * and exit code across several processes, signals, lease renewal and
 * expiry, status/list/break as tables and as JSON read back, the waiting
 * line in a pseudo-terminal, and no password in any output.
 *
 * The jobs that hold locks are shell scripts gated on files: a holder
 * creates STARTED when it runs under the lock, and ends when the test
 * creates GO.
 */
#include "fixture.h"
#include "fixture_multi.h"
#include "json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
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

#define OUTMAX 65536

typedef struct result {
    int raw;         /* waitpid status; -1 on a timeout (killed) */
    int code;        /* exit code, 128 + signal, or -1 */
    double secs;     /* how long it ran */
    char out[OUTMAX];
    char err[OUTMAX];
} result;

static result R; /* the last run */

/* In a child before exec: stdin from in_fd (or /dev/null), stdout and
 * stderr to the given descriptors, keep_fd (if >= 0) kept as itself, every
 * other descriptor closed, default signal handling. */
static void child_setup(int in_fd, int out_fd, int err_fd, int keep_fd) {
    int null = open("/dev/null", O_RDWR), fd;
    sigset_t none;
    dup2(in_fd >= 0 ? in_fd : null, 0);
    dup2(out_fd >= 0 ? out_fd : null, 1);
    dup2(err_fd >= 0 ? err_fd : null, 2);
    for (fd = 3; fd < 1024; fd++)
        if (fd != keep_fd) close(fd);
    for (fd = 1; fd < NSIG; fd++) signal(fd, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Runs argv (argv[0] a path), stdin from `in` (NULL: /dev/null), output
 * into R.  Returns R.code. */
static int run_v(char *const argv[], const char *in, int timeout_ms) {
    int op[2], ep[2], ip[2] = { -1, -1 };
    size_t no = 0, ne = 0;
    double t0 = dlt_now(), end = t0 + timeout_ms / 1000.0;
    pid_t pid;

    memset(&R, 0, sizeof R);
    if (pipe(op) != 0 || pipe(ep) != 0) return R.code = -1;
    if (in != NULL && pipe(ip) != 0) return R.code = -1;
    pid = fork();
    if (pid == 0) {
        child_setup(ip[0], op[1], ep[1], -1);
        execv(argv[0], argv);
        _exit(120);
    }
    close(op[1]);
    close(ep[1]);
    if (in != NULL) {
        close(ip[0]);
        (void)!write(ip[1], in, strlen(in));
        close(ip[1]);
    }
    for (;;) {
        struct pollfd p[2] = { { op[0], POLLIN, 0 }, { ep[0], POLLIN, 0 } };
        int left = (int)((end - dlt_now()) * 1000), k;
        if (p[0].fd < 0 && p[1].fd < 0) break;
        if (left <= 0) break;
        if (poll(p, 2, left) <= 0) continue;
        for (k = 0; k < 2; k++) {
            char *buf = k ? R.err : R.out;
            size_t *n = k ? &ne : &no;
            ssize_t r;
            if (p[k].fd < 0 || !(p[k].revents & (POLLIN | POLLHUP))) continue;
            r = read(p[k].fd, buf + *n, OUTMAX - 1 - *n);
            if (r <= 0) {
                close(p[k].fd);
                if (k) ep[0] = -1;
                else op[0] = -1;
            } else {
                *n += (size_t)r;
            }
        }
    }
    if (op[0] >= 0) close(op[0]);
    if (ep[0] >= 0) close(ep[0]);
    R.raw = dlt_wait_raw(pid, (int)((end - dlt_now()) * 1000) + 100);
    R.code = R.raw == -1 ? -1 : dlt_exit_code(R.raw);
    R.secs = dlt_now() - t0;
    return R.code;
}

#define ARGMAX 64

/* dlock with these arguments (NULL-terminated). */
static int dl_in(const char *in, int timeout_ms, const char *a, ...) {
    char *argv[ARGMAX];
    va_list ap;
    int n = 0;
    argv[n++] = (char *)DLOCK_CLI;
    va_start(ap, a);
    for (; a != NULL && n < ARGMAX - 1; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    return run_v(argv, in, timeout_ms);
}
#define dl(...) dl_in(NULL, 20000, __VA_ARGS__, (const char *)NULL)

/* On a failed check, what the program said. */
#define SHOW_RUN()                                                                               \
    do {                                                                                          \
        fprintf(stderr, "  [%s:%d] exit %d after %.2fs\n  stdout: %s\n  stderr: %s\n", __func__, \
                __LINE__, R.code, R.secs, R.out, R.err);                                          \
    } while (0)
#define CHECK_CODE(expr, want)                                                                   \
    do {                                                                                          \
        int got_ = (expr);                                                                        \
        if (got_ != (want)) SHOW_RUN();                                                           \
        DLT_ASSERT_INT_EQ(got_, (want));                                                          \
    } while (0)

/* Starts dlock in the background: stdout and stderr to /dev/null (or
 * err_path), stdin /dev/null. */
static pid_t dl_bg_v(char *const argv[], const char *err_path) {
    pid_t pid = fork();
    if (pid == 0) {
        int e = err_path ? open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
        child_setup(-1, -1, e, -1);
        execv(argv[0], argv);
        _exit(120);
    }
    if (pid > 0) dlt_bg_add(pid);
    return pid;
}

static char *slurp(const char *f, char *buf, size_t n) {
    FILE *fp = fopen(dlt_tpath(f), "r");
    size_t k = 0;
    buf[0] = '\0';
    if (fp == NULL) return buf;
    k = fread(buf, 1, n - 1, fp);
    buf[k] = '\0';
    fclose(fp);
    return buf;
}

/* Waits up to ms for the file f to contain text; 1 if it does. */
static int wait_text(const char *f, const char *text, int ms) {
    char buf[4096];
    double end = dlt_now() + ms / 1000.0;
    while (strstr(slurp(f, buf, sizeof buf), text) == NULL) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(10);
    }
    return 1;
}

/* ============================================================ holders */

/* A job under the lock: creates STARTED, runs until GO exists, exits 0. */
static const char gate_sh[] = ": > \"$1\"; while [ ! -e \"$2\" ]; do sleep 0.02; done";

typedef struct holder {
    pid_t pid;
    char started[64], go[64];
} holder;

/* Starts `dlock exec FLAGS... NAME -- sh -c GATE` in the background and,
 * if wait_ms > 0, waits until it runs under the lock.  flags: a
 * NULL-terminated list or NULL.  0, or -1 if it did not start in time. */
static int holder_start(holder *h, const char *tag, const char *name, const char *const *flags, int wait_ms) {
    char *argv[ARGMAX];
    int n = 0;
    snprintf(h->started, sizeof h->started, "started.%s", tag);
    snprintf(h->go, sizeof h->go, "go.%s", tag);
    unlink(dlt_tpath(h->started)); /* a tag may be used again */
    unlink(dlt_tpath(h->go));
    argv[n++] = (char *)DLOCK_CLI;
    argv[n++] = "exec";
    for (; flags != NULL && *flags != NULL; flags++) argv[n++] = (char *)*flags;
    argv[n++] = (char *)name;
    argv[n++] = "--";
    argv[n++] = "sh";
    argv[n++] = "-c";
    argv[n++] = (char *)gate_sh;
    argv[n++] = "sh";
    argv[n++] = strdup(dlt_tpath(h->started));
    argv[n++] = strdup(dlt_tpath(h->go));
    argv[n] = NULL;
    h->pid = dl_bg_v(argv, NULL);
    free(argv[n - 1]);
    free(argv[n - 2]);
    if (h->pid < 0) return -1;
    if (wait_ms > 0 && !dlt_twait_file(h->started, wait_ms)) return -1;
    return 0;
}

/* Lets the holder's job end; its exit code (or -1). */
static int holder_end(holder *h) {
    int raw;
    dlt_ttouch(h->go);
    raw = dlt_wait_raw(h->pid, 15000);
    return raw == -1 ? -1 : dlt_exit_code(raw);
}

/* `dlock status --json NAME`, parsed; NULL if it failed. */
static jv *status_json(const char *name) {
    jv *x;
    if (dl("status", "--json", name) != 0) {
        SHOW_RUN();
        return NULL;
    }
    if ((x = jparse(R.out)) == NULL) fprintf(stderr, "  not JSON: %s\n", R.out);
    return x;
}

static const char *state_of(const char *name) {
    static char st[32];
    jv *x = status_json(name);
    snprintf(st, sizeof st, "%s", x ? jtext(jget(x, "state")) : "?");
    jfree(x);
    return st;
}

/* ============================================================ pty */

/* Runs dlock in a pseudo-terminal (stdin, stdout and stderr all on it,
 * 200 columns); answer (if not NULL) is typed once `prompt` has appeared.
 * Everything the terminal showed goes to R.err.  Returns R.code. */
static int run_pty(char *const argv[], const char *prompt, const char *answer, int timeout_ms) {
    struct winsize ws = { 24, 200, 0, 0 };
    double t0 = dlt_now(), end = t0 + timeout_ms / 1000.0;
    size_t n = 0;
    int master, typed = 0;
    pid_t pid;

    memset(&R, 0, sizeof R);
    pid = forkpty(&master, NULL, NULL, &ws);
    if (pid < 0) return R.code = -1;
    if (pid == 0) {
        int fd;
        for (fd = 3; fd < 1024; fd++) close(fd);
        execv(argv[0], argv);
        _exit(120);
    }
    for (;;) {
        struct pollfd p = { master, POLLIN, 0 };
        int left = (int)((end - dlt_now()) * 1000);
        ssize_t r;
        if (left <= 0) break;
        if (poll(&p, 1, left) <= 0) continue;
        r = read(master, R.err + n, OUTMAX - 1 - n);
        if (r <= 0) break; /* EIO: the other side is closed */
        n += (size_t)r;
        R.err[n] = '\0';
        if (answer != NULL && !typed && strstr(R.err, prompt) != NULL) {
            (void)!write(master, answer, strlen(answer));
            typed = 1;
        }
    }
    R.raw = dlt_wait_raw(pid, (int)((end - dlt_now()) * 1000) + 100);
    R.code = R.raw == -1 ? -1 : dlt_exit_code(R.raw);
    R.secs = dlt_now() - t0;
    close(master);
    return R.code;
}

/* ============================================================ the tests */

/* Default mode: the command's own exit status, 128+N for a signal, 126
 * and 127 when it cannot run; the lock is free again afterwards. */
static void test_exec_exit_status(void) {
    dlt_tdir_make("dlcli");
    CHECK_CODE(dl("exec", "job", "--", "sh", "-c", "exit 7"), 7);
    CHECK_CODE(dl("exec", "-o", "-x", "job", "sh", "-c", "exit 8"), 8); /* flock's -o: accepted */
    CHECK_CODE(dl("exec", "job", "sh", "-c", "exit 0"), 0); /* no "--" */
    CHECK_CODE(dl("exec", "job", "-c", "exit 9"), 9);       /* flock's FILE -c CMD */
    CHECK_CODE(dl("exec", "-c", "echo hi; exit 3", "job"), 3);
    CU_ASSERT_STRING_EQUAL(R.out, "hi\n");
    CHECK_CODE(dl("exec", "job", "--", "sh", "-c", "kill -TERM $$"), 128 + SIGTERM);
    CHECK_CODE(dl("exec", "job", "--", "/nonexistent/dlock-test-cmd"), 127);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "not found"));
    dlt_ttouch("plain-file"); /* not executable */
    CHECK_CODE(dl("exec", "job", "--", dlt_tpath("plain-file")), 126);
    CU_ASSERT_STRING_EQUAL(state_of("job"), "free");
    /* CMD gets the hold's fencing token in DLOCK_FENCE. */
    CHECK_CODE(dl("exec", "-v", "job", "--", "sh", "-c", "echo \"fence $DLOCK_FENCE)\""), 0);
    CU_ASSERT(strlen(R.out) > 10);
    R.out[strcspn(R.out, "\n")] = '\0';
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, R.out)); /* -v: "got 'job' (exclusive, fence N)" */
    /* The command's arguments and options are its own. */
    CHECK_CODE(dl("exec", "job", "--", "sh", "-c", "printf '%s\\n' \"$*\"", "sh", "-n", "-w", "1"), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "-n -w 1\n");
    dlt_tdir_done();
}

/* Five processes run the same job at once; never two at a time. */
static void test_exec_excludes_across_processes(void) {
    static const char job[] = "if [ -e \"$1/busy\" ]; then echo overlap >> \"$1/bad\"; fi; : > \"$1/busy\"; "
                              "sleep 0.1; rm -f \"$1/busy\"; echo x >> \"$1/count\"";
    pid_t p[5];
    int i;
    dlt_tdir_make("dlcli");
    for (i = 0; i < 5; i++) {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "shared-job", "--", "sh", "-c", (char *)job, "sh", (char *)dlt_tdir(), NULL };
        p[i] = dl_bg_v(argv, NULL);
    }
    for (i = 0; i < 5; i++) DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(p[i], 20000)), 0);
    DLT_ASSERT_INT_EQ(dlt_tlines("count"), 5);
    DLT_ASSERT_INT_EQ(dlt_tlines("bad"), -1);
    dlt_tdir_done();
}

/* -n, -w 0 and -E: busy is exit 1 (or CODE) at once, and CMD does not run. */
static void test_exec_nonblock(void) {
    holder h;
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(holder_start(&h, "a", "nb", NULL, 5000) == 0);
    CHECK_CODE(dl("exec", "-n", "nb", "--", "touch", dlt_tpath("ran")), 1);
    CU_ASSERT(R.secs < 3);
    CU_ASSERT_STRING_EQUAL(R.err, ""); /* silent, as flock -n */
    CHECK_CODE(dl("exec", "--nonblock", "-E", "42", "nb", "--", "touch", dlt_tpath("ran")), 42);
    CHECK_CODE(dl("exec", "-w", "0", "nb", "--", "touch", dlt_tpath("ran")), 1);
    CHECK_CODE(dl("exec", "-n", "--conflict-exit-code", "0", "nb", "--", "touch", dlt_tpath("ran")), 0);
    CHECK_CODE(dl("exec", "-n", "-v", "nb", "--", "true"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "held by"));
    CU_ASSERT(!dlt_texists("ran"));
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    CHECK_CODE(dl("exec", "-n", "nb", "--", "touch", dlt_tpath("ran")), 0);
    CU_ASSERT(dlt_texists("ran"));
    dlt_tdir_done();
}

/* -w: exit 1 (or -E CODE) when the time is up; runs CMD as soon as the
 * holder releases within it. */
static void test_exec_wait_timeout(void) {
    holder h;
    pid_t w;
    int raw;
    double t0;
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(holder_start(&h, "a", "tw", NULL, 5000) == 0);
    CHECK_CODE(dl("exec", "-w", "0.5", "tw", "--", "touch", dlt_tpath("ran")), 1);
    CU_ASSERT(R.secs >= 0.45 && R.secs < 3);
    CHECK_CODE(dl("exec", "--timeout", "0.3", "-E", "3", "tw", "--", "touch", dlt_tpath("ran")), 3);
    CHECK_CODE(dl("exec", "--wait=500ms", "-E", "3", "tw", "--", "touch", dlt_tpath("ran")), 3);
    CU_ASSERT(!dlt_texists("ran"));
    {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "-w", "20", "tw", "--", "touch", dlt_tpath("ran"), NULL };
        w = dl_bg_v(argv, NULL);
    }
    dlt_sleep_ms(500);
    CU_ASSERT(!dlt_texists("ran"));
    t0 = dlt_now();
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    raw = dlt_wait_raw(w, 10000);
    DLT_ASSERT_INT_EQ(dlt_exit_code(raw), 0);
    CU_ASSERT(dlt_now() - t0 < 3); /* woken by the release, not by a poll */
    CU_ASSERT(dlt_texists("ran"));
    dlt_tdir_done();
}

/* -s: shared holders run together; an exclusive one waits for them, and
 * they wait for it. */
static void test_exec_shared(void) {
    static const char both[] = ": > \"$1/in.$2\"; i=0; while [ ! -e \"$1/in.$3\" ]; do "
                               "i=$((i+1)); [ $i -gt 250 ] && exit 9; sleep 0.02; done";
    holder h, x;
    pid_t a, b;
    jv *st;
    dlt_tdir_make("dlcli");
    {
        char *av[] = { (char *)DLOCK_CLI, "exec", "-s", "sh1", "--", "sh", "-c", (char *)both, "sh", (char *)dlt_tdir(), "a", "b", NULL };
        char *bv[] = { (char *)DLOCK_CLI, "exec", "--shared", "sh1", "--", "sh", "-c", (char *)both, "sh", (char *)dlt_tdir(), "b", "a", NULL };
        a = dl_bg_v(av, NULL);
        b = dl_bg_v(bv, NULL);
    }
    /* Each one finishes only once it has seen the other inside. */
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(a, 15000)), 0);
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(b, 15000)), 0);

    static const char *const sflag[] = { "-s", NULL };
    CU_ASSERT_FATAL(holder_start(&h, "s1", "sh2", sflag, 5000) == 0);
    CU_ASSERT_FATAL(holder_start(&x, "s2", "sh2", sflag, 5000) == 0);
    CHECK_CODE(dl("exec", "-n", "sh2", "--", "true"), 1);   /* exclusive: busy */
    CHECK_CODE(dl("exec", "-n", "-x", "sh2", "--", "true"), 1);
    CHECK_CODE(dl("exec", "-n", "-s", "sh2", "--", "true"), 0); /* shared: fine */
    st = status_json("sh2");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "state")), "shared");
    DLT_ASSERT_INT_EQ(jnum(jget(st, "shared_holders")), 2);
    CU_ASSERT(jis(jget(st, "holder"), J_NULL));
    jfree(st);
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    DLT_ASSERT_INT_EQ(holder_end(&x), 0);

    CU_ASSERT_FATAL(holder_start(&h, "x1", "sh3", NULL, 5000) == 0);
    CHECK_CODE(dl("exec", "-n", "-s", "sh3", "--", "true"), 1); /* shared waits for exclusive */
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    dlt_tdir_done();
}

/* -s nested: a shared holder whose command takes the same shared lock
 * again while an exclusive request waits goes on (flock(2)'s rule: a
 * shared lock is granted while only shared locks are held); the
 * exclusive one runs after.  Writers-first would deadlock the first. */
static void test_exec_shared_nested(void) {
    pid_t a, x;
    dlt_tdir_make("dlcli");
    {
        /* (--pass-url: the inner dlock needs the server's URL) */
        char *av[] = { (char *)DLOCK_CLI, "exec", "--pass-url", "-s", "nest", "--", "sh", "-c",
                       "sleep 1; \"$1\" exec -s nest -- touch \"$2/inner\"", "sh", (char *)DLOCK_CLI, (char *)dlt_tdir(), NULL };
        a = dl_bg_v(av, NULL);
    }
    dlt_sleep_ms(400);
    {
        char *xv[] = { (char *)DLOCK_CLI, "exec", "nest", "--", "touch", dlt_tpath("outer"), NULL };
        x = dl_bg_v(xv, NULL);
    }
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(a, 10000)), 0); /* -1: still waiting, killed */
    CU_ASSERT(dlt_texists("inner"));
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(x, 10000)), 0);
    CU_ASSERT(dlt_texists("outer"));
    dlt_tdir_done();
}

/* The lease is renewed while CMD runs: with a 1 s lease and a job of
 * over 3 s, nobody else gets the lock meanwhile. */
static void test_exec_lease_renewed(void) {
    static const char *const lease[] = { "--lease", "1s", NULL };
    holder h;
    jv *st;
    int i;
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(holder_start(&h, "a", "renew", lease, 5000) == 0);
    for (i = 0; i < 8; i++) {
        dlt_sleep_ms(400);
        CHECK_CODE(dl("exec", "-n", "renew", "--", "true"), 1);
    }
    st = status_json("renew");
    CU_ASSERT(jnum(jget(st, "lease_left_ms")) > 0 && jnum(jget(st, "lease_left_ms")) <= 1000);
    jfree(st);
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    CU_ASSERT_STRING_EQUAL(state_of("renew"), "free"); /* released, not left to expire */
    dlt_tdir_done();
}

/* dlock SIGKILLed while CMD runs: CMD gets SIGTERM, and the lock expires
 * after its lease, when a waiter gets it. */
static void test_exec_killed_lock_expires(void) {
    static const char job[] = "trap 'echo term >> \"$1/log\"; exit 0' TERM; : > \"$1/started\"; "
                              "sleep 30 & wait";
    char *argv[] = { (char *)DLOCK_CLI, "exec", "--lease", "0.8", "gone", "--", "sh", "-c", (char *)job, "sh", (char *)dlt_tdir(), NULL };
    pid_t p;
    dlt_tdir_make("dlcli");
    p = dl_bg_v(argv, NULL);
    CU_ASSERT_FATAL(dlt_twait_file("started", 5000));
    kill(p, SIGKILL);
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(p, 5000)), 128 + SIGKILL);
    CU_ASSERT(dlt_twait_file("log", 3000)); /* PR_SET_PDEATHSIG */
    CU_ASSERT_STRING_EQUAL(state_of("gone"), "exclusive"); /* not released... */
    CHECK_CODE(dl("exec", "-w", "5", "gone", "--", "true"), 0); /* ...but expired */
    CU_ASSERT(R.secs < 2.5);
    dlt_tdir_done();
}

/* SIGTERM, SIGHUP, SIGINT and SIGUSR1 sent to dlock reach CMD; dlock
 * exits with CMD's status and releases the lock. */
static void test_exec_signals_passed_on(void) {
    static const char job[] =
        "trap 'echo $2 >> \"$1/got\"; exit 5' $2; : > \"$1/started.$2\"; sleep 30 & wait; exit 1";
    static const int sigs[] = { SIGTERM, SIGHUP, SIGINT, SIGUSR1 };
    static const char *const names[] = { "TERM", "HUP", "INT", "USR1" };
    char got[256];
    size_t i;
    dlt_tdir_make("dlcli");
    for (i = 0; i < 4; i++) {
        char st[32];
        char *argv[] = { (char *)DLOCK_CLI, "exec", "relay", "--", "sh", "-c", (char *)job, "sh", (char *)dlt_tdir(), (char *)names[i], NULL };
        pid_t p = dl_bg_v(argv, NULL);
        snprintf(st, sizeof st, "started.%s", names[i]);
        CU_ASSERT_FATAL(dlt_twait_file(st, 5000));
        kill(p, sigs[i]);
        DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(p, 5000)), 5);
        CU_ASSERT_STRING_EQUAL(state_of("relay"), "free");
    }
    CU_ASSERT_STRING_EQUAL(slurp("got", got, sizeof got), "TERM\nHUP\nINT\nUSR1\n");
    dlt_tdir_done();
}

/* Ctrl-C on the terminal reaches CMD once (the terminal sends it to the
 * whole process group), not twice. */
static void test_exec_terminal_ctrl_c_once(void) {
    static const char job[] = "trap 'echo int >> \"$1/got\"' INT; : > \"$1/started\"; "
                              "sleep 3 & wait; sleep 0.5 & wait; exit 4";
    char *argv[] = { (char *)DLOCK_CLI, "exec", "ctrlc", "--", "sh", "-c", (char *)job, "sh", (char *)dlt_tdir(), NULL };
    struct winsize ws = { 24, 200, 0, 0 };
    int master, raw;
    pid_t p;
    dlt_tdir_make("dlcli");
    p = forkpty(&master, NULL, NULL, &ws);
    CU_ASSERT_FATAL(p >= 0);
    if (p == 0) {
        int fd;
        for (fd = 3; fd < 1024; fd++) close(fd);
        execv(argv[0], argv);
        _exit(120);
    }
    dlt_bg_add(p);
    CU_ASSERT(dlt_twait_file("started", 5000));
    (void)!write(master, "\003", 1); /* the terminal's interrupt character */
    raw = dlt_wait_raw(p, 10000);
    close(master);
    DLT_ASSERT_INT_EQ(dlt_exit_code(raw), 4);
    DLT_ASSERT_INT_EQ(dlt_tlines("got"), 1);
    dlt_tdir_done();
}

/* A signal while waiting ends the wait: dlock dies of it, CMD never runs,
 * and the waiter takes nothing. */
static void test_exec_signal_while_waiting(void) {
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    holder h;
    size_t i;
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(holder_start(&h, "a", "sigwait", NULL, 5000) == 0);
    for (i = 0; i < 3; i++) {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "-v", "sigwait", "--", "touch", dlt_tpath("ran"), NULL };
        pid_t w = dl_bg_v(argv, dlt_tpath("err"));
        int raw;
        CU_ASSERT(wait_text("err", "waiting for", 5000)); /* it waits */
        dlt_sleep_ms(100);
        kill(w, sigs[i]);
        raw = dlt_wait_raw(w, 5000);
        CU_ASSERT(raw != -1 && WIFSIGNALED(raw) && WTERMSIG(raw) == sigs[i]);
    }
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    CU_ASSERT(!dlt_texists("ran"));
    CU_ASSERT_STRING_EQUAL(state_of("sigwait"), "free");
    dlt_tdir_done();
}

/* CMD inherits the descriptors dlock was given, never dlock's own
 * connections to the server. */
static void test_exec_no_descriptor_leak(void) {
    static const char list[] = "for f in /proc/$$/fd/*; do echo ${f##*/}; done";
    char direct[4096], via[4096];
    int k;
    dlt_tdir_make("dlcli");
    for (k = 0; k < 2; k++) {
        char *argv_d[] = { "/bin/sh", "-c", (char *)list, NULL };
        char *argv_v[] = { (char *)DLOCK_CLI, "exec", "fds", "--", "/bin/sh", "-c", (char *)list, NULL };
        char *const *argv = k ? argv_v : argv_d;
        int out = open(dlt_tpath(k ? "via" : "direct"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        pid_t p = fork();
        if (p == 0) {
            int keep = open("/dev/null", O_RDONLY);
            dup2(keep, 7);
            child_setup(-1, out, -1, 7);
            execv(argv[0], argv);
            _exit(120);
        }
        close(out);
        DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(p, 10000)), 0);
    }
    slurp("direct", direct, sizeof direct);
    slurp("via", via, sizeof via);
    CU_ASSERT_PTR_NOT_NULL(strstr(direct, "\n7\n"));
    CU_ASSERT_STRING_EQUAL(via, direct);
    if (strcmp(via, direct) != 0) fprintf(stderr, "  direct:\n%s  via dlock:\n%s", direct, via);
    dlt_tdir_done();
}

/* libssl is loaded only for a rediss:// server: the process of an exec
 * on a plain one has no libssl mapped (nor, when the program carries its
 * own libcrypto, the shared one); one over TLS has, and its command runs
 * under the lock. */
static void test_exec_loads_tls_only_for_rediss(void) {
    static const char count[] = "grep -c libssl /proc/$PPID/maps || true";
    static dlt_redis tls;
    char url[1200], q[600];
    const char *dir;
    CHECK_CODE(dl("exec", "cli/plain-no-tls", "--", "sh", "-c", count), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "0\n");
#ifdef DLOCK_CLI_STATIC_CRYPTO
    CHECK_CODE(dl("exec", "cli/plain-no-tls", "--", "sh", "-c", "grep -c libcrypto /proc/$PPID/maps || true"), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "0\n");
#endif
    CU_ASSERT_FATAL((dir = dlt_tls_dir()) != NULL);
    CU_ASSERT_FATAL(dlt_tls_server_start(&tls, 0, NULL, NULL, NULL) == 0);
    snprintf(q, sizeof q, "tls_ca_file=%s/ca.crt", dir);
    dlt_tls_server_url(&tls, url, sizeof url, NULL, "127.0.0.1", q);
    CHECK_CODE(dl("--url", url, "exec", "-v", "cli/over-tls", "--", "sh", "-c", count), 0);
    CU_ASSERT(atoi(R.out) > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "got 'cli/over-tls'"));
    CHECK_CODE(dl("--url", url, "status", "cli/over-tls"), 0); /* (and exits cleanly after TLS) */
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "cli/over-tls"));
    CHECK_CODE(dl("--url", url, "list"), 0);
    /* redis:// to the TLS port: the TLS probe (libssl loaded then, in a
     * process whose OpenSSL set up for plain RESP) tells. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/?unreachable_ms=3000", tls.port);
    CHECK_CODE(dl("--url", url, "exec", "cli/plain-to-tls", "--", "true"), 69);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "seems to expect TLS"));
    dlt_redis_cleanup(&tls);
}

/* A plain server's exec never reads OpenSSL's configuration file: with
 * OPENSSL_CONF naming a FIFO nobody writes to, reading it would block
 * for ever; the exec runs at once. */
static void test_exec_reads_no_openssl_conf(void) {
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(mkfifo(dlt_tpath("conf"), 0600) == 0);
    setenv("OPENSSL_CONF", dlt_tpath("conf"), 1);
    CHECK_CODE(dl_in(NULL, 5000, "exec", "cli/no-conf", "--", "true", (const char *)NULL), 0);
    unsetenv("OPENSSL_CONF");
    CU_ASSERT(R.secs < 4);
    dlt_tdir_done();
}

/* The command starts as it would without dlock: the signal mask and the
 * ignored signals are those dlock was given (dlock itself ignores
 * SIGPIPE and catches six others); and a script without "#!", which
 * execvpe hands to sh with a new argument list, runs with 50,000
 * arguments (the child's stack holds that list). */
static void test_exec_child_starts_clean(void) {
    static const char show[] = "grep -E '^Sig(Blk|Ign|Cgt)' /proc/self/status";
    static char direct[OUTMAX];
    char *argv[] = { "/bin/sh", "-c", (char *)show, NULL }, **big;
    size_t i, n = 50000;
    FILE *f;
    CHECK_CODE(run_v(argv, NULL, 5000), 0);
    snprintf(direct, sizeof direct, "%s", R.out);
    CHECK_CODE(dl("exec", "cli/clean", "--", "/bin/sh", "-c", show), 0);
    CU_ASSERT_STRING_EQUAL(R.out, direct);
    CU_ASSERT_PTR_NOT_NULL(strstr(direct, "SigIgn"));
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL((f = fopen(dlt_tpath("noshebang"), "w")) != NULL);
    fputs("echo \"$#\"\n", f);
    fclose(f);
    CU_ASSERT_FATAL(chmod(dlt_tpath("noshebang"), 0700) == 0);
    CU_ASSERT_FATAL((big = calloc(n + 6, sizeof *big)) != NULL);
    big[0] = (char *)DLOCK_CLI;
    big[1] = "exec";
    big[2] = "cli/clean";
    big[3] = "--";
    big[4] = dlt_tpath("noshebang");
    for (i = 0; i < n; i++) big[5 + i] = "x";
    CHECK_CODE(run_v(big, NULL, 10000), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "50000\n");
    free(big);
    dlt_tdir_done();
}

/* Bad arguments are exit 64 with a message, and touch nothing. */
static void test_usage_errors(void) {
    char longname[DLOCK_NAME_MAX + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CHECK_CODE(dl("frobnicate"), 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "unknown command"));
    CHECK_CODE(dl_in(NULL, 5000, (const char *)NULL), 64);
    CHECK_CODE(dl("exec"), 64);
    CHECK_CODE(dl("exec", "job"), 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "no command"));
    CHECK_CODE(dl("exec", "--bogus", "job", "true"), 64);
    CHECK_CODE(dl("exec", "-E", "256", "job", "true"), 64);
    CHECK_CODE(dl("exec", "-E", "x", "job", "true"), 64);
    CHECK_CODE(dl("exec", "-w", "soon", "job", "true"), 64);
    CHECK_CODE(dl("exec", "-w", "-1", "job", "true"), 64);
    CHECK_CODE(dl("exec", "--lease", "10ms", "job", "true"), 64);
    CHECK_CODE(dl("exec", "--on-lost=maybe", "job", "true"), 64);
    CHECK_CODE(dl("exec", "-c", "true", "job", "extra"), 64);
    CHECK_CODE(dl("exec", "", "true"), 64);
    CHECK_CODE(dl("exec", longname, "true"), 64);
    CHECK_CODE(dl("status"), 64);
    CHECK_CODE(dl("status", "a", "b"), 64);
    CHECK_CODE(dl("status", "--force", "a"), 64);
    CHECK_CODE(dl("list", "a", "b"), 64);
    CHECK_CODE(dl("--url", "http://example.com", "status", "a"), 64);
    CHECK_CODE(dl("--url", "redis://h:1/?nonsense=1", "list"), 64);
    CHECK_CODE(dl("break", "a"), 64); /* not a terminal, no --force */
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "--force"));
    CHECK_CODE(dl("--help"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "Usage"));
    CHECK_CODE(dl("exec", "--help"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "--conflict-exit-code"));
    CHECK_CODE(dl("--version"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, DLOCK_VERSION_STRING));
}

/* An unreachable server is exit 69 for every command, with a clear
 * message and never the password; so is a refused password. */
static void test_unreachable_and_passwords(void) {
    char url[256], url_slow[256];
    dlt_redis auth;
    const char *secret = "Sup3rS3cretPw";
    dlt_tdir_make("dlcli");
    snprintf(url, sizeof url, "redis://admin:%s@127.0.0.1:%d/?unreachable_ms=300", secret, dlt_server.port);
    snprintf(url_slow, sizeof url_slow, "redis://admin:%s@127.0.0.1:%d/", secret, dlt_server.port);
    CU_ASSERT_FATAL(dlt_redis_stop(&dlt_server) == 0);
#define NO_SECRET()                                                    \
    do {                                                               \
        CU_ASSERT_PTR_NULL(strstr(R.out, secret));                     \
        CU_ASSERT_PTR_NULL(strstr(R.err, secret));                     \
        CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "***"));                  \
    } while (0)
    CHECK_CODE(dl("--url", url, "exec", "j", "--", "touch", dlt_tpath("ran")), 69);
    NO_SECRET();
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "could not be reached"));
    CHECK_CODE(dl("--url", url, "exec", "-n", "j", "--", "touch", dlt_tpath("ran")), 69);
    NO_SECRET();
    CHECK_CODE(dl("--url", url, "exec", "-w", "0.2", "j", "--", "touch", dlt_tpath("ran")), 69);
    NO_SECRET();
    CHECK_CODE(dl("exec", "--url", url, "-s", "j", "--", "touch", dlt_tpath("ran")), 69);
    NO_SECRET();
    CHECK_CODE(dl("--url", url, "status", "j"), 69);
    NO_SECRET();
    CHECK_CODE(dl("--url", url, "status", "--json", "j"), 69);
    NO_SECRET();
    CU_ASSERT_STRING_EQUAL(R.out, "");
    CHECK_CODE(dl("--url", url, "list"), 69);
    NO_SECRET();
    CHECK_CODE(dl("--url", url, "break", "--force", "j"), 69);
    NO_SECRET();
    /* The default bound (5 s), with the URL from the environment; -w
     * bounds the wait for a dead server too. */
    setenv("DLOCK_URL", url_slow, 1);
    CHECK_CODE(dl("status", "j"), 69);
    NO_SECRET();
    CU_ASSERT(R.secs < 10);
    CHECK_CODE(dl("exec", "-w", "1", "j", "--", "touch", dlt_tpath("ran")), 69);
    NO_SECRET();
    CU_ASSERT(R.secs < 4);
    setenv("DLOCK_URL", dlt_server.url, 1);
    CU_ASSERT(!dlt_texists("ran"));

    /* A server that wants a password, given the wrong one. */
    CU_ASSERT_FATAL(dlt_redis_start(&auth, NULL) == 0);
    {
        redisReply *r = dlt_redis_cmd(&auth, "CONFIG SET requirepass right-one");
        CU_ASSERT(r != NULL && r->type == REDIS_REPLY_STATUS);
        if (r != NULL) freeReplyObject(r);
    }
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", secret, auth.port);
    CHECK_CODE(dl("--url", url, "exec", "j", "--", "touch", dlt_tpath("ran")), 69);
    NO_SECRET();
    CHECK_CODE(dl("--url", url, "list", "--json"), 69);
    NO_SECRET();
    snprintf(url, sizeof url, "redis://:right-one@127.0.0.1:%d", auth.port);
    CHECK_CODE(dl("--url", url, "exec", "j", "--", "touch", dlt_tpath("ran")), 0);
    CU_ASSERT(dlt_texists("ran"));
    dlt_redis_cleanup(&auth);
#undef NO_SECRET
    dlt_tdir_done();
}

/* A release the server refuses (here its ACL: a user without +mget, as
 * made by an earlier version's line): the command ran and its status
 * stands, and exec says why it could not release -- the server's own
 * refusal, never the password -- and for how long the lock stays. */
static void test_exec_release_refused(void) {
    const char *secret = "Rel3aseS3cret";
    char url[256];
    redisReply *r = dlt_redis_cmd(&dlt_server, "ACL SETUSER nomget on >%s ~* &* +@all -mget", secret);
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    dlt_tdir_make("dlcli");
    snprintf(url, sizeof url, "redis://nomget:%s@127.0.0.1:%d", secret, dlt_server.port);
    CHECK_CODE(dl("--url", url, "exec", "cli/release-refused", "--", "touch", dlt_tpath("ran")), 0);
    CU_ASSERT(dlt_texists("ran"));
    if (strstr(R.err, "refused by the server's ACL") == NULL) SHOW_RUN();
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "could not release 'cli/release-refused'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "refused by the server's ACL"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "it expires within"));
    CU_ASSERT_PTR_NULL(strstr(R.err, secret));
    freeReplyObject(dlt_redis_cmd(&dlt_server, "DEL dlock:{cli/release-refused}"));
    freeReplyObject(dlt_redis_cmd(&dlt_server, "ACL DELUSER nomget"));
    dlt_tdir_done();
}

/* status: the holder's identity, acquired-at, lease, fence, shared
 * holders and waiting writers; as a table and as JSON read back. */
/* DLOCK_DEBUG: the library's decisions on stderr, one line each, never a
 * password; nothing without it (or with "0"). */
static void test_debug_log(void) {
    char url[256];
    const char *secret = "Sup3rS3cretPw";
    dlt_tdir_make("dlcli");
    setenv("DLOCK_DEBUG", "1", 1);
    CHECK_CODE(dl("exec", "dbg", "--", "true"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "dlock["));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, ": connected to 127.0.0.1:"));
    /* a dead server, its password in the URL */
    snprintf(url, sizeof url, "redis://admin:%s@127.0.0.1:1/?unreachable_ms=300", secret);
    CHECK_CODE(dl("--url", url, "exec", "-n", "dbg", "--", "true"), 69);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "no connection"));
    CU_ASSERT_PTR_NULL(strstr(R.err, secret));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "admin:***@"));
    setenv("DLOCK_DEBUG", "0", 1);
    CHECK_CODE(dl("exec", "dbg", "--", "true"), 0);
    CU_ASSERT_PTR_NULL(strstr(R.err, "dlock["));
    unsetenv("DLOCK_DEBUG");
    CHECK_CODE(dl("exec", "dbg", "--", "true"), 0);
    CU_ASSERT_PTR_NULL(strstr(R.err, "dlock["));
}

static void test_status(void) {
    static const char *const lease[] = { "--lease", "5", NULL };
    char host[256], pidtxt[32];
    holder h;
    jv *st, *ho;
    long long now_ms;
    pid_t waiter;
    dlt_tdir_make("dlcli");
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';

    st = status_json("st");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "state")), "free");
    CU_ASSERT(jis(jget(st, "holder"), J_NULL));
    CU_ASSERT(jis(jget(st, "fence"), J_NULL));
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "name")), "st");
    jfree(st);
    CHECK_CODE(dl("status", "st"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "free"));

    CU_ASSERT_FATAL(holder_start(&h, "a", "st", lease, 5000) == 0);
    {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "-q", "st", "--", "true", NULL };
        waiter = dl_bg_v(argv, NULL); /* a waiting writer */
    }
    dlt_sleep_ms(600);
    st = status_json("st");
    CU_ASSERT_FATAL(st != NULL);
    now_ms = dlt_wall_ms();
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "name")), "st");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "state")), "exclusive");
    ho = jget(st, "holder");
    CU_ASSERT_STRING_EQUAL(jtext(jget(ho, "host")), host);
    DLT_ASSERT_INT_EQ(jnum(jget(ho, "pid")), h.pid);
    DLT_ASSERT_INT_EQ(jnum(jget(ho, "tid")), h.pid); /* the holder is dlock's main thread */
    CU_ASSERT(jnumu(jget(st, "fence")) > 0);
    CU_ASSERT(jnum(jget(st, "lease_left_ms")) > 0 && jnum(jget(st, "lease_left_ms")) <= 5000);
    CU_ASSERT(llabs(jnum(jget(st, "acquired_ms")) - now_ms) < 10000);
    CU_ASSERT(jnum(jget(st, "held_ms")) >= 0 && jnum(jget(st, "held_ms")) < 10000);
    /* held_ms is on the server's clock: its time when it answered. */
    DLT_ASSERT_INT_EQ(jnum(jget(st, "held_ms")), jnum(jget(st, "server_time_ms")) - jnum(jget(st, "acquired_ms")));
    CU_ASSERT(strlen(jtext(jget(st, "acquired"))) == 24); /* 2024-05-01T10:00:03.123Z */
    DLT_ASSERT_INT_EQ(jnum(jget(st, "shared_holders")), 0);
    DLT_ASSERT_INT_EQ(jnum(jget(st, "writers_waiting")), 1);
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "robust")), "none");

    /* The table says the same. */
    CHECK_CODE(dl("status", "st"), 0);
    snprintf(pidtxt, sizeof pidtxt, "pid %d, thread %d", (int)h.pid, (int)h.pid);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "exclusive"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, pidtxt));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, host));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, jget(st, "fence")->s));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "writers waiting  1"));
    jfree(st);

    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(waiter, 10000)), 0);
    dlt_tdir_done();
}

/* status of a hold taken by the pipelined SET of the uncontended path,
 * whose record keeps no fence until its first renewal (a third of the
 * 10 s lease): JSON null, the table says so. */
static void test_status_fence_not_kept(void) {
    dlock_mutex_t m;
    jv *st;
    dlt_tdir_make("dlcli");
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "st-plain", 0, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* (the first asks the script; the next is pipelined) */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    st = status_json("st-plain");
    CU_ASSERT_FATAL(st != NULL);
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "state")), "exclusive");
    DLT_ASSERT_INT_EQ(jnum(jget(jget(st, "holder"), "pid")), getpid());
    CU_ASSERT(jis(jget(st, "fence"), J_NULL));
    jfree(st);
    CHECK_CODE(dl("status", "st-plain"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "fence            - (not kept yet: taken on the uncontended path, recorded at its first renewal)"));
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
}

/* list: every held lock matching a glob, sorted, as a table and as a
 * JSON array read back. */
static void test_list(void) {
    static const char *const sflag[] = { "-s", NULL };
    holder a, b, c, d;
    jv *l;
    char *line;
    int rows = 0;
    dlt_tdir_make("dlcli");
    CHECK_CODE(dl("list", "--json"), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "[]\n");
    CHECK_CODE(dl("list"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "no lock"));

    CU_ASSERT_FATAL(holder_start(&a, "a", "jobs/b", NULL, 5000) == 0);
    CU_ASSERT_FATAL(holder_start(&b, "b", "jobs/a", NULL, 5000) == 0);
    CU_ASSERT_FATAL(holder_start(&c, "c", "other", sflag, 5000) == 0);
    CU_ASSERT_FATAL(holder_start(&d, "d", "other", sflag, 5000) == 0);

    CHECK_CODE(dl("list", "--json"), 0);
    l = jparse(R.out);
    CU_ASSERT_FATAL(jis(l, J_ARR));
    DLT_ASSERT_INT_EQ(l->n, 3);
    if (l->n == 3) {
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[0], "name")), "jobs/a");
        DLT_ASSERT_INT_EQ(jnum(jget(jget(l->v[0], "holder"), "pid")), b.pid);
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[1], "name")), "jobs/b");
        DLT_ASSERT_INT_EQ(jnum(jget(jget(l->v[1], "holder"), "pid")), a.pid);
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[2], "name")), "other");
        CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[2], "state")), "shared");
        DLT_ASSERT_INT_EQ(jnum(jget(l->v[2], "shared_holders")), 2);
    }
    jfree(l);

    CHECK_CODE(dl("list", "--json", "jobs/*"), 0);
    l = jparse(R.out);
    CU_ASSERT(jis(l, J_ARR) && l->n == 2);
    jfree(l);
    CHECK_CODE(dl("list", "--json", "nothing*"), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "[]\n");

    CHECK_CODE(dl("list", "jobs/*"), 0);
    for (line = strtok(R.out, "\n"); line != NULL; line = strtok(NULL, "\n"), rows++) {
        if (rows == 0) {
            CU_ASSERT(strncmp(line, "NAME", 4) == 0);
            CU_ASSERT_PTR_NOT_NULL(strstr(line, "FENCE"));
        } else {
            CU_ASSERT(strncmp(line, rows == 1 ? "jobs/a " : "jobs/b ", 7) == 0);
            CU_ASSERT_PTR_NOT_NULL(strstr(line, "exclusive"));
        }
    }
    DLT_ASSERT_INT_EQ(rows, 3);

    DLT_ASSERT_INT_EQ(holder_end(&a), 0);
    DLT_ASSERT_INT_EQ(holder_end(&b), 0);
    DLT_ASSERT_INT_EQ(holder_end(&c), 0);
    DLT_ASSERT_INT_EQ(holder_end(&d), 0);
    CHECK_CODE(dl("list", "--json"), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "[]\n");
    dlt_tdir_done();
}

/* A name as long as a name may be (DLOCK_NAME_MAX bytes, its backslashes
 * shown doubled) is printed whole in list's tables, a lock's and a
 * semaphore's, and its row's other cells still follow it. */
static void test_list_long_names(void) {
    char name[DLOCK_NAME_MAX + 1], shown[DLOCK_NAME_MAX + 16], *row;
    dlock_mutex_t m;
    dlock_sem_t s;
    memset(name, 'n', DLOCK_NAME_MAX);
    memcpy(name, "long/", 5);
    memcpy(name + DLOCK_NAME_MAX - 4, "\\\\\\\\", 4);
    name[DLOCK_NAME_MAX] = '\0';
    memcpy(shown, name, DLOCK_NAME_MAX - 4);
    strcpy(shown + DLOCK_NAME_MAX - 4, "\\\\\\\\\\\\\\\\  "); /* each backslash doubled, then the gap */
    DLT_ASSERT_ERR(dlock_mutex_init(&m, name, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, name, 2, NULL), 0);
    CHECK_CODE(dl("list", "long/*"), 0);
    row = strstr(R.out, shown);
    CU_ASSERT_PTR_NOT_NULL(row);
    if (row != NULL) CU_ASSERT_PTR_NOT_NULL(strstr(row, "exclusive"));
    row = row != NULL ? strstr(row + 1, shown) : NULL;
    CU_ASSERT_PTR_NOT_NULL(row);
    if (row != NULL) CU_ASSERT_PTR_NOT_NULL(strstr(row, "semaphore"));
    if (row == NULL) fprintf(stderr, "  dlock list printed:\n%s\n", R.out);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    DLT_ASSERT_ERR(dlock_sem_unlink(NULL, name), 0);
}

/* Names are data: quotes, backslashes, control bytes and UTF-8 come back
 * intact through JSON, and a table never shows a raw control byte. */
static void test_odd_names(void) {
    static const char *const names[] = { "q\"uote\\back", "tab\there\nnl", "caf\xc3\xa9/\xe2\x82\xac", "esc\x1b[31mred" };
    size_t i;
    dlt_tdir_make("dlcli");
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        holder h;
        jv *l;
        CU_ASSERT_FATAL(holder_start(&h, "a", names[i], NULL, 5000) == 0);
        CHECK_CODE(dl("list", "--json"), 0);
        l = jparse(R.out);
        CU_ASSERT(jis(l, J_ARR) && l->n == 1);
        if (jis(l, J_ARR) && l->n == 1) CU_ASSERT_STRING_EQUAL(jtext(jget(l->v[0], "name")), names[i]);
        jfree(l);
        CHECK_CODE(dl("list"), 0);
        CU_ASSERT_PTR_NULL(strchr(R.out, '\x1b'));
        CU_ASSERT_PTR_NULL(strchr(R.out, '\t'));
        CHECK_CODE(dl("status", names[i]), 0);
        CU_ASSERT_PTR_NULL(strchr(R.out, '\x1b'));
        DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    }
    dlt_tdir_done();
}

/* break: --force in scripts; the holder loses the lock, and its CMD gets
 * SIGTERM (--on-lost=term, the default) or keeps running (warn). */
static void test_break(void) {
    static const char *const lease[] = { "--lease", "600ms", NULL };
    char errlog[4096];
    holder h;
    jv *b;
    dlt_tdir_make("dlcli");
    CHECK_CODE(dl("break", "--force", "--json", "free-one"), 0);
    b = jparse(R.out);
    CU_ASSERT(jis(jget(b, "was_held"), J_BOOL) && !jget(b, "was_held")->b);
    jfree(b);

    CU_ASSERT_FATAL(holder_start(&h, "a", "brk", lease, 5000) == 0);
    CHECK_CODE(dl("break", "brk"), 64); /* not a terminal: refused */
    CU_ASSERT_STRING_EQUAL(state_of("brk"), "exclusive");
    CHECK_CODE(dl("break", "--force", "--json", "brk"), 0);
    b = jparse(R.out);
    CU_ASSERT_FATAL(b != NULL);
    CU_ASSERT(jget(b, "was_held") != NULL && jget(b, "was_held")->b);
    CU_ASSERT_STRING_EQUAL(jtext(jget(b, "how")), "ownerdead");
    DLT_ASSERT_INT_EQ(jnum(jget(jget(jget(b, "before"), "holder"), "pid")), h.pid);
    jfree(b);
    /* The holder learns at its next renewal (a third of 600 ms); its
     * command gets SIGTERM, and dlock exits 75: the lock was lost. */
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(h.pid, 5000)), 75);
    CHECK_CODE(dl("exec", "-n", "brk", "--", "true"), 0);

    /* --on-lost=warn: the job goes on, and dlock says why. */
    {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "--lease", "600ms", "--on-lost=warn", "brk2", "--",
                         "sh", "-c", (char *)gate_sh, "sh", dlt_tpath("started.w"), dlt_tpath("go.w"), NULL };
        h.pid = dl_bg_v(argv, dlt_tpath("err.w"));
        snprintf(h.go, sizeof h.go, "go.w");
        CU_ASSERT_FATAL(dlt_twait_file("started.w", 5000));
    }
    CHECK_CODE(dl("break", "-f", "brk2"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "broke"));
    CU_ASSERT(wait_text("err.w", "lost the lock", 5000));
    DLT_ASSERT_INT_EQ(holder_end(&h), 75); /* it ran to its end (0), without the lock */
    CU_ASSERT_PTR_NOT_NULL(strstr(slurp("err.w", errlog, sizeof errlog), "--on-lost=warn"));

    /* --lost-exit-code chooses the code. */
    {
        char *argv[] = { (char *)DLOCK_CLI, "exec", "--lease", "600ms", "--on-lost=warn", "--lost-exit-code", "9",
                         "brk3", "--", "sh", "-c", (char *)gate_sh, "sh", dlt_tpath("started.l"), dlt_tpath("go.l"), NULL };
        h.pid = dl_bg_v(argv, NULL);
        snprintf(h.go, sizeof h.go, "go.l");
        CU_ASSERT_FATAL(dlt_twait_file("started.l", 5000));
    }
    CHECK_CODE(dl("break", "-f", "brk3"), 0);
    dlt_sleep_ms(1000); /* a renewal or two: it hears of it */
    DLT_ASSERT_INT_EQ(holder_end(&h), 9);
    /* ...and a lock kept to the end leaves the command's own status. */
    CHECK_CODE(dl("exec", "--lost-exit-code", "9", "brk3", "--", "sh", "-c", "exit 3"), 3);
    CHECK_CODE(dl("exec", "--lost-exit-code", "256", "brk3", "--", "true"), 64);
    dlt_tdir_done();
}

/* CLI conventions: an empty prefix is refused however it is given --
 * --prefix '', DLOCK_PREFIX='', ?prefix= (so that "empty" never means the
 * default for one and an empty prefix for another); -V and --version
 * work after the command's name too. */
static void test_cli_conventions(void) {
    char url[256];
    CHECK_CODE(dl("--prefix", "", "status", "x"), 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "prefix is empty"));
    CHECK_CODE(dl("status", "--prefix", "", "x"), 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "prefix is empty"));
    CHECK_CODE(dl("--prefix", "", "exec", "-n", "x", "--", "true"), 64);
    snprintf(url, sizeof url, "%s?prefix=", dlt_server.url);
    CHECK_CODE(dl("--url", url, "list"), 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "prefix is empty"));
    setenv("DLOCK_PREFIX", "", 1);
    CHECK_CODE(dl("status", "x"), 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "DLOCK_PREFIX is set but empty"));
    unsetenv("DLOCK_PREFIX");
    CHECK_CODE(dl("--prefix", "p:", "status", "x"), 0); /* a real prefix is fine */

    CHECK_CODE(dl("status", "-V"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, DLOCK_VERSION_STRING));
    CHECK_CODE(dl("exec", "-V"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, DLOCK_VERSION_STRING));
    CHECK_CODE(dl("list", "--version"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, DLOCK_VERSION_STRING));
    CHECK_CODE(dl("break", "-V"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, DLOCK_VERSION_STRING));
}

/* A robust mutex's next acquirer gets EOWNERDEAD after `dlock break`;
 * `dlock break --reset` makes an ENOTRECOVERABLE lock usable again. */
static int robust_lock(dlock_mutex_t *m, const char *name) {
    dlock_mutexattr_t a;
    int rc;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST);
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static int robust_child(void *arg) {
    dlock_mutex_t m;
    int fd = *(int *)arg;
    if (robust_lock(&m, "robust") != 0 || dlock_mutex_lock(&m) != 0) return 1;
    (void)!write(fd, "L", 1);
    dlt_sleep_ms(10000); /* killed by the test */
    _exit(0);
}

static void test_break_robust(void) {
    dlock_mutex_t m;
    int p[2], raw;
    char c;
    pid_t child;
    jv *st;
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(pipe(p) == 0);
    child = dlt_spawn(robust_child, &p[1]);
    CU_ASSERT_FATAL(child > 0);
    dlt_bg_add(child);
    CU_ASSERT_FATAL(read(p[0], &c, 1) == 1);
    close(p[0]);
    close(p[1]);
    st = status_json("robust");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "robust")), "robust");
    DLT_ASSERT_INT_EQ(jnum(jget(jget(st, "holder"), "pid")), child);
    jfree(st);

    CHECK_CODE(dl("break", "--force", "robust"), 0);
    kill(child, SIGKILL);
    raw = dlt_wait_raw(child, 5000);
    (void)raw;
    st = status_json("robust");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "state")), "free");
    CU_ASSERT_STRING_EQUAL(jtext(jget(st, "robust")), "ownerdead");
    jfree(st);
    /* list finds it although nobody holds it: an operator must see it. */
    CHECK_CODE(dl("list", "--json"), 0);
    st = jparse(R.out);
    CU_ASSERT(jis(st, J_ARR) && st->n == 1);
    if (jis(st, J_ARR) && st->n == 1) CU_ASSERT_STRING_EQUAL(jtext(jget(st->v[0], "robust")), "ownerdead");
    jfree(st);
    CHECK_CODE(dl("list"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "ownerdead"));

    CU_ASSERT_FATAL(robust_lock(&m, "robust") == 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), EOWNERDEAD);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0); /* without consistent: not recoverable */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOTRECOVERABLE);
    CU_ASSERT_STRING_EQUAL(jtext(jget(st = status_json("robust"), "robust")), "notrecoverable");
    jfree(st);
    CHECK_CODE(dl("break", "--force", "robust"), 0); /* keeps the marker */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), ENOTRECOVERABLE);
    CHECK_CODE(dl("break", "--force", "--reset", "robust"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.out, "robust state is cleared"));
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    CHECK_CODE(dl("list", "--json"), 0);
    CU_ASSERT_STRING_EQUAL(R.out, "[]\n"); /* cleanly unlocked: nothing left to show */
    dlt_tdir_done();
}

/* On a terminal, break asks first: "n" keeps the lock, "y" breaks it. */
static void test_break_asks_on_terminal(void) {
    static const char *const lease[] = { "--lease", "600ms", NULL };
    char *argv[] = { (char *)DLOCK_CLI, "break", "ask", NULL };
    char pidtxt[32];
    holder h;
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(holder_start(&h, "a", "ask", lease, 5000) == 0);
    snprintf(pidtxt, sizeof pidtxt, "pid %d", (int)h.pid);
    DLT_ASSERT_INT_EQ(run_pty(argv, "[y/N]", "n\n", 10000), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, pidtxt)); /* the prompt names the holder */
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "not broken"));
    CU_ASSERT_STRING_EQUAL(state_of("ask"), "exclusive");
    DLT_ASSERT_INT_EQ(run_pty(argv, "[y/N]", "y\n", 10000), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "broke"));
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(h.pid, 5000)), 75); /* it lost the lock */
    dlt_tdir_done();
}

/* Waiting on a terminal: one line, redrawn about once a second with the
 * holder and the time waited, erased when the lock is taken. */
static void test_waiting_line_terminal(void) {
    char *argv[] = { (char *)DLOCK_CLI, "exec", "-w", "20", "tty-wait", "--", "echo", "ran", NULL };
    char want[96];
    holder h;
    pid_t releaser;
    const char *p;
    int draws = 0;
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(holder_start(&h, "a", "tty-wait", NULL, 5000) == 0);
    /* Let the holder go after 3.2 s, from a child (run_pty blocks). */
    releaser = fork();
    if (releaser == 0) {
        dlt_sleep_ms(3200);
        dlt_ttouch(h.go);
        _exit(0);
    }
    dlt_bg_add(releaser);
    DLT_ASSERT_INT_EQ(run_pty(argv, NULL, NULL, 15000), 0);
    dlt_wait_raw(releaser, 5000);
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(h.pid, 5000)), 0);
    snprintf(want, sizeof want, "held by ");
    for (p = R.err; (p = strstr(p, "\rdlock exec: waiting ")) != NULL; p++) draws++;
    CU_ASSERT(draws >= 3); /* at 0 s, 1 s, 2 s */
    if (draws < 3) fprintf(stderr, "  terminal: %s\n", R.err);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "waiting 0s for 'tty-wait': held by "));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "waiting 1s for 'tty-wait'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "waiting 2s for 'tty-wait'"));
    snprintf(want, sizeof want, "pid %d, thread %d", (int)h.pid, (int)h.pid);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "\033[K"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "\r\033[Kran\r\n")); /* erased, then CMD's output */
    CU_ASSERT_PTR_NULL(strstr(R.err, "\n\rdlock")); /* one line: no line feeds between draws */

    /* Timing out on a terminal leaves the last word on the line. */
    CU_ASSERT_FATAL(holder_start(&h, "b", "tty-wait", NULL, 5000) == 0);
    {
        char *av[] = { (char *)DLOCK_CLI, "exec", "-w", "1.2", "tty-wait", "--", "echo", "ran", NULL };
        DLT_ASSERT_INT_EQ(run_pty(av, NULL, NULL, 15000), 1);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "timed out after 1.2s waiting for 'tty-wait': held by"));
    CU_ASSERT_PTR_NULL(strstr(R.err, "ran"));
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    dlt_tdir_done();
}

/* Not on a terminal: one line when waiting starts, nothing else; -q: none. */
static void test_waiting_line_not_terminal(void) {
    char want[64], *nl;
    holder h;
    pid_t releaser;
    dlt_tdir_make("dlcli");
    CU_ASSERT_FATAL(holder_start(&h, "a", "pipe-wait", NULL, 5000) == 0);
    releaser = fork();
    if (releaser == 0) {
        dlt_sleep_ms(2200);
        dlt_ttouch(h.go);
        _exit(0);
    }
    dlt_bg_add(releaser);
    CHECK_CODE(dl("exec", "-v", "pipe-wait", "--", "true"), 0);
    CU_ASSERT(R.secs > 2);
    dlt_wait_raw(releaser, 5000);
    nl = strchr(R.err, '\n');
    /* -v: one line when the wait starts, one when the lock is got */
    CU_ASSERT(nl != NULL && strncmp(nl + 1, "dlock exec: got 'pipe-wait'", 27) == 0);
    CU_ASSERT_PTR_NULL(strchr(R.err, '\r'));
    CU_ASSERT_PTR_NULL(strchr(R.err, '\033'));
    CU_ASSERT(strncmp(R.err, "dlock exec: waiting for 'pipe-wait': held by ", 45) == 0);
    snprintf(want, sizeof want, "pid %d", (int)h.pid);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, want));
    DLT_ASSERT_INT_EQ(dlt_exit_code(dlt_wait_raw(h.pid, 5000)), 0);

    CU_ASSERT_FATAL(holder_start(&h, "b", "pipe-wait", NULL, 5000) == 0);
    CHECK_CODE(dl("exec", "-q", "-w", "0.5", "pipe-wait", "--", "true"), 1);
    CU_ASSERT_STRING_EQUAL(R.err, "");
    /* Without -v, silent as flock(1): a contended cron run sends no mail. */
    CHECK_CODE(dl("exec", "-w", "0.5", "pipe-wait", "--", "true"), 1);
    CU_ASSERT_STRING_EQUAL(R.err, "");
    CHECK_CODE(dl("exec", "-v", "-w", "0.5", "pipe-wait", "--", "true"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "waiting for 'pipe-wait'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(R.err, "timed out"));
    DLT_ASSERT_INT_EQ(holder_end(&h), 0);
    dlt_tdir_done();
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_exec_exit_status),
    DLT_TEST(test_exec_excludes_across_processes),
    DLT_TEST(test_exec_nonblock),
    DLT_TEST(test_exec_wait_timeout),
    DLT_TEST(test_exec_shared),
    DLT_TEST(test_exec_shared_nested),
    DLT_TEST(test_exec_lease_renewed),
    DLT_TEST(test_exec_killed_lock_expires),
    DLT_TEST(test_exec_signals_passed_on),
    DLT_TEST(test_exec_terminal_ctrl_c_once),
    DLT_TEST(test_exec_signal_while_waiting),
    DLT_TEST(test_exec_no_descriptor_leak),
    DLT_TEST(test_exec_loads_tls_only_for_rediss),
    DLT_TEST(test_exec_reads_no_openssl_conf),
    DLT_TEST(test_exec_child_starts_clean),
    DLT_TEST(test_usage_errors),
    DLT_TEST(test_unreachable_and_passwords),
    DLT_TEST(test_exec_release_refused),
    DLT_TEST(test_debug_log),
    DLT_TEST(test_status),
    DLT_TEST(test_status_fence_not_kept),
    DLT_TEST(test_list),
    DLT_TEST(test_list_long_names),
    DLT_TEST(test_odd_names),
    DLT_TEST(test_break),
    DLT_TEST(test_cli_conventions),
    DLT_TEST(test_break_robust),
    DLT_TEST(test_break_asks_on_terminal),
    DLT_TEST(test_waiting_line_terminal),
    DLT_TEST(test_waiting_line_not_terminal),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    atexit(dlt_tdir_done); /* fork children of the tests leave with _exit */
    return dlt_main(argc, argv, "cli", tests);
}
