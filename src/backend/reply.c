/* reply.c -- what the scripts answer, checked.
 *
 * Pure functions from a parsed reply to dlock's values: no I/O, so they
 * can be tested and fuzzed alone.  Anything that is not exactly what the
 * script returns is refused (-1), and the caller reports EPROTO: a server
 * that answers nonsense gets a clear error, never a wrong lock state.
 */
#include <string.h>

#include "backend/backend.h"

int dlock__u64_parse(const char *s, size_t n, uint64_t *out) {
    uint64_t v = 0;
    size_t i;
    if (s == NULL || n == 0 || n > 20) return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10) return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

int dlock__grant_parse(const char *s, size_t n, uint64_t *fence, unsigned *ms, int *cache) {
    const char *colon = s != NULL ? memchr(s, ':', n) : NULL;
    uint64_t f, m;
    int k = 0;
    if (colon == NULL) return -1;
    if (n >= 2 && s[n - 2] == ':' && (size_t)(colon - s) < n - 2) { /* ":C" */
        if (s[n - 1] != '1' && s[n - 1] != '2') return -1;
        k = s[n - 1] - '0';
        n -= 2;
    }
    if (dlock__u64_parse(s, (size_t)(colon - s), &f) != 0 ||
        dlock__u64_parse(colon + 1, n - (size_t)(colon - s) - 1, &m) != 0 || f == 0 || m == 0 || m > 0xFFFFFFFFu)
        return -1;
    *fence = f;
    *ms = (unsigned)m;
    *cache = k;
    return 0;
}

int dlock__acq_parse(const redisReply *r, dlock__acq *out) {
    const redisReply *st, *v;
    out->pttl_ms = -1;
    out->fence = 0;
    out->floor = 0;
    out->others = 0;
    out->plain = 0;
    out->unkept = 0;
    if (r != NULL && r->type == REDIS_REPLY_STRING) { /* the uncontended path's answer: the fence alone */
        if (dlock__u64_parse(r->str, r->len, &out->fence) != 0 || out->fence == 0) return -1;
        out->plain = 1;
        out->status = DLOCK__ACQ_ACQUIRED;
        return 0;
    }
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->elements > 3 || r->element == NULL)
        return -1;
    st = r->element[0];
    v = r->element[1];
    if (st == NULL || v == NULL || st->type != REDIS_REPLY_INTEGER) return -1;
    if (r->elements == 3 && (st->integer == 3 || st->integer == 5)) return -1;
    switch (st->integer) {
    case 1: /* acquired */
    case 2: /* already ours */
    case 4: /* acquired, owner died */
        if (v->type != REDIS_REPLY_STRING || dlock__u64_parse(v->str, v->len, &out->fence) != 0 ||
            out->fence == 0)
            return -1;
        if (r->elements == 3) { /* a caching acquire: do others wait? */
            const redisReply *o = r->element[2];
            if (o == NULL || o->type != REDIS_REPLY_INTEGER || (o->integer != 0 && o->integer != 1)) return -1;
            out->others = (int)o->integer;
        }
        out->status = st->integer == 1 ? DLOCK__ACQ_ACQUIRED
                      : st->integer == 2 ? DLOCK__ACQ_MINE
                                         : DLOCK__ACQ_OWNERDEAD;
        return 0;
    case 3:
        out->status = DLOCK__ACQ_NOTRECOVERABLE;
        return 0;
    case 0: /* busy, with the holder's PTTL (-1 no expiry, -2 just gone) */
    case 5: /* held back after a release, for that long */
        if (v->type != REDIS_REPLY_INTEGER || v->integer < -2 || v->integer > (long long)DLOCK_LEASE_MAX_MS * 2)
            return -1;
        out->status = st->integer == 0 ? DLOCK__ACQ_BUSY : DLOCK__ACQ_HELDBACK;
        out->pttl_ms = v->integer;
        if (r->elements == 3) { /* the last fence: digits, or '' none kept */
            const redisReply *f = r->element[2];
            if (f == NULL || f->type != REDIS_REPLY_STRING) return -1;
            if (f->len > 0 && dlock__u64_parse(f->str, f->len, &out->floor) != 0) return -1;
        }
        return 0;
    default:
        return -1;
    }
}

int dlock__flag_parse(const redisReply *r, int *out) {
    if (r == NULL || r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1)) return -1;
    *out = (int)r->integer;
    return 0;
}

int dlock__release_parse(const redisReply *r, int *out) {
    if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer < 0 || r->integer > DLOCK__RELEASED_HANDED) return -1;
    *out = (int)r->integer;
    return 0;
}

static long long num_ll(const char *s, size_t n, int *ok) {
    uint64_t u;
    if (dlock__u64_parse(s, n, &u) != 0 || u > INT64_MAX) {
        *ok = 0;
        return 0;
    }
    return (long long)u;
}

