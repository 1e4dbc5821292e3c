/* object.c -- what mutexes and rwlocks share as objects: the private
 * state behind the caller's dlock_mutex_t / dlock_rwlock_t (its name's
 * table entry, its attributes as a dlock__want), made at init, counted
 * through each lock call (so destroy can say EBUSY) and freed at destroy;
 * and the deadline of a timed call.  The ownership itself is the core's
 * (core/lock.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

/* The pipelined unlock: as the attribute says, else as the client's URL
 * (pipelined=1) for the mutexes that can have it.  Only a NORMAL/DEFAULT
 * mutex that is not robust can: the others' unlock promises (EPERM,
 * EOWNERDEAD) need the server's answer first. */
static int pipelined_get(const struct dlock_client *c, const dlock_mutexattr_t *a, dlock__want *w) {
    int can = (a->__type == DLOCK_MUTEX_NORMAL || a->__type == DLOCK_MUTEX_DEFAULT) &&
              a->__robust != DLOCK_MUTEX_ROBUST;
    if (a->__pipelined == 1 && !can)
        return dlock__seterr(EINVAL, "the pipelined unlock is for NORMAL or DEFAULT mutexes that are not robust: %s",
                             a->__robust == DLOCK_MUTEX_ROBUST    ? "this one is robust"
                             : a->__type == DLOCK_MUTEX_RECURSIVE ? "this one is RECURSIVE"
                                                                  : "this one is ERRORCHECK");
    w->pipelined = a->__pipelined == 1 || (a->__pipelined == 0 && can && c->be.node.conf.pipelined);
    return 0;
}

/* What every lock object (mutex, rwlock) does at init: checks the name
 * and the attributes, finds the client and takes a reference on the
 * lock's table entry.  *w gets the attributes' type, robustness, lease
 * and lost-lock handler (with obj as the handler's object).  Nothing is
 * held on error. */
static int object_open(const char *name, const dlock_mutexattr_t *attr, void *obj, struct dlock_client **cp,
                       dlock__lock **lp, dlock__want *w) {
    dlock_mutexattr_t a;
    struct dlock_client *c;
    int rc;

    if ((rc = dlock__attr_get(attr, &a)) != 0) return rc;
    c = a.__client;
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_LOCK, 1, lp)) != 0) return rc;
    memset(w, 0, sizeof *w);
    w->type = a.__type == DLOCK_MUTEX_DEFAULT ? DLOCK_MUTEX_ERRORCHECK : a.__type;
    w->robust = a.__robust == DLOCK_MUTEX_ROBUST;
    w->fair = a.__fair != 0;
    w->caching = a.__caching != 0;
    w->readfirst = a.__rwkind == DLOCK_RWLOCK_PREFER_READER;
    w->process = a.__owner == DLOCK_OWNER_PROCESS;
    if (w->process && a.__type == DLOCK_MUTEX_DEFAULT) w->type = DLOCK_MUTEX_NORMAL; /* (the only kind it can be) */
    if (w->process && w->type != DLOCK_MUTEX_NORMAL) {
        dlock__entry_close(c, *lp, 1);
        return dlock__seterr(EINVAL, "a process-owned mutex must be NORMAL or DEFAULT: an %s one checks the "
                             "thread that holds it", w->type == DLOCK_MUTEX_RECURSIVE ? "RECURSIVE" : "ERRORCHECK");
    }
    /* Deadlock detection: as set, or on for an ERRORCHECK mutex (rwlock.c
     * keeps only what was set); on Redlock, which keeps no waits, a
     * setting is ENOTSUP. */
    w->deadlock = a.__deadlock == 1 || (a.__deadlock == 0 && a.__type == DLOCK_MUTEX_ERRORCHECK && !w->process);
    if (w->deadlock && c->be.ops->waits == NULL) {
        w->deadlock = 0;
        if (a.__deadlock == 1) {
            dlock__entry_close(c, *lp, 1);
            return dlock__seterr(ENOTSUP, "deadlock detection is not offered on Redlock (its masters keep no waits)");
        }
    }
    if ((rc = pipelined_get(c, &a, w)) != 0) {
        dlock__entry_close(c, *lp, 1);
        return rc;
    }
    w->lease_ms = a.__lease_ms;
    w->delay_ms = a.__lock_delay ? a.__lock_delay - 1 : c->be.node.conf.lock_delay_ms;
    w->lost_fn = a.__lost_fn;
    w->lost_arg = a.__lost_arg;
    w->lost_obj = obj;
    w->risk_fn = a.__risk_fn;
    w->risk_arg = a.__risk_arg;
    w->risk_margin_ms = a.__risk_margin_ms;
    *cp = c;
    return 0;
}

static void object_close(struct dlock_client *c, dlock__lock *l) {
    dlock__entry_close(c, l, 1);
}

/* Is l held, by a thread of this process, through object obj?  Such an
 * object cannot be destroyed (EBUSY).  c->mu held. */
static int object_held(const dlock__lock *l, const void *obj) {
    const dlock__hold *h;
    if (dlock__hold_is_live(&l->x) && l->x.lost_obj == obj) return 1;
    for (h = l->readers; h != NULL; h = h->next)
        if (dlock__hold_is_live(h) && h->lost_obj == obj) return 1;
    return 0;
}

