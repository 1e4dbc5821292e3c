/* labels: redis; timeout: 180 */
/* test_redlock2.c -- Redlock never counts one server twice, and Redlock
 * over TLS.
 *
 *  - a URL that names a master twice, however written (case, numeric
 *    forms of one address, a final dot), is refused with EINVAL at client
 *    creation, naming both and never the password;
 *  - two names of one real server (127.0.0.1 and localhost) are found by
 *    the server's run id at the first connection: the lock is refused with
 *    ENOLCK naming both, at once, and nothing stays granted on the server
 *    -- with the third master dead, and with it alive;
 *  - three distinct real masters still work, the run id is read once per
 *    connection (not per request), and a master restarted (a new run id)
 *    is taken back;
 *  - rediss+redlock:// with three TLS-only masters locks, excludes and
 *    unlocks; an unrelated CA is refused with ENOLCK and a certificate
 *    reason, granting nothing; a CA file that does not exist is EINVAL at
 *    creation; one TLS server named twice is found by its run id too;
 *  - a TLS master whose records come in part (a proxy holds the rest of
 *    each answer 1.5 s): every call is decided by the other two within a
 *    try's bound, its reads never waiting for the rest of a record.
 *
 * Every server is the fixture's, started and killed by pid here.  Nothing
 * asserts speed: "at once" is checked against bounds far above the
 * client's own.
 */
#include "fixture_multi.h"
#include "proxy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlock.h>

#define NM 3
#define SECRET "rl2-s3cret-pw"

static dlt_masters rl; /* the test's servers */

#define SERVERS_UP(n, tls) DLT_MASTERS_UP(&rl, (n), (tls))

static int has(const char *s, const char *what) {
    return s != NULL && strstr(s, what) != NULL;
}

/* EXISTS <lock key of name> on server i: 1, 0, or -1 (no answer). */
static int key_on(int i, const char *name) {
    return dlt_redis_lock_exists(&rl.srv[i], name);
}

/* key_on, once it is `want` or a second passed: a call returns once the
 * answers of a quorum decide, and a master that answers later (a new
 * connection made after the others were asked) grants it, or runs the
 * give-back queued behind its grant, a moment after. */
static int key_soon(int i, const char *name, int want) {
    int k, v = key_on(i, name);
    for (k = 0; k < 100 && v != want; k++) {
        dlt_sleep_ms(10);
        v = key_on(i, name);
    }
    return v;
}
#define key_on_soon(i, name) key_soon((i), (name), 1)

/* ------------------------------------------ 1. a master named twice */

static void url_refused(const char *url, const char *want1, const char *want2) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    const char *msg;
    int rc;
    dlock_config_init(&cfg);
    cfg.url = url;
    rc = dlock_client_create(&c, &cfg);
    msg = rc ? dlock_last_error() : "(accepted)";
    printf("  %s: %s: %s\n", url, dlt_errno_label(rc), msg);
    DLT_ASSERT_ERR(rc, EINVAL);
    CU_ASSERT_TRUE(has(msg, "same server"));
    CU_ASSERT_TRUE(has(msg, want1));
    CU_ASSERT_TRUE(has(msg, want2));
    CU_ASSERT_FALSE(has(msg, SECRET));
    if (rc == 0 && c != NULL) dlock_client_destroy(c);
}

static void url_accepted(const char *url) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    int rc;
    dlock_config_init(&cfg);
    cfg.url = url;
    rc = dlock_client_create(&c, &cfg);
    if (rc != 0) printf("  %s: %s: %s\n", url, dlt_errno_label(rc), dlock_last_error());
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
}

