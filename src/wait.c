/* wait.c -- the one waiting path every blocking call goes through.
 *
 * A waiter never polls the server in a loop.  It (1) makes sure a release
 * of the lock will wake it: the lock's release channel is subscribed and
 * the subscription confirmed; (2) tries to acquire, remembering the lock's
 * generation before the try; (3) if the lock was busy, sleeps until the
 * generation moves (a release notification, a local unlock, a lost
 * subscription), the holder's lease runs out, or its own deadline passes,
 * whichever is first; then tries again.  Because the subscription is
 * active before the try and the generation is read before it too, a
 * release that happens after the try always moves the generation: no
 * release is missed.
 */
#include <errno.h>

#include "dlock-int.h"

int dlock__wait_ready(struct dlock_client *c, dlock__lock *l, dlock__mono deadline) {
    dlock__mono bound = dlock__unreachable_deadline(c);
    int rc;

    for (;;) {
        if (l->sub_state == DLOCK__SUB_ACTIVE && c->sub_connected) return 0;
        if ((rc = dlock__notify_want(c, l)) != 0) return rc;
        rc = dlock__cond_wait_until(&l->cv, &c->mu, deadline < bound ? deadline : bound);
        if (rc == ETIMEDOUT) {
            if (l->sub_state == DLOCK__SUB_ACTIVE && c->sub_connected) return 0;
            if (deadline <= bound && dlock__now() >= deadline) return ETIMEDOUT;
            if (dlock__now() >= bound)
                return dlock__seterr(ENOLCK, "%s: cannot subscribe to release notifications",
                                     c->conf.redacted_url);
        }
    }
}

int dlock__wait(struct dlock_client *c, dlock__lock *l, uint64_t gen, dlock__mono until) {
    while (l->gen == gen) {
        if (dlock__cond_wait_until(&l->cv, &c->mu, until) == ETIMEDOUT) return ETIMEDOUT;
    }
    return 0;
}

void dlock__wait_done(struct dlock_client *c, dlock__lock *l) {
    (void)c;
    if (l->waiters > 0 && --l->waiters == 0) l->sub_idle_since = dlock__now();
    dlock__notify_poke(c); /* the subscriber starts the linger clock */
}
