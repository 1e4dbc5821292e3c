/* labels: redis */
/* test_badinput.c -- bad input: every public function of dlock.h given NULL,
 * uninitialised (garbage) or destroyed objects, bad names, bad attributes,
 * bad clocks and deadlines, bad URLs and a bad environment returns EINVAL
 * (or the documented code) with a clear dlock_last_error() -- never a crash,
 * never a password in a message, and nothing left allocated (run under
 * ASan with detect_leaks=1).
 *
 * The first test runs with a bad DLOCK_URL before anything has made the
 * default client; keep it first.  Calls that may crash the process (a
 * destroyed or made-up client pointer) run in a child, which reports its
 * result through its exit status.
 */
#include "fixture.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

#define PASSWORD "s3cretPW"

/* ------------------------------------------------------------ helpers */

/* The last error is clear: not empty, starts with the name of the code
 * the call returned ("EINVAL: ..."), and never shows the password. */
static void check_msg(int rc, const char *what) {
    const char *e = dlock_last_error();
    const char *name = dlock_err_name(rc);
    if (e == NULL || e[0] == '\0') {
        fprintf(stderr, "  %s: returned %s, dlock_last_error() is empty\n", what, name);
        CU_FAIL("dlock_last_error() is empty after a failure");
        return;
    }
    if (strncmp(e, name, strlen(name)) != 0 || e[strlen(name)] != ':') {
        fprintf(stderr, "  %s: returned %s, dlock_last_error() says: %s\n", what, name, e);
        CU_FAIL("dlock_last_error() does not name the code returned");
    }
    if (strstr(e, PASSWORD) != NULL) {
        fprintf(stderr, "  %s: dlock_last_error() shows the password: %s\n", what, e);
        CU_FAIL("dlock_last_error() shows the password");
    }
}

/* rc must be want, with a clear message. */
#define EXPECT(call, want)                                                         \
    do {                                                                           \
        int rc_ = (call);                                                          \
        DLT_ASSERT_ERR(rc_, want);                                                 \
        if (rc_ != 0) check_msg(rc_, #call);                                       \
    } while (0)

static struct timespec abs_in(clockid_t clk, long ms) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    } else if (ts.tv_nsec < 0) {
        ts.tv_sec--;
        ts.tv_nsec += 1000000000L;
    }
    return ts;
}

static int no_list_fn(const char *name, const dlock_lock_info_t *info, void *arg) {
    (void)name;
    (void)info;
    (void)arg;
    return 0;
}

static int mk(dlock_mutex_t *m, const char *name, int type, dlock_client_t *c) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if ((rc = dlock_mutexattr_settype(&a, type)) != 0 || (rc = dlock_mutexattr_setclient(&a, c)) != 0) {
        dlock_mutexattr_destroy(&a);
        return rc;
    }
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* A client on the suite's server with short timeouts. */
static dlock_client_t *client(void) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    dlock_config_init(&cfg);
    cfg.url = dlt_server.url;
    cfg.unreachable_ms = 1000;
    if (dlock_client_create(&c, &cfg) != 0) {
        fprintf(stderr, "client_create: %s\n", dlock_last_error());
        return NULL;
    }
    return c;
}

/* Every mutex call on a bad object m gives EINVAL (holds/fence 0, name
 * NULL), quickly and without touching the server. */
static void all_calls_einval(dlock_mutex_t *m, const char *what) {
    struct timespec ts = abs_in(CLOCK_REALTIME, 100), tm = abs_in(CLOCK_MONOTONIC, 100);
    double t0 = dlt_now();
    (void)what;
    EXPECT(dlock_mutex_lock(m), EINVAL);
    EXPECT(dlock_mutex_trylock(m), EINVAL);
    EXPECT(dlock_mutex_timedlock(m, &ts), EINVAL);
    EXPECT(dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &tm), EINVAL);
    EXPECT(dlock_mutex_clocklock(m, CLOCK_REALTIME, &ts), EINVAL);
    EXPECT(dlock_mutex_unlock(m), EINVAL);
    EXPECT(dlock_mutex_consistent(m), EINVAL);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(m), 0);
    CU_ASSERT_PTR_NULL(dlock_mutex_name(m));
    EXPECT(dlock_fenced_set(m, "k", "v", 1), EINVAL);
    EXPECT(dlock_mutex_destroy(m), EINVAL);
    if (dlt_now() - t0 > 0.5) {
        fprintf(stderr, "  %s: the calls on a bad object took %.0f ms\n", what, (dlt_now() - t0) * 1000);
        CU_FAIL("calls on a bad object are not immediate");
    }
}

/* --------------------------------------------- the environment (first) */

