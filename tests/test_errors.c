/* labels: redis cli; timeout: 300 */
/* test_errors.c -- errors a user can act on: each
 * failure a new user meets says what is wrong and what to do, in the
 * library's message and through the dlock command's exit code.
 *
 *   - no password for a server that needs one: ENOLCK (exit 69), "the
 *     server needs a password"; a wrong one: "authentication failed";
 *   - `dlock list` without the ACL right to SCAN names the NOPERM;
 *   - an unencoded '/' or '?' in a password: "percent-encoded";
 *   - a password never shows in a message or the redacted URL, over many
 *     generated URLs (redis://u:PASSWORD without @host and
 *     redis://u:TOP@SECRET@host among them);
 *   - a silent server: "did not answer within N ms";
 *   - rediss:// to a plain server, redis:// to a TLS port: said, and at
 *     once rather than after the unreachable bound; the same for Redlock
 *     and Cluster URLs, whose hint names their own scheme
 *     (rediss+redlock://, redis+cluster://, ...);
 *   - an answer trickled (a huge bulk) stays within the call's bound;
 *   - a lost-lock handler learns a hold was broken, not run out;
 *   - an unlock that finds its hold lapsed on the server tells the
 *     lost-lock handler (once) before its EPERM;
 *   - `dlock list` with a Redlock quorum down says so (exit 69).
 *
 * The servers are real redis-servers; the silent server and the one that
 * trickles a huge answer are fakes by nature (sockets of this test).
 */
#include "fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

#include "api/api.h"

#ifndef DLPL_SO
#define DLPL_SO ""
#endif
#ifndef DLOCK_CLI
#error "DLOCK_CLI (the path of the built dlock program) must be defined by the build"
#endif

/* ============================================================ helpers */

static int has(const char *hay, const char *needle) {
    return hay != NULL && strstr(hay, needle) != NULL;
}

/* A client on url with these bounds (0: the defaults). */
static int client_on(dlock_client_t **c, const char *url, unsigned command_ms, unsigned unreachable_ms) {
    dlock_config_t cfg;
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.command_timeout_ms = command_ms;
    cfg.unreachable_ms = unreachable_ms;
    cfg.connect_timeout_ms = command_ms;
    return dlock_client_create(c, &cfg);
}

/* dlock_lock_info of "e/x" through a fresh client on url: its result, the
 * message in msg, how long it took in *secs. */
static int info_through(const char *url, unsigned command_ms, unsigned unreachable_ms, char *msg, size_t n,
                        double *secs) {
    dlock_client_t *c;
    dlock_lock_info_t info;
    double t0;
    int rc = client_on(&c, url, command_ms, unreachable_ms);
    if (rc != 0) {
        snprintf(msg, n, "%s", dlock_last_error());
        return rc;
    }
    t0 = dlt_now();
    rc = dlock_lock_info(c, "e/x", &info);
    *secs = dlt_now() - t0;
    snprintf(msg, n, "%s", rc ? dlock_last_error() : "");
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    return rc;
}

/* The dlock command: its exit code (-1: it did not end within timeout_ms),
 * its stdout and stderr (NUL-terminated, truncated to n). */
static int cli(char *out, char *err, size_t n, int timeout_ms, const char *a, ...) {
    char *argv[32];
    int argc = 0;
    va_list ap;
    argv[argc++] = (char *)DLOCK_CLI;
    va_start(ap, a);
    for (; a != NULL && argc < 31; a = va_arg(ap, const char *)) argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    return dlt_run_capture(argv, out, err, n, timeout_ms);
}

#define BUF 8192

static int count_lock(const char *name, const dlock_lock_info_t *info, void *arg) {
    (void)name;
    (void)info;
    (*(int *)arg)++;
    return 0;
}

/* ============================================================ passwords */

#define PW "pw-needed-s3cret"

