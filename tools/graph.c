/* graph.c -- `dlock graph`: who waits for which lock, held by whom, with
 * any cycle of waits marked (a deadlock, or one about to be broken by its
 * victim's EDEADLK).
 *
 * From the public API only: dlock_list finds the held locks (SCAN, every
 * master of a cluster), dlock_lock_info says who holds each, and
 * dlock_lock_waiters who waits for it.  A thread is "host:pid:tid".  A
 * cycle is followed through exclusive holders: a thread waits for a lock,
 * whose writer (or mutex holder) waits for another, ... back to the first.
 * Read holders are counted, not named (dlock_lock_info does not name
 * them), so a cycle through a read lock is not marked here -- the
 * library's own detection follows readers too.  The locks are read one
 * after the other: a picture of a moving graph, not an instant of it.
 * --json prints it for scripts, --dot for Graphviz.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct glock {
    char name[DLOCK_NAME_MAX + 1];
    dlock_lock_info_t info;
    dlock_lock_waiter_t *w;
    int *cyc; /* per waiter: in a cycle */
    size_t nw;
} glock;

typedef struct graph {
    glock *v;
    size_t n, cap;
    int nomem;
} graph;

static int graph_collect(const char *name, const dlock_lock_info_t *info, void *arg) {
    graph *g = arg;
    glock *nv = cli_grow(g->v, g->n, &g->cap, sizeof *nv, 32);
    if (nv == NULL) {
        g->nomem = 1;
        return 1;
    }
    g->v = nv;
    memset(&g->v[g->n], 0, sizeof g->v[g->n]);
    snprintf(g->v[g->n].name, sizeof g->v[g->n].name, "%s", name);
    g->v[g->n].info = *info;
    g->n++;
    return 0;
}

static int add_waiter(const dlock_lock_waiter_t *w, void *arg) {
    glock *l = arg;
    dlock_lock_waiter_t *nv = realloc(l->w, (l->nw + 1) * sizeof *nv);
    int *nc = realloc(l->cyc, (l->nw + 1) * sizeof *nc);
    if (nv != NULL) l->w = nv;
    if (nc != NULL) l->cyc = nc;
    if (nv == NULL || nc == NULL) return 1;
    l->w[l->nw] = *w;
    l->cyc[l->nw++] = 0;
    return 0;
}

static void graph_free(graph *g) {
    size_t i;
    for (i = 0; i < g->n; i++) {
        free(g->v[i].w);
        free(g->v[i].cyc);
    }
    free(g->v);
}

static int same(const char *host1, long pid1, unsigned long tid1, const char *host2, long pid2, unsigned long tid2) {
    return pid1 == pid2 && tid1 == tid2 && strcmp(host1, host2) == 0;
}

/* The lock the thread waits for, and which of its waiters it is: 1, or 0. */
static int waits_for(const graph *g, const char *host, long pid, unsigned long tid, size_t *li, size_t *wi) {
    size_t i, j;
    for (i = 0; i < g->n; i++)
        for (j = 0; j < g->v[i].nw; j++)
            if (same(g->v[i].w[j].host, g->v[i].w[j].pid, g->v[i].w[j].tid, host, pid, tid)) {
                *li = i;
                *wi = j;
                return 1;
            }
    return 0;
}

/* Follows the waits from waiter (li, wi) through exclusive holders; the
 * cycle's steps (lock, waiter) into path, their number, or 0 when the walk
 * does not come back to it. */
static size_t cycle_from(const graph *g, size_t li, size_t wi, size_t *pl, size_t *pw) {
    const dlock_lock_waiter_t *start = &g->v[li].w[wi];
    size_t n = 0, l = li, w = wi;
    while (n <= g->n) {
        const dlock_lock_info_t *h = &g->v[l].info;
        pl[n] = l;
        pw[n++] = w;
        if (!h->held || !waits_for(g, h->host, h->pid, h->tid, &l, &w)) return 0;
        if (same(g->v[l].w[w].host, g->v[l].w[w].pid, g->v[l].w[w].tid, start->host, start->pid, start->tid))
            return n;
    }
    return 0;
}

