/* fake_backend.c -- a scripted in-memory server behind the backend ops
 * table, and a fake subscriber thread; see fake_backend.h.
 *
 * Three parts: the server (a table of locks keyed by the lock's key,
 * answering as the scripts do, under its own mutex), the ops adapters
 * (the only code that knows the ops' signatures: when they change, only
 * that block changes), and the subscriber (what notify.c does with a
 * message, done to the locks of the attached clients).
 */
#include "fake_backend.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define FK_LOCKS 32
#define FK_READERS 16
#define FK_QUEUE 16
#define FK_FAULTS 32
#define FK_CLIENTS 4
#define TOKLEN (DLOCK__OWNER_LEN + 1)

enum { ST_NONE, ST_HELD, ST_DEAD, ST_NOTREC }; /* the robust state (:state) */

typedef struct fk_lock {
    char key[256];
    char owner[TOKLEN]; /* "": not held exclusively */
    dlock__mono until;  /* the owner's lease end */
    int caching;        /* the owner's hold is a caching one */
    uint64_t fence;     /* the last fence issued */
    int state;
    struct { char tok[TOKLEN]; dlock__mono until; } readers[FK_READERS];
    int nreaders;
    struct { char tok[TOKLEN]; unsigned lease; } queue[FK_QUEUE];
    int nqueue;
    /* waiting writers (registered by every acquire that will wait and
     * finds the lock held), which hold new readers back and make a
     * releaser's handoff window */
    struct { char tok[TOKLEN]; dlock__mono until; } writers[FK_QUEUE];
    int nwriters;
    char handoff[320];     /* the releaser held back (host:pid:tid), "" none */
    dlock__mono handoff_until;
} fk_lock;

static pthread_mutex_t fk_mu = PTHREAD_MUTEX_INITIALIZER; /* guards fk */
static struct {
    fk_lock locks[FK_LOCKS];
    int nlocks;
    struct { int op, fault; long arg; } faults[FK_FAULTS];
    int nfaults;
    int counts[FK_NOPS];
    int renew_refuse;
    int last_flags, last_how;
    char last_token[TOKLEN];
} fk;

static void sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void sleep_until(dlock__mono t) {
    dlock__mono now = dlock__now();
    if (t != DLOCK__MONO_NEVER && t > now) sleep_ms((long)((t - now + DLOCK__MS - 1) / DLOCK__MS));
}

/* ------------------------------------------------------------ publish */

static void publish(const char *key, const char *payload);

/* ------------------------------------------------------------- server */

/* The entry of key, made if need be.  fk_mu held. */
static fk_lock *find(const char *key) {
    int i;
    for (i = 0; i < fk.nlocks; i++)
        if (strcmp(fk.locks[i].key, key) == 0) return &fk.locks[i];
    if (fk.nlocks == FK_LOCKS) abort();
    memset(&fk.locks[fk.nlocks], 0, sizeof fk.locks[0]);
    snprintf(fk.locks[fk.nlocks].key, sizeof fk.locks[0].key, "%s", key);
    return &fk.locks[fk.nlocks++];
}

/* Leases that ran out end (a robust holder's leaves ST_HELD: it died). */
/* The next fence as the scripts issue it: max(last + 1, the clock in
 * ns) -- here the monotonic clock, which a caching holder's local fences
 * follow (core/lock.c, cache_fence).  fk_mu held. */
static uint64_t fake_fence(fk_lock *L) {
    uint64_t now = (uint64_t)dlock__now();
    L->fence = L->fence + 1 > now ? L->fence + 1 : now;
    return L->fence;
}

static void expire(fk_lock *L, dlock__mono now) {
    int i, j;
    if (L->owner[0] && now >= L->until) L->owner[0] = '\0';
    for (i = j = 0; i < L->nreaders; i++)
        if (now < L->readers[i].until) L->readers[j++] = L->readers[i];
    L->nreaders = j;
    for (i = j = 0; i < L->nwriters; i++)
        if (now < L->writers[i].until) L->writers[j++] = L->writers[i];
    L->nwriters = j;
    if (L->handoff[0] && now >= L->handoff_until) L->handoff[0] = '\0';
}

/* The calling thread's host:pid:tid, as the scripts are told it. */
static void who_am_i(char *out, size_t cap) {
    dlock__who_get(dlock__self_peek(), out, cap);
}

