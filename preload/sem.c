/* sem.c -- POSIX named semaphores of the program whose names match a
 * `sem:` rule become dlock semaphores (dlock_sem_t); every other
 * semaphore, and every unnamed one (sem_init), goes straight to the real
 * function.
 *
 * sem_open of a mapped name opens the real named semaphore too (O_CREAT
 * added when the program did not give it, with value 0), and returns
 * it: its address is the handle the other hooks look up, and it is this
 * host's local semaphore for DLOCK_ON_ERROR=open.  The count that matters
 * is the cluster's: wait, trywait, timedwait, clockwait, post and
 * getvalue go to the dlock semaphore of the rule's name, and the real
 * one is touched only while the server cannot be reached (fail-open: the
 * local semaphore alone, as a mapped mutex falls back to the real mutex).
 * A unit taken from the local semaphore is counted (per semaphore, for
 * the whole process: semaphores have no owner), and the process's next
 * post gives it back there, not to the cluster, so that neither count
 * grows by an outage.
 *
 * The table is filled by sem_open under one mutex and read without it:
 * an entry, once published, keeps its address for the process's life
 * (sem_close of the last open frees the dlock semaphore only).
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "preload.h"

#define MAX_SEM 64

struct sm {
    sem_t *addr;        /* what the real sem_open returned */
    char name[DLOCK_NAME_MAX + 1]; /* the dlock semaphore's name */
    dlock_sem_t ds;
    atomic_int state;   /* 0 closed, 1 the dlock semaphore is made, 2 not (yet): local only */
    int opens;          /* sem_open calls not yet closed (under mu) */
    unsigned value;     /* the value given at sem_open, for a late dlock_sem_init */
    int undo;           /* its rule is sem+undo: units leased to the process */
    int own;            /* its rule has no =NAME: the dlock name is the program's name */
    int expire;         /* the program unlinked the name: the cluster semaphore still needs its expiry (under mu) */
    atomic_int local;   /* units this process took from the real semaphore */
};

static struct sm sms[MAX_SEM];
static atomic_int nsem;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* The real functions (the thin object resolved them: preload.c). */
#define REAL(fn) DLPL_REAL(sem_##fn)
/* A real function that could not be found (it would be the hook itself):
 * ENOSYS, as the other hooks do. */
#define CALL_REAL(fn, ...) (REAL(fn) != NULL ? REAL(fn)(__VA_ARGS__) : (errno = ENOSYS, -1))

/* ------------------------------------------------------------- rules */

static struct sm *psem_find(const sem_t *s) {
    int i, n = atomic_load_explicit(&nsem, memory_order_acquire);
    for (i = 0; i < n; i++)
        if (sms[i].addr == s) return &sms[i];
    return NULL;
}

/* A unit this process took under undo (a `sem+undo:` rule) was lost: its
 * lease lapsed (the server could not be reached long enough, or lost its
 * data), so another process may have it.  DLOCK_ON_LOST applies as to a
 * mutex. */
static void sem_unit_lost(dlock_sem_t *s, const char *name, void *arg) {
    (void)s;
    (void)arg;
    dlpl_lost_apply("a unit of semaphore", name, "it no longer counts against other hosts");
}

/* Makes e's dlock semaphore (on sem_open, and again on a later call if
 * the server could not be reached then).  1 if it is there. */
static int psem_make(struct sm *e) {
    dlock_semattr_t a;
    int rc;
    if (atomic_load(&e->state) == 1) return 1;
    DLPL_REAL(mutex_lock)(&mu);
    if (atomic_load(&e->state) == 2 && dlpl_client != NULL) {
        dlock_semattr_init(&a);
        dlock_semattr_setclient(&a, dlpl_client);
        if (e->undo) {
            (void)dlock_semattr_setundo(&a, 1);
            (void)dlock_semattr_setlostcallback(&a, sem_unit_lost, NULL);
        }
        rc = dlock_sem_init(&e->ds, e->name, e->value, &a);
        dlock_semattr_destroy(&a);
        if (rc == 0) {
            atomic_store(&e->state, 1);
            dlpl_server_up();
        } else if (rc == ENOLCK) {
            dlpl_server_down(e->name, rc);
        } else {
            dlpl_msg("sem:%s: %s; it stays a local semaphore", e->name, dlock_last_error());
        }
    }
    rc = atomic_load(&e->state) == 1;
    DLPL_REAL(mutex_unlock)(&mu);
    return rc;
}

