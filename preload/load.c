/* load.c -- the thin interposer's loader: libdlock_preload_impl.so, which
 * holds every lock decision and links libdlock (and with it hiredis and
 * OpenSSL), is loaded with dlopen() at the first call that concerns a
 * mapped lock, so that a process that takes none pays only for loading
 * this small object (docs/preload.md, "What a process pays").
 *
 * The load runs once, under load_mu (the real mutex) with dlpl_guard up:
 * every call the loader, the dynamic linker or the libraries' start-up
 * make meanwhile -- a pthread_mutex_lock, a close, from this thread or a
 * signal handler that interrupts it -- passes straight through.  Other
 * threads wait on load_mu.  fork() waits for a load in progress (below),
 * so that no child starts with the library half loaded.
 * The implementation is opened RTLD_LOCAL (its symbols do not join the
 * program's) and RTLD_NODELETE (its threads and handlers outlive any
 * dlclose), from the directory of this object.
 *
 * The thin object is also the keeper program (`ld.so
 * libdlock_preload.so --dlock-keeper ...`, entry dlpl_keeper_entry): it
 * loads the implementation the same way and runs its keeper.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

#define IMPL_NAME "libdlock_preload_impl.so"

const struct dlpl_impl *_Atomic dlpl_impl_loaded;
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static int load_failed; /* under load_mu: said once, not tried again */

/* This object's directory + IMPL_NAME, and dlpl_self_path (for keepers). */
static int impl_path(char *out, size_t cap) {
    Dl_info info;
    const char *slash;
    if (dlpl_self_path == NULL && dladdr((void *)impl_path, &info) != 0 && info.dli_fname != NULL)
        dlpl_self_path = realpath(info.dli_fname, NULL);
    if (dlpl_self_path == NULL || (slash = strrchr(dlpl_self_path, '/')) == NULL) return -1;
    return snprintf(out, cap, "%.*s/%s", (int)(slash - dlpl_self_path), dlpl_self_path, IMPL_NAME) < (int)cap ? 0
                                                                                                               : -1;
}

/* dlopen()s the implementation and returns the address of its symbol
 * sym, or NULL with the reason in err. */
static void *open_impl(const char *sym, char *err, size_t errlen) {
    char path[PATH_MAX];
    void *h, *fn;
    if (impl_path(path, sizeof path) != 0) {
        snprintf(err, errlen, "cannot find the directory of libdlock_preload.so");
        return NULL;
    }
    if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)) == NULL) {
        snprintf(err, errlen, "cannot load %s: %s", IMPL_NAME, dlerror());
        return NULL;
    }
    if ((fn = dlsym(h, sym)) == NULL) snprintf(err, errlen, "%s has no %s: %s", IMPL_NAME, sym, dlerror());
    return fn;
}

static const struct dlpl_impl *load_impl(void) {
    const struct dlpl_impl *impl = NULL;
    char err[512];
    dlpl_impl_start_fn start;
    err[0] = '\0';
    dlpl_guard++;
    DLPL_REAL(mutex_lock)(&load_mu);
    if ((impl = DLPL_LOADED()) == NULL && !load_failed) {
        if ((start = (dlpl_impl_start_fn)open_impl("dlpl_impl_start", err, sizeof err)) == NULL ||
            start(&impl, err, sizeof err) != 0) {
            impl = NULL;
            load_failed = 1;
            dlpl_msg("%s; %s", err,
                     dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED
                         ? "DLOCK_ON_ERROR=closed: mapped locks fail (file locks with ENOLCK)"
                         : "DLOCK_ON_ERROR=open: mapped locks take the local lock only (this host)");
        } else {
            atomic_store_explicit(&dlpl_impl_loaded, impl, memory_order_release);
        }
    }
    DLPL_REAL(mutex_unlock)(&load_mu);
    dlpl_guard--;
    return impl;
}

const struct dlpl_impl *dlpl_impl(void) {
    const struct dlpl_impl *impl = DLPL_LOADED();
    return DLPL_LIKELY(impl != NULL) ? impl : load_impl();
}

/* fork() waits for a load in progress and holds off a new one until it
 * has returned: glibc takes its list of fork handlers when a fork begins,
 * so a fork that began while the load was registering the library's
 * handlers (its client's, its random source's, OpenSSL's) would run
 * none of them, and the child would inherit the library mid-call.  Once
 * the implementation is loaded, no load can come: a fork costs nothing
 * more.  (A fork from the loading thread itself -- a signal handler in
 * the middle of the load -- passes straight through.) */
pid_t fork(void) {
    int held = 0, e;
    pid_t pid;
    if (DLPL_UNLIKELY(DLPL_LOADED() == NULL) && !dlpl_guard && dlpl_state == DLPL_ACTIVE && dlpl_conf.nrules > 0) {
        DLPL_REAL(mutex_lock)(&load_mu);
        held = 1;
    }
    pid = DLPL_REAL(fork) != NULL ? DLPL_REAL(fork)() : (errno = ENOSYS, -1);
    if (held) {
        e = errno;
        if (pid == 0) pthread_mutex_init(&load_mu, NULL); /* the child's own, free */
        else DLPL_REAL(mutex_unlock)(&load_mu);
        errno = e;
    }
    return pid;
}

/* The entry point when the dynamic loader runs this .so as a program (a
 * keeper).  Our constructor has not run (the loader leaves that to a
 * program's start-up code): every hook passes straight through. */
__attribute__((force_align_arg_pointer, noreturn, used)) void dlpl_keeper_entry(void) {
    static char buf[8192];
    char err[512];
    ssize_t len = 0, n;
    dlpl_keeper_main_fn keeper;
    int fd;

    dlpl_state = DLPL_KEEPER;
    program_invocation_short_name = "dlock-keeper";
    program_invocation_name = "dlock-keeper";
    if ((fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC)) >= 0) {
        while (len < (ssize_t)sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - (size_t)len)) > 0)
            len += n;
        close(fd);
    }
    buf[len] = '\0';
    if ((keeper = (dlpl_keeper_main_fn)open_impl("dlpl_keeper_main", err, sizeof err)) == NULL) {
        fprintf(stderr, "libdlock_preload.so: %s\n", err);
        exit(2);
    }
    exit(keeper(buf, (size_t)len));
}
