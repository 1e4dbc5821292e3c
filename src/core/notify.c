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
 * heard only on the master of the channel's slot: each node (a member of
 * the deployment) gets its own subscriber (a dlock__sub, the member's
 * `up`, made when first needed), with its own thread and connection,
 * serving the locks of the client's table whose channel it carries
 * (l->sub_node), under the client's mutex.  When a slot moves,
 * its old master ends those subscriptions (an unasked "sunsubscribe") or
 * refuses a new one (MOVED): the lock is subscribed again on the slot's
 * master, and its waiters are woken, since a release may have been
 * missed meanwhile.  Elsewhere l->sub_node is the client's own (c->sub).
 *
 * The wire -- (S)SUBSCRIBE, waiting for messages or a poke, reading them
 * -- is the backend's (backend/subscribe.c); this file decides what to
 * hear and what a message means.
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
/* A refused subscription's pace (sub_pace): steps of 10 ms up to 100 ms,
 * shorter than the library's back-off (DLOCK__BACKOFF_MAX_MS): the server
 * answers (no outage to spare), and a slot changing hands settles within
 * milliseconds, after which the subscription should hold again at once. */
#define REFUSED_PACE_MIN_MS 10u
#define REFUSED_PACE_MAX_MS 100u
/* Redlock: a SUBSCRIBE not confirmed within this long means that the
 * master the subscriber reached has stopped (paused, hung): the
 * connection is taken as down, and the next one goes to the first master
 * that answers a PING (conn.c) -- the releases and signals every master
 * publishes are heard there.  (One server, Sentinel, Cluster: the
 * channel's server is the only one that publishes it.) */
#define SUB_CONFIRM_MS 500

/* Subscriber epochs are unique in the process, across clients and
 * nodes: a hold that was cacheable under one connection is never taken
 * for one heard on another. */
static uint64_t epochs;

static uint64_t epoch_next(void) {
    return __atomic_add_fetch(&epochs, 1, __ATOMIC_SEQ_CST);
}

/* The subscriber that carries l's channel now. */
static const dlock__sub *sub_of(const struct dlock_client *c, const dlock__lock *l) {
    return l->sub_node != NULL ? l->sub_node : &c->sub;
}

int dlock__sub_live(const struct dlock_client *c, const dlock__lock *l) {
    return l->sub_state == DLOCK__SUB_ACTIVE && sub_of(c, l)->connected;
}

/* A subscriber thread that a loaded host has not run yet, or a slow
 * server's answer, is no failure: the bound counts from the subscriber's
 * own attempts, not from when the waiter began to wait. */
dlock__mono dlock__sub_give_up(const struct dlock_client *c, const dlock__lock *l) {
    const dlock__sub *sub = sub_of(c, l);
    const dlock__conf *conf = &sub->b->node.conf;
    dlock__mono since = l->sub_tried_since, end;
    if (!sub->connected && sub->down_since != 0 && (since == 0 || sub->down_since < since)) since = sub->down_since;
    if (since == 0) return DLOCK__MONO_NEVER;
    end = since + (dlock__mono)conf->unreachable_ms * DLOCK__MS;
    /* The first SUBSCRIBE's answer may still come: one real attempt, as
     * a command's.  Not a later one's: a subscription refused again and
     * again (an ACL) would keep the bound moving. */
    if (sub->connected && l->sub_state == DLOCK__SUB_SENT && l->sub_sent_at == l->sub_tried_since) {
        dlock__mono answer = l->sub_sent_at + (dlock__mono)conf->command_timeout_ms * DLOCK__MS;
        if (answer > end) end = answer;
    }
    return end;
}

uint64_t dlock__sub_epoch(const struct dlock_client *c, const dlock__lock *l) {
    return sub_of(c, l)->epoch;
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
    if (((dlock__sub *)arg)->b->node.conf.cluster) {
        resubscribe(c, l); /* on the slot's master as the map has it now */
        return;
    }
    l->sub_state = wants_channel(l) ? DLOCK__SUB_WANTED : DLOCK__SUB_NONE;
    if (dlock__hold_is_cached(&l->x)) dlock__renew_kick(c); /* it must go back: requests for it are not heard */
    if (l->waiters > 0) wake_all(l);
    dlock__lock_maybe_free(c, l);
}