static void test_env_bad_url(void) {
    static dlock_mutex_t sm = DLOCK_MUTEX_INITIALIZER("bad/env/static");
    dlock_mutex_t m;
    dlock_lock_info_t info;
    int err = 0;

    setenv("DLOCK_URL", "http://nope", 1);
    EXPECT(dlock_mutex_init(&m, "bad/env", NULL), EINVAL);
    if (strstr(dlock_last_error(), "http") == NULL && strstr(dlock_last_error(), "URL") == NULL)
        fprintf(stderr, "  note: the message does not say the URL is at fault: %s\n", dlock_last_error());
    CU_ASSERT_PTR_NULL(dlock_client_default(&err));
    DLT_ASSERT_ERR(err, EINVAL);
    CU_ASSERT_PTR_NULL(dlock_client_default(NULL)); /* no err pointer: no crash */
    EXPECT(dlock_mutex_lock(&sm), EINVAL);
    EXPECT(dlock_mutex_trylock(&sm), EINVAL);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&sm), 0);
    EXPECT(dlock_break(NULL, "bad/env", DLOCK_BREAK_RESET, NULL), EINVAL);
    EXPECT(dlock_lock_info(NULL, "bad/env", &info), EINVAL);
    EXPECT(dlock_list(NULL, NULL, no_list_fn, NULL), EINVAL);

    /* A bad URL with a password: the message never shows it. */
    setenv("DLOCK_URL", "redis://user:" PASSWORD "@127.0.0.1:0", 1);
    EXPECT(dlock_mutex_init(&m, "bad/env", NULL), EINVAL);
    setenv("DLOCK_URL", "redis://user:" PASSWORD "@127.0.0.1:1?nosuch=1", 1);
    EXPECT(dlock_mutex_init(&m, "bad/env", NULL), EINVAL);

    /* A bad DLOCK_PREFIX with a good URL. */
    setenv("DLOCK_URL", dlt_server.url, 1);
    setenv("DLOCK_PREFIX", "{bad}", 1);
    EXPECT(dlock_mutex_init(&m, "bad/env", NULL), EINVAL);
    EXPECT(dlock_mutex_trylock(&sm), EINVAL);
    unsetenv("DLOCK_PREFIX");

    /* Mended: the default client is made now, and works. */
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "bad/env", NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&sm), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&sm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&sm), 0);
    CU_ASSERT_PTR_NOT_NULL(dlock_client_default(&err));
}

/* ------------------------------------------------------------- errors */

