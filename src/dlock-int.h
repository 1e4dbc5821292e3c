/* dlock-int.h -- internal types shared by the library's sources.
 *
 * Layout of the library, one concern a file:
 *   error.c    error table, dlock_strerror, the last-error message
 *   clock.c    monotonic time and deadline conversion
 *   url.c      URL and configuration parsing
 *   token.c    per-thread owner tokens (RAND_bytes) and thread-exit hook
 *   conn.c     one Redis connection: connect, AUTH, commands, pool
 *   scripts.c  the Lua scripts and EVALSHA with NOSCRIPT reload
 *   reply.c    what the scripts answer, checked (no I/O)
 *   backend.c  the backend interface and the single-server backend
 *   redlock.c  the Redlock backend: a quorum of independent masters
 *   cluster.c  the Redis Cluster backend: slots, redirections
 *   client.c   clients, the per-process lock table, fork and exit
 *   renew.c    the renewal thread (leases, lost locks)
 *   orphan.c   holds the server may have that nobody here knows of
 *   lock.c     the ownership core shared by mutexes and rwlocks
 *   admin.c    lock info, listing, the administrative reset
 *   notify.c   the subscriber thread (release notifications)
 *   wait.c     the one waiting path used by every blocking call
 *   mutex.c    the mutex state machine
 *   attr.c     mutex attributes
 * Internal non-static names start with dlock__.
 */
#ifndef DLOCK_INT_H
#define DLOCK_INT_H

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

/* --------------------------------------------------------------- errors */

/* Records a message for dlock_last_error() and returns err. */
int dlock__seterr(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dlock__clearerr(void);
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
    unsigned restart_guard_ms; /* 0: off; see acquire_lua */
    unsigned handoff_ms;       /* 0: off; see release_lua */
    /* ?wait_conns=N: how many threads of the client wait for their grant
     * in BLPOP at once, each on a connection of its own; the others are
     * told of their grant on the release channel, which the subscriber's
     * one connection hears (as where BLPOP is refused), a little later
     * (a thread between): a process with hundreds of waiting threads does
     * not open hundreds of connections.  0: every grant is published. */
    unsigned wait_conns;
    /* ?breaker_ms=N (or dlock_config_t.breaker_ms): the circuit breaker's
     * back-off period; 0: off (conn.c dlock__breaker_pass). */
    unsigned breaker_ms;
} dlock__conf;

#define DLOCK__WAIT_CONNS 32 /* wait_conns' default */

/* The shortest a reply is waited for past the caller's deadline (or a
 * command timeout, if shorter): a command sent at its deadline is really
 * tried, and a wait never runs longer than that past it (conn.c
 * set_timeout, wait.c dlock__wait_grant).  dlock__reply_floor_ms: that
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
/* The holder identity ("who": host:pid:tid) this process writes with its
 * locks, when it holds them for another process: the preload's keeper
 * names the program it serves.  pid 0 (the default): this process's own
 * pid and the calling thread's tid.  (backend.c) */
void dlock__set_who(long pid, unsigned long tid);
/* Fills buf with n bytes from RAND_bytes (serialised against fork). */
int dlock__random(unsigned char *buf, int n);
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

/* -------------------------------------------------------- connections */

typedef struct dlock__conn {
    redisContext *ctx;
    unsigned timeout_ms; /* the socket timeout now set */
    struct dlock__conn *next; /* pool link */
    struct dlock__tls *tls;   /* rediss://: the TLS session (tls.c); NULL: plain */
    dlock__endpoint ep;       /* the server it leads to */
    dlock__mono checked;      /* Sentinel: when the sentinels last named ep the master */
    unsigned answered;        /* answers read on it (0: the server never answered) */
} dlock__conn;
/* Sentinel: does cn still lead to the master the sentinels name?  Asked
 * again when the last answer is older than max_age (0: always).  1 yes
 * (or the sentinels cannot tell), 0 no.  Other deployments: always 1. */
int dlock__conn_current(struct dlock_client *c, dlock__conn *cn, dlock__mono max_age);

/* TLS (tls.c).  The client's context is made from its configuration
 * (nothing without TLS); a connection's session starts on its connected
 * socket.  _write / _read move bytes as dlock__conn_flush / _read do. */
int dlock__tls_ctx_make(struct dlock_client *c);
void dlock__tls_ctx_free(struct dlock_client *c);
/* 0, ENOLCK, or EACCES when the server's certificate is refused (not
 * worth asking again; the message says ENOLCK, which callers return). */
int dlock__tls_start(struct dlock_client *c, dlock__conn *cn, const char *host);
void dlock__tls_free(dlock__conn *cn);
int dlock__tls_write(dlock__conn *cn, const char *buf, size_t len);
int dlock__tls_read(dlock__conn *cn);
int dlock__tls_pending(const dlock__conn *cn);
/* Probes host:port on a new connection, within timeout_ms: does it answer
 * a TLS ClientHello as a TLS server (_tls_probe), or a PING in plain RESP
 * (_plain_probe)?  1 yes, 0 no or no answer.  For messages only: they are
 * asked when a connection failed in a way that suggests the wrong one. */
int dlock__tls_probe(const char *host, int port, unsigned timeout_ms);
int dlock__plain_probe(const char *host, int port, unsigned timeout_ms);

struct dlock_client;
/* Connects, authenticates and selects the database, within the
 * connection timeout.  ENOLCK with a message on failure. */
int dlock__conn_open(struct dlock_client *c, dlock__conn **out, unsigned connect_timeout_ms);
void dlock__conn_close(dlock__conn *cn);
/* Closes the socket without sending anything: for a fork child discarding
 * the parent's connections. */
