/* repro_sem_remade_post.c -- a semaphore with undo that a post makes
 * again after the server lost it holds no units back.
 *
 * Client A takes both units of a semaphore of 2 with undo (lease 600 ms,
 * a lost-unit handler set); FLUSHALL; A posts one unit: the post finds
 * the semaphore gone, makes it again and is told that unit was lost.  A's
 * other unit is still A's by its own clock (last renewal + lease - drift)
 * until it is told lost.  docs/locks.md ("A semaphore the server lost comes
 * back"): a semaphore made again by a call with undo gives no unit for one
 * lease, so that no holder of before overlaps the next.  Client B's
 * trywait must then say EAGAIN while A's other unit is not yet told lost.
 * Exit 0 when it does, 1 when B took a unit meanwhile (seen: at once: the
 * post's "return" is sent with no lease, and the script sets no hold-back
 * without one).  Found by the chaos suite (tests/chaos_suite.c, kind
 * sem_undo, fault flushall: three units out of two). */
#include "fixture.h"

#include <stdio.h>
#include <string.h>

static int lost;

static void on_lost(dlock_sem_t *s, const char *name, void *arg) {
    (void)s;
    (void)name;
    (void)arg;
    __atomic_add_fetch(&lost, 1, __ATOMIC_SEQ_CST);
}

static int open_sem(dlock_sem_t *s, dlock_client_t *c) {
    dlock_semattr_t a;
    int rc = dlock_semattr_init(&a);
    if (rc == 0) rc = dlock_semattr_setclient(&a, c);
    if (rc == 0) rc = dlock_semattr_setundo(&a, 1);
    if (rc == 0) rc = dlock_semattr_setlease(&a, 600);
    if (rc == 0) rc = dlock_semattr_setlostcallback(&a, on_lost, NULL);
    if (rc == 0) rc = dlock_sem_init(s, "remade", 2, &a);
    dlock_semattr_destroy(&a);
    return rc;
}

int main(void) {
    dlt_redis srv;
    dlock_client_t *ca, *cb;
    dlock_sem_t sa, sb;
    memset(&srv, 0, sizeof srv);
    if (dlt_redis_start(&srv, NULL) != 0) return 2;
    if (dlt_client_make(&ca, srv.url, 1500) != 0 || dlt_client_make(&cb, srv.url, 1500) != 0 ||
        open_sem(&sa, ca) != 0 || open_sem(&sb, cb) != 0)
        return 2;
    if (dlock_sem_trywait(&sa) != 0 || dlock_sem_trywait(&sa) != 0) return 2;
    redisReply *r = dlt_redis_cmd(&srv, "FLUSHALL");
    if (r != NULL) freeReplyObject(r);
    int prc = dlock_sem_post(&sa);
    int told = __atomic_load_n(&lost, __ATOMIC_SEQ_CST);
    int brc = dlock_sem_trywait(&sb);
    int told_after = __atomic_load_n(&lost, __ATOMIC_SEQ_CST);
    printf("A took 2 of 2, FLUSHALL, A posted one: %s (units told lost: %d); B's trywait: %s, A's units "
           "told lost by then: %d (want EAGAIN while fewer than 2)\n",
           dlock_err_name(prc), told, dlock_err_name(brc), told_after);
    dlt_sleep_ms(1500);
    dlock_sem_destroy(&sa);
    dlock_sem_destroy(&sb);
    dlock_client_destroy(ca);
    dlock_client_destroy(cb);
    dlt_redis_cleanup(&srv);
    return brc == 0 && told_after < 2 ? 1 : 0;
}
