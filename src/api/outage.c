/* outage.c -- the host-wide outage record's notices, for programs that
 * tell their user of an outage (the preload, the CLI): one notice per
 * host per outage, not one per process (net/hostrec.c keeps the record). */
#include <errno.h>

#include "api/api.h"

DLOCK_API int dlock_client_outage_notice(dlock_client_t *c, int what) {
    if (c == NULL || (what != DLOCK_OUTAGE_DOWN && what != DLOCK_OUTAGE_UP)) return 1;
    return dlock__breaker_host_tell(&c->be.node, what == DLOCK_OUTAGE_DOWN ? DLOCK__HOST_TOLD_DOWN
                                                                             : DLOCK__HOST_TOLD_UP);
}
