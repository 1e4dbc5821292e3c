/* range.c -- the record-lock range tables (backend/lua/range.lua),
 * for the preload's fcntl and lockf hooks (docs/preload.md, "Record
 * locks"): one request on <prefix>{<name>}:rl, through the client's
 * circuit breaker as dlock_lock_info is; and what `dlock status`, `list`
 * and `break` show and clear of them (dlock_range_list, _break).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

int dlock__range(dlock_client_t *c, const char *name, int once, int nargs, const char *const *args,
                 dlock__strs *out) {
    dlock__lock *l;
    int rc, probe = 0;

    out->n = 0;
    out->v = NULL;
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_LOCK, 0, &l)) != 0) return rc;
    if (c->be.ops->range == NULL) {
        rc = dlock__seterr(ENOTSUP, "%s: record locks are not kept on a Redlock deployment",
                           c->be.node.conf.redacted_url);
    } else if ((rc = dlock__breaker_check(&c->be.node, &probe)) == 0) { /* else the breaker is open */
        /* once: one attempt (a non-blocking lock, an unlock), which
         * proves nothing about the server and never opens the breaker */
        dlock__mono ub = dlock__unreachable_deadline(&c->be.node);
        rc = c->be.ops->range(&c->be, &l->k, nargs, args, out, probe || once ? dlock__now() : ub);
        pthread_mutex_lock(&c->mu);
        dlock__breaker_note(&c->be.node, rc, probe || once ? 0 : ub);
        pthread_mutex_unlock(&c->mu);
    }
    dlock__entry_close(c, l, 0);
    return rc;
}

/* The word range_lua leaves for an owner that keeps a table's cache,
 * when another owner meets it: a blocking pop of <lock key>:g:<owner>
 * (the grant lists' wire, backend/grant.c) on a connection of its own,
 * outside the breaker, for up to ms.  1 the word came, 0 not within ms,
 * or an errno value (ENOTSUP: the deployment keeps no such lists, or the
 * server refuses BLPOP). */
int dlock__range_watch(dlock_client_t *c, const char *name, const char *owner, unsigned ms) {
    dlock__grant_pop p;
    dlock__lock *l;
    dlock__mono now, until;
    uint64_t fence;
    unsigned gms;
    int rc, cache, nolist = 0, got = 0;
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_LOCK, 0, &l)) != 0) return rc;
    if (c->be.ops->grant_conn == NULL || c->be.grant_nolist) {
        dlock__entry_close(c, l, 0);
        return ENOTSUP;
    }
    memset(&p, 0, sizeof p);
    now = dlock__now();
    until = now + (dlock__mono)ms * DLOCK__MS;
    rc = dlock__grant_send(&c->be, &l->k, owner, now, until, &p);
    if (rc == 0)
        rc = dlock__grant_await(&p, -1, until + (dlock__mono)dlock__reply_floor_ms(&c->be.node) * DLOCK__MS, NULL);
    dlock__grant_drop(&c->be, &p);
    pthread_mutex_lock(&c->mu);
    dlock__grant_keep(&c->be, &p);
    pthread_mutex_unlock(&c->mu);
    if (p.r != NULL) got = dlock__grant_read(&p, &fence, &gms, &cache, &nolist);
    dlock__entry_close(c, l, 0);
    if (got == 1) return 1;
    if (got == 0 || rc == ETIMEDOUT) return 0;
    if (nolist) return ENOTSUP;
    return rc != 0 ? rc : EPROTO;
}

/* The wait edges of record-lock owners, for a cycle through several
 * files' tables: the backend's waits op on the edge key of id,
 * <prefix>dlw:{<id>} ("eset" rec for ttl_ms, "eget", "edel"); one
 * attempt, outside the breaker's count. */
int dlock__range_edge(dlock_client_t *c, const char *op, const char *id, const char *rec, unsigned ttl_ms,
                      dlock__strs *out) {
    int rc, probe = 0;
    out->n = 0;
    out->v = NULL;
    if ((c = dlock__client_get(c, &rc)) == NULL) return rc;
    if (c->be.ops->waits == NULL)
        return dlock__seterr(ENOTSUP, "%s: no wait edges kept on a Redlock deployment", c->be.node.conf.redacted_url);
    if ((rc = dlock__breaker_check(&c->be.node, &probe)) != 0) return rc;
    return c->be.ops->waits(&c->be, NULL, op, id, rec, ttl_ms, out, dlock__now());
}

/* ------------------------------------------------- the tables, for people */

/* The fields of one owner's record, "EXPIRY|WHO|WAITED|WANTS|RANGES"
 * (range_lua), into r (its ranges left to the caller): 0, or -1 when it
 * is not one. */
