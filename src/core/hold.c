/* hold.c -- a hold's state, and every change of it.
 *
 * A hold (dlock__hold, core.h) is one thread's (or, for a process-owned
 * mutex, the process's) hold of a lock: the lock's exclusive slot l->x,
 * or a shared hold on l->readers.  Its state is one field, `state`, and
 * nothing outside this file writes it, nor `owner`, `releasing` or
 * `inconsistent`: the other files ask the questions and make the named
 * transitions below, always with the client's mutex held.
 *
 *   NONE    no hold; owner NULL.  (The exclusive slot when nobody here
 *           holds the lock.  A shared hold is freed when it is forgotten;
 *           one the process released at exit stays on its list as NONE.)
 *   HELD    owner holds it: on the client's held list, renewed, blocking
 *           the other threads of this process.
 *   CACHED  a caching mutex's hold the process kept at its unlock (nobody
 *           had asked for it): held by no thread (owner NULL), still on
 *           the held list and renewed, until someone asks for it.
 *   LOST    its validity ran out, or the server said it is gone: off the
 *           held list; owner still names it, so that the owner's unlock
 *           gives EPERM and its next lock call forgets it.
 *
 * Releasing is a flag on a HELD hold, not a state of its own: the owner
 * sent its unlock and waits for the answer (dlock__release).  Meanwhile
 * the hold is HELD for every question (live, renewed: on a cluster a
 * release may take longer than the lease; valid; blocking the process's
 * other threads) but two: its loss is never declared (the unlock's answer
 * tells, and runs the handler: release_lapsed in release.c), and another
 * thread of a process-owned mutex may not unlock it or count it held.  The flag outlives a loss (LOST, releasing): the
 * unlock is still on its way.  The lock may also be handed to another
 * thread of this process meanwhile (the server answers the waiter it
 * hands the lock to first); take makes it that thread's.
 *
 * Transitions (from -> to):
 *   take           any -> HELD          the server granted it (lock.c)
 *   cache          HELD -> CACHED       unlock of a caching mutex
 *   uncache        CACHED -> HELD       a lock call takes it from the cache
 *   release_start  HELD -> HELD+releasing   the unlock goes to the server
 *   convert_start, convert_end  the same flag, set while a conversion
 *                  request is out (convert.c), then cleared
 *   lost           HELD -> LOST         validity ran out, the server refused
 *                                       a renewal, or granted it anew;
 *                                       its handler is told (*rep)
 *                  CACHED -> NONE       its handler told only if a hold
 *                                       ended since the last renewal the
 *                                       server confirmed (below)
 *   forget         any -> NONE          unlock answered, a lost hold
 *                                       dropped, its thread exited, a
 *                                       cached one given back
 *   abandon        HELD, CACHED -> NONE at exit, the process releases it
 *   consistent     clears `inconsistent` (dlock_mutex_consistent)
 *
 * A hold that ends into the cache asks the server nothing, so nothing
 * confirms that the lock was still the process's when it ended: had the
 * server lost the lock meanwhile (its data lost, the lock broken), that
 * hold was not exclusive, and nobody would know.  `ends` counts the holds
 * ended into the cache, `ends_seen` those a renewal sent after them
 * confirmed (renew.c).  A cache that turns out lost -- its renewal
 * refused, its validity run out, its release finding it gone (lock.c,
 * dlock__cache_drop) -- with holds unconfirmed tells the handler of the
 * last of them, once, as an unlock that finds its hold lapsed does; one
 * whose every hold was confirmed ends quietly.
 *
 * Questions: is_live (HELD), is_cached (CACHED), is_releasing (the flag),
 * is_renewable (HELD or CACHED: a renewal's answer applies), can_be_lost
 * (HELD and not releasing, or CACHED), in_use (not NONE: the table entry
 * stays), is_inconsistent, valid (live, the caller's, and in time), and
 * release_kind (how its release ends it on the server).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* ------------------------------------------------------------ questions */

/* Held by its owner (a thread of this process, or the process), releasing
 * or not. */
int dlock__hold_is_live(const dlock__hold *h) {
    return h->state == DLOCK__HOLD_HELD;
}

int dlock__hold_is_cached(const dlock__hold *h) {
    return h->state == DLOCK__HOLD_CACHED;
}

/* Its unlock is on the way to the server. */
int dlock__hold_is_releasing(const dlock__hold *h) {
    return h->releasing;
}

