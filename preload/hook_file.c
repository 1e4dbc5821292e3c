/* hook_file.c -- the thin interposer's file-lock hooks: flock, fcntl
 * (F_SETLK, F_SETLKW, F_GETLK, the F_OFD_* forms, F_DUPFD), lockf and
 * close.  They decide whether a call concerns a mapped file -- the
 * descriptor cache (fd.c), then an fstat and the path's rules -- and pass
 * every other call straight to the real function.  A call on a mapped
 * file goes to the implementation (file.c, loaded then: load.c).  Before
 * it is loaded nothing cluster-wide can be held, so an unlock or a close
 * is the kernel's alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload.h"

static pthread_mutex_t neg_mu = PTHREAD_MUTEX_INITIALIZER; /* the unmapped-file cache below */

/* ------------------------------------------------------------- mapping */

/* Files known to match no rule, so that locks on them cost one fstat
 * more than without the library, not a readlink and the globs.  Keyed by
 * device, inode and ctime: a new file on a reused inode, or a rename into
 * a mapped path, changes the ctime and misses. */
#define NEG_SLOTS 256
struct neg {
    dev_t dev;
    ino_t ino;
    struct timespec ctim;
};
static struct neg neg[NEG_SLOTS];

static size_t neg_slot(const struct stat *st) {
    return (size_t)((st->st_ino * 0x9E3779B97F4A7C15ull) ^ st->st_dev) % NEG_SLOTS;
}

static int neg_known(const struct stat *st) {
    const struct neg *e = &neg[neg_slot(st)];
    int hit;
    DLPL_REAL(mutex_lock)(&neg_mu);
    hit = e->ino == st->st_ino && e->dev == st->st_dev && e->ctim.tv_sec == st->st_ctim.tv_sec &&
          e->ctim.tv_nsec == st->st_ctim.tv_nsec && e->ino != 0;
    DLPL_REAL(mutex_unlock)(&neg_mu);
    return hit;
}

static void neg_remember(const struct stat *st) {
    struct neg *e = &neg[neg_slot(st)];
    DLPL_REAL(mutex_lock)(&neg_mu);
    e->dev = st->st_dev;
    e->ino = st->st_ino;
    e->ctim = st->st_ctim;
    DLPL_REAL(mutex_unlock)(&neg_mu);
}

/* The path open on fd, if it is a mapped regular file or directory.  A
 * descriptor found unmapped is remembered (fd.c): its next lock calls
 * make no system call here. */
static int map_fd(int fd, struct stat *st, char *name) {
    char link[64], path[PATH_MAX + 16];
    ssize_t n;
    uint32_t tok;
    if (dlpl_fd_unmapped(fd)) return 0;
    tok = dlpl_fd_token(fd); /* before the file is looked at */
    if (fstat(fd, st) != 0) return 0;
    if ((!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)) || neg_known(st)) {
        dlpl_fd_remember(fd, tok);
        return 0;
    }
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n <= 0 || n >= (ssize_t)sizeof path - 1) return 0;
    path[n] = '\0';
    if (n > 10 && strcmp(path + n - 10, " (deleted)") == 0) path[n - 10] = '\0';
    if (path[0] != '/') return 0;
    if (dlpl_map_path(path, name, DLOCK_NAME_MAX + 1)) return 1;
    neg_remember(st);
    dlpl_fd_remember(fd, tok);
    return 0;
}

/* A refused configuration with DLOCK_ON_ERROR=closed refuses every lock. */
static int refused(void) {
    return dlpl_conf.bad && dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED;
}

static int active(void) {
    return dlpl_state == DLPL_ACTIVE && !dlpl_guard && (dlpl_conf.nfile > 0 || refused());
}
/* The hooks pass a descriptor known to be unmapped (fd.c) straight
 * through, after active(): one load more, no system call.  (map_fd alone
 * makes such entries, so none exists while a configuration is refused.) */

/* The implementation for a lock request on a mapped file, or NULL when it
 * cannot be loaded: then DLOCK_ON_ERROR=closed refuses (*refuse 1), open
 * takes the kernel lock alone. */
static const struct dlpl_impl *impl_for_lock(int *refuse) {
    const struct dlpl_impl *impl = dlpl_impl();
    *refuse = impl == NULL && dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED;
    return impl;
}

/* Under glibc's headers (and _FILE_OFFSET_BITS=64) fcntl and lockf may
 * be aliases of fcntl64 and lockf64: the hooks carry their names in
 * assembly. */
