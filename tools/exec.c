/* exec.c -- `dlock exec`: run a command while holding a cluster-wide lock,
 * in the manner of flock(1).
 *
 * The lock is held by this process (its main thread is the owner the
 * server records), and the command runs as a child.  So the library's
 * renewal thread keeps the lease alive for as long as the command runs,
 * the lock is released when the command ends, and if dlock itself is
 * killed the renewals stop and the lock expires after its lease.
 *
 * Every lock is a dlock_rwlock_t: -s takes it shared, the default
 * exclusive, so shared and exclusive users of one name exclude each other
 * as flock's LOCK_SH and LOCK_EX do (and a dlock mutex of the same name
 * excludes both, as a writer).  Its kind is DLOCK_RWLOCK_PREFER_READER,
 * as Linux flock(2): a waiting exclusive request does not hold back a new
 * shared one.
 *
 * The phases:
 *
 *  1. One try (DLOCK_F_TRY, bounded by the -w deadline).  Busy with -n
 *     or -w 0: exit 1 (or -E CODE).  A try without -w makes one attempt:
 *     with -n a server that does not answer it gives 69 at once; without,
 *     the try is made again within the client's unreachable bound.
 *  2. Waiting: one blocking dlock_rwlock_xlock with DLOCK_F_INTR and the
 *     -w deadline on CLOCK_MONOTONIC -- the library's own waiting path, so
 *     the wait sleeps on release notifications and never polls for the
 *     lock.  Not on a terminal it is silent, as flock(1) is (with -v, one
 *     line says who holds the lock when the wait starts).  On a terminal a second thread (the watcher) reads
 *     dlock_lock_info about once a second and redraws one line, while the
 *     main thread waits in the library: the display never delays the wait,
 *     and the wait needs no timeouts of its own.  Readings are made on a
 *     client of their own with a short unreachable bound, so a dead server
 *     shows within about a second.
 *  3. Running: start CMD (as vfork does: the child shares dlock's memory
 *     until it execs), wait for it; signals sent to dlock are passed on
 *     to CMD; when CMD ends, unlock and exit with its status.
 *
 * Signals while waiting: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
 * SIGUSR2 end the wait, and dlock then dies of that signal (as flock(1),
 * which does not catch them, would).  The handler only records the signal;
 * the interruptible wait (DLOCK_F_INTR) returns EINTR when a handler runs,
 * also for a signal that came during one of its round trips (the library
 * keeps signals pending until it sleeps).  The watcher thread blocks every
 * signal, so they all reach the waiting thread.
 *
 * Signals while CMD runs: the same six are passed on to CMD -- except
 * those the kernel sent (si_code SI_KERNEL: Ctrl-C, Ctrl-\ and hangup from
 * the terminal), which went to the whole foreground process group and so
 * reached CMD already; passing them on would deliver them twice.
 *
 * A lost lock (renewal refused: broken, or the server unreachable for a
 * lease): by default CMD gets SIGTERM, as `consul lock` does, because
 * another host may now start the same job; --on-lost=warn only says so.
 * Either way dlock exits 75 (--lost-exit-code), not CMD's status, so that
 * the caller knows the job ran without the lock.
 * With the default, CMD also gets SIGTERM if dlock dies (PR_SET_PDEATHSIG),
 * since its lock then expires.
 *
 * File descriptors: CMD inherits those dlock was started with (a job may
 * rely on `3<file`), never the library's connections, which the child
 * closes before exec.
 *
 * --slots N: instead of the lock, one unit of the semaphore NAME
 * (dlock_sem_t, made with N units if it does not exist yet; an existing
 * one keeps its value), so at most N such commands run at once across
 * hosts.  The phases are the same: a trywait (EAGAIN reads as busy), then
 * the library's interruptible wait (dlock_sem_xwait with DLOCK_F_INTR and
 * the -w deadline), then CMD, then a post.  A signal of ours ends the
 * wait with EINTR: the wait takes back its place in the queue (a slot a
 * post handed it meanwhile is taken, and given back by exec_die), and
 * dlock dies of the signal, as after an interrupted lock wait.  Undo is
 * asked for (dlock_semattr_setundo), so that the slot of a dlock killed
 * with SIGKILL comes back when its lease runs out; a library without it
 * (ENOTSUP) gives POSIX units, which only the post at the end gives back.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define LEASE_DEFAULT_MS DLOCK_LEASE_DEFAULT_MS
#define VIEW_UNREACHABLE_MS 1000 /* the watcher's reads give up after this */
#define LOST_BYTE 0x7F /* on the self-pipe: the lock was lost */
#define RISK_BYTE 0x7E /* on the self-pipe: the lease is at risk (no signal has that number) */
#ifndef DLOCK_SEM_VALUE_MAX
#define DLOCK_SEM_VALUE_MAX 2147483647
#endif

