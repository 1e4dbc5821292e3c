/* labels: redis; timeout: 180 */
/* test_deadline.c -- deadlines and answers under faults: every timed call returns within its deadline + 50 ms (past its
 * start, when the deadline had already passed) whatever the server does,
 * and every success is a live hold.
 *
 *   1. An idle, healthy server (hz 10): Redis times a blocked BLPOP out
 *      only every 1000/hz ms, so a call that let the server end its grant
 *      wait came back up to 100 ms late.  The client keeps its own
 *      deadline.
 *   2. A silent host (its SYNs unanswered: a listener whose accept queue
 *      is full), and a partition that starts while a waiter is blocked in
 *      BLPOP (the proxy black-holes both ways): the connect attempt and
 *      every reply wait end with the call; a withdrawal that cannot be
 *      made in time is made in the background once the server answers
 *      again, not left to lapse with the lease.
 *   2b. A server (a proxy before it) that accepts connections and closes
 *      them at their first request: the TLS probe that tells it from a
 *      TLS port ends with the call, and the client backs off between
 *      connections rather than reconnecting in a tight loop -- a back-off
 *      that ends with the call too (a semaphore's timed wait, whose ops
 *      are bounded by the unreachable bound, through the proxy while it
 *      closes every connection).  With the probe's ClientHello kept
 *      unanswered (a server back after a restart), the probe ends by the
 *      call's end, not a socket timeout's clock tick after it.
 *   3. An acquire whose answer comes after the lease (less the drift) has
 *      run out -- the server SIGSTOPped for a second with a 400 ms lease:
 *      the call gives that hold back and returns a live one, or an error;
 *      never 0 (or EOWNERDEAD) with holds() 0, and the lost-lock handler
 *      never runs for a hold the caller never saw.
 *   4. One connection, different bounds: trylock and lock
 *      pairs back to back change no socket timeout and poll nothing (a
 *      send and a read a request), and still each call gets its bound.
 *   5. A server that stops reading (a proxy that reads nothing more, or a
 *      few bytes now and then; the sockets' buffers small): a request's
 *      write ends with the call's bound -- timedlock, trylock, unlock --
 *      and its connection, half a request written, is closed.
 *   6. A call with less than a ms left: a wait that used to be rounded up
 *      to a whole ms (a Redlock master's PING probe) ends by its end.
 *
 * Every server, client, proxy and socket the tests make is ended by the
 * test itself (servers by the fixture, by pid).
 */
#include "fixture.h"
#include "proxy.h"

#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dlfcn.h>
#include <dlock.h>

#include "net/net.h" /* dlock__pool_fresh_ms */

#define LATE_MS 50.0 /* the documented bound past the deadline */

static double ms_since(double t0) {
    return (dlt_now() - t0) * 1000.0;
}

static int mutex_make(dlock_mutex_t *m, const char *name, unsigned lease_ms, dlock_client_t *c, int robust,
                      dlock_lost_fn lost, void *arg) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (rc == 0 && lease_ms) rc = dlock_mutexattr_setlease(&a, lease_ms);
    if (rc == 0 && c) rc = dlock_mutexattr_setclient(&a, c);
    if (rc == 0 && robust) rc = dlock_mutexattr_setrobust(&a, DLOCK_MUTEX_ROBUST);
    if (rc == 0 && lost) rc = dlock_mutexattr_setlostcallback(&a, lost, arg);
    if (rc == 0) rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

static int rwlock_make(dlock_rwlock_t *rw, const char *name, unsigned lease_ms, dlock_client_t *c) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (rc == 0 && lease_ms) rc = dlock_mutexattr_setlease(&a, lease_ms);
    if (rc == 0 && c) rc = dlock_mutexattr_setclient(&a, c);
    if (rc == 0) rc = dlock_rwlock_init(rw, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

/* ---------------------------------------- 1. a healthy, idle server */

enum { OP_TIMEDLOCK, OP_CLOCKLOCK, OP_TIMEDWRLOCK, OP_TIMEDRDLOCK, OP_CLOCKWRLOCK, OP_N };
static const char *const op_name[OP_N] = { "timedlock", "clocklock", "timedwrlock", "timedrdlock", "clockwrlock" };

/* One timed call with a deadline ms from now; its lateness (ms past the
 * deadline, negative if early) in *late. */
static int timed_op(int op, dlock_mutex_t *m, dlock_rwlock_t *rw, long ms, double *late) {
    clockid_t clk = op == OP_CLOCKLOCK || op == OP_CLOCKWRLOCK ? CLOCK_MONOTONIC : CLOCK_REALTIME;
    struct timespec ts = dlt_abs_in(clk, ms);
    double t0 = dlt_now();
    int rc;
    switch (op) {
    case OP_TIMEDLOCK: rc = dlock_mutex_timedlock(m, &ts); break;
    case OP_CLOCKLOCK: rc = dlock_mutex_clocklock(m, clk, &ts); break;
    case OP_TIMEDWRLOCK: rc = dlock_rwlock_timedwrlock(rw, &ts); break;
    case OP_TIMEDRDLOCK: rc = dlock_rwlock_timedrdlock(rw, &ts); break;
    default: rc = dlock_rwlock_clockwrlock(rw, clk, &ts); break;
    }
    *late = ms_since(t0) - (double)(ms > 0 ? ms : 0);
    return rc;
}

#define IDLE_CALLS 24 /* per kind of call */

static void test_idle_server_deadline_kept(void) {
    dlt_redis srv;
    dlock_client_t *hc = NULL, *wc = NULL;
    dlock_mutex_t hm, wm;
    dlock_rwlock_t hrw, wrw;
    int op, i, over[OP_N] = { 0 }, bad_rc = 0;
    double worst[OP_N] = { 0 };

    memset(&srv, 0, sizeof srv);
    CU_ASSERT_FATAL(dlt_redis_start(&srv, "hz 10") == 0);
    DLT_ASSERT_ERR(dlt_client_make(&hc, srv.url, 0), 0);
    DLT_ASSERT_ERR(dlt_client_make(&wc, srv.url, 0), 0);
    if (hc == NULL || wc == NULL) goto done;
    DLT_ASSERT_ERR(mutex_make(&hm, "dl/idle", 30000, hc, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&wm, "dl/idle", 30000, wc, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(rwlock_make(&hrw, "dl/idle-rw", 30000, hc), 0);
    DLT_ASSERT_ERR(rwlock_make(&wrw, "dl/idle-rw", 30000, wc), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&hm), 0);
    DLT_ASSERT_ERR(dlock_rwlock_wrlock(&hrw), 0);
    for (i = 0; i < IDLE_CALLS; i++) {
        for (op = 0; op < OP_N; op++) {
            long ms = 20 + (i * 37 + op * 11) % 90; /* 20..109 ms: spread over Redis's 100 ms tick */
            double late;
            int rc = timed_op(op, &wm, &wrw, ms, &late);
            if (rc != ETIMEDOUT) {
                printf("  %s (%ld ms): %s [%s]\n", op_name[op], ms, dlt_errno_label(rc), dlock_last_error());
                bad_rc++;
            }
            if (late > worst[op]) worst[op] = late;
            if (late > LATE_MS) over[op]++;
        }
    }
    for (op = 0; op < OP_N; op++)
        printf("  %-12s %d calls, deadlines 20-109 ms: latest %.1f ms past the deadline, %d over %.0f ms\n",
               op_name[op], IDLE_CALLS, worst[op], over[op], LATE_MS);
    DLT_ASSERT_INT_EQ(bad_rc, 0);
    for (op = 0; op < OP_N; op++) DLT_ASSERT_INT_EQ(over[op], 0);
    /* Nothing of the waiter is left registered: the holder's unlock frees
     * the lock for a trylock at once. */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&hm), 0);
    DLT_ASSERT_ERR(dlock_rwlock_unlock(&hrw), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&wm), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&wm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&hm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&wm), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&hrw), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&wrw), 0);
