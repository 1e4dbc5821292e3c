/* convert.c -- lock conversion, as the Linux DLM's convert: a thread's
 * read hold becomes the write hold (upgrade) and back (downgrade).
 *
 * The server does each change in one script (backend/lua/convert.lua), so
 * no other writer comes between.  Here the hold moves between the lock's
 * two places in the process -- l->readers (shared) and l->x (exclusive)
 * -- keeping its token (the server knows the hold by it), its recursion
 * count, its lost-lock and risk handlers and the time it began; an upgrade
 * takes the new fence the script issued, a downgrade keeps the writer's.
 * While a conversion request is out the hold is marked releasing
 * (hold.c), so that a renewal answered after the server moved it, which
 * finds it gone from its old place, declares no loss.
 *
 * An upgrade that finds other readers waits for them to leave, registered
 * on the server as the upgrader: new readers wait for it as for a waiting
 * writer (of the writers-first kinds), writers wait because it still
 * reads, and the second of two upgraders gets EDEADLK (the DLM's
 * conversion deadlock) and keeps its read hold.  It asks again at each
 * release heard on the lock's channel, at the time the script said the
 * last other reader's lease ends, and at least every third of its own
 * lease, which keeps its registration alive.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* Runs and frees a lost-lock report, c->mu NOT held. */
static void conv_report(dlock__lost_report *rep) {
    dlock__lost_run(rep);
    free(rep->name);
    memset(rep, 0, sizeof *rep);
}

/* The fields a hold keeps across a conversion, from `from` to `to` (a
 * hold just taken by the same thread): its token, count, lease, handlers
 * and the time it began; validity and renewal from `sent`, when the
 * conversion request went out (the script restarted the lease then). */
static void conv_carry(struct dlock_client *c, dlock__hold *to, const dlock__hold *from, dlock__mono sent) {
    unsigned lease = from->lease_ms;
    memcpy(to->token, from->token, sizeof to->token);
    to->count = from->count;
    to->caching = 0;
    to->fence_at = dlock__now();
    to->lease_ms = lease;
    to->acquired = sent;
    to->valid_until = sent + (dlock__mono)(lease - dlock__drift_ms(&c->be.node.conf, lease)) * DLOCK__MS;
    to->renew_at = sent + (dlock__mono)(lease / 3) * DLOCK__MS;
    to->retry_at = 0;
    to->robust = 0;
    to->fence_unkept = 0;
    to->held_since = from->held_since;
    dlock__hold_handlers_copy(to, from);
}

/* The upgrade happened on the server: the read hold h becomes l->x with
 * fence.  c->mu held. */
static void become_writer(struct dlock_client *c, dlock__lock *l, dlock__hold *h, dlock__thread *self,
                          uint64_t fence, dlock__mono sent) {
    dlock__hold *x = &l->x;
    /* A stale exclusive hold (lost earlier, kept so that its owner's
     * unlock says EPERM) gives way: the server says the lock is ours. */
    if (dlock__hold_in_use(x)) dlock__hold_forget(c, x);
    dlock__hold_take(x, self, 0);
    conv_carry(c, x, h, sent);
    x->shared = 0;
    x->fence = x->ident = x->fence_hi = fence;
    x->hashed = 1; /* the script writes the hash */
    x->heard = 0;
    dlock__hold_forget(c, h);
    dlock__held_add(c, x);
    l->gen++;
    dlock__lock_wake(l);
}

/* The downgrade happened on the server: l->x becomes the read hold r
 * (allocated before the request), with the same fence.  c->mu held. */
static void become_reader(struct dlock_client *c, dlock__lock *l, dlock__hold *r, dlock__thread *self,
                          dlock__mono sent) {
    dlock__hold *x = &l->x;
    r->l = l;
    r->shared = 1;
    dlock__hold_take(r, self, 0);
    conv_carry(c, r, x, sent);
    r->fence = r->ident = r->fence_hi = x->fence;
    r->next = l->readers;
    l->readers = r;
    dlock__hold_forget(c, x);
    dlock__held_add(c, r);
    l->gen++; /* local readers waiting for our write hold may go */
    dlock__lock_wake(l);
}

/* One conversion request for h, c->mu held (released meanwhile); h is
 * marked converting for its duration.  *sent: when it went out.  An
 * error (ENOLCK: no answer) leaves h forgotten. */
