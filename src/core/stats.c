/* stats.c -- live figures: what `dlock top` shows, from every client.
 *
 * Each client counts, per lock, the holds its callers begin (acquisitions),
 * a histogram of their waits (from the lock call's start to the hold,
 * uncontended ones included) and one of their holds (from the hold to its
 * unlock).  Counting is a few additions under the client's mutex, which
 * the lock call holds anyway, and one clock read at each end of a hold:
 * no round trip.  The renewal thread flushes what was counted once a
 * second at most, in one request (stats.lua's "add", one EVALSHA) for
 * every lock at once, to per-second keys that expire after a minute; a
 * failed flush drops its figures (they are figures, not state).
 * docs/protocol.md, "Live figures", has the server's layout.
 *
 * Buckets are HDR-like: exact below 4 µs, then four per power of two (two
 * significant bits), so a percentile read back is within 25% of the
 * truth: bucket 4k+s (k >= 1) holds [(4+s) << (k-1), (5+s) << (k-1)) µs,
 * up to DLOCK__STAT_NB - 1, which holds everything longer (2^33 µs,
 * about 2.4 hours).
 *
 * Beside them it counts the same waits and holds by the coarse buckets of
 * DLOCK_STATS_BOUNDS_MS (at most 1 ms, 5 ms, ... 10 s, longer) with their
 * sums, for Prometheus's histograms: the server adds these to counters
 * that only grow (kept until a day without a flush of the lock), so that
 * a scraper's rate() sees every wait, whatever its scrape interval.
 *
 * It counts too the holds the client finds lost (their lease ran out, or
 * the server refused its renewal: dlock__hold_lost) and the lock calls it
 * answers EDEADLK, and the lease-at-risk warnings its holds' handlers
 * are told (dlock__stats_risk); these go in the same flush, and the server keeps them
 * as counters that only grow (until a day without a flush of the lock),
 * not per second.
 *
 * DLOCK_STATS=0 in the environment turns it off for the process: nothing
 * is counted (the hooks return at once) and nothing is flushed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* The flushes' pace: at most one a second per client. */
#define FLUSH_EVERY_MS 1000
#define REFUSED_AGAIN_MS 60000

/* One lock's figures since the last flush.  Attached to its entry
 * (l->stat, st->l) until the entry goes; on c->stats_dirty while it has
 * figures to flush (then a detached one is freed by the flush). */
struct dlock__lstat {
    dlock__lock *l;            /* NULL: its entry is gone */
    struct dlock__lstat *next; /* on c->stats_dirty */
    int dirty;
    uint32_t acq, rel;
    uint32_t lost, dead; /* holds lost (their lease), EDEADLK answers */
    uint32_t risk;       /* lease-at-risk warnings told */
    uint32_t wait[DLOCK__STAT_NB], hold[DLOCK__STAT_NB];
    uint32_t wcum[DLOCK_STATS_BUCKETS], hcum[DLOCK_STATS_BUCKETS]; /* by DLOCK_STATS_BOUNDS_MS */
    uint64_t wsum, hsum;                                          /* µs */
    size_t namelen;
    char name[];
};
typedef struct dlock__lstat lstat;

void dlock__stats_init(struct dlock_client *c) {
    const char *v = secure_getenv("DLOCK_STATS");
    c->stats_off = v != NULL && strcmp(v, "0") == 0;
}

unsigned dlock__stats_bucket(uint64_t us) {
    unsigned e, b;
    if (us < 4) return (unsigned)us;
    e = 63u - (unsigned)__builtin_clzll(us); /* >= 2 */
    b = (e - 1) * 4 + (unsigned)((us >> (e - 2)) & 3);
    return b < DLOCK__STAT_NB ? b : DLOCK__STAT_NB - 1;
}

void dlock__stats_bounds(unsigned b, double *lo, double *hi) {
    unsigned e = b / 4 + 1, s = b % 4;
    if (b < 4) {
        *lo = b;
        *hi = b + 1;
        return;
    }
    *lo = (double)((uint64_t)(4 + s) << (e - 2));
    *hi = (double)((uint64_t)(5 + s) << (e - 2));
}

/* The bucket of DLOCK_STATS_BOUNDS_MS that a wait or hold of us µs goes
 * in: the first whose bound it does not pass (Prometheus's le). */
static unsigned cum_bucket(uint64_t us) {
    static const uint64_t bounds_ms[] = { DLOCK_STATS_BOUNDS_MS };
    unsigned i;
    for (i = 0; i < sizeof bounds_ms / sizeof bounds_ms[0]; i++)
        if (us <= bounds_ms[i] * 1000) return i;
    return DLOCK_STATS_BUCKETS - 1;
}

