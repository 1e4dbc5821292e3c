/* backend.c -- the single-server backend: one server, or the master that
 * Sentinel names.
 *
 * A backend turns "acquire / release / renew this lock (its keys) for this
 * token" into requests to one deployment (dlock__backend, backend.h).
 * The core -- the acquisition, the waiting path, the renewal thread --
 * only ever talks to dlock__backend_ops, so Sentinel, Cluster and a
 * Redlock quorum sit behind the same calls; a Cluster's nodes and a
 * Redlock's masters are single-server backends themselves, run by
 * cluster.c and redlock.c through this file's ops.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "backend/backend.h"

#define RENEW_BATCH 256

int dlock__bad_reply(dlock__backend *c, const char *what, const redisReply *r) {
    /* An answer that is not what the script returns may be another
     * request's (a server or proxy out of step): drop the idle
     * connections rather than read more answers from them. */
    dlock__pool_flush(&c->node);
    if (r != NULL && r->type == REDIS_REPLY_ERROR &&
        (strncmp(r->str, "NOPERM", 6) == 0 || strstr(r->str, "can't run this command") != NULL))
        return dlock__seterr(EPROTO, "%s: %s refused by the server's ACL (see \"Running as a minimal ACL "
                             "user\" in the README): %.200s", c->node.conf.redacted_url, what, r->str);
    if (r != NULL && r->type == REDIS_REPLY_ERROR)
        return dlock__seterr(EPROTO, "%s: %s failed: %.200s", c->node.conf.redacted_url, what, r->str);
    return dlock__seterr(EPROTO, "%s: unexpected answer to %s", c->node.conf.redacted_url, what);
}

static char host[256];
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_get(void) {
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "unknown");
    host[sizeof host - 1] = '\0';
}

/* This host's name, for the holder metadata stored with each lock. */
static const char *host_name(void) {
    pthread_once(&host_once, host_get);
    return host;
}

static long who_pid;           /* dlock__set_who: 0, or the process named */
static unsigned long who_tid;

void dlock__set_who(long pid, unsigned long tid) {
    __atomic_store_n(&who_tid, tid, __ATOMIC_RELAXED);
    __atomic_store_n(&who_pid, pid, __ATOMIC_RELEASE);
}

/* Who holds or waits, as stored with the lock: "host:pid:tid".  Formatted
 * once per thread, and again only when the pid or tid it names changes
 * (in a fork child, after dlock__set_who): not on every request.  The
 * cache is the calling thread's; *out points into it, valid until the
 * thread's next call that finds the pid or tid changed. */
static __thread struct who_cache {
    long pid;
    unsigned long tid;
    size_t len; /* 0: not made yet */
    char s[320];
} who_cache;

static size_t who_num(char *out, long long v) {
    if (v >= 0) return dlock__dec(out, (unsigned long long)v);
    out[0] = '-';
    return 1 + dlock__dec(out + 1, 0ull - (unsigned long long)v);
}

/* "host:pid:tid" into out (320 bytes: the host name is under 256);
 * its length. */
static size_t who_format(char *out, long pid, unsigned long tid) {
    const char *h = host_name();
    size_t n = strlen(h); /* < 256 (host_get) */
    memcpy(out, h, n);
    out[n++] = ':';
    n += who_num(out + n, pid);
    out[n++] = ':';
    n += dlock__dec(out + n, tid);
    out[n] = '\0';
    return n;
}

static size_t who(const dlock__thread *self, const char **out) {
    struct who_cache *w = &who_cache;
    long pid = __atomic_load_n(&who_pid, __ATOMIC_ACQUIRE);
    unsigned long tid;
    if (pid > 0) {
        tid = __atomic_load_n(&who_tid, __ATOMIC_RELAXED);
    } else {
        pid = (long)dlock__pid();
        tid = self ? self->tid : 0ul;
    }
    if (w->len == 0 || w->pid != pid || w->tid != tid) {
        size_t n = who_format(w->s, pid, tid);
        w->pid = pid;
        w->tid = tid;
        w->len = n;
    }
    *out = w->s;
    return w->len;
}

/* Fills args with the KEYS of a lock script; returns their number.  On
 * Redis Cluster: the lock's keys (DLOCK__K_* order) and its epoch key,
 * all declared, so that a slot in migration redirects the request before
 * the script runs.  On one server: the lock key, and the deployment's
 * epoch key when the script needs it (epoch: an acquire with the restart
 * guard on); the script makes the others from the lock key
 * (lua/includes/keys.lua). */
static int lock_keys(const dlock__backend *c, const dlock__keys *k, int epoch, const char **args, size_t *lens) {
    int i;
    if (!c->node.conf.cluster) {
        args[0] = k->keys[DLOCK__K_LOCK];
        lens[0] = k->keylens[DLOCK__K_LOCK];
        if (!epoch) return 1;
        args[1] = c->epoch_key;
        lens[1] = strlen(c->epoch_key);
        return 2;
    }
    for (i = 0; i <= DLOCK__NKEYS; i++) { /* the epoch key too: one per lock, in its slot */
        args[i] = k->keys[i];
        lens[i] = k->keylens[i];
    }
    return DLOCK__NKEYS + 1;
}

static const char *const release_how[] = { "plain", "clean", "inconsistent", "dead", "shared", "withdraw", "hash", "undo" };

#define ARG(a, s) ((a)->v[(a)->n] = (s), (a)->len[(a)->n] = strlen((a)->v[(a)->n]), (a)->n++)
/* a one-character flag ("0", "1", "2"), its length known */
#define ARG1(a, s) ((a)->v[(a)->n] = (s), (a)->len[(a)->n] = 1, (a)->n++)
/* a number, in the buffer buf of a */
#define ARGN(a, buf, x) ((a)->len[(a)->n] = dlock__dec((a)->buf, (x)), (a)->buf[(a)->len[(a)->n]] = '\0', \
                         (a)->v[(a)->n] = (a)->buf, (a)->n++)

