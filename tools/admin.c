/* admin.c -- `dlock status`, `dlock list` and `dlock break`: what the server
 * knows of locks (holder, acquired-at, lease, fence, shared holders,
 * waiting writers; status: who waits, from dlock_lock_waiters) and of
 * semaphores (value, waiters, units leased under undo), as a table for
 * people or JSON for scripts, and the administrative reset; the preload's
 * record-lock tables of a name are ranges.c's.
 *
 * All of it comes from dlock_lock_info / dlock_list (one round trip per
 * lock) and dlock_break; for semaphores dlock_sem_owners / dlock_sem_list,
 * dlock_sem_break and dlock_sem_unlink.  A lock and a semaphore of one
 * name are two things (their keys differ): status shows the lock, the
 * semaphore, or both, one after the other (see print_status_of).
 * "How long held" is the server's time when it answered minus its time at
 * the acquire, so this host's clock plays no part; the acquire time is
 * shown in this host's time zone (a semaphore's waiters and units alike).
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
    int sem;    /* break --sem: the semaphore's leased units */
    int unlink; /* break --unlink: remove the semaphore */
    int ranges; /* break --ranges: clear the record-lock table */
    const char *owner; /* break --ranges --owner: only this owner's */
    const char *arg; /* NAME or GLOB */
} admin_opts;

#define OPT_SEM 0x1101
#define OPT_UNLINK 0x1102
#define OPT_RANGES 0x1103
#define OPT_OWNER 0x1104

/* The help of `dlock status`, `list` or `break`. */
static void print_help(int is_break, int is_list) {
    if (is_break)
        printf("Usage: dlock break [--force] [--reset | --sem | --unlink | --ranges [--owner OWNER]] [--json]\n"
               "                   [--url URL] NAME\n"
               "Administrative reset of the lock NAME, whoever holds it: its holder's next\n"
               "renewal is refused (it learns it lost the lock).  A robust mutex's next\n"
               "acquirer gets EOWNERDEAD; --reset also clears the robust state, making an\n"
               "ENOTRECOVERABLE lock usable again.\n"
               "--sem: the semaphore NAME instead: every unit leased under undo is taken\n"
               "back (its holder loses it) and given to the waiters or the value.\n"
               "--unlink: remove the semaphore NAME (as sem_unlink); the next init makes it\n"
               "anew, and its waiters go on waiting for a post or that init.\n"
               "--ranges: the record locks (fcntl, lockf) of the file NAME that the preload\n"
               "keeps (the table NAME#fcntl): every owner's, or with --owner the one owner's\n"
               "(as status shows it); each learns it lost them at its next renewal.\n"
               "Asks for confirmation when stdin is a terminal; elsewhere --force is required.\n");
    else if (is_list)
        printf("Usage: dlock list [--json] [--url URL] [GLOB]\n"
               "Every lock that is held (exclusively or shared), or that a robust mutex's\n"
               "holder died holding, every semaphore, and every file's record-lock table\n"
               "with an owner, whose name matches the glob (default: all), as tables or,\n"
               "with --json, a JSON array (\"kind\": \"lock\", \"semaphore\" or\n"
               "\"record locks\").\n");
    else
        printf("Usage: dlock status [--json] [--url URL] NAME\n"
               "Who holds the lock NAME (host, pid, thread), since when, its remaining\n"
               "lease, its fencing token, shared holders and waiting writers, and who\n"
               "waits for it (host, pid, thread, since when, shared or exclusive); and\n"
               "the semaphore NAME if there is one: its value, its waiters and the\n"
               "units leased under undo, with who and since when; and the record locks\n"
               "(fcntl, lockf) the preload keeps for the file NAME: each owner's byte\n"
               "ranges, read or write, and the range it waits for.\n");
}

