/* analyze.c -- statistics of a contention event log, from dlock-bench's
 * own runs or from the peers' logs (one file per process, lines of
 * "t_call t_acq t_rel" in CLOCK_MONOTONIC nanoseconds, which node's
 * process.hrtime.bigint() and Python's time.monotonic_ns() also read).
 *
 * Handoff: for every release issued in the window, the time until the
 * lock is next held by another worker (another process, or thread), as
 * the main table defines it: a releaser that takes the lock straight back
 * delays the handoff.  "Direct" handoffs are the releases whose very next
 * holder was another worker: the pure propagation latency.
 *
 * Fairness: the longest run of consecutive acquisitions by one
 * worker, the spread of acquisitions per worker, and the most
 * acquisitions by other workers while one worker waited ("overtaken"):
 * with W workers, a FIFO lock is overtaken at most W - 1 times per wait,
 * whatever the length of the run, where a lock that lets the fastest
 * asker win is not bounded.  The order is the order of arrival at the
 * server, later than the lock call: the first calls of a process connect
 * first, so a wait that began before the warm-up may see one or two more;
 * max_overtaken_steady leaves those out.
 *
 * Window: from the first acquisition plus a warm-up, to the moment the
 * first worker made its last call (until then every worker is asking), so
 * the workers' staggered stop does not count as idle time.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int by_acq(const void *a, const void *b) {
    const bevent *x = a, *y = b;
    return x->t_acq < y->t_acq ? -1 : x->t_acq > y->t_acq;
}

typedef struct wstat {
    int32_t worker;
    long count;
    int64_t last_call;
    int64_t prev_rel; /* the worker's previous unlock call, for the unlock time */
} wstat;

