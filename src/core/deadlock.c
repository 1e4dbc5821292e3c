/* deadlock.c -- who waits for whom, and the cycles of it.
 *
 * A call that has waited DLOCK__DL_REG_MS for a lock (DLOCK__DL_LOCAL_MS
 * if it waits for another thread of its process without having asked the
 * server: a local hand-over costs no command; a thread that holds nothing
 * and cannot be in a cycle: after DLOCK__DL_LEAF_MS, then rarely; core.h)
 * records its wait
 * (docs/design.md, "Deadlock detection"): on the lock's slot, its id (the
 * call's token), its thread ("host:pid:tid"), since when (server ms), its
 * mode and whether it detects -- which `dlock status` lists; and, on the
 * edge key of each token its thread holds a lock under, what that
 * holder's thread waits for: "regid|n|detect|mode|since|who|lock".  Both
 * lapse unless refreshed (every DLOCK__DL_TICK_MS, n counting the
 * refreshes); both are withdrawn when the wait ends.  The uncontended
 * path does none of it.
 *
 * A wait with detection on walks at each tick: from the lock it waits for
 * to its holders (the writer's token, the readers' tokens), from each
 * holder token to the wait its thread is in (the edge key), to that lock's
 * holders, and so on, each read on its own slot, until a holder token is
 * one of its own thread's (a cycle) or the walk ends.  A cycle is acted on
 * only by its victim, the member with the greatest "host:pid:tid" (then
 * call token) among those whose detection is on, and only when a later
 * walk saw the same edges -- the same holder tokens, the same waits --
 * with every other member's refresh count moved: each edge then existed
 * from the end of the first walk until after it, together, and every
 * waiter in it was alive between them.  The victim's wait ends with
 * EDEADLK.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define DL_DEPTH 16 /* the longest cycle looked for */
#define DL_READS 64 /* the most edge keys one walk reads */

/* h is a hold of the thread me, live: one a cycle through me's wait
 * could run through (dl_start's tokens; a thread with none is a leaf). */
static int dl_holds(const dlock__hold *h, const dlock__thread *me) {
    return me != NULL && h->owner == me && dlock__hold_is_live(h);
}

void dlock__dl_start(struct dlock_client *c, dlock__dl *d, int on, int local, dlock__mono begun) {
    dlock__thread *me = dlock__self_peek();
    const dlock__hold *h;
    unsigned first;
    if (d->started) return;
    d->started = 1;
    d->on = on;
    d->begun = begun;
    d->ntoks = 0;
    for (h = c->held; h != NULL && me != NULL; h = h->held_next)
        if (dl_holds(h, me) && d->ntoks < DLOCK__DL_TOKS)
            snprintf(d->toks[d->ntoks++], sizeof d->toks[0], "%s", h->token);
    first = d->ntoks == 0 ? (local ? DLOCK__DL_LEAF_LOCAL_MS : DLOCK__DL_LEAF_MS)
                          : local ? DLOCK__DL_LOCAL_MS : DLOCK__DL_REG_MS;
    d->next = d->inq && d->ntoks == 0 ? DLOCK__MONO_NEVER : dlock__now() + (dlock__mono)first * DLOCK__MS;
}

int dlock__dl_leaf(struct dlock_client *c) {
    dlock__thread *me = dlock__self_peek();
    const dlock__hold *h;
    for (h = c->held; h != NULL && me != NULL; h = h->held_next)
        if (dl_holds(h, me)) return 0;
    return 1;
}

void dlock__dl_granted(dlock__dl *d, const char *token) {
    if (d->reg && strcmp(d->regid, token) == 0) d->granted = 1;
}

dlock__mono dlock__dl_due(const dlock__dl *d) {
    return d->started ? d->next : DLOCK__MONO_NEVER;
}

/* One step of a walk: lock `lock` is held by `token`, whose thread waits
 * (its wait regid, refreshed n times, detecting or not) for lock `waits`. */
typedef struct dl_edge {
    char *lock;
    char token[DLOCK__OWNER_LEN + 1];
    char *rec;     /* the edge key's record, cut into the fields below */
    const char *regid, *n, *who, *waits;
    int detect;
} dl_edge;

