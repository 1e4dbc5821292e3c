/* tls.c -- TLS for rediss:// deployments, over dlock's own transport.
 *
 * Debian's hiredis 0.14 has no TLS.  Its reply reader and command
 * formatter do not care where bytes come from, so a TLS connection is a
 * hiredis context whose socket dlock never lets hiredis read or write:
 * OpenSSL runs over two memory BIOs, and this file moves the encrypted
 * bytes between them and the socket with recv() and send(MSG_NOSIGNAL)
 * (no SIGPIPE for the host program; a write, and a wait for bytes, end by
 * an end the caller gives, kept by ppoll),
 * feeding what SSL_read decrypts to the context's reader.
 *
 * The server's certificate is verified against the CA file given
 * (tls_ca_file=) or the system store, and its name against the host of
 * the URL (or tls_server_name=); a client certificate is sent when one is
 * configured (tls_cert_file= with tls_key_file=).
 *
 * libssl is loaded (dlopen, by the name the build linked against) when a
 * first TLS context or TLS probe needs it, never at start-up: a process
 * that only speaks plain RESP does not pay for loading and relocating it
 * (some 0.7 million instructions of the dynamic loader's, a fifth of a
 * millisecond).  The library links libcrypto for its tokens, but this
 * file calls even libcrypto's functions through libssl's handle (below).
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "net/internal.h"

#ifndef DLOCK_SSL_SONAME
#define DLOCK_SSL_SONAME "libssl.so.3"
#endif

/* ------------------------------------------------------ loading libssl */

/* The OpenSSL functions this file calls (SSL_CTX_ctrl and SSL_ctrl behind
 * the header's SSL_CTX_set_min_proto_version and SSL_set_tlsext_host_name
 * macros), libcrypto's among them: each becomes a pointer of the header's
 * own type, read with dlsym from libssl's handle (which finds libcrypto's
 * in libssl's own libcrypto), and the names below are defined to those
 * pointers, so that the code reads as if they were linked.  So TLS runs
 * on one copy of OpenSSL, libssl's, even in a program that carries a
 * copy of libcrypto of its own (the dlock command's static one: its
 * tokens' random source): a BIO, an error queue or a verify parameter
 * always belongs to the library the SSL object does. */
/* clang-format off */
#define SSL_FUNCS(X) \
    X(TLS_client_method) \
    X(SSL_CTX_new) \
    X(SSL_CTX_free) \
    X(SSL_CTX_ctrl) \
    X(SSL_CTX_load_verify_locations) \
    X(SSL_CTX_set_default_verify_paths) \
    X(SSL_CTX_set_verify) \
    X(SSL_CTX_use_certificate_chain_file) \
    X(SSL_CTX_use_PrivateKey_file) \
    X(SSL_CTX_check_private_key) \
    X(SSL_new) \
    X(SSL_free) \
    X(SSL_ctrl) \
    X(SSL_set_bio) \
    X(SSL_set_connect_state) \
    X(SSL_get0_param) \
    X(SSL_do_handshake) \
    X(SSL_get_error) \
    X(SSL_get_verify_result) \
    X(SSL_read) \
    X(SSL_write) \
    X(SSL_pending) \
    X(BIO_new) \
    X(BIO_s_mem) \
    X(BIO_free) \
    X(BIO_read) \
    X(BIO_write) \
    X(BIO_ctrl_pending) \
    X(ERR_peek_last_error) \
    X(ERR_error_string_n) \
    X(ERR_clear_error) \
    X(X509_VERIFY_PARAM_set1_host) \
    X(X509_VERIFY_PARAM_set1_ip_asc) \
    X(X509_verify_cert_error_string)
/* clang-format on */

static struct {
#define SSL_FIELD(f) __typeof__(f) *f;
    SSL_FUNCS(SSL_FIELD)
#undef SSL_FIELD
} ssl_fn;
static pthread_once_t ssl_once = PTHREAD_ONCE_INIT;
static int ssl_ok;        /* every function was found */
static char ssl_why[256]; /* else why not */

static void ssl_load(void) {
    void *h = dlopen(DLOCK_SSL_SONAME, RTLD_NOW | RTLD_LOCAL);
    const char *missing = NULL;
    int (*init)(uint64_t, const OPENSSL_INIT_SETTINGS *);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(ssl_why, sizeof ssl_why, "%s", e != NULL ? e : "dlopen failed");
        return;
    }
    /* (POSIX's way to store dlsym's answer in a function pointer.) */