static void test_password_needed(void) {
    dlt_redis srv;
    char url[256], msg[1024], out[BUF], err[BUF];
    dlock_client_t *c;
    dlock_mutex_t m;
    redisReply *r;
    double secs = 0;
    int rc;

    CU_ASSERT_FATAL(dlt_redis_start(&srv, NULL) == 0);
    r = dlt_redis_cmd(&srv, "CONFIG SET requirepass %s", PW);
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);

    /* No password: a clear ENOLCK at once (not after the unreachable
     * bound, not EPROTO "unauthenticated multibulk length"). */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
    rc = info_through(url, 0, 20000, msg, sizeof msg, &secs);
    printf("  info, no password: %s after %.2f s: %s\n", dlock_err_name(rc), secs, msg);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "the server needs a password"));
    CU_ASSERT_TRUE(secs < 10.0);
    /* The acquire script is the request Redis closes on. */
    DLT_ASSERT_ERR(client_on(&c, url, 0, 20000), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "e/pw", 0, c), 0);
    rc = dlock_mutex_trylock(&m);
    printf("  trylock, no password: %s: %s\n", dlock_err_name(rc), dlock_last_error());
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(dlock_last_error(), "the server needs a password"));
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    /* A database other than 0: SELECT meets the NOAUTH first. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/3", srv.port);
    rc = info_through(url, 0, 20000, msg, sizeof msg, &secs);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "the server needs a password"));

    /* A wrong password: "authentication failed", and never the password. */
    snprintf(url, sizeof url, "redis://:wrong-%s@127.0.0.1:%d", PW, srv.port);
    rc = info_through(url, 0, 20000, msg, sizeof msg, &secs);
    printf("  wrong password: %s: %s\n", dlock_err_name(rc), msg);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "authentication failed"));
    CU_ASSERT_FALSE(has(msg, PW));

    /* The command: exit 69 (unavailable) and the same words. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
    rc = cli(out, err, BUF, 30000, "--url", url, "status", "e/x", NULL);
    printf("  dlock status: %d: %s", rc, err);
    DLT_ASSERT_INT_EQ(rc, 69);
    CU_ASSERT_TRUE(has(err, "the server needs a password"));
    rc = cli(out, err, BUF, 30000, "--url", url, "exec", "e/x", "true", NULL);
    printf("  dlock exec: %d: %s", rc, err);
    DLT_ASSERT_INT_EQ(rc, 69);
    CU_ASSERT_TRUE(has(err, "the server needs a password"));
    rc = cli(out, err, BUF, 30000, "--url", url, "list", NULL);
    DLT_ASSERT_INT_EQ(rc, 69);
    CU_ASSERT_TRUE(has(err, "the server needs a password"));
    dlt_redis_cleanup(&srv);
}

/* ================================================================= ACL */

