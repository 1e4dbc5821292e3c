/* figures.c -- the single-server side of the live figures and of the
 * administrative listing: the figures' key, a flush (stats.lua "add") and
 * a read (stats.lua "read") on one server, the parse of a read's answer,
 * and the SCAN that tools and dlock_list walk the keys with.  The ops
 * table that runs them is backend.c's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

char *dlock__stats_key(const dlock__backend *c) {
    static const char tag[] = "{dlock-stats}";
    const char *prefix = c->node.conf.prefix != NULL ? c->node.conf.prefix : "";
    size_t n = strlen(prefix);
    char *k = malloc(n + sizeof tag);
    if (k == NULL) return NULL;
    memcpy(k, prefix, n);
    memcpy(k + n, tag, sizeof tag);
    return k;
}

/* An error answer (an ACL's NOPERM, a script error): EPROTO with the
 * server's words.  The connection is in step (it answered this request),
 * so its pool stays, unlike dlock__bad_reply's: a user whose ACL refuses the
 * figures must not lose its idle connections at every flush. */
static int stats_refused(dlock__backend *c, const redisReply *r) {
    if (r == NULL || r->type != REDIS_REPLY_ERROR) return 0;
    return dlock__seterr(EPROTO, "%s: live figures refused by the server: %.200s", c->node.conf.redacted_url,
                         r->str != NULL ? r->str : "");
}

/* One flush: one EVALSHA, one round trip. */
int dlock__single_stats_add(dlock__backend *c, const char *payload, size_t len, dlock__mono deadline) {
    const char *args[5];
    size_t lens[5];
    redisReply *r = NULL;
    char *key = dlock__stats_key(c);
    int rc;
    if (key == NULL) return dlock__seterr(ENOMEM, "out of memory");
    args[0] = key; lens[0] = strlen(key);
    args[1] = "add"; lens[1] = 3;
    args[2] = "70"; lens[2] = 2; /* the figures' expiry: a minute and a little */
    args[3] = payload; lens[3] = len;
    args[4] = "86400"; lens[4] = 5; /* the counters' idle expiry: a day */
    rc = dlock__script_run(c, DLOCK__SCRIPT_STATS, &r, deadline, 1, 5, args, lens, NULL);
    if (rc == 0) rc = stats_refused(c, r);
    if (rc == 0 && r->type != REDIS_REPLY_INTEGER) rc = dlock__bad_reply(c, "stats", r);
    freeReplyObject(r);
    free(key);
    return rc;
}

int dlock__single_stats_read(dlock__backend *c, unsigned window_s, dlock__figs *out, size_t max, size_t *n,
                             dlock__mono deadline) {
    const char *args[4];
    size_t lens[4];
    char w[DLOCK__DEC_MAX], m[DLOCK__DEC_MAX];
    redisReply *r = NULL;
    char *key = dlock__stats_key(c);
    int rc;
    if (key == NULL) return dlock__seterr(ENOMEM, "out of memory");
    args[0] = key; lens[0] = strlen(key);
    args[1] = "read"; lens[1] = 4;
    args[2] = w; lens[2] = dlock__dec(w, window_s);
    args[3] = m; lens[3] = dlock__dec(m, max);
    rc = dlock__script_run(c, DLOCK__SCRIPT_STATS, &r, deadline, 1, 4, args, lens, NULL);
    if (rc == 0) rc = stats_refused(c, r);
    if (rc == 0 && dlock__figs_parse(r, out, max, n) != 0) rc = dlock__bad_reply(c, "stats", r);
    freeReplyObject(r);
    free(key);
    return rc;
}

/* One "field count" of a lock's figures into f: 0, or -1. */
static int figs_field(dlock__figs *f, const redisReply *k, const redisReply *v) {
    uint64_t *hist;
    unsigned long i;
    char *end;
    if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_INTEGER || v->integer < 0 || k->len < 1) return -1;
    if (k->len == 1 && k->str[0] == 'a') f->acq = (uint64_t)v->integer;
    else if (k->len == 1 && k->str[0] == 'r') f->rel = (uint64_t)v->integer;
    else if (k->len == 1 && k->str[0] == 'L') f->lost = (uint64_t)v->integer;
    else if (k->len == 1 && k->str[0] == 'D') f->dead = (uint64_t)v->integer;
    else if (k->len == 1 && k->str[0] == 'R') f->risk = (uint64_t)v->integer;
    else if (k->len == 2 && (k->str[0] == 'W' || k->str[0] == 'H') && k->str[1] == 'S')
        *(k->str[0] == 'W' ? &f->wsum : &f->hsum) = (uint64_t)v->integer;
    else if (k->str[0] == 'W' || k->str[0] == 'H') {
        hist = k->str[0] == 'W' ? f->wcum : f->hcum;
        i = strtoul(k->str + 1, &end, 10);
        if (end != k->str + k->len || end == k->str + 1) return -1;
        if (i >= DLOCK_STATS_BUCKETS) i = DLOCK_STATS_BUCKETS - 1;
        hist[i] += (uint64_t)v->integer;
    } else if (k->str[0] == 'w' || k->str[0] == 'h') {
        hist = k->str[0] == 'w' ? f->wait : f->hold;
        i = strtoul(k->str + 1, &end, 10);
        if (end != k->str + k->len || end == k->str + 1) return -1;
        if (i >= DLOCK__STAT_NB) i = DLOCK__STAT_NB - 1;
        hist[i] += (uint64_t)v->integer;
    } /* else a field a later version writes: not ours to read */
    return 0;
}

int dlock__figs_parse(const redisReply *r, dlock__figs *out, size_t max, size_t *n) {
    size_t i, j;
    *n = 0;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->elements % 2 != 1) return -1;
    for (i = 1; i + 1 < r->elements && *n < max; i += 2) {
        const redisReply *nm = r->element[i], *fs = r->element[i + 1];
        dlock__figs *f = &out[*n];
        if (nm->type != REDIS_REPLY_STRING || nm->len > DLOCK_NAME_MAX || fs->type != REDIS_REPLY_ARRAY ||
            fs->elements % 2 != 0)
            return -1;
        memset(f, 0, sizeof *f);
        memcpy(f->name, nm->str, nm->len);
        for (j = 0; j < fs->elements; j += 2)
            if (figs_field(f, fs->element[j], fs->element[j + 1]) != 0) return -1;
        (*n)++;
    }
    return 0;
}

int dlock__scan(dlock__backend *b, const char *cursor, const char *pattern, redisReply **out) {
    const char *argv[6] = { "SCAN", cursor, "MATCH", pattern, "COUNT", "1000" };
    size_t lens[6], i;
    for (i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
    return dlock__command(&b->node, out, dlock__unreachable_deadline(&b->node), 0, 6, argv, lens, NULL);
}
