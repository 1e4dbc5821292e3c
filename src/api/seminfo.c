/* seminfo.c -- a semaphore's administration: what the server knows of it
 * and who waits in it or holds its units (dlock_sem_info,
 * dlock_sem_owners), its removal (dlock_sem_unlink) and its reset
 * (dlock_sem_break), by name, without a dlock_sem_t: what `dlock status`
 * and `dlock break` use.  dlock_sem_list is with dlock_list (admin.c),
 * whose scan it shares.  The scripts are backend/lua/sem_info.lua and
 * sem_admin.lua.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

static int seminfo_unsupported(struct dlock_client *c) {
    return dlock__seterr(ENOTSUP, "%s: semaphores are not supported on a Redlock deployment: they need one "
                         "server, Sentinel or a Redis Cluster", c->be.node.conf.redacted_url);
}

/* Reads the semaphore's state, through the circuit breaker as
 * dlock_lock_info does. */
static int read_state(struct dlock_client *c, dlock__lock *l, unsigned max, dlock__sem_state *st) {
    int rc, probe;
    if (c->be.ops->sem_info == NULL) return seminfo_unsupported(c);
    if ((rc = dlock__breaker_check(&c->be.node, &probe)) == 0) { /* else not asked: the breaker is open */
        dlock__mono ub = dlock__unreachable_deadline(&c->be.node);
        rc = c->be.ops->sem_info(&c->be, &l->k, max, st, probe ? dlock__now() : ub);
        pthread_mutex_lock(&c->mu);
        dlock__breaker_note(&c->be.node, rc, probe ? 0 : ub);
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

DLOCK_API int dlock_sem_owners(dlock_client_t *c, const char *name, dlock_sem_info_t *info, unsigned max,
                               int (*fn)(const dlock_sem_owner_t *o, void *arg), void *arg) {
    dlock__sem_state st;
    dlock__lock *l;
    size_t i;
    int rc;

    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_SEM, 0, &l)) != 0) return rc;
    rc = read_state(c, l, fn != NULL ? max : 0, &st);
    dlock__entry_close(c, l, 0);
    if (rc != 0) return rc;
    if (info != NULL) *info = st.info;
    for (i = 0; fn != NULL && i < st.npeople; i++)
        if (fn(&st.people[i], arg) != 0) break;
    free(st.people);
    return 0;
}

DLOCK_API int dlock_sem_info(dlock_client_t *c, const char *name, dlock_sem_info_t *out) {
    if (out == NULL) return dlock__seterr(EINVAL, "info pointer is NULL");
    return dlock_sem_owners(c, name, out, 0, NULL, NULL);
}

/* One administrative op on the semaphore name: *result as sem_admin
 * says. */
static int admin(dlock_client_t *c, const char *name, int how, long long *result) {
    dlock__lock *l;
    int rc;
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_SEM, 0, &l)) != 0) return rc;
    if (c->be.ops->sem_admin == NULL) rc = seminfo_unsupported(c);
    else rc = c->be.ops->sem_admin(&c->be, &l->k, how, result, NULL, dlock__unreachable_deadline(&c->be.node));
    dlock__entry_close(c, l, 0);
    return rc;
}

DLOCK_API int dlock_sem_unlink(dlock_client_t *c, const char *name) {
    long long res = 0;
    int rc = admin(c, name, DLOCK__SEM_UNLINK, &res);
    if (rc == 0 && res == 0) rc = dlock__seterr(ENOENT, "no semaphore '%.64s'", name);
    return rc;
}

/* Through the circuit breaker, as an info call: a process's renewals
 * (DLOCK_SEM_RENEW) must not each wait the unreachable bound. */
DLOCK_API int dlock_sem_expire(dlock_client_t *c, const char *name, unsigned ms, int flags) {
    long long res = ms;
    dlock__lock *l;
    int rc, probe;
    if (flags & ~DLOCK_SEM_RENEW) return dlock__seterr(EINVAL, "unknown flags %#x", (unsigned)flags);
    if ((rc = dlock__lease_check("expiry", ms)) != 0) return rc;
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_SEM, 0, &l)) != 0) return rc;
    if (c->be.ops->sem_admin == NULL) {
        rc = seminfo_unsupported(c);
    } else if ((rc = dlock__breaker_check(&c->be.node, &probe)) == 0) { /* else not asked: the breaker is open */
        dlock__mono ub = dlock__unreachable_deadline(&c->be.node);
        rc = c->be.ops->sem_admin(&c->be, &l->k, flags & DLOCK_SEM_RENEW ? DLOCK__SEM_KEEP : DLOCK__SEM_EXPIRE, &res,
                                  NULL, probe ? dlock__now() : ub);
        pthread_mutex_lock(&c->mu);
        dlock__breaker_note(&c->be.node, rc, probe ? 0 : ub);
        pthread_mutex_unlock(&c->mu);
    }
    dlock__entry_close(c, l, 0);
    if (rc == 0 && res < 0) rc = dlock__seterr(ENOENT, "no semaphore '%.64s'", name);
    else if (rc == 0 && res == 0) rc = dlock__seterr(ENOENT, "semaphore '%.64s' has no expiry to renew", name);
    return rc;
}

DLOCK_API int dlock_sem_break(dlock_client_t *c, const char *name, unsigned *taken_back) {
    long long res = 0;
    int rc = admin(c, name, DLOCK__SEM_BREAK, &res);
    if (rc == 0 && res < 0) rc = dlock__seterr(ENOENT, "no semaphore '%.64s'", name);
    if (rc == 0 && taken_back != NULL) *taken_back = res > 0xFFFFFFFFll ? 0xFFFFFFFFu : (unsigned)res;
    return rc;
}
