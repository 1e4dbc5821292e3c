/* admin.c -- administration: what is held by whom, and the reset.
 *
 * dlock_lock_info reads one lock's server state in one round trip;
 * dlock_list walks the key space with SCAN (never KEYS, which would block
 * the server) and reads each lock found; dlock_break is the administrative
 * reset that the CLI's `dlock break` uses.  dlock_sem_list walks it the
 * same way for semaphores (the rest of their administration is in
 * seminfo.c).
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

/* The administrative reset.  Deletes the lock whoever holds it: its
 * holder's next renewal is refused and it learns the hold was lost.
 * DLOCK_BREAK_OWNERDEAD keeps a robust lock's marker, so its next acquirer
 * gets EOWNERDEAD; DLOCK_BREAK_RESET forgets the marker too, making an
 * unrecoverable lock usable again. */
DLOCK_API int dlock_break(dlock_client_t *c, const char *name, int how, int *was_held) {
    dlock__lock *l;
    int rc, held = 0;

    if (how != DLOCK_BREAK_OWNERDEAD && how != DLOCK_BREAK_RESET)
        return dlock__seterr(EINVAL, "how must be DLOCK_BREAK_OWNERDEAD or DLOCK_BREAK_RESET");
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_LOCK, 0, &l)) != 0) return rc;
    rc = c->be.ops->reset(&c->be, &l->k, how == DLOCK_BREAK_RESET ? DLOCK__RESET_FULL : DLOCK__RESET_BREAK, &held, NULL,
                       dlock__unreachable_deadline(&c->be.node));
    dlock__entry_close(c, l, 0);
    if (rc == 0 && was_held != NULL) *was_held = held;
    return rc;
}

DLOCK_API int dlock_lock_info(dlock_client_t *c, const char *name, dlock_lock_info_t *out) {
    dlock__lock *l;
    int rc, probe;
    if (out == NULL) return dlock__seterr(EINVAL, "info pointer is NULL");
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_LOCK, 0, &l)) != 0) return rc;
    if ((rc = dlock__breaker_check(&c->be.node, &probe)) == 0) { /* else not asked: the circuit breaker is open */
        dlock__mono ub = dlock__unreachable_deadline(&c->be.node);
        rc = c->be.ops->info(&c->be, &l->k, out, probe ? dlock__now() : ub);
        pthread_mutex_lock(&c->mu);
        dlock__breaker_note(&c->be.node, rc, probe ? 0 : ub);
        pthread_mutex_unlock(&c->mu);
    }
    dlock__entry_close(c, l, 0);
    return rc;
}

DLOCK_API int dlock_lock_lvb(dlock_client_t *c, const char *name, void *buf, size_t cap, size_t *len, int *valid) {
    unsigned char v[DLOCK_LVB_MAX];
    dlock__lock *l;
    size_t n = 0;
    int rc, ok = -1;
    if (len == NULL || valid == NULL || (buf == NULL && cap > 0))
        return dlock__seterr(EINVAL, "value block pointer is NULL");
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_LOCK, 0, &l)) != 0) return rc;
    if (c->be.ops->lvb_read == NULL)
        rc = dlock__seterr(ENOTSUP, "lock value blocks are not offered on Redlock");
    else
        rc = c->be.ops->lvb_read(&c->be, &l->k, v, &n, &ok, dlock__unreachable_deadline(&c->be.node));
    dlock__entry_close(c, l, 0);
    if (rc != 0) return rc;
    *len = n;
    if (n > cap) return dlock__seterr(ERANGE, "'%.64s': its value block has %zu bytes, more than %zu", name, n, cap);
    if (n > 0) memcpy(buf, v, n);
    *valid = ok;
    return 0;
}

/* A waiter as waits.lua lists it, "since|host:pid:tid|mode|detect"
 * (the host may hold colons: the numbers are the last two fields): 0, or
 * -1 if it is not that. */