done:
    if (hc) dlock_client_destroy(hc);
    if (wc) dlock_client_destroy(wc);
    dlt_redis_cleanup(&srv);
}

/* ------------------------------------------------ 2. a silent network */

/* A loopback port whose SYNs go unanswered: a listener with a backlog of
 * 0 whose accept queue is filled by connections never accepted.  Its
 * sockets in fds[0..*n); the port, or 0. */
static int silent_port(int *fds, int cap, int *n) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    *n = 0;
    if (l < 0) return 0;
    fds[(*n)++] = l;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l, 0) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &len) != 0)
        return 0;
    while (*n < cap) {
        struct pollfd p;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s < 0) return 0;
        fds[(*n)++] = s;
        if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) return 0;
        p.fd = s;
        p.events = POLLOUT;
        p.revents = 0;
        if (poll(&p, 1, 300) == 0) return ntohs(sa.sin_port); /* this one hangs: the queue is full */
    }
    return 0;
}

/* A host that never answers: a timed call gives up by its deadline (+50
 * ms), not after a whole connect timeout (1 s); with a deadline already
 * past, within 50 ms of its start. */
static void test_silent_host_connect_capped(void) {
    int fds[16], nfd = 0, port, i;
    char url[64];
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    dlock_rwlock_t rw;
    port = silent_port(fds, 16, &nfd);
    CU_ASSERT_TRUE(port > 0);
    if (port <= 0) goto done;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    DLT_ASSERT_ERR(dlt_client_make(&c, url, 0), 0);
    if (c == NULL) goto done;
    DLT_ASSERT_ERR(mutex_make(&m, "dl/silent", 5000, c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(rwlock_make(&rw, "dl/silent-rw", 5000, c), 0);
    for (i = 0; i < 6; i++) {
        long ms = i == 5 ? -200 : 40 + 60 * i; /* the last: a deadline already past */
        int op = i % 3 == 0 ? OP_TIMEDLOCK : i % 3 == 1 ? OP_CLOCKLOCK : OP_TIMEDWRLOCK;
        double late;
        int rc = timed_op(op, &m, &rw, ms, &late);
        printf("  %s, deadline %ld ms: %s %.1f ms past it [%s]\n", op_name[op], ms, dlt_errno_label(rc), late,
               dlock_last_error());
        CU_ASSERT_TRUE(rc == ETIMEDOUT || rc == ENOLCK);
        CU_ASSERT_TRUE(late <= LATE_MS);
    }
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
done:
    if (c) dlock_client_destroy(c);
    for (i = 0; i < nfd; i++) close(fds[i]);
}

/* ------------------------- 2b. a server that turns connections away */

/* A listener that accepts every connection and closes it at its first
 * request, as the fault proxy does while cut or while the server behind
 * it is down.  hold_tls: a TLS ClientHello (a record of type 22) is kept
 * unanswered instead, as a plain Redis behind a proxy that passes again
 * keeps it. */
typedef struct turnaway {
    int lfd, port, hold_tls;
    atomic_int stop;
    atomic_ulong accepted;
    int held[256];
    int nheld;
    pthread_t th;
} turnaway;

static void turnaway_serve(turnaway *t, int s) {
    struct pollfd p = { s, POLLIN, 0 };
    unsigned char b = 0;
    if (t->hold_tls && poll(&p, 1, 500) == 1 && recv(s, &b, 1, MSG_PEEK) == 1 && b == 22 && t->nheld < 256) {
        t->held[t->nheld++] = s;
        return;
    }
    close(s);
}

static void *turnaway_main(void *arg) {
    turnaway *t = arg;
    while (!atomic_load(&t->stop)) {
        struct pollfd p = { t->lfd, POLLIN, 0 };
        int s;
        if (poll(&p, 1, 20) != 1 || (s = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC)) < 0) continue;
        atomic_fetch_add(&t->accepted, 1);
        turnaway_serve(t, s);
    }
    return NULL;
}

static int turnaway_start(turnaway *t, int hold_tls) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    memset(t, 0, sizeof *t);
    t->hold_tls = hold_tls;
    if ((t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(t->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(t->lfd, 64) != 0 ||
        getsockname(t->lfd, (struct sockaddr *)&sa, &len) != 0) {
        close(t->lfd);
        return -1;
    }
    t->port = ntohs(sa.sin_port);
    if (pthread_create(&t->th, NULL, turnaway_main, t) != 0) {
        close(t->lfd);
        return -1;
    }
    return 0;
}

static void turnaway_stop(turnaway *t) {
    atomic_store(&t->stop, 1);
    pthread_join(t->th, NULL);
    close(t->lfd);
    for (int i = 0; i < t->nheld; i++) close(t->held[i]);
}

/* A client of t (connect timeout 1 s: a probe of up to 500 ms). */
static dlock_client_t *turnaway_client(const turnaway *t) {
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", t->port);
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = 1000;
    cfg.command_timeout_ms = 1000;
    cfg.unreachable_ms = 5000;
    if (dlock_client_create(&c, &cfg) != 0) return NULL;
    return c;
}

/* Connections closed at their first request: the TLS probe made to tell
 * a TLS port from a server that turns them away ends with the call (its
 * ClientHello unanswered here), and the client asks again after a
 * back-off, not on a new connection at once in a loop. */
static void test_turned_away(void) {
    turnaway t;
    dlock_client_t *c;
    dlock_mutex_t m;
    double late;
    int rc;
    unsigned long n;
    for (int hold_tls = 1; hold_tls >= 0; hold_tls--) {
        DLT_ASSERT_INT_EQ(turnaway_start(&t, hold_tls), 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c = turnaway_client(&t));
        DLT_ASSERT_ERR(mutex_make(&m, "dl/turned-away", 5000, c, 0, NULL, NULL), 0);
        for (long ms = 100; ms <= 1000; ms += 450) {
            unsigned long before = atomic_load(&t.accepted);
            rc = timed_op(OP_TIMEDLOCK, &m, NULL, ms, &late);
            n = atomic_load(&t.accepted) - before;
            printf("  %s, deadline %ld ms: %s %.1f ms past it, %lu connections [%s]\n",
                   hold_tls ? "ClientHello held" : "all closed", ms, dlt_errno_label(rc), late, n,
                   dlock_last_error());
            CU_ASSERT_TRUE(rc == ETIMEDOUT || rc == ENOLCK);
            CU_ASSERT_TRUE(late <= LATE_MS);
            /* backed off: tens of connections a second, not thousands
             * (two a try, with the probe; the renewal thread's release of
             * the acquire left unanswered makes as many) */
            CU_ASSERT_TRUE(n >= 1 && (double)n <= 16 + 80.0 * (double)ms / 1000);
        }
        DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        dlock_client_destroy(c);
        turnaway_stop(&t);
    }
}

/* A semaphore's ops are bounded by the unreachable bound, its timed wait
 * by the call's end: with every connection closed at its first request
 * (the proxy while cut), the back-off between attempts stops at that end
 * too.  Both kinds, undo and plain. */
static void test_turned_away_sem(void) {
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    dlock_config_init(&cfg);
    cfg.url = dlt_proxy_url(p);
    cfg.connect_timeout_ms = 400;
    cfg.command_timeout_ms = 400;
    cfg.unreachable_ms = 5000;
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    for (int undo = 0; undo < 2 && c != NULL; undo++) {
        dlock_semattr_t a;
        dlock_sem_t s;
        DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
        DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
        DLT_ASSERT_ERR(dlock_semattr_setundo(&a, undo), 0);
        DLT_ASSERT_ERR(dlock_sem_init(&s, undo ? "dl/turned-away-undo" : "dl/turned-away-plain", 0, &a), 0);
        dlock_semattr_destroy(&a);
        dlt_proxy_set(p, DLT_PROXY_CLOSE, 0, NULL, 0);
        dlt_proxy_close_all(p);
        for (long ms = 100; ms <= 1000; ms += 150) {
            struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, ms);
            double t0 = dlt_now(), late;
            int rc = dlock_sem_clockwait(&s, CLOCK_MONOTONIC, &ts);
            late = ms_since(t0) - (double)ms;
            printf("  sem (%s) wait, deadline %ld ms: %s %.1f ms past it\n", undo ? "undo" : "plain", ms,
                   dlt_errno_label(rc), late);
            CU_ASSERT_TRUE(rc == ETIMEDOUT || rc == ENOLCK);
            CU_ASSERT_TRUE(late <= LATE_MS);
        }
        dlt_proxy_pass(p);
        DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    }
    if (c != NULL) dlock_client_destroy(c);
    dlt_proxy_stop(p);
}

/* Past the call's end: a wait begun just before it takes 1 ms at least
 * (conn.c dlock__end_cap), and the call's own work after its last wait
 * (the error set, its records) is run, in a sanitized build on a loaded
 * host too. */
#define RETURN_MS 5.0

/* A semaphore's timed wait while the proxy turns requests away but keeps
 * a TLS ClientHello unanswered -- as after a server restart: the
 * connection closed at its first request while the server was down, the
 * probe that tells a TLS port from that answered by a plain Redis back
 * again, which takes the ClientHello for an inline command without its
 * end.  The probe is one of the call's connect attempts and reply waits,
 * which end by its deadline + DLOCK__LATE_MS: its own making of the
 * ClientHello counted in, its answer awaited to its end, not to a socket
 * timeout's tick after it.  (Whatever the thread waited for a CPU in the
 * call is the machine's, not counted.)  The op of a semaphore is bounded
 * by the unreachable bound, its timed wait by the call's end: the probe's
 * 500 ms (connect timeout 1 s) spans every deadline here. */
static void test_turned_away_probe_held_sem(void) {
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    dlock_semattr_t a;
    dlock_sem_t s;
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    dlock_config_init(&cfg);
    cfg.url = dlt_proxy_url(p);
    cfg.connect_timeout_ms = 1000;
    cfg.command_timeout_ms = 1000;
    cfg.unreachable_ms = 5000;
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    DLT_ASSERT_ERR(dlock_semattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_semattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_semattr_setundo(&a, 1), 0);
    DLT_ASSERT_ERR(dlock_sem_init(&s, "dl/probe-held", 0, &a), 0);
    dlock_semattr_destroy(&a);
    dlt_proxy_set(p, DLT_PROXY_TURNAWAY, 0, NULL, 0);
    dlt_proxy_close_all(p);
    for (long ms = 100; ms <= 400; ms += 150) {
        struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, ms);
        unsigned long held = dlt_proxy_faults(p);
        double t0 = dlt_now(), w0 = dlt_thread_cpu_wait(), late, cpu_wait;
        int rc = dlock_sem_clockwait(&s, CLOCK_MONOTONIC, &ts);
        late = ms_since(t0) - (double)ms;
        cpu_wait = (dlt_thread_cpu_wait() - w0) * 1000.0;
        held = dlt_proxy_faults(p) - held;
        printf("  sem wait, deadline %ld ms: %s %.1f ms past it (%.1f ms waiting for a CPU), %lu ClientHello "
               "held [%s]\n",
               ms, dlt_errno_label(rc), late, cpu_wait, held, dlock_last_error());
        CU_ASSERT_TRUE(rc == ETIMEDOUT || rc == ENOLCK);
        CU_ASSERT_TRUE(held >= 1); /* the probe was made, and kept waiting */
        CU_ASSERT_TRUE(late - cpu_wait <= DLOCK__LATE_MS + RETURN_MS);
    }
    dlt_proxy_pass(p);
    DLT_ASSERT_ERR(dlock_sem_destroy(&s), 0);
    dlock_client_destroy(c);
    dlt_proxy_stop(p);
}

