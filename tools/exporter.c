/* exporter.c -- `dlock exporter`: serves the locks' figures at /metrics in
 * the Prometheus text format, for Prometheus to scrape.
 *
 *     dlock exporter [--listen ADDR:PORT] [--locks GLOB] [--max-locks N]
 *                    [--window SECONDS] [--scrape-timeout DURATION]
 *
 * HTTP is libmicrohttpd's: its own threads poll the connections, so a
 * client that sends garbage gets a 400 and one that sends a byte a minute
 * is dropped after the connection timeout, while the others are served;
 * one address may hold 16 connections at once, so that a client opening
 * many (slowloris) cannot keep the scraper out.
 * Each scrape reads the server afresh (metrics.c, the code path of `dlock
 * top --once --prometheus`), one at a time under a mutex, within the
 * scrape timeout: the client's connect, command and unreachable bounds
 * are set from it, so a dead or stuck server is `dlock_up 0` in bounded
 * time, never a hung scrape.  It stops on SIGINT or SIGTERM.
 *
 * libmicrohttpd (and GnuTLS, which it pulls in) is loaded with dlopen when
 * the exporter starts, not linked: loading and initialising them costs
 * every run of the program several milliseconds, and `dlock exec` runs
 * once per job.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "cli.h"

#define EXP_DEFAULT_LISTEN "127.0.0.1:9638"
#define EXP_MAX_LOCKS 1000 /* dlock_stats reads 1000 locks at most; and 1000 names are 40 000 series */
#define EXP_CONN_TIMEOUT_S 10 /* an idle or trickling HTTP connection is closed after this */
#define EXP_CONN_LIMIT 256   /* connections at once */
#define EXP_CONN_PER_IP 16   /* from one address: one client cannot take them all */
#ifndef DLOCK_MHD_SONAME
#define DLOCK_MHD_SONAME "libmicrohttpd.so.12" /* (the build sets it from the library it found) */
#endif

/* The libmicrohttpd calls the exporter makes, found by mhd_load. */
static struct {
    struct MHD_Daemon *(*start_daemon)(unsigned, uint16_t, MHD_AcceptPolicyCallback, void *, MHD_AccessHandlerCallback,
                                       void *, ...);
    void (*stop_daemon)(struct MHD_Daemon *);
    struct MHD_Response *(*response_from_buffer)(size_t, void *, enum MHD_ResponseMemoryMode);
    enum MHD_Result (*add_header)(struct MHD_Response *, const char *, const char *);
    enum MHD_Result (*queue_response)(struct MHD_Connection *, unsigned int, struct MHD_Response *);
    void (*destroy_response)(struct MHD_Response *);
} mhd;

/* Loads libmicrohttpd (kept loaded: its threads run until the exit):
 * 0, or the exit code of the message it printed. */
static int mhd_load(void) {
    void *h = dlopen(DLOCK_MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        cli_msg("cannot load %s, which serves HTTP (Debian: libmicrohttpd12): %s", DLOCK_MHD_SONAME, dlerror());
        return CLI_EXIT_UNAVAILABLE;
    }
    *(void **)&mhd.start_daemon = dlsym(h, "MHD_start_daemon");
    *(void **)&mhd.stop_daemon = dlsym(h, "MHD_stop_daemon");
    *(void **)&mhd.response_from_buffer = dlsym(h, "MHD_create_response_from_buffer");
    *(void **)&mhd.add_header = dlsym(h, "MHD_add_response_header");
    *(void **)&mhd.queue_response = dlsym(h, "MHD_queue_response");
    *(void **)&mhd.destroy_response = dlsym(h, "MHD_destroy_response");
    if (mhd.start_daemon == NULL || mhd.stop_daemon == NULL || mhd.response_from_buffer == NULL ||
        mhd.add_header == NULL || mhd.queue_response == NULL || mhd.destroy_response == NULL) {
        cli_msg("%s lacks a function the exporter calls", DLOCK_MHD_SONAME);
        return CLI_EXIT_UNAVAILABLE;
    }
    return 0;
}

typedef struct exp_opts {
    const char *listen;
    cli_metrics_opts m;
} exp_opts;

/* What the request handler shares, under mu: one scrape at a time, so
 * that a burst of scrapes costs the lock server one read each, in turn. */
typedef struct exp_state {
    pthread_mutex_t mu;
    dlock_client_t *client;
    cli_metrics_opts m;
    unsigned long long scrapes;
} exp_state;