/* token registered as a waiting writer until now + lease (again: moved on). */
static void writer_add(fk_lock *L, const char *token, dlock__mono until) {
    int i;
    for (i = 0; i < L->nwriters && strcmp(L->writers[i].tok, token) != 0; i++)
        ;
    if (i == FK_QUEUE) abort();
    if (i == L->nwriters) snprintf(L->writers[L->nwriters++].tok, TOKLEN, "%s", token);
    L->writers[i].until = until;
}

static void writer_drop(fk_lock *L, const char *token) {
    int i, j;
    for (i = j = 0; i < L->nwriters; i++)
        if (strcmp(L->writers[i].tok, token) != 0) L->writers[j++] = L->writers[i];
    L->nwriters = j;
}

static void dequeue(fk_lock *L, const char *token) {
    int i, j;
    for (i = j = 0; i < L->nqueue; i++)
        if (strcmp(L->queue[i].tok, token) != 0) L->queue[j++] = L->queue[i];
    L->nqueue = j;
}

static void enqueue(fk_lock *L, const char *token, unsigned lease) {
    int i;
    for (i = 0; i < L->nqueue; i++)
        if (strcmp(L->queue[i].tok, token) == 0) return;
    if (L->nqueue == FK_QUEUE) abort();
    snprintf(L->queue[L->nqueue].tok, TOKLEN, "%s", token);
    L->queue[L->nqueue++].lease = lease;
}

/* The first fault scripted for op, taken off the script; -1 none. */
static int take_fault(int op, long *arg) {
    int i, f;
    for (i = 0; i < fk.nfaults; i++) {
        if (fk.faults[i].op != op) continue;
        f = fk.faults[i].fault;
        *arg = fk.faults[i].arg;
        memmove(&fk.faults[i], &fk.faults[i + 1], (size_t)(fk.nfaults - i - 1) * sizeof fk.faults[0]);
        fk.nfaults--;
        return f;
    }
    return -1;
}

/* A shared acquire as acquire_shared.lua answers it: busy while a writer
 * holds it, or (writers first) while writers wait; again: MINE. */
static void serve_shared(fk_lock *L, const char *token, unsigned lease, int flags, dlock__acq *out,
                         dlock__mono now) {
    int i;
    if (L->owner[0] || (!(flags & DLOCK__F_READFIRST) && L->nwriters > 0)) {
        out->status = DLOCK__ACQ_BUSY;
        out->pttl_ms = L->owner[0] ? (L->until - now) / DLOCK__MS : -1;
        return;
    }
    for (i = 0; i < L->nreaders && strcmp(L->readers[i].tok, token) != 0; i++)
        ;
    if (i == FK_READERS) abort();
    out->status = i < L->nreaders ? DLOCK__ACQ_MINE : DLOCK__ACQ_ACQUIRED;
    if (i == L->nreaders) snprintf(L->readers[L->nreaders++].tok, TOKLEN, "%s", token);
    L->readers[i].until = now + (dlock__mono)lease * DLOCK__MS;
    out->fence = out->status == DLOCK__ACQ_MINE ? L->fence : fake_fence(L);
}

/* An acquire as the scripts answer it.  *wanted: publish "wanted" (a
 * caching holder is asked for it).  fk_mu held. */
