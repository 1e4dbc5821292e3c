/* cli.h -- what the parts of the dlock command share: exit codes, the
 * connection, messages, and the formatting of durations, times, names and
 * JSON.  The command uses only the public API (dlock.h).
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <dlock.h>

/* Exit codes.  `dlock exec` otherwise exits with its command's status
 * (128 + N when a signal N killed it), as flock(1) does; the codes below
 * are the sysexits.h ones where one fits.  Documented in docs/dlock.1. */
#define CLI_EXIT_CONFLICT 1     /* -n/-w: busy or timed out (-E changes it); break: declined, or
                                   no such semaphore (--sem, --unlink) */
#define CLI_EXIT_USAGE 64       /* EX_USAGE: bad arguments, bad URL or name */
#define CLI_EXIT_UNAVAILABLE 69 /* EX_UNAVAILABLE: the server cannot be reached or refused us */
#define CLI_EXIT_SOFTWARE 70    /* EX_SOFTWARE: an unexpected error from the server or library */
#define CLI_EXIT_OSERR 71       /* EX_OSERR: fork, pipe, thread creation failed */
#define CLI_EXIT_LOST 75        /* EX_TEMPFAIL: exec: the lock was lost while CMD ran (--lost-exit-code) */
#define CLI_EXIT_CANNOT_EXEC 126 /* CMD was found but could not be run */
#define CLI_EXIT_NOT_FOUND 127  /* CMD was not found */

/* Options every subcommand accepts. */
typedef struct cli_conn {
    const char *url;    /* --url, else NULL: $DLOCK_URL, else the default */
    const char *prefix; /* --prefix, else NULL: $DLOCK_PREFIX, else "dlock:" */
} cli_conn;

/* The subcommands: argv[0] is the subcommand's name; each returns the
 * process's exit code. */
int cli_exec(int argc, char **argv, cli_conn *conn);
int cli_status(int argc, char **argv, cli_conn *conn);
int cli_list(int argc, char **argv, cli_conn *conn);
int cli_break(int argc, char **argv, cli_conn *conn);
int cli_graph(int argc, char **argv, cli_conn *conn); /* graph.c */
int cli_top(int argc, char **argv, cli_conn *conn);
int cli_exporter(int argc, char **argv, cli_conn *conn); /* exporter.c */

/* ------------------------------------------------------------------ main.c */
/* "dlock" or "dlock exec": the prefix of every message. */
extern const char *cli_prog;
/* A message on stderr, prefixed with cli_prog. */
void cli_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error: the message, a hint, and CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* OpenSSL's set-up for the command (no clean-up at exit; its
 * configuration file read only for a rediss:// URL): once, before the
 * first client.  cli_client does it. */
void cli_openssl_init(const cli_conn *conn);
/* Makes a client from conn (with unreachable_ms if nonzero); on failure
 * reports and returns the exit code, else 0. */
int cli_client(const cli_conn *conn, unsigned unreachable_ms, dlock_client_t **out);
/* The same with the circuit breaker on for breaker_ms (and with it the
 * host-wide outage record, unless the URL says host_breaker=0): `dlock
 * exec`, run once per job, pays an unreachable server's wait once per
 * host and period, not once per job.  A URL's breaker_ms wins. */
int cli_client_breaker(const cli_conn *conn, unsigned unreachable_ms, unsigned breaker_ms, dlock_client_t **out);
#define CLI_EXEC_BREAKER_MS 30000
/* Reports a failed library call `what` (err, with dlock_last_error()) and
 * returns the matching exit code. */
int cli_fail(const char *what, int err);
/* dlock_last_error() for err without its leading "ENAME: ", or NULL when
 * there is none. */
const char *cli_err_detail(int err);
/* The exit code for a library error. */
int cli_exit_for(int err);
/* Handles --url/--prefix for a subcommand's getopt loop: 1 if opt was one
 * of them (consumed), else 0.  -V/--version, accepted before or after the
 * command's name, prints the version and exits 0. */
int cli_conn_opt(int opt, const char *arg, cli_conn *conn);
/* Room for one more element of `size` bytes in the growable array v of n
 * elements and *cap places (doubled when full, `first` places at first):
 * the array, moved perhaps, with *cap updated; NULL if out of memory (v
 * is kept). */
void *cli_grow(void *v, size_t n, size_t *cap, size_t size, size_t first);
#define CLI_OPT_URL 0x1001
#define CLI_OPT_PREFIX 0x1002
#define CLI_CONN_LONGOPTS \
    { "url", 1, NULL, CLI_OPT_URL }, { "prefix", 1, NULL, CLI_OPT_PREFIX }, { "version", 0, NULL, 'V' }

