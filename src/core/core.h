/* core.h -- the lock core: clients and their lock table (client.c), holds
 * (their state: hold.c), the acquisition state machine (lock.c) and its
 * twin, the release (release.c), waiting (wait.c), release notifications
 * (notify.c), lease renewal (renew.c) and holds nobody here knows of
 * (orphan.c). */
#ifndef DLOCK_CORE_H
#define DLOCK_CORE_H

#include "backend/backend.h"

/* ----------------------------------------------------------- lock table */


struct dlock__lock;

/* A hold's state (hold.c has the transitions).  NONE is 0: a zeroed hold
 * is no hold. */
enum dlock__hold_state { DLOCK__HOLD_NONE, DLOCK__HOLD_HELD, DLOCK__HOLD_CACHED, DLOCK__HOLD_LOST };

/* One hold of a lock by one thread of this process: exclusive (a mutex, a
 * write lock) or shared (a read lock).  The renewal thread renews holds;
 * the fence identifies a hold, so an answer about an earlier hold is never
 * applied to a later one.  Guarded by the client's mutex. */
typedef struct dlock__hold {
    struct dlock__lock *l;
    int state;             /* enum dlock__hold_state: written only in hold.c */
    dlock__thread *owner;  /* who holds it (NULL: no thread; hold.c writes it) */
    char token[DLOCK__OWNER_LEN + 1];
    int shared;
    unsigned count;        /* recursion depth */
    uint64_t fence;        /* fencing token */
    uint64_t ident;        /* the fence the server issued: the hold's identity */
    int caching;           /* of a caching mutex: an unlock may keep it (lock.c) */
    uint64_t fence_hi;     /* caching: the last fence its local holds may use (Redlock's
                            * floor; elsewhere no bound: UINT64_MAX) */
    dlock__mono fence_at;  /* caching: when the server's fence (ident) was heard */
    uint64_t ends;         /* caching: its holds ended into the cache (unlocks that asked
                            * the server nothing) */
    uint64_t ends_seen;    /* of those, the ones a renewal sent after them confirmed: the
                            * others were not exclusive if the server lost the lock (hold.c) */
    uint64_t heard;        /* caching: the subscriber's epoch in which every request
                            * for it was heard since it was acquired; 0: not so */
    unsigned lease_ms;
    dlock__mono acquired;    /* when the acquire was sent */
    dlock__mono valid_until; /* sent + lease - drift; extended by renewals */
    dlock__mono renew_at;    /* next renewal */
    dlock__mono retry_at;    /* after one that got no answer: not again before then */
    int releasing;           /* its unlock is on the way: still renewed, never reported lost (hold.c) */
    int robust;              /* the hold is of a ROBUST mutex */
    int fence_unkept;        /* taken by one server's pipelined SET, whose string keeps no
                              * fence: its next renewal records it (renew.c) */
    int hashed;              /* exclusive, taken past the uncontended path: the lock hash,
                              * which stays one while this token holds it (its release
                              * need not look for the string: DLOCK__REL_HASH) */
    dlock__mono held_since;  /* when the caller's hold began (stats.c), for its hold time */
    int inconsistent;        /* EOWNERDEAD given, consistent() not yet called (hold.c) */
    dlock_lost_fn lost_fn;   /* the lost-lock handler and its arguments */
    void *lost_arg;
    void *lost_obj;          /* the object (dlock_mutex_t *, a unit's dlock_sem_t *) given to it */
    dlock_risk_fn risk_fn;   /* the lease-at-risk handler (renew.c), its argument and margin */
    void *risk_arg;
    unsigned risk_margin_ms;
    int at_risk;             /* told DLOCK_LEASE_AT_RISK, no renewal since (renew.c) */
    /* A semaphore's unit leased to the process under undo (sem.c): HELD
     * or LOST (never cached nor owned by a thread), on its lock's `units`,
     * renewed by sem.lua; its handler is sem_lost_fn (lost_fn stays
     * NULL). */
    int unit;
    dlock_sem_lost_fn sem_lost_fn;
    struct dlock__hold *held_next, *held_prev; /* client's list of live holds */
    struct dlock__hold *next; /* the lock's list of shared holds (or leased units) */
} dlock__hold;

