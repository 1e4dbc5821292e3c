/* conn.c -- a node's Redis connections: connect, authenticate, run
 * commands; its pool and its circuit breaker.  It knows servers and bytes,
 * nothing of locks: what a node's answers mean to its deployment (a
 * Redlock master's identity, a Cluster's redirections) comes back through
 * the node's hooks.
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
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "net/net.h"

#define POOL_IDLE_MAX 8

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

/* Where a back-off between attempts stops: the sooner of deadline and
 * the call's deadline (its end less the DLOCK__LATE_MS that a reply wait
 * may take past it).  A semaphore's op, bounded by the unreachable bound,
 * must not sleep past its timed call; and an attempt begun after the
 * call's deadline is one no caller waits for. */
static dlock__mono end_min(dlock__mono deadline) {
    dlock__mono end = call_end == DLOCK__MONO_NEVER ? DLOCK__MONO_NEVER
                                                    : call_end - (dlock__mono)DLOCK__LATE_MS * DLOCK__MS;
    return end < deadline ? end : deadline;
}

/* ms, or the time left until the call's end if that is shorter (1 ms at
 * least: 0 means "no timeout" to the socket). */
static unsigned end_cap(unsigned ms) {
    if (call_end != DLOCK__MONO_NEVER) {
        int64_t left = (call_end - dlock__now()) / DLOCK__MS;
        if (left < 1) left = 1;
        if (left < (int64_t)ms) ms = (unsigned)left;
    }
    return ms;
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

static int send_all(redisContext *ctx, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = send(ctx->fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            snprintf(ctx->errstr, sizeof ctx->errstr, "send: %s",
                     errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
            ctx->err = REDIS_ERR_IO;
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
 * "outcome unknown"), never a wrong answer taken. */
unsigned dlock__pool_fresh_ms = 1;

static int64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return dlock__ts_ns(&ts);
}

/* Asks the kernel to stamp what cn's socket receives. */
static void stamps_ask(dlock__conn *cn) {
    int on = 1;
    if (setsockopt(cn->ctx->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) == 0) cn->stamps = DLOCK__STAMPS_ASKED;
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

int dlock__conn_flush(dlock__conn *cn) {
    redisContext *ctx = cn->ctx;
    int rc;
    if (ctx->err) return -1;
    if (cn->step == DLOCK__STEP_TAKEN) {
        cn->sent_rt = real_ns();
        cn->step = DLOCK__STEP_SENT;
    }
    rc = cn->tls ? dlock__tls_write(cn, ctx->obuf, sdslen(ctx->obuf)) : send_all(ctx, ctx->obuf, sdslen(ctx->obuf));
    sdsclear(ctx->obuf);
    return rc;
}

int dlock__conn_read(dlock__conn *cn) {
    if (cn->ctx->err) return REDIS_ERR;
    if (cn->tls != NULL) return dlock__tls_read(cn) == 0 ? REDIS_OK : REDIS_ERR;
    if (cn->stamps != DLOCK__STAMPS_OFF) return stamped_read(cn);
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
static void rcv_timeout(dlock__conn *cn, dlock__mono dt) {
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

/* An answer is awaited bound ms in all, from its first read: the socket's
 * receive timeout bounds one read only, and may be shorter than the bound
 * (set_timeout keeps it where it is when it is), so a read that times out
 * with time left is made again; and a server that sends a huge answer, or
 * trickles it, does not keep the caller past the bound either: each read
 * after the first waits only for what is left of it.  -1 (the context's
 * error set) when nothing is left. */
static int reply_read_more(dlock__conn *cn, dlock__mono start, unsigned bound) {
    redisContext *ctx = cn->ctx;
    dlock__mono left = start + (dlock__mono)bound * DLOCK__MS - dlock__now();
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
    if (left < (dlock__mono)cn->timeout_ms * DLOCK__MS) rcv_timeout(cn, left);
    return 0;
}

/* How long cn's next answer may take in all. */
static unsigned conn_bound(const dlock__conn *cn) {
    return cn->bound_ms > cn->timeout_ms ? cn->bound_ms : cn->timeout_ms;
}

int dlock__conn_reply(dlock__conn *cn, void **reply) {
    dlock__mono start = 0;
    unsigned bound = conn_bound(cn);
    int rc = REDIS_OK, reads = 0;
    *reply = NULL;
    if (dlock__reply_get(cn, reply) != REDIS_OK) return REDIS_ERR;
    while (*reply == NULL) {
        if (reads++ == 0) start = dlock__now();
        else if (reply_read_more(cn, start, bound) != 0) {
            rc = REDIS_ERR;
            break;
        }
        if (dlock__conn_read(cn) != REDIS_OK) {
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
    if (!out || dlock__conn_reply(cn, &reply) != REDIS_OK) return NULL;
    return reply;
}

/* Why a connection failed, for a message: a read that timed out says so
 * in plain words (hiredis says "Resource temporarily unavailable"). */
static const char *conn_why(const dlock__conn *cn, unsigned ms, char *buf, size_t n) {
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

/* How long expects_tls's probe may wait.  The probe is part of the call:
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
    return end_cap(ms);
}

/* The server closed (or reset) a fresh plain connection at its first
 * request: a TLS port does that to plain RESP.  1 if the server answers
 * a TLS ClientHello, within probe_ms (then the message is set), else 0. */
static int expects_tls(dlock__node *n, const dlock__conn *cn, dlock__mono deadline) {
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
static int needs_password(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL &&
           (strncmp(r->str, "NOAUTH", 6) == 0 || strstr(r->str, "Protocol error: unauthenticated") != NULL);
}

static int password_needed(const dlock__node *n) {
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
            if (expects_tls(n, cn, DLOCK__MONO_NEVER)) return dlock__node_refuse(n);
            return dlock__seterr(ENOLCK, "%s: AUTH: %s", cf->redacted_url,
                                 conn_why(cn, conn_bound(cn), why, sizeof why));
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
            if (expects_tls(n, cn, DLOCK__MONO_NEVER)) return dlock__node_refuse(n);
            return dlock__seterr(ENOLCK, "%s: SELECT: %s", cf->redacted_url,
                                 conn_why(cn, conn_bound(cn), why, sizeof why));
        }
        if (needs_password(r)) {
            freeReplyObject(r);
            password_needed(n);
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
        redisContext *ctx = redisConnectWithTimeout(s->host, s->port, ms_tv(end_cap(timeout_ms)));
        dlock__conn tmp = { .ctx = ctx, .timeout_ms = timeout_ms, .ep = *s };
        redisReply *r;
        unsigned long port = 0;
        if (ctx == NULL) return dlock__seterr(ENOMEM, "out of memory");
        if (ctx->err) {
            redisFree(ctx);
            continue;
        }
        redisSetTimeout(ctx, ms_tv(end_cap(timeout_ms)));
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
        if (needs_password(r) && why[0] == '\0')
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
                             conn_why(cn, conn_bound(cn), why, sizeof why));
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
        ctx = redisConnectWithTimeout(ep.host, ep.port, ms_tv(end_cap(connect_timeout_ms)));
        if (ctx == NULL) return dlock__seterr(ENOMEM, "out of memory");
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
    cn->used = began;
    if (!cf->tls) stamps_ask(cn);
    /* The TLS handshake, AUTH and SELECT are part of connecting: they get
     * its budget. */
    dlock__conn_timeout(cn, end_cap(connect_timeout_ms < cf->command_timeout_ms ? connect_timeout_ms : cf->command_timeout_ms));
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
        if (for_good || (!dlock__node_refused_since(n, began) && rc == ENOLCK && expects_tls(n, cn, DLOCK__MONO_NEVER)))
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
 * than this. */
#define SENTINEL_CHECK_MS 100

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

/* ------------------------------------------------------------- breaker
 *
 * With conf.breaker_ms set, a request that found the server unreachable
 * for the whole unreachable bound opens the node's breaker for that
 * long: lock, unlock and info calls then fail with ENOLCK at once, without
 * asking, so that a process pays the unreachable wait once per period,
 * not on every call.  One call a second is let through as a probe: one
 * attempt (one connection attempt, a reply awaited the reply floor), and
 * its answer closes the breaker -- the server's return is noticed within
 * about a second of the next call.  When the period is over the breaker
 * closes by itself, and the next call waits the whole bound again (a
 * server too slow for a probe is still reached once a period). */

#define BREAKER_PROBE_MS 1000

/* The host-wide record (hostrec.c) is asked before a request that would
 * connect (a process with pooled connections is answering), and while
 * the breaker is open -- but not for a probe the program's breaker
 * already claimed for its keeper (dlock__breaker_probe_now). */
static int host_asked(const dlock__node *n) {
    if (n->host_rec[0] == '\0') return 0;
    return n->breaker_until != 0 ? n->breaker_probe != 0 : n->idle == NULL;
}

int dlock__breaker_pass(dlock__node *n, int *probe) {
    dlock__mono now;
    int rc;
    *probe = 0;
    if (host_asked(n) && (rc = dlock__hostrec_gate(n, probe)) != DLOCK__HOST_NO_SAY) return rc;
    if (n->breaker_until == 0) return 0;
    now = dlock__now();
    if (now >= n->breaker_until) {
        n->breaker_until = 0; /* the period is over */
        return 0;
    }
    if (now >= n->breaker_probe) {
        n->breaker_probe = now + (dlock__mono)BREAKER_PROBE_MS * DLOCK__MS;
        *probe = 1;
        return 0;
    }
    return dlock__seterr(ENOLCK, "%s: not asked: the server was unreachable for %u ms, %lld ms ago; it is "
                         "asked again in %lld ms (circuit breaker, breaker_ms=%u)", n->conf.redacted_url,
                         n->conf.unreachable_ms, (long long)((now - n->breaker_since) / DLOCK__MS),
                         (long long)((n->breaker_probe - now) / DLOCK__MS + 1), n->conf.breaker_ms);
}

/* A request that gave up (ENOLCK) this close to its unreachable bound
 * waited it out (a last attempt may end a little short of it). */
#define BREAKER_SLACK_MS 500

/* Opens c's breaker now for conf.breaker_ms, its next probe due at
 * probe_at.  n->mu held. */
static void breaker_trip(dlock__node *n, dlock__mono now, dlock__mono probe_at) {
    dlock__debug("%s: circuit breaker open for %u ms: calls fail at once but a probe a second",
                 n->conf.redacted_url, n->conf.breaker_ms);
    n->breaker_since = now;
    n->breaker_until = now + (dlock__mono)n->conf.breaker_ms * DLOCK__MS;
    n->breaker_probe = probe_at;
    if (probe_at != 0) dlock__hostrec_down(n, now); /* (0: a keeper's probe, its program's record) */
}

void dlock__breaker_note(dlock__node *n, int rc, dlock__mono ub) {
    dlock__mono now, slack;
    if (n->conf.breaker_ms == 0) return;
    if (rc != ENOLCK) {
        /* The host's other processes learn it at once: after an open
         * breaker, or an outage this process recorded (a request that
         * went on waiting, and was answered). */
        int wrote = __atomic_exchange_n(&n->host_wrote, 0, __ATOMIC_RELAXED);
        if (n->breaker_until != 0) dlock__debug("%s: circuit breaker closed: the server answered", n->conf.redacted_url);
        if (n->breaker_until != 0 || wrote) dlock__hostrec_up(n);
        n->breaker_until = 0; /* the server answered */
        return;
    }
    if (ub == 0) return;
    now = dlock__now();
    slack = (dlock__mono)(n->conf.unreachable_ms / 2 < BREAKER_SLACK_MS ? n->conf.unreachable_ms / 2
                                                                         : BREAKER_SLACK_MS) * DLOCK__MS;
    if (now + slack < ub) return; /* it failed early: a refusal, not a wait */
    breaker_trip(n, now, now + (dlock__mono)BREAKER_PROBE_MS * DLOCK__MS);
}

int dlock__breaker_check(dlock__node *n, int *probe) {
    int rc;
    pthread_mutex_lock(n->mu);
    rc = dlock__breaker_pass(n, probe);
    pthread_mutex_unlock(n->mu);
    return rc;
}

void dlock__breaker_report(dlock__node *n, int rc, int paid) {
    pthread_mutex_lock(n->mu);
    /* paid: as if the bound ended now */
    dlock__breaker_note(n, rc, paid ? dlock__now() : 0);
    pthread_mutex_unlock(n->mu);
}

int dlock__breaker_open(dlock__node *n) {
    int open;
    pthread_mutex_lock(n->mu);
    open = n->breaker_until != 0 && dlock__now() < n->breaker_until;
    pthread_mutex_unlock(n->mu);
    return open;
}

void dlock__breaker_probe_now(dlock__node *n) {
    pthread_mutex_lock(n->mu);
    if (n->conf.breaker_ms != 0) breaker_trip(n, dlock__now(), 0);
    pthread_mutex_unlock(n->mu);
}

/* ---------------------------------------------------------------- pool */

int dlock__pool_get(dlock__node *n, dlock__conn **out, dlock__mono deadline) {
    dlock__mono now, refused = 0;
    dlock__backoff bo = DLOCK__BACKOFF_INIT(DLOCK__BACKOFF_MIN_MS, DLOCK__BACKOFF_MAX_MS);
    int rc, attempt;

    for (;;) {
        dlock__conn *cn;
        struct pollfd pfd;
        pthread_mutex_lock(n->mu);
        if ((cn = n->idle) == NULL) {
            pthread_mutex_unlock(n->mu);
            break;
        }
        n->idle = cn->next;
        n->nidle--;
        pthread_mutex_unlock(n->mu);
        cn->next = NULL;
        /* An idle connection must have nothing to read (see "A
         * connection's step"): one whose reads are stamped and whose
         * last answer is fresh is checked by its reads; any other by a
         * poll(0) now. */
        if (cn->stamps == DLOCK__STAMPS_SEEN && dlock__now() - cn->used < (dlock__mono)dlock__pool_fresh_ms * DLOCK__MS) {
            cn->step = DLOCK__STEP_TAKEN;
        } else {
            pfd.fd = cn->ctx->fd;
            pfd.events = POLLIN;
            pfd.revents = 0;
            cn->step = DLOCK__STEP_CHECKED;
            if (poll(&pfd, 1, 0) != 0 || dlock__conn_pending(cn)) {
                dlock__conn_close(cn);
                continue;
            }
        }
        if (dlock__conn_current(n, cn, (dlock__mono)SENTINEL_CHECK_MS * DLOCK__MS)) {
            *out = cn;
            return 0;
        }
        dlock__conn_close(cn);
    }
    for (attempt = 0;; attempt++) {
        unsigned budget = n->conf.connect_timeout_ms;
        now = dlock__now();
        /* The first attempt is always made (a timedlock whose deadline has
         * passed still acquires a free lock), with the time left before
         * the deadline but at least the reply floor, as a reply wait; later
         * ones stop at the deadline.  None goes past the call's end. */
        if (deadline != DLOCK__MONO_NEVER) {
            int64_t left = (deadline - now) / DLOCK__MS;
            if (attempt > 0 && left <= 0) {
                /* less than a ms left: the deadline has come (a caller
                 * that compares its own clock sees it has, and times out) */
                dlock__sleep_until(deadline);
                return ENOLCK; /* message set by the last attempt */
            }
            if (attempt == 0 && left < (int64_t)dlock__reply_floor_ms(n)) left = dlock__reply_floor_ms(n);
            if (left < (int64_t)budget) budget = (unsigned)left;
        }
        if (call_end != DLOCK__MONO_NEVER && now >= call_end)
            return dlock__seterr(ENOLCK, "cannot connect to %s: no time left before the deadline", n->conf.redacted_url);
        budget = end_cap(budget);
        rc = dlock__conn_open(n, out, budget);
        if (rc != ENOLCK || n->one_connect || dlock__node_refused_since(n, now)) return rc;
        /* Refused or timed out: wait a little (to the deadline at most),
         * then try again while time is left.  Refused for a second: the
         * host's other processes need not find it out again. */
        if (refused == 0) refused = now;
        dlock__hostrec_refused(n, refused, dlock__now());
        (void)dlock__backoff_sleep(&bo, end_min(deadline));
    }
}

void dlock__pool_flush(dlock__node *n) {
    dlock__conn *idle;
    pthread_mutex_lock(n->mu);
    idle = n->idle;
    n->idle = NULL;
    n->nidle = 0;
    pthread_mutex_unlock(n->mu);
    while (idle != NULL) {
        dlock__conn *next = idle->next;
        dlock__conn_close(idle);
        idle = next;
    }
}

int dlock__pool_keep(dlock__node *n, dlock__conn *cn) {
    if (n->nidle >= POOL_IDLE_MAX) return 0;
    cn->next = n->idle;
    n->idle = cn;
    n->nidle++;
    return 1;
}

void dlock__pool_put(dlock__node *n, dlock__conn *cn, int broken) {
    if (cn == NULL) return;
    if (broken) {
        /* The idle connections are as old as the broken one: most likely
         * the server restarted or the network dropped, so drop them too
         * rather than fail on each of them in turn. */
        dlock__pool_flush(n);
    } else {
        pthread_mutex_lock(n->mu);
        if (n->nidle < POOL_IDLE_MAX) {
            cn->next = n->idle;
            n->idle = cn;
            n->nidle++;
            cn = NULL;
        }
        pthread_mutex_unlock(n->mu);
    }
    dlock__conn_close(cn);
}

/* ------------------------------------------------------- owed answers
 *
 * A request sent without waiting for its answer (dlock__command_send:
 * the pipelined unlock) leaves its connection out of the pool, owing that
 * answer, on n->owed under the calling thread's name.  The thread's next
 * request on the node goes out on it (cmd_send): the server runs both in
 * order, and one round trip reads both answers.  A thread that makes no
 * request soon leaves them to dlock__owed_settle (the renewal thread's,
 * within a few ms; exit, fork, destroy).  A connection that breaks tells
 * each owed request "no answer": the layer above asks it again. */
static void set_timeout(dlock__node *n, dlock__conn *cn, dlock__mono deadline);

struct dlock__owed {
    dlock__conn *cn;
    pthread_t owner;
    dlock__mono first; /* when its oldest unread request went out */
    int count;
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

/* Reads o's answers and puts its connection back (closed if it broke). */
static void owed_end(dlock__node *n, dlock__owed *o, dlock__mono deadline) {
    int broken;
    set_timeout(n, o->cn, deadline);
    broken = owed_read(o) != 0 || o->cn->ctx->reader->pos < o->cn->ctx->reader->len;
    dlock__pool_put(n, o->cn, broken);
    owed_free(o);
}

int dlock__command_send(dlock__node *n, int argc, const char **argv, const size_t *lens, dlock__owed_fn fn,
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
    set_timeout(n, o->cn, deadline);
    if (dlock__resp_append(o->cn->ctx, argc, argv, lens) != 0 || dlock__conn_flush(o->cn) != 0) {
        dlock__seterr(ENOLCK, "%s: cannot send: %s", n->conf.redacted_url,
                      o->cn->ctx->errstr[0] ? o->cn->ctx->errstr : "out of memory");
        (void)owed_read(o); /* (the earlier ones went out before: their answers may be there) */
        dlock__pool_put(n, o->cn, 1);
        owed_free(o);
        return ENOLCK;
    }
    if (o->count == 0) o->first = dlock__now();
    o->e[o->count].fn = fn;
    o->e[o->count].arg = arg;
    o->count++;
    pthread_mutex_lock(n->mu);
    o->next = n->owed;
    __atomic_store_n(&n->owed, o, __ATOMIC_RELEASE);
    pthread_mutex_unlock(n->mu);
    return 0;
}

void dlock__owed_settle(dlock__node *n, dlock__mono before, dlock__mono deadline) {
    for (;;) {
        dlock__owed **p, *o;
        if (__atomic_load_n(&n->owed, __ATOMIC_ACQUIRE) == NULL) return;
        pthread_mutex_lock(n->mu);
        for (p = &n->owed; (o = *p) != NULL; p = &o->next)
            if (before == DLOCK__MONO_NEVER || o->first < before) {
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
static unsigned reply_bound(const dlock__node *n, dlock__mono deadline) {
    unsigned ms = n->conf.command_timeout_ms, floor = dlock__reply_floor_ms(n);
    if (deadline != DLOCK__MONO_NEVER) {
        int64_t left = (deadline - dlock__now()) / DLOCK__MS;
        if (left < (int64_t)ms) ms = left < (int64_t)floor ? floor : (unsigned)left;
    }
    return end_cap(ms);
}

static void set_timeout(dlock__node *n, dlock__conn *cn, dlock__mono deadline) {
    unsigned ms = reply_bound(n, deadline), floor = dlock__reply_floor_ms(n), low;
    low = ms < floor ? ms : floor;
    if (cn->timeout_ms > ms || cn->timeout_ms < low) rcv_timeout(cn, (dlock__mono)low * DLOCK__MS);
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
        if (!out) owed->count = 0; /* (told none by owed_free) */
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
    if (dlock__backoff_sleep(&k->backoff, end_min(k->deadline)) != 0) return ENOLCK;
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
    set_timeout(k->n, k->cn, k->deadline);
    if (k->waitn > 0) { /* the WAIT may take its whole timeout (not past the call's end) */
        unsigned wms = end_cap(k->n->conf.wait_timeout_ms + 1000);
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
    if (needs_password(r)) { /* asking again cannot mend it */
        freeReplyObject(r);
        dlock__pool_put(n, k->cn, 1);
        return password_needed(n);
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
    if (expects_tls(n, k->cn, k->deadline)) { /* a configuration error: asking again cannot mend it */
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
                  conn_why(k->cn, (unsigned)((dlock__now() - k->began) / DLOCK__MS), why, sizeof why));
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

/* ------------------------------------------- one request to many nodes */

/* Late connections (dlock__command_all): a request went out on them and
 * its answer (cn->owed of them) has not been read.  They are never taken
 * from the pool while an answer is owed -- it would be read as the answer
 * of the next request -- and are read when the node is next asked. */
#define LATE_MAX 4   /* late connections per node kept; an older one is closed */
#define OWED_MAX 8   /* requests queued behind an unanswered one at most */

/* The complete answers already on cn read and dropped, without waiting:
 * 0 (cn->owed counts down), or -1 when the connection broke. */
static int late_read(dlock__conn *cn) {
    for (;;) {
        void *r = NULL;
        struct pollfd pfd = { cn->ctx->fd, POLLIN, 0 };
        if (dlock__reply_get(cn, &r) != REDIS_OK) return -1;
        if (r != NULL) {
            freeReplyObject(r);
            cn->answered++;
            cn->used = dlock__now();
            if (--cn->owed == 0) return 0;
            continue;
        }
        if (!dlock__conn_pending(cn) && poll(&pfd, 1, 0) <= 0) return 0;
        if (dlock__conn_read(cn) != REDIS_OK) return -1;
    }
}

/* Reads what n's late connections were answered: those answered in full
 * go back to the pool, broken ones are closed.  1 when one still owes an
 * answer (the server has not answered an earlier request), else 0. */
static int late_drain(dlock__node *n) {
    dlock__conn *list, *cn, *keep = NULL;
    int owes = 0;
    pthread_mutex_lock(n->mu);
    list = n->late;
    n->late = NULL;
    n->nlate = 0;
    pthread_mutex_unlock(n->mu);
    while ((cn = list) != NULL) {
        list = cn->next;
        cn->next = NULL;
        if (late_read(cn) != 0) {
            dlock__conn_close(cn);
        } else if (cn->owed == 0) {
            pthread_mutex_lock(n->mu);
            if (!dlock__pool_keep(n, cn)) dlock__conn_close(cn);
            pthread_mutex_unlock(n->mu);
        } else {
            cn->next = keep;
            keep = cn;
            owes = 1;
        }
    }
    pthread_mutex_lock(n->mu);
    while ((cn = keep) != NULL) {
        keep = cn->next;
        if (n->nlate >= LATE_MAX) { /* another thread put some back meanwhile */
            dlock__conn_close(cn);
            continue;
        }
        cn->next = n->late;
        n->late = cn;
        n->nlate++;
    }
    pthread_mutex_unlock(n->mu);
    return owes;
}

/* cn, whose answer is owed, among n's late connections. */
static void late_put(dlock__node *n, dlock__conn *cn) {
    dlock__conn *old = NULL, **pp;
    pthread_mutex_lock(n->mu);
    if (n->nlate >= LATE_MAX) { /* the oldest goes: what it was asked still runs */
        for (pp = &n->late; (*pp)->next != NULL; pp = &(*pp)->next)
            ;
        old = *pp;
        *pp = NULL;
        n->nlate--;
    }
    cn->next = n->late;
    n->late = cn;
    n->nlate++;
    pthread_mutex_unlock(n->mu);
    dlock__conn_close(old);
}

/* A late connection of n taken out to queue a request behind its owed
 * answers, or NULL. */
static dlock__conn *late_take(dlock__node *n) {
    dlock__conn *cn;
    pthread_mutex_lock(n->mu);
    if ((cn = n->late) != NULL && cn->owed < OWED_MAX) {
        n->late = cn->next;
        n->nlate--;
        cn->next = NULL;
    } else {
        cn = NULL;
    }
    pthread_mutex_unlock(n->mu);
    return cn;
}

void dlock__late_flush(dlock__node *n, int abandon) {
    dlock__conn *cn;
    if (!abandon) pthread_mutex_lock(n->mu); /* a fork child: its fork_prepare holds it */
    cn = n->late;
    n->late = NULL;
    n->nlate = 0;
    if (!abandon) pthread_mutex_unlock(n->mu);
    while (cn != NULL) {
        dlock__conn *next = cn->next;
        if (abandon) dlock__conn_abandon(cn);
        else dlock__conn_close(cn);
        cn = next;
    }
}

#define STALL_MS 1000 /* a node that did not take a connection in time is not asked to for so long */
#define STALL_MIN_MS 100 /* a failed connection attempt at least this long: the node stalls */

/* Does n have a connection at hand (idle, or late)? */
static int has_conn(dlock__node *n) {
    int has;
    pthread_mutex_lock(n->mu);
    has = n->idle != NULL || n->late != NULL;
    pthread_mutex_unlock(n->mu);
    return has;
}

/* A connection of n for dlock__command_all, within the request's bound.
 * A node whose server did not finish a connection in time (paused, a
 * network that drops) is not tried again for STALL_MS: each try would
 * hold up the whole request (a connection is made before the request is
 * sent), for each call, while the others answer at once. */
static int all_connect(dlock__node *n, dlock__conn **cn, dlock__mono end) {
    dlock__mono t0 = dlock__now(), until = __atomic_load_n(&n->stalled_until, __ATOMIC_RELAXED);
    int rc;
    if (until > t0 && !has_conn(n))
        return dlock__seterr(ENOLCK, "%s: did not take a connection in time lately: not asked", n->conf.redacted_url);
    if ((rc = dlock__pool_get(n, cn, end)) != 0 && dlock__now() - t0 >= (dlock__mono)STALL_MIN_MS * DLOCK__MS &&
        !dlock__node_refused_since(n, t0))
        __atomic_store_n(&n->stalled_until, dlock__now() + (dlock__mono)STALL_MS * DLOCK__MS, __ATOMIC_RELAXED);
    return rc;
}

/* Node i's connection for a request of dlock__command_all, the request
 * written on it: 0, or rcs[i] set.  A node that has not answered an
 * earlier request is not asked again on another connection (it would cost
 * a connection, or the whole bound, each time it is paused): with
 * DLOCK__ALL_QUEUE the request is queued behind the unanswered one (it
 * runs when the server does; its answer is not awaited), else skipped. */
static int all_send(dlock__node *n, dlock__conn **cn, int flags, const dlock__all_req *rq, int fresh, int *rc,
                    dlock__mono deadline) {
    const char **self = rq->self_argv != NULL ? rq->self_argv : rq->argv;
    const size_t *self_lens = rq->self_argv != NULL ? rq->self_lens : rq->lens;
    *cn = NULL;
    if (late_drain(n)) {
        dlock__conn *q = (flags & DLOCK__ALL_QUEUE) ? late_take(n) : NULL;
        /* (self-contained only on a connection the server never answered:
         * one that answered before knows the scripts -- a restarted
         * server breaks it -- and a queue of whole script bodies could
         * fill the socket of a paused server, and block the send) */
        int fresh_q = q != NULL && q->answered == 0;
        if (q != NULL && dlock__resp_append(q->ctx, rq->argc, fresh_q ? self : rq->argv, fresh_q ? self_lens : rq->lens) == 0 &&
            dlock__conn_flush(q) == 0) {
            q->owed++;
            late_put(n, q);
            *rc = dlock__seterr(ENOLCK, "%s: has not answered an earlier request: asked after it", n->conf.redacted_url);
        } else {
            if (q != NULL) dlock__conn_close(q);
            *rc = dlock__seterr(ENOLCK, "%s: has not answered an earlier request", n->conf.redacted_url);
        }
        return -1;
    }
    if ((*rc = all_connect(n, cn, deadline)) != 0) return -1;
    set_timeout(n, *cn, deadline);
    if (dlock__resp_append((*cn)->ctx, rq->argc, fresh ? self : rq->argv, fresh ? self_lens : rq->lens) != 0 ||
        dlock__conn_flush(*cn) != 0) {
        *rc = dlock__seterr(ENOLCK, "%s: %s", n->conf.redacted_url,
                            (*cn)->ctx->errstr[0] ? (*cn)->ctx->errstr : "cannot send");
        dlock__pool_put(n, *cn, 1);
        *cn = NULL;
        return -1;
    }
    return 0;
}

/* Node n's connection cn broke or answered (r): out/rc set, cn put back
 * or closed; a TLS probe of a broken one ends by `end`. */
static void all_answer(dlock__node *n, dlock__conn *cn, int ok, void *r, redisReply **out, int *rc,
                       dlock__mono end) {
    char why[128];
    if (!ok) {
        if (expects_tls(n, cn, end)) {
            dlock__node_refuse(n);
            *rc = ENOLCK;
        } else {
            *rc = dlock__seterr(ENOLCK, "%s: %s", n->conf.redacted_url, conn_why(cn, conn_bound(cn), why, sizeof why));
        }
        dlock__pool_put(n, cn, 1);
    } else if (needs_password(r)) {
        freeReplyObject(r);
        *rc = password_needed(n);
        dlock__pool_put(n, cn, 1);
    } else if (cn->ctx->reader->pos < cn->ctx->reader->len) {
        freeReplyObject(r);
        *rc = dlock__seterr(EPROTO, "%s: the server sent more than was asked for", n->conf.redacted_url);
        dlock__pool_put(n, cn, 1);
    } else {
        cn->answered++;
        cn->used = dlock__now();
        *out = r;
        *rc = 0;
        dlock__pool_put(n, cn, 0);
    }
}

/* One poll over the connections still waiting (cn[i] != NULL), at most
 * until `end`; each that has an answer, or broke, is done (cn[i] NULL).
 * How many answered. */
static size_t all_poll(dlock__node **ns, size_t n, dlock__conn **cn, redisReply **out, int *rcs, dlock__mono end) {
    struct pollfd pfd[DLOCK__NODES_MAX];
    size_t i, k = 0, answered = 0;
    int ms = 0;
    for (i = 0; i < n; i++) {
        void *r = NULL;
        if (cn[i] == NULL) continue;
        if (dlock__reply_get(cn[i], &r) != REDIS_OK || r != NULL) {
            all_answer(ns[i], cn[i], r != NULL, r, &out[i], &rcs[i], end);
            answered += out[i] != NULL;
            cn[i] = NULL;
            continue;
        }
        if (dlock__conn_pending(cn[i])) ms = -2; /* decrypted bytes wait: no poll */
    }
    if (answered > 0) return answered; /* the caller decides whether to wait on */
    if (ms == 0) {
        dlock__mono left = end - dlock__now();
        ms = left <= 0 ? 0 : (int)((left + DLOCK__MS - 1) / DLOCK__MS);
    } else {
        ms = 0;
    }
    for (i = 0; i < n; i++) {
        pfd[i].fd = cn[i] != NULL ? cn[i]->ctx->fd : -1;
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
        k += cn[i] != NULL;
    }
    if (k == 0 || (poll(pfd, n, ms) < 0 && errno != EINTR)) return answered;
    for (i = 0; i < n; i++) {
        if (cn[i] == NULL || (pfd[i].revents == 0 && !dlock__conn_pending(cn[i]))) continue;
        if (dlock__conn_read(cn[i]) != REDIS_OK) {
            all_answer(ns[i], cn[i], 0, NULL, &out[i], &rcs[i], end);
            cn[i] = NULL;
        }
    }
    return answered;
}

/* The answers not yet judged told to the judge: 1 when decided. */
static int all_judged(const dlock__all_judge *judge, size_t n, redisReply **out, int *seen) {
    size_t i;
    int decided = 0;
    for (i = 0; i < n; i++) {
        if (out[i] == NULL || seen[i]) continue;
        seen[i] = 1;
        if (judge->fn(judge->arg, i, out[i])) decided = 1;
    }
    return decided;
}

void dlock__command_all(dlock__node **ns, size_t n, size_t need, const dlock__all_judge *judge, int flags,
                        const dlock__all_req *req, redisReply **out, int *rcs, dlock__mono deadline) {
    dlock__conn *cn[DLOCK__NODES_MAX];
    int seen[DLOCK__NODES_MAX] = { 0 }, decided = 0;
    size_t i, answered = 0, waiting = 0;
    /* One bound for the whole request, from its start: a node slow to
     * connect does not give the others more time. */
    dlock__mono start = dlock__now(), end = n > 0 ? start + (dlock__mono)reply_bound(ns[0], deadline) * DLOCK__MS : 0;
    in_all = 1;
    plain_seen = 0;
    for (i = 0; i < n; i++) out[i] = NULL, cn[i] = NULL, rcs[i] = -1;
    /* The nodes with a connection at hand first, then those that need a
     * new one: their answers come while the others connect. */
    for (i = 0; i < n; i++)
        if (has_conn(ns[i]) && all_send(ns[i], &cn[i], flags, req, 0, &rcs[i], end) == 0) waiting++;
    for (i = 0; i < n; i++)
        if (rcs[i] == -1 && all_send(ns[i], &cn[i], flags, req, 1, &rcs[i], end) == 0) waiting++;
    in_all = plain_seen = 0;
    decided = judge == NULL && need == 0; /* nothing awaited: only the grace below */
    /* Answers as they come, until `need` of them (any answer), or the
     * judge's verdict, or the bound. */
    while (waiting > 0 && !decided && dlock__now() < end) {
        answered += all_poll(ns, n, cn, out, rcs, end);
        for (i = 0, waiting = 0; i < n; i++) waiting += cn[i] != NULL;
        decided = judge != NULL ? all_judged(judge, n, out, seen) : answered >= need;
    }
    /* The others are given as long again as the decision took (at most to
     * the bound): masters that are well answer together, and each grant
     * read is one the hold can count on; what has come meanwhile is read
     * too.  The rest are late: their answers are read next time. */
    if (waiting > 0 && decided) {
        dlock__mono now = dlock__now(), grace = now + (now - start);
        if (grace > end) grace = end;
        while (waiting > 0 && dlock__now() < grace) {
            (void)all_poll(ns, n, cn, out, rcs, grace);
            for (i = 0, waiting = 0; i < n; i++) waiting += cn[i] != NULL;
        }
    }
    for (i = 0; i < 3 && waiting > 0; i++) (void)all_poll(ns, n, cn, out, rcs, dlock__now()); /* parse, read, parse */
    for (i = 0; i < n; i++) {
        if (cn[i] == NULL) continue;
        rcs[i] = dlock__seterr(ENOLCK, "%s: no answer within %u ms%s", ns[i]->conf.redacted_url, conn_bound(cn[i]),
                               decided ? " (the others' answers decided)" : "");
        cn[i]->owed = 1;
        late_put(ns[i], cn[i]);
    }
}
