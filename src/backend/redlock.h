/* redlock.h -- what the Redlock backend's files share among themselves
 * (redlock.c, redlock_renew.c) and the rest of the library does not use. */
#ifndef DLOCK_BACKEND_REDLOCK_H
#define DLOCK_BACKEND_REDLOCK_H

#include "backend/backend.h"

/* A majority of c's masters: Q = N/2 + 1. */
static inline size_t dlock__redlock_quorum(const dlock__backend *c) {
    return c->nmembers / 2 + 1;
}

/* The renew op (redlock_renew.c): a round on every master at once; a
 * renewal holds once a quorum renewed it. */
int dlock__redlock_renew(dlock__backend *c, dlock__renewal *rn, size_t n, dlock__mono deadline);

#endif
