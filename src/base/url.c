/* url.c -- parsing of DLOCK_URL and the client configuration.
 *
 * Accepted now:
 *   redis://[user:password@]host[:port][/db][?param=value&...]
 *   redis+sentinel://[user:password@]host[:port][,host[:port]...]/MASTER[/db][?...]
 *   redis+cluster://[user:password@]host[:port][,host[:port]...][/0][?...]
 *   redlock://[user:password@]host[:port],host[:port],...[/db][?...]
 *   rediss://, rediss+sentinel://, rediss+cluster://, rediss+redlock://:
 *   the same, every connection over TLS
 * with host a name, an IPv4 address or [an IPv6 address] (sentinels'
 * default port: 26379).  Parameters: connect_timeout_ms,
 * command_timeout_ms, unreachable_ms, drift_ms, restart_guard_ms,
 * handoff_ms, prefix, wait, wait_timeout_ms, wait_conns, breaker_ms,
 * host_breaker.
 * Every message this file produces names the URL in its redacted form:
 * a password never reaches an error, a log or the output.
 *
 * The parser is shaped as redis-cli's parseRedisUri: it walks the URL
 * once, left to right, carrying a struct url_walk, one phase per part
 * (parse_url reads as the list): the scheme (a row of the table schemes[]:
 * backend, TLS, how many hosts and their default port, what the path
 * names), the redacted URL, the user info, the host list, the path
 * (/MASTER, /db), the query (set_param: a table per kind of value), then
 * the checks across parts.  dlock__conf_parse puts the defaults from
 * dlock_config_t and the environment in first.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "base/base.h"

#define DEFAULT_URL "redis://127.0.0.1:6379"
#define DEFAULT_PREFIX "dlock:"
#define URL_MAX 4096

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into a new string; NULL on a bad escape, a NUL
 * byte or no memory (*nomem tells which). */
