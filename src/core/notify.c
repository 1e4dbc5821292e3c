/* notify.c -- the subscriber thread: release notifications for waiters.
 *
 * Each lock has a release channel (its key's name); the release script
 * publishes on it.  A process has one subscriber connection per client,
 * owned by this thread, which subscribes to the channel of every lock some
 * local thread waits for, and turns each message into a bump of the lock's
 * generation and a broadcast of its condition variable.  A channel stays
 * subscribed for a short linger after its last waiter leaves, so a lock
 * that is contended again and again does not pay a SUBSCRIBE each time.
 *
 * Waiters never talk to this connection; they ask by setting the lock's
 * sub_state and poking an eventfd.  When the connection breaks, every
 * waiter is woken (a release may have been missed) and subscriptions are
 * made again after the reconnect.
 *
 * The thread's loop runs in named phases over one struct sub_loop, as
 * libuv's uv_run does: connect (if need be), sweep (queue SUBSCRIBE and
 * UNSUBSCRIBE), I/O (write, poll, read), dispatch (each reply), pace
 * (refusals of a moving slot), down (the connection failed).
 *
 * On Redis Cluster the scripts publish with SPUBLISH (sharded pub/sub),
 * heard only on the master of the channel's slot: each node's member
 * client has its own subscriber thread and connection (the fields sub_*
 * of the member), serving the locks of the parent's table whose channel
 * it carries (l->sub_node), under the parent's mutex.  When a slot moves,
 * its old master ends those subscriptions (an unasked "sunsubscribe") or
 * refuses a new one (MOVED): the lock is subscribed again on the slot's
 * master, and its waiters are woken, since a release may have been
 * missed meanwhile.  Elsewhere l->sub_node is the client itself.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/core.h"

#define LINGER_MS 2000
#define SUB_CMD(s, plain) ((s)->conf.cluster ? "S" plain : plain)
#define SENTINEL_RECHECK_MS 1000
/* A refused subscription's pace (sub_pace): steps of 10 ms up to 100 ms,
 * shorter than the library's back-off (DLOCK__BACKOFF_MAX_MS): the server
 * answers (no outage to spare), and a slot changing hands settles within
 * milliseconds, after which the subscription should hold again at once. */
#define REFUSED_PACE_MIN_MS 10u
#define REFUSED_PACE_MAX_MS 100u


/* Subscriber epochs are unique in the process, across clients and
 * nodes: a hold that was cacheable under one connection is never taken
 * for one heard on another. */
static uint64_t epochs;

static uint64_t epoch_next(void) {
    return __atomic_add_fetch(&epochs, 1, __ATOMIC_SEQ_CST);
}

/* The client whose table, mutex and locks a subscriber serves. */
static struct dlock_client *table_of(struct dlock_client *s) {
    return s->parent != NULL ? s->parent : s;
}

/* The client whose subscriber carries l's channel now. */
static const struct dlock_client *node_of(const struct dlock_client *c, const dlock__lock *l) {
    return l->sub_node != NULL ? l->sub_node : c;
}

int dlock__sub_live(const struct dlock_client *c, const dlock__lock *l) {
    return l->sub_state == DLOCK__SUB_ACTIVE && node_of(c, l)->sub_connected;
}

uint64_t dlock__sub_epoch(const struct dlock_client *c, const dlock__lock *l) {
    return node_of(c, l)->sub_epoch;
}

/* Calls fn on every lock of the table.  c->mu held. */
static void each_lock(struct dlock_client *c, void (*fn)(struct dlock_client *, dlock__lock *, void *), void *arg) {
    size_t i;
    for (i = 0; i < c->nbuckets; i++) {
        dlock__lock *l = c->buckets[i], *next;
        for (; l != NULL; l = next) {
            next = l->hnext;
            fn(c, l, arg);
        }
    }
}

/* Does l need its channel: waiters, or a caching hold, which must hear
 * when another owner asks for the lock. */
static int wants_channel(const dlock__lock *l) {
    return l->waiters > 0 || l->x.caching;
}

/* Wakes every waiter of l: a release came, or may have been missed. */
static void wake_all(dlock__lock *l) {
    l->gen++;
    dlock__lock_wake(l);
    dlock__fair_poke(l, NULL, 0);
}

