/* redlock.c -- the Redlock backend: a lock held on a quorum of masters.
 *
 * N independent masters (no replication between them); a lock is held
 * when a majority, Q = N/2 + 1, granted it with the same token, within
 * its lease: the acquire script is sent to every master at once (every
 * request written before any answer is read), and the hold counts
 * only if Q granted it and the time spent asking left some lease (the
 * local validity is counted from before the first request, as for one
 * server, minus the drift margin).  Otherwise what was granted is given
 * back at once.  Each master is a member, a single-server backend of its
 * own (c->members, deploy.c): its own node, pool and renewal connection,
 * one attempt per request, so a master that is down costs one refused
 * connection, not a retry loop.
 *
 * Fencing: each master issues max(last + 1, its time in ns).  The hold's
 * fence is the largest of the quorum's, and before the acquire returns it
 * is written back to every master as a floor for its next fence
 * (fence_raise.lua); that must reach a quorum too.  Any later hold's
 * quorum shares a master with that one, whose next fence is above the
 * floor (for a caching hold: the last fence its local holds may number,
 * DLOCK__FENCE_BLOCK on), so fences
 * increase strictly across holds, whichever masters granted them (as long as a master does not lose its data: see
 * docs/fencing.md).
 *
 * A call decides as soon as the answers do (a quorum granted, or too few
 * are left to grant; a release: a quorum answered), within the call's
 * bound as on one server (a try: one attempt of the reply floor): one
 * slow or paused master does not delay it.  The others' answers are read
 * late (dlock__command_all): a connection with an answer owed is never
 * used for another request, and its master is not asked again until it
 * answers -- but a release (a hold's, or the give-back of a round that
 * did not hold, for a grant the master may make late) is queued behind
 * the owed request on that connection, so that it runs after it, in the
 * background, when the master does.  A master that takes no connection
 * in time is not tried for a second.
 *
 * Robust mutexes: each master keeps its own marker of a holder that died
 * holding it.  EOWNERDEAD is the quorum's view (round_dead): a master that
 * missed the recovery's release keeps a stale marker, which alone does
 * not make a death.
 *
 * Renewal (redlock_renew.c) runs on every master; a hold stays valid
 * while a quorum renews it.  A release goes to every master.  Release notifications come from
 * any one master (every release publishes on each of them): the client's
 * own subscriber connection goes to the first master that answers.
 * Condition variables are kept on the first master that answers.  Lock
 * information reads every master and says what a quorum says (rl_info);
 * the administrative list reads every
 * master, and says when fewer than a quorum answered (admin.c).  Fair mutexes are
 * not fair on Redlock (each master would keep its own queue): the
 * attribute is ignored there.
 *
 * One server is never counted twice.  The URL may not name a master
 * twice (url.c), and since two names can still lead to one server
 * (localhost and 127.0.0.1, two addresses of one host, a proxy), every
 * new connection of a master reads the server's run id (INFO
 * server: once per connection, never per request) and compares it with
 * the other masters' (dlock__redlock_identify, the masters' `on_connect`
 * hook).  A server that another
 * master turns out to be too, asked again on a fresh connection (its run
 * id may be stale: servers restart, names move), is refused; the call
 * that met it gives back what it was granted and fails with ENOLCK and
 * a message naming both masters.  Every later attempt to connect to it
 * is refused the same way, so it is never counted; the check runs again
 * at every connection, so a deployment that is mended (a name that moved
 * back) works again without a new client.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/redlock.h"

/* ------------------------------------------------- one server, one vote */

/* Guards the members' rl_run_id and the parents' rl_dup_msg (rl_dups
 * moves under it too, and is read without it);
 * never held across I/O.  (Held briefly: a fork child gets it back
 * unlocked through the handlers.) */
static pthread_mutex_t ids_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t ids_once = PTHREAD_ONCE_INIT;
static __thread int confirming; /* this thread is asking a master again for its run id */

static void ids_lock(void) {
    pthread_mutex_lock(&ids_mu);
}
static void ids_unlock(void) {
    pthread_mutex_unlock(&ids_mu);
}
static void ids_child(void) {
    pthread_mutex_init(&ids_mu, NULL);
}
static void ids_init(void) {
    pthread_atfork(ids_lock, ids_unlock, ids_child);
}

/* The run id of the server on cn into id (41 bytes): 0; 1 when the
 * server does not say (INFO refused, e.g. by an ACL without +info);
 * ENOLCK when the connection failed. */
static int read_run_id(dlock__backend *m, dlock__conn *cn, char *id) {
    const char *argv[2] = { "INFO", "server" };
    size_t lens[2] = { 4, 6 }, n = 0;
    redisReply *r = dlock__conn_cmd(cn, 2, argv, lens, NULL);
    const char *p = NULL;
    if (r == NULL)
        return dlock__seterr(ENOLCK, "%s: INFO: %s", m->node.conf.redacted_url,
                             cn->ctx->errstr[0] ? cn->ctx->errstr : "connection lost");
    if (r->type == REDIS_REPLY_STRING) {
        p = r->str;
        while ((p = strstr(p, "run_id:")) != NULL && p != r->str && p[-1] != '\n') p += 7;
    }
    if (p != NULL) {
        p += 7;
        while (n < 40 && ((p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'f'))) n++;
        memcpy(id, p, n);
    }
    id[n] = '\0';
    freeReplyObject(r);
    return n > 0 ? 0 : 1;
}

static size_t member_index(const dlock__backend *c, const dlock__backend *m) {
    size_t i;
    for (i = 0; i < c->nmembers && c->members[i] != m; i++)
        ;
    return i;
}