/* what: "status", "list" or "break" (which options it takes). */
static int parse(int argc, char **argv, cli_conn *conn, const char *what, admin_opts *o) {
    static const struct option longopts[] = {
        CLI_CONN_LONGOPTS,
        { "json", 0, NULL, 'j' },
        { "force", 0, NULL, 'f' },
        { "reset", 0, NULL, 'r' },
        { "sem", 0, NULL, OPT_SEM },
        { "unlink", 0, NULL, OPT_UNLINK },
        { "ranges", 0, NULL, OPT_RANGES },
        { "owner", 1, NULL, OPT_OWNER },
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
        case OPT_SEM:
        case OPT_UNLINK:
            if (!is_break) return cli_usage_error("unknown option '%s'", argv[optind - 1]);
            if (opt == OPT_SEM) o->sem = 1;
            else o->unlink = 1;
            break;
        case OPT_RANGES:
        case OPT_OWNER:
            if (!is_break) return cli_usage_error("unknown option '%s'", argv[optind - 1]);
            if (opt == OPT_RANGES) o->ranges = 1;
            else o->owner = optarg;
            break;
        case 'h':
            print_help(is_break, is_list);
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
    if (o->reset + o->sem + o->unlink + o->ranges > 1)
        return cli_usage_error("--reset, --sem, --unlink and --ranges do not go together");
    if (o->owner != NULL && !o->ranges) return cli_usage_error("--owner goes with --ranges");
    if (argc - optind != 1) return cli_usage_error("exactly one lock NAME is needed");
    o->arg = argv[optind];
    if (*o->arg == '\0' || strlen(o->arg) > DLOCK_NAME_MAX)
        return cli_usage_error("a lock name is 1 to %d bytes", DLOCK_NAME_MAX);
    return 0;
}

/* --------------------------------------------------------- semaphores */

/* The most people status and break read of a semaphore. */
#define PEOPLE_MAX 1000

static int add_person(const dlock_sem_owner_t *o, void *arg) {
    cli_sem *s = arg;
    if (s->npeople % 64 == 0) {
        dlock_sem_owner_t *nv = realloc(s->people, (s->npeople + 64) * sizeof *nv);
        if (nv == NULL) return 1; /* the people so far are shown */
        s->people = nv;
    }
    s->people[s->npeople++] = *o;
    return 0;
}

/* Reads the semaphore name and its people into s (free s->people).  A
 * deployment without semaphores (Redlock) has none of that name: 0. */
static int sem_read(dlock_client_t *c, const char *name, cli_sem *s) {
    int rc;
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    rc = dlock_sem_owners(c, name, &s->info, PEOPLE_MAX, add_person, s);
    if (rc == ENOTSUP) {
        free(s->people);
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s", name);
        return 0;
    }
    s->have_people = rc == 0;
    return rc;
}

/* Is there a semaphore to show: it exists, or (unlinked) still has
 * waiters or leased units. */
static int sem_present(const dlock_sem_info_t *i) {
    return i->exists || i->waiters > 0 || i->leased > 0;
}

/* Nothing of the lock to show: free, no readers, nobody waiting, no
 * robust state. */
static int lock_idle(const dlock_lock_info_t *i) {
    return !i->held && i->readers == 0 && i->writers_waiting == 0 && i->robust_state == 0 && i->delay_left_ms == 0;
}

static void print_person(const dlock_sem_info_t *i, const dlock_sem_owner_t *o) {
    char who[512], when[64], ago[64], left[64], label[32];
    if (o->kind == DLOCK_SEM_WAITING && o->place >= 0) snprintf(label, sizeof label, "waiter %ld", o->place + 1);
    else snprintf(label, sizeof label, "%s", o->kind == DLOCK_SEM_WAITING ? "waiter (handed)" : "leased unit");
    cli_fmt_person(who, sizeof who, o);
    cli_fmt_local(when, sizeof when, o->since_ms);
    cli_fmt_secs(ago, sizeof ago, cli_since_ms(i, o));
    if (o->kind == DLOCK_SEM_WAITING)
        printf("%-16s %s, waiting since %s (%s)%s\n", label, who, when, ago,
               o->place < 0 ? ", taking the unit a post handed it" : "");
    else
        printf("%-16s %s, taken %s (%s ago), lease left %s\n", label, who, when, ago,
               cli_fmt_dur(left, sizeof left, o->lease_left_ms));
}

static void print_sem_status(const cli_sem *s) {
    const dlock_sem_info_t *i = &s->info;
    char a[DLOCK_NAME_MAX * 4 + 8];
    size_t k, shown_w = 0, shown_u = 0;

    printf("%-16s %s\n", "name", cli_fmt_safe(a, sizeof a, s->name));
    printf("%-16s %s\n", "kind", "semaphore");
    if (!i->exists) printf("%-16s %s\n", "exists", "no (unlinked: its waiters wait for a post or a new init)");
    printf("%-16s %d\n", "value", i->value);
    printf("%-16s %u\n", "waiting", i->waiters);
    printf("%-16s %u\n", "leased units", i->leased);
    if (i->remade_ms > 0) {
        char when[64], ago[64];
        int64_t now = i->server_now_ms > 0 ? i->server_now_ms : cli_now_ms();
        cli_fmt_local(when, sizeof when, i->remade_ms);
        cli_fmt_secs(ago, sizeof ago, now > i->remade_ms ? now - i->remade_ms : 0);
        printf("%-16s %s (%s ago), after the server lost it, with the value its opener gave\n", "remade", when, ago);
    }
    for (k = 0; k < s->npeople; k++) {
        print_person(i, &s->people[k]);
        if (s->people[k].kind == DLOCK_SEM_WAITING) shown_w++;
        else shown_u++;
    }
    if (i->waiters > shown_w) printf("%-16s %u more\n", "waiters", i->waiters - (unsigned)shown_w);
    if (i->leased > shown_u) printf("%-16s %u more\n", "leased units", i->leased - (unsigned)shown_u);
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
    dlock_lock_waiter_t *nv = cli_grow(s->v, s->n, &s->cap, sizeof *nv, 8);
    if (nv == NULL) {
        s->nomem = 1;
        return 1;
    }
    s->v = nv;
    s->v[s->n++] = *w;
    return 0;
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
               cli_fmt_secs(c, sizeof c, cli_waited_ms(w)), w->deadlock ? ", detects deadlocks" : "");
    }
}