void analyze_events(const bopts *o, bevent *ev, size_t n, double rt_us, const char *handoff_out, cstats *st) {
    wstat *ws = NULL;
    size_t nw = 0, i, j;
    int64_t w0, w1 = INT64_MAX, t_first;
    series hand = { 0 }, direct = { 0 }, wait = { 0 }, holds = { 0 }, unl = { 0 };
    size_t *nextdiff;
    long inwin = 0, self = 0, overlaps = 0, minc = -1, maxc = 0, run = 0, maxrun = 0, maxover = 0, maxover_steady = 0;
    int32_t runw = -1;
    double warm = o->warmup_ms > 0 ? o->warmup_ms : 200;
    int64_t maxwait_all = 0;
    FILE *hf = NULL, *df = NULL, *wf = NULL;

    st->rt_us = rt_us;
    st->ideal_per_s = rt_us > 0 ? 1e6 / (o->hold_ms * 1e3 + 2 * rt_us) : 0;
    if (n < 2) {
        note("  (no events to analyse)");
        result(o, "acq_per_s", 0, "acq/s");
        return;
    }
    qsort(ev, n, sizeof *ev, by_acq);
    t_first = ev[0].t_acq;
    for (i = 0; i < n; i++) {
        int64_t w = ev[i].t_acq - ev[i].t_call;
        if (w > maxwait_all) maxwait_all = w;
        for (j = 0; j < nw && ws[j].worker != ev[i].worker; j++)
            ;
        if (j == nw) {
            wstat *p = realloc(ws, (nw + 1) * sizeof *ws);
            if (p == NULL) die("out of memory");
            ws = p;
            ws[nw].worker = ev[i].worker;
            ws[nw].count = 0;
            ws[nw].last_call = 0;
            ws[nw].prev_rel = 0;
            nw++;
        }
        if (ev[i].t_call > ws[j].last_call) ws[j].last_call = ev[i].t_call;
    }
    for (j = 0; j < nw; j++)
        if (ws[j].last_call < w1) w1 = ws[j].last_call;
    w0 = t_first + (int64_t)(warm * 1e6);
    if (w1 <= w0) { /* a very short run: use it all */
        w0 = t_first;
        w1 = ev[n - 1].t_acq;
    }
    if (handoff_out != NULL) {
        char dpath[600];
        if ((hf = fopen(handoff_out, "w")) == NULL) die("%s: %s", handoff_out, strerror(errno));
        snprintf(dpath, sizeof dpath, "%s.direct", handoff_out);
        if ((df = fopen(dpath, "w")) == NULL) die("%s: %s", dpath, strerror(errno));
        snprintf(dpath, sizeof dpath, "%s.wait", handoff_out);
        if ((wf = fopen(dpath, "w")) == NULL) die("%s: %s", dpath, strerror(errno));
    }
    if ((nextdiff = malloc(n * sizeof *nextdiff)) == NULL) die("out of memory");
    /* nextdiff[i]: the first acquisition after i by another worker. */
    nextdiff[n - 1] = n;
    for (i = n - 1; i-- > 0;) nextdiff[i] = ev[i + 1].worker != ev[i].worker ? i + 1 : nextdiff[i + 1];
    for (i = 0; i < n; i++) {
        int in = ev[i].t_acq >= w0 && ev[i].t_acq <= w1;
        if (i > 0 && ev[i].t_acq < ev[i - 1].t_rel) overlaps++;
        if (wf) fprintf(wf, "%.3f\n", (double)(ev[i].t_acq - ev[i].t_call) / 1e3);
        { /* overtaken: acquisitions j < i with t_call(i) < t_acq(j), all by
           * other workers (a worker waits in one lock call at a time) */
            size_t lo = 0, hi = i;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (ev[mid].t_acq > ev[i].t_call) hi = mid;
                else lo = mid + 1;
            }
            if ((long)(i - lo) > maxover) maxover = (long)(i - lo);
            if (ev[i].t_call >= w0 && (long)(i - lo) > maxover_steady) maxover_steady = (long)(i - lo);
        }
        /* Every release in the window, to the next holder elsewhere. */
        if (ev[i].t_rel >= w0 && ev[i].t_rel <= w1 && nextdiff[i] < n) {
            int64_t h = ev[nextdiff[i]].t_acq - ev[i].t_rel;
            series_add(&hand, h);
            if (hf) fprintf(hf, "%.3f\n", (double)h / 1e3);
        }
        if (i > 0 && ev[i].worker != ev[i - 1].worker) st->handoffs_all++; /* the whole log */
        if (!in) continue;
        inwin++;
        run = ev[i].worker == runw ? run + 1 : 1;
        runw = ev[i].worker;
        if (run > maxrun) maxrun = run;
        for (j = 0; j < nw && ws[j].worker != ev[i].worker; j++)
            ;
        ws[j].count++;
        /* unlock returned at the latest when the worker next called lock */
        if (ws[j].prev_rel > 0) series_add(&unl, ev[i].t_call - ws[j].prev_rel);
        ws[j].prev_rel = ev[i].t_rel;
        series_add(&wait, ev[i].t_acq - ev[i].t_call);
        series_add(&holds, ev[i].t_rel - ev[i].t_acq);
        if (i == 0) continue;
        if (ev[i].worker != ev[i - 1].worker) {
            series_add(&direct, ev[i].t_acq - ev[i - 1].t_rel);
            if (df) fprintf(df, "%.3f\n", (double)(ev[i].t_acq - ev[i - 1].t_rel) / 1e3);
        } else {
            self++;
        }
    }
    if (hf) fclose(hf);
    if (df) fclose(df);
    if (wf) fclose(wf);
    free(nextdiff);
    for (j = 0; j < nw; j++) {
        if (minc < 0 || ws[j].count < minc) minc = ws[j].count;
        if (ws[j].count > maxc) maxc = ws[j].count;
    }

    st->acquisitions = inwin;
    st->handoffs = (long)direct.n;
    st->self_reacq = self;
    st->acq_per_s = (double)inwin * 1e9 / (double)(w1 - w0);
    st->handoff_p50_us = (double)series_pct(&hand, 50) / 1e3;
    st->handoff_p90_us = (double)series_pct(&hand, 90) / 1e3;
    st->handoff_p99_us = (double)series_pct(&hand, 99) / 1e3;
    st->handoff_max_us = (double)series_max(&hand) / 1e3;
    st->handoff_p50_rt = rt_us > 0 ? st->handoff_p50_us / rt_us : 0;
    st->wait_p50_ms = (double)series_pct(&wait, 50) / 1e6;
    st->wait_p99_ms = (double)series_pct(&wait, 99) / 1e6;
    st->max_wait_ms = (double)maxwait_all / 1e6;
    st->violations += overlaps;
    st->longest_run = maxrun;
    st->min_per_worker = minc;
    st->max_per_worker = maxc;
    st->max_overtaken = maxover;

    result(o, "acq_per_s", st->acq_per_s, "acq/s");
    if (st->ideal_per_s > 0) {
        result(o, "ideal_per_s", st->ideal_per_s, "acq/s");
        result(o, "vs_ideal", st->acq_per_s / st->ideal_per_s, "x");
    }
    result(o, "releases", (double)hand.n, "");
    result(o, "direct_handoffs", (double)direct.n, "");
    result(o, "self_reacquire_share", inwin ? (double)self / (double)inwin : 0, "");
    result(o, "handoff_p50_us", st->handoff_p50_us, "us");
    result(o, "handoff_p90_us", st->handoff_p90_us, "us");
    result(o, "handoff_p99_us", st->handoff_p99_us, "us");
    result(o, "handoff_max_us", st->handoff_max_us, "us");
    if (rt_us > 0) {
        result(o, "handoff_p50_rt", st->handoff_p50_rt, "RT");
        result(o, "handoff_p99_rt", st->handoff_p99_us / rt_us, "RT");
    }
    result(o, "direct_handoff_p50_us", (double)series_pct(&direct, 50) / 1e3, "us");
    result(o, "direct_handoff_p99_us", (double)series_pct(&direct, 99) / 1e3, "us");
    result(o, "wait_p50_ms", st->wait_p50_ms, "ms");
    result(o, "wait_p99_ms", st->wait_p99_ms, "ms");
    result(o, "max_wait_ms", st->max_wait_ms, "ms");
    result(o, "hold_mean_us", series_mean(&holds) / 1e3, "us");
    result(o, "hold_max_us", (double)series_max(&holds) / 1e3, "us");
    result(o, "unlock_p50_us", (double)series_pct(&unl, 50) / 1e3, "us");
    result(o, "unlock_p99_us", (double)series_pct(&unl, 99) / 1e3, "us");
    result(o, "unlock_mean_us", series_mean(&unl) / 1e3, "us");
    result(o, "wait_mean_ms", series_mean(&wait) / 1e6, "ms");
    result(o, "workers", (double)nw, "");
    result(o, "fairness_min_over_max", maxc ? (double)minc / (double)maxc : 0, "");
    result(o, "acq_per_worker_min", (double)minc, "acq");
    result(o, "acq_per_worker_max", (double)maxc, "acq");
    result(o, "longest_run_one_worker", (double)maxrun, "acq");
    result(o, "max_overtaken", (double)maxover, "acq");
    result(o, "max_overtaken_steady", (double)maxover_steady, "acq");
    result(o, "overtaken_bound_fifo", (double)nw - 1, "acq");
    result(o, "timestamp_overlaps", (double)overlaps, "");
    series_free(&hand);
    series_free(&wait);
    series_free(&holds);
    series_free(&direct);
    series_free(&unl);
    free(ws);
}

