/* hook_sem.c -- the thin interposer's named-semaphore hooks.  sem_open
 * and sem_unlink of a name that a sem: rule maps load the implementation
 * (sem.c) and go there; every other call goes there only once it is
 * loaded (before, no semaphore can be mapped), and otherwise straight to
 * the real function.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>

#include "preload.h"

#define CALL_REAL(fn, ...) (DLPL_REAL(fn) != NULL ? DLPL_REAL(fn)(__VA_ARGS__) : (errno = ENOSYS, -1))

/* Does a sem: rule map name (the hooks may act)? */
static int mapped_name(const char *name, int *own) {
    char dname[DLOCK_NAME_MAX + 1];
    int undo;
    return DLPL_UNLIKELY(dlpl_conf.nsem != 0) && dlpl_state == DLPL_ACTIVE && !dlpl_guard && name != NULL &&
           dlpl_map_sem(name, dname, sizeof dname, &undo, own);
}

/* The implementation, if it is loaded and the hooks may act. */
static const struct dlpl_impl *loaded(void) {
    const struct dlpl_impl *impl = DLPL_LOADED();
    return DLPL_UNLIKELY(impl != NULL) && !dlpl_guard && dlpl_state == DLPL_ACTIVE ? impl : NULL;
}

sem_t *sem_open(const char *name, int oflag, ...) {
    const struct dlpl_impl *impl;
    mode_t mode = 0;
    unsigned value = 0;
    int own;
    if (oflag & O_CREAT) {
        va_list ap;
        va_start(ap, oflag);
        mode = (mode_t)va_arg(ap, unsigned);
        value = va_arg(ap, unsigned);
        va_end(ap);
    }
    if (DLPL_REAL(sem_open) == NULL) {
        errno = ENOSYS;
        return SEM_FAILED;
    }
    if (mapped_name(name, &own)) {
        if ((impl = dlpl_impl()) != NULL) return impl->sem_open(name, oflag, mode, value);
        if (dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED) {
            errno = ENOLCK;
            return SEM_FAILED;
        }
    }
    return (oflag & O_CREAT) ? DLPL_REAL(sem_open)(name, oflag, mode, value) : DLPL_REAL(sem_open)(name, oflag);
}

/* The unlink of a name that a rule maps to itself gives its cluster
 * semaphore an expiry (sem.c), whether or not this process opened it. */
int sem_unlink(const char *name) {
    const struct dlpl_impl *impl = loaded();
    int own = 0;
    if (impl == NULL && mapped_name(name, &own) && own) impl = dlpl_impl();
    return impl != NULL ? impl->sem_unlink(name) : CALL_REAL(sem_unlink, name);
}

int sem_close(sem_t *s) {
    const struct dlpl_impl *impl = loaded();
    return impl != NULL ? impl->sem_close(s) : CALL_REAL(sem_close, s);
}

int sem_wait(sem_t *s) {
    const struct dlpl_impl *impl = loaded();
    return impl != NULL ? impl->sem_take(s, 0, CLOCK_REALTIME, NULL) : CALL_REAL(sem_wait, s);
}

int sem_trywait(sem_t *s) {
    const struct dlpl_impl *impl = loaded();
    return impl != NULL ? impl->sem_take(s, 1, CLOCK_REALTIME, NULL) : CALL_REAL(sem_trywait, s);
}

int sem_timedwait(sem_t *s, const struct timespec *t) {
    const struct dlpl_impl *impl = loaded();
    return impl != NULL ? impl->sem_take(s, 2, CLOCK_REALTIME, t) : CALL_REAL(sem_timedwait, s, t);
}

int sem_clockwait(sem_t *s, clockid_t clock, const struct timespec *t) {
    const struct dlpl_impl *impl = loaded();
    return impl != NULL ? impl->sem_take(s, 2, clock, t) : CALL_REAL(sem_clockwait, s, clock, t);
}

int sem_post(sem_t *s) {
    const struct dlpl_impl *impl = loaded();
    return impl != NULL ? impl->sem_post(s) : CALL_REAL(sem_post, s);
}

int sem_getvalue(sem_t *s, int *v) {
    const struct dlpl_impl *impl = loaded();
    return impl != NULL ? impl->sem_getvalue(s, v) : CALL_REAL(sem_getvalue, s, v);
}