static char *pct_decode(const char *s, size_t n, int *nomem) {
    char *out = malloc(n + 1), *o = out;
    size_t i;
    *nomem = out == NULL;
    if (out == NULL) return NULL;
    for (i = 0; i < n; i++) {
        if (s[i] == '%') {
            int hi, lo;
            if (i + 2 >= n) goto bad;
            hi = hexval((unsigned char)s[i + 1]);
            lo = hexval((unsigned char)s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) goto bad;
            *o++ = (char)(hi * 16 + lo);
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

static int parse_uint(const char *s, size_t n, unsigned long max, unsigned long *out) {
    unsigned long v = 0;
    size_t i;
    if (n == 0 || n > 10) return -1;
    for (i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v > max) return -1;
    *out = v;
    return 0;
}

static int valid_prefix(const char *p) {
    size_t n = strlen(p);
    /* Braces would change the cluster hash tag of every key. */
    return n <= 128 && strpbrk(p, "{}") == NULL;
}

/* Builds the form of the URL that messages show: scheme://user:***@rest.
 * Conservative: when the userinfo is anything but a plain user:password
 * (an unescaped '/', '?' or '@' in the password makes the parser see
 * something else), everything up to the last '@' is hidden.  `p` is the
 * text after "://"; the query is cut by the caller. */
static char *redact(const char *url, const char *p, const char *at, const char *colon) {
    size_t n = strlen(url), head;
    const char *last = strrchr(p, '@');
    char *out = malloc(n + 8);
    if (out == NULL) return NULL;
    if (last == NULL) {
        strcpy(out, url);
    } else if (at == last && colon != NULL && colon < at) {
        head = (size_t)(colon - url) + 1;
        memcpy(out, url, head);
        memcpy(out + head, "***", 3);
        strcpy(out + head + 3, at);
    } else {
        head = (size_t)(p - url);
        memcpy(out, url, head);
        memcpy(out + head, "***", 3);
        strcpy(out + head + 3, last);
    }
    return out;
}

/* The last line of defence: if the shown URL still contains the password
 * (as typed, or decoded) -- by a coincidence of what is left around the
 * "***", e.g. a password that itself ends in '*' -- show only the scheme
 * and "***".  Passwords shorter than 3 bytes are not looked for (they
 * would match almost any host).  The shown URL is at least as long as the
 * password plus its scheme, so "***" fits. */
static void veil(dlock__conf *conf, const char *pw, size_t n) {
    char *url = conf->redacted_url;
    const char *sep;
    size_t sl;
    if (n < 3 || memmem(url, strlen(url), pw, n) == NULL) return;
    sep = strstr(url, "://");
    sl = sep ? (size_t)(sep - url) + 3 : 0;
    memcpy(url + sl, "***", 4);
}

/* What the user meant as a password may sit where a port goes:
 * redis://u:TOPSECRET (no @host) or redis://u:TOP/SECRET.  In the shown
 * URL `out` (query already cut), a port that is not 1..65535 is replaced,
 * with everything after it, by "***". */
static void mask_bad_ports(char *out) {
    char *s = strstr(out, "://"), *at;
    if (s == NULL) return;
    s += 3;
    if ((at = strrchr(s, '@')) != NULL) s = at + 1;
    while (*s != '\0' && *s != '/') {
        char *c, *e;
        size_t nd;
        if (*s == '[') {
            /* an IPv6 address; anything else in brackets may be a secret */
            char *rb = strchr(s, ']'), *k;
            int zone = 0;
            for (k = s + 1; rb != NULL && k < rb; k++) {
                if (*k == '%') zone = 1;
                else if (!(isxdigit((unsigned char)*k) || *k == ':' || *k == '.' ||
                           (zone && isalnum((unsigned char)*k))))
                    break;
            }
            if (rb == NULL || k < rb) {
                strcpy(s, "***");
                return;
            }
            s = rb + 1;
        }
        c = s + strcspn(s, ":,/");
        if (*c != ':') {
            s = *c == ',' ? c + 1 : c;
            continue;
        }
        e = c + 1 + strcspn(c + 1, ",/");
        nd = (size_t)(e - c - 1);
        {
            unsigned long port;
            if (parse_uint(c + 1, nd, 65535, &port) != 0 || port == 0) {
                strcpy(c + 1, "***");
                return;
            }
        }
        s = *e == ',' ? e + 1 : e;
    }
}

/* The userinfo stops at the first '/' or '?': an '@' after one of them
 * (before any '=' or '&' of a query) most likely ends a user name or
 * password that holds an unencoded '/' or '?' -- with or without an
 * unencoded '@' before it (redis://u:TOP@SEC/RET@host). */
static int misplaced_at(const char *url) {
    const char *p = strstr(url, "://"), *stop, *at;
    if (p == NULL) return 0;
    p += 3;
    stop = p + strcspn(p, "/?");
    if (*stop == '\0' || (at = strchr(stop, '@')) == NULL) return 0;
    return at < stop + strcspn(stop, "=&");
}

/* ---- query parameters ----------------------------------------------------
 * One table per kind of value: numbers in a range, TLS file and name
 * settings (percent-decoded, rediss only), tls_verify, and the key prefix.
 * set_param finds the key and hands the value to the setter of its kind. */

static const struct num_param {
    const char *name;
    size_t field; /* offsetof an unsigned in dlock__conf */
    unsigned long min, max;
} num_params[] = {
    { "connect_timeout_ms", offsetof(dlock__conf, connect_timeout_ms), 1, 3600000 },
    { "command_timeout_ms", offsetof(dlock__conf, command_timeout_ms), 1, 3600000 },
    { "unreachable_ms", offsetof(dlock__conf, unreachable_ms), 1, 86400000 },
    { "drift_ms", offsetof(dlock__conf, drift_ms), 0, 60000 },
    { "restart_guard_ms", offsetof(dlock__conf, restart_guard_ms), 0, 86400000 },
    { "handoff_ms", offsetof(dlock__conf, handoff_ms), 0, 60000 },
    { "wait", offsetof(dlock__conf, wait_replicas), 0, 64 },
    { "wait_timeout_ms", offsetof(dlock__conf, wait_timeout_ms), 1, 60000 },
    { "wait_conns", offsetof(dlock__conf, wait_conns), 0, 1024 },
    { "breaker_ms", offsetof(dlock__conf, breaker_ms), 0, 86400000 },
    { "host_breaker", offsetof(dlock__conf, host_breaker), 0, 1 },
    { "pipelined", offsetof(dlock__conf, pipelined), 0, 1 },
    { "lock_delay_ms", offsetof(dlock__conf, lock_delay_ms), 0, 60000 },
};

static const struct tls_param {
    const char *name;
    size_t field; /* offsetof a char * in dlock__conf */
} tls_params[] = {
    { "tls_ca_file", offsetof(dlock__conf, tls_ca_file) },
    { "cacert", offsetof(dlock__conf, tls_ca_file) }, /* the spec's name for it */
    { "tls_cert_file", offsetof(dlock__conf, tls_cert_file) },
    { "tls_key_file", offsetof(dlock__conf, tls_key_file) },
    { "tls_server_name", offsetof(dlock__conf, tls_server_name) },
};

static int key_is(const char *k, size_t kn, const char *name) {
    return kn == strlen(name) && memcmp(k, name, kn) == 0;
}

static int set_number(dlock__conf *conf, const char *red, const struct num_param *np, const char *v, size_t vn) {
    unsigned long x;
    if (parse_uint(v, vn, np->max, &x) != 0 || x < np->min)
        return dlock__seterr(EINVAL, "URL %s: %s wants a number from %lu to %lu", red, np->name, np->min, np->max);
    *(unsigned *)(void *)((char *)conf + np->field) = (unsigned)x;
    return 0;
}

/* A file or a name for TLS: only with a rediss scheme, percent-decoded,
 * 1 to 4096 bytes; the last one given wins. */
static int set_tls_text(dlock__conf *conf, const char *red, const struct tls_param *tp, const char *v, size_t vn) {
    char **field = (char **)(void *)((char *)conf + tp->field), *p;
    int nomem;
    if (!conf->tls) return dlock__seterr(EINVAL, "URL %s: %s needs a rediss scheme (TLS)", red, tp->name);
    if ((p = pct_decode(v, vn, &nomem)) == NULL || *p == '\0' || strlen(p) > 4096) {
        free(p);
        return nomem ? dlock__seterr(ENOMEM, "out of memory") : dlock__seterr(EINVAL, "URL %s: bad %s", red, tp->name);
    }
    free(*field);
    *field = p;
    return 0;
}

static int set_tls_verify(dlock__conf *conf, const char *red, const char *v, size_t vn) {
    if (!conf->tls) return dlock__seterr(EINVAL, "URL %s: tls_verify needs a rediss scheme (TLS)", red);
    if (vn != 1 || (v[0] != '0' && v[0] != '1')) return dlock__seterr(EINVAL, "URL %s: tls_verify wants 0 or 1", red);
    conf->tls_verify = v[0] == '1';
    return 0;
}

static int set_prefix(dlock__conf *conf, const char *red, const char *v, size_t vn) {
    int nomem;
    char *p = pct_decode(v, vn, &nomem);
    if (p == NULL)
        return nomem ? dlock__seterr(ENOMEM, "out of memory") : dlock__seterr(EINVAL, "URL %s: bad prefix", red);
    if (*p == '\0') { /* refused everywhere: "empty" must not mean two things */
        free(p);
        return dlock__seterr(EINVAL, "URL %s: the prefix is empty; leave prefix= out for the default (dlock:)", red);
    }
    if (!valid_prefix(p)) {
        free(p);
        return dlock__seterr(EINVAL, "URL %s: prefix must be at most 128 bytes without braces", red);
    }
    free(conf->prefix);
    conf->prefix = p;
    return 0;
}

/* One parameter k=v of the query (neither decoded yet).  `quiet`: the
 * unknown key is not shown, since the "query" may be the end of a
 * password (misplaced_at). */
static int set_param(dlock__conf *conf, const char *red, const char *k, size_t kn, const char *v, size_t vn,
                     int quiet) {
    size_t i;
    for (i = 0; i < sizeof num_params / sizeof num_params[0]; i++)
        if (key_is(k, kn, num_params[i].name)) return set_number(conf, red, &num_params[i], v, vn);
    for (i = 0; i < sizeof tls_params / sizeof tls_params[0]; i++)
        if (key_is(k, kn, tls_params[i].name)) return set_tls_text(conf, red, &tls_params[i], v, vn);
    if (key_is(k, kn, "tls_verify")) return set_tls_verify(conf, red, v, vn);
    if (key_is(k, kn, "prefix")) return set_prefix(conf, red, v, vn);
    if (quiet) return dlock__seterr(EINVAL, "URL %s: unknown parameter", red);
    return dlock__seterr(EINVAL, "URL %s: unknown parameter '%.*s'", red, (int)(kn > 64 ? 64 : kn), k);
}

/* One host[:port] in [p, q), stopping at '/', ',' or q: fills *ep and
 * returns where it stopped, or NULL (message set). */
static const char *parse_endpoint(const dlock__conf *conf, const char *p, const char *q, int dport,
                                  dlock__endpoint *ep) {
    const char *hostend;
    if (p < q && *p == '[') {
        const char *rb = memchr(p, ']', (size_t)(q - p));
        if (rb == NULL || rb == p + 1) {
            dlock__seterr(EINVAL, "URL %s: bad IPv6 address", conf->redacted_url);
            return NULL;
        }
        if ((size_t)(rb - p - 1) >= sizeof ep->host) {
            dlock__seterr(EINVAL, "URL %s: host too long", conf->redacted_url);
            return NULL;
        }
        memcpy(ep->host, p + 1, (size_t)(rb - p - 1));
        ep->host[rb - p - 1] = '\0';
        hostend = rb + 1;
    } else {
        hostend = p;
        while (hostend < q && *hostend != ':' && *hostend != '/' && *hostend != ',') {
            unsigned char ch = (unsigned char)*hostend;
            if (!(isalnum(ch) || ch == '.' || ch == '-' || ch == '_')) {
                dlock__seterr(EINVAL, "URL %s: bad character in host", conf->redacted_url);
                return NULL;
            }
            hostend++;
        }
        if (hostend == p) {
            dlock__seterr(EINVAL, "URL %s: no host", conf->redacted_url);
            return NULL;
        }
        if ((size_t)(hostend - p) >= sizeof ep->host) {
            dlock__seterr(EINVAL, "URL %s: host too long", conf->redacted_url);
            return NULL;
        }
        memcpy(ep->host, p, (size_t)(hostend - p));
        ep->host[hostend - p] = '\0';
    }
    p = hostend;
    ep->port = dport;
    if (p < q && *p == ':') {
        const char *ps = ++p;
        unsigned long port;
        while (p < q && *p != '/' && *p != ',') p++;
        if (parse_uint(ps, (size_t)(p - ps), 65535, &port) != 0 || port == 0) {
            /* redis://user:PASSWORD with its @host forgotten lands here */
            int no_at = strchr(conf->redacted_url, '@') == NULL && p > ps && !isdigit((unsigned char)*ps);
            dlock__seterr(EINVAL, "URL %s: bad port%s", conf->redacted_url,
                          no_at ? " (a password goes before an @: redis://[USER]:PASSWORD@HOST[:PORT])" : "");
            return NULL;
        }
        ep->port = (int)port;
    }
    return p;
}

/* Redlock: the form of ep that two names of one master share, as far as
 * it can be known without asking a name server: a numeric address in its
 * canonical text (127.1 is 127.0.0.1, ::ffff:127.0.0.1 too, [0::1] is
 * ::1), a host name in lower case without a final dot; then the port.
 * (localhost and 127.0.0.1 are told apart here: the masters' run ids
 * catch those, redlock.c.) */
static void ep_norm(const dlock__endpoint *ep, char *out, size_t cap) {
    struct addrinfo hints, *ai = NULL;
    char h[sizeof ep->host];
    size_t i, n;
    memset(&hints, 0, sizeof hints);
    hints.ai_flags = AI_NUMERICHOST; /* never a lookup */
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    h[0] = '\0';
    if (getaddrinfo(ep->host, NULL, &hints, &ai) == 0 && ai != NULL) {
        if (ai->ai_family == AF_INET) {
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)ai->ai_addr)->sin_addr, h, sizeof h);
        } else if (ai->ai_family == AF_INET6) {
            const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)ai->ai_addr;
            if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
                inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], h, sizeof h);
            else if (inet_ntop(AF_INET6, &s6->sin6_addr, h, sizeof h) != NULL && s6->sin6_scope_id != 0)
                snprintf(h + strlen(h), sizeof h - strlen(h), "%%%u", (unsigned)s6->sin6_scope_id);
        }
    }
    if (ai != NULL) freeaddrinfo(ai);
    if (h[0] == '\0') {
        for (i = 0; ep->host[i] != '\0' && i + 1 < sizeof h; i++) h[i] = (char)tolower((unsigned char)ep->host[i]);
        h[i] = '\0';
        n = strlen(h);
        if (n > 1 && h[n - 1] == '.') h[n - 1] = '\0';
    }
    snprintf(out, cap, "%s|%d", h, ep->port);
}