static int waiter_parse(const char *v, int64_t now, dlock_lock_waiter_t *w) {
    const char *who, *end, *c1, *c2;
    char *e;
    size_t n;
    memset(w, 0, sizeof *w);
    w->server_now_ms = now;
    w->since_ms = strtoll(v, &e, 10);
    if (*e != '|') return -1;
    who = e + 1;
    if ((end = strchr(who, '|')) == NULL || (end[1] != 'x' && end[1] != 's') || end[2] != '|') return -1;
    w->shared = end[1] == 's';
    w->deadlock = end[3] == '1';
    for (c2 = end; c2 > who && c2[-1] != ':'; c2--)
        ;
    for (c1 = c2 - 1; c1 > who && c1[-1] != ':'; c1--)
        ;
    if (c2 <= who || c1 <= who) return -1;
    w->pid = strtol(c1, NULL, 10);
    w->tid = strtoul(c2, NULL, 10);
    n = (size_t)(c1 - 1 - who);
    if (n >= sizeof w->host) n = sizeof w->host - 1;
    memcpy(w->host, who, n);
    w->host[n] = '\0';
    return 0;
}

static int waiter_cmp(const void *a, const void *b) {
    const dlock_lock_waiter_t *x = a, *y = b;
    return x->since_ms < y->since_ms ? -1 : x->since_ms > y->since_ms;
}

DLOCK_API int dlock_lock_waiters(dlock_client_t *c, const char *name,
                                 int (*fn)(const dlock_lock_waiter_t *w, void *arg), void *arg) {
    dlock__strs out = { 0, NULL };
    dlock_lock_waiter_t *ws = NULL;
    dlock__lock *l;
    size_t i, n = 0;
    int rc;
    if (fn == NULL) return dlock__seterr(EINVAL, "callback is NULL");
    if ((rc = dlock__entry_open(&c, name, DLOCK__KIND_LOCK, 0, &l)) != 0) return rc;
    if (c->be.ops->waits == NULL)
        rc = dlock__seterr(ENOTSUP, "waiters are not kept on Redlock (its masters would each keep their own)");
    else
        rc = c->be.ops->waits(&c->be, &l->k, "list", "", "", 0, &out, dlock__unreachable_deadline(&c->be.node));
    dlock__entry_close(c, l, 0);
    if (rc != 0) return rc;
    if (out.n > 1 && (ws = calloc(out.n - 1, sizeof *ws)) == NULL) rc = dlock__seterr(ENOMEM, "out of memory");
    for (i = 1; i < out.n && rc == 0; i++)
        if (waiter_parse(out.v[i], strtoll(out.v[0], NULL, 10), &ws[n]) == 0) n++;
    dlock__strs_free(&out);
    if (n > 1) qsort(ws, n, sizeof *ws, waiter_cmp);
    for (i = 0; i < n && rc == 0; i++)
        if (fn(&ws[i], arg) != 0) break;
    free(ws);
    return rc;
}

/* The SCAN pattern for keys under the prefix: the prefix with the glob
 * characters escaped, then tail ("{*": every key). */
static char *scan_pattern(const char *prefix, const char *tail) {
    char *p = malloc(strlen(prefix) * 2 + strlen(tail) + 1), *o = p;
    if (p == NULL) return NULL;
    for (; *prefix; prefix++) {
        if (strchr("*?[]\\", *prefix)) *o++ = '\\';
        *o++ = *prefix;
    }
    strcpy(o, tail);
    return p;
}

/* The lock name of a key, if it is a lock's main key, its readers key or
 * its robust state: <prefix>{<name>}, <prefix>{<name>}:readers, :state. */