void dlock__conn_abandon(dlock__conn *cn);

/* ----------------------------------------------------------- lock table */

#define DLOCK__COND_STALE_MAX 8

/* The keys of one lock; the braces put all of them in one cluster slot. */
enum {
    DLOCK__K_LOCK,    /* <prefix>{<name>}          hash: owner, fence, who (host:pid:tid), since */
    DLOCK__K_FENCE,   /* <prefix>{<name>}:fence    the last fence issued */
    DLOCK__K_STATE,   /* <prefix>{<name>}:state    robust marker: held / notrecoverable */
    DLOCK__K_READERS, /* <prefix>{<name>}:readers  zset: shared holders' tokens by expiry */
    DLOCK__K_WRITERS, /* <prefix>{<name>}:writers  zset: waiting writers' tokens by expiry */
    DLOCK__K_HANDOFF, /* <prefix>{<name>}:handoff  host:pid:tid of a releaser held back */
    DLOCK__K_QUEUE,   /* <prefix>{<name>}:queue    zset: fair waiters' tokens by arrival ticket */
    DLOCK__K_QMETA,   /* <prefix>{<name>}:qmeta    hash: fair waiter token -> lease|robust|delivery|host:pid:tid */
    DLOCK__NKEYS
};
/* Not among them (the scripts make its name): <prefix>{<name>}:g:<token>,
 * the list a release pushes a queued waiter's grant to, "FENCE:MS", when
 * the waiter said it will wait for it there with BLPOP (delivery 2);
 * delivery 1: the grant is published on the release channel. */
/* After them, on Redis Cluster only: <prefix>{<name>}:epoch, the restart
 * guard's marker (one server keeps one for the deployment, <prefix>epoch,
 * which a cluster would put in another slot than the lock's). */
#define DLOCK__K_EPOCH DLOCK__NKEYS

struct dlock__lock;

/* One hold of a lock by one thread of this process: exclusive (a mutex, a
 * write lock) or shared (a read lock).  The renewal thread renews holds;
 * the fence identifies a hold, so an answer about an earlier hold is never
 * applied to a later one.  Guarded by the client's mutex. */
typedef struct dlock__hold {
    struct dlock__lock *l;
    dlock__thread *owner;  /* NULL: no hold */
    char token[DLOCK__OWNER_LEN + 1];
    int shared;
    unsigned count;        /* recursion depth */
    uint64_t fence;        /* fencing token */
    uint64_t ident;        /* the fence the server issued: the hold's identity */
    int caching;           /* of a caching mutex: an unlock may keep it (lock.c) */
    int cached;            /* kept by the process with no thread holding it */
    uint64_t fence_hi;     /* caching: the last fence of the block reserved */
    uint64_t heard;        /* caching: the subscriber's epoch in which every request
                            * for it was heard since it was acquired; 0: not so */
    unsigned lease_ms;
    dlock__mono acquired;    /* when the acquire was sent */
    dlock__mono valid_until; /* sent + lease - drift; extended by renewals */
    dlock__mono renew_at;    /* next renewal */
    dlock__mono retry_at;    /* after one that got no answer: not again before then */
    int lost;                /* the hold was lost: unlock gives EPERM */
    int releasing;           /* its unlock is on the way: still renewed, never reported lost */
    int robust;              /* the hold is of a ROBUST mutex */
    int inconsistent;        /* EOWNERDEAD given, consistent() not yet called */
    dlock_lost_fn lost_fn;   /* the lost-lock handler and its arguments */
    void *lost_arg;
    void *lost_obj;          /* the object (dlock_mutex_t *) given to it */
    struct dlock__hold *held_next, *held_prev; /* client's list of live holds */
    struct dlock__hold *next; /* the lock's list of shared holds */
} dlock__hold;

/* The state of one lock name in one client: shared by every object of that
 * name in the process (mutexes, rwlocks), by its waiters, the renewal
 * thread and the subscriber.  All fields are guarded by the client's
 * mutex. */
typedef struct dlock__lock {
    char *name;
    size_t namelen;
    int kind;        /* DLOCK__KIND_LOCK or DLOCK__KIND_COND */
    char *key;       /* <prefix>{<name>}: the lock; also the release channel */
    size_t keylen;
    char *keys[DLOCK__NKEYS + 1]; /* all its keys, in one buffer; keys[0] == key */
    size_t keylens[DLOCK__NKEYS + 1];
    unsigned objrefs; /* objects naming this lock */
    unsigned users;   /* calls in flight that use it without the mutex held */

    dlock__hold x;         /* the exclusive hold, if a local thread has one */
    dlock__hold *readers;  /* shared holds of local threads */

    /* Waiting. */
    unsigned waiters;   /* threads of this process in the wait path */
    /* What waiting threads of one kind (index: 0 exclusive, 1 shared,
     * 2 shared preferring readers) share, so that they ask the server one
     * at a time: */
    int trying[3];          /* one of them is asking the server */
    uint64_t busy_gen[3];   /* the server said busy at this generation... */
    dlock__mono busy_until[3]; /* ...until about then (the holder's lease) */
    uint64_t gen;       /* bumped by every notification that may free it */
    struct dlock__fairwait *fair; /* threads waiting in the fair queue (lock.c) */
    int wanted;         /* another owner asked for this cached lock */
    pthread_cond_t cv;  /* CLOCK_MONOTONIC; broadcast on every change */
    struct dlock__sleeper *sleepers; /* interruptible sleepers (wait.c) */
    int sub_state;      /* DLOCK__SUB_* */
    struct dlock_client *sub_node; /* whose subscriber carries the channel (notify.c) */
    /* A condition variable's registrations this process could not take
     * back (cond.c): removed with its next operation. */
    char (*stale)[DLOCK__OWNER_LEN + 1]; /* DLOCK__COND_STALE_MAX, made when needed */
    unsigned nstale;
    dlock__mono sub_idle_since;

    struct dlock__lock *hnext; /* hash chain */
} dlock__lock;

