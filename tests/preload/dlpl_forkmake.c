/* dlpl_forkmake.c -- a program that knows nothing of dlock, for
 * test_preload_lazy: it forks while another thread is in the middle of
 * its first lock of the global mutex fork_lock (mapped by the test), where
 * the preload makes the mutex's dlock side, and the child locks it too.
 * The thread is held there on purpose: the test sets DLOCK_LOCK_DELAY_MS
 * to a bad value, which the preload says on stderr while it makes the
 * mutex, and stderr is a full pipe that a third thread starts to drain
 * (onto the real stderr, less the filling) only DRAIN_MS after the maker
 * is seen blocked in that write.  A child that inherited the making half done would wait for
 * it forever: its alarm kills it.
 * Usage: dlpl_forkmake
 * Prints "child exit 0" (or "child signal S" when it was killed) and
 * "parent locked 1".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DRAIN_MS 300

pthread_mutex_t fork_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile long maker_tid;
static int pipe_rd, real_err;
static size_t filler; /* bytes of the pipe's filling, not forwarded */

static void *maker(void *arg) {
    (void)arg;
    maker_tid = (long)syscall(SYS_gettid);
    pthread_mutex_lock(&fork_lock);
    pthread_mutex_unlock(&fork_lock);
    return NULL;
}

static void *drainer(void *arg) {
    struct timespec ts = { 0, DRAIN_MS * 1000000L };
    char buf[4096];
    ssize_t n;
    (void)arg;
    nanosleep(&ts, NULL);
    while ((n = read(pipe_rd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        size_t skip = n > 0 ? ((size_t)n < filler ? (size_t)n : filler) : 0;
        filler -= skip;
        if (n > 0 && (size_t)n > skip) (void)!write(real_err, buf + skip, (size_t)n - skip);
    }
    return NULL;
}

/* Is thread tid in write(2, ...) (/proc's syscall: number, then fd)? */
static int in_stderr_write(long tid) {
    char path[64], line[256];
    FILE *f;
    int yes = 0;
    snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
    if ((f = fopen(path, "re")) == NULL) return 0;
    if (fgets(line, sizeof line, f) != NULL) yes = strncmp(line, "1 0x2 ", 6) == 0;
    fclose(f);
    return yes;
}

/* stderr becomes a full pipe (the original kept in real_err). */
static int stderr_full_pipe(void) {
    int p[2], fl;
    char junk[512];
    ssize_t n;
    if (pipe(p) != 0 || (real_err = dup(2)) < 0) return -1;
    pipe_rd = p[0];
    fl = fcntl(p[1], F_GETFL);
    fcntl(p[1], F_SETFL, fl | O_NONBLOCK);
    memset(junk, '.', sizeof junk);
    while ((n = write(p[1], junk, sizeof junk)) > 0) filler += (size_t)n;
    fcntl(p[1], F_SETFL, fl);
    if (dup2(p[1], 2) < 0) return -1;
    close(p[1]);
    return 0;
}

int main(void) {
    pthread_t m, d;
    int i, st, locked;
    pid_t pid;
    if (stderr_full_pipe() != 0 || pthread_create(&m, NULL, maker, NULL) != 0) {
        perror("dlpl_forkmake");
        return 2;
    }
    for (i = 0; i < 1000 && (maker_tid == 0 || !in_stderr_write(maker_tid)); i++) usleep(10000);
    if (i == 1000) {
        fprintf(stdout, "the maker never wrote to stderr\n");
        return 2;
    }
    pthread_create(&d, NULL, drainer, NULL);
    pid = fork();
    if (pid == 0) {
        alarm(5);
        pthread_mutex_lock(&fork_lock);
        pthread_mutex_unlock(&fork_lock);
        _exit(0);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 2;
    if (WIFEXITED(st)) printf("child exit %d\n", WEXITSTATUS(st));
    else printf("child signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    pthread_join(m, NULL);
    locked = pthread_mutex_lock(&fork_lock) == 0 && pthread_mutex_unlock(&fork_lock) == 0;
    printf("parent locked %d\n", locked);
    fflush(stdout);
    dup2(real_err, 2); /* the pipe's last write end: the drainer sees its end */
    pthread_join(d, NULL);
    return 0;
}
