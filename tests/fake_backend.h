/* fake_backend.h -- a scripted in-memory server behind the backend ops
 * table (src/backend/backend.h), for unit tests of the lock core with no
 * redis-server and no socket (tests/test_core_unit.c).
 *
 * The fake keeps a table of locks by key (owner token, fence, lease end on
 * the monotonic clock, robust state, readers, the wait queue), answers as
 * the Lua scripts do, counts the calls of each op, and plays a script of
 * faults: each call takes the first fault queued for its op.  A client
 * made by fk_client_new is an ordinary client (its URL a closed loopback
 * port it never connects to) whose ops point here, and whose subscriber
 * thread is the fake's: it confirms every subscription at once and turns
 * what the fake server publishes (a release, a grant, "wanted") into what
 * notify.c would make of it.
 */
#ifndef DLT_FAKE_BACKEND_H
#define DLT_FAKE_BACKEND_H

#include <stdint.h>

#include <dlock.h>

#include "core/core.h"

/* The ops counted and scripted. */
enum { FK_ACQUIRE, FK_RELEASE, FK_RENEW, FK_RESET, FK_NOPS };

/* Faults: what the next call of an op does instead of (or besides) its
 * normal answer. */
enum {
    FK_ENOLCK,         /* no answer: ENOLCK, the request never went out (arg 1: only at the deadline) */
    FK_UNKNOWN,        /* the request is served, its answer lost: ENOLCK, outcome unknown */
    FK_DELAY,          /* served, answered arg ms later */
    FK_BUSY,           /* acquire: BUSY with pttl arg */
    FK_OWNERDEAD,      /* acquire: served, answered OWNERDEAD */
    FK_NOTRECOVERABLE, /* acquire: NOTRECOVERABLE */
    FK_HELDBACK,       /* acquire: HELDBACK */
    FK_MINE,           /* acquire: served, answered MINE (an earlier attempt's hold) */
    FK_REFUSE          /* release: not the token's (released 0); renew: refused (result 0) */
};

/* Empties the server, the script and the counters; queues: the ops
 * table's `queues` (1: one server's wait queue; 0: Redlock's none). */
void fk_reset(int queues);
void fk_script(int op, int fault, long arg);
/* Every renewal refused from now on (1) or not (0). */
void fk_renew_refuse(int on);
int fk_count(int op);
int fk_last_flags(void);      /* the last acquire's DLOCK__F_* */
int fk_last_how(void);        /* the last release's DLOCK__REL_* */
/* The token of the last release (DLOCK__OWNER_LEN + 1 bytes into out). */
void fk_last_release_token(char *out);

/* The server's view of the lock `name` (prefix "dlock:"). */
int fk_owner(const char *name, char *token_out); /* 1 held exclusively (token copied), else 0 */
uint64_t fk_fence(const char *name);            /* the last fence issued */
int fk_queued(const char *name);                /* tokens in its wait queue */
/* Another owner (of another process): takes the lock if free (0) or
 * finds it busy (EBUSY: then "wanted" is published if its holder caches
 * it, and with `queue` it joins the wait queue); releases it (0 or
 * EPERM), handing it to the queue's head if any. */
int fk_other_acquire(const char *name, const char *token, unsigned lease_ms, int robust, int queue);
int fk_other_release(const char *name, const char *token, int how);

/* The fake's ops table, for a test that runs the same requests through it
 * and through a real deployment's ops (test_lua_fake.c: the two must
 * answer alike). */
const dlock__backend_ops *fk_ops_table(void);

/* A client on the fake: unreachable_ms and breaker_ms as in
 * dlock_config_t (0: its defaults). */
int fk_client_new(dlock_client_t **out, unsigned unreachable_ms, unsigned breaker_ms);
/* Stops its subscriber and destroys it; the return of dlock_client_destroy. */
int fk_client_free(dlock_client_t *c);
/* Waits up to timeout_ms until l's release channel is subscribed (the
 * fake subscriber confirms at once); 1 if it is. */
int fk_sub_wait(dlock_client_t *c, const char *name, int timeout_ms);

#endif /* DLT_FAKE_BACKEND_H */
