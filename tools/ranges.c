/* ranges.c -- the record-lock tables in `dlock status`, `list` and
 * `break`: the byte ranges the preload keeps on the server for fcntl and
 * lockf locks on a mapped file (docs/preload.md, "Record locks"), under
 * the lock name NAME#fcntl.  A user names the file's lock (NAME) or the
 * table itself (NAME#fcntl); both reach the table.  Read with
 * dlock_range_list and dlock_range_tables, cleared with
 * dlock_range_break.
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

/* The table's lock name for what the user typed: NAME#fcntl. */
static void table_name(char *buf, size_t n, const char *name) {
    size_t len = strlen(name);
    if (len >= 6 && strcmp(name + len - 6, "#fcntl") == 0) snprintf(buf, n, "%s", name);
    else snprintf(buf, n, "%s#fcntl", name);
}

static int range_add(const dlock_range_t *r, void *arg) {
    cli_ranges *s = arg;
    dlock_range_t *nv = cli_grow(s->v, s->n, &s->cap, sizeof *nv, 16);
    if (nv == NULL) {
        s->nomem = 1;
        return 1;
    }
    s->v = nv;
    s->v[s->n++] = *r;
    return 0;
}

int cli_ranges_read(dlock_client_t *c, const char *name, cli_ranges *out) {
    int rc;
    memset(out, 0, sizeof *out);
    if (strlen(name) + 6 > DLOCK_NAME_MAX) return 0; /* no table can have that name */
    table_name(out->table, sizeof out->table, name);
    rc = dlock_range_list(c, out->table, range_add, out);
    if (rc == ENOTSUP) return 0; /* Redlock keeps none */
    if (rc == 0 && out->nomem) rc = ENOMEM;
    out->known = rc == 0;
    return rc;
}

/* "bytes 0-99", "bytes 100-EOF" */
static char *fmt_span(char *buf, size_t n, const dlock_range_t *r) {
    if (r->end >= DLOCK_RANGE_EOF) snprintf(buf, n, "bytes %llu-EOF", (unsigned long long)r->start);
    else snprintf(buf, n, "bytes %llu-%llu", (unsigned long long)r->start, (unsigned long long)r->end);
    return buf;
}

void cli_ranges_print(const cli_ranges *s) {
    char name[DLOCK_NAME_MAX * 4 + 8], host[1024], span[96], left[64];
    size_t i;
    printf("%-16s %s\n", "record locks", cli_fmt_safe(name, sizeof name, s->table));
    for (i = 0; i < s->n; i++) {
        const dlock_range_t *r = &s->v[i];
        cli_fmt_safe(host, sizeof host, r->host[0] ? r->host : "?");
        if (r->cached) {
            printf("  %s, pid %ld: keeps the cache (locks any range without asking; hands its ranges back when "
                   "another owner asks), lease left %s (owner %s)\n", host, r->pid,
                   cli_fmt_dur(left, sizeof left, r->lease_left_ms), r->owner);
            continue;
        }
        printf("  %s, pid %ld: %s %s %s, lease left %s (owner %s)\n", host, r->pid, r->waiting ? "waits for" : "holds",
               r->write ? "write" : "read", fmt_span(span, sizeof span, r),
               cli_fmt_dur(left, sizeof left, r->lease_left_ms), r->owner);
    }
}

void cli_ranges_json(FILE *f, const cli_ranges *s) {
    size_t i;
    if (!s->known) {
        fputs("null", f);
        return;
    }
    fputc('[', f);
    for (i = 0; i < s->n; i++) {
        const dlock_range_t *r = &s->v[i];
        if (i > 0) fputc(',', f);
        fputs("{\"owner\":", f);
        cli_json_str(f, r->owner);
        fputs(",\"host\":", f);
        cli_json_str(f, r->host);
        fprintf(f, ",\"pid\":%ld,\"start\":%llu,\"end\":", r->pid, (unsigned long long)r->start);
        if (r->end >= DLOCK_RANGE_EOF) fputs("null", f);
        else fprintf(f, "%llu", (unsigned long long)r->end);
        fprintf(f, ",\"type\":\"%s\",\"waiting\":%s,\"cached\":%s,\"lease_left_ms\":%lld}",
                r->write ? "write" : "read", r->waiting ? "true" : "false", r->cached ? "true" : "false",
                (long long)r->lease_left_ms);
    }
    fputc(']', f);
}

/* ---------------------------------------------------------------- list */

static int table_add(const char *name, unsigned owners, unsigned ranges, void *arg) {
    cli_tables *s = arg;
    cli_table *nv = cli_grow(s->v, s->n, &s->cap, sizeof *nv, 16);
    if (nv == NULL) {
        s->nomem = 1;
        return 1;
    }
    s->v = nv;
    snprintf(s->v[s->n].name, sizeof s->v[s->n].name, "%s", name);
    s->v[s->n].owners = owners;
    s->v[s->n].ranges = ranges;
    s->n++;
    return 0;
}

