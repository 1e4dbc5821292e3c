/* range.c -- POSIX record locks on mapped files (fcntl F_SETLK, F_SETLKW,
 * F_GETLK; lockf over them): byte ranges kept on the server, in the
 * range table of the file's lock name (src/backend/lua/range.lua,
 * through dlock__range), owned by this process.  See docs/preload.md,
 * "Record locks".
 *
 * A POSIX record lock belongs to the process and dies with it (or with
 * the close of any descriptor of its file), so the process itself asks
 * the server, on its own client: no keeper.  The order is the flock
 * hooks': the cluster first, then the kernel; an unlock the kernel first.
 * Each request is one script run, atomic on the server: the conflict
 * check against the other owners and the POSIX replacement (upgrade,
 * downgrade, split, merge) of the process's own ranges happen together,
 * so an upgrade never lets the range go.  A kernel call that fails after
 * the server granted puts the process's former ranges back ("restore").
 *
 * The process's ranges on the server are leased (RANGE_LEASE_MS) and
 * renewed by a thread of the shim (all signals blocked), which also
 * drops the ranges of a file on which the kernel says the process holds
 * no record lock any more (/proc/locks): a descriptor closed where no
 * hook saw it (fclose, dup2 over it).  Killed, the process's ranges lapse
 * with the lease; at exit they are dropped.
 *
 * A process alone on a file keeps the table's cache and asks nothing
 * while it does ("the cache" below); a request whose answer never came
 * is owed a trim of the server's ranges to the kernel's (flush_trim).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"
#include <dlock_private.h> /* dlock__range */

#ifndef KCMP_FILE
#define KCMP_FILE 0
#endif

#define RANGE_LEASE_MS 10000
#define RANGE_RENEW_MS 2500
#define RANGE_INF 9007199254740991LL /* "to the end of the file": 2^53 - 1, exact in the script's numbers */
#define RANGE_STALE 8
#define CLAIM_MARGIN_MS 1000 /* a cache is used no later than its lease, by this host's clock, less this */
#define CLAIM_ASK_MS 500     /* F_SETLK, F_GETLK: how long another owner's cache is waited for */

/* A mapped file on which this process has asked for record locks. */
struct rfile {
    struct rfile *next;
    dev_t dev;
    ino_t ino;
    int busy;       /* requests in flight */
    unsigned gen;   /* requests begun: the watch drops nothing a request is making */
    int held;       /* the server may hold ranges of ours */
    int visited;    /* by the renewal's current pass */
    int nstale;     /* unlocks that did not reach the server, oldest first (fmu) */
    int trim;       /* a set whose answer never came may have been applied: the server's
                     * ranges are owed a cut to the kernel's ("trim"), after the unlocks */
    long long stale[RANGE_STALE][2];
    int ofd;        /* OFD locks of one open file description (else the process's) */
    int fd;         /* OFD: the last descriptor of it seen, -1 once its last is closed */
    int dying;      /* OFD: its last descriptor is being closed */
    char own[80];   /* the owner in the table: the process, or OWNER.oN for a description */
    /* The table's cache (POSIX owners): while the server says this
     * process keeps it, every lock call on the file is the kernel's alone
     * (fmu held), until claim_until (monotonic ns: when the request that
     * last gave or renewed it was sent, plus the lease, less a margin)
     * or until another owner asks (the watcher thread, watching). */
    int cached, watching;
    long long claim_until;
    char name[DLOCK_NAME_MAX + 1];
    /* Orders the requests that change the owner's ranges: an owed unlock
     * goes before any later request, never after a later lock of the
     * range.  Taken before rmu, never while waiting. */
    pthread_mutex_t fmu;
};

static pthread_mutex_t rmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rcv = PTHREAD_COND_INITIALIZER;
static struct rfile *rfiles;
volatile int dlpl_nrange;
static char owner[64];       /* HOSTHASH.PID.START: the same across exec */
static char who[300];        /* host:pid */
static pid_t owner_pid;
static unsigned ndesc;       /* descriptions made owners */
static int renew_started, renew_stop;
static int cache_off; /* the server keeps no word for a cache's owner (no BLPOP): no caches */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void rlock(void) {
    DLPL_REAL(mutex_lock)(&rmu);
}
static void runlock(void) {
    DLPL_REAL(mutex_unlock)(&rmu);
}

static void at_prepare(void) {
    rlock();
}
static void at_parent(void) {
    runlock();
}
/* The child holds none of its parent's record locks (POSIX): it forgets
 * them, and is a new owner. */
static void at_child(void) {
    struct rfile *f, *n;
    pthread_mutex_init(&rmu, NULL);
    pthread_cond_init(&rcv, NULL);
    for (f = rfiles; f != NULL; f = n) {
        n = f->next;
        free(f);
    }
    rfiles = NULL;
    dlpl_nrange = 0;
    owner_pid = 0;
    renew_started = renew_stop = 0;
}
static void range_atfork_register(void) {
    pthread_atfork(at_prepare, at_parent, at_child);
}

static unsigned long long range_fnv(unsigned long long h, const char *s) {
    for (; *s != '\0'; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* The first line of a small file into buf ("" if it cannot be read). */
static void read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "re");
    buf[0] = '\0';
    if (f != NULL) {
        if (fgets(buf, (int)cap, f) == NULL) buf[0] = '\0';
        fclose(f);
    }
}

/* This process's owner id and identity (rmu held).  The id is the host
 * (its name and boot), the pid and the process's start time: unique
 * among live processes of every host, and the same after an exec, whose
 * program takes the record locks over (dlpl_range_adopt). */
