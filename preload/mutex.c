/* mutex.c -- global pthread mutexes of the program, named by symbol in
 * the rules, become dlock mutexes; every other mutex goes straight to the
 * real function.
 *
 * The addresses are resolved once at start-up: the dynamic symbols
 * (dlsym), then the full symbol table (.symtab) of the executable and of
 * each loaded library when it has one.  The hooks compare the argument
 * with a small sorted array; with no mutex rule they cost one load and a
 * branch on top of the jump to the real function.
 *
 * A mapped mutex is locked twice, in one order: the dlock mutex (which
 * excludes every thread of every process on every host), then the real
 * mutex (so that pthread_cond_wait, which unlocks and relocks it inside
 * glibc, keeps working, and so that DLOCK_ON_ERROR=open degrades to the
 * plain local mutex).
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

#define MAX_MUTEX 64

struct mx {
    void *addr;
    const char *name;
    const char *symbol;
    dlock_mutex_t dm;
    atomic_int state; /* 0 not made, 1 made, 2 unusable */
    int process;      /* a kind glibc lets any thread unlock: dm is process-owned (set before state 1) */
    atomic_int local; /* process: held with the real mutex only (DLOCK_ON_ERROR=open) */
};

static struct mx mxs[MAX_MUTEX];
volatile int dlpl_nmutex;
static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;

/* Holds of a mapped mutex this thread took with the local mutex only
 * (DLOCK_ON_ERROR=open while the server was unreachable); for a
 * process-owned one, whose unlock any thread may make, mx.local instead. */
static __thread unsigned local_only[MAX_MUTEX] DLPL_TLS;

static const char *lowest, *highest; /* the table's range: most mutexes are outside it */

static struct mx *find(const void *m) {
    int lo = 0, hi = dlpl_nmutex - 1;
    if ((const char *)m < lowest || (const char *)m > highest) return NULL;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (mxs[mid].addr == m) return &mxs[mid];
        if ((const char *)mxs[mid].addr < (const char *)m) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* ------------------------------------------------------- symbol lookup */

struct symq {
    const char *name;
    void *found;
    int count;
    int badsize;
};

/* Looks name up in the .symtab of the ELF file at path, loaded at bias.
 * Every offset is checked against the file's size. */
static void symtab_lookup(const char *path, ElfW(Addr) bias, struct symq *q) {
    struct stat st;
    const unsigned char *base;
    const ElfW(Ehdr) *eh;
    const ElfW(Shdr) *sh;
    size_t size, i;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(ElfW(Ehdr))) {
        DLPL_REAL(close)(fd);
        return;
    }
    size = (size_t)st.st_size;
    base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    DLPL_REAL(close)(fd);
    if (base == MAP_FAILED) return;
    eh = (const ElfW(Ehdr) *)base;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shentsize != sizeof(ElfW(Shdr)) ||
        eh->e_shoff == 0 || eh->e_shoff > size || eh->e_shnum > (size - eh->e_shoff) / sizeof(ElfW(Shdr)))
        goto out;
    sh = (const ElfW(Shdr) *)(base + eh->e_shoff);
    for (i = 0; i < eh->e_shnum; i++) {
        const ElfW(Shdr) *s = &sh[i], *strs;
        size_t n, j;
        if (s->sh_type != SHT_SYMTAB || s->sh_link >= eh->e_shnum) continue;
        strs = &sh[s->sh_link];
        if (s->sh_offset > size || s->sh_size > size - s->sh_offset || strs->sh_offset > size ||
            strs->sh_size > size - strs->sh_offset || s->sh_entsize != sizeof(ElfW(Sym)))
            continue;
        n = s->sh_size / sizeof(ElfW(Sym));
        for (j = 0; j < n; j++) {
            const ElfW(Sym) *sym = (const ElfW(Sym) *)(base + s->sh_offset) + j;
            const char *nm;
            if (ELF64_ST_TYPE(sym->st_info) != STT_OBJECT || sym->st_shndx == SHN_UNDEF) continue;
            if (sym->st_name >= strs->sh_size) continue;
            nm = (const char *)base + strs->sh_offset + sym->st_name;
            if (strnlen(nm, strs->sh_size - sym->st_name) == strs->sh_size - sym->st_name) continue;
            if (strcmp(nm, q->name) != 0) continue;
            if (sym->st_size != sizeof(pthread_mutex_t)) {
                q->badsize = 1;
                continue;
            }
            if (q->count == 0 || q->found != (void *)(bias + sym->st_value)) {
                q->found = (void *)(bias + sym->st_value);
                q->count++;
            }
        }
    }