/* "host:pid:tid" order, for naming each cycle once (from its least member). */
static int thread_cmp(const dlock_lock_waiter_t *a, const dlock_lock_waiter_t *b) {
    int r = strcmp(a->host, b->host);
    if (r != 0) return r;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    return a->tid < b->tid ? -1 : a->tid > b->tid;
}

/* How cycles() prints the cycles it marks. */
enum { OUT_NONE, OUT_TEXT, OUT_JSON };

/* Each cycle once: marks its waiters and prints it as `out` says; how
 * many there are. */
static size_t cycles(graph *g, int out) {
    size_t *pl = calloc(g->n + 1, sizeof *pl), *pw = calloc(g->n + 1, sizeof *pw), i, j, k, n, found = 0;
    char a[160], b[DLOCK_NAME_MAX * 4 + 8];
    if (pl == NULL || pw == NULL) goto out;
    for (i = 0; i < g->n; i++)
        for (j = 0; j < g->v[i].nw; j++) {
            if ((n = cycle_from(g, i, j, pl, pw)) == 0) continue;
            for (k = 1; k < n && thread_cmp(&g->v[pl[k]].w[pw[k]], &g->v[i].w[j]) > 0; k++)
                ;
            if (k < n) continue; /* named from its least member */
            if (out == OUT_JSON) fputs(found ? ",[" : "[", stdout);
            else if (out == OUT_TEXT) printf("%scycle %zu:", found ? "" : "\n", found + 1);
            for (k = 0; k < n; k++) {
                const dlock_lock_waiter_t *w = &g->v[pl[k]].w[pw[k]];
                g->v[pl[k]].cyc[pw[k]] = 1;
                if (out == OUT_JSON) {
                    fputs(k ? ",{\"host\":" : "{\"host\":", stdout);
                    cli_json_str(stdout, w->host);
                    printf(",\"pid\":%ld,\"tid\":%lu,\"waits_for\":", w->pid, w->tid);
                    cli_json_str(stdout, g->v[pl[k]].name);
                    putchar('}');
                } else if (out == OUT_TEXT) {
                    printf(" %s:%ld:%lu waits for '%s' ->", cli_fmt_safe(a, sizeof a, w->host), w->pid, w->tid,
                           cli_fmt_safe(b, sizeof b, g->v[pl[k]].name));
                }
            }
            if (out == OUT_JSON) putchar(']');
            else if (out == OUT_TEXT) printf(" (back to the first)\n");
            found++;
        }
out:
    free(pl);
    free(pw);
    return found;
}

static void print_lock(const glock *l) {
    char a[DLOCK_NAME_MAX * 4 + 8], b[64];
    size_t j;
    printf("%s: ", cli_fmt_safe(a, sizeof a, l->name));
    if (l->info.held) printf("held by %s", cli_fmt_holder(a, sizeof a, &l->info));
    else if (l->info.readers == 0 && l->info.delay_left_ms > 0) /* its waiters wait for the delay's end */
        printf("in its lock-delay, %s left", cli_fmt_dur(b, sizeof b, l->info.delay_left_ms));
    else printf("%u read holder%s", l->info.readers, l->info.readers == 1 ? "" : "s");
    putchar('\n');
    for (j = 0; j < l->nw; j++) {
        const dlock_lock_waiter_t *w = &l->w[j];
        printf("  waiting: %s, pid %ld, thread %lu, %s, %s%s\n", cli_fmt_safe(a, sizeof a, w->host), w->pid, w->tid,
               w->shared ? "shared" : "exclusive", cli_fmt_secs(b, sizeof b, cli_waited_ms(w)),
               l->cyc[j] ? "  [cycle]" : "");
    }
}

static void json_lock(const glock *l, int first) {
    size_t j;
    fputs(first ? "{\"name\":" : ",{\"name\":", stdout);
    cli_json_str(stdout, l->name);
    fputs(",\"holder\":", stdout);
    if (l->info.held) {
        fputs("{\"host\":", stdout);
        cli_json_str(stdout, l->info.host);
        printf(",\"pid\":%ld,\"tid\":%lu}", l->info.pid, l->info.tid);
    } else {
        fputs("null", stdout);
    }
    printf(",\"readers\":%u,\"delay_left_ms\":%lld,\"waiters\":[", l->info.readers, (long long)l->info.delay_left_ms);
    for (j = 0; j < l->nw; j++) {
        if (j > 0) putchar(',');
        cli_json_waiter_open(stdout, &l->w[j]);
        printf(",\"in_cycle\":%s}", l->cyc[j] ? "true" : "false");
    }
    fputs("]}", stdout);
}

