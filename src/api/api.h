/* api.h -- the public objects over the core: mutexes (mutex.c), rwlocks
 * (rwlock.c), condition variables (cond.c), attributes (attr.c) and the
 * administrative calls (admin.c). */
#ifndef DLOCK_API_H
#define DLOCK_API_H

#include <errno.h>

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
/* A caller's object (dlock_mutex_t, dlock_rwlock_t, dlock_cond_t,
 * dlock_sem_t) is live while its __magic is its own address mixed with
 * its kind's key -- so uninitialised, copied or destroyed memory gives
 * EINVAL, not a crash -- and its __impl points at private state that
 * carries its kind's magic.  A destroyed one's __magic is
 * DLOCK__HANDLE_DESTROYED.  lazy: a kind made on first use, whose
 * DLOCK__MAGIC_STATIC is live too (DLOCK_MUTEX_INITIALIZER). */
typedef struct dlock__handle_kind {
    const char *what;    /* its name in messages: "mutex", "semaphore"... */
    uintptr_t live_key;
    unsigned impl_magic;
    int lazy;
} dlock__handle_kind;
#define DLOCK__HANDLE_DESTROYED ((uintptr_t)0x64656164u)

/* The __magic of obj, a live object of kind k. */
static inline uintptr_t dlock__handle_live(const dlock__handle_kind *k, const void *obj) {
    return (uintptr_t)obj ^ k->live_key;
}

/* The handle check: 0 with *out obj's private state (impl) when obj, an
 * object of kind k whose __magic is magic, is live; else EINVAL with the
 * message.  (Inline: every lock call makes it.) */
static inline int dlock__handle_check(const dlock__handle_kind *k, const void *obj, uintptr_t magic, void *impl,
                                      dlock__obj **out) {
    dlock__obj *o = impl;
    *out = NULL; /* (an optimising compiler cannot tell that every error below is nonzero) */
    if (obj == NULL) return dlock__seterr(EINVAL, "%s is NULL", k->what);
    if ((magic != dlock__handle_live(k, obj) && !(k->lazy && magic == DLOCK__MAGIC_STATIC)) || o == NULL ||
        o->magic != k->impl_magic)
        return dlock__seterr(EINVAL, "%s is not initialised (or was destroyed)", k->what);
    *out = o;
    return 0;
}
/* The check of obj (a pointer to a caller's object; NULL is told so). */
#define DLOCK__HANDLE_GET(k, obj, out)                                                                          \
    dlock__handle_check((k), (obj), (obj) != NULL ? (obj)->__magic : 0, (obj) != NULL ? (obj)->__impl : NULL, \
                        (out))

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
/* The attributes behind a; the defaults when a is NULL.  EINVAL if a
 * is not an initialised attribute object.  (attr.c) */
int dlock__attr_get(const dlock_mutexattr_t *a, dlock_mutexattr_t *out);
/* 0 if ms is a lease (DLOCK_LEASE_MIN_MS to DLOCK_LEASE_MAX_MS), else
 * EINVAL saying that `what` (a lease, an expiry) is outside them. */
int dlock__lease_check(const char *what, unsigned ms);

/* dlock__range and dlock__range_edge (range.c), for the preload, are
 * declared in dlock_private.h.  The record-lock table of name as it is
 * ("show"): 0 with *out (the server's time, then each live owner and its
 * record), or an errno value; _count: its owners and held ranges.
 * (range.c; dlock_range_tables) */
int dlock__range_table(dlock_client_t *c, const char *name, dlock__strs *out);
void dlock__range_count(const dlock__strs *t, unsigned *owners, unsigned *ranges);

#endif /* DLOCK_API_H */