/* The state of one lock name in one client: shared by every object of that
 * name in the process (mutexes, rwlocks), by its waiters, the renewal
 * thread and the subscriber.  All fields are guarded by the client's
 * mutex. */
typedef struct dlock__lock dlock__lock;

struct dlock__lock {
    dlock__keys k;   /* its name and its keys on the server */
    struct dlock__lstat *stat; /* its figures since the last flush (stats.c); NULL: none yet */
    int kind;        /* DLOCK__KIND_LOCK, _COND or _SEM */
    unsigned objrefs; /* objects naming this lock */
    unsigned users;   /* calls in flight that use it without the mutex held */

    dlock__hold x;         /* the exclusive hold, if a local thread has one */
    dlock__hold *readers;  /* shared holds of local threads */
    dlock__hold *units;    /* a semaphore's units leased to this process (undo), live
                            * and lost (until a post or the client's end forgets them) */
    struct dlock__sem_undo *undos; /* a semaphore's takes whose answer was lost
                                    * (core/sem.c): undone by their thread's next op */

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
    /* The pipelined unlock holds its release back for the thread's next
     * request only while no other owner was seen to want the lock since
     * this time (release.c, dlock__pipe_contended); seen once more, the
     * quiet period doubles (pipe_strikes). */
    dlock__mono pipe_quiet_until;
    unsigned pipe_strikes;
    int contended;      /* 1 its last answer here was "held" (the next call says so:
                         * DLOCK__F_HELD), 2 none came yet: either way the next call
                         * asks the script at once, not the pipelined uncontended path
                         * first (DLOCK__F_PLAIN); 0 once an answer came from an
                         * uncontended path */
    pthread_cond_t cv;  /* CLOCK_MONOTONIC; broadcast on every change */
    struct dlock__sleeper *sleepers; /* interruptible sleepers (wait.c) */
    int sub_state;      /* DLOCK__SUB_* */
    struct dlock__sub *sub_node; /* the subscriber that carries the channel (notify.c) */
    /* A condition variable's registrations this process could not take
     * back (cond.c): removed with its next operation. */
    char (*stale)[DLOCK__OWNER_LEN + 1]; /* DLOCK__COND_STALE_MAX, made when needed */
    unsigned nstale;
    dlock__mono sub_idle_since;
    dlock__mono sub_sent_at; /* when its SUBSCRIBE went out (notify.c: Redlock's SUB_CONFIRM_MS) */
    dlock__mono sub_tried_since; /* when its first SUBSCRIBE not yet confirmed went out, 0 none
                                  * (dlock__sub_give_up) */

    struct dlock__lock *hnext; /* hash chain */
};

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
    int cache; /* a caching waiter's grant: 1 its fence block reserved, 2 and others wait */
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

/* What a table entry is: a lock (mutex, rwlock), a condition
 * variable, whose only key is its waiters at <prefix>{<name>}:cond, or a
 * semaphore (sem.c; its keys DLOCK__KS_*, its channel that of its value
 * <prefix>{<name>}:sem, its waiters on l->fair as a fair mutex's). */
enum { DLOCK__KIND_LOCK, DLOCK__KIND_COND, DLOCK__KIND_SEM };

/* Subscription to the lock's release channel: NONE -> WANTED (a waiter
 * asked) -> SENT (SUBSCRIBE written) -> ACTIVE (confirmed) -> UNSENT
 * (UNSUBSCRIBE written after the linger time) -> NONE. */
enum { DLOCK__SUB_NONE, DLOCK__SUB_WANTED, DLOCK__SUB_SENT, DLOCK__SUB_ACTIVE, DLOCK__SUB_UNSENT };

/* --------------------------------------------------------------- client */

/* A subscriber: one thread and connection listening to one server's
 * release channels for the locks of one client's table: the client's own
 * server, or (Redis Cluster, whose sharded channels are heard only on the
 * slot's master) one node of its cluster (notify.c).  Guarded by the
 * client's mutex. */
typedef struct dlock__sub {
    dlock__backend *b;      /* the server it listens to */
    struct dlock_client *c; /* the client whose table it serves */
    int running, stop;
    pthread_t thread;
    int wakefd;             /* eventfd that pokes it (-1: none yet) */
    int connected;
    dlock__conn *conn;      /* owned by its thread */
    uint64_t epoch;         /* bumped at every (re)connection and loss */
    dlock__mono down_since; /* 0 when up or unneeded */
    int sleeping;           /* its thread waits in phase 3 (I/O), c->mu dropped, */
    dlock__mono wake_by;    /* until then at the latest (DLOCK__MONO_NEVER: until woken) */
} dlock__sub;

