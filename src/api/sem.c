/* sem.c -- named counting semaphores across hosts: dlock_sem_* and
 * dlock_semattr_*.
 *
 * A semaphore object holds a table entry of the semaphore kind
 * (DLOCK__KIND_SEM) on its client; the waiting, the ops on the server
 * and what they mean are the core's (core/sem.c) and the script's
 * (backend/lua/sem.lua).  This file checks the arguments, counts
 * the calls in flight (destroy gives EBUSY while a thread waits), turns
 * deadlines into monotonic ones and blocks signals around an
 * interruptible wait, as the mutex's calls do, and keeps what the
 * attributes say of undo in the object's want (dlock__want: undo, lease,
 * lost-unit handler).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

#define ATTR_MAGIC 0x73617474u /* "satt" */

/* ---------------------------------------------------------- attributes */

static int attr_check(const dlock_semattr_t *a) {
    if (a == NULL) return dlock__seterr(EINVAL, "semaphore attribute object is NULL");
    if (a->__magic != ATTR_MAGIC) return dlock__seterr(EINVAL, "semaphore attribute object is not initialised");
    return 0;
}

DLOCK_API int dlock_semattr_init(dlock_semattr_t *a) {
    if (a == NULL) return dlock__seterr(EINVAL, "semaphore attribute object is NULL");
    memset(a, 0, sizeof *a);
    a->__magic = ATTR_MAGIC;
    a->__lease_ms = DLOCK_LEASE_DEFAULT_MS;
    return 0;
}

DLOCK_API int dlock_semattr_destroy(dlock_semattr_t *a) {
    int rc = attr_check(a);
    if (rc) return rc;
    a->__magic = 0;
    return 0;
}

DLOCK_API int dlock_semattr_setclient(dlock_semattr_t *a, dlock_client_t *c) {
    int rc = attr_check(a);
    if (rc) return rc;
    a->__client = c;
    return 0;
}

/* Undo: each unit taken is leased to the process (core/sem.c). */
DLOCK_API int dlock_semattr_setundo(dlock_semattr_t *a, int undo) {
    int rc = attr_check(a);
    if (rc) return rc;
    if (undo != 0 && undo != 1) return dlock__seterr(EINVAL, "undo %d is not 0 or 1", undo);
    a->__undo = undo;
    return 0;
}

DLOCK_API int dlock_semattr_setlostcallback(dlock_semattr_t *a, dlock_sem_lost_fn fn, void *arg) {
    int rc = attr_check(a);
    if (rc) return rc;
    a->__lost_fn = fn;
    a->__lost_arg = arg;
    return 0;
}

DLOCK_API int dlock_semattr_setlease(dlock_semattr_t *a, unsigned lease_ms) {
    int rc = attr_check(a);
    if (rc) return rc;
    if ((rc = dlock__lease_check("lease", lease_ms)) != 0) return rc;
    a->__lease_ms = lease_ms;
    return 0;
}

/* ------------------------------------------------------------- objects */

static const dlock__handle_kind sem_kind = {
    .what = "semaphore", .live_key = (uintptr_t)0x73656d61a5a5a5a5ull, .impl_magic = 0x73656d61u,
};

/* s's private state, or EINVAL (api.h dlock__handle_check). */
static int sem_get(const dlock_sem_t *s, dlock__obj **out) {
    return DLOCK__HANDLE_GET(&sem_kind, s, out);
}

DLOCK_API int dlock_sem_init(dlock_sem_t *s, const char *name, unsigned value, const dlock_semattr_t *a) {
    struct dlock_client *c = NULL;
    dlock__obj *o;
    int rc;

    if (s == NULL) return dlock__seterr(EINVAL, "semaphore is NULL");
    if (value > DLOCK_SEM_VALUE_MAX)
        return dlock__seterr(EINVAL, "value %u is past DLOCK_SEM_VALUE_MAX (%d)", value, DLOCK_SEM_VALUE_MAX);
    if (a != NULL) {
        if ((rc = attr_check(a)) != 0) return rc;
        c = a->__client;
    }
    if ((o = calloc(1, sizeof *o)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    o->want.undo = a != NULL && a->__undo;
    o->want.lease_ms = a != NULL ? a->__lease_ms : DLOCK_LEASE_DEFAULT_MS;
    o->want.sem_lost_fn = a != NULL ? a->__lost_fn : NULL;
    o->want.lost_arg = a != NULL ? a->__lost_arg : NULL;
    o->want.lost_obj = s;
    o->want.sem_value = value;
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_SEM, 1, &o->l)) != 0) {
        free(o);
        return rc;
    }
    o->c = c;
    if ((rc = dlock__sem_create(c, o->l, value)) != 0) {
        dlock__entry_close(c, o->l, 1);
        free(o);
        return rc;
    }
    o->magic = sem_kind.impl_magic;
    s->__impl = o;
    memset(s->__reserved, 0, sizeof s->__reserved);
    s->__magic = dlock__handle_live(&sem_kind, s);
    return 0;
}