static void owner_make(void) {
    char host[256], boot[64], stat[1024], *p;
    unsigned long long start = 0;
    int i;
    if (owner_pid == getpid()) return;
    if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
    host[sizeof host - 1] = '\0';
    read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    read_line("/proc/self/stat", stat, sizeof stat);
    /* starttime is the 20th field after the command's ")" */
    for (p = strrchr(stat, ')'), i = 0; p != NULL && i < 20; i++) p = strchr(p + 1, ' ');
    if (p != NULL) start = strtoull(p + 1, NULL, 10);
    snprintf(owner, sizeof owner, "%016llx.%ld.%llu", range_fnv(range_fnv(0xcbf29ce484222325ULL, host), boot),
             (long)getpid(), start);
    if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
    host[sizeof host - 1] = '\0';
    host[strcspn(host, "|,")] = '\0';
    snprintf(who, sizeof who, "%s:%ld", host, (long)getpid());
    owner_pid = getpid();
}

static int range_same_description(int a, int b) {
    if (a == b) return 1;
    return a >= 0 && b >= 0 &&
           syscall(SYS_kcmp, (long)getpid(), (long)getpid(), (long)KCMP_FILE, (long)a, (long)b) == 0;
}

/* The entry of the file's process-owned locks, or (ofd) of the open file
 * description open on fd, made if need be, with a request counted in
 * it. */
static struct rfile *file_get(const struct stat *st, const char *name, int ofd, int fd) {
    struct rfile *f;
    pthread_once(&atfork_once, range_atfork_register);
    rlock();
    owner_make();
    for (f = rfiles; f != NULL; f = f->next)
        if (f->dev == st->st_dev && f->ino == st->st_ino && f->ofd == ofd && strcmp(f->name, name) == 0 &&
            (!ofd || range_same_description(fd, f->fd)))
            break;
    if (f != NULL && ofd) f->fd = fd;
    if (f == NULL && ofd) {
        /* an entry of a description that holds nothing now serves the new
         * one (entries are never freed: the renewal keeps pointers) */
        for (f = rfiles; f != NULL; f = f->next)
            if (f->ofd && !f->held && f->busy == 0 && f->nstale == 0) break;
        if (f != NULL) {
            f->dev = st->st_dev;
            f->ino = st->st_ino;
            f->fd = fd;
            f->dying = 0;
            snprintf(f->own, sizeof f->own, "%s.o%u", owner, ++ndesc);
            strcpy(f->name, name);
        }
    }
    if (f == NULL && (f = calloc(1, sizeof *f)) != NULL) {
        pthread_mutex_init(&f->fmu, NULL);
        f->dev = st->st_dev;
        f->ino = st->st_ino;
        f->ofd = ofd;
        f->fd = fd;
        if (ofd) snprintf(f->own, sizeof f->own, "%s.o%u", owner, ++ndesc);
        else snprintf(f->own, sizeof f->own, "%s", owner);
        strcpy(f->name, name);
        f->next = rfiles;
        rfiles = f;
        dlpl_nrange++;
    }
    if (f != NULL) {
        f->busy++;
        f->gen++;
    }
    runlock();
    return f;
}

static void fl_lock(struct rfile *f) {
    DLPL_REAL(mutex_lock)(&f->fmu);
}
static void fl_unlock(struct rfile *f) {
    DLPL_REAL(mutex_unlock)(&f->fmu);
}

static void file_put(struct rfile *f) {
    rlock();
    f->busy--;
    runlock();
}

static void num(char *buf, size_t cap, long long v) {
    snprintf(buf, cap, "%lld", v);
}

#define REQ_WAIT 1  /* the caller will wait if refused */
#define REQ_CACHE 2 /* a set that would keep the table's cache */

/* One request on the file's range table (flags REQ_*); once: one
 * attempt.  0 with *ans, or an errno value. */
static int req(const char *own, const char *name, const char *op, int type, long long s, long long e, int flags,
               const char *segs, int once, dlock__strs *ans) {
    char lease[16], ty[4], sb[24], eb[24];
    const char *args[10];
    if (dlpl_client == NULL) return ENOLCK;
    num(lease, sizeof lease, RANGE_LEASE_MS);
    num(ty, sizeof ty, type);
    num(sb, sizeof sb, s);
    num(eb, sizeof eb, e);
    args[0] = op;
    args[1] = own;
    args[2] = lease;
    args[3] = ty;
    args[4] = sb;
    args[5] = eb;
    args[6] = who;
    args[7] = flags & REQ_WAIT ? "1" : "0";
    args[8] = segs != NULL ? segs : "";
    args[9] = flags & REQ_CACHE ? "1" : "0";
    return dlock__range(dlpl_client, name, once, 10, args, ans);
}

/* Remembers an unlock that did not reach the server, to be sent before
 * the next request (or by the renewal); past RANGE_STALE of them, the
 * file's ranges are all dropped then.  fmu and rmu held. */
static void stale_add(struct rfile *f, long long s, long long e) {
    if (f->nstale < RANGE_STALE) {
        f->stale[f->nstale][0] = s;
        f->stale[f->nstale][1] = e;
        f->nstale++;
    } else {
        f->stale[0][0] = 0;
        f->stale[0][1] = RANGE_INF;
        f->nstale = 1;
    }
}

static char *kernel_segs(const struct rfile *f);

/* The owed cut of f's ranges on the server to the kernel's (fmu held),
 * sent only while no lock call but the caller's (mine: 1, or 0 for the
 * renewal) is under way on the file: another's may sit between the
 * server's grant and its kernel call.  0, or -1 when it is still owed
 * and the server did not take it. */