static int conv_ask(struct dlock_client *c, dlock__lock *l, dlock__hold *h, int how, dlock__conv *ans,
                    dlock__mono bound, dlock__mono *sent) {
    char token[DLOCK__OWNER_LEN + 1];
    unsigned lease = h->lease_ms;
    int rc;
    memcpy(token, h->token, sizeof token);
    dlock__hold_convert_start(h);
    pthread_mutex_unlock(&c->mu);
    *sent = dlock__now();
    rc = c->be.ops->convert(&c->be, &l->k, token, lease, how, ans, bound);
    pthread_mutex_lock(&c->mu);
    dlock__hold_convert_end(h);
    /* No answer: the server may have converted the hold or not, and this
     * process cannot tell which.  The hold is given up: both of its kinds
     * are released when the server answers again (or their lease runs
     * out), and its token, never used again, cannot end a later hold
     * (orphan.c).  The caller holds nothing. */
    if (rc != 0 && how != DLOCK__CONV_CANCEL) {
        dlock__orphan_add(c, l, token, DLOCK__REL_PLAIN, lease); /* (either form) */
        dlock__orphan_add(c, l, token, DLOCK__REL_SHARED, lease);
        dlock__hold_forget(c, h);
        l->gen++;
        dlock__lock_wake(l);
        rc = dlock__seterr(rc, "%s: no answer to the conversion of '%.64s' (the lock is no longer held)",
                           c->be.node.conf.redacted_url, l->k.name);
    }
    return rc;
}

/* The server says h is not held as the conversion needed: lost. */
static int conv_lost(struct dlock_client *c, dlock__lock *l, dlock__hold *h, dlock__lost_report *rep,
                     const char *what) {
    if (dlock__hold_can_be_lost(h)) {
        dlock__hold_lost(c, h, rep);
        rep->why = DLOCK_LOST_BROKEN;
    }
    dlock__hold_forget(c, h);
    return dlock__seterr(EPERM, "the %s lease of '%.64s' was lost", what, l->k.name);
}

/* ------------------------------------------------------------- upgrade */

/* One upgrade call's state, as struct acq is an acquisition's. */
struct upg {
    struct dlock_client *c;
    dlock__lock *l;
    dlock__thread *self;
    dlock__mono deadline;
    int bad_deadline;
    int registered; /* the server has us as the upgrader: cancel on the way out */
    int counted;    /* counted in l->waiters (keeps the channel subscribed) */
    dlock__lost_report rep;
};

/* The calling thread's valid read hold of l, or NULL with EPERM set.
 * c->mu held. */
static dlock__hold *upg_reader(struct upg *u, int *rc) {
    dlock__hold *h = dlock__reader(u->l, u->self);
    if (h != NULL && dlock__hold_valid(u->c, h, u->self, &u->rep)) return h;
    if (h != NULL) dlock__hold_forget(u->c, h);
    *rc = dlock__seterr(EPERM, "'%.64s' is not read-locked by the calling thread%s", u->l->k.name,
                        h != NULL ? " (its lease was lost)" : "");
    return NULL;
}

/* Sleeps after a busy answer sent at `sent` under gen: until a release
 * moves gen, the last other reader's lease ends (ms), a third of our
 * lease passes (the registration stays alive), or the deadline.  The
 * first busy answer subscribes to the channel and asks again at once (a
 * release may have come before the subscription).  0, or an error. */
static int upg_sleep(struct upg *u, const dlock__conv *ans, dlock__mono sent, uint64_t gen, int sure,
                     unsigned lease) {
    dlock__mono until, now = dlock__now();
    int rc;
    if (u->bad_deadline) return u->bad_deadline;
    if (now >= u->deadline)
        return dlock__seterr(ETIMEDOUT, "'%.64s' was not upgraded by the deadline", u->l->k.name);
    if (!u->counted) {
        u->l->waiters++;
        u->counted = 1;
    }
    if (!sure) {
        rc = dlock__wait_ready(u->c, u->l, u->deadline, 0);
        return rc == ETIMEDOUT ? dlock__seterr(ETIMEDOUT, "'%.64s' was not upgraded by the deadline", u->l->k.name)
                               : rc;
    }
    until = sent + (dlock__mono)(lease / 3) * DLOCK__MS;
    if (ans->ms >= 0 && now + (dlock__mono)(ans->ms + 1) * DLOCK__MS < until)
        until = now + (dlock__mono)(ans->ms + 1) * DLOCK__MS;
    if (until > u->deadline) until = u->deadline;
    rc = dlock__wait(u->c, u->l, gen, until, 0);
    if (rc == ETIMEDOUT && dlock__now() >= u->deadline)
        return dlock__seterr(ETIMEDOUT, "'%.64s' was not upgraded by the deadline", u->l->k.name);
    return rc == ETIMEDOUT ? 0 : rc;
}

/* The attempts: ask, and on a busy answer sleep and ask again, until the
 * hold is the writer's or an error ends it.  c->mu held. */
