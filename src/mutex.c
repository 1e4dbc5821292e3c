/* mutex.c -- the mutex state machine: init, lock, trylock, unlock, destroy.
 *
 * As in musl, lock is timedlock without a deadline, and every ownership
 * decision sits in one core (lock_core) that trylock, lock, timedlock and
 * clocklock share.  Local facts are checked first, with no round trip: a
 * recursive relock, EDEADLK, a NORMAL self-deadlock, EBUSY while another
 * thread of this process holds the lock.  Only then does the core ask the
 * backend, and when the lock is busy it waits on the one waiting path
 * (wait.c) for a release notification, the holder's lease expiry or its
 * own deadline.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dlock-int.h"

#define LIVE_KEY ((uintptr_t)0x6d75746578a5a5a5ull)
#define DESTROYED ((uintptr_t)0x64656164u)
#define IMPL_MAGIC 0x6d757478u

int dlock__attr_get(const dlock_mutexattr_t *a, dlock_mutexattr_t *out);

typedef struct dlock__mutex {
    unsigned magic;
    struct dlock_client *c;
    dlock__lock *l;
    dlock_mutex_t *self; /* the object, for the lost-lock handler */
    int type;
    int robust;
    unsigned lease_ms;
    dlock_lost_fn lost_fn;
    void *lost_arg;
    unsigned calls; /* lock calls in progress (destroy gives EBUSY) */
} dlock__mutex;

static uintptr_t live_magic(const dlock_mutex_t *m) {
    return (uintptr_t)m ^ LIVE_KEY;
}

static int check_name(const char *name, size_t *len) {
    size_t n;
    if (name == NULL) return dlock__seterr(EINVAL, "lock name is NULL");
    n = strnlen(name, DLOCK_NAME_MAX + 1);
    if (n == 0) return dlock__seterr(EINVAL, "lock name is empty");
    if (n > DLOCK_NAME_MAX) return dlock__seterr(EINVAL, "lock name is longer than %d bytes", DLOCK_NAME_MAX);
    *len = n;
    return 0;
}

/* Makes the private state of a mutex.  Nothing is allocated on error. */
static int impl_make(dlock_mutex_t *m, const char *name, const dlock_mutexattr_t *attr, dlock__mutex **out) {
    dlock_mutexattr_t a;
    struct dlock_client *c;
    dlock__mutex *mx;
    size_t len = 0;
    int rc;

    if ((rc = check_name(name, &len)) != 0) return rc;
    if ((rc = dlock__attr_get(attr, &a)) != 0) return rc;
    c = a.__client;
    if (c == NULL && (c = dlock_client_default(&rc)) == NULL) return rc;
    if ((mx = calloc(1, sizeof *mx)) == NULL) return dlock__seterr(ENOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    rc = dlock__lock_get(c, name, len, &mx->l);
    if (rc == 0) c->objects++;
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) {
        free(mx);
        return rc;
    }
    mx->magic = IMPL_MAGIC;
    mx->c = c;
    mx->self = m;
    mx->type = a.__type == DLOCK_MUTEX_DEFAULT ? DLOCK_MUTEX_ERRORCHECK : a.__type;
    mx->robust = a.__robust == DLOCK_MUTEX_ROBUST;
    mx->lease_ms = a.__lease_ms;
    mx->lost_fn = a.__lost_fn;
    mx->lost_arg = a.__lost_arg;
    *out = mx;
    return 0;
}

static void impl_free(dlock__mutex *mx) {
    struct dlock_client *c = mx->c;
    pthread_mutex_lock(&c->mu);
    c->objects--;
    dlock__lock_put(c, mx->l);
    pthread_mutex_unlock(&c->mu);
    mx->magic = 0;
    free(mx);
}

/* The private state of m; for a statically initialised mutex it is made
 * on first use (the first thread to publish it wins). */
