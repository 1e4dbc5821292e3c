/* keeper.c -- the keeper: a small process that holds one cluster-wide
 * lock for a file lock of a program, and gives it up when the kernel lock
 * it stands for is gone.
 *
 * Why a process: a flock lock belongs to an open file description, which
 * lives as long as any process has it open -- `( flock -n 9 || exit 1;
 * job ) 9>/locks/x` takes the lock in a flock(1) that exits at once, and
 * the lock must last as long as the subshell's descriptor 9.  A dlock
 * lock belongs to a thread and lives as long as it renews it.  So the
 * cluster lock is held by a process of its own, which watches the kernel
 * lock: it asks the kernel for a conflicting lock on its own description
 * of the same file, and that request is granted exactly when the
 * program's lock is gone (unlocked, or its last descriptor closed, in any
 * process).  Then the keeper releases the cluster lock and exits.
 *
 * The keeper is the thin libdlock_preload.so, run by the dynamic loader
 * (`ld.so libdlock_preload.so --dlock-keeper ...`) with dlpl_keeper_entry
 * (load.c) as its entry point, which loads this implementation and runs
 * dlpl_keeper_main; started with clone(CLONE_VM|CLONE_VFORK) and no exit
 * signal (but execve makes SIGCHLD its exit signal again: file.c reaps it
 * with __WALL).  It runs in its own session (terminal signals do not
 * reach it), with stdin/stdout on /dev/null, stderr the program's, no
 * other descriptor but its socket (fd 4) and its own description of the
 * file (fd 3).
 *
 * It writes the program's pid and asking thread as the lock's holder, so
 * that `dlock status` names the program.  A lost lock with
 * DLOCK_ON_LOST=abort stops the program and the processes it started
 * (stop_set below), never its parent or process group.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dlock_private.h> /* dlock__set_who, the client's circuit breaker */
#include "preload.h"

extern char **environ;

/* ------------------------------------------------------------ spawning */

struct spawn_args {
    const char *path;
    char *const *argv;
    char *const *envp;
    int sock, wfd;
    volatile int err;
};

static void mv(int from, int to) {
    if (from != to) syscall(SYS_dup3, from, to, 0);
}

/* Runs in the clone child, sharing the parent's memory until execve:
 * system calls only, no allocation. */
static int child_main(void *p) {
    struct spawn_args *a = p;
    struct sigaction dfl;
    sigset_t none;
    int s, null, sock, wfd = -1;

    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (s = 1; s < NSIG; s++) {
        struct sigaction cur;
        if (syscall(SYS_rt_sigaction, s, NULL, &cur, (size_t)(_NSIG / 8)) == 0 && cur.sa_handler != SIG_DFL &&
            cur.sa_handler != SIG_IGN)
            syscall(SYS_rt_sigaction, s, &dfl, NULL, (size_t)(_NSIG / 8));
    }
    syscall(SYS_setsid);
    null = (int)syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR, 0);
    sock = (int)syscall(SYS_fcntl, a->sock, F_DUPFD, 10);
    if (a->wfd >= 0) wfd = (int)syscall(SYS_fcntl, a->wfd, F_DUPFD, 10);
    if (null < 0 || sock < 0) {
        a->err = EMFILE;
        syscall(SYS_exit_group, 127);
    }
    mv(null, 0);
    mv(null, 1);
    mv(sock, 4);
    mv(wfd >= 0 ? wfd : null, 3);
    if (syscall(SYS_close_range, 5, ~0U, 0) != 0) {
        for (s = 5; s < 65536; s++) syscall(SYS_close, s);
    }
    sigemptyset(&none);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, (size_t)(_NSIG / 8));
    syscall(SYS_execve, a->path, a->argv, a->envp);
    a->err = errno ? errno : ENOEXEC;
    syscall(SYS_exit_group, 127);
    return 127;
}

