/* cond.c -- condition variables across hosts: dlock_cond_*.
 *
 * A condition variable is a table entry of its own kind (its key is the
 * zset of its waiters, <prefix>{<name>}:cond, which is also its channel)
 * and one script, cond.lua.  wait: make sure the channel is subscribed,
 * register on the server while still holding the mutex (so a signal sent
 * once the mutex is free cannot miss us), release the mutex, sleep on the
 * one waiting path until a message on the channel, the deadline or the
 * time to refresh the registration; then ask the server whether we are
 * still registered: if not, a signal or broadcast took us, else it was a
 * wake-up for someone else and we sleep again.  Last, take the mutex
 * again, whatever happened, as pthread_cond_wait does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

#define TTL_MS 3000u /* a waiter's registration; refreshed every third of it */

static const dlock__handle_kind cond_kind = {
    .what = "condition variable", .live_key = (uintptr_t)0x636f6e64a5a5a5a5ull, .impl_magic = 0x636f6e64u,
};

/* cv's private state, or EINVAL (api.h dlock__handle_check). */
static int cond_get(const dlock_cond_t *cv, dlock__obj **out) {
    return DLOCK__HANDLE_GET(&cond_kind, cv, out);
}

DLOCK_API int dlock_cond_init_client(dlock_cond_t *cv, const char *name, dlock_client_t *cl) {
    struct dlock_client *c = cl;
    dlock__obj *o;
    int rc;

    if (cv == NULL) return dlock__seterr(EINVAL, "condition variable is NULL");
    if ((o = calloc(1, sizeof *o)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_COND, 1, &o->l)) != 0) {
        free(o);
        return rc;
    }
    o->magic = cond_kind.impl_magic;
    o->c = c;
    cv->__impl = o;
    memset(cv->__reserved, 0, sizeof cv->__reserved);
    cv->__magic = dlock__handle_live(&cond_kind, cv);
    return 0;
}

DLOCK_API int dlock_cond_init(dlock_cond_t *cv, const char *name) {
    return dlock_cond_init_client(cv, name, NULL);
}

DLOCK_API int dlock_cond_destroy(dlock_cond_t *cv) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = cond_get(cv, &o)) != 0) return rc;
    if ((rc = dlock__obj_destroy(o, cv)) != 0) return rc;
    cv->__magic = DLOCK__HANDLE_DESTROYED;
    cv->__impl = NULL;
    return 0;
}

/* One operation on the server, taking along the registrations of earlier
 * waits that could not be taken back; they are forgotten once it
 * succeeds. */
