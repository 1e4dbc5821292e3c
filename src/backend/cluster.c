/* cluster.c -- the Redis Cluster backend: each lock on the master that
 * serves its slot.
 *
 * Every key of a lock is <prefix>{<name>}...: the braces are a hash tag,
 * so all of them, its release channel and its condition variable live in
 * one slot, on one master, and the scripts run there as on one server.
 * The deployment keeps the slot map (16384 slots -> node) and one member
 * per node, a single-server backend of its own (its own node, pool, mutex
 * and renewal connection: deploy.c), made as the map names nodes and kept
 * until the deployment is freed, so a pointer to one stays good.
 *
 * The map is read with CLUSTER SLOTS from any node that answers (the
 * nodes of the URL first), when a slot is not known and after a node could
 * not be reached.  A MOVED answer updates the slot at once and the request
 * goes to the node it names; an ASK answer sends it there once, after
 * ASKING (cmd.c follows both, up to 16 in a row, through the nodes'
 * `redirect` hook: cluster_hooks, below).  While a slot migrates
 * its multi-key requests may get TRYAGAIN (some of the lock's keys moved,
 * some not): they are asked again, with a short back-off, until the
 * migration ends or the caller's bound passes.
 *
 * Renewal goes to each master in its own pipelined batches; a renewal
 * answered MOVED or ASK is sent again by itself, following it, and so is
 * one a node did not answer when a map read anew names another master
 * for its slot (a replica took over).  A renewal
 * names one key (the lock, or its readers), so it is served wherever that
 * key is during a migration.
 *
 * Release notifications: on a cluster the scripts SPUBLISH (sharded
 * pub/sub), and each node has its own subscriber (core/notify.c, the
 * member's `up`).
 *
 * The restart guard keeps its marker per lock (<prefix>{<name>}:epoch):
 * a deployment-wide key would be in another slot than the lock's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"

#define SLOTS 16384
#define MEMBERS_MAX 1024
/* A full map is read at most this often when nodes cannot be reached. */
#define REFRESH_MIN_MS 50

struct dlock__cluster {
    unsigned short owner[SLOTS]; /* 1 + index into the parent's members; 0: not known */
    size_t cap;                  /* room in the members array */
    dlock__mono refreshed;       /* when CLUSTER SLOTS was last read whole */
    int refused;                 /* every node asked at the last reading refused us for good */
};

/* CRC16-CCITT (XModem: polynomial 0x1021, initial 0), as the cluster
 * hashes keys. */
static unsigned crc16(const char *s, size_t n) {
    unsigned crc = 0;
    size_t i;
    int b;
    for (i = 0; i < n; i++) {
        crc ^= (unsigned)(unsigned char)s[i] << 8;
        for (b = 0; b < 8; b++) crc = (crc & 0x8000 ? crc << 1 ^ 0x1021 : crc << 1) & 0xffff;
    }
    return crc;
}

unsigned dlock__key_slot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len), *close;
    if (open != NULL) {
        close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
        if (close != NULL && close > open + 1) return crc16(open + 1, (size_t)(close - open - 1)) & (SLOTS - 1);
    }
    return crc16(key, len) & (SLOTS - 1);
}

static int cl_state(dlock__backend *c) {
    if (c->cl != NULL) return 0;
    pthread_mutex_lock(c->node.mu);
    if (c->cl == NULL && (c->cl = calloc(1, sizeof *c->cl)) != NULL) c->cl->cap = c->nmembers;
    pthread_mutex_unlock(c->node.mu);
    return c->cl != NULL ? 0 : dlock__seterr(ENOMEM, "out of memory");
}

void dlock__cluster_free(dlock__backend *c) {
    free(c->cl);
    c->cl = NULL;
}

/* The index of the member for host:port, or -1.  c's mutex held. */
static long member_find(const dlock__backend *c, const char *host, int port) {
    size_t i;
    for (i = 0; i < c->nmembers; i++)
        if (c->members[i]->node.conf.ep.port == port && strcmp(c->members[i]->node.conf.ep.host, host) == 0) return (long)i;
    return -1;
}

/* The index of the member for host:port, made if there is none yet; -1
 * with the error set.  c's mutex NOT held (making a member reads its TLS
 * files). */