static int key_name(const char *prefix, const char *key, size_t n, size_t *off, size_t *len) {
    size_t plen = strlen(prefix);
    static const char rd[] = "}:readers", st[] = "}:state";
    if (n < plen + 2 || memcmp(key, prefix, plen) != 0 || key[plen] != '{') return 0;
    *off = plen + 1;
    if (key[n - 1] == '}') {
        *len = n - plen - 2;
        return *len > 0;
    }
    if (n > plen + 1 + sizeof rd - 1 && memcmp(key + n - (sizeof rd - 1), rd, sizeof rd - 1) == 0) {
        *len = n - plen - 1 - (sizeof rd - 1);
        return *len > 0;
    }
    if (n > plen + 1 + sizeof st - 1 && memcmp(key + n - (sizeof st - 1), st, sizeof st - 1) == 0) {
        *len = n - plen - 1 - (sizeof st - 1);
        return *len > 0;
    }
    return 0;
}

/* Names seen so far, so a lock with both keys is reported once. */
typedef struct seen {
    char **names;
    size_t n, cap;
} seen;

static int seen_add(seen *s, const char *name) {
    size_t i;
    for (i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) return 0;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        char **nn = realloc(s->names, ncap * sizeof *nn);
        if (nn == NULL) return -1;
        s->names = nn;
        s->cap = ncap;
    }
    if ((s->names[s->n] = strdup(name)) == NULL) return -1;
    s->n++;
    return 1;
}

static void seen_free(seen *s) {
    size_t i;
    for (i = 0; i < s->n; i++) free(s->names[i]);
    free(s->names);
}

/* What srv, a Redlock master, says of name on its own. */
static int member_info(dlock_client_t *c, dlock__backend *srv, const char *name, dlock_lock_info_t *info) {
    dlock__keys k;
    int rc = dlock__keys_make(&k, c->be.node.conf.prefix, name, strlen(name), DLOCK__KEYS_LOCK);
    if (rc != 0) return rc;
    rc = srv->ops->info(srv, &k, info, dlock__unreachable_deadline(&srv->node));
    dlock__keys_free(&k);
    return rc;
}

/* One SCAN answer of srv from cursor (32 bytes, moved on), checked: 0
 * with the answer (*out, to be freed), or an errno value.  *empty counts
 * the answers in a row that brought no keys. */
static int scan_page(dlock__backend *srv, char *cursor, const char *pattern, unsigned *empty, redisReply **out) {
    redisReply *r;
    int rc;
    if ((rc = dlock__scan(srv, cursor, pattern, &r)) != 0) return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        /* As dlock_lock_info says it (backend.c): an ACL that lacks
         * SCAN is named, not hidden behind "unexpected answer". */
        if (strncmp(r->str, "NOPERM", 6) == 0)
            rc = dlock__seterr(EPROTO, "%s: SCAN refused by the server's ACL (see \"Running as a minimal ACL "
                               "user\" in the README): %.200s", srv->node.conf.redacted_url, r->str);
        else
            rc = dlock__seterr(EPROTO, "%s: SCAN failed: %.200s", srv->node.conf.redacted_url, r->str);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
               r->element[0]->len >= 32 || r->element[1]->type != REDIS_REPLY_ARRAY) {
        rc = dlock__seterr(EPROTO, "%s: unexpected answer to SCAN", srv->node.conf.redacted_url);
    } else {
        memcpy(cursor, r->element[0]->str, r->element[0]->len);
        cursor[r->element[0]->len] = '\0';
        /* A real server's SCAN ends; one that answers "more, but nothing"
         * forever does not, so bound it: 10 000 empty answers in a row
         * (ten million keys without a lock among them at COUNT 1000). */
        *empty = r->element[1]->elements == 0 ? *empty + 1 : 0;
        if (*empty > 10000) rc = dlock__seterr(EPROTO, "%s: SCAN does not end", srv->node.conf.redacted_url);
    }
    if (rc != 0) freeReplyObject(r);
    else *out = r;
    return rc;
}

/* A walk over the keys under the prefix: every key that names something
 * (name_of) whose name matches glob is given to found, with the server
 * it came from.  once, if not NULL, keeps the names seen, so a name with
 * several keys is given once. */