/* Appends SUBSCRIBE / UNSUBSCRIBE for locks whose state asks for it. */
struct sweep {
    dlock__sub *sub; /* the subscriber */
    dlock__mono now;
    dlock__mono next; /* earliest linger expiry */
    int err;
};

static void sweep_one(struct dlock_client *c, dlock__lock *l, void *arg) {
    struct sweep *s = arg;
    (void)c;
    if (s->err || l->sub_node != s->sub) return;
    if (l->sub_state == DLOCK__SUB_WANTED) {
        if (dlock__sub_append(s->sub->b, s->sub->conn, 1, l->k.key, l->k.keylen) != 0) s->err = 1;
        else {
            l->sub_state = DLOCK__SUB_SENT, l->sub_sent_at = s->now;
            if (l->sub_tried_since == 0) l->sub_tried_since = s->now;
        }
    } else if (l->sub_state == DLOCK__SUB_SENT && s->sub->b->node.conf.kind == DLOCK__BACKEND_REDLOCK) {
        dlock__mono until = l->sub_sent_at + (dlock__mono)SUB_CONFIRM_MS * DLOCK__MS;
        if (until <= s->now) s->err = 1; /* not confirmed: the connection is down */
        else if (until < s->next) s->next = until;
    } else if (l->sub_state == DLOCK__SUB_ACTIVE && !wants_channel(l)) {
        dlock__mono until;
        if (l->sub_idle_since == 0) l->sub_idle_since = s->now;
        until = l->sub_idle_since + (dlock__mono)LINGER_MS * DLOCK__MS;
        if (until <= s->now) {
            /* A wait that comes meanwhile needs this answer first: a try
             * for its bound (dlock__sub_give_up). */
            if (dlock__sub_append(s->sub->b, s->sub->conn, 0, l->k.key, l->k.keylen) != 0) s->err = 1;
            else l->sub_state = DLOCK__SUB_UNSENT, l->sub_tried_since = s->now;
        } else if (until < s->next) {
            s->next = until;
        }
    }
}

/* The table entry whose channel is `ch`, if the table has it: a lock's
 * <prefix>{<name>}, a condition variable's <prefix>{<name>}:cond or a
 * semaphore's <prefix>{<name>}:sem. */
static dlock__lock *by_channel(struct dlock_client *c, const char *ch, size_t n) {
    static const struct { const char *suffix; int kind; } tail[] = {
        { "}:cond", DLOCK__KIND_COND },
        { "}:sem", DLOCK__KIND_SEM },
    };
    size_t plen = strlen(c->be.node.conf.prefix), i;
    if (n < plen + 2 || memcmp(ch, c->be.node.conf.prefix, plen) != 0 || ch[plen] != '{') return NULL;
    for (i = 0; i < sizeof tail / sizeof tail[0]; i++) {
        size_t cl = strlen(tail[i].suffix);
        if (n > plen + 1 + cl && memcmp(ch + n - cl, tail[i].suffix, cl) == 0) {
            dlock__lock *l = dlock__lock_find(c, ch + plen + 1, n - plen - 1 - cl, tail[i].kind);
            if (l != NULL) return l;
        }
    }
    if (ch[n - 1] != '}') return NULL;
    return dlock__lock_find(c, ch + plen + 1, n - plen - 2, DLOCK__KIND_LOCK);
}

static int want(struct dlock_client *c, dlock__lock *l);

/* l's subscription on its sub ended unasked, or was refused: the slot
 * moved.  Subscribe again where it is now, and wake the waiters (a
 * release may have gone by).  c->mu held. */
static void resubscribe(struct dlock_client *c, dlock__lock *l) {
    dlock__mono tried = l->sub_tried_since; /* its waiters' bound runs on */
    l->sub_state = DLOCK__SUB_NONE;
    l->sub_node = NULL;
    if (wants_channel(l)) {
        (void)want(c, l);
        l->sub_tried_since = tried;
    }
    if (dlock__hold_is_cached(&l->x)) dlock__renew_kick(c);
    wake_all(l);
    dlock__lock_maybe_free(c, l);
}

