/* mutex.c -- dlock_mutex_*: the mutex objects over the lock core.
 *
 * This file owns the objects: validation of the caller's memory (a magic
 * derived from the object's address, so an uninitialised, copied or
 * destroyed object gives EINVAL), initialisation (also lazily, for
 * DLOCK_MUTEX_INITIALIZER) and destruction.  Every ownership decision is
 * the lock core's (lock.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

static const dlock__handle_kind mutex_kind = {
    .what = "mutex", .live_key = (uintptr_t)0x6d75746578a5a5a5ull, .impl_magic = 0x6d757478u, .lazy = 1,
};

typedef dlock__obj dlock__mutex;

/* The private state of a statically initialised mutex, made on its
 * first use (the first thread to publish it wins). */
static int mutex_lazy(dlock_mutex_t *m, void **impl) {
    dlock__mutex *mx, *expected = NULL;
    int rc;
    mx = __atomic_load_n((dlock__mutex **)&m->__impl, __ATOMIC_ACQUIRE);
    if (mx == NULL) {
        if ((rc = dlock__obj_make(m, m->__static_name, NULL, mutex_kind.impl_magic, &mx)) != 0) return rc;
        if (!__atomic_compare_exchange_n((dlock__mutex **)&m->__impl, &expected, mx, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            dlock__obj_free(mx);
            mx = expected;
        }
    }
    *impl = mx;
    return 0;
}

/* The private state of m, or EINVAL (api.h dlock__handle_check). */
static int mutex_get(const dlock_mutex_t *cm, dlock__mutex **out) {
    dlock_mutex_t *m = (dlock_mutex_t *)cm;
    uintptr_t magic = m != NULL ? __atomic_load_n(&m->__magic, __ATOMIC_ACQUIRE) : 0;
    void *impl = NULL;
    int rc;
    *out = NULL;
    if (magic == DLOCK__MAGIC_STATIC) {
        if ((rc = mutex_lazy(m, &impl)) != 0) return rc;
    } else if (m != NULL) {
        impl = m->__impl;
    }
    return dlock__handle_check(&mutex_kind, m, magic, impl, out);
}

DLOCK_API int dlock_mutex_init(dlock_mutex_t *m, const char *name, const dlock_mutexattr_t *a) {
    dlock__mutex *mx;
    int rc;
    if (m == NULL) return dlock__seterr(EINVAL, "mutex is NULL");
    if ((rc = dlock__obj_make(m, name, a, mutex_kind.impl_magic, &mx)) != 0) return rc;
    m->__static_name = NULL;
    m->__impl = mx;
    memset(m->__reserved, 0, sizeof m->__reserved);
    __atomic_store_n(&m->__magic, dlock__handle_live(&mutex_kind, m), __ATOMIC_RELEASE);
    return 0;
}

DLOCK_API int dlock_mutex_destroy(dlock_mutex_t *m) {
    dlock__mutex *mx;
    int rc;

    if (m == NULL) return dlock__seterr(EINVAL, "mutex is NULL");
    if (m->__magic == DLOCK__MAGIC_STATIC && m->__impl == NULL) {
        m->__magic = DLOCK__HANDLE_DESTROYED; /* never used: nothing to free */
        return 0;
    }
    if ((rc = mutex_get(m, &mx)) != 0) return rc;
    if ((rc = dlock__obj_destroy(mx, m)) != 0) return rc;
    m->__magic = DLOCK__HANDLE_DESTROYED;
    m->__impl = NULL;
    return 0;
}

/* For cond.c: the private state of a mutex. */
int dlock__mutex_obj(dlock_mutex_t *m, dlock__obj **out) {
    return mutex_get(m, out);
}

static int mutex_lock_call(dlock_mutex_t *m, int try, dlock__mono deadline, int bad_deadline) {
    dlock__mutex *mx;
    int rc;
    if ((rc = mutex_get(m, &mx)) != 0) return rc;
    return dlock__obj_lock(mx, 0, try, deadline, bad_deadline);
}

DLOCK_API int dlock_mutex_lock(dlock_mutex_t *m) {
    return mutex_lock_call(m, 0, DLOCK__MONO_NEVER, 0);
}

DLOCK_API int dlock_mutex_trylock(dlock_mutex_t *m) {
    return mutex_lock_call(m, 1, 0, 0);
}

DLOCK_API int dlock_mutex_clocklock(dlock_mutex_t *m, clockid_t clock, const struct timespec *abstime) {
    dlock__mono deadline;
    int rc, bad;
    if ((rc = dlock__timed(clock, abstime, &deadline, &bad)) != 0) return rc;
    return mutex_lock_call(m, 0, deadline, bad);
}

DLOCK_API int dlock_mutex_timedlock(dlock_mutex_t *m, const struct timespec *abstime) {
    return dlock_mutex_clocklock(m, CLOCK_REALTIME, abstime);
}

DLOCK_API int dlock_mutex_unlock(dlock_mutex_t *m) {
    dlock__mutex *mx;
    int rc;
    if ((rc = mutex_get(m, &mx)) != 0) return rc;
    return dlock__release_want(mx->c, mx->l, &mx->want);
}

/* Marks the state protected by a robust mutex consistent again, after
 * lock gave EOWNERDEAD; without it, unlock makes the lock unrecoverable
 * for everyone.  Local only: no round trip. */
DLOCK_API int dlock_mutex_consistent(dlock_mutex_t *m) {
    dlock__lost_report rep = { 0 };
    dlock__mutex *mx;
    int rc;
    if ((rc = mutex_get(m, &mx)) != 0) return rc;
    pthread_mutex_lock(&mx->c->mu);
    if (!dlock__hold_valid(mx->c, &mx->l->x, dlock__owner_peek(&mx->want), &rep) || !dlock__hold_is_inconsistent(&mx->l->x)) {
        rc = dlock__seterr(EINVAL, "'%.64s' is not held by the caller in an inconsistent state", mx->l->k.name);
    } else {
        dlock__hold_consistent(&mx->l->x);
        rc = 0;
    }
    pthread_mutex_unlock(&mx->c->mu);
    dlock__report(&rep);
    return rc;
}

static int holds(const dlock_mutex_t *m, uint64_t *fence) {
    dlock__mutex *mx;
    if (mutex_get(m, &mx) != 0) return 0;
    return dlock__holds_want(mx->c, mx->l, &mx->want, fence);
}

DLOCK_API int dlock_mutex_holds(const dlock_mutex_t *m) {
    return holds(m, NULL);
}

DLOCK_API uint64_t dlock_mutex_fence(const dlock_mutex_t *m) {
    uint64_t f = 0;
    return holds(m, &f) ? f : 0;
}

/* The lock value block (core/lvb.c): the caller holds m. */
DLOCK_API int dlock_mutex_lvb_set(dlock_mutex_t *m, const void *buf, size_t len) {
    dlock__mutex *mx;
    int rc;
    if ((rc = mutex_get(m, &mx)) != 0) return rc;
    if (len > DLOCK_LVB_MAX) return dlock__seterr(EINVAL, "a value block of %zu bytes: at most %d", len, DLOCK_LVB_MAX);
    if (!holds(m, NULL)) return dlock__seterr(EPERM, "the calling thread does not hold '%.64s'", mx->l->k.name);
    return dlock__lvb_set(mx->c, mx->l, buf, len);
}

DLOCK_API int dlock_mutex_lvb_get(dlock_mutex_t *m, void *buf, size_t cap, size_t *len, int *valid) {
    dlock__mutex *mx;
    int rc;
    if ((rc = mutex_get(m, &mx)) != 0) return rc;
    if (!holds(m, NULL)) return dlock__seterr(EPERM, "the calling thread does not hold '%.64s'", mx->l->k.name);
    return dlock__lvb_get(mx->c, mx->l, buf, cap, len, valid);
}

DLOCK_API const char *dlock_mutex_name(const dlock_mutex_t *m) {
    dlock__mutex *mx;
    if (mutex_get(m, &mx) != 0) return NULL;
    return mx->l->k.name;
}

/* A fenced write through the lock's own deployment: see fenced_set.lua.
 * The caller must hold m; the write carries the fence of that hold. */
DLOCK_API int dlock_fenced_set(const dlock_mutex_t *m, const char *key, const void *value, size_t len) {
    dlock__mutex *mx;
    uint64_t fence = 0;
    size_t keylen;
    int rc, written = 0;

    if ((rc = mutex_get(m, &mx)) != 0) return rc;
    if (key == NULL || (keylen = strlen(key)) == 0) return dlock__seterr(EINVAL, "key is NULL or empty");
    if (value == NULL && len > 0) return dlock__seterr(EINVAL, "value is NULL");
    if (!holds(m, &fence)) return dlock__seterr(EPERM, "the calling thread does not hold '%.64s'", mx->l->k.name);
    rc = mx->c->be.ops->fenced_set(&mx->c->be, key, keylen, fence, value, len, &written, dlock__unreachable_deadline(&mx->c->be.node));
    if (rc != 0) return rc;
    if (!written) return dlock__seterr(ESTALE, "'%.64s': a write with a newer fence already reached %.64s", mx->l->k.name, key);
    return 0;
}
