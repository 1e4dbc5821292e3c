/* labels: redis; timeout: 180 */
/* test_hostile.c -- a hostile server and a hostile environment.
 *
 *   1. A server that announces more than a lock server ever answers -- an
 *      array of 2^31-1 elements, nested arrays whose counts add up, a
 *      bulk string of 2 GiB, or a RESP3 header hiredis 0.14 does not
 *      know -- and then sends nothing: the call fails with EPROTO at once
 *      (not at its timeout, not asking again), says what was announced,
 *      and the process does not grow; `dlock exec -n` fails as fast.
 *      (The acquire may have run: the lock it may have taken is released
 *      in the background, as an orphan. That release is not asking again:
 *      the fake counts the acquire script's requests apart.)
 *
 *   2. A set-uid program linked with libdlock (tests/hostile_env.c, a
 *      set-uid-nobody copy run by root, so that the kernel marks it
 *      AT_SECURE): DLOCK_URL, DLOCK_PREFIX, DLOCK_DEBUG and DLOCK_STATS
 *      are not read; the same program without the bit reads them all.
 *
 *   3. rediss:// with tls_verify=0: one warning on stderr (once per
 *      process for each such URL, however many clients use it), one more
 *      line in the debug log under DLOCK_DEBUG, no password; none when
 *      the certificate is checked.
 *
 *   4. `dlock exec` gives its command no DLOCK_URL (it may hold the
 *      password) unless --pass-url asks for it; then the URL dlock used.
 *
 * The fake server is a thread of this process on a loopback port: to
 * every request on every connection it answers the bytes the test set,
 * then keeps the connection open and silent.
 */
#include "fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "backend/backend.h"
#include "net/net.h"

/* ------------------------------------------------------------ fake server */

#define FAKE_CONNS 32

typedef struct fake {
    int lfd, port;
    const char *answer; /* sent once per request */
    size_t answer_len;
    atomic_int stop;
    atomic_int answered; /* answers sent */
    const char *acquire_sha; /* the acquire script's SHA1 */
    atomic_int acquires;     /* requests that ran it */
    pthread_t thr;
} fake;

static void fake_accept(fake *f, struct pollfd *p, int *n) {
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return;
    if (*n >= FAKE_CONNS + 1) {
        close(fd);
        return;
    }
    p[*n].fd = fd;
    p[*n].events = POLLIN;
    p[*n].revents = 0; /* (the slot's last poll was of another descriptor) */
    (*n)++;
}

static void *fake_main(void *arg) {
    fake *f = arg;
    struct pollfd p[FAKE_CONNS + 1];
    int n = 1, i;
    p[0].fd = f->lfd;
    p[0].events = POLLIN;
    while (!atomic_load(&f->stop)) {
        if (poll(p, (nfds_t)n, 20) <= 0) continue;
        if (p[0].revents & POLLIN) fake_accept(f, p, &n);
        for (i = 1; i < n; i++) {
            char buf[4096];
            ssize_t k;
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            k = read(p[i].fd, buf, sizeof buf);
            if (k <= 0) { /* gone: its slot is ignored from now on */
                close(p[i].fd);
                p[i].fd = -1;
                continue;
            }
            /* one answer per read: a request comes whole on loopback
             * (counted first: the client may be done before write returns) */
            atomic_fetch_add(&f->answered, 1);
            if (memmem(buf, (size_t)k, f->acquire_sha, strlen(f->acquire_sha)) != NULL)
                atomic_fetch_add(&f->acquires, 1);
            if (write(p[i].fd, f->answer, f->answer_len) != (ssize_t)f->answer_len) atomic_fetch_sub(&f->answered, 1);
        }
    }
    for (i = 0; i < n; i++)
        if (p[i].fd >= 0) close(p[i].fd);
    return NULL;
}