static void on_message(struct dlock_client *c, dlock__sub *sub, redisReply *r) {
    dlock__lock *l;
    const char *kind;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    kind = r->element[0]->str;
    if (sub->b->node.conf.cluster && kind[0] == 's') kind++; /* smessage, ssubscribe, sunsubscribe */
    l = by_channel(c, r->element[1]->str, r->element[1]->len);
    if (l == NULL || l->sub_node != sub) return;
    if (strcmp(kind, "message") == 0) {
        const redisReply *p = r->element[2];
        if (p->type == REDIS_REPLY_STRING && p->len == 6 && memcmp(p->str, "wanted", 6) == 0) {
            /* Another owner asks for the lock this process caches: it
             * goes back at the next unlock, or now if idle. */
            l->wanted = 1;
            if (dlock__hold_is_cached(&l->x)) dlock__renew_kick(c);
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
            int cache;
            memcpy(tok, p->str, DLOCK__OWNER_LEN);
            tok[DLOCK__OWNER_LEN] = '\0';
            if (p->len > DLOCK__OWNER_LEN &&
                dlock__grant_parse(p->str + DLOCK__OWNER_LEN + 1, p->len - DLOCK__OWNER_LEN - 1, &fence, &ms, &cache) == 0) {
                dlock__fair_grant(l, tok, fence, ms, cache);
                return;
            }
            dlock__fair_poke(l, tok, DLOCK__OWNER_LEN);
            return;
        }
        wake_all(l);
    } else if (strcmp(kind, "subscribe") == 0) {
        if (l->sub_state == DLOCK__SUB_SENT) {
            l->sub_state = DLOCK__SUB_ACTIVE;
            l->sub_idle_since = l->sub_tried_since = 0;
            dlock__lock_wake(l);
        }
    } else if (strcmp(kind, "unsubscribe") == 0) {
        if (l->sub_state == DLOCK__SUB_UNSENT) {
            l->sub_state = wants_channel(l) ? DLOCK__SUB_WANTED : DLOCK__SUB_NONE;
            dlock__lock_maybe_free(c, l);
        } else if (sub->b->node.conf.cluster && l->sub_state == DLOCK__SUB_ACTIVE) {
            resubscribe(c, l); /* the sub lost the slot */
        }
    }
}

/* A cluster sub refused a subscription: MOVED (the slot is elsewhere;
 * the map now says where).  The locks of that slot waiting for an answer
 * from this node subscribe again; 1 if r was that, 0 if anything else. */
struct refused {
    dlock__sub *sub;
    unsigned slot;
};

static void refused_one(struct dlock_client *c, dlock__lock *l, void *arg) {
    struct refused *rf = arg;
    if (l->sub_node == rf->sub && l->sub_state == DLOCK__SUB_SENT && dlock__key_slot(l->k.key, l->k.keylen) == rf->slot)
        resubscribe(c, l);
}