static int keeper_reopen(int fd, char *watch) {
    char p[64];
    int w;
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    *watch = 'w';
    /* flock needs no particular access mode */
    if ((w = open(p, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) >= 0) return w;
    if ((w = open(p, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) >= 0) return w;
    *watch = '-';
    return -1;
}

/* A keeper's command line and environment, made before the clone: the
 * child may not allocate. */
struct keeper_cmd {
    char *argv[12], *envp[8], ppid[24], watch[2];
    char *url, *prefix, *ldp, *xdg, *delay, *risk; /* malloc'd, in envp */
};

static void keeper_cmd_make(struct keeper_cmd *kc, const char *name) {
    const char *v;
    int n = 0;
    snprintf(kc->ppid, sizeof kc->ppid, "%ld", (long)getpid());
    kc->argv[0] = dlpl_interp;
    kc->argv[1] = dlpl_self_path;
    kc->argv[2] = "--dlock-keeper";
    kc->argv[3] = "flock"; /* the kind: record locks have no keeper (range.c) */
    kc->argv[4] = kc->watch;
    kc->argv[5] = dlpl_conf.on_lost == DLPL_ON_LOST_ABORT ? "abort" : "warn";
    kc->argv[6] = kc->ppid;
    kc->argv[7] = (char *)name;
    kc->argv[8] = NULL;
    /* The server's URL may hold a password: environment, never argv. */
    if (dlpl_conf.url != NULL && asprintf(&kc->url, "DLOCK_URL=%s", dlpl_conf.url) > 0) kc->envp[n++] = kc->url;
    if (dlpl_conf.prefix != NULL && asprintf(&kc->prefix, "DLOCK_PREFIX=%s", dlpl_conf.prefix) > 0)
        kc->envp[n++] = kc->prefix;
    if ((v = secure_getenv("LD_LIBRARY_PATH")) != NULL && asprintf(&kc->ldp, "LD_LIBRARY_PATH=%s", v) > 0)
        kc->envp[n++] = kc->ldp;
    /* where the host-wide outage record is: the program's, shared */
    if ((v = secure_getenv("XDG_RUNTIME_DIR")) != NULL && asprintf(&kc->xdg, "XDG_RUNTIME_DIR=%s", v) > 0)
        kc->envp[n++] = kc->xdg;
    if ((v = dlpl_conf.lock_delay) != NULL && asprintf(&kc->delay, "DLOCK_LOCK_DELAY_MS=%s", v) > 0)
        kc->envp[n++] = kc->delay;
    if ((v = dlpl_conf.on_risk) != NULL && asprintf(&kc->risk, "DLOCK_ON_RISK=%s", v) > 0) kc->envp[n++] = kc->risk;
    kc->envp[n] = NULL;
}

static void keeper_cmd_free(struct keeper_cmd *kc) {
    free(kc->url);
    free(kc->prefix);
    free(kc->ldp);
    free(kc->xdg);
    free(kc->delay);
    free(kc->risk);
}

/* clone(CLONE_VM|CLONE_VFORK) into child_main, every signal blocked
 * meanwhile; back when the child has called execve or failed.  0 with
 * *child, or an errno (a child that failed is reaped). */
static int keeper_clone(struct spawn_args *a, pid_t *child) {
    size_t stacksz = 64 * 1024;
    sigset_t all, old;
    void *stack;
    int e = 0;
    stack = mmap(NULL, stacksz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return errno;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    /* No exit signal (until execve gives it SIGCHLD again). */
    *child = clone(child_main, (char *)stack + stacksz, CLONE_VM | CLONE_VFORK, a);
    if (*child < 0) e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    munmap(stack, stacksz);
    if (*child > 0 && a->err != 0) {
        e = a->err;
        waitpid(*child, NULL, __WCLONE);
    }
    return e;
}

int dlpl_keeper_spawn(const char *name, int fd, int *sock, pid_t *pid) {
    struct spawn_args a;
    struct keeper_cmd kc;
    int sv[2], wfd, e = 0;
    pid_t child = -1;

    if (dlpl_self_path == NULL || dlpl_interp == NULL) return ENOEXEC;
    memset(&kc, 0, sizeof kc);
    wfd = keeper_reopen(fd, &kc.watch[0]);
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        e = errno;
        if (wfd >= 0) DLPL_REAL(close)(wfd);
        return e;
    }
    keeper_cmd_make(&kc, name);
    memset(&a, 0, sizeof a);
    a.path = dlpl_interp;
    a.argv = kc.argv;
    a.envp = kc.envp;
    a.sock = sv[1];
    a.wfd = wfd;
    e = keeper_clone(&a, &child);
    keeper_cmd_free(&kc);
    DLPL_REAL(close)(sv[1]);
    if (wfd >= 0) DLPL_REAL(close)(wfd);
    if (e != 0) {
        DLPL_REAL(close)(sv[0]);
        return e;
    }
    *sock = sv[0];
    *pid = child;
    return 0;
}


/* ------------------------------------------- DLOCK_ON_LOST=abort: whom */

/* A lost lock stops the program that held it and the processes it
 * started -- never the script, unit or shell around it (its parent and
 * process group), nor a keeper (which releases its own lock once its
 * program is gone).  Runs in a keeper, and in a program whose keeper was
 * killed (file.c); only system calls and malloc, no hooked call. */

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

struct pinfo {
    pid_t pid, ppid;
    unsigned long long start; /* clock ticks after boot: tells a reused pid */
};

static ssize_t read_small(const char *path, char *buf, size_t cap) {
    ssize_t n, len = 0;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    while (len < (ssize_t)cap - 1 && (n = read(fd, buf + len, cap - 1 - (size_t)len)) > 0) len += n;
    syscall(SYS_close, fd);
    buf[len] = '\0';
    return len;
}

/* The parent and start time of pid (/proc/PID/stat); 0 or -1. */
static int pstat(pid_t pid, pid_t *ppid, unsigned long long *start) {
    char path[64], buf[1024], *p, *save = NULL, *tok;
    int i;
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    if (read_small(path, buf, sizeof buf) <= 0 || (p = strrchr(buf, ')')) == NULL) return -1;
    /* after "(comm)": state ppid pgrp ... starttime (the 20th) */
    for (i = 0, tok = strtok_r(p + 1, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save), i++) {
        if (i == 1) *ppid = (pid_t)strtol(tok, NULL, 10);
        if (i == 19) {
            *start = strtoull(tok, NULL, 10);
            return 0;
        }
    }
    return -1;
}

/* Is pid a keeper (`ld.so libdlock_preload.so --dlock-keeper ...`)? */
static int is_keeper(pid_t pid) {
    char path[64], buf[4096];
    ssize_t n, off = 0;
    int i;
    snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
    if ((n = read_small(path, buf, sizeof buf)) <= 0) return 0;
    for (i = 0; i < 4 && off < n; i++) {
        if (strcmp(buf + off, "--dlock-keeper") == 0) return 1;
        off += (ssize_t)strlen(buf + off) + 1;
    }
    return 0;
}

/* Every process: *out (malloc'd), their number, or -1. */
static int scan_procs(struct pinfo **out) {
    struct pinfo *all = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    DIR *d = opendir("/proc");
    if (d == NULL) return -1;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        struct pinfo pi;
        if (end == e->d_name || *end != '\0' || pid <= 0) continue;
        pi.pid = (pid_t)pid;
        if (pstat(pi.pid, &pi.ppid, &pi.start) != 0) continue;
        if (n == cap) {
            struct pinfo *m = realloc(all, (size_t)(cap = cap ? cap * 2 : 256) * sizeof *all);
            if (m == NULL) break;
            all = m;
        }
        all[n++] = pi;
    }
    closedir(d);
    *out = all;
    return n;
}

struct target {
    pid_t pid;
    int pidfd; /* -1 without pidfd_open (then kill by pid) */
};

static int in_targets(const struct target *t, int n, pid_t pid) {
    int i;
    for (i = 0; i < n; i++)
        if (t[i].pid == pid) return 1;
    return 0;
}

static int signal_target(const struct target *t, int sig) {
    if (t->pidfd >= 0) return (int)syscall(SYS_pidfd_send_signal, t->pidfd, sig, NULL, 0);
    return kill(t->pid, sig);
}

/* Adds pi to the targets, stopped; 0, or -1 if it is gone (or reused). */
static int add_target(struct target **t, int *n, int *cap, const struct pinfo *pi) {
    struct target x;
    pid_t pp;
    unsigned long long st;
    x.pid = pi->pid;
    x.pidfd = (int)syscall(SYS_pidfd_open, pi->pid, 0);
    if (x.pidfd < 0 && errno != ENOSYS) return -1;
    /* The pidfd names one process for good: is it the one we saw? */
    if (pstat(pi->pid, &pp, &st) != 0 || st != pi->start) {
        if (x.pidfd >= 0) syscall(SYS_close, x.pidfd);
        return -1;
    }
    if (*n == *cap) {
        struct target *m = realloc(*t, (size_t)(*cap = *cap ? *cap * 2 : 16) * sizeof **t);
        if (m == NULL) {
            if (x.pidfd >= 0) syscall(SYS_close, x.pidfd);
            return -1;
        }
        *t = m;
    }
    signal_target(&x, SIGSTOP); /* it forks no more while we look */
    (*t)[(*n)++] = x;
    return 0;
}

static int is_root(const pid_t *roots, int nroots, pid_t pid) {
    int i;
    for (i = 0; i < nroots; i++)
        if (roots[i] == pid) return 1;
    return 0;
}

/* Stops roots (if with_roots) and every descendant of theirs. */
static int stop_set(const pid_t *roots, int nroots, int with_roots) {
    struct target *t = NULL;
    int nt = 0, cap = 0, round, i, left;
    pid_t self = getpid();
    struct timespec ten = { 0, 10 * 1000 * 1000 };

    for (round = 0; round < 16; round++) {
        struct pinfo *all = NULL;
        int nall = scan_procs(&all), added = 0, more;
        if (nall < 0) break;
        if (round == 0 && with_roots) {
            for (i = 0; i < nall; i++)
                if (is_root(roots, nroots, all[i].pid) && all[i].pid != self && all[i].pid > 1)
                    added += add_target(&t, &nt, &cap, &all[i]) == 0;
        }
        do { /* descendants, generation by generation */
            more = 0;
            for (i = 0; i < nall; i++) {
                const struct pinfo *p = &all[i];
                if (p->pid <= 1 || p->pid == self || in_targets(t, nt, p->pid) || is_root(roots, nroots, p->pid))
                    continue;
                if (!is_root(roots, nroots, p->ppid) && !in_targets(t, nt, p->ppid)) continue;
                if (is_keeper(p->pid)) continue;
                if (add_target(&t, &nt, &cap, p) == 0) {
                    added++;
                    more = 1;
                }
            }
        } while (more);
        free(all);
        if (added == 0) break; /* none forked while we looked */
    }
    for (i = 0; i < nt; i++) signal_target(&t[i], SIGABRT);
    for (i = 0; i < nt; i++) signal_target(&t[i], SIGCONT);
    /* A second for SIGABRT to work; then SIGKILL whoever caught it. */
    for (left = 100; left > 0; left--) {
        int alive = 0;
        for (i = 0; i < nt; i++) {
            struct pollfd pf = { t[i].pidfd, POLLIN, 0 };
            if (t[i].pidfd >= 0 ? poll(&pf, 1, 0) == 0 : kill(t[i].pid, 0) == 0) alive++;
        }
        if (alive == 0) break;
        nanosleep(&ten, NULL);
    }
    for (i = 0; i < nt; i++) {
        struct pollfd pf = { t[i].pidfd, POLLIN, 0 };
        if (t[i].pidfd >= 0 ? poll(&pf, 1, 0) == 0 : left == 0) signal_target(&t[i], SIGKILL);
        if (t[i].pidfd >= 0) syscall(SYS_close, t[i].pidfd);
    }
    free(t);
    return nt;
}

int dlpl_stop_tree(pid_t root, int with_root) {
    return stop_set(&root, 1, with_root);
}

/* The processes that hold the lock on our file (the program is gone: a
 * child, or the shell that lent it the descriptor, holds it now): those
 * with a descriptor of the file whose /proc fdinfo shows a flock lock
 * the program took (its pid).  Up to max. */
static int holders(pid_t *out, int max, long program) {
    struct stat me;
    struct dirent *e;
    DIR *d;
    int n = 0;
    pid_t self = getpid();
    if (fstat(3, &me) != 0 || (d = opendir("/proc")) == NULL) return 0;
    while ((e = readdir(d)) != NULL && n < max) {
        char path[96], *end;
        long pid = strtol(e->d_name, &end, 10);
        struct dirent *f;
        DIR *fds;
        if (end == e->d_name || *end != '\0' || pid <= 1 || pid == self) continue;
        snprintf(path, sizeof path, "/proc/%ld/fd", pid);
        if ((fds = opendir(path)) == NULL) continue;
        while ((f = readdir(fds)) != NULL) {
            char info[4096], *l;
            struct stat st;
            snprintf(path, sizeof path, "/proc/%ld/fd/%.20s", pid, f->d_name);
            if (f->d_name[0] == '.' || stat(path, &st) != 0 || st.st_dev != me.st_dev || st.st_ino != me.st_ino)
                continue;
            snprintf(path, sizeof path, "/proc/%ld/fdinfo/%.20s", pid, f->d_name);
            if (read_small(path, info, sizeof info) <= 0) continue;
            for (l = strstr(info, "lock:"); l != NULL; l = strstr(l + 5, "lock:")) {
                /* "lock:\t1: FLOCK  ADVISORY  WRITE 4242 08:02:1234 0 EOF" */
                char k[16], adv[16], rw[16];
                long lpid;
                if (sscanf(l, "lock: %*d: %15s %15s %15s %ld", k, adv, rw, &lpid) != 4) continue;
                if (strcmp(k, "FLOCK") != 0 || (lpid > 0 && lpid != program)) continue;
                break;
            }
            if (l != NULL) {
                out[n++] = (pid_t)pid;
                break;
            }
        }
        closedir(fds);
    }
    closedir(d);
    return n;
}

/* -------------------------------------------------------------- keeper */

#define SOCK 4
#define WFD 3

static int watch_ok, abort_on_lost;
static long parent; /* the program */
static const char *lockname;
static dlock_rwlock_t rw;
static int held;         /* cluster mode: 0, 1, 2 */
static int parent_gone;
static volatile sig_atomic_t term;
static int gone_pipe[2] = { -1, -1 };
static int lost_pipe[2] = { -1, -1 }; /* keeper_on_lost -> the main loop: stop the program */

static void on_usr(int s) {
    (void)s;
}
static void on_term(int s) {
    (void)s;
    term = 1;
}

static void keeper_on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)arg;
    if (abort_on_lost) {
        char c = 'l';
        dlpl_msg("lost the cluster lock '%s' (%s); DLOCK_ON_LOST=abort: stopping the program", name, dlpl_lost_why());
        /* The stopping is the main loop's: this is the renewal thread. */
        (void)!write(lost_pipe[1], &c, 1);
    } else {
        dlpl_msg("lost the cluster lock '%s' (%s): it no longer excludes other hosts "
                 "(DLOCK_ON_LOST=warn)", name, dlpl_lost_why());
    }
}