static void test_list_names_noperm(void) {
    char url[256], out[BUF], err[BUF];
    dlock_client_t *c;
    redisReply *r = dlt_redis_cmd(&dlt_server, "ACL SETUSER noscan on >noscan-pw ~* &* +@all -scan");
    int rc;
    CU_ASSERT_FATAL(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    snprintf(url, sizeof url, "redis://noscan:noscan-pw@127.0.0.1:%d", dlt_server.port);
    DLT_ASSERT_ERR(client_on(&c, url, 0, 0), 0);
    {
        dlock_lock_info_t info;
        int n = 0;
        DLT_ASSERT_ERR(dlock_lock_info(c, "e/acl", &info), 0); /* status can */
        rc = dlock_list(c, NULL, count_lock, &n);
        printf("  dlock_list without +scan: %s: %s\n", dlock_err_name(rc), dlock_last_error());
        DLT_ASSERT_ERR(rc, EPROTO);
        CU_ASSERT_TRUE(has(dlock_last_error(), "NOPERM"));
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    rc = cli(out, err, BUF, 30000, "--url", url, "list", NULL);
    printf("  dlock list without +scan: %d: %s", rc, err);
    CU_ASSERT_TRUE(rc != 0);
    CU_ASSERT_TRUE(has(err, "NOPERM"));
    CU_ASSERT_TRUE(has(err, "SCAN"));
    CU_ASSERT_FALSE(has(out, "no lock is held"));
    CU_ASSERT_FALSE(has(err, "noscan-pw"));
    r = dlt_redis_cmd(&dlt_server, "ACL DELUSER noscan");
    if (r) freeReplyObject(r);
}

/* ================================================================= URLs */

static void test_url_says_percent_encode(void) {
    static const char *const urls[] = {
        "redis://u:pa/ss@127.0.0.1:6379",
        "redis://u:pa?ss@127.0.0.1:6379",
        "redis://:pa/ss@127.0.0.1:6379",
        "redis://:pa?ss@127.0.0.1:6379/0",
        "redlock://u:p/w@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
        /* an unencoded '@' too, before the '/' or '?' */
        "redis://u:p@pa/ss@127.0.0.1:6379",
        "redis://u:p@pa?ss@127.0.0.1:6379",
    };
    size_t i;
    for (i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        dlock_client_t *c = NULL;
        dlock_config_t cfg;
        int rc;
        dlock_config_init(&cfg);
        cfg.url = urls[i];
        rc = dlock_client_create(&c, &cfg);
        printf("  %s: %s\n", urls[i], dlock_last_error());
        DLT_ASSERT_ERR(rc, EINVAL);
        CU_ASSERT_TRUE(has(dlock_last_error(), "percent-encoded"));
        CU_ASSERT_TRUE(has(dlock_last_error(), "%2F"));
        CU_ASSERT_FALSE(has(dlock_last_error(), "pa/ss") || has(dlock_last_error(), "pa?ss") ||
                        has(dlock_last_error(), "p/w") || has(dlock_last_error(), "p@pa"));
    }
    /* The @host forgotten: the "port" is the password, hidden, and the
     * message says where a password goes. */
    {
        char out[BUF], err[BUF];
        int rc = cli(out, err, BUF, 30000, "--url", "redis://u:TOPSECRET", "status", "e/x", NULL);
        printf("  redis://u:TOPSECRET: %d: %s", rc, err);
        DLT_ASSERT_INT_EQ(rc, 64);
        CU_ASSERT_TRUE(has(err, "bad port"));
        CU_ASSERT_TRUE(has(err, "PASSWORD@HOST"));
        CU_ASSERT_FALSE(has(err, "TOPSECRET"));
        CU_ASSERT_FALSE(has(out, "TOPSECRET"));
    }
}

/* A small deterministic generator (xorshift). */
static unsigned long long rnd_state = 0x9E3779B97F4A7C15ull;
static unsigned rnd(unsigned n) {
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (unsigned)(rnd_state % n);
}
#define PICK(a) (a)[rnd(sizeof(a) / sizeof((a)[0]))]

#define MARK "TOPSECRET"
#define MARK_ENC "TOP%53ECRET" /* the same, one letter percent-encoded */

static void test_url_password_never_shown(void) {
    static const char *const schemes[] = { "redis://", "rediss://", "redis+sentinel://", "rediss+sentinel://",
                                           "redlock://", "redis+cluster://", "rediss+cluster://",
                                           /* misspelt: the scheme message must not quote the rest */
                                           "redis:/", "redis:", "redis//", "Redis://", "redis+sentinal://" };
    static const char *const users[] = { "", "u", "default", "a%40b", "x.y" };
    static const char *const around[] = { "", "", "/", "?", "@", ":", "#", "%", "[", "]", ",", "*", "&", "=",
                                          "a", "9", "%2F", "%3F", "%zz", "**", "***", "\\", "x@", "@@", "TOP@" };
    static const char *const seps[] = { "@", "@", "", "", "@@", "/@", "?@", ":@", "]@", "@/" };
    static const char *const hosts[] = { "127.0.0.1", "h", "[::1]", "", "h:6379", "h:0", "h:99999", "h:1,h2:2",
                                         "h:1,h2:2,h3:3", "[::1", "h:", ":1", "h:x", "[fe80::1%eth0]:1" };
    static const char *const paths[] = { "", "", "/", "/0", "/mymaster", "/mymaster/2", "/x/1", "/0/", "//" };
    static const char *const queries[] = { "", "", "?prefix=p", "?x", "?connect_timeout_ms=abc", "?prefix=a@b",
                                           "?tls_verify=0", "?wait=1&x=1", "?", "?x=file://y" };
    char url[512];
    unsigned i, shown = 0, parsed = 0, clients = 0;
    for (i = 0; i < 30000; i++) {
        dlock__conf conf;
        dlock_config_t cfg;
        const char *mark = rnd(4) == 0 ? MARK_ENC : MARK, *msg, *b1, *b2, *a1, *sep;
        int rc, with_colon = rnd(8) != 0, cut = rnd(5) == 0;
        size_t n;
        /* The marker is (part of) a password: after "user:" with no '@'
         * before it; or, without a ':', a lone user name before an '@'
         * (which some clients take for a password: it is hidden too). */
        do b1 = PICK(around), b2 = PICK(around), a1 = PICK(around), sep = PICK(seps);
        while (/* a raw '@' in the password before the marker: only with
                * a ':' and an '@' after it (redis://u:TOP@SECRET@host) */
               ((strchr(b1, '@') || strchr(b2, '@')) && (!with_colon || cut || !strchr(sep, '@'))) ||
               strchr(b1, ',') || strchr(b2, ',') ||
               /* a '/' or '?' in it: only with the '@' that ends it (else
                * redis://u:9/SECRET is a host, a port and a path) */
               ((strpbrk(b1, "/?") || strpbrk(b2, "/?")) && (cut || !strchr(sep, '@'))) ||
               (!with_colon && (strchr(b1, ':') || strchr(b2, ':') || strchr(a1, ':') || strchr(a1, '@') ||
                                strchr(sep, ':') || !strchr(sep, '@'))));
        n = (size_t)snprintf(url, sizeof url, "%s%s%s%s%s%s%s%s%s%s%s", PICK(schemes),
                             with_colon ? PICK(users) : "", with_colon ? ":" : "", b1, b2, mark, a1, sep,
                             PICK(hosts), PICK(paths), PICK(queries));
        if (cut) { /* cut somewhere after the password (a lone user name: after its '@') */
            const char *p = strstr(url, mark) + strlen(mark);
            if (!with_colon) p = strchr(p, '@') + 1;
            size_t keep = (size_t)(p - url) + rnd((unsigned)(n - (size_t)(p - url)) + 1);
            url[keep] = '\0';
        }
        dlock_config_init(&cfg);
        cfg.url = url;
        dlock__clearerr();
        rc = dlock__conf_parse(&conf, &cfg);
        msg = rc ? dlock_last_error() : conf.redacted_url;
        if (has(msg, MARK) || has(msg, MARK_ENC)) {
            if (shown++ < 10) fprintf(stderr, "  the password shows: url \"%s\" -> \"%s\"\n", url, msg);
        }
        if (rc == 0) {
            parsed++;
            dlock__conf_free(&conf);
        }
        if (i % 16 == 0) { /* the public way too */
            dlock_client_t *c = NULL;
            rc = dlock_client_create(&c, &cfg);
            if (rc != 0 && (has(dlock_last_error(), MARK) || has(dlock_last_error(), MARK_ENC))) {
                if (shown++ < 10) fprintf(stderr, "  the password shows: url \"%s\" -> \"%s\"\n", url,
                                          dlock_last_error());
            }
            if (rc == 0) {
                clients++;
                DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
            }
        }
    }
    printf("  30000 URLs, %u parsed, %u clients made; the password shown %u times\n", parsed, clients, shown);
    DLT_ASSERT_INT_EQ(shown, 0);
    CU_ASSERT_TRUE(parsed > 100); /* the generator makes good URLs too */
}

/* ====================================================== fake servers */

/* A listening socket on a free loopback port: its port, the fd in *fd. */
static int listen_any(int *fd) {
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 64) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &al) != 0) {
        if (s >= 0) close(s);
        return -1;
    }
    *fd = s;
    return ntohs(a.sin_port);
}

