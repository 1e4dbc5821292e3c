/* lvb.c -- the lock value block, the holder's side.  A set only keeps the
 * value on the lock (dlock__keys.lvb, with the identity of the hold that
 * set it): the release of that hold writes it, in the same request
 * (release.lua's ARGV[3]), so a holder that sets and unlocks makes no
 * request more, and one whose hold lapses writes nothing.  A get gives
 * this hold's own value when it set one, else reads the server's (one
 * round trip).  A caching mutex keeps its value with the cached lock:
 * the release that gives the lock back writes it.
 */
#include <errno.h>
#include <string.h>

#include "core/core.h"

static int offered(struct dlock_client *c, const dlock__lock *l) {
    if (c->be.ops->lvb_read != NULL) return 0;
    return dlock__seterr(ENOTSUP, "'%.64s': lock value blocks are not offered on Redlock (its masters would "
                         "each keep their own)", l->k.name);
}

int dlock__lvb_set(struct dlock_client *c, dlock__lock *l, const void *buf, size_t len) {
    if (len > DLOCK_LVB_MAX) return dlock__seterr(EINVAL, "a value block of %zu bytes: at most %d", len, DLOCK_LVB_MAX);
    if (buf == NULL && len > 0) return dlock__seterr(EINVAL, "value block buffer is NULL");
    if (offered(c, l) != 0) return ENOTSUP;
    pthread_mutex_lock(&c->mu);
    if (len > 0) memcpy(l->k.lvb, buf, len);
    l->k.lvblen = len;
    l->k.lvb_ident = l->x.ident;
    l->k.lvb_pending = 1;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int dlock__lvb_get(struct dlock_client *c, dlock__lock *l, void *buf, size_t cap, size_t *len, int *valid) {
    unsigned char v[DLOCK_LVB_MAX];
    size_t n = 0;
    int ok = 1, rc;
    if (len == NULL || valid == NULL || (buf == NULL && cap > 0))
        return dlock__seterr(EINVAL, "value block pointer is NULL");
    if (offered(c, l) != 0) return ENOTSUP;
    pthread_mutex_lock(&c->mu);
    if (l->k.lvb_pending && l->k.lvb_ident == l->x.ident) { /* this hold's own, not written yet */
        n = l->k.lvblen;
        memcpy(v, l->k.lvb, n);
        pthread_mutex_unlock(&c->mu);
    } else {
        pthread_mutex_unlock(&c->mu);
        rc = c->be.ops->lvb_read(&c->be, &l->k, v, &n, &ok, dlock__unreachable_deadline(&c->be.node));
        if (rc != 0) return rc;
        if (ok < 0) ok = 1; /* none yet: empty, and valid */
    }
    *len = n;
    if (n > cap) return dlock__seterr(ERANGE, "'%.64s': its value block has %zu bytes, more than %zu", l->k.name, n, cap);
    if (n > 0) memcpy(buf, v, n);
    *valid = ok;
    return 0;
}

uint64_t dlock__lvb_carry(dlock__lock *l, const dlock__hold *h) {
    if (l->k.lvb_pending && (h != &l->x || l->k.lvb_ident != h->ident)) {
        if (h == &l->x) l->k.lvb_pending = 0; /* an earlier hold's, whose release never went */
        return 0;
    }
    return l->k.lvb_pending ? h->ident : 0;
}

void dlock__lvb_sent(dlock__lock *l, uint64_t ident, int rc) {
    if (rc == 0 && ident != 0 && l->k.lvb_pending && l->k.lvb_ident == ident) l->k.lvb_pending = 0;
}
