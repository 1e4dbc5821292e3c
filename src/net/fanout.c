/* fanout.c -- one request to many nodes at once (a Redlock's masters):
 * every request written before any answer is read, answers judged as
 * they come, and the connections of nodes that did not answer in time
 * kept aside until their answers can be read. */
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "net/internal.h"

/* ------------------------------------------- one request to many nodes */

/* Late connections (dlock__command_all): a request went out on them and
 * its answer (cn->owed of them) has not been read.  They are never taken
 * from the pool while an answer is owed -- it would be read as the answer
 * of the next request -- and are read when the node is next asked. */
#define LATE_MAX 4   /* late connections per node kept; an older one is closed */
#define OWED_MAX 8   /* requests queued behind an unanswered one at most */

/* The complete answers already on cn read and dropped, without waiting:
 * 0 (cn->owed counts down), or -1 when the connection broke. */
static int late_read(dlock__conn *cn) {
    for (;;) {
        void *r = NULL;
        struct pollfd pfd = { cn->ctx->fd, POLLIN, 0 };
        if (dlock__reply_get(cn, &r) != REDIS_OK) return -1;
        if (r != NULL) {
            freeReplyObject(r);
            cn->answered++;
            cn->used = dlock__now();
            if (--cn->owed == 0) return 0;
            continue;
        }
        if (!dlock__conn_pending(cn) && poll(&pfd, 1, 0) <= 0) return 0;
        if (dlock__conn_read(cn) != REDIS_OK) return -1;
    }
}

/* Reads what n's late connections were answered: those answered in full
 * go back to the pool, broken ones are closed.  1 when one still owes an
 * answer (the server has not answered an earlier request), else 0. */
static int late_drain(dlock__node *n) {
    dlock__conn *list, *cn, *keep = NULL;
    int owes = 0;
    pthread_mutex_lock(n->mu);
    list = n->late;
    n->late = NULL;
    n->nlate = 0;
    pthread_mutex_unlock(n->mu);
    while ((cn = list) != NULL) {
        list = cn->next;
        cn->next = NULL;
        if (late_read(cn) != 0) {
            dlock__conn_close(cn);
        } else if (cn->owed == 0) {
            pthread_mutex_lock(n->mu);
            if (!dlock__pool_keep(n, cn)) dlock__conn_close(cn);
            pthread_mutex_unlock(n->mu);
        } else {
            cn->next = keep;
            keep = cn;
            owes = 1;
        }
    }
    pthread_mutex_lock(n->mu);
    while ((cn = keep) != NULL) {
        keep = cn->next;
        if (n->nlate >= LATE_MAX) { /* another thread put some back meanwhile */
            dlock__conn_close(cn);
            continue;
        }
        cn->next = n->late;
        n->late = cn;
        n->nlate++;
    }
    pthread_mutex_unlock(n->mu);
    return owes;
}

/* cn, whose answer is owed, among n's late connections. */
static void late_put(dlock__node *n, dlock__conn *cn) {
    dlock__conn *old = NULL, **pp;
    pthread_mutex_lock(n->mu);
    if (n->nlate >= LATE_MAX) { /* the oldest goes: what it was asked still runs */
        for (pp = &n->late; (*pp)->next != NULL; pp = &(*pp)->next)
            ;
        old = *pp;
        *pp = NULL;
        n->nlate--;
    }
    cn->next = n->late;
    n->late = cn;
    n->nlate++;
    pthread_mutex_unlock(n->mu);
    dlock__conn_close(old);
}

/* A late connection of n taken out to queue a request behind its owed
 * answers, or NULL. */
static dlock__conn *late_take(dlock__node *n) {
    dlock__conn *cn;
    pthread_mutex_lock(n->mu);
    if ((cn = n->late) != NULL && cn->owed < OWED_MAX) {
        n->late = cn->next;
        n->nlate--;
        cn->next = NULL;
    } else {
        cn = NULL;
    }
    pthread_mutex_unlock(n->mu);
    return cn;
}