/* --------------------------------------------------- unlinked semaphores
 *
 * sem_unlink of a name that a rule maps to itself (no =NAME) removes the
 * local name and gives the cluster semaphore an expiry, SEM_EXPIRE_MS
 * (dlock_sem_expire): programs such as Python's multiprocessing unlink a
 * fresh name at once and go on using the semaphore through its handle,
 * which their fork children inherit.  Every process that has such a
 * semaphore open renews that expiry (if it has one: DLOCK_SEM_RENEW)
 * every third of it, from a thread of its own, so the semaphore lives
 * while anyone anywhere has it open, and is gone at most SEM_EXPIRE_MS
 * after its last user closed it, exited or was killed.  A semaphore whose
 * name nobody unlinked has no expiry: its renewal asks and changes
 * nothing.  The thread starts with the first such sem_open, and in a fork
 * child (which has no threads) with its first call on a mapped semaphore.
 */
#define SEM_EXPIRE_MS 10000u

static atomic_int renewer_on; /* this process has its renewal thread */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Sets or renews the expiry of the semaphore of entry i, if it is open,
 * made on the server, and its rule maps the name to itself.  A pending
 * expiry (the unlink did not reach the server) is set; it is done once
 * the server said so, or said that the semaphore is gone. */
static void renew_at(int i) {
    char name[DLOCK_NAME_MAX + 1];
    struct sm *e = &sms[i];
    int expire, made, rc;
    DLPL_REAL(mutex_lock)(&mu);
    made = atomic_load(&e->state);
    expire = e->expire;
    if (made == 1 && e->own) snprintf(name, sizeof name, "%s", e->name);
    DLPL_REAL(mutex_unlock)(&mu);
    if (made != 1 || !e->own || dlpl_client == NULL) return;
    rc = dlock_sem_expire(dlpl_client, name, SEM_EXPIRE_MS, expire ? 0 : DLOCK_SEM_RENEW);
    if (expire && (rc == 0 || rc == ENOENT)) {
        DLPL_REAL(mutex_lock)(&mu);
        if (strcmp(e->name, name) == 0) e->expire = 0;
        DLPL_REAL(mutex_unlock)(&mu);
    }
}

static void *renewer(void *arg) {
    (void)arg;
    dlpl_guard++; /* its calls pass through the hooks */
    for (;;) {
        struct timespec ts = { SEM_EXPIRE_MS / 3000, (long)(SEM_EXPIRE_MS / 3 % 1000) * 1000000L };
        int i, n;
        nanosleep(&ts, NULL);
        n = atomic_load_explicit(&nsem, memory_order_acquire);
        for (i = 0; i < n; i++) renew_at(i);
    }
    return NULL;
}

/* Fork: the table's mutex is taken around it, so that a child never
 * inherits it held by a thread it does not have (the renewal thread, or
 * one in sem_open); the child has no renewal thread. */
static void psem_atfork_prepare(void) {
    DLPL_REAL(mutex_lock)(&mu);
}

static void psem_atfork_parent(void) {
    DLPL_REAL(mutex_unlock)(&mu);
}

static void psem_atfork_child(void) {
    DLPL_REAL(mutex_unlock)(&mu);
    atomic_store(&renewer_on, 0); /* the thread stayed with the parent */
}

static void psem_atfork_register(void) {
    pthread_atfork(psem_atfork_prepare, psem_atfork_parent, psem_atfork_child);
}

/* Starts this process's renewal thread unless it runs (all signals
 * blocked, as every thread of the library's). */
static void renewer_start(void) {
    sigset_t all, old;
    pthread_attr_t a;
    pthread_t t;
    int no = 0;
    if (atomic_load_explicit(&renewer_on, memory_order_relaxed) ||
        !atomic_compare_exchange_strong(&renewer_on, &no, 1))
        return;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, renewer, NULL) != 0) atomic_store(&renewer_on, 0);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The program unlinked a local name that its rule maps to itself, the
 * dlock name dname: the cluster semaphore gets its expiry (at once if the
 * server answers; else the entries of this process that have it open
 * keep it pending for the renewal thread). */
