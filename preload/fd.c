/* fd.c -- the per-descriptor cache of the file-lock hooks, and the hooks
 * that keep it right: dup, dup2, dup3, close_range, closefrom, fclose,
 * freopen, closedir (close and fcntl(F_DUPFD, F_DUPFD_CLOEXEC) are in
 * file.c).
 *
 * A lock call on a descriptor that no rule maps must cost no system call
 * more than without the library.  So the first lock call on a descriptor
 * decides (fstat, readlink, the rules: file.c's map_fd) and, if the file
 * is not mapped, says so here; every later lock call on that descriptor
 * finds the answer in one load.  Only "not mapped" is remembered: a mapped
 * descriptor is looked at again by each call (it needs the file's identity
 * for its record anyway, and its calls talk to a keeper).
 *
 * The answer belongs to the descriptor number until the number is let go:
 * every hook by which a program closes or replaces a descriptor -- close,
 * dup2 and dup3 (the target), close_range, closefrom, fclose, freopen,
 * closedir -- forgets it, before the call and again after it; dup and F_DUPFD forget
 * the number they return (it may have been closed where no hook saw it).
 * So a number that open() reuses for another file is decided anew.  Fork
 * copies the cache with the descriptor table it describes.
 *
 * Each slot is one 32-bit word: bit 0 "not mapped", the rest a generation
 * that every forget advances.  A decision is stored with a compare-and-
 * swap against the word read before the file was looked at, so a forget
 * that came meanwhile (another thread closed the number) wins.  Forgetting
 * is a load and, when the slot exists, a compare-and-swap: lock-free and
 * async-signal-safe, as close and dup are.  Slots come in pages of 1024
 * (one memory page, mmap'ed on the first decision in their range, never
 * freed), for descriptors below 1 << 20; a descriptor above is looked at
 * by each call, as before this cache.
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "preload.h"

#define PAGE_SHIFT DLPL_FD_SHIFT
#define PAGE_SLOTS (1u << PAGE_SHIFT)
#define NPAGES DLPL_FD_NPAGES
#define UNMAPPED 1u

/* The pages of slots (read by dlpl_fd_unmapped, inline in preload.h). */
_Atomic(_Atomic uint32_t *) dlpl_fd_pages[DLPL_FD_NPAGES];

static _Atomic uint32_t *slot(int fd) {
    _Atomic uint32_t *p;
    if (fd < 0 || (unsigned)fd >= NPAGES * PAGE_SLOTS) return NULL;
    p = atomic_load_explicit(&dlpl_fd_pages[(unsigned)fd >> PAGE_SHIFT], memory_order_acquire);
    return p != NULL ? &p[(unsigned)fd & (PAGE_SLOTS - 1)] : NULL;
}

