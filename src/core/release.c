/* release.c -- the release, twin of the acquisition (lock.c): an
 * unlock of a mutex or rwlock as named steps (struct rel), the pipelined
 * unlock whose answer is read later, and the question whether the
 * caller holds a lock.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* What a release's answer says, when a request of it went out and got no
 * answer (a master killed under it, a connection reset) and it was sent
 * again -- on the server that answers now, a promoted replica perhaps.
 * "Released" is plain.  "Not held" is the first request's doing, or the
 * failover's: in both the hold was the caller's on the server until the
 * first request was sent (a replica promoted since then has granted
 * nobody before it), so the unlock took nothing from anyone: 1.  Unless
 * the hold's validity (the last confirmed renewal + lease - drift) had run
 * out by this answer: then its lease may have lapsed on the server while
 * the unlock waited, and it counts as lost (EPERM), as for any unlock
 * that finds its lease gone. */
static int released_read(const dlock__lock *l, int rc, int released, const dlock__sent *st, dlock__mono valid) {
    if (rc != 0 || released || !st->maybe_ran) return released;
    if (dlock__now() < valid) {
        dlock__debug("'%.64s': the release was asked again and found the hold gone: the first request, "
                     "unanswered, released it (or a failover lost it after that request was sent)", l->k.name);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------- pipelined unlock
 *
 * A NORMAL/DEFAULT mutex with the pipelined attribute: its unlock sends
 * the release and returns; the answer is read ahead of the thread's next
 * request on that connection (the net layer's owed answers), or by the
 * renewal thread once DLOCK__PIPE_SETTLE_MS old, or by exit, fork and
 * destroy.  Exclusion does not change: the server holds the lock until the
 * release arrives.  What the answer says: released, nothing to do; not
 * ours any more (the lease had run out on the server), the lost-lock
 * handler is told; no answer, the token is an orphan, released again when
 * the server answers (or its lease runs out).
 *
 * While nobody else wants the lock, the release is held back: written in
 * the same write as the thread's next request (its next lock, mostly),
 * so that an uncontended pair costs one write and one wake-up of the
 * server, not two; a thread that makes no request soon has it written by
 * the renewal thread after DLOCK__PIPE_HOLD_MS.  A held release keeps the
 * lock from another process that comes meanwhile for that long, so the
 * first sign that another owner wants it -- an acquisition of ours that
 * found it held, a release that told a waiter, a local thread waiting --
 * ends the holding back for a quiet period (1 s, doubling with each new
 * sign up to 64 s): a lock contended goes back to the release written at
 * once, which hands it over as soon as the server has it. */
struct pipe_rel {
    dlock__relsend rs; /* first: the backend hands it back */
    struct dlock_client *c;
    dlock__lock *l; /* counted in l->users until the answer */
    char token[DLOCK__OWNER_LEN + 1];
    int how;
    unsigned lease;
    dlock_lost_fn fn;
    void *arg, *obj;
};

/* How long after its last pipelined release the renewal thread keeps
 * looking for their answers (it then sleeps as before). */
#define PIPE_TICKING_MS 1000
/* The quiet period after a sign of contention: this, doubled by each
 * sign seen before, PIPE_QUIET_DOUBLINGS times at most. */
#define PIPE_QUIET_MS 1000
#define PIPE_QUIET_DOUBLINGS 6

void dlock__pipe_contended(dlock__lock *l) {
    dlock__mono now = dlock__now();
    unsigned k = l->pipe_strikes < PIPE_QUIET_DOUBLINGS ? l->pipe_strikes : PIPE_QUIET_DOUBLINGS;
    /* (a sign within the quiet period it began is the same contention) */
    if (now >= l->pipe_quiet_until) l->pipe_strikes++;
    l->pipe_quiet_until = now + ((dlock__mono)PIPE_QUIET_MS << k) * DLOCK__MS;
}

static void pipe_heard(dlock__relsend *rs, int rc, int released) {
    struct pipe_rel *p = (struct pipe_rel *)(void *)rs;
    struct dlock_client *c = p->c;
    dlock__lost_report rep = { 0 };
    if (rc == -1) { /* a fork child: the parent's */
        free(p);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (c->pipe_out > 0) c->pipe_out--;
    if (rc != 0) {
        dlock__orphan_add(c, p->l, p->token, p->how, p->lease); /* asked again when the server answers */
    } else if (!released && p->fn != NULL) {
        rep.fn = p->fn;
        rep.arg = p->arg;
        rep.obj = p->obj;
        rep.name = strdup(p->l->k.name);
    }
    if (rc == 0 && !released)
        dlock__debug("'%.64s': a pipelined unlock found the lease already gone on the server", p->l->k.name);
    if (rc == 0 && released == 2) dlock__pipe_contended(p->l); /* it told a waiter */
    p->l->users--;
    dlock__lock_maybe_free(c, p->l);
    pthread_mutex_unlock(&c->mu);
    dlock__report(&rep);
    free(p);
}

/* Sends h's release without waiting for its answer.  c->mu held (and
 * still held on return); 0: sent, h forgotten (*written: 1 if it went out
 * now, 0 if held back for the thread's next request); else not sent: the
 * caller releases as a confirmed unlock does. */
static int pipe_send(struct dlock_client *c, dlock__lock *l, dlock__hold *h, const dlock__thread *self,
                     const char *token, int how, unsigned lease, int *written) {
    struct pipe_rel *p;
    dlock__mono now;
    int rc;
    if (h != &l->x || c->be.ops->release_send == NULL ||
        (c->be.node.breaker_until != 0 && dlock__now() < c->be.node.breaker_until))
        return -1;
    if ((p = calloc(1, sizeof *p)) == NULL) return -1;
    p->rs.done = pipe_heard;
    now = dlock__now();
    p->rs.hold = now >= l->pipe_quiet_until && l->waiters == 0;
    if (l->waiters > 0) dlock__pipe_contended(l);
    p->c = c;
    p->l = l;
    memcpy(p->token, token, sizeof p->token);
    p->how = how;
    p->lease = lease;
    p->fn = h->lost_fn;
    p->arg = h->lost_arg;
    p->obj = h->lost_obj;
    dlock__hold_release_start(h); /* (renewed meanwhile; no other thread takes it) */
    l->users++;
    c->pipe_out++;
    pthread_mutex_unlock(&c->mu);
    rc = c->be.ops->release_send(&c->be, &l->k, p->token, how, &p->rs, dlock__unreachable_deadline(&c->be.node));
    pthread_mutex_lock(&c->mu);
    if (rc == 0 && h == &l->x) l->k.lvb_pending = 0; /* (carried: the request is written) */
    if (rc != 0) {
        c->pipe_out--;
        l->users--;
        free(p);
        return rc;
    }
    if (l->x.owner == self && memcmp(l->x.token, token, sizeof p->token) == 0) dlock__hold_forget(c, h);
    l->gen++; /* local waiters try at once (the server wakes them when the release lands) */
    dlock__lock_wake(l);
    if (p->rs.hold) c->pipe_held_at = now;
    *written = !p->rs.hold;
    if (dlock__renew_start(c) == 0 && c->pipe_tick_until <= now) dlock__renew_kick(c); /* it may sleep long */
    c->pipe_tick_until = now + (dlock__mono)PIPE_TICKING_MS * DLOCK__MS;
    return 0;
}

void dlock__pipe_flush(struct dlock_client *c, dlock__mono deadline) {
    dlock__backend_settle(&c->be, DLOCK__MONO_NEVER, DLOCK__MONO_NEVER, deadline);
    /* Answers another thread is reading now (the renewal thread's
     * settle): waited for, to the deadline. */
    pthread_mutex_lock(&c->mu);
    while (c->pipe_out > 0 && dlock__now() < deadline) {
        pthread_mutex_unlock(&c->mu);
        dlock__backend_settle(&c->be, DLOCK__MONO_NEVER, DLOCK__MONO_NEVER, deadline);
        dlock__sleep_until(dlock__now() + DLOCK__MS);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
}

void dlock__pipe_settle(struct dlock_client *c, dlock__mono now, dlock__mono *next) {
    const dlock__mono hold = (dlock__mono)DLOCK__PIPE_HOLD_MS * DLOCK__MS;
    dlock__mono look = now + (dlock__mono)DLOCK__PIPE_SETTLE_MS * DLOCK__MS / 2;
    if (c->pipe_out > 0) {
        pthread_mutex_unlock(&c->mu);
        dlock__backend_settle(&c->be, now - (dlock__mono)DLOCK__PIPE_SETTLE_MS * DLOCK__MS, now - hold,
                              now + (dlock__mono)c->be.node.conf.command_timeout_ms * DLOCK__MS);
        pthread_mutex_lock(&c->mu);
    }
    /* While releases are held back, one may be waiting: looked at every
     * DLOCK__PIPE_HOLD_MS, the first time when the last one held comes of
     * age (the renewal thread is not woken for each one held). */
    if (c->pipe_held_at != 0 && now < c->pipe_held_at + (dlock__mono)PIPE_TICKING_MS * DLOCK__MS) {
        dlock__mono at = c->pipe_held_at + hold > now ? c->pipe_held_at + hold : now + hold;
        if (at < look) look = at;
    }
    if ((c->pipe_out > 0 || now < c->pipe_tick_until) && look < *next) *next = look;
}

/* The server answered an unlock that the hold was no longer the
 * caller's there: its lease lapsed (the data lost, or it ran out while
 * the unlock waited).  A lost hold is told by its lost-lock handler, on
 * the caller's thread, before EPERM.  *lost holds the hold's handler
 * (the caller's object keeps l); valid, the hold's validity: in time,
 * the lease cannot have run out on the server, so the hold was taken
 * from it there (the data lost, or broken).  c->mu NOT held. */
static int release_lapsed(const dlock__lock *l, dlock__lost_report *lost, dlock__mono valid) {
    if (lost->fn != NULL) {
        lost->why = dlock__now() < valid ? DLOCK_LOST_BROKEN : DLOCK_LOST_EXPIRED;
        lost->name = strdup(l->k.name); /* (NULL if out of memory: the handler is told anyway) */
        dlock__report(lost);
    }
    return dlock__seterr(EPERM, "the lease of '%.64s' had run out on the server", l->k.name);
}

/* ---------------------------------------------------------- the release */

/* One release (dlock__release, dlock__release_want) in named steps,
 * shaped as the acquisition (struct acq) and as the Linux DLM's
 * do_unlock: first the local decision, with no round trip -- rel_mine:
 * not held (EPERM), lost (EPERM, forgotten), a recursion counted down;
 * rel_cache: a caching mutex nobody asked for stays in the process's
 * cache -- then the request (rel_ask: pipelined, or one round trip within
 * the unreachable bound), then its finish (rel_finish).  Every step runs
 * with c->mu held, dropping it only around the round trip, and returns
 * the next; rel_out, the one exit, drops c->mu, tells the lost-lock
 * handler and says what the outcome was.
 *
 * The hold is forgotten at the finish, after the answer, not before the
 * round trip: until then it is marked releasing, still renewed and still
 * blocking this process's other threads.  A release asked again (a
 * failover, a cluster slot that migrates) may outlast the lease; a hold
 * forgotten before it would stop being renewed, its lease could lapse
 * on the server while its unlock waits -- another client could take the
 * lock meanwhile, and the unlock would be told EPERM for a hold it never
 * lost.  (The pipelined unlock forgets it once the request is sent: its
 * answer is read later, and a lapse is told to the handler then.) */
struct rel {
    /* The call. */
    struct dlock_client *c;
    dlock__lock *l;
    dlock__thread *self; /* the owner: a thread, or the process (`process`) */
    int allow_shared, process, pipelined;
    /* What the local decision found and took from the hold. */
    dlock__hold *h;
    char token[DLOCK__OWNER_LEN + 1];
    int how;
    unsigned lease;
    dlock__mono valid; /* h's validity when the unlock began (released_read) */
    /* The outcome. */
    int rc;                  /* the call's result (REL_KEPT) */
    int released;            /* the server's answer: 1 released, 0 not held */
    int end;                 /* REL_*: what rel_out says */
    int yield;               /* a pipelined release written at once: yield once (rel_out) */
    dlock__lost_report rep;  /* the hold, found lost before the unlock */
    dlock__lost_report lost; /* its handler, told if the server says the hold had lapsed */
};

#define REL_KEPT 0   /* rc as it is */
#define REL_LOST 1   /* lost before the unlock: EPERM */
#define REL_LAPSED 2 /* the server said the hold had lapsed: EPERM */

enum rel_step {
    REL_MINE,   /* the caller's hold: not held, lost, a recursion */
    REL_CACHE,  /* a caching mutex's hold stays in the process's cache */
    REL_ASK,    /* the request: pipelined, or one round trip */
    REL_FINISH, /* the hold forgotten, local waiters woken, an orphan kept */
    REL_OUT,    /* the exit: c->mu dropped, the handler told */
    REL_DONE
};

/* The caller's hold: none (or a process's hold whose unlock another
 * thread is making: no longer held either) is EPERM; a lost one is
 * forgotten, EPERM; a recursive one is counted down. */
static int rel_mine(struct rel *r) {
    struct dlock_client *c = r->c;
    dlock__lock *l = r->l;
    dlock__hold *h = r->self != NULL && l->x.owner == r->self ? &l->x : NULL;
    if (h == NULL && r->allow_shared && r->self != NULL) h = dlock__reader(l, r->self);
    if (h == NULL || (r->process && dlock__hold_is_releasing(h))) {
        r->rc = dlock__seterr(EPERM, "'%.64s' is not held by the calling %s", l->k.name,
                              r->process ? "process" : "thread");
        return REL_OUT;
    }
    if (!dlock__hold_valid(c, h, r->self, &r->rep)) {
        dlock__hold_forget(c, h);
        dlock__lock_maybe_free(c, l);
        r->end = REL_LOST;
        return REL_OUT;
    }
    if (h->count > 1) {
        h->count--;
        return REL_OUT;
    }
    r->h = h;
    return REL_CACHE;
}

/* A caching mutex's hold nobody else asked for: the process keeps the
 * lock, no round trip; local waiters take it from the cache.  Else what
 * the request needs is read off the hold. */
static int rel_cache(struct rel *r) {
    dlock__hold *h = r->h;
    dlock__stats_released(r->c, h);
    if (h->caching && !dlock__hold_is_inconsistent(h) && dlock__cache_ok(r->c, r->l)) {
        dlock__hold_cache(h);
        r->l->gen++;
        dlock__lock_wake(r->l);
        return REL_OUT;
    }
    r->how = dlock__hold_release_kind(h, 0);
    memcpy(r->token, h->token, sizeof r->token);
    r->lease = h->lease_ms;
    r->valid = h->valid_until;
    return REL_ASK;
}

/* The request: pipelined (sent, its answer read later: done), else one
 * round trip through the circuit breaker (open: not asked, ENOLCK). */
static int rel_ask(struct rel *r) {
    struct dlock_client *c = r->c;
    dlock__hold *h = r->h;
    dlock__sent st = { 0, 0, 0 };
    dlock__mono ub;
    int probe;
    uint64_t lvb = dlock__lvb_carry(r->l, h); /* a value block set in this hold: written with the release */
    if (r->pipelined && pipe_send(c, r->l, h, r->self, r->token, r->how, r->lease, &r->yield) == 0) return REL_OUT;
    /* Whom to tell if the server says the hold had lapsed: while the
     * unlock is on its way the renewal thread declares no loss, so the
     * unlock's answer is the one place that tells it (once). */
    memset(&r->lost, 0, sizeof r->lost);
    r->lost.fn = h->lost_fn;
    r->lost.arg = h->lost_arg;
    r->lost.obj = h->lost_obj;
    /* Renewed until the release is answered (see struct rel).  The
     * thread is in here meanwhile: no other one takes it. */
    dlock__hold_release_start(h);
    r->l->users++;
    if ((r->rc = dlock__breaker_pass(&c->be.node, &probe)) != 0) return REL_FINISH;
    pthread_mutex_unlock(&c->mu);
    ub = dlock__unreachable_deadline(&c->be.node);
    r->rc = c->be.ops->release(&c->be, &r->l->k, r->token, r->how, &r->released, &st, probe ? dlock__now() : ub);
    r->released = released_read(r->l, r->rc, r->released, &st, r->valid);
    pthread_mutex_lock(&c->mu);
    dlock__lvb_sent(r->l, lvb, r->rc);
    dlock__breaker_note(&c->be.node, r->rc, probe ? 0 : ub);
    return REL_FINISH;
}

/* The hold forgotten -- unless another thread of this process was handed
 * the lock meanwhile: l->x is its hold now -- and local waiters woken;
 * a release not answered (ENOLCK) leaves its token an orphan, released
 * when the server is back (or its lease runs out). */
static int rel_finish(struct rel *r) {
    struct dlock_client *c = r->c;
    dlock__lock *l = r->l;
    if (r->h != &l->x || (l->x.owner == r->self && memcmp(l->x.token, r->token, sizeof r->token) == 0))
        dlock__hold_forget(c, r->h);
    l->users--;
    if (r->rc != 0) dlock__orphan_add(c, l, r->token, r->how, r->lease);
    l->gen++; /* released on the server: local waiters try at once */
    dlock__lock_wake(l);
    dlock__lock_maybe_free(c, l);
    if (r->rc == 0 && !r->released) r->end = REL_LAPSED;
    return REL_OUT;
}

/* The one exit: c->mu dropped, then the handler of a hold found lost
 * told (on the caller's thread, before EPERM) and the outcome's message
 * set after it.
 *
 * A release the server answered with a handoff (the lock went to the wait
 * queue's head, whose BLPOP it answered in the same turn) yields the
 * caller's CPU once before returning.  The woken waiter is runnable now,
 * often on this CPU (the server woke it from here); without the yield
 * this thread runs on first, and a caller that locks again at once -- as
 * every contending loop does -- sends its next acquire, which the server
 * runs before the new holder has even returned from its lock call: on a
 * host with few cores, every such handoff waits for one more request (a
 * quarter to half of them on a 2-core host, ~50 us each).  The yield
 * costs a system call when nothing else is runnable; the lock is the
 * waiter's already, so nothing but the order of the two changes.
 *
 * A pipelined release written at once (another owner wants the lock:
 * pipe_send) yields once too.  The write has woken the server, and on a
 * loaded host the kernel may still hold the bytes for this CPU's softirq
 * thread; without the yield this thread runs on, and the other owner --
 * in the commonest case the very process its caller hands the turn to
 * next -- sends its acquire, which can reach the server first and find
 * the lock still held: an extra round trip and a script run for it (5-16%
 * of such acquires on the loaded 2-core bench host, mostly under 1% with
 * the yield: bench pipe's alternation_pipelined_requests_per_handoff).
 * Like the handoff's, it costs a system call when nothing else is
 * runnable, and may cost this thread the rest of its slice when
 * something is. */
static int rel_out(struct rel *r) {
    pthread_mutex_unlock(&r->c->mu);
    if ((r->rc == 0 && r->end == REL_KEPT && r->released == DLOCK__RELEASED_HANDED) || r->yield) sched_yield();
    dlock__report(&r->rep);
    if (r->end == REL_LOST) r->rc = dlock__seterr(EPERM, "the lease of '%.64s' was lost before unlock", r->l->k.name);
    else if (r->end == REL_LAPSED) r->rc = release_lapsed(r->l, &r->lost, r->valid);
    return REL_DONE;
}

static int (*const rel_steps[])(struct rel *) = {
    [REL_MINE] = rel_mine, [REL_CACHE] = rel_cache, [REL_ASK] = rel_ask, [REL_FINISH] = rel_finish, [REL_OUT] = rel_out,
};

/* The hold of l that self owns (a thread, or the process: `process`)
 * ends; `pipelined`: without waiting for the answer (pipe_send). */
static int release_as(struct dlock_client *c, dlock__lock *l, int allow_shared, dlock__thread *self, int process,
                      int pipelined) {
    struct rel r; /* (only what a step reads before another sets it: an unlock is on every hot path) */
    int step = REL_MINE;
    r.c = c;
    r.l = l;
    r.self = self;
    r.allow_shared = allow_shared;
    r.process = process;
    r.pipelined = pipelined;
    r.h = NULL;
    r.rc = 0;
    r.released = 0;
    r.end = REL_KEPT;
    r.yield = 0;
    memset(&r.rep, 0, sizeof r.rep);
    pthread_mutex_lock(&c->mu);
    while (step != REL_DONE) step = rel_steps[step](&r);
    return r.rc;
}

int dlock__release(struct dlock_client *c, dlock__lock *l, int allow_shared) {
    return release_as(c, l, allow_shared, dlock__self_peek(), 0, 0);
}

dlock__thread *dlock__owner_peek(const dlock__want *w) {
    return w->process ? dlock__proc_peek() : dlock__self_peek();
}

int dlock__release_want(struct dlock_client *c, dlock__lock *l, const dlock__want *w) {
    int rc;
    /* The thread's own identity names it to the server as the releaser
     * (host:pid:tid); a process-owned release works without it. */
    if (w->process) (void)dlock__self(&rc);
    return release_as(c, l, w->shared, dlock__owner_peek(w), w->process, w->pipelined && !w->shared);
}

static int holds_as(struct dlock_client *c, dlock__lock *l, int allow_shared, dlock__thread *self, uint64_t *fence) {
    dlock__lost_report rep = { 0 };
    dlock__hold *h;
    int ok;
    pthread_mutex_lock(&c->mu);
    h = &l->x;
    ok = dlock__hold_valid(c, h, self, &rep) && !dlock__hold_is_releasing(h); /* (another thread's unlock of the process's) */
    if (!ok && allow_shared && self != NULL && (h = dlock__reader(l, self)) != NULL)
        ok = dlock__hold_valid(c, h, self, &rep);
    if (ok && fence != NULL) *fence = h->fence;
    pthread_mutex_unlock(&c->mu);
    dlock__report(&rep);
    return ok;
}

/* 1 if the calling thread holds l validly (exclusively, or shared when
 * allow_shared), with its fence in *fence.  c->mu NOT held. */
int dlock__holds(struct dlock_client *c, dlock__lock *l, int allow_shared, uint64_t *fence) {
    return holds_as(c, l, allow_shared, dlock__self_peek(), fence);
}

/* The same for the owner of w's holds (the thread, or its process). */
int dlock__holds_want(struct dlock_client *c, dlock__lock *l, const dlock__want *w, uint64_t *fence) {
    return holds_as(c, l, w->shared, dlock__owner_peek(w), fence);
}
