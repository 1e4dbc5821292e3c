/* fanout.c -- one request to many nodes at once (a Redlock's masters):
 * every request written before any answer is read, answers judged as
 * they come, and the connections of nodes that did not answer in time
 * kept aside until their answers can be read. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "net/internal.h"

/* ------------------------------------------- one request to many nodes */

/* Late connections (dlock__command_all): a request went out on them and
 * its answer (cn->owed of them) has not been read.  They are never taken
 * from the pool while an answer is owed -- it would be read as the answer
 * of the next request -- and are read when the node is next asked.
 *
 * The late list is read and changed only under n->mu, and a connection
 * that owes an answer never leaves it but to be closed: a grant on it
 * that its server has not run yet must stay visible to every thread, or
 * a release of that grant sent meanwhile on another connection could run
 * before it and leave the key to its lease.  The reads there do not wait
 * (what has come, poll(0)).  The list needs no bound of its own: a
 * connection goes late only after a request sent while its node owed
 * nothing (all_send), so it holds at most as many as there were calls in
 * flight at once when the node stopped answering.
 *
 * A node owes an answer for a moment whenever a call ends before its
 * answer came (a timed call's last request, near the call's end): such a
 * node is not stalled.  While each answer it owes is younger than the
 * reply floor (its request went out, or its server last answered, that
 * lately: late_at), a request that awaits answers awaits that one first,
 * within its own bound, and is sent once it came (all_owing); a node that
 * owes an older one is taken as not answering, and is not asked (a paused
 * server costs a call no wait but for that floor, once). */
/* What is queued on a late connection goes out at once while the bytes
 * its server has not answered stay within LATE_SEND_MAX: far below what
 * the kernel buffers on the way to a paused server (the socket of a
 * server that does not read must not fill up and block the send).  Past
 * that, requests wait in the connection's output buffer (LATE_HOLD_MAX
 * bytes at most, in memory) and go out once the server has answered all
 * that was sent.  Never dropped for a count: each may be the release of
 * a grant that server made. */
#define LATE_SEND_MAX (32u * 1024)
#define LATE_HOLD_MAX (1024u * 1024)

/* What each answer a late connection owes was asked, in order (late_read
 * pops one per answer): a request of DLOCK__ALL_QUEUE that went as
 * EVALSHA keeps its self-contained form here (argc > 0), to be sent
 * whole should its answer be NOSCRIPT -- a SCRIPT FLUSH on a running
 * server leaves cn->scripts saying it has a script it no longer has, and
 * that request (a release, a break) would be lost, its key left to the
 * lease.  Every other request: argc 0.  The script's text (argv[1]) is
 * kept by pointer (dlock__all_req); the rest is copied. */
struct dlock__resend {
    struct dlock__resend *next;
    int argc;
    const char **argv;
    size_t *lens;
};

/* An entry for cn's next owed answer: rq's self-contained form, or with
 * rq NULL nothing.  0, or -1 (out of memory). */
static int resend_push(dlock__conn *cn, const dlock__all_req *rq) {
    size_t size = sizeof(struct dlock__resend), i;
    int argc = rq != NULL ? rq->argc : 0;
    struct dlock__resend *e;
    char *p;
    for (i = 0; i < (size_t)argc; i++) size += sizeof(char *) + sizeof(size_t) + (i == 1 ? 0 : rq->self_lens[i]);
    if ((e = malloc(size)) == NULL) return -1;
    e->next = NULL;
    e->argc = argc;
    e->lens = (size_t *)(e + 1);
    e->argv = (const char **)(e->lens + argc);
    p = (char *)(e->argv + argc);
    for (i = 0; i < (size_t)argc; i++) {
        e->lens[i] = rq->self_lens[i];
        e->argv[i] = i == 1 ? rq->self_argv[1] : p;
        if (i != 1 && e->lens[i] > 0) memcpy(p, rq->self_argv[i], e->lens[i]);
        if (i != 1) p += e->lens[i];
    }
    if (cn->resend_last != NULL) cn->resend_last->next = e;
    else cn->resend = e;
    cn->resend_last = e;
    return 0;
}