static int flush_trim(struct rfile *f, int mine) {
    dlock__strs ans;
    char *segs;
    int busy, rc;
    rlock();
    busy = f->busy;
    runlock();
    if (!f->trim || busy != mine) return 0;
    if ((segs = kernel_segs(f)) == NULL) return 0;
    rc = req(f->own, f->name, "trim", 0, 0, 0, 0, segs, 1, &ans);
    free(segs);
    if (rc != 0) return -1;
    dlock__strs_free(&ans);
    rlock();
    f->trim = 0;
    runlock();
    return 0;
}

/* Sends f's owed unlocks, oldest first, then its owed trim (fmu held;
 * mine: the lock calls under way that are the caller's): 0 when none is
 * left, -1 when the server did not take one. */
static int flush_stale(struct rfile *f, int mine) {
    for (;;) {
        long long s, e;
        dlock__strs ans;
        rlock();
        if (f->nstale == 0) {
            runlock();
            return flush_trim(f, mine);
        }
        s = f->stale[0][0];
        e = f->stale[0][1];
        runlock();
        if (req(f->own, f->name, "unl", 0, s, e, 0, NULL, 1, &ans) != 0) return -1;
        dlock__strs_free(&ans);
        rlock();
        memmove(&f->stale[0], &f->stale[1], (size_t)(f->nstale - 1) * sizeof f->stale[0]);
        f->nstale--;
        runlock();
    }
}

/* Removes s..e from the process's ranges on the server (one attempt: an
 * unlock never waits for an unreachable server; it is sent again before
 * the next request, or by the renewal).  fmu held. */
static void unlock_range(struct rfile *f, long long s, long long e) {
    dlock__strs ans;
    int rc = req(f->own, f->name, "unl", 0, s, e, 0, NULL, 1, &ans);
    rlock();
    if (rc != 0) stale_add(f, s, e);
    else if (ans.n >= 2 && strcmp(ans.v[1], "0") == 0 && f->nstale == 0 && !f->trim) f->held = 0;
    runlock();
    if (rc == 0) dlock__strs_free(&ans);
}

/* ------------------------------------------------------------ the cache */

/* A process alone on a file's table keeps its cache: its lock calls there
 * are the kernel's alone, with no round trip, and the server counts it as
 * one write lock over the whole file for everyone else.  An owner that
 * meets it is answered "ask again shortly" and the server leaves a word on
 * this owner's list; the watcher thread, blocked on that list, then hands
 * the server the ranges the kernel says the process holds (/proc/locks:
 * the truth of a POSIX lock) in place of the cache ("uncache"), and the
 * other owner's next request meets those alone.  A table where a cache
 * was asked for stays without one for 2 s (range_lua), so two processes
 * that take turns on a file pay the round trip per call, never a cache
 * handed back and forth per call. */

static long long range_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The record locks the kernel says this process holds on f's file, as
 * segments "START:END:TYPE,..." (malloc'd; NULL: out of memory or
 * /proc/locks unreadable). */