typedef struct dl_walker {
    struct dlock_client *c;
    dlock__dl *d;
    int reads;
    dl_edge path[DL_DEPTH];
    char *sig, *ns, *desc; /* the cycle found with this wait as its victim */
} dl_walker;

/* Fills e from rec, "regid|n|detect|mode|since|who|lock": 0, or -1. */
static int edge_fill(dl_edge *e, const char *lock, const char *token, const char *rec) {
    char *f[6], *p;
    int i;
    memset(e, 0, sizeof *e);
    if ((e->rec = strdup(rec)) == NULL || (e->lock = strdup(lock)) == NULL) goto bad;
    for (p = e->rec, i = 0; i < 6; i++) {
        f[i] = p;
        if ((p = strchr(p, '|')) == NULL) goto bad;
        *p++ = '\0';
    }
    snprintf(e->token, sizeof e->token, "%s", token);
    e->regid = f[0];
    e->n = f[1];
    e->detect = f[2][0] == '1';
    e->who = f[5];
    e->waits = p;
    return 0;
bad:
    free(e->rec);
    free(e->lock);
    return -1;
}

static void edge_free(dl_edge *e) {
    free(e->rec);
    free(e->lock);
}

static int dl_mine(const dlock__dl *d, const char *t) {
    size_t i;
    for (i = 0; i < d->ntoks; i++)
        if (strcmp(d->toks[i], t) == 0) return 1;
    return 0;
}

static int dl_on_path(const dl_walker *w, const char *t, size_t depth) {
    size_t i;
    for (i = 0; i < depth; i++)
        if (strcmp(w->path[i].token, t) == 0) return 1;
    return 0;
}

/* Member order for the victim rule: host:pid:tid, then the wait's id. */
static int member_cmp(const char *who1, const char *id1, const char *who2, const char *id2) {
    int r = strcmp(who1, who2);
    return r != 0 ? r : strcmp(id1, id2);
}

