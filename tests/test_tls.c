/* labels: redis; timeout: 150 */
/* test_tls.c -- rediss://: dlock over TLS-only servers.
 *
 * The test's PKI is the fixture's (dlt_tls_dir, made with dlt_tls_certs
 * and the openssl command, which scripts/deps installs): a CA, a server
 * certificate for localhost / 127.0.0.1 and a client certificate signed
 * by it, and a second, unrelated CA (with a client certificate of its
 * own).  Its redis-servers are the fixture's TLS-only ones
 * (dlt_tls_server_start, fixture_multi.h: "port 0", "tls-port P", some
 * with a password and an ACL user): they speak nothing but TLS, so every
 * connection dlock makes to them -- commands, renewals, the subscriber
 * that carries release notifications -- is a TLS one.  The fixture kills
 * them by pid, at the end of each test and at exit, whatever ends it.
 *
 * The suite's own plain server (dlt_server, DLOCK_URL) is not used for
 * locks here, except to show that a TLS lock never lands on it.
 */
#define DLT_CK_MOD 120
#include "fixture_multi.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlock.h>

#define USER "dlockuser"
#define PASSWORD "tls-s3cret-pw"        /* the ACL user's */
#define DEFAULT_PASSWORD "tls-default-pw" /* requirepass: the default user's */
#define WRONG_PASSWORD "wr0ng-tls-pw"

/* ======================================================================
 * The certificates and the servers
 * ==================================================================== */

static const char *certdir; /* dlt_tls_dir() */
static int setup_state;     /* 0 not yet, 1 ready, -1 failed */

/* Files in certdir. */
static char ca_crt[320], ca2_crt[320], ca2_key[320];
static char cli_crt[320], cli_key[320], cli2_crt[320], cli2_key[320];

/* The TLS-only servers (fixture_multi.h): main, the suite's; auth, with
 * tls-auth-clients yes; pw, with the ACL user USER/PASSWORD and
 * requirepass DEFAULT_PASSWORD; crash, the one killed mid-use. */
static dlt_redis srv_main, srv_auth, srv_pw, srv_crash;

static void path_in(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", certdir, name);
}

/* The certificates and the main server, once: 1 if ready. */
static int setup(void) {
    if (setup_state != 0) return setup_state > 0;
    setup_state = -1;
    if ((certdir = dlt_tls_dir()) == NULL) return 0;
    path_in(ca_crt, sizeof ca_crt, "ca.crt");
    path_in(ca2_crt, sizeof ca2_crt, "ca2.crt");
    path_in(ca2_key, sizeof ca2_key, "ca2.key");
    path_in(cli_crt, sizeof cli_crt, "client.crt");
    path_in(cli_key, sizeof cli_key, "client.key");
    path_in(cli2_crt, sizeof cli2_crt, "client2.crt");
    path_in(cli2_key, sizeof cli2_key, "client2.key");
    if (dlt_tls_server_start(&srv_main, 0, NULL, NULL, NULL) != 0) return 0;
    printf("test_tls: TLS-only redis-server %d on 127.0.0.1:%d, folder %s, certificates %s\n", (int)srv_main.pid,
           srv_main.port, srv_main.dir, certdir);
    setup_state = 1;
    return 1;
}

#define NEED_SETUP() CU_ASSERT_FATAL(setup())

/* ======================================================================
 * Helpers
 * ==================================================================== */

/* "tls_ca_file=CA" and friends, for queries. */
static void q_ca(char *out, size_t n) {
    snprintf(out, n, "tls_ca_file=%s", ca_crt);
}

static int mutex_on(dlock_mutex_t *m, const char *name, dlock_client_t *cl, int fair, int caching,
                    unsigned lease_ms) {
    dlock_mutexattr_t a;
    int rc;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, cl);
    dlock_mutexattr_setfair(&a, fair);
    dlock_mutexattr_setcaching(&a, caching);
    if (lease_ms) dlock_mutexattr_setlease(&a, lease_ms);
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static int has(const char *hay, const char *needle) {
    return hay != NULL && strstr(hay, needle) != NULL;
}

/* A trylock through url (a fresh client, unreachable after unreachable_ms)
 * on name: its result, with the message in msg.  A lock it got is given
 * back.  *created: dlock_client_create's result. */
static int try_through(const char *url, const char *name, unsigned unreachable_ms, char *msg,
                       size_t msglen, int *created) {
    dlock_client_t *cl;
    dlock_mutex_t m;
    int rc = dlt_client_make(&cl, url, unreachable_ms);
    *created = rc;
    snprintf(msg, msglen, "%s", rc ? dlock_last_error() : "");
    if (rc != 0) return rc;
    if ((rc = mutex_on(&m, name, cl, 0, 0, 0)) == 0) {
        rc = dlock_mutex_trylock(&m);
        snprintf(msg, msglen, "%s", rc ? dlock_last_error() : "");
        if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    }
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    return rc;
}

/* The client is made, the trylock fails with ENOLCK, the message contains
 * want (unless NULL) and never forbidden (unless NULL). */
