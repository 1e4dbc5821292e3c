/* top.c -- `dlock top`: the busiest locks, live, from every client's
 * figures.
 *
 *     dlock top [--window SECONDS] [-n MAX]            live, refreshed each second
 *     dlock top --once [--json | --prometheus] [...]   one snapshot
 *
 * The figures are what every client flushed (dlock_stats: acquisitions,
 * wait and hold percentiles over the window); the holder and the waiting
 * writers of each lock shown come from dlock_lock_info, one round trip
 * per lock.  The live view draws on the terminal's alternate screen with
 * its input unbuffered and unechoed, and puts the terminal back as it
 * found it when it quits: on q, Ctrl-C (SIGINT), SIGTERM or SIGHUP.
 * --prometheus prints what `dlock exporter` serves, by its code path
 * (metrics.c).
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define TOP_MAX 200

typedef struct top_opts {
    int once, json, prometheus;
    unsigned window_s; /* 0: the default (10 live, 60 once) */
    unsigned max;
} top_opts;

/* One lock as shown: its figures and what the server says of it now. */
typedef struct top_row {
    dlock_lock_stats_t s;
    dlock_lock_info_t info;
    int info_ok;
} top_row;

static int usage_top(void) {
    printf("Usage: dlock top [--once [--json | --prometheus]] [--window SECONDS] [-n MAX] [--url URL]\n"
           "The busiest locks by acquisitions, from the figures every client flushes once a\n"
           "second: acquisitions (and per second), wait p50/p99 (from the lock call to the\n"
           "hold), hold p50, the holder and the writers waiting.  Live, refreshed each\n"
           "second, until q or Ctrl-C; --once prints one snapshot, --json as JSON,\n"
           "--prometheus in the Prometheus text format.  --window: the seconds summed\n"
           "(1-%d; default 10 live, 60 with --once).  -n: at most MAX locks (default 20).\n",
           DLOCK_STATS_WINDOW_MAX);
    return -1;
}