struct dlock_client {
    dlock__backend be; /* its deployment (be.node: the server, its pool, TLS and breaker) */
    pthread_mutex_t mu;   /* guards everything below and every dlock__lock */
    unsigned objects;     /* live mutex objects using this client */

    /* Lock table: name -> dlock__lock. */
    dlock__lock **buckets;
    size_t nbuckets, nlocks;

    /* Tokens the server may hold a key under that no hold here has. */
    struct dlock__orphan *orphans;
    unsigned orphan_pass;

    /* Holds of threads of this process, for renewal and exit. */
    dlock__hold *held;
    size_t nheld;

    /* Renewal thread. */
    int renew_running, renew_stop;
    pthread_t renew_thread;
    pthread_cond_t renew_cv;
    dlock__mono renew_wake;  /* when the sleeping renewal thread wakes; 0 awake */
    dlock__mono renew_soon;  /* the earliest hold due that came while it was awake; 0 none */
    dlock__mono renew_idle_until; /* keep ticking, with no holds, until then */
    dlock__mono renew_tick;  /* ...every this long (a sixth of the last lease) */
    unsigned pipe_out;       /* pipelined releases whose answer is not read yet (release.c) */
    dlock__mono pipe_tick_until; /* the renewal thread reads their answers every DLOCK__PIPE_SETTLE_MS until then */
    dlock__mono pipe_held_at;    /* when the last release held back was (release.c) */
    struct dlock__pending *renew_pend; /* its batch buffers, renew_cap long */
    dlock__renewal *renew_rn;
    struct dlock__lost_report *renew_reps;
    size_t renew_cap;

    /* Subscriber: its own server's (a cluster's nodes have theirs). */
    struct dlock__sub sub;

    unsigned char nonce[DLOCK__TOKEN_HEX / 2]; /* random: mixed into owner tokens */
    int nonce_set;                             /* nonce drawn (at the first token; atomic, set under mu) */

    struct dlock_client *next; /* all clients, for fork and exit */
    int is_default;
    unsigned listing; /* acquire calls holding a place to wait in BLPOP (dlock__fairwait.listing) */
    unsigned dropping; /* cached holds being given back (dlock__cache_drop), off the held list */

    /* Live figures (stats.c). */
    int stats_off;                   /* DLOCK_STATS=0: nothing recorded */
    struct dlock__lstat *stats_dirty; /* figures recorded since the last flush */
    dlock__mono stats_next;          /* the next flush, not before then */
};

/* Frees l if no object, call, hold, waiter or subscription uses it. */
void dlock__lock_maybe_free(struct dlock_client *c, dlock__lock *l);
dlock__lock *dlock__lock_find(struct dlock_client *c, const char *name, size_t namelen, int kind);
/* Checks name, finds the client (*cp; NULL: the default) and takes a
 * reference on the entry of that name and kind, counting an object on the
 * client if `object`; its twin gives both back.  c->mu NOT held. */
int dlock__entry_open(struct dlock_client **cp, const char *name, int kind, int object, dlock__lock **lp);
void dlock__entry_close(struct dlock_client *c, dlock__lock *l, int object);

/* Holds: adds/removes h to/from the renewal list.  c->mu held. */
void dlock__held_add(struct dlock_client *c, dlock__hold *h);
void dlock__held_remove(struct dlock_client *c, dlock__hold *h);

/* Renewal thread (renew.c).  Start with c->mu held; it is idempotent.
 * Ahead: started before the client's first hold (c->mu NOT held). */
int dlock__renew_start(struct dlock_client *c);
void dlock__renew_ahead(struct dlock_client *c);
void dlock__renew_kick(struct dlock_client *c);
void dlock__renew_due(struct dlock_client *c, dlock__mono at);
void dlock__renew_stop(struct dlock_client *c);

/* Subscriber (notify.c).  Asks for a subscription to l's channel and
 * pokes the subscriber thread.  c->mu held. */