static long member_get(dlock__backend *c, const char *host, int port) {
    dlock__backend *m = NULL, *extra = NULL;
    dlock__endpoint ep;
    long i;
    int rc;

    if (strlen(host) >= sizeof ep.host || port <= 0 || port > 65535) {
        dlock__seterr(EPROTO, "%s: the cluster named a node with a bad address", c->node.conf.redacted_url);
        return -1;
    }
    pthread_mutex_lock(c->node.mu);
    i = member_find(c, host, port);
    pthread_mutex_unlock(c->node.mu);
    if (i >= 0) return i;
    snprintf(ep.host, sizeof ep.host, "%s", host);
    ep.port = port;
    if ((rc = dlock__backend_member(&m, c, &ep)) != 0) return -1;
    pthread_mutex_lock(c->node.mu);
    if ((i = member_find(c, host, port)) >= 0) {
        extra = m; /* another thread made it first */
    } else if (c->nmembers >= MEMBERS_MAX) {
        extra = m;
        dlock__seterr(ENOLCK, "%s: the cluster has more than %d nodes", c->node.conf.redacted_url, MEMBERS_MAX);
    } else {
        if (c->nmembers == c->cl->cap) {
            size_t ncap = c->cl->cap ? c->cl->cap * 2 : 8;
            dlock__backend **nm = realloc(c->members, ncap * sizeof *nm);
            if (nm == NULL) {
                pthread_mutex_unlock(c->node.mu);
                dlock__backend_free(m);
                free(m);
                dlock__seterr(ENOMEM, "out of memory");
                return -1;
            }
            c->members = nm;
            c->cl->cap = ncap;
        }
        i = (long)c->nmembers;
        c->members[c->nmembers++] = m;
    }
    pthread_mutex_unlock(c->node.mu);
    if (extra != NULL) {
        dlock__backend_free(extra);
        free(extra);
    }
    return i;
}

/* One slot range of a CLUSTER SLOTS answer, checked. */
typedef struct range {
    long long lo, hi;
    const char *host;
    int port;
} range;

static int range_parse(const redisReply *e, const dlock__backend *asked, range *out) {
    const redisReply *node;
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY)
        return -1;
    node = e->element[2];
    if (node->elements < 2 || node->element[0]->type != REDIS_REPLY_STRING ||
        node->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    out->lo = e->element[0]->integer;
    out->hi = e->element[1]->integer;
    if (out->lo < 0 || out->hi >= SLOTS || out->lo > out->hi || node->element[1]->integer <= 0 ||
        node->element[1]->integer > 65535)
        return -1;
    out->port = (int)node->element[1]->integer;
    /* "" or "?": the node does not know its own address; it is the one
     * asked. */
    out->host = node->element[0]->len == 0 || strcmp(node->element[0]->str, "?") == 0 ? asked->node.conf.ep.host
                                                                                     : node->element[0]->str;
    return 0;
}

/* Reads the slot map from the first node that answers.  0, or ENOLCK /
 * EPROTO with the error set. */