static int parse_top(int argc, char **argv, cli_conn *conn, top_opts *o) {
    static const struct option longopts[] = {
        CLI_CONN_LONGOPTS,
        { "once", 0, NULL, '1' },
        { "json", 0, NULL, 'j' },
        { "prometheus", 0, NULL, 'p' },
        { "window", 1, NULL, 'w' },
        { "max", 1, NULL, 'n' },
        { "help", 0, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    char *end;
    long v;
    int opt;
    memset(o, 0, sizeof *o);
    o->max = 20;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "1jpw:n:hV", longopts, NULL)) != -1) {
        if (cli_conn_opt(opt, optarg, conn)) continue;
        switch (opt) {
        case '1': o->once = 1; break;
        case 'j': o->json = 1; break;
        case 'p': o->prometheus = 1; break;
        case 'w':
        case 'n':
            v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v < 1 || v > (opt == 'w' ? DLOCK_STATS_WINDOW_MAX : TOP_MAX))
                return cli_usage_error("%s is a whole number from 1 to %d", opt == 'w' ? "--window" : "-n",
                                       opt == 'w' ? DLOCK_STATS_WINDOW_MAX : TOP_MAX);
            if (opt == 'w') o->window_s = (unsigned)v;
            else o->max = (unsigned)v;
            break;
        case 'h':
            return usage_top();
        default:
            if (optopt != 0 && optopt < 0x1000) return cli_usage_error("unknown option '-%c'", optopt);
            return cli_usage_error("unknown option or missing argument '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (o->json && o->prometheus) return cli_usage_error("--json and --prometheus exclude each other");
    if (o->json || o->prometheus) o->once = 1;
    if (o->window_s == 0) o->window_s = o->once ? DLOCK_STATS_WINDOW_MAX : 10;
    return 0;
}

/* The figures, then each lock's holder and waiters. */
static int snapshot(dlock_client_t *c, const top_opts *o, top_row *rows, size_t *n) {
    dlock_lock_stats_t s[TOP_MAX];
    size_t i;
    int rc;
    if ((rc = dlock_stats(c, o->window_s, s, o->max, n)) != 0) return rc;
    for (i = 0; i < *n; i++) {
        rows[i].s = s[i];
        rows[i].info_ok = dlock_lock_info(c, s[i].name, &rows[i].info) == 0;
    }
    return 0;
}

/* "host:pid:tid" of the holder, "-" if none (safe for a terminal). */
static char *holder(char *buf, size_t n, const top_row *r) {
    char host[1100];
    if (!r->info_ok || !r->info.held) return strcpy(buf, "-");
    snprintf(buf, n, "%s:%ld:%lu", cli_fmt_safe(host, sizeof host, r->info.host), r->info.pid, r->info.tid);
    return buf;
}

/* ---------------------------------------------------------------- JSON */

static void print_json(const top_opts *o, const top_row *rows, size_t n) {
    char h[1200];
    size_t i;
    printf("{\"window_s\":%u,\"locks\":[", o->window_s);
    for (i = 0; i < n; i++) {
        const top_row *r = &rows[i];
        printf("%s{\"name\":", i ? "," : "");
        cli_json_str(stdout, r->s.name);
        printf(",\"acquisitions\":%llu,\"releases\":%llu,\"acquisitions_per_s\":%.3f,"
               "\"wait_ms_p50\":%.3f,\"wait_ms_p99\":%.3f,\"hold_ms_p50\":%.3f,\"hold_ms_p99\":%.3f,"
               "\"lost_leases\":%llu,\"deadlocks\":%llu,\"lease_risks\":%llu",
               (unsigned long long)r->s.acquisitions, (unsigned long long)r->s.releases,
               (double)r->s.acquisitions / o->window_s, r->s.wait_ms_p50, r->s.wait_ms_p99, r->s.hold_ms_p50,
               r->s.hold_ms_p99, (unsigned long long)r->s.lost_leases, (unsigned long long)r->s.deadlocks,
               (unsigned long long)r->s.lease_risks);
        if (r->info_ok && r->info.held) {
            snprintf(h, sizeof h, "%s:%ld:%lu", r->info.host, r->info.pid, r->info.tid);
            printf(",\"holder\":");
            cli_json_str(stdout, h);
        } else {
            printf(",\"holder\":null");
        }
        if (r->info_ok) printf(",\"waiters\":%u", r->info.writers_waiting);
        printf("}");
    }
    printf("]}\n");
}

/* ---------------------------------------------------------- Prometheus */

/* The same figures as `dlock exporter` serves (metrics.c), once. */
static int print_prometheus(dlock_client_t *c, const top_opts *o) {
    cli_metrics_opts mo = { o->window_s, o->max, NULL, 0 };
    cli_metrics m;
    int rc = cli_metrics_read(c, &mo, &m);
    if (rc != 0) {
        cli_msg("out of memory");
        return CLI_EXIT_OSERR;
    }
    if (!m.up) rc = cli_fail("cannot read the figures", m.err);
    else cli_metrics_write(stdout, &mo, &m);
    cli_metrics_free(&m);
    return rc;
}

/* ---------------------------------------------------------------- table */

/* ms for people, in 8 columns: "0.042", "12.5", "1530" ("-": no hold
 * began, or none ended, in the window). */
static char *fmt_ms(char *buf, size_t n, double ms) {
    if (ms < 1) snprintf(buf, n, "%.3f", ms);
    else if (ms < 100) snprintf(buf, n, "%.1f", ms);
    else snprintf(buf, n, "%.0f", ms);
    return buf;
}

/* The table, at most `lines` rows of it; `eol`: what ends a line ("\n",
 * or on the live screen "\033[K\n", which clears what was left there). */
static void top_print_table(const top_opts *o, const top_row *rows, size_t n, size_t lines, const char *eol) {
    char name[DLOCK_NAME_MAX * 4 + 8], h[1200], a[32], b[32], c[32];
    size_t i;
    printf("%-24s %9s %9s %8s %8s %8s %7s  %s%s", "NAME", "ACQ", "ACQ/S", "WAIT50", "WAIT99", "HOLD50", "WAITERS",
           "HOLDER", eol);
    for (i = 0; i < n && i < lines; i++) {
        const top_row *r = &rows[i];
        char w[16];
        if (r->info_ok) snprintf(w, sizeof w, "%u", r->info.writers_waiting);
        else strcpy(w, "?");
        printf("%-24.24s %9llu %9.1f %8s %8s %8s %7s  %s%s", cli_fmt_safe(name, sizeof name, r->s.name),
               (unsigned long long)r->s.acquisitions, (double)r->s.acquisitions / o->window_s,
               r->s.acquisitions ? fmt_ms(a, sizeof a, r->s.wait_ms_p50) : "-",
               r->s.acquisitions ? fmt_ms(b, sizeof b, r->s.wait_ms_p99) : "-",
               r->s.releases ? fmt_ms(c, sizeof c, r->s.hold_ms_p50) : "-", w, holder(h, sizeof h, r), eol);
    }
    if (n == 0) printf("(no figures in the last %u s: no client took a lock, or DLOCK_STATS=0)%s", o->window_s, eol);
}

/* ------------------------------------------------------------ live view */

static volatile sig_atomic_t top_quit;

static void top_on_signal(int sig) {
    (void)sig;
    top_quit = 1;
}

/* The terminal as we found it, put back at the end. */
static struct termios saved_tio;
static int tio_saved;

static void term_enter(void) {
    struct termios t;
    if (tcgetattr(STDIN_FILENO, &saved_tio) == 0) {
        tio_saved = 1;
        t = saved_tio;
        t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        t.c_cc[VMIN] = 0;
        t.c_cc[VTIME] = 0;
        (void)tcsetattr(STDIN_FILENO, TCSANOW, &t);
    }
    fputs("\033[?1049h\033[?25l", stdout); /* the alternate screen, no cursor */
    fflush(stdout);
}

static void term_leave(void) {
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    if (tio_saved) (void)tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
}

/* Waits up to ms for a key: 1 if it was q (or Q), else 0. */
static int key_quit(int ms) {
    struct pollfd p = { STDIN_FILENO, POLLIN, 0 };
    char ch[16];
    ssize_t k, i;
    if (poll(&p, 1, ms) <= 0) return 0;
    if ((k = read(STDIN_FILENO, ch, sizeof ch)) <= 0) return k == 0; /* end of input: quit */
    for (i = 0; i < k; i++)
        if (ch[i] == 'q' || ch[i] == 'Q') return 1;
    return 0;
}

static void draw(const top_opts *o, const top_row *rows, size_t n, int rc) {
    struct winsize ws;
    size_t lines = 22;
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 3) lines = ws.ws_row - 3u;
    strftime(now, sizeof now, "%H:%M:%S", localtime_r(&t, &tm));
    printf("\033[H");
    printf("dlock top - %s - the last %u s, every client - q quits\033[K\n\033[K\n", now, o->window_s);
    if (rc != 0) printf("cannot read the figures: %s: %s\033[K\n", dlock_strerror(rc), dlock_last_error());
    else top_print_table(o, rows, n, lines, "\033[K\n");
    printf("\033[J");
    fflush(stdout);
}

