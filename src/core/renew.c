/* renew.c -- the renewal thread: keeps held leases alive, detects losses.
 *
 * One thread per client renews every lock the process holds, well before
 * expiry (at about a third of the lease), and renews all locks that are
 * due within the next sixth of a lease together, as one pipelined batch
 * per 256 locks: the cost grows with round trips per period, not with one
 * round trip per lock.
 *
 * Its loop (renew_main) reads as named phases, as libuv's uv_run does, each
 * a short function over one struct (renew_loop) that carries the pass:
 *
 *   update_time       the pass's clock; nothing due yet
 *   make_room         batch buffers for every hold
 *   give_back_cached  a cached lock someone asked for goes back first
 *   collect_due       expired holds are lost; due ones join the batch
 *   run_lost          the lost-lock handlers, outside the client lock
 *   send_batch        the renewals, one pipelined round, outside the lock
 *   apply_answers     renewed / lost / retried after a back-off
 *   release_orphans   only when no renewal was due
 *   sleep_until_due   the next renewal, validity end or idle tick, or a kick
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
 *
 * A semaphore's unit leased to the process (undo: sem.c) is a hold on
 * the held list too (h->unit), and goes in the same batches: its renewal
 * is sem.lua's 'renew' instead of renew.lua, matched back to its unit by
 * its token (a unit has no fence), and its loss is told to its lost-unit
 * handler (dlock__unit_lost).  One round trip per pass, locks and units
 * together.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* A renewal that got no answer is asked again after a back-off, one for
 * the pass (the holds retried together stay one batch), reset by a pass
 * that asks none again.  Its steps stop at 100 ms, below the
 * library's DLOCK__BACKOFF_MAX_MS: the lease runs down meanwhile, and a
 * hold is renewed at most one step after its server answers again. */
#define RETRY_MIN_MS DLOCK__BACKOFF_MIN_MS
#define RETRY_MAX_MS 100u
/* A renewal refused while its hold is being released is looked at again
 * after this (its unlock says whether it was released or ran out). */
#define RELEASING_MS 100
/* Orphans left after a release pass (the server did not answer) are tried
 * again after a back-off, reset once none is left.  Its steps stop at
 * 100 ms too: an orphan keeps everyone out of its lock until it is
 * released or its lease runs out, so it goes at most one step after its
 * server answers again. */
#define ORPHAN_RETRY_MIN_MS DLOCK__BACKOFF_MIN_MS
#define ORPHAN_RETRY_MAX_MS 100u

/* A renewal in flight, matched to its hold by the lock and the fence
 * (the hold itself may be gone by the time the answer comes). */
struct dlock__pending {
    dlock__lock *l;
    int shared;
    int unit;
    uint64_t fence;
    int record;  /* the lock does not keep the hold's fence: the renewal records it */
    uint64_t ends; /* caching: the holds ended into the cache before it was sent */
    unsigned lease_ms;
    dlock__mono valid_until;
    dlock__mono risk_at; /* its lease-at-risk time, if it is to be told */
    char token[DLOCK__OWNER_LEN + 1];
};
typedef struct dlock__pending pending;

/* One pass of the renewal loop, carried through its phases.  The batch
 * buffers it points to live in the client, not on this thread's stack: a
 * fork child, which has no renewal thread, still reaches them (and its own
 * renewal thread reuses them). */
struct renew_loop {
    struct dlock_client *c;
    dlock__mono now;   /* the pass's clock (update_time; apply_answers) */
    dlock__mono next;  /* when the next pass is due, if none is now */
    dlock__mono sent;  /* when the batch was sent: validity counts from it */
    dlock__mono retry_at;  /* this pass's retry time; 0: none retried yet */
    dlock__backoff retry;  /* renewals that got no answer (RETRY_*) */
    dlock__backoff orphans; /* orphans left after a pass (ORPHAN_RETRY_*) */
    size_t n;          /* renewals in the batch (pend, rn) */
    size_t nrep;       /* lost holds to report (reps) */
    pending *pend;
    dlock__renewal *rn;
    dlock__lost_report *reps;
    size_t cap;        /* the length of each buffer */
};
typedef struct renew_loop renew_loop;