static int on_refused(struct dlock_client *c, dlock__sub *sub, const redisReply *r) {
    dlock__backend *next;
    struct refused rf;
    int asking;
    if (!sub->b->node.conf.cluster || strncmp(r->str, "MOVED ", 6) != 0) return 0;
    pthread_mutex_unlock(&c->mu); /* the map and the members take c->mu */
    if (dlock__cluster_redirect(sub->b, r, &next, &asking) != 1) {
        pthread_mutex_lock(&c->mu);
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    rf.sub = sub;
    rf.slot = (unsigned)strtoul(r->str + 6, NULL, 10);
    each_lock(c, refused_one, &rf);
    return 1;
}

/* l's channel is to be carried by `arg`, whose node cannot be reached,
 * but the map now puts l's slot on another: subscribe there.  c->mu held. */
static void moved_away(struct dlock_client *c, dlock__lock *l, void *arg) {
    if (l->sub_node != arg || l->sub_state == DLOCK__SUB_NONE) return;
    if (dlock__cluster_node(&c->be, dlock__key_slot(l->k.key, l->k.keylen)) == ((dlock__sub *)arg)->b) return;
    resubscribe(c, l);
}

static int any_wanted(struct dlock_client *c, dlock__sub *sub) {
    size_t i;
    for (i = 0; i < c->nbuckets; i++) {
        dlock__lock *l;
        for (l = c->buckets[i]; l != NULL; l = l->hnext)
            if (l->sub_state == DLOCK__SUB_WANTED && l->sub_node == sub) return 1;
    }
    return 0;
}

/* The subscriber thread's state, carried through its phases (as libuv's
 * uv_run carries its loop): the client whose subscriber it is, the table
 * it serves, its reconnection back-off, its run of refusals, and this
 * turn's sweep (its error flag ends the connection). */
struct sub_loop {
    dlock__sub *sub;           /* the client's own, or a cluster node's */
    struct dlock_client *c;    /* sub->c: its table and mutex */
    dlock__backoff backoff;    /* before the next connection attempt */
    dlock__backoff pace;       /* after a turn with a subscription refused */
    int refused;               /* this turn had one */
    int proven;                /* the connection answered other than an error */
    struct sweep s;            /* this turn's sweep; s.err: the connection goes */
};

/* Sleeps on sub's eventfd until poked, or for timeout_ms (-1: no
 * bound); a poke is drained, or the eventfd stays readable.  c->mu not
 * held. */
static void sleep_poked(dlock__sub *sub, int timeout_ms) {
    struct pollfd pfd;
    pfd.fd = sub->wakefd;
    pfd.events = POLLIN;
    if (poll(&pfd, 1, timeout_ms) > 0 || timeout_ms < 0) dlock__efd_drain(sub->wakefd);
}

/* A connection attempt failed: wait a back-off (the library's; a poke
 * cuts it short).  A cluster node that cannot be reached
 * may have been replaced by its replica: read the map again, and move
 * the channels whose slot it no longer serves to their new master. */
static void sub_conn_failed(struct sub_loop *lp) {
    dlock__sub *sub = lp->sub;
    struct dlock_client *c = lp->c;
    if (sub->down_since == 0) sub->down_since = dlock__now();
    pthread_mutex_unlock(&c->mu);
    if (sub->b->parent != NULL)
        dlock__cluster_refresh_maybe(&c->be, dlock__now() + (dlock__mono)c->be.node.conf.command_timeout_ms * DLOCK__MS);
    sleep_poked(sub, (int)dlock__backoff_next(&lp->backoff));
    pthread_mutex_lock(&c->mu);
    if (sub->b->parent != NULL) each_lock(c, moved_away, sub); /* to the new master */
}

/* Phase 1, connect: without a connection, sleep until some channel is
 * wanted, then open one (a new epoch).  1 when connected; 0 when the
 * turn ends here (nothing wanted, or the attempt failed).  c->mu held. */
static int sub_connect(struct sub_loop *lp) {
    dlock__sub *sub = lp->sub;
    struct dlock_client *c = lp->c;
    dlock__conn *cn = NULL;
    int rc;
    if (!any_wanted(c, sub)) {
        sub->down_since = 0; /* unneeded: a wait to come counts from its own attempts */
        pthread_mutex_unlock(&c->mu);
        sleep_poked(sub, -1);
        pthread_mutex_lock(&c->mu);
        return 0;
    }
    pthread_mutex_unlock(&c->mu);
    rc = dlock__sub_open(sub->b, &cn);
    pthread_mutex_lock(&c->mu);
    if (rc != 0) {
        sub_conn_failed(lp);
        return 0;
    }
    lp->proven = 0; /* the back-off is reset once it answers (sub_dispatch) */
    sub->conn = cn;
    sub->connected = 1;
    sub->down_since = 0;
    sub->epoch = epoch_next();
    return 1;
}

/* Phase 2, sweep: queue the SUBSCRIBE / UNSUBSCRIBE the table's locks
 * ask for (written in phase 3), and note the earliest linger expiry. */
static void sub_sweep(struct sub_loop *lp) {
    lp->s.sub = lp->sub;
    lp->s.now = dlock__now();
    lp->s.next = DLOCK__MONO_NEVER;
    lp->s.err = 0;
    each_lock(lp->c, sweep_one, &lp->s);
}

/* How long phase 3 may wait: until the earliest linger expiry; -1:
 * until something comes. */
static int sub_timeout_ms(const struct sub_loop *lp) {
    if (lp->s.next == DLOCK__MONO_NEVER) return -1;
    return (int)((lp->s.next - lp->s.now) / DLOCK__MS) + 1;
}

/* Phase 3, I/O (c->mu dropped): write what the sweep queued, then wait
 * for answers or a poke and read what came.  Sentinel: a failover leaves
 * this connection on the old master, which publishes nothing the new one
 * does until it is demoted: once a second, ask the sentinels; if they
 * name another server, start over there (every waiter is woken: it may
 * have missed a release). */
static void sub_io(struct sub_loop *lp) {
    dlock__sub *sub = lp->sub;
    int timeout_ms = sub_timeout_ms(lp);
    sub->sleeping = 1;
    sub->wake_by = lp->s.next;
    pthread_mutex_unlock(&lp->c->mu);
    if (!lp->s.err && dlock__sub_wait(sub->b, sub->conn, sub->wakefd, timeout_ms) != 0) lp->s.err = 1;
    pthread_mutex_lock(&lp->c->mu);
    sub->sleeping = 0;
}

/* Phase 4, dispatch: every complete reply read, in order, to on_message.
 * A refused SUBSCRIBE (a loading server, an ACL): the subscriptions
 * cannot be trusted; start over.  On a cluster, a slot that moved is no
 * such thing (lp->refused).  c->mu held. */
static void sub_dispatch(struct sub_loop *lp) {
    lp->refused = 0;
    while (!lp->s.err) {
        redisReply *reply = NULL;
        if (dlock__sub_next(lp->sub->conn, &reply) != 0) {
            lp->s.err = 1;
            break;
        }
        if (reply == NULL) break;
        if (((redisReply *)reply)->type == REDIS_REPLY_ERROR) {
            if (on_refused(lp->c, lp->sub, reply)) lp->refused = 1;
            else lp->s.err = 1;
            freeReplyObject(reply);
            continue;
        }
        if (!lp->proven) {
            lp->proven = 1;
            dlock__backoff_reset(&lp->backoff);
        }
        on_message(lp->c, lp->sub, reply);
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
 * (a new epoch) and tell every lock it carried (on_down).  One that never
 * answered but with an error (its SUBSCRIBE refused: an ACL without the
 * channels, a server still loading) is a failed attempt, and the next
 * waits the back-off as after a failed connect: started over at once, a
 * refusal would be a loop of connections, thousands a second, on the
 * server.  c->mu held. */
static void sub_down(struct sub_loop *lp) {
    dlock__sub *sub = lp->sub;
    dlock__sub_close(sub->conn);
    sub->conn = NULL;
    sub->connected = 0;
    sub->down_since = dlock__now();
    sub->epoch = epoch_next();
    each_lock(lp->c, on_down, sub);
    if (!lp->proven) sub_conn_failed(lp);
}

/* The subscriber thread of client `sub` (a cluster sub's member, or the
 * client itself), serving the locks of c = table_of(sub).  Its fields
 * sub_* are sub's, guarded by c->mu.  Each turn runs the phases in
 * order: connect (if need be), sweep, I/O, dispatch, pace, down (if the
 * connection failed); the loop ends when asked to stop. */
static void *sub_main(void *arg) {
    struct sub_loop lp;
    memset(&lp, 0, sizeof lp);
    lp.sub = arg;
    lp.c = lp.sub->c;
    dlock__backoff_init(&lp.backoff, DLOCK__BACKOFF_MIN_MS, DLOCK__BACKOFF_MAX_MS);
    dlock__backoff_init(&lp.pace, REFUSED_PACE_MIN_MS, REFUSED_PACE_MAX_MS);

    pthread_mutex_lock(&lp.c->mu);
    while (!lp.sub->stop) {
        if (lp.sub->conn == NULL && !sub_connect(&lp)) continue;
        sub_sweep(&lp);
        sub_io(&lp);
        sub_dispatch(&lp);
        sub_pace(&lp);
        if (lp.s.err) sub_down(&lp);
    }
    if (lp.sub->conn != NULL) {
        dlock__sub_close(lp.sub->conn);
        lp.sub->conn = NULL;
    }
    lp.sub->connected = 0;
    lp.sub->running = 0;
    pthread_mutex_unlock(&lp.c->mu);
    return NULL;
}

static void poke(dlock__sub *sub) {
    uint64_t one = 1;
    if (sub->wakefd >= 0) (void)!write(sub->wakefd, &one, sizeof one);
}

/* A subscriber sweeps its locks before every wait, and waits until the
 * earliest linger expiry at the latest: it needs waking for l's new
 * linger only when it waits past it.  One that is awake, or will wake
 * before (most often: a lock contended again and again keeps a linger
 * running), is left alone -- a poke here was a wake-up of the thread,
 * and a system call, in every contended acquisition.  A lock with no
 * subscriber (sub_node NULL, sub_state NONE: its waits were local, or
 * its subscription ended) has no linger to start. */
void dlock__notify_idle(struct dlock_client *c, dlock__lock *l) {
    dlock__sub *sub = l->sub_node;
    (void)c; /* the table's client: l's subscriber is its own */
    if (sub != NULL && sub->sleeping && sub->wake_by > l->sub_idle_since + (dlock__mono)LINGER_MS * DLOCK__MS)
        poke(sub);
}

void dlock__notify_poke(struct dlock_client *c) {
    size_t i;
    poke(&c->sub);
    for (i = 0; i < c->be.nmembers; i++)
        if (c->be.members[i]->up != NULL) poke(c->be.members[i]->up);
}

/* Which subscriber is to carry l's channel: on a cluster, that of the
 * node of the slot's master as the map has it (the first node while the
 * map does not know: its refusal will name the right one), made when
 * first needed (member->up); elsewhere the client's own.  NULL: out of
 * memory.  c->mu held. */
static dlock__sub *sub_for(struct dlock_client *c, const dlock__lock *l) {
    dlock__backend *m;
    dlock__sub *sub;
    if (c->be.node.conf.kind != DLOCK__BACKEND_CLUSTER) return &c->sub;
    m = dlock__cluster_node(&c->be, dlock__key_slot(l->k.key, l->k.keylen));
    if (m == NULL) return &c->sub;
    if (m->up != NULL) return m->up;
    if ((sub = calloc(1, sizeof *sub)) == NULL) return NULL;
    sub->b = m;
    sub->c = c;
    sub->wakefd = -1;
    m->up = sub;
    return sub;
}

/* Asks sub's subscriber for l's channel (starting it if need be). */
static int want(struct dlock_client *c, dlock__lock *l) {
    dlock__sub *sub;
    if (l->sub_state == DLOCK__SUB_NONE || l->sub_node == NULL) {
        if ((sub = sub_for(c, l)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
        l->sub_node = sub;
    }
    sub = l->sub_node;
    if (sub->wakefd < 0) {
        sub->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (sub->wakefd < 0) return dlock__seterr(EAGAIN, "cannot create an eventfd");
    }
    if (!sub->running) {
        sub->stop = 0;
        if (dlock__thread_start(&sub->thread, sub_main, sub, NULL) != 0)
            return dlock__seterr(EAGAIN, "cannot start the subscriber thread");
        sub->running = 1;
    }
    l->sub_idle_since = 0;
    if (l->sub_state == DLOCK__SUB_NONE) {
        l->sub_state = DLOCK__SUB_WANTED;
        l->sub_tried_since = 0;
        poke(sub);
    }
    return 0;
}

int dlock__notify_want(struct dlock_client *c, dlock__lock *l) {
    return want(c, l);
}

/* Stops sub's subscriber thread (c: its table's client). */
static void stop_one(struct dlock_client *c, dlock__sub *sub) {
    int running;
    pthread_mutex_lock(&c->mu);
    running = sub->running;
    sub->stop = 1;
    poke(sub);
    pthread_mutex_unlock(&c->mu);
    if (running) pthread_join(sub->thread, NULL);
    if (sub->wakefd >= 0) close(sub->wakefd);
    sub->wakefd = -1;
}

void dlock__notify_stop(struct dlock_client *c) {
    size_t i, n;
    /* A cluster's nodes first: their threads use this client's table. */
    pthread_mutex_lock(&c->mu);
    n = c->be.nmembers;
    pthread_mutex_unlock(&c->mu);
    for (i = 0; i < n; i++) {
        dlock__sub *sub = c->be.members[i]->up;
        if (sub == NULL) continue;
        stop_one(c, sub);
        c->be.members[i]->up = NULL;
        free(sub);
    }
    stop_one(c, &c->sub);
}
