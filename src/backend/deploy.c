/* deploy.c -- a deployment's life: made from its configuration (one
 * server, Sentinel, a Redis Cluster, a Redlock quorum), with its members
 * (a Cluster's nodes, a Redlock's masters: single-server backends of
 * their own), carried through fork, freed.
 *
 * The caller's mutex guards the deployment (its member list, the cluster
 * map, its node's pool); each member has its own for its own pool.  At
 * fork the caller holds its mutex and takes every member's through
 * dlock__backend_fork_prepare, so that the child finds no pool half
 * changed.  A deployment of one server can connect ahead
 * (dlock__backend_warm) while its caller waits for something else.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"

/* The ops and hooks that a configuration's kind calls for. */
static void kind_set(dlock__backend *b) {
    b->ops = b->node.conf.kind == DLOCK__BACKEND_REDLOCK   ? &dlock__redlock_backend
             : b->node.conf.kind == DLOCK__BACKEND_CLUSTER ? &dlock__cluster_backend
                                                            : &dlock__single_backend;
    if (b->parent != NULL && b->parent->node.conf.kind == DLOCK__BACKEND_CLUSTER) b->node.hooks = &dlock__cluster_hooks;
    if (b->parent != NULL && b->parent->node.conf.kind == DLOCK__BACKEND_REDLOCK) b->node.hooks = &dlock__redlock_hooks;
}