/* The live hold a renewal was for, or NULL if it ended meanwhile. */
static dlock__hold *find_hold(dlock__lock *l, const pending *p) {
    dlock__hold *h;
    if (p->unit) {
        for (h = l->units; h != NULL; h = h->next)
            if (dlock__hold_is_renewable(h) && strcmp(h->token, p->token) == 0) return h;
        return NULL;
    }
    if (!p->shared)
        return dlock__hold_is_renewable(&l->x) && l->x.ident == p->fence ? &l->x : NULL;
    for (h = l->readers; h != NULL; h = h->next)
        if (dlock__hold_is_renewable(h) && h->fence == p->fence && strcmp(h->token, p->token) == 0) return h;
    return NULL;
}

/* Phase: update time.  A pass starts from the clock, with nothing due and
 * nothing to report. */
static void update_time(renew_loop *lp) {
    lp->now = dlock__now();
    lp->next = DLOCK__MONO_NEVER;
    lp->n = lp->nrep = 0;
}

/* Phase: room in the batch buffers for every hold.  A failed realloc keeps
 * the old buffers (and capacity): the holds that do not fit wait for a
 * later pass. */
static void make_room(renew_loop *lp) {
    struct dlock_client *c = lp->c;
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
    lp->pend = c->renew_pend;
    lp->rn = c->renew_rn;
    lp->reps = c->renew_reps;
    lp->cap = c->renew_cap;
}

/* The earliest validity end of the holds that can be lost, or `by` if
 * none ends sooner: a request this thread makes waits no longer, so that
 * their lost handlers run on time even with the server cut off. */
static dlock__mono first_valid_end(const struct dlock_client *c, dlock__mono by) {
    const dlock__hold *h;
    for (h = c->held; h != NULL; h = h->held_next)
        if (dlock__hold_can_be_lost(h) && h->valid_until < by) by = h->valid_until;
    return by;
}

/* Phase: give back cached locks that were asked for.  Cached locks someone
 * asked for, or whose requests we can no longer hear, go back to the
 * server before anything is renewed; one per pass (the release drops the
 * client lock), then the pass starts again.  Returns 1 if one went.  The
 * release waits no longer than the command timeout, nor past another
 * hold's validity end (the next pass finds that hold lost). */
static int give_back_cached(renew_loop *lp) {
    struct dlock_client *c = lp->c;
    dlock__hold *h;
    dlock__lock *l;
    for (h = c->held; h != NULL; h = h->held_next)
        if (dlock__hold_is_cached(h) && !dlock__cache_ok(c, h->l)) break;
    if (h == NULL) return 0;
    l = h->l;
    dlock__cache_drop(c, l, first_valid_end(c, lp->now + (dlock__mono)c->be.node.conf.command_timeout_ms * DLOCK__MS));
    dlock__lock_maybe_free(c, l);
    return 1;
}

static void wake_by(renew_loop *lp, dlock__mono when) {
    if (when < lp->next) lp->next = when;
}

/* Is h's renewal window open?  Renewed early, by up to a sixth of the
 * lease, so that holds due about together go in one batch; a hold taken
 * from a fair grant, due sooner than a third of its lease, by half its
 * time at most (lock.c: acq_granted()).  After a renewal that got no answer,
 * not before retry_at, or an unreachable server is asked in a loop. */
static int is_due(const renew_loop *lp, const dlock__hold *h) {
    dlock__mono window = (dlock__mono)(h->lease_ms / 6) * DLOCK__MS;
    if ((h->renew_at - h->acquired) / 2 < window) window = (h->renew_at - h->acquired) / 2;
    return h->renew_at - window <= lp->now && h->retry_at <= lp->now;
}

/* h joins the batch; users++ keeps its lock entry alive until the answer. */
static void join_batch(renew_loop *lp, dlock__hold *h) {
    pending *p = &lp->pend[lp->n++];
    p->l = h->l;
    p->shared = h->shared;
    p->unit = h->unit;
    p->fence = h->ident;
    p->record = h->fence_unkept;
    p->ends = h->ends;
    p->lease_ms = h->lease_ms;
    p->valid_until = h->valid_until;
    p->risk_at = dlock__hold_risk_at(h);
    memcpy(p->token, h->token, sizeof p->token);
    h->l->users++;
}

/* h is lost: a hold's lost-lock handler, or a unit's lost-unit handler,
 * is to be told (*rep). */
static void hold_lost(renew_loop *lp, dlock__hold *h, dlock__lost_report *rep) {
    if (h->unit) dlock__unit_lost(lp->c, h, rep);
    else dlock__hold_lost(lp->c, h, rep);
}

/* h's lease-at-risk handler is to be told event (DLOCK_LEASE_AT_RISK,
 * or _RECOVERED after it), with the time left by h's clock. */