static const char *bracket(const char *host, int open) {
    return strchr(host, ':') == NULL ? "" : open ? "[" : "]";
}

int dlock__redlock_identify(dlock__backend *m, dlock__conn *cn) {
    dlock__backend *c = m->parent;
    char id[41];
    size_t i, j, me, asked = 0;
    int rc, same = 0;

    pthread_once(&ids_once, ids_init);
    if ((rc = read_run_id(m, cn, id)) == ENOLCK) return ENOLCK;
    ids_lock();
    if (rc != 0 || confirming) {
        /* Not known (nothing to compare), or asked again on behalf of
         * another master's check (which compares). */
        memcpy(m->rl_run_id, id, sizeof id);
        ids_unlock();
        return 0;
    }
    me = member_index(c, m);
    for (i = 0; i < c->nmembers && asked <= 2 * c->nmembers; i++) {
        dlock__backend *o = c->members[i];
        dlock__conn *fresh = NULL;
        if (o == m || strcmp(o->rl_run_id, id) != 0) continue;
        /* The same run id as master i at its last connection: ask that
         * one again, on a new connection (which records what it says). */
        ids_unlock();
        asked++;
        confirming = 1;
        if (dlock__conn_open(&o->node, &fresh, o->node.conf.connect_timeout_ms) == 0) dlock__conn_close(fresh);
        else {
            ids_lock();
            o->rl_run_id[0] = '\0'; /* not known now */
            ids_unlock();
        }
        confirming = 0;
        ids_lock();
        if (strcmp(o->rl_run_id, id) == 0) {
            same = 1;
            break;
        }
        i = (size_t)-1; /* it said otherwise: compare again from the start */
    }
    if (!same) {
        memcpy(m->rl_run_id, id, sizeof id);
        ids_unlock();
        return 0;
    }
    j = i;
    {
        const dlock__endpoint *a = &c->members[j]->node.conf.ep, *b = &m->node.conf.ep;
        size_t x = j < me ? j : me, y = j < me ? me : j;
        if (j > me) {
            const dlock__endpoint *t = a;
            a = b;
            b = t;
        }
        snprintf(c->rl_dup_msg, sizeof c->rl_dup_msg,
                 "%s: masters %zu (%s%.100s%s:%d) and %zu (%s%.100s%s:%d) are one server (run id %.12s...); Redlock "
                 "would count it twice in a quorum: name each server once",
                 c->node.conf.redacted_url, x + 1, bracket(a->host, 1), a->host, bracket(a->host, 0), a->port, y + 1,
                 bracket(b->host, 1), b->host, bracket(b->host, 0), b->port, id);
    }
    __atomic_add_fetch(&c->rl_dups, 1, __ATOMIC_RELEASE); /* after the message */
    dlock__seterr(ENOLCK, "%s", c->rl_dup_msg);
    ids_unlock();
    /* Older connections of this master lead there too: none is kept. */
    dlock__pool_flush(&m->node);
    return dlock__node_refuse(&m->node);
}

/* How many times masters were found to be one server so far. */
static unsigned dups(dlock__backend *c) {
    return __atomic_load_n(&c->rl_dups, __ATOMIC_ACQUIRE); /* no lock on the way of every step */
}

/* Found during a call that started at `before`: ENOLCK with the message. */
static int dup_found(dlock__backend *c, unsigned before) {
    char msg[sizeof c->rl_dup_msg];
    if (dups(c) == before) return 0;
    pthread_once(&ids_once, ids_init);
    ids_lock();
    memcpy(msg, c->rl_dup_msg, sizeof msg);
    ids_unlock();
    return dlock__seterr(ENOLCK, "%s", msg);
}

/* How long one master may take to answer one request. */
static dlock__mono member_deadline(const dlock__backend *c) {
    return dlock__now() + (dlock__mono)c->node.conf.command_timeout_ms * DLOCK__MS;
}

/* A request's bound: the command timeout, or the caller's deadline if
 * sooner (a request is tried all the same: the reply floor at least). */
static dlock__mono call_bound(const dlock__backend *c, dlock__mono deadline) {
    dlock__mono dl = member_deadline(c);
    return deadline < dl ? deadline : dl;
}

/* An acquisition round must leave most of the lease: each of its two
 * steps (acquire, fence floor) waits for answers at most a quarter of it
 * (50 ms at least, the command timeout at most), and not past the call's
 * bound (the transport waits the reply floor at least: a try is one
 * attempt of that much). */
static dlock__mono round_deadline(const dlock__backend *c, unsigned lease_ms, dlock__mono bound) {
    unsigned ms = lease_ms / 4;
    dlock__mono dl;
    if (ms < 50) ms = 50;
    if (ms > c->node.conf.command_timeout_ms) ms = c->node.conf.command_timeout_ms;
    dl = dlock__now() + (dlock__mono)ms * DLOCK__MS;
    return bound < dl ? bound : dl;
}

static int status_granted(int status) {
    return status == DLOCK__ACQ_ACQUIRED || status == DLOCK__ACQ_MINE || status == DLOCK__ACQ_OWNERDEAD;
}

/* A judge of integer answers (run_ints): decided once `yes` of them
 * answered 1, or so many did not that `yes` cannot be reached. */
struct yes_judge {
    size_t n, yes, got, other;
};

static int yes_decided(void *arg, size_t i, const redisReply *r) {
    struct yes_judge *j = arg;
    (void)i;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) return 0; /* asked again after */
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) j->got++;
    else j->other++;
    return j->got >= j->yes || j->n - j->other < j->yes;
}

