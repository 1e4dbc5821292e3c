/* redlock_renew.c -- the Redlock backend's renewal: each round renews a
 * batch of holds on every master at once, on each master's own renewal
 * connection, and a hold stays valid while a quorum renews it.  The rest
 * of the backend (acquisition, release, fencing, information, the
 * masters' identity) is redlock.c's; redlock.h is what the two share.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/redlock.h"

/* ------------------------------------------------------------ renewal
 *
 * A renewal round sends each master its batch at once, on that master's
 * renewal connection, and reads the answers as they come, whichever
 * master answers first: a renewal is decided once a quorum renewed it,
 * or so many refused that no quorum can (dlock__redlock_renew).  A
 * master that has not answered by then is not waited for: its connection
 * keeps the answers it owes (cn->owed), read and dropped at the next
 * round, whose batch goes behind them (a master slow to answer still
 * counts, once its server gets to it); one whose server has not answered
 * on it for longer than the reply floor is taken as paused and not asked
 * again until it has answered (a paused server runs them in order when it
 * runs again: renew_settle).  A master without a connection gets one once
 * the round is decided (before, only when the others cannot make a
 * quorum: connecting to a server that does not run takes the round's
 * whole bound -- and then those that owe the lock calls answers last);
 * one whose server takes no connection in time is not tried
 * for RENEW_STALL_MS; one silent for longer than the unreachable bound
 * while it owes answers gets a new connection. */
#define RENEW_STALL_MS 1000
#define RENEW_STALL_MIN_MS 100

/* The scripts a batch runs (dlock__renew_append), as cn->scripts bits. */
#define RENEW_SCRIPTS (((uint64_t)1 << DLOCK__SCRIPT_RENEW) | ((uint64_t)1 << DLOCK__SCRIPT_SEM))

/* One master's part of a round. */
struct rn_master {
    dlock__conn *cn; /* its renewal connection, while answers are awaited; NULL: none */
    size_t skip;     /* answers owed from earlier rounds, read and dropped first */
    size_t next;     /* the renewal its next answer (after those) is for */
    int noscript;    /* an answer said NOSCRIPT: the batch goes again, scripts loaded */
    int reloaded;    /* it has */
};

/* The round's bound: a quarter of the shortest lease (50 ms at least), and
 * not past the holds' validity (deadline). */
static dlock__mono renew_end(const dlock__renewal *rn, size_t n, dlock__mono deadline) {
    unsigned least = rn[0].lease_ms;
    dlock__mono end;
    size_t j;
    for (j = 1; j < n; j++)
        if (rn[j].lease_ms < least) least = rn[j].lease_ms;
    end = dlock__now() + (dlock__mono)(least / 4 < 50 ? 50 : least / 4) * DLOCK__MS;
    return deadline < end ? deadline : end;
}

static void renew_drop(dlock__backend *m) {
    dlock__conn *cn = m->renew_conn;
    __atomic_store_n(&m->renew_conn, NULL, __ATOMIC_SEQ_CST); /* (as backend.c's drop_renew_conn) */
    dlock__conn_close(cn);
}

/* Reads and drops, without waiting, the answers m's renewal connection
 * owes from earlier rounds: 1 when m may be asked, else 0.  Asked while
 * it owes nothing, or while its server answered on it (or was sent a
 * batch while it owed nothing: cn->late_at) within the reply floor --
 * the batch goes behind what it owes, and its answers are read after
 * those.  Judged by time, not by how much it owes: a master whose
 * answers come some ms late owes the last round's batch when the next
 * round starts (the others decided that one), and a count against this
 * round's batch would pass it over whenever the batch shrank (holds of
 * two leases renewed in turn), the round left to the others -- one of
 * them paused, to none: the round undecided, the holds' renewals put off
 * (test_redlock_renewals_with_a_late_master).  One silent for longer is
 * taken as paused (sent no more until it answers: batches pile up in no
 * socket), and past the unreachable bound gets a new connection. */
static int renew_settle(dlock__backend *m) {
    dlock__conn *cn = m->renew_conn;
    dlock__mono silent;
    int broken = 0;
    while (cn->owed > 0) {
        void *r = NULL;
        if (dlock__reply_get(cn, &r) != REDIS_OK) break;
        if (r == NULL) {
            if (dlock__conns_read(&cn, 1, dlock__now(), &broken) == 0 || broken) break;
            continue;
        }
        if (((redisReply *)r)->type == REDIS_REPLY_ERROR && strncmp(((redisReply *)r)->str, "NOSCRIPT", 8) == 0)
            cn->scripts &= ~RENEW_SCRIPTS; /* that renewal did not run: the next batch loads them first */
        freeReplyObject(r);
        cn->owed--;
        cn->used = cn->late_at = dlock__now();
    }
    silent = cn->owed == 0 ? 0 : dlock__now() - cn->late_at;
    if (!broken && cn->ctx->err == 0 && silent <= (dlock__mono)m->node.conf.unreachable_ms * DLOCK__MS)
        return silent <= (dlock__mono)dlock__reply_floor_ms(&m->node) * DLOCK__MS;
    renew_drop(m); /* broken, or silent too long: a new connection (after the round) */
    return 0;
}

