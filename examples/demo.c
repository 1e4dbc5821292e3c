/* demo.c -- dlock-demo: several processes increment one counter under one
 * dlock mutex, and show that no increment is lost.
 *
 *     dlock-demo [-p PROCS] [-n ITERATIONS] [-N NAME] [-s USEC] [-l LEASE_MS] [-t SECONDS]
 *
 * The counter is a plain file in a temporary folder.  Each increment is a
 * deliberately non-atomic read-modify-write: read the number, sleep a
 * little (to widen the race window), write the number plus one.  Only the
 * lock keeps two processes from reading the same value.
 *
 * First the workload runs briefly WITHOUT the lock, to show the race is
 * real: updates get lost.  Then every worker process initialises its own
 * dlock_mutex_t with the same name -- as unrelated processes on different
 * hosts would -- and makes every increment while holding it.  Each worker
 * also checks the fencing token of every hold: it must be greater than the
 * worker's previous one and greater than the last one written next to the
 * counter (the store-side check docs/fencing.md describes).
 *
 * The server is $DLOCK_URL (default redis://127.0.0.1:6379); scripts/demo
 * starts a private redis-server and sets it.  Exit status: 0 when the
 * counter is exact and every check passed, 1 when not, 2 on bad usage or
 * a setup failure.
 */
#include <dlock.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 64
#define UNLOCKED_ITERATIONS 50 /* per process, in the run without the lock */
#define RECORD_LEN 42          /* "%020llu %020llu\n": counter, last fence */

/* What a worker reports to the parent, through a shared mapping. */
typedef struct result {
    pid_t pid;
    int finished;                 /* 1 when the worker ran to the end */
    unsigned long acquisitions;   /* successful lock or trylock calls */
    unsigned long waits;          /* trylock said EBUSY: held elsewhere, so we waited in lock */
    double wait_seconds;          /* time spent in those waits */
    uint64_t first_fence, last_fence;
    unsigned long fence_errors;   /* a fence not above the one before it */
    unsigned long hold_errors;    /* holds() false while we should hold it */
    volatile sig_atomic_t lost;   /* the lost-lock handler ran */
    char error[320];              /* the first failure, if any */
} result;

