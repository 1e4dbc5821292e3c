/* conn.c -- one connection to a node's server: connect (the Sentinel
 * lookup, TLS, AUTH, SELECT, ROLE, the node's on_connect hook), write a
 * request and read its answer, close.  It knows servers and bytes,
 * nothing of locks: what a node's answers mean to its deployment (a
 * Redlock master's identity, a Cluster's redirections) comes back through
 * the node's hooks.  The pool (pool.c), the commands with their retries
 * (cmd.c), one request to many nodes (fanout.c) and the circuit breaker
 * (breaker.c) are built on it.
 *
 * Messages name the server by its redacted URL: never a password.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "net/internal.h"

static struct timeval ms_tv(unsigned ms) {
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    return tv;
}

/* ------------------------------------------------------- a call's end
 *
 * A timed lock call (lock.c) returns by its deadline plus DLOCK__LATE_MS
 * whatever the server does: it sets that end here, for its thread, and
 * every connect attempt and every reply wait the thread makes meanwhile
 * ends by then at the latest -- the reply floor included, and whatever
 * deadline the layers in between pass down.  DLOCK__MONO_NEVER: none. */
static __thread dlock__mono call_end = DLOCK__MONO_NEVER;

dlock__mono dlock__call_end_set(dlock__mono end) {
    dlock__mono old = call_end;
    call_end = end;
    return old;
}

dlock__mono dlock__call_end(void) {
    return call_end;
}

/* Where a back-off between attempts stops: the sooner of deadline and
 * the call's deadline (its end less the DLOCK__LATE_MS that a reply wait
 * may take past it).  A semaphore's op, bounded by the unreachable bound,
 * must not sleep past its timed call; and an attempt begun after the
 * call's deadline is one no caller waits for. */
dlock__mono dlock__end_min(dlock__mono deadline) {
    dlock__mono end = call_end == DLOCK__MONO_NEVER ? DLOCK__MONO_NEVER
                                                    : call_end - (dlock__mono)DLOCK__LATE_MS * DLOCK__MS;
    return end < deadline ? end : deadline;
}

/* ms, or the time left until the call's end if that is shorter (1 ms at
 * least: 0 means "no timeout" to the socket). */
unsigned dlock__end_cap(unsigned ms) {
    if (call_end != DLOCK__MONO_NEVER) {
        int64_t left = (call_end - dlock__now()) / DLOCK__MS;
        if (left < 1) left = 1;
        if (left < (int64_t)ms) ms = (unsigned)left;
    }
    return ms;
}

/* Less than a ms is left before the call's end.  hiredis awaits a
 * connect in whole ms (its poll's timeout, rounded up; and 0 would mean
 * "no timeout" to a socket), so a connect begun now would take a whole
 * ms: past the end.  None is begun then.  This never refuses a call its
 * first attempt: a timed call's end is its deadline (or its start, if
 * later) + DLOCK__LATE_MS, so it begins with that much left (a timedlock
 * whose deadline has passed still acquires a free lock); a later
 * attempt, or one after the call spent its time elsewhere, meets it. */
int dlock__end_near(void) {
    return call_end != DLOCK__MONO_NEVER && call_end - dlock__now() < DLOCK__MS;
}

/* ----------------------------------------------------------- transport
 *
 * dlock encodes requests itself (resp.c: RESP written straight into the
 * context's output buffer, no printf family) and hiredis parses answers;
 * dlock writes the bytes itself, with send(MSG_NOSIGNAL): hiredis's
 * write() would raise SIGPIPE
 * on a socket the server closed, whose default action kills the host
 * program.  (This is also the seam where TLS goes: hiredis 0.14 has
 * none.)  Reading is dlock's too where the kernel stamps what a socket
 * receives (a recvmsg that returns the receive time: "A connection's
 * step" below), hiredis's read() elsewhere; neither raises a signal. */

/* A request's bytes are written by its end (dlock__send_end), no later:
 * the socket does not block (MSG_DONTWAIT), and when its buffer is full (a
 * server that stopped reading: paused, or a proxy before it stalled) the
 * write waits for room by ppoll until that end.  Its send timeout would
 * not do: it bounds one send() only, a server that reads a little now and
 * then starts it again, and the kernel keeps it on its timer wheel, up to
 * tens of ms late.  A write that cannot end by then fails with the
 * context's error set: the connection holds half a request, so it is
 * closed (dlock__pool_put never keeps a failed context). */