out:
    munmap((void *)base, size);
}

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    struct symq *q = arg;
    const char *path = info->dlpi_name;
    (void)size;
    if (path == NULL || *path == '\0') path = "/proc/self/exe";
    else if (strstr(path, "linux-vdso") != NULL || path[0] != '/') return 0;
    symtab_lookup(path, info->dlpi_addr, q);
    return 0;
}

/* The address of the global pthread_mutex_t called sym, or NULL. */
static void *resolve(const char *sym) {
    struct symq q = { sym, NULL, 0, 0 };
    void *p = dlsym(RTLD_DEFAULT, sym);
    if (p != NULL) {
        Dl_info info;
        const ElfW(Sym) *es = NULL;
        if (dladdr1(p, &info, (void **)&es, RTLD_DL_SYMENT) != 0 && es != NULL &&
            (ELF64_ST_TYPE(es->st_info) != STT_OBJECT || es->st_size != sizeof(pthread_mutex_t))) {
            dlpl_msg("mutex:%s is not a pthread_mutex_t (%zu bytes); not mapped", sym, (size_t)es->st_size);
            return NULL;
        }
        return p;
    }
    dl_iterate_phdr(phdr_cb, &q);
    if (q.count > 1) {
        dlpl_msg("mutex:%s names %d different objects (static symbols of that name); not mapped", sym, q.count);
        return NULL;
    }
    if (q.count == 0 && q.badsize) dlpl_msg("mutex:%s is not a pthread_mutex_t; not mapped", sym);
    return q.count == 1 ? q.found : NULL;
}

static int by_addr(const void *a, const void *b) {
    const struct mx *x = a, *y = b;
    return (const char *)x->addr < (const char *)y->addr ? -1 : (const char *)x->addr > (const char *)y->addr;
}

int dlpl_mutex_init(void) {
    size_t i;
    int n = 0;
    for (i = 0; i < dlpl_conf.nrules && n < MAX_MUTEX; i++) {
        const struct dlpl_rule *r = &dlpl_conf.rules[i];
        void *p;
        int j, dup = 0;
        if (r->kind != DLPL_RULE_MUTEX) continue;
        if ((p = resolve(r->pattern)) == NULL) {
            /* A symbol this program does not have: LD_PRELOAD reaches
             * every program the job starts, most of which have none. */
            if (dlpl_conf.verbose) dlpl_msg("mutex:%s: no such symbol in this program", r->pattern);
            continue;
        }
        for (j = 0; j < n; j++) dup |= mxs[j].addr == p;
        if (dup) continue; /* the first rule wins */
        mxs[n].addr = p;
        mxs[n].symbol = r->pattern;
        mxs[n].name = r->name != NULL ? r->name : r->pattern;
        if (dlpl_conf.verbose) dlpl_msg("mutex:%s at %p is the dlock mutex '%s'", r->pattern, p, mxs[n].name);
        n++;
    }
    qsort(mxs, (size_t)n, sizeof mxs[0], by_addr);
    if (n > 0) {
        lowest = mxs[0].addr;
        highest = mxs[n - 1].addr;
    }
    atomic_thread_fence(memory_order_release);
    dlpl_nmutex = n;
    return n;
}

/* ------------------------------------------------------------- locking */

void dlpl_lost_apply(const char *what, const char *name, const char *meaning) {
    if (dlpl_conf.on_lost == DLPL_ON_LOST_ABORT) {
        dlpl_msg("lost %s '%s' (%s); DLOCK_ON_LOST=abort", what, name, dlpl_lost_why());
        dlpl_stop_tree(getpid(), 0); /* what the program started, as for a file lock */
        abort();
    }
    dlpl_msg("lost %s '%s' (%s): %s (DLOCK_ON_LOST=warn)", what, name, dlpl_lost_why(), meaning);
}

static void on_lost(dlock_mutex_t *m, const char *name, void *arg) {
    (void)m;
    (void)arg;
    dlpl_lost_apply("the cluster lock of mutex", name, "it no longer excludes other hosts");
}

/* glibc's __data.__kind: the type in the low two bits (0 NORMAL, which is
 * also DEFAULT; 1 RECURSIVE; 2 ERRORCHECK; 3 ADAPTIVE), then flags:
 * robust, priority inheritance, priority protection, process-shared,
 * elision. */