int dlpl_fcntl(int fd, int cmd, ...) __asm__("fcntl");
int dlpl_fcntl64(int fd, int cmd, ...) __asm__("fcntl64");
int dlpl_lockf(int fd, int cmd, off_t len) __asm__("lockf");
int dlpl_lockf64(int fd, int cmd, off_t len) __asm__("lockf64");

/* ---------------------------------------------------------------- flock */

static int do_flock(int fd, int op) {
    char name[DLOCK_NAME_MAX + 1];
    const struct dlpl_impl *impl;
    int what = op & ~LOCK_NB, refuse;
    struct stat st;

    if (what != LOCK_SH && what != LOCK_EX && what != LOCK_UN) return DLPL_REAL(flock)(fd, op);
    if (refused()) {
        if (what == LOCK_UN) return DLPL_REAL(flock)(fd, op);
        errno = ENOLCK;
        return -1;
    }
    if (!map_fd(fd, &st, name)) return DLPL_REAL(flock)(fd, op);
    if (what == LOCK_UN && (impl = DLPL_LOADED()) == NULL) return DLPL_REAL(flock)(fd, op);
    if (what != LOCK_UN && (impl = impl_for_lock(&refuse)) == NULL) {
        if (!refuse) return DLPL_REAL(flock)(fd, op);
        errno = ENOLCK;
        return -1;
    }
    return impl->flock(fd, op, &st, name);
}

int flock(int fd, int op) {
    int rc;
    if (DLPL_LIKELY(!active()) || dlpl_fd_unmapped(fd))
        return DLPL_REAL(flock) ? DLPL_REAL(flock)(fd, op) : (errno = ENOSYS, -1);
    dlpl_guard++;
    rc = do_flock(fd, op);
    dlpl_guard--;
    return rc;
}

/* ------------------------------------------------------- fcntl and lockf */

static int fcntl_real(int fd, int cmd, struct flock *fl, int is64) {
    return is64 ? DLPL_REAL(fcntl64)(fd, cmd, fl) : DLPL_REAL(fcntl)(fd, cmd, fl);
}

static int do_lk(int fd, int cmd, struct flock *fl, int is64) {
    char name[DLOCK_NAME_MAX + 1], fname[DLOCK_NAME_MAX + 8];
    int getlk = cmd == F_GETLK || cmd == F_OFD_GETLK, refuse;
    const struct dlpl_impl *impl;
    struct stat st;

    if (fl == NULL || (fl->l_type != F_RDLCK && fl->l_type != F_WRLCK && fl->l_type != F_UNLCK))
        return fcntl_real(fd, cmd, fl, is64); /* the kernel reports the error */
    if (refused()) {
        if (getlk || fl->l_type == F_UNLCK) return fcntl_real(fd, cmd, fl, is64);
        errno = ENOLCK;
        return -1;
    }
    if (!map_fd(fd, &st, name)) return fcntl_real(fd, cmd, fl, is64);
    /* Record locks and flock locks are independent on Linux; their
     * cluster locks are too (else a program holding both on one file
     * would wait for itself). */
    snprintf(fname, sizeof fname, "%s#fcntl", name);
    if (strlen(fname) > DLOCK_NAME_MAX) return fcntl_real(fd, cmd, fl, is64);
    if (fl->l_type == F_UNLCK && (impl = DLPL_LOADED()) == NULL) return fcntl_real(fd, cmd, fl, is64);
    if (fl->l_type != F_UNLCK && (impl = impl_for_lock(&refuse)) == NULL) {
        if (!refuse || getlk) return fcntl_real(fd, cmd, fl, is64);
        errno = ENOLCK;
        return -1;
    }
    return impl->lk(fd, cmd, fl, is64, &st, fname);
}
/* F_DUPFD, F_DUPFD_CLOEXEC: the number returned may have been closed
 * where no hook saw it; what was known of it is forgotten (fd.c). */
static int fcntl_dup(int fd, int cmd, void *arg, int is64) {
    int (*fn)(int, int, ...) = is64 ? DLPL_REAL(fcntl64) : DLPL_REAL(fcntl);
    int rc = fn != NULL ? fn(fd, cmd, arg) : (errno = ENOSYS, -1);
    if (rc >= 0) dlpl_fd_forget(rc);
    return rc;
}

