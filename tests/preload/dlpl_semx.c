/* dlpl_semx.c -- an ordinary program with POSIX named semaphores, knowing
 * nothing of dlock, for tests/test_preload_sem.c: what glibc's
 * semaphores do beyond counting.
 *
 *   dlpl_semx intr NAME     sem_open(NAME, O_CREAT, 0600, 0); a SIGALRM
 *                           handler installed without SA_RESTART; sem_wait
 *                           and then sem_timedwait (5 s) each interrupted
 *                           by the alarm 300 ms in: both -1 with EINTR,
 *                           and the handler ran.  Prints "eintr N".
 *   dlpl_semx restart NAME  the same handler with SA_RESTART: glibc's
 *                           sem_wait goes on (the kernel restarts its
 *                           futex wait) until a thread posts 1 s in: 0,
 *                           the handler having run once; its
 *                           sem_timedwait still ends with EINTR.  Prints
 *                           "restarted".
 *   dlpl_semx open NAME     sem_open(NAME, 0), no O_CREAT: prints "opened"
 *                           or "errno NAME" (ENOENT when it exists
 *                           nowhere).
 *   dlpl_semx hold NAME K   sem_open(NAME, O_CREAT, 0600, K), sem_wait,
 *                           prints "holding", then sleeps until killed.
 * Exit 0, or 1 with "FAIL ..." on stdout.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t alarms;

static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

static int fail(const char *what) {
    printf("FAIL %s: %s\n", what, strerror(errno));
    return 1;
}

static void alarm_in_ms(long ms) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ms / 1000;
    it.it_value.tv_usec = (ms % 1000) * 1000;
    setitimer(ITIMER_REAL, &it, NULL);
}

static int on_alarm_with(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGALRM, &sa, NULL);
}

static void *post_later(void *arg) {
    struct timespec d = { 1, 0 };
    nanosleep(&d, NULL);
    sem_post(arg);
    return NULL;
}

static int restart(const char *name) {
    struct timespec t;
    pthread_t th;
    sigset_t all, old;
    sem_t *s;
    if (on_alarm_with(SA_RESTART) != 0) return fail("sigaction");
    if ((s = sem_open(name, O_CREAT, 0600, 0)) == SEM_FAILED) return fail("sem_open");
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* the alarm is the waiting thread's */
    if (pthread_create(&th, NULL, post_later, s) != 0) return fail("pthread_create");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    alarm_in_ms(300);
    if (sem_wait(s) != 0) return fail("sem_wait");
    pthread_join(th, NULL);
    if (alarms != 1) {
        printf("FAIL the handler ran %d times during sem_wait\n", (int)alarms);
        return 1;
    }
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 5;
    alarm_in_ms(300);
    if (sem_timedwait(s, &t) == 0) return fail("sem_timedwait returned 0");
    if (errno != EINTR) return fail("sem_timedwait");
    printf("restarted\n");
    sem_close(s);
    return 0;
}

static int intr(const char *name) {
    struct timespec t;
    sem_t *s;
    int n = 0;
    if (on_alarm_with(0) != 0) return fail("sigaction");
    if ((s = sem_open(name, O_CREAT, 0600, 0)) == SEM_FAILED) return fail("sem_open");
    alarm_in_ms(300);
    if (sem_wait(s) == 0) return fail("sem_wait returned 0");
    if (errno != EINTR) return fail("sem_wait");
    n++;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 5;
    alarm_in_ms(300);
    if (sem_timedwait(s, &t) == 0) return fail("sem_timedwait returned 0");
    if (errno != EINTR) return fail("sem_timedwait");
    n++;
    if (alarms != 2) {
        printf("FAIL the handler ran %d times\n", (int)alarms);
        return 1;
    }
    printf("eintr %d\n", n);
    sem_close(s);
    return 0;
}

static int open_only(const char *name) {
    sem_t *s = sem_open(name, 0);
    if (s == SEM_FAILED) {
        printf("errno %s\n", errno == ENOENT ? "ENOENT" : strerror(errno));
        return 0;
    }
    printf("opened\n");
    sem_close(s);
    return 0;
}

static int hold(const char *name, unsigned k) {
    sem_t *s;
    if ((s = sem_open(name, O_CREAT, 0600, k)) == SEM_FAILED) return fail("sem_open");
    if (sem_wait(s) != 0) return fail("sem_wait");
    printf("holding\n");
    fflush(stdout);
    for (;;) pause();
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "intr") == 0) return intr(argv[2]);
    if (argc == 3 && strcmp(argv[1], "restart") == 0) return restart(argv[2]);
    if (argc == 3 && strcmp(argv[1], "open") == 0) return open_only(argv[2]);
    if (argc == 4 && strcmp(argv[1], "hold") == 0) return hold(argv[2], (unsigned)atoi(argv[3]));
    fprintf(stderr, "usage: dlpl_semx intr NAME | restart NAME | open NAME | hold NAME K\n");
    return 2;
}