#define KIND_TYPE 3
#define KIND_ROBUST 16
#define KIND_PI 32

/* Does glibc let any thread unlock a mutex of this kind?  A NORMAL or
 * ADAPTIVE one, yes (it never looks at the owner), unless it is robust or
 * priority-inheriting: those, like ERRORCHECK and RECURSIVE, answer EPERM
 * to a thread that does not own them. */
static int kind_any_thread_unlocks(int kind) {
    int type = kind & KIND_TYPE;
    return (type == PTHREAD_MUTEX_NORMAL || type == PTHREAD_MUTEX_ADAPTIVE_NP) && !(kind & (KIND_ROBUST | KIND_PI));
}

/* DLOCK_LOCK_DELAY_MS (0 to DLOCK_LOCK_DELAY_MAX_MS) on a mapped lock's
 * attributes (a mutex's here, a file lock's in its keeper); unset, the
 * URL's lock_delay_ms.  A bad value is said once and leaves the delay to
 * the URL. */
void dlpl_lock_delay_set(dlock_mutexattr_t *a) {
    static int said;
    const char *v = secure_getenv("DLOCK_LOCK_DELAY_MS");
    char *end;
    unsigned long ms;
    if (v == NULL || *v == '\0') return;
    errno = 0;
    ms = strtoul(v, &end, 10);
    if (errno == 0 && *end == '\0' && *v != '-' && ms <= DLOCK_LOCK_DELAY_MAX_MS &&
        dlock_mutexattr_setlockdelay(a, (unsigned)ms) == 0)
        return;
    if (!said++) dlpl_msg("DLOCK_LOCK_DELAY_MS '%s' is not a number of ms from 0 to %u; ignored", v, DLOCK_LOCK_DELAY_MAX_MS);
}

/* Makes e's dlock mutex on first use, with the type and robustness of
 * the pthread mutex as it is now (glibc keeps them in __data.__kind),
 * and its owner: the process for a kind any thread may unlock (so that
 * such an unlock releases the cluster lock), else the thread. */
static int make(struct mx *e, pthread_mutex_t *m) {
    dlock_mutexattr_t a;
    int kind, rc = 0;
    if (atomic_load(&e->state) == 1) return 0;
    DLPL_REAL(mutex_lock)(&make_mu);
    if (atomic_load(&e->state) == 0) {
        kind = m->__data.__kind;
        dlock_mutexattr_init(&a);
        dlock_mutexattr_settype(&a, (kind & 3) == PTHREAD_MUTEX_RECURSIVE ? DLOCK_MUTEX_RECURSIVE
                                    : (kind & 3) == PTHREAD_MUTEX_ERRORCHECK ? DLOCK_MUTEX_ERRORCHECK
                                                                             : DLOCK_MUTEX_NORMAL);
        dlock_mutexattr_setrobust(&a, (kind & KIND_ROBUST) ? DLOCK_MUTEX_ROBUST : DLOCK_MUTEX_STALLED);
        e->process = kind_any_thread_unlocks(kind);
        dlock_mutexattr_setowner(&a, e->process ? DLOCK_OWNER_PROCESS : DLOCK_OWNER_THREAD);
        dlock_mutexattr_setclient(&a, dlpl_client);
        dlock_mutexattr_setlostcallback(&a, on_lost, NULL);
        dlpl_lock_delay_set(&a);
        rc = dlpl_client == NULL ? EINVAL : dlock_mutex_init(&e->dm, e->name, &a);
        if (rc != 0) dlpl_msg("mutex:%s: %s; it stays a local mutex", e->symbol, dlock_last_error());
        atomic_store(&e->state, rc == 0 ? 1 : 2);
    }
    rc = atomic_load(&e->state) == 1 ? 0 : EINVAL;
    DLPL_REAL(mutex_unlock)(&make_mu);
    return rc;
}

static int contention(int rc) {
    return rc == 0 || rc == EBUSY || rc == ETIMEDOUT || rc == EDEADLK || rc == EOWNERDEAD ||
           rc == ENOTRECOVERABLE || rc == EAGAIN || rc == EINVAL;
}

/* A timed call that ran out of time because the server could not be
 * reached (the library's detail says so) failed for the server's sake, not
 * for contention: DLOCK_ON_ERROR applies to it, as to flock -w's.  Else, in
 * fail-open mode, a timedlock shorter than the unreachable bound would be
 * ETIMEDOUT on a free mutex for as long as the server stays away. */