#define SSL_SYM(f) \
    if (missing == NULL && (*(void **)&ssl_fn.f = dlsym(h, #f)) == NULL) missing = #f;
    SSL_FUNCS(SSL_SYM)
#undef SSL_SYM
    if (missing != NULL) {
        snprintf(ssl_why, sizeof ssl_why, "%s has no %s", DLOCK_SSL_SONAME, missing);
        return; /* (libssl stays loaded: it is never unloaded anyway) */
    }
    /* The libcrypto libssl runs on is the library's own (set up long
     * since, with its exit handler, by the random source: this is then a
     * no-op), or a second copy beside a program's static one, set up now:
     * without an exit handler, which, registered after the core's
     * (client.c, at_exit), would run before it and free OpenSSL under a
     * release still to be sent over TLS. */
    *(void **)&init = dlsym(h, "OPENSSL_init_crypto");
    if (init != NULL) init(OPENSSL_INIT_NO_ATEXIT, NULL);
    ssl_ok = 1;
}

/* 1 once libssl is there, else 0. */
static int ssl_loaded(void) {
    pthread_once(&ssl_once, ssl_load);
    return ssl_ok;
}

/* 0 once libssl is there, else the error (ENOTSUP) with its reason. */
static int ssl_need(void) {
    if (ssl_loaded()) return 0;
    return dlock__seterr(ENOTSUP, "TLS: cannot load %s: %s", DLOCK_SSL_SONAME, ssl_why);
}

#define TLS_client_method ssl_fn.TLS_client_method
#define SSL_CTX_new ssl_fn.SSL_CTX_new
#define SSL_CTX_free ssl_fn.SSL_CTX_free
#define SSL_CTX_ctrl ssl_fn.SSL_CTX_ctrl
#define SSL_CTX_load_verify_locations ssl_fn.SSL_CTX_load_verify_locations
#define SSL_CTX_set_default_verify_paths ssl_fn.SSL_CTX_set_default_verify_paths
#define SSL_CTX_set_verify ssl_fn.SSL_CTX_set_verify
#define SSL_CTX_use_certificate_chain_file ssl_fn.SSL_CTX_use_certificate_chain_file
#define SSL_CTX_use_PrivateKey_file ssl_fn.SSL_CTX_use_PrivateKey_file
#define SSL_CTX_check_private_key ssl_fn.SSL_CTX_check_private_key
#define SSL_new ssl_fn.SSL_new
#define SSL_free ssl_fn.SSL_free
#define SSL_ctrl ssl_fn.SSL_ctrl
#define SSL_set_bio ssl_fn.SSL_set_bio
#define SSL_set_connect_state ssl_fn.SSL_set_connect_state
#define SSL_get0_param ssl_fn.SSL_get0_param
#define SSL_do_handshake ssl_fn.SSL_do_handshake
#define SSL_get_error ssl_fn.SSL_get_error
#define SSL_get_verify_result ssl_fn.SSL_get_verify_result
#define SSL_read ssl_fn.SSL_read
#define SSL_write ssl_fn.SSL_write
#define SSL_pending ssl_fn.SSL_pending
#define BIO_new ssl_fn.BIO_new
#define BIO_s_mem ssl_fn.BIO_s_mem
#define BIO_free ssl_fn.BIO_free
#define BIO_read ssl_fn.BIO_read
#define BIO_write ssl_fn.BIO_write
#define BIO_ctrl_pending ssl_fn.BIO_ctrl_pending
#define ERR_peek_last_error ssl_fn.ERR_peek_last_error
#define ERR_error_string_n ssl_fn.ERR_error_string_n
#define ERR_clear_error ssl_fn.ERR_clear_error
#define X509_VERIFY_PARAM_set1_host ssl_fn.X509_VERIFY_PARAM_set1_host
#define X509_VERIFY_PARAM_set1_ip_asc ssl_fn.X509_VERIFY_PARAM_set1_ip_asc
#define X509_verify_cert_error_string ssl_fn.X509_verify_cert_error_string

/* ------------------------------------------------------------- TLS */

struct dlock__tls {
    SSL *ssl;
    BIO *rbio; /* encrypted bytes from the server, for OpenSSL */
    BIO *wbio; /* encrypted bytes from OpenSSL, for the server */
    size_t got;           /* bytes received from the server so far */
    unsigned char first;  /* the first of them */
};

/* OpenSSL's reason for the last failure, or `dflt`. */
static const char *ssl_reason(const char *dflt) {
    static __thread char buf[160];
    unsigned long e = ERR_peek_last_error();
    if (e == 0) return dflt;
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return buf;
}

int dlock__tls_ctx_make(dlock__node *n) {
    const dlock__conf *cf = &n->conf;
    SSL_CTX *ctx;
    int rc;
    if (!cf->tls) return 0;
    if ((rc = ssl_need()) != 0) return rc;
    if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL)
        return dlock__seterr(ENOMEM, "TLS: cannot make a context: %s", ssl_reason("out of memory"));
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (cf->tls_verify) {
        int ok = cf->tls_ca_file ? SSL_CTX_load_verify_locations(ctx, cf->tls_ca_file, NULL)
                                 : SSL_CTX_set_default_verify_paths(ctx);
        if (ok != 1) {
            SSL_CTX_free(ctx);
            return dlock__seterr(EINVAL, "TLS: cannot load the CA %s: %s", cf->tls_ca_file ? "file" : "store",
                                 ssl_reason("no reason given"));
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    if (cf->tls_cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cf->tls_cert_file) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, cf->tls_key_file, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            SSL_CTX_free(ctx);
            return dlock__seterr(EINVAL, "TLS: cannot load the client certificate or key: %s",
                                 ssl_reason("no reason given"));
        }
    }
    n->tls_ctx = ctx;
    return 0;
}

void dlock__tls_ctx_free(dlock__node *n) {
    if (n->tls_ctx != NULL) SSL_CTX_free(n->tls_ctx);
    n->tls_ctx = NULL;
}

/* The server closed on us while we wrote: it may have said why in a TLS
 * alert first (a client certificate it wanted, one it refused).  Reads
 * what already arrived, without waiting, and lets OpenSSL name it. */
static void alert_reason(dlock__conn *cn) {
    char buf[4096];
    ssize_t k;
    int n;
    while ((k = recv(cn->ctx->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
        if (BIO_write(cn->tls->rbio, buf, (int)k) != (int)k) return;
    if (BIO_ctrl_pending(cn->tls->rbio) == 0) return;
    ERR_clear_error();
    n = SSL_read(cn->tls->ssl, buf, sizeof buf);
    if (n <= 0 && SSL_get_error(cn->tls->ssl, n) == SSL_ERROR_SSL)
        snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "TLS: %.110s", ssl_reason("connection refused"));
}

/* Sends what OpenSSL has written to wbio, by end: a socket whose buffer
 * stays full (a server that stopped reading) is waited for by ppoll until
 * then (as conn.c's send_all), and a record left in part fails the
 * connection (the context's error set). */
static int out_flush(dlock__conn *cn, dlock__mono end) {
    char buf[16384];
    int n;
    while ((n = BIO_read(cn->tls->wbio, buf, sizeof buf)) > 0) {
        const char *p = buf;
        while (n > 0) {
            ssize_t k = send(cn->ctx->fd, p, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k < 0) {
                if (errno == EINTR) continue;
                if ((errno == EAGAIN || errno == EWOULDBLOCK) && dlock__fd_writable(cn->ctx->fd, end)) continue;
                int e = errno;
                snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "send: %s",
                         e == EAGAIN || e == EWOULDBLOCK ? "timed out" : strerror(e));
                cn->ctx->err = REDIS_ERR_IO;
                if (e == ECONNRESET || e == EPIPE) alert_reason(cn);
                return -1;
            }
            p += k;
            n -= (int)k;
        }
    }
    return 0;
}

/* Receives what the socket has into rbio, waiting for it until end: 0;
 * 1 when end came first (nothing set); or -1 with the context's error. */
static int in_fill(dlock__conn *cn, dlock__mono end) {
    char buf[16384];
    ssize_t k;
    int e = 0;
    for (;;) {
        k = recv(cn->ctx->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k >= 0) break;
        if ((e = errno) == EINTR) continue;
        if (e != EAGAIN && e != EWOULDBLOCK) break;
        if (!dlock__fd_wait(cn->ctx->fd, end)) return 1;
    }
    if (k == 0) {
        snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "Server closed the connection");
        cn->ctx->err = REDIS_ERR_EOF;
        return -1;
    }
    if (k < 0) {
        snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "recv: %s", strerror(e));
        cn->ctx->err = REDIS_ERR_IO;
        return -1;
    }
    if (cn->tls->got == 0) cn->tls->first = (unsigned char)buf[0];
    cn->tls->got += (size_t)k;
    if (BIO_write(cn->tls->rbio, buf, (int)k) != (int)k) {
        snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "TLS: out of memory");
        cn->ctx->err = REDIS_ERR_OOM;
        return -1;
    }
    return 0;
}