/* Runs a script on the masters in sel (all when NULL) at once, until
 * `need` of them answered, or until `yes` of them answered 1 or cannot
 * (yes 0: not asked; flags: dlock__command_all); ok[i] and the integer
 * answer in v[i] (v may be NULL).  How many answered. */
static size_t run_ints(dlock__backend *c, const int *sel, size_t need, size_t yes, int fl, int which,
                       dlock__args *a, dlock__mono deadline, int *ok, long long *v) {
    dlock__backend *cs[DLOCK__NODES_MAX];
    redisReply *rep[DLOCK__NODES_MAX];
    int rcs[DLOCK__NODES_MAX];
    size_t i, k = 0, idx[DLOCK__NODES_MAX], answered = 0;
    struct yes_judge j = { 0, yes, 0, 0 };
    dlock__all_judge judge = { yes_decided, &j };
    for (i = 0; i < c->nmembers; i++) {
        ok[i] = 0;
        if (v) v[i] = 0;
        if (sel != NULL && !sel[i]) continue;
        idx[k] = i;
        cs[k++] = c->members[i];
    }
    if (k == 0) return 0;
    j.n = k;
    dlock__script_run_all(cs, k, need < k ? need : k, yes > 0 ? &judge : NULL, fl, which, rep, rcs, deadline,
                          a->nkeys, a->n, a->v, a->len);
    for (i = 0; i < k; i++) {
        if (rep[i] == NULL) continue;
        if (rep[i]->type == REDIS_REPLY_INTEGER) {
            ok[idx[i]] = 1;
            answered++;
            if (v) v[idx[i]] = rep[i]->integer;
        }
        freeReplyObject(rep[i]);
    }
    return answered;
}

/* run_ints for scripts that answer 0 or 1 (flag[i]; flag may be NULL). */
static void run_flag(dlock__backend *c, const int *sel, size_t need, int fl, int which, dlock__args *a,
                     dlock__mono deadline, int *ok, int *flag) {
    long long v[DLOCK__NODES_MAX];
    size_t i;
    (void)run_ints(c, sel, need, 0, fl, which, a, deadline, ok, v);
    for (i = 0; i < c->nmembers; i++) {
        if (ok[i] && v[i] != 0 && v[i] != 1) ok[i] = 0;
        if (flag) flag[i] = ok[i] && v[i] == 1;
    }
}

static size_t count(const int *v, size_t n) {
    size_t i, k = 0;
    for (i = 0; i < n; i++) k += v[i] != 0;
    return k;
}

/* Raises the fence floor of l on every master to `fence`; how many took it
 * (each that answers within the bound: the floor everywhere keeps fences
 * in order when masters restart; a master that has not answered an
 * earlier request gets it behind that one, and is not waited for). */
static size_t raise_fences(dlock__backend *c, const dlock__keys *k, uint64_t fence, dlock__mono deadline) {
    dlock__args a;
    int ok[DLOCK__NODES_MAX], took[DLOCK__NODES_MAX];
    char f[24];
    snprintf(f, sizeof f, "%llu", (unsigned long long)fence);
    a.nkeys = 1;
    a.n = 2;
    a.v[0] = k->keys[DLOCK__K_FENCE];
    a.len[0] = k->keylens[DLOCK__K_FENCE];
    a.v[1] = f;
    a.len[1] = strlen(f);
    run_flag(c, NULL, c->nmembers, DLOCK__ALL_QUEUE, DLOCK__SCRIPT_FENCE_RAISE, &a, deadline, ok, took);
    return count(took, c->nmembers);
}

/* One acquisition round on every master (rl_acquire), carried through
 * its steps: ask, hold (a quorum), give back (no hold), then the verdict. */
struct rl_round {
    unsigned dups0;                 /* masters found to be one server before it */
    dlock__mono start;              /* before the first request: the validity counts from here */
    dlock__mono bound;              /* the round's answers are awaited until then */
    int got_at[DLOCK__NODES_MAX];   /* the masters that granted the lock */
    int none_at[DLOCK__NODES_MAX];  /* the masters asked that did not answer (may grant it yet) */
    size_t got, busy, errs, notrec; /* how many granted, had a holder, failed, said NOTRECOVERABLE */
    size_t ndead;                   /* of got, how many said OWNERDEAD */
    size_t refused;                 /* of errs, those that refused the connection for good */
    uint64_t fence;                 /* the largest fence granted */
    int64_t pttl;                   /* the shortest time a holder has left; -1: unknown */
    int dead;                       /* the quorum's view: the last holder died (round_dead) */
    char why[400];                  /* the last failure, for the message */
};

/* Master i's answer (rep, NULL if none: rc says whether it was asked)
 * counted into rd. */
static void round_count(dlock__backend *c, size_t i, redisReply *rep, int rc, struct rl_round *rd) {
    dlock__acq acq;
    if (rep == NULL || dlock__acq_parse(rep, &acq) != 0) {
        if (rep != NULL) {
            dlock__seterr(EPROTO, "%s: unexpected answer to acquire", c->members[i]->node.conf.redacted_url);
            freeReplyObject(rep);
        }
        rd->errs++;
        rd->none_at[i] = rep == NULL && rc != DLOCK__ALL_NOT_SENT; /* asked: it may grant it yet */
        if (rep == NULL && __atomic_load_n(&c->members[i]->node.refused, __ATOMIC_ACQUIRE) >= rd->start)
            rd->refused++;
        snprintf(rd->why, sizeof rd->why, "%s", dlock_last_error());
        return;
    }
    freeReplyObject(rep);
    if (status_granted(acq.status)) {
        rd->got++;
        rd->got_at[i] = 1;
        if (acq.fence > rd->fence) rd->fence = acq.fence;
        if (acq.status == DLOCK__ACQ_OWNERDEAD) rd->ndead++;
    } else if (acq.status == DLOCK__ACQ_NOTRECOVERABLE) {
        rd->notrec++;
    } else {
        rd->busy++;
        if (acq.pttl_ms >= 0 && (rd->pttl < 0 || acq.pttl_ms < rd->pttl)) rd->pttl = acq.pttl_ms;
    }
}