/* What the configuration is in b->node.conf, b->parent set: the rest. */
static int finish(dlock__backend *b, pthread_mutex_t *mu) {
    int rc;
    b->node.mu = mu;
    b->node.up = b;
    b->node.one_connect = b->node.member = b->parent != NULL;
    kind_set(b);
    dlock__hostrec_init(&b->node);
    if ((rc = dlock__tls_ctx_make(&b->node)) != 0) return rc;
    if ((b->epoch_key = malloc(strlen(b->node.conf.prefix) + 6)) == NULL) {
        dlock__tls_ctx_free(&b->node);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    sprintf(b->epoch_key, "%sepoch", b->node.conf.prefix);
    return 0;
}

/* Redlock, Cluster: one member per node the URL names (a cluster gets
 * more as its slot map names them: cluster.c). */
static int members_make(dlock__backend *b) {
    size_t i;
    if (b->node.conf.kind != DLOCK__BACKEND_REDLOCK && b->node.conf.kind != DLOCK__BACKEND_CLUSTER) return 0;
    if ((b->members = calloc(b->node.conf.nnodes, sizeof *b->members)) == NULL)
        return dlock__seterr(ENOMEM, "out of memory");
    for (i = 0; i < b->node.conf.nnodes; i++) {
        int rc = dlock__backend_member(&b->members[i], b, &b->node.conf.nodes[i]);
        if (rc != 0) return rc;
        b->nmembers++;
    }
    return 0;
}

/* A client that does not check its server's certificate talks to anyone
 * on the path who answers TLS: said on stderr and in the debug log, with
 * the URL as shown (no password), once per process for each such URL (a
 * deployment's members share its configuration; `dlock exec` makes two
 * clients of one URL; a program may make clients again and again). */
static pthread_mutex_t warned_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t warned[16]; /* FNV-1a of the URLs warned about */
static unsigned nwarned;

static int first_warning(const char *url) {
    uint64_t h = 1469598103934665603ull;
    unsigned i;
    int first = 1;
    for (; *url; url++) h = (h ^ (unsigned char)*url) * 1099511628211ull;
    pthread_mutex_lock(&warned_mu);
    for (i = 0; i < nwarned && first; i++) first = warned[i] != h;
    if (first && nwarned < sizeof warned / sizeof warned[0]) warned[nwarned++] = h;
    pthread_mutex_unlock(&warned_mu);
    return first;
}

static void warn_unverified(const dlock__conf *cf) {
    static const char what[] = "TLS certificate verification is off (tls_verify=0): the connection is "
                               "encrypted, but anyone on the path can pose as the server";
    if (!cf->tls || cf->tls_verify || !first_warning(cf->redacted_url)) return;
    fprintf(stderr, "dlock: warning: %s: %s\n", cf->redacted_url, what);
    dlock__debug("%s: warning: %s", cf->redacted_url, what);
}

int dlock__backend_init(dlock__backend *b, const dlock_config_t *cfg, pthread_mutex_t *mu) {
    int rc;
    memset(b, 0, sizeof *b);
    if ((rc = dlock__conf_parse(&b->node.conf, cfg)) != 0) return rc;
    if ((rc = finish(b, mu)) != 0) {
        dlock__conf_free(&b->node.conf);
        return rc;
    }
    if ((rc = members_make(b)) != 0) {
        dlock__backend_free(b);
        return rc;
    }
    warn_unverified(&b->node.conf);
    return 0;
}

int dlock__backend_member(dlock__backend **out, dlock__backend *parent, const dlock__endpoint *ep) {
    dlock__backend *m = calloc(1, sizeof *m);
    int rc;
    if (m == NULL) return dlock__seterr(ENOMEM, "out of memory");
    m->parent = parent;
    if ((rc = dlock__conf_member(&m->node.conf, &parent->node.conf, ep)) != 0) {
        free(m);
        return rc;
    }
    if (pthread_mutex_init(&m->own_mu, NULL) != 0) {
        dlock__conf_free(&m->node.conf);
        free(m);
        return dlock__seterr(ENOMEM, "out of memory");
    }
    if ((rc = finish(m, &m->own_mu)) != 0) {
        pthread_mutex_destroy(&m->own_mu);
        dlock__conf_free(&m->node.conf);
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void dlock__backend_free(dlock__backend *b) {
    size_t i;
    for (i = 0; i < b->nmembers; i++) {
        dlock__backend_free(b->members[i]);
        free(b->members[i]);
    }
    free(b->members);
    b->members = NULL;
    b->nmembers = 0;
    if (b->renew_conn != NULL) dlock__conn_close(b->renew_conn);
    b->renew_conn = NULL;
    dlock__pool_flush(&b->node);
    dlock__late_flush(&b->node, 0);
    dlock__cluster_free(b);
    free(b->epoch_key);
    b->epoch_key = NULL;
    dlock__tls_ctx_free(&b->node);
    dlock__conf_free(&b->node.conf);
    if (b->parent != NULL) pthread_mutex_destroy(&b->own_mu);
}

void dlock__backend_renew_done(dlock__backend *b) {
    if (b->renew_conn != NULL) dlock__conn_close(b->renew_conn);
    b->renew_conn = NULL;
}

void dlock__backend_fork_prepare(dlock__backend *b) {
    size_t i;
    for (i = 0; i < b->nmembers; i++) {
        pthread_mutex_lock(&b->members[i]->own_mu);
        dlock__backend_fork_prepare(b->members[i]);
    }
}

void dlock__backend_fork_parent(dlock__backend *b) {
    size_t i;
    for (i = 0; i < b->nmembers; i++) {
        dlock__backend_fork_parent(b->members[i]);
        pthread_mutex_unlock(&b->members[i]->own_mu);
    }
}

void dlock__backend_bury(dlock__backend *b, dlock__conn *cn) {
    if (cn == NULL) return;
    if (cn->ctx != NULL && cn->ctx->fd >= 0) close(cn->ctx->fd);
    cn->next = b->buried;
    b->buried = cn;
}

void dlock__backend_settle(dlock__backend *b, dlock__mono before, dlock__mono held_before, dlock__mono deadline) {
    dlock__owed_settle(&b->node, before, held_before, deadline);
}

void dlock__backend_fork_child(dlock__backend *b) {
    size_t i;
    dlock__owed_forget(&b->node);
    while (b->node.idle != NULL) {
        dlock__conn *cn = b->node.idle;
        b->node.idle = cn->next;
        dlock__conn_abandon(cn);
    }
    b->node.nidle = 0;
    dlock__late_flush(&b->node, 1);
    /* The renewal connection belongs to a thread that may have been in
     * the middle of hiredis calls on it (it does I/O without the mutex):
     * its state may be half-updated, so it is not freed, only closed. */
    dlock__backend_bury(b, b->renew_conn);
    b->renew_conn = NULL;
    for (i = 0; i < b->nmembers; i++) {
        dlock__backend_fork_child(b->members[i]);
        pthread_mutex_unlock(&b->members[i]->own_mu); /* taken by fork_prepare */
    }
}

/* Connecting ahead is worth at most this long: the wait it overlaps (the
 * random source's set-up) is about a millisecond; a connection slower
 * than that is made by the request itself, as always. */
#define WARM_MS 2

/* One attempt, within WARM_MS, at an idle connection to b's server,
 * unless there is one already, its breaker or the host-wide record says
 * the server is down (a request would not be sent: no connect either),
 * or it is a TLS, Cluster or Redlock deployment (a TLS handshake alone
 * takes longer; the others connect per member).  Its failure is nobody's
 * business: the request that follows connects and reports as it always
 * does.  The caller's last error is left as it was. */
void dlock__backend_warm(dlock__backend *b) {
    dlock__node *n = &b->node;
    dlock__conn *cn = NULL;
    dlock__mono end, since = 0, probe = 0;
    char saved[512];
    int idle, host = 0;
    if (b->ops != &dlock__single_backend || n->conf.tls || b->parent != NULL) return;
    pthread_mutex_lock(n->mu);
    idle = n->idle != NULL;
    pthread_mutex_unlock(n->mu);
    if (idle || dlock__breaker_state(n, &host, &since, &probe)) return;
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    end = dlock__call_end_set(dlock__now() + (dlock__mono)WARM_MS * DLOCK__MS);
    if (dlock__pool_get(n, &cn, dlock__now()) == 0) dlock__pool_put(n, cn, 0);
    dlock__call_end_set(end);
    dlock__restoreerr(saved);
}
