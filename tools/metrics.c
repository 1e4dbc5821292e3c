/* metrics.c -- the locks' figures in the Prometheus text format, for
 * `dlock top --once --prometheus` and `dlock exporter` alike.
 *
 * Two reads make a snapshot: dlock_stats (the busiest locks of the last
 * window, every client's figures; one round trip, whose time is the
 * server's round trip shown) and dlock_list (every held lock, with its
 * holder, readers, waiting writers and lease, and every lock in its
 * lock-delay, with the delay left; SCAN, stopped at the cap or
 * the time budget).  A lock held for longer than the window has no
 * figures but is still listed, so that an alert on a long hold sees it.
 * Then the waiters of each held lock (one round trip each, within the
 * budget) give the cycles of waits, counted as `dlock graph` marks them.
 *
 * Most figures are sums over a sliding window kept on the server, not
 * counters that only grow: they are exported as gauges (per second) and
 * summaries (quantiles over the window), the types whose meaning they
 * have.  Lost leases, EDEADLK answers, lease-at-risk warnings and the
 * wait and hold histograms are kept as counters (reset when no client has
 * flushed figures of the lock for a day, which Prometheus's rate and
 * increase take as a counter reset); like every per-lock figure they are
 * served for the locks acquired within the window, so an idle lock's series go stale.  A lock name is a label value; at most `max` of them, so that a
 * million names cannot blow up a scrape (dlock_locks_truncated says when
 * some were left out).
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "cli.h"

double cli_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* FNV-1a: the slot a name starts looking from. */
static size_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return (size_t)h;
}

/* The entry for name, made if missing (NULL when the cap is reached or
 * memory is short: m->truncated or *nomem).  The names are found through
 * an open-addressing table of twice the cap's size (a power of two), so
 * that a thousand locks cost no quadratic search; SCAN may return a
 * name twice, and the figures name the held locks too. */
static cli_mlock *entry(cli_metrics *m, const char *name, unsigned max, int *nomem) {
    size_t i, n = (size_t)max + 1;
    if (m->slots == NULL) {
        for (m->nslots = 16; m->nslots < 2 * n; m->nslots *= 2)
            ;
        if ((m->slots = calloc(m->nslots, sizeof *m->slots)) == NULL ||
            (m->v = malloc(n * sizeof *m->v)) == NULL) {
            *nomem = 1;
            return NULL;
        }
        m->cap = n;
    }
    for (i = name_hash(name) & (m->nslots - 1); m->slots[i] != 0; i = (i + 1) & (m->nslots - 1))
        if (strcmp(m->v[m->slots[i] - 1].name, name) == 0) return &m->v[m->slots[i] - 1];
    if (m->n >= max) {
        m->truncated = 1;
        return NULL;
    }
    memset(&m->v[m->n], 0, sizeof m->v[m->n]);
    snprintf(m->v[m->n].name, sizeof m->v[m->n].name, "%s", name);
    m->slots[i] = ++m->n;
    return &m->v[m->n - 1];
}

/* What dlock_list's callback needs. */
struct list_ctx {
    cli_metrics *m;
    const cli_metrics_opts *o;
    double deadline;
    int nomem;
};

static int on_listed(const char *name, const dlock_lock_info_t *info, void *arg) {
    struct list_ctx *x = arg;
    cli_mlock *l;
    if (x->deadline > 0 && cli_mono_s() > x->deadline) {
        x->m->truncated = 1;
        return 1;
    }
    /* Past the cap the listing goes on (within the budget): a lock among
     * the figures may come later, and its holder is wanted. */
    if ((l = entry(x->m, name, x->o->max, &x->nomem)) == NULL) return x->nomem;
    l->info = *info;
    l->have_info = 1;
    return 0;
}

/* The busiest locks' figures, those whose name matches the glob. */
static int read_stats(dlock_client_t *c, const cli_metrics_opts *o, cli_metrics *m) {
    size_t want = (size_t)o->max + 1, n = 0, i;
    dlock_lock_stats_t *s = calloc(want, sizeof *s);
    int rc, nomem = 0;
    double t0 = cli_mono_s();
    if (s == NULL) return ENOMEM;
    rc = dlock_stats(c, o->window_s, s, want, &n);
    m->rtt_s = cli_mono_s() - t0;
    for (i = 0; rc == 0 && i < n; i++) {
        cli_mlock *l;
        if (o->glob != NULL && fnmatch(o->glob, s[i].name, 0) != 0) continue;
        if ((l = entry(m, s[i].name, o->max, &nomem)) == NULL) break;
        l->s = s[i];
        l->have_stats = 1;
    }
    free(s);
    return nomem ? ENOMEM : rc;
}

/* The cycles of waits among the held locks read (graph.c).  Redlock keeps
 * no waiters: no cycle figure.  Past the budget: truncated, and no figure
 * (a partial count would read as "fewer deadlocks"). */
