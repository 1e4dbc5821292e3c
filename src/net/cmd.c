/* cmd.c -- commands on a node: a request and its answer on a pooled
 * connection, asked again on a fresh connection when one breaks, after
 * the node's redirections, with WAIT or a pipeline's followers; and
 * requests whose answers are read later (owed answers).
 *
 * Commands run on connections from a small per-node pool, so threads
 * do not queue behind each other's round trips.  dlock__command retries on
 * a fresh connection when one breaks (a restarted server, a dropped
 * socket), until the caller's deadline: a server that stays unreachable
 * past the configured bound gives ENOLCK.  Retrying is safe because every
 * script is idempotent for the same token (see scripts.c).
 *
 * Messages name the server by its redacted URL: never a password.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/internal.h"

/* ------------------------------------------------------- owed answers
 *
 * A request sent without waiting for its answer (dlock__command_send:
 * the pipelined unlock) leaves its connection out of the pool, owing that
 * answer, on n->owed under the calling thread's name.  The thread's next
 * request on the node goes out on it (cmd_send): the server runs both in
 * order, and one round trip reads both answers.  A request sent held is
 * not even written until then: it leaves in the same write as that next
 * request (one write and one wait a pair where two writes wake the server
 * twice).  A thread that makes no request soon leaves them to
 * dlock__owed_settle (the renewal thread's, within a few ms; exit, fork,
 * destroy), which writes what is held first.  A connection that breaks
 * tells each owed request "no answer": the layer above asks it again. */

struct dlock__owed {
    dlock__conn *cn;
    pthread_t owner;
    dlock__mono first; /* when its oldest unread request went out (or was held) */
    int count;
    int held; /* requests in cn's output buffer, not written yet */
    struct {
        dlock__owed_fn fn;
        void *arg;
    } e[DLOCK__OWED_MAX];
    struct dlock__owed *next;
};

/* The calling thread's owed connection to n, off the list; NULL none. */
static dlock__owed *owed_take(dlock__node *n) {
    dlock__owed **p, *o = NULL;
    pthread_t me;
    if (__atomic_load_n(&n->owed, __ATOMIC_ACQUIRE) == NULL) return NULL; /* the common case: no lock taken */
    me = pthread_self();
    pthread_mutex_lock(n->mu);
    for (p = &n->owed; (o = *p) != NULL; p = &o->next)
        if (pthread_equal(o->owner, me)) {
            __atomic_store_n(p, o->next, __ATOMIC_RELEASE); /* (read unlocked by owed_take) */
            break;
        }
    pthread_mutex_unlock(n->mu);
    return o;
}

/* Reads o's owed answers in order, each to its fn: 0, or -1 when the
 * connection broke (the rest are told none).  o->count is 0 after. */
static int owed_read(dlock__owed *o) {
    int i, rc = 0;
    for (i = 0; i < o->count; i++) {
        void *r = NULL;
        if (rc == 0 && dlock__conn_reply(o->cn, &r) != REDIS_OK) rc = -1;
        o->e[i].fn(o->e[i].arg, r, rc == 0 ? DLOCK__OWED_ANSWER : DLOCK__OWED_NONE);
        if (r != NULL) freeReplyObject(r);
    }
    o->count = 0;
    return rc;
}

/* Frees o (not its connection); requests still owed are told none. */
static void owed_free(dlock__owed *o) {
    int i;
    for (i = 0; i < o->count; i++) o->e[i].fn(o->e[i].arg, NULL, DLOCK__OWED_NONE);
    free(o);
}

/* Writes what o holds, reads its answers and puts its connection back
 * (closed if it broke). */
static void owed_end(dlock__node *n, dlock__owed *o, dlock__mono deadline) {
    int broken;
    dlock__set_timeout(n, o->cn, deadline);
    /* (held ones that cannot be written: none went out, owed_free tells none) */
    broken = (o->held && dlock__conn_flush(o->cn) != 0) || owed_read(o) != 0 ||
             o->cn->ctx->reader->pos < o->cn->ctx->reader->len;
    dlock__pool_put(n, o->cn, broken);
    owed_free(o);
}

