/* rwlock.c -- dlock_rwlock_*: read-write locks over the lock core.
 *
 * The objects only; every ownership decision is the lock core's
 * (lock.c), which takes a read lock as a shared hold (the readers zset of
 * the lock) and a write lock as the exclusive hold a mutex takes.  The
 * policy lives in the scripts (backend/lua/acquire.lua and
 * acquire_shared.lua): a writer that has to wait registers itself, and
 * readers wait while one is registered (writers first, the default kind)
 * or only while a writer holds the lock
 * (DLOCK_RWLOCK_PREFER_READER, the attribute's kind, per request).  A
 * thread's read lock taken again is counted in the process (lock.c) and
 * never waits, in any kind.
 */
#include <errno.h>
#include <string.h>

#include "api/api.h"


static const dlock__handle_kind rwlock_kind = {
    .what = "rwlock", .live_key = (uintptr_t)0x72776c6f636ba5a5ull, .impl_magic = 0x72776c6bu,
};

/* rw's private state, or EINVAL (api.h dlock__handle_check). */
static int rwlock_get(const dlock_rwlock_t *rw, dlock__obj **out) {
    return DLOCK__HANDLE_GET(&rwlock_kind, rw, out);
}

DLOCK_API int dlock_rwlock_init(dlock_rwlock_t *rw, const char *name, const dlock_mutexattr_t *a) {
    dlock__obj *o = NULL;
    int rc;
    if (rw == NULL) return dlock__seterr(EINVAL, "rwlock is NULL");
    if ((rc = dlock__obj_make(rw, name, a, rwlock_kind.impl_magic, &o)) != 0) return rc;
    if (o->want.process) {
        dlock__obj_free(o);
        return dlock__seterr(EINVAL, "a rwlock is owned by threads: DLOCK_OWNER_PROCESS is for mutexes");
    }
    /* A relock by the holder is EDEADLK, whatever the attributes say; a
     * rwlock is never robust (as pthread rwlocks are not). */
    o->want.type = DLOCK_MUTEX_ERRORCHECK;
    o->want.robust = 0;
    /* Deadlock detection only if the attributes set it (not by type). */
    if (a == NULL || a->__deadlock != 1) o->want.deadlock = 0;
    rw->__impl = o;
    memset(rw->__reserved, 0, sizeof rw->__reserved);
    rw->__magic = dlock__handle_live(&rwlock_kind, rw);
    return 0;
}

DLOCK_API int dlock_rwlock_destroy(dlock_rwlock_t *rw) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    if ((rc = dlock__obj_destroy(o, rw)) != 0) return rc;
    rw->__magic = DLOCK__HANDLE_DESTROYED;
    rw->__impl = NULL;
    return 0;
}

static int rwlock_lock_call(dlock_rwlock_t *rw, int shared, int try, dlock__mono deadline, int bad) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    return dlock__obj_lock(o, shared, try, deadline, bad);
}

static int timed_call(dlock_rwlock_t *rw, int shared, clockid_t clock, const struct timespec *abstime) {
    dlock__mono deadline;
    int rc, bad;
    if ((rc = dlock__timed(clock, abstime, &deadline, &bad)) != 0) return rc;
    return rwlock_lock_call(rw, shared, 0, deadline, bad);
}

DLOCK_API int dlock_rwlock_rdlock(dlock_rwlock_t *rw) {
    return rwlock_lock_call(rw, 1, 0, DLOCK__MONO_NEVER, 0);
}

DLOCK_API int dlock_rwlock_tryrdlock(dlock_rwlock_t *rw) {
    return rwlock_lock_call(rw, 1, 1, 0, 0);
}

DLOCK_API int dlock_rwlock_timedrdlock(dlock_rwlock_t *rw, const struct timespec *abstime) {
    return timed_call(rw, 1, CLOCK_REALTIME, abstime);
}

DLOCK_API int dlock_rwlock_clockrdlock(dlock_rwlock_t *rw, clockid_t clock, const struct timespec *abstime) {
    return timed_call(rw, 1, clock, abstime);
}

DLOCK_API int dlock_rwlock_wrlock(dlock_rwlock_t *rw) {
    return rwlock_lock_call(rw, 0, 0, DLOCK__MONO_NEVER, 0);
}

DLOCK_API int dlock_rwlock_trywrlock(dlock_rwlock_t *rw) {
    return rwlock_lock_call(rw, 0, 1, 0, 0);
}

DLOCK_API int dlock_rwlock_timedwrlock(dlock_rwlock_t *rw, const struct timespec *abstime) {
    return timed_call(rw, 0, CLOCK_REALTIME, abstime);
}

DLOCK_API int dlock_rwlock_clockwrlock(dlock_rwlock_t *rw, clockid_t clock, const struct timespec *abstime) {
    return timed_call(rw, 0, clock, abstime);
}