static void test_silent_server(void) {
    char url[128], msg[1024];
    double secs = 0;
    int fd = -1, port = listen_any(&fd), rc;
    CU_ASSERT_FATAL(port > 0);
    /* It accepts (the kernel does) and never answers. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    rc = info_through(url, 300, 1000, msg, sizeof msg, &secs);
    printf("  silent server: %s after %.2f s: %s\n", dlock_err_name(rc), secs, msg);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "did not answer within"));
    CU_ASSERT_TRUE(has(msg, " ms"));
    CU_ASSERT_FALSE(has(msg, "Resource temporarily unavailable"));
    close(fd);
}

/* A server that answers every request with the header of a long bulk
 * string, then trickles its bytes, for as long as the client listens
 * (until stop).  Its 16 000 000 bytes are within what a client accepts
 * (DLOCK__REPLY_BULK_MAX, net.h; a longer one is refused at its header:
 * test_hostile), so only the call's bound ends the wait. */
typedef struct trickler {
    int fd;
    volatile int stop;
    pthread_t th;
} trickler;

static void *trickle_main(void *arg) {
    trickler *t = arg;
    static const char head[] = "$16000000\r\n";
    char chunk[1024];
    double end = dlt_now() + 20; /* (a client without a bound of its own: fails at 20 s) */
    memset(chunk, 'x', sizeof chunk);
    while (!t->stop && dlt_now() < end) {
        struct pollfd p = { t->fd, POLLIN, 0 };
        int cfd;
        char req[4096];
        if (poll(&p, 1, 50) <= 0) continue;
        if ((cfd = accept(t->fd, NULL, NULL)) < 0) continue;
        p.fd = cfd;
        if (poll(&p, 1, 2000) > 0 && recv(cfd, req, sizeof req, 0) > 0 &&
            send(cfd, head, sizeof head - 1, MSG_NOSIGNAL) > 0) {
            while (!t->stop && dlt_now() < end && send(cfd, chunk, sizeof chunk, MSG_NOSIGNAL) > 0)
                dlt_sleep_ms(20);
        }
        close(cfd);
    }
    return NULL;
}

static void test_huge_answer_within_bound(void) {
    trickler t;
    char url[128], msg[1024];
    double secs = 0;
    int rc;
    memset(&t, 0, sizeof t);
    CU_ASSERT_FATAL(listen_any(&t.fd) > 0);
    {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        getsockname(t.fd, (struct sockaddr *)&a, &al);
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", ntohs(a.sin_port));
    }
    CU_ASSERT_FATAL(pthread_create(&t.th, NULL, trickle_main, &t) == 0);
    /* Bound 1.5 s (each answer 0.5 s): the trickle would go on for ever. */
    rc = info_through(url, 500, 1500, msg, sizeof msg, &secs);
    printf("  trickled huge bulk: %s after %.2f s (bound 1.5 s): %s\n", dlock_err_name(rc), secs, msg);
    t.stop = 1;
    pthread_join(t.th, NULL);
    close(t.fd);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(secs < 6.0); /* generous: without the bound it lasts as long as the server likes */
}

/* ==================================================================== TLS */

static void test_tls_mismatch(void) {
    dlt_redis tls;
    char url[256], msg[1024];
    double secs = 0;
    int rc;

    /* rediss:// to the suite's plain server. */
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_verify=0", dlt_server.port);
    rc = info_through(url, 0, 20000, msg, sizeof msg, &secs);
    printf("  rediss:// to a plain server: %s after %.2f s: %s\n", dlock_err_name(rc), secs, msg);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "does not speak TLS"));
    CU_ASSERT_TRUE(has(msg, "redis://"));
    CU_ASSERT_TRUE(secs < 10.0); /* said at once, not after the 20 s bound */

    /* redis:// to a TLS-only server. */
    CU_ASSERT_FATAL(dlt_redis_start_tls(&tls, NULL, NULL) == 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", tls.port);
    rc = info_through(url, 0, 20000, msg, sizeof msg, &secs);
    printf("  redis:// to a TLS port: %s after %.2f s: %s\n", dlock_err_name(rc), secs, msg);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "expect TLS"));
    CU_ASSERT_TRUE(has(msg, "rediss://"));
    CU_ASSERT_TRUE(secs < 10.0);
    dlt_redis_cleanup(&tls);
}

