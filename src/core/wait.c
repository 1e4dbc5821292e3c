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
 * (ppoll on the socket and the eventfd), drop or keep the connection, end
 * (read the answer).
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
    uint64_t v;
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
    while (read(fd, &v, sizeof v) == (ssize_t)sizeof v) /* stale wake-ups */
        ;
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

int dlock__wait_ready(struct dlock_client *c, dlock__lock *l, dlock__mono deadline, int intr) {
    dlock__mono bound = dlock__unreachable_deadline(&c->node);
    int rc;

    for (;;) {
        if (dlock__sub_live(c, l)) return 0;
        if ((rc = dlock__notify_want(c, l)) != 0) return rc;
        rc = dlock__sleep(c, l, deadline < bound ? deadline : bound, intr);
        if (rc == EINTR) return EINTR;
        if (rc == ETIMEDOUT) {
            if (dlock__sub_live(c, l)) return 0;
            if (deadline <= bound && dlock__now() >= deadline) return ETIMEDOUT;
            if (dlock__now() >= bound)
                return dlock__seterr(ENOLCK, "%s: cannot subscribe to release notifications",
                                     c->node.conf.redacted_url);
        }
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

/* An answer to BLPOP: nil (its timeout), or {list, "FENCE:MS"}.  1 if
 * r is a grant (fw filled in), 0 if nil, -1 if anything else. */
static int grant_parse(const redisReply *r, dlock__fairwait *fw) {
    if (r->type == REDIS_REPLY_NIL) return 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_STRING ||
        dlock__grant_parse(r->element[1]->str, r->element[1]->len, &fw->fence, &fw->grant_ms) != 0)
        return -1;
    fw->granted = 1;
    return 1;
}

/* Is r the server saying it will not run BLPOP at all (an ACL, a proxy
 * that knows no such command), so that no later call should try? */
static int refused_for_good(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "NOPERM", 6) == 0 || strstr(r->str, "unknown command") != NULL ||
            strstr(r->str, "can't run this command") != NULL);
}

/* One grant wait, carried through its steps (dlock__wait_grant). */
struct grant_wait {
    struct dlock_client *c;    /* the caller's client: its mutex, pool, fair list */
    dlock__lock *l;
    dlock__fairwait *fw;
    struct dlock_client *node; /* whose pool the connection came from (a cluster node's) */
    dlock__conn *cn;           /* the connection of the BLPOP, NULL once given back */
    redisReply *r;             /* the server's answer, if one came */
    char *key;                 /* the grant list, <lock key>:g:<token> */
    dlock__mono now;           /* when the wait began */
    dlock__mono until;         /* the server ends the BLPOP then */
    dlock__mono give_up;       /* and this thread stops waiting for its answer then */
    sigset_t mask;             /* the caller's signal mask (an interruptible wait) */
    int fd;                    /* the thread's eventfd, which a poke writes */
    int intr;
};

/* Step 1 (c->mu held): the grant list's name, and the thread's eventfd,
 * emptied of stale wake-ups and shown to pokers (fw->efd).  0, or EAGAIN
 * (this call's grants are then published: fw->nolist). */
static int grant_begin(struct grant_wait *g) {
    uint64_t v;
    if ((g->fd = thread_efd()) < 0 || (g->key = malloc(g->l->k.keylen + 4 + DLOCK__OWNER_LEN + 1)) == NULL) {
        g->fw->nolist = 1;
        return EAGAIN;
    }
    sprintf(g->key, "%s:g:%s", g->l->k.key, g->fw->token);
    while (read(g->fd, &v, sizeof v) == (ssize_t)sizeof v) /* stale wake-ups */
        ;
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
    g->give_up = g->until + (dlock__mono)dlock__reply_floor_ms(&g->c->node) * DLOCK__MS;
    if (g->give_up > deadline) g->give_up = deadline;
}

/* Step 3 (c->mu not held): take a connection of the lock's node
 * (ops->grant_conn) and send BLPOP with the wait's timeout, rounded up
 * to the next millisecond.  0, or EAGAIN. */
static int grant_send(struct grant_wait *g) {
    const char *argv[3];
    size_t lens[3];
    char secs[32];
    snprintf(secs, sizeof secs, "%.3f", (double)((g->until - g->now) / DLOCK__MS + 1) / 1000.0);
    argv[0] = "BLPOP";
    argv[1] = g->key;
    argv[2] = secs;
    lens[0] = 5;
    lens[1] = strlen(g->key);
    lens[2] = strlen(secs);
    if (g->c->ops->grant_conn(g->c, &g->l->k, &g->node, &g->cn, g->until) != 0) return EAGAIN;
    if (redisAppendCommandArgv(g->cn->ctx, 3, argv, lens) != REDIS_OK || dlock__conn_flush(g->cn) != 0)
        return EAGAIN;
    return 0;
}

