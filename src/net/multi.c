/* multi.c -- waiting on several connections at once: the requests of
 * one call went out on connections to several servers (the Redlock
 * renewal's batches, one per master), and their answers are read as
 * they come, whichever server answers first, until the caller has
 * enough of them or its bound has come.
 */
#include <errno.h>
#include <poll.h>

#include "net/net.h"

size_t dlock__conns_read(dlock__conn **cn, size_t n, dlock__mono end, int *broken) {
    struct pollfd pfd[DLOCK__NODES_MAX];
    size_t i, k = 0, moved = 0;
    int ms = 0, pending = 0;
    dlock__mono left = end - dlock__now();
    if (n > DLOCK__NODES_MAX) n = DLOCK__NODES_MAX;
    for (i = 0; i < n; i++) {
        broken[i] = 0;
        pfd[i].fd = cn[i] != NULL ? cn[i]->ctx->fd : -1;
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
        k += cn[i] != NULL;
        if (cn[i] != NULL && dlock__conn_pending(cn[i])) pending = 1; /* decrypted bytes wait: no sleep */
    }
    if (k == 0) return 0;
    if (!pending && left > 0) ms = (int)((left + DLOCK__MS - 1) / DLOCK__MS);
    if (poll(pfd, n, ms) < 0 && errno != EINTR) return 0;
    for (i = 0; i < n; i++) {
        if (cn[i] == NULL || (pfd[i].revents == 0 && !dlock__conn_pending(cn[i]))) continue;
        moved++;
        if (dlock__conn_read(cn[i]) != REDIS_OK) broken[i] = 1;
    }
    return moved;
}
