/* fixture.h -- the test harness: real redis-servers on loopback ports in
 * temporary folders, CUnit glue, typed asserts and child-process helpers.
 *
 * Every server the fixture starts is killed, and its folder removed, when
 * the test process exits or dies of SIGINT, SIGTERM, SIGABRT, SIGSEGV or
 * SIGALRM -- but only by the process that started it, never by a fork
 * child.  A server started from the main thread also dies with the test
 * process if that is SIGKILLed (PR_SET_PDEATHSIG).
 */
#ifndef DLT_FIXTURE_H
#define DLT_FIXTURE_H

#include <pthread.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>

#include <CUnit/CUnit.h>
#include <dlock.h>
#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * redis-server instances.
 * ---------------------------------------------------------------------- */
typedef struct dlt_redis {
    pid_t pid;             /* the server process while running, else 0 */
    int port;              /* 127.0.0.1:port; kept across stop/restart */
    char dir[256];         /* its folder: redis.conf, redis.log, data */
    char url[128];         /* "redis://127.0.0.1:PORT"; for a TLS-only server
                              "rediss://127.0.0.1:PORT", to which a client adds
                              "?tls_ca_file=TLS_DIR/ca.crt" */
    char conf_extra[1024]; /* the extra_conf given to dlt_redis_start */
    char tls_dir[256];     /* a TLS-only server (dlt_redis_start_tls): the
                              folder of its certificates (dlt_tls_certs); else "" */
} dlt_redis;

/* Starts a redis-server on a free loopback port in a fresh folder under
 * $TMPDIR (or /tmp) and waits until it answers PING.  It keeps no data
 * on disk, and as a master starts a replica's full sync at once
 * (repl-diskless-sync-delay 0).  extra_conf: more redis.conf lines
 * ("maxmemory 1mb\nappendonly yes", overriding those), or NULL.  If they
 * contain "sentinel ..." directives the server runs in sentinel mode; with
 * "cluster-enabled yes" the bus port (port + 10000) is free as well.  With
 * a "requirepass PW" line, the fixture's own connections (readiness,
 * dlt_redis_cmd) send AUTH PW first.
 * The server binary is $DLT_REDIS_SERVER, else redis-server from PATH,
 * else /usr/bin/redis-server.  Returns 0, or -1 with a message on stderr. */
int dlt_redis_start(dlt_redis *r, const char *extra_conf);
/* SIGTERM, then SIGKILL if it has not exited within 3 s.  Keeps the folder
 * and the port so that dlt_redis_restart can reuse them.  0 or -1. */
int dlt_redis_stop(dlt_redis *r);
/* SIGKILL (a crash: no shutdown work at all).  0 or -1. */
int dlt_redis_kill(dlt_redis *r);
/* Starts a stopped or killed server again, same port, folder and config,
 * retrying the port for up to 5 s.  0, or -1 with a message on stderr. */
int dlt_redis_restart(dlt_redis *r);
/* Stops the server if it runs, removes its folder, forgets it.  Safe to
 * call twice, and on a server whose start failed. */
void dlt_redis_cleanup(dlt_redis *r);

/* Starts a TLS-only redis-server, as dlt_redis_start otherwise: "port 0",
 * "tls-port PORT" (r->port is that port), its certificate, key and CA from
 * cert_dir (made by dlt_tls_certs; NULL: dlt_tls_dir()), client.crt/key
 * as what it shows when it connects to another server (the cluster bus
 * wants a client certificate), "tls-auth-clients optional",
 * "tls-replication yes", "tls-cluster yes" (a TLS-only server can have its
 * cluster bus and replication over nothing else; with "cluster-enabled
 * yes" PORT + 10000 is free too).  extra_conf comes after
 * those lines and may override them ("tls-auth-clients yes").  Readiness,
 * dlt_redis_cmd and the statistics calls below talk TLS to it (verifying
 * its certificate with cert_dir/ca.crt, presenting cert_dir/client.crt);
 * stop, kill, restart and cleanup are as for any server.  0 or -1. */
int dlt_redis_start_tls(dlt_redis *r, const char *cert_dir, const char *extra_conf);