int dlock__notify_want(struct dlock_client *c, dlock__lock *l);
void dlock__notify_poke(struct dlock_client *c);
/* l's last local waiter left (l->sub_idle_since set, c->mu held): its
 * subscriber starts the lingering channel's clock. */
void dlock__notify_idle(struct dlock_client *c, dlock__lock *l);
/* Is l's channel subscribed on a live connection; the epoch of the
 * connection that carries it (unique in the process).  c->mu held. */
int dlock__sub_live(const struct dlock_client *c, const dlock__lock *l);
/* When a waiter may take l's channel (wanted, not live) as one that cannot
 * be made live (ENOLCK): unreachable_ms after its subscriber began to try
 * (its first SUBSCRIBE for it unconfirmed, or its connection attempts
 * failing), and not while its first SUBSCRIBE is within its command
 * timeout.
 * DLOCK__MONO_NEVER while the subscriber has not tried yet.  c->mu held. */
dlock__mono dlock__sub_give_up(const struct dlock_client *c, const dlock__lock *l);
uint64_t dlock__sub_epoch(const struct dlock_client *c, const dlock__lock *l);
void dlock__notify_stop(struct dlock_client *c);

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
/* A tick made during a wait (the wait-for graph's: lock.c): 0, or an
 * error that ends the wait; *due: when the next is.  c->mu held. */
typedef struct dlock__tick {
    int (*fn)(void *arg, dlock__mono *due);
    void *arg;
    dlock__mono due; /* the first (DLOCK__MONO_NEVER: none) */
} dlock__tick;
/* The same, blocked in BLPOP on the waiter's grant list: 0 granted
 * (fw->granted) or poked, ETIMEDOUT, EINTR (intr), or EAGAIN: the list
 * could not be used (fw->nolist is set; c->grant_nolist too if the
 * server refuses BLPOP), or what a tick returned.  The thread waits for
 * the server's answer no later than the caller's deadline (a little past
 * until, else); the ticks due before then (tick: NULL, none) are made
 * while the BLPOP stays pending, which the thread then awaits again.
 * c->mu held. */
int dlock__wait_grant(struct dlock_client *c, dlock__lock *l, dlock__fairwait *fw, dlock__mono until,
                      dlock__mono deadline, int intr, dlock__tick *tick);
/* Before a queued waiter's request (c->mu held): may it wait for its
 * grant in BLPOP (dlock__wait_grant)?  Where it queues (queued), the
 * backend can, the server has not refused BLPOP and this call's list
 * was not given up (fw->nolist), while the client has a place for it
 * (conf.wait_conns; fw->listing holds one, counted in c->listing and
 * given back here when it may not, or by dlock__fair_leave).  The
 * others hear of their grant on the release channel. */
int dlock__fair_listing(struct dlock_client *c, dlock__fairwait *fw, int queued);
/* The wait fw ends (c->mu held): off l->fair, its place on a grant list
 * given back, its condition variable destroyed. */
void dlock__fair_leave(struct dlock_client *c, dlock__lock *l, dlock__fairwait *fw);
/* Pokes l's fair waiter whose token is token[0..len), or every one
 * (token NULL), and wakes it.  c->mu held. */
void dlock__fair_poke(dlock__lock *l, const char *token, size_t len);
/* The same for a grant: the lock is that waiter's, with that fence,
 * leased for grant_ms. */
void dlock__fair_grant(dlock__lock *l, const char *token, uint64_t fence, unsigned grant_ms, int cache);
/* Makes sure a release of l will wake us: subscribes and waits for the
 * subscription to be active, or until deadline / the unreachable bound,
 * the waiter's own and its subscriber's (ENOLCK: dlock__sub_give_up). */
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
    dlock_sem_lost_fn sem_fn; /* a semaphore's leased unit: its handler (fn NULL); obj a dlock_sem_t * */
    dlock_risk_fn risk_fn;    /* not a loss: the lease at risk or recovered (event, left_ms) */
    int event;
    unsigned left_ms;
};
/* Runs rep's handler (if any) with dlock_lost_reason() telling why. */
void dlock__lost_run(const struct dlock__lost_report *rep);
typedef struct dlock__lost_report dlock__lost_report;
/* Runs rep's handler, then frees its name: outside the client's mutex
 * (lock.c). */