/* Redlock: a master named twice (however written) would be counted twice
 * in every quorum.  EINVAL naming both, or 0. */
static int distinct_masters(const dlock__conf *conf) {
    size_t i, j;
    for (i = 0; i < conf->nnodes; i++) {
        char a[sizeof conf->nodes[i].host + 16];
        ep_norm(&conf->nodes[i], a, sizeof a);
        for (j = 0; j < i; j++) {
            char b[sizeof a];
            const dlock__endpoint *x = &conf->nodes[j], *y = &conf->nodes[i];
            int v6x = strchr(x->host, ':') != NULL, v6y = strchr(y->host, ':') != NULL;
            ep_norm(x, b, sizeof b);
            if (strcmp(a, b) != 0) continue;
            return dlock__seterr(EINVAL, "URL %s: masters %zu (%s%.100s%s:%d) and %zu (%s%.100s%s:%d) are the same "
                                 "server; Redlock would count it twice in a quorum: name each master once",
                                 conf->redacted_url, j + 1, v6x ? "[" : "", x->host, v6x ? "]" : "", x->port, i + 1,
                                 v6y ? "[" : "", y->host, v6y ? "]" : "", y->port);
        }
    }
    return 0;
}

/* ---- the URL, part by part -----------------------------------------------
 * What each scheme means, in one table: the backend, TLS (verified by
 * default), how many hosts it takes and their default port, and what its
 * path names (a database, or Sentinel's master then a database).  No name
 * is a prefix of another, so the order does not matter. */