static int unreachable_timeout(int rc) {
    return rc == ETIMEDOUT && strstr(dlock_last_error(), "(server unreachable)") != NULL;
}

/* how: 0 lock, 1 trylock, 2 timed (clock, abstime). */
static int mx_lock(struct mx *e, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *abstime) {
    int i = (int)(e - mxs), rc, rr;
    if (local_only[i] > 0 || make(e, m) != 0) goto local;
    for (;;) {
        rc = how == 0 ? dlock_mutex_lock(&e->dm)
             : how == 1 ? dlock_mutex_trylock(&e->dm)
                        : dlock_mutex_clocklock(&e->dm, clock, abstime);
        if (how == 2 && unreachable_timeout(rc)) rc = ENOLCK;
        if (contention(rc)) break;
        /* The server: ENOLCK (unreachable) or worse.  Said once (until
         * it answers again); the client's circuit breaker makes the
         * next calls fail at once, with a probe a second, so the program
         * waits for an unreachable server once per back-off period. */
        dlpl_server_down(e->name, rc);
        if (dlpl_conf.on_error == DLPL_ON_ERROR_OPEN) goto local;
        if (how == 1) return EBUSY;
        if (how == 2) {
            struct timespec now;
            clock_gettime(clock, &now);
            if (now.tv_sec > abstime->tv_sec || (now.tv_sec == abstime->tv_sec && now.tv_nsec >= abstime->tv_nsec))
                return ETIMEDOUT;
        }
        {
            /* closed: wait for the server, asking about every 100 ms (the
             * breaker answers in between without asking) */
            struct timespec ts = { 0, 100 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    if (rc == 0 || rc == EBUSY || rc == EOWNERDEAD) dlpl_server_up();
    if (rc != 0 && rc != EOWNERDEAD) return rc;
    rr = how == 0 ? DLPL_REAL(mutex_lock)(m)
         : how == 1 ? DLPL_REAL(mutex_trylock)(m)
                    : DLPL_REAL(mutex_clocklock)(m, clock, abstime);
    if (rr != 0 && rr != EOWNERDEAD) {
        dlock_mutex_unlock(&e->dm);
        return rr;
    }
    return rc != 0 ? rc : rr;
local:
    rr = how == 0 ? DLPL_REAL(mutex_lock)(m)
         : how == 1 ? DLPL_REAL(mutex_trylock)(m)
                    : DLPL_REAL(mutex_clocklock)(m, clock, abstime);
    if (rr == 0 || rr == EOWNERDEAD) {
        if (e->process) atomic_store(&e->local, 1);
        else local_only[i]++;
    }
    return rr;
}

/* The real mutex first, then the cluster lock (the reverse of mx_lock).
 * A kind glibc lets any thread unlock (process-owned dlock mutex): any
 * thread's unlock releases the cluster lock; an EPERM from dlock then
 * means it was not held (its lease was lost, which DLOCK_ON_LOST
 * reported, or a second unlock), which glibc's own mutex lets pass too.
 * Other kinds (thread-owned): glibc answers EPERM to a thread that does
 * not own the real mutex, which the caller gets, and the cluster lock
 * stays with its owner; once glibc has accepted the unlock, the caller
 * is the owner and an EPERM from dlock can only be a lost lease. */
static int mx_unlock(struct mx *e, pthread_mutex_t *m) {
    int i = (int)(e - mxs), rr, was;
    if (atomic_load(&e->state) == 1 && e->process) {
        was = atomic_exchange(&e->local, 0);
        if ((rr = DLPL_REAL(mutex_unlock)(m)) != 0) {
            if (was) atomic_store(&e->local, 1);
            return rr;
        }
        if (!was) (void)dlock_mutex_unlock(&e->dm);
        return 0;
    }
    if ((rr = DLPL_REAL(mutex_unlock)(m)) != 0) return rr;
    if (local_only[i] > 0) {
        local_only[i]--;
        return 0;
    }
    if (atomic_load(&e->state) == 1) dlock_mutex_unlock(&e->dm); /* EPERM: the lease was lost (reported) */
    return 0;
}

#define MAPPED(m) (DLPL_UNLIKELY(dlpl_nmutex != 0) && !dlpl_guard && dlpl_state == DLPL_ACTIVE && find(m) != NULL)

int pthread_mutex_lock(pthread_mutex_t *m) {
    struct mx *e;
    int rc;
    if (DLPL_LIKELY(dlpl_nmutex == 0) || dlpl_guard || (e = find(m)) == NULL) return DLPL_REAL(mutex_lock)(m);
    dlpl_guard++;
    rc = mx_lock(e, m, 0, CLOCK_REALTIME, NULL);
    dlpl_guard--;
    return rc;
}

int pthread_mutex_trylock(pthread_mutex_t *m) {
    struct mx *e;
    int rc;
    if (DLPL_LIKELY(dlpl_nmutex == 0) || dlpl_guard || (e = find(m)) == NULL) return DLPL_REAL(mutex_trylock)(m);
    dlpl_guard++;
    rc = mx_lock(e, m, 1, CLOCK_REALTIME, NULL);
    dlpl_guard--;
    return rc;
}

int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abstime) {
    struct mx *e;
    int rc;
    if (DLPL_LIKELY(dlpl_nmutex == 0) || dlpl_guard || (e = find(m)) == NULL)
        return DLPL_REAL(mutex_timedlock)(m, abstime);
    dlpl_guard++;
    rc = mx_lock(e, m, 2, CLOCK_REALTIME, abstime);
    dlpl_guard--;
    return rc;
}

int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clock, const struct timespec *abstime) {
    struct mx *e;
    int rc;
    if (DLPL_LIKELY(dlpl_nmutex == 0) || dlpl_guard || (e = find(m)) == NULL)
        return DLPL_REAL(mutex_clocklock)(m, clock, abstime);
    dlpl_guard++;
    rc = mx_lock(e, m, 2, clock, abstime);
    dlpl_guard--;
    return rc;
}

int pthread_mutex_unlock(pthread_mutex_t *m) {
    struct mx *e;
    int rc;
    if (DLPL_LIKELY(dlpl_nmutex == 0) || dlpl_guard || (e = find(m)) == NULL) return DLPL_REAL(mutex_unlock)(m);
    dlpl_guard++;
    rc = mx_unlock(e, m);
    dlpl_guard--;
    return rc;
}

int pthread_mutex_consistent(pthread_mutex_t *m) {
    struct mx *e;
    int a, b;
    if (DLPL_LIKELY(dlpl_nmutex == 0) || dlpl_guard || (e = find(m)) == NULL)
        return DLPL_REAL(mutex_consistent)(m);
    dlpl_guard++;
    a = atomic_load(&e->state) == 1 ? dlock_mutex_consistent(&e->dm) : EINVAL;
    b = DLPL_REAL(mutex_consistent)(m);
    dlpl_guard--;
    return a == 0 || b == 0 ? 0 : b;
}

/* A condition wait on a mapped mutex: the dlock mutex is given up for the
 * wait and taken again, before the real mutex, as every lock does. */
static int cond_common(pthread_cond_t *c, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *t) {
    struct mx *e = find(m);
    int i = (int)(e - mxs), rc;
    dlpl_guard++;
    if (atomic_load(&e->state) != 1 || (e->process ? atomic_load(&e->local) : (int)local_only[i]) > 0) {
        dlpl_guard--;
        goto real;
    }
    dlock_mutex_unlock(&e->dm);
    dlpl_guard--;
    rc = how == 0 ? DLPL_REAL(cond_wait)(c, m)
         : how == 1 ? DLPL_REAL(cond_timedwait)(c, m, t)
                    : DLPL_REAL(cond_clockwait)(c, m, clock, t);
    dlpl_guard++;
    DLPL_REAL(mutex_unlock)(m);
    while (mx_lock(e, m, 0, CLOCK_REALTIME, NULL) != 0) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL); /* cannot be given up: a condition wait returns holding the mutex */
    }
    dlpl_guard--;
    return rc;
real:
    return how == 0 ? DLPL_REAL(cond_wait)(c, m)
           : how == 1 ? DLPL_REAL(cond_timedwait)(c, m, t)
                      : DLPL_REAL(cond_clockwait)(c, m, clock, t);
}

int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    if (DLPL_LIKELY(!MAPPED(m))) return DLPL_REAL(cond_wait)(c, m);
    return cond_common(c, m, 0, CLOCK_REALTIME, NULL);
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) {
    if (DLPL_LIKELY(!MAPPED(m))) return DLPL_REAL(cond_timedwait)(c, m, t);
    return cond_common(c, m, 1, CLOCK_REALTIME, t);
}

int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clock, const struct timespec *t) {
    if (DLPL_LIKELY(!MAPPED(m))) return DLPL_REAL(cond_clockwait)(c, m, clock, t);
    return cond_common(c, m, 2, clock, t);
}