static int tls_fail(dlock__conn *cn, const char *what) {
    snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "TLS %.10s: %.100s", what, ssl_reason("connection failed"));
    cn->ctx->err = REDIS_ERR_IO;
    return -1;
}

/* cn's session: its SSL and BIOs, SNI for a name (never for an
 * address), and the name (or address) the certificate must carry.  0, or
 * ENOMEM with the message. */
static int tls_session(dlock__node *n, dlock__conn *cn, const char *host) {
    const dlock__conf *cf = &n->conf;
    const char *name = cf->tls_server_name ? cf->tls_server_name : host;
    struct dlock__tls *t = calloc(1, sizeof *t);
    unsigned char tmp[16];
    int is_ip;
    if (t == NULL) return dlock__seterr(ENOMEM, "out of memory");
    cn->tls = t;
    if ((t->ssl = SSL_new(n->tls_ctx)) == NULL || (t->rbio = BIO_new(BIO_s_mem())) == NULL ||
        (t->wbio = BIO_new(BIO_s_mem())) == NULL) {
        if (t->rbio) BIO_free(t->rbio);
        if (t->wbio) BIO_free(t->wbio);
        t->rbio = t->wbio = NULL;
        return dlock__seterr(ENOMEM, "out of memory");
    }
    SSL_set_bio(t->ssl, t->rbio, t->wbio); /* the SSL owns them now */
    SSL_set_connect_state(t->ssl);
    is_ip = inet_pton(AF_INET, name, tmp) == 1 || inet_pton(AF_INET6, name, tmp) == 1;
    if (!is_ip) SSL_set_tlsext_host_name(t->ssl, name);
    if (cf->tls_verify) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
        if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, name) != 1 : X509_VERIFY_PARAM_set1_host(vp, name, 0) != 1)
            return dlock__seterr(ENOMEM, "out of memory");
    }
    return 0;
}