/* A thread waiting in a fair mutex's queue: the subscriber pokes it when
 * a release hands the lock to its token, or when any other release or a
 * lost subscription means it must ask again; other releases leave it be. */
typedef struct dlock__fairwait {
    const char *token;
    int poked;
    struct dlock__fairwait *next;
    /* The release's message said more than "your turn": the lock is this
     * token's, with this fence, leased for grant_ms from the release. */
    int granted;
    uint64_t fence;
    unsigned grant_ms;
    /* Its own wake-up: a poke wakes this waiter alone, not every thread
     * sleeping on the lock (with 25 waiting threads in a process, a grant
     * woke 25).  cv_ok 0: it sleeps on the lock's, as others do. */
    pthread_cond_t cv;
    int cv_ok;
    /* Waiting in BLPOP for a grant pushed to its list (dlock__wait_grant):
     * the thread's eventfd, which a poke writes (-1: not so waiting);
     * nolist: this call's list cannot be used, grants are published;
     * listing: this call holds one of the client's conf.wait_conns
     * places for waiters on a grant list (c->listing counts them). */
    int efd;
    int nolist;
    int listing;
} dlock__fairwait;

/* What a table entry is: a lock (mutex, rwlock), or a condition
 * variable, whose only key is its waiters at <prefix>{<name>}:cond. */
enum { DLOCK__KIND_LOCK, DLOCK__KIND_COND };

/* Subscription to the lock's release channel: NONE -> WANTED (a waiter
 * asked) -> SENT (SUBSCRIBE written) -> ACTIVE (confirmed) -> UNSENT
 * (UNSUBSCRIBE written after the linger time) -> NONE. */
enum { DLOCK__SUB_NONE, DLOCK__SUB_WANTED, DLOCK__SUB_SENT, DLOCK__SUB_ACTIVE, DLOCK__SUB_UNSENT };

/* ------------------------------------------------------------- backend */

/* What an acquire attempt found. */
typedef struct dlock__acq {
    int status;        /* DLOCK__ACQ_* */
    uint64_t fence;    /* ACQUIRED, MINE */
    int64_t pttl_ms;   /* BUSY: the holder's remaining lease, -1 unknown */
    uint64_t floor;    /* BUSY: the lock's last fence when the server answered, 0 not
                        * known: a grant whose fence is above it was made after */
    dlock__mono sent;  /* when the request that got this answer went out; failed: the
                        * latest request that went out, 0 none did; -1 not known */
} dlock__acq;
enum {
    DLOCK__ACQ_ACQUIRED,
    DLOCK__ACQ_BUSY,
    DLOCK__ACQ_MINE,
    DLOCK__ACQ_OWNERDEAD,     /* acquired; the last robust holder died */
    DLOCK__ACQ_NOTRECOVERABLE, /* not acquired: robust and unrecoverable */
    DLOCK__ACQ_HELDBACK  /* not acquired: this thread just released it to waiters */
};

/* Acquire flags. */
#define DLOCK__F_ROBUST 1 /* a robust mutex: honour and set the owner-died marker */
#define DLOCK__F_WAIT 2   /* the caller will wait: register it as a waiting writer */
#define DLOCK__F_SHARED 4 /* a shared (read) hold */
#define DLOCK__F_FAIR 8   /* queue in arrival order (with F_WAIT): every mutex but on Redlock */
#define DLOCK__F_CACHING 16 /* a caching mutex: reserve a block of fences */
#define DLOCK__F_GRANTLIST 32 /* with F_FAIR: push a grant to the waiter's grant list (BLPOP), not publish it */
#define DLOCK__F_READFIRST 64 /* with F_SHARED: granted while writers wait (prefer reader) */
/* The fences a caching hold reserves at each acquisition: its local
 * holds number them, and the server's next fence comes after them. */
#define DLOCK__FENCE_BLOCK 1048576u

/* How a hold ends on the server (see release_lua in scripts.c). */
enum {
    DLOCK__REL_PLAIN,
    DLOCK__REL_CLEAN,
    DLOCK__REL_INCONSISTENT,
    DLOCK__REL_DEAD,
    DLOCK__REL_SHARED,
    DLOCK__REL_WITHDRAW /* not a hold: a waiting writer's registration */
};
/* Administrative resets (see reset_lua). */
enum { DLOCK__RESET_BREAK, DLOCK__RESET_FULL };

/* Replies (reply.c): 0, or -1 for anything but what the script returns. */
int dlock__acq_parse(const redisReply *r, dlock__acq *out);
int dlock__flag_parse(const redisReply *r, int *out); /* integer 0 or 1 */
int dlock__u64_parse(const char *s, size_t n, uint64_t *out);
/* A grant as a release sends it, "FENCE:MS" (s[0..n)): the fence (> 0)
 * and the grant's lease in ms (1 .. 2^32-1).  0, or -1 if it is not
 * exactly that. */
int dlock__grant_parse(const char *s, size_t n, uint64_t *fence, unsigned *ms);
int dlock__info_parse(const redisReply *r, dlock_lock_info_t *out);