/* Pushes a->ident as an argument: its first n bytes, written by the
 * caller, then a space and the calling thread's host:pid:tid. */
static void arg_ident(dlock__args *a, size_t n) {
    const char *id;
    size_t idl = who(dlock__self_peek(), &id);
    a->ident[n++] = ' ';
    memcpy(a->ident + n, id, idl + 1);
    a->v[a->n] = a->ident;
    a->len[a->n++] = n + idl;
}

int dlock__acquire_args(dlock__backend *c, const dlock__keys *k, const char *token, unsigned lease_ms, int flags,
                        unsigned delay_ms, dlock__args *a) {
    unsigned guard = c->node.conf.restart_guard_ms;
    a->nkeys = a->n = lock_keys(c, k, guard != 0, a->v, a->len);
    ARG(a, token);
    ARGN(a, lease, lease_ms);
    if (!(flags & DLOCK__F_SHARED)) {
        struct timespec now;
        /* "SINCE WHO" below: this host's wall clock in ms */
        clock_gettime(CLOCK_REALTIME, &now);
        a->wall = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
        a->flags[0] = flags & DLOCK__F_ROBUST ? '1' : '0';
        a->flags[1] = flags & DLOCK__F_WAIT ? '1' : '0';
        if (!(flags & DLOCK__F_FAIR)) a->flags[2] = '0';
        else if (flags & DLOCK__F_CACHING) a->flags[2] = flags & DLOCK__F_GRANTLIST ? '4' : '3';
        else a->flags[2] = flags & DLOCK__F_GRANTLIST ? '2' : '1';
        a->flags[3] = flags & DLOCK__F_CACHING ? '1' : '0';
        /* H, for a lock that its script's uncontended path may take (and
         * so takes as the string, found free: the next call pipelines) */
        a->flags[4] = '\0';
        if ((flags & (DLOCK__F_HELD | DLOCK__F_ROBUST | DLOCK__F_CACHING)) == DLOCK__F_HELD && guard == 0)
            a->flags[4] = '2';
        a->flags[5] = '\0';
        /* L, in the entry of a caller that queues (release.lua; its
         * since, dlock__acquire_since) */
        a->len[a->n] = a->flags[4] != '\0' ? 5 : 4;
        if ((flags & (DLOCK__F_FAIR | DLOCK__F_WAIT)) == (DLOCK__F_FAIR | DLOCK__F_WAIT)) {
            if (a->flags[4] == '\0') a->flags[4] = '0';
            a->flags[5] = !(flags & DLOCK__F_LISTED) ? '0' : flags & DLOCK__F_DETECTS ? '2' : '1';
            a->flags[6] = '\0';
            a->len[a->n] = 6;
        }
        a->v[a->n++] = a->flags;
        /* "SINCE WHO": this host's wall clock in ms, host:pid:tid */
        arg_ident(a, dlock__dec(a->ident, a->wall));
        if (guard != 0 || delay_ms != 0) ARGN(a, guard, guard);
        if (delay_ms != 0) ARGN(a, delay, delay_ms); /* [6]; [5] "0" keeps it off the string form */
    } else {
        ARGN(a, guard, guard);
        ARG1(a, flags & DLOCK__F_READFIRST ? "1" : "0");
    }
    return flags & DLOCK__F_SHARED ? DLOCK__SCRIPT_ACQUIRE_SHARED : DLOCK__SCRIPT_ACQUIRE;
}

void dlock__acquire_since(dlock__args *a, int flags, dlock__acq *io) {
    const int want = DLOCK__F_FAIR | DLOCK__F_WAIT | DLOCK__F_LISTED;
    size_t *len = &a->len[a->nkeys + 2];
    if ((flags & (want | DLOCK__F_SHARED)) != want) return;
    if (io->since_ms == 0) io->since_ms = a->wall - (io->age_ms < a->wall ? io->age_ms : 0);
    *len += dlock__dec(a->flags + *len, io->since_ms);
    a->flags[*len] = '\0';
}

void dlock__release_args(dlock__backend *c, const dlock__keys *k, const char *token, int how, dlock__args *a) {
    size_t n = strlen(release_how[how]);
    a->nkeys = a->n = lock_keys(c, k, 0, a->v, a->len);
    ARG(a, token);
    /* "HOW WINDOW WHO": how the hold ends, the handoff window ms, the releaser */
    memcpy(a->ident, release_how[how], n);
    a->ident[n++] = ' ';
    arg_ident(a, n + dlock__dec(a->ident + n, c->node.conf.handoff_ms));
    /* [3]: the value block its holder set, written with the hold's end */
    if (k->lvb_pending && how != DLOCK__REL_SHARED && how != DLOCK__REL_WITHDRAW) {
        a->v[a->n] = (const char *)k->lvb;
        a->len[a->n++] = k->lvblen;
    }
}
#undef ARGN
#undef ARG1
#undef ARG

static int single_release(dlock__backend *c, const dlock__keys *k, const char *token, int how,
                          int *released, dlock__sent *sent, dlock__mono deadline);

/* wait=N: a grant that fewer than N replicas acknowledged could be lost
 * in a failover; it does not count, and is given back at once.  The
 * acquisition is then made again, as for a server that does not answer,
 * until the deadline (the caller's, or the unreachable bound): replicas
 * that lag for a moment do not fail a lock call. */
#define UNACKED_BACKOFF_MS 50u
/* Longer steps than the library's (DLOCK__BACKOFF_*): each retry grants,
 * waits up to wait_timeout_ms for the replicas and gives back, so costs
 * the master and every replica a write; and replicas lag by tens to
 * hundreds of ms, so a quick retry mostly finds the same lag. */
#define UNACKED_BACKOFF_MAX_MS 500u

/* plain_acquire's answer when the script must decide. */
#define PLAIN_ASK (-1)

/* The fence from fence_next.lua's answer r in the pipeline; a server
 * that did not know the script (NOSCRIPT: restarted or flushed) is asked
 * again, by script_run, which loads it.  0, or -1: no fence. */
