/* labels: redis; timeout: 180 */
/* test_proxy.c -- bad servers: a client talks to a real redis-server through
 * the fault-injecting proxy (proxy.h), which delays, drops, cuts and
 * replaces the server's answers.  In every mode lock, trylock, timedlock,
 * clocklock and unlock must return an errno value within the configured
 * bound (never crash, never hang), leave a clear dlock_last_error() that
 * names the code and never the password, and never leave the library
 * believing it holds a lock it does not.  Switched back to PASS, the same
 * mutex objects must work again.  Run under ASan with detect_leaks=1.
 *
 * The server behind the proxy has a password (requirepass), so that every
 * error path that names the server is checked for leaking it.
 */
#include "fixture.h"
#include "proxy.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

#include "net/net.h" /* dlock__pool_fresh_ms */

#if defined(__SANITIZE_ADDRESS__)
int __lsan_do_recoverable_leak_check(void); /* <sanitizer/lsan_interface.h> */
#endif

#define PASSWORD "s3cretPW"

/* Client timeouts: short, so that the bounded failures stay fast. */
#define CONNECT_MS 200u
#define COMMAND_MS 250u
#define UNREACHABLE_MS 500u
/* Longest any call may take against a bad server: the unreachable bound,
 * plus one command and one connection attempt that started just before
 * it, plus scheduling slack (sanitizers are slow). */
#define BOUND_MS (UNREACHABLE_MS + COMMAND_MS + CONNECT_MS + 800u)

static dlt_redis pw; /* the password-protected server behind the proxy */
/* In a fault's child process (fault_child): the server is the parent's,
 * flushed by it once for all the faults, never by a child. */
static int in_fault_child;

/* ------------------------------------------------------------ helpers */

static redisReply *pw_cmd(const char *fmt, ...) {
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", pw.port, tv);
    redisReply *r = NULL;
    va_list ap;
    if (c == NULL || c->err) goto out;
    redisSetTimeout(c, tv);
    r = redisCommand(c, "AUTH %s", PASSWORD);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        if (r) freeReplyObject(r);
        r = NULL;
        goto out;
    }
    freeReplyObject(r);
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
out:
    if (c) redisFree(c);
    return r;
}

static long long pw_int(const char *fmt, const char *arg) {
    redisReply *r = pw_cmd(fmt, arg);
    long long v = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return v;
}

/* The password server is started once and flushed before each test. */
static int pw_setup(void) {
    if (pw.pid <= 0) {
        dlt_redis_cleanup(&pw);
        {
            /* The fixture pings without AUTH while it starts the server,
             * so the password is set once it runs. */
            redisReply *r;
            int ok;
            if (dlt_redis_start(&pw, NULL) != 0) return -1;
            r = dlt_redis_cmd(&pw, "CONFIG SET requirepass %s", PASSWORD);
            ok = r != NULL && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            if (!ok) return -1;
        }
    }
    redisReply *r = pw_cmd("FLUSHALL");
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

static double ms_since(double t0) {
    return (dlt_now() - t0) * 1000.0;
}

static struct timespec abs_in(clockid_t clk, unsigned ms) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* dlock_last_error() is clear: not empty, names the code the call
 * returned, and never shows the password. */
static void check_last_error(int rc, const char *what) {
    const char *e = dlock_last_error();
    const char *name = dlock_err_name(rc);
    CU_ASSERT_PTR_NOT_NULL(e); /* not fatal: a fault's child must not jump out */
    if (e == NULL) return;
    if (e[0] == '\0') {
        fprintf(stderr, "  %s: rc %s but dlock_last_error() is empty\n", what, name);
        CU_FAIL("dlock_last_error() is empty after a failure");
    } else if (strncmp(e, name, strlen(name)) != 0 || e[strlen(name)] != ':') {
        fprintf(stderr, "  %s: returned %s but dlock_last_error() says: %s\n", what, name, e);
        CU_FAIL("dlock_last_error() names another code than the one returned");
    }
    if (strstr(e, PASSWORD) != NULL) {
        fprintf(stderr, "  %s: dlock_last_error() shows the password: %s\n", what, e);
        CU_FAIL("dlock_last_error() shows the password");
    }
}

static int is_fault_rc(int rc) {
    return rc == ENOLCK || rc == EPROTO || rc == ETIMEDOUT || rc == EBUSY;
}

typedef struct ctx {
    dlt_proxy *px;
    dlock_client_t *c;
    char url[160];
} ctx;

static int ctx_open(ctx *x, unsigned drift_ms) {
    dlock_config_t cfg;
    memset(x, 0, sizeof *x);
    if (!in_fault_child && pw_setup() != 0) return -1;
    if ((x->px = dlt_proxy_start(pw.port)) == NULL) return -1;
    snprintf(x->url, sizeof x->url, "redis://:%s@127.0.0.1:%d", PASSWORD, dlt_proxy_port(x->px));
    dlock_config_init(&cfg);
    cfg.url = x->url;
    cfg.connect_timeout_ms = CONNECT_MS;
    cfg.command_timeout_ms = COMMAND_MS;
    cfg.unreachable_ms = UNREACHABLE_MS;
    cfg.drift_ms = drift_ms;
    if (dlock_client_create(&x->c, &cfg) != 0) {
        fprintf(stderr, "client_create: %s\n", dlock_last_error());
        dlt_proxy_stop(x->px);
        x->px = NULL;
        return -1;
    }
    return 0;
}

static void ctx_close(ctx *x) {
    if (x->c != NULL) {
        int rc = dlock_client_destroy(x->c);
        DLT_ASSERT_ERR(rc, 0);
        if (rc != 0) fprintf(stderr, "  client_destroy: %s\n", dlock_last_error());
    }
    if (x->px != NULL) dlt_proxy_stop(x->px);
    x->c = NULL;
    x->px = NULL;
}


static atomic_int lost_calls;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    atomic_fetch_add(&lost_calls, 1);
}