static int get(const dlock_mutex_t *cm, dlock__mutex **out) {
    dlock_mutex_t *m = (dlock_mutex_t *)cm;
    dlock__mutex *mx, *expected = NULL;
    uintptr_t magic;
    int rc;

    if (m == NULL) return dlock__seterr(EINVAL, "mutex is NULL");
    magic = __atomic_load_n(&m->__magic, __ATOMIC_ACQUIRE);
    if (magic == live_magic(m)) {
        mx = m->__impl;
    } else if (magic == DLOCK__MAGIC_STATIC) {
        mx = __atomic_load_n((dlock__mutex **)&m->__impl, __ATOMIC_ACQUIRE);
        if (mx == NULL) {
            if ((rc = impl_make(m, m->__static_name, NULL, &mx)) != 0) return rc;
            if (!__atomic_compare_exchange_n((dlock__mutex **)&m->__impl, &expected, mx, 0,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                impl_free(mx);
                mx = expected;
            }
        }
    } else {
        return dlock__seterr(EINVAL, "mutex is not initialised (or was destroyed)");
    }
    if (mx == NULL || mx->magic != IMPL_MAGIC) return dlock__seterr(EINVAL, "mutex is not initialised");
    *out = mx;
    return 0;
}

DLOCK_API int dlock_mutex_init(dlock_mutex_t *m, const char *name, const dlock_mutexattr_t *a) {
    dlock__mutex *mx;
    int rc;
    if (m == NULL) return dlock__seterr(EINVAL, "mutex is NULL");
    if ((rc = impl_make(m, name, a, &mx)) != 0) return rc;
    m->__static_name = NULL;
    m->__impl = mx;
    memset(m->__reserved, 0, sizeof m->__reserved);
    __atomic_store_n(&m->__magic, live_magic(m), __ATOMIC_RELEASE);
    return 0;
}

DLOCK_API int dlock_mutex_destroy(dlock_mutex_t *m) {
    dlock__mutex *mx;
    struct dlock_client *c;
    dlock__lock *l;
    int rc;

    if (m == NULL) return dlock__seterr(EINVAL, "mutex is NULL");
    if (m->__magic == DLOCK__MAGIC_STATIC && m->__impl == NULL) {
        m->__magic = DESTROYED; /* never used: nothing to free */
        return 0;
    }
    if ((rc = get(m, &mx)) != 0) return rc;
    c = mx->c;
    l = mx->l;
    pthread_mutex_lock(&c->mu);
    if (l->owner != NULL && !l->lost && l->lost_m == m) {
        pthread_mutex_unlock(&c->mu);
        return dlock__seterr(EBUSY, "mutex '%.64s' is held by a thread of this process", l->name);
    }
    if (mx->calls > 0) {
        pthread_mutex_unlock(&c->mu);
        return dlock__seterr(EBUSY, "mutex '%.64s' has threads waiting in lock", l->name);
    }
    if (l->lost_m == m) l->lost_m = NULL;
    pthread_mutex_unlock(&c->mu);
    m->__magic = DESTROYED;
    m->__impl = NULL;
    impl_free(mx);
    return 0;
}

/* Is the hold of l by self still valid?  A hold whose validity ran out is
 * marked lost here, at once, in case the renewal thread has not yet seen
 * it; its handler report goes to *rep.  c->mu held. */
static int hold_valid(struct dlock_client *c, dlock__lock *l, const dlock__thread *self,
                      dlock__lost_report *rep) {
    if (self == NULL || l->owner != self || l->lost) return 0;
    if (dlock__now() < l->valid_until) return 1;
    dlock__hold_lost(c, l, rep);
    return 0;
}

static void report(dlock__lost_report *rep) {
    if (rep->fn != NULL) rep->fn(rep->m, rep->name, rep->arg);
    free(rep->name);
    rep->fn = NULL;
    rep->name = NULL;
}

/* Records a hold acquired on the server.  c->mu held. */
static void hold_begin(dlock__mutex *mx, dlock__thread *self, uint64_t fence, dlock__mono sent, int ownerdead) {
    struct dlock_client *c = mx->c;
    dlock__lock *l = mx->l;
    unsigned lease = mx->lease_ms;

    if (l->owner != NULL && !l->lost) dlock__held_remove(c, l); /* stale: the server says it is free */
    l->owner = self;
    memcpy(l->owner_token, self->token, sizeof l->owner_token);
    l->count = 1;
    l->fence = fence;
    l->lease_ms = lease;
    l->acquired = sent;
    l->valid_until = sent + (dlock__mono)(lease - dlock__drift_ms(c, lease)) * DLOCK__MS;
    l->renew_at = sent + (dlock__mono)(lease / 3) * DLOCK__MS;
    l->lost = 0;
    l->robust = mx->robust;
    l->inconsistent = ownerdead;
    l->lost_fn = mx->lost_fn;
    l->lost_arg = mx->lost_arg;
    l->lost_m = mx->self;
    dlock__held_add(c, l);
}

enum { TRY, WAIT };

/* The one core of trylock, lock, timedlock and clocklock.  `deadline` is
 * monotonic (NEVER for lock); `bad_deadline` is an EINVAL to report if
 * the call would have to wait. */
static int lock_core(dlock_mutex_t *m, int mode, dlock__mono deadline, int bad_deadline) {
    dlock__lost_report rep = { 0 };
    dlock__mutex *mx;
    struct dlock_client *c;
    dlock__lock *l;
    dlock__thread *self;
    int rc, waiting = 0;

    if ((rc = get(m, &mx)) != 0) return rc;
    if ((self = dlock__self(&rc)) == NULL) return rc;
    c = mx->c;
    l = mx->l;
    pthread_mutex_lock(&c->mu);
    mx->calls++;

    if (hold_valid(c, l, self, &rep)) {
        if (mx->type == DLOCK_MUTEX_RECURSIVE) {
            if (l->count >= DLOCK_RECURSIVE_MAX) {
                rc = dlock__seterr(EAGAIN, "recursion limit %u reached", DLOCK_RECURSIVE_MAX);
            } else {
                l->count++;
                rc = 0;
            }
            goto out;
        }
        if (mode == TRY) {
            rc = dlock__seterr(EBUSY, "'%.64s' is held by the calling thread", l->name);
            goto out;
        }
        if (mx->type == DLOCK_MUTEX_ERRORCHECK) {
            rc = dlock__seterr(EDEADLK, "'%.64s' is already held by the calling thread", l->name);
            goto out;
        }
        /* NORMAL: deadlock, as POSIX says; a deadline still ends it. */
    } else if (l->owner == self && l->lost) {
        /* The caller's previous hold was lost; this is a fresh attempt. */
        l->owner = NULL;
        l->lost = 0;
    }

    for (;;) {
        dlock__acq acq;
        dlock__mono sent, now, until, bound;
        uint64_t gen;

        if (l->owner != NULL && !l->lost) {
            /* A thread of this process holds it (or, NORMAL, the caller):
             * no round trip; its unlock, loss or exit moves gen. */
            if (mode == TRY) {
                rc = dlock__seterr(EBUSY, "'%.64s' is held by another thread of this process", l->name);
                goto out;
            }
            if (bad_deadline) {
                rc = bad_deadline;
                goto out;
            }
            if (dlock__wait(c, l, l->gen, deadline) == ETIMEDOUT) {
                rc = dlock__seterr(ETIMEDOUT, "'%.64s' was not acquired by the deadline", l->name);
                goto out;
            }
            continue;
        }
        if (waiting) {
            if ((rc = dlock__wait_ready(c, l, deadline)) != 0) {
                if (rc == ETIMEDOUT) rc = dlock__seterr(ETIMEDOUT, "'%.64s' was not acquired by the deadline", l->name);
                goto out;
            }
            if (l->trying || (l->busy_gen == l->gen && l->busy_until > dlock__now())) {
                /* Another waiting thread of this process is asking the
                 * server, or was just told the lock is busy at this
                 * generation: share its answer rather than ask again, so
                 * a release costs one attempt per process, not one per
                 * waiting thread. */
                until = l->trying || l->busy_until > deadline ? deadline : l->busy_until;
                if (dlock__cond_wait_until(&l->cv, &c->mu, until) == ETIMEDOUT && dlock__now() >= deadline) {
                    rc = dlock__seterr(ETIMEDOUT, "'%.64s' was not acquired by the deadline", l->name);
                    goto out;
                }
                continue;
            }
            l->trying = 1;
        }
        gen = l->gen;
        l->users++;
        pthread_mutex_unlock(&c->mu);
        sent = dlock__now();
        bound = dlock__unreachable_deadline(c);
        /* Give up on an unreachable server by the caller's deadline; the
         * connection layer still makes one real attempt. */
        if (mode == WAIT && deadline < bound) bound = deadline;
        rc = c->ops->acquire(c, l, self->token, mx->lease_ms, mx->robust, &acq, bound);
        pthread_mutex_lock(&c->mu);
        l->users--;
        if (waiting) {
            l->trying = 0;
            pthread_cond_broadcast(&l->cv);
        }
        if (rc != 0) {
            if (rc == ENOLCK && mode == WAIT && dlock__now() >= deadline)
                rc = dlock__seterr(ETIMEDOUT, "'%.64s' was not acquired by the deadline (server unreachable)", l->name);
            goto out;
        }
        if (acq.status == DLOCK__ACQ_NOTRECOVERABLE) {
            rc = dlock__seterr(ENOTRECOVERABLE, "'%.64s' was unlocked in an inconsistent state; "
                               "an administrator must reset it", l->name);
            goto out;
        }
        if (acq.status != DLOCK__ACQ_BUSY) {
            /* ACQUIRED, OWNERDEAD, or MINE: an earlier attempt of this
             * thread got the lock but its answer was lost (the script
             * re-leased it). */
            int dead = acq.status == DLOCK__ACQ_OWNERDEAD;
            hold_begin(mx, self, acq.fence, sent, dead);
            rc = dead ? dlock__seterr(EOWNERDEAD, "the previous holder of '%.64s' died holding it; "
                                      "make the state consistent, then call dlock_mutex_consistent", l->name)
                      : 0;
            goto out;
        }
        if (mode == TRY) {
            rc = dlock__seterr(EBUSY, "'%.64s' is held by another owner", l->name);
            goto out;
        }
        if (bad_deadline) {
            rc = bad_deadline;
            goto out;
        }
        now = dlock__now();
        if (now >= deadline) {
            rc = dlock__seterr(ETIMEDOUT, "'%.64s' was not acquired by the deadline", l->name);
            goto out;
        }
        if (!waiting) {
            /* First time busy: subscribe, then try again, since the
             * release may have come before the subscription did. */
            waiting = 1;
            l->waiters++;
            continue;
        }
        if (acq.pttl_ms == -2) continue; /* expired between the calls */
        until = acq.pttl_ms >= 0 ? now + (acq.pttl_ms + 1) * DLOCK__MS : now + 1000 * DLOCK__MS;
        l->busy_gen = gen;
        l->busy_until = until;
        if (until > deadline) until = deadline;
        dlock__wait(c, l, gen, until);
    }
out:
    if (waiting) dlock__wait_done(c, l);
    mx->calls--;
    dlock__lock_maybe_free(c, l);
    pthread_mutex_unlock(&c->mu);
    report(&rep);
    return rc;
}

DLOCK_API int dlock_mutex_lock(dlock_mutex_t *m) {
    return lock_core(m, WAIT, DLOCK__MONO_NEVER, 0);
}

DLOCK_API int dlock_mutex_trylock(dlock_mutex_t *m) {
    return lock_core(m, TRY, 0, 0);
}

DLOCK_API int dlock_mutex_clocklock(dlock_mutex_t *m, clockid_t clock, const struct timespec *abstime) {
    dlock__mono deadline = 0;
    int bad;
    if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC)
        return dlock__seterr(EINVAL, "clock must be CLOCK_REALTIME or CLOCK_MONOTONIC");
    if (abstime == NULL) return dlock__seterr(EINVAL, "abstime is NULL");
    /* As POSIX allows: a bad abstime matters only if the call would wait. */
    bad = dlock__deadline(clock, abstime, &deadline);
    return lock_core(m, WAIT, bad ? 0 : deadline, bad);
}