struct timed_arg {
    dlock_mutex_t *m;
    long ms;
    int rc;
    double late;
    char why[256]; /* dlock_last_error() of the call's thread */
};

static void *timed_thread(void *p) {
    struct timed_arg *a = p;
    a->rc = timed_op(OP_TIMEDLOCK, a->m, NULL, a->ms, &a->late);
    snprintf(a->why, sizeof a->why, "%s", dlock_last_error());
    return NULL;
}

static long long zcard(dlt_redis *r, const char *key) {
    return dlt_reply_int(dlt_redis_cmd(r, "ZCARD %s", key));
}

static long long llen(dlt_redis *r, const char *key) {
    return dlt_reply_int(dlt_redis_cmd(r, "LLEN %s", key));
}

/* A waiter blocked in BLPOP when its host is cut off (the proxy drops
 * everything both ways): its timedlock returns by the deadline + 50 ms;
 * its registration as a waiting writer, which it could not take back in
 * time, is taken back once the network heals -- not left for its lease
 * (20 s) to lapse, holding readers back meanwhile. */
static void test_partition_during_grant_wait(void) {
    dlt_redis srv;
    dlt_proxy *px = NULL;
    dlock_client_t *hc = NULL, *wc = NULL;
    dlock_mutex_t hm, wm;
    pthread_t th;
    struct timed_arg a;
    double t0;
    long long n = -1;
    int i;

    memset(&srv, 0, sizeof srv);
    CU_ASSERT_FATAL(dlt_redis_start(&srv, NULL) == 0);
    px = dlt_proxy_start(srv.port);
    CU_ASSERT_TRUE(px != NULL);
    if (px == NULL) goto done;
    DLT_ASSERT_ERR(dlt_client_make(&hc, srv.url, 0), 0);
    DLT_ASSERT_ERR(dlt_client_make(&wc, dlt_proxy_url(px), 0), 0);
    if (hc == NULL || wc == NULL) goto done;
    DLT_ASSERT_ERR(mutex_make(&hm, "dl/part", 20000, hc, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(mutex_make(&wm, "dl/part", 20000, wc, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_lock(&hm), 0);
    for (i = 0; i < 2; i++) {
        /* Round 0: cut off while in BLPOP.  Round 1: cut off already
         * (the pool's connection is silent, a new one too). */
        memset(&a, 0, sizeof a);
        a.m = &wm;
        a.ms = 800;
        if (i == 1) dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
        CU_ASSERT_FATAL(pthread_create(&th, NULL, timed_thread, &a) == 0);
        if (i == 0) {
            dlt_sleep_ms(400); /* registered and blocked in BLPOP by now */
            DLT_ASSERT_INT_EQ(zcard(&srv, "dlock:{dl/part}:writers"), 1);
            dlt_proxy_set(px, DLT_PROXY_DROP, 0, NULL, 0);
        }
        pthread_join(th, NULL);
        printf("  round %d: timedlock (800 ms) cut off %s: %s %.1f ms past the deadline [%s]\n", i,
               i == 0 ? "while in BLPOP" : "from the start", dlt_errno_label(a.rc), a.late, a.why);
        CU_ASSERT_TRUE(a.rc == ETIMEDOUT || a.rc == ENOLCK);
        CU_ASSERT_TRUE(a.late <= LATE_MS);
        if (i == 0) {
            /* The withdrawal could not get through: still registered. */
            DLT_ASSERT_INT_EQ(zcard(&srv, "dlock:{dl/part}:writers"), 1);
        }
        dlt_proxy_pass(px);
        t0 = dlt_now();
        while ((n = zcard(&srv, "dlock:{dl/part}:writers") + llen(&srv, "dlock:{dl/part}:fifo")) != 0 &&
               ms_since(t0) < 6000)
            dlt_sleep_ms(20);
        printf("  round %d: the registration was %s %.0f ms after the network healed\n", i,
               n == 0 ? "taken back" : "still there", ms_since(t0));
        DLT_ASSERT_INT_EQ(n, 0);
    }
    DLT_ASSERT_ERR(dlock_mutex_unlock(&hm), 0);
    /* The lock is free for the waiter: no grant went to a call that left. */
    t0 = dlt_now();
    DLT_ASSERT_ERR(dlock_mutex_lock(&wm), 0);
    CU_ASSERT_TRUE(ms_since(t0) < 1000);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&wm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&hm), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&wm), 0);
done:
    if (hc) dlock_client_destroy(hc);
    if (wc) dlock_client_destroy(wc);
    if (px) dlt_proxy_stop(px);
    dlt_redis_cleanup(&srv);
}