typedef enum {
    URL_PATH_DB,        /* [/db] */
    URL_PATH_MASTER_DB, /* /MASTER[/db] */
} url_path;

typedef struct url_scheme {
    const char *name; /* up to and with "://" */
    dlock__backend_kind kind;
    int tls;
    size_t max_hosts; /* 1: one host, a ',' is refused; more: a list */
    int default_port;
    url_path path;
} url_scheme;

static const url_scheme schemes[] = {
    { "redis://", DLOCK__BACKEND_SINGLE, 0, 1, 6379, URL_PATH_DB },
    { "rediss://", DLOCK__BACKEND_SINGLE, 1, 1, 6379, URL_PATH_DB },
    { "redis+sentinel://", DLOCK__BACKEND_SENTINEL, 0, DLOCK__NODES_MAX, 26379, URL_PATH_MASTER_DB },
    { "rediss+sentinel://", DLOCK__BACKEND_SENTINEL, 1, DLOCK__NODES_MAX, 26379, URL_PATH_MASTER_DB },
    { "redis+cluster://", DLOCK__BACKEND_CLUSTER, 0, DLOCK__NODES_MAX, 6379, URL_PATH_DB },
    { "rediss+cluster://", DLOCK__BACKEND_CLUSTER, 1, DLOCK__NODES_MAX, 6379, URL_PATH_DB },
    { "redlock://", DLOCK__BACKEND_REDLOCK, 0, DLOCK__NODES_MAX, 6379, URL_PATH_DB },
    { "rediss+redlock://", DLOCK__BACKEND_REDLOCK, 1, DLOCK__NODES_MAX, 6379, URL_PATH_DB },
};