static int send_all(dlock__conn *cn, const char *buf, size_t len) {
    redisContext *ctx = cn->ctx;
    dlock__mono end = 0; /* (reckoned at the first wait: a write that needs none reads no clock) */
    while (len > 0) {
        ssize_t n = send(ctx->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            int e = errno, full = e == EAGAIN || e == EWOULDBLOCK;
            if (e == EINTR) continue;
            if (full && end == 0) end = dlock__send_end(cn);
            if (full && dlock__fd_writable(ctx->fd, end)) continue;
            snprintf(ctx->errstr, sizeof ctx->errstr, "send: %s", full ? "timed out" : strerror(e));
            ctx->err = REDIS_ERR_IO;
            errno = e;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---------------------------------------------------- a connection's step
 *
 * A pooled connection must be in step with its requests: bytes that came
 * while it sat idle (the server closed it, or sent something no request
 * asked for: an answer late, or twice, from a proxy) would be taken for
 * the next request's answer -- they sit in the kernel, so that request's
 * first read returns them alone, a whole answer, with its own a round
 * trip behind (tests/test_proxy.c: test_duplicate_does_not_desync and
 * test_duplicate_told_by_time see two owners, or an error, without a
 * check).  The check used to be a poll(0) at every pool take: a system
 * call per request, 1.2 us on a host with page-table isolation, 4-5% of
 * an uncontended pair (issue 21).
 *
 * Now the kernel stamps each read with the receive time of its bytes
 * (SO_TIMESTAMPNS, plain TCP): a connection taken unpolled records the
 * time of its first send, and a read of bytes received before it is
 * refused -- the connection is out of step: it is closed (with the idle
 * ones) and the request asked again on a fresh one, as for any broken
 * connection.  The poll(0) stays where the stamp cannot tell: for a
 * connection idle for dlock__pool_fresh_ms or longer -- an end of file
 * carries no stamp, and a server that closed the connection while it sat
 * idle (its `timeout`, a restart, CLIENT KILL) would fail the request
 * only once it went out, which a request asked once (a reset) would
 * end as "outcome unknown"; one millisecond of idleness makes the
 * poll's cost a thousandth of it at most -- for TLS (OpenSSL reads the
 * socket itself), and where the kernel gave no stamp.  The stamps are
 * CLOCK_REALTIME: a step of the clock backwards between a send and its
 * answer makes a good answer look stale, which costs a retry (a reset:
 * "outcome unknown"), never a wrong answer taken.
 *
 * A connection asks for the stamps only once it has lived a second (at
 * the first pool take after that, which has just found it idle: bytes
 * after it are stamped, or the take polls until one is).  The first
 * socket of a host to ask turns on the kernel's timestamping (a static
 * key: a kernel worker patches the kernel's text, 0.1 ms of CPU on the
 * asking CPU, preempting its caller) and its close turns it off again:
 * a process that lives a few milliseconds -- a `dlock exec`, a program
 * under the preload that takes one lock -- would pay that twice for
 * nothing, as its first requests are polled anyway. */
unsigned dlock__pool_fresh_ms = 1;
unsigned dlock__stamps_after_ms = 1000;

static int64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return dlock__ts_ns(&ts);
}

void dlock__conn_stamps_due(dlock__conn *cn, dlock__mono now) {
    int on = 1;
    if (cn->stamps != DLOCK__STAMPS_LATER || now - cn->opened < (dlock__mono)dlock__stamps_after_ms * DLOCK__MS) return;
    cn->stamps = setsockopt(cn->ctx->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) == 0 ? DLOCK__STAMPS_ASKED
                                                                                          : DLOCK__STAMPS_OFF;
}

/* The receive time of the bytes a recvmsg returned (of the last of them,
 * when the kernel merged several arrivals), CLOCK_REALTIME ns; -1: none. */
static int64_t stamp_of(struct msghdr *m) {
    struct cmsghdr *h;
    for (h = CMSG_FIRSTHDR(m); h != NULL; h = CMSG_NXTHDR(m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(h), sizeof ts);
            return dlock__ts_ns(&ts);
        }
    return -1;
}

/* redisBufferRead's read, with the bytes' receive time: a read checked
 * against the request's send (DLOCK__STEP_SENT) refuses bytes that came
 * before it, and bytes it cannot date. */