/* One renewal in a batch. */
typedef struct dlock__renewal {
    const struct dlock__lock *l;
    int shared;
    const char *token;
    unsigned lease_ms;
    int result; /* out: 1 renewed, 0 refused (not ours), -1 no answer */
    int moved;  /* out: Cluster: the node sent it elsewhere (MOVED, ASK) */
} dlock__renewal;
/* One renewal by itself, by dlock__command (which follows a cluster's
 * redirections); rn->result as in a batch. */
int dlock__renew_one(struct dlock_client *c, dlock__renewal *rn, dlock__mono deadline);

/* The seam every deployment sits behind: one server now; Sentinel,
 * Cluster and a Redlock quorum later.  Each call returns 0 or an errno
 * value (ENOLCK when the deployment cannot be reached within the bound
 * that `deadline` gives). */
typedef struct dlock__backend_ops {
    /* 1: the deployment keeps one wait queue per lock, and a release hands
     * the lock to its head (one server; a cluster, per slot).  0: Redlock,
     * whose masters would each keep their own queue; its waiters ask again
     * at every release. */
    int queues;
    /* flags: DLOCK__F_*. */
    int (*acquire)(struct dlock_client *c, dlock__lock *l, const char *token,
                   unsigned lease_ms, int flags, dlock__acq *out, dlock__mono deadline);
    /* *released is 1 when the hold was the token's and is gone, 0 when it
     * was not.  A release also publishes the wake-up for waiters.  how is
     * a DLOCK__REL_*. */
    int (*release)(struct dlock_client *c, dlock__lock *l, const char *token, int how,
                   int *released, dlock__mono deadline);
    /* Renews n holds in pipelined batches on the renewal connection,
     * giving up on answers at `deadline` (the earliest validity end among
     * them: past it the holds are lost anyway, and the handler must run). */
    int (*renew)(struct dlock_client *c, dlock__renewal *r, size_t n, dlock__mono deadline);
    /* Ends every hold of the lock; how is a DLOCK__RESET_*. */
    int (*reset)(struct dlock_client *c, dlock__lock *l, int how, int *was_held, dlock__mono deadline);
    /* A fenced write of value to key; *written is 0 when refused as stale. */
    int (*fenced_set)(struct dlock_client *c, const char *key, size_t keylen, uint64_t fence,
                      const void *value, size_t len, int *written, dlock__mono deadline);
    /* What the server knows of the lock. */
    int (*info)(struct dlock_client *c, dlock__lock *l, dlock_lock_info_t *out, dlock__mono deadline);
    /* A condition variable operation (cond_lua): op is "wait", "check",
     * "withdraw", "signal" or "broadcast"; *result is the script's answer. */
    int (*cond)(struct dlock_client *c, dlock__lock *l, const char *op, const char *token, unsigned ttl_ms,
                const char *const *stale, size_t nstale, long long *result, dlock__mono deadline);
    /* A pooled connection to the server that keeps l's queue (*node: the
     * client whose pool it is), for a waiter's BLPOP on its grant list;
     * NULL where there is no queue. */
    int (*grant_conn)(struct dlock_client *c, dlock__lock *l, struct dlock_client **node, dlock__conn **cn,
                      dlock__mono deadline);
} dlock__backend_ops;

extern const dlock__backend_ops dlock__single_backend;

/* The arguments of one script call (keys first), with the buffers they
 * point into: what the single-server backend sends, which Redlock sends
 * to every master at once. */
typedef struct dlock__args {
    const char *v[24];
    size_t len[24];
    int nkeys, n;
    char lease[16], guard[16], ident[320], win[16]; /* ident: host:pid:tid */
} dlock__args;
/* Returns the script (DLOCK__SCRIPT_ACQUIRE or _SHARED). */
int dlock__acquire_args(struct dlock_client *c, dlock__lock *l, const char *token, unsigned lease_ms, int flags,
                        dlock__args *a);
void dlock__release_args(struct dlock_client *c, dlock__lock *l, const char *token, int how, dlock__args *a);
/* Runs the script on the servers of n clients at once (Redlock): every
 * request is written before any answer is read.  out[i] the answer (to be
 * freed) or NULL with rcs[i] the error. */
void dlock__script_run_all(struct dlock_client **cs, size_t n, int which, redisReply **out, int *rcs,
                           dlock__mono deadline, int numkeys, int nargs, const char **args, const size_t *lens);
void dlock__command_all(struct dlock_client **cs, size_t n, int argc, const char **argv, const size_t *lens,
                        redisReply **out, int *rcs, dlock__mono deadline);
extern const dlock__backend_ops dlock__redlock_backend;
/* Redlock: on every new connection of a master's client m, reads the
 * server's run id (INFO server); a server that another master of the
 * deployment is too (confirmed on a fresh connection to that one) is
 * refused: EACCES with the message set (as a refused certificate), and
 * the parent's rl_dups moves.  0 also when the server does not say
 * (INFO refused by an ACL).  ENOLCK when the connection failed. */
int dlock__redlock_identify(struct dlock_client *m, dlock__conn *cn);
extern const dlock__backend_ops dlock__cluster_backend;

/* Redis Cluster (cluster.c).  The hash slot of a key, as the cluster
 * computes it (hash tags honoured). */
unsigned dlock__key_slot(const char *key, size_t len);
/* m (a cluster node's client) answered r.  A MOVED or ASK redirection
 * updates the slot map: 1 with *next the node to ask and *asking set for
 * ASK; 0 when r is no redirection (or names no usable node). */
int dlock__cluster_redirect(struct dlock_client *m, const redisReply *r, struct dlock_client **next, int *asking);
/* The masters of the cluster, from a map read now: up to max clients
 * into out; their number, or minus an errno value (error set). */