/* The lock's waiters as JSON: ',"waiters":' and an array (null where
 * they are not kept). */
static void json_waiters(const waiter_set *ws) {
    size_t i;
    fputs(",\"waiters\":", stdout);
    if (!ws->known) {
        fputs("null", stdout);
        return;
    }
    putchar('[');
    for (i = 0; i < ws->n; i++) {
        if (i > 0) putchar(',');
        cli_json_waiter_open(stdout, &ws->v[i]);
        putchar('}');
    }
    putchar(']');
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
        if (i->fence != 0) printf("%-16s %llu\n", "fence", (unsigned long long)i->fence);
        else printf("%-16s %s\n", "fence", "- (not kept yet: taken on the uncontended path, recorded at its first renewal)");
    }
    if (i->delay_left_ms > 0) /* its last hold ended without a release: nobody gets it until then */
        printf("%-16s until %s (%s left)\n", "lock-delay", cli_fmt_local(b, sizeof b, i->server_now_ms + i->delay_left_ms),
               cli_fmt_dur(c, sizeof c, i->delay_left_ms));
    printf("%-16s %u\n", "shared holders", i->readers);
    printf("%-16s %u\n", "writers waiting", i->writers_waiting);
    if (i->robust_state != 0) printf("%-16s %s\n", "robust", cli_robust(i));
    if (l->lvb_read && l->lvb_valid >= 0) {
        char v[DLOCK_LVB_MAX * 3 + 100];
        printf("%-16s %s\n", "value block", cli_fmt_lvb(v, sizeof v, l));
    }
}

/* `dlock status` of a name: the lock as before when there is no
 * semaphore of that name; the semaphore alone when the lock has nothing
 * to show; else both, the lock first.  JSON: the lock's fields always,
 * "kind" (what the table shows: "lock", "semaphore" or
 * "lock+semaphore"), "semaphore" (null, or the semaphore) and
 * "record_locks" (the file's ranges: an array, null where none are
 * kept).  The record locks of the file NAME follow, if it has any. */
