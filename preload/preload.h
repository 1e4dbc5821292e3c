/* preload.h -- internal declarations of the LD_PRELOAD mode, two shared
 * objects: libdlock_preload.so, the thin interposer that the program
 * loads (preload.c, fd.c, load.c and the hook_*.c files: libc only), and
 * libdlock_preload_impl.so, the implementation that it loads with
 * dlopen() at the first call on a mapped lock (impl.c, file.c, keeper.c,
 * mutex.c, sem.c, range.c: linked with libdlock).  Interposition and
 * mapping rules only; every lock decision is the library's (dlock.h, and
 * dlock_private.h for the few calls beyond it).  The thin object exports
 * its dlpl_ names for the implementation (exports.map).  See
 * docs/preload.md for the design.
 */
#ifndef DLPL_PRELOAD_H
#define DLPL_PRELOAD_H

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <semaphore.h>
#include <stdio.h>
#include <sys/types.h>

#include <dlock.h>

#define DLPL_TLS __attribute__((tls_model("initial-exec")))
#define DLPL_HIDDEN __attribute__((visibility("hidden")))
#define DLPL_LIKELY(x) __builtin_expect(!!(x), 1)
#define DLPL_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* What this copy of the library is doing. */
enum { DLPL_OFF = 0, DLPL_ACTIVE = 1, DLPL_KEEPER = 2 };
extern int dlpl_state;

/* Set while the shim itself works, so that calls made by it (or by the
 * library, hiredis, OpenSSL on its behalf) pass straight through. */
extern __thread int dlpl_guard DLPL_TLS;

/* The real functions, each resolved once with dlsym(RTLD_NEXT) / dlvsym. */
struct dlpl_real {
    int (*flock)(int, int);
    int (*fcntl)(int, int, ...);
    int (*fcntl64)(int, int, ...);
    int (*lockf)(int, int, off_t);
    int (*lockf64)(int, int, off_t);
    int (*close)(int);
    int (*dup)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*close_range)(unsigned, unsigned, int);
    void (*closefrom)(int);
    int (*fclose)(FILE *);
    FILE *(*freopen)(const char *, const char *, FILE *);
    FILE *(*freopen64)(const char *, const char *, FILE *);
    int (*closedir)(DIR *);
    int (*mutex_lock)(pthread_mutex_t *);
    int (*mutex_trylock)(pthread_mutex_t *);
    int (*mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
    int (*mutex_clocklock)(pthread_mutex_t *, clockid_t, const struct timespec *);
    int (*mutex_unlock)(pthread_mutex_t *);
    int (*mutex_consistent)(pthread_mutex_t *);
    int (*cond_wait)(pthread_cond_t *, pthread_mutex_t *);
    int (*cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
    int (*cond_clockwait)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);
    sem_t *(*sem_open)(const char *, int, ...);
    int (*sem_close)(sem_t *);
    int (*sem_unlink)(const char *);
    int (*sem_wait)(sem_t *);
    int (*sem_trywait)(sem_t *);
    int (*sem_timedwait)(sem_t *, const struct timespec *);
    int (*sem_clockwait)(sem_t *, clockid_t, const struct timespec *);
    int (*sem_post)(sem_t *);
    int (*sem_getvalue)(sem_t *, int *);
    pid_t (*fork)(void);
};
extern struct dlpl_real dlpl_real;
void dlpl_resolve_one(size_t off);
/* The real fn, resolved at its first use; NULL if it cannot be (the next
 * definition is the hook itself: said once, the hook fails with ENOSYS). */
#define DLPL_REAL(fn)                                                                                               \
    (DLPL_LIKELY(__atomic_load_n(&dlpl_real.fn, __ATOMIC_ACQUIRE) != NULL)                                          \
         ? dlpl_real.fn                                                                                             \
         : (dlpl_resolve_one(offsetof(struct dlpl_real, fn)), __atomic_load_n(&dlpl_real.fn, __ATOMIC_ACQUIRE)))

/* Configuration, read once at start-up (secure_getenv). */
enum { DLPL_ON_ERROR_OPEN, DLPL_ON_ERROR_CLOSED };
enum { DLPL_ON_LOST_WARN, DLPL_ON_LOST_ABORT };
enum { DLPL_RULE_FILE, DLPL_RULE_MUTEX, DLPL_RULE_SEM };

struct dlpl_rule {
    int kind;
    int relative; /* file: glob relative to DLOCK_ROOT */
    int undo;     /* sem+undo: units leased to the process (dlock_semattr_setundo) */
    char *pattern; /* glob, or symbol; sem: a glob of semaphore names */
    char *name;    /* explicit lock name, or NULL */
};