void dlock__late_flush(dlock__node *n, int abandon) {
    dlock__conn *cn;
    if (!abandon) pthread_mutex_lock(n->mu); /* a fork child: its fork_prepare holds it */
    cn = n->late;
    n->late = NULL;
    n->nlate = 0;
    if (!abandon) pthread_mutex_unlock(n->mu);
    while (cn != NULL) {
        dlock__conn *next = cn->next;
        if (abandon) dlock__conn_abandon(cn);
        else dlock__conn_close(cn);
        cn = next;
    }
}

#define STALL_MS 1000 /* a node that did not take a connection in time is not asked to for so long */
#define STALL_MIN_MS 100 /* a failed connection attempt at least this long: the node stalls */

/* Does n have a connection at hand (idle, or late)? */
static int has_conn(dlock__node *n) {
    int has;
    pthread_mutex_lock(n->mu);
    has = n->idle != NULL || n->late != NULL;
    pthread_mutex_unlock(n->mu);
    return has;
}

/* A connection of n for dlock__command_all, within the request's bound.
 * A node whose server did not finish a connection in time (paused, a
 * network that drops) is not tried again for STALL_MS: each try would
 * hold up the whole request (a connection is made before the request is
 * sent), for each call, while the others answer at once. */
static int all_connect(dlock__node *n, dlock__conn **cn, dlock__mono end) {
    dlock__mono t0 = dlock__now(), until = __atomic_load_n(&n->stalled_until, __ATOMIC_RELAXED);
    int rc;
    if (until > t0 && !has_conn(n))
        return dlock__seterr(ENOLCK, "%s: did not take a connection in time lately: not asked", n->conf.redacted_url);
    if ((rc = dlock__pool_get(n, cn, end)) != 0 && dlock__now() - t0 >= (dlock__mono)STALL_MIN_MS * DLOCK__MS &&
        !dlock__node_refused_since(n, t0))
        __atomic_store_n(&n->stalled_until, dlock__now() + (dlock__mono)STALL_MS * DLOCK__MS, __ATOMIC_RELAXED);
    return rc;
}

/* Node i's connection for a request of dlock__command_all, the request
 * written on it: 0, or rcs[i] set.  A node that has not answered an
 * earlier request is not asked again on another connection (it would cost
 * a connection, or the whole bound, each time it is paused): with
 * DLOCK__ALL_QUEUE the request is queued behind the unanswered one (it
 * runs when the server does; its answer is not awaited), else skipped. */
static int all_send(dlock__node *n, dlock__conn **cn, int flags, const dlock__all_req *rq, int fresh, int *rc,
                    dlock__mono deadline) {
    const char **self = rq->self_argv != NULL ? rq->self_argv : rq->argv;
    const size_t *self_lens = rq->self_argv != NULL ? rq->self_lens : rq->lens;
    *cn = NULL;
    if (late_drain(n)) {
        dlock__conn *q = (flags & DLOCK__ALL_QUEUE) ? late_take(n) : NULL;
        /* (self-contained only on a connection the server never answered:
         * one that answered before knows the scripts -- a restarted
         * server breaks it -- and a queue of whole script bodies could
         * fill the socket of a paused server, and block the send) */
        int fresh_q = q != NULL && q->answered == 0;
        if (q != NULL && dlock__resp_append(q->ctx, rq->argc, fresh_q ? self : rq->argv, fresh_q ? self_lens : rq->lens) == 0 &&
            dlock__conn_flush(q) == 0) {
            q->owed++;
            late_put(n, q);
            *rc = dlock__seterr(ENOLCK, "%s: has not answered an earlier request: asked after it", n->conf.redacted_url);
        } else {
            if (q != NULL) dlock__conn_close(q);
            *rc = dlock__seterr(ENOLCK, "%s: has not answered an earlier request", n->conf.redacted_url);
        }
        return -1;
    }
    if ((*rc = all_connect(n, cn, deadline)) != 0) return -1;
    dlock__set_timeout(n, *cn, deadline);
    if (dlock__resp_append((*cn)->ctx, rq->argc, fresh ? self : rq->argv, fresh ? self_lens : rq->lens) != 0 ||
        dlock__conn_flush(*cn) != 0) {
        *rc = dlock__seterr(ENOLCK, "%s: %s", n->conf.redacted_url,
                            (*cn)->ctx->errstr[0] ? (*cn)->ctx->errstr : "cannot send");
        dlock__pool_put(n, *cn, 1);
        *cn = NULL;
        return -1;
    }
    return 0;
}