static int plain_fence(dlock__backend *c, const dlock__keys *k, const redisReply *r, uint64_t *fence,
                       dlock__mono deadline) {
    redisReply *again = NULL;
    const char *fk = k->keys[DLOCK__K_FENCE];
    size_t fkl = k->keylens[DLOCK__K_FENCE];
    int ok;
    if (r->type == REDIS_REPLY_STRING) return dlock__u64_parse(r->str, r->len, fence) == 0 && *fence != 0 ? 0 : -1;
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "NOSCRIPT", 8) != 0) return -1;
    if (dlock__script_run(c, DLOCK__SCRIPT_FENCE_NEXT, &again, deadline, 1, 1, &fk, &fkl, NULL) != 0) return -1;
    ok = again->type == REDIS_REPLY_STRING && dlock__u64_parse(again->str, again->len, fence) == 0 && *fence != 0;
    freeReplyObject(again);
    return ok ? 0 : -1;
}

/* The uncontended path, pipelined, on one server (or Sentinel's master):
 * the raw pair's SET NX PX, of the string form "TOKEN - SINCE WHO" (no
 * fence kept: it is not known yet) with the lease as its expiry, then
 * EXISTS of the readers, waiting writers, handoff and queue keys and the
 * value block, then fence_next.lua (EVALSHA), which issues the
 * fence as every acquire does
 * -- written at once, one round trip.  Taken, with none of those keys
 * there: held, that answer its fence (a server that does not know the
 * script yet is asked once more by plain_fence).  Taken, but one of them
 * was there (the SET and the EXISTS are not one step: whatever came
 * between them found the string held, and waits), or no fence came back:
 * PLAIN_ASK with *mine set -- the script takes the string back and
 * decides (acquire.lua's flag V).  Not taken: PLAIN_ASK, the script
 * decides (it answers who holds it, and registers a caller that waits).
 * Else 0 (answered) or an errno.  A failed attempt's fence is only
 * skipped: fences need to increase, not to be dense. */
static int plain_acquire(dlock__backend *c, const dlock__keys *k, const char *token, const dlock__args *a,
                         dlock__acq *out, dlock__mono deadline, int *mine) {
    const char *set[6], *ex[6], *fen[4];
    size_t setl[6], exl[6], fenl[4], tl = strlen(token), il = a->len[a->nkeys + 3];
    char val[DLOCK__OWNER_LEN + 3 + sizeof a->ident];
    dlock__req after[2] = { { 6, ex, exl }, { 4, fen, fenl } };
    redisReply *r = NULL, *rs[2];
    dlock__sent st;
    uint64_t fence = 0;
    int rc, i;
    static const int exk[4] = { DLOCK__K_READERS, DLOCK__K_WRITERS, DLOCK__K_HANDOFF, DLOCK__K_QUEUE };

    *mine = 0;
    if (tl > DLOCK__OWNER_LEN) return PLAIN_ASK;
    memcpy(val, token, tl); /* "TOKEN - SINCE WHO": no fence kept */
    memcpy(val + tl, " - ", 3);
    memcpy(val + tl + 3, a->v[a->nkeys + 3], il);
    set[0] = "SET", setl[0] = 3;
    set[1] = k->keys[DLOCK__K_LOCK], setl[1] = k->keylens[DLOCK__K_LOCK];
    set[2] = val, setl[2] = tl + 3 + il;
    set[3] = "NX", setl[3] = 2;
    set[4] = "PX", setl[4] = 2;
    set[5] = a->v[a->nkeys + 1], setl[5] = a->len[a->nkeys + 1];
    ex[0] = "EXISTS", exl[0] = 6;
    for (i = 0; i < 4; i++) ex[1 + i] = k->keys[exk[i]], exl[1 + i] = k->keylens[exk[i]];
    ex[5] = k->lvbkey, exl[5] = k->lvbkeylen; /* a value block: the hold is the hash */
    fen[0] = "EVALSHA", fenl[0] = 7;
    fen[1] = dlock__script_sha(DLOCK__SCRIPT_FENCE_NEXT, 0), fenl[1] = strlen(fen[1]);
    fen[2] = "1", fenl[2] = 1;
    fen[3] = k->keys[DLOCK__K_FENCE], fenl[3] = k->keylens[DLOCK__K_FENCE];

    rc = dlock__command_pipe(&c->node, &r, deadline, 6, set, setl, 2, after, rs, &st);
    if (out->sent < 0 || st.at > out->sent) out->sent = st.at;
    if (rc != 0) return rc;
    if (r->type == REDIS_REPLY_NIL) {
        rc = PLAIN_ASK; /* held: the script says by whom, for how long */
    } else if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        rc = dlock__bad_reply(c, "acquire (SET)", r);
    } else if (rs[0]->type != REDIS_REPLY_INTEGER || rs[0]->integer != 0 ||
               plain_fence(c, k, rs[1], &fence, deadline) != 0) {
        /* others there, or not those commands' answers (refused by an
         * ACL, a fence key of another type): the script takes the string
         * back and decides -- or, meeting the same refusal, fails with
         * it, the string already gone */
        *mine = 1;
        rc = PLAIN_ASK;
    }
    freeReplyObject(r);
    freeReplyObject(rs[0]);
    freeReplyObject(rs[1]);
    if (rc != 0) return rc;
    out->status = DLOCK__ACQ_ACQUIRED;
    out->fence = fence;
    out->plain = 1;
    out->unkept = 1;
    out->pttl_ms = -1;
    out->floor = 0;
    out->others = 0;
    return 0;
}