/* ----------------------------------------- 3. an answer after the lease */

#define SHORT_LEASE 400 /* ms */
#define PAUSE_MS 1000   /* the server is stopped that long: well past the lease */

static atomic_int lost_calls;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    atomic_fetch_add(&lost_calls, 1);
}

enum { LATE_LOCK, LATE_TIMEDLOCK, LATE_ROBUST_DEAD, LATE_WRLOCK, LATE_N };
static const char *const late_name[LATE_N] = { "lock", "timedlock", "lock (robust, owner dead)", "wrlock" };

struct late_arg {
    int kind;
    dlock_mutex_t *m;
    dlock_rwlock_t *rw;
    int rc, live, consistent, unlock; /* the lock call; holds() && fence(); their results */
};

/* The lock call, and, when it succeeded, what the caller can do with the
 * hold (in the same thread: holds are the calling thread's). */
static void *late_thread(void *p) {
    struct late_arg *a = p;
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 5000);
    a->consistent = a->unlock = -1;
    switch (a->kind) {
    case LATE_TIMEDLOCK: a->rc = dlock_mutex_timedlock(a->m, &ts); break;
    case LATE_WRLOCK: a->rc = dlock_rwlock_wrlock(a->rw); break;
    default: a->rc = dlock_mutex_lock(a->m); break;
    }
    if (a->kind == LATE_WRLOCK && a->rc == 0) {
        a->live = dlock_rwlock_holds(a->rw) == 2 && dlock_rwlock_fence(a->rw) > 0;
        a->unlock = dlock_rwlock_unlock(a->rw);
    } else if (a->kind != LATE_WRLOCK && (a->rc == 0 || a->rc == EOWNERDEAD)) {
        a->live = dlock_mutex_holds(a->m) == 1 && dlock_mutex_fence(a->m) > 0;
        if (a->rc == EOWNERDEAD) a->consistent = dlock_mutex_consistent(a->m);
        a->unlock = dlock_mutex_unlock(a->m);
    }
    return NULL;
}