/* The deadline of a timed call: EINVAL for a bad clock or a NULL abstime
 * at once; a bad tv_nsec only in *bad, since POSIX lets a call that need
 * not wait succeed without looking at it. */
int dlock__timed(clockid_t clock, const struct timespec *abstime, dlock__mono *deadline, int *bad) {
    if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC)
        return dlock__seterr(EINVAL, "clock must be CLOCK_REALTIME or CLOCK_MONOTONIC");
    if (abstime == NULL) return dlock__seterr(EINVAL, "abstime is NULL");
    *deadline = 0;
    *bad = dlock__deadline(clock, abstime, deadline);
    if (*bad) *deadline = 0;
    return 0;
}

/* ------------------------------------------------------------- objects */

int dlock__obj_make(void *obj, const char *name, const dlock_mutexattr_t *attr, unsigned magic, dlock__obj **out) {
    dlock__obj *o;
    int rc;
    if ((o = calloc(1, sizeof *o)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    if ((rc = object_open(name, attr, obj, &o->c, &o->l, &o->want)) != 0) {
        free(o);
        return rc;
    }
    o->magic = magic;
    *out = o;
    return 0;
}

void dlock__obj_free(dlock__obj *o) {
    object_close(o->c, o->l);
    o->magic = 0;
    free(o);
}

/* The checks of destroy: EBUSY while a thread of this process holds the
 * lock through obj, or waits in one of its lock calls; then frees o. */
int dlock__obj_destroy(dlock__obj *o, const void *obj) {
    struct dlock_client *c = o->c;
    dlock__lock *l = o->l;
    dlock__hold *h;
    if (o->want.pipelined) /* its releases' answers first (bounded): the handler may still be told */
        dlock__pipe_flush(c, dlock__now() + (dlock__mono)c->be.node.conf.command_timeout_ms * DLOCK__MS);
    pthread_mutex_lock(&c->mu);
    if (object_held(l, obj)) {
        pthread_mutex_unlock(&c->mu);
        return dlock__seterr(EBUSY, "'%.64s' is held by a thread of this process", l->k.name);
    }
    dlock__obj_calls(o, 0);
    if (o->calls > 0) {
        pthread_mutex_unlock(&c->mu);
        return dlock__seterr(EBUSY, "'%.64s' has threads waiting in lock", l->k.name);
    }
    if (dlock__hold_is_cached(&l->x) && l->objrefs == 1) {
        /* The last object of the name goes: nothing can take the cached
         * lock any more, so it goes back to the server. */
        dlock__cache_drop(c, l, dlock__unreachable_deadline(&c->be.node));
    }
    /* Lost holds may still name obj for their handler: no more. */
    if (l->x.lost_obj == obj) l->x.lost_obj = NULL;
    for (h = l->readers; h != NULL; h = h->next)
        if (h->lost_obj == obj) h->lost_obj = NULL;
    pthread_mutex_unlock(&c->mu);
    dlock__obj_free(o);
    return 0;
}

void dlock__obj_calls(dlock__obj *o, int delta) {
    pid_t me = dlock__pid();
    if (o->calls_pid != me) { /* counted by the parent, whose threads are not here */
        o->calls_pid = me;
        o->calls = 0;
    }
    if (delta < 0 && o->calls == 0) return;
    o->calls = (unsigned)((int)o->calls + delta);
}

/* A lock call through an object: counted, so destroy can say EBUSY. */
int dlock__obj_lock(dlock__obj *o, int shared, int try, dlock__mono deadline, int bad_deadline) {
    return dlock__obj_xlock(o, shared, try, 0, deadline, bad_deadline);
}

int dlock__obj_xlock(dlock__obj *o, int shared, int try, int intr, dlock__mono deadline, int bad_deadline) {
    dlock__want w = o->want;
    w.shared = shared;
    w.intr = intr;
    return dlock__obj_run(o, &w, dlock__acquire, try, deadline, bad_deadline);
}

int dlock__obj_run(dlock__obj *o, const dlock__want *w, dlock__obj_op op, int try, dlock__mono deadline,
                   int bad_deadline) {
    sigset_t all, caller;
    int intr = w->intr, rc;
    pthread_mutex_lock(&o->c->mu);
    dlock__obj_calls(o, 1);
    pthread_mutex_unlock(&o->c->mu);
    if (intr) {
        /* The pselect idiom: signals stay blocked through the round trips
         * and are let in only inside the sleep (ppoll with the caller's
         * mask), so one that arrives during a round trip is not lost: it
         * ends the next sleep at once with EINTR, or, if the lock came
         * first, is delivered when the caller's mask comes back. */
        sigfillset(&all);
        sigdelset(&all, SIGSEGV);
        sigdelset(&all, SIGBUS);
        sigdelset(&all, SIGFPE);
        sigdelset(&all, SIGILL);
        pthread_sigmask(SIG_BLOCK, &all, &caller);
        dlock__intr_mask_set(&caller);
    }
    rc = op(o->c, o->l, w, try, deadline, bad_deadline);
    if (intr) {
        dlock__intr_mask_set(NULL);
        pthread_sigmask(SIG_SETMASK, &caller, NULL);
    }
    pthread_mutex_lock(&o->c->mu);
    dlock__obj_calls(o, -1);
    pthread_mutex_unlock(&o->c->mu);
    return rc;
}
