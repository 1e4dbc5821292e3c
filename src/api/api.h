/* api.h -- the public objects over the core: mutexes (mutex.c), rwlocks
 * (rwlock.c), condition variables (cond.c), attributes (attr.c) and the
 * administrative calls (admin.c). */
#ifndef DLOCK_API_H
#define DLOCK_API_H

#include "core/core.h"

/* Lock objects (mutexes, rwlocks): the private state behind the caller's
 * dlock_mutex_t / dlock_rwlock_t. */
typedef struct dlock__obj {
    unsigned magic;
    struct dlock_client *c;
    dlock__lock *l;
    dlock__want want;   /* type, robustness, lease, lost-lock handler */
    unsigned calls;     /* lock calls in progress (destroy gives EBUSY)... */
    pid_t calls_pid;    /* ...in this process: a fork child starts from 0 */
} dlock__obj;
/* Counts a call in progress through o (delta +1 / -1).  c->mu held. */
void dlock__obj_calls(dlock__obj *o, int delta);
int dlock__obj_make(void *obj, const char *name, const dlock_mutexattr_t *attr, unsigned magic, dlock__obj **out);
void dlock__obj_free(dlock__obj *o);
int dlock__obj_destroy(dlock__obj *o, const void *obj);
int dlock__obj_lock(dlock__obj *o, int shared, int try, dlock__mono deadline, int bad_deadline);
int dlock__mutex_obj(dlock_mutex_t *m, dlock__obj **out);
int dlock__obj_xlock(dlock__obj *o, int shared, int try, int intr, dlock__mono deadline, int bad_deadline);
/* What a call through an object runs: dlock__acquire, dlock__sem_take. */
typedef int (*dlock__obj_op)(struct dlock_client *c, dlock__lock *l, const dlock__want *w, int try,
                             dlock__mono deadline, int bad_deadline);
/* Runs op for a call through o, counted so that destroy can say EBUSY;
 * with w->intr, signals are blocked but inside its sleeps (the pselect
 * idiom: object.c). */
int dlock__obj_run(dlock__obj *o, const dlock__want *w, dlock__obj_op op, int try, dlock__mono deadline,
                   int bad_deadline);
int dlock__timed(clockid_t clock, const struct timespec *abstime, dlock__mono *deadline, int *bad);
/* Runs a lost-lock handler outside the client's mutex. */
void dlock__report(dlock__lost_report *rep);
/* The attributes behind a; the defaults when a is NULL.  EINVAL if a
 * is not an initialised attribute object.  (attr.c) */
int dlock__attr_get(const dlock_mutexattr_t *a, dlock_mutexattr_t *out);

/* One request on the record-lock range table of name (range_lua; args
 * its ARGV): 0 with *out its answer (dlock__strs_free), or an errno
 * value (ENOLCK: unreachable, or the breaker is open; ENOTSUP on
 * Redlock).  once: one attempt, however the server answers.  (range.c;
 * for the preload) */
int dlock__range(dlock_client_t *c, const char *name, int once, int nargs, const char *const *args,
                 dlock__strs *out);
/* A record-lock owner's wait edges (the waits op's "eset", "eget",
 * "edel" on <prefix>dlw:{<id>}): one attempt.  (range.c) */
int dlock__range_edge(dlock_client_t *c, const char *op, const char *id, const char *rec, unsigned ttl_ms,
                      dlock__strs *out);
/* Waits up to ms for the word that tells owner, which keeps the cache
 * of name's table, that another owner asks: 1 it came, 0 not within ms,
 * or an errno value (ENOTSUP: no such word can come).  (range.c; for the
 * preload's cache of record locks) */
int dlock__range_watch(dlock_client_t *c, const char *name, const char *owner, unsigned ms);
/* The record-lock table of name as it is ("show"): 0 with *out (the
 * server's time, then each live owner and its record), or an errno
 * value; _count: its owners and held ranges.  (range.c; dlock_range_tables) */
int dlock__range_table(dlock_client_t *c, const char *name, dlock__strs *out);
void dlock__range_count(const dlock__strs *t, unsigned *owners, unsigned *ranges);

#endif /* DLOCK_API_H */
