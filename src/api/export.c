/* export.c -- the functions of include/dlock_private.h that are not
 * defined elsewhere: the circuit breaker of a client's server, for the
 * preload, whose keepers make its file locks' requests.  Each is a thin
 * door onto the net layer's breaker, so that the preload sees neither
 * the client's nor the node's struct. */
#include "api/api.h"

int dlock__client_breaker_check(dlock_client_t *c, int *probe) {
    return dlock__breaker_check(&c->be.node, probe);
}

void dlock__client_breaker_report(dlock_client_t *c, int rc, int paid) {
    dlock__breaker_report(&c->be.node, rc, paid);
}

void dlock__client_breaker_probe_now(dlock_client_t *c) {
    dlock__breaker_probe_now(&c->be.node);
}

int dlock__client_breaker_host_back(dlock_client_t *c) {
    return dlock__breaker_host_back(&c->be.node);
}

int dlock__client_breaker_open(dlock_client_t *c) {
    return dlock__breaker_open(&c->be.node);
}