static int single_acquire(dlock__backend *c, const dlock__keys *k, const char *token,
                          unsigned lease_ms, int flags, dlock__acq *out, dlock__mono deadline) {
    dlock__args a;
    redisReply *r;
    int rc, which = dlock__acquire_args(c, k, token, lease_ms, flags, out->delay_ms, &a);
    dlock__backoff bo;

    if ((flags & (DLOCK__F_PLAIN | DLOCK__F_SHARED | DLOCK__F_ROBUST | DLOCK__F_CACHING)) == DLOCK__F_PLAIN &&
        out->delay_ms == 0 &&
        !c->node.conf.cluster && c->node.conf.wait_replicas == 0 && c->node.conf.restart_guard_ms == 0) {
        int mine;
        if ((rc = plain_acquire(c, k, token, &a, out, deadline, &mine)) != PLAIN_ASK) return rc;
        /* flag V: the string is ours; take it back, then decide.  Else
         * flag H: the SET found the lock held (or was not sent, for a
         * token longer than this library makes: H is then only a wrong
         * guess, which costs the script a call, never a wrong answer). */
        a.flags[4] = mine ? '1' : '2';
        if (a.flags[5] == '\0') a.len[a.nkeys + 2] = 5; /* (L stays) */
    }
    dlock__acquire_since(&a, flags, out); /* the script runs: the entry's since */
    dlock__backoff_init(&bo, UNACKED_BACKOFF_MS, UNACKED_BACKOFF_MAX_MS);
    for (;;) {
        long long acked = -1;
        int how, released;
        dlock__sent st;
        rc = c->node.conf.wait_replicas > 0
                 ? dlock__script_run_wait(c, which, &r, deadline, a.nkeys, a.n, a.v, a.len, &acked, &st)
                 : dlock__script_run(c, which, &r, deadline, a.nkeys, a.n, a.v, a.len, &st);
        /* When the request whose answer this is went out (after retries:
         * LOADING, TRYAGAIN...), or, failed, the latest that went out in
         * any call of this attempt (a cluster asks again): 0 none did. */
        if (out->sent < 0 || st.at > out->sent) out->sent = st.at;
        if (rc != 0) return rc;
        if (dlock__acq_parse(r, out) != 0) rc = dlock__bad_reply(c, "acquire", r);
        freeReplyObject(r);
        if (rc != 0 || c->node.conf.wait_replicas == 0 || acked >= (long long)c->node.conf.wait_replicas ||
            (out->status != DLOCK__ACQ_ACQUIRED && out->status != DLOCK__ACQ_OWNERDEAD &&
             out->status != DLOCK__ACQ_MINE))
            return rc;
        how = dlock__undo_kind(flags & DLOCK__F_SHARED, flags & DLOCK__F_ROBUST);
        (void)single_release(c, k, token, how, &released, NULL, deadline);
        dlock__seterr(ENOLCK, "%s: only %lld of the %u replicas asked for (wait=) acknowledged the "
                      "acquisition within %u ms", c->node.conf.redacted_url, acked < 0 ? 0 : acked,
                      c->node.conf.wait_replicas, c->node.conf.wait_timeout_ms);
        if (dlock__backoff_sleep(&bo, deadline) != 0) return ENOLCK;
    }
}

static int single_release(dlock__backend *c, const dlock__keys *k, const char *token, int how,
                          int *released, dlock__sent *sent, dlock__mono deadline) {
    dlock__args a;
    redisReply *r;
    int rc;

    dlock__release_args(c, k, token, how, &a);
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_RELEASE, &r, deadline, a.nkeys, a.n, a.v, a.len, sent)) != 0) return rc;
    if (dlock__release_parse(r, released) != 0) rc = dlock__bad_reply(c, "release", r);
    freeReplyObject(r);
    return rc;
}

/* The pipelined release's answer, parsed for its record: 0, 1, or 2
 * (released, and a waiter told: release.lua's answer to a "how" in
 * capitals); anything else (NOSCRIPT from a server that restarted, an
 * error) is as good as none -- the release is asked again by its caller. */
static void release_heard(void *arg, redisReply *r, int what) {
    dlock__relsend *rs = arg;
    int released = 0;
    if (what == DLOCK__OWED_FORGET) rs->done(rs, -1, 0);
    else if (what != DLOCK__OWED_ANSWER || dlock__release_parse(r, &released) != 0) rs->done(rs, ENOLCK, 0);
    else rs->done(rs, 0, released);
}

static int single_release_send(dlock__backend *c, const dlock__keys *k, const char *token, int how,
                               dlock__relsend *rs, dlock__mono deadline) {
    dlock__args a;
    dlock__release_args(c, k, token, how, &a);
    a.ident[0] = (char)(a.ident[0] - 'a' + 'A'); /* "PLAIN ...": answer 2 when a waiter is told */
    return dlock__script_send(c, DLOCK__SCRIPT_RELEASE, a.nkeys, a.n, a.v, a.len, rs->hold, release_heard, rs,
                              deadline);
}

static int single_reset(dlock__backend *c, const dlock__keys *k, int how, int *was_held, dlock__sent *sent,
                        dlock__mono deadline) {
    const char *args[DLOCK__NKEYS + 3];
    size_t lens[DLOCK__NKEYS + 3];
    redisReply *r;
    int nk = lock_keys(c, k, 0, args, lens), rc;

    args[nk] = k->key; lens[nk] = k->keylen; /* the release channel */
    args[nk + 1] = how == DLOCK__RESET_FULL ? "reset" : "break"; lens[nk + 1] = 5;
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_RESET, &r, deadline, nk, nk + 2, args, lens, sent)) != 0) return rc;
    if (dlock__flag_parse(r, was_held) != 0) rc = dlock__bad_reply(c, "reset", r);
    freeReplyObject(r);
    return rc;
}

static int single_info(dlock__backend *c, const dlock__keys *k, dlock_lock_info_t *out, dlock__mono deadline) {
    const char *args[DLOCK__NKEYS + 1];
    size_t lens[DLOCK__NKEYS + 1];
    redisReply *r;
    int nk = lock_keys(c, k, 0, args, lens), rc;

    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_INFO, &r, deadline, nk, nk, args, lens, NULL)) != 0) return rc;
    if (dlock__info_parse(r, out) != 0) rc = dlock__bad_reply(c, "info", r);
    freeReplyObject(r);
    return rc;
}

/* The digits of a semaphore op's numbers (sem_args). */
struct sem_bufs {
    char ttl[DLOCK__DEC_MAX], arg[DLOCK__DEC_MAX + 1], keep[DLOCK__DEC_MAX], lease[DLOCK__DEC_MAX];
};