static char *kernel_segs(const struct rfile *f) {
    char line[256], me[24], *out = NULL;
    size_t len = 0;
    FILE *p, *m;
    if ((p = fopen("/proc/locks", "re")) == NULL) return NULL;
    if ((m = open_memstream(&out, &len)) == NULL) {
        fclose(p);
        return NULL;
    }
    snprintf(me, sizeof me, " %ld ", (long)getpid());
    while (fgets(line, sizeof line, p) != NULL) {
        unsigned maj, mnr;
        unsigned long i;
        long long a;
        char b[32];
        char *q = strstr(line, me);
        if (strstr(line, " POSIX ") == NULL || strstr(line, "->") != NULL || q == NULL) continue;
        if (sscanf(q + strlen(me), "%x:%x:%lu %lld %31s", &maj, &mnr, &i, &a, b) != 5 || maj != major(f->dev) ||
            mnr != minor(f->dev) || i != (unsigned long)f->ino)
            continue;
        fprintf(m, "%s%lld:%lld:%d", ftell(m) > 0 ? "," : "", a, strcmp(b, "EOF") == 0 ? RANGE_INF : atoll(b),
                strstr(line, " WRITE ") != NULL ? 2 : 1);
    }
    fclose(p);
    if (fclose(m) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* f's cache goes back to the server with the ranges the kernel says the
 * process holds (fmu held): 0, or an errno value (f's lock calls then go
 * to the server, and this is tried again first). */
static int uncache(struct rfile *f, int once) {
    dlock__strs ans;
    char *segs = kernel_segs(f);
    int rc;
    if (segs == NULL) return ENOMEM;
    rc = req(f->own, f->name, "uncache", 0, 0, 0, 0, segs, once, &ans);
    free(segs);
    if (rc != 0) {
        /* the server may have taken it all the same: the cache is not
         * used again until this goes through */
        rlock();
        f->claim_until = 0;
        runlock();
        return rc;
    }
    rlock();
    f->cached = 0;
    if (ans.n >= 1 && strcmp(ans.v[0], "1") == 0) f->held = 0; /* its record lapsed: the renewal said so */
    runlock();
    dlock__strs_free(&ans);
    return 0;
}

/* Gives f's cache back once no lock call of the process is under way on
 * the file: a call between the server's grant and its kernel call (the
 * grant that gave the cache) holds a range /proc/locks does not show yet;
 * one that comes later waits for fmu, then asks the server. */
static void cache_give(struct rfile *f) {
    for (;;) {
        int busy;
        fl_lock(f);
        rlock();
        busy = f->busy;
        runlock();
        if (busy == 0 || !f->cached) break;
        fl_unlock(f);
        {
            struct timespec ts = { 0, 200 * 1000L };
            nanosleep(&ts, NULL);
        }
    }
    if (f->cached) uncache(f, 1); /* (not given back: the asker leaves its word again) */
    fl_unlock(f);
}

/* The watcher of f's cache: waits for the word that another owner asks,
 * then gives the cache back; ends when f keeps no cache. */
static void *range_watch_main(void *arg) {
    struct rfile *f = arg;
    dlpl_guard++;
    for (;;) {
        int w;
        rlock();
        if (!f->cached || renew_stop) {
            f->watching = 0;
            runlock();
            break;
        }
        runlock();
        w = dlock__range_watch(dlpl_client, f->name, f->own, 1000);
        if (w == 1 || w == ENOTSUP) {
            if (w == ENOTSUP) cache_off = 1; /* nobody could tell a cache's owner: keep none */
            cache_give(f);
        } else if (w != 0) { /* the server unreachable: the cache runs out with its lease if it stays so */
            struct timespec ts = { 0, 100 * 1000000L };
            nanosleep(&ts, NULL);
        }
    }
    dlpl_guard--;
    return NULL;
}

/* The server gave f the cache in a request sent at sent (monotonic ns):
 * f keeps it, and its watcher runs. */
static void range_cache_take(struct rfile *f, long long sent) {
    pthread_t t;
    sigset_t all, old;
    rlock();
    f->cached = 1;
    f->claim_until = sent + (RANGE_LEASE_MS - CLAIM_MARGIN_MS) * 1000000LL;
    if (!f->watching) {
        f->watching = 1;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        if (pthread_create(&t, NULL, range_watch_main, f) == 0) pthread_detach(t);
        else f->watching = 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    runlock();
}

/* A lock call on a file whose cache this process keeps (valid by this
 * host's clock) is the kernel's alone: 1 with *rc its answer, or 0 when it
 * must go to the server.  F_SETLKW tries the kernel without waiting (a
 * process of this host not under the library holds the range: the call
 * gives the cache back and waits as any other). */
static int cached_call(struct rfile *f, int fd, struct flock *fl, int wait, int (*kcall)(void *), void *karg,
                       int *rc) {
    int done = 0, e = 0;
    fl_lock(f);
    if (f->cached && range_mono_ns() < f->claim_until) {
        if (!wait || fl->l_type == F_UNLCK) {
            *rc = kcall(karg);
            e = errno;
            done = 1;
        } else if ((*rc = (int)syscall(SYS_fcntl, fd, F_SETLK, fl)) == 0) {
            done = 1;
        } else {
            e = errno;
            done = e != EAGAIN && e != EACCES;
        }
    }
    fl_unlock(f);
    errno = e;
    return done;
}

/* ---------------------------------------------------------- the renewal */

static void lost(const char *name) {
    if (dlpl_conf.on_lost == DLPL_ON_LOST_ABORT) {
        dlpl_msg("'%s': the record locks of this process were lost (%s); DLOCK_ON_LOST=abort: SIGABRT to "
                 "this program and the processes it started", name, dlpl_lost_why());
        dlpl_stop_tree(getpid(), 0);
        abort();
    }
    dlpl_msg("'%s': the record locks of this process were lost (%s): they no longer exclude other hosts "
             "(DLOCK_ON_LOST=warn)", name, dlpl_lost_why());
}

/* Does the description open on fd (a file dev:ino) hold an OFD lock?
 * (/proc/self/fdinfo) */
static int ofd_has(dev_t dev, ino_t ino, int fd) {
    char buf[4096];
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_dev != dev || st.st_ino != ino) return 0;
    if (dlpl_fdinfo(fd, buf, sizeof buf) != 0) return 1;
    return strstr(buf, " OFDLCK ") != NULL;
}

/* Does the kernel say this process (ofd: the description open on fd)
 * holds a record lock on the file dev:ino?  (/proc/locks; 1 when it
 * cannot be read) */
static int kernel_has(dev_t dev, ino_t ino, int ofd, int fd) {
    char line[256], me[24];
    FILE *p;
    int has = 0;
    if (ofd) return ofd_has(dev, ino, fd);
    if ((p = fopen("/proc/locks", "re")) == NULL) return 1;
    snprintf(me, sizeof me, " %ld ", (long)getpid());
    while (!has && fgets(line, sizeof line, p) != NULL) {
        unsigned maj, mnr;
        unsigned long i;
        char *q = strstr(line, me);
        if (strstr(line, " POSIX ") == NULL || strstr(line, "->") != NULL || q == NULL) continue;
        if (sscanf(q + strlen(me), "%x:%x:%lu", &maj, &mnr, &i) == 3 && maj == major(dev) && mnr == minor(dev) &&
            i == (unsigned long)ino)
            has = 1;
    }
    fclose(p);
    return has;
}

/* One pass over the files: unlocks owed, ranges the kernel no longer
 * has, leases.  A file whose requests are under way (fmu taken) waits
 * for the next pass. */
static void renew_pass(void) {
    struct rfile *f;
    for (;;) {
        int gone;
        unsigned gen;
        long long sent;
        dlock__strs ans;
        rlock();
        for (f = rfiles; f != NULL && !(f->held && f->busy == 0 && !f->visited); f = f->next) {}
        if (f == NULL) break;
        f->visited = 1;
        gen = f->gen;
        runlock();
        if (DLPL_REAL(mutex_trylock)(&f->fmu) != 0) continue;
        if (flush_stale(f, 0) != 0) {
            fl_unlock(f);
            continue;
        }
        /* (a file whose cache this process keeps is renewed, cache and
         * all: its lock calls do not tell the server) */
        gone = !f->cached && !kernel_has(f->dev, f->ino, f->ofd, f->fd);
        rlock();
        gone = gone && f->gen == gen && f->busy == 0;
        if (gone) f->held = 0;
        runlock();
        sent = range_mono_ns();
        if (gone) {
            if (req(f->own, f->name, "unl", 0, 0, RANGE_INF, 0, NULL, 1, &ans) == 0) dlock__strs_free(&ans);
        } else if (req(f->own, f->name, "renew", 0, 0, 0, 0, NULL, 1, &ans) == 0) {
            rlock();
            gone = ans.n >= 1 && strcmp(ans.v[0], "1") == 0 && f->held && f->gen == gen && f->busy == 0;
            if (ans.n >= 1 && strcmp(ans.v[0], "1") == 0) f->cached = 0; /* the record, cache and all, lapsed */
            else if (f->cached) f->claim_until = sent + (RANGE_LEASE_MS - CLAIM_MARGIN_MS) * 1000000LL;
            if (gone || (ans.n >= 2 && strcmp(ans.v[1], "0") == 0 && f->gen == gen && !f->cached)) f->held = 0;
            runlock();
            dlock__strs_free(&ans);
            if (gone) lost(f->name);
        }
        fl_unlock(f);
    }
    for (f = rfiles; f != NULL; f = f->next) f->visited = 0;
    runlock();
}

static void *range_renew_main(void *arg) {
    (void)arg;
    dlpl_guard++;
    rlock();
    while (!renew_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += RANGE_RENEW_MS / 1000;
        ts.tv_nsec += (long)(RANGE_RENEW_MS % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        DLPL_REAL(cond_timedwait)(&rcv, &rmu, &ts);
        if (renew_stop) break;
        runlock();
        renew_pass();
        rlock();
    }
    runlock();
    return NULL;
}

/* At exit the process's ranges go (the kernel drops its record locks
 * then too). */
static void range_at_exit(void) {
    struct rfile *f;
    dlock__strs ans;
    if (owner_pid != getpid()) return;
    dlpl_guard++;
    rlock();
    renew_stop = 1;
    pthread_cond_broadcast(&rcv);
    for (f = rfiles; f != NULL; f = f->next) {
        if (!f->held) continue;
        f->held = f->cached = 0;
        /* its ranges and its cache */
        if (req(f->own, f->name, "uncache", 0, 0, 0, 0, "", 1, &ans) == 0) dlock__strs_free(&ans);
    }
    runlock();
    dlpl_guard--;
}

/* Marks f held and starts the renewal with the first such file. */
static void held(struct rfile *f) {
    pthread_t t;
    sigset_t all, old;
    rlock();
    f->held = 1;
    if (!renew_started) {
        renew_started = 1;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        if (pthread_create(&t, NULL, range_renew_main, NULL) == 0) pthread_detach(t);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        atexit(range_at_exit);
    }
    runlock();
}

/* ------------------------------------------------------------ exec */

/* A descriptor of the file dev:ino, if its path is mapped: its lock
 * name (with "#fcntl") into name, the descriptor's fstat into st; the
 * descriptor, or -1. */
static int mapped_fd(dev_t dev, ino_t ino, char *name, struct stat *st) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int found = -1;
    if (d == NULL) return -1;
    while (found < 0 && (de = readdir(d)) != NULL) {
        char link[64], path[PATH_MAX + 16], base[DLOCK_NAME_MAX + 1];
        int fd = atoi(de->d_name);
        ssize_t n;
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd == dirfd(d)) continue;
        if (fstat(fd, st) != 0 || st->st_dev != dev || st->st_ino != ino) continue;
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        if ((n = readlink(link, path, sizeof path - 1)) <= 0 || n >= (ssize_t)sizeof path - 1) continue;
        path[n] = '\0';
        if (n > 10 && strcmp(path + n - 10, " (deleted)") == 0) path[n - 10] = '\0';
        if (path[0] != '/' || !dlpl_map_path(path, base, sizeof base)) continue;
        if ((size_t)snprintf(name, DLOCK_NAME_MAX + 1, "%s#fcntl", base) > DLOCK_NAME_MAX) continue;
        found = fd;
    }
    closedir(d);
    return found;
}

/* At start-up: the record locks that this process holds already -- its
 * program was started by exec from one that held them, and the kernel
 * kept them -- are this process's on the server too (the owner id does
 * not change across exec), so their ranges are renewed from now on,
 * before their lease runs out, and dropped with them. */
void dlpl_range_adopt(void) {
    char line[256], me[24], name[DLOCK_NAME_MAX + 1];
    FILE *p;
    if (dlpl_client == NULL || dlpl_conf.bad || (p = fopen("/proc/locks", "re")) == NULL) return;
    snprintf(me, sizeof me, " %ld ", (long)getpid());
    while (fgets(line, sizeof line, p) != NULL) {
        unsigned maj, mnr;
        unsigned long ino;
        struct stat st;
        struct rfile *f;
        char *q = strstr(line, me);
        if (strstr(line, " POSIX ") == NULL || strstr(line, "->") != NULL || q == NULL) continue;
        if (sscanf(q + strlen(me), "%x:%x:%lu", &maj, &mnr, &ino) != 3) continue;
        if (mapped_fd(makedev(maj, mnr), (ino_t)ino, name, &st) < 0) continue;
        if ((f = file_get(&st, name, 0, -1)) == NULL) continue;
        held(f);
        /* the program before exec may have kept the table's cache: the
         * server gets the ranges the kernel kept instead */
        f->cached = 1;
        fl_lock(f);
        (void)uncache(f, 0); /* (if it fails, it is sent again before the next request) */
        fl_unlock(f);
        file_put(f);
    }
    fclose(p);
}

/* ------------------------------------------------------------ requests */

/* fl's range as absolute offsets s..e (inclusive; RANGE_INF: to the end
 * of the file, however long).  0, or -1 when the kernel must answer (a
 * bad whence or a range before the start). */
static int range_of(int fd, const struct flock *fl, long long *s, long long *e) {
    long long base, start;
    struct stat st;
    switch (fl->l_whence) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = lseek(fd, 0, SEEK_CUR); break;
    case SEEK_END: base = fstat(fd, &st) == 0 ? (long long)st.st_size : -1; break;
    default: return -1;
    }
    if (base < 0) return -1;
    start = base + fl->l_start;
    if (fl->l_len > 0) {
        *s = start;
        *e = fl->l_len - 1 > RANGE_INF - start ? RANGE_INF : start + fl->l_len - 1;
    } else if (fl->l_len == 0) {
        *s = start;
        *e = RANGE_INF;
    } else {
        *s = start + fl->l_len;
        *e = start - 1;
    }
    if (*s < 0 || *e < *s) return -1;
    if (*s > RANGE_INF) *s = RANGE_INF;
    if (*e > RANGE_INF) *e = RANGE_INF;
    return 0;
}

