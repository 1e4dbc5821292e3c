/* fixture.c -- the test harness: starts and stops real redis-servers on
 * loopback ports, cleans up after a dying test process, runs CUnit suites.
 *
 * Every server started here is recorded in a small fixed table (not in the
 * caller's dlt_redis, which may be gone by the time we clean up) together
 * with the pid of the process that started it.  The atexit and
 * fatal-signal handlers walk that table and SIGKILL and remove only the
 * servers whose recorded starter is the current process: a fork child
 * inherits the table and the handlers, but never kills its parent's
 * servers, whether it was made by dlt_spawn() or by a bare fork().
 */
#include "fixture.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

extern char **environ;

#define DLT_MAX_SERVERS 64
#define DLT_START_TIMEOUT_S 5.0   /* until a new server answers PING */
#define DLT_RESTART_RETRY_S 5.0   /* how long restart retries a taken port */
#define DLT_STOP_TIMEOUT_MS 3000  /* SIGTERM grace before SIGKILL */
#define DLT_CMD_TIMEOUT_MS 2000   /* dlt_redis_cmd: connect and reply */
#define DLT_HARD_LIMIT_S 600      /* alarm() for a whole dlt_main run */
#define DLT_DIR_TAG "/dlt-redis-" /* every folder we make, and may remove */

/* ========================================================================
 * Time
 * ====================================================================== */

double dlt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

long long dlt_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dlt_sleep_ms(unsigned ms) {
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

struct timespec dlt_abs_in(clockid_t clock, long ms) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_nsec -= 1000000000L;
        ts.tv_sec++;
    }
    while (ts.tv_nsec < 0) {
        ts.tv_nsec += 1000000000L;
        ts.tv_sec--;
    }
    return ts;
}

static int reap(pid_t pid, int timeout_ms);

/* A TLS connection to a TLS-only server (tls_open). */
struct dlt_tls_link {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    redisReader *reader;
};

/* ========================================================================
 * The table of running servers, and clean-up at exit and on fatal signals
 * ====================================================================== */

typedef struct dlt_slot {
    volatile sig_atomic_t used;
    volatile pid_t starter;  /* the process that started the server */
    volatile pid_t pid;      /* the server, 0 when not running */
    const dlt_redis *owner;  /* the caller's struct, only as a lookup key */
    int lockfd;              /* holds the flock on dir/owner (see claim_dir) */
    char dir[256];
} dlt_slot;

static dlt_slot slots[DLT_MAX_SERVERS];
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

/* Set in a dlt_spawn() child.  The per-slot starter pid already keeps a
 * child away from its parent's servers; this also keeps it from printing
 * the parent's warnings. */
static volatile sig_atomic_t in_spawned_child;

static const int fatal_signals[] = {
    SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGALRM,
};
#define NFATAL (sizeof fatal_signals / sizeof fatal_signals[0])
static struct sigaction old_actions[NFATAL];

/* A Linux dirent64, as getdents64 returns it. */
struct dlt_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* rm -rf with nothing but system calls (no opendir, which allocates), so
 * that a signal handler may use it.  Repeats the scan until a pass finds
 * nothing, since removing entries while reading a directory may hide some
 * from the same pass. */
static void rm_tree_at(int parentfd, const char *name, int depth) {
    int fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        _Alignas(8) char buf[2048];
        int found;
        int passes = 0;
        do {
            found = 0;
            lseek(fd, 0, SEEK_SET);
            for (;;) {
                long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
                if (n <= 0) break;
                for (long off = 0; off < n;) {
                    struct dlt_dirent64 *d = (struct dlt_dirent64 *)(void *)(buf + off);
                    off += d->d_reclen;
                    if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                        continue;
                    found = 1;
                    if (unlinkat(fd, d->d_name, 0) != 0 && errno == EISDIR && depth < 16)
                        rm_tree_at(fd, d->d_name, depth + 1);
                }
            }
        } while (found && ++passes < 8);
        close(fd);
    }
    unlinkat(parentfd, name, AT_REMOVEDIR);
}

void dlt_rm_tree(const char *dir) {
    if (dir[0] != '\0') rm_tree_at(AT_FDCWD, dir, 0);
}

/* Removes a folder of ours; refuses anything we did not name. */
static void rm_dir(const char *dir) {
    if (dir[0] == '/' && strstr(dir, DLT_DIR_TAG) != NULL)
        rm_tree_at(AT_FDCWD, dir, 0);
}

/* SIGKILLs every server this process started and removes its folder.
 * Async-signal-safe: kill, waitpid and the system calls of rm_tree_at. */
static void kill_all_servers(int from_atexit) {
    pid_t self = getpid();
    for (size_t i = 0; i < DLT_MAX_SERVERS; i++) {
        dlt_slot *s = &slots[i];
        if (!s->used || s->starter != self) continue;
        pid_t pid = s->pid;
        if (pid > 0) {
            if (from_atexit && !in_spawned_child)
                fprintf(stderr, "dlt: killing redis-server %d left running (%s)\n", (int)pid,
                        s->dir);
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            s->pid = 0;
        }
        rm_dir(s->dir);
        if (s->lockfd >= 0) close(s->lockfd);
        s->lockfd = -1;
        s->used = 0;
    }
}

static void on_exit_cleanup(void) {
    kill_all_servers(1);
}

static void write_str(const char *s) {
    ssize_t n = write(STDERR_FILENO, s, strlen(s));
    (void)n;
}

/* Kills our servers, then lets the signal do what it would have done
 * without us: the previous action is put back and the signal raised again
 * (it stays pending until we return).  A fault raised by the CPU (SIGSEGV
 * with si_code > 0, ...) is not raised again: returning re-runs the
 * faulting instruction, which hands the previous handler -- AddressSanitizer's,
 * say -- the true fault address. */
static void on_fatal_signal(int sig, siginfo_t *info, void *ucontext) {
    int saved_errno = errno;
    size_t i;
    (void)ucontext;

    if (sig == SIGALRM && !in_spawned_child)
        write_str("dlt: hard time limit reached (alarm); killing the test's redis-servers\n");
    kill_all_servers(0);
    for (i = 0; i < NFATAL; i++)
        if (fatal_signals[i] == sig) sigaction(sig, &old_actions[i], NULL);

    int cpu_fault = (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) &&
                    info != NULL && info->si_code > 0;
    if (!cpu_fault) raise(sig);
    errno = saved_errno;
}

/* The sanitizers end a process with _exit() after a report (UBSan with
 * halt_on_error, ASan without abort_on_error), which runs neither atexit
 * handlers nor signal handlers; they do call a death callback.  GCC links
 * ASan and UBSan as two shared runtimes, each with its own callback, so
 * every loaded *san runtime is asked by name; a runtime linked statically
 * into the executable (clang) is reached through the weak reference, which
 * is NULL when there is none. */
typedef void (*dlt_set_death_cb_fn)(void (*callback)(void));
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void on_sanitizer_death(void) {
    kill_all_servers(0);
}

static int register_death_callback(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (base == NULL || strstr(base, "san.so") == NULL) return 0;
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return 0;
    dlt_set_death_cb_fn set;
    *(void **)&set = dlsym(h, "__sanitizer_set_death_callback");
    if (set != NULL) set(on_sanitizer_death);
    dlclose(h);
    return 0;
}

static void install_hooks(void) {
    atexit(on_exit_cleanup);
    if (__sanitizer_set_death_callback != NULL)
        __sanitizer_set_death_callback(on_sanitizer_death);
    dl_iterate_phdr(register_death_callback, NULL);
    for (size_t i = 0; i < NFATAL; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fatal_signal;
        sa.sa_flags = SA_SIGINFO;
        sigfillset(&sa.sa_mask);
        if (sigaction(fatal_signals[i], NULL, &old_actions[i]) != 0) continue;
        /* A signal the caller chose to ignore (nohup, background jobs)
         * stays ignored. */
        if (!(old_actions[i].sa_flags & SA_SIGINFO) && old_actions[i].sa_handler == SIG_IGN)
            continue;
        sigaction(fatal_signals[i], &sa, NULL);
    }
}

static dlt_slot *slot_find(const dlt_redis *r) {
    pid_t self = getpid();
    for (size_t i = 0; i < DLT_MAX_SERVERS; i++)
        if (slots[i].used && slots[i].owner == r && slots[i].starter == self) return &slots[i];
    return NULL;
}

static int slot_register(const dlt_redis *r, int lockfd) {
    int rc = -1;
    pthread_mutex_lock(&slots_lock);
    dlt_slot *s = slot_find(r);
    if (s != NULL) {
        /* r was started before and never cleaned up: end that server. */
        fprintf(stderr, "dlt: dlt_redis_start on a running dlt_redis; ending the old server\n");
        if (s->pid > 0) {
            kill(s->pid, SIGKILL);
            reap(s->pid, -1);
        }
        rm_dir(s->dir);
        if (s->lockfd >= 0) close(s->lockfd);
    }
    for (size_t i = 0; s == NULL && i < DLT_MAX_SERVERS; i++)
        if (!slots[i].used || slots[i].starter != getpid()) s = &slots[i];
    if (s != NULL) {
        s->used = 0;
        s->pid = 0;
        s->owner = r;
        s->starter = getpid();
        s->lockfd = lockfd;
        memcpy(s->dir, r->dir, sizeof s->dir);
        s->used = 1;
        rc = 0;
    }
    pthread_mutex_unlock(&slots_lock);
    if (rc != 0) fprintf(stderr, "dlt: more than %d redis-servers at once\n", DLT_MAX_SERVERS);
    return rc;
}

