/* multi.c -- deployments of several servers: waiting on several
 * connections at once (the requests of one call went out on connections
 * to several servers -- the Redlock renewal's batches, one per master --
 * and their answers are read as they come, whichever server answers
 * first, until the caller has enough of them or its bound has come), and
 * telling a server that runs from one that only accepts connections.
 */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "net/internal.h"

/* One wait for all of them, until end (ppoll: kept to the microsecond),
 * then one read of each that something came on.  A read never waits:
 * over TLS a server that sent half a record and stalled would otherwise
 * hold the renewal thread until the socket's timeout, with the other
 * masters' answers unread and other holds' renewals coming due; the
 * record's rest is read when it comes, in a later call. */
size_t dlock__conns_read(dlock__conn **cn, size_t n, dlock__mono end, int *broken) {
    struct pollfd pfd[DLOCK__NODES_MAX];
    struct timespec ts = { 0, 0 };
    size_t i, k = 0, moved = 0;
    int pending = 0;
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
    if (!pending && left > 0) dlock__mono_to_ts(left, &ts);
    if (ppoll(pfd, n, &ts, NULL) < 0 && errno != EINTR) return 0;
    for (i = 0; i < n; i++) {
        if (cn[i] == NULL || (pfd[i].revents == 0 && !dlock__conn_pending(cn[i]))) continue;
        moved++;
        if (dlock__conn_read(cn[i]) != REDIS_OK) broken[i] = 1;
    }
    return moved;
}

/* A server that accepts a connection need not be running: the kernel
 * completes the handshake of a paused (SIGSTOP) or hung server's listening
 * socket.  A deployment that may pick any of several servers (a Redlock
 * client's own connection, the subscriber's) asks a PING first, in plain
 * RESP on the new socket, and takes any answer -- PONG, or NOAUTH before
 * AUTH -- as a server that runs.  1 when one came within ms, else 0. */
int dlock__fd_answers(int fd, unsigned ms) {
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    char buf[256];
    size_t got = 0;
    /* Awaited by ppoll until the sooner of the two ends: a poll's timeout
     * in whole ms, rounded up, would pass a call's end that is less than
     * a ms away (ms is 1 at least). */
    dlock__mono end = dlock__now() + (dlock__mono)ms * DLOCK__MS;
    if (dlock__call_end() < end) end = dlock__call_end();
    /* (a fresh socket's buffer takes the PING whole) */
    if (send(fd, ping, sizeof ping - 1, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)(sizeof ping - 1)) return 0;
    /* One line, read to its end: nothing of it may be left for the
     * requests that follow on the connection. */
    while (got < 2 || buf[got - 2] != '\r' || buf[got - 1] != '\n') {
        ssize_t r;
        if (end - dlock__now() <= 0 || !dlock__fd_wait(fd, end)) return 0;
        if (got == sizeof buf) got = 0; /* (a long error line: only its end matters) */
        r = recv(fd, buf + got, sizeof buf - got, 0);
        if (r <= 0) return 0;
        got += (size_t)r;
    }
    return 1;
}