static struct {
    int procs;
    unsigned long iterations;
    const char *name;
    unsigned sleep_us;
    unsigned lease_ms;
    unsigned timeout_s;
    char path[PATH_MAX]; /* the counter file */
    char dir[PATH_MAX - 64]; /* its temporary folder */
    int fair;                /* -F: a fair (FIFO) mutex */
} opt = { 4, 250, "dlock-demo/counter", 500, DLOCK_LEASE_DEFAULT_MS, 120, "", "", 0 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_us(unsigned us) {
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Records the first failure of a worker. */
static void fail(result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(result *r, const char *fmt, ...) {
    va_list ap;
    if (r->error[0] != '\0') return;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
}

/* A dlock call failed: its code's message and the library's detail. */
static void fail_dlock(result *r, const char *call, int rc) {
    fail(r, "%s: %s (%s)", call, dlock_strerror(rc), dlock_last_error());
}

/* ------------------------------------------------------------------ the counter file */

static int counter_read(int fd, unsigned long long *value, unsigned long long *fence) {
    char buf[RECORD_LEN + 1];
    ssize_t n = pread(fd, buf, RECORD_LEN, 0);
    if (n != RECORD_LEN) return -1;
    buf[n] = '\0';
    return sscanf(buf, "%llu %llu", value, fence) == 2 ? 0 : -1;
}

static int counter_write(int fd, unsigned long long value, unsigned long long fence) {
    char buf[RECORD_LEN + 1];
    snprintf(buf, sizeof buf, "%020llu %020llu\n", value, fence);
    return pwrite(fd, buf, RECORD_LEN, 0) == RECORD_LEN ? 0 : -1;
}

static int counter_reset(void) {
    int fd = open(opt.path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc;
    if (fd < 0) return -1;
    rc = counter_write(fd, 0, 0);
    return close(fd) == 0 ? rc : -1;
}

/* ------------------------------------------------------------------ the workers */

/* Without the lock: the same read-modify-write, unprotected. */
static int worker_unlocked(unsigned long iterations, result *r) {
    unsigned seed = (unsigned)getpid();
    unsigned long i;
    int fd = open(opt.path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fail(r, "open %s: %s", opt.path, strerror(errno));
        return 1;
    }
    for (i = 0; i < iterations; i++) {
        unsigned long long v = 0, f = 0;
        /* A torn read is part of the race: it just counts as wrong. */
        (void)counter_read(fd, &v, &f);
        sleep_us(opt.sleep_us);
        if (counter_write(fd, v + 1, 0) != 0) {
            fail(r, "write %s: %s", opt.path, strerror(errno));
            return 1;
        }
        if (opt.sleep_us > 0) sleep_us((unsigned)rand_r(&seed) % opt.sleep_us);
    }
    close(fd);
    r->finished = 1;
    return 0;
}

/* Runs on dlock's renewal thread (or the thread that noticed) when a
 * hold's lease is lost: from then on the hold protects nothing. */
static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    static const char msg[] = "dlock-demo: a worker LOST its lock (lease not renewed in time)\n";
    result *r = arg;
    (void)m;
    (void)name;
    r->lost = 1;
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
}

/* With the lock: each worker makes its own mutex of the shared name. */
static int worker_locked(unsigned long iterations, result *r) {
    unsigned seed = (unsigned)getpid();
    dlock_mutexattr_t attr;
    dlock_mutex_t m;
    unsigned long i;
    uint64_t prev = 0;
    int rc, fd;

    if ((fd = open(opt.path, O_RDWR | O_CLOEXEC)) < 0) {
        fail(r, "open %s: %s", opt.path, strerror(errno));
        return 1;
    }
    if ((rc = dlock_mutexattr_init(&attr)) != 0 ||
        (rc = dlock_mutexattr_settype(&attr, DLOCK_MUTEX_ERRORCHECK)) != 0 ||
        (rc = dlock_mutexattr_setlease(&attr, opt.lease_ms)) != 0 ||
        (rc = dlock_mutexattr_setfair(&attr, opt.fair)) != 0 ||
        (rc = dlock_mutexattr_setlostcallback(&attr, on_lost, r)) != 0) {
        fail_dlock(r, "dlock_mutexattr_*", rc);
        return 1;
    }
    if ((rc = dlock_mutex_init(&m, opt.name, &attr)) != 0) {
        fail_dlock(r, "dlock_mutex_init", rc);
        return 1;
    }
    dlock_mutexattr_destroy(&attr);

    for (i = 0; i < iterations; i++) {
        unsigned long long v = 0, stored = 0;
        uint64_t fence;

        rc = dlock_mutex_trylock(&m);
        if (rc == EBUSY) {
            /* Held by another process: now wait for it, as most code
             * would with a plain lock call. */
            double t0 = now_s();
            r->waits++;
            rc = dlock_mutex_lock(&m);
            r->wait_seconds += now_s() - t0;
            if (rc != 0) {
                fail_dlock(r, "dlock_mutex_lock", rc);
                break;
            }
        } else if (rc != 0) {
            fail_dlock(r, "dlock_mutex_trylock", rc);
            break;
        }
        r->acquisitions++;

        /* The critical section. */
        if (!dlock_mutex_holds(&m)) r->hold_errors++;
        fence = dlock_mutex_fence(&m);
        if (r->first_fence == 0) r->first_fence = fence;
        if (fence <= prev) r->fence_errors++;
        prev = fence;
        r->last_fence = fence;
        if (counter_read(fd, &v, &stored) != 0) {
            fail(r, "read %s: malformed or short record", opt.path);
            dlock_mutex_unlock(&m);
            break;
        }
        if (fence <= stored) {
            /* The store-side fencing check: a write with a fence no
             * newer than the last one written is refused. */
            r->fence_errors++;
        } else {
            sleep_us(opt.sleep_us); /* the race window the lock closes */
            if (counter_write(fd, v + 1, fence) != 0) {
                fail(r, "write %s: %s", opt.path, strerror(errno));
                dlock_mutex_unlock(&m);
                break;
            }
        }

        if ((rc = dlock_mutex_unlock(&m)) != 0) {
            fail_dlock(r, "dlock_mutex_unlock", rc);
            break;
        }
        /* Some work outside the lock, so that the workers interleave. */
        if (opt.sleep_us > 0) sleep_us((unsigned)rand_r(&seed) % opt.sleep_us);
    }
    if ((rc = dlock_mutex_destroy(&m)) != 0 && r->error[0] == '\0') fail_dlock(r, "dlock_mutex_destroy", rc);
    close(fd);
    if (r->error[0] != '\0') return 1;
    r->finished = 1;
    return 0;
}

/* ------------------------------------------------------------------ the parent */

/* Runs `procs` workers and waits for them, at most opt.timeout_s seconds
 * in all; a worker still running then is killed (by its pid).  Returns
 * the number of workers that failed. */
static int run_workers(int procs, unsigned long iterations, int locked, result *res) {
    double deadline = now_s() + opt.timeout_s;
    int reaped[MAX_PROCS] = { 0 };
    int i, left = 0, failed = 0;

    memset(res, 0, sizeof *res * (size_t)procs);
    fflush(NULL); /* or each child would print our buffered output again */
    for (i = 0; i < procs; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "dlock-demo: fork: %s\n", strerror(errno));
            break;
        }
        if (pid == 0) {
            int rc;
            res[i].pid = getpid();
            rc = locked ? worker_locked(iterations, &res[i]) : worker_unlocked(iterations, &res[i]);
            fflush(NULL);
            exit(rc); /* exit, not _exit: dlock's exit handler runs */
        }
        res[i].pid = pid;
        left++;
    }
    failed = procs - left;
    while (left > 0) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            for (i = 0; i < procs; i++) {
                if (res[i].pid != w || reaped[i]) continue;
                reaped[i] = 1;
                left--;
                if (WIFSIGNALED(st)) fail(&res[i], "killed by signal %d", WTERMSIG(st));
                else if (WEXITSTATUS(st) != 0) fail(&res[i], "exited with status %d", WEXITSTATUS(st));
                if (res[i].error[0] != '\0' || !res[i].finished) failed++;
            }
            continue;
        }
        if (w < 0 && errno != EINTR) break;
        if (now_s() >= deadline) {
            fprintf(stderr, "dlock-demo: workers still running after %u s; stopping them\n", opt.timeout_s);
            for (i = 0; i < procs; i++) {
                if (res[i].pid <= 0 || reaped[i]) continue;
                /* Our own child, not yet reaped: its pid cannot have been reused. */
                fail(&res[i], "still running after %u s (killed)", opt.timeout_s);
                kill(res[i].pid, SIGKILL);
                waitpid(res[i].pid, NULL, 0);
                reaped[i] = 1;
                failed++;
            }
            break;
        }
        sleep_us(2000);
    }
    return failed;
}

