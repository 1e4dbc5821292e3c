/* main.c -- the dlock command: dispatch to the subcommands, the options they
 * share (--url, --prefix), the connection, and errors and exit codes.
 *
 *     dlock [--url URL] [--prefix P] exec [-n] [-w SECONDS] [-s] [-E CODE] NAME -- CMD...
 *     dlock [--url URL] status [--json] NAME
 *     dlock [--url URL] list [--json] [GLOB]
 *     dlock [--url URL] break [--force] [--reset] [--json] NAME
 *     dlock [--url URL] top [--once [--json | --prometheus]] [--window S] [-n MAX]
 *     dlock [--url URL] graph [--json | --dot] [GLOB]
 *     dlock [--url URL] exporter [--listen ADDR:PORT] [--locks GLOB] [--max-locks N] ...
 *
 * Passwords never appear in what it prints: every message about the
 * server names it by the library's redacted URL (dlock_last_error()), and
 * the command never echoes the URL it was given.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "cli.h"

const char *cli_prog = "dlock";

void cli_msg(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", cli_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", cli_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", cli_prog);
    return CLI_EXIT_USAGE;
}

void *cli_grow(void *v, size_t n, size_t *cap, size_t size, size_t first) {
    size_t ncap = *cap ? *cap * 2 : first;
    void *nv;
    if (n < *cap) return v;
    if ((nv = realloc(v, ncap * size)) != NULL) *cap = ncap;
    return nv;
}

int cli_exit_for(int err) {
    switch (err) {
    case 0:
        return 0;
    case EINVAL:
    case ENAMETOOLONG:
        return CLI_EXIT_USAGE;
    case ENOLCK:
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EACCES:
        return CLI_EXIT_UNAVAILABLE;
    default:
        return CLI_EXIT_SOFTWARE;
    }
}

const char *cli_err_detail(int err) {
    const char *detail = dlock_last_error(), *ename = dlock_err_name(err);
    size_t k = strlen(ename);
    /* The detail starts with the error's name ("ENOLCK: ..."): the
     * caller says what that means instead. */
    if (detail != NULL && strncmp(detail, ename, k) == 0 && detail[k] == ':' && detail[k + 1] == ' ')
        detail += k + 2;
    return detail != NULL && *detail != '\0' ? detail : NULL;
}

int cli_fail(const char *what, int err) {
    const char *detail = cli_err_detail(err);
    if (detail != NULL)
        cli_msg("%s: %s: %s", what, dlock_strerror(err), detail);
    else
        cli_msg("%s: %s", what, dlock_strerror(err));
    return cli_exit_for(err);
}

int cli_client(const cli_conn *conn, unsigned unreachable_ms, dlock_client_t **out) {
    return cli_client_breaker(conn, unreachable_ms, 0, out);
}

/* OpenSSL's own set-up, before the first client (whose random source is
 * OpenSSL's first use).  OpenSSL frees all of its state at exit (half a
 * million instructions, a tenth of a millisecond of every `dlock exec`),
 * for leak checkers' sake: a program of its own has no need to, and its
 * state stays reachable from OpenSSL's globals.  For a plain redis://
 * server OpenSSL serves the tokens' random source alone (a library
 * context of its own, a HASH-DRBG), so the command leaves out what only
 * TLS could want, all of it on the way to the first token: the
 * configuration file (openssl.cnf, 0.7 million instructions), the error
 * strings (1 million) and the legacy cipher and digest tables, which
 * OpenSSL's first fetch copies name by name (2 million).  A TLS probe of
 * a server that turns out to want TLS still works without them: libssl
 * fetches what it needs from the providers, under their own names. */
void cli_openssl_init(const cli_conn *conn) {
    const char *url = conn->url != NULL ? conn->url : secure_getenv("DLOCK_URL");
    uint64_t opts = OPENSSL_INIT_NO_ATEXIT;
    /* (Again for each client: OpenSSL does its set-up once, the first
     * call's way, and answers later calls at once.) */
#ifdef DLOCK_CLI_STATIC_CRYPTO
    /* This libcrypto is the command's own copy, for the tokens alone: TLS
     * runs on the shared libssl and its libcrypto (src/net/tls.c), which
     * set themselves up. */
    url = NULL;
#endif
    if (url == NULL || strncmp(url, "rediss", 6) != 0)
        opts |= OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS | OPENSSL_INIT_NO_ADD_ALL_CIPHERS |
                OPENSSL_INIT_NO_ADD_ALL_DIGESTS;
    OPENSSL_init_crypto(opts, NULL);
}

int cli_client_breaker(const cli_conn *conn, unsigned unreachable_ms, unsigned breaker_ms, dlock_client_t **out) {
    dlock_config_t cfg;
    int rc;
    cli_openssl_init(conn);
    dlock_config_init(&cfg);
    cfg.url = conn->url;
    cfg.prefix = conn->prefix;
    cfg.unreachable_ms = unreachable_ms;
    cfg.breaker_ms = breaker_ms;
    if ((rc = dlock_client_create(out, &cfg)) != 0) {
        if (rc == EINVAL) return cli_usage_error("bad server configuration: %s", dlock_last_error());
        return cli_fail("cannot make a client", rc);
    }
    return 0;
}