/* Renewed by the renewal thread: an answer about it still applies. */
int dlock__hold_is_renewable(const dlock__hold *h) {
    return h->state == DLOCK__HOLD_HELD || h->state == DLOCK__HOLD_CACHED;
}

/* May it be declared lost (dlock__hold_lost)?  Not while its unlock is on
 * the way: that unlock's answer tells the caller. */
int dlock__hold_can_be_lost(const dlock__hold *h) {
    return (h->state == DLOCK__HOLD_HELD && !h->releasing) || h->state == DLOCK__HOLD_CACHED;
}

/* h's lost-lock handler: fn(arg) told of obj. */
static void lost_set(dlock__hold *h, dlock_lost_fn fn, void *arg, void *obj) {
    h->lost_fn = fn;
    h->lost_arg = arg;
    h->lost_obj = obj;
}

/* h's lease-at-risk handler, not yet told. */
static void risk_set(dlock__hold *h, dlock_risk_fn fn, void *arg, unsigned margin_ms) {
    h->risk_fn = fn;
    h->risk_arg = arg;
    h->risk_margin_ms = margin_ms;
    h->at_risk = 0;
}

void dlock__hold_set_handlers(dlock__hold *h, const dlock__want *w) {
    lost_set(h, w->lost_fn, w->lost_arg, w->lost_obj);
    risk_set(h, w->risk_fn, w->risk_arg, w->risk_margin_ms);
}

void dlock__hold_handlers_copy(dlock__hold *to, const dlock__hold *from) {
    lost_set(to, from->lost_fn, from->lost_arg, from->lost_obj);
    risk_set(to, from->risk_fn, from->risk_arg, from->risk_margin_ms);
}

/* The margin counts back from the validity end (the lease less the
 * drift), and the warning is due RISK_EARLY_MS before that, so that the
 * handler starts with the whole margin left though the renewal thread
 * wakes a little late.  A margin over half the lease counts as half, so
 * that a renewal answered in time (due at a third) always comes before
 * the warning.  A cached hold is nobody's: its loss costs the next lock a
 * round trip, nothing more. */
#define RISK_EARLY_MS 50u
dlock__mono dlock__hold_risk_at(const dlock__hold *h) {
    unsigned margin = h->risk_margin_ms;
    if (h->risk_fn == NULL || h->at_risk || h->state != DLOCK__HOLD_HELD || h->releasing) return DLOCK__MONO_NEVER;
    if (margin > h->lease_ms / 2) margin = h->lease_ms / 2;
    return h->valid_until - (dlock__mono)(margin + RISK_EARLY_MS) * DLOCK__MS;
}

/* Held, cached or lost: the lock's table entry must stay. */
int dlock__hold_in_use(const dlock__hold *h) {
    return h->state != DLOCK__HOLD_NONE;
}

/* EOWNERDEAD was given for it, and consistent() not yet called. */
int dlock__hold_is_inconsistent(const dlock__hold *h) {
    return h->inconsistent;
}

/* How h's release ends it on the server (dlock__release_kind); dead: its
 * holder died (or may have). */
int dlock__hold_release_kind(const dlock__hold *h, int dead) {
    return dlock__release_kind(h->shared, h->robust, dead, h->inconsistent, h->hashed);
}

/* Is h held by self, and still valid?  A hold whose validity ran out is
 * marked lost here, at once, in case the renewal thread has not yet seen
 * it; its handler report goes to *rep. */
int dlock__hold_valid(struct dlock_client *c, dlock__hold *h, const dlock__thread *self,
                      dlock__lost_report *rep) {
    if (h == NULL || self == NULL || h->owner != self || !dlock__hold_is_live(h)) return 0;
    if (dlock__now() < h->valid_until) return 1;
    dlock__hold_lost(c, h, rep);
    return 0;
}

/* ---------------------------------------------------------- transitions */

/* Any -> HELD: the server granted it to self (ownerdead: with the
 * previous holder's owner-died mark).  The caller fills in the rest of
 * the hold (token, fences, lease) and puts it on the held list. */
void dlock__hold_take(dlock__hold *h, dlock__thread *self, int ownerdead) {
    h->state = DLOCK__HOLD_HELD;
    h->owner = self;
    h->releasing = 0;
    h->inconsistent = ownerdead;
    h->ends = h->ends_seen = 0; /* a new hold on the server: nothing ended unconfirmed */
}

/* HELD -> CACHED: its owner unlocked it and the process keeps it; the
 * hold's end is unconfirmed until a renewal sent after it succeeds. */