/* The handshake failed other than by waiting: ENOLCK with the message;
 * *for_good when the certificate was refused or the server answered in
 * plain RESP (a configuration error that asking again cannot mend, as
 * refused credentials: conn.c). */
static int handshake_failed(dlock__node *n, dlock__conn *cn, int *for_good) {
    const dlock__conf *cf = &n->conf;
    long v = SSL_get_verify_result(cn->tls->ssl);
    if (v != X509_V_OK) {
        ERR_clear_error();
        *for_good = 1;
        return dlock__seterr(ENOLCK, "%s: TLS: the server's certificate was refused: %s", cf->redacted_url,
                             X509_verify_cert_error_string(v));
    }
    if (cn->tls->got > 0 && strchr("+-$*:", cn->tls->first) != NULL) {
        /* A reply in RESP to the ClientHello read as a command. */
        ERR_clear_error();
        *for_good = 1;
        return dlock__seterr(ENOLCK,
                             "%s: the server does not speak TLS (it answered in plain RESP): use "
                             "redis://, or the server's TLS port",
                             cf->redacted_url);
    }
    tls_fail(cn, "handshake");
    return dlock__seterr(ENOLCK, "%s: %s", cf->redacted_url, cn->ctx->errstr);
}

/* Nothing at all came in answer to the ClientHello by the handshake's
 * end, ms after its start: a plain Redis takes the ClientHello for the
 * start of an inline command, and waits for its end.  A probe in plain
 * RESP tells it (within the call's end: tls.c's probes end by it), for
 * the message.  ENOLCK; *for_good when it answered. */
static int handshake_silent(dlock__node *n, dlock__conn *cn, int *for_good, unsigned ms) {
    const dlock__conf *cf = &n->conf;
    unsigned probe = cn->timeout_ms / 2 < 250 ? cn->timeout_ms / 2 : 250;
    if (cn->ep.port != 0 && dlock__plain_probe(cn->ep.host, cn->ep.port, probe) == 1) {
        *for_good = 1;
        return dlock__seterr(ENOLCK,
                             "%s: the server does not speak TLS (it answers plain RESP, and said "
                             "nothing to the TLS handshake): use redis://, or the server's TLS port",
                             cf->redacted_url);
    }
    return dlock__seterr(ENOLCK,
                         "%s: the server did not answer the TLS handshake within %u ms (does it speak "
                         "TLS?)",
                         cf->redacted_url, ms);
}