/* Opens m's renewal connection, within end (5 ms at least), unless m did
 * not take one in time lately: 1 when it has one. */
static int renew_connect(dlock__backend *m, dlock__mono end) {
    dlock__mono t0 = dlock__now();
    int64_t left = (end - t0) / DLOCK__MS;
    if (m->renew_conn != NULL) return 1;
    if (m->rl_renew_stall > t0 || __atomic_load_n(&m->node.stalled_until, __ATOMIC_RELAXED) > t0) return 0;
    if (dlock__conn_open(&m->node, &m->renew_conn, (unsigned)(left < 5 ? 5 : left)) == 0) return 1;
    m->renew_conn = NULL;
    /* The renewal's own pause, not the node's: a bound as short as a
     * quarter of a short lease says little of a server on a loaded host,
     * and the lock calls must not pass over a master that runs. */
    if (dlock__now() - t0 >= (dlock__mono)RENEW_STALL_MIN_MS * DLOCK__MS && !dlock__node_refused_since(&m->node, t0))
        m->rl_renew_stall = dlock__now() + (dlock__mono)RENEW_STALL_MS * DLOCK__MS;
    return 0;
}

/* SCRIPT LOAD of the renewal's scripts written on cn, ahead of a batch,
 * unless its server has them (cn->scripts): a batch goes as EVALSHA, and
 * a NOSCRIPT read late (renew_settle: the others decided the round) would
 * be that master's renewals lost -- its keys left to run out there while
 * the holds count on it (a new connection, a server restarted or whose
 * script cache was flushed).  Their answers are owed, read and dropped
 * before the batch's.  0, or -1 when out of memory. */
static int renew_load_append(dlock__backend *m, dlock__conn *cn) {
    static const int which[2] = { DLOCK__SCRIPT_RENEW, DLOCK__SCRIPT_SEM };
    size_t i;
    if ((cn->scripts & RENEW_SCRIPTS) == RENEW_SCRIPTS) return 0;
    for (i = 0; i < 2; i++) {
        if (dlock__script_load_append(cn->ctx, which[i], m->node.conf.cluster) != 0) return -1;
        cn->owed++;
    }
    cn->scripts |= RENEW_SCRIPTS; /* they run before anything sent after them */
    return 0;
}

/* Sends master m its batch (connecting first if it has no connection:
 * connect 1 when that may be tried now).  1 when sent (st->cn set). */
static int renew_send(dlock__backend *m, struct rn_master *st, const dlock__renewal *rn, size_t n, int connect,
                      dlock__mono end) {
    int64_t left;
    int idle;
    if (m->renew_conn == NULL && (!connect || !renew_connect(m, end))) return 0;
    left = (end - dlock__now()) / DLOCK__MS;
    idle = m->renew_conn->owed == 0;
    dlock__conn_timeout(m->renew_conn, (unsigned)(left < 5 ? 5 : left)); /* (a send to a server that stopped reading) */
    if (renew_load_append(m, m->renew_conn) != 0 || dlock__renew_append(m, m->renew_conn, rn, n) != 0 ||
        dlock__conn_flush(m->renew_conn) != 0) {
        renew_drop(m);
        return 0;
    }
    st->skip = m->renew_conn->owed;
    if (idle) m->renew_conn->late_at = dlock__now(); /* its silence counts from now (renew_settle) */
    m->renew_conn->owed += (unsigned)n;
    st->cn = m->renew_conn;
    st->next = 0;
    return 1;
}

/* The renewals' tallies: yes[j], no[j] masters renewed / refused renewal
 * j; counted[i * n + j]: master i's answer to it is in them. */
struct rn_tally {
    unsigned short *yes, *no;
    unsigned char *counted, *wanted;
    size_t n;
};

/* Takes the whole answers master i's connection has; 0, or -1 when it
 * is out of step or broke (dropped). */
static int renew_take(dlock__backend *c, size_t i, struct rn_master *st, const dlock__renewal *rn,
                      struct rn_tally *t) {
    dlock__backend *m = c->members[i];
    dlock__conn *cn = st->cn;
    void *p = NULL;
    while (cn->owed > 0 && dlock__reply_get(cn, &p) == REDIS_OK && p != NULL) {
        redisReply *r = p;
        dlock__renewal one;
        size_t j;
        cn->owed--;
        cn->used = cn->late_at = dlock__now();
        cn->answered++;
        if (st->skip > 0) { /* an earlier round's */
            st->skip--;
            freeReplyObject(r);
            p = NULL;
            continue;
        }
        one = rn[j = st->next++];
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) st->noscript = 1;
        if (dlock__renew_answer(r, &one) == 0 && !t->counted[i * t->n + j]) {
            t->counted[i * t->n + j] = 1;
            if (one.result == 1) t->yes[j]++;
            else t->no[j]++;
            t->wanted[j] |= (unsigned char)one.wanted;
        }
        freeReplyObject(r);
        p = NULL;
    }
    if (cn->ctx->err != 0 || (cn->owed == 0 && cn->ctx->reader->pos < cn->ctx->reader->len)) {
        renew_drop(m); /* broken, or more answers than requests: none of the rest can be trusted */
        st->cn = NULL;
        return -1;
    }
    if (cn->owed > 0) return 0;
    st->cn = NULL;
    if (st->noscript && !st->reloaded) {
        /* A restarted server: load the scripts, send the batch again. */
        st->reloaded = 1;
        if (dlock__script_load_all(cn, m->node.conf.cluster) != 0) {
            renew_drop(m);
            return -1;
        }
        return renew_send(m, st, rn, t->n, 0, dlock__now() + (dlock__mono)cn->timeout_ms * DLOCK__MS) ? 0 : -1;
    }
    return 0;
}