static void refused(const char *what, const char *url, const char *name, const char *want,
                    const char *forbidden) {
    char msg[1024];
    int created;
    int rc = try_through(url, name, 1000, msg, sizeof msg, &created);
    printf("  %s: %s\n", what, msg);
    DLT_ASSERT_ERR(created, 0);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "://")); /* it names the server */
    if (want != NULL && !has(msg, want)) {
        fprintf(stderr, "  %s: the message lacks \"%s\": %s\n", what, want, msg);
        CU_FAIL("message lacks the expected reason");
    }
    if (forbidden != NULL) CU_ASSERT_FALSE(has(msg, forbidden));
}

/* dlock_client_create(url) fails with EINVAL; the message never shows
 * forbidden (unless NULL). */
static void invalid(const char *what, const char *url, const char *forbidden) {
    dlock_client_t *cl = NULL;
    int rc = dlt_client_make(&cl, url, 1000);
    printf("  %s: %s\n", what, rc ? dlock_last_error() : "(accepted)");
    DLT_ASSERT_ERR(rc, EINVAL);
    if (rc == 0) dlock_client_destroy(cl);
    else if (forbidden != NULL) CU_ASSERT_FALSE(has(dlock_last_error(), forbidden));
}

/* Who holds name, as the server behind cl says: the holder's pid, 0 if
 * free, -1 if the call failed. */
static long holder_pid(dlock_client_t *cl, const char *name) {
    dlock_lock_info_t info;
    if (dlock_lock_info(cl, name, &info) != 0) return -1;
    return info.held ? info.pid : 0;
}

/* ======================================================================
 * 1. The core calls over TLS
 * ==================================================================== */

static void core_calls(const char *host) {
    char url[1200], q[400], name[64];
    dlock_client_t *a, *b;
    dlock_mutex_t ma, mb;
    struct timespec ts;

    q_ca(q, sizeof q);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, host, q);
    snprintf(name, sizeof name, "tls/core-%s", host);
    DLT_ASSERT_ERR(dlt_client_make(&a, url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&b, url, 5000), 0);
    DLT_ASSERT_ERR(mutex_on(&ma, name, a, 0, 0, 0), 0);
    DLT_ASSERT_ERR(mutex_on(&mb, name, b, 0, 0, 0), 0);

    DLT_ASSERT_ERR(dlock_mutex_lock(&ma), 0);
    DLT_ASSERT_INT_EQ(holder_pid(b, name), (long)getpid());
    DLT_ASSERT_INT_EQ(dlt_key_exists(name), 0); /* on the TLS server, not the plain one */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&mb), EBUSY);
    ts = dlt_abs_in(CLOCK_REALTIME, 200);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&mb, &ts), ETIMEDOUT);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
    DLT_ASSERT_INT_EQ(holder_pid(a, name), 0);

    DLT_ASSERT_ERR(dlock_mutex_trylock(&mb), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&ma), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mb), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&ma, &ts), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), EPERM); /* not held any more */

    DLT_ASSERT_ERR(dlock_mutex_destroy(&ma), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(b), 0);
}

/* lock, trylock, timedlock, unlock through rediss://127.0.0.1 (the
 * certificate's IP SAN) and rediss://localhost (its DNS SAN). */
static void test_tls_lock_calls(void) {
    NEED_SETUP();
    core_calls("127.0.0.1");
    core_calls("localhost");
}

/* ------------------------------------------- contention across processes */

#define NPROC 3
#define NACQ 25

struct contend {
    char url[1200];
    char name[64];
    int fair, caching;
    int *in;         /* shm: holders in the critical section */
    int *violations; /* shm */
    int *total;      /* shm */
};

static int contend_proc(void *p) {
    struct contend *a = p;
    dlock_client_t *cl;
    dlock_mutex_t m;
    DLT_CK(dlt_client_make(&cl, a->url, 5000), 0);
    DLT_CK(mutex_on(&m, a->name, cl, a->fair, a->caching, 0), 0);
    for (int i = 0; i < NACQ; i++) {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 30000);
        DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
        if (dlt_flag_add(a->in, 1) != 1) dlt_flag_add(a->violations, 1);
        dlt_flag_add(a->total, 1);
        dlt_sleep_ms(1);
        dlt_flag_add(a->in, -1);
        DLT_CK(dlock_mutex_unlock(&m), 0);
    }
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

static void run_contention(const char *host, const char *name, int fair, int caching) {
    int *shm = dlt_shm(3 * sizeof(int));
    struct contend a;
    char q[400];
    pid_t pids[NPROC];
    memset(&a, 0, sizeof a);
    q_ca(q, sizeof q);
    dlt_tls_server_url(&srv_main, a.url, sizeof a.url, NULL, host, q);
    snprintf(a.name, sizeof a.name, "%s", name);
    a.fair = fair;
    a.caching = caching;
    a.in = &shm[0];
    a.violations = &shm[1];
    a.total = &shm[2];
    for (int i = 0; i < NPROC; i++) pids[i] = dlt_spawn(contend_proc, &a);
    for (int i = 0; i < NPROC; i++) DLT_ASSERT_INT_EQ(pids[i] > 0 ? dlt_wait(pids[i], 60000) : -1, 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(a.violations), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(a.total), NPROC * NACQ);
    printf("  %s (fair %d, caching %d, via %s): %d acquisitions, %d overlaps\n", name, fair, caching,
           host, dlt_flag_get(a.total), dlt_flag_get(a.violations));
    DLT_SHM_FREE(shm, 3);
}