static int upg_loop(struct upg *u) {
    struct dlock_client *c = u->c;
    dlock__lock *l = u->l;
    dlock__hold *h;
    dlock__conv ans;
    dlock__mono sent;
    uint64_t gen;
    int rc, sure;
    for (;;) {
        if ((h = upg_reader(u, &rc)) == NULL) return rc;
        gen = l->gen;
        sure = dlock__sub_live(c, l);
        if ((rc = conv_ask(c, l, h, DLOCK__CONV_UP, &ans, dlock__unreachable_deadline(&c->be.node), &sent)) != 0) {
            /* (a request cut short by the call's end, as every timed call's) */
            if (rc == ENOLCK && dlock__now() >= u->deadline)
                rc = dlock__seterr(ETIMEDOUT, "'%.64s' was not upgraded by the deadline: its request was "
                                   "unanswered then, and the lock is no longer held", l->k.name);
            return rc;
        }
        if (dlock__reader(l, u->self) != h) /* forgotten meanwhile (the client's end) */
            return dlock__seterr(EPERM, "'%.64s' is no longer read-locked by the calling thread", l->k.name);
        switch (ans.status) {
        case DLOCK__CONV_DONE:
            u->registered = 0;
            become_writer(c, l, h, u->self, ans.fence, sent);
            return 0;
        case DLOCK__CONV_DEADLK:
            return dlock__seterr(EDEADLK, "'%.64s': another reader is upgrading (conversion deadlock); "
                                 "the read lock is still held", l->k.name);
        case DLOCK__CONV_NOTHELD:
            u->registered = 0;
            return conv_lost(c, l, h, &u->rep, "read");
        default:
            u->registered = 1;
            if ((rc = upg_sleep(u, &ans, sent, gen, sure, h->lease_ms)) != 0) return rc;
        }
    }
}

/* Leaving without the write hold while registered as the upgrader: the
 * registration goes (one attempt; otherwise it lapses with the lease it
 * was given), so that readers need not wait for it.  The call's error
 * message stays.  c->mu held, released meanwhile. */
static void upg_cancel(struct upg *u) {
    char token[DLOCK__OWNER_LEN + 1], saved[512];
    dlock__hold *h = dlock__reader(u->l, u->self);
    dlock__conv ans;
    if (h == NULL) return; /* lost: the script took the registration back */
    memcpy(token, h->token, sizeof token);
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    pthread_mutex_unlock(&u->c->mu);
    (void)u->c->be.ops->convert(&u->c->be, &u->l->k, token, h->lease_ms, DLOCK__CONV_CANCEL, &ans, dlock__now());
    dlock__restoreerr(saved);
    pthread_mutex_lock(&u->c->mu);
}

int dlock__upgrade(struct dlock_client *c, dlock__lock *l, dlock__mono deadline, int bad_deadline) {
    struct upg u;
    dlock__mono saved_end;
    int rc;
    if (c->be.ops->convert == NULL)
        return dlock__seterr(ENOTSUP, "%s: this deployment cannot convert a lock atomically (Redlock)",
                             c->be.node.conf.redacted_url);
    memset(&u, 0, sizeof u);
    u.c = c;
    u.l = l;
    u.deadline = deadline;
    u.bad_deadline = bad_deadline;
    u.self = dlock__self_peek();
    saved_end = dlock__call_end_set(deadline == DLOCK__MONO_NEVER ? DLOCK__MONO_NEVER
                                                                   : deadline + (dlock__mono)DLOCK__LATE_MS * DLOCK__MS);
    pthread_mutex_lock(&c->mu);
    l->users++;
    rc = upg_loop(&u);
    if (rc != 0 && u.registered) upg_cancel(&u);
    if (u.counted) dlock__wait_done(c, l);
    l->users--;
    dlock__lock_maybe_free(c, l);
    pthread_mutex_unlock(&c->mu);
    (void)dlock__call_end_set(saved_end);
    conv_report(&u.rep);
    return rc;
}

/* ----------------------------------------------------------- downgrade */

int dlock__downgrade(struct dlock_client *c, dlock__lock *l) {
    dlock__thread *self = dlock__self_peek();
    dlock__lost_report rep = { 0 };
    dlock__hold *x = &l->x, *r;
    dlock__conv ans;
    dlock__mono sent;
    int rc;
    if (c->be.ops->convert == NULL)
        return dlock__seterr(ENOTSUP, "%s: this deployment cannot convert a lock atomically (Redlock)",
                             c->be.node.conf.redacted_url);
    if ((r = calloc(1, sizeof *r)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    l->users++;
    if (self == NULL || x->owner != self || !dlock__hold_valid(c, x, self, &rep) || dlock__hold_is_releasing(x)) {
        int lost = self != NULL && x->owner == self && !dlock__hold_is_live(x);
        if (lost) dlock__hold_forget(c, x);
        rc = dlock__seterr(EPERM, "'%.64s' is not write-locked by the calling thread%s", l->k.name,
                           lost ? " (its lease was lost)" : "");
    } else if ((rc = conv_ask(c, l, x, DLOCK__CONV_DOWN, &ans, dlock__unreachable_deadline(&c->be.node), &sent)) == 0) {
        if (x->owner != self) {
            rc = dlock__seterr(EPERM, "'%.64s' is no longer write-locked by the calling thread", l->k.name);
        } else if (ans.status == DLOCK__CONV_DONE) {
            become_reader(c, l, r, self, sent);
            r = NULL;
        } else {
            rc = conv_lost(c, l, x, &rep, "write");
        }
    }
    l->users--;
    dlock__lock_maybe_free(c, l);
    pthread_mutex_unlock(&c->mu);
    free(r);
    conv_report(&rep);
    return rc;
}
