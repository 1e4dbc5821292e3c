/* net.h -- the transport: one Redis connection (conn.c) with TLS
 * (tls.c), requests written in RESP by hand (resp.c), answers read
 * within bounds (reader.c), a pool of them (pool.c), commands with retry
 * within the unreachable bound (cmd.c), one request to many nodes
 * (fanout.c), and the circuit breaker (breaker.c).  Knows servers and
 * bytes; nothing of locks.  What these files share among themselves
 * alone is in net/internal.h. */
#ifndef DLOCK_NET_H
#define DLOCK_NET_H

#include "base/base.h"

/* ---------------------------------------------------------------- nodes */

typedef struct dlock__node dlock__node;
typedef struct dlock__conn dlock__conn;
typedef struct dlock__owed dlock__owed; /* answers a thread owes on a connection (cmd.c) */

/* What an answer may announce (reader.c; docs/design.md, "Answers a
 * client accepts"): elements in one array, elements in all the arrays of
 * one answer, bytes in one bulk string.  Past them the connection fails,
 * a protocol error, before anything is allocated for it. */
#define DLOCK__REPLY_ARRAY_MAX (1u << 20)
#define DLOCK__REPLY_ELEMENTS_MAX (1u << 22)
#define DLOCK__REPLY_BULK_MAX (1u << 24)
/* A connection's reader's count of the answer being read (reader.c). */
typedef struct dlock__reply_guard {
    unsigned long long elements; /* announced so far by the arrays of the answer being read */
    int refused;                 /* it announced more than the bounds, or was not RESP2 */
    char why[128];               /* what it announced, for the message */
} dlock__reply_guard;

/* What the layer above hears from a node's connections and answers: set
 * by the backend (a Redlock master identifies its server on every new
 * connection; a Cluster node's answers may redirect to another node). */
typedef struct dlock__node_hooks {
    /* A new connection, authenticated: 0, or ENOLCK with the message
     * (dlock__node_refuse first to refuse the server for good). */
    int (*on_connect)(dlock__node *n, dlock__conn *cn);
    /* n answered r: 1 when r redirects the request to *next (ASK:
     * *asking set), 0 when it does not. */
    int (*redirect)(dlock__node *n, const redisReply *r, dlock__node **next, int *asking);
} dlock__node_hooks;

/* One server of a deployment as the transport sees it: its configuration,
 * its TLS context, a pool of idle connections and a circuit breaker.  A
 * deployment has one (a single server or Sentinel; for Redlock and
 * Cluster the node the subscriber's connection goes to), and each Redlock
 * master and Cluster node is another (backend.h). */
struct dlock__node {
    dlock__conf conf;
    pthread_mutex_t *mu;  /* guards idle, nidle and the breaker: the owner's mutex */
    struct ssl_ctx_st *tls_ctx; /* rediss://: the OpenSSL context of every connection */
    dlock__conn *idle;    /* the pool of idle connections */
    unsigned nidle;
    dlock__conn *late;    /* connections whose answers are owed (dlock__command_all), under mu */
    unsigned nlate;
    dlock__mono stalled_until; /* dlock__command_all: no new connection tried before (atomic) */
    int one_connect; /* one connection attempt per request, no retry loop */
    int member;      /* a Redlock master or a Cluster node: refusals are noted */
    dlock__mono refused; /* when its server last refused us for good (dlock__node_refuse) */
    /* The circuit breaker (conf.breaker_ms): open from a request that
     * found the server unreachable for the whole unreachable bound until
     * breaker_until (0: closed); meanwhile requests fail at once but one a
     * second (not before breaker_probe), which makes one attempt. */
    dlock__mono breaker_until;
    dlock__mono breaker_probe;
    dlock__mono breaker_since; /* when it opened */
    /* The host-wide outage record's path (hostrec.c; "": none): the
     * breaker of every process of the user on this host, for this URL. */
    char host_rec[240];
    int host_wrote; /* (atomic) this process wrote the record's outage: its answer ends it */
    int host_back;  /* (atomic) the record told of a return no process has told yet */
    const dlock__node_hooks *hooks; /* NULL: none */
    void *up;        /* the object of the layer above that owns the node */
    struct dlock__owed *owed; /* requests sent whose answers are still to read (dlock__command_send) */
};