/* dlock_mutex_lock of "e/x" through a fresh client on url (the default
 * 5 s unreachable bound, 1 s to connect, 4 s for a command): its result,
 * the message, how long it took. */
static int lock_through(const char *url, char *msg, size_t n, double *secs) {
    dlock_client_t *c;
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    double t0;
    dlock_config_t cfg;
    int rc;
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = 1000;
    cfg.command_timeout_ms = 4000; /* masters connected in turn would take ~1 s each */
    rc = dlock_client_create(&c, &cfg);
    *secs = 0;
    if (rc != 0) {
        snprintf(msg, n, "%s", dlock_last_error());
        return rc;
    }
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "e/x", &a), 0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m);
    *secs = dlt_now() - t0;
    snprintf(msg, n, "%s", rc ? dlock_last_error() : "");
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlock_mutexattr_destroy(&a);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    return rc;
}

/* Redlock over the wrong scheme: redlock:// to TLS-only masters and
 * rediss+redlock:// to plain ones fail at once (a configuration error,
 * not an unreachable quorum), and the hint names the Redlock scheme. */
static void test_tls_mismatch_redlock(void) {
    dlt_redis srv[3];
    char url[512], msg[1024];
    double secs;
    int i, rc, tls;
    for (tls = 1; tls >= 0; tls--) {
        memset(srv, 0, sizeof srv);
        for (i = 0; i < 3; i++)
            CU_ASSERT_FATAL((tls ? dlt_redis_start_tls(&srv[i], NULL, NULL) : dlt_redis_start(&srv[i], NULL)) == 0);
        snprintf(url, sizeof url, "%s127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d%s", tls ? "redlock://" : "rediss+redlock://",
                 srv[0].port, srv[1].port, srv[2].port, tls ? "" : "?tls_verify=0");
        rc = lock_through(url, msg, sizeof msg, &secs);
        printf("  %s to %s masters: lock: %s after %.2f s: %s\n", tls ? "redlock://" : "rediss+redlock://",
               tls ? "TLS" : "plain", dlock_err_name(rc), secs, msg);
        DLT_ASSERT_ERR(rc, ENOLCK);
        CU_ASSERT_TRUE(has(msg, tls ? "expect TLS" : "does not speak TLS"));
        CU_ASSERT_TRUE(has(msg, tls ? "use rediss+redlock://" : "use redlock://"));
        CU_ASSERT_TRUE(secs < 2.5); /* said at once, not after the 5 s unreachable bound */
        for (i = 0; i < 3; i++) dlt_redis_cleanup(&srv[i]);
    }
}