static int mk(dlock_mutex_t *m, dlock_client_t *c, const char *name, unsigned lease_ms) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if ((rc = dlock_mutexattr_settype(&a, DLOCK_MUTEX_ERRORCHECK)) != 0 ||
        (rc = dlock_mutexattr_setlease(&a, lease_ms)) != 0 ||
        (rc = dlock_mutexattr_setclient(&a, c)) != 0 ||
        (rc = dlock_mutexattr_setlostcallback(&a, on_lost, NULL)) != 0) {
        dlock_mutexattr_destroy(&a);
        return rc;
    }
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* Runs one call on a thread of its own: another owner (an owner is a
 * thread, whatever client it uses), like another host. */
enum { IN_LOCK, IN_TRYLOCK, IN_LOCK_UNLOCK };
struct in_thread_arg {
    dlock_mutex_t *m;
    int what, rc;
};

static void *in_thread_main(void *p) {
    struct in_thread_arg *a = p;
    switch (a->what) {
    case IN_LOCK: a->rc = dlock_mutex_lock(a->m); break;
    case IN_TRYLOCK: a->rc = dlock_mutex_trylock(a->m); break;
    default:
        a->rc = dlock_mutex_lock(a->m);
        if (a->rc == 0) a->rc = dlock_mutex_unlock(a->m);
    }
    /* A lock still held here expires on the server after its lease (the
     * thread ends without unlocking). */
    return NULL;
}

static int in_thread(dlock_mutex_t *m, int what) {
    struct in_thread_arg a = { m, what, -1 };
    pthread_t th;
    if (pthread_create(&th, NULL, in_thread_main, &a) != 0) return -1;
    pthread_join(th, NULL);
    return a.rc;
}

/* The lock's key on the server (default prefix). */
static long long key_exists(const char *name) {
    char key[256];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    return pw_int("EXISTS %s", key);
}

/* ------------------------------------------------------------- faults */

struct fault {
    const char *name;
    enum dlt_proxy_mode mode;
    unsigned ms;
    const char *payload;
};

static void apply(dlt_proxy *px, const struct fault *f) {
    dlt_proxy_set(px, f->mode, f->ms, f->payload, f->payload ? strlen(f->payload) : 0);
}

enum { OP_TRYLOCK, OP_LOCK, OP_TIMEDLOCK, OP_CLOCKLOCK, OP_INFO, OP_BREAK, OP_LIST, NOPS };
static const char *const op_names[NOPS] = { "trylock", "lock", "timedlock", "clocklock",
                                            "lock_info", "break", "list" };

static dlock_client_t *op_client; /* the client of the mutex do_op gets */

static int count_fn(const char *name, const dlock_lock_info_t *info, void *arg) {
    (void)name;
    (void)info;
    ++*(int *)arg;
    return 0;
}

static int do_op(dlock_mutex_t *m, int op) {
    struct timespec ts;
    dlock_lock_info_t info;
    int n = 0;
    switch (op) {
    /* the administrative calls, on the client of the test (op_client) */
    case OP_INFO: return dlock_lock_info(op_client, dlock_mutex_name(m), &info);
    case OP_BREAK: return dlock_break(op_client, "proxy/break-me", DLOCK_BREAK_RESET, NULL);
    case OP_LIST: return dlock_list(op_client, "*", count_fn, &n);
    case OP_TRYLOCK: return dlock_mutex_trylock(m);
    case OP_LOCK: return dlock_mutex_lock(m);
    case OP_TIMEDLOCK:
        ts = abs_in(CLOCK_REALTIME, 400);
        return dlock_mutex_timedlock(m, &ts);
    default:
        ts = abs_in(CLOCK_MONOTONIC, 400);
        return dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
    }
}

/* The lease of the mutexes of run_fault: a hold the server keeps after a
 * lost answer or release runs out this fast. */
#define FAULT_LEASE_MS 1000u

/* One fault mode: every call fails cleanly and within the bound, nothing
 * is believed held, and the same objects work again after PASS. */