static int counter_value(unsigned long long *v) {
    unsigned long long f;
    int fd = open(opt.path, O_RDONLY | O_CLOEXEC), rc;
    if (fd < 0) return -1;
    rc = counter_read(fd, v, &f);
    close(fd);
    return rc;
}

/* The URL as it may be shown: the password replaced by "***", as dlock's
 * own messages do (userinfo ends at the last '@' before the path). */
static void redact(const char *url, char *out, size_t outlen) {
    const char *p = strstr(url, "://"), *end, *at = NULL, *colon = NULL, *s;
    if (p == NULL) {
        snprintf(out, outlen, "%s", url);
        return;
    }
    p += 3;
    end = p + strcspn(p, "?/");
    for (s = p; s < end; s++)
        if (*s == '@') at = s;
    if (at != NULL) colon = memchr(p, ':', (size_t)(at - p));
    if (colon == NULL) {
        snprintf(out, outlen, "%s", url);
        return;
    }
    snprintf(out, outlen, "%.*s***%s", (int)(colon + 1 - url), url, at);
}

static pid_t parent_pid;

/* At exit, in the parent only: the workers inherit this handler. */
static void remove_tmp(void) {
    if (getpid() != parent_pid) return;
    if (opt.path[0]) unlink(opt.path);
    if (opt.dir[0]) rmdir(opt.dir);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: dlock-demo [-p PROCS] [-n ITERATIONS] [-N NAME] [-s USEC] [-l LEASE_MS] [-t SECONDS] [-F]\n"
            "  -p PROCS       worker processes (1..%d; default 4)\n"
            "  -n ITERATIONS  increments per process under the lock (default 250)\n"
            "  -N NAME        the lock's name (default dlock-demo/counter)\n"
            "  -s USEC        race window inside each increment, in microseconds (default 500)\n"
            "  -l LEASE_MS    the lock's lease (%u..%u; default %u); a hold longer than\n"
            "                 a third of it is renewed in the background\n"
            "  -t SECONDS     give up on workers after this long (default 120)\n"
            "  -F             a fair mutex: the workers take the lock in the order they\n"
            "                 asked for it (processes wait in that order anyway: a\n"
            "                 release hands the lock to the next in the server's queue)\n"
            "The server is $DLOCK_URL (default redis://127.0.0.1:6379).\n",
            MAX_PROCS, DLOCK_LEASE_MIN_MS, DLOCK_LEASE_MAX_MS, DLOCK_LEASE_DEFAULT_MS);
}