static long long field_ll(const redisReply *v, int *ok) {
    if (v->type != REDIS_REPLY_STRING) {
        *ok = 0;
        return 0;
    }
    return num_ll(v->str, v->len, ok);
}

/* "host:pid:tid" (the host name may itself hold colons: the numbers are
 * the last two fields). */
static void who_parse(const redisReply *v, dlock_lock_info_t *out, int *ok) {
    size_t i, c1 = 0, c2 = 0, n;
    int seen = 0;
    if (v->type != REDIS_REPLY_STRING) {
        *ok = 0;
        return;
    }
    for (i = v->len; i > 0 && seen < 2; i--) {
        if (v->str[i - 1] != ':') continue;
        if (seen++ == 0) c2 = i - 1;
        else c1 = i - 1;
    }
    if (seen < 2) {
        *ok = 0;
        return;
    }
    n = c1 < sizeof out->host - 1 ? c1 : sizeof out->host - 1;
    memcpy(out->host, v->str, n);
    out->host[n] = '\0';
    out->pid = (long)num_ll(v->str + c1 + 1, c2 - c1 - 1, ok);
    out->tid = (unsigned long)num_ll(v->str + c2 + 1, v->len - c2 - 1, ok);
}

int dlock__info_parse(const redisReply *r, dlock_lock_info_t *out) {
    const redisReply *h;
    size_t i;
    int ok = 1;

    memset(out, 0, sizeof *out);
    /* (a seventh, the lock-delay marker's PTTL, from every server that
     * runs this library's info_lua) */
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 6 || r->elements > 7) return -1;
    for (i = 0; i < r->elements; i++)
        if (r->element[i] == NULL) return -1;
    h = r->element[0];
    if (h->type != REDIS_REPLY_ARRAY || h->elements % 2 != 0 || r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_STRING || r->element[3]->type != REDIS_REPLY_INTEGER ||
        r->element[4]->type != REDIS_REPLY_INTEGER || r->element[3]->integer < 0 || r->element[4]->integer < 0 ||
        r->element[5]->type != REDIS_REPLY_INTEGER)
        return -1;
    for (i = 0; i < h->elements; i += 2) {
        const redisReply *k = h->element[i], *v = h->element[i + 1];
        if (k == NULL || v == NULL || k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) return -1;
        if (strcmp(k->str, "owner") == 0) {
            out->held = 1;
        } else if (strcmp(k->str, "fence") == 0) {
            out->fence = (uint64_t)field_ll(v, &ok);
        } else if (strcmp(k->str, "who") == 0) {
            who_parse(v, out, &ok);
        } else if (strcmp(k->str, "since") == 0) {
            out->since_ms = field_ll(v, &ok);
        }
    }
    if (!ok) return -1;
    out->lease_left_ms = out->held ? r->element[1]->integer : 0;
    out->robust_state = strcmp(r->element[2]->str, "notrecoverable") == 0 ? 2
                        : strcmp(r->element[2]->str, "held") == 0     ? 1
                                                                      : 0;
    out->readers = (unsigned)r->element[3]->integer;
    out->writers_waiting = (unsigned)r->element[4]->integer;
    out->server_now_ms = r->element[5]->integer;
    if (r->elements == 7 && r->element[6]->type != REDIS_REPLY_INTEGER) return -1;
    if (r->elements == 7 && !out->held && r->element[6]->integer > 0) out->delay_left_ms = r->element[6]->integer;
    return 0;
}

/* {code, value}: 1 done (an upgrade's value its fence), 2 done already
 * (an upgrade), 0 busy for value ms, 6 the conversion deadlock, 7 not
 * held as the conversion needs. */
int dlock__conv_parse(const redisReply *r, int how, dlock__conv *out) {
    const redisReply *st, *v;
    memset(out, 0, sizeof *out);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element == NULL) return -1;
    st = r->element[0];
    v = r->element[1];
    if (st == NULL || v == NULL || st->type != REDIS_REPLY_INTEGER) return -1;
    switch (st->integer) {
    case 1:
    case 2:
        out->status = DLOCK__CONV_DONE;
        if (how != DLOCK__CONV_UP) return st->integer == 1 ? 0 : -1;
        if (v->type != REDIS_REPLY_STRING || dlock__u64_parse(v->str, v->len, &out->fence) != 0 || out->fence == 0)
            return -1;
        return 0;
    case 0:
        if (how != DLOCK__CONV_UP || v->type != REDIS_REPLY_INTEGER) return -1;
        out->status = DLOCK__CONV_BUSY;
        out->ms = v->integer;
        return 0;
    case 6:
        out->status = DLOCK__CONV_DEADLK;
        return how == DLOCK__CONV_UP ? 0 : -1;
    case 7:
        out->status = DLOCK__CONV_NOTHELD;
        return how != DLOCK__CONV_CANCEL ? 0 : -1;
    default:
        return -1;
    }
}