/* What a command's attempts came to, besides its answer: whether its
 * request went out and got no answer and was not sent again (`once`:
 * ENOLCK, outcome unknown), and when the request whose answer it returned
 * was sent (after retries: the last one; failed: the latest that went
 * out, 0 none did).  maybe_ran: some request of the command went out and
 * got no answer, so it may have run before the one answered (a retried
 * release that finds the hold gone may have been the first one's doing).
 * The command only ever sets maybe_ran: whoever reads it zeroes it first,
 * and it then counts every command made with that dlock__sent (a
 * cluster's redirections and re-routings, a script sent again after
 * NOSCRIPT). */
typedef struct dlock__sent {
    int unknown;
    dlock__mono at;
    int maybe_ran;
} dlock__sent;

/* -------------------------------------------------------- connections */

struct dlock__conn {
    redisContext *ctx;
    unsigned timeout_ms; /* the socket's receive timeout now set */
    unsigned bound_ms;   /* the next request's bound (dlock__set_timeout, cmd.c; 0: none set): its
                          * answer may take the larger of this and timeout_ms in all */
    struct dlock__conn *next; /* pool link */
    struct dlock__tls *tls;   /* rediss://: the TLS session (tls.c); NULL: plain */
    dlock__endpoint ep;       /* the server it leads to */
    dlock__mono checked;      /* Sentinel: when the sentinels last named ep the master */
    unsigned answered;        /* answers read on it (0: the server never answered) */
    /* Whether it is in step with its requests, told without a system
     * call (conn.c, "A connection's step"): */
    dlock__mono used;         /* when its last answer was read (or it was opened) */
    int64_t sent_rt;          /* CLOCK_REALTIME ns of the first send since it left the pool unchecked */
    dlock__mono opened;       /* when it was opened (its stamps are asked for a while after) */
    unsigned char stamps;     /* DLOCK__STAMPS_*: does the kernel tell each read's receive time? */
    unsigned char step;       /* DLOCK__STEP_*: is each read checked against sent_rt? */
    dlock__reply_guard guard; /* its reader's bounds (reader.c) */
    unsigned owed;            /* a late connection: answers not yet read (dlock__command_all) */
    unsigned held;            /* of them, requests not yet sent: in the output buffer (fanout.c) */
    struct dlock__resend *resend, *resend_last; /* one per owed answer, in order (fanout.c) */
    unsigned late_bytes;                        /* bytes sent on it since its server last answered all that was sent */
    dlock__mono late_at;      /* late: when its oldest owed request went out, or its server last answered on it */
    uint64_t scripts;         /* dlock__all_req.script bits its server has (answered, or sent whole on it) */
};
#define DLOCK__STAMPS_OFF 0   /* no (TLS, or the socket refused): the pool checks it by poll(0) */
#define DLOCK__STAMPS_ASKED 1 /* asked for, not yet seen on a read */
#define DLOCK__STAMPS_SEEN 2  /* seen: a pool take may skip the poll(0) */
#define DLOCK__STAMPS_LATER 3 /* not asked for yet: a pool take asks once it has lived dlock__stamps_after_ms */
#define DLOCK__STEP_CHECKED 0 /* nothing to check: new, or polled when taken */
#define DLOCK__STEP_TAKEN 1   /* taken unpolled: the next send records sent_rt */
#define DLOCK__STEP_SENT 2    /* sent: a byte received before sent_rt is not an answer */
#define DLOCK__STEP_OUT 3     /* a read found it out of step: it is done */
/* A pooled connection whose last answer is younger than this (ms) is
 * taken without a poll(0) when its reads are stamped (conn.c). */
