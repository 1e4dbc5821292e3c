/* backend.c -- the backend interface, and the single-server backend.
 *
 * A backend turns "acquire / release / renew this lock for this token"
 * into requests to one deployment.  The mutex state machine, the waiting
 * path and the renewal thread only ever talk to dlock__backend_ops, so
 * Sentinel, Cluster and a Redlock quorum can sit behind the same calls.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock-int.h"

#define RENEW_BATCH 256

static int bad_reply(struct dlock_client *c, const char *what, const redisReply *r) {
    if (r != NULL && r->type == REDIS_REPLY_ERROR)
        return dlock__seterr(EPROTO, "%s: %s failed: %.200s", c->conf.redacted_url, what, r->str);
    return dlock__seterr(EPROTO, "%s: unexpected answer to %s", c->conf.redacted_url, what);
}

static int parse_u64(const char *s, size_t n, uint64_t *out) {
    uint64_t v = 0;
    size_t i;
    if (n == 0 || n > 20) return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10) return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

static char host[256];
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_get(void) {
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "unknown");
    host[sizeof host - 1] = '\0';
}

/* This host's name, for the holder metadata stored with each lock. */
static const char *host_name(void) {
    pthread_once(&host_once, host_get);
    return host;
}

static int single_acquire(struct dlock_client *c, dlock__lock *l, const char *token,
                          unsigned lease_ms, int robust, dlock__acq *out, dlock__mono deadline) {
    char lease[16], pid[16], tid[24];
    const char *host = host_name();
    dlock__thread *self = dlock__self_peek();
    const char *args[9];
    size_t lens[9];
    redisReply *r;
    int rc;

    snprintf(lease, sizeof lease, "%u", lease_ms);
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    snprintf(tid, sizeof tid, "%lu", self ? self->tid : 0ul);
    args[0] = l->key; lens[0] = l->keylen;
    args[1] = l->fence_key; lens[1] = l->fence_keylen;
    args[2] = l->state_key; lens[2] = l->state_keylen;
    args[3] = token; lens[3] = strlen(token);
    args[4] = lease; lens[4] = strlen(lease);
    args[5] = host; lens[5] = strlen(host);
    args[6] = pid; lens[6] = strlen(pid);
    args[7] = tid; lens[7] = strlen(tid);
    args[8] = robust ? "1" : "0"; lens[8] = 1;
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_ACQUIRE, &r, deadline, 3, 9, args, lens)) != 0) return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER) {
        rc = bad_reply(c, "acquire", r);
        freeReplyObject(r);
        return rc;
    }
    switch (r->element[0]->integer) {
    case 1:
    case 2:
    case 4:
        if (r->element[1]->type != REDIS_REPLY_STRING ||
            parse_u64(r->element[1]->str, r->element[1]->len, &out->fence) != 0 || out->fence == 0) {
            rc = bad_reply(c, "acquire", r);
            break;
        }
        out->status = r->element[0]->integer == 1   ? DLOCK__ACQ_ACQUIRED
                      : r->element[0]->integer == 2 ? DLOCK__ACQ_MINE
                                                    : DLOCK__ACQ_OWNERDEAD;
        out->pttl_ms = -1;
        rc = 0;
        break;
    case 3:
        out->status = DLOCK__ACQ_NOTRECOVERABLE;
        out->fence = 0;
        out->pttl_ms = -1;
        rc = 0;
        break;
    case 0:
        if (r->element[1]->type != REDIS_REPLY_INTEGER) {
            rc = bad_reply(c, "acquire", r);
            break;
        }
        out->status = DLOCK__ACQ_BUSY;
        out->pttl_ms = r->element[1]->integer;
        rc = 0;
        break;
    default:
        rc = bad_reply(c, "acquire", r);
    }
    freeReplyObject(r);
    return rc;
}

static const char *const release_how[] = { "plain", "clean", "inconsistent", "dead" };