static int refresh(dlock__backend *c, dlock__mono deadline) {
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    static const size_t lens[2] = { 7, 5 };
    size_t i, k, n, refused;
    int rc = ENOLCK;

    if ((rc = cl_state(c)) != 0) return rc;
    pthread_mutex_lock(c->node.mu);
    n = c->nmembers;
    pthread_mutex_unlock(c->node.mu);
    dlock__seterr(ENOLCK, "%s: no node of the cluster answered", c->node.conf.redacted_url);
    rc = ENOLCK;
    for (i = 0, refused = 0; i < n; i++) {
        dlock__backend *m;
        redisReply *r = NULL;
        unsigned short *owner;
        range rg;
        dlock__mono asked = dlock__now(), dl = asked + (dlock__mono)c->node.conf.command_timeout_ms * DLOCK__MS;
        pthread_mutex_lock(c->node.mu);
        m = c->members[i];
        pthread_mutex_unlock(c->node.mu);
        if (dlock__command(&m->node, &r, dl < deadline ? dl : deadline, 0, 2, argv, lens, NULL) != 0) {
            /* (a scheme mismatch, a certificate, credentials: conn.c) */
            if (__atomic_load_n(&m->node.refused, __ATOMIC_ACQUIRE) >= asked) refused++;
            continue;
        }
        if (r->type != REDIS_REPLY_ARRAY) {
            rc = r->type == REDIS_REPLY_ERROR && strstr(r->str, "cluster support disabled") != NULL
                     ? dlock__seterr(EINVAL, "%s: %s:%d is not a cluster node (redis+cluster:// is for a Redis "
                                     "Cluster; use redis:// for one server)", c->node.conf.redacted_url, m->node.conf.ep.host,
                                     m->node.conf.ep.port)
                     : dlock__seterr(EPROTO, "%s: unexpected answer to CLUSTER SLOTS", m->node.conf.redacted_url);
            freeReplyObject(r);
            continue;
        }
        /* Make the members first (no lock held), then fill a new map. */
        for (k = 0; k < r->elements; k++) {
            if (range_parse(r->element[k], m, &rg) != 0) break;
            if (member_get(c, rg.host, rg.port) < 0) break;
        }
        if (k < r->elements) {
            if (range_parse(r->element[k], m, &rg) != 0)
                rc = dlock__seterr(EPROTO, "%s: unexpected answer to CLUSTER SLOTS", m->node.conf.redacted_url);
            freeReplyObject(r);
            continue;
        }
        if ((owner = calloc(SLOTS, sizeof *owner)) == NULL) {
            freeReplyObject(r);
            return dlock__seterr(ENOMEM, "out of memory");
        }
        pthread_mutex_lock(c->node.mu);
        for (k = 0; k < r->elements; k++) {
            long idx, s;
            (void)range_parse(r->element[k], m, &rg);
            if ((idx = member_find(c, rg.host, rg.port)) < 0) continue;
            for (s = rg.lo; s <= rg.hi; s++) owner[s] = (unsigned short)(idx + 1);
        }
        memcpy(c->cl->owner, owner, sizeof c->cl->owner);
        c->cl->refreshed = dlock__now();
        c->cl->refused = 0;
        pthread_mutex_unlock(c->node.mu);
        free(owner);
        freeReplyObject(r);
        dlock__clearerr();
        return 0;
    }
    /* Every node refused us for good: asking again within this call
     * cannot mend it (again() stops); the next call asks anew. */
    pthread_mutex_lock(c->node.mu);
    c->cl->refused = n > 0 && refused == n;
    pthread_mutex_unlock(c->node.mu);
    return rc;
}

/* The member serving `slot`, reading the map if it does not say. */
static int route(dlock__backend *c, unsigned slot, dlock__backend **m, dlock__mono deadline) {
    int rc, pass;
    for (pass = 0; pass < 2; pass++) {
        unsigned short o = 0;
        if ((rc = cl_state(c)) != 0) return rc;
        pthread_mutex_lock(c->node.mu);
        if ((o = c->cl->owner[slot]) != 0) *m = c->members[o - 1];
        pthread_mutex_unlock(c->node.mu);
        if (o != 0) return 0;
        if (pass == 0 && (rc = refresh(c, deadline)) != 0) return rc;
    }
    return dlock__seterr(ENOLCK, "%s: no node of the cluster serves slot %u", c->node.conf.redacted_url, slot);
}

void dlock__cluster_refresh_maybe(dlock__backend *c, dlock__mono deadline) {
    char saved[512];
    dlock__mono last;
    pthread_mutex_lock(c->node.mu);
    last = c->cl != NULL ? c->cl->refreshed : 0;
    pthread_mutex_unlock(c->node.mu);
    if (dlock__now() - last < (dlock__mono)REFRESH_MIN_MS * DLOCK__MS) return;
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    (void)refresh(c, deadline);
    dlock__restoreerr(saved);
}

/* A request to slot's master failed with rc: is it worth asking again?
 * Only when the node could not be reached (not when a request asked once
 * -- a reset -- went unanswered), while not every node refused us for good,
 * and time is left for a back-off: after it the map is read again (a
 * replica may have taken over meanwhile) and the caller asks. */
static int again(dlock__backend *c, int rc, int unknown, dlock__mono deadline, dlock__backoff *bo) {
    int refused;
    pthread_mutex_lock(c->node.mu);
    refused = c->cl != NULL && c->cl->refused;
    pthread_mutex_unlock(c->node.mu);
    if (rc != ENOLCK || refused || unknown || dlock__backoff_sleep(bo, deadline) != 0) return 0;
    dlock__cluster_refresh_maybe(c, deadline);
    return 1;
}

static unsigned lock_slot(const dlock__keys *k) {
    return dlock__key_slot(k->key, k->keylen);
}