extern unsigned dlock__pool_fresh_ms;
/* A plain connection asks for its reads' receive times once it has lived
 * this long (ms), at a pool take (conn.c). */
extern unsigned dlock__stamps_after_ms;
/* At a pool take that found cn idle: asks for its stamps if it is due to. */
void dlock__conn_stamps_due(dlock__conn *cn, dlock__mono now);
/* Sentinel: does cn still lead to the master the sentinels name?  Asked
 * again when the last answer is older than max_age (0: always).  1 yes
 * (or the sentinels cannot tell), 0 no.  Other deployments: always 1. */
int dlock__conn_current(dlock__node *n, dlock__conn *cn, dlock__mono max_age);
/* Sets cn's send and receive timeouts to ms, the bound of each answer. */
void dlock__conn_timeout(dlock__conn *cn, unsigned ms);

/* TLS (tls.c).  The node's context is made from its configuration
 * (nothing without TLS); a connection's session starts on its connected
 * socket.  _write / _read move bytes as dlock__conn_flush / _read do. */
int dlock__tls_ctx_make(dlock__node *n);
void dlock__tls_ctx_free(dlock__node *n);
/* 0, or ENOLCK with the message; *for_good 1 when the server's
 * certificate was refused or the server does not speak TLS (a
 * configuration error: not worth asking again). */
int dlock__tls_start(dlock__node *n, dlock__conn *cn, const char *host, int *for_good);
void dlock__tls_free(dlock__conn *cn);
int dlock__tls_write(dlock__conn *cn, const char *buf, size_t len, dlock__mono end); /* written by end */
/* _read: what came; the rest of a record that came in part is awaited
 * until end (ppoll), and still in part then is no failure (0). */
int dlock__tls_read(dlock__conn *cn, dlock__mono end);
int dlock__tls_pending(const dlock__conn *cn);
/* Probes host:port on a new connection, within timeout_ms: does it answer
 * a TLS ClientHello as a TLS server (_tls_probe), or a PING in plain RESP
 * (_plain_probe)?  1 yes, 0 no or no answer.  For messages only: they are
 * asked when a connection failed in a way that suggests the wrong one. */
int dlock__tls_probe(const char *host, int port, unsigned timeout_ms);
int dlock__plain_probe(const char *host, int port, unsigned timeout_ms);

/* Connects, authenticates and selects the database, within the
 * connection timeout.  ENOLCK with a message on failure; when the server
 * refused us for good (a certificate, credentials, a scheme mismatch, a
 * hook's refusal), n->refused is set to now as well (dlock__node_refuse). */
int dlock__conn_open(dlock__node *n, dlock__conn **out, unsigned connect_timeout_ms);
void dlock__conn_close(dlock__conn *cn);
/* Notes that n's server refused us for good -- a configuration error that
 * asking again cannot mend: n->refused = now.  Returns ENOLCK.
 * _refused_since: did it, at or after t? */
int dlock__node_refuse(dlock__node *n);
int dlock__node_refused_since(const dlock__node *n, dlock__mono t);
/* Closes the socket without sending anything: for a fork child discarding
 * the parent's connections. */
void dlock__conn_abandon(dlock__conn *cn);

/* Command connections from n's pool (n->mu NOT held by the caller). */
int dlock__pool_get(dlock__node *n, dlock__conn **out, dlock__mono deadline);
void dlock__pool_put(dlock__node *n, dlock__conn *cn, int broken);
/* n->mu held: puts a healthy connection back among n's idle ones; 0 if
 * there is no room (the caller closes it). */
int dlock__pool_keep(dlock__node *n, dlock__conn *cn);
/* The transport (conn.c): one request and its answer, NULL when the
 * connection failed (ctx->errstr says why; *sent, if asked, whether the
 * request went out before it did); and sending what was appended
 * to ctx's output buffer.  Both write with MSG_NOSIGNAL: never SIGPIPE. */
