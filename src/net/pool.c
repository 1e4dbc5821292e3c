/* pool.c -- a node's pool of idle connections: a request takes one
 * (checked to be in step, and current for Sentinel) or opens one, with
 * back-offs, within its deadline, and puts it back when answered. */
#include <errno.h>
#include <poll.h>

#include "net/internal.h"

#define POOL_IDLE_MAX 8

/* ---------------------------------------------------------------- pool */

int dlock__pool_get(dlock__node *n, dlock__conn **out, dlock__mono deadline) {
    dlock__mono now, refused = 0;
    dlock__backoff bo = DLOCK__BACKOFF_INIT(DLOCK__BACKOFF_MIN_MS, DLOCK__BACKOFF_MAX_MS);
    int rc, attempt;

    for (;;) {
        dlock__conn *cn;
        struct pollfd pfd;
        pthread_mutex_lock(n->mu);
        if ((cn = n->idle) == NULL) {
            pthread_mutex_unlock(n->mu);
            break;
        }
        n->idle = cn->next;
        n->nidle--;
        pthread_mutex_unlock(n->mu);
        cn->next = NULL;
        /* An idle connection must have nothing to read (conn.c, "A
         * connection's step"): one whose reads are stamped and whose
         * last answer is fresh is checked by its reads; any other by a
         * poll(0) now. */
        if (cn->stamps == DLOCK__STAMPS_SEEN && dlock__now() - cn->used < (dlock__mono)dlock__pool_fresh_ms * DLOCK__MS) {
            cn->step = DLOCK__STEP_TAKEN;
        } else {
            pfd.fd = cn->ctx->fd;
            pfd.events = POLLIN;
            pfd.revents = 0;
            cn->step = DLOCK__STEP_CHECKED;
            if (poll(&pfd, 1, 0) != 0 || dlock__conn_pending(cn)) {
                dlock__conn_close(cn);
                continue;
            }
            dlock__conn_stamps_due(cn, dlock__now());
        }
        if (dlock__conn_current(n, cn, (dlock__mono)DLOCK__SENTINEL_CHECK_MS * DLOCK__MS)) {
            *out = cn;
            return 0;
        }
        dlock__conn_close(cn);
    }
    for (attempt = 0;; attempt++) {
        unsigned budget = n->conf.connect_timeout_ms;
        now = dlock__now();
        /* The first attempt is always made (a timedlock whose deadline has
         * passed still acquires a free lock), with the time left before
         * the deadline but at least the reply floor, as a reply wait; later
         * ones stop at the deadline.  None goes past the call's end, and
         * none begins in its last ms (conn.c dlock__end_near: a timed
         * call's first attempt begins DLOCK__LATE_MS before it at least). */
        if (deadline != DLOCK__MONO_NEVER) {
            int64_t left = (deadline - now) / DLOCK__MS;
            if (attempt > 0 && left <= 0) {
                /* less than a ms left: the deadline has come (a caller
                 * that compares its own clock sees it has, and times out) */
                dlock__sleep_until(deadline);
                return ENOLCK; /* message set by the last attempt */
            }
            if (attempt == 0 && left < (int64_t)dlock__reply_floor_ms(n)) left = dlock__reply_floor_ms(n);
            if (left < (int64_t)budget) budget = (unsigned)left;
        }
        if (dlock__end_near())
            return dlock__seterr(ENOLCK, "cannot connect to %s: no time left before the deadline", n->conf.redacted_url);
        budget = dlock__end_cap(budget);
        rc = dlock__conn_open(n, out, budget);
        if (rc != ENOLCK || n->one_connect || dlock__node_refused_since(n, now)) return rc;
        /* Refused or timed out: wait a little (to the deadline at most),
         * then try again while time is left.  Refused for a second: the
         * host's other processes need not find it out again. */
        if (refused == 0) refused = now;
        dlock__hostrec_refused(n, refused, dlock__now());
        (void)dlock__backoff_sleep(&bo, dlock__end_min(deadline));
    }
}

void dlock__pool_flush(dlock__node *n) {
    dlock__conn *idle;
    pthread_mutex_lock(n->mu);
    idle = n->idle;
    n->idle = NULL;
    n->nidle = 0;
    pthread_mutex_unlock(n->mu);
    while (idle != NULL) {
        dlock__conn *next = idle->next;
        dlock__conn_close(idle);
        idle = next;
    }
}

int dlock__pool_keep(dlock__node *n, dlock__conn *cn) {
    if (n->nidle >= POOL_IDLE_MAX) return 0;
    cn->next = n->idle;
    n->idle = cn;
    n->nidle++;
    return 1;
}

void dlock__pool_put(dlock__node *n, dlock__conn *cn, int broken) {
    if (cn == NULL) return;
    /* A connection whose context failed is never used again, whatever
     * the caller says: a write cut off at its end left half a request in
     * it (conn.c, send_all). */
    if (broken || cn->ctx->err) {
        /* The idle connections are as old as the broken one: most likely
         * the server restarted or the network dropped, so drop them too
         * rather than fail on each of them in turn. */
        dlock__pool_flush(n);
    } else {
        pthread_mutex_lock(n->mu);
        if (n->nidle < POOL_IDLE_MAX) {
            cn->next = n->idle;
            n->idle = cn;
            n->nidle++;
            cn = NULL;
        }
        pthread_mutex_unlock(n->mu);
    }
    dlock__conn_close(cn);
}
