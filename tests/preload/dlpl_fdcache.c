/* dlpl_fdcache.c -- an unmodified program for test_preload_fdcache: file
 * locks on descriptors whose numbers are closed, reused, duplicated and
 * inherited, to check the preload's per-descriptor cache (preload/fd.c).
 *
 *   dlpl_fdcache pairs KIND N PATH
 *       opens PATH, makes one lock/unlock pair, then N more between two
 *       getppid() calls (markers for strace); KIND: flock, fcntl, lockf.
 *   dlpl_fdcache scenarios UNMAPPED MAPPED PROBE_ROOT PROBE_PATH
 *       runs each scenario below; prints "NAME A B ..." lines, where each
 *       number is a probe: `dlpl_fdcache probe PROBE_PATH` run with
 *       DLOCK_ROOT=PROBE_ROOT (another "host" whose PROBE_PATH has
 *       MAPPED's lock name): 1 if the cluster lock is held, 0 if it is
 *       free; and "NAME_fd 1" when the descriptor numbers came out as the
 *       scenario needs.
 *   dlpl_fdcache probe PATH
 *       exit 0 if PATH's lock is free (taken and unlocked), 1 if held.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *upath, *mpath, *probe_root, *probe_path;

static int xopen(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        printf("open %s: %s\n", path, strerror(errno));
        exit(2);
    }
    return fd;
}

static void lk(int fd, int op) {
    if (flock(fd, op) != 0) printf("flock %d %d: %s\n", fd, op, strerror(errno));
}

/* Is the cluster lock of MAPPED's name held?  1 yes, 0 no, else -1.
 * The probe is this program on the other "host" (probe mode below), not
 * FLOCK -n PROBE_PATH true: flock(1) leaves its lock to exit, whose
 * cluster lock its keeper gives up a round trip later, so the next probe
 * could find the last one's lock still held; an explicit LOCK_UN gives
 * it up before it returns. */
static int probe(void) {
    int st;
    pid_t pid;
    fflush(stdout);
    if ((pid = fork()) < 0) return -1;
    if (pid == 0) {
        setenv("DLOCK_ROOT", probe_root, 1);
        execl("/proc/self/exe", "dlpl_fdcache", "probe", probe_path, (char *)NULL);
        _exit(127);
    }
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st) == 1 ? 1 : WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* probe mode: 0 if PATH's lock was free (taken and given up at once), 1
 * if it is held, 2 on an error. */
static int probe_main(const char *path) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return 2;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) return errno == EWOULDBLOCK ? 1 : 2;
    return flock(fd, LOCK_UN) == 0 ? 0 : 2;
}

/* Locks fd, probes, unlocks, probes: prints "name held released". */
static void lock_probe(const char *name, int fd) {
    int held, freed;
    lk(fd, LOCK_EX);
    held = probe();
    lk(fd, LOCK_UN);
    freed = probe();
    printf("%s %d %d\n", name, held, freed);
}

/* An unmapped descriptor, known as such (one lock call made). */
static int unmapped_known(void) {
    int fd = xopen(upath);
    lk(fd, LOCK_EX);
    lk(fd, LOCK_UN);
    return fd;
}

/* close(), then open() of the mapped file on the same number; and back. */
static void reuse(void) {
    int u = unmapped_known(), m, u2;
    close(u);
    m = xopen(mpath);
    printf("reuse_mapped_fd %d\n", m == u);
    lock_probe("reuse_mapped", m);
    close(m);
    u2 = xopen(upath);
    printf("reuse_unmapped_fd %d\n", u2 == m);
    lock_probe("reuse_unmapped", u2);
    close(u2);
}

/* dup2 / dup3 of the mapped file over a known unmapped descriptor; and
 * of the unmapped one over a mapped descriptor. */
static void dups(void) {
    int u = unmapped_known(), m = xopen(mpath);
    printf("dup2_fd %d\n", dup2(m, u) == u);
    lock_probe("dup2_mapped", u);
    close(u);
    u = unmapped_known();
    printf("dup3_fd %d\n", dup3(m, u, O_CLOEXEC) == u);
    lock_probe("dup3_mapped", u);
    close(u);
    u = xopen(upath);
    lock_probe("mapped_before", m);
    printf("dup2_back_fd %d\n", dup2(u, m) == m);
    lock_probe("dup2_unmapped", m);
    close(m);
    close(u);
}

/* The number of a known unmapped descriptor closed where no hook sees it
 * (the raw system call), then made again by dup / F_DUPFD / F_DUPFD_CLOEXEC
 * of the mapped file. */
