/* internal.h -- what the net layer's files share among themselves
 * (conn.c, pool.c, cmd.c, fanout.c, tls.c) and the layers above do not
 * use: a call's end, a connection's bounds, and the answers that end a request
 * whichever way it was made. */
#ifndef DLOCK_NET_INTERNAL_H
#define DLOCK_NET_INTERNAL_H

#include "net/net.h"

/* A call's end (conn.c, "a call's end"): the calling thread's, set by
 * dlock__call_end_set (DLOCK__MONO_NEVER: none).  dlock__end_min: where a
 * back-off between attempts stops, the sooner of deadline and the call's
 * deadline.  dlock__end_cap: ms, or the time left until the call's end if
 * that is shorter (1 ms at least). */
dlock__mono dlock__call_end(void);
dlock__mono dlock__end_min(dlock__mono deadline);
unsigned dlock__end_cap(unsigned ms);
/* Less than a ms left before the call's end: no connect is begun (conn.c). */
int dlock__end_near(void);
/* Waits until fd has something to read (or is closed, or in error: the
 * read that follows says which), or until end, kept to the microsecond
 * by ppoll (a socket's receive timeout runs on the kernel's timer wheel
 * and ends up to tens of ms late); an end that has passed looks once,
 * DLOCK__MONO_NEVER waits without one: 1, or 0 at the end (conn.c). */
int dlock__fd_wait(int fd, dlock__mono end);
/* Waits as dlock__fd_wait until fd's send buffer has room: a write that
 * waits for a server that stopped reading ends by end (conn.c). */
int dlock__fd_writable(int fd, dlock__mono end);
/* Where the write of cn's request must end: its answer's bound from now,
 * or the call's end if sooner (conn.c). */
dlock__mono dlock__send_end(const dlock__conn *cn);

/* Sentinel: a pooled connection is checked against the sentinels' answer
 * when its last check is older than this (ms; conn.c
 * dlock__conn_current). */
#define DLOCK__SENTINEL_CHECK_MS 100

/* The socket's receive timeout to dt (mono units, > 0), recorded in
 * cn->timeout_ms (conn.c). */
void dlock__rcv_timeout(dlock__conn *cn, dlock__mono dt);
/* How long cn's next answer may take in all (conn.c). */
unsigned dlock__conn_bound(const dlock__conn *cn);
/* Why cn failed, for a message (a timeout of ms said in plain words);
 * buf (n bytes) may hold it (conn.c). */
const char *dlock__conn_why(const dlock__conn *cn, unsigned ms, char *buf, size_t n);
/* The server closed a fresh plain connection at its first request and
 * answers a TLS handshake (probed no longer than deadline allows): 1 with
 * the message set, else 0 (conn.c). */
int dlock__expects_tls(dlock__node *n, const dlock__conn *cn, dlock__mono deadline);
/* r says the server wants a password this client did not give;
 * dlock__password_needed sets the message, ENOLCK (conn.c). */
int dlock__needs_password(const redisReply *r);
int dlock__password_needed(const dlock__node *n);
/* Brackets dlock__command_all's connecting of its nodes (on 1, then 0):
 * within, once one node answered our TLS handshake in plain RESP, the
 * next ones are probed in plain first (conn.c). */
void dlock__all_scope(int on);

/* A reply's bound for a request with that deadline (ms), and cn's timeouts
 * set for it (cmd.c). */
unsigned dlock__reply_bound(const dlock__node *n, dlock__mono deadline);
void dlock__set_timeout(dlock__node *n, dlock__conn *cn, dlock__mono deadline);

#endif /* DLOCK_NET_INTERNAL_H */
