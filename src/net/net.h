/* net.h -- the transport: one Redis connection (conn.c) with TLS
 * (tls.c), a pool of them, commands with retry within the unreachable
 * bound, and the circuit breaker.  Knows servers and bytes; nothing of
 * locks. */
#ifndef DLOCK_NET_H
#define DLOCK_NET_H

#include "base/base.h"

/* -------------------------------------------------------- connections */

typedef struct dlock__conn {
    redisContext *ctx;
    unsigned timeout_ms; /* the socket timeout now set */
    struct dlock__conn *next; /* pool link */
    struct dlock__tls *tls;   /* rediss://: the TLS session (tls.c); NULL: plain */
    dlock__endpoint ep;       /* the server it leads to */
    dlock__mono checked;      /* Sentinel: when the sentinels last named ep the master */
    unsigned answered;        /* answers read on it (0: the server never answered) */
} dlock__conn;
/* Sentinel: does cn still lead to the master the sentinels name?  Asked
 * again when the last answer is older than max_age (0: always).  1 yes
 * (or the sentinels cannot tell), 0 no.  Other deployments: always 1. */
int dlock__conn_current(struct dlock_client *c, dlock__conn *cn, dlock__mono max_age);

/* TLS (tls.c).  The client's context is made from its configuration
 * (nothing without TLS); a connection's session starts on its connected
 * socket.  _write / _read move bytes as dlock__conn_flush / _read do. */
int dlock__tls_ctx_make(struct dlock_client *c);
void dlock__tls_ctx_free(struct dlock_client *c);
/* 0, ENOLCK, or EACCES when the server's certificate is refused (not
 * worth asking again; the message says ENOLCK, which callers return). */
int dlock__tls_start(struct dlock_client *c, dlock__conn *cn, const char *host);
void dlock__tls_free(dlock__conn *cn);
int dlock__tls_write(dlock__conn *cn, const char *buf, size_t len);
int dlock__tls_read(dlock__conn *cn);
int dlock__tls_pending(const dlock__conn *cn);
/* Probes host:port on a new connection, within timeout_ms: does it answer
 * a TLS ClientHello as a TLS server (_tls_probe), or a PING in plain RESP
 * (_plain_probe)?  1 yes, 0 no or no answer.  For messages only: they are
 * asked when a connection failed in a way that suggests the wrong one. */
int dlock__tls_probe(const char *host, int port, unsigned timeout_ms);
int dlock__plain_probe(const char *host, int port, unsigned timeout_ms);

struct dlock_client;
/* Connects, authenticates and selects the database, within the
 * connection timeout.  ENOLCK with a message on failure. */
int dlock__conn_open(struct dlock_client *c, dlock__conn **out, unsigned connect_timeout_ms);
void dlock__conn_close(dlock__conn *cn);
/* Closes the socket without sending anything: for a fork child discarding
 * the parent's connections. */
void dlock__conn_abandon(dlock__conn *cn);

/* Command connections from the pool (c->mu NOT held by the caller). */
int dlock__pool_get(struct dlock_client *c, dlock__conn **out, dlock__mono deadline);
void dlock__pool_put(struct dlock_client *c, dlock__conn *cn, int broken);
/* c->mu held: puts a healthy connection back among c's idle ones; 0 if
 * there is no room (the caller closes it). */
int dlock__pool_keep(struct dlock_client *c, dlock__conn *cn);
/* Is r an error that means "not now" (LOADING, BUSY...)? */
int dlock__not_ready(const redisReply *r);
/* The transport (conn.c): one request and its answer, NULL when the
 * connection failed (ctx->errstr says why; *sent, if asked, whether the
 * request went out before it did); and sending what was appended
 * to ctx's output buffer.  Both write with MSG_NOSIGNAL: never SIGPIPE. */
redisReply *dlock__conn_cmd(dlock__conn *cn, int argc, const char **argv, const size_t *lens, int *sent);
/* Writes what is queued in the context's output buffer. */
int dlock__conn_flush(dlock__conn *cn);
/* Reads what the server sent (waiting up to the socket timeout) into the
 * context's reader: REDIS_OK or REDIS_ERR, as redisBufferRead. */
