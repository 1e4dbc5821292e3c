/* hook_mutex.c -- the thin interposer's mutex hooks: global pthread
 * mutexes of the program, named by symbol in the rules, are the dlock
 * mutexes of the implementation (mutex.c); every other mutex goes
 * straight to the real function.
 *
 * The addresses are resolved once at start-up: the dynamic symbols
 * (dlsym), then the full symbol table (.symtab) of the executable and of
 * each loaded library when it has one.  The hooks compare the argument
 * with a small sorted array; with no mutex rule they cost one load and a
 * branch on top of the jump to the real function.  The first call on a
 * mapped mutex loads the implementation (load.c); before then none can
 * be held cluster-wide, so an unlock or a condition wait is the real
 * mutex's alone.
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

struct dlpl_mx dlpl_mxs[DLPL_MAX_MUTEX];
volatile int dlpl_nmutex;
static const char *lowest, *highest; /* the table's range: most mutexes are outside it */

/* m's index in dlpl_mxs, or -1. */
static int find(const void *m) {
    int lo = 0, hi = dlpl_nmutex - 1;
    if ((const char *)m < lowest || (const char *)m > highest) return -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (dlpl_mxs[mid].addr == m) return mid;
        if ((const char *)dlpl_mxs[mid].addr < (const char *)m) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
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
    const struct dlpl_mx *x = a, *y = b;
    return (const char *)x->addr < (const char *)y->addr ? -1 : (const char *)x->addr > (const char *)y->addr;
}

int dlpl_mutex_init(void) {
    size_t i;
    int n = 0;
    for (i = 0; i < dlpl_conf.nrules && n < DLPL_MAX_MUTEX; i++) {
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
        for (j = 0; j < n; j++) dup |= dlpl_mxs[j].addr == p;
        if (dup) continue; /* the first rule wins */
        dlpl_mxs[n].addr = p;
        dlpl_mxs[n].symbol = r->pattern;
        dlpl_mxs[n].name = r->name != NULL ? r->name : r->pattern;
        if (dlpl_conf.verbose) dlpl_msg("mutex:%s at %p is the dlock mutex '%s'", r->pattern, p, dlpl_mxs[n].name);
        n++;
    }
    qsort(dlpl_mxs, (size_t)n, sizeof dlpl_mxs[0], by_addr);
    if (n > 0) {
        lowest = dlpl_mxs[0].addr;
        highest = dlpl_mxs[n - 1].addr;
    }
    atomic_thread_fence(memory_order_release);
    dlpl_nmutex = n;
    return n;
}


/* ---------------------------------------------------------------- hooks */

/* The implementation could not be loaded (load.c said so): with
 * DLOCK_ON_ERROR=open the real mutex alone; closed, no lock is taken
 * without the cluster lock, and a call cannot wait for a library that is
 * not there: trylock EBUSY, the others ENOLCK. */
static int unavailable(pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *abstime) {
    if (dlpl_conf.on_error == DLPL_ON_ERROR_CLOSED) return how == 1 ? EBUSY : ENOLCK;
    return how == 0 ? DLPL_REAL(mutex_lock)(m)
           : how == 1 ? DLPL_REAL(mutex_trylock)(m)
                      : DLPL_REAL(mutex_clocklock)(m, clock, abstime);
}

static int lock_mapped(int i, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *abstime) {
    const struct dlpl_impl *impl = dlpl_impl();
    int rc;
    if (impl == NULL) return unavailable(m, how, clock, abstime);
    dlpl_guard++;
    rc = impl->mutex_lock(i, m, how, clock, abstime);
    dlpl_guard--;
    return rc;
}

#define UNMAPPED(m, i) (DLPL_LIKELY(dlpl_nmutex == 0) || dlpl_guard || ((i) = find(m)) < 0)

int pthread_mutex_lock(pthread_mutex_t *m) {
    int i;
    if (UNMAPPED(m, i)) return DLPL_REAL(mutex_lock)(m);
    return lock_mapped(i, m, 0, CLOCK_REALTIME, NULL);
}

int pthread_mutex_trylock(pthread_mutex_t *m) {
    int i;
    if (UNMAPPED(m, i)) return DLPL_REAL(mutex_trylock)(m);
    return lock_mapped(i, m, 1, CLOCK_REALTIME, NULL);
}

int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abstime) {
    int i;
    if (UNMAPPED(m, i)) return DLPL_REAL(mutex_timedlock)(m, abstime);
    return lock_mapped(i, m, 2, CLOCK_REALTIME, abstime);
}

int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clock, const struct timespec *abstime) {
    int i;
    if (UNMAPPED(m, i)) return DLPL_REAL(mutex_clocklock)(m, clock, abstime);
    return lock_mapped(i, m, 2, clock, abstime);
}

int pthread_mutex_unlock(pthread_mutex_t *m) {
    const struct dlpl_impl *impl;
    int i, rc;
    if (UNMAPPED(m, i) || (impl = DLPL_LOADED()) == NULL) return DLPL_REAL(mutex_unlock)(m);
    dlpl_guard++;
    rc = impl->mutex_unlock(i, m);
    dlpl_guard--;
    return rc;
}

int pthread_mutex_consistent(pthread_mutex_t *m) {
    const struct dlpl_impl *impl;
    int i, rc;
    if (UNMAPPED(m, i) || (impl = DLPL_LOADED()) == NULL) return DLPL_REAL(mutex_consistent)(m);
    dlpl_guard++;
    rc = impl->mutex_consistent(i, m);
    dlpl_guard--;
    return rc;
}

/* A condition wait on a mapped mutex: the implementation gives the dlock
 * mutex up for the wait and takes it again (mutex.c).  It manages
 * dlpl_guard itself: the wait proper runs without it. */
static int cond_common(pthread_cond_t *c, pthread_mutex_t *m, int how, clockid_t clock, const struct timespec *t) {
    const struct dlpl_impl *impl;
    int i;
    if (DLPL_LIKELY(dlpl_nmutex == 0) || dlpl_guard || dlpl_state != DLPL_ACTIVE || (i = find(m)) < 0 ||
        (impl = DLPL_LOADED()) == NULL)
        return how == 0 ? DLPL_REAL(cond_wait)(c, m)
               : how == 1 ? DLPL_REAL(cond_timedwait)(c, m, t)
                          : DLPL_REAL(cond_clockwait)(c, m, clock, t);
    return impl->cond_wait(i, c, m, how, clock, t);
}

int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    return cond_common(c, m, 0, CLOCK_REALTIME, NULL);
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) {
    return cond_common(c, m, 1, CLOCK_REALTIME, t);
}

int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clock, const struct timespec *t) {
    return cond_common(c, m, 2, clock, t);
}
