/* seminfo.c -- a semaphore's administration on one server: what it holds
 * (sem_info.lua: value, waiters, units leased under undo, and who they
 * are), its removal and its reset (sem_admin.lua).  A Cluster runs these
 * on the master of the semaphore's slot (cluster.c); Redlock has no
 * semaphores.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

/* The semaphore's keys as the scripts' KEYS (DLOCK__KS_*). */
static int sem_keys(const dlock__keys *k, const char **args, size_t *lens) {
    int i;
    for (i = 0; i < DLOCK__NKS; i++) {
        args[i] = k->keys[i];
        lens[i] = k->keylens[i];
    }
    return i;
}

static int bad(dlock__backend *c, const char *what, const redisReply *r) {
    dlock__pool_flush(&c->node); /* an answer out of step: see dlock__bad_reply in backend.c */
    if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOPERM", 6) == 0)
        return dlock__seterr(EPROTO, "%s: %s refused by the server's ACL (see \"Running as a minimal ACL "
                             "user\" in the README): %.200s", c->node.conf.redacted_url, what, r->str);
    if (r != NULL && r->type == REDIS_REPLY_ERROR)
        return dlock__seterr(EPROTO, "%s: %s failed: %.200s", c->node.conf.redacted_url, what, r->str);
    return dlock__seterr(EPROTO, "%s: unexpected answer to %s", c->node.conf.redacted_url, what);
}

int dlock__single_sem_info(dlock__backend *c, const dlock__keys *k, unsigned max, dlock__sem_state *out,
                           dlock__mono deadline) {
    const char *args[DLOCK__NKS + 1];
    size_t lens[DLOCK__NKS + 1];
    char m[16];
    redisReply *r;
    int nk = sem_keys(k, args, lens), rc;

    args[nk] = m;
    lens[nk] = (size_t)snprintf(m, sizeof m, "%u", max);
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_SEM_INFO, &r, deadline, nk, nk + 1, args, lens, NULL)) != 0)
        return rc;
    if ((rc = dlock__sem_info_parse(r, out)) == -2) rc = dlock__seterr(ENOMEM, "out of memory");
    else if (rc != 0) rc = bad(c, "semaphore info", r);
    freeReplyObject(r);
    return rc;
}

int dlock__single_sem_admin(dlock__backend *c, const dlock__keys *k, int how, long long *result,
                            dlock__sent *sent, dlock__mono deadline) {
    const char *args[DLOCK__NKS + 3];
    size_t lens[DLOCK__NKS + 3];
    char max[24], mark[16];
    redisReply *r;
    int nk = sem_keys(k, args, lens), rc;

    static const char *const ops[] = { "unlink", "break", "expire", "keep" };
    args[nk] = ops[how];
    lens[nk] = strlen(args[nk]);
    args[nk + 1] = max; /* break: the largest value; expire, keep: the expiry (ms) */
    lens[nk + 1] = (size_t)snprintf(max, sizeof max, "%lld",
                                    how == DLOCK__SEM_EXPIRE || how == DLOCK__SEM_KEEP ? *result
                                                                                       : (long long)DLOCK_SEM_VALUE_MAX);
    args[nk + 2] = mark;
    lens[nk + 2] = (size_t)snprintf(mark, sizeof mark, "%u", DLOCK__SEM_UNLINKED_MS);
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_SEM_ADMIN, &r, deadline, nk, nk + 3, args, lens, sent)) != 0)
        return rc;
    if (r->type != REDIS_REPLY_INTEGER || r->integer < -1) rc = bad(c, "semaphore administration", r);
    else *result = r->integer;
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------------------------ parsing */