/* Cluster over the wrong scheme, on one node (a TLS-only server and the
 * suite's plain one: the mismatch shows before the node is asked whether
 * it is a cluster, so no cluster is needed): at once, and the hint names
 * the Cluster scheme. */
static void test_tls_mismatch_cluster(void) {
    dlt_redis tls;
    char url[256], msg[1024];
    double secs;
    int rc;
    CU_ASSERT_FATAL(dlt_redis_start_tls(&tls, NULL, NULL) == 0);
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", tls.port);
    rc = lock_through(url, msg, sizeof msg, &secs);
    printf("  redis+cluster:// to a TLS port: lock: %s after %.2f s: %s\n", dlock_err_name(rc), secs, msg);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "expect TLS"));
    CU_ASSERT_TRUE(has(msg, "use rediss+cluster://"));
    CU_ASSERT_TRUE(secs < 2.5); /* not after the 5 s unreachable bound */
    dlt_redis_cleanup(&tls);

    snprintf(url, sizeof url, "rediss+cluster://127.0.0.1:%d?tls_verify=0", dlt_server.port);
    rc = lock_through(url, msg, sizeof msg, &secs);
    printf("  rediss+cluster:// to a plain server: lock: %s after %.2f s: %s\n", dlock_err_name(rc), secs, msg);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "does not speak TLS"));
    CU_ASSERT_TRUE(has(msg, "use redis+cluster://"));
    CU_ASSERT_TRUE(secs < 3.0);
}

/* ============================================================ lost locks */

