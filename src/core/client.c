/* client.c -- clients, the per-process table of lock states, fork and exit.
 *
 * A client is one deployment (URL, made by the backend: c->be) seen from
 * this process.  It owns the table that maps each lock name to its
 * dlock__lock: the one place where the process keeps what it knows of
 * that lock (who holds it here, its lease, its waiters, its
 * subscription).  Mutexes, rwlocks, condition variables and lock caching
 * all share that table.
 *
 * Fork: the child holds none of the parent's locks (nor its semaphores'
 * leased units, as SEM_UNDO's adjustments are cleared in a child), opens
 * its own connections and never writes on the parent's sockets; its
 * background threads start again on demand.  Exit: locks still held are
 * released, not left to expire; a semaphore's leased units are left to
 * their lease (they come back when it runs out).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

static void lock_free(dlock__lock *l);
static int entry_get(struct dlock_client *c, const char *name, size_t namelen, int kind, dlock__lock **out);
static void lock_put(struct dlock_client *c, dlock__lock *l);
static void thread_exiting(dlock__thread *t);

static pthread_mutex_t clients_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dlock_client *clients;
static struct dlock_client *default_client;
static pthread_once_t global_once = PTHREAD_ONCE_INIT;

/* ---------------------------------------------------------- fork, exit */

static void fork_prepare(void) {
    struct dlock_client *c;
    pthread_mutex_lock(&clients_mu);
    for (c = clients; c != NULL; c = c->next) {
        /* Pipelined releases' answers are read first: the child must not
         * read its parent's sockets, nor leave them unread (bounded). */
        dlock__pipe_flush(c, dlock__now() + 1000 * DLOCK__MS);
        pthread_mutex_lock(&c->mu);
        dlock__backend_fork_prepare(&c->be);
    }
}

static void fork_parent(void) {
    struct dlock_client *c;
    for (c = clients; c != NULL; c = c->next) {
        dlock__backend_fork_parent(&c->be);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&clients_mu);
}

/* A subscriber's state in a fork child: its thread is the parent's; its
 * connection is closed (the thread may have been in the middle of a
 * hiredis call on it: kept by the backend, never freed). */
static void sub_forget(struct dlock_client *c, dlock__sub *s) {
    dlock__backend_bury(&c->be, s->conn);
    s->conn = NULL;
    if (s->wakefd >= 0) close(s->wakefd);
    s->wakefd = -1;
    s->running = s->stop = 0;
    s->connected = 0;
    s->down_since = 0;
}

/* The child forgets every hold, waiter and connection of the parent. */
static void fork_child(void) {
    struct dlock_client *c;
    size_t i;

    for (c = clients; c != NULL; c = c->next) {
        dlock__backend_fork_child(&c->be);
        sub_forget(c, &c->sub);
        for (i = 0; i < c->be.nmembers; i++)
            if (c->be.members[i]->up != NULL) sub_forget(c, c->be.members[i]->up);
        c->renew_running = c->renew_stop = 0;
        c->renew_wake = c->renew_soon = 0;
        c->pipe_out = 0; /* (any the parent sent since: dlock__backend_fork_child forgets them) */
        c->pipe_tick_until = 0;
        dlock__cond_init(&c->renew_cv);
        c->held = NULL;
        c->nheld = 0;
        c->listing = 0; /* the parent's waiting threads: not here */
        c->dropping = 0; /* nor its renewal thread's releases */
        dlock__stats_fork_child(c);
        dlock__orphans_forget(c);
        for (i = 0; i < c->nbuckets; i++) {
            dlock__lock *l;
            for (l = c->buckets[i]; l != NULL; l = l->hnext) {
                dlock__hold *h, *hn;
                memset(&l->x, 0, sizeof l->x);
                l->x.l = l;
                for (h = l->readers; h != NULL; h = hn) {
                    hn = h->next;
                    free(h);
                }
                l->readers = NULL;
                dlock__units_free(l);
                l->waiters = 0;
                memset(l->trying, 0, sizeof l->trying);
                memset(l->busy_until, 0, sizeof l->busy_until);
                l->users = 0;
                l->sub_state = DLOCK__SUB_NONE;
                l->sub_node = NULL;
                l->sleepers = NULL; /* the parent's threads: not here */
                l->fair = NULL;
                dlock__cond_init(&l->cv);
            }
        }
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&clients_mu);
}