/* The arguments of one sem.lua call: its keys (all declared: a cluster
 * redirects a slot in migration before the script runs, never half-way
 * through it), then op, token, ttl, arg, how long an op done is
 * remembered, who (id) and the lease.  Returns how many. */
static int sem_args(dlock__backend *c, const dlock__keys *k, const char *op, const char *token, unsigned ttl_ms,
                    long long arg, unsigned lease_ms, const char *id, size_t idlen, struct sem_bufs *b,
                    const char **args, size_t *lens) {
    /* How long the server remembers an op done (sem.lua's `done`): past
     * the longest this call may go on sending it again. */
    unsigned long long keep_ms = 2ull * c->node.conf.unreachable_ms;
    int i;
    for (i = 0; i < DLOCK__NKS; i++) {
        args[i] = k->keys[i];
        lens[i] = k->keylens[i];
    }
    args[i] = op; lens[i++] = strlen(op);
    args[i] = token; lens[i++] = strlen(token);
    args[i] = b->ttl; lens[i++] = dlock__dec(b->ttl, ttl_ms);
    args[i] = b->arg; lens[i++] = who_num(b->arg, arg);
    args[i] = b->keep; lens[i++] = dlock__dec(b->keep, keep_ms < 60000 ? 60000ull : keep_ms);
    args[i] = id; lens[i++] = idlen;
    args[i] = b->lease; lens[i++] = dlock__dec(b->lease, lease_ms);
    return i;
}
#define SEM_NARGS (DLOCK__NKS + 7)

/* One renewal's script, its number of keys and its arguments: renew.lua
 * for a hold, sem.lua's 'renew' for a semaphore's leased unit.  Returns
 * the number of arguments. */
struct renew_bufs {
    char lease[16], fence[DLOCK__DEC_MAX];
    struct sem_bufs sem;
};
static int renew_args(dlock__backend *c, const dlock__renewal *rn, struct renew_bufs *b, const char **args,
                      size_t *lens, int *which, int *nkeys) {
    int k = rn->shared ? DLOCK__K_READERS : DLOCK__K_LOCK;
    if (rn->unit) {
        *which = DLOCK__SCRIPT_SEM;
        *nkeys = DLOCK__NKS;
        return sem_args(c, rn->k, "renew", rn->token, DLOCK__SEM_TTL_MS, 0, rn->lease_ms, "-", 1, &b->sem, args,
                        lens);
    }
    *which = DLOCK__SCRIPT_RENEW;
    *nkeys = 1;
    args[0] = rn->k->keys[k]; lens[0] = rn->k->keylens[k];
    args[1] = rn->token; lens[1] = strlen(rn->token);
    args[2] = b->lease; lens[2] = dlock__dec(b->lease, rn->lease_ms);
    args[3] = rn->shared ? "s" : "x"; lens[3] = 1;
    if (rn->fence == 0 || rn->shared) return 4;
    args[4] = b->fence; lens[4] = dlock__dec(b->fence, rn->fence);
    return 5;
}

/* A renewal's answer: renew.lua's 0, 1 or 2 (renewed, and wanted), or
 * sem.lua's 0 or 1.  0, or -1 for anything else. */
static int renew_answer(const redisReply *r, dlock__renewal *rn) {
    rn->wanted = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 2 && !rn->shared && !rn->unit;
    if (rn->wanted) {
        rn->result = 1;
        return 0;
    }
    return dlock__flag_parse(r, &rn->result);
}

int dlock__renew_one(dlock__backend *c, dlock__renewal *rn, dlock__mono deadline) {
    const char *args[SEM_NARGS];
    size_t lens[SEM_NARGS];
    struct renew_bufs b;
    redisReply *r;
    int rc, which, nkeys, n;
    rn->result = -1;
    n = renew_args(c, rn, &b, args, lens, &which, &nkeys);
    if ((rc = dlock__script_run(c, which, &r, deadline, nkeys, n, args, lens, NULL)) != 0) return rc;
    if (renew_answer(r, rn) != 0) {
        rn->result = -1;
        rc = dlock__bad_reply(c, "renewal", r);
    }
    freeReplyObject(r);
    return rc;
}

int dlock__renew_append(dlock__backend *c, dlock__conn *cn, const dlock__renewal *rn, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        const char *args[SEM_NARGS];
        size_t lens[SEM_NARGS];
        struct renew_bufs b;
        int which, nkeys, nargs = renew_args(c, &rn[i], &b, args, lens, &which, &nkeys);
        if (dlock__script_append(cn->ctx, which, c->node.conf.cluster, nkeys, nargs, args, lens) != 0)
            return dlock__seterr(ENOMEM, "out of memory");
    }
    return 0;
}

int dlock__renew_answer(const redisReply *r, dlock__renewal *rn) {
    if (renew_answer(r, rn) == 0) return 0;
    rn->result = -1;
    return -1;
}

/* Sends one batch of renewals and reads their answers.  Returns 0, or
 * ENOLCK when the connection broke (the caller drops it). */
