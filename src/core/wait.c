/* wait.c -- the one waiting path every blocking call goes through.
 *
 * A waiter never polls the server in a loop.  It (1) makes sure a release
 * of the lock will wake it: the lock's release channel is subscribed and
 * the subscription confirmed; (2) tries to acquire, remembering the lock's
 * generation before the try; (3) if the lock was busy, sleeps until the
 * generation moves (a release notification, a local unlock, a lost
 * subscription), the holder's lease runs out, or its own deadline passes,
 * whichever is first; then tries again.  Because the subscription is
 * active before the try and the generation is read before it too, a
 * release that happens after the try always moves the generation: no
 * release is missed.
 *
 * Sleeping is on the lock's condition variable, or, for an interruptible
 * wait (the LD_PRELOAD mode's flock, which must give EINTR when a signal
 * handler runs, as the system call does), in ppoll on the thread's own
 * eventfd, which every wake-up of the lock also pokes.
 *
 * A fair waiter sleeps until poked (dlock__wait_turn), or, queued for a
 * grant pushed to its own list, in BLPOP (dlock__wait_grant), in named
 * steps over one struct grant_wait: begin, its own deadline, send, await
 * (ppoll on the socket and the eventfd; the wait's ticks made meanwhile,
 * the BLPOP pending), drop or keep the connection, end (read the answer);
 * the send, the await, the connection and the answer are the backend's
 * (backend/grant.c).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/core.h"

/* During an interruptible call, the caller's own signal mask (the call
 * itself runs with signals blocked: see dlock__obj_xlock). */
static __thread sigset_t intr_mask;
static __thread int intr_mask_set;

void dlock__intr_mask_set(const sigset_t *mask) {
    if (mask != NULL) intr_mask = *mask;
    intr_mask_set = mask != NULL;
}

/* The signal mask an interruptible sleep runs with: the caller's, from
 * before the call, or the mask as it is. */
static void sleep_mask(sigset_t *mask) {
    if (intr_mask_set) *mask = intr_mask;
    else pthread_sigmask(SIG_SETMASK, NULL, mask);
}

/* An interruptible sleeper, on its lock's list while it sleeps. */
struct dlock__sleeper {
    int fd;
    struct dlock__sleeper *next;
};

/* Wakes l's interruptible sleepers (each on its eventfd). */
static void wake_fds(dlock__lock *l) {
    struct dlock__sleeper *s;
    uint64_t one = 1;
    for (s = l->sleepers; s != NULL; s = s->next) (void)!write(s->fd, &one, sizeof one);
}

void dlock__lock_wake(dlock__lock *l) {
    pthread_cond_broadcast(&l->cv);
    wake_fds(l);
}

/* The calling thread's eventfd for interruptible sleeps, made on first
 * use and closed when the thread exits. */
static pthread_key_t efd_key;
static pthread_once_t efd_once = PTHREAD_ONCE_INIT;

static void efd_close(void *p) {
    close((int)(intptr_t)p - 1);
}

static void efd_key_make(void) {
    (void)pthread_key_create(&efd_key, efd_close);
}

