/* repro_sem_late.c -- a semaphore's timed wait returns 50..65 ms past its
 * deadline on a link that delays or drops answers.
 *
 * Four clients (command and connect timeouts 400 ms), two threads each,
 * take units of one semaphore of 2 through the fault proxy with 300..900
 * ms timed waits, hold a unit 20..120 ms and post it.  Six times the
 * proxy holds every answer 50..300 ms for 1.5 s, then drops every answer
 * for 900 ms.  README promises a timed call returns within 50 ms of its
 * deadline.  Exit 0 when no wait was later than that, 1 otherwise (seen:
 * 50..65 ms late, about once a run: a wait step that ran up to the call's
 * end, deadline + 25 ms, was followed by the withdraw, which took 25 ms
 * more from then).  Found by the chaos suite (tests/chaos_suite.c, kinds
 * sem and sem_undo, faults drop, freeze and slow). */
#include "fixture.h"
#include "proxy.h"
#include <stdio.h>
#include <string.h>
#define NCL 4
#define NTH 2
static volatile int stop;
static double worst;
static int late, calls;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* The calling thread's time waiting, runnable, for a CPU (ms): a wait
 * that woke on time but was not run is the machine's doing, not the
 * library's (the chaos suite's excuse too). */
static double rq_ms(void) {
    return dlt_thread_cpu_wait() * 1000;
}
static void *taker(void *arg) {
    dlock_sem_t *s = arg;
    unsigned seed = (unsigned)(uintptr_t)arg ^ (unsigned)pthread_self();
    while (!stop) {
        long ms = 300 + (long)(rand_r(&seed) % 600);
        /* (the CPU wait read outside the timed span: reading it takes time) */
        double q = rq_ms(), t = dlt_now();
        struct timespec ts = dlt_abs_in(CLOCK_MONOTONIC, ms);
        int rc = dlock_sem_clockwait(s, CLOCK_MONOTONIC, &ts);
        double end = dlt_now();
        double over = (end - t) * 1000 - (double)ms - (rq_ms() - q);
        pthread_mutex_lock(&mu);
        calls++;
        if (over > worst) worst = over;
        if (over > 50) {
            late++;
            printf("a %ld ms wait returned %s %.1f ms late (its time waiting for a CPU not counted)\n", ms,
                   dlock_err_name(rc), over);
        }
        pthread_mutex_unlock(&mu);
        if (rc == 0) {
            dlt_sleep_ms(20 + (unsigned)(rand_r(&seed) % 100));
            (void)dlock_sem_post(s);
        }
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
    cfg.command_timeout_ms = 400;
    cfg.connect_timeout_ms = 400;
    cfg.unreachable_ms = 1500;
    dlock_client_t *cl[NCL];
    dlock_semattr_t a[NCL];
    dlock_sem_t s[NCL];
    pthread_t th[NCL][NTH];
    unsigned seed = 1;
    for (int i = 0; i < NCL; i++) {
        if (dlock_client_create(&cl[i], &cfg) != 0 || dlock_semattr_init(&a[i]) != 0 ||
            dlock_semattr_setclient(&a[i], cl[i]) != 0 || dlock_sem_init(&s[i], "late", 2, &a[i]) != 0)
            return 2;
        for (int j = 0; j < NTH; j++) pthread_create(&th[i][j], NULL, taker, &s[i]);
    }
    for (int k = 0; k < 6; k++) {
        dlt_sleep_ms(700);
        dlt_proxy_set(p, DLT_PROXY_DELAY, 50 + rand_r(&seed) % 250, NULL, 0);
        dlt_sleep_ms(1500);
        dlt_proxy_set(p, DLT_PROXY_DROP, 0, NULL, 0);
        dlt_sleep_ms(900);
        dlt_proxy_pass(p);
    }
    dlt_sleep_ms(500);
    stop = 1;
    for (int i = 0; i < NCL; i++)
        for (int j = 0; j < NTH; j++) pthread_join(th[i][j], NULL);
    printf("%d waits, %d past deadline + 50 ms; worst %.1f ms past\n", calls, late, worst);
    for (int i = 0; i < NCL; i++) {
        dlock_sem_destroy(&s[i]);
        dlock_semattr_destroy(&a[i]);
        dlock_client_destroy(cl[i]);
    }
    dlt_proxy_stop(p);
    dlt_redis_cleanup(&srv);
    return late == 0 ? 0 : 1;
}
