/* attr.c -- mutex attributes, as pthread_mutexattr_*. */
#include <errno.h>
#include <string.h>

#include "api/api.h"

#define ATTR_MAGIC 0x61747472u /* "attr" */

static int check(const dlock_mutexattr_t *a) {
    if (a == NULL) return dlock__seterr(EINVAL, "attribute object is NULL");
    if (a->__magic != ATTR_MAGIC) return dlock__seterr(EINVAL, "attribute object is not initialised");
    return 0;
}

DLOCK_API int dlock_mutexattr_init(dlock_mutexattr_t *a) {
    if (a == NULL) return dlock__seterr(EINVAL, "attribute object is NULL");
    memset(a, 0, sizeof *a);
    a->__magic = ATTR_MAGIC;
    a->__type = DLOCK_MUTEX_DEFAULT;
    a->__robust = DLOCK_MUTEX_STALLED;
    a->__lease_ms = DLOCK_LEASE_DEFAULT_MS;
    a->__rwkind = DLOCK_RWLOCK_DEFAULT;
    a->__owner = DLOCK_OWNER_THREAD;
    return 0;
}

DLOCK_API int dlock_mutexattr_destroy(dlock_mutexattr_t *a) {
    int rc = check(a);
    if (rc) return rc;
    a->__magic = 0;
    return 0;
}

DLOCK_API int dlock_mutexattr_settype(dlock_mutexattr_t *a, int type) {
    int rc = check(a);
    if (rc) return rc;
    if (type < DLOCK_MUTEX_NORMAL || type > DLOCK_MUTEX_DEFAULT)
        return dlock__seterr(EINVAL, "mutex type %d is not one of DLOCK_MUTEX_*", type);
    a->__type = type;
    return 0;
}

DLOCK_API int dlock_mutexattr_gettype(const dlock_mutexattr_t *a, int *type) {
    int rc = check(a);
    if (rc) return rc;
    if (type == NULL) return dlock__seterr(EINVAL, "type pointer is NULL");
    *type = a->__type;
    return 0;
}

DLOCK_API int dlock_mutexattr_setrobust(dlock_mutexattr_t *a, int robust) {
    int rc = check(a);
    if (rc) return rc;
    if (robust != DLOCK_MUTEX_STALLED && robust != DLOCK_MUTEX_ROBUST)
        return dlock__seterr(EINVAL, "robustness %d is not DLOCK_MUTEX_STALLED or DLOCK_MUTEX_ROBUST", robust);
    a->__robust = robust;
    return 0;
}

DLOCK_API int dlock_mutexattr_getrobust(const dlock_mutexattr_t *a, int *robust) {
    int rc = check(a);
    if (rc) return rc;
    if (robust == NULL) return dlock__seterr(EINVAL, "robust pointer is NULL");
    *robust = a->__robust;
    return 0;
}

int dlock__lease_check(const char *what, unsigned ms) {
    if (ms < DLOCK_LEASE_MIN_MS || ms > DLOCK_LEASE_MAX_MS)
        return dlock__seterr(EINVAL, "%s %u ms is outside [%u, %u] ms", what, ms, DLOCK_LEASE_MIN_MS,
                             DLOCK_LEASE_MAX_MS);
    return 0;
}

DLOCK_API int dlock_mutexattr_setlease(dlock_mutexattr_t *a, unsigned lease_ms) {
    int rc = check(a);
    if (rc) return rc;
    if ((rc = dlock__lease_check("lease", lease_ms)) != 0) return rc;
    a->__lease_ms = lease_ms;
    return 0;
}

DLOCK_API int dlock_mutexattr_getlease(const dlock_mutexattr_t *a, unsigned *lease_ms) {
    int rc = check(a);
    if (rc) return rc;
    if (lease_ms == NULL) return dlock__seterr(EINVAL, "lease pointer is NULL");
    *lease_ms = a->__lease_ms;
    return 0;
}

/* The on/off attributes: 0 or 1, else EINVAL. */
static int set01(dlock_mutexattr_t *a, int *field, int v, const char *what) {
    int rc = check(a);
    if (rc) return rc;
    if (v != 0 && v != 1) return dlock__seterr(EINVAL, "%s must be 0 or 1, not %d", what, v);
    *field = v;
    return 0;
}

static int get01(const dlock_mutexattr_t *a, const int *field, int *out, const char *what) {
    int rc = check(a);
    if (rc) return rc;
    if (out == NULL) return dlock__seterr(EINVAL, "%s pointer is NULL", what);
    *out = *field;
    return 0;
}

DLOCK_API int dlock_mutexattr_setfair(dlock_mutexattr_t *a, int fair) {
    return set01(a, a ? &a->__fair : NULL, fair, "fair");
}

DLOCK_API int dlock_mutexattr_getfair(const dlock_mutexattr_t *a, int *fair) {
    return get01(a, a ? &a->__fair : NULL, fair, "fair");
}

DLOCK_API int dlock_mutexattr_setcaching(dlock_mutexattr_t *a, int caching) {
    return set01(a, a ? &a->__caching : NULL, caching, "caching");
}

DLOCK_API int dlock_mutexattr_getcaching(const dlock_mutexattr_t *a, int *caching) {
    return get01(a, a ? &a->__caching : NULL, caching, "caching");
}

DLOCK_API int dlock_mutexattr_setrwkind(dlock_mutexattr_t *a, int kind) {
    int rc = check(a);
    if (rc) return rc;
    if (kind != DLOCK_RWLOCK_PREFER_READER && kind != DLOCK_RWLOCK_PREFER_WRITER &&
        kind != DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE)
        return dlock__seterr(EINVAL, "rwlock kind %d is not one of DLOCK_RWLOCK_PREFER_*", kind);
    a->__rwkind = kind;
    return 0;
}

