/* breaker.c -- a node's circuit breaker (conf.breaker_ms): after a
 * request found the server unreachable for the whole unreachable bound,
 * calls fail at once for a while instead of each waiting that bound. */
#include <errno.h>

#include "net/internal.h"

/* ------------------------------------------------------------- breaker
 *
 * With conf.breaker_ms set, a request that found the server unreachable
 * for the whole unreachable bound opens the node's breaker for that
 * long: lock, unlock and info calls then fail with ENOLCK at once, without
 * asking, so that a process pays the unreachable wait once per period,
 * not on every call.  One call a second is let through as a probe: one
 * attempt (one connection attempt, a reply awaited the reply floor), and
 * its answer closes the breaker -- the server's return is noticed within
 * about a second of the next call.  When the period is over the breaker
 * closes by itself, and the next call waits the whole bound again (a
 * server too slow for a probe is still reached once a period). */

#define BREAKER_PROBE_MS 1000

/* The host-wide record (hostrec.c) is asked before a request that would
 * connect (a process with pooled connections is answering), and while
 * the breaker is open -- but not for a probe the program's breaker
 * already claimed for its keeper (dlock__breaker_probe_now). */
static int host_asked(const dlock__node *n) {
    if (n->host_rec[0] == '\0') return 0;
    return n->breaker_until != 0 ? n->breaker_probe != 0 : n->idle == NULL;
}

int dlock__breaker_pass(dlock__node *n, int *probe) {
    dlock__mono now;
    int rc;
    *probe = 0;
    if (host_asked(n) && (rc = dlock__hostrec_gate(n, probe)) != DLOCK__HOST_NO_SAY) return rc;
    if (n->breaker_until == 0) return 0;
    now = dlock__now();
    if (now >= n->breaker_until) {
        n->breaker_until = 0; /* the period is over */
        return 0;
    }
    if (now >= n->breaker_probe) {
        n->breaker_probe = now + (dlock__mono)BREAKER_PROBE_MS * DLOCK__MS;
        *probe = 1;
        return 0;
    }
    return dlock__seterr(ENOLCK, "%s: not asked: the server was unreachable for %u ms, %lld ms ago; it is "
                         "asked again in %lld ms (circuit breaker, breaker_ms=%u)", n->conf.redacted_url,
                         n->conf.unreachable_ms, (long long)((now - n->breaker_since) / DLOCK__MS),
                         (long long)((n->breaker_probe - now) / DLOCK__MS + 1), n->conf.breaker_ms);
}

/* A request that gave up (ENOLCK) this close to its unreachable bound
 * waited it out (a last attempt may end a little short of it). */
#define BREAKER_SLACK_MS 500

/* Opens c's breaker now for conf.breaker_ms, its next probe due at
 * probe_at.  n->mu held. */
static void breaker_trip(dlock__node *n, dlock__mono now, dlock__mono probe_at) {
    dlock__debug("%s: circuit breaker open for %u ms: calls fail at once but a probe a second",
                 n->conf.redacted_url, n->conf.breaker_ms);
    n->breaker_since = now;
    n->breaker_until = now + (dlock__mono)n->conf.breaker_ms * DLOCK__MS;
    n->breaker_probe = probe_at;
    if (probe_at != 0) dlock__hostrec_down(n, now); /* (0: a keeper's probe, its program's record) */
}

void dlock__breaker_note(dlock__node *n, int rc, dlock__mono ub) {
    dlock__mono now, slack;
    if (n->conf.breaker_ms == 0) return;
    if (rc != ENOLCK) {
        /* The host's other processes learn it at once: after an open
         * breaker, or an outage this process recorded (a request that
         * went on waiting, and was answered). */
        int wrote = __atomic_exchange_n(&n->host_wrote, 0, __ATOMIC_RELAXED);
        if (n->breaker_until != 0) dlock__debug("%s: circuit breaker closed: the server answered", n->conf.redacted_url);
        if (n->breaker_until != 0 || wrote) dlock__hostrec_up(n);
        n->breaker_until = 0; /* the server answered */
        return;
    }
    if (ub == 0) return;
    now = dlock__now();
    slack = (dlock__mono)(n->conf.unreachable_ms / 2 < BREAKER_SLACK_MS ? n->conf.unreachable_ms / 2
                                                                         : BREAKER_SLACK_MS) * DLOCK__MS;
    if (now + slack < ub) return; /* it failed early: a refusal, not a wait */
    breaker_trip(n, now, now + (dlock__mono)BREAKER_PROBE_MS * DLOCK__MS);
}

int dlock__breaker_check(dlock__node *n, int *probe) {
    int rc;
    pthread_mutex_lock(n->mu);
    rc = dlock__breaker_pass(n, probe);
    pthread_mutex_unlock(n->mu);
    return rc;
}

void dlock__breaker_report(dlock__node *n, int rc, int paid) {
    pthread_mutex_lock(n->mu);
    /* paid: as if the bound ended now */
    dlock__breaker_note(n, rc, paid ? dlock__now() : 0);
    pthread_mutex_unlock(n->mu);
}

int dlock__breaker_open(dlock__node *n) {
    int open;
    pthread_mutex_lock(n->mu);
    open = n->breaker_until != 0 && dlock__now() < n->breaker_until;
    pthread_mutex_unlock(n->mu);
    return open;
}

int dlock__breaker_state(dlock__node *n, int *host, dlock__mono *since, dlock__mono *probe) {
    dlock__mono now = dlock__now(), hs, hp;
    int open;
    pthread_mutex_lock(n->mu);
    open = n->breaker_until != 0 && now < n->breaker_until;
    if (open) {
        *since = n->breaker_since;
        *probe = n->breaker_probe;
    }
    pthread_mutex_unlock(n->mu);
    *host = dlock__hostrec_peek(n, &hs, &hp);
    if (*host && (!open || hs < *since)) {
        *since = hs;
        *probe = hp;
    }
    return open || *host;
}

void dlock__breaker_probe_now(dlock__node *n) {
    pthread_mutex_lock(n->mu);
    if (n->conf.breaker_ms != 0) breaker_trip(n, dlock__now(), 0);
    pthread_mutex_unlock(n->mu);
}