static int fcntl_common(int fd, int cmd, void *arg, int is64) {
    int rc;
    if (DLPL_UNLIKELY(cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) return fcntl_dup(fd, cmd, arg, is64);
    if (DLPL_LIKELY(!active()) ||
        (cmd != F_SETLK && cmd != F_SETLKW && cmd != F_GETLK && cmd != F_OFD_SETLK && cmd != F_OFD_SETLKW &&
         cmd != F_OFD_GETLK) || dlpl_fd_unmapped(fd)) {
        int (*fn)(int, int, ...) = is64 ? DLPL_REAL(fcntl64) : DLPL_REAL(fcntl);
        if (fn == NULL) {
            errno = ENOSYS;
            return -1;
        }
        return fn(fd, cmd, arg);
    }
    dlpl_guard++;
    rc = do_lk(fd, cmd, (struct flock *)arg, is64);
    dlpl_guard--;
    return rc;
}

int dlpl_fcntl(int fd, int cmd, ...) {
    va_list ap;
    void *arg;
    va_start(ap, cmd);
    arg = va_arg(ap, void *); /* as glibc does: every argument fits */
    va_end(ap);
    return fcntl_common(fd, cmd, arg, 0);
}


int dlpl_fcntl64(int fd, int cmd, ...) {
    va_list ap;
    void *arg;
    va_start(ap, cmd);
    arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(fd, cmd, arg, 1);
}

/* lockf as glibc defines it, over the hooked fcntl path. */
static int lockf_common(int fd, int cmd, off_t len, int is64) {
    struct flock fl;
    int rc;
    if (DLPL_LIKELY(!active()) || dlpl_fd_unmapped(fd)) {
        int (*fn)(int, int, off_t) = is64 ? DLPL_REAL(lockf64) : DLPL_REAL(lockf);
        if (fn == NULL) {
            errno = ENOSYS;
            return -1;
        }
        return fn(fd, cmd, len);
    }
    memset(&fl, 0, sizeof fl);
    fl.l_whence = SEEK_CUR;
    fl.l_start = 0;
    fl.l_len = len;
    dlpl_guard++;
    switch (cmd) {
    case F_TEST:
        fl.l_type = F_RDLCK;
        rc = do_lk(fd, F_GETLK, &fl, is64);
        if (rc == 0 && fl.l_type != F_UNLCK && fl.l_pid != getpid()) {
            errno = EACCES;
            rc = -1;
        }
        break;
    case F_ULOCK:
        fl.l_type = F_UNLCK;
        rc = do_lk(fd, F_SETLK, &fl, is64);
        break;
    case F_LOCK:
        fl.l_type = F_WRLCK;
        rc = do_lk(fd, F_SETLKW, &fl, is64);
        break;
    case F_TLOCK:
        fl.l_type = F_WRLCK;
        rc = do_lk(fd, F_SETLK, &fl, is64);
        break;
    default:
        errno = EINVAL;
        rc = -1;
    }
    dlpl_guard--;
    return rc;
}

int dlpl_lockf(int fd, int cmd, off_t len) {
    return lockf_common(fd, cmd, len, 0);
}
int dlpl_lockf64(int fd, int cmd, off_t len) {
    return lockf_common(fd, cmd, len, 1);
}

/* ---------------------------------------------------------------- close */

/* close(): the descriptor cache's entry for the number is forgotten,
 * before and after the close (fd.c); once the implementation is loaded,
 * it closes (a descriptor of a locked file tells its keeper at once). */
int close(int fd) {
    const struct dlpl_impl *impl = DLPL_LOADED();
    int rc;
    dlpl_fd_forget(fd);
    if (DLPL_LIKELY(impl == NULL) || dlpl_guard || dlpl_state != DLPL_ACTIVE) {
        rc = DLPL_REAL(close) ? DLPL_REAL(close)(fd) : (errno = ENOSYS, -1);
        dlpl_fd_forget(fd); /* (errno untouched) */
        return rc;
    }
    return impl->close(fd);
}

/* ------------------------------------------------------------- exec */

/* Does /proc/locks show a POSIX record lock of this process?  Only an
 * exec can have left one at start-up. */
int dlpl_posix_locks_held(void) {
    char line[256], me[24];
    FILE *p = fopen("/proc/locks", "re");
    int found = 0;
    if (p == NULL) return 0;
    snprintf(me, sizeof me, " %ld ", (long)getpid());
    while (!found && fgets(line, sizeof line, p) != NULL)
        found = strstr(line, " POSIX ") != NULL && strstr(line, "->") == NULL && strstr(line, me) != NULL;
    fclose(p);
    return found;
}

/* The unmapped-file cache's mutex through fork (preload.c's handlers):
 * phase 0 before, 1 in the parent after, 2 in the child (a fresh one). */
void dlpl_neg_atfork(int phase) {
    if (phase == 0) DLPL_REAL(mutex_lock)(&neg_mu);
    else if (phase == 1) DLPL_REAL(mutex_unlock)(&neg_mu);
    else pthread_mutex_init(&neg_mu, NULL);
}