static void read_cycles(dlock_client_t *c, cli_metrics *m, double deadline) {
    int rc = cli_wait_cycles(c, m->v, m->n, deadline, &m->cycles);
    m->have_cycles = rc == 0;
    if (rc == ETIMEDOUT) m->truncated = 1;
    else if (rc != 0 && rc != ENOTSUP && rc != ENOMEM) m->up = 0, m->err = rc;
}

int cli_metrics_read(dlock_client_t *c, const cli_metrics_opts *o, cli_metrics *m) {
    struct list_ctx x;
    double t0 = cli_mono_s();
    int rc;
    memset(m, 0, sizeof *m);
    m->up = 1;
    rc = read_stats(c, o, m);
    if (rc == ENOMEM) goto nomem;
    if (rc != 0 && rc != ENOTSUP) { /* Redlock keeps no figures, but it answered */
        m->up = 0;
        m->err = rc;
    } else {
        memset(&x, 0, sizeof x);
        x.m = m;
        x.o = o;
        x.deadline = o->budget_ms > 0 ? t0 + o->budget_ms / 1000.0 : 0;
        rc = dlock_list(c, o->glob, on_listed, &x);
        if (x.nomem) goto nomem;
        if (rc != 0) {
            m->up = 0;
            m->err = rc;
        } else {
            read_cycles(c, m, x.deadline);
        }
    }
    m->read_s = cli_mono_s() - t0;
    /* After the reads, which may have opened the breaker or met the
     * host's record. */
    m->have_breaker = dlock_client_breaker(c, &m->breaker) == 0;
    return 0;
nomem:
    cli_metrics_free(m);
    return ENOMEM;
}

