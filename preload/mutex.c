/* mutex.c -- the dlock mutexes behind the program's mapped global
 * pthread mutexes (hook_mutex.c resolves them by symbol and calls here
 * with their index in dlpl_mxs).
 *
 * A mapped mutex is locked twice, in one order: the dlock mutex (which
 * excludes every thread of every process on every host), then the real
 * mutex (so that pthread_cond_wait, which unlocks and relocks it inside
 * glibc, keeps working, and so that DLOCK_ON_ERROR=open degrades to the
 * plain local mutex).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

/* The dlock side of mapped mutex i (dlpl_mxs[i]). */
struct mx {
    dlock_mutex_t dm;
    atomic_int state; /* 0 not made, 1 made, 2 unusable */
    int process;      /* a kind glibc lets any thread unlock: dm is process-owned (set before state 1) */
    atomic_int local; /* process: held with the real mutex only (DLOCK_ON_ERROR=open) */
};

static struct mx mxs[DLPL_MAX_MUTEX];
static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;

/* Holds of a mapped mutex this thread took with the local mutex only
 * (DLOCK_ON_ERROR=open while the server was unreachable); for a
 * process-owned one, whose unlock any thread may make, mx.local instead.
 * (Not initial-exec: this object is loaded with dlopen.) */
static __thread unsigned local_only[DLPL_MAX_MUTEX];

/* ------------------------------------------------------------- locking */

void dlpl_lost_apply(const char *what, const char *name, const char *meaning) {
    if (dlpl_conf.on_lost == DLPL_ON_LOST_ABORT) {
        dlpl_msg("lost %s '%s' (%s); DLOCK_ON_LOST=abort", what, name, dlpl_lost_why());
        dlpl_stop_tree(getpid(), 0); /* what the program started, as for a file lock */
        abort();
    }
    dlpl_msg("lost %s '%s' (%s): %s (DLOCK_ON_LOST=warn)", what, name, dlpl_lost_why(), meaning);
}

static void mx_on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)arg;
    dlpl_lost_apply("the cluster lock of mutex", name, "it no longer excludes other hosts");
}

/* glibc's __data.__kind: the type in the low two bits (0 NORMAL, which is
 * also DEFAULT; 1 RECURSIVE; 2 ERRORCHECK; 3 ADAPTIVE), then flags:
 * robust, priority inheritance, priority protection, process-shared,
 * elision. */
#define KIND_TYPE 3
#define KIND_ROBUST 16
#define KIND_PI 32

/* Does glibc let any thread unlock a mutex of this kind?  A NORMAL or
 * ADAPTIVE one, yes (it never looks at the owner), unless it is robust or
 * priority-inheriting: those, like ERRORCHECK and RECURSIVE, answer EPERM
 * to a thread that does not own them. */
static int kind_any_thread_unlocks(int kind) {
    int type = kind & KIND_TYPE;
    return (type == PTHREAD_MUTEX_NORMAL || type == PTHREAD_MUTEX_ADAPTIVE_NP) && !(kind & (KIND_ROBUST | KIND_PI));
}

/* DLOCK_LOCK_DELAY_MS (0 to DLOCK_LOCK_DELAY_MAX_MS) on a mapped lock's
 * attributes (a mutex's here, a file lock's in its keeper); unset, the
 * URL's lock_delay_ms.  A bad value is said once and leaves the delay to
 * the URL. */
void dlpl_lock_delay_set(dlock_mutexattr_t *a) {
    static int said;
    int ms = dlpl_conf.lock_delay_ms;
    if (ms == -1 || (ms >= 0 && dlock_mutexattr_setlockdelay(a, (unsigned)ms) == 0)) return;
    if (!said++)
        dlpl_msg("DLOCK_LOCK_DELAY_MS '%s' is not a number of ms from 0 to %u; ignored", dlpl_conf.lock_delay,
                 DLOCK_LOCK_DELAY_MAX_MS);
}

/* DLOCK_ON_RISK=signal:SIG: SIG to whom (the program), for a hold whose
 * lease is at risk (renewals failing, a third of the lease left). */
static void mx_on_risk(dlock_mutex_t *m, const char *name, int event, unsigned left_ms, void *arg) {
    pid_t whom = (pid_t)(intptr_t)arg;
    (void)m;
    if (event != DLOCK_LEASE_AT_RISK) {
        if (dlpl_conf.verbose) dlpl_msg("'%s': renewed again, its lease no longer at risk", name);
        return;
    }
    dlpl_msg("'%s': its lease is at risk (renewals failing, %u ms left); DLOCK_ON_RISK=signal:%d: signalling the "
             "program",
             name, left_ms, dlpl_conf.risk_sig);
    kill(whom, dlpl_conf.risk_sig);
}

/* DLOCK_ON_RISK on a mapped lock's attributes (a mutex's here, whom the
 * program itself; a file lock's in its keeper, whom its program):
 * "ignore" (or unset) sets nothing; "signal:SIG" the lease-at-risk
 * handler, with a margin of a third of the lease.  A bad value is said
 * once and ignored. */