static int record_parse(const char *owner, const char *rec, int64_t now, dlock_range_t *r, const char **wants,
                        const char **ranges) {
    const char *bar[4], *p = rec, *colon;
    size_t i, n;
    memset(r, 0, sizeof *r);
    for (i = 0; i < 4; i++) {
        if ((p = strchr(p, '|')) == NULL) return -1;
        bar[i] = p++;
    }
    snprintf(r->owner, sizeof r->owner, "%s", owner);
    r->server_now_ms = now;
    r->lease_left_ms = strtoll(rec, NULL, 10) - now;
    if (r->lease_left_ms < 0) r->lease_left_ms = 0;
    /* WHO is host:pid; a host name holds no '|' (the shim cuts it there) */
    n = (size_t)(bar[1] - bar[0] - 1);
    if (n >= sizeof r->host) n = sizeof r->host - 1;
    memcpy(r->host, bar[0] + 1, n);
    r->host[n] = '\0';
    if ((colon = strrchr(r->host, ':')) != NULL) {
        r->pid = strtol(colon + 1, NULL, 10);
        r->host[colon - r->host] = '\0';
    }
    /* a written request counts while its owner asked within a second */
    *wants = NULL;
    if (strtoll(bar[1] + 1, NULL, 10) > 0 && now - strtoll(bar[1] + 1, NULL, 10) < 1000 && bar[2][1] != '|')
        *wants = bar[2] + 1;
    *ranges = bar[3] + 1;
    return 0;
}

/* "START:END:TYPE" at *p into r, *p moved past it and its comma: 0, or -1
 * at the end. */
static int segment_next(const char **p, dlock_range_t *r) {
    char *end;
    unsigned long long s, e;
    long ty;
    s = strtoull(*p, &end, 10);
    if (end == *p || *end != ':') return -1;
    e = strtoull(end + 1, &end, 10);
    if (*end != ':') return -1;
    ty = strtol(end + 1, &end, 10);
    r->start = s;
    r->end = e;
    r->write = ty == 2;
    *p = *end == ',' ? end + 1 : end;
    return 0;
}

int dlock__range_table(dlock_client_t *c, const char *name, dlock__strs *out) {
    const char *const args[] = { "show", "", "0", "0", "0", "0", "", "0", "" };
    int rc = dlock__range(c, name, 0, 9, args, out);
    if (rc == 0 && (out->n < 1 || out->n % 2 != 1)) {
        dlock__strs_free(out);
        rc = dlock__seterr(EPROTO, "range: unexpected answer to show");
    }
    return rc;
}

void dlock__range_count(const dlock__strs *t, unsigned *owners, unsigned *ranges) {
    size_t i;
    *owners = *ranges = 0;
    for (i = 1; i + 1 < t->n; i += 2) {
        dlock_range_t r;
        const char *wants, *p;
        if (record_parse(t->v[i], t->v[i + 1], 0, &r, &wants, &p) != 0) continue;
        (*owners)++;
        while (segment_next(&p, &r) == 0) (*ranges)++;
    }
}

DLOCK_API int dlock_range_list(dlock_client_t *c, const char *name, int (*fn)(const dlock_range_t *r, void *arg),
                               void *arg) {
    dlock__strs t;
    size_t i;
    int rc, stop = 0;
    if (fn == NULL) return dlock__seterr(EINVAL, "callback is NULL");
    if ((rc = dlock__range_table(c, name, &t)) != 0) return rc;
    for (i = 1; i + 1 < t.n && !stop; i += 2) {
        dlock_range_t r;
        const char *wants, *p;
        const char *bar;
        if (record_parse(t.v[i], t.v[i + 1], strtoll(t.v[0], NULL, 10), &r, &wants, &p) != 0) continue;
        if ((bar = strchr(p, '|')) != NULL && bar[1] == '1') { /* "RANGES|1": the owner keeps the cache */
            r.start = 0;
            r.end = DLOCK_RANGE_EOF;
            r.write = r.cached = 1;
            stop = fn(&r, arg) != 0;
            r.cached = 0;
        }
        while (!stop && segment_next(&p, &r) == 0) stop = fn(&r, arg) != 0;
        if (!stop && wants != NULL && segment_next(&wants, &r) == 0) {
            r.waiting = 1;
            stop = fn(&r, arg) != 0;
        }
    }
    dlock__strs_free(&t);
    return 0;
}

DLOCK_API int dlock_range_break(dlock_client_t *c, const char *name, const char *owner, unsigned *dropped) {
    const char *args[] = { "drop", owner != NULL ? owner : "", "0", "0", "0", "0", "", "0", "" };
    dlock__strs out;
    int rc;
    if (dropped != NULL) *dropped = 0;
    if ((rc = dlock__range(c, name, 0, 9, args, &out)) != 0) return rc;
    if (out.n >= 2 && dropped != NULL) *dropped = (unsigned)strtoul(out.v[1], NULL, 10);
    dlock__strs_free(&out);
    return 0;
}
