/* bench.h -- shared pieces of the dlock benchmark (dlock-bench).
 *
 * Every measurement is made against its floor in the same run: the PING
 * round trip and a raw hiredis acquire+release pair.  Results go to
 * stdout for people and, with --csv FILE, to a CSV of key,value,unit
 * rows that bench/run turns into the table of bench/README.md.
 *
 * Every load loop here is bounded twice: by a count and by a time limit.
 * Traffic goes only to the server named by --port on 127.0.0.1.
 */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <hiredis/hiredis.h>

#include "dlock.h"

/* ------------------------------------------------------------ options */

typedef struct bopts {
    int port;            /* redis-server on 127.0.0.1 */
    const char *csv;     /* append key,value,unit rows here (NULL: none) */
    const char *events;  /* contention: write the event log here */
    const char *label;   /* result key prefix / implementation name */
    int smoke;           /* tiny counts: for CI */
    double seconds;      /* time bound of one measurement */
    long count;          /* count bound of one measurement */
    int procs, threads;  /* contention shape */
    double hold_ms;      /* contention hold */
    int locks;           /* renewal: locks held */
    unsigned lease_ms;   /* renewal: lease */
    const char *impl;    /* contention: dlock | poll */
    int fair;            /* contention, waiters: dlock_mutexattr_setfair(1) */
    const char *waiters; /* waiters sweep: comma-separated list */
    double rt_us;        /* analyze: the round trip measured in the same run */
    double warmup_ms;    /* analyze: events before this are left out */
    int caching;         /* contend: dlock_mutexattr_setcaching(1) */
    const char *list;    /* carry: thread counts, comma-separated */
    const char *kind;    /* pairs: raw | dlock */
    const char *before, *after; /* pairs: shell commands run around the measured loop */
    const char *masters; /* redlock: the masters' ports, comma-separated (127.0.0.1) */
} bopts;

/* ---------------------------------------------------------------- time */

int64_t now_ns(void);
void spin_until(int64_t until);
/* A hold of exact length: sleeps until 150 µs before `until`, then spins.
 * Sleeping keeps the holder from looking CPU-bound to the scheduler (a
 * holder that spun for a whole millisecond waits for a time slice after
 * its unlock round trip on a busy host); the spin makes the end exact. */
void hold_until(int64_t until);
void sleep_ms(double ms);

/* -------------------------------------------------------------- series */

typedef struct series {
    int64_t *v;
    size_t n, cap;
} series;

void series_add(series *s, int64_t x);
/* The rate of a round of n > 0 pairs begun at t_start (now_ns), in
 * pairs/s: added to s (x1000, for precision) and returned. */
double series_add_rate(series *s, long n, int64_t t_start);
void series_free(series *s);
/* p in [0,100]; sorts the series (once).  0 for an empty series. */
int64_t series_pct(series *s, double p);
double series_mean(const series *s);
int64_t series_max(const series *s);

/* ------------------------------------------------------------- results */

/* Prints "  key = value unit" and appends the row to the CSV. */
void result(const bopts *o, const char *key, double value, const char *unit);
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* ------------------------------------------------------------ hiredis */

/* The bench's own connection (never counted as dlock's requests). */
redisContext *bconnect(const bopts *o);
/* A command on the bench's own connection, formatted as redisCommand. */
redisReply *bcmd(redisContext *c, const char *fmt, ...);
/* Requests made by clients, from INFO commandstats: the sum of the calls
 * of the commands named in `cmds` (comma-separated, e.g.
 * "evalsha,eval,subscribe"); commands that scripts call inside the server
 * are not requests and must not be named.  total (if not NULL) gets
 * total_commands_processed, which counts script-internal calls too. */
long server_requests(redisContext *c, const char *cmds, long *total);
/* The same, and (usec) the server's time in those commands, in µs. */
long server_requests_usec(redisContext *c, const char *cmds, long *total, long *usec);
/* Server CPU seconds (user + sys) from INFO cpu. */
double server_cpu(redisContext *c);
long server_used_memory(redisContext *c);
/* One reading of the server's counters (INFO commandstats, stats, cpu):
 * the calls and usec of the top-level commands named in `top`
 * (comma-separated: a script's own redis.call()s are counted by
 * commandstats too, under their names, and their time is inside the
 * script's), every command's calls but INFO's (all_calls: script calls
 * included), the bytes read from and written to clients, connections
 * accepted, CPU seconds.  A reading's own requests and answers show in
 * the next one's bytes: snap_overhead measures that (two readings back to
 * back) for snap_delta to take off. */
typedef struct snap {
    long calls, usec, all_calls, conns;
    long long net_in, net_out;
    double cpu;
} snap;
void server_snap(redisContext *c, const char *top, snap *s);
void snap_overhead(redisContext *c, snap *ov);
/* b - a - ov (ov may be NULL), field by field. */
void snap_delta(const snap *a, const snap *b, const snap *ov, snap *d);
/* dlock's top-level commands. */
/* The raw pair's. */
#define RAW_CMDS "set,evalsha"
#define DLOCK_CMDS "evalsha,eval,blpop,subscribe,unsubscribe,psubscribe,punsubscribe,script|load,script|exists,select,auth,hello"
/* dlock's top-level commands in an uncontended pair: the scripts, and the
 * pipelined SET and EXISTS of one server's uncontended acquire (its fence
 * is a script).  Only where no other script calls those (the string
 * form's release calls MGET, DEL): commandstats counts a script's calls
 * under their own names too, so in a contended run they would count twice
 * (and there the pipeline is not used: a lock found held is asked by the
 * script).  The fence script's own SET is counted under set: one per
 * TIME, which it alone calls in an uncontended pair, so TIME's calls are
 * taken off ("-time"; server_requests_usec). */