static int usage_exporter(void) {
    printf("Usage: dlock exporter [--listen ADDR:PORT] [--locks GLOB] [--max-locks N]\n"
           "                      [--window SECONDS] [--scrape-timeout DURATION] [--url URL]\n"
           "Serves the locks' figures at http://ADDR:PORT/metrics in the Prometheus text\n"
           "format (default %s), until SIGINT or SIGTERM.  --locks: only the locks\n"
           "whose name matches GLOB; --max-locks: at most N locks get a label (default\n"
           "100, at most %d); --window: the seconds of figures summed (1-%d, default %d);\n"
           "--scrape-timeout: a scrape's bound on the lock server (default 3s).\n",
           EXP_DEFAULT_LISTEN, EXP_MAX_LOCKS, DLOCK_STATS_WINDOW_MAX, DLOCK_STATS_WINDOW_MAX);
    return -1;
}

/* A whole number from lo to hi, or -1. */
static long whole(const char *s, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    return *s != '\0' && *end == '\0' && v >= lo && v <= hi ? v : -1;
}

/* One option of the exporter's own: 0, or the exit code of a usage error. */
static int exp_opt(int opt, const char *arg, exp_opts *o) {
    long v;
    int64_t ms;
    switch (opt) {
    case 'l': o->listen = arg; return 0;
    case 'g': o->m.glob = arg; return 0;
    case 'n':
        if ((v = whole(arg, 1, EXP_MAX_LOCKS)) < 0)
            return cli_usage_error("--max-locks is a whole number from 1 to %d", EXP_MAX_LOCKS);
        o->m.max = (unsigned)v;
        return 0;
    case 'w':
        if ((v = whole(arg, 1, DLOCK_STATS_WINDOW_MAX)) < 0)
            return cli_usage_error("--window is a whole number from 1 to %d", DLOCK_STATS_WINDOW_MAX);
        o->m.window_s = (unsigned)v;
        return 0;
    default: /* 't' */
        if (cli_parse_duration(arg, &ms) != 0 || ms < 100 || ms > 60000)
            return cli_usage_error("--scrape-timeout is a duration from 100ms to 60s, e.g. 3s");
        o->m.budget_ms = ms;
        return 0;
    }
}

static int parse_exporter(int argc, char **argv, cli_conn *conn, exp_opts *o) {
    static const struct option longopts[] = {
        CLI_CONN_LONGOPTS,
        { "listen", 1, NULL, 'l' },
        { "locks", 1, NULL, 'g' },
        { "max-locks", 1, NULL, 'n' },
        { "window", 1, NULL, 'w' },
        { "scrape-timeout", 1, NULL, 't' },
        { "help", 0, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int opt, rc;
    memset(o, 0, sizeof *o);
    o->listen = EXP_DEFAULT_LISTEN;
    o->m.window_s = DLOCK_STATS_WINDOW_MAX;
    o->m.max = 100;
    o->m.budget_ms = 3000;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        if (cli_conn_opt(opt, optarg, conn)) continue;
        if (opt == 'h') return usage_exporter();
        if (opt == '?' || opt == ':') {
            if (optopt != 0 && optopt < 0x1000) return cli_usage_error("unknown option '-%c'", optopt);
            return cli_usage_error("unknown option or missing argument '%s'", argv[optind - 1]);
        }
        if ((rc = exp_opt(opt, optarg, o)) != 0) return rc;
    }
    if (optind < argc) return cli_usage_error("unexpected argument '%s'", argv[optind]);
    return 0;
}

/* ADDR:PORT ("127.0.0.1:9638", "[::1]:9638", "localhost:9638") as a
 * socket address: 0, or the exit code of a usage error. */
static int listen_addr(const char *spec, struct sockaddr_storage *sa, int *ipv6) {
    char host[256];
    const char *colon = strrchr(spec, ':'), *h = spec;
    size_t hn;
    struct addrinfo hints, *ai = NULL;
    int rc;
    if (colon == NULL || whole(colon + 1, 1, 65535) < 0)
        return cli_usage_error("--listen wants ADDR:PORT (a port from 1 to 65535), not '%s'", spec);
    hn = (size_t)(colon - spec);
    if (hn >= 2 && spec[0] == '[' && spec[hn - 1] == ']') h++, hn -= 2;
    if (hn == 0 || hn >= sizeof host) return cli_usage_error("--listen wants ADDR:PORT, not '%s'", spec);
    memcpy(host, h, hn);
    host[hn] = '\0';
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if ((rc = getaddrinfo(host, colon + 1, &hints, &ai)) != 0)
        return cli_usage_error("--listen: cannot resolve '%s': %s", host, gai_strerror(rc));
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *ipv6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    return 0;
}

/* ------------------------------------------------------------ HTTP */

static enum MHD_Result http_reply(struct MHD_Connection *conn, unsigned status, char *body, size_t len,
                                  const char *type) {
    struct MHD_Response *r = mhd.response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    enum MHD_Result ret;
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    mhd.add_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) mhd.add_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    ret = mhd.queue_response(conn, status, r);
    mhd.destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *text) {
    char *body = strdup(text);
    if (body == NULL) return MHD_NO;
    return http_reply(conn, status, body, strlen(body), "text/plain; charset=utf-8");
}