static void risk_told(renew_loop *lp, dlock__hold *h, int event) {
    dlock__lost_report *rep;
    int64_t left = (h->valid_until - lp->now) / DLOCK__MS;
    if (lp->nrep >= lp->cap) return; /* (a later pass tells it) */
    rep = &lp->reps[lp->nrep++];
    memset(rep, 0, sizeof *rep);
    rep->risk_fn = h->risk_fn;
    rep->arg = h->risk_arg;
    rep->obj = h->lost_obj;
    rep->name = strdup(h->l->k.name);
    rep->event = event;
    rep->left_ms = left < 1 ? 1u : (unsigned)left;
    h->at_risk = event == DLOCK_LEASE_AT_RISK;
    if (h->at_risk && !h->unit) dlock__stats_risk(lp->c, h->l); /* the exporter's count (semaphores: no figures) */
}

/* Phase: collect what is due.  One walk of the held list: a hold whose
 * validity ran out is lost (one being released is not: its unlock tells);
 * one whose lease is at risk by now is told so; a due one joins the
 * batch; every other one says when the next pass is due (its renewal, or
 * its retry after a renewal that got no answer), and so does every live
 * hold's validity end and lease-at-risk time. */
static void collect_due(renew_loop *lp) {
    dlock__hold *h, *hnext;
    for (h = lp->c->held; h != NULL; h = hnext) {
        dlock__mono risk;
        hnext = h->held_next;
        if (lp->now >= h->valid_until) {
            if (lp->nrep < lp->cap && dlock__hold_can_be_lost(h)) hold_lost(lp, h, &lp->reps[lp->nrep++]);
            continue;
        }
        if ((risk = dlock__hold_risk_at(h)) <= lp->now) risk_told(lp, h, DLOCK_LEASE_AT_RISK);
        else wake_by(lp, risk);
        if (is_due(lp, h) && lp->n < lp->cap)
            join_batch(lp, h);
        else
            wake_by(lp, h->retry_at > lp->now ? h->retry_at : h->renew_at);
        wake_by(lp, h->valid_until);
    }
}

/* Phase: the lost-lock handlers of this pass's lost holds, at once, on
 * this thread, outside the client lock.  (nrep stays: a pass that reported
 * a loss goes round again instead of sleeping.) */
static void run_lost(renew_loop *lp) {
    size_t i;
    if (lp->nrep == 0) return;
    pthread_mutex_unlock(&lp->c->mu);
    for (i = 0; i < lp->nrep; i++) {
        dlock__lost_run(&lp->reps[i]);
        free(lp->reps[i].name);
    }
    pthread_mutex_lock(&lp->c->mu);
}

/* Phase: send the batch, outside the client lock.  Answers are awaited no
 * longer than the earliest validity end in it: past that those holds are
 * lost anyway, and their handlers must run; nor past a lease-at-risk time
 * in it, whose handler must run then (the batch, unanswered, is asked
 * again after a back-off). */
static void send_batch(renew_loop *lp) {
    struct dlock_client *c = lp->c;
    dlock__mono valid = DLOCK__MONO_NEVER, saved;
    size_t i;
    for (i = 0; i < lp->n; i++) {
        if (lp->pend[i].valid_until < valid) valid = lp->pend[i].valid_until;
        if (lp->pend[i].risk_at < valid) valid = lp->pend[i].risk_at;
        lp->rn[i].k = &lp->pend[i].l->k;
        lp->rn[i].shared = lp->pend[i].shared;
        lp->rn[i].unit = lp->pend[i].unit;
        lp->rn[i].token = lp->pend[i].token;
        lp->rn[i].lease_ms = lp->pend[i].lease_ms;
        lp->rn[i].fence = lp->pend[i].record ? lp->pend[i].fence : 0;
        lp->rn[i].result = -1;
        lp->rn[i].wanted = 0;
    }
    lp->sent = dlock__now();
    pthread_mutex_unlock(&c->mu);
    /* (no connect or reply wait past it either: the reply floor too) */
    saved = dlock__call_end_set(valid);
    (void)c->be.ops->renew(&c->be, lp->rn, lp->n, valid);
    (void)dlock__call_end_set(saved);
    pthread_mutex_lock(&c->mu);
}

/* One answer (1 renewed, 0 refused, -1 none; wanted: renewed, and a
 * caching hold someone asked for) for its live hold h, renewed as p. */