/* Is every renewal decided (a quorum renewed it, or can no longer)? */
static int renew_decided(const dlock__backend *c, const struct rn_tally *t) {
    size_t j, q = dlock__redlock_quorum(c), nm = c->nmembers;
    for (j = 0; j < t->n; j++)
        if (t->yes[j] < q && t->no[j] <= nm - q) return 0;
    return 1;
}

/* Reads the masters' answers as they come until every renewal is decided
 * or `end` -- and once more then, without waiting: a connection made to a
 * master that did not answer may have taken the time, while the others'
 * answers came. */
static void renew_collect(dlock__backend *c, struct rn_master *st, const dlock__renewal *rn, struct rn_tally *t,
                          dlock__mono end) {
    dlock__conn *cns[DLOCK__NODES_MAX];
    int broken[DLOCK__NODES_MAX], last = 0;
    size_t i, waiting;
    for (;;) {
        for (i = 0, waiting = 0; i < c->nmembers; i++) {
            if (st[i].cn != NULL) (void)renew_take(c, i, &st[i], rn, t);
            cns[i] = st[i].cn;
            waiting += cns[i] != NULL;
        }
        if (waiting == 0 || renew_decided(c, t) || last) return;
        last = dlock__now() >= end;
        (void)dlock__conns_read(cns, c->nmembers, end, broken);
        for (i = 0; i < c->nmembers; i++)
            if (broken[i] && st[i].cn != NULL) {
                renew_drop(c->members[i]);
                st[i].cn = NULL;
            }
    }
}

int dlock__redlock_renew(dlock__backend *c, dlock__renewal *rn, size_t n, dlock__mono deadline) {
    struct rn_master st[DLOCK__NODES_MAX];
    struct rn_tally t = { NULL, NULL, NULL, NULL, n };
    size_t i, j, q = dlock__redlock_quorum(c), nm = c->nmembers, sent;
    int owes[DLOCK__NODES_MAX], later[DLOCK__NODES_MAX], pass;
    dlock__mono end;
    if (n == 0) return 0;
    end = renew_end(rn, n, deadline);
    t.yes = calloc(n, sizeof *t.yes);
    t.no = calloc(n, sizeof *t.no);
    t.wanted = calloc(n, 1);
    t.counted = calloc(n * nm, 1);
    if (t.yes == NULL || t.no == NULL || t.wanted == NULL || t.counted == NULL) {
        free(t.yes), free(t.no), free(t.wanted), free(t.counted);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    memset(st, 0, sizeof st);
    /* Those with a connection at hand are asked first; those that need
     * one, only when the others cannot make a quorum (a connection to a
     * master that does not run takes the round's whole bound), else once
     * the round is decided, for the next one. */
    for (i = 0, sent = 0; i < nm; i++) {
        dlock__backend *m = c->members[i];
        owes[i] = m->renew_conn != NULL && !renew_settle(m) && m->renew_conn != NULL; /* paused: not asked */
        if (m->renew_conn != NULL && !owes[i]) sent += (size_t)renew_send(m, &st[i], rn, n, 0, end);
    }
    /* Those that owe the lock calls answers last (dlock__node_owes): a
     * paused server takes the connection, then answers nothing until the
     * round's bound, and the masters after it would be left no time. */
    for (i = 0; i < nm; i++) later[i] = !owes[i] && st[i].cn == NULL && dlock__node_owes(&c->members[i]->node);
    for (pass = 0; pass < 2; pass++)
        for (i = 0; i < nm && sent < q; i++)
            if (!owes[i] && st[i].cn == NULL && later[i] == pass)
                sent += (size_t)renew_send(c->members[i], &st[i], rn, n, 1, end);
    renew_collect(c, st, rn, &t, end);
    for (j = 0; j < n; j++) {
        rn[j].result = t.yes[j] >= q ? 1 : t.no[j] > nm - q ? 0 : -1;
        rn[j].wanted = rn[j].result == 1 && t.wanted[j];
        rn[j].moved = 0;
    }
    free(t.yes), free(t.no), free(t.wanted), free(t.counted);
    for (i = 0; i < nm; i++)
        if (!owes[i]) (void)renew_connect(c->members[i], renew_end(rn, n, deadline));
    return 0;
}