/* The entry of the answer just read, taken off cn (NULL: none). */
static struct dlock__resend *resend_pop(dlock__conn *cn) {
    struct dlock__resend *e = cn->resend;
    if (e != NULL && (cn->resend = e->next) == NULL) cn->resend_last = NULL;
    return e;
}

static void resend_clear(dlock__conn *cn) {
    struct dlock__resend *e;
    while ((e = resend_pop(cn)) != NULL) free(e);
}

static int late_send(dlock__conn *cn, int argc, const char **argv, const size_t *lens);

/* r, an answer read late on cn to the request of entry e: NOSCRIPT to a
 * request that must run (e->argc > 0) sends it whole, behind what cn
 * owes (it owes one answer more).  Its server has lost its scripts:
 * none is taken as known on cn any more.  -1 when the write failed. */
static int resend_check(dlock__conn *cn, const redisReply *r, const struct dlock__resend *e) {
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "NOSCRIPT", 8) != 0) return 0;
    cn->scripts = 0;
    if (e == NULL || e->argc == 0) return 0;
    if (resend_push(cn, NULL) != 0) return -1;
    return late_send(cn, e->argc, e->argv, e->lens);
}

/* Reads what came on cn (poll said something did) without waiting for
 * more: over TLS a record that came in part is left for when its rest
 * comes (dlock__conn_read), not awaited -- in late_read, under n->mu,
 * with it every call that asks that master; in all_poll, the other
 * masters' answers.  REDIS_OK or REDIS_ERR, as dlock__conn_read. */
static int read_now(dlock__conn *cn) {
    return dlock__conn_read(cn);
}

/* The complete answers already on cn read and dropped, without waiting:
 * 0 (cn->owed counts down), or -1 when the connection broke. */
static int late_read(dlock__conn *cn) {
    for (;;) {
        void *r = NULL;
        struct pollfd pfd = { cn->ctx->fd, POLLIN, 0 };
        if (dlock__reply_get(cn, &r) != REDIS_OK) return -1;
        if (r != NULL) {
            struct dlock__resend *e = resend_pop(cn);
            int rc = resend_check(cn, r, e);
            free(e);
            freeReplyObject(r);
            if (rc != 0) return -1;
            cn->answered++;
            cn->used = cn->late_at = dlock__now();
            if (--cn->owed == cn->held) return 0; /* (those held were not sent) */
            continue;
        }
        if (!dlock__conn_pending(cn) && poll(&pfd, 1, 0) <= 0) return 0;
        if (read_now(cn) != REDIS_OK) return -1;
    }
}

/* Once cn's server has answered every request that was sent, the
 * requests that waited in memory (cn->held) go out: 0, or -1 when the
 * write failed. */
static int late_send_held(dlock__conn *cn) {
    if (cn->held == 0 || cn->owed > cn->held) return 0;
    cn->late_bytes = (unsigned)sdslen(cn->ctx->obuf);
    cn->held = 0;
    return dlock__conn_flush(cn);
}

/* What a node owes (late_drain): nothing; answers of which one is older
 * than the reply floor (its server does not answer); or only younger ones
 * (they are on their way). */
#define OWES_NONE 0
#define OWES_STALLED 1
#define OWES_SOON 2

/* Under n->mu: reads what n's late connections were answered; those
 * answered in full go back to the pool, broken ones (and answered ones
 * the pool has no room for) onto *dead, to be closed after n->mu.  What n
 * still owes: OWES_*. */
static int late_drain(dlock__node *n, dlock__conn **dead) {
    dlock__conn **pp = &n->late, *cn;
    dlock__mono since = dlock__now() - (dlock__mono)dlock__reply_floor_ms(n) * DLOCK__MS;
    int owes = OWES_NONE;
    while ((cn = *pp) != NULL) {
        if (late_read(cn) == 0 && cn->owed > 0 && late_send_held(cn) == 0) {
            if (owes != OWES_STALLED) owes = cn->late_at <= since ? OWES_STALLED : OWES_SOON;
            pp = &cn->next;
            continue;
        }
        *pp = cn->next;
        n->nlate--;
        cn->next = NULL;
        if (cn->owed > 0 || !dlock__pool_keep(n, cn)) {
            cn->next = *dead;
            *dead = cn;
        }
    }
    return owes;
}