struct key_walk {
    dlock_client_t *c;
    const char *glob;
    seen *once;
    int (*name_of)(const char *prefix, const char *key, size_t n, size_t *off, size_t *len);
    int (*found)(struct key_walk *w, dlock__backend *srv, const char *name);
    int stop; /* set when the caller's function asked to stop */
};

/* One key of srv: its name, if it names something new that glob matches,
 * given to w->found. */
static int key_found(struct key_walk *w, dlock__backend *srv, const redisReply *k) {
    char name[DLOCK_NAME_MAX + 1];
    size_t off, len;
    int added;
    if (k->type != REDIS_REPLY_STRING || !w->name_of(w->c->be.node.conf.prefix, k->str, k->len, &off, &len) ||
        len == 0 || len > DLOCK_NAME_MAX)
        return 0;
    memcpy(name, k->str + off, len);
    name[len] = '\0';
    if (strlen(name) != len || fnmatch(w->glob, name, 0) != 0) return 0;
    if (w->once != NULL) {
        if ((added = seen_add(w->once, name)) < 0) return dlock__seterr(ENOMEM, "out of memory");
        if (added == 0) return 0;
    }
    return w->found(w, srv, name);
}

/* Goes through one server's keys matching pattern (SCAN). */
static int walk_server(struct key_walk *w, dlock__backend *srv, const char *pattern) {
    char cursor[32] = "0";
    unsigned empty = 0; /* SCAN answers in a row that brought no keys */
    int rc = 0;
    do {
        size_t i;
        redisReply *r;
        if ((rc = scan_page(srv, cursor, pattern, &empty, &r)) != 0) break;
        for (i = 0; i < r->element[1]->elements && !w->stop && rc == 0; i++)
            rc = key_found(w, srv, r->element[1]->element[i]);
        freeReplyObject(r);
    } while (rc == 0 && !w->stop && strcmp(cursor, "0") != 0);
    return rc;
}

/* Goes through the deployment's keys: on a cluster, each master has the
 * keys of its slots; elsewhere the one server (Redlock's masters are
 * dlock_list's own walk). */
static int walk_servers(struct key_walk *w, const char *pattern) {
    dlock_client_t *c = w->c;
    dlock__backend *masters[64];
    size_t i, n;
    int rc;
    if (c->be.node.conf.kind != DLOCK__BACKEND_CLUSTER) return walk_server(w, &c->be, pattern);
    rc = dlock__cluster_masters(&c->be, masters, sizeof masters / sizeof *masters, &n,
                                dlock__unreachable_deadline(&c->be.node));
    for (i = 0; i < n && rc == 0 && !w->stop; i++) rc = walk_server(w, masters[i], pattern);
    return rc;
}

/* A lock list's walk.  On Redlock, a lock whose state no quorum tells
 * (too few masters answer, or they disagree) is listed as the master it
 * was found on has it, and unsure gets the reason. */
struct lock_walk {
    struct key_walk w; /* first: found is given &lock_walk.w */
    int (*fn)(const char *name, const dlock_lock_info_t *info, void *arg);
    void *arg;
    char unsure[512];
};

/* One lock found on srv: what dlock_lock_info says of it, if it is held,
 * has readers, a robust state or is in its lock-delay (free, but granted
 * to nobody until the delay ends), given to fn. */
static int lock_found(struct key_walk *kw, dlock__backend *srv, const char *name) {
    struct lock_walk *w = (struct lock_walk *)kw;
    dlock_client_t *c = kw->c;
    dlock_lock_info_t info;
    int rc;
    if ((rc = dlock_lock_info(c, name, &info)) == ENOLCK && c->be.node.conf.kind == DLOCK__BACKEND_REDLOCK) {
        const char *e = dlock_last_error();
        snprintf(w->unsure, sizeof w->unsure, "%s", strncmp(e, "ENOLCK: ", 8) == 0 ? e + 8 : e);
        rc = member_info(c, srv, name, &info);
    }
    if (rc != 0) return rc;
    if (info.held || info.readers > 0 || info.robust_state != 0 || info.delay_left_ms > 0)
        kw->stop = w->fn(name, &info, w->arg) != 0;
    return 0;
}

