/* dlpl_loadrace.c -- a program that knows nothing of dlock, for
 * test_preload_lazy: its first lock of the global mutex race_lock (mapped
 * by the test) is made by several threads at once, while another thread
 * forks children that lock it too and a 1 ms timer's signal handler makes
 * hooked calls (close) -- all while the preload loads its implementation.
 * Each worker then counts N times under the lock.
 * Usage: dlpl_loadrace N
 * Prints "counter C forks F signals S": C should be 4 * N, F the 5
 * children that exited 0, S > 0.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORKERS 4
#define FORKS 5

pthread_mutex_t race_lock = PTHREAD_MUTEX_INITIALIZER;
static long counter, rounds;
static pthread_barrier_t start;
static volatile sig_atomic_t signals;

static void on_alarm(int sig) {
    (void)sig;
    signals++;
    close(-1); /* a hooked call in a handler, maybe in the middle of the load */
}

static void *worker(void *arg) {
    long i;
    (void)arg;
    pthread_barrier_wait(&start);
    for (i = 0; i < rounds; i++) {
        pthread_mutex_lock(&race_lock);
        counter++;
        pthread_mutex_unlock(&race_lock);
    }
    return NULL;
}

static void *forker(void *arg) {
    int i, ok = 0, st;
    (void)arg;
    pthread_barrier_wait(&start);
    for (i = 0; i < FORKS; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            pthread_mutex_lock(&race_lock);
            pthread_mutex_unlock(&race_lock);
            _exit(0);
        }
        if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
    }
    return (void *)(long)ok;
}

int main(int argc, char **argv) {
    pthread_t t[WORKERS + 1];
    struct itimerval it = { { 0, 1000 }, { 0, 1000 } };
    struct sigaction sa = { 0 };
    void *forks = NULL;
    int i;
    if (argc != 2 || (rounds = strtol(argv[1], NULL, 10)) < 1) {
        fprintf(stderr, "usage: dlpl_loadrace N\n");
        return 2;
    }
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    setitimer(ITIMER_REAL, &it, NULL);
    pthread_barrier_init(&start, NULL, WORKERS + 1);
    for (i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, worker, NULL);
    pthread_create(&t[WORKERS], NULL, forker, NULL);
    for (i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
    pthread_join(t[WORKERS], &forks);
    it.it_value.tv_usec = it.it_interval.tv_usec = 0;
    setitimer(ITIMER_REAL, &it, NULL);
    printf("counter %ld forks %ld signals %d\n", counter, (long)forks, (int)signals);
    return 0;
}
