/* main.c -- dlock-bench: the benchmark programs of bench/run.
 *
 *   dlock-bench seq      --port P [--smoke]          floor + uncontended pairs + recursive
 *   dlock-bench contend  --port P [--impl dlock|poll] [--fair] [--procs N] [--threads N]
 *                        [--hold-ms H] [--seconds S] [--label L] [--events FILE]
 *   dlock-bench waiters  --port P [--fair] [--waiters 1,4,16,...] [--seconds S] [--events PLOTFILE]
 *   dlock-bench renew    --port P [--locks N] [--lease-ms L]   renewal cost and memory
 *   dlock-bench cache    --port P [--rt-us R] [--seconds S] [--events PREFIX]   lock caching:
 *                        uncontended pairs (pthread, default, caching) and two-process ping-pong
 *   dlock-bench analyze  --label L --hold-ms H --rt-us R [--events HANDOFF_OUT] LOG...
 *   dlock-bench carry    --port P [--list 1,4,16,64] [--seconds S]   pairs/s one Redis core
 *                        carries, T threads each on its own name, dlock against the raw pair
 *   dlock-bench pairs    --port P --kind raw|dlock|handoff|handoff-lean [--count N] [--before CMD] [--after CMD]
 *                        N uncontended pairs (handoff, handoff-lean: N handoffs by minimal scripts),
 *                        CMD run (system()) just before and after them (callgrind)
 *   dlock-bench redlock  --port P --masters P1,P2,P3 [--seconds S]   Redlock's pair and contention
 *                        beside the single server's (redlock.c)
 *   dlock-bench sem      --port P [--procs N] [--hold-ms H] [--seconds S] [--rt-us R]   the
 *                        semaphore's wait+post and trywait+post beside the mutex's lock+unlock and
 *                        the raw pair, uncontended; a contended handoff (semaphore of value 1) beside
 *                        the mutex's
 *   dlock-bench pipe     --port P [--rt-us R] [--smoke]   the pipelined unlock beside the raw pair and the
 *                        confirmed unlock; 4 fresh processes against the ideal; caching's longest run
 *   dlock-bench now                                    CLOCK_MONOTONIC in ns
 *
 * Common: --csv FILE appends key,value,unit rows; --smoke makes every
 * count and time small (CI); --count N bounds a loop's count; --fair
 * makes contend's and waiters' dlock mutex a fair (FIFO) one,
 * --caching contend's a caching one.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "bench.h"

static void usage(void) {
    fprintf(stderr,
            "usage: dlock-bench seq|contend|waiters|renew|cache|carry|pairs|sem|pipe|redlock|analyze --port PORT [options] (see bench/README.md)\n");
    exit(2);
}

int main(int argc, char **argv) {
    bopts o;
    const char *cmd;
    int i, rc, nfiles = 0;
    char **files;

    if (argc < 2) usage();
    memset(&o, 0, sizeof o);
    o.hold_ms = 1.0;
    cmd = argv[1];
    files = calloc((size_t)argc, sizeof *files);
    for (i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (strcmp(a, name) == 0 && v != NULL && (i++, 1))
        if (strcmp(a, "--smoke") == 0) o.smoke = 1;
        else if (strcmp(a, "--fair") == 0) o.fair = 1;
        else if (strcmp(a, "--caching") == 0) o.caching = 1;
        else if (OPT("--list")) o.list = v;
        else if (OPT("--kind")) o.kind = v;
        else if (OPT("--before")) o.before = v;
        else if (OPT("--after")) o.after = v;
        else if (OPT("--port")) o.port = atoi(v);
        else if (OPT("--masters")) o.masters = v;
        else if (OPT("--csv")) o.csv = v;
        else if (OPT("--events")) o.events = v;
        else if (OPT("--label")) o.label = v;
        else if (OPT("--seconds")) o.seconds = atof(v);
        else if (OPT("--count")) o.count = atol(v);
        else if (OPT("--procs")) o.procs = atoi(v);
        else if (OPT("--threads")) o.threads = atoi(v);
        else if (OPT("--hold-ms")) o.hold_ms = atof(v);
        else if (OPT("--locks")) o.locks = atoi(v);
        else if (OPT("--lease-ms")) o.lease_ms = (unsigned)atoi(v);
        else if (OPT("--impl")) o.impl = v;
        else if (OPT("--waiters")) o.waiters = v;
        else if (OPT("--rt-us")) o.rt_us = atof(v);
        else if (OPT("--warmup-ms")) o.warmup_ms = atof(v);
        else if (a[0] == '-') usage();
        else files[nfiles++] = argv[i];
#undef OPT
    }
    if (strcmp(cmd, "analyze") == 0) {
        rc = cmd_analyze(&o, nfiles, files);
        free(files);
        return rc;
    }
    free(files);
    if (strcmp(cmd, "now") == 0) { /* CLOCK_MONOTONIC ns, for the peers' shared start */
        printf("%lld\n", (long long)now_ns());
        return 0;
    }
    if (o.port <= 0 || o.port > 65535) usage();
    /* Sleeps (the holds, the naive poller's 1 ms) are not stretched by
     * the default 50 µs timer slack. */
    prctl(PR_SET_TIMERSLACK, 1UL);
    counters_init();
    if (strcmp(cmd, "seq") == 0) return cmd_seq(&o);
    if (strcmp(cmd, "contend") == 0) return cmd_contend(&o);
    if (strcmp(cmd, "waiters") == 0) return cmd_waiters(&o);
    if (strcmp(cmd, "renew") == 0) return cmd_renew(&o);
    if (strcmp(cmd, "cache") == 0) return cmd_cache(&o);
    if (strcmp(cmd, "carry") == 0) return cmd_carry(&o);
    if (strcmp(cmd, "pairs") == 0) return cmd_pairs(&o);
    if (strcmp(cmd, "sem") == 0) return cmd_sem(&o);
    if (strcmp(cmd, "pipe") == 0) return cmd_pipe(&o);
    if (strcmp(cmd, "redlock") == 0) return cmd_redlock(&o);
    usage();
}