/* Appends the printf result to *s (made with malloc): 0, or -1. */
static int cat(char **s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cat(char **s, const char *fmt, ...) {
    size_t old = *s != NULL ? strlen(*s) : 0;
    va_list ap;
    char *n;
    int add;
    va_start(ap, fmt);
    add = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (add < 0 || (n = realloc(*s, old + (size_t)add + 1)) == NULL) return -1;
    va_start(ap, fmt);
    vsnprintf(n + old, (size_t)add + 1, fmt, ap);
    va_end(ap);
    *s = n;
    return 0;
}

/* A cycle: this wait, path[0..depth), and `lock` held by our own token t.
 * 1 if this wait is its victim (its signature, counts and description
 * kept in w), else 0: the walk goes on. */
static int dl_cycle(dl_walker *w, const char *lock, const char *t, size_t depth) {
    const dlock__dl *d = w->d;
    size_t i;
    int bad = 0;
    if (depth == 0) return 0; /* its own hold: a NORMAL mutex's self-deadlock, as POSIX has it */
    for (i = 0; i < depth; i++)
        if (w->path[i].detect && member_cmp(w->path[i].who, w->path[i].regid, d->who, d->regid) > 0) return 0;
    for (i = 0; i < depth && !bad; i++) {
        const dl_edge *e = &w->path[i];
        bad |= cat(&w->sig, "%s\n%s\n%s\n", e->lock, e->token, e->regid);
        bad |= cat(&w->ns, "%s,", e->n);
        bad |= cat(&w->desc, "'%.64s' held by %s, which waits for ", e->lock, e->who);
    }
    bad |= cat(&w->sig, "%s\n%s", lock, t);
    bad |= cat(&w->desc, "'%.64s', held by this thread", lock);
    if (!bad) return 1;
    free(w->sig);
    free(w->ns);
    free(w->desc);
    w->sig = w->ns = w->desc = NULL;
    return -1;
}

static int dl_visit(dl_walker *w, const char *lock, size_t depth);

/* The wait of holder token t's thread, if it has one: on along it. */
static int dl_follow(dl_walker *w, const char *lock, const char *t, size_t depth) {
    struct dlock_client *c = w->c;
    dlock__strs es = { 0, NULL };
    dl_edge *e = &w->path[depth];
    int found = 0;
    w->reads++;
    if (c->be.ops->waits(&c->be, NULL, "eget", t, "", 0, &es, dlock__now()) != 0) return 0;
    if (es.n == 1 && edge_fill(e, lock, t, es.v[0]) == 0) {
        found = dl_visit(w, e->waits, depth + 1);
        edge_free(e);
    }
    dlock__strs_free(&es);
    return found;
}

/* Walks on from `lock`, reached at depth: 1 when a cycle with this wait
 * as victim was found, 0 when not (-1: out of memory). */
static int dl_visit(dl_walker *w, const char *lock, size_t depth) {
    struct dlock_client *c = w->c;
    dlock__strs hs = { 0, NULL };
    dlock__keys k;
    size_t i;
    int found = 0;
    if (dlock__keys_make(&k, c->be.node.conf.prefix, lock, strlen(lock), DLOCK__KEYS_LOCK) != 0) return -1;
    if (c->be.ops->waits(&c->be, &k, "holders", "", "", 0, &hs, dlock__now()) != 0) {
        dlock__keys_free(&k);
        return 0;
    }
    for (i = 0; i < hs.n && found == 0; i++) {
        const char *t = hs.v[i];
        if (t[0] == '\0') continue;
        if (dl_mine(w->d, t)) found = dl_cycle(w, lock, t, depth);
        else if (depth < DL_DEPTH && w->reads < DL_READS && !dl_on_path(w, t, depth))
            found = dl_follow(w, lock, t, depth);
    }
    dlock__strs_free(&hs);
    dlock__keys_free(&k);
    return found;
}

/* Has every count in b ("n1,n2,...") moved from a's? */
static int dl_moved(const char *a, const char *b) {
    while (*a && *b) {
        size_t la = strcspn(a, ","), lb = strcspn(b, ",");
        if (la == lb && memcmp(a, b, la) == 0) return 0;
        a += la + (a[la] == ',');
        b += lb + (b[lb] == ',');
    }
    return *a == '\0' && *b == '\0';
}

static void dl_forget(dlock__dl *d) {
    free(d->ref);
    free(d->refn);
    d->ref = d->refn = NULL;
}

/* One walk from l: EDEADLK when it confirms the cycle the last one saw. */
static int dl_walk(struct dlock_client *c, dlock__lock *l, dlock__dl *d) {
    dl_walker w;
    int rc = 0;
    memset(&w, 0, sizeof w);
    w.c = c;
    w.d = d;
    if (dl_visit(&w, l->k.name, 0) != 1) {
        dl_forget(d);
        return 0;
    }
    if (d->ref != NULL && strcmp(d->ref, w.sig) == 0) {
        if (dl_moved(d->refn, w.ns))
            rc = dlock__seterr(EDEADLK, "deadlock: this thread (%s) waits for %.360s; it is the cycle's victim",
                               d->who, w.desc);
        free(w.sig);
        free(w.ns);
    } else {
        dl_forget(d);
        d->ref = w.sig;
        d->refn = w.ns;
    }
    free(w.desc);
    return rc;
}

/* Registers (or refreshes) the wait for ttl_ms, then its edges.  c->mu
 * NOT held. */
static int dl_note(struct dlock_client *c, dlock__lock *l, int shared, unsigned ttl_ms, dlock__dl *d) {
    char rec[400], num[24];
    char *erec = NULL;
    dlock__strs out = { 0, NULL };
    size_t i;
    int rc;
    dlock__mono now = dlock__now(), age = now - d->begun;
    /* The age of the wait (ms) goes first: the server writes since as
     * its clock less that, so a wait first listed after 50 ms is listed
     * as waiting since its call began. */
    snprintf(rec, sizeof rec, "%lld|%s|%c|%d", (long long)(age > 0 ? age / DLOCK__MS : 0), d->who,
             shared ? 's' : 'x', d->on);
    if ((rc = c->be.ops->waits(&c->be, &l->k, "note", d->regid, rec, ttl_ms, &out, now)) != 0) return rc;
    if (out.n == 1) d->since = strtoll(out.v[0], NULL, 10);
    dlock__strs_free(&out);
    d->reg = 1;
    d->n++;
    snprintf(num, sizeof num, "%u", d->n);
    if (d->ntoks == 0) return 0;
    snprintf(rec, sizeof rec, "%s|%s|%d|%c|%lld|", d->regid, num, d->on, shared ? 's' : 'x', d->since);
    if (cat(&erec, "%s%s|%s", rec, d->who, l->k.name) != 0) return ENOMEM;
    for (i = 0; i < d->ntoks; i++) {
        if (c->be.ops->waits(&c->be, NULL, "eset", d->toks[i], erec, DLOCK__DL_TTL_MS, &out, dlock__now()) == 0)
            dlock__strs_free(&out);
    }
    free(erec);
    return 0;
}

/* How long a registration lasts: a leaf's covers the sleep that follows
 * (ending at until), with a margin; its next tick is before it lapses. */
static unsigned dl_ttl(const dlock__dl *d, dlock__mono now, dlock__mono until) {
    dlock__mono left;
    if (d->ntoks > 0) return DLOCK__DL_TTL_MS;
    if (until == DLOCK__MONO_NEVER || until <= now) return DLOCK__DL_LEAF_TTL_MS;
    left = (until - now) / DLOCK__MS + DLOCK__DL_LEAF_MARGIN_MS;
    if (left > 3600000) left = 3600000;
    return left > DLOCK__DL_LEAF_TTL_MS ? (unsigned)left : DLOCK__DL_LEAF_TTL_MS;
}

int dlock__dl_tick(struct dlock_client *c, dlock__lock *l, const char *regid, int shared, dlock__mono until,
                   dlock__dl *d) {
    char saved[512];
    dlock__mono now = dlock__now();
    unsigned ttl = dl_ttl(d, now, until);
    int rc = 0;
    d->next = DLOCK__MONO_NEVER;
    if (c->be.ops->waits == NULL) return 0; /* (Redlock: no waiters are kept) */
    if (d->inq && d->ntoks == 0) return 0;  /* listed by its queue entry */
    if (!d->reg) {
        snprintf(d->regid, sizeof d->regid, "%s", regid);
        dlock__who_get(dlock__self_peek(), d->who, sizeof d->who);
    }
    pthread_mutex_unlock(&c->mu);
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    if (dl_note(c, l, shared, ttl, d) == 0 && d->on && d->ntoks > 0) rc = dl_walk(c, l, d);
    if (rc != EDEADLK) dlock__restoreerr(saved);
    pthread_mutex_lock(&c->mu);
    if (d->ntoks > 0) d->next = dlock__now() + (dlock__mono)DLOCK__DL_TICK_MS * DLOCK__MS;
    else d->next = now + (dlock__mono)(ttl - DLOCK__DL_LEAF_MARGIN_MS) * DLOCK__MS;
    return rc;
}

void dlock__dl_end(struct dlock_client *c, dlock__lock *l, dlock__dl *d) {
    char saved[512], tag[DLOCK__OWNER_LEN + 2];
    dlock__strs out = { 0, NULL };
    size_t i;
    dl_forget(d);
    if (!d->reg || c->be.ops->waits == NULL || (d->granted && d->ntoks == 0 && !d->inq)) return;
    d->reg = 0;
    snprintf(tag, sizeof tag, "%s|", d->regid);
    pthread_mutex_unlock(&c->mu);
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    if (!d->granted && c->be.ops->waits(&c->be, &l->k, "drop", d->regid, "", 0, &out, dlock__now()) == 0)
        dlock__strs_free(&out);
    for (i = 0; i < d->ntoks; i++)
        if (c->be.ops->waits(&c->be, NULL, "edel", d->toks[i], tag, 0, &out, dlock__now()) == 0) dlock__strs_free(&out);
    dlock__restoreerr(saved);
    pthread_mutex_lock(&c->mu);
}