/* The walk through one URL, carried from phase to phase.  The bounds
 * (`q`, `at`, `colon`) are found once, before the first message needs the
 * redacted URL; `p` moves forward only. */
typedef struct url_walk {
    const char *url;          /* the whole URL, n bytes */
    const char *end;          /* url + n */
    const char *p;            /* the cursor: the first byte not yet parsed */
    const char *q;            /* the query's '?', or end */
    const char *at;           /* the userinfo's last '@' (before any '/'), or NULL */
    const char *colon;        /* the userinfo's first ':', or NULL */
    const url_scheme *scheme; /* the row of schemes[] */
} url_walk;

/* Phase 1, the scheme: its row of schemes[] sets the backend and TLS.  An
 * unknown scheme that looks like one of ours is "not supported by this
 * version" (a newer one may know it); any other is not a Redis URL. */
static int parse_scheme(dlock__conf *conf, url_walk *w) {
    const char *sep;
    size_t i;
    int sl;
    for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        const url_scheme *s = &schemes[i];
        if (strncmp(w->url, s->name, strlen(s->name)) != 0) continue;
        w->scheme = s;
        w->p = w->url + strlen(s->name);
        conf->kind = s->kind;
        conf->cluster = s->kind == DLOCK__BACKEND_CLUSTER;
        conf->tls = s->tls;
        conf->tls_verify = s->tls;
        return 0;
    }
    /* both messages name every row of schemes[]: keep them in step */
    /* Quote only what can be a scheme (RFC 3986: letters, digits, '+',
     * '-', '.'): a misspelt separator ("redis:/u:PASSWORD@h") must not
     * bring the user information into the message. */
    sep = strstr(w->url, "://");
    sl = (int)strspn(w->url, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
    if (sep == NULL || w->url + sl != sep) sep = NULL;
    if (sl > 32) sl = 32;
    if (sep && (!strncmp(w->url, "rediss", 6) || !strncmp(w->url, "redis+", 6) || !strncmp(w->url, "redlock", 7)))
        return dlock__seterr(EINVAL, "URL scheme '%.*s' is not supported by this version (only redis://, "
                             "rediss://, redis+sentinel://, rediss+sentinel://, redis+cluster://, "
                             "rediss+cluster://, redlock:// and rediss+redlock://)", sl, w->url);
    return dlock__seterr(EINVAL, "URL must start with redis://, rediss://, redis+sentinel://, rediss+sentinel://, "
                         "redis+cluster://, rediss+cluster://, redlock:// or rediss+redlock:// (scheme '%.*s' "
                         "given)", sl, w->url);
}

/* Phase 2, the shown URL, before anything else can fail with a message:
 * finds the query and the userinfo's '@' and ':', then builds
 * conf->redacted_url -- password hidden (redact), query cut, a port that
 * may be a misplaced password hidden (mask_bad_ports), and the password
 * as typed looked for once more (veil). */
static int redact_url(dlock__conf *conf, url_walk *w) {
    const char *s;
    char *rq;
    if ((w->q = memchr(w->p, '?', (size_t)(w->end - w->p))) == NULL) w->q = w->end;
    /* userinfo ends at the last '@' before the path or query */
    for (s = w->p; s < w->q && *s != '/'; s++)
        if (*s == '@') w->at = s;
    if (w->at != NULL) w->colon = memchr(w->p, ':', (size_t)(w->at - w->p));
    if ((conf->redacted_url = redact(w->url, w->p, w->at, w->colon)) == NULL)
        return dlock__seterr(ENOMEM, "out of memory");
    if ((rq = strchr(conf->redacted_url, '?')) != NULL) *rq = '\0';
    mask_bad_ports(conf->redacted_url);
    if (w->colon != NULL) veil(conf, w->colon + 1, (size_t)(w->at - w->colon - 1));
    return 0;
}