/* ------------------------------------------------------------ metrics */

int cli_wait_cycles(dlock_client_t *c, const cli_mlock *v, size_t n, double deadline, size_t *found) {
    graph g;
    size_t i;
    int rc = 0;
    memset(&g, 0, sizeof g);
    *found = 0;
    for (i = 0; i < n && !g.nomem; i++)
        if (v[i].have_info && v[i].info.held) (void)graph_collect(v[i].name, &v[i].info, &g);
    for (i = 0; i < g.n && rc == 0 && !g.nomem; i++) {
        if (deadline > 0 && cli_mono_s() > deadline) {
            rc = ETIMEDOUT;
            break;
        }
        rc = dlock_lock_waiters(c, g.v[i].name, add_waiter, &g.v[i]);
    }
    if (g.nomem) rc = ENOMEM;
    if (rc == 0 || rc == ETIMEDOUT) *found = cycles(&g, OUT_NONE);
    graph_free(&g);
    return rc;
}

/* ---------------------------------------------------------- Graphviz */

/* A thread's node name, "T:host:pid:tid", quoted. */
static void dot_thread(const char *host, long pid, unsigned long tid) {
    fputs("\"T:", stdout);
    cli_quoted_str(stdout, host);
    printf(":%ld:%lu\"", pid, tid);
}

/* 1 if the thread is a waiter marked as in a cycle. */
static int thread_in_cycle(const graph *g, const char *host, long pid, unsigned long tid) {
    size_t li, wi;
    return waits_for(g, host, pid, tid, &li, &wi) && g->v[li].cyc[wi];
}

static void dot_thread_node(const graph *g, const char *host, long pid, unsigned long tid) {
    int red = thread_in_cycle(g, host, pid, tid);
    fputs("  ", stdout);
    dot_thread(host, pid, tid);
    fputs(" [shape=ellipse, label=\"", stdout);
    cli_quoted_str(stdout, host);
    printf("\\npid %ld, thread %lu\"%s];\n", pid, tid, red ? ", color=red, fontcolor=red" : "");
}

/* A lock with waiters: its node, its holder's node and edge ("held by"),
 * each waiter's node and edge ("waits"), red where a cycle runs. */
static void dot_lock(const graph *g, const glock *l) {
    const char *red = ", color=red, fontcolor=red";
    size_t j;
    int in_cycle = 0;
    for (j = 0; j < l->nw; j++) in_cycle |= l->cyc[j];
    fputs("  \"L:", stdout);
    cli_quoted_str(stdout, l->name);
    fputs("\" [shape=box, style=bold, label=\"", stdout);
    cli_quoted_str(stdout, l->name);
    if (!l->info.held && l->info.readers == 0 && l->info.delay_left_ms > 0)
        printf("\\nin its lock-delay, %lld ms left", (long long)l->info.delay_left_ms);
    else if (!l->info.held) printf("\\n%u read holder%s", l->info.readers, l->info.readers == 1 ? "" : "s");
    printf("\"%s];\n", in_cycle ? red : "");
    if (l->info.held) {
        dot_thread_node(g, l->info.host, l->info.pid, l->info.tid);
        fputs("  \"L:", stdout);
        cli_quoted_str(stdout, l->name);
        fputs("\" -> ", stdout);
        dot_thread(l->info.host, l->info.pid, l->info.tid);
        printf(" [label=\"held by\"%s];\n", in_cycle ? red : "");
    }
    for (j = 0; j < l->nw; j++) {
        const dlock_lock_waiter_t *w = &l->w[j];
        dot_thread_node(g, w->host, w->pid, w->tid);
        fputs("  ", stdout);
        dot_thread(w->host, w->pid, w->tid);
        fputs(" -> \"L:", stdout);
        cli_quoted_str(stdout, l->name);
        printf("\" [label=\"waits (%s)\", style=dashed%s];\n", w->shared ? "shared" : "exclusive",
               l->cyc[j] ? red : "");
    }
}

