/* dlpl_counter.c -- a program that knows nothing of dlock, for
 * test_preload: it increments a counter kept in a file N times, each time
 * under its global mutex counter_lock (read, pause, write), and also locks
 * and unlocks another global mutex, other_lock, that no rule maps.  Under
 * libdlock_preload.so with DLOCK_MAP='mutex:counter_lock=NAME', two such
 * processes increment the counter exactly.
 * Usage: dlpl_counter FILE N
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t other_lock = PTHREAD_MUTEX_INITIALIZER;

static long get(const char *path) {
    FILE *f = fopen(path, "r");
    long v = 0;
    if (f != NULL) {
        if (fscanf(f, "%ld", &v) != 1) v = 0;
        fclose(f);
    }
    return v;
}

static void put(const char *path, long v) {
    FILE *f = fopen(path, "w");
    if (f == NULL) exit(3);
    fprintf(f, "%ld\n", v);
    fclose(f);
}

int main(int argc, char **argv) {
    struct timespec pause = { 0, 300 * 1000 };
    long i, n, v;
    int rc;
    if (argc != 3) {
        fprintf(stderr, "usage: dlpl_counter FILE N\n");
        return 2;
    }
    n = strtol(argv[2], NULL, 10);
    for (i = 0; i < n; i++) {
        if ((rc = pthread_mutex_lock(&counter_lock)) != 0) {
            fprintf(stderr, "pthread_mutex_lock: %d\n", rc);
            return 1;
        }
        v = get(argv[1]);
        nanosleep(&pause, NULL); /* widen the window a lost update needs */
        put(argv[1], v + 1);
        if ((rc = pthread_mutex_unlock(&counter_lock)) != 0) {
            fprintf(stderr, "pthread_mutex_unlock: %d\n", rc);
            return 1;
        }
        pthread_mutex_lock(&other_lock);
        pthread_mutex_unlock(&other_lock);
    }
    return 0;
}
