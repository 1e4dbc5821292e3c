/* base.h -- the bottom layer: what every other layer uses and that knows
 * no server.  Monotonic time and deadlines (clock.c), errors and the
 * last-error message (error.c), the configuration and its URL (url.c),
 * per-thread owner identities and the thread-exit hook (token.c).
 * The layers, bottom-up, are listed in src/LAYERS; a file uses only its
 * own layer's header and those below.  Internal non-static names start
 * with dlock__. */
#ifndef DLOCK_BASE_H
#define DLOCK_BASE_H

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "dlock.h"

#define DLOCK__HIDDEN __attribute__((visibility("hidden")))

/* ---------------------------------------------------------------- time */

/* Nanoseconds on CLOCK_MONOTONIC: relative timing only, never compared
 * with wall-clock values. */
typedef int64_t dlock__mono;
#define DLOCK__MONO_NEVER INT64_MAX
#define DLOCK__MS ((int64_t)1000000)

dlock__mono dlock__now(void);
/* A timespec (of any clock) in nanoseconds. */
int64_t dlock__ts_ns(const struct timespec *ts);
/* Converts an absolute deadline on `clock` (CLOCK_REALTIME or
 * CLOCK_MONOTONIC) to the monotonic clock, once.  EINVAL on a bad clock or
 * a bad tv_nsec. */
int dlock__deadline(clockid_t clock, const struct timespec *abstime, dlock__mono *out);
/* A timespec on CLOCK_MONOTONIC for pthread_cond_timedwait on condvars
 * made by dlock__cond_init. */
void dlock__mono_to_ts(dlock__mono t, struct timespec *ts);
int dlock__cond_init(pthread_cond_t *cv);
/* Waits on cv until signalled or until `until`; returns ETIMEDOUT when the
 * time has passed. */
int dlock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, dlock__mono until);
/* Empties a non-blocking eventfd of the wake-ups written to it. */
void dlock__efd_drain(int fd);
/* Sleeps until `until` (CLOCK_MONOTONIC), through signals; at once if
 * it has passed. */
void dlock__sleep_until(dlock__mono until);

/* ------------------------------------------------------------- back-off */

/* The one back-off of every retry loop (clock.c; docs/design.md,
 * "Back-off"): steps from min_ms doubling to max_ms; each delay is drawn
 * at random from the upper half of its step ("equal jitter": at least
 * step/2, never more than the step), so that clients that failed together
 * do not retry together, a retry never comes later than the step says and
 * never spins.  A loop's first retry comes within min_ms.  The library's
 * policy is DLOCK__BACKOFF_MIN_MS doubling to DLOCK__BACKOFF_MAX_MS; a
 * caller that needs other bounds names them, with the reason, where it
 * calls dlock__backoff_init. */
#define DLOCK__BACKOFF_MIN_MS 10u
#define DLOCK__BACKOFF_MAX_MS 200u

typedef struct dlock__backoff {
    unsigned cur_ms;         /* the next step's ceiling */
    unsigned min_ms, max_ms; /* the first step; the last */
} dlock__backoff;

/* Starts b at min_ms (at least 1), doubling to max_ms (at least min_ms). */
void dlock__backoff_init(dlock__backoff *b, unsigned min_ms, unsigned max_ms);
/* The same as an initializer, for constants with 1 <= min_ms <= max_ms
 * (in a struct's designated initializer: .bo = DLOCK__BACKOFF_INIT(10, 200)). */
#define DLOCK__BACKOFF_INIT(min_ms, max_ms) { (min_ms), (min_ms), (max_ms) }
/* The next delay in ms, in [step/2, step], and the step doubles (never
 * past max_ms). */
unsigned dlock__backoff_next(dlock__backoff *b);
/* Back to the first step (the retried thing worked). */
void dlock__backoff_reset(dlock__backoff *b);
/* Sleeps the next delay, but not past deadline (DLOCK__MONO_NEVER:
 * none): 0 after the sleep -- one that would pass the deadline ends at
 * it, and the caller's next attempt is its last -- or ETIMEDOUT at once,
 * without sleeping, when the deadline has passed (the attempt just made
 * was the last).  This is the one rule of every retry loop that asks a
 * server again: it gives up at its deadline, not a step before it, so a
 * call that cannot reach a server ends at its deadline whatever the
 * deployment (docs/design.md, "Back-off"). */
int dlock__backoff_sleep(dlock__backoff *b, dlock__mono deadline);

/* --------------------------------------------------------------- errors */

