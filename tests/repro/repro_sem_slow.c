/* repro_sem_slow.c -- a plain semaphore loses its units on a slow link.
 *
 * A semaphore of 2 units (no undo); 4 threads take a unit with 150 ms
 * timed waits, hold it 20 ms and post it.  For 2 s the fault proxy holds
 * every answer DELAY ms (argument; default 200): waits give up at their
 * deadline while the server hands them units.  After the link heals and
 * every call has returned (and 4 s more for registrations to lapse), the
 * value must be 2 again.  Exit 0 when it is, 1 when units were lost (seen:
 * value 0, for ever).  Found by the chaos suite (tests/chaos_suite.c,
 * kind sem, fault slow: no take succeeds after it). */
#include "fixture.h"
#include "proxy.h"
#include <stdio.h>
#include <string.h>
static dlt_proxy *p;
static dlock_sem_t s;
static volatile int stop;
static int took, timedout, other;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *taker(void *arg) {
    (void)arg;
    while (!stop) {
        struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, 150);
        int rc = dlock_sem_clockwait(&s, CLOCK_MONOTONIC, &ts);
        pthread_mutex_lock(&mu);
        if (rc == 0) took++; else if (rc == ETIMEDOUT) timedout++; else other++;
        pthread_mutex_unlock(&mu);
        if (rc == 0) { dlt_sleep_ms(20); dlock_sem_post(&s); }
    }
    return NULL;
}
int main(int argc, char **argv) {
    unsigned delay = argc > 1 ? (unsigned)atoi(argv[1]) : 200;
    dlt_redis srv;
    memset(&srv, 0, sizeof srv);
    if (dlt_redis_start(&srv, NULL) != 0) return 1;
    p = dlt_proxy_start(srv.port);
    dlock_client_t *cl, *direct;
    dlock_config_t cfg;
    dlock_config_init(&cfg);
    cfg.url = dlt_proxy_url(p);
    cfg.command_timeout_ms = 400; cfg.connect_timeout_ms = 400; cfg.unreachable_ms = 1500;
    dlock_semattr_t a;
    if (dlock_client_create(&cl, &cfg) != 0 || dlt_client_make(&direct, srv.url, 1500) != 0 ||
        dlock_semattr_init(&a) != 0 || dlock_semattr_setclient(&a, cl) != 0 ||
        dlock_sem_init(&s, "slow", 2, &a) != 0)
        return 2;
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, taker, NULL);
    dlt_sleep_ms(500);
    dlt_proxy_set(p, DLT_PROXY_DELAY, delay, NULL, 0);
    dlt_sleep_ms(2000);
    dlt_proxy_pass(p);
    dlt_sleep_ms(500);
    stop = 1;
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    dlt_sleep_ms(4000); /* registrations of given-up waits lapse (3 s) */
    dlock_sem_info_t info;
    dlock_sem_info(direct, "slow", &info);
    printf("delay %u ms: took=%d ETIMEDOUT=%d other=%d; value now %d (want 2), waiters %u\n", delay, took,
           timedout, other, info.value, info.waiters);
    dlock_sem_destroy(&s);
    dlock_semattr_destroy(&a);
    dlock_client_destroy(cl);
    dlock_client_destroy(direct);
    dlt_proxy_stop(p);
    dlt_redis_cleanup(&srv);
    return info.value == 2 ? 0 : 1;
}