struct dlpl_conf {
    struct dlpl_rule *rules;
    size_t nrules;
    size_t nfile; /* file rules */
    size_t nsem;  /* sem rules */
    char *root;   /* DLOCK_ROOT without trailing '/', or NULL */
    size_t rootlen;
    const char *url, *prefix; /* as read, for keepers; may be NULL */
    /* DLOCK_LOCK_DELAY_MS and DLOCK_ON_RISK as read (for keepers and
     * messages; may be NULL) and what they say: the delay (-1: unset,
     * the URL's; -2: not a delay) and the signal (0: ignore or unset;
     * -1: neither ignore nor signal:SIG). */
    const char *lock_delay, *on_risk;
    int lock_delay_ms, risk_sig;
    int on_error, on_lost, verbose;
    int bad; /* the configuration was refused: nothing is mapped */
};
extern struct dlpl_conf dlpl_conf;
extern dlock_client_t *dlpl_client; /* in-process client (impl.c: mutexes, record locks) */
extern char *dlpl_self_path;        /* the thin .so, for keepers (load.c) */
extern char *dlpl_interp;           /* the dynamic loader (impl.c) */

/* load.c: the implementation, loaded once, at the first call that
 * concerns a mapped lock (or at start-up when an exec kept record locks
 * of this process).  Each entry is what a hook does once the call is
 * known to be about a mapped lock; dlpl_guard is up around every call. */
struct flock;
struct stat;
struct dlpl_impl {
    /* file.c: flock of a mapped descriptor (st, name: its file and lock
     * name); fcntl's and lockf's record locks (fname: NAME#fcntl); close
     * while the implementation is loaded */
    int (*flock)(int fd, int op, const struct stat *st, const char *name);
    int (*lk)(int fd, int cmd, struct flock *fl, int is64, const struct stat *st, const char *fname);
    int (*close)(int fd);
    /* mutex.c: mapped mutex i of dlpl_mxs (how: 0 lock, 1 trylock, 2 timed) */
    int (*mutex_lock)(int i, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *abstime);
    int (*mutex_unlock)(int i, pthread_mutex_t *m);
    int (*mutex_consistent)(int i, pthread_mutex_t *m);
    int (*cond_wait)(int i, pthread_cond_t *c, pthread_mutex_t *m, int how, clockid_t clock,
                     const struct timespec *t);
    /* sem.c: the sem_* hooks' work (a semaphore that is not mapped goes to
     * the real function there) */
    sem_t *(*sem_open)(const char *name, int oflag, mode_t mode, unsigned value);
    int (*sem_unlink)(const char *name);
    int (*sem_close)(sem_t *s);
    int (*sem_take)(sem_t *s, int how, clockid_t clock, const struct timespec *t); /* how: 0 wait, 1 try, 2 timed */
    int (*sem_post)(sem_t *s);
    int (*sem_getvalue)(sem_t *s, int *v);
};
/* The implementation, loaded on the first call; NULL if it cannot be (it
 * said so once, on stderr): the hooks then apply DLOCK_ON_ERROR. */
const struct dlpl_impl *dlpl_impl(void);
/* The implementation if it is loaded already, else NULL: nothing
 * cluster-wide can be held before then. */
extern const struct dlpl_impl *_Atomic dlpl_impl_loaded;
#define DLPL_LOADED() atomic_load_explicit(&dlpl_impl_loaded, memory_order_acquire)
/* The implementation's side of the load (impl.c): 0 and *out, or -1 with
 * the reason in err.  And the keeper's main, run by the thin object's
 * entry point (keeper.c): the exit status. */
typedef int (*dlpl_impl_start_fn)(const struct dlpl_impl **out, char *err, size_t errlen);
typedef int (*dlpl_keeper_main_fn)(char *cmdline, size_t len);

/* Parses DLOCK_MAP-style text (rules separated by sep) into dlpl_conf;
 * 0, or -1 with a one-line reason in err. */
int dlpl_parse_map(const char *text, int sep, const char *origin, char *err, size_t errlen);
/* The lock name for an absolute path, or 0 when no file rule matches. */
int dlpl_map_path(const char *path, char *name, size_t cap);
/* The lock name for a semaphore name, or 0 when no sem: rule matches
 * (*undo: the rule is sem+undo; *own: it has no =NAME). */
int dlpl_map_sem(const char *sname, char *out, size_t cap, int *undo, int *own);

/* Would a signal handler that just ran in this thread (whose signal mask
 * is *mask) have restarted a system call (SA_RESTART)?  Which signal ran
 * cannot be told, so 1 only if every unblocked signal with a handler
 * restarts. */
int dlpl_restartable(const sigset_t *mask);

