/* dlpl_sem.c -- an ordinary program with POSIX named semaphores, knowing
 * nothing of dlock, for tests/test_preload_sem.c.
 *
 *   dlpl_sem count NAME K ITER SHM   sem_open(NAME, O_CREAT, 0600, K); ITER
 *                                    times sem_wait, inside++ in the shared
 *                                    file SHM (a counter of who is inside,
 *                                    the peak, the entries), a short stay,
 *                                    inside--, sem_post.  Exit 0, or 1
 *                                    with a message.
 *   dlpl_sem basic NAME K            trywait K times (0), once more
 *                                    (EAGAIN), timedwait 0.2 s (ETIMEDOUT),
 *                                    clockwait (ETIMEDOUT), getvalue 0,
 *                                    K posts, getvalue K; and an unnamed
 *                                    semaphore (sem_init) works as ever.
 *   dlpl_sem max NAME                sem_open with SEM_VALUE_MAX, one
 *                                    post: EOVERFLOW.
 * Prints what it saw on stdout ("peak N", "value N").
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct shared {
    atomic_int inside, peak, entries;
};

static int fail(const char *what) {
    printf("FAIL %s: %s\n", what, strerror(errno));
    return 1;
}

static struct timespec in_ms(clockid_t clock, long ms) {
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_nsec += ms * 1000000L;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    return t;
}

static int count(const char *name, unsigned k, int iter, const char *shm) {
    struct shared *sh;
    sem_t *s;
    int fd = open(shm, O_RDWR | O_CREAT, 0600), i;
    if (fd < 0 || ftruncate(fd, 4096) != 0) return fail("shm");
    sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (sh == MAP_FAILED) return fail("mmap");
    if ((s = sem_open(name, O_CREAT, 0600, k)) == SEM_FAILED) return fail("sem_open");
    for (i = 0; i < iter; i++) {
        int now, p;
        if (sem_wait(s) != 0) return fail("sem_wait");
        now = atomic_fetch_add(&sh->inside, 1) + 1;
        p = atomic_load(&sh->peak);
        while (now > p && !atomic_compare_exchange_weak(&sh->peak, &p, now))
            ;
        atomic_fetch_add(&sh->entries, 1);
        usleep(3000);
        atomic_fetch_sub(&sh->inside, 1);
        if (sem_post(s) != 0) return fail("sem_post");
    }
    if (sem_close(s) != 0) return fail("sem_close");
    printf("peak %d\n", atomic_load(&sh->peak));
    return 0;
}

static int basic(const char *name, unsigned k) {
    struct timespec t;
    sem_t *s, un;
    unsigned i;
    int v = -1;
    if ((s = sem_open(name, O_CREAT, 0600, k)) == SEM_FAILED) return fail("sem_open");
    for (i = 0; i < k; i++)
        if (sem_trywait(s) != 0) return fail("sem_trywait");
    if (sem_trywait(s) != -1 || errno != EAGAIN) return fail("sem_trywait on 0 is not EAGAIN");
    t = in_ms(CLOCK_REALTIME, 200);
    if (sem_timedwait(s, &t) != -1 || errno != ETIMEDOUT) return fail("sem_timedwait is not ETIMEDOUT");
    t = in_ms(CLOCK_MONOTONIC, 200);
    if (sem_clockwait(s, CLOCK_MONOTONIC, &t) != -1 || errno != ETIMEDOUT) return fail("sem_clockwait");
    if (sem_getvalue(s, &v) != 0 || v != 0) return fail("sem_getvalue is not 0");
    for (i = 0; i < k; i++)
        if (sem_post(s) != 0) return fail("sem_post");
    if (sem_getvalue(s, &v) != 0) return fail("sem_getvalue");
    printf("value %d\n", v);
    if (sem_close(s) != 0) return fail("sem_close");
    /* an unnamed semaphore stays local */
    if (sem_init(&un, 0, 1) != 0 || sem_wait(&un) != 0 || sem_trywait(&un) != -1 || errno != EAGAIN ||
        sem_post(&un) != 0 || sem_getvalue(&un, &v) != 0 || v != 1 || sem_destroy(&un) != 0)
        return fail("unnamed semaphore");
    return 0;
}

static int max(const char *name) {
    sem_t *s = sem_open(name, O_CREAT, 0600, (unsigned)SEM_VALUE_MAX);
    if (s == SEM_FAILED) return fail("sem_open");
    if (sem_post(s) != -1 || errno != EOVERFLOW) return fail("sem_post past SEM_VALUE_MAX is not EOVERFLOW");
    printf("overflow\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 6 && strcmp(argv[1], "count") == 0)
        return count(argv[2], (unsigned)atoi(argv[3]), atoi(argv[4]), argv[5]);
    if (argc == 4 && strcmp(argv[1], "basic") == 0) return basic(argv[2], (unsigned)atoi(argv[3]));
    if (argc == 3 && strcmp(argv[1], "max") == 0) return max(argv[2]);
    fprintf(stderr, "usage: dlpl_sem count NAME K ITER SHM | basic NAME K | max NAME\n");
    return 2;
}