/* The signals dlock catches: they end a wait, and are passed on to CMD. */
static const int relayed[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
#define NRELAYED (sizeof relayed / sizeof relayed[0])

/* ------------------------------------------------------------ options */

typedef struct exec_opts {
    const char *name;
    char **cmd;          /* NULL-terminated */
    char *shcmd[4];      /* for -c: sh -c STRING */
    int shared;
    int nonblock;
    int have_wait;
    int64_t wait_ms;
    int conflict_code;
    int lost_code;       /* the exit code when the lock was lost while CMD ran */
    unsigned lease_ms;
    int on_lost_term;
    int risk_sig;        /* --risk-signal SIG: sent to CMD when the lease is at risk; 0: none */
    long lock_delay;     /* --lock-delay MS; -1: as the URL says (lock_delay_ms) */
    int quiet;
    int verbose;
    unsigned slots;      /* --slots N: a slot of the semaphore NAME; 0: the lock */
    int pass_url;        /* --pass-url: CMD gets DLOCK_URL=url */
    const char *url;     /* the server's URL as given (--url, else $DLOCK_URL), NULL: the default */
} exec_opts;

static void exec_help(void) {
    printf("Usage: dlock exec [options] NAME [--] CMD [ARG...]\n"
           "       dlock exec [options] NAME -c 'SHELL COMMAND'\n"
           "Runs CMD while holding the cluster-wide lock NAME; the lock is released when\n"
           "CMD ends, and expires (after its lease) if dlock is killed.\n"
           "\n"
           "  -x, -e, --exclusive        an exclusive lock (the default)\n"
           "  -s, --shared               a shared lock: many shared holders, no exclusive one\n"
           "  -n, --nonblock, --nb       fail (exit 1) rather than wait if the lock is held\n"
           "  -w, --wait, --timeout SECONDS\n"
           "                             fail (exit 1) if not acquired within SECONDS;\n"
           "                             fractions allowed; -w 0 is -n\n"
           "  -E, --conflict-exit-code CODE\n"
           "                             the exit code for -n and -w failures (default 1)\n"
           "  -c, --command STRING       run STRING with sh -c\n"
           "  -l, --lease DURATION       the lease, renewed while CMD runs (default 10s;\n"
           "                             e.g. 30, 2.5s, 500ms, 1m)\n"
           "  -o, --close                accepted for flock(1); CMD never holds the lock\n"
           "      --on-lost=term|warn    if the lock is lost while CMD runs: SIGTERM to CMD\n"
           "                             (default), or only a message\n"
           "      --lost-exit-code CODE  the exit code when the lock was lost while CMD ran\n"
           "                             (default 75), whatever CMD's own status\n"
           "      --risk-signal SIG      send SIG (e.g. USR1, TERM, 10) to CMD when renewals\n"
           "                             have failed and a third of the lease is left\n"
           "      --lock-delay MS        if this hold ends without a release (dlock killed,\n"
           "                             stopped or cut off past its lease), nobody gets the\n"
           "                             lock for MS ms after that (0 to 60000)\n"
           "      --pass-url             give CMD the server's URL, password and all, as\n"
           "                             DLOCK_URL (without it, CMD gets no DLOCK_URL)\n"
           "      --slots N              run while holding one of N slots of the semaphore\n"
           "                             NAME (at most N such commands at once); made with N\n"
           "                             slots if it does not exist, else its count is kept\n"
           "  -q, --quiet                no waiting line on a terminal\n"
           "  -v, --verbose              off a terminal, one line when waiting starts; say how\n"
           "                             long getting the lock took, or why it failed\n"
           "      --url URL, --prefix P  the server and key prefix\n"
           "\n"
           "Exit: CMD's status (128+N if signal N killed it); 1 or CODE: busy or timed out;\n"
           "75 (or --lost-exit-code): the lock (or slot) was lost while CMD ran;\n"
           "64 bad arguments; 69 server unreachable; 70 unexpected error; 71 system error;\n"
           "126 CMD cannot be run; 127 CMD not found.\n");
}

/* The long options; "+" in the short ones: options end at NAME, so CMD's
 * own options are left alone. */
enum { OPT_ON_LOST = 0x2001, OPT_LOST_CODE, OPT_SLOTS, OPT_PASS_URL, OPT_RISK_SIGNAL, OPT_LOCK_DELAY };
static const char exec_shortopts[] = "+sxenw:E:c:l:oqvhV";
static const struct option exec_longopts[] = {
    CLI_CONN_LONGOPTS,
    { "shared", 0, NULL, 's' },
    { "exclusive", 0, NULL, 'x' },
    { "nonblock", 0, NULL, 'n' },
    { "nb", 0, NULL, 'n' },
    { "wait", 1, NULL, 'w' },
    { "timeout", 1, NULL, 'w' },
    { "conflict-exit-code", 1, NULL, 'E' },
    { "command", 1, NULL, 'c' },
    { "lease", 1, NULL, 'l' },
    { "on-lost", 1, NULL, OPT_ON_LOST },
    { "lost-exit-code", 1, NULL, OPT_LOST_CODE },
    { "slots", 1, NULL, OPT_SLOTS },
    { "pass-url", 0, NULL, OPT_PASS_URL },
    { "risk-signal", 1, NULL, OPT_RISK_SIGNAL },
    { "lock-delay", 1, NULL, OPT_LOCK_DELAY },
    { "close", 0, NULL, 'o' },
    { "quiet", 0, NULL, 'q' },
    { "verbose", 0, NULL, 'v' },
    { "help", 0, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

/* The per-option parsers below return 0, or the usage error's exit code. */

/* -w SECONDS: the deadline for the whole wait. */
static int opt_wait(const char *arg, exec_opts *o) {
    if (cli_parse_duration(arg, &o->wait_ms) != 0)
        return cli_usage_error("bad timeout '%s' (seconds, e.g. 30 or 2.5)", arg);
    o->have_wait = 1;
    return 0;
}

/* -E CODE and --lost-exit-code CODE: an exit status, 0 to 255. */
static int opt_exit_code(int opt, const char *arg, exec_opts *o) {
    char *end;
    long v;
    errno = 0;
    v = strtol(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || v < 0 || v > 255)
        return cli_usage_error("bad %s exit code '%s' (0 to 255)", opt == 'E' ? "conflict" : "lost-lock", arg);
    if (opt == 'E') o->conflict_code = (int)v;
    else o->lost_code = (int)v;
    return 0;
}

/* -l DURATION: within the library's lease bounds. */
static int opt_lease(const char *arg, exec_opts *o) {
    int64_t ms;
    if (cli_parse_duration(arg, &ms) != 0 || ms < (int64_t)DLOCK_LEASE_MIN_MS || ms > (int64_t)DLOCK_LEASE_MAX_MS)
        return cli_usage_error("bad lease '%s' (100ms to 24h, e.g. 10, 2.5s, 500ms)", arg);
    o->lease_ms = (unsigned)ms;
    return 0;
}

/* --slots N: 1 to DLOCK_SEM_VALUE_MAX. */
static int opt_slots(const char *arg, exec_opts *o) {
    char *end;
    unsigned long v;
    errno = 0;
    v = strtoul(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || arg[0] == '-' || v < 1 || v > DLOCK_SEM_VALUE_MAX)
        return cli_usage_error("bad --slots '%s' (1 to %d)", arg, DLOCK_SEM_VALUE_MAX);
    o->slots = (unsigned)v;
    return 0;
}

/* --lock-delay MS: 0 to DLOCK_LOCK_DELAY_MAX_MS. */
static int opt_lock_delay(const char *arg, exec_opts *o) {
    char *end;
    long v;
    errno = 0;
    v = strtol(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || v < 0 || v > (long)DLOCK_LOCK_DELAY_MAX_MS)
        return cli_usage_error("bad --lock-delay '%s' (ms, 0 to %u)", arg, DLOCK_LOCK_DELAY_MAX_MS);
    o->lock_delay = v;
    return 0;
}

/* --on-lost=term|warn. */
static int opt_on_lost(const char *arg, exec_opts *o) {
    if (strcmp(arg, "term") == 0) o->on_lost_term = 1;
    else if (strcmp(arg, "warn") == 0) o->on_lost_term = 0;
    else return cli_usage_error("bad --on-lost '%s' (term or warn)", arg);
    return 0;
}

/* --risk-signal SIG: a number, or a name with or without "SIG". */
static int opt_risk_signal(const char *arg, exec_opts *o) {
    static const struct {
        const char *name;
        int sig;
    } names[] = { { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "USR1", SIGUSR1 },
                  { "USR2", SIGUSR2 }, { "ALRM", SIGALRM }, { "TERM", SIGTERM }, { "KILL", SIGKILL },
                  { "CONT", SIGCONT }, { "STOP", SIGSTOP }, { "WINCH", SIGWINCH } };
    const char *n = strncmp(arg, "SIG", 3) == 0 ? arg + 3 : arg;
    char *end;
    long v;
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(n, names[i].name) == 0) {
            o->risk_sig = names[i].sig;
            return 0;
        }
    v = strtol(arg, &end, 10);
    if (end == arg || *end != '\0' || v < 1 || v > SIGRTMAX)
        return cli_usage_error("bad --risk-signal '%s' (a signal name such as USR1 or TERM, or its number)", arg);
    o->risk_sig = (int)v;
    return 0;
}

/* What getopt_long refused: an unknown option, or one without its
 * argument (opterr is 0, so getopt itself said nothing). */
static int opt_refused(char **argv) {
    if (optopt != 0 && optopt < 0x1000) {
        if (strchr("wEcl", optopt)) return cli_usage_error("option '-%c' needs an argument", optopt);
        return cli_usage_error("unknown option '-%c'", optopt);
    }
    return cli_usage_error("unknown option or missing argument '%s'", argv[optind - 1]);
}

/* One option (not --url/--prefix/-V): 0, -1 for --help, or an exit code.
 * -c's STRING goes to *shcmd: whether it is CMD is known only at the end. */
static int exec_option(int opt, char **argv, exec_opts *o, const char **shcmd) {
    switch (opt) {
    case 's':
        o->shared = 1;
        return 0;
    case 'x':
    case 'e':
        o->shared = 0;
        return 0;
    case 'n':
        o->nonblock = 1;
        return 0;
    case 'w':
        return opt_wait(optarg, o);
    case 'E':
    case OPT_LOST_CODE:
        return opt_exit_code(opt, optarg, o);
    case 'c':
        *shcmd = optarg;
        return 0;
    case 'l':
        return opt_lease(optarg, o);
    case OPT_ON_LOST:
        return opt_on_lost(optarg, o);
    case OPT_SLOTS:
        return opt_slots(optarg, o);
    case OPT_PASS_URL:
        o->pass_url = 1;
        return 0;
    case OPT_RISK_SIGNAL:
        return opt_risk_signal(optarg, o);
    case OPT_LOCK_DELAY:
        return opt_lock_delay(optarg, o);
    case 'o':
        /* flock -o: the command must not inherit the lock.  It never
         * does here: the lock is dlock's, not a descriptor. */
        return 0;
    case 'q':
        o->quiet = 1;
        return 0;
    case 'v':
        o->verbose = 1;
        return 0;
    case 'h':
        exec_help();
        return -1;
    default:
        return opt_refused(argv);
    }
}

/* After the options: NAME, then CMD [ARG...] or (flock's form) -c STRING
 * after NAME.  0 or an exit code. */
static int exec_operands(int argc, char **argv, exec_opts *o, const char *shcmd) {
    if (optind >= argc) return cli_usage_error("no lock NAME given");
    o->name = argv[optind++];
    if (*o->name == '\0' || strlen(o->name) > DLOCK_NAME_MAX)
        return cli_usage_error("a lock name is 1 to %d bytes", DLOCK_NAME_MAX);
    /* flock(1) also takes `FILE -c COMMAND`. */
    if (shcmd == NULL && optind + 1 < argc &&
        (strcmp(argv[optind], "-c") == 0 || strcmp(argv[optind], "--command") == 0)) {
        shcmd = argv[optind + 1];
        optind += 2;
    }
    if (optind < argc && strcmp(argv[optind], "--") == 0) optind++;
    if (shcmd != NULL) {
        if (optind < argc) return cli_usage_error("-c takes one STRING; give either -c or a command, not both");
        o->shcmd[0] = "sh";
        o->shcmd[1] = "-c";
        o->shcmd[2] = (char *)shcmd;
        o->shcmd[3] = NULL;
        o->cmd = o->shcmd;
    } else {
        if (optind >= argc) return cli_usage_error("no command given (dlock exec NAME -- CMD...)");
        o->cmd = argv + optind;
    }
    return 0;
}

/* 0, -1 for --help, or an exit code. */
static int exec_parse(int argc, char **argv, cli_conn *conn, exec_opts *o) {
    const char *shcmd = NULL;
    int opt, rc;

    memset(o, 0, sizeof *o);
    o->conflict_code = CLI_EXIT_CONFLICT;
    o->lost_code = CLI_EXIT_LOST;
    o->lease_ms = LEASE_DEFAULT_MS;
    o->on_lost_term = 1;
    o->lock_delay = -1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, exec_shortopts, exec_longopts, NULL)) != -1) {
        if (cli_conn_opt(opt, optarg, conn)) continue;
        if ((rc = exec_option(opt, argv, o, &shcmd)) != 0) return rc;
    }
    if ((rc = exec_operands(argc, argv, o, shcmd)) != 0) return rc;
    o->url = conn->url != NULL ? conn->url : secure_getenv("DLOCK_URL");
    if (o->slots != 0 && o->shared) return cli_usage_error("-s and --slots do not go together (a slot has no shared kind)");
    if (o->slots != 0 && o->risk_sig != 0)
        return cli_usage_error("--risk-signal and --slots do not go together (a slot's lease has no warning)");
    if (o->slots != 0 && o->lock_delay >= 0)
        return cli_usage_error("--lock-delay and --slots do not go together (a slot has no lock-delay)");
    if (o->have_wait && o->wait_ms == 0) o->nonblock = 1; /* as flock: -w 0 is -n */
    return 0;
}