redisReply *dlock__conn_cmd(dlock__conn *cn, int argc, const char **argv, const size_t *lens, int *sent);
/* Writes what is queued in the context's output buffer (the first send
 * of a connection taken unchecked records its time, cn->sent_rt), within
 * the bound set for its answer and by the call's end: -1 (the context's
 * error set, half a request written perhaps: close cn) when it cannot. */
int dlock__conn_flush(dlock__conn *cn);
/* Reads what the server sent (the caller polled: something came) into
 * the context's reader: REDIS_OK or REDIS_ERR, as redisBufferRead; also
 * REDIS_ERR (REDIS_ERR_PROTOCOL, cn->step DLOCK__STEP_OUT) for bytes
 * received before the request a connection taken unchecked sent.  Over
 * TLS a record that came in part is not waited for: REDIS_OK, its rest
 * is read when it comes (the socket polls readable again).  _read_by
 * waits for that rest until end (ppoll), no later. */
int dlock__conn_read(dlock__conn *cn);
int dlock__conn_read_by(dlock__conn *cn, dlock__mono end);
/* The next answer, reading as needed: REDIS_OK or REDIS_ERR, as
 * redisGetReply. */
int dlock__conn_reply(dlock__conn *cn, void **reply);
/* Requests in RESP, written by hand (resp.c): no printf family, no
 * allocation once the output buffer has room.  dlock__dec: the decimal
 * digits of v at out (DLOCK__DEC_MAX bytes at most, no NUL), their
 * number.  dlock__resp_size: the bytes of a request of argc arguments
 * (0, or EINVAL: none; ENOMEM: too large).  dlock__resp_encode: writes
 * them at out (that many bytes of room), returns where they end.
 * dlock__resp_append: appends the request to ctx's output buffer, to be
 * sent by dlock__conn_flush (0, or ENOMEM). */
#define DLOCK__DEC_MAX 20
size_t dlock__dec(char *out, unsigned long long v);
int dlock__resp_size(int argc, const size_t *lens, size_t *size);
char *dlock__resp_encode(char *out, int argc, const char *const *argv, const size_t *lens);
int dlock__resp_append(redisContext *ctx, int argc, const char *const *argv, const size_t *lens);
/* wait=N: appends WAIT replicas timeout_ms to the connection's output
 * (0, or ENOMEM); reads its answer, the replicas that acknowledged (-1:
 * not an integer), into *acked (0, or ENOLCK: no answer). */
int dlock__wait_append(dlock__conn *cn, unsigned replicas, unsigned timeout_ms);
int dlock__wait_read(dlock__conn *cn, long long *acked);
/* The reader of cn's context, within the bounds above (reader.c):
 * dlock__reply_feed gives it len bytes, dlock__reply_get takes the next
 * answer (NULL: not whole yet), REDIS_OK or REDIS_ERR (the context's
 * error set) as redisReaderFeed and redisGetReplyFromReader.
 * dlock__reply_refused: 1 once an answer broke the bounds or was not
 * RESP2 (the caller reports EPROTO: asking again would not mend it). */
int dlock__reply_feed(dlock__conn *cn, const char *buf, size_t len);
int dlock__reply_get(dlock__conn *cn, void **reply);
int dlock__reply_refused(const dlock__conn *cn);
/* Bytes received but not yet given to the reader (TLS buffers them). */
int dlock__conn_pending(const dlock__conn *cn);
/* Closes every idle connection. */
void dlock__pool_flush(dlock__node *n);

/* Runs a command on a pooled connection of n, reconnecting on failure
 * until `deadline` (bounded by the unreachable bound) and following the
 * redirections n's hooks name.  ENOLCK when the server could not be
 * reached in time.  once: a request that went out but got no answer is
 * not sent again (ENOLCK, sent->unknown set: its outcome is unknown); for
 * requests that are not idempotent (a reset).  Every other one is sent
 * again, sent->maybe_ran set.  A member of a deployment (a cluster node,
 * a Redlock master: n->one_connect) gives a request whose connection
 * broke back to its deployment, which decides where to ask again (the
 * slot map read anew), after one more try only for a connection that was
 * stale.  sent (NULL: not wanted) says what the attempts came to. */