/* A lock is held on a quorum of the Redlock masters, not on every one:
 * each master's keys are read.  Without a quorum the list cannot be
 * complete (nor can any lock be taken): ENOLCK, after fn was called for
 * what the masters that answered hold. */
static int lock_list_redlock(struct lock_walk *w, const char *pattern) {
    dlock_client_t *c = w->w.c;
    size_t i, answered = 0, q = c->be.nmembers / 2 + 1;
    char why[512] = "";
    int rc = 0;
    for (i = 0; i < c->be.nmembers && rc == 0 && !w->w.stop; i++) {
        int r = walk_server(&w->w, c->be.members[i], pattern);
        if (r == 0) answered++;
        else if (r == ENOLCK) snprintf(why, sizeof why, "%s", dlock_last_error());
        else rc = r;
    }
    if (rc == 0 && !w->w.stop && answered < q)
        rc = dlock__seterr(ENOLCK,
                           "%s: only %zu of %zu Redlock masters answered (a quorum is %zu): the locks "
                           "held on the others are not listed (%.300s)",
                           c->be.node.conf.redacted_url, answered, c->be.nmembers, q,
                           strncmp(why, "ENOLCK: ", 8) == 0 ? why + 8 : why);
    else if (rc == 0 && !w->w.stop && w->unsure[0] != '\0')
        rc = dlock__seterr(ENOLCK, "%.400s (listed as one master has it)", w->unsure);
    return rc;
}