/* A test PKI, made with the openssl command (scripts/deps installs it) in
 * the existing folder dir, whose path must be plain characters (no quote,
 * space or %): P-256 keys, certificates valid for 3 days.
 *   ca.crt, ca.key            a self-signed CA ("dlock test CA")
 *   server.crt, server.key    signed by it, for DNS:localhost and IP:127.0.0.1
 *   client.crt, client.key    signed by it, for clientAuth
 *   ca2.crt, ca2.key          an unrelated CA
 *   client2.crt, client2.key  a client certificate of ca2
 *   openssl.cnf, openssl.log  the openssl configuration (a file that holds no
 *                             certificate) and the commands' output
 * Takes ~0.1-0.5 s.  0, or -1 with the reason (and openssl.log) on stderr. */
int dlt_tls_certs(const char *dir);
/* One folder with dlt_tls_certs' files for this process, made on the first
 * call and removed when the process exits (as a server's folder: never by a
 * fork child).  Its path, or NULL (reason on stderr; later calls too). */
const char *dlt_tls_dir(void);

/* A loopback port that is free now, chosen as dlt_redis_start chooses
 * its servers' (below the kernel's ephemeral range when there is room), for
 * a test that runs a server of its own (e.g. a TLS-only redis-server).  It
 * may still be taken before the caller binds it: retry with another.  0 if
 * none was found. */
int dlt_free_port(void);

/* One command on a one-off connection (2 s timeouts; TLS for a TLS-only
 * server).  Returns the reply,
 * which may be a REDIS_REPLY_ERROR, or NULL when the server could not be
 * reached; the caller frees it with freeReplyObject().  fmt is hiredis's
 * (%s, %d, %lld, %b with a size_t length), not printf's. */
redisReply *dlt_redis_cmd(dlt_redis *r, const char *fmt, ...);
/* How many keys match pattern (KEYS: the tests' own small servers).  -1
 * on error. */
long long dlt_redis_keys_count(dlt_redis *r, const char *pattern);
/* calls=N of cmdstat_<cmd> in INFO commandstats; cmd is lowercase, e.g.
 * "evalsha", "set", "client|setname".  0 if absent, -1 on error. */
long long dlt_redis_cmdstat(dlt_redis *r, const char *cmd);
/* The same, less the calls that failed (e.g. NOSCRIPT before a reload). */
long long dlt_redis_cmdstat_ok(dlt_redis *r, const char *cmd);
/* The sum of calls= over all cmdstat_ lines (INFO's own calls included,
 * but not the INFO that asks).  -1 on error. */
long long dlt_redis_total_calls(dlt_redis *r);
/* total_error_replies of INFO stats: the error answers the server
 * counted, scripts' calls that failed included.  -1 on error. */
long long dlt_redis_errors(dlt_redis *r);
/* CONFIG RESETSTAT.  0 or -1. */
int dlt_redis_reset_stats(dlt_redis *r);

/* ------------------------------------------------------------------------
 * Locks as the suite's server sees them: the lock named N is the key
 * "dlock:{N}" on dlt_server (a string when taken on the uncontended path,
 * else a hash: src/backend/lua/acquire.lua), whose expiry is the lease; waiters
 * subscribe to the channel of the same name.
 * ---------------------------------------------------------------------- */
/* Writes "dlock:{name}" into buf (cap bytes); its length, as snprintf's. */
size_t dlt_lock_key(const char *name, char *buf, size_t cap);
/* EXISTS dlock:{name}: 1, 0, or -1 when the server does not answer. */
int dlt_key_exists(const char *name);
/* PTTL dlock:{name}: ms left, -2 no key, -1 no expiry, -3 no answer. */
long long dlt_key_pttl(const char *name);
/* A field of the holder of dlock:{name} (either form: DLT_LOCK_FIELD_LUA)
 * as a number; -1 when absent.  "pid" and "tid" are read from the
 * holder's "who" (host:pid:tid). */
long long dlt_key_field(const char *name, const char *field);
/* A script, for EVAL_RO with KEYS[1] a lock key and ARGV[1] one of owner,
 * fence, who, since, that answers that field of the lock's holder
 * record, whichever form the key has: a string "TOKEN FENCE SINCE WHO" (a
 * hold taken on the uncontended path; FENCE "-" when not kept) or a hash
 * (src/backend/lua/acquire.lua); nil when there is none.  For a test that reads
 * what the server holds. */