/* The connection (arg) is gone: forget its subscriptions, ask again for
 * those with waiters, and wake every waiter, since a release may have
 * been missed. */
static void resubscribe(struct dlock_client *c, dlock__lock *l);

static void on_down(struct dlock_client *c, dlock__lock *l, void *arg) {
    if (l->sub_node != arg || l->sub_state == DLOCK__SUB_NONE) return;
    if (((struct dlock_client *)arg)->conf.cluster) {
        resubscribe(c, l); /* on the slot's master as the map has it now */
        return;
    }
    l->sub_state = wants_channel(l) ? DLOCK__SUB_WANTED : DLOCK__SUB_NONE;
    if (l->x.cached) dlock__renew_kick(c); /* it must go back: requests for it are not heard */
    if (l->waiters > 0) wake_all(l);
    dlock__lock_maybe_free(c, l);
}

/* Appends SUBSCRIBE / UNSUBSCRIBE for locks whose state asks for it. */
struct sweep {
    struct dlock_client *node; /* the subscriber's client */
    redisContext *ctx;
    dlock__mono now;
    dlock__mono next; /* earliest linger expiry */
    int err;
};

static void sweep_one(struct dlock_client *c, dlock__lock *l, void *arg) {
    struct sweep *s = arg;
    (void)c;
    if (s->err || l->sub_node != s->node) return;
    if (l->sub_state == DLOCK__SUB_WANTED) {
        const char *argv[2] = { SUB_CMD(s->node, "SUBSCRIBE"), l->key };
        size_t lens[2] = { strlen(argv[0]), l->keylen };
        if (redisAppendCommandArgv(s->ctx, 2, argv, lens) != REDIS_OK) s->err = 1;
        else l->sub_state = DLOCK__SUB_SENT;
    } else if (l->sub_state == DLOCK__SUB_ACTIVE && !wants_channel(l)) {
        dlock__mono until;
        if (l->sub_idle_since == 0) l->sub_idle_since = s->now;
        until = l->sub_idle_since + (dlock__mono)LINGER_MS * DLOCK__MS;
        if (until <= s->now) {
            const char *argv[2] = { SUB_CMD(s->node, "UNSUBSCRIBE"), l->key };
            size_t lens[2] = { strlen(argv[0]), l->keylen };
            if (redisAppendCommandArgv(s->ctx, 2, argv, lens) != REDIS_OK) s->err = 1;
            else l->sub_state = DLOCK__SUB_UNSENT;
        } else if (until < s->next) {
            s->next = until;
        }
    }
}

/* The table entry whose channel is `ch`, if the table has it: a lock's
 * <prefix>{<name>} or a condition variable's <prefix>{<name>}:cond. */
static dlock__lock *by_channel(struct dlock_client *c, const char *ch, size_t n) {
    static const char cond[] = "}:cond";
    size_t plen = strlen(c->conf.prefix), cl = sizeof cond - 1;
    if (n < plen + 2 || memcmp(ch, c->conf.prefix, plen) != 0 || ch[plen] != '{') return NULL;
    if (n > plen + 1 + cl && memcmp(ch + n - cl, cond, cl) == 0) {
        dlock__lock *l = dlock__lock_find(c, ch + plen + 1, n - plen - 1 - cl, DLOCK__KIND_COND);
        if (l != NULL) return l;
    }
    if (ch[n - 1] != '}') return NULL;
    return dlock__lock_find(c, ch + plen + 1, n - plen - 2, DLOCK__KIND_LOCK);
}

static int want(struct dlock_client *c, dlock__lock *l);

/* l's subscription on its node ended unasked, or was refused: the slot
 * moved.  Subscribe again where it is now, and wake the waiters (a
 * release may have gone by).  c->mu held. */
static void resubscribe(struct dlock_client *c, dlock__lock *l) {
    l->sub_state = DLOCK__SUB_NONE;
    l->sub_node = NULL;
    if (wants_channel(l)) (void)want(c, l);
    if (l->x.cached) dlock__renew_kick(c);
    wake_all(l);
    dlock__lock_maybe_free(c, l);
}