static void test_error_names(void) {
    static const struct {
        int code;
        const char *name;
    } codes[] = {
        { 0, "OK" },
        { EINVAL, "EINVAL" },
        { EBUSY, "EBUSY" },
        { EDEADLK, "EDEADLK" },
        { EPERM, "EPERM" },
        { ETIMEDOUT, "ETIMEDOUT" },
        { ENOLCK, "ENOLCK" },
        { EAGAIN, "EAGAIN" },
        { EOWNERDEAD, "EOWNERDEAD" },
        { ENOTRECOVERABLE, "ENOTRECOVERABLE" },
        { ENOMEM, "ENOMEM" },
        { EPROTO, "EPROTO" },
        { ESTALE, "ESTALE" },
        { EINTR, "EINTR" },
        { ENOTSUP, "ENOTSUP" },
        { ENOENT, "ENOENT" },
        { EOVERFLOW, "EOVERFLOW" },
        { ERANGE, "ERANGE" },
    };
    static const int unknown[] = { -1, -EINVAL, 9999, INT_MIN, INT_MAX, 4096 };
    size_t i;
    for (i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = dlock_strerror(codes[i].code), *n = dlock_err_name(codes[i].code);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        CU_ASSERT_PTR_NOT_NULL_FATAL(n);
        CU_ASSERT(s[0] != '\0');
        CU_ASSERT_STRING_EQUAL(n, codes[i].name);
        CU_ASSERT_STRING_NOT_EQUAL(s, "unknown error");
    }
    for (i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *s = dlock_strerror(unknown[i]), *n = dlock_err_name(unknown[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        CU_ASSERT_PTR_NOT_NULL_FATAL(n);
        CU_ASSERT(s[0] != '\0');
        CU_ASSERT_STRING_EQUAL(n, "UNKNOWN");
    }
    /* "any errno value": a code dlock does not return still has a message */
    CU_ASSERT(dlock_strerror(EINTR)[0] != '\0');
    CU_ASSERT(dlock_strerror(EACCES)[0] != '\0');
    /* The message of a call is per thread and says what went wrong. */
    DLT_ASSERT_ERR(dlock_mutex_lock(NULL), EINVAL);
    CU_ASSERT(strncmp(dlock_last_error(), "EINVAL: ", 8) == 0);
}

/* --------------------------------------------------------- attributes */

static void test_attr_null(void) {
    int v;
    unsigned u;
    dlock_client_t *c;
    dlock_mutexattr_t a;
    EXPECT(dlock_mutexattr_init(NULL), EINVAL);
    EXPECT(dlock_mutexattr_destroy(NULL), EINVAL);
    EXPECT(dlock_mutexattr_settype(NULL, DLOCK_MUTEX_NORMAL), EINVAL);
    EXPECT(dlock_mutexattr_gettype(NULL, &v), EINVAL);
    EXPECT(dlock_mutexattr_setrobust(NULL, DLOCK_MUTEX_ROBUST), EINVAL);
    EXPECT(dlock_mutexattr_getrobust(NULL, &v), EINVAL);
    EXPECT(dlock_mutexattr_setlease(NULL, 1000), EINVAL);
    EXPECT(dlock_mutexattr_getlease(NULL, &u), EINVAL);
    EXPECT(dlock_mutexattr_setlostcallback(NULL, NULL, NULL), EINVAL);
    EXPECT(dlock_mutexattr_setclient(NULL, NULL), EINVAL);
    EXPECT(dlock_mutexattr_getclient(NULL, &c), EINVAL);
    /* NULL out-pointers on a good object */
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    EXPECT(dlock_mutexattr_gettype(&a, NULL), EINVAL);
    EXPECT(dlock_mutexattr_getrobust(&a, NULL), EINVAL);
    EXPECT(dlock_mutexattr_getlease(&a, NULL), EINVAL);
    EXPECT(dlock_mutexattr_getclient(&a, NULL), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
}

static void attr_all_einval(dlock_mutexattr_t *a) {
    int v = -7;
    unsigned u = 7;
    dlock_client_t *c = (dlock_client_t *)&v;
    dlock_mutex_t m;
    EXPECT(dlock_mutexattr_settype(a, DLOCK_MUTEX_NORMAL), EINVAL);
    EXPECT(dlock_mutexattr_gettype(a, &v), EINVAL);
    EXPECT(dlock_mutexattr_setrobust(a, DLOCK_MUTEX_ROBUST), EINVAL);
    EXPECT(dlock_mutexattr_getrobust(a, &v), EINVAL);
    EXPECT(dlock_mutexattr_setlease(a, 1000), EINVAL);
    EXPECT(dlock_mutexattr_getlease(a, &u), EINVAL);
    EXPECT(dlock_mutexattr_setlostcallback(a, NULL, NULL), EINVAL);
    EXPECT(dlock_mutexattr_setclient(a, NULL), EINVAL);
    EXPECT(dlock_mutexattr_getclient(a, &c), EINVAL);
    DLT_ASSERT_INT_EQ(v, -7); /* outputs untouched */
    DLT_ASSERT_INT_EQ(u, 7);
    CU_ASSERT(c == (dlock_client_t *)&v);
    memset(&m, 0x5a, sizeof m);
    EXPECT(dlock_mutex_init(&m, "bad/attr", a), EINVAL);
    EXPECT(dlock_mutexattr_destroy(a), EINVAL);
}

static void test_attr_garbage_and_destroyed(void) {
    static const unsigned char fills[] = { 0x00, 0xa5, 0xff };
    dlock_mutexattr_t a;
    size_t i;
    for (i = 0; i < sizeof fills; i++) {
        memset(&a, fills[i], sizeof a);
        attr_all_einval(&a);
    }
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    attr_all_einval(&a);
    /* init on a destroyed (or garbage) object makes it good again */
    memset(&a, 0xa5, sizeof a);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_settype(&a, DLOCK_MUTEX_RECURSIVE), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
}

static void test_attr_bad_values(void) {
    static const int bad_types[] = { -1, 4, 5, 100, INT_MIN, INT_MAX };
    static const int bad_robust[] = { -1, 2, 3, INT_MIN, INT_MAX };
    static const unsigned bad_leases[] = { 0, 1, DLOCK_LEASE_MIN_MS - 1, DLOCK_LEASE_MAX_MS + 1, UINT_MAX };
    dlock_mutexattr_t a;
    unsigned u;
    int v;
    size_t i;
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    for (i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++)
        EXPECT(dlock_mutexattr_settype(&a, bad_types[i]), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_gettype(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, DLOCK_MUTEX_DEFAULT); /* a refused value changes nothing */
    for (i = 0; i < sizeof bad_robust / sizeof bad_robust[0]; i++)
        EXPECT(dlock_mutexattr_setrobust(&a, bad_robust[i]), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getrobust(&a, &v), 0);
    DLT_ASSERT_INT_EQ(v, DLOCK_MUTEX_STALLED);
    for (i = 0; i < sizeof bad_leases / sizeof bad_leases[0]; i++)
        EXPECT(dlock_mutexattr_setlease(&a, bad_leases[i]), EINVAL);
    DLT_ASSERT_ERR(dlock_mutexattr_getlease(&a, &u), 0);
    DLT_ASSERT_INT_EQ(u, DLOCK_LEASE_DEFAULT_MS);
    /* the bounds themselves are accepted */
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, DLOCK_LEASE_MIN_MS), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, DLOCK_LEASE_MAX_MS), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
}

/* A mutex init that fails allocates nothing: the client it would have
 * used can be destroyed afterwards (no object counted). */
static void test_failed_init_allocates_nothing(void) {
    dlock_client_t *c = client();
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    char big[DLOCK_NAME_MAX + 2];
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    memset(big, 'n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memset(&m, 0x5a, sizeof m);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    EXPECT(dlock_mutex_init(&m, NULL, &a), EINVAL);
    EXPECT(dlock_mutex_init(&m, "", &a), EINVAL);
    EXPECT(dlock_mutex_init(&m, big, &a), EINVAL);
    EXPECT(dlock_mutex_init(NULL, "bad/x", &a), EINVAL);
    all_calls_einval(&m, "after failed inits");
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    EXPECT(dlock_mutex_init(&m, "bad/x", &a), EINVAL); /* destroyed attr */
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* ------------------------------------------------------------ mutexes */

static void test_mutex_null(void) {
    struct timespec ts = abs_in(CLOCK_REALTIME, 100);
    EXPECT(dlock_mutex_init(NULL, "bad/null", NULL), EINVAL);
    EXPECT(dlock_mutex_destroy(NULL), EINVAL);
    EXPECT(dlock_mutex_lock(NULL), EINVAL);
    EXPECT(dlock_mutex_trylock(NULL), EINVAL);
    EXPECT(dlock_mutex_timedlock(NULL, &ts), EINVAL);
    EXPECT(dlock_mutex_timedlock(NULL, NULL), EINVAL);
    EXPECT(dlock_mutex_clocklock(NULL, CLOCK_REALTIME, &ts), EINVAL);
    EXPECT(dlock_mutex_unlock(NULL), EINVAL);
    EXPECT(dlock_mutex_consistent(NULL), EINVAL);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(NULL), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_fence(NULL), 0);
    CU_ASSERT_PTR_NULL(dlock_mutex_name(NULL));
    EXPECT(dlock_fenced_set(NULL, "k", "v", 1), EINVAL);
    EXPECT(dlock_fenced_set(NULL, NULL, NULL, 0), EINVAL);
}

static void test_mutex_garbage(void) {
    static const unsigned char fills[] = { 0x00, 0xa5, 0xff, 0x01 };
    dlock_mutex_t m;
    size_t i;
    for (i = 0; i < sizeof fills; i++) {
        memset(&m, fills[i], sizeof m);
        all_calls_einval(&m, "garbage mutex");
    }
}

/* A live mutex copied elsewhere (as a struct assignment would) is not a
 * mutex; the original stays good. */
static void test_mutex_copied(void) {
    dlock_client_t *c = client();
    dlock_mutex_t m, copy;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    DLT_ASSERT_ERR(mk(&m, "bad/copied", DLOCK_MUTEX_ERRORCHECK, c), 0);
    memcpy(&copy, &m, sizeof m);
    all_calls_einval(&copy, "copied mutex");
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&copy), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

static void test_mutex_destroyed(void) {
    dlock_client_t *c = client();
    static dlock_mutex_t s1 = DLOCK_MUTEX_INITIALIZER("bad/static/unused");
    static dlock_mutex_t s2 = DLOCK_MUTEX_INITIALIZER("bad/static/used");
    dlock_mutex_t m;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);

    DLT_ASSERT_ERR(mk(&m, "bad/destroyed", DLOCK_MUTEX_ERRORCHECK, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    EXPECT(dlock_mutex_destroy(&m), EBUSY); /* held: not destroyed */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    all_calls_einval(&m, "destroyed mutex");
    /* the object can be initialised again */
    DLT_ASSERT_ERR(mk(&m, "bad/destroyed", DLOCK_MUTEX_ERRORCHECK, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);

    /* static initialisers, destroyed unused and used */
    DLT_ASSERT_ERR(dlock_mutex_destroy(&s1), 0);
    all_calls_einval(&s1, "destroyed static mutex (unused)");
    DLT_ASSERT_ERR(dlock_mutex_trylock(&s2), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&s2), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&s2), 0);
    all_calls_einval(&s2, "destroyed static mutex (used)");
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* The handle check every kind of object shares: a byte copy, a destroyed
 * object and NULL give EINVAL with a message that names the kind, and the
 * original stays good. */
static void expect_bad_handle(int rc, const char *kind) {
    DLT_ASSERT_ERR(rc, EINVAL);
    if (strstr(dlock_last_error(), kind) == NULL) {
        fprintf(stderr, "  message '%s' does not name the %s\n", dlock_last_error(), kind);
        CU_FAIL("a bad handle's message does not name its kind");
    }
}

static void test_handles_every_kind(void) {
    dlock_client_t *c = client();
    dlock_mutexattr_t a;
    dlock_semattr_t sa;
    dlock_mutex_t m, mc;
    dlock_rwlock_t rw, rwc;
    dlock_cond_t cv, cvc;
    dlock_sem_t s, sc;
    int v = -1;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_semattr_init(&sa), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&sa, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_init(&m, "bad/kinds/m", &a), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rw, "bad/kinds/rw", &a), 0);
    DLT_ASSERT_ERR(dlock_cond_init_client(&cv, "bad/kinds/cv", c), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "bad/kinds/s", 1, &sa), 0);
    memcpy(&mc, &m, sizeof m);
    memcpy(&rwc, &rw, sizeof rw);
    memcpy(&cvc, &cv, sizeof cv);
    memcpy(&sc, &s, sizeof s);
    expect_bad_handle(dlock_mutex_trylock(&mc), "mutex");
    expect_bad_handle(dlock_rwlock_tryrdlock(&rwc), "rwlock");
    expect_bad_handle(dlock_cond_signal(&cvc), "condition variable");
    expect_bad_handle(dlock_sem_trywait(&sc), "semaphore");
    expect_bad_handle(dlock_mutex_trylock(NULL), "mutex");
    expect_bad_handle(dlock_rwlock_tryrdlock(NULL), "rwlock");
    expect_bad_handle(dlock_cond_signal(NULL), "condition variable");
    expect_bad_handle(dlock_sem_trywait(NULL), "semaphore");
    /* the originals are good */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
    DLT_ASSERT_ERR(dlock_cond_signal(&cv), 0);
    DLT_ASSERT_ERR(dlock_sem_getvalue(&s, &v), 0);
    DLT_ASSERT_INT_EQ(v, 1);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&cv), 0);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    expect_bad_handle(dlock_mutex_trylock(&m), "mutex");
    expect_bad_handle(dlock_rwlock_tryrdlock(&rw), "rwlock");
    expect_bad_handle(dlock_cond_signal(&cv), "condition variable");
    expect_bad_handle(dlock_sem_trywait(&s), "semaphore");
    DLT_ASSERT_ERR(dlock_semattr_destroy(&sa), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_destroy(&a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* Wrong-state calls on a good object. */
static void *other_unlock(void *m) {
    return (void *)(intptr_t)dlock_mutex_unlock(m);
}

static void test_mutex_wrong_state(void) {
    dlock_client_t *c = client();
    dlock_mutex_t m;
    pthread_t th;
    void *res;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    DLT_ASSERT_ERR(mk(&m, "bad/state", DLOCK_MUTEX_ERRORCHECK, c), 0);
    EXPECT(dlock_mutex_unlock(&m), EPERM);
    EXPECT(dlock_mutex_consistent(&m), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    EXPECT(dlock_mutex_lock(&m), EDEADLK);
    EXPECT(dlock_mutex_trylock(&m), EBUSY);
    EXPECT(dlock_mutex_consistent(&m), EINVAL); /* not robust, not inconsistent */
    pthread_create(&th, NULL, other_unlock, &m);
    pthread_join(th, &res);
    DLT_ASSERT_ERR((int)(intptr_t)res, EPERM); /* another thread cannot unlock it */
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    EXPECT(dlock_client_destroy(c), EBUSY); /* a mutex still uses it */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    EXPECT(dlock_mutex_unlock(&m), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* -------------------------------------------------------------- names */

static void test_bad_names(void) {
    dlock_client_t *c = client();
    dlock_mutex_t m;
    char big[DLOCK_NAME_MAX + 2], max[DLOCK_NAME_MAX + 1], bin[256];
    int i, was = -1;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);

    memset(big, 'b', DLOCK_NAME_MAX + 1);
    big[DLOCK_NAME_MAX + 1] = '\0';
    memset(max, 'm', DLOCK_NAME_MAX);
    max[DLOCK_NAME_MAX] = '\0';
    EXPECT(mk(&m, NULL, DLOCK_MUTEX_DEFAULT, c), EINVAL);
    EXPECT(mk(&m, "", DLOCK_MUTEX_DEFAULT, c), EINVAL);
    EXPECT(mk(&m, big, DLOCK_MUTEX_DEFAULT, c), EINVAL);
    EXPECT(dlock_break(c, NULL, DLOCK_BREAK_RESET, &was), EINVAL);
    EXPECT(dlock_break(c, "", DLOCK_BREAK_RESET, &was), EINVAL);
    EXPECT(dlock_break(c, big, DLOCK_BREAK_RESET, &was), EINVAL);
    DLT_ASSERT_INT_EQ(was, -1); /* untouched on error */

    /* static initialisers with a bad name fail on first use, cleanly */
    {
        static char bigname[DLOCK_NAME_MAX + 2];
        dlock_mutex_t s_null = DLOCK_MUTEX_INITIALIZER(NULL);
        dlock_mutex_t s_empty = DLOCK_MUTEX_INITIALIZER("");
        dlock_mutex_t s_big = DLOCK_MUTEX_INITIALIZER(bigname);
        memset(bigname, 'b', DLOCK_NAME_MAX + 1);
        EXPECT(dlock_mutex_lock(&s_null), EINVAL);
        EXPECT(dlock_mutex_trylock(&s_empty), EINVAL);
        EXPECT(dlock_mutex_trylock(&s_big), EINVAL);
        CU_ASSERT_PTR_NULL(dlock_mutex_name(&s_null));
        DLT_ASSERT_INT_EQ(dlock_mutex_holds(&s_big), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&s_null), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&s_empty), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&s_big), 0);
    }

    /* 512 bytes is fine, and so is any byte but NUL */
    DLT_ASSERT_ERR(mk(&m, max, DLOCK_MUTEX_DEFAULT, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    CU_ASSERT(dlock_mutex_name(&m) != NULL && strcmp(dlock_mutex_name(&m), max) == 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    for (i = 0; i < 255; i++) bin[i] = (char)(255 - i); /* 0xff .. 0x01 */
    bin[255] = '\0';
    DLT_ASSERT_ERR(mk(&m, bin, DLOCK_MUTEX_DEFAULT, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    /* Names that look like RESP, Lua, globs or hash tags are data. */
    {
        static const char *const odd[] = { "*3\r\n$3\r\nDEL\r\n", "{x}", "}{", "a'); redis.call('FLUSHALL", "*",
                                           "?", "[", "\\", "%s%n%s", "\n", " " };
        dlock_mutex_t m1, m2;
        size_t k;
        DLT_ASSERT_ERR(mk(&m2, "bad/odd/other", DLOCK_MUTEX_DEFAULT, c), 0);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), 0);
        for (k = 0; k < sizeof odd / sizeof odd[0]; k++) {
            DLT_ASSERT_ERR(mk(&m1, odd[k], DLOCK_MUTEX_DEFAULT, c), 0);
            DLT_ASSERT_ERR(dlock_mutex_trylock(&m1), 0);
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
            DLT_ASSERT_ERR(dlock_break(c, odd[k], DLOCK_BREAK_RESET, NULL), 0);
            DLT_ASSERT_ERR(dlock_mutex_destroy(&m1), 0);
        }
        DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m2), 1); /* nothing touched the other lock */
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* ------------------------------------------------- clocks and abstime */

struct holder {
    dlock_mutex_t *m;
    int fd_go[2], fd_done[2];
};

static void *hold_until_told(void *p) {
    struct holder *h = p;
    char ch = 0;
    int rc = dlock_mutex_lock(h->m);
    (void)!write(h->fd_done[1], &ch, 1);
    (void)!read(h->fd_go[0], &ch, 1);
    if (rc == 0) dlock_mutex_unlock(h->m);
    return NULL;
}

static void test_bad_clocks(void) {
    static const clockid_t bad_clocks[] = { CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID, (clockid_t)-1,
                                            (clockid_t)12345, CLOCK_MONOTONIC_RAW };
    static const long bad_nsec[] = { -1, 1000000000L, LONG_MAX, LONG_MIN };
    dlock_client_t *c = client();
    dlock_mutex_t m, n, o;
    struct timespec ts = abs_in(CLOCK_REALTIME, 200);
    struct holder h;
    pthread_t th;
    size_t i;
    double t0;
    char ch = 1;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    DLT_ASSERT_ERR(mk(&m, "bad/clock", DLOCK_MUTEX_ERRORCHECK, c), 0);

    for (i = 0; i < sizeof bad_clocks / sizeof bad_clocks[0]; i++)
        EXPECT(dlock_mutex_clocklock(&m, bad_clocks[i], &ts), EINVAL);
    EXPECT(dlock_mutex_timedlock(&m, NULL), EINVAL);
    EXPECT(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, NULL), EINVAL);
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);

    /* A bad tv_nsec matters only when the call would wait: a free lock
     * is acquired (as POSIX allows) ... */
    for (i = 0; i < sizeof bad_nsec / sizeof bad_nsec[0]; i++) {
        struct timespec b = abs_in(CLOCK_REALTIME, 0);
        b.tv_nsec = bad_nsec[i];
        DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &b), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    /* ... a past or negative abstime still acquires a free lock ... */
    {
        struct timespec past = { -5, 0 }, zero = { 0, 0 };
        struct timespec far = { (time_t)LLONG_MAX, 999999999L };
        DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &past), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &zero), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_timedlock(&m, &far), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &far), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    /* ... and on a lock another thread holds, bad tv_nsec is EINVAL at
     * once, and a past abstime ETIMEDOUT at once. */
    DLT_ASSERT_ERR(mk(&n, "bad/clock", DLOCK_MUTEX_ERRORCHECK, c), 0);
    h.m = &n;
    CU_ASSERT_FATAL(pipe(h.fd_go) == 0 && pipe(h.fd_done) == 0);
    pthread_create(&th, NULL, hold_until_told, &h);
    (void)!read(h.fd_done[0], &ch, 1);
    for (i = 0; i < sizeof bad_nsec / sizeof bad_nsec[0]; i++) {
        struct timespec b = abs_in(CLOCK_REALTIME, 1000);
        b.tv_nsec = bad_nsec[i];
        t0 = dlt_now();
        EXPECT(dlock_mutex_timedlock(&m, &b), EINVAL);
        b = abs_in(CLOCK_MONOTONIC, 1000);
        b.tv_nsec = bad_nsec[i];
        EXPECT(dlock_mutex_clocklock(&m, CLOCK_MONOTONIC, &b), EINVAL);
        CU_ASSERT(dlt_now() - t0 < 0.5);
    }
    {
        struct timespec past = { -5, 0 };
        t0 = dlt_now();
        EXPECT(dlock_mutex_timedlock(&m, &past), ETIMEDOUT);
        CU_ASSERT(dlt_now() - t0 < 0.5);
    }
    DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
    (void)!write(h.fd_go[1], &ch, 1);
    pthread_join(th, NULL);
    close(h.fd_go[0]);
    close(h.fd_go[1]);
    close(h.fd_done[0]);
    close(h.fd_done[1]);

    /* A NORMAL mutex the caller holds: a relock would deadlock, so a bad
     * tv_nsec is EINVAL and a near deadline ETIMEDOUT; ERRORCHECK says
     * EDEADLK whatever the abstime. */
    DLT_ASSERT_ERR(mk(&o, "bad/clock/normal", DLOCK_MUTEX_NORMAL, c), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&o), 0);
    {
        struct timespec b = abs_in(CLOCK_REALTIME, 1000);
        b.tv_nsec = -1;
        EXPECT(dlock_mutex_timedlock(&o, &b), EINVAL);
        b = abs_in(CLOCK_REALTIME, 100);
        EXPECT(dlock_mutex_timedlock(&o, &b), ETIMEDOUT);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&o), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    {
        struct timespec b = abs_in(CLOCK_REALTIME, 1000);
        b.tv_nsec = -1;
        EXPECT(dlock_mutex_timedlock(&m, &b), EDEADLK);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&o), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&n), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* --------------------------------------------------- fenced_set, break */