int cli_conn_opt(int opt, const char *arg, cli_conn *conn) {
    if (opt == CLI_OPT_URL) {
        conn->url = arg;
        return 1;
    }
    if (opt == CLI_OPT_PREFIX) {
        conn->prefix = arg;
        return 1;
    }
    if (opt == 'V') {
        printf("dlock %s\n", DLOCK_VERSION_STRING);
        fflush(stdout);
        exit(0);
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "Usage:\n"
            "  dlock [--url URL] exec [-n] [-w SECONDS] [-s] [-E CODE] NAME [--] CMD [ARG...]\n"
            "  dlock [--url URL] exec [options] NAME -c 'SHELL COMMAND'\n"
            "  dlock [--url URL] status [--json] NAME\n"
            "  dlock [--url URL] list [--json] [GLOB]\n"
            "  dlock [--url URL] break [--force] [--reset | --sem | --unlink | --ranges [--owner OWNER]]\n"
            "                         [--json] NAME\n"
            "  dlock [--url URL] graph [--json | --dot] [GLOB]\n"
            "  dlock [--url URL] top [--once [--json | --prometheus]] [--window S] [-n MAX]\n"
            "  dlock [--url URL] exporter [--listen ADDR:PORT] [--locks GLOB] [--max-locks N]\n"
            "\n"
            "Cluster-wide locks on Redis, in the manner of flock(1).\n"
            "\n"
            "Commands:\n"
            "  exec    run CMD while holding the lock NAME (released when CMD ends)\n"
            "  status  who holds NAME, since when, its lease, fence and waiters;\n"
            "          the semaphore NAME's value, waiters and leased units; the file\n"
            "          NAME's record locks (byte ranges)\n"
            "  list    every held lock, every semaphore and every record-lock table\n"
            "          whose name matches GLOB (default: all)\n"
            "  break   administrative reset of NAME, whoever holds it (--sem, --unlink:\n"
            "          the semaphore NAME; --ranges: the file NAME's record locks)\n"
            "  graph   who waits for which lock held by whom, cycles marked\n"
            "  top     the busiest locks, live: acquisitions, wait and hold times, holder\n"
            "  exporter  serve the locks' figures to Prometheus at /metrics\n"
            "\n"
            "Options for every command:\n"
            "  --url URL      the server (default: $DLOCK_URL, else redis://127.0.0.1:6379)\n"
            "  --prefix P     the key prefix (default: $DLOCK_PREFIX, else dlock:)\n"
            "  -h, --help     this help; 'dlock COMMAND --help' for a command's options\n"
            "  -V, --version  the version\n"
            "\n"
            "Exit codes: exec exits with CMD's status (128+N if signal N killed it);\n"
            "1 busy or timed out (-n, -w; -E changes it), 64 bad arguments,\n"
            "69 server unreachable, 70 unexpected error, 71 system error,\n"
            "75 the lock was lost while CMD ran (--lost-exit-code changes it),\n"
            "126 CMD cannot be run, 127 CMD not found.  See dlock(1).\n");
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        CLI_CONN_LONGOPTS,
        { "help", 0, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    static const struct {
        const char *name;
        int (*fn)(int, char **, cli_conn *);
        const char *prog;
    } cmds[] = {
        { "exec", cli_exec, "dlock exec" },
        { "status", cli_status, "dlock status" },
        { "list", cli_list, "dlock list" },
        { "break", cli_break, "dlock break" },
        { "graph", cli_graph, "dlock graph" },
        { "top", cli_top, "dlock top" },
        { "exporter", cli_exporter, "dlock exporter" },
    };
    cli_conn conn = { NULL, NULL };
    size_t i;
    int opt;

    /* The options before the command: stop at the first non-option. */
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+hV", longopts, NULL)) != -1) {
        if (cli_conn_opt(opt, optarg, &conn)) continue;
        switch (opt) {
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("dlock %s\n", DLOCK_VERSION_STRING);
            return 0;
        default:
            if (optopt != 0 && optopt < 0x1000)
                return cli_usage_error("unknown option '-%c'", optopt);
            return cli_usage_error("unknown option or missing argument '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[optind], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[optind], "version") == 0) {
        printf("dlock %s\n", DLOCK_VERSION_STRING);
        return 0;
    }
    for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[optind], cmds[i].name) == 0) {
            int k = optind;
            cli_prog = cmds[i].prog;
            optind = 0; /* glibc: start afresh for the subcommand's own getopt */
            return cmds[i].fn(argc - k, argv + k, &conn);
        }
    }
    return cli_usage_error("unknown command '%s'", argv[optind]);
}