/* A decimal number in s[0..n), at most 18 digits (no sign): 0, or -1. */
static int num_parse(const char *s, size_t n, long long *out) {
    long long v = 0;
    size_t i;
    if (n == 0 || n > 18) return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* An `owners` record, "KIND:SINCE:WHO" with WHO host:pid:tid (the host
 * may hold colons: pid and tid are the last two fields).  A record that
 * is missing or not of that form leaves the person unnamed (host "",
 * pid 0): what is known of it is still shown. */
static void owner_parse(const char *s, size_t n, dlock_sem_owner_t *o) {
    const char *c1 = n > 2 && s[1] == ':' ? memchr(s + 2, ':', n - 2) : NULL;
    long long since, pid, tid;
    size_t i, p2 = 0, p3 = 0, hn;
    int seen = 0;
    if (c1 == NULL || num_parse(s + 2, (size_t)(c1 - s - 2), &since) != 0) return;
    o->since_ms = since;
    for (i = n; i > (size_t)(c1 - s) + 1 && seen < 2; i--) {
        if (s[i - 1] != ':') continue;
        if (seen++ == 0) p3 = i - 1;
        else p2 = i - 1;
    }
    if (seen < 2 || num_parse(s + p2 + 1, p3 - p2 - 1, &pid) != 0 || num_parse(s + p3 + 1, n - p3 - 1, &tid) != 0)
        return;
    hn = p2 - (size_t)(c1 - s) - 1;
    if (hn > sizeof o->host - 1) hn = sizeof o->host - 1;
    memcpy(o->host, c1 + 1, hn);
    o->host[hn] = '\0';
    o->pid = (long)pid;
    o->tid = (unsigned long)tid;
}

/* The pairs of one list (waiters: place, record; units: expiry, record)
 * as people of kind `kind` appended to out. */
static int people_parse(const redisReply *l, int kind, int64_t now, dlock__sem_state *out) {
    size_t i;
    if (l->type != REDIS_REPLY_ARRAY || l->elements % 2 != 0) return -1;
    for (i = 0; i < l->elements; i += 2) {
        const redisReply *a = l->element[i], *rec = l->element[i + 1];
        dlock_sem_owner_t *o = &out->people[out->npeople];
        if (a == NULL || rec == NULL || a->type != REDIS_REPLY_INTEGER || rec->type != REDIS_REPLY_STRING) return -1;
        memset(o, 0, sizeof *o);
        o->kind = kind;
        o->place = -1;
        o->lease_left_ms = -1;
        if (kind == DLOCK_SEM_WAITING) {
            if (a->integer < -1) return -1;
            o->place = (long)a->integer;
        } else {
            o->lease_left_ms = a->integer > now ? a->integer - now : 0;
        }
        owner_parse(rec->str, rec->len, o);
        out->npeople++;
    }
    return 0;
}

int dlock__sem_info_parse(const redisReply *r, dlock__sem_state *out) {
    const redisReply *v;
    long long value = 0, remade = 0;
    size_t i, n;

    memset(out, 0, sizeof *out);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 7) return -1;
    for (i = 0; i < 7; i++)
        if (r->element[i] == NULL) return -1;
    v = r->element[0];
    if ((v->type != REDIS_REPLY_NIL && (v->type != REDIS_REPLY_STRING || num_parse(v->str, v->len, &value) != 0)) ||
        r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_INTEGER ||
        r->element[3]->type != REDIS_REPLY_INTEGER || r->element[2]->integer < 0 || r->element[3]->integer < 0 ||
        r->element[4]->type != REDIS_REPLY_ARRAY || r->element[5]->type != REDIS_REPLY_ARRAY)
        return -1;
    v = r->element[6]; /* when it was made again after a loss: nil never */
    if (v->type != REDIS_REPLY_NIL && (v->type != REDIS_REPLY_STRING || num_parse(v->str, v->len, &remade) != 0))
        return -1;
    out->info.remade_ms = remade;
    v = r->element[0];
    out->info.exists = v->type == REDIS_REPLY_STRING;
    out->info.value = value > DLOCK_SEM_VALUE_MAX ? DLOCK_SEM_VALUE_MAX : (int)value;
    out->info.server_now_ms = r->element[1]->integer;
    out->info.waiters = r->element[2]->integer > 0xFFFFFFFFll ? 0xFFFFFFFFu : (unsigned)r->element[2]->integer;
    out->info.leased = r->element[3]->integer > 0xFFFFFFFFll ? 0xFFFFFFFFu : (unsigned)r->element[3]->integer;
    n = (r->element[4]->elements + r->element[5]->elements) / 2;
    if (n > 0 && (out->people = calloc(n, sizeof *out->people)) == NULL) return -2;
    if (people_parse(r->element[4], DLOCK_SEM_WAITING, out->info.server_now_ms, out) != 0 ||
        people_parse(r->element[5], DLOCK_SEM_LEASED, out->info.server_now_ms, out) != 0) {
        free(out->people);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}
