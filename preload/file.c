/* file.c -- the file-lock hooks: flock, fcntl (F_SETLK, F_SETLKW, F_GETLK
 * and the F_OFD_* forms), lockf, and close.  Record locks (fcntl, lockf)
 * are byte ranges on the server, asked by the process itself (range.c);
 * what follows is about flock locks.
 *
 * A lock on a mapped path is taken twice: cluster-wide, by a keeper
 * process (keeper.c) that holds the dlock rwlock of the path's name, and
 * locally, by the real system call.  The kernel lock keeps the local
 * semantics exact (open file descriptions, fork, dup, close, exit); the
 * keeper watches it and gives the cluster lock up as soon as the kernel
 * lock is gone, whichever process or path made it go.  So:
 *
 *   lock:   ask the keeper (cluster) first, then the kernel; ARM the keeper
 *           (it checks the kernel lock and from then on watches it).
 *   unlock: the kernel first; then ARM the keeper, which finds the kernel
 *           lock gone and releases the cluster lock before we return.
 *
 * A blocking request waits for the keeper's answer in ppoll with the
 * caller's own signal mask (every signal is blocked otherwise), so a
 * signal handler that runs meanwhile ends the wait: the keeper is told
 * to give up (CANCEL and SIGUSR1) and flock returns EINTR, as the system
 * call does -- which is how flock(1) -w times out.  A keeper that does not
 * answer within 250 ms is in a round trip the server does not answer: it
 * is abandoned, and the call is as good as refused by an unreachable
 * server (DLOCK_ON_ERROR decides).
 *
 * The program keeps the circuit breaker for its keepers (see
 * docs/preload.md, "The fail-open budget"): while it is open, a lock
 * request asks no keeper, but for the probe one a second.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload.h"
#include <dlock_private.h> /* the client's circuit breaker */

#ifndef KCMP_FILE
#define KCMP_FILE 0
#endif

/* One cluster lock held (or being taken) through a keeper.  flock and OFD
 * locks belong to an open file description (fd is the last descriptor we
 * saw it through); POSIX record locks to the process and the inode. */
struct rec {
    struct rec *next;
    int kind;
    dev_t dev;
    ino_t ino;
    int fd;
    int sock;
    pid_t kpid;
    int mode; /* what the keeper holds: 0, 1 shared, 2 exclusive */
    int busy; /* a request is in flight */
    char name[DLOCK_NAME_MAX + 1];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static struct rec *recs;
volatile int dlpl_nrec;
static pid_t zombies[64];
static int nzombies;

/* The monitor: a thread that notices at once when a keeper holding a lock
 * for us dies (its socket hangs up) -- killed, say, with SIGKILL -- and
 * applies DLOCK_ON_LOST, since the cluster lock is then no longer renewed.
 * Started with the first held lock; woken through mon_pipe when the set
 * of keepers changes. */
static int mon_pipe[2] = { -1, -1 };
static int mon_started;
static void mon_wake(void);
static void mon_start(void); /* mu held */

static void lock_mu(void) {
    DLPL_REAL(mutex_lock)(&mu);
}
static void unlock_mu(void) {
    DLPL_REAL(mutex_unlock)(&mu);
}

/* At start-up (the configuration and the client are there): record
 * locks that an exec kept are this program's now (range.c). */
void dlpl_file_init(void) {
    dlpl_range_adopt();
}

/* Through fork, the hooks pass straight through (dlpl_guard): the
 * library's own fork handlers run between these (they were registered
 * first) and close the child's copies of the client's connections,
 * through the close hook, while mu is still held. */
void dlpl_file_atfork_prepare(void) {
    dlpl_guard++;
    lock_mu();
}
void dlpl_file_atfork_parent(void) {
    unlock_mu();
    dlpl_guard--;
}
/* The child holds none of its parent's keepers: it forgets them (its
 * copies of the sockets are closed, writing nothing).  The kernel locks
 * it shares through inherited descriptions stay what they are, and the
 * parent's keepers keep the cluster locks while those kernel locks live. */
void dlpl_file_atfork_child(void) {
    struct rec *r, *n;
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&idle_cv, NULL);
    for (r = recs; r != NULL; r = n) {
        n = r->next;
        DLPL_REAL(close)(r->sock);
        free(r);
    }
    recs = NULL;
    dlpl_nrec = 0;
    nzombies = 0;
    /* The parent's monitor is not ours: the child starts its own. */
    if (mon_pipe[0] >= 0) {
        DLPL_REAL(close)(mon_pipe[0]);
        DLPL_REAL(close)(mon_pipe[1]);
    }
    mon_pipe[0] = mon_pipe[1] = -1;
    mon_started = 0;
    dlpl_guard--;
}