static void test_fenced_set_bad(void) {
    dlock_client_t *c = client();
    dlock_mutex_t m;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    DLT_ASSERT_ERR(mk(&m, "bad/fenced", DLOCK_MUTEX_ERRORCHECK, c), 0);
    EXPECT(dlock_fenced_set(&m, "bad/data", "v", 1), EPERM);
    EXPECT(dlock_fenced_set(&m, NULL, "v", 1), EINVAL);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    EXPECT(dlock_fenced_set(&m, NULL, "v", 1), EINVAL);
    EXPECT(dlock_fenced_set(&m, "", "v", 1), EINVAL);
    EXPECT(dlock_fenced_set(&m, "bad/data", NULL, 5), EINVAL);
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "bad/data", NULL, 0), 0); /* an empty value */
    DLT_ASSERT_ERR(dlock_fenced_set(&m, "bad/data", "\0\r\n*1", 5), 0); /* binary value */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    EXPECT(dlock_fenced_set(&m, "bad/data", "v", 1), EPERM);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

static void test_break_and_admin_bad(void) {
    static const int bad_how[] = { -1, 2, 3, 99, INT_MIN, INT_MAX };
    dlock_client_t *c = client();
    dlock_lock_info_t info;
    size_t i;
    int was = -1;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    for (i = 0; i < sizeof bad_how / sizeof bad_how[0]; i++) {
        EXPECT(dlock_break(c, "bad/break", bad_how[i], &was), EINVAL);
        EXPECT(dlock_break(NULL, "bad/break", bad_how[i], NULL), EINVAL);
    }
    EXPECT(dlock_break(NULL, NULL, DLOCK_BREAK_OWNERDEAD, NULL), EINVAL);
    DLT_ASSERT_INT_EQ(was, -1);
    DLT_ASSERT_ERR(dlock_break(c, "bad/break", DLOCK_BREAK_OWNERDEAD, &was), 0);
    DLT_ASSERT_INT_EQ(was, 0);
    DLT_ASSERT_ERR(dlock_break(c, "bad/break", DLOCK_BREAK_RESET, NULL), 0);

    EXPECT(dlock_lock_info(c, "bad/info", NULL), EINVAL);
    EXPECT(dlock_lock_info(c, NULL, &info), EINVAL);
    EXPECT(dlock_lock_info(c, "", &info), EINVAL);
    DLT_ASSERT_ERR(dlock_lock_info(c, "bad/info", &info), 0);
    DLT_ASSERT_INT_EQ(info.held, 0);
    EXPECT(dlock_list(c, "*", NULL, NULL), EINVAL);
    {
        static const char *const globs[] = { "[", "\\", "[]]", "[!", "**********", "", "*{*" };
        for (i = 0; i < sizeof globs / sizeof globs[0]; i++)
            DLT_ASSERT_ERR(dlock_list(c, globs[i], no_list_fn, NULL), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* ------------------------------------------------------------ clients */

static void test_client_bad(void) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL, *d;
    char fake[512], prefix[200];
    int err = 0;

    dlock_config_init(NULL); /* no crash */
    dlock_config_init(&cfg);
    cfg.url = dlt_server.url;
    EXPECT(dlock_client_create(NULL, &cfg), EINVAL);
    EXPECT(dlock_client_create(NULL, NULL), EINVAL);
    EXPECT(dlock_client_destroy(NULL), EINVAL);
    memset(fake, 0xa5, sizeof fake);
    EXPECT(dlock_client_destroy((dlock_client_t *)fake), EINVAL);
    EXPECT(dlock_client_destroy(dlock_client_default(&err)), EBUSY);

    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    d = c;
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    EXPECT(dlock_client_destroy(d), EINVAL); /* destroyed twice */

    /* bad prefixes */
    cfg.prefix = "{bad";
    c = (dlock_client_t *)fake;
    EXPECT(dlock_client_create(&c, &cfg), EINVAL);
    CU_ASSERT_PTR_NULL(c);
    cfg.prefix = "bad}";
    EXPECT(dlock_client_create(&c, &cfg), EINVAL);
    memset(prefix, 'p', 129);
    prefix[129] = '\0';
    cfg.prefix = prefix;
    EXPECT(dlock_client_create(&c, &cfg), EINVAL);
    prefix[128] = '\0';
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

/* --------------------------------------------------------------- URLs */

static void url_einval(const char *url) {
    dlock_config_t cfg;
    dlock_client_t *c = (dlock_client_t *)&cfg;
    int rc;
    char what[160];
    dlock_config_init(&cfg);
    cfg.url = url;
    rc = dlock_client_create(&c, &cfg);
    snprintf(what, sizeof what, "URL \"%.100s%s\"", url, strlen(url) > 100 ? "..." : "");
    if (rc != EINVAL) {
        fprintf(stderr, "  %s: dlock_client_create returned %s, want EINVAL\n", what, dlock_err_name(rc));
        CU_FAIL("a bad URL was not refused with EINVAL");
    } else {
        check_msg(rc, what);
        CU_PASS("refused");
    }
    if (rc == 0 && c != NULL) dlock_client_destroy(c);
    else CU_ASSERT_PTR_NULL(c);
}

static void test_bad_urls(void) {
    static const char *const bad[] = {
        "", "http://x", "redis://", "redis://host:0", "redis://host:99999", "redis://[::1",
        "redis://h:1/notanumber", "redis://h:1?nosuch=1", "redis://h:1?unreachable_ms=0",
        "redis://h:1?prefix=%7Bbad%7D", "redis://user:pa%zzss@h:1", "rediss://h:1?tls_verify=2", "rediss://h:1?cacert=/x",
        "rediss://h:1?tls_cert_file=/c", "redis://h:1?tls_ca_file=/ca", "redis+sentinel://h:1",
        "redis+sentinel://h:1/", "redis+sentinel://h:1,/m", "redis+sentinel://h:0/m", "redis://h1:1,h2:2",
        "redlock://h1:1", "redlock://h1:1,h2:2,h3:3/m", "redlock://h1:1,,h3:3", "redis+sentinel://h:1/m b", "redis+cluster://h:1/1", "redis+cluster://h:1/m",
        "rediss+sentinel://h:1", "redis+sentinel://h:1/m?cacert=/ca", "redis+cluster://h:1?cacert=/ca",
        "rediss+cluster://h:1?tls_verify=x", "rediss+redlock://h:1,h:1",
        "redis:/h:1", "redis:h:1", "//h:1", "h:1", "redis://h:", "redis://h:-1",
        "redis://h:1:2", "redis://h:65536", "redis://h:00000000001", "redis://h:1/-1", "redis://h:1/1x",
        "redis://h:1?=", "redis://h:1?prefix", "redis://h:1?&", "redis://h:1?connect_timeout_ms=",
        "redis://h:1?connect_timeout_ms=abc", "redis://h:1?connect_timeout_ms=99999999999",
        "redis://h:1?command_timeout_ms=-5", "redis://h:1?wait_conns=1025", "redis://h:1?wait_conns=x",
        "redis://h:1?command_timeout_ms=0", "redis://h:1?prefix=%", "redis://h:1?prefix=%0", "redis://h:1?prefix=%00",
        "redis://h :1", "redis://h/x:1", "redis://[]:1", "redis://:1", "redis://@:1", "redis://h%41:1",
        "redis://user:pw%@h:1", "redis://us%zzer:pw@h:1",
    };
    static char longurl[5001], longhost[400];
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) url_einval(bad[i]);
    memcpy(longurl, "redis://", 8);
    memset(longurl + 8, 'a', sizeof longurl - 9);
    longurl[sizeof longurl - 1] = '\0';
    url_einval(longurl);
    snprintf(longhost, sizeof longhost, "redis://%0300d:1", 0);
    url_einval(longhost);
}

/* Every URL that carries the password and is refused: the message must
 * not show it, however the URL is wrong. */
static void test_url_password_never_shown(void) {
    static const char *const bad[] = {
        "redis://user:" PASSWORD "@h:0",
        "redis://user:" PASSWORD "@h:99999",
        "redis://user:" PASSWORD "@[::1",
        "redis://user:" PASSWORD "@h:1/notanumber",
        "redis://user:" PASSWORD "@h:1?nosuch=1",
        "redis://user:" PASSWORD "@h:1?prefix=%7Bbad%7D",
        "redis://user:" PASSWORD "%zz@h:1",
        "redis://:" PASSWORD "@",
        "redis://:" PASSWORD "@:1",
        "rediss://user:" PASSWORD "@h:1?tls_key_file=/k",
        "redis+sentinel://user:" PASSWORD "@h:1",
        "redlock://user:" PASSWORD "@h1:1",
        "http://user:" PASSWORD "@h",
        /* a password with a character that should have been escaped */
        "redis://user:" PASSWORD "/x@h:1",
        "redis://user:" PASSWORD "?x@h:1",
        "redis://user:" PASSWORD "#x@h:0",
        "redis://user:" PASSWORD ":x@h:0",
        "redis://user:" PASSWORD "@x@h:0",
    };
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) url_einval(bad[i]);
}

/* The password never shows in runtime errors either: a server that
 * cannot be reached, and one that refuses the credentials. */
static void test_password_not_in_runtime_errors(void) {
    char url[200];
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    int rc;

    dlock_config_init(&cfg);
    cfg.connect_timeout_ms = 100;
    cfg.command_timeout_ms = 200;
    cfg.unreachable_ms = 300;
    /* nothing listens on port 1 */
    cfg.url = "redis://user:" PASSWORD "@127.0.0.1:1";
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    DLT_ASSERT_ERR(mk(&m, "bad/pw", DLOCK_MUTEX_ERRORCHECK, c), 0);
    rc = dlock_mutex_trylock(&m);
    DLT_ASSERT_ERR(rc, ENOLCK);
    check_msg(rc, "trylock, server unreachable");
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);

    /* The suite's server has no password and no such user: AUTH is
     * refused (AUTH pw: "no password configured"; AUTH user pw:
     * WRONGPASS).  (AUTH default pw would be accepted: nopass.) */
    {
        static const char *const users[] = { "", "nosuchuser" };
        size_t i;
        for (i = 0; i < sizeof users / sizeof users[0]; i++) {
            snprintf(url, sizeof url, "redis://%s:%s@127.0.0.1:%d", users[i], PASSWORD, dlt_server.port);
            cfg.url = url;
            DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
            DLT_ASSERT_ERR(mk(&m, "bad/pw", DLOCK_MUTEX_ERRORCHECK, c), 0);
            rc = dlock_mutex_trylock(&m);
            DLT_ASSERT_ERR(rc, ENOLCK);
            if (rc != 0) check_msg(rc, users[i][0] ? "trylock, AUTH user refused" : "trylock, AUTH refused");
            DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
            if (rc == 0) dlock_mutex_unlock(&m);
            DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
            DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
        }
    }
}