void dlpl_risk_set(dlock_mutexattr_t *a, pid_t whom) {
    static int said;
    unsigned lease = DLOCK_LEASE_DEFAULT_MS;
    if (dlpl_conf.risk_sig == 0) return;
    if (dlpl_conf.risk_sig < 0) {
        if (!said++) dlpl_msg("DLOCK_ON_RISK '%s' is neither ignore nor signal:SIG; ignored", dlpl_conf.on_risk);
        return;
    }
    dlock_mutexattr_getlease(a, &lease);
    dlock_mutexattr_setriskcallback(a, mx_on_risk, (void *)(intptr_t)whom, lease / 3);
}

/* Makes e's dlock mutex on first use, with the type and robustness of
 * the pthread mutex as it is now (glibc keeps them in __data.__kind),
 * and its owner: the process for a kind any thread may unlock (so that
 * such an unlock releases the cluster lock), else the thread. */
static int mx_make(struct mx *e, pthread_mutex_t *m) {
    dlock_mutexattr_t a;
    int kind, rc = 0;
    if (atomic_load(&e->state) == 1) return 0;
    DLPL_REAL(mutex_lock)(&make_mu);
    if (atomic_load(&e->state) == 0) {
        kind = m->__data.__kind;
        dlock_mutexattr_init(&a);
        dlock_mutexattr_settype(&a, (kind & 3) == PTHREAD_MUTEX_RECURSIVE ? DLOCK_MUTEX_RECURSIVE
                                    : (kind & 3) == PTHREAD_MUTEX_ERRORCHECK ? DLOCK_MUTEX_ERRORCHECK
                                                                             : DLOCK_MUTEX_NORMAL);
        dlock_mutexattr_setrobust(&a, (kind & KIND_ROBUST) ? DLOCK_MUTEX_ROBUST : DLOCK_MUTEX_STALLED);
        e->process = kind_any_thread_unlocks(kind);
        dlock_mutexattr_setowner(&a, e->process ? DLOCK_OWNER_PROCESS : DLOCK_OWNER_THREAD);
        dlock_mutexattr_setclient(&a, dlpl_client);
        dlock_mutexattr_setlostcallback(&a, mx_on_lost, NULL);
        dlpl_lock_delay_set(&a);
        dlpl_risk_set(&a, getpid());
        rc = dlpl_client == NULL ? EINVAL : dlock_mutex_init(&e->dm, dlpl_mxs[e - mxs].name, &a);
        if (rc != 0) dlpl_msg("mutex:%s: %s; it stays a local mutex", dlpl_mxs[e - mxs].symbol, dlock_last_error());
        atomic_store(&e->state, rc == 0 ? 1 : 2);
    }
    rc = atomic_load(&e->state) == 1 ? 0 : EINVAL;
    DLPL_REAL(mutex_unlock)(&make_mu);
    return rc;
}

/* Fork: make_mu is taken around it (impl.c's fork handlers, phase 0
 * before, 1 in the parent, 2 in the child), so that a child never
 * inherits it held by a thread it does not have -- one in the middle of
 * making a mapped mutex's dlock side, which the child's own first lock of
 * that mutex would wait for forever -- nor a dlock mutex half made.
 * The library's fork handlers run after this one: make_mu comes before
 * the client's mutexes, as in mx_make. */
void dlpl_mx_atfork(int phase) {
    if (phase == 0) DLPL_REAL(mutex_lock)(&make_mu);
    else DLPL_REAL(mutex_unlock)(&make_mu); /* the child's one thread is the forking one */
}

static int contention(int rc) {
    return rc == 0 || rc == EBUSY || rc == ETIMEDOUT || rc == EDEADLK || rc == EOWNERDEAD ||
           rc == ENOTRECOVERABLE || rc == EAGAIN || rc == EINVAL;
}

/* A timed call that ran out of time because the server could not be
 * reached (the library's detail says so) failed for the server's sake, not
 * for contention: DLOCK_ON_ERROR applies to it, as to flock -w's.  Else, in
 * fail-open mode, a timedlock shorter than the unreachable bound would be
 * ETIMEDOUT on a free mutex for as long as the server stays away. */
static int unreachable_timeout(int rc) {
    return rc == ETIMEDOUT && strstr(dlock_last_error(), "(server unreachable)") != NULL;
}