static int single_release(struct dlock_client *c, dlock__lock *l, const char *token, int how,
                          int *released, dlock__mono deadline) {
    const char *args[5];
    size_t lens[5];
    redisReply *r;
    int rc;

    args[0] = l->key; lens[0] = l->keylen;
    args[1] = l->state_key; lens[1] = l->state_keylen;
    args[2] = token; lens[2] = strlen(token);
    args[3] = l->key; lens[3] = l->keylen; /* the release channel */
    args[4] = release_how[how]; lens[4] = strlen(args[4]);
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_RELEASE, &r, deadline, 2, 5, args, lens)) != 0) return rc;
    if (r->type != REDIS_REPLY_INTEGER) {
        rc = bad_reply(c, "release", r);
    } else {
        *released = r->integer == 1;
        rc = 0;
    }
    freeReplyObject(r);
    return rc;
}

static int single_reset(struct dlock_client *c, dlock__lock *l, int how, int *was_held, dlock__mono deadline) {
    const char *args[4];
    size_t lens[4];
    redisReply *r;
    int rc;

    args[0] = l->key; lens[0] = l->keylen;
    args[1] = l->state_key; lens[1] = l->state_keylen;
    args[2] = l->key; lens[2] = l->keylen; /* the release channel */
    args[3] = how == DLOCK__RESET_FULL ? "reset" : "break"; lens[3] = 5;
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_RESET, &r, deadline, 2, 4, args, lens)) != 0) return rc;
    if (r->type != REDIS_REPLY_INTEGER) {
        rc = bad_reply(c, "reset", r);
    } else {
        *was_held = r->integer == 1;
        rc = 0;
    }
    freeReplyObject(r);
    return rc;
}

/* Sends one batch of renewals and reads their answers.  Returns 0, or
 * ENOLCK when the connection broke (the caller drops it). */
static int renew_batch(struct dlock_client *c, redisContext *ctx, dlock__renewal *rn, size_t n, int *noscript) {
    char leases[RENEW_BATCH][16];
    size_t i;

    for (i = 0; i < n; i++) {
        const char *args[3];
        size_t lens[3];
        snprintf(leases[i], sizeof leases[i], "%u", rn[i].lease_ms);
        args[0] = rn[i].key; lens[0] = rn[i].keylen;
        args[1] = rn[i].token; lens[1] = strlen(rn[i].token);
        args[2] = leases[i]; lens[2] = strlen(leases[i]);
        if (dlock__script_append(ctx, DLOCK__SCRIPT_RENEW, 1, 3, args, lens) != 0)
            return dlock__seterr(ENOMEM, "out of memory");
    }
    for (i = 0; i < n; i++) {
        void *p = NULL;
        redisReply *r;
        if (redisGetReply(ctx, &p) != REDIS_OK || p == NULL)
            return dlock__seterr(ENOLCK, "%s: renewal: %s", c->conf.redacted_url, ctx->errstr);
        r = p;
        if (r->type == REDIS_REPLY_INTEGER) {
            rn[i].result = r->integer == 1 ? 1 : 0;
        } else {
            if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) *noscript = 1;
            rn[i].result = -1;
        }
        freeReplyObject(r);
    }
    return 0;
}

static int single_renew(struct dlock_client *c, dlock__renewal *rn, size_t n) {
    size_t i, done = 0;
    int rc = 0, tries = 0;

    for (i = 0; i < n; i++) rn[i].result = -1;
    while (done < n) {
        size_t k = n - done < RENEW_BATCH ? n - done : RENEW_BATCH;
        int noscript = 0;
        if (c->renew_conn == NULL &&
            (rc = dlock__conn_open(c, &c->renew_conn, c->conf.connect_timeout_ms)) != 0)
            return rc == EACCES ? ENOLCK : rc;
        rc = renew_batch(c, c->renew_conn->ctx, rn + done, k, &noscript);
        if (rc != 0) {
            dlock__conn_close(c->renew_conn);
            c->renew_conn = NULL;
            return rc;
        }
        if (noscript && tries++ == 0) {
            /* A restarted server: load the scripts, redo this batch. */
            if (dlock__script_load_all(c->renew_conn->ctx) != 0) {
                dlock__conn_close(c->renew_conn);
                c->renew_conn = NULL;
                return dlock__seterr(ENOLCK, "%s: cannot load scripts", c->conf.redacted_url);
            }
            continue;
        }
        done += k;
        tries = 0;
    }
    return 0;
}

const dlock__backend_ops dlock__single_backend = {
    .acquire = single_acquire,
    .release = single_release,
    .renew = single_renew,
    .reset = single_reset,
};