static void run_fault(const struct fault *f) {
    dlock_mutex_t m;
    char name[64], what[128];
    ctx x;
    int op, rc;
    double t0, el;

    if (ctx_open(&x, 0) != 0) {
        CU_FAIL("cannot set up the proxy and client"); /* not fatal: a fault's child must not jump out */
        return;
    }
    snprintf(name, sizeof name, "proxy/%s", f->name);
    DLT_ASSERT_ERR(mk(&m, x.c, name, FAULT_LEASE_MS), 0);
    op_client = x.c;

    /* Sanity, through the proxy in PASS. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    /* The fault, with nothing held. */
    apply(x.px, f);
    for (op = 0; op < NOPS; op++) {
        snprintf(what, sizeof what, "[%s] %s", f->name, op_names[op]);
        t0 = dlt_now();
        rc = do_op(&m, op);
        el = ms_since(t0);
        if (!is_fault_rc(rc)) {
            fprintf(stderr, "  %s: returned %s (%d): %s\n", what, dlock_err_name(rc), rc, dlock_last_error());
            CU_FAIL("a call against a bad server did not return ENOLCK/EPROTO/ETIMEDOUT/EBUSY");
        } else {
            check_last_error(rc, what);
        }
        if (el > BOUND_MS) {
            fprintf(stderr, "  %s: took %.0f ms (bound %u ms)\n", what, el, BOUND_MS);
            CU_FAIL("a call against a bad server took longer than its bound");
        }
        if (dlock_mutex_holds(&m) != 0 && op < OP_INFO) {
            fprintf(stderr, "  %s: returned %s but holds() is 1\n", what, dlock_err_name(rc));
            CU_FAIL("the library believes it holds a lock after an error");
        }
        DLT_ASSERT_INT_EQ(dlock_mutex_fence(&m), 0);
        if (rc == 0) (void)dlock_mutex_unlock(&m);
    }

    /* A hold taken in PASS, released during the fault. */
    dlt_proxy_pass(x.px);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    apply(x.px, f);
    snprintf(what, sizeof what, "[%s] unlock", f->name);
    t0 = dlt_now();
    rc = dlock_mutex_unlock(&m);
    el = ms_since(t0);
    if (rc != 0 && rc != ENOLCK && rc != EPROTO && rc != EPERM) {
        fprintf(stderr, "  %s: returned %s (%d)\n", what, dlock_err_name(rc), rc);
        CU_FAIL("unlock against a bad server did not return 0/ENOLCK/EPROTO/EPERM");
    }
    if (rc != 0) check_last_error(rc, what);
    if (el > BOUND_MS) {
        fprintf(stderr, "  %s: took %.0f ms (bound %u ms)\n", what, el, BOUND_MS);
        CU_FAIL("unlock against a bad server took longer than its bound");
    }
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);

    /* Back to PASS: the same objects work again -- at once, or, when the
     * server still has a hold whose answer or release was lost, once its
     * lease has run out. */
    dlt_proxy_pass(x.px);
    snprintf(what, sizeof what, "[%s] after pass", f->name);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m);
    el = ms_since(t0);
    if (rc != 0) fprintf(stderr, "  %s: lock: %s\n", what, dlock_last_error());
    DLT_ASSERT_ERR(rc, 0);
    if (el > FAULT_LEASE_MS + BOUND_MS) {
        fprintf(stderr, "  %s: lock took %.0f ms (lease %u ms)\n", what, el, FAULT_LEASE_MS);
        CU_FAIL("after PASS, lock took longer than a lease");
    }
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), rc == 0);
    CU_ASSERT(rc != 0 || dlock_mutex_fence(&m) > 0);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    rc = dlock_mutex_trylock(&m);
    if (rc != 0) fprintf(stderr, "  %s: trylock: %s\n", what, dlock_last_error());
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    rc = do_op(&m, OP_TIMEDLOCK);
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(key_exists(name), 0);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    ctx_close(&x);
}

static const struct fault faults[] = {
    { "delay-long", DLT_PROXY_DELAY, 2 * COMMAND_MS, NULL },
    { "drop", DLT_PROXY_DROP, 0, NULL },
    { "cut", DLT_PROXY_CUT, 0, NULL },
    { "close", DLT_PROXY_CLOSE, 0, NULL },
    { "random", DLT_PROXY_RANDOM, 0, NULL },
    { "status-ok", DLT_PROXY_REPLACE, 0, "+OK\r\n" },
    { "integer", DLT_PROXY_REPLACE, 0, ":7\r\n" },
    { "array3", DLT_PROXY_REPLACE, 0, "*3\r\n:1\r\n:2\r\n:3\r\n" },
    { "error", DLT_PROXY_REPLACE, 0, "-ERR injected fault\r\n" },
    { "nil", DLT_PROXY_REPLACE, 0, "$-1\r\n" },
    { "zero-fence", DLT_PROXY_REPLACE, 0, "*2\r\n:1\r\n$1\r\n0\r\n" },
    { "bad-status", DLT_PROXY_REPLACE, 0, "*2\r\n:9\r\n:0\r\n" },
    { "huge-pttl", DLT_PROXY_REPLACE, 0, "*2\r\n:0\r\n:99999999999999\r\n" },
    { "partial", DLT_PROXY_REPLACE, 0, "*2\r\n:1\r\n" },
    { "not-resp", DLT_PROXY_REPLACE, 0, "HTTP/1.1 400 Bad Request\r\n\r\n" },
};

#define NFAULTS (sizeof faults / sizeof faults[0])

/* The faults run at once, each in a child process of its own: a fault
 * waits mostly for the library's bounds (a reply floor, a deadline, the
 * unreachable bound), and on its own proxy, client and lock name shares
 * nothing with another.  The first fault test to run forks the children
 * of its fault and of those after it (before this process has any
 * thread: the sanitizer build must not fork next to busy threads); each
 * fault's test then waits for its child and asserts that it passed. */
static pid_t fault_pid[NFAULTS];
static int fault_index[NFAULTS];

/* A fault's child: run_fault, its CUnit asserts counted in this process's
 * copy of the run.  Its failures are said on stderr (their records go no
 * further), and leaks are looked for here (the child ends with _exit);
 * the exit status is 0 when all passed. */
static int fault_child(void *arg) {
    const struct fault *f = &faults[*(const int *)arg];
    unsigned before = CU_get_number_of_failure_records(), n = 0;
    const CU_FailureRecord *r;
    in_fault_child = 1;
    run_fault(f);
    for (r = CU_get_failure_list(); r != NULL; r = r->pNext)
        if (n++ >= before)
            fprintf(stderr, "  [%s] %s:%u: %s\n", f->name, r->strFileName, r->uiLineNumber, r->strCondition);
#if defined(__SANITIZE_ADDRESS__)
    if (__lsan_do_recoverable_leak_check() != 0) return 2;
#endif
    return CU_get_number_of_failure_records() != before;
}

static void fault_test(int i) {
    if (fault_pid[i] == 0) {
        CU_ASSERT_FATAL(pw_setup() == 0);
        for (size_t j = (size_t)i; j < NFAULTS; j++) {
            fault_index[j] = (int)j;
            if (fault_pid[j] == 0) fault_pid[j] = dlt_spawn(fault_child, &fault_index[j]);
        }
    }
    CU_ASSERT_FATAL(fault_pid[i] > 0);
    DLT_ASSERT_INT_EQ(dlt_wait(fault_pid[i], 60000), 0);
    fault_pid[i] = -1;
}