static void serve_acquire(fk_lock *L, const char *token, unsigned lease, int flags, dlock__acq *out,
                          int *wanted) {
    dlock__mono now = dlock__now();
    char me[320];
    expire(L, now);
    if (L->state == ST_NOTREC) {
        out->status = DLOCK__ACQ_NOTRECOVERABLE;
        return;
    }
    if (flags & DLOCK__F_SHARED) {
        serve_shared(L, token, lease, flags, out, now);
        return;
    }
    if (strcmp(L->owner, token) == 0) { /* re-leased */
        L->until = now + (dlock__mono)lease * DLOCK__MS;
        out->status = DLOCK__ACQ_MINE;
        out->fence = L->fence;
        return;
    }
    if (L->owner[0] || L->nreaders > 0) goto busy;
    who_am_i(me, sizeof me);
    /* the releaser's thread, while waiting writers had nobody queued */
    if ((flags & DLOCK__F_WAIT) && L->nqueue == 0 && L->handoff[0] && strcmp(L->handoff, me) == 0) {
        out->status = DLOCK__ACQ_HELDBACK;
        out->pttl_ms = (L->handoff_until - now) / DLOCK__MS;
        return;
    }
    snprintf(L->owner, TOKLEN, "%s", token);
    L->until = now + (dlock__mono)lease * DLOCK__MS;
    L->caching = (flags & DLOCK__F_CACHING) != 0;
    out->fence = fake_fence(L);
    out->status = (flags & DLOCK__F_ROBUST) && L->state != ST_NONE ? DLOCK__ACQ_OWNERDEAD : DLOCK__ACQ_ACQUIRED;
    if (flags & DLOCK__F_ROBUST) L->state = ST_HELD;
    /* the uncontended path's string: neither robust nor caching, nobody
     * queued, registered, or held back */
    out->plain = !(flags & (DLOCK__F_ROBUST | DLOCK__F_CACHING)) && L->nqueue == 0 && L->nwriters == 0 &&
                 !L->handoff[0];
    dequeue(L, token);
    writer_drop(L, token);
    return;
busy:
    out->status = DLOCK__ACQ_BUSY;
    out->pttl_ms = L->owner[0] ? (L->until - now) / DLOCK__MS : -1;
    out->floor = L->fence;
    if (flags & DLOCK__F_WAIT) writer_add(L, token, now + (dlock__mono)lease * DLOCK__MS);
    if ((flags & DLOCK__F_WAIT) && (flags & DLOCK__F_FAIR)) enqueue(L, token, lease);
    if (L->owner[0] && L->caching) *wanted = 1;
}

/* A release as the scripts do it, handing the lock to the queue's head,
 * or, with waiting writers and nobody queued, holding the releasing
 * thread back for the handoff window (window ms); what to publish goes to
 * msg ("" nothing).  fk_mu held. */
static void serve_release(fk_lock *L, const char *token, int how, unsigned window, int *released, char *msg,
                          size_t cap) {
    dlock__mono now = dlock__now();
    int i;
    expire(L, now);
    *released = 0;
    msg[0] = '\0';
    if (how == DLOCK__REL_WITHDRAW) {
        dequeue(L, token);
        writer_drop(L, token);
        return;
    }
    if (how == DLOCK__REL_SHARED) {
        for (i = 0; i < L->nreaders; i++)
            if (strcmp(L->readers[i].tok, token) == 0) break;
        if (i == L->nreaders) return;
        L->readers[i] = L->readers[--L->nreaders];
        *released = 1;
        snprintf(msg, cap, "released");
        return;
    }
    if (strcmp(L->owner, token) != 0) return;
    *released = 1;
    L->owner[0] = '\0';
    if (L->state != ST_NONE)
        L->state = how == DLOCK__REL_DEAD ? ST_DEAD : how == DLOCK__REL_INCONSISTENT ? ST_NOTREC : ST_NONE;
    if (L->nqueue > 0 && L->state != ST_NOTREC) { /* the head's turn: the lock is its own */
        *released = DLOCK__RELEASED_HANDED;
        snprintf(L->owner, TOKLEN, "%s", L->queue[0].tok);
        L->until = now + (dlock__mono)L->queue[0].lease * DLOCK__MS;
        L->caching = 0;
        snprintf(msg, cap, "%s:%llu:%u", L->queue[0].tok, (unsigned long long)fake_fence(L), L->queue[0].lease);
        writer_drop(L, L->owner);
        dequeue(L, L->owner);
        return;
    }
    if (window > 0 && L->nwriters > 0) {
        who_am_i(L->handoff, sizeof L->handoff);
        L->handoff_until = now + (dlock__mono)window * DLOCK__MS;
    }
    snprintf(msg, cap, "released");
}