/* Did the last holder die, in the quorum's view?  Each master keeps its
 * own robust marker, and one that missed the recovery's release (down
 * then, restarted from its AOF) keeps a dead holder's marker after the
 * others were told the death was dealt with: a marker on fewer than a
 * quorum is no death.  Dead: a quorum of masters say OWNERDEAD.  (A
 * holder that held a bare quorum and died, one of whose masters does not
 * answer the next taker, is then not reported: two faults, as for every
 * Redlock guarantee.) */
static int round_dead(const dlock__backend *c, const struct rl_round *rd) {
    return rd->ndead >= dlock__redlock_quorum(c);
}

struct ask_judge {
    size_t n, q, got, other, ndead;
    int robust;
};

/* Do the answers so far decide the round?  Held: a quorum granted (for a
 * robust lock, once round_dead's verdict cannot change either); not held:
 * too few are left to grant it. */
static int ask_decided(void *arg, size_t i, const redisReply *r) {
    struct ask_judge *j = arg;
    dlock__acq acq;
    size_t left;
    (void)i;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) return 0; /* asked again after */
    if (dlock__acq_parse(r, &acq) == 0 && status_granted(acq.status)) {
        j->got++;
        j->ndead += acq.status == DLOCK__ACQ_OWNERDEAD;
    } else {
        j->other++;
    }
    left = j->n - j->got - j->other;
    if (j->got + left < j->q) return 1;
    if (j->got < j->q) return 0;
    /* Held.  A robust lock: once round_dead's verdict is sure. */
    return !j->robust || j->ndead >= j->q || j->ndead + left < j->q;
}

static void round_ask(dlock__backend *c, int which, dlock__args *a, unsigned lease_ms, int flags,
                      dlock__mono deadline, struct rl_round *rd) {
    redisReply *rep[DLOCK__NODES_MAX];
    int rcs[DLOCK__NODES_MAX];
    size_t i;
    struct ask_judge j = { c->nmembers, dlock__redlock_quorum(c), 0, 0, 0, (flags & DLOCK__F_ROBUST) != 0 };
    dlock__all_judge judge = { ask_decided, &j };
    memset(rd, 0, sizeof *rd);
    rd->dups0 = dups(c);
    rd->pttl = -1;
    rd->start = dlock__now();
    rd->bound = round_deadline(c, lease_ms, deadline);
    dlock__script_run_all(c->members, c->nmembers, 0, &judge, 0, which, rep, rcs, rd->bound, a->nkeys, a->n, a->v,
                          a->len);
    for (i = 0; i < c->nmembers; i++) round_count(c, i, rep[i], rcs[i], rd);
    rd->dead = round_dead(c, rd);
}

/* Step 2, hold (a quorum granted): raise the fence floor on a quorum,
 * within the lease.  The floor covers every fence the hold may use: a
 * caching hold numbers its local holds on up to DLOCK__FENCE_BLOCK past
 * its fence (core/lock.c, fence_hi).  1 when
 * held (out filled in); 0 when not, rd->why saying why. */
static int round_hold(dlock__backend *c, const dlock__keys *k, int flags, unsigned lease_ms, struct rl_round *rd,
                      dlock__acq *out) {
    size_t q = dlock__redlock_quorum(c);
    uint64_t floor = flags & DLOCK__F_CACHING ? rd->fence + DLOCK__FENCE_BLOCK - 1 : rd->fence;
    size_t raised = raise_fences(c, k, floor, rd->bound > dlock__now() ? rd->bound : round_deadline(c, lease_ms, rd->start));
    dlock__mono now = dlock__now();
    if (raised >= q && now - rd->start < (dlock__mono)(lease_ms - dlock__drift_ms(&c->node.conf, lease_ms)) * DLOCK__MS) {
        out->status = rd->dead ? DLOCK__ACQ_OWNERDEAD : DLOCK__ACQ_ACQUIRED;
        out->fence = rd->fence;
        out->pttl_ms = -1;
        return 1;
    }
    if (raised < q) {
        rd->errs++;
        snprintf(rd->why, sizeof rd->why, "the fence floor reached %zu masters", raised);
    } else {
        snprintf(rd->why, sizeof rd->why, "asking took longer than the lease allows");
    }
    return 0;
}

/* Step 3, give back: no quorum (or no time left): what was granted is
 * released on the masters that granted it, and on those that did not
 * answer (a late grant: the release is queued behind the acquire on its
 * connection, so it runs after it).  A robust marker any master showed is
 * kept (a death is never hidden by a round that did not hold): an
 * exclusive robust take goes back as an undo, which each master judges
 * by its own record of who set the marker (a master whose take found one
 * keeps it; one whose take set it, even past the lease, drops it). */