/* Runs `call` on the master of `slot`, asking again while again() says
 * so.  rc is set by call, which may use m and set st_ (what its request
 * came to: a reset that went out unanswered is not asked again; st_'s
 * maybe_ran, never cleared here, counts every attempt). */
#define ON_SLOT(c, slot, deadline, call)                                  \
    do {                                                                  \
        dlock__backoff bo_;                                               \
        dlock__backend *m;                                           \
        dlock__backoff_init(&bo_, DLOCK__BACKOFF_MIN_MS, DLOCK__BACKOFF_MAX_MS); \
        do {                                                              \
            st_.unknown = 0;                                              \
            rc = route((c), (slot), &m, (deadline));                      \
            if (rc == 0) rc = (call);                                     \
        } while (rc != 0 && again((c), rc, st_.unknown, (deadline), &bo_)); \
    } while (0)

static int cl_acquire(dlock__backend *c, const dlock__keys *k, const char *token, unsigned lease_ms, int flags,
                      dlock__acq *out, dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_backend.acquire(m, k, token, lease_ms, flags, out, deadline));
    return rc;
}

static int cl_release(dlock__backend *c, const dlock__keys *k, const char *token, int how, int *released,
                      dlock__sent *sent, dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_backend.release(m, k, token, how, released, &st_, deadline));
    if (sent != NULL) *sent = st_;
    return rc;
}

static int cl_reset(dlock__backend *c, const dlock__keys *k, int how, int *was_held, dlock__sent *sent,
                    dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_backend.reset(m, k, how, was_held, &st_, deadline));
    if (sent != NULL) *sent = st_;
    return rc;
}

static int cl_fenced_set(dlock__backend *c, const char *key, size_t keylen, uint64_t fence, const void *value,
                         size_t len, int *written, dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, dlock__key_slot(key, keylen), deadline,
            dlock__single_backend.fenced_set(m, key, keylen, fence, value, len, written, deadline));
    return rc;
}

static int cl_lvb_read(dlock__backend *c, const dlock__keys *k, void *buf, size_t *len, int *valid,
                       dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_lvb_read(m, k, buf, len, valid, deadline));
    return rc;
}

static int cl_info(dlock__backend *c, const dlock__keys *k, dlock_lock_info_t *out, dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_backend.info(m, k, out, deadline));
    return rc;
}

static int cl_cond(dlock__backend *c, const dlock__keys *k, const char *op, const char *token, unsigned ttl_ms,
                   const char *const *stale, size_t nstale, long long *result, dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline,
            dlock__single_backend.cond(m, k, op, token, ttl_ms, stale, nstale, result, deadline));
    return rc;
}

static int cl_sem(dlock__backend *c, const dlock__keys *k, const char *op, const char *token, unsigned ttl_ms,
                  long long arg, unsigned lease_ms, long long remake, long long *result, dlock__sent *sent,
                  dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline,
            dlock__single_backend.sem(m, k, op, token, ttl_ms, arg, lease_ms, remake, result, &st_, deadline));
    if (sent != NULL) *sent = st_;
    return rc;
}

static int cl_sem_info(dlock__backend *c, const dlock__keys *k, unsigned max, dlock__sem_state *out,
                       dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_sem_info(m, k, max, out, deadline));
    return rc;
}

/* Asked once, as a reset is: a request that went out unanswered is not
 * sent again. */
static int cl_sem_admin(dlock__backend *c, const dlock__keys *k, int how, long long *result, dlock__sent *sent,
                        dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_sem_admin(m, k, how, result, &st_, deadline));
    if (sent != NULL) *sent = st_;
    return rc;
}

/* A waits op: on the lock's slot, or on the edge key's (the slot of
 * the holder token, its hash tag). */
static int cl_waits(dlock__backend *c, const dlock__keys *k, const char *op, const char *id, const char *rec,
                    unsigned ttl_ms, dlock__strs *out, dlock__mono deadline) {
    char tag[DLOCK__OWNER_LEN + 3];
    int rc, n;
    unsigned slot;
    dlock__sent st_ = { 0, 0, 0 };
    if (k != NULL) {
        slot = lock_slot(k);
    } else {
        n = snprintf(tag, sizeof tag, "{%s}", id);
        slot = dlock__key_slot(tag, n > 0 && (size_t)n < sizeof tag ? (size_t)n : sizeof tag - 1);
    }
    ON_SLOT(c, slot, deadline, dlock__single_backend.waits(m, k, op, id, rec, ttl_ms, out, deadline));
    return rc;
}

