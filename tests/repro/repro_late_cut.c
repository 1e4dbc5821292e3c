/* repro_late_cut.c -- timed lock calls return up to ~400 ms past their
 * deadline when connections are cut.
 *
 * Three clients (command and connect timeouts 400 ms) contend for one
 * mutex through the fault proxy with 300..1200 ms timed calls; eight times
 * the proxy closes every connection, and every new one right after
 * accept, for 700 ms.  docs/locks.md promises a timed call returns within 50 ms
 * of its deadline.  Exit 0 when no call was later than that, 1 otherwise
 * (seen: 150..420 ms late, right after the proxy passes again).  Found by
 * the chaos suite (tests/chaos_suite.c, faults cut and restart). */
#include "fixture.h"
#include "proxy.h"
#include <stdio.h>
#include <string.h>
static volatile int stop;
static double worst;
static int late;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *contender(void *arg) {
    dlock_mutex_t *m = arg;
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (!stop) {
        long ms = 300 + (long)(rand_r(&seed) % 900);
        double t = dlt_now();
        struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, ms);
        int rc = dlock_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
        double over = (dlt_now() - t) * 1000 - (double)ms;
        pthread_mutex_lock(&mu);
        if (over > worst) worst = over;
        if (over > 50) { late++; printf("a %ld ms call returned %s %.1f ms late\n", ms, dlock_err_name(rc), over); }
        pthread_mutex_unlock(&mu);
        if (rc == 0) { dlt_sleep_ms(50 + (unsigned)(rand_r(&seed) % 100)); dlock_mutex_unlock(m); }
    }
    return NULL;
}
int main(void) {
    dlt_redis srv;
    memset(&srv, 0, sizeof srv);
    if (dlt_redis_start(&srv, NULL) != 0) return 1;
    dlt_proxy *p = dlt_proxy_start(srv.port);
    dlock_config_t cfg;
    dlock_config_init(&cfg);
    cfg.url = dlt_proxy_url(p);
    cfg.command_timeout_ms = 400; cfg.connect_timeout_ms = 400; cfg.unreachable_ms = 1500;
    dlock_client_t *cl[3];
    dlock_mutex_t m[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        dlock_client_create(&cl[i], &cfg);
        dlt_mutex_make(&m[i], "late", 600, cl[i]);
        pthread_create(&th[i], NULL, contender, &m[i]);
    }
    for (int k = 0; k < 8; k++) {
        dlt_sleep_ms(800);
        dlt_proxy_set(p, DLT_PROXY_CLOSE, 0, NULL, 0);
        dlt_proxy_close_all(p);
        dlt_sleep_ms(700);
        dlt_proxy_pass(p);
    }
    dlt_sleep_ms(1000);
    stop = 1;
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    printf("late calls: %d, worst %.1f ms past the deadline\n", late, worst);
    for (int i = 0; i < 3; i++) {
        dlock_mutex_destroy(&m[i]);
        dlock_client_destroy(cl[i]);
    }
    dlt_proxy_stop(p);
    dlt_redis_cleanup(&srv);
    return late > 0;
}