static void slot_set_pid(const dlt_redis *r, pid_t pid) {
    pthread_mutex_lock(&slots_lock);
    dlt_slot *s = slot_find(r);
    if (s != NULL) s->pid = pid;
    pthread_mutex_unlock(&slots_lock);
}

static void slot_unregister(const dlt_redis *r) {
    pthread_mutex_lock(&slots_lock);
    dlt_slot *s = slot_find(r);
    if (s != NULL) {
        if (s->lockfd >= 0) close(s->lockfd);
        s->lockfd = -1;
        s->used = 0;
    }
    pthread_mutex_unlock(&slots_lock);
}

/* ========================================================================
 * Processes
 * ====================================================================== */

/* Waits for pid up to timeout_ms (< 0: forever).  Returns 0..255 for an
 * exit, 128 + signal for a death by signal, -2 on timeout, -1 on error. */
static int reap(pid_t pid, int timeout_ms) {
    double deadline = dlt_now() + timeout_ms / 1000.0;
    unsigned nap = 1;
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, timeout_ms < 0 ? 0 : WNOHANG);
        if (w == pid) {
            if (WIFEXITED(st)) return WEXITSTATUS(st);
            if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
            continue; /* stopped/continued: keep waiting */
        }
        if (w < 0 && errno != EINTR) return -1;
        if (timeout_ms >= 0 && dlt_now() >= deadline) return -2;
        if (w == 0) {
            dlt_sleep_ms(nap);
            if (nap < 20) nap *= 2;
        }
    }
}

pid_t dlt_spawn(int (*fn)(void *), void *arg) {
    fflush(NULL); /* or the child would print the parent's buffered output again */
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dlt_spawn: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        in_spawned_child = 1;
        int rc = fn(arg);
        fflush(NULL);
        _exit(rc & 0xff);
    }
    return pid;
}

int dlt_wait(pid_t pid, int timeout_ms) {
    if (pid <= 0) return -1;
    int rc = reap(pid, timeout_ms);
    if (rc == -2) {
        fprintf(stderr, "dlt_wait: child %d still running after %d ms; killing it\n", (int)pid,
                timeout_ms);
        kill(pid, SIGKILL);
        reap(pid, -1);
        return -1;
    }
    return rc;
}

/* ========================================================================
 * Pipes between a test and its children
 * ====================================================================== */

int dlt_chan_open(struct dlt_chan *ch) {
    if (pipe(ch->to_child) != 0) return -1;
    if (pipe(ch->to_parent) != 0) {
        close(ch->to_child[0]);
        close(ch->to_child[1]);
        return -1;
    }
    return 0;
}

void dlt_chan_close(struct dlt_chan *ch) {
    close(ch->to_child[0]);
    close(ch->to_child[1]);
    close(ch->to_parent[0]);
    close(ch->to_parent[1]);
}

int dlt_pipe_put(int fd, char c) {
    return write(fd, &c, 1) == 1 ? 0 : -1;
}