void dlock__report(dlock__lost_report *rep);

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
    int deadlock;      /* a wait looks for a cycle it closes (deadlock.c): EDEADLK */
    int pipelined;     /* a mutex's pipelined unlock: sent, its answer read later (release.c) */
    unsigned lease_ms;
    unsigned delay_ms; /* an exclusive hold's lock-delay (acquire.lua): 0 none */
    dlock_lost_fn lost_fn; /* the lost-lock handler for the hold */
    void *lost_arg;
    void *lost_obj;
    dlock_risk_fn risk_fn; /* the lease-at-risk handler for the hold, its argument and margin */
    void *risk_arg;
    unsigned risk_margin_ms;
    /* A semaphore's (sem.c): each unit taken is leased to the process for
     * lease_ms (undo), and its loss told to sem_lost_fn (with lost_arg,
     * lost_obj); intr as above. */
    int undo;
    dlock_sem_lost_fn sem_lost_fn;
    unsigned sem_value; /* the value the object opened it with: makes it again if the server lost it */
} dlock__want;
/* Deadlock detection (deadlock.c; docs/design.md, "Deadlock detection").
 * One waiting call's part.  A thread that holds locks while it waits (it
 * may close a cycle) registers its wait on the lock's slot and its edge on
 * each of its holds' tokens once it has waited DLOCK__DL_REG_MS
 * (DLOCK__DL_LOCAL_MS for a wait on a thread of its own process, which
 * asked the server nothing), refreshed every DLOCK__DL_TICK_MS (a record
 * not refreshed for DLOCK__DL_TTL_MS lapses); with detection on it walks
 * the graph at each tick, and EDEADLK ends its wait once two walks, the
 * second after every other member refreshed its record, saw the same
 * cycle with it as the victim.  A thread that holds nothing (a leaf: it
 * cannot be in a cycle) is only listed: registered once it has waited
 * DLOCK__DL_LEAF_MS (a wait shorter than that, as a contended handoff's,
 * costs no request for it; DLOCK__DL_LEAF_LOCAL_MS for a local wait), for as
 * long as that sleep may last plus DLOCK__DL_LEAF_MARGIN_MS (at least
 * DLOCK__DL_LEAF_TTL_MS), and refreshed, cutting a sleep short, only when
 * a sleep would outlast that. */
#define DLOCK__DL_REG_MS 50
#define DLOCK__DL_LOCAL_MS 250
#define DLOCK__DL_TICK_MS 250
#define DLOCK__DL_TTL_MS 1500
#define DLOCK__DL_LEAF_MS 50
#define DLOCK__DL_LEAF_LOCAL_MS 2000
#define DLOCK__DL_LEAF_TTL_MS 30000
#define DLOCK__DL_LEAF_MARGIN_MS 10000
#define DLOCK__DL_TOKS 16 /* the thread's holds a cycle is looked for through */
typedef struct dlock__dl {
    int on;              /* detection is on for this wait: it walks */
    int started;         /* the call waits: ticks are due */
    int reg;             /* registered on the server (to withdraw) */
    int granted;         /* a release granted the call the lock and withdrew its registration */
    int inq;             /* a leaf whose fair-queue entry lists its wait (F_LISTED): it registers
                          * nothing, and a grant withdraws nothing of it */
    dlock__mono next;    /* the next tick */
    dlock__mono begun;   /* when the call began: its wait's since is that */
    long long since;     /* its registration's server ms */
    unsigned n;          /* its records' refresh count */
    char regid[DLOCK__OWNER_LEN + 1]; /* its id: the call's token when it registered */
    size_t ntoks;        /* the tokens of the thread's holds its edges are on */
    char toks[DLOCK__DL_TOKS][DLOCK__OWNER_LEN + 1];
    char who[320];       /* host:pid:tid */
    char *ref, *refn;    /* the last walk's cycle (signature, refresh counts), or NULL */
} dlock__dl;
/* The call begins to wait (again: nothing): the tokens of its thread's
 * holds are noted, and its first tick set (local: it waits for a thread
 * of its own process; begun: when the call began, which its registration
 * gives as its since).  c->mu held. */