/* The handshake is part of connecting: it ends by one end, fixed as it
 * starts -- the connection's budget (cn->timeout_ms, what conn.c gives
 * the handshake, AUTH and SELECT), or the call's end if sooner -- however
 * many reads it takes, each awaited by ppoll (in_fill). */
int dlock__tls_start(dlock__node *n, dlock__conn *cn, const char *host, int *for_good) {
    dlock__mono start = dlock__now(), end = DLOCK__MONO_NEVER;
    int rc;
    *for_good = 0;
    if (cn->timeout_ms > 0) end = start + (dlock__mono)cn->timeout_ms * DLOCK__MS;
    if (dlock__call_end() < end) end = dlock__call_end();
    if ((rc = tls_session(n, cn, host)) != 0) return rc;
    for (;;) {
        int r = SSL_do_handshake(cn->tls->ssl);
        if (out_flush(cn, end) != 0) break;
        if (r == 1) return 0;
        if (SSL_get_error(cn->tls->ssl, r) != SSL_ERROR_WANT_READ) return handshake_failed(n, cn, for_good);
        if ((rc = in_fill(cn, end)) < 0) break;
        if (rc > 0 && cn->tls->got == 0)
            return handshake_silent(n, cn, for_good, (unsigned)((dlock__now() - start) / DLOCK__MS));
        if (rc > 0)
            return dlock__seterr(ENOLCK, "%s: the server did not finish the TLS handshake within %u ms",
                                 n->conf.redacted_url, (unsigned)((dlock__now() - start) / DLOCK__MS));
    }
    return dlock__seterr(ENOLCK, "%s: %s", n->conf.redacted_url, cn->ctx->errstr);
}

/* ------------------------------------------------------------- probes
 *
 * A probe is part of the call that makes it (conn.c dlock__expects_tls:
 * a timed call's probe ends with the call), so its bound is one end on
 * the monotonic clock, set as it begins: the ClientHello's making counts
 * against it (a process's first SSL_CTX_new takes milliseconds, tens on
 * a loaded host), and no connect is begun with less than a ms of it
 * left.  The
 * answer is awaited by ppoll, to the microsecond: a socket's receive
 * timeout runs on the kernel's timer wheel, whose slots widen with the
 * timeout -- it ends some 4 ms late, and one of a few hundred ms up to
 * 30 ms and more (an eighth of it) late: past the call's end, where a
 * plain Redis (a proxy before it) leaves the ClientHello unanswered,
 * as one back from a restart does.  Both probes tell a configuration
 * error, for a message: one that runs out of time says "no" (0), and the
 * call goes on as it would without it. */

/* timeout_ms from now, or the call's end if sooner: whoever asks, a
 * probe never runs past the call that makes it. */
static dlock__mono probe_end(unsigned timeout_ms) {
    dlock__mono end = dlock__now() + (dlock__mono)(timeout_ms == 0 ? 1 : timeout_ms) * DLOCK__MS;
    return dlock__call_end() < end ? dlock__call_end() : end;
}

/* A connection of its own to host:port, by end; NULL: none, or no time.
 * hiredis awaits a connect in whole ms, rounded up (its poll): it is
 * given the whole ms left, and none begins with less than one. */
static redisContext *probe_connect(const char *host, int port, dlock__mono end) {
    dlock__mono left = end - dlock__now();
    struct timeval tv;
    redisContext *ctx;
    if (left < DLOCK__MS) return NULL;
    tv.tv_sec = (time_t)(left / (1000 * DLOCK__MS));
    tv.tv_usec = (suseconds_t)(left % (1000 * DLOCK__MS) / DLOCK__MS * 1000);
    if ((ctx = redisConnectWithTimeout(host, port, tv)) == NULL) return NULL;
    if (ctx->err) {
        redisFree(ctx);
        return NULL;
    }
    return ctx;
}

/* Sends len bytes; reads the start of the answer into ans, awaited until
 * end: its length, or -1 / 0 (nothing, or no answer in time). */
static ssize_t probe_exchange(redisContext *ctx, const void *req, size_t len, unsigned char *ans, size_t cap,
                              dlock__mono end) {
    ssize_t k;
    /* (a fresh socket's buffer takes a ClientHello whole) */
    if (send(ctx->fd, req, len, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)len) return -1;
    if (!dlock__fd_wait(ctx->fd, end)) return -1;
    do k = recv(ctx->fd, ans, cap, MSG_DONTWAIT);
    while (k < 0 && errno == EINTR);
    return k;
}

