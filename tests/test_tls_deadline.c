/* labels: redis; timeout: 120 */
/* test_tls_deadline.c -- rediss://: a TLS server that stalls never
 * keeps a call past its end, nor the renewal thread past its round.
 *
 * The servers are the fixture's TLS-only ones (fixture_multi.h), each
 * behind the fault proxy (proxy.h) in STALL mode: it forwards a given
 * number of the server's bytes on each connection, then nothing -- a
 * handshake or a record cut off in its middle, the connection left open.
 *
 *   1. A stall mid-handshake (100 bytes of the server's first flight, 60
 *      ms late, then nothing): a timed lock call (deadlines 100 and 350
 *      ms; connect and command timeouts of 1 s, far past them) returns
 *      by its end, its deadline + DLOCK__LATE_MS.  Each of the
 *      handshake's reads used to wait anew on the socket's receive
 *      timeout: the one after the late bytes ended some 60 ms past the
 *      handshake's end, the kernel's timer wheel's slack on top.
 *   2. No answer at all to the ClientHello (the proxy a black hole): the
 *      probe in plain RESP that follows (is it a plain Redis?) ends by
 *      the call's end too; it used to get up to 250 ms of its own.
 *   3. A stall mid-record in the answer to a timed call on a pooled
 *      connection (10 bytes, 60 ms late): the rest of the record is
 *      awaited until the answer's bound, not the socket's timeout anew.
 *   4. A Redlock master (of three) whose records come in part (1 byte,
 *      the rest 1.5 s later): the renewal thread reads what came and
 *      goes on, the two others decide.  It used to block on the record
 *      until the round's bound -- a quarter of its shortest lease, 1.5 s
 *      for a 6 s lease renewed alone -- and a 1 s lease taken meanwhile
 *      lapsed.
 *   5. No connect begun in a call's last ms (the pool's, on a node made
 *      here): hiredis awaits a connect in whole ms, and one begun with
 *      0.5 ms left ended 0.5 ms past the end.
 *
 *   6. A server that stops reading (the proxy reads no more requests; the
 *      sockets' buffers small): a request's write waits for room by ppoll
 *      until the call's end, or its reply floor for a trylock; it used to
 *      wait on the socket's send timeout, the command timeout.
 *
 * The margin past a call's end (RETURN_MS, 5 ms) is for the call's own
 * return path and the test's timing; a thread kept waiting for a CPU
 * (dlt_thread_cpu_wait: the kernel's run delay) is late by the machine's
 * doing, and that wait is taken off.
 */
#include "fixture_multi.h"
#include "proxy.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <dlock.h>

#include "net/net.h" /* DLOCK__LATE_MS; the pool and a call's end (5.) */

#define RETURN_MS 5.0
#define TIMEOUT_MS 1000 /* connect and command timeouts: far past every deadline here */

static double ms_since(double t0) {
    return (dlt_now() - t0) * 1000.0;
}

/* A client of the TLS server srv through the proxy px. */
static int client_via(dlock_client_t **c, const dlt_redis *srv, const dlt_proxy *px, unsigned timeout_ms) {
    char url[1200], q[400];
    dlock_config_t cfg;
    snprintf(q, sizeof q, "tls_ca_file=%s/ca.crt", srv->tls_dir);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?%s", dlt_proxy_port(px), q);
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = timeout_ms;
    cfg.command_timeout_ms = timeout_ms;
    cfg.unreachable_ms = 5000;
    return dlock_client_create(c, &cfg);
}

/* Timed lock calls on m with deadlines of 100 and 350 ms (a connection's
 * budget cut to the call's end, and to the deadline), each made while the
 * proxy holds the server's bytes back: every one fails (ETIMEDOUT or
 * ENOLCK) by its end; the proxy held some back (faults counted). */
static void calls_end_in_time(const char *what, dlock_mutex_t *m, dlt_proxy *px, int reconnect) {
    unsigned long held_all = dlt_proxy_faults(px);
    for (long ms = 100; ms <= 350; ms += 250) {
        struct timespec ts;
        unsigned long held = dlt_proxy_faults(px);
        double t0, w0, late, cpu_wait;
        int rc;
        if (reconnect) dlt_proxy_close_all(px); /* every call makes a new connection */
        dlt_sleep_ms(30);                       /* (the proxy's threads see it) */
        ts = dlt_abs_in(CLOCK_MONOTONIC, ms);
        t0 = dlt_now();
        w0 = dlt_thread_cpu_wait();
        rc = dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
        late = ms_since(t0) - (double)ms;
        cpu_wait = (dlt_thread_cpu_wait() - w0) * 1000.0;
        held = dlt_proxy_faults(px) - held;
        printf("  %s, deadline %ld ms: %s %.1f ms past it (%.1f ms waiting for a CPU), %lu chunks held [%s]\n", what,
               ms, dlt_errno_label(rc), late, cpu_wait, held, rc ? dlock_last_error() : "");
        CU_ASSERT_TRUE(rc == ETIMEDOUT || rc == ENOLCK);
        if (rc == 0) DLT_ASSERT_ERR(dlock_mutex_unlock(m), 0);
        CU_ASSERT_TRUE(late - cpu_wait <= DLOCK__LATE_MS + RETURN_MS);
    }
    /* The server's answers were cut off (a call may also find the server
     * just now seen unreachable, and wait without a connection). */
    CU_ASSERT_TRUE(dlt_proxy_faults(px) - held_all >= 1);
}