/* The server is stopped just before the acquire goes out and continued
 * a second later: the server grants the lock (for 400 ms from then), but
 * the client sent its request more than a lease ago.  A success must be
 * a live hold the caller can use. */
static void test_late_answer_never_a_dead_hold(void) {
    dlt_redis srv;
    dlock_client_t *c = NULL;
    int kind;

    memset(&srv, 0, sizeof srv);
    CU_ASSERT_FATAL(dlt_redis_start(&srv, NULL) == 0);
    DLT_ASSERT_ERR(dlt_client_make(&c, srv.url, 0), 0);
    if (c == NULL) goto done;
    for (kind = 0; kind < LATE_N; kind++) {
        char name[64];
        dlock_mutex_t m;
        dlock_rwlock_t rw;
        pthread_t th;
        struct late_arg a;
        int rc;
        snprintf(name, sizeof name, "dl/late-%d", kind);
        atomic_store(&lost_calls, 0);
        if (kind == LATE_WRLOCK) {
            DLT_ASSERT_ERR(rwlock_make(&rw, name, SHORT_LEASE, c), 0);
            DLT_ASSERT_ERR(dlock_rwlock_wrlock(&rw), 0); /* a pooled connection, scripts loaded */
            DLT_ASSERT_ERR(dlock_rwlock_unlock(&rw), 0);
        } else {
            DLT_ASSERT_ERR(mutex_make(&m, name, SHORT_LEASE, c, kind == LATE_ROBUST_DEAD, on_lost, NULL), 0);
            DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
            DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        }
        if (kind == LATE_ROBUST_DEAD) {
            /* The last robust holder died holding it (as a holder's exit
             * leaves it): the next acquirer gets EOWNERDEAD. */
            char key[128];
            dlt_lock_key(name, key, sizeof key);
            strcat(key, ":state");
            redisReply *r = dlt_redis_cmd(&srv, "SET %s held", key);
            CU_ASSERT_TRUE(r != NULL && r->type == REDIS_REPLY_STATUS);
            if (r) freeReplyObject(r);
        }
        memset(&a, 0, sizeof a);
        a.kind = kind;
        a.m = &m;
        a.rw = &rw;
        CU_ASSERT_FATAL(kill(srv.pid, SIGSTOP) == 0);
        CU_ASSERT_FATAL(pthread_create(&th, NULL, late_thread, &a) == 0);
        dlt_sleep_ms(PAUSE_MS);
        kill(srv.pid, SIGCONT);
        pthread_join(th, NULL);
        rc = a.rc;
        printf("  %s, server stopped %d ms (lease %d ms): %s, %s; lost-lock handler ran %d times\n", late_name[kind],
               PAUSE_MS, SHORT_LEASE, dlt_errno_label(rc),
               rc == 0 || rc == EOWNERDEAD ? (a.live ? "a live hold" : "a DEAD hold") : "no hold",
               atomic_load(&lost_calls));
        CU_ASSERT_TRUE(rc == (kind == LATE_ROBUST_DEAD ? EOWNERDEAD : 0) || rc == ETIMEDOUT || rc == ENOLCK);
        if (rc == 0 || rc == EOWNERDEAD) {
            DLT_ASSERT_INT_EQ(a.live, 1);
            DLT_ASSERT_ERR(a.unlock, 0);
        }
        if (rc == EOWNERDEAD) DLT_ASSERT_ERR(a.consistent, 0);
        DLT_ASSERT_INT_EQ(atomic_load(&lost_calls), 0);
        if (kind == LATE_WRLOCK) {
            DLT_ASSERT_ERR(dlock_rwlock_destroy(&rw), 0);
        } else {
            DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
        }
    }
done:
    if (srv.pid > 0) kill(srv.pid, SIGCONT);
    if (c) dlock_client_destroy(c);
    dlt_redis_cleanup(&srv);
}