/* One ppoll on the connection's socket and the thread's eventfd, until
 * the wait's own deadline; what came on the socket is read.  -1 to wait
 * on (bytes read, nothing yet, a signal the call does not give back);
 * otherwise the wait's result: 0 when poked (the caller looks at why),
 * ETIMEDOUT, EINTR (an interruptible wait), EAGAIN. */
static int grant_poll(struct grant_wait *g) {
    struct pollfd pfd[2];
    struct timespec ts;
    dlock__mono now = dlock__now();
    int n;
    if (now >= g->give_up) return ETIMEDOUT;
    dlock__mono_to_ts(g->give_up - now, &ts);
    pfd[0].fd = g->cn->ctx->fd;
    pfd[0].events = POLLIN;
    pfd[1].fd = g->fd;
    pfd[1].events = POLLIN;
    n = ppoll(pfd, 2, &ts, g->intr ? &g->mask : NULL);
    if (n < 0 && errno == EINTR) return g->intr ? EINTR : -1;
    if (n < 0) return EAGAIN;
    if (n > 0 && pfd[1].revents) return 0;
    if (n > 0 && pfd[0].revents && dlock__conn_read(g->cn) != REDIS_OK) return EAGAIN;
    return -1;
}

/* Step 4 (c->mu not held): wait for the answer (g->r, 0), a poke (0,
 * g->r NULL), the own deadline (ETIMEDOUT), a signal (EINTR), or a
 * broken connection (EAGAIN). */
static int grant_await(struct grant_wait *g) {
    for (;;) {
        void *reply = NULL;
        int rc;
        if (redisGetReplyFromReader(g->cn->ctx, &reply) != REDIS_OK) return EAGAIN;
        if (reply != NULL) {
            g->r = reply;
            return 0;
        }
        if (dlock__conn_pending(g->cn)) { /* TLS: bytes already read from the socket */
            if (dlock__conn_read(g->cn) != REDIS_OK) return EAGAIN;
            continue;
        }
        if ((rc = grant_poll(g)) >= 0) return rc;
    }
}

/* Step 5 (c->mu not held): give up and close a connection without its
 * whole answer (its BLPOP may still be pending), or give a cluster
 * node's back to that node's pool, under its own mutex.  A connection of
 * the client's own pool is left in g->cn for grant_end. */
static void grant_drop_conn(struct grant_wait *g) {
    if (g->cn == NULL) return;
    if (g->r == NULL || g->cn->ctx->reader->pos < g->cn->ctx->reader->len) {
        dlock__conn_close(g->cn);
        g->cn = NULL;
    } else if (g->node != g->c) {
        dlock__pool_put(&g->node->node, g->cn, 0);
        g->cn = NULL;
    }
}

/* Step 6 (c->mu held again): the connection back among the idle ones
 * under the mutex just taken (the releasing thread, answered right after
 * us, takes it too), and the answer read: a grant (fw filled in), the
 * BLPOP's timeout (ETIMEDOUT), or a refusal, MOVED, an error, nonsense
 * (EAGAIN: this call's grants are published; a refusal for good, the
 * client's: c->grant_nolist). */
static int grant_end(struct grant_wait *g, int rc) {
    struct dlock_client *c = g->c;
    if (g->cn != NULL && !dlock__pool_keep(&c->node, g->cn)) dlock__conn_close(g->cn);
    g->fw->efd = -1;
    if (g->r != NULL) {
        int got = grant_parse(g->r, g->fw);
        if (got == 0) rc = ETIMEDOUT;
        if (got < 0) {
            if (refused_for_good(g->r)) c->grant_nolist = 1;
            rc = EAGAIN;
        }
        freeReplyObject(g->r);
    }
    if (rc == EAGAIN) g->fw->nolist = 1;
    return rc;
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
                      dlock__mono deadline, int intr) {
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
    rc = grant_send(&g);
    if (rc == 0) rc = grant_await(&g);
    grant_drop_conn(&g);
    free(g.key);
    pthread_mutex_lock(&c->mu);
    return grant_end(&g, rc);
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

void dlock__fair_grant(dlock__lock *l, const char *token, uint64_t fence, unsigned grant_ms) {
    dlock__fairwait *fw;
    for (fw = l->fair; fw != NULL; fw = fw->next) {
        if (strcmp(fw->token, token) != 0) continue;
        fw->granted = 1;
        fw->fence = fence;
        fw->grant_ms = grant_ms;
        poke_one(l, fw);
    }
}

void dlock__wait_done(struct dlock_client *c, dlock__lock *l) {
    if (l->waiters > 0 && --l->waiters == 0) {
        l->sub_idle_since = dlock__now();
        dlock__notify_poke(c); /* the subscriber starts the linger clock */
    }
}