#define FAULT_TEST(fn, i)  \
    static void fn(void) { \
        fault_test(i);     \
    }
FAULT_TEST(test_fault_delay_long, 0)
FAULT_TEST(test_fault_drop, 1)
FAULT_TEST(test_fault_cut, 2)
FAULT_TEST(test_fault_close, 3)
FAULT_TEST(test_fault_random, 4)
FAULT_TEST(test_fault_status_ok, 5)
FAULT_TEST(test_fault_integer, 6)
FAULT_TEST(test_fault_array3, 7)
FAULT_TEST(test_fault_error, 8)
FAULT_TEST(test_fault_nil, 9)
FAULT_TEST(test_fault_zero_fence, 10)
FAULT_TEST(test_fault_bad_status, 11)
FAULT_TEST(test_fault_huge_pttl, 12)
FAULT_TEST(test_fault_partial, 13)
FAULT_TEST(test_fault_not_resp, 14)

/* ------------------------------------------------------ other tests */

/* A slow server (delay below the command timeout) is only slow. */
static void test_delay_short_works(void) {
    dlock_mutex_t m;
    ctx x;
    double t0;
    if (ctx_open(&x, 0) != 0) CU_FAIL_FATAL("cannot set up the proxy and client");
    DLT_ASSERT_ERR(mk(&m, x.c, "proxy/slow", 3000), 0);
    dlt_proxy_set(x.px, DLT_PROXY_DELAY, 40, NULL, 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    CU_ASSERT(ms_since(t0) >= 35);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(do_op(&m, OP_TIMEDLOCK), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(do_op(&m, OP_CLOCKLOCK), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    dlt_proxy_pass(x.px);
    DLT_ASSERT_INT_EQ(key_exists("proxy/slow"), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    ctx_close(&x);
}

/* A hold whose server goes silent is lost within its lease: holds()
 * turns 0, the handler runs once, unlock gives EPERM; after PASS the
 * same object locks again. */
static void test_hold_lost_in_blackhole(void) {
    dlock_mutex_t m;
    ctx x;
    double t0, el = 0;
    if (ctx_open(&x, 0) != 0) CU_FAIL_FATAL("cannot set up the proxy and client");
    DLT_ASSERT_ERR(mk(&m, x.c, "proxy/lost", 600), 0);
    atomic_store(&lost_calls, 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_proxy_set(x.px, DLT_PROXY_DROP, 0, NULL, 0);
    while (dlock_mutex_holds(&m) && (el = ms_since(t0)) < 3000) dlt_sleep_ms(10);
    el = ms_since(t0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    if (el > 600 + 100) {
        fprintf(stderr, "  holds() still 1 after %.0f ms (lease 600 ms)\n", el);
        CU_FAIL("a hold outlived its lease while the server was silent");
    }
    dlt_sleep_ms(300); /* let the renewal thread notice too */
    DLT_ASSERT_INT_EQ(atomic_load(&lost_calls), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), EPERM);
    dlt_proxy_pass(x.px);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_INT_EQ(atomic_load(&lost_calls), 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    ctx_close(&x);
}

/* A garbage answer that holds one reply more than the request asked for
 * ("+OK\r\n" four times, where the uncontended acquire's pipelined SET,
 * EXISTS and INCR ask for three) must not shift every later answer on
 * that connection by one: after PASS, a trylock of a lock another host
 * holds must give EBUSY, not the stale "acquired" answer of an earlier
 * request for another lock. */
static void test_garbage_does_not_desync(void) {
    dlock_mutex_t mx, my, by;
    dlock_client_t *b = NULL;
    dlock_config_t cfg;
    char burl[128];
    ctx x;
    int rc;

    if (ctx_open(&x, 0) != 0) CU_FAIL_FATAL("cannot set up the proxy and client");
    snprintf(burl, sizeof burl, "redis://:%s@127.0.0.1:%d", PASSWORD, pw.port);
    dlock_config_init(&cfg);
    cfg.url = burl;
    DLT_ASSERT_ERR(dlock_client_create(&b, &cfg), 0);
    DLT_ASSERT_ERR(mk(&mx, x.c, "proxy/x", 3000), 0);
    DLT_ASSERT_ERR(mk(&my, x.c, "proxy/y", 3000), 0);
    DLT_ASSERT_ERR(mk(&by, b, "proxy/y", 3000), 0);

    /* One pooled connection through the proxy. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&mx), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mx), 0);

    dlt_proxy_replace(x.px, "+OK\r\n+OK\r\n+OK\r\n+OK\r\n");
    rc = dlock_mutex_trylock(&mx);
    DLT_ASSERT_ERR(rc, EPROTO);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&mx), 0);
    dlt_proxy_pass(x.px);

    /* An honest server from here on.  x is free, or still held by the
     * refused attempt's request (granted, answer lost): 0 or EBUSY.  On
     * a connection out of step this would read the stale second "+OK". */
    rc = dlock_mutex_trylock(&mx);
    if (rc != 0 && rc != EBUSY) fprintf(stderr, "  trylock x after PASS: %s\n", dlock_last_error());
    CU_ASSERT(rc == 0 || rc == EBUSY);
    if (dlock_mutex_holds(&mx)) DLT_ASSERT_ERR(dlock_mutex_unlock(&mx), 0);

    /* Another host (another thread: another owner) holds y. */
    DLT_ASSERT_ERR(in_thread(&by, IN_LOCK), 0);
    rc = dlock_mutex_trylock(&my);
    if (rc != EBUSY) fprintf(stderr, "  trylock y (held by the other client): %s (%s)\n",
                             dlock_err_name(rc), dlock_last_error());
    DLT_ASSERT_ERR(rc, EBUSY);
    if (dlock_mutex_holds(&my)) {
        CU_FAIL("both clients believe they hold 'proxy/y'");
        (void)dlock_mutex_unlock(&my);
    }

    /* The connection is sane again at the latest now. */
    for (int i = 0; i < 3 && dlock_mutex_holds(&mx) == 0; i++)
        if (dlock_mutex_trylock(&mx) != 0) dlt_sleep_ms(10);
    if (dlock_mutex_holds(&mx)) DLT_ASSERT_ERR(dlock_mutex_unlock(&mx), 0);
    /* x may be held on the server by a lost answer: let it expire. */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mx), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&my), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&by), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(b), 0);
    ctx_close(&x);
}

/* The same, when the extra answer comes a little later (a duplicate of
 * a real answer, in its own packet): a pooled connection with unread data
 * waiting must not be used for the next request.  by_time: with the
 * connection taken back without a poll(0), as a request that follows its
 * predecessor's answer within a millisecond is -- the pool's freshness is
 * widened past the test's pauses, so the stale duplicate is still in the
 * kernel when y's request goes out, and only the receive time of its
 * bytes (before the request was sent) tells it from y's answer.  That
 * connection is closed and y's request asked again on a new one (the
 * proxy accepts one more): EBUSY.  The client's live figures are off then
 * (DLOCK_STATS=0), so only this thread takes connections from its pool. */
static void duplicate_answer(int by_time) {
    unsigned fresh = dlock__pool_fresh_ms, after = dlock__stamps_after_ms;
    dlock_mutex_t mx, my, by;
    dlock_client_t *b = NULL;
    dlock_config_t cfg;
    unsigned long accepted;
    char burl[128];
    ctx x;
    int rc;

    dlock__stamps_after_ms = 0; /* (its reads dated from its first pool take on) */
    if (by_time) setenv("DLOCK_STATS", "0", 1);
    rc = ctx_open(&x, 0);
    unsetenv("DLOCK_STATS");
    if (rc != 0) CU_FAIL_FATAL("cannot set up the proxy and client");
    snprintf(burl, sizeof burl, "redis://:%s@127.0.0.1:%d", PASSWORD, pw.port);
    dlock_config_init(&cfg);
    cfg.url = burl;
    DLT_ASSERT_ERR(dlock_client_create(&b, &cfg), 0);
    DLT_ASSERT_ERR(mk(&mx, x.c, by_time ? "proxy/tx" : "proxy/dx", 3000), 0);
    DLT_ASSERT_ERR(mk(&my, x.c, by_time ? "proxy/ty" : "proxy/dy", 3000), 0);
    DLT_ASSERT_ERR(mk(&by, b, by_time ? "proxy/ty" : "proxy/dy", 3000), 0);
    DLT_ASSERT_ERR(in_thread(&by, IN_LOCK), 0); /* another owner holds y */

    /* One pooled connection through the proxy. */
    DLT_ASSERT_ERR(dlock_mutex_lock(&mx), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mx), 0);

    /* x's answer {1, fence} comes twice, the second 30 ms later. */
    if (by_time) dlock__pool_fresh_ms = 60000;
    dlt_proxy_set(x.px, DLT_PROXY_DUPLICATE, 30, NULL, 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mx), 0);
    dlt_sleep_ms(150);
    dlt_proxy_pass(x.px);
    accepted = dlt_proxy_accepted(x.px);

    rc = dlock_mutex_trylock(&my);
    if (rc != EBUSY) fprintf(stderr, "  trylock y (held by another owner): %s (%s)\n", dlock_err_name(rc),
                             rc ? dlock_last_error() : "");
    if (by_time) {
        DLT_ASSERT_ERR(rc, EBUSY);
        DLT_ASSERT_INT_EQ(dlt_proxy_accepted(x.px), accepted + 1); /* the connection out of step is gone */
    } else {
        CU_ASSERT(rc == EBUSY || rc == EPROTO);
    }
    if (dlock_mutex_holds(&my)) {
        CU_FAIL("two owners believe they hold y (a stale duplicate answer was taken for y's)");
        (void)dlock_mutex_unlock(&my);
    }
    dlock__pool_fresh_ms = fresh;
    dlock__stamps_after_ms = after;
    if (dlock_mutex_holds(&mx)) (void)dlock_mutex_unlock(&mx);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mx), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&my), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&by), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(b), 0);
    ctx_close(&x);
}