/* Is rq sent on cn in its self-contained form?  Unless cn's server has
 * that very script: an answer read late is dropped, so a NOSCRIPT read
 * late would be the request lost -- a grant's release or a break never
 * run there, its key left to the lease.  A server knows only the scripts
 * it ran (a restarted one none), and a connection lives no longer than
 * its server: cn->scripts are those it answered on cn, or was sent whole
 * on cn (they run before what comes after them there). */
static int self_form(const dlock__conn *cn, const dlock__all_req *rq) {
    if (rq->self_argv == NULL) return 0;
    return rq->script != 0 ? !(cn->scripts & rq->script) : cn->answered == 0;
}

/* rq written behind what cn owes (or held in memory, LATE_SEND_MAX):
 * 0; 1 when it cannot be kept (LATE_HOLD_MAX); -1 when the write
 * failed. */
static int late_append(dlock__conn *cn, const dlock__all_req *rq) {
    int fresh = self_form(cn, rq);
    if (sdslen(cn->ctx->obuf) >= LATE_HOLD_MAX) return 1;
    if (resend_push(cn, fresh || rq->self_argv == NULL ? NULL : rq) != 0) return -1;
    if (late_send(cn, rq->argc, fresh ? rq->self_argv : rq->argv, fresh ? rq->self_lens : rq->lens) != 0) return -1;
    if (fresh) cn->scripts |= rq->script; /* it runs before whatever comes next on cn */
    return 0;
}

/* A request written behind what cn owes, or held in memory past
 * LATE_SEND_MAX; cn owes one answer more.  -1 when the write failed. */
static int late_send(dlock__conn *cn, int argc, const char **argv, const size_t *lens) {
    size_t before = sdslen(cn->ctx->obuf), len;
    if (dlock__resp_append(cn->ctx, argc, argv, lens) != 0) return -1;
    len = sdslen(cn->ctx->obuf) - before;
    cn->owed++;
    if (cn->held > 0 || cn->late_bytes + len > LATE_SEND_MAX) {
        cn->held++; /* waits in the output buffer, in order */
        return 0;
    }
    cn->late_bytes += (unsigned)len;
    return dlock__conn_flush(cn);
}

/* Under n->mu: rq queued behind the owed answers of every late
 * connection of n, so that it runs after each request n was sent and has
 * not answered -- any of them may be the grant a release gives back.  (A
 * release or a fenced write run twice ends or writes nothing more: by the
 * time n is sent anything new, every copy has run.)  With once
 * (DLOCK__ALL_ONCE: a break), behind one of them only, the one put late
 * last: the copies on several connections run apart (each as its
 * connection's server gets to it), and a break's second copy would end
 * the hold of a taker that came in between on that master.  1 when queued
 * on all of them (once: on one); 0 when one could not take it (it holds
 * LATE_HOLD_MAX bytes already); a write that failed puts that connection
 * on *dead. */
static int late_queue(dlock__node *n, const dlock__all_req *rq, int once, dlock__conn **dead) {
    dlock__conn **pp = &n->late, *cn;
    int all = 1, queued = 0;
    while ((cn = *pp) != NULL && !(once && queued)) {
        int rc = late_append(cn, rq);
        if (rc == 0) {
            queued = 1;
        } else if (rc == 1) {
            all = 0;
        } else { /* what it was asked still runs; the next request goes after it */
            *pp = cn->next;
            n->nlate--;
            cn->next = *dead;
            *dead = cn;
            all = 0;
            continue;
        }
        pp = &cn->next;
    }
    return once ? queued : all;
}

static void close_list(dlock__conn *cn) {
    while (cn != NULL) {
        dlock__conn *next = cn->next;
        resend_clear(cn);
        dlock__conn_close(cn);
        cn = next;
    }
}

/* cn, whose answer is owed, among n's late connections: kept there
 * until it has answered, never closed for room (what waits in memory on
 * it would be lost, and what it was sent would no longer go before what
 * the node is sent next). */
static void late_put(dlock__node *n, dlock__conn *cn) {
    pthread_mutex_lock(n->mu);
    cn->next = n->late;
    n->late = cn;
    n->nlate++;
    pthread_mutex_unlock(n->mu);
}