static int table_by_name(const void *a, const void *b) {
    return strcmp(((const cli_table *)a)->name, ((const cli_table *)b)->name);
}

int cli_tables_read(dlock_client_t *c, const char *glob, cli_tables *out) {
    int rc;
    memset(out, 0, sizeof *out);
    rc = dlock_range_tables(c, NULL, table_add, out);
    if (rc == ENOTSUP) return 0;
    if (rc == 0 && out->nomem) rc = ENOMEM;
    if (rc != 0) return rc;
    if (glob != NULL) { /* a glob for a file's lock name finds its table (NAME#fcntl) too */
        size_t i, k = 0;
        for (i = 0; i < out->n; i++) {
            char base[DLOCK_NAME_MAX + 1];
            snprintf(base, sizeof base, "%s", out->v[i].name);
            if (strlen(base) >= 6 && strcmp(base + strlen(base) - 6, "#fcntl") == 0) base[strlen(base) - 6] = '\0';
            if (fnmatch(glob, out->v[i].name, 0) == 0 || fnmatch(glob, base, 0) == 0) out->v[k++] = out->v[i];
        }
        out->n = k;
    }
    if (out->n > 1) qsort(out->v, out->n, sizeof *out->v, table_by_name);
    return 0;
}

void cli_tables_print(const cli_tables *s) {
    char name[DLOCK_NAME_MAX * 4 + 8];
    size_t i, w = 4;
    for (i = 0; i < s->n; i++)
        if (strlen(cli_fmt_safe(name, sizeof name, s->v[i].name)) > w) w = strlen(name);
    printf("%-*s  %-12s  %-6s  %s\n", (int)w, "NAME", "KIND", "OWNERS", "RANGES");
    for (i = 0; i < s->n; i++)
        printf("%-*s  %-12s  %-6u  %u\n", (int)w, cli_fmt_safe(name, sizeof name, s->v[i].name), "record locks",
               s->v[i].owners, s->v[i].ranges);
}

void cli_table_json(FILE *f, const cli_table *t) {
    fputs("{\"name\":", f);
    cli_json_str(f, t->name);
    fprintf(f, ",\"kind\":\"record locks\",\"owners\":%u,\"ranges\":%u}", t->owners, t->ranges);
}

/* --------------------------------------------------------------- break */

/* Asks on the terminal; 1 for yes. */
static int confirm_ranges(const cli_ranges *s, const char *owner) {
    char name[DLOCK_NAME_MAX * 4 + 8], line[64];
    fprintf(stderr, "Clear the record locks of %s in '%s' (%zu ranges now)? Their owners lose them. [y/N] ",
            owner != NULL ? owner : "every owner", cli_fmt_safe(name, sizeof name, s->table), s->n);
    fflush(stderr);
    if (fgets(line, sizeof line, stdin) == NULL) return 0;
    line[strcspn(line, "\r\n")] = '\0';
    return strcasecmp(line, "y") == 0 || strcasecmp(line, "yes") == 0;
}

int cli_ranges_break(dlock_client_t *c, const char *name, const char *owner, int force, int json) {
    char shown[DLOCK_NAME_MAX * 4 + 8];
    unsigned dropped = 0;
    cli_ranges s;
    int rc;
    if ((rc = cli_ranges_read(c, name, &s)) != 0) {
        rc = cli_fail("cannot read the record locks", rc);
    } else if (!s.known) {
        cli_msg("no record locks are kept on this deployment (Redlock)");
        rc = CLI_EXIT_CONFLICT;
    } else if (!force && !confirm_ranges(&s, owner)) {
        fprintf(stderr, "%s: not broken\n", cli_prog);
        rc = CLI_EXIT_CONFLICT;
    } else if ((rc = dlock_range_break(c, s.table, owner, &dropped)) != 0) {
        rc = cli_fail("cannot clear the record locks", rc);
    } else if (json) {
        fputs("{\"name\":", stdout);
        cli_json_str(stdout, s.table);
        printf(",\"kind\":\"record locks\",\"broken\":true,\"owners_dropped\":%u,\"before\":", dropped);
        cli_ranges_json(stdout, &s);
        puts("}");
    } else if (dropped > 0) {
        printf("cleared the record locks of %u owner%s in '%s'; each learns it lost them at its next renewal\n",
               dropped, dropped == 1 ? "" : "s", cli_fmt_safe(shown, sizeof shown, s.table));
    } else {
        printf("'%s' had no record locks%s%s: nothing cleared\n", cli_fmt_safe(shown, sizeof shown, s.table),
               owner != NULL ? " of " : "", owner != NULL ? owner : "");
    }
    free(s.v);
    return rc;
}