static void round_give_back(dlock__backend *c, const dlock__keys *k, const char *token, int flags,
                            const struct rl_round *rd, dlock__mono deadline) {
    int robust = (flags & DLOCK__F_ROBUST) != 0;
    int how = (flags & DLOCK__F_SHARED) ? dlock__release_kind(1, robust, rd->ndead > 0, 0, 0)
                                        : dlock__undo_kind(0, robust);
    int rok[DLOCK__NODES_MAX], sel[DLOCK__NODES_MAX];
    size_t i;
    dlock__args ra;
    for (i = 0; i < c->nmembers; i++) sel[i] = rd->got_at[i] || rd->none_at[i];
    dlock__release_args(c, k, token, how, &ra);
    run_flag(c, sel, rd->got, DLOCK__ALL_QUEUE, DLOCK__SCRIPT_RELEASE, &ra, deadline, rok, NULL);
}

/* Neither a quorum nor a holder: masters did not answer (or took too
 * long).  ENOLCK when every one that did not answer refused us for good
 * (a certificate, credentials: asking again will not change that), or
 * when the caller's bound leaves no room for another round after the
 * back-off bo; else 0 after the back-off, to ask again. */
static int round_give_up(dlock__backend *c, const struct rl_round *rd, dlock__backoff *bo,
                         dlock__mono deadline) {
    int for_good = rd->errs > 0 && rd->refused == rd->errs;
    if (!for_good && dlock__backoff_sleep(bo, deadline) == 0) return 0;
    return dlock__seterr(ENOLCK,
                         "%s: %zu of %zu masters granted the lock, %zu did not answer%s; a quorum "
                         "is %zu (last: %.300s)",
                         c->node.conf.redacted_url, rd->got, c->nmembers, rd->errs,
                         for_good ? " (they refused the connection)" : "", dlock__redlock_quorum(c), rd->why);
}

/* Rounds until a verdict: held, busy (no queue here: out->floor 0),
 * NOTRECOVERABLE, masters found to be one server, or no quorum by the
 * deadline.  Two masters found to be one server: nothing granted
 * counts; it is given back, and the call says why. */
static int rl_acquire(dlock__backend *c, const dlock__keys *k, const char *token, unsigned lease_ms, int flags,
                      dlock__acq *out, dlock__mono deadline) {
    dlock__backoff bo;
    dlock__args a;
    int which;

    dlock__backoff_init(&bo, DLOCK__BACKOFF_MIN_MS, DLOCK__BACKOFF_MAX_MS);
    flags &= ~DLOCK__F_FAIR; /* one queue per master could not agree: not fair here */
    which = dlock__acquire_args(c, k, token, lease_ms, flags, out->delay_ms, &a);
    for (;;) {
        struct rl_round rd;
        int dup, rc;
        round_ask(c, which, &a, lease_ms, flags, deadline, &rd);
        dup = dups(c) != rd.dups0;
        if (rd.got >= dlock__redlock_quorum(c) && rd.notrec == 0 && !dup && round_hold(c, k, flags, lease_ms, &rd, out))
            return 0;
        if (rd.got > 0 || rd.errs > 0) round_give_back(c, k, token, flags, &rd, deadline);
        if (dup) return dup_found(c, rd.dups0);
        if (rd.notrec > 0) {
            out->status = DLOCK__ACQ_NOTRECOVERABLE;
            return 0;
        }
        if (rd.busy > 0) {
            out->status = DLOCK__ACQ_BUSY;
            out->pttl_ms = rd.pttl;
            out->floor = 0; /* no grants here: no queue */
            return 0;
        }
        if ((rc = round_give_up(c, &rd, &bo, deadline)) != 0) return rc;
    }
}

static int rl_release(dlock__backend *c, const dlock__keys *k, const char *token, int how, int *released,
                      dlock__sent *sent, dlock__mono deadline) {
    int ok[DLOCK__NODES_MAX], rel[DLOCK__NODES_MAX];
    dlock__args a;
    dlock__backoff bo;
    if (sent != NULL) *sent = (dlock__sent){ 0, dlock__now(), 0 }; /* each master: its own bound */
    /* Each master took the lock its own way: on one it may be the string. */
    if (how == DLOCK__REL_HASH) how = DLOCK__REL_PLAIN;
    dlock__release_args(c, k, token, how, &a);
    dlock__backoff_init(&bo, DLOCK__BACKOFF_MIN_MS, DLOCK__BACKOFF_MAX_MS);
    /* Every master at once, until a quorum answered; while none answers,
     * again until the call's bound, as every request is (the release is
     * the token's: asked again it ends nothing else).  A master that has
     * not answered an earlier request gets the release behind that one
     * (it runs when the master does: released in the background); one
     * that does not answer at all keeps the hold until its lease runs
     * out. */
    do {
        run_flag(c, NULL, dlock__redlock_quorum(c), DLOCK__ALL_QUEUE, DLOCK__SCRIPT_RELEASE, &a,
                 call_bound(c, deadline), ok, rel);
    } while (count(ok, c->nmembers) == 0 && dlock__backoff_sleep(&bo, deadline) == 0);
    *released = count(rel, c->nmembers) > 0;
    if (count(ok, c->nmembers) == 0)
        return dlock__seterr(ENOLCK, "%s: no master answered the release", c->node.conf.redacted_url);
    return 0;
}

/* A reset or a break: every master at once, once (asked again it could
 * cut off a holder that came in between), until a quorum answered; the
 * others' answers are read later.  A master that has not answered an
 * earlier request gets it behind that one, as a release: it runs when
 * that master does, as it would had it been sent there just before (a
 * break skipped there would leave the lock on that master until its
 * lease ran out) -- behind one such connection only, so that it runs
 * there once too (DLOCK__ALL_ONCE).  Held: any master that answered had a
 * holder. */