static int renew_batch(dlock__backend *c, dlock__conn *cn, dlock__renewal *rn, size_t n, int *noscript,
                       unsigned wait_ms) {
    redisContext *ctx = cn->ctx;
    size_t i;
    int demoted = 0;

    for (i = 0; i < n; i++) {
        /* (the arguments are copied into the output buffer at once) */
        const char *args[SEM_NARGS];
        size_t lens[SEM_NARGS];
        struct renew_bufs b;
        int which, nkeys, nargs = renew_args(c, &rn[i], &b, args, lens, &which, &nkeys);
        if (dlock__script_append(ctx, which, c->node.conf.cluster, nkeys, nargs, args, lens) != 0)
            return dlock__seterr(ENOMEM, "out of memory");
    }
    if (c->node.conf.wait_replicas > 0) {
        /* wait=N: a renewal counts only when N replicas have it too, so a
         * master that a failover is leaving behind (its replicas gone)
         * stops extending the holds it alone still knows. */
        if (dlock__wait_append(cn, c->node.conf.wait_replicas, wait_ms) != 0) return dlock__seterr(ENOMEM, "out of memory");
    }
    if (dlock__conn_flush(cn) != 0)
        return dlock__seterr(ENOLCK, "%s: renewal: %s", c->node.conf.redacted_url, ctx->errstr);
    for (i = 0; i < n; i++) {
        void *p = NULL;
        redisReply *r;
        if (dlock__conn_reply(cn, &p) != REDIS_OK || p == NULL)
            return dlock__seterr(ENOLCK, "%s: renewal: %s", c->node.conf.redacted_url, ctx->errstr);
        r = p;
        if (renew_answer(r, &rn[i]) != 0) {
            dlock__backend *next;
            int asking;
            if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) *noscript = 1;
            if (dlock__demoted(r)) demoted = 1;
            /* A cluster's slot moved: the map learns where; the caller
             * asks there (cluster.c). */
            if (c->parent != NULL && dlock__cluster_redirect(c, r, &next, &asking) == 1) rn[i].moved = 1;
            rn[i].result = -1;
        }
        freeReplyObject(r);
    }
    if (c->node.conf.wait_replicas > 0) {
        long long acked;
        if (dlock__wait_read(cn, &acked) != 0) {
            for (i = 0; i < n; i++) rn[i].result = -1; /* renewed, but not confirmed */
            return dlock__seterr(ENOLCK, "%s: renewal: %s", c->node.conf.redacted_url, ctx->errstr);
        }
        if (acked < (long long)c->node.conf.wait_replicas)
            for (i = 0; i < n; i++)
                if (rn[i].result == 1) rn[i].result = -1; /* not confirmed: as if unanswered */
    }
    if (ctx->reader->pos < ctx->reader->len) { /* more answers than requests: out of step */
        for (i = 0; i < n; i++) rn[i].result = -1; /* none of them can be trusted */
        return dlock__seterr(EPROTO, "%s: renewal: the server sent more than was asked for", c->node.conf.redacted_url);
    }
    if (demoted) /* failed over: the next connection goes to the new master */
        return dlock__seterr(ENOLCK, "%s: renewal: the server is no longer the master", c->node.conf.redacted_url);
    return 0;
}

/* Drops the renewal connection.  This runs without c's mutex: the pointer is
 * cleared before the memory is freed, so a fork in between leaves the
 * child either the live connection or none, never a freed one. */
static void drop_renew_conn(dlock__backend *c) {
    dlock__conn *cn = c->renew_conn;
    __atomic_store_n(&c->renew_conn, NULL, __ATOMIC_SEQ_CST);
    dlock__conn_close(cn);
}

static int single_renew(dlock__backend *c, dlock__renewal *rn, size_t n, dlock__mono deadline) {
    size_t i, done = 0;
    int rc = 0, tries = 0;
    int64_t left_ms;

    for (i = 0; i < n; i++) {
        rn[i].result = -1;
        rn[i].moved = 0;
    }
    while (done < n) {
        size_t k = n - done < RENEW_BATCH ? n - done : RENEW_BATCH;
        int noscript = 0;
        if (c->renew_conn != NULL && !dlock__conn_current(&c->node, c->renew_conn, 0))
            drop_renew_conn(c); /* failed over: renew on the new master, or learn the hold is gone */
        /* Connect, and wait for answers, no longer than the holds stay
         * valid: a server cut off (its connect(2), or the AUTH after it,
         * hanging for the whole connect timeout) must not keep the lost
         * handlers from running when the validity ends. */
        left_ms = (deadline - dlock__now()) / DLOCK__MS;
        if (left_ms > (int64_t)c->node.conf.connect_timeout_ms) left_ms = c->node.conf.connect_timeout_ms;
        if (left_ms < 5) left_ms = 5;
        if (c->renew_conn == NULL && (rc = dlock__conn_open(&c->node, &c->renew_conn, (unsigned)left_ms)) != 0)
            return rc;
        left_ms = (deadline - dlock__now()) / DLOCK__MS;
        if (left_ms > (int64_t)c->node.conf.command_timeout_ms) left_ms = c->node.conf.command_timeout_ms;
        if (left_ms < 5) left_ms = 5;
        dlock__conn_timeout(c->renew_conn, (unsigned)left_ms);
        rc = renew_batch(c, c->renew_conn, rn + done, k, &noscript,
                         (unsigned)left_ms / 2 < c->node.conf.wait_timeout_ms ? (unsigned)left_ms / 2 : c->node.conf.wait_timeout_ms);
        if (rc != 0) {
            drop_renew_conn(c);
            return rc;
        }
        if (noscript && tries++ == 0) {
            /* A restarted server: load the scripts, redo this batch. */
            if (dlock__script_load_all(c->renew_conn, c->node.conf.cluster) != 0) {
                drop_renew_conn(c);
                return dlock__seterr(ENOLCK, "%s: cannot load scripts", c->node.conf.redacted_url);
            }
            continue;
        }
        done += k;
        tries = 0;
    }
    return 0;
}

static int single_fenced_set(dlock__backend *c, const char *key, size_t keylen, uint64_t fence,
                             const void *value, size_t len, int *written, dlock__mono deadline) {
    char f[DLOCK__DEC_MAX];
    const char *args[3];
    size_t lens[3];
    redisReply *r;
    int rc;

    args[0] = key; lens[0] = keylen;
    args[1] = f; lens[1] = dlock__dec(f, fence);
    args[2] = len ? value : ""; lens[2] = len;
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_FENCED_SET, &r, deadline, 1, 3, args, lens, NULL)) != 0) return rc;
    if (dlock__flag_parse(r, written) != 0) rc = dlock__bad_reply(c, "fenced write", r);
    freeReplyObject(r);
    return rc;
}