DLOCK_API int dlock_mutex_timedlock(dlock_mutex_t *m, const struct timespec *abstime) {
    return dlock_mutex_clocklock(m, CLOCK_REALTIME, abstime);
}

DLOCK_API int dlock_mutex_unlock(dlock_mutex_t *m) {
    dlock__lost_report rep = { 0 };
    char token[DLOCK__TOKEN_HEX + 1];
    dlock__mutex *mx;
    struct dlock_client *c;
    dlock__lock *l;
    dlock__thread *self;
    int rc, how, released = 0;

    if ((rc = get(m, &mx)) != 0) return rc;
    self = dlock__self_peek();
    c = mx->c;
    l = mx->l;
    pthread_mutex_lock(&c->mu);
    if (self == NULL || l->owner != self) {
        pthread_mutex_unlock(&c->mu);
        return dlock__seterr(EPERM, "'%.64s' is not held by the calling thread", l->name);
    }
    if (!hold_valid(c, l, self, &rep)) {
        /* Lost: the caller no longer holds it; forget the hold. */
        l->owner = NULL;
        l->lost = 0;
        l->count = 0;
        pthread_mutex_unlock(&c->mu);
        report(&rep);
        return dlock__seterr(EPERM, "the lease of '%.64s' was lost before unlock", l->name);
    }
    if (l->count > 1) {
        l->count--;
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    how = !l->robust ? DLOCK__REL_PLAIN : l->inconsistent ? DLOCK__REL_INCONSISTENT : DLOCK__REL_CLEAN;
    memcpy(token, l->owner_token, sizeof token);
    dlock__held_remove(c, l);
    l->owner = NULL;
    l->count = 0;
    l->inconsistent = 0;
    l->users++;
    pthread_mutex_unlock(&c->mu);
    rc = c->ops->release(c, l, token, how, &released, dlock__unreachable_deadline(c));
    pthread_mutex_lock(&c->mu);
    l->users--;
    l->gen++; /* local waiters try at once */
    pthread_cond_broadcast(&l->cv);
    dlock__lock_maybe_free(c, l);
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) return rc; /* ENOLCK: the lease will expire on its own */
    if (!released) return dlock__seterr(EPERM, "the lease of '%.64s' had run out on the server", l->name);
    return 0;
}