static void unlinked(const char *dname) {
    int i, n = atomic_load_explicit(&nsem, memory_order_acquire), rc, any = 0;
    DLPL_REAL(mutex_lock)(&mu);
    for (i = 0; i < n; i++)
        if (atomic_load(&sms[i].state) != 0 && sms[i].own && strcmp(sms[i].name, dname) == 0) sms[i].expire = any = 1;
    DLPL_REAL(mutex_unlock)(&mu);
    if (dlpl_client == NULL) return;
    rc = dlock_sem_expire(dlpl_client, dname, SEM_EXPIRE_MS, 0);
    if (rc != 0 && rc != ENOENT) return;
    DLPL_REAL(mutex_lock)(&mu);
    for (i = 0; i < n && any; i++)
        if (atomic_load(&sms[i].state) == 1 && sms[i].own && strcmp(sms[i].name, dname) == 0) sms[i].expire = 0;
    DLPL_REAL(mutex_unlock)(&mu);
}

/* The entry for s, opened once more (a program may sem_open one name
 * several times: glibc returns the same address). */
static void add(sem_t *s, const char *name, unsigned value, int undo, int own) {
    struct sm *e;
    int n;
    pthread_once(&atfork_once, psem_atfork_register);
    DLPL_REAL(mutex_lock)(&mu);
    if ((e = psem_find(s)) == NULL) {
        /* A closed entry is used again: glibc may map a semaphore opened
         * anew at another address. */
        for (n = 0; n < atomic_load(&nsem) && e == NULL; n++)
            if (atomic_load(&sms[n].state) == 0 && sms[n].opens == 0) e = &sms[n];
    }
    if (e != NULL) {
        e->addr = s;
    } else {
        n = atomic_load(&nsem);
        if (n >= MAX_SEM) {
            DLPL_REAL(mutex_unlock)(&mu);
            dlpl_msg("sem:%s: more than %d mapped semaphores; it stays local", name, MAX_SEM);
            return;
        }
        e = &sms[n];
        e->addr = s;
        atomic_store_explicit(&nsem, n + 1, memory_order_release);
    }
    if (e->opens++ == 0) {
        snprintf(e->name, sizeof e->name, "%s", name);
        e->value = value;
        e->undo = undo;
        e->own = own;
        e->expire = 0;
        atomic_store(&e->local, 0);
        atomic_store(&e->state, 2);
    }
    DLPL_REAL(mutex_unlock)(&mu);
    psem_make(e);
    if (own) renewer_start();
}

/* ------------------------------------------------------------ results */

/* glibc's convention: 0, or -1 with errno. */
static int ret(int rc) {
    if (rc == 0) return 0;
    errno = rc;
    return -1;
}

/* The server could not be reached (rc): DLOCK_ON_ERROR decides.  1: take
 * the local semaphore (open); 0: the call fails with rc (closed). */
static int fall_back(struct sm *e, int rc) {
    dlpl_server_down(e->name, rc);
    return dlpl_conf.on_error == DLPL_ON_ERROR_OPEN;
}

/* A wait of the local semaphore, counted. */
static int local_take(struct sm *e, int how, clockid_t clock, const struct timespec *t) {
    int r = how == 0   ? CALL_REAL(wait, e->addr)
            : how == 1 ? CALL_REAL(trywait, e->addr)
                       : CALL_REAL(clockwait, e->addr, clock, t);
    if (r == 0) atomic_fetch_add(&e->local, 1);
    return r;
}

/* A mapped wait, interruptible as glibc's: a signal handler that runs
 * while it waits ends sem_timedwait and sem_clockwait with EINTR, and
 * sem_wait too unless the handler was installed with SA_RESTART (the
 * kernel then restarts sem_wait's futex wait, not the timed one's: so
 * glibc 2.36 on Linux 6, tests/preload/dlpl_semx.c): sem_wait goes on when
 * every handler that could have run restarts (dlpl_restartable).  A unit
 * a post handed to the wait meanwhile is taken (dlock_sem_xwait). */
static int xwait(struct sm *e, int how, clockid_t clock, const struct timespec *t) {
    sigset_t mask;
    int rc;
    do {
        rc = dlock_sem_xwait(&e->ds, how == 1 ? DLOCK_F_TRY : DLOCK_F_INTR, clock, how == 2 ? t : NULL);
    } while (rc == EINTR && how == 0 && pthread_sigmask(SIG_SETMASK, NULL, &mask) == 0 && dlpl_restartable(&mask));
    return rc;
}