static int single_cond(dlock__backend *c, const dlock__keys *k, const char *op, const char *token,
                       unsigned ttl_ms, const char *const *stale, size_t nstale, long long *result,
                       dlock__mono deadline) {
    char ttl[DLOCK__DEC_MAX];
    const char *args[4 + DLOCK__COND_STALE_MAX];
    size_t lens[4 + DLOCK__COND_STALE_MAX], i;
    redisReply *r;
    int rc;

    args[0] = k->key; lens[0] = k->keylen;
    args[1] = op; lens[1] = strlen(op);
    args[2] = token; lens[2] = strlen(token);
    args[3] = ttl; lens[3] = dlock__dec(ttl, ttl_ms);
    if (nstale > DLOCK__COND_STALE_MAX) nstale = DLOCK__COND_STALE_MAX;
    for (i = 0; i < nstale; i++) {
        args[4 + i] = stale[i];
        lens[4 + i] = strlen(stale[i]);
    }
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_COND, &r, deadline, 1, 4 + (int)nstale, args, lens, NULL)) != 0) return rc;
    if (r->type != REDIS_REPLY_INTEGER || r->integer < 0) rc = dlock__bad_reply(c, "condition variable", r);
    else *result = r->integer;
    freeReplyObject(r);
    return rc;
}

/* The calling thread as a caller of semaphore ops (sem.lua's `done`
 * record, one entry per caller): "host:pid:tid/TAG" with this process's
 * own pid and the thread's own tid (gettid: the thread may have no
 * identity yet, as at its first sem_init) -- never the ones dlock__set_who
 * names, which every thread of a process would share -- and TAG 64
 * random bits, so that two live threads never share an entry (not even
 * with one host name and pid across pid namespaces).  seq counts the
 * thread's ops: a request sent again carries its first sending's, and
 * a later op a higher one.  Made anew in a fork child. */
static __thread struct sem_caller {
    pid_t pid; /* 0: not made yet */
    unsigned long long seq;
    char id[320]; /* host (< 256) : pid : tid / 16 hex */
} sem_caller;

static int sem_caller_get(struct sem_caller **out) {
    static const char hex[] = "0123456789abcdef";
    struct sem_caller *sc = &sem_caller;
    unsigned char raw[8];
    size_t n, i;
    if (sc->pid != dlock__pid()) {
        if (dlock__random(raw, (int)sizeof raw) != 0)
            return dlock__seterr(ENOLCK, "RAND_bytes failed: no random caller tag for a semaphore op");
        n = who_format(sc->id, (long)dlock__pid(), (unsigned long)syscall(SYS_gettid));
        sc->id[n++] = '/';
        for (i = 0; i < sizeof raw; i++) {
            sc->id[n++] = hex[raw[i] >> 4];
            sc->id[n++] = hex[raw[i] & 15];
        }
        sc->id[n] = '\0';
        sc->seq = 0;
        sc->pid = dlock__pid();
    }
    *out = sc;
    return 0;
}

/* A semaphore op (sem.lua): its arguments, then the caller and the op's
 * number (ARGV[8], ARGV[9]) for the `done` record, and the value to make
 * it again with if the server lost it (ARGV[10]). */
static int single_sem(dlock__backend *c, const dlock__keys *k, const char *op, const char *token, unsigned ttl_ms,
                      long long arg, unsigned lease_ms, long long remake, long long *result, dlock__sent *sent,
                      dlock__mono deadline) {
    const char *args[SEM_NARGS + 3], *id;
    size_t lens[SEM_NARGS + 3], idlen = who(dlock__self_peek(), &id);
    struct sem_bufs b;
    struct sem_caller *sc;
    char seq[24], value[24];
    redisReply *r;
    int rc, n = sem_args(c, k, op, token, ttl_ms, arg, lease_ms, id, idlen, &b, args, lens);

    if ((rc = sem_caller_get(&sc)) != 0) return rc;
    args[n] = sc->id; lens[n++] = strlen(sc->id);
    args[n] = seq; lens[n++] = dlock__dec(seq, ++sc->seq);
    if (remake >= 0) { args[n] = value; lens[n++] = dlock__dec(value, (unsigned long long)remake); }
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_SEM, &r, deadline, DLOCK__NKS, n, args, lens, sent)) != 0)
        return rc;
    /* (a take answers -N while a semaphore made again holds its units
     * back N ms more) */
    if (r->type != REDIS_REPLY_INTEGER || (r->integer < 0 && (remake < 0 || strcmp(op, "take") != 0)))
        rc = dlock__bad_reply(c, "semaphore", r);
    else *result = r->integer;
    freeReplyObject(r);
    return rc;
}

size_t dlock__who_get(const dlock__thread *self, char *out, size_t cap) {
    const char *w;
    size_t n = who(self, &w);
    if (n >= cap) n = cap - 1;
    memcpy(out, w, n);
    out[n] = '\0';
    return n;
}