/* One wait or hold of us µs into both histograms. */
static void count_one(uint32_t *fine, uint32_t *cum, uint64_t *sum, uint64_t us) {
    fine[dlock__stats_bucket(us)]++;
    cum[cum_bucket(us)]++;
    *sum += us;
}

/* Zeroes what a flush sends. */
static void stat_clear(lstat *st) {
    st->acq = st->rel = st->lost = st->dead = st->risk = 0;
    memset(st->wait, 0, sizeof st->wait);
    memset(st->hold, 0, sizeof st->hold);
    memset(st->wcum, 0, sizeof st->wcum);
    memset(st->hcum, 0, sizeof st->hcum);
    st->wsum = st->hsum = 0;
}

/* The rank's bucket, and within it a straight line between its bounds. */
double dlock__stats_quantile(const uint64_t *hist, double q) {
    uint64_t total = 0, seen = 0, rank;
    unsigned b;
    double lo, hi;
    for (b = 0; b < DLOCK__STAT_NB; b++) total += hist[b];
    if (total == 0) return 0;
    rank = (uint64_t)(q * (double)total + 0.999999);
    if (rank < 1) rank = 1;
    for (b = 0; b < DLOCK__STAT_NB; b++) {
        if (seen + hist[b] >= rank) break;
        seen += hist[b];
    }
    if (b == DLOCK__STAT_NB) b = DLOCK__STAT_NB - 1;
    dlock__stats_bounds(b, &lo, &hi);
    return (lo + (hi - lo) * ((double)(rank - seen) - 0.5) / (double)hist[b]) / 1000.0;
}

/* l's figures, made at its first hold (NULL: out of memory, not counted),
 * on the dirty list. */
static lstat *stat_of(struct dlock_client *c, dlock__lock *l) {
    lstat *st = l->stat;
    if (st == NULL) {
        if ((st = calloc(1, sizeof *st + l->k.namelen + 1)) == NULL) return NULL;
        st->l = l;
        st->namelen = l->k.namelen;
        memcpy(st->name, l->k.name, l->k.namelen);
        l->stat = st;
    }
    if (!st->dirty) {
        /* The client's very first figure waits for the pace too: the
         * renewal thread, just started by the first hold, would otherwise
         * flush it at once, on a second connection, while that hold's
         * unlock is under way; a short-lived process's figures go in the
         * one flush of its exit instead. */
        if (c->stats_dirty == NULL && c->stats_next == 0)
            c->stats_next = dlock__now() + (dlock__mono)FLUSH_EVERY_MS * DLOCK__MS;
        /* The first figure since the last flush: a renewal thread asleep
         * for longer (until a hold's renewal, or an idle tick of a sixth
         * of a lease) is woken to flush it in time.  Once a flush. */
        if (c->stats_dirty == NULL && c->renew_wake != 0 &&
            c->renew_wake > c->stats_next + (dlock__mono)FLUSH_EVERY_MS * DLOCK__MS)
            dlock__renew_kick(c);
        st->dirty = 1;
        st->next = c->stats_dirty;
        c->stats_dirty = st;
    }
    return st;
}

/* A hold the call began is one whose count is 1 after it (a recursive
 * relock counts up past 1; any other relock fails). */
void dlock__stats_acquired(struct dlock_client *c, dlock__lock *l, dlock__hold *h, dlock__mono start, int rc) {
    dlock__mono now;
    lstat *st;
    if (c->stats_off) return;
    if (rc == EDEADLK) {
        if ((st = stat_of(c, l)) != NULL) st->dead++;
        return;
    }
    if ((rc != 0 && rc != EOWNERDEAD) || h == NULL || h->count != 1) return;
    now = dlock__now();
    h->held_since = now;
    if ((st = stat_of(c, l)) == NULL) return;
    st->acq++;
    count_one(st->wait, st->wcum, &st->wsum, now > start ? (uint64_t)(now - start) / 1000 : 0);
}

void dlock__stats_released(struct dlock_client *c, dlock__hold *h) {
    dlock__mono now, since = h->held_since;
    lstat *st;
    if (since == 0) return; /* not counted (off, or no memory) */
    h->held_since = 0;
    if ((st = stat_of(c, h->l)) == NULL) return;
    now = dlock__now();
    st->rel++;
    count_one(st->hold, st->hcum, &st->hsum, now > since ? (uint64_t)(now - since) / 1000 : 0);
}