void dlock__dl_start(struct dlock_client *c, dlock__dl *d, int on, int local, dlock__mono begun);
/* When the next tick is due (DLOCK__MONO_NEVER: none). */
dlock__mono dlock__dl_due(const dlock__dl *d);
/* The calling thread holds no live lock on c: a wait of it is a leaf of
 * the wait-for graph.  c->mu held. */
int dlock__dl_leaf(struct dlock_client *c);
/* A tick (when due): registers or refreshes the wait for l as the call
 * with token regid (shared: a read lock; until: the end of the sleep that
 * follows), and walks when detection is on.  0, or EDEADLK (the message
 * set): this wait is a confirmed cycle's victim.  c->mu held, released
 * meanwhile. */
int dlock__dl_tick(struct dlock_client *c, dlock__lock *l, const char *regid, int shared, dlock__mono until,
                   dlock__dl *d);
/* The call was granted the lock by a release under token: its
 * registration went with the grant. */
void dlock__dl_granted(dlock__dl *d, const char *token);
/* The wait ends: its records are withdrawn.  c->mu held, released
 * meanwhile; the thread's error message stays. */
void dlock__dl_end(struct dlock_client *c, dlock__lock *l, dlock__dl *d);

/* Acquires l for the calling thread: try (one round trip at most) or
 * wait until `deadline` (monotonic; NEVER for none).  bad_deadline: the
 * EINVAL to give if the call would have to wait. */
int dlock__acquire(struct dlock_client *c, dlock__lock *l, const dlock__want *w, int try,
                   dlock__mono deadline, int bad_deadline);
/* Lock conversion (convert.c): the calling thread's read hold of l
 * becomes its write hold, waiting until `deadline` (monotonic; NEVER:
 * none; bad_deadline: the EINVAL to give if it would wait) for the other
 * readers to leave -- EDEADLK when another reader is upgrading, EPERM
 * with no read hold, ENOTSUP on Redlock; or its write hold becomes a read
 * hold (EPERM with none).  c->mu NOT held. */
int dlock__upgrade(struct dlock_client *c, dlock__lock *l, dlock__mono deadline, int bad_deadline);
int dlock__downgrade(struct dlock_client *c, dlock__lock *l);
/* Ends the calling thread's exclusive hold (or, allow_shared, its read
 * hold) of l. */
int dlock__release(struct dlock_client *c, dlock__lock *l, int allow_shared);
/* A pipelined release's answer is read with the thread's next request on
 * its connection, else by the renewal thread once it is this old (ms). */
#define DLOCK__PIPE_SETTLE_MS 10
/* A release held back for the thread's next request is written by the
 * renewal thread once it is this old (ms): what a waiter of another
 * process may wait for it at most, beside the renewal thread's tick. */
#define DLOCK__PIPE_HOLD_MS 2
/* Another owner wanted l (an acquisition found it held, or a pipelined
 * release told a waiter): the pipelined unlock stops holding its release
 * back for a while.  c->mu held. */
void dlock__pipe_contended(dlock__lock *l);
/* Reads every pipelined release's answer now, to deadline at most (exit,
 * fork, destroy).  c->mu NOT held. */
void dlock__pipe_flush(struct dlock_client *c, dlock__mono deadline);
/* The renewal thread's part: answers older than DLOCK__PIPE_SETTLE_MS
 * are read; *next is brought forward to the next look.  c->mu held
 * (released meanwhile). */
void dlock__pipe_settle(struct dlock_client *c, dlock__mono now, dlock__mono *next);
/* The lock value block (lvb.c).  set: keeps the value for the release of
 * the caller's hold (which the caller checked); get: this hold's value or
 * the server's.  c->mu NOT held.  carry: before a release of h (c->mu
 * held), drops a value left by an earlier hold and answers the identity
 * of h when its release writes one (0: none); sent: after it, forgets the
 * value once written (rc 0). */
int dlock__lvb_set(struct dlock_client *c, dlock__lock *l, const void *buf, size_t len);
int dlock__lvb_get(struct dlock_client *c, dlock__lock *l, void *buf, size_t cap, size_t *len, int *valid);
uint64_t dlock__lvb_carry(dlock__lock *l, const dlock__hold *h);
void dlock__lvb_sent(dlock__lock *l, uint64_t ident, int rc);
int dlock__holds(struct dlock_client *c, dlock__lock *l, int allow_shared, uint64_t *fence);
/* The same for the owner of w's holds: the calling thread, or for a
 * process-owned mutex the process (any thread of it). */