/* The server could not be asked (rc): DLOCK_ON_ERROR decides; 0 (the
 * kernel lock alone) or the errno to fail with. */
static int fallback(const char *name, int rc) {
    dlpl_server_down(name, rc);
    return dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED ? ENOLCK : 0;
}

/* Sleeps ms with the caller's signal mask: 1 when a signal handler ran
 * that would not have restarted a system call. */
static int nap(int ms) {
    struct timespec ts = { 0, (long)ms * 1000000L };
    sigset_t all, old;
    int n, e;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    n = ppoll(NULL, 0, &ts, &old);
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return n < 0 && e == EINTR && !dlpl_restartable(&old);
}

/* The server granted (ans: the process's former segments in the range):
 * the kernel's part; if it fails, the former segments go back. */
static int granted(struct rfile *f, long long s, long long e, const dlock__strs *ans, int (*kcall)(void *),
                   void *karg) {
    int kr = kcall(karg), ke = errno;
    dlock__strs r;
    if (kr != 0) {
        fl_lock(f);
        if (req(f->own, f->name, "restore", 0, s, e, 0, ans->n >= 2 ? ans->v[1] : "", 1, &r) == 0) {
            dlock__strs_free(&r);
        } else {
            rlock();
            stale_add(f, s, e); /* not put back: at least not kept */
            runlock();
        }
        fl_unlock(f);
    }
    errno = ke;
    return kr;
}