void dlock__strs_free(dlock__strs *s) {
    size_t i;
    for (i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

/* An array of strings (bulk or status) into *out: 0, or -1. */
static int strs_parse(const redisReply *r, dlock__strs *out) {
    size_t i;
    out->n = 0;
    out->v = NULL;
    if (r->type != REDIS_REPLY_ARRAY) return -1;
    if (r->elements > 0 && (out->v = calloc(r->elements, sizeof *out->v)) == NULL) return -1;
    for (i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_STATUS) break;
        if ((out->v[i] = malloc(e->len + 1)) == NULL) break;
        memcpy(out->v[i], e->str, e->len);
        out->v[i][e->len] = '\0';
        out->n++;
    }
    if (out->n == r->elements) return 0;
    dlock__strs_free(out);
    return -1;
}

/* The keys of a waits op (waits.lua) in buf, pointed at by args: k's
 * lock key, :waiting, :wmeta, readers, writers and fair queue, or (k
 * NULL) the edge key of the holder token id.  Their number, or -1
 * (ENOMEM). */
static int waits_keys(const dlock__backend *c, const dlock__keys *k, const char *id, char **buf, const char **args,
                      size_t *lens) {
    static const char *const sfx[2] = { ":waiting", ":wmeta" };
    size_t n, i;
    if (k == NULL) {
        n = strlen(c->node.conf.prefix) + strlen(id) + 8;
        if ((*buf = malloc(n)) == NULL) return -1;
        lens[0] = (size_t)snprintf(*buf, n, "%sdlw:{%s}", c->node.conf.prefix, id);
        args[0] = *buf;
        return 1;
    }
    n = 2 * (k->keylen + 10);
    if ((*buf = malloc(n)) == NULL) return -1;
    args[0] = k->key;
    lens[0] = k->keylen;
    for (i = 0; i < 2; i++) {
        char *p = *buf + i * (k->keylen + 10);
        lens[i + 1] = (size_t)snprintf(p, k->keylen + 10, "%s%s", k->key, sfx[i]);
        args[i + 1] = p;
    }
    args[3] = k->keys[DLOCK__K_READERS];
    lens[3] = k->keylens[DLOCK__K_READERS];
    args[4] = k->keys[DLOCK__K_WRITERS];
    lens[4] = k->keylens[DLOCK__K_WRITERS];
    args[5] = k->keys[DLOCK__K_QUEUE];
    lens[5] = k->keylens[DLOCK__K_QUEUE];
    return 6;
}

static int single_waits(dlock__backend *c, const dlock__keys *k, const char *op, const char *id, const char *rec,
                        unsigned ttl_ms, dlock__strs *out, dlock__mono deadline) {
    char ttl[DLOCK__DEC_MAX], *buf = NULL;
    const char *args[10];
    size_t lens[10];
    redisReply *r;
    int nk = waits_keys(c, k, id, &buf, args, lens), rc;

    if (nk < 0) return dlock__seterr(ENOMEM, "out of memory");
    args[nk] = op; lens[nk] = strlen(op);
    args[nk + 1] = id; lens[nk + 1] = strlen(id);
    args[nk + 2] = rec; lens[nk + 2] = strlen(rec);
    args[nk + 3] = ttl; lens[nk + 3] = dlock__dec(ttl, ttl_ms);
    rc = dlock__script_run(c, DLOCK__SCRIPT_WAITS, &r, deadline, nk, nk + 4, args, lens, NULL);
    free(buf);
    if (rc != 0) return rc;
    if (strs_parse(r, out) != 0) rc = dlock__bad_reply(c, "waits", r);
    freeReplyObject(r);
    return rc;
}

static int single_grant_conn(dlock__backend *c, const dlock__keys *k, dlock__node **node, dlock__conn **cn,
                             dlock__mono deadline) {
    (void)k;
    *node = &c->node;
    return dlock__pool_get(&c->node, cn, deadline);
}

/* A record-lock range request (range.lua) on <lock key>:rl. */
static int single_range(dlock__backend *c, const dlock__keys *k, int nargs, const char *const *args,
                        dlock__strs *out, dlock__mono deadline) {
    const char *a[1 + 12];
    size_t lens[1 + 12];
    char *key;
    redisReply *r;
    int i, rc;

    if (nargs < 1 || nargs > 12) return dlock__seterr(EINVAL, "range: %d arguments", nargs);
    if ((key = malloc(k->keylen + 4)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    memcpy(key, k->key, k->keylen);
    memcpy(key + k->keylen, ":rl", 4);
    a[0] = key;
    lens[0] = k->keylen + 3;
    for (i = 0; i < nargs; i++) {
        a[1 + i] = args[i];
        lens[1 + i] = strlen(args[i]);
    }
    rc = dlock__script_run(c, DLOCK__SCRIPT_RANGE, &r, deadline, 1, 1 + nargs, a, lens, NULL);
    free(key);
    if (rc != 0) return rc;
    if (strs_parse(r, out) != 0) rc = dlock__bad_reply(c, "range", r);
    freeReplyObject(r);
    return rc;
}

/* A conversion (convert.lua) of token's hold: the lock's keys, then
 * token, lease, the op and the caller's host:pid:tid.  Sent again on a
 * fresh connection when an answer is lost, as an acquire is: a repeated
 * upgrade finds the lock its own (2), a repeated downgrade the token
 * reading (1), a repeated cancel nothing to take back. */
static int single_convert(dlock__backend *c, const dlock__keys *k, const char *token, unsigned lease_ms, int how,
                          dlock__conv *out, dlock__mono deadline) {
    static const char *const ops[] = { "up", "down", "cancel" };
    const char *args[DLOCK__NKEYS + 5];
    size_t lens[DLOCK__NKEYS + 5];
    char lease[DLOCK__DEC_MAX + 1];
    redisReply *r;
    int nk = lock_keys(c, k, 0, args, lens), rc;
    args[nk] = token;
    lens[nk] = strlen(token);
    lens[nk + 1] = dlock__dec(lease, lease_ms);
    args[nk + 1] = lease;
    args[nk + 2] = ops[how];
    lens[nk + 2] = strlen(ops[how]);
    lens[nk + 3] = who(dlock__self_peek(), &args[nk + 3]);
    rc = dlock__script_run(c, DLOCK__SCRIPT_CONVERT, &r, deadline, nk, nk + 4, args, lens, NULL);
    if (rc != 0) return rc;
    if (dlock__conv_parse(r, how, out) != 0) rc = dlock__bad_reply(c, "convert", r);
    freeReplyObject(r);
    return rc;
}

const dlock__backend_ops dlock__single_backend = {
    .queues = 1,
    .acquire = single_acquire,
    .release = single_release,
    .release_send = single_release_send,
    .renew = single_renew,
    .reset = single_reset,
    .fenced_set = single_fenced_set,
    .lvb_read = dlock__single_lvb_read,
    .info = single_info,
    .cond = single_cond,
    .grant_conn = single_grant_conn,
    .sem = single_sem,
    .sem_info = dlock__single_sem_info,
    .sem_admin = dlock__single_sem_admin,
    .waits = single_waits,
    .stats_add = dlock__single_stats_add,
    .stats_read = dlock__single_stats_read,
    .range = single_range,
    .convert = single_convert,
};