int dlt_pipe_read(int fd, void *buf, size_t n, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    size_t got = 0;
    while (got < n) {
        struct pollfd p = { fd, POLLIN, 0 };
        int left = (int)((end - dlt_now()) * 1000);
        if (left < 0) left = 0;
        int k = poll(&p, 1, left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

int dlt_pipe_get(int fd, int timeout_ms) {
    unsigned char c;
    return dlt_pipe_read(fd, &c, 1, timeout_ms) == 0 ? c : -1;
}

/* ========================================================================
 * Starting redis-server
 * ====================================================================== */

/* A small per-thread PRNG for port choice: parallel test processes must
 * not all try the same ports in the same order. */
static unsigned port_random(void) {
    static __thread uint64_t state;
    if (state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                (uint64_t)(uintptr_t)&state;
        if (state == 0) state = 1;
    }
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (unsigned)((state * 2685821657736338717ull) >> 33);
}

/* 1 if 127.0.0.1:port can be bound now, as redis will (SO_REUSEADDR). */
static int port_is_free(int port) {
    if (port <= 0 || port > 65535) return 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/* A port the kernel hands out for bind(0), or 0. */
static int ephemeral_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int port = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Picks a free port, below the kernel's ephemeral range when there is
 * room (10000 .. first ephemeral - 1).  A port inside that range can be
 * taken, while a test has its server stopped, as the local port of some
 * outgoing connection -- or of a reconnect to that very port, which then
 * "connects" to itself (TCP simultaneous open) and talks to nobody.  With
 * cluster set, port + 10000 (the cluster bus) must be free too.  Falls back
 * to bind(127.0.0.1:0).  Any choice may still lose a race; the caller
 * retries when the server cannot bind. */
static int pick_port(int cluster) {
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768;
        fclose(f);
    }
    int min = 10000, max = lo - 1 - (cluster ? 10000 : 0);
    for (int i = 0; max - min >= 100 && i < 200; i++) {
        int p = min + (int)(port_random() % (unsigned)(max - min + 1));
        if (p == 6379 || p == 26379) continue;
        if (port_is_free(p) && (!cluster || port_is_free(p + 10000))) return p;
    }
    for (int i = 0; i < 50; i++) {
        int p = ephemeral_port();
        if (p > 0 && (!cluster || port_is_free(p + 10000))) return p;
    }
    return 0;
}

int dlt_free_port(void) {
    return pick_port(0);
}

/* 1 if some line of conf begins (after blanks) with word followed by a blank. */
static int conf_has_directive(const char *conf, const char *word) {
    size_t n = strlen(word);
    for (const char *p = conf; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        while (*p == ' ' || *p == '\t') p++;
        if (strncasecmp(p, word, n) == 0 && (p[n] == ' ' || p[n] == '\t')) return 1;
    }
    return 0;
}

/* The value of r's "requirepass" line (unquoted, or in double quotes)
 * into buf: 1, or 0 when it has none.  The fixture's own connections to
 * the server (readiness, dlt_redis_cmd) authenticate with it. */
static int conf_requirepass(const dlt_redis *r, char *buf, size_t cap) {
    const char *p = r->conf_extra;
    for (; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        while (*p == ' ' || *p == '\t') p++;
        if (strncasecmp(p, "requirepass", 11) != 0 || (p[11] != ' ' && p[11] != '\t')) continue;
        p += 11;
        while (*p == ' ' || *p == '\t') p++;
        int quoted = *p == '"';
        size_t n = strcspn(p + quoted, quoted ? "\"\n" : " \t\r\n");
        if (n == 0 || n >= cap) return 0;
        memcpy(buf, p + quoted, n);
        buf[n] = '\0';
        return 1;
    }
    return 0;
}

static int conf_is_sentinel(const dlt_redis *r) {
    return conf_has_directive(r->conf_extra, "sentinel");
}

static int conf_is_cluster(const dlt_redis *r) {
    const char *p = r->conf_extra;
    for (; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        while (*p == ' ' || *p == '\t') p++;
        if (strncasecmp(p, "cluster-enabled", 15) == 0) {
            p += 15;
            while (*p == ' ' || *p == '\t' || *p == '"') p++;
            if (strncasecmp(p, "yes", 3) == 0) return 1;
        }
    }
    return 0;
}

static int write_conf(dlt_redis *r) {
    char path[320];
    snprintf(path, sizeof path, "%s/redis.conf", r->dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "dlt: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "# redis.conf written by the dlock test fixture (tests/fixture.c)\n");
    if (r->tls_dir[0]) {
        /* TLS only: nothing listens in plain TCP, the cluster bus and
         * replication (if any) are TLS too. */
        fprintf(f, "port 0\ntls-port %d\n", r->port);
        fprintf(f, "tls-cert-file \"%s/server.crt\"\ntls-key-file \"%s/server.key\"\n", r->tls_dir,
                r->tls_dir);
        fprintf(f, "tls-ca-cert-file \"%s/ca.crt\"\ntls-auth-clients optional\n", r->tls_dir);
        /* What it shows when it connects to another server (cluster bus,
         * replication), where a certificate for clientAuth is required. */
        fprintf(f, "tls-client-cert-file \"%s/client.crt\"\ntls-client-key-file \"%s/client.key\"\n",
                r->tls_dir, r->tls_dir);
        fprintf(f, "tls-replication yes\ntls-cluster yes\n");
        fprintf(f, "bind 127.0.0.1\nprotected-mode no\ndaemonize no\n");
    } else {
        fprintf(f, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n", r->port);
    }
    fprintf(f, "dir \"%s\"\nlogfile \"%s/redis.log\"\n", r->dir, r->dir);
    if (!conf_is_sentinel(r)) {
        fprintf(f, "save \"\"\nappendonly no\n");
        /* A replica's full sync starts at once (Redis' default waits 5 s
         * for more replicas to share it). */
        fprintf(f, "repl-diskless-sync-delay 0\n");
        /* DEBUG SLEEP and friends let tests stall the server. */
        fprintf(f, "enable-debug-command local\n");
    }
    if (r->conf_extra[0]) fprintf(f, "# extra\n%s\n", r->conf_extra);
    if (fclose(f) != 0) {
        fprintf(stderr, "dlt: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* $DLT_REDIS_SERVER, redis-server in PATH, or /usr/bin/redis-server. */
static void find_server_binary(char *out, size_t outlen) {
    const char *env = getenv("DLT_REDIS_SERVER");
    if (env != NULL && *env) {
        snprintf(out, outlen, "%s", env);
        return;
    }
    const char *path = getenv("PATH");
    while (path != NULL && *path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        if (len > 0 && len < outlen - 16) {
            snprintf(out, outlen, "%.*s/redis-server", (int)len, path);
            if (access(out, X_OK) == 0) return;
        }
        path = colon ? colon + 1 : NULL;
    }
    snprintf(out, outlen, "/usr/bin/redis-server");
}

/* The environment for redis-server: ours without LD_PRELOAD (a preload
 * test's dlock shim must not end up inside the server) and without
 * DLOCK_* variables.  Points into environ; free only the array. */
static char **server_environ(void) {
    size_t n = 0;
    while (environ[n] != NULL) n++;
    char **env = calloc(n + 1, sizeof *env);
    if (env == NULL) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "LD_PRELOAD=", 11) == 0) continue;
        if (strncmp(environ[i], "DLOCK_", 6) == 0) continue;
        env[j++] = environ[i];
    }
    return env;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* Reads the log from offset into buf (at most the last buflen-1 bytes). */
static void read_log(const dlt_redis *r, long offset, char *buf, size_t buflen) {
    char path[320];
    snprintf(path, sizeof path, "%s/redis.log", r->dir);
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    long size = file_size(path);
    if (size - offset > (long)buflen - 1) offset = size - ((long)buflen - 1);
    if (offset < 0) offset = 0;
    ssize_t n = pread(fd, buf, buflen - 1, offset);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
}

static void print_log(const dlt_redis *r, long offset) {
    char buf[2048];
    read_log(r, offset, buf, sizeof buf);
    fprintf(stderr, "dlt: ---- %s/redis.log ----\n%s%sdlt: ----\n", r->dir, buf,
            buf[0] && buf[strlen(buf) - 1] != '\n' ? "\n" : "");
}

/* Forks and execs redis-server on r's folder and config.  The child gets
 * PR_SET_PDEATHSIG when we are the main thread (the signal follows the
 * forking *thread*, so from another thread it would kill the server when
 * that thread ends), so that even a SIGKILLed test leaves no server. */
static pid_t exec_server(dlt_redis *r) {
    char bin[PATH_MAX], conf[320], logpath[320];
    find_server_binary(bin, sizeof bin);
    snprintf(conf, sizeof conf, "%s/redis.conf", r->dir);
    snprintf(logpath, sizeof logpath, "%s/redis.log", r->dir);
    char *argv[] = { "redis-server", conf, conf_is_sentinel(r) ? "--sentinel" : NULL, NULL };
    char **env = server_environ();
    if (env == NULL) return -1;
    long maxfd = sysconf(_SC_OPEN_MAX);
    if (maxfd < 0 || maxfd > 65536) maxfd = 65536;
    int main_thread = (pid_t)syscall(SYS_gettid) == getpid();
    pid_t parent = getpid();

    pid_t pid = fork();
    if (pid == 0) {
        if (main_thread) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(127);
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int in = open("/dev/null", O_RDONLY);
        int out = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in >= 0) dup2(in, STDIN_FILENO);
        if (out >= 0) {
            dup2(out, STDOUT_FILENO);
            dup2(out, STDERR_FILENO);
        }
        /* Our sockets (the library's connections to other servers) must
         * not live on in the server. */
#ifdef SYS_close_range
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
            for (long fd = 3; fd < maxfd; fd++) close((int)fd);
        execve(bin, argv, env);
        const char msg[] = "dlt: cannot exec redis-server\n";
        ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)n;
        _exit(127);
    }
    free(env);
    if (pid < 0) {
        fprintf(stderr, "dlt: fork: %s\n", strerror(errno));
        return -1;
    }
    r->pid = pid;
    slot_set_pid(r, pid);
    return pid;
}

static redisContext *connect_port(int port, int timeout_ms) {
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL) return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

static int tls_open(struct dlt_tls_link *t, int port, const char *cert_dir, int timeout_ms);
static redisReply *tls_cmd(struct dlt_tls_link *t, const char *fmt, ...);
static void tls_close(struct dlt_tls_link *t);

/* AUTH with r's requirepass, if it has one, on c (plain) or t (TLS):
 * 0, or -1 if the server refused it or did not answer. */
static int auth_if_needed(const dlt_redis *r, redisContext *c, struct dlt_tls_link *t) {
    char pw[256];
    if (!conf_requirepass(r, pw, sizeof pw)) return 0;
    redisReply *rep = c != NULL ? redisCommand(c, "AUTH %s", pw) : tls_cmd(t, "AUTH %s", pw);
    int ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;
    if (rep != NULL) freeReplyObject(rep);
    return ok ? 0 : -1;
}

/* server_answers for a TLS-only server. */
static int tls_server_answers(const dlt_redis *r) {
    struct dlt_tls_link t;
    int ok = 0;
    if (tls_open(&t, r->port, r->tls_dir, 500) != 0) return 0;
    redisReply *rep = auth_if_needed(r, NULL, &t) == 0 ? tls_cmd(&t, "PING") : NULL;
    if (rep != NULL && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0) {
        freeReplyObject(rep);
        rep = tls_cmd(&t, "INFO server");
        if (rep != NULL && rep->type == REDIS_REPLY_STRING) {
            const char *p = strstr(rep->str, "process_id:");
            ok = p != NULL && atol(p + 11) == (long)r->pid;
        }
    }
    if (rep != NULL) freeReplyObject(rep);
    tls_close(&t);
    return ok;
}

/* 1 when the server on r->port answers PONG and is our process (not some
 * other server that won the port), else 0. */
static int server_answers(const dlt_redis *r) {
    if (r->tls_dir[0]) return tls_server_answers(r);
    redisContext *c = connect_port(r->port, 200);
    if (c == NULL) return 0;
    int ok = 0;
    redisReply *rep = auth_if_needed(r, c, NULL) == 0 ? redisCommand(c, "PING") : NULL;
    if (rep != NULL && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0) {
        freeReplyObject(rep);
        rep = redisCommand(c, "INFO server");
        if (rep != NULL && rep->type == REDIS_REPLY_STRING) {
            const char *p = strstr(rep->str, "process_id:");
            ok = p != NULL && atol(p + 11) == (long)r->pid;
        }
    }
    if (rep != NULL) freeReplyObject(rep);
    redisFree(c);
    return ok;
}

/* Waits for the server just exec'd to answer.  0: ready; 1: it exited
 * because its port was taken (retry); -1: any other failure (log shown). */
static int wait_ready(dlt_redis *r, long log_offset) {
    double deadline = dlt_now() + DLT_START_TIMEOUT_S;
    for (;;) {
        int st = reap(r->pid, 0);
        if (st >= 0) {
            r->pid = 0;
            slot_set_pid(r, 0);
            char buf[4096];
            read_log(r, log_offset, buf, sizeof buf);
            if (strstr(buf, "Address already in use") != NULL) return 1;
            fprintf(stderr, "dlt: redis-server on port %d exited at start (status %d)\n", r->port,
                    st);
            print_log(r, log_offset);
            return -1;
        }
        if (server_answers(r)) return 0;
        if (dlt_now() >= deadline) break;
        dlt_sleep_ms(10);
    }
    fprintf(stderr, "dlt: redis-server on port %d did not answer PING within %.0f s\n", r->port,
            DLT_START_TIMEOUT_S);
    print_log(r, log_offset);
    kill(r->pid, SIGKILL);
    reap(r->pid, -1);
    r->pid = 0;
    slot_set_pid(r, 0);
    return -1;
}

static int launch(dlt_redis *r) {
    char logpath[320];
    snprintf(logpath, sizeof logpath, "%s/redis.log", r->dir);
    long offset = file_size(logpath);
    if (exec_server(r) < 0) return -1;
    return wait_ready(r, offset);
}

/* Marks a new folder as in use for as long as this process (or a fork
 * child of it) lives: an flock on dir/owner, which the kernel drops when
 * the last holder dies, whatever kills it.  The file is locked before it
 * gets its name, so a sweeper never sees it unlocked.  Returns the fd. */
static int claim_dir(const char *dir) {
    char tmp[320], path[320];
    snprintf(tmp, sizeof tmp, "%s/owner.new", dir);
    snprintf(path, sizeof path, "%s/owner", dir);
    int fd = open(tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX) != 0 || rename(tmp, path) != 0) {
        close(fd);
        return -1;
    }
    dprintf(fd, "%d\n", (int)getpid());
    return fd;
}

/* Removes the folders that test processes killed by SIGKILL (ctest does
 * that on a timeout) could not remove: those whose owner lock is free.
 * Their servers died with them (PR_SET_PDEATHSIG) or by ctest's hand. */
static void sweep_stale_dirs(const char *tmp, size_t tmplen) {
    DIR *d = opendir(tmp);
    if (d == NULL) return;
    const char *prefix = DLT_DIR_TAG + 1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        char dir[320], owner[340];
        snprintf(dir, sizeof dir, "%.*s/%s", (int)tmplen, tmp, e->d_name);
        snprintf(owner, sizeof owner, "%s/owner", dir);
        int fd = open(owner, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) rm_dir(dir);
        close(fd);
    }
    closedir(d);
}

static pthread_once_t sweep_once = PTHREAD_ONCE_INIT;

static void sweep_tmpdir(void) {
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp != '/') tmp = "/tmp";
    sweep_stale_dirs(tmp, strlen(tmp));
}

/* The folder for a new server or for certificates: "$TMPDIR/dlt-redis-"
 * + suffix + XXXXXX, made and claimed (claim_dir).  plain: only characters
 * that need no quoting in a URL or a shell command (TMPDIR is left for
 * /tmp if it has others).  The flock's fd, or -1 (dir emptied). */
static int make_dir(char *dir, size_t cap, const char *suffix, int plain, const char *who) {
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp != '/') tmp = "/tmp";
    if (plain && strspn(tmp, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-") != strlen(tmp))
        tmp = "/tmp";
    size_t tl = strlen(tmp);
    while (tl > 1 && tmp[tl - 1] == '/') tl--;
    if (tl + sizeof DLT_DIR_TAG + strlen(suffix) + 6 > 200 || strpbrk(tmp, "\"\\\n") != NULL) {
        fprintf(stderr, "%s: TMPDIR unusable (too long, or quotes): %s\n", who, tmp);
        dir[0] = '\0';
        return -1;
    }
    snprintf(dir, cap, "%.*s%s%sXXXXXX", (int)tl, tmp, DLT_DIR_TAG, suffix);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "%s: mkdtemp %s: %s\n", who, dir, strerror(errno));
        dir[0] = '\0';
        return -1;
    }
    int lockfd = claim_dir(dir);
    if (lockfd < 0) {
        fprintf(stderr, "%s: cannot lock %s/owner: %s\n", who, dir, strerror(errno));
        rm_dir(dir);
        dir[0] = '\0';
    }
    return lockfd;
}