static int cond_op(dlock__obj *o, const char *what, const char *token, long long *result, dlock__mono deadline) {
    struct dlock_client *c = o->c;
    char stale[DLOCK__COND_STALE_MAX][DLOCK__OWNER_LEN + 1];
    const char *sp[DLOCK__COND_STALE_MAX];
    unsigned n, i;
    int rc;
    pthread_mutex_lock(&c->mu);
    n = o->l->nstale;
    if (n > 0) memcpy(stale, o->l->stale, n * sizeof stale[0]);
    pthread_mutex_unlock(&c->mu);
    for (i = 0; i < n; i++) sp[i] = stale[i];
    rc = c->be.ops->cond(&c->be, &o->l->k, what, token, TTL_MS, sp, n, result, deadline);
    if (rc == 0 && n > 0) {
        pthread_mutex_lock(&c->mu);
        /* Drop the ones sent; others may have been added meanwhile. */
        if (o->l->nstale >= n) {
            memmove(o->l->stale, o->l->stale + n, (o->l->nstale - n) * sizeof o->l->stale[0]);
            o->l->nstale -= n;
        }
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

/* A registration that could not be taken back: remembered, to go with
 * the next operation (beyond the limit, it lapses by itself). */
static void cond_stale_add(dlock__obj *o, const char *token) {
    pthread_mutex_lock(&o->c->mu);
    if (o->l->stale == NULL) o->l->stale = calloc(DLOCK__COND_STALE_MAX, sizeof o->l->stale[0]);
    if (o->l->stale != NULL && o->l->nstale < DLOCK__COND_STALE_MAX)
        memcpy(o->l->stale[o->l->nstale++], token, DLOCK__OWNER_LEN + 1);
    pthread_mutex_unlock(&o->c->mu);
}

/* The unreachable bound, or the caller's deadline if that is sooner. */
static dlock__mono bounded(struct dlock_client *c, dlock__mono deadline) {
    dlock__mono b = dlock__unreachable_deadline(&c->be.node);
    return deadline < b ? deadline : b;
}

/* The part of a wait between releasing and retaking the mutex.  Returns
 * 0 (woken, or a wake-up we cannot rule out), ETIMEDOUT, or an error. */
static int sleep_on(dlock__obj *o, const char *token, uint64_t gen, dlock__mono deadline) {
    struct dlock_client *c = o->c;
    dlock__lock *l = o->l;
    long long res;
    int rc;

    for (;;) {
        dlock__mono now = dlock__now(), until = now + (dlock__mono)(TTL_MS / 3) * DLOCK__MS;
        if (deadline < until) until = deadline;
        pthread_mutex_lock(&c->mu);
        (void)dlock__wait(c, l, gen, until, 0);
        gen = l->gen;
        pthread_mutex_unlock(&c->mu);
        if ((now = dlock__now()) >= deadline) {
            /* Timed out, unless a signal took us just now.  One attempt,
             * the deadline having come, of DLOCK__LATE_MS at most (as a
             * timed lock call's end, lock.c), and never past the call's
             * own end if it has one (a step that ran into that time
             * leaves the withdraw only what is left of it); if it fails,
             * the registration goes with the next operation. */
            dlock__mono end = now + (dlock__mono)DLOCK__LATE_MS * DLOCK__MS;
            dlock__mono saved = dlock__call_end_set(end);
            if (saved < end) (void)dlock__call_end_set(saved);
            rc = cond_op(o, "withdraw", token, &res, now);
            (void)dlock__call_end_set(saved);
            if (rc != 0) cond_stale_add(o, token);
            return rc != 0 ? rc : res == 1 ? ETIMEDOUT : 0;
        }
        /* Woken (or time to refresh): are we still waiting?  No answer:
         * a wake-up we cannot rule out (POSIX allows spurious ones); our
         * registration goes with the next operation. */
        if ((rc = cond_op(o, "check", token, &res, bounded(c, deadline))) != 0) {
            cond_stale_add(o, token);
            return 0;
        }
        if (res == 0) return 0; /* a signal or broadcast took us */
    }
}

static int wait_call(dlock_cond_t *cv, dlock_mutex_t *m, dlock__mono deadline) {
    char token[DLOCK__OWNER_LEN + 1];
    dlock__obj *o = NULL, *mo = NULL;
    dlock__thread *self;
    struct dlock_client *c;
    uint64_t gen;
    long long res;
    int rc, rc2;

    if ((rc = cond_get(cv, &o)) != 0) return rc;
    if ((rc = dlock__mutex_obj(m, &mo)) != 0) return rc;
    c = o->c;
    if (mo->c != c) return dlock__seterr(EINVAL, "the mutex is on another client than the condition variable");
    if (!dlock__holds_want(c, mo->l, &mo->want, NULL))
        return dlock__seterr(EPERM, "the calling thread (or, process-owned, its process) does not hold the mutex");
    if ((self = dlock__client_self(c, &rc)) == NULL) return rc;
    dlock__owner_token(c, self, ++self->calls, token);

    pthread_mutex_lock(&c->mu);
    dlock__obj_calls(o, 1);
    o->l->waiters++;
    rc = dlock__wait_ready(c, o->l, deadline, 0); /* a signal's message must reach us */
    gen = o->l->gen;
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && (rc = cond_op(o, "wait", token, &res, bounded(c, deadline))) != 0)
        cond_stale_add(o, token); /* it may have been registered all the same */
    if (rc == 0) {
        if ((rc = dlock_mutex_unlock(m)) != 0) {
            if (cond_op(o, "withdraw", token, &res, dlock__now()) != 0) cond_stale_add(o, token);
        } else {
            rc = sleep_on(o, token, gen, deadline);
            /* Take the mutex again, whatever happened (pthread_cond_wait
             * returns holding it); its own error wins. */
            if ((rc2 = dlock_mutex_lock(m)) != 0) rc = rc2;
        }
    } else if (rc == ETIMEDOUT) {
        rc = dlock__seterr(ETIMEDOUT, "the condition variable was not signalled by the deadline");
    }
    pthread_mutex_lock(&c->mu);
    dlock__wait_done(c, o->l);
    dlock__obj_calls(o, -1);
    pthread_mutex_unlock(&c->mu);
    if (rc == ETIMEDOUT) dlock__seterr(ETIMEDOUT, "the condition variable was not signalled by the deadline");
    return rc;
}

DLOCK_API int dlock_cond_wait(dlock_cond_t *cv, dlock_mutex_t *m) {
    return wait_call(cv, m, DLOCK__MONO_NEVER);
}

DLOCK_API int dlock_cond_clockwait(dlock_cond_t *cv, dlock_mutex_t *m, clockid_t clock, const struct timespec *abstime) {
    dlock__mono deadline;
    int rc, bad;
    if ((rc = dlock__timed(clock, abstime, &deadline, &bad)) != 0) return rc;
    if (bad) return bad; /* a wait always waits */
    return wait_call(cv, m, deadline);
}

DLOCK_API int dlock_cond_timedwait(dlock_cond_t *cv, dlock_mutex_t *m, const struct timespec *abstime) {
    return dlock_cond_clockwait(cv, m, CLOCK_REALTIME, abstime);
}

static int wake(dlock_cond_t *cv, const char *what) {
    dlock__obj *o = NULL;
    long long res;
    int rc;
    if ((rc = cond_get(cv, &o)) != 0) return rc;
    return cond_op(o, what, "-", &res, dlock__unreachable_deadline(&o->c->be.node));
}

DLOCK_API int dlock_cond_signal(dlock_cond_t *cv) {
    return wake(cv, "signal");
}

DLOCK_API int dlock_cond_broadcast(dlock_cond_t *cv) {
    return wake(cv, "broadcast");
}