/* 3 processes x 25 acquisitions of one lock, each process with its own
 * TLS client: never two holders at once, every acquisition made; plain,
 * fair and caching mutexes (caching hands the lock over on requests that
 * travel as TLS notifications). */
static void test_tls_contention_across_processes(void) {
    NEED_SETUP();
    run_contention("127.0.0.1", "tls/contend-plain", 0, 0);
    run_contention("localhost", "tls/contend-fair", 1, 0);
    run_contention("127.0.0.1", "tls/contend-caching", 0, 1);
}

/* ------------------------------------------- a waiter woken by a release */

struct wake {
    char url[1200];
    int *waiting;  /* shm: the waiter saw the lock busy and is about to wait */
    int *released; /* shm: the holder is releasing */
    int *waited_ms;
    struct dlt_chan ch;
};

static int wake_holder(void *p) {
    struct wake *w = p;
    dlock_client_t *cl;
    dlock_mutex_t m;
    DLT_CK(dlt_client_make(&cl, w->url, 5000), 0);
    /* A lease of 30 s: a waiter with a 10 s deadline gets the lock only
     * if the release notification reaches it. */
    DLT_CK(mutex_on(&m, "tls/wake", cl, 0, 0, 30000), 0);
    DLT_CK(dlock_mutex_lock(&m), 0);
    DLT_CK(dlt_pipe_put(w->ch.to_parent[1], 'H'), 0);
    DLT_CKT(dlt_flag_wait(w->waiting, 1, 20000));
    dlt_sleep_ms(300);
    dlt_flag_set(w->released, 1);
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

static int wake_waiter(void *p) {
    struct wake *w = p;
    dlock_client_t *cl;
    dlock_mutex_t m;
    DLT_CK(dlt_client_make(&cl, w->url, 5000), 0);
    DLT_CK(mutex_on(&m, "tls/wake", cl, 0, 0, 0), 0);
    DLT_CK(dlock_mutex_trylock(&m), EBUSY);
    dlt_flag_set(w->waiting, 1);
    double t0 = dlt_now();
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 10000);
    DLT_CK(dlock_mutex_timedlock(&m, &ts), 0);
    dlt_flag_set(w->waited_ms, (int)((dlt_now() - t0) * 1000));
    DLT_CK(dlt_flag_get(w->released), 1); /* granted after the release, not before */
    DLT_CK(dlock_mutex_unlock(&m), 0);
    DLT_CK(dlock_mutex_destroy(&m), 0);
    DLT_CK(dlock_client_destroy(cl), 0);
    return 0;
}

/* A holder in one process (lease 30 s) releases after 300 ms; a waiter in
 * another process, already waiting, gets the lock before its 10 s
 * deadline: woken by the release notification, which its TLS subscriber
 * connection carried. */
static void test_tls_waiter_woken_by_release(void) {
    NEED_SETUP();
    int *shm = dlt_shm(3 * sizeof(int));
    struct wake w;
    char q[400];
    memset(&w, 0, sizeof w);
    q_ca(q, sizeof q);
    dlt_tls_server_url(&srv_main, w.url, sizeof w.url, NULL, "127.0.0.1", q);
    w.waiting = &shm[0];
    w.released = &shm[1];
    w.waited_ms = &shm[2];
    CU_ASSERT_FATAL(dlt_chan_open(&w.ch) == 0);
    pid_t holder = dlt_spawn(wake_holder, &w);
    DLT_ASSERT_INT_EQ(dlt_pipe_get(w.ch.to_parent[0], 20000), 'H');
    pid_t waiter = dlt_spawn(wake_waiter, &w);
    DLT_ASSERT_INT_EQ(waiter > 0 ? dlt_wait(waiter, 30000) : -1, 0);
    DLT_ASSERT_INT_EQ(holder > 0 ? dlt_wait(holder, 30000) : -1, 0);
    printf("  the waiter had the lock %d ms after it began to wait (the holder held it 300 ms "
           "more)\n", dlt_flag_get(w.waited_ms));
    dlt_chan_close(&w.ch);
    DLT_SHM_FREE(shm, 3);
}

/* --------------------------------------------- rwlock and condition var */

struct condarg {
    dlock_mutex_t *m;
    dlock_cond_t *cv;
    int *ready;
    int *waiting;
    int rc;
};

