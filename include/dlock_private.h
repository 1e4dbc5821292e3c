/* dlock_private.h -- the few functions libdlock exports for its own
 * LD_PRELOAD implementation (libdlock_preload_impl.so, preload/), beyond
 * the public API of dlock.h.  Not a user interface: not installed, not in
 * dlock(3), and free to change with the library -- the two are built and
 * installed together.  Functions and one plain result type only: the
 * preload never sees the library's structs.  (Defined in src/api/export.c,
 * src/api/range.c and src/backend/backend.c.)
 */
#ifndef DLOCK_PRIVATE_H
#define DLOCK_PRIVATE_H

#include <dlock.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A list of NUL-terminated strings, as a record-lock request answers;
 * freed with dlock__strs_free. */
typedef struct dlock__strs {
    size_t n;
    char **v;
} dlock__strs;
DLOCK_API void dlock__strs_free(dlock__strs *s);

/* One request on the record-lock range table of name (its ARGV in args):
 * 0 with *out its answer, or an errno value (ENOLCK: unreachable, or the
 * circuit breaker is open; ENOTSUP on Redlock).  once: one attempt,
 * however the server answers. */
DLOCK_API int dlock__range(dlock_client_t *c, const char *name, int once, int nargs, const char *const *args,
                           dlock__strs *out);
/* A record-lock owner's wait edges ("eset" rec for ttl_ms, "eget",
 * "edel" on the edge key of id): one attempt. */
DLOCK_API int dlock__range_edge(dlock_client_t *c, const char *op, const char *id, const char *rec,
                                unsigned ttl_ms, dlock__strs *out);
/* Waits up to ms for the word that tells owner, which keeps the cache of
 * name's table, that another owner asks: 1 it came, 0 not within ms, or
 * an errno value (ENOTSUP: no such word can come). */
DLOCK_API int dlock__range_watch(dlock_client_t *c, const char *name, const char *owner, unsigned ms);

/* The circuit breaker of c's server, for requests that other processes
 * make on c's behalf (the preload's keepers take its file locks):
 * _check: 0 if a request may go (*probe 1 when it is the breaker's probe,
 * which makes one attempt), ENOLCK while the breaker is open;
 * _report: a request's outcome (rc), paid 1 when it waited the whole
 * unreachable bound; _probe_now: open, with the probe due at once (a
 * keeper told that its program's breaker is open); _open: is it open? */
DLOCK_API int dlock__client_breaker_check(dlock_client_t *c, int *probe);
DLOCK_API void dlock__client_breaker_report(dlock_client_t *c, int rc, int paid);
/* 1 once when the host's record says the server is back and no program
 * told it yet (a return another process got the answer of). */
DLOCK_API int dlock__client_breaker_host_back(dlock_client_t *c);
DLOCK_API void dlock__client_breaker_probe_now(dlock_client_t *c);
DLOCK_API int dlock__client_breaker_open(dlock_client_t *c);

/* The holder identity ("host:pid:tid") this process writes with its locks
 * when it holds them for another process: the keeper names the program
 * it serves.  pid 0: this process and the calling thread (the default). */
DLOCK_API void dlock__set_who(long pid, unsigned long tid);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_PRIVATE_H */