int dlock__cluster_masters(struct dlock_client *c, struct dlock_client **out, size_t max, dlock__mono deadline);
/* The member of the master serving `slot` as the map has it (the first
 * member when it does not know), NULL if c is no cluster.  c->mu held. */
struct dlock_client *dlock__cluster_node(struct dlock_client *c, unsigned slot);
/* Reads the slot map again unless that was done within the last 50 ms
 * (the last error is kept).  c->mu NOT held. */
void dlock__cluster_refresh_maybe(struct dlock_client *c, dlock__mono deadline);
/* Frees the cluster state of a client. */
void dlock__cluster_free(struct dlock_client *c);

/* --------------------------------------------------------------- client */

struct dlock_client {
    dlock__conf conf;
    const dlock__backend_ops *ops;
    pthread_mutex_t mu;   /* guards everything below and every dlock__lock */
    unsigned objects;     /* live mutex objects using this client */

    /* Lock table: name -> dlock__lock. */
    dlock__lock **buckets;
    size_t nbuckets, nlocks;

    /* Command connections: a pool of idle ones. */
    dlock__conn *idle;
    unsigned nidle;

    /* Tokens the server may hold a key under that no hold here has. */
    struct dlock__orphan *orphans;
    dlock__conn *buried; /* a fork child's closed, never freed, inherited connections */
    unsigned orphan_pass;

    /* Holds of threads of this process, for renewal and exit. */
    dlock__hold *held;
    size_t nheld;

    /* Renewal thread. */
    int renew_running, renew_stop;
    pthread_t renew_thread;
    pthread_cond_t renew_cv;
    dlock__mono renew_wake;  /* when the sleeping renewal thread wakes; 0 awake */
    dlock__mono renew_idle_until; /* keep ticking, with no holds, until then */
    dlock__mono renew_tick;  /* ...every this long (a sixth of the last lease) */
    struct ssl_ctx_st *tls_ctx; /* rediss://: the OpenSSL context of every connection */
    dlock__conn *renew_conn; /* owned by the renewal thread */
    struct dlock__pending *renew_pend; /* its batch buffers, renew_cap long */
    dlock__renewal *renew_rn;
    struct dlock__lost_report *renew_reps;
    size_t renew_cap;

    /* Subscriber thread. */
    int sub_running, sub_stop;
    pthread_t sub_thread;
    int sub_wakefd;       /* eventfd that pokes the subscriber */
    int sub_connected;
    dlock__conn *sub_conn; /* owned by the subscriber thread */
    uint64_t sub_epoch;   /* bumped at every (re)connection and loss */
    dlock__mono sub_down_since; /* 0 when up or unneeded */

    char *epoch_key; /* <prefix>epoch: the restart guard's marker */
    unsigned char nonce[DLOCK__TOKEN_HEX / 2]; /* random: mixed into owner tokens */

    struct dlock_client *next; /* all clients, for fork and exit */
    int is_default;
    /* Redlock: one internal single-server client per master, made and
     * destroyed with this one (redlock.c talks to them). */
    struct dlock_client **members;
    size_t nmembers;
    int one_connect; /* a member: one connection attempt per request, no retry loop */
    int grant_nolist; /* the server refused BLPOP (an ACL): grants are published (dlock__wait_grant) */
    unsigned listing; /* acquire calls holding a place to wait in BLPOP (dlock__fairwait.listing) */
    unsigned dropping; /* cached holds being given back (dlock__cache_drop), off the held list */
    /* Redis Cluster: the parent has a member per node (made as the slot
     * map names them) and the map (cluster.c); a member knows its parent,
     * to follow redirections. */
    struct dlock__cluster *cl;
    struct dlock_client *parent;
    /* Redlock (redlock.c): a member knows its parent, and the run id its
     * server gave at the member's last connection ("": not known); the
     * parent counts the times two masters were found to be one server,
     * and keeps what the last of them said. */
    struct dlock_client *rl_parent;
    char rl_run_id[41];
    unsigned rl_dups;
    char rl_dup_msg[640];
    /* A member: when its server last refused us for good (EACCES from
     * dlock__conn_open: a certificate, credentials, one server twice). */
    dlock__mono rl_refused;
    /* The circuit breaker (conf.breaker_ms; conn.c): open from a request
     * that found the server unreachable for the whole unreachable bound
     * until breaker_until (0: closed); meanwhile requests fail at once but
     * one a second (not before breaker_probe), which makes one attempt. */
    dlock__mono breaker_until;
    dlock__mono breaker_probe;
    dlock__mono breaker_since; /* when it opened */
};

/* The table: find or make the state of `name`, with one reference taken.
 * Called with c->mu held. */
int dlock__lock_get(struct dlock_client *c, const char *name, size_t namelen, dlock__lock **out);
/* Drops a reference; frees the state when nothing uses it.  c->mu held. */
void dlock__lock_put(struct dlock_client *c, dlock__lock *l);
/* Frees l if no object, call, hold, waiter or subscription uses it. */
void dlock__lock_maybe_free(struct dlock_client *c, dlock__lock *l);
dlock__lock *dlock__lock_find(struct dlock_client *c, const char *name, size_t namelen, int kind);
/* Checks name, finds the client (*cp; NULL: the default) and takes a
 * reference on the entry of that name and kind, counting an object on the
 * client if `object`; its twin gives both back.  c->mu NOT held. */
int dlock__entry_open(struct dlock_client **cp, const char *name, int kind, int object, dlock__lock **lp);
void dlock__entry_close(struct dlock_client *c, dlock__lock *l, int object);
/* dlock__lock_get for either kind of table entry (DLOCK__KIND_*). */
int dlock__entry_get(struct dlock_client *c, const char *name, size_t namelen, int kind, dlock__lock **out);

