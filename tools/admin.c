/* admin.c -- `dlock status`, `dlock list` and `dlock break`: what the server
 * knows of locks (holder, acquired-at, lease, fence, shared holders,
 * waiting writers; status: who waits, from dlock_lock_waiters), as a table
 * for people or JSON for scripts, and the administrative reset.
 *
 * All of it comes from dlock_lock_info / dlock_list (one round trip per
 * lock) and dlock_break.  "How long held" is the server's time when it
 * answered minus its time at the acquire, so this host's clock plays no
 * part; the acquire time is shown in this host's time zone.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

/* ------------------------------------------------------------- options */

typedef struct admin_opts {
    int json;
    int force;
    int reset;
    const char *arg; /* NAME or GLOB */
} admin_opts;

/* what: "status", "list" or "break" (which options it takes). */
static int parse(int argc, char **argv, cli_conn *conn, const char *what, admin_opts *o) {
    static const struct option longopts[] = {
        CLI_CONN_LONGOPTS,
        { "json", 0, NULL, 'j' },
        { "force", 0, NULL, 'f' },
        { "reset", 0, NULL, 'r' },
        { "help", 0, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int is_break = strcmp(what, "break") == 0, is_list = strcmp(what, "list") == 0, opt;

    memset(o, 0, sizeof *o);
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "jfrhV", longopts, NULL)) != -1) {
        if (cli_conn_opt(opt, optarg, conn)) continue;
        switch (opt) {
        case 'j':
            o->json = 1;
            break;
        case 'f':
        case 'r':
            if (!is_break) return cli_usage_error("unknown option '%s'", argv[optind - 1]);
            if (opt == 'f') o->force = 1;
            else o->reset = 1;
            break;
        case 'h':
            if (is_break)
                printf("Usage: dlock break [--force] [--reset] [--json] [--url URL] NAME\n"
                       "Administrative reset of the lock NAME, whoever holds it: its holder's next\n"
                       "renewal is refused (it learns it lost the lock).  A robust mutex's next\n"
                       "acquirer gets EOWNERDEAD; --reset also clears the robust state, making an\n"
                       "ENOTRECOVERABLE lock usable again.  Asks for confirmation when stdin is a\n"
                       "terminal; elsewhere --force is required.\n");
            else if (is_list)
                printf("Usage: dlock list [--json] [--url URL] [GLOB]\n"
                       "Every lock that is held (exclusively or shared), or that a robust mutex's\n"
                       "holder died holding, whose name matches the glob (default: all), as a\n"
                       "table or, with --json, a JSON array.\n");
            else
                printf("Usage: dlock status [--json] [--url URL] NAME\n"
                       "Who holds the lock NAME (host, pid, thread), since when, its remaining\n"
                       "lease, its fencing token, shared holders and waiting writers, and who\n"
                       "waits for it (host, pid, thread, since when, shared or exclusive).\n");
            return -1;
        default:
            if (optopt != 0 && optopt < 0x1000) return cli_usage_error("unknown option '-%c'", optopt);
            return cli_usage_error("unknown option or missing argument '%s'", argv[optind - 1]);
        }
    }
    if (is_list) {
        if (argc - optind > 1) return cli_usage_error("at most one GLOB");
        o->arg = optind < argc ? argv[optind] : NULL;
        return 0;
    }
    if (argc - optind != 1) return cli_usage_error("exactly one lock NAME is needed");
    o->arg = argv[optind];
    if (*o->arg == '\0' || strlen(o->arg) > DLOCK_NAME_MAX)
        return cli_usage_error("a lock name is 1 to %d bytes", DLOCK_NAME_MAX);
    return 0;
}

/* ------------------------------------------------------------- status */

/* The waiters of a lock (dlock_lock_waiters), longest-waiting first;
 * known 0: not kept (Redlock). */
typedef struct waiter_set {
    dlock_lock_waiter_t *v;
    size_t n, cap;
    int nomem, known;
} waiter_set;

static int waiter_add(const dlock_lock_waiter_t *w, void *arg) {
    waiter_set *s = arg;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 8;
        dlock_lock_waiter_t *nv = realloc(s->v, ncap * sizeof *nv);
        if (nv == NULL) {
            s->nomem = 1;
            return 1;
        }
        s->v = nv;
        s->cap = ncap;
    }
    s->v[s->n++] = *w;
    return 0;
}