int dlock__node_owes(dlock__node *n) {
    dlock__conn *dead = NULL;
    int owes;
    pthread_mutex_lock(n->mu);
    owes = late_drain(n, &dead);
    pthread_mutex_unlock(n->mu);
    close_list(dead);
    return owes != OWES_NONE;
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
        resend_clear(cn);
        if (abandon) dlock__conn_abandon(cn);
        else dlock__conn_close(cn);
        cn = next;
    }
}

#define STALL_MS 1000 /* a node that did not take a connection in time is not asked to for so long */
#define ALL_FINAL 0x100  /* all_send at a call's end: a request that must run is queued, not held back */
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
 * a connection, or the whole bound, each time it is paused).  If what it
 * owes is on its way (OWES_SOON), it is skipped for now (1: all_owing
 * asks again once that came) -- a request that must run too: its answer
 * may be the one the call needs to decide (a paused master among the
 * others).  Else, or once the call ends still owing (ALL_FINAL), with
 * DLOCK__ALL_QUEUE the request is queued behind every unanswered one (it
 * runs when the server does; its answer is not awaited), else skipped
 * (rcs[i] DLOCK__ALL_NOT_SENT, as for a node that gave no connection):
 * -1. */
static int all_send(dlock__node *n, dlock__conn **cn, int flags, const dlock__all_req *rq, int *whole, int *rc,
                    dlock__mono deadline) {
    const char **self = rq->self_argv != NULL ? rq->self_argv : rq->argv;
    const size_t *self_lens = rq->self_argv != NULL ? rq->self_lens : rq->lens;
    dlock__conn *dead = NULL;
    int owes, queued = 0, fresh, wait;
    *cn = NULL;
    pthread_mutex_lock(n->mu);
    owes = late_drain(n, &dead);
    wait = owes == OWES_SOON && !(flags & ALL_FINAL);
    if (owes != OWES_NONE && (flags & DLOCK__ALL_QUEUE) && !wait)
        queued = late_queue(n, rq, (flags & DLOCK__ALL_ONCE) != 0, &dead);
    pthread_mutex_unlock(n->mu);
    close_list(dead);
    if (owes != OWES_NONE) {
        *rc = dlock__seterr(ENOLCK,
                            queued ? "%s: has not answered an earlier request: asked after it"
                                   : "%s: has not answered an earlier request",
                            n->conf.redacted_url);
        if (!queued) *rc = DLOCK__ALL_NOT_SENT;
        return wait ? 1 : -1;
    }
    if ((*rc = all_connect(n, cn, deadline)) != 0) {
        if (*rc == ENOLCK) *rc = DLOCK__ALL_NOT_SENT; /* (another code is the caller's to tell) */
        return -1;
    }
    dlock__set_timeout(n, *cn, deadline);
    fresh = *whole || self_form(*cn, rq);
    *whole = fresh && rq->self_argv != NULL;
    if (dlock__resp_append((*cn)->ctx, rq->argc, fresh ? self : rq->argv, fresh ? self_lens : rq->lens) != 0 ||
        dlock__conn_flush(*cn) != 0) {
        *rc = dlock__seterr(ENOLCK, "%s: %s", n->conf.redacted_url,
                            (*cn)->ctx->errstr[0] ? (*cn)->ctx->errstr : "cannot send");
        dlock__pool_put(n, *cn, 1);
        *cn = NULL;
        return -1;
    }
    if (fresh && rq->self_argv != NULL) (*cn)->scripts |= rq->script;
    return 0;
}

/* Node n's connection cn broke or answered (r): out/rc set, cn put back
 * or closed; a TLS probe of a broken one ends by `end`.  An answer that is
 * no error says the server has the request's script (rq_script). */
static void all_answer(dlock__node *n, dlock__conn *cn, int ok, void *r, redisReply **out, int *rc, dlock__mono end,
                       uint64_t rq_script) {
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
        if (((const redisReply *)r)->type != REDIS_REPLY_ERROR) cn->scripts |= rq_script;
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
    if (rr->type == REDIS_REPLY_ERROR && strncmp(rr->str, "NOSCRIPT", 8) == 0)
        cn->scripts = 0; /* its server lost its scripts (SCRIPT FLUSH): none is known on cn now */
    if (*resent || rq->self_argv == NULL || rr->type != REDIS_REPLY_ERROR || strncmp(rr->str, "NOSCRIPT", 8) != 0 ||
        cn->ctx->reader->pos < cn->ctx->reader->len)
        return 0;
    if (dlock__resp_append(cn->ctx, rq->argc, rq->self_argv, rq->self_lens) != 0 || dlock__conn_flush(cn) != 0) return 0;
    *resent = 1;
    freeReplyObject(r);
    return 1;
}