static void test_duplicate_does_not_desync(void) {
    duplicate_answer(0);
}

static void test_duplicate_told_by_time(void) {
    duplicate_answer(1);
}

/* A pooled connection the server closed while it sat idle (here the
 * proxy closes both sides) is found closed when taken -- by the poll(0)
 * that a connection idle for a millisecond or more gets -- and the unlock
 * goes out on a fresh one: 0, not "the request may have run".  With the
 * pool's freshness widened past the pause, the closed connection is taken
 * unchecked (an end of file carries no receive time): the unlock's request
 * goes out on it and gets no answer, and is asked again on a fresh
 * connection (a release is the token's: asking again ends nothing else):
 * 0 as well, and the lock is free. */
static void test_idle_close_then_unlock(void) {
    unsigned fresh = dlock__pool_fresh_ms, after = dlock__stamps_after_ms;
    dlock_mutex_t m;
    double t0;
    ctx x;
    int rc, round;

    dlock__stamps_after_ms = 0; /* (its reads dated from its first pool take on) */
    if (ctx_open(&x, 0) != 0) CU_FAIL_FATAL("cannot set up the proxy and client");
    DLT_ASSERT_ERR(mk(&m, x.c, "proxy/idleclose", 10000), 0);
    for (round = 0; round < 2; round++) {
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
        dlt_proxy_close_all(x.px);
        dlt_sleep_ms(50);
        if (round == 1) dlock__pool_fresh_ms = 60000;
        rc = dlock_mutex_unlock(&m);
        dlock__pool_fresh_ms = fresh;
        if (rc != 0) fprintf(stderr, "  unlock after an idle close (%s): %s\n", round ? "unchecked" : "polled",
                             dlock_last_error());
        DLT_ASSERT_ERR(rc, 0);
        DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
        t0 = dlt_now(); /* free on the server */
        while (key_exists("proxy/idleclose") != 0 && ms_since(t0) < 3000) dlt_sleep_ms(20);
        DLT_ASSERT_INT_EQ(key_exists("proxy/idleclose"), 0);
    }
    dlock__stamps_after_ms = after;
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    ctx_close(&x);
}

