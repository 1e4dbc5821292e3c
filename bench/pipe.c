/* pipe.c -- dlock-bench pipe: the pipelined unlock against its floors, a
 * fresh process's contention, and caching under contention.
 *
 *   (a) uncontended lock+unlock with the pipelined unlock beside the raw
 *       pair (SET NX PX + compare-and-delete), interleaved rounds; goal
 *       >= 1.5x the raw pair's pairs/s.
 *   (b) two processes in strict alternation (a turn word in shared
 *       memory: each locks only after the other unlocked), the pipelined
 *       unlock beside the confirmed one in interleaved blocks of one pair
 *       of processes; goal >= 1.3x the confirmed unlock's handoffs/s.
 *   (c) 4 processes forked at once, each making its own client and mutex
 *       and taking it 250 times with a 1 ms hold, counted from the fork;
 *       goal >= 0.95x the ideal 1/(hold + 2 RT), RT a message from one
 *       process to another through the server (hop_rt_us), printed beside
 *       the same run's steady state (from the moment all 4 have held it
 *       once).
 *   (d) two plain forked processes looping lock -> 1 ms of work ->
 *       unlock on a caching mutex, no other coordination: the longest run
 *       of acquisitions by one process (goal <= 4).
 *
 * Each figure is printed with its floor and MET or MISSED.  Every loop is
 * bounded by a count and a time.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static void check(int rc, const char *what) {
    if (rc != 0) die("%s: %s (%s)", what, dlock_strerror(rc), dlock_last_error());
}

static void verdict(const bopts *o, const char *key, double value, double floor, int at_most) {
    int met = at_most ? value <= floor : value >= floor;
    char k[128];
    result(o, key, value, at_most ? "max" : "x");
    snprintf(k, sizeof k, "%s_goal", key);
    result(o, k, floor, at_most ? "max" : "x");
    printf("  %-40s %.3f (goal %s %.2f): %s\n", key, value, at_most ? "<=" : ">=", floor, met ? "MET" : "MISSED");
}

static void pmutex(dlock_mutex_t *m, dlock_client_t *c, const char *name, int pipelined, int caching) {
    dlock_mutexattr_t a;
    dlock_mutexattr_init(&a);
    dlock_mutexattr_setclient(&a, c);
    dlock_mutexattr_settype(&a, DLOCK_MUTEX_NORMAL);
    check(dlock_mutexattr_setpipelined(&a, pipelined), "setpipelined");
    if (caching) check(dlock_mutexattr_setcaching(&a, 1), "setcaching");
    check(dlock_mutex_init(m, name, &a), "mutex_init");
    dlock_mutexattr_destroy(&a);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ------------------------------------------------------ (a) uncontended */

static double rate_of(long n, int64_t t0) {
    return (double)n * 1e9 / (double)(now_ns() - t0);
}

/* What one kind's timed blocks cost, summed over rounds: pairs, dlock's
 * send() calls (the raw pair's are the bench's own: 2 a pair), the
 * server's top-level requests and its CPU seconds.  They back the rate
 * with counts a loaded machine does not blur: a release that left with
 * the next acquire would read 1 send a pair, not 2. */
typedef struct pair_cost {
    long pairs, sends, requests;
    double cpu;
} pair_cost;

static const char *const kind_name[3] = { "raw_pair", "confirmed", "uncontended" };

/* One timed block of kind `which` (0 the raw pair, 1 the confirmed
 * unlock, 2 the pipelined one): up to n pairs or 1 s; its pairs/s. */