static int live(dlock_client_t *c, const top_opts *o, top_row *rows) {
    struct sigaction sa;
    size_t n = 0;
    int rc;
    if (!isatty(STDOUT_FILENO)) return cli_usage_error("the live view needs a terminal; use --once");
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = top_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    term_enter();
    while (!top_quit) {
        rc = snapshot(c, o, rows, &n);
        draw(o, rows, rc == 0 ? n : 0, rc);
        if (key_quit(1000)) break;
    }
    term_leave();
    return 0;
}

int cli_top(int argc, char **argv, cli_conn *conn) {
    dlock_client_t *c = NULL;
    top_row *rows;
    top_opts o;
    size_t n = 0;
    int rc;
    if ((rc = parse_top(argc, argv, conn, &o)) != 0) return rc < 0 ? 0 : rc;
    if ((rows = calloc(TOP_MAX, sizeof *rows)) == NULL) {
        cli_msg("out of memory");
        return CLI_EXIT_OSERR;
    }
    if ((rc = cli_client(conn, 0, &c)) != 0) {
        free(rows);
        return rc;
    }
    if (!o.once) {
        rc = live(c, &o, rows);
    } else if (o.prometheus) {
        if ((rc = print_prometheus(c, &o)) == 0) rc = fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
    } else if ((rc = snapshot(c, &o, rows, &n)) != 0) {
        rc = cli_fail("cannot read the figures", rc);
    } else {
        if (o.json) print_json(&o, rows, n);
        else top_print_table(&o, rows, n, TOP_MAX, "\n");
        rc = fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
    }
    (void)dlock_client_destroy(c);
    free(rows);
    return rc;
}