static int start_server(dlt_redis *r, const char *extra_conf, const char *tls_dir) {
    if (r == NULL) return -1;
    memset(r, 0, sizeof *r);
    if (tls_dir != NULL) {
        if (strlen(tls_dir) >= sizeof r->tls_dir || strpbrk(tls_dir, "\"\\\n") != NULL) {
            fprintf(stderr, "dlt_redis_start_tls: certificate folder unusable: %s\n", tls_dir);
            return -1;
        }
        strcpy(r->tls_dir, tls_dir);
    }
    if (extra_conf != NULL) {
        if (strlen(extra_conf) >= sizeof r->conf_extra) {
            fprintf(stderr, "dlt_redis_start: extra_conf longer than %zu bytes\n",
                    sizeof r->conf_extra - 1);
            return -1;
        }
        strcpy(r->conf_extra, extra_conf);
    }
    pthread_once(&hooks_once, install_hooks);
    pthread_once(&sweep_once, sweep_tmpdir);

    int lockfd = make_dir(r->dir, sizeof r->dir, "", 0, "dlt_redis_start");
    if (lockfd < 0) return -1;
    if (slot_register(r, lockfd) != 0) {
        close(lockfd);
        rm_dir(r->dir);
        r->dir[0] = '\0';
        return -1;
    }

    int cluster = conf_is_cluster(r);
    for (int attempt = 0; attempt < 20; attempt++) {
        r->port = pick_port(cluster);
        if (r->port == 0) {
            fprintf(stderr, "dlt_redis_start: no free port on 127.0.0.1\n");
            break;
        }
        snprintf(r->url, sizeof r->url, "%s://127.0.0.1:%d", r->tls_dir[0] ? "rediss" : "redis",
                 r->port);
        if (write_conf(r) != 0) break;
        int rc = launch(r);
        if (rc == 0) return 0;
        if (rc < 0) break;
    }
    fprintf(stderr, "dlt_redis_start: could not start redis-server\n");
    dlt_redis_cleanup(r);
    return -1;
}

int dlt_redis_start(dlt_redis *r, const char *extra_conf) {
    return start_server(r, extra_conf, NULL);
}

int dlt_redis_start_tls(dlt_redis *r, const char *cert_dir, const char *extra_conf) {
    if (cert_dir == NULL && (cert_dir = dlt_tls_dir()) == NULL) {
        if (r != NULL) memset(r, 0, sizeof *r);
        return -1;
    }
    return start_server(r, extra_conf, cert_dir);
}

int dlt_redis_restart(dlt_redis *r) {
    if (r == NULL || r->dir[0] == '\0' || r->port <= 0) {
        fprintf(stderr, "dlt_redis_restart: server was never started\n");
        return -1;
    }
    if (r->pid > 0) {
        fprintf(stderr, "dlt_redis_restart: server %d is still running\n", (int)r->pid);
        return -1;
    }
    double deadline = dlt_now() + DLT_RESTART_RETRY_S;
    for (;;) {
        int rc = launch(r);
        if (rc <= 0) return rc;
        if (dlt_now() >= deadline) break;
        dlt_sleep_ms(100);
    }
    fprintf(stderr, "dlt_redis_restart: port %d still taken after %.0f s\n", r->port,
            DLT_RESTART_RETRY_S);
    return -1;
}

static int end_server(dlt_redis *r, int sig) {
    if (r == NULL) return -1;
    if (r->pid <= 0) return 0;
    pid_t pid = r->pid;
    if (kill(pid, sig) != 0 && errno != ESRCH) {
        fprintf(stderr, "dlt: kill %d: %s\n", (int)pid, strerror(errno));
        return -1;
    }
    int st = reap(pid, sig == SIGKILL ? -1 : DLT_STOP_TIMEOUT_MS);
    if (st == -2) {
        fprintf(stderr, "dlt: redis-server %d ignored SIGTERM for %d ms; SIGKILL\n", (int)pid,
                DLT_STOP_TIMEOUT_MS);
        kill(pid, SIGKILL);
        reap(pid, -1);
    }
    r->pid = 0;
    slot_set_pid(r, 0);
    return 0;
}

int dlt_redis_stop(dlt_redis *r) {
    return end_server(r, SIGTERM);
}

int dlt_redis_kill(dlt_redis *r) {
    return end_server(r, SIGKILL);
}

void dlt_redis_cleanup(dlt_redis *r) {
    if (r == NULL) return;
    dlt_redis_stop(r);
    if (r->dir[0]) rm_dir(r->dir);
    slot_unregister(r);
    r->dir[0] = '\0';
    r->url[0] = '\0';
    r->port = 0;
}

/* ========================================================================
 * A test PKI, and TLS connections to TLS-only servers
 * ====================================================================== */

static const char pki_openssl_cnf[] =
    "[req]\n"
    "distinguished_name = dn\n"
    "prompt = no\n"
    "[dn]\n"
    "CN = placeholder\n"
    "[v3_ca]\n"
    "basicConstraints = critical,CA:TRUE\n"
    "keyUsage = critical,keyCertSign,cRLSign\n"
    "subjectKeyIdentifier = hash\n"
    "[v3_server]\n"
    "basicConstraints = CA:FALSE\n"
    "keyUsage = critical,digitalSignature,keyEncipherment\n"
    "extendedKeyUsage = serverAuth\n"
    "subjectAltName = DNS:localhost,IP:127.0.0.1\n"
    "[v3_client]\n"
    "basicConstraints = CA:FALSE\n"
    "keyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = clientAuth\n";

/* P-256 keys: quick to make, even on a loaded machine. */
#define PKI_NEWKEY "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

/* Runs the shell command body in dir, its output appended to
 * dir/openssl.log.  0 if it exited 0. */
static int pki_sh(const char *dir, const char *body) {
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "cd '%s' && { %s ; } >>openssl.log 2>&1", dir, body);
    fflush(NULL);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "dlt_tls_certs: command failed (status %d): %s\n", st, body);
        return -1;
    }
    return 0;
}

static void pki_show_log(const char *dir) {
    char p[320], buf[4096];
    snprintf(p, sizeof p, "%s/openssl.log", dir);
    FILE *f = fopen(p, "r");
    if (f == NULL) return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "dlt_tls_certs: ---- %s ----\n%s\ndlt_tls_certs: ----\n", p, buf);
}

/* A self-signed CA. */
static int pki_ca(const char *dir, const char *name, const char *cn) {
    char body[1024];
    snprintf(body, sizeof body,
             "openssl req -config openssl.cnf -x509 -new " PKI_NEWKEY " -keyout %s.key -out %s.crt "
             "-days 3 -subj '/CN=%s' -extensions v3_ca",
             name, name, cn);
    return pki_sh(dir, body);
}

/* A leaf signed by the CA ca, with the extensions of section ext. */
static int pki_leaf(const char *dir, const char *name, const char *cn, const char *ca, int serial,
                    const char *ext) {
    char body[1024];
    snprintf(body, sizeof body,
             "openssl req -config openssl.cnf -new " PKI_NEWKEY " -keyout %s.key -out %s.csr "
             "-subj '/CN=%s' && openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key "
             "-set_serial %d -days 3 -out %s.crt -extfile openssl.cnf -extensions %s",
             name, name, cn, name, ca, ca, serial, name, ext);
    return pki_sh(dir, body);
}

