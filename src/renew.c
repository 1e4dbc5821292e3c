/* renew.c -- the renewal thread: keeps held leases alive, detects losses.
 *
 * One thread per client renews every lock the process holds, well before
 * expiry (at about a third of the lease), and renews all locks that are
 * due within the next sixth of a lease together, as one pipelined batch
 * per 256 locks: the cost grows with round trips per period, not with one
 * round trip per lock.
 *
 * A hold is lost when a renewal is refused (the key is gone or another
 * token holds it) or when its local validity time runs out without a
 * successful renewal.  Validity is counted from when the acquire (or the
 * last successful renewal) was *sent*, minus a clock-drift margin, so the
 * process never believes it holds a lock longer than the server does.  The
 * lost-lock handler runs at once, on this thread, outside the client lock.
 *
 * A renewal in flight is matched to its hold by the hold's fence: a hold
 * that ended (unlock, thread exit) or was replaced meanwhile is left
 * alone.  The renew script checks the token, so a renewal can never
 * extend a lock someone else holds.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "dlock-int.h"

#define RETRY_MS 100 /* after a renewal got no answer */

/* A renewal in flight, matched to its hold by the lock and the fence
 * (the hold itself may be gone by the time the answer comes). */
struct dlock__pending {
    dlock__lock *l;
    int shared;
    uint64_t fence;
    unsigned lease_ms;
    dlock__mono valid_until;
    char token[DLOCK__OWNER_LEN + 1];
};
typedef struct dlock__pending pending;

/* The live hold a renewal was for, or NULL if it ended meanwhile. */
static dlock__hold *find_hold(dlock__lock *l, const pending *p) {
    dlock__hold *h;
    if (!p->shared)
        return (l->x.owner != NULL || l->x.cached) && !l->x.lost && l->x.ident == p->fence ? &l->x : NULL;
    for (h = l->readers; h != NULL; h = h->next)
        if (!h->lost && h->fence == p->fence && strcmp(h->token, p->token) == 0) return h;
    return NULL;
}

static void run_reports(dlock__lost_report *reps, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        dlock__lost_run(&reps[i]);
        free(reps[i].name);
    }
}

/* The batch buffers live in the client, not on this thread's stack: a
 * fork child, which has no renewal thread, still reaches them (and its
 * own renewal thread reuses them). */