#define DLT_LOCK_FIELD_LUA                                                                         \
    "local ty = redis.call('TYPE', KEYS[1]).ok "                                                  \
    "if ty == 'hash' then return redis.call('HGET', KEYS[1], ARGV[1]) end "                       \
    "if ty ~= 'string' then return false end "                                                    \
    "local o, f, s, w = string.match(redis.call('GET', KEYS[1]), '^(%S+) (%S+) (%d+) (.*)$') "    \
    "if f == '-' then f = nil end "                                                               \
    "return ({owner = o, fence = f, since = s, who = w})[ARGV[1]] or false"
/* The holder of dlock:{name} as its hash names it ("who": host:pid:tid);
 * 1, or 0 when there is none.  Any output may be NULL. */
int dlt_key_who(const char *name, char *host, size_t cap, long long *pid, long long *tid);
/* The same for the lock hash `key` on the server r. */
int dlt_redis_who(dlt_redis *r, const char *key, char *host, size_t cap, long long *pid, long long *tid);
/* PUBSUB NUMSUB channel ("dlock:{name}"): its subscribers, or -1. */
long long dlt_numsub(const char *channel);

/* ------------------------------------------------------------------------
 * dlock objects.
 * ---------------------------------------------------------------------- */
/* dlock_mutex_init of name with lease_ms (0: the default lease) on client
 * (NULL: the default client).  0 or the first failing call's error. */
int dlt_mutex_make(dlock_mutex_t *m, const char *name, unsigned lease_ms, dlock_client_t *client);
/* Polls dlock_sem_info (the default client) until the semaphore name has
 * `want` waiters: 1, or 0 after timeout_ms. */
int dlt_sem_wait_waiters(const char *name, unsigned want, int timeout_ms);
/* dlock_client_create with the default config but url and unreachable_ms. */
int dlt_client_make(dlock_client_t **out, const char *url, unsigned unreachable_ms);

/* ------------------------------------------------------------------------
 * Time.
 * ---------------------------------------------------------------------- */
double dlt_now(void);          /* CLOCK_MONOTONIC, in seconds */
long long dlt_wall_ms(void);   /* CLOCK_REALTIME, in ms since the epoch */
void dlt_sleep_ms(unsigned ms); /* sleeps the whole time despite signals */
/* The time on clock ms from now (negative: ago), e.g. a timedlock deadline. */
struct timespec dlt_abs_in(clockid_t clock, long ms);

/* ------------------------------------------------------------------------
 * Child processes.  A child cannot report through CUnit: it reports
 * through its exit status.
 * ---------------------------------------------------------------------- */
/* Forks; the child runs fn(arg) and _exit()s with its result.  stdio is
 * flushed on both sides.  Returns the child's pid, or -1. */
pid_t dlt_spawn(int (*fn)(void *), void *arg);
/* Waits for a child up to timeout_ms (< 0: no limit).  Returns its exit
 * status (0..255), 128 + signal if a signal killed it, or -1 on a timeout
 * (the child is then SIGKILLed and reaped) or an error. */
int dlt_wait(pid_t pid, int timeout_ms);
/* Runs argv (argv[0] a path) with stdin on /dev/null and waits up to
 * timeout_ms: its exit status as dlt_wait gives it; its stdout and stderr
 * in out and err (NUL-terminated, truncated to n bytes each). */
int dlt_run_capture(char *const argv[], char *out, char *err, size_t n, int timeout_ms);
/* Reads the popen()ed p to its end -- the first cap-1 bytes into out
 * (NUL-terminated; out may be NULL), the rest drained -- and pcloses it:
 * the command's exit status, 128 + N if signal N killed it. */
int dlt_pclose_read(FILE *p, char *out, size_t cap);
/* Writes prelude then script to dir/scenario.sh and runs it with sh, its
 * stdout and stderr read into out as dlt_pclose_read does: sh's exit
 * status, or -1 if it could not be started. */
int dlt_sh_scenario(const char *dir, const char *prelude, const char *script, char *out, size_t cap);
/* Reading a scenario's output: how many times `what` stands in out; the
 * number after "key " at the start of one of its lines (-1: none); and
 * out on stderr, for a check that failed. */
int dlt_out_count(const char *out, const char *what);
long long dlt_out_num(const char *out, const char *key);
void dlt_out_show(const char *out);
/* Removes folder dir and everything in it, as rm -rf does, with no shell;
 * nothing if dir is "" (a suite's folder never made). */
void dlt_rm_tree(const char *dir);