/* how: 0 lock, 1 trylock, 2 timed (clock, abstime). */
static int mx_lock(struct mx *e, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *abstime) {
    int i = (int)(e - mxs), rc, rr;
    if (local_only[i] > 0 || mx_make(e, m) != 0) goto local;
    for (;;) {
        rc = how == 0 ? dlock_mutex_lock(&e->dm)
             : how == 1 ? dlock_mutex_trylock(&e->dm)
                        : dlock_mutex_clocklock(&e->dm, clock, abstime);
        if (how == 2 && unreachable_timeout(rc)) rc = ENOLCK;
        if (contention(rc)) break;
        /* The server: ENOLCK (unreachable) or worse.  Said once (until
         * it answers again); the client's circuit breaker makes the
         * next calls fail at once, with a probe a second, so the program
         * waits for an unreachable server once per back-off period. */
        dlpl_server_down(dlpl_mxs[i].name, rc);
        if (dlpl_conf.on_error == DLPL_ON_ERROR_OPEN) goto local;
        if (how == 1) return EBUSY;
        if (how == 2) {
            struct timespec now;
            clock_gettime(clock, &now);
            if (now.tv_sec > abstime->tv_sec || (now.tv_sec == abstime->tv_sec && now.tv_nsec >= abstime->tv_nsec))
                return ETIMEDOUT;
        }
        {
            /* closed: wait for the server, asking about every 100 ms (the
             * breaker answers in between without asking) */
            struct timespec ts = { 0, 100 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    if (rc == 0 || rc == EBUSY || rc == EOWNERDEAD) dlpl_server_up();
    if (rc != 0 && rc != EOWNERDEAD) return rc;
    rr = how == 0 ? DLPL_REAL(mutex_lock)(m)
         : how == 1 ? DLPL_REAL(mutex_trylock)(m)
                    : DLPL_REAL(mutex_clocklock)(m, clock, abstime);
    if (rr != 0 && rr != EOWNERDEAD) {
        dlock_mutex_unlock(&e->dm);
        return rr;
    }
    return rc != 0 ? rc : rr;
local:
    rr = how == 0 ? DLPL_REAL(mutex_lock)(m)
         : how == 1 ? DLPL_REAL(mutex_trylock)(m)
                    : DLPL_REAL(mutex_clocklock)(m, clock, abstime);
    if (rr == 0 || rr == EOWNERDEAD) {
        if (e->process) atomic_store(&e->local, 1);
        else local_only[i]++;
    }
    return rr;
}

/* The real mutex first, then the cluster lock (the reverse of mx_lock).
 * A kind glibc lets any thread unlock (process-owned dlock mutex): any
 * thread's unlock releases the cluster lock; an EPERM from dlock then
 * means it was not held (its lease was lost, which DLOCK_ON_LOST
 * reported, or a second unlock), which glibc's own mutex lets pass too.
 * Other kinds (thread-owned): glibc answers EPERM to a thread that does
 * not own the real mutex, which the caller gets, and the cluster lock
 * stays with its owner; once glibc has accepted the unlock, the caller
 * is the owner and an EPERM from dlock can only be a lost lease. */
static int mx_unlock(struct mx *e, pthread_mutex_t *m) {
    int i = (int)(e - mxs), rr, was;
    if (atomic_load(&e->state) == 1 && e->process) {
        was = atomic_exchange(&e->local, 0);
        if ((rr = DLPL_REAL(mutex_unlock)(m)) != 0) {
            if (was) atomic_store(&e->local, 1);
            return rr;
        }
        if (!was) (void)dlock_mutex_unlock(&e->dm);
        return 0;
    }
    if ((rr = DLPL_REAL(mutex_unlock)(m)) != 0) return rr;
    if (local_only[i] > 0) {
        local_only[i]--;
        return 0;
    }
    if (atomic_load(&e->state) == 1) dlock_mutex_unlock(&e->dm); /* EPERM: the lease was lost (reported) */
    return 0;
}

/* The hooks' work for mapped mutex i (hook_mutex.c; dlpl_guard up). */
int dlpl_mx_lock(int i, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *abstime) {
    return mx_lock(&mxs[i], m, how, clock, abstime);
}

int dlpl_mx_unlock(int i, pthread_mutex_t *m) {
    return mx_unlock(&mxs[i], m);
}

int dlpl_mx_consistent(int i, pthread_mutex_t *m) {
    struct mx *e = &mxs[i];
    int a = atomic_load(&e->state) == 1 ? dlock_mutex_consistent(&e->dm) : EINVAL;
    int b = DLPL_REAL(mutex_consistent)(m);
    return a == 0 || b == 0 ? 0 : b;
}

/* A condition wait on a mapped mutex: the dlock mutex is given up for the
 * wait and taken again, before the real mutex, as every lock does.
 * (dlpl_guard down: the wait proper is the program's.) */
int dlpl_mx_cond(int i, pthread_cond_t *c, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *t) {
    struct mx *e = &mxs[i];
    int rc;
    dlpl_guard++;
    if (atomic_load(&e->state) != 1 || (e->process ? atomic_load(&e->local) : (int)local_only[i]) > 0) {
        dlpl_guard--;
        goto real;
    }
    dlock_mutex_unlock(&e->dm);
    dlpl_guard--;
    rc = how == 0 ? DLPL_REAL(cond_wait)(c, m)
         : how == 1 ? DLPL_REAL(cond_timedwait)(c, m, t)
                    : DLPL_REAL(cond_clockwait)(c, m, clock, t);
    dlpl_guard++;
    DLPL_REAL(mutex_unlock)(m);
    while (mx_lock(e, m, 0, CLOCK_REALTIME, NULL) != 0) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL); /* cannot be given up: a condition wait returns holding the mutex */
    }
    dlpl_guard--;
    return rc;
real:
    return how == 0 ? DLPL_REAL(cond_wait)(c, m)
           : how == 1 ? DLPL_REAL(cond_timedwait)(c, m, t)
                      : DLPL_REAL(cond_clockwait)(c, m, clock, t);
}