static double pair_block(redisContext *rc, const char *sha, dlock_mutex_t *m, int which, long n, pair_cost *pc) {
    const char *cmds = which == 0 ? RAW_CMDS : DLOCK_PAIR_CMDS;
    bcounters c0, c1;
    long q0 = server_requests(rc, cmds, NULL), i;
    double cpu0 = server_cpu(rc), rate;
    int64_t t0, end;
    counters_get(&c0);
    t0 = now_ns();
    end = t0 + (int64_t)1e9;
    for (i = 0; i < n && now_ns() < end; i++) {
        if (which == 0) {
            if (raw_pair(rc, "bench:pipe-raw", "0123456789abcdef0123456789abcdef", sha) != 0) die("raw pair");
        } else {
            check(dlock_mutex_lock(m), "lock");
            check(dlock_mutex_unlock(m), "unlock");
        }
    }
    rate = rate_of(i, t0);
    if (which == 2)
        check(dlock_mutex_lock(m), "lock"); /* reads the last release's answer, as the loop's next lock would */
    counters_get(&c1);
    pc->cpu += server_cpu(rc) - cpu0;
    /* (the INFO commandstats reading itself is no evalsha or set) */
    pc->requests += server_requests(rc, cmds, NULL) - q0;
    if (which == 2) check(dlock_mutex_unlock(m), "unlock");
    pc->pairs += i;
    pc->sends += which == 0 ? 2 * i : c1.sends - c0.sends;
    return rate;
}

static void pair_costs(const bopts *o, const pair_cost *pc) {
    int k;
    for (k = 0; k < 3; k++) {
        char key[96];
        double p = pc[k].pairs > 0 ? (double)pc[k].pairs : 1;
        snprintf(key, sizeof key, "pipe.%s_sends_per_pair", kind_name[k]);
        result(o, key, (double)pc[k].sends / p, "sends");
        snprintf(key, sizeof key, "pipe.%s_requests_per_pair", kind_name[k]);
        result(o, key, (double)pc[k].requests / p, "req");
        snprintf(key, sizeof key, "pipe.%s_server_cpu_us_per_pair", kind_name[k]);
        result(o, key, pc[k].cpu * 1e6 / p, "us");
    }
}

/* Three kinds in turn each round, the order turning: the raw pair, the
 * confirmed unlock's pair, the pipelined unlock's pair. */
static void uncontended(const bopts *o, redisContext *rc, dlock_client_t *cl) {
    const char *sha = raw_release_sha(rc);
    int rounds = o->smoke ? 3 : 15, r, k;
    long n = o->smoke ? 300 : 3000, i;
    double rate[3][15], ratio[15], cratio[15];
    pair_cost pc[3];
    dlock_mutex_t m[3];

    memset(pc, 0, sizeof pc);
    pmutex(&m[1], cl, "pipe-seq-c", 0, 0);
    pmutex(&m[2], cl, "pipe-seq-p", 1, 0);
    for (i = 0; i < 200; i++) { /* warm-up: connections, scripts, threads */
        for (k = 1; k < 3; k++) {
            check(dlock_mutex_lock(&m[k]), "lock");
            check(dlock_mutex_unlock(&m[k]), "unlock");
        }
        if (raw_pair(rc, "bench:pipe-raw", "0123456789abcdef0123456789abcdef", sha) != 0) die("raw pair");
    }
    for (r = 0; r < rounds; r++) {
        for (k = 0; k < 3; k++) {
            int which = (k + r) % 3;
            rate[which][r] = pair_block(rc, sha, &m[which], which, n, &pc[which]);
        }
        ratio[r] = rate[2][r] / rate[0][r];
        cratio[r] = rate[1][r] / rate[0][r];
    }
    check(dlock_mutex_destroy(&m[1]), "destroy");
    check(dlock_mutex_destroy(&m[2]), "destroy");
    pair_costs(o, pc);
    result(o, "pipe.raw_pair_per_s", median(rate[0], rounds), "pairs/s");
    result(o, "pipe.confirmed_per_s", median(rate[1], rounds), "pairs/s");
    result(o, "pipe.confirmed_vs_raw_pair", median(cratio, rounds), "x");
    result(o, "pipe.uncontended_per_s", median(rate[2], rounds), "pairs/s");
    verdict(o, "pipe.uncontended_vs_raw_pair", median(ratio, rounds), 1.5, 0);
}

/* --------------------------------------------------- (b) alternation */