/* ------------------------------- 4. one connection, different bounds */

/* Every change of a socket's timeouts the counted thread makes
 * (SO_RCVTIMEO, SO_SNDTIMEO), the library's and hiredis's, and every
 * poll it makes: this program's setsockopt and poll come before libc's.
 * Only that thread's: the client's renewal thread, which flushes the live
 * figures once a second, may open a connection of its own meanwhile. */
static atomic_int timeo_sets, timeo_counting, polls;
static pthread_t timeo_thread;

int poll(struct pollfd *fds, nfds_t nfds, int timeout) {
    static int (*real)(struct pollfd *, nfds_t, int);
    if (real == NULL) *(void **)&real = dlsym(RTLD_NEXT, "poll");
    if (atomic_load(&timeo_counting) && pthread_equal(pthread_self(), timeo_thread)) atomic_fetch_add(&polls, 1);
    return real(fds, nfds, timeout);
}

int setsockopt(int fd, int level, int opt, const void *val, socklen_t len) {
    static int (*real)(int, int, int, const void *, socklen_t);
    if (real == NULL) *(void **)&real = dlsym(RTLD_NEXT, "setsockopt");
    if (level == SOL_SOCKET && (opt == SO_RCVTIMEO || opt == SO_SNDTIMEO) && atomic_load(&timeo_counting) &&
        pthread_equal(pthread_self(), timeo_thread))
        atomic_fetch_add(&timeo_sets, 1);
    return real(fd, level, opt, val, len);
}

struct stall {
    dlt_redis *srv;
    double secs;
};

static void *stall_main(void *arg) {
    struct stall *st = arg;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "DEBUG SLEEP %.3f", st->secs);
    freeReplyObject(dlt_redis_cmd(st->srv, cmd));
    return NULL;
}

/* call(m), made while another connection stalls the suite's server for
 * 700 ms (DEBUG SLEEP, 150 ms before the call): its result, its time in
 * *ms. */
static int stalled_call(int (*call)(dlock_mutex_t *), dlock_mutex_t *m, double *ms) {
    struct stall st = { &dlt_server, 0.7 };
    pthread_t th;
    double t0;
    int rc;
    if (pthread_create(&th, NULL, stall_main, &st) != 0) return EAGAIN;
    dlt_sleep_ms(150);
    t0 = dlt_now();
    rc = call(m);
    *ms = ms_since(t0);
    pthread_join(th, NULL);
    return rc;
}

/* A trylock's answer is awaited for the reply floor (200 ms), a lock's or
 * an unlock's for the command timeout (2000 ms): one connection carries
 * both, one after the other, with no system call to change its socket's
 * timeout (each answer's bound is kept by the reads themselves) -- and
 * each call still gets its own bound: an unlock or a lock after a trylock
 * waits out a server stalled for 700 ms, a trylock does not.  Nor does a
 * request poll(0) its pooled connection when the last answer on it is
 * fresh (the kernel's receive time of each read checks it instead:
 * net/conn.c, "A connection's step"): a pair makes the raw pair's system
 * calls, a send and a read a request -- once the connection has asked for
 * those times, which it does only when it has lived a second (before,
 * each take polls). */
