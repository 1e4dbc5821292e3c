/* lock.c -- the one ownership core that mutexes and rwlocks share.
 *
 * As in musl, lock is timedlock without a deadline, and every ownership
 * decision sits in one core (dlock__acquire) that trylock, lock, timedlock
 * and clocklock of every lock type share; dlock__release is its twin.
 * The acquisition is an explicit state machine (struct acq, carried
 * through named steps: mine, queue, cached, local, ready, ask, hold,
 * busy, sleep, grant, out; docs/design.md has the table), and so is the
 * release (struct rel: mine, cache, ask, finish, out).  Local facts
 * are checked first, with no round trip: a recursive relock, EDEADLK, a
 * NORMAL self-deadlock, EBUSY while another thread of this process holds
 * the lock exclusively.  Only then does the core ask the backend, and
 * when the lock is busy it waits on the one waiting path (wait.c) for a
 * release notification, the holder's lease expiry or its own deadline.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

void dlock__report(dlock__lost_report *rep) {
    dlock__lost_run(rep);
    free(rep->name);
    rep->fn = NULL;
    rep->name = NULL;
}

/* The calling thread's shared hold of l, if any.  c->mu held. */
dlock__hold *dlock__reader(dlock__lock *l, const dlock__thread *self) {
    dlock__hold *h;
    for (h = l->readers; h != NULL; h = h->next)
        if (h->owner == self) return h;
    return NULL;
}

void dlock__owner_token(const struct dlock_client *c, const dlock__thread *self, uint64_t call, char *out) {
    static const char hex[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < sizeof self->raw; i++) {
        unsigned char b = self->raw[i] ^ c->nonce[i];
        if (i < 8) b ^= (unsigned char)(call >> (8 * i));
        out[2 * i] = hex[b >> 4];
        out[2 * i + 1] = hex[b & 15];
    }
    out[DLOCK__OWNER_LEN] = '\0';
}

/* Records a hold acquired on the server.  Another thread of this process
 * may still count the lock as its own, though the server granted it to
 * us.  Its unlock may be on its way: the server answers the waiter it
 * hands the lock to before the releaser, so the hold is ours at once, and
 * that unlock, answered, leaves it alone (dlock__release).  Otherwise that
 * hold is gone on the server (broken by an administrator, or its lease
 * ran out before the renewal thread noticed): it is lost now, its handler
 * to be told through *other (run by the caller without c->mu).  c->mu
 * held. */
