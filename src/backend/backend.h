/* backend.h -- what a lock is on the server: the keys of a lock, the
 * Lua scripts (lua/NAME.lua, run by scripts.c) and their replies (reply.c), and the backend
 * interface every deployment sits behind: one server or Sentinel
 * (backend.c), Redis Cluster (cluster.c), a Redlock quorum (redlock.c). */
#ifndef DLOCK_BACKEND_H
#define DLOCK_BACKEND_H

#include "net/net.h"
#include "dlock_private.h" /* what the preload may call */

/* The keys of one lock; the braces put all of them in one cluster slot. */
enum {
    DLOCK__K_LOCK,    /* <prefix>{<name>}          the holder: a hash (owner, fence, who, since) or the
                       * string "TOKEN FENCE SINCE WHO" (lua/acquire.lua) */
    DLOCK__K_FENCE,   /* <prefix>{<name>}:fence    the last fence issued */
    DLOCK__K_STATE,   /* <prefix>{<name>}:state    robust marker: held / notrecoverable */
    DLOCK__K_READERS, /* <prefix>{<name>}:readers  zset: shared holders' tokens by expiry */
    DLOCK__K_WRITERS, /* <prefix>{<name>}:writers  zset: waiting writers' tokens by expiry */
    DLOCK__K_HANDOFF, /* <prefix>{<name>}:handoff  host:pid:tid of a releaser held back */
    DLOCK__K_QUEUE,   /* <prefix>{<name>}:fifo     list: the fair queue, in arrival order, of entries
                       * "TOKEN|LEASE|ROBUST|DELIVERY|host:pid:tid" (lua/release.lua) */
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

/* The most registrations a condition variable op takes back at once. */
#define DLOCK__COND_STALE_MAX 8

/* What a lock is called on the server: its name and its keys (above),
 * all in one cluster slot.  Made by dlock__keys_make, kept by the core's
 * table entry; of a lock, the backend takes only this. */
typedef struct dlock__keys {
    char *name;      /* the lock's name, NUL-terminated */
    size_t namelen;
    char *key;       /* keys[DLOCK__K_LOCK]: the lock; also its release channel */
    size_t keylen;
    char *keys[DLOCK__NKEYS + 1]; /* in one buffer; for a condition variable every one is
                                   * <prefix>{<name>}:cond, its waiters and its channel */
    size_t keylens[DLOCK__NKEYS + 1];
    char *lvbkey;    /* <prefix>{<name>}:lvb, the lock value block (acquire.lua) */
    size_t lvbkeylen;
    /* The value block the next release of the exclusive hold identified by
     * lvb_ident writes (release.lua's ARGV[3]), when lvb_pending: set by
     * its holder (core/lvb.c), written with the release, no request of
     * its own. */
    unsigned char lvb[DLOCK_LVB_MAX];
    size_t lvblen;
    int lvb_pending;
    uint64_t lvb_ident;
} dlock__keys;
/* What dlock__keys_make makes the keys of (its `kind`): a lock's, a
 * condition variable's (every key <prefix>{<name>}:cond), or a
 * semaphore's (DLOCK__KS_*). */
enum { DLOCK__KEYS_LOCK, DLOCK__KEYS_COND, DLOCK__KEYS_SEM };
/* A semaphore's keys, in the same slot:
 *   <prefix>{<name>}:sem   its value (a string holding a number); also its channel
 *   <prefix>{<name>}:semq  zset: waiters' tokens by arrival ticket (FIFO)
 *   <prefix>{<name>}:semx  zset: waiters' and grantees' tokens by registration expiry
 *   <prefix>{<name>}:semg  hash: tokens a post handed a unit to, not yet taken
 *   <prefix>{<name>}:semd  hash: caller (a thread) -> its last take, withdraw, post or
 *                          return done (sem.lua's `done`): asked again, it answers 1
 *   <prefix>{<name>}:semo  hash: token -> "KIND:SINCE:WHO" of each waiter (KIND w, from
 *                          its first registration until it takes its unit or leaves;
 *                          W: the same, told of a unit by a push to its grant list)
 *                          and each unit leased under undo (KIND u); SINCE server ms,
 *                          WHO host:pid:tid: what `dlock status` shows
 *   <prefix>{<name>}:semu  zset: tokens of units leased under undo, by lease expiry
 * and, not declared (the same slot), a W waiter's grant list
 * <prefix>{<name>}:sem:g:<token>, "1:TTL" pushed when a post hands it a unit. */
enum {
    DLOCK__KS_VALUE,
    DLOCK__KS_QUEUE,
    DLOCK__KS_EXPIRY,
    DLOCK__KS_GRANTED,
    DLOCK__KS_DONE,
    DLOCK__KS_OWNERS,
    DLOCK__KS_LEASES,
    DLOCK__NKS
};
_Static_assert(DLOCK__NKS <= DLOCK__NKEYS + 1, "a semaphore's keys fit in dlock__keys");
/* How long a semaphore waiter's registration, or a unit a post handed to
 * a waiter, lasts on the server unless taken or renewed (the waiter
 * renews it every third of it: core/sem.c). */
#define DLOCK__SEM_TTL_MS 3000u
/* How long an unlinked semaphore's mark (<value key>:unlinked) stays:
 * while it does, objects still open on the name do not make it again
 * (sem.lua: it was removed on purpose, not lost).  An hour. */
#define DLOCK__SEM_UNLINKED_MS 3600000u
/* 0, or ENOMEM (nothing kept).  kind: DLOCK__KEYS_*. */
int dlock__keys_make(dlock__keys *k, const char *prefix, const char *name, size_t namelen, int kind);
void dlock__keys_free(dlock__keys *k);

/* ------------------------------------------------------------- backend */

/* One deployment as the core sees it: one server (or the master that
 * Sentinel names), a Redis Cluster or a Redlock quorum, behind its ops.
 * A Cluster's nodes and a Redlock's masters are members: single-server
 * backends of their own (their own node, pool and mutex), made and freed
 * with their deployment.  The core keeps one in each client (its mutex
 * guards the deployment's state: the cluster map, the member list). */
typedef struct dlock__backend dlock__backend;
struct dlock__backend_ops;
struct dlock__figs;
struct dlock__conv;
struct dlock__backend {
    const struct dlock__backend_ops *ops;
    dlock__node node;       /* its server; Redlock, Cluster: the first node named that answers */
    pthread_mutex_t own_mu; /* a member's own mutex (node.mu points at it) */
    char *epoch_key;        /* <prefix>epoch: the restart guard's marker */
    int grant_nolist;       /* the server refused BLPOP (an ACL): grants are published */
    dlock__conn *renew_conn; /* the renewal batches' connection, owned by the renewal thread */
    dlock__conn *buried;    /* a fork child's closed, never freed, inherited connections */
    /* Redlock, Cluster: the members (a cluster gets more as its slot map
     * names them; cluster.c), and a member's deployment. */
    dlock__backend **members;
    size_t nmembers;
    dlock__backend *parent;
    struct dlock__cluster *cl; /* Redis Cluster: the slot map */
    /* Redlock (redlock.c): a member's server's run id at its last
     * connection ("": not known); the deployment counts the times two
     * masters were found to be one server, and keeps what the last of
     * them said. */
    char rl_run_id[41];
    unsigned rl_dups;
    char rl_dup_msg[640];
    dlock__mono rl_renew_stall; /* a member: no renewal connection tried before (renewal thread's) */
    void *up; /* the layer above's object for it (a cluster member: its subscriber) */
};

/* Makes the deployment that cfg (or $DLOCK_URL) names, its mutex mu (held
 * by the caller's lock calls; a member gets its own): configuration, TLS
 * context, ops and members.  EINVAL (bad configuration), ENOMEM; nothing
 * kept on error.  Nothing is connected yet. */
int dlock__backend_init(dlock__backend *b, const dlock_config_t *cfg, pthread_mutex_t *mu);
/* Frees it, its members and every idle connection (nothing may use it). */
void dlock__backend_free(dlock__backend *b);
/* A member for the server at ep (Redlock, Cluster), made with malloc:
 * dlock__backend_free, then free(). */
int dlock__backend_member(dlock__backend **out, dlock__backend *parent, const dlock__endpoint *ep);
/* Fork: the members' mutexes taken before (the deployment's own is the
 * caller's), released after in the parent; in the child every inherited
 * connection is closed without a word (their state may be half-updated:
 * kept, buried, never freed) and the mutexes made anew. */
void dlock__backend_fork_prepare(dlock__backend *b);
void dlock__backend_fork_parent(dlock__backend *b);
void dlock__backend_fork_child(dlock__backend *b);
/* Reads the answers of pipelined releases sent before `before` (held
 * ones, written first: held before held_before; DLOCK__MONO_NEVER: all),
 * to deadline at most. */
void dlock__backend_settle(dlock__backend *b, dlock__mono before, dlock__mono held_before, dlock__mono deadline);
/* The renewal thread stops: its connection closes (a member's closes
 * with the member). */
void dlock__backend_renew_done(dlock__backend *b);
/* Connects ahead, once, briefly: an idle connection to a single server
 * (or Sentinel's master) for the request the caller is about to make,
 * opened while it waits for something else.  Nothing if it has one, if
 * the server is known to be down, or on another deployment. */
void dlock__backend_warm(dlock__backend *b);
/* A connection of the layer above's (a subscriber's) closed in a fork
 * child, kept as dlock__backend_fork_child keeps its own. */
void dlock__backend_bury(dlock__backend *b, dlock__conn *cn);

/* One SCAN of b's keys from cursor for pattern (COUNT 1000), within the
 * unreachable bound: 0 with its answer, or an errno value (figures.c). */
int dlock__scan(dlock__backend *b, const char *cursor, const char *pattern, redisReply **out);

/* Release notifications' wire (subscribe.c).  _open: a connection to
 * b's server for them (ENOLCK).  _append: queues (UN)SUBSCRIBE of
 * channel (the sharded kind on a cluster): 0, or ENOMEM.  _wait: writes what
 * is queued, then waits up to timeout_ms (-1: no bound; on Sentinel at
 * most a second, after which the connection is checked against the
 * sentinels) for bytes, which it reads, or for wakefd, which it drains:
 * 0, or ENOLCK when the connection failed or leads to a demoted master.
 * _next: the next whole reply read (NULL: none yet): 0, or EPROTO. */
int dlock__sub_open(dlock__backend *b, dlock__conn **out);
void dlock__sub_close(dlock__conn *cn);
int dlock__sub_append(dlock__backend *b, dlock__conn *cn, int on, const char *channel, size_t len);
int dlock__sub_wait(dlock__backend *b, dlock__conn *cn, int wakefd, int timeout_ms);
int dlock__sub_next(dlock__conn *cn, redisReply **out);

/* A queued waiter's grant (grant.c): BLPOP on its grant list,
 * <lock key>:g:<token>, where a fair release pushes "FENCE:MS".
 * _send: on a connection of the node that keeps k's queue, with the
 * wait's timeout (until - now): 0, or EAGAIN.  _await (mutex not held):
 * waits in ppoll on the socket and on wakefd until give_up, mask the
 * signal mask during it (NULL: signals are not the wait's): 0 with the
 * answer in p->r, 0 with p->r NULL when wakefd was written, ETIMEDOUT,
 * EINTR (mask given), EAGAIN (the connection failed).  _drop (mutex not
 * held): a connection without its whole answer is closed, a cluster
 * node's goes back to its pool; _keep (mutex held): b's own goes back
 * to b's idle ones.  _read: 1 a grant (fence, ms), 0 the BLPOP's
 * timeout, -1 anything else (*nolist 1: the server refuses BLPOP for
 * good); the answer is freed. */
typedef struct dlock__grant_pop {
    dlock__node *node; /* whose pool the connection came from */
    dlock__conn *cn;
    redisReply *r;
} dlock__grant_pop;
int dlock__grant_send(dlock__backend *b, const dlock__keys *k, const char *token, dlock__mono now, dlock__mono until,
                      dlock__grant_pop *p);
int dlock__grant_await(dlock__grant_pop *p, int wakefd, dlock__mono give_up, const sigset_t *mask);
void dlock__grant_drop(dlock__backend *b, dlock__grant_pop *p);
void dlock__grant_keep(dlock__backend *b, dlock__grant_pop *p);
int dlock__grant_read(dlock__grant_pop *p, uint64_t *fence, unsigned *ms, int *cache, int *nolist);

/* What an acquire attempt found. */
typedef struct dlock__acq {
    int status;        /* DLOCK__ACQ_* */
    uint64_t fence;    /* ACQUIRED, MINE */
    int others;        /* ACQUIRED, MINE of a caching acquire: others wait (keep it not) */
    int64_t pttl_ms;   /* BUSY: the holder's remaining lease, -1 unknown */
    int plain;         /* ACQUIRED on the uncontended path (the lock was free, nobody waited) */
    int unkept;        /* ACQUIRED by one server's pipelined SET: the lock keeps no fence */
    uint64_t floor;    /* BUSY: the lock's last fence when the server answered, 0 not
                        * known: a grant whose fence is above it was made after */
    uint64_t since_ms; /* F_LISTED, in and out: when the call began (this host's wall clock, ms),
                        * its queue entry's since -- 0 in: made from the request's own clock
                        * less age_ms, and given back for the call's next requests */
    unsigned age_ms;   /* in (F_LISTED): how long the call has run */
    unsigned delay_ms; /* in: an exclusive hold's lock-delay, 0 none (acquire.lua) */
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
#define DLOCK__F_PLAIN 128 /* the lock was free at its last acquisition here: one server may try
                            * the pipelined uncontended path (backend.c, plain_acquire) */
#define DLOCK__F_HELD 256  /* the lock was held at its last acquisition here, or this call has
                            * waited: the script may read the holder first (acquire.lua's H) */
#define DLOCK__F_LISTED 512 /* with F_FAIR and F_WAIT: the caller holds nothing; its queue entry
                             * lists its wait, which it never registers (the queue entry's L: release.lua) */
#define DLOCK__F_DETECTS 1024 /* with F_LISTED: its wait detects deadlocks (listed as such) */
/* Redlock only: how far (in fences: ns) a caching hold's local holds may
 * number on past the fence the masters issued it, ~1.07 s.  Redlock
 * raises the fence floor of its masters over all of them (redlock.c);
 * elsewhere a caching hold's local fences follow the server's clock
 * (core/lock.c, cache_fence) and need no block. */
#define DLOCK__FENCE_BLOCK (1ull << 30)

/* How a hold ends on the server (see lua/release.lua). */
enum {
    DLOCK__REL_PLAIN,
    DLOCK__REL_CLEAN,
    DLOCK__REL_INCONSISTENT,
    DLOCK__REL_DEAD,
    DLOCK__REL_SHARED,
    DLOCK__REL_WITHDRAW, /* not a hold: a waiting writer's registration */
    DLOCK__REL_HASH,     /* PLAIN, of a hold known to be the lock hash (taken past the
                          * uncontended path): its release need not look for the string */
    DLOCK__REL_UNDO      /* a robust acquisition taken back unused (its answer came late
                          * or not at all): the marker as it was before it */
};
/* A release's answer when the lock went from it to the wait queue's head
 * (release.lua's grant): released, and a waiter was just woken. */
#define DLOCK__RELEASED_HANDED 2
/* The kind of release for a hold (scripts.c, the one place that decides
 * it): a read hold, of a robust mutex, whose holder died or may have,
 * unlocked after EOWNERDEAD without consistent(); hashed: known to be the
 * lock hash (a plain one is then DLOCK__REL_HASH). */
int dlock__release_kind(int shared, int robust, int dead, int inconsistent, int hashed);
/* The kind that takes back an acquisition whose caller never had the hold
 * (its answer came after the hold's validity, was lost, or lacked the
 * replicas' acknowledgement): DLOCK__REL_UNDO for a robust exclusive one. */
int dlock__undo_kind(int shared, int robust);
/* Administrative resets (see reset.lua). */
enum { DLOCK__RESET_BREAK, DLOCK__RESET_FULL };

/* Replies (reply.c): 0, or -1 for anything but what the script returns. */
int dlock__acq_parse(const redisReply *r, dlock__acq *out);
int dlock__flag_parse(const redisReply *r, int *out); /* integer 0 or 1 */
/* A release's answer: 0 not the token's, 1 released, DLOCK__RELEASED_HANDED. */
int dlock__release_parse(const redisReply *r, int *out);
int dlock__u64_parse(const char *s, size_t n, uint64_t *out);
/* A grant as a release sends it, "FENCE:MS" or, to a caching waiter,
 * "FENCE:MS:C" (s[0..n)): the fence (> 0), the grant's lease in ms
 * (1 .. 2^32-1), and *cache: 0 not a caching grant, 1 its fence block is
 * reserved and nobody else waits, 2 reserved but others wait.  0, or -1
 * if it is not exactly that. */
int dlock__grant_parse(const char *s, size_t n, uint64_t *fence, unsigned *ms, int *cache);
int dlock__info_parse(const redisReply *r, dlock_lock_info_t *out);
/* convert.lua's answer to a request of kind how (DLOCK__CONV_*): 0, or -1. */
int dlock__conv_parse(const redisReply *r, int how, struct dlock__conv *out);

/* One renewal in a batch. */
typedef struct dlock__renewal {
    const dlock__keys *k;
    int shared;
    int unit;   /* a semaphore's unit leased under undo (k: the semaphore's keys, token:
                 * the unit's), renewed by sem.lua's 'renew' in the same batch */
    const char *token;
    unsigned lease_ms;
    uint64_t fence; /* not 0: the hold's fence, which the lock does not keep (one server's
                     * pipelined SET): recorded by this renewal */
    int result; /* out: 1 renewed, 0 refused (not ours), -1 no answer */
    int wanted; /* out: renewed, a cached lock someone asked for (renew.lua's 2) */
    int moved;  /* out: Cluster: the node sent it elsewhere (MOVED, ASK) */
} dlock__renewal;
/* One renewal by itself, by dlock__command (which follows a cluster's
 * redirections); rn->result as in a batch. */
int dlock__renew_one(dlock__backend *c, dlock__renewal *rn, dlock__mono deadline);
/* A batch's requests appended to cn's output (not sent): 0, or ENOMEM;
 * and one answer read into rn (result, wanted): 0, or -1 when it is not
 * a renewal's answer (rn->result -1).  For Redlock's renewal, which
 * sends each master its batch at once (redlock_renew.c). */
int dlock__renew_append(dlock__backend *c, dlock__conn *cn, const dlock__renewal *rn, size_t n);
int dlock__renew_answer(const redisReply *r, dlock__renewal *rn);

/* A list of strings a waits op answered: dlock__strs and
 * dlock__strs_free, exported to the preload (dlock_private.h). */
/* The calling thread's identity as the scripts write it, "host:pid:tid"
 * (self: its identity; the pid and tid dlock__set_who names, if any),
 * into out (cap bytes, at least 320).  Its length. */
size_t dlock__who_get(const dlock__thread *self, char *out, size_t cap);

/* The seam every deployment sits behind: one server now; Sentinel,
 * Cluster and a Redlock quorum later.  Each call returns 0 or an errno
 * value (ENOLCK when the deployment cannot be reached within the bound
 * that `deadline` gives). */
typedef struct dlock__sem_state dlock__sem_state; /* below */
/* A pipelined release's record, the first member of the caller's own:
 * done hears its outcome once, on whichever thread reads the answer --
 * rc 0 and released (1: the token's hold is gone; 2: gone, and the
 * release told a waiter; 0: it was not the token's), ENOLCK (no answer:
 * it may not have run), or -1 (a fork child: the parent's release,
 * nothing to do but free it).  hold: the request is written with the
 * thread's next request (or by the settle), not at once. */
typedef struct dlock__relsend {
    void (*done)(struct dlock__relsend *rs, int rc, int released);
    int hold;
} dlock__relsend;
typedef struct dlock__backend_ops {
    /* 1: the deployment keeps one wait queue per lock, and a release hands
     * the lock to its head (one server; a cluster, per slot).  0: Redlock,
     * whose masters would each keep their own queue; its waiters ask again
     * at every release. */
    int queues;
    /* flags: DLOCK__F_*. */
    int (*acquire)(dlock__backend *c, const dlock__keys *k, const char *token,
                   unsigned lease_ms, int flags, dlock__acq *out, dlock__mono deadline);
    /* *released is 1 when the hold was the token's and is gone, 0 when it
     * was not, DLOCK__RELEASED_HANDED when it was and the lock went to the
     * wait queue's head.  A release also publishes the wake-up for
     * waiters.  how is a DLOCK__REL_*. */
    int (*release)(dlock__backend *c, const dlock__keys *k, const char *token, int how,
                   int *released, dlock__sent *sent, dlock__mono deadline);
    /* Renews n holds in pipelined batches on the renewal connection,
     * giving up on answers at `deadline` (the earliest validity end among
     * them: past it the holds are lost anyway, and the handler must run). */
    int (*renew)(dlock__backend *c, dlock__renewal *r, size_t n, dlock__mono deadline);
    /* Ends every hold of the lock; how is a DLOCK__RESET_*. */
    int (*reset)(dlock__backend *c, const dlock__keys *k, int how, int *was_held, dlock__sent *sent,
                 dlock__mono deadline);
    /* A fenced write of value to key; *written is 0 when refused as stale. */
    int (*fenced_set)(dlock__backend *c, const char *key, size_t keylen, uint64_t fence,
                      const void *value, size_t len, int *written, dlock__mono deadline);
    /* What the server knows of the lock. */
    int (*info)(dlock__backend *c, const dlock__keys *k, dlock_lock_info_t *out, dlock__mono deadline);
    /* A condition variable operation (cond.lua): op is "wait", "check",
     * "withdraw", "signal" or "broadcast"; *result is the script's answer. */
    int (*cond)(dlock__backend *c, const dlock__keys *k, const char *op, const char *token, unsigned ttl_ms,
                const char *const *stale, size_t nstale, long long *result, dlock__mono deadline);
    /* A pooled connection to the server that keeps l's queue (*node: the
     * node whose pool it is), for a waiter's BLPOP on its grant list;
     * NULL where there is no queue. */
    int (*grant_conn)(dlock__backend *c, const dlock__keys *k, dlock__node **node, dlock__conn **cn,
                      dlock__mono deadline);
    /* A semaphore operation (lua/sem.lua): op is "init" (arg: the
     * value; *result 1 made, 0 it existed), "take" (arg 1: queue the token
     * if no unit is free; *result 1 taken, 0 not), "withdraw" (*result 1:
     * a post had handed the token a unit, now taken), "post" (arg: the
     * maximum; *result 1 posted, 0 it would pass the maximum), "return"
     * (token: a unit leased under undo; *result 1 its lease ended and its
     * unit went back as a post's, 2 the lease was already gone) or
     * "value".  ttl_ms: how long a waiter's registration (or a unit handed
     * to it) lasts unless taken or renewed.  lease_ms: with "take" and
     * "withdraw", 0 for a plain unit, else the unit taken is leased that
     * long (undo; `done` in sem.lua).  remake: the value the caller
     * opened the semaphore with, which makes it again if the server lost
     * it (sem.lua's ARGV[10]; a take then answers -N, not 0, while the
     * remade semaphore holds its units back N ms more); -1: not (init).
     * Leases are renewed through `renew` (dlock__renewal.unit).  NULL
     * where a deployment has no semaphores (Redlock: ENOTSUP). */
    int (*sem)(dlock__backend *c, const dlock__keys *k, const char *op, const char *token, unsigned ttl_ms,
               long long arg, unsigned lease_ms, long long remake, long long *result, dlock__sent *sent,
               dlock__mono deadline);
    /* What the server knows of a semaphore (sem_info.lua): at most max
     * people listed; out->people is malloc'ed (free it).  NULL where a
     * deployment has no semaphores. */
    int (*sem_info)(dlock__backend *c, const dlock__keys *k, unsigned max, dlock__sem_state *out,
                    dlock__mono deadline);
    /* Administration of a semaphore (sem_admin.lua), asked once: how
     * DLOCK__SEM_UNLINK (*result 1 deleted, 0 it did not exist) or
     * DLOCK__SEM_BREAK (*result the units taken back, -1 it does not
     * exist) or DLOCK__SEM_EXPIRE / DLOCK__SEM_KEEP (*result on entry:
     * the expiry in ms; on return 1 set, 0 KEEP of one without an
     * expiry, -1 it does not exist).  NULL where a deployment has no
     * semaphores. */
    int (*sem_admin)(dlock__backend *c, const dlock__keys *k, int how, long long *result, dlock__sent *sent,
                     dlock__mono deadline);
    /* Who waits for whom (lua/waits.lua; the core's deadlock.c).
     * On k's slot (its lock key and <key>:waiting, :wmeta, :readers):
     * op "note" registers or refreshes the wait `id` (its record rec,
     * "AGE|host:pid:tid|mode|detect", AGE the ms it has waited, for
     * ttl_ms; *out {since}: server ms when it began, by its first
     * registration),
     * "drop" withdraws it, "holders" gives {the writer's token or "", the
     * live readers' tokens...}, "list" {the server's ms, each live
     * waiter's "since|rec"...}.  k NULL: on the edge key of the holder
     * token id, <prefix>dlw:{<id>} (its own slot): "eset" writes rec for
     * ttl_ms, "eget" gives {rec} or {}, "edel" deletes it if it still
     * begins with rec.  *out is made with malloc (dlock__strs_free); NULL
     * where a deployment keeps no waiters (Redlock). */
    int (*waits)(dlock__backend *c, const dlock__keys *k, const char *op, const char *id, const char *rec,
                 unsigned ttl_ms, dlock__strs *out, dlock__mono deadline);
    /* Live figures (stats.lua; the layout: docs/protocol.md, "Live
     * figures").  _add: adds one flush's payload (stats.c makes it) to
     * the server's figures of the current second; _read: the busiest
     * `max` locks of the last window_s seconds into out (*n of them).
     * NULL where a deployment keeps none (Redlock: its clients' figures
     * are not flushed, and `dlock top` shows none). */
    int (*stats_add)(dlock__backend *c, const char *payload, size_t len, dlock__mono deadline);
    int (*stats_read)(dlock__backend *c, unsigned window_s, struct dlock__figs *out, size_t max, size_t *n,
                      dlock__mono deadline);
    /* A request on the record-lock range table of k's name,
     * <prefix>{<name>}:rl (lua/range.lua: args are its ARGV, nargs
     * of them); *out its answer (dlock__strs_free).  NULL where a
     * deployment keeps none (Redlock). */
    int (*range)(dlock__backend *c, const dlock__keys *k, int nargs, const char *const *args, dlock__strs *out,
                 dlock__mono deadline);
    /* The pipelined release (NULL: the deployment has none): sent at
     * once (or held: rs->hold), its answer read later, told to rs->done
     * (dlock__relsend), which hears whether it told a waiter.  0 sent, or
     * ENOLCK (not sent: rs->done is not called). */
    int (*release_send)(dlock__backend *c, const dlock__keys *k, const char *token, int how,
                        struct dlock__relsend *rs, dlock__mono deadline);
    /* The lock value block as the server keeps it: *len bytes into buf
     * (cap at least DLOCK_LVB_MAX), *valid 1 or 0, or -1 (and *len 0)
     * when the lock has none.  NULL: not offered (Redlock). */
    int (*lvb_read)(dlock__backend *c, const dlock__keys *k, void *buf, size_t *len, int *valid,
                    dlock__mono deadline);
    /* Lock conversion (lua/convert.lua): the hold of token, of lease_ms,
     * changes kind; how is a DLOCK__CONV_*.  NULL where a deployment
     * cannot convert atomically (Redlock: ENOTSUP). */
    int (*convert)(dlock__backend *c, const dlock__keys *k, const char *token, unsigned lease_ms, int how,
                   struct dlock__conv *out, dlock__mono deadline);
} dlock__backend_ops;

/* What a conversion found (convert.lua's answer). */
typedef struct dlock__conv {
    int status;      /* DLOCK__CONV_DONE, _BUSY, _DEADLK, _NOTHELD */
    uint64_t fence;  /* DONE of an upgrade: the write hold's fence */
    int64_t ms;      /* BUSY: ask again within about this long */
} dlock__conv;
enum { DLOCK__CONV_UP, DLOCK__CONV_DOWN, DLOCK__CONV_CANCEL };
enum { DLOCK__CONV_DONE, DLOCK__CONV_BUSY, DLOCK__CONV_DEADLK, DLOCK__CONV_NOTHELD };

/* What sem_info reads (seminfo.c parses it): the public summary and the
 * people, waiters first (in queue order, those handed a unit first), then
 * units leased under undo (by lease expiry). */
struct dlock__sem_state {
    dlock_sem_info_t info;
    dlock_sem_owner_t *people;
    size_t npeople;
};
enum { DLOCK__SEM_UNLINK, DLOCK__SEM_BREAK, DLOCK__SEM_EXPIRE, DLOCK__SEM_KEEP };
/* The single-server sem_info and sem_admin ops (seminfo.c), which a
 * Cluster runs on the slot's master. */
/* One server's lvb_read (lvb.c). */
int dlock__single_lvb_read(dlock__backend *c, const dlock__keys *k, void *buf, size_t *len, int *valid,
                           dlock__mono deadline);
int dlock__single_sem_info(dlock__backend *c, const dlock__keys *k, unsigned max, dlock__sem_state *out,
                           dlock__mono deadline);
int dlock__single_sem_admin(dlock__backend *c, const dlock__keys *k, int how, long long *result,
                            dlock__sent *sent, dlock__mono deadline);
/* sem_info.lua's answer as a dlock__sem_state: 0, -1 for anything else,
 * -2 out of memory (nothing is kept). */
int dlock__sem_info_parse(const redisReply *r, dlock__sem_state *out);

extern const dlock__backend_ops dlock__single_backend;
/* dlock__set_who (backend.c), the holder identity this process writes
 * with its locks, is declared in dlock_private.h: the preload's keeper
 * names the program it serves. */

/* The arguments of one script call (keys first), with the buffers they
 * point into: what the single-server backend sends, which Redlock sends
 * to every master at once. */
typedef struct dlock__args {
    const char *v[24];
    size_t len[24];
    int nkeys, n;
    /* ident: "SINCE host:pid:tid" (acquire) or "HOW WINDOW host:pid:tid"
     * (release); flags: an acquire's "RWQC", H, L and since (backend.c) */
    char lease[16], guard[16], delay[16], ident[352], flags[32];
    uint64_t wall; /* an exclusive acquire's: the request's wall clock, ms (its SINCE) */
} dlock__args;
/* Returns the script (DLOCK__SCRIPT_ACQUIRE or _SHARED). */
int dlock__acquire_args(dlock__backend *c, const dlock__keys *k, const char *token, unsigned lease_ms, int flags,
                        unsigned delay_ms, dlock__args *a);
/* Appends to the flags of an exclusive acquire's args (flags: its F_*)
 * whose queue entry lists the wait (F_LISTED) the digits of when its
 * call began: io->since_ms, or, when 0, the request's clock less
 * io->age_ms, given back in io->since_ms.  Once, and only for a request
 * that runs the script (the pipelined path sends no flags). */
void dlock__acquire_since(dlock__args *a, int flags, dlock__acq *io);
void dlock__release_args(dlock__backend *c, const dlock__keys *k, const char *token, int how, dlock__args *a);
/* Runs the script on the servers of n members at once (Redlock): every
 * request is written before any answer is read; it returns once `need`
 * answered (flags and the late ones: dlock__command_all).  out[i] the
 * answer (to be freed) or NULL with rcs[i] the error. */
void dlock__script_run_all(dlock__backend **cs, size_t n, size_t need, const dlock__all_judge *judge, int flags,
                           int which, redisReply **out, int *rcs, dlock__mono deadline, int numkeys, int nargs,
                           const char **args, const size_t *lens);
extern const dlock__backend_ops dlock__redlock_backend;
/* Redlock: on every new connection of a master m, reads the server's run
 * id (INFO server); a server that another master of the deployment is
 * too (confirmed on a fresh connection to that one) is refused for good
 * (dlock__node_refuse, as a refused certificate): ENOLCK with the
 * message set, and the deployment's rl_dups moves.  0 also when the server does not say
 * (INFO refused by an ACL).  ENOLCK when the connection failed. */
int dlock__redlock_identify(dlock__backend *m, dlock__conn *cn);
extern const dlock__backend_ops dlock__cluster_backend;
/* What a member's node (whose `up` is that member) asks of its
 * deployment: a Redlock master identifies its server
 * on every new connection (dlock__redlock_identify); a Cluster node's
 * answers may redirect (dlock__cluster_redirect). */
extern const dlock__node_hooks dlock__redlock_hooks;
extern const dlock__node_hooks dlock__cluster_hooks;

/* Redis Cluster (cluster.c).  The hash slot of a key, as the cluster
 * computes it (hash tags honoured). */
unsigned dlock__key_slot(const char *key, size_t len);
/* m (a cluster node's member) answered r.  A MOVED or ASK redirection
 * updates the slot map: 1 with *next the node to ask and *asking set for
 * ASK; 0 when r is no redirection (or names no usable node). */
int dlock__cluster_redirect(dlock__backend *m, const redisReply *r, dlock__backend **next, int *asking);
/* The masters of the cluster, from a map read now: up to max members
 * into out, their number in *count.  0, or an errno value (error set). */
int dlock__cluster_masters(dlock__backend *c, dlock__backend **out, size_t max, size_t *count,
                           dlock__mono deadline);
/* The member of the master serving `slot` as the map has it (the first
 * member when it does not know), NULL if c is no cluster.  c's mutex
 * held. */
dlock__backend *dlock__cluster_node(dlock__backend *c, unsigned slot);
/* Reads the slot map again unless that was done within the last 50 ms
 * (the last error is kept).  c's mutex NOT held. */
void dlock__cluster_refresh_maybe(dlock__backend *c, dlock__mono deadline);
/* Frees the cluster state of a deployment. */
void dlock__cluster_free(dlock__backend *c);

/* Live figures: one lock's, as read from the server (stats_read).  The
 * histograms count waits and holds by bucket of their length in µs
 * (stats.c: dlock__stats_bucket and its inverse). */
#define DLOCK__STAT_NB 128
typedef struct dlock__figs {
    char name[DLOCK_NAME_MAX + 1];
    uint64_t acq;                   /* holds begun */
    uint64_t rel;                   /* holds ended (the hold histogram's count) */
    uint64_t lost, dead;            /* holds lost, EDEADLK answers: counters that only grow */
    uint64_t risk;                  /* lease-at-risk warnings told: a counter too */
    uint64_t wait[DLOCK__STAT_NB];  /* from the lock call's start to the hold */
    uint64_t hold[DLOCK__STAT_NB];  /* from the hold to its unlock */
    /* The cumulative histograms (fields W<i>, H<i>, WS, HS): counters by
     * bucket of DLOCK_STATS_BOUNDS_MS, and the sums in µs. */
    uint64_t wcum[DLOCK_STATS_BUCKETS], hcum[DLOCK_STATS_BUCKETS];
    uint64_t wsum, hsum;
} dlock__figs;
/* The key every figure's name starts with: <prefix>{dlock-stats}
 * (one cluster slot), made with malloc. */
char *dlock__stats_key(const dlock__backend *c);
/* Fills out from a stats.lua "read" answer: 0, or -1. */
int dlock__figs_parse(const redisReply *r, dlock__figs *out, size_t max, size_t *n);
/* One server's stats_add and stats_read ops (figures.c). */
int dlock__single_stats_add(dlock__backend *c, const char *payload, size_t len, dlock__mono deadline);
int dlock__single_stats_read(dlock__backend *c, unsigned window_s, dlock__figs *out, size_t max, size_t *n,
                             dlock__mono deadline);
/* An answer that is not what a script returns: EPROTO with the server's
 * words (an ACL's refusal named), and c's idle connections dropped, for
 * they may be out of step (backend.c). */
int dlock__bad_reply(dlock__backend *c, const char *what, const redisReply *r);

/* Scripts (scripts.c): one row each, X(ID, FILE), for DLOCK__SCRIPT_ID
 * whose body is src/backend/lua/FILE.lua (KEYS, ARGV and the reply at its
 * top).  A new script is its .lua file and a row here. */
#define DLOCK__SCRIPTS(X)             \
    X(ACQUIRE, acquire)               \
    X(ACQUIRE_SHARED, acquire_shared) \
    X(RELEASE, release)               \
    X(RENEW, renew)                   \
    X(RESET, reset)                   \
    X(FENCED_SET, fenced_set)         \
    X(INFO, info)                     \
    X(COND, cond)                     \
    X(FENCE_RAISE, fence_raise)       \
    X(SEM, sem)                       \
    X(SEM_INFO, sem_info)             \
    X(SEM_ADMIN, sem_admin)           \
    X(WAITS, waits)                   \
    X(STATS, stats)                   \
    X(FENCE_NEXT, fence_next)         \
    X(RANGE, range)                   \
    X(CONVERT, convert)
#define DLOCK__SCRIPT_ENUM(id, file) DLOCK__SCRIPT_##id,
enum { DLOCK__SCRIPTS(DLOCK__SCRIPT_ENUM) DLOCK__NSCRIPTS };
#undef DLOCK__SCRIPT_ENUM
/* A script's body; variant 1: a cluster's (SPUBLISH). */
const char *dlock__script_body(int which, int variant);
/* Its SHA1, for an EVALSHA sent in a pipeline; "" when it could not be
 * made (that EVALSHA then gets NOSCRIPT). */
const char *dlock__script_sha(int which, int variant);
/* Runs script `which` by EVALSHA, loading it on NOSCRIPT: args holds
 * nargs values in all, the first numkeys of them KEYS, the rest ARGV. */
/* The same, with WAIT for the deployment's wait=N replicas after it. */
int dlock__script_run_wait(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                           int nargs, const char **args, const size_t *lens, long long *acked, dlock__sent *sent);
int dlock__script_run(dlock__backend *c, int which, redisReply **out, dlock__mono deadline, int numkeys,
                      int nargs, const char **args, const size_t *lens, dlock__sent *sent);
/* Sends script `which` by EVALSHA with its answer owed (dlock__command_send;
 * hold: written with the thread's next request). */
int dlock__script_send(dlock__backend *c, int which, int numkeys, int nargs, const char **args, const size_t *lens,
                       int hold, dlock__owed_fn fn, void *arg, dlock__mono deadline);
/* Appends an EVALSHA to a context's output buffer (pipelining). */
int dlock__script_append(redisContext *ctx, int which, int variant, int numkeys, int nargs,
                         const char **args, const size_t *lens);
/* Appends a SCRIPT LOAD of script `which` (its whole body) to a
 * context's output buffer: 0, or -1. */
int dlock__script_load_append(redisContext *ctx, int which, int variant);
/* SCRIPT LOAD of every script on cn, pipelined (one round trip): 0; -1
 * when one was refused (cn still in step); -2 when cn failed (drop it). */
int dlock__script_load_all(dlock__conn *cn, int variant);

#endif /* DLOCK_BACKEND_H */