static void test_redlock_url_master_twice(void) {
    url_refused("redlock://u:" SECRET "@h1:7001,h1:7001,h1:7001", "(h1:7001)", "2 (h1:7001)");
    url_refused("redlock://h1:7001,h2:7001,H1:7001", "1 (h1:7001)", "3 (H1:7001)");
    url_refused("redlock://h1.example:7001,h1.example.:7001,h3:7001", "(h1.example:7001)", "(h1.example.:7001)");
    url_refused("redlock://127.0.0.1:7001,h2:7001,127.1:7001", "(127.0.0.1:7001)", "(127.1:7001)");
    url_refused("redlock://[::1]:7001,[0:0::1]:7001,h3:7001", "([::1]:7001)", "([0:0::1]:7001)");
    url_refused("redlock://[::ffff:127.0.0.1]:7001,127.0.0.1:7001,h3", "[::ffff:127.0.0.1]:7001", "(127.0.0.1:7001)");
    url_refused("redlock://h1,h1:6379,h3", "(h1:6379)", "2 (h1:6379)"); /* the default port */
    url_refused("rediss+redlock://:" SECRET "@h1:7001,h1:7001,h3:7001", "(h1:7001)", "2 (h1:7001)");
    /* Distinct ports, addresses, names: accepted (nothing is resolved or
     * reached at creation). */
    url_accepted("redlock://h1:7001,h1:7002,h1:7003");
    url_accepted("redlock://127.0.0.1:7001,127.0.0.2:7001,[::1]:7001");
    url_accepted("redlock://h1:7001,h2:7001,h3:7001");
}

/* --------------------------------- 2. two names of one real server */

/* A client of redlock://USER:SECRET@127.0.0.1:P,localhost:P,127.0.0.1:Q
 * (Q: server 1's port, dead or alive): trylock, timedlock and lock are
 * refused with ENOLCK naming both masters, well within the unreachable
 * bound; nothing is held on server 0 afterwards. */
static void one_server_twice(int third_alive) {
    const char *name = "rl2/twice";
    char url[400];
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    redisReply *r;
    int k, rc;

    r = dlt_redis_cmd(&rl.srv[0], "ACL SETUSER rl2 on >%s ~* &* +@all", SECRET);
    CU_ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_STATUS);
    if (r != NULL) freeReplyObject(r);
    snprintf(url, sizeof url, "redlock://rl2:%s@127.0.0.1:%d,localhost:%d,127.0.0.1:%d", SECRET, rl.srv[0].port,
             rl.srv[0].port, rl.srv[1].port);
    if (third_alive) { /* the same user on the third master */
        r = dlt_redis_cmd(&rl.srv[1], "ACL SETUSER rl2 on >%s ~* &* +@all", SECRET);
        if (r != NULL) freeReplyObject(r);
    }
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 20000), 0);
    CU_ASSERT_FATAL(cl != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 10000, cl), 0);
    for (k = 0; k < 3; k++) {
        char msg[1024];
        double t0 = dlt_now(), took;
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 15000);
        rc = k == 0 ? dlock_mutex_trylock(&m) : k == 1 ? dlock_mutex_timedlock(&m, &ts) : dlock_mutex_lock(&m);
        took = dlt_now() - t0;
        snprintf(msg, sizeof msg, "%s", rc ? dlock_last_error() : "(granted)");
        printf("  third master %s, %s: %s after %.2f s: %s\n", third_alive ? "alive" : "dead",
               k == 0 ? "trylock" : k == 1 ? "timedlock" : "lock", dlt_errno_label(rc), took, msg);
        DLT_ASSERT_ERR(rc, ENOLCK);
        if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        CU_ASSERT_TRUE(has(msg, "one server"));
        CU_ASSERT_TRUE(has(msg, "127.0.0.1:") && has(msg, "localhost:"));
        CU_ASSERT_FALSE(has(msg, SECRET));
        CU_ASSERT_TRUE(took < 10.0); /* at once, not after the 20 s unreachable bound */
        DLT_ASSERT_INT_EQ(dlock_mutex_holds(&m), 0);
        DLT_ASSERT_INT_EQ(key_soon(0, name, 0), 0); /* nothing left granted on the one server */
        if (third_alive) DLT_ASSERT_INT_EQ(key_soon(1, name, 0), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
}

static void test_redlock_one_server_two_names(void) {
    SERVERS_UP(2, 0);
    one_server_twice(1);
    DLT_ASSERT_INT_EQ(dlt_redis_kill(&rl.srv[1]), 0);
    one_server_twice(0);
    dlt_masters_cleanup(&rl);
}

/* A TCP proxy in front of one of the masters: its address says nothing
 * (127.0.0.1 and another port), the run id tells. */