static void dupfd(void) {
    static const char *names[] = { "dup_mapped", "dupfd_mapped", "dupfd_cloexec_mapped" };
    int m = xopen(mpath), i;
    for (i = 0; i < 3; i++) {
        int u = unmapped_known(), d;
        char fdname[64];
        syscall(SYS_close, u);
        d = i == 0 ? dup(m) : fcntl(m, i == 1 ? F_DUPFD : F_DUPFD_CLOEXEC, u);
        snprintf(fdname, sizeof fdname, "%s_fd", names[i]);
        printf("%s %d\n", fdname, d == u);
        lock_probe(names[i], d);
        close(d);
    }
    close(m);
}

/* fclose, freopen and close_range close where close() is not called. */
static void others(void) {
    FILE *f = fopen(upath, "r+"), *g;
    int fd, m;
    if (f == NULL) exit(2);
    fd = fileno(f);
    lk(fd, LOCK_EX);
    lk(fd, LOCK_UN);
    fclose(f);
    if ((g = fopen(mpath, "r+")) == NULL) exit(2);
    printf("fclose_fd %d\n", fileno(g) == fd);
    lock_probe("fclose_mapped", fileno(g));
    fclose(g);
    if ((f = fopen(upath, "r+")) == NULL) exit(2);
    fd = fileno(f);
    lk(fd, LOCK_EX);
    lk(fd, LOCK_UN);
    if ((f = freopen(mpath, "r+", f)) == NULL) exit(2);
    printf("freopen_fd %d\n", fileno(f) == fd);
    lock_probe("freopen_mapped", fileno(f));
    fclose(f);
#ifdef SYS_close_range
    fd = unmapped_known();
    if (syscall(SYS_close_range, 100000u, 100001u, 0) == 0) { /* the kernel has it: so has glibc 2.34+ */
        close_range((unsigned)fd, (unsigned)fd, 0);
        m = xopen(mpath);
        printf("close_range_fd %d\n", m == fd);
        lock_probe("close_range_mapped", m);
        close(m);
    } else {
        close(fd);
        printf("close_range_fd 1\nclose_range_mapped 1 0\n"); /* (no such call to hook) */
    }
#endif
}

/* Across fork: the child's descriptors are the parent's, and so is what
 * is known of them, until either changes its own. */
static void forks(void) {
    int u = unmapped_known(), st = 0;
    pid_t pid = fork();
    if (pid == 0) {
        int m;
        close(u);
        m = xopen(mpath);
        if (m != u) _exit(3);
        lk(m, LOCK_EX);
        st = probe();
        lk(m, LOCK_UN);
        _exit(st < 0 ? 4 : st);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) st = -1;
    printf("fork_child_mapped %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    lock_probe("fork_parent_unmapped", u);
    pid = fork();
    if (pid == 0) {
        lk(u, LOCK_EX);
        st = probe();
        lk(u, LOCK_UN);
        _exit(st < 0 ? 4 : st);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) st = -1;
    printf("fork_child_unmapped %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    close(u);
}

static int pairs(const char *kind, long n, const char *path) {
    int fd = xopen(path);
    long i;
    for (i = 0; i <= n; i++) {
        if (i == 1) syscall(SYS_getppid); /* the marker: the pairs begin */
        if (strcmp(kind, "flock") == 0) {
            flock(fd, LOCK_EX);
            flock(fd, LOCK_UN);
        } else if (strcmp(kind, "fcntl") == 0) {
            struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
            fcntl(fd, F_SETLK, &fl);
            fl.l_type = F_UNLCK;
            fcntl(fd, F_SETLK, &fl);
        } else {
            lockf(fd, F_LOCK, 0);
            lockf(fd, F_ULOCK, 0);
        }
    }
    syscall(SYS_getppid); /* and end */
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "pairs") == 0) return pairs(argv[2], strtol(argv[3], NULL, 10), argv[4]);
    if (argc == 3 && strcmp(argv[1], "probe") == 0) return probe_main(argv[2]);
    if (argc != 6 || strcmp(argv[1], "scenarios") != 0) {
        fprintf(stderr, "usage: dlpl_fdcache pairs KIND N PATH | scenarios UNMAPPED MAPPED PROBE_ROOT PROBE_PATH"
                        " | probe PATH\n");
        return 2;
    }
    upath = argv[2];
    mpath = argv[3];
    probe_root = argv[4];
    probe_path = argv[5];
    reuse();
    dups();
    dupfd();
    others();
    forks();
    printf("done\n");
    return 0;
}
