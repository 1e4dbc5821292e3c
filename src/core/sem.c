/* sem.c -- counting semaphores across hosts: the waiting (api/sem.c has
 * the objects and the public calls).
 *
 * A semaphore is a table entry of its own kind (DLOCK__KIND_SEM), whose
 * keys are its value, its queue of waiters, their registrations' expiry
 * and the units handed to waiters (DLOCK__KS_*), and one script
 * (backend/lua/sem.lua), behind the backend's sem op.
 *
 * wait: one "take" without queueing first (a free unit costs one round
 * trip and no subscription).  Else the call subscribes to the value's
 * channel (the one waiting path's dlock__wait_ready), goes on l->fair
 * with a token of its own, as a fair mutex's waiter does, and asks again,
 * queueing: the server either gives it a unit or puts its token at the
 * end of the queue.  A post with waiters queued hands its unit to the
 * queue's head and tells that waiter alone, and the woken waiter's next
 * "take" takes the unit: a waiter with a place on a grant list (as a fair
 * mutex's: dlock__fair_listing, the client's conf.wait_conns) asks to be
 * told by a push to it ("take" with arg 2) and waits in BLPOP
 * (dlock__wait_grant), which the server answers in the post's own turn;
 * the others (or where the server refuses the list) hear their token
 * published, and the subscriber pokes that waiter (dlock__fair_poke).
 * No other thread anywhere wakes.  The poke flag is cleared before each
 * "take" is sent, so a message that comes after it is never missed.  A
 * waiter renews its registration every third of REG_TTL_MS (its "take"
 * again), so that the server drops the registrations of the
 * dead ones (and posts again a unit handed to one that never took it),
 * not those of the living; a lost subscription pokes every waiter
 * (notify.c), which ask again.  A timed wait that reaches its deadline,
 * or an interruptible one (DLOCK_F_INTR) that a signal handler ends,
 * withdraws: a unit handed to it meanwhile is its own, else ETIMEDOUT
 * or EINTR.
 *
 * Undo: a take or withdraw sent with a lease leases the unit it takes to
 * the process on the server (its token in :semu by expiry, "u:..." in
 * :semo).  Here that unit is a hold (h->unit) on l->units and on the
 * client's held list, so that the renewal thread renews it in its batch
 * with the locks (sem.lua's 'renew') and finds it lost as it finds a lock
 * lost: a refused renewal, or its validity run out (counted from before
 * the take was sent, less the drift margin).  A lost unit stays on
 * l->units, LOST, after its handler ran, until a post forgets it: that
 * post asks nothing of the server (the unit came back when its lease
 * did), so the program's post never adds a unit the lease gave back
 * already.  A post by a process with a live unit returns it ('return':
 * the lease ends, the unit goes to the queue's head or the value); one
 * the server says is gone (2) is lost, told and forgotten.  The server's
 * every op gives back units whose lease lapsed, as it takes back lapsed
 * registrations.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* A waiter's registration on the server, and the time a waiter has to
 * take a unit handed to it; renewed every third of it. */
#define REG_TTL_MS DLOCK__SEM_TTL_MS

/* One op on the server, through the client's circuit breaker as a lock
 * request goes (lock.c): while the breaker is open it fails with ENOLCK
 * at once, without asking, but for the probe, one call a second.  It is
 * bounded by the unreachable bound (a timed call's end, set by the
 * caller, bounds it further), and one that waited the whole bound in
 * vain opens the breaker, so a process pays that wait once per back-off
 * period.  The probe and a trywait's take (once) make one attempt, as a
 * trylock does; but one whose request may have gone out (a connection
 * was had) and got no answer may have been done -- a take that took a
 * unit no release would give back -- so it is asked again within the
 * bound (sem.lua's `done` answers an op it did with 1, doing nothing).
 * lease: take and withdraw lease the unit they take that long (0: not);
 * remake: the value the caller opened the semaphore with, to make it
 * again with if the server lost it (-1: not). */