static void *cond_waiter(void *p) {
    struct condarg *a = p;
    int rc = dlock_mutex_lock(a->m);
    if (rc == 0) {
        dlt_flag_set(a->waiting, 1);
        while (!dlt_flag_get(a->ready) && rc == 0) {
            struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 10000);
            rc = dlock_cond_timedwait(a->cv, a->m, &ts);
        }
        if (dlock_mutex_unlock(a->m) != 0 && rc == 0) rc = -1;
    }
    a->rc = rc;
    return NULL;
}

/* Read-write lock: two readers on two clients at once, a writer kept out
 * meanwhile, then the writer in and readers kept out.  Condition variable:
 * a waiter (another thread) woken by a signal.  All over TLS. */
static void test_tls_rwlock_and_cond(void) {
    NEED_SETUP();
    char url[1200], q[400];
    dlock_client_t *a, *b;
    dlock_mutexattr_t aa, ab;
    dlock_rwlock_t ra, rb, rc2;
    dlock_mutex_t m;
    dlock_cond_t cv;
    pthread_t th;
    int *flags = dlt_shm(2 * sizeof(int));
    struct condarg ca;

    q_ca(q, sizeof q);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "localhost", q);
    DLT_ASSERT_ERR(dlt_client_make(&a, url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&b, url, 5000), 0);
    dlock_mutexattr_init(&aa);
    dlock_mutexattr_setclient(&aa, a);
    dlock_mutexattr_init(&ab);
    dlock_mutexattr_setclient(&ab, b);
    DLT_ASSERT_ERR(dlock_rwlock_init(&ra, "tls/rw", &aa), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rc2, "tls/rw", &aa), 0);
    DLT_ASSERT_ERR(dlock_rwlock_init(&rb, "tls/rw", &ab), 0);

    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&ra), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&rb), 0);
    DLT_ASSERT_ERR(dlock_rwlock_trywrlock(&rc2), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&ra), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rb), 0);
    DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rb), 0);
    DLT_ASSERT_ERR(dlock_rwlock_tryrdlock(&ra), EBUSY);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&rb), 0);
    DLT_ASSERT_ERR(dlock_rwlock_rdlock(&ra), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&ra), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&ra), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rb), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rc2), 0);
    dlock_mutexattr_destroy(&aa);
    dlock_mutexattr_destroy(&ab);

    DLT_ASSERT_ERR(mutex_on(&m, "tls/cond-mutex", a, 0, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_cond_init_client(&cv, "tls/cond", a), 0);
    ca.m = &m;
    ca.cv = &cv;
    ca.ready = &flags[0];
    ca.waiting = &flags[1];
    ca.rc = -1;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, cond_waiter, &ca) == 0);
    /* Once it had the mutex, it can only be waiting when we get it. */
    CU_ASSERT_TRUE(dlt_flag_wait(ca.waiting, 1, 20000));
    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    dlt_flag_set(ca.ready, 1);
    DLT_ASSERT_ERR(dlock_cond_signal(&cv), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(ca.rc, 0);
    DLT_ASSERT_ERR(dlock_cond_destroy(&cv), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(b), 0);
    DLT_SHM_FREE(flags, 2);
}

/* ======================================================================
 * 2. Verification of the server
 * ==================================================================== */

/* A refused certificate is a configuration error, not an outage: a lock
 * call fails with ENOLCK at once instead of asking again until the
 * client's unreachable bound (20 s here); a lock call too. */