static int lost_reason = -1, lost_calls;
static pthread_t lost_thread; /* the thread the handler last ran on */

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    lost_thread = pthread_self();
    __atomic_store_n(&lost_reason, dlock_lost_reason(), __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static void hold_and_lose(int broken) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    double t0;
    lost_reason = -1;
    lost_calls = 0;
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 600), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "e/lost", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT_EQUAL(dlock_lost_reason(), DLOCK_LOST_NONE); /* outside a handler */
    if (broken) {
        int was = 0;
        DLT_ASSERT_ERR(dlock_break(NULL, "e/lost", DLOCK_BREAK_OWNERDEAD, &was), 0);
        DLT_ASSERT_INT_EQ(was, 1);
    } else {
        DLT_ASSERT_INT_EQ(kill(dlt_server.pid, SIGSTOP), 0); /* no renewal gets through */
    }
    t0 = dlt_now();
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 && dlt_now() - t0 < 15) dlt_sleep_ms(10);
    if (!broken) kill(dlt_server.pid, SIGCONT);
    printf("  %s: lost reason %d after %.2f s\n", broken ? "broken" : "server paused", lost_reason, dlt_now() - t0);
    DLT_ASSERT_INT_EQ(lost_calls, 1);
    DLT_ASSERT_INT_EQ(lost_reason, broken ? DLOCK_LOST_BROKEN : DLOCK_LOST_EXPIRED);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_INT_EQ(lost_calls, 1); /* told once: the unlock does not tell it again */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlock_mutexattr_destroy(&a);
}

static void test_lost_reason(void) {
    hold_and_lose(1);
    hold_and_lose(0);
}

static void *resume_later(void *arg) {
    (void)arg;
    dlt_sleep_ms(1200); /* twice the lease */
    kill(dlt_server.pid, SIGCONT);
    return NULL;
}

/* An unlock that is the first to learn the hold lapsed on the server
 * (its data flushed; the lease ran out while the unlock waited on a
 * stopped server) says EPERM and tells the lost-lock handler once, on
 * the unlocking thread, before it returns. */
static void unlock_finds_lost(int flushed) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    pthread_t th;
    lost_reason = -1;
    lost_calls = 0;
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 600), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlostcallback(&a, on_lost, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "e/unlock-lost", &a), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    if (flushed) {
        redisReply *r = dlt_redis_cmd(&dlt_server, "FLUSHALL");
        CU_ASSERT_PTR_NOT_NULL(r);
        if (r != NULL) freeReplyObject(r);
    } else {
        DLT_ASSERT_INT_EQ(kill(dlt_server.pid, SIGSTOP), 0);
        DLT_ASSERT_INT_EQ(pthread_create(&th, NULL, resume_later, NULL), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    CU_ASSERT_TRUE(pthread_equal(lost_thread, pthread_self()));
    DLT_ASSERT_INT_EQ(lost_reason, flushed ? DLOCK_LOST_BROKEN : DLOCK_LOST_EXPIRED);
    if (!flushed) pthread_join(th, NULL);
    dlt_sleep_ms(900); /* no renewal tells it again */
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    CU_ASSERT_FALSE(dlock_mutex_holds(&m));
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0); /* a fresh acquisition */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlock_mutexattr_destroy(&a);
}

static void test_unlock_tells_lost(void) {
    unlock_finds_lost(1);
    unlock_finds_lost(0);
}

/* The LD_PRELOAD mode: flock(1) holds a mapped file lock; `dlock break`
 * (dlock_break here) takes it away; the keeper's message says it was
 * broken, not that its lease ran out. */