/* Did a keeper's end (waitpid status) come from outside -- a signal, or
 * SIGTERM/SIGHUP/SIGINT caught while it held a lock -- rather than from
 * its own work being done? */
static int keeper_killed(int st) {
    return WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == DLPL_KEEPER_TERMINATED);
}

/* Keepers are clone children started without an exit signal -- but
 * execve gives every process SIGCHLD as its exit signal again, so waitpid
 * needs __WALL (not __WCLONE) to reap them.  Reaped here; *status set
 * if pid was reaped now (else left as it was).  mu held. */
static void reap(pid_t pid, int *status) {
    int i, j;
    if (pid > 0 && waitpid(pid, status, __WALL | WNOHANG) == pid) pid = 0;
    if (pid > 0 && nzombies < (int)(sizeof zombies / sizeof zombies[0])) zombies[nzombies++] = pid;
    for (i = j = 0; i < nzombies; i++) {
        if (waitpid(zombies[i], NULL, __WALL | WNOHANG) == 0) zombies[j++] = zombies[i];
    }
    nzombies = j;
}

/* A keeper that held r's cluster lock was killed: the lock is no longer
 * renewed and stops excluding other hosts when its lease runs out.
 * DLOCK_ON_LOST: warn says so; abort stops the processes this program
 * started and aborts it.  how: the keeper's waitpid status. */