/* Command connections from the pool (c->mu NOT held by the caller). */
int dlock__pool_get(struct dlock_client *c, dlock__conn **out, dlock__mono deadline);
void dlock__pool_put(struct dlock_client *c, dlock__conn *cn, int broken);
/* c->mu held: puts a healthy connection back among c's idle ones; 0 if
 * there is no room (the caller closes it). */
int dlock__pool_keep(struct dlock_client *c, dlock__conn *cn);
/* Is r an error that means "not now" (LOADING, BUSY...)? */
int dlock__not_ready(const redisReply *r);
/* The transport (conn.c): one request and its answer, NULL when the
 * connection failed (ctx->errstr says why; *sent, if asked, whether the
 * request went out before it did); and sending what was appended
 * to ctx's output buffer.  Both write with MSG_NOSIGNAL: never SIGPIPE. */
redisReply *dlock__conn_cmd(dlock__conn *cn, int argc, const char **argv, const size_t *lens, int *sent);
/* Writes what is queued in the context's output buffer. */
int dlock__conn_flush(dlock__conn *cn);
/* Reads what the server sent (waiting up to the socket timeout) into the
 * context's reader: REDIS_OK or REDIS_ERR, as redisBufferRead. */
int dlock__conn_read(dlock__conn *cn);
/* The next answer, reading as needed: REDIS_OK or REDIS_ERR, as
 * redisGetReply. */
int dlock__conn_reply(dlock__conn *cn, void **reply);
/* wait=N: appends WAIT replicas timeout_ms to the connection's output
 * (0, or -1 out of memory); reads its answer, the replicas that
 * acknowledged (-1: not an integer), into *acked (0, or -1 no answer). */
int dlock__wait_append(dlock__conn *cn, unsigned replicas, unsigned timeout_ms);
int dlock__wait_read(dlock__conn *cn, long long *acked);
/* Bytes received but not yet given to the reader (TLS buffers them). */
int dlock__conn_pending(const dlock__conn *cn);
/* Closes every idle connection. */
void dlock__pool_flush(struct dlock_client *c);

/* Runs a command on a pooled connection, reconnecting on failure until
 * `deadline` (bounded by the unreachable bound).  ENOLCK when the server
 * could not be reached in time.  once: a request that went out but got no
 * answer is not sent again (ENOLCK: its outcome is unknown). */
/* The same, followed on its connection by WAIT for the deployment's
 * wait=N replicas; *acked: how many acknowledged (-1: unknown). */
int dlock__command_wait(struct dlock_client *c, redisReply **out, dlock__mono deadline, int argc,
                        const char **argv, const size_t *argvlen, long long *acked);
int dlock__demoted(const redisReply *r);
int dlock__command(struct dlock_client *c, redisReply **out, dlock__mono deadline, int once,
                   int argc, const char **argv, const size_t *argvlen);
/* Did the calling thread's last dlock__command fail after its request
 * went out (ENOLCK, outcome unknown)? */
int dlock__outcome_unknown(void);
/* When the calling thread's last dlock__command sent the request whose
 * answer it returned (after retries: the last one). */
dlock__mono dlock__command_sent(void);
/* The deadline for "the server is unreachable": now + unreachable_ms. */
dlock__mono dlock__unreachable_deadline(const struct dlock_client *c);
unsigned dlock__reply_floor_ms(const struct dlock_client *c);
/* The circuit breaker (conf.breaker_ms), around each request of a lock,
 * unlock or info call.  dlock__breaker_pass: 0 if the request may go --
 * *probe 1 when it is the breaker's probe, which makes one attempt (its
 * bound is now) -- or ENOLCK, with the message, while the breaker is open:
 * nothing is sent.  dlock__breaker_note: the request's outcome; an answer
 * (anything but ENOLCK) closes the breaker, ENOLCK from a request whose
 * bound was the unreachable bound `ub` (0: it was not) and that lasted
 * until about then opens it.  c->mu held for both. */
int dlock__breaker_pass(struct dlock_client *c, int *probe);
void dlock__breaker_note(struct dlock_client *c, int rc, dlock__mono ub);
/* The same with c->mu NOT held, for callers outside a lock call (the
 * preload, whose keepers make its file locks' requests): _check is
 * _pass; _report(rc, paid) is _note, with paid 1 for a request that
 * waited the whole unreachable bound; _probe_now opens the breaker with
 * a probe due at once (a keeper told that its program's breaker is open). */
int dlock__breaker_check(struct dlock_client *c, int *probe);
void dlock__breaker_report(struct dlock_client *c, int rc, int paid);
void dlock__breaker_probe_now(struct dlock_client *c);
/* Is c's breaker open now?  c->mu NOT held. */
int dlock__breaker_open(struct dlock_client *c);
/* Sets the calling thread's call end (DLOCK__MONO_NEVER: none), which no
 * connect attempt or reply wait of the thread outlasts; the old one. */
dlock__mono dlock__call_end_set(dlock__mono end);

/* Holds: adds/removes h to/from the renewal list.  c->mu held. */
void dlock__held_add(struct dlock_client *c, dlock__hold *h);
void dlock__held_remove(struct dlock_client *c, dlock__hold *h);
unsigned dlock__drift_ms(const struct dlock_client *c, unsigned lease_ms);

/* Starts a background thread with every signal blocked. */
int dlock__thread_start(pthread_t *th, void *(*fn)(void *), void *arg);

/* Renewal thread (renew.c).  Start with c->mu held; it is idempotent. */
int dlock__renew_start(struct dlock_client *c);
void dlock__renew_kick(struct dlock_client *c);
void dlock__renew_stop(struct dlock_client *c);