static void test_preload_says_broken(void) {
    char dir[256], cmd[1024], path[300], err[BUF];
    dlock_lock_info_t info;
    pid_t pid;
    double t0;
    int was = 0, st;
    FILE *f;
    size_t n;
    if (DLPL_SO[0] == '\0') {
        printf("  (the LD_PRELOAD library is not built: skipped)\n");
        return;
    }
    snprintf(dir, sizeof dir, "%s/dlt-errors-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    snprintf(cmd, sizeof cmd,
             "LD_PRELOAD='%s' DLOCK_MAP='file:%s/x.lock=e/keeper' exec /usr/bin/flock '%s/x.lock' sleep 8 "
             "2>'%s/err'", DLPL_SO, dir, dir, dir);
    fflush(NULL);
    if ((pid = fork()) == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(120);
    }
    CU_ASSERT_FATAL(pid > 0);
    t0 = dlt_now();
    memset(&info, 0, sizeof info);
    while (dlt_now() - t0 < 15 && (dlock_lock_info(NULL, "e/keeper", &info) != 0 || !info.held)) dlt_sleep_ms(20);
    CU_ASSERT_TRUE(info.held);
    DLT_ASSERT_ERR(dlock_break(NULL, "e/keeper", DLOCK_BREAK_OWNERDEAD, &was), 0);
    st = dlt_wait(pid, 30000);
    snprintf(path, sizeof path, "%s/err", dir);
    err[0] = '\0';
    if ((f = fopen(path, "r")) != NULL) {
        n = fread(err, 1, sizeof err - 1, f);
        err[n] = '\0';
        fclose(f);
    }
    printf("  flock under the preload, broken: exit %d: %s", st, err);
    DLT_ASSERT_INT_EQ(was, 1);
    CU_ASSERT_TRUE(has(err, "lost the cluster lock"));
    CU_ASSERT_TRUE(has(err, "broken"));
    CU_ASSERT_FALSE(has(err, "lease ran out"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

/* ============================================================ Redlock */

static void test_list_redlock_quorum_down(void) {
    dlt_redis rs[3];
    char url[512], out[BUF], err[BUF];
    dlock_client_t *c;
    dlock_mutex_t m;
    int i, n = 0, rc;
    memset(rs, 0, sizeof rs);
    for (i = 0; i < 3; i++) CU_ASSERT_FATAL(dlt_redis_start(&rs[i], NULL) == 0);
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", rs[0].port, rs[1].port,
             rs[2].port);
    DLT_ASSERT_ERR(client_on(&c, url, 0, 2000), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, "e/rl", 0, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_list(c, NULL, count_lock, &n), 0);
    DLT_ASSERT_INT_EQ(n, 1);
    /* Two of three masters down: no quorum. */
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&rs[1]), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&rs[2]), 0);
    n = 0;
    rc = dlock_list(c, NULL, count_lock, &n);
    printf("  list, quorum down: %s, %d found: %s\n", dlock_err_name(rc), n, dlock_last_error());
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(dlock_last_error(), "quorum"));
    rc = cli(out, err, BUF, 30000, "--url", url, "list", NULL);
    printf("  dlock list, quorum down: %d: %s%s", rc, out, err);
    DLT_ASSERT_INT_EQ(rc, 69);
    CU_ASSERT_TRUE(has(err, "quorum"));
    CU_ASSERT_FALSE(has(out, "no lock is held"));
    /* The first master down as well: nothing found, still no "no lock". */
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&rs[0]), 0);
    rc = cli(out, err, BUF, 30000, "--url", url, "list", NULL);
    DLT_ASSERT_INT_EQ(rc, 69);
    CU_ASSERT_FALSE(has(out, "no lock is held"));
    (void)dlock_mutex_unlock(&m); /* lost or not: the masters are gone */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    for (i = 0; i < 3; i++) dlt_redis_cleanup(&rs[i]);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_password_needed),
    DLT_TEST(test_list_names_noperm),
    DLT_TEST(test_url_says_percent_encode),
    DLT_TEST(test_url_password_never_shown),
    DLT_TEST(test_silent_server),
    DLT_TEST(test_huge_answer_within_bound),
    DLT_TEST(test_tls_mismatch),
    DLT_TEST(test_tls_mismatch_redlock),
    DLT_TEST(test_tls_mismatch_cluster),
    DLT_TEST(test_lost_reason),
    DLT_TEST(test_unlock_tells_lost),
    DLT_TEST(test_preload_says_broken),
    DLT_TEST(test_list_redlock_quorum_down),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    return dlt_main(argc, argv, "errors", tests);
}