static int fake_start(fake *f, const char *answer, size_t len) {
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    memset(f, 0, sizeof *f);
    f->answer = answer;
    f->acquire_sha = dlock__script_sha(DLOCK__SCRIPT_ACQUIRE, 0);
    if (strlen(f->acquire_sha) != 40) return -1;
    f->answer_len = len;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if ((f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) return -1;
    if (bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(f->lfd, 16) != 0 ||
        getsockname(f->lfd, (struct sockaddr *)&sa, &sl) != 0) {
        close(f->lfd);
        return -1;
    }
    f->port = ntohs(sa.sin_port);
    if (pthread_create(&f->thr, NULL, fake_main, f) != 0) {
        close(f->lfd);
        return -1;
    }
    return 0;
}

static void fake_stop(fake *f) {
    atomic_store(&f->stop, 1);
    pthread_join(f->thr, NULL);
    close(f->lfd);
}

static long maxrss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* ------------------------------------------------------- 1. answer bounds */

/* A lock against a server that answers `answer`: EPROTO in well under
 * the call's bounds (command 2 s, unreachable 5 s), its message naming
 * `says`, the acquire sent once (no asking again), and no growth. */
static void refused_fast(const char *what, const char *answer, size_t len, const char *says) {
    fake f;
    char url[64];
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    long rss0 = maxrss_kb();
    double t0, ms;
    int rc;

    CU_ASSERT_FATAL(fake_start(&f, answer, len) == 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", f.port);
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.command_timeout_ms = 2000;
    cfg.unreachable_ms = 5000;
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "hostile", 0, c), 0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m); /* (bounded by the 5 s: a try's 200 ms is short on a loaded machine) */
    ms = (dlt_now() - t0) * 1000;
    DLT_ASSERT_ERR(rc, EPROTO);
    if (rc == 0) dlock_mutex_unlock(&m);
    if (strstr(dlock_last_error(), says) == NULL || strstr(dlock_last_error(), "answer refused") == NULL) {
        fprintf(stderr, "%s: the message does not say '%s': %s\n", what, says, dlock_last_error());
        CU_FAIL("the message does not say what the server announced");
    }
    if (ms > 1500) {
        fprintf(stderr, "%s: EPROTO took %.0f ms\n", what, ms);
        CU_FAIL("a refused answer took more than 1.5 s (its bounds: 2 s for an answer, 5 s in all)");
    }
    DLT_ASSERT_INT_EQ(atomic_load(&f.acquires), 1);
    CU_ASSERT(atomic_load(&f.answered) >= 1);
    if (maxrss_kb() - rss0 > 64 * 1024) {
        fprintf(stderr, "%s: max RSS grew by %ld MB\n", what, (maxrss_kb() - rss0) / 1024);
        CU_FAIL("a refused answer made the process grow by more than 64 MB");
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    fake_stop(&f);
}

#define S(lit) lit, sizeof lit - 1

static void test_array_count_refused(void) {
    refused_fast("*2^31-1", S("*2147483647\r\n"), "an array of 2147483647");
    refused_fast("*2^31-1 :1", S("*2147483647\r\n:1\r\n"), "an array of 2147483647");
    refused_fast("*2^20+1", S("*1048577\r\n"), "an array of 1048577");
    refused_fast("[*1 *2^31-1]", S("*1\r\n*2147483647\r\n"), "an array of 2147483647");
}

/* Each header within the bound of one array, their sum past the answer's:
 * 5 nested arrays of 2^20. */
static void test_nested_counts_add_up(void) {
    refused_fast("5 x *2^20", S("*1048576\r\n*1048576\r\n*1048576\r\n*1048576\r\n*1048576\r\n"), "arrays of 5242880");
}

static void test_bulk_length_refused(void) {
    refused_fast("$2^31-1", S("$2147483647\r\n"), "a bulk string of 2147483647");
    refused_fast("$2^24+1", S("$16777217\r\n"), "a bulk string of 16777217");
    refused_fast("$ no CRLF yet", S("$99999999999"), "a bulk string of");
    refused_fast("[*2 :1 $2^31-1]", S("*2\r\n:1\r\n$2147483647\r\n"), "a bulk string of 2147483647");
}

/* RESP3's map, set and push headers: hiredis 0.14 knows RESP2 only, and
 * a client that never sent HELLO 3 should never get them. */
static void test_resp3_headers_refused(void) {
    refused_fast("%", S("%2147483647\r\n"), "\"%\"");
    refused_fast("~", S("~2147483647\r\n"), "\"~\"");
    refused_fast(">", S(">2147483647\r\n"), "\">\"");
}

/* The bounds leave a lock server's largest answers alone: an array of
 * 2^20 elements with a bulk string of 1 MiB in it, read whole. */
static void test_within_bounds_read(void) {
    size_t n = 1u << 20, big = 1u << 20, i, len = 0;
    size_t cap = 64 + n * 4 + big + 32;
    char *a = malloc(cap);
    int sv[2];
    dlock__conn cn;
    void *r = NULL;
    CU_ASSERT_FATAL(a != NULL);
    len += (size_t)sprintf(a, "*%zu\r\n$%zu\r\n", n, big);
    memset(a + len, 'x', big);
    len += big;
    memcpy(a + len, "\r\n", 2);
    len += 2;
    for (i = 1; i < n; i++, len += 4) memcpy(a + len, ":1\r\n", 4);
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    memset(&cn, 0, sizeof cn);
    cn.ctx = redisConnectFd(sv[0]);
    CU_ASSERT_FATAL(cn.ctx != NULL);
    DLT_ASSERT_INT_EQ(dlock__reply_feed(&cn, a, len), REDIS_OK);
    DLT_ASSERT_INT_EQ(dlock__reply_get(&cn, &r), REDIS_OK);
    CU_ASSERT_FATAL(r != NULL);
    DLT_ASSERT_INT_EQ(((redisReply *)r)->elements, n);
    DLT_ASSERT_INT_EQ(((redisReply *)r)->element[0]->len, big);
    DLT_ASSERT_INT_EQ(((redisReply *)r)->element[n - 1]->integer, 1);
    DLT_ASSERT_INT_EQ(dlock__reply_refused(&cn), 0);
    freeReplyObject(r);
    redisFree(cn.ctx);
    close(sv[1]);
    free(a);
}

/* `dlock exec -n` against the 13-byte answer: fails at once, saying so. */
static void test_exec_fails_fast(void) {
    static const char answer[] = "*2147483647\r\n";
    char *argv[] = { DLOCK_CLI, "exec", "-n", "lk", "--", "true", NULL };
    char out[4096], err[4096], url[64], *saved = getenv("DLOCK_URL") ? strdup(getenv("DLOCK_URL")) : NULL;
    fake f;
    double t0;
    int st;
    CU_ASSERT_FATAL(fake_start(&f, answer, sizeof answer - 1) == 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", f.port);
    setenv("DLOCK_URL", url, 1);
    t0 = dlt_now();
    st = dlt_run_capture(argv, out, err, sizeof out, 20000);
    if (dlt_now() - t0 > 2.0) {
        fprintf(stderr, "dlock exec -n took %.1f s\n", dlt_now() - t0);
        CU_FAIL("dlock exec -n against a 13-byte hostile answer took more than 2 s");
    }
    DLT_ASSERT_INT_EQ(st, 70); /* EPROTO: an unexpected answer */
    if (strstr(err, "answer refused") == NULL) {
        fprintf(stderr, "dlock exec -n said: %s\n", err);
        CU_FAIL("dlock exec -n does not say the answer was refused");
    }
    if (saved) setenv("DLOCK_URL", saved, 1);
    else unsetenv("DLOCK_URL");
    free(saved);
    fake_stop(&f);
}

/* ---------------------------------------------- 2. set-uid environments */

/* A fresh folder that anyone may enter, on a file system that honours
 * the set-uid bit: 0, or -1 (none found). */
static int suid_dir(char *out, size_t n) {
    static const char *const bases[] = { "/tmp", "/var/tmp", "." };
    size_t i;
    for (i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        struct statvfs v;
        if (statvfs(bases[i], &v) != 0 || (v.f_flag & ST_NOSUID)) continue;
        snprintf(out, n, "%s/dlt-suid-XXXXXX", bases[i]);
        if (mkdtemp(out) != NULL && chmod(out, 0755) == 0) return 0;
    }
    return -1;
}

static int copy_file(const char *from, const char *to) {
    char buf[65536];
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    size_t k;
    int rc = 0;
    if (out == NULL) {
        if (in) fclose(in);
        return -1;
    }
    while ((k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k) rc = -1;
    fclose(in);
    if (fclose(out) != 0) rc = -1;
    return rc;
}

#define EVIL_URL "redis://:hunter2@evil.invalid:1"

/* Runs prog with the hostile environment: its stdout and stderr. */
static int run_env(const char *prog, char *out, char *err, size_t n) {
    static const char *const vars[] = { "DLOCK_URL", "DLOCK_PREFIX", "DLOCK_DEBUG", "DLOCK_STATS" };
    static const char *const vals[] = { EVIL_URL, "evil:", "1", "0" };
    char *saved[4];
    char *argv[] = { (char *)prog, NULL };
    int st, i;
    for (i = 0; i < 4; i++) {
        saved[i] = getenv(vars[i]) ? strdup(getenv(vars[i])) : NULL;
        setenv(vars[i], vals[i], 1);
    }
    st = dlt_run_capture(argv, out, err, n, 10000);
    for (i = 0; i < 4; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
    }
    return st;
}

static void has(const char *text, const char *want, int yes, const char *what) {
    if ((strstr(text, want) != NULL) != yes) {
        fprintf(stderr, "%s: '%s' %s in:\n%s\n", what, want, yes ? "missing" : "present", text);
        CU_FAIL(what);
    }
}

static void test_setuid_ignores_environment(void) {
    char dir[256], plain[300], suid[300], out[4096], err[4096];
    CU_ASSERT_FATAL(geteuid() == 0); /* (CI runs as root: chown and a set-uid copy need it) */
    CU_ASSERT_FATAL(suid_dir(dir, sizeof dir) == 0);
    snprintf(plain, sizeof plain, "%s/plain", dir);
    snprintf(suid, sizeof suid, "%s/suid", dir);
    CU_ASSERT_FATAL(copy_file(HOSTILE_ENV, plain) == 0 && chmod(plain, 0755) == 0);
    CU_ASSERT_FATAL(copy_file(HOSTILE_ENV, suid) == 0);
    CU_ASSERT_FATAL(chown(suid, 65534, 65534) == 0 && chmod(suid, 04755) == 0); /* nobody */

    /* Without the bit: everything is read (the check can fail). */
    DLT_ASSERT_INT_EQ(run_env(plain, out, err, sizeof out), 0);
    has(out, "secure=0", 1, "the plain copy runs as a normal program");
    has(out, "url=redis://:***@evil.invalid:1", 1, "the plain copy takes DLOCK_URL");
    has(out, "prefix=evil:", 1, "the plain copy takes DLOCK_PREFIX");
    has(out, "stats_off=1", 1, "the plain copy takes DLOCK_STATS");
    has(err, "hostile_env: a debug line", 1, "the plain copy takes DLOCK_DEBUG");

    /* Set-uid: nothing is. */
    DLT_ASSERT_INT_EQ(run_env(suid, out, err, sizeof out), 0);
    has(out, "secure=1", 1, "the set-uid copy runs AT_SECURE");
    has(out, "url=redis://127.0.0.1:6379", 1, "a set-uid program ignores DLOCK_URL");
    has(out, "prefix=dlock:", 1, "a set-uid program ignores DLOCK_PREFIX");
    has(out, "stats_off=0", 1, "a set-uid program ignores DLOCK_STATS");
    has(err, "hostile_env: a debug line", 0, "a set-uid program ignores DLOCK_DEBUG");
    has(out, "hunter2", 0, "the password is never shown");
    has(err, "hunter2", 0, "the password is never shown");

    unlink(plain);
    unlink(suid);
    rmdir(dir);
}

/* ------------------------------------------- 3. TLS verification is off */

static int count_of(const char *text, const char *what) {
    int n = 0;
    for (; (text = strstr(text, what)) != NULL; text += strlen(what)) n++;
    return n;
}

/* `dlock exec -n lk -- true` against url, DLOCK_DEBUG set or not: its
 * exit status, its stderr in err. */
static int exec_with(const char *url, const char *debug, char *err, size_t n) {
    char *argv[] = { DLOCK_CLI, "exec", "-n", "lk", "--", "true", NULL };
    char out[4096], *su = getenv("DLOCK_URL") ? strdup(getenv("DLOCK_URL")) : NULL;
    int st;
    setenv("DLOCK_URL", url, 1);
    if (debug) setenv("DLOCK_DEBUG", debug, 1);
    st = dlt_run_capture(argv, out, err, n, 20000);
    unsetenv("DLOCK_DEBUG");
    if (su) setenv("DLOCK_URL", su, 1);
    else unsetenv("DLOCK_URL");
    free(su);
    return st;
}

static void test_tls_unverified_warns(void) {
    static const char warning[] = "TLS certificate verification is off (tls_verify=0)";
    dlt_redis tls;
    char url[512], err[16384];
    memset(&tls, 0, sizeof tls);
    CU_ASSERT_FATAL(dlt_redis_start_tls(&tls, NULL, "requirepass hunter2") == 0);

    snprintf(url, sizeof url, "rediss://:hunter2@127.0.0.1:%d?tls_verify=0", tls.port);
    DLT_ASSERT_INT_EQ(exec_with(url, NULL, err, sizeof err), 0);
    DLT_ASSERT_INT_EQ(count_of(err, warning), 1);
    has(err, "dlock: warning: rediss://:***@127.0.0.1:", 1, "the warning names the URL as shown");
    has(err, "hunter2", 0, "the password is never shown");

    /* Under DLOCK_DEBUG: the warning and its debug line. */
    DLT_ASSERT_INT_EQ(exec_with(url, "1", err, sizeof err), 0);
    DLT_ASSERT_INT_EQ(count_of(err, warning), 2);
    DLT_ASSERT_INT_EQ(count_of(err, "dlock: warning: "), 1);
    has(err, "hunter2", 0, "the password is never shown in the debug log");

    /* Checked against its CA: no word. */
    snprintf(url, sizeof url, "rediss://:hunter2@127.0.0.1:%d?tls_ca_file=%s/ca.crt", tls.port, tls.tls_dir);
    DLT_ASSERT_INT_EQ(exec_with(url, NULL, err, sizeof err), 0);
    DLT_ASSERT_INT_EQ(count_of(err, warning), 0);
    dlt_redis_cleanup(&tls);
}

/* One warning per URL, not per connection nor per Redlock master nor per
 * client: clients made in a child whose stderr is captured. */
static int two_clients_child(void *arg) {
    const char *url = arg; /* (two clients of it, three Redlock masters each) */
    dlock_client_t *c1 = NULL, *c2 = NULL;
    dlock_mutex_t m;
    int rc;
    if (dlock_client_create(&c1, &(dlock_config_t){ .url = url }) != 0) return 10;
    if (dlt_mutex_make(&m, "warn", 0, c1) != 0) return 11;
    if ((rc = dlock_mutex_trylock(&m)) != 0) return 12;
    dlock_mutex_unlock(&m);
    dlock_mutex_destroy(&m);
    if (dlock_client_create(&c2, &(dlock_config_t){ .url = url }) != 0) return 13;
    dlock_client_destroy(c2);
    dlock_client_destroy(c1);
    return 0;
}

static void test_tls_unverified_warns_per_client(void) {
    dlt_redis tls[3];
    char url[512], path[] = "/tmp/dlt-warn-XXXXXX", err[16384];
    int i, fd, saved, st;
    size_t k;
    FILE *f;
    memset(tls, 0, sizeof tls);
    for (i = 0; i < 3; i++) CU_ASSERT_FATAL(dlt_redis_start_tls(&tls[i], NULL, NULL) == 0);
    snprintf(url, sizeof url, "rediss+redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?tls_verify=0", tls[0].port,
             tls[1].port, tls[2].port);
    CU_ASSERT_FATAL((fd = mkstemp(path)) >= 0);
    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
    st = dlt_wait(dlt_spawn(two_clients_child, url), 20000);
    dup2(saved, 2);
    close(saved);
    close(fd);
    DLT_ASSERT_INT_EQ(st, 0);
    f = fopen(path, "r");
    k = f ? fread(err, 1, sizeof err - 1, f) : 0;
    err[k] = '\0';
    if (f) fclose(f);
    unlink(path);
    DLT_ASSERT_INT_EQ(count_of(err, "dlock: warning: "), 1);
    for (i = 0; i < 3; i++) dlt_redis_cleanup(&tls[i]);
}

/* ------------------------------------------------- 4. exec and DLOCK_URL */

/* dlock [pre...] exec lk -- sh -c 'print DLOCK_URL': its stdout. */
static int exec_env(const char *env_url, char **pre, int npre, char *out, size_t n) {
    char *argv[16], err[4096], *su = getenv("DLOCK_URL") ? strdup(getenv("DLOCK_URL")) : NULL;
    int argc = 0, i, st;
    argv[argc++] = DLOCK_CLI;
    for (i = 0; i < npre; i++) argv[argc++] = pre[i];
    argv[argc++] = "lk";
    argv[argc++] = "--";
    argv[argc++] = "sh";
    argv[argc++] = "-c";
    argv[argc++] = "printf '%s' \"${DLOCK_URL-unset}\"";
    argv[argc] = NULL;
    setenv("DLOCK_URL", env_url, 1);
    st = dlt_run_capture(argv, out, err, n, 20000);
    if (st != 0) fprintf(stderr, "dlock exec: %d: %s\n", st, err);
    if (su) setenv("DLOCK_URL", su, 1);
    else unsetenv("DLOCK_URL");
    free(su);
    return st;
}

static void test_exec_url_only_when_asked(void) {
    dlt_redis r;
    char url[256], url2[256], out[4096];
    char *plain[] = { "exec" }, *pass[] = { "exec", "--pass-url" }, *given[] = { "--url", url2, "exec", "--pass-url" };
    memset(&r, 0, sizeof r);
    CU_ASSERT_FATAL(dlt_redis_start(&r, "requirepass hunter2") == 0);
    snprintf(url, sizeof url, "redis://:hunter2@127.0.0.1:%d", r.port);
    snprintf(url2, sizeof url2, "redis://:hunter2@127.0.0.1:%d/0", r.port);

    DLT_ASSERT_INT_EQ(exec_env(url, plain, 1, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "unset");
    DLT_ASSERT_INT_EQ(exec_env(url, pass, 2, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, url);
    /* --url wins over the environment, and is what the command gets */
    DLT_ASSERT_INT_EQ(exec_env(url, given, 4, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, url2);
    dlt_redis_cleanup(&r);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_array_count_refused),
    DLT_TEST(test_nested_counts_add_up),
    DLT_TEST(test_bulk_length_refused),
    DLT_TEST(test_resp3_headers_refused),
    DLT_TEST(test_within_bounds_read),
    DLT_TEST(test_exec_fails_fast),
    DLT_TEST(test_setuid_ignores_environment),
    DLT_TEST(test_tls_unverified_warns),
    DLT_TEST(test_tls_unverified_warns_per_client),
    DLT_TEST(test_exec_url_only_when_asked),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "hostile", tests);
}
