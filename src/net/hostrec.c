/* hostrec.c -- the host-wide outage record: what one process found of a
 * server (unreachable since when, until when, the next probe), kept on the
 * local file system, so that the user's other processes on this host act
 * on it at once instead of each waiting the unreachable bound again.
 *
 * The record is one small file per server URL and local user, in a
 * directory of the user's own: $XDG_RUNTIME_DIR/dlock, else
 * /tmp/dlock-<uid>.  Its name is a hash of the redacted URL (without its
 * query) and the uid: never a password.  The directory must be the user's
 * and 0700, the file the user's, 0600 and a regular file with one link,
 * both opened without following a symbolic link and checked with fstat;
 * anything else is no record.  Times are CLOCK_MONOTONIC, one clock for
 * every process of the host.
 *
 * The record is advisory: a missing, stale, corrupt or foreign record
 * says nothing, and the process waits as it would without one.  It never
 * makes a lock granted that the server would refuse: all it can do is
 * make a call fail (ENOLCK) at once, as the process's own circuit breaker
 * does, while another process found the server unreachable.
 *
 * No file locks but the flock system call itself (the preload interposes
 * flock and fcntl): a writer takes it without waiting, around a read,
 * change and pwrite of the whole record; a reader takes nothing and reads
 * again when the checksum shows a write in progress.  The probe's claim
 * is such a write, so the host makes one probe a second.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "net/net.h"

#define HR_MAGIC 0x31524844u /* "DHR1" */
#define HR_DOWN 1u           /* found unreachable at since; fail at once until `until` */
#define HR_UP 2u             /* answered at since */
#define HR_TOLD 3u           /* an outage told of at since, not (yet) recorded: its notices */
#define HR_PROBE_MS 1000     /* one probe a second for the whole host */
#define HR_TRIP_MS 1000      /* refused this long within one request: an outage (dlock__hostrec_refused) */
#define HR_PATH_MAX sizeof(((dlock__node *)0)->host_rec)
#define HR_READS 4           /* reads of a record being written before it counts as corrupt */

struct hr_rec {
    uint32_t magic;
    uint32_t state; /* HR_DOWN, HR_UP, HR_TOLD */
    int64_t since;  /* DOWN: when it was found unreachable; UP: when it answered */
    int64_t until;  /* DOWN: the end of the back-off period */
    int64_t probe;  /* DOWN: no probe before this */
    uint32_t told;  /* DLOCK__HOST_TOLD_*: the notices given for this outage */
    uint32_t pad;
    uint64_t sum; /* FNV-1a of the bytes before it */
};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n-- > 0) h = (h ^ *b++) * 1099511628211ull;
    return h;
}

static uint64_t rec_sum(const struct hr_rec *r) {
    return fnv(1469598103934665603ull, r, offsetof(struct hr_rec, sum));
}