int dlt_tls_certs(const char *dir) {
    char p[320];
    if (dir == NULL || dir[0] != '/' || strlen(dir) > 250 ||
        strspn(dir, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-") != strlen(dir)) {
        fprintf(stderr, "dlt_tls_certs: want an absolute path of plain characters: %s\n",
                dir ? dir : "(null)");
        return -1;
    }
    snprintf(p, sizeof p, "%s/openssl.cnf", dir);
    FILE *f = fopen(p, "w");
    if (f == NULL || fputs(pki_openssl_cnf, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "dlt_tls_certs: cannot write %s\n", p);
        return -1;
    }
    if (pki_sh(dir, "command -v openssl") != 0) {
        fprintf(stderr, "dlt_tls_certs: no openssl command in PATH (scripts/deps installs it)\n");
        return -1;
    }
    if (pki_ca(dir, "ca", "dlock test CA") != 0 ||
        pki_leaf(dir, "server", "localhost", "ca", 2, "v3_server") != 0 ||
        pki_leaf(dir, "client", "dlock test client", "ca", 3, "v3_client") != 0 ||
        pki_ca(dir, "ca2", "an unrelated CA") != 0 ||
        pki_leaf(dir, "client2", "client of the unrelated CA", "ca2", 4, "v3_client") != 0) {
        pki_show_log(dir);
        return -1;
    }
    return 0;
}

static pthread_mutex_t tls_dir_lock = PTHREAD_MUTEX_INITIALIZER;
static dlt_redis tls_dir_holder; /* only its dir: the slot table removes it at exit */
static int tls_dir_state;        /* 0 not made yet, 1 made, -1 failed */

const char *dlt_tls_dir(void) {
    pthread_mutex_lock(&tls_dir_lock);
    if (tls_dir_state == 0) {
        tls_dir_state = -1;
        pthread_once(&hooks_once, install_hooks);
        pthread_once(&sweep_once, sweep_tmpdir);
        dlt_redis *h = &tls_dir_holder;
        memset(h, 0, sizeof *h);
        int lockfd = make_dir(h->dir, sizeof h->dir, "tls-", 1, "dlt_tls_dir");
        if (lockfd >= 0 && slot_register(h, lockfd) != 0) {
            close(lockfd);
            rm_dir(h->dir);
            lockfd = -1;
        }
        if (lockfd >= 0) {
            if (dlt_tls_certs(h->dir) == 0) {
                tls_dir_state = 1;
            } else {
                rm_dir(h->dir);
                slot_unregister(h);
            }
        }
    }
    const char *dir = tls_dir_state > 0 ? tls_dir_holder.dir : NULL;
    pthread_mutex_unlock(&tls_dir_lock);
    return dir;
}

/* SIGPIPE blocked in this thread around a TLS exchange (OpenSSL writes to
 * the socket with write(), and a server that died would kill the test),
 * and one that it raised discarded. */
static int sigpipe_hold(sigset_t *old) {
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, old);
    return was_pending;
}

static void sigpipe_release(const sigset_t *old, int was_pending) {
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    if (!was_pending && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = { 0, 0 };
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

static void tls_close(struct dlt_tls_link *t) {
    if (t->ssl != NULL) SSL_free(t->ssl);
    if (t->ctx != NULL) SSL_CTX_free(t->ctx);
    if (t->reader != NULL) redisReaderFree(t->reader);
    if (t->fd >= 0) close(t->fd);
    t->ssl = NULL;
    t->ctx = NULL;
    t->reader = NULL;
    t->fd = -1;
    /* Nothing of ours left in this thread's OpenSSL error queue, where the
     * library looks for its own reasons. */
    ERR_clear_error();
}

/* A TLS connection to 127.0.0.1:port, the server's certificate verified
 * with cert_dir/ca.crt for IP 127.0.0.1, cert_dir/client.crt presented;
 * every read and write bounded by timeout_ms.  0, or -1 (t closed). */
static int tls_open(struct dlt_tls_link *t, int port, const char *cert_dir, int timeout_ms) {
    char ca[300], crt[300], key[300];
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    struct sockaddr_in sa;
    sigset_t old;
    int rc = -1;

    memset(t, 0, sizeof *t);
    t->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (t->fd < 0) return -1;
    /* SO_SNDTIMEO bounds a blocking connect() too. */
    setsockopt(t->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(t->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(t->fd, (struct sockaddr *)&sa, sizeof sa) != 0) goto out;

    snprintf(ca, sizeof ca, "%s/ca.crt", cert_dir);
    snprintf(crt, sizeof crt, "%s/client.crt", cert_dir);
    snprintf(key, sizeof key, "%s/client.key", cert_dir);
    if ((t->ctx = SSL_CTX_new(TLS_client_method())) == NULL) goto out;
    if (SSL_CTX_load_verify_locations(t->ctx, ca, NULL) != 1) {
        fprintf(stderr, "dlt: TLS: cannot load %s\n", ca);
        goto out;
    }
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_use_certificate_chain_file(t->ctx, crt) != 1 ||
        SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
        fprintf(stderr, "dlt: TLS: cannot load %s / %s\n", crt, key);
        goto out;
    }
    if ((t->ssl = SSL_new(t->ctx)) == NULL || SSL_set_fd(t->ssl, t->fd) != 1 ||
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), "127.0.0.1") != 1)
        goto out;
    int was_pending = sigpipe_hold(&old);
    int ok = SSL_connect(t->ssl) == 1;
    sigpipe_release(&old, was_pending);
    if (!ok) goto out;
    if ((t->reader = redisReaderCreate()) == NULL) goto out;
    rc = 0;
out:
    if (rc != 0) tls_close(t);
    ERR_clear_error();
    return rc;
}

/* One command on t: the reply (maybe an error reply), or NULL if the
 * connection failed or timed out. */
static redisReply *tls_vcmd(struct dlt_tls_link *t, const char *fmt, va_list ap) {
    char *cmd = NULL, buf[16384];
    void *reply = NULL;
    sigset_t old;
    if (t->ssl == NULL) return NULL;
    int len = redisvFormatCommand(&cmd, fmt, ap);
    if (len < 0) return NULL;
    int was_pending = sigpipe_hold(&old);
    int ok = 1;
    for (int off = 0; ok && off < len;) {
        int n = SSL_write(t->ssl, cmd + off, len - off);
        if (n > 0) off += n;
        else ok = 0;
    }
    while (ok) {
        if (redisReaderGetReply(t->reader, &reply) != REDIS_OK) {
            reply = NULL;
            ok = 0;
        } else if (reply != NULL) {
            break;
        } else {
            int n = SSL_read(t->ssl, buf, (int)sizeof buf);
            if (n <= 0 || redisReaderFeed(t->reader, buf, (size_t)n) != REDIS_OK) ok = 0;
        }
    }
    sigpipe_release(&old, was_pending);
    redisFreeCommand(cmd);
    ERR_clear_error();
    if (!ok) {
        if (reply != NULL) freeReplyObject(reply);
        SSL_free(t->ssl); /* no more commands on a broken stream */
        t->ssl = NULL;
        return NULL;
    }
    return reply;
}

static redisReply *tls_cmd(struct dlt_tls_link *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = tls_vcmd(t, fmt, ap);
    va_end(ap);
    return rep;
}

/* ========================================================================
 * Commands and statistics
 * ====================================================================== */

static redisReply *vcmd(dlt_redis *r, const char *fmt, va_list ap) {
    if (r == NULL || r->port <= 0) return NULL;
    if (r->tls_dir[0]) {
        struct dlt_tls_link t;
        if (tls_open(&t, r->port, r->tls_dir, DLT_CMD_TIMEOUT_MS) != 0) return NULL;
        redisReply *rep = auth_if_needed(r, NULL, &t) == 0 ? tls_vcmd(&t, fmt, ap) : NULL;
        tls_close(&t);
        return rep;
    }
    redisContext *c = connect_port(r->port, DLT_CMD_TIMEOUT_MS);
    if (c == NULL) return NULL;
    redisReply *rep = auth_if_needed(r, c, NULL) == 0 ? redisvCommand(c, fmt, ap) : NULL;
    redisFree(c);
    return rep;
}

redisReply *dlt_redis_cmd(dlt_redis *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcmd(r, fmt, ap);
    va_end(ap);
    return rep;
}

static redisReply *info_commandstats(dlt_redis *r) {
    redisReply *rep = dlt_redis_cmd(r, "INFO commandstats");
    if (rep != NULL && rep->type != REDIS_REPLY_STRING) {
        freeReplyObject(rep);
        rep = NULL;
    }
    return rep;
}

static long long cmdstat(dlt_redis *r, const char *cmd, int ok_only) {
    char key[160];
    size_t n = strlen("cmdstat_");
    if (cmd == NULL || strlen(cmd) > sizeof key - n - 16) return -1;
    memcpy(key, "cmdstat_", n);
    for (const char *p = cmd; *p; p++) key[n++] = (char)tolower((unsigned char)*p);
    memcpy(key + n, ":calls=", sizeof ":calls=");
    size_t klen = strlen(key);

    redisReply *rep = info_commandstats(r);
    if (rep == NULL) return -1;
    long long calls = 0;
    for (const char *line = rep->str; line != NULL && *line;) {
        if (strncmp(line, key, klen) == 0) {
            const char *f = strstr(line, "failed_calls="), *eol = strchr(line, '\n');
            calls = strtoll(line + klen, NULL, 10);
            if (ok_only && f != NULL && (eol == NULL || f < eol)) calls -= strtoll(f + 13, NULL, 10);
            break;
        }
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    freeReplyObject(rep);
    return calls;
}

long long dlt_redis_keys_count(dlt_redis *r, const char *pattern) {
    redisReply *rep = dlt_redis_cmd(r, "KEYS %s", pattern);
    long long n = rep != NULL && rep->type == REDIS_REPLY_ARRAY ? (long long)rep->elements : -1;
    if (rep != NULL) freeReplyObject(rep);
    return n;
}

long long dlt_redis_cmdstat(dlt_redis *r, const char *cmd) {
    return cmdstat(r, cmd, 0);
}

long long dlt_redis_cmdstat_ok(dlt_redis *r, const char *cmd) {
    return cmdstat(r, cmd, 1);
}

long long dlt_redis_total_calls(dlt_redis *r) {
    redisReply *rep = info_commandstats(r);
    if (rep == NULL) return -1;
    long long total = 0;
    for (const char *line = rep->str; line != NULL && *line;) {
        if (strncmp(line, "cmdstat_", 8) == 0) {
            const char *eol = strchr(line, '\n');
            const char *c = strstr(line, ":calls=");
            if (c != NULL && (eol == NULL || c < eol)) total += strtoll(c + 7, NULL, 10);
        }
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    freeReplyObject(rep);
    return total;
}

long long dlt_redis_errors(dlt_redis *r) {
    redisReply *rep = dlt_redis_cmd(r, "INFO stats");
    const char *v;
    long long n = -1;
    if (rep == NULL) return -1;
    if (rep->type == REDIS_REPLY_STRING && (v = strstr(rep->str, "total_error_replies:")) != NULL)
        n = strtoll(v + 20, NULL, 10);
    freeReplyObject(rep);
    return n;
}

int dlt_redis_reset_stats(dlt_redis *r) {
    redisReply *rep = dlt_redis_cmd(r, "CONFIG RESETSTAT");
    int ok = rep != NULL && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "OK") == 0;
    if (rep != NULL) freeReplyObject(rep);
    return ok ? 0 : -1;
}

/* ========================================================================
 * Locks on the suite's server, and dlock objects
 * ====================================================================== */

size_t dlt_lock_key(const char *name, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "dlock:{%s}", name);
    return n < 0 ? 0 : (size_t)n;
}