/* ---------------------------------------------------------------- format.c */
/* Wall-clock time in ms since the epoch. */
int64_t cli_now_ms(void);
/* Parses a duration: a decimal number of seconds with an optional unit
 * (ms, s, m, h), e.g. "10", "2.5", "500ms".  0 and *ms set, or -1. */
int cli_parse_duration(const char *s, int64_t *ms);
/* A duration for people: "850ms", "12.3s", "3m12s", "2h03m", "4d07h". */
char *cli_fmt_dur(char *buf, size_t n, int64_t ms);
/* Whole seconds for people: "41s", "3m12s", "2h03m". */
char *cli_fmt_secs(char *buf, size_t n, int64_t ms);
/* ms since the epoch as local time "2024-05-01 12:00:03". */
char *cli_fmt_local(char *buf, size_t n, int64_t ms);
/* ms since the epoch as UTC ISO 8601 "2024-05-01T10:00:03.123Z". */
char *cli_fmt_iso(char *buf, size_t n, int64_t ms);
/* s made safe for a terminal: control bytes and backslashes as \xNN and
 * \\, so that a name or host cannot move the cursor or change colours. */
char *cli_fmt_safe(char *buf, size_t n, const char *s);
/* s as a JSON string, quotes included.  Valid UTF-8 is kept; a byte that is
 * not part of valid UTF-8 is written as \u00XX (read as Latin-1). */
void cli_json_str(FILE *f, const char *s);
/* s inside double quotes of a Prometheus label or a Graphviz string (the
 * quotes not written): backslash, quote and newline escaped, always valid
 * UTF-8. */
void cli_quoted_str(FILE *f, const char *s);

/* What the library knows of one lock, and how it is shown. */
typedef struct cli_lock {
    char name[DLOCK_NAME_MAX + 1];
    dlock_lock_info_t info;
    /* its value block (status only: lvb_read 1): lvb_valid -1 none */
    int lvb_read, lvb_valid;
    size_t lvblen;
    unsigned char lvb[DLOCK_LVB_MAX];
} cli_lock;
/* The value block as text: "NN NN ... (N bytes, valid|invalid)"; "none". */
char *cli_fmt_lvb(char *buf, size_t n, const cli_lock *l);
/* "free", "exclusive" or "shared". */
const char *cli_state(const dlock_lock_info_t *i);
/* "-", "robust", "ownerdead" or "notrecoverable". */
const char *cli_robust(const dlock_lock_info_t *i);
/* "host, pid 42, thread 43" of the exclusive holder (safe for a terminal). */
char *cli_fmt_holder(char *buf, size_t n, const dlock_lock_info_t *i);
/* How long the exclusive holder has held it: the server's time when it
 * answered minus the acquire time (both server clock), never below 0. */
int64_t cli_held_ms(const dlock_lock_info_t *i);
/* One lock as a JSON object (no newline). */
void cli_json_lock(FILE *f, const cli_lock *l);
/* Its fields alone ("name":...,...,"robust":...), for an object that has
 * more. */
void cli_json_lock_fields(FILE *f, const cli_lock *l);
/* How long a lock's waiter has waited, by the server's clock, never
 * below 0. */
int64_t cli_waited_ms(const dlock_lock_waiter_t *w);
/* A waiter as an open JSON object, `{"host":...,"deadlock":...` (no
 * closing brace: `dlock graph` adds a field): `dlock status` and `dlock
 * graph` write the same fields. */
void cli_json_waiter_open(FILE *f, const dlock_lock_waiter_t *w);

/* What the library knows of one semaphore, and its people when they were
 * read (dlock_sem_owners; have_people 0: dlock_sem_list's counts only). */
typedef struct cli_sem {
    char name[DLOCK_NAME_MAX + 1];
    dlock_sem_info_t info;
    dlock_sem_owner_t *people; /* malloc'ed */
    size_t npeople;
    int have_people;
} cli_sem;
/* "host, pid 42, thread 43" of a waiter or a unit's holder (safe for a
 * terminal); "(not named)" when the server does not say. */
char *cli_fmt_person(char *buf, size_t n, const dlock_sem_owner_t *o);
/* How long o has waited or held its unit, on the server's clock (never
 * below 0). */
int64_t cli_since_ms(const dlock_sem_info_t *i, const dlock_sem_owner_t *o);
/* One semaphore as a JSON object (no newline): name, "kind":"semaphore",
 * exists, value, waiting, leased, and with its people "waiters" (in the
 * order they are served) and "units" (leased under undo). */