/* A server, a proxy before it, a client through the proxy with a mutex
 * that has connected once (its connection pooled). */
struct rig {
    dlt_redis srv;
    dlt_proxy *px;
    dlock_client_t *c;
    dlock_mutex_t m;
};

static int rig_up(struct rig *r, const char *name) {
    memset(r, 0, sizeof *r);
    if (dlt_tls_server_start(&r->srv, 0, NULL, NULL, NULL) != 0) return -1;
    if ((r->px = dlt_proxy_start(r->srv.port)) == NULL) return -1;
    if (client_via(&r->c, &r->srv, r->px, TIMEOUT_MS) != 0) return -1;
    if (dlt_mutex_make(&r->m, name, 10000, r->c) != 0) return -1;
    if (dlock_mutex_lock(&r->m) != 0) return -1;
    return dlock_mutex_unlock(&r->m);
}

static void rig_down(struct rig *r) {
    dlt_proxy_pass(r->px);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&r->m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(r->c), 0);
    dlt_proxy_stop(r->px);
    dlt_redis_cleanup(&r->srv);
}

/* ------------------------------------------------ 1. mid-handshake */

static void test_handshake_stall_ends_with_call(void) {
    struct rig r;
    CU_ASSERT_FATAL(rig_up(&r, "tlsdl/handshake") == 0);
    /* the server's first flight (ServerHello, its certificate...) is
     * some 1.5 KB: 100 bytes of it, 60 ms late, leave the handshake in
     * its middle -- a wait that starts anew at each read would end 60 ms
     * past the handshake's end */
    dlt_proxy_stall(r.px, 100, 60);
    calls_end_in_time("handshake stalled", &r.m, r.px, 1);
    rig_down(&r);
}

/* ------------------------------- 2. a silent ClientHello, the probe */

static void test_silent_handshake_probe_ends_with_call(void) {
    struct rig r;
    CU_ASSERT_FATAL(rig_up(&r, "tlsdl/silent") == 0);
    dlt_proxy_set(r.px, DLT_PROXY_DROP, 0, NULL, 0);
    calls_end_in_time("ClientHello unanswered", &r.m, r.px, 1);
    rig_down(&r);
}

/* ------------------------------------------ 3. mid-record, a call */

static void test_record_stall_ends_with_call(void) {
    struct rig r;
    CU_ASSERT_FATAL(rig_up(&r, "tlsdl/record") == 0);
    /* a record's header (5 bytes) and 5 bytes of its body, 60 ms late:
     * the pooled connection's next answer comes in part */
    dlt_proxy_stall(r.px, 10, 60);
    calls_end_in_time("answer's record stalled", &r.m, r.px, 0);
    rig_down(&r);
}

/* ------------------------------- 4. mid-record, a Redlock renewal */

static int lost_calls;