int dlt_key_exists(const char *name) {
    char key[600];
    dlt_lock_key(name, key, sizeof key);
    redisReply *r = dlt_redis_cmd(&dlt_server, "EXISTS %s", key);
    int v = (r != NULL && r->type == REDIS_REPLY_INTEGER) ? (int)r->integer : -1;
    if (r != NULL) freeReplyObject(r);
    return v;
}

long long dlt_key_pttl(const char *name) {
    char key[600];
    dlt_lock_key(name, key, sizeof key);
    redisReply *r = dlt_redis_cmd(&dlt_server, "PTTL %s", key);
    long long v = (r != NULL && r->type == REDIS_REPLY_INTEGER) ? r->integer : -3;
    if (r != NULL) freeReplyObject(r);
    return v;
}

int dlt_key_who(const char *name, char *host, size_t cap, long long *pid, long long *tid) {
    char key[600];
    dlt_lock_key(name, key, sizeof key);
    return dlt_redis_who(&dlt_server, key, host, cap, pid, tid);
}

int dlt_redis_who(dlt_redis *srv, const char *key, char *host, size_t cap, long long *pid, long long *tid) {
    char *c2, *c1;
    int ok = 0;
    redisReply *r = dlt_redis_cmd(srv, "EVAL_RO %s 1 %s who", DLT_LOCK_FIELD_LUA, key);
    if (r != NULL && r->type == REDIS_REPLY_STRING && (c2 = strrchr(r->str, ':')) != NULL) {
        *c2 = '\0';
        if ((c1 = strrchr(r->str, ':')) != NULL) {
            *c1 = '\0';
            if (host != NULL) snprintf(host, cap, "%s", r->str);
            if (pid != NULL) *pid = atoll(c1 + 1);
            if (tid != NULL) *tid = atoll(c2 + 1);
            ok = 1;
        }
    }
    if (r != NULL) freeReplyObject(r);
    return ok;
}

long long dlt_key_field(const char *name, const char *field) {
    char key[600];
    if (strcmp(field, "pid") == 0 || strcmp(field, "tid") == 0) { /* parts of "who" */
        long long pid, tid;
        if (!dlt_key_who(name, NULL, 0, &pid, &tid)) return -1;
        return field[0] == 'p' ? pid : tid;
    }
    dlt_lock_key(name, key, sizeof key);
    redisReply *r = dlt_redis_cmd(&dlt_server, "EVAL_RO %s 1 %s %s", DLT_LOCK_FIELD_LUA, key, field);
    long long v = (r != NULL && r->type == REDIS_REPLY_STRING) ? atoll(r->str) : -1;
    if (r != NULL) freeReplyObject(r);
    return v;
}

long long dlt_numsub(const char *channel) {
    redisReply *r = dlt_redis_cmd(&dlt_server, "PUBSUB NUMSUB %s", channel);
    long long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        v = r->element[1]->integer;
    if (r != NULL) freeReplyObject(r);
    return v;
}

int dlt_run_capture(char *const argv[], char *out, char *err, size_t n, int timeout_ms) {
    char fo[] = "/tmp/dlt-run-outXXXXXX", fe[] = "/tmp/dlt-run-errXXXXXX";
    int fdo = mkstemp(fo), fde = mkstemp(fe), code, k;
    pid_t pid;
    out[0] = err[0] = '\0';
    if (fdo < 0 || fde < 0) {
        if (fdo >= 0) {
            close(fdo);
            unlink(fo);
        }
        if (fde >= 0) {
            close(fde);
            unlink(fe);
        }
        return -1;
    }
    fflush(NULL);
    if ((pid = fork()) == 0) {
        int null = open("/dev/null", O_RDONLY);
        dup2(null, 0);
        dup2(fdo, 1);
        dup2(fde, 2);
        execv(argv[0], argv);
        _exit(120);
    }
    code = pid < 0 ? -1 : dlt_wait(pid, timeout_ms);
    for (k = 0; k < 2; k++) { /* the files, read back from their start */
        int fd = k ? fde : fdo;
        char *buf = k ? err : out;
        ssize_t r = pread(fd, buf, n - 1, 0);
        buf[r > 0 ? r : 0] = '\0';
        close(fd);
        unlink(k ? fe : fo);
    }
    return code;
}