/* how: 0 wait, 1 trywait, 2 clockwait (clock, t).  glibc's return. */
static int sm_take(struct sm *e, int how, clockid_t clock, const struct timespec *t) {
    int rc;
    for (;;) {
        rc = psem_make(e) ? xwait(e, how, clock, t) : ENOLCK;
        if (rc != ENOLCK) break;
        if (fall_back(e, rc)) return local_take(e, how, clock, t);
        /* closed: trywait says EAGAIN, a timed wait ETIMEDOUT at its
         * deadline, a wait waits for the server (asking every 100 ms;
         * the client's breaker answers in between without asking). */
        if (how == 1) return ret(EAGAIN);
        if (how == 2) {
            struct timespec now;
            clock_gettime(clock, &now);
            if (now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec))
                return ret(ETIMEDOUT);
        }
        {
            struct timespec ts = { 0, 100 * 1000 * 1000 };
            sigset_t mask;
            if (nanosleep(&ts, NULL) != 0 && errno == EINTR &&
                (how != 0 || (pthread_sigmask(SIG_SETMASK, NULL, &mask) == 0 && !dlpl_restartable(&mask))))
                return ret(EINTR);
        }
    }
    if (rc == 0 || rc == EAGAIN || rc == ETIMEDOUT || rc == EINTR) dlpl_server_up();
    return ret(rc);
}

/* A post: a unit taken from the local semaphore goes back there; else
 * to the cluster.  A post the server does not take (unreachable) is
 * -1 with ENOLCK in both modes: the unit was the cluster's, and posting
 * it locally would let one more in here than the count allows. */
static int sm_post(struct sm *e) {
    int n = atomic_load(&e->local), rc;
    while (n > 0)
        if (atomic_compare_exchange_weak(&e->local, &n, n - 1)) return CALL_REAL(post, e->addr);
    if (!psem_make(e)) rc = ENOLCK;
    else rc = dlock_sem_post(&e->ds);
    if (rc == ENOLCK) {
        dlpl_server_down(e->name, rc);
        dlpl_msg_rl(4, "sem:%s: a post did not reach the server (%s); that unit is not given back", e->name,
                    dlock_strerror(rc));
    } else if (rc == 0) {
        dlpl_server_up();
    }
    return ret(rc);
}

static int sm_getvalue(struct sm *e, int *v) {
    int rc = psem_make(e) ? dlock_sem_getvalue(&e->ds, v) : ENOLCK;
    if (rc == ENOLCK && fall_back(e, rc)) return CALL_REAL(getvalue, e->addr, v);
    return ret(rc);
}

/* The last sem_close frees the dlock semaphore (EBUSY while another
 * thread waits in it: it is then kept, as the program's own mistake
 * would keep glibc's mapping). */
static void sm_close(struct sm *e) {
    DLPL_REAL(mutex_lock)(&mu);
    if (e->opens > 0 && --e->opens == 0) {
        if (atomic_load(&e->state) == 1 && dlock_sem_destroy(&e->ds) != 0) e->opens = 1;
        else atomic_store(&e->state, 0);
    }
    DLPL_REAL(mutex_unlock)(&mu);
}

/* ------------------------------------------------------------- hooks */

#define ACTIVE() (DLPL_LIKELY(dlpl_state == DLPL_ACTIVE) && !dlpl_guard && !dlpl_conf.bad)
/* The entry of a mapped, open semaphore, or NULL. */
#define MAPPED(s) (ACTIVE() && atomic_load_explicit(&nsem, memory_order_relaxed) != 0 ? open_entry(s) : NULL)

static struct sm *open_entry(const sem_t *s) {
    struct sm *e = psem_find(s);
    if (e == NULL || atomic_load(&e->state) == 0) return NULL;
    if (e->own && !atomic_load_explicit(&renewer_on, memory_order_relaxed)) renewer_start(); /* a fork child */
    return e;
}

/* Without O_CREAT, a name that exists nowhere is ENOENT, as glibc's: not
 * on this host, and not on the server.  A server that cannot be asked
 * counts as "it may exist there". */
