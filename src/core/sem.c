/* sem.c -- counting semaphores across hosts: the waiting (api/sem.c has
 * the objects and the public calls).
 *
 * A semaphore is a table entry of its own kind (DLOCK__KIND_SEM), whose
 * keys are its value, its queue of waiters, their registrations' expiry
 * and the units handed to waiters (DLOCK__KS_*), and one script
 * (sem_lua, backend/scripts.c), behind the backend's sem op.
 *
 * wait: one "take" without queueing first (a free unit costs one round
 * trip and no subscription).  Else the call subscribes to the value's
 * channel (the one waiting path's dlock__wait_ready), goes on l->fair
 * with a token of its own, as a fair mutex's waiter does, and asks again,
 * queueing: the server either gives it a unit or puts its token at the
 * end of the queue.  A post with waiters queued hands its unit to the
 * queue's head and publishes that token alone: the subscriber pokes that
 * waiter (dlock__fair_poke), no other thread anywhere wakes, and the
 * woken waiter's next "take" takes the unit.  The poke flag is cleared
 * before each "take" is sent, so a message that comes after it is never
 * missed.  A waiter renews its registration every third of REG_TTL_MS
 * (its "take" again), so that the server drops the registrations of the
 * dead ones (and posts again a unit handed to one that never took it),
 * not those of the living; a lost subscription pokes every waiter
 * (notify.c), which ask again.  A timed wait that reaches its deadline
 * withdraws: a unit handed to it meanwhile is its own, else ETIMEDOUT.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* A waiter's registration on the server, and the time a waiter has to
 * take a unit handed to it; renewed every third of it. */
#define REG_TTL_MS 3000u

/* One op on the server, bounded by the unreachable bound (a timed call's
 * end, set by the caller, bounds it further). */
static int op(struct dlock_client *c, dlock__lock *l, const char *what, const char *token, long long arg,
              long long *res) {
    return c->be.ops->sem(&c->be, &l->k, what, token, REG_TTL_MS, arg, res,
                          dlock__unreachable_deadline(&c->be.node));
}

static int no_sem(struct dlock_client *c) {
    if (c->be.ops->sem != NULL) return 0;
    return dlock__seterr(ENOTSUP, "this deployment has no semaphores");
}

int dlock__sem_create(struct dlock_client *c, dlock__lock *l, unsigned value) {
    long long res;
    int rc;
    if ((rc = no_sem(c)) != 0) return rc;
    return op(c, l, "init", "-", (long long)value, &res);
}

/* A post has a token of its own call: asked again after its answer was
 * lost, the server knows it did it (sem_lua's `done`). */
int dlock__sem_post(struct dlock_client *c, dlock__lock *l, unsigned max) {
    char token[DLOCK__OWNER_LEN + 1];
    dlock__thread *self;
    long long res;
    int rc;
    if ((rc = no_sem(c)) != 0) return rc;
    if ((self = dlock__self(&rc)) == NULL) return rc;
    dlock__owner_token(c, self, ++self->calls, token);
    if ((rc = op(c, l, "post", token, (long long)max, &res)) != 0) return rc;
    if (res == 0) return dlock__seterr(EOVERFLOW, "'%.64s': the value would pass the maximum, %u", l->k.name, max);
    return 0;
}

int dlock__sem_value(struct dlock_client *c, dlock__lock *l, int *value) {
    long long res;
    int rc;
    if ((rc = no_sem(c)) != 0) return rc;
    if ((rc = op(c, l, "value", "-", 0, &res)) != 0) return rc;
    *value = res > 0x7fffffffLL ? 0x7fffffff : (int)res;
    return 0;
}

/* One wait, carried through its steps. */
struct sem_wait {
    struct dlock_client *c;
    dlock__lock *l;
    dlock__mono deadline;
    dlock__fairwait fw; /* on l->fair while it waits: the subscriber pokes it */
    char token[DLOCK__OWNER_LEN + 1];
};

static int timed_out(const dlock__lock *l) {
    return dlock__seterr(ETIMEDOUT, "'%.64s': no unit was free by the deadline", l->k.name);
}

/* An op failed: past the caller's deadline, that is a timeout. */
static int failed(const struct sem_wait *w, int rc) {
    if (rc != 0 && w->deadline != DLOCK__MONO_NEVER && dlock__now() >= w->deadline) return timed_out(w->l);
    return rc;
}