/* ----------------------------------------- bad client pointers (child) */

/* Runs fn in a child: its exit status is the code the call returned
 * (a crash shows as 128 + signal, a hang as -1). */
static int in_child(int (*fn)(void *), void *arg) {
    pid_t pid = dlt_spawn(fn, arg);
    if (pid < 0) return -2;
    return dlt_wait(pid, 10000);
}

static dlock_client_t *destroyed_client(void) {
    dlock_client_t *c = client();
    if (c != NULL) dlock_client_destroy(c);
    return c;
}

static int child_init_destroyed_client(void *arg) {
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    int rc;
    (void)arg;
    dlock_mutexattr_init(&a);
    rc = dlock_mutexattr_setclient(&a, destroyed_client());
    if (rc == 0) rc = dlock_mutex_init(&m, "bad/client", &a);
    return rc;
}

static int child_init_fake_client(void *arg) {
    static char fake[4096];
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    int rc;
    (void)arg;
    memset(fake, 0xa5, sizeof fake);
    dlock_mutexattr_init(&a);
    rc = dlock_mutexattr_setclient(&a, (dlock_client_t *)fake);
    if (rc == 0) rc = dlock_mutex_init(&m, "bad/client", &a);
    return rc;
}

static int child_break_destroyed_client(void *arg) {
    (void)arg;
    return dlock_break(destroyed_client(), "bad/client", DLOCK_BREAK_RESET, NULL);
}

