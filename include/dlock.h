/* dlock.h -- distributed mutexes with pthread semantics, backed by Redis.
 *
 * Code written against pthread_mutex_* moves to dlock_mutex_* with the same
 * calls, the same return codes and the same types; the lock then excludes
 * every thread of every process on every host that shares the Redis
 * deployment.  Every function returns 0 or an errno value, like pthreads;
 * none returns -1 or reports through errno.  See README.md and docs/.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* clockid_t, also under -std=c11 */
#include <time.h>

/* struct timespec is in <time.h> from C11 or POSIX 1993 on; under a strict
 * -std=c99 it is not, and a first mention in a parameter list would make
 * it a different struct for each prototype.  Declared here, it is one
 * type, the system's where it has one. */
struct timespec;

#ifdef __cplusplus
extern "C" {
#endif

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0
#define DLOCK_VERSION_STRING "0.1.0"

#if defined(DLOCK_BUILDING) && defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

/* Limits. */
#define DLOCK_NAME_MAX 512                    /* bytes in a lock name */
#define DLOCK_LEASE_MIN_MS 100u               /* shortest lease accepted */
#define DLOCK_LEASE_MAX_MS (24u * 3600u * 1000u) /* longest lease accepted */
#define DLOCK_LEASE_DEFAULT_MS 10000u
#define DLOCK_RECURSIVE_MAX 0xFFFFFFu         /* RECURSIVE depth; EAGAIN beyond */

/* Mutex types and robustness, as PTHREAD_MUTEX_*. */
enum {
    DLOCK_MUTEX_NORMAL,
    DLOCK_MUTEX_ERRORCHECK,
    DLOCK_MUTEX_RECURSIVE,
    DLOCK_MUTEX_DEFAULT /* behaves as ERRORCHECK */
};
enum { DLOCK_MUTEX_STALLED, DLOCK_MUTEX_ROBUST };
/* Who owns a mutex's hold (dlock_mutexattr_setowner): the thread that
 * locked it (as POSIX says), or its whole process. */
enum { DLOCK_OWNER_THREAD, DLOCK_OWNER_PROCESS };

/* ------------------------------------------------------------------------
 * Clients.  A client is one connection to one deployment (URL), with its
 * own renewal thread, its own subscriber connection and its own table of
 * lock states.  Mutexes whose attributes name no client use the default
 * client, made on first use from DLOCK_URL (default redis://127.0.0.1:6379).
 * ---------------------------------------------------------------------- */
typedef struct dlock_client dlock_client_t;

typedef struct dlock_config {
    const char *url;             /* NULL: $DLOCK_URL, else redis://127.0.0.1:6379 */
    const char *prefix;          /* key prefix; NULL: $DLOCK_PREFIX, else "dlock:" */
    unsigned connect_timeout_ms; /* one connection attempt; 0: 1000 */
    unsigned command_timeout_ms; /* one command's reply; 0: 2000 */
    unsigned unreachable_ms;     /* ENOLCK after the server is unreachable this long; 0: 5000 */
    unsigned drift_ms;           /* clock-drift margin taken off every lease; 0: 2 + lease/100 */
    unsigned restart_guard_ms;   /* after the server lost its data, grant nothing for this long; 0: off */
    int handoff_ms;              /* a releaser waits this long before retaking a lock others wait for;
                                    0: 5, negative: off */
    unsigned breaker_ms;         /* circuit breaker: after a call found the server unreachable for the
                                    whole unreachable_ms, lock, unlock and info calls fail with ENOLCK
                                    at once for this long, but one call a second, which tries once;
                                    0: off (see "Fail-open budget" in docs/deployments.md) */
} dlock_config_t;

DLOCK_API void dlock_config_init(dlock_config_t *cfg);
/* Makes a client.  Nothing is connected until a lock needs it.  Returns
 * EINVAL on a bad URL or configuration (see dlock_last_error()). */
DLOCK_API int dlock_client_create(dlock_client_t **out, const dlock_config_t *cfg);
/* Frees a client whose mutexes have all been destroyed; EBUSY otherwise. */
DLOCK_API int dlock_client_destroy(dlock_client_t *c);
/* The default client (made from the environment on first call); NULL with
 * *err set when the environment's configuration is bad. */
DLOCK_API dlock_client_t *dlock_client_default(int *err);
/* One notice per host per outage.  With the circuit breaker on (breaker_ms)
 * and host_breaker=1 (the default), the processes of one user on one host
 * share the breaker's state in a host-wide record, and a program that
 * tells its user of an outage asks first whether it is the one to: 1 if
 * no other process has told that c's server is unreachable
 * (DLOCK_OUTAGE_DOWN; DLOCK_OUTAGE_DOWN_CLOSED, counted apart, for a
 * program that says something else of it: one that refuses its locks
 * meanwhile) or, after such a notice, that it answers again
 * (DLOCK_OUTAGE_UP) -- this call counts as the telling --, 0 if another
 * has.  1 as well when there is no usable record (each process tells). */
enum { DLOCK_OUTAGE_DOWN = 1, DLOCK_OUTAGE_UP = 2, DLOCK_OUTAGE_DOWN_CLOSED = 4 };
DLOCK_API int dlock_client_outage_notice(dlock_client_t *c, int what);
/* Whether calls to c's server (NULL: the default client's) fail at once
 * now, for a monitor (`dlock exporter`): by c's own circuit breaker, or
 * by the host-wide record that another process of this user on this host
 * wrote when it found the server unreachable (read whatever c's
 * breaker_ms and host_breaker; nothing is asked of the server).  Fills
 * *out; 0, or EINVAL (out NULL, or no default client). */
typedef struct dlock_breaker_state {
    int open;               /* 1: calls fail at once (ENOLCK) but a probe a second */
    int host;               /* 1: the host-wide record says so */
    uint64_t open_ms;       /* since the server was found unreachable (0: closed) */
    uint64_t next_probe_ms; /* until the next probe may ask it (0: due, or closed) */
} dlock_breaker_state_t;
DLOCK_API int dlock_client_breaker(dlock_client_t *c, dlock_breaker_state_t *out);

/* Lost-lock handler: runs once per lost hold, as soon as the loss is
 * known: on the renewal thread, or on the holder's thread when one of its
 * calls finds out first.  It must not block for long.  For a hold taken
 * through a dlock_rwlock_t, m is that rwlock object. */
typedef struct dlock_mutex dlock_mutex_t;
typedef void (*dlock_lost_fn)(dlock_mutex_t *m, const char *name, void *arg);
/* Inside a lost-lock handler: why that hold was lost.  DLOCK_LOST_BROKEN:
 * the server refused its renewal, the lock being no longer this holder's
 * there (broken with dlock_break or `dlock break`, taken by another owner
 * after its lease ran out on the server, or gone with the server's data);
 * DLOCK_LOST_EXPIRED: no renewal reached the server before the lease ran
 * out (unreachable, too slow).  Outside a handler: DLOCK_LOST_NONE. */
enum { DLOCK_LOST_NONE, DLOCK_LOST_EXPIRED, DLOCK_LOST_BROKEN };
DLOCK_API int dlock_lost_reason(void);

/* Lease-at-risk handler: runs on the renewal thread, never with a
 * library lock held, while a hold's lease is still valid but renewals
 * have failed for so long that less than the handler's margin of it is
 * left by the holder's own clock (event DLOCK_LEASE_AT_RISK, left_ms the
 * time left, > 0), and again if a renewal succeeds after that
 * (DLOCK_LEASE_RECOVERED, left_ms the renewed lease).  A loss is still
 * told by the lost-lock handler.  m as for dlock_lost_fn. */
#define DLOCK_LEASE_AT_RISK 1
#define DLOCK_LEASE_RECOVERED 2
typedef void (*dlock_risk_fn)(dlock_mutex_t *m, const char *name, int event, unsigned left_ms, void *arg);

/* ------------------------------------------------------------------------
 * Mutex attributes.  Complete type, caller-allocated; fields are private.
 * ---------------------------------------------------------------------- */
typedef struct dlock_mutexattr {
    /* private: use the dlock_mutexattr_* functions */
    unsigned __magic;
    int __type;
    int __robust;
    unsigned __lease_ms;
    dlock_lost_fn __lost_fn;
    void *__lost_arg;
    dlock_client_t *__client;
    int __fair;
    int __caching;
    /* (the size stays that of the first release: small fields packed) */
    unsigned char __rwkind;    /* DLOCK_RWLOCK_* */
    unsigned char __owner;     /* DLOCK_OWNER_* */
    unsigned char __deadlock;  /* 0 by type, 1 on, 2 off */
    unsigned char __pipelined; /* 0 as the client's URL says, 1 on, 2 off */
    unsigned __risk_margin_ms;
    dlock_risk_fn __risk_fn;
    void *__risk_arg;
    unsigned __lock_delay;     /* 0 as the client's URL says (lock_delay_ms), else ms + 1 */
    unsigned __spare[1];
} dlock_mutexattr_t;

DLOCK_API int dlock_mutexattr_init(dlock_mutexattr_t *a);
DLOCK_API int dlock_mutexattr_destroy(dlock_mutexattr_t *a);
DLOCK_API int dlock_mutexattr_settype(dlock_mutexattr_t *a, int type);
DLOCK_API int dlock_mutexattr_gettype(const dlock_mutexattr_t *a, int *type);
DLOCK_API int dlock_mutexattr_setrobust(dlock_mutexattr_t *a, int robust);
DLOCK_API int dlock_mutexattr_getrobust(const dlock_mutexattr_t *a, int *robust);
DLOCK_API int dlock_mutexattr_setlease(dlock_mutexattr_t *a, unsigned lease_ms);
DLOCK_API int dlock_mutexattr_getlease(const dlock_mutexattr_t *a, unsigned *lease_ms);
/* fair != 0: waiters acquire in their order of arrival at the server,
 * across threads, processes and hosts, promised (every mutex hands a
 * release to one queued waiter, and on one server or a cluster the
 * default one queues the same way, but a caching one's threads wait for
 * their own process's unlock first: see "Fair mutexes" in docs/locks.md).
 * Off by default. */
DLOCK_API int dlock_mutexattr_setfair(dlock_mutexattr_t *a, int fair);
DLOCK_API int dlock_mutexattr_getfair(const dlock_mutexattr_t *a, int *fair);
/* caching != 0: an unlock that no other owner asked for keeps the lock in
 * the process (leased and renewed), so the next lock by any of its threads
 * takes no round trip; a request from elsewhere makes the process give it
 * up (see "Lock caching" in docs/locks.md).  Off by default. */
DLOCK_API int dlock_mutexattr_setcaching(dlock_mutexattr_t *a, int caching);
DLOCK_API int dlock_mutexattr_getcaching(const dlock_mutexattr_t *a, int *caching);
/* The kind of a rwlock made with these attributes, as glibc's
 * pthread_rwlockattr_setkind_np (EINVAL for any other value):
 *   DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE (the default): writers first;
 *     while a writer waits, new readers wait too, so readers never starve
 *     a writer.
 *   DLOCK_RWLOCK_PREFER_WRITER: the same in dlock (glibc treats it as
 *     PREFER_READER, for the sake of recursive read locks, which need no
 *     such help here: see below).
 *   DLOCK_RWLOCK_PREFER_READER: a reader is granted the lock whenever no
 *     writer holds it, even while writers wait -- Linux flock(2) and
 *     fcntl(2) semantics.  A stream of overlapping readers can starve a
 *     writer for ever.
 * In every kind, a read lock taken by a thread that holds a read lock of
 * that name (on that client) already never waits.  Mutexes ignore it. */
enum {
    DLOCK_RWLOCK_PREFER_READER,
    DLOCK_RWLOCK_PREFER_WRITER,
    DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE,
    DLOCK_RWLOCK_DEFAULT = DLOCK_RWLOCK_PREFER_WRITER_NONRECURSIVE
};
DLOCK_API int dlock_mutexattr_setrwkind(dlock_mutexattr_t *a, int kind);
DLOCK_API int dlock_mutexattr_getrwkind(const dlock_mutexattr_t *a, int *kind);
/* owner DLOCK_OWNER_PROCESS: a hold belongs to the process, not to the
 * thread that locked it, as glibc lets any thread unlock a NORMAL mutex:
 * any thread of the process may unlock it (the lock is released on the
 * server), holds() and fence() answer for every thread of the process,
 * a thread's exit does not end it, and a lock call by any thread of the
 * process, the holder's included, waits for an unlock.  Only with type
 * NORMAL or DEFAULT (which then behaves as NORMAL): init gives EINVAL for
 * ERRORCHECK or RECURSIVE, and a rwlock init for any process-owned
 * attributes.  Default DLOCK_OWNER_THREAD; EINVAL for another value. */
DLOCK_API int dlock_mutexattr_setowner(dlock_mutexattr_t *a, int owner);
DLOCK_API int dlock_mutexattr_getowner(const dlock_mutexattr_t *a, int *owner);
/* Deadlock detection across hosts (docs/dlock.3, "Deadlocks"): on != 0,
 * a lock call of a mutex or rwlock made with these attributes that has
 * to wait looks for a cycle of waits it closes -- threads of any process
 * on any host, each waiting for a lock the next one holds, through
 * mutexes and rwlocks -- and, when it finds one (within about a second of
 * the cycle closing), exactly one member's call fails with EDEADLK, the
 * victim: the member with the greatest "host:pid:tid" among those whose
 * detection is on.  It holds nothing new; it should unlock what it holds,
 * and the others go on.  A wait that closes no cycle never gets EDEADLK.
 * On by default for ERRORCHECK mutexes; off for the other types and for
 * rwlocks unless set here; process-owned mutexes never detect.  Every
 * call that waits is listed as a waiter (dlock_lock_waiters), and its
 * edges written, whatever this says; only the walk, the victim rule and
 * EDEADLK depend on it.  On Redlock no waits are kept: a mutex_init or
 * rwlock_init with detection set here gives ENOTSUP, and an ERRORCHECK
 * mutex does not detect.  getdeadlock: the setting a mutex made with
 * these attributes would have (for a rwlock: 1 only if set here). */
DLOCK_API int dlock_mutexattr_setdeadlock(dlock_mutexattr_t *a, int on);
DLOCK_API int dlock_mutexattr_getdeadlock(const dlock_mutexattr_t *a, int *on);
/* The pipelined unlock, for NORMAL and DEFAULT mutexes only (a mutex
 * init with it set on an ERRORCHECK, RECURSIVE or robust one gives
 * EINVAL; a process-owned NORMAL one may have it): unlock sends the release and returns 0 at once,
 * without waiting for the server.  The release's answer is read with the
 * thread's next request on that connection (its next lock goes out behind
 * the release: one round trip for both), or by the client within about
 * 15 ms when none follows; exit, fork, dlock_mutex_destroy and
 * dlock_client_destroy read those still owed (bounded).  A release that
 * finds the hold gone (its lease had run out on the server) is told to the
 * lost-lock handler, not by unlock's return; one that gets no answer is
 * asked again when the server answers, or the lease runs out.  Exclusion,
 * fences, the handoff to a queued waiter and deadlines are as with the
 * confirmed unlock: the server holds the lock until the release arrives.
 * Unset, a mutex takes the client's URL parameter pipelined=1 (if it can
 * have it).  getpipelined: 1 only if set on here. */
DLOCK_API int dlock_mutexattr_setpipelined(dlock_mutexattr_t *a, int on);
DLOCK_API int dlock_mutexattr_getpipelined(const dlock_mutexattr_t *a, int *on);
DLOCK_API int dlock_mutexattr_setlostcallback(dlock_mutexattr_t *a, dlock_lost_fn fn, void *arg);
/* Lock-delay (as Chubby's and Consul's): when a hold of a mutex made with
 * these attributes ends without a release (its lease ran out: the holder
 * died, hung or was cut off), nobody is granted the lock for ms after the
 * lapse -- trylock answers EBUSY, timed calls wait within their deadline
 * -- so that writes the holder had in flight land first.  An unlock, a
 * thread-exit or exit() unlock and dlock_break end a hold with no delay.
 * 0 (the default) none; at most DLOCK_LOCK_DELAY_MAX_MS, else EINVAL.
 * Unset, a mutex takes the client's URL parameter lock_delay_ms.
 * getlockdelay: what was set here (0 unset). */
#define DLOCK_LOCK_DELAY_MAX_MS 60000u
DLOCK_API int dlock_mutexattr_setlockdelay(dlock_mutexattr_t *a, unsigned ms);
DLOCK_API int dlock_mutexattr_getlockdelay(const dlock_mutexattr_t *a, unsigned *ms);
/* The lease-at-risk handler (dlock_risk_fn) of holds taken through a
 * mutex made with these attributes, and its margin: fn runs when less
 * than margin_ms of a hold's lease is left and no renewal has succeeded
 * since that became likely.  A margin over half the lease counts as half
 * the lease (a renewal is due at a third).  fn NULL: none (the default);
 * EINVAL for a margin of 0 with a handler. */
DLOCK_API int dlock_mutexattr_setriskcallback(dlock_mutexattr_t *a, dlock_risk_fn fn, void *arg, unsigned margin_ms);
DLOCK_API int dlock_mutexattr_setclient(dlock_mutexattr_t *a, dlock_client_t *c);
DLOCK_API int dlock_mutexattr_getclient(const dlock_mutexattr_t *a, dlock_client_t **c);

/* ------------------------------------------------------------------------
 * Mutexes.  Complete type, caller-allocated; fields are private.
 * ---------------------------------------------------------------------- */
struct dlock_mutex {
    /* private: use the dlock_mutex_* functions */
    uintptr_t __magic;
    const char *__static_name;
    void *__impl;
    void *__reserved[4];
};

#define DLOCK__MAGIC_STATIC ((uintptr_t)0x646c6f636b535441ull)
/* Static initialiser: `static dlock_mutex_t m = DLOCK_MUTEX_INITIALIZER("jobs/a");`
 * A DEFAULT-type mutex on the default client with the default lease; the
 * name must be a string that lives as long as the mutex.  First use
 * connects. */
#define DLOCK_MUTEX_INITIALIZER(name) \
    { DLOCK__MAGIC_STATIC, (name), 0, { 0, 0, 0, 0 } }

DLOCK_API int dlock_mutex_init(dlock_mutex_t *m, const char *name, const dlock_mutexattr_t *a);
DLOCK_API int dlock_mutex_destroy(dlock_mutex_t *m);
DLOCK_API int dlock_mutex_lock(dlock_mutex_t *m);
DLOCK_API int dlock_mutex_trylock(dlock_mutex_t *m);
DLOCK_API int dlock_mutex_timedlock(dlock_mutex_t *m, const struct timespec *abstime);
DLOCK_API int dlock_mutex_clocklock(dlock_mutex_t *m, clockid_t clock, const struct timespec *abstime);
DLOCK_API int dlock_mutex_unlock(dlock_mutex_t *m);
DLOCK_API int dlock_mutex_consistent(dlock_mutex_t *m);
/* 1 if the calling thread (for a process-owned mutex: its process) holds
 * m with a valid lease, else 0. */
DLOCK_API int dlock_mutex_holds(const dlock_mutex_t *m);
/* Fencing token of the calling thread's (process's) current hold of m; 0
 * if none. */
DLOCK_API uint64_t dlock_mutex_fence(const dlock_mutex_t *m);
/* ------------------------------------------------------------------------
 * Read-write locks, as pthread_rwlock_*: many readers or one writer,
 * across hosts.  Writers first by default: while a writer waits, new
 * readers wait too, so a stream of readers never starves a writer
 * (dlock_mutexattr_setrwkind: DLOCK_RWLOCK_PREFER_READER lets readers in
 * while writers wait).  The attributes give the lease, the client, the
 * kind and the lost-lock handler; the type is
 * ignored (a relock by the holder is EDEADLK, a thread may read-lock a
 * lock it read-locks already).  A lock name is one lock: a mutex and a
 * rwlock of the same name exclude each other as writers.
 * ---------------------------------------------------------------------- */
struct dlock_rwlock {
    /* private: use the dlock_rwlock_* functions */
    uintptr_t __magic;
    void *__impl;
    void *__reserved[4];
};
typedef struct dlock_rwlock dlock_rwlock_t;

DLOCK_API int dlock_rwlock_init(dlock_rwlock_t *rw, const char *name, const dlock_mutexattr_t *a);
DLOCK_API int dlock_rwlock_destroy(dlock_rwlock_t *rw);
DLOCK_API int dlock_rwlock_rdlock(dlock_rwlock_t *rw);
DLOCK_API int dlock_rwlock_tryrdlock(dlock_rwlock_t *rw);
DLOCK_API int dlock_rwlock_timedrdlock(dlock_rwlock_t *rw, const struct timespec *abstime);
DLOCK_API int dlock_rwlock_clockrdlock(dlock_rwlock_t *rw, clockid_t clock, const struct timespec *abstime);
DLOCK_API int dlock_rwlock_wrlock(dlock_rwlock_t *rw);
DLOCK_API int dlock_rwlock_trywrlock(dlock_rwlock_t *rw);
DLOCK_API int dlock_rwlock_timedwrlock(dlock_rwlock_t *rw, const struct timespec *abstime);
DLOCK_API int dlock_rwlock_clockwrlock(dlock_rwlock_t *rw, clockid_t clock, const struct timespec *abstime);
DLOCK_API int dlock_rwlock_unlock(dlock_rwlock_t *rw);
/* The general form of the rwlock lock calls: a read (shared) or write
 * lock, flags DLOCK_F_*, and a deadline on clock (abstime NULL: none).
 * DLOCK_F_TRY: as tryrdlock / trywrlock.  DLOCK_F_INTR: a signal handler
 * that runs in the calling thread while it waits ends the call with
 * EINTR, as flock(2) does (the ordinary calls never give EINTR). */
#define DLOCK_F_TRY 1
#define DLOCK_F_INTR 2
DLOCK_API int dlock_rwlock_xlock(dlock_rwlock_t *rw, int shared, int flags, clockid_t clock,
                                 const struct timespec *abstime);
/* 1 if the calling thread holds rw for reading (1) or writing (2), with a
 * valid lease; 0 if not. */
DLOCK_API int dlock_rwlock_holds(const dlock_rwlock_t *rw);
DLOCK_API uint64_t dlock_rwlock_fence(const dlock_rwlock_t *rw);
/* Conversion (as the DLM's convert).  upgrade: the calling thread's read
 * lock becomes the write lock without another writer getting in first; it
 * waits, as a write lock does, for the other readers to leave (new
 * readers of the writers-first kinds wait for it; writers, queued or not,
 * come after it).  Of two readers that both ask, the second gets EDEADLK
 * and keeps its read lock.  EPERM for a thread that holds no read lock.
 * The write hold gets a new, larger fence.  A thread's nested read locks
 * convert together: it then holds the write lock as many times.
 * timedupgrade / clockupgrade: ETIMEDOUT at the deadline, the read lock
 * kept.  downgrade: the calling thread's write lock becomes a read lock in
 * one step (no writer between; waiting readers are let in as their kind
 * allows), with the same fence; EPERM for a thread that does not hold the
 * write lock.  On Redlock both are ENOTSUP. */
DLOCK_API int dlock_rwlock_upgrade(dlock_rwlock_t *rw);
DLOCK_API int dlock_rwlock_timedupgrade(dlock_rwlock_t *rw, const struct timespec *abstime);
DLOCK_API int dlock_rwlock_clockupgrade(dlock_rwlock_t *rw, clockid_t clock, const struct timespec *abstime);
DLOCK_API int dlock_rwlock_downgrade(dlock_rwlock_t *rw);

/* ------------------------------------------------------------------------
 * Condition variables, as pthread_cond_*, paired with a dlock mutex:
 * wait releases the mutex and sleeps until a signal or broadcast from any
 * thread on any host, then takes the mutex again before it returns.  No
 * wake-up is lost: a waiter is registered on the server before it
 * releases the mutex.  Spurious wake-ups can happen, as in POSIX: wait in
 * a loop that checks the condition.  A condition variable lives on one
 * client (dlock_cond_init: the default client); it is used with mutexes of
 * that client.
 * ---------------------------------------------------------------------- */
struct dlock_cond {
    /* private: use the dlock_cond_* functions */
    uintptr_t __magic;
    void *__impl;
    void *__reserved[4];
};
typedef struct dlock_cond dlock_cond_t;

DLOCK_API int dlock_cond_init(dlock_cond_t *c, const char *name);
/* The same on client cl (NULL: the default client). */
DLOCK_API int dlock_cond_init_client(dlock_cond_t *c, const char *name, dlock_client_t *cl);
/* EBUSY while a thread of this process waits on c. */
DLOCK_API int dlock_cond_destroy(dlock_cond_t *c);
/* EPERM if the calling thread does not hold m. */
DLOCK_API int dlock_cond_wait(dlock_cond_t *c, dlock_mutex_t *m);
DLOCK_API int dlock_cond_timedwait(dlock_cond_t *c, dlock_mutex_t *m, const struct timespec *abstime);
DLOCK_API int dlock_cond_clockwait(dlock_cond_t *c, dlock_mutex_t *m, clockid_t clock, const struct timespec *abstime);
/* Wakes at least one waiter anywhere (none waiting: nothing happens). */
DLOCK_API int dlock_cond_signal(dlock_cond_t *c);
/* Wakes every waiter anywhere. */
DLOCK_API int dlock_cond_broadcast(dlock_cond_t *c);

/* ------------------------------------------------------------------------
 * Named counting semaphores, as POSIX sem_* (sem_open with O_CREAT),
 * across hosts.  The value lives on the server: init creates the
 * semaphore with `value` if it does not exist, else joins it and leaves
 * its value alone.  wait takes a unit, or sleeps until a post from any
 * thread on any host hands it one: one waiter per post, woken by a
 * notification (no polling), in FIFO order among waiters.  trywait gives
 * EAGAIN when no unit is free; timedwait (CLOCK_REALTIME) and clockwait
 * (CLOCK_REALTIME or CLOCK_MONOTONIC) ETIMEDOUT at the deadline (one that
 * has passed still takes a free unit; a bad tv_nsec is EINVAL if the
 * call would have to wait).  post gives EOVERFLOW past
 * DLOCK_SEM_VALUE_MAX.  Every call gives ENOLCK when the server cannot
 * be reached within the client's bound.  On one server, Sentinel and
 * Redis Cluster; on Redlock init gives ENOTSUP.
 *
 * A plain semaphore has no owner: a process that dies between wait and
 * post loses its unit for ever.  With undo (dlock_semattr_setundo, the
 * twin of System V's SEM_UNDO) each unit a wait takes is leased to the
 * process: recorded on the server with the semaphore's lease
 * (dlock_semattr_setlease), renewed by the client's renewal thread with
 * its locks, and given back -- to the value, or to the first waiter, as a
 * post gives it -- when the lease runs out: the process died, or exited
 * without posting (within about one lease), or its renewals stopped
 * reaching the server.  A post by a process that holds leased units of
 * that semaphore (taken through any of its objects of that name and
 * client) gives one of them back instead of adding a unit; a post by a
 * process with none adds one.  A unit whose lease was lost is told to the
 * lost-unit handler (dlock_semattr_setlostcallback) once; the process's
 * next post of that semaphore then only forgets it (returns 0; the unit
 * came back already), so a unit is never given back twice.  A fork child
 * holds none of its parent's units.  dlock_sem_destroy leaves the
 * process's units leased and renewed (they are the process's, not the
 * object's: a later object of that name posts them back);
 * dlock_client_destroy gives them back.
 * ---------------------------------------------------------------------- */
/* The largest value (SEM_VALUE_MAX of <semaphore.h> on Linux: INT_MAX):
 * init with more is EINVAL, a post past it EOVERFLOW. */
#define DLOCK_SEM_VALUE_MAX 2147483647

struct dlock_sem {
    /* private: use the dlock_sem_* functions */
    uintptr_t __magic;
    void *__impl;
    void *__reserved[4];
};
typedef struct dlock_sem dlock_sem_t;

/* Lost-unit handler (undo): runs once for each leased unit whose lease
 * was lost, as the lost-lock handler does (on the renewal thread, or on
 * the thread whose post found out first; it must not block for long);
 * dlock_lost_reason() tells why.  s is the object whose wait took the
 * unit (NULL once that object was destroyed). */
typedef void (*dlock_sem_lost_fn)(dlock_sem_t *s, const char *name, void *arg);

typedef struct dlock_semattr {
    /* private: use the dlock_semattr_* functions */
    unsigned __magic;
    unsigned __lease_ms;
    int __undo;
    dlock_client_t *__client;
    dlock_sem_lost_fn __lost_fn;
    void *__lost_arg;
    void *__reserved[2];
} dlock_semattr_t;

DLOCK_API int dlock_semattr_init(dlock_semattr_t *a);
DLOCK_API int dlock_semattr_destroy(dlock_semattr_t *a);
/* The client the semaphore lives on (NULL: the default client). */
DLOCK_API int dlock_semattr_setclient(dlock_semattr_t *a, dlock_client_t *c);
/* undo 1: each unit taken is leased to the process (above); 0, the
 * default: units are the POSIX kind.  EINVAL for another value. */
DLOCK_API int dlock_semattr_setundo(dlock_semattr_t *a, int undo);
/* The lease of an undo unit, as a mutex's (default
 * DLOCK_LEASE_DEFAULT_MS; EINVAL outside the same bounds). */
DLOCK_API int dlock_semattr_setlease(dlock_semattr_t *a, unsigned lease_ms);
/* The lost-unit handler of the units taken through semaphores made with
 * a (fn NULL: none, the default). */
DLOCK_API int dlock_semattr_setlostcallback(dlock_semattr_t *a, dlock_sem_lost_fn fn, void *arg);

/* a may be NULL (the defaults).  EINVAL: a bad name, value past
 * DLOCK_SEM_VALUE_MAX, a bad attribute object; ENOTSUP on Redlock.
 * Makes the semaphore with value, or joins it.  The object keeps value:
 * if the server loses the semaphore (an empty restart, FLUSHALL), the
 * object's next wait, post or getvalue makes it again with that value
 * (the first to do so wins; docs/locks.md "Semaphores"). */
DLOCK_API int dlock_sem_init(dlock_sem_t *s, const char *name, unsigned value, const dlock_semattr_t *a);
/* Frees local resources only (the semaphore stays on the server, and the
 * process's leased units stay leased); EBUSY while a thread of this
 * process waits in it. */
DLOCK_API int dlock_sem_destroy(dlock_sem_t *s);
DLOCK_API int dlock_sem_wait(dlock_sem_t *s);
DLOCK_API int dlock_sem_trywait(dlock_sem_t *s);
DLOCK_API int dlock_sem_timedwait(dlock_sem_t *s, const struct timespec *abstime);
DLOCK_API int dlock_sem_clockwait(dlock_sem_t *s, clockid_t clock, const struct timespec *abstime);
/* The general form of the wait calls, as dlock_rwlock_xlock: flags
 * DLOCK_F_* and a deadline on clock (abstime NULL: none).  DLOCK_F_TRY:
 * as trywait.  DLOCK_F_INTR: a signal handler that runs in the calling
 * thread while it waits ends the call with EINTR, as sem_wait(3) does
 * (the ordinary calls never give EINTR); a unit a post handed to the
 * call meanwhile is taken (0), never lost. */
DLOCK_API int dlock_sem_xwait(dlock_sem_t *s, int flags, clockid_t clock, const struct timespec *abstime);
DLOCK_API int dlock_sem_post(dlock_sem_t *s);
/* The value now (0 when threads wait: POSIX lets it be 0 or minus the
 * number of waiters; Linux says 0 too). */
DLOCK_API int dlock_sem_getvalue(dlock_sem_t *s, int *value);

/* What the server knows of one semaphore (dlock_sem_info,
 * dlock_sem_owners, dlock_sem_list), read in one round trip. */
typedef struct dlock_sem_info {
    int exists;              /* 1: the semaphore exists (init made it, or an object
                                open on it made it again after the server lost it) */
    int value;               /* its free units now; 0 when it does not exist */
    unsigned waiters;        /* threads waiting in it anywhere (queued, or handed a
                                unit by a post and taking it) */
    unsigned leased;         /* units taken under undo whose lease runs */
    int64_t server_now_ms;   /* the server's time when it answered, ms since the epoch */
    int64_t remade_ms;       /* when an object open on it last made it again, with the
                                value it was opened with, after the server lost it
                                (server time, ms since the epoch); 0: never */
    void *__reserved[4 - sizeof(int64_t) / sizeof(void *)]; /* room to grow, the size kept */
} dlock_sem_info_t;

/* One person of a semaphore (dlock_sem_owners): a waiter, or the holder
 * of one unit leased under undo (dlock_semattr_setundo; units taken
 * without undo have no owner, as in POSIX, and are not listed). */
enum { DLOCK_SEM_WAITING = 1, DLOCK_SEM_LEASED = 2 };
typedef struct dlock_sem_owner {
    int kind;                /* DLOCK_SEM_WAITING or DLOCK_SEM_LEASED */
    char host[256];          /* who: host, pid and thread id ("" and 0 if the
                                server does not say) */
    long pid;
    unsigned long tid;
    int64_t since_ms;        /* waiting since / the unit taken at: server time, ms
                                since the epoch; 0 if the server does not say */
    int64_t lease_left_ms;   /* LEASED: the unit's remaining lease; WAITING: -1 */
    long place;              /* WAITING: its place in the FIFO queue, 0 the next
                                served; -1 a post handed it a unit it is taking.
                                LEASED: -1 */
    void *__reserved[4];
} dlock_sem_owner_t;

/* What the server knows of the semaphore `name` on client c (NULL: the
 * default client): 0 with *out filled, also when it does not exist
 * (out->exists 0).  ENOTSUP on Redlock (no semaphores there), ENOLCK
 * when the server cannot be reached.  No dlock_sem_t is needed. */
DLOCK_API int dlock_sem_info(dlock_client_t *c, const char *name, dlock_sem_info_t *out);
/* The same (info may be NULL), and fn called for each person, from the
 * same answer: the waiters in the order they will be served, then the
 * units leased under undo, soonest lease end first; at most max of them
 * (0: none; DLOCK_SEM_OWNERS_ALL: every one); stops early when fn returns
 * nonzero.  fn may be NULL. */
#define DLOCK_SEM_OWNERS_ALL 0xFFFFFFFFu
DLOCK_API int dlock_sem_owners(dlock_client_t *c, const char *name, dlock_sem_info_t *info, unsigned max,
                               int (*fn)(const dlock_sem_owner_t *o, void *arg), void *arg);
/* Calls fn for each semaphore whose name matches the shell glob (NULL:
 * "*") and that exists, or has waiters or leased units, in no particular
 * order; stops early when fn returns nonzero.  SCAN, as dlock_list.
 * ENOTSUP on Redlock. */
DLOCK_API int dlock_sem_list(dlock_client_t *c, const char *glob,
                             int (*fn)(const char *name, const dlock_sem_info_t *info, void *arg), void *arg);
/* Removes the semaphore `name` from the server, as sem_unlink removes a
 * POSIX name: its value, its queue and every registration go; ENOENT
 * (after removing any waiters' registrations) when it did not exist.
 * The next dlock_sem_init of the name makes a new semaphore with its
 * value.  Unlike POSIX, a dlock_sem_t still open on the name does not
 * keep the old semaphore alive (the name is all it has): it stays valid,
 * and its calls act on whatever the name is then -- getvalue says 0 and
 * trywait EAGAIN until an init or a post makes it again.  Its waiters,
 * anywhere, are woken at once and go on waiting, queued again on the
 * name (in any order): a post on the name, or an init that makes it anew
 * with units, serves them, so no waiter is left behind by a post that
 * came after the unlink.  A unit that a post had handed a waiter that
 * had not taken it yet goes with the semaphore, and units leased under
 * undo are forgotten.  A mark of the unlink stays an hour (or until an
 * init makes the name): meanwhile no object still open on it makes it
 * again as it makes one the server lost. */
DLOCK_API int dlock_sem_unlink(dlock_client_t *c, const char *name);
/* Gives the semaphore `name` an expiry: it and every key of it are
 * removed ms from now (DLOCK_LEASE_MIN_MS..DLOCK_LEASE_MAX_MS) unless
 * this is called again before; every operation on it keeps the expiry.
 * For a semaphore whose name is gone (the preload's sem_unlink) but
 * which its users go on using: each renews it while it has it open
 * (flags DLOCK_SEM_RENEW: only renew, ENOENT if it has no expiry), so it
 * outlives its last user by at most ms.  ENOENT when it does not exist;
 * through the circuit breaker, as dlock_sem_info. */
#define DLOCK_SEM_RENEW 1
DLOCK_API int dlock_sem_expire(dlock_client_t *c, const char *name, unsigned ms, int flags);
/* Administrative reset of the semaphore `name` (`dlock break --sem`):
 * takes back every unit leased under undo, whoever holds it -- its lease
 * ends at once, as if it had run out -- and gives the units back (to the
 * waiters first, in queue order).  *taken_back (if not NULL): how many.
 * Waiters keep waiting.  ENOENT when it does not exist. */
DLOCK_API int dlock_sem_break(dlock_client_t *c, const char *name, unsigned *taken_back);

/* A fenced write, for data kept in the lock's own Redis deployment: sets
 * the hash `key` to {value, fence} only if no write with a newer fence has
 * reached it, so a holder whose lease ran out can never overwrite what its
 * successor wrote.  Read the value back with HGET key value.  0 written;
 * EPERM the caller does not hold m; ESTALE refused as stale. */
DLOCK_API int dlock_fenced_set(const dlock_mutex_t *m, const char *key, const void *value, size_t len);
/* The lock's name, or NULL for a bad object. */
DLOCK_API const char *dlock_mutex_name(const dlock_mutex_t *m);

/* Lock value block (as the DLM's LVB): up to DLOCK_LVB_MAX bytes kept
 * with the lock.  set: the caller holds m (EPERM otherwise; a rwlock: its
 * write lock), len > DLOCK_LVB_MAX -> EINVAL; the value is written with
 * the hold's release, in the same request, and a hold that ends without
 * one (its lease lapsed) writes nothing.  get: the caller holds m (a
 * rwlock: either lock); the value the last release wrote (or this hold's
 * set), *len bytes (0 when none was ever set; ERANGE, *len the length,
 * when cap is short); *valid 0 when a hold ended without a release since
 * it was written (its holder may have died mid-update), until a holder
 * writes it anew.  ENOTSUP on Redlock. */
#define DLOCK_LVB_MAX 64
DLOCK_API int dlock_mutex_lvb_set(dlock_mutex_t *m, const void *buf, size_t len);
DLOCK_API int dlock_mutex_lvb_get(dlock_mutex_t *m, void *buf, size_t cap, size_t *len, int *valid);
DLOCK_API int dlock_rwlock_lvb_set(dlock_rwlock_t *rw, const void *buf, size_t len);
DLOCK_API int dlock_rwlock_lvb_get(dlock_rwlock_t *rw, void *buf, size_t cap, size_t *len, int *valid);
/* The value block of lock name as the server keeps it, without holding
 * the lock (dlock status): as get, but *valid -1 (and *len 0) when the
 * lock has none. */
DLOCK_API int dlock_lock_lvb(dlock_client_t *c, const char *name, void *buf, size_t cap, size_t *len, int *valid);

/* What the server knows of one lock (dlock_lock_info, dlock_list). */
typedef struct dlock_lock_info {
    int held;                /* 1 if a writer / mutex holder has it */
    char host[256];          /* the holder's host, pid and thread id */
    long pid;
    unsigned long tid;
    uint64_t fence;          /* the holder's fencing token; 0 when the lock does not keep it
                              * (yet: a hold taken on one server's uncontended path, until
                              * its first renewal records it) */
    int64_t since_ms;        /* when it was acquired, ms since the epoch: by the server's clock, or by the
                              * taker's for a hold taken uncontended (docs/protocol.md) */
    int64_t lease_left_ms;   /* the holder's remaining lease */
    unsigned readers;        /* shared (read) holders */
    unsigned writers_waiting;/* writers registered as waiting */
    int robust_state;        /* 0 none; 1 a robust holder holds it or died holding it; 2 not recoverable */
    int64_t server_now_ms;   /* the server's time when it answered (for "held for") */
    int64_t delay_left_ms;   /* free, but in its lock-delay (its last hold ended without a
                              * release) for this long more: nobody is granted it until
                              * server_now_ms + delay_left_ms; 0 not in a delay */
    void *__reserved[3];     /* room to grow without changing the size (on LP64) */
} dlock_lock_info_t;

/* Reads what the server knows of `name` (one round trip) on client c
 * (NULL: the default client). */
DLOCK_API int dlock_lock_info(dlock_client_t *c, const char *name, dlock_lock_info_t *out);
/* One thread waiting for a lock (dlock_lock_waiters). */
typedef struct dlock_lock_waiter {
    char host[256];          /* the waiter's host, pid and thread id */
    long pid;
    unsigned long tid;
    int64_t since_ms;        /* when its call began to wait, ms since the epoch: the server's clock
                              * (by the waiter host's for a queued waiter that holds no lock; never
                              * after server_now_ms) */
    int shared;              /* 1: it waits for a read lock; 0: exclusive (a mutex, a write lock) */
    int deadlock;            /* 1: its deadlock detection is on (it may be a cycle's victim) */
    int64_t server_now_ms;   /* the server's time when it answered (for "waiting for") */
    void *__reserved[4];     /* room to grow without changing the size */
} dlock_lock_waiter_t;
/* Calls fn for each thread (of any process, on any host) that waits for
 * `name` on client c (NULL: the default client), longest-waiting first;
 * stops early when fn returns nonzero.  A queued wait (exclusive, but on
 * Redlock) of a thread that holds no lock is listed as soon as it is
 * queued; any other once it has waited about 50 ms (2 s if it waits for
 * another thread of its own process without asking the server).  Listed
 * until the wait ends, or, if its process died, until its record lapses
 * (a queued one's with its lease; 1.5 s for a thread that held locks;
 * else at least 30 s).  One round trip.
 * ENOTSUP on Redlock, which keeps no waiters. */
DLOCK_API int dlock_lock_waiters(dlock_client_t *c, const char *name,
                                 int (*fn)(const dlock_lock_waiter_t *w, void *arg), void *arg);
/* Calls fn for each lock whose name matches the shell glob (fnmatch;
 * NULL: "*") that is held, has readers, has a robust state left (an
 * owner died, or not recoverable), or is in its lock-delay (delay_left_ms
 * > 0), in no particular order; stops early
 * when fn returns nonzero.  Uses SCAN, so it never blocks the server. */
DLOCK_API int dlock_list(dlock_client_t *c, const char *glob,
                         int (*fn)(const char *name, const dlock_lock_info_t *info, void *arg), void *arg);

/* One byte range of a record-lock table (dlock_range_list): the
 * preload's fcntl and lockf locks on a mapped file, kept on the server
 * under the lock name NAME#fcntl (docs/preload.md, "Record locks"). */
#define DLOCK_RANGE_EOF 9007199254740991ULL /* an end "to the end of the file" (2^53 - 1) */
typedef struct dlock_range {
    char owner[96];          /* the owner's id in the table: a process (HOST-HASH.PID.START), or
                              * one open file description of it (....oN: OFD locks) */
    char host[256];          /* the owner's host and pid */
    long pid;
    uint64_t start, end;     /* bytes start..end, inclusive; end DLOCK_RANGE_EOF: to the end of the file */
    int write;               /* 1 a write (exclusive) lock, 0 a read (shared) one */
    int waiting;             /* 1: not held; the owner waits (F_SETLKW) for this range */
    int cached;              /* 1: not a range but the file's cache: the owner, alone on the file,
                              * locks any range without asking and hands its ranges back when
                              * another owner asks (start 0, end DLOCK_RANGE_EOF, write 1) */
    int64_t lease_left_ms;   /* the owner's remaining lease (its ranges lapse with it) */
    int64_t server_now_ms;   /* the server's time when it answered */
    void *__reserved[4];     /* room to grow without changing the size */
} dlock_range_t;
/* Calls fn for each range of the record-lock table of the lock `name`
 * (as the preload names it: the mapped name and "#fcntl") on client c
 * (NULL: the default client), owner by owner: its cache if it keeps it
 * (cached 1), its held ranges in order, then the range it waits for, if
 * any; stops early when fn
 * returns nonzero.  No range, no call.  One round trip.  ENOTSUP on
 * Redlock, which keeps no range tables. */
DLOCK_API int dlock_range_list(dlock_client_t *c, const char *name, int (*fn)(const dlock_range_t *r, void *arg),
                               void *arg);
/* Administrative reset of the record-lock table of `name`: the ranges of
 * the owner `owner` (a dlock_range_t's owner; NULL or "": of every owner)
 * are removed.  An owner's next renewal finds its record gone: it has
 * lost its record locks (DLOCK_ON_LOST).  *dropped (if not NULL): how
 * many owners went.  ENOTSUP on Redlock. */
DLOCK_API int dlock_range_break(dlock_client_t *c, const char *name, const char *owner, unsigned *dropped);
/* Calls fn for each record-lock table whose lock name matches the shell
 * glob (NULL: "*") and that has a live owner, with how many owners and
 * held ranges it has, in no particular order; stops early when fn
 * returns nonzero.  SCAN, as dlock_list.  ENOTSUP on Redlock. */
DLOCK_API int dlock_range_tables(dlock_client_t *c, const char *glob,
                                 int (*fn)(const char *name, unsigned owners, unsigned ranges, void *arg),
                                 void *arg);

/* Live figures of one lock, summed over every client that flushed them
 * (dlock_stats; `dlock top` shows them).  Each client counts its own and
 * flushes them once a second; DLOCK_STATS=0 turns that off in a process.
 * lost_leases, deadlocks and the histograms are counters that only grow,
 * not sums over the window: the server keeps them until no client has
 * flushed figures of the lock for a day (then they start again from 0).
 * The struct grew by the histograms: a program built against an older
 * dlock.h must be rebuilt. */
/* The upper bounds (ms, inclusive) of the histograms' buckets, as an
 * initializer list; DLOCK_STATS_BUCKETS counts them and the last bucket,
 * which holds everything longer (+Inf). */
#define DLOCK_STATS_BOUNDS_MS 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000
#define DLOCK_STATS_BUCKETS 13
typedef struct dlock_lock_stats {
    char name[DLOCK_NAME_MAX + 1];
    uint64_t acquisitions;   /* holds begun in the window */
    uint64_t releases;       /* holds ended (unlocked) in the window */
    double wait_ms_p50;      /* from the lock call's start to the hold */
    double wait_ms_p99;
    double hold_ms_p50;      /* from the hold to its unlock */
    double hold_ms_p99;
    uint64_t lost_leases;    /* holds their client found lost (lease ran out, renewal refused) */
    uint64_t deadlocks;      /* lock calls answered EDEADLK */
    uint64_t lease_risks;    /* lease-at-risk warnings told (DLOCK_LEASE_AT_RISK, holds with a risk callback) */
    void *__reserved[1];     /* room to grow (with the three above, the size of the four it had on LP64) */
    /* Cumulative histograms: counts that only grow, not sums over the
     * window.  wait_buckets[i] counts the waits (from the lock call's
     * start to the hold) longer than bound i-1 and at most bound i of
     * DLOCK_STATS_BOUNDS_MS; the last bucket, everything longer.  Their
     * sums in µs.  The server keeps them until no client has flushed
     * figures of the lock for a day (then they start again from 0). */
    uint64_t wait_buckets[DLOCK_STATS_BUCKETS];
    uint64_t hold_buckets[DLOCK_STATS_BUCKETS];
    uint64_t wait_us_sum;
    uint64_t hold_us_sum;
} dlock_lock_stats_t;
#define DLOCK_STATS_WINDOW_MAX 60 /* seconds the server keeps the figures of */
/* The `max` busiest locks (most acquisitions first) of the last window_s
 * seconds (1 .. DLOCK_STATS_WINDOW_MAX, the current one included) into
 * out, *n of them (one round trip) on client c (NULL: the default
 * client).  ENOTSUP on Redlock, which keeps no figures. */
DLOCK_API int dlock_stats(dlock_client_t *c, unsigned window_s, dlock_lock_stats_t *out, size_t max, size_t *n);

/* Administrative reset of the lock `name` on client c (NULL: the default
 * client), whoever holds it: the writer, every reader, and waiting
 * writers' registrations.  how: DLOCK_BREAK_OWNERDEAD (a robust lock's
 * next acquirer gets EOWNERDEAD) or DLOCK_BREAK_RESET (also clears the
 * robust state: an ENOTRECOVERABLE lock becomes usable again).  *was_held
 * (if not NULL) tells whether someone held it. */
enum { DLOCK_BREAK_OWNERDEAD, DLOCK_BREAK_RESET };
DLOCK_API int dlock_break(dlock_client_t *c, const char *name, int how, int *was_held);

/* ------------------------------------------------------------------------
 * Errors.
 * ---------------------------------------------------------------------- */
/* A message for an error code returned by dlock (any errno value). */
DLOCK_API const char *dlock_strerror(int err);
/* The symbolic name of an error code ("ENOLCK"; "OK" for 0), or "UNKNOWN". */
DLOCK_API const char *dlock_err_name(int err);
/* A message about the last failure of a dlock call in this thread, with
 * its detail (never a password); "" when there has been none. */
DLOCK_API const char *dlock_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* DLOCK_H */