int dlock__command(dlock__node *n, redisReply **out, dlock__mono deadline, int once,
                   int argc, const char **argv, const size_t *argvlen, dlock__sent *sent);
/* The same, followed on its connection by WAIT for the deployment's
 * wait=N replicas; *acked: how many acknowledged (-1: unknown). */
int dlock__command_wait(dlock__node *n, redisReply **out, dlock__mono deadline, int argc,
                        const char **argv, const size_t *argvlen, long long *acked, dlock__sent *sent);
/* A request whose answer is read later (dlock__command_send): fn hears
 * it, once, on whichever thread reads it -- with the answer (what:
 * DLOCK__OWED_ANSWER; fn does not keep r), with none (DLOCK__OWED_NONE:
 * the connection broke first, r NULL), or, in a fork child, that it is the
 * parent's (DLOCK__OWED_FORGET).  n->mu is not held meanwhile. */
#define DLOCK__OWED_ANSWER 0
#define DLOCK__OWED_NONE 1
#define DLOCK__OWED_FORGET 2
typedef void (*dlock__owed_fn)(void *arg, redisReply *r, int what);
/* Answers one thread may owe on a connection before it reads them. */
#define DLOCK__OWED_MAX 16
/* Sends the request at once (hold: writes it with the thread's next
 * request, or at the settle), on the calling thread's connection with
 * answers owed, if it has one, else on a pooled one; its answer is read
 * ahead of the thread's next request on that connection, which goes out
 * on it (dlock__command: one round trip for both), or by
 * dlock__owed_settle.  0, or ENOLCK (not sent: fn is not called). */
int dlock__command_send(dlock__node *n, int argc, const char **argv, const size_t *lens, int hold, dlock__owed_fn fn,
                        void *arg, dlock__mono deadline);
/* Writes what is held and reads the answers owed on every connection
 * whose oldest unread request went out before `before` (held, before
 * held_before; DLOCK__MONO_NEVER: all), waiting no longer than deadline
 * for them (at least the reply floor). */
void dlock__owed_settle(dlock__node *n, dlock__mono before, dlock__mono held_before, dlock__mono deadline);
/* A fork child: the parent's owed answers are not ours to read; each fn
 * hears DLOCK__OWED_FORGET and the connections are abandoned. */
void dlock__owed_forget(dlock__node *n);

/* A command of a pipeline (dlock__command_pipe). */
typedef struct dlock__req {
    int argc;
    const char **argv;
    const size_t *lens;
} dlock__req;
#define DLOCK__PIPE_MAX 4
/* The command, then nafter more (at most DLOCK__PIPE_MAX) written with it
 * on one connection, in one write: one round trip.  *out the first's
 * answer, after_out[i] the others' (to be freed); all or none, and asked
 * again as dlock__command does (not for a cluster's redirections: for one
 * server and Sentinel's master). */
int dlock__command_pipe(dlock__node *n, redisReply **out, dlock__mono deadline, int argc, const char **argv,
                        const size_t *argvlen, int nafter, const dlock__req *after, redisReply **after_out,
                        dlock__sent *sent);
/* One command to n nodes at once (Redlock): every request is written
 * before any answer is read.  out[i] the answer (to be freed) or NULL
 * with rcs[i] the error.  It returns once `need` nodes answered (or all
 * that were asked, or the bound passed): the others' connections
 * are kept aside, late, their answers read (and dropped) when their node
 * is next asked; a node with an answer still owed is not asked again but
 * with DLOCK__ALL_QUEUE, which writes the request behind every owed one
 * (it runs when the server does; no answer is awaited: ENOLCK) -- or,
 * while what it owes is younger than the reply floor, once it answered
 * (within the bound; fanout.c). */