static int child_info_destroyed_client(void *arg) {
    dlock_lock_info_t info;
    (void)arg;
    return dlock_lock_info(destroyed_client(), "bad/client", &info);
}

static int child_list_destroyed_client(void *arg) {
    (void)arg;
    return dlock_list(destroyed_client(), "*", no_list_fn, NULL);
}

static void test_bad_client_pointers(void) {
    static const struct {
        const char *what;
        int (*fn)(void *);
    } cases[] = {
        { "mutex_init with an attr naming a destroyed client", child_init_destroyed_client },
        { "mutex_init with an attr naming a made-up client", child_init_fake_client },
        { "dlock_break on a destroyed client", child_break_destroyed_client },
        { "dlock_lock_info on a destroyed client", child_info_destroyed_client },
        { "dlock_list on a destroyed client", child_list_destroyed_client },
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = in_child(cases[i].fn, NULL);
        if (st != EINVAL) {
            fprintf(stderr, "  %s: child %s %d, want exit EINVAL (%d)\n", cases[i].what,
                    st > 128 ? "died of signal" : st < 0 ? "hung or failed" : "exited", st > 128 ? st - 128 : st,
                    EINVAL);
            CU_FAIL("a bad client pointer is not refused with EINVAL");
        }
    }
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_env_bad_url), /* first: before anything makes the default client */
    DLT_TEST(test_error_names),
    DLT_TEST(test_attr_null),
    DLT_TEST(test_attr_garbage_and_destroyed),
    DLT_TEST(test_attr_bad_values),
    DLT_TEST(test_failed_init_allocates_nothing),
    DLT_TEST(test_mutex_null),
    DLT_TEST(test_mutex_garbage),
    DLT_TEST(test_mutex_copied),
    DLT_TEST(test_mutex_destroyed),
    DLT_TEST(test_handles_every_kind),
    DLT_TEST(test_mutex_wrong_state),
    DLT_TEST(test_bad_names),
    DLT_TEST(test_bad_clocks),
    DLT_TEST(test_fenced_set_bad),
    DLT_TEST(test_break_and_admin_bad),
    DLT_TEST(test_client_bad),
    DLT_TEST(test_bad_urls),
    DLT_TEST(test_url_password_never_shown),
    DLT_TEST(test_password_not_in_runtime_errors),
    DLT_TEST(test_bad_client_pointers),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "badinput", tests);
}