/* The directory of the user's records. */
static int rec_dir(char *out, size_t cap) {
    const char *x = secure_getenv("XDG_RUNTIME_DIR");
    int n = x != NULL && x[0] == '/' ? snprintf(out, cap, "%s/dlock", x)
                                     : snprintf(out, cap, "/tmp/dlock-%u", (unsigned)geteuid());
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* The record's path of n's server into out (cap bytes; "" when there is
 * none), whatever n's breaker configuration. */
static void rec_path(const dlock__node *n, char *out, size_t cap) {
    char dir[sizeof n->host_rec];
    const char *url = n->conf.redacted_url, *q;
    unsigned uid = (unsigned)geteuid();
    uint64_t h;
    int len;
    out[0] = '\0';
    if (n->member || url == NULL || rec_dir(dir, sizeof dir) != 0) return;
    q = strchr(url, '?');
    h = fnv(1469598103934665603ull, url, q != NULL ? (size_t)(q - url) : strlen(url));
    h = fnv(h, &uid, sizeof uid);
    len = snprintf(out, cap, "%s/outage-%016llx", dir, (unsigned long long)h);
    if (len < 0 || (size_t)len >= cap) out[0] = '\0';
}

void dlock__hostrec_init(dlock__node *n) {
    n->host_rec[0] = '\0';
    if (!n->conf.host_breaker || n->conf.breaker_ms == 0) return;
    rec_path(n, n->host_rec, sizeof n->host_rec);
}

/* The user's own, and nobody else may write it. */
static int owned(const struct stat *st, mode_t type) {
    return (st->st_mode & S_IFMT) == type && st->st_uid == geteuid() && (st->st_mode & 077) == 0;
}

/* Opens n's record (making it, and its directory, when create): the
 * descriptor, or -1 when there is none or it is not safe to use. */
static int rec_open_at(const char *path, int create) {
    char dir[HR_PATH_MAX];
    const char *base = strrchr(path, '/');
    struct stat st;
    int dfd, fd;
    if (path[0] == '\0' || base == NULL) return -1;
    snprintf(dir, sizeof dir, "%.*s", (int)(base - path), path);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && errno == ENOENT && create && mkdir(dir, 0700) == 0)
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return -1;
    if (fstat(dfd, &st) != 0 || !owned(&st, S_IFDIR)) {
        close(dfd);
        return -1;
    }
    fd = openat(dfd, base + 1, O_RDWR | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
    close(dfd);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || !owned(&st, S_IFREG) || st.st_nlink != 1) {
        close(fd);
        return -1;
    }
    return fd;
}

static int rec_open(dlock__node *n, int create) {
    return rec_open_at(n->host_rec, create);
}

/* Reads the record: 1 a sound one in *r, 0 none (empty), -1 corrupt.  A
 * record read while another process writes it fails its checksum: read
 * again. */
static int rec_read(int fd, struct hr_rec *r, dlock__mono now) {
    int i;
    for (i = 0; i < HR_READS; i++) {
        ssize_t got = pread(fd, r, sizeof *r, 0);
        if (got == 0) return 0;
        if (got == (ssize_t)sizeof *r && r->magic == HR_MAGIC && r->sum == rec_sum(r)) break;
    }
    if (i == HR_READS) return -1;
    /* Sound, but from another boot or clock (times ahead of ours, a
     * period longer than any breaker's): not ours to trust. */
    if ((r->state != HR_DOWN && r->state != HR_UP && r->state != HR_TOLD) || r->since > now + DLOCK__MS * HR_PROBE_MS ||
        (r->state == HR_DOWN && (r->until < r->since || r->until - r->since > (dlock__mono)86400000 * DLOCK__MS ||
                                 r->probe > now + 2 * DLOCK__MS * HR_PROBE_MS)))
        return -1;
    return 1;
}

static int rec_write(int fd, struct hr_rec *r) {
    r->magic = HR_MAGIC;
    r->pad = 0;
    r->sum = rec_sum(r);
    return pwrite(fd, r, sizeof *r, 0) == (ssize_t)sizeof *r ? 0 : -1;
}

/* The write lock, never waited for: the real system call, not the
 * preload's flock. */
static int rec_lock(int fd) {
    return syscall(SYS_flock, fd, LOCK_EX | LOCK_NB) == 0 ? 0 : -1;
}

/* A current outage: found unreachable, its period not over. */
static int rec_down(const struct hr_rec *r, dlock__mono now) {
    return r->state == HR_DOWN && now < r->until;
}

/* Mirrors the host's outage into n's own breaker (n->mu held), so that
 * what asks it (dlock__breaker_open, the pipelined unlock) sees it too. */
static void mirror(dlock__node *n, const struct hr_rec *r, dlock__mono probe) {
    if (n->breaker_until == 0)
        dlock__debug("%s: circuit breaker open: a process of this host found the server unreachable "
                     "(host record %s)", n->conf.redacted_url, n->host_rec);
    n->breaker_since = r->since;
    n->breaker_until = r->until;
    n->breaker_probe = probe;
}