static void keeper_lost(const struct rec *r, int st) {
    char how[64];
    if (WIFSIGNALED(st)) snprintf(how, sizeof how, "was killed (signal %d, %s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(how, sizeof how, "was terminated");
    if (dlpl_conf.on_lost == DLPL_ON_LOST_ABORT) {
        dlpl_msg("'%s': its keeper process %ld %s: the cluster lock is no longer renewed; DLOCK_ON_LOST=abort: "
                 "SIGABRT to this program and the processes it started", r->name, (long)r->kpid, how);
        dlpl_stop_tree(getpid(), 0);
        abort();
    }
    dlpl_msg("'%s': its keeper process %ld %s: the cluster lock is no longer renewed and stops excluding other "
             "hosts when its lease runs out (DLOCK_ON_LOST=warn)", r->name, (long)r->kpid, how);
}

/* Drops r; st: the keeper's waitpid status if the caller reaped it, else
 * -1 (then it is reaped here if it has ended).  A keeper that was killed
 * while it held a lock is reported (keeper_lost).  mu held. */
static void rec_drop_st(struct rec *r, int st) {
    struct rec **pp;
    for (pp = &recs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    DLPL_REAL(close)(r->sock);
    if (st == -1) reap(r->kpid, &st);
    if (st != -1 && keeper_killed(st) && r->mode > 0) keeper_lost(r, st);
    free(r);
    atomic_fetch_sub((_Atomic int *)&dlpl_nrec, 1);
    pthread_cond_broadcast(&idle_cv);
    mon_wake();
}

static void rec_drop(struct rec *r) { /* mu held */
    rec_drop_st(r, -1);
}

/* Is the keeper gone (it exits once it holds nothing)? */
static int keeper_gone(const struct rec *r) {
    struct pollfd p = { r->sock, POLLIN, 0 };
    return poll(&p, 1, 0) != 0;
}

/* The status of a keeper that hung up (it is exiting), waited for up to a
 * second; -1 if none came.  mu NOT held. */
static int keeper_status(pid_t pid) {
    int st = -1, k;
    for (k = 0; k < 200; k++) {
        struct timespec ts = { 0, 5 * 1000 * 1000 };
        pid_t w = waitpid(pid, &st, __WALL | WNOHANG);
        if (w == pid) return st;
        if (w < 0) return -1;
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void mon_wake(void) {
    char c = 0;
    if (mon_pipe[1] >= 0) (void)!write(mon_pipe[1], &c, 1);
}

/* The monitor's loop: poll every settled keeper's socket for a hang-up
 * (events 0: the answers stay for file_ask()); a keeper that hung up while it
 * held a lock, and no request in flight, is claimed, waited for (it is
 * exiting) and dropped, which applies DLOCK_ON_LOST if it was killed. */
static void *mon_main(void *arg) {
    (void)arg;
    dlpl_guard++; /* every call of this thread passes straight through */
    for (;;) {
        struct pollfd pf[65];
        struct rec *r, *dead[8];
        int n = 1, nd = 0, i, st;
        char sink[64];

        pf[0].fd = mon_pipe[0];
        pf[0].events = POLLIN;
        lock_mu();
        for (r = recs; r != NULL && n < 65; r = r->next) {
            if (r->busy || r->mode == 0) continue;
            pf[n].fd = r->sock;
            pf[n++].events = 0;
        }
        unlock_mu();
        if (poll(pf, (nfds_t)n, n == 65 ? 1000 : -1) < 0 && errno != EINTR) {
            struct timespec ts = { 0, 100 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            continue;
        }
        if (pf[0].revents & POLLNVAL) {
            /* The program closed our pipe (closing every descriptor, as a
             * daemon does): end; the next held lock starts a monitor anew. */
            lock_mu();
            mon_pipe[0] = mon_pipe[1] = -1;
            mon_started = 0;
            unlock_mu();
            return NULL;
        }
        while (read(mon_pipe[0], sink, sizeof sink) > 0)
            ;
        lock_mu();
        for (r = recs; r != NULL && nd < 8; r = r->next) {
            if (r->busy || r->mode == 0 || !keeper_gone(r)) continue;
            r->busy = 1;
            dead[nd++] = r;
        }
        unlock_mu();
        for (i = 0; i < nd; i++) {
            r = dead[i];
            st = keeper_status(r->kpid);
            lock_mu();
            if (st == -1) rec_drop(r);
            else rec_drop_st(r, st);
            unlock_mu();
        }
    }
    return NULL;
}

/* Starts the monitor once (per process).  mu held. */
static void mon_start(void) {
    pthread_t t;
    pthread_attr_t a;
    sigset_t all, old;
    if (mon_started) return;
    if (mon_pipe[0] < 0 && pipe2(mon_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 128 * 1024);
    /* The program's signals are for its own threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&t, &a, mon_main, NULL) == 0) mon_started = 1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
}

static int file_same_description(int a, int b) {
    if (a == b) return 1;
    return syscall(SYS_kcmp, (long)getpid(), (long)getpid(), (long)KCMP_FILE, (long)a, (long)b) == 0;
}

/* The record of (kind, file, description); mu held.  Records whose
 * keeper has gone are dropped on the way. */
static struct rec *rec_find(int kind, const struct stat *st, int fd) {
    struct rec *r, *n;
    for (r = recs; r != NULL; r = n) {
        n = r->next;
        if (r->kind != kind || r->dev != st->st_dev || r->ino != st->st_ino) continue;
        if (!r->busy && keeper_gone(r)) {
            rec_drop(r);
            continue;
        }
        if (kind == DLPL_K_POSIX) return r;
        if (file_same_description(fd, r->fd)) {
            r->fd = fd;
            return r;
        }
    }
    return NULL;
}

/* Waits until no request is in flight on r (another thread's).  mu held;
 * returns r, or NULL if it went away meanwhile. */
static struct rec *rec_claim(int kind, const struct stat *st, int fd) {
    struct rec *r;
    while ((r = rec_find(kind, st, fd)) != NULL && r->busy) pthread_cond_wait(&idle_cv, &mu);
    if (r != NULL) r->busy = 1;
    return r;
}

static void rec_release(struct rec *r) { /* mu held */
    r->busy = 0;
    pthread_cond_broadcast(&idle_cv);
}

/* ----------------------------------------------------------- keeper I/O */

static int xsend(int sock, const struct dlpl_req *q) {
    ssize_t n;
    do n = send(sock, q, sizeof *q, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof *q ? 0 : -1;
}

static int xrecv(int sock, struct dlpl_rep *p) {
    ssize_t n;
    do n = recv(sock, p, sizeof *p, 0);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof *p ? 0 : -1;
}

#define EKEEPER (-1) /* the keeper is gone: no answer */
#define ESILENT (-2) /* cancelled, and the keeper did not answer in time: abandoned */

/* How long a cancelled request waits for the keeper's answer.  A keeper
 * that is waiting for the lock answers at once; one that is in a round
 * trip with a server that does not answer (a connection attempt, a reply
 * it waits for) may not for seconds: the program does not wait for it,
 * so that a signal (flock -w's alarm) ends the call in time.  The keeper
 * is abandoned: it sees the program's end of the socket close, and gives
 * up whatever it gets unless the kernel lock is held. */
#define CANCEL_GRACE_NS (250LL * 1000 * 1000)
/* How long an ARM sent while the program's breaker is open is waited for
 * (one attempt of the keeper's: a reply floor, 200 ms, and some room). */
#define ARM_PROBE_NS (500LL * 1000 * 1000)

static long long file_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One request to r's keeper and its answer.  intr: the wait ends with
 * EINTR when a signal handler runs in this thread (and would not have
 * restarted a system call); the keeper is then cancelled (and abandoned
 * if it does not answer within CANCEL_GRACE_NS: ESILENT, *mode 0).  probe:
 * the request is the program's circuit breaker's probe.  Returns the
 * keeper's rc (with *mode), or EKEEPER. */
static int file_ask(struct rec *r, int op, int mode, int try, int intr, int probe, int *mode_out) {
    struct dlpl_req q = { op, mode, try, (long)syscall(SYS_gettid), probe };
    struct dlpl_rep p = { 0, 0 };
    sigset_t all, old;
    int rc = 0, cancelled = 0;
    long long cancel_ns = 0;
    /* An ARM while the breaker is open: the keeper makes one attempt --
     * unless it saw the kernel lock go before the ARM came and is already
     * releasing with its whole bound.  The program does not wait for that:
     * past ARM_PROBE_NS the keeper is left to finish on its own. */
    long long arm_end = op == DLPL_OP_ARM && probe ? file_mono_ns() + ARM_PROBE_NS : 0;

    if (xsend(r->sock, &q) != 0) return EKEEPER;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (;;) {
        struct pollfd pf = { r->sock, POLLIN, 0 };
        struct timespec ts = { 0, 2 * 1000 * 1000 };
        int n = ppoll(&pf, 1, cancelled || arm_end ? &ts : NULL, intr && !cancelled ? &old : NULL);
        if (n > 0) break;
        if (n < 0 && errno != EINTR) break;
        if (arm_end && file_mono_ns() > arm_end) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            if (mode_out) *mode_out = 0;
            return ESILENT; /* abandoned (the caller drops r) */
        }
        if (n < 0 && intr && !cancelled && !dlpl_restartable(&old)) {
            struct dlpl_req c = { DLPL_OP_CANCEL, 0, 0, 0, 0 };
            cancelled = 1;
            cancel_ns = file_mono_ns();
            if (xsend(r->sock, &c) != 0) break;
        }
        if (cancelled && file_mono_ns() - cancel_ns > CANCEL_GRACE_NS) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            if (mode_out) *mode_out = 0;
            return ESILENT; /* abandoned (the caller drops r) */
        }
        if (cancelled) kill(r->kpid, SIGUSR1); /* again, until it answers */
    }
    if (xrecv(r->sock, &p) != 0) rc = EKEEPER;
    else rc = p.rc;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != EKEEPER && mode_out) *mode_out = p.mode;
    return rc;
}

int dlpl_fdinfo(int fd, char *buf, size_t cap) {
    char path[64];
    ssize_t n;
    int f;
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    if ((f = open(path, O_RDONLY | O_CLOEXEC)) < 0) return -1;
    n = read(f, buf, cap - 1);
    DLPL_REAL(close)(f);
    if (n <= 0) return -1;
    buf[n] = '\0';
    return 0;
}

/* What the description open on fd holds in the kernel, from
 * /proc/self/fdinfo: 0, 1 (READ) or 2 (WRITE) of the given kind. */
static int kernel_held(int fd, int kind) {
    char buf[4096];
    const char *tag = kind == DLPL_K_FLOCK ? " FLOCK " : " OFDLCK ";
    char *p;
    if (dlpl_fdinfo(fd, buf, sizeof buf) != 0) return 0;
    for (p = strstr(buf, "lock:"); p != NULL; p = strstr(p + 5, "lock:")) {
        char *eol = strchr(p, '\n'), *t;
        if (eol) *eol = '\0';
        if ((t = strstr(p, tag)) != NULL) {
            if (strstr(t, " WRITE ")) return 2;
            if (strstr(t, " READ ")) return 1;
        }
        if (eol) *eol = '\n';
    }
    return 0;
}

static struct rec *rec_new(int kind, const struct stat *st, int fd, const char *name, int *err) {
    struct rec *r = calloc(1, sizeof *r);
    int rc;
    if (r == NULL) {
        *err = ENOMEM;
        return NULL;
    }
    r->kind = kind;
    r->dev = st->st_dev;
    r->ino = st->st_ino;
    r->fd = fd;
    r->busy = 1;
    strcpy(r->name, name);
    if ((rc = dlpl_keeper_spawn(name, fd, &r->sock, &r->kpid)) != 0) {
        free(r);
        *err = rc;
        return NULL;
    }
    r->next = recs;
    recs = r;
    atomic_fetch_add((_Atomic int *)&dlpl_nrec, 1);
    return r;
}

/* After the kernel call: ARM the keeper (it checks whether the kernel
 * lock is there, releases the cluster lock if not, and otherwise watches
 * it); drop the record when the keeper holds nothing.  holding: r->mode
 * is held (after a lock), so a keeper found dead was lost with it.  mu
 * NOT held; returns with r released. */
static void file_arm(struct rec *r, int holding) {
    int mode = 0, st = -1;
    int rc = file_ask(r, DLPL_OP_ARM, 0, 0, 0, dlpl_client != NULL && dlock__client_breaker_open(dlpl_client), &mode);
    if (rc == EKEEPER && holding) st = keeper_status(r->kpid);
    lock_mu();
    if (rc == EKEEPER && !holding) r->mode = 0; /* an unlock: nothing to lose */
    if (rc != 0 || mode == 0) rec_drop_st(r, st);
    else {
        r->mode = mode;
        rec_release(r);
        mon_start();
        mon_wake();
    }
    unlock_mu();
}

/* A request that failed: the keeper holds nothing now (it exits). */
static void fail(struct rec *r) {
    lock_mu();
    rec_drop(r);
    unlock_mu();
}

/* The cluster part failed for a reason other than contention: the
 * server, the keeper.  0: go on with the local lock only (open); else the
 * errno to fail with (closed). */
static int policy(const char *name, int rc) {
    if (rc != EKEEPER) {
        dlpl_server_down(name, rc); /* once, until the server answers again */
    } else if (dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED) {
        dlpl_msg_rl(1, "'%s': no cluster-wide lock (the keeper process failed); refused with ENOLCK "
                       "(DLOCK_ON_ERROR=closed)", name);
    } else {
        dlpl_msg_rl(1, "'%s': no cluster-wide lock (the keeper process failed); using the local lock only "
                       "(DLOCK_ON_ERROR=open)", name);
    }
    return dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED ? ENOLCK : 0;
}

/* The program's circuit breaker (the library's, on the program's own
 * client), for the requests its keepers make: an answer closes it (and
 * the program says the server is back); ENOLCK from a request that
 * waited the unreachable bound opens it -- a try, or the breaker's own
 * probe, made one attempt and proves nothing more. */
static void breaker_after(int rc, int try, int probe) {
    if (dlpl_client == NULL) return;
    if (rc == 0 || rc == EBUSY) {
        dlock__client_breaker_report(dlpl_client, 0, 0);
        if (probe) dlpl_server_returned();
        else dlpl_server_up();
    } else if (rc == ENOLCK && !try && !probe) {
        dlock__client_breaker_report(dlpl_client, ENOLCK, 1);
    }
}

/* Unlock: the kernel first, then let the keeper see it. */
static void after_unlock(int kind, const struct stat *st, int fd) {
    struct rec *r;
    lock_mu();
    r = rec_find(kind, st, fd);
    if (r != NULL && !r->busy) {
        r->busy = 1;
        unlock_mu();
        file_arm(r, 0);
        return;
    }
    unlock_mu();
}

/* The kernel's part of a lock request.  call does it; undo drops what
 * the description/process holds in the kernel (a failed conversion loses
 * the old lock, as flock(2) does). */
struct kops {
    int (*call)(void *);
    void (*undo)(void *);
    void *arg;
    int (*trycall)(void *); /* call, never waiting (LOCK_NB, F_SETLK) */
};

/* One lock request on a mapped path, carried through lock_path's steps. */
struct lreq {
    int kind;             /* DLPL_K_* */
    const struct stat *st;
    int fd;
    const char *name;     /* the cluster lock's name */
    int want;             /* 1 shared, 2 exclusive */
    int try;              /* never wait (LOCK_NB, F_SETLK) */
    int held;             /* what the description holds in the kernel now */
    int busy_err;         /* errno for "held elsewhere": EWOULDBLOCK, EAGAIN */
    const struct kops *k;
    struct rec *r;        /* the record, claimed (busy) */
    int prev;             /* r's mode before this request */
    int probe;            /* the request is the breaker's probe */
};

/* No record yet (mu held): a new one, with its keeper.  0; ENOLCK if the
 * breaker is open; EKEEPER (with *err) if no keeper could be started. */
static int lock_new_rec(struct lreq *q, int *err) {
    if (q->held != 0 && q->kind != DLPL_K_POSIX) {
        /* The description holds a kernel lock that another process took
         * (we inherited the description): a conversion drops it first;
         * that process's keeper sees it go. */
        q->k->undo(q->k->arg);
    }
    if (dlpl_client != NULL && dlock__client_breaker_check(dlpl_client, &q->probe) != 0) {
        /* The program's circuit breaker is open (the server did not
         * answer for the whole unreachable bound): no keeper is asked
         * until the next probe; the policy decides at once. */
        return ENOLCK;
    }
    if ((q->r = rec_new(q->kind, q->st, q->fd, q->name, err)) == NULL) return EKEEPER;
    return 0;
}

/* The keeper granted the lock (it holds mode): now the kernel's part,
 * then ARM the keeper to watch it. */
static int lock_granted(struct lreq *q, int mode) {
    int kr, kerr;
    q->r->mode = mode; /* busy: only this thread looks at it */
    kr = q->k->call(q->k->arg);
    kerr = errno;
    file_arm(q->r, 1);
    errno = kerr;
    return kr;
}

/* Held elsewhere (EBUSY), or a signal ended the wait (EINTR).  A failed
 * conversion loses the old lock, as flock(2)'s does (for record locks
 * only when the keeper could not get the shared lock back: mode 0). */
static int lock_refused(struct lreq *q, int rc, int mode) {
    if (mode == 0 && (q->held || q->prev)) q->k->undo(q->k->arg);
    if (mode == 0) fail(q->r);
    else file_arm(q->r, 1);
    errno = rc == EBUSY ? q->busy_err : EINTR;
    return -1;
}

/* A signal ended the wait (flock -w's alarm: the caller's own bound)
 * while the keeper was in a round trip that the server did not answer:
 * the server is as good as unreachable for this call.  The keeper is
 * abandoned (it gives up what it may still get).  DLOCK_ON_ERROR=open:
 * the local lock if it is free now, as for an unreachable server; else,
 * and closed, EINTR, as the system call interrupted while it waits. */
static int lock_abandoned(struct lreq *q) {
    if (q->held || q->prev) q->k->undo(q->k->arg);
    fail(q->r);
    if (dlpl_conf.on_error == DLPL_ON_ERROR_OPEN) {
        (void)policy(q->name, ENOLCK);
        if (q->k->trycall(q->k->arg) == 0) return 0;
    }
    errno = EINTR;
    return -1;
}

/* The cluster part failed for a reason other than contention (rc; err:
 * why no keeper started): DLOCK_ON_ERROR decides between the local lock
 * alone and a refusal. */
static int lock_fallback(struct lreq *q, int rc, int err) {
    if (err != 0 && rc == EKEEPER)
        dlpl_msg_rl(2, "'%s': cannot start the keeper process: %s", q->name, strerror(err));
    if ((err = policy(q->name, rc)) != 0) {
        if (q->held) q->k->undo(q->k->arg);
        errno = err;
        return -1;
    }
    return q->k->call(q->k->arg);
}

/* The common lock path: claim the record (or make one, with its keeper),
 * ask the keeper for the cluster lock, then one step per answer.  Returns
 * 0, or -1 with errno. */
static int lock_path(struct lreq *q) {
    int rc, mode = 0, err = 0;

    lock_mu();
    q->r = rec_claim(q->kind, q->st, q->fd);
    q->prev = q->r != NULL ? q->r->mode : 0;
    if (q->r == NULL && (rc = lock_new_rec(q, &err)) != 0) {
        unlock_mu();
        return lock_fallback(q, rc, err);
    }
    unlock_mu();
    rc = file_ask(q->r, DLPL_OP_LOCK, q->want, q->try, !q->try, q->probe, &mode);
    breaker_after(rc, q->try, q->probe);
    if (rc == ESILENT) return lock_abandoned(q);
    if (rc == 0) return lock_granted(q, mode);
    if (rc == EBUSY || rc == EINTR) return lock_refused(q, rc, mode);
    fail(q->r);
    return lock_fallback(q, rc, 0);
}

/* ---------------------------------------------------------------- flock */

struct flock_arg {
    int fd, op;
};
static int flock_call(void *a) {
    struct flock_arg *f = a;
    return DLPL_REAL(flock)(f->fd, f->op);
}
static int flock_trycall(void *a) {
    struct flock_arg *f = a;
    return DLPL_REAL(flock)(f->fd, f->op | LOCK_NB);
}
static void flock_undo(void *a) {
    struct flock_arg *f = a;
    int e = errno;
    DLPL_REAL(flock)(f->fd, LOCK_UN);
    errno = e;
}

/* flock(fd, op) of a mapped file (hook_file.c found st and name):
 * op is LOCK_SH, LOCK_EX or LOCK_UN, with or without LOCK_NB. */
int dlpl_file_flock(int fd, int op, const struct stat *st, const char *name) {
    struct flock_arg fa = { fd, op };
    struct kops k = { flock_call, flock_undo, &fa, flock_trycall };
    int what = op & ~LOCK_NB, want, held, rc, e;

    if (what == LOCK_UN) {
        rc = DLPL_REAL(flock)(fd, op);
        e = errno;
        after_unlock(DLPL_K_FLOCK, st, fd);
        errno = e;
        return rc;
    }
    want = what == LOCK_EX ? 2 : 1;
    held = kernel_held(fd, DLPL_K_FLOCK);
    if (held == want) return 0; /* as the kernel: relocking with the same type changes nothing */
    struct lreq q = { .kind = DLPL_K_FLOCK, .st = st, .fd = fd, .name = name, .want = want,
                      .try = (op & LOCK_NB) != 0, .held = held, .busy_err = EWOULDBLOCK, .k = &k };
    return lock_path(&q);
}

/* ------------------------------------------------------- fcntl and lockf */

struct fcntl_arg {
    int fd, cmd, is64;
    struct flock *fl;
};
static int fcntl_call(void *a) {
    struct fcntl_arg *f = a;
    return f->is64 ? DLPL_REAL(fcntl64)(f->fd, f->cmd, f->fl) : DLPL_REAL(fcntl)(f->fd, f->cmd, f->fl);
}

/* A record-lock request (F_SETLK, F_SETLKW, F_GETLK, the F_OFD_ forms;
 * fl a lock, unlock or test) on a mapped file, whose record locks are
 * fname (NAME#fcntl): byte ranges on the server, owned by this process
 * or (OFD) by the description (range.c). */
int dlpl_file_lk(int fd, int cmd, struct flock *fl, int is64, const struct stat *st, const char *fname) {
    struct fcntl_arg fa = { fd, cmd, is64, fl };
    int ofd = cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW || cmd == F_OFD_GETLK;
    if (cmd == F_GETLK || cmd == F_OFD_GETLK) return dlpl_range_getlk(fd, st, fname, fl, ofd, fcntl_call, &fa);
    return dlpl_range_setlk(fd, st, fname, fl, cmd == F_SETLKW || cmd == F_OFD_SETLKW, ofd, fcntl_call, &fa);
}

/* ---------------------------------------------------------------- close */

/* close() while the implementation is loaded: the kernel releases what
 * the descriptor held (the last one of a description, or any one of a
 * file with POSIX locks); the keepers concerned are told at once, so the
 * cluster lock is free when close returns.  (Closes this hook does not
 * see -- fclose, dup2 over a locked descriptor, exit -- are noticed by
 * the keepers' kernel watch.)  The number's entry in the descriptor
 * cache (fd.c) is forgotten, before and after the close. */
int dlpl_file_close(int fd) {
    struct rec *hit[8], *r;
    struct stat st;
    int n = 0, i, rc, e, sr;

    dlpl_fd_forget(fd);
    if (DLPL_LIKELY(dlpl_nrec == 0 && dlpl_nrange == 0) || dlpl_guard || dlpl_state != DLPL_ACTIVE) {
        rc = DLPL_REAL(close)(fd);
        dlpl_fd_forget(fd); /* (errno untouched) */
        return rc;
    }
    dlpl_guard++;
    if ((sr = fstat(fd, &st)) == 0) {
        lock_mu();
        for (r = recs; r != NULL && n < 8; r = r->next) {
            if (r->busy || r->dev != st.st_dev || r->ino != st.st_ino) continue;
            if (r->kind != DLPL_K_POSIX && !file_same_description(fd, r->fd)) continue;
            r->busy = 1;
            hit[n++] = r;
        }
        unlock_mu();
    }
    if (sr == 0 && dlpl_nrange != 0) dlpl_range_closing(fd, &st);
    rc = DLPL_REAL(close)(fd);
    e = errno;
    dlpl_fd_forget(fd);
    for (i = 0; i < n; i++) file_arm(hit[i], 0);
    if (sr == 0 && rc == 0 && dlpl_nrange != 0) dlpl_range_close(&st);
    dlpl_guard--;
    errno = e;
    return rc;
}