static void test_tls_refusal_not_retried(void) {
    NEED_SETUP();
    char url[1200], q[900], msg[1024];
    dlock_client_t *cl;
    dlock_mutex_t m;
    double t0, took;
    int created, rc;

    snprintf(q, sizeof q, "tls_ca_file=%s", ca2_crt);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "127.0.0.1", q);
    t0 = dlt_now();
    rc = try_through(url, "tls/refusal", 20000, msg, sizeof msg, &created);
    took = dlt_now() - t0;
    printf("  trylock: %s after %.2f s\n", dlock_err_name(rc), took);
    DLT_ASSERT_ERR(created, 0);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(has(msg, "certificate"));
    CU_ASSERT_TRUE(took < 10.0);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 20000), 0);
    DLT_ASSERT_ERR(mutex_on(&m, "tls/refusal", cl, 0, 0, 0), 0);
    t0 = dlt_now();
    rc = dlock_mutex_lock(&m);
    took = dlt_now() - t0;
    printf("  lock: %s after %.2f s\n", dlock_err_name(rc), took);
    DLT_ASSERT_ERR(rc, ENOLCK);
    CU_ASSERT_TRUE(took < 10.0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

static void test_tls_server_verification(void) {
    NEED_SETUP();
    char url[1200], q[900], good[1200];
    dlock_client_t *g;
    const char *name = "tls/verify";

    /* No CA: the system store knows nothing of our CA. */
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "127.0.0.1", NULL);
    refused("system store", url, name, "certificate", NULL);
    /* The wrong CA. */
    snprintf(q, sizeof q, "tls_ca_file=%s", ca2_crt);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "127.0.0.1", q);
    refused("unrelated CA", url, name, "certificate", NULL);
    /* The right CA, another name. */
    snprintf(q, sizeof q, "tls_ca_file=%s&tls_server_name=other.example", ca_crt);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "127.0.0.1", q);
    refused("tls_server_name=other.example", url, name, "hostname mismatch", NULL);
    /* The right CA, an address the certificate does not name. */
    snprintf(q, sizeof q, "tls_ca_file=%s&tls_server_name=127.0.0.2", ca_crt);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "localhost", q);
    refused("tls_server_name=127.0.0.2", url, name, "mismatch", NULL);
    /* A plain client on the TLS-only port; a TLS client on a plain port. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?connect_timeout_ms=500", srv_main.port);
    refused("redis:// to the TLS port", url, name, NULL, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s&connect_timeout_ms=500",
             dlt_server.port, ca_crt);
    refused("rediss:// to a plain port", url, name, NULL, NULL);

    /* Nothing was granted to any of them. */
    q_ca(q, sizeof q);
    dlt_tls_server_url(&srv_main, good, sizeof good, NULL, "127.0.0.1", q);
    DLT_ASSERT_ERR(dlt_client_make(&g, good, 5000), 0);
    DLT_ASSERT_INT_EQ(holder_pid(g, name), 0);

    /* tls_verify=0: no CA, a wrong CA, a wrong name: all accepted. */
    int created;
    char msg[1024];
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "127.0.0.1", "tls_verify=0");
    DLT_ASSERT_ERR(try_through(url, name, 5000, msg, sizeof msg, &created), 0);
    snprintf(q, sizeof q, "tls_verify=0&tls_ca_file=%s&tls_server_name=other.example", ca2_crt);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "localhost", q);
    DLT_ASSERT_ERR(try_through(url, name, 5000, msg, sizeof msg, &created), 0);
    /* tls_verify=1 said out loud, the right CA. */
    snprintf(q, sizeof q, "tls_verify=1&tls_ca_file=%s", ca_crt);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "127.0.0.1", q);
    DLT_ASSERT_ERR(try_through(url, name, 5000, msg, sizeof msg, &created), 0);
    /* The right CA and tls_server_name=localhost on an address URL. */
    snprintf(q, sizeof q, "tls_ca_file=%s&tls_server_name=localhost", ca_crt);
    dlt_tls_server_url(&srv_main, url, sizeof url, NULL, "127.0.0.1", q);
    DLT_ASSERT_ERR(try_through(url, name, 5000, msg, sizeof msg, &created), 0);

    DLT_ASSERT_INT_EQ(holder_pid(g, name), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(g), 0);
}

/* ======================================================================
 * 3. Client certificates
 * ==================================================================== */

struct certwait {
    dlock_mutex_t *m;
    int *waiting;
    int rc_try, rc;
};

static void *cert_waiter(void *p) {
    struct certwait *w = p;
    w->rc_try = dlock_mutex_trylock(w->m);
    dlt_flag_set(w->waiting, 1);
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 10000);
    w->rc = dlock_mutex_timedlock(w->m, &ts);
    if (w->rc == 0 && dlock_mutex_unlock(w->m) != 0) w->rc = -1;
    return NULL;
}

/* A server with --tls-auth-clients yes: without a client certificate, or
 * with one of another CA, ENOLCK; with ours, locks work, including a
 * waiter (another thread, another client) woken by a release. */
static void test_tls_client_certificates(void) {
    NEED_SETUP();
    CU_ASSERT_FATAL(dlt_tls_server_start(&srv_auth, 1, NULL, NULL, NULL) == 0);
    char url[1200], q[1000];
    const char *name = "tls/client-cert";
    dlock_client_t *a, *b;
    dlock_mutex_t ma, mb;
    pthread_t th;
    int *flag = dlt_shm(sizeof(int));
    struct certwait w;

    q_ca(q, sizeof q);
    dlt_tls_server_url(&srv_auth, url, sizeof url, NULL, "127.0.0.1", q);
    /* (Only ENOLCK is asserted: the reason given is the server's alert,
     * "certificate required" / "unknown ca", or, when the server's reset
     * reaches the client's next send first, "send: Connection reset by
     * peer".) */
    refused("no client certificate", url, name, NULL, NULL);
    snprintf(q, sizeof q, "tls_ca_file=%s&tls_cert_file=%s&tls_key_file=%s", ca_crt, cli2_crt, cli2_key);
    dlt_tls_server_url(&srv_auth, url, sizeof url, NULL, "127.0.0.1", q);
    refused("a client certificate of another CA", url, name, NULL, NULL);

    snprintf(q, sizeof q, "tls_ca_file=%s&tls_cert_file=%s&tls_key_file=%s", ca_crt, cli_crt, cli_key);
    dlt_tls_server_url(&srv_auth, url, sizeof url, NULL, "localhost", q);
    DLT_ASSERT_ERR(dlt_client_make(&a, url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&b, url, 5000), 0);
    DLT_ASSERT_ERR(mutex_on(&ma, name, a, 0, 0, 30000), 0);
    DLT_ASSERT_ERR(mutex_on(&mb, name, b, 0, 0, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&ma), 0);
    DLT_ASSERT_INT_EQ(holder_pid(b, name), (long)getpid());
    w.m = &mb;
    w.waiting = flag;
    w.rc_try = w.rc = -1;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, cert_waiter, &w) == 0);
    CU_ASSERT_TRUE(dlt_flag_wait(flag, 1, 20000));
    dlt_sleep_ms(200); /* (not needed for correctness: a release before it waits is seen too) */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc_try, EBUSY);
    DLT_ASSERT_ERR(w.rc, 0); /* lease 30 s, deadline 10 s: the notification woke it */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&ma), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&ma), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(b), 0);
    DLT_SHM_FREE(flag, 1);
    dlt_redis_cleanup(&srv_auth);
}

