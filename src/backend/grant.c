/* grant.c -- the wire of a queued waiter's grant: BLPOP on its own grant
 * list, <lock key>:g:<token>, where a fair release pushes "FENCE:MS" when
 * it hands the lock to that token.  The core's grant wait (core/wait.c)
 * decides when to wait and what a grant means; the connection, the
 * request and the answer are handled here.  The waiter's thread waits in
 * ppoll on the socket and on its own eventfd (which a poke writes), so
 * the server answers the blocked waiter in the same turn as the release,
 * with no subscriber thread between them.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

int dlock__grant_send(dlock__backend *b, const dlock__keys *k, const char *token, dlock__mono now, dlock__mono until,
                      dlock__grant_pop *p) {
    char secs[32], *key;
    const char *argv[3];
    size_t lens[3];
    int rc = EAGAIN;
    if ((key = malloc(k->keylen + 4 + strlen(token))) == NULL) return EAGAIN;
    argv[0] = "BLPOP";
    lens[0] = 5;
    argv[1] = key;
    lens[1] = (size_t)sprintf(key, "%s:g:%s", k->key, token);
    /* the wait's timeout, rounded up to the next millisecond */
    argv[2] = secs;
    lens[2] = (size_t)snprintf(secs, sizeof secs, "%.3f", (double)((until - now) / DLOCK__MS + 1) / 1000.0);
    if (b->ops->grant_conn(b, k, &p->node, &p->cn, until) == 0 &&
        dlock__resp_append(p->cn->ctx, 3, argv, lens) == 0 && dlock__conn_flush(p->cn) == 0)
        rc = 0;
    free(key);
    return rc;
}

/* One ppoll on the connection's socket and wakefd, until give_up; what
 * came on the socket is read.  -1 to wait on; otherwise the wait's
 * result: 0 when woken, ETIMEDOUT, EINTR, EAGAIN. */
static int grant_poll(dlock__grant_pop *p, int wakefd, dlock__mono give_up, const sigset_t *mask) {
    struct pollfd pfd[2];
    struct timespec ts;
    dlock__mono now = dlock__now();
    int n;
    if (now >= give_up) return ETIMEDOUT;
    dlock__mono_to_ts(give_up - now, &ts);
    pfd[0].fd = p->cn->ctx->fd;
    pfd[0].events = POLLIN;
    pfd[1].fd = wakefd;
    pfd[1].events = POLLIN;
    n = ppoll(pfd, 2, &ts, mask);
    if (n < 0 && errno == EINTR) return mask != NULL ? EINTR : -1;
    if (n < 0) return EAGAIN;
    if (n > 0 && pfd[1].revents) return 0;
    if (n > 0 && pfd[0].revents && dlock__conn_read(p->cn) != REDIS_OK) return EAGAIN;
    return -1;
}

int dlock__grant_await(dlock__grant_pop *p, int wakefd, dlock__mono give_up, const sigset_t *mask) {
    for (;;) {
        void *reply = NULL;
        int rc;
        if (dlock__reply_get(p->cn, &reply) != REDIS_OK) return EAGAIN;
        if (reply != NULL) {
            p->r = reply;
            return 0;
        }
        if (dlock__conn_pending(p->cn)) { /* TLS: bytes already read from the socket */
            if (dlock__conn_read(p->cn) != REDIS_OK) return EAGAIN;
            continue;
        }
        if ((rc = grant_poll(p, wakefd, give_up, mask)) >= 0) return rc;
    }
}

void dlock__grant_drop(dlock__backend *b, dlock__grant_pop *p) {
    if (p->cn == NULL) return;
    if (p->r == NULL || p->cn->ctx->reader->pos < p->cn->ctx->reader->len) {
        /* without its whole answer (its BLPOP may still be pending) */
        dlock__conn_close(p->cn);
        p->cn = NULL;
    } else if (p->node != &b->node) {
        dlock__pool_put(p->node, p->cn, 0); /* a cluster node's, under its own mutex */
        p->cn = NULL;
    }
}

void dlock__grant_keep(dlock__backend *b, dlock__grant_pop *p) {
    if (p->cn != NULL && !dlock__pool_keep(&b->node, p->cn)) dlock__conn_close(p->cn);
    p->cn = NULL;
}

/* Is r the server saying it will not run BLPOP at all (an ACL, a proxy
 * that knows no such command), so that no later call should try? */
static int refused_for_good(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "NOPERM", 6) == 0 || strstr(r->str, "unknown command") != NULL ||
            strstr(r->str, "can't run this command") != NULL);
}

int dlock__grant_read(dlock__grant_pop *p, uint64_t *fence, unsigned *ms, int *cache, int *nolist) {
    const redisReply *r = p->r;
    int got;
    *nolist = 0;
    if (r == NULL) return -1;
    if (r->type == REDIS_REPLY_NIL) got = 0;
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING &&
             dlock__grant_parse(r->element[1]->str, r->element[1]->len, fence, ms, cache) == 0)
        got = 1;
    else {
        got = -1;
        *nolist = refused_for_good(r);
    }
    freeReplyObject(p->r);
    p->r = NULL;
    return got;
}