/* Claims the host's probe if it is due: 1 if this process makes it. */
static int claim_probe(int fd, struct hr_rec *r, dlock__mono now) {
    int mine = 0;
    if (r->probe > now || rec_lock(fd) != 0) return 0;
    if (rec_read(fd, r, now) == 1 && rec_down(r, now) && r->probe <= now) {
        r->probe = now + (dlock__mono)HR_PROBE_MS * DLOCK__MS;
        mine = rec_write(fd, r) == 0;
    }
    syscall(SYS_flock, fd, LOCK_UN);
    return mine;
}

int dlock__hostrec_gate(dlock__node *n, int *probe) {
    struct hr_rec r;
    dlock__mono now = dlock__now();
    int fd = rec_open(n, 0), rc = DLOCK__HOST_NO_SAY;
    if (fd < 0) return rc;
    if (rec_read(fd, &r, now) != 1) {
        close(fd);
        return rc;
    }
    if (r.state == HR_UP) {
        if ((r.told & DLOCK__HOST_TOLD_DOWNS) != 0 && (r.told & DLOCK__HOST_TOLD_UP) == 0)
            __atomic_store_n(&n->host_back, 1, __ATOMIC_RELAXED);
        if (n->breaker_until != 0 && r.since >= n->breaker_since) {
            dlock__debug("%s: circuit breaker closed: a process of this host found the server answering",
                         n->conf.redacted_url);
            n->breaker_until = 0;
        }
    } else if (rec_down(&r, now)) {
        if (claim_probe(fd, &r, now)) {
            mirror(n, &r, r.probe);
            *probe = 1;
            rc = 0;
        } else {
            mirror(n, &r, r.probe);
            rc = dlock__seterr(ENOLCK, "%s: not asked: unreachable from this host for %lld ms (a process here "
                               "found it so); it is asked again within %lld ms (host-wide circuit breaker, "
                               "host_breaker=1)", n->conf.redacted_url, (long long)((now - r.since) / DLOCK__MS),
                               (long long)((r.probe > now ? r.probe - now : 0) / DLOCK__MS + 1));
        }
    }
    close(fd);
    return rc;
}

/* A notice given within the breaker's period, before any process
 * recorded the outage (a program that gave up waiting first). */
static int told_lately(const dlock__node *n, const struct hr_rec *r, dlock__mono now) {
    return r->state == HR_TOLD && now - r->since < (dlock__mono)n->conf.breaker_ms * DLOCK__MS;
}

void dlock__hostrec_down(dlock__node *n, dlock__mono since) {
    struct hr_rec r;
    dlock__mono now = dlock__now();
    int fd = rec_open(n, 1);
    if (fd < 0) return;
    if (rec_lock(fd) == 0) {
        int st = rec_read(fd, &r, now);
        if (st != 1 || !rec_down(&r, now)) {
            /* the notices of this outage given before it was recorded */
            uint32_t told = st == 1 && told_lately(n, &r, now) ? r.told : 0;
            memset(&r, 0, sizeof r);
            r.told = told;
            r.state = HR_DOWN;
            r.since = since;
            r.until = now + (dlock__mono)n->conf.breaker_ms * DLOCK__MS;
            r.probe = now + (dlock__mono)HR_PROBE_MS * DLOCK__MS;
            if (rec_write(fd, &r) == 0) {
                __atomic_store_n(&n->host_wrote, 1, __ATOMIC_RELAXED);
                dlock__debug("%s: host-wide circuit breaker open for %u ms (record %s)", n->conf.redacted_url,
                             n->conf.breaker_ms, n->host_rec);
            }
        }
        syscall(SYS_flock, fd, LOCK_UN);
    }
    close(fd);
}