/* Marks the state protected by a robust mutex consistent again, after
 * lock gave EOWNERDEAD; without it, unlock makes the lock unrecoverable
 * for everyone.  Local only: no round trip. */
DLOCK_API int dlock_mutex_consistent(dlock_mutex_t *m) {
    dlock__lost_report rep = { 0 };
    dlock__mutex *mx;
    int rc;
    if ((rc = get(m, &mx)) != 0) return rc;
    pthread_mutex_lock(&mx->c->mu);
    if (!hold_valid(mx->c, mx->l, dlock__self_peek(), &rep) || !mx->l->inconsistent) {
        rc = dlock__seterr(EINVAL, "'%.64s' is not held by the caller in an inconsistent state", mx->l->name);
    } else {
        mx->l->inconsistent = 0;
        rc = 0;
    }
    pthread_mutex_unlock(&mx->c->mu);
    report(&rep);
    return rc;
}

static int holds_locked(const dlock_mutex_t *m, uint64_t *fence) {
    dlock__lost_report rep = { 0 };
    dlock__mutex *mx;
    dlock__thread *self;
    int ok;
    if (get(m, &mx) != 0) return 0;
    self = dlock__self_peek();
    pthread_mutex_lock(&mx->c->mu);
    ok = hold_valid(mx->c, mx->l, self, &rep);
    if (ok && fence) *fence = mx->l->fence;
    pthread_mutex_unlock(&mx->c->mu);
    report(&rep);
    return ok;
}

