/* error.c -- the error table, dlock_strerror and the last-error message.
 *
 * One X-macro table gives each errno value dlock returns its name and its
 * message, so the two can never disagree.  The last-error message is kept
 * per thread, filled by one setter (dlock__seterr), as hiredis keeps
 * c->errstr.  And the DLOCK_DEBUG log of the library's decisions.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/base.h"

#define DLOCK__ERRORS(X)                                                                  \
    X(0, "OK", "success")                                                                 \
    X(EINVAL, "EINVAL", "invalid argument, object or configuration")                      \
    X(EBUSY, "EBUSY", "the lock is held")                                                 \
    X(EDEADLK, "EDEADLK", "the calling thread already holds the lock")                    \
    X(EPERM, "EPERM", "the calling thread does not hold the lock (or lost it)")           \
    X(ETIMEDOUT, "ETIMEDOUT", "the deadline passed before the lock was acquired")         \
    X(ENOLCK, "ENOLCK", "the lock server could not be reached")                           \
    X(EAGAIN, "EAGAIN", "the recursion limit was reached (or a system resource ran out)") \
    X(EOWNERDEAD, "EOWNERDEAD", "the previous holder died; state may be inconsistent")    \
    X(ENOTRECOVERABLE, "ENOTRECOVERABLE", "the lock is not recoverable")                  \
    X(ENOMEM, "ENOMEM", "out of memory")                                                  \
    X(EPROTO, "EPROTO", "the server answered something unexpected")                       \
    X(ESTALE, "ESTALE", "a write with a newer fencing token came first")                  \
    X(EINTR, "EINTR", "a signal handler ran while waiting (DLOCK_F_INTR)")                \
    X(ENOTSUP, "ENOTSUP", "the deployment does not offer this (Redlock)")                 \
    X(ENOENT, "ENOENT", "no such semaphore")                                              \
    X(EOVERFLOW, "EOVERFLOW", "the semaphore's value would pass its maximum")             \
    X(ERANGE, "ERANGE", "the buffer is shorter than the lock value block")

DLOCK_API const char *dlock_strerror(int err) {
    switch (err) {
#define X(code, name, msg) case code: return msg;
        DLOCK__ERRORS(X)
#undef X
    default: {
        /* Any other errno value: the C library's own text (a constant). */
        const char *s = strerrordesc_np(err);
        return s != NULL ? s : "unknown error";
    }
    }
}

DLOCK_API const char *dlock_err_name(int err) {
    switch (err) {
#define X(code, name, msg) case code: return name;
        DLOCK__ERRORS(X)
#undef X
    default: return "UNKNOWN";
    }
}

static __thread char last_error[512];

int dlock__seterr(int err, const char *fmt, ...) {
    va_list ap;
    int n = snprintf(last_error, sizeof last_error, "%s: ", dlock_err_name(err));
    if (n < 0 || (size_t)n >= sizeof last_error) return err;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return err;
}

void dlock__restoreerr(const char *saved) {
    snprintf(last_error, sizeof last_error, "%s", saved);
}

void dlock__clearerr(void) {
    last_error[0] = '\0';
}

DLOCK_API const char *dlock_last_error(void) {
    return last_error;
}

/* ------------------------------------------------------------ DLOCK_DEBUG */

static int debug_on = -1; /* -1: not read yet */
static pthread_once_t debug_once = PTHREAD_ONCE_INIT;
static dlock__mono debug_t0;

static void debug_init(void) {
    const char *v = secure_getenv("DLOCK_DEBUG");
    debug_t0 = dlock__now();
    __atomic_store_n(&debug_on, v != NULL && *v != '\0' && strcmp(v, "0") != 0, __ATOMIC_RELEASE);
}

static int debugging(void) {
    int on = __atomic_load_n(&debug_on, __ATOMIC_ACQUIRE);
    if (on < 0) {
        pthread_once(&debug_once, debug_init);
        on = __atomic_load_n(&debug_on, __ATOMIC_ACQUIRE);
    }
    return on;
}

void dlock__debug(const char *fmt, ...) {
    char line[640];
    int n, saved = errno;
    va_list ap;
    if (!debugging()) return;
    n = snprintf(line, sizeof line, "dlock[%ld:%ld] +%lld ms: ", (long)getpid(), (long)syscall(SYS_gettid),
                 (long long)((dlock__now() - debug_t0) / DLOCK__MS));
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line); /* one call, one line: threads' lines do not mix */
    errno = saved;
}