static int op_once(struct dlock_client *c, dlock__lock *l, const char *what, const char *token, long long arg,
                   unsigned lease, long long remake, long long *res, int once) {
    dlock__sent sent = { 0, 0, 0 };
    dlock__mono ub, bound;
    int probe, rc;
    if ((rc = dlock__breaker_check(&c->be.node, &probe)) != 0) return rc;
    bound = ub = dlock__unreachable_deadline(&c->be.node);
    if (probe || once) bound = dlock__now();
    rc = c->be.ops->sem(&c->be, &l->k, what, token, REG_TTL_MS, arg, lease, remake, res, &sent, bound);
    if (rc == ENOLCK && bound != ub && sent.at != 0) { /* a connection was had: it may have gone out */
        bound = ub;
        rc = c->be.ops->sem(&c->be, &l->k, what, token, REG_TTL_MS, arg, lease, remake, res, NULL, bound);
    }
    pthread_mutex_lock(&c->mu);
    dlock__breaker_note(&c->be.node, rc, bound == ub ? ub : 0);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int op(struct dlock_client *c, dlock__lock *l, const char *what, const char *token, long long arg,
              unsigned lease, long long remake, long long *res) {
    return op_once(c, l, what, token, arg, lease, remake, res, 0);
}

/* A take whose answer was lost, to be undone, or a post whose answer was
 * lost, to be asked again ("lost takes and posts" below). */
struct dlock__sem_undo {
    const dlock__thread *self; /* the thread whose `done` entry names it */
    unsigned lease;            /* the take's (a leased unit's lease ends) */
    int post;                  /* a post: asked again (max, opened), before `until` */
    long long max, opened;
    dlock__mono until;
    char token[DLOCK__OWNER_LEN + 1];
    struct dlock__sem_undo *next;
};

/* How long after a post a lost answer of it is asked again: within the
 * server's record of the ops it did (sem_lua's `done`, kept a minute at
 * least), less a margin, so that a post it did is never done twice. */
#define POST_AGAIN_MS 50000

static int no_sem(struct dlock_client *c) {
    if (c->be.ops->sem != NULL) return 0;
    return dlock__seterr(ENOTSUP, "this deployment has no semaphores");
}

int dlock__sem_create(struct dlock_client *c, dlock__lock *l, unsigned value) {
    long long res;
    int rc;
    if ((rc = no_sem(c)) != 0) return rc;
    return op(c, l, "init", "-", (long long)value, 0, -1, &res);
}

/* ------------------------------------------------------- leased units */

/* c->mu held: the unit the call `token` took, its first request sent at
 * `sent`, is the process's, leased for w->lease_ms: h (made before the
 * call, so that no unit is taken that could not be kept) goes on l->units
 * and on the held list, where the renewal thread finds it. */
static void unit_add(struct dlock_client *c, dlock__lock *l, dlock__hold *h, const dlock__want *w, const char *token,
                     dlock__mono sent) {
    h->l = l;
    h->unit = 1;
    memcpy(h->token, token, sizeof h->token);
    h->lease_ms = w->lease_ms;
    h->acquired = sent;
    h->valid_until = sent + (dlock__mono)(w->lease_ms - dlock__drift_ms(&c->be.node.conf, w->lease_ms)) * DLOCK__MS;
    h->renew_at = sent + (dlock__mono)(w->lease_ms / 3) * DLOCK__MS;
    h->sem_lost_fn = w->sem_lost_fn;
    h->lost_arg = w->lost_arg;
    h->lost_obj = w->lost_obj;
    dlock__hold_take(h, NULL, 0);
    h->next = l->units;
    l->units = h;
    dlock__held_add(c, h);
}

/* c->mu held: h leaves its lock's list and the held list, and is freed. */
static void unit_forget(struct dlock_client *c, dlock__hold *h) {
    dlock__hold **pp = &h->l->units;
    while (*pp != NULL && *pp != h) pp = &(*pp)->next;
    if (*pp != NULL) *pp = h->next;
    dlock__held_remove(c, h);
    free(h);
}

void dlock__unit_lost(struct dlock_client *c, dlock__hold *h, dlock__lost_report *rep) {
    dlock__hold_lost(c, h, rep); /* (rep->fn stays NULL: lost_fn is) */
    if (h->sem_lost_fn == NULL) return;
    rep->sem_fn = h->sem_lost_fn;
    rep->arg = h->lost_arg;
    rep->obj = h->lost_obj;
    rep->name = strdup(h->l->k.name);
}

void dlock__units_free(dlock__lock *l) {
    while (l->units != NULL) {
        dlock__hold *h = l->units;
        l->units = h->next;
        free(h);
    }
    while (l->undos != NULL) {
        struct dlock__sem_undo *u = l->undos;
        l->undos = u->next;
        free(u);
    }
}

/* The unit of l's a post gives back: a lost one first (forgetting it is
 * all there is to do), else a live one whose return is not on its way
 * already; NULL: none.  c->mu held. */
static dlock__hold *unit_pick(dlock__lock *l) {
    dlock__hold *h, *live = NULL;
    for (h = l->units; h != NULL; h = h->next) {
        if (!dlock__hold_is_live(h)) return h;
        if (live == NULL && !dlock__hold_is_releasing(h)) live = h;
    }
    return live;
}

/* A post by the holder of h (live, marked releasing; c->mu NOT held):
 * its lease ends and its unit goes back, or the server says the lease is
 * gone (the unit came back already): h is lost, its handler told.  Not
 * answered: the program has posted it all the same, so h is forgotten
 * and renewed no more: its lease gives the unit back, if the return did
 * not, within a lease.  (Kept for a later post, it would outlive it: that
 * post is for the unit its own take leased, and one unit would stay
 * leased, renewed, for the process's life.) */
static int unit_return(struct dlock_client *c, dlock__lock *l, dlock__hold *h, unsigned opened) {
    dlock__lost_report rep;
    long long res = 0;
    /* (with its lease: a return that makes the semaphore again, the
     * server having lost it, holds its units back for that lease, as a
     * take with undo does, so no holder of before overlaps the next) */
    int rc = op(c, l, "return", h->token, 0, h->lease_ms, (long long)opened, &res);
    memset(&rep, 0, sizeof rep);
    pthread_mutex_lock(&c->mu);
    if (rc == 0 && res == 2) {
        dlock__unit_lost(c, h, &rep);
        rep.why = DLOCK_LOST_BROKEN;
    }
    unit_forget(c, h);
    pthread_mutex_unlock(&c->mu);
    dlock__lost_run(&rep);
    free(rep.name);
    return rc;
}

void dlock__units_return_all(struct dlock_client *c) {
    for (;;) {
        dlock__mono end = dlock__now() + 1000 * DLOCK__MS, saved;
        dlock__hold *h;
        long long res;
        pthread_mutex_lock(&c->mu);
        for (h = c->held; h != NULL && !(h->unit && !dlock__hold_is_releasing(h)); h = h->held_next)
            ;
        if (h != NULL) dlock__hold_release_start(h);
        pthread_mutex_unlock(&c->mu);
        if (h == NULL) return;
        /* Best effort, bounded: a server that does not answer lets the
         * lease run out instead. */
        saved = dlock__call_end_set(end);
        (void)op(c, h->l, "return", h->token, 0, 0, -1, &res);
        (void)dlock__call_end_set(saved);
        pthread_mutex_lock(&c->mu);
        unit_forget(c, h);
        pthread_mutex_unlock(&c->mu);
    }
}

/* ------------------------------------------------ lost takes and posts
 *
 * A take or withdraw whose call ended with an error (its answer lost:
 * the connection cut, the server restarted with its data while it ran,
 * and no answer came again by the call's end) may have taken a unit all
 * the same -- a unit nobody would ever post, or (undo) one nobody renews
 * for a lease.  The server's `done` entry of the thread that sent it
 * names its token until that thread's next op of the semaphore
 * (sem.lua), so that op is preceded by an undo of it: the unit goes
 * back if it was taken, and the registration goes if it was not.  A post
 * that ended with an error may not have reached the server (a link that
 * answered nothing for the whole bound): its unit would be gone for
 * good.  The same thread's next op asks it again first, with its token,
 * which the server's entry answers "done" if it was (within
 * POST_AGAIN_MS; later it is dropped).  An undo or post that gets no
 * answer stays, and the call that sent it fails rather than send an op
 * that would replace the entry.  (The list: struct dlock__sem_undo,
 * above.) */
static void undo_add(struct dlock_client *c, dlock__lock *l, const dlock__thread *self, const char *token,
                     unsigned lease) {
    struct dlock__sem_undo *u = calloc(1, sizeof *u);
    if (u == NULL) return; /* (its unit, if it took one, stays taken) */
    u->self = self;
    u->lease = lease;
    memcpy(u->token, token, sizeof u->token);
    pthread_mutex_lock(&c->mu);
    u->next = l->undos;
    l->undos = u;
    pthread_mutex_unlock(&c->mu);
}

/* A post of self's whose answer was lost (token), to be asked again. */
static void post_again_add(struct dlock_client *c, dlock__lock *l, const dlock__thread *self, const char *token,
                           long long max, long long opened, dlock__mono sent) {
    struct dlock__sem_undo *u = calloc(1, sizeof *u);
    if (u == NULL) return; /* (the post may stay undone, as before it was asked again) */
    u->self = self;
    u->post = 1;
    u->max = max;
    u->opened = opened;
    u->until = sent + (dlock__mono)POST_AGAIN_MS * DLOCK__MS;
    memcpy(u->token, token, sizeof u->token);
    pthread_mutex_lock(&c->mu);
    u->next = l->undos;
    l->undos = u;
    pthread_mutex_unlock(&c->mu);
}

/* One entry of the list, one round trip (none for a post too old). */
static int settle_one(struct dlock_client *c, dlock__lock *l, const struct dlock__sem_undo *u, int once,
                      long long *res) {
    if (!u->post) return op_once(c, l, "undo", u->token, 0, u->lease, -1, res, once);
    if (dlock__now() >= u->until) {
        dlock__debug("'%.64s': a post whose answer was lost is not asked again: too old", l->k.name);
        return 0;
    }
    return op_once(c, l, "post", u->token, u->max, 0, u->opened, res, once);
}

/* The calling thread's undos of l, each one round trip: 0, or the error
 * of the first that got no answer (it stays on the list).  once: for a
 * trywait, whose requests make one attempt each (op_once). */
static int settle(struct dlock_client *c, dlock__lock *l, int once) {
    const dlock__thread *self = dlock__self_peek();
    for (;;) {
        struct dlock__sem_undo **pp, *u;
        long long res = 0;
        int rc;
        pthread_mutex_lock(&c->mu);
        for (pp = &l->undos; *pp != NULL && (*pp)->self != self; pp = &(*pp)->next)
            ;
        if ((u = *pp) != NULL) *pp = u->next;
        pthread_mutex_unlock(&c->mu);
        if (u == NULL) return 0;
        if ((rc = settle_one(c, l, u, once, &res)) != 0) {
            pthread_mutex_lock(&c->mu);
            u->next = l->undos;
            l->undos = u;
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
        if (u->post) dlock__debug("'%.64s': a post whose answer was lost, asked again: done", l->k.name);
        else dlock__debug("'%.64s': a take whose answer was lost %s", l->k.name,
                          res == 1 ? "had taken a unit: given back" : "had taken none");
        free(u);
    }
}

void dlock__sem_settle(struct dlock_client *c, dlock__lock *l) {
    /* Best effort, bounded (an object's end does not wait for a server
     * that does not answer): as the client's end returns leased units. */
    dlock__mono saved = dlock__call_end_set(dlock__now() + 1000 * DLOCK__MS);
    (void)settle(c, l, 0);
    (void)dlock__call_end_set(saved);
}

/* ---------------------------------------------------------------- post */

/* A post has a token of its own call: asked again after its answer was
 * lost (within the call, or by the thread's next op: lost takes and
 * posts), the server knows it did it (sem.lua's `done`).  A process that
 * holds leased units of l gives one back instead. */
int dlock__sem_post(struct dlock_client *c, dlock__lock *l, unsigned opened, unsigned max) {
    char token[DLOCK__OWNER_LEN + 1];
    dlock__mono sent;
    dlock__thread *self;
    dlock__hold *h;
    long long res;
    int rc;
    if ((rc = no_sem(c)) != 0) return rc;
    if ((self = dlock__client_self(c, &rc)) == NULL) return rc;
    if ((rc = settle(c, l, 0)) != 0) return rc;
    pthread_mutex_lock(&c->mu);
    if ((h = unit_pick(l)) != NULL && !dlock__hold_is_live(h)) {
        unit_forget(c, h); /* lost: its unit came back with its lease */
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    if (h != NULL) dlock__hold_release_start(h);
    pthread_mutex_unlock(&c->mu);
    if (h != NULL) return unit_return(c, l, h, opened);
    dlock__owner_token(c, self, ++self->calls, token);
    sent = dlock__now();
    if ((rc = op(c, l, "post", token, (long long)max, 0, (long long)opened, &res)) != 0) {
        post_again_add(c, l, self, token, (long long)max, (long long)opened, sent); /* (lost takes and posts) */
        return rc;
    }
    if (res == 0) return dlock__seterr(EOVERFLOW, "'%.64s': the value would pass the maximum, %u", l->k.name, max);
    return 0;
}

int dlock__sem_value(struct dlock_client *c, dlock__lock *l, unsigned opened, int *value) {
    long long res;
    int rc;
    if ((rc = no_sem(c)) != 0) return rc;
    if ((rc = settle(c, l, 0)) != 0) return rc;
    if ((rc = op(c, l, "value", "-", 0, 0, (long long)opened, &res)) != 0) return rc;
    *value = res > 0x7fffffffLL ? 0x7fffffff : (int)res;
    return 0;
}

/* ---------------------------------------------------------------- wait */

/* One wait, carried through its steps. */
struct sem_wait {
    struct dlock_client *c;
    dlock__lock *l;
    const dlock__want *want; /* undo (lease, lost-unit handler), intr */
    unsigned lease;          /* want->lease_ms under undo, else 0 */
    dlock__mono deadline;
    dlock__mono sent;        /* when the last take or withdraw was first sent */
    dlock__fairwait fw; /* on l->fair while it waits: the subscriber pokes it */
    int try;            /* a trywait: its take makes one attempt (op_once) */
    int unsure;         /* a take or withdraw got no answer: it may have taken a unit */
    char token[DLOCK__OWNER_LEN + 1];
};

/* A take or withdraw: its answer in *res; the time before it went out
 * in w->sent (a unit it leases is valid from then on, at most). */
static int wait_op(struct sem_wait *w, const char *what, long long arg, long long *res) {
    int rc;
    w->sent = dlock__now();
    rc = op_once(w->c, w->l, what, w->token, arg, w->lease, (long long)w->want->sem_value, res, w->try);
    if (rc != 0) w->unsure = 1;
    return rc;
}

static int timed_out(const dlock__lock *l) {
    return dlock__seterr(ETIMEDOUT, "'%.64s': no unit was free by the deadline", l->k.name);
}

static int interrupted(const dlock__lock *l) {
    return dlock__seterr(EINTR, "waiting for '%.64s' was interrupted by a signal", l->k.name);
}

/* An op failed: past the caller's deadline, that is a timeout. */
static int failed(const struct sem_wait *w, int rc) {
    if (rc != 0 && w->deadline != DLOCK__MONO_NEVER && dlock__now() >= w->deadline) return timed_out(w->l);
    return rc;
}

/* Begin (c->mu held): the call is a waiter of l, on l->fair. */
static void wait_begin(struct sem_wait *w) {
    w->l->waiters++;
    w->fw.token = w->token;
    w->fw.efd = -1;
    w->fw.next = w->l->fair;
    w->l->fair = &w->fw;
}

/* End (c->mu held): off l->fair, no longer a waiter. */
static void wait_end(struct sem_wait *w) {
    dlock__fair_leave(w->c, w->l, &w->fw);
    dlock__wait_done(w->c, w->l);
}

/* The deadline came, or a signal (why: ETIMEDOUT, EINTR): one last op,
 * of DLOCK__LATE_MS at most, takes the registration back (or the unit a
 * post handed us meanwhile: 0).  Never past the call's own end (its
 * deadline + DLOCK__LATE_MS): a step that ran into that time (a take
 * answered just before it) leaves the withdraw only what is left of it. */
static int wait_withdraw(struct sem_wait *w, int why) {
    dlock__mono end = dlock__now() + (dlock__mono)DLOCK__LATE_MS * DLOCK__MS;
    dlock__mono saved = dlock__call_end_set(end);
    long long res = 0;
    int rc;
    if (saved < end) (void)dlock__call_end_set(saved);
    rc = wait_op(w, "withdraw", 0, &res);
    (void)dlock__call_end_set(saved);
    /* Unanswered: the registration lapses by itself (and a unit handed to
     * it goes on to the next waiter) after REG_TTL_MS. */
    if (rc == 0 && res == 1) return 0;
    return why == EINTR ? interrupted(w->l) : timed_out(w->l);
}

/* The same, called with c->mu held (and held again on return). */
static int wait_withdraw_locked(struct sem_wait *w, int why) {
    int rc;
    pthread_mutex_unlock(&w->c->mu);
    rc = wait_withdraw(w, why);
    pthread_mutex_lock(&w->c->mu);
    return rc;
}

/* The loop (c->mu held on entry and exit): subscribed, ask (take or
 * queue), sleep until poked (or, listed, until the server answers the
 * BLPOP on this wait's grant list, which a post that hands it a unit
 * pushes to: no subscriber thread between them), the deadline, a signal
 * (intr) or the time to renew.  Poked or pushed, the next take claims
 * the unit; a list that cannot be used (EAGAIN: fw.nolist) leaves this
 * wait to the channel from its next take on. */
static int wait_loop(struct sem_wait *w) {
    struct dlock_client *c = w->c;
    int intr = w->want->intr;
    long long res;
    int rc;

    for (;;) {
        dlock__mono until;
        int listed;
        if ((rc = dlock__wait_ready(c, w->l, w->deadline, intr)) != 0)
            return rc == ETIMEDOUT || rc == EINTR ? wait_withdraw_locked(w, rc) : rc;
        w->fw.poked = 0;
        listed = dlock__fair_listing(c, &w->fw, 1);
        pthread_mutex_unlock(&c->mu);
        rc = wait_op(w, "take", listed ? 2 : 1, &res);
        pthread_mutex_lock(&c->mu);
        if (rc != 0) return failed(w, rc);
        if (res == 1) return 0;
        until = dlock__now() + (dlock__mono)(REG_TTL_MS / 3) * DLOCK__MS;
        /* made again after a loss, its units held back -res ms more */
        if (res < 0 && dlock__now() + (dlock__mono)(-res) * DLOCK__MS < until)
            until = dlock__now() + (dlock__mono)(-res) * DLOCK__MS;
        if (w->deadline < until) until = w->deadline;
        if (listed) rc = dlock__wait_grant(c, w->l, &w->fw, until, w->deadline, intr, NULL);
        else rc = dlock__wait_turn(c, w->l, &w->fw, until, intr);
        if (rc == EINTR) return wait_withdraw_locked(w, EINTR);
        if (rc == ETIMEDOUT && dlock__now() >= w->deadline) return wait_withdraw_locked(w, ETIMEDOUT);
    }
}

/* The first ask, and the wait if it must: 0 a unit was taken. */
static int take_steps(struct sem_wait *w, int try, int bad_deadline) {
    struct dlock_client *c = w->c;
    long long res = 0;
    int rc;
    /* A free unit: one round trip, no subscription. */
    rc = wait_op(w, "take", 0, &res);
    if (rc != 0) return failed(w, rc);
    if (res == 1) return 0;
    if (try) return dlock__seterr(EAGAIN, "'%.64s': no unit is free", w->l->k.name);
    if (bad_deadline) return bad_deadline;
    if (w->deadline != DLOCK__MONO_NEVER && dlock__now() >= w->deadline) return timed_out(w->l);
    pthread_mutex_lock(&c->mu);
    wait_begin(w);
    rc = wait_loop(w);
    wait_end(w);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int dlock__sem_take(struct dlock_client *c, dlock__lock *l, const dlock__want *want, int try, dlock__mono deadline,
                    int bad_deadline) {
    struct sem_wait w;
    dlock__thread *self;
    dlock__hold *unit = NULL;
    dlock__mono start = dlock__now(), saved;
    int rc, timed = deadline != DLOCK__MONO_NEVER;

    if ((rc = no_sem(c)) != 0) return rc;
    if ((self = dlock__client_self(c, &rc)) == NULL) return rc;
    if (want->undo && (unit = calloc(1, sizeof *unit)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    memset(&w, 0, sizeof w);
    w.c = c;
    w.l = l;
    w.want = want;
    w.lease = want->undo ? want->lease_ms : 0;
    w.deadline = deadline;
    w.try = try;
    dlock__owner_token(c, self, ++self->calls, w.token);
    /* A timed call ends by its deadline (or its start, if later) plus
     * DLOCK__LATE_MS, as a timed lock call does (lock.c). */
    saved = dlock__call_end_set(!timed ? DLOCK__MONO_NEVER
                                       : (deadline > start ? deadline : start) + (dlock__mono)DLOCK__LATE_MS * DLOCK__MS);
    /* (an undo left by this thread's last call goes first, in this one's time) */
    if ((rc = settle(c, l, try)) != 0) rc = failed(&w, rc);
    else rc = take_steps(&w, try, bad_deadline);
    (void)dlock__call_end_set(saved);
    if (rc != 0 && w.unsure) undo_add(c, l, self, w.token, w.lease);
    if (rc == 0 && unit != NULL) {
        pthread_mutex_lock(&c->mu);
        unit_add(c, l, unit, want, w.token, w.sent);
        pthread_mutex_unlock(&c->mu);
    } else {
        free(unit);
    }
    return rc;
}