void cli_metrics_free(cli_metrics *m) {
    free(m->v);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ writing */

/* The per-lock families, in the order they are written. */
enum {
    F_ACQ,
    F_REL,
    F_LOST,
    F_DEAD,
    F_RISK,
    F_WAIT,
    F_HOLD,
    F_WAITQ,
    F_HOLDQ,
    F_HELD,
    F_HELD_S,
    F_LEASE,
    F_READERS,
    F_WAITERS,
    F_DELAY,
    F_N
};

static const struct family {
    const char *name, *type, *help;
} families[F_N] = {
    [F_ACQ] = { "dlock_lock_acquisitions_per_second", "gauge",
                "Holds begun per second over the stats window, summed over every client." },
    [F_REL] = { "dlock_lock_releases_per_second", "gauge",
                "Holds ended by an unlock per second over the stats window, every client." },
    [F_LOST] = { "dlock_lock_lost_leases_total", "counter",
                 "Holds their client found lost (lease ran out, or renewal refused), every client." },
    [F_DEAD] = { "dlock_lock_deadlocks_total", "counter", "Lock calls answered EDEADLK, every client." },
    [F_RISK] = { "dlock_lock_lease_risks_total", "counter",
                 "Lease-at-risk warnings told to holders (renewals failing, less than the margin left), every client." },
    [F_WAIT] = { "dlock_lock_wait_seconds", "histogram", "Wait from the lock call to the hold, every client." },
    [F_HOLD] = { "dlock_lock_hold_seconds", "histogram", "Hold from the hold to its unlock, every client." },
    [F_WAITQ] = { "dlock_lock_wait_window_seconds", "summary",
                  "Wait from the lock call to the hold, quantiles over the stats window." },
    [F_HOLDQ] = { "dlock_lock_hold_window_seconds", "summary",
                  "Hold from the hold to its unlock, quantiles over the stats window." },
    [F_HELD] = { "dlock_lock_held", "gauge", "1 if a writer or mutex holder holds the lock now." },
    [F_HELD_S] = { "dlock_lock_held_seconds", "gauge", "How long the current exclusive holder has held the lock." },
    [F_LEASE] = { "dlock_lock_lease_remaining_seconds", "gauge",
                  "The current exclusive holder's remaining lease (renewed while its process lives)." },
    [F_READERS] = { "dlock_lock_readers", "gauge", "Shared (read) holders of the lock now." },
    [F_WAITERS] = { "dlock_lock_waiters", "gauge", "Writers and mutex lockers waiting for the lock now." },
    [F_DELAY] = { "dlock_lock_delay_remaining_seconds", "gauge",
                  "Until the lock's lock-delay ends (its last hold's lease ran out): granted to nobody till then." },
};

/* Lock l's value in family f; 0 when it has none (the row is left out). */
static int lock_value(const cli_mlock *l, int f, unsigned window_s, int q99, double *v) {
    const dlock_lock_info_t *i = &l->info;
    int held = l->have_info && i->held;
    switch (f) {
    case F_ACQ: *v = (double)l->s.acquisitions / window_s; return l->have_stats;
    case F_REL: *v = (double)l->s.releases / window_s; return l->have_stats;
    case F_LOST: *v = (double)l->s.lost_leases; return l->have_stats;
    case F_DEAD: *v = (double)l->s.deadlocks; return l->have_stats;
    case F_RISK:
        *v = (double)l->s.lease_risks;
        return l->have_stats;
    case F_WAITQ: *v = (q99 ? l->s.wait_ms_p99 : l->s.wait_ms_p50) / 1000; return l->have_stats && l->s.acquisitions;
    case F_HOLDQ: *v = (q99 ? l->s.hold_ms_p99 : l->s.hold_ms_p50) / 1000; return l->have_stats && l->s.releases;
    case F_HELD: *v = held; return 1;
    case F_HELD_S: *v = (double)cli_held_ms(i) / 1000; return held;
    case F_LEASE: *v = (double)(i->lease_left_ms > 0 ? i->lease_left_ms : 0) / 1000; return held;
    case F_READERS: *v = l->have_info ? i->readers : 0; return 1;
    case F_DELAY:
        *v = (double)i->delay_left_ms / 1000;
        return l->have_info && i->delay_left_ms > 0;
    default: *v = l->have_info ? i->writers_waiting : 0; return 1;
    }
}

/* Lock l's histogram (F_WAIT or F_HOLD): the cumulative buckets, +Inf,
 * _sum and _count; nothing for a lock that has none yet. */
static void write_histogram(FILE *f, const cli_mlock *l, int fam) {
    static const double bounds_ms[] = { DLOCK_STATS_BOUNDS_MS };
    const uint64_t *b = fam == F_WAIT ? l->s.wait_buckets : l->s.hold_buckets;
    uint64_t cum = 0, sum_us = fam == F_WAIT ? l->s.wait_us_sum : l->s.hold_us_sum;
    const char *name = families[fam].name;
    unsigned i;
    for (i = 0; i < DLOCK_STATS_BUCKETS; i++) cum += b[i];
    if (!l->have_stats || cum == 0) return;
    for (cum = 0, i = 0; i < DLOCK_STATS_BUCKETS; i++) {
        cum += b[i];
        fprintf(f, "%s_bucket{lock=\"", name);
        cli_quoted_str(f, l->name);
        if (i + 1 < DLOCK_STATS_BUCKETS) fprintf(f, "\",le=\"%.9g\"} %llu\n", bounds_ms[i] / 1000, (unsigned long long)cum);
        else fprintf(f, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    fprintf(f, "%s_sum{lock=\"", name);
    cli_quoted_str(f, l->name);
    fprintf(f, "\"} %.9g\n%s_count{lock=\"", (double)sum_us / 1e6, name);
    cli_quoted_str(f, l->name);
    fprintf(f, "\"} %llu\n", (unsigned long long)cum);
}

static void write_rows(FILE *f, const cli_metrics_opts *o, const cli_metrics *m, int fam) {
    static const char *const qs[] = { "0.5", "0.99" };
    int summary = fam == F_WAITQ || fam == F_HOLDQ, k;
    size_t i;
    for (i = 0; i < m->n; i++) {
        if (fam == F_WAIT || fam == F_HOLD) {
            write_histogram(f, &m->v[i], fam);
            continue;
        }
        for (k = 0; k < (summary ? 2 : 1); k++) {
            double v;
            if (!lock_value(&m->v[i], fam, o->window_s, k, &v)) continue;
            fprintf(f, "%s{lock=\"", families[fam].name);
            cli_quoted_str(f, m->v[i].name);
            if (summary) fprintf(f, "\",quantile=\"%s", qs[k]);
            fprintf(f, "\"} %.9g\n", v);
        }
    }
}

static void write_gauge(FILE *f, const char *name, const char *help, double v) {
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %.9g\n", name, help, name, name, v);
}

void cli_metrics_write(FILE *f, const cli_metrics_opts *o, const cli_metrics *m) {
    int fam;
    write_gauge(f, "dlock_up", "1 if the lock server answered this read, else 0.", m->up);
    if (m->up)
        write_gauge(f, "dlock_server_round_trip_seconds", "The round trip of the figures' read to the lock server.",
                    m->rtt_s);
    write_gauge(f, "dlock_read_duration_seconds", "How long this read of the lock server took.", m->read_s);
    write_gauge(f, "dlock_locks_truncated", "1 if locks were left out (the lock cap or the time budget).",
                m->truncated);
    write_gauge(f, "dlock_stats_window_seconds", "The window the per-lock figures are summed over.", o->window_s);
    if (m->have_breaker) {
        write_gauge(f, "dlock_breaker_open",
                    "1 if calls to the server fail at once (a circuit breaker, or this host's outage record).",
                    m->breaker.open);
        write_gauge(f, "dlock_breaker_open_seconds", "How long ago the server was found unreachable (0: closed).",
                    (double)m->breaker.open_ms / 1000);
        write_gauge(f, "dlock_breaker_next_probe_seconds",
                    "Until a call may ask the server again, while the breaker is open.",
                    (double)m->breaker.next_probe_ms / 1000);
    }
    if (!m->up) return;
    if (m->have_cycles)
        write_gauge(f, "dlock_wait_cycles",
                    "Cycles of waits among the held locks now (deadlocks, or about to be broken by EDEADLK).",
                    (double)m->cycles);
    for (fam = 0; fam < F_N; fam++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", families[fam].name, families[fam].help, families[fam].name,
                families[fam].type);
        write_rows(f, o, m, fam);
    }
}