/* Switches a proxy to PASS after a while (another thread). */
struct later_pass {
    dlt_proxy *px;
    unsigned ms;
};

static void *later_pass_run(void *arg) {
    struct later_pass *lp = arg;
    dlt_sleep_ms(lp->ms);
    dlt_proxy_pass(lp->px);
    return NULL;
}

/* Unlocks m with px in mode until pass_ms later, when another thread
 * switches it to PASS: the unlock's result, and its time in *el (ms). */
static int unlock_faulted(dlock_mutex_t *m, dlt_proxy *px, enum dlt_proxy_mode mode, unsigned pass_ms, double *el) {
    struct later_pass lp = { px, pass_ms };
    pthread_t th;
    double t0;
    int rc;
    dlt_proxy_set(px, mode, 0, NULL, 0);
    CU_ASSERT_FATAL(pthread_create(&th, NULL, later_pass_run, &lp) == 0);
    t0 = dlt_now();
    rc = dlock_mutex_unlock(m);
    *el = ms_since(t0);
    pthread_join(th, NULL);
    return rc;
}

/* An unlock whose answer is lost is asked again (the token decides: a
 * second release ends nothing the first did not), within the unreachable
 * bound, and what the server says then is read knowing the first may have
 * run:
 *  - the answer cut after the server ran the release: asked again, the
 *    server no longer has the hold -- the first request's doing, with the
 *    lease still valid: 0, the lock free (not ENOLCK, "may have run");
 *  - the request swallowed (a black hole) until the hold's lease has run
 *    out, then the server back: the hold is gone and it may have lapsed
 *    while the unlock waited: EPERM, as for any unlock whose lease ran
 *    out. */
