/* dlpl_lock.c -- takes one record lock the way an unmodified program
 * does, for test_preload.  Usage: dlpl_lock OP PATH [HOLD_MS]
 *   w, r          fcntl F_SETLK write / read lock (whole file)
 *   ww            fcntl F_SETLKW write lock (waits)
 *   ofd           fcntl F_OFD_SETLK write lock
 *   lockf         lockf F_TLOCK;  test: lockf F_TEST
 *   getlk         fcntl F_GETLK for a write lock; prints the answer
 *   wclose        F_SETLK write lock, then closes ANOTHER descriptor of
 *                 the file after HOLD_MS/2 (POSIX: that drops the lock)
 * Prints "ok" and holds the lock HOLD_MS (default 0) before exiting, or
 * prints the error.  Exit: 0 ok, 1 busy (EAGAIN, EACCES), 2 other.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int fail(const char *what) {
    int e = errno;
    printf("%s: %s\n", what, strerror(e));
    fflush(stdout);
    return e == EAGAIN || e == EACCES ? 1 : 2;
}

int main(int argc, char **argv) {
    struct flock fl;
    const char *op;
    long hold;
    int fd, fd2 = -1;
    if (argc < 3) {
        fprintf(stderr, "usage: dlpl_lock OP PATH [HOLD_MS]\n");
        return 2;
    }
    op = argv[1];
    hold = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
    if ((fd = open(argv[2], O_RDWR | O_CREAT, 0644)) < 0) return fail("open");
    memset(&fl, 0, sizeof fl);
    fl.l_whence = SEEK_SET;
    fl.l_type = strcmp(op, "r") == 0 ? F_RDLCK : F_WRLCK;
    if (strcmp(op, "w") == 0 || strcmp(op, "r") == 0 || strcmp(op, "wclose") == 0) {
        if (fcntl(fd, F_SETLK, &fl) != 0) return fail("F_SETLK");
    } else if (strcmp(op, "ww") == 0) {
        if (fcntl(fd, F_SETLKW, &fl) != 0) return fail("F_SETLKW");
    } else if (strcmp(op, "ofd") == 0) {
        if (fcntl(fd, F_OFD_SETLK, &fl) != 0) return fail("F_OFD_SETLK");
    } else if (strcmp(op, "lockf") == 0) {
        if (lockf(fd, F_TLOCK, 0) != 0) return fail("F_TLOCK");
    } else if (strcmp(op, "test") == 0) {
        if (lockf(fd, F_TEST, 0) != 0) return fail("F_TEST");
    } else if (strcmp(op, "getlk") == 0) {
        if (fcntl(fd, F_GETLK, &fl) != 0) return fail("F_GETLK");
        printf("%s pid=%ld\n", fl.l_type == F_UNLCK ? "F_UNLCK" : fl.l_type == F_WRLCK ? "F_WRLCK" : "F_RDLCK",
               (long)fl.l_pid);
        return 0;
    } else {
        fprintf(stderr, "dlpl_lock: unknown op %s\n", op);
        return 2;
    }
    printf("ok\n");
    fflush(stdout);
    if (strcmp(op, "wclose") == 0) {
        fd2 = open(argv[2], O_RDONLY);
        sleep_ms(hold / 2);
        close(fd2); /* POSIX: every lock of this process on the file goes */
        printf("closed\n");
        fflush(stdout);
        sleep_ms(hold / 2);
    } else {
        sleep_ms(hold);
    }
    return 0;
}