int dlock__release_want(struct dlock_client *c, dlock__lock *l, const dlock__want *w);
int dlock__holds_want(struct dlock_client *c, dlock__lock *l, const dlock__want *w, uint64_t *fence);
/* The identity that owns w's holds for the calling thread, if it exists. */
dlock__thread *dlock__owner_peek(const dlock__want *w);
dlock__hold *dlock__reader(dlock__lock *l, const dlock__thread *self);
/* The owner token of self's acquire call number `call` on client c,
 * DLOCK__OWNER_LEN + 1 bytes. */
void dlock__owner_token(const struct dlock_client *c, const dlock__thread *self, uint64_t call, char *out);

/* Semaphores (sem.c), over the backend's sem op.  l is a
 * DLOCK__KIND_SEM entry.  _create: makes it with value unless it exists.
 * _take: one unit for the calling thread: try (EAGAIN if none is free),
 * or wait until deadline (monotonic; NEVER: none) for a post to hand it
 * one, queued FIFO, woken alone (ETIMEDOUT; a deadline already passed
 * still tries once; bad_deadline: the EINVAL to give if the call would
 * have to wait; w->intr: EINTR when a signal handler runs while it
 * waits); w->undo: the unit taken is leased to the process (w->lease_ms,
 * renewed by the renewal thread, told lost to w->sem_lost_fn).  _post:
 * returns one of the process's leased units of l if it has one (one
 * whose lease was lost: nothing more to do), else adds a unit; EOVERFLOW
 * past max.  ENOLCK when the server cannot be reached within the bound.
 * Take (w->sem_value), post and value (opened) make the semaphore again
 * with the value the caller opened it with if the server lost it (not
 * if it was unlinked: sem.lua); a post that does adds nothing.  c->mu
 * NOT held. */
int dlock__sem_create(struct dlock_client *c, dlock__lock *l, unsigned value);
int dlock__sem_take(struct dlock_client *c, dlock__lock *l, const dlock__want *w, int try, dlock__mono deadline,
                    int bad_deadline);
int dlock__sem_post(struct dlock_client *c, dlock__lock *l, unsigned opened, unsigned max);
int dlock__sem_value(struct dlock_client *c, dlock__lock *l, unsigned opened, int *value);
/* The calling thread's takes of l whose answer was lost (the call gave
 * an error) are undone: their units, if they took any, go back.  Each
 * of take, post and value does it first; a semaphore object's destroy
 * too.  Best effort: one not answered is tried again by the thread's
 * next call.  c->mu NOT held. */
void dlock__sem_settle(struct dlock_client *c, dlock__lock *l);
/* Leased units.  _lost: h (a live unit) is lost: off the held list, LOST,
 * *rep filled when a handler must run (c->mu held).  _return_all: every
 * live unit of c goes back to its semaphore, each a bounded round trip
 * (a client's end; c->mu NOT held).  _free: frees l's unit list (c->mu
 * held, or nothing else runs). */
void dlock__unit_lost(struct dlock_client *c, dlock__hold *h, dlock__lost_report *rep);
void dlock__units_return_all(struct dlock_client *c);
void dlock__units_free(dlock__lock *l);

/* Orphans (orphan.c): possible server-side holds nobody here knows of. */
void dlock__orphan_add(struct dlock_client *c, dlock__lock *l, const char *token, int how, unsigned lease_ms);
dlock__mono dlock__orphans_release(struct dlock_client *c, dlock__lock *l, dlock__mono deadline);
void dlock__orphans_forget(struct dlock_client *c);

/* Live figures (stats.c): acquisitions and wait and hold times per lock,
 * counted in the process under c->mu and flushed by the renewal thread
 * once a second, one round trip (docs/design.md, "Administration and live figures").
 * _acquired: a call that began at `start` ended with rc; if it began h
 * (the caller's hold; NULL none), its wait is counted.  _released: h's
 * unlock (not a recursive one).  _tick (renewal thread): flushes when a
 * second has passed since the last flush, and wants to be woken by
 * *next while figures wait.  _flush: now (exit, destroy), within
 * deadline: 0, or why they were dropped.  c->mu held by all; _tick and _flush release it meanwhile. */
