/* range.c -- the record-lock range tables (backend/lua/range.lua),
 * for the preload's fcntl and lockf hooks (docs/preload.md, "Record
 * locks"): one request on <prefix>{<name>}:rl, through the client's
 * circuit breaker as dlock_lock_info is.
 */
#include <errno.h>

#include "api/api.h"

int dlock__range(dlock_client_t *c, const char *name, int once, int nargs, const char *const *args,
                 dlock__strs *out) {
    dlock__lock *l;
    int rc, probe = 0;

    out->n = 0;
    out->v = NULL;
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_LOCK, 0, &l)) != 0) return rc;
    if (c->be.ops->range == NULL) {
        rc = dlock__seterr(ENOTSUP, "%s: record locks are not kept on a Redlock deployment",
                           c->be.node.conf.redacted_url);
    } else if ((rc = dlock__breaker_check(&c->be.node, &probe)) == 0) { /* else the breaker is open */
        /* once: one attempt (a non-blocking lock, an unlock), which
         * proves nothing about the server and never opens the breaker */
        dlock__mono ub = dlock__unreachable_deadline(&c->be.node);
        rc = c->be.ops->range(&c->be, &l->k, nargs, args, out, probe || once ? dlock__now() : ub);
        pthread_mutex_lock(&c->mu);
        dlock__breaker_note(&c->be.node, rc, probe || once ? 0 : ub);
        pthread_mutex_unlock(&c->mu);
    }
    dlock__entry_close(c, l, 0);
    return rc;
}

/* The wait edges of record-lock owners, for a cycle through several
 * files' tables: the backend's waits op on the edge key of id,
 * <prefix>dlw:{<id>} ("eset" rec for ttl_ms, "eget", "edel"); one
 * attempt, outside the breaker's count. */
int dlock__range_edge(dlock_client_t *c, const char *op, const char *id, const char *rec, unsigned ttl_ms,
                      dlock__strs *out) {
    int rc, probe = 0;
    out->n = 0;
    out->v = NULL;
    if ((c = dlock__client_get(c, &rc)) == NULL) return rc;
    if (c->be.ops->waits == NULL)
        return dlock__seterr(ENOTSUP, "%s: no wait edges kept on a Redlock deployment", c->be.node.conf.redacted_url);
    if ((rc = dlock__breaker_check(&c->be.node, &probe)) != 0) return rc;
    return c->be.ops->waits(&c->be, NULL, op, id, rec, ttl_ms, out, dlock__now());
}