void dlock__hostrec_up(dlock__node *n) {
    struct hr_rec r;
    dlock__mono now = dlock__now();
    int fd = rec_open(n, 0);
    if (fd < 0) return;
    if (rec_lock(fd) == 0) {
        if (rec_read(fd, &r, now) == 1 && r.state == HR_DOWN) {
            uint32_t told = r.told;
            memset(&r, 0, sizeof r);
            r.state = HR_UP;
            r.since = now;
            /* whether the outage was told: its end is told only then */
            r.told = told & DLOCK__HOST_TOLD_DOWNS;
            if (rec_write(fd, &r) == 0)
                dlock__debug("%s: host-wide circuit breaker closed: the server answered", n->conf.redacted_url);
        }
        syscall(SYS_flock, fd, LOCK_UN);
    }
    close(fd);
}

void dlock__hostrec_refused(dlock__node *n, dlock__mono first, dlock__mono now) {
    unsigned trip = n->conf.unreachable_ms < HR_TRIP_MS ? n->conf.unreachable_ms : HR_TRIP_MS;
    if (n->host_rec[0] == '\0' || first == 0 || now - first < (dlock__mono)trip * DLOCK__MS) return;
    dlock__hostrec_down(n, first);
}

/* Whether the caller tells `what` of the record r (read: st): 1 if it
 * is the first, *write 1 when r is to be written back.  An outage not
 * recorded yet (the program that tells may have given up waiting before
 * its request found the server unreachable for long) gets a record of
 * its notices, HR_TOLD, which the outage's record takes over. */
static int tell_decide(const dlock__node *n, struct hr_rec *r, int st, int what, dlock__mono now, int *write) {
    int up = what == DLOCK__HOST_TOLD_UP, tell;
    *write = 0;
    if (st == 1 && (up ? r->state == HR_UP : rec_down(r, now) || told_lately(n, r, now))) {
        /* the end of an outage nobody told is not worth a word either */
        tell = (r->told & (unsigned)what) == 0 && (!up || (r->told & DLOCK__HOST_TOLD_DOWNS) != 0);
        r->told |= (unsigned)what;
        *write = tell;
        return tell;
    }
    if (up) return 1; /* no record of the outage: each process tells its own */
    memset(r, 0, sizeof *r);
    r->state = HR_TOLD;
    r->since = now;
    r->told = (unsigned)what;
    *write = 1;
    return 1;
}

int dlock__breaker_host_tell(dlock__node *n, int what) {
    struct hr_rec r;
    dlock__mono now = dlock__now();
    int fd = rec_open(n, what != DLOCK__HOST_TOLD_UP), tell = 1, i, write;
    if (fd < 0) return 1; /* no record: each process tells its own */
    /* Another process may hold the write lock for a moment. */
    for (i = 0; i < 50 && rec_lock(fd) != 0; i++) usleep(100);
    if (i < 50) {
        tell = tell_decide(n, &r, rec_read(fd, &r, now), what, now, &write);
        if (write && rec_write(fd, &r) != 0) tell = 1;
        syscall(SYS_flock, fd, LOCK_UN);
    }
    close(fd);
    return tell;
}

int dlock__breaker_host_back(dlock__node *n) {
    if (__atomic_load_n(&n->host_back, __ATOMIC_RELAXED) == 0) return 0;
    return __atomic_exchange_n(&n->host_back, 0, __ATOMIC_RELAXED);
}

int dlock__hostrec_peek(const dlock__node *n, dlock__mono *since, dlock__mono *probe) {
    char path[sizeof n->host_rec];
    struct hr_rec r;
    dlock__mono now = dlock__now();
    int fd, down = 0;
    rec_path(n, path, sizeof path);
    if ((fd = rec_open_at(path, 0)) < 0) return 0;
    if (rec_read(fd, &r, now) == 1 && rec_down(&r, now)) {
        *since = r.since;
        *probe = r.probe;
        down = 1;
    }
    close(fd);
    return down;
}