/* The two unlocks are compared inside one pair of processes: each has a
 * confirmed and a pipelined mutex (two names) and the pair takes them in
 * blocks of ALT_BLOCK handoffs, the kinds alternating block by block.  On
 * a host with few cores where the two processes and the server land
 * decides much of a handoff's cost, and it is fixed for a pair's life:
 * blocks of one pair see the same placement, where a pair per kind did
 * not (the ratio of such rounds swung with it).  The first ALT_SKIP
 * handoffs of a block are not counted (the switch: the other mutex's
 * first requests, the server's INFO read between blocks).
 *
 * A process waits for its turn asleep, on a futex, as a process waiting
 * for work does (and as bench cache's strict alternation does); the woken
 * one's wake-up then runs while the release it follows is on its way.
 * The same run is made with the turn awaited by a sched_yield loop
 * (`spin`), reported beside it: the next acquire then leaves the moment
 * the turn passes, nothing overlaps the release, and on 2 cores the
 * spinning process takes the CPU the server is woken on -- the least the
 * pipelined unlock can save. */
enum { ALT_BLOCK = 200, ALT_SKIP = 20 };

typedef struct alt_shared {
    uint32_t turn; /* futex word: whose turn, 0 or 1 */
    uint32_t stop;
    int spin;           /* the turn awaited by a sched_yield loop */
    volatile int ready; /* processes connected */
    volatile long count;
    volatile int errors;
    int64_t last; /* when the turn last passed */
    /* per kind (0 confirmed, 1 pipelined), the counted handoffs only */
    long handoffs[2], cmds[2], sends[2];
    int64_t ns[2];
    double cpu[2], cpu0; /* the server's CPU seconds; at the block's start */
} alt_shared;

/* One process of the pair: n_block-handoff blocks of each kind in turn,
 * the first block's kind `first`, until the cap or `seconds`. */
static void alt_child(const bopts *o, alt_shared *sh, int me, int first, long cap, double seconds) {
    dlock_client_t *cl = bclient(o);
    redisContext *rc = bconnect(o); /* the server's CPU between blocks */
    dlock_mutex_t m[2];
    int64_t end;
    int k;
    pmutex(&m[0], cl, "pipe-alt-c", 0, 0);
    pmutex(&m[1], cl, "pipe-alt-p", 1, 0);
    for (k = 0; k < 2; k++) { /* warm: connections, subscriber */
        check(dlock_mutex_lock(&m[k]), "lock");
        check(dlock_mutex_unlock(&m[k]), "unlock");
    }
    __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < 3) sched_yield();
    end = now_ns() + (int64_t)(seconds * 1e9);
    for (;;) {
        bcounters c0, c1;
        long i, at;
        int64_t t;
        if (sh->spin) {
            while (__atomic_load_n(&sh->turn, __ATOMIC_ACQUIRE) != (uint32_t)me && !sh->stop) sched_yield();
            if (sh->stop) break;
        } else {
            int w = turn_wait(&sh->turn, &sh->stop, (uint32_t)me, end + (int64_t)5e9);
            if (w == -2) sh->errors++; /* the other never passed the turn */
            if (w != 0) break;
        }
        i = sh->count;
        at = i % ALT_BLOCK;
        k = (int)((i / ALT_BLOCK + first) % 2);
        counters_get(&c0);
        if (dlock_mutex_lock(&m[k]) != 0) sh->errors++;
        if (dlock_mutex_unlock(&m[k]) != 0) sh->errors++;
        t = now_ns();
        if (at >= ALT_SKIP) {
            counters_get(&c1);
            sh->handoffs[k]++;
            sh->ns[k] += t - sh->last;
            sh->cmds[k] += c1.cmds - c0.cmds;
            sh->sends[k] += c1.sends - c0.sends;
        }
        if (at == ALT_SKIP - 1) sh->cpu0 = server_cpu(rc);
        if (at == ALT_BLOCK - 1) sh->cpu[k] += server_cpu(rc) - sh->cpu0;
        sh->last = now_ns();
        /* (stops after a block of each kind: as many of one as of the other) */
        if (i + 1 >= cap || (at == ALT_BLOCK - 1 && i / ALT_BLOCK % 2 == 1 && sh->last >= end))
            __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
        sh->count = i + 1;
        turn_pass(&sh->turn, (uint32_t)(1 - me));
    }
    for (k = 0; k < 2; k++) dlock_mutex_destroy(&m[k]);
    redisFree(rc);
    _exit(0);
}

