/* proxy.h -- a small fault-injecting TCP proxy for the tests.
 *
 * A thread of the test process listens on a free 127.0.0.1 port and
 * forwards every connection to a real server (a redis-server the fixture
 * started), with one thread per connection.  The mode can be switched at
 * any time and applies at once to connections already open as well as to
 * new ones:
 *
 *   PASS     forward both ways, untouched
 *   DELAY    hold each chunk of the server's answer for `ms` milliseconds
 *   DROP     a black hole: accept, read and discard, never answer
 *   CUT      forward half of the server's next chunk, then close both sides
 *   REPLACE  forward requests, but send `payload` instead of each chunk of
 *            the server's answer (valid RESP of the wrong type, -ERR, ...)
 *   RANDOM   as REPLACE, with 1..64 random bytes instead
 *   CLOSE    close connections at once (new ones right after accept)
 *   DUPLICATE forward each chunk of the server's answer, then the same
 *            chunk again `ms` milliseconds later (a server out of step)
 *   TURNAWAY close a connection when a request comes on it, as while the
 *            server behind is down; but a TLS ClientHello (a record of
 *            type 22) is kept unanswered, as a plain Redis, back again,
 *            keeps one whose bytes hold no newline (an inline command not
 *            ended yet)
 *   SPLIT    forward the first byte of each chunk of the server's answer
 *            at once, the rest `ms` milliseconds later (a TLS record that
 *            comes in part)
 *   STALL    forward requests; of the server's answers on each connection
 *            forward `bytes` more (counted from when the mode was set, or
 *            from the connection's start), each chunk `ms` milliseconds
 *            after it came, then nothing: a server that is slow, then
 *            stalls mid-handshake or mid-record (dlt_proxy_stall)
 *   DEAF     forward the server's answers, but read no more of the
 *            requests, or `bytes` of them each `ms` milliseconds: the
 *            client's writes fill the sockets' buffers, then wait, as on
 *            a server that stopped reading, or reads a little now and
 *            then (dlt_proxy_deaf)
 *
 * The proxy never raises SIGPIPE in the test process (MSG_NOSIGNAL) and
 * every thread it starts is joined by dlt_proxy_stop, so it leaks nothing
 * under LeakSanitizer.
 */
#ifndef DLT_PROXY_H
#define DLT_PROXY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dlt_proxy_mode {
    DLT_PROXY_PASS,
    DLT_PROXY_DELAY,
    DLT_PROXY_DROP,
    DLT_PROXY_CUT,
    DLT_PROXY_REPLACE,
    DLT_PROXY_RANDOM,
    DLT_PROXY_CLOSE,
    DLT_PROXY_DUPLICATE,
    DLT_PROXY_TURNAWAY,
    DLT_PROXY_SPLIT,
    DLT_PROXY_STALL,
    DLT_PROXY_DEAF
};

typedef struct dlt_proxy dlt_proxy;

/* Starts a proxy to 127.0.0.1:target_port in PASS mode.  NULL (with a
 * message on stderr) on failure. */
dlt_proxy *dlt_proxy_start(int target_port);
/* Closes every connection, joins every thread, frees the proxy. */
void dlt_proxy_stop(dlt_proxy *p);

int dlt_proxy_port(const dlt_proxy *p);
/* "redis://127.0.0.1:PORT" (no query, no credentials). */
const char *dlt_proxy_url(const dlt_proxy *p);

/* Switches the mode.  ms is DELAY's delay (DUPLICATE's and SPLIT's gap); payload/len REPLACE's answer
 * (copied; at most 1024 bytes).  Other modes ignore them. */
void dlt_proxy_set(dlt_proxy *p, enum dlt_proxy_mode mode, unsigned ms, const void *payload, size_t len);
/* Shorthands. */
void dlt_proxy_pass(dlt_proxy *p);
void dlt_proxy_replace(dlt_proxy *p, const char *payload); /* NUL-terminated payload */
/* STALL: each connection forwards `bytes` more of the server's answers,
 * ms after they came, then holds the rest back (dropped, counted as
 * faults). */
void dlt_proxy_stall(dlt_proxy *p, size_t bytes, unsigned ms);
/* DEAF: each connection reads `bytes` of the requests each ms (0: none). */
void dlt_proxy_deaf(dlt_proxy *p, size_t bytes, unsigned ms);
/* The receive buffer of the connections accepted from now on (SO_RCVBUF,
 * which the kernel doubles; its least is some 2 KiB): with DEAF, a small
 * one fills with a few KiB of requests.  0, or -1 (errno). */
int dlt_proxy_rcvbuf(dlt_proxy *p, int bytes);
/* The send buffer of every socket of this process connected to the proxy
 * (the library's client ends) to the kernel's least (some 4 KiB, no
 * longer grown by the kernel): with DEAF and a small dlt_proxy_rcvbuf, a
 * request of a few KiB fills them.  How many there were; the first max
 * local ports into ports. */
int dlt_proxy_shrink_clients(const dlt_proxy *p, int *ports, int max);
/* 1 while this process has a socket connected to the proxy from the
 * local port, else 0. */
int dlt_proxy_client_open(const dlt_proxy *p, int port);

/* Closes every connection open now (the mode stays): the client must
 * reconnect, through the current mode. */
void dlt_proxy_close_all(dlt_proxy *p);

/* Counters since start: connections accepted, chunks of the server's
 * answers that were altered (delayed, dropped, cut or replaced). */
unsigned long dlt_proxy_accepted(const dlt_proxy *p);
unsigned long dlt_proxy_faults(const dlt_proxy *p);

const char *dlt_proxy_mode_name(enum dlt_proxy_mode mode);

#ifdef __cplusplus
}
#endif
#endif /* DLT_PROXY_H */