/* Renews on each master the holds whose slots it serves, in its own
 * batches; then those a node sent elsewhere (their slot moved, or is
 * moving), one by one, following the redirection. */
static int cl_renew(dlock__backend *c, dlock__renewal *rn, size_t n, dlock__mono deadline) {
    dlock__renewal *tmp;
    dlock__backend **who, **used;
    size_t *idx, j, k, todo = 0;
    int failed = 0;

    if (n == 0) return 0;
    tmp = malloc(n * sizeof *tmp);
    idx = malloc(n * sizeof *idx);
    who = malloc(n * sizeof *who);
    used = malloc(n * sizeof *used);
    if (tmp == NULL || idx == NULL || who == NULL || used == NULL) {
        free(tmp);
        free(idx);
        free(who);
        free(used);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    for (j = 0; j < n; j++) {
        rn[j].result = -1;
        rn[j].moved = 0;
        if (route(c, lock_slot(rn[j].k), &who[j], deadline) == 0) todo++;
        else who[j] = NULL;
        used[j] = who[j];
    }
    while (todo > 0) {
        /* The holds of the first master left: one call, its batches. */
        dlock__backend *m = NULL;
        for (j = 0, k = 0; j < n; j++) {
            if (who[j] == NULL || (m != NULL && who[j] != m)) continue;
            m = who[j];
            who[j] = NULL;
            idx[k] = j;
            tmp[k++] = rn[j];
        }
        todo -= k;
        (void)dlock__single_backend.renew(m, tmp, k, deadline);
        for (j = 0; j < k; j++) {
            rn[idx[j]].result = tmp[j].result;
            rn[idx[j]].moved = tmp[j].moved;
        }
    }
    for (j = 0; j < n && !failed; j++) failed = rn[j].result == -1 && !rn[j].moved;
    if (failed) {
        /* A node did not answer: has a replica taken over?  The holds it
         * had go to the slot's master as a map read now has it. */
        dlock__cluster_refresh_maybe(c, deadline);
        for (j = 0; j < n; j++) {
            dlock__backend *m;
            if (rn[j].result == -1 && !rn[j].moved && route(c, lock_slot(rn[j].k), &m, deadline) == 0 && m != used[j])
                rn[j].moved = 1;
        }
    }
    for (j = 0; j < n; j++) {
        dlock__backend *m;
        if (!rn[j].moved || dlock__now() >= deadline) continue;
        rn[j].moved = 0;
        if (route(c, lock_slot(rn[j].k), &m, deadline) == 0) (void)dlock__renew_one(m, &rn[j], deadline);
    }
    free(tmp);
    free(idx);
    free(who);
    free(used);
    return 0;
}

int dlock__cluster_redirect(dlock__backend *m, const redisReply *r, dlock__backend **next, int *asking) {
    dlock__backend *c = m->parent;
    char host[256];
    const char *p, *colon;
    unsigned long slot, port;
    size_t hl;
    char *end;
    long i;
    int ask;

    if (c == NULL || r == NULL || r->type != REDIS_REPLY_ERROR || r->str == NULL) return 0;
    if (strncmp(r->str, "MOVED ", 6) == 0) ask = 0;
    else if (strncmp(r->str, "ASK ", 4) == 0) ask = 1;
    else return 0;
    /* MOVED <slot> <host>:<port> (an empty host: the node answering). */
    p = r->str + (ask ? 4 : 6);
    slot = strtoul(p, &end, 10);
    if (end == p || *end != ' ' || slot >= SLOTS) return 0;
    p = end + 1;
    if ((colon = strrchr(p, ':')) == NULL) return 0;
    port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || port == 0 || port > 65535) return 0;
    hl = (size_t)(colon - p);
    if (hl >= sizeof host) return 0;
    if (hl == 0) snprintf(host, sizeof host, "%s", m->node.conf.ep.host);
    else {
        memcpy(host, p, hl);
        host[hl] = '\0';
    }
    if (cl_state(c) != 0 || (i = member_get(c, host, (int)port)) < 0) return 0;
    pthread_mutex_lock(c->node.mu);
    if (!ask) c->cl->owner[slot] = (unsigned short)(i + 1);
    *next = c->members[i];
    pthread_mutex_unlock(c->node.mu);
    *asking = ask;
    return 1;
}