static void apply_answer(renew_loop *lp, dlock__hold *h, const pending *p, int result, int wanted) {
    if (wanted && h->caching && !h->l->wanted) {
        /* The "wanted" message was not heard (or not yet): the lock goes
         * back at its unlock, or, idle in the cache, at the next pass's
         * give_back_cached (a pass that sent a batch never sleeps). */
        h->l->wanted = 1;
    }
    if (result == 1) {
        /* validity from the send time, minus drift; never shortened */
        dlock__mono v = lp->sent + (dlock__mono)(h->lease_ms - dlock__drift_ms(&lp->c->be.node.conf, h->lease_ms)) * DLOCK__MS;
        if (v > h->valid_until) h->valid_until = v;
        h->renew_at = lp->sent + (dlock__mono)(h->lease_ms / 3) * DLOCK__MS;
        h->fence_unkept = 0; /* recorded, if it was to be */
        if (h->at_risk) risk_told(lp, h, DLOCK_LEASE_RECOVERED);
        /* the lock was still ours after the holds that had ended into
         * the cache when it was sent: those were exclusive (hold.c) */
        if (p->ends > h->ends_seen) h->ends_seen = p->ends;
    } else if (!dlock__hold_can_be_lost(h)) {
        /* Refused: released meanwhile, or run out (its unlock says
         * which).  Nothing to report either way. */
        h->renew_at = h->retry_at = lp->now + (dlock__mono)RELEASING_MS * DLOCK__MS;
    } else if (result == 0 || lp->now >= h->valid_until) {
        hold_lost(lp, h, &lp->reps[lp->nrep]);
        /* refused: the key is gone or another owner's */
        if (result == 0) lp->reps[lp->nrep].why = DLOCK_LOST_BROKEN;
        lp->nrep++;
    } else {
        if (lp->retry_at == 0) lp->retry_at = lp->now + (dlock__mono)dlock__backoff_next(&lp->retry) * DLOCK__MS;
        h->renew_at = h->retry_at = lp->retry_at;
    }
}

/* Phase: apply the answers, each to its hold if that still lives (matched
 * by lock and fence: one that ended or was replaced is left alone). */
static void apply_answers(renew_loop *lp) {
    size_t i;
    lp->now = dlock__now();
    lp->nrep = 0;
    lp->retry_at = 0;
    for (i = 0; i < lp->n; i++) {
        dlock__lock *l = lp->pend[i].l;
        dlock__hold *h;
        l->users--;
        h = find_hold(l, &lp->pend[i]);
        if (h != NULL) apply_answer(lp, h, &lp->pend[i], lp->rn[i].result, lp->rn[i].wanted);
        dlock__lock_maybe_free(lp->c, l);
    }
    if (lp->retry_at == 0) dlock__backoff_reset(&lp->retry); /* none to ask again */
}

/* Phase: release orphans.  Only when no renewal is due (renewals first: on
 * a cluster an orphan's node may be down while the holds' nodes are not),
 * and bounded by the command timeout and the next renewal. */
static void release_orphans(renew_loop *lp) {
    struct dlock_client *c = lp->c;
    dlock__mono dl, o;
    if (c->orphans == NULL) return;
    dl = dlock__now() + (dlock__mono)c->be.node.conf.command_timeout_ms * DLOCK__MS;
    if (lp->next < dl) dl = lp->next;
    o = dlock__orphans_release(c, NULL, dl);
    if (o == DLOCK__MONO_NEVER) dlock__backoff_reset(&lp->orphans);
    else wake_by(lp, o + (dlock__mono)dlock__backoff_next(&lp->orphans) * DLOCK__MS);
}

/* Phase: sleep until the next due time or a wake-up.  Locks were taken
 * lately: a thread with no holds keeps waking every sixth of a lease for a
 * while, so that a new hold's first renewal is always seen in time without
 * kicking this thread at every acquire (that wake-up would cost more than
 * the acquire itself); a new hold due earlier than renew_wake kicks it
 * (dlock__renew_due).
 * No sleep after a pass that reported a loss, or once told to stop (c->mu
 * was released above: a stop may have come meanwhile). */
static void sleep_until_due(renew_loop *lp) {
    struct dlock_client *c = lp->c;
    if (c->held == NULL && lp->now < c->renew_idle_until && lp->now + c->renew_tick < lp->next)
        lp->next = lp->now + c->renew_tick;
    if (c->renew_soon != 0 && c->renew_soon < lp->next) lp->next = c->renew_soon;
    c->renew_soon = 0;
    if (lp->nrep != 0 || c->renew_stop) return;
    c->renew_wake = lp->next;
    dlock__cond_wait_until(&c->renew_cv, &c->mu, lp->next);
    c->renew_wake = 0;
}

