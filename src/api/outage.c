/* outage.c -- the host-wide outage record's notices, for programs that
 * tell their user of an outage (the preload, the CLI): one notice per
 * host per outage, not one per process (net/hostrec.c keeps the record);
 * and the breaker's state for a monitor. */
#include <errno.h>
#include <string.h>

#include "api/api.h"

DLOCK_API int dlock_client_outage_notice(dlock_client_t *c, int what) {
    if (c == NULL) return 1;
    switch (what) {
    case DLOCK_OUTAGE_DOWN:
        return dlock__breaker_host_tell(&c->be.node, DLOCK__HOST_TOLD_DOWN);
    case DLOCK_OUTAGE_DOWN_CLOSED:
        return dlock__breaker_host_tell(&c->be.node, DLOCK__HOST_TOLD_DOWN_CLOSED);
    case DLOCK_OUTAGE_UP:
        return dlock__breaker_host_tell(&c->be.node, DLOCK__HOST_TOLD_UP);
    default:
        return 1;
    }
}

DLOCK_API int dlock_client_breaker(dlock_client_t *cl, dlock_breaker_state_t *out) {
    struct dlock_client *c;
    dlock__mono now, since = 0, probe = 0;
    int rc;
    if (out == NULL) return dlock__seterr(EINVAL, "dlock_client_breaker: out is NULL");
    memset(out, 0, sizeof *out);
    if ((c = dlock__client_get(cl, &rc)) == NULL) return rc;
    if (!dlock__breaker_state(&c->be.node, &out->host, &since, &probe)) return 0;
    now = dlock__now();
    out->open = 1;
    out->open_ms = now > since ? (uint64_t)((now - since) / DLOCK__MS) : 0;
    out->next_probe_ms = probe > now ? (uint64_t)((probe - now) / DLOCK__MS) : 0;
    return 0;
}