/* How many of the n workers in pids did not exit with status 0 (waits for
 * each). */
static int workers_failed(const pid_t *pids, int n) {
    int p, failed = 0;
    for (p = 0; p < n; p++) {
        int st;
        if (waitpid(pids[p], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
    }
    return failed;
}

/* What each kind's counted handoffs cost, summed over rounds: handoffs,
 * dlock's requests and send() calls (both processes), the server's CPU
 * seconds, their time.  The two kinds make the same requests (4 a
 * handoff: the pipelined SET, its EXISTS and fence, the release; more
 * when an acquire found the lock still held and asked the script) and
 * the server does the same work; what the pipelined unlock saves is the
 * releaser's wait for its answer, so the ratio is bounded by the share of
 * a handoff that wait is. */
typedef struct alt_cost {
    long handoffs, cmds, sends;
    double cpu, secs;
} alt_cost;

/* One round: a pair of processes, the kinds in blocks (the first block's
 * kind `first`); each kind's handoffs/s into rate[]. */
static void alternation(const bopts *o, int spin, int first, double seconds, alt_cost *ac, double rate[2]) {
    alt_shared *sh = shared_alloc(sizeof *sh);
    pid_t pids[2];
    int p, k;
    memset((void *)sh, 0, sizeof *sh);
    sh->spin = spin;
    fflush(NULL);
    for (p = 0; p < 2; p++) {
        if ((pids[p] = fork()) < 0) die("fork: %s", strerror(errno));
        if (pids[p] == 0) alt_child(o, sh, p, first, 400000, seconds);
    }
    while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < 2) sched_yield();
    sh->last = now_ns();
    __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
    sh->errors += workers_failed(pids, 2);
    if (sh->errors) die("alternation: %d errors", sh->errors);
    for (k = 0; k < 2; k++) {
        if (sh->handoffs[k] == 0) die("alternation: no %s block counted", k ? "pipelined" : "confirmed");
        ac[k].handoffs += sh->handoffs[k];
        ac[k].cmds += sh->cmds[k];
        ac[k].sends += sh->sends[k];
        ac[k].cpu += sh->cpu[k];
        ac[k].secs += (double)sh->ns[k] / 1e9;
        rate[k] = (double)sh->handoffs[k] * 1e9 / (double)sh->ns[k];
    }
}

static void alt_costs(const bopts *o, const alt_cost *ac) {
    static const char *const kind[2] = { "confirmed", "pipelined" };
    int k;
    for (k = 0; k < 2; k++) {
        char key[96];
        double h = ac[k].handoffs > 0 ? (double)ac[k].handoffs : 1;
        snprintf(key, sizeof key, "pipe.alternation_%s_requests_per_handoff", kind[k]);
        result(o, key, (double)ac[k].cmds / h, "req");
        snprintf(key, sizeof key, "pipe.alternation_%s_sends_per_handoff", kind[k]);
        result(o, key, (double)ac[k].sends / h, "sends");
        snprintf(key, sizeof key, "pipe.alternation_%s_server_cpu_us_per_handoff", kind[k]);
        result(o, key, ac[k].cpu * 1e6 / h, "us");
        snprintf(key, sizeof key, "pipe.alternation_%s_server_busy", kind[k]);
        result(o, key, ac[k].secs > 0 ? ac[k].cpu / ac[k].secs : 0, "cpu");
    }
}

/* Rounds of a pair each, the first block's kind turning round by round:
 * the medians of each kind's rate and of the rounds' ratios.  The turn
 * awaited asleep is the figure judged, with its costs; the spinning turn's
 * rates and ratio are reported beside it. */
static void alternations(const bopts *o, int spin) {
    enum { ROUNDS = 5 };
    int rounds = o->smoke ? 3 : ROUNDS, r;
    double seconds = o->smoke ? 0.4 : 0.8, rate[2][ROUNDS], ratio[ROUNDS];
    alt_cost ac[2];
    memset(ac, 0, sizeof ac);
    const char *v = spin ? "pipe.alternation_spin" : "pipe.alternation";
    char key[96];
    for (r = 0; r < rounds; r++) {
        double rr[2];
        alternation(o, spin, r % 2, seconds, ac, rr);
        rate[0][r] = rr[0];
        rate[1][r] = rr[1];
        ratio[r] = rr[1] / rr[0];
    }
    if (!spin) alt_costs(o, ac);
    snprintf(key, sizeof key, "%s_confirmed_per_s", v);
    result(o, key, median(rate[0], rounds), "handoffs/s");
    snprintf(key, sizeof key, "%s_pipelined_per_s", v);
    result(o, key, median(rate[1], rounds), "handoffs/s");
    (void)median(ratio, rounds); /* sorts: the rounds' spread */
    snprintf(key, sizeof key, "%s_round_ratio_min", v);
    result(o, key, ratio[0], "x");
    snprintf(key, sizeof key, "%s_round_ratio_max", v);
    result(o, key, ratio[rounds - 1], "x");
    snprintf(key, sizeof key, "%s_vs_confirmed", v);
    if (spin) result(o, key, median(ratio, rounds), "x");
    else verdict(o, key, median(ratio, rounds), 1.3, 0);
}

/* ----------------------------------------------- (c) fresh processes */

/* The round trip a handoff is made of: one process's request reaching
 * the server and the server's answer waking another process.  A handoff
 * is that path (the release's write, the waiter's BLPOP answered), never
 * a request and its answer to one process: a single client's PING can
 * have the server woken on its own CPU and read 9 us on this 2-core VM,
 * where any answer that wakes a second process reads 40-90 us.  So the
 * ideal's RT is measured as dlock's messages travel: two processes play
 * ping-pong through the server with raw commands (each writes RPUSH to
 * the other's list and BLPOP of its own in one write), and RT is half
 * the median exchange.  Up to n exchanges or 1 s, after a warm-up. */
static double hop_rt_us(const bopts *o, long n) {
    const char *ka = "bench:pipe-hop:a", *kb = "bench:pipe-hop:b";
    redisContext *rc = bconnect(o);
    series s = { 0 };
    int64_t end;
    double rt;
    pid_t pid;
    long i;
    freeReplyObject(bcmd(rc, "DEL %s %s", ka, kb));
    fflush(NULL);
    if ((pid = fork()) < 0) die("fork: %s", strerror(errno));
    if (pid == 0) { /* answers each of the parent's pushes, until one is "stop" or 2 s pass */
        redisContext *cc = bconnect(o);
        redisReply *r = bcmd(cc, "BLPOP %s 2", ka), *pushed;
        while (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && strcmp(r->element[1]->str, "stop") != 0) {
            freeReplyObject(r);
            redisAppendCommand(cc, "RPUSH %s x", kb);
            redisAppendCommand(cc, "BLPOP %s 2", ka);
            if (redisGetReply(cc, (void **)&pushed) != REDIS_OK || redisGetReply(cc, (void **)&r) != REDIS_OK) _exit(1);
            freeReplyObject(pushed);
        }
        freeReplyObject(r);
        redisFree(cc);
        _exit(0);
    }
    end = now_ns() + (int64_t)1e9;
    for (i = 0; i < n + 100 && now_ns() < end; i++) {
        int64_t t0 = now_ns();
        redisReply *r1, *r2;
        redisAppendCommand(rc, "RPUSH %s x", ka);
        redisAppendCommand(rc, "BLPOP %s 2", kb);
        if (redisGetReply(rc, (void **)&r1) != REDIS_OK || redisGetReply(rc, (void **)&r2) != REDIS_OK)
            die("hop: %s", rc->errstr);
        if (r2->type != REDIS_REPLY_ARRAY) die("hop: no answer from the other process");
        if (i >= 100) series_add(&s, now_ns() - t0); /* the first 100: warm-up */
        freeReplyObject(r1);
        freeReplyObject(r2);
    }
    freeReplyObject(bcmd(rc, "RPUSH %s stop", ka));
    if (workers_failed(&pid, 1)) die("hop: the other process failed");
    freeReplyObject(bcmd(rc, "DEL %s %s", ka, kb));
    redisFree(rc);
    rt = (double)series_pct(&s, 50) / 2e3;
    series_free(&s);
    return rt;
}

/* The most acquisitions of one run (4 x 250). */
#define FRESH_MAX 1000

typedef struct fresh_shared {
    volatile int64_t ready[4]; /* each one's client and mutex made */
    volatile int64_t first[4]; /* each one's first acquisition */
    volatile int64_t last[4];  /* and its last release */
    volatile long held;        /* acquisitions, all processes */
    volatile long order;       /* the next slot of the log below */
    volatile int inside;       /* exclusion check */
    volatile int bad;
    /* Each acquisition in the order the lock went (a slot taken inside
     * the lock): who, when it returned, when its unlock was called. */
    int who[FRESH_MAX];
    int64_t acq[FRESH_MAX], rel[FRESH_MAX];
} fresh_shared;

static void fresh_child(const bopts *o, fresh_shared *sh, int me, int n, double hold_ms) {
    dlock_client_t *cl = bclient(o);
    dlock_mutex_t m;
    int i;
    pmutex(&m, cl, "pipe-fresh", 0, 0);
    sh->ready[me] = now_ns();
    for (i = 0; i < n; i++) {
        int64_t t;
        long k;
        check(dlock_mutex_lock(&m), "lock");
        if (__atomic_add_fetch(&sh->inside, 1, __ATOMIC_SEQ_CST) != 1) sh->bad = 1;
        t = now_ns();
        k = __atomic_fetch_add(&sh->order, 1, __ATOMIC_SEQ_CST);
        if (i == 0) sh->first[me] = t;
        hold_until(t + (int64_t)(hold_ms * 1e6));
        __atomic_sub_fetch(&sh->inside, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&sh->held, 1, __ATOMIC_SEQ_CST);
        if (k < FRESH_MAX) {
            sh->who[k] = me;
            sh->acq[k] = t;
            sh->rel[k] = now_ns();
        }
        if (i == n - 1) sh->last[me] = now_ns();
        check(dlock_mutex_unlock(&m), "unlock");
    }
    check(dlock_mutex_destroy(&m), "destroy");
    _exit(0);
}

/* Where the fresh run's time went, beside its figure: per handoff (an
 * acquisition by another process than the one before it), the time from
 * the unlock call to the next holder's return from lock (mean, p50, and in
 * round trips: the ideal counts 2 for it), the holds' mean (the bench's
 * 1 ms sleep-then-spin: a host short of CPU wakes the sleep late), and
 * the requests behind each handoff: dlock's send() calls (one a round
 * trip) and the server's requests and time (INFO commandstats).  A
 * handoff's critical path is the holder's release request and the
 * server's answer to the queue head's BLPOP, pushed by that release: one
 * round trip and the release script's time; the releaser's next acquire
 * and BLPOP are made while the new holder holds. */
static void fresh_costs(const bopts *o, const fresh_shared *sh, double rt_us, const bcounters *c0, const bcounters *c1,
                        const snap *sd) {
    long n = sh->order < FRESH_MAX ? sh->order : FRESH_MAX, i, handoffs = 0;
    series hand = { 0 };
    double hold = 0, h;
    for (i = 0; i < n; i++) {
        hold += (double)(sh->rel[i] - sh->acq[i]);
        if (i > 0 && sh->who[i] != sh->who[i - 1]) series_add(&hand, sh->acq[i] - sh->rel[i - 1]);
    }
    handoffs = (long)hand.n;
    h = handoffs > 0 ? (double)handoffs : 1;
    result(o, "pipe.fresh_hold_mean_us", n > 0 ? hold / (double)n / 1e3 : 0, "us");
    result(o, "pipe.fresh_handoffs", (double)handoffs, "");
    result(o, "pipe.fresh_handoff_mean_us", series_mean(&hand) / 1e3, "us");
    result(o, "pipe.fresh_handoff_p50_us", (double)series_pct(&hand, 50) / 1e3, "us");
    result(o, "pipe.fresh_handoff_mean_rt", rt_us > 0 ? series_mean(&hand) / 1e3 / rt_us : 0, "RT");
    result(o, "pipe.fresh_sends_per_handoff", (double)(c1->sends - c0->sends) / h, "sends");
    result(o, "pipe.fresh_requests_per_handoff", (double)sd->calls / h, "req");
    result(o, "pipe.fresh_server_usec_per_handoff", (double)sd->usec / h, "us");
    series_free(&hand);
}

static void fresh(const bopts *o, redisContext *rc, double rt_us, double ping_us) {
    fresh_shared *sh = shared_alloc(sizeof *sh);
    bcounters c0, c1;
    snap sa, sb, sd;
    int n = o->smoke ? 50 : 250, p;
    double hold_ms = 1.0, ideal = 1e3 / (hold_ms + 2 * rt_us / 1e3), from_fork, steady, ready[4];
    int64_t t0, t_end = 0, t_all = 0;
    pid_t pids[4];
    memset((void *)sh, 0, sizeof *sh);
    counters_get(&c0);
    server_snap(rc, DLOCK_CMDS, &sa);
    fflush(NULL);
    t0 = now_ns();
    for (p = 0; p < 4; p++) {
        if ((pids[p] = fork()) < 0) die("fork: %s", strerror(errno));
        if (pids[p] == 0) fresh_child(o, sh, p, n, hold_ms);
    }
    if (workers_failed(pids, 4)) die("fresh: a worker failed");
    counters_get(&c1);
    server_snap(rc, DLOCK_CMDS, &sb);
    snap_delta(&sa, &sb, NULL, &sd);
    if (sh->bad) die("fresh: mutual exclusion broken");
    for (p = 0; p < 4; p++) {
        if (sh->last[p] > t_end) t_end = sh->last[p];
        if (sh->first[p] > t_all) t_all = sh->first[p];
    }
    from_fork = (double)sh->held * 1e9 / (double)(t_end - t0);
    /* steady: from the moment all 4 had held it once (the acquisitions
     * since then are at most held - 4 + 1, counted as held - 3) */
    steady = (double)(sh->held - 3) * 1e9 / (double)(t_end - t_all);
    result(o, "pipe.fresh_ideal_per_s", ideal, "acq/s");
    /* the ideal with a single client's PING for RT, reported beside it */
    result(o, "pipe.fresh_from_fork_vs_ping_ideal", from_fork * (hold_ms + 2 * ping_us / 1e3) / 1e3, "x");
    result(o, "pipe.fresh_from_fork_per_s", from_fork, "acq/s");
    result(o, "pipe.fresh_steady_per_s", steady, "acq/s");
    result(o, "pipe.fresh_steady_vs_ideal", steady / ideal, "x");
    result(o, "pipe.fresh_first_hold_ms", (double)(t_all - t0) / 1e6, "ms");
    /* the start-up's share: what from_fork loses beside the same run's
     * steady state, and how long a process took to make its client */
    result(o, "pipe.fresh_from_fork_vs_steady", from_fork / steady, "x");
    for (p = 0; p < 4; p++) ready[p] = (double)(sh->ready[p] - t0) / 1e6;
    result(o, "pipe.fresh_ready_ms", median(ready, 4), "ms");
    fresh_costs(o, sh, rt_us, &c0, &c1, &sd);
    verdict(o, "pipe.fresh_from_fork_vs_ideal", from_fork / ideal, 0.95, 0);
}

/* ------------------------------------------------ (d) caching contention */

typedef struct cache_shared {
    volatile long n;
    volatile int stop;
    volatile int ready;
    volatile long per[2]; /* acquisitions by each: their sum must be n */
    volatile int64_t calling[2]; /* when each called lock (0: not in lock) */
    signed char who[200000];
    /* 1: the other process was already in its lock call when this
     * acquisition's call began (it was waiting, not descheduled) */
    signed char asked[200000];
} cache_shared;

static void cache_child(const bopts *o, cache_shared *sh, int me, double seconds) {
    dlock_client_t *cl = bclient(o);
    dlock_mutex_t m;
    int64_t end;
    pmutex(&m, cl, "pipe-cache", 0, 1);
    __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < 2) sched_yield();
    end = now_ns() + (int64_t)(seconds * 1e9);
    while (!sh->stop) {
        int64_t t = now_ns(), other;
        long i;
        __atomic_store_n(&sh->calling[me], t, __ATOMIC_SEQ_CST);
        other = __atomic_load_n(&sh->calling[1 - me], __ATOMIC_SEQ_CST);
        check(dlock_mutex_lock(&m), "lock");
        __atomic_store_n(&sh->calling[me], 0, __ATOMIC_SEQ_CST);
        i = sh->n; /* a plain read and write: exclusion checked by the count */
        if (i < (long)sizeof sh->who) {
            sh->who[i] = (signed char)me;
            sh->asked[i] = (signed char)(other != 0 && other < t);
        }
        hold_until(now_ns() + 1000000); /* 1 ms of work under the lock */
        sh->n = i + 1;
        sh->per[me]++;
        if (i + 1 >= (long)sizeof sh->who || now_ns() >= end) sh->stop = 1;
        check(dlock_mutex_unlock(&m), "unlock");
    }
    dlock_mutex_destroy(&m);
    _exit(0);
}