/* Two "hosts" for a test: network namespaces joined by a veth pair.
 * dlt_netns_ok: 1 if this can make them (root, and ip(8) and the other
 * commands of `needs`, space-separated, or NULL); else 0 after CU_FAIL
 * (such a test fails, never skips).  dlt_netns_setup: the sh text that
 * makes them, PREFIX<pid>a and PREFIX<pid>b ($NA, $NB; $ns the common
 * part) with 10.<net>.<x>.1 and .2 (x from this pid); removes the ones a
 * killed earlier run left; starts a redis-server in $NA on $SRV:$PORT
 * (PORT `port`) whose folder (made if missing; its redis.log there) is
 * the sh expression redis_dir; waits for it to answer from $NB; and on
 * exit (a trap) stops it and removes both namespaces.  Into buf (cap
 * bytes): 0, or -1 if it does not fit. */
int dlt_netns_ok(const char *test, const char *needs);
int dlt_netns_setup(char *buf, size_t cap, const char *prefix, int net, int port, const char *redis_dir);

/* A pair of pipes between the test and one child. */
struct dlt_chan {
    int to_child[2], to_parent[2];
};
/* Opens both pipes: 0, or -1 with none left open. */
int dlt_chan_open(struct dlt_chan *ch);
/* Closes all four ends. */
void dlt_chan_close(struct dlt_chan *ch);
/* Writes the byte c to fd: 0, or -1. */
int dlt_pipe_put(int fd, char c);
/* Reads exactly n bytes from fd within timeout_ms: 0, or -1. */
int dlt_pipe_read(int fd, void *buf, size_t n, int timeout_ms);
/* One byte from fd within timeout_ms: the byte (0..255), or -1. */
int dlt_pipe_get(int fd, int timeout_ms);

/* ------------------------------------------------------------------------
 * Workers: a function run as a thread of the test or as a child process,
 * reporting through its result (a child: its exit status).  What workers
 * share travels through MAP_SHARED memory, so that one struct serves a
 * thread and a child alike.  Where a test starts both, it forks the
 * processes first: GCC 12's AddressSanitizer runtime is not fork-safe (a
 * child inherits an allocator lock that a starting or allocating thread
 * of the parent held at the fork, and its first new thread blocks on it
 * for ever), so the sanitizer build must not fork next to busy threads.
 * ---------------------------------------------------------------------- */
#define DLT_JOIN_MS 30000 /* the longest any worker may take */
enum { DLT_THREAD = 0, DLT_PROC = 1 }; /* how dlt_task_start runs fn */

/* One worker, a thread or a child process. */
typedef struct dlt_task {
    int proc, running, rc; /* a child?  started, not joined?  a thread's result */
    pthread_t th;
    pid_t pid;
    int (*fn)(void *);
    void *arg;
} dlt_task;

/* Runs fn(arg) as a child process (as_process) or a thread; asserts (one
 * CUnit assert) that it started.  0, or -1 if it did not. */
int dlt_task_start(dlt_task *t, int as_process, int (*fn)(void *), void *arg);
/* The worker's result (a child's exit status, 128 + signal if a signal
 * ended it), or -1 if it did not finish within timeout_ms or never ran.  A
 * thread that does not finish cannot be abandoned (it may use the test's
 * stack): the run aborts there. */
int dlt_task_join(dlt_task *t, int timeout_ms);
/* The thread body dlt_task_start runs: t->rc = t->fn(t->arg) (for a
 * worker that starts threads without CUnit, in a child process). */
void *dlt_task_thread(void *t);
/* Sends sig to a running worker (kill or pthread_kill). */
void dlt_task_signal(dlt_task *t, int sig);
/* Runs fn on n args (args + i * size), all at once: the last nproc as
 * processes (forked first), the first nthr as threads; asserts that every
 * one returns 0 within DLT_JOIN_MS (at most 16 workers, a fatal assert). */
void dlt_run_all(int (*fn)(void *), void *args, size_t size, int nthr, int nproc);

/* size zero-filled bytes of MAP_SHARED memory; aborts if mmap fails. */
void *dlt_shm(size_t size);
#define DLT_SHM_NEW(type, n) ((type *)dlt_shm(sizeof(type) * (n)))
#define DLT_SHM_FREE(p, n) munmap((p), sizeof(*(p)) * (n))