/* Messages: one line on stderr, "dlock: prog[pid]: ...". */
void dlpl_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, at most once every 10 s per key (a small integer). */
void dlpl_msg_rl(int key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* In a lost-lock handler: why the cluster lock was lost, for its message. */
static inline const char *dlpl_lost_why(void) {
    return dlock_lost_reason() == DLOCK_LOST_BROKEN
               ? "it was broken (dlock break) or taken by another owner: the server refused its renewal"
               : "its lease ran out before a renewal reached the server";
}
const char *dlpl_policy_text(void);
/* The lock server's reachability as the program sees it: _down when a
 * mapped lock gets no cluster-wide answer (rc: why), _up when one does.
 * Each says so on stderr once per change and host (the host-wide outage
 * record: the first program to see it; DLOCK_VERBOSE: each): once when
 * the program goes local-only (DLOCK_ON_ERROR=open) or starts refusing
 * (closed), once when the server answers again. */
void dlpl_server_down(const char *name, int rc);
void dlpl_server_up(void);
/* The program's probe found the server back: told once per host per outage. */
void dlpl_server_returned(void);
/* The circuit breaker's back-off period of the preload's clients (the
 * program's and its keepers'), unless DLOCK_URL sets breaker_ms. */
#define DLPL_BREAKER_MS 30000u

/* file.c (implementation) */
void dlpl_file_init(void);
void dlpl_file_atfork_prepare(void);
void dlpl_file_atfork_parent(void);
void dlpl_file_atfork_child(void);
int dlpl_file_flock(int fd, int op, const struct stat *st, const char *name);
int dlpl_file_lk(int fd, int cmd, struct flock *fl, int is64, const struct stat *st, const char *fname);
int dlpl_file_close(int fd);
/* /proc/self/fdinfo of fd into buf (cap bytes, NUL-terminated): 0, or
 * -1 if it cannot be read. */
int dlpl_fdinfo(int fd, char *buf, size_t cap);
extern volatile int dlpl_nrec;
/* hook_file.c (thin): does this process hold POSIX record locks (an exec
 * kept them)?  Then the implementation is loaded at start-up, to take
 * them over (dlpl_range_adopt). */
int dlpl_posix_locks_held(void);
/* The fork handler of the unmapped-file cache's mutex (hook_file.c;
 * preload.c registers it): phase 0 before the fork, 1 in the parent, 2 in
 * the child. */
void dlpl_neg_atfork(int phase);

/* range.c: record locks (fcntl F_SETLK/F_SETLKW/F_GETLK and lockf; with
 * ofd, the F_OFD_* forms) on mapped files, as byte ranges in the
 * server's range table of name (docs/preload.md, "Record locks").  kcall
 * makes the program's own kernel call.  dlpl_range_closing before and
 * dlpl_range_close after close() of a descriptor of the file st. */
struct flock;
struct stat;
int dlpl_range_setlk(int fd, const struct stat *st, const char *name, struct flock *fl, int wait, int ofd,
                     int (*kcall)(void *), void *karg);
int dlpl_range_getlk(int fd, const struct stat *st, const char *name, struct flock *fl, int ofd,
                     int (*kcall)(void *), void *karg);
void dlpl_range_closing(int fd, const struct stat *st);
void dlpl_range_close(const struct stat *st);
/* At start-up: the record locks held already (kept across exec). */
void dlpl_range_adopt(void);
extern volatile int dlpl_nrange;

/* fd.c: the per-descriptor cache of "no rule maps this descriptor's
 * file", so that an unmapped lock call costs no system call more than
 * without the library.  unmapped: one load.  token: the slot's word,
 * read before the file is looked at (DLPL_FD_NONE: no slot, fd too large
 * or no memory); remember stores "not mapped" unless the number was let
 * go meanwhile; forget (async-signal-safe) lets it go. */
#define DLPL_FD_NONE 1u
#define DLPL_FD_SHIFT 10                   /* slots per page: 1 << 10 */
#define DLPL_FD_NPAGES 1024u               /* descriptors below 1 << 20 */
extern _Atomic(_Atomic uint32_t *) dlpl_fd_pages[DLPL_FD_NPAGES] DLPL_HIDDEN;
static inline int dlpl_fd_unmapped(int fd) {
    _Atomic uint32_t *p;
    if ((unsigned)fd >= DLPL_FD_NPAGES << DLPL_FD_SHIFT) return 0;
    p = atomic_load_explicit(&dlpl_fd_pages[(unsigned)fd >> DLPL_FD_SHIFT], memory_order_acquire);
    return p != NULL &&
           (atomic_load_explicit(&p[(unsigned)fd & ((1u << DLPL_FD_SHIFT) - 1)], memory_order_acquire) & 1u) != 0;
}
uint32_t dlpl_fd_token(int fd);
void dlpl_fd_remember(int fd, uint32_t token);
void dlpl_fd_forget(int fd);

/* hook_mutex.c (thin): the mapped mutexes, resolved at start-up by
 * symbol and sorted by address; mutex.c (implementation) keeps their
 * dlock mutexes by the same index. */
#define DLPL_MAX_MUTEX 64
struct dlpl_mx {
    void *addr;
    const char *name;   /* the dlock mutex's name */
    const char *symbol; /* the rule's symbol */
};
extern struct dlpl_mx dlpl_mxs[DLPL_MAX_MUTEX];
int dlpl_mutex_init(void); /* resolves mutex rules; number mapped */
/* DLOCK_LOCK_DELAY_MS and DLOCK_ON_RISK into dlpl_conf (preload.c): read
 * at start-up by the program, and by a keeper (the program passes them
 * on in its environment). */
void dlpl_conf_lock_opts(void);
/* DLOCK_LOCK_DELAY_MS on the attributes of a mapped lock (mutex.c): a bad
 * value is said once and leaves the delay to the URL's lock_delay_ms. */
void dlpl_lock_delay_set(dlock_mutexattr_t *a);
/* DLOCK_ON_RISK on the attributes of a mapped lock (mutex.c): with
 * signal:SIG, whom gets SIG when the hold's lease is at risk. */
void dlpl_risk_set(dlock_mutexattr_t *a, pid_t whom);
extern volatile int dlpl_nmutex;
/* mutex.c */
int dlpl_mx_lock(int i, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *abstime);
int dlpl_mx_unlock(int i, pthread_mutex_t *m);
int dlpl_mx_consistent(int i, pthread_mutex_t *m);
int dlpl_mx_cond(int i, pthread_cond_t *c, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *t);
/* The fork handler of mutex.c's own mutex (impl.c runs it): phase 0
 * before the fork, 1 in the parent, 2 in the child. */
void dlpl_mx_atfork(int phase);

/* sem.c (implementation): the sem_* hooks' work; rules of kind
 * DLPL_RULE_SEM, looked up at sem_open. */
sem_t *dlpl_sem_open(const char *name, int oflag, mode_t mode, unsigned value);
int dlpl_sem_unlink(const char *name);
int dlpl_sem_close(sem_t *s);
int dlpl_sem_take(sem_t *s, int how, clockid_t clock, const struct timespec *t);
int dlpl_sem_post(sem_t *s);
int dlpl_sem_getvalue(sem_t *s, int *v);

/* keeper.c */
enum { DLPL_K_FLOCK = 0, DLPL_K_POSIX = 1, DLPL_K_OFD = 2 };
/* Starts a keeper (flock locks only) for the lock name, watching the file
 * open on fd (re-opened as its own description).  0 with *sock and
 * *pid, or an errno value. */
int dlpl_keeper_spawn(const char *name, int fd, int *sock, pid_t *pid);
/* The keeper's main (the implementation's dlpl_keeper_main, run by the
 * thin object's entry point): its arguments from /proc/self/cmdline;
 * the exit status. */
int dlpl_keeper_main(char *cmdline, size_t len);
/* A keeper's exit status when a signal (SIGTERM, SIGHUP, SIGINT) ended it
 * while it held a lock: the program is told, as of a killed keeper. */
#define DLPL_KEEPER_TERMINATED 3
/* DLOCK_ON_LOST=abort: stops the processes that root started (its
 * descendants, found through /proc; never a keeper, nor the caller), and
 * root itself if with_root: SIGSTOP while they are collected (so that none
 * escapes by forking), then SIGABRT and SIGCONT; whoever is still there a
 * second later gets SIGKILL.  Returns how many processes were signalled. */
int dlpl_stop_tree(pid_t root, int with_root);
/* A held lock or unit was lost (what: "the cluster lock of mutex", ...;
 * meaning: what that means for the program): DLOCK_ON_LOST's policy, a
 * message, and with abort the program and what it started stopped. */
void dlpl_lost_apply(const char *what, const char *name, const char *meaning);

/* The request protocol between a process and its keeper (SOCK_SEQPACKET). */
enum { DLPL_OP_LOCK = 1, DLPL_OP_ARM = 2, DLPL_OP_UNLOCK = 3, DLPL_OP_CANCEL = 4 };
struct dlpl_req {
    int op;
    int mode; /* 1 shared, 2 exclusive */
    int try;
    long tid; /* the program's thread asking (LOCK): the holder identity */
    int probe; /* the program's circuit breaker is open: LOCK, the first attempt is its
                * probe; ARM, a release makes one attempt */
};
struct dlpl_rep {
    int rc;   /* 0 or an errno value (dlock's) */
    int mode; /* what the keeper holds now: 0, 1, 2 */
};

#endif