static int64_t waited_ms(const dlock_lock_waiter_t *w) {
    int64_t d = w->server_now_ms - w->since_ms;
    return d < 0 ? 0 : d;
}

static void print_waiters(const waiter_set *ws) {
    char host[160], b[64], c[64];
    size_t i;
    if (!ws->known) return;
    printf("%-16s %zu\n", "waiters", ws->n);
    for (i = 0; i < ws->n; i++) {
        const dlock_lock_waiter_t *w = &ws->v[i];
        printf("  %s, pid %ld, thread %lu, %s, since %s (%s)%s\n",
               cli_fmt_safe(host, sizeof host, w->host[0] ? w->host : "?"), w->pid, w->tid,
               w->shared ? "shared" : "exclusive", cli_fmt_local(b, sizeof b, w->since_ms),
               cli_fmt_secs(c, sizeof c, waited_ms(w)), w->deadlock ? ", detects deadlocks" : "");
    }
}

/* The lock as cli_json_lock writes it, with "waiters" added: an array
 * (null where they are not kept). */
static void json_status(const cli_lock *l, const waiter_set *ws) {
    char *buf = NULL;
    size_t len = 0, i;
    FILE *m = open_memstream(&buf, &len);
    if (m == NULL) return;
    cli_json_lock(m, l);
    fclose(m);
    if (len > 0 && buf[len - 1] == '}') buf[--len] = '\0';
    fputs(buf, stdout);
    free(buf);
    fputs(",\"waiters\":", stdout);
    if (!ws->known) {
        fputs("null}\n", stdout);
        return;
    }
    putchar('[');
    for (i = 0; i < ws->n; i++) {
        const dlock_lock_waiter_t *w = &ws->v[i];
        fputs(i == 0 ? "{\"host\":" : ",{\"host\":", stdout);
        cli_json_str(stdout, w->host);
        printf(",\"pid\":%ld,\"tid\":%lu,\"since_ms\":%lld,\"waited_ms\":%lld,\"mode\":\"%s\",\"deadlock\":%s}",
               w->pid, w->tid, (long long)w->since_ms, (long long)waited_ms(w), w->shared ? "shared" : "exclusive",
               w->deadlock ? "true" : "false");
    }
    fputs("]}\n", stdout);
}

static void print_status(const cli_lock *l) {
    const dlock_lock_info_t *i = &l->info;
    char a[DLOCK_NAME_MAX * 4 + 8], b[64], c[64];

    printf("%-16s %s\n", "name", cli_fmt_safe(a, sizeof a, l->name));
    printf("%-16s %s\n", "state", cli_state(i));
    if (i->held) {
        printf("%-16s %s\n", "holder", cli_fmt_holder(a, sizeof a, i));
        if (i->since_ms > 0)
            printf("%-16s %s (%s ago)\n", "acquired", cli_fmt_local(b, sizeof b, i->since_ms),
                   cli_fmt_secs(c, sizeof c, cli_held_ms(i)));
        printf("%-16s %s\n", "lease left", cli_fmt_dur(b, sizeof b, i->lease_left_ms));
        printf("%-16s %llu\n", "fence", (unsigned long long)i->fence);
    }
    printf("%-16s %u\n", "shared holders", i->readers);
    printf("%-16s %u\n", "writers waiting", i->writers_waiting);
    if (i->robust_state != 0) printf("%-16s %s\n", "robust", cli_robust(i));
}

int cli_status(int argc, char **argv, cli_conn *conn) {
    dlock_client_t *c = NULL;
    waiter_set ws;
    admin_opts o;
    cli_lock l;
    int rc;

    if ((rc = parse(argc, argv, conn, "status", &o)) != 0) return rc < 0 ? 0 : rc;
    if ((rc = cli_client(conn, 0, &c)) != 0) return rc;
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", o.arg);
    memset(&ws, 0, sizeof ws);
    if ((rc = dlock_lock_info(c, o.arg, &l.info)) != 0) {
        rc = cli_fail("cannot read the lock", rc);
    } else if ((rc = dlock_lock_waiters(c, o.arg, waiter_add, &ws)) != 0 && rc != ENOTSUP) {
        rc = cli_fail("cannot read the lock's waiters", rc);
    } else if (ws.nomem) {
        rc = cli_fail("cannot read the lock's waiters", ENOMEM);
    } else {
        ws.known = rc == 0;
        rc = 0;
        if (o.json) {
            json_status(&l, &ws);
        } else {
            print_status(&l);
            print_waiters(&ws);
        }
    }
    free(ws.v);
    dlock_client_destroy(c);
    return rc;
}