static void test_bounds_without_syscalls(void) {
    dlock_client_t *c = NULL;
    dlock_mutex_t m;
    unsigned fresh, after;
    double ms, t0;
    int i, rc;

    /* a client whose renewal thread flushes no live figures: nothing
     * but this thread's calls takes a connection from its pool */
    setenv("DLOCK_STATS", "0", 1);
    rc = dlt_client_make(&c, dlt_server.url, 0);
    unsetenv("DLOCK_STATS");
    DLT_ASSERT_ERR(rc, 0);
    if (c == NULL) return;
    DLT_ASSERT_ERR(mutex_make(&m, "dl/bounds", 0, c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0); /* the connection made, and set once */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    timeo_thread = pthread_self();
    atomic_store(&timeo_sets, 0);
    /* Back to back (each request within the pool's freshness of the
     * last answer, widened here so that a preempted test thread cannot
     * make it otherwise): the connection is taken without a poll(0), its
     * reads dated instead -- once it has asked for its reads' receive
     * times, which a connection younger than dlock__stamps_after_ms has
     * not: until then each take polls. */
    fresh = dlock__pool_fresh_ms;
    dlock__pool_fresh_ms = 60000;
    atomic_store(&polls, 0);
    atomic_store(&timeo_counting, 1);
    for (i = 0; i < 10; i++) {
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    atomic_store(&timeo_counting, 0);
    CU_ASSERT(atomic_load(&polls) >= 20); /* a second not gone: no stamps asked for, each take polls */
    after = dlock__stamps_after_ms;
    dlock__stamps_after_ms = 0;
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0); /* the take asks */
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    dlock__stamps_after_ms = after;
    /* The kernel turns its timestamping on for the first such socket of
     * the host by a work item, which a loaded host runs late; until then
     * reads come undated and takes poll, as they must.  Once a pair goes
     * without a poll the stamps are there (bounded: 3 s). */
    for (i = 1, t0 = dlt_now(); dlt_now() - t0 < 3.0; i++) {
        atomic_store(&polls, 0);
        atomic_store(&timeo_counting, 1);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        atomic_store(&timeo_counting, 0);
        if (atomic_load(&polls) == 0) break;
        dlt_sleep_ms(1); /* (the connection stays fresh: dlock__pool_fresh_ms widened above) */
    }
    printf("  reads dated after %d pair(s), %.1f ms\n", i, (dlt_now() - t0) * 1e3);
    atomic_store(&polls, 0);
    atomic_store(&timeo_counting, 1);
    for (i = 0; i < 50; i++) {
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    }
    atomic_store(&timeo_counting, 0);
    dlock__pool_fresh_ms = fresh;
    DLT_ASSERT_INT_EQ(atomic_load(&timeo_sets), 0); /* 4 a trylock pair before */
    DLT_ASSERT_INT_EQ(atomic_load(&polls), 0);      /* 1 a request before */
    /* A connection idle for longer is checked by a poll(0) when taken:
     * one a request. */
    atomic_store(&polls, 0);
    for (i = 0; i < 5; i++) {
        dlt_sleep_ms(5);
        atomic_store(&timeo_counting, 1);
        DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
        atomic_store(&timeo_counting, 0);
        dlt_sleep_ms(5);
        atomic_store(&timeo_counting, 1);
        DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
        atomic_store(&timeo_counting, 0);
    }
    DLT_ASSERT_INT_EQ(atomic_load(&polls), 10);

    /* after a trylock, an unlock waits for a stalled server */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(stalled_call(dlock_mutex_unlock, &m, &ms), 0);
    CU_ASSERT(ms > 300 && ms < 2000);
    /* and so does a lock */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&m), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    DLT_ASSERT_ERR(stalled_call(dlock_mutex_lock, &m, &ms), 0);
    CU_ASSERT(ms > 300 && ms < 2000);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&m), 0);
    /* a trylock gives up after its floor */
    rc = stalled_call(dlock_mutex_trylock, &m, &ms);
    CU_ASSERT(rc != 0);
    if (rc == 0) (void)dlock_mutex_unlock(&m);
    CU_ASSERT(ms >= 150 && ms < 450);
    printf("  trylock on a stalled server: %s after %.0f ms\n", strerror(rc), ms);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
    dlock_client_destroy(c);
}

/* ------------------------------ 5. a server that stops reading */

#define DEAF_CONNS 8
#define DEAF_HELD 6 /* pipelined unlocks held for the call's write: some 4 KiB */

static int timedlock_100ms(dlock_mutex_t *m) {
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 100);
    return dlock_mutex_timedlock(m, &ts);
}

/* The library's connections to the proxy shrunk (dlt_proxy_shrink_clients)
 * and the proxy made deaf (reading `bytes` of the requests each 20 ms);
 * then the pipelined unlocks of held[] (none is written: each waits, in
 * the output buffer of the thread's connection, for its next request),
 * and fn(m), whose request goes out on that connection with them: some
 * 8 KiB in one write, more than the buffers take.  fn's result, and its
 * time in *ms.  The connection it wrote on is closed after it (half a
 * request written: it must never be used again; the pool may hold
 * others, idle), and the proxy passes again. */
static int deaf_call(dlt_proxy *p, dlock_mutex_t *held, int (*fn)(dlock_mutex_t *), dlock_mutex_t *m, size_t bytes,
                     double *ms) {
    int ports[DEAF_CONNS], n, i, rc, closed = 0;
    double t0;
    for (i = 0; i < DEAF_HELD; i++) DLT_ASSERT_ERR(dlock_mutex_lock(&held[i]), 0);
    n = dlt_proxy_shrink_clients(p, ports, DEAF_CONNS);
    CU_ASSERT(n >= 1 && n <= DEAF_CONNS);
    dlt_proxy_deaf(p, bytes, 20);
    dlt_sleep_ms(30); /* (the proxy's threads see it) */
    for (i = 0; i < DEAF_HELD; i++) DLT_ASSERT_ERR(dlock_mutex_unlock(&held[i]), 0);
    t0 = dlt_now();
    rc = fn(m);
    *ms = ms_since(t0);
    for (i = 0; i < n && i < DEAF_CONNS; i++) closed += !dlt_proxy_client_open(p, ports[i]);
    CU_ASSERT(closed >= 1);
    dlt_proxy_pass(p);
    dlt_proxy_close_all(p);
    dlt_sleep_ms(30);
    return rc;
}

/* A server that stops reading (the proxy, deaf, before it; the sockets'
 * buffers made small): a write waits for room no longer than the call's
 * bound.  A timedlock ends by its deadline + the documented margin, a
 * trylock after its reply floor (200 ms), and an unlock whose request
 * the server reads a few bytes at a time by its unreachable bound (1 s)
 * -- where each used to wait on the socket's send timeout, the command
 * timeout (2 s), anew after each byte taken.  The mutexes have names of
 * the longest, so that their requests fill the buffers fast. */