#define DLOCK_PAIR_CMDS DLOCK_CMDS ",set,exists,-time"

/* Requests dlock's own code issued, counted by wrapping its hiredis calls
 * at link time (-Wl,--wrap): shared between forked processes. */
typedef struct bcounters {
    long cmds;    /* commands sent (blocking or pipelined) */
    long rts;     /* round trips waited on: blocking commands + pipeline flushes */
    long sends;   /* send() calls dlock made (it writes requests itself): one a round trip */
    long sent_bytes; /* the bytes those calls wrote */
} bcounters;
extern bcounters *bc;
void counters_init(void); /* in shared memory, before any fork */
void counters_get(bcounters *out);

/* Shared anonymous memory, visible to forked children. */
void *shared_alloc(size_t n);

/* Strict alternation between forked processes: a turn word in shared
 * memory, waited on with a futex (a few loads first).  turn_wait: 0 when
 * it is `id`'s turn, -1 once *stop is set, -2 past give_up (CLOCK_MONOTONIC
 * ns).  turn_pass: the turn to `to`, its waiter woken. */
int turn_wait(uint32_t *turn, const uint32_t *stop, uint32_t id, int64_t give_up);
void turn_pass(uint32_t *turn, uint32_t to);

/* A dlock client for the bench's server (prefix "bench:"). */
dlock_client_t *bclient(const bopts *o);
/* flags: BMUTEX_FAIR, dlock_mutexattr_setfair(&a, 1), a FIFO mutex;
 * BMUTEX_CACHING, dlock_mutexattr_setcaching(&a, 1). */
#define BMUTEX_FAIR 1
#define BMUTEX_CACHING 2
void bmutex_init(dlock_mutex_t *m, dlock_client_t *c, const char *name, int type, unsigned lease_ms, int flags);

/* ------------------------------------------------------- the programs */

/* PING round trip; returns its median in ns. */
int64_t bench_ping(const bopts *o, redisContext *c, long n, double seconds, series *out);
/* One raw acquire+release pair (SET NX PX + EVALSHA compare-and-delete). */
int raw_pair(redisContext *c, const char *key, const char *token, const char *sha);
/* SCRIPT LOAD of body: its sha into sha[size] (dies if refused). */
void script_load(redisContext *c, const char *body, char *sha, size_t size);
const char *raw_release_sha(redisContext *c);

int cmd_seq(const bopts *o);
int cmd_contend(const bopts *o);
int cmd_waiters(const bopts *o);
int cmd_renew(const bopts *o);
int cmd_cache(const bopts *o);
int cmd_carry(const bopts *o);
int cmd_pairs(const bopts *o);
int handoff_pairs(const bopts *o);
int cmd_sem(const bopts *o); /* sem.c: the semaphore beside the mutex */
int cmd_redlock(const bopts *o); /* redlock.c: Redlock beside the single server */
int cmd_analyze(const bopts *o, int nfiles, char **files);
int cmd_pipe(const bopts *o); /* pipe.c: the pipelined unlock, fresh processes, caching's runs */

/* Contention events: one acquisition each. */
typedef struct bevent {
    int32_t worker;
    int32_t pad;
    int64_t t_call; /* lock called */
    int64_t t_acq;  /* lock returned */
    int64_t t_rel;  /* unlock about to be called ("release issued") */
} bevent;

/* What one contention run showed. */
typedef struct cstats {
    double rt_us;            /* PING median of this run */
    double ideal_per_s;      /* 1 / (hold + 2 RT) */
    double acq_per_s;
    double handoff_p50_us, handoff_p90_us, handoff_p99_us, handoff_max_us;
    double handoff_p50_rt;
    double wait_p50_ms, wait_p99_ms, max_wait_ms;
    double reqs_per_acq, client_cmds_per_acq;
    long acquisitions, handoffs, self_reacq;
    long handoffs_all;       /* acquisitions by another worker than the one before, whole log */
    /* fairness */
    long longest_run;        /* most consecutive acquisitions by one worker */
    long min_per_worker, max_per_worker; /* acquisitions per worker in the window */
    long max_overtaken;      /* most acquisitions by others during one wait */
    long violations, errors;
} cstats;

/* Prints and records the statistics of an event log: acquisitions/s
 * against the ideal 1/(hold + 2 RT), handoff latency (unlock issued ->
 * lock returned, when the next holder is another worker), waits,
 * fairness, and intervals that overlap (exclusion violations).  Writes
 * the handoff latencies (µs, one a line) to `handoff_out` if not NULL,
 * the direct ones to `handoff_out`.direct and every wait (lock called ->
 * returned, µs) to `handoff_out`.wait. */
void analyze_events(const bopts *o, bevent *ev, size_t n, double rt_us, const char *handoff_out, cstats *st);

int run_contend(const bopts *o, const char *impl, int procs, int threads, double seconds,
                const char *label, const char *events_out, const char *handoff_out, cstats *st);

#endif