static void caching(const bopts *o) {
    cache_shared *sh = shared_alloc(sizeof *sh);
    long i, run = 0, longest = 0, arun = 0, alongest = 0;
    pid_t pids[2];
    int p;
    memset((void *)sh, 0, sizeof *sh);
    fflush(NULL);
    for (p = 0; p < 2; p++) {
        if ((pids[p] = fork()) < 0) die("fork: %s", strerror(errno));
        if (pids[p] == 0) cache_child(o, sh, p, o->smoke ? 0.3 : 1.0);
    }
    if (workers_failed(pids, 2)) die("caching: a worker failed");
    if (sh->per[0] + sh->per[1] != sh->n) die("caching: mutual exclusion broken (%ld + %ld acquisitions, count %ld)",
                                               sh->per[0], sh->per[1], sh->n);
    for (i = 0; i < sh->n && i < (long)sizeof sh->who; i++) {
        run = i > 0 && sh->who[i] == sh->who[i - 1] ? run + 1 : 1;
        if (run > longest) longest = run;
        /* the same run's acquisitions made while the other waited */
        arun = run == 1 ? sh->asked[i] : arun + sh->asked[i];
        if (arun > alongest) alongest = arun;
    }
    result(o, "pipe.cache_acquisitions", (double)sh->n, "acq");
    result(o, "pipe.cache_longest_run_asked", (double)alongest, "max");
    verdict(o, "pipe.cache_longest_run", (double)longest, 4, 1);
}

int cmd_pipe(const bopts *o) {
    redisContext *rc = bconnect(o);
    dlock_client_t *cl = bclient(o);
    series ps = { 0 };
    double rt_us;

    rt_us = o->rt_us > 0 ? o->rt_us : (double)bench_ping(o, rc, 2000, 1.0, &ps) / 1e3;
    series_free(&ps);
    result(o, "pipe.ping_us", rt_us, "us");
    printf("pipelined unlock, fresh processes, caching under contention (each with its goal)\n");
    /* --kind pair|alt|fresh|cache runs that part alone */
    if (o->kind == NULL || strcmp(o->kind, "pair") == 0) uncontended(o, rc, cl);
    if (o->kind == NULL || strcmp(o->kind, "alt") == 0) {
        alternations(o, 0);
        alternations(o, 1);
    }
    if (o->kind == NULL || strcmp(o->kind, "fresh") == 0) {
        double hop = hop_rt_us(o, o->smoke ? 300 : 1000);
        result(o, "pipe.hop_rt_us", hop, "us");
        fresh(o, rc, hop, rt_us);
    }
    if (o->kind == NULL || strcmp(o->kind, "cache") == 0) caching(o);
    redisFree(rc);
    return 0;
}