/* Node n's connection cn broke or answered (r): out/rc set, cn put back
 * or closed; a TLS probe of a broken one ends by `end`. */
static void all_answer(dlock__node *n, dlock__conn *cn, int ok, void *r, redisReply **out, int *rc,
                       dlock__mono end) {
    char why[128];
    if (!ok) {
        if (dlock__expects_tls(n, cn, end)) {
            dlock__node_refuse(n);
            *rc = ENOLCK;
        } else {
            *rc = dlock__seterr(ENOLCK, "%s: %s", n->conf.redacted_url, dlock__conn_why(cn, dlock__conn_bound(cn), why, sizeof why));
        }
        dlock__pool_put(n, cn, 1);
    } else if (dlock__needs_password(r)) {
        freeReplyObject(r);
        *rc = dlock__password_needed(n);
        dlock__pool_put(n, cn, 1);
    } else if (cn->ctx->reader->pos < cn->ctx->reader->len) {
        freeReplyObject(r);
        *rc = dlock__seterr(EPROTO, "%s: the server sent more than was asked for", n->conf.redacted_url);
        dlock__pool_put(n, cn, 1);
    } else {
        cn->answered++;
        cn->used = dlock__now();
        *out = r;
        *rc = 0;
        dlock__pool_put(n, cn, 0);
    }
}

/* A NOSCRIPT answer (the server does not know the script: restarted,
 * or never asked it) to a request that has a self-contained form: that
 * form is sent on the same connection, once, and its answer awaited in
 * the same bound -- a quorum's decision does not wait for the bound, nor
 * a second request after it, for a script a master had not cached.  1
 * when sent (r freed), else 0. */
static int all_noscript(dlock__conn *cn, void *r, const dlock__all_req *rq, int *resent) {
    const redisReply *rr = r;
    if (*resent || rq->self_argv == NULL || rr->type != REDIS_REPLY_ERROR || strncmp(rr->str, "NOSCRIPT", 8) != 0 ||
        cn->ctx->reader->pos < cn->ctx->reader->len)
        return 0;
    if (dlock__resp_append(cn->ctx, rq->argc, rq->self_argv, rq->self_lens) != 0 || dlock__conn_flush(cn) != 0) return 0;
    *resent = 1;
    freeReplyObject(r);
    return 1;
}

/* One poll over the connections still waiting (cn[i] != NULL), at most
 * until `end`; each that has an answer, or broke, is done (cn[i] NULL).
 * How many answered. */
static size_t all_poll(dlock__node **ns, size_t n, dlock__conn **cn, redisReply **out, int *rcs, dlock__mono end,
                       const dlock__all_req *rq, int *resent) {
    struct pollfd pfd[DLOCK__NODES_MAX];
    size_t i, k = 0, answered = 0;
    int ms = 0;
    for (i = 0; i < n; i++) {
        void *r = NULL;
        int got;
        if (cn[i] == NULL) continue;
        if ((got = dlock__reply_get(cn[i], &r)) == REDIS_OK && r != NULL && all_noscript(cn[i], r, rq, &resent[i]))
            continue;
        if (got != REDIS_OK || r != NULL) {
            all_answer(ns[i], cn[i], r != NULL, r, &out[i], &rcs[i], end);
            answered += out[i] != NULL;
            cn[i] = NULL;
            continue;
        }
        if (dlock__conn_pending(cn[i])) ms = -2; /* decrypted bytes wait: no poll */
    }
    if (answered > 0) return answered; /* the caller decides whether to wait on */
    if (ms == 0) {
        dlock__mono left = end - dlock__now();
        ms = left <= 0 ? 0 : (int)((left + DLOCK__MS - 1) / DLOCK__MS);
    } else {
        ms = 0;
    }
    for (i = 0; i < n; i++) {
        pfd[i].fd = cn[i] != NULL ? cn[i]->ctx->fd : -1;
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
        k += cn[i] != NULL;
    }
    if (k == 0 || (poll(pfd, n, ms) < 0 && errno != EINTR)) return answered;
    for (i = 0; i < n; i++) {
        if (cn[i] == NULL || (pfd[i].revents == 0 && !dlock__conn_pending(cn[i]))) continue;
        if (dlock__conn_read(cn[i]) != REDIS_OK) {
            all_answer(ns[i], cn[i], 0, NULL, &out[i], &rcs[i], end);
            cn[i] = NULL;
        }
    }
    return answered;
}