/* At exit: c's renewal thread is told to stop and awaited, 1 s at most
 * (not when exit was called on it).  One left running would end after
 * OpenSSL's exit handler, and what OpenSSL keeps for that thread (its
 * error queue, random generators) would never be freed. */
static void renewal_end(struct dlock_client *c) {
    struct timespec until;
    int join;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    pthread_mutex_lock(&c->mu);
    join = c->renew_running && !c->renew_stop && !pthread_equal(c->renew_thread, pthread_self());
    c->renew_stop = 1;
    pthread_cond_broadcast(&c->renew_cv);
    pthread_mutex_unlock(&c->mu);
    if (join) (void)pthread_timedjoin_np(c->renew_thread, NULL, &until);
}

/* Releases every lock a thread of this process still holds, so that no
 * waiter has to wait for a lease to run out.  A robust lock is released as
 * "owner died": its holder never unlocked it, so the next acquirer gets
 * EOWNERDEAD at once, as with a robust pthread mutex whose owner exited.
 * Runs from exit(). */
static void at_exit(void) {
    struct dlock_client *c;
    pthread_mutex_lock(&clients_mu);
    for (c = clients; c != NULL; c = c->next) {
        dlock__lock *l;
        dlock__hold *h;
        {
            /* Pipelined releases: their answers read (bounded); one that
             * got none is an orphan, released again below. */
            dlock__mono end = dlock__now() + 1000 * DLOCK__MS;
            dlock__mono saved = dlock__call_end_set(end);
            dlock__pipe_flush(c, end);
            dlock__call_end_set(saved);
        }
        pthread_mutex_lock(&c->mu);
        while ((h = c->held) != NULL) {
            char token[DLOCK__OWNER_LEN + 1];
            /* A cached hold is held by no thread: no holder died. */
            int released, how = dlock__hold_release_kind(h, !dlock__hold_is_cached(h));
            if (h->unit) { /* a semaphore's leased unit: left to its lease */
                dlock__hold_abandon(c, h);
                continue;
            }
            l = h->l;
            memcpy(token, h->token, sizeof token);
            dlock__hold_abandon(c, h);
            l->users++;
            pthread_mutex_unlock(&c->mu);
            /* Best effort, bounded: a server that does not answer lets
             * the lease expire instead. */
            {
                dlock__mono end = dlock__now() + 1000 * DLOCK__MS;
                dlock__mono saved = dlock__call_end_set(end); /* no connect or reply wait past it */
                (void)c->be.ops->release(&c->be, &l->k, token, how, &released, NULL, end);
                dlock__call_end_set(saved);
            }
            pthread_mutex_lock(&c->mu);
            l->users--;
        }
        {
            /* A cached hold the renewal thread is giving back (someone
             * asked for it) is off the held list while its release is on
             * its way: wait for that, or exit would cut it off and leave
             * the lock to its lease; and release what an answer never
             * came for (orphans).  Both bounded, as above. */
            dlock__mono until = dlock__now() + 1000 * DLOCK__MS;
            while (c->dropping > 0 && dlock__now() < until) {
                pthread_mutex_unlock(&c->mu);
                usleep(1000);
                pthread_mutex_lock(&c->mu);
            }
            if (c->orphans != NULL) {
                dlock__mono end = dlock__now() + 1000 * DLOCK__MS;
                dlock__mono saved = dlock__call_end_set(end);
                (void)dlock__orphans_release(c, NULL, end);
                dlock__call_end_set(saved);
            }
        }
        dlock__stats_flush(c, dlock__now() + 1000 * DLOCK__MS); /* the last second's figures */
        pthread_mutex_unlock(&c->mu);
        renewal_end(c);
    }
    pthread_mutex_unlock(&clients_mu);
}