/* ----------------------------------------------------- signals, self-pipe */

static volatile sig_atomic_t g_sig;   /* the first relayed signal received */
static int g_pipe[2] = { -1, -1 };    /* self-pipe: signal bytes, LOST_BYTE */
static atomic_int g_lost;

/* The handler writes one byte per signal: the number, with 0x80 set if
 * the kernel sent it (a terminal's Ctrl-C or hangup). */
static void on_signal(int sig, siginfo_t *si, void *uc) {
    int saved = errno;
    unsigned char b = (unsigned char)(sig | (si != NULL && si->si_code == SI_KERNEL ? 0x80 : 0));
    (void)uc;
    if (sig != SIGCHLD && g_sig == 0) g_sig = sig;
    (void)!write(g_pipe[1], &b, 1);
    errno = saved;
}

/* Runs on the library's renewal thread: must not block. */
static void exec_on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    unsigned char b = LOST_BYTE;
    (void)m;
    (void)name;
    (void)arg;
    atomic_store(&g_lost, 1);
    (void)!write(g_pipe[1], &b, 1);
}

/* --risk-signal: the lease is at risk (renewals failing); a renewal
 * that succeeds after it says nothing. */
static void on_risk(dlock_mutex_t *m, const char *name, int event, unsigned left_ms, void *arg) {
    unsigned char b = RISK_BYTE;
    (void)m;
    (void)name;
    (void)left_ms;
    (void)arg;
    if (event == DLOCK_LEASE_AT_RISK) (void)!write(g_pipe[1], &b, 1);
}