/* ------------------------------------------------- deadlock across files */

#define EDGE_TTL_MS 1000
#define EDGE_MAX 64
#define CYCLE_HOLD_NS (150LL * 1000 * 1000)

/* The wait-for graph through the server's edges (dlock__range_edge): each
 * waiting owner's edge is "SINCE|BLOCKERS", SINCE the wall-clock ms its
 * wait began, BLOCKERS the owners that hold what it wants. */
struct node {
    char id[80];
    int parent;          /* index of the node that waits for it; -1: one of ours */
    long long since;     /* its wait's start, if it waits */
};

/* Adds the owners of list (comma-separated) to g, as waited for by
 * parent. */
static void add_ids(struct node *g, int *n, const char *list, int parent) {
    const char *p = list;
    while (*p != '\0' && *n < EDGE_MAX) {
        size_t k = strcspn(p, ",");
        if (k > 0 && k < sizeof g[0].id) {
            memcpy(g[*n].id, p, k);
            g[*n].id[k] = '\0';
            g[*n].parent = parent;
            g[*n].since = 0;
            (*n)++;
        }
        p += k + (p[k] != '\0');
    }
}

/* Does a chain of wait edges from the owners in blockers come back to
 * this process (whose wait began at mine)?  1 only if this wait is the
 * one that closed the cycle -- it began after every other wait on the
 * cycle (ties: the larger owner id) -- as the kernel fails the request
 * that would close it. */
static int cycle(const char *me, const char *blockers, long long mine) {
    struct node g[EDGE_MAX];
    int n = 0, i, j;
    add_ids(g, &n, blockers, -1);
    for (i = 0; i < n; i++) {
        dlock__strs ans;
        char *bar;
        if (strcmp(g[i].id, me) == 0) {
            for (j = g[i].parent; j >= 0; j = g[j].parent)
                if (g[j].since > mine || (g[j].since == mine && strcmp(g[j].id, me) > 0)) return 0;
            return 1;
        }
        for (j = 0; j < i && strcmp(g[j].id, g[i].id) != 0; j++) {}
        if (j < i || dlock__range_edge(dlpl_client, "eget", g[i].id, "", 0, &ans) != 0) continue;
        if (ans.n == 1 && (bar = strchr(ans.v[0], '|')) != NULL) {
            g[i].since = atoll(ans.v[0]);
            add_ids(g, &n, bar + 1, i);
        }
        dlock__strs_free(&ans);
    }
    return 0;
}

/* A blocked F_SETLKW (blockers: who holds what it wants; its wait began
 * at mine, wall-clock ms): its wait edges go on the server, and a cycle
 * through them -- through other files' tables, which the script cannot
 * see -- that this wait closed, seen for CYCLE_HOLD_NS without a break,
 * is a deadlock (an edge may be a retry old: a waiter whose blocker has
 * just let go asks again within 50 ms and drops it).  *seen: when the
 * cycle was first seen (0: not seen).  1: EDEADLK. */