/* OpenSSL is initialised (dlock__random_prepare: its exit handler
 * registered, the random source's set-up thread started, which every
 * client's nonce waits for anyway) before at_exit is registered, so that
 * OpenSSL's handler runs after at_exit: a thread of ours that used it (a
 * TLS probe of a broken connection, net/tls.c, may run on the renewal
 * thread) ends while it is still there to free that thread's state. */
static void global_init(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    dlock__random_prepare();
    atexit(at_exit);
}

/* ------------------------------------------------------------- clients */

/* Does a thread of this process (or the process) hold a lock of c's?  A
 * semaphore's leased units are not such holds: the client's end gives
 * them back.  c->mu held. */
static int holds_locks(const struct dlock_client *c) {
    const dlock__hold *h;
    for (h = c->held; h != NULL; h = h->held_next)
        if (!h->unit) return 1;
    return 0;
}

DLOCK_API void dlock_config_init(dlock_config_t *cfg) {
    if (cfg != NULL) memset(cfg, 0, sizeof *cfg);
}

/* Makes a client from its configuration (cfg, or $DLOCK_URL): its
 * deployment (nothing connected yet) and its lock table; the random
 * source's set-up starts in the background (its nonce is drawn with the
 * first token: dlock__client_self).  Nothing is left on error. */
static int client_new(struct dlock_client **out, const dlock_config_t *cfg) {
    struct dlock_client *c;
    int rc;

    if ((c = calloc(1, sizeof *c)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    dlock__thread_exit_hook(thread_exiting);
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    if ((rc = dlock__backend_init(&c->be, cfg, &c->mu)) != 0) goto fail_mu;
    c->be.up = c;
    c->nbuckets = 64;
    c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
    c->sub.wakefd = -1;
    c->sub.b = &c->be;
    c->sub.c = c;
    if (c->buckets == NULL) {
        rc = dlock__seterr(ENOMEM, "out of memory");
        goto fail;
    }
    /* (A no-op while global_init's set-up runs or once it is done; else,
     * in a fork child or after a set-up that failed, it starts one.) */
    dlock__random_prepare();
    dlock__cond_init(&c->renew_cv);
    dlock__stats_init(c);
    pthread_mutex_lock(&clients_mu);
    c->next = clients;
    clients = c;
    pthread_mutex_unlock(&clients_mu);
    *out = c;
    return 0;
fail:
    free(c->buckets);
    dlock__backend_free(&c->be);
fail_mu:
    pthread_mutex_destroy(&c->mu);
    free(c);
    return rc;
}

DLOCK_API int dlock_client_create(dlock_client_t **out, const dlock_config_t *cfg) {
    if (out == NULL) return dlock__seterr(EINVAL, "client pointer is NULL");
    *out = NULL;
    pthread_once(&global_once, global_init);
    return client_new(out, cfg);
}

DLOCK_API dlock_client_t *dlock_client_default(int *err) {
    struct dlock_client *c;
    int rc = 0;
    pthread_mutex_lock(&clients_mu);
    c = default_client;
    pthread_mutex_unlock(&clients_mu);
    if (c != NULL) return c;
    if ((rc = dlock_client_create(&c, NULL)) != 0) {
        if (err) *err = rc;
        return NULL;
    }
    pthread_mutex_lock(&clients_mu);
    if (default_client == NULL) {
        c->is_default = 1;
        default_client = c;
        pthread_mutex_unlock(&clients_mu);
        return c;
    }
    pthread_mutex_unlock(&clients_mu);
    dlock_client_destroy(c); /* another thread made it first */
    pthread_mutex_lock(&clients_mu);
    c = default_client;
    pthread_mutex_unlock(&clients_mu);
    return c;
}

DLOCK_API int dlock_client_destroy(dlock_client_t *c) {
    struct dlock_client **pp;
    size_t i;

    if (c == NULL) return dlock__seterr(EINVAL, "client is NULL");
    pthread_mutex_lock(&clients_mu);
    for (pp = &clients; *pp != NULL && *pp != c; pp = &(*pp)->next)
        ;
    if (*pp == NULL) {
        pthread_mutex_unlock(&clients_mu);
        return dlock__seterr(EINVAL, "not a live client");
    }
    pthread_mutex_lock(&c->mu);
    if (c->is_default || c->objects > 0 || holds_locks(c)) {
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&clients_mu);
        return dlock__seterr(EBUSY, c->is_default ? "the default client lives as long as the process"
                                                 : "the client still has mutexes");
    }
    *pp = c->next;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&clients_mu);

    dlock__pipe_flush(c, dlock__now() + (dlock__mono)c->be.node.conf.command_timeout_ms * DLOCK__MS);
    dlock__units_return_all(c);
    dlock__renew_stop(c);
    dlock__notify_stop(c);
    pthread_mutex_lock(&c->mu);
    dlock__stats_flush(c, dlock__now() + (dlock__mono)c->be.node.conf.command_timeout_ms * DLOCK__MS);
    dlock__orphans_forget(c);
    pthread_mutex_unlock(&c->mu);
    for (i = 0; i < c->nbuckets; i++) {
        while (c->buckets[i] != NULL) {
            dlock__lock *l = c->buckets[i];
            c->buckets[i] = l->hnext;
            lock_free(l);
        }
    }
    free(c->buckets);
    free(c->renew_pend);
    free(c->renew_rn);
    free(c->renew_reps);
    pthread_cond_destroy(&c->renew_cv);
    dlock__random_settle();      /* (the random source's set-up thread, if it still runs) */
    dlock__backend_free(&c->be); /* (its members: nothing runs that uses them) */
    pthread_mutex_destroy(&c->mu);
    free(c);
    return 0;
}