/* The same for --slots: the slot's lease was lost (not renewed, taken
 * back by `dlock break --sem`, or the server lost the semaphore). */
static void on_slot_lost(dlock_sem_t *s, const char *name, void *arg) {
    (void)s;
    exec_on_lost(NULL, name, arg);
}

static int signals_setup(void) {
    struct sigaction sa;
    size_t i;
    if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (i = 0; i < NRELAYED; i++)
        if (sigaction(relayed[i], &sa, NULL) != 0) return -1;
    sa.sa_flags |= SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) != 0) return -1;
    /* A closed stderr must not kill the holder of a lock. */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* Ends the process the way `sig` would have: with the default action. */
static void die_of(int sig) {
    sigset_t s;
    signal(sig, SIG_DFL);
    sigemptyset(&s);
    sigaddset(&s, sig);
    raise(sig);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    _exit(128 + sig); /* not reached for a terminating signal */
}

/* ------------------------------------------------- inherited descriptors */

/* The descriptors above 2 that dlock was started with; CMD inherits these
 * and no others. */
static int *g_keep;
static size_t g_nkeep;
static long g_fdmax;

static int int_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int keep_add(int fd) {
    int *n = realloc(g_keep, (g_nkeep + 1) * sizeof *n);
    if (n == NULL) return -1;
    g_keep = n;
    g_keep[g_nkeep++] = fd;
    return 0;
}

static int fds_inventory(void) {
    struct rlimit rl;
    DIR *d = opendir("/proc/self/fd");
    g_fdmax = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536)
        g_fdmax = (long)rl.rlim_cur;
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char *end;
            long fd = strtol(e->d_name, &end, 10);
            if (end == e->d_name || *end != '\0' || fd < 3 || fd == dirfd(d)) continue;
            if (keep_add((int)fd) != 0) break;
        }
        closedir(d);
    } else {
        long fd;
        for (fd = 3; fd < g_fdmax && fd < 1024; fd++)
            if (fcntl((int)fd, F_GETFD) != -1 && keep_add((int)fd) != 0) break;
    }
    if (g_nkeep > 1) qsort(g_keep, g_nkeep, sizeof *g_keep, int_cmp);
    return 0;
}

static void close_from_to(unsigned lo, unsigned hi) {
    if (lo > hi) return;
    if (close_range(lo, hi, 0) == 0) return;
    for (; lo <= hi && (long)lo < g_fdmax; lo++) close((int)lo);
}

/* In the child, before exec (async-signal-safe only): closes
 * every descriptor above 2 but the inherited ones (g_keep, sorted). */
static void fds_close_others(void) {
    unsigned lo = 3;
    size_t i;
    for (i = 0; i < g_nkeep; i++) {
        unsigned k = (unsigned)g_keep[i];
        if (k > lo) close_from_to(lo, k - 1);
        if (k >= lo) lo = k + 1;
    }
    close_from_to(lo, ~0u);
}

/* ------------------------------------------------------------ the watcher */

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What the watcher last read of the lock. */
typedef struct reading {
    int have;        /* 0 nothing yet, 1 info, -1 the read failed */
    int unreachable; /* it failed with ENOLCK */
    dlock_lock_info_t info;
    unsigned slots;  /* --slots: the semaphore's N (then value, not info) */
    int value;       /* --slots: its value */
} reading;

typedef struct watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* on CLOCK_MONOTONIC */
    int done;
    pthread_t thread;
    int started;
    dlock_client_t *view; /* for dlock_lock_info */
    dlock_sem_t *vsem;    /* --slots: the semaphore on the view client, or NULL */
    const exec_opts *o;
    int64_t start_ms;     /* monotonic */
    reading r;            /* the latest reading */
    int drawn;            /* a line is on the screen */
} watch;

/* One reading of the lock on the view client (with --slots, the value of
 * the semaphore vsem, made on that client; NULL if it could not be). */
static void read_lock(dlock_client_t *view, dlock_sem_t *vsem, const exec_opts *o, reading *r) {
    dlock_lock_info_t info;
    int rc;
    r->slots = o->slots;
    if (o->slots != 0) {
        rc = vsem == NULL ? EINVAL : dlock_sem_getvalue(vsem, &r->value);
        r->have = rc == 0 ? 1 : -1;
        r->unreachable = rc == ENOLCK;
        return;
    }
    rc = dlock_lock_info(view, o->name, &info);
    if (rc == 0) {
        r->info = info;
        r->have = 1;
        r->unreachable = 0;
    } else {
        r->have = -1;
        r->unreachable = rc == ENOLCK;
    }
}

/* "held by web2, pid 42, thread 42 for 3m12s" and the like. */
static void describe(const reading *r, char *buf, size_t n) {
    char holder[512], t[64];
    const dlock_lock_info_t *i = &r->info;
    if (r->have < 0) {
        snprintf(buf, n, r->unreachable ? "the server is not answering" : "cannot read who holds it");
        return;
    }
    if (r->have == 0) {
        snprintf(buf, n, "busy");
        return;
    }
    if (r->slots != 0) {
        /* The library does not say who holds the slots, nor who waits. */
        if (r->value > 0) snprintf(buf, n, "%d of its slots free now", r->value);
        else snprintf(buf, n, "no free slot (of %u)", r->slots);
        return;
    }
    if (i->held)
        snprintf(buf, n, "held by %s for %s", cli_fmt_holder(holder, sizeof holder, i),
                 cli_fmt_secs(t, sizeof t, cli_held_ms(i)));
    else if (i->readers > 0)
        snprintf(buf, n, "held shared by %u", i->readers);
    else if (i->delay_left_ms > 0) /* its last hold ended without a release */
        snprintf(buf, n, "in its lock-delay for %s more (its last holder's lease ran out)",
                 cli_fmt_secs(t, sizeof t, i->delay_left_ms));
    else if (i->writers_waiting > 0) /* writers go first */
        snprintf(buf, n, "%u writer%s waiting first", i->writers_waiting, i->writers_waiting == 1 ? "" : "s");
    else
        snprintf(buf, n, "just released");
}

/* Reads the lock without holding w->mu (the read may take a while). */
static void watch_read(watch *w) {
    reading r = { 0, 0, { 0 }, 0, 0 };
    pthread_mutex_unlock(&w->mu);
    read_lock(w->view, w->vsem, w->o, &r);
    pthread_mutex_lock(&w->mu);
    w->r = r;
}