static int parse_ul(const char *s, unsigned long min, unsigned long max, unsigned long *out) {
    char *end;
    unsigned long v;
    errno = 0;
    if (s[0] < '0' || s[0] > '9') return -1;
    v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    static result res[MAX_PROCS];
    result *shared;
    dlock_client_t *client;
    const char *env_url = getenv("DLOCK_URL"), *tmp = getenv("TMPDIR");
    char shown[512];
    unsigned long v, unlocked_n, expected, total_acq = 0, total_waits = 0, fence_errors = 0, hold_errors = 0;
    unsigned long long counter = 0;
    int ch, rc, failed, lost = 0, i, ok;
    double t0, elapsed;

    while ((ch = getopt(argc, argv, "p:n:N:s:l:t:Fh")) != -1) {
        switch (ch) {
        case 'p':
            if (parse_ul(optarg, 1, MAX_PROCS, &v) != 0) goto bad;
            opt.procs = (int)v;
            break;
        case 'n':
            if (parse_ul(optarg, 1, 10000000, &v) != 0) goto bad;
            opt.iterations = v;
            break;
        case 'N':
            if (optarg[0] == '\0' || strlen(optarg) > DLOCK_NAME_MAX) goto bad;
            opt.name = optarg;
            break;
        case 's':
            if (parse_ul(optarg, 0, 1000000, &v) != 0) goto bad;
            opt.sleep_us = (unsigned)v;
            break;
        case 'l':
            if (parse_ul(optarg, DLOCK_LEASE_MIN_MS, DLOCK_LEASE_MAX_MS, &v) != 0) goto bad;
            opt.lease_ms = (unsigned)v;
            break;
        case 't':
            if (parse_ul(optarg, 1, 86400, &v) != 0) goto bad;
            opt.timeout_s = (unsigned)v;
            break;
        case 'F':
            opt.fair = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            goto bad;
        }
    }
    if (optind != argc) goto bad;

    /* A bad DLOCK_URL is found here, once, rather than in every worker.
     * Nothing connects yet. */
    if ((rc = dlock_client_create(&client, NULL)) != 0) {
        fprintf(stderr, "dlock-demo: DLOCK_URL: %s (%s)\n", dlock_strerror(rc), dlock_last_error());
        return 2;
    }
    dlock_client_destroy(client);

    if (tmp == NULL || tmp[0] != '/' || strlen(tmp) > sizeof opt.dir - 32) tmp = "/tmp";
    snprintf(opt.dir, sizeof opt.dir, "%s/dlock-demo-XXXXXX", tmp);
    if (mkdtemp(opt.dir) == NULL) {
        fprintf(stderr, "dlock-demo: mkdtemp %s: %s\n", opt.dir, strerror(errno));
        return 2;
    }
    snprintf(opt.path, sizeof opt.path, "%s/counter", opt.dir);
    parent_pid = getpid();
    atexit(remove_tmp);

    shared = mmap(NULL, sizeof res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        fprintf(stderr, "dlock-demo: mmap: %s\n", strerror(errno));
        return 2;
    }

    redact(env_url != NULL && env_url[0] ? env_url : "redis://127.0.0.1:6379", shown, sizeof shown);
    printf("dlock-demo: %d processes share one counter file, %s\n", opt.procs, opt.path);
    printf("  server: %s%s\n", shown, env_url != NULL && env_url[0] ? "" : " (the default; DLOCK_URL is unset)");
    printf("  lock:   \"%s\", lease %u ms\n", opt.name, opt.lease_ms);
    printf("  each increment reads the counter, sleeps %u us, writes it back plus one\n\n", opt.sleep_us);

    /* 1. Without the lock. */
    unlocked_n = opt.iterations < UNLOCKED_ITERATIONS ? opt.iterations : UNLOCKED_ITERATIONS;
    expected = (unsigned long)opt.procs * unlocked_n;
    if (counter_reset() != 0) {
        fprintf(stderr, "dlock-demo: %s: %s\n", opt.path, strerror(errno));
        return 2;
    }
    printf("1. WITHOUT the lock (%d x %lu increments):\n", opt.procs, unlocked_n);
    failed = run_workers(opt.procs, unlocked_n, 0, shared);
    if (failed > 0 || counter_value(&counter) != 0) {
        for (i = 0; i < opt.procs; i++)
            if (shared[i].error[0]) fprintf(stderr, "dlock-demo: worker %d: %s\n", i + 1, shared[i].error);
        fprintf(stderr, "dlock-demo: the run without the lock failed\n");
        return 2;
    }
    if (counter < expected)
        printf("   without the lock: counter = %llu, expected %lu -- %llu updates lost\n\n", counter, expected,
               expected - counter);
    else
        printf("   without the lock: counter = %llu, expected %lu -- no update lost this time (the race is "
               "still there; try a larger -s)\n\n",
               counter, expected);

    /* 2. With the lock. */
    expected = (unsigned long)opt.procs * opt.iterations;
    if (counter_reset() != 0) {
        fprintf(stderr, "dlock-demo: %s: %s\n", opt.path, strerror(errno));
        return 2;
    }
    printf("2. WITH the %sdlock mutex \"%s\" (%d x %lu increments):\n", opt.fair ? "fair " : "", opt.name, opt.procs, opt.iterations);
    t0 = now_s();
    failed = run_workers(opt.procs, opt.iterations, 1, shared);
    elapsed = now_s() - t0;
    for (i = 0; i < opt.procs; i++) {
        const result *r = &shared[i];
        printf("   worker %d (pid %d): %lu acquisitions, %lu waited (%.2f s), fences %" PRIu64 " .. %" PRIu64 "%s\n",
               i + 1, (int)r->pid, r->acquisitions, r->waits, r->wait_seconds, r->first_fence, r->last_fence,
               r->fence_errors == 0 && r->acquisitions > 0 ? ", increasing" : "");
        if (r->error[0]) printf("            FAILED: %s\n", r->error);
        if (r->fence_errors) printf("            %lu fences did NOT increase\n", r->fence_errors);
        if (r->hold_errors) printf("            %lu times holds() was false inside the lock\n", r->hold_errors);
        if (r->lost) printf("            its lock was LOST (lease not renewed in time)\n");
        total_acq += r->acquisitions;
        total_waits += r->waits;
        fence_errors += r->fence_errors;
        hold_errors += r->hold_errors;
        lost += r->lost != 0;
    }
    if (counter_value(&counter) != 0) {
        fprintf(stderr, "dlock-demo: cannot read %s\n", opt.path);
        return 1;
    }
    printf("   %lu acquisitions in %.2f s; %lu had to wait for another process\n", total_acq, elapsed,
           total_waits);
    if (fence_errors == 0 && total_acq > 0)
        printf("   every fence was greater than the one before it, in each worker and in the counter file\n");

    ok = failed == 0 && fence_errors == 0 && hold_errors == 0 && lost == 0 && counter == expected;
    if (counter == expected)
        printf("\ncounter = %llu, expected %lu: every increment was made under the lock\n", counter, expected);
    else
        printf("\ncounter = %llu, expected %lu: %lld increments missing\n", counter, expected,
               (long long)expected - (long long)counter);
    if (!ok) {
        printf("dlock-demo: FAILED (%d workers failed, %lu fence errors, %lu holds() errors, %d lost locks)\n",
               failed, fence_errors, hold_errors, lost);
        return 1;
    }
    return 0;

bad:
    usage(stderr);
    return 2;
}