static void *renew_main(void *arg) {
    struct dlock_client *c = arg;

    pthread_mutex_lock(&c->mu);
    while (!c->renew_stop) {
        dlock__mono now = dlock__now(), next = DLOCK__MONO_NEVER, sent, valid;
        size_t n = 0, nrep = 0, i;
        dlock__hold *h, *hnext;
        dlock__lock *l;

        pending *pend;
        dlock__renewal *rn;
        dlock__lost_report *reps;
        size_t cap;

        if (c->renew_cap < c->nheld) {
            size_t ncap = c->nheld * 2 + 16;
            pending *p2 = realloc(c->renew_pend, ncap * sizeof *p2);
            dlock__renewal *r2 = p2 ? realloc(c->renew_rn, ncap * sizeof *r2) : NULL;
            dlock__lost_report *l2 = r2 ? realloc(c->renew_reps, ncap * sizeof *l2) : NULL;
            if (p2) c->renew_pend = p2;
            if (r2) c->renew_rn = r2;
            if (l2) c->renew_reps = l2;
            if (l2 != NULL) c->renew_cap = ncap;
        }
        /* Cached locks someone asked for, or whose requests we can no
         * longer hear, go back to the server first. */
        for (h = c->held; h != NULL; h = h->held_next)
            if (h->cached && !dlock__cache_ok(c, h->l)) break;
        if (h != NULL) {
            l = h->l;
            dlock__cache_drop(c, l, now + (dlock__mono)c->conf.command_timeout_ms * DLOCK__MS);
            dlock__lock_maybe_free(c, l);
            continue;
        }
        pend = c->renew_pend;
        rn = c->renew_rn;
        reps = c->renew_reps;
        cap = c->renew_cap;
        for (h = c->held; h != NULL; h = hnext) {
            dlock__mono window;
            hnext = h->held_next;
            if (now >= h->valid_until) {
                /* (A hold being released: its unlock tells.) */
                if (nrep < cap && !h->releasing) dlock__hold_lost(c, h, &reps[nrep++]);
                continue;
            }
            /* Renewed early, by up to a sixth of the lease, so that holds
             * due about together go in one batch; a hold taken from a
             * fair grant, due sooner than a third of its lease, by half
             * its time at most (lock.c: granted()). */
            window = (dlock__mono)(h->lease_ms / 6) * DLOCK__MS;
            if ((h->renew_at - h->acquired) / 2 < window) window = (h->renew_at - h->acquired) / 2;
            if (h->renew_at - window <= now && h->retry_at <= now && n < cap) {
                pend[n].l = h->l;
                pend[n].shared = h->shared;
                pend[n].fence = h->ident;
                pend[n].lease_ms = h->lease_ms;
                pend[n].valid_until = h->valid_until;
                memcpy(pend[n].token, h->token, sizeof pend[n].token);
                h->l->users++;
                n++;
            } else {
                /* (After a renewal that got no answer: not before
                 * retry_at, or an unreachable server is asked in a loop.) */
                dlock__mono when = h->retry_at > now ? h->retry_at : h->renew_at;
                if (when < next) next = when;
            }
            if (h->valid_until < next) next = h->valid_until;
        }
        if (nrep > 0) {
            pthread_mutex_unlock(&c->mu);
            run_reports(reps, nrep);
            pthread_mutex_lock(&c->mu);
        }
        if (c->orphans != NULL && n == 0) {
            /* Only when no renewal is due (renewals first: on a cluster an
             * orphan's node may be down while the holds' nodes are not),
             * and bounded by the command timeout and the next renewal. */
            dlock__mono dl = dlock__now() + (dlock__mono)c->conf.command_timeout_ms * DLOCK__MS, o;
            if (next < dl) dl = next;
            o = dlock__orphans_release(c, NULL, dl);
            if (o < next) next = o;
        }
        if (c->held == NULL && now < c->renew_idle_until && now + c->renew_tick < next) {
            /* Locks were taken lately: keep waking every sixth of a lease
             * for a while, so that a new hold's first renewal is always
             * seen in time without kicking this thread at every acquire
             * (that wake-up would cost more than the acquire itself). */
            next = now + c->renew_tick;
        }
        if (n == 0) {
            /* (c->mu was released above: a stop may have come meanwhile) */
            if (nrep == 0 && !c->renew_stop) {
                c->renew_wake = next; /* new holds due earlier kick us */
                dlock__cond_wait_until(&c->renew_cv, &c->mu, next);
                c->renew_wake = 0;
            }
            continue;
        }
        valid = DLOCK__MONO_NEVER;
        for (i = 0; i < n; i++) {
            if (pend[i].valid_until < valid) valid = pend[i].valid_until;
            rn[i].l = pend[i].l;
            rn[i].shared = pend[i].shared;
            rn[i].token = pend[i].token;
            rn[i].lease_ms = pend[i].lease_ms;
            rn[i].result = -1;
        }
        sent = dlock__now();
        pthread_mutex_unlock(&c->mu);
        (void)c->ops->renew(c, rn, n, valid);
        pthread_mutex_lock(&c->mu);
        now = dlock__now();
        nrep = 0;
        for (i = 0; i < n; i++) {
            l = pend[i].l;
            l->users--;
            h = find_hold(l, &pend[i]);
            if (h != NULL) {
                if (rn[i].result == 1) {
                    dlock__mono v = sent + (dlock__mono)(h->lease_ms - dlock__drift_ms(c, h->lease_ms)) * DLOCK__MS;
                    if (v > h->valid_until) h->valid_until = v;
                    h->renew_at = sent + (dlock__mono)(h->lease_ms / 3) * DLOCK__MS;
                } else if (h->releasing) {
                    /* Refused: released meanwhile, or run out (its unlock
                     * says which).  Nothing to report either way. */
                    h->renew_at = h->retry_at = now + (dlock__mono)RETRY_MS * DLOCK__MS;
                } else if (rn[i].result == 0 || now >= h->valid_until) {
                    dlock__hold_lost(c, h, &reps[nrep]);
                    /* refused: the key is gone or another owner's */
                    if (rn[i].result == 0) reps[nrep].why = DLOCK_LOST_BROKEN;
                    nrep++;
                } else {
                    h->renew_at = h->retry_at = now + (dlock__mono)RETRY_MS * DLOCK__MS;
                }
            }
            dlock__lock_maybe_free(c, l);
        }
        if (nrep > 0) {
            pthread_mutex_unlock(&c->mu);
            run_reports(reps, nrep);
            pthread_mutex_lock(&c->mu);
        }
    }
    c->renew_running = 0;
    if (c->renew_conn != NULL) {
        dlock__conn_close(c->renew_conn);
        c->renew_conn = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Background threads start with every signal blocked, so a host
 * program's signals are never delivered to them. */
int dlock__thread_start(pthread_t *th, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    int rc;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(th, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int dlock__renew_start(struct dlock_client *c) {
    int rc;
    if (c->renew_running) return 0;
    c->renew_stop = 0;
    if ((rc = dlock__thread_start(&c->renew_thread, renew_main, c)) != 0)
        return dlock__seterr(EAGAIN, "cannot start the renewal thread");
    c->renew_running = 1;
    return 0;
}

void dlock__renew_kick(struct dlock_client *c) {
    pthread_cond_signal(&c->renew_cv);
}

void dlock__renew_stop(struct dlock_client *c) {
    int running;
    pthread_mutex_lock(&c->mu);
    running = c->renew_running;
    c->renew_stop = 1;
    pthread_cond_broadcast(&c->renew_cv);
    pthread_mutex_unlock(&c->mu);
    if (running) pthread_join(c->renew_thread, NULL);
}