/* The acquire op: counts, plays the fault, serves. */
static int fk_acquire(const char *key, const char *token, unsigned lease, int flags, dlock__acq *out,
                      dlock__mono deadline) {
    char k[256];
    long arg = 0;
    int fault, wanted = 0, rc = 0;
    pthread_mutex_lock(&fk_mu);
    fk.counts[FK_ACQUIRE]++;
    fk.last_flags = flags;
    fault = take_fault(FK_ACQUIRE, &arg);
    out->sent = dlock__now();
    pthread_mutex_unlock(&fk_mu);
    if (fault == FK_ENOLCK) {
        if (arg) sleep_until(deadline);
        out->sent = 0;
        return dlock__seterr(ENOLCK, "fake: unreachable");
    }
    if (fault == FK_DELAY) sleep_ms(arg);
    if (fault == FK_BUSY || fault == FK_NOTRECOVERABLE || fault == FK_HELDBACK) {
        out->status = fault == FK_BUSY ? DLOCK__ACQ_BUSY : fault == FK_HELDBACK ? DLOCK__ACQ_HELDBACK
                                                                               : DLOCK__ACQ_NOTRECOVERABLE;
        out->pttl_ms = fault == FK_BUSY ? arg : -1;
        return 0;
    }
    pthread_mutex_lock(&fk_mu);
    serve_acquire(find(key), token, lease, flags, out, &wanted);
    snprintf(k, sizeof k, "%s", key);
    pthread_mutex_unlock(&fk_mu);
    if (wanted) publish(k, "wanted");
    if (fault == FK_OWNERDEAD && out->status == DLOCK__ACQ_ACQUIRED) out->status = DLOCK__ACQ_OWNERDEAD;
    if (fault == FK_MINE && out->status == DLOCK__ACQ_ACQUIRED) out->status = DLOCK__ACQ_MINE;
    if (fault == FK_UNKNOWN) rc = dlock__seterr(ENOLCK, "fake: the answer was lost");
    return rc;
}

static int fk_release(const char *key, const char *token, int how, unsigned window, int *released) {
    char msg[128], k[256];
    long arg = 0;
    int fault;
    pthread_mutex_lock(&fk_mu);
    fk.counts[FK_RELEASE]++;
    fk.last_how = how;
    snprintf(fk.last_token, TOKLEN, "%s", token);
    fault = take_fault(FK_RELEASE, &arg);
    *released = 0;
    msg[0] = '\0';
    if (fault == FK_ENOLCK) {
        pthread_mutex_unlock(&fk_mu);
        return dlock__seterr(ENOLCK, "fake: unreachable");
    }
    if (fault != FK_REFUSE) serve_release(find(key), token, how, window, released, msg, sizeof msg);
    snprintf(k, sizeof k, "%s", key);
    pthread_mutex_unlock(&fk_mu);
    if (fault == FK_DELAY) sleep_ms(arg);
    if (msg[0]) publish(k, msg);
    return fault == FK_UNKNOWN ? dlock__seterr(ENOLCK, "fake: the answer was lost") : 0;
}

/* One renewal: 1 renewed, 0 refused. */
static int fk_renew_one(const char *key, const char *token, int shared, unsigned lease) {
    dlock__mono now = dlock__now();
    fk_lock *L = find(key);
    int i;
    expire(L, now);
    if (fk.renew_refuse) return 0;
    if (!shared && strcmp(L->owner, token) == 0) {
        L->until = now + (dlock__mono)lease * DLOCK__MS;
        return 1;
    }
    for (i = 0; shared && i < L->nreaders; i++)
        if (strcmp(L->readers[i].tok, token) == 0) {
            L->readers[i].until = now + (dlock__mono)lease * DLOCK__MS;
            return 1;
        }
    return 0;
}

static int fk_reset_lock(const char *key, int how, int *was_held) {
    fk_lock *L;
    pthread_mutex_lock(&fk_mu);
    fk.counts[FK_RESET]++;
    L = find(key);
    expire(L, dlock__now());
    *was_held = L->owner[0] || L->nreaders > 0;
    L->owner[0] = '\0';
    L->nreaders = L->nwriters = L->nqueue = 0; /* reset.lua: the waiters' keys and the queue go too */
    L->handoff[0] = '\0';
    L->state = how == DLOCK__RESET_FULL ? ST_NONE : *was_held && L->state != ST_NONE ? ST_DEAD : L->state;
    pthread_mutex_unlock(&fk_mu);
    publish(key, "released");
    return 0;
}

/* ------------------------------------------------------------ adapters
 * The only place that knows the ops' signatures. */

static int op_acquire(dlock__backend *c, const dlock__keys *k, const char *token, unsigned lease_ms, int flags,
                      dlock__acq *out, dlock__mono deadline) {
    (void)c;
    return fk_acquire(k->key, token, lease_ms, flags, out, deadline);
}