/* The loop, phase by phase, until told to stop; then its connection goes. */
static void *renew_main(void *arg) {
    renew_loop lp;
    struct dlock_client *c = arg;

    memset(&lp, 0, sizeof lp);
    lp.c = c;
    dlock__backoff_init(&lp.retry, RETRY_MIN_MS, RETRY_MAX_MS);
    dlock__backoff_init(&lp.orphans, ORPHAN_RETRY_MIN_MS, ORPHAN_RETRY_MAX_MS);
    pthread_mutex_lock(&c->mu);
    while (!c->renew_stop) {
        update_time(&lp);
        make_room(&lp);
        if (give_back_cached(&lp)) continue;
        collect_due(&lp);
        run_lost(&lp);
        if (lp.n > 0) {
            send_batch(&lp);
            apply_answers(&lp);
            run_lost(&lp);
        } else {
            dlock__stats_tick(c, lp.now, &lp.next);
            release_orphans(&lp);
            dlock__pipe_settle(c, lp.now, &lp.next); /* pipelined releases' answers no request read */
            sleep_until_due(&lp);
        }
    }
    c->renew_running = 0;
    dlock__backend_renew_done(&c->be);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Background threads start with every signal blocked, so a host
 * program's signals are never delivered to them. */
int dlock__renew_start(struct dlock_client *c) {
    int rc;
    if (c->renew_running) return 0;
    c->renew_stop = 0;
    if ((rc = dlock__thread_start(&c->renew_thread, renew_main, c, NULL)) != 0)
        return dlock__seterr(EAGAIN, "cannot start the renewal thread");
    c->renew_running = 1;
    return 0;
}

/* A thread started ahead, while its caller waits for something else (the
 * first token's random source), so that its start delays no hold.  It
 * ticks as after a hold ended: every sixth of a default lease for a while.
 * A first hold of the default lease is due after its first tick and need
 * not wake it (a wake-up costs the hold's release more than the rest of
 * its work); one of a shorter lease wakes it, as always.  Quiet: if it
 * cannot start, the first hold tries again and says so. */
void dlock__renew_ahead(struct dlock_client *c) {
    char saved[512];
    pthread_mutex_lock(&c->mu);
    if (!c->renew_running && !c->renew_stop) {
        snprintf(saved, sizeof saved, "%s", dlock_last_error());
        if (c->held == NULL) {
            c->renew_tick = (dlock__mono)(DLOCK_LEASE_DEFAULT_MS / 6) * DLOCK__MS;
            c->renew_idle_until = dlock__now() + 10000 * DLOCK__MS;
        }
        (void)dlock__renew_start(c);
        dlock__restoreerr(saved);
    }
    pthread_mutex_unlock(&c->mu);
}

void dlock__renew_kick(struct dlock_client *c) {
    pthread_cond_signal(&c->renew_cv);
}

/* A new hold is due at `at`: the renewal thread must not sleep past it.
 * Asleep, it is woken only if it would.  Awake, it may have looked at the
 * holds before this one came, for it lets c->mu go while it asks the
 * server something (a stats flush, orphans' releases, pipelined releases'
 * answers) and then sleeps until the next due time it found: it is told
 * the earliest such hold, which it sleeps no later than.  c->mu held. */
void dlock__renew_due(struct dlock_client *c, dlock__mono at) {
    if (c->renew_wake == 0) {
        if (c->renew_soon == 0 || at < c->renew_soon) c->renew_soon = at;
    } else if (at < c->renew_wake) {
        dlock__renew_kick(c);
    }
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

/* Why the hold whose lost-lock handler runs on this thread was lost. */
static __thread int lost_why;

void dlock__lost_run(const struct dlock__lost_report *rep) {
    int saved = lost_why;
    if (rep->risk_fn != NULL) {
        rep->risk_fn(rep->obj, rep->name, rep->event, rep->left_ms, rep->arg);
        return;
    }
    if (rep->fn == NULL && rep->sem_fn == NULL) return;
    lost_why = rep->why ? rep->why : DLOCK_LOST_EXPIRED;
    if (rep->fn != NULL) rep->fn(rep->obj, rep->name, rep->arg);
    else rep->sem_fn(rep->obj, rep->name, rep->arg);
    lost_why = saved;
}

DLOCK_API int dlock_lost_reason(void) {
    return lost_why;
}