static int deadlocked(const char *me, const char *blockers, long long mine, long long *seen) {
    char rec[EDGE_MAX * 80 + 32];
    dlock__strs ans;
    struct timespec ts;
    long long now;
    snprintf(rec, sizeof rec, "%lld|%s", mine, blockers);
    if (dlock__range_edge(dlpl_client, "eset", me, rec, EDGE_TTL_MS, &ans) != 0) return 0;
    dlock__strs_free(&ans);
    if (!cycle(me, blockers, mine)) {
        *seen = 0;
        return 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (*seen == 0) *seen = now;
    return now - *seen >= CYCLE_HOLD_NS;
}

static void edge_drop(const char *me) {
    dlock__strs ans;
    if (dlock__range_edge(dlpl_client, "edel", me, "", 0, &ans) == 0) dlock__strs_free(&ans);
}

/* ------------------------------------------------------------ set, get */

/* The answer to a set: 0 granted, EAGAIN (blockers set to the
 * conflicting owners; *cached 1 when it is another owner's cache, which
 * is being given back) or EDEADLK. */
static int answer(const dlock__strs *ans, char *blockers, size_t cap, int *cached) {
    *cached = ans->n >= 2 && strcmp(ans->v[0], "3") == 0;
    if (ans->n >= 1 && strcmp(ans->v[0], "0") == 0) return 0;
    if (ans->n >= 1 && strcmp(ans->v[0], "2") == 0) return EDEADLK;
    snprintf(blockers, cap, "%s", *cached ? ans->v[1] : ans->n >= 6 ? ans->v[5] : "");
    return EAGAIN;
}

/* One set on the server (fmu taken for it): a cache this process keeps
 * goes back first, then its owed unlocks; a grant marks f held, and
 * keeps the table's cache if the server gives it.  0 with *ans, or an
 * errno value. */
static int range_ask(struct rfile *f, int type, long long s, long long e, int wait, dlock__strs *ans) {
    int rc, flags = wait ? REQ_WAIT : 0, cached;
    long long sent;
    char none[1];
    fl_lock(f);
    if ((f->cached && uncache(f, !wait) != 0) || flush_stale(f, 1) != 0) {
        fl_unlock(f);
        return ENOLCK;
    }
    /* (never with a trim owed: the trim would end the cache) */
    if (!f->ofd && !cache_off && !f->trim) flags |= REQ_CACHE;
    sent = range_mono_ns();
    rc = req(f->own, f->name, "set", type, s, e, flags, NULL, !wait, ans);
    if (rc != 0 && !f->ofd) {
        /* no answer: the server may have granted it all the same (an
         * answer later than the one-attempt bound, on a loaded host); a
         * range kept there that the process does not know of would refuse
         * every other owner until its lease ran out */
        rlock();
        f->trim = 1;
        runlock();
        held(f);
    }
    if (rc == 0 && answer(ans, none, sizeof none, &cached) == 0) {
        held(f);
        if (ans->n >= 3 && strcmp(ans->v[2], "c") == 0) range_cache_take(f, sent);
    }
    fl_unlock(f);
    return rc;
}

/* F_SETLK / F_SETLKW of a read or write lock, range s..e. */
static int setlk(struct rfile *f, int type, long long s, long long e, int wait, int (*kcall)(void *), void *karg) {
    int ms = 1, rc, err, edged = 0, cached;
    long long seen = 0, mine = 0, t0 = range_mono_ns();
    char blockers[EDGE_MAX * 80];
    dlock__strs ans;
    for (;; ms = ms * 2 > 50 ? 50 : ms * 2) {
        if ((rc = range_ask(f, type, s, e, wait, &ans)) != 0) {
            if (edged) edge_drop(f->own);
            if ((err = fallback(f->name, rc)) != 0) {
                errno = err;
                return -1;
            }
            return kcall(karg);
        }
        dlpl_server_up();
        err = answer(&ans, blockers, sizeof blockers, &cached);
        if (err == 0) {
            if (edged) edge_drop(f->own);
            rc = granted(f, s, e, &ans, kcall, karg);
            dlock__strs_free(&ans);
            return rc;
        }
        dlock__strs_free(&ans);
        if (wait && err == EAGAIN) {
            if (!edged) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                mine = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
            }
            edged = 1;
            if (deadlocked(f->own, blockers, mine, &seen)) err = EDEADLK;
        }
        /* F_SETLK asks again while another owner's cache is being given
         * back (it takes a round trip or two), as it would find the range
         * free in the kernel */
        if (err == EDEADLK || (!wait && !(cached && range_mono_ns() - t0 < CLAIM_ASK_MS * 1000000LL))) break;
        if (nap(cached && ms > 4 ? 4 : ms) && wait) { /* (F_SETLK never fails with EINTR) */
            err = EINTR;
            break;
        }
    }
    if (edged) edge_drop(f->own);
    if (wait && err != 0 && req(f->own, f->name, "nowait", 0, 0, 0, 0, NULL, 1, &ans) == 0) dlock__strs_free(&ans);
    errno = err;
    return -1;
}

int dlpl_range_setlk(int fd, const struct stat *st, const char *name, struct flock *fl, int wait, int ofd,
                     int (*kcall)(void *), void *karg) {
    long long s, e;
    struct rfile *f;
    int rc, err;
    if (range_of(fd, fl, &s, &e) != 0 || (f = file_get(st, name, ofd, fd)) == NULL) return kcall(karg);
    if (!ofd && cached_call(f, fd, fl, wait, kcall, karg, &rc)) {
        err = errno;
        file_put(f);
        errno = err;
        return rc;
    }
    if (fl->l_type == F_UNLCK) {
        rc = kcall(karg);
        err = errno;
        if (rc == 0 && f->held) {
            fl_lock(f);
            /* a cache kept past its time goes back as the kernel's ranges,
             * this unlock's included */
            if (!f->cached || uncache(f, 1) != 0) unlock_range(f, s, e);
            (void)flush_trim(f, 1);
            fl_unlock(f);
        }
        file_put(f);
        errno = err;
        return rc;
    }
    rc = setlk(f, fl->l_type == F_WRLCK ? 2 : 1, s, e, wait, kcall, karg);
    err = errno;
    file_put(f);
    errno = err;
    return rc;
}