void cli_json_sem(FILE *f, const cli_sem *s);

/* ---------------------------------------------------------------- ranges.c */
/* The record-lock table of a name (dlock_range_list): the user's NAME or
 * NAME#fcntl, both meaning the table NAME#fcntl. */
typedef struct cli_ranges {
    char table[DLOCK_NAME_MAX + 8];
    dlock_range_t *v; /* malloc'ed */
    size_t n, cap;
    int nomem, known; /* known 0: not kept (Redlock) */
} cli_ranges;
/* Reads it: 0, or an errno value. */
int cli_ranges_read(dlock_client_t *c, const char *name, cli_ranges *out);
/* For people: "record locks NAME#fcntl" and a line per range. */
void cli_ranges_print(const cli_ranges *s);
/* As a JSON array (null when not kept). */
void cli_ranges_json(FILE *f, const cli_ranges *s);
/* `dlock break --ranges [--owner OWNER] NAME`: the process's exit code. */
int cli_ranges_break(dlock_client_t *c, const char *name, const char *owner, int force, int json);
/* The record-lock tables with a live owner (dlock_range_tables) whose
 * name, or the file's lock name before "#fcntl", matches glob (NULL:
 * all), sorted by name. */
typedef struct cli_table {
    char name[DLOCK_NAME_MAX + 1];
    unsigned owners, ranges;
} cli_table;
typedef struct cli_tables {
    cli_table *v; /* malloc'ed */
    size_t n, cap;
    int nomem;
} cli_tables;
int cli_tables_read(dlock_client_t *c, const char *glob, cli_tables *out);
void cli_tables_print(const cli_tables *s);
void cli_table_json(FILE *f, const cli_table *t);

/* --------------------------------------------------------------- metrics.c */
/* The figures in the Prometheus text format: what `dlock top --once
 * --prometheus` prints and `dlock exporter` serves, read and written by
 * one code path. */
typedef struct cli_metrics_opts {
    unsigned window_s;  /* the seconds of figures summed (1..DLOCK_STATS_WINDOW_MAX) */
    unsigned max;       /* at most this many locks get a lock="..." label */
    const char *glob;   /* only the locks whose name matches (fnmatch); NULL: all */
    int64_t budget_ms;  /* stop reading after this long (0: no limit) */
} cli_metrics_opts;

/* One lock: its figures (have_stats) and what the server says of it now
 * (have_info: only for the locks held or read-held, from dlock_list). */
typedef struct cli_mlock {
    char name[DLOCK_NAME_MAX + 1];
    int have_stats, have_info;
    dlock_lock_stats_t s;
    dlock_lock_info_t info;
} cli_mlock;

typedef struct cli_metrics {
    int up;             /* 1: the server answered every read */
    int err;            /* else the error of the read that failed */
    int truncated;      /* 1: locks were left out (the cap, or the time budget) */
    int have_cycles;    /* 1: cycles was read (not on Redlock, nor past the budget) */
    size_t cycles;      /* cycles of waits among the held locks, as `dlock graph` finds them */
    double rtt_s;       /* the figures' read (one round trip), in seconds */
    double read_s;      /* every read, in seconds */
    int have_breaker;   /* 1: breaker was read (dlock_client_breaker) */
    dlock_breaker_state_t breaker; /* after the reads: this client's, or the host's record */
    cli_mlock *v;       /* malloc'ed */
    size_t n, cap;
    size_t *slots, nslots; /* name hash -> index + 1 (0: empty), malloc'ed */
} cli_metrics;

/* Reads the figures and the held locks into m (cli_metrics_free frees
 * it); 0, or ENOMEM (m then freed).  A server that does not answer is m->up 0, not an
 * error. */
int cli_metrics_read(dlock_client_t *c, const cli_metrics_opts *o, cli_metrics *m);
void cli_metrics_write(FILE *f, const cli_metrics_opts *o, const cli_metrics *m);
void cli_metrics_free(cli_metrics *m);
/* CLOCK_MONOTONIC in seconds. */
double cli_mono_s(void);

/* ----------------------------------------------------------------- graph.c */
/* The cycles of waits among the exclusively held locks of v (their
 * waiters read, one round trip each, until the CLOCK_MONOTONIC deadline
 * in seconds, 0: none) into *found, counted as `dlock graph` marks them.
 * 0; ETIMEDOUT (the cycles among the locks read by then counted); or the
 * error of a read (ENOTSUP on Redlock, ENOMEM). */
int cli_wait_cycles(dlock_client_t *c, const cli_mlock *v, size_t n, double deadline, size_t *found);

#endif /* DLOCK_CLI_H */