static int op_release(dlock__backend *c, const dlock__keys *k, const char *token, int how, int *released,
                      dlock__sent *sent, dlock__mono deadline) {
    (void)deadline;
    if (sent != NULL) *sent = (dlock__sent){ 0, dlock__now(), 0 };
    return fk_release(k->key, token, how, c->node.conf.handoff_ms, released);
}

static int op_renew(dlock__backend *c, dlock__renewal *r, size_t n, dlock__mono deadline) {
    size_t i;
    (void)c;
    (void)deadline;
    pthread_mutex_lock(&fk_mu);
    fk.counts[FK_RENEW]++;
    for (i = 0; i < n; i++) {
        r[i].result = fk_renew_one(r[i].k->key, r[i].token, r[i].shared, r[i].lease_ms);
        r[i].moved = 0;
    }
    pthread_mutex_unlock(&fk_mu);
    return 0;
}

static int op_reset(dlock__backend *c, const dlock__keys *k, int how, int *was_held, dlock__sent *sent,
                    dlock__mono deadline) {
    (void)c;
    (void)deadline;
    if (sent != NULL) *sent = (dlock__sent){ 0, dlock__now(), 0 };
    return fk_reset_lock(k->key, how, was_held);
}

static int op_fenced_set(dlock__backend *c, const char *key, size_t keylen, uint64_t fence, const void *value,
                         size_t len, int *written, dlock__mono deadline) {
    (void)c, (void)key, (void)keylen, (void)fence, (void)value, (void)len, (void)deadline;
    *written = 1;
    return 0;
}

static int op_info(dlock__backend *c, const dlock__keys *l, dlock_lock_info_t *out, dlock__mono deadline) {
    (void)c, (void)l, (void)deadline;
    memset(out, 0, sizeof *out);
    return 0;
}

static int op_cond(dlock__backend *c, const dlock__keys *l, const char *op, const char *token, unsigned ttl_ms,
                   const char *const *stale, size_t nstale, long long *result, dlock__mono deadline) {
    (void)c, (void)l, (void)op, (void)token, (void)ttl_ms, (void)stale, (void)nstale, (void)deadline;
    *result = 0;
    return 0;
}

static dlock__backend_ops fk_ops = {
    1, op_acquire, op_release, op_renew, op_reset, op_fenced_set, op_info, op_cond,
    NULL, /* grant_conn: no grant lists, grants are published */
    NULL, /* sem: no semaphores */
    NULL, NULL, /* sem_info, sem_admin: no semaphores */
    NULL, /* waits: no waiters kept (no deadlock detection) */
    NULL, NULL, /* stats_add, stats_read: no live figures */
    NULL, /* range: no record-lock range tables */
    NULL, /* release_send: unlocks wait for their answer */
    NULL, /* lvb_read: no value blocks */
    NULL  /* convert: no lock conversion (ENOTSUP) */
};

const dlock__backend_ops *fk_ops_table(void) {
    return &fk_ops;
}

/* ---------------------------------------------------------- subscriber */

static pthread_mutex_t subs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dlock_client *subs[FK_CLIENTS];

/* What notify.c's on_message does with a message on l's channel.
 * c->mu held. */
static void deliver(struct dlock_client *c, dlock__lock *l, const char *p) {
    size_t n = strlen(p);
    if (strcmp(p, "wanted") == 0) {
        l->wanted = 1;
        if (dlock__hold_is_cached(&l->x)) dlock__renew_kick(c);
    } else if (n > DLOCK__OWNER_LEN && p[DLOCK__OWNER_LEN] == ':') {
        char tok[TOKLEN];
        uint64_t fence;
        unsigned ms;
        int cache;
        memcpy(tok, p, DLOCK__OWNER_LEN);
        tok[DLOCK__OWNER_LEN] = '\0';
        if (dlock__grant_parse(p + DLOCK__OWNER_LEN + 1, n - DLOCK__OWNER_LEN - 1, &fence, &ms, &cache) == 0)
            dlock__fair_grant(l, tok, fence, ms, cache);
        else
            dlock__fair_poke(l, tok, DLOCK__OWNER_LEN);
    } else {
        l->gen++;
        dlock__lock_wake(l);
        dlock__fair_poke(l, NULL, 0);
    }
}