/* Subscriber (notify.c).  Asks for a subscription to l's channel and
 * pokes the subscriber thread.  c->mu held. */
int dlock__notify_want(struct dlock_client *c, dlock__lock *l);
void dlock__notify_poke(struct dlock_client *c);
/* Is l's channel subscribed on a live connection; the epoch of the
 * connection that carries it (unique in the process).  c->mu held. */
int dlock__sub_live(const struct dlock_client *c, const dlock__lock *l);
uint64_t dlock__sub_epoch(const struct dlock_client *c, const dlock__lock *l);
void dlock__notify_stop(struct dlock_client *c);

/* Scripts (scripts.c). */
enum {
    DLOCK__SCRIPT_ACQUIRE,
    DLOCK__SCRIPT_ACQUIRE_SHARED,
    DLOCK__SCRIPT_RELEASE,
    DLOCK__SCRIPT_RENEW,
    DLOCK__SCRIPT_RESET,
    DLOCK__SCRIPT_FENCED_SET,
    DLOCK__SCRIPT_INFO,
    DLOCK__SCRIPT_COND,
    DLOCK__SCRIPT_FENCE_RAISE,
    DLOCK__NSCRIPTS
};
/* A script's SHA1 and body; variant 1: a cluster's (SPUBLISH). */
const char *dlock__script_sha(int which, int variant);
const char *dlock__script_body(int which, int variant);
/* Runs script `which` by EVALSHA, loading it on NOSCRIPT: args holds
 * nargs values in all, the first numkeys of them KEYS, the rest ARGV. */
/* The same, with WAIT for the deployment's wait=N replicas after it. */
int dlock__script_run_wait(struct dlock_client *c, int which, redisReply **out, dlock__mono deadline,
                           int numkeys, int nargs, const char **args, const size_t *lens, long long *acked);
int dlock__script_run(struct dlock_client *c, int which, redisReply **out, dlock__mono deadline,
                      int numkeys, int nargs, const char **args, const size_t *lens);
/* Appends an EVALSHA to a context's output buffer (pipelining). */
int dlock__script_append(redisContext *ctx, int which, int variant, int numkeys, int nargs,
                         const char **args, const size_t *lens);
int dlock__script_load_all(dlock__conn *cn, int variant);

/* Waiting (wait.c): the one path every blocking call goes through.
 * Each sleeps with c->mu held (released while sleeping) and returns 0,
 * ETIMEDOUT when `until` passes, or, when intr is set, EINTR when a
 * signal handler ran in the calling thread. */
/* The caller's signal mask for the interruptible sleeps of this call
 * (NULL: none). */
void dlock__intr_mask_set(const sigset_t *mask);
/* Wakes every thread sleeping on l.  c->mu held. */
void dlock__lock_wake(dlock__lock *l);
/* Sleeps until l is woken. */
int dlock__sleep(struct dlock_client *c, dlock__lock *l, dlock__mono until, int intr);
/* Sleeps until l->gen moves past `gen`. */
int dlock__wait(struct dlock_client *c, dlock__lock *l, uint64_t gen, dlock__mono until, int intr);
/* Lock caching (lock.c): is the release channel heard; give up the
 * cached hold of l.  c->mu held. */
int dlock__cache_heard(const struct dlock_client *c, const dlock__lock *l);
int dlock__cache_ok(const struct dlock_client *c, const dlock__lock *l);
void dlock__cache_drop(struct dlock_client *c, dlock__lock *l, dlock__mono deadline);
/* Sleeps until fw is poked (a fair waiter's turn, or a reason to ask). */
int dlock__wait_turn(struct dlock_client *c, dlock__lock *l, dlock__fairwait *fw, dlock__mono until, int intr);
/* The same, blocked in BLPOP on the waiter's grant list: 0 granted
 * (fw->granted) or poked, ETIMEDOUT, EINTR (intr), or EAGAIN: the list
 * could not be used (fw->nolist is set; c->grant_nolist too if the
 * server refuses BLPOP).  The thread waits for the server's answer no
 * later than the caller's deadline (a little past until, else).  c->mu
 * held. */
int dlock__wait_grant(struct dlock_client *c, dlock__lock *l, dlock__fairwait *fw, dlock__mono until,
                      dlock__mono deadline, int intr);
/* Pokes l's fair waiter whose token is token[0..len), or every one
 * (token NULL), and wakes it.  c->mu held. */
void dlock__fair_poke(dlock__lock *l, const char *token, size_t len);
/* The same for a grant: the lock is that waiter's, with that fence,
 * leased for grant_ms. */
void dlock__fair_grant(dlock__lock *l, const char *token, uint64_t fence, unsigned grant_ms);
/* Makes sure a release of l will wake us: subscribes and waits for the
 * subscription to be active, or until deadline / the unreachable bound
 * (ENOLCK). */
int dlock__wait_ready(struct dlock_client *c, dlock__lock *l, dlock__mono deadline, int intr);
void dlock__wait_done(struct dlock_client *c, dlock__lock *l);

/* Lost holds found by the renewal thread, reported after c->mu is
 * released. */
struct dlock__lost_report {
    dlock_lost_fn fn;
    void *arg;
    void *obj;
    char *name;
    int why; /* DLOCK_LOST_BROKEN, or 0: its lease ran out (DLOCK_LOST_EXPIRED) */
};
/* Runs rep's handler (if any) with dlock_lost_reason() telling why. */
void dlock__lost_run(const struct dlock__lost_report *rep);
typedef struct dlock__lost_report dlock__lost_report;

