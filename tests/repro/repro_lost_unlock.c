/* repro_lost_unlock.c -- a hold lost with the server's data is not told
 * to the lost-lock handler when unlock is the first to find out.
 *
 * Lock a mutex (lease 600 ms, a lost-lock handler set), FLUSHALL on the
 * server, unlock: unlock returns EPERM (the hold is gone), and the
 * handler must have run for that lost hold (docs/locks.md "Leases and lost
 * locks": it runs once per lost hold, on the holder's thread when one of
 * its calls finds out first).  Exit 0 when it ran, 1 when it did not.
 * Found by the chaos suite (tests/chaos_suite.c: the "told" check under
 * restart-lost and flushall). */
#include "fixture.h"

#include <stdio.h>
#include <string.h>

static int lost;

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    (void)arg;
    __atomic_add_fetch(&lost, 1, __ATOMIC_SEQ_CST);
}

int main(void) {
    dlt_redis srv;
    memset(&srv, 0, sizeof srv);
    if (dlt_redis_start(&srv, NULL) != 0) return 2;
    dlock_client_t *cl;
    dlock_mutexattr_t a;
    dlock_mutex_t m;
    if (dlt_client_make(&cl, srv.url, 1500) != 0 || dlock_mutexattr_init(&a) != 0 ||
        dlock_mutexattr_setclient(&a, cl) != 0 || dlock_mutexattr_setlease(&a, 600) != 0 ||
        dlock_mutexattr_setlostcallback(&a, on_lost, NULL) != 0 || dlock_mutex_init(&m, "lost", &a) != 0)
        return 2;
    int rc = dlock_mutex_lock(&m);
    redisReply *r = dlt_redis_cmd(&srv, "FLUSHALL");
    if (r != NULL) freeReplyObject(r);
    int urc = dlock_mutex_unlock(&m);
    dlt_sleep_ms(1000);
    int n = __atomic_load_n(&lost, __ATOMIC_SEQ_CST);
    printf("lock %s, FLUSHALL, unlock %s; lost-lock handler runs: %d (want 1)\n", dlock_err_name(rc),
           dlock_err_name(urc), n);
    dlock_mutex_destroy(&m);
    dlock_mutexattr_destroy(&a);
    dlock_client_destroy(cl);
    dlt_redis_cleanup(&srv);
    return rc == 0 && urc == EPERM && n == 1 ? 0 : 1;
}