void dlock__stats_init(struct dlock_client *c);
void dlock__stats_acquired(struct dlock_client *c, dlock__lock *l, dlock__hold *h, dlock__mono start, int rc);
void dlock__stats_released(struct dlock_client *c, dlock__hold *h);
/* A hold of l found lost (dlock__hold_lost).  c->mu held. */
void dlock__stats_lost(struct dlock_client *c, dlock__lock *l);
void dlock__stats_risk(struct dlock_client *c, dlock__lock *l);
void dlock__stats_tick(struct dlock_client *c, dlock__mono now, dlock__mono *next);
int dlock__stats_flush(struct dlock_client *c, dlock__mono deadline);
/* l's entry goes (c->mu held, or the client dying); a fork child forgets
 * the parent's figures. */
void dlock__stats_detach(dlock__lock *l);
void dlock__stats_fork_child(struct dlock_client *c);
/* The bucket of a length in µs, and the bucket's bounds [lo, hi) in µs. */
unsigned dlock__stats_bucket(uint64_t us);
void dlock__stats_bounds(unsigned b, double *lo, double *hi);
/* The q-quantile (0 < q <= 1) of a histogram, in ms (0 if empty). */
double dlock__stats_quantile(const uint64_t *hist, double q);

/* Clients (client.c). */
int dlock__client_live(const struct dlock_client *c);
/* The calling thread's owner identity for a token on c (dlock__self), and
 * c's nonce drawn if it is not yet: what every call that makes an owner
 * token asks first.  NULL with *err set when RAND_bytes or malloc fails. */
dlock__thread *dlock__client_self(struct dlock_client *c, int *err);
struct dlock_client *dlock__client_get(struct dlock_client *c, int *err);

/* Holds (hold.c): a hold's state, its questions and its transitions (the
 * table is at the top of hold.c).  c->mu held. */
int dlock__hold_is_live(const dlock__hold *h);
int dlock__hold_is_cached(const dlock__hold *h);
int dlock__hold_is_releasing(const dlock__hold *h);
int dlock__hold_is_renewable(const dlock__hold *h);
int dlock__hold_can_be_lost(const dlock__hold *h);
/* h's lost-lock and lease-at-risk handlers are w's, the latter not yet
 * told (a new hold). */
void dlock__hold_set_handlers(dlock__hold *h, const dlock__want *w);
/* to's handlers are from's (a hold carried across a conversion), the
 * lease-at-risk one not yet told. */
void dlock__hold_handlers_copy(dlock__hold *to, const dlock__hold *from);
/* When h's lease is at risk by its own clock (DLOCK__MONO_NEVER: h has no
 * handler, or was told already, or is not held by a caller). */
dlock__mono dlock__hold_risk_at(const dlock__hold *h);
int dlock__hold_in_use(const dlock__hold *h);
int dlock__hold_is_inconsistent(const dlock__hold *h);
int dlock__hold_release_kind(const dlock__hold *h, int dead);
/* Is h self's, live and in time (else marked lost, *rep filled)? */
int dlock__hold_valid(struct dlock_client *c, dlock__hold *h, const dlock__thread *self, dlock__lost_report *rep);
void dlock__hold_take(dlock__hold *h, dlock__thread *self, int ownerdead);
void dlock__hold_cache(dlock__hold *h);
void dlock__hold_uncache(dlock__hold *h, dlock__thread *self);
void dlock__hold_release_start(dlock__hold *h);
void dlock__hold_convert_start(dlock__hold *h);
void dlock__hold_convert_end(dlock__hold *h);
/* Marks h lost; fills *rep when a handler must run. */
void dlock__hold_lost(struct dlock_client *c, dlock__hold *h, dlock__lost_report *rep);
/* A cached h whose last holds ended unconfirmed: *rep filled for its
 * handler (to run if the cache turns out lost), else left empty. */
void dlock__hold_unconfirmed(const dlock__hold *h, dlock__lost_report *rep);
/* Forgets h (its thread is gone or gave it up). */
void dlock__hold_forget(struct dlock_client *c, dlock__hold *h);
void dlock__hold_abandon(struct dlock_client *c, dlock__hold *h);
void dlock__hold_consistent(dlock__hold *h);

#endif /* DLOCK_CORE_H */