/* The lock core (lock.c), shared by mutexes and rwlocks. */
typedef struct dlock__want {
    int shared;        /* a read lock */
    int intr;          /* a signal handler ends the wait with EINTR */
    int type;          /* DLOCK_MUTEX_*: what a relock by the holder does */
    int robust;
    int fair;          /* FIFO: wait in the server's queue, take the lock only in turn */
    int caching;       /* keep the lock in the process after unlock until asked */
    int readfirst;     /* a read lock: granted while writers wait (DLOCK_RWLOCK_PREFER_READER) */
    int process;       /* DLOCK_OWNER_PROCESS: the hold is the process's (dlock__proc_self) */
    unsigned lease_ms;
    dlock_lost_fn lost_fn; /* the lost-lock handler for the hold */
    void *lost_arg;
    void *lost_obj;
} dlock__want;
/* Acquires l for the calling thread: try (one round trip at most) or
 * wait until `deadline` (monotonic; NEVER for none).  bad_deadline: the
 * EINVAL to give if the call would have to wait. */
int dlock__acquire(struct dlock_client *c, dlock__lock *l, const dlock__want *w, int try,
                   dlock__mono deadline, int bad_deadline);
/* Ends the calling thread's exclusive hold (or, allow_shared, its read
 * hold) of l. */
int dlock__release(struct dlock_client *c, dlock__lock *l, int allow_shared);
int dlock__holds(struct dlock_client *c, dlock__lock *l, int allow_shared, uint64_t *fence);
/* The same for the owner of w's holds: the calling thread, or for a
 * process-owned mutex the process (any thread of it). */
int dlock__release_want(struct dlock_client *c, dlock__lock *l, const dlock__want *w);
int dlock__holds_want(struct dlock_client *c, dlock__lock *l, const dlock__want *w, uint64_t *fence);
/* The identity that owns w's holds for the calling thread, if it exists. */
dlock__thread *dlock__owner_peek(const dlock__want *w);
int dlock__hold_valid(struct dlock_client *c, dlock__hold *h, const dlock__thread *self, dlock__lost_report *rep);
dlock__hold *dlock__reader(dlock__lock *l, const dlock__thread *self);
/* The owner token of self's acquire call number `call` on client c,
 * DLOCK__OWNER_LEN + 1 bytes. */
void dlock__owner_token(const struct dlock_client *c, const dlock__thread *self, uint64_t call, char *out);
/* Lock objects (mutexes, rwlocks): the private state behind the caller's
 * dlock_mutex_t / dlock_rwlock_t. */
typedef struct dlock__obj {
    unsigned magic;
    struct dlock_client *c;
    dlock__lock *l;
    dlock__want want;   /* type, robustness, lease, lost-lock handler */
    unsigned calls;     /* lock calls in progress (destroy gives EBUSY)... */
    pid_t calls_pid;    /* ...in this process: a fork child starts from 0 */
} dlock__obj;
/* Counts a call in progress through o (delta +1 / -1).  c->mu held. */
void dlock__obj_calls(dlock__obj *o, int delta);
int dlock__obj_make(void *obj, const char *name, const dlock_mutexattr_t *attr, unsigned magic, dlock__obj **out);
void dlock__obj_free(dlock__obj *o);
int dlock__obj_destroy(dlock__obj *o, const void *obj);
int dlock__obj_lock(dlock__obj *o, int shared, int try, dlock__mono deadline, int bad_deadline);
int dlock__mutex_obj(dlock_mutex_t *m, dlock__obj **out);
int dlock__obj_xlock(dlock__obj *o, int shared, int try, int intr, dlock__mono deadline, int bad_deadline);
int dlock__object_open(const char *name, const dlock_mutexattr_t *attr, void *obj, struct dlock_client **cp,
                       dlock__lock **lp, dlock__want *w);
void dlock__object_close(struct dlock_client *c, dlock__lock *l);
int dlock__object_held(const dlock__lock *l, const void *obj);
int dlock__timed(clockid_t clock, const struct timespec *abstime, dlock__mono *deadline, int *bad);
/* Runs a lost-lock handler outside the client's mutex. */
void dlock__report(dlock__lost_report *rep);
/* Checks a lock name: 1..DLOCK_NAME_MAX bytes. */
int dlock__check_name(const char *name, size_t *len);

/* Orphans (orphan.c): possible server-side holds nobody here knows of. */
void dlock__orphan_add(struct dlock_client *c, dlock__lock *l, const char *token, int how, unsigned lease_ms);
dlock__mono dlock__orphans_release(struct dlock_client *c, dlock__lock *l, dlock__mono deadline);
void dlock__orphans_forget(struct dlock_client *c);

/* Clients (client.c). */
int dlock__client_live(const struct dlock_client *c);
/* A member client for the server at ep (Redlock, Cluster); not while the
 * process exits (EBUSY). */
int dlock__client_member(struct dlock_client **out, struct dlock_client *parent, const dlock__endpoint *ep);
struct dlock_client *dlock__client_get(struct dlock_client *c, int *err);
int dlock__client_use(struct dlock_client *c);
void dlock__client_unuse(struct dlock_client *c);
/* Thread exit: stops renewing every lock the thread holds. */
void dlock__thread_exiting(dlock__thread *t);


/* Forgets h (its thread is gone or gave it up).  c->mu held. */
void dlock__hold_forget(struct dlock_client *c, dlock__hold *h);
/* Marks h lost (c->mu held); fills *rep when a handler must run. */
void dlock__hold_lost(struct dlock_client *c, dlock__hold *h, dlock__lost_report *rep);

#endif /* DLOCK_INT_H */