/* The graph for Graphviz (`dlock graph --dot | dot -Tsvg`): locks are
 * boxes, threads ellipses; a lock points at its holder, a waiter at the
 * lock it waits for, so a cycle of waits is a cycle of arrows, in red. */
static void print_dot(const graph *g) {
    size_t i;
    printf("digraph dlock {\n  rankdir=LR;\n  node [fontname=\"sans-serif\"];\n"
           "  edge [fontname=\"sans-serif\", fontsize=10];\n");
    for (i = 0; i < g->n; i++)
        if (g->v[i].nw > 0) dot_lock(g, &g->v[i]);
    printf("}\n");
}

/* Reads the graph: the held locks matching glob, and each one's waiters. */
static int graph_read(dlock_client_t *c, const char *glob, graph *g) {
    size_t i;
    int rc = dlock_list(c, glob, graph_collect, g);
    if (rc == 0 && g->nomem) rc = ENOMEM;
    for (i = 0; i < g->n && rc == 0; i++) {
        rc = dlock_lock_waiters(c, g->v[i].name, add_waiter, &g->v[i]);
        if (rc == ENOTSUP) return rc;
    }
    return rc;
}

/* How the graph is printed. */
enum { FMT_TEXT, FMT_JSON, FMT_DOT };

static int graph_parse(int argc, char **argv, cli_conn *conn, int *fmt, const char **glob) {
    static const struct option longopts[] = {
        CLI_CONN_LONGOPTS,
        { "json", 0, NULL, 'j' },
        { "dot", 0, NULL, 'd' },
        { "help", 0, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "jdhV", longopts, NULL)) != -1) {
        if (cli_conn_opt(opt, optarg, conn)) continue;
        if (opt == 'j' || opt == 'd') {
            if (*fmt != FMT_TEXT && *fmt != (opt == 'j' ? FMT_JSON : FMT_DOT))
                return cli_usage_error("--json and --dot exclude each other");
            *fmt = opt == 'j' ? FMT_JSON : FMT_DOT;
        } else if (opt == 'h') {
            printf("Usage: dlock graph [--json | --dot] [--url URL] [GLOB]\n"
                   "Who waits for which lock, held by whom, for the held locks whose name\n"
                   "matches GLOB (default: all), with any cycle of waits marked.  --dot:\n"
                   "for Graphviz (dlock graph --dot | dot -Tsvg > graph.svg), cycles in red.\n");
            return -1;
        } else {
            if (optopt != 0 && optopt < 0x1000) return cli_usage_error("unknown option '-%c'", optopt);
            return cli_usage_error("unknown option or missing argument '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind > 1) return cli_usage_error("at most one GLOB");
    *glob = optind < argc ? argv[optind] : NULL;
    return 0;
}

int cli_graph(int argc, char **argv, cli_conn *conn) {
    dlock_client_t *c = NULL;
    const char *glob = NULL;
    graph g;
    size_t i, shown = 0;
    int rc, fmt = FMT_TEXT;
    if ((rc = graph_parse(argc, argv, conn, &fmt, &glob)) != 0) return rc < 0 ? 0 : rc;
    if ((rc = cli_client(conn, 0, &c)) != 0) return rc;
    memset(&g, 0, sizeof g);
    if ((rc = graph_read(c, glob, &g)) != 0) {
        rc = cli_fail(rc == ENOTSUP ? "cannot draw the graph (Redlock keeps no waiters)" : "cannot read the graph", rc);
    } else if (fmt == FMT_DOT) {
        cycles(&g, OUT_NONE);
        print_dot(&g);
    } else if (fmt == FMT_JSON) {
        fputs("{\"cycles\":[", stdout);
        cycles(&g, OUT_JSON);
        fputs("],\"locks\":[", stdout);
        for (i = 0; i < g.n; i++)
            if (g.v[i].nw > 0) json_lock(&g.v[i], shown++ == 0);
        fputs("]}\n", stdout);
    } else {
        /* The cycles are found first (they mark the waiters), printed last. */
        cycles(&g, OUT_NONE);
        for (i = 0; i < g.n; i++)
            if (g.v[i].nw > 0 && ++shown) print_lock(&g.v[i]);
        if (shown == 0) printf("nobody waits\n");
        cycles(&g, OUT_TEXT);
    }
    graph_free(&g);
    dlock_client_destroy(c);
    return rc;
}