/* One scrape: the metrics into a malloc'ed buffer (NULL: out of memory). */
static char *scrape(exp_state *st, size_t *len) {
    cli_metrics m;
    char *buf = NULL;
    FILE *f;
    pthread_mutex_lock(&st->mu);
    if ((f = open_memstream(&buf, len)) != NULL && cli_metrics_read(st->client, &st->m, &m) == 0) {
        cli_metrics_write(f, &st->m, &m);
        cli_metrics_free(&m);
        fprintf(f, "# HELP dlock_exporter_scrapes_total Scrapes this exporter has answered.\n"
                   "# TYPE dlock_exporter_scrapes_total counter\ndlock_exporter_scrapes_total %llu\n",
                ++st->scrapes);
    }
    if (f != NULL && (fclose(f) != 0 || *len == 0)) {
        free(buf);
        buf = NULL;
    }
    pthread_mutex_unlock(&st->mu);
    return buf;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    exp_state *st = cls;
    char *body;
    size_t len = 0;
    (void)version;
    (void)upload_data;
    (void)con_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        *upload_data_size = 0; /* its body, if any, is not read */
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    if (strcmp(url, "/") == 0)
        return reply_text(conn, MHD_HTTP_OK, "dlock exporter: the figures are at /metrics\n");
    if (strcmp(url, "/metrics") != 0) return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");
    if ((body = scrape(st, &len)) == NULL)
        return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    return http_reply(conn, MHD_HTTP_OK, body, len, "text/plain; version=0.0.4; charset=utf-8");
}

/* ------------------------------------------------------------ running */

/* A client whose every bound derives from the scrape timeout: half of it
 * for one command or for finding the server unreachable. */
static int exp_client(const cli_conn *conn, int64_t budget_ms, dlock_client_t **out) {
    dlock_config_t cfg;
    int rc;
    cli_openssl_init(conn);
    dlock_config_init(&cfg);
    cfg.url = conn->url;
    cfg.prefix = conn->prefix;
    cfg.connect_timeout_ms = (unsigned)(budget_ms / 4 > 50 ? budget_ms / 4 : 50);
    cfg.command_timeout_ms = (unsigned)(budget_ms / 2);
    cfg.unreachable_ms = (unsigned)(budget_ms / 2);
    if ((rc = dlock_client_create(out, &cfg)) != 0) {
        if (rc == EINVAL) return cli_usage_error("bad server configuration: %s", dlock_last_error());
        return cli_fail("cannot make a client", rc);
    }
    return 0;
}

static struct MHD_Daemon *exp_start(struct sockaddr_storage *sa, int ipv6, exp_state *st) {
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | (ipv6 ? MHD_USE_IPv6 : 0);
    return mhd.start_daemon(flags, 0, NULL, NULL, on_request, st, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)sa,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)2, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)EXP_CONN_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT, (unsigned)EXP_CONN_LIMIT,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)EXP_CONN_PER_IP, MHD_OPTION_END);
}

int cli_exporter(int argc, char **argv, cli_conn *conn) {
    struct sockaddr_storage sa;
    struct MHD_Daemon *d;
    exp_state st;
    exp_opts o;
    sigset_t set;
    int rc, sig = 0, ipv6 = 0;
    if ((rc = parse_exporter(argc, argv, conn, &o)) != 0) return rc < 0 ? 0 : rc;
    if ((rc = listen_addr(o.listen, &sa, &ipv6)) != 0) return rc;
    if ((rc = mhd_load()) != 0) return rc;
    memset(&st, 0, sizeof st);
    st.m = o.m;
    if ((rc = exp_client(conn, o.m.budget_ms, &st.client)) != 0) return rc;
    pthread_mutex_init(&st.mu, NULL);
    /* Blocked before the HTTP threads start, so that they inherit it and
     * only sigwait below takes the signals. */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    if ((d = exp_start(&sa, ipv6, &st)) == NULL) {
        cli_msg("cannot listen on %s (in use, or not an address of this host?)", o.listen);
        rc = CLI_EXIT_UNAVAILABLE;
    } else {
        cli_msg("serving http://%s/metrics", o.listen);
        sigdelset(&set, SIGPIPE);
        while (sigwait(&set, &sig) != 0 || (sig != SIGINT && sig != SIGTERM))
            ;
        mhd.stop_daemon(d);
    }
    (void)dlock_client_destroy(st.client);
    pthread_mutex_destroy(&st.mu);
    return rc;
}