static int hold_begin(struct dlock_client *c, dlock__lock *l, const dlock__want *w, dlock__thread *self,
                      const char *owner, uint64_t fence, dlock__mono sent, int ownerdead,
                      dlock__lost_report *other) {
    dlock__hold *h;
    unsigned lease = w->lease_ms;

    if (w->shared) {
        if ((h = calloc(1, sizeof *h)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
        h->l = l;
        h->shared = 1;
        h->next = l->readers;
        l->readers = h;
    } else {
        /* Another hold: another thread's, or, for a process-owned mutex,
         * another call's of this process (its token). */
        int another;
        h = &l->x;
        another = h->owner != NULL && (h->owner != self || memcmp(h->token, owner, DLOCK__OWNER_LEN) != 0);
        /* (One whose unlock is on the way is taken over silently.) */
        if (another && dlock__hold_can_be_lost(h) && other->fn == NULL) {
            dlock__hold_lost(c, h, other);
            other->why = DLOCK_LOST_BROKEN; /* the server granted it anew: that hold was gone there */
        }
        if (h->owner != NULL) dlock__held_remove(c, h); /* stale: the server says it is free */
        l->k.lvb_pending = 0; /* a value block set in a hold whose release never went: not this one's */
    }
    dlock__hold_take(h, self, ownerdead);
    memcpy(h->token, owner, sizeof h->token);
    h->count = 1;
    h->fence = fence;
    h->ident = fence;
    h->caching = w->caching && !w->shared;
    h->fence_hi = !h->caching ? fence
                  : c->be.node.conf.kind == DLOCK__BACKEND_REDLOCK ? fence + DLOCK__FENCE_BLOCK - 1
                                                                  : UINT64_MAX;
    h->fence_at = dlock__now(); /* the fence was issued before: its server's clock was at least it */
    h->lease_ms = lease;
    h->acquired = sent;
    h->valid_until = sent + (dlock__mono)(lease - dlock__drift_ms(&c->be.node.conf, lease)) * DLOCK__MS;
    h->renew_at = sent + (dlock__mono)(lease / 3) * DLOCK__MS;
    h->retry_at = 0;
    h->robust = w->robust;
    h->fence_unkept = 0; /* (step_hold says otherwise) */
    h->hashed = 1;       /* a grant's hash (step_hold says otherwise) */
    dlock__hold_set_handlers(h, w);
    dlock__held_add(c, h);
    if (h->caching) (void)dlock__notify_want(c, l); /* to hear when another owner asks */
    return 0;
}

/* A fair release granted the lock to this call's token (fw): take it
 * from the message, with no round trip, when that is safe: the grant was
 * made after our last request went out (`sent`: the server answered it
 * busy, then granted), so its lease runs at least until sent + grant_ms.
 * Made after, not merely heard after: a message can be read late (the
 * process was stopped, its subscriber thread slow) and come from before
 * the busy answer, from a grant that ran out before the request was
 * served.  Fences tell: the busy answer carried the lock's last fence
 * (`floor`), and only a grant made later has a greater one;
 * the hold is valid until then (less the drift margin) and is renewed
 * soon, to its full lease.  A caching hold needs its hash marked cached:
 * a caching waiter's grant marks it and says whether others wait
 * (fw->cache; then the lock goes back at its unlock, as when a "wanted"
 * message came).  A grant without the mark (from an older release
 * script) and one older than its lease cannot be taken as it is:
 * those confirm with an acquire (EAGAIN here).  c->mu held. */
static int acq_granted(struct dlock_client *c, dlock__lock *l, const dlock__want *w, dlock__thread *self,
                       const char *owner, const dlock__fairwait *fw, dlock__mono sent, uint64_t floor,
                       dlock__lost_report *other) {
    unsigned g = fw->grant_ms < w->lease_ms ? fw->grant_ms : w->lease_ms;
    dlock__mono until = sent + (dlock__mono)(g - dlock__drift_ms(&c->be.node.conf, g)) * DLOCK__MS;
    dlock__hold *h = &l->x;
    int rc;
    if ((w->caching && fw->cache == 0) || w->shared || sent == 0 || floor == 0 || fw->fence <= floor ||
        g <= dlock__drift_ms(&c->be.node.conf, g) || dlock__now() >= until)
        return EAGAIN;
    if ((rc = hold_begin(c, l, w, self, owner, fw->fence, sent, 0, other)) != 0) return rc;
    if (w->caching && fw->cache == 2) l->wanted = 1;
    h->valid_until = until;
    /* Renewed half way to the end of the grant's lease (early by a
     * quarter of it at most: renew.c). */
    h->acquired = dlock__now();
    h->renew_at = h->acquired + (until - h->acquired) / 2;
    dlock__renew_due(c, h->renew_at);
    return 0;
}

/* Is l's release channel subscribed, so that a request for a cached lock
 * reaches us?  c->mu held. */
int dlock__cache_heard(const struct dlock_client *c, const dlock__lock *l) {
    return dlock__sub_live(c, l);
}

/* May the process keep l's hold after its unlock?  Only if every request
 * for it since it was acquired has reached us: the channel was heard when
 * the acquire was sent, on the same subscriber connection as now.  (A
 * request published before the subscription was active reached nobody.)
 * c->mu held. */
int dlock__cache_ok(const struct dlock_client *c, const dlock__lock *l) {
    return l->x.heard != 0 && l->x.heard == dlock__sub_epoch(c, l) && dlock__cache_heard(c, l) &&
           !l->wanted;
}

/* Gives up l's cached hold on the server (one round trip, with c->mu
 * released meanwhile; if it fails, the orphan list releases it later).
 * A release that finds the lock no longer ours tells the handler of a
 * hold that ended into the cache unconfirmed (hold.c), meanwhile.
 * c->mu held. */
void dlock__cache_drop(struct dlock_client *c, dlock__lock *l, dlock__mono deadline) {
    char token[DLOCK__OWNER_LEN + 1];
    unsigned lease = l->x.lease_ms;
    int how, released = 0, rc;
    dlock__lost_report rep;
    uint64_t lvb;
    if (!dlock__hold_is_cached(&l->x)) return;
    memcpy(token, l->x.token, sizeof token);
    how = dlock__hold_release_kind(&l->x, 0);
    lvb = dlock__lvb_carry(l, &l->x); /* the value its local holds set goes with it */
    dlock__hold_unconfirmed(&l->x, &rep);
    dlock__hold_forget(c, &l->x);
    l->users++;
    c->dropping++; /* exit waits for this release (client.c at_exit) */
    pthread_mutex_unlock(&c->mu);
    rc = c->be.ops->release(&c->be, &l->k, token, how, &released, NULL, deadline);
    if (rc == 0 && !released) {
        rep.why = DLOCK_LOST_BROKEN;
        dlock__lost_run(&rep);
    }
    free(rep.name);
    pthread_mutex_lock(&c->mu);
    dlock__lvb_sent(l, lvb, rc);
    c->dropping--;
    l->users--;
    if (rc != 0) dlock__orphan_add(c, l, token, how, lease);
    l->gen++;
    dlock__lock_wake(l);
}

/* The fence of a local hold of h, cached, at now: max(the last + 1, the
 * server's clock as this process can vouch for it) -- the fence the
 * server issued (at most its clock then, in ns) plus the time since it
 * was heard on this process's clock, less the drift margin the lease
 * allows for (drift/lease of it, rounded up).  So a local fence is never
 * above the server's clock: after any loss of the fence key, the fence
 * the server makes from its clock, a round trip at least after this
 * hold went back, is above every local one (docs/fencing.md).  Local
 * holds are tens of ns apart at the fastest, each fence at least 1 ns
 * on; should the last + 1 ever be ahead, it waits (ns) for the clock.
 * Above fence_hi (Redlock's floor) it is refused by the caller. */
static uint64_t cache_fence(const struct dlock_client *c, const dlock__hold *h, dlock__mono now) {
    uint64_t lease = h->lease_ms ? h->lease_ms : 1, drift = dlock__drift_ms(&c->be.node.conf, h->lease_ms);
    uint64_t f = h->fence + 1;
    for (;;) {
        uint64_t el = now > h->fence_at ? (uint64_t)(now - h->fence_at) : 0;
        uint64_t at = h->ident + el - (el / lease + 1) * drift;
        if (f <= at) return at;
        if (f > h->fence_hi) return f;
        now = dlock__now();
    }
}

/* Takes l's cached hold for the calling thread with no round trip, if the
 * cache has it for a call like w: still valid, nobody asked for it, and
 * (Redlock) fences left below its floor.  c->mu held. */
static int cache_take(struct dlock_client *c, dlock__lock *l, const dlock__want *w, dlock__thread *self) {
    dlock__hold *h = &l->x;
    dlock__mono now;
    uint64_t f;
    if (!dlock__hold_is_cached(h) || w->shared || !w->caching || w->robust != h->robust || !dlock__cache_ok(c, l))
        return 0;
    now = dlock__now();
    if (now >= h->valid_until || (f = cache_fence(c, h, now)) > h->fence_hi) return 0;
    dlock__hold_uncache(h, self);
    h->count = 1;
    h->fence = f;
    dlock__hold_set_handlers(h, w);
    return 1;
}

/* Does a thread of this process hold l in a way that blocks w?  An
 * exclusive hold blocks everyone; shared holds block only writers, and
 * those the server reports. */
static int blocked_locally(const dlock__lock *l) {
    return dlock__hold_is_live(&l->x);
}

/* EINTR (an interruptible wait met a signal), or another error as is. */
static int acq_interrupted(const dlock__lock *l, int rc) {
    if (rc != EINTR) return rc;
    return dlock__seterr(EINTR, "waiting for '%.64s' was interrupted by a signal", l->k.name);
}

static int acq_timed_out(const dlock__lock *l, const char *why) {
    return dlock__seterr(ETIMEDOUT, "'%.64s' was not acquired by the deadline%s", l->k.name, why);
}

/* A new token for a call of self's (the thread's, or the process's for a
 * process-owned lock, whose calls any thread may count). */
static void call_token(const struct dlock_client *c, dlock__thread *self, const dlock__want *w, char *owner) {
    uint64_t call = w->process ? __atomic_add_fetch(&self->calls, 1, __ATOMIC_RELAXED) : ++self->calls;
    dlock__owner_token(c, self, call, owner);
}

/* Gives back h, a hold just begun under token whose answer came too late
 * to use: forgotten (no lost-lock handler: the caller never saw it) and
 * released on the server within the call's time, or by the orphan list
 * later.  A robust lock keeps its "previous holder died" mark if the
 * acquire found one, and loses the one its own take set, even after the
 * lease ran out on the server meanwhile ("undo": nobody died holding it).
 * c->mu held; released meanwhile. */
static void give_back(struct dlock_client *c, dlock__lock *l, const dlock__want *w, dlock__hold *h,
                      const char *token) {
    int how = dlock__undo_kind(w->shared, w->robust);
    char saved[512];
    int rc, released;
    dlock__hold_forget(c, h);
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    pthread_mutex_unlock(&c->mu);
    rc = c->be.ops->release(&c->be, &l->k, token, how, &released, NULL, dlock__now());
    dlock__restoreerr(saved);
    pthread_mutex_lock(&c->mu);
    if (rc != 0) dlock__orphan_add(c, l, token, how, w->lease_ms);
    l->gen++; /* released: local waiters try at once */
    dlock__lock_wake(l);
}

/* ------------------------------------------------------ the acquisition */

/* One acquisition (dlock__acquire) as a state machine, in the manner of
 * the Linux DLM's do_request: the call's inputs and everything it has
 * learned or done so far live in one struct carried through named steps,
 * each a short function that returns the next step.  Every step runs with
 * c->mu held, dropping it only around a round trip or a sleep; a step
 * that ends the call sets rc and returns ACQ_OUT, whose exit step undoes
 * what the fields below say was done.  docs/design.md has the table of
 * steps and transitions. */
struct acq {
    /* The call, as dlock__acquire was given it. */
    struct dlock_client *c;
    dlock__lock *l;
    const dlock__want *w;
    int try;
    dlock__mono deadline;
    int bad_deadline; /* the EINVAL to give if the call would have to wait */
    /* Fixed at the start. */
    dlock__thread *self;  /* the owner: the thread, or the process (w->process) */
    int k;                /* which kind of waiter: l->trying[k] etc. */
    int queue;            /* waits in the server's queue (acq_start) */
    int queue_local;      /* ...even while a thread of this process holds it */
    dlock__mono saved_end; /* the thread's call end before this call */
    dlock__mono start;     /* when the call began (its wait time: stats.c) */
    /* The token of this attempt (an answer that came too late takes a
     * new one for the next); fw.token points at it. */
    char owner[DLOCK__OWNER_LEN + 1];
    int rc; /* the call's result, set by the step that returns ACQ_OUT */
    /* Done, and undone by the exit step. */
    int queued;     /* fw is on l->fair */
    int counted;    /* counted in l->waiters */
    int registered; /* registered on the server as a waiting writer */
    dlock__fairwait fw;
    dlock__lost_report rep, other; /* ours lost earlier; another thread's, lost now */
    /* Waiting. */
    int waiting;            /* answered busy once: a waiter from now on */
    dlock__mono last_sent;  /* when the last request of this call went out */
    dlock__mono late_since; /* the first answer that came too late */
    /* The last attempt. */
    dlock__acq ans;      /* its answer */
    dlock__mono sent;    /* when the request that got it went out */
    dlock__mono busy_at; /* when the busy step read the clock */
    uint64_t gen;        /* l->gen before it was sent */
    uint64_t heard;      /* the subscription epoch it was sent under, 0 none */
    int sure;   /* the release channel was live: a busy answer can be slept on at once */
    int listed; /* it asked for a grant pushed to its list (BLPOP) */
    int waits;  /* it asked to be registered as a waiting writer (F_WAIT) */
    int leaf;   /* it queues holding nothing: its queue entry lists its wait (F_LISTED) */
    int leaf_known; /* leaf was decided (at the call's first request) */
    uint64_t since_wall; /* (leaf) when the call began, wall ms, as its first request made it; 0 not yet */
    dlock__dl dl; /* its wait as the wait-for graph has it (deadlock.c) */
};

enum acq_step {
    ACQ_MINE,   /* mine/recursion: what the caller already holds */
    ACQ_QUEUE,  /* a queuing waiter joins l->fair */
    ACQ_CACHED, /* the process's cached hold: take it, or give it up */
    ACQ_LOCAL,  /* local holder: another thread of this process holds it */
    ACQ_READY,  /* a waiter's subscription confirmed; one asker per kind */
    ACQ_ASK,    /* ask the server: one acquire round trip */
    ACQ_HOLD,   /* the answer is a hold: begin it (or give back a late one) */
    ACQ_BUSY,   /* the answer is busy: fail a try, or become a waiter */
    ACQ_SLEEP,  /* wait for a release, a grant, the lease or the deadline */
    ACQ_GRANT,  /* a release handed us the lock: take it from the message */
    ACQ_OUT,    /* the exit: undo registrations and counts */
    ACQ_DONE
};

/* Ends the call with rc. */
static int acq_out(struct acq *a, int rc) {
    a->rc = rc;
    return ACQ_OUT;
}

/* A relock of a hold the caller has counts up, to DLOCK_RECURSIVE_MAX. */
static int acq_count_up(struct acq *a, dlock__hold *h, const char *what) {
    if (h->count >= DLOCK_RECURSIVE_MAX)
        return acq_out(a, dlock__seterr(EAGAIN, "%s limit %u reached", what, DLOCK_RECURSIVE_MAX));
    h->count++;
    return acq_out(a, 0);
}

/* How a waiter sleeps (acq_wait): until gen moves (dlock__wait), until
 * woken (dlock__sleep), until poked (dlock__wait_turn), or for a grant
 * in BLPOP (dlock__wait_grant). */
enum { ACQ_W_GEN, ACQ_W_WAKE, ACQ_W_TURN, ACQ_W_GRANT };

/* The call's wait detects deadlocks (a process-owned hold's never does:
 * its holder is the process, whose threads may all wait). */
static int acq_detects(const struct acq *a) {
    return a->w->deadlock && !a->w->process;
}

/* A tick of a wait (the sleep that follows it ends at until): acq_wait's
 * own, and a wait in BLPOP's, made while the BLPOP stays pending
 * (dlock__wait_grant).  *due: when the next is. */
struct acq_tick {
    struct acq *a;
    dlock__mono until;
};

static int acq_tick(void *arg, dlock__mono *due) {
    struct acq_tick *t = arg;
    struct acq *a = t->a;
    int rc = dlock__dl_tick(a->c, a->l, a->owner, a->w->shared, t->until, &a->dl);
    *due = dlock__dl_due(&a->dl);
    return rc;
}

/* Sleeps as `how` says until `until`, waking at each of the wait's ticks
 * in the wait-for graph (deadlock.c) to refresh its records and, with
 * detection on, to walk: EDEADLK when it is a cycle's victim (a wait in
 * BLPOP makes its ticks while the BLPOP stays pending: acq_tick).  A release
 * during a tick moves gen or pokes us as during a sleep: the sleep after
 * it returns at once (a plain wake-up, which would be missed, returns 0
 * after a tick).  The wait begins with the first (dlock__dl_start; local:
 * it waits for a thread of its own process without having asked). */
static int acq_wait(struct acq *a, int how, uint64_t gen, dlock__mono until) {
    struct dlock_client *c = a->c;
    dlock__lock *l = a->l;
    struct acq_tick at = { a, until };
    int intr = a->w->intr, rc;
    dlock__dl_start(c, &a->dl, acq_detects(a), !a->waiting, a->start);
    for (;;) {
        dlock__mono due = dlock__dl_due(&a->dl), stop;
        if (dlock__now() >= due) {
            if ((rc = acq_tick(&at, &due)) != 0) return rc;
            if (how == ACQ_W_WAKE) return 0; /* a wake-up during the tick would be missed: look again */
        }
        if (how == ACQ_W_GRANT) { /* its ticks made while its BLPOP is pending */
            dlock__tick tick = { acq_tick, &at, due };
            return dlock__wait_grant(c, l, &a->fw, until, a->deadline, intr, &tick);
        }
        stop = due < until ? due : until;
        if (how == ACQ_W_GEN) rc = dlock__wait(c, l, gen, stop, intr);
        else if (how == ACQ_W_WAKE) rc = dlock__sleep(c, l, stop, intr);
        else rc = dlock__wait_turn(c, l, &a->fw, stop, intr);
        if (rc != ETIMEDOUT || stop == until) return rc;
    }
}

/* Mine/recursion: what the calling owner already holds decides, with no
 * round trip.  A valid exclusive hold: a recursive relock counts up,
 * trylock is EBUSY, any other type (or a read request) EDEADLK; NORMAL
 * deadlocks as POSIX says (a deadline still ends it), and a process-owned
 * mutex (always NORMAL) waits for an unlock any thread of the process may
 * make.  A valid read hold: a read request counts up, a write request is
 * EBUSY or EDEADLK (no upgrade).  A hold lost earlier is forgotten: this
 * is a fresh attempt. */
static int step_mine(struct acq *a) {
    struct dlock_client *c = a->c;
    dlock__lock *l = a->l;
    const dlock__want *w = a->w;
    dlock__hold *mine;

    if (dlock__hold_valid(c, &l->x, a->self, &a->rep)) {
        if (!w->shared && w->type == DLOCK_MUTEX_RECURSIVE) return acq_count_up(a, &l->x, "recursion");
        if (a->try)
            return acq_out(a, dlock__seterr(EBUSY, "'%.64s' is held by the calling %s", l->k.name,
                                            w->process ? "process" : "thread"));
        if (w->shared || w->type != DLOCK_MUTEX_NORMAL)
            return acq_out(a, dlock__seterr(EDEADLK, "'%.64s' is already held by the calling thread", l->k.name));
    } else if (l->x.owner == a->self) {
        dlock__hold_forget(c, &l->x);
    }
    if ((mine = dlock__reader(l, a->self)) != NULL) {
        if (!dlock__hold_valid(c, mine, a->self, &a->rep))
            dlock__hold_forget(c, mine);
        else if (w->shared)
            return acq_count_up(a, mine, "read-lock"); /* a thread may read-lock again (POSIX) */
        else
            return acq_out(a, a->try ? dlock__seterr(EBUSY, "'%.64s' is read-locked by the calling thread", l->k.name)
                                     : dlock__seterr(EDEADLK, "'%.64s' is read-locked by the calling thread", l->k.name));
    }
    return ACQ_QUEUE;
}

/* Queue: a queuing waiter (acq_start) is on l->fair from here to the
 * exit, so that the subscriber can poke it when a release hands the lock
 * to its token. */
static int step_queue(struct acq *a) {
    if (a->queue) {
        a->fw.next = a->l->fair;
        a->l->fair = &a->fw;
        a->queued = 1;
    }
    return ACQ_CACHED;
}

/* Cached: the process keeps the lock (caching): take it here, with no
 * round trip, or, if it cannot be used for this call, give it up first. */
static int step_cached(struct acq *a) {
    if (!dlock__hold_is_cached(&a->l->x)) return ACQ_LOCAL;
    if (cache_take(a->c, a->l, a->w, a->self)) return acq_out(a, 0);
    dlock__cache_drop(a->c, a->l, dlock__unreachable_deadline(&a->c->be.node));
    return ACQ_CACHED;
}

/* Local holder: a thread of this process holds the lock exclusively (or,
 * NORMAL, the caller): no round trip, the server would only say busy;
 * its unlock, loss or exit moves gen.  A queuing waiter goes to the
 * server's queue instead, to keep its place in the order of arrival; so
 * does one of a process-owned mutex the process holds, whose unlock by
 * any thread hands it the lock. */
static int step_local(struct acq *a) {
    dlock__lock *l = a->l;
    int rc;
    if (!blocked_locally(l) || (a->queue_local && (l->x.owner != a->self || a->w->process))) return ACQ_READY;
    if (a->try) return acq_out(a, dlock__seterr(EBUSY, "'%.64s' is held by another thread of this process", l->k.name));
    if (a->bad_deadline) return acq_out(a, a->bad_deadline);
    if ((rc = acq_wait(a, ACQ_W_GEN, l->gen, a->deadline)) != 0)
        return acq_out(a, rc == ETIMEDOUT ? acq_timed_out(l, "") : acq_interrupted(l, rc));
    return ACQ_CACHED;
}

/* Ready: a waiter asks again only once a release will wake it (the
 * channel's subscription confirmed: dlock__wait_ready), and, not queuing,
 * only if no other waiting thread of this process that wants the same
 * kind of hold is asking the server, or was just told it is busy at this
 * generation: it shares that answer rather than ask again, so a release
 * costs one attempt per process, not one per waiting thread.  A waiter
 * woken at or after its deadline makes no further attempt (the first
 * attempt of a call is always made, so a past deadline still acquires a
 * free lock), nor one whose deadline passed while the channel was being
 * subscribed to (a turn handed to us meanwhile is passed on by the
 * withdrawal). */
static int step_ready(struct acq *a) {
    dlock__lock *l = a->l;
    dlock__mono until;
    int rc, k = a->k;
    if (!a->waiting) return ACQ_ASK;
    if (dlock__now() >= a->deadline) return acq_out(a, acq_timed_out(l, ""));
    if ((rc = dlock__wait_ready(a->c, l, a->deadline, a->w->intr)) != 0)
        return acq_out(a, rc == ETIMEDOUT ? acq_timed_out(l, "") : acq_interrupted(l, rc));
    if (dlock__now() >= a->deadline) return acq_out(a, acq_timed_out(l, ""));
    if (!a->queue && (l->trying[k] || (l->busy_gen[k] == l->gen && l->busy_until[k] > dlock__now()))) {
        until = l->trying[k] || l->busy_until[k] > a->deadline ? a->deadline : l->busy_until[k];
        rc = acq_wait(a, ACQ_W_WAKE, 0, until);
        if (rc == EINTR || rc == EDEADLK || (rc == ETIMEDOUT && dlock__now() >= a->deadline))
            return acq_out(a, rc == ETIMEDOUT ? acq_timed_out(l, "") : acq_interrupted(l, rc));
        return ACQ_CACHED;
    }
    if (!a->queue) l->trying[k] = 1;
    return ACQ_ASK;
}

/* The waiter that was asking for its kind is done: the others of that
 * kind may ask (or share its answer). */
static void acq_stop_trying(struct acq *a) {
    if (a->waiting && !a->queue) {
        a->l->trying[a->k] = 0;
        dlock__lock_wake(a->l);
    }
}

/* Before a request, under c->mu: what it is sent under (gen, the
 * subscription), and whether this waiter may wait for its grant in BLPOP:
 * a queued waiter does where the backend can, while the client has a
 * place for it (conf.wait_conns); the others hear of their grant on the
 * release channel. */
static void ask_prepare(struct acq *a) {
    struct dlock_client *c = a->c;
    dlock__lock *l = a->l;
    a->gen = l->gen;
    a->fw.poked = a->fw.granted = a->fw.cache = 0;
    if (l->x.owner == NULL) l->wanted = 0; /* a request from now on is for the hold this may get */
    a->heard = dlock__cache_heard(c, l) ? dlock__sub_epoch(c, l) : 0;
    /* With the release channel already subscribed, a release after this
     * attempt moves gen (or pokes us): a busy answer can be slept on at
     * once.  Counting ourselves a waiter keeps the subscription. */
    a->sure = !a->try && dlock__sub_live(c, l);
    a->listed = dlock__fair_listing(c, &a->fw, a->queue);
    if (a->sure && !a->counted) {
        l->waiters++;
        a->counted = 1;
    }
}

/* The acquire round trip, c->mu released meanwhile.  It gives up on an
 * unreachable server by the caller's deadline; the connection layer still
 * makes one real attempt.  A try without a deadline, and the breaker's
 * probe, make that one attempt only: a non-blocking call never waits for
 * an unreachable server.  Only a call that will really wait registers as
 * a waiting writer (a past deadline or a bad one means it will not). */
static int ask_send(struct acq *a, int probe) {
    struct dlock_client *c = a->c;
    const dlock__want *w = a->w;
    dlock__mono bound, ub;
    int flags, rc, plain = !a->waiting && !a->l->contended;
    /* A queued wait of a thread that holds nothing is listed by its queue
     * entry (docs/design.md, "Deadlock detection"): decided at the call's
     * first request, not before (a hold taken from the process's cache
     * asks nothing, and reads no clock for it). */
    if (!a->leaf_known) {
        a->leaf = a->queue && c->be.ops->waits != NULL && dlock__dl_leaf(c);
        a->leaf_known = 1;
    }
    pthread_mutex_unlock(&c->mu);
    a->sent = a->last_sent = dlock__now();
    bound = ub = dlock__unreachable_deadline(&c->be.node);
    if (probe || (a->try && (a->deadline == 0 || a->deadline == DLOCK__MONO_NEVER))) bound = a->sent;
    else if (a->deadline < bound) bound = a->deadline; /* a try given a deadline too */
    a->waits = !a->try && !a->bad_deadline && a->deadline > a->sent;
    flags = (w->robust ? DLOCK__F_ROBUST : 0) | (w->shared ? DLOCK__F_SHARED : 0) | (a->waits ? DLOCK__F_WAIT : 0) |
            (a->queue ? DLOCK__F_FAIR : 0) | (a->listed ? DLOCK__F_GRANTLIST : 0) |
            (w->caching && !w->shared ? DLOCK__F_CACHING : 0) | (w->shared && w->readfirst ? DLOCK__F_READFIRST : 0) |
            (plain ? DLOCK__F_PLAIN : 0) | (a->waiting || a->l->contended == 1 ? DLOCK__F_HELD : 0) |
            (a->leaf ? DLOCK__F_LISTED | (acq_detects(a) ? DLOCK__F_DETECTS : 0) : 0);
    memset(&a->ans, 0, sizeof a->ans);
    a->ans.sent = -1;
    a->ans.delay_ms = w->shared ? 0 : w->delay_ms;
    if (a->leaf) { /* its entry's since: when the call began, by this host's wall clock, made
                    * once (the backend's request reads that clock) and the same at each request */
        a->ans.since_ms = a->since_wall;
        a->ans.age_ms = (unsigned)((a->sent - a->start) / DLOCK__MS);
    }
    rc = c->be.ops->acquire(&c->be, &a->l->k, a->owner, w->lease_ms, flags, &a->ans, bound);
    if (a->leaf) a->since_wall = a->ans.since_ms;
    pthread_mutex_lock(&c->mu);
    dlock__breaker_note(&c->be.node, rc, bound == ub ? ub : 0);
    /* Asked again inside the call (a server loading, a cluster slot in
     * migration)?  The lease runs from the attempt that was answered. */
    if (rc == 0 && a->ans.sent > a->sent) a->sent = a->last_sent = a->ans.sent;
    return rc;
}

/* Ask the server: one acquire round trip, unless the circuit breaker is
 * open.  A hold of ours the server may still have goes first (one
 * attempt, a deadline of now), when the caller's deadline leaves room for
 * it (the renewal thread releases orphans anyway).  No usable answer: the
 * request may have been granted all the same (unless it never went out),
 * so the token becomes an orphan. */
static int step_ask(struct acq *a) {
    struct dlock_client *c = a->c;
    dlock__lock *l = a->l;
    const dlock__want *w = a->w;
    int probe, rc, st;
    if ((rc = dlock__breaker_pass(&c->be.node, &probe)) != 0) {
        acq_stop_trying(a);
        return acq_out(a, rc);
    }
    if (c->orphans != NULL && !a->try && !probe &&
        a->deadline - dlock__now() > (dlock__mono)(c->be.node.conf.connect_timeout_ms + c->be.node.conf.command_timeout_ms) * DLOCK__MS)
        dlock__orphans_release(c, l, dlock__now());
    ask_prepare(a);
    rc = ask_send(a, probe);
    acq_stop_trying(a);
    if (rc != 0) {
        if (a->ans.sent != 0)
            dlock__orphan_add(c, l, a->owner, dlock__undo_kind(w->shared, w->robust), w->lease_ms);
        if (rc == ENOLCK && !a->try && dlock__now() >= a->deadline) rc = acq_timed_out(l, " (server unreachable)");
        return acq_out(a, rc);
    }
    st = a->ans.status;
    if (!w->shared) { /* how the next call of this process asks first */
        if (st == DLOCK__ACQ_BUSY || st == DLOCK__ACQ_HELDBACK) {
            l->contended = 1;
            if (w->pipelined) dlock__pipe_contended(l);
        } else if (a->ans.plain) {
            l->contended = 0;
        }
    }
    if (st == DLOCK__ACQ_NOTRECOVERABLE)
        return acq_out(a, dlock__seterr(ENOTRECOVERABLE, "'%.64s' was unlocked in an inconsistent state; "
                                        "an administrator must reset it", l->k.name));
    if (st == DLOCK__ACQ_BUSY || st == DLOCK__ACQ_HELDBACK) {
        if (a->waits && !w->shared) a->registered = 1;
        if (a->waits && a->leaf && st == DLOCK__ACQ_BUSY) a->dl.inq = 1; /* queued: its entry lists it */
        return ACQ_BUSY;
    }
    a->registered = 0; /* the acquire took the registration back */
    return ACQ_HOLD;
}

/* Hold: ACQUIRED, OWNERDEAD, or MINE (an earlier attempt of this very
 * call got the lock but its answer was lost: the token is the call's own,
 * the script re-leased it) begin the hold.  An answer that came after the
 * hold's validity had run out (a paused server, a slow link) is never
 * given to the caller: the hold goes back, and the call tries again with
 * a fresh token (the old one may be released late), until its deadline,
 * or ENOLCK once answers have kept coming late for unreachable_ms. */
static int step_hold(struct acq *a) {
    struct dlock_client *c = a->c;
    dlock__lock *l = a->l;
    const dlock__want *w = a->w;
    int dead = a->ans.status == DLOCK__ACQ_OWNERDEAD, rc;
    dlock__hold *h;
    dlock__mono now;
    if ((rc = hold_begin(c, l, w, a->self, a->owner, a->ans.fence, a->sent, dead, &a->other)) != 0) return acq_out(a, rc);
    if (!w->shared) {
        l->x.fence_unkept = a->ans.unkept;
        l->x.hashed = !a->ans.plain;
        l->x.heard = a->heard;
        if (a->ans.others) l->wanted = 1; /* they asked before the hash said "cache": give it back */
    }
    h = w->shared ? l->readers : &l->x;
    if ((now = dlock__now()) < h->valid_until)
        return acq_out(a, dead ? dlock__seterr(EOWNERDEAD, "the previous holder of '%.64s' died holding it; "
                                               "make the state consistent, then call dlock_mutex_consistent", l->k.name)
                               : 0);
    give_back(c, l, w, h, a->owner);
    call_token(c, a->self, w, a->owner);
    if (a->late_since == 0) a->late_since = now;
    now = dlock__now();
    if (!a->try && now >= a->deadline)
        return acq_out(a, acq_timed_out(l, " (the server's answer came after the lease had run out)"));
    if (now - a->late_since >= (dlock__mono)c->be.node.conf.unreachable_ms * DLOCK__MS)
        return acq_out(a, dlock__seterr(ENOLCK, "%s: the answers for '%.64s' keep coming after the lease has run out",
                                        c->be.node.conf.redacted_url, l->k.name));
    return ACQ_CACHED;
}

/* Busy (or held back): a try is EBUSY, a bad abstime its EINVAL, a
 * deadline that has passed ETIMEDOUT.  The first busy answer makes the
 * call a waiter and asks again without sleeping, since the release may
 * have come before the subscription did -- unless the channel was already
 * live when this attempt was sent (sure).  "Expired between the calls"
 * (-2) asks again at once. */
static int step_busy(struct acq *a) {
    dlock__lock *l = a->l;
    if (a->try) return acq_out(a, dlock__seterr(EBUSY, "'%.64s' is held by another owner", l->k.name));
    if (a->bad_deadline) return acq_out(a, a->bad_deadline);
    a->busy_at = dlock__now();
    if (a->busy_at >= a->deadline) return acq_out(a, acq_timed_out(l, ""));
    if (!a->waiting) {
        dlock__debug("'%.64s': held by another owner (its lease: %lld ms left); waiting", l->k.name,
                     (long long)a->ans.pttl_ms);
        a->waiting = 1;
        if (!a->counted) {
            l->waiters++;
            a->counted = 1;
        }
        if (!a->sure) return ACQ_CACHED;
    }
    if (a->ans.pttl_ms == -2) return ACQ_CACHED;
    return ACQ_SLEEP;
}

/* Sleep: until gen moves (or, queued, a poke or a grant), the time in the
 * answer runs out (the holder's lease + 1 ms; 1 s if unknown), or the
 * deadline -- and, registered as a waiting writer, no longer than a third
 * of its lease, so that the registration never lapses.  A busy answer is
 * true for every waiting thread of this process: they share it.  A queued
 * waiter with a place on a grant list waits for its grant in BLPOP. */
static int step_sleep(struct acq *a) {
    dlock__lock *l = a->l;
    const dlock__want *w = a->w;
    dlock__mono now = a->busy_at, until;
    int rc, busy = a->ans.status == DLOCK__ACQ_BUSY;
    until = a->ans.pttl_ms >= 0 ? now + (a->ans.pttl_ms + 1) * DLOCK__MS : now + 1000 * DLOCK__MS;
    if (a->registered) {
        dlock__mono renew = now + (dlock__mono)(w->lease_ms / 3) * DLOCK__MS;
        if (renew < until) until = renew;
    }
    if (busy && !a->queue) {
        l->busy_gen[a->k] = a->gen;
        l->busy_until[a->k] = until;
    }
    if (until > a->deadline) until = a->deadline;
    if (!a->queue) rc = acq_wait(a, ACQ_W_GEN, a->gen, until);
    else if (a->listed && busy && a->registered) rc = acq_wait(a, ACQ_W_GRANT, 0, until);
    else rc = acq_wait(a, ACQ_W_TURN, 0, until);
    if (rc == EINTR || rc == EDEADLK) return acq_out(a, acq_interrupted(l, rc));
    return a->fw.granted ? ACQ_GRANT : ACQ_CACHED;
}

/* Grant: a release handed the lock to this call's token; take it from
 * the message when that is safe (acq_granted), else confirm with an acquire.
 * The grant took us out of the server's queue. */
static int step_grant(struct acq *a) {
    uint64_t floor = a->ans.status == DLOCK__ACQ_BUSY ? a->ans.floor : 0;
    dlock__dl_granted(&a->dl, a->owner); /* (the release took it off the waiters' list) */
    if (acq_granted(a->c, a->l, a->w, a->self, a->owner, &a->fw, a->last_sent, floor, &a->other) != 0)
        return ACQ_CACHED;
    a->l->x.heard = a->heard; /* every request since our last one went out reaches us (dlock__cache_ok) */
    dlock__debug("'%.64s': granted by a release (fence %llu)", a->l->k.name, (unsigned long long)a->fw.fence);
    a->registered = 0;
    return acq_out(a, 0);
}

/* Leaving without the lock while registered as a waiting writer: take the
 * registration back, or readers would wait for it to lapse.  One attempt
 * (a deadline of now: a call that gives up on an unreachable server must
 * not wait for it again here), within the call's end; if it fails, the
 * orphan list withdraws it when the server is back (a grant made to us
 * meanwhile goes with it).  The message of the call's error stays. */
static void acq_withdraw(struct acq *a) {
    struct dlock_client *c = a->c;
    char saved[512];
    int dummy, wrc;
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    pthread_mutex_unlock(&c->mu);
    wrc = c->be.ops->release(&c->be, &a->l->k, a->owner, DLOCK__REL_WITHDRAW, &dummy, NULL, dlock__now());
    dlock__restoreerr(saved);
    pthread_mutex_lock(&c->mu);
    if (wrc != 0) dlock__orphan_add(c, a->l, a->owner, DLOCK__REL_WITHDRAW, a->w->lease_ms);
}

/* The exit: undoes what the call did (its registration as a waiting
 * writer, its place on l->fair and on a grant list, its count as a
 * waiter, its use of l), restores the thread's call end and tells the
 * lost-lock handlers found on the way, c->mu released. */
static int step_out(struct acq *a) {
    struct dlock_client *c = a->c;
    dlock__lock *l = a->l;
    dlock__dl_end(c, l, &a->dl);
    if (a->registered) acq_withdraw(a);
    if (a->queued) dlock__fair_leave(c, l, &a->fw);
    if (a->counted) dlock__wait_done(c, l);
    dlock__stats_acquired(c, l, a->rc != 0 && a->rc != EOWNERDEAD ? NULL : a->w->shared ? dlock__reader(l, a->self) : &l->x, a->start, a->rc);
    l->users--;
    dlock__lock_maybe_free(c, l);
    pthread_mutex_unlock(&c->mu);
    (void)dlock__call_end_set(a->saved_end);
    dlock__report(&a->rep);
    dlock__report(&a->other);
    return ACQ_DONE;
}

/* The start: the owner (the thread, or for a process-owned lock the
 * process, whose calls any thread may count; the thread's own identity,
 * made first, still names the caller to the server), the call's token,
 * and its end: a timed call ends by its deadline (or its start, if later)
 * plus DLOCK__LATE_MS, and no connect or reply wait of it lasts past
 * that.  Returns with c->mu held and l in use, or an error and nothing
 * done. */
static int acq_start(struct acq *a, struct dlock_client *c, dlock__lock *l, const dlock__want *w, int try,
                     dlock__mono deadline, int bad_deadline) {
    int timed = deadline != DLOCK__MONO_NEVER && (!try || deadline > 0);
    dlock__mono start;
    int rc;
    memset(a, 0, sizeof *a);
    a->c = c;
    a->l = l;
    a->w = w;
    a->try = try;
    a->deadline = deadline;
    a->bad_deadline = bad_deadline;
    a->k = !w->shared ? 0 : w->readfirst ? 2 : 1;
    /* A waiting writer takes a place in the server's queue, and a release
     * hands the lock to the queue's head, waking only that waiter (no
     * herd, no request of its own): fair ones always; the others unless
     * the deployment keeps no queue (Redlock).  A queued waiter queues
     * even while another thread of this process holds the lock (its turn
     * then comes straight from that thread's release), but for a caching
     * mutex: its threads wait here for that unlock, which may leave the
     * lock in the process's cache for them -- a request from one of them
     * would make the server ask the cache to give the lock up. */
    a->queue = (w->fair && !w->shared && !try) || (!w->shared && !try && c->be.ops->queues);
    a->queue_local = (w->fair && !w->shared && !try) || (a->queue && !w->caching);
    if ((a->self = dlock__client_self(c, &rc)) == NULL) return rc;
    if (w->process && (a->self = dlock__proc_self(&rc)) == NULL) return rc;
    call_token(c, a->self, w, a->owner);
    a->fw.token = a->owner;
    a->fw.efd = -1;
    a->start = start = dlock__now();
    a->saved_end = dlock__call_end_set(!timed ? DLOCK__MONO_NEVER
                                              : (deadline > start ? deadline : start) + (dlock__mono)DLOCK__LATE_MS * DLOCK__MS);
    pthread_mutex_lock(&c->mu);
    l->users++;
    return 0;
}

/* The steps, in the order a first attempt meets them. */
static int (*const acq_steps[])(struct acq *) = {
    [ACQ_MINE] = step_mine,   [ACQ_QUEUE] = step_queue, [ACQ_CACHED] = step_cached, [ACQ_LOCAL] = step_local,
    [ACQ_READY] = step_ready, [ACQ_ASK] = step_ask,     [ACQ_HOLD] = step_hold,     [ACQ_BUSY] = step_busy,
    [ACQ_SLEEP] = step_sleep, [ACQ_GRANT] = step_grant, [ACQ_OUT] = step_out,
};

int dlock__acquire(struct dlock_client *c, dlock__lock *l, const dlock__want *w, int try,
                   dlock__mono deadline, int bad_deadline) {
    struct acq a;
    int rc, step = ACQ_MINE;
    if ((rc = acq_start(&a, c, l, w, try, deadline, bad_deadline)) != 0) return rc;
    while (step != ACQ_DONE) step = acq_steps[step](&a);
    return a.rc;
}