static int thread_efd(void) {
    intptr_t v;
    int fd;
    pthread_once(&efd_once, efd_key_make);
    v = (intptr_t)pthread_getspecific(efd_key);
    if (v != 0) return (int)v - 1;
    if ((fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) return -1;
    if (pthread_setspecific(efd_key, (void *)(intptr_t)(fd + 1)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int dlock__sleep(struct dlock_client *c, dlock__lock *l, dlock__mono until, int intr) {
    struct dlock__sleeper me, **pp;
    struct timespec ts, *tsp = NULL;
    struct pollfd pfd;
    sigset_t mask;
    int rc, fd;

    if (!intr) {
        rc = dlock__cond_wait_until(&l->cv, &c->mu, until);
        return rc == ETIMEDOUT ? ETIMEDOUT : 0;
    }
    if ((fd = thread_efd()) < 0) return dlock__seterr(EAGAIN, "cannot create an eventfd");
    if (until != DLOCK__MONO_NEVER) {
        dlock__mono left = until - dlock__now();
        if (left <= 0) return ETIMEDOUT;
        dlock__mono_to_ts(left, &ts);
        tsp = &ts;
    }
    dlock__efd_drain(fd); /* stale wake-ups */
    me.fd = fd;
    me.next = l->sleepers;
    l->sleepers = &me;
    pthread_mutex_unlock(&c->mu);
    sleep_mask(&mask);
    pfd.fd = fd;
    pfd.events = POLLIN;
    rc = ppoll(&pfd, 1, tsp, &mask);
    rc = rc < 0 && errno == EINTR ? EINTR : rc == 0 ? ETIMEDOUT : 0;
    pthread_mutex_lock(&c->mu);
    for (pp = &l->sleepers; *pp != &me; pp = &(*pp)->next)
        ;
    *pp = me.next;
    return rc;
}

/* A waiter whose own bound has passed while l's subscriber has not tried
 * yet looks again this often (the subscriber's attempts do not wake it). */
#define READY_RECHECK_MS 100

/* The channel is made live, or the call ends: at its deadline
 * (ETIMEDOUT), or with ENOLCK once both its own unreachable_ms and the
 * subscriber's (dlock__sub_give_up) have run out -- the first, so that no
 * waiter gives up sooner than unreachable_ms; the second, so that a
 * reachable server whose subscriber a loaded host runs late, or whose
 * answer is slow, does not fail a lock it would get. */
int dlock__wait_ready(struct dlock_client *c, dlock__lock *l, dlock__mono deadline, int intr) {
    dlock__mono own = dlock__unreachable_deadline(&c->be.node);
    int rc;

    for (;;) {
        dlock__mono give_up, now, until;
        if (dlock__sub_live(c, l)) return 0;
        if ((rc = dlock__notify_want(c, l)) != 0) return rc;
        give_up = dlock__sub_give_up(c, l);
        if (give_up < own) give_up = own;
        now = dlock__now();
        if (now >= deadline && deadline <= give_up) return ETIMEDOUT;
        if (now >= give_up)
            return dlock__seterr(ENOLCK, "%s: cannot subscribe to release notifications", c->be.node.conf.redacted_url);
        until = give_up;
        if (until == DLOCK__MONO_NEVER) until = now < own ? own : now + (dlock__mono)READY_RECHECK_MS * DLOCK__MS;
        if (deadline < until) until = deadline;
        rc = dlock__sleep(c, l, until, intr);
        if (rc != 0 && rc != ETIMEDOUT) return rc;
    }
}

int dlock__wait(struct dlock_client *c, dlock__lock *l, uint64_t gen, dlock__mono until, int intr) {
    while (l->gen == gen) {
        int rc = dlock__sleep(c, l, until, intr);
        if (rc != 0) return rc;
    }
    return 0;
}

int dlock__wait_turn(struct dlock_client *c, dlock__lock *l, dlock__fairwait *fw, dlock__mono until, int intr) {
    if (!intr && !fw->cv_ok) fw->cv_ok = dlock__cond_init(&fw->cv) == 0; /* made when first needed */
    while (!fw->poked) {
        int rc;
        if (!intr && fw->cv_ok) {
            rc = dlock__cond_wait_until(&fw->cv, &c->mu, until);
            if (rc == ETIMEDOUT) return ETIMEDOUT;
            continue;
        }
        if ((rc = dlock__sleep(c, l, until, intr)) != 0) return rc;
    }
    return 0;
}

/* One grant wait, carried through its steps (dlock__wait_grant). */
struct grant_wait {
    struct dlock_client *c;    /* the caller's client: its mutex, deployment, fair list */
    dlock__lock *l;
    dlock__fairwait *fw;
    dlock__grant_pop pop;      /* the BLPOP: its connection and answer (backend/grant.c) */
    dlock__mono now;           /* when the wait began */
    dlock__mono until;         /* the server ends the BLPOP then */
    dlock__mono give_up;       /* and this thread stops waiting for its answer then */
    sigset_t mask;             /* the caller's signal mask (an interruptible wait) */
    int fd;                    /* the thread's eventfd, which a poke writes */
    int intr;
};

/* Step 1 (c->mu held): the thread's eventfd, emptied of stale wake-ups
 * and shown to pokers (fw->efd).  0, or EAGAIN (this call's grants are
 * then published: fw->nolist). */
static int grant_begin(struct grant_wait *g) {
    if ((g->fd = thread_efd()) < 0) {
        g->fw->nolist = 1;
        return EAGAIN;
    }
    dlock__efd_drain(g->fd); /* stale wake-ups */
    g->fw->efd = g->fd;
    return 0;
}

/* Step 2, the wait's own deadline.  The server ends the wait at `until`;
 * this thread waits for its answer a little longer (the reply floor, or
 * the command timeout if shorter) before it gives up on it, so that a
 * frozen server does not keep the call a whole command timeout -- but
 * never past the caller's deadline: Redis times blocked clients out only
 * every 1000/hz ms (100 ms at the default hz 10), and a timed call must
 * not wait for that.  Given up, the connection goes, its BLPOP pending. */
static void grant_deadline(struct grant_wait *g, dlock__mono deadline) {
    g->give_up = g->until + (dlock__mono)dlock__reply_floor_ms(&g->c->be.node) * DLOCK__MS;
    if (g->give_up > deadline) g->give_up = deadline;
}

/* Step 6 (c->mu held again): the connection back among the idle ones
 * under the mutex just taken (the releasing thread, answered right after
 * us, takes it too), and the answer read: a grant (fw filled in), the
 * BLPOP's timeout (ETIMEDOUT), or a refusal, MOVED, an error, nonsense
 * (EAGAIN: this call's grants are published; a refusal for good, the
 * client's: grant_nolist). */
static int grant_end(struct grant_wait *g, int rc) {
    struct dlock_client *c = g->c;
    dlock__grant_keep(&c->be, &g->pop);
    g->fw->efd = -1;
    if (g->pop.r != NULL) {
        int nolist, got = dlock__grant_read(&g->pop, &g->fw->fence, &g->fw->grant_ms, &g->fw->cache, &nolist);
        if (got == 1) g->fw->granted = 1;
        if (got == 0) rc = ETIMEDOUT;
        if (got < 0) {
            if (nolist) c->be.grant_nolist = 1;
            rc = EAGAIN;
        }
    }
    if (rc == EAGAIN) g->fw->nolist = 1;
    return rc;
}

/* Steps 4 (c->mu not held): awaits the BLPOP's answer (or a poke, a
 * signal, the own deadline), making the ticks due before the own deadline
 * meanwhile (c->mu taken for each), the BLPOP pending all along: a wait
 * that ticks (a thread that holds locks: every 250 ms, to refresh its
 * records and walk the wait-for graph) sends it once, not again after
 * each tick.  A tick's error ends the wait
 * (its BLPOP is dropped pending). */
static int grant_await_ticking(struct grant_wait *g, dlock__tick *tick) {
    const sigset_t *mask = g->intr ? &g->mask : NULL;
    for (;;) {
        dlock__mono due = tick != NULL ? tick->due : DLOCK__MONO_NEVER;
        dlock__mono stop = due < g->give_up ? due : g->give_up;
        int rc = dlock__grant_await(&g->pop, g->fd, stop, mask);
        if (rc != ETIMEDOUT || stop == g->give_up) return rc;
        pthread_mutex_lock(&g->c->mu);
        rc = tick->fn(tick->arg, &tick->due);
        pthread_mutex_unlock(&g->c->mu);
        if (rc != 0) return rc;
    }
}

/* Waits for fw's grant in its list, <lock key>:g:<token>, where the
 * release pushes it: BLPOP with the wait's timeout on a connection of
 * the lock's node, the thread in ppoll on that socket and on its own
 * eventfd, which a poke writes (the subscriber heard something that
 * wakes every waiter: a plain release, a lost subscription).  The server
 * answers the blocked waiter in the same turn as the release, before
 * the releaser: no subscriber thread between them.  A wait cut short
 * (a poke, a signal, its own deadline) closes its connection, whose
 * BLPOP is still pending; a grant popped meanwhile is not lost: the lock
 * is the token's, and its next acquire finds it so.  The steps: begin,
 * own deadline, send, await, drop or keep the connection, end.  c->mu
 * held. */
int dlock__wait_grant(struct dlock_client *c, dlock__lock *l, dlock__fairwait *fw, dlock__mono until,
                      dlock__mono deadline, int intr, dlock__tick *tick) {
    struct grant_wait g;
    int rc;

    if (fw->poked) return 0;
    memset(&g, 0, sizeof g);
    g.c = c;
    g.l = l;
    g.fw = fw;
    g.until = until;
    g.intr = intr;
    g.now = dlock__now();
    if (until <= g.now) return ETIMEDOUT;
    if ((rc = grant_begin(&g)) != 0) return rc;
    pthread_mutex_unlock(&c->mu);
    if (intr) sleep_mask(&g.mask);
    grant_deadline(&g, deadline);
    /* steps 3-5 (c->mu not held): send the BLPOP, await its answer (or a
     * poke, a signal, the own deadline; the ticks due meanwhile made),
     * drop or keep the connection */
    rc = dlock__grant_send(&c->be, &l->k, fw->token, g.now, until, &g.pop);
    if (rc == 0) rc = grant_await_ticking(&g, tick);
    dlock__grant_drop(&c->be, &g.pop);
    pthread_mutex_lock(&c->mu);
    return grant_end(&g, rc);
}

int dlock__fair_listing(struct dlock_client *c, dlock__fairwait *fw, int queued) {
    int can = queued && c->be.ops->grant_conn != NULL && !c->be.grant_nolist && !fw->nolist;
    if (!can && fw->listing) {
        fw->listing = 0;
        c->listing--;
    } else if (can && !fw->listing && c->listing < c->be.node.conf.wait_conns) {
        fw->listing = 1;
        c->listing++;
    }
    return can && fw->listing;
}

void dlock__fair_leave(struct dlock_client *c, dlock__lock *l, dlock__fairwait *fw) {
    dlock__fairwait **fp;
    for (fp = &l->fair; *fp != NULL && *fp != fw; fp = &(*fp)->next)
        ;
    if (*fp != NULL) *fp = fw->next;
    if (fw->listing) c->listing--;
    fw->listing = 0;
    if (fw->cv_ok) pthread_cond_destroy(&fw->cv);
    fw->cv_ok = 0;
}

/* A poked waiter wakes: on its own condition variable, or, sleeping
 * interruptibly (or without one), as any sleeper of l. */
static void poke_one(dlock__lock *l, dlock__fairwait *fw) {
    uint64_t one = 1;
    fw->poked = 1;
    if (fw->efd >= 0) (void)!write(fw->efd, &one, sizeof one);
    if (fw->cv_ok) pthread_cond_signal(&fw->cv);
    else pthread_cond_broadcast(&l->cv);
    wake_fds(l);
}

/* Pokes the fair waiters of l: the one whose token is `token`, or, NULL,
 * every one.  c->mu held. */
void dlock__fair_poke(dlock__lock *l, const char *token, size_t len) {
    dlock__fairwait *fw;
    for (fw = l->fair; fw != NULL; fw = fw->next) {
        if (token != NULL && (strlen(fw->token) != len || memcmp(fw->token, token, len) != 0)) continue;
        poke_one(l, fw);
    }
}

void dlock__fair_grant(dlock__lock *l, const char *token, uint64_t fence, unsigned grant_ms, int cache) {
    dlock__fairwait *fw;
    for (fw = l->fair; fw != NULL; fw = fw->next) {
        if (strcmp(fw->token, token) != 0) continue;
        fw->granted = 1;
        fw->fence = fence;
        fw->grant_ms = grant_ms;
        fw->cache = cache;
        poke_one(l, fw);
    }
}

void dlock__wait_done(struct dlock_client *c, dlock__lock *l) {
    if (l->waiters > 0 && --l->waiters == 0) {
        l->sub_idle_since = dlock__now();
        dlock__notify_idle(c, l); /* the subscriber starts the linger clock */
    }
}