static void test_send_bounded_by_end(void) {
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    char name[DLOCK_NAME_MAX + 1];
    dlock_mutex_t m, held[3][DEAF_HELD]; /* each call's own: a release held back is lost with it */
    dlock_mutexattr_t a;
    dlock_config_t cfg;
    dlock_client_t *c = NULL;
    double ms;
    int rc, i;
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(dlt_proxy_rcvbuf(p, 1), 0); /* (before any connection: theirs are small) */
    dlock_config_init(&cfg);
    cfg.url = dlt_proxy_url(p);
    cfg.connect_timeout_ms = 400;
    cfg.command_timeout_ms = 2000;
    cfg.unreachable_ms = 1000;
    DLT_ASSERT_ERR(dlock_client_create(&c, &cfg), 0);
    if (c == NULL) goto out;
    memset(name, 'w', DLOCK_NAME_MAX);
    name[DLOCK_NAME_MAX] = '\0';
    DLT_ASSERT_ERR(mutex_make(&m, name, 10000, c, 0, NULL, NULL), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_init(&a), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setclient(&a, c), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setlease(&a, 10000), 0);
    DLT_ASSERT_ERR(dlock_mutexattr_setpipelined(&a, 1), 0);
    for (i = 0; i < 3 * DEAF_HELD; i++) {
        name[0] = (char)('a' + i);
        DLT_ASSERT_ERR(dlock_mutex_init(&held[i / DEAF_HELD][i % DEAF_HELD], name, &a), 0);
    }
    dlock_mutexattr_destroy(&a);

    rc = deaf_call(p, held[0], timedlock_100ms, &m, 0, &ms);
    printf("  timedlock (100 ms), the server not reading: %s after %.0f ms\n", dlt_errno_label(rc), ms);
    CU_ASSERT(rc == ETIMEDOUT || rc == ENOLCK);
    CU_ASSERT(ms <= 100 + LATE_MS);

    rc = deaf_call(p, held[1], dlock_mutex_trylock, &m, 0, &ms);
    printf("  trylock, the server not reading: %s after %.0f ms\n", dlt_errno_label(rc), ms);
    CU_ASSERT_EQUAL(rc, ENOLCK);
    CU_ASSERT(ms < 450);

    DLT_ASSERT_ERR(dlock_mutex_lock(&m), 0);
    rc = deaf_call(p, held[2], dlock_mutex_unlock, &m, 8, &ms);
    printf("  unlock, the server reading 8 bytes each 20 ms: %s after %.0f ms\n", dlt_errno_label(rc), ms);
    CU_ASSERT(ms < 1000 + 450); /* unreachable_ms, a last reply floor and slack */

    /* the server serves again, on fresh connections (the releases held
     * back and lost were asked again once it answered) */
    DLT_ASSERT_ERR(dlock_mutex_trylock(&held[0][0]), 0);
    DLT_ASSERT_ERR(dlock_mutex_unlock(&held[0][0]), 0);
    for (i = 0; i < 3 * DEAF_HELD; i++) DLT_ASSERT_ERR(dlock_mutex_destroy(&held[i / DEAF_HELD][i % DEAF_HELD]), 0);
    DLT_ASSERT_ERR(dlock_mutex_destroy(&m), 0);
out:
    dlock_client_destroy(c);
    dlt_proxy_stop(p);
}

/* A call with less than a ms left: a Redlock master's PING probe
 * (dlock__fd_answers, its answer never coming: the proxy a black hole)
 * ends by the call's end, 0.3 ms away, where a poll's timeout in whole
 * ms, rounded up, ended a ms after its start.  The least of 20 tries
 * (a try the host preempts ends late by the host's doing). */
static void test_sub_ms_end_kept(void) {
    dlt_proxy *p = dlt_proxy_start(dlt_server.port);
    struct sockaddr_in sa;
    double least = 1e9;
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    dlt_proxy_set(p, DLT_PROXY_DROP, 0, NULL, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)dlt_proxy_port(p));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 20; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), r;
        dlock__mono end, old, past;
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT_EQUAL_FATAL(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        end = dlock__now() + 300 * (DLOCK__MS / 1000);
        old = dlock__call_end_set(end);
        r = dlock__fd_answers(fd, 1); /* (conn.c's ms: its bound cut to the end, 1 at least) */
        past = dlock__now() - end;
        dlock__call_end_set(old);
        close(fd);
        CU_ASSERT_EQUAL(r, 0);
        if ((double)past / (double)DLOCK__MS < least) least = (double)past / (double)DLOCK__MS;
    }
    printf("  a PING probe with 0.3 ms left: ends %.3f ms past the call's end at the least\n", least);
    CU_ASSERT(least < 0.4);
    dlt_proxy_stop(p);
}

static const struct dlt_test tests[] = { DLT_TEST(test_idle_server_deadline_kept),
                                         DLT_TEST(test_silent_host_connect_capped),
                                         DLT_TEST(test_turned_away),
                                         DLT_TEST(test_turned_away_sem),
                                         DLT_TEST(test_turned_away_probe_held_sem),
                                         DLT_TEST(test_partition_during_grant_wait),
                                         DLT_TEST(test_late_answer_never_a_dead_hold),
                                         DLT_TEST(test_bounds_without_syscalls),
                                         DLT_TEST(test_send_bounded_by_end),
                                         DLT_TEST(test_sub_ms_end_kept),
                                         { NULL, NULL } };

int main(int argc, char **argv) {
    return dlt_main(argc, argv, "deadline", tests);
}