static void on_message(struct dlock_client *c, struct dlock_client *node, redisReply *r) {
    dlock__lock *l;
    const char *kind;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    kind = r->element[0]->str;
    if (node->conf.cluster && kind[0] == 's') kind++; /* smessage, ssubscribe, sunsubscribe */
    l = by_channel(c, r->element[1]->str, r->element[1]->len);
    if (l == NULL || l->sub_node != node) return;
    if (strcmp(kind, "message") == 0) {
        const redisReply *p = r->element[2];
        if (p->type == REDIS_REPLY_STRING && p->len == 6 && memcmp(p->str, "wanted", 6) == 0) {
            /* Another owner asks for the lock this process caches: it
             * goes back at the next unlock, or now if idle. */
            l->wanted = 1;
            if (l->x.cached) dlock__renew_kick(c);
            return;
        }
        if (p->type == REDIS_REPLY_STRING && p->len >= DLOCK__OWNER_LEN &&
            (p->len == DLOCK__OWNER_LEN || p->str[DLOCK__OWNER_LEN] == ':')) {
            /* A fair release handed the lock to this token: only its
             * waiter (if it is one of ours) has anything to do.
             * "TOKEN:FENCE:MS": the grant, its fence and lease. */
            char tok[DLOCK__OWNER_LEN + 1];
            uint64_t fence;
            unsigned ms;
            memcpy(tok, p->str, DLOCK__OWNER_LEN);
            tok[DLOCK__OWNER_LEN] = '\0';
            if (p->len > DLOCK__OWNER_LEN &&
                dlock__grant_parse(p->str + DLOCK__OWNER_LEN + 1, p->len - DLOCK__OWNER_LEN - 1, &fence, &ms) == 0) {
                dlock__fair_grant(l, tok, fence, ms);
                return;
            }
            dlock__fair_poke(l, tok, DLOCK__OWNER_LEN);
            return;
        }
        wake_all(l);
    } else if (strcmp(kind, "subscribe") == 0) {
        if (l->sub_state == DLOCK__SUB_SENT) {
            l->sub_state = DLOCK__SUB_ACTIVE;
            l->sub_idle_since = 0;
            dlock__lock_wake(l);
        }
    } else if (strcmp(kind, "unsubscribe") == 0) {
        if (l->sub_state == DLOCK__SUB_UNSENT) {
            l->sub_state = wants_channel(l) ? DLOCK__SUB_WANTED : DLOCK__SUB_NONE;
            dlock__lock_maybe_free(c, l);
        } else if (node->conf.cluster && l->sub_state == DLOCK__SUB_ACTIVE) {
            resubscribe(c, l); /* the node lost the slot */
        }
    }
}

/* A cluster node refused a subscription: MOVED (the slot is elsewhere;
 * the map now says where).  The locks of that slot waiting for an answer
 * from this node subscribe again; 1 if r was that, 0 if anything else. */
struct refused {
    struct dlock_client *node;
    unsigned slot;
};

static void refused_one(struct dlock_client *c, dlock__lock *l, void *arg) {
    struct refused *rf = arg;
    if (l->sub_node == rf->node && l->sub_state == DLOCK__SUB_SENT && dlock__key_slot(l->key, l->keylen) == rf->slot)
        resubscribe(c, l);
}