/* Phase 3, the user info [user]:password@, percent-decoded.  A user name
 * alone is refused: some clients read redis://secret@host as a password,
 * and the message does not show it. */
static int parse_userinfo(dlock__conf *conf, url_walk *w) {
    const char *uend;
    int nomem;
    if (w->at == NULL) return 0;
    if (w->colon == NULL)
        return dlock__seterr(EINVAL, "URL %s: a user name without a password (write redis://:PASSWORD@host "
                             "for a password alone)", conf->redacted_url);
    uend = w->colon;
    if (uend > w->p && (conf->user = pct_decode(w->p, (size_t)(uend - w->p), &nomem)) == NULL)
        return nomem ? dlock__seterr(ENOMEM, "out of memory")
                     : dlock__seterr(EINVAL, "URL %s: bad user name", conf->redacted_url);
    conf->password = pct_decode(w->colon + 1, (size_t)(w->at - w->colon - 1), &nomem);
    if (conf->password == NULL)
        return nomem ? dlock__seterr(ENOMEM, "out of memory")
                     : dlock__seterr(EINVAL, "URL %s: bad escape in the password", conf->redacted_url);
    veil(conf, conf->password, strlen(conf->password));
    w->p = w->at + 1;
    return 0;
}

/* Redlock: at least two masters, each named once. */
static int check_masters(const dlock__conf *conf) {
    if (conf->nnodes < 2)
        return dlock__seterr(EINVAL, "URL %s: Redlock needs at least 2 masters (better 3 or 5)", conf->redacted_url);
    return distinct_masters(conf) != 0 ? EINVAL : 0;
}

/* Phase 4, the hosts: host[:port] into conf->ep, or for a scheme that
 * takes several, h1[:p1],h2[:p2],... into conf->nodes (the first also
 * into conf->ep: Sentinel's stand-in until the sentinels are asked). */
static int parse_hosts(dlock__conf *conf, url_walk *w) {
    const url_scheme *s = w->scheme;
    if (s->max_hosts == 1) {
        if ((w->p = parse_endpoint(conf, w->p, w->q, s->default_port, &conf->ep)) == NULL) return EINVAL;
        if (w->p < w->q && *w->p == ',')
            return dlock__seterr(EINVAL, "URL %s: several hosts need redis+sentinel://, redis+cluster:// or "
                                 "redlock://", conf->redacted_url);
        return 0;
    }
    if ((conf->nodes = calloc(s->max_hosts, sizeof *conf->nodes)) == NULL)
        return dlock__seterr(ENOMEM, "out of memory");
    for (;;) {
        if (conf->nnodes == s->max_hosts)
            return dlock__seterr(EINVAL, "URL %s: more than %d hosts", conf->redacted_url, (int)s->max_hosts);
        if ((w->p = parse_endpoint(conf, w->p, w->q, s->default_port, &conf->nodes[conf->nnodes])) == NULL)
            return EINVAL;
        conf->nnodes++;
        if (w->p >= w->q || *w->p != ',') break;
        w->p++;
    }
    conf->ep = conf->nodes[0];
    return s->kind == DLOCK__BACKEND_REDLOCK ? check_masters(conf) : 0;
}