/* ======================================================================
 * 4. Bad configuration: EINVAL at dlock_client_create
 * ==================================================================== */

static void test_tls_bad_configuration(void) {
    NEED_SETUP();
    char url[1200], q[1000];
    int p = srv_main.port;

    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s&tls_cert_file=%s", p, ca_crt, cli_crt);
    invalid("tls_cert_file without tls_key_file", url, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s&tls_key_file=%s", p, ca_crt, cli_key);
    invalid("tls_key_file without tls_cert_file", url, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s/no-such-ca.crt", p, certdir);
    invalid("a CA file that does not exist", url, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s/openssl.cnf", p, certdir);
    invalid("a CA file that holds no certificate", url, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s&tls_cert_file=%s/none.crt&tls_key_file=%s/none.key",
             p, ca_crt, certdir, certdir);
    invalid("client certificate files that do not exist", url, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s&tls_cert_file=%s&tls_key_file=%s", p, ca_crt,
             cli_crt, ca2_key);
    invalid("a key that is not the certificate's", url, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_verify=2", p);
    invalid("tls_verify=2", url, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_verify=", p);
    invalid("tls_verify=", url, NULL);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=", p);
    invalid("tls_ca_file=", url, NULL);
    snprintf(url, sizeof url, "rediss://" USER ":" PASSWORD "@127.0.0.1:%d?tls_ca_file=%s&tls_cert_file=%s", p,
             ca_crt, cli_crt);
    invalid("a bad TLS URL with a password", url, PASSWORD);

    /* tls_* on a redis:// (or redis+sentinel://) URL. */
    q_ca(q, sizeof q);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?%s", p, q);
    invalid("tls_ca_file on redis://", url, NULL);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?tls_cert_file=%s&tls_key_file=%s", p, cli_crt, cli_key);
    invalid("tls_cert_file on redis://", url, NULL);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?tls_server_name=localhost", p);
    invalid("tls_server_name on redis://", url, NULL);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?tls_verify=0", p);
    invalid("tls_verify on redis://", url, NULL);
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/mymaster?%s", p, q);
    invalid("tls_ca_file on redis+sentinel://", url, NULL);

    /* And through dlock_config_t rather than the environment: the same. */
    dlock_config_t cfg;
    dlock_client_t *cl = NULL;
    dlock_config_init(&cfg);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s/no-such-ca.crt", p, certdir);
    cfg.url = url;
    cfg.unreachable_ms = 1000;
    DLT_ASSERT_ERR(dlock_client_create(&cl, &cfg), EINVAL);
}

/* ======================================================================
 * 5. Passwords over TLS
 * ==================================================================== */

static void test_tls_password(void) {
    NEED_SETUP();
    CU_ASSERT_FATAL(dlt_tls_server_start(&srv_pw, 0, DEFAULT_PASSWORD, USER, PASSWORD) == 0);
    char url[1200], q[400], msg[1024];
    int created;
    const char *name = "tls/password";

    q_ca(q, sizeof q);
    /* The ACL user, and the default user's requirepass. */
    dlt_tls_server_url(&srv_pw, url, sizeof url, USER ":" PASSWORD "@", "127.0.0.1", q);
    DLT_ASSERT_ERR(try_through(url, name, 5000, msg, sizeof msg, &created), 0);
    dlt_tls_server_url(&srv_pw, url, sizeof url, ":" DEFAULT_PASSWORD "@", "localhost", q);
    DLT_ASSERT_ERR(try_through(url, name, 5000, msg, sizeof msg, &created), 0);
    {
        /* A hold, seen by another authenticated client. */
        dlock_client_t *a, *b;
        dlock_mutex_t m;
        dlt_tls_server_url(&srv_pw, url, sizeof url, USER ":" PASSWORD "@", "127.0.0.1", q);
        DLT_ASSERT_ERR(dlt_client_make(&a, url, 5000), 0);
        dlt_tls_server_url(&srv_pw, url, sizeof url, "default:" DEFAULT_PASSWORD "@", "127.0.0.1", q);
        DLT_ASSERT_ERR(dlt_client_make(&b, url, 5000), 0);
        DLT_ASSERT_ERR(mutex_on(&m, name, a, 0, 0, 0), 0);
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
        DLT_ASSERT_INT_EQ(holder_pid(b, name), (long)getpid());
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_INT_EQ(holder_pid(b, name), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(a), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(b), 0);
    }

    /* Wrong passwords: refused, never shown. */
    dlt_tls_server_url(&srv_pw, url, sizeof url, USER ":" WRONG_PASSWORD "@", "127.0.0.1", q);
    refused("wrong password", url, name, "authentication failed", WRONG_PASSWORD);
    dlt_tls_server_url(&srv_pw, url, sizeof url, ":" WRONG_PASSWORD "@", "127.0.0.1", q);
    refused("wrong default password", url, name, "authentication failed", WRONG_PASSWORD);
    /* The right password, a certificate refused: not shown either. */
    dlt_tls_server_url(&srv_pw, url, sizeof url, USER ":" PASSWORD "@", "127.0.0.1", NULL);
    refused("right password, no CA", url, name, "certificate", PASSWORD);
    snprintf(q, sizeof q, "tls_ca_file=%s&tls_server_name=other.example", ca_crt);
    dlt_tls_server_url(&srv_pw, url, sizeof url, USER ":" PASSWORD "@", "127.0.0.1", q);
    refused("right password, wrong name", url, name, "hostname mismatch", PASSWORD);
    dlt_redis_cleanup(&srv_pw);
}

/* ======================================================================
 * 6. The server killed mid-use
 * ==================================================================== */

#define CRASH_LEASE_MS 2000
#define CRASH_GUARD_MS 4000 /* >= every lease before the crash */

struct crash_shared {
    int lost;       /* A's lost-lock handler ran */
    int in;         /* holders after the restart, in the critical section */
    int overlaps;   /* two of them at once */
    int before_lost; /* granted to B or W while A had not been told of its loss */
    int lost_ms;     /* when A was told, in ms after the kill (for the log) */
    int grants;      /* grants after the restart */
    int grant_ms[4]; /* when, in ms after the kill (for the log) */
};

static double t_kill; /* dlt_now() at the kill */

static int ms_since_kill(void) {
    return (int)((dlt_now() - t_kill) * 1000);
}

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    struct crash_shared *sh = arg;
    if (dlt_flag_add(&sh->lost, 1) == 1) dlt_flag_set(&sh->lost_ms, ms_since_kill());
}

/* In the critical section of B or W after the restart. */
static void crash_critical(struct crash_shared *sh) {
    if (dlt_flag_get(&sh->lost) == 0) dlt_flag_add(&sh->before_lost, 1);
    int k = dlt_flag_add(&sh->grants, 1) - 1;
    if (k >= 0 && k < 4) dlt_flag_set(&sh->grant_ms[k], ms_since_kill());
    if (dlt_flag_add(&sh->in, 1) != 1) dlt_flag_add(&sh->overlaps, 1);
    dlt_sleep_ms(100);
    dlt_flag_add(&sh->in, -1);
}

struct crash_waiter {
    dlock_mutex_t *m;
    struct crash_shared *sh;
    int started;
    int rc, rc_unlock;
};

static void *crash_waiter_fn(void *p) {
    struct crash_waiter *w = p;
    dlt_flag_set(&w->started, 1);
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 30000);
    w->rc = dlock_mutex_timedlock(w->m, &ts);
    if (w->rc == 0) {
        crash_critical(w->sh);
        w->rc_unlock = dlock_mutex_unlock(w->m);
    }
    return NULL;
}

/* A holds a lock (lease 2 s) on a TLS server and keeps it past its lease
 * (renewals over TLS); W, another client, waits for it.  The server is
 * SIGKILLed and restarted on the same port, without its data.  B and W
 * use the restart guard (4 s): each gets the lock (W through its
 * re-established TLS subscription, B by a blocking lock), one at a time,
 * and only once A was told its hold was lost; A's unlock says EPERM, its
 * handler ran once, and A's client takes new locks on the restarted
 * server. */
static void test_tls_server_killed_mid_use(void) {
    NEED_SETUP();
    CU_ASSERT_FATAL(dlt_tls_server_start(&srv_crash, 0, NULL, NULL, NULL) == 0);
    char url[1200], gurl[1200], q[600];
    const char *name = "tls/crash";
    dlock_client_t *a, *b, *c;
    dlock_mutex_t ma, mb, mc, mnew;
    dlock_mutexattr_t attr;
    struct crash_shared *sh = DLT_SHM_NEW(struct crash_shared, 1);
    struct crash_waiter w;
    pthread_t th;
    struct timespec ts;

    q_ca(q, sizeof q);
    dlt_tls_server_url(&srv_crash, url, sizeof url, NULL, "127.0.0.1", q);
    snprintf(q, sizeof q, "tls_ca_file=%s&restart_guard_ms=%d", ca_crt, CRASH_GUARD_MS);
    dlt_tls_server_url(&srv_crash, gurl, sizeof gurl, NULL, "localhost", q);
    CU_ASSERT_FATAL(dlt_client_make(&a, url, 5000) == 0);
    CU_ASSERT_FATAL(dlt_client_make(&b, gurl, 5000) == 0);
    CU_ASSERT_FATAL(dlt_client_make(&c, gurl, 5000) == 0);
    dlock_mutexattr_init(&attr);
    dlock_mutexattr_setclient(&attr, a);
    dlock_mutexattr_setlease(&attr, CRASH_LEASE_MS);
    dlock_mutexattr_setlostcallback(&attr, on_lost, sh);
    DLT_ASSERT_ERR(dlock_mutex_init(&ma, name, &attr), 0);
    dlock_mutexattr_destroy(&attr);
    DLT_ASSERT_ERR(mutex_on(&mb, name, b, 0, 0, 0), 0);
    DLT_ASSERT_ERR(mutex_on(&mc, name, c, 0, 0, 0), 0);
    DLT_ASSERT_ERR(mutex_on(&mnew, "tls/crash-after", a, 0, 0, 0), 0);

    DLT_ASSERT_ERR(dlock_mutex_lock(&ma), 0);
    double t_locked = dlt_now();
    memset(&w, 0, sizeof w);
    w.m = &mc;
    w.sh = sh;
    w.rc = w.rc_unlock = -1;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, crash_waiter_fn, &w) == 0);
    CU_ASSERT_TRUE(dlt_flag_wait(&w.started, 1, 20000));
    /* 1.5 leases: A still holds it, renewed over TLS. */
    while (dlt_now() < t_locked + 1.5 * CRASH_LEASE_MS / 1000.0) dlt_sleep_ms(50);
    DLT_ASSERT_INT_EQ(holder_pid(b, name), (long)getpid());
    DLT_ASSERT_INT_EQ(dlt_flag_get(&sh->lost), 0);

    pid_t old = srv_crash.pid;
    t_kill = dlt_now();
    dlt_redis_kill(&srv_crash);
    dlt_sleep_ms(200);
    CU_ASSERT_FATAL(dlt_redis_restart(&srv_crash) == 0);
    int restarted_ms = ms_since_kill();
    printf("  redis-server %d killed; %d restarted on port %d\n", (int)old, (int)srv_crash.pid,
           srv_crash.port);

    ts = dlt_abs_in(CLOCK_REALTIME, 30000);
    int rc = dlock_mutex_timedlock(&mb, &ts);
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) {
        crash_critical(sh);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&mb), 0);
    } else {
        printf("  B: %s\n", dlock_last_error());
    }
    pthread_join(th, NULL);
    DLT_ASSERT_ERR(w.rc, 0);
    DLT_ASSERT_ERR(w.rc_unlock, 0);
    printf("  after the kill: restarted at %d ms, A told of its loss at %d ms, the lock granted "
           "at %d and %d ms (guard %d ms)\n",
           restarted_ms, dlt_flag_get(&sh->lost_ms), dlt_flag_get(&sh->grant_ms[0]),
           dlt_flag_get(&sh->grant_ms[1]), CRASH_GUARD_MS);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&sh->grants), 2);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&sh->overlaps), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&sh->before_lost), 0); /* never held by two */
    DLT_ASSERT_INT_EQ(dlt_flag_get(&sh->lost), 1);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), EPERM);

    /* A's client, on the restarted server. */
    ts = dlt_abs_in(CLOCK_REALTIME, 10000);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&mnew, &ts), 0);
    DLT_ASSERT_INT_EQ(holder_pid(b, "tls/crash-after"), (long)getpid());
    DLT_ASSERT_ERR(dlock_mutex_unlock(&mnew), 0);
    ts = dlt_abs_in(CLOCK_REALTIME, 10000);
    DLT_ASSERT_ERR(dlock_mutex_timedlock(&ma, &ts), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&ma), 0);
    DLT_ASSERT_INT_EQ(dlt_flag_get(&sh->lost), 1);

    DLT_ASSERT_ERR(dlock_mutex_destroy(&ma), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mc), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mnew), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(a), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(b), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    DLT_SHM_FREE(sh, 1);
    dlt_redis_cleanup(&srv_crash);
}

/* The fork-heavy tests come first, while this process has no threads of
 * its own (see fixture.h on the sanitizers and fork). */
static const struct dlt_test tests[] = {
    DLT_TEST(test_tls_contention_across_processes),
    DLT_TEST(test_tls_waiter_woken_by_release),
    DLT_TEST(test_tls_lock_calls),
    DLT_TEST(test_tls_rwlock_and_cond),
    DLT_TEST(test_tls_server_verification),
    DLT_TEST(test_tls_refusal_not_retried),
    DLT_TEST(test_tls_client_certificates),
    DLT_TEST(test_tls_bad_configuration),
    DLT_TEST(test_tls_password),
    DLT_TEST(test_tls_server_killed_mid_use),
    { NULL, NULL }
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "tls", tests);
    dlt_redis_cleanup(&srv_main);
    return rc;
}
