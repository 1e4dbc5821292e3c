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
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "dlock-int.h"

#define LINGER_MS 2000
#define SENTINEL_RECHECK_MS 1000
#define BACKOFF_MAX_MS 200


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

/* The connection is gone: forget subscriptions, ask again for those with
 * waiters, and wake every waiter, since a release may have been missed. */
static void on_down(struct dlock_client *c, dlock__lock *l, void *arg) {
    (void)arg;
    l->sub_state = wants_channel(l) ? DLOCK__SUB_WANTED : DLOCK__SUB_NONE;
    if (l->x.cached) dlock__renew_kick(c); /* it must go back: requests for it are not heard */
    if (l->waiters > 0) {
        l->gen++;
        dlock__lock_wake(l);
        dlock__fair_poke(l, NULL, 0);
    }
    dlock__lock_maybe_free(c, l);
}

/* Appends SUBSCRIBE / UNSUBSCRIBE for locks whose state asks for it. */
struct sweep {
    redisContext *ctx;
    dlock__mono now;
    dlock__mono next; /* earliest linger expiry */
    int err;
};

static void sweep_one(struct dlock_client *c, dlock__lock *l, void *arg) {
    struct sweep *s = arg;
    (void)c;
    if (s->err) return;
    if (l->sub_state == DLOCK__SUB_WANTED) {
        const char *argv[2] = { "SUBSCRIBE", l->key };
        size_t lens[2] = { 9, l->keylen };
        if (redisAppendCommandArgv(s->ctx, 2, argv, lens) != REDIS_OK) s->err = 1;
        else l->sub_state = DLOCK__SUB_SENT;
    } else if (l->sub_state == DLOCK__SUB_ACTIVE && !wants_channel(l)) {
        dlock__mono until;
        if (l->sub_idle_since == 0) l->sub_idle_since = s->now;
        until = l->sub_idle_since + (dlock__mono)LINGER_MS * DLOCK__MS;
        if (until <= s->now) {
            const char *argv[2] = { "UNSUBSCRIBE", l->key };
            size_t lens[2] = { 11, l->keylen };
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

static void on_message(struct dlock_client *c, redisReply *r) {
    dlock__lock *l;
    const char *kind;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    kind = r->element[0]->str;
    l = by_channel(c, r->element[1]->str, r->element[1]->len);
    if (l == NULL) return;
    if (strcmp(kind, "message") == 0) {
        const redisReply *p = r->element[2];
        if (p->type == REDIS_REPLY_STRING && p->len == 6 && memcmp(p->str, "wanted", 6) == 0) {
            /* Another owner asks for the lock this process caches: it
             * goes back at the next unlock, or now if idle. */
            l->wanted = 1;
            if (l->x.cached) dlock__renew_kick(c);
            return;
        }
        if (p->type == REDIS_REPLY_STRING && p->len == DLOCK__OWNER_LEN) {
            /* A fair release handed the lock to this token: only its
             * waiter (if it is one of ours) has anything to do. */
            dlock__fair_poke(l, p->str, p->len);
            return;
        }
        l->gen++;
        dlock__lock_wake(l);
        dlock__fair_poke(l, NULL, 0);
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
        }
    }
}

static void drain_wakefd(int fd) {
    uint64_t v;
    while (read(fd, &v, sizeof v) == (ssize_t)sizeof v)
        ;
}

static int any_wanted(struct dlock_client *c) {
    size_t i;
    for (i = 0; i < c->nbuckets; i++) {
        dlock__lock *l;
        for (l = c->buckets[i]; l != NULL; l = l->hnext)
            if (l->sub_state == DLOCK__SUB_WANTED) return 1;
    }
    return 0;
}

static void *sub_main(void *arg) {
    struct dlock_client *c = arg;
    unsigned backoff_ms = 10;

    pthread_mutex_lock(&c->mu);
    while (!c->sub_stop) {
        struct pollfd pfd[2];
        struct sweep s;
        int timeout_ms;

        if (c->sub_conn == NULL) {
            dlock__conn *cn = NULL;
            int rc;
            if (!any_wanted(c)) {
                pthread_mutex_unlock(&c->mu);
                pfd[0].fd = c->sub_wakefd;
                pfd[0].events = POLLIN;
                poll(pfd, 1, -1);
                drain_wakefd(c->sub_wakefd);
                pthread_mutex_lock(&c->mu);
                continue;
            }
            pthread_mutex_unlock(&c->mu);
            rc = dlock__conn_open(c, &cn, c->conf.connect_timeout_ms);
            pthread_mutex_lock(&c->mu);
            if (rc != 0) {
                if (c->sub_down_since == 0) c->sub_down_since = dlock__now();
                pthread_mutex_unlock(&c->mu);
                pfd[0].fd = c->sub_wakefd;
                pfd[0].events = POLLIN;
                poll(pfd, 1, (int)backoff_ms);
                if (backoff_ms < BACKOFF_MAX_MS) backoff_ms *= 2;
                pthread_mutex_lock(&c->mu);
                continue;
            }
            backoff_ms = 10;
            c->sub_conn = cn;
            c->sub_connected = 1;
            c->sub_down_since = 0;
            c->sub_epoch++;
        }
        s.ctx = c->sub_conn->ctx;
        s.now = dlock__now();
        s.next = DLOCK__MONO_NEVER;
        s.err = 0;
        each_lock(c, sweep_one, &s);
        pthread_mutex_unlock(&c->mu);

        /* Sentinel: a failover leaves this connection on the old master,
         * which publishes nothing the new one does until it is demoted:
         * once a second, ask the sentinels; if they name another server,
         * start over there (every waiter is woken: it may have missed a
         * release). */
        if (!s.err && !dlock__conn_current(c, c->sub_conn, (dlock__mono)SENTINEL_RECHECK_MS * DLOCK__MS)) s.err = 1;
        /* Write what the sweep queued, then wait for answers or a poke. */
        if (!s.err && dlock__conn_flush(c->sub_conn) != 0) s.err = 1;
        if (!s.err) {
            pfd[0].fd = s.ctx->fd;
            pfd[0].events = POLLIN;
            pfd[1].fd = c->sub_wakefd;
            pfd[1].events = POLLIN;
            timeout_ms = -1;
            if (s.next != DLOCK__MONO_NEVER) timeout_ms = (int)((s.next - s.now) / DLOCK__MS) + 1;
            if (c->conf.kind == DLOCK__BACKEND_SENTINEL && (timeout_ms < 0 || timeout_ms > SENTINEL_RECHECK_MS))
                timeout_ms = SENTINEL_RECHECK_MS;
            if (dlock__conn_pending(c->sub_conn)) {
                /* TLS already holds bytes the socket will not signal again. */
                if (dlock__conn_read(c->sub_conn) != REDIS_OK) s.err = 1;
            } else if (poll(pfd, 2, timeout_ms) > 0) {
                if (pfd[1].revents) drain_wakefd(c->sub_wakefd);
                if (pfd[0].revents && dlock__conn_read(c->sub_conn) != REDIS_OK) s.err = 1;
            }
        }
        pthread_mutex_lock(&c->mu);
        if (!s.err) {
            void *reply;
            for (;;) {
                reply = NULL;
                if (redisGetReplyFromReader(s.ctx, &reply) != REDIS_OK) {
                    s.err = 1;
                    break;
                }
                if (reply == NULL) break;
                if (((redisReply *)reply)->type == REDIS_REPLY_ERROR) {
                    /* A refused SUBSCRIBE (a loading server, an ACL): the
                     * subscriptions cannot be trusted; start over. */
                    freeReplyObject(reply);
                    s.err = 1;
                    break;
                }
                on_message(c, reply);
                freeReplyObject(reply);
            }
        }
        if (s.err) {
            dlock__conn_close(c->sub_conn);
            c->sub_conn = NULL;
            c->sub_connected = 0;
            c->sub_down_since = dlock__now();
            c->sub_epoch++;
            each_lock(c, on_down, NULL);
        }
    }
    if (c->sub_conn != NULL) {
        dlock__conn_close(c->sub_conn);
        c->sub_conn = NULL;
    }
    c->sub_connected = 0;
    c->sub_running = 0;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void dlock__notify_poke(struct dlock_client *c) {
    uint64_t one = 1;
    if (c->sub_wakefd >= 0) (void)!write(c->sub_wakefd, &one, sizeof one);
}

int dlock__notify_want(struct dlock_client *c, dlock__lock *l) {
    if (c->sub_wakefd < 0) {
        c->sub_wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->sub_wakefd < 0) return dlock__seterr(EAGAIN, "cannot create an eventfd");
    }
    if (!c->sub_running) {
        c->sub_stop = 0;
        if (dlock__thread_start(&c->sub_thread, sub_main, c) != 0)
            return dlock__seterr(EAGAIN, "cannot start the subscriber thread");
        c->sub_running = 1;
    }
    l->sub_idle_since = 0;
    if (l->sub_state == DLOCK__SUB_NONE) {
        l->sub_state = DLOCK__SUB_WANTED;
        dlock__notify_poke(c);
    }
    return 0;
}

void dlock__notify_stop(struct dlock_client *c) {
    int running;
    pthread_mutex_lock(&c->mu);
    running = c->sub_running;
    c->sub_stop = 1;
    dlock__notify_poke(c);
    pthread_mutex_unlock(&c->mu);
    if (running) pthread_join(c->sub_thread, NULL);
    if (c->sub_wakefd >= 0) close(c->sub_wakefd);
    c->sub_wakefd = -1;
}