/* A mutex of c's named name with lease_ms, the lost handler counting into lost_calls. */
static int mutex_leased(dlock_mutex_t *m, const char *name, dlock_client_t *c, unsigned lease_ms) {
    dlock_mutexattr_t a;
    int rc = dlock_mutexattr_init(&a);
    if (rc == 0) rc = dlock_mutexattr_setclient(&a, c);
    if (rc == 0) rc = dlock_mutexattr_setlease(&a, lease_ms);
    if (rc == 0) rc = dlock_mutexattr_setlostcallback(&a, dlt_count_lost, &lost_calls);
    if (rc == 0) rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static void test_redlock_renewal_not_held_by_record(void) {
    dlt_masters ms;
    dlt_proxy *px;
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    dlock_mutex_t lng, shrt;
    char url[1200];
    unsigned long held;
    int i, holds = 1;

    memset(&ms, 0, sizeof ms);
    DLT_MASTERS_UP(&ms, 3, 1);
    CU_ASSERT_FATAL((px = dlt_proxy_start(ms.srv[2].port)) != NULL);
    snprintf(url, sizeof url, "rediss+redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?tls_ca_file=%s/ca.crt",
             ms.srv[0].port, ms.srv[1].port, dlt_proxy_port(px), ms.srv[0].tls_dir);
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = 3000;
    cfg.command_timeout_ms = 3000;
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    /* The long lease's first renewal comes at about a third of it (2 s),
     * alone: its round may take up to a quarter of it (1.5 s).  The third
     * master's records come in part from 1.5 s on (1 byte, the rest 1.5 s
     * later); the short hold, taken at 2.2 s, is due for renewal 333 ms
     * later and lapses 1 s later: the round must not have spent its
     * bound waiting for the rest of that master's record. */
    DLT_ASSERT_ERR(mutex_leased(&lng, "tlsdl/renew-long", c, 6000), 0);
    DLT_ASSERT_ERR(mutex_leased(&shrt, "tlsdl/renew-short", c, 1000), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&lng), 0);
    /* the renewal connections made first (a renewal of the short hold,
     * 333 ms in): a handshake cut off mid-way takes its own bound */
    DLT_ASSERT_ERR(dlock_mutex_lock(&shrt), 0);
    dlt_sleep_ms(450);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&shrt), 0);
    dlt_sleep_ms(1050);
    held = dlt_proxy_faults(px);
    dlt_proxy_set(px, DLT_PROXY_SPLIT, 1500, NULL, 0);
    dlt_sleep_ms(700);
    DLT_ASSERT_ERR(dlock_mutex_lock(&shrt), 0);
    for (i = 0; i < 15 && holds; i++) { /* 1.5 s: the short lease and half again */
        dlt_sleep_ms(100);
        holds = dlock_mutex_holds(&shrt) && dlock_mutex_holds(&lng);
    }
    held = dlt_proxy_faults(px) - held;
    printf("  a master's renewal answers cut mid-record: %s after %d ms, lost %d time(s), %lu chunks split\n",
           holds ? "both still held" : "LOST", 2200 + i * 100, __atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), held);
    CU_ASSERT_TRUE(held >= 1); /* the renewals' answers came in part */
    CU_ASSERT_TRUE(holds);
    DLT_ASSERT_INT_EQ(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
    dlt_proxy_pass(px);
    (void)dlock_mutex_unlock(&shrt);
    (void)dlock_mutex_unlock(&lng);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&shrt), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&lng), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
    dlt_masters_cleanup(&ms);
}

/* ----------------------- 5. no connect begun in the call's last ms */

/* A connection of the pool of a node of the TLS server (through a proxy
 * that counts connections) with a call's end 0.5 ms away: none is begun
 * -- hiredis awaits a connect in whole ms, and would end a ms later;
 * with 2 s away, one is made. */
static void test_no_connect_in_calls_last_ms(void) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    dlock_config_t cfg;
    dlock__node n;
    dlock__conn *cn = NULL;
    dlock__mono saved;
    unsigned long accepted;
    char url[1200];
    struct rig r;
    int rc;
    CU_ASSERT_FATAL(rig_up(&r, "tlsdl/last-ms") == 0);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca_file=%s/ca.crt", dlt_proxy_port(r.px), r.srv.tls_dir);
    memset(&n, 0, sizeof n);
    dlock_config_init(&cfg);
    cfg.url = url;
    CU_ASSERT_FATAL(dlock__conf_parse(&n.conf, &cfg) == 0);
    n.mu = &mu;
    CU_ASSERT_FATAL(dlock__tls_ctx_make(&n) == 0);

    saved = dlock__call_end_set(dlock__now() + 2000 * DLOCK__MS);
    rc = dlock__pool_get(&n, &cn, DLOCK__MONO_NEVER);
    DLT_ASSERT_ERR(rc, 0);
    if (rc == 0) dlock__conn_close(cn);
    accepted = dlt_proxy_accepted(r.px);
    (void)dlock__call_end_set(dlock__now() + DLOCK__MS / 2);
    rc = dlock__pool_get(&n, &cn, DLOCK__MONO_NEVER);
    (void)dlock__call_end_set(saved);
    printf("  a connect with 0.5 ms left: %s [%s]\n", dlt_errno_label(rc), rc ? dlock_last_error() : "");
    DLT_ASSERT_ERR(rc, ENOLCK);
    if (rc == 0) dlock__conn_close(cn);
    dlt_sleep_ms(50); /* (an accept the proxy would count) */
    DLT_ASSERT_INT_EQ(dlt_proxy_accepted(r.px) - accepted, 0);

    dlock__tls_ctx_free(&n);
    dlock__conf_free(&n.conf);
    rig_down(&r);
}

/* --------------------------- 6. a server that stops reading: writes */

#define HELD 6 /* pipelined unlocks held back for the call's write */