int dlt_pclose_read(FILE *p, char *out, size_t cap) {
    char sink[512];
    size_t n = 0, k;
    int st;
    if (out != NULL && cap > 0) {
        while (n + 1 < cap && (k = fread(out + n, 1, cap - 1 - n, p)) > 0) n += k;
        out[n] = '\0';
    }
    while (fread(sink, 1, sizeof sink, p) > 0)
        ;
    st = pclose(p);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int dlt_sh_scenario(const char *dir, const char *prelude, const char *script, char *out, size_t cap) {
    char path[1024], *cmd;
    FILE *f, *p;
    snprintf(path, sizeof path, "%s/scenario.sh", dir);
    if ((f = fopen(path, "w")) == NULL) return -1;
    fprintf(f, "%s%s\n", prelude, script);
    fclose(f);
    if (asprintf(&cmd, "sh '%s' 2>&1", path) < 0) return -1;
    p = popen(cmd, "r");
    free(cmd);
    if (p == NULL) return -1;
    return dlt_pclose_read(p, out, cap);
}

int dlt_out_count(const char *out, const char *what) {
    int n = 0;
    const char *p = out;
    while ((p = strstr(p, what)) != NULL) {
        n++;
        p += strlen(what);
    }
    return n;
}

long long dlt_out_num(const char *out, const char *key) {
    char pat[128];
    const char *p;
    snprintf(pat, sizeof pat, "\n%s ", key);
    if (strncmp(out, pat + 1, strlen(pat + 1)) == 0) p = out - 1;
    else if ((p = strstr(out, pat)) == NULL) return -1;
    return strtoll(p + strlen(pat), NULL, 10);
}

void dlt_out_show(const char *out) {
    fprintf(stderr, "---- output ----\n%s----\n", out);
}

int dlt_netns_ok(const char *test, const char *needs) {
    char cmd[512];
    if (geteuid() != 0) {
        fprintf(stderr, "  %s needs root: it makes two network namespaces joined by a veth pair\n", test);
        CU_FAIL("needs root: it makes two network namespaces joined by a veth pair");
        return 0;
    }
    snprintf(cmd, sizeof cmd, "command -v ip %s >/dev/null 2>&1", needs != NULL ? needs : "");
    if (system(cmd) != 0) {
        fprintf(stderr, "  %s needs ip(8) and %s: apt-get install iproute2 util-linux\n", test, needs ? needs : "");
        CU_FAIL("needs ip(8) and the commands it names: apt-get install iproute2 util-linux");
        return 0;
    }
    return 1;
}

int dlt_netns_setup(char *buf, size_t cap, const char *prefix, int net, int port, const char *redis_dir) {
    long pid = (long)getpid();
    int x = (int)(pid % 250) + 1;
    int n = snprintf(buf, cap,
                     "ns=%s%ld; NA=${ns}a; NB=${ns}b; X=%d; PORT=%d; SRV=10.%d.%d.1\n"
                     "RP=\n"
                     "cleanup() { trap - EXIT INT TERM; [ -n \"$RP\" ] && kill $RP 2>/dev/null;"
                     " ip netns del $NA 2>/dev/null; ip netns del $NB 2>/dev/null; }\n"
                     "trap cleanup EXIT INT TERM\n"
                     /* namespaces left by an earlier run that was killed */
                     "for n in $(ip netns list | awk '{print $1}' | grep -E '^%s[0-9]+[ab]$'); do"
                     " p=${n#%s}; p=${p%%?}; kill -0 $p 2>/dev/null || ip netns del $n; done\n"
                     "set -e\n"
                     "ip netns add $NA; ip netns add $NB\n"
                     "ip link add ${ns}va type veth peer name ${ns}vb\n"
                     "ip link set ${ns}va netns $NA; ip link set ${ns}vb netns $NB\n"
                     "ip -n $NA addr add 10.%d.$X.1/30 dev ${ns}va; ip -n $NB addr add 10.%d.$X.2/30 dev ${ns}vb\n"
                     "ip -n $NA link set lo up; ip -n $NB link set lo up\n"
                     "ip -n $NA link set ${ns}va up; ip -n $NB link set ${ns}vb up\n"
                     "set +e\n"
                     "mkdir -p %s\n"
                     "ip netns exec $NA redis-server --port $PORT --bind $SRV --save '' --appendonly no"
                     " --protected-mode no --dir %s --daemonize no >%s/redis.log 2>&1 & RP=$!\n"
                     "i=0; until ip netns exec $NB redis-cli -h $SRV -p $PORT ping 2>/dev/null | grep -q PONG;"
                     " do i=$((i+1)); [ $i -gt 100 ] && { echo redis_down; exit 3; }; sleep 0.05; done\n",
                     prefix, pid, x, port, net, x, prefix, prefix, net, net, redis_dir, redis_dir, redis_dir);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int dlt_sem_wait_waiters(const char *name, unsigned want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (dlt_now() < end) {
        dlock_sem_info_t i;
        if (dlock_sem_info(NULL, name, &i) == 0 && i.waiters == want) return 1;
        dlt_sleep_ms(10);
    }
    return 0;
}

int dlt_mutex_make(dlock_mutex_t *m, const char *name, unsigned lease_ms, dlock_client_t *client) {
    dlock_mutexattr_t a;
    int rc;
    if ((rc = dlock_mutexattr_init(&a)) != 0) return rc;
    if (lease_ms != 0 && (rc = dlock_mutexattr_setlease(&a, lease_ms)) != 0) return rc;
    if (client != NULL && (rc = dlock_mutexattr_setclient(&a, client)) != 0) return rc;
    rc = dlock_mutex_init(m, name, &a);
    dlock_mutexattr_destroy(&a);
    return rc;
}

int dlt_client_make(dlock_client_t **out, const char *url, unsigned unreachable_ms) {
    dlock_config_t cfg;
    dlock_config_init(&cfg);
    cfg.url = url;
    cfg.unreachable_ms = unreachable_ms;
    return dlock_client_create(out, &cfg);
}

/* ========================================================================
 * Workers: tasks, shared memory, flags, checks
 * ====================================================================== */

void *dlt_task_thread(void *p) {
    dlt_task *t = p;
    t->rc = t->fn(t->arg);
    return NULL;
}

int dlt_task_start(dlt_task *t, int as_process, int (*fn)(void *), void *arg) {
    memset(t, 0, sizeof *t);
    t->proc = as_process;
    t->fn = fn;
    t->arg = arg;
    if (as_process) {
        t->pid = dlt_spawn(fn, arg);
        t->running = t->pid > 0;
    } else {
        t->running = pthread_create(&t->th, NULL, dlt_task_thread, t) == 0;
    }
    CU_ASSERT_TRUE(t->running);
    return t->running ? 0 : -1;
}

int dlt_task_join(dlt_task *t, int timeout_ms) {
    if (!t->running) return -1;
    t->running = 0;
    if (t->proc) return dlt_wait(t->pid, timeout_ms);
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, timeout_ms);
    int e = pthread_timedjoin_np(t->th, NULL, &ts);
    if (e != 0) {
        fprintf(stderr, "%s: a worker thread did not finish within %d ms (%s); aborting\n",
                program_invocation_short_name, timeout_ms, strerror(e));
        abort();
    }
    return t->rc;
}

void dlt_task_signal(dlt_task *t, int sig) {
    if (!t->running) return;
    if (t->proc) kill(t->pid, sig);
    else pthread_kill(t->th, sig);
}

void dlt_run_all(int (*fn)(void *), void *args, size_t size, int nthr, int nproc) {
    dlt_task t[16];
    int n = nthr + nproc, i;
    CU_ASSERT_FATAL(n <= 16);
    for (i = n - 1; i >= 0; i--) dlt_task_start(&t[i], i >= nthr, fn, (char *)args + (size_t)i * size);
    for (i = 0; i < n; i++) {
        int rc = dlt_task_join(&t[i], DLT_JOIN_MS);
        if (rc != 0) fprintf(stderr, "  (worker %d, a %s, returned %d)\n", i, i >= nthr ? "process" : "thread", rc);
        DLT_ASSERT_INT_EQ(rc, 0);
    }
}

void *dlt_shm(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        abort();
    }
    return p; /* zero-filled */
}

void dlt_flag_set(int *p, int v) {
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

int dlt_flag_get(const int *p) {
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

int dlt_flag_add(int *p, int v) {
    return __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST);
}

void dlt_count_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)name;
    dlt_flag_add(arg, 1);
}

void dlt_flag_max(int *p, int v) {
    int cur = dlt_flag_get(p);
    while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
}

int dlt_flag_wait(const int *p, int want, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (dlt_flag_get(p) != want) {
        if (dlt_now() > end) return 0;
        usleep(500);
    }
    return 1;
}

int dlt_flag_wait_ge_every(const int *p, int want, int timeout_ms, unsigned poll_us) {
    double end = dlt_now() + timeout_ms / 1000.0;
    while (dlt_flag_get(p) < want) {
        if (dlt_now() > end) return 0;
        usleep(poll_us);
    }
    return 1;
}

int dlt_flag_wait_ge(const int *p, int want, int timeout_ms) {
    return dlt_flag_wait_ge_every(p, want, timeout_ms, 500);
}

const char *dlt_errno_label(long long e) {
    const char *n = (e >= INT_MIN && e <= INT_MAX) ? dlt_errno_name((int)e) : NULL;
    return n != NULL ? n : "?";
}

double dlt_thread_cpu_wait(void) {
    char buf[128];
    long long ran = 0, waited = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f == NULL) return 0;
    if (fgets(buf, sizeof buf, f) == NULL || sscanf(buf, "%lld %lld", &ran, &waited) != 2) waited = 0;
    fclose(f);
    return (double)waited / 1e9;
}

void dlt_timedlock_ends_at_deadline(dlock_mutex_t *m, const char *when) {
    double w0 = dlt_thread_cpu_wait(), el, waited;
    struct timespec ts = dlt_abs_in(CLOCK_REALTIME, 500);
    double t0 = dlt_now();
    int rc = dlock_mutex_timedlock(m, &ts);
    el = dlt_now() - t0;
    waited = dlt_thread_cpu_wait() - w0;
    printf("  timedlock(0.5 s) as %s: %s after %.3f s, %.3f s of it waiting for a CPU [%s]\n", when,
           dlt_errno_label(rc), el, waited, rc ? dlock_last_error() : "");
    DLT_ASSERT_ERR(rc, ETIMEDOUT);
    CU_ASSERT_TRUE(el >= 0.495 && el - waited <= 0.550);
    if (rc == 0) (void)dlock_mutex_unlock(m);
}

void *dlt_unlocker_run(void *arg) {
    dlt_unlocker *u = arg;
    u->lock_rc = dlock_mutex_lock(u->m);
    dlt_flag_set(&u->locked, 1);
    if (u->lock_rc != 0 || !dlt_flag_wait(&u->go, 1, 30000)) return NULL;
    u->rc = dlock_mutex_unlock(u->m);
    snprintf(u->err, sizeof u->err, "%s", u->rc ? dlock_last_error() : "");
    u->t_done = dlt_now();
    return NULL;
}

static const char *base_name(const char *file) {
    const char *slash = strrchr(file, '/');
    return slash != NULL ? slash + 1 : file;
}

int dlt_ck_fail(const char *file, int mod, const char *func, int line, const char *expr,
                long long got, long long want) {
    fprintf(stderr, "%s:%d: %s [pid %ld tid %ld]: %s = %lld (%s), want %lld (%s); last error: %s\n",
            base_name(file), line, func, (long)getpid(), (long)syscall(SYS_gettid), expr, got,
            dlt_errno_label(got), want, dlt_errno_label(want), dlock_last_error());
    return 1 + line % mod;
}

int dlt_ckt_fail(const char *file, int mod, const char *func, int line, const char *expr) {
    fprintf(stderr, "%s:%d: %s [pid %ld tid %ld]: %s is false\n", base_name(file), line, func,
            (long)getpid(), (long)syscall(SYS_gettid), expr);
    return 1 + line % mod;
}

long long dlt_reply_int(redisReply *r) {
    long long v = LLONG_MIN;
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) v = r->integer;
    if (r != NULL) freeReplyObject(r);
    return v;
}

long long dlt_evals(void) {
    long long a = dlt_redis_cmdstat(&dlt_server, "evalsha");
    long long b = dlt_redis_cmdstat(&dlt_server, "eval");
    return (a < 0 || b < 0) ? -1 : a + b;
}

long long dlt_evals_ok(void) {
    long long a = dlt_redis_cmdstat_ok(&dlt_server, "evalsha");
    long long b = dlt_redis_cmdstat_ok(&dlt_server, "eval");
    return (a < 0 || b < 0) ? -1 : a + b;
}

/* ========================================================================
 * Asserts
 * ====================================================================== */

#define DLT_ERRNO_NAMES(X)                                                                      \
    X(EINVAL) X(EBUSY) X(EDEADLK) X(EPERM) X(ETIMEDOUT) X(ENOLCK) X(EAGAIN) X(EOWNERDEAD)       \
    X(ENOTRECOVERABLE) X(ENOMEM) X(EINTR)

const char *dlt_errno_name(int err) {
    if (err == 0) return "0";
#define X(e) if (err == e) return #e;
    DLT_ERRNO_NAMES(X)
#undef X
    return NULL;
}