/* How long a poll that also watches a node's owed answer waits at most
 * (ms): another thread may read that answer (late_drain), and the poll
 * would not see it come. */
#define OWED_POLL_MS 5

/* The socket of a late connection of n that owes an answer to a request
 * sent (-1: none).  It may be closed by another thread by the time it is
 * polled: the poll only says when to look again (all_owing). */
static int owed_fd(dlock__node *n) {
    dlock__conn *cn;
    int fd = -1;
    pthread_mutex_lock(n->mu);
    for (cn = n->late; cn != NULL && fd < 0; cn = cn->next)
        if (cn->owed > cn->held) fd = cn->ctx->fd;
    pthread_mutex_unlock(n->mu);
    return fd;
}

/* One poll over the connections still waiting (cn[i] != NULL), and the
 * owed answers of the nodes that wait for them (owing[i], if owing),
 * at most until `end`; each connection that has an answer, or broke, is
 * done (cn[i] NULL).  How many answered. */
static size_t all_poll(dlock__node **ns, size_t n, dlock__conn **cn, redisReply **out, int *rcs, dlock__mono end,
                       const dlock__all_req *rq, int *resent, const int *owing) {
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
            all_answer(ns[i], cn[i], r != NULL, r, &out[i], &rcs[i], end, rq->script);
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
        pfd[i].fd = cn[i] != NULL ? cn[i]->ctx->fd : owing != NULL && owing[i] ? owed_fd(ns[i]) : -1;
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
        k += pfd[i].fd >= 0;
        if (cn[i] == NULL && pfd[i].fd >= 0 && ms > OWED_POLL_MS) ms = OWED_POLL_MS;
    }
    if (k == 0 || (poll(pfd, n, ms) < 0 && errno != EINTR)) return answered;
    for (i = 0; i < n; i++) {
        if (cn[i] == NULL || (pfd[i].revents == 0 && !dlock__conn_pending(cn[i]))) continue;
        if (read_now(cn[i]) != REDIS_OK) {
            all_answer(ns[i], cn[i], 0, NULL, &out[i], &rcs[i], end, rq->script);
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

/* The request sent to each node (cn[i]) that can take it, those with a
 * connection at hand first, then those that need a new one (sent whole):
 * their answers come while the others connect.  A node whose owed answer
 * is on its way waits for it (owing[i]: all_owing).  How many were
 * sent. */
static size_t all_send_each(dlock__node **ns, size_t n, dlock__conn **cn, int flags, const dlock__all_req *rq,
                            int *whole, int *rcs, int *owing, dlock__mono end) {
    size_t i, sent = 0;
    int rc;
    dlock__all_scope(1);
    for (i = 0; i < n; i++) {
        if (!has_conn(ns[i])) continue;
        if ((rc = all_send(ns[i], &cn[i], flags, rq, &whole[i], &rcs[i], end)) == 0) sent++;
        owing[i] = rc == 1;
    }
    for (i = 0; i < n; i++)
        if (rcs[i] == -1 && (whole[i] = 1) && all_send(ns[i], &cn[i], flags, rq, &whole[i], &rcs[i], end) == 0) sent++;
    dlock__all_scope(0);
    return sent;
}

/* The nodes that wait for an owed answer (owing[i]) asked again: each
 * that has answered it is sent the request now (cn[i]), one whose owed
 * answer grew older than the reply floor is left (not asked: its server
 * does not answer).  How many still wait. */
static size_t all_owing(dlock__node **ns, size_t n, dlock__conn **cn, int flags, const dlock__all_req *rq, int *whole,
                        int *rcs, int *owing, dlock__mono end) {
    size_t i, left = 0;
    int rc;
    for (i = 0; i < n; i++) {
        if (!owing[i]) continue;
        rcs[i] = -1;
        rc = all_send(ns[i], &cn[i], flags, rq, &whole[i], &rcs[i], end);
        owing[i] = rc == 1;
        left += owing[i];
    }
    return left;
}

/* cn, whose answer to rq (sent at `sent`) did not come in time, among
 * n's late connections; a request that must run (DLOCK__ALL_QUEUE) and
 * went as EVALSHA (not whole) is sent whole should that answer be
 * NOSCRIPT. */
static void all_late(dlock__node *n, dlock__conn *cn, int flags, const dlock__all_req *rq, int whole,
                     dlock__mono sent) {
    cn->owed = 1;
    cn->late_at = sent;
    cn->held = 0;
    cn->late_bytes = 0;
    if (resend_push(cn, (flags & DLOCK__ALL_QUEUE) && rq->self_argv != NULL && !whole ? rq : NULL) != 0) {
        dlock__conn_close(cn); /* out of memory: what it was asked still runs */
        return;
    }
    late_put(n, cn);
}

/* A request that must run (DLOCK__ALL_QUEUE) to node n, which still owed
 * an answer when the call ended (all_owing): queued behind what n owes
 * after all, or, if that came meanwhile, sent, its answer not awaited. */
static void all_owing_queue(dlock__node *n, int flags, const dlock__all_req *rq, int whole, int *rc, dlock__mono end) {
    dlock__conn *cn = NULL;
    dlock__mono sent = dlock__now();
    if (all_send(n, &cn, flags | ALL_FINAL, rq, &whole, rc, end) != 0) return;
    *rc = dlock__seterr(ENOLCK, "%s: has not answered an earlier request: asked after it", n->conf.redacted_url);
    all_late(n, cn, flags, rq, whole, sent);
}

void dlock__command_all(dlock__node **ns, size_t n, size_t need, const dlock__all_judge *judge, int flags,
                        const dlock__all_req *req, redisReply **out, int *rcs, dlock__mono deadline) {
    dlock__conn *cn[DLOCK__NODES_MAX];
    int seen[DLOCK__NODES_MAX] = { 0 }, resent[DLOCK__NODES_MAX] = { 0 }, whole[DLOCK__NODES_MAX], decided = 0;
    int owing[DLOCK__NODES_MAX] = { 0 };
    size_t i, answered = 0, waiting, nowing = 0;
    /* One bound for the whole request, from its start: a node slow to
     * connect does not give the others more time. */
    dlock__mono start = dlock__now(), end = n > 0 ? start + (dlock__mono)dlock__reply_bound(ns[0], deadline) * DLOCK__MS : 0;
    for (i = 0; i < n; i++) out[i] = NULL, cn[i] = NULL, rcs[i] = -1, whole[i] = 0;
    waiting = all_send_each(ns, n, cn, flags, req, whole, rcs, owing, end);
    for (i = 0; i < n; i++) nowing += owing[i];
    decided = judge == NULL && need == 0; /* nothing awaited: only the grace below */
    /* Answers as they come, until `need` of them (any answer), or the
     * judge's verdict, or the bound; a node whose owed answer comes is
     * asked then. */
    while ((waiting > 0 || nowing > 0) && !decided && dlock__now() < end) {
        answered += all_poll(ns, n, cn, out, rcs, end, req, resent, nowing > 0 ? owing : NULL);
        if (nowing > 0) nowing = all_owing(ns, n, cn, flags, req, whole, rcs, owing, end);
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
            (void)all_poll(ns, n, cn, out, rcs, grace, req, resent, NULL);
            for (i = 0, waiting = 0; i < n; i++) waiting += cn[i] != NULL;
        }
    }
    for (i = 0; i < 3 && waiting > 0; i++)
        (void)all_poll(ns, n, cn, out, rcs, dlock__now(), req, resent, NULL); /* parse, read, parse */
    for (i = 0; i < n; i++) {
        if (owing[i] && (flags & DLOCK__ALL_QUEUE)) all_owing_queue(ns[i], flags, req, whole[i], &rcs[i], end);
        if (cn[i] == NULL) continue;
        rcs[i] = dlock__seterr(ENOLCK, "%s: no answer within %u ms%s", ns[i]->conf.redacted_url, dlock__conn_bound(cn[i]),
                               decided ? " (the others' answers decided)" : "");
        all_late(ns[i], cn[i], flags, req, whole[i] || resent[i], start);
    }
}