/* --------------------------------------------------------------- list */

typedef struct lock_set {
    cli_lock *v;
    size_t n, cap;
    int nomem;
} lock_set;

static int collect(const char *name, const dlock_lock_info_t *info, void *arg) {
    lock_set *s = arg;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 16;
        cli_lock *nv = realloc(s->v, ncap * sizeof *nv);
        if (nv == NULL) {
            s->nomem = 1;
            return 1;
        }
        s->v = nv;
        s->cap = ncap;
    }
    snprintf(s->v[s->n].name, sizeof s->v[s->n].name, "%s", name);
    s->v[s->n].info = *info;
    s->n++;
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const cli_lock *)a)->name, ((const cli_lock *)b)->name);
}

/* Columns of the list table. */
enum { C_NAME, C_STATE, C_HOST, C_PID, C_TID, C_ACQ, C_HELD, C_LEASE, C_FENCE, C_SHARED, C_WAIT, C_ROBUST, NCOL };
static const char *const col_head[NCOL] = { "NAME", "STATE", "HOST", "PID", "TID", "ACQUIRED",
                                            "HELD", "LEASE", "FENCE", "SHARED", "WAITING", "ROBUST" };
#define CELL 192

/* Display width: characters, not bytes (cells are UTF-8 after cli_fmt_safe). */
static size_t width(const char *s) {
    size_t w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

static void row_of(const cli_lock *l, char cell[NCOL][CELL]) {
    const dlock_lock_info_t *i = &l->info;
    int k;
    for (k = 0; k < NCOL; k++) strcpy(cell[k], "-");
    cli_fmt_safe(cell[C_NAME], CELL, l->name);
    snprintf(cell[C_STATE], CELL, "%s", cli_state(i));
    if (i->held) {
        cli_fmt_safe(cell[C_HOST], CELL, i->host[0] ? i->host : "?");
        snprintf(cell[C_PID], CELL, "%ld", i->pid);
        snprintf(cell[C_TID], CELL, "%lu", i->tid);
        if (i->since_ms > 0) {
            cli_fmt_local(cell[C_ACQ], CELL, i->since_ms);
            cli_fmt_secs(cell[C_HELD], CELL, cli_held_ms(i));
        }
        cli_fmt_dur(cell[C_LEASE], CELL, i->lease_left_ms);
        snprintf(cell[C_FENCE], CELL, "%llu", (unsigned long long)i->fence);
    }
    snprintf(cell[C_SHARED], CELL, "%u", i->readers);
    snprintf(cell[C_WAIT], CELL, "%u", i->writers_waiting);
    if (i->robust_state != 0) snprintf(cell[C_ROBUST], CELL, "%s", cli_robust(i));
}

static void print_table(const lock_set *s) {
    char(*cells)[NCOL][CELL] = calloc(s->n ? s->n : 1, sizeof *cells);
    size_t w[NCOL], r;
    int k;

    if (cells == NULL) {
        cli_msg("out of memory");
        return;
    }
    for (k = 0; k < NCOL; k++) w[k] = width(col_head[k]);
    for (r = 0; r < s->n; r++) {
        row_of(&s->v[r], cells[r]);
        for (k = 0; k < NCOL; k++)
            if (width(cells[r][k]) > w[k]) w[k] = width(cells[r][k]);
    }
    for (k = 0; k < NCOL; k++) printf("%s%-*s", k ? "  " : "", k == NCOL - 1 ? 0 : (int)w[k], col_head[k]);
    putchar('\n');
    for (r = 0; r < s->n; r++) {
        for (k = 0; k < NCOL; k++) {
            const char *v = cells[r][k];
            size_t pad = k == NCOL - 1 ? 0 : w[k] - width(v);
            printf("%s%s%*s", k ? "  " : "", v, (int)pad, "");
        }
        putchar('\n');
    }
    free(cells);
}

int cli_list(int argc, char **argv, cli_conn *conn) {
    dlock_client_t *c = NULL;
    lock_set s = { NULL, 0, 0, 0 };
    admin_opts o;
    int rc;

    if ((rc = parse(argc, argv, conn, "list", &o)) != 0) return rc < 0 ? 0 : rc;
    if ((rc = cli_client(conn, 0, &c)) != 0) return rc;
    rc = dlock_list(c, o.arg, collect, &s);
    if (rc == 0 && s.nomem) rc = ENOMEM;
    if (rc != 0 && (rc != ENOLCK || s.n == 0)) {
        rc = cli_fail("cannot list the locks", rc);
    } else {
        /* ENOLCK with locks found: a Redlock quorum did not answer.  What
         * was found is shown, then that the list is incomplete (exit 69). */
        int partial = rc;
        size_t i;
        if (s.n > 1) qsort(s.v, s.n, sizeof *s.v, by_name);
        if (o.json) {
            putchar('[');
            for (i = 0; i < s.n; i++) {
                if (i) putchar(',');
                cli_json_lock(stdout, &s.v[i]);
            }
            puts("]");
        } else if (s.n == 0) {
            puts(o.arg ? "no lock held matches" : "no lock is held");
        } else {
            print_table(&s);
        }
        if (partial != 0) {
            fflush(stdout);
            rc = cli_fail("the list is incomplete", partial);
        }
    }
    free(s.v);
    dlock_client_destroy(c);
    return rc;
}

/* -------------------------------------------------------------- break */

/* Asks on the terminal; 1 for yes. */
static int confirm(const cli_lock *l) {
    char name[DLOCK_NAME_MAX * 4 + 8], holder[512], ago[64], line[64];
    const dlock_lock_info_t *i = &l->info;

    cli_fmt_safe(name, sizeof name, l->name);
    if (i->held)
        fprintf(stderr, "Break the lock '%s', held by %s for %s? Its holder loses it. [y/N] ", name,
                cli_fmt_holder(holder, sizeof holder, i), cli_fmt_secs(ago, sizeof ago, cli_held_ms(i)));
    else if (i->readers > 0)
        fprintf(stderr, "Break the lock '%s', held shared by %u? [y/N] ", name, i->readers);
    else
        fprintf(stderr, "The lock '%s' is not held; %s anyway? [y/N] ", name,
                i->robust_state ? "reset it" : "break it");
    fflush(stderr);
    if (fgets(line, sizeof line, stdin) == NULL) return 0;
    line[strcspn(line, "\r\n")] = '\0';
    return strcasecmp(line, "y") == 0 || strcasecmp(line, "yes") == 0;
}

int cli_break(int argc, char **argv, cli_conn *conn) {
    dlock_client_t *c = NULL;
    char name[DLOCK_NAME_MAX * 4 + 8], holder[512];
    admin_opts o;
    cli_lock l;
    int rc, was_held = 0;

    if ((rc = parse(argc, argv, conn, "break", &o)) != 0) return rc < 0 ? 0 : rc;
    if (!o.force && !isatty(STDIN_FILENO))
        return cli_usage_error("stdin is not a terminal: add --force to break a lock without being asked");
    if ((rc = cli_client(conn, 0, &c)) != 0) return rc;
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", o.arg);
    cli_fmt_safe(name, sizeof name, o.arg);
    if ((rc = dlock_lock_info(c, o.arg, &l.info)) != 0) {
        rc = cli_fail("cannot read the lock", rc);
        goto out;
    }
    if (!o.force && !confirm(&l)) {
        fprintf(stderr, "%s: not broken\n", cli_prog);
        rc = CLI_EXIT_CONFLICT;
        goto out;
    }
    if ((rc = dlock_break(c, o.arg, o.reset ? DLOCK_BREAK_RESET : DLOCK_BREAK_OWNERDEAD, &was_held)) != 0) {
        rc = cli_fail("cannot break the lock", rc);
        goto out;
    }
    if (o.json) {
        fputs("{\"name\":", stdout);
        cli_json_str(stdout, o.arg);
        printf(",\"broken\":true,\"was_held\":%s,\"how\":\"%s\",\"before\":", was_held ? "true" : "false",
               o.reset ? "reset" : "ownerdead");
        cli_json_lock(stdout, &l);
        puts("}");
    } else if (was_held && l.info.held) {
        printf("broke '%s': it was held by %s; that holder loses it at its next renewal\n", name,
               cli_fmt_holder(holder, sizeof holder, &l.info));
    } else if (was_held) {
        printf("broke '%s': it was held\n", name);
    } else {
        printf("'%s' was not held%s\n", name, o.reset ? "; its robust state is cleared" : "");
    }
out:
    dlock_client_destroy(c);
    return rc;
}