/* A pipelined mutex of c's, named `name` with its first byte made `first`. */
static int mutex_pipelined(dlock_mutex_t *m, char *name, char first, dlock_client_t *c) {
    dlock_mutexattr_t a;
    int rc = dlock_mutexattr_init(&a);
    name[0] = first;
    if (rc == 0) rc = dlock_mutexattr_setclient(&a, c);
    if (rc == 0) rc = dlock_mutexattr_setlease(&a, 10000);
    if (rc == 0) rc = dlock_mutexattr_setpipelined(&a, 1);
    if (rc == 0) rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* The proxy reads no more requests and the sockets' buffers are small
 * (the proxy's taken before the client connected, the client's now);
 * the pipelined unlocks of held, held back, go out in one write with the
 * call's request (mutexes of the longest names: some 8 KiB, and TLS's
 * records): a timedlock (100 ms) ends by its deadline + DLOCK__LATE_MS, a
 * trylock after its reply floor (200 ms), not after the socket's send
 * timeout (the command timeout, 1 s); the connection is closed. */
static void test_send_stall_ends_with_call(void) {
    dlt_redis srv;
    dlt_proxy *px;
    dlock_client_t *c = NULL;
    dlock_mutex_t m, held[2][HELD];
    char name[DLOCK_NAME_MAX + 1];
    int i, k;
    CU_ASSERT_FATAL(dlt_tls_server_start(&srv, 0, NULL, NULL, NULL) == 0);
    CU_ASSERT_FATAL((px = dlt_proxy_start(srv.port)) != NULL);
    CU_ASSERT_EQUAL(dlt_proxy_rcvbuf(px, 1), 0);
    DLT_ASSERT_ERR(client_via(&c, &srv, px, TIMEOUT_MS), 0);
    memset(name, 's', DLOCK_NAME_MAX);
    name[DLOCK_NAME_MAX] = '\0';
    DLT_ASSERT_ERR(mutex_pipelined(&m, name, 'm', c), 0);
    for (k = 0; k < 2 * HELD; k++)
        DLT_ASSERT_ERR(mutex_pipelined(&held[k / HELD][k % HELD], name, (char)('a' + k), c), 0);
    for (k = 0; k < 2; k++) {
        int ports[8], n, closed = 0, rc;
        struct timespec ts;
        double t0, w0, ms, cpu_wait;
        for (i = 0; i < HELD; i++) DLT_ASSERT_ERR(dlock_mutex_lock(&held[k][i]), 0);
        n = dlt_proxy_shrink_clients(px, ports, 8);
        CU_ASSERT(n >= 1 && n <= 8);
        dlt_proxy_deaf(px, 0, 0);
        dlt_sleep_ms(30); /* (the proxy's threads see it) */
        for (i = 0; i < HELD; i++) DLT_ASSERT_ERR(dlock_mutex_unlock(&held[k][i]), 0);
        ts = dlt_abs_in(CLOCK_REALTIME, 100);
        t0 = dlt_now();
        w0 = dlt_thread_cpu_wait();
        rc = k == 0 ? dlock_mutex_timedlock(&m, &ts) : dlock_mutex_trylock(&m);
        ms = ms_since(t0);
        cpu_wait = (dlt_thread_cpu_wait() - w0) * 1000.0;
        printf("  %s, the server not reading: %s after %.1f ms (%.1f ms waiting for a CPU)\n",
               k == 0 ? "timedlock (100 ms)" : "trylock", dlt_errno_label(rc), ms, cpu_wait);
        CU_ASSERT(rc == ETIMEDOUT || rc == ENOLCK);
        CU_ASSERT(ms - cpu_wait <= (k == 0 ? 100 + DLOCK__LATE_MS + RETURN_MS : 200 + 50));
        for (i = 0; i < n && i < 8; i++) closed += !dlt_proxy_client_open(px, ports[i]);
        CU_ASSERT(closed >= 1); /* the one it wrote on: half a request in it */
        dlt_proxy_pass(px);
        dlt_proxy_close_all(px);
        dlt_sleep_ms(30);
    }
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0); /* served again, on a fresh connection */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    for (k = 0; k < 2 * HELD; k++) DLT_ASSERT_ERR(dlock_mutex_destroy(&held[k / HELD][k % HELD]), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_client_destroy(c), 0);
    dlt_proxy_stop(px);
    dlt_redis_cleanup(&srv);
}

static const struct dlt_test tests[] = { DLT_TEST(test_handshake_stall_ends_with_call),
                                         DLT_TEST(test_silent_handshake_probe_ends_with_call),
                                         DLT_TEST(test_record_stall_ends_with_call),
                                         DLT_TEST(test_redlock_renewal_not_held_by_record),
                                         DLT_TEST(test_no_connect_in_calls_last_ms),
                                         DLT_TEST(test_send_stall_ends_with_call),
                                         { NULL, NULL } };

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "tls_deadline", tests);
}