/* Sentinel's /MASTER: 1 to 128 of [A-Za-z0-9._-]. */
static int parse_master(dlock__conf *conf, url_walk *w) {
    const char *ms;
    size_t n;
    if (w->p >= w->q || *w->p != '/')
        return dlock__seterr(EINVAL, "URL %s: no master name (redis+sentinel://h:p,.../MASTER)", conf->redacted_url);
    for (ms = ++w->p; w->p < w->q && *w->p != '/'; w->p++) {
        unsigned char ch = (unsigned char)*w->p;
        if (!(isalnum(ch) || ch == '.' || ch == '-' || ch == '_'))
            return dlock__seterr(EINVAL, "URL %s: bad character in the master name", conf->redacted_url);
    }
    n = (size_t)(w->p - ms);
    if (n == 0 || n > 128)
        return dlock__seterr(EINVAL, "URL %s: the master name must have 1 to 128 characters", conf->redacted_url);
    if ((conf->master = malloc(n + 1)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    memcpy(conf->master, ms, n);
    conf->master[n] = '\0';
    return 0;
}

/* Phase 5, the path: /MASTER first if the scheme has one, then [/db]
 * (an empty one is 0); nothing may follow it but the query. */
static int parse_path(dlock__conf *conf, url_walk *w) {
    int rc;
    if (w->scheme->path == URL_PATH_MASTER_DB && (rc = parse_master(conf, w)) != 0) return rc;
    if (w->p < w->q && *w->p == '/') {
        const char *ds = ++w->p;
        unsigned long db = 0;
        if (w->q > ds && parse_uint(ds, (size_t)(w->q - ds), 1000000, &db) != 0)
            return dlock__seterr(EINVAL, "URL %s: bad database number", conf->redacted_url);
        conf->db = (int)db;
        w->p = w->q;
    }
    if (w->p != w->q) return dlock__seterr(EINVAL, "URL %s: unexpected text after the host", conf->redacted_url);
    return 0;
}

/* Phase 6, the query: ?k=v&k=v..., each through set_param, in order (a
 * key given twice: the last wins). */
static int parse_query(dlock__conf *conf, url_walk *w) {
    const char *s;
    int quiet = misplaced_at(w->url);
    if (w->q == w->end) return 0;
    for (s = w->q + 1; s < w->end;) {
        const char *amp = memchr(s, '&', (size_t)(w->end - s)), *eq;
        int rc;
        if (amp == NULL) amp = w->end;
        if ((eq = memchr(s, '=', (size_t)(amp - s))) == NULL)
            return dlock__seterr(EINVAL, "URL %s: query parameter without '='", conf->redacted_url);
        rc = set_param(conf, conf->redacted_url, s, (size_t)(eq - s), eq + 1, (size_t)(amp - eq - 1), quiet);
        if (rc != 0) return rc;
        s = amp + 1;
    }
    return 0;
}

/* Last, what only the parts together can tell. */
static int check_conf(dlock__conf *conf) {
    if (conf->wait_timeout_ms == 0) conf->wait_timeout_ms = conf->command_timeout_ms;
    if (conf->kind == DLOCK__BACKEND_CLUSTER && conf->db != 0)
        return dlock__seterr(EINVAL, "URL %s: a Redis Cluster has database 0 only", conf->redacted_url);
    if (conf->kind == DLOCK__BACKEND_REDLOCK && conf->wait_replicas > 0)
        return dlock__seterr(EINVAL, "URL %s: wait= is for a master with replicas, not for Redlock's independent "
                             "masters", conf->redacted_url);
    if ((conf->tls_cert_file == NULL) != (conf->tls_key_file == NULL))
        return dlock__seterr(EINVAL, "URL %s: tls_cert_file and tls_key_file go together", conf->redacted_url);
    return 0;
}

/* The URL into conf (already holding the defaults): one walk from left to
 * right, one phase per part, as redis-cli's parseRedisUri. */
static int parse_url(dlock__conf *conf, const char *url) {
    url_walk w;
    size_t n = strnlen(url, URL_MAX + 1);
    int rc;
    if (n == 0 || n > URL_MAX) return dlock__seterr(EINVAL, "URL is empty or longer than %d bytes", URL_MAX);
    memset(&w, 0, sizeof w);
    w.url = url;
    w.end = url + n;
    if ((rc = parse_scheme(conf, &w)) != 0) return rc;    /* scheme:// */
    if ((rc = redact_url(conf, &w)) != 0) return rc;      /* (the form messages show) */
    if ((rc = parse_userinfo(conf, &w)) != 0) return rc;  /* [user]:password@ */
    if ((rc = parse_hosts(conf, &w)) != 0) return rc;     /* host[:port][,host[:port]...] */
    if ((rc = parse_path(conf, &w)) != 0) return rc;      /* [/MASTER][/db] */
    if ((rc = parse_query(conf, &w)) != 0) return rc;     /* [?param=value&...] */
    return check_conf(conf);
}

int dlock__conf_parse(dlock__conf *conf, const dlock_config_t *cfg) {
    const char *url = cfg ? cfg->url : NULL;
    const char *prefix = cfg ? cfg->prefix : NULL;
    int rc;

    memset(conf, 0, sizeof *conf);
    conf->kind = DLOCK__BACKEND_SINGLE;
    if (url != NULL && *url == '\0') {
        rc = dlock__seterr(EINVAL, "URL is empty");
        goto fail;
    }
    if (url == NULL) url = secure_getenv("DLOCK_URL"); /* an empty variable counts as unset */
    if (url == NULL || *url == '\0') url = DEFAULT_URL;
    if (prefix != NULL && *prefix == '\0') {
        rc = dlock__seterr(EINVAL, "the key prefix is empty; leave it unset for the default (dlock:)");
        goto fail;
    }
    if (prefix == NULL && (prefix = secure_getenv("DLOCK_PREFIX")) != NULL && *prefix == '\0') {
        rc = dlock__seterr(EINVAL, "DLOCK_PREFIX is set but empty; unset it for the default prefix (dlock:)");
        goto fail;
    }
    if (prefix == NULL) prefix = DEFAULT_PREFIX;
    if (!valid_prefix(prefix)) {
        rc = dlock__seterr(EINVAL, "key prefix must be at most 128 bytes without braces");
        goto fail;
    }
    if ((conf->prefix = strdup(prefix)) == NULL) {
        rc = dlock__seterr(ENOMEM, "out of memory");
        goto fail;
    }
    conf->connect_timeout_ms = cfg && cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 1000;
    conf->command_timeout_ms = cfg && cfg->command_timeout_ms ? cfg->command_timeout_ms : 2000;
    conf->unreachable_ms = cfg && cfg->unreachable_ms ? cfg->unreachable_ms : 5000;
    conf->drift_ms = cfg ? cfg->drift_ms : 0;
    conf->restart_guard_ms = cfg ? cfg->restart_guard_ms : 0;
    conf->handoff_ms = !cfg || cfg->handoff_ms == 0 ? 5 : cfg->handoff_ms < 0 ? 0 : (unsigned)cfg->handoff_ms;
    conf->wait_conns = DLOCK__WAIT_CONNS;
    conf->breaker_ms = cfg ? cfg->breaker_ms : 0;
    conf->host_breaker = 1;
    if ((rc = parse_url(conf, url)) != 0) {
        if (rc == EINVAL && misplaced_at(url)) {
            char saved[512];
            const char *m = dlock_last_error();
            snprintf(saved, sizeof saved, "%s", strncmp(m, "EINVAL: ", 8) == 0 ? m + 8 : m);
            dlock__seterr(EINVAL, "%s (a '/' or '?' in the user name or password must be percent-encoded: "
                          "%%2F, %%3F)", saved);
        }
        goto fail;
    }
    return 0;
fail:
    dlock__conf_free(conf);
    return rc;
}

static int dup_or_null(char **dst, const char *src) {
    *dst = NULL;
    return src != NULL && (*dst = strdup(src)) == NULL ? -1 : 0;
}

int dlock__conf_member(dlock__conf *dst, const dlock__conf *src, const dlock__endpoint *ep) {
    size_t n = strlen(src->redacted_url) + strlen(ep->host) + 32;
    *dst = *src;
    dst->kind = DLOCK__BACKEND_SINGLE;
    dst->ep = *ep;
    dst->nodes = NULL;
    dst->nnodes = 0;
    dst->master = NULL;
    dst->redacted_url = malloc(n);
    if (dst->redacted_url != NULL) snprintf(dst->redacted_url, n, "%s [%s %s:%d]", src->redacted_url,
                                          src->kind == DLOCK__BACKEND_CLUSTER ? "node" : "master", ep->host, ep->port);
    if (dst->redacted_url == NULL || dup_or_null(&dst->user, src->user) || dup_or_null(&dst->password, src->password) ||
        dup_or_null(&dst->prefix, src->prefix) || dup_or_null(&dst->tls_ca_file, src->tls_ca_file) ||
        dup_or_null(&dst->tls_cert_file, src->tls_cert_file) || dup_or_null(&dst->tls_key_file, src->tls_key_file) ||
        dup_or_null(&dst->tls_server_name, src->tls_server_name)) {
        dlock__conf_free(dst);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    return 0;
}

void dlock__conf_free(dlock__conf *conf) {
    free(conf->user);
    if (conf->password) {
        memset(conf->password, 0, strlen(conf->password));
        free(conf->password);
    }
    free(conf->prefix);
    free(conf->redacted_url);
    free(conf->nodes);
    free(conf->master);
    free(conf->tls_ca_file);
    free(conf->tls_cert_file);
    free(conf->tls_key_file);
    free(conf->tls_server_name);
    memset(conf, 0, sizeof *conf);
}

/* A lock name: 1..DLOCK_NAME_MAX bytes. */
int dlock__check_name(const char *name, size_t *len) {
    size_t n;
    if (name == NULL) return dlock__seterr(EINVAL, "lock name is NULL");
    n = strnlen(name, DLOCK_NAME_MAX + 1);
    if (n == 0) return dlock__seterr(EINVAL, "lock name is empty");
    if (n > DLOCK_NAME_MAX) return dlock__seterr(EINVAL, "lock name is longer than %d bytes", DLOCK_NAME_MAX);
    *len = n;
    return 0;
}

/* The clock-drift margin taken off a lease: the configured one, or 2 ms
 * plus 1% of the lease; never more than half the lease, so that a hold
 * is valid for a while at all (a margin as long as the lease would make
 * every hold invalid the moment it is taken). */
unsigned dlock__drift_ms(const dlock__conf *conf, unsigned lease_ms) {
    unsigned d = conf->drift_ms ? conf->drift_ms : 2 + lease_ms / 100;
    return d > lease_ms / 2 ? lease_ms / 2 : d;
}
