/* subscribe.c -- the wire of release notifications: a connection that
 * listens to a deployment's release channels (sharded channels on Redis
 * Cluster: SSUBSCRIBE, heard only on the slot's master).  The core's
 * subscriber thread (core/notify.c) decides what to subscribe and what a
 * message means; the bytes go through here.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"

/* On Sentinel, the connection is checked against the sentinels' answer
 * this often (a failover leaves it on the old master). */
#define SENTINEL_RECHECK_MS 1000

int dlock__sub_open(dlock__backend *b, dlock__conn **out) {
    return dlock__conn_open(&b->node, out, b->node.conf.connect_timeout_ms);
}

void dlock__sub_close(dlock__conn *cn) {
    dlock__conn_close(cn);
}

int dlock__sub_append(dlock__backend *b, dlock__conn *cn, int on, const char *channel, size_t len) {
    const char *cmd = b->node.conf.cluster ? (on ? "SSUBSCRIBE" : "SUNSUBSCRIBE") : (on ? "SUBSCRIBE" : "UNSUBSCRIBE");
    const char *argv[2] = { cmd, channel };
    size_t lens[2] = { strlen(cmd), len };
    return dlock__resp_append(cn->ctx, 2, argv, lens);
}

int dlock__sub_wait(dlock__backend *b, dlock__conn *cn, int wakefd, int timeout_ms) {
    struct pollfd pfd[2];
    if (!dlock__conn_current(&b->node, cn, (dlock__mono)SENTINEL_RECHECK_MS * DLOCK__MS)) return ENOLCK;
    if (b->node.conf.kind == DLOCK__BACKEND_SENTINEL && (timeout_ms < 0 || timeout_ms > SENTINEL_RECHECK_MS))
        timeout_ms = SENTINEL_RECHECK_MS;
    if (dlock__conn_flush(cn) != 0) return ENOLCK;
    if (dlock__conn_pending(cn)) /* TLS already holds bytes the socket will not signal again */
        return dlock__conn_read(cn) == REDIS_OK ? 0 : ENOLCK;
    pfd[0].fd = cn->ctx->fd;
    pfd[0].events = POLLIN;
    pfd[1].fd = wakefd;
    pfd[1].events = POLLIN;
    if (poll(pfd, 2, timeout_ms) <= 0) return 0;
    if (pfd[1].revents) dlock__efd_drain(wakefd);
    if (pfd[0].revents && dlock__conn_read(cn) != REDIS_OK) return ENOLCK;
    return 0;
}

int dlock__sub_next(dlock__conn *cn, redisReply **out) {
    void *reply = NULL;
    *out = NULL;
    if (dlock__reply_get(cn, &reply) != REDIS_OK) return EPROTO;
    *out = reply;
    return 0;
}