static void test_redlock_proxy_is_the_same_server(void) {
    const char *name = "rl2/proxy";
    char url[400];
    dlock_client_t *cl = NULL;
    dlock_mutex_t m;
    dlt_proxy *px;
    int rc;

    SERVERS_UP(2, 0);
    px = dlt_proxy_start(rl.srv[0].port);
    CU_ASSERT_FATAL(px != NULL);
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", rl.srv[0].port, dlt_proxy_port(px),
             rl.srv[1].port);
    DLT_ASSERT_ERR(dlt_client_make(&cl, url, 5000), 0);
    if (cl != NULL) {
        DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 10000, cl), 0);
        rc = dlock_mutex_trylock(&m);
        printf("  through a proxy: trylock %s: %s\n", dlt_errno_label(rc), rc ? dlock_last_error() : "(granted)");
        DLT_ASSERT_ERR(rc, ENOLCK);
        if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        CU_ASSERT_TRUE(has(dlock_last_error(), "one server"));
        DLT_ASSERT_INT_EQ(key_soon(0, name, 0), 0);
        DLT_ASSERT_INT_EQ(key_soon(1, name, 0), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(cl), 0);
    }
    dlt_proxy_stop(px);
    dlt_masters_cleanup(&rl);
}

/* --------------------------------------- 3. distinct masters still work */

static void test_redlock_distinct_masters_work(void) {
    const char *name = "rl2/distinct";
    char url[400];
    dlock_client_t *c1 = NULL, *c2 = NULL;
    dlock_mutex_t m1, m2;
    long long infos[NM];
    int i;

    SERVERS_UP(NM, 0);
    /* localhost for one of them: a name and addresses, three servers */
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,localhost:%d,127.0.0.1:%d", rl.srv[0].port, rl.srv[1].port,
             rl.srv[2].port);
    for (i = 0; i < NM; i++) DLT_ASSERT_INT_EQ(dlt_redis_reset_stats(&rl.srv[i]), 0);
    DLT_ASSERT_ERR(dlt_client_make(&c1, url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&c2, url, 5000), 0);
    CU_ASSERT_FATAL(c1 != NULL && c2 != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&m1, name, 10000, c1), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m2, name, 10000, c2), 0);
    for (i = 0; i < 40; i++) {
        DLT_ASSERT_ERR(dlock_mutex_lock(&m1), 0);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), EBUSY);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), 0);
    DLT_ASSERT_INT_EQ(key_on_soon(0, name) + key_on_soon(1, name) + key_on_soon(2, name), 3);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    /* The run id was read on each master, once per connection: a few
     * connections per client (pool, subscriber), not 40 lock calls. */
    for (i = 0; i < NM; i++) {
        infos[i] = dlt_redis_cmdstat(&rl.srv[i], "info");
        printf("  master %d: INFO called %lld times over 80 acquisitions\n", i, infos[i]);
        CU_ASSERT_TRUE(infos[i] >= 1);
        CU_ASSERT_TRUE(infos[i] <= 12);
    }
    /* A master restarted has a new run id: taken back, no conflict. */
    DLT_ASSERT_INT_EQ(dlt_redis_stop(&rl.srv[1]), 0);
    DLT_ASSERT_INT_EQ(dlt_redis_restart(&rl.srv[1]), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    {
        struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 10000);
        DLT_ASSERT_ERR(dlock_mutex_timedlock(&m2, &ts), 0);
    }
    DLT_ASSERT_INT_EQ(key_on_soon(1, name), 1); /* the restarted master counts */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);

    /* A user whose ACL refuses INFO: no run id to compare, the masters
     * still work (the check is skipped, as documented). */
    for (i = 0; i < NM; i++) {
        redisReply *r = dlt_redis_cmd(&rl.srv[i], "ACL SETUSER noinfo on >%s ~* &* +@all -info", SECRET);
        CU_ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_STATUS);
        if (r != NULL) freeReplyObject(r);
    }
    snprintf(url, sizeof url, "redlock://noinfo:%s@127.0.0.1:%d,localhost:%d,127.0.0.1:%d", SECRET, rl.srv[0].port,
             rl.srv[1].port, rl.srv[2].port);
    DLT_ASSERT_ERR(dlt_client_make(&c1, url, 5000), 0);
    CU_ASSERT_FATAL(c1 != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&m1, name, 10000, c1), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m1), 0);
    DLT_ASSERT_INT_EQ(key_on_soon(0, name) + key_on_soon(1, name) + key_on_soon(2, name), 3);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    dlt_masters_cleanup(&rl);
}