static void test_unlock_answer_lost(void) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    dlt_proxy *px;
    char url[160];
    double el;
    int rc;

    if (pw_setup() != 0 || (px = dlt_proxy_start(pw.port)) == NULL) CU_FAIL_FATAL("setup");
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", PASSWORD, dlt_proxy_port(px));
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = CONNECT_MS;
    cfg.command_timeout_ms = COMMAND_MS;
    cfg.unreachable_ms = 4000;
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    DLT_ASSERT_ERR(mk(&m, c, "proxy/answerlost", 10000), 0);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    rc = unlock_faulted(&m, px, DLT_PROXY_CUT, 100, &el);
    printf("\n  unlock, its answer cut: %s after %.0f ms [%s]", dlt_errno_label(rc), el, rc ? dlock_last_error() : "");
    DLT_ASSERT_ERR(rc, 0);
    CU_ASSERT(dlt_proxy_faults(px) > 0);
    DLT_ASSERT_INT_EQ(key_exists("proxy/answerlost"), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    DLT_ASSERT_ERR(mk(&m, c, "proxy/answerlost", 1000), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    rc = unlock_faulted(&m, px, DLT_PROXY_DROP, 1600, &el);
    printf("\n  unlock (lease 1 s), the server silent for 1.6 s: %s after %.0f ms [%s]\n", dlt_errno_label(rc), el,
           rc ? dlock_last_error() : "");
    DLT_ASSERT_ERR(rc, EPERM);
    CU_ASSERT(el >= 1500);
    DLT_ASSERT_INT_EQ(key_exists("proxy/answerlost"), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

/* A drift margin as large as the lease (a valid configuration: the URL
 * takes drift_ms up to 60000) must not make a hold valid forever: with
 * the server silent, holds() must turn 0 once the lease has run out. */
static void test_drift_larger_than_lease(void) {
    dlock_mutex_t m;
    ctx x;
    double t0;
    if (ctx_open(&x, 5000) != 0) CU_FAIL_FATAL("cannot set up the proxy and client");
    DLT_ASSERT_ERR(mk(&m, x.c, "proxy/drift", 1000), 0);
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_proxy_set(x.px, DLT_PROXY_DROP, 0, NULL, 0);
    while (dlock_mutex_holds(&m) && ms_since(t0) < 2500) dlt_sleep_ms(20);
    if (dlock_mutex_holds(&m)) {
        fprintf(stderr, "  holds() is still 1 %.0f ms after lock, with a 1000 ms lease and the server silent\n",
                ms_since(t0));
        CU_FAIL("a hold outlives its lease when drift_ms >= lease");
    }
    dlt_proxy_pass(x.px);
    (void)dlock_mutex_unlock(&m);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    ctx_close(&x);
}

/* timedlock returns by its deadline (give or take the one connection
 * attempt the library always makes) even when the server stops
 * answering mid-command: the command timeout must not stretch it. */
static void test_timedlock_deadline_blackhole(void) {
    dlock_mutex_t m;
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    dlt_proxy *px;
    char url[160];
    struct timespec ts;
    double t0, el;
    int rc;

    if (pw_setup() != 0 || (px = dlt_proxy_start(pw.port)) == NULL) CU_FAIL_FATAL("setup");
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", PASSWORD, dlt_proxy_port(px));
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = 200;
    cfg.command_timeout_ms = 1500;
    cfg.unreachable_ms = 3000;
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    DLT_ASSERT_ERR(mk(&m, c, "proxy/deadline", 3000), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
    ts = abs_in(CLOCK_REALTIME, 200);
    t0 = dlt_now();
    rc = dlock_mutex_timedlock(&m, &ts);
    el = ms_since(t0);
    CU_ASSERT(rc == ETIMEDOUT || rc == ENOLCK);
    if (rc != 0) check_last_error(rc, "timedlock 200 ms, server silent");
    if (el > 200 + 500) {
        fprintf(stderr, "  timedlock(now + 200 ms) against a silent server returned %s after %.0f ms "
                        "(command timeout 1500 ms, connect timeout 200 ms)\n", dlock_err_name(rc), el);
        CU_FAIL("timedlock overran its deadline by the command timeout");
    }
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

/* Destroying a client whose server went silent while a renewal is due is
 * bounded too. */
static void test_destroy_while_silent(void) {
    dlock_mutex_t m;
    ctx x;
    double t0, el;
    int rc;
    if (ctx_open(&x, 0) != 0) CU_FAIL_FATAL("cannot set up the proxy and client");
    DLT_ASSERT_ERR(mk(&m, x.c, "proxy/destroy", 300), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_proxy_set(x.px, DLT_PROXY_DROP, 0, NULL, 0);
    dlt_sleep_ms(120); /* a renewal (at lease/3) is now in flight */
    t0 = dlt_now();
    rc = dlock_mutex_unlock(&m);
    CU_ASSERT(rc == ENOLCK || rc == EPERM);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(x.c), 0);
    x.c = NULL;
    el = ms_since(t0);
    if (el > BOUND_MS) {
        fprintf(stderr, "  unlock + destroy took %.0f ms\n", el);
        CU_FAIL("unlock + destroy against a silent server took too long");
    }
    ctx_close(&x);
}

/* dlock_list against a server whose SCAN never ends (always the same
 * cursor, no keys) must still return.  Run in a child: it may hang. */
static int list_port;

static int child_list(void *arg) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    char url[160];
    int n = 0, rc;
    (void)arg;
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", PASSWORD, list_port);
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = CONNECT_MS;
    cfg.command_timeout_ms = COMMAND_MS;
    cfg.unreachable_ms = UNREACHABLE_MS;
    if (dlock_client_create(&c, &cfg) != 0) return 100;
    rc = dlock_list(c, "*", count_fn, &n);
    dlock_client_destroy(c);
    return rc;
}

static void test_list_endless_scan(void) {
    dlt_proxy *px;
    pid_t pid;
    int st;
    if (pw_setup() != 0 || (px = dlt_proxy_start(pw.port)) == NULL) CU_FAIL_FATAL("setup");
    list_port = dlt_proxy_port(px);
    /* "+OK" for AUTH, then the endless SCAN answer for everything */
    dlt_proxy_replace(px, "*2\r\n$1\r\n5\r\n*0\r\n");
    pid = dlt_spawn(child_list, NULL);
    CU_ASSERT_FATAL(pid > 0);
    st = dlt_wait(pid, 5000);
    if (st < 0) {
        fprintf(stderr, "  dlock_list did not return within 5 s against a SCAN that never ends\n");
        CU_FAIL("dlock_list hangs against a server whose SCAN never ends");
    } else if (st != EPROTO && st != ENOLCK && st != ETIMEDOUT) {
        fprintf(stderr, "  dlock_list returned %d\n", st);
        CU_FAIL("dlock_list against an endless SCAN did not return an error");
    }
    dlt_proxy_stop(px);
}

/* ----------------------------------------------------------- chaos */

#define CHAOS_MS 3000
#define CHAOS_NAMES 2

static atomic_int chaos_stop;
static atomic_int chaos_inside[CHAOS_NAMES];
static atomic_int chaos_violations, chaos_believed, chaos_badrc, chaos_slow, chaos_acquired, chaos_failed;
static atomic_int chaos_worst_ms;

struct chaos_arg {
    dlock_client_t *c;
    unsigned seed;
};

static void *chaos_worker(void *p) {
    struct chaos_arg *a = p;
    dlock_mutex_t m[CHAOS_NAMES];
    unsigned seed = a->seed;
    int i, ok[CHAOS_NAMES];
    for (i = 0; i < CHAOS_NAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "chaos/%d", i);
        ok[i] = mk(&m[i], a->c, name, 2000) == 0;
        if (!ok[i]) atomic_fetch_add(&chaos_badrc, 1);
    }
    while (!atomic_load(&chaos_stop)) {
        int k = (int)(rand_r(&seed) % CHAOS_NAMES), rc, el;
        double t0 = dlt_now();
        if (!ok[k]) break;
        rc = do_op(&m[k], rand_r(&seed) % 2 ? OP_TRYLOCK : OP_TIMEDLOCK);
        el = (int)ms_since(t0);
        if (el > atomic_load(&chaos_worst_ms)) atomic_store(&chaos_worst_ms, el);
        if (el > (int)BOUND_MS) atomic_fetch_add(&chaos_slow, 1);
        if (rc == 0 || rc == EOWNERDEAD) {
            atomic_fetch_add(&chaos_acquired, 1);
            if (atomic_fetch_add(&chaos_inside[k], 1) != 0) atomic_fetch_add(&chaos_violations, 1);
            dlt_sleep_ms(1 + rand_r(&seed) % 3);
            atomic_fetch_sub(&chaos_inside[k], 1);
            rc = dlock_mutex_unlock(&m[k]);
            if (rc != 0 && rc != ENOLCK && rc != EPROTO && rc != EPERM) atomic_fetch_add(&chaos_badrc, 1);
            if (dlock_mutex_holds(&m[k])) atomic_fetch_add(&chaos_believed, 1);
        } else {
            atomic_fetch_add(&chaos_failed, 1);
            if (!is_fault_rc(rc)) atomic_fetch_add(&chaos_badrc, 1);
            if (dlock_mutex_holds(&m[k])) atomic_fetch_add(&chaos_believed, 1);
            dlt_sleep_ms(rand_r(&seed) % 5);
        }
    }
    for (i = 0; i < CHAOS_NAMES; i++) {
        if (!ok[i]) continue;
        if (dlock_mutex_holds(&m[i])) (void)dlock_mutex_unlock(&m[i]);
        if (dlock_mutex_destroy(&m[i]) != 0) atomic_fetch_add(&chaos_badrc, 1);
    }
    return NULL;
}

/* Two "hosts" (clients) contend for two locks, one through the proxy
 * whose mode flips at random every 100-200 ms, the other direct: no call
 * hangs or gives an unexpected code, nobody believes it holds a lock after
 * an error, and the two never hold one lock at once. */
static void test_chaos_two_hosts(void) {
    enum { NTHREADS = 4 };
    pthread_t th[NTHREADS];
    struct chaos_arg args[NTHREADS];
    dlock_client_t *b = NULL;
    dlock_config_t cfg;
    char burl[128];
    unsigned seed = 12345;
    double t0;
    ctx x;
    int i;

    if (ctx_open(&x, 0) != 0) CU_FAIL_FATAL("cannot set up the proxy and client");
    snprintf(burl, sizeof burl, "redis://:%s@127.0.0.1:%d", PASSWORD, pw.port);
    dlock_config_init(&cfg);
    cfg.url = burl;
    cfg.command_timeout_ms = COMMAND_MS;
    cfg.connect_timeout_ms = CONNECT_MS;
    cfg.unreachable_ms = UNREACHABLE_MS;
    DLT_ASSERT_ERR(dlock_client_create(&b, &cfg), 0);
    atomic_store(&chaos_stop, 0);
    for (i = 0; i < NTHREADS; i++) {
        args[i].c = i < NTHREADS / 2 ? x.c : b;
        args[i].seed = 1000u + (unsigned)i;
        pthread_create(&th[i], NULL, chaos_worker, &args[i]);
    }
    t0 = dlt_now();
    while (ms_since(t0) < CHAOS_MS) {
        /* every fault but the two-replies one (test_garbage_does_not_desync) */
        size_t f = rand_r(&seed) % (sizeof faults / sizeof faults[0] + 3);
        if (f >= sizeof faults / sizeof faults[0]) dlt_proxy_pass(x.px);
        else apply(x.px, &faults[f]);
        if (rand_r(&seed) % 4 == 0) dlt_proxy_close_all(x.px);
        dlt_sleep_ms(100 + rand_r(&seed) % 100);
    }
    dlt_proxy_pass(x.px);
    atomic_store(&chaos_stop, 1);
    for (i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    printf("\n  chaos: %d acquired, %d failed, worst call %d ms\n", atomic_load(&chaos_acquired),
           atomic_load(&chaos_failed), atomic_load(&chaos_worst_ms));
    DLT_ASSERT_INT_EQ(atomic_load(&chaos_violations), 0);
    DLT_ASSERT_INT_EQ(atomic_load(&chaos_believed), 0);
    DLT_ASSERT_INT_EQ(atomic_load(&chaos_badrc), 0);
    DLT_ASSERT_INT_EQ(atomic_load(&chaos_slow), 0);
    CU_ASSERT(atomic_load(&chaos_acquired) > 0);

    /* Both clients work again. */
    {
        dlock_mutex_t ma, mb;
        DLT_ASSERT_ERR(mk(&ma, x.c, "chaos/0", 2000), 0);
        DLT_ASSERT_ERR(mk(&mb, b, "chaos/0", 2000), 0);
        DLT_ASSERT_ERR(dlock_mutex_lock(&ma), 0); /* may wait out a lease orphaned by a lost answer */
        DLT_ASSERT_ERR(in_thread(&mb, IN_TRYLOCK), EBUSY);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
        DLT_ASSERT_ERR(in_thread(&mb, IN_LOCK_UNLOCK), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&ma), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(b), 0);
    ctx_close(&x);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_fault_delay_long),
    DLT_TEST(test_fault_drop),
    DLT_TEST(test_fault_cut),
    DLT_TEST(test_fault_close),
    DLT_TEST(test_fault_random),
    DLT_TEST(test_fault_status_ok),
    DLT_TEST(test_fault_integer),
    DLT_TEST(test_fault_array3),
    DLT_TEST(test_fault_error),
    DLT_TEST(test_fault_nil),
    DLT_TEST(test_fault_zero_fence),
    DLT_TEST(test_fault_bad_status),
    DLT_TEST(test_fault_huge_pttl),
    DLT_TEST(test_fault_partial),
    DLT_TEST(test_fault_not_resp),
    DLT_TEST(test_delay_short_works),
    DLT_TEST(test_hold_lost_in_blackhole),
    DLT_TEST(test_destroy_while_silent),
    DLT_TEST(test_garbage_does_not_desync),
    DLT_TEST(test_duplicate_does_not_desync),
    DLT_TEST(test_duplicate_told_by_time),
    DLT_TEST(test_idle_close_then_unlock),
    DLT_TEST(test_unlock_answer_lost),
    DLT_TEST(test_drift_larger_than_lease),
    DLT_TEST(test_timedlock_deadline_blackhole),
    DLT_TEST(test_list_endless_scan),
    DLT_TEST(test_chaos_two_hosts),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "proxy", tests);
    /* the children of faults whose tests did not run (one test named) */
    for (size_t j = 0; j < NFAULTS; j++)
        if (fault_pid[j] > 0) (void)dlt_wait(fault_pid[j], 0);
    dlt_redis_cleanup(&pw);
    return rc;
}
