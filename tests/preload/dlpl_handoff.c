/* dlpl_handoff.c -- a program that knows nothing of dlock, for
 * test_preload_owner: it hands its global mutex handoff_lock from one
 * thread to another, as legacy code does, which glibc allows for a
 * NORMAL mutex.  Usage: dlpl_handoff MODE [HOLD_MS]
 *   normal      thread A locks handoff_lock (a NORMAL mutex) and stays;
 *               thread C then waits for it (timedlock, 8 s); thread B
 *               unlocks it after 500 ms; C gets it and unlocks it; then
 *               the program waits HOLD_MS, A still alive, and exits
 *   errorcheck  handoff_lock is made ERRORCHECK first; A locks it, B's
 *               unlock is refused; the program waits HOLD_MS, then A
 *               unlocks it and the program exits
 *   try         timedlock of handoff_lock with a deadline of HOLD_MS
 *               (default 3000), then unlock
 * Prints one line per step ("B_unlock 0", "C_lock 0 1234" with the ms it
 * waited, ...), flushed at once.  Exit 0, or 2 on a usage error.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

pthread_mutex_t handoff_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t step_mu = PTHREAD_MUTEX_INITIALIZER; /* not mapped */
static pthread_cond_t step_cv = PTHREAD_COND_INITIALIZER;
static int step; /* 1 A holds it; 2 A may unlock; 3 A may leave */

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static void set_step(int s) {
    pthread_mutex_lock(&step_mu);
    step = s;
    pthread_cond_broadcast(&step_cv);
    pthread_mutex_unlock(&step_mu);
}

static void wait_step(int s) {
    pthread_mutex_lock(&step_mu);
    while (step < s) pthread_cond_wait(&step_cv, &step_mu);
    pthread_mutex_unlock(&step_mu);
}

static int timedlock_ms(long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_mutex_timedlock(&handoff_lock, &ts);
}

static int errorcheck;

static void *thread_a(void *p) {
    (void)p;
    say("A_lock %d", pthread_mutex_lock(&handoff_lock));
    set_step(1);
    if (errorcheck) {
        wait_step(2);
        say("A_unlock %d", pthread_mutex_unlock(&handoff_lock));
    }
    wait_step(3); /* alive until the end: its hold, were it the thread's, would stay renewed */
    return NULL;
}

static void *thread_b(void *p) {
    (void)p;
    say("B_unlock %d", pthread_mutex_unlock(&handoff_lock));
    return NULL;
}

static void *thread_c(void *p) {
    long t0 = now_ms();
    int rc = timedlock_ms(8000);
    (void)p;
    say("C_lock %d %ld", rc, now_ms() - t0);
    if (rc == 0) say("C_unlock %d", pthread_mutex_unlock(&handoff_lock));
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t a, b, c;
    long hold;
    if (argc < 2) {
        fprintf(stderr, "usage: dlpl_handoff normal|errorcheck|try [HOLD_MS]\n");
        return 2;
    }
    hold = argc > 2 ? strtol(argv[2], NULL, 10) : 3000;
    if (strcmp(argv[1], "try") == 0) {
        long t0 = now_ms();
        int rc = timedlock_ms(hold);
        say("try_lock %d %ld", rc, now_ms() - t0);
        if (rc == 0) say("try_unlock %d", pthread_mutex_unlock(&handoff_lock));
        return 0;
    }
    if (strcmp(argv[1], "errorcheck") == 0) {
        pthread_mutexattr_t at;
        pthread_mutexattr_init(&at);
        pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ERRORCHECK);
        pthread_mutex_init(&handoff_lock, &at);
        pthread_mutexattr_destroy(&at);
        errorcheck = 1;
    } else if (strcmp(argv[1], "normal") != 0) {
        fprintf(stderr, "dlpl_handoff: unknown mode %s\n", argv[1]);
        return 2;
    }
    pthread_create(&a, NULL, thread_a, NULL);
    wait_step(1);
    if (!errorcheck) pthread_create(&c, NULL, thread_c, NULL);
    sleep_ms(500);
    pthread_create(&b, NULL, thread_b, NULL);
    pthread_join(b, NULL);
    if (!errorcheck) pthread_join(c, NULL);
    say("handed");
    sleep_ms(hold);
    set_step(2);
    set_step(3);
    pthread_join(a, NULL);
    say("done");
    return 0;
}