DLOCK_API int dlock_mutex_holds(const dlock_mutex_t *m) {
    return holds_locked(m, NULL);
}

DLOCK_API uint64_t dlock_mutex_fence(const dlock_mutex_t *m) {
    uint64_t f = 0;
    return holds_locked(m, &f) ? f : 0;
}

DLOCK_API const char *dlock_mutex_name(const dlock_mutex_t *m) {
    dlock__mutex *mx;
    if (get(m, &mx) != 0) return NULL;
    return mx->l->name;
}

/* The administrative reset (the CLI's `dlock break`).  Deletes the lock
 * whoever holds it: its holder's next renewal is refused and it learns
 * the hold was lost.  DLOCK_BREAK_OWNERDEAD keeps a robust lock's marker,
 * so its next acquirer gets EOWNERDEAD; DLOCK_BREAK_RESET forgets the
 * marker too, making an unrecoverable lock usable again. */
DLOCK_API int dlock_break(dlock_client_t *c, const char *name, int how, int *was_held) {
    dlock__lock *l;
    size_t len = 0;
    int rc, held = 0;

    if (how != DLOCK_BREAK_OWNERDEAD && how != DLOCK_BREAK_RESET)
        return dlock__seterr(EINVAL, "how must be DLOCK_BREAK_OWNERDEAD or DLOCK_BREAK_RESET");
    if ((rc = check_name(name, &len)) != 0) return rc;
    if (c == NULL && (c = dlock_client_default(&rc)) == NULL) return rc;
    pthread_mutex_lock(&c->mu);
    rc = dlock__lock_get(c, name, len, &l);
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) return rc;
    rc = c->ops->reset(c, l, how == DLOCK_BREAK_RESET ? DLOCK__RESET_FULL : DLOCK__RESET_BREAK, &held,
                       dlock__unreachable_deadline(c));
    pthread_mutex_lock(&c->mu);
    dlock__lock_put(c, l);
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && was_held != NULL) *was_held = held;
    return rc;
}

/* A fenced write through the lock's own deployment: see fenced_set_lua.
 * The caller must hold m; the write carries the fence of that hold. */
DLOCK_API int dlock_fenced_set(const dlock_mutex_t *m, const char *key, const void *value, size_t len) {
    dlock__mutex *mx;
    uint64_t fence = 0;
    size_t keylen;
    int rc, written = 0;

    if ((rc = get(m, &mx)) != 0) return rc;
    if (key == NULL || (keylen = strlen(key)) == 0) return dlock__seterr(EINVAL, "key is NULL or empty");
    if (value == NULL && len > 0) return dlock__seterr(EINVAL, "value is NULL");
    if (!holds_locked(m, &fence)) return dlock__seterr(EPERM, "the calling thread does not hold '%.64s'", mx->l->name);
    rc = mx->c->ops->fenced_set(mx->c, key, keylen, fence, value, len, &written, dlock__unreachable_deadline(mx->c));
    if (rc != 0) return rc;
    if (!written) return dlock__seterr(ESTALE, "'%.64s': a write with a newer fence already reached %.64s", mx->l->name, key);
    return 0;
}