/* Begin (c->mu held): the call is a waiter of l, on l->fair. */
static void wait_begin(struct sem_wait *w) {
    w->l->waiters++;
    w->fw.token = w->token;
    w->fw.efd = -1;
    w->fw.next = w->l->fair;
    w->l->fair = &w->fw;
}

/* End (c->mu held): off l->fair, no longer a waiter. */
static void wait_end(struct sem_wait *w) {
    dlock__fairwait **fp;
    for (fp = &w->l->fair; *fp != NULL && *fp != &w->fw; fp = &(*fp)->next)
        ;
    if (*fp != NULL) *fp = w->fw.next;
    if (w->fw.cv_ok) pthread_cond_destroy(&w->fw.cv);
    dlock__wait_done(w->c, w->l);
}

/* The deadline came: one last op, of DLOCK__LATE_MS at most, takes the
 * registration back (or the unit a post handed us meanwhile). */
static int wait_withdraw(struct sem_wait *w) {
    dlock__mono now = dlock__now();
    dlock__mono saved = dlock__call_end_set(now + (dlock__mono)DLOCK__LATE_MS * DLOCK__MS);
    long long res = 0;
    int rc = op(w->c, w->l, "withdraw", w->token, 0, &res);
    (void)dlock__call_end_set(saved);
    /* Unanswered: the registration lapses by itself (and a unit handed to
     * it goes on to the next waiter) after REG_TTL_MS. */
    return rc == 0 && res == 1 ? 0 : timed_out(w->l);
}

/* The same, called with c->mu held (and held again on return). */
static int wait_withdraw_locked(struct sem_wait *w) {
    int rc;
    pthread_mutex_unlock(&w->c->mu);
    rc = wait_withdraw(w);
    pthread_mutex_lock(&w->c->mu);
    return rc;
}

/* The loop (c->mu held on entry and exit): subscribed, ask (take or
 * queue), sleep until poked, the deadline or the time to renew. */
static int wait_loop(struct sem_wait *w) {
    struct dlock_client *c = w->c;
    long long res;
    int rc;

    for (;;) {
        dlock__mono until;
        if ((rc = dlock__wait_ready(c, w->l, w->deadline, 0)) != 0)
            return rc == ETIMEDOUT ? wait_withdraw_locked(w) : rc;
        w->fw.poked = 0;
        pthread_mutex_unlock(&c->mu);
        rc = op(c, w->l, "take", w->token, 1, &res);
        pthread_mutex_lock(&c->mu);
        if (rc != 0) return failed(w, rc);
        if (res == 1) return 0;
        until = dlock__now() + (dlock__mono)(REG_TTL_MS / 3) * DLOCK__MS;
        if (w->deadline < until) until = w->deadline;
        rc = dlock__wait_turn(c, w->l, &w->fw, until, 0);
        if (rc == ETIMEDOUT && dlock__now() >= w->deadline) return wait_withdraw_locked(w);
    }
}

int dlock__sem_take(struct dlock_client *c, dlock__lock *l, int try, dlock__mono deadline, int bad_deadline) {
    struct sem_wait w;
    dlock__thread *self;
    dlock__mono start = dlock__now(), saved;
    long long res = 0;
    int rc, timed = deadline != DLOCK__MONO_NEVER;

    if ((rc = no_sem(c)) != 0) return rc;
    if ((self = dlock__self(&rc)) == NULL) return rc;
    memset(&w, 0, sizeof w);
    w.c = c;
    w.l = l;
    w.deadline = deadline;
    dlock__owner_token(c, self, ++self->calls, w.token);
    /* A timed call ends by its deadline (or its start, if later) plus
     * DLOCK__LATE_MS, as a timed lock call does (lock.c). */
    saved = dlock__call_end_set(!timed ? DLOCK__MONO_NEVER
                                       : (deadline > start ? deadline : start) + (dlock__mono)DLOCK__LATE_MS * DLOCK__MS);
    /* A free unit: one round trip, no subscription. */
    rc = op(c, l, "take", w.token, 0, &res);
    if (rc != 0) rc = failed(&w, rc);
    else if (res == 1) rc = 0;
    else if (try) rc = dlock__seterr(EAGAIN, "'%.64s': no unit is free", l->k.name);
    else if (bad_deadline) rc = bad_deadline;
    else if (timed && dlock__now() >= deadline) rc = timed_out(l);
    else {
        pthread_mutex_lock(&c->mu);
        wait_begin(&w);
        rc = wait_loop(&w);
        wait_end(&w);
        pthread_mutex_unlock(&c->mu);
    }
    (void)dlock__call_end_set(saved);
    return rc;
}