/* DLOCK_ON_LOST=abort: the program and what it started; if the program
 * has exited, whoever holds its lock now (a child that inherited the
 * descriptor, the shell that lent it one) and what they started. */
static void stop_program(void) {
    pid_t h[64];
    int n;
    if (getppid() == (pid_t)parent) { /* still our parent: alive, and no other process */
        n = dlpl_stop_tree((pid_t)parent, 1);
        if (n < 1) n = 1;
        dlpl_msg("'%s': SIGABRT to program %ld and the %d process%s it started", lockname, parent, n - 1,
                 n - 1 == 1 ? "" : "es");
        return;
    }
    n = watch_ok ? holders(h, 64, parent) : 0;
    if (n == 0) {
        dlpl_msg("'%s': program %ld has exited and no process holds its lock: nothing to stop", lockname, parent);
        return;
    }
    n = stop_set(h, n, 1);
    dlpl_msg("'%s': program %ld has exited; SIGABRT to the processes holding its lock and what they started (%d)",
             lockname, parent, n);
}

/* The kernel side: an exclusive request on our own description. */
static int klock(int wait) {
    return flock(WFD, LOCK_EX | (wait ? 0 : LOCK_NB));
}

static void kunlock(void) {
    flock(WFD, LOCK_UN);
}

/* The watcher thread: waits in the kernel until the program's lock is
 * gone, then says so through gone_pipe ('g'); 'e' if it cannot watch. */