/* Flags: ints in shared memory, read and written with SEQ_CST atomics. */
void dlt_flag_set(int *p, int v);          /* *p = v */
int dlt_flag_get(const int *p);            /* *p */
int dlt_flag_add(int *p, int v);           /* *p += v; the new value */
/* A lost-lock handler (dlock_mutexattr_setlostcallback) that counts the
 * holds it is told of into the flag arg, an int *. */
void dlt_count_lost(dlock_mutex_t *m, const char *name, void *arg);
void dlt_flag_max(int *p, int v);          /* *p = max(*p, v) */
/* 1 once *p == want, 0 if timeout_ms passed first (polls every 500 us). */
int dlt_flag_wait(const int *p, int want, int timeout_ms);
/* 1 once *p >= want, 0 if timeout_ms passed first (polls every 500 us). */
int dlt_flag_wait_ge(const int *p, int want, int timeout_ms);
/* dlt_flag_wait_ge polling every poll_us instead. */
int dlt_flag_wait_ge_every(const int *p, int want, int timeout_ms, unsigned poll_us);

/* Checks inside a worker, where there is no CUnit: DLT_CK(got, want) and
 * DLT_CKT(cond) make the worker return a nonzero code, 1 + __LINE__ %
 * DLT_CK_MOD, after saying on stderr what it saw.  A file may define
 * DLT_CK_MOD before including this header (e.g. 120, to keep the codes
 * clear of 128 + signal). */