#define DLOCK__ALL_QUEUE 1
/* With DLOCK__ALL_QUEUE: behind the owed requests of one connection only
 * (a request that must not run twice on one node: a break). */
#define DLOCK__ALL_ONCE 2
/* rcs[i] of a node the request never reached (not asked: it owes earlier
 * answers, or gave no connection); the message is ENOLCK's.  Any other
 * node without an answer may have run it. */
#define DLOCK__ALL_NOT_SENT EAGAIN
/* When given, told each answer (node i's, r) as it comes: 1 when the
 * answers so far decide (then `need` is not looked at). */
typedef struct dlock__all_judge {
    int (*fn)(void *arg, size_t i, const redisReply *r);
    void *arg;
} dlock__all_judge;
/* The request (argc, argv, lens), and the same in a form that needs
 * nothing of the server's state (a script's EVAL beside its EVALSHA; NULL:
 * argv), written on a new connection and behind an owed answer: an answer
 * read late is dropped, so a NOSCRIPT there would be a request lost.
 * self_argv[1] (the script's text) must live as long as the process: a
 * request of DLOCK__ALL_QUEUE whose answer is read late keeps a pointer
 * to it, to send it whole should that answer be NOSCRIPT. */
typedef struct dlock__all_req {
    int argc;
    const char **argv, **self_argv;
    const size_t *lens, *self_lens;
    uint64_t script; /* one bit naming argv's script (0: none): a connection whose server answered it
                      * is sent argv behind an owed answer, any other self_argv */
} dlock__all_req;
void dlock__command_all(dlock__node **ns, size_t n, size_t need, const dlock__all_judge *judge, int flags,
                        const dlock__all_req *req, redisReply **out, int *rcs, dlock__mono deadline);
/* Waits until `end` at most for bytes on any of the n connections (NULL
 * entries skipped) and reads what came on each into its reader, whose
 * answers dlock__reply_get then takes (multi.c).  broken[i] 1 for one
 * whose read failed.  How many had bytes (0: none by `end`). */
size_t dlock__conns_read(dlock__conn **cn, size_t n, dlock__mono end, int *broken);
/* Sends a PING on the new socket fd (before any other request) and reads
 * its answer's line: 1 when any answer came within ms, and by the call's
 * end (multi.c). */
int dlock__fd_answers(int fd, unsigned ms);
/* Closes n's late connections (abandon: without a word and without n->mu,
 * which fork_prepare holds, in a fork child). */
void dlock__late_flush(dlock__node *n, int abandon);
/* Does n owe an answer on a late connection of dlock__command_all (its
 * server has not answered a request yet: paused, cut off, or slow)?  What
 * has come is read first, without waiting. */
int dlock__node_owes(dlock__node *n);
/* "This server is no longer the master" (READONLY after a failover). */
int dlock__demoted(const redisReply *r);
/* The deadline for "the server is unreachable": now + unreachable_ms. */
dlock__mono dlock__unreachable_deadline(const dlock__node *n);
unsigned dlock__reply_floor_ms(const dlock__node *n);
/* The circuit breaker (conf.breaker_ms), around each request of a lock,
 * unlock or info call.  dlock__breaker_pass: 0 if the request may go --
 * *probe 1 when it is the breaker's probe, which makes one attempt (its
 * bound is now) -- or ENOLCK, with the message, while the breaker is open:
 * nothing is sent.  dlock__breaker_note: the request's outcome; an answer
 * (anything but ENOLCK) closes the breaker, ENOLCK from a request whose
 * bound was the unreachable bound `ub` (0: it was not) and that lasted
 * until about then opens it.  n->mu held for both. */