/* The process's leased units taken through s stay (core/sem.c); their
 * lost-unit handler no longer names s.  A take of the calling thread's
 * whose answer was lost is undone first (its unit, if it took one, goes
 * back: dlock__sem_settle).  (l is kept alive through
 * dlock__obj_destroy by `users`.) */
DLOCK_API int dlock_sem_destroy(dlock_sem_t *s) {
    struct dlock_client *c;
    dlock__obj *o = NULL;
    dlock__lock *l;
    dlock__hold *h;
    int rc;
    if ((rc = sem_get(s, &o)) != 0) return rc;
    c = o->c;
    l = o->l;
    pthread_mutex_lock(&c->mu);
    l->users++;
    pthread_mutex_unlock(&c->mu);
    dlock__sem_settle(c, l); /* the units of this thread's takes whose answer was lost */
    rc = dlock__obj_destroy(o, s);
    pthread_mutex_lock(&c->mu);
    if (rc == 0)
        for (h = l->units; h != NULL; h = h->next)
            if (h->lost_obj == s) h->lost_obj = NULL;
    l->users--;
    dlock__lock_maybe_free(c, l);
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) return rc;
    s->__magic = DLOCK__HANDLE_DESTROYED;
    s->__impl = NULL;
    return 0;
}

/* A wait through the semaphore's object (dlock__obj_run: counted, and
 * with intr interruptible by the pselect idiom of object.c). */
static int take(dlock_sem_t *s, int try, int intr, dlock__mono deadline, int bad) {
    dlock__obj *o = NULL;
    dlock__want w;
    int rc;
    if ((rc = sem_get(s, &o)) != 0) return rc;
    w = o->want;
    w.intr = intr;
    return dlock__obj_run(o, &w, dlock__sem_take, try, deadline, bad);
}

DLOCK_API int dlock_sem_wait(dlock_sem_t *s) {
    return take(s, 0, 0, DLOCK__MONO_NEVER, 0);
}

DLOCK_API int dlock_sem_trywait(dlock_sem_t *s) {
    return take(s, 1, 0, DLOCK__MONO_NEVER, 0);
}

DLOCK_API int dlock_sem_clockwait(dlock_sem_t *s, clockid_t clock, const struct timespec *abstime) {
    dlock__mono deadline;
    dlock__obj *o = NULL;
    int rc, bad;
    if ((rc = sem_get(s, &o)) != 0) return rc;
    if ((rc = dlock__timed(clock, abstime, &deadline, &bad)) != 0) return rc;
    return take(s, 0, 0, deadline, bad);
}

DLOCK_API int dlock_sem_xwait(dlock_sem_t *s, int flags, clockid_t clock, const struct timespec *abstime) {
    dlock__mono deadline = DLOCK__MONO_NEVER;
    dlock__obj *o = NULL;
    int rc, bad = 0;
    if ((rc = sem_get(s, &o)) != 0) return rc;
    if (flags & ~(DLOCK_F_TRY | DLOCK_F_INTR)) return dlock__seterr(EINVAL, "unknown flags %#x", (unsigned)flags);
    if (abstime != NULL && (rc = dlock__timed(clock, abstime, &deadline, &bad)) != 0) return rc;
    return take(s, (flags & DLOCK_F_TRY) != 0, (flags & DLOCK_F_INTR) != 0, deadline, bad);
}

DLOCK_API int dlock_sem_timedwait(dlock_sem_t *s, const struct timespec *abstime) {
    return dlock_sem_clockwait(s, CLOCK_REALTIME, abstime);
}

DLOCK_API int dlock_sem_post(dlock_sem_t *s) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = sem_get(s, &o)) != 0) return rc;
    return dlock__sem_post(o->c, o->l, o->want.sem_value, DLOCK_SEM_VALUE_MAX);
}

DLOCK_API int dlock_sem_getvalue(dlock_sem_t *s, int *value) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = sem_get(s, &o)) != 0) return rc;
    if (value == NULL) return dlock__seterr(EINVAL, "value pointer is NULL");
    return dlock__sem_value(o->c, o->l, o->want.sem_value, value);
}