static pthread_t watcher;
static int watching;
static atomic_int disarming, watcher_done;

static void *keeper_watch_main(void *arg) {
    char c = 'g';
    (void)arg;
    for (;;) {
        if (klock(1) == 0) {
            kunlock();
            break;
        }
        if (errno == EINTR) {
            if (atomic_load(&disarming)) {
                c = 0;
                break;
            }
            continue;
        }
        c = 'e';
        break;
    }
    if (c != 0) (void)!write(gone_pipe[1], &c, 1);
    atomic_store(&watcher_done, 1);
    return NULL;
}

static void keeper_arm(void) {
    sigset_t mask, old;
    if (watching || !watch_ok) return;
    atomic_store(&disarming, 0);
    atomic_store(&watcher_done, 0);
    sigfillset(&mask);
    sigdelset(&mask, SIGUSR2);
    pthread_sigmask(SIG_SETMASK, &mask, &old);
    if (pthread_create(&watcher, NULL, keeper_watch_main, NULL) == 0) watching = 1;
    else watch_ok = 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Stops the watcher.  Returns 1 if it had seen the lock go. */
static int disarm(void) {
    char c = 0;
    if (!watching) return 0;
    atomic_store(&disarming, 1);
    while (!atomic_load(&watcher_done)) {
        struct timespec ts = { 0, 1000 * 1000 };
        pthread_kill(watcher, SIGUSR2); /* again, until it hears it */
        nanosleep(&ts, NULL);
    }
    pthread_join(watcher, NULL);
    watching = 0;
    while (read(gone_pipe[0], &c, 1) == 1) {
        if (c == 'e') watch_ok = 0;
        if (c == 'g') return 1;
    }
    return 0;
}

/* Is the program's kernel lock gone?  Checked with a non-blocking
 * request; anything but "granted" counts as still held. */
static int kernel_free(void) {
    if (!watch_ok) return 0;
    if (klock(0) == 0) {
        kunlock();
        return 1;
    }
    return 0;
}

static void release(void) {
    if (held) dlock_rwlock_unlock(&rw);
    held = 0;
}

static void reply(int rc) {
    struct dlpl_rep p;
    p.rc = rc;
    p.mode = held;
    (void)!send(SOCK, &p, sizeof p, MSG_NOSIGNAL);
}

/* Did the program cancel the request in flight (or go away)? */
static int cancelled(void) {
    struct pollfd pf = { SOCK, POLLIN, 0 };
    struct dlpl_req q;
    ssize_t n;
    if (poll(&pf, 1, 0) <= 0) return 0;
    n = recv(SOCK, &q, sizeof q, MSG_DONTWAIT);
    if (n == 0) {
        parent_gone = 1;
        return 1;
    }
    return n == (ssize_t)sizeof q && q.op == DLPL_OP_CANCEL;
}

static int do_lock(int mode, int try) {
    int rc;
    if (mode != 1 && mode != 2) return EINVAL;
    if (held == mode) return 0;
    /* A conversion is not atomic, as flock(2) says of its own: the old
     * lock goes first. */
    release();
    for (;;) {
        rc = dlock_rwlock_xlock(&rw, mode == 1, (try ? DLOCK_F_TRY : 0) | DLOCK_F_INTR, CLOCK_MONOTONIC, NULL);
        if (rc == EINTR && !cancelled() && !term) continue;
        break;
    }
    if (rc == 0) held = mode;
    return rc;
}

/* The keeper's main loop: one poll over the program's socket, the
 * watcher's pipe and the lost-lock pipe, and a handler per event.  A
 * handler returns KEEP_ON, or the keeper's exit status. */
#define KEEP_ON (-1)

static dlock_client_t *client; /* the keeper's own client */
static int init_err;           /* the client or the rwlock could not be made: every LOCK gets this */

/* SIGUSR1 (sent with the program's CANCEL) interrupts this thread's wait
 * for the server, SIGUSR2 (disarm) the watcher's in the kernel: neither
 * restarts.  SIGTERM, SIGHUP and SIGINT end the keeper; this thread
 * blocks every other signal.  A pipe that cannot be made turns its
 * feature off. */
static void keeper_signals(void) {
    struct sigaction sa;
    sigset_t mask;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr; /* no SA_RESTART: interrupts the waits */
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigfillset(&mask);
    sigdelset(&mask, SIGUSR1);
    sigdelset(&mask, SIGTERM);
    sigdelset(&mask, SIGHUP);
    sigdelset(&mask, SIGINT);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
    if (pipe2(gone_pipe, O_CLOEXEC | O_NONBLOCK) != 0) watch_ok = 0;
    if (pipe2(lost_pipe, O_CLOEXEC | O_NONBLOCK) != 0) abort_on_lost = 0;
}

/* The client (from DLOCK_URL and DLOCK_PREFIX) and the rwlock of the
 * lock's name; a failure is said once, and answers every LOCK. */
static void keeper_open(void) {
    dlock_config_t cfg;
    dlock_mutexattr_t attr;
    dlock_config_init(&cfg);
    cfg.breaker_ms = DLPL_BREAKER_MS; /* as the program's; a probe request needs it */
    if ((init_err = dlock_client_create(&client, &cfg)) == 0) {
        dlock_mutexattr_init(&attr);
        dlock_mutexattr_setclient(&attr, client);
        dlock_mutexattr_setlostcallback(&attr, keeper_on_lost, NULL);
        /* Linux semantics, as flock(2) has them: a
         * shared lock is granted while only shared locks are held, whoever
         * waits (writers first would deadlock `flock -s L sh -c 'flock -s
         * L true'` behind a writer that waits for the outer reader). */
        dlock_mutexattr_setrwkind(&attr, DLOCK_RWLOCK_PREFER_READER);
        dlpl_conf_lock_opts(); /* the program's, passed on in the environment */
        dlpl_lock_delay_set(&attr);
        dlpl_risk_set(&attr, (pid_t)parent); /* the program the keeper holds the lock for */
        init_err = dlock_rwlock_init(&rw, lockname, &attr);
    }
    if (init_err != 0) dlpl_msg("'%s': %s", lockname, dlock_last_error());
}

/* SIGTERM (or HUP, INT): give the lock up and exit; the status tells the
 * program that a held lock went this way. */
static int handle_term(void) {
    int was = held;
    disarm();
    release();
    return was ? DLPL_KEEPER_TERMINATED : 0; /* the program hears of it */
}

/* The program is gone and nothing watches: give up the lock unless the
 * kernel still has it (then watch it, for whoever holds it now). */
static int handle_program_gone(void) {
    if (held && watch_ok && !kernel_free()) {
        keeper_arm();
        return KEEP_ON;
    }
    release();
    return 0;
}

/* The renewal thread lost the lock with DLOCK_ON_LOST=abort. */
static int handle_lost(void) {
    char c;
    while (read(lost_pipe[0], &c, 1) == 1)
        ;
    stop_program();
    return KEEP_ON;
}

/* The watcher is done: the program's kernel lock is gone (or it cannot
 * watch, and the loop goes on without it). */
static int handle_kernel_gone(void) {
    struct dlpl_req pq;
    int armed;
    if (!disarm() || !watch_ok) return KEEP_ON;
    /* The program's kernel lock is gone.  Its ARM may be here already (an
     * unlock): it is answered as ARM answers it -- if it says the
     * program's breaker is open, the release makes one attempt -- so that
     * the program does not wait for this process to exit. */
    armed = recv(SOCK, &pq, sizeof pq, MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof pq && pq.op == DLPL_OP_ARM;
    if (armed) {
        (void)!recv(SOCK, &pq, sizeof pq, MSG_DONTWAIT);
        if (pq.probe && held && !init_err) dlock__client_breaker_probe_now(client);
    }
    release();
    if (armed) reply(0);
    return 0;
}

/* LOCK: take (or convert) the cluster lock; the keeper ends once it
 * holds nothing. */
static int op_lock(const struct dlpl_req *q) {
    int rc;
    disarm();
    /* The lock's holder, as `dlock status` shows it: the program. */
    dlock__set_who(parent, q->tid > 0 ? (unsigned long)q->tid : (unsigned long)parent);
    /* The program's breaker is open: this request is its probe, one
     * attempt; a server that answers it closes the breaker and the
     * request goes on as any. */
    if (q->probe && !init_err) dlock__client_breaker_probe_now(client);
    rc = init_err ? init_err : do_lock(q->mode, q->try);
    reply(rc);
    return held ? KEEP_ON : 0;
}

/* ARM: after the program's kernel call.  Release if the kernel lock is
 * not there, else watch it. */
static int op_arm(const struct dlpl_req *q) {
    disarm();
    /* (probe: the program's breaker is open: a release makes one attempt;
     * unanswered, the lease runs out on the server) */
    if (q->probe && held && !init_err) dlock__client_breaker_probe_now(client);
    if (held && kernel_free()) release();
    if (held) keeper_arm();
    reply(0);
    return held ? KEEP_ON : 0;
}

/* UNLOCK: give the lock up and exit. */
static int op_unlock(void) {
    disarm();
    release();
    reply(0);
    return 0;
}

/* A request from the program (or its hang-up). */
static int handle_request(void) {
    struct dlpl_req q;
    ssize_t n = recv(SOCK, &q, sizeof q, 0);
    if (n < 0) return KEEP_ON;
    if (n == 0) {
        parent_gone = 1;
        return KEEP_ON;
    }
    if (n != (ssize_t)sizeof q) return KEEP_ON;
    switch (q.op) {
    case DLPL_OP_LOCK:
        return op_lock(&q);
    case DLPL_OP_ARM:
        return op_arm(&q);
    case DLPL_OP_UNLOCK:
        return op_unlock();
    default: /* a CANCEL that came after its answer */
        return KEEP_ON;
    }
}

static int keeper_main(void) {
    keeper_signals();
    keeper_open();
    for (;;) {
        struct pollfd pf[3];
        int rc = KEEP_ON;

        if (term) return handle_term();
        if (parent_gone && !watching) {
            if ((rc = handle_program_gone()) != KEEP_ON) return rc;
            continue;
        }
        pf[0].fd = parent_gone ? -1 : SOCK;
        pf[1].fd = gone_pipe[0];
        pf[2].fd = lost_pipe[0];
        pf[0].events = pf[1].events = pf[2].events = POLLIN;
        pf[0].revents = pf[1].revents = pf[2].revents = 0;
        if (poll(pf, 3, -1) < 0) continue;
        /* One event a turn, the lost lock first, then the watcher. */
        if (pf[2].revents) rc = handle_lost();
        else if (pf[1].revents) rc = handle_kernel_gone();
        else if (pf[0].revents) rc = handle_request();
        if (rc != KEEP_ON) return rc;
    }
}

static char *cmdline_arg(char *buf, size_t len, int idx) {
    size_t off = 0;
    while (idx-- > 0) {
        off += strlen(buf + off) + 1;
        if (off >= len) return NULL;
    }
    return buf + off;
}

/* The keeper's arguments from its command line (buf, len bytes of NUL-
 * separated words): "--dlock-keeper" among the first four, then KIND
 * WATCH ON-LOST PARENT NAME, KIND "flock" (record locks have no keeper).
 * 0 with them set, or -1.  (fuzz/fuzz_keeper.c) */
static int keeper_args(char *buf, size_t len) {
    char *k, *w, *ol, *pp;
    int i, at = -1;
    for (i = 0; i < 4; i++) {
        char *a = cmdline_arg(buf, len, i);
        if (a != NULL && strcmp(a, "--dlock-keeper") == 0) at = i;
    }
    if (at < 0 || (k = cmdline_arg(buf, len, at + 1)) == NULL || (w = cmdline_arg(buf, len, at + 2)) == NULL ||
        (ol = cmdline_arg(buf, len, at + 3)) == NULL || (pp = cmdline_arg(buf, len, at + 4)) == NULL ||
        (lockname = cmdline_arg(buf, len, at + 5)) == NULL || *lockname == '\0' || strcmp(k, "flock") != 0)
        return -1;
    watch_ok = w[0] == 'w';
    abort_on_lost = strcmp(ol, "abort") == 0;
    parent = strtol(pp, NULL, 10);
    return 0;
}

/* The keeper's main, run by the thin object's entry point
 * (load.c, dlpl_keeper_entry) with the command line it was started with. */
int dlpl_keeper_main(char *cmdline, size_t len) {
    if (keeper_args(cmdline, len) != 0) {
        fprintf(stderr, "libdlock_preload.so %s: the LD_PRELOAD mode of dlock; load it with\n"
                        "  LD_PRELOAD=libdlock_preload.so DLOCK_MAP='file:/locks/*.lock' program ...\n"
                        "(see docs/preload.md)\n", DLOCK_VERSION_STRING);
        return 2;
    }
    return keeper_main();
}