int dlock__breaker_pass(dlock__node *n, int *probe);
void dlock__breaker_note(dlock__node *n, int rc, dlock__mono ub);
/* The same with n->mu NOT held, for callers outside a lock call (the
 * preload, whose keepers make its file locks' requests): _check is
 * _pass; _report(rc, paid) is _note, with paid 1 for a request that
 * waited the whole unreachable bound; _probe_now opens the breaker with
 * a probe due at once (a keeper told that its program's breaker is open). */
int dlock__breaker_check(dlock__node *n, int *probe);
void dlock__breaker_report(dlock__node *n, int rc, int paid);
void dlock__breaker_probe_now(dlock__node *n);
/* Is n's breaker open now?  n->mu NOT held. */
int dlock__breaker_open(dlock__node *n);
/* For an operator (dlock_client_breaker): whether calls to n's server
 * fail fast now, by n's own breaker or by the host-wide record
 * (*host 1), since when and until the next probe (the earlier outage's
 * when both say so).  n->mu NOT held. */
int dlock__breaker_state(dlock__node *n, int *host, dlock__mono *since, dlock__mono *probe);
/* The host-wide outage record (hostrec.c; host_breaker=1, on with the
 * breaker of a deployment's node, never a member's).  _init: its path
 * from the configuration.  _gate (n->mu held), before a request that
 * would connect or while the breaker is open: DLOCK__HOST_NO_SAY when the
 * record says nothing (none, stale, unsafe, corrupt: the node's own
 * breaker decides), else as dlock__breaker_pass -- ENOLCK while another
 * process found the server unreachable, or 0 with *probe 1 for the
 * host's one probe a second.  _down: the server was found unreachable
 * since `since` (a breaker that opened); _up: it answered (after an open
 * breaker or a probe).  _refused: a request's connection attempts have
 * failed, or it has had no answer, since `first` (0: none yet); past 1 s
 * (or the unreachable bound, if shorter) that is an outage for the host. */
#define DLOCK__HOST_NO_SAY (-1)
void dlock__hostrec_init(dlock__node *n);
int dlock__hostrec_gate(dlock__node *n, int *probe);
void dlock__hostrec_down(dlock__node *n, dlock__mono since);
void dlock__hostrec_up(dlock__node *n);
void dlock__hostrec_refused(dlock__node *n, dlock__mono first, dlock__mono now);
/* _peek: 1 if the record of n's server (whatever n's breaker
 * configuration) says the host's processes fail fast now, with *since
 * (found unreachable) and *probe (no probe before); 0 otherwise.  Reads
 * only: no lock, no write. */
int dlock__hostrec_peek(const dlock__node *n, dlock__mono *since, dlock__mono *probe);
/* Notices, one per host per outage: 1 if the caller is to tell that the
 * server is unreachable (DLOCK__HOST_TOLD_DOWN, or _DOWN_CLOSED: the same
 * told in other words, counted apart) or answers again
 * (DLOCK__HOST_TOLD_UP, only after a told outage) -- no other process
 * has for this outage --, 0 if another one has.  1 without a record. */
#define DLOCK__HOST_TOLD_DOWN 1
#define DLOCK__HOST_TOLD_UP 2
#define DLOCK__HOST_TOLD_DOWN_CLOSED 4
#define DLOCK__HOST_TOLD_DOWNS (DLOCK__HOST_TOLD_DOWN | DLOCK__HOST_TOLD_DOWN_CLOSED)
int dlock__breaker_host_tell(dlock__node *n, int what);
/* Did the record, when this process last read it, say the server is
 * back from a told outage whose end nobody has told (another process,
 * say one that gave up waiting, got the answer that ended it)?  1 once,
 * then 0: one atomic load when not. */
int dlock__breaker_host_back(dlock__node *n);
/* Sets the calling thread's call end (DLOCK__MONO_NEVER: none), which no
 * connect attempt or reply wait of the thread outlasts; the old one. */
dlock__mono dlock__call_end_set(dlock__mono end);

#endif /* DLOCK_NET_H */