/* Calls fn on every lock of c's table.  c->mu held. */
static void each_lock(struct dlock_client *c, void (*fn)(struct dlock_client *, dlock__lock *, const void *),
                      const void *arg) {
    size_t i;
    dlock__lock *l, *next;
    for (i = 0; i < c->nbuckets; i++)
        for (l = c->buckets[i]; l != NULL; l = next) {
            next = l->hnext;
            fn(c, l, arg);
        }
}

static void deliver_if(struct dlock_client *c, dlock__lock *l, const void *arg) {
    const char *const *km = arg; /* key, message */
    if (l->kind == DLOCK__KIND_LOCK && strcmp(l->k.key, km[0]) == 0 && dlock__sub_live(c, l)) deliver(c, l, km[1]);
}

/* The server publishes msg on key's channel: heard by every attached
 * client subscribed to it. */
static void publish(const char *key, const char *msg) {
    const char *km[2] = { key, msg };
    int i;
    pthread_mutex_lock(&subs_mu);
    for (i = 0; i < FK_CLIENTS; i++) {
        if (subs[i] == NULL) continue;
        pthread_mutex_lock(&subs[i]->mu);
        each_lock(subs[i], deliver_if, km);
        pthread_mutex_unlock(&subs[i]->mu);
    }
    pthread_mutex_unlock(&subs_mu);
}

/* A sweep: every subscription asked for is confirmed, every one given
 * up ends.  c->mu held. */
static void sweep(struct dlock_client *c, dlock__lock *l, const void *arg) {
    (void)arg;
    if (l->sub_state == DLOCK__SUB_WANTED || l->sub_state == DLOCK__SUB_SENT) {
        l->sub_state = DLOCK__SUB_ACTIVE;
        l->sub_node = &c->sub;
        l->sub_idle_since = 0;
        dlock__lock_wake(l);
    }
}