int dlock__cluster_masters(dlock__backend *c, dlock__backend **out, size_t max, size_t *count,
                           dlock__mono deadline) {
    unsigned char *seen;
    size_t s, n = 0;
    int rc;
    *count = 0;
    if ((rc = refresh(c, deadline)) != 0) return rc;
    pthread_mutex_lock(c->node.mu);
    if ((seen = calloc(c->nmembers, 1)) == NULL) {
        pthread_mutex_unlock(c->node.mu);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    for (s = 0; s < SLOTS; s++) {
        unsigned o = c->cl->owner[s];
        if (o == 0 || seen[o - 1]) continue;
        seen[o - 1] = 1;
        if (n < max) out[n++] = c->members[o - 1];
    }
    pthread_mutex_unlock(c->node.mu);
    free(seen);
    *count = n;
    return 0;
}

dlock__backend *dlock__cluster_node(dlock__backend *c, unsigned slot) {
    unsigned o;
    if (c->node.conf.kind != DLOCK__BACKEND_CLUSTER || c->nmembers == 0) return NULL;
    o = c->cl != NULL && slot < SLOTS ? c->cl->owner[slot] : 0;
    return c->members[o != 0 ? o - 1 : 0];
}

/* The slot's master as the map has it (a refusal, MOVED, makes the
 * waiter publish its grants instead for the rest of its call). */
static int cl_grant_conn(dlock__backend *c, const dlock__keys *k, dlock__node **node, dlock__conn **cn,
                         dlock__mono deadline) {
    dlock__backend *m;
    int rc;
    if ((rc = route(c, lock_slot(k), &m, deadline)) != 0) return rc;
    *node = &m->node;
    return dlock__pool_get(&m->node, cn, deadline);
}

/* Live figures: every one in the slot of <prefix>{dlock-stats}. */
static unsigned stats_slot(const dlock__backend *c, int *err) {
    char *key = dlock__stats_key(c);
    unsigned slot;
    if (key == NULL) {
        *err = dlock__seterr(ENOMEM, "out of memory");
        return 0;
    }
    slot = dlock__key_slot(key, strlen(key));
    free(key);
    *err = 0;
    return slot;
}

static int cl_stats_add(dlock__backend *c, const char *payload, size_t len, dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    unsigned slot = stats_slot(c, &rc);
    if (rc != 0) return rc;
    ON_SLOT(c, slot, deadline, dlock__single_backend.stats_add(m, payload, len, deadline));
    return rc;
}

static int cl_stats_read(dlock__backend *c, unsigned window_s, dlock__figs *out, size_t max, size_t *n,
                         dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    unsigned slot = stats_slot(c, &rc);
    if (rc != 0) return rc;
    ON_SLOT(c, slot, deadline, dlock__single_backend.stats_read(m, window_s, out, max, n, deadline));
    return rc;
}

static int cl_range(dlock__backend *c, const dlock__keys *k, int nargs, const char *const *args, dlock__strs *out,
                    dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_backend.range(m, k, nargs, args, out, deadline));
    return rc;
}

static int cl_convert(dlock__backend *c, const dlock__keys *k, const char *token, unsigned lease_ms, int how,
                      dlock__conv *out, dlock__mono deadline) {
    int rc;
    dlock__sent st_ = { 0, 0, 0 };
    ON_SLOT(c, lock_slot(k), deadline, dlock__single_backend.convert(m, k, token, lease_ms, how, out, deadline));
    return rc;
}

const dlock__backend_ops dlock__cluster_backend = {
    .queues = 1,
    .acquire = cl_acquire,
    .release = cl_release,
    .renew = cl_renew,
    .reset = cl_reset,
    .fenced_set = cl_fenced_set,
    .lvb_read = cl_lvb_read,
    .info = cl_info,
    .cond = cl_cond,
    .sem = cl_sem,
    .sem_info = cl_sem_info,
    .sem_admin = cl_sem_admin,
    .grant_conn = cl_grant_conn,
    .waits = cl_waits,
    .stats_add = cl_stats_add,
    .stats_read = cl_stats_read,
    .range = cl_range,
    .convert = cl_convert,
};

static int node_redirect(dlock__node *n, const redisReply *r, dlock__node **next, int *asking) {
    dlock__backend *m;
    if (dlock__cluster_redirect(n->up, r, &m, asking) != 1) return 0;
    *next = &m->node;
    return 1;
}

const dlock__node_hooks dlock__cluster_hooks = { .redirect = node_redirect };
