/* orphan.c -- holds the server may have that nobody here knows of.
 *
 * An acquire whose answer never came (or came garbled) may still have
 * been granted; an unlock whose answer never came may not have happened.
 * Either way the server may hold a key under a token no live hold has:
 * an orphan, which would keep everyone out until its lease ran out.  Such
 * tokens are remembered here and released as soon as the server answers
 * again: by the renewal thread (its release_orphans phase, when no renewal
 * is due), and by the next acquire of the same lock in this process, which
 * releases it first.  Each hold has its own token, so releasing an orphan
 * can never end a hold someone took since.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct dlock__orphan {
    dlock__lock *l;
    char token[DLOCK__OWNER_LEN + 1];
    int how;            /* DLOCK__REL_* */
    int busy;           /* a thread is releasing it */
    unsigned pass;      /* the last release pass that tried it */
    dlock__mono until;  /* its lease is surely over by then: forget it */
    struct dlock__orphan *next;
};

/* Remembers token's possible hold of l.  A robust acquisition's "undo"
 * matters after its lease too (the marker its take set outlives the
 * hold): it is kept an unreachable bound longer, for an outage that long.
 * c->mu held. */
void dlock__orphan_add(struct dlock_client *c, dlock__lock *l, const char *token, int how, unsigned lease_ms) {
    struct dlock__orphan *o = calloc(1, sizeof *o);
    if (o == NULL) return; /* then its lease simply runs out */
    o->l = l;
    memcpy(o->token, token, sizeof o->token);
    o->how = how;
    o->until = (how == DLOCK__REL_UNDO ? dlock__unreachable_deadline(&c->be.node) : dlock__now()) +
               (dlock__mono)lease_ms * DLOCK__MS;
    o->next = c->orphans;
    c->orphans = o;
    l->users++;
    dlock__renew_start(c);
    dlock__renew_kick(c);
}

/* The next orphan of l (any lock when l is NULL) this pass has not tried
 * and no other thread is releasing, or NULL. */
static struct dlock__orphan *next_to_try(struct dlock_client *c, dlock__lock *l, unsigned pass) {
    struct dlock__orphan *o;
    for (o = c->orphans; o != NULL; o = o->next)
        if ((l == NULL || o->l == l) && !o->busy && o->pass != pass) return o;
    return NULL;
}

/* One release of o, c->mu dropped for the round trip (o is marked busy
 * meanwhile).  Returns 1 when o is done with: its lease is surely over, or
 * the server answered (a release that found the key held lets the lock's
 * waiters go); 0 when it got no answer. */
static int try_release(struct dlock_client *c, struct dlock__orphan *o, dlock__mono deadline) {
    int rc, released = 0, done;
    if (dlock__now() >= o->until) return 1; /* expired: nothing left to release */
    o->busy = 1;
    pthread_mutex_unlock(&c->mu);
    rc = c->be.ops->release(&c->be, &o->l->k, o->token, o->how, &released, NULL, deadline);
    pthread_mutex_lock(&c->mu);
    o->busy = 0;
    done = rc == 0 || dlock__now() >= o->until;
    if (released) { /* it was held: waiters may go */
        o->l->gen++;
        dlock__lock_wake(o->l);
    }
    return done;
}

/* Takes o off the list and frees it, and its lock entry if unused. */
static void drop(struct dlock_client *c, struct dlock__orphan *o) {
    struct dlock__orphan **pp;
    for (pp = &c->orphans; *pp != o; pp = &(*pp)->next)
        ;
    *pp = o->next;
    o->l->users--;
    dlock__lock_maybe_free(c, o->l);
    free(o);
}

/* Tries to release the orphans of l (every lock when l is NULL), one
 * round trip each, bounded by deadline; stops at the first that gets no
 * answer (the server is still away).  Returns DLOCK__MONO_NEVER when none
 * is left, else now: the caller tries again after its back-off (the
 * renewal thread's, renew.c release_orphans).  c->mu held; released during
 * the round trips, while the orphan is marked busy so that no other
 * thread releases it at the same time.  The renewal thread calls it in
 * its release_orphans phase, an acquire for its own lock, the exit
 * handler once more. */
dlock__mono dlock__orphans_release(struct dlock_client *c, dlock__lock *l, dlock__mono deadline) {
    unsigned pass = ++c->orphan_pass;
    struct dlock__orphan *o;

    while ((o = next_to_try(c, l, pass)) != NULL) {
        o->pass = pass;
        if (!try_release(c, o, deadline)) break; /* no answer: the server is still away */
        drop(c, o);
    }
    for (o = c->orphans; o != NULL; o = o->next)
        if (l == NULL || o->l == l) return dlock__now();
    return DLOCK__MONO_NEVER;
}

/* Forgets every orphan: in a fork child (the parent deals with them), and
 * when the client is destroyed. */
void dlock__orphans_forget(struct dlock_client *c) {
    while (c->orphans != NULL) {
        struct dlock__orphan *o = c->orphans;
        c->orphans = o->next;
        o->l->users--;
        free(o);
    }
}