/* The answers not yet judged told to the judge: 1 when decided. */
static int all_judged(const dlock__all_judge *judge, size_t n, redisReply **out, int *seen) {
    size_t i;
    int decided = 0;
    for (i = 0; i < n; i++) {
        if (out[i] == NULL || seen[i]) continue;
        seen[i] = 1;
        if (judge->fn(judge->arg, i, out[i])) decided = 1;
    }
    return decided;
}

void dlock__command_all(dlock__node **ns, size_t n, size_t need, const dlock__all_judge *judge, int flags,
                        const dlock__all_req *req, redisReply **out, int *rcs, dlock__mono deadline) {
    dlock__conn *cn[DLOCK__NODES_MAX];
    int seen[DLOCK__NODES_MAX] = { 0 }, resent[DLOCK__NODES_MAX] = { 0 }, decided = 0;
    size_t i, answered = 0, waiting = 0;
    /* One bound for the whole request, from its start: a node slow to
     * connect does not give the others more time. */
    dlock__mono start = dlock__now(), end = n > 0 ? start + (dlock__mono)dlock__reply_bound(ns[0], deadline) * DLOCK__MS : 0;
    dlock__all_scope(1);
    for (i = 0; i < n; i++) out[i] = NULL, cn[i] = NULL, rcs[i] = -1;
    /* The nodes with a connection at hand first, then those that need a
     * new one: their answers come while the others connect. */
    for (i = 0; i < n; i++)
        if (has_conn(ns[i]) && all_send(ns[i], &cn[i], flags, req, 0, &rcs[i], end) == 0) waiting++;
    for (i = 0; i < n; i++)
        if (rcs[i] == -1 && all_send(ns[i], &cn[i], flags, req, 1, &rcs[i], end) == 0) waiting++;
    dlock__all_scope(0);
    decided = judge == NULL && need == 0; /* nothing awaited: only the grace below */
    /* Answers as they come, until `need` of them (any answer), or the
     * judge's verdict, or the bound. */
    while (waiting > 0 && !decided && dlock__now() < end) {
        answered += all_poll(ns, n, cn, out, rcs, end, req, resent);
        for (i = 0, waiting = 0; i < n; i++) waiting += cn[i] != NULL;
        decided = judge != NULL ? all_judged(judge, n, out, seen) : answered >= need;
    }
    /* The others are given as long again as the decision took (at most to
     * the bound): masters that are well answer together, and each grant
     * read is one the hold can count on; what has come meanwhile is read
     * too.  The rest are late: their answers are read next time. */
    if (waiting > 0 && decided) {
        dlock__mono now = dlock__now(), grace = now + (now - start);
        if (grace > end) grace = end;
        while (waiting > 0 && dlock__now() < grace) {
            (void)all_poll(ns, n, cn, out, rcs, grace, req, resent);
            for (i = 0, waiting = 0; i < n; i++) waiting += cn[i] != NULL;
        }
    }
    for (i = 0; i < 3 && waiting > 0; i++) (void)all_poll(ns, n, cn, out, rcs, dlock__now(), req, resent); /* parse, read, parse */
    for (i = 0; i < n; i++) {
        if (cn[i] == NULL) continue;
        rcs[i] = dlock__seterr(ENOLCK, "%s: no answer within %u ms%s", ns[i]->conf.redacted_url, dlock__conn_bound(cn[i]),
                               decided ? " (the others' answers decided)" : "");
        cn[i]->owed = 1;
        late_put(ns[i], cn[i]);
    }
}
