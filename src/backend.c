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
#include <sys/time.h>
#include <unistd.h>

#include "dlock-int.h"

#define RENEW_BATCH 256

static int bad_reply(struct dlock_client *c, const char *what, const redisReply *r) {
    if (r != NULL && r->type == REDIS_REPLY_ERROR)
        return dlock__seterr(EPROTO, "%s: %s failed: %.200s", c->conf.redacted_url, what, r->str);
    return dlock__seterr(EPROTO, "%s: unexpected answer to %s", c->conf.redacted_url, what);
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
    char guard[16], epoch[160];
    const char *args[11];
    size_t lens[11];
    redisReply *r;
    int rc;

    snprintf(lease, sizeof lease, "%u", lease_ms);
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    snprintf(tid, sizeof tid, "%lu", self ? self->tid : 0ul);
    args[0] = l->key; lens[0] = l->keylen;
    args[1] = l->fence_key; lens[1] = l->fence_keylen;
    args[2] = l->state_key; lens[2] = l->state_keylen;
    /* The epoch key is one per deployment (single server). */
    snprintf(epoch, sizeof epoch, "%sepoch", c->conf.prefix);
    snprintf(guard, sizeof guard, "%u", c->conf.restart_guard_ms);
    args[3] = epoch; lens[3] = strlen(epoch);
    args[4] = token; lens[4] = strlen(token);
    args[5] = lease; lens[5] = strlen(lease);
    args[6] = host; lens[6] = strlen(host);
    args[7] = pid; lens[7] = strlen(pid);
    args[8] = tid; lens[8] = strlen(tid);
    args[9] = robust ? "1" : "0"; lens[9] = 1;
    args[10] = guard; lens[10] = strlen(guard);
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_ACQUIRE, &r, deadline, 4, 11, args, lens)) != 0) return rc;
    if (dlock__acq_parse(r, out) != 0) rc = bad_reply(c, "acquire", r);
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
    if (dlock__flag_parse(r, released) != 0) rc = bad_reply(c, "release", r);
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
    if (dlock__flag_parse(r, was_held) != 0) rc = bad_reply(c, "reset", r);
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
        if (dlock__flag_parse(r, &rn[i].result) != 0) {
            if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) *noscript = 1;
            rn[i].result = -1;
        }
        freeReplyObject(r);
    }
    return 0;
}

static int single_renew(struct dlock_client *c, dlock__renewal *rn, size_t n, dlock__mono deadline) {
    size_t i, done = 0;
    int rc = 0, tries = 0;
    int64_t left_ms;
    struct timeval tv;

    for (i = 0; i < n; i++) rn[i].result = -1;
    while (done < n) {
        size_t k = n - done < RENEW_BATCH ? n - done : RENEW_BATCH;
        int noscript = 0;
        if (c->renew_conn == NULL &&
            (rc = dlock__conn_open(c, &c->renew_conn, c->conf.connect_timeout_ms)) != 0)
            return rc == EACCES ? ENOLCK : rc;
        /* Wait for answers no longer than the locks stay valid. */
        left_ms = (deadline - dlock__now()) / DLOCK__MS;
        if (left_ms > (int64_t)c->conf.command_timeout_ms) left_ms = c->conf.command_timeout_ms;
        if (left_ms < 5) left_ms = 5;
        tv.tv_sec = (time_t)(left_ms / 1000);
        tv.tv_usec = (suseconds_t)(left_ms % 1000) * 1000;
        redisSetTimeout(c->renew_conn->ctx, tv);
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

static int single_fenced_set(struct dlock_client *c, const char *key, size_t keylen, uint64_t fence,
                             const void *value, size_t len, int *written, dlock__mono deadline) {
    char f[24];
    const char *args[3];
    size_t lens[3];
    redisReply *r;
    int rc;

    snprintf(f, sizeof f, "%llu", (unsigned long long)fence);
    args[0] = key; lens[0] = keylen;
    args[1] = f; lens[1] = strlen(f);
    args[2] = len ? value : ""; lens[2] = len;
    if ((rc = dlock__script_run(c, DLOCK__SCRIPT_FENCED_SET, &r, deadline, 1, 3, args, lens)) != 0) return rc;
    if (dlock__flag_parse(r, written) != 0) rc = bad_reply(c, "fenced write", r);
    freeReplyObject(r);
    return rc;
}

const dlock__backend_ops dlock__single_backend = {
    .acquire = single_acquire,
    .release = single_release,
    .renew = single_renew,
    .reset = single_reset,
    .fenced_set = single_fenced_set,
};