DLOCK_API int dlock_rwlock_xlock(dlock_rwlock_t *rw, int shared, int flags, clockid_t clock,
                                 const struct timespec *abstime) {
    dlock__mono deadline = DLOCK__MONO_NEVER;
    dlock__obj *o = NULL;
    int rc, bad = 0;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    if (flags & ~(DLOCK_F_TRY | DLOCK_F_INTR)) return dlock__seterr(EINVAL, "unknown flags %#x", (unsigned)flags);
    if (abstime != NULL && (rc = dlock__timed(clock, abstime, &deadline, &bad)) != 0) return rc;
    return dlock__obj_xlock(o, shared != 0, flags & DLOCK_F_TRY, flags & DLOCK_F_INTR, deadline, bad);
}

DLOCK_API int dlock_rwlock_unlock(dlock_rwlock_t *rw) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    return dlock__release(o->c, o->l, 1);
}

DLOCK_API int dlock_rwlock_holds(const dlock_rwlock_t *rw) {
    dlock__obj *o = NULL;
    if (rwlock_get(rw, &o) != 0) return 0;
    if (dlock__holds(o->c, o->l, 0, NULL)) return 2;
    return dlock__holds(o->c, o->l, 1, NULL) ? 1 : 0;
}

DLOCK_API uint64_t dlock_rwlock_fence(const dlock_rwlock_t *rw) {
    dlock__obj *o = NULL;
    uint64_t f = 0;
    if (rwlock_get(rw, &o) != 0) return 0;
    return dlock__holds(o->c, o->l, 1, &f) ? f : 0;
}

/* The lock value block (core/lvb.c): set by the writer, read by a writer
 * or a reader. */
DLOCK_API int dlock_rwlock_lvb_set(dlock_rwlock_t *rw, const void *buf, size_t len) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    if (len > DLOCK_LVB_MAX) return dlock__seterr(EINVAL, "a value block of %zu bytes: at most %d", len, DLOCK_LVB_MAX);
    if (!dlock__holds(o->c, o->l, 0, NULL))
        return dlock__seterr(EPERM, "the calling thread does not hold the write lock of '%.64s'", o->l->k.name);
    return dlock__lvb_set(o->c, o->l, buf, len);
}

DLOCK_API int dlock_rwlock_lvb_get(dlock_rwlock_t *rw, void *buf, size_t cap, size_t *len, int *valid) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    if (!dlock__holds(o->c, o->l, 1, NULL))
        return dlock__seterr(EPERM, "the calling thread does not hold '%.64s'", o->l->k.name);
    return dlock__lvb_get(o->c, o->l, buf, cap, len, valid);
}

/* Conversion: the lock core's (core/convert.c), run as the lock calls
 * are (counted in the object's calls: destroy meanwhile is EBUSY). */
static int upgrade_op(struct dlock_client *c, dlock__lock *l, const dlock__want *w, int try, dlock__mono deadline,
                      int bad_deadline) {
    (void)w;
    (void)try;
    return dlock__upgrade(c, l, deadline, bad_deadline);
}

static int downgrade_op(struct dlock_client *c, dlock__lock *l, const dlock__want *w, int try, dlock__mono deadline,
                        int bad_deadline) {
    (void)w;
    (void)try;
    (void)deadline;
    (void)bad_deadline;
    return dlock__downgrade(c, l);
}

DLOCK_API int dlock_rwlock_upgrade(dlock_rwlock_t *rw) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    return dlock__obj_run(o, &o->want, upgrade_op, 0, DLOCK__MONO_NEVER, 0);
}

static int timed_upgrade(dlock_rwlock_t *rw, clockid_t clock, const struct timespec *abstime) {
    dlock__obj *o = NULL;
    dlock__mono deadline;
    int rc, bad;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    if ((rc = dlock__timed(clock, abstime, &deadline, &bad)) != 0) return rc;
    return dlock__obj_run(o, &o->want, upgrade_op, 0, deadline, bad);
}

DLOCK_API int dlock_rwlock_timedupgrade(dlock_rwlock_t *rw, const struct timespec *abstime) {
    return timed_upgrade(rw, CLOCK_REALTIME, abstime);
}

DLOCK_API int dlock_rwlock_clockupgrade(dlock_rwlock_t *rw, clockid_t clock, const struct timespec *abstime) {
    return timed_upgrade(rw, clock, abstime);
}

DLOCK_API int dlock_rwlock_downgrade(dlock_rwlock_t *rw) {
    dlock__obj *o = NULL;
    int rc;
    if ((rc = rwlock_get(rw, &o)) != 0) return rc;
    return dlock__obj_run(o, &o->want, downgrade_op, 0, DLOCK__MONO_NEVER, 0);
}