/* The slot of fd, its page made if need be; NULL if there is none. */
static _Atomic uint32_t *slot_make(int fd) {
    _Atomic uint32_t *s = slot(fd), *page, *none = NULL;
    if (s != NULL || fd < 0 || (unsigned)fd >= NPAGES * PAGE_SLOTS) return s;
    page = mmap(NULL, PAGE_SLOTS * sizeof *page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return NULL;
    if (!atomic_compare_exchange_strong(&dlpl_fd_pages[(unsigned)fd >> PAGE_SHIFT], &none, page))
        munmap(page, PAGE_SLOTS * sizeof *page); /* another thread made it first */
    return slot(fd);
}

uint32_t dlpl_fd_token(int fd) {
    _Atomic uint32_t *s = slot_make(fd);
    return s != NULL ? atomic_load(s) & ~UNMAPPED : DLPL_FD_NONE; /* (NONE is odd: never a generation) */
}

void dlpl_fd_remember(int fd, uint32_t token) {
    _Atomic uint32_t *s = slot(fd);
    uint32_t want = token;
    if (s == NULL || token == DLPL_FD_NONE) return;
    (void)atomic_compare_exchange_strong(s, &want, token | UNMAPPED);
}

void dlpl_fd_forget(int fd) {
    _Atomic uint32_t *s = slot(fd);
    uint32_t v;
    if (s == NULL) return;
    v = atomic_load(s);
    /* (v | 1) + 1: the next generation, with "not mapped" cleared */
    while (!atomic_compare_exchange_weak(s, &v, (v | UNMAPPED) + 1))
        ;
}

/* Descriptors first .. last (inclusive), only those with a slot. */
static void forget_range(unsigned first, unsigned last) {
    unsigned fd;
    if (last >= NPAGES * PAGE_SLOTS) last = NPAGES * PAGE_SLOTS - 1;
    for (fd = first; fd <= last && fd >= first; fd++) {
        if ((fd & (PAGE_SLOTS - 1)) == 0 && atomic_load(&dlpl_fd_pages[fd >> PAGE_SHIFT]) == NULL) {
            fd += PAGE_SLOTS - 1; /* a page never made: nothing to forget */
            continue;
        }
        dlpl_fd_forget((int)fd);
    }
}

/* ----------------------------------------------------------------- hooks */

int dup(int fd) {
    int rc = DLPL_REAL(dup) ? DLPL_REAL(dup)(fd) : (errno = ENOSYS, -1);
    if (rc >= 0) dlpl_fd_forget(rc);
    return rc;
}

int dup2(int fd, int to) {
    int rc;
    dlpl_fd_forget(to);
    rc = DLPL_REAL(dup2) ? DLPL_REAL(dup2)(fd, to) : (errno = ENOSYS, -1);
    dlpl_fd_forget(to);
    return rc;
}

int dup3(int fd, int to, int flags) {
    int rc;
    dlpl_fd_forget(to);
    rc = DLPL_REAL(dup3) ? DLPL_REAL(dup3)(fd, to, flags) : (errno = ENOSYS, -1);
    dlpl_fd_forget(to);
    return rc;
}

int dlpl_close_range(unsigned first, unsigned last, int flags) __asm__("close_range");
int dlpl_close_range(unsigned first, unsigned last, int flags) {
    int rc;
    forget_range(first, last);
    rc = DLPL_REAL(close_range) ? DLPL_REAL(close_range)(first, last, flags) : (errno = ENOSYS, -1);
    forget_range(first, last);
    return rc;
}

void dlpl_closefrom(int from) __asm__("closefrom");
void dlpl_closefrom(int from) {
    unsigned first = from < 0 ? 0 : (unsigned)from;
    forget_range(first, ~0u);
    if (DLPL_REAL(closefrom)) DLPL_REAL(closefrom)(from);
    forget_range(first, ~0u);
}

/* fclose, freopen and closedir close their descriptor inside the C
 * library, where the close hook does not see it. */
static int stream_fd(FILE *f) {
    int e = errno, fd = f != NULL ? fileno(f) : -1;
    errno = e; /* (a stream with no descriptor: fileno said EBADF) */
    return fd;
}

int fclose(FILE *f) {
    int fd = stream_fd(f), rc;
    dlpl_fd_forget(fd);
    rc = DLPL_REAL(fclose) ? DLPL_REAL(fclose)(f) : (errno = ENOSYS, EOF);
    dlpl_fd_forget(fd);
    return rc;
}

/* freopen keeps the stream's descriptor number for the new file. */
static FILE *fd_reopen(FILE *(*fn)(const char *, const char *, FILE *), const char *path, const char *mode, FILE *f) {
    int fd = stream_fd(f);
    FILE *r;
    dlpl_fd_forget(fd);
    r = fn != NULL ? fn(path, mode, f) : (errno = ENOSYS, NULL);
    dlpl_fd_forget(fd);
    if (r != NULL) dlpl_fd_forget(stream_fd(r));
    return r;
}

/* (_FILE_OFFSET_BITS=64 makes freopen an alias of freopen64: the hooks
 * carry their names in assembly, as fcntl's do) */
FILE *dlpl_freopen(const char *path, const char *mode, FILE *f) __asm__("freopen");
FILE *dlpl_freopen64(const char *path, const char *mode, FILE *f) __asm__("freopen64");
FILE *dlpl_freopen(const char *path, const char *mode, FILE *f) {
    return fd_reopen(DLPL_REAL(freopen), path, mode, f);
}
FILE *dlpl_freopen64(const char *path, const char *mode, FILE *f) {
    return fd_reopen(DLPL_REAL(freopen64), path, mode, f);
}

static int dir_fd(DIR *d) { /* (closedir's d is declared nonnull) */
    int e = errno, fd = d != NULL ? dirfd(d) : -1;
    errno = e;
    return fd;
}

int closedir(DIR *d) {
    int fd = dir_fd(d), rc;
    dlpl_fd_forget(fd);
    rc = DLPL_REAL(closedir) ? DLPL_REAL(closedir)(d) : (errno = ENOSYS, -1);
    dlpl_fd_forget(fd);
    return rc;
}