int dlock__tls_probe(const char *host, int port, unsigned timeout_ms) {
    dlock__mono end = probe_end(timeout_ms); /* (loading libssl counts against the bound) */
    SSL_CTX *sctx;
    SSL *ssl;
    BIO *rb, *wb;
    redisContext *ctx = NULL;
    unsigned char hello[4096], ans[8];
    int n, yes = 0;
    if (!ssl_loaded()) return 0; /* no libssl: no ClientHello to send */
    sctx = SSL_CTX_new(TLS_client_method());
    ssl = sctx ? SSL_new(sctx) : NULL;
    rb = BIO_new(BIO_s_mem());
    wb = BIO_new(BIO_s_mem());
    if (ssl == NULL || rb == NULL || wb == NULL) {
        BIO_free(rb);
        BIO_free(wb);
        goto out;
    }
    SSL_set_bio(ssl, rb, wb); /* the SSL owns them now */
    SSL_set_connect_state(ssl);
    (void)SSL_do_handshake(ssl); /* writes the ClientHello, wants the answer */
    n = BIO_read(wb, hello, sizeof hello);
    if (n > 0 && (ctx = probe_connect(host, port, end)) != NULL) {
        ssize_t k = probe_exchange(ctx, hello, (size_t)n, ans, sizeof ans, end);
        /* a TLS record: handshake (22) or alert (21), version 3.x */
        yes = k >= 2 && (ans[0] == 22 || ans[0] == 21) && ans[1] == 3;
    }
out:
    if (ctx) redisFree(ctx);
    if (ssl) SSL_free(ssl);
    if (sctx) SSL_CTX_free(sctx);
    ERR_clear_error();
    return yes;
}

int dlock__plain_probe(const char *host, int port, unsigned timeout_ms) {
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    dlock__mono end = probe_end(timeout_ms);
    redisContext *ctx = probe_connect(host, port, end);
    unsigned char ans[8];
    ssize_t k;
    if (ctx == NULL) return 0;
    k = probe_exchange(ctx, ping, sizeof ping - 1, ans, sizeof ans, end);
    redisFree(ctx);
    return k >= 1 && (ans[0] == '+' || ans[0] == '-');
}

void dlock__tls_free(dlock__conn *cn) {
    if (cn->tls == NULL) return;
    if (cn->tls->ssl != NULL) SSL_free(cn->tls->ssl); /* and its BIOs */
    free(cn->tls);
    cn->tls = NULL;
}

int dlock__tls_write(dlock__conn *cn, const char *buf, size_t len, dlock__mono end) {
    while (len > 0) {
        int n = SSL_write(cn->tls->ssl, buf, len > 1 << 30 ? 1 << 30 : (int)len);
        if (n <= 0) return tls_fail(cn, "write");
        buf += n;
        len -= (size_t)n;
        if (out_flush(cn, end) != 0) return -1;
    }
    return 0;
}

/* A record that came in part is awaited until end, no longer: the socket
 * is not left to block the thread until its receive timeout (a server
 * that sent half a record and stalled would hold a renewal round, or a
 * timed call, that long), and a record still in part at end is no
 * failure -- its bytes wait in OpenSSL's buffer, the rest is read when it
 * comes, and the caller's own bound decides. */
int dlock__tls_read(dlock__conn *cn, dlock__mono end) {
    char buf[16384];
    for (;;) {
        int n = SSL_read(cn->tls->ssl, buf, sizeof buf), e;
        if (n > 0) {
            if (dlock__reply_feed(cn, buf, (size_t)n) != REDIS_OK) return -1;
            return out_flush(cn, end); /* (a key update may want an answer) */
        }
        e = SSL_get_error(cn->tls->ssl, n);
        if (out_flush(cn, end) != 0) return -1;
        if (e == SSL_ERROR_ZERO_RETURN) {
            snprintf(cn->ctx->errstr, sizeof cn->ctx->errstr, "Server closed the connection");
            cn->ctx->err = REDIS_ERR_EOF;
            return -1;
        }
        if (e != SSL_ERROR_WANT_READ) return tls_fail(cn, "read");
        if ((e = in_fill(cn, end)) != 0) return e > 0 ? 0 : -1;
    }
}

int dlock__tls_pending(const dlock__conn *cn) {
    return cn->tls != NULL && (SSL_pending(cn->tls->ssl) > 0 || BIO_ctrl_pending(cn->tls->rbio) > 0);
}