static int rl_reset(dlock__backend *c, const dlock__keys *k, int how, int *was_held, dlock__sent *sent,
                    dlock__mono deadline) {
    int ok[DLOCK__NODES_MAX], held[DLOCK__NODES_MAX];
    size_t answered;
    unsigned dups0 = dups(c);
    dlock__args a;
    if (sent != NULL) *sent = (dlock__sent){ 0, dlock__now(), 0 };
    a.nkeys = 1;
    a.n = 0;
    a.v[a.n] = k->keys[DLOCK__K_LOCK], a.len[a.n++] = k->keylens[DLOCK__K_LOCK];
    a.v[a.n] = k->key, a.len[a.n++] = k->keylen; /* the release channel */
    a.v[a.n] = how == DLOCK__RESET_FULL ? "reset" : "break", a.len[a.n++] = 5;
    run_flag(c, NULL, dlock__redlock_quorum(c), DLOCK__ALL_QUEUE | DLOCK__ALL_ONCE, DLOCK__SCRIPT_RESET, &a,
             call_bound(c, deadline), ok, held);
    answered = count(ok, c->nmembers);
    *was_held = count(held, c->nmembers) > 0;
    if (dup_found(c, dups0)) return ENOLCK;
    if (answered < dlock__redlock_quorum(c))
        return dlock__seterr(ENOLCK, "%s: only %zu masters answered the reset; a quorum is %zu",
                             c->node.conf.redacted_url, answered, dlock__redlock_quorum(c));
    return 0;
}

/* A fenced write to every master at once: written when a quorum took it,
 * refused (stale) when so many refused it that no quorum can take it.  A
 * master that has not answered an earlier request gets it behind that
 * one (the write is the fence's: late, it overwrites nothing newer).
 * Asked again while fewer than a quorum answered, until the deadline. */
static int rl_fenced_set(dlock__backend *c, const char *key, size_t keylen, uint64_t fence, const void *value,
                         size_t len, int *written, dlock__mono deadline) {
    int ok[DLOCK__NODES_MAX];
    long long v[DLOCK__NODES_MAX];
    size_t i, answered = 0, wrote = 0;
    unsigned dups0 = dups(c);
    char f[DLOCK__DEC_MAX + 1];
    dlock__backoff bo;
    dlock__args a;
    a.nkeys = 1;
    a.n = 3;
    a.v[0] = key, a.len[0] = keylen;
    a.len[1] = dlock__dec(f, fence), a.v[1] = f;
    a.v[2] = len ? (const char *)value : "", a.len[2] = len;
    dlock__backoff_init(&bo, DLOCK__BACKOFF_MIN_MS, DLOCK__BACKOFF_MAX_MS);
    do {
        (void)run_ints(c, NULL, c->nmembers, dlock__redlock_quorum(c), DLOCK__ALL_QUEUE, DLOCK__SCRIPT_FENCED_SET, &a,
                       call_bound(c, deadline), ok, v);
        for (i = 0, answered = 0, wrote = 0; i < c->nmembers; i++) {
            answered += ok[i] && (v[i] == 0 || v[i] == 1);
            wrote += ok[i] && v[i] == 1;
        }
    } while (answered < dlock__redlock_quorum(c) && dups(c) == dups0 && dlock__backoff_sleep(&bo, deadline) == 0);
    if (dup_found(c, dups0)) return ENOLCK;
    if (answered < dlock__redlock_quorum(c))
        return dlock__seterr(ENOLCK, "%s: only %zu masters answered the fenced write; a quorum is %zu",
                             c->node.conf.redacted_url, answered, dlock__redlock_quorum(c));
    *written = wrote >= dlock__redlock_quorum(c);
    return 0;
}

/* Lock information: what a quorum of masters says.  Every master is
 * asked at once (each within the call's bound and the command timeout).
 * Held: a quorum records one holder (one token); its fence is the largest
 * they record, its lease left the time until fewer than a quorum record
 * it.  Free: a quorum records no holder.  Shared holders: as many as a
 * quorum of masters counts at least.  The robust state and the waiting
 * writers: the most any master says (an acquire meets them on any one).
 * Fewer than a quorum answered: ENOLCK (or the error the masters gave),
 * "only K of N Redlock masters answered".  A quorum answered but agrees
 * neither on one holder nor on "free" (a grant not yet given back, a
 * master restarted empty while another is down): ENOLCK saying that the
 * masters disagree -- never "free", as the lock cannot be taken while
 * that lasts. */

/* The holder's token in an info answer (dlock__info_parse accepted it),
 * or NULL: no holder. */
static const redisReply *info_owner(const redisReply *r) {
    const redisReply *h = r->element[0];
    size_t i;
    for (i = 0; i + 1 < h->elements; i += 2)
        if (strcmp(h->element[i]->str, "owner") == 0) return h->element[i + 1];
    return NULL;
}

static int same_owner(const redisReply *a, const redisReply *b) {
    return a != NULL && b != NULL && a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
}

/* The k-th largest (k >= 1) of v[0..n) -- the most that at least k of
 * them reach -- or 0 when n < k.  Sorts v. */
static int64_t kth_largest(int64_t *v, size_t n, size_t k) {
    size_t i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j - 1] < v[j]; j--) {
            int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return k >= 1 && k <= n ? v[k - 1] : 0;
}

/* Master i's answer (rep) read into in[i], own[i]: 1, or 0 (the reason
 * set, *rc the error) when it is not an answer. */