int dlock__conn_read(dlock__conn *cn);
/* The next answer, reading as needed: REDIS_OK or REDIS_ERR, as
 * redisGetReply. */
int dlock__conn_reply(dlock__conn *cn, void **reply);
/* wait=N: appends WAIT replicas timeout_ms to the connection's output
 * (0, or -1 out of memory); reads its answer, the replicas that
 * acknowledged (-1: not an integer), into *acked (0, or -1 no answer). */
int dlock__wait_append(dlock__conn *cn, unsigned replicas, unsigned timeout_ms);
int dlock__wait_read(dlock__conn *cn, long long *acked);
/* Bytes received but not yet given to the reader (TLS buffers them). */
int dlock__conn_pending(const dlock__conn *cn);
/* Closes every idle connection. */
void dlock__pool_flush(struct dlock_client *c);

/* Runs a command on a pooled connection, reconnecting on failure until
 * `deadline` (bounded by the unreachable bound).  ENOLCK when the server
 * could not be reached in time.  once: a request that went out but got no
 * answer is not sent again (ENOLCK: its outcome is unknown). */
/* The same, followed on its connection by WAIT for the deployment's
 * wait=N replicas; *acked: how many acknowledged (-1: unknown). */
int dlock__command_wait(struct dlock_client *c, redisReply **out, dlock__mono deadline, int argc,
                        const char **argv, const size_t *argvlen, long long *acked);
int dlock__demoted(const redisReply *r);
int dlock__command(struct dlock_client *c, redisReply **out, dlock__mono deadline, int once,
                   int argc, const char **argv, const size_t *argvlen);
/* Did the calling thread's last dlock__command fail after its request
 * went out (ENOLCK, outcome unknown)? */
int dlock__outcome_unknown(void);
/* When the calling thread's last dlock__command sent the request whose
 * answer it returned (after retries: the last one). */
dlock__mono dlock__command_sent(void);
/* The deadline for "the server is unreachable": now + unreachable_ms. */
dlock__mono dlock__unreachable_deadline(const struct dlock_client *c);
unsigned dlock__reply_floor_ms(const struct dlock_client *c);
/* The circuit breaker (conf.breaker_ms), around each request of a lock,
 * unlock or info call.  dlock__breaker_pass: 0 if the request may go --
 * *probe 1 when it is the breaker's probe, which makes one attempt (its
 * bound is now) -- or ENOLCK, with the message, while the breaker is open:
 * nothing is sent.  dlock__breaker_note: the request's outcome; an answer
 * (anything but ENOLCK) closes the breaker, ENOLCK from a request whose
 * bound was the unreachable bound `ub` (0: it was not) and that lasted
 * until about then opens it.  c->mu held for both. */
int dlock__breaker_pass(struct dlock_client *c, int *probe);
void dlock__breaker_note(struct dlock_client *c, int rc, dlock__mono ub);
/* The same with c->mu NOT held, for callers outside a lock call (the
 * preload, whose keepers make its file locks' requests): _check is
 * _pass; _report(rc, paid) is _note, with paid 1 for a request that
 * waited the whole unreachable bound; _probe_now opens the breaker with
 * a probe due at once (a keeper told that its program's breaker is open). */
int dlock__breaker_check(struct dlock_client *c, int *probe);
void dlock__breaker_report(struct dlock_client *c, int rc, int paid);
void dlock__breaker_probe_now(struct dlock_client *c);
/* Is c's breaker open now?  c->mu NOT held. */
int dlock__breaker_open(struct dlock_client *c);
/* Sets the calling thread's call end (DLOCK__MONO_NEVER: none), which no
 * connect attempt or reply wait of the thread outlasts; the old one. */
dlock__mono dlock__call_end_set(dlock__mono end);

#endif /* DLOCK_NET_H */