static void describe(char *buf, size_t len, long long v, int as_errno) {
    const char *name = as_errno && v >= INT_MIN && v <= INT_MAX ? dlt_errno_name((int)v) : NULL;
    if (name != NULL && v != 0)
        snprintf(buf, len, "%s (%lld)", name, v);
    else
        snprintf(buf, len, "%lld", v);
}

int dlt__assert_int(long long actual, long long expected, const char *actual_expr,
                    const char *expected_expr, int as_errno, const char *file, unsigned line,
                    const char *func) {
    if (actual == expected)
        return CU_assertImplementation(CU_TRUE, line, actual_expr, file, func, CU_FALSE);
    char a[64], e[64], msg[512];
    describe(a, sizeof a, actual, as_errno);
    describe(e, sizeof e, expected, as_errno);
    snprintf(msg, sizeof msg, "%s == %s (got %s, want %s)", actual_expr, expected_expr, a, e);
    return CU_assertImplementation(CU_FALSE, line, msg, file, func, CU_FALSE);
}

/* ========================================================================
 * CUnit glue
 * ====================================================================== */

dlt_redis dlt_server;

/* Before each test: the suite's server is up, empty, and its command
 * counts are zero -- whatever the previous test did to it. */
/* The suite's XDG_RUNTIME_DIR: the library's host-wide outage records
 * (net/hostrec.c) of the suite's servers live there, not in the user's;
 * each test starts without any. */
static char run_dir[300];

static void before_each_test(void) {
    char recs[320];
    if (run_dir[0] != '\0') {
        snprintf(recs, sizeof recs, "%s/dlock", run_dir);
        dlt_rm_tree(recs);
    }
    if (dlt_server.pid <= 0 && dlt_server.port > 0) {
        fprintf(stderr, "dlt: the previous test left the server down; restarting it\n");
        if (dlt_redis_restart(&dlt_server) != 0) return;
    }
    redisReply *rep = dlt_redis_cmd(&dlt_server, "FLUSHALL");
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "dlt: FLUSHALL failed: %s\n", rep ? rep->str : "no connection");
    if (rep != NULL) freeReplyObject(rep);
    if (dlt_redis_reset_stats(&dlt_server) != 0) fprintf(stderr, "dlt: CONFIG RESETSTAT failed\n");
}

static void list_tests(FILE *f, const struct dlt_test *tests) {
    for (const struct dlt_test *t = tests; t->name != NULL; t++) fprintf(f, "  %s\n", t->name);
}

/* The command line of a suite: -1 to run (*only: the one test named, or
 * NULL for all), or the exit code (--list, --help, a name no test has). */
static int suite_args(int argc, char **argv, const struct dlt_test *tests, const char **only) {
    *only = argc > 1 ? argv[1] : NULL;
    if (*only != NULL && (strcmp(*only, "--list") == 0 || strcmp(*only, "-l") == 0)) {
        list_tests(stdout, tests);
        return 0;
    }
    if (*only != NULL && (strcmp(*only, "--help") == 0 || strcmp(*only, "-h") == 0)) {
        printf("usage: %s [--list | TEST]\n", argv[0]);
        return 0;
    }
    if (*only != NULL) {
        const struct dlt_test *t = tests;
        while (t->name != NULL && strcmp(t->name, *only) != 0) t++;
        if (t->name == NULL) {
            fprintf(stderr, "%s: no test named %s; the tests are:\n", argv[0], *only);
            list_tests(stderr, tests);
            return 2;
        }
    }
    /* Line-buffered, so that CUnit's lines and our stderr interleave in
     * the order they happened when ctest captures both. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    return -1;
}

/* Runs the suite's tests (only: that one) with CUnit, `before` ahead of
 * each: 0 when every one passed, else 1. */
static int suite_run(const char *suite_name, const struct dlt_test *tests, const char *only, CU_SetUpFunc before) {
    int rc = 1;
    CU_pSuite suite;
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "dlt: CUnit: %s\n", CU_get_error_msg());
        return 1;
    }
    suite = CU_add_suite_with_setup_and_teardown(suite_name, NULL, NULL, before, NULL);
    if (suite == NULL) goto cunit_error;
    for (const struct dlt_test *t = tests; t->name != NULL; t++) {
        if (only != NULL && strcmp(t->name, only) != 0) continue;
        if (CU_add_test(suite, t->name, t->fn) == NULL) goto cunit_error;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    if (CU_basic_run_tests() != CUE_SUCCESS) goto cunit_error;
    rc = CU_get_number_of_failures() != 0 || CU_get_number_of_tests_failed() != 0 ||
         CU_get_number_of_suites_failed() != 0;
    CU_cleanup_registry();
    return rc;

cunit_error:
    fprintf(stderr, "dlt: CUnit: %s\n", CU_get_error_msg());
    CU_cleanup_registry();
    return 1;
}

int dlt_main(int argc, char **argv, const char *suite_name, const struct dlt_test *tests) {
    const char *only;
    int rc = suite_args(argc, argv, tests, &only);
    if (rc >= 0) return rc;
    pthread_once(&hooks_once, install_hooks);
    alarm(DLT_HARD_LIMIT_S);

    if (dlt_redis_start(&dlt_server, NULL) != 0) return 1;
    setenv("DLOCK_URL", dlt_server.url, 1);
    snprintf(run_dir, sizeof run_dir, "%s/run", dlt_server.dir);
    if (mkdir(run_dir, 0700) == 0 || errno == EEXIST) setenv("XDG_RUNTIME_DIR", run_dir, 1);
    /* Live figures off (a flush a second would add to the requests that
     * tests count); test_top and test_cli_top turn them on. */
    setenv("DLOCK_STATS", "0", 0);
    printf("dlt: redis-server %d at %s, folder %s\n", (int)dlt_server.pid, dlt_server.url,
           dlt_server.dir);
    rc = suite_run(suite_name, tests, only, before_each_test);
    dlt_redis_cleanup(&dlt_server);
    alarm(0);
    return rc;
}

/* A unit suite's XDG_RUNTIME_DIR is a folder of its own, as a server
 * suite's is: the host-wide outage records its clients write (a fake
 * backend's unanswered URL among them) are not found by the next run,
 * nor by another tree's run on the same host. */
int dlt_main_unit(int argc, char **argv, const char *suite_name, const struct dlt_test *tests, unsigned limit_s) {
    static char unit_dir[256];
    const char *only;
    int rc = suite_args(argc, argv, tests, &only), fd;
    if (rc >= 0) return rc;
    if ((fd = make_dir(unit_dir, sizeof unit_dir, "unit-", 0, suite_name)) >= 0) setenv("XDG_RUNTIME_DIR", unit_dir, 1);
    alarm(limit_s);
    rc = suite_run(suite_name, tests, only, NULL);
    alarm(0);
    if (fd >= 0) {
        rm_dir(unit_dir);
        close(fd);
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * Background processes of the current test.
 * ---------------------------------------------------------------------- */

static pid_t bg[32];
static size_t nbg;

void dlt_bg_add(pid_t p) {
    if (nbg < sizeof bg / sizeof bg[0]) bg[nbg++] = p;
}

void dlt_bg_forget(pid_t p) {
    size_t i;
    for (i = 0; i < nbg; i++)
        if (bg[i] == p) bg[i] = bg[--nbg];
}

void dlt_bg_kill_all(void) {
    while (nbg > 0) {
        pid_t p = bg[--nbg];
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
    }
}

int dlt_exit_code(int raw) {
    if (WIFEXITED(raw)) return WEXITSTATUS(raw);
    if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
    return -1;
}

int dlt_wait_raw(pid_t pid, int timeout_ms) {
    double end = dlt_now() + timeout_ms / 1000.0;
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            dlt_bg_forget(pid);
            return st;
        }
        if (w < 0 && errno != EINTR) return -1;
        if (dlt_now() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            dlt_bg_forget(pid);
            return -1;
        }
        dlt_sleep_ms(5);
    }
}

/* ------------------------------------------------------------------------
 * A test's own folder.
 * ---------------------------------------------------------------------- */

static char tdir[256];

void dlt_tdir_done(void) {
    DIR *d;
    struct dirent *e;
    char p[600];
    dlt_bg_kill_all();
    if (tdir[0] == '\0') return;
    if ((d = opendir(tdir)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", tdir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tdir);
    tdir[0] = '\0';
}

void dlt_tdir_make(const char *tag) {
    const char *t = getenv("TMPDIR");
    dlt_tdir_done();
    snprintf(tdir, sizeof tdir, "%s/%s-XXXXXX", t && *t ? t : "/tmp", tag);
    if (mkdtemp(tdir) == NULL) CU_FAIL_FATAL("mkdtemp");
}

const char *dlt_tdir(void) {
    return tdir;
}

char *dlt_tpath(const char *f) {
    static char buf[8][600];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 600, "%s/%s", tdir, f);
    return b;
}

int dlt_texists(const char *f) {
    return access(dlt_tpath(f), F_OK) == 0;
}

void dlt_ttouch(const char *f) {
    int fd = open(dlt_tpath(f), O_WRONLY | O_CREAT, 0600);
    if (fd >= 0) close(fd);
}

int dlt_twait_file(const char *f, int ms) {
    double end = dlt_now() + ms / 1000.0;
    while (!dlt_texists(f)) {
        if (dlt_now() > end) return 0;
        dlt_sleep_ms(10);
    }
    return 1;
}

int dlt_tlines(const char *f) {
    FILE *fp = fopen(dlt_tpath(f), "r");
    int n = 0, c;
    if (fp == NULL) return -1;
    while ((c = fgetc(fp)) != EOF)
        if (c == '\n') n++;
    fclose(fp);
    return n;
}