static int info_read(dlock__backend *c, size_t i, const redisReply *rep, dlock_lock_info_t *in,
                     const redisReply **own, int *rc) {
    dlock__backend *m = c->members[i];
    if (rep != NULL && dlock__info_parse(rep, &in[i]) == 0) {
        own[i] = info_owner(rep);
        return 1;
    }
    if (rep == NULL) return 0;
    dlock__pool_flush(&m->node); /* an answer out of step: drop the idle connections */
    if (rep->type == REDIS_REPLY_ERROR &&
        (strncmp(rep->str, "NOPERM", 6) == 0 || strstr(rep->str, "can't run this command") != NULL))
        *rc = dlock__seterr(EPROTO, "%s: info refused by the server's ACL (see \"Running as a minimal ACL user\" "
                            "in the README): %.200s", m->node.conf.redacted_url, rep->str);
    else if (rep->type == REDIS_REPLY_ERROR)
        *rc = dlock__seterr(EPROTO, "%s: info failed: %.200s", m->node.conf.redacted_url, rep->str);
    else
        *rc = dlock__seterr(EPROTO, "%s: unexpected answer to info", m->node.conf.redacted_url);
    return 0;
}

/* No quorum for one holder nor for "free": the message says who holds it
 * where. */
static int info_disagree(dlock__backend *c, const dlock__keys *k, const dlock_lock_info_t *in,
                         const redisReply *const *own, const int *ok, size_t answered, size_t nfree) {
    char said[400] = "";
    size_t i, j, n = c->nmembers, len = 0;
    int64_t longest = 0;
    for (i = 0; i < n; i++) {
        size_t k = 0;
        if (!ok[i] || own[i] == NULL) continue;
        if (in[i].lease_left_ms > longest) longest = in[i].lease_left_ms;
        for (j = 0; j < i && !(ok[j] && same_owner(own[i], own[j])); j++)
            ;
        if (j < i) continue; /* counted with master j */
        for (j = i; j < n; j++) k += ok[j] && same_owner(own[i], own[j]);
        if (len < sizeof said)
            len += (size_t)snprintf(said + len, sizeof said - len, "%s%.60s pid %ld thread %lu on %zu", len ? ", " : "",
                                    in[i].host, in[i].pid, in[i].tid, k);
    }
    if (len < sizeof said) snprintf(said + len, sizeof said - len, "%sfree on %zu", len ? ", " : "", nfree);
    return dlock__seterr(ENOLCK,
                         "%s: the Redlock masters disagree on '%.64s': no quorum (%zu of %zu) records one "
                         "holder, nor records it free (%zu answered: %s); it cannot be taken until they agree -- "
                         "a grant that no quorum records ends with its lease (the longest left: %lld ms): ask again",
                         c->node.conf.redacted_url, k->name, dlock__redlock_quorum(c), n, answered, said,
                         (long long)longest);
}

static int rl_info(dlock__backend *c, const dlock__keys *k, dlock_lock_info_t *out, dlock__mono deadline) {
    redisReply *rep[DLOCK__NODES_MAX];
    const redisReply *own[DLOCK__NODES_MAX];
    dlock_lock_info_t in[DLOCK__NODES_MAX];
    int rcs[DLOCK__NODES_MAX], ok[DLOCK__NODES_MAX], rc = 0, err = 0;
    int64_t v[DLOCK__NODES_MAX];
    const char *args[2];
    size_t lens[2], i, j, n = c->nmembers, q = dlock__redlock_quorum(c), answered = 0, nfree = 0, best = 0, bestn = 0,
                          cnt;
    unsigned dups0 = dups(c);
    dlock__mono dl = member_deadline(c);
    char why[400] = "";

    if (deadline < dl) dl = deadline; /* the first attempt is made all the same (pool_get) */
    args[0] = k->keys[DLOCK__K_LOCK];
    lens[0] = k->keylens[DLOCK__K_LOCK];
    args[1] = c->epoch_key;
    lens[1] = strlen(c->epoch_key);
    dlock__script_run_all(c->members, n, n, NULL, 0, DLOCK__SCRIPT_INFO, rep, rcs, dl, 2, 2, args, lens);
    for (i = 0; i < n; i++)
        if (rep[i] == NULL) snprintf(why, sizeof why, "%s", dlock_last_error());
    for (i = 0; i < n; i++) {
        own[i] = NULL;
        ok[i] = info_read(c, i, rep[i], in, own, &err);
        if (!ok[i] && rep[i] != NULL) snprintf(why, sizeof why, "%s", dlock_last_error());
        if (!ok[i] && rep[i] == NULL && rcs[i] != ENOLCK && rcs[i] != DLOCK__ALL_NOT_SENT && rcs[i] != 0) err = rcs[i];
        if (!ok[i]) continue;
        answered++;
        if (own[i] == NULL) nfree++;
    }
    if (dup_found(c, dups0)) {
        rc = ENOLCK;
    } else if (answered < q) {
        rc = dlock__seterr(err ? err : ENOLCK, "%s: only %zu of %zu Redlock masters answered (a quorum is %zu): "
                           "what '%.64s' is cannot be known (%.300s)", c->node.conf.redacted_url, answered, n, q, k->name,
                           strncmp(why, "ENOLCK: ", 8) == 0 ? why + 8 : why);
    } else {
        /* the holder that the most masters record */
        for (i = 0; i < n; i++) {
            if (!ok[i] || own[i] == NULL) continue;
            for (j = i, cnt = 0; j < n; j++) cnt += ok[j] && same_owner(own[i], own[j]);
            if (cnt > bestn) best = i, bestn = cnt;
        }
        if (bestn >= q) {
            size_t m = 0;
            *out = in[best];
            for (i = 0; i < n; i++) {
                if (!ok[i] || !same_owner(own[best], own[i])) continue;
                if (in[i].fence > out->fence) *out = in[i]; /* the record of the largest fence */
                v[m++] = in[i].lease_left_ms;
            }
            out->lease_left_ms = kth_largest(v, m, q);
        } else if (nfree >= q) {
            for (i = 0; i < n && !(ok[i] && own[i] == NULL); i++)
                ;
            *out = in[i];
            /* in a lock-delay until a quorum of masters is past theirs */
            for (i = 0, cnt = 0; i < n; i++)
                if (ok[i] && own[i] == NULL) v[cnt++] = in[i].delay_left_ms;
            out->delay_left_ms = kth_largest(v, cnt, cnt - q + 1);
        } else {
            rc = info_disagree(c, k, in, own, ok, answered, nfree);
        }
        if (rc == 0) {
            for (i = 0, cnt = 0; i < n; i++)
                if (ok[i]) v[cnt++] = in[i].readers;
            out->readers = (unsigned)kth_largest(v, cnt, q);
            for (i = 0; i < n; i++) {
                if (!ok[i]) continue;
                if (in[i].robust_state > out->robust_state) out->robust_state = in[i].robust_state;
                if (in[i].writers_waiting > out->writers_waiting) out->writers_waiting = in[i].writers_waiting;
            }
        }
    }
    for (i = 0; i < n; i++)
        if (rep[i] != NULL) freeReplyObject(rep[i]);
    return rc;
}