static int stamped_read(dlock__conn *cn) {
    redisContext *ctx = cn->ctx;
    char buf[1024 * 16];
    union {
        char b[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = { buf, sizeof buf };
    struct msghdr m;
    ssize_t got;
    int64_t at;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.b;
    m.msg_controllen = sizeof ctl.b;
    got = recvmsg(ctx->fd, &m, 0);
    if (got < 0) {
        int e = errno; /* kept: cmd_broken reads it */
        if (e == EINTR) return REDIS_OK; /* as hiredis: read again */
        snprintf(ctx->errstr, sizeof ctx->errstr, "%s", strerror(e));
        ctx->err = REDIS_ERR_IO;
        errno = e;
        return REDIS_ERR;
    }
    if (got == 0) {
        snprintf(ctx->errstr, sizeof ctx->errstr, "Server closed the connection");
        ctx->err = REDIS_ERR_EOF;
        return REDIS_ERR;
    }
    at = stamp_of(&m);
    if (at >= 0) cn->stamps = DLOCK__STAMPS_SEEN;
    else cn->stamps = DLOCK__STAMPS_ASKED; /* polled when taken, until a read is stamped again */
    if (cn->step == DLOCK__STEP_SENT && at < cn->sent_rt) {
        snprintf(ctx->errstr, sizeof ctx->errstr, "%s",
                 at < 0 ? "an answer came that the kernel did not date (the connection was not checked)"
                        : "an answer came before the request was sent (the connection was out of step)");
        ctx->err = REDIS_ERR_PROTOCOL;
        cn->step = DLOCK__STEP_OUT;
        return REDIS_ERR;
    }
    return dlock__reply_feed(cn, buf, (size_t)got);
}

/* A request is written within the bound its answer is awaited (the
 * connection's, set for the request: dlock__set_timeout), and by the
 * call's end at the latest. */
dlock__mono dlock__send_end(const dlock__conn *cn) {
    dlock__mono end = dlock__now() + (dlock__mono)dlock__conn_bound(cn) * DLOCK__MS;
    return call_end < end ? call_end : end;
}

int dlock__conn_flush(dlock__conn *cn) {
    redisContext *ctx = cn->ctx;
    int rc;
    if (ctx->err) return -1;
    if (cn->step == DLOCK__STEP_TAKEN) {
        cn->sent_rt = real_ns();
        cn->step = DLOCK__STEP_SENT;
    }
    rc = cn->tls ? dlock__tls_write(cn, ctx->obuf, sdslen(ctx->obuf), dlock__send_end(cn))
                 : send_all(cn, ctx->obuf, sdslen(ctx->obuf));
    sdsclear(ctx->obuf);
    return rc;
}

int dlock__conn_read(dlock__conn *cn) {
    return dlock__conn_read_by(cn, 0);
}

int dlock__conn_read_by(dlock__conn *cn, dlock__mono end) {
    if (cn->ctx->err) return REDIS_ERR;
    if (cn->tls != NULL) return dlock__tls_read(cn, end) == 0 ? REDIS_OK : REDIS_ERR;
    if (cn->stamps == DLOCK__STAMPS_ASKED || cn->stamps == DLOCK__STAMPS_SEEN) return stamped_read(cn);
    return redisBufferRead(cn->ctx);
}

int dlock__conn_pending(const dlock__conn *cn) {
    return dlock__tls_pending(cn);
}

void dlock__conn_timeout(dlock__conn *cn, unsigned ms) {
    redisSetTimeout(cn->ctx, ms_tv(ms));
    cn->timeout_ms = ms;
    cn->bound_ms = 0;
}

/* The socket's receive timeout to dt (mono units, > 0), recorded in
 * cn->timeout_ms (rounded up to a whole ms: never below what is set). */
void dlock__rcv_timeout(dlock__conn *cn, dlock__mono dt) {
    struct timeval tv;
    tv.tv_sec = (time_t)(dt / (1000 * DLOCK__MS));
    tv.tv_usec = (suseconds_t)((dt % (1000 * DLOCK__MS)) / (DLOCK__MS / 1000));
    if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;
    if (setsockopt(cn->ctx->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0)
        cn->timeout_ms = (unsigned)((dt + DLOCK__MS - 1) / DLOCK__MS);
}

/* A read that failed because the socket's receive timeout passed. */
static int read_timed_out(const redisContext *ctx) {
    return ctx->err == REDIS_ERR_IO &&
           (strcmp(ctx->errstr, strerror(EAGAIN)) == 0 || strcmp(ctx->errstr, "recv: timed out") == 0);
}

/* An answer is awaited until end (bound ms from its first read, or the
 * call's end if sooner: dlock__conn_reply) in all: the socket's
 * receive timeout bounds one read only, and may be shorter than the bound
 * (dlock__set_timeout keeps it where it is when it is), so a read that times out
 * with time left is made again; and a server that sends a huge answer, or
 * trickles it, does not keep the caller past the bound either: each read
 * after the first waits only for what is left of it.  -1 (the context's
 * error set) when nothing is left. */
static int reply_read_more(dlock__conn *cn, dlock__mono end, unsigned bound) {
    redisContext *ctx = cn->ctx;
    dlock__mono left = end - dlock__now();
    if (left <= 0) {
        if (!ctx->err) {
            snprintf(ctx->errstr, sizeof ctx->errstr, "the server did not finish its answer within %u ms", bound);
            ctx->err = REDIS_ERR_IO;
        }
        return -1;
    }
    if (ctx->err) { /* a read that timed out before the bound: read on */
        ctx->err = 0;
        ctx->errstr[0] = '\0';
    }
    if (left < (dlock__mono)cn->timeout_ms * DLOCK__MS) dlock__rcv_timeout(cn, left);
    return 0;
}

/* How long cn's next answer may take in all. */
unsigned dlock__conn_bound(const dlock__conn *cn) {
    return cn->bound_ms > cn->timeout_ms ? cn->bound_ms : cn->timeout_ms;
}

/* Waits until fd has one of events (or is closed, or in error), or until
 * end: 1, or 0 at the end. */
static int fd_poll(int fd, short events, dlock__mono end) {
    struct pollfd pfd;
    struct timespec ts;
    int n;
    pfd.fd = fd;
    pfd.events = events;
    do {
        dlock__mono left = end - dlock__now();
        if (end != DLOCK__MONO_NEVER) dlock__mono_to_ts(left > 0 ? left : 0, &ts);
        pfd.revents = 0;
        n = ppoll(&pfd, 1, end == DLOCK__MONO_NEVER ? NULL : &ts, NULL);
    } while (n < 0 && errno == EINTR);
    return n != 0;
}

int dlock__fd_wait(int fd, dlock__mono end) {
    return fd_poll(fd, POLLIN, end); /* readable, closed, or an error: the read says which */
}

int dlock__fd_writable(int fd, dlock__mono end) {
    return fd_poll(fd, POLLOUT, end); /* room, or an error: the send says which */
}

/* Waits until cn has something to read, or end: 0, or -1 (the
 * context's error set as a read that timed out), by dlock__fd_wait: a
 * wait cut by the socket's receive timeout, counted in the kernel's ticks,
 * would end up to ~10 ms late, past a timed call's end (call_end). */
static int reply_wait(dlock__conn *cn, dlock__mono end) {
    if (dlock__conn_pending(cn)) return 0; /* TLS: bytes already read from the socket */
    if (dlock__fd_wait(cn->ctx->fd, end)) return 0;
    snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "%s", strerror(EAGAIN));
    cn->ctx->err = REDIS_ERR_IO;
    return -1;
}

/* The answer is awaited bound ms from its first read, and never past the
 * call's end: the bound was cut to the time left when it was set, but the
 * request's write may have taken some of it since; and a bound cut to the
 * whole ms the socket takes (AUTH, SELECT: dlock__conn_cmd) is longer
 * than the less than a ms that may be left. */
int dlock__conn_reply(dlock__conn *cn, void **reply) {
    dlock__mono end = 0;
    unsigned bound = dlock__conn_bound(cn);
    int rc = REDIS_OK, reads = 0;
    *reply = NULL;
    if (dlock__reply_get(cn, reply) != REDIS_OK) return REDIS_ERR;
    while (*reply == NULL) {
        if (reads++ == 0) {
            end = dlock__now() + (dlock__mono)bound * DLOCK__MS;
            if (call_end < end) end = call_end;
        } else if (reply_read_more(cn, end, bound) != 0) {
            rc = REDIS_ERR;
            break;
        }
        if (reply_wait(cn, end) != 0 || dlock__conn_read_by(cn, end) != REDIS_OK) {
            if (read_timed_out(cn->ctx) && bound > cn->timeout_ms) continue; /* the bound decides */
            rc = REDIS_ERR;
            break;
        }
        if (dlock__reply_get(cn, reply) != REDIS_OK) {
            rc = REDIS_ERR;
            break;
        }
    }
    if (rc == REDIS_OK) {
        cn->answered++;
        cn->used = dlock__now();
    }
    return rc;
}

redisReply *dlock__conn_cmd(dlock__conn *cn, int argc, const char **argv, const size_t *lens, int *sent) {
    void *reply = NULL;
    int out = dlock__resp_append(cn->ctx, argc, argv, lens) == 0 && dlock__conn_flush(cn) == 0;
    if (sent != NULL) *sent = out;
    /* A connection's setup asks several in turn (AUTH, SELECT, a Redlock
     * master's INFO), each under the timeout set for all: none waits
     * past the call's end. */
    if (out && call_end != DLOCK__MONO_NEVER && dlock__end_cap(cn->timeout_ms) < cn->timeout_ms)
        dlock__rcv_timeout(cn, (dlock__mono)dlock__end_cap(cn->timeout_ms) * DLOCK__MS);
    if (!out || dlock__conn_reply(cn, &reply) != REDIS_OK) return NULL;
    return reply;
}

/* Why a connection failed, for a message: a read that timed out says so
 * in plain words (hiredis says "Resource temporarily unavailable"). */
const char *dlock__conn_why(const dlock__conn *cn, unsigned ms, char *buf, size_t n) {
    const redisContext *ctx = cn->ctx;
    if (ctx->errstr[0] == '\0') return "connection lost";
    if (read_timed_out(ctx)) {
        snprintf(buf, n, "the server did not answer within %u ms", ms);
        return buf;
    }
    return ctx->errstr;
}

/* The scheme a scheme mismatch's message asks for: the URL's own backend
 * over TLS (tls 1) or plain.  A Redlock master's or a Cluster node's
 * shown URL starts with its parent's, which names the backend. */
static const char *scheme_for(const dlock__conf *cf, int tls) {
    const char *u = cf->redacted_url;
    if (strncmp(u, "redlock://", 10) == 0 || strncmp(u, "rediss+redlock://", 17) == 0)
        return tls ? "rediss+redlock://" : "redlock://";
    if (strncmp(u, "redis+cluster://", 16) == 0 || strncmp(u, "rediss+cluster://", 17) == 0)
        return tls ? "rediss+cluster://" : "redis+cluster://";
    if (strncmp(u, "redis+sentinel://", 17) == 0 || strncmp(u, "rediss+sentinel://", 18) == 0)
        return tls ? "rediss+sentinel://" : "redis+sentinel://";
    return tls ? "rediss://" : "redis://";
}

/* A TLS handshake refused by a plain server: tls.c's message says "use
 * redis://"; name the plain scheme of this URL's backend instead. */
static void plain_hint(const dlock__conf *cf) {
    const char *m = dlock_last_error(), *h = strstr(m, "use redis://"), *s = scheme_for(cf, 0);
    char buf[512];
    if (h == NULL || strcmp(s, "redis://") == 0) return;
    snprintf(buf, sizeof buf, "%.*suse %s%s", (int)(h - m), m, s, h + 12);
    dlock__restoreerr(buf);
}

/* The server refused us for good (a scheme mismatch, a certificate,
 * credentials, a hook's refusal): noted on the node, where the pool stops
 * asking again and a Redlock's or Cluster's deployment stops asking when
 * every member it asked did so (redlock.c, cluster.c). */
int dlock__node_refuse(dlock__node *n) {
    __atomic_store_n(&n->refused, dlock__now(), __ATOMIC_RELEASE);
    return ENOLCK;
}

int dlock__node_refused_since(const dlock__node *n, dlock__mono t) {
    dlock__mono r = __atomic_load_n(&n->refused, __ATOMIC_ACQUIRE);
    return r != 0 && r >= t;
}

/* Set while dlock__command_all connects the masters of one request, once
 * one of them answered our TLS handshake in plain RESP: the next ones are
 * probed in plain first (one deployment, one scheme), so that the request
 * does not wait for a handshake answer from each in turn. */
static __thread int in_all, plain_seen;

void dlock__all_scope(int on) {
    in_all = on;
    plain_seen = 0;
}

/* How long dlock__expects_tls's probe may wait.  The probe is part of the call:
 * it ends by the call's end (a server that is down behind a proxy, or a
 * proxy that turns connections away, closes them as a TLS port does, and
 * a plain server behind it may then leave the ClientHello unanswered
 * until the probe's timeout); by the request's deadline too
 * (DLOCK__MONO_NEVER: none).  A call without an end (a trylock, an
 * unlock) gets the reply floor at least, as a reply wait: a trylock
 * against a TLS port is still told so.  A timed call's probe ends by its
 * deadline, not the DLOCK__LATE_MS after it that its reply waits may
 * take: the call has more to do after the probe. */
static unsigned probe_ms(const dlock__node *n, dlock__mono deadline) {
    unsigned ms = n->conf.connect_timeout_ms < 500 ? n->conf.connect_timeout_ms : 500;
    if (deadline != DLOCK__MONO_NEVER) {
        int64_t left = (deadline - dlock__now()) / DLOCK__MS;
        if (call_end == DLOCK__MONO_NEVER && left < (int64_t)dlock__reply_floor_ms(n)) left = dlock__reply_floor_ms(n);
        if (left < 1) left = 1;
        if (left < (int64_t)ms) ms = (unsigned)left;
    }
    return dlock__end_cap(ms);
}

/* The server closed (or reset) a fresh plain connection at its first
 * request: a TLS port does that to plain RESP.  1 if the server answers
 * a TLS ClientHello, within probe_ms (then the message is set), else 0. */
int dlock__expects_tls(dlock__node *n, const dlock__conn *cn, dlock__mono deadline) {
    const redisContext *ctx = cn->ctx;
    /* (no answer, not even a part of one, ever came on it) */
    if (cn->tls != NULL || cn->answered != 0 || cn->ep.port == 0 || ctx->reader->len != 0) return 0;
    if (ctx->err != REDIS_ERR_EOF &&
        !(ctx->err == REDIS_ERR_IO &&
          (strstr(ctx->errstr, strerror(ECONNRESET)) != NULL || strstr(ctx->errstr, strerror(EPIPE)) != NULL)))
        return 0;
    if (dlock__tls_probe(cn->ep.host, cn->ep.port, probe_ms(n, deadline)) != 1) return 0;
    dlock__seterr(ENOLCK, "%s: the server closed the connection at the first request and answers a TLS "
                  "handshake: it seems to expect TLS (use %s)", n->conf.redacted_url, scheme_for(&n->conf, 1));
    return 1;
}

/* An answer that says the server wants a password this client did not
 * give: NOAUTH, or the protocol error (after which Redis closes the
 * connection) that an unauthenticated client's longer request gets. */
int dlock__needs_password(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL &&
           (strncmp(r->str, "NOAUTH", 6) == 0 || strstr(r->str, "Protocol error: unauthenticated") != NULL);
}

int dlock__password_needed(const dlock__node *n) {
    if (n->conf.password != NULL)
        return dlock__seterr(ENOLCK, "%s: the server needs a password, and refused this connection's "
                             "(NOAUTH)", n->conf.redacted_url);
    return dlock__seterr(ENOLCK, "%s: the server needs a password: give it in the URL (redis://:PASSWORD@host, "
                         "or redis://USER:PASSWORD@host for an ACL user)", n->conf.redacted_url);
}

/* AUTH and SELECT on a fresh connection.  ENOLCK; when the server refuses
 * the credentials, a configuration error that retrying cannot mend, the
 * node notes it (dlock__node_refuse). */
static int conn_setup(dlock__node *n, dlock__conn *cn) {
    const dlock__conf *cf = &n->conf;
    redisReply *r;
    char why[128];

    if (cf->password != NULL) {
        const char *argv[3];
        size_t lens[3];
        int argc = 0;
        argv[argc] = "AUTH"; lens[argc++] = 4;
        if (cf->user != NULL) { argv[argc] = cf->user; lens[argc++] = strlen(cf->user); }
        argv[argc] = cf->password; lens[argc++] = strlen(cf->password);
        r = dlock__conn_cmd(cn, argc, argv, lens, NULL);
        if (r == NULL) {
            if (dlock__expects_tls(n, cn, DLOCK__MONO_NEVER)) return dlock__node_refuse(n);
            return dlock__seterr(ENOLCK, "%s: AUTH: %s", cf->redacted_url,
                                 dlock__conn_why(cn, dlock__conn_bound(cn), why, sizeof why));
        }
        if (r->type == REDIS_REPLY_ERROR) {
            /* the server's message names neither the password nor the user's secret */
            dlock__seterr(ENOLCK, "%s: authentication failed (%s): %.200s", cf->redacted_url,
                          strncmp(r->str, "WRONGPASS", 9) == 0 ? "wrong user name or password"
                          : strstr(r->str, "without any password configured") != NULL ? "the server has no password"
                                                                                        : "refused",
                          r->str);
            freeReplyObject(r);
            return dlock__node_refuse(n);
        }
        freeReplyObject(r);
    }
    if (cf->db != 0) {
        char db[16];
        const char *argv[2] = { "SELECT", db };
        size_t lens[2] = { 6, 0 };
        lens[1] = dlock__dec(db, (unsigned long long)cf->db); /* (url.c: 0 to 10^6) */
        r = dlock__conn_cmd(cn, 2, argv, lens, NULL);
        if (r == NULL) {
            if (dlock__expects_tls(n, cn, DLOCK__MONO_NEVER)) return dlock__node_refuse(n);
            return dlock__seterr(ENOLCK, "%s: SELECT: %s", cf->redacted_url,
                                 dlock__conn_why(cn, dlock__conn_bound(cn), why, sizeof why));
        }
        if (dlock__needs_password(r)) {
            freeReplyObject(r);
            dlock__password_needed(n);
            return dlock__node_refuse(n);
        }
        if (r->type == REDIS_REPLY_ERROR) {
            dlock__seterr(ENOLCK, "%s: SELECT %d refused: %.200s", cf->redacted_url, cf->db, r->str);
            freeReplyObject(r);
            return dlock__node_refuse(n);
        }
        freeReplyObject(r);
    }
    return 0;
}

/* Sentinel: asks the sentinels, in order, where the master is (over TLS
 * for rediss+sentinel://, verified as the master is).  0 with *ep filled,
 * or ENOLCK when none of them answers with an address. */
static int sentinel_master(dlock__node *n, unsigned timeout_ms, dlock__endpoint *ep) {
    const dlock__conf *cf = &n->conf;
    char why[640] = ""; /* a TLS refusal, said in the end */
    size_t i, refused = 0;
    int rc;
    for (i = 0; i < cf->nnodes; i++) {
        const dlock__endpoint *s = &cf->nodes[i];
        const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", cf->master };
        size_t lens[3] = { 8, 23, strlen(cf->master) };
        redisContext *ctx;
        dlock__conn tmp;
        redisReply *r;
        unsigned long port = 0;
        if (dlock__end_near()) break; /* no time left to ask one */
        ctx = redisConnectWithTimeout(s->host, s->port, ms_tv(dlock__end_cap(timeout_ms)));
        tmp = (dlock__conn){ .ctx = ctx, .timeout_ms = timeout_ms, .ep = *s };
        if (ctx == NULL) return dlock__seterr(ENOMEM, "out of memory");
        if (ctx->err) {
            redisFree(ctx);
            continue;
        }
        redisSetTimeout(ctx, ms_tv(dlock__end_cap(timeout_ms)));
        if (cf->tls && dlock__tls_start(n, &tmp, s->host, &rc) != 0) {
            if (rc) { /* its certificate was refused */
                const char *e = strstr(dlock_last_error(), "TLS: ");
                plain_hint(cf);
                e = strstr(dlock_last_error(), "TLS: ");
                snprintf(why, sizeof why, " (sentinel %s:%d: %.300s)", s->host, s->port, e ? e : dlock_last_error());
                refused++;
            }
            dlock__tls_free(&tmp);
            redisFree(ctx);
            continue;
        }
        r = dlock__conn_cmd(&tmp, 3, argv, lens, NULL);
        if (dlock__needs_password(r) && why[0] == '\0')
            snprintf(why, sizeof why, " (sentinel %s:%d needs a password: dlock asks the sentinels without one)",
                     s->host, s->port);
        if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING &&
            r->element[0]->len > 0 && r->element[0]->len < sizeof ep->host) {
            char *e;
            port = strtoul(r->element[1]->str, &e, 10);
            if (*e == '\0' && port > 0 && port <= 65535) {
                memcpy(ep->host, r->element[0]->str, r->element[0]->len);
                ep->host[r->element[0]->len] = '\0';
                ep->port = (int)port;
            } else {
                port = 0;
            }
        }
        if (r) freeReplyObject(r);
        dlock__tls_free(&tmp);
        redisFree(ctx);
        if (port != 0) return 0;
    }
    dlock__seterr(ENOLCK, "%s: no sentinel answered with the address of master '%s'%s", cf->redacted_url,
                  cf->master, why);
    /* Every sentinel refused by its certificate: a configuration error,
     * not worth asking again. */
    return refused == cf->nnodes ? dlock__node_refuse(n) : ENOLCK;
}

/* Sentinel: is the server we reached the master?  (A sentinel may name the
 * old master for a moment during a failover.) */
static int is_master(dlock__node *n, dlock__conn *cn) {
    const char *argv[1] = { "ROLE" };
    size_t lens[1] = { 4 };
    redisReply *r = dlock__conn_cmd(cn, 1, argv, lens, NULL);
    int ok;
    char why[128];
    if (r == NULL)
        return dlock__seterr(ENOLCK, "%s: ROLE: %s", n->conf.redacted_url,
                             dlock__conn_why(cn, dlock__conn_bound(cn), why, sizeof why));
    ok = r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
         strcmp(r->element[0]->str, "master") == 0;
    if (!ok && r->type == REDIS_REPLY_ERROR)
        dlock__seterr(ENOLCK, "%s: ROLE refused: %.200s", n->conf.redacted_url, r->str);
    else if (!ok)
        dlock__seterr(ENOLCK, "%s: the server the sentinels named is not the master (yet)", n->conf.redacted_url);
    freeReplyObject(r);
    return ok ? 0 : ENOLCK;
}

static int conn_open(dlock__node *n, dlock__conn **out, unsigned connect_timeout_ms) {
    const dlock__conf *cf = &n->conf;
    dlock__endpoint ep = cf->ep;
    dlock__mono began = dlock__now();
    redisContext *ctx;
    dlock__conn *cn;
    int rc, for_good = 0;

    if (connect_timeout_ms == 0) connect_timeout_ms = 1;
    if (cf->kind == DLOCK__BACKEND_SENTINEL && (rc = sentinel_master(n, connect_timeout_ms, &ep)) != 0) return rc;
    for (size_t i = 0;; i++) {
        /* Redlock, Cluster: the deployment's own node's connection (the
         * subscriber's) goes to the first node named in the URL that
         * answers; the lock requests go through one member node per
         * master (redlock.c, cluster.c). */
        if (cf->kind == DLOCK__BACKEND_REDLOCK || cf->kind == DLOCK__BACKEND_CLUSTER) ep = cf->nodes[i];
        if (dlock__end_near())
            return dlock__seterr(ENOLCK, "cannot connect to %s: no time left before the deadline", cf->redacted_url);
        ctx = redisConnectWithTimeout(ep.host, ep.port, ms_tv(dlock__end_cap(connect_timeout_ms)));
        if (ctx == NULL) return dlock__seterr(ENOMEM, "out of memory");
        /* Redlock: a master that accepts but does not run (paused) is
         * passed over for the next one (plain only: TLS speaks first). */
        if (!ctx->err && cf->kind == DLOCK__BACKEND_REDLOCK && !cf->tls && i + 1 < cf->nnodes &&
            !dlock__fd_answers(ctx->fd, dlock__end_cap(connect_timeout_ms))) {
            ctx->err = REDIS_ERR_IO;
            snprintf(ctx->errstr, sizeof ctx->errstr, "accepted the connection but did not answer a PING");
        }
        if (!ctx->err) break;
        rc = dlock__seterr(ENOLCK, "cannot connect to %s: %s", cf->redacted_url, ctx->errstr);
        redisFree(ctx);
        if ((cf->kind != DLOCK__BACKEND_REDLOCK && cf->kind != DLOCK__BACKEND_CLUSTER) || i + 1 >= cf->nnodes)
            return rc;
    }
    /* Not inherited by programs the host runs (fork + exec). */
    fcntl(ctx->fd, F_SETFD, fcntl(ctx->fd, F_GETFD) | FD_CLOEXEC);
    redisEnableKeepAlive(ctx);
    if ((cn = calloc(1, sizeof *cn)) == NULL) {
        redisFree(ctx);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    cn->ctx = ctx;
    cn->ep = ep;
    cn->used = cn->opened = began;
    cn->stamps = cf->tls ? DLOCK__STAMPS_OFF : DLOCK__STAMPS_LATER; /* (TLS: OpenSSL reads the socket) */
    /* The TLS handshake, AUTH and SELECT are part of connecting: they get
     * its budget. */
    dlock__conn_timeout(cn, dlock__end_cap(connect_timeout_ms < cf->command_timeout_ms ? connect_timeout_ms : cf->command_timeout_ms));
    if (cf->tls && in_all && plain_seen && ep.port != 0 && dlock__plain_probe(ep.host, ep.port, cn->timeout_ms) == 1) {
        dlock__conn_close(cn);
        dlock__seterr(ENOLCK, "%s: the server does not speak TLS (it answers plain RESP): use %s, or the "
                      "server's TLS port", cf->redacted_url, scheme_for(cf, 0));
        return dlock__node_refuse(n); /* for good, as below */
    }
    if ((cf->tls && (rc = dlock__tls_start(n, cn, ep.host, &for_good)) != 0) || (rc = conn_setup(n, cn)) != 0 ||
        (cf->kind == DLOCK__BACKEND_SENTINEL && (rc = is_master(n, cn)) != 0) ||
        (n->hooks != NULL && n->hooks->on_connect != NULL && (rc = n->hooks->on_connect(n, cn)) != 0)) {
        /* A scheme mismatch is for good, as a refused certificate: a TLS
         * port that reset the Redlock master's INFO, a plain server that
         * answered our TLS handshake in RESP (said "use redis://"). */
        if (for_good || (!dlock__node_refused_since(n, began) && rc == ENOLCK && dlock__expects_tls(n, cn, DLOCK__MONO_NEVER)))
            dlock__node_refuse(n);
        if (dlock__node_refused_since(n, began) && cf->tls && strstr(dlock_last_error(), "does not speak TLS") != NULL) {
            plain_hint(cf);
            plain_seen = in_all;
        }
        dlock__conn_close(cn);
        return rc;
    }
    dlock__conn_timeout(cn, cf->command_timeout_ms);
    cn->ep = ep;
    cn->checked = dlock__now();
    *out = cn;
    return 0;
}

int dlock__conn_open(dlock__node *n, dlock__conn **out, unsigned connect_timeout_ms) {
    int rc = conn_open(n, out, connect_timeout_ms);
    if (rc == 0) dlock__debug("%s: connected to %s:%d", n->conf.redacted_url, (*out)->ep.host, (*out)->ep.port);
    else dlock__debug("%s: no connection (%s)", n->conf.redacted_url, dlock_last_error());
    return rc;
}

/* A failover does not stop the old master at once: Sentinel demotes it
 * seconds after naming the new one, and until then it still takes
 * writes.  A connection to it would renew holds the new master lets run
 * out, and grant locks the new master does not know of.  So connections
 * are checked against the sentinels' answer: the renewal connection
 * before every batch, pooled connections when their last check is older
 * than DLOCK__SENTINEL_CHECK_MS (net/internal.h). */
int dlock__conn_current(dlock__node *n, dlock__conn *cn, dlock__mono max_age) {
    dlock__endpoint ep;
    dlock__mono now = dlock__now();
    char saved[512];
    int rc;
    if (n->conf.kind != DLOCK__BACKEND_SENTINEL || now - cn->checked < max_age) return 1;
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    rc = sentinel_master(n, n->conf.connect_timeout_ms, &ep);
    dlock__restoreerr(saved);
    if (rc != 0) return 1; /* the sentinels cannot tell: go on with what we have */
    if (ep.port != cn->ep.port || strcmp(ep.host, cn->ep.host) != 0) return 0;
    cn->checked = now;
    return 1;
}

void dlock__conn_close(dlock__conn *cn) {
    if (cn == NULL) return;
    dlock__tls_free(cn);
    redisFree(cn->ctx);
    free(cn);
}

void dlock__conn_abandon(dlock__conn *cn) {
    /* redisFree only closes the descriptor: nothing is written, so a fork
     * child never speaks on its parent's sockets. */
    dlock__conn_close(cn);
}

dlock__mono dlock__unreachable_deadline(const dlock__node *n) {
    return dlock__now() + (dlock__mono)n->conf.unreachable_ms * DLOCK__MS;
}
