/* preload_overhead.c -- what libdlock_preload.so costs the locks it does
 * NOT map: pthread_mutex_lock/unlock pairs on a mutex no rule names, and
 * flock LOCK_EX/LOCK_UN pairs on a path no rule matches.  bench/preload-overhead
 * runs it without the library, with it (no mutex rule), and with it and
 * mutex rules that map other mutexes of this program (the lookup path),
 * timing the loops here and counting their instructions with callgrind.
 * Usage: dlock-preload-bench mutex N | flock N PATH
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t bench_mutex = PTHREAD_MUTEX_INITIALIZER; /* never mapped */
/* Mapped by some runs (DLOCK_MAP=mutex:mapped_a;mutex:mapped_b;...), so
 * that the hooks must look bench_mutex up in a non-empty table. */
pthread_mutex_t mapped_a = PTHREAD_MUTEX_INITIALIZER, mapped_b = PTHREAD_MUTEX_INITIALIZER,
                mapped_c = PTHREAD_MUTEX_INITIALIZER, mapped_d = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) void mutex_loop(long n) {
    long i;
    for (i = 0; i < n; i++) {
        pthread_mutex_lock(&bench_mutex);
        pthread_mutex_unlock(&bench_mutex);
    }
}

__attribute__((noinline)) void flock_loop(long n, int fd) {
    long i;
    for (i = 0; i < n; i++) {
        flock(fd, LOCK_EX);
        flock(fd, LOCK_UN);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    double t[7];
    long n;
    int i, fd = -1, mutex;
    if (argc < 3 || (strcmp(argv[1], "mutex") != 0 && (strcmp(argv[1], "flock") != 0 || argc < 4))) {
        fprintf(stderr, "usage: dlock-preload-bench mutex N | flock N PATH\n");
        return 2;
    }
    mutex = strcmp(argv[1], "mutex") == 0;
    n = strtol(argv[2], NULL, 10);
    if (!mutex && (fd = open(argv[3], O_RDWR | O_CREAT, 0644)) < 0) {
        perror(argv[3]);
        return 1;
    }
    /* touch the mapped ones once, so they are real users of the table */
    pthread_mutex_lock(&mapped_a);
    pthread_mutex_unlock(&mapped_a);
    for (i = 0; i < 7; i++) {
        double t0 = now();
        if (mutex) mutex_loop(n);
        else flock_loop(n, fd);
        t[i] = (now() - t0) / (double)n * 1e9;
    }
    qsort(t, 7, sizeof t[0], cmp);
    printf("%s %.1f ns/pair (median of 7 x %ld)\n", argv[1], t[3], n);
    return 0;
}