/* F_GETLK's question to the server: 0 with *ans, EALREADY when this
 * process keeps the table's cache (no other owner can hold a range), or
 * an errno value.  Another owner's cache is waited for (CLAIM_ASK_MS) as
 * it is given back. */
static int get_remote(struct rfile *f, int type, long long s, long long e, dlock__strs *ans) {
    long long t0 = range_mono_ns();
    int rc, ms = 1;
    for (;; ms = ms * 2 > 4 ? 4 : ms * 2) {
        fl_lock(f);
        if (f->cached && range_mono_ns() < f->claim_until) {
            fl_unlock(f);
            return EALREADY;
        }
        rc = f->cached && uncache(f, 0) != 0 ? ENOLCK : req(f->own, f->name, "get", type, s, e, 0, NULL, 0, ans);
        fl_unlock(f);
        if (rc != 0 || ans->n < 1 || strcmp(ans->v[0], "3") != 0 || range_mono_ns() - t0 >= CLAIM_ASK_MS * 1000000LL)
            return rc;
        dlock__strs_free(ans);
        (void)nap(ms); /* F_GETLK never waits: a signal does not end it */
    }
}

/* F_GETLK: the kernel's answer for this host; if it sees no conflict,
 * the server's, for the other hosts (l_pid -1: the holder may be on
 * another host).  The asker's own ranges never conflict: the process's
 * for F_GETLK, the description's for F_OFD_GETLK. */
int dlpl_range_getlk(int fd, const struct stat *st, const char *name, struct flock *fl, int ofd,
                     int (*kcall)(void *), void *karg) {
    long long s, e;
    short asked = fl->l_type;
    struct rfile *f;
    dlock__strs ans;
    int rc;
    if (range_of(fd, fl, &s, &e) != 0 || (f = file_get(st, name, ofd, fd)) == NULL) return kcall(karg);
    if (kcall(karg) != 0 || fl->l_type != F_UNLCK) {
        file_put(f);
        return fl->l_type != F_UNLCK ? 0 : -1;
    }
    rc = get_remote(f, asked == F_WRLCK ? 2 : 1, s, e, &ans);
    file_put(f);
    if (rc == EALREADY) return 0; /* this process keeps the cache: no other owner holds a range */
    if (rc != 0) {
        if ((rc = fallback(name, rc)) != 0) {
            errno = rc;
            return -1;
        }
        return 0;
    }
    dlpl_server_up();
    if (ans.n >= 2 && strcmp(ans.v[0], "3") == 0) { /* a cache not given back in time: it may hold anything */
        fl->l_type = F_WRLCK;
        fl->l_whence = SEEK_SET;
        fl->l_start = 0;
        fl->l_len = 0;
        fl->l_pid = -1;
    } else if (ans.n >= 5 && strcmp(ans.v[0], "1") == 0) {
        long long cs = atoll(ans.v[2]), ce = atoll(ans.v[3]);
        fl->l_type = strcmp(ans.v[1], "2") == 0 ? F_WRLCK : F_RDLCK;
        fl->l_whence = SEEK_SET;
        fl->l_start = (off_t)cs;
        fl->l_len = ce >= RANGE_INF ? 0 : (off_t)(ce - cs + 1);
        fl->l_pid = -1;
    }
    dlock__strs_free(&ans);
    return 0;
}

/* Another descriptor of this process on the description open on fd, or
 * -1 (/proc/self/fd). */
static int other_descriptor(int fd) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int found = -1;
    if (d == NULL) return -1;
    while (found < 0 && (de = readdir(d)) != NULL) {
        int n = atoi(de->d_name);
        if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && n != fd && n != dirfd(d) && range_same_description(n, fd))
            found = n;
    }
    closedir(d);
    return found;
}

/* Before close(fd) of the file st: an OFD description whose last
 * descriptor (in this process) this is loses its locks with it. */
void dlpl_range_closing(int fd, const struct stat *st) {
    struct rfile *f;
    int other = -2;
    rlock();
    for (f = rfiles; f != NULL; f = f->next) {
        if (!f->ofd || !f->held || f->dev != st->st_dev || f->ino != st->st_ino || !range_same_description(fd, f->fd))
            continue;
        if (other == -2) {
            runlock(); /* (readdir and kcmp: no lock needed for them) */
            other = other_descriptor(fd);
            rlock();
        }
        if (other >= 0) f->fd = other;
        else f->dying = 1;
    }
    runlock();
}

/* After close(): the kernel dropped every record lock of the process on
 * the file (any descriptor of it closes them all), and the OFD locks of a
 * description whose last descriptor it was; so does the server. */
void dlpl_range_close(const struct stat *st) {
    struct rfile *f;
    char name[DLOCK_NAME_MAX + 1], own[sizeof f->own];
    dlock__strs ans;
    for (;;) {
        rlock();
        for (f = rfiles; f != NULL && !(f->held && f->dev == st->st_dev && f->ino == st->st_ino &&
                                         (!f->ofd || f->dying));
             f = f->next) {}
        if (f != NULL) {
            f->held = f->dying = 0;
            if (f->ofd) f->fd = -1;
            f->gen++;
            strcpy(name, f->name);
            strcpy(own, f->own);
        }
        runlock();
        if (f == NULL) return;
        fl_lock(f);
        /* every range, and the table's cache: the kernel holds nothing of
         * the process's on the file now */
        if (req(own, name, "uncache", 0, 0, 0, 0, "", 1, &ans) == 0) {
            dlock__strs_free(&ans);
            rlock();
            f->cached = 0;
            runlock();
            fl_unlock(f);
        } else {
            rlock();
            f->held = 1;
            stale_add(f, 0, RANGE_INF);
            runlock();
            fl_unlock(f);
            return;
        }
    }
}
