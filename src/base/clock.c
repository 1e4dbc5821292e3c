/* clock.c -- monotonic time, deadline conversion and timed condvar waits.
 *
 * All lease and wait arithmetic runs on CLOCK_MONOTONIC, so a wall-clock
 * step never shortens or stretches a wait.  A CLOCK_REALTIME deadline (as
 * POSIX timedlock takes) is converted once, on entry, to a monotonic one.
 */
#include <errno.h>
#include <time.h>

#include "base/base.h"

static int64_t ts_ns(const struct timespec *ts) {
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

dlock__mono dlock__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts_ns(&ts);
}

int dlock__deadline(clockid_t clock, const struct timespec *abstime, dlock__mono *out) {
    struct timespec now;
    int64_t delta, mono;

    if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC)
        return dlock__seterr(EINVAL, "clock must be CLOCK_REALTIME or CLOCK_MONOTONIC");
    if (abstime == NULL) return dlock__seterr(EINVAL, "abstime is NULL");
    if (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000)
        return dlock__seterr(EINVAL, "abstime has tv_nsec %ld out of [0, 1e9)", (long)abstime->tv_nsec);
    if (abstime->tv_sec < 0) {
        *out = 0; /* long past */
        return 0;
    }
    if (clock == CLOCK_MONOTONIC) {
        *out = abstime->tv_sec > INT64_MAX / 1000000000 - 1 ? DLOCK__MONO_NEVER : ts_ns(abstime);
        return 0;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    mono = dlock__now();
    if (abstime->tv_sec > INT64_MAX / 1000000000 - 1) {
        *out = DLOCK__MONO_NEVER;
        return 0;
    }
    delta = ts_ns(abstime) - ts_ns(&now);
    *out = (delta > 0 && mono > DLOCK__MONO_NEVER - delta) ? DLOCK__MONO_NEVER : mono + delta;
    return 0;
}

void dlock__mono_to_ts(dlock__mono t, struct timespec *ts) {
    if (t < 0) t = 0;
    ts->tv_sec = (time_t)(t / 1000000000);
    ts->tv_nsec = (long)(t % 1000000000);
}

int dlock__cond_init(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    int rc;
    if ((rc = pthread_condattr_init(&ca)) != 0) return rc;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

int dlock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, dlock__mono until) {
    struct timespec ts;
    if (until == DLOCK__MONO_NEVER) return pthread_cond_wait(cv, mu);
    if (until <= dlock__now()) return ETIMEDOUT;
    dlock__mono_to_ts(until, &ts);
    return pthread_cond_timedwait(cv, mu, &ts);
}