void dlock__stats_lost(struct dlock_client *c, dlock__lock *l) {
    lstat *st;
    if (c->stats_off || (st = stat_of(c, l)) == NULL) return;
    st->lost++;
}

void dlock__stats_risk(struct dlock_client *c, dlock__lock *l) {
    lstat *st;
    if (c->stats_off || (st = stat_of(c, l)) == NULL) return;
    st->risk++;
}

void dlock__stats_detach(dlock__lock *l) {
    lstat *st = l->stat;
    if (st == NULL) return;
    l->stat = NULL;
    if (st->dirty) st->l = NULL; /* the next flush sends and frees it */
    else free(st);
}

void dlock__stats_fork_child(struct dlock_client *c) {
    lstat *st, *next;
    for (st = c->stats_dirty; st != NULL; st = next) { /* the parent's figures: the parent flushes them */
        next = st->next;
        st->dirty = 0;
        st->next = NULL;
        if (st->l == NULL) {
            free(st);
            continue;
        }
        stat_clear(st);
    }
    c->stats_dirty = NULL;
    c->stats_next = 0;
}

/* ------------------------------------------------------------- flushing */

typedef struct buf {
    char *p;
    size_t n, cap;
    int failed;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->n + n > b->cap) {
        size_t cap = (b->n + n) * 2 + 256;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void put_field(buf *b, char kind, int idx, uint64_t v) {
    char tmp[64];
    int k = idx < 0 ? snprintf(tmp, sizeof tmp, " %c %llu", kind, (unsigned long long)v)
                    : snprintf(tmp, sizeof tmp, " %c%d %llu", kind, idx, (unsigned long long)v);
    put(b, tmp, (size_t)k);
}

static void put_u64(buf *b, uint64_t v) {
    char tmp[24];
    int k = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    put(b, tmp, (size_t)k);
}

/* One lock's figures in stats.lua's payload: "<len>:<name> a N r N [L N]
 * [D N] [R N] wI C ... hI C ... WI C ... HI C ... [WS US] [HS US];" (L
 * lost holds, D EDEADLK answers, R lease-at-risk warnings; capitals:
 * counters that only grow, the cumulative histograms among them). */
static void put_lock(buf *b, const lstat *st) {
    char tmp[32];
    unsigned i;
    int k = snprintf(tmp, sizeof tmp, "%zu:", st->namelen);
    put(b, tmp, (size_t)k);
    put(b, st->name, st->namelen);
    put_field(b, 'a', -1, st->acq);
    put_field(b, 'r', -1, st->rel);
    if (st->lost != 0) put_field(b, 'L', -1, st->lost);
    if (st->dead != 0) put_field(b, 'D', -1, st->dead);
    if (st->risk != 0) put_field(b, 'R', -1, st->risk);
    for (i = 0; i < DLOCK__STAT_NB; i++)
        if (st->wait[i] != 0) put_field(b, 'w', (int)i, st->wait[i]);
    for (i = 0; i < DLOCK__STAT_NB; i++)
        if (st->hold[i] != 0) put_field(b, 'h', (int)i, st->hold[i]);
    for (i = 0; i < DLOCK_STATS_BUCKETS; i++)
        if (st->wcum[i] != 0) put_field(b, 'W', (int)i, st->wcum[i]);
    for (i = 0; i < DLOCK_STATS_BUCKETS; i++)
        if (st->hcum[i] != 0) put_field(b, 'H', (int)i, st->hcum[i]);
    if (st->acq != 0) put(b, " WS ", 4), put_u64(b, st->wsum);
    if (st->rel != 0) put(b, " HS ", 4), put_u64(b, st->hsum);
    put(b, ";", 1);
}

/* Takes every figure off the dirty list into one payload (b), zeroing
 * them; frees those whose entry is gone.  c->mu held. */
static void take_dirty(struct dlock_client *c, buf *b) {
    lstat *st, *next;
    for (st = c->stats_dirty; st != NULL; st = next) {
        next = st->next;
        put_lock(b, st);
        st->dirty = 0;
        st->next = NULL;
        stat_clear(st);
        if (st->l == NULL) free(st);
    }
    c->stats_dirty = NULL;
}

/* The circuit breaker is the lock calls': while it is open the figures
 * are dropped, and a flush that is let through as its probe makes one
 * attempt and closes it if answered (a failure never opens it). */
int dlock__stats_flush(struct dlock_client *c, dlock__mono deadline) {
    buf b = { NULL, 0, 0, 0 };
    char saved[512];
    int rc, probe = 0;
    if (c->stats_dirty == NULL) return 0;
    take_dirty(c, &b);
    if (b.failed || c->be.ops->stats_add == NULL) { /* (Redlock keeps no figures) */
        free(b.p);
        return b.failed ? ENOMEM : ENOTSUP;
    }
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    if ((rc = dlock__breaker_pass(&c->be.node, &probe)) == 0) {
        pthread_mutex_unlock(&c->mu);
        rc = c->be.ops->stats_add(&c->be, b.p, b.n, probe ? dlock__now() : deadline);
        pthread_mutex_lock(&c->mu);
        dlock__breaker_note(&c->be.node, rc, 0);
    }
    if (rc != 0) dlock__debug("live figures not flushed (%s): %s", dlock_err_name(rc), dlock_last_error());
    dlock__restoreerr(saved);
    free(b.p);
    return rc;
}

/* A server that refuses the figures (EPROTO: an ACL without HINCRBY,
 * ZINCRBY or EXPIRE) is asked again a minute later, not every second.
 * The flush runs on the renewal thread: it waits no longer than the next
 * pass is due (*next: a renewal, or a hold's validity end, whose lost
 * handler must run on time even with the server cut off), and is put
 * off past that pass when it is due too soon to wait at all. */
#define FLUSH_MIN_WAIT_MS 50
void dlock__stats_tick(struct dlock_client *c, dlock__mono now, dlock__mono *next) {
    dlock__mono dl = now + (dlock__mono)c->be.node.conf.command_timeout_ms * DLOCK__MS;
    if (c->stats_dirty == NULL) return;
    if (now < c->stats_next) {
        if (c->stats_next < *next) *next = c->stats_next;
        return;
    }
    if (*next < dl) dl = *next;
    if (dl < now + (dlock__mono)FLUSH_MIN_WAIT_MS * DLOCK__MS) return; /* after that pass */
    c->stats_next = now + (dlock__mono)FLUSH_EVERY_MS * DLOCK__MS;
    if (dlock__stats_flush(c, dl) == EPROTO)
        c->stats_next = now + (dlock__mono)REFUSED_AGAIN_MS * DLOCK__MS;
    if (c->stats_dirty != NULL && c->stats_next < *next) *next = c->stats_next;
}

/* ------------------------------------------------------------- reading */

/* Reads the busiest locks' figures (stats_read) and sums them up for
 * people. */
DLOCK_API int dlock_stats(dlock_client_t *cl, unsigned window_s, dlock_lock_stats_t *out, size_t max, size_t *n) {
    struct dlock_client *c;
    dlock__figs *f;
    size_t i, got = 0;
    int rc;
    if (out == NULL || n == NULL) return dlock__seterr(EINVAL, "dlock_stats: out or n is NULL");
    *n = 0;
    if (window_s < 1 || window_s > DLOCK_STATS_WINDOW_MAX)
        return dlock__seterr(EINVAL, "dlock_stats: the window is 1 to %d seconds", DLOCK_STATS_WINDOW_MAX);
    if ((c = dlock__client_get(cl, &rc)) == NULL) return rc;
    if (c->be.ops->stats_read == NULL)
        return dlock__seterr(ENOTSUP, "%s: this deployment (Redlock) keeps no live figures", c->be.node.conf.redacted_url);
    if (max == 0) return 0;
    if (max > 1000) max = 1000;
    if ((f = malloc(max * sizeof *f)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    rc = c->be.ops->stats_read(&c->be, window_s, f, max, &got, dlock__unreachable_deadline(&c->be.node));
    for (i = 0; rc == 0 && i < got; i++) {
        dlock_lock_stats_t *s = &out[i];
        memset(s, 0, sizeof *s);
        memcpy(s->name, f[i].name, sizeof s->name);
        s->acquisitions = f[i].acq;
        s->releases = f[i].rel;
        s->lost_leases = f[i].lost;
        s->deadlocks = f[i].dead;
        s->lease_risks = f[i].risk;
        s->wait_ms_p50 = dlock__stats_quantile(f[i].wait, 0.50);
        s->wait_ms_p99 = dlock__stats_quantile(f[i].wait, 0.99);
        s->hold_ms_p50 = dlock__stats_quantile(f[i].hold, 0.50);
        s->hold_ms_p99 = dlock__stats_quantile(f[i].hold, 0.99);
        memcpy(s->wait_buckets, f[i].wcum, sizeof s->wait_buckets);
        memcpy(s->hold_buckets, f[i].hcum, sizeof s->hold_buckets);
        s->wait_us_sum = f[i].wsum;
        s->hold_us_sum = f[i].hsum;
    }
    if (rc == 0) *n = got;
    free(f);
    return rc;
}