DLOCK_API int dlock_list(dlock_client_t *c, const char *glob,
                         int (*fn)(const char *name, const dlock_lock_info_t *info, void *arg), void *arg) {
    struct lock_walk w;
    char *pattern;
    seen s = { NULL, 0, 0 };
    int rc = 0;

    if (fn == NULL) return dlock__seterr(EINVAL, "callback is NULL");
    if ((c = dlock__client_get(c, &rc)) == NULL) return rc;
    if ((pattern = scan_pattern(c->be.node.conf.prefix, "{*")) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    memset(&w, 0, sizeof w);
    w.w = (struct key_walk){ c, glob != NULL ? glob : "*", &s, key_name, lock_found, 0 };
    w.fn = fn;
    w.arg = arg;
    if (c->be.node.conf.kind == DLOCK__BACKEND_REDLOCK) rc = lock_list_redlock(&w, pattern);
    else rc = walk_servers(&w.w, pattern);
    seen_free(&s);
    free(pattern);
    return rc;
}

/* ------------------------------------------------------------ semaphores */

/* The semaphore name of a key, if it is one of a semaphore's keys:
 * <prefix>{<name>}:sem, :semq, :semx, :semg, :semd, :semo or :semu. */
static int sem_key_name(const char *prefix, const char *key, size_t n, size_t *off, size_t *len) {
    static const char *const tails[] = { "}:sem", "}:semq", "}:semx", "}:semg", "}:semd", "}:semo", "}:semu" };
    size_t plen = strlen(prefix), i;
    if (n < plen + 2 || memcmp(key, prefix, plen) != 0 || key[plen] != '{') return 0;
    *off = plen + 1;
    for (i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        size_t tl = strlen(tails[i]);
        if (n > plen + 1 + tl && memcmp(key + n - tl, tails[i], tl) == 0) {
            *len = n - plen - 1 - tl;
            return 1;
        }
    }
    return 0;
}

/* A semaphore list's walk. */
struct sem_walk {
    struct key_walk w; /* first: found is given &sem_walk.w */
    int (*fn)(const char *name, const dlock_sem_info_t *info, void *arg);
    void *arg;
};

/* One semaphore found: read and (if it is there, or has people) given to
 * fn. */
static int sem_found(struct key_walk *kw, dlock__backend *srv, const char *name) {
    struct sem_walk *w = (struct sem_walk *)kw;
    dlock_sem_info_t info;
    int rc;
    (void)srv;
    if ((rc = dlock_sem_info(kw->c, name, &info)) != 0) return rc;
    if (info.exists || info.waiters > 0 || info.leased > 0) kw->stop = w->fn(name, &info, w->arg) != 0;
    return 0;
}

DLOCK_API int dlock_sem_list(dlock_client_t *c, const char *glob,
                             int (*fn)(const char *name, const dlock_sem_info_t *info, void *arg), void *arg) {
    struct sem_walk w;
    char *pattern;
    seen s = { NULL, 0, 0 };
    int rc = 0;

    if (fn == NULL) return dlock__seterr(EINVAL, "callback is NULL");
    if ((c = dlock__client_get(c, &rc)) == NULL) return rc;
    if (c->be.ops->sem_info == NULL)
        return dlock__seterr(ENOTSUP, "%s: semaphores are not supported on a Redlock deployment",
                             c->be.node.conf.redacted_url);
    if ((pattern = scan_pattern(c->be.node.conf.prefix, "{*}:sem*")) == NULL)
        return dlock__seterr(ENOMEM, "out of memory");
    w.w = (struct key_walk){ c, glob != NULL ? glob : "*", &s, sem_key_name, sem_found, 0 };
    w.fn = fn;
    w.arg = arg;
    rc = walk_servers(&w.w, pattern);
    seen_free(&s);
    free(pattern);
    return rc;
}

/* ---------------------------------------------------- record-lock tables */

/* The lock name of a record-lock table's key, <prefix>{<name>}:rl. */
static int range_key_name(const char *prefix, const char *key, size_t n, size_t *off, size_t *len) {
    static const char tail[] = "}:rl";
    size_t plen = strlen(prefix);
    if (n <= plen + 1 + sizeof tail - 1 || memcmp(key, prefix, plen) != 0 || key[plen] != '{' ||
        memcmp(key + n - (sizeof tail - 1), tail, sizeof tail - 1) != 0)
        return 0;
    *off = plen + 1;
    *len = n - plen - 1 - (sizeof tail - 1);
    return 1;
}

/* A record-lock tables' walk (a table has one key: no name is seen
 * twice). */
struct range_walk {
    struct key_walk w; /* first: found is given &range_walk.w */
    int (*fn)(const char *name, unsigned owners, unsigned ranges, void *arg);
    void *arg;
};

/* One table found: given to fn if it has a live owner. */
static int range_found(struct key_walk *kw, dlock__backend *srv, const char *name) {
    struct range_walk *w = (struct range_walk *)kw;
    dlock__strs t;
    unsigned owners, ranges;
    int rc;
    (void)srv;
    if ((rc = dlock__range_table(kw->c, name, &t)) != 0) return rc;
    dlock__range_count(&t, &owners, &ranges);
    dlock__strs_free(&t);
    if (owners > 0) kw->stop = w->fn(name, owners, ranges, w->arg) != 0;
    return 0;
}

DLOCK_API int dlock_range_tables(dlock_client_t *c, const char *glob,
                                 int (*fn)(const char *name, unsigned owners, unsigned ranges, void *arg),
                                 void *arg) {
    struct range_walk w;
    char *pattern;
    int rc = 0;

    if (fn == NULL) return dlock__seterr(EINVAL, "callback is NULL");
    if ((c = dlock__client_get(c, &rc)) == NULL) return rc;
    if (c->be.ops->range == NULL)
        return dlock__seterr(ENOTSUP, "%s: record locks are not kept on a Redlock deployment",
                             c->be.node.conf.redacted_url);
    if ((pattern = scan_pattern(c->be.node.conf.prefix, "{*}:rl")) == NULL)
        return dlock__seterr(ENOMEM, "out of memory");
    w.w = (struct key_walk){ c, glob != NULL ? glob : "*", NULL, range_key_name, range_found, 0 };
    w.fn = fn;
    w.arg = arg;
    rc = walk_servers(&w.w, pattern);
    free(pattern);
    return rc;
}