DLOCK_API int dlock_mutexattr_getrwkind(const dlock_mutexattr_t *a, int *kind) {
    int rc = check(a);
    if (rc) return rc;
    if (kind == NULL) return dlock__seterr(EINVAL, "kind pointer is NULL");
    *kind = a->__rwkind;
    return 0;
}

DLOCK_API int dlock_mutexattr_setowner(dlock_mutexattr_t *a, int owner) {
    int rc = check(a);
    if (rc) return rc;
    if (owner != DLOCK_OWNER_THREAD && owner != DLOCK_OWNER_PROCESS)
        return dlock__seterr(EINVAL, "owner %d is not DLOCK_OWNER_THREAD or DLOCK_OWNER_PROCESS", owner);
    a->__owner = owner;
    return 0;
}

DLOCK_API int dlock_mutexattr_getowner(const dlock_mutexattr_t *a, int *owner) {
    int rc = check(a);
    if (rc) return rc;
    if (owner == NULL) return dlock__seterr(EINVAL, "owner pointer is NULL");
    *owner = a->__owner;
    return 0;
}

DLOCK_API int dlock_mutexattr_setdeadlock(dlock_mutexattr_t *a, int on) {
    int rc = check(a);
    if (rc) return rc;
    if (on != 0 && on != 1) return dlock__seterr(EINVAL, "deadlock detection %d is not 0 or 1", on);
    a->__deadlock = on ? 1 : 2;
    return 0;
}

DLOCK_API int dlock_mutexattr_getdeadlock(const dlock_mutexattr_t *a, int *on) {
    int rc = check(a);
    if (rc) return rc;
    if (on == NULL) return dlock__seterr(EINVAL, "deadlock pointer is NULL");
    *on = a->__deadlock == 1 || (a->__deadlock == 0 && a->__type == DLOCK_MUTEX_ERRORCHECK);
    return 0;
}

DLOCK_API int dlock_mutexattr_setpipelined(dlock_mutexattr_t *a, int on) {
    int rc = check(a);
    if (rc) return rc;
    if (on != 0 && on != 1) return dlock__seterr(EINVAL, "pipelined %d is not 0 or 1", on);
    a->__pipelined = on ? 1 : 2;
    return 0;
}

/* 1 only when set here: the client's URL decides an unset one at init. */
DLOCK_API int dlock_mutexattr_getpipelined(const dlock_mutexattr_t *a, int *on) {
    int rc = check(a);
    if (rc) return rc;
    if (on == NULL) return dlock__seterr(EINVAL, "pipelined pointer is NULL");
    *on = a->__pipelined == 1;
    return 0;
}

/* Kept as ms + 1: 0 leaves it to the client's URL (lock_delay_ms), so
 * that a 0 set here wins over the URL's. */
DLOCK_API int dlock_mutexattr_setlockdelay(dlock_mutexattr_t *a, unsigned ms) {
    int rc = check(a);
    if (rc) return rc;
    if (ms > DLOCK_LOCK_DELAY_MAX_MS)
        return dlock__seterr(EINVAL, "lock-delay %u ms is over %u ms", ms, DLOCK_LOCK_DELAY_MAX_MS);
    a->__lock_delay = ms + 1;
    return 0;
}

DLOCK_API int dlock_mutexattr_getlockdelay(const dlock_mutexattr_t *a, unsigned *ms) {
    int rc = check(a);
    if (rc) return rc;
    if (ms == NULL) return dlock__seterr(EINVAL, "lock-delay pointer is NULL");
    *ms = a->__lock_delay ? a->__lock_delay - 1 : 0;
    return 0;
}

DLOCK_API int dlock_mutexattr_setlostcallback(dlock_mutexattr_t *a, dlock_lost_fn fn, void *arg) {
    int rc = check(a);
    if (rc) return rc;
    a->__lost_fn = fn;
    a->__lost_arg = arg;
    return 0;
}

DLOCK_API int dlock_mutexattr_setriskcallback(dlock_mutexattr_t *a, dlock_risk_fn fn, void *arg, unsigned margin_ms) {
    int rc = check(a);
    if (rc) return rc;
    if (fn != NULL && margin_ms == 0) return dlock__seterr(EINVAL, "a lease-at-risk handler needs a margin above 0 ms");
    a->__risk_fn = fn;
    a->__risk_arg = fn != NULL ? arg : NULL;
    a->__risk_margin_ms = fn != NULL ? margin_ms : 0;
    return 0;
}

DLOCK_API int dlock_mutexattr_setclient(dlock_mutexattr_t *a, dlock_client_t *c) {
    int rc = check(a);
    if (rc) return rc;
    if (c != NULL && !dlock__client_live(c)) return dlock__seterr(EINVAL, "not a live client");
    a->__client = c;
    return 0;
}

DLOCK_API int dlock_mutexattr_getclient(const dlock_mutexattr_t *a, dlock_client_t **c) {
    int rc = check(a);
    if (rc) return rc;
    if (c == NULL) return dlock__seterr(EINVAL, "client pointer is NULL");
    *c = a->__client;
    return 0;
}

/* For object.c: validated attributes, or the defaults for NULL. */
int dlock__attr_get(const dlock_mutexattr_t *a, dlock_mutexattr_t *out) {
    if (a == NULL) return dlock_mutexattr_init(out);
    if (check(a) != 0) return EINVAL;
    *out = *a;
    return 0;
}