/* The first token of a process waits for the random source's set-up,
 * and does a part of it meanwhile (the two parts run side by side): first
 * OpenSSL's configuration, at once, as the set-up thread's DRBG part needs
 * it only at its end; then the connection its request needs is opened,
 * and the renewal thread its first hold will want is started (its start,
 * and its first pass, then delay neither that hold nor its release); then
 * the DRBG's part, if the set-up thread has not begun it. */
static void first_token_wait(struct dlock_client *c) {
    (void)dlock__random_help_conf();
    dlock__backend_warm(&c->be);
    if (!dlock__random_ready()) dlock__renew_ahead(c);
    (void)dlock__random_help();
}

dlock__thread *dlock__client_self(struct dlock_client *c, int *err) {
    unsigned char nonce[sizeof c->nonce];
    dlock__thread *self;
    if (!dlock__random_ready() && dlock__self_peek() == NULL) first_token_wait(c);
    self = dlock__self(err);
    if (self == NULL || __atomic_load_n(&c->nonce_set, __ATOMIC_ACQUIRE)) return self;
    if (dlock__random(nonce, (int)sizeof nonce) != 0) {
        *err = dlock__seterr(ENOLCK, "RAND_bytes failed: no secure random nonce for the client");
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    if (!c->nonce_set) { /* (else another thread's first token drew it) */
        memcpy(c->nonce, nonce, sizeof nonce);
        __atomic_store_n(&c->nonce_set, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->mu);
    return self;
}

/* Is c a client that exists?  Callers pass pointers from the user, which
 * may be destroyed or made up: they are looked up, never trusted. */
int dlock__client_live(const struct dlock_client *c) {
    const struct dlock_client *p;
    pthread_mutex_lock(&clients_mu);
    for (p = clients; p != NULL && p != c; p = p->next)
        ;
    pthread_mutex_unlock(&clients_mu);
    return p != NULL;
}

/* The client to use: c if it is live, the default client if c is NULL;
 * NULL with *err set otherwise. */
struct dlock_client *dlock__client_get(struct dlock_client *c, int *err) {
    if (c == NULL) return dlock_client_default(err);
    if (!dlock__client_live(c)) {
        *err = dlock__seterr(EINVAL, "not a live client (destroyed, or never made)");
        return NULL;
    }
    return c;
}

/* ---------------------------------------------------------- lock table */

static size_t hash_name(const char *s, size_t n) {
    size_t h = 1469598103934665603ull, i;
    for (i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void table_grow(struct dlock_client *c) {
    size_t nb = c->nbuckets * 2, i;
    dlock__lock **b = calloc(nb, sizeof *b);
    if (b == NULL) return; /* keep the longer chains */
    for (i = 0; i < c->nbuckets; i++) {
        while (c->buckets[i] != NULL) {
            dlock__lock *l = c->buckets[i];
            size_t h = hash_name(l->k.name, l->k.namelen) & (nb - 1);
            c->buckets[i] = l->hnext;
            l->hnext = b[h];
            b[h] = l;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = nb;
}

dlock__lock *dlock__lock_find(struct dlock_client *c, const char *name, size_t namelen, int kind) {
    dlock__lock *l = c->buckets[hash_name(name, namelen) & (c->nbuckets - 1)];
    while (l != NULL && !(l->kind == kind && l->k.namelen == namelen && memcmp(l->k.name, name, namelen) == 0))
        l = l->hnext;
    return l;
}

static void lock_free(dlock__lock *l) {
    dlock__units_free(l); /* (lost ones: nothing to tell any more) */
    dlock__stats_detach(l);
    pthread_cond_destroy(&l->cv);
    free(l->stale);
    dlock__keys_free(&l->k);
    free(l);
}

/* What every user of a lock name does first: checks the name, finds the
 * client (*cp, NULL: the default one; a made-up pointer is refused) and
 * takes a reference on the table entry of that name and kind; `object`:
 * one more object lives on the client (destroy says EBUSY until it goes). */
int dlock__entry_open(struct dlock_client **cp, const char *name, int kind, int object, dlock__lock **lp) {
    struct dlock_client *c;
    size_t len = 0;
    int rc;
    if ((rc = dlock__check_name(name, &len)) != 0) return rc;
    if ((c = dlock__client_get(*cp, &rc)) == NULL) return rc;
    pthread_mutex_lock(&c->mu);
    rc = entry_get(c, name, len, kind, lp);
    if (rc == 0 && object) c->objects++;
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) *cp = c;
    return rc;
}

void dlock__entry_close(struct dlock_client *c, dlock__lock *l, int object) {
    pthread_mutex_lock(&c->mu);
    if (object) c->objects--;
    lock_put(c, l);
    pthread_mutex_unlock(&c->mu);
}

static int entry_get(struct dlock_client *c, const char *name, size_t namelen, int kind, dlock__lock **out) {
    dlock__lock *l = dlock__lock_find(c, name, namelen, kind);
    size_t h;
    int rc;

    if (l != NULL) {
        l->objrefs++;
        *out = l;
        return 0;
    }
    if (c->be.node.conf.cluster && name[0] == '}')
        /* <prefix>{}...: an empty hash tag; the lock's keys would hash
         * whole, each to its own slot. */
        return dlock__seterr(EINVAL, "on Redis Cluster a lock name cannot start with '}'");
    if ((l = calloc(1, sizeof *l)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    if ((rc = dlock__keys_make(&l->k, c->be.node.conf.prefix, name, namelen,
                               kind == DLOCK__KIND_COND  ? DLOCK__KEYS_COND
                               : kind == DLOCK__KIND_SEM ? DLOCK__KEYS_SEM
                                                         : DLOCK__KEYS_LOCK)) != 0) {
        free(l);
        return rc;
    }
    if (dlock__cond_init(&l->cv) != 0) {
        dlock__keys_free(&l->k);
        free(l);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    l->kind = kind;
    l->x.l = l;
    l->objrefs = 1;
    /* Not yet seen free here: its first acquisition asks the script,
     * whose uncontended path also makes a fence key that is missing (a
     * name new to the server) in the same round trip. */
    l->contended = 2;
    if (c->nlocks >= c->nbuckets) table_grow(c);
    h = hash_name(name, namelen) & (c->nbuckets - 1);
    l->hnext = c->buckets[h];
    c->buckets[h] = l;
    c->nlocks++;
    *out = l;
    return 0;
}

void dlock__lock_maybe_free(struct dlock_client *c, dlock__lock *l) {
    dlock__lock **pp;
    if (l->objrefs > 0 || l->users > 0 || l->waiters > 0 || dlock__hold_in_use(&l->x) || l->readers != NULL ||
        l->units != NULL || l->sub_state != DLOCK__SUB_NONE)
        return;
    pp = &c->buckets[hash_name(l->k.name, l->k.namelen) & (c->nbuckets - 1)];
    while (*pp != NULL && *pp != l) pp = &(*pp)->hnext;
    if (*pp == NULL) return;
    *pp = l->hnext;
    c->nlocks--;
    lock_free(l);
}

static void lock_put(struct dlock_client *c, dlock__lock *l) {
    l->objrefs--;
    dlock__lock_maybe_free(c, l);
}

/* ---------------------------------------------------------- held list */

void dlock__held_add(struct dlock_client *c, dlock__hold *h) {
    h->held_prev = NULL;
    h->held_next = c->held;
    if (c->held != NULL) c->held->held_prev = h;
    c->held = h;
    c->nheld++;
    c->renew_tick = (dlock__mono)(h->lease_ms / 6) * DLOCK__MS;
    c->renew_idle_until = h->acquired + 10000 * DLOCK__MS;
    dlock__renew_start(c);
    /* Wake the renewal thread only if it would sleep past the time this
     * hold is due (a thread switch per acquire would cost more than the
     * acquire's own work).  Not merely past the start of its early-renewal
     * window: the thread sleeps until the first hold it has is due, and a
     * hold taken right after that one was released would then kick it
     * again, pair after pair. */
    dlock__renew_due(c, h->renew_at);
}

void dlock__held_remove(struct dlock_client *c, dlock__hold *h) {
    if (h->held_prev == NULL && c->held != h) return; /* not on the list */
    if (h->held_prev != NULL) h->held_prev->held_next = h->held_next;
    else c->held = h->held_next;
    if (h->held_next != NULL) h->held_next->held_prev = h->held_prev;
    h->held_next = h->held_prev = NULL;
    c->nheld--;
}

/* The thread-specific-data destructor of an exiting thread: its holds are
 * no longer renewed, so they expire; nothing is released, because the
 * thread did not unlock (a robust mutex reports EOWNERDEAD next). */
static void thread_exiting(dlock__thread *t) {
    struct dlock_client *c;
    pthread_mutex_lock(&clients_mu);
    for (c = clients; c != NULL; c = c->next) {
        size_t i;
        pthread_mutex_lock(&c->mu);
        for (i = 0; i < c->nbuckets; i++) {
            dlock__lock *l;
            for (l = c->buckets[i]; l != NULL; l = l->hnext) {
                dlock__hold *h, *hn;
                int gone = 0;
                if (l->x.owner == t) {
                    dlock__hold_forget(c, &l->x);
                    gone = 1;
                }
                for (h = l->readers; h != NULL; h = hn) {
                    hn = h->next;
                    if (h->owner == t) {
                        dlock__hold_forget(c, h);
                        gone = 1;
                    }
                }
                if (gone) { /* local waiters go and wait for the lease to run out */
                    l->gen++;
                    dlock__lock_wake(l);
                }
            }
        }
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&clients_mu);
}