/* The subscriber thread: woken by the eventfd that want() pokes. */
static void *sub_main(void *arg) {
    struct dlock_client *c = arg;
    for (;;) {
        struct pollfd p = { c->sub.wakefd, POLLIN, 0 };
        uint64_t v;
        if (poll(&p, 1, 50) > 0) (void)!read(c->sub.wakefd, &v, sizeof v); /* drains the pokes */
        pthread_mutex_lock(&c->mu);
        if (c->sub.stop) {
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        each_lock(c, sweep, NULL);
        pthread_mutex_unlock(&c->mu);
    }
}

/* ------------------------------------------------------------- control */

void fk_reset(int queues) {
    pthread_mutex_lock(&fk_mu);
    fk.nlocks = fk.nfaults = 0;
    memset(fk.counts, 0, sizeof fk.counts);
    fk.renew_refuse = 0;
    fk.last_flags = fk.last_how = -1;
    fk.last_token[0] = '\0';
    fk_ops.queues = queues;
    pthread_mutex_unlock(&fk_mu);
}

void fk_script(int op, int fault, long arg) {
    pthread_mutex_lock(&fk_mu);
    if (fk.nfaults == FK_FAULTS) abort();
    fk.faults[fk.nfaults].op = op;
    fk.faults[fk.nfaults].fault = fault;
    fk.faults[fk.nfaults++].arg = arg;
    pthread_mutex_unlock(&fk_mu);
}

void fk_renew_refuse(int on) {
    pthread_mutex_lock(&fk_mu);
    fk.renew_refuse = on;
    pthread_mutex_unlock(&fk_mu);
}

int fk_count(int op) {
    int n;
    pthread_mutex_lock(&fk_mu);
    n = fk.counts[op];
    pthread_mutex_unlock(&fk_mu);
    return n;
}

int fk_last_flags(void) {
    int v;
    pthread_mutex_lock(&fk_mu);
    v = fk.last_flags;
    pthread_mutex_unlock(&fk_mu);
    return v;
}

int fk_last_how(void) {
    int v;
    pthread_mutex_lock(&fk_mu);
    v = fk.last_how;
    pthread_mutex_unlock(&fk_mu);
    return v;
}

void fk_last_release_token(char *out) {
    pthread_mutex_lock(&fk_mu);
    memcpy(out, fk.last_token, TOKLEN);
    pthread_mutex_unlock(&fk_mu);
}

static void key_of(const char *name, char *key, size_t cap) {
    snprintf(key, cap, "dlock:{%s}", name);
}

int fk_owner(const char *name, char *token_out) {
    char key[256];
    fk_lock *L;
    int held;
    key_of(name, key, sizeof key);
    pthread_mutex_lock(&fk_mu);
    L = find(key);
    expire(L, dlock__now());
    held = L->owner[0] != '\0';
    if (held && token_out != NULL) memcpy(token_out, L->owner, TOKLEN);
    pthread_mutex_unlock(&fk_mu);
    return held;
}

uint64_t fk_fence(const char *name) {
    char key[256];
    uint64_t f;
    key_of(name, key, sizeof key);
    pthread_mutex_lock(&fk_mu);
    f = find(key)->fence;
    pthread_mutex_unlock(&fk_mu);
    return f;
}

int fk_queued(const char *name) {
    char key[256];
    int n;
    key_of(name, key, sizeof key);
    pthread_mutex_lock(&fk_mu);
    n = find(key)->nqueue;
    pthread_mutex_unlock(&fk_mu);
    return n;
}

int fk_other_acquire(const char *name, const char *token, unsigned lease_ms, int robust, int queue) {
    char key[256];
    dlock__acq a;
    int wanted = 0;
    int flags = (robust ? DLOCK__F_ROBUST : 0) | (queue ? DLOCK__F_WAIT | DLOCK__F_FAIR : 0);
    memset(&a, 0, sizeof a);
    key_of(name, key, sizeof key);
    pthread_mutex_lock(&fk_mu);
    serve_acquire(find(key), token, lease_ms, flags, &a, &wanted);
    pthread_mutex_unlock(&fk_mu);
    if (wanted) publish(key, "wanted");
    return a.status == DLOCK__ACQ_BUSY ? EBUSY : 0;
}

int fk_other_release(const char *name, const char *token, int how) {
    char key[256], msg[128];
    int released;
    key_of(name, key, sizeof key);
    pthread_mutex_lock(&fk_mu);
    serve_release(find(key), token, how, 0, &released, msg, sizeof msg);
    pthread_mutex_unlock(&fk_mu);
    if (msg[0]) publish(key, msg);
    return released ? 0 : EPERM;
}

/* ------------------------------------------------------------- clients */

int fk_client_new(dlock_client_t **out, unsigned unreachable_ms, unsigned breaker_ms) {
    dlock_config_t cfg;
    struct dlock_client *c;
    int rc, i;
    dlock_config_init(&cfg);
    cfg.url = "redis://127.0.0.1:1"; /* never connected to */
    cfg.prefix = "dlock:";
    cfg.unreachable_ms = unreachable_ms;
    cfg.breaker_ms = breaker_ms;
    if ((rc = dlock_client_create(out, &cfg)) != 0) return rc;
    c = *out;
    pthread_mutex_lock(&c->mu);
    c->be.ops = &fk_ops;
    c->sub.wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->sub.connected = 1;
    c->sub.epoch = 1000;
    c->sub.stop = 0;
    rc = c->sub.wakefd < 0 ? EAGAIN : dlock__thread_start(&c->sub.thread, sub_main, c, NULL);
    c->sub.running = rc == 0;
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) {
        (void)fk_client_free(c);
        return rc;
    }
    pthread_mutex_lock(&subs_mu);
    for (i = 0; i < FK_CLIENTS && subs[i] != NULL; i++)
        ;
    if (i == FK_CLIENTS) abort();
    subs[i] = c;
    pthread_mutex_unlock(&subs_mu);
    return 0;
}

int fk_client_free(dlock_client_t *c) {
    int i;
    pthread_mutex_lock(&subs_mu);
    for (i = 0; i < FK_CLIENTS; i++)
        if (subs[i] == c) subs[i] = NULL;
    pthread_mutex_unlock(&subs_mu);
    return dlock_client_destroy(c); /* stops the subscriber (notify.c stop_one joins it) */
}

int fk_sub_wait(dlock_client_t *c, const char *name, int timeout_ms) {
    dlock__mono end = dlock__now() + (dlock__mono)timeout_ms * DLOCK__MS;
    int live = 0;
    for (;;) {
        dlock__lock *l;
        pthread_mutex_lock(&c->mu);
        l = dlock__lock_find(c, name, strlen(name), DLOCK__KIND_LOCK);
        live = l != NULL && dlock__sub_live(c, l);
        pthread_mutex_unlock(&c->mu);
        if (live || dlock__now() >= end) return live;
        sleep_ms(1);
    }
}