static void print_status_of(const cli_lock *l, const cli_sem *s, const waiter_set *ws, const cli_ranges *rg,
                            int json) {
    int sem = sem_present(&s->info), lock = (!sem && rg->n == 0) || !lock_idle(&l->info) || ws->n > 0;
    if (json) {
        putchar('{');
        cli_json_lock_fields(stdout, l);
        json_waiters(ws);
        printf(",\"kind\":\"%s\",\"semaphore\":", !sem ? "lock" : lock ? "lock+semaphore" : "semaphore");
        if (sem) cli_json_sem(stdout, s);
        else fputs("null", stdout);
        fputs(",\"record_locks\":", stdout);
        cli_ranges_json(stdout, rg);
        puts("}");
        return;
    }
    if (lock) {
        print_status(l);
        print_waiters(ws);
    }
    if (lock && sem) putchar('\n');
    if (sem) print_sem_status(s);
    if ((lock || sem) && rg->n > 0) putchar('\n');
    if (rg->n > 0) cli_ranges_print(rg);
}

/* The lock's value block into l (none on Redlock, which keeps none). */
static int status_lvb(dlock_client_t *c, cli_lock *l) {
    int rc = dlock_lock_lvb(c, l->name, l->lvb, sizeof l->lvb, &l->lvblen, &l->lvb_valid);
    l->lvb_read = 1;
    if (rc == ENOTSUP) l->lvb_valid = -1;
    return rc == ENOTSUP ? 0 : rc;
}

int cli_status(int argc, char **argv, cli_conn *conn) {
    dlock_client_t *c = NULL;
    waiter_set ws;
    admin_opts o;
    cli_lock l;
    cli_sem s;
    cli_ranges rg;
    int rc;

    memset(&rg, 0, sizeof rg);
    if ((rc = parse(argc, argv, conn, "status", &o)) != 0) return rc < 0 ? 0 : rc;
    if ((rc = cli_client(conn, 0, &c)) != 0) return rc;
    memset(&l, 0, sizeof l);
    memset(&s, 0, sizeof s);
    snprintf(l.name, sizeof l.name, "%s", o.arg);
    memset(&ws, 0, sizeof ws);
    if ((rc = dlock_lock_info(c, o.arg, &l.info)) != 0)
        rc = cli_fail("cannot read the lock", rc);
    else if ((rc = status_lvb(c, &l)) != 0)
        rc = cli_fail("cannot read the lock's value block", rc);
    else if ((rc = dlock_lock_waiters(c, o.arg, waiter_add, &ws)) != 0 && rc != ENOTSUP)
        rc = cli_fail("cannot read the lock's waiters", rc);
    else if (ws.nomem)
        rc = cli_fail("cannot read the lock's waiters", ENOMEM);
    else {
        ws.known = rc == 0; /* (ENOTSUP: Redlock keeps no waiters) */
        if ((rc = sem_read(c, o.arg, &s)) != 0) rc = cli_fail("cannot read the semaphore", rc);
        else if ((rc = cli_ranges_read(c, o.arg, &rg)) != 0) rc = cli_fail("cannot read the record locks", rc);
        else print_status_of(&l, &s, &ws, &rg, o.json);
    }
    free(rg.v);
    free(ws.v);
    free(s.people);
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
    cli_lock *nv = cli_grow(s->v, s->n, &s->cap, sizeof *nv, 16);
    if (nv == NULL) {
        s->nomem = 1;
        return 1;
    }
    s->v = nv;
    snprintf(s->v[s->n].name, sizeof s->v[s->n].name, "%s", name);
    s->v[s->n].info = *info;
    s->n++;
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const cli_lock *)a)->name, ((const cli_lock *)b)->name);
}

/* Columns of the list table. */
enum {
    C_NAME,
    C_STATE,
    C_HOST,
    C_PID,
    C_TID,
    C_ACQ,
    C_HELD,
    C_LEASE,
    C_FENCE,
    C_SHARED,
    C_WAIT,
    C_ROBUST,
    C_DELAY,
    NCOL
};
static const char *const col_head[NCOL] = { "NAME",  "STATE", "HOST",   "PID",     "TID",    "ACQUIRED", "HELD",
                                            "LEASE", "FENCE", "SHARED", "WAITING", "ROBUST", "DELAY" };
