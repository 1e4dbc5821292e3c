/* outage.c -- the host-wide outage record's notices, for programs that
 * tell their user of an outage (the preload, the CLI): one notice per
 * host per outage, not one per process (net/hostrec.c keeps the record). */
#include <errno.h>

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