void dlock__hold_cache(dlock__hold *h) {
    h->state = DLOCK__HOLD_CACHED;
    h->owner = NULL;
    h->count = 0;
    h->ends++;
}

/* CACHED -> HELD: self takes it from the cache, with no round trip. */
void dlock__hold_uncache(dlock__hold *h, dlock__thread *self) {
    h->state = DLOCK__HOLD_HELD;
    h->owner = self;
    h->inconsistent = 0;
}

/* HELD -> HELD, releasing: its unlock goes to the server. */
void dlock__hold_release_start(dlock__hold *h) {
    h->releasing = 1;
}

/* HELD -> HELD, converting (convert.c): as releasing, while a conversion
 * request is out -- a renewal refused meanwhile (the server moved the
 * hold) declares no loss; _end clears it. */
void dlock__hold_convert_start(dlock__hold *h) {
    h->releasing = 1;
}

void dlock__hold_convert_end(dlock__hold *h) {
    h->releasing = 0;
}

/* *rep for h's handler, if h's holds did not all end before its last
 * confirmed renewal (the top of this file); else left empty. */
void dlock__hold_unconfirmed(const dlock__hold *h, dlock__lost_report *rep) {
    memset(rep, 0, sizeof *rep);
    if (h->ends == h->ends_seen || h->lost_fn == NULL) return;
    rep->fn = h->lost_fn;
    rep->arg = h->lost_arg;
    rep->obj = h->lost_obj;
    rep->name = strdup(h->l->k.name);
}

/* HELD -> LOST, off the held list, with *rep filled when a handler must
 * run (by the caller, without c->mu); CACHED -> NONE (held by no thread:
 * its handler told only for a hold that ended unconfirmed).  Either
 * wakes the lock's local waiters. */
void dlock__hold_lost(struct dlock_client *c, dlock__hold *h, dlock__lost_report *rep) {
    memset(rep, 0, sizeof *rep);
    if (h->state == DLOCK__HOLD_CACHED) {
        /* (A cached hold is exclusive, l->x, which forgetting does not
         * free.) */
        dlock__lock *l = h->l;
        dlock__hold_unconfirmed(h, rep);
        if (rep->fn != NULL)
            dlock__debug("'%.64s': cached lock lost after a hold ended unconfirmed (fence %llu)", l->k.name,
                         (unsigned long long)h->fence);
        dlock__hold_forget(c, h);
        l->gen++;
        dlock__lock_wake(l);
        return;
    }
    dlock__debug("'%.64s': hold lost (fence %llu): its lease ran out or the server refused its renewal", h->l->k.name,
                 (unsigned long long)h->fence);
    dlock__held_remove(c, h);
    if (!h->unit) dlock__stats_lost(c, h->l); /* (semaphores have no figures) */
    h->state = DLOCK__HOLD_LOST;
    h->l->gen++;
    dlock__lock_wake(h->l);
    memset(rep, 0, sizeof *rep);
    if (h->lost_fn != NULL) {
        rep->fn = h->lost_fn;
        rep->arg = h->lost_arg;
        rep->obj = h->lost_obj;
        rep->name = strdup(h->l->k.name);
    }
}

/* -> NONE: no owner, no count, no flag left for the next hold. */
static void clear(dlock__hold *h) {
    h->state = DLOCK__HOLD_NONE;
    h->owner = NULL;
    h->count = 0;
    h->releasing = 0;
    h->inconsistent = 0;
    h->caching = 0;
    h->ends = h->ends_seen = 0;
}

/* Any -> NONE: a hold of a thread that is gone or gave it up: off the
 * renewal list, and a shared hold off its lock's list and freed. */
void dlock__hold_forget(struct dlock_client *c, dlock__hold *h) {
    dlock__lock *l = h->l;
    dlock__held_remove(c, h);
    if (h->shared) {
        dlock__hold **pp = &l->readers;
        while (*pp != NULL && *pp != h) pp = &(*pp)->next;
        if (*pp != NULL) *pp = h->next;
        free(h);
    } else {
        clear(h);
    }
}

/* HELD or CACHED -> NONE at exit (client.c), where the process releases
 * it: off the held list; a shared hold stays on its lock's list. */
void dlock__hold_abandon(struct dlock_client *c, dlock__hold *h) {
    dlock__held_remove(c, h);
    clear(h);
}

/* The state its EOWNERDEAD announced was made consistent again. */
void dlock__hold_consistent(dlock__hold *h) {
    h->inconsistent = 0;
}