/* ------------------------------------------------ 4. rediss+redlock:// */

/* rediss+redlock://HOSTS for servers a, b, c (hosts[i] the name of each)
 * with tls_ca_file=<certificates>/ca. */
static void tls_url(char *buf, size_t cap, const char *const hosts[3], const int which[3], const char *ca) {
    snprintf(buf, cap, "rediss+redlock://%s:%d,%s:%d,%s:%d?tls_ca_file=%s/%s", hosts[0], rl.srv[which[0]].port,
             hosts[1], rl.srv[which[1]].port, hosts[2], rl.srv[which[2]].port, rl.srv[0].tls_dir, ca);
}

static void test_redlock_tls(void) {
    static const char *const hosts[3] = { "127.0.0.1", "localhost", "127.0.0.1" };
    static const int distinct[3] = { 0, 1, 2 }, twice[3] = { 0, 0, 1 };
    const char *name = "rl2/tls";
    char url[1200];
    dlock_client_t *c1 = NULL, *c2 = NULL, *bad = NULL;
    dlock_mutex_t m1, m2, mb;
    dlock_config_t cfg;
    int i, rc;
    double t0;

    SERVERS_UP(NM, 1);
    tls_url(url, sizeof url, hosts, distinct, "ca.crt");
    DLT_ASSERT_ERR(dlt_client_make(&c1, url, 5000), 0);
    DLT_ASSERT_ERR(dlt_client_make(&c2, url, 5000), 0);
    CU_ASSERT_FATAL(c1 != NULL && c2 != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&m1, name, 10000, c1), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m2, name, 10000, c2), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&m1), 0);
    CU_ASSERT_TRUE(dlock_mutex_fence(&m1) > 0);
    for (i = 0; i < NM; i++) DLT_ASSERT_INT_EQ(key_on_soon(i, name), 1); /* on every TLS master */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m1), 0);
    for (i = 0; i < NM; i++) DLT_ASSERT_INT_EQ(key_soon(i, name, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m1), EBUSY);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m2), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m1), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m2), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c1), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c2), 0);

    /* An unrelated CA: refused by the certificate, at once (not asked
     * again until the 20 s unreachable bound: it will not change), and
     * nothing granted. */
    tls_url(url, sizeof url, hosts, distinct, "ca2.crt");
    DLT_ASSERT_ERR(dlt_client_make(&bad, url, 20000), 0);
    CU_ASSERT_FATAL(bad != NULL);
    DLT_ASSERT_ERR(dlt_mutex_make(&mb, name, 10000, bad), 0);
    for (i = 0; i < 2; i++) {
        double took;
        t0 = dlt_now();
        rc = i == 0 ? dlock_mutex_trylock(&mb) : dlock_mutex_lock(&mb);
        took = dlt_now() - t0;
        printf("  unrelated CA: %s %s after %.2f s: %s\n", i == 0 ? "trylock" : "lock", dlt_errno_label(rc), took,
               rc ? dlock_last_error() : "(granted)");
        DLT_ASSERT_ERR(rc, ENOLCK);
        if (rc == 0) (void)dlock_mutex_unlock(&mb);
        CU_ASSERT_TRUE(has(dlock_last_error(), "certificate"));
        CU_ASSERT_TRUE(took < 10.0);
    }
    for (i = 0; i < NM; i++) DLT_ASSERT_INT_EQ(key_soon(i, name, 0), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(bad), 0);

    /* A CA file that is not there: EINVAL at creation. */
    tls_url(url, sizeof url, hosts, distinct, "no-such-ca.crt");
    dlock_config_init(&cfg);
    cfg.url = url;
    bad = NULL;
    rc = dlock_client_create(&bad, &cfg);
    printf("  missing CA file: %s: %s\n", dlt_errno_label(rc), rc ? dlock_last_error() : "(accepted)");
    DLT_ASSERT_ERR(rc, EINVAL);
    if (rc == 0) dlock_client_destroy(bad);

    /* One TLS server under two names: found by its run id. */
    {
        static const char *const names2[3] = { "127.0.0.1", "localhost", "127.0.0.1" };
        tls_url(url, sizeof url, names2, twice, "ca.crt");
        DLT_ASSERT_ERR(dlt_client_make(&bad, url, 5000), 0);
        CU_ASSERT_FATAL(bad != NULL);
        DLT_ASSERT_ERR(dlt_mutex_make(&mb, name, 10000, bad), 0);
        rc = dlock_mutex_trylock(&mb);
        printf("  one TLS server twice: trylock %s: %s\n", dlt_errno_label(rc), rc ? dlock_last_error() : "(granted)");
        DLT_ASSERT_ERR(rc, ENOLCK);
        if (rc == 0) (void)dlock_mutex_unlock(&mb);
        CU_ASSERT_TRUE(has(dlock_last_error(), "one server"));
        DLT_ASSERT_INT_EQ(key_soon(0, name, 0), 0);
        DLT_ASSERT_ERR(dlock_mutex_destroy(&mb), 0);
        DLT_ASSERT_ERR(dlock_client_destroy(bad), 0);
    }
    dlt_masters_cleanup(&rl);
}

