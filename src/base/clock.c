/* clock.c -- monotonic time, deadline conversion, timed condvar waits and
 * the back-off of every retry loop.
 *
 * All lease and wait arithmetic runs on CLOCK_MONOTONIC, so a wall-clock
 * step never shortens or stretches a wait.  A CLOCK_REALTIME deadline (as
 * POSIX timedlock takes) is converted once, on entry, to a monotonic one.
 */
#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

int64_t dlock__ts_ns(const struct timespec *ts) {
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

dlock__mono dlock__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return dlock__ts_ns(&ts);
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
        *out = abstime->tv_sec > INT64_MAX / 1000000000 - 1 ? DLOCK__MONO_NEVER : dlock__ts_ns(abstime);
        return 0;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    mono = dlock__now();
    if (abstime->tv_sec > INT64_MAX / 1000000000 - 1) {
        *out = DLOCK__MONO_NEVER;
        return 0;
    }
    delta = dlock__ts_ns(abstime) - dlock__ts_ns(&now);
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

void dlock__sleep_until(dlock__mono until) {
    struct timespec ts;
    if (until <= dlock__now()) return;
    dlock__mono_to_ts(until, &ts);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* ------------------------------------------------------------- back-off */

/* The jitter's source: xorshift64* per thread, cheap and lock-free, not
 * for secrets.  Seeded on first use from the clock, the thread's own
 * address and the pid, and again in a fork child, which would otherwise
 * retry in step with its parent. */
static __thread uint64_t jitter_state;
static __thread pid_t jitter_pid;

static uint64_t jitter_next(void) {
    uint64_t x = jitter_state;
    if (x == 0 || jitter_pid != getpid()) {
        jitter_pid = getpid();
        /* splitmix64 of the seed: well spread even for close seeds */
        x = (uint64_t)dlock__now() ^ (uint64_t)(uintptr_t)&jitter_state ^ ((uint64_t)jitter_pid << 32);
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
        if (x == 0) x = 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    jitter_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

void dlock__backoff_init(dlock__backoff *b, unsigned min_ms, unsigned max_ms) {
    b->min_ms = min_ms > 0 ? min_ms : 1;
    b->max_ms = max_ms > b->min_ms ? max_ms : b->min_ms;
    b->cur_ms = b->min_ms;
}

void dlock__backoff_reset(dlock__backoff *b) {
    b->cur_ms = b->min_ms;
}

unsigned dlock__backoff_next(dlock__backoff *b) {
    unsigned step = b->cur_ms, half = step / 2;
    b->cur_ms = step >= b->max_ms / 2 ? b->max_ms : step * 2;
    return half + (unsigned)(jitter_next() >> 33) % (step - half + 1);
}

int dlock__backoff_sleep(dlock__backoff *b, dlock__mono deadline) {
    dlock__mono now = dlock__now(), until;
    if (deadline != DLOCK__MONO_NEVER && now >= deadline) return ETIMEDOUT;
    until = now + (dlock__mono)dlock__backoff_next(b) * DLOCK__MS;
    dlock__sleep_until(deadline != DLOCK__MONO_NEVER && until > deadline ? deadline : until);
    return 0;
}

void dlock__efd_drain(int fd) {
    uint64_t v;
    while (read(fd, &v, sizeof v) == (ssize_t)sizeof v)
        ;
}