int dlock__command_send(dlock__node *n, int argc, const char **argv, const size_t *lens, int hold, dlock__owed_fn fn,
                        void *arg, dlock__mono deadline) {
    dlock__owed *o = owed_take(n);
    int rc;
    if (o != NULL && o->count == DLOCK__OWED_MAX) {
        owed_end(n, o, deadline); /* enough owed: read them now */
        o = NULL;
    }
    if (o == NULL) {
        if ((o = calloc(1, sizeof *o)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
        if ((rc = dlock__pool_get(n, &o->cn, deadline)) != 0) {
            free(o);
            return rc;
        }
        o->owner = pthread_self();
    }
    dlock__set_timeout(n, o->cn, deadline);
    if (dlock__resp_append(o->cn->ctx, argc, argv, lens) != 0 || (!hold && dlock__conn_flush(o->cn) != 0)) {
        dlock__seterr(ENOLCK, "%s: cannot send: %s", n->conf.redacted_url,
                      o->cn->ctx->errstr[0] ? o->cn->ctx->errstr : "out of memory");
        if (!o->held) (void)owed_read(o); /* (the earlier ones went out before: their answers may be there) */
        dlock__pool_put(n, o->cn, 1);
        owed_free(o);
        return ENOLCK;
    }
    if (o->count == 0) o->first = dlock__now();
    o->held = hold;
    o->e[o->count].fn = fn;
    o->e[o->count].arg = arg;
    o->count++;
    pthread_mutex_lock(n->mu);
    o->next = n->owed;
    __atomic_store_n(&n->owed, o, __ATOMIC_RELEASE);
    pthread_mutex_unlock(n->mu);
    return 0;
}

void dlock__owed_settle(dlock__node *n, dlock__mono before, dlock__mono held_before, dlock__mono deadline) {
    for (;;) {
        dlock__owed **p, *o;
        if (__atomic_load_n(&n->owed, __ATOMIC_ACQUIRE) == NULL) return;
        pthread_mutex_lock(n->mu);
        for (p = &n->owed; (o = *p) != NULL; p = &o->next)
            if (before == DLOCK__MONO_NEVER || o->first < (o->held ? held_before : before)) {
                __atomic_store_n(p, o->next, __ATOMIC_RELEASE);
                break;
            }
        pthread_mutex_unlock(n->mu);
        if (o == NULL) return;
        owed_end(n, o, deadline);
    }
}

void dlock__owed_forget(dlock__node *n) {
    dlock__owed *o;
    while ((o = n->owed) != NULL) {
        int i;
        n->owed = o->next;
        for (i = 0; i < o->count; i++) o->e[i].fn(o->e[i].arg, NULL, DLOCK__OWED_FORGET);
        dlock__conn_abandon(o->cn);
        free(o);
    }
}

/* ------------------------------------------------------------ commands */

unsigned dlock__reply_floor_ms(const dlock__node *n) {
    unsigned ms = n->conf.command_timeout_ms;
    return ms < DLOCK__REPLY_FLOOR_MS ? ms : DLOCK__REPLY_FLOOR_MS;
}

/* A reply is awaited no longer than the command timeout, nor past the
 * caller's deadline -- but at least the reply floor, so that a command
 * sent at its deadline is really tried -- and never past the call's end.
 * That bound is the connection's bound_ms, which dlock__conn_reply keeps;
 * the socket's receive timeout is changed only when it is longer than the
 * bound, or shorter than both the bound and the floor, and then set to
 * the lesser of the two: calls with different bounds on one connection (a
 * trylock's floor, then an unlock's command timeout) make no system call
 * for it.  (Its send timeout stays the connection's command timeout: a
 * request that cannot be sent for that long has a server that stopped
 * reading long before.) */
unsigned dlock__reply_bound(const dlock__node *n, dlock__mono deadline) {
    unsigned ms = n->conf.command_timeout_ms, floor = dlock__reply_floor_ms(n);
    if (deadline != DLOCK__MONO_NEVER) {
        int64_t left = (deadline - dlock__now()) / DLOCK__MS;
        if (left < (int64_t)ms) ms = left < (int64_t)floor ? floor : (unsigned)left;
    }
    return dlock__end_cap(ms);
}

void dlock__set_timeout(dlock__node *n, dlock__conn *cn, dlock__mono deadline) {
    unsigned ms = dlock__reply_bound(n, deadline), floor = dlock__reply_floor_ms(n), low;
    low = ms < floor ? ms : floor;
    if (cn->timeout_ms > ms || cn->timeout_ms < low) dlock__rcv_timeout(cn, (dlock__mono)low * DLOCK__MS);
    cn->bound_ms = ms;
}

/* Error answers that mean "not now" rather than "no". */
static int not_ready(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL &&
           (strncmp(r->str, "LOADING", 7) == 0 || strncmp(r->str, "BUSY ", 5) == 0 ||
            strncmp(r->str, "MASTERDOWN", 10) == 0 || strncmp(r->str, "TRYAGAIN", 8) == 0 ||
            strncmp(r->str, "CLUSTERDOWN", 11) == 0);
}

/* "This server is no longer the master" (a failover demoted it): the
 * request did not write anything; ask the master, wherever it is now. */
int dlock__demoted(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL && strncmp(r->str, "READONLY", 8) == 0;
}

/* Sends the command and, with `waitn`, a WAIT for that many replicas
 * after it on the same connection (WAIT counts this connection's writes);
 * returns the command's answer, the WAIT's count in *acked. */
int dlock__wait_append(dlock__conn *cn, unsigned replicas, unsigned timeout_ms) {
    char n[DLOCK__DEC_MAX], ms[DLOCK__DEC_MAX];
    const char *argv[3] = { "WAIT", n, ms };
    size_t lens[3] = { 4, 0, 0 };
    lens[1] = dlock__dec(n, replicas);
    lens[2] = dlock__dec(ms, timeout_ms);
    return dlock__resp_append(cn->ctx, 3, argv, lens);
}

int dlock__wait_read(dlock__conn *cn, long long *acked) {
    void *w = NULL;
    if (dlock__conn_reply(cn, &w) != REDIS_OK) return ENOLCK;
    *acked = ((redisReply *)w)->type == REDIS_REPLY_INTEGER ? ((redisReply *)w)->integer : -1;
    freeReplyObject(w);
    return 0;
}

/* Sends the command (after ASKING, for a cluster's ASK redirection) and,
 * with `waitn`, a WAIT for that many replicas after it on the same
 * connection (WAIT counts this connection's writes); returns the
 * command's answer, the WAIT's count in *acked. */
static const char *const asking_argv[1] = { "ASKING" };
static const size_t asking_len[1] = { 6 };

/* The answers to a pipeline's followers, freed (the first's was not
 * usable, or one of theirs did not come). */
static void after_free(redisReply **after_out, int n) {
    int i;
    for (i = 0; i < n; i++) {
        if (after_out[i] != NULL) freeReplyObject(after_out[i]);
        after_out[i] = NULL;
    }
}

/* Sends the request (after ASKING, with its followers and WAIT), reads
 * the answers owed on cn first (owed: the thread's, taken with cn; freed
 * here), then its own. */
static redisReply *cmd_and_wait(dlock__node *n, dlock__conn *cn, int argc, const char **argv,
                                const size_t *argvlen, int *sent, unsigned waitn, long long *acked, int asking,
                                int nafter, const dlock__req *after, redisReply **after_out, dlock__owed *owed) {
    void *reply = NULL;
    int out, i;
    if (waitn == 0 && !asking && nafter == 0 && owed == NULL) return dlock__conn_cmd(cn, argc, argv, argvlen, sent);
    out = (!asking || dlock__resp_append(cn->ctx, 1, asking_argv, asking_len) == 0) &&
          dlock__resp_append(cn->ctx, argc, argv, argvlen) == 0;
    for (i = 0; out && i < nafter; i++) out = dlock__resp_append(cn->ctx, after[i].argc, after[i].argv, after[i].lens) == 0;
    out = out && (waitn == 0 || dlock__wait_append(cn, waitn, n->conf.wait_timeout_ms) == 0) && dlock__conn_flush(cn) == 0;
    *sent = out;
    if (owed != NULL) {
        /* (not written, or written in part: owed_free tells each none) */
        out = out && owed_read(owed) == 0;
        owed_free(owed);
    }
    if (!out) return NULL;
    if (asking) {
        if (dlock__conn_reply(cn, &reply) != REDIS_OK) return NULL;
        freeReplyObject(reply); /* +OK */
        reply = NULL;
    }
    if (dlock__conn_reply(cn, &reply) != REDIS_OK) return NULL;
    for (i = 0; i < nafter; i++) {
        void *a = NULL;
        if (dlock__conn_reply(cn, &a) != REDIS_OK) {
            after_free(after_out, i);
            freeReplyObject(reply);
            return NULL;
        }
        after_out[i] = a;
    }
    if (waitn > 0 && dlock__wait_read(cn, acked) != 0) {
        after_free(after_out, nafter);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

/* Redirections one request follows at most (a cluster whose nodes
 * disagree about a slot could send it round forever). */
#define REDIRECTS_MAX 16

/* One command's way through its attempts: where it is sent now (n, after
 * cluster redirections; first, the node first asked), and how far it got. */
typedef struct cmd_run {
    dlock__node *n, *first;
    dlock__conn *cn;
    dlock__mono deadline, began;
    int once, argc, tries, asking, redirects, sent;
    const char **argv;
    const size_t *argvlen;
    unsigned waitn;
    int nafter;              /* a pipeline's followers (dlock__command_pipe) */
    const dlock__req *after;
    redisReply **after_out;
    dlock__owed *owed;       /* the thread's owed answers on cn, read first (cmd_send) */
    dlock__backoff backoff;
    long long *acked;
    dlock__sent *out; /* what the attempts came to (never NULL) */
} cmd_run;

#define CMD_AGAIN (-1) /* (cmd_* steps: ask again) */

/* A request asks again after shorter steps than a connection attempt
 * (DLOCK__BACKOFF_MAX_MS): the server answered, only "not now" (LOADING,
 * TRYAGAIN, a redirection loop), which passes within tens of ms. */
#define CMD_BACKOFF_MAX_MS 160u

/* Waits a little before asking again (CMD_BACKOFF_MAX_MS at most), within
 * the deadline: ENOLCK when the wait would pass it (the message is set). */
static int cmd_backoff(cmd_run *k) {
    dlock__debug("%s: asking again after a back-off (%s)", k->first->conf.redacted_url, dlock_last_error());
    if (dlock__backoff_sleep(&k->backoff, dlock__end_min(k->deadline)) != 0) return ENOLCK;
    k->n = k->first;
    k->asking = 0;
    k->redirects = 0;
    return CMD_AGAIN;
}

/* Sends the command on a connection of k->n and waits for its answer:
 * the answer, or NULL (the connection broke; k->cn is still taken). */
static redisReply *cmd_send(cmd_run *k, int *rc) {
    redisReply *r;
    /* The first attempt goes where the thread's owed answers wait: after
     * them, one round trip reads both (the server runs them in order). */
    k->owed = k->tries == 0 ? owed_take(k->n) : NULL;
    if (k->owed != NULL) {
        k->cn = k->owed->cn;
        *rc = 0;
    } else if ((*rc = dlock__pool_get(k->n, &k->cn, k->deadline)) != 0) {
        return NULL;
    }
    dlock__set_timeout(k->n, k->cn, k->deadline);
    if (k->waitn > 0) { /* the WAIT may take its whole timeout (not past the call's end) */
        unsigned wms = dlock__end_cap(k->n->conf.wait_timeout_ms + 1000);
        if (wms > k->cn->timeout_ms) dlock__conn_timeout(k->cn, wms);
    }
    k->out->at = dlock__now();
    r = cmd_and_wait(k->n, k->cn, k->argc, k->argv, k->argvlen, &k->sent, k->waitn, k->acked, k->asking, k->nafter,
                     k->after, k->after_out, k->owed);
    k->owed = NULL;
    k->asking = 0;
    return r;
}

/* An answer came: 0 with it in *out, CMD_AGAIN (a redirection, a server
 * not ready yet), or an errno value.  The connection goes back. */
static int cmd_answered(cmd_run *k, redisReply *r, redisReply **out) {
    dlock__node *n = k->n, *next;
    if (k->cn->ctx->reader->pos < k->cn->ctx->reader->len) {
        /* More bytes than one answer: the connection is out of step
         * with its requests, and every later answer on it would be
         * another request's.  Never trust it again. */
        freeReplyObject(r);
        dlock__pool_put(n, k->cn, 1);
        return dlock__seterr(EPROTO, "%s: the server sent more than was asked for", n->conf.redacted_url);
    }
    if (dlock__needs_password(r)) { /* asking again cannot mend it */
        freeReplyObject(r);
        dlock__pool_put(n, k->cn, 1);
        return dlock__password_needed(n);
    }
    if (r->type == REDIS_REPLY_ERROR && n->hooks != NULL && n->hooks->redirect != NULL &&
        n->hooks->redirect(n, r, &next, &k->asking) == 1) {
        /* A cluster node: MOVED (the slot lives elsewhere now) or ASK
         * (its keys are moving there): nothing ran; ask that node,
         * with ASKING first for ASK. */
        freeReplyObject(r);
        dlock__pool_put(n, k->cn, 0);
        k->n = next;
        k->tries = -1;
        if (++k->redirects < REDIRECTS_MAX) return CMD_AGAIN;
        /* Sent round and round: the nodes disagree while a slot
         * changes hands.  Wait a little, start again. */
        dlock__seterr(ENOLCK, "%s: the cluster's nodes disagree about where a slot is", k->first->conf.redacted_url);
        return cmd_backoff(k);
    }
    if (not_ready(r) || dlock__demoted(r)) {
        /* A server loading its data (after a restart) or busy with a
         * long script answers nothing useful yet: as good as
         * unreachable, so wait a little and ask again, within the
         * deadline.  One that failed over (READONLY) leads, with its
         * peers in the pool, to a replica now: nothing was written;
         * they go, and the next connection asks for the new master.  A
         * cluster's slot in migration (TRYAGAIN): start again from the
         * node first asked, following its redirections anew. */
        int demoted = dlock__demoted(r);
        dlock__seterr(ENOLCK, "%s: %.100s", n->conf.redacted_url, r->str);
        freeReplyObject(r);
        dlock__pool_put(n, k->cn, demoted);
        return cmd_backoff(k);
    }
    dlock__pool_put(n, k->cn, 0);
    *out = r;
    return 0;
}

/* The connection broke (EOF, reset, timeout, out of step): CMD_AGAIN on
 * another, or ENOLCK.  A pooled connection may simply predate a server
 * restart.  Past the deadline, only an end of file, a reset or bytes that
 * came before the request are worth one more try (a stale pooled
 * connection), not a silent server. */
static int cmd_broken(cmd_run *k) {
    dlock__node *n = k->n;
    int stale = k->cn->ctx->err == REDIS_ERR_EOF || (k->cn->ctx->err == REDIS_ERR_IO && errno == ECONNRESET) ||
                k->cn->step == DLOCK__STEP_OUT;
    /* (closed at its first request, nothing ever answered on it: not a
     * pooled connection that predates a restart) */
    int fresh = k->cn->answered == 0;
    char why[128];
    if (dlock__expects_tls(n, k->cn, k->deadline)) { /* a configuration error: asking again cannot mend it */
        dlock__node_refuse(n);
        dlock__pool_put(n, k->cn, 1);
        return ENOLCK;
    }
    if (dlock__reply_refused(k->cn)) { /* an answer too large or not RESP2: asking again will not mend it */
        k->out->unknown = k->once && k->sent;
        dlock__seterr(EPROTO, "%s: %s", n->conf.redacted_url, k->cn->ctx->errstr);
        dlock__pool_put(n, k->cn, 1);
        return EPROTO;
    }
    /* (a timeout: how long this call has waited in all) */
    dlock__seterr(ENOLCK, "%s: %s", n->conf.redacted_url,
                  dlock__conn_why(k->cn, (unsigned)((dlock__now() - k->began) / DLOCK__MS), why, sizeof why));
    /* No answer for a second, and not a pooled connection that predates
     * a restart: the host's other processes need not wait for it too. */
    if (!stale) dlock__hostrec_refused(n, k->began, dlock__now());
    dlock__pool_put(n, k->cn, 1);
    if (k->sent) k->out->maybe_ran = 1;
    if (k->once && k->sent) {
        /* The request went out and may have run, and asking again could
         * do something else (a reset could cut off a holder that came in
         * between).  The caller learns the outcome is unknown. */
        k->out->unknown = 1;
        return dlock__seterr(ENOLCK, "%s: no answer (the request may have run)", n->conf.redacted_url);
    }
    /* A deployment's member: the deployment asks again, where its map
     * says (a replica may have taken over), not this node in a loop. */
    if (n->one_connect && (k->tries > 0 || !stale)) return ENOLCK;
    if (k->deadline != DLOCK__MONO_NEVER && dlock__now() >= k->deadline && (k->tries > 0 || !stale)) return ENOLCK;
    /* A server (or a proxy before it) that accepts connections and closes
     * them at once turns the next one away too: wait as after a refused
     * connect (dlock__pool_get), not a new connection at once, in a loop. */
    if (fresh && k->tries > 0) return cmd_backoff(k);
    return CMD_AGAIN;
}

/* One command, asked again on another connection, node or after a short
 * wait until it is answered or the deadline passes: send, then the answer
 * (cmd_answered) or the broken connection (cmd_broken) says what next. */
static int command(cmd_run *k, redisReply **out, dlock__sent *sent) {
    dlock__sent none;
    int rc = CMD_AGAIN;

    k->first = k->n;
    k->began = dlock__now();
    k->backoff = (dlock__backoff)DLOCK__BACKOFF_INIT(DLOCK__BACKOFF_MIN_MS, CMD_BACKOFF_MAX_MS);
    k->out = sent != NULL ? sent : &none;
    k->out->unknown = 0;
    k->out->at = 0;
    for (k->tries = 0; rc == CMD_AGAIN; k->tries++) {
        redisReply *r = cmd_send(k, &rc);
        if (r == NULL && rc != 0) return rc; /* no connection */
        rc = r != NULL ? cmd_answered(k, r, out) : cmd_broken(k);
        if (rc != 0) after_free(k->after_out, k->nafter);
    }
    return rc;
}

int dlock__command(dlock__node *n, redisReply **out, dlock__mono deadline, int once, int argc,
                   const char **argv, const size_t *argvlen, dlock__sent *sent) {
    cmd_run k = { .n = n, .deadline = deadline, .once = once, .argc = argc, .argv = argv, .argvlen = argvlen };
    *out = NULL;
    return command(&k, out, sent);
}

int dlock__command_wait(dlock__node *n, redisReply **out, dlock__mono deadline, int argc,
                        const char **argv, const size_t *argvlen, long long *acked, dlock__sent *sent) {
    cmd_run k = { .n = n, .deadline = deadline, .argc = argc, .argv = argv, .argvlen = argvlen,
                  .waitn = n->conf.wait_replicas, .acked = acked };
    *out = NULL;
    *acked = -1;
    return command(&k, out, sent);
}

int dlock__command_pipe(dlock__node *n, redisReply **out, dlock__mono deadline, int argc, const char **argv,
                        const size_t *argvlen, int nafter, const dlock__req *after, redisReply **after_out,
                        dlock__sent *sent) {
    cmd_run k = { .n = n, .deadline = deadline, .argc = argc, .argv = argv, .argvlen = argvlen,
                  .nafter = nafter, .after = after, .after_out = after_out };
    int i;
    *out = NULL;
    for (i = 0; i < nafter; i++) after_out[i] = NULL;
    if (nafter < 0 || nafter > DLOCK__PIPE_MAX) return dlock__seterr(EINVAL, "a pipeline of %d commands", nafter + 1);
    return command(&k, out, sent);
}