/* Records a message for dlock_last_error() and returns err. */
int dlock__seterr(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dlock__clearerr(void);
/* DLOCK_DEBUG (set, not empty, not "0"): the library's decisions --
 * connections, retries, the circuit breaker, grants, lost holds -- one
 * line each on stderr, "dlock[pid:tid] +ms: ...", for a user chasing a
 * problem.  Off: one relaxed load.  Never a password (callers give the
 * redacted URL). */
void dlock__debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Puts back a message saved from dlock_last_error(). */
void dlock__restoreerr(const char *saved);

/* --------------------------------------------------------------- config */

typedef enum {
    DLOCK__BACKEND_SINGLE,
    DLOCK__BACKEND_SENTINEL,
    DLOCK__BACKEND_REDLOCK,
    DLOCK__BACKEND_CLUSTER
} dlock__backend_kind;

typedef struct dlock__endpoint {
    char host[256];
    int port;
} dlock__endpoint;

#define DLOCK__NODES_MAX 16

typedef struct dlock__conf {
    dlock__backend_kind kind;
    dlock__endpoint ep;     /* SINGLE: the server */
    /* SENTINEL: where to ask for the master of that name (conn.c);
     * REDLOCK: the independent masters (redlock.c);
     * CLUSTER: the nodes to ask for the slot map first (cluster.c). */
    dlock__endpoint *nodes;
    size_t nnodes;
    char *master;
    unsigned wait_replicas;   /* ?wait=N: an acquire counts once N replicas have it */
    unsigned wait_timeout_ms; /* ...waiting for them at most this long */
    /* rediss://: TLS, verifying the server (tls_verify) against tls_ca_file
     * (NULL: the system store), by tls_server_name (NULL: the host). */
    int tls;
    int tls_verify;
    char *tls_ca_file, *tls_cert_file, *tls_key_file, *tls_server_name;
    char *user;     /* NULL when the URL names none */
    char *password; /* never printed */
    int db;
    char *prefix;
    char *redacted_url; /* the URL with the password replaced by "***" */
    int cluster;        /* a Redis Cluster, or one of its nodes: keys per lock slot */
    unsigned connect_timeout_ms;
    unsigned command_timeout_ms;
    unsigned unreachable_ms;
    unsigned drift_ms; /* 0: 2 + lease/100 */
    unsigned restart_guard_ms; /* 0: off; see acquire.lua */
    unsigned handoff_ms;       /* 0: off; see release.lua */
    /* ?wait_conns=N: how many threads of the client wait for their grant
     * in BLPOP at once, each on a connection of its own; the others are
     * told of their grant on the release channel, which the subscriber's
     * one connection hears (as where BLPOP is refused), a little later
     * (a thread between): a process with hundreds of waiting threads does
     * not open hundreds of connections.  0: every grant is published. */
    unsigned wait_conns;
    /* ?breaker_ms=N (or dlock_config_t.breaker_ms): the circuit breaker's
     * back-off period; 0: off (breaker.c dlock__breaker_pass). */
    unsigned breaker_ms;
    /* ?host_breaker=0|1 (default 1): with the breaker on, share its state
     * with the user's other processes on this host (net/hostrec.c). */
    unsigned host_breaker;
    /* ?pipelined=1: the mutexes the client makes unlock without waiting
     * for the server (core/release.c, pipe_send) unless their attribute says. */
    unsigned pipelined;
    /* ?lock_delay_ms=N: the lock-delay of the mutexes the client makes
     * unless their attribute says (dlock_mutexattr_setlockdelay). */
    unsigned lock_delay_ms;
} dlock__conf;

#define DLOCK__WAIT_CONNS 32 /* wait_conns' default */

/* The shortest a reply is waited for past the caller's deadline (or a
 * command timeout, if shorter): a command sent at its deadline is really
 * tried, and a wait never runs longer than that past it (cmd.c
 * dlock__set_timeout, wait.c dlock__wait_grant).  dlock__reply_floor_ms: that
 * floor for c's command timeout. */
#define DLOCK__REPLY_FLOOR_MS 200u

/* The most a timed lock call runs past its deadline (past its start, if
 * the deadline had already passed then): the call's end, which caps every
 * connect attempt and reply wait it makes (conn.c dlock__call_end_set); a
 * withdrawal not done by then is left to the orphan list.  The documented
 * bound is 50 ms; the rest is slack for the caller's own scheduling. */
#define DLOCK__LATE_MS 25u

/* Parses url (NULL: $DLOCK_URL or the default) and cfg into conf.
 * EINVAL with a message on bad input; the message never holds the
 * password. */
int dlock__conf_parse(dlock__conf *conf, const dlock_config_t *cfg);
void dlock__conf_free(dlock__conf *conf);
/* The clock-drift margin taken off a lease of lease_ms (url.c). */
unsigned dlock__drift_ms(const dlock__conf *conf, unsigned lease_ms);
/* Redlock, Cluster: the configuration of one master's own client (a
 * single server at ep).  0 or ENOMEM. */
int dlock__conf_member(dlock__conf *dst, const dlock__conf *src, const dlock__endpoint *ep);

/* --------------------------------------------------------------- tokens */

#define DLOCK__TOKEN_HEX 32 /* 128 bits */
/* What a hold is stored under on the server: the thread's token XOR the
 * client's random nonce XOR the thread's count of acquire calls, still 128
 * unguessable bits.  So one thread using two clients of one deployment is
 * two owners, as two hosts would be; and each hold has its own token, so a
 * late release of an earlier hold can never end a later one, and an
 * earlier hold left on the server (its unlock failed) is never mistaken
 * for the new one. */
#define DLOCK__OWNER_LEN DLOCK__TOKEN_HEX

/* A thread's identity as an owner.  Made on first use in a thread, freed
 * by the thread-specific-data destructor when the thread exits. */
typedef struct dlock__thread {
    char token[DLOCK__TOKEN_HEX + 1];
    unsigned char raw[DLOCK__TOKEN_HEX / 2]; /* the token's bytes */
    unsigned long tid;  /* gettid(), for holder metadata */
    pid_t pid;          /* the process that made it: a fork child makes anew */
    uint64_t calls;     /* acquire calls, mixed into owner tokens */
    struct dlock__thread *next, *prev; /* every live identity (token.c) */
} dlock__thread;

/* getpid(), cached (and refreshed in a fork child). */
pid_t dlock__pid(void);
/* Fills buf with n bytes from RAND_bytes_ex on dlock's own OpenSSL
 * library context (serialised against fork); sets the source up first if
 * it is not (or waits for the set-up thread doing it). */
int dlock__random(unsigned char *buf, int n);
/* Starts setting the random source up in a short-lived background thread,
 * unless it is set up or being set up: a client is made, a token will be
 * wanted soon. */
void dlock__random_prepare(void);
/* While the set-up thread runs, from a caller that would otherwise wait
 * for it: does one of the set-up's two parts on the calling thread -- the
 * DRBG's if the set-up thread has not begun it, else OpenSSL's
 * configuration, which the DRBG's needs at its end; returns when that
 * part is done: 1 (the DRBG's), 2 (the configuration) or 0 (none left). */
int dlock__random_help(void);
/* The same, only OpenSSL's configuration (the part the DRBG's needs at
 * its end), whether or not the set-up thread has begun: a caller that
 * will wait for the set-up loads it at once, before the DRBG's part needs
 * it.  2, or 0 (loaded, set up, or no set-up thread). */
int dlock__random_help_conf(void);
/* 1 if the random source is set up (a draw will not wait), else 0. */
int dlock__random_ready(void);
/* Waits for the set-up thread, if one was started, to end. */
void dlock__random_settle(void);
/* 1 while a set-up thread is started and not joined yet (for tests). */
int dlock__random_thread_live(void);
/* The CPU the last set-up thread was bound to (-1: none, as when the
 * process may use one CPU only), *starter that of its starter when it
 * was made (for tests). */
int dlock__random_thread_cpu(int *starter);
/* The calling thread's owner identity; NULL (with the error set) only when
 * RAND_bytes or malloc fails. */
dlock__thread *dlock__self(int *err);
/* The calling thread's identity if it already has one, else NULL. */
dlock__thread *dlock__self_peek(void);
/* The process's own identity, the owner of the holds of process-owned
 * mutexes (DLOCK_OWNER_PROCESS): made on first use, anew in a fork child;
 * its calls are counted atomically (any thread may use it).  _peek: NULL
 * if there is none yet. */
dlock__thread *dlock__proc_self(int *err);
dlock__thread *dlock__proc_peek(void);
/* Sets what runs when a thread that has an identity exits (before the
 * identity is freed; not in a fork child for the parent's threads). */
void dlock__thread_exit_hook(void (*fn)(dlock__thread *));

/* Starts a background thread with every signal blocked. */
int dlock__thread_start(pthread_t *th, void *(*fn)(void *), void *arg, const pthread_attr_t *attr);

/* Checks a lock name: 1..DLOCK_NAME_MAX bytes. */
int dlock__check_name(const char *name, size_t *len);

#endif /* DLOCK_BASE_H */