/* Condition variables: every operation goes to every master at once and
 * counts once a quorum answered (so one master paused or down holds none
 * up, and a signal reaches the master the subscriber listens on when it
 * is well).  Each master keeps its own waiters: a registration ('wait')
 * holds when a quorum took it; a waiter counts as woken ('check', and
 * 'withdraw' at a timeout, answer 0) when any master that answered says a
 * signal took it -- masters may order two waiters differently, and a
 * wake-up that is not for it is allowed (as POSIX allows spurious ones),
 * a lost one is not; 'signal' and 'broadcast' answer the most that any
 * master woke. */
static int rl_cond(dlock__backend *c, const dlock__keys *k, const char *op, const char *token, unsigned ttl_ms,
                   const char *const *stale, size_t nstale, long long *result, dlock__mono deadline) {
    int ok[DLOCK__NODES_MAX];
    long long v[DLOCK__NODES_MAX], res;
    size_t i, answered;
    unsigned dups0 = dups(c);
    char ttl[DLOCK__DEC_MAX + 1];
    int any_zero = strcmp(op, "check") == 0 || strcmp(op, "withdraw") == 0;
    dlock__args a;
    a.nkeys = 1;
    a.n = 0;
    a.v[a.n] = k->key, a.len[a.n++] = k->keylen;
    a.v[a.n] = op, a.len[a.n++] = strlen(op);
    a.v[a.n] = token, a.len[a.n++] = strlen(token);
    a.len[a.n] = dlock__dec(ttl, ttl_ms), a.v[a.n++] = ttl;
    for (i = 0; i < nstale && i < DLOCK__COND_STALE_MAX; i++) a.v[a.n] = stale[i], a.len[a.n++] = strlen(stale[i]);
    answered = run_ints(c, NULL, dlock__redlock_quorum(c), 0, 0, DLOCK__SCRIPT_COND, &a, call_bound(c, deadline), ok,
                        v);
    if (dup_found(c, dups0)) return ENOLCK;
    if (answered < dlock__redlock_quorum(c))
        return dlock__seterr(ENOLCK, "%s: only %zu masters answered the condition variable's %s; a quorum is %zu",
                             c->node.conf.redacted_url, answered, op, dlock__redlock_quorum(c));
    for (i = 0, res = any_zero ? 1 : 0; i < c->nmembers; i++) {
        if (!ok[i]) continue;
        if (v[i] < 0) return dlock__seterr(EPROTO, "%s: unexpected answer to the condition variable's %s",
                                           c->members[i]->node.conf.redacted_url, op);
        if (any_zero ? v[i] < res : v[i] > res) res = v[i];
    }
    *result = res;
    return 0;
}

/* Semaphores need one counter that every taker sees: on independent
 * masters a unit would be a quorum of per-master counts, which a post
 * that reached only some masters, or a master that restarted empty,
 * would make more units than posted (docs/design.md).  Not offered. */
static int rl_sem(dlock__backend *c, const dlock__keys *k, const char *op, const char *token, unsigned ttl_ms,
                  long long arg, unsigned lease_ms, long long remake, long long *result, dlock__sent *sent,
                  dlock__mono deadline) {
    (void)c; (void)k; (void)op; (void)token; (void)ttl_ms; (void)arg; (void)lease_ms; (void)remake; (void)result;
    (void)sent;
    (void)deadline;
    return dlock__seterr(ENOTSUP, "semaphores are not supported on a Redlock deployment: they need one "
                         "server, Sentinel or a Redis Cluster");
}

const dlock__backend_ops dlock__redlock_backend = {
    .queues = 0,
    .acquire = rl_acquire,
    .release = rl_release,
    .renew = dlock__redlock_renew,
    .reset = rl_reset,
    .fenced_set = rl_fenced_set,
    .info = rl_info,
    .cond = rl_cond,
    .sem = rl_sem,
    .waits = NULL, /* no waiters kept: each master would keep its own (docs/design.md, "Deadlock detection") */
    .range = NULL, /* no record-lock range tables: a range is granted by one script on one server */
};

static int node_identify(dlock__node *n, dlock__conn *cn) {
    return dlock__redlock_identify(n->up, cn);
}

const dlock__node_hooks dlock__redlock_hooks = { .on_connect = node_identify };