static int on_refused(struct dlock_client *c, struct dlock_client *node, const redisReply *r) {
    struct dlock_client *next;
    struct refused rf;
    int asking;
    if (!node->conf.cluster || strncmp(r->str, "MOVED ", 6) != 0) return 0;
    pthread_mutex_unlock(&c->mu); /* the map and the members take c->mu */
    if (dlock__cluster_redirect(node, r, &next, &asking) != 1) {
        pthread_mutex_lock(&c->mu);
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    rf.node = node;
    rf.slot = (unsigned)strtoul(r->str + 6, NULL, 10);
    each_lock(c, refused_one, &rf);
    return 1;
}

static void drain_wakefd(int fd) {
    uint64_t v;
    while (read(fd, &v, sizeof v) == (ssize_t)sizeof v)
        ;
}

/* l's channel is to be carried by `arg`, whose node cannot be reached,
 * but the map now puts l's slot on another: subscribe there.  c->mu held. */
static void moved_away(struct dlock_client *c, dlock__lock *l, void *arg) {
    if (l->sub_node != arg || l->sub_state == DLOCK__SUB_NONE) return;
    if (dlock__cluster_node(c, dlock__key_slot(l->key, l->keylen)) == arg) return;
    resubscribe(c, l);
}

static int any_wanted(struct dlock_client *c, struct dlock_client *node) {
    size_t i;
    for (i = 0; i < c->nbuckets; i++) {
        dlock__lock *l;
        for (l = c->buckets[i]; l != NULL; l = l->hnext)
            if (l->sub_state == DLOCK__SUB_WANTED && l->sub_node == node) return 1;
    }
    return 0;
}

/* The subscriber thread's state, carried through its phases (as libuv's
 * uv_run carries its loop): the client whose subscriber it is, the table
 * it serves, its reconnection back-off, its run of refusals, and this
 * turn's sweep (its error flag ends the connection). */
struct sub_loop {
    struct dlock_client *node; /* a cluster node's member, or the client itself */
    struct dlock_client *c;    /* table_of(node): its table and mutex */
    dlock__backoff backoff;    /* before the next connection attempt */
    dlock__backoff pace;       /* after a turn with a subscription refused */
    int refused;               /* this turn had one */
    struct sweep s;            /* this turn's sweep; s.err: the connection goes */
};

/* Sleeps on node's eventfd until poked, or for timeout_ms (-1: no
 * bound); a poke is drained, or the eventfd stays readable.  c->mu not
 * held. */
static void sleep_poked(struct dlock_client *node, int timeout_ms) {
    struct pollfd pfd;
    pfd.fd = node->sub_wakefd;
    pfd.events = POLLIN;
    if (poll(&pfd, 1, timeout_ms) > 0 || timeout_ms < 0) drain_wakefd(node->sub_wakefd);
}

/* A connection attempt failed: wait a back-off (the library's; a poke
 * cuts it short).  A cluster node that cannot be reached
 * may have been replaced by its replica: read the map again, and move
 * the channels whose slot it no longer serves to their new master. */
static void sub_conn_failed(struct sub_loop *lp) {
    struct dlock_client *node = lp->node, *c = lp->c;
    if (node->sub_down_since == 0) node->sub_down_since = dlock__now();
    pthread_mutex_unlock(&c->mu);
    if (node->parent != NULL)
        dlock__cluster_refresh_maybe(c, dlock__now() + (dlock__mono)c->conf.command_timeout_ms * DLOCK__MS);
    sleep_poked(node, (int)dlock__backoff_next(&lp->backoff));
    pthread_mutex_lock(&c->mu);
    if (node->parent != NULL) each_lock(c, moved_away, node); /* to the new master */
}

/* Phase 1, connect: without a connection, sleep until some channel is
 * wanted, then open one (a new epoch).  1 when connected; 0 when the
 * turn ends here (nothing wanted, or the attempt failed).  c->mu held. */
static int sub_connect(struct sub_loop *lp) {
    struct dlock_client *node = lp->node, *c = lp->c;
    dlock__conn *cn = NULL;
    int rc;
    if (!any_wanted(c, node)) {
        pthread_mutex_unlock(&c->mu);
        sleep_poked(node, -1);
        pthread_mutex_lock(&c->mu);
        return 0;
    }
    pthread_mutex_unlock(&c->mu);
    rc = dlock__conn_open(node, &cn, c->conf.connect_timeout_ms);
    pthread_mutex_lock(&c->mu);
    if (rc != 0) {
        sub_conn_failed(lp);
        return 0;
    }
    dlock__backoff_reset(&lp->backoff);
    node->sub_conn = cn;
    node->sub_connected = 1;
    node->sub_down_since = 0;
    node->sub_epoch = epoch_next();
    return 1;
}

/* Phase 2, sweep: queue the SUBSCRIBE / UNSUBSCRIBE the table's locks
 * ask for (written in phase 3), and note the earliest linger expiry. */
static void sub_sweep(struct sub_loop *lp) {
    lp->s.node = lp->node;
    lp->s.ctx = lp->node->sub_conn->ctx;
    lp->s.now = dlock__now();
    lp->s.next = DLOCK__MONO_NEVER;
    lp->s.err = 0;
    each_lock(lp->c, sweep_one, &lp->s);
}

/* How long phase 3 may poll: until the earliest linger expiry, and on
 * Sentinel at most SENTINEL_RECHECK_MS; -1: until something comes. */
static int sub_timeout_ms(const struct sub_loop *lp) {
    int timeout_ms = -1;
    if (lp->s.next != DLOCK__MONO_NEVER) timeout_ms = (int)((lp->s.next - lp->s.now) / DLOCK__MS) + 1;
    if (lp->c->conf.kind == DLOCK__BACKEND_SENTINEL && (timeout_ms < 0 || timeout_ms > SENTINEL_RECHECK_MS))
        timeout_ms = SENTINEL_RECHECK_MS;
    return timeout_ms;
}

/* Phase 3, I/O (c->mu dropped): write what the sweep queued, then wait
 * for answers or a poke and read what came.  Sentinel: a failover leaves
 * this connection on the old master, which publishes nothing the new one
 * does until it is demoted: once a second, ask the sentinels; if they
 * name another server, start over there (every waiter is woken: it may
 * have missed a release). */
static void sub_io(struct sub_loop *lp) {
    struct dlock_client *node = lp->node;
    struct pollfd pfd[2];
    pthread_mutex_unlock(&lp->c->mu);
    if (!lp->s.err && !dlock__conn_current(node, node->sub_conn, (dlock__mono)SENTINEL_RECHECK_MS * DLOCK__MS))
        lp->s.err = 1;
    if (!lp->s.err && dlock__conn_flush(node->sub_conn) != 0) lp->s.err = 1;
    if (!lp->s.err) {
        pfd[0].fd = lp->s.ctx->fd;
        pfd[0].events = POLLIN;
        pfd[1].fd = node->sub_wakefd;
        pfd[1].events = POLLIN;
        if (dlock__conn_pending(node->sub_conn)) {
            /* TLS already holds bytes the socket will not signal again. */
            if (dlock__conn_read(node->sub_conn) != REDIS_OK) lp->s.err = 1;
        } else if (poll(pfd, 2, sub_timeout_ms(lp)) > 0) {
            if (pfd[1].revents) drain_wakefd(node->sub_wakefd);
            if (pfd[0].revents && dlock__conn_read(node->sub_conn) != REDIS_OK) lp->s.err = 1;
        }
    }
    pthread_mutex_lock(&lp->c->mu);
}

/* Phase 4, dispatch: every complete reply read, in order, to on_message.
 * A refused SUBSCRIBE (a loading server, an ACL): the subscriptions
 * cannot be trusted; start over.  On a cluster, a slot that moved is no
 * such thing (lp->refused).  c->mu held. */
static void sub_dispatch(struct sub_loop *lp) {
    lp->refused = 0;
    while (!lp->s.err) {
        void *reply = NULL;
        if (redisGetReplyFromReader(lp->s.ctx, &reply) != REDIS_OK) {
            lp->s.err = 1;
            break;
        }
        if (reply == NULL) break;
        if (((redisReply *)reply)->type == REDIS_REPLY_ERROR) {
            if (on_refused(lp->c, lp->node, reply)) lp->refused = 1;
            else lp->s.err = 1;
            freeReplyObject(reply);
            continue;
        }
        on_message(lp->c, lp->node, reply);
        freeReplyObject(reply);
    }
}

/* Phase 5, pace: refused because the slot moved: while it changes hands
 * the nodes may send a subscription back and forth; back off for each
 * refused turn in a row (REFUSED_PACE_*). */
static void sub_pace(struct sub_loop *lp) {
    if (!lp->refused) {
        dlock__backoff_reset(&lp->pace);
        return;
    }
    pthread_mutex_unlock(&lp->c->mu);
    (void)dlock__backoff_sleep(&lp->pace, DLOCK__MONO_NEVER);
    pthread_mutex_lock(&lp->c->mu);
}

/* Phase 6, down: the connection failed or cannot be trusted: close it
 * (a new epoch) and tell every lock it carried (on_down).  c->mu held. */
static void sub_down(struct sub_loop *lp) {
    struct dlock_client *node = lp->node;
    dlock__conn_close(node->sub_conn);
    node->sub_conn = NULL;
    node->sub_connected = 0;
    node->sub_down_since = dlock__now();
    node->sub_epoch = epoch_next();
    each_lock(lp->c, on_down, node);
}

/* The subscriber thread of client `node` (a cluster node's member, or the
 * client itself), serving the locks of c = table_of(node).  Its fields
 * sub_* are node's, guarded by c->mu.  Each turn runs the phases in
 * order: connect (if need be), sweep, I/O, dispatch, pace, down (if the
 * connection failed); the loop ends when asked to stop. */
static void *sub_main(void *arg) {
    struct sub_loop lp;
    memset(&lp, 0, sizeof lp);
    lp.node = arg;
    lp.c = table_of(lp.node);
    dlock__backoff_init(&lp.backoff, DLOCK__BACKOFF_MIN_MS, DLOCK__BACKOFF_MAX_MS);
    dlock__backoff_init(&lp.pace, REFUSED_PACE_MIN_MS, REFUSED_PACE_MAX_MS);

    pthread_mutex_lock(&lp.c->mu);
    while (!lp.node->sub_stop) {
        if (lp.node->sub_conn == NULL && !sub_connect(&lp)) continue;
        sub_sweep(&lp);
        sub_io(&lp);
        sub_dispatch(&lp);
        sub_pace(&lp);
        if (lp.s.err) sub_down(&lp);
    }
    if (lp.node->sub_conn != NULL) {
        dlock__conn_close(lp.node->sub_conn);
        lp.node->sub_conn = NULL;
    }
    lp.node->sub_connected = 0;
    lp.node->sub_running = 0;
    pthread_mutex_unlock(&lp.c->mu);
    return NULL;
}

static void poke(struct dlock_client *node) {
    uint64_t one = 1;
    if (node->sub_wakefd >= 0) (void)!write(node->sub_wakefd, &one, sizeof one);
}

void dlock__notify_poke(struct dlock_client *c) {
    size_t i;
    poke(c);
    if (c->cl != NULL)
        for (i = 0; i < c->nmembers; i++) poke(c->members[i]);
}

/* Which client's subscriber is to carry l's channel: on a cluster, the
 * member of the slot's master as the map has it (the first member while
 * the map does not know: its refusal will name the right one).  c->mu
 * held. */
static struct dlock_client *node_for(struct dlock_client *c, const dlock__lock *l) {
    struct dlock_client *m;
    if (c->conf.kind != DLOCK__BACKEND_CLUSTER) return c;
    m = dlock__cluster_node(c, dlock__key_slot(l->key, l->keylen));
    return m != NULL ? m : c;
}

/* Asks node's subscriber for l's channel (starting it if need be). */
static int want(struct dlock_client *c, dlock__lock *l) {
    struct dlock_client *node;
    if (l->sub_state == DLOCK__SUB_NONE || l->sub_node == NULL) l->sub_node = node_for(c, l);
    node = l->sub_node;
    if (node->sub_wakefd < 0) {
        node->sub_wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (node->sub_wakefd < 0) return dlock__seterr(EAGAIN, "cannot create an eventfd");
    }
    if (!node->sub_running) {
        node->sub_stop = 0;
        if (dlock__thread_start(&node->sub_thread, sub_main, node) != 0)
            return dlock__seterr(EAGAIN, "cannot start the subscriber thread");
        node->sub_running = 1;
    }
    l->sub_idle_since = 0;
    if (l->sub_state == DLOCK__SUB_NONE) {
        l->sub_state = DLOCK__SUB_WANTED;
        poke(node);
    }
    return 0;
}

int dlock__notify_want(struct dlock_client *c, dlock__lock *l) {
    return want(c, l);
}

/* Stops node's subscriber thread (c: its table's client). */
static void stop_one(struct dlock_client *c, struct dlock_client *node) {
    int running;
    pthread_mutex_lock(&c->mu);
    running = node->sub_running;
    node->sub_stop = 1;
    poke(node);
    pthread_mutex_unlock(&c->mu);
    if (running) pthread_join(node->sub_thread, NULL);
    if (node->sub_wakefd >= 0) close(node->sub_wakefd);
    node->sub_wakefd = -1;
}

void dlock__notify_stop(struct dlock_client *c) {
    size_t i, n;
    /* A cluster's nodes first: their threads use this client's table. */
    pthread_mutex_lock(&c->mu);
    n = c->cl != NULL ? c->nmembers : 0;
    pthread_mutex_unlock(&c->mu);
    for (i = 0; i < n; i++) stop_one(c, c->members[i]);
    stop_one(table_of(c), c);
}