/* A cell's text before it is kept: a name or a host made safe may take 4
 * bytes for each of its own (cli_fmt_safe), and is printed whole. */
#define CELL (DLOCK_NAME_MAX * 4 + 8)

/* Display width: characters, not bytes (cells are UTF-8 after cli_fmt_safe). */
static size_t width(const char *s) {
    size_t w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

/* A table of n rows of ncol cells (cell[r * ncol + k]), each cell its own
 * string: as long as its text, so that a long name costs only its row. */
typedef struct cells {
    char **cell;
    size_t n;
    int ncol, nomem;
} cells;

static int cells_make(cells *t, size_t n, int ncol) {
    t->cell = calloc(n ? n * (size_t)ncol : 1, sizeof *t->cell);
    t->n = n;
    t->ncol = ncol;
    t->nomem = t->cell == NULL;
    return t->nomem;
}

/* Row r's cell k: v, or "-" if the copy fails (t->nomem says so). */
static void cells_set(cells *t, size_t r, int k, const char *v) {
    char **c = &t->cell[r * (size_t)t->ncol + (size_t)k];
    free(*c);
    if ((*c = strdup(v)) == NULL) t->nomem = 1;
}

static const char *cells_get(const cells *t, size_t r, int k) {
    const char *v = t->cell[r * (size_t)t->ncol + (size_t)k];
    return v != NULL ? v : "-";
}

static void cells_free(cells *t) {
    size_t i;
    for (i = 0; t->cell != NULL && i < t->n * (size_t)t->ncol; i++) free(t->cell[i]);
    free(t->cell);
}

static void row_of(const cli_lock *l, cells *t, size_t r) {
    const dlock_lock_info_t *i = &l->info;
    char b[CELL];
    cells_set(t, r, C_NAME, cli_fmt_safe(b, sizeof b, l->name));
    cells_set(t, r, C_STATE, cli_state(i));
    if (i->held) {
        cells_set(t, r, C_HOST, cli_fmt_safe(b, sizeof b, i->host[0] ? i->host : "?"));
        snprintf(b, sizeof b, "%ld", i->pid);
        cells_set(t, r, C_PID, b);
        snprintf(b, sizeof b, "%lu", i->tid);
        cells_set(t, r, C_TID, b);
        if (i->since_ms > 0) {
            cells_set(t, r, C_ACQ, cli_fmt_local(b, sizeof b, i->since_ms));
            cells_set(t, r, C_HELD, cli_fmt_secs(b, sizeof b, cli_held_ms(i)));
        }
        cells_set(t, r, C_LEASE, cli_fmt_dur(b, sizeof b, i->lease_left_ms));
        if (i->fence != 0) { /* else "-" */
            snprintf(b, sizeof b, "%llu", (unsigned long long)i->fence);
            cells_set(t, r, C_FENCE, b);
        }
    }
    snprintf(b, sizeof b, "%u", i->readers);
    cells_set(t, r, C_SHARED, b);
    snprintf(b, sizeof b, "%u", i->writers_waiting);
    cells_set(t, r, C_WAIT, b);
    if (i->robust_state != 0) cells_set(t, r, C_ROBUST, cli_robust(i));
    /* its last hold ended without a release: nobody gets it for this long yet */
    if (i->delay_left_ms > 0) cells_set(t, r, C_DELAY, cli_fmt_dur(b, sizeof b, i->delay_left_ms));
}

/* The table: the heads, then its rows, each column as wide as its widest
 * cell, the last one not padded (ncol at most NCOL). */
static void print_cells(const char *const *head, const cells *t) {
    size_t w[NCOL], r;
    int k;
    for (k = 0; k < t->ncol; k++) w[k] = width(head[k]);
    for (r = 0; r < t->n; r++)
        for (k = 0; k < t->ncol; k++)
            if (width(cells_get(t, r, k)) > w[k]) w[k] = width(cells_get(t, r, k));
    for (k = 0; k < t->ncol; k++) printf("%s%-*s", k ? "  " : "", k == t->ncol - 1 ? 0 : (int)w[k], head[k]);
    putchar('\n');
    for (r = 0; r < t->n; r++) {
        for (k = 0; k < t->ncol; k++) {
            const char *v = cells_get(t, r, k);
            size_t pad = k == t->ncol - 1 ? 0 : w[k] - width(v);
            printf("%s%s%*s", k ? "  " : "", v, (int)pad, "");
        }
        putchar('\n');
    }
}

/* Prints t, or says it could not (out of memory); frees it. */
static void print_done(const char *const *head, cells *t) {
    if (t->nomem) cli_msg("out of memory");
    else print_cells(head, t);
    cells_free(t);
}

static void print_table(const lock_set *s) {
    cells t;
    size_t r;
    if (cells_make(&t, s->n, NCOL) == 0)
        for (r = 0; r < s->n; r++) row_of(&s->v[r], &t, r);
    print_done(col_head, &t);
}

/* The semaphores dlock_sem_list found. */
typedef struct sem_set {
    cli_sem *v;
    size_t n, cap;
    int nomem;
} sem_set;

static int collect_sem(const char *name, const dlock_sem_info_t *info, void *arg) {
    sem_set *s = arg;
    cli_sem *nv = cli_grow(s->v, s->n, &s->cap, sizeof *nv, 16);
    if (nv == NULL) {
        s->nomem = 1;
        return 1;
    }
    s->v = nv;
    memset(&s->v[s->n], 0, sizeof s->v[s->n]);
    snprintf(s->v[s->n].name, sizeof s->v[s->n].name, "%s", name);
    s->v[s->n].info = *info;
    s->n++;
    return 0;
}

static int sem_by_name(const void *a, const void *b) {
    return strcmp(((const cli_sem *)a)->name, ((const cli_sem *)b)->name);
}

/* Every semaphore matching glob into ss, sorted: 0, or an exit code.
 * A deployment without semaphores (Redlock) has none. */
static int list_sems(dlock_client_t *c, const char *glob, sem_set *ss) {
    int rc = dlock_sem_list(c, glob, collect_sem, ss);
    if (rc == 0 && ss->nomem) rc = ENOMEM;
    if (rc == ENOTSUP) return 0;
    if (rc != 0) return cli_fail("cannot list the semaphores", rc);
    if (ss->n > 1) qsort(ss->v, ss->n, sizeof *ss->v, sem_by_name);
    return 0;
}

/* The semaphores' table: NAME KIND VALUE WAITING LEASED. */
static void print_sem_table(const sem_set *ss) {
    enum { S_NAME, S_KIND, S_VALUE, S_WAIT, S_LEASED, NSCOL };
    static const char *const head[NSCOL] = { "NAME", "KIND", "VALUE", "WAITING", "LEASED" };
    char b[CELL];
    cells t;
    size_t r;
    if (cells_make(&t, ss->n, NSCOL) == 0) {
        for (r = 0; r < ss->n; r++) {
            const dlock_sem_info_t *i = &ss->v[r].info;
            cells_set(&t, r, S_NAME, cli_fmt_safe(b, sizeof b, ss->v[r].name));
            cells_set(&t, r, S_KIND, i->exists ? "semaphore" : "semaphore (unlinked)");
            snprintf(b, sizeof b, "%d", i->value);
            cells_set(&t, r, S_VALUE, b);
            snprintf(b, sizeof b, "%u", i->waiters);
            cells_set(&t, r, S_WAIT, b);
            snprintf(b, sizeof b, "%u", i->leased);
            cells_set(&t, r, S_LEASED, b);
        }
    }
    print_done(head, &t);
}

/* The list as one JSON array sorted by name (a lock before a semaphore
 * of the same name), each with its "kind"; the record-lock tables after
 * them, sorted by name. */
static void print_list_json(const lock_set *s, const sem_set *ss, const cli_tables *ts) {
    size_t i = 0, j = 0;
    putchar('[');
    while (i < s->n || j < ss->n) {
        if (i + j > 0) putchar(',');
        if (j >= ss->n || (i < s->n && strcmp(s->v[i].name, ss->v[j].name) <= 0)) {
            putchar('{');
            cli_json_lock_fields(stdout, &s->v[i++]);
            fputs(",\"kind\":\"lock\"}", stdout);
        } else {
            cli_json_sem(stdout, &ss->v[j++]);
        }
    }
    for (j = 0; j < ts->n; j++) {
        if (i + ss->n + j > 0) putchar(',');
        cli_table_json(stdout, &ts->v[j]);
    }
    puts("]");
}

static void print_list(const admin_opts *o, const lock_set *s, const sem_set *ss, const cli_tables *ts) {
    if (o->json)
        print_list_json(s, ss, ts);
    else if (s->n == 0 && ss->n == 0 && ts->n == 0)
        puts(o->arg ? "no lock held, no semaphore and no record lock matches"
                    : "no lock is held, no semaphore exists and no record lock is held");
    if (o->json || s->n + ss->n + ts->n == 0) return;
    if (s->n > 0) print_table(s);
    if (s->n > 0 && ss->n > 0) putchar('\n');
    if (ss->n > 0) print_sem_table(ss);
    if (s->n + ss->n > 0 && ts->n > 0) putchar('\n');
    if (ts->n > 0) cli_tables_print(ts);
}

int cli_list(int argc, char **argv, cli_conn *conn) {
    dlock_client_t *c = NULL;
    lock_set s = { NULL, 0, 0, 0 };
    sem_set ss = { NULL, 0, 0, 0 };
    cli_tables ts = { NULL, 0, 0, 0 };
    admin_opts o;
    int rc;

    if ((rc = parse(argc, argv, conn, "list", &o)) != 0) return rc < 0 ? 0 : rc;
    if ((rc = cli_client(conn, 0, &c)) != 0) return rc;
    if ((rc = list_sems(c, o.arg, &ss)) != 0) goto out;
    if ((rc = cli_tables_read(c, o.arg, &ts)) != 0) {
        rc = cli_fail("cannot list the record locks", rc);
        goto out;
    }
    rc = dlock_list(c, o.arg, collect, &s);
    if (rc == 0 && s.nomem) rc = ENOMEM;
    if (rc != 0 && (rc != ENOLCK || s.n == 0)) {
        rc = cli_fail("cannot list the locks", rc);
    } else {
        /* ENOLCK with locks found: a Redlock quorum did not answer.  What
         * was found is shown, then that the list is incomplete (exit 69). */
        int partial = rc;
        if (s.n > 1) qsort(s.v, s.n, sizeof *s.v, by_name);
        print_list(&o, &s, &ss, &ts);
        if (partial != 0) {
            fflush(stdout);
            rc = cli_fail("the list is incomplete", partial);
        }
    }
out:
    free(s.v);
    free(ss.v);
    free(ts.v);
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

/* Asks on the terminal about the semaphore's reset or removal; 1 for
 * yes. */
static int confirm_sem(const cli_sem *s, int unlink) {
    char name[DLOCK_NAME_MAX * 4 + 8], who[512], line[64];
    const dlock_sem_info_t *i = &s->info;
    const dlock_sem_owner_t *first = NULL;
    size_t k;

    cli_fmt_safe(name, sizeof name, s->name);
    for (k = 0; k < s->npeople && first == NULL; k++)
        if (s->people[k].kind == DLOCK_SEM_LEASED) first = &s->people[k];
    if (unlink)
        fprintf(stderr, "Remove the semaphore '%s' (value %d, %u waiting, %u units leased)? Its waiters go on "
                "waiting for a post or a new init. [y/N] ", name, i->value, i->waiters, i->leased);
    else if (i->leased > 0 && first != NULL)
        fprintf(stderr, "Take back the %u units of the semaphore '%s' leased under undo (by %s%s)? Their holders "
                "lose them. [y/N] ", i->leased, name, cli_fmt_person(who, sizeof who, first),
                i->leased > 1 ? " and others" : "");
    else
        fprintf(stderr, "The semaphore '%s' has no unit leased under undo; break it anyway? [y/N] ", name);
    fflush(stderr);
    if (fgets(line, sizeof line, stdin) == NULL) return 0;
    line[strcspn(line, "\r\n")] = '\0';
    return strcasecmp(line, "y") == 0 || strcasecmp(line, "yes") == 0;
}

/* What break --sem / --unlink did, for people or as JSON. */
static void report_sem(const admin_opts *o, const cli_sem *s, unsigned back) {
    char name[DLOCK_NAME_MAX * 4 + 8];
    if (o->json) {
        fputs("{\"name\":", stdout);
        cli_json_str(stdout, o->arg);
        printf(",\"kind\":\"semaphore\",\"broken\":true,\"how\":\"%s\"", o->unlink ? "unlink" : "takeback");
        if (!o->unlink) printf(",\"taken_back\":%u", back);
        fputs(",\"before\":", stdout);
        cli_json_sem(stdout, s);
        puts("}");
        return;
    }
    cli_fmt_safe(name, sizeof name, o->arg);
    if (o->unlink)
        printf("removed the semaphore '%s' (its value was %d); its %u waiters go on waiting for a post or a new "
               "init\n", name, s->info.value, s->info.waiters);
    else if (back > 0)
        printf("took back %u units of the semaphore '%s' leased under undo; their holders lose them\n", back, name);
    else
        printf("the semaphore '%s' had no unit leased under undo: nothing taken back\n", name);
}

/* break --sem (take back the units leased under undo) or --unlink. */
static int break_sem(dlock_client_t *c, const admin_opts *o) {
    char name[DLOCK_NAME_MAX * 4 + 8];
    unsigned back = 0;
    cli_sem s;
    int rc;

    cli_fmt_safe(name, sizeof name, o->arg);
    if ((rc = sem_read(c, o->arg, &s)) != 0) {
        rc = cli_fail("cannot read the semaphore", rc);
    } else if (!s.info.exists) {
        cli_msg("no semaphore '%s'", name);
        rc = CLI_EXIT_CONFLICT;
    } else if (!o->force && !confirm_sem(&s, o->unlink)) {
        fprintf(stderr, "%s: not broken\n", cli_prog);
        rc = CLI_EXIT_CONFLICT;
    } else if ((rc = o->unlink ? dlock_sem_unlink(c, o->arg) : dlock_sem_break(c, o->arg, &back)) == ENOENT) {
        cli_msg("no semaphore '%s' (removed meanwhile)", name);
        rc = CLI_EXIT_CONFLICT;
    } else if (rc != 0) {
        rc = cli_fail(o->unlink ? "cannot remove the semaphore" : "cannot break the semaphore", rc);
    } else {
        report_sem(o, &s, back);
    }
    free(s.people);
    return rc;
}

/* A lock break of a name whose lock has nothing to break, but that is a
 * semaphore: says how to reach the semaphore. */
static void hint_sem(dlock_client_t *c, const cli_lock *l) {
    char name[DLOCK_NAME_MAX * 4 + 8];
    dlock_sem_info_t i;
    if (!lock_idle(&l->info) || dlock_sem_info(c, l->name, &i) != 0 || !i.exists) return;
    fprintf(stderr, "%s: note: '%s' is a semaphore (value %d): --sem takes back its units leased under undo, "
            "--unlink removes it\n", cli_prog, cli_fmt_safe(name, sizeof name, l->name), i.value);
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
    if (o.sem || o.unlink) {
        rc = break_sem(c, &o);
        goto out;
    }
    if (o.ranges) {
        rc = cli_ranges_break(c, o.arg, o.owner, o.force, o.json);
        goto out;
    }
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", o.arg);
    cli_fmt_safe(name, sizeof name, o.arg);
    if ((rc = dlock_lock_info(c, o.arg, &l.info)) != 0) {
        rc = cli_fail("cannot read the lock", rc);
        goto out;
    }
    hint_sem(c, &l);
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