/* Reads one peer log (3 columns, or 4 with the worker first). */
static void read_log(const char *path, int fileno, bevent **ev, size_t *n, size_t *cap) {
    FILE *f = fopen(path, "r");
    char line[256];
    if (f == NULL) die("%s: %s", path, strerror(errno));
    while (fgets(line, sizeof line, f) != NULL) {
        long long a, b, c, d;
        int k;
        if (line[0] == '#' || line[0] == '\n') continue;
        k = sscanf(line, "%lld %lld %lld %lld", &a, &b, &c, &d);
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 4096;
            bevent *p = realloc(*ev, nc * sizeof *p);
            if (p == NULL) die("out of memory");
            *ev = p;
            *cap = nc;
        }
        if (k == 3) {
            (*ev)[*n].worker = fileno * 1000;
            (*ev)[*n].t_call = a;
            (*ev)[*n].t_acq = b;
            (*ev)[*n].t_rel = c;
        } else if (k == 4) {
            (*ev)[*n].worker = fileno * 1000 + (int32_t)a;
            (*ev)[*n].t_call = b;
            (*ev)[*n].t_acq = c;
            (*ev)[*n].t_rel = d;
        } else {
            continue;
        }
        (*n)++;
    }
    fclose(f);
}

int cmd_analyze(const bopts *o, int nfiles, char **files) {
    bevent *ev = NULL;
    size_t n = 0, cap = 0;
    cstats st;
    char hf[512], *handoff = NULL;
    int i;
    memset(&st, 0, sizeof st);
    for (i = 0; i < nfiles; i++) read_log(files[i], i, &ev, &n, &cap);
    if (o->events != NULL) {
        snprintf(hf, sizeof hf, "%s", o->events);
        handoff = hf;
    }
    note("%s: %d process(es), hold %.2f ms, %zu acquisitions", o->label ? o->label : "analyze", nfiles, o->hold_ms, n);
    analyze_events(o, ev, n, o->rt_us, handoff, &st);
    free(ev);
    return st.violations ? 1 : 0;
}