/* Redraws the line: "\r", the text cut to the terminal's width, erase to
 * the end of the line. */
static void watch_draw(watch *w) {
    char name[256], what[768], line[1200], waited[64];
    struct winsize ws;
    size_t cols = 80, k, chars;

    describe(&w->r, what, sizeof what);
    /* The wait first: on a narrow terminal the end is cut off. */
    snprintf(line, sizeof line, "%s: waiting %s for %s'%s'%s: %s", cli_prog,
             cli_fmt_secs(waited, sizeof waited, mono_ms() - w->start_ms), w->o->slots ? "a slot of " : "",
             cli_fmt_safe(name, sizeof name, w->o->name), w->o->shared ? " (shared)" : "", what);
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) cols = ws.ws_col;
    for (k = 0, chars = 0; line[k]; k++) { /* at most cols - 1 characters: no wrap */
        if (((unsigned char)line[k] & 0xC0) != 0x80 && ++chars >= cols) {
            line[k] = '\0';
            break;
        }
    }
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    w->drawn = 1;
}

/* Draws the line at once, then about once a second until told to stop. */
static void *exec_watch_main(void *arg) {
    watch *w = arg;
    int64_t next = w->start_ms;
    pthread_mutex_lock(&w->mu);
    while (!w->done) {
        struct timespec ts;
        if (mono_ms() >= next) {
            watch_read(w);
            if (w->done) break;
            watch_draw(w);
            while (next <= mono_ms()) next += 1000;
        }
        ts.tv_sec = (time_t)(next / 1000);
        ts.tv_nsec = (long)(next % 1000) * 1000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int watch_start(watch *w, dlock_client_t *view, dlock_sem_t *vsem, const exec_opts *o, int64_t start_ms) {
    pthread_condattr_t ca;
    sigset_t all, old;
    int rc;
    memset(w, 0, sizeof w[0]);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    w->view = view;
    w->vsem = vsem;
    w->o = o;
    w->start_ms = start_ms;
    /* The watcher takes no signals: they must reach the waiting thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, exec_watch_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    w->started = rc == 0;
    return rc;
}

/* Stops the watcher; keeps its last reading.  erase: take the line off
 * the screen. */
static void watch_stop(watch *w, int erase) {
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->done = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        w->started = 0;
    }
    if (w->drawn && erase) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        w->drawn = 0;
    }
}

static void watch_free(watch *w) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

/* ----------------------------------------------------------- running CMD */

extern char **environ;

/* CMD's environment: dlock's, plus DLOCK_FENCE=<the hold's fencing
 * token> when there is one, so that the job can fence its writes; less
 * DLOCK_URL, which may hold the server's password, unless --pass-url
 * asks for it (then DLOCK_URL is the URL dlock used, from --url or its
 * own environment, in *urlvar, the caller's to free).  Made before the
 * child starts: it may only make async-signal-safe calls. */
static char **cmd_environ(const exec_opts *o, uint64_t fence, char *buf, size_t n, char **urlvar) {
    size_t k = 0, i;
    char **env;
    *urlvar = NULL;
    while (environ[k] != NULL) k++;
    if ((env = calloc(k + 3, sizeof *env)) == NULL) return NULL;
    for (i = 0, k = 0; environ[i] != NULL; i++)
        if (strncmp(environ[i], "DLOCK_FENCE=", 12) != 0 && strncmp(environ[i], "DLOCK_URL=", 10) != 0)
            env[k++] = environ[i];
    if (fence != 0) {
        snprintf(buf, n, "DLOCK_FENCE=%llu", (unsigned long long)fence);
        env[k++] = buf;
    }
    if (o->pass_url && o->url != NULL) {
        if (asprintf(urlvar, "DLOCK_URL=%s", o->url) < 0) {
            free(env);
            return NULL;
        }
        env[k++] = *urlvar;
    }
    env[k] = NULL;
    return env;
}

/* What the child needs, made before it starts: it shares the parent's
 * memory and may only make async-signal-safe calls. */
typedef struct child_args {
    const exec_opts *o;
    const sigset_t *orig_mask;
    char **env;
    const int *errpipe;
    pid_t parent;
} child_args;

/* The child, before exec: signals back to their defaults (a handler of
 * dlock's must never run here, in dlock's memory), PR_SET_PDEATHSIG with
 * --on-lost=term, no descriptor but the inherited ones, dlock's original
 * mask; a failed exec reports its errno on errpipe. */
static int cmd_child(void *arg) {
    const child_args *a = arg;
    size_t i;
    int e;
    for (i = 0; i < NRELAYED; i++) signal(relayed[i], SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    if (a->o->on_lost_term) {
        /* dlock's death ends its lock, so it ends CMD too. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != a->parent) _exit(128 + SIGTERM);
    }
    close(a->errpipe[0]);
    fds_close_others();
    pthread_sigmask(SIG_SETMASK, a->orig_mask, NULL);
    execvpe(a->o->cmd[0], a->o->cmd, a->env);
    e = errno;
    (void)!write(a->errpipe[1], &e, sizeof e);
    _exit(e == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC);
}

/* The child's stack: what execvpe puts on it (the PATH entry it tries,
 * and for a script without "#!" a new argv of CMD's arguments) and a
 * margin for the calls before it. */
static size_t child_stack_size(const exec_opts *o) {
    size_t argc = 0;
    while (o->cmd[argc] != NULL) argc++;
    return 64 * 1024 + 2 * PATH_MAX + (argc + 3) * sizeof(char *);
}

/* Starts the child as vfork(2) does (CLONE_VM | CLONE_VFORK) rather than
 * with fork: dlock's page tables are not copied (libcrypto and the
 * library's threads are mapped: a fork costs tens of microseconds and a
 * copy-on-write fault for each page dlock writes afterwards), no
 * pthread_atfork handler runs (the library's wait for its own locks),
 * and dlock resumes once CMD is exec'd.  The child runs on a stack of
 * its own.  Its pid, or -1 with errno set. */
static pid_t child_start(child_args *a) {
    size_t size = child_stack_size(a->o);
    char *stack = malloc(size);
    pid_t pid;
    int e;
    if (stack == NULL) return -1;
    /* The stack grows down from its top, 16-byte aligned. */
    pid = clone(cmd_child, (void *)(((uintptr_t)(stack + size)) & ~(uintptr_t)15), CLONE_VM | CLONE_VFORK | SIGCHLD, a);
    e = errno;
    free(stack);
    errno = e;
    return pid;
}

/* Starts CMD: *pid, and in *child_err the errno of a failed exec (said
 * here), else 0.  Returns 0, or an exit code if CMD could not be started. */
static int cmd_spawn(const exec_opts *o, const sigset_t *orig_mask, uint64_t fence, pid_t *pid, int *child_err) {
    int errpipe[2];
    char fencevar[64], **env, *urlvar;
    sigset_t all, old;
    child_args a;
    ssize_t n;

    if ((env = cmd_environ(o, fence, fencevar, sizeof fencevar, &urlvar)) == NULL) {
        cli_msg("out of memory");
        return CLI_EXIT_OSERR;
    }
    /* The child reports a failed exec on this pipe, which exec closes. */
    if (pipe2(errpipe, O_CLOEXEC) != 0 || keep_add(errpipe[1]) != 0) {
        cli_msg("cannot make a pipe: %s", strerror(errno));
        free(env);
        free(urlvar);
        return CLI_EXIT_OSERR;
    }
    qsort(g_keep, g_nkeep, sizeof *g_keep, int_cmp);
    a.o = o;
    a.orig_mask = orig_mask;
    a.env = env;
    a.errpipe = errpipe;
    a.parent = getpid();
    /* Every signal blocked until the child has reset its handlers: no
     * handler of dlock's runs in the child. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    *pid = child_start(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(errpipe[1]);
    free(env);
    free(urlvar);
    if (*pid < 0) {
        close(errpipe[0]);
        cli_msg("cannot start the command: %s", strerror(errno));
        return CLI_EXIT_OSERR;
    }
    /* EOF: exec succeeded; an errno: it failed. */
    while ((n = read(errpipe[0], child_err, sizeof *child_err)) < 0 && errno == EINTR)
        ;
    close(errpipe[0]);
    if (n != (ssize_t)sizeof *child_err) *child_err = 0;
    else cli_msg("%s: %s", o->cmd[0], *child_err == ENOENT ? "command not found" : strerror(*child_err));
    return 0;
}

/* Acts on the bytes read from the self-pipe while CMD runs: a lost lock
 * (said once; SIGTERM to CMD unless --on-lost=warn), or a signal to pass
 * on -- unless the kernel sent it, to the whole foreground group. */
static void relay_bytes(const exec_opts *o, pid_t pid, const unsigned char *buf, ssize_t n, int *reported_lost) {
    ssize_t k;
    for (k = 0; k < n; k++) {
        int sig = buf[k] & 0x7F, from_kernel = buf[k] & 0x80;
        if (buf[k] == RISK_BYTE) {
            cli_msg("the lock's lease is at risk (renewals failing); sending the command signal %d", o->risk_sig);
            kill(pid, o->risk_sig);
        } else if (buf[k] == LOST_BYTE) {
            if ((*reported_lost)++) continue;
            if (o->on_lost_term) {
                cli_msg("lost the %s while the command ran (lease not renewed, or broken); "
                        "sending it SIGTERM", o->slots ? "slot" : "lock");
                kill(pid, SIGTERM);
            } else {
                cli_msg("lost the %s while the command ran (lease not renewed, or broken); "
                        "it keeps running (--on-lost=warn)", o->slots ? "slot" : "lock");
            }
        } else if (sig != SIGCHLD && !from_kernel) {
            kill(pid, sig); /* the terminal's signals reached CMD already */
        }
    }
}

/* Waits for CMD to end, relaying signals and a lost lock meanwhile (the
 * SIGCHLD byte wakes the poll).  CMD's wait status, or -1 if waitpid
 * failed. */
static int cmd_wait(const exec_opts *o, pid_t pid) {
    int status = 0, reported_lost = 0;
    ssize_t n;
    for (;;) {
        unsigned char buf[64];
        struct pollfd p = { g_pipe[0], POLLIN, 0 };
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            cli_msg("cannot wait for the command: %s", strerror(errno));
            return -1;
        }
        if (poll(&p, 1, 1000) < 0 && errno != EINTR) continue;
        while ((n = read(g_pipe[0], buf, sizeof buf)) > 0) relay_bytes(o, pid, buf, n, &reported_lost);
    }
    return status;
}

/* Runs CMD to its end; returns dlock's exit code (CMD's status). */
static int run(const exec_opts *o, const sigset_t *orig_mask, uint64_t fence) {
    int child_err = 0, status, code;
    pid_t pid;

    if ((code = cmd_spawn(o, orig_mask, fence, &pid, &child_err)) != 0) return code;
    status = cmd_wait(o, pid);
    if (status == -1) return CLI_EXIT_OSERR;
    if (child_err != 0) return child_err == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return CLI_EXIT_OSERR;
}

/* ---------------------------------------------------------------- exec */

/* One `dlock exec`, carried through its phases (open, try, wait, run,
 * release, close); each phase reads and sets what it needs here. */
typedef struct exec_run {
    exec_opts o;
    int code;                 /* the exit code so far */
    dlock_client_t *c;        /* holds the lock */
    dlock_client_t *view;     /* reads who holds it (short unreachable bound) */
    dlock_rwlock_t rw;
    int have_rw, held, waited, have_watch;
    dlock_sem_t sem, vsem;    /* --slots: the semaphore, on c and on view */
    int have_sem, have_vsem;
    int undo;                 /* --slots: the slot is leased (comes back if dlock dies) */
    watch w;
    char name[256];           /* o.name, safe for a terminal */
    int64_t start;            /* monotonic ms, when dlock started */
    struct timespec deadline; /* with -w: start + wait_ms, CLOCK_MONOTONIC */
    sigset_t orig_mask;       /* dlock's signal mask at start: CMD's */
} exec_run;

/* --slots: the semaphore on x->c, with undo if the library has it, and
 * its twin on the view client for the watcher's readings (without which
 * they say "cannot read").  0 or the library's error. */
static int slots_open(exec_run *x) {
    dlock_semattr_t a;
    int rc;
    dlock_semattr_init(&a);
    dlock_semattr_setclient(&a, x->c);
    dlock_semattr_setlease(&a, x->o.lease_ms);
    rc = dlock_semattr_setundo(&a, 1);
    x->undo = rc == 0;
    if (rc != 0 && rc != ENOTSUP) {
        dlock_semattr_destroy(&a);
        return rc;
    }
    dlock_semattr_setlostcallback(&a, on_slot_lost, NULL);
    rc = dlock_sem_init(&x->sem, x->o.name, x->o.slots, &a);
    x->have_sem = rc == 0;
    if (rc == 0) {
        dlock_semattr_setclient(&a, x->view);
        x->have_vsem = dlock_sem_init(&x->vsem, x->o.name, x->o.slots, &a) == 0;
    }
    dlock_semattr_destroy(&a);
    return rc;
}

/* The two clients and the rwlock (or the semaphore).  1, or 0 with
 * x->code set. */
static int exec_open(exec_run *x, const cli_conn *conn) {
    dlock_mutexattr_t attr;
    int rc;
    if ((x->code = cli_client_breaker(conn, 0, CLI_EXEC_BREAKER_MS, &x->c)) != 0) return 0;
    if ((x->code = cli_client(conn, VIEW_UNREACHABLE_MS, &x->view)) != 0) return 0;
    if (x->o.slots != 0) {
        if ((rc = slots_open(x)) != 0) {
            x->code = rc == EINVAL ? cli_usage_error("bad semaphore name: %s", dlock_last_error())
                                   : cli_fail("cannot open the semaphore", rc);
            return 0;
        }
        goto deadline;
    }
    dlock_mutexattr_init(&attr);
    dlock_mutexattr_setclient(&attr, x->c);
    dlock_mutexattr_setlease(&attr, x->o.lease_ms);
    dlock_mutexattr_setlostcallback(&attr, exec_on_lost, NULL);
    if (x->o.risk_sig != 0) dlock_mutexattr_setriskcallback(&attr, on_risk, NULL, x->o.lease_ms / 3);
    if (x->o.lock_delay >= 0) dlock_mutexattr_setlockdelay(&attr, (unsigned)x->o.lock_delay);
    /* As flock(1): a shared lock is granted while only shared locks are
     * held, even if an exclusive one waits -- so a shared holder whose
     * command takes the same shared lock again never deadlocks. */
    dlock_mutexattr_setrwkind(&attr, DLOCK_RWLOCK_PREFER_READER);
    rc = dlock_rwlock_init(&x->rw, x->o.name, &attr);
    dlock_mutexattr_destroy(&attr);
    if (rc != 0) {
        x->code = rc == EINVAL ? cli_usage_error("bad lock name: %s", dlock_last_error()) : cli_fail("init", rc);
        return 0;
    }
    x->have_rw = 1;
deadline:
    if (x->o.have_wait) {
        int64_t end = x->start + x->o.wait_ms;
        x->deadline.tv_sec = (time_t)(end / 1000);
        x->deadline.tv_nsec = (long)(end % 1000) * 1000000L;
    }
    return 1;
}

/* Who holds the lock now, in words (one short read on the view client). */
static void exec_describe(exec_run *x, char *what, size_t n) {
    reading r = { 0, 0, { 0 }, 0, 0 };
    read_lock(x->view, x->have_vsem ? &x->vsem : NULL, &x->o, &r);
    describe(&r, what, n);
}

/* 1. One try; with -w, a server that does not answer makes it give up at
 * the deadline (ETIMEDOUT) rather than after the client's unreachable
 * bound.  The library's result. */
static int exec_try(exec_run *x) {
    const exec_opts *o = &x->o;
    int rc;
    if (o->slots != 0) {
        /* One attempt, bounded by the client's unreachable bound; a slot
         * that is not free reads as a busy lock. */
        rc = dlock_sem_trywait(&x->sem);
        return rc == EAGAIN ? EBUSY : rc;
    }
    rc = dlock_rwlock_xlock(&x->rw, o->shared, DLOCK_F_TRY | DLOCK_F_INTR, CLOCK_MONOTONIC,
                                o->have_wait ? &x->deadline : NULL);
    if (rc == ENOLCK && !o->nonblock && !o->have_wait && g_sig == 0) {
        /* A try without a deadline is one attempt (-n: exit 69 at
         * once).  A call that may wait gives the server the client's
         * unreachable bound to answer, as the library's lock does: the
         * try again, with a deadline far enough that the bound ends it. */
        struct timespec far;
        clock_gettime(CLOCK_MONOTONIC, &far);
        far.tv_sec += 24 * 3600;
        rc = dlock_rwlock_xlock(&x->rw, o->shared, DLOCK_F_TRY | DLOCK_F_INTR, CLOCK_MONOTONIC, &far);
    }
    return rc;
}

/* 2. Waiting for a slot: the library's interruptible wait until a slot,
 * the deadline or a signal of ours (a SIGCHLD, say, only goes on). */
static void slots_wait(exec_run *x, int *rc) {
    do {
        *rc = dlock_sem_xwait(&x->sem, DLOCK_F_INTR, CLOCK_MONOTONIC, x->o.have_wait ? &x->deadline : NULL);
    } while (*rc == EINTR && g_sig == 0);
}

/* 2. Waiting, after a busy try: the watcher's line on a terminal (or,
 * off one, a line with -v), then the library's interruptible wait until
 * the lock, the deadline or a signal of ours.  0 with *rc the wait's
 * result, or an exit code if the watcher cannot start. */
static int exec_wait(exec_run *x, int *rc) {
    const exec_opts *o = &x->o;
    char what[768];
    x->waited = 1;
    if (!o->quiet && isatty(STDERR_FILENO)) {
        x->have_watch = 1;
        if (watch_start(&x->w, x->view, x->have_vsem ? &x->vsem : NULL, o, x->start) != 0) {
            cli_msg("cannot start a thread");
            return CLI_EXIT_OSERR;
        }
    } else if (o->verbose && !o->quiet) { /* off a terminal, silent as flock(1) unless -v */
        exec_describe(x, what, sizeof what);
        cli_msg("waiting for %s'%s'%s: %s", o->slots ? "a slot of " : "", x->name, o->shared ? " (shared)" : "",
                what);
    }
    if (o->slots != 0) {
        slots_wait(x, rc);
        watch_stop(&x->w, *rc == 0 || g_sig != 0);
        return 0;
    }
    do {
        *rc = dlock_rwlock_xlock(&x->rw, o->shared, DLOCK_F_INTR, CLOCK_MONOTONIC, o->have_wait ? &x->deadline : NULL);
    } while (*rc == EINTR && g_sig == 0);
    watch_stop(&x->w, *rc == 0 || *rc == EINTR || g_sig != 0);
    return 0;
}

/* A signal of ours ended the try or the wait: give everything back and
 * die of it, as flock(1) would. */
static void exec_die(exec_run *x) {
    int sig = g_sig;
    if (x->held && x->have_sem) dlock_sem_post(&x->sem);
    else if (x->held) dlock_rwlock_unlock(&x->rw);
    x->held = 0;
    if (x->have_vsem) dlock_sem_destroy(&x->vsem);
    if (x->have_sem) dlock_sem_destroy(&x->sem);
    if (x->have_rw) dlock_rwlock_destroy(&x->rw);
    dlock_client_destroy(x->view);
    dlock_client_destroy(x->c);
    die_of(sig);
}

/* The lock was not had (rc, not EBUSY with -n): the exit code, with the
 * final word on the waiting line or in a message. */
static int exec_not_had(exec_run *x, int rc) {
    const exec_opts *o = &x->o;
    char what[768], t[64];
    reading r = { 0, 0, { 0 }, 0, 0 };
    if (rc != ETIMEDOUT) {
        if (x->w.drawn) fputc('\n', stderr);
        return cli_fail(o->slots ? "cannot take a slot" : "cannot take the lock", rc);
    }
    /* Timed out waiting for the lock, or for a server that stopped
     * answering?  One short look tells. */
    read_lock(x->view, x->have_vsem ? &x->vsem : NULL, o, &r);
    if (r.unreachable) {
        if (x->w.drawn) fputc('\n', stderr);
        snprintf(what, sizeof what, "timed out after %s", cli_fmt_dur(t, sizeof t, o->wait_ms));
        return cli_fail(what, ENOLCK); /* with this thread's detail of read_lock's failure */
    }
    describe(&r, what, sizeof what);
    if (x->w.drawn) { /* the line becomes the final word */
        fprintf(stderr, "\r%s: timed out after %s waiting for %s'%s': %s\033[K\n", cli_prog,
                cli_fmt_dur(t, sizeof t, o->wait_ms), o->slots ? "a slot of " : "", x->name, what);
    } else if (o->verbose) {
        cli_msg("timed out after %s waiting for %s'%s': %s", cli_fmt_dur(t, sizeof t, o->wait_ms),
                o->slots ? "a slot of " : "", x->name, what);
    }
    return o->conflict_code;
}

/* Phases 1 and 2: 1 with the lock held, else 0 with x->code set.  Does
 * not return if a signal of ours came. */
static int exec_acquire(exec_run *x) {
    const exec_opts *o = &x->o;
    char what[768], t[64];
    int rc = exec_try(x);
    if (rc == EBUSY && o->nonblock) {
        if (o->verbose) {
            exec_describe(x, what, sizeof what);
            cli_msg(o->slots ? "'%s': %s" : "'%s' is %s", x->name, what);
        }
        x->code = o->conflict_code;
        return 0;
    }
    if (rc == EBUSY && g_sig == 0 && (x->code = exec_wait(x, &rc)) != 0) return 0;
    x->held = rc == 0;
    if (g_sig != 0) exec_die(x);
    if (rc != 0) {
        x->code = exec_not_had(x, rc);
        return 0;
    }
    if (o->verbose && o->slots != 0)
        cli_msg("got a slot of '%s' (%u slot%s%s)%s%s", x->name, o->slots, o->slots == 1 ? "" : "s", x->undo ? ", leased" : "",
                x->waited ? " after " : "", x->waited ? cli_fmt_dur(t, sizeof t, mono_ms() - x->start) : "");
    else if (o->verbose)
        cli_msg("got '%s' (%s, fence %llu)%s%s", x->name, o->shared ? "shared" : "exclusive",
                (unsigned long long)dlock_rwlock_fence(&x->rw), x->waited ? " after " : "",
                x->waited ? cli_fmt_dur(t, sizeof t, mono_ms() - x->start) : "");
    return 1;
}

/* After CMD: the release.  A lock lost meanwhile makes the exit code
 * --lost-exit-code, whatever CMD's status: the caller must know. */
/* After CMD, with --slots: the slot back (a post).  A post that fails
 * leaves the slot taken: with undo until its lease runs out, without it
 * until someone posts it. */
static void slots_release(exec_run *x) {
    char t[64];
    int rc = dlock_sem_post(&x->sem); /* (a lost slot: forgotten, 0) */
    x->held = 0;
    if (atomic_load(&g_lost) && x->code != CLI_EXIT_OSERR) {
        /* The command ran (in part) without its slot. */
        if (x->o.verbose)
            cli_msg("the command's own status was %d; exiting with %d (slot lost)", x->code, x->o.lost_code);
        x->code = x->o.lost_code;
    }
    if (rc == 0) return;
    if (x->undo)
        cli_msg("could not give back the slot of '%s' (%s); it comes back within %s", x->name, dlock_strerror(rc),
                cli_fmt_dur(t, sizeof t, x->o.lease_ms));
    else
        cli_msg("could not give back the slot of '%s' (%s); it stays taken until someone posts it", x->name,
                dlock_strerror(rc));
}

static void exec_release(exec_run *x) {
    const exec_opts *o = &x->o;
    char t[64];
    int rc;
    if (o->slots != 0) {
        slots_release(x);
        return;
    }
    rc = dlock_rwlock_unlock(&x->rw);
    x->held = 0;
    if (rc == EPERM && !atomic_load(&g_lost))
        cli_msg("the lock '%s' had been lost when the command ended", x->name);
    if ((rc == EPERM || atomic_load(&g_lost)) && x->code != CLI_EXIT_OSERR) {
        /* The command ran (in part) without the lock: the caller must
         * know, whatever the command's own status. */
        if (o->verbose)
            cli_msg("the command's own status was %d; exiting with %d (lock lost)", x->code, o->lost_code);
        x->code = o->lost_code;
    } else if (rc != 0 && rc != EPERM) {
        const char *detail = cli_err_detail(rc);
        cli_msg("could not release '%s' (%s%s%s); it expires within %s", x->name, dlock_strerror(rc),
                detail != NULL ? ": " : "", detail != NULL ? detail : "", cli_fmt_dur(t, sizeof t, o->lease_ms));
    }
}

/* Whatever the phases left: the watcher, the lock, the clients. */
static void exec_close(exec_run *x) {
    if (x->have_watch) watch_free(&x->w);
    if (x->have_rw) {
        if (x->held) dlock_rwlock_unlock(&x->rw);
        dlock_rwlock_destroy(&x->rw);
    }
    if (x->have_sem) {
        if (x->held) dlock_sem_post(&x->sem);
        dlock_sem_destroy(&x->sem);
    }
    if (x->have_vsem) dlock_sem_destroy(&x->vsem);
    if (x->view != NULL) dlock_client_destroy(x->view);
    if (x->c != NULL) dlock_client_destroy(x->c);
    free(g_keep);
}

int cli_exec(int argc, char **argv, cli_conn *conn) {
    exec_run x;
    int rc;

    memset(&x, 0, sizeof x);
    x.start = mono_ms();
    if ((rc = exec_parse(argc, argv, conn, &x.o)) != 0) return rc < 0 ? 0 : rc;
    cli_fmt_safe(x.name, sizeof x.name, x.o.name);
    pthread_sigmask(SIG_SETMASK, NULL, &x.orig_mask);
    /* Before the library opens anything: what CMD may inherit. */
    fds_inventory();
    if (signals_setup() != 0) {
        cli_msg("cannot set up signal handling: %s", strerror(errno));
        return CLI_EXIT_OSERR;
    }
    if (exec_open(&x, conn) && exec_acquire(&x)) {
        /* 3. Running. */
        x.code = run(&x.o, &x.orig_mask, x.o.slots != 0 ? 0 : dlock_rwlock_fence(&x.rw));
        exec_release(&x);
    }
    exec_close(&x);
    return x.code;
}