/* -------------------- 3. a TLS master whose records come in part */

/* A master behind a proxy that sends the first byte of each of its
 * answers at once and the rest 1.5 s later: a TLS record comes in part.
 * Reading it must not wait for the rest -- not in the call that asked
 * (the two others decide it), not in the next call, which reads what that
 * master owes under its lock: each call is decided by the others within a
 * try's bound (200 ms, + 50). */
static void test_redlock_tls_record_in_part(void) {
    const char *name = "rl2/split";
    char url[1200];
    dlock_client_t *c = NULL;
    dlock_mutex_t m, b;
    dlt_proxy *px;
    double t0, dt, worst = 0;
    int i;

    SERVERS_UP(NM, 1);
    CU_ASSERT_FATAL((px = dlt_proxy_start(rl.srv[2].port)) != NULL);
    snprintf(url, sizeof url, "rediss+redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?tls_ca_file=%s/ca.crt",
             rl.srv[0].port, rl.srv[1].port, dlt_proxy_port(px), rl.srv[0].tls_dir);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 5000), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&m, name, 20000, c), 0);
    DLT_ASSERT_ERR(dlt_mutex_make(&b, "rl2/split-b", 20000, c), 0);
    for (i = 0; i < 3; i++) { /* connections to every master, their scripts known */
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    dlt_sleep_ms(50);
    dlt_proxy_set(px, DLT_PROXY_SPLIT, 1500, NULL, 0);
    for (i = 0; i < 4; i++) {
        t0 = dlt_now();
        DLT_ASSERT_ERR(dlock_mutex_trylock(i % 2 ? &b : &m), 0);
        dt = (dlt_now() - t0) * 1000;
        if (dt > worst) worst = dt;
        t0 = dlt_now();
        DLT_ASSERT_ERR(dlock_mutex_unlock(i % 2 ? &b : &m), 0);
        dt = (dlt_now() - t0) * 1000;
        if (dt > worst) worst = dt;
    }
    printf("  a TLS master's records in part: each call within %.1f ms\n", worst);
    CU_ASSERT_TRUE(worst <= 250);
    dlt_proxy_pass(px);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&b), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
}

static const struct dlt_test tests[] = {
    DLT_TEST(test_redlock_url_master_twice),
    DLT_TEST(test_redlock_one_server_two_names),
    DLT_TEST(test_redlock_proxy_is_the_same_server),
    DLT_TEST(test_redlock_distinct_masters_work),
    DLT_TEST(test_redlock_tls),
    DLT_TEST(test_redlock_tls_record_in_part),
    { NULL, NULL },
};

int main(int argc, char **argv) {
    int rc = dlt_main(argc, argv, "redlock2", tests);
    dlt_masters_cleanup(&rl);
    return rc;
}