#ifndef DLT_CK_MOD
#define DLT_CK_MOD 250
#endif
#define DLT_CK(got, want)                                                  \
    do {                                                                   \
        long long g_ = (long long)(got), w_ = (long long)(want);           \
        if (g_ != w_) return DLT_CK_FAIL(#got, g_, w_);                    \
    } while (0)
#define DLT_CKT(cond)                                                      \
    do {                                                                   \
        if (!(cond)) return DLT_CKT_FAIL(#cond);                           \
    } while (0)
/* What DLT_CK and DLT_CKT say and return, for a check written out. */
#define DLT_CK_FAIL(expr, got, want) \
    dlt_ck_fail(__FILE__, DLT_CK_MOD, __func__, __LINE__, (expr), (got), (want))
#define DLT_CKT_FAIL(expr) dlt_ckt_fail(__FILE__, DLT_CK_MOD, __func__, __LINE__, (expr))
/* What DLT_CK says: file (its base name), line, function, pid and tid,
 * both values with their errno names, dlock_last_error().  1 + line % mod. */
int dlt_ck_fail(const char *file, int mod, const char *func, int line, const char *expr,
                long long got, long long want);
/* What DLT_CKT says: where, and that expr is false.  1 + line % mod. */
int dlt_ckt_fail(const char *file, int mod, const char *func, int line, const char *expr);
/* dlt_errno_name(e), or "?" for a code outside its table. */
const char *dlt_errno_label(long long e);
/* The calling thread's time runnable but waiting for a CPU so far, in
 * seconds (the kernel's run_delay, /proc/thread-self/schedstat; 0 where it
 * does not say).  A timed call that woke on time but was not run then is
 * late by the machine's doing, not the library's. */
double dlt_thread_cpu_wait(void);
/* A timedlock of m with a 0.5 s deadline that no server can answer
 * (when: why, for the log): asserts ETIMEDOUT at the deadline, +50 ms
 * (plus the time the calling thread waited for a CPU in the call). */
void dlt_timedlock_ends_at_deadline(dlock_mutex_t *m, const char *when);
/* A holder in another thread (pthread_create with dlt_unlocker_run): locks
 * m, sets locked, and once go is set unlocks; what the lock and the unlock
 * returned, the unlock's dlock_last_error() and when it returned
 * (dlt_now()).  Start it as { m, 0, 0, -1, -1, 0, "" }. */
typedef struct dlt_unlocker {
    dlock_mutex_t *m;
    int locked, go, lock_rc, rc;
    double t_done;
    char err[512];
} dlt_unlocker;
void *dlt_unlocker_run(void *arg);

/* An integer reply's value, else LLONG_MIN; frees r (which may be NULL). */
long long dlt_reply_int(redisReply *r);
/* Script calls so far on dlt_server (evalsha + eval), or -1; _ok: those
 * that ran (not refused as NOSCRIPT, say). */
long long dlt_evals(void);
long long dlt_evals_ok(void);

/* ------------------------------------------------------------------------
 * Background processes of the current test (the CLI's tests): remembered
 * with dlt_bg_add, forgotten when waited for, killed (SIGKILL) and reaped
 * by dlt_bg_kill_all at the test's end.  dlt_exit_code: a wait status as
 * an exit code (the code, 128 + the signal, or -1).  dlt_wait_raw: waits
 * for pid up to timeout_ms; its raw status, or -1 (then it is killed).
 * ---------------------------------------------------------------------- */
void dlt_bg_add(pid_t p);
void dlt_bg_forget(pid_t p);
void dlt_bg_kill_all(void);
int dlt_exit_code(int raw);
int dlt_wait_raw(pid_t pid, int timeout_ms);

/* ------------------------------------------------------------------------
 * A test's own folder (the CLI's tests): dlt_tdir_make makes one under
 * $TMPDIR (or /tmp) named TAG-XXXXXX, after cleaning up the one before
 * (left by a test that stopped at a fatal assert) with dlt_tdir_done,
 * which also kills the background processes (dlt_bg_kill_all) and removes
 * the folder's files.  dlt_tpath: the path of file f in it (8 rotating
 * buffers).  dlt_texists, dlt_ttouch; dlt_twait_file: waits up to ms for
 * f, 1 if it is there; dlt_tlines: the lines of f, -1 if there is none.
 * ---------------------------------------------------------------------- */
void dlt_tdir_make(const char *tag);
void dlt_tdir_done(void);
const char *dlt_tdir(void);
char *dlt_tpath(const char *f);
int dlt_texists(const char *f);
void dlt_ttouch(const char *f);
int dlt_twait_file(const char *f, int ms);
int dlt_tlines(const char *f);

/* ------------------------------------------------------------------------
 * CUnit glue.
 * ---------------------------------------------------------------------- */
struct dlt_test {
    const char *name;
    void (*fn)(void);
};
#define DLT_TEST(fn) { #fn, fn }

/* The suite's server, started by dlt_main. */
extern dlt_redis dlt_server;

/* Runs a suite:
 *
 *     static const struct dlt_test tests[] = {
 *         DLT_TEST(test_lock_unlock), DLT_TEST(test_trylock_busy),
 *         { NULL, NULL }
 *     };
 *     int main(int argc, char **argv) { return dlt_main(argc, argv, "mutex", tests); }
 *
 * tests ends with { NULL, NULL }.  Starts dlt_server and sets DLOCK_URL to
 * it (and DLOCK_STATS to 0 unless it is set: no live figures are flushed,
 * so that a test counts only its lock calls' requests); before each test
 * it restarts dlt_server if a test left it stopped,
 * then runs FLUSHALL and CONFIG RESETSTAT, so that every test starts with
 * an empty database and zero command counts.  `./test_x NAME` runs only
 * the test NAME.  alarm(600) bounds the whole run.  Returns 0 if every test
 * passed, else nonzero. */
int dlt_main(int argc, char **argv, const char *suite_name, const struct dlt_test *tests);
/* The same for a suite that needs no server (label unit): no server is
 * started, nothing is set or flushed before a test; alarm(limit_s)
 * bounds the whole run. */
int dlt_main_unit(int argc, char **argv, const char *suite_name, const struct dlt_test *tests, unsigned limit_s);

/* ------------------------------------------------------------------------
 * Typed asserts (non-fatal) that print both values on failure, e.g.
 *     rc == EBUSY (got ETIMEDOUT (110), want EBUSY (16))
 * Each argument is evaluated once.  Values compare as long long.
 * ---------------------------------------------------------------------- */
#define DLT_ASSERT_INT_EQ(actual, expected)                                   \
    dlt__assert_int((long long)(actual), (long long)(expected), #actual,      \
                    #expected, 0, __FILE__, __LINE__, __func__)
#define DLT_ASSERT_ERR(actual, expected)                                      \
    dlt__assert_int((long long)(actual), (long long)(expected), #actual,      \
                    #expected, 1, __FILE__, __LINE__, __func__)

/* "EBUSY" for EBUSY, "0" for 0, NULL for a code outside the table. */
const char *dlt_errno_name(int err);

/* private: the implementation of the asserts above */
int dlt__assert_int(long long actual, long long expected, const char *actual_expr,
                    const char *expected_expr, int as_errno, const char *file,
                    unsigned line, const char *func);

#ifdef __cplusplus
}
#endif
#endif /* DLT_FIXTURE_H */