static int missing(const char *name, const char *dname) {
    dlock_sem_info_t si;
    sem_t *s = DLPL_REAL(sem_open)(name, 0);
    if (s != SEM_FAILED) {
        (void)CALL_REAL(close, s);
        return 0;
    }
    if (errno != ENOENT || dlpl_client == NULL) return 0;
    return dlock_sem_info(dlpl_client, dname, &si) == 0 && !si.exists;
}

/* sem_open of a name that a sem: rule maps (hook_sem.c checked it, and
 * took mode and value from the arguments). */
sem_t *dlpl_sem_open(const char *name, int oflag, mode_t mode, unsigned value) {
    char dname[DLOCK_NAME_MAX + 1];
    int undo = 0, own = 0;
    sem_t *s;
    if (REAL(open) == NULL) {
        errno = ENOSYS;
        return SEM_FAILED;
    }
    if (!ACTIVE() || !dlpl_map_sem(name, dname, sizeof dname, &undo, &own))
        return (oflag & O_CREAT) ? DLPL_REAL(sem_open)(name, oflag, mode, value) : DLPL_REAL(sem_open)(name, oflag);
    dlpl_guard++;
    if (!(oflag & O_CREAT) && missing(name, dname)) {
        dlpl_guard--;
        errno = ENOENT;
        return SEM_FAILED;
    }
    /* The local semaphore is the handle (and the fail-open fallback):
     * made with value 0 if the program only opens an existing one, since
     * the one that exists may be on another host. */
    if (!(oflag & O_CREAT)) mode = 0600;
    s = DLPL_REAL(sem_open)(name, oflag | O_CREAT, mode, value);
    if (s != SEM_FAILED) {
        int saved = errno;
        add(s, dname, value, undo, own);
        errno = saved;
    }
    dlpl_guard--;
    return s;
}

int dlpl_sem_close(sem_t *s) {
    struct sm *e = MAPPED(s);
    int r;
    if (e == NULL) return CALL_REAL(close, s);
    dlpl_guard++;
    sm_close(e);
    r = CALL_REAL(close, s);
    dlpl_guard--;
    return r;
}

/* The local name goes; the cluster semaphore of a name that a rule maps
 * to itself gets an expiry that its users renew while they have it open
 * ("unlinked semaphores" above), never removed at once: programs such as
 * Python's multiprocessing unlink a name right after opening it, while
 * they go on using it.  Under sem:GLOB=NAME many local names share one
 * cluster semaphore: it stays (`dlock break --unlink NAME` deletes it). */
int dlpl_sem_unlink(const char *name) {
    char dname[DLOCK_NAME_MAX + 1];
    int undo, own = 0, r = CALL_REAL(unlink, name), saved = errno;
    if (r != 0 || !ACTIVE() || !dlpl_map_sem(name, dname, sizeof dname, &undo, &own) || !own) return r;
    dlpl_guard++;
    unlinked(dname);
    dlpl_guard--;
    errno = saved;
    return r;
}

/* sem_wait (how 0), sem_trywait (1), sem_timedwait and sem_clockwait (2,
 * at t on clock). */
int dlpl_sem_take(sem_t *s, int how, clockid_t clock, const struct timespec *t) {
    struct sm *e = MAPPED(s);
    int r;
    if (e == NULL)
        return how == 0   ? CALL_REAL(wait, s)
               : how == 1 ? CALL_REAL(trywait, s)
               : clock == CLOCK_REALTIME ? CALL_REAL(timedwait, s, t)
                                         : CALL_REAL(clockwait, s, clock, t);
    if (how == 2 && clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC) return ret(EINVAL);
    dlpl_guard++;
    r = sm_take(e, how, clock, t);
    dlpl_guard--;
    return r;
}

int dlpl_sem_post(sem_t *s) {
    struct sm *e = MAPPED(s);
    int r;
    if (e == NULL) return CALL_REAL(post, s);
    dlpl_guard++;
    r = sm_post(e);
    dlpl_guard--;
    return r;
}

int dlpl_sem_getvalue(sem_t *s, int *v) {
    struct sm *e = MAPPED(s);
    int r;
    if (e == NULL) return CALL_REAL(getvalue, s, v);
    dlpl_guard++;
    r = sm_getvalue(e, v);
    dlpl_guard--;
    return r;
}
